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

from rpl_sql.server import performance_schema as pfs
from rpl_sql.storage.delta.archive import local_root

__all__ = ["DefaultSource", "TABLES", "HISTORY_SCHEMA", "table_schema", "table_rows"]

# Types of SHOW REPLICATION FILTER HISTORY's columns (session.HISTORY_COLUMNS, same order).
HISTORY_SCHEMA = ("VERSION BIGINT NOT NULL, COMMITTED_AT TIMESTAMP NOT NULL, CHANNEL_NAME STRING, "
                  "FILTER_NAME STRING NOT NULL, FILTER_RULE STRING NOT NULL, PREVIOUS_RULE STRING, "
                  "CONFIGURED_BY STRING, OPERATION STRING, STATEMENT STRING")

# The state's version and ServerState.filters_fingerprint(): exported functions compare it with their own.
STATE_VERSION_SCHEMA = "VERSION BIGINT, FILTERS_FINGERPRINT STRING NOT NULL"

TABLES = ("filters", "global_filters", "channels", "rule_hits", "filter_history", "state_version", "replica",
          "replica_tables")


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
    if table == "rule_hits":
        return pfs.RULE_HITS_SCHEMA
    if table == "state_version":
        return STATE_VERSION_SCHEMA
    if table == "replica_tables":
        from rpl_sql.spark.replica_tables import TABLES_SCHEMA

        return TABLES_SCHEMA
    return HISTORY_SCHEMA


def table_rows(warehouse: str, table: str, as_of: str | None = None) -> list[tuple]:
    """The rows of `table` in the warehouse's latest committed state, or in the state in force `as_of` a
    version number or a time (SHOW REPLICATION FILTERS ... AS OF); datetimes for TIMESTAMP columns."""
    from rpl_sql.storage.store import DeltaStore

    table = _check_table(table)
    if table == "replica_tables":
        from rpl_sql.spark import replica_tables

        return replica_tables.table_rows(warehouse)
    store = DeltaStore(warehouse)
    if table == "filter_history":
        return [(c.version, c.committed_at, c.channel_name, c.filter_name, c.filter_rule, c.previous_rule,
                 c.configured_by, c.operation, c.statement) for c in store.filter_changes()]
    if as_of is not None and as_of.strip():
        snapshot = store.load_as_of(int(as_of) if as_of.strip().isdigit() else as_of)
    else:
        snapshot = store.load()
    state = snapshot.state
    if table == "state_version":
        return [(snapshot.version, state.filters_fingerprint())]
    if table == "filters":
        return pfs.applier_filters(state)
    if table == "global_filters":
        return pfs.applier_global_filters(state)
    if table == "rule_hits":
        return pfs.rule_hit_rows(state)
    return pfs.channel_rows(state)


class DefaultSource(DataSource):
    """Options: `path` (the warehouse directory) and `table` (filters | global_filters | channels | rule_hits |
    filter_history | state_version | replica | replica_tables; default filters); for `replica` also `db` and
    `name`, the replica table (read live: every query sees its latest commit); for the state's tables `as_of`, a state
    version or a time ('YYYY-MM-DD hh:mm:ss', UTC): the rows in force then."""

    @classmethod
    def name(cls) -> str:
        return "rpl_sql"

    def _table(self) -> str:
        return _check_table(self.options.get("table", "filters"))

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise ValueError("rpl_sql data source: option path (the warehouse directory) is required")
        # CREATE TABLE ... USING turns the path option into a location URI (file:/abs/dir)
        from urllib.parse import unquote, urlparse

        if path.startswith("file:"):
            path = unquote(urlparse(path).path)
        return path

    def schema(self):
        if self._table() == "replica":
            from rpl_sql.spark.deltaread import spark_schema
            from rpl_sql.storage.delta.live_files import plain_schema
            from rpl_sql.spark.replica_tables import replica_delta_table

            dt = replica_delta_table(self._path(), self.options.get("db", ""), self.options.get("name", ""))
            return spark_schema(plain_schema(dt.schema().to_arrow()))
        return table_schema(self._table())

    def reader(self, schema) -> "DataSourceReader":
        from rpl_sql.spark.replica_tables import table_identity

        ident = table_identity(schema)  # a catalog table: Spark passes no options, its columns carry them
        if ident is not None:
            return ReplicaReader(ident["path"], ident["db"], ident["name"], schema, ident.get("channel"),
                                 ident.get("columns") or {})
        if self._table() == "replica":
            return ReplicaReader(self._path(), self.options.get("db", ""), self.options.get("name", ""), schema)
        return RplSqlReader(self._path(), self._table(), self.options.get("as_of"))


class ReplicaReader(DataSourceReader):
    """One partition per data file of the table's latest version; Arrow batches in the requested columns."""

    def __init__(self, path: str, db: str, name: str, schema, channel: str | None = None,
                 renamed: dict[str, str] | None = None):
        """`channel` and `renamed` (Spark column -> source column) come from a catalog table's identity: that
        table is exactly its channel's `db`.`name`, never one spelled alike."""
        self.path, self.db, self.name, self.channel = path, db, name, channel
        self.renamed = renamed or {}
        self.columns = [f.name for f in schema.fields]

    def _table(self):
        from rpl_sql.spark.replica_tables import replica_delta_table

        return replica_delta_table(self.path, self.db, self.name, self.channel, exact=self.channel is not None)

    def partitions(self) -> list[InputPartition]:
        from rpl_sql.storage.delta.live_files import live_files

        dt = self._table()
        root = local_root(dt)
        if root is None:  # an object store: rpl_sql writes no deletion vectors there
            files = [(f, None) for f in dt.file_uris()]
        else:  # each file with its add action, whose deletion vector the read applies
            files = [(None, a) for a in live_files(root, dt.version()).adds.values()]
        return [InputPartition((dt.version(), f)) for f in files] or [InputPartition((dt.version(), None))]

    def read(self, partition) -> Iterator:
        import pyarrow as pa
        import pyarrow.dataset as ds

        from rpl_sql.storage.delta.live_files import plain_schema, read_file

        version, file = partition.value
        dt = self._table()
        dt.load_as_version(version)
        want = plain_schema(dt.schema().to_arrow())
        asked = [(c, self.renamed.get(c, c)) for c in self.columns]
        names = [source for _, source in asked if source in want.names]
        target = pa.schema([want.field(source).with_name(c) for c, source in asked if source in want.names])
        if file is None:
            return
        uri, add = file
        # every live file has the table's current columns: merges write them so, an ALTER rewrites the table
        if add is not None:
            batches = read_file(local_root(dt), add, names).to_batches()
        else:
            batches = ds.dataset(uri, format="parquet", schema=want).to_batches(columns=names)
        for batch in batches:
            yield pa.RecordBatch.from_arrays([batch.column(i).cast(f.type) for i, f in enumerate(target)],
                                             schema=target)


class RplSqlReader(DataSourceReader):
    """One partition: the state table is a few hundred rows at most."""

    def __init__(self, path: str, table: str, as_of: str | None = None):
        self.path, self.table, self.as_of = path, table, as_of

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition) -> Iterator[tuple]:
        yield from table_rows(self.path, self.table, self.as_of)
