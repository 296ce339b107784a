"""A client session of one replica server (a warehouse): text in, one Delta commit per statement out.

>>> import rpl_sql, tempfile
>>> s = rpl_sql.connect(tempfile.mkdtemp())
>>> _ = s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h1' FOR CHANNEL 'ch1'")
>>> _ = s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'ch1'")
>>> [r[:4] for r in s.filters()]
[('ch1', 'REPLICATE_DO_DB', 'db1', 'CHANGE_REPLICATION_FILTER_FOR_CHANNEL')]
"""
from __future__ import annotations

import contextlib
import getpass
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

from rpl_sql.server import performance_schema as pfs
from rpl_sql.storage import credentials
from rpl_sql.server import impact
from rpl_sql.storage import landed_shapes
from rpl_sql.filters import lint
from rpl_sql.server import execute as server
from rpl_sql.storage import service_status
from rpl_sql.source_server.table_changes import table_change_rows
from rpl_sql.server.gtid_set import GtidSet
from rpl_sql.server.applier_state import applier_status, executed_gtids
from rpl_sql.errors import MySQLError, SparkRequiredError, SparkSQLError, MySQLWarning
from rpl_sql.filters.evaluate import Decision, Event
from rpl_sql.language.lexer import redact
from rpl_sql.language.quoting import ident
from rpl_sql.language.parser import check_utf8, parse
from rpl_sql.server.startup import StartupOptions, parse_startup, read_option_file
from rpl_sql.filters.state import ServerState
from rpl_sql.language.statements import (
    ChangeReplicationSource, ExplainChangeReplicationFilter, OtherSQL, SetDefaultConnection, SetReplicationVariable,
    ShowReplicaTables, ShowReplicationFilterHistory, ShowReplicationFilterWarnings, ShowVariables, ShowWarnings,
    Statement, StopReplica, WaitForGtidSet,
)
from rpl_sql.storage.store import DeltaStore, resolve_warehouse

log = logging.getLogger(__name__)

WARNING_COLUMNS = ("Level", "Code", "Message")
HISTORY_COLUMNS = ("VERSION", "COMMITTED_AT", "CHANNEL_NAME", "FILTER_NAME", "FILTER_RULE", "PREVIOUS_RULE",
                   "CONFIGURED_BY", "OPERATION", "STATEMENT")


def now_micros() -> int:
    return time.time_ns() // 1000


@dataclass
class Result:
    """What one statement returned: rows for SHOW-like statements, warnings, and the Delta version written."""

    statement: Statement
    columns: tuple[str, ...] = ()
    rows: list[tuple] = field(default_factory=list)
    warnings: tuple[MySQLWarning, ...] = ()
    version: int | None = None  # the Delta commit of this statement; None if nothing changed
    dataframe: Any = None  # Spark DataFrame for ordinary SQL queries

    @property
    def has_rows(self) -> bool:
        return bool(self.columns)


class Session:
    """One client of a replica server whose state lives in Delta tables under `warehouse`.

    Control-plane statements never start Spark. Ordinary SQL needs a SparkSession: pass `spark`, or
    `spark=True` with an `attach` (what rpl_sql.connect(warehouse, spark=True) gives) to start a local one the
    first time a statement needs it. Without either, such a statement raises SparkRequiredError and nothing
    starts.

    About 350 lines: a statement's path (parse, a pure handler or Spark, one commit) and what a session keeps
    between statements (store, Spark side, diagnostics) are one object; other handlers are SESSION_HANDLERS.
    """

    def __init__(self, warehouse: str | os.PathLike | None = None, *, spark: Any = None,
                 clock: Callable[[], int] = now_micros, attach: Callable[["Session"], None] | None = None):
        """`attach(session)` gives a session opened with spark=True its Spark side when a statement first needs
        it (rpl_sql.connect passes the Spark layer's; that layer sits above this one, so it is handed down)."""
        self.warehouse = resolve_warehouse(warehouse)
        check_utf8(self.warehouse)  # delta-rs takes UTF-8 paths only: 1300, not a UnicodeEncodeError later
        if os.path.exists(self.warehouse) and not os.path.isdir(self.warehouse):
            raise MySQLError.of("ER_CANT_READ_DIR", self.warehouse, 20, "Not a directory")
        self.store = DeltaStore(self.warehouse)
        self._spark = "auto" if spark is True else spark
        self._clock = clock
        self._diagnostics: list[tuple] = []  # what SHOW WARNINGS lists: the previous statement's
        self.default_connection = ""  # MariaDB's @@default_master_connection: a session setting
        self._on_change: list[Callable[[ServerState], None]] = []
        self.surface = None  # the SparkSurface, once registered in a SparkSession
        self.spark_factory: Callable[[], Any] | None = None  # how spark="auto" starts one (default: local_spark)
        self._attach = attach

    # ------------------------------------------------------------ state

    @property
    def state(self) -> ServerState:
        """The current committed state (read fresh from Delta)."""
        return self.store.load().state

    def refresh(self) -> ServerState:
        """Re-read the state (another process may have committed) and rebuild the Spark views/functions."""
        state = self.state
        for cb in self._on_change:
            cb(state)
        return state

    def on_change(self, callback: Callable[[ServerState], None]) -> None:
        """Call `callback(state)` after every commit this session makes (the Spark surface refreshes)."""
        self._on_change.append(callback)

    def _changed(self, version: int | None) -> None:
        if version is not None and self._on_change:
            state = self.state
            for cb in self._on_change:
                cb(state)

    def _metadata(self, operation: str, text: str) -> dict[str, str]:
        try:
            user = getpass.getuser()
        except Exception:  # no passwd entry in some containers
            user = ""
        return {"operation": operation, "statement": redact(text), "user": user}

    # ------------------------------------------------------------ statements

    def execute(self, text: str) -> list[Result]:
        """Run a script; every statement is parsed before any runs, and it stops at the first error."""
        return list(self.run(text))

    def execute_atomic(self, text: str, operation: str) -> int | None:
        """Run a script of state-changing statements as one commit: all of them, or (on an error) none.

        Returns the new version, or None when the script changed nothing."""
        stmts = parse(text)
        if any(isinstance(s, (OtherSQL, ShowWarnings)) for s in stmts):
            raise MySQLError.of("ER_WRONG_ARGUMENTS", f"{operation} (replication statements only)")
        now = self._clock()

        def step(state: ServerState):
            secrets: dict[str, str | None] = {}
            for stmt in stmts:
                out = server.execute(state, stmt, now, self._applier_status(state))
                state = out.state
                secrets.update(out.credentials)
            return state, secrets

        secrets, version = self.store.transact(step, self._metadata(operation, text))
        credentials.save(self.warehouse, secrets)
        self._changed(version)
        return version

    def run(self, text: str) -> Iterator[Result]:
        """Like `execute`, yielding each result as its statement completes.

        A syntax error anywhere, rpl_sql's (MySQLError 1064) or Spark's (SparkSQLError), runs nothing. Errors
        found while running stop the script there; the statements before it have committed.
        """
        stmts = parse(text)
        if any(isinstance(s, OtherSQL) for s in stmts) and not all(isinstance(s, OtherSQL) for s in stmts):
            self.check_spark_syntax([s for s in stmts if isinstance(s, OtherSQL)])
        for stmt in stmts:
            yield self.execute_statement(stmt)

    def execute_statement(self, stmt: Statement) -> Result:
        """Run one parsed statement; MySQL errors and Spark's become MySQLError and SparkSQLError."""
        if isinstance(stmt, ShowWarnings):
            rows = self._diagnostics[:stmt.limit] if stmt.limit is not None else list(self._diagnostics)
            return Result(stmt, WARNING_COLUMNS, rows)
        try:
            result = self._execute(stmt)
        except MySQLError as e:
            self._diagnostics = [("Error", e.code, e.message)]
            raise
        except SparkSQLError as e:
            self._diagnostics = [("Error", None, e.message)]
            raise
        self._diagnostics = [(w.level, w.code, w.message) for w in result.warnings]
        return result

    def wait_for_executed_gtid_set(self, gtids: str, timeout: float | None = None) -> int:
        """MySQL's WAIT_FOR_EXECUTED_GTID_SET: 0 once every transaction of `gtids` is executed, that is in the
        replica tables (a read after it sees them), or 1 when `timeout` seconds passed first (None: no limit)."""
        want = GtidSet.parse(gtids)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while not executed_gtids(self.state).issuperset(want):
            if deadline is not None and time.monotonic() >= deadline:
                return 1
            time.sleep(0.05)
        return 0

    def _execute(self, stmt: Statement) -> Result:
        if isinstance(stmt, SetReplicationVariable):  # MariaDB's SET GLOBAL replicate_*: a filter change
            stmt = server.variable_filter(stmt, self.default_connection)
        handler = next((SESSION_HANDLERS[t] for t in type(stmt).__mro__ if t in SESSION_HANDLERS),
                       Session._server_statement)
        return handler(self, stmt)

    def _wait_statement(self, stmt: WaitForGtidSet) -> Result:
        timed_out = self.wait_for_executed_gtid_set(stmt.gtids, stmt.timeout)
        value = -1 if timed_out and stmt.function == "MASTER_GTID_WAIT" else timed_out
        return Result(stmt, (stmt.text.strip()[len("SELECT"):].strip(),), [(value,)])

    def _set_default_connection(self, stmt: SetDefaultConnection) -> Result:
        self.default_connection = stmt.connection
        return Result(stmt)

    def _show_variables(self, stmt: ShowVariables) -> Result:
        rows = server.variable_rows(self.state, self.default_connection, stmt.like)
        return Result(stmt, server.VARIABLE_COLUMNS, rows)

    def _server_statement(self, stmt: Statement) -> Result:
        """A statement of the server layer: read-only on a past version (AS OF), else one commit of its new state."""
        if isinstance(stmt, ChangeReplicationSource) and "://" in self.warehouse and \
                any(k == server.SECRET_OPTION for k, _ in stmt.options):
            err = MySQLError.of("ER_WRONG_ARGUMENTS", "CHANGE REPLICATION SOURCE (SOURCE_PASSWORD)")
            err.hint = ("a warehouse on object storage keeps no password file: leave SOURCE_PASSWORD out and set "
                        f"{credentials.env_name(stmt.channel or '')} in the replica service's environment")
            raise err
        if getattr(stmt, "as_of", None) is not None:  # read-only, on the state of a past version
            res = server.execute(self.store.load_as_of(stmt.as_of).state, stmt, self._clock()).result
            return Result(stmt, res.columns, list(res.rows), (), None)
        now = self._clock()

        def step(state: ServerState):
            out = server.execute(state, stmt, now, self._applier_status(state))
            return out.state, out

        outcome, version = self.store.transact(step, self._metadata(type(stmt).__name__, stmt.text))
        credentials.save(self.warehouse, dict(outcome.credentials))
        self._changed(version)
        if isinstance(stmt, StopReplica) and version is not None:
            self._wait_stopped(outcome.state, stmt, version)
        res = outcome.result
        return Result(stmt, res.columns if res else (), list(res.rows) if res else [], outcome.warnings, version)

    def sql(self, text: str):
        """Run a script mixing replication statements and Spark SQL; return the last statement's DataFrame.

        Replication statements that return rows (SHOW ...) come back as DataFrames too; the others as an
        empty DataFrame. Views and functions reflect each statement before the next one runs.
        """
        spark = self.spark
        last = None
        for result in self.run(text):
            last = result
        if last is None:
            return None
        if last.dataframe is not None:
            return last.dataframe
        return result_frame(spark, last)

    def _wait_stopped(self, state: ServerState, stmt: StopReplica, version: int, timeout: float = 60.0) -> None:
        """As MySQL's STOP REPLICA does: return once a running service has stopped the threads (it finishes the
        batch it is in), so a CHANGE REPLICATION FILTER that follows never meets a batch still being decided."""
        threads = stmt.threads or frozenset({"IO", "SQL"})
        names = [stmt.channel] if stmt.channel is not None else [c.name for c in state.configured_channels()]
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                st = service_status.read_status(self.warehouse, name)
                if st is None or not st.live():
                    break
                sql_done = st.sql == "No" and st.sql_version >= version
                io_done = st.io == "No" and st.io_version >= version
                if ("SQL" not in threads or sql_done) and ("IO" not in threads or io_done):
                    break
                if time.monotonic() > deadline:
                    log.warning("channel %r: the replica service has not stopped after %.0f s", name, timeout)
                    return
                time.sleep(0.05)

    def _applier_status(self, state: ServerState) -> dict | None:
        """The applier's positions and executed GTIDs per channel, and what a replica service reports,
        shown by SHOW REPLICA STATUS."""
        out = applier_status(state)
        for ch in state.configured_channels():
            seen = service_status.shown(service_status.read_status(self.warehouse, ch.name), ch.io_running,
                                        ch.sql_running, ch.reset_at)
            if seen:
                out[ch.name] = {**out.get(ch.name, {}), **seen}
        return out

    def _lint(self, stmt: ShowReplicationFilterWarnings) -> Result:
        """The lint of the current rules, with each rule's hits over the channels' landed events."""
        state = self.state
        if stmt.channel is not None and state.channel(stmt.channel) is None:
            raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.channel)
        hits, events = landed_shapes.rule_hits(state, self._landed_shapes(self.warehouse))
        rows = [w.row() for w in lint.lint_state(state, stmt.channel, hits, events)]
        return Result(stmt, lint.WARNING_COLUMNS, rows)

    def _impact(self, stmt: ExplainChangeReplicationFilter) -> Result:
        """The landed events a filter change would flip, decided per shape now and after; nothing committed."""
        state = self.state
        after = impact.proposed(state, stmt.change, self._clock())
        names = [stmt.change.channel] if stmt.change.channel is not None else \
            [c.name for c in after.configured_channels()]
        if self.surface is not None:  # one Spark job, the compiled functions of both states deciding
            rows = self.surface.impact(self.warehouse, state, after, names, stmt.last, stmt.since)
        else:
            rows = impact.impact(state, after, landed_shapes.shapes(self.warehouse, names, stmt.last, stmt.since),
                                 names)
        tables, warnings = table_change_rows(self.warehouse, state, after, names)
        return Result(stmt, impact.IMPACT_COLUMNS, rows + tables, tuple(warnings))

    def _landed_shapes(self, *args):
        """The landed events' shapes: counted by a Spark job once the session has Spark, else with Arrow here
        (the lint's RPL008 hits)."""
        return (self.surface.landed_shapes if self.surface is not None else landed_shapes.shapes)(*args)

    def _spark_sql(self, stmt: OtherSQL) -> Result:
        spark = self.spark
        if self.surface is not None and self.surface.replica is not None:
            self.surface.replica.sync()  # replica tables created since the last statement appear by name
        try:
            with quiet_spark_errors():
                df = spark.sql(stmt.text)
        except Exception as e:
            if not is_spark_error(e):
                raise
            raise SparkSQLError.from_spark(e) from None
        return Result(stmt, tuple(df.columns), [], (), None, df)

    def check_spark_syntax(self, stmts: list[OtherSQL]) -> None:
        """Parse Spark's statements with Spark's parser, running nothing (not possible over Spark Connect)."""
        spark = self.spark
        jsession = getattr(spark, "_jsparkSession", None)
        if jsession is None:
            return
        parser = jsession.sessionState().sqlParser()
        for stmt in stmts:
            try:
                with quiet_spark_errors():
                    parser.parsePlan(stmt.text)
            except Exception as e:
                from pyspark.errors.exceptions.captured import convert_exception

                java = getattr(e, "java_exception", None)
                raise SparkSQLError.from_spark(convert_exception(java) if java is not None else e) from None

    @property
    def spark(self):
        """The SparkSession; with spark=True/"auto", started on first use; else SparkRequiredError."""
        if self._spark is None:
            raise SparkRequiredError(
                "this statement is Spark SQL and the session has no Spark: open it with "
                "rpl_sql.connect(warehouse, spark=True) to start a local Spark when needed, pass a SparkSession, "
                "or use rpl_sql.register(spark, warehouse)", "RPL_SQL_NO_SPARK")
        if self._spark == "auto":
            if self._attach is None:
                raise SparkRequiredError(
                    "this statement is Spark SQL and the session was opened without a way to start Spark: open it "
                    "with rpl_sql.connect(warehouse, spark=True), or use rpl_sql.register(spark, warehouse)",
                    "RPL_SQL_NO_SPARK")
            try:
                self._attach(self)
            except ImportError as e:
                if not (e.name or "").startswith(("pyspark", "py4j")):
                    raise
                raise SparkRequiredError("this statement is Spark SQL and pyspark is not installed: "
                                    "pip install 'rpl_sql[spark]'", "RPL_SQL_NO_SPARK") from None
        return self._spark

    def _set_spark(self, spark: Any) -> None:
        self._spark = spark

    # ------------------------------------------------------------ start-up

    def start(self, options: Iterable[str] = (), *, defaults_file: str | os.PathLike | None = None,
              lower_case_table_names: int | None = None) -> list[MySQLWarning]:
        """Start the server: rebuild filters from `--replicate-*` options and the channel catalog (spec §8).

        Statement-made filters are dropped, counters restart, threads are stopped. Raises StartupError
        (nothing persisted) on a malformed option. Returns MySQL's start-up warnings.
        """
        file_options = read_option_file(defaults_file) if defaults_file else []
        parsed: StartupOptions = parse_startup(list(options), file_options, lower_case_table_names)
        now = self._clock()

        def step(state: ServerState):
            out = server.start(state, parsed, now)
            return out.state, out

        outcome, version = self.store.transact(step, self._metadata("START", " ".join(parsed.raw)))
        self._changed(version)
        return list(outcome.warnings)

    # ------------------------------------------------------------ the applier's decisions

    def apply_events(self, channel: str, events: Iterable[Event]) -> list[Decision]:
        """Decide events as `channel`'s applier and add the hits to COUNTER, in one commit."""
        events = list(events)
        now = self._clock()

        def step(state: ServerState):
            return server.apply_events(state, channel, events, now)

        decisions, version = self.store.transact(step, self._metadata("APPLY", f"{len(events)} events on '{channel}'"))
        self._changed(version)
        return decisions

    # ------------------------------------------------------------ what P_S shows

    def filters(self) -> list[tuple]:
        """Rows of performance_schema.replication_applier_filters."""
        return pfs.applier_filters(self.state)

    def global_filters(self) -> list[tuple]:
        """Rows of performance_schema.replication_applier_global_filters."""
        return pfs.applier_global_filters(self.state)


@contextlib.contextmanager
def quiet_spark_errors() -> Iterator[None]:
    """pyspark logs every SQL error as a multi-kilobyte JSON record with the JVM stack on stderr; inside this
    block it does not (the error still raises, and becomes one SparkSQLError line)."""
    try:  # pyspark's own logger class: a plain Logger of that name would make pyspark's error logging raise
        from pyspark.logger import PySparkLogger

        get = PySparkLogger.getLogger
    except ImportError:  # a pyspark without it logs through no such logger
        get = logging.getLogger
    loggers = [get(n) for n in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")]
    saved = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, saved):
            lg.disabled = was


def is_spark_error(e: BaseException) -> bool:
    """An error Spark raised for a statement (pyspark's exceptions, or py4j's for a JVM error)."""
    return any(c.__module__.startswith(("pyspark.errors", "py4j")) for c in type(e).__mro__)


def filter_history(session: Session, stmt: ShowReplicationFilterHistory) -> Result:
    """SHOW REPLICATION FILTER HISTORY: the filter changes from the state table's commit log, statements redacted."""
    rows = [(c.version, c.committed_at, c.channel_name, c.filter_name, c.filter_rule, c.previous_rule,
             c.configured_by, c.operation, redact(c.statement) if c.statement else c.statement)
            for c in session.store.filter_changes(stmt.channel, stmt.limit)]
    return Result(stmt, HISTORY_COLUMNS, rows)


def replica_tables(session: Session, stmt: ShowReplicaTables) -> Result:
    """SHOW REPLICA TABLES: each replica table's state (storage/replica_states.py)."""
    from rpl_sql.storage import replica_states  # with delta-rs and pyarrow: loaded when asked

    if stmt.channel is not None and session.state.channel(stmt.channel) is None:
        raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.channel)
    rows = [t.row() for t in replica_states.table_states(session.warehouse, stmt.channel)]
    return Result(stmt, replica_states.COLUMNS, rows)


# statement type -> what runs it in a session; any other statement is the server layer's (a commit)
SESSION_HANDLERS: dict[type, Callable[[Session, Any], Result]] = {
    WaitForGtidSet: Session._wait_statement,
    SetDefaultConnection: Session._set_default_connection,
    ShowVariables: Session._show_variables,
    OtherSQL: Session._spark_sql,
    ShowReplicationFilterHistory: filter_history,
    ShowReplicaTables: replica_tables,
    ShowReplicationFilterWarnings: Session._lint,
    ExplainChangeReplicationFilter: Session._impact,
}


def result_frame(spark: Any, result: Result) -> Any:
    """A DataFrame of a replication statement's rows; every column a STRING except integers and times."""
    from pyspark.sql.types import StructType

    if not result.columns:
        return spark.createDataFrame([], StructType([]))
    schema = ", ".join(f"{ident(c)} {_column_type(result.rows, i)}" for i, c in enumerate(result.columns))
    return spark.createDataFrame([tuple(r) for r in result.rows], schema)


def _column_type(rows: list[tuple], i: int) -> str:
    values = [r[i] for r in rows if r[i] is not None]
    if values and all(isinstance(v, bool) for v in values):
        return "BOOLEAN"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "BIGINT"
    if values and all(isinstance(v, datetime) for v in values):
        return "TIMESTAMP"
    return "STRING"


__all__ = ["Session", "Result", "MySQLError", "result_frame"]
