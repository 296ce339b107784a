"""rpl_sql.spark.export: the init script's literals, and what makes its functions stale.

The real spark-sql runs of exported scripts are in test_spark_sql_cli.py."""
from __future__ import annotations

import pytest
from tests.spark.test_spark_sql_cli import HOSTILE, SETUP, naive_literal, script_literal

from rpl_sql import Session
from rpl_sql.filters.evaluate import RowEvent
from rpl_sql.spark.export import harden


def test_filters_fingerprint_follows_only_what_decisions_depend_on(tmp_path):
    session = Session(str(tmp_path / "wh"))
    session.execute(SETUP)
    fp = session.state.filters_fingerprint()
    session.execute("START REPLICA FOR CHANNEL 'ch1'; STOP REPLICA FOR CHANNEL 'ch1'")
    session.apply_events("ch1", [RowEvent("db1", "t1")])  # counters move
    assert session.state.filters_fingerprint() == fp
    for change in ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1) FOR CHANNEL 'ch1'",
                   "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h3' FOR CHANNEL 'ch3'",
                   "CHANGE REPLICATION FILTER REPLICATE_IGNORE_TABLE = (`db;x`.`T'1`) FOR CHANNEL 'c;h\\'2'"):
        session.execute(change)
        assert session.state.filters_fingerprint() != fp, change
        fp = session.state.filters_fingerprint()


def test_sql_string_is_cli_safe():
    for value in HOSTILE:
        lit = script_literal(value)
        assert lit.isascii() and "$" not in lit and ";" not in lit and "\n" not in lit, lit


def test_harden_rewrites_literals_only():
    stmt = "SELECT 'a;b$c\n-- x' AS `col;1`, \"ü\" -- keep ${x}; note\n/* multi\n -- line ${y} */ FROM t"
    assert harden(stmt) == ("SELECT 'a\\u003bb\\u0024c\\u000a-- x' AS `col;1`, \"\\u00fc\" -- keep $ {x}; note\n"
                            "/* multi\n- -- line $ {y} */ FROM t")
    assert harden("SELECT '\\$', '\\;', 'it\\'s', r'a\\b$'") == \
        "SELECT '\\u0024', '\\u003b', 'it\\'s', 'a\\\\b\\u0024'"
    assert harden("SELECT '\\\\', 'x'") == "SELECT '\\\\', 'x'"
    with pytest.raises(ValueError):
        harden("SELECT 1 AS `${x}`")


@pytest.mark.spark
def test_hardened_literals_mean_the_same_to_spark(spark):
    """Spark reads the hardened literal (variable substitution on) as the naive one without substitution."""
    key = "spark.sql.variable.substitute"
    old = spark.conf.get(key)
    try:
        spark.conf.set(key, "false")
        naive = [spark.sql(f"SELECT {naive_literal(v)}").collect()[0][0] for v in HOSTILE]
        raw = spark.sql("SELECT r'a\\b$;'").collect()[0][0]
        spark.conf.set(key, "true")
        hardened = [spark.sql(harden(f"SELECT {naive_literal(v)}")).collect()[0][0] for v in HOSTILE]
        direct = [spark.sql(f"SELECT {script_literal(v)}").collect()[0][0] for v in HOSTILE]
        raw_hardened = spark.sql(harden("SELECT r'a\\b$;'")).collect()[0][0]
        substituted = spark.sql(f"SELECT {naive_literal('${system:java.version}')}").collect()[0][0]
    finally:
        spark.conf.set(key, old)
    assert naive == HOSTILE
    assert hardened == HOSTILE
    assert direct == HOSTILE
    assert raw == raw_hardened == "a\\b$;"
    assert substituted != "${system:java.version}"  # why literals must not carry a raw `$`
