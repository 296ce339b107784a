"""rpl_sql over Spark Connect: a local Connect server started from pyspark's own jars, on 127.0.0.1.

The client runs in a subprocess: creating a remote session sets SPARK_CONNECT_MODE_ENABLED for the whole
process (and refuses to start next to a classic SparkContext), which would break the shared `spark` fixture.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.sparkjvm import spark_jvm_env

pytestmark = pytest.mark.spark

READY = "Spark Connect server started"


def _spark_env(tmp: Path) -> dict[str, str]:
    return spark_jvm_env(tmp)


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    """Start `SparkConnectServer` with spark-submit; always stop it (its whole process group) at the end."""
    import pyspark

    home = Path(pyspark.__file__).parent
    jars = sorted((home / "jars").glob("spark-connect_*.jar"))
    if not jars:
        pytest.skip(f"no spark-connect jar in {home / 'jars'}")
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("no Java runtime")
    import importlib.util

    missing = [m for m in ("grpc", "grpc_status", "google.rpc", "pandas", "pyarrow", "zstandard")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"Spark Connect client dependencies missing: {', '.join(missing)}")
    tmp = tmp_path_factory.mktemp("connect")
    cmd = [str(home / "bin" / "spark-submit"), "--master", "local[1]",
           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", "spark.connect.grpc.binding.port=0",  # the kernel's pick, read back below
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=1g",
           "--conf", "spark.sql.session.timeZone=UTC",
           "--conf", f"spark.sql.warehouse.dir={tmp / 'spark-warehouse'}",
           "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={tmp}",
           str(jars[-1])]
    log_path = tmp / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=tmp, env=_spark_env(tmp), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not (ready := re.search(READY + r" at: 127\.0\.0\.1:(\d+)", log_path.read_text(errors="replace"))):
            if proc.poll() is not None:
                pytest.fail(f"Connect server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"Connect server not ready in 240 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{ready[1]}", tmp
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        log.close()


# Runs in its own interpreter: argv = url, warehouse. Prints one JSON object.
CLIENT = r'''
import json, sys
from pyspark.sql import SparkSession
import rpl_sql
from rpl_sql.compile.literals import sql_str

url, wh = sys.argv[1:3]
spark = SparkSession.builder.remote(url).getOrCreate()
out = {"session_class": type(spark).__module__}
session = rpl_sql.register(spark, wh)
session.execute("""
    CHANGE REPLICATION SOURCE TO SOURCE_HOST='h1' FOR CHANNEL 'ch1';
    CHANGE REPLICATION SOURCE TO SOURCE_HOST='h2' FOR CHANNEL 'ch2';
    CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1, `we;ird'db`),
        REPLICATE_WILD_IGNORE_TABLE = ('db1.tmp%') FOR CHANNEL 'ch1';
    CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((src, db1)) FOR CHANNEL 'ch2';
""")
rows = lambda df: [[v.isoformat() if hasattr(v, "isoformat") else v for v in r] for r in df.collect()]
out["view"] = rows(spark.sql(
    "SELECT CHANNEL_NAME, FILTER_NAME, FILTER_RULE, CONFIGURED_BY, COUNTER FROM replication_applier_filters"))
out["channels"] = rows(spark.sql("SELECT CHANNEL_NAME, CONFIGURED, SOURCE_HOST FROM rpl_sql_channels"))
events = [("ch1", "db1", "t1"), ("ch1", "db1", "tmp_x"), ("ch1", "db2", "t1"), ("ch1", "we;ird'db", "t"),
          ("ch2", "src", "t"), ("ch2", "x", "y")]
spark.createDataFrame(events, "channel STRING, db STRING, tbl STRING").createOrReplaceTempView("events")
out["version"] = session.store.version()
out["functions"] = rows(spark.sql(
    "SELECT channel, db, tbl, should_apply(channel, db, tbl), rewrite_db(channel, db) FROM events"))
# a mixed script through Session.sql: the function follows the change before the SELECT runs
out["after_change"] = rows(session.sql(
    "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db2) FOR CHANNEL 'ch1';"
    "SELECT should_apply('ch1', 'db2', 't1'), should_apply('ch1', 'db1', 't1')"))
out["status"] = rows(session.sql("SHOW REPLICA STATUS FOR CHANNEL 'ch2'")
                     .select("Channel_Name", "Source_Host", "Replicate_Rewrite_DB"))
# the Python data source runs on the server: live view of the Delta state
spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW live_filters USING rpl_sql "
          f"OPTIONS (path {sql_str(wh, script_safe=True)}, table 'filters')")
out["live"] = rows(spark.sql("SELECT CHANNEL_NAME, FILTER_NAME, FILTER_RULE FROM live_filters"))
out["python_filters"] = [list(r[:3]) for r in session.filters()]
# the notebook magic finds the active remote session and registers there
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "rpl_sql")
frame = ip.run_line_magic("rpl_sql", f"--warehouse '{wh}' CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db3) "
                         "FOR CHANNEL 'ch1'; SELECT FILTER_RULE, should_apply('ch1', 'db3', 't') AS a "
                         "FROM replication_applier_filters "
                         "WHERE CHANNEL_NAME = 'ch1' AND FILTER_NAME = 'REPLICATE_DO_DB'")
out["magic"] = frame.values.tolist()
spark.stop()
print("RESULT " + json.dumps(out))
'''


def test_register_views_and_functions_over_connect(connect_url):
    from rpl_sql import Session
    from rpl_sql.filters.evaluate import RowEvent, decide, rewrite_db

    url, tmp = connect_url
    wh = str(tmp / "wh")
    env = dict(os.environ)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CLIENT, url, wh], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line, f"client failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    out = json.loads(line[len("RESULT "):])
    print(f"Connect client took {time.monotonic() - t0:.1f} s")
    assert out["session_class"].startswith("pyspark.sql.connect")


    from rpl_sql.server.performance_schema import applier_filters

    session = Session(wh)
    # the state the views and functions were built from, before the client's later changes
    before = session.store.load_version(out["version"])
    view = sorted(tuple(r) for r in out["view"])
    assert view == sorted((r[0], r[1], r[2], r[3], r[5]) for r in applier_filters(before))
    assert ("ch1", "REPLICATE_DO_DB", "db1,we;ird'db", "CHANGE_REPLICATION_FILTER_FOR_CHANNEL", 0) in view
    # the data-source view read the live state, equal to the Python API's at that moment
    assert sorted(out["live"]) == sorted(out["python_filters"])
    assert ["ch1", "REPLICATE_DO_DB", "db2"] in out["live"]
    assert sorted(map(tuple, out["channels"])) == [("", False, None), ("ch1", True, "h1"), ("ch2", True, "h2")]

    # the functions agree with the reference evaluator on the state they were compiled from
    assert len(out["functions"]) == 6
    for channel, db, tbl, applies, rewritten in out["functions"]:
        filters = before.channel(channel).filters
        expected = decide(filters, RowEvent(db, tbl), before.lower_case_table_names, before.filter_mode)
        assert applies is expected.apply, (channel, db, tbl)
        assert rewritten == rewrite_db(filters, db, before.lower_case_table_names)
    assert out["after_change"] == [[True, False]]
    assert out["status"] == [["ch2", "h2", "(src,db1)"]]
    assert out["magic"] == [["db3", True]]
