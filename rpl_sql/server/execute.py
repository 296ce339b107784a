"""The replica server as a pure function: (state, statement, clock) -> new state, result, warnings.

No I/O. Every check runs before anything changes, so an error leaves the state as it was
(spec/statements.md §1.5 and §9). `start` is mysqld's start-up (spec §8).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator

from rpl_sql.server import performance_schema as pfs
from rpl_sql.errors import MySQLError, MySQLWarning
from rpl_sql.filters.evaluate import Decision, Event, RowEvent, TableRef, decide, hit_rules, statement_event
from rpl_sql.filters.rules import (
    CHANGE_REPLICATION_FILTER,
    CHANGE_REPLICATION_FILTER_FOR_CHANNEL,
    STARTUP_OPTIONS,
    STARTUP_OPTIONS_FOR_CHANNEL,
    TYPES,
    Filters,
    FilterType,
    Slot,
    normalize_values,
    tally_rule_hits,
    type_counts,
)
from rpl_sql.filters.rules import like as like_match
from rpl_sql.server.startup import StartupOptions
from rpl_sql.filters.state import DEFAULT_CHANNEL, MAX_CHANNEL_NAME, MAX_CHANNELS, Channel, ServerState, is_gr_channel
from rpl_sql.language.statements import (
    ChangeReplicationFilter, ChangeReplicationSource, ExplainReplicationFilter, ResetReplica, ResyncReplicaTables,
    SetDefaultConnection, SetReplicationVariable, SetSkipCounter, ShowReplicaStatus, ShowReplicationFilters,
    StartReplica, Statement, StopReplica,
)
from rpl_sql.server.resync import resync_tables


@dataclass(frozen=True)
class ResultSet:
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]


@dataclass(frozen=True)
class Outcome:
    state: ServerState
    result: ResultSet | None = None
    warnings: tuple[MySQLWarning, ...] = ()
    # passwords to store (or forget: None) beside the state, never in it: (channel, password)
    credentials: tuple[tuple[str, str | None], ...] = ()


def _deprecated(old: str, new: str) -> MySQLWarning:
    return MySQLWarning.of("ER_WARN_DEPRECATED_SYNTAX", old, new)


def copy_global_filters(filters: Filters, global_filters: Filters, now: int) -> Filters:
    """Spec §4: per type, an empty channel type takes the global values (and the global's CONFIGURED_BY)."""
    for ftype in TYPES:
        g = global_filters[ftype]
        if not filters.values(ftype) and g.values:
            filters = filters.with_slot(ftype, Slot(g.values, g.configured_by, now, 0))
    return filters


# ---------------------------------------------------------------- CHANGE REPLICATION FILTER

def change_replication_filter(state: ServerState, stmt: ChangeReplicationFilter, now: int) -> Outcome:
    final: dict[FilterType, tuple] = {}
    for ftype, values in stmt.filters:  # the same type twice: the later one wins entirely
        final[ftype] = normalize_values(ftype, values, state.lower_case_table_names)

    def configure(filters: Filters, configured_by: str) -> Filters:
        for ftype, values in final.items():
            filters = filters.configure(ftype, values, configured_by, now)
        return filters

    if stmt.channel is None:
        if not state.channels:
            raise MySQLError.of("ER_REPLICA_CONFIGURATION")
        targets = state.configured_channels()
        for ch in targets:
            if ch.sql_running:
                raise MySQLError.of("ER_REPLICA_CHANNEL_SQL_THREAD_MUST_STOP", ch.name)
        new = replace(state, global_filters=configure(state.global_filters, CHANGE_REPLICATION_FILTER))
        for ch in targets:
            new = new.with_channel(replace(ch, filters=configure(ch.filters, CHANGE_REPLICATION_FILTER)))
        return Outcome(new)

    if is_gr_channel(stmt.channel):
        raise MySQLError.of("ER_REPLICA_CHANNEL_OPERATION_NOT_ALLOWED", "CHANGE REPLICATION FILTER", stmt.channel)
    ch = state.channel(stmt.channel)
    if stmt.variable and (ch is None or not ch.configured):
        # MariaDB keeps the default connection's rules before it has a master (they apply once it has one),
        # and knows no other connection until CHANGE MASTER makes it (checked on MariaDB 10.11)
        if stmt.channel != DEFAULT_CHANNEL:
            err = MySQLError.of("ER_WRONG_ARGUMENTS", "SET")
            err.hint = f"there is no connection '{stmt.channel}': CHANGE MASTER '{stmt.channel}' TO ... first"
            raise err
        ch = ch or Channel(DEFAULT_CHANNEL)
        return Outcome(state.with_channel(replace(ch, filters=configure(ch.filters,
                                                                        CHANGE_REPLICATION_FILTER_FOR_CHANNEL))))
    if ch is None or not ch.configured:
        err = MySQLError.of("ER_REPLICA_CONFIGURATION")
        err.hint = (f"channel '{stmt.channel}' " + ("does not exist" if ch is None else "has no source") +
                    f": CHANGE REPLICATION SOURCE TO SOURCE_HOST='...' FOR CHANNEL '{stmt.channel}' first")
        raise err
    if ch.sql_running:
        raise MySQLError.of("ER_REPLICA_CHANNEL_SQL_THREAD_MUST_STOP", ch.name)
    return Outcome(state.with_channel(replace(ch, filters=configure(ch.filters,
                                                                    CHANGE_REPLICATION_FILTER_FOR_CHANNEL))))


# ---------------------------------------------------------------- CHANGE REPLICATION SOURCE

SECRET_OPTION = "SOURCE_PASSWORD"  # kept by rpl_sql.storage.credentials, never in the state

def named_or_default(state: ServerState, name: str | None) -> str:
    """A statement's channel: the one it names, else the default channel unless several exist (3079)."""
    if name is None:
        if len(state.channels) > 1:
            raise MySQLError.of("ER_REPLICA_MULTIPLE_CHANNELS_CMD")
        return DEFAULT_CHANNEL
    return name


def change_replication_source(state: ServerState, stmt: ChangeReplicationSource, now: int) -> Outcome:
    warnings = [_deprecated("CHANGE MASTER", "CHANGE REPLICATION SOURCE")] if stmt.legacy else []
    warnings += [_deprecated(key.upper(), key.upper().replace("MASTER", "SOURCE")) for key in stmt.legacy_options]
    name = named_or_default(state, stmt.channel)
    ch = state.channel(name)
    if ch is None:
        if len(name) > MAX_CHANNEL_NAME:
            raise MySQLError.of("ER_REPLICA_CHANNEL_NAME_INVALID_OR_TOO_LONG")
        if len(state.channels) >= MAX_CHANNELS:
            raise MySQLError.of("ER_REPLICA_MAX_CHANNELS_EXCEEDED")
        ch = Channel(name)
    elif ch.io_running or ch.sql_running:
        raise MySQLError.of("ER_REPLICA_CHANNEL_MUST_STOP", ch.name)
    was_configured = ch.configured
    options = dict(stmt.options)
    secret = ((ch.name, str(options.pop(SECRET_OPTION)) or None),) if SECRET_OPTION in options else ()
    ch = ch.with_options(options)
    ch = replace(ch, options=tuple((k, v) for k, v in ch.options if k != SECRET_OPTION))  # a warehouse's before 0.2
    if ch.configured and not was_configured and not ch.is_gr:
        ch = replace(ch, filters=copy_global_filters(ch.filters, state.global_filters, now))
    return Outcome(state.with_channel(ch), warnings=tuple(warnings), credentials=secret)


# ---------------------------------------------------------------- RESET REPLICA [ALL]

_POSITION_OPTIONS = ("SOURCE_LOG_FILE", "SOURCE_LOG_POS", "RELAY_LOG_FILE", "RELAY_LOG_POS")


def reset_replica(state: ServerState, stmt: ResetReplica, now: int) -> Outcome:
    warnings = (_deprecated("RESET SLAVE", "RESET REPLICA"),) if stmt.legacy else ()
    if stmt.channel is not None:
        ch = state.channel(stmt.channel)
        if ch is None:
            raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.channel)
        targets = [ch]
    else:
        targets = [c for c in state.channels if not (stmt.all and c.is_gr)]
    for ch in targets:
        if ch.io_running or ch.sql_running:
            raise MySQLError.of("ER_REPLICA_CHANNEL_MUST_STOP", ch.name)
    new = state
    forgotten = tuple((ch.name, None) for ch in targets) if stmt.all else ()
    for ch in targets:
        if stmt.all:
            new = new.without_channel(ch.name)
        else:  # positions forgotten (the next START reads from the source's first binlog, or by GTID); filters,
            # counters, executed GTIDs and the replica tables stay, as on MySQL
            kept = tuple((k, v) for k, v in ch.options if k not in _POSITION_OPTIONS)
            applier = replace(ch.applier, source_log_file="", source_log_pos=0)
            new = new.with_channel(replace(ch, options=kept, applier=applier, reset_at=max(now, ch.reset_at + 1)))
    if new.channel(DEFAULT_CHANNEL) is None:
        new = new.with_channel(Channel(DEFAULT_CHANNEL))
    return Outcome(new, warnings=warnings, credentials=forgotten)


# ---------------------------------------------------------------- START / STOP REPLICA

def _thread_targets(state: ServerState, stmt: StartReplica | StopReplica, verb: str) -> list[Channel]:
    if stmt.channel is None:
        targets = state.configured_channels()
        if not targets and isinstance(stmt, StartReplica):
            raise MySQLError.of("ER_BAD_REPLICA")
        return targets
    if is_gr_channel(stmt.channel):
        raise MySQLError.of("ER_REPLICA_CHANNEL_OPERATION_NOT_ALLOWED", verb, stmt.channel)
    ch = state.channel(stmt.channel)
    if ch is None:
        raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.channel)
    if isinstance(stmt, StartReplica) and not ch.configured:
        raise MySQLError.of("ER_BAD_REPLICA")
    return [ch]


def start_stop_replica(state: ServerState, stmt: StartReplica | StopReplica, now: int) -> Outcome:
    start = isinstance(stmt, StartReplica)
    word = "SLAVE" if stmt.legacy else "REPLICA"
    verb = f"{'START' if start else 'STOP'} {word}"
    warnings = [_deprecated(verb, verb.replace("SLAVE", "REPLICA"))] if stmt.legacy else []
    if start and stmt.unsupported:
        raise MySQLError.of("ER_NOT_SUPPORTED_YET", stmt.unsupported)
    targets = _thread_targets(state, stmt, verb)
    threads = stmt.threads or frozenset({"IO", "SQL"})
    single = stmt.channel is not None or len(targets) == 1
    new = state
    for ch in targets:
        want_io = start if "IO" in threads else ch.io_running
        want_sql = start if "SQL" in threads else ch.sql_running
        if (want_io, want_sql) == (ch.io_running, ch.sql_running):
            if single:
                warnings.append(MySQLWarning.of("ER_REPLICA_WAS_RUNNING" if start else "ER_REPLICA_WAS_NOT_RUNNING",
                                           level="Note"))
            else:
                warnings.append(MySQLWarning.of("ER_REPLICA_CHANNEL_WAS_RUNNING" if start
                                           else "ER_REPLICA_CHANNEL_WAS_NOT_RUNNING", ch.name, level="Note"))
            continue
        moved = replace(ch, io_running=want_io, sql_running=want_sql)
        if want_sql and not ch.sql_running and new.skip_counter:  # the starting SQL thread takes the counter
            moved = replace(moved, skip_counter=new.skip_counter)
            new = replace(new, skip_counter=0)
        new = new.with_channel(moved)
    return Outcome(new, warnings=tuple(warnings))


# ---------------------------------------------------------------- sql_replica_skip_counter

def set_skip_counter(state: ServerState, stmt: SetSkipCounter) -> Outcome:
    """MySQL's global counter, taken by the next channel whose SQL thread starts; MariaDB's `conn.` form sets
    that channel's own."""
    if stmt.connection is None:
        return Outcome(replace(state, skip_counter=stmt.value))
    ch = state.channel(stmt.connection)
    if ch is None:
        raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.connection)
    return Outcome(state.with_channel(replace(ch, skip_counter=stmt.value)))


# ---------------------------------------------------------------- SHOW REPLICA STATUS

def show_replica_status(state: ServerState, stmt: ShowReplicaStatus, applier: dict | None = None) -> Outcome:
    """`applier` maps channel name -> pipeline positions/GTID sets shown in the row (optional)."""
    warnings = (_deprecated("SHOW SLAVE STATUS", "SHOW REPLICA STATUS"),) if stmt.legacy else ()
    columns = pfs.SLAVE_STATUS_COLUMNS if stmt.legacy else pfs.REPLICA_STATUS_COLUMNS
    if stmt.channel is None:
        chans = [c for c in state.configured_channels(include_gr=True) if c.name != "group_replication_applier"]
    else:
        if stmt.channel == "group_replication_applier":
            verb = "SHOW SLAVE STATUS" if stmt.legacy else "SHOW REPLICA STATUS"
            raise MySQLError.of("ER_REPLICA_CHANNEL_OPERATION_NOT_ALLOWED", verb, stmt.channel)
        ch = state.channel(stmt.channel)
        if ch is None:
            raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.channel)
        chans = [ch] if ch.configured else []
    applier = applier or {}
    rows = tuple(pfs.replica_status_row(c, applier.get(c.name)) for c in chans)
    return Outcome(state, ResultSet(columns, rows), warnings)


# ---------------------------------------------------------------- EXPLAIN REPLICATION FILTER

EXPLAIN_COLUMNS = ("Step", "Check", "Subject", "Outcome", "Rule", "Verdict")


def explain_event(stmt: ExplainReplicationFilter) -> Event:
    """The evaluator's event for what EXPLAIN names (SQL text is classified as the binlog ingest does)."""
    if stmt.table is not None:
        return RowEvent(*stmt.table)
    if stmt.sql is not None:
        from rpl_sql.classify import classify  # sqlglot: loaded only for this form

        info = classify(stmt.sql)
        db = info.database if info.kind == "DATABASE_DDL" and info.database is not None else stmt.default_db
        return statement_event(info.command, db, info.tables)
    return statement_event(stmt.command or "OTHER", stmt.default_db,
                           tuple(TableRef(db, name, updating) for db, name, updating in stmt.tables))


def explain_filter(state: ServerState, stmt: ExplainReplicationFilter) -> Outcome:
    """Every check the event meets with the channel's filters, in MySQL's order, then the decision: the
    reference evaluator's own trace (`decide(..., trace=...)`), so it cannot disagree with should_apply."""
    name = named_or_default(state, stmt.channel)
    ch = state.channel(name)
    if ch is None:
        raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", name)
    event = explain_event(stmt)
    trace: list = []
    d = decide(ch.filters, event, state.matching, trace=trace)
    rows = [(i, st.check, st.subject, st.outcome, st.rule, None if st.verdict is None else
             ("APPLY" if st.verdict else "IGNORE")) for i, st in enumerate(trace, 1)]
    what = f"{event.db}.{event.table}" if isinstance(event, RowEvent) else event.command
    rows.append((len(rows) + 1, "DECISION", what, f"{'applied' if d.apply else 'ignored'} on database "
                 f"{d.database!r}" if d.database is not None else ("applied" if d.apply else "ignored"),
                 d.decided_by, "APPLY" if d.apply else "IGNORE"))
    return Outcome(state, ResultSet(EXPLAIN_COLUMNS, tuple(rows)))


# ---------------------------------------------------------------- SHOW REPLICATION [GLOBAL] FILTERS

def _columns(schema: str) -> tuple[str, ...]:
    return tuple(part.strip().split()[0] for part in schema.split(","))


def show_filters(state: ServerState, stmt: ShowReplicationFilters) -> Outcome:
    """The rows of replication_applier_filters (one channel's with FOR CHANNEL), _global_filters, or (HITS)
    rpl_sql_filter_rule_hits."""
    if stmt.global_:
        return Outcome(state, ResultSet(_columns(pfs.GLOBAL_FILTERS_SCHEMA), tuple(pfs.applier_global_filters(state))))
    schema, rows = ((pfs.RULE_HITS_SCHEMA, pfs.rule_hit_rows(state)) if stmt.hits
                    else (pfs.FILTERS_SCHEMA, pfs.applier_filters(state)))
    if stmt.channel is not None:
        if state.channel(stmt.channel) is None:
            raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.channel)
        rows = [r for r in rows if r[0] == stmt.channel]
    return Outcome(state, ResultSet(_columns(schema), tuple(rows)))


# ---------------------------------------------------------------- MariaDB's filter variables

VARIABLE_COLUMNS = ("Variable_name", "Value")
_VARIABLE_TYPES = {f"replicate_{t.name.lower()}": t for t in FilterType}


def variable_filter(stmt: SetReplicationVariable, default_connection: str) -> ChangeReplicationFilter:
    """The CHANGE REPLICATION FILTER ... FOR CHANNEL that `SET GLOBAL [conn.]replicate_x = 'v1,v2'` is, so it
    changes the same state and meets the same errors (a running SQL thread among them).

    Values are comma-separated as MariaDB takes them: names, `db.table`, patterns, `from->to` pairs."""
    ftype = _VARIABLE_TYPES[stmt.variable]
    items = [x.strip() for x in (stmt.value or "").split(",") if x.strip()]

    def bad() -> MySQLError:
        return MySQLError.of("ER_WRONG_VALUE_FOR_VAR", stmt.variable, stmt.value or "")

    values: tuple
    if ftype is FilterType.REWRITE_DB:
        pairs = [tuple(p.strip() for p in x.split("->", 1)) for x in items]
        if any(len(p) != 2 or not all(p) for p in pairs):
            raise bad()
        values = tuple(pairs)
    elif ftype in (FilterType.DO_TABLE, FilterType.IGNORE_TABLE, FilterType.WILD_DO_TABLE,
                   FilterType.WILD_IGNORE_TABLE):
        if any("." not in x or x.startswith(".") or x.endswith(".") for x in items):
            raise bad()
        values = tuple(items)
    else:
        values = tuple(items)
    channel = stmt.connection if stmt.connection is not None else default_connection
    return ChangeReplicationFilter(text=stmt.text, line=stmt.line, filters=((ftype, values),), channel=channel,
                                   variable=True)


def script_statements(statements: Iterable[Statement]) -> Iterator[Statement]:
    """A script's statements with MariaDB's `SET @@default_master_connection` followed: each `SET GLOBAL
    [conn.]replicate_*` comes out as the CHANGE REPLICATION FILTER it is; the SETs of the connection do not."""
    connection = ""
    for stmt in statements:
        if isinstance(stmt, SetDefaultConnection):
            connection = stmt.connection
            continue
        yield variable_filter(stmt, connection) if isinstance(stmt, SetReplicationVariable) else stmt


def variable_rows(state: ServerState, connection: str, like: str | None) -> list[tuple[str, str]]:
    """SHOW VARIABLES over the filter variables of one connection (MariaDB's form of each value)."""
    ch = state.channel(connection)
    rows = [("default_master_connection", connection)]
    for name, ftype in _VARIABLE_TYPES.items():
        values = ch.filters.values(ftype) if ch is not None else ()
        text = ",".join(f"{a}->{b}" for a, b in values) if ftype is FilterType.REWRITE_DB else ",".join(values)
        rows.append((name, text))
    rows.sort()
    if like is not None:
        rows = [r for r in rows if like_match(like.lower(), r[0])]
    return rows


# ---------------------------------------------------------------- dispatch

# statement type -> its handler, called as handler(state, stmt, now, applier)
HANDLERS: dict[type, Callable[[ServerState, Any, int, dict | None], Outcome]] = {
    ChangeReplicationFilter: lambda state, stmt, now, _: change_replication_filter(state, stmt, now),
    ChangeReplicationSource: lambda state, stmt, now, _: change_replication_source(state, stmt, now),
    ResetReplica: lambda state, stmt, now, _: reset_replica(state, stmt, now),
    StartReplica: lambda state, stmt, now, _: start_stop_replica(state, stmt, now),
    StopReplica: lambda state, stmt, now, _: start_stop_replica(state, stmt, now),
    ShowReplicaStatus: lambda state, stmt, _, applier: show_replica_status(state, stmt, applier),
    SetSkipCounter: lambda state, stmt, _, __: set_skip_counter(state, stmt),
    ExplainReplicationFilter: lambda state, stmt, _, __: explain_filter(state, stmt),
    ShowReplicationFilters: lambda state, stmt, _, __: show_filters(state, stmt),
    ResyncReplicaTables: lambda state, stmt, _, __: Outcome(resync_tables(state, stmt)),
}


def execute(state: ServerState, stmt: Statement, now: int, applier: dict | None = None) -> Outcome:
    """Run one replication statement. `now` is the statement start time in µs (ACTIVE_SINCE)."""
    handler = next((HANDLERS[t] for t in type(stmt).__mro__ if t in HANDLERS), None)
    if handler is None:
        raise TypeError(f"not a replication statement for the server: {type(stmt).__name__}")
    return handler(state, stmt, now, applier)


# ---------------------------------------------------------------- start-up (spec §8)

def _startup_filters(rules: Iterable, configured_by: str, lctn: int, now: int) -> Filters:
    values: dict[FilterType, list] = {}
    for r in rules:
        values.setdefault(r.ftype, []).append(r.value)
    filters = Filters()
    for ftype in TYPES:
        if ftype in values:
            filters = filters.configure(ftype, normalize_values(ftype, values[ftype], lctn), configured_by, now)
    return filters


def start(state: ServerState, options: StartupOptions, now: int) -> Outcome:
    """mysqld start-up: rebuild every filter object from the options and the channel catalog.

    The catalog is the persisted channels; the default channel belongs to it only while configured.
    Counters restart at 0, all threads are stopped (as with --skip-replica-start).
    """
    lctn = options.lower_case_table_names if options.lower_case_table_names is not None \
        else state.lower_case_table_names
    global_filters = _startup_filters((r for r in options.rules if r.channel is None), STARTUP_OPTIONS, lctn, now)
    per_channel: dict[str, list] = {}
    for r in options.rules:
        if r.channel is not None:
            per_channel.setdefault(r.channel, []).append(r)
    warnings: list[MySQLWarning] = []
    for name in list(per_channel):
        if is_gr_channel(name):
            warnings.append(MySQLWarning.of("ER_PER_CHANNEL_RPL_FILTER_CONF_FOR_GRP_RPL", name))
            del per_channel[name]
    catalog = [c for c in state.channels if c.name != DEFAULT_CHANNEL or c.configured]
    channels = []
    for ch in catalog:
        filters = Filters()
        rules = per_channel.pop(ch.name, None)
        if ch.configured and not ch.is_gr:
            if rules:
                filters = _startup_filters(rules, STARTUP_OPTIONS_FOR_CHANNEL, lctn, now)
            filters = copy_global_filters(filters, global_filters, now)
        elif rules:
            warnings.append(MySQLWarning.of("ER_RPL_REPLICA_RESET_FILTER_OPTIONS", ch.name))
        channels.append(replace(ch, filters=filters, io_running=False, sql_running=False))
    for name in per_channel:
        warnings.append(MySQLWarning.of("ER_RPL_FILTERS_NOT_ATTACHED_TO_CHANNEL", name))
    if not any(c.name == DEFAULT_CHANNEL for c in channels):
        channels.append(Channel(DEFAULT_CHANNEL))
    new = ServerState(
        lower_case_table_names=lctn,
        global_filters=global_filters,
        channels=tuple(sorted(channels, key=lambda c: c.name.encode("utf-8"))),
        startup_options=options.raw,
        started_at=now,
        filter_mode=options.filter_mode or state.filter_mode,
    )
    return Outcome(new, warnings=tuple(warnings))


# ---------------------------------------------------------------- the applier's bookkeeping

def apply_events(state: ServerState, channel: str, events: Iterable[Event],
                 now: int = 0) -> tuple[ServerState, list[Decision]]:
    """Decide events on one channel as its applier would, adding each decision's hits to COUNTER and to the
    per-rule hit counters (last hit `now`)."""
    ch = state.channel(channel)
    if ch is None:
        raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", channel)
    decisions = []
    rules: dict[FilterType, dict] = {}
    for ev in events:
        d = decide(ch.filters, ev, state.matching)
        decisions.append(d)
        tally_rule_hits(rules, hit_rules(ch.filters, ev, d, state.lower_case_table_names))
    return state.with_channel(replace(ch, filters=ch.filters.add_counts(type_counts(rules), rules, now))), decisions


def add_counters(state: ServerState, counts: dict[str, dict[FilterType, int]]) -> ServerState:
    """Add per-channel counter increments (from the Spark applier) to the state."""
    for name, per_type in counts.items():
        ch = state.channel(name)
        if ch is not None:
            state = state.with_channel(replace(ch, filters=ch.filters.add_counts(per_type)))
    return state
