"""`rpl-sql import-filters` and `rpl-sql export-filters`: filter configurations in and out of a warehouse.

    rpl-sql import-filters [--from FORMAT] [--channel C] [--apply] [--warehouse WH] FILE
    rpl-sql export-filters --to FORMAT [--channel C] [--warehouse WH] [-o FILE]

Import prints the CHANGE REPLICATION FILTER statements equivalent to FILE; with --apply it also runs them on
the warehouse as one commit (all or nothing). Export writes the warehouse's current filters in another
product's terms, or fails naming the rule that product cannot state exactly.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rpl_sql.cli.options import add_warehouse_option
from rpl_sql.configs import dms, mariadb, option_files
from rpl_sql.configs import debezium_lists as debezium
from rpl_sql.configs.model import channel_rules, from_state
from rpl_sql.configs.as_statements import write_statements
from rpl_sql.errors import MySQLError, StartupError, error_text
from rpl_sql.server.execute import named_or_default
from rpl_sql.server.startup import read_option_file
from rpl_sql.filters.state import channel_key

IMPORT_FORMATS = ("mysql-cnf", "mariadb-cnf", "sql", "dms")
EXPORT_FORMATS = ("mysql-cnf", "mariadb-sql", "dms", "debezium", "sql")


def guess_format(path: Path, text: str) -> str:
    """By content: JSON is a DMS mapping; `[section]` lines an option file (MariaDB's when a replicate option
    carries a `connection.` prefix); anything else statements."""
    if text.lstrip().startswith("{"):
        return "dms"
    lines = [ln.strip() for ln in text.splitlines()]
    if path.suffix in (".cnf", ".ini") or any(ln.startswith("[") and ln.endswith("]") for ln in lines):
        prefixed = any(option_files.is_mariadb_option(ln.split("=", 1)[0].strip()) and "." in ln.split("=", 1)[0]
                       for ln in lines if "=" in ln and not ln.startswith(("#", ";")))
        return "mariadb-cnf" if prefixed else "mysql-cnf"
    return "sql"


def _fail(e: Exception, name: str) -> int:
    if isinstance(e, MySQLError):
        sys.stderr.write(f"{name}: " + error_text(e))
    elif isinstance(e, StartupError):
        sys.stderr.write(f"{name}: [ERROR] {e}\n")
    else:
        sys.stderr.write(f"{name}: {e}\n")
    return 2


def import_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rpl-sql import-filters", description=__doc__.splitlines()[0])
    p.add_argument("file", metavar="FILE", help="an option file, a SQL script or a DMS table-mapping JSON")
    p.add_argument("--from", dest="fmt", choices=IMPORT_FORMATS, help="the file's format (default: guessed)")
    p.add_argument("--channel", help="the channel a DMS mapping is for (default: the global filters)")
    p.add_argument("--apply", action="store_true", help="run the statements on the warehouse (one commit)")
    add_warehouse_option(p)
    args = p.parse_args(argv)
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
        fmt = args.fmt or guess_format(path, text)
        if fmt == "mysql-cnf":
            config = option_files.read_mysql(read_option_file(path))
        elif fmt == "mariadb-cnf":
            config = option_files.read_mariadb(read_option_file(path, sections=option_files.MARIADB_SECTIONS,
                                                                keep=option_files.is_mariadb_option))
        elif fmt == "dms":
            config = dms.read(text, args.channel)
        else:
            config = mariadb.read_sql(text)
        statements = write_statements(config)
        sys.stdout.write(statements)
        if args.apply:
            from rpl_sql.session import Session

            version = Session(args.warehouse).execute_atomic(statements, "import-filters")
            sys.stderr.write(f"rpl-sql import-filters: applied as version {version}\n" if version is not None
                             else "rpl-sql import-filters: nothing changed\n")
    except (MySQLError, StartupError, OSError, UnicodeDecodeError) as e:
        return _fail(e, args.file)
    return 0


def export_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rpl-sql export-filters", description=__doc__.splitlines()[0])
    p.add_argument("--to", dest="fmt", choices=EXPORT_FORMATS, required=True, help="the target format")
    p.add_argument("--channel", help="the channel to export (dms, debezium: required with several channels)")
    add_warehouse_option(p)
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    args = p.parse_args(argv)
    from rpl_sql.storage.store import DeltaStore, resolve_warehouse

    try:
        state = DeltaStore(resolve_warehouse(args.warehouse)).load().state
        notes: list[str] = []
        if args.fmt == "mysql-cnf":
            out = option_files.write_mysql(from_state(state))
        elif args.fmt == "mariadb-sql":
            out = mariadb.write_sql(state)
        elif args.fmt == "sql":
            out = write_statements(from_state(state))
        else:
            name = named_or_default(state, None if args.channel is None else channel_key(args.channel))
            rules = channel_rules(state, name)
            if args.fmt == "dms":
                out, notes = dms.write(rules, state.lower_case_table_names, name)
            else:
                out = debezium.write(rules, state.lower_case_table_names, name)
        for n in notes:
            sys.stderr.write(f"rpl-sql export-filters: note: {n}\n")
        if args.output:
            Path(args.output).write_text(out, encoding="utf-8")
        else:
            sys.stdout.write(out)
    except (MySQLError, OSError) as e:
        return _fail(e, "rpl-sql export-filters")
    return 0
