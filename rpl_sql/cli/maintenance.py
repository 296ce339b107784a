"""`rpl-sql repair` and `rpl-sql upkeep`: a warehouse's maintenance, run beside the service or from cron."""
from __future__ import annotations

import argparse
import os
import sys

from rpl_sql.cli.options import add_warehouse_option
from rpl_sql.storage.delta import log as deltalog
from rpl_sql.storage.replica_states import drop_unreplicated
from rpl_sql.storage.upkeep import GRACE_SECONDS, upkeep
from rpl_sql.errors import MySQLError, error_text
from rpl_sql.display.render import format_table
from rpl_sql.storage.store import resolve_warehouse


def _maintenance_parser(command) -> argparse.ArgumentParser:
    """The parser of a maintenance command (`rpl-sql repair`, `upkeep`): its docstring, --warehouse, --dry-run."""
    name = command.__name__.split("_")[0]
    p = argparse.ArgumentParser(prog=f"rpl-sql {name}", description=command.__doc__.split(": ", 1)[1])
    add_warehouse_option(p)
    p.add_argument("--dry-run", action="store_true", help="report, change nothing")
    return p


def _existing_warehouse(args: argparse.Namespace, command: str) -> str | None:
    warehouse = resolve_warehouse(args.warehouse)
    if not os.path.isdir(warehouse):
        sys.stderr.write(f"rpl-sql {command}: {warehouse} is not a directory\n")
        return None
    return warehouse


def repair_main(argv: list[str]) -> int:
    """`rpl-sql repair`: roll every damaged rpl_sql table of a warehouse back to its last good version."""
    args = _maintenance_parser(repair_main).parse_args(argv)
    warehouse = _existing_warehouse(args, "repair")
    if warehouse is None:
        return 1
    damaged = 0
    for table in deltalog.tables(warehouse):
        damage = deltalog.find_damage(table)
        if damage is None:
            continue
        damaged += 1
        if args.dry_run:
            print(f"{table}: version {damage.version} is damaged ({damage.reason})")
            continue
        moved = deltalog.repair(table)
        print(f"{table}: version {damage.version} was damaged ({damage.reason}); rolled back to version "
              f"{damage.version - 1}, moved {len(moved)} file(s) to {os.path.join(table, deltalog.QUARANTINE)}")
    if not damaged:
        print(f"{warehouse}: every table's log is sound")
    return 0


def upkeep_main(argv: list[str]) -> int:
    """`rpl-sql upkeep`: checkpoint every table, delete leftovers of killed processes, vacuum with --keep-days."""
    p = _maintenance_parser(upkeep_main)
    p.add_argument("--keep-days", type=float, metavar="N",
                   help="keep time travel for N days: delete older versions' data files and the archived commits "
                        "no reader needs (default: keep all); the filter history is kept whole")
    p.add_argument("--drop-unreplicated", action="store_true",
                   help="drop the replica tables the filters no longer apply (SHOW REPLICA TABLES: 'not "
                        "replicated'; their channels' SQL threads stopped); by default they are kept as they were")
    p.add_argument("--grace", type=float, default=GRACE_SECONDS, metavar="SECONDS",
                   help=f"leftovers younger than this are kept (a writer may be using them; default {GRACE_SECONDS})")
    args = p.parse_args(argv)
    warehouse = _existing_warehouse(args, "upkeep")
    if warehouse is None:
        return 1
    from rpl_sql.pipeline.retention import delta_encoded, needed_commits

    try:
        if args.drop_unreplicated:
            for channel, db, name in drop_unreplicated(warehouse, args.dry_run):
                print(f"{'would drop' if args.dry_run else 'dropped'} {db}.{name} of channel '{channel}' "
                      "(no longer replicated)")
        reports, spark_dirs = upkeep(warehouse, args.keep_days, args.dry_run, args.grace,
                                     retention=needed_commits(warehouse), delta_encoded=delta_encoded(warehouse))
    except MySQLError as e:
        sys.stderr.write(error_text(e))
        return 1
    rows = [(os.path.relpath(r.table, warehouse), r.data_files_before, r.data_files_after, r.log_files,
             r.archived, r.pruned, len(r.removed),
             "skipped: a writer committed first" if r.compaction_raced else f"{r.compacted[0]} -> {r.compacted[1]}",
             r.purged, r.vacuumed, r.checkpoint)
            for r in reports]
    print(format_table(("table", "data files before", "after", "log files", "archived", "pruned",
                        "leftovers removed", "compacted", "purged", "vacuumed", "checkpoint"), rows))
    if spark_dirs:
        print(f"{'would remove' if args.dry_run else 'removed'} {len(spark_dirs)} leftover(s) (Spark's scratch, "
              "dropped replica tables): "
              + ", ".join(spark_dirs))
    return 0
