"""`rpl-sql`: a shell shaped like `spark-sql` for replication statements (and Spark SQL when needed).

    rpl-sql [--warehouse DIR] [--start [--replicate-*=...] [--defaults-file my.cnf]]
            [-i init.sql] [-e "statements" | -f file.sql] [-S]
            [--export-sql [--no-stale-check]]
    rpl-sql ingest [--channel NAME] ...    (binlog sources -> Delta events)
    rpl-sql debezium --channel NAME FILE... (Debezium JSON lines -> Delta events)
    rpl-sql apply [--channel NAME] ...     (the applier: Delta events -> applied events)
    rpl-sql repair [--dry-run]              (roll damaged tables back to their last good version)
    rpl-sql upkeep [--keep-days N]          (compaction, checkpoints, leftovers, retention)

Control-plane statements never start Spark. Errors print `ERROR <code> (<sqlstate>): <message>` on
stderr and make a non-interactive run exit 1. End a statement with `\\G` for vertical output.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import logging
import os
import re
import signal
import sys
import threading
import time
from typing import TextIO

from rpl_sql.cli.filter_files import export_main, import_main
from rpl_sql.cli.lint_command import lint_main
from rpl_sql.cli.options import DEFAULT_MASTER, add_spark_options, add_warehouse_option, spark_conf
from rpl_sql.errors import MySQLError, RplSqlError, SparkSQLError, StartupError, error_text
from rpl_sql.language.lexer import split_statements
from rpl_sql.cli.relay_command import relay_main
from rpl_sql.language.parser import check_utf8, parse_statement, strip_vertical
from rpl_sql.display.render import format_table, format_vertical
from rpl_sql.session import Result, Session, is_spark_error, quiet_spark_errors
from rpl_sql.spark import attach_when_needed
from rpl_sql.server.startup import is_startup_option
from rpl_sql.language.statements import OtherSQL

PROMPT, CONTINUATION = "rpl-sql> ", "      -> "


# ---------------------------------------------------------------- rendering

def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Shell:
    """Runs statement text against a Session and prints like the mysql / spark-sql clients."""

    def __init__(self, session: Session, out: TextIO = sys.stdout, err: TextIO = sys.stderr, silent: bool = False):
        self.session, self.out, self.err, self.silent = session, out, err, silent
        self.script_lines = False  # name the script line of a failing statement, as `mysql < file` does

    def run_script(self, text: str) -> bool:
        """Parse every statement first, Spark's with Spark's parser too (a syntax error runs nothing), then
        run them; stop at the first error."""
        try:
            check_utf8(text)
            items = []
            for stmt_text, line in split_statements(text):
                items.append((parse_statement(strip_vertical(stmt_text), line), stmt_text.endswith("\\G")))
            others = [s for s, _ in items if isinstance(s, OtherSQL)]
            if others and len(others) < len(items):
                self.session.check_spark_syntax(others)
        except (MySQLError, SparkSQLError) as e:
            self.error(e, getattr(e, "statement_line", None))
            return False
        for stmt, vertical in items:
            if not self.run_statement(stmt, vertical):
                return False
        return True

    def run_statement(self, stmt, vertical: bool = False) -> bool:
        t0 = time.perf_counter()
        with _Interruptible(self.session) as ctl:
            try:
                result = self.session.execute_statement(stmt)
                self.show(result, vertical, time.perf_counter() - t0)
                return True
            except (MySQLError, SparkSQLError) as e:
                if ctl.interrupted:
                    raise KeyboardInterrupt from None
                self.error(e, stmt.line)
                return False
            except Exception as e:
                if ctl.interrupted:
                    raise KeyboardInterrupt from None
                if not is_spark_error(e):  # a failure while Spark runs the query (collect)
                    raise
                self.error(SparkSQLError.from_spark(e), stmt.line)
                return False

    def show(self, r: Result, vertical: bool, elapsed: float) -> None:
        if r.dataframe is not None:
            with quiet_spark_errors():
                rows = [tuple(row) for row in r.dataframe.collect()]
            columns = r.dataframe.columns
        else:
            rows, columns = r.rows, r.columns
        if columns:
            if rows:
                self.out.write((format_vertical if vertical else format_table)(columns, rows) + "\n")
            if not self.silent:
                in_set = _plural(len(rows), 'row') + ' in set' if rows else 'Empty set'
                self.err.write(f"{in_set} ({elapsed:.2f} sec)\n")
        elif not self.silent:
            warned = ', ' + _plural(len(r.warnings), 'warning') if r.warnings else ''
            self.err.write(f"Query OK, 0 rows affected{warned}"
                           f" ({elapsed:.2f} sec)\n")
        for w in r.warnings:
            self.err.write(f"{w.level} (Code {w.code}): {w.message}\n")

    def error(self, e: MySQLError | SparkSQLError, line: int | None = None) -> None:
        self.err.write(error_text(e, line if self.script_lines else None))

    def command(self, word: str) -> str | None:
        """The shell's own commands, as the mysql client's: 'quit', 'clear' or 'help', or None."""
        w = word.strip().rstrip(";").strip().lower()
        if w in ("quit", "exit", "\\q"):
            return "quit"
        if w == "\\c":
            return "clear"
        if w in ("help", "\\h", "?", "\\?"):
            return "help"
        return None

    def interactive(self) -> None:
        """A prompt with line editing and history; statements may span lines and end with `;` or `\\G`.
        `\\c` (or Ctrl-C) drops the statement being typed, `\\q`, `quit`, `exit` or EOF leave."""
        history = _readline_history()
        buf: list[str] = []
        try:
            while True:
                try:
                    line = input(CONTINUATION if buf else PROMPT)
                except EOFError:
                    self.out.write("\n")
                    break
                except KeyboardInterrupt:  # as mysql: drop the current input, stay in the shell
                    self.out.write("^C\n")
                    buf = []
                    continue
                if history and _HISTIGNORE.search(line):
                    history.forget_last()
                tail = line.rstrip()
                cmd = self.command(line) if not buf else None
                if cmd is None and tail.endswith(("\\c", "\\q")):  # at the end of a line, as in mysql
                    cmd = "clear" if tail.endswith("\\c") else "quit"
                if cmd == "quit":
                    break
                if cmd == "clear":
                    buf = []
                    continue
                if cmd == "help":
                    self.out.write(HELP)
                    continue
                buf.append(line)
                stripped = "\n".join(buf).rstrip()
                if stripped.endswith(";") or stripped.endswith("\\G"):
                    try:
                        self.run_script("\n".join(buf))
                    except KeyboardInterrupt:
                        _cancel_spark(self.session)
                        self.err.write("^C -- query aborted\nERROR 1317 (70100): Query execution was interrupted\n")
                    buf = []
        finally:
            if history:
                history()


HELP = """rpl-sql: MySQL replication statements on a Delta warehouse, and Spark SQL.

  CHANGE REPLICATION FILTER ... [FOR CHANNEL 'ch'];    CHANGE REPLICATION SOURCE TO ... [FOR CHANNEL 'ch'];
  START | STOP REPLICA [IO_THREAD | SQL_THREAD] [FOR CHANNEL 'ch'];    RESET REPLICA [ALL] [FOR CHANNEL 'ch'];
  SHOW REPLICA STATUS [FOR CHANNEL 'ch'];    SHOW REPLICATION FILTER HISTORY [FOR CHANNEL 'ch'] [LIMIT n];
  SHOW WARNINGS;    any other statement runs in Spark SQL (start it with /*spark*/ to force that)

  End a statement with ; (table) or \\G (vertical).  \\c or Ctrl-C: drop the statement being typed.
  \\q, quit, exit or Ctrl-D: leave.  help, \\h, ?: this text.  History: ~/.rpl_sql_history.
"""


# the mysql client's default --histignore: a line that may hold a password is never kept
_HISTIGNORE = re.compile(r"IDENTIFIED|PASSWORD", re.IGNORECASE)


class _History:
    """readline's history of this shell, saved (mode 0600) to $RPL_SQL_HISTFILE or ~/.rpl_sql_history."""

    def __init__(self, readline, path: str):
        self.readline, self.path = readline, path

    def forget_last(self) -> None:
        n = self.readline.get_current_history_length()
        if n:
            self.readline.remove_history_item(n - 1)

    def __call__(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
            self.readline.write_history_file(self.path)
        except OSError:
            pass


def _readline_history() -> _History | None:
    """Line editing and a persistent history when readline exists."""
    try:
        import readline
    except ImportError:
        return None
    path = os.environ.get("RPL_SQL_HISTFILE") or os.path.join(os.path.expanduser("~"), ".rpl_sql_history")
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)
    return _History(readline, path)


class _Interruptible:
    """Ctrl-C during a statement that Spark runs cancels its jobs from another thread, and the statement ends
    as cancelled (KeyboardInterrupt, one line in the shell). pyspark's own handler calls the JVM from inside
    the interrupted JVM call, which failed with 'reentrant call' and Py4JNetworkError tracebacks."""

    active: "_Interruptible | None" = None  # the statement running now

    def __init__(self, session: Session):
        self.session, self.interrupted, self.saved = session, False, None

    def __enter__(self) -> "_Interruptible":
        if threading.current_thread() is threading.main_thread():
            self.saved = signal.signal(signal.SIGINT, self._handler)
            _Interruptible.active = self
        return self

    @classmethod
    def spark_started(cls) -> None:
        """pyspark puts its own Ctrl-C handler in place when its SparkContext starts: take it back."""
        if cls.active is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, cls.active._handler)

    def _handler(self, signum, frame) -> None:
        if _spark_context() is None:  # no Spark at work: the ordinary interrupt
            raise KeyboardInterrupt
        if not self.interrupted:
            self.interrupted = True
            threading.Thread(target=_cancel_spark, args=(self.session,), daemon=True).start()

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            signal.signal(signal.SIGINT, self.saved)
            _Interruptible.active = None


def _spark_context():
    """This process's running SparkContext (classic Spark), or None; never starts or imports Spark."""
    module = sys.modules.get("pyspark")
    return getattr(getattr(module, "SparkContext", None), "_active_spark_context", None)


def _cancel_spark(session: Session) -> None:
    """Cancel the Spark jobs a Ctrl-C interrupted (classic sessions only; also while the session attaches)."""
    try:
        sc = _spark_context()
        if sc is not None:
            sc.cancelAllJobs()
    except Exception:
        pass


# ---------------------------------------------------------------- arguments

SUBCOMMAND_HELP = """subcommands (rpl-sql COMMAND --help for each):
  replica         run the replica service: follow the channels' sources into replica tables
  snapshot        provision a channel's replica tables from a source that already holds data
  resync          have the running replica service copy chosen tables from the source again
  relay           beside a source: serve its replicas each only what its filters apply (WL#2387)
  ingest          land a source's binlog in the events table once (batch)
  debezium        land Debezium JSON lines in the events table (batch)
  apply           apply the landed events (and with --tables keep the replica tables), once
  lint            check an option file or script of filters before it is applied
  import-filters  read filters from MySQL/MariaDB option files, DMS table mappings, Debezium settings
  export-filters  write the filters in one of those formats
  upkeep          compaction, checkpoints, retention of old commits (run it from cron)
  repair          roll damaged tables back to their last good version"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rpl-sql", description="MySQL replication filters over a Delta warehouse.",
                                epilog=SUBCOMMAND_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_warehouse_option(p)
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
    add_spark_options(p, f"Spark master for statements that need Spark, as spark-sql takes it ({DEFAULT_MASTER})")
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
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                startup.append(f"{a}={argv[i + 1]}")
                i += 1
            else:  # no value: refused at start, as mysqld refuses it
                startup.append(a)
            i += 1
            continue
        rest.append(a)
        i += 1
    return rest, startup



SUBCOMMANDS = ("ingest", "debezium", "apply", "replica", "snapshot", "resync", "relay", "repair", "upkeep", "lint",
               "import-filters", "export-filters")


PIPELINE_COMMANDS = ("ingest", "debezium", "apply", "replica", "snapshot", "relay")  # these read binlogs
INGEST_EXTRA = ("pymysql", "pymysqlreplication")


def _subcommand(name: str):
    if name in PIPELINE_COMMANDS and any(importlib.util.find_spec(m) is None for m in INGEST_EXTRA):
        def missing(_argv) -> int:
            sys.stderr.write(f"rpl-sql {name} needs the ingest extra (pymysql and mysql-replication, which read "
                             "MySQL/MariaDB binlogs): pip install 'rpl_sql[ingest]'\n")
            return 2
        return missing
    if name in ("repair", "upkeep"):
        from rpl_sql.cli import maintenance  # Delta upkeep and pyarrow: not loaded for a statement

        return maintenance.repair_main if name == "repair" else maintenance.upkeep_main
    if name == "lint":
        return lint_main
    if name == "relay":
        return relay_main
    if name in ("import-filters", "export-filters"):
        return import_main if name == "import-filters" else export_main
    from rpl_sql.cli import commands  # the pipeline and sqlglot: not loaded for a control-plane statement

    return getattr(commands, f"{name}_main")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv[0])(argv[1:])
    rest, startup = split_startup_args(argv)
    parser = build_parser()
    args = parser.parse_args(rest)
    conf = spark_conf(parser, args)
    if not args.verbose:  # a delta-rs panic is reported as one error line, not a Rust backtrace
        os.environ["RUST_BACKTRACE"] = "0"
    try:
        session = Session(args.warehouse, spark=True, attach=attach_when_needed)
    except MySQLError as e:
        sys.stderr.write(error_text(e))
        return 1

    def start_spark():
        from rpl_sql.spark.env import local_spark

        spark = local_spark(master=args.master, verbose=args.verbose, **conf)
        _Interruptible.spark_started()
        return spark

    session.spark_factory = start_spark
    shell = Shell(session, silent=args.silent)
    if (startup or args.defaults_file) and not args.start:
        sys.stderr.write("rpl-sql: --replicate-* options and --defaults-file take effect at server start: "
                         "add --start\n")
        return 2
    if not args.verbose:  # py4j logs the connection a cancelled job's call loses; the shell says it once
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    try:
        return _run(args, session, shell, startup)
    except MySQLError as e:  # the warehouse itself failed (damaged, unreadable): one line, as for a statement
        shell.error(e)
        return 1
    except KeyboardInterrupt:  # Ctrl-C in a script (-e, -f, a pipe): its Spark jobs cancelled, one line
        _cancel_spark(session)
        sys.stderr.write("^C\nERROR 1317 (70100): Query execution was interrupted\n")
        return 1


def _run(args: argparse.Namespace, session: Session, shell: Shell, startup: list[str]) -> int:
    if args.export_sql:
        from rpl_sql.spark.export import export_sql  # the compiler: only for the export

        sys.stdout.write(export_sql(session, stale_check=not args.no_stale_check))
        return 0
    if args.start:
        try:
            for w in session.start(startup, defaults_file=args.defaults_file):
                sys.stderr.write(f"[{w.level}] {w.message}\n")
        except StartupError as e:
            sys.stderr.write(f"[ERROR] {e.message}\n[ERROR] Aborting\n")
            return 1
    try:
        scripts = [_read(path) for path in args.init] + ([_read(args.file)] if args.file is not None else [])
        piped = args.file is None and args.execute is None and sys.stdin is not None and not sys.stdin.isatty()
        if piped:
            stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig", errors="surrogateescape")
            try:
                scripts.append(_read_text(stdin))
            finally:
                stdin.detach()
    except OSError as e:
        sys.stderr.write(f"rpl-sql: cannot read {e.filename}: {e.strerror}\n")
        return 1
    except ScriptError as e:
        sys.stderr.write(f"{e}\n")
        return 1
    shell.script_lines = True
    for text in scripts[:len(args.init)]:
        if not shell.run_script(text):
            return 1
    if args.execute is not None:
        shell.script_lines = False
        return 0 if shell.run_script(args.execute) else 1
    if args.file is not None:
        return 0 if shell.run_script(scripts[-1]) else 1
    if piped:
        return 0 if shell.run_script(scripts[-1]) else 1
    shell.script_lines = False
    shell.interactive()
    return 0


class ScriptError(RplSqlError):
    """A script the shell will not run (as the mysql client, which reads no NUL outside --binary-mode)."""


NUL_MESSAGE = ("ERROR: ASCII '\\0' appeared in the statement, but this is not allowed unless option --binary-mode "
               "is enabled and mysql is run in non-interactive mode. Set --binary-mode to 1 if ASCII '\\0' is "
               "expected.")


def _read(path: str) -> str:
    """A script's text, read in chunks up to its first NUL (`-f /dev/zero` ends at once); a UTF-8 byte-order
    mark at its start is dropped, as the mysql client does. Bytes that are not UTF-8 are kept as surrogates,
    which the parser refuses (1300)."""
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        return _read_text(f)


def _read_text(f) -> str:
    parts = []
    while chunk := f.read(1 << 20):
        if "\0" in chunk:
            raise ScriptError(NUL_MESSAGE)
        parts.append(chunk)
    return "".join(parts)


if __name__ == "__main__":
    sys.exit(main())
