"""A batch's applied events written by pyarrow in the driver: the applier's `arrow` engine.

The Spark engine's write (`spark_write`) without Spark: each event meets its shape's verdict by an exact
key (no hash, so no collision path), and the kept events go to Parquet with `applied_db` and `decided_by`.
With a local master the driver's machine does all the work either way, and pyarrow reads and writes these
files about 2.7 times faster than Spark does (bench/bench_apply.py prints both copies); on a cluster the
Spark engine spreads the write over the executors. tests/pipeline/test_apply.py runs both engines on the same events
and requires equal applied tables.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from rpl_sql.pipeline.applier.shapes import APPLIED_SCHEMA, SHAPE_KEYS, Shape
from rpl_sql.pipeline.events import TABLES_TYPE
from rpl_sql.pipeline.summary import tables_key
from rpl_sql.spark.deltaread import DeltaFile

_PLAIN = SHAPE_KEYS[:5]  # event_type, db_name, table_name, command, default_db
ROWS_PER_FILE = 2_000_000  # a writer thread starts a new output file past this many rows
# Events gathered from whole input files into one row group, at least. The writer holds a row group's
# dictionary-encoded pages until it ends: at 256K rows the three channels' writes took 1.37x pyarrow's copy on
# two threads, much of it the kernel's time for fresh pages; at 64K, 1.19x (docs/benchmarks.md, the applier)
ROW_GROUP_ROWS = 64 * 1024
KEY_BITS = 62  # ShapeIndex's keys stay below 2^KEY_BITS
# Text columns of few distinct values, read as the dictionaries their Parquet pages hold and written as such:
# shapes are found through the dictionary, and filtering and writing move indices instead of strings (a
# column whose values are mostly distinct, as statements and row images are, would be hashed to build one).
DICTIONARY_READ = ("event_type", "command", "statement_kind", "default_db", "db_name", "table_name", "binlog_file",
                   "source")
_TEXT_DICT = pa.dictionary(pa.int32(), pa.string())
WRITE_SCHEMA = pa.schema([pa.field(f.name, _TEXT_DICT) if f.name in DICTIONARY_READ + (
    "channel", "filter_db", "applied_db", "decided_by") else f for f in APPLIED_SCHEMA])
# snappy, as Spark writes; statistics only where Delta and readers use them (for every column they cost a
# sixth of the write); no Arrow schema, so readers see the dictionary columns as the strings they are
PARQUET_OPTIONS = {"compression": "snappy", "write_statistics": ["channel", "seq", "event_time"],
                   "store_schema": False}


def _chunks(col) -> list[pa.Array]:
    return col.chunks if isinstance(col, pa.ChunkedArray) else [col]


def _map(col, fn) -> pa.ChunkedArray:
    """fn applied to each chunk of `col`, through its dictionary where it has one: fn(dictionary) taken by the
    indices, NULL rows given fn(NULL) (one more entry past the dictionary's: one take, where an if_else over
    every row made a column's codes cost half as much again)."""
    out = []
    for c in _chunks(col):
        if not pa.types.is_dictionary(c.type):
            out.append(fn(c))
            continue
        got, indices = fn(c.dictionary), c.indices
        if indices.null_count:
            got = pa.concat_arrays([got, fn(pa.nulls(1, c.type.value_type))])
            indices = pc.fill_null(indices, len(c.dictionary))
        out.append(got.take(indices))
    if not out:
        return pa.chunked_array([], fn(pa.array([], pa.string())).type)
    return pa.chunked_array(out)


def key_columns(table: pa.Table) -> list:
    """The six shape-key columns of events (or shapes): the five plain ones and, for a statement, its tables as
    summary.tables_key text (NULL for every other event, as the shapes group them)."""
    query = _map(table.column("event_type"), lambda c: pc.fill_null(pc.equal(c, "query"), False))
    tk = pc.if_else(query, tables_key(table.column("tables")), pa.scalar(None, pa.string()))
    return [table.column(k) for k in _PLAIN] + [tk]


class ShapeIndex:
    """Shapes (a table of their key columns and `tables`) found again by events, by an integer key: each key
    column's value becomes its place among the shapes' values of that column (NULL included, if a shape has
    it; a value no shape has: NULL, which no key matches), folded into the key as a mixed-radix digit. When the
    radix product would pass 2^KEY_BITS the key so far is made dense among the shapes' prefixes first, so it never
    overflows whatever the names are. An exact key: no hash, so nothing can collide (a text key per event cost
    2.7 times as much)."""

    def __init__(self, shapes: pa.Table):
        self._values: list[pa.Array] = []     # per column: the shapes' distinct values
        self._dense: dict[int, pa.Array] = {}  # column -> the shapes' distinct keys through it, where made dense
        codes = self._encode(key_columns(shapes), build=True)
        keys = pc.unique(codes)
        if len(keys) != shapes.num_rows:
            raise ValueError("the shapes are not distinct")
        self._keys = keys
        self._row_of = pc.sort_indices(pc.index_in(codes, value_set=keys))  # a key's place -> its shape's row

    def _encode(self, columns, build: bool) -> pa.Array:
        key, bound = None, 1
        for i, col in enumerate(columns):
            if build:
                self._values.append(pc.unique(col))
            values = self._values[i]
            if build and key is not None and bound * len(values) >= 1 << KEY_BITS:
                self._dense[i] = pc.unique(key)
            if i in self._dense:
                key, bound = pc.index_in(key, value_set=self._dense[i]).cast(pa.int64()), len(self._dense[i])
            code = _map(col, lambda c: pc.index_in(c, value_set=values).cast(pa.int64()))
            key = code if key is None else pc.add(pc.multiply(key, len(values)), code)
            bound *= len(values)
        return key

    def rows(self, events: pa.Table) -> pa.Array:
        """Per event, the row of its shape; NULL where no shape has its key."""
        return self._row_of.take(pc.index_in(self._encode(key_columns(events), build=False), value_set=self._keys))


def verdicts(shapes: Sequence[Shape]) -> tuple[ShapeIndex, pa.Table]:
    """The applied shapes, indexed, and their applied_db and decided_by (dictionary-encoded) in the index's row
    order."""
    applied = [s for s in shapes if s.apply]
    keys = pa.table({**{k: pa.array([s.key[i] for s in applied], pa.string()) for i, k in enumerate(_PLAIN)},
                     "tables": pa.array([s.tables if s.kind == "query" else None for s in applied], TABLES_TYPE)})
    return ShapeIndex(keys), pa.table({
        "applied_db": pa.array([s.applied_db for s in applied], pa.string()).dictionary_encode(),
        "decided_by": pa.array([s.decided_by for s in applied], pa.string()).dictionary_encode()})


def _applied(f: DeltaFile, channel: str, lo: int, hi: int | None, index: ShapeIndex, lookup: pa.Table) -> pa.Table:
    """The events of one file in (lo, hi] that a verdict applies, in WRITE_SCHEMA."""
    fs, path = filesystem(f.path)
    with fs.open_input_file(path) as fh:
        pf = pq.ParquetFile(fh, read_dictionary=DICTIONARY_READ)
        t = pf.read(columns=[n for n in APPLIED_SCHEMA.names if n in pf.schema_arrow.names])
    seq = t.column("seq")
    keep = pc.greater(seq, lo) if hi is None else pc.and_(pc.greater(seq, lo), pc.less_equal(seq, hi))
    if not pc.all(keep).as_py():
        t = t.filter(keep)
    idx = index.rows(t)
    if idx.null_count:
        hit = pc.is_valid(idx)
        t, idx = t.filter(hit), pc.drop_null(idx)
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
            col = lookup.column(name).take(idx)
        elif name in t.column_names:
            col = t.column(name).cast(field.type)
        else:  # a column events landed by an older rpl_sql lack: NULL, as it would have been
            col = pa.nulls(n, field.type)
        out.append(col)
    return pa.Table.from_arrays(out, schema=WRITE_SCHEMA)


def _repeat(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n), pa.array([value], pa.string()))


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for a local path or a URI, and the path on it."""
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(path)
    return pafs.FileSystem.from_uri(path)


def write_applied(files: Sequence[DeltaFile], channel: str, lo: int, hi: int | None, shapes: Sequence[Shape],
                  target_dir: str, fs: pafs.FileSystem, threads: int = 2) -> int:
    """Write the applied events among `files` (the channel's, seq in (lo, hi]) under `target_dir` on `fs`; the
    number of rows written.

    The files, in seq order, are split into `threads` runs, each written by its own thread into files of up
    to ROWS_PER_FILE rows (pyarrow releases the GIL while it reads, computes and writes)."""
    if not any(s.apply for s in shapes):
        return 0
    index, lookup = verdicts(shapes)
    todo = sorted((f for f in files if _overlaps(f, lo, hi)), key=lambda f: f.min_values.get("seq") or 0)
    if not todo:
        return 0
    fs.create_dir(target_dir, recursive=True)
    runs = [todo[i * len(todo) // threads:(i + 1) * len(todo) // threads] for i in range(threads)]

    def write_run(i: int, run: list[DeltaFile]) -> int:
        written, in_file, part, writer, held = 0, 0, 0, None, []

        def flush() -> None:
            nonlocal writer, part, in_file
            if not held:
                return
            if writer is None:
                writer = pq.ParquetWriter(f"{target_dir}/part-{i:05d}-{part:03d}.snappy.parquet", WRITE_SCHEMA,
                                          filesystem=fs, **PARQUET_OPTIONS)
            rows = pa.concat_tables(held)
            writer.write_table(rows, row_group_size=rows.num_rows)
            held.clear()
            in_file += rows.num_rows
            if in_file >= ROWS_PER_FILE:
                writer.close()
                writer, part, in_file = None, part + 1, 0

        try:
            for f in run:
                t = _applied(f, channel, lo, hi, index, lookup)
                if t.num_rows == 0:
                    continue
                held.append(t)
                written += t.num_rows
                if sum(x.num_rows for x in held) >= ROW_GROUP_ROWS:
                    flush()
            flush()
        finally:
            if writer is not None:
                writer.close()
        return written

    runs = [r for r in runs if r]
    if len(runs) == 1:
        return write_run(0, runs[0])
    with ThreadPoolExecutor(len(runs), thread_name_prefix="rpl_sql-arrow-write") as pool:
        return sum(pool.map(write_run, range(len(runs)), runs))


def _overlaps(f: DeltaFile, lo: int, hi: int | None) -> bool:
    """Can the file hold seqs in (lo, hi]? (Without stats: assume so.)"""
    mn, mx = f.min_values.get("seq"), f.max_values.get("seq")
    return not ((mx is not None and mx <= lo) or (hi is not None and mn is not None and mn > hi))


def add_actions(target: str, rel_dir: str) -> tuple[list, int]:
    """AddActions (with numRecords and seq/channel stats from the footers) for the Parquet files Spark wrote."""
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
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
        actions.append(AddAction(f"{rel_dir}/{info.base_name}", info.size, {}, mtime, True, json.dumps(stats)))
    return actions, total
