"""rpl_sql.session: text in, one Delta commit per statement out, and what a session sees of other writers."""
from __future__ import annotations

import sys

import pytest

import rpl_sql
from rpl_sql import MySQLError, SparkRequiredError


def test_each_statement_is_one_commit_and_a_failing_one_changes_nothing(warehouse):
    s = rpl_sql.connect(warehouse)
    ok = s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a); CHANGE REPLICATION FILTER REPLICATE_DO_DB = (b)")
    assert [r.version for r in ok] == [0, 1]
    with pytest.raises(MySQLError) as e:
        s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (c) FOR CHANNEL 'nope'")
    assert e.value.code == 1794  # ER_REPLICA_CONFIGURATION: no such channel
    assert s.store.load().version == 1 and [r[1] for r in s.global_filters()] == ["b"]


def test_a_statement_that_changes_nothing_writes_nothing(warehouse):
    s = rpl_sql.connect(warehouse)
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a)")
    [show] = s.execute("SHOW REPLICA STATUS")
    assert show.version is None and show.has_rows


def test_state_is_read_fresh_and_refresh_tells_listeners(warehouse):
    a, b = rpl_sql.connect(warehouse), rpl_sql.connect(warehouse)
    seen = []
    a.on_change(seen.append)
    b.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'ch1'")
    assert a.state.channel("ch1") is not None and not seen  # read from Delta; the Spark side not yet rebuilt
    a.refresh()
    assert [s.channel("ch1") is not None for s in seen] == [True]


@pytest.mark.parametrize("lctn, applies", [(0, False), (1, True)])
def test_start_with_lower_case_table_names_compares_folded_but_stores_as_written(warehouse, lctn, applies):
    s = rpl_sql.connect(warehouse)
    s.start(["--replicate-do-db=Sales"], lower_case_table_names=lctn)
    state = s.state
    assert state.lower_case_table_names == lctn and [r[1] for r in s.global_filters()] == ["Sales"]
    assert rpl_sql.decide(state.global_filters, rpl_sql.RowEvent("SALES", "t"), lctn).apply is applies


def test_spark_sql_without_spark_is_an_error_that_says_how(warehouse, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # even if Spark were importable, connect() must not start it
    s = rpl_sql.connect(warehouse)
    with pytest.raises(SparkRequiredError) as e:
        s.execute("SELECT 1")
    assert "spark=True" in str(e.value) or "spark=True" in e.value.hint


def test_quieting_spark_errors_leaves_pysparks_logger_class():
    """pyspark logs a SQL error through PySparkLogger (with an `errorClass` keyword); had rpl_sql made a plain
    Logger of that name first, every later AnalysisException would become a TypeError."""
    import subprocess
    import sys

    code = ("import logging\nfrom rpl_sql.session import quiet_spark_errors\nwith quiet_spark_errors():\n    pass\n"
            "from pyspark.logger import PySparkLogger\n"
            "assert isinstance(logging.getLogger('SQLQueryContextLogger'), PySparkLogger)\n")
    subprocess.run([sys.executable, "-c", code], check=True)
