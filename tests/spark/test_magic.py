"""rpl_sql.cli.magic: the %%rpl_sql cell magic in an in-process IPython (the executed notebook is test_notebook.py)."""
from __future__ import annotations

import pytest


@pytest.fixture
def ipython(monkeypatch):
    """A plain IPython shell with the extension loaded; Spark is kept out (no active session is looked up)."""
    from IPython.core.interactiveshell import InteractiveShell

    import rpl_sql.cli.magic
    import rpl_sql.spark.env

    def no_spark(*args, **kwargs):
        raise AssertionError("a control-plane cell must not start Spark")

    monkeypatch.setattr(rpl_sql.cli.magic, "_active_spark", lambda: None)
    monkeypatch.setattr(rpl_sql.spark.env, "local_spark", no_spark)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "rpl_sql")
    yield ip
    InteractiveShell.clear_instance()


def test_split_options():
    from rpl_sql.cli.magic import split_options

    assert split_options("--warehouse '/a b' --max-rows=5 SHOW REPLICA STATUS") == (
        {"warehouse": "/a b", "max-rows": "5"}, " SHOW REPLICA STATUS")
    assert split_options("SELECT 1 -- --warehouse x") == ({}, "SELECT 1 -- --warehouse x")


def test_magic_control_plane(ipython, tmp_path, capsys):
    from rpl_sql import MySQLError, Session
    from rpl_sql.cli.magic import StatementError
    from rpl_sql.session import HISTORY_COLUMNS

    wh = tmp_path / "wh"
    ipython.user_ns["b"] = "NOT EXPANDED"
    res = ipython.run_cell(f"""%%rpl_sql --warehouse {wh}
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h1' FOR CHANNEL 'ch1';
CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1) FOR CHANNEL 'ch1';
CHANGE MASTER TO MASTER_PORT = 3307 FOR CHANNEL 'ch1';
""")
    assert res.success and res.result is None
    out = capsys.readouterr()
    assert out.out.count("Query OK") == 3
    assert "Warning (Code 1287)" in out.err

    # line magic: no $/{} expansion; the value is a pandas DataFrame, --max-rows limits it
    frame = ipython.run_line_magic("rpl_sql", f"--warehouse={wh} --max-rows 1 "
                                   "CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (`a$b`, `{b}`) FOR CHANNEL 'ch1';"
                                   "SHOW REPLICATION FILTER HISTORY")
    assert tuple(frame.columns) == HISTORY_COLUMNS and len(frame) == 1
    assert frame["FILTER_RULE"][0] == "a$b,{b}"
    assert "(showing the first 1 rows)" in capsys.readouterr().out

    # a MySQL error: earlier statements committed, the cell fails with `ERROR code (state): message`
    version = Session(str(wh)).store.version()
    res = ipython.run_cell(f"""%%rpl_sql --warehouse {wh}
CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db2) FOR CHANNEL 'ch1';
START REPLICA FOR CHANNEL 'nope';
CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db3) FOR CHANNEL 'ch1';
""")
    err = res.error_in_exec
    assert isinstance(err, StatementError) and isinstance(err, MySQLError)
    assert err._render_traceback_() == [f"ERROR {err.code} ({err.sqlstate}): {err.message}"]
    assert Session(str(wh)).store.version() == version + 1
    assert ("ch1", "REPLICATE_DO_DB", "db2") in [r[:3] for r in Session(str(wh)).filters()]

    # a syntax error runs nothing
    res = ipython.run_cell(f"%%rpl_sql --warehouse {wh}\n"
                           "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (x);\nCHANGE REPLICATION FILTER OOPS")
    assert res.error_in_exec.code == 1064
    assert Session(str(wh)).store.version() == version + 1

    # --warehouse sticks: a later cell without it works on the same warehouse, not ./rpl_warehouse
    res = ipython.run_cell("%%rpl_sql\nCHANGE REPLICATION FILTER REPLICATE_DO_DB = (sticky) FOR CHANNEL 'ch1';")
    assert res.success and ("ch1", "REPLICATE_DO_DB", "sticky") in [r[:3] for r in Session(str(wh)).filters()]


def test_a_session_the_magic_starts_draws_no_progress_bar(monkeypatch):
    """Spark draws its console progress bar into the cell's output: a SparkSession started by a cell has none
    (and one the notebook started has its bar stopped when rpl_sql registers: spark.env.hide_console_progress)."""
    import rpl_sql.cli.magic as magic

    seen = {}
    monkeypatch.setattr(magic, "local_spark", lambda **conf: seen.update(conf) or "spark")
    assert magic._notebook_spark() == "spark"
    assert seen == {"spark.ui.showConsoleProgress": "false"}
