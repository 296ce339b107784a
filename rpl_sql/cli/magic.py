"""IPython/Jupyter magic: replication statements and Spark SQL in one cell.

    %load_ext rpl_sql
    %%rpl_sql [--warehouse DIR] [--max-rows N]
    CHANGE REPLICATION FILTER REPLICATE_DO_DB = (sales) FOR CHANNEL 'ch1';
    SELECT * FROM replication_applier_filters;

    df = %rpl_sql SELECT count_if(should_apply(channel, db, tbl)) FROM events

Statements run one by one through `Session.run` in the notebook's active SparkSession; every result but the
last is displayed, the last is the cell's value. A MySQL error fails the cell after the statements before it
committed, as the mysql client stops a script. Details: docs/design/README.md#rpl_sqlclimagic.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from rpl_sql.errors import MySQLError, SparkSQLError, error_text
from rpl_sql.spark.env import WorkerPythonError, hide_console_progress, local_spark
from rpl_sql.session import Session, quiet_spark_errors
from rpl_sql.spark.surface import attach, register
from rpl_sql.storage.store import resolve_warehouse

DEFAULT_MAX_ROWS = 1000
_OPTION = re.compile(r"""\s*--(warehouse|max-rows)(?:\s*=\s*|\s+)("[^"]*"|'[^']*'|\S+)""")


class StatementError(MySQLError):
    """A MySQL error that stopped a cell; IPython shows just `ERROR code (sqlstate): message`."""

    def _render_traceback_(self) -> list[str]:
        return error_text(self).splitlines()


class SparkStatementError(SparkSQLError):
    """A Spark error that stopped a cell, shown in one line without the JVM stack."""

    def _render_traceback_(self) -> list[str]:
        return error_text(self).splitlines()


def split_options(line: str) -> tuple[dict[str, str], str]:
    """Leading `--warehouse DIR` / `--max-rows N` options (quotes allowed), and the rest of the line."""
    opts: dict[str, str] = {}
    while True:
        m = _OPTION.match(line)
        if not m:
            return opts, line
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        opts[m.group(1)] = value
        line = line[m.end():]


def _notebook_spark() -> Any:
    """The local SparkSession a cell starts when the notebook has none: no console progress bar, which Spark
    draws into the cell's output."""
    return local_spark(**{"spark.ui.showConsoleProgress": "false"})


def _active_spark() -> Any:
    """The notebook's active SparkSession (classic or Spark Connect), or None."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    spark = SparkSession.getActiveSession()
    if spark is None and "pyspark.sql.connect.session" in sys.modules:  # a remote session needs its client
        try:
            from pyspark.sql.connect.session import SparkSession as RemoteSession

            spark = RemoteSession.getActiveSession()
        except Exception:  # Connect client dependencies missing
            spark = None
    return spark


@magics_class
class RplSqlMagics(Magics):
    """`%rpl_sql` / `%%rpl_sql`; one Session per warehouse, kept for the kernel's life."""

    def __init__(self, shell: Any):
        super().__init__(shell)
        self._sessions: dict[str, Any] = {}
        self._versions: dict[str, int | None] = {}  # Delta version the views were last built from
        self._current: str | None = None

    @no_var_expand  # SQL text is not a template: `$x` and `{x}` are data (e.g. 'a$b'), not Python variables
    @line_cell_magic
    def rpl_sql(self, line: str, cell: str | None = None):
        opts, rest = split_options(line)
        if cell is None:
            text = rest
        else:
            if rest.strip():
                raise UsageError(f"%%rpl_sql: unexpected arguments {rest.strip()!r} "
                                 "(options: --warehouse DIR, --max-rows N)")
            text = cell
        try:
            max_rows = int(opts.get("max-rows", DEFAULT_MAX_ROWS))
        except ValueError:
            raise UsageError(f"%rpl_sql: --max-rows wants a number, got {opts['max-rows']!r}") from None
        if not text.strip():
            return None
        try:
            session = self.session(opts.get("warehouse"))
        except WorkerPythonError as e:
            raise UsageError(f"%rpl_sql: {e}") from None
        try:
            return self._run(session, text, max_rows)
        finally:
            self._versions[session.warehouse] = session.store.version()

    # ------------------------------------------------------------ sessions

    def session(self, warehouse: str | None = None):
        """The Session of `warehouse` (resolved like the CLI), registered in the active SparkSession. Without
        --warehouse a cell uses the warehouse the cells before it used: the option sticks for the kernel."""
        key = os.path.abspath(resolve_warehouse(warehouse)) if warehouse or self._current is None else \
            self._current
        spark = _active_spark()
        session = self._sessions.get(key)
        bound = None if session is None else session._spark
        if session is None or (spark is not None and bound not in (None, "auto") and bound is not spark):
            # first use, or the notebook replaced its SparkSession: start over with a fresh Session
            session = Session(key, spark=spark if spark is not None else True, attach=attach)
            session.spark_factory = _notebook_spark
            if spark is not None:
                hide_console_progress(spark)
                register(spark, session=session)
            self._sessions[key] = session
            self._versions[key] = session.store.version()
        elif session.surface is not None and (key != self._current
                                              or session.store.version() != self._versions.get(key)):
            session.refresh()  # another warehouse owned the views, or another process committed
        self._current = key
        return session

    # ------------------------------------------------------------ running and showing

    def _run(self, session: Any, text: str, max_rows: int):
        from IPython.display import display

        pending = None  # (result, frame, truncated) of the latest statement, shown once the next one ran
        try:
            for result in session.run(text):
                frame = _frame(result, max_rows)  # collect now: later statements change views and state
                if pending is not None:
                    _show(display, *pending, max_rows)
                pending = (result, *frame)
        except MySQLError as e:
            if pending is not None:
                _show(display, *pending, max_rows)
            err = StatementError(e.code, e.sqlstate, e.name, e.message)
            err.hint = e.hint
            raise err from None
        except SparkSQLError as e:
            if pending is not None:
                _show(display, *pending, max_rows)
            raise SparkStatementError(e.message, e.error_class, e.sqlstate) from None
        except BaseException:
            if pending is not None:
                _show(display, *pending, max_rows)
            raise
        if pending is None:
            return None
        result, frame, truncated = pending
        _messages(result, frame, truncated, max_rows)
        return frame


def _frame(result: Any, max_rows: int) -> tuple[Any, bool]:
    """(pandas DataFrame or None, truncated) of one result: Spark rows via toPandas, limited to max_rows."""
    import pandas as pd

    if result.dataframe is not None:
        df = result.dataframe
        if not df.columns:
            return None, False
        with quiet_spark_errors():
            frame = df.limit(max_rows + 1).toPandas()
    elif result.columns:
        frame = pd.DataFrame([tuple(r) for r in result.rows[:max_rows + 1]], columns=list(result.columns))
    else:
        return None, False
    if len(frame) > max_rows:
        return frame.iloc[:max_rows], True
    return frame, False


def _messages(result: Any, frame: Any, truncated: bool, max_rows: int) -> None:
    """Status line of a statement without rows, the truncation note, and warnings."""
    if frame is None:
        if result.dataframe is None:
            n = len(result.warnings)
            warn = f", {n} warning{'s' if n != 1 else ''}" if n else ""
            version = f" (Delta version {result.version})" if result.version is not None else ""
            print(f"Query OK, 0 rows affected{warn}{version}")
        else:
            print("OK")
    elif truncated:
        print(f"(showing the first {max_rows} rows)")
    for w in result.warnings:
        code = f" (Code {w.code})" if w.code is not None else ""
        print(f"{w.level}{code}: {w.message}", file=sys.stderr)


def _show(display: Any, result: Any, frame: Any, truncated: bool, max_rows: int) -> None:
    if frame is not None:
        display(frame)
    _messages(result, frame, truncated, max_rows)


def load_ipython_extension(ip: Any) -> None:
    """`%load_ext rpl_sql`."""
    ip.register_magics(RplSqlMagics)
