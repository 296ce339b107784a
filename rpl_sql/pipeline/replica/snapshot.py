"""Provisioning a channel's replica from a source that already holds data: a consistent copy per table.

    rpl-sql snapshot --warehouse WH --channel shop

Every table the channel's filters apply (decided as a row event on it, then named after REPLICATE_REWRITE_DB)
is read in its own consistent read, tied to the binlog position that read saw (MariaDB: `START TRANSACTION
WITH CONSISTENT SNAPSHOT` and `binlog_snapshot_file/position`, no lock; MySQL: a brief `FLUSH TABLES WITH
READ LOCK` around `SHOW MASTER STATUS`, as mysqldump --single-transaction --master-data does). The table
lands as a replica table marked with that position, and the channel then streams from the first table's
position: events a table's copy already holds (at or before its position) are passed over for that table,
so the tables become consistent as the stream moves past the last copy. An interrupted snapshot resumes:
copied tables are in the catalog, the rest are copied when it is run again. Databases whose CREATE DATABASE
the filters apply exist on the replica too.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from rpl_sql.language.quoting import mysql_str, qualified
from rpl_sql.filters.evaluate import RowEvent, decide, rewrite_db, statement_event
from rpl_sql.filters.rules import fold
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.binlog import source_settings
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica.merge import create, write
from rpl_sql.pipeline.ingest_position import committed_position
from rpl_sql.storage.replica_catalog import Catalog, new_table_path
from rpl_sql.session import Session
from rpl_sql.filters.state import channel_key
from rpl_sql.storage.store import DeltaStore, resolve_warehouse

log = logging.getLogger(__name__)

SYSTEM_DBS = ("mysql", "information_schema", "performance_schema", "sys")


@dataclass
class SnapshotProgress:
    table: str                     # db.table being copied (source names)
    rows: int                      # rows copied of it so far
    estimate: int | None           # information_schema's row estimate
    tables_done: int               # tables finished, this one included once `finished`
    tables: int
    finished: bool = False         # the last report of this table
    seconds: float = 0.0           # since this table's copy began

    @property
    def rate(self) -> float:
        """Rows a second of this table's copy so far."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def number(self) -> int:
        """This table's number among the run's tables (1-based)."""
        return self.tables_done if self.finished else self.tables_done + 1


@dataclass
class SnapshotReport:
    channel: str
    tables: int = 0                # tables copied by this run
    skipped: int = 0               # tables a previous run had copied
    rows: int = 0
    start: tuple[str, int] | None = None   # where the channel's stream starts
    databases: list[str] = field(default_factory=list)
    seconds: float = 0.0


class SourceSnapshot:
    """One snapshot run of one channel (stopped, with no events landed yet)."""

    def __init__(self, warehouse: str | os.PathLike | None, channel: str, *, batch_rows: int = 50_000,
                 progress: Callable[[SnapshotProgress], None] | None = None):
        self.warehouse = resolve_warehouse(warehouse)
        self.channel = channel_key(channel)
        self.batch_rows, self.progress = batch_rows, progress

    def _check(self, state) -> None:
        ch = state.channel(self.channel)
        if ch is None:
            raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", self.channel)
        if not ch.configured:
            raise MySQLError.of("ER_BAD_REPLICA")
        if ch.io_running or ch.sql_running:
            raise MySQLError(3021, "HY000", "ER_REPLICA_CHANNEL_MUST_STOP",
                             f"This operation cannot be performed with a running replica io or sql thread; run "
                             f"STOP REPLICA FOR CHANNEL '{self.channel}' first.")
        if committed_position(self.warehouse, self.channel) is not None:
            raise MySQLError(3021, "HY000", "ER_REPLICA_CHANNEL_MUST_STOP",
                             f"channel '{self.channel}' has already landed events: a snapshot provisions a new "
                             f"channel (RESET REPLICA FOR CHANNEL '{self.channel}' starts it over)")

    def run(self) -> SnapshotReport:
        import pymysql

        t0 = time.monotonic()
        report = SnapshotReport(self.channel)
        state = DeltaStore(self.warehouse).load().state
        self._check(state)
        ch = state.channel(self.channel)
        settings, _ = source_settings(self.warehouse, state, self.channel)
        cat = Catalog.load(self.warehouse, self.channel, state.lower_case_table_names)
        lctn = state.lower_case_table_names
        conn = pymysql.connect(**settings, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@version")
                self.mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
                cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
                dbs = [r[0] for r in cur.fetchall() if r[0].lower() not in SYSTEM_DBS]
                cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                            "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")
                tables = [r for r in cur.fetchall() if r[0].lower() not in SYSTEM_DBS]
        finally:
            conn.close()
        for db in dbs:  # what CREATE DATABASE would have done on this replica
            if decide(ch.filters, statement_event("CREATE_DB", db, []), state.matching).apply:
                cat.add_database(db)
                report.databases.append(db)
        wanted = []
        for db, name, estimate in tables:
            if decide(ch.filters, RowEvent(db, name), state.matching).apply:
                target = rewrite_db(ch.filters, db, lctn)
                wanted.append((db, name, target, fold(name, lctn), estimate))
        cat.commit(cat.seq)
        for i, (db, name, target, tname, estimate) in enumerate(wanted):
            done = cat.table(target, tname)
            if done is not None and done.since is not None:
                report.skipped += 1
                continue
            report.rows += self._copy(settings, db, name, target, tname, cat, estimate, i, len(wanted))
            report.tables += 1
        starts = [e.since for e in cat.tables.values() if e.since is not None]
        if starts:
            report.start = min(starts)
            Session(self.warehouse).execute(
                f"CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE = {mysql_str(report.start[0])}, "
                f"SOURCE_LOG_POS = {report.start[1]} FOR CHANNEL {mysql_str(self.channel)}")
        report.seconds = time.monotonic() - t0
        return report

    def _consistent_read(self, cur) -> tuple[str, int]:
        """Open a consistent-snapshot transaction on `cur`'s connection; the binlog position it sees."""
        if self.mariadb:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            got = dict(cur.fetchall())
            return str(got["Binlog_snapshot_file"]), int(got["Binlog_snapshot_position"])
        cur.execute("FLUSH TABLES WITH READ LOCK")
        try:
            try:
                cur.execute("SHOW BINARY LOG STATUS")
            except Exception:  # MySQL before 8.2
                cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        finally:
            cur.execute("UNLOCK TABLES")
        return str(row[0]), int(row[1])

    def _copy(self, settings: dict, db: str, name: str, target: str, tname: str, cat: Catalog,
              estimate: int | None, index: int, total: int) -> int:
        """Copy one table in one consistent read; its catalog entry (with the position) commits last."""
        import pymysql
        import pymysql.cursors

        conn = pymysql.connect(**settings, autocommit=False, cursorclass=pymysql.cursors.SSCursor)
        rows, t0 = 0, time.monotonic()
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION time_zone = '+00:00'")
                since = self._consistent_read(cur)
                cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
                            "DATETIME_PRECISION, COLUMN_KEY FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                            "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (db, name))
                names = [d[0] for d in cur.description]
                cols = C.from_information_schema([dict(zip(names, r)) for r in cur.fetchall()])
                convs = [C.client_converter(c) for c in cols]
                schema = C.arrow_schema(cols)
                rel = new_table_path()  # registered only once the copy is complete
                path = f"{cat.root()}/{rel}"
                create(path, cols, self.channel, 0)
                cur.execute(f"SELECT * FROM {qualified(db, name)}")
                while True:
                    chunk = cur.fetchmany(self.batch_rows)
                    if not chunk:
                        break
                    data = [[None if v is None else f(v) for v in col] for col, f in zip(zip(*chunk), convs)]
                    table = pa.Table.from_arrays([pa.array(d, type=fld.type) for d, fld in zip(data, schema)],
                                                 schema=schema)
                    write(path, table, self.channel, 0, mode="append")
                    rows += len(chunk)
                    if self.progress is not None:
                        self.progress(SnapshotProgress(f"{db}.{name}", rows, estimate, index, total,
                                                       seconds=time.monotonic() - t0))
            conn.commit()
        finally:
            conn.close()
        cat.add_table(target, tname, cols, since, path=rel)
        cat.commit(cat.seq)
        if self.progress is not None:
            self.progress(SnapshotProgress(f"{db}.{name}", rows, estimate, index + 1, total, finished=True,
                                           seconds=time.monotonic() - t0))
        return rows


def snapshot(warehouse: str | os.PathLike | None, channel: str, **kw) -> SnapshotReport:
    """`SourceSnapshot(warehouse, channel, **kw).run()`."""
    return SourceSnapshot(warehouse, channel, **kw).run()
