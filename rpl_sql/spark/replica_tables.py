"""The replica tables by name in a SparkSession: `SELECT * FROM crm.orders`.

Each replica table is a table of the session catalog (`CREATE TABLE db.name USING rpl_sql OPTIONS (...)`)
read through the `rpl_sql` data source, which finds the table in the replica catalog and reads its latest
Delta commit at every query, so rows are always current. `SparkCatalogSync.sync()` makes the session's tables
match the catalogs (new tables, dropped or renamed ones, changed columns); a Session calls it before every
Spark statement it runs, so tables created by the service appear without restarting anything.
"""
from __future__ import annotations

import json
import logging
import os
import warnings
from contextlib import contextmanager
from typing import Any

from rpl_sql.compile.literals import sql_str
from rpl_sql.language.quoting import ident, qualified
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta.live_files import plain_schema
from rpl_sql.storage.replica_catalog import Catalog, TableEntry, all_tables, catalog_versions, find_table
from rpl_sql.jvm import READER_CLASS, reader_jar
from rpl_sql.spark.table_names import SparkName, spark_columns, spark_names
from rpl_sql.storage.replica_states import table_states

log = logging.getLogger(__name__)


IDENTITY = "rpl_sql replica table "  # first column's comment of a replica table in a Spark catalog


def replica_delta_table(warehouse: str, db: str, name: str, channel: str | None = None, exact: bool = False):
    """The Delta table of the replica table `db`.`name` now (after any RENAME or re-CREATE), or a clear error."""
    found = find_table(warehouse, db, name, channel, exact)
    if found is None:
        raise ValueError(f"rpl_sql: the replica has no table {db}.{name} (dropped or renamed?)")
    return _entry_table(warehouse, *found)


def _entry_table(warehouse: str, channel: str, entry: TableEntry):
    """The Delta table of a channel's catalog entry, or a clear error while it has no columns."""
    from deltalake import DeltaTable

    path = Catalog(warehouse, channel).data_path(entry)
    if not DeltaTable.is_deltatable(path):
        raise ValueError(f"rpl_sql: {entry.db}.{entry.name} has no columns yet (its CREATE TABLE was not readable; "
                         "the next row event defines it)")
    return archive.open_table(path)


def identity_comment(warehouse: str, where: SparkName, renamed: dict[str, str]) -> str:
    """The comment that names a replica table for the data source: Spark gives a catalog table's reader its
    schema (with comments) but not its OPTIONS. `renamed`: Spark column -> source column."""
    identity = {"path": warehouse, "db": where.db, "name": where.name, "channel": where.channel}
    if renamed:
        identity["columns"] = renamed
    return IDENTITY + json.dumps(identity, ensure_ascii=False)


def table_identity(schema) -> dict | None:
    fields = getattr(schema, "fields", None) or []
    comment = (fields[0].metadata or {}).get("comment", "") if fields else ""
    if isinstance(comment, str) and comment.startswith(IDENTITY):
        return json.loads(comment[len(IDENTITY):])
    return None


def _spark_type(t) -> str:
    """Spark SQL's name of an Arrow type of a replica table (no pyspark needed: the export runs without it)."""
    import pyarrow as pa

    simple = {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
              pa.float32(): "float", pa.float64(): "double", pa.date32(): "date", pa.string(): "string",
              pa.binary(): "binary", pa.bool_(): "boolean"}
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    raise ValueError(f"no Spark type for {t}")


def replica_columns_ddl(warehouse: str, where: SparkName, entry: TableEntry) -> tuple[str, bool]:
    """The Spark column list of a replica table now, its identity in the first column's comment, and whether
    some column has a Spark name of its own (its MySQL name not valid or not unique in Spark)."""
    schema = plain_schema(_entry_table(warehouse, where.channel, entry).schema().to_arrow())
    renamed = spark_columns(schema.names)
    spark_of = {source: spark for spark, source in renamed.items()}
    cols = []
    for i, f in enumerate(schema):
        col = ident(spark_of.get(f.name, f.name)) + " " + _spark_type(f.type)
        if i == 0:
            col += " COMMENT " + sql_str(identity_comment(warehouse, where, renamed), script_safe=True)
        cols.append(col)
    return ", ".join(cols), bool(renamed)


def create_statements(warehouse: str, where: SparkName, entry: TableEntry, script_safe: bool = False,
                      jvm_source: bool = False) -> list[str]:
    """The statements that (re)define a replica table in a session catalog under its Spark name, with the table's
    current columns. `jvm_source` (the session has rpl_sql's jar): read by Spark's own Parquet scan through
    READER_CLASS; else, or when a column has a Spark name of its own, by the `rpl_sql` Python data source (the first
    column's comment names the table for it)."""
    warehouse = os.path.abspath(warehouse)
    columns, renamed = replica_columns_ddl(warehouse, where, entry)
    q = lambda v: sql_str(v, script_safe=script_safe)  # noqa: E731
    if jvm_source and not renamed:
        using = (f"USING {READER_CLASS} OPTIONS (warehouse {q(warehouse)}, channel {q(where.channel)}, "
                 f"db {q(entry.db)}, name {q(entry.name)})")
    else:
        using = f"USING rpl_sql OPTIONS (table 'replica', db {q(where.db)}, name {q(where.name)})"
    target = where.quoted()
    return [f"CREATE DATABASE IF NOT EXISTS {ident(where.spark_db)}",
            f"DROP TABLE IF EXISTS {target}",
            f"CREATE TABLE {target} ({columns}) {using}"]


def replica_spark_names(warehouse: str) -> list[tuple[SparkName, TableEntry]]:
    """Every replica table's Spark name and catalog entry (one without columns yet is not defined in Spark)."""
    tables = all_tables(warehouse)
    names = spark_names([(ch, e.db, e.name) for ch, e in tables])
    return sorted(((names[(ch, e.db, e.name)], e) for ch, e in tables),
                  key=lambda t: (t[0].db, t[0].name, t[0].channel))


def table_rows(warehouse: str) -> list[tuple]:
    """rpl_sql_replica_tables: each replica table, its Spark name and why it differs or is missing, and what it is
    doing (storage/replica_states.py)."""
    states = {(t.channel, t.db, t.name): t for t in table_states(warehouse)}
    rows = []
    for n, entry in replica_spark_names(warehouse):
        st = states.get((n.channel, entry.db, entry.name))
        note, has_columns = n.why, entry.columns is not None
        if st is not None and st.note:
            note = st.note if note is None else f"{note}; {st.note}"
        elif not has_columns:
            note = "not defined in Spark yet: its CREATE TABLE was not readable; the next row event gives its columns"
        rows.append((n.channel, n.db, n.name, n.spark_db if has_columns else None,
                     n.spark_table if has_columns else None) + (
                    (st.state, st.since_version, st.rows_copied, st.rows_estimate,
                     None if st.rate is None else round(st.rate, 1)) if st is not None else (None,) * 5) + (note,))
    return rows


TABLES_SCHEMA = ("CHANNEL_NAME STRING NOT NULL, TABLE_SCHEMA STRING NOT NULL, TABLE_NAME STRING NOT NULL, "
                 "SPARK_SCHEMA STRING, SPARK_TABLE STRING, STATE STRING, SINCE_VERSION BIGINT, ROWS_COPIED BIGINT, "
                 "ROWS_ESTIMATE BIGINT, ROWS_PER_SECOND DOUBLE, NOTE STRING")


class SparkCatalogSync:
    """Keeps one SparkSession's catalog in step with the warehouse's replica tables."""

    def __init__(self, spark: Any, warehouse: str):
        self.spark, self.warehouse = spark, os.fspath(warehouse)
        self.seen: tuple | None = None
        self.jvm_source = reader_jar(spark) is not None  # Spark's own scan where the session can load the jar
        self.defined: dict[tuple[str, str], str] = {}  # Spark (db, table) -> what it was defined as

    def sync(self) -> None:
        """Define new and changed tables, drop vanished ones; a no-op unless some catalog changed."""
        versions = catalog_versions(self.warehouse)
        if versions == self.seen:
            return
        wanted = {(where.spark_db, where.spark_table): (where, e)
                  for where, e in replica_spark_names(self.warehouse) if e.columns is not None}
        for key in [k for k in self.defined if k not in wanted]:
            self.spark.sql(f"DROP TABLE IF EXISTS {qualified(*key)}")
            del self.defined[key]
        with _no_substitution(self.spark):
            for key, (where, entry) in wanted.items():
                sig = repr((where, entry))
                if self.defined.get(key) == sig:
                    continue
                try:
                    for stmt in create_statements(self.warehouse, where, entry, jvm_source=self.jvm_source):
                        self.spark.sql(stmt)
                except Exception as e:  # a table whose first commit is still being written: next sync
                    log.debug("replica table %s.%s not defined yet: %s", where.db, where.name, e)
                    continue
                if where.why is not None and key not in self.defined:
                    warnings.warn(f"rpl_sql: replica table {qualified(where.db, where.name)} is {where.quoted()} "
                                  f"in Spark ({where.why}); every table's Spark name: SELECT * FROM {TABLES_VIEW}",
                                  ReplicaNameWarning, stacklevel=2)
                self.defined[key] = sig
        self.seen = versions


class ReplicaNameWarning(UserWarning):
    """A replica table is in Spark under another name than its MySQL one."""


TABLES_VIEW = "rpl_sql_replica_tables"


@contextmanager
def _no_substitution(spark: Any):
    """Spark substitutes `${...}` even inside quotes; rpl_sql's own statements carry names, not variables."""
    key = "spark.sql.variable.substitute"
    before = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, before)
