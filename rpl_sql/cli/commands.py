"""The `rpl-sql` subcommands that run the pipeline: ingest, apply, debezium, replica, snapshot."""
from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys

from rpl_sql.server.applier_state import ApplyError
from rpl_sql.cli.options import DEFAULT_MASTER, add_spark_options, add_warehouse_option, spark_conf
from rpl_sql.errors import MySQLError, error_text
from rpl_sql.language.quoting import mysql_str, qualified
from rpl_sql.session import Session
from rpl_sql.pipeline.applier import apply
from rpl_sql.pipeline.applier.job import engine_for_master
from rpl_sql.pipeline.applier.tables_gate import TablesGate, finish_backfills
from rpl_sql.pipeline.replica.backfill import ChannelBackfills
from rpl_sql.pipeline.replica.service import (BATCH_SIZE, SLOW_STOP, SQL_THREAD_MAX_MEMORY, ReplicaService,
                                              ServiceError, service_logging)
from rpl_sql.pipeline.replica.service_memory import SERVICE_ALLOCATORS, set_service_allocators
from rpl_sql.pipeline.replica.snapshot import SourceSnapshot, SnapshotProgress
from rpl_sql.pipeline.applier.report import ApplyProgress
from rpl_sql.pipeline.binlog import ingest_channel
from rpl_sql.pipeline.debezium import ingest_debezium_file
from rpl_sql.source_server.connection import NET_TIMEOUT
from rpl_sql.pipeline.ingest_position import IngestError
from rpl_sql.pipeline.writer import IngestReport
from rpl_sql.display.progress import Progress as Display
from rpl_sql.display.progress import bar
from rpl_sql.spark.env import configured_master, local_spark
from rpl_sql.storage.store import DeltaStore, resolve_warehouse

log = logging.getLogger(__name__)


CLI_BATCH_SIZE = 1_000_000


def _print_progress(r: IngestReport, display=None) -> None:
    """A binlog has no known end: on a terminal one redrawn line with counts and rate, else a line each."""
    (display or Display()).show(f"[ingest {r.channel!r}]", f"{r.events_read} events read, {r.landed} landed, "
                                 f"{r.dropped} dropped, {r.commits} commits, {r.rate:,.0f} events/s, at "
                                 f"{r.end[0] if r.end else '?'}:{r.end[1] if r.end else '?'}")


def ingest_main(argv: list[str] | None = None) -> int:
    """`rpl-sql ingest [--channel NAME] [--warehouse DIR] [--max-events N] [--filter-at-source] [-q]`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ingest"]:
        argv = argv[1:]
    p = argparse.ArgumentParser(prog="rpl-sql ingest", description="Land channel binlogs in the events table.")
    p.add_argument("--channel", help="one channel (default: every configured channel)")
    add_warehouse_option(p)
    p.add_argument("--max-events", type=int, help="stop at the first transaction boundary after N events")
    p.add_argument("--filter-at-source", action="store_true", help="drop events the channel's filters ignore")
    p.add_argument("--batch-rows", type=int, default=20_000, help="rows per Delta commit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    args = p.parse_args(argv)
    warehouse = resolve_warehouse(args.warehouse)
    display = Display()
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


def apply_main(argv: list[str] | None = None) -> int:
    """`rpl-sql apply`: run the applier, print progress on stderr and the summary on stdout."""
    p = argparse.ArgumentParser(prog="rpl-sql apply",
                                description="Apply landed change events as each channel's replica SQL thread would.")
    add_warehouse_option(p)
    p.add_argument("--channel", action="append", help="channel to apply (repeatable; default: all configured)")
    p.add_argument("--batch-size", type=int, default=CLI_BATCH_SIZE,
                   help=f"events per batch, 0 = one batch per channel (default {CLI_BATCH_SIZE:,})")
    p.add_argument("--tables", action="store_true",
                   help="also keep the replica tables: each applied source table as a typed Delta table")
    p.add_argument("--exec-mode", choices=("STRICT", "IDEMPOTENT"), default="STRICT", type=str.upper,
                   help="replica_exec_mode for the replica tables (STRICT stops on errors 1032/1062)")
    p.add_argument("--engine", choices=("auto", "arrow", "spark"), default="auto",
                   help="who writes the applied events: pyarrow in this process (arrow), the Spark executors "
                        "(spark), or auto: arrow on a local master, spark on a cluster")
    p.add_argument("-S", "--silent", action="store_true", help="no progress lines")
    add_spark_options(p, f"Spark master URL, as spark-sql takes it ({DEFAULT_MASTER})")
    args = p.parse_args(argv)
    conf = spark_conf(p, args)
    engine = engine_for_master(configured_master(args.master, conf)) if args.engine == "auto" else args.engine

    def start_spark():
        return local_spark(app_name="rpl_sql-apply", master=args.master, verbose=args.verbose,
                           **{"spark.ui.showConsoleProgress": "false", **conf})

    display = Display()

    def show(pr: ApplyProgress) -> None:
        if not display.tty:
            display.show("", str(pr))
            return
        total = pr.events_done + pr.events_pending if pr.events_pending is not None else None
        display.show(f"[apply {pr.channel!r}] batch {pr.batch}", bar(pr.events_done, total, pr.rate, "events"))

    warehouse = resolve_warehouse(args.warehouse)
    backfills = ChannelBackfills(warehouse) if args.tables else None
    try:
        report = apply(start_spark, warehouse, args.channel, batch_size=args.batch_size or None,
                       progress=None if args.silent else show, tables=args.tables, exec_mode=args.exec_mode,
                       engine=engine, backfills=backfills)
        if backfills is not None:  # a filter change widened what a channel applies: its new tables filled
            finish_backfills(TablesGate(warehouse, args.exec_mode, backfills), list(backfills.made),
                             None if args.silent else lambda line: display.show("[backfill]", line))
    except MySQLError as e:
        display.close()
        sys.stderr.write(error_text(e))
        return 1
    except ApplyError as e:
        display.close()
        sys.stderr.write(f"ERROR: applier stopped: {e}\n")
        return 1
    display.close()
    sys.stdout.write(report.table() + "\n")
    return 0


def _rerun_with_allocator_setting(argv: list[str]) -> None:
    """Run this `rpl-sql replica` program again, same pid and arguments, with the service's allocator settings
    (`SERVICE_ALLOCATORS`): deltalake's allocator and pyarrow read them only when they load, which importing
    rpl_sql does. Not when the variables are set (by the user, or by this) or when called from Python rather
    than as the program."""
    if all(var in os.environ for var in SERVICE_ALLOCATORS) or sys.argv[1:] != ["replica", *argv]:
        return
    set_service_allocators()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def replica_main(argv: list[str] | None = None) -> int:
    """`rpl-sql replica`: run the replica service in the foreground until SIGTERM or Ctrl-C."""
    p = argparse.ArgumentParser(prog="rpl-sql replica",
                                description="Follow the channels' sources continuously: land, apply and keep the "
                                            "replica tables, obeying START/STOP REPLICA from any client.")
    add_warehouse_option(p)
    p.add_argument("--channel", action="append", help="channel to run (repeatable; default: all configured)")
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE,
                   help=f"events per applier batch at most (default {BATCH_SIZE:,})")
    p.add_argument("--exec-mode", choices=("STRICT", "IDEMPOTENT"), default="STRICT", type=str.upper,
                   help="replica_exec_mode for the replica tables (STRICT stops on errors 1032/1062)")
    p.add_argument("--copy-page-rows", type=int, default=200_000, metavar="N",
                   help="rows per source query when a filter change backfills a table (default 200,000; smaller "
                        "pages hold a busy source's resources for less time each)")
    p.add_argument("--net-timeout", type=float, default=NET_TIMEOUT, metavar="SECONDS",
                   help=f"seconds without a byte from a source (it sends a heartbeat every second) before the "
                        f"receiver reconnects, as replica_net_timeout (default {NET_TIMEOUT:.0f})")
    p.add_argument("--one-process", action="store_true",
                   help="run the SQL threads as threads of this process (default: a process per channel's SQL "
                        "thread, so receiving and applying use separate cores)")
    p.add_argument("--sql-thread-max-memory", metavar="MB", type=int, default=SQL_THREAD_MAX_MEMORY or 0,
                   help="replace a SQL-thread process whose resident memory passes this, at a batch boundary "
                        "(default 0: never)")
    add_spark_options(p, "Spark master: the SQL threads decide with the Spark job on this cluster (default: no "
                         "Spark, the reference evaluator in Python)")
    args = p.parse_args(argv)
    conf = spark_conf(p, args)
    if conf and not args.master:
        p.error("--conf is for Spark: give --master too")
    if args.batch_size < 1 or args.sql_thread_max_memory < 0 or not args.net_timeout >= 2:
        p.error("--batch-size wants 1 or more events, --sql-thread-max-memory 0 (never) or more MB, --net-timeout "
                "2 or more seconds (a source sends a heartbeat every second)")
    _rerun_with_allocator_setting(argv)
    service_logging()
    try:
        service = ReplicaService(args.warehouse, args.channel, batch_size=args.batch_size, exec_mode=args.exec_mode,
                                 processes=not args.one_process, master=args.master,
                                 spark_conf=conf, verbose=args.verbose,
                                 sql_thread_max_memory=args.sql_thread_max_memory or None,
                                 copy_page_rows=args.copy_page_rows, net_timeout=args.net_timeout)
        service.run(on_start=_say_running)
        faulthandler.dump_traceback_later(SLOW_STOP)  # and so may the interpreter's exit
    except MySQLError as e:
        sys.stderr.write(error_text(e))
        return 1
    except ServiceError as e:
        sys.stderr.write(f"rpl-sql replica: {e}\n")
        return 1
    sys.stderr.write("rpl-sql replica: stopped\n")
    return 0


def _say_running(state, names: list[str]) -> None:
    """What the service runs, once it is sure to: and which of those channels wait for START REPLICA."""
    sys.stderr.write(f"rpl-sql replica: running {', '.join(repr(n) for n in names)} (pid {os.getpid()}); SHOW "
                     "REPLICA STATUS shows them, Ctrl-C stops\n")
    for name in names:
        ch = state.channel(name)
        if ch is not None and not (ch.io_running or ch.sql_running):
            sys.stderr.write(f"rpl-sql replica: channel '{name}' is stopped; START REPLICA FOR CHANNEL '{name}' "
                             "(from any client) starts it here\n")


def resync_main(argv: list[str] | None = None) -> int:
    """`rpl-sql resync --channel C db.table ...`: RESYNC REPLICA TABLE, for scripts and cron."""
    p = argparse.ArgumentParser(prog="rpl-sql resync",
                                description="Ask the replica service to copy these replica tables from the source "
                                            "again while it runs (RESYNC REPLICA TABLE); SHOW REPLICA TABLES "
                                            "shows the copy.")
    add_warehouse_option(p)
    p.add_argument("--channel", required=True, help="the channel whose tables to copy again")
    p.add_argument("tables", nargs="+", metavar="DB.TABLE", help="replica tables, as SHOW REPLICA TABLES names them")
    args = p.parse_args(argv)
    names = []
    for t in args.tables:
        db, dot, name = t.partition(".")
        if not dot or not db or not name:
            p.error(f"{t!r}: give a table as DB.TABLE")
        names.append(qualified(db, name))
    try:
        Session(resolve_warehouse(args.warehouse)).execute(
            f"RESYNC REPLICA TABLE {', '.join(names)} FOR CHANNEL {mysql_str(args.channel)}")
    except MySQLError as e:
        sys.stderr.write(error_text(e))
        return 1
    print(f"channel {args.channel!r}: {len(names)} table(s) will be copied again by rpl-sql replica")
    return 0


def snapshot_main(argv: list[str] | None = None) -> int:
    """`rpl-sql snapshot --channel C`: provision a new channel's replica tables from its source's data."""
    p = argparse.ArgumentParser(prog="rpl-sql snapshot",
                                description="Copy the tables a channel's filters apply from its source, without a "
                                            "lock: keyed tables in pages between two binlog positions, others in "
                                            "one consistent read; the channel then streams from there (rpl-sql "
                                            "replica). Run it again to resume an interrupted copy.")
    add_warehouse_option(p)
    p.add_argument("--channel", required=True, help="the channel (stopped, with no events landed yet)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    args = p.parse_args(argv)
    display = Display()

    def show(pr: SnapshotProgress) -> None:
        display.show(f"[snapshot {args.channel!r}] table {pr.number}/{pr.tables} {pr.table}",
                     bar(pr.rows, pr.estimate, pr.rate, "rows"))

    try:
        report = SourceSnapshot(args.warehouse, args.channel, progress=None if args.quiet else show).run()
    except MySQLError as e:
        display.close()
        sys.stderr.write(error_text(e))
        return 1
    except Exception as e:  # the source's (pymysql) or Delta's
        display.close()
        sys.stderr.write(f"rpl-sql snapshot: {type(e).__name__}: {e}\n(run it again to resume: copied tables "
                         "and pages are kept)\n")
        return 1
    display.close()
    at = f"{report.start[0]}:{report.start[1]}" if report.start else "(no table copied)"
    sys.stdout.write(f"channel {report.channel!r}: {report.tables} tables copied ({report.rows:,} rows), "
                     f"{report.skipped} already copied, {len(report.databases)} databases, in "
                     f"{report.seconds:.1f}s; the channel streams from {at}: START REPLICA and rpl-sql replica\n")
    return 0


def debezium_main(argv: list[str] | None = None) -> int:
    """`rpl-sql debezium --channel NAME [--warehouse DIR] FILE...`: land Debezium JSON lines (`-` = stdin)."""
    p = argparse.ArgumentParser(prog="rpl-sql debezium",
                                description="Land Debezium MySQL connector records (JSON lines) in the events table.")
    p.add_argument("--channel", required=True, help="the channel the records belong to")
    add_warehouse_option(p)
    p.add_argument("--batch-rows", type=int, default=20_000, help="rows per Delta commit")
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON-lines files, one Debezium record per line")
    args = p.parse_args(argv)
    warehouse = resolve_warehouse(args.warehouse)
    try:
        r = ingest_debezium_file(warehouse, args.channel, args.files, batch_rows=args.batch_rows)
    except (OSError, IngestError) as e:
        sys.stderr.write(f"rpl-sql debezium: {e}\n")
        return 1
    sys.stdout.write(f"channel {r.channel!r}: {r.landed} events landed, {r.skipped} already landed, "
                     f"{r.events_read} records read in {r.seconds:.1f}s\n")
    return 0
