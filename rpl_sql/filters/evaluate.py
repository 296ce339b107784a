"""The reference evaluator: MySQL 8.0's replica filter decision for one event (spec/filter-evaluation.md).

This module *defines* rpl_sql's semantics. The compiled Spark SQL functions are tested against it, never
the other way round. It is pure: counters come back as `Decision.hits` for the caller to add.

>>> from rpl_sql.filters.rules import Filters, FilterType
>>> f = Filters().configure(FilterType.DO_DB, ("sales",), "STARTUP_OPTIONS", 1)
>>> decide(f, RowEvent("sales", "february")).apply
True
>>> decide(f, StatementEvent("UPDATE", "prices", (TableRef("sales", "january"),))).decided_by
'REPLICATE_DO_DB'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from rpl_sql.errors import MySQLError
from rpl_sql.filters.rules import Filters, FilterType, Matching, Value, first_equal, first_like, first_pair, fold, like

T = FilterType

TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "SAVEPOINT", "ROLLBACK", "ROLLBACK_TO_SAVEPOINT"})
DATABASE_COMMANDS = frozenset({"CREATE_DB", "ALTER_DB", "DROP_DB"})
XA_UNCOUNTED = frozenset({"XA_START", "XA_END", "XA_COMMIT", "XA_ROLLBACK"})
REWRITE_UNCOUNTED = frozenset({"CREATE_DB", "DROP_DB", "BEGIN", "COMMIT"})
COMMANDS = frozenset({
    "INSERT", "INSERT_SELECT", "UPDATE", "UPDATE_MULTI", "DELETE", "DELETE_MULTI", "REPLACE",
    "REPLACE_SELECT", "LOAD", "CREATE_TABLE", "ALTER_TABLE", "DROP_TABLE", "TRUNCATE", "RENAME_TABLE",
    "CREATE_INDEX", "DROP_INDEX", "CREATE_VIEW", "DROP_VIEW", "CREATE_TRIGGER", "DROP_TRIGGER",
    "SET_OPTION", "XA_PREPARE", "OTHER",
}) | TRANSACTION_CONTROL | DATABASE_COMMANDS | XA_UNCOUNTED

# decided_by labels that are not filter types
TRANSACTION = "TRANSACTION_CONTROL"  # BEGIN/COMMIT/...: never filtered
DEFAULT = "DEFAULT"  # table rules on, none matched: ignore iff a do rule exists
NONE = "NONE"  # nothing decided: no applicable rule, event applied
NO_UPDATED_TABLE = "NO_UPDATED_TABLE"  # table rules on, statement updates no table: skipped
EXEMPT = "EXEMPT"  # SET / DROP TEMPORARY TABLE IF EXISTS: table rules skipped
TRIGGER_NOT_FOUND = "TRIGGER_NOT_FOUND"  # DROP TRIGGER whose table the replica does not know
LABELS = (TRANSACTION, DEFAULT, NONE, NO_UPDATED_TABLE, EXEMPT, TRIGGER_NOT_FOUND) + tuple(t.value for t in T)


@dataclass(frozen=True)
class TableRef:
    """A table a statement references; `db` None means unqualified (resolved against the default db)."""

    db: str | None
    name: str
    updating: bool = True


@dataclass(frozen=True)
class StatementEvent:
    """A Query event (statement-based binlog, and all DDL)."""

    command: str
    default_db: str | None = ""
    tables: tuple[TableRef, ...] = ()
    drop_temporary_if_exists: bool = False
    in_stored_program: bool = False
    trigger_table: TableRef | None = None  # DROP_TRIGGER: the trigger's table on the replica, if it exists


@dataclass(frozen=True)
class RowEvent:
    """A Table_map (and its rows events) of a row-based transaction."""

    db: str
    table: str
    in_xa: bool = False


Event = Union[StatementEvent, RowEvent]


@dataclass(frozen=True)
class Decision:
    """The verdict, which rule (or label) decided, the matched rule value, and the counter hits."""

    apply: bool
    decided_by: str
    rule: str | None = None
    hits: tuple[FilterType, ...] = ()
    database: str | None = None  # the (rewritten) database the checks used


@dataclass(frozen=True)
class Step:
    """One check of a decision as the evaluator made it (`decide(..., trace=[])`; EXPLAIN REPLICATION FILTER)."""

    check: str              # what was checked: a filter type, or REWRITE / TABLE_LOOP / a label
    subject: str            # the name it was checked on (db, db.table, the command)
    outcome: str            # matched / no match / no rules / decides / ...
    rule: str | None = None  # the rule value that matched
    verdict: bool | None = None  # set on the step that decided


def _note(trace: list | None, check: str, subject: str, outcome: str, rule: str | None = None,
          verdict: bool | None = None) -> None:
    if trace is not None:
        trace.append(Step(check, subject, outcome, rule, verdict))


# ---------------------------------------------------------------- building blocks

def rewrite(filters: Filters, db: str, lctn: int = 0, trace: list | None = None
            ) -> tuple[str, tuple[str, str] | None]:
    """First pair whose `from` equals `db` (already folded) gives the new name; no chaining."""
    pairs = filters.values(T.REWRITE_DB)
    pair = first_pair(pairs, db, lctn)
    if pair is not None:
        src, dst = pair
        _note(trace, T.REWRITE_DB.value, db, f"rewritten to {dst!r} (the first matching pair; no chaining)",
              f"({src},{dst})")
        return dst, (src, dst)
    _note(trace, T.REWRITE_DB.value, db, "no pair for this database" if pairs else "no rules")
    return db, None


def rewrite_db(filters: Filters, db: str | None, lctn: int = 0) -> str | None:
    """The database an event on `db` is applied to (after lctn folding); the SQL `rewrite_db`."""
    if db is None:
        return None
    return rewrite(filters, fold(db, lctn), lctn)[0]


def _db_rules(filters: Filters, db: str, lctn: int, count: bool, trace: list | None = None):
    """Database rules (do list wins over ignore list). Returns (verdict or None, label, rule, hits)."""
    do, ignore = filters.values(T.DO_DB), filters.values(T.IGNORE_DB)
    if do:
        hit = first_equal(do, db, lctn)
        if hit is None:
            _note(trace, T.DO_DB.value, db, "no match: ignored", None, False)
            return False, T.DO_DB.value, None, ()
        _note(trace, T.DO_DB.value, db, "matched: go on" + (" (REPLICATE_IGNORE_DB is not consulted)"
                                                            if ignore else ""), hit)
        return None, T.DO_DB.value, hit, ((T.DO_DB,) if count else ())
    hit = first_equal(ignore, db, lctn)
    if hit is not None:
        _note(trace, T.IGNORE_DB.value, db, "matched: ignored", hit, False)
        return False, T.IGNORE_DB.value, hit, ((T.IGNORE_DB,) if count else ())
    _note(trace, T.IGNORE_DB.value, db, "no match: go on")
    return None, None, None, ()


def table_check(filters: Filters, key: str, lctn: int = 0, trace: list | None = None
                ) -> tuple[bool, FilterType, str] | None:
    """The table rules on one updated table's `db.name` (folded): (verdict, type, rule) of the first list that
    matches, in MySQL's order (do, ignore, wild do, wild ignore); None when no rule does."""
    for ftype, verdict in ((T.DO_TABLE, True), (T.IGNORE_TABLE, False), (T.WILD_DO_TABLE, True),
                           (T.WILD_IGNORE_TABLE, False)):
        values = filters.values(ftype)
        if not values:
            continue
        hit = (first_equal if ftype in (T.DO_TABLE, T.IGNORE_TABLE) else first_like)(values, key, lctn)
        if hit is not None:
            _note(trace, ftype.value, key, "matched: " + ("applied" if verdict else "ignored"), hit, verdict)
            return verdict, ftype, hit
        _note(trace, ftype.value, key, "no match")
    return None


def tables_verdict(filters: Filters, tables: tuple[TableRef, ...], default_db: str, lctn: int = 0,
                   trace: list | None = None, check=table_check):
    """The per-table loop (spec §5.1): the first updated table matching any rule decides (`check`: table_check,
    or a cache of it).

    Returns (apply, label, rule, hits).
    """
    any_updating = False
    for t in tables:
        key = (t.db if t.db is not None else default_db) + "." + t.name
        if not t.updating:
            _note(trace, "TABLE_LOOP", key, "not updated by the statement: passed over")
            continue
        any_updating = True
        got = check(filters, key, lctn, trace)
        if got is not None:
            verdict, ftype, hit = got
            return verdict, ftype.value, hit, (ftype,)
    if not any_updating:
        _note(trace, NO_UPDATED_TABLE, "", "table rules exist and the statement updates no table: ignored",
              None, False)
        return False, NO_UPDATED_TABLE, None, ()
    verdict = not (filters.values(T.DO_TABLE) or filters.values(T.WILD_DO_TABLE))
    _note(trace, DEFAULT, "", "no table rule matched: " + (
        "ignored (a REPLICATE_DO_TABLE or REPLICATE_WILD_DO_TABLE rule exists)" if not verdict
        else "applied (only ignore rules exist)"), None, verdict)
    return verdict, DEFAULT, None, ()


# ---------------------------------------------------------------- the two decision procedures

@dataclass(frozen=True)
class Started:
    """What decide_statement knows of a statement before its tables (statement_start): the database the checks
    use, the hits so far and what let it through."""

    db: str
    rewrite_hits: tuple[FilterType, ...]
    db_hits: tuple[FilterType, ...]
    applied_by: str
    applied_rule: str | None

    def done(self, apply: bool, label: str, rule: str | None = None, more: tuple = ()) -> Decision:
        return Decision(apply, label, rule, more + self.rewrite_hits, self.db)


def statement_start(filters: Filters, cmd: str, default_db: str | None, lctn: int = 0,
                    trace: list | None = None) -> Decision | Started:
    """Spec §5 up to the statement's tables, for command `cmd` (upper case): the decision when these steps
    make it (transaction control, the database rules, a database statement's wild rules), else `Started`."""
    if cmd in TRANSACTION_CONTROL:
        _note(trace, TRANSACTION, cmd, "transaction control is never filtered: applied", None, True)
        return Decision(True, TRANSACTION)
    db = fold(default_db or "", lctn)
    db, pair = rewrite(filters, db, lctn, trace)
    hits: list[FilterType] = []
    if pair is not None and fold(pair[0], lctn) != db and cmd not in REWRITE_UNCOUNTED:
        hits.append(T.REWRITE_DB)
    rewrite_hits = tuple(hits)

    def done(apply: bool, label: str, rule: str | None = None, more: tuple = ()) -> Decision:
        return Decision(apply, label, rule, more + rewrite_hits, db)

    applied_by, applied_rule = NONE, None
    if filters.values(T.DO_DB) or filters.values(T.IGNORE_DB):
        verdict, label, rule, db_hits = _db_rules(filters, db, lctn, cmd not in XA_UNCOUNTED, trace)
        if verdict is False:
            return done(False, label, rule, db_hits)
        hits.extend(db_hits)
        if label is not None:
            applied_by, applied_rule = label, rule
    elif cmd in DATABASE_COMMANDS:
        key = db + "."
        wdo, wign = filters.values(T.WILD_DO_TABLE), filters.values(T.WILD_IGNORE_TABLE)
        hit = first_like(wdo, key, lctn)
        if hit is not None:
            _note(trace, T.WILD_DO_TABLE.value, key, "matched (database statement, no database rules): applied",
                  hit, True)
            return done(True, T.WILD_DO_TABLE.value, hit, (T.WILD_DO_TABLE,))
        if wdo:
            _note(trace, T.WILD_DO_TABLE.value, key, "no match")
        hit = first_like(wign, key, lctn)
        if hit is not None:
            _note(trace, T.WILD_IGNORE_TABLE.value, key, "matched (database statement, no database rules): "
                  "ignored", hit, False)
            return done(False, T.WILD_IGNORE_TABLE.value, hit, (T.WILD_IGNORE_TABLE,))
        if wign:
            _note(trace, T.WILD_IGNORE_TABLE.value, key, "no match")
        if wdo:
            _note(trace, DEFAULT, key, "no wild rule matched and a wild do rule exists: ignored", None, False)
            return done(False, DEFAULT)
        if wign:
            applied_by = DEFAULT
    else:
        _note(trace, "DATABASE_RULES", db, "no rules")
    return Started(db, rewrite_hits, tuple(h for h in hits if h is not T.REWRITE_DB), applied_by, applied_rule)


def decide_statement(filters: Filters, ev: StatementEvent, lctn: int = 0, trace: list | None = None,
                     start=statement_start, check=table_check) -> Decision:
    """Spec §5: a statement-based event on a channel whose filter object is `filters` (`start` and `check`:
    statement_start and table_check, or caches of them: `Decider`)."""
    cmd = ev.command.upper()
    got = start(filters, cmd, ev.default_db, lctn, trace)
    if isinstance(got, Decision):
        return got
    tables = ev.tables
    if cmd == "DROP_TRIGGER":
        if ev.trigger_table is None:
            _note(trace, TRIGGER_NOT_FOUND, cmd, "the trigger's table is unknown on the replica: ignored", None,
                  False)
            return got.done(False, TRIGGER_NOT_FOUND, None, got.db_hits)
        tables = (TableRef(ev.trigger_table.db, ev.trigger_table.name, True),)

    exempt = cmd == "SET_OPTION" or ev.drop_temporary_if_exists or ev.in_stored_program
    if filters.table_rules_on and tables:
        if exempt:
            _note(trace, EXEMPT, cmd, "exempt from table rules: applied", None, True)
            return got.done(True, EXEMPT, None, got.db_hits)
        folded = tables if not lctn else tuple(  # fold(x, 0) is x
            TableRef(None if t.db is None else fold(t.db, lctn), fold(t.name, lctn), t.updating) for t in tables)
        apply, label, rule, t_hits = tables_verdict(filters, folded, got.db, lctn, trace, check)
        return got.done(apply, label, rule, got.db_hits + t_hits)
    _note(trace, "TABLE_RULES", cmd, ("no rules" if not filters.table_rules_on else "the statement names no table")
          + ": applied", None, True)
    return got.done(True, got.applied_by, got.applied_rule, got.db_hits)


def decide_row(filters: Filters, ev: RowEvent, lctn: int = 0, trace: list | None = None,
               check=table_check) -> Decision:
    """Spec §6: one Table_map of a row-based transaction; raises ER_XA_REPLICATION_FILTERS inside XA."""
    db, name = fold(ev.db, lctn), fold(ev.table, lctn)
    db, pair = rewrite(filters, db, lctn, trace)
    hits: list[FilterType] = [T.REWRITE_DB] if pair is not None and fold(pair[0], lctn) != db else []
    decision = _row_checks(filters, db, name, lctn, tuple(hits), trace, check)
    if ev.in_xa and not decision.apply:
        raise MySQLError.of("ER_XA_REPLICATION_FILTERS")
    return decision


def _row_checks(filters: Filters, db: str, name: str, lctn: int, hits: tuple,
                trace: list | None = None, check=table_check) -> Decision:
    applied_by, applied_rule = NONE, None
    if filters.values(T.DO_DB) or filters.values(T.IGNORE_DB):
        verdict, label, rule, db_hits = _db_rules(filters, db, lctn, True, trace)
        if verdict is False:
            return Decision(False, label, rule, hits + db_hits, db)
        hits += db_hits
        if label is not None:
            applied_by, applied_rule = label, rule
    else:
        _note(trace, "DATABASE_RULES", db, "no rules")
    if filters.table_rules_on:
        apply, label, rule, t_hits = tables_verdict(filters, (TableRef(db, name, True),), db, lctn, trace, check)
        return Decision(apply, label, rule, hits + t_hits, db)
    _note(trace, "TABLE_RULES", db + "." + name, "no rules: applied", None, True)
    return Decision(True, applied_by, applied_rule, hits, db)


def hit_rules(filters: Filters, event: Event, d: Decision, lctn: int = 0) -> tuple[tuple[FilterType, Value], ...]:
    """The rule behind each of `d.hits`, in the same order: the rewrite pair used, the do-db name that let the
    event through, the rule that decided. Per-rule hit counters add these (their sum per type is COUNTER's)."""
    out = []
    for h in d.hits:
        if h is T.REWRITE_DB:
            db = event.db if isinstance(event, RowEvent) else (event.default_db or "")
            out.append((h, rewrite(filters, fold(db, lctn), lctn)[1]))
        elif h.value == d.decided_by:
            out.append((h, d.rule))
        else:  # a do-db rule passed the event on and a table rule (or the default) decided
            out.append((h, first_equal(filters.values(h), d.database or "", lctn)))
    return tuple(out)


# ---------------------------------------------------------------- WL#2516 "effective database" (opt-in)

def _effective_patterns(filters: Filters, do: bool) -> list[tuple[str, str]]:
    """DO (or IGNORE) rules as (label, LIKE pattern) over `db.table`: db rules as `db.%`, exact tables escaped."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    db_t, tab_t, wild_t = (T.DO_DB, T.DO_TABLE, T.WILD_DO_TABLE) if do else (T.IGNORE_DB, T.IGNORE_TABLE,
                                                                             T.WILD_IGNORE_TABLE)
    out = [(db_t.value, esc(d) + ".%") for d in filters.values(db_t)]
    out += [(tab_t.value, esc(t)) for t in filters.values(tab_t)]
    out += [(wild_t.value, p) for p in filters.values(wild_t)]
    return out


def decide_effective(filters: Filters, ev: Event, lctn: int = 0) -> Decision:
    """Spec §9 (not MySQL's default): every table is judged on its effective database, in both formats."""
    if isinstance(ev, RowEvent):
        keys = [(fold(ev.db, lctn), fold(ev.table, lctn))]
    else:
        cmd = ev.command.upper()
        if cmd in TRANSACTION_CONTROL:
            return Decision(True, TRANSACTION)
        ddb = fold(ev.default_db or "", lctn)
        if cmd in DATABASE_COMMANDS:
            keys = [(ddb, None)]
        else:
            keys = [(fold(t.db, lctn) if t.db is not None else ddb, fold(t.name, lctn))
                    for t in ev.tables if t.updating]
    resolved = [(rewrite(filters, db, lctn)[0], name) for db, name in keys]
    keys_text = [db + "." + (name or "") for db, name in resolved]
    for do in (True, False):
        for key in keys_text:
            for label, pattern in _effective_patterns(filters, do):
                if like(pattern, key, lctn):
                    return Decision(do, label, pattern, (), resolved[0][0] if resolved else None)
    return Decision(True, NONE, None, (), resolved[0][0] if resolved else None)


def decide(filters: Filters, event: Event, lctn: int | Matching = 0, mode: str = "mysql",
           trace: list | None = None) -> Decision:
    """Decide one event with one channel's filters: MySQL 8.0 semantics, or WL#2516 when asked.

    `lctn` is lower_case_table_names, or a `Matching` (a state's `.matching`) that also names the mode.
    `trace`: a list that receives a `Step` per check, in MySQL's order (the last one decided)."""
    if isinstance(lctn, Matching):
        lctn, mode = lctn.lower_case_table_names, lctn.filter_mode
    if mode == "effective_database":
        d = decide_effective(filters, event, lctn)
        _note(trace, d.decided_by, "", "effective-database mode (WL#2516): the first matching do, then ignore "
              "rule decides", d.rule, d.apply)
        return d
    if isinstance(event, RowEvent):
        return decide_row(filters, event, lctn, trace)
    return decide_statement(filters, event, lctn, trace)


class Decider:
    """`decide` for many events under one channel's filters, with each (command, default database)'s steps and
    each table's rules checked once: an applier batch holds tens of thousands of distinct statements naming a
    few thousand tables. Same decisions as `decide` (tests/filters/test_evaluate.py); no trace."""

    def __init__(self, filters: Filters, matching: Matching | int = 0):
        self.filters = filters
        self.lctn, self.mode = ((matching.lower_case_table_names, matching.filter_mode)
                                if isinstance(matching, Matching) else (matching, "mysql"))
        self._starts: dict[tuple, Decision | Started] = {}
        self._checks: dict[str, tuple | None] = {}

    def decide(self, event: Event) -> Decision:
        if self.mode != "mysql":
            return decide(self.filters, event, self.lctn, self.mode)
        if isinstance(event, RowEvent):
            return decide_row(self.filters, event, self.lctn, None, self._check)
        return decide_statement(self.filters, event, self.lctn, None, self._start, self._check)

    def _start(self, filters: Filters, cmd: str, default_db: str | None, lctn: int, trace: None):
        key = (cmd in TRANSACTION_CONTROL, cmd in REWRITE_UNCOUNTED, cmd in XA_UNCOUNTED, cmd in DATABASE_COMMANDS,
               default_db)
        got = self._starts.get(key)
        if got is None:
            got = self._starts[key] = statement_start(filters, cmd, default_db, lctn)
        return got

    def _check(self, filters: Filters, key: str, lctn: int, trace: None):
        try:
            return self._checks[key]
        except KeyError:
            got = self._checks[key] = table_check(filters, key, lctn)
            return got


def decision_key(event: Event) -> tuple:
    """What `decide` reads of an event, and only that: events with equal keys get equal decisions (and
    `hit_rules`) under any filters, lower_case_table_names and mode, so a caller deciding many events may
    decide one per key. tests/filters/test_evaluate.py checks it against `decide`."""
    if isinstance(event, RowEvent):
        return ("row", event.db, event.table, event.in_xa)
    cmd = event.command.upper()
    return _statement_key(cmd, event.default_db, event.tables, event.drop_temporary_if_exists,
                          event.in_stored_program, event.trigger_table if cmd == "DROP_TRIGGER" else None)


def statement_decision_key(command: str | None, default_db: str | None,
                           tables: "tuple[TableRef, ...] | list[TableRef]" = ()) -> tuple:
    """decision_key(statement_event(command, default_db, tables)) without building the event: the batch
    applier keys tens of thousands of statements a batch, most of them decided already, and building each
    one's event took as long as deciding the rest."""
    cmd, tables, drop_temporary_if_exists, trigger_table = _statement_fields(command, tables)
    return _statement_key(cmd, default_db, tables, drop_temporary_if_exists, False, trigger_table)


def _statement_key(cmd: str, default_db: str | None, tables, drop_temporary_if_exists: bool,
                   in_stored_program: bool, trigger_table: "TableRef | None") -> tuple:
    if cmd in TRANSACTION_CONTROL:
        return ("transaction",)
    kind = (cmd in REWRITE_UNCOUNTED, cmd in XA_UNCOUNTED, cmd in DATABASE_COMMANDS,
            cmd if cmd in ("DROP_TRIGGER", "SET_OPTION") else None)
    return ("statement", kind, default_db or "", bool(tables), tuple((t.db, t.name) for t in tables if t.updating),
            drop_temporary_if_exists, in_stored_program, trigger_table)


DROP_TEMPORARY_IF_EXISTS = "DROP_TEMPORARY_TABLE_IF_EXISTS"


def statement_event(command: str, default_db: str | None,
                    tables: "tuple[TableRef, ...] | list[TableRef]" = ()) -> StatementEvent:
    """The SQL-level contract of `should_apply_statement(channel, command, default_db, tables)`.

    Two pseudo-commands carry what a flat signature cannot: `DROP_TEMPORARY_TABLE_IF_EXISTS` (exempt
    from table rules) and `DROP_TRIGGER`, whose `tables` hold the trigger's table as known on the
    replica (empty: the trigger does not exist there, so the statement is skipped).
    """
    cmd, tables, drop_temporary_if_exists, trigger_table = _statement_fields(command, tables)
    return StatementEvent(cmd, default_db, tables, drop_temporary_if_exists=drop_temporary_if_exists,
                          trigger_table=trigger_table)


def _statement_fields(command: str | None, tables) -> tuple:
    """The command, tables, drop_temporary_if_exists and trigger_table of `statement_event`'s arguments."""
    cmd = (command or "OTHER").upper()
    tables = tuple(tables)
    if cmd == DROP_TEMPORARY_IF_EXISTS:
        return "DROP_TABLE", tables, True, None
    if cmd == "DROP_TRIGGER":
        return cmd, (), False, tables[0] if tables else None
    return cmd, tables, False, None


def statement_event_of(command: str | None, default_db: str | None, tables) -> StatementEvent:
    """statement_event of a landed statement, its `tables` as the events table and Spark hold them: dicts or
    rows with db, name and updating."""
    return statement_event(command, default_db, [TableRef(t["db"], t["name"], bool(t["updating"]))
                                                 for t in tables or ()])


def applies_past_source_side(filters: Filters, source_side: Filters | None, event: Event, matching: Matching) -> bool:
    """Whether a channel applies `event` when its source-side filters (CHANGE REPLICATION SOURCE TO REPLICATE_*,
    WL#2387) are applied first, by a relay or its own ingest: what they drop never reaches its own filters."""
    return (source_side is None or decide(source_side, event, matching).apply) and \
        decide(filters, event, matching).apply
