"""The read side of the state table `<warehouse>/rpl_state`: the latest state, any earlier version (AS OF), and
the audit trail its Delta log keeps (`history`, `filter_changes`). `store.DeltaStore` adds the commit protocol.

A commit's rpl_sql keys (FORMAT_KEY, CHANGED_KEY, CHANGES_KEY, FILTERS_BEFORE_KEY) are written by the store and
read here: they let the filter history skip the commits that changed no filter.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from urllib.parse import unquote

from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from rpl_sql.errors import MySQLError
from rpl_sql.filters.rules import TYPES, FilterType
from rpl_sql.filters.state import ServerState, initial_state
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta.commit import META_PREFIX
from rpl_sql.storage.delta.log import check as check_log
from rpl_sql.storage.delta.log import latest_version
from rpl_sql.storage.state_table import CHANNEL_FILTER, GLOBAL_FILTER, SCHEMA, sorted_rows, state_from_table

STATE_TABLE = "rpl_state"
FORMAT_VERSION = "1"

FORMAT_KEY = META_PREFIX + "version"
CHANGED_KEY = META_PREFIX + "filters_changed"  # how many filter rules the commit changed: lets audits skip it
# the commit's filter changes as JSON rows (scope, filter, rule, previous, configured_by): the history then needs
# no data file of old versions, so `rpl-sql upkeep --keep-days` can vacuum them
CHANGES_KEY = META_PREFIX + "filter_changes"
# the newest earlier version whose commit changed filters, or may have (a foreign writer's); -1 when none. The
# service commits the state once per applied batch (several a second), so the filter history follows these
# back through the few commits that matter instead of reading every commit of days of running.
FILTERS_BEFORE_KEY = META_PREFIX + "filters_before"
INTERNAL_KEYS = frozenset({FORMAT_KEY, CHANGED_KEY, CHANGES_KEY, FILTERS_BEFORE_KEY})

_FILTER_COLUMNS = ["seq", "kind", "channel_name", "filter_name", "filter_rule", "filter_values",
                   "configured_by", "active_since"]


@dataclass(frozen=True)
class Snapshot:
    """A state as read at one table version; `commit` lands only if nobody committed since.

    `version` is None when the table does not exist yet (the state is then `initial_state()`).
    """

    state: ServerState
    version: int | None
    _table: DeltaTable | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Commit:
    """One entry of the Delta log, newest first in `DeltaStore.history`.

    `metadata` is what the committer passed (e.g. ``{'statement': ..., 'operation': ...}``); `operation` is its
    'operation' if any, else Delta's own (`delta_operation`, e.g. 'WRITE'); `format` is 'rpl_sql.version'.
    """

    version: int
    timestamp: datetime
    operation: str
    metadata: dict[str, str]
    delta_operation: str
    format: str | None = None
    filters_changed: int | None = None  # rules changed (see `filter_changes`); None: not written by rpl_sql
    changes: tuple | None = None  # the recorded change rows (CHANGES_KEY), None where the commit has none


@dataclass(frozen=True)
class FilterChange:
    """One filter rule (scope, channel, type) changed by one commit: the audit trail MySQL does not keep.

    `channel_name` is None for a global filter; `filter_rule` is '' and `configured_by` None when the rule went
    away; `previous_rule` is None when it did not exist before.
    """

    version: int
    committed_at: datetime
    statement: str | None
    operation: str
    channel_name: str | None
    filter_name: str
    filter_rule: str
    previous_rule: str | None
    configured_by: str | None


def read_state(dt: DeltaTable, columns: list[str] | None = None):
    """The loaded version's rows (an arro3 table), read by delta-rs' own engine: no pyarrow, whose import
    (with numpy's) was a third of a control-plane statement's time. (`to_pyarrow_table()` scans through a
    Python filesystem handler on pyarrow's thread pool; a process that did so aborted at exit in 10-30% of
    runs.)"""
    select = "*" if columns is None else ", ".join(f'"{c}"' for c in columns)
    return QueryBuilder().register("state", dt).execute(f"SELECT {select} FROM state").read_all()


def _read_files(paths: list[str], columns: list[str] | None):
    """Data files of an older version read directly (the filter history's fallback), with pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = [pq.ParquetFile(p).read(columns=columns, use_threads=False) for p in paths]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        schema = pa.schema(SCHEMA)
        return (schema if columns is None else pa.schema([schema.field(c) for c in columns])).empty_table()
    return pa.concat_tables(parts, promote_options="permissive")


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _utc(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


_FilterKey = tuple[str | None, str]          # (channel_name or None for global, filter_name)
_FilterVal = tuple[str, str, str | None, int]  # (filter_values JSON, filter_rule, configured_by, active_since)
_ABSENT = ("[]", "", None, 0)


def utc_time(text: str, clause: str, problem: str = "not a time") -> datetime:
    """A time literal of AS OF / SINCE: 'YYYY-MM-DD hh:mm:ss[.ffffff]', UTC unless it carries an offset."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise MySQLError.of("ER_WRONG_ARGUMENTS", f"{clause} ('{text}' is {problem} 'YYYY-MM-DD hh:mm:ss')") from None
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at


class StateHistory:
    """Reads `<warehouse>/rpl_state` at its newest or any earlier version, and the commits in its log."""

    def __init__(self, warehouse: str | os.PathLike):
        self.warehouse = os.fspath(warehouse)
        self._filter_cache: dict[tuple[int, int], dict[_FilterKey, _FilterVal]] = {}
        self._latest: DeltaTable | None = None
        self._loaded: tuple[int, ServerState] | None = None

    @property
    def state_path(self) -> str:
        """Where the state table lives: ``<warehouse>/rpl_state``."""
        return self.warehouse.rstrip("/") + "/" + STATE_TABLE


    def _open(self, version: int | None = None) -> DeltaTable | None:
        check_log(self.state_path)
        try:
            return archive.open_table(self.state_path, version=version)
        except TableNotFoundError:
            return None


    def version(self) -> int | None:
        """The latest table version, None before the first commit."""
        dt = self._open()
        return None if dt is None else dt.version()


    def load(self) -> Snapshot:
        """Read the latest state.

        >>> DeltaStore("/tmp/empty").load()
        Snapshot(state=ServerState(...), version=None)
        """
        dt = self._latest_table()
        if dt is None:
            return Snapshot(initial_state(), None)
        version = dt.version()
        if self._loaded is None or self._loaded[0] != version:
            self._loaded = (version, state_from_table(read_state(dt)))  # states are immutable: shared safely
        return Snapshot(self._loaded[1], version, dt)


    def _latest_table(self) -> DeltaTable | None:
        """The table at its newest version: the one this store opened before, moved forward when the log grew
        (opening costs ~10 ms of log replay; the log directory listing is cached by its mtime)."""
        dt = self._latest
        if dt is not None and "://" not in self.state_path:
            check_log(self.state_path)
            newest = latest_version(self.state_path)
            if newest is not None and newest >= dt.version():
                if newest > dt.version():
                    dt.update_incremental()
                return dt
        dt = self._latest = self._open()
        return dt


    def load_version(self, version: int) -> ServerState:
        """The state as committed at `version` (time travel; from the commit's own files once its log entry
        was archived, which delta-rs cannot travel to)."""
        try:
            dt = self._open(version)
        except DeltaError:
            dt = None
        if dt is not None:
            return state_from_table(read_state(dt))
        files = _overwrite_files(self.state_path, version)
        if files is None:
            raise FileNotFoundError(f"{self.state_path} version {version}")
        return state_from_table(_read_files(files, None))


    def version_as_of(self, when: int | str) -> int:
        """The state version in force at `when`: a version number, or a time ('YYYY-MM-DD hh:mm:ss[.ffffff]',
        UTC unless it carries an offset) answered by the newest commit at or before it. MySQL's 1210 when
        there is no such version."""
        latest = self.version()
        if latest is None:
            raise MySQLError.of("ER_WRONG_ARGUMENTS", "AS OF (the warehouse has no state yet)")
        if isinstance(when, int):
            if not 0 <= when <= latest:
                raise MySQLError.of("ER_WRONG_ARGUMENTS", f"AS OF (no version {when}: the state table has "
                                    f"versions 0 to {latest})")
            return when
        at = utc_time(when, "AS OF", "neither a version nor a time")
        found = self._version_at(at, latest)
        if found is not None:
            return found
        kept = self._pruned_before()
        if kept is not None:
            raise MySQLError.of("ER_WRONG_ARGUMENTS", f"AS OF ('{when}' is before the history `rpl-sql upkeep "
                                f"--keep-days` kept, which starts at version {kept.version}, {kept.timestamp})")
        raise MySQLError.of("ER_WRONG_ARGUMENTS", f"AS OF ('{when}' is before the first commit of the state table)")


    def _version_at(self, at: datetime, latest: int) -> int | None:
        """The newest version committed at or before `at`, by binary search over the commits' timestamps
        (taken as increasing, as one writer lock per warehouse makes them; Delta's own time travel assumes
        the same of its monotonized timestamps): about 20 commit files where the history has millions. The
        whole history, newest first, for remote tables or where a log entry is missing. None before the first
        commit, or before the first that upkeep's pruning kept whole."""
        root = archive.local_root(self.state_path)
        first = 0 if root is None else archive.pruned_through(root) + 1
        lo, hi, found = first, latest, None
        while root is not None and lo <= hi:
            mid = (lo + hi) // 2
            info = commit_info_of(root, mid)
            if info is None:
                break
            if _utc(info["timestamp"]) <= at:
                found, lo = mid, mid + 1
            else:
                hi = mid - 1
        if root is not None and lo > hi:
            return found
        for commit in self.history():  # newest first
            if commit.timestamp <= at:
                return commit.version if commit.version >= first else None
        return None


    def _pruned_before(self) -> Commit | None:
        """The first commit after those upkeep pruned from the archive (None when it pruned none)."""
        root = archive.local_root(self.state_path)
        through = -1 if root is None else archive.pruned_through(root)
        info = None if through < 0 else commit_info_of(root, through + 1)
        return None if info is None else commit_of(info)


    def load_as_of(self, when: int | str) -> Snapshot:
        """The state in force at `when` (see `version_as_of`); 1210 when upkeep's retention removed its files."""
        version = self.version_as_of(when)
        try:
            return Snapshot(self.load_version(version), version)
        except (OSError, DeltaError) as e:
            raise MySQLError.of("ER_WRONG_ARGUMENTS", f"AS OF (version {version} can no longer be read: {e}; "
                                "`rpl-sql upkeep --keep-days` removes the files of older versions)") from None


    def history(self, limit: int | None = None) -> list[Commit]:
        """The commits of the state table, newest first ([] before the first commit).

        >>> [(c.version, c.operation, c.metadata["statement"]) for c in store.history(limit=1)]
        [(3, 'CHANGE REPLICATION FILTER', 'CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1, db2)')]
        """
        dt = self._open()
        if dt is None:
            return []
        return [commit_of(info) for info in archive.history(dt, limit)]


    def filter_commits(self) -> tuple[list[Commit], bool]:
        """The commits that changed filter rules or may have (foreign writers'), oldest first, and whether
        the filters before the first of them were none (the list reaches back to the table's creation).

        Follows each commit's FILTERS_BEFORE_KEY back from the newest, reading a commit file per filter
        change rather than one per commit. Where that chain is broken (a remote table, a log entry gone)
        it is the whole history instead, counter-only commits included.
        """
        walked = self._filter_chain()
        if walked is not None:
            return [commit_of(info) for info in reversed(walked) if may_change_filters(info)], True
        commits = sorted(self.history(), key=lambda c: c.version)
        return commits, bool(commits) and commits[0].version == 0


    def filter_history_versions(self) -> set[int] | None:
        """The versions whose commits the filter history reads (what upkeep's pruning of the archive must
        keep); None when the chain is broken and the history reads every commit."""
        walked = self._filter_chain()
        return None if walked is None else {int(info["version"]) for info in walked}


    def _filter_chain(self) -> list[dict] | None:
        """The commitInfos of the newest commit and of each one its FILTERS_BEFORE_KEY names (or the one
        before, where it names none), newest first, down past version 0; None where a commit on the way
        cannot be read (a remote table, a log entry gone)."""
        root = archive.local_root(self.state_path)
        if root is None:
            return None
        dt = self._latest_table()
        version, walked = (dt.version() if dt is not None else -1), []
        while version >= 0:
            info = commit_info_of(root, version)
            if info is None:
                return None
            walked.append(info)
            before = info.get(FILTERS_BEFORE_KEY)
            version = int(before) if before is not None and int(before) < version else version - 1
        return walked


    def _filters_at(self, commit: Commit) -> dict[_FilterKey, _FilterVal]:
        key = (commit.version, int(commit.timestamp.timestamp() * 1000))
        cached = self._filter_cache.get(key)
        if cached is None:
            files = _overwrite_files(self.state_path, commit.version) if commit.format is not None else None
            if files is not None:
                table = _read_files(files, _FILTER_COLUMNS)
            else:
                table = read_state(archive.open_table(self.state_path, version=commit.version), _FILTER_COLUMNS)
            cached = self._filter_cache[key] = filter_map(table)
        return cached


    def filter_changes(self, channel: str | None = None, limit: int | None = None) -> list[FilterChange]:
        """Which commits changed which filter rules, newest first: values, CONFIGURED_BY or ACTIVE_SINCE
        changed, or the rule appeared or went away. Counter updates are not changes.

        `channel` keeps one channel's rules ('' is the default channel); `limit` counts changes. Only the
        versions whose commit says it changed filters (or does not say: foreign writers) are read, so
        counter-only commits cost nothing; a version whose predecessor's log is gone serves as the baseline.

        >>> [(c.version, c.filter_name, c.filter_rule, c.previous_rule) for c in store.filter_changes(limit=1)]
        [(3, 'REPLICATE_DO_DB', 'db1,db2', 'db1')]
        """
        commits, from_creation = self.filter_commits()
        per_commit: list[list[FilterChange]] = []
        previous: dict[_FilterKey, _FilterVal] | None = {} if from_creation else None
        last: Commit | None = None  # the latest commit seen, whose filters `previous` is when known
        for commit in commits:
            if commit.changes is not None and (previous is not None or last is not None):
                per_commit.append([_change(commit, row) for row in commit.changes
                                   if channel is None or row[0] == channel])
                previous, last = None, commit  # read from its data files only if a later commit needs them
                continue
            if commit.filters_changed == 0 and (previous is not None or last is not None):
                continue
            current = self._filters_at(commit)
            if previous is None and last is not None:
                previous = self._filters_at(last)
            if previous is not None:
                per_commit.append(_diff(commit, previous, current, channel))
            previous, last = current, commit
        changes = [c for found in reversed(per_commit) for c in found]
        return changes if limit is None else changes[:limit]


def _overwrite_files(state_path: str, version: int) -> list[str] | None:
    """The data files of a version that `commit()` wrote: the 'add' actions of its own log entry (in the
    log or the archive), since it overwrote the whole table. About 20x cheaper than `load_as_version`,
    which replays a checkpoint (with a tombstone per earlier commit, in tables made before tombstones
    expired). None (use time travel) for remote tables, other writers' commits or odd entries."""
    root = archive.local_root(state_path)
    if root is None:
        return None
    try:
        actions = archive.read_commit(root, version)
    except (OSError, ValueError):
        return None
    if actions is None:
        return None
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    adds = [a["add"] for a in actions if "add" in a]
    if FORMAT_KEY not in info:
        return None
    if not adds or any(a.get("deletionVector") or a.get("partitionValues") for a in adds):
        return None
    return [os.path.join(root, unquote(a["path"])) for a in adds]


def commit_of(info: dict) -> Commit:
    """A Commit from a commitInfo action with its "version"."""
    meta = {k[len(META_PREFIX):]: str(v) for k, v in info.items()
            if k.startswith(META_PREFIX) and k not in INTERNAL_KEYS}
    delta_op = str(info.get("operation", ""))
    changed = info.get(CHANGED_KEY)
    recorded = info.get(CHANGES_KEY)
    return Commit(version=info["version"], timestamp=_utc(info["timestamp"]),
                  operation=meta.get("operation") or delta_op, metadata=meta,
                  delta_operation=delta_op, format=info.get(FORMAT_KEY),
                  filters_changed=int(changed) if changed is not None else None,
                  changes=tuple(map(tuple, json.loads(recorded))) if recorded else None)


def commit_info_of(root: str, version: int) -> dict | None:
    """The commitInfo of one commit of a local table, in the log or the archive, with its "version"; None
    when the commit file or its timestamp is missing, or it cannot be read."""
    try:
        info = archive.read_commit_info(root, version)
    except (OSError, ValueError):
        return None
    return info if info is not None and isinstance(info.get("timestamp"), int) else None


# Delta operations that leave a table's rows as they were: a foreign writer's commit of one (the property change
# docs/semantics.md gives, Delta's own OPTIMIZE or VACUUM) changed no filter. Its version cannot be read once it
# is archived, and counting it as a change pinned upkeep's history horizon at it for good.
_ROWS_KEPT = frozenset({"SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "OPTIMIZE", "VACUUM START", "VACUUM END",
                        "ADD CONSTRAINT", "DROP CONSTRAINT", "UPGRADE PROTOCOL"})


def may_change_filters(info: dict) -> bool:
    """Whether a commit changed filter rules, or may have: a foreign writer's (unless its operation keeps the
    rows), or one that does not say."""
    if FORMAT_KEY not in info:
        return str(info.get("operation", "")).upper() not in _ROWS_KEPT
    changed = info.get(CHANGED_KEY)
    return changed is None or str(changed) != "0"


def change_rows(previous: dict[_FilterKey, _FilterVal], current: dict[_FilterKey, _FilterVal],
                 channel: str | None) -> list[tuple]:
    """(scope, filter, rule, previous rule, configured_by) of every rule that changed, in history order."""
    out = []
    for key in sorted(set(previous) | set(current), key=_change_order):
        if channel is not None and key[0] != channel:
            continue
        old, new = previous.get(key, _ABSENT), current.get(key, _ABSENT)
        if _compared(old) == _compared(new):
            continue
        removed = _compared(new) == _compared(_ABSENT)
        out.append((key[0], key[1], "" if removed else new[1] or "",
                    None if _compared(old) == _compared(_ABSENT) else old[1] or "", None if removed else new[2]))
    return out


def _change(commit: Commit, row: tuple) -> FilterChange:
    return FilterChange(version=commit.version, committed_at=commit.timestamp,
                        statement=commit.metadata.get("statement"), operation=commit.operation,
                        channel_name=row[0], filter_name=row[1], filter_rule=row[2], previous_rule=row[3],
                        configured_by=row[4])


def _diff(commit: Commit, previous: dict[_FilterKey, _FilterVal], current: dict[_FilterKey, _FilterVal],
          channel: str | None) -> list[FilterChange]:
    return [_change(commit, row) for row in change_rows(previous, current, channel)]


def filter_map(table) -> dict[_FilterKey, _FilterVal]:
    """The filter rows of a state table, keyed by (channel or None for global, filter name)."""
    out = {}
    for row in sorted_rows(table.select(_FILTER_COLUMNS)):
        if row["kind"] in (GLOBAL_FILTER, CHANNEL_FILTER):
            scope = row["channel_name"] if row["kind"] == CHANNEL_FILTER else None
            out[(scope, row["filter_name"])] = (row["filter_values"], row["filter_rule"], row["configured_by"],
                                                row["active_since"] or 0)
    return out


def _compared(v: _FilterVal) -> tuple:
    """What makes a rule change: values, CONFIGURED_BY, ACTIVE_SINCE (not the rule text, not the counter)."""
    return v[0], v[2], v[3]


def _change_order(key: _FilterKey) -> tuple:
    """Global rules first, then channels by name; types in P_S row order."""
    scope, name = key
    rank = TYPES.index(FilterType(name))
    return (scope is not None, (scope or "").encode("utf-8"), rank)

