"""What a filter change would do to the events already landed: each shape decided with the current and
the proposed filters (EXPLAIN CHANGE REPLICATION FILTER). Pure: the landed shapes come from the caller.

    >>> from rpl_sql.evaluate import RowEvent
    >>> # impact(before, after, {"a": [(RowEvent("shop", "orders"), 1200)]})  -> rows of IMPACT_COLUMNS
"""
from __future__ import annotations

from dataclasses import replace

from rpl_sql import server
from rpl_sql.errors import MySQLError
from rpl_sql.evaluate import Decision, Event, RowEvent, decide
from rpl_sql.state import ServerState
from rpl_sql.statements import ChangeReplicationFilter

IMPACT_COLUMNS = ("Channel", "Database", "Object", "Events", "Verdict_now", "Verdict_after", "Decided_by_now",
                  "Decided_by_after")


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
        changed: dict[tuple, int] = {}
        total = now_applied = after_applied = 0
        for ev, n in landed.get(name, []):
            d0, d1 = _decide(before, name, ev), _decide(after, name, ev)
            total += n
            now_applied += n if d0 is not None and d0.apply else 0
            after_applied += n if d1 is not None and d1.apply else 0
            k0 = (_verdict(d0), d0.decided_by if d0 else None)
            k1 = (_verdict(d1), d1.decided_by if d1 else None)
            if k0 != k1:
                key = (*_label(ev), k0, k1)
                changed[key] = changed.get(key, 0) + n
        flips = sorted(changed.items(), key=lambda kv: (kv[0][2][0] == kv[0][3][0], -kv[1], str(kv[0][:2])))
        for (db, obj, k0, k1), n in flips:
            rows.append((name, db, obj, n, k0[0], k1[0], k0[1], k1[1]))
        rows.append((name, None, "(all landed events)", total, f"APPLY {now_applied}",
                     f"APPLY {after_applied}", None, None))
    return rows
