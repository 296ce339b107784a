"""One source table copied into a replica table's Delta path, without a lock: the engine of provisioning
(`snapshot`) and of backfills on a running replica (`backfill`).

A table with a primary key is read in keyset pages (`source_read`), over key ranges read side by side, between
two binlog positions: `since`, taken before the first page, and `exact_after`, taken after the last. Events
ending at or before `since` are in every page; events between the two may find the table ahead of them and
are applied as upserts, which needs full row images (`binlog_row_image=FULL`); past `exact_after` the table is
exact. A table without a primary key, or a source with partial row images, is read in one consistent read
tied to the position it saw (MariaDB: `START TRANSACTION WITH CONSISTENT SNAPSHOT` and
`binlog_snapshot_file/position`, no lock; MySQL: a brief `FLUSH TABLES WITH READ LOCK` around `SHOW MASTER
STATUS`, as mysqldump --single-transaction --master-data does): `since` is that position, and there is no
window.

The copy's progress is in the table's own commits (COPY_PROGRESS_KEY: the positions, each range's last key, the rows so
far), so an interrupted paged copy resumes after its last page; the last commit says it is done (COPY_DONE_KEY).
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from rpl_sql.errors import MySQLError, RplSqlError
from rpl_sql.language.quoting import qualified
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica.merge import create, write
from rpl_sql.pipeline.replica.source_read import key_columns, key_ranges, read_page, table_columns
from rpl_sql.storage.delta import archive
from rpl_sql.storage.replica_states import COPY_DONE_KEY, COPY_PROGRESS_KEY, copy_progress
from rpl_sql.source_server.connection import connect

log = logging.getLogger(__name__)

# 2M rows of 5 columns landed in 0.61 s as ZSTD (26 MB), 0.89 s as delta-rs' default snappy (51 MB)
COPY_COMPRESSION = "ZSTD"

Position = tuple[str, int]


class ColumnsMovedError(RplSqlError):
    """An ALTER TABLE ran on the source during the copy: its pages disagree on the columns; copy it again."""


@dataclass(frozen=True)
class CopyResult:
    since: Position           # events ending at or before it are in the copy
    exact_after: Position | None  # events up to it may find the copy ahead of them (paged copies)
    rows: int
    columns: list[dict] | None = None


def _connect(settings: dict, **kw):
    return connect(settings, **kw)


def binlog_position(settings: dict) -> Position:
    """Where the source's binlog ends now: a watermark around a paged copy."""
    import pymysql

    conn = _connect(settings, autocommit=True)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute("SHOW BINARY LOG STATUS")
            except pymysql.err.MySQLError:  # MariaDB, MySQL before 8.2
                cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
    finally:
        conn.close()
    if row is None:
        raise MySQLError.of("ER_UNKNOWN_ERROR", "the source has no binary log (log_bin=OFF): nothing to follow")
    return str(row[0]), int(row[1])


def source_columns(settings: dict, db: str, name: str) -> tuple[list[dict], bool]:
    """The table's columns on the source, and whether the source logs full row images."""
    conn = _connect(settings, autocommit=True)
    try:
        with conn.cursor() as cur:
            cols = table_columns(cur, db, name)
            cur.execute("SELECT @@GLOBAL.binlog_row_image")
            return cols, str(cur.fetchone()[0]).upper() == "FULL"
    finally:
        conn.close()


def copy_done(path: str) -> CopyResult | None:
    """The finished copy recorded at `path` (None: unfinished, or no copy)."""
    got = copy_progress(path)
    if got is None or "exact_after" not in got:
        return None
    return CopyResult(tuple(got["since"]), tuple(got["exact_after"]) if got["exact_after"] else None,
                      int(got["rows"]), got.get("columns"))


class TableCopy:
    """Copies `db.name` of the source into the Delta table at `path` (created, or resumed when it holds an
    unfinished paged copy of the same columns)."""

    def __init__(self, settings: dict, db: str, name: str, path: str, channel: str, *, page_rows: int = 200_000,
                 readers: int = 2, progress: Callable[[int, float], None] | None = None,
                 stop: threading.Event | None = None):
        self.settings, self.db, self.name, self.path, self.channel = settings, db, name, path, channel
        self.page_rows, self.readers, self.progress = page_rows, readers, progress
        self.stop = stop or threading.Event()

    def run(self, cols: list[dict], full_images: bool) -> CopyResult:
        if key_columns(cols) and full_images:
            return self._pages(cols)
        return self._consistent(cols)

    def _commit(self, table, rows: pa.Table, meta: dict) -> None:
        write(table, rows, self.channel, 0, mode="append", compression=COPY_COMPRESSION,
              metadata={k: json.dumps(v, ensure_ascii=False) for k, v in meta.items()})

    def _pages(self, cols: list[dict]) -> CopyResult:
        known = copy_progress(self.path)  # an unfinished paged copy of these columns is resumed
        if known is not None and known.get("ranges") and known.get("columns") == cols:
            since, ranges, rows = tuple(known["since"]), known["ranges"], int(known["rows"])
            log.info("%s.%s: its copy resumes after %d rows (%s)", self.db, self.name, rows, self.path)
        else:
            if known is not None or archive.open_existing(self.path) is not None:
                why = "holds no copy" if known is None else "was done or not paged" if not known.get("ranges") \
                    else "was of other columns"
                log.info("%s.%s is copied from its start: the table at %s %s", self.db, self.name, self.path, why)
            since = binlog_position(self.settings)
            bounds = key_ranges(self.settings, self.db, self.name, cols, self.readers)
            # per key range: [key of the last row copied (None: none yet), inclusive upper bound, finished]
            ranges = [[None if k == 0 else [str(bounds[k - 1])], upto, False] for k, upto in enumerate(bounds)]
            rows = 0
            create(self.path, cols, self.channel, 0, metadata={COPY_PROGRESS_KEY: json.dumps(
                {"since": since, "ranges": ranges, "rows": 0, "columns": cols}, ensure_ascii=False)})
        t0 = time.monotonic()
        table = archive.open_existing(self.path)
        pages = _read_ahead(self.settings, self.db, self.name, cols, ranges, self.page_rows, self.stop)
        while True:
            try:
                k, page = next(pages)
            except StopIteration:
                break
            except Exception:  # a column an ALTER dropped, say
                if source_columns(self.settings, self.db, self.name)[0] != cols:
                    raise ColumnsMovedError(f"{self.db}.{self.name} changed during its copy") from None
                raise
            if page.last_key is None:
                ranges[k][2] = True  # recorded with the next page (a resumed copy reads one empty page again)
                continue
            rows += page.rows.num_rows
            ranges[k][0] = list(page.last_key)
            self._commit(table, page.rows, {COPY_PROGRESS_KEY: {"since": since, "ranges": ranges, "rows": rows,
                                                       "columns": cols}})
            if self.progress is not None:
                self.progress(rows, time.monotonic() - t0)
        if self.stop.is_set():
            raise InterruptedError(f"the copy of {self.db}.{self.name} was stopped")
        exact_after = binlog_position(self.settings)
        if source_columns(self.settings, self.db, self.name)[0] != cols:
            raise ColumnsMovedError(f"{self.db}.{self.name} changed during its copy")
        self._commit(table, C.arrow_schema(cols).empty_table(),
                     {COPY_DONE_KEY: {"since": since, "exact_after": exact_after, "rows": rows, "columns": cols}})
        return CopyResult(since, exact_after, rows, cols)

    def _consistent(self, cols: list[dict]) -> CopyResult:
        import pymysql.cursors

        conn = _connect(self.settings, autocommit=False, cursorclass=pymysql.cursors.SSCursor)
        rows, t0 = 0, time.monotonic()
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION time_zone = '+00:00'")
                since = consistent_read(cur)
                if table_columns(cur, self.db, self.name) != cols:
                    raise ColumnsMovedError(f"{self.db}.{self.name} changed before its copy")
                convs = [C.client_converter(c) for c in cols]
                schema = C.arrow_schema(cols)
                create(self.path, cols, self.channel, 0, metadata={COPY_PROGRESS_KEY: json.dumps(
                    {"since": since, "ranges": None, "rows": 0, "columns": cols}, ensure_ascii=False)})
                table = archive.open_existing(self.path)
                cur.execute(f"SELECT * FROM {qualified(self.db, self.name)}")
                while not self.stop.is_set():
                    chunk = cur.fetchmany(self.page_rows)
                    if not chunk:
                        break
                    data = [[None if v is None else f(v) for v in col] for col, f in zip(zip(*chunk), convs)]
                    rows += len(chunk)
                    self._commit(table, pa.Table.from_arrays(
                        [pa.array(d, type=fld.type) for d, fld in zip(data, schema)], schema=schema),
                        {COPY_PROGRESS_KEY: {"since": since, "ranges": None, "rows": rows, "columns": cols}})
                    if self.progress is not None:
                        self.progress(rows, time.monotonic() - t0)
            conn.commit()
        finally:
            conn.close()
        if self.stop.is_set():
            raise InterruptedError(f"the copy of {self.db}.{self.name} was stopped")
        self._commit(table, schema.empty_table(),
                     {COPY_DONE_KEY: {"since": since, "exact_after": None, "rows": rows, "columns": cols}})
        return CopyResult(since, None, rows, cols)


def consistent_read(cur) -> Position:
    """Open a consistent-snapshot transaction on `cur`'s connection; the binlog position it sees."""
    cur.execute("SELECT @@version")
    if "mariadb" in str(cur.fetchone()[0]).lower():
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


def _read_ahead(settings: dict, db: str, name: str, cols: list[dict], ranges: list[list], rows: int,
                stop: threading.Event):
    """(range index, page) of every unfinished key range, each range read on its own thread while the caller
    lands the pages (the reader and delta-rs both work outside the GIL); a range's last page has no rows."""
    out: queue.Queue = queue.Queue(maxsize=2)
    done = threading.Event()

    def read(k: int, after: list | None, upto: int | None) -> None:
        key = tuple(after) if after is not None else None
        try:
            while not done.is_set() and not stop.is_set():
                page = read_page(settings, db, name, cols, key, rows, upto=upto)
                out.put((k, page))
                if page.last_key is None:
                    return
                key = page.last_key
        except BaseException as e:  # handed to the caller, which raises it
            out.put((k, e))
        finally:
            out.put((k, None))

    threads = [threading.Thread(target=read, args=(k, after, upto), name=f"rpl_sql-copy-reader-{k}", daemon=True)
               for k, (after, upto, finished) in enumerate(ranges) if not finished]
    for t in threads:
        t.start()
    running = len(threads)
    try:
        while running:
            k, got = out.get()
            if got is None:
                running -= 1
                continue
            if isinstance(got, BaseException):
                raise got
            yield k, got
    finally:
        done.set()
        while any(t.is_alive() for t in threads):  # let readers blocked on a full queue see `done`
            try:
                out.get(timeout=0.05)
            except queue.Empty:
                pass
