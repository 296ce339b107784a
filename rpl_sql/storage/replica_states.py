"""What each replica table is doing: replicating, being copied (rows so far, the source's estimate, the rate),
no longer replicated (since which state version), or stopped with its channel's SQL thread. Read from the
channels' catalogs, the copies' own commits and the service's status files: SHOW REPLICA TABLES and the Spark
view `rpl_sql_replica_tables` show it."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from rpl_sql.errors import MySQLError
from rpl_sql.storage import service_status
from rpl_sql.storage.delta import archive
from rpl_sql.storage.replica_catalog import (BACKFILLING, COPYING, UNREPLICATED, Catalog, TableEntry, all_tables,
                                             replica_root)

COPY_PROGRESS_KEY = "rpl_sql.copy.progress"  # a copy commit's metadata (JSON): since, ranges, rows, columns
COPY_DONE_KEY = "rpl_sql.copy.done"          # a copy's last commit (JSON): since, exact_after, rows, columns

REPLICATING, STOPPED = "replicating", "stopped"
COLUMNS = ("CHANNEL_NAME", "TABLE_SCHEMA", "TABLE_NAME", "STATE", "SINCE_VERSION", "ROWS_COPIED", "ROWS_ESTIMATE",
           "ROWS_PER_SECOND", "NOTE")


@dataclass(frozen=True)
class TableState:
    channel: str
    db: str
    name: str
    state: str                 # replicating | backfilling | copying | not replicated | stopped
    since_version: int | None  # the state version of the filter change that backfills it or stopped it
    rows_copied: int | None
    rows_estimate: int | None
    rate: float | None
    note: str

    def row(self) -> tuple:
        return (self.channel, self.db, self.name, self.state, self.since_version, self.rows_copied,
                self.rows_estimate, None if self.rate is None else round(self.rate, 1), self.note)


def copy_progress(path: str) -> dict | None:
    """The progress the newest copy commit at `path` recorded (None: no copy there). A table it cannot read
    raises: a copy that took it for none would start again from scratch."""
    dt = archive.open_existing(path)
    if dt is None:
        return None
    for info in archive.history(dt, 8):
        for key in (COPY_DONE_KEY, COPY_PROGRESS_KEY):
            if key in info:
                return json.loads(info[key])
    return None


def table_states(warehouse: str, channel: str | None = None) -> list[TableState]:
    """Every replica table's state (of one channel with `channel`), ordered by channel and name."""
    warehouse = os.fspath(warehouse)
    out = []
    errors: dict[str, list] = {}
    for ch, e in all_tables(warehouse):
        if channel is not None and ch != channel:
            continue
        if ch not in errors:
            st = service_status.read_status(warehouse, ch)
            errors[ch] = st.last_sql_error if st is not None else [0, "", ""]
        out.append(_state(warehouse, ch, e, errors[ch]))
    return sorted(out, key=lambda s: (s.channel, s.db, s.name))


def _state(warehouse: str, channel: str, e: TableEntry, error: list) -> TableState:
    copy = e.copy or {}
    version = copy.get("version")
    if e.state in (BACKFILLING, COPYING):
        try:
            got, unread = copy_progress(f"{replica_root(warehouse)}/{e.path}") or {}, ""
        except Exception as err:  # say so rather than show no rows copied
            got, unread = {}, f"; its progress cannot be read now ({type(err).__name__}: {err})"
        rows = None if unread else int(got.get("rows", 0))
        started = copy.get("at")
        rate = rows / max(time.time() - started, 1e-3) if started and rows is not None else None
        source = ".".join(copy.get("source") or [])
        note = (f"copied from {source}; its events are held and applied once the copy is done" if e.state ==
                BACKFILLING else "`rpl-sql snapshot` has not finished it: run it again to resume") + unread
        return TableState(channel, e.db, e.name, e.state, version, rows, copy.get("estimate"), rate, note)
    if e.state == UNREPLICATED:
        note = (f"the filters no longer apply it since state version {version}: it keeps its rows as they were; "
                "rpl-sql upkeep --drop-unreplicated drops it")
        return TableState(channel, e.db, e.name, e.state, version, None, None, None, note)
    if error and error[0]:
        return TableState(channel, e.db, e.name, STOPPED, None, None, None, None,
                          f"the channel's SQL thread stopped with error {error[0]}: {error[1]}")
    return TableState(channel, e.db, e.name, REPLICATING, None, None, None, None, "")


def drop_unreplicated(warehouse: str, dry_run: bool = False) -> list[tuple[str, str, str]]:
    """Remove the tables the filters no longer apply from their channels' catalogs (upkeep then deletes their
    files); (channel, db, name) of each. A channel whose SQL thread runs keeps them: it owns its catalog."""
    gone = [(ch, e) for ch, e in all_tables(os.fspath(warehouse)) if e.state == UNREPLICATED]
    for ch in sorted({ch for ch, _ in gone}):
        st = service_status.read_status(warehouse, ch)
        if st is not None and st.live() and st.sql == "Yes":
            raise MySQLError.of("ER_REPLICA_CHANNEL_SQL_THREAD_MUST_STOP", ch)
    if not dry_run:
        for ch in sorted({ch for ch, _ in gone}):
            cat = Catalog.load(warehouse, ch)
            for c, e in gone:
                if c == ch:
                    cat.drop_table(e.db, e.name)
            cat.commit(cat.seq)
    return [(ch, e.db, e.name) for ch, e in gone]
