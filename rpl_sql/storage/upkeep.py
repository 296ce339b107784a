"""`rpl-sql upkeep`: keep a warehouse small without losing what rpl_sql promises.

Per Delta table of the warehouse: refuse a damaged one (`rpl-sql repair` first), delete what killed processes
left (past a grace period), write a checkpoint, and with `keep_days` vacuum old data files while the filter
history stays whole (commits record their filter changes in their metadata). Leftover Spark temp directories
and quiet-mode logs go too. Details: docs/design/README.md#rpl_sqlstorageupkeep.
"""
from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator
from urllib.parse import unquote

import pyarrow as pa

from rpl_sql.storage import scratch
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta import deletion_vectors as dvs
from rpl_sql.storage.delta import dv_commit
from rpl_sql.storage.delta import log as deltalog
from rpl_sql.storage.delta.commit import META_PREFIX
from rpl_sql.storage.replica_catalog import all_tables, replica_root
from rpl_sql.storage.store import STATE_TABLE, DeltaStore

GRACE_SECONDS = 3600
COMPACT_TARGET_BYTES = 128 << 20  # files of an event table are rewritten toward this size
# A table that grows by a small file a commit (a replica table) is compacted in tiers, the smallest first and
# each TIER_FANOUT times the one below: delta-rs rewrites every file under the target it is given, so
# compacting toward 128 MB alone rewrote the whole table, up to 128 MB, at every compaction.
SMALLEST_TIER_BYTES, TIER_FANOUT = 2 << 20, 8
# A table with deletion vectors is compacted at most this much at a time (dv_commit.compact_small): its merges
# wait for the compaction, and a tier's whole rewrite took seconds at 50M rows.
STEP_BYTES = 16 << 20
COMPACTION_LOCK = "_rpl_sql_compaction.lock"  # in a table's directory: its compactions take turns on it
_KEEP_IN_LOG = (".json", ".parquet", "_last_checkpoint", ".crc")


@dataclass
class TableUpkeep:
    """What upkeep did (or, dry, would do) to one table."""

    table: str
    data_files_before: int
    data_files_after: int
    log_files: int
    removed: list[str] = field(default_factory=list)  # leftovers: temp log files and orphaned data files
    vacuumed: int = 0
    checkpoint: int | None = None
    archived: int = 0  # log files moved to the archive (storage/delta/archive.py)
    pruned: int = 0  # archived commits deleted (archive.prune)
    compacted: tuple[int, int] = (0, 0)  # (small files rewritten, files written) by compaction
    compaction_raced: bool = False  # a writer's commit removed files the compaction read: it was dropped
    purged: int = 0  # files rewritten without the rows their deletion vectors delete (dv_commit.purge)


def _data_files(table: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if d not in (deltalog.LOG, deltalog.QUARANTINE, archive.ARCHIVE)]
        out += [os.path.relpath(os.path.join(root, f), table) for f in files
                if f.endswith(".parquet") or (f.startswith("deletion_vector_") and f.endswith(".bin"))]
    return out


@dataclass
class _LogFiles:
    """What a table's log says about its data files: every path an action names, the version of each path's
    latest remove, the paths active now, and each commit's timestamp (ms)."""

    referenced: set[str] = field(default_factory=set)
    removed_at: dict[str, int] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)
    timestamps: dict[int, int] = field(default_factory=dict)
    pruned: int = -1  # archive.pruned_through: the commits at or below it that are gone were pruned
    vector_uses: Counter = field(default_factory=Counter)  # a deletion vector file: the live files using it

    def _vector_file(self, table: str, action: dict) -> str | None:
        d = action.get("deletionVector")
        where = dvs.file_of(table, d) if d else None
        return os.path.relpath(where, table) if where else None

    def added(self, table: str, action: dict) -> None:
        name = unquote(action["path"])
        self.referenced.add(name)
        self.active.add(name)
        vector = self._vector_file(table, action)
        if vector is not None:  # one file holds the vectors of many data files: in use while one of them is
            self.referenced.add(vector)
            self.active.add(vector)
            self.vector_uses[vector] += 1

    def removed(self, table: str, action: dict, version: int) -> None:
        name = unquote(action["path"])
        self.referenced.add(name)
        self.active.discard(name)
        self.removed_at[name] = version
        vector = self._vector_file(table, action)
        if vector is not None:
            self.referenced.add(vector)
            self.vector_uses[vector] -= 1
            if self.vector_uses[vector] <= 0:
                self.active.discard(vector)
                self.removed_at[vector] = version

    def whole(self) -> bool:
        """Whether every commit since version 0, or since the pruned ones, was read (rpl_sql keeps its logs
        and prunes only commits whose removed files were vacuumed; a foreign table may have deleted some)."""
        read = [v for v in self.timestamps if v > self.pruned]
        return bool(read) and len(read) == max(read) - self.pruned

    def unneeded(self, cutoff_ms: int) -> list[str]:
        """Paths no version from the one current at `cutoff_ms` on reads: removed at or before it, not re-added."""
        last = max((v for v, ts in self.timestamps.items() if ts <= cutoff_ms), default=-1)
        return sorted(p for p, v in self.removed_at.items() if v <= last and p not in self.active)


def _log_files(table: str) -> _LogFiles:
    """One pass over the log's JSON commits, archived ones included (in version order), and checkpoints."""
    log = os.path.join(table, deltalog.LOG)
    out = _LogFiles(pruned=archive.pruned_through(table))
    for name in os.listdir(log):
        path = os.path.join(log, name)
        if ".checkpoint" in name and name.endswith(".parquet"):
            import pyarrow.parquet as pq

            t = pq.read_table(path, columns=["add", "remove"])
            for kind in ("add", "remove"):
                for item in t.column(kind).to_pylist():
                    if item and item.get("path"):
                        out.referenced.add(unquote(item["path"]))
                        vector = out._vector_file(table, item)
                        if vector is not None:
                            out.referenced.add(vector)
    for version in archive.commit_versions(table):
        actions = archive.read_commit(table, version)  # where it is now: an archiver may have moved it
        if actions is None:
            continue  # pruned by another upkeep meanwhile
        for action in actions:
            if "add" in action:
                out.added(table, action["add"])
            elif "remove" in action:
                out.removed(table, action["remove"], version)
            elif "commitInfo" in action and isinstance(action["commitInfo"].get("timestamp"), int):
                out.timestamps[version] = action["commitInfo"]["timestamp"]
        if version not in out.timestamps:  # a foreign writer's commit without one: when its file was written
            for where in (deltalog.LOG, archive.ARCHIVE):
                with contextlib.suppress(FileNotFoundError):
                    out.timestamps[version] = int(os.path.getmtime(os.path.join(table, where, f"{version:020d}.json"))
                                                  * 1000)
                    break
    return out


def _old(path: str, now: float, grace: float) -> bool:
    try:
        return now - os.path.getmtime(path) > grace
    except OSError:
        return False


def _history_horizon_hours(table: str, now: datetime) -> float:
    """Hours of history whose data files the filter history still needs (0 when every commit records its
    changes): back to the oldest commit that changed filters without recording them."""
    store = DeltaStore(os.path.dirname(table))
    oldest = None
    for commit in store.filter_commits()[0]:
        if commit.changes is None and commit.filters_changed != 0:
            oldest = commit.timestamp
    if oldest is None:
        return 0.0
    return (now - oldest).total_seconds() / 3600 + 1


def compact_table(dt, target_size: int = COMPACT_TARGET_BYTES, channel: str | None = None,
                  operation: str = "UPKEEP COMPACT", delta_encoded: tuple[str, ...] = ()) -> tuple[int, int]:
    """Rewrite the small files of a table (events, applied events; a replica table, by its only writer) into
    files of about `target_size`, per partition, in one commit; with `channel`, that channel's partition
    only (a table partitioned by channel). Rows, app transactions (the writers' positions) and the commit
    history are unchanged; a concurrent append does not conflict with it. `delta_encoded`: integer columns
    written as `delta_commit.writer_properties` says.

    Compactions of a table take turns on this host, each planned on the table's newest version: delta-rs
    (1.6) commits two compactions planned on the same version both, so every row of the files they both
    rewrote is then there twice (tests/storage/test_upkeep.py shows it). A running service compacts its tables while
    upkeep may too, and each channel's SQL thread compacts the applied events."""
    filters: dict = {"partition_filters": [("channel", "=", channel)]} if channel else {}
    if delta_encoded:
        filters["writer_properties"] = delta_commit.writer_properties(delta_encoded)
    with _compaction_turn(dt):
        dt.update_incremental()
        metrics = dt.optimize.compact(target_size=target_size, **filters, **delta_commit.properties(
            {META_PREFIX + "operation": operation}, checkpoint=False))
    return int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0))


def _compact_in_steps(dt, target_size: int = COMPACT_TARGET_BYTES) -> tuple[int, int]:
    """compact_table for a table with deletion vectors: STEP_BYTES at a time, each step its own turn and
    commit, so a running service's merges wait for a step at most."""
    root = archive.local_root(dt)
    if root is None:
        return compact_table(dt, target_size)
    removed = added = 0
    while True:
        with _compaction_turn(dt):
            dt.update_incremental()
            r, a = dv_commit.compact_small(dt, root, target_size, STEP_BYTES)
        if not r:
            return removed, added
        removed, added = removed + r, added + a


@contextlib.contextmanager
def _compaction_turn(dt) -> Iterator[None]:
    """An exclusive lock on the table's COMPACTION_LOCK file (none for a table on remote storage, where
    two hosts' compactions of one table must not overlap: run upkeep where the service runs)."""
    root = archive.local_root(dt)
    if root is None:
        yield
        return
    fd = os.open(os.path.join(root, COMPACTION_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def compaction_tier(sizes: list[int], target: int = COMPACT_TARGET_BYTES, smallest: int = SMALLEST_TIER_BYTES,
                    fanout: int = TIER_FANOUT) -> int:
    """The target size to compact a growing table's files (of `sizes` bytes) toward: the smallest tier, or the
    tier above the highest one with `fanout` files waiting (so a compaction rewrites about one tier's worth of
    files, not the whole table)."""
    tier = chosen = smallest
    while tier < target:
        if sum(1 for s in sizes if tier // 2 <= s < tier * fanout // 2) >= fanout:
            chosen = tier * fanout
        tier *= fanout
    return min(chosen, target)


def compact_growing_table(dt, target_size: int = COMPACT_TARGET_BYTES, smallest: int = SMALLEST_TIER_BYTES,
                          fanout: int = TIER_FANOUT, channel: str | None = None,
                          step: int | None = None, delta_encoded: tuple[str, ...] = ()) -> tuple[int, int]:
    """compact_table for a table a writer appends a small file to at every commit, by tiers (`channel`: of
    that channel's partition of a table partitioned by channel; `step`: the bytes of one step where the table
    has deletion vectors; default STEP_BYTES; `delta_encoded` as compact_table's)."""
    acts = pa.table(dt.get_add_actions(flatten=False))
    sizes = acts.column("size_bytes").to_pylist()
    if channel:
        sizes = [n for n, part in zip(sizes, acts.column("partition").to_pylist()) if part["channel"] == channel]
    tier = compaction_tier(sizes, target_size, smallest, fanout)
    root = archive.local_root(dt)
    if not channel and root is not None and dv_commit.enabled(dt):  # merges write deletion vectors: bounded
        with _compaction_turn(dt):
            dt.update_incremental()
            return dv_commit.compact_small(dt, root, tier, step or STEP_BYTES)
    return compact_table(dt, tier, channel, "COMPACT TIERS", delta_encoded)


def _vacuum(table: str, dt, known: _LogFiles, hours: float, cutoff_ms: int, on_disk: set[str]) -> int:
    """Delete the data files that no version from `cutoff_ms` (`hours` ago) on reads; how many.

    From the whole log, not delta-rs' vacuum: that finds removed files by the tombstones of the last
    checkpoint, which rpl_sql tables keep for ten minutes only (storage/delta/commit.py)."""
    if not known.whole():
        return len(dt.vacuum(retention_hours=math.ceil(hours), dry_run=False, enforce_retention_duration=False))
    gone = [p for p in known.unneeded(cutoff_ms) if p in on_disk]
    for name in gone:
        try:
            os.remove(os.path.join(table, name))
        except FileNotFoundError:
            pass
    return len(gone)


def upkeep_table(table: str, keep_days: float | None = None, dry_run: bool = False,
                 grace_seconds: float = GRACE_SECONDS, compact: bool = True,
                 needed: archive.Needed | None = None, delta_encoded: tuple[str, ...] = ()) -> TableUpkeep:
    """Upkeep of one table (see the module's docstring). With `keep_days` and `needed` (the table's readers'
    choice among its archived commits older than that), the other archived commits are deleted too.
    `delta_encoded`: as compact_table's."""
    from deltalake.exceptions import CommitFailedError

    damage = deltalog.find_damage(table)
    if damage is not None:
        raise deltalog.damaged(damage)
    now = time.time()
    log = os.path.join(table, deltalog.LOG)
    files = _data_files(table)
    report = TableUpkeep(table, len(files), len(files), len(os.listdir(log)))
    leftovers = [os.path.join(log, n) for n in os.listdir(log)
                 if not n.endswith(_KEEP_IN_LOG) and os.path.isfile(os.path.join(log, n))]
    known = _log_files(table)
    leftovers += [os.path.join(table, f) for f in files if f not in known.referenced]
    for path in leftovers:
        if _old(path, now, grace_seconds):
            report.removed.append(os.path.relpath(path, table))
            if not dry_run:
                os.remove(path)
    if dry_run:
        return report
    dt = archive.open_table(table)
    if compact and os.path.basename(table) != STATE_TABLE:
        try:
            report.compacted = (compact_table(dt, delta_encoded=delta_encoded) if not dv_commit.enabled(dt)
                                else _compact_in_steps(dt))
        except CommitFailedError:  # a running service's own compaction or merge committed first: next run
            report.compaction_raced = True
        dt = archive.open_table(table)
        if dv_commit.enabled(dt) and archive.local_root(table) is not None:
            try:
                report.purged = dv_commit.purge(dt, archive.local_root(table))
            except CommitFailedError:  # the service committed first: next run
                report.compaction_raced = True
            dt = archive.open_table(table)
        if (report.compacted[0] or report.purged) and keep_days is not None:
            known = _log_files(table)  # the compaction's removes too
    cutoff_ms = None
    if keep_days is not None:
        hours = keep_days * 24
        if os.path.basename(table) == STATE_TABLE:
            hours = max(hours, _history_horizon_hours(table, datetime.now(timezone.utc)))
        cutoff_ms = int((time.time() - hours * 3600) * 1000)
        report.vacuumed = _vacuum(table, dt, known, hours, cutoff_ms, set(files))
        dt = archive.open_table(table)
    dt.create_checkpoint()
    report.checkpoint = dt.version()
    report.archived = archive.archive(table)
    if cutoff_ms is not None and needed is not None and known.whole():
        # the files those commits removed were vacuumed above (the commits read then, not later ones): the
        # commits themselves are needed only by the readers `needed` speaks for
        read_through = max(known.timestamps.values()) + 1
        report.pruned = archive.prune(table, min(cutoff_ms, read_through), needed)
    report.data_files_after = len(_data_files(table))
    report.log_files = len(os.listdir(log))
    return report


def dropped_replica_tables(warehouse: str, grace_seconds: float) -> set[str]:
    """Replica table folders no channel's catalog names (DROP TABLE, a table replaced by a backfill, or dropped
    as no longer replicated), untouched for `grace_seconds`: a table being created is named first."""
    root = os.path.join(replica_root(os.fspath(warehouse)), "tables")
    if "://" in root or not os.path.isdir(root):
        return set()
    named = {os.path.realpath(os.path.join(replica_root(os.fspath(warehouse)), e.path))
             for _, e in all_tables(os.fspath(warehouse))}
    now = time.time()
    out = set()
    for name in os.listdir(root):
        path = os.path.realpath(os.path.join(root, name))
        if path not in named and _old(path, now, grace_seconds):
            out.add(path)
    return out


def upkeep(warehouse: str, keep_days: float | None = None, dry_run: bool = False,
           grace_seconds: float = GRACE_SECONDS, compact: bool = True,
           retention: Callable[[str], archive.Needed | None] | None = None,
           delta_encoded: Callable[[str], tuple[str, ...]] | None = None) -> tuple[list[TableUpkeep], list[str]]:
    """Upkeep of every Delta table under `warehouse`, then of what rpl_sql's gone processes left in
    this user's scratch folder (rpl_sql.storage.scratch), nothing else; returns both reports.
    A damaged table raises MySQLError 1194 before anything is touched. `retention` gives each table's
    readers' choice of archived commits (rpl_sql.pipeline.retention.needed_commits); without it, or for
    a table it gives None, no archived commit is deleted. `delta_encoded`: each table's integer columns its
    compaction delta-encodes, as its writer does (rpl_sql.pipeline.retention.delta_encoded)."""
    tables = deltalog.tables(warehouse)
    for table in tables:
        damage = deltalog.find_damage(table)
        if damage is not None:
            raise deltalog.damaged(damage)
    dropped = dropped_replica_tables(warehouse, grace_seconds)
    tables = [t for t in tables if os.path.realpath(t) not in dropped]
    reports = [upkeep_table(t, keep_days, dry_run, grace_seconds, compact, retention(t) if retention else None,
                            delta_encoded(t) if delta_encoded else ()) for t in tables]
    leftovers = scratch.leftovers() + sorted(dropped)
    if not dry_run:
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    return reports, leftovers
