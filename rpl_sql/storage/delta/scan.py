"""A range of rows from a Delta table, read through its add actions.

delta-rs' `to_pyarrow_dataset()` builds a fragment with statistics expressions per data file: tens of
milliseconds at a few dozen files, paid on every read. A service that reads "the events after seq N" several
times a second needs only the few newest files: `read_range` picks the files whose partition values and
min/max statistics can hold the range (one Arrow table of add actions, milliseconds) and reads those with
pyarrow. `Followed` keeps a table open and brings it up to date with the new log entries only.
"""
from __future__ import annotations

import os
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyarrow import fs as pafs

from rpl_sql.storage.delta import archive

# Parquet without pre-buffering. Pre-buffering (delta-rs' own datasets turn it on) reads a file's column
# ranges ahead on pyarrow's I/O threads, whose allocator heaps keep what they freed: a loop that reads the
# newest small file of a table several times a second grew ~45 MB over 4,000 reads with it and held flat
# without it (docs/benchmarks.md, "Pre-buffered reads").
PARQUET = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))


def local_root(path: str) -> str | None:
    """The directory of a table on the local file system (None for an object store URI)."""
    if path.startswith("file://"):
        return path[7:]
    return None if "://" in path else path


def files_in_range(dt: DeltaTable, partition: dict[str, str | None], column: str, lo: int | None,
                   hi: int | None) -> list[tuple[str, dict]]:
    """(relative path, partition values) of the files in `partition` whose statistics of the integer
    `column` allow a value in (lo, hi]; files without statistics are always included."""
    acts = pa.table(dt.get_add_actions(flatten=False))
    if acts.num_rows == 0:
        return []
    keep = pa.array([True] * acts.num_rows)
    parts = acts.column("partition") if "partition" in acts.column_names else None
    for name, value in partition.items():
        got = pc.struct_field(parts, name)
        keep = pc.and_(keep, pc.is_null(got) if value is None else pc.fill_null(pc.equal(got, value), False))
    if column in acts.schema.field("min").type.names:
        mins, maxs = pc.struct_field(acts.column("min"), column), pc.struct_field(acts.column("max"), column)
        if lo is not None:
            keep = pc.and_(keep, pc.fill_null(pc.greater(maxs, lo), True))
        if hi is not None:
            keep = pc.and_(keep, pc.fill_null(pc.less_equal(mins, hi), True))
    picked = acts.filter(keep)
    values = picked.column("partition").to_pylist() if parts is not None else [{}] * picked.num_rows
    return list(zip(picked.column("path").to_pylist(), values))


def read_range(dt: DeltaTable, path: str, schema: pa.Schema, partition: dict[str, str | None], column: str,
               lo: int | None, hi: int | None, columns: list[str] | None = None,
               where: ds.Expression | None = None) -> pa.Table:
    """The rows of `partition` with lo < column <= hi (and `where`), in `schema` (columns a file lacks read
    as NULL; partition columns from the file's partition values), in no particular order."""
    cond = where
    if lo is not None:
        cond = ds.field(column) > lo if cond is None else cond & (ds.field(column) > lo)
    if hi is not None:
        cond = ds.field(column) <= hi if cond is None else cond & (ds.field(column) <= hi)
    for name, value in partition.items():
        eq = ds.field(name).is_null() if value is None else ds.field(name) == value
        cond = eq if cond is None else cond & eq
    root = local_root(path)
    if root is None:  # an object store: delta-rs' own dataset
        return dt.to_pyarrow_dataset().to_table(columns=columns, filter=cond)
    files = files_in_range(dt, partition, column, lo, hi)
    if not files:
        return _select(schema, columns).empty_table()
    exprs = []
    for _, values in files:
        e = ds.scalar(True)
        for name, v in (values or {}).items():
            e = e & (ds.field(name).is_null() if v is None else ds.field(name) == v)
        exprs.append(e)
    dset = ds.FileSystemDataset.from_paths([os.path.join(root, unquote(p)) for p, _ in files], schema=schema,
                                           format=PARQUET, filesystem=pafs.LocalFileSystem(),
                                           partitions=exprs)
    return dset.to_table(columns=columns, filter=cond)


def _select(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    return schema if columns is None else pa.schema([schema.field(c) for c in columns])


class Followed:
    """A Delta table kept open across reads; `table()` returns it brought up to its newest version."""

    def __init__(self, path: str):
        self.path = path
        self.dt: DeltaTable | None = None

    def table(self) -> DeltaTable | None:
        """The table at its newest version (None while it does not exist)."""
        if self.dt is None:
            try:
                self.dt = archive.open_table(self.path)
            except TableNotFoundError:
                return None
        else:
            try:
                self.dt.update_incremental()
            except Exception:  # replaced under us (a repair, a re-create): open it again
                self.dt = None
                return self.table()
        return self.dt
