"""A batch's applied events written by the session's executors: the applier's `spark` engine (a cluster's).

The arrow engine (`arrow_write`) writes the same files in the driver; tests/pipeline/test_apply.py runs both on
the same events and requires equal applied tables.
"""
from __future__ import annotations

import logging

import pyarrow as pa

from rpl_sql.pipeline.applier.arrow_write import add_actions, filesystem
from rpl_sql.pipeline.applier.shapes import SHAPE_KEYS, AppliedShapes, with_shape_key
from rpl_sql.pipeline.events import EVENTS_SCHEMA, SHAPE_ID
from rpl_sql.server.applier_state import ApplyError, BatchRecord
from rpl_sql.spark.env import session_conf

log = logging.getLogger(__name__)


def write_applied(spark, ev, applied: AppliedShapes, rec: BatchRecord, rel_dir: str, target: str) -> list:
    """Write the events of `ev` (the batch's events as a DataFrame) of its `applied` shapes as Parquet at
    `target` (`rel_dir` under the applied table); the delta-rs add actions for them.

    Each event joins its shape's verdict on one 64-bit hash of the key columns, which Spark computes alike on
    both sides (joined on three exact text keys instead, a channel's write took 0.6-0.9 s more). Two shapes
    sharing a hash can only add rows (an event always meets its own shape), so a count above the record's
    says so: the files are deleted and written again, joined on the key columns null-safe (slower, exact).
    """
    from pyspark.sql import functions as F

    if not len(applied):
        return []
    verdicts = applied.keys.append_column("applied_db", applied.applied_db) \
        .append_column("decided_by", applied.decided_by)
    keyed = with_shape_key(spark.createDataFrame(verdicts))
    cols = [F.coalesce(F.col("filter_db"), F.lit("")).alias("filter_db") if n == "filter_db" else
            F.col(n) if n in ev.columns or EVENTS_SCHEMA.field(n).type != pa.string() else
            F.lit(None).cast("string").alias(n)
            for n in EVENTS_SCHEMA.names if n != SHAPE_ID]  # '' reads back NULL from a Delta partition:
    # restore it; a text column that events landed by an older rpl_sql lack (`columns`) is NULL, as it would
    # have been
    for exact in (False, True):
        if exact:
            v = keyed.select(*[F.col(k).alias("v_" + k) for k in SHAPE_KEYS], "applied_db", "decided_by")
            cond = [ev[k].eqNullSafe(v["v_" + k]) for k in SHAPE_KEYS]
        else:
            v = keyed.select(key_hash(*SHAPE_KEYS).alias("v_h"), "applied_db", "decided_by")
            cond = [key_hash(*SHAPE_KEYS) == v["v_h"]]
        out = ev.join(F.broadcast(v), cond, "inner").select(*cols, "applied_db", "decided_by")
        with session_conf(spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                                  "spark.sql.parquet.compression.codec": "snappy"}):
            out.write.mode("errorifexists").parquet(target)
        actions, rows = add_actions(target, rel_dir)
        if rows == rec.applied:
            return actions
        if exact or rows < rec.applied:
            break
        log.info("channel '%s': shapes share a key hash; writing the batch again, joined on the key columns",
                 rec.channel)
        fs, base = filesystem(target)
        fs.delete_dir(base)
    raise ApplyError(f"wrote {rows} applied events, expected {rec.applied} (batch {rec.start + 1}..{rec.end}); "
                     f"nothing committed", rec.channel)


def key_hash(*cols):
    """The 64-bit key write_applied joins a shape's verdict on (a test makes it collide)."""
    from pyspark.sql import functions as F

    return F.xxhash64(*cols)
