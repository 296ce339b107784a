"""What landed in a warehouse's events table, and what the reference evaluator says a replica applies of it."""
from __future__ import annotations

from deltalake import DeltaTable

from rpl_sql.server import execute as server
from rpl_sql.filters.evaluate import RowEvent, TableRef, rewrite_db, statement_event
from rpl_sql.pipeline.events import ROW_EVENT_TYPES, events_path


def assert_delta_encoded(table_path: str, uris=None) -> None:
    """Every data file of the Delta table at `table_path` (or just `uris`) holds seq, binlog_pos and event_time
    delta-encoded without a dictionary page, as rpl_sql's writers write the events and the applied events."""
    import pyarrow.parquet as pq

    from rpl_sql.pipeline.events import DELTA_ENCODED

    for uri in uris if uris is not None else DeltaTable(table_path).file_uris():
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        for col in DELTA_ENCODED:
            chunk = meta.row_group(0).column(names.index(col))
            assert "DELTA_BINARY_PACKED" in chunk.encodings and not chunk.has_dictionary_page, \
                (uri, col, chunk.encodings)


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
