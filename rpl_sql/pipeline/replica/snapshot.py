"""Provisioning a channel's replica from a source that already holds data: a copy per table, no lock.

    rpl-sql snapshot --warehouse WH --channel shop

Every table the channel's filters apply (decided as a row event on it, then named after REPLICATE_REWRITE_DB)
is copied by `table_copy.TableCopy`, without a lock: a keyed table in keyset pages between two binlog
positions, others in one consistent read. While a table is copied its catalog entry says COPYING (an SQL
thread meeting it stops instead of applying events to a partial table); run again, an interrupted snapshot
resumes after the last page it committed. The channel then streams from the earliest position of any table.
Databases whose CREATE DATABASE the filters apply exist on the replica too.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import Callable


from rpl_sql.language.quoting import mysql_str
from rpl_sql.filters.evaluate import RowEvent, applies_past_source_side, rewrite_db, statement_event
from rpl_sql.filters.rules import fold
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.binlog import source_settings
from rpl_sql.source_server.table_list import SYSTEM_DBS, source_tables
from rpl_sql.pipeline.replica.table_copy import ColumnsMovedError, TableCopy, source_columns
from rpl_sql.pipeline.ingest_position import committed_position
from rpl_sql.storage.replica_catalog import COPYING, Catalog
from rpl_sql.session import Session
from rpl_sql.filters.state import channel_key
from rpl_sql.storage.store import DeltaStore, resolve_warehouse
from rpl_sql.source_server.connection import connect

log = logging.getLogger(__name__)



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

    def __init__(self, warehouse: str | os.PathLike | None, channel: str, *, batch_rows: int = 200_000,
                 progress: Callable[[SnapshotProgress], None] | None = None, readers: int = 2):
        self.warehouse = resolve_warehouse(warehouse)
        self.channel = channel_key(channel)
        self.batch_rows, self.progress = batch_rows, progress  # rows per page (or fetch, in one consistent read)
        self.readers = readers  # key ranges read side by side (an integer primary key)

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
        t0 = time.monotonic()
        report = SnapshotReport(self.channel)
        state = DeltaStore(self.warehouse).load().state
        self._check(state)
        ch = state.channel(self.channel)
        settings, _ = source_settings(self.warehouse, state, self.channel)
        cat = Catalog.load(self.warehouse, self.channel, state.lower_case_table_names)
        lctn = state.lower_case_table_names
        conn = connect(settings, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
                dbs = [r[0] for r in cur.fetchall() if r[0].lower() not in SYSTEM_DBS]
        finally:
            conn.close()
        tables = source_tables(settings)
        for db in dbs:  # what CREATE DATABASE would have done on this replica
            if applies_past_source_side(ch.filters, ch.source_side_filters, statement_event("CREATE_DB", db, []),
                                        state.matching):
                cat.add_database(db)
                report.databases.append(db)
        wanted = []
        for db, name, estimate in tables:
            if applies_past_source_side(ch.filters, ch.source_side_filters, RowEvent(db, name), state.matching):
                target = rewrite_db(ch.filters, db, lctn)
                wanted.append((db, name, target, fold(name, lctn), estimate))
        for i, (db, name, target, tname, estimate) in enumerate(wanted):
            done = cat.table(target, tname)
            if done is not None and done.since is not None and done.state != COPYING:
                report.skipped += 1
                continue
            report.rows += self._copy(settings, db, name, target, tname, cat, estimate, i, len(wanted))
            report.tables += 1
        if not report.tables:  # the databases (a copy's first commit holds them otherwise)
            cat.commit(cat.seq)
        starts = [e.since for e in cat.tables.values() if e.since is not None]
        if starts:
            report.start = min(starts)
            Session(self.warehouse).execute(
                f"CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE = {mysql_str(report.start[0])}, "
                f"SOURCE_LOG_POS = {report.start[1]} FOR CHANNEL {mysql_str(self.channel)}")
        report.seconds = time.monotonic() - t0
        return report

    def _copy(self, settings: dict, db: str, name: str, target: str, tname: str, cat: Catalog,
              estimate: int | None, index: int, total: int) -> int:
        """Copy one table (`table_copy`); its catalog entry says it is whole only once the copy is done. An
        unfinished copy of the same columns is resumed; an ALTER during the copy starts it again."""
        t0 = time.monotonic()

        def progress(rows: int, seconds: float) -> None:
            if self.progress is not None:
                self.progress(SnapshotProgress(f"{db}.{name}", rows, estimate, index, total, seconds=seconds))
        while True:
            cols, full = source_columns(settings, db, name)
            entry = cat.table(target, tname)
            if entry is None or entry.state != COPYING or entry.columns != cols:
                cat.drop_table(target, tname)
                entry = cat.add_table(target, tname, cols, state=COPYING)
                cat.commit(cat.seq)
            copy = TableCopy(settings, db, name, cat.data_path(entry), self.channel, page_rows=self.batch_rows,
                             readers=self.readers, progress=progress)
            try:
                done = copy.run(cols, full)
                break
            except ColumnsMovedError:
                log.info("%s.%s changed during its copy: copying it again", db, name)
                cat.drop_table(target, tname)
        cat.tables[cat.key(target, tname)] = replace(entry, since=done.since, exact_after=done.exact_after, state=None)
        cat.commit(cat.seq)
        if self.progress is not None:
            self.progress(SnapshotProgress(f"{db}.{name}", done.rows, estimate, index + 1, total, finished=True,
                                           seconds=time.monotonic() - t0))
        return done.rows


def snapshot(warehouse: str | os.PathLike | None, channel: str, **kw) -> SnapshotReport:
    """`SourceSnapshot(warehouse, channel, **kw).run()`."""
    return SourceSnapshot(warehouse, channel, **kw).run()
