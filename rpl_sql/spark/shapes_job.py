"""The landed events in scope and their distinct shapes with counts, in Spark: what rpl_sql.storage.landed_shapes.shapes
gives with Arrow in this process, for sessions that have Spark. The lint's "never matched" counts decide these
shapes with the reference evaluator; the impact of a filter change (rpl_sql.spark.impact_job) decides them in the
same job with compiled functions."""
from __future__ import annotations

import os
from typing import Any

from rpl_sql.filters.evaluate import RowEvent, statement_event_of
from rpl_sql.storage.landed_shapes import ROW_TYPES, Landed
from rpl_sql.spark.deltaread import read_delta
from rpl_sql.storage.store import utc_time


def landed_events(spark: Any, warehouse: str, channels: list[str] | None = None, last: int | None = None,
                  since: str | None = None):
    """The landed events in scope as a DataFrame (the channel as `c`, '' for the default one), or None when
    nothing landed: all of them, each channel's `last` events, or those logged at or after `since`."""
    from pyspark.sql import functions as F

    path = os.path.join(os.fspath(warehouse), "events")
    at = utc_time(since, "SINCE") if since is not None else None  # its error before any Spark work
    if not os.path.isdir(os.path.join(path, "_delta_log")):
        return None
    ev = read_delta(spark, path, partitions={"channel": channels} if channels is not None else None,
                    engine="delta-rs")
    c = F.coalesce(F.col("channel"), F.lit("")).alias("c")
    df = ev.select(c, "seq", "event_type", "db_name", "table_name", "command", "default_db", "tables", "event_time")
    if at is not None:
        df = df.where(F.col("event_time") >= F.lit(at))
    if last is not None:
        tops = df.groupBy("c").agg(F.max("seq").alias("top")).collect()
        if not tops:
            return None
        keep = F.lit(False)
        for r in tops:
            keep = keep | ((F.col("c") == F.lit(r["c"])) & (F.col("seq") > F.lit(r["top"] - last)))
        df = df.where(keep)
    return df


def shape_counts(df):
    """The distinct decision inputs of landed events and their counts (`n`): `q` true for statements (command
    `cmd`, default database `ddb`, tables `tabs`), false for row events (`d`, `t`); gtid markers left out.

    The events are counted by their raw columns first and the shapes made of the few distinct rows after:
    a third cheaper at 10M events than projecting every event (bench_impact)."""
    from pyspark.sql import functions as F

    raw = ["c", "event_type", "db_name", "table_name", "command", "default_db", "tables"]
    counted = df.groupBy(*raw).agg(F.count(F.lit(1)).alias("n"))
    is_row = F.col("event_type").isin(*ROW_TYPES) & F.col("db_name").isNotNull() & F.col("table_name").isNotNull()
    is_query = F.col("event_type") == F.lit("query")
    keyed = counted.where(is_row | is_query).select(
        "c", is_query.alias("q"), F.when(is_row, F.col("db_name")).alias("d"),
        F.when(is_row, F.col("table_name")).alias("t"), F.when(is_query, F.col("command")).alias("cmd"),
        F.when(is_query, F.col("default_db")).alias("ddb"), F.when(is_query, F.col("tables")).alias("tabs"), "n")
    return keyed.groupBy(*keyed.columns[:-1]).agg(F.sum("n").alias("n"))


def event_of(r: dict):
    """The evaluator's event of a shape_counts row."""
    return statement_event_of(r["cmd"], r["ddb"], r["tabs"]) if r["q"] else RowEvent(r["d"], r["t"])


def shapes(spark: Any, warehouse: str, channels: list[str] | None = None, last: int | None = None,
           since: str | None = None) -> Landed:
    """Each channel's shapes and counts (gtid markers left out), as rpl_sql.storage.landed_shapes.shapes gives them."""
    df = landed_events(spark, warehouse, channels, last, since)
    if df is None:
        return {}
    out: Landed = {}
    for r in shape_counts(df).toArrow().to_pylist():
        out.setdefault(r["c"], []).append((event_of(r), r["n"]))
    return out
