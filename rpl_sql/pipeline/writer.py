"""The events table's one writer per channel: the channel lock, the snapshot it writes from, atomic commits.

Positions are read by `ingest_position`; the rows come from `canonical_rows.Batch`.

A batch of whole transactions and the channel's resume position land in one Delta commit (app transaction
`rpl_sql.ingest.<channel>` = last seq), so a crash leaves either both or neither. Every event source
(binlog, Debezium) writes through `EventsWriter`. Design: docs/design/README.md#rpl_sqlpipelinewriter.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from rpl_sql.language.quoting import channel_predicate
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.upkeep import compact_growing_table
from rpl_sql.pipeline.ingest_position import (META, ChannelPosition, ConcurrentIngestError, app_id,
                                              committed_position, open_table)
from rpl_sql.pipeline.events import DELTA_ENCODED, EVENTS_SCHEMA, PARTITION_BY, SHAPE_ID, events_path
from rpl_sql.pipeline.shape_index import ShapeIndex
from rpl_sql.pipeline import summary as summaries_
from rpl_sql.filters.state import channel_key

log = logging.getLogger(__name__)

MAX_DROPPED_KEYS = 2000                 # distinct dropped decision keys per commit (bounds commitInfo size)
MAX_MERGED_IMAGES = 50_000              # row images merged into one landed row at most
APPEND_ATTEMPTS = 20  # appends turned away by other channels' compactions before an ingest gives up
COMPACT_EVERY = 40                      # a writer's commits merged into one file per partition (0: never)


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
        self._summaries: list = []  # their summaries (None: a commit without one)

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
        if SHAPE_ID not in table.column_names:  # set by the compaction, NULL until then
            table = table.append_column(EVENTS_SCHEMA.field(SHAPE_ID), pa.nulls(n, pa.int32()))
        first, last = self.last_seq + 1, self.last_seq + n
        summary = summaries_.summary_of(table, (first, last))
        meta = {META + k: v for k, v in {**(summaries_.metadata(summary) if summary else {}), **metadata}.items()}
        meta.update({META + "channel": self.channel, META + "first_seq": str(first), META + "last_seq": str(last),
                     META + "rows": str(n)})
        for attempt in range(APPEND_ATTEMPTS):
            try:
                delta_commit.write(self.dt, table, mode="append", partition_by=PARTITION_BY, metadata=meta,
                                   app=(app_id(self.channel), last), checkpoint=True, delta_encoded=DELTA_ENCODED)
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
            self._summaries.append(summary)
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
        done, self._loose, self._summaries = self._summaries, [], []
        lo, hi = self.last_seq - rows.num_rows + 1, self.last_seq
        meta = {META + "compacted": f"{self.channel}:{lo}-{hi}"}
        rolled = summaries_.rollup(done) if None not in done else None
        if rolled is not None:  # the applier decides these commits from one summary instead of each one's
            key = META + summaries_.ROLLUP
            meta.update({key + "channel": self.channel, key + "first_seq": str(rolled.first_seq),
                         key + "last_seq": str(rolled.last_seq)})
            meta.update({key + k: v for k, v in summaries_.metadata(rolled).items()})
            rows = _with_shape_ids(rows, rolled)
        try:
            # the default channel's partition value '' reads back NULL: the predicate must match both
            where = channel_predicate(self.channel)
            delta_commit.write(self.dt, rows.sort_by("seq"), mode="overwrite", partition_by=PARTITION_BY,
                               predicate=f"{where} AND seq >= {lo} AND seq <= {hi}", metadata=meta,
                               delta_encoded=DELTA_ENCODED)
        except (DeltaError, OSError) as e:
            log.warning("events of channel %r, seqs %d..%d: compaction skipped (%s)", self.channel, lo, hi, e)
        # the merged files pile up in turn (7 a minute at 5,000 rows/s), and every read and open of the table
        # costs more with its file count: merge those by tiers, as a replica table's
        try:
            compact_growing_table(self.dt, channel=self.channel or None, delta_encoded=DELTA_ENCODED)
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


def _with_shape_ids(rows: pa.Table, rolled: summaries_.Summary) -> pa.Table:
    """`rows` with each one's row among `rolled`'s shapes (events.SHAPE_ID), which the applier's write takes its
    verdict by; as they were (NULL ids: the applier finds their shapes by their columns) if some row has no
    shape there, which a rollup of their own summaries cannot miss."""
    try:
        ids = ShapeIndex(rolled.shapes).rows(rows)
    except ValueError as e:  # shapes that are not distinct: not a rollup this writer made
        log.warning("events seqs %d..%d: no shape ids (%s)", rolled.first_seq, rolled.last_seq, e)
        return rows
    if ids.null_count:
        log.warning("events seqs %d..%d: a row has no shape in its rollup; their shape ids stay NULL",
                    rolled.first_seq, rolled.last_seq)
        return rows
    i = rows.schema.get_field_index(SHAPE_ID)
    return rows.set_column(i, EVENTS_SCHEMA.field(SHAPE_ID), ids.cast(pa.int32()))


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


