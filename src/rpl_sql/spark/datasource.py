"""`rpl_sql` Python data source: the live performance_schema views of a warehouse, read from Delta per query.

    CREATE OR REPLACE TEMPORARY VIEW replication_applier_filters
      USING rpl_sql OPTIONS (path '/abs/warehouse', table 'filters');

Spark registers it by itself (module `pyspark_rpl_sql`), also in plain `spark-sql`; the Python workers must be
able to import rpl_sql (`PYSPARK_PYTHON=<venv python>`). Every query reads the latest Delta version with
delta-rs, so views made this way never go stale (unlike the snapshot views of `rpl_sql.register`).
Heavy imports stay inside methods: Spark imports every `pyspark_*` module just to list the sources.
"""
from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rpl_sql import performance_schema as pfs

__all__ = ["DefaultSource", "TABLES", "HISTORY_SCHEMA", "table_schema", "table_rows"]

# Types of SHOW REPLICATION FILTER HISTORY's columns (session.HISTORY_COLUMNS, same order).
HISTORY_SCHEMA = ("VERSION BIGINT NOT NULL, COMMITTED_AT TIMESTAMP NOT NULL, CHANNEL_NAME STRING, "
                  "FILTER_NAME STRING NOT NULL, FILTER_RULE STRING NOT NULL, PREVIOUS_RULE STRING, "
                  "CONFIGURED_BY STRING, OPERATION STRING, STATEMENT STRING")

# The state's version and ServerState.filters_fingerprint(): exported functions compare it with their own.
STATE_VERSION_SCHEMA = "VERSION BIGINT, FILTERS_FINGERPRINT STRING NOT NULL"

TABLES = ("filters", "global_filters", "channels", "filter_history", "state_version")


def _check_table(table: str) -> str:
    name = (table or "").strip().lower()
    if name not in TABLES:
        raise ValueError(f"rpl_sql data source: option table={table!r} is not one of {', '.join(TABLES)}")
    return name


def table_schema(table: str) -> str:
    """Spark DDL of one table: exactly the columns and types of the matching view."""
    table = _check_table(table)
    if table == "filters":
        return pfs.FILTERS_SCHEMA
    if table == "global_filters":
        return pfs.GLOBAL_FILTERS_SCHEMA
    if table == "channels":
        return pfs.CHANNELS_SCHEMA
    if table == "state_version":
        return STATE_VERSION_SCHEMA
    return HISTORY_SCHEMA


def table_rows(warehouse: str, table: str) -> list[tuple]:
    """The rows of `table` in the warehouse's latest committed state (datetimes for TIMESTAMP columns)."""
    from rpl_sql.store import DeltaStore

    table = _check_table(table)
    store = DeltaStore(warehouse)
    if table == "filter_history":
        return [(c.version, c.committed_at, c.channel_name, c.filter_name, c.filter_rule, c.previous_rule,
                 c.configured_by, c.operation, c.statement) for c in store.filter_changes()]
    snapshot = store.load()
    state = snapshot.state
    if table == "state_version":
        return [(snapshot.version, state.filters_fingerprint())]
    if table == "filters":
        return pfs.applier_filters(state)
    if table == "global_filters":
        return pfs.applier_global_filters(state)
    return pfs.channel_rows(state)


class DefaultSource(DataSource):
    """Options: `path` (the warehouse directory) and `table` (filters | global_filters | channels |
    filter_history | state_version; default filters)."""

    @classmethod
    def name(cls) -> str:
        return "rpl_sql"

    def _table(self) -> str:
        return _check_table(self.options.get("table", "filters"))

    def schema(self) -> str:
        return table_schema(self._table())

    def reader(self, schema) -> "RplSqlReader":
        path = self.options.get("path")
        if not path:
            raise ValueError("rpl_sql data source: option path (the warehouse directory) is required")
        return RplSqlReader(path, self._table())


class RplSqlReader(DataSourceReader):
    """One partition: the state table is a few hundred rows at most."""

    def __init__(self, path: str, table: str):
        self.path = path
        self.table = table

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition) -> Iterator[tuple]:
        yield from table_rows(self.path, self.table)
