"""The applier job: what a MySQL replica's SQL thread does, done in Spark over the Delta events table.

Per channel and batch: decide each distinct shape once (from the ingest commits' summaries, by the reference
evaluator; in a pass over the events, by the compiled SQL, checked against the evaluator), write the applied
events in one Delta commit (app transaction `rpl_sql.apply/<channel>` = the batch's last seq, its bookkeeping
in the commit metadata), then one state commit with COUNTER, the applier position and the executed GTIDs. A
crash between the two commits is completed from the metadata on the next run. Design:
docs/design/README.md#rpl_sqlpipelineapplier.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait as futures_wait
from dataclasses import replace
from typing import Any, Callable, Iterable

from rpl_sql.server.applier_state import ApplyError, BatchRecord
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta.log import latest_version
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.applier.arrow_write import ReadAhead
from rpl_sql.pipeline.applier.batch_files import BatchFiles
from rpl_sql.pipeline.applier.batch_shapes import aggregate, collector_paused, decide_batch, summarized_shapes
from rpl_sql.pipeline.applier.commits import BatchCommits
from rpl_sql.pipeline.applier.landed import summarized
from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.applier.report import ApplyReport, ChannelReport, ApplyProgress, timed
from rpl_sql.pipeline.applier.tables_gate import NO_TABLES, TablesGate
from rpl_sql.pipeline.applier.shapes import batch_record, not_running, with_shape_key
from rpl_sql.pipeline.events import applied_path, events_path
from rpl_sql.pipeline.summary import ROLLUP, SHAPES, Summary
from rpl_sql.pipeline.source_filter import settle_source_filtering, source_filtered
from rpl_sql.pipeline.ingest_position import META, SourceFilterConflictError, channel_commits
from rpl_sql.filters.rules import FilterType
from rpl_sql.spark import deltaread
from rpl_sql.spark.deltaread import DeltaFile
from rpl_sql.spark.env import configured_master, local_spark
from rpl_sql.spark.functions import FunctionInstaller
from rpl_sql.filters.state import Channel, ServerState, channel_key, is_gr_channel
from rpl_sql.storage.store import DeltaStore, resolve_warehouse

log = logging.getLogger(__name__)

ENGINES = ("auto", "arrow", "spark")  # who writes the applied events: pyarrow in the driver, or Spark

# ---------------------------------------------------------------- the job

_SUMMARIES = (META + SHAPES, META + ROLLUP + SHAPES)  # the ingest commits' encoded shapes: long text


class _LogOnce:
    """The run's events table, whose log (channel_commits reads it in growing windows, newest first) is read
    once for all the channels, each commit once (each read decodes the commit's metadata, summaries included:
    reading every window afresh read a third of the commits twice). A local table is opened by delta-rs at the
    version its log's listing names (`opened`) while `prefetch` reads that log back from the same version."""

    def __init__(self, path: str, version: int | None, opened: Future):
        self._opened = opened
        self._at = archive.local_root(path) if version is not None else None  # where the log is read, if local
        self._version = self.table.version() if version is None else version
        self._read: list = []   # the newest commits, newest first
        self._all = False       # `_read` reaches the log's start

    @property
    def table(self):
        return self._opened.result()

    def version(self) -> int:
        return self._version

    def prefetch(self, step: int = 8) -> None:
        """Read the log back, `step` commits at a time, for as long as delta-rs is still opening the table (it
        lets the GIL go): the first channel's window costs nothing then, and a commit read too many only the
        wait for the open."""
        while self._at is not None and not self._opened.done() and not self._all:
            self.history(len(self._read) + step)

    def history(self, limit: int | None = None) -> list:
        if not self._all and (limit is None or len(self._read) < limit):
            more = archive.history(self._at or self.table, None if limit is None else limit - len(self._read),
                                   below=self._read[-1]["version"] if self._read else None, sliced=_SUMMARIES,
                                   version=self._version)
            self._read += more
            self._all = limit is None or len(self._read) < limit
        return self._read[:limit]


class _WriteStage:
    """Batches written and committed behind the driver, in hand-over order: a batch's files written on a thread
    of their own while the driver decides the next batch or channel (the JVM or pyarrow writes while Python
    decides), its two commits made on another once the batch before is committed, so the next batch's write
    need not wait for them (each switch between channels left a core idle for the commits: 0.05 s twice in
    bench/bench_apply.py's run). A failure surfaces at the next hand-over, and nothing after it is committed: a
    batch whose write, or a batch before's commits, failed is not committed. The write sets only the session's
    Parquet output settings, which nothing the driver does meanwhile reads."""

    def __init__(self):
        self._pools: list[ThreadPoolExecutor] = []
        self._write: Future | None = None   # the last batch's write
        self._commit: Future | None = None  # the last batch's commits (each batch's wait for the one's before)

    def busy(self) -> bool:
        return self._commit is not None

    def submit(self, write: Callable[[], Any], commit: Callable[[Any], None]) -> None:
        """`write()` once the batch before is written, then `commit(what it returned)` once the batch before is
        committed; raising instead the first error of the batches before, if one failed."""
        if self._write is not None:
            futures_wait([self._write])
            if self._write.exception() is not None or (self._commit.done() and self._commit.exception()):
                self.wait()
        if not self._pools:
            self._pools = [ThreadPoolExecutor(1, thread_name_prefix=f"rpl_sql-apply-{n}") for n in ("write", "commit")]
        before, written = self._commit, self._pools[0].submit(write)

        def committed() -> None:
            if before is not None:
                before.result()
            commit(written.result())
        self._write, self._commit = written, self._pools[1].submit(committed)

    def wait(self) -> None:
        """Until every batch handed over is written and committed; the first error, if one failed."""
        commit, self._write, self._commit = self._commit, None, None
        if commit is not None:
            commit.result()

    def close(self) -> None:
        """Wait for the batches in flight (their commits are as good as any), then end the threads."""
        try:
            self.wait()
        finally:
            for pool in self._pools:
                pool.shutdown()


class _Applier:
    """One applier run: per channel, batches of events decided in Spark, then the two commits (BatchCommits).

    About 260 lines: the batch loop and the writes it orders (`batch_files`', then the two commits on a write
    stage that overlaps the next batch's deciding) share the run's snapshot, session, installed functions and
    write stage; finding and deciding the shapes is `batch_shapes`, the replica tables `tables_gate`.
    """

    def __init__(self, spark, warehouse: str, batch_size: int | None, progress: Callable[[ApplyProgress], None] | None,
                 verify: str, tables: TablesGate | None = None, engine: str = "auto"):
        if batch_size is not None and batch_size <= 0:
            raise ValueError("batch_size must be positive")
        if verify not in ("auto", "all", "none"):
            raise ValueError("verify must be 'auto', 'all' or 'none'")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}")
        self.engine = engine_for(spark) if engine == "auto" else engine
        self.spark = spark
        self.warehouse = warehouse
        self.store = DeltaStore(warehouse)
        self.batch_size = batch_size
        self.progress, self.verify = progress, verify
        self.events = events_path(warehouse)
        self.applied = applied_path(warehouse)
        self.commits = BatchCommits(self.store, self.applied)
        self.files = BatchFiles(self.applied, self.engine, self._ensure_spark)
        self._config_key = None
        self._installer: FunctionInstaller | None = None
        self._commits: dict[str, list[tuple[int, dict]]] = {}  # per channel: its ingest commits this run
        self._rollups: dict[str, list[Summary]] = {}  # per channel: the ingest rollups among them (shape ids)
        self.tables = tables or NO_TABLES
        self.behind = _WriteStage()

    # ------------------------------------------------------------ channels

    def targets(self, state: ServerState, channels: Iterable[str] | None) -> tuple[list[str], bool]:
        """The channels to run and whether they were named (named ones must exist and run: checked first)."""
        if channels is None:
            return [c.name for c in state.configured_channels()], False
        names = []
        for raw in channels:
            name = channel_key(raw)
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

    # ------------------------------------------------------------ Spark side

    def _ensure_spark(self):
        if self.spark is None:
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
        def rules(c: Channel) -> tuple:
            return tuple(s.values for s in c.filters.slots)

        mine = rules(state.channel(channel))
        same = tuple(c for c in state.channels if rules(c) == mine)
        key = (state.matching, mine, tuple(c.name for c in same))
        if key != self._config_key:
            if self._installer is None or self._installer.spark is not self.spark:
                self._installer = FunctionInstaller(self.spark, applier=True)
            with timed("compile + register functions", "*"):
                self._installer.install(replace(state, channels=same))
            self._config_key = key

    def run_channel(self, channel: str, report: ChannelReport, events_table) -> None:
        """Apply the channel's events landed up to `events_table`'s version (the run's DeltaTable of them)."""
        version = events_table.version()
        snap = deltaread.snapshot(self.events, version, {"channel": [channel]}, table=events_table.table)
        stats_max = [f.max_values.get("seq") for f in snap.files]
        known_max = max(stats_max) if snap.files and all(m is not None for m in stats_max) else None
        t0 = time.perf_counter()
        state = self.store.load().state
        if not snap.files or (known_max is not None and known_max <= state.channel(channel).applier.seq):
            report.status = "up to date" if snap.files else "no events"
            return
        @functools.cache
        def events():  # a DataFrame only when Spark reads the events: a pass, or the spark engine's write
            from pyspark.sql import functions as F

            return deltaread.read_snapshot(self._ensure_spark(), snap).withColumn("channel", F.lit(channel))

        after = state.channel(channel).applier.seq
        # one batch takes every file after `after`: read ahead while the log and the shapes are read
        ahead = None if self.batch_size else self.files.read_ahead(snap.files, after, None, not self.behind.busy())
        early = [ahead] if ahead is not None else []
        try:
            # the log's commits are read once a run, for the summaries and the source-filtered ranges
            rollups: list = []  # a rollup after `version` still sums up its commits, which are before it
            self._commits[channel] = [(v, m) for v, m in channel_commits(events_table.table, channel, after,
                                      history=events_table.history, rollups=rollups) if v <= version]
            landed = summarized(self._commits[channel], after, rollups)
            self._rollups[channel] = list(landed.rollups)
            counts = [0, 0]  # batches and events done, by the batches' completions
            pos = None  # after the last batch handed to the write stage (the state's position lags behind it)

            def completed(rec: BatchRecord) -> None:  # on the write stage, after the batch's two commits (and gate)
                counts[0] += 1
                counts[1] += rec.events
                report.batches += 1
                report.add(rec)
                report.status = "applied"
                report.seconds = time.perf_counter() - t0
                if self.progress is not None:
                    pending = None if known_max is None else max(0, known_max - rec.end)
                    self.progress(ApplyProgress(channel, counts[0], rec.end, counts[1], pending, report.seconds))

            while True:
                state = self.store.load().state
                ch = state.channel(channel)
                if ch is None or not ch.configured or not ch.sql_running:
                    self.behind.wait()
                    report.status, report.note = "stopped", "SQL thread stopped during the run"
                    break
                if ch.skip_counter > 0 and self.behind.busy():
                    self.behind.wait()  # the skip batch reads the state those commits leave
                    continue
                pos = ch.applier.seq if pos is None or ch.skip_counter > 0 else pos
                if landed.done(pos):
                    break
                if ch.skip_counter > 0:  # sql_replica_skip_counter: the same skip batch as the service's
                    rec = LocalApplier(self.warehouse, store=self.store).run_batch(channel)
                    if rec is None:
                        break
                    self.tables.materialize(channel)  # the catalog moves past the skipped events (the gate did not run)
                    completed(rec)
                    pos = rec.end
                    continue  # the events after the skipped ones, in this run
                else:
                    commits = landed.batch(pos, self.batch_size)
                    rec = self.batch(events, snap.files, state, ch, pos, version, landed.covered(commits), completed,
                                     early.pop() if early else None)
                if rec is None:
                    break
                pos = rec.end
                if self.batch_size is None and (not commits or landed.complete):
                    break  # else the summaries ended before the events did: the pass takes the rest
        finally:
            for ahead in early:  # not taken by a batch (which closes it when it does not hand it over)
                ahead.close()

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

    def batch(self, events: Callable[[], Any], files: tuple[DeltaFile, ...], state: ServerState, ch: Channel, lo: int,
              version: int, commits: tuple[Summary, ...] = (), completed: Callable[[BatchRecord], None] | None = None,
              ahead: ReadAhead | None = None) -> BatchRecord | None:
        """Decide one batch after seq `lo` (the events of `commits`, decided from their summaries, or without
        any, of a pass over the events: `events()`, the channel's as a DataFrame; `files`, their Delta files)
        and hand its write and two commits, then `completed`, to the write stage; its record, or None when there
        is nothing after `lo`. `ahead`: the read-ahead of its files if started already."""
        if commits:
            hi = commits[-1].last_seq
        else:
            with timed("batch end", ch.name):
                hi = self._batch_end(events(), lo)
        ahead = ahead or self.files.read_ahead(files, lo, hi, idle=not self.behind.busy())
        rec = None
        try:
            rec = self._decide_and_hand_over(events, files, state, ch, lo, hi, version, commits, completed, ahead)
        finally:
            if rec is None and ahead is not None:  # not handed over (nothing to apply, or an error): the write
                ahead.close()                       # that closes it will not run
        return rec

    def _decide_and_hand_over(self, events, files, state, ch, lo, hi, version, commits, completed, ahead):
        """`batch` with its end `hi` found and the arrow engine's read-ahead started (None: none)."""
        @functools.cache
        def ev():
            from pyspark.sql import functions as F

            out = events().where(F.col("seq") > lo)
            return with_shape_key(out if hi is None else out.where(F.col("seq") <= hi))
        # The pass decides each shape with the compiled functions in the query that finds it (the compiled
        # functions implement MySQL's semantics only); the summaries' shapes are decided by the evaluator.
        sql = state.filter_mode == "mysql" and not commits
        if sql:
            self._functions(state, ch.name)
        if commits:
            log.debug("channel '%s': seqs %d..%d from %d commit summaries", ch.name, lo + 1, hi, len(commits))
        with timed("shapes + verdicts + gtids" if sql else "shapes + gtids", ch.name), collector_paused():
            shapes, gtids, (last_file, last_pos) = (summarized_shapes(commits) if commits
                                                    else aggregate(ev(), ch, sql))
        if not len(shapes):
            return None
        total, first, last = shapes.span()
        if first != lo + 1 or last - lo != total:
            raise ApplyError(f"events {lo + 1}..{last} are not gapless ({total} events, first seq {first}): "
                             f"ingest must write seq 1, 2, 3, ... per channel", ch.name)
        bad = shapes.unknown()
        if bad is not None:
            raise ApplyError(f"seq {bad.min_seq}: unknown {bad.describe()}", ch.name)
        with timed(f"{'hits' if sql else 'decide'} of {len(shapes)} shapes", ch.name), collector_paused():
            decide_batch(state, ch, shapes, sql, self.verify)
        dropped, settled, settled_rules = self._settle_source_filtering(state, ch, lo, last)

        rec = batch_record(ch, shapes.tallies(), settled, settled_rules, channel=ch.name, start=lo, end=last,
                           events=total, gtids=str(gtids), last_file=last_file, last_pos=last_pos,
                           events_version=version, source_dropped=dropped)

        applied = shapes.applied()
        with timed("verdicts", ch.name):
            found = self.files.verdicts(applied, self._rollups.get(ch.name, ()), rec)

        def write() -> list:
            with timed("write", ch.name):
                return self.files.write(rec, files, applied, found, ahead, ev)

        def commit(actions: list) -> None:
            with timed("commit applied", ch.name):
                self.commits.commit_applied(rec, actions)
            self.tables.gate(rec)
            with timed("commit state", ch.name):
                self.commits.commit_state(rec)
            if completed is not None:
                completed(rec)
        self.behind.submit(write, commit)
        return rec

    def _settle_source_filtering(self, state: ServerState, ch: Channel, lo: int, hi: int
                                 ) -> tuple[int, dict[FilterType, int], dict[FilterType, dict]]:
        """Events the ingest dropped at the source in (lo, hi]: re-decided with the filters in force now.

        Returns (events dropped, their COUNTER hits, their per-rule hits), which go into this batch's record:
        counted once, with the batch. Raises ApplyError, before any commit, when the current filters would apply
        a dropped event.
        """
        batches = source_filtered(self.warehouse, ch.name, after_seq=lo, through_seq=hi,
                                  commits=self._commits.get(ch.name))
        if not batches:
            return 0, {}, {}
        try:
            _, hits, rules = settle_source_filtering(state, ch.name, batches)
        except SourceFilterConflictError as e:
            raise ApplyError(str(e), ch.name) from None
        return sum(n for b in batches for n in b.dropped.values()), hits, rules


def engine_for(spark) -> str:
    """The engine `auto` means for `spark` (a session; a factory or None start local_spark's master)."""
    if spark is None or callable(spark) and not hasattr(spark, "conf"):
        return engine_for_master(configured_master())
    try:
        return engine_for_master(spark.conf.get("spark.master", None))
    except Exception:  # Spark Connect may refuse to show it: a remote server is a cluster to us
        return engine_for_master(None)


def engine_for_master(master: str | None) -> str:
    """'arrow' on a local master; 'spark' on a cluster (or an unknown master), where the executors write."""
    return "arrow" if master is not None and master.startswith("local") else "spark"


def apply(spark, warehouse: str | os.PathLike | None = None, channels: Iterable[str] | None = None, *,
          batch_size: int | None = None, progress: Callable[[ApplyProgress], None] | None = None,
          verify: str = "auto", tables: bool = False, exec_mode: str = "STRICT", engine: str = "auto",
          backfills: Callable[[str], Any] | None = None) -> ApplyReport:
    """Run the applier over the events landed so far (the events table as of the start of the run).

    `spark`: a SparkSession, a function returning one, or None to start a local one (either only if some
    channel has events to apply).
    `channels`: names to run (each must exist, be configured and have its SQL thread running, else MySQL's
    error); None = every configured channel, skipping those whose SQL thread is stopped.
    `batch_size`: events per batch (extended to the end of the last transaction, or where the ingest commits
    carry summaries, of the last commit); None = one batch per channel (two where the summaries stop short
    of the last event).
    `progress`: called with a `ApplyProgress` after each batch. `verify`: 'auto' | 'all' | 'none' -- how many of the
    shapes the compiled SQL decided (events without summaries) the reference evaluator re-checks. `tables`:
    also keep the replica tables (`pipeline.replica`) after each batch, with `exec_mode` 'STRICT' (MySQL's
    errors 1032/1062 stop) or 'IDEMPOTENT'. `engine`: who writes the applied events -- 'arrow' (pyarrow in
    this process: no Spark at all for events the ingest summarised), 'spark' (the session's executors), or
    'auto': 'arrow' on a local master, 'spark' on a cluster. `backfills`: channel -> its `backfill.Backfills`
    (default: workers left running on what a filter change newly applies; the next run finishes them).
    Half-done batches of a crashed run are completed first.
    """
    from deltalake.exceptions import TableNotFoundError

    t0 = time.perf_counter()
    warehouse = resolve_warehouse(warehouse)
    gate = TablesGate(warehouse, exec_mode, backfills) if tables else None
    job = _Applier(spark, warehouse, batch_size, progress, verify, gate, engine)
    # the events table opened (delta-rs' log replay lets the GIL go) while recovery reads the state and the
    # log is read back, both at the version the log's listing names
    version = latest_version(job.events) if archive.local_root(job.events) else None
    opener = ThreadPoolExecutor(1, thread_name_prefix="rpl_sql-apply-open")
    opened = opener.submit(archive.open_table, job.events, version)
    opener.shutdown(wait=False)
    state = job.store.load().state
    names, named = job.targets(state, channels)
    reports = {n: ChannelReport(n) for n in names}
    for n in names:  # recovery is bookkeeping of work already done: it runs whether or not the thread runs
        reports[n].start_seq = reports[n].end_seq = state.channel(n).applier.seq
        job.commits.recover(n, reports[n], gate=job.tables.gate)
        job.tables.materialize(n)
    state = job.store.load().state
    if named:
        for n in names:
            if not state.channel(n).sql_running:
                raise not_running(n)
    try:
        events_table = _LogOnce(job.events, version, opened)
        events_table.prefetch()
        opened.result()  # a table gone since the listing: no events, as one never made
    except TableNotFoundError:
        events_table = None
    try:
        for n in names:
            rep = reports[n]
            ch = state.channel(n)
            if not ch.sql_running:
                rep.status, rep.note = "not running", "START REPLICA SQL_THREAD to apply"
                continue
            if events_table is None:
                rep.status = "no events"
                continue
            job.run_channel(n, rep, events_table)
    finally:
        job.behind.close()
    return ApplyReport(list(reports.values()), time.perf_counter() - t0)


