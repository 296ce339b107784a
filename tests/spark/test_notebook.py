"""The `%rpl_sql` magic: in-process without Spark (control-plane statements only), and
tests/notebooks/demo.ipynb executed by a real Jupyter kernel (this interpreter) with nbclient.

The kernel builds a plain `SparkSession.builder.getOrCreate()` session (no PYSPARK_PYTHON, no PYTHONPATH),
loads `%load_ext rpl_sql` and runs `%%rpl_sql`
cells; the test checks the outputs against the Python API and the reference evaluator.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "demo.ipynb"
KERNEL = "rpl-sql-test"


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A kernelspec for sys.executable in tmp, and an env that keeps Jupyter, IPython and Spark state in tmp."""
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    prefix = tmp_path / "jupyter"
    proc = subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix),
                           "--name", KERNEL, "--display-name", "rpl_sql test"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # As a user's kernel: no PYSPARK_PYTHON, no PYTHONPATH, and `python3` on PATH is not this interpreter
    # (the one with rpl_sql), so Spark's workers would not find the package unless rpl_sql sees to it.
    here = os.path.dirname(sys.executable)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.realpath(p) != os.path.realpath(here))
    env = {
        "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "RPL_SQL_WAREHOUSE": str(tmp_path / "wh"),
        "PATH": path,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
              "PYTHONPATH"):
        monkeypatch.delenv(k, raising=False)
    return nbclient, tmp_path


def _text(output: dict) -> str:
    if output["output_type"] == "stream":
        return output["text"]
    if output["output_type"] == "error":
        return "\n".join(output["traceback"])
    data = output.get("data", {})
    return data.get("text/html", "") + data.get("text/plain", "")


@pytest.mark.spark
def test_demo_notebook(kernel_env):
    import nbformat

    from rpl_sql import MySQLError, Session
    from rpl_sql.filters.evaluate import RowEvent, decide, rewrite_db

    nbclient, tmp = kernel_env
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=600, startup_timeout=180,
                                     resources={"metadata": {"path": str(tmp)}})
    t0 = time.monotonic()
    client.execute()
    print(f"notebook executed in {time.monotonic() - t0:.1f} s")

    code = [c for c in nb.cells if c.cell_type == "code"]
    for c in code:  # no JVM noise in the cells: function replacements, namespaces, the console progress bar
        streams = "".join(o.get("text", "") for o in c.outputs if o["output_type"] == "stream")
        assert "WARN" not in streams and "[Stage" not in streams, streams
        errors = [o for o in c.outputs if o["output_type"] == "error"]
        if "raises-exception" in c.metadata.get("tags", []):
            assert errors, f"cell should have failed:\n{c.source}"
        else:
            assert not errors, "\n".join(_text(o) for o in errors)

    setup, view, events, decisions, status, follow, failing = (code[i] for i in (2, 3, 4, 5, 6, 8, 9))
    # configuration cell: each statement reported, the deprecated syntax warned on stderr
    streams = {name: "".join(o["text"] for o in setup.outputs if o.get("name") == name)
               for name in ("stdout", "stderr")}
    assert streams["stdout"].count("Query OK, 0 rows affected") == 5
    assert "Warning (Code 1287): 'CHANGE MASTER' is deprecated" in streams["stderr"]


    from rpl_sql.server.performance_schema import applier_filters

    session = Session(str(tmp / "wh"))
    # the state the middle cells saw: another client, the failing cell and apply_events made one commit each after
    version = session.store.version() - 3
    state = session.store.load_version(version)
    # the view cell shows the P_S rows (HTML table of the returned pandas DataFrame)
    (result,) = [o for o in view.outputs if o["output_type"] == "execute_result"]
    html = result["data"]["text/html"]
    assert html.count("</tr>") == 1 + len(applier_filters(state))  # header row + one per filter
    for ch, name, rule, by, *_ in applier_filters(state):
        for value in (ch, name, rule, by):
            assert value.replace("'", "&#x27;") in html or value in html

    # should_apply / rewrite_db in Spark agree with the reference evaluator
    printed = "".join(o["text"] for o in decisions.outputs if o.get("name") == "stdout")
    rows = json.loads(printed)
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for r in rows:
        filters = state.channel(r["channel"]).filters
        expected = decide(filters, RowEvent(r["db"], r["tbl"]), state.lower_case_table_names, state.filter_mode)
        assert r["applied"] is expected.apply, r
        assert r["target_db"] == rewrite_db(filters, r["db"], state.lower_case_table_names), r
    assert [r["applied"] for r in rows] == [True, False, False, True, True, True]

    # line magic value: SHOW REPLICA STATUS as a pandas DataFrame
    (result,) = [o for o in status.outputs if o["output_type"] == "execute_result"]
    plain = result["data"]["text/plain"]
    assert "source-2" in plain and "3307" in plain and "(legacy,sales)" in plain

    # after another client's change, the next cell's functions decide by the new rules
    (result,) = [o for o in follow.outputs if o["output_type"] == "execute_result"]
    assert re.search(r"0\s+True\s+False", result["data"]["text/plain"]), result["data"]["text/plain"]

    # the failing cell: first statement ran, the error shown MySQL-style, nothing after it ran
    (error,) = [o for o in failing.outputs if o["output_type"] == "error"]
    with pytest.raises(MySQLError) as raised:
        session.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (x) FOR CHANNEL 'nope'")
    e = raised.value
    assert error["traceback"] == [f"ERROR {e.code} ({e.sqlstate}): {e.message}", f"Hint: {e.hint}"]
    assert re.match(r"ERROR \d+ \([0-9A-Z]{5}\): ", error["traceback"][0])
    assert "Query OK" in "".join(o["text"] for o in failing.outputs if o.get("name") == "stdout")
    ch2 = {r[1]: r[2] for r in session.filters() if r[0] == "ch2"}
    assert ch2.get("REPLICATE_IGNORE_DB") == "scratch" and "REPLICATE_DO_DB" not in ch2

    # the filter tooling: EXPLAIN's trace, the explain table function, the lint, the per-rule hit counters
    explain, udtf, warnings, _, hits = code[10:15]
    plain = "".join(o["data"]["text/plain"] for o in explain.outputs if o["output_type"] == "execute_result")
    assert "REPLICATE_REWRITE_DB" in plain and "DECISION" in plain and "APPLY" in plain, plain
    plain = "".join(o["data"]["text/plain"] for o in udtf.outputs if o["output_type"] == "execute_result")
    assert "REPLICATE_DO_DB" in plain and "IGNORE" in plain, plain  # ch1's do-db is (hr) by then
    assert any(o["output_type"] == "execute_result" for o in warnings.outputs)
    plain = "".join(o["data"]["text/plain"] for o in hits.outputs if o["output_type"] == "execute_result")
    assert re.search(r"ch1\s+REPLICATE_DO_DB\s+hr\s+1", plain), plain


# ---------------------------------------------------------------- in-process, no Spark






