"""`rpl-sql`: a shell shaped like `spark-sql` for replication statements (and Spark SQL when needed).

    rpl-sql [--warehouse DIR] [--start [--replicate-*=...] [--defaults-file my.cnf]]
            [-i init.sql] [-e "statements" | -f file.sql] [-S]
            [--export-sql [--no-stale-check]]
    rpl-sql ingest [--channel NAME] ...    (binlog sources -> Delta events)
    rpl-sql apply [--channel NAME] ...     (the applier: Delta events -> applied events)

Control-plane statements never start Spark. Errors print `ERROR <code> (<sqlstate>): <message>` on
stderr and make a non-interactive run exit 1. End a statement with `\\G` for vertical output.
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from typing import Iterable, TextIO

from .errors import MySQLError, StartupError
from .parser import parse_statement, split_statements, strip_vertical
from .session import Result, Session
from .startup import is_startup_option

PROMPT, CONTINUATION = "rpl-sql> ", "      -> "


# ---------------------------------------------------------------- rendering

def _cell(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(v)


def format_table(columns: Iterable[str], rows: Iterable[tuple]) -> str:
    """A MySQL-client style box table."""
    columns = list(columns)
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    return "\n".join([rule, line(columns), rule] + [line(r) for r in cells] + ([rule] if cells else []))


def format_vertical(columns: Iterable[str], rows: Iterable[tuple]) -> str:
    """`\\G` output: one `Column: value` line each, rows separated by star lines."""
    columns = list(columns)
    width = max((len(c) for c in columns), default=0)
    out = []
    for i, r in enumerate(rows, 1):
        out.append(f"{'*' * 27} {i}. row {'*' * 27}")
        out += [f"{c.rjust(width)}: {_cell(v)}" for c, v in zip(columns, r)]
    return "\n".join(out)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Shell:
    """Runs statement text against a Session and prints like the mysql / spark-sql clients."""

    def __init__(self, session: Session, out: TextIO = sys.stdout, err: TextIO = sys.stderr, silent: bool = False):
        self.session, self.out, self.err, self.silent = session, out, err, silent

    def run_script(self, text: str) -> bool:
        """Parse every statement first (a syntax error runs nothing), then run them; stop at the first error."""
        try:
            items = []
            for stmt_text, line in split_statements(text):
                items.append((parse_statement(strip_vertical(stmt_text), line), stmt_text.endswith("\\G")))
        except MySQLError as e:
            self.error(e)
            return False
        for stmt, vertical in items:
            if not self.run_statement(stmt, vertical):
                return False
        return True

    def run_statement(self, stmt, vertical: bool = False) -> bool:
        t0 = time.perf_counter()
        try:
            result = self.session.execute_statement(stmt)
            self.show(result, vertical, time.perf_counter() - t0)
            return True
        except MySQLError as e:
            self.error(e)
            return False
        except Exception as e:  # Spark's AnalysisException and friends: report, don't crash the shell
            self.err.write(f"Error: {type(e).__name__}: {e}\n")
            return False

    def show(self, r: Result, vertical: bool, elapsed: float) -> None:
        if r.dataframe is not None:
            rows = [tuple(row) for row in r.dataframe.collect()]
            columns = r.dataframe.columns
        else:
            rows, columns = r.rows, r.columns
        if columns:
            if rows:
                self.out.write((format_vertical if vertical else format_table)(columns, rows) + "\n")
            if not self.silent:
                self.err.write(f"{_plural(len(rows), 'row') if rows else 'Empty set'} in set ({elapsed:.2f} sec)\n")
        elif not self.silent:
            self.err.write(f"Query OK, 0 rows affected{', ' + _plural(len(r.warnings), 'warning') if r.warnings else ''}"
                           f" ({elapsed:.2f} sec)\n")
        for w in r.warnings:
            self.err.write(f"{w.level} (Code {w.code}): {w.message}\n")

    def error(self, e: MySQLError) -> None:
        self.err.write(f"ERROR {e.code} ({e.sqlstate}): {e.message}\n")

    def interactive(self) -> None:
        """A prompt; statements may span lines and end with `;` or `\\G`. `quit`, `exit` or EOF leave."""
        buf: list[str] = []
        while True:
            try:
                line = input(CONTINUATION if buf else PROMPT)
            except (EOFError, KeyboardInterrupt):
                self.out.write("\n")
                break
            if not buf and line.strip().rstrip(";").lower() in ("quit", "exit"):
                break
            buf.append(line)
            stripped = "\n".join(buf).rstrip()
            if stripped.endswith(";") or stripped.endswith("\\G"):
                self.run_script("\n".join(buf))
                buf = []


# ---------------------------------------------------------------- arguments

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rpl-sql", description="MySQL replication filters over a Delta warehouse.")
    p.add_argument("--warehouse", help="warehouse directory (default: $RPL_SQL_WAREHOUSE or ./rpl_warehouse)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("-e", dest="execute", metavar="SQL", help="statements to run")
    src.add_argument("-f", dest="file", metavar="FILE", help="script file to run")
    p.add_argument("-i", dest="init", metavar="FILE", action="append", default=[], help="init script run first")
    p.add_argument("-S", "--silent", action="store_true", help="print results only")
    p.add_argument("--start", action="store_true",
                   help="start (restart) the server first, with the --replicate-* options and option file")
    p.add_argument("--defaults-file", metavar="MY_CNF", help="option file whose [mysqld] section is read at --start")
    p.add_argument("--export-sql", action="store_true",
                   help="print a Spark SQL init script (views + functions) for spark-sql and SQL notebooks")
    p.add_argument("--no-stale-check", action="store_true",
                   help="with --export-sql: functions that do not check per query that the filters are unchanged")
    return p


def split_startup_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate `--replicate-*[=| ]value` and `--lower-case-table-names` from the shell's own arguments."""
    rest, startup = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and is_startup_option(a.split("=", 1)[0]):
            if "=" in a:
                startup.append(a)
            elif i + 1 < len(argv):
                startup.append(f"{a}={argv[i + 1]}")
                i += 1
            else:
                startup.append(a + "=")
            i += 1
            continue
        rest.append(a)
        i += 1
    return rest, startup


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ingest"]:
        from .ingest import main as ingest_main

        return ingest_main(argv[1:])
    if argv[:1] == ["apply"]:
        from .apply import main as apply_main

        return apply_main(argv[1:])
    rest, startup = split_startup_args(argv)
    args = build_parser().parse_args(rest)
    session = Session(args.warehouse, spark="auto")
    shell = Shell(session, silent=args.silent)
    if (startup or args.defaults_file) and not args.start:
        sys.stderr.write("rpl-sql: --replicate-* options and --defaults-file take effect at server start: "
                         "add --start\n")
        return 2
    if args.export_sql:
        from .export import export_sql
        sys.stdout.write(export_sql(session, stale_check=not args.no_stale_check))
        return 0
    if args.start:
        try:
            for w in session.start(startup, defaults_file=args.defaults_file):
                sys.stderr.write(f"[{w.level}] {w.message}\n")
        except StartupError as e:
            sys.stderr.write(f"[ERROR] {e.message}\n[ERROR] Aborting\n")
            return 1
    for path in args.init:
        if not shell.run_script(_read(path)):
            return 1
    if args.execute is not None:
        return 0 if shell.run_script(args.execute) else 1
    if args.file is not None:
        return 0 if shell.run_script(_read(args.file)) else 1
    if not sys.stdin.isatty():
        return 0 if shell.run_script(sys.stdin.read()) else 1
    shell.interactive()
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


if __name__ == "__main__":
    sys.exit(main())
