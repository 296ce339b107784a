"""What a filter change would do to the events already landed: each shape decided with the current and
the proposed filters (EXPLAIN CHANGE REPLICATION FILTER). Pure: the landed shapes come from the caller.

    >>> from rpl_sql.filters.evaluate import RowEvent
    >>> # impact(before, after, {"a": [(RowEvent("shop", "orders"), 1200)]})  -> rows of IMPACT_COLUMNS
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from rpl_sql.server import execute as server
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import (Decision, Event, RowEvent, applies_past_source_side, decide, decision_key,
                                     rewrite_db)
from rpl_sql.filters.rules import Filters, fold
from rpl_sql.filters.state import ServerState
from rpl_sql.language.statements import ChangeReplicationFilter

IMPACT_COLUMNS = ("Channel", "Database", "Object", "Events", "Verdict_now", "Verdict_after", "Decided_by_now",
                  "Decided_by_after", "Table_change", "Source_rows")
BACKFILL, STOP = "BACKFILL", "STOP REPLICATING"


def proposed(state: ServerState, change: ChangeReplicationFilter, now: int) -> ServerState:
    """The state the CHANGE would make, with its errors (a bad rule, an unknown channel); running SQL
    threads do not stop a preview."""
    idle = replace(state, channels=tuple(replace(c, sql_running=False) for c in state.channels))
    return server.change_replication_filter(idle, change, now).state


def _verdict(d: Decision | None) -> str:
    return "ERROR" if d is None else ("APPLY" if d.apply else "IGNORE")


def _decide(state: ServerState, channel: str, ev: Event) -> Decision | None:
    ch = state.channel(channel)
    try:
        return decide(ch.filters, ev, state.matching)
    except MySQLError:  # inside XA a row event that would be filtered is an error, now or after
        return None


def reference_key(state: ServerState, channel: str, ev: Event) -> tuple[str, str | None]:
    """(verdict, decided_by) of an event under the state's filters, by the reference evaluator."""
    d = _decide(state, channel, ev)
    return _verdict(d), d.decided_by if d else None


def _label(ev: Event) -> tuple[str | None, str]:
    if isinstance(ev, RowEvent):
        return ev.db, ev.table
    names = ",".join((f"{t.db}." if t.db is not None else "") + t.name + ("" if t.updating else " (read)")
                     for t in ev.tables)
    return ev.default_db, f"{ev.command} {names}".strip()


def impact(before: ServerState, after: ServerState, landed: dict[str, list[tuple[Event, int]]],
           channels: list[str]) -> list[tuple]:
    """Rows of IMPACT_COLUMNS: per channel, each (database, table or statement shape) whose verdict or
    deciding rule changes, then the channel's totals (Object '(all landed events)')."""
    rows: list[tuple] = []
    for name in channels:
        keys: dict[tuple, tuple] = {}  # shapes that read alike (evaluate.decision_key) are decided once
        decided = []
        for ev, n in landed.get(name, []):
            k = decision_key(ev)
            if k not in keys:
                keys[k] = (reference_key(before, name, ev), reference_key(after, name, ev))
            decided.append((ev, n, *keys[k]))
        rows += channel_rows(name, decided)
    return rows


def channel_rows(name: str, decided: list[tuple[Event, int, tuple, tuple]],
                 totals: tuple[int, int, int] = (0, 0, 0)) -> list[tuple]:
    """One channel's rows of IMPACT_COLUMNS from its decided shapes, (event, events, (verdict, decided_by)
    now, after): the shapes that flip, then the totals row, which adds `totals` (events, applied now,
    applied after: what was counted elsewhere) to the shapes'."""
    changed: dict[tuple, int] = {}
    total, now_applied, after_applied = totals
    for ev, n, k0, k1 in decided:
        total += n
        now_applied += n if k0[0] == "APPLY" else 0
        after_applied += n if k1[0] == "APPLY" else 0
        if k0 != k1:
            key = (*_label(ev), k0, k1)
            changed[key] = changed.get(key, 0) + n
    flips = sorted(changed.items(), key=lambda kv: (kv[0][2][0] == kv[0][3][0], -kv[1], str(kv[0][:2])))
    rows = [(name, db, obj, n, k0[0], k1[0], k0[1], k1[1], None, None) for (db, obj, k0, k1), n in flips]
    rows.append((name, None, "(all landed events)", total, f"APPLY {now_applied}", f"APPLY {after_applied}",
                 None, None, None, None))
    return rows


@dataclass
class TableChanges:
    """What a filter change does to a channel's replica tables: (source db, name, target db, target name, row
    estimate) of the tables it starts applying (backfilled from the source) and those it stops applying."""

    widened: list[tuple[str, str, str, str, int | None]] = field(default_factory=list)
    narrowed: list[tuple[str, str, str, str, int | None]] = field(default_factory=list)


def table_changes(old: Filters, new: Filters, matching, lctn: int, source_tables, old_side: Filters | None = None,
                  new_side: Filters | None = None) -> TableChanges:
    """Which source tables (db, name, row estimate) a change from `old` to `new` filters (and from `old_side` to
    `new_side` source-side filters) widens or narrows; a database REPLICATE_REWRITE_DB newly maps elsewhere is
    both (its old target stops, its new one fills)."""
    out = TableChanges()
    for db, name, estimate in source_tables:
        a = applies_past_source_side(old, old_side, RowEvent(db, name), matching)
        b = applies_past_source_side(new, new_side, RowEvent(db, name), matching)
        was = rewrite_db(old, db, lctn) if a else None
        now = rewrite_db(new, db, lctn) if b else None
        if now is not None and (was is None or fold(was, lctn) != fold(now, lctn)):
            out.widened.append((db, name, now, fold(name, lctn), estimate))
        if was is not None and (now is None or fold(was, lctn) != fold(now, lctn)):
            out.narrowed.append((db, name, was, fold(name, lctn), estimate))
    return out


def table_rows(channel: str, before: ServerState, after: ServerState, source_tables) -> list[tuple]:
    """Rows of IMPACT_COLUMNS for the replica tables of `channel` that the change from `before` to `after` would
    backfill or stop replicating, from the source's (db, name, row estimate) list."""
    lctn = before.lower_case_table_names
    was, now = before.channel(channel), after.channel(channel)
    change = table_changes(was.filters, now.filters, before.matching, lctn, source_tables, was.source_side_filters,
                           now.source_side_filters)
    rows = []
    for what, tables in ((BACKFILL, change.widened), (STOP, change.narrowed)):
        for db, name, target, tname, estimate in tables:
            now, then = reference_key(before, channel, RowEvent(db, name)), reference_key(after, channel,
                                                                                          RowEvent(db, name))
            into = "" if (fold(target, lctn), tname) == (fold(db, lctn), fold(name, lctn)) else \
                f" {'INTO' if what == BACKFILL else 'OF'} {target}.{tname}"
            rows.append((channel, db, name, None, now[0], then[0], now[1], then[1], what + into, estimate))
    return rows
