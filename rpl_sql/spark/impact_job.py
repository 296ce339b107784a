"""The impact of a filter change in one Spark job: the landed events counted per shape, each shape decided
by the compiled functions of the current and of the proposed filters side by side, and only the shapes
whose decision code differs brought back to Python, where they get their labels (rpl_sql.server.impact.channel_rows).

The compiled codes are the applier's (compile_functions(applier=True), LABELS / TRUE_CODES), each state's set
under its own prefix; a shape either set cannot decide (a NULL code) is decided by the reference evaluator.
"""
from __future__ import annotations

from typing import Any

from rpl_sql.server import impact as core
from rpl_sql.compile import LABELS, TRUE_CODES
from rpl_sql.spark.functions import FunctionInstaller
from rpl_sql.spark.shapes_job import event_of, landed_events, shape_counts
from rpl_sql.filters.state import ServerState

NOW, AFTER = "rpl_sql_impact_now__", "rpl_sql_impact_after__"


def installers(spark: Any) -> tuple[FunctionInstaller, FunctionInstaller]:
    """The two sets' installers for `spark`: each re-creates its functions only when its state's text changed
    (CREATE FUNCTION re-analyses them: about a second at 100 rules per channel, for both sets)."""
    return FunctionInstaller(spark, applier=True, prefix=NOW), FunctionInstaller(spark, applier=True, prefix=AFTER)


def _code(prefix: str) -> str:
    return (f"CASE WHEN q THEN {prefix}statement_code(c, cmd, ddb, tabs) "
            f"ELSE {prefix}row_code(c, d, t) END")


def _key(code: int) -> tuple[str, str]:
    return ("APPLY" if code in TRUE_CODES else "IGNORE", LABELS[code])


def impact(spark: Any, warehouse: str, before: ServerState, after: ServerState, channels: list[str],
           functions: tuple[FunctionInstaller, FunctionInstaller], last: int | None = None,
           since: str | None = None) -> list[tuple]:
    """Rows of rpl_sql.server.impact.IMPACT_COLUMNS, as rpl_sql.server.impact.impact gives them over the same events;
    `functions` from `installers(spark)`, kept by the caller."""
    from pyspark.sql import functions as F

    df = landed_events(spark, warehouse, channels, last, since)
    if df is None:
        return [row for name in channels for row in core.channel_rows(name, [])]
    functions[0].install(before)
    functions[1].install(after)
    decided = shape_counts(df).select("*", F.expr(_code(NOW)).alias("k0"), F.expr(_code(AFTER)).alias("k1"))
    same = F.col("k0").isNotNull() & F.col("k1").isNotNull() & (F.col("k0") == F.col("k1"))
    true_codes = list(TRUE_CODES)
    # the shapes whose code differs (or is unknown) stay whole; the others fold into one row per channel
    rows = decided.groupBy(
        "c", F.when(~same, F.struct("q", "d", "t", "cmd", "ddb", "tabs", "k0", "k1")).alias("shape")).agg(
        F.sum("n").alias("n"), F.sum(F.when(same & F.col("k0").isin(*true_codes), F.col("n"))).alias("n0"),
        F.sum(F.when(same & F.col("k1").isin(*true_codes), F.col("n"))).alias("n1"))
    by_channel: dict[str, list] = {}
    sums: dict[str, tuple[int, int, int]] = {}
    for r in rows.toArrow().to_pylist():
        shape = r["shape"]
        if shape is None:
            sums[r["c"]] = (r["n"], r["n0"] or 0, r["n1"] or 0)
            continue
        ev = event_of({"c": r["c"], **shape})
        k0 = _key(shape["k0"]) if shape["k0"] is not None else core.reference_key(before, r["c"], ev)
        k1 = _key(shape["k1"]) if shape["k1"] is not None else core.reference_key(after, r["c"], ev)
        by_channel.setdefault(r["c"], []).append((ev, r["n"], k0, k1))
    return [row for name in channels for row in core.channel_rows(name, by_channel.get(name, []),
                                                                    sums.get(name, (0, 0, 0)))]

