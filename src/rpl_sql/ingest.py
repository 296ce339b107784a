"""Land a channel's source binlog in the canonical events table, exactly once, crash-safe.

    >>> report = ingest_channel("/tmp/wh", "a")          # doctest: +SKIP
    >>> report.landed, report.end                        # doctest: +SKIP
    (1234, ('binlog.000002', 8821))

How it stays exact:

* **Position and events in one Delta commit.** Each batch of whole transactions is appended with commit
  metadata ``rpl_sql.ingest.*`` (channel, resume `binlog_file`/`binlog_pos`, `first_seq`/`last_seq`, last
  `gtid`, ...) and the app transaction ``rpl_sql.ingest.<channel>`` = `last_seq`. A Delta commit is one
  atomic put-if-absent of a log file: it lands with its position or not at all. A crash (even SIGKILL)
  before it leaves only unreferenced parquet files; the re-run reads from the last committed position.
* **Where to resume** is read from the table itself: the app transaction version (kept in every checkpoint,
  so it never ages out) names the channel's last seq; the commit that set it is found newest-first in the
  history (the table is created with `delta.enableExpiredLogCleanup=false`, so its commitInfo stays). If the
  log was cleaned by another tool, the row with that seq holds the same position (every batch ends with a
  transaction's last event). No side table that could disagree.
* **One writer per channel.** A local `flock` turns a second concurrent ingest of a channel away at once
  (`ConcurrentIngest`); the guarantee does not depend on it: each commit carries the app transaction, and
  delta-rs refuses a commit when a concurrent one set the same app id (checked again after every commit).
* Only whole transactions land: a batch ends at Xid / COMMIT / XA PREPARE or a standalone statement (DDL,
  non-transactional DML); a transaction cut by the end of the stream is read again next time.

Mapping (see `events.py`): query events land as `query` rows classified with `classify` (command, kind,
tables); the Xid event lands as a `query` row `COMMIT /* xid=N */`; consecutive rows events of one statement
on one table and change type (one Table_map, which is what MySQL counts a filter hit on) land as one row
whose `rows` is the JSON list of `{"before": ..., "after": ...}` images (binary values as
``{"$binary": base64}``, decimals as strings, temporal values ISO 8601). Column names need the source to log
them: ``binlog_row_metadata=FULL`` (MariaDB 10.5+, MySQL 8.0.14+); otherwise they are ``UNKNOWN_COL<n>``.
Statement context events (INTVAR, RAND, USER_VAR) and row-query/annotate events are not landed. MySQL
sources need ``binlog_transaction_compression=OFF``. Reading is by file and position (COM_BINLOG_DUMP, the
same on MariaDB and MySQL); a first ingest starts at the channel's SOURCE_LOG_FILE/POS, else at the first
binlog, as a MySQL replica does. The source user needs REPLICATION SLAVE and REPLICATION CLIENT (or
BINLOG MONITOR on MariaDB) privileges.

Filtering at the source (``filter_at_source=True``, MySQL's unbuilt WL#2387) drops an event only when its
verdict is IGNORE and a function of what is recorded about it (see `SourceFilter`); every dropped event's
decision key is kept, with its count, in the commit (``rpl_sql.ingest.dropped``), so the applier can
re-decide the dropped keys with the filters in force when it runs (refusing the range if any would now be
applied) and add their counter hits, exactly once, in the commit that records its own progress
(`settle_source_filtering`). Fully dropped transactions land as one ``event_type='gtid'`` row: GTIDs are never
filtered.

The applier's duty for a batch (lo, hi] of a channel: ``settle_source_filtering(state, ch, source_filtered(wh,
ch, after_seq=lo, through_seq=hi))`` -- it raises SourceFilterConflict when today's filters would apply a
dropped event (the range must then be re-ingested without filtering at the source), else returns the
COUNTER hits to add with the batch's own, in the same state commit (and in the batch's recovery metadata).
Each ingest commit's `last_seq` falls in exactly one applier batch, so each is settled exactly once.
"""
from __future__ import annotations

import argparse
import base64
import datetime as _dt
import decimal
import hashlib
import json
import logging
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from .evaluate import TRANSACTION_CONTROL, RowEvent, TableRef, decide, statement_event
from .events import EVENTS_SCHEMA, PARTITION_BY, events_path
from .rules import TYPES, FilterType
from .state import ServerState
from .store import DeltaStore

__all__ = ["IngestReport", "IngestError", "ConcurrentIngest", "SourceFilterConflict", "ChannelPosition",
           "SourceFilter", "SourceFiltered", "ingest_channel", "ingest_all", "committed_position",
           "filters_fingerprint", "source_filtered", "settle_source_filtering", "main"]

log = logging.getLogger(__name__)

APP_PREFIX = "rpl_sql.ingest."          # app transaction id: APP_PREFIX + channel, version = last seq
META = "rpl_sql.ingest."                # commit metadata key prefix
TABLE_CONFIG = {"delta.enableExpiredLogCleanup": "false"}  # keep every commitInfo: positions live there
MAX_DROPPED_KEYS = 2000                 # distinct dropped decision keys per commit (bounds commitInfo size)
MAX_MERGED_IMAGES = 50_000              # row images merged into one landed row at most


class IngestError(Exception):
    """The ingest cannot proceed; nothing was committed by the failing step."""


class ConcurrentIngest(IngestError):
    """Another process is ingesting the same channel (or committed for it since this one started)."""


class SourceFilterConflict(IngestError):
    """Events dropped at the source would be applied by the channel's current filters."""


def app_id(channel: str) -> str:
    return APP_PREFIX + channel


# ============================================================== positions in the events table

@dataclass(frozen=True)
class ChannelPosition:
    """What the events table says about a channel: the last seq and the commit metadata that set it."""

    last_seq: int
    version: int | None            # events-table version of that commit (None: found from the data)
    metadata: dict[str, str]       # the ``rpl_sql.ingest.*`` keys, without the prefix

    @property
    def binlog(self) -> tuple[str, int] | None:
        f, p = self.metadata.get("binlog_file"), self.metadata.get("binlog_pos")
        return (f, int(p)) if f and p else None


def _ingest_meta(info: dict[str, Any]) -> dict[str, str]:
    return {k[len(META):]: str(v) for k, v in info.items() if k.startswith(META)}


def _open(path: str) -> DeltaTable | None:
    from .deltalog import check

    check(path)
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def committed_position(warehouse: str, channel: str, dt: DeltaTable | None = None) -> ChannelPosition | None:
    """The channel's committed position, or None before its first ingest.

    The app transaction version is the truth for the last seq; the commit carrying that seq is looked up
    newest-first in growing windows (usually among the last few commits). Should the log have been cleaned,
    the row with that seq gives the binlog position (every batch ends with a transaction's last event).
    """
    dt = dt if dt is not None else _open(events_path(warehouse))
    if dt is None:
        return None
    last = dt.transaction_version(app_id(channel))
    if last is None:
        return None
    for limit in (16, 256, 4096, None):
        hist = dt.history(limit)
        for info in hist:
            meta = _ingest_meta(info)
            if meta.get("channel") == channel and meta.get("last_seq") == str(last):
                return ChannelPosition(last, int(info["version"]), meta)
        if limit is None or len(hist) < limit:
            break
    row = _row_at_seq(dt, channel, last)
    if row is None:
        raise IngestError(f"channel {channel!r}: app transaction says seq {last}, but neither a commit nor a "
                          "row records it")
    meta = {"channel": channel, "last_seq": str(last), "source": row["source"] or ""}
    if row["source"] == "binlog" or row["source"] is None:
        meta.update(binlog_file=row["binlog_file"], binlog_pos=str(row["binlog_pos"]), gtid=row["gtid"] or "")
    return ChannelPosition(last, None, meta)


def _row_at_seq(dt: DeltaTable, channel: str, seq: int) -> dict | None:
    import pyarrow.dataset as ds

    chan = ds.field("channel").is_null() if channel == "" else ds.field("channel") == channel
    t = dt.to_pyarrow_dataset().to_table(filter=chan & (ds.field("seq") == seq),
                                         columns=["binlog_file", "binlog_pos", "gtid", "source"])
    rows = t.to_pylist()
    return rows[0] if rows else None


# ============================================================== the writer: lock, snapshot, atomic commits

class _ChannelLock:
    """An advisory flock per (warehouse, channel): dies with its process, so a SIGKILL leaves no stale lock."""

    def __init__(self, warehouse: str, channel: str):
        self.path = None
        if "://" not in warehouse or warehouse.startswith("file://"):
            root = warehouse[7:] if warehouse.startswith("file://") else warehouse
            digest = hashlib.sha1(channel.encode("utf-8")).hexdigest()[:16]
            self.path = os.path.join(root, ".locks", f"ingest-{digest}.lock")
        self.fd: int | None = None

    def acquire(self, channel: str) -> None:
        if self.path is None:
            return
        import fcntl

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConcurrentIngest(f"channel {channel!r} is being ingested by another process") from None
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class EventsWriter:
    """Appends batches for one channel; every commit carries its position and the channel's app transaction.

    Shared by the binlog and Debezium ingests. `position` is what the table says at open time.
    """

    def __init__(self, warehouse: str, channel: str, lock: bool = True):
        self.warehouse = os.fspath(warehouse)
        self.channel = channel
        self.path = events_path(self.warehouse)
        self._lock = _ChannelLock(self.warehouse, channel) if lock else None
        self.dt: DeltaTable | None = None
        self.position: ChannelPosition | None = None
        self.last_seq = 0
        self.commits = 0
        self.bytes_written = 0

    def open(self) -> "EventsWriter":
        if self._lock is not None:
            self._lock.acquire(self.channel)
        try:
            self.dt = self._create_or_open()
            self.position = committed_position(self.warehouse, self.channel, self.dt)
            self.last_seq = self.position.last_seq if self.position else 0
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> "EventsWriter":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _create_or_open(self) -> DeltaTable:
        dt = _open(self.path)
        if dt is not None:
            return dt
        try:
            return DeltaTable.create(self.path, EVENTS_SCHEMA, partition_by=PARTITION_BY, mode="ignore",
                                     name="events", configuration=TABLE_CONFIG)
        except DeltaError:  # created concurrently by another channel's ingest
            dt = _open(self.path)
            if dt is None:
                raise
            return dt

    def commit(self, table: pa.Table, metadata: dict[str, str]) -> int:
        """Append `table` (rows numbered last_seq+1..) with `metadata`; returns the new table version.

        Raises ConcurrentIngest when another writer advanced this channel: nothing of ours was committed.
        """
        n = table.num_rows
        first, last = self.last_seq + 1, self.last_seq + n
        meta = {META + k: v for k, v in metadata.items()}
        meta.update({META + "channel": self.channel, META + "first_seq": str(first), META + "last_seq": str(last),
                     META + "rows": str(n)})
        props = CommitProperties(custom_metadata=meta, app_transactions=[Transaction(app_id(self.channel), last)])
        hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
        try:
            write_deltalake(self.dt, table, mode="append", partition_by=PARTITION_BY, commit_properties=props,
                            post_commithook_properties=hooks)
        except CommitFailedError as e:
            self._check_owner(e)
            raise
        version = self.dt.version()
        self.last_seq = last
        self.commits += 1
        self.bytes_written += _added_bytes(self.path, version)
        self._check_owner(None)
        return version

    def _check_owner(self, cause: Exception | None) -> None:
        """After a commit (or a failed one): the channel's app transaction must still be ours."""
        fresh = DeltaTable(self.path)
        now = fresh.transaction_version(app_id(self.channel)) or 0
        if now != self.last_seq:
            raise ConcurrentIngest(f"channel {self.channel!r}: another writer moved it to seq {now} "
                                   f"(this ingest was at {self.last_seq})") from cause


def _added_bytes(path: str, version: int) -> int:
    """Bytes of the data files a commit added (from its log entry; 0 when the log is not local)."""
    if "://" in path and not path.startswith("file://"):
        return 0
    log_file = os.path.join(path[7:] if path.startswith("file://") else path, "_delta_log", f"{version:020d}.json")
    total = 0
    try:
        with open(log_file, encoding="utf-8") as f:
            for line in f:
                if line.startswith('{"add"'):
                    total += int(json.loads(line)["add"].get("size", 0))
    except OSError:
        return 0
    return total


# ============================================================== canonical rows

_COLS = [f.name for f in EVENTS_SCHEMA]


try:  # arro3 (a deltalake dependency) hands lists to pyarrow without pa.array's pandas probe (~1.5 s import)
    from arro3.core import Array as _A3Array, DataType as _A3Type
    _A3 = {"string": _A3Type.string(), "int64": _A3Type.int64(), "bool": _A3Type.bool()}
except ImportError:  # pragma: no cover
    _A3Array = None
_PA = {"string": pa.string(), "int64": pa.int64(), "bool": pa.bool_()}
_TABLE_STRUCT = EVENTS_SCHEMA.field("tables").type.value_type


def _arr(values: list, kind: str) -> pa.Array:
    if _A3Array is None:
        return pa.array(values, _PA[kind])
    return pa.array(_A3Array(values, _A3[kind]))


class Batch:
    """Canonical rows being collected column by column (`seq` is assigned at commit)."""

    _PLAIN = ("gtid", "binlog_file", "binlog_pos", "event_type", "command", "statement_kind", "default_db",
              "db_name", "table_name", "statement", "rows", "event_time", "filter_db")

    def __init__(self, channel: str, source: str):
        self.channel, self.source = channel, source
        self.cols: dict[str, list] = {c: [] for c in self._PLAIN}
        # `tables` flattened: per row an offset (None for NULL), then db / name / updating of every entry
        self.t_offsets: list = []
        self.t_db: list = []
        self.t_name: list = []
        self.t_upd: list = []
        self.dropped: Counter = Counter()

    def __len__(self) -> int:
        return len(self.cols["event_type"])

    def add(self, gtid, file, pos, event_type, command=None, kind=None, default_db=None, db_name=None,
            table_name=None, tables=None, statement=None, rows=None, time_us=0) -> None:
        c = self.cols
        c["gtid"].append(gtid)
        c["binlog_file"].append(file)
        c["binlog_pos"].append(pos)
        c["event_type"].append(event_type)
        c["command"].append(command)
        c["statement_kind"].append(kind)
        c["default_db"].append(default_db)
        c["db_name"].append(db_name)
        c["table_name"].append(table_name)
        c["statement"].append(statement)
        c["rows"].append(rows)
        c["event_time"].append(time_us)
        c["filter_db"].append(db_name if event_type in ("write_rows", "update_rows", "delete_rows")
                              else (default_db or ""))
        if tables is None:
            self.t_offsets.append(None)
        else:
            self.t_offsets.append(len(self.t_db))
            for t in tables:
                self.t_db.append(t["db"])
                self.t_name.append(t["name"])
                self.t_upd.append(t["updating"])

    def _tables(self) -> pa.Array:
        offsets = self.t_offsets
        ends = [len(self.t_db)]
        # ListArray.from_arrays wants n+1 offsets; a NULL list takes the next valid offset (mask marks it)
        fixed, nxt = [], ends[0]
        for o in reversed(offsets):
            fixed.append(nxt if o is None else o)
            if o is not None:
                nxt = o
        fixed.reverse()
        values = pa.StructArray.from_arrays(
            [_arr(self.t_db, "string"), _arr(self.t_name, "string"), _arr(self.t_upd, "bool")],
            fields=list(_TABLE_STRUCT))
        mask = _arr([o is None for o in offsets], "bool")
        return pa.ListArray.from_arrays(_arr(fixed + ends, "int64").cast(pa.int32()), values,
                                        type=EVENTS_SCHEMA.field("tables").type, mask=mask)

    def to_table(self, first_seq: int) -> pa.Table:
        n = len(self)
        c = self.cols
        arrays = []
        for f in EVENTS_SCHEMA:
            name = f.name
            if name == "channel":
                arrays.append(_arr([self.channel] * n, "string"))
            elif name == "seq":
                arrays.append(_arr(list(range(first_seq, first_seq + n)), "int64"))
            elif name == "source":
                arrays.append(_arr([self.source] * n, "string"))
            elif name == "tables":
                arrays.append(self._tables())
            elif name in ("binlog_pos",):
                arrays.append(_arr(c[name], "int64"))
            elif name == "event_time":
                arrays.append(_arr(c[name], "int64").view(f.type))
            else:
                arrays.append(_arr(c[name], "string"))
        return pa.Table.from_arrays(arrays, schema=EVENTS_SCHEMA)

    def clear(self) -> None:
        for v in self.cols.values():
            v.clear()
        for v in (self.t_offsets, self.t_db, self.t_name, self.t_upd):
            v.clear()
        self.dropped.clear()


def _json_default(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, _dt.timedelta):  # MySQL TIME
        sign = "-" if v < _dt.timedelta(0) else ""
        us = abs(v) // _dt.timedelta(microseconds=1)
        s, us = divmod(us, 1_000_000)
        return f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" + (f".{us:06d}" if us else "")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$binary": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, (set, frozenset)):
        return sorted(v, key=str)
    raise TypeError(f"cannot land a {type(v).__name__} value")


def rows_json(images: list[dict]) -> str:
    """Row images as the canonical JSON text."""
    return json.dumps(images, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def tables_value(tables: Iterable[TableRef]) -> list[dict]:
    return [{"db": t.db, "name": t.name, "updating": bool(t.updating)} for t in tables]


# ============================================================== filtering at the source

def filters_fingerprint(state: ServerState, channel: str) -> str:
    """A hash of everything a channel's decisions depend on: its rule values, lctn and the filter mode."""
    ch = state.channel(channel)
    rules = [] if ch is None else [[t.filter_name, list(map(_plain, ch.filters.values(t)))] for t in TYPES]
    text = json.dumps([state.lower_case_table_names, state.filter_mode, ch is not None, rules],
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _key_event(key: tuple):
    """The evaluator's event for a recorded decision key."""
    if key[0] == "row":
        return RowEvent(key[1], key[2])
    _, command, default_db, tables = key
    return statement_event(command, default_db, tuple(TableRef(d, n, u) for d, n, u in tables))


class SourceFilter:
    """Decides at ingest which events may be dropped: IGNORE now, and decided by recorded fields alone.

    Row events: by (db, table) -- always, except inside an XA transaction (the applier must raise
    ER_XA_REPLICATION_FILTERS there, so they are kept). Statement events: by (command, default_db, tables)
    -- except transaction control (always applied), XA statements, DROP TRIGGER (decided on the replica's trigger table,
    which the ingest does not know) and statements whose tables `classify` could not read. The key of every
    dropped event is recorded so the applier can re-decide it (`settle_source_filtering`).
    """

    def __init__(self, state: ServerState, channel: str):
        ch = state.channel(channel)
        if ch is None:
            raise IngestError(f"channel {channel!r} does not exist")
        self.filters, self.lctn, self.mode = ch.filters, state.lower_case_table_names, state.filter_mode
        self.fingerprint = filters_fingerprint(state, channel)
        self._cache: dict[tuple, bool] = {}

    def drops(self, key: tuple) -> bool:
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = not decide(self.filters, _key_event(key), self.lctn, self.mode).apply
            except Exception:  # an error verdict is the applier's to raise: keep the event
                hit = False
            self._cache[key] = hit
        return hit

    @staticmethod
    def row_key(db: str, table: str) -> tuple:
        return ("row", db, table)

    @staticmethod
    def statement_key(command: str, default_db: str | None, tables: Iterable[TableRef], method: str) -> tuple | None:
        if command in TRANSACTION_CONTROL or command == "DROP_TRIGGER" or command.startswith("XA_") \
                or method == "incomplete":
            return None
        return ("stmt", command, default_db or "", tuple((t.db, t.name, bool(t.updating)) for t in tables))


def _dropped_json(dropped: Counter) -> str:
    return json.dumps([[list(k[:3]) + ([[list(t) for t in k[3]]] if k[0] == "stmt" else []), n]
                       for k, n in sorted(dropped.items(), key=lambda kv: json.dumps(kv[0], default=str))],
                      separators=(",", ":"), ensure_ascii=False)


def _dropped_from_json(text: str) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for key, n in json.loads(text or "[]"):
        if key[0] == "row":
            out[("row", key[1], key[2])] = int(n)
        else:
            out[("stmt", key[1], key[2], tuple((d, nm, bool(u)) for d, nm, u in key[3]))] = int(n)
    return out


@dataclass(frozen=True)
class SourceFiltered:
    """One ingest commit that dropped events at the source: what the applier must settle for it."""

    version: int
    first_seq: int
    last_seq: int
    fingerprint: str
    state_version: int | None
    dropped: dict = field(default_factory=dict)  # decision key -> number of events dropped


def source_filtered(warehouse: str, channel: str, after_seq: int = 0,
                    through_seq: int | None = None) -> list[SourceFiltered]:
    """The channel's source-filtered commits whose seq range ends in (after_seq, through_seq], oldest first.

    Every such commit landed at least one row (a kept event or a GTID marker), so its `last_seq` is
    greater than the previous commit's: an applier that has applied through seq S owes exactly the
    commits with `last_seq` in its newly applied range.
    """
    dt = _open(events_path(warehouse))
    if dt is None:
        return []
    out: dict[int, SourceFiltered] = {}
    for limit in (64, 1024, None):  # newest first: stop once the window reaches back past after_seq
        hist = dt.history(limit)
        reached = False
        for info in hist:
            meta = _ingest_meta(info)
            if meta.get("channel") != channel or "last_seq" not in meta:
                continue
            last = int(meta["last_seq"])
            if last <= after_seq:
                reached = True
                continue
            if not meta.get("dropped") or meta.get("filter_at_source") != "true" or \
                    (through_seq is not None and last > through_seq):
                continue
            sv = meta.get("state_version")
            out[int(info["version"])] = SourceFiltered(
                int(info["version"]), int(meta["first_seq"]), last, meta.get("filters", ""),
                int(sv) if sv not in (None, "", "None") else None, _dropped_from_json(meta["dropped"]))
        if reached or limit is None or len(hist) < limit:
            break
    out = list(out.values())
    return sorted(out, key=lambda s: s.last_seq)


def settle_source_filtering(state: ServerState, channel: str,
                            batches: Iterable[SourceFiltered]) -> tuple[ServerState, dict[FilterType, int]]:
    """Re-decide what was dropped at the source with the channel's current filters; add the counter hits.

    Pure, for the applier's own `DeltaStore.transact` step: settle the commits of the range it applies in
    the same state commit that records how far it applied, and the hits are counted exactly once.
    Raises SourceFilterConflict when a dropped key would now be applied: those events are not in the
    events table, so the range must be re-ingested without filtering at the source.
    """
    ch = state.channel(channel)
    if ch is None:
        raise IngestError(f"channel {channel!r} does not exist")
    counts: Counter = Counter()
    for b in batches:
        for key, n in b.dropped.items():
            d = decide(ch.filters, _key_event(key), state.lower_case_table_names, state.filter_mode)
            if d.apply:
                raise SourceFilterConflict(
                    f"channel {channel!r}: seqs {b.first_seq}..{b.last_seq} (events version {b.version}) dropped "
                    f"{n} event(s) {key!r} at the source that the current filters apply ({d.decided_by}); "
                    "re-ingest that range without filter_at_source")
            for h in d.hits:
                counts[h] += n
    if not counts:
        return state, {}
    return state.with_channel(replace(ch, filters=ch.filters.add_counts(dict(counts)))), dict(counts)


# ============================================================== reading a binlog

@dataclass
class IngestReport:
    """What one ingest run did."""

    channel: str
    start: tuple[str, int] | None = None
    end: tuple[str, int] | None = None      # the committed resume position after the run
    gtid: str | None = None                 # the last GTID landed
    first_seq: int | None = None            # seqs landed by this run (None: nothing landed)
    last_seq: int | None = None
    events_read: int = 0                    # binlog events handled (Table_map and housekeeping events are
                                            # consumed inside the reader and not counted)
    source_bytes: int = 0                   # binlog bytes read (all events)
    landed: int = 0                         # canonical rows committed
    dropped: int = 0                        # events dropped at the source
    skipped: int = 0                        # records already landed before (Debezium re-delivery)
    transactions: int = 0
    commits: int = 0
    bytes_written: int = 0                  # parquet bytes added to the events table
    seconds: float = 0.0
    filter_at_source: bool = False
    flavor: str | None = None               # 'mariadb' | 'mysql'

    @property
    def rate(self) -> float:
        """Binlog events read per second."""
        return self.events_read / self.seconds if self.seconds else 0.0


class _Txn:
    __slots__ = ("gtid", "open", "xa", "rows", "dropped", "content", "kept", "time_us", "merge")

    def __init__(self, gtid: str | None, open_: bool):
        self.gtid, self.open, self.xa = gtid, open_, False
        self.rows: list[list] = []      # pending canonical rows (images kept as lists until the end)
        self.dropped: Counter = Counter()
        self.content = 0                # non-control events seen
        self.kept = 0                   # non-control events kept
        self.time_us = 0
        self.merge: tuple | None = None  # (table_id, event class, row or None when dropped)


_ROW_TYPES = {"WriteRowsEvent": "write_rows", "UpdateRowsEvent": "update_rows", "DeleteRowsEvent": "delete_rows"}
_STMT_END_F = 0x0001
_FL_STANDALONE = 0x01  # MariaDB GTID event flag: no BEGIN/COMMIT follows
_FL_XA = 0x40 | 0x80   # MariaDB GTID event flags FL_PREPARED_XA, FL_COMPLETED_XA


def _images(ev, etype: str) -> list[dict]:
    if etype == "update_rows":
        return [{"before": r["before_values"], "after": r["after_values"]} for r in ev.rows]
    if etype == "write_rows":
        return [{"before": None, "after": r["values"]} for r in ev.rows]
    return [{"before": r["values"], "after": None} for r in ev.rows]


class _Source:
    """Connection facts of the channel's source, read once on a control connection."""

    def __init__(self, settings: dict):
        import pymysql

        conn = pymysql.connect(**settings, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@version, @@server_id")
                version, self.server_id = cur.fetchone()
                self.flavor = "mariadb" if "mariadb" in str(version).lower() else "mysql"
                cur.execute("SHOW VARIABLES LIKE 'binlog_row_metadata'")
                row = cur.fetchone()
                self.row_metadata = str(row[1]).upper() if row else None
                cur.execute("SHOW BINARY LOGS")
                self.logs = [(r[0], int(r[1])) for r in cur.fetchall()]
        finally:
            conn.close()
        if not self.logs:
            raise IngestError("the source has no binary logs (is log_bin on?)")


class BinlogIngest:
    """One ingest run of one channel: read from the committed position to the end of the binlog."""

    def __init__(self, warehouse: str, channel: str, *, max_events: int | None = None,
                 filter_at_source: bool = False, batch_rows: int = 20_000, batch_seconds: float = 30.0,
                 progress: Callable[[IngestReport], None] | None = None, progress_every: float = 5.0,
                 server_id: int | None = None):
        self.warehouse, self.channel = os.fspath(warehouse), channel
        self.max_events, self.filter_at_source = max_events, filter_at_source
        self.batch_rows, self.batch_seconds = batch_rows, batch_seconds
        self.progress, self.progress_every = progress, progress_every
        self.server_id = server_id or random.randint(0x10000000, 0x7FFFFFFF)
        self.report = IngestReport(channel, filter_at_source=filter_at_source)

    # ---------------------------------------------------------------- setup

    def _channel_settings(self, state: ServerState) -> tuple[dict, dict]:
        ch = state.channel(self.channel)
        if ch is None or not ch.configured:
            raise IngestError(f"channel {self.channel!r} is not configured (CHANGE REPLICATION SOURCE TO "
                              f"SOURCE_HOST=... FOR CHANNEL '{self.channel}')")
        settings = {"host": str(ch.option("SOURCE_HOST")), "port": int(ch.option("SOURCE_PORT") or 3306),
                    "user": str(ch.option("SOURCE_USER") or ""), "password": str(ch.option("SOURCE_PASSWORD") or ""),
                    "connect_timeout": 30}
        if ch.option("SOURCE_BIND"):
            settings["bind_address"] = str(ch.option("SOURCE_BIND"))
        if str(ch.option("SOURCE_SSL") or "0") == "1":  # required TLS; otherwise pymysql's "preferred" mode
            tls = {"ssl_ca": ch.option("SOURCE_SSL_CA"), "ssl_cert": ch.option("SOURCE_SSL_CERT"),
                   "ssl_key": ch.option("SOURCE_SSL_KEY")}
            settings.update({k: str(v) for k, v in tls.items() if v})
            settings["ssl_verify_cert"] = str(ch.option("SOURCE_SSL_VERIFY_SERVER_CERT") or "0") == "1"
            if not any(tls.values()) and not settings["ssl_verify_cert"]:
                import ssl

                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                settings["ssl"] = ctx  # encrypted, unverified: SOURCE_SSL=1 without a CA
        origin = {"source_host": settings["host"], "source_port": str(settings["port"]),
                  "origin_file": str(ch.option("SOURCE_LOG_FILE") or ""),
                  "origin_pos": str(ch.option("SOURCE_LOG_POS") or "")}
        return settings, origin

    def _start_position(self, pos: ChannelPosition | None, origin: dict, source: _Source) -> tuple[str, int]:
        """Resume where the last commit says. A first ingest, or a new explicit SOURCE_LOG_FILE/POS set with
        CHANGE REPLICATION SOURCE since the last commit, starts at the channel's position, else at the first
        binlog (as a MySQL replica does)."""
        requested = (origin["origin_file"], origin["origin_pos"])
        if pos is not None:
            m = pos.metadata
            if m.get("source", "binlog") != "binlog" or pos.binlog is None:
                raise IngestError(f"channel {self.channel!r} was fed by {m.get('source')!r}, not a binlog")
            new_request = bool(requested[0]) and requested != (m.get("origin_file", ""), m.get("origin_pos", ""))
            if not new_request:
                if (m.get("source_host"), m.get("source_port")) not in \
                        ((None, None), (origin["source_host"], origin["source_port"])):
                    raise IngestError(f"channel {self.channel!r}: the source changed from {m.get('source_host')}:"
                                      f"{m.get('source_port')} to {origin['source_host']}:{origin['source_port']};"
                                      " set SOURCE_LOG_FILE/SOURCE_LOG_POS to say where to start")
                return pos.binlog
            log.warning("channel %r: SOURCE_LOG_FILE/POS changed to %s:%s, starting there", self.channel, *requested)
        if requested[0]:
            return requested[0], int(requested[1] or 4)
        return source.logs[0][0], 4

    # ---------------------------------------------------------------- the run

    def run(self) -> IngestReport:
        t0 = time.monotonic()
        store = DeltaStore(self.warehouse)
        snap = store.load()
        settings, origin = self._channel_settings(snap.state)
        self.sfilter = SourceFilter(snap.state, self.channel) if self.filter_at_source else None
        self.meta_static = dict(origin, source="binlog", filter_at_source=str(self.filter_at_source).lower())
        if self.sfilter is not None:
            self.meta_static.update(filters=self.sfilter.fingerprint, state_version=str(snap.version))
        with EventsWriter(self.warehouse, self.channel) as writer:
            self.writer = writer
            source = _Source(settings)
            self.report.flavor = source.flavor
            self.meta_static.update(flavor=source.flavor, source_server_id=str(source.server_id))
            if source.row_metadata not in (None, "FULL"):
                log.warning("channel %r: source binlog_row_metadata=%s: row images get UNKNOWN_COL<n> names "
                            "(set binlog_row_metadata=FULL)", self.channel, source.row_metadata)
            start = self._start_position(writer.position, origin, source)
            self.report.start = self.report.end = start
            self.report.gtid = (writer.position.metadata.get("gtid") or None) if writer.position else None
            self._read(settings, start, t0)
        self.report.seconds = time.monotonic() - t0
        self.report.bytes_written = writer.bytes_written
        self.report.commits = writer.commits
        return self.report

    def _read(self, settings: dict, start: tuple[str, int], t0: float) -> None:
        from pymysqlreplication import BinLogStreamReader

        self.batch = Batch(self.channel, "binlog")
        self.file, self.pos = start
        self.boundary = start            # position after the last complete transaction read
        self.last_gtid = self.report.gtid
        self.txn: _Txn | None = None
        self.last_flush = self.last_progress = time.monotonic()
        self.t0 = t0
        self.landed_run = 0
        self.done = False
        from pymysqlreplication import event as ev_mod, row_event as row_mod

        wanted = [ev_mod.QueryEvent, ev_mod.RotateEvent, ev_mod.FormatDescriptionEvent, ev_mod.XidEvent,
                  ev_mod.GtidEvent, ev_mod.MariadbGtidEvent, ev_mod.XAPrepareEvent, row_mod.WriteRowsEvent,
                  row_mod.UpdateRowsEvent, row_mod.DeleteRowsEvent]
        # is_mariadb=True would make pymysqlreplication ignore log_file/log_pos (it dumps from the first
        # binlog); the plain COM_BINLOG_DUMP by file and position works on MariaDB and MySQL alike.
        # freeze_schema=True parses a table_id's Table_map once (half the CPU of a row workload): a table_id
        # names one table definition while the server runs (ALTER/TRUNCATE get a new id); the map is cleared
        # at every binlog file start (`_event`), since a restarted source starts a new file and reuses ids.
        self.stream = stream = BinLogStreamReader(connection_settings=dict(settings), server_id=self.server_id,
                                    blocking=False, resume_stream=True, log_file=start[0], log_pos=start[1],
                                    is_mariadb=False, freeze_schema=True, only_events=wanted)
        try:
            for ev in stream:
                self._event(ev)
                if self.done:
                    break
        finally:
            stream.close()
        self._flush()
        self._tick(force=True)

    def _event(self, ev) -> None:
        r = self.report
        r.events_read += 1
        pkt = ev.packet
        name = type(ev).__name__
        if name == "RotateEvent" or name == "FormatDescriptionEvent":
            # A new binlog file (e.g. after a source restart, which reuses table ids): forget the Table_maps
            # that freeze_schema keeps; every statement logs its Table_maps again anyway.
            self.stream.table_map.clear()
        if name == "RotateEvent":
            self.file, self.pos = ev.next_binlog, ev.position
            if self.txn is None:
                self.boundary = (self.file, self.pos)
            return
        if pkt.log_pos:
            if pkt.log_pos > self.pos:  # binlog bytes consumed, including events the reader skipped
                r.source_bytes += pkt.log_pos - self.pos
            self.pos = pkt.log_pos
        if name in ("GtidEvent", "MariadbGtidEvent"):
            if self.txn is not None and (self.txn.rows or self.txn.content):
                log.warning("channel %r: transaction before %s:%d has no end; discarded", self.channel,
                            self.file, self.pos)
            standalone = name == "GtidEvent" or bool(ev.flags & _FL_STANDALONE)
            self.txn = _Txn(ev.gtid, open_=not standalone)
            # MariaDB logs no XA START: the GTID event's flags mark an XA transaction
            self.txn.xa = name == "MariadbGtidEvent" and bool(ev.flags & _FL_XA)
        elif name == "QueryEvent":
            self._query(ev)
        elif name in _ROW_TYPES:
            self._rows(ev, _ROW_TYPES[name])
        elif name == "XidEvent":
            txn = self._txn(ev)
            self._add_query(txn, ev, f"COMMIT /* xid={ev.xid} */", "COMMIT", "TRANSACTION", None, (), control=True)
            self._end()
        elif name == "XAPrepareEvent":
            txn = self._txn(ev)
            xid = "X'" + bytes(ev.xid_gtrid).hex() + "',X'" + bytes(ev.xid_bqual).hex() + f"',{ev.xid_format_id}"
            self._add_query(txn, ev, f"XA PREPARE {xid}", "XA_PREPARE", "TRANSACTION", None, (), control=True)
            self._end()
        elif self.txn is None:  # housekeeping between transactions: the resume position moves past it
            self.boundary = (self.file, self.pos)
        self._tick()

    def _txn(self, ev, open_: bool = True) -> _Txn:
        """The current transaction; without a GTID event a statement outside BEGIN stands alone."""
        if self.txn is None:
            self.txn = _Txn(None, open_=open_)
        self.txn.time_us = ev.timestamp * 1_000_000
        return self.txn

    def _query(self, ev) -> None:
        from .classify import classify

        sql = ev.query
        info = classify(sql, table_map_for_update=getattr(ev, "table_map_for_update", None))
        cmd = info.command
        txn = self._txn(ev, open_=False)
        us = getattr(ev, "microseconds", None) or getattr(ev, "hrnow", None)
        if isinstance(us, int) and 0 <= us < 1_000_000:
            txn.time_us += us
        schema = ev.schema.decode("utf-8", "replace") if isinstance(ev.schema, (bytes, bytearray)) else ev.schema
        default_db = info.database if info.kind == "DATABASE_DDL" and info.database is not None else schema
        if cmd == "BEGIN" or cmd == "XA_START":
            txn.open = True
            txn.xa = txn.xa or cmd == "XA_START"
            self._add_query(txn, ev, sql, cmd, info.kind, default_db, info.tables, control=True)
            return
        if cmd in ("COMMIT", "ROLLBACK", "XA_COMMIT", "XA_ROLLBACK") and txn.open:
            self._add_query(txn, ev, sql, cmd, info.kind, default_db, info.tables, control=True)
            self._end()
            return
        control = cmd in TRANSACTION_CONTROL or cmd == "XA_END"
        key = None
        if self.sfilter is not None and not control and not txn.xa:
            key = SourceFilter.statement_key(cmd, default_db, info.tables, info.method)
        if key is not None and self.sfilter.drops(key):
            txn.content += 1
            txn.dropped[key] += 1
            txn.merge = None
        else:
            self._add_query(txn, ev, sql, cmd, info.kind, default_db, info.tables, control=control)
        if not txn.open:
            self._end()

    def _add_query(self, txn: _Txn, ev, sql, cmd, kind, default_db, tables, control: bool) -> None:
        if not control:
            txn.content += 1
            txn.kept += 1
        txn.merge = None
        txn.rows.append([txn.gtid, self.file, self.pos, "query", cmd, kind, default_db, None, None,
                         tables_value(tables), sql, None, txn.time_us or ev.timestamp * 1_000_000])

    def _rows(self, ev, etype: str) -> None:
        txn = self._txn(ev)
        cls = type(ev)
        ends = bool(getattr(ev, "flags", 0) & _STMT_END_F)
        m = txn.merge
        if m is not None and m[0] == ev.table_id and m[1] is cls:
            row = m[2]
            if row is None:  # continues a dropped statement's rows: already counted
                pass
            elif len(row[11]) < MAX_MERGED_IMAGES:
                row[11].extend(_images(ev, etype))
                row[1], row[2] = self.file, self.pos
            else:
                row = self._new_rows_row(txn, ev, etype)
            txn.merge = None if ends else (ev.table_id, cls, row)
            return
        txn.content += 1
        if self.sfilter is not None and not txn.xa:
            key = SourceFilter.row_key(ev.schema, ev.table)
            if self.sfilter.drops(key):
                txn.dropped[key] += 1
                txn.merge = None if ends else (ev.table_id, cls, None)
                return
        txn.kept += 1
        row = self._new_rows_row(txn, ev, etype)
        txn.merge = None if ends else (ev.table_id, cls, row)

    def _new_rows_row(self, txn: _Txn, ev, etype: str) -> list:
        row = [txn.gtid, self.file, self.pos, etype, None, None, None, ev.schema, ev.table, None, None,
               _images(ev, etype), ev.timestamp * 1_000_000]
        txn.rows.append(row)
        return row

    def _end(self) -> None:
        """A transaction is complete: move it to the batch (or its GTID marker when all of it was dropped)."""
        txn, self.txn = self.txn, None
        b = self.batch
        self.boundary = (self.file, self.pos)
        self.report.transactions += 1
        if txn.gtid:
            self.last_gtid = txn.gtid
        if txn.dropped:
            n = sum(txn.dropped.values())
            self.report.dropped += n
            b.dropped.update(txn.dropped)
        if txn.dropped and txn.kept == 0:
            b.add(txn.gtid, self.file, self.pos, "gtid", time_us=txn.time_us)
        else:
            for g, f, p, et, cmd, kind, ddb, db, tab, tables, sql, images, us in txn.rows:
                b.add(g, f, p, et, cmd, kind, ddb, db, tab, tables, sql,
                      rows_json(images) if images is not None else None, us)
        pending = len(b)
        if self.max_events is not None and self.landed_run + pending >= self.max_events:
            self.done = True
        if pending >= self.batch_rows or len(b.dropped) >= MAX_DROPPED_KEYS or \
                (pending and time.monotonic() - self.last_flush >= self.batch_seconds):
            self._flush()

    def _flush(self) -> None:
        b = self.batch
        self.last_flush = time.monotonic()
        if not len(b):
            return
        w = self.writer
        first = w.last_seq + 1
        meta = dict(self.meta_static, binlog_file=self.boundary[0], binlog_pos=str(self.boundary[1]),
                    gtid=self.last_gtid or "", dropped=_dropped_json(b.dropped) if b.dropped else "")
        n = len(b)
        w.commit(b.to_table(first), meta)
        r = self.report
        r.first_seq = r.first_seq or first
        r.last_seq = w.last_seq
        r.landed += n
        r.end, r.gtid = self.boundary, self.last_gtid
        self.landed_run += n
        b.clear()

    def _tick(self, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if force or now - self.last_progress >= self.progress_every:
            self.last_progress = now
            self.report.seconds = now - self.t0
            self.report.commits = self.writer.commits
            self.report.bytes_written = self.writer.bytes_written
            self.progress(self.report)


def ingest_channel(warehouse: str | os.PathLike, channel: str, *, max_events: int | None = None,
                   filter_at_source: bool = False, batch_rows: int = 20_000, batch_seconds: float = 30.0,
                   progress: Callable[[IngestReport], None] | None = None, server_id: int | None = None
                   ) -> IngestReport:
    """Land the channel's source binlog from its committed position up to the current end.

    Non-blocking: reads what the source has now and returns. Commits every `batch_rows` canonical rows (or
    `batch_seconds`) at a transaction boundary; `max_events` stops at the first boundary once that many rows
    were landed by this run. `progress(report)` is called every few seconds. Raises ConcurrentIngest if the
    channel is being ingested elsewhere, IngestError if the channel has no source.
    """
    return BinlogIngest(os.fspath(warehouse), channel, max_events=max_events, filter_at_source=filter_at_source,
                        batch_rows=batch_rows, batch_seconds=batch_seconds, progress=progress,
                        server_id=server_id).run()


def ingest_all(warehouse: str | os.PathLike, **kwargs: Any) -> list[IngestReport]:
    """`ingest_channel` for every configured channel, one after the other (channel-map order)."""
    state = DeltaStore(os.fspath(warehouse)).load().state
    return [ingest_channel(warehouse, ch.name, **kwargs) for ch in state.configured_channels()]


# ============================================================== CLI

def _print_progress(r: IngestReport, display=None) -> None:
    """A binlog has no known end: on a terminal one redrawn line with counts and rate, else a line each."""
    from .progress import Progress

    (display or Progress()).show(f"[ingest {r.channel!r}]", f"{r.events_read} events read, {r.landed} landed, "
                                 f"{r.dropped} dropped, {r.commits} commits, {r.rate:,.0f} events/s, at "
                                 f"{r.end[0] if r.end else '?'}:{r.end[1] if r.end else '?'}")


def main(argv: list[str] | None = None) -> int:
    """`rpl-sql ingest [--channel NAME] [--warehouse DIR] [--max-events N] [--filter-at-source] [-q]`."""
    from .session import resolve_warehouse

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ingest"]:
        argv = argv[1:]
    p = argparse.ArgumentParser(prog="rpl-sql ingest", description="Land channel binlogs in the events table.")
    p.add_argument("--channel", help="one channel (default: every configured channel)")
    p.add_argument("--warehouse", help="warehouse directory (default: $RPL_SQL_WAREHOUSE or ./rpl_warehouse)")
    p.add_argument("--max-events", type=int, help="stop at the first transaction boundary after N events")
    p.add_argument("--filter-at-source", action="store_true", help="drop events the channel's filters ignore")
    p.add_argument("--batch-rows", type=int, default=20_000, help="rows per Delta commit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    args = p.parse_args(argv)
    warehouse = resolve_warehouse(args.warehouse)
    from .progress import Progress

    display = Progress()
    kw = dict(max_events=args.max_events, filter_at_source=args.filter_at_source, batch_rows=args.batch_rows,
              progress=None if args.quiet else (lambda r: _print_progress(r, display)))
    if args.channel is not None:
        channels = [args.channel]
    else:
        channels = [ch.name for ch in DeltaStore(warehouse).load().state.configured_channels()]
        if not channels:
            sys.stderr.write("rpl-sql ingest: no configured channel (CHANGE REPLICATION SOURCE TO ...)\n")
            return 1
    failed = False
    for name in channels:  # one failing channel does not stop the others
        try:
            try:
                r = ingest_channel(warehouse, name, **kw)
            finally:
                display.close()
        except Exception as e:  # ours, the source's (pymysql), Delta's: reported; committed batches stay
            why = str(e) if isinstance(e, IngestError) else f"{type(e).__name__}: {e}"
            sys.stderr.write(f"rpl-sql ingest: channel {name!r}: {why}\n")
            failed = True
            continue
        at = f"position {r.end[0]}:{r.end[1]}"
        if r.landed:
            sys.stdout.write(f"channel {r.channel!r}: {r.landed} events landed (seq {r.first_seq}..{r.last_seq}), "
                             f"{r.dropped} dropped at source, {r.events_read} read in {r.seconds:.1f}s "
                             f"({r.rate:,.0f} events/s), {at}\n")
        else:
            sys.stdout.write(f"channel {r.channel!r}: up to date, {at}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
