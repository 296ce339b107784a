"""The events table's one writer per channel: positions, the channel lock, canonical rows, atomic commits.

A batch of whole transactions and the channel's resume position land in one Delta commit (app transaction
`rpl_sql.ingest.<channel>` = last seq), so a crash leaves either both or neither. Every event source
(binlog, Debezium) writes through `EventsWriter`. Design: docs/design/README.md#rpl_sqlpipelinewriter.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import hashlib
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from rpl_sql.language.quoting import channel_predicate
from rpl_sql.errors import RplSqlError
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta.log import check
from rpl_sql.storage.upkeep import compact_growing_table
from rpl_sql.filters.evaluate import TableRef
from rpl_sql.language.lexer import redact
from rpl_sql.pipeline.events import EVENTS_SCHEMA, PARTITION_BY, events_path
from rpl_sql.pipeline.replica.columns import time_text
from rpl_sql.pipeline.summary import summarize
from rpl_sql.filters.state import channel_key

log = logging.getLogger(__name__)

META = "rpl_sql.ingest."                # commit metadata key prefix
MAX_DROPPED_KEYS = 2000                 # distinct dropped decision keys per commit (bounds commitInfo size)
MAX_MERGED_IMAGES = 50_000              # row images merged into one landed row at most
APPEND_ATTEMPTS = 20  # appends turned away by other channels' compactions before an ingest gives up
COMPACT_EVERY = 40                      # a writer's commits merged into one file per partition (0: never)


class IngestError(RplSqlError):
    """The ingest cannot proceed; nothing was committed by the failing step."""


class ConcurrentIngestError(IngestError):
    """Another process is ingesting the same channel (or committed for it since this one started)."""


class SourceFilterConflictError(IngestError):
    """Events dropped at the source would be applied by the channel's current filters."""


def app_id(channel: str) -> str:
    """The channel's app transaction in the events table: its version is the last landed seq."""
    return delta_commit.app_id("ingest", channel)


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


def ingest_meta(info: dict[str, Any]) -> dict[str, str]:
    return {k[len(META):]: str(v) for k, v in info.items() if k.startswith(META)}


def channel_commits(dt: DeltaTable, channel: str, after_seq: int = 0,
                    history: Callable[[int | None], list[dict]] | None = None) -> list[tuple[int, dict[str, str]]]:
    """(version, ingest metadata) of the channel's commits whose last seq is past `after_seq`, oldest first.

    Read newest first in growing windows of the log, until one reaches back to a commit at or before
    `after_seq` (or the log's start, the archived commits included): usually only the last few are read.
    `history`: how a caller reading several channels' windows of one version shares them (archive.history).
    """
    out: dict[int, dict[str, str]] = {}
    for limit in (16, 256, 4096, None):  # each commit's entry holds its summary: read few
        hist = history(limit) if history is not None else archive.history(dt, limit)
        reached = False
        for info in hist:
            meta = ingest_meta(info)
            if meta.get("channel") != channel or "last_seq" not in meta:
                continue
            if int(meta["last_seq"]) <= after_seq:
                reached = True
            else:
                out[int(info["version"])] = meta
        if reached or limit is None or len(hist) < limit:
            break
    return sorted(out.items(), key=lambda vm: int(vm[1]["last_seq"]))


def open_table(path: str) -> DeltaTable | None:
    """The events table, its log checked first (a damaged log stops ingest with `rpl-sql repair`'s advice)."""
    check(path)
    return archive.open_existing(path)


def committed_position(warehouse: str, channel: str, dt: DeltaTable | None = None) -> ChannelPosition | None:
    """The channel's committed position, or None before its first ingest.

    The app transaction version is the truth for the last seq; the commit carrying that seq is looked up
    newest-first (channel_commits: usually among the last few commits). Should the log have been cleaned,
    the row with that seq gives the binlog position (every batch ends with a transaction's last event).
    """
    dt = dt if dt is not None else open_table(events_path(warehouse))
    if dt is None:
        return None
    last = dt.transaction_version(app_id(channel))
    if last is None:
        return None
    for version, meta in channel_commits(dt, channel, after_seq=last - 1):
        if meta["last_seq"] == str(last):
            return ChannelPosition(last, version, meta)
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
    t = dt.to_pyarrow_dataset().to_table(filter=chan & (ds.field("seq") == seq), use_threads=False,  # store._read
                                         columns=["binlog_file", "binlog_pos", "gtid", "source"])
    rows = t.to_pylist()
    return rows[0] if rows else None


# ============================================================== the writer: lock, snapshot, atomic commits

class ChannelLock:
    """An advisory flock per (warehouse, channel, role): dies with its process, so a SIGKILL leaves no stale
    lock. Role 'ingest' guards the events writer, 'service' the replica service."""

    def __init__(self, warehouse: str, channel: str, role: str = "ingest", busy: type[Exception] | None = None):
        self.path = None
        self.role, self.busy = role, busy
        if "://" not in warehouse or warehouse.startswith("file://"):
            root = warehouse[7:] if warehouse.startswith("file://") else warehouse
            digest = hashlib.sha1(channel.encode("utf-8")).hexdigest()[:16]
            self.path = os.path.join(root, ".locks", f"{role}-{digest}.lock")
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
            if self.busy is not None:
                raise self.busy(f"channel {channel!r} is already run by another {self.role} process") from None
            raise ConcurrentIngestError(f"channel {channel!r} is being ingested by another process") from None
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
        self.channel = channel_key(channel)
        self.path = events_path(self.warehouse)
        self._lock = ChannelLock(self.warehouse, channel) if lock else None
        self.dt: DeltaTable | None = None
        self.position: ChannelPosition | None = None
        self.last_seq = 0
        self.commits = 0
        self.bytes_written = 0
        self._loose: list[pa.Table] = []  # this writer's commits since its last compaction, as it wrote them

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
        dt = open_table(self.path)
        if dt is not None:
            if delta_commit.add_missing_columns(dt, EVENTS_SCHEMA):
                dt = archive.open_table(self.path)
            return dt
        try:
            return DeltaTable.create(self.path, EVENTS_SCHEMA, partition_by=PARTITION_BY, mode="ignore",
                                     name="events", configuration=delta_commit.TABLE_CONFIG)
        except DeltaError:  # created concurrently by another channel's ingest
            dt = open_table(self.path)
            if dt is None:
                raise
            return dt

    def commit(self, table: pa.Table, metadata: dict[str, str]) -> int:
        """Append `table` (rows numbered last_seq+1..) with `metadata`; returns the new table version.

        Raises ConcurrentIngestError when another writer advanced this channel: nothing of ours was committed.
        """
        n = table.num_rows
        first, last = self.last_seq + 1, self.last_seq + n
        meta = {META + k: v for k, v in {**summarize(table), **metadata}.items()}
        meta.update({META + "channel": self.channel, META + "first_seq": str(first), META + "last_seq": str(last),
                     META + "rows": str(n)})
        for attempt in range(APPEND_ATTEMPTS):
            try:
                delta_commit.write(self.dt, table, mode="append", partition_by=PARTITION_BY, metadata=meta,
                                   app=(app_id(self.channel), last), checkpoint=True)
                break
            except CommitFailedError as e:
                # delta-rs turns an append away when a commit since its snapshot removed files (another
                # channel's compaction): still this channel's writer, it appends again on the new version
                self._check_owner(e)
                if attempt + 1 == APPEND_ATTEMPTS:
                    raise
        version = self.dt.version()
        self.last_seq = last
        self.commits += 1
        self.bytes_written += _added_bytes(self.path, version)
        self._check_owner(None)
        if COMPACT_EVERY:
            self._loose.append(table)
            if len(self._loose) >= COMPACT_EVERY:
                self.compact()
        return version

    def compact(self) -> None:
        """Rewrite this writer's commits since its last compaction into one file per partition, in one commit.

        A commit writes a file per database it touched, and every later append costs more with the table's file
        count (delta-rs keeps each file's action in memory); merging them bounds both. The rows are the batches as
        committed (kept in memory until then). Rows, seqs, positions and the commit history stay; a reader on an
        older version still reads the old files (until upkeep's vacuum). Best effort: on a conflict or an error
        the files stay as they are and a later compaction takes them.
        """
        if not self._loose:
            return
        rows = pa.concat_tables(self._loose)  # what those commits wrote: no need to read their files back
        self._loose = []
        lo, hi = self.last_seq - rows.num_rows + 1, self.last_seq
        try:
            # the default channel's partition value '' reads back NULL: the predicate must match both
            where = channel_predicate(self.channel)
            delta_commit.write(self.dt, rows.sort_by("seq"), mode="overwrite", partition_by=PARTITION_BY,
                               predicate=f"{where} AND seq >= {lo} AND seq <= {hi}",
                               metadata={META + "compacted": f"{self.channel}:{lo}-{hi}"})
        except (DeltaError, OSError) as e:
            log.warning("events of channel %r, seqs %d..%d: compaction skipped (%s)", self.channel, lo, hi, e)
        # the merged files pile up in turn (7 a minute at 5,000 rows/s), and every read and open of the table
        # costs more with its file count: merge those by tiers, as a replica table's
        try:
            compact_growing_table(self.dt, channel=self.channel or None)
        except (DeltaError, OSError) as e:
            log.warning("events of channel %r: compaction by tiers skipped (%s)", self.channel, e)
        self.dt.update_incremental()

    def _check_owner(self, cause: Exception | None) -> None:
        """After a commit (or a failed one): the channel's app transaction must still be ours (the table is
        brought up to date with the log entries after the one it holds)."""
        self.dt.update_incremental()
        now = self.dt.transaction_version(app_id(self.channel)) or 0
        if now != self.last_seq:
            raise ConcurrentIngestError(f"channel {self.channel!r}: another writer moved it to seq {now} "
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
    from arro3.core import Array as _A3Array
    from arro3.core import DataType as _A3Type
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
              "db_name", "table_name", "statement", "rows", "event_time", "filter_db", "columns")

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
            table_name=None, tables=None, statement=None, rows=None, time_us=0, columns=None) -> None:
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
        c["statement"].append(redact(statement) if statement else statement)  # the source's passwords too
        c["rows"].append(rows)
        c["event_time"].append(time_us)
        c["columns"].append(columns)
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
        return time_text(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$binary": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, (set, frozenset)):
        return sorted(v, key=str)
    raise TypeError(f"cannot land a {type(v).__name__} value")


# one encoder for every call: json.dumps with options builds a new JSONEncoder each time (a third of its cost)
_ENCODER = json.JSONEncoder(default=_json_default, ensure_ascii=False, separators=(",", ":"))


def rows_json(images: list[dict]) -> str:
    """Row images as the canonical JSON text."""
    return _ENCODER.encode(images)


def tables_value(tables: Iterable[TableRef]) -> list[dict]:
    return [{"db": t.db, "name": t.name, "updating": bool(t.updating)} for t in tables]


# ============================================================== reading a binlog

@dataclass
class IngestReport:
    """What one ingest run did."""

    channel: str
    start: tuple[str, int] | None = None
    end: tuple[str, int] | None = None      # the committed resume position after the run
    gtid: str | None = None                 # the last GTID landed
    gtid_set: str = ""                      # every GTID landed on the channel (Retrieved_Gtid_Set)
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
    source_server_id: int = 0               # the source's @@server_id and (MySQL) @@server_uuid, read at connect
    source_uuid: str = ""

    @property
    def rate(self) -> float:
        """Binlog events read per second."""
        return self.events_read / self.seconds if self.seconds else 0.0


