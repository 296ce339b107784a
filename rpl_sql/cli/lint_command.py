"""`rpl-sql lint`: check a filter script or an option file before it is applied.

    rpl-sql lint [--warehouse WH] [--lower-case-table-names N] FILE [FILE ...]

A SQL script (CHANGE REPLICATION FILTER / SOURCE, MariaDB's SET GLOBAL replicate_*, ...) is run on a copy of
the warehouse's state in memory (an empty one without --warehouse); an option file ([mysqld] replicate-*,
with `channel:` prefixes) is applied as a server start would apply it. Nothing is committed. Prints each
warning of rpl_sql.filters.lint (with --warehouse also the rules that would match none of the landed events) and
exits 1 when there are warnings, 2 on an error in the input, 0 when the rules are clean.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from rpl_sql.cli.options import add_warehouse_option
from rpl_sql.storage import landed_shapes
from rpl_sql.filters import lint
from rpl_sql.server import execute as server
from rpl_sql.errors import MySQLError, StartupError, error_text
from rpl_sql.language.parser import parse
from rpl_sql.server.startup import parse_startup, read_option_file
from rpl_sql.filters.state import Channel, ServerState, initial_state
from rpl_sql.language.statements import (ChangeReplicationFilter, ChangeReplicationSource, ResetReplica, SetSkipCounter,
                                StartReplica, StopReplica)

# what a script's statements can change; the rest (SHOW ..., EXPLAIN ..., Spark SQL) is passed over
_CHANGES = (ChangeReplicationFilter, ChangeReplicationSource, ResetReplica, StartReplica, StopReplica,
            SetSkipCounter)

LINT_HOST = "(lint)"  # the source host of channels a script names before creating them


def _is_option_file(path: Path, text: str) -> bool:
    return path.suffix in (".cnf", ".ini") or any(line.strip().startswith("[") and line.strip().endswith("]")
                                                  for line in text.splitlines())


def _ensure_channel(state: ServerState, name: str | None) -> ServerState:
    """A channel a filter statement names exists, configured: the script lints its rules, not its order."""
    if name is None or state.channel(name) is not None:
        return state
    return state.with_channel(Channel(name, options=(("SOURCE_HOST", LINT_HOST),)))


def apply_script(state: ServerState, text: str) -> ServerState:
    """The state after the script's replication statements (Spark SQL in it is passed over)."""
    now = time.time_ns() // 1000
    for stmt in server.script_statements(parse(text)):
        if isinstance(stmt, ChangeReplicationFilter):
            state = _ensure_channel(state, stmt.channel)
        if isinstance(stmt, _CHANGES):
            state = server.execute(state, stmt, now).state
    return state


def apply_option_file(state: ServerState, path: Path, lctn: int | None) -> ServerState:
    options = parse_startup([], read_option_file(path), lctn)
    for rule in options.rules:
        state = _ensure_channel(state, rule.channel)
    return server.start(state, options, time.time_ns() // 1000).state


def lint_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rpl-sql lint", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", metavar="FILE", help="a SQL script or a my.cnf-style option file")
    add_warehouse_option(p, help="start from this warehouse's state, and count the rules' hits over its "
                                       "landed events (default: an empty state, no hits)")
    p.add_argument("--lower-case-table-names", type=int, choices=(0, 1, 2), default=None)
    args = p.parse_args(argv)
    if args.warehouse:
        from rpl_sql.storage.store import DeltaStore

        state = DeltaStore(args.warehouse).load().state
    else:
        state = initial_state()
    if args.lower_case_table_names is not None:
        state = replace(state, lower_case_table_names=args.lower_case_table_names)
    for name in args.files:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
            if _is_option_file(path, text):
                state = apply_option_file(state, path, args.lower_case_table_names)
            else:
                state = apply_script(state, text)
        except (OSError, UnicodeDecodeError) as e:
            sys.stderr.write(f"rpl-sql lint: {name}: {e}\n")
            return 2
        except MySQLError as e:
            sys.stderr.write(f"{name}: " + error_text(e))
            return 2
        except StartupError as e:
            sys.stderr.write(f"{name}: [ERROR] {e}\n")
            return 2
    hits = events = None
    if args.warehouse:
        hits, events = landed_shapes.rule_hits(state, landed_shapes.shapes(args.warehouse))
    warnings = lint.lint_state(state, None, hits, events)
    for w in warnings:
        where = "global filters" if w.channel is None else f"channel '{w.channel}'"
        sys.stdout.write(f"{w.code} {where}: {w.filter} {w.rule}: {w.why}. Fix: {w.fix}.\n")
    sys.stderr.write(f"rpl-sql lint: {len(warnings)} warning{'s' if len(warnings) != 1 else ''}\n")
    return 1 if warnings else 0
