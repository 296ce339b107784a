"""The binlog event source: a MySQL/MariaDB binlog, read in whole transactions, into the events table.

    >>> report = ingest_channel("/tmp/wh", "a")          # doctest: +SKIP
    >>> report.landed, report.end                        # doctest: +SKIP
    (1234, ('binlog.000002', 8821))

Reads by file and position from the channel's committed position to the current end of the binlog; see
docs/pipeline.md for the mapping of binlog events to rows and docs/design for why it is exact.
"""
from __future__ import annotations

import functools
import logging
import os
import random
import time
from typing import Any, Callable


from rpl_sql.source_server.connection import (NET_TIMEOUT, connect, connection_settings, forwarded_filters,
                                              forwarding_command)
from rpl_sql.server.gtid_set import GtidSet
from rpl_sql.filters.evaluate import TRANSACTION_CONTROL
from rpl_sql.pipeline.binlog_stream import BinlogStream, FramedRows
from rpl_sql.pipeline.binlog_txn import (ROW_TYPES, STMT_END_F, OpenTransaction, PendingEvent, TableMapColumns,
                                         library_images, xa_xid)
from rpl_sql.pipeline.row_images import ImageDecoder
from rpl_sql.pipeline.source_filter import SourceFilter, dropped_json, source_side_filter
from rpl_sql.pipeline.writer import EventsWriter, IngestReport, MAX_DROPPED_KEYS, MAX_MERGED_IMAGES
from rpl_sql.pipeline.canonical_rows import Batch, rows_json, tables_value
from rpl_sql.pipeline.ingest_position import ChannelPosition, IngestError, SourceChangedError
from rpl_sql.filters.state import ServerState, channel_key
from rpl_sql.storage.store import DeltaStore

log = logging.getLogger(__name__)

# While reading what the source had already written when the run connected (a backlog), commit at most this
# often: a commit costs ~40 ms, which at 0.2 s intervals was a fifth of a catch-up's time. Afterwards,
# `batch_seconds` (the service's 0.2 s keeps the lag low).
BACKLOG_COMMIT_SECONDS = 2.0

def _log_key(file: str, pos: int) -> tuple:
    """Binlog coordinates in order (the file's number compared as a number, so .999999 < .1000000)."""
    stem, _, num = (file or "").rpartition(".")
    return (stem, int(num), pos) if num.isdigit() else (file or "", -1, pos)


def source_settings(warehouse: str, state: ServerState, channel: str) -> tuple[dict, dict]:
    """pymysql connection settings of the channel's source and the origin facts recorded with every commit."""
    ch = state.channel(channel)
    if ch is None or not ch.configured:
        raise IngestError(f"channel {channel!r} is not configured (CHANGE REPLICATION SOURCE TO "
                          f"SOURCE_HOST=... FOR CHANNEL '{channel}')")
    return connection_settings(warehouse, ch)


class _Source:
    """Connection facts of the channel's source, read once on a control connection."""

    def __init__(self, settings: dict):
        conn = connect(settings, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@version, @@server_id")
                version, self.server_id = cur.fetchone()
                self.flavor = "mariadb" if "mariadb" in str(version).lower() else "mysql"
                self.uuid = ""
                if self.flavor == "mysql":  # MariaDB has no server_uuid
                    cur.execute("SELECT @@server_uuid")
                    self.uuid = str(cur.fetchone()[0])
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
    """One ingest run of one channel: read from the committed position to the end of the binlog.

    About 380 lines: one binlog event stream assembled into whole transactions (the open transaction, the
    grouping of rows events, the resume position) is one state machine; its steps are its methods."""

    def __init__(self, warehouse: str, channel: str, *, max_events: int | None = None,
                 filter_at_source: bool = False, batch_rows: int = 20_000, batch_seconds: float = 30.0,
                 progress: Callable[[IngestReport], None] | None = None, progress_every: float = 5.0,
                 server_id: int | None = None, follow: Callable[[], bool] | None = None,
                 net_timeout: float = NET_TIMEOUT):
        self.warehouse, self.channel = os.fspath(warehouse), channel_key(channel)
        self.max_events, self.filter_at_source = max_events, filter_at_source
        self.batch_rows, self.batch_seconds = batch_rows, batch_seconds
        self.progress, self.progress_every = progress, progress_every
        self.server_id = server_id or random.randint(0x10000000, 0x7FFFFFFF)
        # follow: keep reading as the source writes (heartbeats every second when it is idle) while `follow()`
        # says so; it is asked at every event and heartbeat, and the run ends at the next transaction boundary.
        # A read that hears nothing for `net_timeout` seconds fails (2013), following or not (a batch ingest's
        # source streams until the binlog's end without a pause).
        self.follow, self.net_timeout = follow, net_timeout
        self.report = IngestReport(channel, filter_at_source=filter_at_source)

    # ---------------------------------------------------------------- setup

    def _start_position(self, pos: ChannelPosition | None, origin: dict, source: _Source) -> tuple[str, int]:
        """Resume where the last commit says. A first ingest, or a new explicit SOURCE_LOG_FILE/POS set with
        CHANGE REPLICATION SOURCE since the last commit, starts at the channel's position, else at the first
        binlog (as a MySQL replica does). With SOURCE_AUTO_POSITION = 1 and GTIDs landed, the source is asked
        for the transactions missing from that set instead (`self.gtid_start`), so a new source host (a
        failover) continues where the old one left off."""
        requested = (origin["origin_file"], origin["origin_pos"])
        self.gtid_start = None
        self.discard_through = None
        if pos is not None and pos.metadata.get("reset_at", "") != origin.get("reset_at", ""):
            # RESET REPLICA since the last landing: the position is forgotten, and what was received before it
            # is the relay log MySQL deletes (the applier discards it: `relay_discard_through`)
            self.discard_through = pos.last_seq
            if origin["auto_position"] == "1" and self.executed:  # gtid_executed survives a RESET
                self.gtid_start = self.executed
                return "", 4
            pos = None
        elif pos is not None:
            self.discard_through = pos.metadata.get("relay_discard_through")
        if pos is not None:
            m = pos.metadata
            if m.get("source", "binlog") != "binlog" or pos.binlog is None:
                raise IngestError(f"channel {self.channel!r} was fed by {m.get('source')!r}, not a binlog")
            new_request = bool(requested[0]) and requested != (m.get("origin_file", ""), m.get("origin_pos", ""))
            landed = m.get("gtid_set") or m.get("gtid") or ""
            if origin["auto_position"] == "1" and landed:
                self.gtid_start = str(GtidSet.parse(landed))
                return "", 4  # the source names the file in the first event it sends
            if not new_request:
                if (m.get("source_host"), m.get("source_port")) not in \
                        ((None, None), (origin["source_host"], origin["source_port"])):
                    raise IngestError(f"channel {self.channel!r}: the source changed from {m.get('source_host')}:"
                                      f"{m.get('source_port')} to {origin['source_host']}:{origin['source_port']};"
                                      " set SOURCE_LOG_FILE/SOURCE_LOG_POS (or SOURCE_AUTO_POSITION = 1) to say "
                                      "where to start")
                was = (m.get("source_server_id") or "", m.get("source_uuid") or "")
                now = (str(source.server_id), source.uuid)
                if was[0] and (was[0] != now[0] or (was[1] and was[1] != now[1])):
                    raise SourceChangedError.of(self.channel, origin, was, now)
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
        settings, origin = source_settings(self.warehouse, snap.state, self.channel)
        self.sfilter = SourceFilter(snap.state, self.channel) if self.filter_at_source else None
        self.source_side = source_side_filter(snap.state, self.channel)
        self.forwarded = forwarded_filters(snap.state, self.channel)  # for a relay in front of the source
        self.meta_static = dict(origin, source="binlog", filter_at_source=str(self.filter_at_source).lower())
        if self.sfilter is not None:
            self.meta_static.update(filters=self.sfilter.fingerprint, state_version=str(snap.version))
        with EventsWriter(self.warehouse, self.channel) as writer:
            self.writer = writer
            source = _Source(settings)
            self.report.flavor = source.flavor
            self.report.source_server_id, self.report.source_uuid = int(source.server_id), source.uuid
            self.meta_static.update(flavor=source.flavor, source_server_id=str(source.server_id),
                                    **({"source_uuid": source.uuid} if source.uuid else {}))
            if source.row_metadata not in (None, "FULL"):
                log.warning("channel %r: source binlog_row_metadata=%s: row images get UNKNOWN_COL<n> names "
                            "(set binlog_row_metadata=FULL)", self.channel, source.row_metadata)
            # the end of the source's binlog now: up to there the run catches up (see BACKLOG_COMMIT_SECONDS)
            self.backlog_end: tuple | None = _log_key(*source.logs[-1])
            ch = snap.state.channel(self.channel)
            self.executed = ch.applier.executed_gtid_set if ch is not None else ""
            start = self._start_position(writer.position, origin, source)
            if self.discard_through is not None:
                self.meta_static["relay_discard_through"] = str(self.discard_through)
            self.report.start = self.report.end = start
            meta = writer.position.metadata if writer.position else {}
            if meta.get("reset_at", "") != origin.get("reset_at", ""):
                meta = {}  # RESET REPLICA forgot what was retrieved (Retrieved_Gtid_Set starts empty)
            self.report.gtid = meta.get("gtid") or None
            self.landed = GtidSet.parse(meta.get("gtid_set") or meta.get("gtid") or "")
            self.report.gtid_set = str(self.landed)
            self._read(settings, start, t0)
        self.report.seconds = time.monotonic() - t0
        self.report.bytes_written, self.report.commits = writer.bytes_written, writer.commits
        return self.report

    def _read(self, settings: dict, start: tuple[str, int], t0: float) -> None:
        self.batch = Batch(self.channel, "binlog")
        self.file, self.pos = start
        self.boundary = start            # position after the last complete transaction read
        self.landed_at = start           # ... and after the last one landed
        self.last_gtid = self.report.gtid
        self.new_gtids: list[str] = []   # landed since the last commit (joined into self.landed there)
        self.txn: OpenTransaction | None = None
        self.last_flush = self.last_progress = time.monotonic()
        self.columns = TableMapColumns(self.channel)
        self.decoder = ImageDecoder()
        self.t0, self.landed_run, self.done = t0, 0, False
        from pymysqlreplication import event as ev_mod
        from pymysqlreplication import row_event as row_mod

        wanted = [ev_mod.QueryEvent, ev_mod.RotateEvent, ev_mod.FormatDescriptionEvent, ev_mod.XidEvent,
                  ev_mod.GtidEvent, ev_mod.MariadbGtidEvent, ev_mod.XAPrepareEvent, row_mod.WriteRowsEvent,
                  row_mod.UpdateRowsEvent, row_mod.DeleteRowsEvent]
        following = self.follow is not None
        if following:
            wanted.append(ev_mod.HeartbeatLogEvent)
        # is_mariadb=True would make pymysqlreplication ignore log_file/log_pos (it dumps from the first
        # binlog); the plain COM_BINLOG_DUMP by file and position works on MariaDB and MySQL alike.
        # freeze_schema=True parses a table_id's Table_map once (half the CPU of a row workload): a table_id
        # names one table definition while the server runs (ALTER/TRUNCATE get a new id); the map is cleared
        # at every binlog file start (`_event`), since a restarted source starts a new file and reuses ids.
        extra = {"slave_heartbeat": 1.0} if following else {}
        if self.gtid_start is not None:  # SOURCE_AUTO_POSITION: the source sends what the set lacks
            # (MariaDB: @slave_connect_state with strict mode; MySQL: COM_BINLOG_DUMP_GTID)
            extra.update(auto_position=self.gtid_start, is_mariadb=self.report.flavor == "mariadb")
        else:
            extra.update(resume_stream=True, log_file=start[0], log_pos=start[1], is_mariadb=False)
        self.stream = stream = BinlogStream(connection_settings=dict(
                                                settings, init_command=forwarding_command(self.forwarded),
                                                read_timeout=self.net_timeout),
                                            server_id=self.server_id,
                                            blocking=following, freeze_schema=True, only_events=wanted,
                                            decoder=self.decoder, **extra)
        try:
            for ev in stream:
                if type(ev).__name__ != "HeartbeatLogEvent" or (  # a heartbeat between transactions: the
                        self.txn is None and ev.ident == self.file and ev.packet.log_pos >= self.pos):
                    self._event(ev)  # position moves past the events the reader did not pass on, as MySQL's
                if following:
                    if self.txn is None and time.monotonic() - self.last_flush >= self._commit_every():
                        self._flush()
                    if self.txn is None and not self.follow():
                        break
                if self.done:
                    break
        finally:
            stream.close()
        self._flush()
        self._tick(force=True)

    def _event(self, ev) -> None:
        self.report.events_read += 1
        if type(ev) is FramedRows:
            self._advance(ev.log_pos)
            self._rows(ev, ev.etype)
            self._tick()
            return
        name = type(ev).__name__
        if name == "RotateEvent" or name == "FormatDescriptionEvent":
            # A new binlog file (e.g. after a source restart, which reuses table ids): forget the Table_maps
            # that freeze_schema keeps; every statement logs its Table_maps again anyway.
            self.stream.table_map.clear()
            self.columns.clear()
            self.decoder.clear()
        if name == "RotateEvent":
            self.file, self.pos = ev.next_binlog, ev.position
            if self.txn is None:
                self.boundary = (self.file, self.pos)
            return
        self._advance(ev.packet.log_pos)
        handler = self._handlers.get(name)
        if handler is not None:
            handler(ev)
        elif self.txn is None:  # housekeeping between transactions: the resume position moves past it
            self.boundary = (self.file, self.pos)
        self._tick()

    @functools.cached_property
    def _handlers(self) -> dict[str, Callable[[Any], None]]:
        """Event class name -> what landing it means (Debezium's reader keeps the same kind of map)."""
        out: dict[str, Callable[[Any], None]] = {
            "GtidEvent": self._gtid, "MariadbGtidEvent": self._gtid, "QueryEvent": self._query,
            "XidEvent": self._xid, "XAPrepareEvent": self._xa_prepare,
        }
        for name, etype in ROW_TYPES.items():
            out[name] = functools.partial(self._rows, etype=etype)
        return out

    def _gtid(self, ev) -> None:
        if self.txn is not None and (self.txn.rows or self.txn.content):
            log.warning("channel %r: transaction before %s:%d has no end; discarded", self.channel,
                        self.file, self.pos)
        self.txn = OpenTransaction.of_gtid_event(ev)

    def _xid(self, ev) -> None:
        self._add_query(self._txn(ev), ev, f"COMMIT /* xid={ev.xid} */", "COMMIT", "TRANSACTION", None, (), True)
        self._end()

    def _xa_prepare(self, ev) -> None:
        self._add_query(self._txn(ev), ev, f"XA PREPARE {xa_xid(ev)}", "XA_PREPARE", "TRANSACTION", None, (), True)
        self._end()

    def _advance(self, log_pos: int) -> None:
        if log_pos:
            if log_pos > self.pos:  # binlog bytes consumed, including events the reader skipped
                self.report.source_bytes += log_pos - self.pos
            self.pos = log_pos

    def _txn(self, ev, open_: bool = True) -> OpenTransaction:
        """The current transaction; without a GTID event a statement outside BEGIN stands alone."""
        if self.txn is None:
            self.txn = OpenTransaction(None, open_=open_)
        self.txn.time_us = ev.timestamp * 1_000_000
        return self.txn

    def _query(self, ev) -> None:
        from rpl_sql.classify import classify

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
        if (self.sfilter is not None or self.source_side is not None) and not control:
            key = SourceFilter.statement_key(cmd, default_db, info.tables, info.method)
        if key is not None and self.source_side is not None and self.source_side.drops(key):
            txn.content += 1
            txn.withhold()
        elif key is not None and self.sfilter is not None and not txn.xa and self.sfilter.drops(key):
            txn.content += 1
            txn.dropped[key] += 1
            txn.merge = None
        else:
            self._add_query(txn, ev, sql, cmd, info.kind, default_db, info.tables, control=control)
        if not txn.open:
            self._end()

    def _add_query(self, txn: OpenTransaction, ev, sql, cmd, kind, default_db, tables, control: bool) -> None:
        if not control:
            txn.content += 1
            txn.kept += 1
        txn.merge = None
        txn.rows.append(PendingEvent(txn.gtid, self.file, self.pos, "query", cmd, kind, default_db, None, None,
                                 tables_value(tables), sql, None, txn.time_us or ev.timestamp * 1_000_000, None))

    def _rows(self, ev, etype: str) -> None:
        txn = self._txn(ev)
        ends = bool(getattr(ev, "flags", 0) & STMT_END_F)
        m = txn.merge
        if m is not None and m[0] == ev.table_id and m[1] == etype:
            row = m[2]
            if row is None:  # continues a dropped statement's rows: already counted
                pass
            elif len(row.images) < MAX_MERGED_IMAGES:
                row.images.extend(self._images(ev, etype))
                row.file, row.pos = self.file, self.pos
            else:
                row = self._new_rows_row(txn, ev, etype)
            txn.merge = None if ends else (ev.table_id, etype, row)
            return
        txn.content += 1
        if self.source_side is not None and self.source_side.drops(SourceFilter.row_key(ev.schema, ev.table)):
            return txn.withhold(None if ends else (ev.table_id, etype, None))
        if self.sfilter is not None and not txn.xa:
            key = SourceFilter.row_key(ev.schema, ev.table)
            if self.sfilter.drops(key):
                txn.dropped[key] += 1
                txn.merge = None if ends else (ev.table_id, etype, None)
                return
        txn.kept += 1
        row = self._new_rows_row(txn, ev, etype)
        txn.merge = None if ends else (ev.table_id, etype, row)

    def _images(self, ev, etype: str) -> list[dict]:
        images = ev.images if type(ev) is FramedRows else self.decoder.images(ev, etype)
        return images if images is not None else library_images(ev, etype)

    def _new_rows_row(self, txn: OpenTransaction, ev, etype: str) -> PendingEvent:
        row = PendingEvent(txn.gtid, self.file, self.pos, etype, None, None, None, ev.schema, ev.table, None, None,
                       self._images(ev, etype), ev.timestamp * 1_000_000, self.columns.of(ev))  # positional: hot
        txn.rows.append(row)
        return row

    def _end(self) -> None:
        """A transaction is complete: move it to the batch (or its GTID marker when all of it was dropped)."""
        txn, self.txn = self.txn, None
        b = self.batch
        self.boundary = self.landed_at = (self.file, self.pos)
        self.report.transactions += 1
        if txn.gtid:
            self.last_gtid = txn.gtid
            self.new_gtids.append(txn.gtid)
        if txn.dropped:
            n = sum(txn.dropped.values())
            self.report.dropped += n
            b.dropped.update(txn.dropped)
        if (txn.dropped or txn.withheld) and txn.kept == 0:
            b.add(txn.gtid, self.file, self.pos, "gtid", time_us=txn.time_us)
        else:
            for r in txn.rows:
                b.add(r.gtid, r.file, r.pos, r.event_type, r.command, r.kind, r.default_db, r.db_name, r.table_name,
                      r.tables, r.statement, rows_json(r.images) if r.images is not None else None, r.time_us,
                      r.columns)
        pending = len(b)
        if self.max_events is not None and self.landed_run + pending >= self.max_events:
            self.done = True
        if pending >= self.batch_rows or len(b.dropped) >= MAX_DROPPED_KEYS or \
                (pending and time.monotonic() - self.last_flush >= self._commit_every()):
            self._flush()

    def _commit_every(self) -> float:
        """Seconds between time-based commits: longer while the backlog the source had at connect is read."""
        if self.backlog_end is not None:
            if _log_key(self.file, self.pos) < self.backlog_end:
                return max(self.batch_seconds, BACKLOG_COMMIT_SECONDS)
            self.backlog_end = None
        return self.batch_seconds

    def _flush(self) -> None:
        b = self.batch
        self.last_flush = time.monotonic()
        if self.follow is not None and self.txn is None and self.boundary != self.landed_at:
            b.add(None, *self.boundary, "gtid", time_us=int(time.time() * 1e6))  # past events between
            self.landed_at = self.boundary  # transactions (a rotation, a checkpoint), as a replica's positions do
        if not len(b):
            return
        w = self.writer
        first = w.last_seq + 1
        if self.new_gtids:
            self.landed = self.landed.union(GtidSet.parse(",".join(self.new_gtids)))
            self.new_gtids = []
        meta = dict(self.meta_static, binlog_file=self.boundary[0], binlog_pos=str(self.boundary[1]),
                    gtid=self.last_gtid or "", gtid_set=str(self.landed),
                    dropped=dropped_json(b.dropped) if b.dropped else "")
        n = len(b)
        w.commit(b.to_table(first), meta)
        r = self.report
        r.first_seq = r.first_seq or first
        r.last_seq = w.last_seq
        r.landed += n
        r.end, r.gtid, r.gtid_set = self.boundary, self.last_gtid, str(self.landed)
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
    were landed by this run. `progress(report)` is called every few seconds. Raises ConcurrentIngestError if the
    channel is being ingested elsewhere, IngestError if the channel has no source.
    """
    return BinlogIngest(os.fspath(warehouse), channel, max_events=max_events, filter_at_source=filter_at_source,
                        batch_rows=batch_rows, batch_seconds=batch_seconds, progress=progress,
                        server_id=server_id).run()


def ingest_all(warehouse: str | os.PathLike, **kwargs: Any) -> list[IngestReport]:
    """`ingest_channel` for every configured channel, one after the other (channel-map order)."""
    state = DeltaStore(os.fspath(warehouse)).load().state
    return [ingest_channel(warehouse, ch.name, **kwargs) for ch in state.configured_channels()]


