"""Shapes: the distinct (db, table) or (command, default db, tables) of events, decided once each.

The COUNTER hits of one decided shape follow from its verdict, deciding rule and rewrite (`derive_hits`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa

from rpl_sql.server.applier_state import ApplyError, BatchRecord, slot_signature
from rpl_sql.server.applier_state import rule_counts_meta
from rpl_sql.compile import APPLIER_PREFIX, sql_str
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import (
    REWRITE_UNCOUNTED,
    TRANSACTION_CONTROL,
    XA_UNCOUNTED,
    Decider,
    RowEvent,
    TableRef,
    decide,
    decision_key,
    hit_rules,
    rewrite_db,
    statement_decision_key,
    statement_event,
)
from rpl_sql.pipeline.events import EVENTS_SCHEMA, ROW_EVENT_TYPES, SHAPE_ID, TABLES_TYPE
from rpl_sql.pipeline.summary import Summary
from rpl_sql.filters.rules import TYPES, Filters, FilterType, Matching, first_pair, fold, tally_rule_hits

log = logging.getLogger(__name__)

T = FilterType
META_KEY = "rpl_sql.apply"
DATA_DIR = "data"  # applied files live under <applied table>/data/<channel hash>/<end seq>-<uuid>/
TABLES_DDL = "array<struct<db:string,name:string,updating:boolean>>"
APPLIED_SCHEMA = pa.schema([f for f in EVENTS_SCHEMA if f.name != SHAPE_ID]
                        + [("applied_db", pa.string()), ("decided_by", pa.string())])
_TABLE_LABELS = frozenset({T.DO_TABLE.value, T.IGNORE_TABLE.value, T.WILD_DO_TABLE.value, T.WILD_IGNORE_TABLE.value})
VERIFY_BUDGET = 1_000_000  # evaluator rule checks spent verifying shapes per batch (verify='auto')
VERIFY_MAX_SHAPES = 4096
_KINDS = {**{et: "row" for et in ROW_EVENT_TYPES}, "query": "query", "gtid": "gtid"}


def not_running(channel: str) -> MySQLError:
    """MySQL's ER_REPLICA_NOT_RUNNING (1199), naming the channel to start."""
    return MySQLError(1199, "HY000", "ER_REPLICA_NOT_RUNNING",
                      f"This operation requires a running replica; configure replica and do START REPLICA "
                      f"FOR CHANNEL '{channel}'")


def app_id(channel: str) -> str:
    """The Delta app transaction id of a channel's applier in the applied table."""
    return delta_commit.app_id("apply", channel)



# ---------------------------------------------------------------- hits of one decided shape

def derive_hits(filters: Filters, kind: str, command: str | None, db: str | None, apply: bool, decided_by: str,
                lctn: int) -> tuple[FilterType, ...]:
    """COUNTER hits of one decision from its verdict and deciding rule (spec §4, §7), without re-deciding.

    `db` is the row's table database, or the statement's default database. Equal to `evaluate.decide(...).hits`
    (as a multiset); tests/pipeline/test_apply.py checks it and so does the applier while it runs.
    """
    count_db = count_rw = True
    if kind == "query":
        cmd = statement_event(command, None).command
        if cmd in TRANSACTION_CONTROL:
            return ()
        count_db, count_rw = cmd not in XA_UNCOUNTED, cmd not in REWRITE_UNCOUNTED
    hits = []
    d = fold(db or "", lctn)
    pair = first_pair(filters.values(T.REWRITE_DB), d, lctn) if count_rw else None
    if pair is not None and pair[1] != d:
        hits.append(T.REWRITE_DB)
    if filters.values(T.DO_DB) and count_db and not (decided_by == T.DO_DB.value and not apply):
        hits.append(T.DO_DB)
    if decided_by == T.IGNORE_DB.value and count_db:
        hits.append(T.IGNORE_DB)
    if decided_by in _TABLE_LABELS:
        hits.append(T(decided_by))
    return tuple(hits)


SHAPE_KEYS = ("event_type", "db_name", "table_name", "command", "default_db", "_tables")


def with_shape_key(ev):
    """`ev` plus `_tables`, the last shape key: a statement's tables as JSON (row events: NULL; to_json on
    every row event would double the shape pass)."""
    from pyspark.sql import functions as F

    return ev.withColumn("_tables", F.when(F.col("event_type") == "query", F.to_json("tables")))


def shape_frame(ev):
    """The distinct shapes of `ev` (with_shape_key applied): count, first and last seq, and the tables parsed
    back (`t`).

    Only fixed-width aggregation buffers (counts, min/max of a long): Spark keeps hash aggregates; a string,
    struct or binary buffer would make it sort every row.
    """
    from pyspark.sql import functions as F

    return (ev.groupBy(*SHAPE_KEYS)
            .agg(F.count(F.lit(1)).alias("n"), F.min("seq").alias("lo"), F.max("seq").alias("hi"))
            .withColumn("t", F.from_json("_tables", TABLES_DDL)))


def decision_columns(channel: str) -> list:
    """`code` (verdict and label in one, compile.LABELS / TRUE_CODES) and `adb` (the database after
    rewrite) of shape_frame rows, from the applier's function set (compile_functions(applier=True))."""
    from pyspark.sql import functions as F

    et, c, P = F.col("event_type"), sql_str(channel), APPLIER_PREFIX
    row, query = et.isin(*ROW_EVENT_TYPES), et == "query"
    return [F.when(row, F.expr(f"{P}row_code({c}, db_name, table_name)"))
            .when(query, F.expr(f"{P}statement_code({c}, command, default_db, t)")).alias("code"),
            F.when(row, F.expr(f"{P}rewrite_db({c}, db_name)"))
            .when(query, F.expr(f"{P}rewrite_db({c}, default_db)")).alias("adb")]


@dataclass
class Shape:
    """One distinct decision input of a batch (the raw key columns, the last a text equal only for equal table
    lists: Spark's to_json(tables) or summary.tables_key), a statement's tables, its count and verdict."""

    key: tuple
    tables: tuple[TableRef, ...] | None
    count: int
    min_seq: int
    max_seq: int
    apply: bool | None = None
    decided_by: str | None = None
    applied_db: str | None = None
    hits: tuple[FilterType, ...] = ()
    rule_hits: tuple = ()  # evaluate.hit_rules: the rule behind each hit
    kind: str = field(init=False)  # row, query, gtid or unknown:<event_type>
    db: str | None = field(init=False)  # what the database rules judge: the table's or the default database

    def __post_init__(self):  # kind and db set once: read several times a shape, they cost deciding a tenth
        et = self.key[0]
        self.kind = _KINDS.get(et) or f"unknown:{et}"
        self.db = self.key[1] if self.kind == "row" else self.key[4]

    def event(self):
        if self.kind == "row":
            return RowEvent(self.key[1], self.key[2])
        return statement_event(self.key[3], self.key[4], self.tables or ())

    def decision_key(self) -> tuple:
        """decision_key(self.event()); a statement's without its event."""
        if self.kind == "row":
            return decision_key(self.event())
        return statement_decision_key(self.key[3], self.key[4], self.tables or ())

    def describe(self) -> str:
        et, db, table, cmd, ddb, _ = self.key
        if self.kind == "row":
            return f"{et} event on {db!r}.{table!r}"
        if self.kind == "query":
            names = [f"{t.db!r}.{t.name!r}" if t.db is not None else repr(t.name) for t in self.tables or ()]
            return f"{cmd or 'OTHER'} statement (default db {ddb!r}, tables [{', '.join(names)}])"
        return f"event_type {et!r}"


def refs_of(tables) -> tuple[TableRef, ...] | None:
    """A statement's tables as the events table and Spark hold them (dicts or rows with db, name and updating)
    as Shape.tables holds them: as they are (a NULL `updating`, which the evaluator takes as false, stays NULL,
    so the write finds the events by the same lists)."""
    return None if tables is None else tuple(TableRef(t["db"], t["name"], t["updating"]) for t in tables)


def tables_array(shapes: Sequence["Shape"]) -> pa.Array:
    """The shapes' tables as the events table's `tables` column (NULL but for statements)."""
    return pa.array([[(t.db, t.name, t.updating) for t in s.tables]
                     if s.kind == "query" and s.tables is not None else None for s in shapes], TABLES_TYPE)


def key_table(shapes: Sequence["Shape"]) -> pa.Table:
    """The shapes' key columns as the events table holds them (the five plain ones and `tables`): what a write
    finds each event's shape by."""
    return pa.table({**{k: pa.array([s.key[i] for s in shapes], pa.string()) for i, k in enumerate(SHAPE_KEYS[:5])},
                     "tables": tables_array(shapes)})


@dataclass(frozen=True)
class AppliedShapes:
    """The shapes a batch applies, as its write finds events by them: their key columns and `tables` (as
    `key_table` gives them), and each one's applied_db, decided_by and count of events, in one row order.
    `by_summary`: for summaries the batch's shapes were merged from, per row of the summary's shapes its applied
    shape's row (-1: not applied), found when they were merged."""

    keys: pa.Table
    applied_db: pa.Array
    decided_by: pa.Array
    counts: np.ndarray
    by_summary: tuple[tuple[Summary, np.ndarray], ...] = ()

    def rows_of(self, summary: Summary) -> np.ndarray | None:
        """Per row of `summary`'s shapes, its applied shape's row (-1: none), if the batch was merged from it."""
        return next((rows for s, rows in self.by_summary if s is summary), None)

    def __len__(self) -> int:
        return self.keys.num_rows


def applied_shapes(shapes: Sequence["Shape"]) -> AppliedShapes:
    """The AppliedShapes of decided Shapes."""
    applied = [s for s in shapes if s.apply]
    return AppliedShapes(key_table(applied), pa.array([s.applied_db for s in applied], pa.string()),
                         pa.array([s.decided_by for s in applied], pa.string()),
                         np.array([s.count for s in applied], np.int64))


def reference(channel: str, filters: Filters, s: "Shape", matching: Matching | int, event=None,
              decider: Decider | None = None):
    """The evaluator's decision of shape `s` (of `event`, its event, when built already; by `decider`, the
    evaluator's cache for these filters, if given); an ApplyError naming the shape's first seq when the
    evaluator refuses it (a malformed or XA event)."""
    try:
        event = s.event() if event is None else event
        return decide(filters, event, matching) if decider is None else decider.decide(event)
    except Exception as e:
        raise ApplyError(f"seq {s.min_seq}: {s.describe()}: {e}", channel) from e


def decide_shapes(channel: str, filters: Filters, shapes: Sequence["Shape"], matching: Matching) -> None:
    """Each shape's verdict, deciding rule, hits (per rule too) and applied database, by the reference
    evaluator: once per distinct decision input (`evaluate.decision_key`: a batch's shapes differing only in
    the row event's type, a statement's command within its class or the tables it only reads share one)."""
    lctn = matching.lower_case_table_names
    decider = Decider(filters, matching)
    decided: dict[tuple, tuple] = {}
    applied_db: dict[str | None, str | None] = {}
    for s in shapes:
        key = s.decision_key()
        got = decided.get(key)
        if got is None:
            event = s.event()
            d = reference(channel, filters, s, matching, event, decider)
            got = decided[key] = (d.apply, d.decided_by, d.hits, hit_rules(filters, event, d, lctn) if d.hits else ())
        s.apply, s.decided_by, s.hits, s.rule_hits = got
        if s.db not in applied_db:
            applied_db[s.db] = rewrite_db(filters, s.db, lctn)
        s.applied_db = applied_db[s.db]


def batch_record(ch, shapes, settled: dict, settled_rules: dict | None = None, **fields) -> BatchRecord:
    """The record of a decided batch: COUNTER and per-rule hits and verdicts summed over its shapes or their
    `shape_table.Tally`s (plus `settled` / `settled_rules`, the hits of events dropped at the source), the
    channel's filter signatures, the time, and `fields` (channel, start, end, events, gtids, last_file, last_pos,
    events_version, source_dropped)."""
    counts: dict[str, int] = {t.value: n for t, n in settled.items()}
    rules: dict[FilterType, dict] = {t: dict(per) for t, per in (settled_rules or {}).items()}
    by_rule: dict[str, list[int]] = {}
    applied = ignored = gtid_only = 0
    for s in shapes:
        if s.kind == "gtid":
            gtid_only += s.count
            continue
        for h in s.hits:
            counts[h.value] = counts.get(h.value, 0) + s.count
        tally_rule_hits(rules, s.rule_hits, s.count)
        cur = by_rule.setdefault(s.decided_by, [0, 0])
        cur[0 if s.apply else 1] += s.count
        if s.apply:
            applied += s.count
        else:
            ignored += s.count
    return BatchRecord(applied=applied, ignored=ignored, gtid_only=gtid_only, counts=counts, by_rule=by_rule,
                       filters={t.value: slot_signature(ch.filters, t) for t in TYPES},
                       rule_counts=rule_counts_meta(rules), at=time.time_ns() // 1000, **fields)
