"""MySQL errors and warnings: one catalogue, MySQL's codes, SQLSTATEs and texts (spec/statements.md §9)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorSpec:
    code: int
    sqlstate: str
    name: str
    template: str


def _spec(code: int, sqlstate: str, name: str, template: str) -> ErrorSpec:
    return ErrorSpec(code, sqlstate, name, template)


CATALOGUE: dict[str, ErrorSpec] = {s.name: s for s in (
    _spec(1018, "HY000", "ER_CANT_READ_DIR", "Can't read dir of '%s' (errno: %d - %s)"),
    _spec(1026, "HY000", "ER_ERROR_ON_WRITE", "Error writing file '%s' (errno: %d - %s)"),
    _spec(1064, "42000", "ER_PARSE_ERROR",
          "You have an error in your SQL syntax; check the manual that corresponds to your MySQL server "
          "version for the right syntax to use near '%s' at line %d"),
    _spec(1194, "HY000", "ER_CRASHED_ON_USAGE", "Table '%s' is marked as crashed and should be repaired"),
    _spec(1210, "HY000", "ER_WRONG_ARGUMENTS", "Incorrect arguments to %s"),
    _spec(1200, "HY000", "ER_BAD_REPLICA",
          "The server is not configured as replica; fix in config file or with CHANGE REPLICATION SOURCE TO"),
    _spec(1227, "42000", "ER_SPECIFIC_ACCESS_DENIED_ERROR",
          "Access denied; you need (at least one of) the %s privilege(s) for this operation"),
    _spec(1228, "HY000", "ER_LOCAL_VARIABLE",
          "Variable '%s' is a SESSION variable and can't be used with SET GLOBAL"),
    _spec(1229, "HY000", "ER_GLOBAL_VARIABLE", "Variable '%s' is a GLOBAL variable and should be set with SET GLOBAL"),
    _spec(1231, "42000", "ER_WRONG_VALUE_FOR_VAR", "Variable '%s' can't be set to the value of '%s'"),
    _spec(1238, "HY000", "ER_INCORRECT_GLOBAL_LOCAL_VAR", "Variable '%s' is a %s variable"),
    _spec(1235, "42000", "ER_NOT_SUPPORTED_YET", "This version of MySQL doesn't yet support '%s'"),
    _spec(1300, "HY000", "ER_INVALID_CHARACTER_STRING", "Invalid %s character string: '%s'"),
    _spec(1254, "HY000", "ER_REPLICA_WAS_RUNNING", "Replica is already running"),
    _spec(1255, "HY000", "ER_REPLICA_WAS_NOT_RUNNING", "Replica already has been stopped"),
    _spec(1287, "HY000", "ER_WARN_DEPRECATED_SYNTAX",
          "'%s' is deprecated and will be removed in a future release. Please use %s instead"),
    _spec(1470, "HY000", "ER_WRONG_STRING_LENGTH", "String '%-.70s' is too long for %s (should be no longer than %d)"),
    _spec(1525, "HY000", "ER_WRONG_VALUE", "Incorrect %s value: '%s'"),
    _spec(1729, "HY000", "ER_MASTER_DELAY_VALUE_OUT_OF_RANGE",
          "The requested value %s for the master delay exceeds the maximum %s"),
    _spec(1794, "HY000", "ER_REPLICA_CONFIGURATION",
          "Replica is not configured or failed to initialize properly. You must at least set --server-id to "
          "enable either a source or a replica. Additional error messages can be found in the MySQL error log."),
    _spec(3067, "HY000", "ER_INVALID_RPL_WILD_TABLE_FILTER_PATTERN",
          "Supplied filter list contains a value which is not in the required format "
          "'db_pattern.table_pattern'"),
    _spec(3074, "HY000", "ER_REPLICA_CHANNEL_DOES_NOT_EXIST", "Replica channel '%s' does not exist."),
    _spec(3076, "HY000", "ER_REPLICA_CHANNEL_NAME_INVALID_OR_TOO_LONG",
          "Couldn't create channel: Channel name is either invalid or too long."),
    _spec(3079, "HY000", "ER_REPLICA_MULTIPLE_CHANNELS_CMD",
          "Multiple channels exist on the replica. Please provide channel name as an argument."),
    _spec(3080, "HY000", "ER_REPLICA_MAX_CHANNELS_EXCEEDED",
          "Maximum number of replication channels allowed exceeded."),
    _spec(3081, "HY000", "ER_REPLICA_CHANNEL_MUST_STOP",
          "This operation cannot be performed with running replication threads; run STOP REPLICA FOR "
          "CHANNEL '%s' first"),
    _spec(3083, "HY000", "ER_REPLICA_CHANNEL_WAS_RUNNING",
          "Replication thread(s) for channel '%s' are already runnning."),
    _spec(3084, "HY000", "ER_REPLICA_CHANNEL_WAS_NOT_RUNNING",
          "Replication thread(s) for channel '%s' are already stopped."),
    _spec(3085, "HY000", "ER_REPLICA_CHANNEL_SQL_THREAD_MUST_STOP",
          "This operation cannot be performed with a running replica sql thread; run STOP REPLICA "
          "SQL_THREAD FOR CHANNEL '%s' first."),
    _spec(3139, "HY000", "ER_REPLICA_CHANNEL_OPERATION_NOT_ALLOWED", "%s cannot be performed on channel '%s'."),
    # Error number UNCONFIRMED in the spec (filter-evaluation.md §6); 3541 is our best reading of MySQL 8.0.
    _spec(3541, "HY000", "ER_XA_REPLICATION_FILTERS",
          "The use of replication filters with XA transactions is not supported, and can lead to an "
          "undefined state in the replica."),
    # rpl_sql's own: concurrent writers kept colliding (MySQL has no equivalent; 1213 is its deadlock code).
    _spec(1213, "40001", "ER_LOCK_DEADLOCK",
          "Deadlock found when trying to get lock; try restarting transaction"),
)}

# Start-up (error log) messages: no client error code, MySQL logs them and aborts or warns.
STARTUP_MESSAGES: dict[str, str] = {
    "ER_RPL_CANT_ADD_DO_TABLE": "Could not add do table rule '%s'!",
    "ER_RPL_CANT_ADD_IGNORE_TABLE": "Could not add ignore table rule '%s'!",
    "ER_RPL_FILTER_ADD_WILD_DO_TABLE_FAILED": "Could not add wild do table rule '%s'!",
    "ER_RPL_FILTER_ADD_WILD_IGNORE_TABLE_FAILED": "Could not add wild ignore table rule '%s'!",
    "ER_RPL_REWRITEDB_MISSING_ARROW": "Bad syntax in replicate-rewrite-db - missing '->'!",
    "ER_RPL_REWRITEDB_EMPTY_FROM": "Bad syntax in replicate-rewrite-db - empty FROM db!",
    "ER_RPL_REWRITEDB_EMPTY_TO": "Bad syntax in replicate-rewrite-db - empty TO db!",
    "ER_RPL_FILTERS_NOT_ATTACHED_TO_CHANNEL":
        "There are per-channel replication filter(s) configured for channel '%s' which does not exist. "
        "The filter(s) have been discarded.",
    "ER_PER_CHANNEL_RPL_FILTER_CONF_FOR_GRP_RPL":
        "There are per-channel replication filter(s) configured for group replication channel '%s' which "
        "is disallowed. The filter(s) have been discarded.",
    "ER_RPL_REPLICA_RESET_FILTER_OPTIONS":
        "There are per-channel replication filter(s) configured for channel '%s' which is not configured. "
        "The filter(s) have been discarded.",
}


class RplSqlError(Exception):
    """The root of every error rpl_sql raises: `except rpl_sql.RplSqlError` catches them all."""


class MySQLError(RplSqlError):
    """A statement failed with a MySQL error; the state is unchanged."""

    hint = ""  # what to do instead, when rpl_sql knows (a misspelt keyword, an unsupported statement)

    def __init__(self, code: int, sqlstate: str, name: str, message: str):
        super().__init__(f"ERROR {code} ({sqlstate}): {message}")
        self.code = code
        self.sqlstate = sqlstate
        self.name = name
        self.message = message

    @classmethod
    def of(cls, name: str, *args: object) -> "MySQLError":
        """Build the catalogue error `name` with its template's `%s`/`%d` arguments."""
        spec = CATALOGUE[name]
        return cls(spec.code, spec.sqlstate, spec.name, spec.template % args if args else spec.template)


class SparkSQLError(RplSqlError):
    """A statement run by Spark failed: `error_class` and `sqlstate` are Spark's, `message` its first line."""

    def __init__(self, message: str, error_class: str | None = None, sqlstate: str | None = None):
        super().__init__(message)
        self.message = message
        self.error_class = error_class
        self.sqlstate = sqlstate

    @classmethod
    def from_spark(cls, err: BaseException) -> "SparkSQLError":
        """Spark's exception, without its JVM stack trace and JSON context: one line."""
        get = getattr(err, "getCondition", None) or getattr(err, "getErrorClass", None)
        error_class = get() if get else None
        state = getattr(err, "getSqlState", None)
        text = str(getattr(err, "_desc", None) or err).strip().splitlines()
        message = text[0] if text else type(err).__name__
        if error_class and not message.startswith("["):
            message = f"[{error_class}] {message}"
        return cls(message, error_class, state() if state else None)


class SparkRequiredError(SparkSQLError):
    """A statement needs Spark and the session has none; the message says how to get one."""


def error_text(e: MySQLError | SparkSQLError, line: int | None = None) -> str:
    """An error as rpl_sql's clients show it (shell, notebook, maintenance commands): the mysql client's
    `ERROR code (state) [at line N]: message`, then any hint; Spark's as `ERROR (Spark state): message`."""
    at = f" at line {line}" if line else ""
    if isinstance(e, MySQLError):
        return f"ERROR {e.code} ({e.sqlstate}){at}: {e.message}\n" + (f"Hint: {e.hint}\n" if e.hint else "")
    return f"ERROR (Spark{' ' + e.sqlstate if e.sqlstate else ''}){at}: {e.message}\n"


class StartupError(RplSqlError):
    """Start-up aborted (MySQL logs the message and '[ERROR] Aborting'); nothing was persisted."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name
        self.message = message

    @classmethod
    def of(cls, name: str, *args: object) -> "StartupError":
        template = STARTUP_MESSAGES[name]
        return cls(name, template % args if args else template)


@dataclass(frozen=True)
class MySQLWarning:
    """A note or warning as SHOW WARNINGS would list it (start-up warnings carry no client code)."""

    level: str  # 'Note' | 'Warning'
    code: int | None
    name: str
    message: str

    @classmethod
    def of(cls, name: str, *args: object, level: str = "Warning") -> "Warning":
        if name in CATALOGUE:
            spec = CATALOGUE[name]
            return cls(level, spec.code, name, spec.template % args if args else spec.template)
        template = STARTUP_MESSAGES[name]
        return cls(level, None, name, template % args if args else template)

    def __str__(self) -> str:
        code = f" {self.code}" if self.code is not None else ""
        return f"{self.level}{code}: {self.message}"
