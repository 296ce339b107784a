"""A batch's applied events written by pyarrow in the driver: the applier's `arrow` engine.

The Spark engine's write (`spark_write`) without Spark: each event meets its shape's verdict by an exact
key (no hash, so no collision path), and the kept events go to Parquet with `applied_db` and `decided_by`.
With a local master the driver's machine does all the work either way, and pyarrow reads and writes these
files about 2.7 times faster than Spark does (bench/bench_apply.py prints both copies); on a cluster the
Spark engine spreads the write over the executors. tests/pipeline/test_apply.py runs both engines on the same events
and requires equal applied tables.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from rpl_sql.pipeline.applier import kept_rows
from rpl_sql.pipeline.applier.shapes import APPLIED_SCHEMA
from rpl_sql.pipeline.applier.verdicts import Verdicts
from rpl_sql.pipeline.events import DELTA_ENCODED, SHAPE_ID
from rpl_sql.server.applier_state import ApplyError
from rpl_sql.spark.deltaread import DeltaFile

ROWS_PER_FILE = 2_000_000  # a writer thread starts a new output file past this many rows
# Events gathered from whole input files into one row group, at least. The writer holds a row group's
# dictionary-encoded pages until it ends: at 256K rows the three channels' writes took 1.37x pyarrow's copy on
# two threads, much of it the kernel's time for fresh pages; at 64K, 1.19x (docs/benchmarks.md, the applier)
ROW_GROUP_ROWS = 64 * 1024
READ_AHEAD_BYTES = 256 << 20  # decoded events a ReadAhead holds at most
# Text columns of few distinct values, read as the dictionaries their Parquet pages hold and written as such:
# shapes are found through the dictionary, and filtering and writing move indices instead of strings (a
# column whose values are mostly distinct, as statements and row images are, would be hashed to build one).
DICTIONARY_READ = ("event_type", "command", "statement_kind", "default_db", "db_name", "table_name", "binlog_file",
                   "source")
_TEXT_DICT = pa.dictionary(pa.int32(), pa.string())
CONSTANT = ("channel", "filter_db")  # one value in each file: written as required columns (no levels)
ADDED = (*CONSTANT, "applied_db", "decided_by")  # what the write adds to the events' columns: text of few values
WRITE_SCHEMA = pa.schema([pa.field(f.name, _TEXT_DICT, nullable=f.name not in CONSTANT)
                          if f.name in DICTIONARY_READ + ADDED else f for f in APPLIED_SCHEMA])
# snappy, as Spark writes; statistics only where Delta and readers use them (for every column they cost a
# sixth of the write; a dictionary column's cost a hash of its indices, so the channel's, one value, are
# given to Delta by `add_actions` instead); no Arrow schema, so readers see the dictionary columns as the
# strings they are.
# Dictionary pages only for text of few values: pyarrow's default, a dictionary for every column, hashed each
# unique seq, position and time and cost more than a third of the write; those are delta-encoded instead
# (the write 31% less CPU and 26% smaller, docs/benchmarks.md, the applier).
DICTIONARY_WRITE = [*DICTIONARY_READ, *ADDED, "tables.list.element.db", "tables.list.element.name"]
PARQUET_OPTIONS = {"compression": "snappy", "write_statistics": ["seq", "event_time"],
                   "store_schema": False, "use_dictionary": DICTIONARY_WRITE,
                   "column_encoding": {c: "DELTA_BINARY_PACKED" for c in DELTA_ENCODED}}


GIL_TURN = 0.0001  # seconds a thread may hold the GIL while another waits (Python's default: 0.005)
_turns_lock = threading.Lock()
_turns_users = 0
_turns_before = 0.0


@contextmanager
def _short_gil_turns():
    """Python's switch interval set to GIL_TURN while writes run (the caller's back when the last one ends).

    The write threads call pyarrow some thirty times a file, and each call lets the GIL go; while the driver
    decides the next batch in pure Python, each of them waited a whole default interval (5 ms) to get it back:
    one channel's write ran 6-15x slower beside a looping thread, 1.3-2.3x with 0.1 ms turns
    (docs/benchmarks.md, the applier)."""
    global _turns_users, _turns_before
    with _turns_lock:
        if _turns_users == 0:
            _turns_before = sys.getswitchinterval()
            sys.setswitchinterval(min(_turns_before, GIL_TURN))
        _turns_users += 1
    try:
        yield
    finally:
        with _turns_lock:
            _turns_users -= 1
            if _turns_users == 0:
                sys.setswitchinterval(_turns_before)


class ReadAhead:
    """A batch's first files read on one thread while the driver still decides the batch: at the start of a run
    nothing is written yet and one core idles (docs/benchmarks.md, the applier). Files are read in the order the
    write threads take them, until `stop` (the write starts) or READ_AHEAD_BYTES are held; the write takes each
    table once (`take`), reading itself what was not read ahead."""

    def __init__(self, files: Sequence[DeltaFile], lo: int, hi: int | None, threads: int):
        runs = _runs(files, lo, hi, threads)
        self._order = [f.path for turn in itertools.zip_longest(*runs) for f in turn if f is not None]
        self._tables: dict[str, pa.Table] = {}
        self._reading: str | None = None
        self._stopped = self._closed = False
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rpl_sql-arrow-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        held = 0
        for path in self._order:
            with self._done:
                if self._stopped or held >= READ_AHEAD_BYTES:
                    break
                self._reading = path
            try:
                t = _read(path, threads=False)  # the other core decides
            except Exception:  # the write reads it again and reports the error
                t = None
            with self._done:
                self._reading = None
                if t is not None and not self._closed:
                    self._tables[path] = t
                    held += t.nbytes
                self._done.notify_all()
        with self._done:
            self._reading = None
            self._done.notify_all()

    def take(self, path: str) -> pa.Table | None:
        """The file's table if it was read ahead (waiting for a read under way), else None."""
        with self._done:
            while self._reading == path:
                self._done.wait()
            return self._tables.pop(path, None)

    def stop(self) -> None:
        """No more files read ahead (the one being read still is); what was read stays for `take`."""
        with self._done:
            self._stopped = True

    def close(self) -> None:
        """Stop, and drop what no write took."""
        with self._done:
            self._stopped = self._closed = True
            self._tables.clear()


def _read(path: str, threads: bool = True) -> pa.Table:
    """An events file's columns the write needs, text columns of few values as dictionaries."""
    fs, rel = filesystem(path)
    with fs.open_input_file(rel) as fh:
        pf = pq.ParquetFile(fh, read_dictionary=DICTIONARY_READ)
        return pf.read(columns=[n for n in (*APPLIED_SCHEMA.names, SHAPE_ID) if n in pf.schema_arrow.names],
                       use_threads=threads)


def _applied(f: DeltaFile, channel: str, lo: int, hi: int | None, found: Verdicts,
             ahead: ReadAhead | None = None) -> tuple[pa.Table, np.ndarray]:
    """The events of one file in (lo, hi] that a verdict applies, in WRITE_SCHEMA; and each applied shape's count
    of them."""
    t = ahead.take(f.path) if ahead is not None else None
    if t is None:
        t = _read(f.path)
    if not _within(f, lo, hi):  # by the file's statistics, else by its seqs
        seq = t.column("seq")
        keep = pc.greater(seq, lo) if hi is None else pc.and_(pc.greater(seq, lo), pc.less_equal(seq, hi))
        if not pc.all(keep).as_py():
            t = t.filter(keep)
    got = found.of_file(t)
    if got.keep is not None:  # the ids (not written) and columns of NULLs only (written as such) are not filtered
        t = t.select([c for c in t.column_names if c != SHAPE_ID and t.column(c).null_count < t.num_rows])
        t = kept_rows.take(t, got.rows, got.keep)
    n = t.num_rows
    filter_db = dict(f.partition).get("filter_db")
    out = []
    for field in WRITE_SCHEMA:
        name = field.name
        if name == "channel":  # '' reads back NULL from a Delta partition
            col = _repeat(channel, n)
        elif name == "filter_db":
            col = _repeat("" if filter_db is None else filter_db, n)
        elif name in ("applied_db", "decided_by"):
            col = getattr(got, name)
        elif name in t.column_names:
            col = t.column(name)
            if col.type != field.type:  # a call less per column where none is needed: each waits for the GIL
                col = col.cast(field.type)
        else:  # a column events landed by an older rpl_sql lack: NULL, as it would have been
            col = pa.nulls(n, field.type)
        out.append(col)
    return pa.Table.from_arrays(out, schema=WRITE_SCHEMA), got.counts


def _repeat(value: str, n: int) -> pa.DictionaryArray:
    """`value` n times, as a dictionary column (its indices numpy's zeros: pa.repeat cost 20 times as much)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value], pa.string()), safe=False)


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for a local path or a URI, and the path on it."""
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(path)
    return pafs.FileSystem.from_uri(path)


def write_applied(files: Sequence[DeltaFile], found: Verdicts, target_dir: str, fs: pafs.FileSystem,
                  threads: int = 2, ahead: ReadAhead | None = None) -> int:
    """Write the events among `files` (the channel's) that `found` applies, those of seq in its (lo, hi], under
    `target_dir` on `fs`; the number of rows written. The caller builds `found` beforehand: the applier's driver
    does while the batch before is written, so the write threads start on the files at once.

    The files, in seq order, are split into `threads` runs, each written by its own thread into files of up
    to ROWS_PER_FILE rows (pyarrow releases the GIL while it reads, computes and writes). Raises ApplyError,
    leaving what it wrote, when an event's shape id lies (`Verdicts`) or an applied shape got another count of
    events than the summaries give it. `ahead`: the batch's files read ahead with the same `threads`."""
    if ahead is not None:
        ahead.stop()
    if not len(found.counts):
        return 0
    channel, lo, hi = found.channel, found.lo, found.hi
    runs = _runs(files, lo, hi, threads)
    if not runs:
        return 0
    fs.create_dir(target_dir, recursive=True)

    def write_run(i: int, run: list[DeltaFile]) -> np.ndarray:
        in_file, part, writer, held = 0, 0, None, []
        counts = np.zeros(len(found.counts), np.int64)

        def flush() -> None:
            nonlocal writer, part, in_file
            if not held:
                return
            if writer is None:
                writer = pq.ParquetWriter(f"{target_dir}/part-{i:05d}-{part:03d}.snappy.parquet", WRITE_SCHEMA,
                                          filesystem=fs, **PARQUET_OPTIONS)
            rows = pa.concat_tables(held)
            if len(held) > 1:  # each file's own dictionaries: a column's second one sent the writer to its slower
                rows = rows.unify_dictionaries()  # path, 12% more for a channel of half-applied files
            writer.write_table(rows, row_group_size=rows.num_rows)
            held.clear()
            in_file += rows.num_rows
            if in_file >= ROWS_PER_FILE:
                writer.close()
                writer, part, in_file = None, part + 1, 0

        try:
            for f in run:
                t, got = _applied(f, channel, lo, hi, found, ahead)
                if t.num_rows == 0:
                    continue
                counts += got
                held.append(t)
                if sum(x.num_rows for x in held) >= ROW_GROUP_ROWS:
                    flush()
            flush()
        finally:
            if writer is not None:
                writer.close()
        return counts

    with _short_gil_turns():
        if len(runs) == 1:
            counts = write_run(0, runs[0])
        else:
            with ThreadPoolExecutor(len(runs), thread_name_prefix="rpl_sql-arrow-write") as pool:
                counts = sum(pool.map(write_run, range(len(runs)), runs))
    found.check()
    if not np.array_equal(counts, found.counts):
        i = int(np.flatnonzero(counts != found.counts)[0])
        raise ApplyError(f"wrote {counts[i]} events of an applied shape the summaries count {found.counts[i]} of "
                         f"(batch {lo + 1}..{'' if hi is None else hi}); nothing committed", channel)
    return int(counts.sum())


def _runs(files: Sequence[DeltaFile], lo: int, hi: int | None, threads: int) -> list[list[DeltaFile]]:
    """The files that can hold seqs in (lo, hi], in seq order, split into at most `threads` runs (none empty)."""
    todo = sorted((f for f in files if _overlaps(f, lo, hi)), key=lambda f: f.min_values.get("seq") or 0)
    runs = [todo[i * len(todo) // threads:(i + 1) * len(todo) // threads] for i in range(threads)]
    return [r for r in runs if r]


def _within(f: DeltaFile, lo: int, hi: int | None) -> bool:
    """Are all the file's seqs in (lo, hi] by its statistics? (Without them: not known.)"""
    mn, mx = f.min_values.get("seq"), f.max_values.get("seq")
    return mn is not None and mx is not None and mn > lo and (hi is None or mx <= hi)


def _overlaps(f: DeltaFile, lo: int, hi: int | None) -> bool:
    """Can the file hold seqs in (lo, hi]? (Without stats: assume so.)"""
    mn, mx = f.min_values.get("seq"), f.max_values.get("seq")
    return not ((mx is not None and mx <= lo) or (hi is not None and mn is not None and mn > hi))


def add_actions(target: str, rel_dir: str, channel: str | None = None) -> tuple[list, int]:
    """AddActions (with numRecords and seq/channel stats from the footers) for the Parquet files written under
    `target`; `channel`: every row's, for files whose footers have no channel statistics (the arrow engine's)."""
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction
    from pyarrow import fs as pafs

    fs, base = filesystem(target)
    infos = [i for i in fs.get_file_info(pafs.FileSelector(base, recursive=False))
             if i.type == pafs.FileType.File and i.base_name.endswith(".parquet")
             and not i.base_name.startswith(("_", "."))]
    actions, total = [], 0
    for info in sorted(infos, key=lambda i: i.base_name):
        with fs.open_input_file(info.path) as fh:
            md = pq.ParquetFile(fh).metadata
        if md.num_rows == 0:
            continue
        total += md.num_rows
        stats: dict[str, Any] = {"numRecords": md.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
        names = [md.schema.column(i).path for i in range(md.num_columns)]
        for col in ("channel", "seq"):
            if col not in names:
                continue
            j = names.index(col)
            rgs = [md.row_group(k).column(j).statistics for k in range(md.num_row_groups)]
            if all(s is not None and s.has_min_max and s.has_null_count for s in rgs):
                stats["minValues"][col] = min(s.min for s in rgs)
                stats["maxValues"][col] = max(s.max for s in rgs)
                stats["nullCount"][col] = sum(s.null_count for s in rgs)
        if channel is not None:
            stats["minValues"]["channel"] = stats["maxValues"]["channel"] = channel
            stats["nullCount"]["channel"] = 0
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
        actions.append(AddAction(f"{rel_dir}/{info.base_name}", info.size, {}, mtime, True, json.dumps(stats)))
    return actions, total
