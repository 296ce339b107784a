"""Keep a table's `_delta_log` short: commits older than the table's log retention move to `_rpl_sql_log/`.

delta-rs lists the whole `_delta_log` directory on every open, refresh and commit, so a service committing
several times a second per table slowed down linearly: 149 ms an append at 100,000 commits, six hours of
the replica bench (bench/bench_log_length.py). Delta's answer is expired-log cleanup
(`delta.logRetentionDuration`), which deletes the commits. rpl_sql reads its history from them (filter
changes, AS OF, the applier's ingest windows, upkeep's vacuum), so it moves them instead, and `history()`
and `read_commit()` here read both places. Only files before a checkpoint that is older than the retention
move. A reader of any newer version starts at that checkpoint or a later one, so it never needs a moved file
(one that read `_last_checkpoint` just before the move opens again: `open_table()`).
`prune()` bounds the archive: `rpl-sql upkeep --keep-days` deletes the moved commits older than that which
no reader needs (pipeline/retention.py says which they need).
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable
from urllib.parse import unquote, urlparse

from rpl_sql.storage.delta.commit_info import first_line_info
from rpl_sql.storage.delta.log import CHECKPOINT_FILE, COMMIT_FILE, LOG, last_checkpoint, versions

ARCHIVE = "_rpl_sql_log"
PRUNED = "_pruned.json"  # in the archive: {"through": V}, every commit at or below V that is gone was pruned
RETENTION_KEY = "delta.logRetentionDuration"
DELTA_DEFAULT_SECONDS = 30 * 86400     # Delta's default when a table does not set it
Needed = Callable[[list[tuple[int, dict]]], set[int]]  # (version, commitInfo) oldest first -> versions to keep
_NUMBERED = re.compile(r"^(\d{20})\.")  # commits, checkpoints (single or multi-part), checksums
_UNITS = {"nanosecond": 1e-9, "microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60,
          "hour": 3600, "day": 86400, "week": 604800}
_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+)\s+([a-z]+?)s?\s*$", re.IGNORECASE)


def interval_seconds(text: str) -> float:
    """Seconds in a Delta interval property ('interval 1 hour', '30 days'); ValueError for anything else."""
    m = _INTERVAL.match(text or "")
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a Delta interval: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def local_root(table: Any) -> str | None:
    """The local directory of a table path, `file://` URI or DeltaTable; None for remote tables."""
    uri = getattr(table, "table_uri", table)
    if not isinstance(uri, str):
        return None
    if uri.startswith("file://"):
        return unquote(urlparse(uri).path)
    return None if "://" in uri else os.path.abspath(uri)


def read_actions(path: str) -> list[dict]:
    """The actions of one JSON commit file."""
    return [json.loads(line) for line in _lines(path)]


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line for line in f if line.strip()]


def log_retention(table: str, names: list[str] | None = None) -> float:
    """The table's `delta.logRetentionDuration` in seconds, from its newest metaData action (`names`: the
    log's listing, when the caller has it)."""
    log = os.path.join(table, LOG)
    names = os.listdir(log) if names is None else names
    commits = sorted((int(m.group(1)) for m in map(COMMIT_FILE.match, names) if m), reverse=True)
    for v in commits:
        for action in read_actions(os.path.join(log, f"{v:020d}.json")):
            if "metaData" in action:
                return _retention_of(action["metaData"])
    checkpoints = sorted({int(m.group(1)) for m in map(CHECKPOINT_FILE.match, names) if m}, reverse=True)
    if checkpoints:
        import pyarrow.parquet as pq

        for name in sorted(n for n in names if n.startswith(f"{checkpoints[0]:020d}.checkpoint")):
            for meta in pq.read_table(os.path.join(log, name), columns=["metaData"]).column(0).to_pylist():
                if meta:
                    return _retention_of(meta)
    return DELTA_DEFAULT_SECONDS


def _retention_of(meta: dict) -> float:
    conf = meta.get("configuration") or {}
    if isinstance(conf, list):  # a checkpoint's map column reads as (key, value) pairs
        conf = dict(conf)
    text = conf.get(RETENTION_KEY)
    if text is None:
        return DELTA_DEFAULT_SECONDS
    try:
        return interval_seconds(text)
    except ValueError:
        return DELTA_DEFAULT_SECONDS  # a value Delta would reject too: keep everything the default keeps


def archive(table: str, now: float | None = None, retention: float | None = None) -> int:
    """Move the commits before the newest checkpoint older than `retention` (default: the table's own)
    into `<table>/_rpl_sql_log/`, and delete the checkpoints and checksums before it (half the bytes of a
    running service's log at steady state, and no reader opens one there); how many files left the log.
    Safe beside writers and readers of newer versions, and beside another archiver (a file already gone is
    skipped)."""
    log = os.path.join(table, LOG)
    names = os.listdir(log)
    checkpoints = sorted({int(m.group(1)) for m in map(CHECKPOINT_FILE.match, names) if m}, reverse=True)
    if not checkpoints:
        return 0
    hint = last_checkpoint(log)
    if hint is None:
        return 0  # readers would look for a checkpoint by listing: only one they are pointed to is trusted
    cutoff = (time.time() if now is None else now) - (log_retention(table, names) if retention is None else retention)
    keep_from = None
    for v in checkpoints:
        if v > hint:
            continue  # readers start at the hint: it must stay
        try:
            old = os.stat(os.path.join(log, f"{v:020d}.json")).st_mtime <= cutoff
        except FileNotFoundError:
            continue
        if old:
            keep_from = v
            break
    if keep_from is None:
        return 0
    moving = sorted((int(m.group(1)), n) for n in names if (m := _NUMBERED.match(n)) and int(m.group(1)) < keep_from)
    if not moving:
        return 0
    target = os.path.join(table, ARCHIVE)
    os.makedirs(target, exist_ok=True)
    moved = 0
    for _, name in moving:  # oldest first: a crash leaves the log a contiguous tail
        try:
            if COMMIT_FILE.match(name):
                os.replace(os.path.join(log, name), os.path.join(target, name))
            else:  # a checkpoint or checksum: derived from the commits, and nothing reads one before the kept
                os.remove(os.path.join(log, name))
            moved += 1
        except FileNotFoundError:
            pass
    return moved


_ARCHIVED: dict[str, tuple[int, list[int]]] = {}  # archive dir -> (mtime, its commit versions)


def archived_versions(table: str) -> list[int]:
    """The commit versions in the table's archive, oldest first ([] when nothing was archived)."""
    target = os.path.join(table, ARCHIVE)
    try:
        mtime = os.stat(target).st_mtime_ns
    except FileNotFoundError:
        return []
    cached = _ARCHIVED.get(target)
    if cached is None or cached[0] != mtime:
        names = os.listdir(target)
        cached = _ARCHIVED[target] = (mtime, sorted(int(m.group(1)) for m in map(COMMIT_FILE.match, names) if m))
    return cached[1]


def open_table(path: str, version: int | None = None, attempts: int = 5) -> Any:
    """`DeltaTable(path, version=version)`, opened again when a log file it was pointed to left meanwhile:
    a reader that read `_last_checkpoint` just before `archive()` moved what it named finds the newer
    checkpoint on its next try."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    for attempt in range(attempts):
        try:
            return DeltaTable(path, version=version)
        except TableNotFoundError:
            raise
        except DeltaError as e:
            text = str(e)
            if attempt == attempts - 1 or "not found" not in text.lower() or LOG not in text:
                raise


def open_existing(path: str) -> Any:
    """`open_table(path)`, or None where no Delta table is (yet): the one way rpl_sql opens a table it may not
    have created yet."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return open_table(path)
    except TableNotFoundError:
        return None


def read_commit(table: str, version: int) -> list[dict] | None:
    """The actions of commit `version`, from the log or, once moved, the archive; None when it is in neither
    (pruned, or never written). Race-free beside `archive()`: a commit only ever moves from the log to the
    archive, so one that is not in the log when looked for there is in the archive when looked for next."""
    lines = _commit_lines(table, version)
    return None if lines is None else [json.loads(line) for line in lines]


def _commit_lines(table: str, version: int) -> list[str] | None:
    name = f"{version:020d}.json"
    for where in (LOG, ARCHIVE):
        try:
            return _lines(os.path.join(table, where, name))
        except FileNotFoundError:
            continue
    return None


def commit_versions(table: str) -> list[int]:
    """The version of every commit of the table, archived or not, oldest first (read each with
    `read_commit`: one listed in the log may have moved by then)."""
    live = versions(os.path.join(table, LOG))[0]
    first = live[0] if live else None
    return [v for v in archived_versions(table) if first is None or v < first] + live


def commit_info(path: str, version: int) -> dict | None:
    """The commitInfo of the commit file at `path` (empty if it has none) with its "version"; None when the
    file is gone."""
    try:
        return _info_at(path, version)
    except FileNotFoundError:
        return None


def read_commit_info(table: str, version: int, sliced: tuple[str, ...] = ()) -> dict | None:
    """`commit_info` of commit `version` wherever it is (as `read_commit` looks); None when it is in neither
    place. `sliced`: keys of long text values, given as `commit_info.Cut`s."""
    name = f"{version:020d}.json"
    moved = os.path.join(table, ARCHIVE, name)
    for path in (os.path.join(table, LOG, name), moved):
        try:
            return _info_at(path, version, sliced, moved)
        except FileNotFoundError:
            continue
    return None


def _info_at(path: str, version: int, sliced: tuple[str, ...] = (), moved: str | None = None) -> dict:
    """`_info` of the commit file at `path`, read only up to its commitInfo line where that starts as writers
    write it (first: an events compaction's commit holds thousands of lines after it); with `sliced`, that
    line read by `commit_info.first_line_info`."""
    if sliced:
        info = first_line_info(path, sliced, None if moved == path else moved)
        if info is not None:
            return {**info, "version": version}
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith('{"commitInfo":'):
                return {**json.loads(line)["commitInfo"], "version": version}
            if line.strip():
                lines.append(line)
    return _info(lines, version)


def _info(lines: list[str], version: int) -> dict:
    """The commitInfo of a commit's lines, with its version. Only the commitInfo line is decoded where it
    starts as writers write it (a compaction's commit holds a line per file it removes: decoding them all
    made reading an events table's history 4x slower)."""
    for line in lines:
        if line.startswith('{"commitInfo":'):
            return {**json.loads(line)["commitInfo"], "version": version}
    actions = (json.loads(line) for line in lines)
    return {**next((a["commitInfo"] for a in actions if "commitInfo" in a), {}), "version": version}


def history(dt: Any, limit: int | None = None, *, below: int | None = None, sliced: tuple[str, ...] = (),
            version: int | None = None) -> list[dict]:
    """The commitInfo of the table's commits (with "version"), newest first from `dt`'s version, the archive
    included: what `dt.history(limit)` gives, but read from the commit files themselves. delta-rs 1.6.6's
    history skips a commit file that went missing after it listed the log (an archiver beside the reader)
    and numbers the older ones one too high, and on a table opened before later commits it returns those
    too, numbered from the table's version down. `below`: only the commits older than that version (a
    window that goes on from one read before). `sliced`: keys of long text values, given as
    `commit_info.Cut`s. `version`: read from that version down instead of `dt`'s (`dt` may then be a local
    table's path: its log read without opening the table)."""
    root = local_root(dt)
    if root is None:
        if below is None:
            return dt.history(limit)
        got = dt.history(None if limit is None else limit + dt.version() + 1 - below)
        return [c for c in got if c["version"] < below][:limit]
    out: list[dict] = []
    version = (dt.version() if version is None else version) if below is None else below - 1
    while version >= 0 and (limit is None or len(out) < limit):
        info = read_commit_info(root, version, sliced)
        if info is None:
            break
        out.append(info)
        version -= 1
    if version >= 0:  # missing (pruned, or a log Delta cleaned): the older commits still somewhere
        for older in sorted({*archived_versions(root), *versions(os.path.join(root, LOG))[0]}, reverse=True):
            if limit is not None and len(out) >= limit:
                break
            info = read_commit_info(root, older, sliced) if older < version else None
            if info is not None:
                out.append(info)
    return out


def pruned_through(table: str) -> int:
    """The newest version `prune()` judged: a commit at or below it that is not in the archive was deleted
    on purpose (-1 when nothing was pruned)."""
    try:
        with open(os.path.join(table, ARCHIVE, PRUNED), encoding="utf-8") as f:
            return int(json.load(f)["through"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return -1


def prune(table: str, before_ms: int, needed: Needed) -> int:
    """Delete the archived commits older than `before_ms` (epoch ms) except the versions `needed` keeps,
    given those commits' (version, commitInfo) oldest first; how many went. Records the newest version
    judged before deleting anything, so a reader that finds a hole at or below it knows it is deliberate.
    Safe beside the service (it reads recent commits only) and beside another pruner."""
    target = os.path.join(table, ARCHIVE)
    old: list[tuple[int, dict]] = []
    for v in archived_versions(table):
        path = os.path.join(target, f"{v:020d}.json")
        try:
            info = commit_info(path, v)
            stamp = info.get("timestamp") if info is not None else None
            if not isinstance(stamp, int):
                stamp = int(os.stat(path).st_mtime * 1000)
        except (OSError, ValueError):
            continue  # gone (another pruner) or unreadable: judged by whoever reads it next
        if stamp >= before_ms:
            break  # commits are in time order: the rest are newer
        old.append((v, info))
    if not old:
        return 0
    keep = needed(old)
    through = old[-1][0]
    if through > pruned_through(table):
        marker = os.path.join(target, PRUNED)
        temp = f"{marker}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as f:
            json.dump({"through": through}, f)
        os.replace(temp, marker)
    gone = 0
    for v, _ in old:
        if v not in keep:
            try:
                os.remove(os.path.join(target, f"{v:020d}.json"))
                gone += 1
            except FileNotFoundError:
                pass
    return gone
