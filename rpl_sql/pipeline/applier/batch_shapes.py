"""A batch's shapes, found and decided: one Spark action over the events (`aggregate`) or the ingest commits'
summaries (`summarized_shapes`), then the verdicts checked against the reference evaluator (`decide_batch`)."""
from __future__ import annotations

import contextlib
import functools
import gc
from typing import Iterable

from rpl_sql.compile import LABELS, TRUE_CODES
from rpl_sql.filters.evaluate import Decision, hit_rules, rewrite_db
from rpl_sql.filters.rules import TYPES
from rpl_sql.filters.state import Channel, ServerState
from rpl_sql.pipeline.applier.shapes import (SHAPE_KEYS, VERIFY_BUDGET, VERIFY_MAX_SHAPES, AppliedShapes, Shape,
                                             applied_shapes, decide_shapes, decision_columns, derive_hits, reference,
                                             refs_of, shape_frame)
from rpl_sql.pipeline.applier.shape_table import ShapeTable
from rpl_sql.pipeline.summary import Summary
from rpl_sql.server.applier_state import ApplyError
from rpl_sql.server.gtid_set import GtidSet, merge_intervals


class ShapeList(list):
    """The shapes of a pass (`aggregate`), read as a ShapeTable is."""

    def span(self) -> tuple[int, int, int]:
        """(events, first seq, last seq)."""
        return sum(s.count for s in self), min(s.min_seq for s in self), max(s.max_seq for s in self)

    def unknown(self) -> Shape | None:
        return next((s for s in self if s.kind.startswith("unknown:")), None)

    def tallies(self) -> list[Shape]:
        return self

    def applied(self) -> AppliedShapes:
        return applied_shapes(self)


def aggregate(ev, ch: Channel, sql: bool) -> tuple[ShapeList, GtidSet, tuple]:
    """One Spark action: the distinct shapes with counts and (SQL) verdicts, the batch's GTIDs and the
    binlog file/position of its last event.

    The compiled functions run on the aggregated rows, so they cost per shape, not per event. GTIDs come
    back as intervals per source (MySQL) or the last seq_no per domain (MariaDB), never as one row per
    transaction.
    """
    from pyspark.sql import functions as F

    shapes = shape_frame(ev)
    if sql:  # one decision code per shape: the verdict and the label are both read off it
        shapes = shapes.select("*", *decision_columns(ch.name))
    # GTIDs and the last position, per (binlog file, GTID source, 64 transaction numbers): MySQL numbers as
    # 64-bit masks (exact, with gaps), MariaDB as the last seq_no per domain; ~1 row per 64 transactions.
    # Fixed-width buffers here too (max_by of a long, bit_or), as in shape_frame.
    # Parsed with substring_index only: split() (a regex) on every GTID cost more than the rest of the pass.
    g = F.col("gtid")
    mysql = g.contains(":")
    dashes = F.length(g) - F.length(F.replace(g, F.lit("-"), F.lit("")))
    num = F.when(mysql, F.substring_index(g, ":", -1)).otherwise(F.substring_index(g, "-", -1)).try_cast("bigint")
    gsel = ev.select("seq", "binlog_file", "binlog_pos", mysql.alias("my"),
                     F.when(mysql, F.expr(
                         "substring(gtid, 1, length(gtid) - length(substring_index(gtid, ':', -1)) - 1)"))
                     .otherwise(F.substring_index(g, "-", 1)).alias("key"),
                     num.alias("gn"),
                     F.when(~mysql, F.substring_index(F.substring_index(g, "-", 2), "-", -1).try_cast("bigint"))
                     .alias("server"),
                     (g.isNotNull() & ~mysql & (dashes != 2)).alias("bad_shape"))
    gt = (gsel.groupBy("binlog_file", "my", "key",
                       F.when(F.col("my"), F.expr("gn div 64")).alias("word"))
          .agg(F.expr("bit_or(CASE WHEN my THEN shiftleft(1L, CAST(pmod(gn, 64) AS INT)) END)").alias("mask"),
               F.max("gn").alias("mx"), F.max_by("server", "gn").alias("srv"),
               F.max("seq").alias("last_seq"), F.max_by("binlog_pos", "seq").alias("last_pos"),
               F.sum(F.when(F.col("my").isNotNull() & (
                   F.col("gn").isNull() | (F.col("gn") < 1) | F.col("bad_shape")
                   | (~F.col("my") & (F.col("server").isNull() | F.col("key").try_cast("bigint").isNull()))),
                   1).otherwise(0)).alias("bad")))
    rows = (shapes.withColumn("_set", F.lit("shape"))
            .unionByName(gt.withColumn("_set", F.lit("gtid")), allowMissingColumns=True)
            .toArrow().to_pylist())  # tens of thousands of shapes: Arrow, not pickled Rows
    out = ShapeList()
    words: dict[str, set[tuple[int, int]]] = {}
    mariadb: dict[int, tuple[int, int]] = {}
    last = (0, None, None)  # (seq, binlog_file, binlog_pos) of the batch's last event
    for r in rows:
        if r["_set"] == "shape":
            out.append(shape_of_row(r, ch.name, sql))
            continue
        if r["last_seq"] is not None and r["last_seq"] > last[0]:
            last = (r["last_seq"], r["binlog_file"], r["last_pos"])
        if r["my"] is None:
            continue
        if r["bad"]:
            raise ApplyError(f"{r['bad']} events carry a GTID that is neither 'uuid:n' nor 'domain-server-n' "
                             f"(source {r['key']!r})", ch.name)
        if r["my"]:
            words.setdefault(r["key"].lower(), set()).add((r["word"], r["mask"] & (2 ** 64 - 1)))
        else:
            d = int(r["key"])
            if d not in mariadb or r["mx"] > mariadb[d][1]:
                mariadb[d] = (int(r["srv"]), int(r["mx"]))
    mysql_iv = {k: word_intervals(v) for k, v in words.items()}
    return out, GtidSet(mysql_iv, mariadb), last[1:]


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused: finding and deciding a batch's shapes allocates a Shape, an
    event and tuples per shape and makes no cycles, and the collector's passes over them took 15-20% of
    that time (46,000 shapes a channel in bench/bench_apply.py)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def summarized_shapes(commits: tuple[Summary, ...]) -> tuple[ShapeTable, GtidSet, tuple]:
    """What `aggregate` finds, from the commits' summaries, undecided (`ShapeTable.decide` asks the evaluator, one
    shape of each class: for 46,000 shapes that took half the time of a Spark query over the compiled
    functions, which also had the evaluator name the rule of every hit): their shapes merged in Arrow, their
    GTID sets' union and the last commit's position. No Spark."""
    return ShapeTable.of(commits), *_gtids_and_end(commits)


def _gtids_and_end(commits: tuple[Summary, ...]) -> tuple[GtidSet, tuple]:
    gtids = functools.reduce(GtidSet.union, (c.gtids for c in commits), GtidSet())
    return gtids, (commits[-1].last_file, commits[-1].last_pos)

def decide_batch(state: ServerState, ch: Channel, shapes: ShapeList | ShapeTable, sql: bool, verify: str) -> None:
    """Hits of the SQL verdicts (derived, then checked by the evaluator); without SQL, the evaluator decides (a
    ShapeTable's by classes)."""
    lctn, matching = state.lower_case_table_names, state.matching
    if isinstance(shapes, ShapeTable):
        shapes.decide(ch.name, ch.filters, matching)
        return
    shapes = [s for s in shapes if s.kind != "gtid"]
    if not sql:
        decide_shapes(ch.name, ch.filters, shapes, matching)
        return
    decided: dict[int, Decision] = {}  # id(shape) -> the evaluator's decision, for _verify to reuse
    for s in shapes:
        s.hits = derive_hits(ch.filters, s.kind, s.key[3], s.db,
                             s.apply, s.decided_by, lctn)
        if s.hits:  # which rule: the evaluator names it (SQL returns the deciding type only)
            d = reference(ch.name, ch.filters, s, matching)
            s.rule_hits = hit_rules(ch.filters, s.event(), d, lctn)
            if state.filter_mode == "mysql":  # then it is the decision _verify checks against
                decided[id(s)] = d
    _verify(ch, shapes, lctn, decided, verify)

def _applied_db(ch: Channel, s: Shape, lctn: int) -> str | None:
    return rewrite_db(ch.filters, s.db, lctn)

def _verify(ch: Channel, shapes: list[Shape], lctn: int, decided: dict[int, Decision], verify: str) -> None:
    if verify == "none":
        return
    rules = sum(len(ch.filters.values(t)) for t in TYPES) + 1
    todo = sorted(shapes, key=lambda s: -s.count)
    if verify == "auto":  # the most frequent shapes, within a budget of evaluator rule checks
        todo = todo[:min(VERIFY_MAX_SHAPES, max(256, VERIFY_BUDGET // rules))]
    for s in todo:
        d = decided.get(id(s)) or reference(ch.name, ch.filters, s, lctn)
        got = (s.apply, s.decided_by, sorted(h.value for h in s.hits), s.applied_db)
        want = (d.apply, d.decided_by, sorted(h.value for h in d.hits), _applied_db(ch, s, lctn))
        if got != want:
            raise ApplyError(f"the compiled functions disagree with the reference evaluator on the "
                             f"{s.describe()} (seq {s.min_seq}): SQL {got}, evaluator {want}", ch.name)


def shape_of_row(r: dict, channel: str, sql: bool) -> Shape:
    """A shape_frame row as a Shape, with its SQL verdict when `sql`."""
    s = Shape(tuple(r[k] for k in SHAPE_KEYS), refs_of(r["t"]), r["n"], r["lo"], r["hi"])
    if sql and s.kind in ("row", "query"):
        if r["code"] not in LABELS:
            raise ApplyError(f"seq {s.min_seq}: cannot decide the malformed {s.describe()}", channel)
        s.apply, s.decided_by, s.applied_db = r["code"] in TRUE_CODES, LABELS[r["code"]], r["adb"]
    return s


def word_intervals(words: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """GTID numbers from (word, 64-bit mask) pairs (number = 64 * word + bit) as merged intervals."""
    out: list[tuple[int, int]] = []
    for word, mask in sorted(words):
        base, pos, x = 64 * word, 0, mask
        while x:
            tz = (x & -x).bit_length() - 1
            x >>= tz
            pos += tz
            ones = (~x & (x + 1)).bit_length() - 1
            out.append((base + pos, base + pos + ones - 1))
            x >>= ones
            pos += ones
    return merge_intervals(out)
