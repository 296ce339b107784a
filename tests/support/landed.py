"""What landed in a warehouse's events table, and what the reference evaluator says a replica applies of it."""
from __future__ import annotations

from deltalake import DeltaTable

from rpl_sql.server import execute as server
from rpl_sql.filters.evaluate import RowEvent, TableRef, rewrite_db, statement_event
from rpl_sql.pipeline.events import ROW_EVENT_TYPES, events_path


def landed(warehouse, channel=None) -> list[dict]:
    """The events table's rows in seq order, of one channel (`''` = default) or all."""
    rows = DeltaTable(events_path(warehouse)).to_pyarrow_table().sort_by("seq").to_pylist()
    return [r for r in rows if channel is None or (r["channel"] or "") == channel]


def evaluator_event(row):
    """The `evaluate` event a landed row stands for (not for `gtid` marker rows)."""
    if row["event_type"] in ROW_EVENT_TYPES:
        return RowEvent(row["db_name"], row["table_name"])
    refs = [TableRef(t["db"], t["name"], bool(t["updating"])) for t in (row["tables"] or ())]
    return statement_event(row["command"], row["default_db"], refs)


def expected_applied(state, channel, rows, key):
    """The reference evaluator over a channel's landed rows, in the order given (gtid markers skipped):
    (the state after, with its counters; {key(row): (applied db after rewrite, decided_by)} of applied rows)."""
    rows = [r for r in rows if r["event_type"] != "gtid"]
    after, decisions = server.apply_events(state, channel, [evaluator_event(r) for r in rows])
    filters, lctn = after.channel(channel).filters, after.lower_case_table_names
    applied = {}
    for r, d in zip(rows, decisions):
        if d.apply:
            db = r["db_name"] if r["event_type"] in ROW_EVENT_TYPES else r["default_db"]
            applied[key(r)] = (rewrite_db(filters, db, lctn), d.decided_by)
    return after, applied
