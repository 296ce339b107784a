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

About 560 lines: a channel's two threads (`ChannelLoops`), the service running them, and the SQL thread's process
(`_Child`, `_sql_process`), which runs the same loops under a `ReplicaService` of its own in a child the loops
start: split apart, the modules would import each other."""
from __future__ import annotations

import faulthandler
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from dataclasses import replace
from typing import Callable

from rpl_sql.storage import service_status
from rpl_sql.server.applier_state import ApplyError
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import log as deltalog
from rpl_sql.errors import MySQLError, RplSqlError
from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.applier.report import ChannelReport
from rpl_sql.pipeline.binlog import BinlogIngest, SourceChangedError, source_settings
from rpl_sql.source_server.connection import NET_TIMEOUT, forwarded_filters
from rpl_sql.pipeline.replica.backfill import Backfills
from rpl_sql.pipeline.replica.materialize import ReplicaTables
from rpl_sql.pipeline.replica.spark_sql_thread import spark_sql_thread
from rpl_sql.pipeline.replica.child_signals import die_with_parent, ignore_ctrl_c, start_with_ctrl_c_blocked
from rpl_sql.pipeline.replica.state_cache import STATE_EVERY, StateCache
from rpl_sql.pipeline.replica.thread_errors import error_stamp, io_error
from rpl_sql.pipeline.replica.service_memory import return_freed_memory, rss_mb, set_service_allocators
from rpl_sql.pipeline.writer import ChannelLock, IngestReport
from rpl_sql.pipeline.ingest_position import IngestError
from rpl_sql.spark.env import local_spark
from rpl_sql.filters.state import ServerState, channel_key
from rpl_sql.storage.store import DeltaStore, resolve_warehouse

log = logging.getLogger(__name__)

HEARTBEAT = 0.5        # seconds between status files
SLOW_STOP = 30.0      # seconds a stop may take before every thread's stack goes to the log (it says where it hangs)
ARCHIVE_EVERY = 60.0  # seconds between moves of every table's expired commits out of its log (storage/delta/archive)
MAX_BACKOFF = 30.0
# Events per SQL-thread batch at most (fewer when fewer wait). Catching up 100,000 row events, batches of 10,000
# took 7.4 s against 12.7 s in batches of 5,000 (each batch merges into the replica tables once); one batch
# takes about 0.7 s, which bounds how long STOP REPLICA SQL_THREAD waits.
BATCH_SIZE = 10_000
# MB of resident memory above which a SQL-thread process is replaced by a fresh one, as Celery's
# worker_max_memory_per_child (delta-rs's allocator keeps what it once used: the process grew from 210 to
# 380-450 MB over ten minutes at 5,000 rows/s). Off unless asked: at 320 MB each replacement stalled the SQL
# thread for seconds on 2 cores (lag p99 3.54 -> 6.31 s) and the two processes of a handoff raised the peak.
SQL_THREAD_MAX_MEMORY: int | None = None
class ServiceError(RplSqlError):
    """The service cannot run: no channel to run, or a channel already run by another service."""


class ChannelLoops:
    """One channel's receiver and applier threads and what they report."""

    def __init__(self, service: "ReplicaService", channel: str):
        self.svc, self.channel = service, channel
        self.status = service_status.ChannelStatus(channel, pid=os.getpid(), host=socket.gethostname())
        old = service_status.read_status(service.warehouse, channel)
        if old is not None:  # errors outlive the service, as MySQL keeps them until START REPLICA
            self.status.last_io_error, self.status.last_sql_error = old.last_io_error, old.last_sql_error
        applier = self._applier_process if service.processes else \
            (lambda: spark_sql_thread(self, STATE_EVERY)) if service.master else self._applier
        self.threads = [threading.Thread(target=self._receiver, name=f"io-{channel}", daemon=True),
                        threading.Thread(target=applier, name=f"sql-{channel}", daemon=True)]
        self.lock = ChannelLock(service.warehouse, channel, role="service", busy=ServiceError)
        self.error_version = -1  # the state version of this SQL thread's own stop on an error
        self.ingest: BinlogIngest | None = None  # the receiver's current run
        self.heard, self.shut = 0.0, False  # when its source last sent anything; whether a stop shut its read
        self.backfills = Backfills(channel, lambda: source_settings(service.warehouse, service.state.get(), channel)[0],
                                   page_rows=service.copy_page_rows)  # copies of tables a filter change applies

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
        st = self.status
        if ch is not None and ch.reset_at != st.reset_at:  # RESET REPLICA: forget what was read, and the errors
            st.read_file, st.read_pos, st.retrieved_gtid_set, st.reset_at = "", 0, "", ch.reset_at
            st.last_io_error, st.last_sql_error = [0, "", ""], [0, "", ""]
        wanted = not self.svc.stopping.is_set() and ch is not None and ch.configured and ch.io_running
        if wanted:
            st.io_version = version
        return wanted

    def _receiver(self) -> None:
        backoff = 1.0
        st = self.status
        started = False
        while not self.svc.stopping.is_set():
            if not self._io_wanted():
                started = False
                self._stopped("io", self.svc.state.versioned()[1])
                self.svc.stopping.wait(STATE_EVERY)
                continue
            if not started and st.io == "No":  # START REPLICA [IO_THREAD]: MySQL's IO thread clears its last error
                st.last_io_error, backoff = [0, "", ""], 1.0
            started = True
            st.io, st.io_state = "Connecting", "Connecting to source"

            sent = forwarded_filters(self.svc.state.get(), self.channel)  # a relay sends what they apply

            def follow() -> bool:  # (a filter change reconnects: a relay in front gets the new filters)
                nonlocal backoff
                if st.io != "Yes":  # connected: the last failure is over (MySQL clears it on a good connect)
                    st.last_io_error, backoff = [0, "", ""], 1.0
                st.io, st.io_state = "Yes", "Waiting for source to send event"
                self.heard = time.monotonic()
                return self._io_wanted() and forwarded_filters(self.svc.state.get(), self.channel) == sent

            def progress(r: IngestReport) -> None:  # every HEARTBEAT, on the receiver's thread
                return_freed_memory()
                st.source_server_id, st.source_uuid = r.source_server_id, r.source_uuid
                if r.end:
                    st.read_file, st.read_pos = r.end[0], int(r.end[1])
                if r.gtid_set or r.gtid:
                    st.retrieved_gtid_set = r.gtid_set or r.gtid

            try:
                self.shut = False
                self.ingest = BinlogIngest(self.svc.warehouse, self.channel, batch_rows=self.svc.batch_rows,
                                           batch_seconds=self.svc.batch_seconds, follow=follow, progress=progress,
                                           progress_every=HEARTBEAT, net_timeout=self.svc.net_timeout)
                self.ingest.run()
                backoff = 1.0
            except SourceChangedError as e:  # fatal, as MySQL's receiver: the IO thread stops and says why
                log.error("channel %r: receiver stopped: %s", self.channel, e)
                self._stop_thread("io", f"IO thread error {e.code} FOR CHANNEL '{self.channel}'")  # then say so
                st.last_io_error = [e.code, str(e)[:1000], error_stamp()]
                st.io, st.io_state = "No", ""
            except Exception as e:  # the source went away, refused us, or the events table said no
                if self.shut or self.svc.stopping.is_set():  # (or a stop shut a wait on a silent source)
                    self.shut = False
                    continue
                code, message = io_error(e)
                st.last_io_error = [code, message[:1000], error_stamp()]
                st.io, st.io_state = "Connecting", f"Reconnecting after a failed read (retry in {backoff:.0f} s)"
                log.warning("channel %r: receiver: %s; retrying in %.0f s", self.channel, e, backoff)
                self.svc.stopping.wait(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
        self._stopped("io", self.svc.state.versioned()[1])

    def shut_unwanted_read(self) -> None:
        """A receiver no longer wanted (a stop, STOP REPLICA IO_THREAD) that heard nothing for two seconds (a
        silent source: its heartbeat comes every second) has its read shut, as MySQL's STOP REPLICA kills it."""
        stream = getattr(self.ingest, "stream", None)  # (none before a run has connected)
        if stream is not None and self.status.io == "Yes" and time.monotonic() - self.heard >= 2.0:
            ch = self.svc.state.get().channel(self.channel)
            if self.svc.stopping.is_set() or ch is None or not ch.io_running:
                self.shut = True
                stream.interrupt()

    # ------------------------------------------------------------ applier (SQL thread)

    def _applier(self) -> None:
        st = self.status
        local = LocalApplier(self.svc.warehouse, batch_size=self.svc.batch_size)
        started = False
        tables: ReplicaTables | None = None
        while not self.svc.stopping.is_set():
            state, version = self.svc.state.versioned()
            ch = state.channel(self.channel)
            if ch is None or not ch.configured or not ch.sql_running or version <= self.error_version:
                started = False  # (a state read before this thread's own error stopped it is not a START)
                self._stopped("sql", version)
                self.svc.stopping.wait(STATE_EVERY)
                continue
            st.sql_version = version  # acting on this version: a STOP committed later waits for the loop
            if not started or tables.lctn != state.lower_case_table_names:
                tables = ReplicaTables(self.svc.warehouse, self.channel, lctn=state.lower_case_table_names,
                                       exec_mode=self.svc.exec_mode, backfills=self.backfills)
                local.stop_before = tables.statement_conflict  # statement-format DML stops the batch before it
            # a batch is executed (position, GTIDs) once the replica tables hold it, not before; the tables
            # follow the filters the batch was decided with
            local.gate = lambda lo, last, out, t=tables: t.catch_up(
                last, handed=(lo, out), state=local.batch_state[0], version=local.batch_state[1])
            try:
                if not started:  # START clears the last error (MySQL); recovery of a crashed batch first
                    st.last_sql_error = [0, "", ""]
                    st.sql, st.sql_state = "Yes", "Applying batch"
                    self.svc.publish(self)
                    local.commits.recover(self.channel, ChannelReport(self.channel))
                    tables.catch_up(self.svc.store.load().state.channel(self.channel).applier.seq)
                    started = True
                rec = local.run_batch(self.channel)
                backfilling = self.backfills.describe()
                if rec is None and self.backfills.pending:  # a copy may be done: replay onto it while idle
                    tables.catch_up(state=local.batch_state[0], version=local.batch_state[1])
                if rec is None:
                    st.sql_state = backfilling or "Replica has read all relay log; waiting for more updates"
                    st.seconds_behind = 0
                    self.svc.stopping.wait(self.svc.poll)
                    continue
                st.sql_state = "Applying batch" + (f"; {backfilling}" if backfilling else "")
                return_freed_memory()
                st.sql_version = version
                if local.last_event_time is not None:
                    st.seconds_behind = max(0, int(time.time() - local.last_event_time)) if local.more else 0
            except Exception as e:  # ours (ApplyError, MySQL's errors) or a bug: the SQL thread stops and says why
                self._sql_error(e)
                started = False
        self._stopped("sql", self.svc.state.versioned()[1])

    # ------------------------------------------------------------ applier on a Spark cluster (--master)

    def _applier_process(self) -> None:
        """The SQL thread in a child process (decoding and applying then use a second core instead of sharing
        this process's GIL with the receiver); its status comes back over a pipe and is published from here.
        A child that dies is started again, as an error the SQL thread reports. A child whose memory passed
        `sql_thread_max_memory` is replaced: its successor starts (imports, connects) while it applies, then
        it stops after its batch and the successor takes the channel's SQL-thread lock."""
        ctx = multiprocessing.get_context("spawn")  # no fork: delta-rs' runtime threads do not survive one
        set_service_allocators()  # read by the children's allocators
        st = self.status
        children = [_Child.start(ctx, self)]  # the first applies; a second is its successor
        while children:
            if self.svc.stopping.is_set():
                for c in children:
                    c.ask_stop()
            for c in list(children):
                msg = c.receive(0.1 / len(children))
                if msg is _Child.ENDED:
                    children.remove(c)
                    if c.retiring or self.svc.stopping.is_set():
                        continue
                    st.last_sql_error = [13117, f"the SQL thread's process ended (exit code {c.proc.exitcode}); "
                                                "started again", error_stamp()]
                    st.sql, st.sql_state, st.seconds_behind = "No", "", None
                    self.svc.publish(self)
                    log.error("channel %r: the SQL thread's process ended (exit code %s)", self.channel,
                              c.proc.exitcode)
                    if all(o.retiring for o in children):  # no successor waiting to take over: a new one
                        self.svc.stopping.wait(1.0)
                        if not self.svc.stopping.is_set():
                            children.append(_Child.start(ctx, self, successor=bool(children)))
                elif msg is None or c.retiring:
                    continue
                elif "recycle" in msg:
                    if len(children) == 1:
                        log.info("channel %r: the SQL thread's process holds %d MB; replacing it", self.channel,
                                 msg["recycle"])
                        children.append(_Child.start(ctx, self, successor=True))
                elif "ready" in msg:
                    if c is not children[0]:  # the successor is up: its predecessor stops after its batch
                        children[0].retiring = True
                        children[0].ask_stop()
                else:
                    for k, v in msg.items():
                        setattr(st, k, v)
                    self.svc.publish(self)
        self._stopped("sql", self.svc.state.versioned()[1])

    def _sql_error(self, e: Exception) -> None:
        """What a MySQL SQL thread does on an error: stop (in the state, as STOP REPLICA SQL_THREAD) and say why
        (with a traceback in the log for anything that is not one of rpl_sql's own errors: a bug)."""
        if not isinstance(e, (ApplyError, MySQLError, IngestError)):
            log.error("channel %r: SQL thread", self.channel, exc_info=e)
        code = e.code if isinstance(e, MySQLError) else 13117
        msg = e.message if isinstance(e, MySQLError) else \
            str(e) if isinstance(e, (ApplyError, IngestError)) else f"{type(e).__name__}: {e}"
        st = self.status
        log.error("channel %r: SQL thread stopped: %s", self.channel, msg)
        try:  # the status says "stopped" once the state does (another thread may publish it at any moment)
            version = self._stop_thread("sql", f"SQL thread error {code} FOR CHANNEL '{self.channel}'")
            if version is not None:
                st.sql_version = self.error_version = version
        finally:
            text = f"Error executing row event: '{msg}'"[:2000] if code in (1032, 1062) else msg
            st.last_sql_error, st.sql, st.sql_state, st.seconds_behind = [code, text, error_stamp()], "No", "", None
            self.svc.publish(self)

    def _stop_thread(self, thread: str, why: str) -> int | None:
        """STOP REPLICA IO_THREAD | SQL_THREAD committed for the channel, as a MySQL thread that stops on an
        error; the version committed (None when it was stopped already)."""
        flag = f"{thread}_running"

        def stop(state: ServerState):
            ch = state.channel(self.channel)
            if ch is None or not getattr(ch, flag):
                return state, None
            return state.with_channel(replace(ch, **{flag: False})), None

        _, version = self.svc.store.transact(stop, {"operation": f"STOP REPLICA {thread.upper()}_THREAD",
                                                    "statement": why})
        self.svc.state.invalidate()
        return version


class ReplicaService:
    """Runs the channels' loops until `stop()` (or SIGTERM/SIGINT when run from the main thread)."""

    def __init__(self, warehouse: str | os.PathLike | None = None, channels: list[str] | None = None, *,
                 batch_size: int = BATCH_SIZE, batch_rows: int = 5000, batch_seconds: float = 0.2, poll: float = 0.1,
                 exec_mode: str = "STRICT", processes: bool = True, master: str | None = None,
                 spark_conf: dict[str, str] | None = None, verbose: bool = False,
                 sql_thread_max_memory: int | None = SQL_THREAD_MAX_MEMORY, copy_page_rows: int = 200_000,
                 net_timeout: float = NET_TIMEOUT):
        self.warehouse = resolve_warehouse(warehouse)
        # MB above which a SQL-thread process is replaced; rows per source query of a backfill
        self.sql_thread_max_memory, self.copy_page_rows = sql_thread_max_memory, copy_page_rows
        self.processes = processes  # each channel's SQL thread in a process of its own
        # master: the SQL threads decide with the Spark job on this cluster instead of in Python
        self.master, self.spark_conf, self.verbose = master, dict(spark_conf or {}), verbose
        self._spark, self._spark_lock = None, threading.Lock()
        self.store = DeltaStore(self.warehouse)
        self.state = StateCache(self.store)
        self.wanted = [channel_key(c) for c in channels] if channels else None
        self.batch_size, self.batch_rows, self.batch_seconds = batch_size, batch_rows, batch_seconds
        self.poll, self.exec_mode = poll, exec_mode.upper()
        self.net_timeout = net_timeout  # replica_net_timeout: seconds of a silent source before reconnecting
        self.stopping, self.write_lock, self.signalled = threading.Event(), threading.Lock(), []  # (on_signal's)
        self.loops: list[ChannelLoops] = []

    def stop(self) -> None:
        self.stopping.set()

    def on_signal(self, *_) -> None:  # SIGTERM, SIGINT: a note for `run`, no lock (setting `stopping` here hung
        self.signalled.append(True)  # for good when the signal landed while the main thread held its lock)

    def settings(self) -> dict:
        """What a SQL-thread process needs to run like this service's own thread."""
        return {"batch_size": self.batch_size, "poll": self.poll, "exec_mode": self.exec_mode,
                "master": self.master, "spark_conf": self.spark_conf, "verbose": self.verbose,
                "sql_thread_max_memory": self.sql_thread_max_memory, "copy_page_rows": self.copy_page_rows}

    def spark(self):
        """The SparkSession on `master` (one per process, started on first use)."""
        with self._spark_lock:
            if self._spark is None:
                self._spark = local_spark(app_name="rpl_sql-replica", master=self.master, verbose=self.verbose,
                                          **{"spark.ui.showConsoleProgress": "false", **self.spark_conf})
            return self._spark

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

    def run(self, on_start: Callable[[ServerState, list[str]], None] | None = None) -> None:
        """Start every channel's loops and write heartbeats until stopped; then wait for the loops to end.
        `on_start(state, channels)` is told once every channel is this service's (another service running one
        raises first)."""
        self.loops = [ChannelLoops(self, n) for n in self.channels()]
        taken = []
        try:
            for lp in self.loops:
                lp.lock.acquire(lp.channel)
                taken.append(lp)
            if on_start is not None:
                on_start(self.store.load().state, [lp.channel for lp in self.loops])
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, self.on_signal)
            for lp in self.loops:
                for t in lp.threads:
                    t.start()
            threading.Thread(target=self._archive_logs, name="rpl_sql-log-archive", daemon=True).start()
            while not (self.stopping.is_set() or self.signalled):
                self._heartbeat()
                self.stopping.wait(HEARTBEAT)
            self.stop()
            faulthandler.dump_traceback_later(SLOW_STOP)
            for lp in self.loops:
                while lp.threads[0].is_alive():
                    lp.threads[0].join(HEARTBEAT)
                    lp.shut_unwanted_read()
            for lp in self.loops:
                for t in lp.threads:
                    t.join()
            self._heartbeat()
        finally:
            faulthandler.cancel_dump_traceback_later()
            for lp in taken:
                lp.lock.release()

    def _archive_logs(self) -> None:
        """Keep every table's log short while the service runs: it commits several times a second per table,
        and delta-rs lists the whole log at every commit. A round at start-up, then one a minute."""
        while not self.stopping.is_set():
            for table in deltalog.tables(self.warehouse):
                try:
                    archive.archive(table)
                except Exception:  # the next round tries again; nothing was lost
                    log.warning("archiving the log of %s failed", table, exc_info=True)
            self.stopping.wait(ARCHIVE_EVERY)

    def _heartbeat(self) -> None:
        for lp in self.loops:
            lp.shut_unwanted_read()
            self.publish(lp)

    def publish(self, lp: ChannelLoops) -> None:
        """Write a channel's status now (the heartbeat, and at once when a thread stops)."""
        with self.write_lock:
            lp.status.updated = time.time()
            service_status.write_status(self.warehouse, lp.status)


def service_logging() -> None:
    """Warnings on stderr (the service log), and the notes a DBA wants there: tables starting and ending a
    backfill (and where a copy resumes), or no longer replicated, as MySQL's error log notes them."""
    logging.basicConfig(level=logging.WARNING, format="rpl-sql replica: %(message)s")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: every thread's stack, as jstack
    for module in ("backfill", "table_copy"):
        logging.getLogger(f"rpl_sql.pipeline.replica.{module}").setLevel(logging.INFO)


def run_service(warehouse: str | os.PathLike | None = None, channels: list[str] | None = None, **kw) -> None:
    """`ReplicaService(warehouse, channels, **kw).run()`: blocks until SIGTERM/SIGINT."""
    ReplicaService(warehouse, channels, **kw).run()


_SQL_FIELDS = ("sql", "sql_state", "seconds_behind", "sql_version", "last_sql_error")


class _Child:
    """One SQL-thread process as its parent sees it."""

    ENDED = object()

    def __init__(self, proc, conn):
        self.proc, self.conn = proc, conn
        self.retiring = self.asked = False

    @classmethod
    def start(cls, ctx, loops: "ChannelLoops", successor: bool = False) -> "_Child":
        mine, theirs = ctx.Pipe()
        svc = loops.svc
        proc = ctx.Process(target=_sql_process, name=f"rpl-sql-sql-{loops.channel}", daemon=True,
                           args=(svc.warehouse, loops.channel, svc.settings(), theirs, successor))
        start_with_ctrl_c_blocked(proc)
        theirs.close()
        return cls(proc, mine)

    def ask_stop(self) -> None:
        if not self.asked:
            try:
                self.conn.send("stop")
            except OSError:
                pass
            self.asked = True

    def receive(self, timeout: float):
        """The child's next message, None when none came within `timeout`, ENDED once it has exited."""
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            pass
        else:
            if self.proc.is_alive():
                return None
        self.proc.join()
        return _Child.ENDED


class _ChildService(ReplicaService):
    """The service as the SQL-thread process sees it: its publish sends the SQL fields to the parent."""

    def __init__(self, warehouse: str, conn, **settings):
        super().__init__(warehouse, processes=False, **settings)
        self.conn, self.sent = conn, None  # (sent: the fields last sent to the parent)

    def publish(self, lp: ChannelLoops, changed_only: bool = False) -> None:
        with self.write_lock:
            fields = {k: getattr(lp.status, k) for k in _SQL_FIELDS}
            if not changed_only or fields != self.sent:
                self.conn.send(fields)
                self.sent = fields


def _sql_process(warehouse: str, channel: str, settings: dict, conn, successor: bool = False) -> None:
    """A channel's SQL thread as a process: runs until the parent says stop or goes away. A successor says
    `ready` once started and waits for its predecessor's lock (released after the batch it is applying)."""
    ignore_ctrl_c()
    die_with_parent()
    service_logging()
    limit = settings.pop("sql_thread_max_memory", None)
    if settings.get("master"):  # its SparkSession would start again with every replacement
        limit = None
    svc = _ChildService(warehouse, conn, **settings)
    lp = ChannelLoops(svc, channel)
    parent = os.getppid()

    def listen() -> None:  # the parent's stop, and this thread's heartbeat (what changed since it last said)
        asked = False
        while not svc.stopping.is_set():
            try:
                if conn.poll(HEARTBEAT) and conn.recv() == "stop":
                    break
                svc.publish(lp, changed_only=True)
                rss = rss_mb() if limit and not asked else None
                if rss is not None and rss > limit:
                    with svc.write_lock:
                        conn.send({"recycle": int(rss)})
                    asked = True
            except (EOFError, OSError):
                break
            if os.getppid() != parent:
                break
        svc.stop()

    conn.send({"ready": os.getpid()})
    # One SQL thread per channel, also across a SIGKILLed service's restart (its old child may still be dying)
    # and while a predecessor finishes its batch
    lock = ChannelLock(warehouse, channel, role="sql-thread", busy=ServiceError)
    deadline = time.monotonic() + (600 if successor else 10)
    while True:
        try:
            lock.acquire(channel)
            break
        except ServiceError:
            if time.monotonic() > deadline or os.getppid() != parent:
                raise
            time.sleep(0.05)
    threading.Thread(target=listen, daemon=True).start()
    try:
        if svc.master:
            spark_sql_thread(lp, STATE_EVERY)
        else:
            lp._applier()
    finally:
        lock.release()
        conn.close()
