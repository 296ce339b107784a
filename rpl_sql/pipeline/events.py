"""The canonical change-event table: one row per binlog event that a replica's applier decides.

Every source (a live binlog, Debezium JSON) lands in this shape, so the applier and `should_apply`
see one schema. The table is a Delta table partitioned by (`channel`, `filter_db`): `filter_db` is the
database a channel's database rules judge before rewrite (the table's database for row events, the
default database for statement events, '' for none), so a query whose top-level conjunct tests
(channel, filter_db) skips whole files for ignored channels and databases.
"""
from __future__ import annotations

import pyarrow as pa

TABLES_TYPE = pa.list_(pa.struct([("db", pa.string()), ("name", pa.string()), ("updating", pa.bool_())]))

# The column order is the table's; the README documents each column.
EVENTS_SCHEMA = pa.schema([
    ("channel", pa.string()),            # replication channel ('' = default)
    ("seq", pa.int64()),                 # per-channel ingest order, gapless from 1
    ("gtid", pa.string()),               # 'uuid:n' (MySQL) or 'domain-server-n' (MariaDB); NULL without GTIDs
    ("binlog_file", pa.string()),        # source binlog file of the event
    ("binlog_pos", pa.int64()),          # end position of the event in that file
    ("event_type", pa.string()),         # 'query' | 'write_rows' | 'update_rows' | 'delete_rows' | 'gtid'
    ("command", pa.string()),            # statement class (query events): evaluate.COMMANDS / pseudo-commands
    ("statement_kind", pa.string()),     # 'DML' | 'TABLE_DDL' | 'DATABASE_DDL' | 'TRANSACTION' | 'OTHER'
    ("default_db", pa.string()),         # query events: the logged default database (target db for *_DB DDL)
    ("db_name", pa.string()),            # row events: the table's database
    ("table_name", pa.string()),         # row events: the table
    ("tables", TABLES_TYPE),             # query events: referenced tables in statement order (db NULL = unqualified)
    ("statement", pa.string()),          # query events: the SQL text
    ("rows", pa.string()),               # row events: JSON list of {"before": {...}, "after": {...}} images
    ("event_time", pa.timestamp("us", tz="UTC")),  # when the source logged the event
    ("filter_db", pa.string()),          # partition: db_name for rows, coalesce(default_db, '') for queries
    ("source", pa.string()),             # 'binlog' | 'debezium'
    ("columns", pa.string()),            # row events: the table map's columns as JSON (replica/columns.py)
    # the event's row among the shapes of the rollup of the ingest compaction that wrote it (summary.py); NULL
    # until a compaction: the applier's write takes each event's verdict by it instead of finding its shape
    ("shape_id", pa.int32()),
])
SHAPE_ID = "shape_id"
PARTITION_BY = ["channel", "filter_db"]
DELTA_ENCODED = ("seq", "binlog_pos", "event_time")  # written delta-encoded, here and in the applied events

EVENT_TYPES = ("query", "write_rows", "update_rows", "delete_rows", "gtid")
ROW_EVENT_TYPES = ("write_rows", "update_rows", "delete_rows")


def events_path(warehouse: str) -> str:
    return f"{warehouse.rstrip('/')}/events"


def applied_path(warehouse: str) -> str:
    return f"{warehouse.rstrip('/')}/applied_events"
