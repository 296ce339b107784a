"""What landed in a warehouse's events table, and the reference evaluator's view of one landed event."""
from __future__ import annotations

from deltalake import DeltaTable

from rpl_sql.evaluate import RowEvent, TableRef, statement_event
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
