"""Parsed statements: small immutable nodes, one per statement form (spec/statements.md).

`channel` is None when the statement has no FOR CHANNEL clause; otherwise the lower-cased name.
`legacy` records the SLAVE/MASTER spelling, which earns a 1287 deprecation warning.
"""
from __future__ import annotations

from dataclasses import dataclass

from rpl_sql.filters.rules import FilterType


@dataclass(frozen=True)
class Statement:
    """Base: `text` is the statement's source text, `line` its first line in the script."""

    text: str = ""
    line: int = 1


@dataclass(frozen=True)
class ChangeReplicationFilter(Statement):
    # (type, values) in statement order; a repeated type appears twice, the last one wins.
    # Values: str for db names, 'db.table' for tables, unescaped pattern strings, (from, to) pairs.
    filters: tuple[tuple[FilterType, tuple], ...] = ()
    channel: str | None = None
    variable: bool = False  # MariaDB's SET GLOBAL [conn.]replicate_*: its rules for a connection not configured


@dataclass(frozen=True)
class ChangeReplicationSource(Statement):
    # (canonical SOURCE_* key, value) in statement order; value is str or int.
    options: tuple[tuple[str, object], ...] = ()
    channel: str | None = None
    legacy: bool = False  # CHANGE MASTER TO
    legacy_options: tuple[str, ...] = ()  # MASTER_* keys as written, for 1287 warnings


@dataclass(frozen=True)
class ResetReplica(Statement):
    all: bool = False
    channel: str | None = None
    legacy: bool = False


@dataclass(frozen=True)
class StartReplica(Statement):
    threads: frozenset[str] = frozenset()  # {'IO', 'SQL'}; empty = both
    channel: str | None = None
    legacy: bool = False
    unsupported: str | None = None  # UNTIL / USER= ... clause text: rejected with 1235


@dataclass(frozen=True)
class StopReplica(Statement):
    threads: frozenset[str] = frozenset()
    channel: str | None = None
    legacy: bool = False


@dataclass(frozen=True)
class ShowReplicaStatus(Statement):
    channel: str | None = None
    legacy: bool = False


@dataclass(frozen=True)
class ShowReplicaTables(Statement):
    """rpl_sql extension: each replica table's state (replicating, backfilling, no longer replicated)."""

    channel: str | None = None


@dataclass(frozen=True)
class ResyncReplicaTables(Statement):
    """rpl_sql extension: copy these replica tables (db, table) from the source again, on a running replica."""

    tables: tuple[tuple[str, str], ...] = ()
    channel: str | None = None


@dataclass(frozen=True)
class ShowReplicationFilterHistory(Statement):
    """rpl_sql extension: the Delta history of filter changes (MySQL keeps none)."""

    channel: str | None = None
    limit: int | None = None


@dataclass(frozen=True)
class ExplainReplicationFilter(Statement):
    """rpl_sql extension: the trace of one decision. A row event names `table` (db, name); a statement event
    names `command` (or the SQL text, `sql`, classified as the binlog ingest does), its default database
    and its tables as (db or None, name, updating)."""

    channel: str | None = None
    as_of: int | str | None = None  # a state version, or a time ('YYYY-MM-DD hh:mm:ss', UTC)
    table: tuple[str, str] | None = None
    command: str | None = None
    sql: str | None = None
    default_db: str | None = None
    tables: tuple[tuple[str | None, str, bool], ...] = ()


@dataclass(frozen=True)
class ShowReplicationFilters(Statement):
    """rpl_sql extension: replication_applier_filters' rows (or replication_applier_global_filters' with
    `global_`), now or `as_of` a past state version or time."""

    channel: str | None = None
    global_: bool = False
    as_of: int | str | None = None
    hits: bool = False  # SHOW REPLICATION FILTER HITS: rpl_sql_filter_rule_hits' rows instead


@dataclass(frozen=True)
class ShowReplicationFilterWarnings(Statement):
    """rpl_sql extension: the filter lint (rpl_sql.filters.lint) of every channel, or one, with rule hits over the
    landed events."""

    channel: str | None = None


@dataclass(frozen=True)
class ExplainChangeReplicationFilter(Statement):
    """rpl_sql extension: the landed events whose verdict or deciding rule `change` would change, decided
    with the current and the proposed filters (the last `last` events of each channel, or those since
    `since`, or all); nothing is committed."""

    change: ChangeReplicationFilter = ChangeReplicationFilter()
    last: int | None = None
    since: str | None = None


@dataclass(frozen=True)
class SetSkipCounter(Statement):
    """`SET GLOBAL sql_replica_skip_counter = N` (or sql_slave_skip_counter; MariaDB's `connection.` prefix sets
    that channel's directly)."""

    value: int = 0
    connection: str | None = None


@dataclass(frozen=True)
class SetReplicationVariable(Statement):
    """MariaDB's `SET GLOBAL [connection.]replicate_* = 'v1,v2'`: one filter type of one channel (the session's
    default_master_connection when `connection` is None); `value` None is DEFAULT (empty)."""

    variable: str = ""
    connection: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class SetDefaultConnection(Statement):
    """MariaDB's `SET @@default_master_connection = 'name'`: a session setting, never persisted."""

    connection: str = ""


@dataclass(frozen=True)
class ShowVariables(Statement):
    """`SHOW [GLOBAL|SESSION] VARIABLES [LIKE 'pattern']`, over the replication variables rpl_sql keeps."""

    like: str | None = None


@dataclass(frozen=True)
class WaitForGtidSet(Statement):
    """`SELECT WAIT_FOR_EXECUTED_GTID_SET('set'[, timeout])` (MySQL) or `SELECT MASTER_GTID_WAIT('pos'[,
    timeout])` (MariaDB): wait until the replica tables hold those transactions."""

    gtids: str = ""
    timeout: float | None = None  # seconds; None waits as long as it takes
    function: str = "WAIT_FOR_EXECUTED_GTID_SET"


@dataclass(frozen=True)
class ShowWarnings(Statement):
    """The previous statement's warnings, or its error (answered by the session, as the mysql client's)."""

    limit: int | None = None


@dataclass(frozen=True)
class OtherSQL(Statement):
    """Any statement that is not a replication statement: handed to Spark SQL as written."""


REPLICATION_STATEMENTS = (ChangeReplicationFilter, ChangeReplicationSource, ResetReplica, StartReplica,
                          StopReplica, ShowReplicaStatus, ShowReplicaTables, ResyncReplicaTables,
                          ShowReplicationFilterHistory, ShowWarnings, ExplainReplicationFilter, ShowReplicationFilters,
                          ShowReplicationFilterWarnings, ExplainChangeReplicationFilter)
