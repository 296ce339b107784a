"""One replica table's row changes of a batch, checked as a MySQL replica checks them, in one Delta merge.

The changes are replayed in source order over what the table holds for the keys they touch (looked up
first): a key by the primary key, or by the whole row where the table has none (then identical rows are
counted, and deleting one of two deletes one). STRICT mode raises MySQL's errors where a replica's SQL
thread stops (1062 a duplicate key, 1032 a row that is not there); IDEMPOTENT mode (replica_exec_mode)
overwrites and skips instead. The net effect is one merge commit carrying the table's replica position.
"""
from __future__ import annotations

import base64
import os
import datetime as _dt
import decimal
from collections import Counter
from typing import Any, Iterable
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from rpl_sql.language.quoting import ident
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta import dv_commit
from rpl_sql.storage.delta import log as deltalog
from rpl_sql.storage.delta.deletion_vectors import in_sorted
from rpl_sql.storage.delta.live_files import ROW, deleted_rows, live_files, plain_schema, read_file, read_table
from rpl_sql.storage.upkeep import compact_growing_table
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica import key_index
from rpl_sql.storage.replica_catalog import CHANNEL_KEY

OP = "__rpl_sql_op"
# Table versions between compactions of its small files (a replica table grows a file a merge), never at a
# version a checkpoint is written at (every 100, unless the table sets delta.checkpointInterval), and at most
# SERVICE_STEP_BYTES of files each: a batch that compacted 16 MB as it checkpointed took 2-4 s at 50M rows, over
# the lag's p99 on its own.
COMPACT_EVERY = 50
SERVICE_STEP_BYTES = 8 << 20
SERVICE_PURGE_RATIO = 0.2  # the service rewrites a file whose deletion vector deletes this share (upkeep: 5%)


class ReplicaRowError(MySQLError):
    """A row change a STRICT replica refuses (MySQL error 1032 or 1062): the channel's SQL thread stops."""

    seq: int | None = None  # the refused change's event


def _err(code: int, name: str, sqlstate: str, msg: str, seq: int | None = None) -> ReplicaRowError:
    e = ReplicaRowError(code, sqlstate, name, msg)
    e.seq = seq
    return e


def table_seq(path: str, channel: str) -> int:
    """The last seq merged into the table at `path` (0 when it has none)."""
    dt = archive.open_existing(path)
    return (dt.transaction_version(delta_commit.app_id("replica", channel)) or 0) if dt is not None else 0


def create(path: str, columns: list[dict], channel: str, seq: int, metadata: dict[str, str] | None = None) -> None:
    """An empty table with the columns (or one replacing what is at `path`)."""
    empty = C.arrow_schema(columns).empty_table()
    write(path, empty, channel, seq, mode="overwrite", metadata=metadata)


def _position(channel: str, seq: int) -> dict:
    """A replica table commit's position: the channel's seq as commit metadata and app transaction."""
    return {"metadata": {CHANNEL_KEY: channel, "rpl_sql.replica.seq": str(seq)},
            "app": (delta_commit.app_id("replica", channel), seq), "checkpoint": True}


def _commit_properties(channel: str, seq: int) -> dict:
    """A replica table commit's properties, for delta-rs calls that take them (the merge)."""
    return delta_commit.properties(**_position(channel, seq))


def write(target: str | DeltaTable, data: pa.Table, channel: str, seq: int, *, mode: str,
          metadata: dict[str, str] | None = None, compression: str | None = None) -> None:
    """A replica table commit through delta/commit, with the channel's position (an overwrite may change the
    columns: an ALTER's reshape) and any further `metadata` (a copy's page)."""
    exists = isinstance(target, DeltaTable) or DeltaTable.is_deltatable(target)
    position = _position(channel, seq)
    position["metadata"].update(metadata or {})
    delta_commit.write(target, data, mode=mode, create=not exists, **position, compression=compression,
                       schema_mode="overwrite" if exists and mode == "overwrite" else None,
                       configuration=dv_commit.CONFIGURATION if deletes_by_vectors() else None)


class Changes:
    """A table's row images of one batch, in source order: ('write'|'update'|'delete', before, after)."""

    def __init__(self, columns: list[dict]):
        self.columns = columns
        self.convs = C.converters(columns)
        self.items: list[tuple[str, tuple | None, tuple | None]] = []
        self.seqs: list[int] = []  # the seq of each item's event: a refused change names its transaction
        # per item: the table was copied in pages while the event ran, so the row may already be as it leaves
        # it (upsert the after image; a delete of a missing row is done)
        self.lenient: list[bool] = []
        self.last_seq = 0

    def _row(self, image: dict | None) -> tuple | None:
        if image is None:
            return None
        return tuple(None if (v := image.get(n)) is None else f(v) for n, f in self.convs)

    def add(self, seq: int, event_type: str, images: Iterable[dict], lenient: bool = False) -> None:
        kind = event_type.split("_")[0]
        for im in images:
            self.items.append((kind, self._row(im.get("before")), self._row(im.get("after"))))
            self.seqs.append(seq)
            self.lenient.append(lenient)
        self.last_seq = max(self.last_seq, seq)

    def __len__(self) -> int:
        return len(self.items)


Positions = dict[tuple, list[tuple[str, int]]]  # key -> (file's log path, row index) of each row holding it


def _lookup(dt: DeltaTable, root: str, columns: list[dict], key_idx: list[int],
            keys: set[tuple]) -> tuple[Counter, Positions]:
    """How many live rows the table holds per key (PK: 0 or 1; whole-row keys: any count), and where they are
    (local tables: the file and row index that a deletion vector names)."""
    if not keys or dt is None:
        return Counter(), {}
    names = [columns[i]["name"] for i in key_idx]
    first = names[0]
    vals = [k[0] for k in keys]
    non_null = [v for v in vals if v is not None]
    nulls = len(non_null) < len(vals)
    # The key columns are read and filtered here (delta-rs' file statistics for strings are typed string
    # while its scan reads string_view, which a pushed-down filter cannot compare); for an integer or text
    # key only the files whose min/max statistics can hold a touched key are read (keys that grow skip all
    # but the newest files). Rows that a file's deletion vector removes are not held. Every file of a
    # version has the table's columns, as an ALTER rewrites the whole table (reshape).
    local = archive.local_root(root)
    if local is None:  # an object store: delta-rs' own dataset (rpl_sql writes no deletion vectors there)
        parts = [(None, _plain(dt.to_pyarrow_dataset().to_table(columns=names)))]
    else:
        kind = C.arrow_type(columns[key_idx[0]])
        live = live_files(local, dt.version()).by_path()
        files = _files_for(dt, local, first if pa.types.is_integer(kind) or pa.types.is_string(kind) else None,
                           non_null, nulls)
        if len(names) == 1 and pa.types.is_integer(kind) and not nulls and columns[key_idx[0]].get("pk"):
            return _lookup_integer_key(local, live, files, first, non_null)
        parts = [(f, _plain(read_file(local, live[f], names, keep_positions=True))) for f in files]
    got: Counter = Counter()
    where: Positions = {}
    for f, t in parts:
        col = t.column(first)
        mask = pc.is_in(col, value_set=pa.array(non_null, type=col.type)) if non_null else \
            pa.array([False] * t.num_rows)
        if nulls:
            mask = pc.or_(mask, pc.is_null(col))
        hit = t.filter(mask)
        if not hit.num_rows:
            continue
        found = list(zip(*(hit.column(n).to_pylist() for n in names)))
        rows = hit.column(ROW).to_pylist() if ROW in hit.column_names else [None] * len(found)
        for k, i in zip(found, rows):
            if k in keys:
                got[k] += 1
                where.setdefault(k, []).append((f, i))
    return got, where


def _lookup_integer_key(root: str, live: dict, files: list[str], column: str,
                        values: list[int]) -> tuple[Counter, Positions]:
    """_lookup for a one-column integer primary key: each file's keys searched sorted in memory
    (key_index), less the rows its deletion vector removed."""
    wanted = np.unique(np.array(values, dtype=np.int64))
    got: Counter = Counter()
    where: Positions = {}
    for f in files:
        rows, found = key_index.find(os.path.join(root, unquote(live[f]["path"])), column, wanted)
        if not len(rows):
            continue
        gone = deleted_rows(root, live[f])  # sorted
        if gone is not None and len(gone):
            keep = ~in_sorted(gone.astype(np.int64), rows)
            rows, found = rows[keep], found[keep]
        for k, i in zip(found.tolist(), rows.tolist()):
            got[(k,)] += 1
            where.setdefault((k,), []).append((f, i))
    return got, where


def _plain(t: pa.Table) -> pa.Table:
    schema = plain_schema(t.schema)
    return t if schema == t.schema else t.cast(schema)


# Parquet writers cut a text column's statistics to a prefix (delta-rs: 64 bytes of UTF-8, at a character's
# end): a cut minimum is still a lower bound; a maximum that may have been cut is not used.
CUT_TEXT_STATISTICS = 64 - 3


def _files_for(dt: DeltaTable, root: str, column: str | None, values: list, nulls: bool) -> list[str]:
    """The table's data files (log paths) whose statistics for `column` (an integer or text) allow one of
    `values`; all of them without a column or without statistics. Text compares by code point, as UTF-8 bytes
    do."""
    acts = pa.table(dt.get_add_actions(flatten=True))
    lo_name, hi_name, nn_name = f"min.{column}", f"max.{column}", f"null_count.{column}"
    if column is None or lo_name not in acts.column_names or hi_name not in acts.column_names:
        return acts.column("path").to_pylist() if acts.num_rows else []
    lo_v, hi_v = (min(values), max(values)) if values else (None, None)
    out = []
    for path, lo, hi, nn in zip(acts.column("path").to_pylist(), acts.column(lo_name).to_pylist(),
                                acts.column(hi_name).to_pylist(),
                                acts.column(nn_name).to_pylist() if nn_name in acts.column_names
                                else [None] * acts.num_rows):
        if lo is None or hi is None:
            if nn is None or not values or nulls:  # no statistics, or an all-NULL file that a NULL key may hit
                out.append(path)
            continue
        if isinstance(hi, str) and len(hi.encode("utf-8")) >= CUT_TEXT_STATISTICS:
            hi = None
        if (values and (hi is None or hi >= lo_v) and lo <= hi_v) or (nulls and (nn is None or nn > 0)):
            out.append(path)
    return out


def apply_changes(path: str, changes: Changes, channel: str, *, strict: bool, table_label: str,
                  table: DeltaTable | None = None, attempts: int = 3) -> int:
    """Merge `changes` into the table at `path` in one commit; returns the number of rows changed.

    `table`: the table at `path` as its writer keeps it open (its state moves with each commit made through
    it), so that a batch does not replay the log since the last checkpoint to open it. `rpl-sql upkeep` may
    compact the table between two batches: the table is brought up to its newest version first, and a merge
    that a compaction overtook (delta-rs refuses its commit, nothing written) is done again on the new one."""
    cols = changes.columns
    pk = [i for i, c in enumerate(cols) if c.get("pk")]
    whole = not pk
    key_idx = pk or list(range(len(cols)))

    def key(row: tuple) -> tuple:
        return tuple(row[i] for i in key_idx)

    touched: set[tuple] = set()
    for _, before, after in changes.items:
        for r in (before, after):
            if r is not None:
                touched.add(key(r))
    dt = table if table is not None else archive.open_existing(path)
    if table is not None and archive.local_root(path) is not None and \
            (deltalog.latest_version(path) or 0) > dt.version():
        dt.update_incremental()
    by_vectors = not whole and dt is not None and archive.local_root(path) is not None and deletes_by_vectors()
    held, where = _lookup(dt, path, cols, key_idx, touched)
    count: dict[tuple, int] = {}
    final: dict[tuple, tuple | None] = {}  # PK tables: the row a key ends with (None: deleted)
    added: dict[tuple, list[tuple]] = {}   # whole-row keys: rows to insert

    def n(k: tuple) -> int:
        return count[k] if k in count else held.get(k, 0)

    def show(row: tuple) -> str:
        return "-".join("NULL" if row[i] is None else str(row[i]) for i in key_idx)[:192]

    for (kind, before, after), seq, lenient in zip(changes.items, changes.seqs, changes.lenient):
        lenient = lenient and not whole
        if kind in ("update", "delete"):
            kb = key(before)
            if n(kb) == 0 and lenient:
                final[kb] = None  # a paged copy read the table after this change: it is already done
            elif n(kb) == 0:
                if strict:
                    raise _err(1032, "HA_ERR_KEY_NOT_FOUND", "HY000",
                               f"Could not execute {kind.title()}_rows event on table {table_label}; Can't find "
                               f"record in '{table_label.split('.')[-1]}', Error_code: 1032; handler error "
                               "HA_ERR_KEY_NOT_FOUND", seq)
                continue  # IDEMPOTENT: MySQL skips the row change (an update does not become an insert)
            else:
                count[kb] = n(kb) - 1
                if not whole:
                    final[kb] = None
        if kind in ("write", "update"):
            ka = key(after)
            if not whole and n(ka) > 0:
                if strict and not lenient:
                    raise _err(1062, "ER_DUP_ENTRY", "23000",
                               f"Could not execute {'Write' if kind == 'write' else 'Update'}_rows event on table "
                               f"{table_label}; Duplicate entry '{show(after)}' for key 'PRIMARY', Error_code: 1062",
                               seq)
                count[ka] = 0
            count[ka] = n(ka) + 1
            if whole:
                added.setdefault(ka, []).append(after)
            else:
                final[ka] = after
    names = [c["name"] for c in cols]
    rows: list[tuple] = []
    ops: list[str] = []
    if whole:
        for k, c in count.items():
            before_n = held.get(k, 0)
            if c == before_n and not added.get(k):
                continue
            if before_n:
                rows.append(k)
                ops.append("d")
            rows.extend([k] * c)  # whole-row key == the row
            ops.extend(["i"] * c)
    else:
        for k, row in final.items():
            if row is None:
                if held.get(k):
                    rows.append(tuple(_expand(k, key_idx, len(cols))))
                    ops.append("d")
            else:
                rows.append(row)
                ops.append("u")
    if not rows:
        return 0
    data = {nm: pa.array([r[i] for r in rows], type=C.arrow_type(c)) for i, (nm, c) in enumerate(zip(names, cols))}
    if dt is None:
        create(path, cols, channel, 0)
        dt = archive.open_table(path)
    try:
        if not held:  # no touched key is in the table: the merge could only insert, and an append costs far less
            write(dt, pa.table(data), channel, changes.last_seq, mode="append")
        elif by_vectors:
            _delete_by_vectors(dt, archive.local_root(path), where, final, pa.table(data), ops,
                               _position(channel, changes.last_seq))
        else:
            _merge(dt, pa.table({**data, OP: pa.array(ops, pa.string())}), names, key_idx, whole,
                   _commit_properties(channel, changes.last_seq))
    except CommitFailedError:
        if attempts <= 1:
            raise
        dt.update_incremental()
        return apply_changes(path, changes, channel, strict=strict, table_label=table_label, table=dt,
                             attempts=attempts - 1)
    if dt.version() % COMPACT_EVERY == COMPACT_EVERY // 2:  # each batch adds a file: keep the file count bounded
        compact_growing_table(dt, step=SERVICE_STEP_BYTES)
        if by_vectors:  # and the rows its deletion vectors delete: one file at a time, at most this often
            try:
                dv_commit.purge(dt, archive.local_root(path), ratio=SERVICE_PURGE_RATIO, max_files=1)
            except CommitFailedError:  # upkeep committed first
                dt.update_incremental()
    return len(rows)


def deletes_by_vectors() -> bool:
    """Whether primary-key merges delete by deletion vectors (RPL_SQL_DELETION_VECTORS=0: rewrite the files,
    for readers of the tables that do not know deletion vectors)."""
    return os.environ.get("RPL_SQL_DELETION_VECTORS", "1") != "0"


def _delete_by_vectors(dt: DeltaTable, root: str, where: Positions, final: dict[tuple, tuple | None],
                       data: pa.Table, ops: list[str], position: dict) -> None:
    """A primary-key merge as one commit: the rows of the touched keys the table holds are deleted by
    deletion vectors, the keys' new rows added in one file."""
    deletes: dict[str, list[int]] = {}
    for k in final:
        for f, i in where.get(k, ()):
            deletes.setdefault(f, []).append(i)
    upserts = data.filter(pa.array([op == "u" for op in ops]))
    looked = dt.version()
    if not dv_commit.enabled(dt):  # the table's first merge turns them on (a commit of no files)
        dv_commit.enable(dt)
        dt.update_incremental()
        if dt.version() != looked + 1:
            raise CommitFailedError(f"{root}: committed to while deletion vectors were turned on")
    live = live_files(root, dt.version())
    version = dv_commit.commit(live, {f: np.array(rows, dtype=np.uint64) for f, rows in deletes.items()}, upserts,
                               metadata=position["metadata"], app=position["app"])
    dv_commit.after_commit(dt, version)


def _merge(dt: DeltaTable, src: pa.Table, names: list[str], key_idx: list[int], whole: bool, props: dict) -> None:
    """Merge the rows of `src` into the table by their `OP`: 'u' upserts (a primary key), 'd' deletes, 'i'
    inserts (whole-row keys)."""
    cols_q = {ident(nm): f"s.{ident(nm)}" for nm in names}
    if whole:
        pred = f"s.{OP} = 'd' AND " + " AND ".join(
            f"(t.{ident(nm)} IS NOT DISTINCT FROM s.{ident(nm)})" for nm in names)
        (dt.merge(src, predicate=pred, source_alias="s", target_alias="t", **props)
         .when_matched_delete()
         .when_not_matched_insert(updates=cols_q, predicate=f"s.{OP} = 'i'")
         .execute())
    else:
        pred = " AND ".join(f"t.{ident(names[i])} = s.{ident(names[i])}" for i in key_idx)
        (dt.merge(src, predicate=pred, source_alias="s", target_alias="t", **props)
         .when_matched_delete(predicate=f"s.{OP} = 'd'")
         .when_matched_update(updates=cols_q, predicate=f"s.{OP} = 'u'")
         .when_not_matched_insert(updates=cols_q, predicate=f"s.{OP} = 'u'")
         .execute())


def _expand(k: tuple, key_idx: list[int], width: int) -> list[Any]:
    out: list[Any] = [None] * width
    for v, i in zip(k, key_idx):
        out[i] = v
    return out


def read_all(path: str, columns: list[str] | None = None) -> pa.Table | None:
    """Every row of the replica table at `path` (None: no table), deletion vectors applied."""
    root = archive.local_root(path)
    if root is not None:
        return read_table(root, columns)
    dt = archive.open_existing(path)
    return dt.to_pyarrow_table(columns=columns) if dt is not None else None


def reshape(path: str, old: list[dict] | None, new: list[dict], channel: str, seq: int,
            renames: dict[str, str] | None = None, defaults: dict[str, Any] | None = None) -> None:
    """Rewrite the table at `path` to the columns `new` (an ALTER TABLE): kept columns cast, renamed ones
    carried over, added ones filled with their default, dropped ones gone; one overwrite commit."""
    renames = renames or {}
    defaults = defaults or {}
    data = read_all(path)
    if data is None or old is None:
        create(path, new, channel, seq)
        return
    src_of = {v: k for k, v in renames.items()}
    arrays = []
    for c in new:
        t = C.arrow_type(c)
        src = src_of.get(c["name"], c["name"])
        if src in data.column_names:
            col = data.column(src)
            try:
                col = col.cast(t) if col.type != t else col
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                conv = C.converter(c)
                col = pa.array([None if v is None else conv(_landed(v)) for v in col.to_pylist()], type=t)
        else:
            d = defaults.get(c["name"])
            value = None if d is None else C.converter(c)(_implicit(c, d))
            col = pa.array([value] * data.num_rows, type=t)
        arrays.append(col)
    table = pa.table(arrays, schema=C.arrow_schema(new)) if new else data.select([])
    write(path, table, channel, seq, mode="overwrite")


def _landed(v: Any) -> Any:
    """A stored value back in the events table's JSON form (for a conversion a cast cannot do)."""
    if isinstance(v, (bytes, bytearray)):
        return {"$binary": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def _implicit(c: dict, d: Any) -> Any:
    """A column's DEFAULT literal, or '' for NOT NULL without one: MySQL's implicit default of the type."""
    t = c["type"]
    if d == "":
        if t in ("text", "enum", "set", "json", "time"):
            return "" if t != "time" else "00:00:00"
        if t == "blob":
            return ""
        if t in ("date", "datetime", "timestamp"):
            return None
        return "0" if t == "decimal" else 0
    if t in ("tinyint", "smallint", "mediumint", "int", "bigint", "year") or (t == "bit" and isinstance(d, str)):
        return int(decimal_str(d))
    if t in ("float", "double"):
        return float(d)
    return d


def decimal_str(v: Any) -> str:
    return str(decimal.Decimal(str(v)).to_integral_value())
