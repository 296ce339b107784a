"""The replica tables by name in a SparkSession: `SELECT * FROM crm.orders`.

Each replica table is a table of the session catalog (`CREATE TABLE db.name USING rpl_sql OPTIONS (...)`)
read through the `rpl_sql` data source, which finds the table in the replica catalog and reads its latest
Delta commit at every query, so rows are always current. `ReplicaTables.sync()` makes the session's tables
match the catalogs (new tables, dropped or renamed ones, changed columns); a Session calls it before every
Spark statement it runs, so tables created by the service appear without restarting anything.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

from rpl_sql.compile.literals import sql_str
from rpl_sql.delta import archive
from rpl_sql.replica_catalog import Catalog, all_tables, catalog_versions, find_table, plain_schema

log = logging.getLogger(__name__)


IDENTITY = "rpl_sql replica table "  # first column's comment of a replica table in a Spark catalog


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def replica_delta_table(warehouse: str, db: str, name: str):
    """The Delta table of the replica table `db`.`name` now (after any RENAME or re-CREATE), or a clear error."""
    from deltalake import DeltaTable

    found = find_table(warehouse, db, name)
    if found is None:
        raise ValueError(f"rpl_sql: the replica has no table {db}.{name} (dropped or renamed?)")
    channel, entry = found
    path = Catalog(warehouse, channel).data_path(entry)
    if not DeltaTable.is_deltatable(path):
        raise ValueError(f"rpl_sql: {db}.{name} has no columns yet (its CREATE TABLE was not readable; the next "
                         "row event defines it)")
    return archive.open_table(path)


def identity_comment(warehouse: str, db: str, name: str) -> str:
    """The comment that names a replica table for the data source: Spark gives a catalog table's reader its
    schema (with comments) but not its OPTIONS."""
    return IDENTITY + json.dumps({"path": warehouse, "db": db, "name": name}, ensure_ascii=False)


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


def replica_columns_ddl(warehouse: str, db: str, name: str) -> str:
    """The Spark column list of a replica table now, its identity in the first column's comment."""
    schema = plain_schema(replica_delta_table(warehouse, db, name).schema().to_arrow())
    cols = []
    for i, f in enumerate(schema):
        col = _q(f.name) + " " + _spark_type(f.type)
        if i == 0:
            col += " COMMENT " + sql_str(identity_comment(warehouse, db, name), script_safe=True)
        cols.append(col)
    return ", ".join(cols)


def create_statements(warehouse: str, db: str, name: str, script_safe: bool = False) -> list[str]:
    """The statements that (re)define `db`.`name` in a session catalog over the rpl_sql data source, with the
    table's current columns (the first one's comment names the table for the data source)."""
    warehouse = os.path.abspath(warehouse)
    opts = (f"table 'replica', db {sql_str(db, script_safe=script_safe)}, "
            f"name {sql_str(name, script_safe=script_safe)}")
    return [f"CREATE DATABASE IF NOT EXISTS {_q(db)}",
            f"DROP TABLE IF EXISTS {_q(db)}.{_q(name)}",
            f"CREATE TABLE {_q(db)}.{_q(name)} ({replica_columns_ddl(warehouse, db, name)}) USING rpl_sql "
            f"OPTIONS ({opts})"]


class ReplicaTables:
    """Keeps one SparkSession's catalog in step with the warehouse's replica tables."""

    def __init__(self, spark: Any, warehouse: str):
        self.spark, self.warehouse = spark, os.fspath(warehouse)
        self.seen: tuple | None = None
        self.defined: dict[tuple[str, str], str] = {}  # (db, name) -> the columns it was defined with

    def sync(self) -> None:
        """Define new and changed tables, drop vanished ones; a no-op unless some catalog changed."""
        versions = catalog_versions(self.warehouse)
        if versions == self.seen:
            return
        wanted: dict[tuple[str, str], str] = {}
        for channel, e in all_tables(self.warehouse):
            key = (e.db, e.name)
            if e.columns is None:
                continue
            if key in wanted:
                log.warning("replica table %s.%s is kept by two channels; Spark shows the first", *key)
                continue
            wanted[key] = repr(e.columns) + e.path
        for key in [k for k in self.defined if k not in wanted]:
            self.spark.sql(f"DROP TABLE IF EXISTS {_q(key[0])}.{_q(key[1])}")
            del self.defined[key]
        for key, sig in wanted.items():
            if self.defined.get(key) == sig:
                continue
            try:
                for stmt in create_statements(self.warehouse, *key):
                    self.spark.sql(stmt)
            except Exception as e:  # a table whose first commit is still being written: next sync
                log.debug("replica table %s.%s not defined yet: %s", *key, e)
                continue
            self.defined[key] = sig
        self.seen = versions
