"""Read a Delta table into Spark with or without the Delta JARs (Maven is often unreachable).

    >>> df = read_delta(spark, "/data/wh/events", partitions={"channel": ["ch1"]})  # doctest: +SKIP

With Delta Lake in the session, Spark reads the table itself. Without it, delta-rs resolves the snapshot
(which files, with which partition values) and Spark reads those files with its own Parquet reader: no row
passes through the driver. Partition values follow the Delta protocol ('' is NULL); tables the Parquet files
alone do not describe (deletion vectors, column mapping) are refused.
Details: docs/design/README.md#rpl_sqlsparkdeltaread.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlparse

import pyarrow as pa

from rpl_sql.language.quoting import ident
from rpl_sql.errors import RplSqlError
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta.log import check
from rpl_sql.spark.env import session_conf

__all__ = ["read_delta", "DeltaFile", "DeltaSnapshot", "snapshot", "UnsupportedDeltaTableError", "spark_has_delta",
           "spark_schema"]

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
MAX_LITERAL_GROUPS = 2  # more partition groups off the hive fast path: one scan + a broadcast file-name join
# Reader features whose tables the plain Parquet files still describe exactly (checked further below).
_READABLE_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "deletionVectors",
                                "columnMapping", "domainMetadata", "checkpointProtection"})
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
ENGINE_ENV = "RPL_SQL_DELTA_READER"  # 'spark' | 'delta-rs' | 'auto' (default)
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"


class UnsupportedDeltaTableError(RplSqlError, ValueError):
    """The table needs a real Delta reader (deletion vectors, column mapping, ...): install Delta Lake for Spark."""


@dataclass(frozen=True)
class DeltaFile:
    """One live data file of a snapshot: where it is, its partition values (None = NULL) and its stats."""

    path: str  # absolute local path or URI, as Spark should open it
    relative: str | None  # path relative to the table root (decoded), None for absolute add paths
    partition: tuple[tuple[str, Any], ...]
    size: int
    num_records: int | None
    min_values: Mapping[str, Any] = field(default_factory=dict)
    max_values: Mapping[str, Any] = field(default_factory=dict)

    def value(self, column: str) -> Any:
        for k, v in self.partition:
            if k == column:
                return v
        raise KeyError(column)


@dataclass(frozen=True)
class DeltaSnapshot:
    """What delta-rs resolved: version, root, Arrow schema (table column order), partition columns, files."""

    version: int
    root: str
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    files: tuple[DeltaFile, ...]


def _local(uri: str) -> str:
    """file:// URIs become plain paths (Spark and pyarrow take both; plain paths compare simply)."""
    if uri.startswith("file:"):
        return unquote(urlparse(uri).path)
    return uri


def _check_readable(dt) -> None:
    proto = dt.protocol()
    features = set(proto.reader_features or ())
    unknown = features - _READABLE_FEATURES
    if unknown:
        raise UnsupportedDeltaTableError(f"{dt.table_uri}: reader features {sorted(unknown)} need a Delta Lake reader "
                                    f"(start Spark with delta-spark, or rewrite the table without them)")
    mode = (dt.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
    if mode not in (None, "none"):
        raise UnsupportedDeltaTableError(f"{dt.table_uri}: column mapping (mode {mode!r}) renames columns inside the "
                                    f"Parquet files; reading them directly would be wrong")
    if "deletionVectors" in features:
        for batch in dt.deletion_vectors():
            if len(batch):
                raise UnsupportedDeltaTableError(f"{dt.table_uri}: deletion vectors are in use; reading the Parquet "
                                            f"files directly would resurrect deleted rows")


def _matches(partition: Mapping[str, Any], wanted: Mapping[str, Iterable[Any]] | None) -> bool:
    """Driver-side partition filter; '' and None are the same partition value (Delta protocol)."""
    if not wanted:
        return True
    for col, values in wanted.items():
        v = partition.get(col)
        v = None if v == "" else v
        if not any((None if w == "" else w) == v for w in values):
            return False
    return True


def snapshot(path: str, version: int | None = None,
             partitions: Mapping[str, Iterable[Any]] | None = None, table=None) -> DeltaSnapshot:
    """Resolve a snapshot with delta-rs: the live files (optionally only some partitions) and their stats.

    `table`: the DeltaTable of `path` already open at `version` (opening one replays the log: 0.16 s for an
    events table of 150 files). Raises UnsupportedDeltaTableError for tables the Parquet files alone do not describe.
    """
    check(path)
    dt = archive.open_table(path, version=version) if table is None else table
    _check_readable(dt)
    schema = pa.schema(dt.schema().to_arrow())
    pcols = tuple(dt.metadata().partition_columns)
    actions = pa.table(dt.get_add_actions(flatten=True))
    root = _local(dt.table_uri).rstrip("/")
    names = actions.column_names
    cols = {n: actions.column(n).to_pylist() for n in names
            if n in ("path", "size_bytes", "num_records") or n.startswith(("partition.", "min.", "max."))}
    files = []
    for i, rel in enumerate(cols["path"]):
        part = {c: cols[f"partition.{c}"][i] if f"partition.{c}" in cols else None for c in pcols}
        part = {c: (None if v == "" else v) for c, v in part.items()}
        if not _matches(part, partitions):
            continue
        decoded = unquote(rel)
        if urlparse(rel).scheme or decoded.startswith("/"):
            full, relative = _local(rel) if urlparse(rel).scheme else decoded, None
        else:
            full, relative = f"{root}/{decoded}", decoded
        mins = {n[4:]: cols[n][i] for n in cols if n.startswith("min.") and cols[n][i] is not None}
        maxs = {n[4:]: cols[n][i] for n in cols if n.startswith("max.") and cols[n][i] is not None}
        files.append(DeltaFile(full, relative, tuple(part.items()), cols["size_bytes"][i],
                               cols["num_records"][i] if "num_records" in cols else None, mins, maxs))
    return DeltaSnapshot(dt.version(), root, schema, pcols, tuple(files))


# ---------------------------------------------------------------- Arrow -> Spark types

def _spark_type(t: pa.DataType):
    from pyspark.sql import types as T

    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return T.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
        return T.BinaryType()
    simple = {pa.bool_(): T.BooleanType(), pa.int8(): T.ByteType(), pa.int16(): T.ShortType(),
              pa.int32(): T.IntegerType(), pa.int64(): T.LongType(), pa.float32(): T.FloatType(),
              pa.float64(): T.DoubleType(), pa.date32(): T.DateType()}
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz else T.TimestampNTZType()
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or getattr(pa.types, "is_list_view", lambda _: False)(t):
        return T.ArrayType(_spark_type(t.value_type), True)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(t.field(i).name, _spark_type(t.field(i).type), True)
                             for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return T.MapType(_spark_type(t.key_type), _spark_type(t.item_type), True)
    raise UnsupportedDeltaTableError(f"no Spark type for Arrow type {t}")


def spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema (every field nullable: Parquet reads never check it)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, _spark_type(f.type), True) for f in schema])


# ---------------------------------------------------------------- Spark side

_DELTA_IN_SPARK: dict[int, bool] = {}


def spark_has_delta(spark) -> bool:
    """Does this session have Delta Lake's data source? Asked once per session (the JVM class lookup is cheap;
    a failed `format('delta')` costs seconds, so Spark Connect sessions are probed only through the env)."""
    key = id(spark)
    if key not in _DELTA_IN_SPARK:
        found = False
        try:
            spark._jvm.java.lang.Class.forName("org.apache.spark.sql.delta.sources.DeltaDataSource")
            found = True
        except Exception:
            found = False
        _DELTA_IN_SPARK[key] = found
    return _DELTA_IN_SPARK[key]


def _spark_unescape(s: str) -> str:
    """Spark's ExternalCatalogUtils.unescapePathName: each %XX becomes the single char XX (not UTF-8)."""
    return _PCT.sub(lambda m: chr(int(m.group(1), 16)), s)


def _spark_reads_path_right(f: DeltaFile, pcols: tuple[str, ...], types: Mapping[str, pa.DataType]) -> bool:
    """True when Spark's hive-path parsing (with basePath = root) yields exactly the file's partition values."""
    if f.relative is None:
        return False
    dirs = f.relative.split("/")[:-1]
    if len(dirs) != len(pcols):
        return False
    for seg, col in zip(dirs, pcols):
        name, eq, raw = seg.partition("=")
        if not eq or _spark_unescape(name) != col or raw == "":
            return False
        parsed = None if raw == HIVE_NULL else _spark_unescape(raw)
        want = f.value(col)
        t = types[col]
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if parsed != want:
                return False
        elif pa.types.is_integer(t):
            if want is None:
                if parsed is not None:
                    return False
            elif parsed != str(int(want)):
                return False
        else:
            return False
    return True


def read_delta(spark, path: str, version: int | None = None, *,
               partitions: Mapping[str, Iterable[Any]] | None = None, engine: str | None = None):
    """The table (at `version`, default latest) as a Spark DataFrame with the table's columns and types.

    `partitions` ({column: [values]}) keeps only those partitions, decided on the driver from the log before
    Spark sees any file ('' and None both mean NULL). `engine`: 'spark' (Delta Lake in the session), 'delta-rs'
    (this module's file-level path) or None/'auto' (Spark's own Delta support when it has it; also
    $RPL_SQL_DELTA_READER).
    """
    engine = (engine or os.environ.get(ENGINE_ENV) or "auto").lower()
    if engine not in ("auto", "spark", "delta-rs"):
        raise ValueError(f"engine must be 'auto', 'spark' or 'delta-rs', not {engine!r}")
    if engine == "spark" or (engine == "auto" and spark_has_delta(spark)):
        return _read_with_spark_delta(spark, path, version, partitions)
    return read_snapshot(spark, snapshot(path, version, partitions))


def _read_with_spark_delta(spark, path: str, version: int | None, partitions):
    from pyspark.sql import functions as F

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(path)
    for col, values in (partitions or {}).items():
        vals = [None if v == "" else v for v in values]
        keep = [v for v in vals if v is not None]
        cond = F.col(col).isin(keep) if keep else F.lit(False)
        if any(v is None for v in vals):
            cond = cond | F.col(col).isNull() | (F.col(col) == F.lit(""))
        df = df.where(cond)
    return df


@contextlib.contextmanager
def _list_on_driver(spark, paths: list[str]):
    """Spark lists the files of `spark.read.parquet(*paths)` when the DataFrame is made; past 32 paths it runs
    a Spark job for that, which cost ~1 s for 100 local files (and ~0.15 s more per query) against ~0.15 s
    listed on the driver. The log already named every file, so local files are listed on the driver; remote
    ones keep Spark's parallel listing (one HEAD per file from the driver would be slower there)."""
    local = all(not urlparse(p).scheme or p.startswith("file:") for p in paths)
    if not local or not hasattr(spark, "_jsparkSession"):  # Spark Connect analyses (lists) later, on the server
        yield
        return
    threshold = int(spark.conf.get(_LISTING_THRESHOLD, None) or 32)
    with session_conf(spark, {_LISTING_THRESHOLD: str(max(len(paths) + 1, threshold))}):
        yield


def read_snapshot(spark, snap: DeltaSnapshot):
    """Spark DataFrame over the files of a resolved snapshot (see the module docstring for the three paths)."""
    with _list_on_driver(spark, [f.path for f in snap.files]):
        return _read_snapshot(spark, snap)


def _read_snapshot(spark, snap: DeltaSnapshot):
    from pyspark.sql import functions as F

    full = spark_schema(snap.schema)
    pcols = snap.partition_columns
    data_fields = [f for f in full.fields if f.name not in pcols]
    from pyspark.sql.types import StructType

    data_schema = StructType(data_fields)
    order = [F.col(ident(n)) for n in snap.schema.names]
    if not snap.files:
        return spark.createDataFrame([], full)
    if not pcols:
        return spark.read.schema(data_schema).parquet(*[f.path for f in snap.files]).select(*order)
    types = {c: snap.schema.field(c).type for c in pcols}
    fast = [f for f in snap.files if _spark_reads_path_right(f, pcols, types)]
    slow = ([f for f in snap.files if not _spark_reads_path_right(f, pcols, types)]
            if len(fast) < len(snap.files) else [])
    parts = []
    if fast:
        parts.append(spark.read.schema(full).option("basePath", snap.root)
                     .parquet(*[f.path for f in fast]).select(*order))
    if slow:
        groups: dict[tuple, list[DeltaFile]] = {}
        for f in slow:
            groups.setdefault(f.partition, []).append(f)
        names = [os.path.basename(f.path) for f in slow]
        if (len(groups) > MAX_LITERAL_GROUPS and len(set(names)) == len(names)
                and all(_SAFE_NAME.fullmatch(n) for n in names)):
            parts.append(_read_joined(spark, slow, data_schema, full, pcols, order))
        else:
            for part, files in groups.items():
                df = spark.read.schema(data_schema).parquet(*[f.path for f in files])
                for col, value in part:
                    df = df.withColumn(col, F.lit(value).cast(full[col].dataType))
                parts.append(df.select(*order))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def _read_joined(spark, files: list[DeltaFile], data_schema, full, pcols: tuple[str, ...], order):
    """Many partition groups off the fast path: one scan, values joined in by `_metadata.file_name`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    key = "__rpl_sql_file"
    map_schema = StructType([StructField(key, StringType(), False)] + [full[c] for c in pcols])
    rows = [(os.path.basename(f.path),) + tuple(f.value(c) for c in pcols) for f in files]
    mapping = spark.createDataFrame(rows, map_schema)
    df = (spark.read.schema(data_schema).parquet(*[f.path for f in files])
          .withColumn(key, F.col("_metadata.file_name")))
    return df.join(F.broadcast(mapping), key, "inner").select(*order)
