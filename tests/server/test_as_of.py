"""Filters as of a point in time: SHOW REPLICATION [GLOBAL] FILTERS ... AS OF, EXPLAIN ... AS OF, and the two
performance_schema views at a past version through the `rpl_sql` data source (also in spark-sql)."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

import rpl_sql
from rpl_sql.errors import MySQLError
from rpl_sql.spark.datasource import table_rows

STEPS = ["CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a'",
         "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`cr'm`) FOR CHANNEL 'a'",
         "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (sales), REPLICATE_IGNORE_TABLE = (sales.`t,1`) FOR CHANNEL 'a'",
         "CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE = ('%.b\\_k')"]


def _history(tmp_path):
    """The warehouse after each step, with the time between steps: (session, [(version, time after)])."""
    s = rpl_sql.connect(str(tmp_path / "wh"))
    marks = []
    for step in STEPS:
        version = s.execute(step)[-1].version
        time.sleep(0.05)
        marks.append((version, datetime.now(timezone.utc)))
        time.sleep(0.05)
    return s, marks


def rules(result):
    return [(r[0], r[1], r[2]) for r in result.rows]


def test_each_past_version_and_time_shows_the_rules_then(tmp_path):
    s, marks = _history(tmp_path)
    v1, t1 = marks[1]
    v2, t2 = marks[2]
    then = s.execute(f"SHOW REPLICATION FILTERS FOR CHANNEL 'a' AS OF {v1}")[-1]
    assert rules(then) == [("a", "REPLICATE_DO_DB", "cr'm")]
    assert rules(s.execute(f"SHOW REPLICATION FILTERS AS OF '{t1.strftime('%Y-%m-%d %H:%M:%S.%f')}'")[-1]) == \
        rules(then)
    assert rules(s.execute(f"SHOW REPLICATION FILTERS AS OF '{t2.isoformat()}'")[-1]) == [
        ("a", "REPLICATE_DO_DB", "sales"), ("a", "REPLICATE_IGNORE_TABLE", "sales.t,1")]
    assert s.execute(f"SHOW REPLICATION GLOBAL FILTERS AS OF {v2}")[-1].rows == []
    assert [r[:2] for r in s.execute("SHOW REPLICATION GLOBAL FILTERS")[-1].rows] == \
        [("REPLICATE_WILD_IGNORE_TABLE", "%.b\\_k")]
    now = s.execute("SHOW REPLICATION FILTERS")[-1]
    assert ("a", "REPLICATE_WILD_IGNORE_TABLE", "%.b\\_k") in rules(now)  # copied to the channel
    # the decision then and now, explained
    then = s.execute(f"EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' AS OF {v1} ROW EVENT ON `cr'm`.x")[-1].rows
    assert then[-1][4:] == ("REPLICATE_DO_DB", "APPLY")
    assert s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' ROW EVENT ON `cr'm`.x")[-1].rows[-1][4:] == \
        ("REPLICATE_DO_DB", "IGNORE")
    before = s.store.version()
    assert s.store.version() == before  # reading the past commits nothing


@pytest.mark.parametrize("clause, says", [
    ("AS OF 99", "no version 99"), ("AS OF '2001-01-01 00:00:00'", "before the first commit"),
    ("AS OF 'yesterday'", "neither a version nor a time")])
def test_what_is_not_in_the_history_is_1210(tmp_path, clause, says):
    s, _ = _history(tmp_path)
    before = s.store.version()
    with pytest.raises(MySQLError) as e:
        s.execute(f"SHOW REPLICATION FILTERS {clause}")
    assert e.value.code == 1210 and says in e.value.message
    assert s.store.version() == before


def test_the_data_source_reads_the_views_at_a_past_version(tmp_path):
    s, marks = _history(tmp_path)
    wh = str(tmp_path / "wh")
    v1, t1 = marks[1]
    assert [r[:3] for r in table_rows(wh, "filters", str(v1))] == [("a", "REPLICATE_DO_DB", "cr'm")]
    assert [r[:3] for r in table_rows(wh, "filters", t1.isoformat())] == [("a", "REPLICATE_DO_DB", "cr'm")]
    assert table_rows(wh, "global_filters", str(marks[2][0])) == []
    assert [r[:2] for r in table_rows(wh, "global_filters", None)] == [("REPLICATE_WILD_IGNORE_TABLE", "%.b\\_k")]


def test_a_past_view_in_spark_sql_text(spark, tmp_path):
    from rpl_sql.compile.literals import sql_str
    from rpl_sql.spark.datasource import DefaultSource

    s, marks = _history(tmp_path)
    spark.dataSource.register(DefaultSource)
    path = sql_str(str(tmp_path / "wh"))
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW filters_then USING rpl_sql OPTIONS (path {path}, "
              f"table 'filters', as_of '{marks[1][0]}')")
    got = [tuple(r)[:3] for r in spark.sql("SELECT * FROM filters_then").collect()]
    assert got == rules(s.execute(f"SHOW REPLICATION FILTERS AS OF {marks[1][0]}")[-1])
