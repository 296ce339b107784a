"""The replica tables by name in a SparkSession: `SELECT * FROM crm.orders`.

Each replica table is a table of the session catalog (`CREATE TABLE db.name USING rpl_sql OPTIONS (...)`)
read through the `rpl_sql` data source, which finds the table in the replica catalog and reads its latest
Delta commit at every query, so rows are always current. `ReplicaTables.sync()` makes the session's tables
match the catalogs (new tables, dropped or renamed ones, changed columns); a Session calls it before every
Spark statement it runs, so tables created by the service appear without restarting anything.
"""
from __future__ import annotations

import logging
import os
from typing import Any

from rpl_sql.compile.literals import sql_str
from rpl_sql.replica_catalog import all_tables, catalog_versions
from rpl_sql.spark.datasource import replica_columns_ddl

log = logging.getLogger(__name__)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


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
