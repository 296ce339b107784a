"""The applier job: what a MySQL replica's SQL thread does, done in Spark over the Delta events table.

    rpl-sql apply [--channel CH]... [--warehouse DIR] [--batch-size N] [-S]

For each configured channel whose SQL thread runs (START REPLICA [SQL_THREAD]), batch after batch of the
events after the channel's applier position (`events.seq`):

1. **Decide once per distinct shape.** One narrow aggregation finds the distinct shapes -- (db_name,
   table_name) of row events, (command, default_db, tables) of statements -- with their counts; the compiled
   SQL functions (`should_apply*`, `filter_decided_by*`, `rewrite_db`) decide those few rows; the verdicts are
   broadcast-joined back. The cost per event is one hash probe whatever the number of rules.
2. **COUNTER hits per shape**, derived from (verdict, deciding rule, rewrite) and multiplied by the shape's
   count; checked against the reference evaluator (`evaluate.decide`) shape by shape (all shapes while
   cheap, else the most frequent ones), so a compiler bug stops the applier instead of writing wrong rows.
3. **Applied events** (events schema + `applied_db` + `decided_by`) are written by Spark as Parquet into the
   applied table's directory and committed to that Delta table by delta-rs in one commit that carries an app
   transaction (`rpl_sql.apply/<channel>`, version = the batch's last seq) and the batch's bookkeeping
   (counts per filter, GTIDs, positions) in its commit metadata.
4. **Control plane**: one `DeltaStore` commit adds the COUNTERs, moves the applier position and merges the
   GTIDs of every processed transaction, applied or ignored, into the channel's executed GTID set (MySQL
   commits filtered transactions as empty ones; `gtid` marker rows -- transactions ingest dropped at the
   source -- are recorded the same way and never applied).

Crash safety: the two commits are ordered and each is atomic. A run first compares the applied table's app
transaction version for the channel with the state's position: equal means clean; ahead means the last batch
reached the applied table but not the state, so the batch is completed from the metadata of its commit
(counts included, never recomputed); a crash before the data commit leaves only unreferenced files. Counts of
a recovered batch go only to filters not reconfigured since it was decided (a reconfiguration resets
COUNTER, as it would have after the batch in MySQL).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

import pyarrow as pa

from .compile import APPLIER_PREFIX, LABELS, TRUE_CODES, sql_str
from .errors import MySQLError
from .evaluate import (REWRITE_UNCOUNTED, TRANSACTION_CONTROL, XA_UNCOUNTED, RowEvent, TableRef, decide,
                       rewrite_db, statement_event)
from .events import EVENTS_SCHEMA, ROW_EVENT_TYPES, applied_path, events_path
from .rules import TYPES, FilterType, Filters, fold
from .state import Channel, ServerState, is_gr_channel
from .sparkenv import session_conf
from .applier_state import (ApplyError, BatchRecord, GtidSet, _merge, applier_status, record_batch,  # noqa: F401
                            slot_signature)

__all__ = ["apply", "main", "ApplyReport", "ChannelReport", "Progress", "ApplyError", "BatchRecord", "GtidSet",
           "record_batch", "applier_status", "derive_hits", "APPLIED_SCHEMA", "app_id", "not_running"]

log = logging.getLogger(__name__)
T = FilterType
APP_PREFIX = "rpl_sql.apply/"
META_KEY = "rpl_sql.apply"
DATA_DIR = "data"  # applied files live under <applied table>/data/<channel hash>/<end seq>-<uuid>/
TABLES_DDL = "array<struct<db:string,name:string,updating:boolean>>"
APPLIED_SCHEMA = pa.schema(list(EVENTS_SCHEMA) + [("applied_db", pa.string()), ("decided_by", pa.string())])
_TABLE_LABELS = frozenset({T.DO_TABLE.value, T.IGNORE_TABLE.value, T.WILD_DO_TABLE.value, T.WILD_IGNORE_TABLE.value})
VERIFY_BUDGET = 1_000_000  # evaluator rule checks spent verifying shapes per batch (verify='auto')
VERIFY_MAX_SHAPES = 4096
CLI_BATCH_SIZE = 1_000_000


def not_running(channel: str) -> MySQLError:
    """MySQL's ER_REPLICA_NOT_RUNNING (1199), naming the channel to start."""
    return MySQLError(1199, "HY000", "ER_REPLICA_NOT_RUNNING",
                      f"This operation requires a running replica; configure replica and do START REPLICA "
                      f"FOR CHANNEL '{channel}'")


def app_id(channel: str) -> str:
    """The Delta app transaction id of a channel's applier in the applied table."""
    return APP_PREFIX + channel



# GtidSet, BatchRecord, record_batch, applier_status: pure, in applier_state (the session reads them too)


# ---------------------------------------------------------------- hits of one decided shape

def _rewrite_index(filters: Filters, lctn: int) -> dict[str, str]:
    """folded `from` -> `to` of the first pair per source: evaluate.rewrite as a dict (O(1) per shape)."""
    idx: dict[str, str] = {}
    for src, dst in filters.values(T.REWRITE_DB):
        idx.setdefault(fold(src, lctn), dst)
    return idx


def derive_hits(filters: Filters, kind: str, command: str | None, db: str | None, apply: bool, decided_by: str,
                rewrite_idx: dict[str, str], lctn: int) -> tuple[FilterType, ...]:
    """COUNTER hits of one decision from its verdict and deciding rule (spec §4, §7), without re-deciding.

    `db` is the row's table database, or the statement's default database. Equal to `evaluate.decide(...).hits`
    (as a multiset); tests/test_apply.py checks it and so does the applier while it runs.
    """
    count_db = count_rw = True
    if kind == "query":
        cmd = statement_event(command, None).command
        if cmd in TRANSACTION_CONTROL:
            return ()
        count_db, count_rw = cmd not in XA_UNCOUNTED, cmd not in REWRITE_UNCOUNTED
    hits = []
    d = fold(db or "", lctn)
    if count_rw and d in rewrite_idx and rewrite_idx[d] != d:
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
    """The distinct shapes of `ev` (with_shape_key applied): count, first and last seq, the key hash `h`
    that _write joins on, and the tables parsed back (`t`).

    Only fixed-width aggregation buffers (counts, min/max of a long): Spark keeps hash aggregates; a string,
    struct or binary buffer would make it sort every row.
    """
    from pyspark.sql import functions as F

    return (ev.groupBy(*SHAPE_KEYS)
            .agg(F.count(F.lit(1)).alias("n"), F.min("seq").alias("lo"), F.max("seq").alias("hi"),
                 F.max(F.xxhash64(*SHAPE_KEYS)).alias("h"))
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
    """One distinct decision input of a batch (the raw key columns, `_tables` = to_json(tables)), its count and
    verdict."""

    key: tuple
    tables: list | None
    count: int
    min_seq: int
    max_seq: int
    apply: bool | None = None
    decided_by: str | None = None
    applied_db: str | None = None
    hits: tuple[FilterType, ...] = ()
    hash: int | None = None  # xxhash64 of the key columns, as Spark computes it per event in _write

    @property
    def kind(self) -> str:
        et = self.key[0]
        return "row" if et in ROW_EVENT_TYPES else et if et in ("query", "gtid") else f"unknown:{et}"

    @property
    def db(self) -> str | None:
        """What the database rules judge: the table's database (rows) or the default database (statements)."""
        return self.key[1] if self.kind == "row" else self.key[4]

    def event(self):
        if self.kind == "row":
            return RowEvent(self.key[1], self.key[2])
        refs = [TableRef(t["db"], t["name"], bool(t["updating"])) for t in (self.tables or ())]
        return statement_event(self.key[3], self.key[4], refs)

    def describe(self) -> str:
        et, db, table, cmd, ddb, tj = self.key
        if self.kind == "row":
            return f"{et} event on {db!r}.{table!r}"
        if self.kind == "query":
            return f"{cmd or 'OTHER'} statement (default db {ddb!r}, tables {tj})"
        return f"event_type {et!r}"


# ---------------------------------------------------------------- reports

@dataclass
class Progress:
    """Reported after every batch (and once per channel at the start)."""

    channel: str
    batch: int
    position: int  # applier position (seq) after the batch
    events_done: int  # events processed for this channel in this run
    events_pending: int | None  # estimate of what is left (from the events table's file stats)
    seconds: float  # since the channel started in this run

    @property
    def rate(self) -> float:
        return self.events_done / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        left = f", ~{self.events_pending:,} left" if self.events_pending is not None else ""
        return (f"[apply] channel '{self.channel}': batch {self.batch}, position {self.position:,}, "
                f"{self.events_done:,} events in {self.seconds:.1f}s ({self.rate:,.0f} events/s){left}")


@dataclass
class ChannelReport:
    """One channel's run: what was read, applied, ignored, and by which rule."""

    channel: str
    status: str = "up to date"  # 'applied' | 'up to date' | 'not running' | 'stopped' | 'no events'
    start_seq: int = 0
    end_seq: int = 0
    events: int = 0
    applied: int = 0
    ignored: int = 0
    gtid_only: int = 0
    source_dropped: int = 0  # ignored at the source by the ingest (not in the events table)
    batches: int = 0
    recovered: int = 0  # half-done batches completed from the applied table's metadata
    by_rule: dict[str, list[int]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    note: str = ""

    def add(self, rec: BatchRecord) -> None:
        self.events += rec.events
        self.applied += rec.applied
        self.ignored += rec.ignored
        self.gtid_only += rec.gtid_only
        self.source_dropped += rec.source_dropped
        self.end_seq = rec.end
        for k, (a, i) in rec.by_rule.items():
            cur = self.by_rule.setdefault(k, [0, 0])
            cur[0] += a
            cur[1] += i
        for k, n in rec.counts.items():
            if n:
                self.counters[k] = self.counters.get(k, 0) + n


@dataclass
class ApplyReport:
    """The summary of one `apply` run."""

    channels: list[ChannelReport]
    seconds: float = 0.0

    @property
    def events(self) -> int:
        return sum(c.events for c in self.channels)

    def channel(self, name: str) -> ChannelReport:
        return next(c for c in self.channels if c.channel == name)

    def table(self) -> str:
        """Per channel: events read, applied, ignored; then per channel and deciding rule."""
        from .render import format_table

        head = ("Channel", "Status", "Seqs", "Events", "Applied", "Ignored", "GTID only", "Dropped at source",
                "Batches", "Seconds", "Events/s")
        rows = [(c.channel, c.status + (f" ({c.note})" if c.note else ""),
                 f"{c.start_seq + 1}..{c.end_seq}" if c.end_seq > c.start_seq else "-", c.events, c.applied,
                 c.ignored, c.gtid_only, c.source_dropped, c.batches, f"{c.seconds:.1f}",
                 f"{c.events / c.seconds:,.0f}" if c.seconds > 0 and c.events else "-") for c in self.channels]
        out = format_table(head, rows)
        rule_rows = [(c.channel, rule, a, i, c.counters.get(rule, "")) for c in self.channels
                     for rule, (a, i) in sorted(c.by_rule.items())]
        if rule_rows:
            out += "\n" + format_table(("Channel", "Decided by", "Applied", "Ignored", "COUNTER +"), rule_rows)
        extra = [(c.channel, k, n) for c in self.channels for k, n in sorted(c.counters.items()) if k not in c.by_rule]
        if extra:
            out += "\n" + format_table(("Channel", "Filter", "COUNTER +"), extra)
        return out


# ---------------------------------------------------------------- the job

@contextlib.contextmanager
def _timed(what: str, channel: str):
    t = time.perf_counter()
    yield
    log.debug("channel '%s': %s %.2fs", channel, what, time.perf_counter() - t)


def _fs(path: str):
    from pyarrow import fs as pafs

    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(path)
    return pafs.FileSystem.from_uri(path)


class _Applier:
    def __init__(self, spark, warehouse: str, batch_size: int | None, progress: Callable[[Progress], None] | None,
                 verify: str):
        from .store import DeltaStore

        if batch_size is not None and batch_size <= 0:
            raise ValueError("batch_size must be positive")
        if verify not in ("auto", "all", "none"):
            raise ValueError("verify must be 'auto', 'all' or 'none'")
        self.spark = spark
        self.warehouse = warehouse
        self.store = DeltaStore(warehouse)
        self.batch_size = batch_size
        self.progress = progress
        self.verify = verify
        self.events = events_path(warehouse)
        self.applied = applied_path(warehouse)
        self._config_key = None

    # ------------------------------------------------------------ channels

    def targets(self, state: ServerState, channels: Iterable[str] | None) -> tuple[list[str], bool]:
        """The channels to run and whether they were named (named ones must exist and run: checked first)."""
        if channels is None:
            return [c.name for c in state.configured_channels()], False
        names = []
        for raw in channels:
            name = raw.lower()
            if is_gr_channel(name):
                raise MySQLError.of("ER_REPLICA_CHANNEL_OPERATION_NOT_ALLOWED", "rpl-sql apply", name)
            ch = state.channel(name)
            if ch is None:
                raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", name)
            if not ch.configured:
                raise MySQLError.of("ER_BAD_REPLICA")
            if name not in names:
                names.append(name)
        return names, True

    # ------------------------------------------------------------ the applied table

    def _applied_table(self, create: bool):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        from .deltalog import check

        check(self.applied)
        try:
            return DeltaTable(self.applied)
        except TableNotFoundError:
            if not create:
                return None
        try:
            return DeltaTable.create(self.applied, APPLIED_SCHEMA, mode="ignore", name="applied_events",
                                     description="events applied by rpl_sql's applier")
        except Exception:
            if DeltaTable.is_deltatable(self.applied):
                return DeltaTable(self.applied)
            raise

    @staticmethod
    def _find_record(dt, channel: str, end: int) -> BatchRecord | None:
        """The metadata of the commit that moved `channel` to `end` (newest commits first: it is recent)."""
        for limit in (64, 1024, None):
            history = dt.history(limit)
            for info in history:
                meta = info.get(META_KEY)
                if isinstance(meta, str):
                    meta = json.loads(meta)
                if isinstance(meta, dict) and meta.get("channel") == channel and meta.get("end") == end:
                    return BatchRecord.from_meta(meta)
            if limit is not None and len(history) < limit:
                break
        return None

    def recover(self, channel: str, report: ChannelReport) -> None:
        """Finish a batch that reached the applied table but not the state (crash between the two commits)."""
        state = self.store.load().state
        ch = state.channel(channel)
        dt = self._applied_table(create=False)
        done = (dt.transaction_version(app_id(channel)) or 0) if dt is not None else 0
        pos = ch.applier.seq
        if done == pos:
            return
        if done < pos:
            raise ApplyError(f"the applied table has events through seq {done} but the applier position is {pos} "
                             f"(was {self.applied} replaced or the position edited?)", channel)
        rec = self._find_record(dt, channel, done)
        if rec is None:
            raise ApplyError(f"the applied table's commit of batch ..{done} has no rpl_sql.apply metadata", channel)
        if rec.start != pos:
            raise ApplyError(f"the applied table is at seq {done} (batch from {rec.start}) but the applier position "
                             f"is {pos} (was the channel reset?)", channel)
        self._commit_state(rec)
        report.recovered += 1
        report.add(rec)

    def _commit_state(self, rec: BatchRecord) -> None:
        self.store.transact(lambda s: (record_batch(s, rec), None),
                            {"operation": "APPLY",
                             "statement": f"APPLY FOR CHANNEL '{rec.channel}' events {rec.start + 1}..{rec.end}"})

    def _commit_applied(self, rec: BatchRecord, actions: list) -> bool:
        """Commit the batch's files with its app transaction; False if this batch was already committed."""
        from deltalake import CommitProperties, PostCommitHookProperties
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import Transaction

        for attempt in range(50):
            dt = self._applied_table(create=True)
            done = dt.transaction_version(app_id(rec.channel)) or 0
            if done == rec.end:
                return False
            if done != rec.start:
                raise ApplyError(f"another applier moved the channel to seq {done} while this one applied "
                                 f"{rec.start + 1}..{rec.end}", rec.channel)
            try:
                dt.create_write_transaction(
                    actions, mode="append", schema=APPLIED_SCHEMA,
                    commit_properties=CommitProperties(
                        custom_metadata={META_KEY: rec.to_meta(), "rpl_sql.operation": "APPLY"},
                        max_commit_retries=0, app_transactions=[Transaction(app_id(rec.channel), rec.end)]),
                    post_commithook_properties=PostCommitHookProperties(create_checkpoint=True,
                                                                        cleanup_expired_logs=False))
                return True
            except CommitFailedError:
                time.sleep(min(0.5, 0.01 * 2 ** attempt))
        raise MySQLError.of("ER_LOCK_DEADLOCK")

    # ------------------------------------------------------------ Spark side

    def _ensure_spark(self):
        if self.spark is None:
            from .sparkenv import local_spark

            self.spark = local_spark(app_name="rpl_sql-apply", **{"spark.ui.showConsoleProgress": "false"})
        elif callable(self.spark):  # a factory: start Spark only now that there is work
            self.spark = self.spark()
        return self.spark

    def _functions(self, state: ServerState, channel: str) -> None:
        """The applier's compiled SQL functions for `channel` and every channel with the same filters
        (recompiled only when that changes).

        Its own set (compile_functions(applier=True)), so a session's `should_apply` & co. are left alone. Only
        these channels: every query that calls a SQL function analyses and optimises its whole body (at 10,000
        rules a shape query's planning took 1.40 s with 3 channels' code, 0.50 s with one channel's).
        """
        from .compile import compile_functions
        from .sparkenv import jit_huge_methods, map_lookup_hash_min

        def rules(c: Channel) -> tuple:
            return tuple(s.values for s in c.filters.slots)

        mine = rules(state.channel(channel))
        same = tuple(c for c in state.channels if rules(c) == mine)
        key = (state.lower_case_table_names, state.filter_mode, mine, tuple(c.name for c in same))
        if key != self._config_key:
            with _timed("compile + register functions", "*"):
                for text in compile_functions(replace(state, channels=same), jit_huge_methods=jit_huge_methods(
                        self.spark), applier=True, map_hash_min=map_lookup_hash_min(self.spark)).statements:
                    self.spark.sql(text)
            self._config_key = key

    def run_channel(self, channel: str, report: ChannelReport, version: int) -> None:
        from . import deltaread

        snap = deltaread.snapshot(self.events, version, {"channel": [channel]})
        stats_max = [f.max_values.get("seq") for f in snap.files]
        known_max = max(stats_max) if snap.files and all(m is not None for m in stats_max) else None
        t0 = time.perf_counter()
        state = self.store.load().state
        if not snap.files or (known_max is not None and known_max <= state.channel(channel).applier.seq):
            report.status = "up to date" if snap.files else "no events"
            return
        spark = self._ensure_spark()
        from pyspark.sql import functions as F

        events = deltaread.read_snapshot(spark, snap).withColumn("channel", F.lit(channel))
        done = 0
        batch = 0
        while True:
            state = self.store.load().state
            ch = state.channel(channel)
            if ch is None or not ch.configured or not ch.sql_running:
                report.status, report.note = "stopped", "SQL thread stopped during the run"
                break
            pos = ch.applier.seq
            rec = self.batch(events, state, ch, pos, version)
            if rec is None:
                break
            batch += 1
            done += rec.events
            report.batches += 1
            report.add(rec)
            report.status = "applied"
            if self.progress is not None:
                pending = None if known_max is None else max(0, known_max - rec.end)
                self.progress(Progress(channel, batch, rec.end, done, pending, time.perf_counter() - t0))
            if self.batch_size is None:
                break
        report.seconds += time.perf_counter() - t0

    def _batch_end(self, events, lo: int) -> int | None:
        """The last seq of a batch of about batch_size events after `lo`, extended to its transaction's end."""
        from pyspark.sql import functions as F

        if self.batch_size is None:
            return None
        hi = lo + self.batch_size
        row = events.where(F.col("seq") == hi).select("gtid").limit(1).collect()
        if not row:
            return None  # fewer events left than a batch: take them all
        gtid = row[0]["gtid"]
        if gtid is None:
            return hi
        last = events.where((F.col("seq") > hi) & (F.col("gtid") == gtid)).agg(F.max("seq")).collect()[0][0]
        return hi if last is None else last

    def batch(self, events, state: ServerState, ch: Channel, lo: int, version: int) -> BatchRecord | None:
        """Decide, write and commit one batch after seq `lo`; None when there is nothing after `lo`."""
        from pyspark.sql import functions as F

        with _timed("batch end", ch.name):
            hi = self._batch_end(events, lo)
        ev = events.where(F.col("seq") > lo)
        if hi is not None:
            ev = ev.where(F.col("seq") <= hi)
        ev = with_shape_key(ev)
        sql = state.filter_mode == "mysql"  # the compiled functions implement MySQL's semantics only
        if sql:
            self._functions(state, ch.name)
        with _timed("shapes + verdicts + gtids", ch.name):
            shapes, gtids, (last_file, last_pos) = self._aggregate(ev, ch, sql)
        if not shapes:
            return None
        total = sum(s.count for s in shapes)
        first, last = min(s.min_seq for s in shapes), max(s.max_seq for s in shapes)
        if first != lo + 1 or last - lo != total:
            raise ApplyError(f"events {lo + 1}..{last} are not gapless ({total} events, first seq {first}): "
                             f"ingest must write seq 1, 2, 3, ... per channel", ch.name)
        bad = [s for s in shapes if s.kind.startswith("unknown:")]
        if bad:
            raise ApplyError(f"seq {bad[0].min_seq}: unknown {bad[0].describe()}", ch.name)
        with _timed(f"hits of {len(shapes)} shapes", ch.name):
            self._decide(state, ch, [s for s in shapes if s.kind != "gtid"], sql)
        dropped, settled = self._settle_source_filtering(state, ch, lo, last)

        counts: dict[str, int] = {t.value: n for t, n in settled.items()}
        by_rule: dict[str, list[int]] = {}
        applied = ignored = gtid_only = 0
        for s in shapes:
            if s.kind == "gtid":
                gtid_only += s.count
                continue
            for h in s.hits:
                counts[h.value] = counts.get(h.value, 0) + s.count
            cur = by_rule.setdefault(s.decided_by, [0, 0])
            cur[0 if s.apply else 1] += s.count
            if s.apply:
                applied += s.count
            else:
                ignored += s.count
        rec = BatchRecord(
            channel=ch.name, start=lo, end=last, events=total, applied=applied, ignored=ignored, gtid_only=gtid_only,
            counts=counts, filters={t.value: slot_signature(ch.filters, t) for t in TYPES}, by_rule=by_rule,
            gtids=str(gtids), last_file=last_file, last_pos=last_pos, events_version=version,
            source_dropped=dropped)
        with _timed("write", ch.name):
            actions = self._write(ev, shapes, rec)
        with _timed("commit applied", ch.name):
            self._commit_applied(rec, actions)
        with _timed("commit state", ch.name):
            self._commit_state(rec)
        return rec

    def _settle_source_filtering(self, state: ServerState, ch: Channel, lo: int, hi: int
                                 ) -> tuple[int, dict[FilterType, int]]:
        """Events the ingest dropped at the source in (lo, hi]: re-decided with the filters in force now.

        Returns (events dropped, their COUNTER hits), which go into this batch's record: counted once, with the
        batch. Raises ApplyError, before any commit, when the current filters would apply a dropped event.
        """
        from .ingest import SourceFilterConflict, settle_source_filtering, source_filtered

        batches = source_filtered(self.warehouse, ch.name, after_seq=lo, through_seq=hi)
        if not batches:
            return 0, {}
        try:
            _, hits = settle_source_filtering(state, ch.name, batches)
        except SourceFilterConflict as e:
            raise ApplyError(str(e), ch.name) from None
        return sum(n for b in batches for n in b.dropped.values()), hits

    def _aggregate(self, ev, ch: Channel, sql: bool) -> tuple[list[Shape], GtidSet, tuple]:
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
        out: list[Shape] = []
        words: dict[str, set[tuple[int, int]]] = {}
        mariadb: dict[int, tuple[int, int]] = {}
        last = (0, None, None)  # (seq, binlog_file, binlog_pos) of the batch's last event
        for r in rows:
            if r["_set"] == "shape":
                s = Shape(tuple(r[k] for k in SHAPE_KEYS), r["t"], r["n"], r["lo"], r["hi"], hash=r["h"])
                if sql and s.kind in ("row", "query"):
                    if r["code"] not in LABELS:
                        raise ApplyError(f"seq {s.min_seq}: cannot decide the malformed {s.describe()}", ch.name)
                    s.apply, s.decided_by, s.applied_db = r["code"] in TRUE_CODES, LABELS[r["code"]], r["adb"]
                out.append(s)
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
        mysql_iv = {k: _word_intervals(v) for k, v in words.items()}
        return out, GtidSet(mysql_iv, mariadb), last[1:]

    def _decide(self, state: ServerState, ch: Channel, shapes: list[Shape], sql: bool) -> None:
        """Hits of the SQL verdicts (derived, then checked by the evaluator); without SQL, the evaluator decides."""
        lctn = state.lower_case_table_names
        if not sql:
            for s in shapes:
                d = decide(ch.filters, s.event(), lctn, state.filter_mode)
                s.apply, s.decided_by, s.applied_db, s.hits = d.apply, d.decided_by, self._applied_db(ch, s, lctn), d.hits
            return
        idx = _rewrite_index(ch.filters, lctn)
        for s in shapes:
            s.hits = derive_hits(ch.filters, s.kind, s.key[3], s.db,
                                 s.apply, s.decided_by, idx, lctn)
        self._verify(ch, shapes, lctn)

    @staticmethod
    def _applied_db(ch: Channel, s: Shape, lctn: int) -> str | None:
        return rewrite_db(ch.filters, s.db, lctn)

    def _verify(self, ch: Channel, shapes: list[Shape], lctn: int) -> None:
        if self.verify == "none":
            return
        rules = sum(len(ch.filters.values(t)) for t in TYPES) + 1
        todo = sorted(shapes, key=lambda s: -s.count)
        if self.verify == "auto":  # the most frequent shapes, within a budget of evaluator rule checks
            todo = todo[:min(VERIFY_MAX_SHAPES, max(256, VERIFY_BUDGET // rules))]
        for s in todo:
            try:
                d = decide(ch.filters, s.event(), lctn)
            except Exception as e:  # the evaluator refuses what SQL decided: a malformed or XA event
                raise ApplyError(f"seq {s.min_seq}: {s.describe()}: {e}", ch.name) from e
            got = (s.apply, s.decided_by, sorted(h.value for h in s.hits), s.applied_db)
            want = (d.apply, d.decided_by, sorted(h.value for h in d.hits), self._applied_db(ch, s, lctn))
            if got != want:
                raise ApplyError(f"the compiled functions disagree with the reference evaluator on the "
                                 f"{s.describe()} (seq {s.min_seq}): SQL {got}, evaluator {want}", ch.name)

    def _write(self, ev, shapes: list[Shape], rec: BatchRecord) -> list:
        """Write the applied events (of all the batch's `shapes`) as Parquet under the applied table; the
        delta-rs add actions for them."""
        from pyspark.sql import functions as F

        applied = [s for s in shapes if s.apply]
        if not applied:
            return []
        # The batch's shapes are all known (the snapshot is pinned), so when their 64-bit hashes are distinct the
        # verdicts join back on one long key; otherwise on the six key columns, null-safe (slower, same result).
        verdicts = {"applied_db": pa.array([s.applied_db for s in applied], pa.string()),
                    "decided_by": pa.array([s.decided_by for s in applied], pa.string())}
        if len({s.hash for s in shapes}) == len(shapes):
            v = self.spark.createDataFrame(pa.table({"v_h": pa.array([s.hash for s in applied], pa.int64()),
                                                     **verdicts}))
            cond = [F.xxhash64(*SHAPE_KEYS) == v["v_h"]]
        else:
            v = self.spark.createDataFrame(pa.table(
                {**{"v_" + n: pa.array([s.key[i] for s in applied], pa.string()) for i, n in enumerate(SHAPE_KEYS)},
                 **verdicts}))
            cond = [ev[k].eqNullSafe(v["v_" + k]) for k in SHAPE_KEYS]
        cols = [F.coalesce(F.col("filter_db"), F.lit("")).alias("filter_db") if n == "filter_db" else F.col(n)
                for n in EVENTS_SCHEMA.names]  # '' reads back NULL from a Delta partition: restore it
        out = ev.join(F.broadcast(v), cond, "inner").select(*cols, "applied_db", "decided_by")
        hashed = hashlib.sha1(rec.channel.encode("utf-8")).hexdigest()[:12]
        rel_dir = f"{DATA_DIR}/{hashed}/{rec.end:020d}-{uuid.uuid4().hex[:12]}"
        target = f"{self.applied.rstrip('/')}/{rel_dir}"
        with session_conf(self.spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                                       "spark.sql.parquet.compression.codec": "snappy"}):
            out.write.mode("errorifexists").parquet(target)
        actions, rows = _add_actions(target, rel_dir)
        if rows != rec.applied:
            raise ApplyError(f"wrote {rows} applied events, expected {rec.applied} (batch {rec.start + 1}..{rec.end}); "
                             f"nothing committed", rec.channel)
        return actions


def _word_intervals(words: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
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
    return _merge(out)


def _add_actions(target: str, rel_dir: str) -> tuple[list, int]:
    """AddActions (with numRecords and seq/channel stats from the footers) for the Parquet files Spark wrote."""
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs
    from deltalake.transaction import AddAction

    fs, base = _fs(target)
    infos = [i for i in fs.get_file_info(pafs.FileSelector(base, recursive=False))
             if i.type == pafs.FileType.File and i.base_name.endswith(".parquet")
             and not i.base_name.startswith(("_", "."))]
    actions, total = [], 0
    for info in sorted(infos, key=lambda i: i.base_name):
        with fs.open_input_file(info.path) as fh:
            md = pq.ParquetFile(fh).metadata
        if md.num_rows == 0:
            continue
        total += md.num_rows
        stats: dict[str, Any] = {"numRecords": md.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
        names = [md.schema.column(i).path for i in range(md.num_columns)]
        for col in ("channel", "seq"):
            if col not in names:
                continue
            j = names.index(col)
            rgs = [md.row_group(k).column(j).statistics for k in range(md.num_row_groups)]
            if all(s is not None and s.has_min_max and s.has_null_count for s in rgs):
                stats["minValues"][col] = min(s.min for s in rgs)
                stats["maxValues"][col] = max(s.max for s in rgs)
                stats["nullCount"][col] = sum(s.null_count for s in rgs)
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
        actions.append(AddAction(f"{rel_dir}/{info.base_name}", info.size, {}, mtime, True, json.dumps(stats)))
    return actions, total


def apply(spark, warehouse: str | os.PathLike | None = None, channels: Iterable[str] | None = None, *,
          batch_size: int | None = None, progress: Callable[[Progress], None] | None = None,
          verify: str = "auto") -> ApplyReport:
    """Run the applier over the events landed so far (the events table as of the start of the run).

    `spark`: a SparkSession, a function returning one, or None to start a local one (either only if some
    channel has events to apply).
    `channels`: names to run (each must exist, be configured and have its SQL thread running, else MySQL's
    error); None = every configured channel, skipping those whose SQL thread is stopped.
    `batch_size`: events per batch (extended to the end of the last transaction); None = one batch per channel.
    `progress`: called with a `Progress` after each batch. `verify`: 'auto' | 'all' | 'none' -- how many shapes
    the reference evaluator re-checks. Half-done batches of a crashed run are completed first.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from .session import resolve_warehouse

    t0 = time.perf_counter()
    job = _Applier(spark, resolve_warehouse(warehouse), batch_size, progress, verify)
    state = job.store.load().state
    names, named = job.targets(state, channels)
    reports = {n: ChannelReport(n) for n in names}
    for n in names:  # recovery is bookkeeping of work already done: it runs whether or not the thread runs
        reports[n].start_seq = reports[n].end_seq = state.channel(n).applier.seq
        job.recover(n, reports[n])
    state = job.store.load().state
    if named:
        for n in names:
            if not state.channel(n).sql_running:
                raise not_running(n)
    try:
        version = DeltaTable(job.events).version()
    except TableNotFoundError:
        version = None
    for n in names:
        rep = reports[n]
        ch = state.channel(n)
        if not ch.sql_running:
            rep.status, rep.note = "not running", "START REPLICA SQL_THREAD to apply"
            continue
        if version is None:
            rep.status = "no events"
            continue
        job.run_channel(n, rep, version)
    return ApplyReport(list(reports.values()), time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    """`rpl-sql apply`: run the applier, print progress on stderr and the summary on stdout."""
    p = argparse.ArgumentParser(prog="rpl-sql apply",
                                description="Apply landed change events as each channel's replica SQL thread would.")
    p.add_argument("--warehouse", help="warehouse directory (default: $RPL_SQL_WAREHOUSE or ./rpl_warehouse)")
    p.add_argument("--channel", action="append", help="channel to apply (repeatable; default: all configured)")
    p.add_argument("--batch-size", type=int, default=CLI_BATCH_SIZE,
                   help=f"events per batch, 0 = one batch per channel (default {CLI_BATCH_SIZE:,})")
    p.add_argument("-S", "--silent", action="store_true", help="no progress lines")
    p.add_argument("--master", help="Spark master (default local[2])")
    p.add_argument("--conf", metavar="KEY=VALUE", action="append", default=[], help="a Spark setting (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true", help="show Spark's own log (default: a file in $TMPDIR)")
    args = p.parse_args(argv)
    if any("=" not in c for c in args.conf):
        p.error("--conf wants KEY=VALUE")
    conf = dict(c.split("=", 1) for c in args.conf)

    def start_spark():
        from .sparkenv import local_spark

        return local_spark(app_name="rpl_sql-apply", master=args.master or "local[2]", verbose=args.verbose,
                           **{"spark.ui.showConsoleProgress": "false", **conf})

    from .progress import Progress as Display, bar

    display = Display()

    def show(pr: Progress) -> None:
        if not display.tty:
            display.show("", str(pr))
            return
        total = pr.events_done + pr.events_pending if pr.events_pending is not None else None
        display.show(f"[apply {pr.channel!r}] batch {pr.batch}", bar(pr.events_done, total, pr.rate, "events"))

    try:
        report = apply(start_spark, args.warehouse, args.channel, batch_size=args.batch_size or None,
                       progress=None if args.silent else show)
    except MySQLError as e:
        display.close()
        sys.stderr.write(f"ERROR {e.code} ({e.sqlstate}): {e.message}\n")
        return 1
    except ApplyError as e:
        display.close()
        sys.stderr.write(f"ERROR: applier stopped: {e}\n")
        return 1
    display.close()
    sys.stdout.write(report.table() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
