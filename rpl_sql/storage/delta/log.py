"""Check a Delta table's log before rpl_sql trusts it, and quarantine damaged commits (`rpl-sql repair`).

delta-rs reads the newest commit it can parse: an emptied newest commit (0 bytes, or JSON with no actions) is
skipped silently, and the next writer commits on top of the version before it. rpl_sql refuses such a table
on open instead (MySQL's 1194, "marked as crashed and should be repaired"). Every commit rpl_sql writes has a
commitInfo action and at least one other action, so a commit without them is damaged; so is a truncated line,
and a version missing from the chain after the last checkpoint.
"""
from __future__ import annotations

import json
import os
import shlex
import re
from dataclasses import dataclass

from rpl_sql.errors import MySQLError

LOG = "_delta_log"
QUARANTINE = "_rpl_sql_quarantine"
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")


@dataclass(frozen=True)
class Damage:
    """The first bad version of a table's log and why."""

    table: str
    version: int
    reason: str


_LISTINGS: dict[str, tuple[int, tuple[list[int], int | None]]] = {}  # log dir -> (mtime, its versions)


def versions(log: str) -> tuple[list[int], int | None]:
    """The commit versions and the newest checkpoint of a log, re-read only when the directory changed."""
    mtime = os.stat(log).st_mtime_ns
    cached = _LISTINGS.get(log)
    if cached is None or cached[0] != mtime:
        names = os.listdir(log)
        commits = sorted(int(m.group(1)) for m in map(COMMIT_FILE.match, names) if m)
        checkpoints = [int(m.group(1)) for m in map(CHECKPOINT_FILE.match, names) if m]
        cached = _LISTINGS[log] = (mtime, (commits, max(checkpoints) if checkpoints else None))
    return cached[1]


def _commit_problem(path: str) -> str | None:
    """Why one commit file is damaged, or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if not data.strip():
        return "empty"
    actions = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            actions.append(json.loads(line))
        except ValueError:
            return "a line is not JSON (truncated?)"
    kinds = {k for a in actions if isinstance(a, dict) for k in a}
    if "commitInfo" not in kinds:
        return "no commitInfo action"
    info = next(a["commitInfo"] for a in actions if isinstance(a, dict) and "commitInfo" in a)
    if not kinds - {"commitInfo"} and not str(info.get("operation", "")).startswith("VACUUM"):
        return "no actions"  # only VACUUM START/END commits carry nothing but their commitInfo
    return None


def find_damage(table: str, newest_only: bool = False) -> Damage | None:
    """The first damaged or missing version after the last checkpoint, None if the log is sound (or absent).

    newest_only: check the newest commit's content and the chain of versions, not every commit's content
    (what an open costs: one listing and one small file)."""
    log = os.path.join(table, LOG)
    if not os.path.isdir(log):
        return None
    commits, checkpoint = versions(log)
    if not commits:
        return None
    start = checkpoint if checkpoint is not None else 0
    chain = [v for v in commits if v >= start]
    expected = list(range(start, commits[-1] + 1))
    missing = sorted(set(expected) - set(chain) - ({checkpoint} if checkpoint is not None else set()))
    if missing:
        return Damage(table, missing[0], "missing from the log")
    for v in ([commits[-1]] if newest_only else chain):
        problem = _commit_problem(os.path.join(log, f"{v:020d}.json"))
        if problem:
            return Damage(table, v, problem)
    return None


def check(table: str) -> None:
    """Raise MySQLError 1194 if the table's log is damaged; cheap enough for every open."""
    damage = find_damage(table, newest_only=True)
    if damage is not None:
        raise damaged(damage)


def latest_version(table: str) -> int | None:
    """The newest commit version in a local table's log (None: no commit yet), from the cached listing."""
    log = os.path.join(table, LOG)
    try:
        commits, _ = versions(log)
    except FileNotFoundError:
        return None
    return commits[-1] if commits else None


def last_checkpoint(log: str) -> int | None:
    """The version `_last_checkpoint` points readers to (None: absent or unreadable)."""
    try:
        with open(os.path.join(log, "_last_checkpoint"), encoding="utf-8") as f:
            return int(json.load(f)["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def warehouse_of(table: str) -> str:
    """The warehouse a table lies in: the nearest folder above it that holds the state table (`rpl_state`),
    else the table's own folder's parent."""
    here = os.path.abspath(table)
    while True:
        up = os.path.dirname(here)
        if up == here:
            return os.path.dirname(os.path.abspath(table))
        if os.path.isdir(os.path.join(up, "rpl_state", LOG)):
            return up
        here = up


def damaged(d: Damage) -> MySQLError:
    err = MySQLError.of("ER_CRASHED_ON_USAGE", f"{d.table} (version {d.version}: {d.reason})")
    err.hint = ("roll it back to its last good version, keeping the history before it: "
                f"rpl-sql repair --warehouse {shlex.quote(warehouse_of(d.table))}")
    return err


def tables(warehouse: str) -> list[str]:
    """The Delta tables under a warehouse (directories holding a _delta_log)."""
    out = []
    for root, dirs, _ in os.walk(warehouse):
        if LOG in dirs:
            out.append(root)
            dirs[:] = []
        else:
            dirs[:] = sorted(d for d in dirs if d != QUARANTINE)
    return sorted(out)


def repair(table: str) -> list[str]:
    """Move the first damaged version and every later one into <table>/_rpl_sql_quarantine/, so the table
    reads as its last good version with its history before it; returns the moved file names."""
    damage = find_damage(table)
    if damage is None:
        return []
    log = os.path.join(table, LOG)
    target = os.path.join(table, QUARANTINE)
    os.makedirs(target, exist_ok=True)
    moved = []
    for name in sorted(os.listdir(log)):
        m = COMMIT_FILE.match(name) or CHECKPOINT_FILE.match(name)
        if m and int(m.group(1)) >= damage.version:
            os.replace(os.path.join(log, name), os.path.join(target, name))
            moved.append(name)
    last = os.path.join(log, "_last_checkpoint")
    if os.path.exists(last):
        pointed = last_checkpoint(log)
        if pointed is None or pointed >= damage.version:
            os.replace(last, os.path.join(target, "_last_checkpoint"))
            moved.append("_last_checkpoint")
    return moved
