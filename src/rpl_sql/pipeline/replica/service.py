"""The replica service: per channel a receiver and an applier that follow the source continuously.

    rpl-sql replica --warehouse WH [--channel a ...]

The receiver follows the source binlog (`BinlogIngest` with `follow`), landing whole transactions with the
position in the same commit, and reconnects with backoff when the source goes away. The applier applies
what landed in small batches (`LocalApplier`: the reference evaluator, no Spark) and brings the replica
tables up to it (`ReplicaTables`). Both obey START/STOP REPLICA [IO_THREAD | SQL_THREAD] from any client
(they read the state table several times a second), and report through `service_status` every heartbeat.
An error stops that channel's thread as in MySQL: the IO thread retries, the SQL thread stops with
Last_SQL_Errno/Last_SQL_Error (START REPLICA SQL_THREAD clears them and tries again). SIGTERM/SIGINT stop
at a transaction boundary; SIGKILL loses nothing, since every step is an atomic commit carrying its position.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone

from rpl_sql import service_status
from rpl_sql.applier_state import ApplyError
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.applier.report import ChannelReport
from rpl_sql.pipeline.binlog import BinlogIngest
from rpl_sql.pipeline.replica.materialize import ReplicaTables
from rpl_sql.pipeline.writer import ChannelLock, IngestError, IngestReport
from rpl_sql.state import ServerState, channel_key
from rpl_sql.store import DeltaStore, resolve_warehouse

log = logging.getLogger(__name__)

STATE_EVERY = 0.2      # seconds between reads of the state table (START/STOP reach the loops within this)
HEARTBEAT = 0.5        # seconds between status files
MAX_BACKOFF = 30.0


class ServiceError(Exception):
    """The service cannot run: no channel to run, or a channel already run by another service."""


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%y%m%d %H:%M:%S")


class _State:
    """The state table, re-read at most every STATE_EVERY seconds (shared by a channel's two loops)."""

    def __init__(self, store: DeltaStore):
        self.store, self.at, self.value, self.version = store, 0.0, None, -1
        self.lock = threading.Lock()

    def get(self) -> ServerState:
        return self.versioned()[0]

    def invalidate(self) -> None:
        """The next read goes to the table (after this process committed to it)."""
        with self.lock:
            self.at = 0.0

    def versioned(self) -> tuple[ServerState, int]:
        """The state and its table version (-1 before the first commit)."""
        with self.lock:
            now = time.monotonic()
            if self.value is None or now - self.at >= STATE_EVERY:
                snap = self.store.load()
                self.value, self.version, self.at = snap.state, -1 if snap.version is None else snap.version, now
            return self.value, self.version


class ChannelLoops:
    """One channel's receiver and applier threads and what they report."""

    def __init__(self, service: "ReplicaService", channel: str):
        self.svc, self.channel = service, channel
        self.status = service_status.ChannelStatus(channel, pid=os.getpid(), host=socket.gethostname())
        old = service_status.read_status(service.warehouse, channel)
        if old is not None:  # errors outlive the service, as MySQL keeps them until START REPLICA
            self.status.last_io_error, self.status.last_sql_error = old.last_io_error, old.last_sql_error
        self.threads = [threading.Thread(target=self._receiver, name=f"io-{channel}", daemon=True),
                        threading.Thread(target=self._applier, name=f"sql-{channel}", daemon=True)]
        self.lock = ChannelLock(service.warehouse, channel, role="service", busy=ServiceError)
        self.error_version = -1  # the state version of this SQL thread's own stop on an error

    def _stopped(self, thread: str, version: int) -> None:
        """The thread is stopped as of state `version`; said at once (STOP REPLICA is waiting for it)."""
        st = self.status
        changed = False
        if thread == "sql":
            changed = st.sql != "No" or st.sql_version != version
            st.sql, st.sql_state, st.seconds_behind = "No", "", None
            st.sql_version = version
        else:
            changed = st.io != "No" or st.io_version != version
            st.io, st.io_state = "No", ""
            st.io_version = version
        if changed:
            self.svc.publish(self)

    # ------------------------------------------------------------ receiver (IO thread)

    def _io_wanted(self) -> bool:
        state, version = self.svc.state.versioned()
        ch = state.channel(self.channel)
        wanted = not self.svc.stopping.is_set() and ch is not None and ch.configured and ch.io_running
        if wanted:
            self.status.io_version = version
        return wanted

    def _receiver(self) -> None:
        backoff = 1.0
        st = self.status
        while not self.svc.stopping.is_set():
            if not self._io_wanted():
                self._stopped("io", self.svc.state.versioned()[1])
                self.svc.stopping.wait(STATE_EVERY)
                continue
            st.io, st.io_state = "Connecting", "Connecting to source"

            def follow() -> bool:
                st.io, st.io_state = "Yes", "Waiting for source to send event"
                return self._io_wanted()

            def progress(r: IngestReport) -> None:
                if r.end:
                    st.read_file, st.read_pos = r.end[0], int(r.end[1])
                if r.gtid:
                    st.retrieved_gtid_set = r.gtid

            try:
                BinlogIngest(self.svc.warehouse, self.channel, batch_rows=self.svc.batch_rows,
                             batch_seconds=self.svc.batch_seconds, follow=follow, progress=progress,
                             progress_every=HEARTBEAT).run()
                backoff = 1.0
            except Exception as e:  # the source went away, refused us, or the events table said no
                code = getattr(e, "args", [None])[0] if not isinstance(e, IngestError) else 13114
                code = code if isinstance(code, int) else 2003
                st.last_io_error = [code, f"{type(e).__name__}: {e}"[:1000], _stamp()]
                st.io, st.io_state = "Connecting", f"Reconnecting after a failed read (retry in {backoff:.0f} s)"
                log.warning("channel %r: receiver: %s; retrying in %.0f s", self.channel, e, backoff)
                self.svc.stopping.wait(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
        self._stopped("io", self.svc.state.versioned()[1])

    # ------------------------------------------------------------ applier (SQL thread)

    def _applier(self) -> None:
        st = self.status
        local = LocalApplier(self.svc.warehouse, batch_size=self.svc.batch_size)
        started = False
        while not self.svc.stopping.is_set():
            state, version = self.svc.state.versioned()
            ch = state.channel(self.channel)
            if ch is None or not ch.configured or not ch.sql_running or version <= self.error_version:
                started = False  # (a state read before this thread's own error stopped it is not a START)
                self._stopped("sql", version)
                self.svc.stopping.wait(STATE_EVERY)
                continue
            st.sql_version = version  # acting on this version: a STOP committed later waits for the loop
            tables = ReplicaTables(self.svc.warehouse, self.channel, lctn=state.lower_case_table_names,
                                   exec_mode=self.svc.exec_mode)
            local.stop_before = tables.statement_conflict  # statement-format DML stops the batch before it
            try:
                if not started:  # START clears the last error (MySQL); recovery of a crashed batch first
                    st.last_sql_error = [0, "", ""]
                    st.sql, st.sql_state = "Yes", "Applying batch"
                    self.svc.publish(self)
                    local.commits.recover(self.channel, ChannelReport(self.channel))
                    tables.catch_up(self.svc.store.load().state.channel(self.channel).applier.seq)
                    started = True
                rec = local.run_batch(self.channel)
                if rec is None:
                    st.sql_state = "Replica has read all relay log; waiting for more updates"
                    st.seconds_behind = 0
                    self.svc.stopping.wait(self.svc.poll)
                    continue
                st.sql_state = "Applying batch"
                tables.catch_up(rec.end)
                st.sql_version = version
                if local.last_event_time is not None:
                    st.seconds_behind = max(0, int(time.time() - local.last_event_time)) if local.more else 0
            except Exception as e:  # ours (ApplyError, MySQL's errors) or a bug: the SQL thread stops and says why
                if not isinstance(e, (ApplyError, MySQLError, IngestError)):
                    log.exception("channel %r: SQL thread", self.channel)
                self._sql_error(e)
                started = False
        self._stopped("sql", self.svc.state.versioned()[1])

    def _sql_error(self, e: Exception) -> None:
        """What a MySQL SQL thread does on an error: stop (in the state, as STOP REPLICA SQL_THREAD) and say why."""
        code = e.code if isinstance(e, MySQLError) else 13117
        msg = e.message if isinstance(e, MySQLError) else \
            str(e) if isinstance(e, (ApplyError, IngestError)) else f"{type(e).__name__}: {e}"
        st = self.status
        st.last_sql_error = [code, f"Error executing row event: '{msg}'"[:2000] if code in (1032, 1062) else msg,
                             _stamp()]
        st.sql, st.sql_state, st.seconds_behind = "No", "", None
        log.error("channel %r: SQL thread stopped: %s", self.channel, msg)

        def stop(state: ServerState):
            ch = state.channel(self.channel)
            if ch is None or not ch.sql_running:
                return state, None
            return state.with_channel(replace(ch, sql_running=False)), None

        meta = {"operation": "STOP REPLICA SQL_THREAD",
                "statement": f"SQL thread error {code} FOR CHANNEL '{self.channel}'"}
        _, version = self.svc.store.transact(stop, meta)
        if version is not None:
            st.sql_version = self.error_version = version
        self.svc.state.invalidate()
        self.svc.publish(self)


class ReplicaService:
    """Runs the channels' loops until `stop()` (or SIGTERM/SIGINT when run from the main thread)."""

    def __init__(self, warehouse: str | os.PathLike | None = None, channels: list[str] | None = None, *,
                 batch_size: int = 5000, batch_rows: int = 5000, batch_seconds: float = 0.2, poll: float = 0.1,
                 exec_mode: str = "STRICT"):
        self.warehouse = resolve_warehouse(warehouse)
        self.store = DeltaStore(self.warehouse)
        self.state = _State(self.store)
        self.wanted = [channel_key(c) for c in channels] if channels else None
        self.batch_size, self.batch_rows, self.batch_seconds = batch_size, batch_rows, batch_seconds
        self.poll, self.exec_mode = poll, exec_mode.upper()
        self.stopping = threading.Event()
        self.write_lock = threading.Lock()
        self.loops: list[ChannelLoops] = []

    def stop(self) -> None:
        self.stopping.set()

    def channels(self) -> list[str]:
        """The channels this service runs (named ones must exist and be configured: MySQL's errors)."""
        state = self.store.load().state
        if self.wanted is None:
            names = [c.name for c in state.configured_channels()]
            if not names:
                raise ServiceError("no channel is configured: CHANGE REPLICATION SOURCE TO SOURCE_HOST=... FOR "
                                   "CHANNEL 'name' first")
            return names
        for n in self.wanted:
            ch = state.channel(n)
            if ch is None:
                raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", n)
            if not ch.configured:
                raise MySQLError.of("ER_BAD_REPLICA")
        return list(self.wanted)

    def run(self) -> None:
        """Start every channel's loops and write heartbeats until stopped; then wait for the loops to end."""
        self.loops = [ChannelLoops(self, n) for n in self.channels()]
        taken = []
        try:
            for lp in self.loops:
                lp.lock.acquire(lp.channel)
                taken.append(lp)
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, lambda *_: self.stop())
            for lp in self.loops:
                for t in lp.threads:
                    t.start()
            while not self.stopping.is_set():
                self._heartbeat()
                self.stopping.wait(HEARTBEAT)
            for lp in self.loops:
                for t in lp.threads:
                    t.join()
            self._heartbeat()
        finally:
            for lp in taken:
                lp.lock.release()

    def _heartbeat(self) -> None:
        for lp in self.loops:
            self.publish(lp)

    def publish(self, lp: ChannelLoops) -> None:
        """Write a channel's status now (the heartbeat, and at once when a thread stops)."""
        with self.write_lock:
            lp.status.updated = time.time()
            service_status.write_status(self.warehouse, lp.status)


def run_service(warehouse: str | os.PathLike | None = None, channels: list[str] | None = None, **kw) -> None:
    """`ReplicaService(warehouse, channels, **kw).run()`: blocks until SIGTERM/SIGINT."""
    ReplicaService(warehouse, channels, **kw).run()
