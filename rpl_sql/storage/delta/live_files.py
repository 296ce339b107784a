"""A local Delta table's live data files as its log states them, deletion vectors included, and their rows.

delta-rs lists a version's files (`get_add_actions`) without their deletion vectors, and its pyarrow readers
refuse a table that has them. A merge that writes deletion vectors needs each file's whole add action (to
remove it exactly and add it back with a new vector), and every reader of a replica table's files needs the
vectors to leave deleted rows out. Both come from here: the newest checkpoint plus the commits after it,
replayed once per table and then only from the commits that are new.
"""
from __future__ import annotations

import glob
import os
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import deletion_vectors as dvs
from rpl_sql.storage.delta import log as deltalog

ROW = "__rpl_sql_row"  # read_file's column of row indexes
Key = tuple[str, "str | None"]  # (path in the log, the deletion vector's unique id)


@dataclass
class LiveFiles:
    """The add actions live at `version`, by (path, deletion vector id)."""

    root: str
    version: int
    adds: dict[Key, dict[str, Any]] = field(default_factory=dict)
    stamp: tuple[int, int] | None = None  # kept states only: see _stamp

    def by_path(self) -> dict[str, dict[str, Any]]:
        """Each live file's add action by its log path (and by that path decoded, as delta-rs lists it)."""
        out = {unquote(k[0]): a for k, a in self.adds.items()}
        out.update({k[0]: a for k, a in self.adds.items()})
        return out

    def local(self, add: dict[str, Any]) -> str:
        return os.path.join(self.root, unquote(add["path"]))  # log paths are relative and percent-encoded


def plain_schema(schema) -> pa.Schema:
    """A schema of replica table data (delta-rs' arro3 or pyarrow) with strings and binaries as plain types:
    delta-rs reads them as views, which pyarrow's filter/take and Spark's Arrow batches do not all take."""
    fields = []
    for f in pa.schema(schema):
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t = pa.binary()
        fields.append(pa.field(f.name, t))
    return pa.schema(fields)


_CACHE: dict[str, LiveFiles] = {}
_LOCK = threading.Lock()


def key_of(action: dict[str, Any]) -> Key:
    return action["path"], dvs.unique_id(action.get("deletionVector"))


def _plain(action: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's add (maps as pairs, absent fields as None) as a commit's JSON action."""
    out = {}
    for k, v in action.items():
        if v is None or k == "stats_parsed":
            continue
        if k in ("partitionValues", "tags") and isinstance(v, list):
            v = dict(v)
        if k == "deletionVector":
            v = {dk: dv for dk, dv in v.items() if dv is not None}
        out[k] = v
    return out


def _from_checkpoint(root: str) -> LiveFiles | None:
    log = os.path.join(root, deltalog.LOG)
    at = deltalog.last_checkpoint(log)
    if at is None:
        return None
    parts = sorted(glob.glob(os.path.join(log, f"{at:020d}.checkpoint*.parquet")))
    if not parts:
        return None
    live = LiveFiles(root, at)
    for part in parts:
        adds = pq.read_table(part, columns=["add"]).column("add")
        for a in adds.filter(adds.is_valid()).to_pylist():
            a = _plain(a)
            live.adds[key_of(a)] = a
    return live


def _replay(live: LiveFiles, upto: int) -> bool:
    """Apply commits live.version+1 .. upto; False when one of them is gone (read the checkpoint again)."""
    for v in range(live.version + 1, upto + 1):
        actions = archive.read_commit(live.root, v)
        if actions is None:
            return False
        for a in actions:
            if "remove" in a:
                live.adds.pop(key_of(a["remove"]), None)
            elif "add" in a:
                live.adds[key_of(a["add"])] = a["add"]
        live.version = v
    return True


def live_files(root: str, version: int | None = None) -> LiveFiles:
    """The live files of the local table at `root`, at `version` (default: its newest). The newest state read
    is kept per table, so a call at that version or a later one reads only the commits made since: a merge
    asks at every batch, and replaying from the checkpoint each time (up to 99 commits, each with an action
    per file the batch touched) took 58% of the SQL thread's time at 50M rows."""
    upto = deltalog.latest_version(root) if version is None else version
    if upto is None:
        return LiveFiles(root, -1)
    with _LOCK:
        cached = _CACHE.get(root)
    fresh = cached is not None and cached.stamp is not None and cached.stamp == _stamp(root, cached.version)
    if fresh and cached.version <= upto:
        live = LiveFiles(root, cached.version, dict(cached.adds))
        if _replay(live, upto):
            _keep(live)
            return live
    live = _from_checkpoint(root)
    if live is None or live.version > upto:
        live = LiveFiles(root, -1)
    if not _replay(live, upto):
        raise FileNotFoundError(f"{root}: commit {live.version + 1} of the log is missing")
    _keep(live, replace=not fresh)
    return live


def _stamp(root: str, version: int) -> tuple[int, int] | None:
    """Commit `version`'s file (inode, mtime), in the log or archived (a move keeps both): a table made again at
    the same path has other files under the same versions, so a kept state of the old one is not used."""
    if version < 0:
        return None
    name = f"{version:020d}.json"
    for where in (deltalog.LOG, archive.ARCHIVE):
        try:
            st = os.stat(os.path.join(root, where, name))
        except FileNotFoundError:
            continue
        return st.st_ino, st.st_mtime_ns
    return None


def _keep(live: LiveFiles, replace: bool = False) -> None:
    """Keep a copy of `live` as its table's newest state read, unless a newer one is kept (or `replace`)."""
    stamp = _stamp(live.root, live.version)
    if stamp is None:
        return
    with _LOCK:
        old = _CACHE.get(live.root)
        if replace or old is None or old.version <= live.version:
            _CACHE[live.root] = LiveFiles(live.root, live.version, dict(live.adds), stamp)


_VECTORS: dict[tuple[str, str], tuple[str, np.ndarray]] = {}  # (table, file) -> its vector's id and rows
_VECTOR_BYTES = [0]
VECTOR_CACHE_BYTES = 256 << 20


def deleted_rows(root: str, add: dict[str, Any]) -> np.ndarray | None:
    """The sorted row indexes a file's deletion vector removes (None: no vector); the vector each file has now
    is read once (a merge reads the vectors of every file it touches), an older one is let go."""
    d = add.get("deletionVector")
    if not d:
        return None
    key, uid = (root, add["path"]), dvs.unique_id(d)
    with _LOCK:
        got = _VECTORS.get(key)
    if got is not None and got[0] == uid:
        return got[1]
    rows = dvs.read(root, d)
    with _LOCK:
        _VECTOR_BYTES[0] += rows.nbytes - (got[1].nbytes if got is not None else 0)
        if _VECTOR_BYTES[0] > VECTOR_CACHE_BYTES:  # files compacted away leave theirs: start afresh
            _VECTORS.clear()
            _VECTOR_BYTES[0] = rows.nbytes
        _VECTORS[key] = (uid, rows)
    return rows


def read_file(root: str, add: dict[str, Any], columns: list[str] | None = None,
              keep_positions: bool = False) -> pa.Table:
    """A live file's rows (those its deletion vector leaves), in file order; `keep_positions` adds each row's
    index in the file as the column ROW (what a deletion vector names)."""
    t = pq.read_table(os.path.join(root, unquote(add["path"])), columns=columns, pre_buffer=False)
    plain = plain_schema(t.schema)
    if plain != t.schema:
        t = t.cast(plain)
    if keep_positions:
        t = t.append_column(ROW, pa.array(np.arange(t.num_rows, dtype=np.int64)))
    gone = deleted_rows(root, add)
    if gone is None or not len(gone):
        return t
    keep = np.ones(t.num_rows, dtype=bool)
    keep[gone[gone < t.num_rows].astype(np.int64)] = False
    return t.filter(pa.array(keep))


def read_table(root: str, columns: list[str] | None = None, version: int | None = None) -> pa.Table | None:
    """Every live row of the local table at `root` (None: no table), deletion vectors applied."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(root):
        return None
    dt = archive.open_table(root, version)
    live = live_files(root, dt.version())
    tables = [read_file(root, a, columns) for a in live.adds.values()]
    if tables:
        return pa.concat_tables(tables, promote_options="permissive")
    schema = pa.schema(dt.schema().to_arrow())
    return (schema if columns is None else pa.schema([schema.field(c) for c in columns])).empty_table()
