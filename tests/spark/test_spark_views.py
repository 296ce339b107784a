"""The Spark views show exactly the spec's rows for every cases.md scenario (observed through Spark SQL)."""
from __future__ import annotations

import pytest

import rpl_sql
from tests.support.scenarios import SCENARIOS, ApiDriver, Runner

pytestmark = pytest.mark.spark


class SparkDriver(ApiDriver):
    """Statements through a session registered in Spark, so every commit refreshes the views."""

    spark = None

    def __init__(self, warehouse: str):
        self.session = rpl_sql.register(self.spark, warehouse)


def spark_observe(session):
    spark = session.spark
    filters = [list(r) for r in spark.sql(
        "SELECT CHANNEL_NAME, FILTER_NAME, FILTER_RULE, CONFIGURED_BY, COUNTER FROM replication_applier_filters"
    ).collect()]
    global_filters = [list(r) for r in spark.sql(
        "SELECT FILTER_NAME, FILTER_RULE, CONFIGURED_BY FROM replication_applier_global_filters").collect()]
    return filters, global_filters


@pytest.mark.parametrize("sid", list(SCENARIOS))
def test_scenario_views_in_spark(sid, tmp_path, spark):
    SparkDriver.spark = spark
    Runner(SparkDriver(str(tmp_path / "wh")), observe=spark_observe).run(sid)


def test_view_schema_is_performance_schema(spark, tmp_path):
    rpl_sql.register(spark, str(tmp_path / "wh"))
    got = [(f.name, f.dataType.simpleString(), f.nullable) for f in spark.table("replication_applier_filters").schema]
    assert got == [("CHANNEL_NAME", "string", False), ("FILTER_NAME", "string", False),
                   ("FILTER_RULE", "string", False), ("CONFIGURED_BY", "string", False),
                   ("ACTIVE_SINCE", "timestamp", False), ("COUNTER", "bigint", False)]
    got = [f.name for f in spark.table("replication_applier_global_filters").schema]
    assert got == ["FILTER_NAME", "FILTER_RULE", "CONFIGURED_BY", "ACTIVE_SINCE"]


def test_mixed_script_and_stale_refresh(spark, tmp_path):
    wh = str(tmp_path / "wh")
    s = rpl_sql.register(spark, wh)
    df = s.sql("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'ch1';"
               "CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'ch1';"
               "SELECT should_apply('ch1', 'db1', 't') AS a, should_apply('ch1', 'db2', 't') AS b, "
               "should_apply('nope', 'db1', 't') AS c")
    assert [tuple(r) for r in df.collect()] == [(True, False, None)]
    status = s.sql("SHOW REPLICA STATUS FOR CHANNEL 'ch1'")
    assert status.select("Replicate_Do_DB", "Channel_Name").collect()[0] == ("db1", "ch1")
    other = rpl_sql.connect(wh)  # another process's view of the same server
    other.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db2) FOR CHANNEL 'ch1'")
    assert spark.sql("SELECT should_apply('ch1', 'db2', 't')").collect()[0][0] is False  # stale until refreshed
    s.refresh()
    assert spark.sql("SELECT should_apply('ch1', 'db2', 't')").collect()[0][0] is True
    assert spark.sql("SELECT FILTER_RULE FROM replication_applier_filters").collect()[0][0] == "db2"
    history = spark.sql("SELECT FILTER_RULE, PREVIOUS_RULE FROM rpl_sql_filter_history "
                        "WHERE CHANNEL_NAME = 'ch1' ORDER BY VERSION DESC").collect()
    assert [tuple(r) for r in history] == [("db2", "db1"), ("db1", None)]  # live: no refresh needed


def test_rule_hits_view_and_data_source(spark, tmp_path):
    from rpl_sql.filters.evaluate import RowEvent
    from rpl_sql.server.performance_schema import rule_hit_rows

    wh = str(tmp_path / "wh")
    s = rpl_sql.register(spark, wh)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'ch1';"
              "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1, `d'b2`), REPLICATE_IGNORE_TABLE = (db1.tmp) "
              "FOR CHANNEL 'ch1'")
    s.apply_events("ch1", [RowEvent("db1", "t"), RowEvent("db1", "tmp"), RowEvent("db1", "u"), RowEvent("x", "t")])
    want = [tuple(r) for r in rule_hit_rows(s.state)]
    assert [(r[2], r[3]) for r in want] == [("db1", 3), ("d'b2", 0), ("db1.tmp", 1)]
    got = [tuple(r) for r in spark.sql("SELECT * FROM rpl_sql_filter_rule_hits").collect()]
    assert [r[:4] for r in got] == [r[:4] for r in want] and got[0][4] is not None and got[1][4] is None
    live = spark.read.format("rpl_sql").option("path", wh).option("table", "rule_hits").load()
    assert [tuple(r)[:4] for r in live.collect()] == [r[:4] for r in want]


@pytest.mark.spark
def test_registering_quiets_the_warnings_of_rpl_sqls_own_doing(spark, warehouse):
    """Every refresh replaces rpl_sql's functions and may create the replica tables' databases; Spark logs a
    WARN line for each (16 a refreshing notebook cell). After register those loggers report errors only."""
    from rpl_sql.spark.env import QUIET_LOGGERS

    rpl_sql.register(spark, warehouse)
    jvm = spark.sparkContext._jvm
    levels = {n: str(jvm.org.apache.logging.log4j.LogManager.getLogger(n).getLevel()) for n in QUIET_LOGGERS}
    assert levels == {n: "ERROR" for n in QUIET_LOGGERS}
