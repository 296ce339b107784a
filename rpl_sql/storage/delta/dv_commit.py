"""One commit that deletes rows of a local Delta table by deletion vectors and adds new rows beside them.

A merge through delta-rs rewrites every file that holds one of its keys, and random keys touch every file, so
each batch rewrote the whole table (a 50M-row table: 40 s a batch). Here a batch costs what it changes: the
touched files stay, each with a deletion vector of its rows that are gone (old vector and new rows, one file of
vectors per commit), and the batch's new rows are one new file. The commit is put in place only if its version
is still free (a hard link does not replace); a commit made meanwhile (an upkeep compaction) makes it fail as
delta-rs' own CommitFailedError, with what it wrote removed, so the caller redoes the batch on the new version.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
import uuid
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta import deletion_vectors as dvs
from rpl_sql.storage.delta import log as deltalog
from rpl_sql.storage.delta.live_files import LiveFiles, deleted_rows, live_files, read_file

FEATURE = "deletionVectors"
CONFIGURATION = {"delta.enableDeletionVectors": "true"}  # a new table's, so that no merge needs to turn it on
PURGE_RATIO = 0.05  # a file whose vector deletes this share of its rows is rewritten (Delta Lake's OPTIMIZE too)
CHECKPOINT_EVERY = 100  # delta-rs' default checkpoint interval, which its own commits follow
TEXT_STATS_MAX = 32  # characters of a text column's min/max kept in a file's statistics (longer: none)


def enabled(dt: DeltaTable) -> bool:
    return FEATURE in (dt.protocol().reader_features or ())


def enable(dt: DeltaTable) -> None:
    """Turn the table's deletion vectors on (a protocol upgrade: readers without them refuse the table)."""
    if not enabled(dt):
        dt.alter.set_table_properties(CONFIGURATION,
                                      **delta_commit.properties({"rpl_sql.schema": "deletion vectors"}))


def _stats(t: pa.Table) -> str:
    """Delta statistics of a new file: row and NULL counts; min/max of integer, date and short text columns
    (a text column with a longer value gets no statistics)."""
    lo, hi, nulls = {}, {}, {}
    for name, col in zip(t.column_names, t.columns):
        kind = col.type
        if col.null_count == len(col) or not (pa.types.is_integer(kind) or pa.types.is_string(kind)
                                               or pa.types.is_large_string(kind) or pa.types.is_date32(kind)):
            nulls[name] = col.null_count
            continue
        mm = pc.min_max(col).as_py()
        a, b = mm["min"], mm["max"]
        if isinstance(a, str) and (len(a) > TEXT_STATS_MAX or len(b) > TEXT_STATS_MAX):
            continue  # no statistics at all: a NULL count without min/max reads as an all-NULL file
        if isinstance(a, _dt.date):
            a, b = a.isoformat(), b.isoformat()
        lo[name], hi[name], nulls[name] = a, b, col.null_count
    return json.dumps({"numRecords": t.num_rows, "minValues": lo, "maxValues": hi, "nullCount": nulls})


def _new_file(root: str, rows: pa.Table, now: int) -> tuple[dict[str, Any], str]:
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    path = os.path.join(root, name)
    pq.write_table(rows, path, compression="snappy")
    return {"path": name, "partitionValues": {}, "size": os.path.getsize(path), "modificationTime": now,
            "dataChange": True, "stats": _stats(rows)}, path


def _union(before: np.ndarray | None, gone: np.ndarray) -> np.ndarray:
    """The sorted rows of an old vector (sorted) and new ones: the few new rows inserted, not the old sorted
    again (a vector grows with every batch)."""
    new = np.unique(np.asarray(gone, dtype=np.uint64))
    if before is None or not len(before):
        return new
    new = new[~dvs.in_sorted(before, new)]
    return np.insert(before, np.searchsorted(before, new), new)


def _records(root: str, add: dict[str, Any]) -> int:
    stats = json.loads(add["stats"]) if add.get("stats") else {}
    if "numRecords" in stats:
        return int(stats["numRecords"])
    return pq.ParquetFile(os.path.join(root, unquote(add["path"]))).metadata.num_rows


def commit(live: LiveFiles, deletes: dict[str, np.ndarray | None], rows: pa.Table | None, *,
           metadata: dict[str, str], app: tuple[str, int] | None,
           operation: str = "MERGE") -> int:
    """Delete the rows `deletes` (log path -> row indexes, None: all of them) and add `rows`, in commit
    live.version + 1 of the table at live.root, with the app transaction `app` (a writer's position); returns
    that version. Raises CommitFailedError when the version was taken."""
    root, now = live.root, int(time.time() * 1000)
    by_path = live.by_path()
    written: list[str] = []
    actions: list[dict[str, Any]] = []
    try:
        changed, vectors = [], []
        for path, gone in deletes.items():
            old = by_path[path]
            if gone is None:  # the whole file goes (a rewrite)
                changed.append((old, True))
                continue
            before = deleted_rows(root, old)
            union = _union(before, gone)
            whole = len(union) >= _records(root, old)  # every row gone: the file goes
            changed.append((old, whole))
            if not whole:
                vectors.append(union)
        descriptors: Any = iter(())
        if vectors:
            path, descs = dvs.write_file(root, vectors)
            written.append(path)
            descriptors = iter(descs)
        for old, whole in changed:
            remove = {"path": old["path"], "deletionTimestamp": now, "dataChange": True,
                      "extendedFileMetadata": True, "partitionValues": old.get("partitionValues") or {},
                      "size": old["size"]}
            if old.get("deletionVector"):
                remove["deletionVector"] = old["deletionVector"]
            actions.append({"remove": remove})
            if not whole:
                actions.append({"add": dict(old, deletionVector=next(descriptors), dataChange=True)})
        added = 0
        if rows is not None and rows.num_rows:
            add, path = _new_file(root, rows, now)
            written.append(path)
            actions.append({"add": add})
            added = rows.num_rows
        info = {"timestamp": now, "operation": operation,
                "operationParameters": {"predicate": "by key, deleting by deletion vectors"},
                "engineInfo": "rpl_sql", "clientVersion": "rpl_sql", **metadata,
                "operationMetrics": {"num_target_rows_deleted_by_vector": int(sum(len(g) for g in deletes.values()
                                                                                 if g is not None)),
                                     "num_target_rows_inserted": added, "num_target_files_added": int(added > 0),
                                     "num_deletion_vectors": len(vectors)}}
        head = [{"commitInfo": info}]
        if app is not None:
            head.append({"txn": {"appId": app[0], "version": app[1], "lastUpdated": now}})
        version = live.version + 1
        _put_if_absent(root, version, head + actions)
    except BaseException:
        for p in written:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        raise
    return version


def _put_if_absent(root: str, version: int, actions: list[dict[str, Any]]) -> None:
    """Write commit `version` unless it exists: written aside, then hard-linked into the log (atomic, and a
    link never replaces a file)."""
    tmp = os.path.join(root, f"_rpl_sql_commit_{uuid.uuid4()}.json")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, os.path.join(root, deltalog.LOG, f"{version:020d}.json"))
    except FileExistsError:
        raise CommitFailedError(f"{root}: version {version} was committed meanwhile") from None
    finally:
        os.unlink(tmp)


def after_commit(dt: DeltaTable, version: int) -> None:
    """Bring `dt` to the new version and checkpoint as delta-rs' own commits do: every
    `delta.checkpointInterval` versions, which a table that keeps a short log sets below the default."""
    dt.update_incremental()
    if version % checkpoint_interval(dt) == 0:
        dt.create_checkpoint()


def checkpoint_interval(dt: DeltaTable) -> int:
    """The table's `delta.checkpointInterval`, else CHECKPOINT_EVERY (also for a value that is no count)."""
    value = dt.metadata().configuration.get("delta.checkpointInterval")
    try:
        return max(1, int(value)) if value is not None else CHECKPOINT_EVERY
    except ValueError:
        return CHECKPOINT_EVERY


def rewrite(dt: DeltaTable, live: LiveFiles, adds: list[dict[str, Any]], operation: str) -> int:
    """Rewrite the files `adds` (live at live.version) into one file of their live rows, in one commit; the
    version committed. Raises CommitFailedError when another writer took the version first."""
    root = live.root
    rows = pa.concat_tables([read_file(root, add) for add in adds], promote_options="permissive")
    version = commit(live, {add["path"]: None for add in adds}, rows, metadata={}, app=None, operation=operation)
    after_commit(dt, version)
    return version


def purge(dt: DeltaTable, root: str, ratio: float = PURGE_RATIO, max_files: int | None = None) -> int:
    """Rewrite the files whose deletion vectors delete at least `ratio` of their rows (the worst first, at most
    `max_files`) into one file of their live rows, in one commit; how many were rewritten. delta-rs' compaction
    leaves a large file alone, so without this a table of random updates would keep every old row version."""
    live = live_files(root, dt.version())
    heavy = []
    for add in live.adds.values():
        d = add.get("deletionVector")
        if d:
            share = d["cardinality"] / max(1, _records(root, add))
            if share >= ratio:
                heavy.append((share, add))
    heavy = sorted(heavy, key=lambda h: -h[0])[:max_files]
    if heavy:
        rewrite(dt, live, [add for _, add in heavy], "PURGE DELETION VECTORS")
    return len(heavy)


def compact_small(dt: DeltaTable, root: str, below: int, budget: int) -> tuple[int, int]:
    """A compaction that costs at most `budget` bytes of files: the smallest files under `below` bytes,
    together at most `budget`, rewritten into one (rows their vectors delete left out); (files removed, files
    added). delta-rs' compaction rewrites every file under its target in one go, which for a table of
    deletion vectors is the whole table once its files reach a tier (seconds at 50M rows, while its
    merges wait)."""
    live = live_files(root, dt.version())
    small = sorted((a for a in live.adds.values() if a["size"] < below), key=lambda a: a["size"])
    chosen, total = [], 0
    for a in small:
        if chosen and total + a["size"] > budget:
            break
        chosen.append(a)
        total += a["size"]
    if len(chosen) < 2:
        return 0, 0
    rewrite(dt, live, chosen, "COMPACT SMALL FILES")
    return len(chosen), 1
