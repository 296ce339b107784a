"""The control-plane state as one small Delta Lake table, written with delta-rs (no Spark, no JVM).

`<warehouse>/rpl_state` holds the whole `ServerState`, one row per thing (the server, each channel, each used
filter slot), so one statement is one atomic Delta commit even when it touches channels and filters together.
Every commit overwrites the table from the snapshot it read, with no commit retries inside delta-rs: a writer
that lost a race gets `ConcurrentCommitError` instead of silently overwriting, and `DeltaStore.transact` reruns its
pure step on the fresh state. The Delta log doubles as the audit trail, read by `state_history.StateHistory`,
which `DeltaStore` extends with this commit protocol.

    >>> store = DeltaStore("/tmp/warehouse")
    >>> snap = store.load()                                  # version None on a fresh warehouse
    >>> store.commit(snap, new_state, {"statement": "CHANGE REPLICATION FILTER ..."})
    0
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import random
import re
import tempfile
import threading
import time
from typing import Callable, Iterator, TypeVar

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from rpl_sql.display.stderr import redirected
from rpl_sql.errors import MySQLError, RplSqlError
from rpl_sql.filters.state import ServerState
from rpl_sql.storage import state_history
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta.commit import META_PREFIX
from rpl_sql.storage.state_history import (CHANGED_KEY, CHANGES_KEY, FILTERS_BEFORE_KEY, FORMAT_KEY, FORMAT_VERSION,
                                           INTERNAL_KEYS, STATE_TABLE, Commit, FilterChange, Snapshot, StateHistory,
                                           change_rows, filter_map, may_change_filters, utc_time)
from rpl_sql.storage.state_table import SCHEMA, state_from_table, state_to_table

__all__ = ["STATE_TABLE", "SCHEMA", "FORMAT_VERSION", "Snapshot", "Commit", "FilterChange", "ConcurrentCommitError",
           "DeltaStore", "state_to_table", "state_from_table", "utc_time", "resolve_warehouse"]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_WAREHOUSE = "rpl_warehouse"
WAREHOUSE_ENV = "RPL_SQL_WAREHOUSE"
CHANGES_MAX_BYTES = 1 << 20  # larger change sets are read back from the data files instead


class ConcurrentCommitError(RplSqlError):
    """Another writer committed after the snapshot was read; reload and redo the change."""



def resolve_warehouse(warehouse: str | os.PathLike | None) -> str:
    """The explicit path, else $RPL_SQL_WAREHOUSE, else ./rpl_warehouse."""
    return os.fspath(warehouse or os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE)



@contextlib.contextmanager
def _write_errors(path: str, race: Callable[[BaseException], bool] = lambda e: False) -> Iterator[None]:
    """A failed write becomes MySQL's 1026 (a read-only or full disk, say), and the Rust panic delta-rs prints
    on its way out (object_store's 'Already shut down') stays off the terminal: fd 2 is captured during the
    write and passed on only when it succeeds. A lost race (CommitFailedError) passes through unchanged."""
    failed = None
    with tempfile.TemporaryFile() as captured:
        try:
            with redirected(captured.fileno()):
                try:
                    yield
                except CommitFailedError:
                    raise
                except (DeltaError, OSError) as e:
                    if race(e):  # another writer got there first: the caller's optimistic retry handles it
                        raise
                    failed = e
        finally:
            if failed is None:
                captured.seek(0)
                noise = captured.read()
                if noise:
                    os.write(2, noise)
    if failed is not None:
        reason = str(failed).strip().splitlines()[-1] if str(failed).strip() else type(failed).__name__
        code = getattr(failed, "errno", None) or int((re.search(r"os error (\d+)", reason) or [0, 0])[1])
        raise MySQLError.of("ER_ERROR_ON_WRITE", path, code, reason) from failed



WRITER_LOCK = ".rpl_sql-writer.lock"  # in the warehouse directory: local writers take turns on it
_LOCKS: dict[str, list] = {}  # lock file -> [thread lock, file descriptor, depth], per process
_LOCKS_GUARD = threading.Lock()


class DeltaStore(StateHistory):
    """The replica's control-plane state in `<warehouse>/rpl_state`: its reads, and commits with optimistic
    concurrency.

    >>> store = DeltaStore("/tmp/wh")
    >>> result, version = store.transact(lambda s: (s.with_channel(Channel("ch1")), "ok"),
    ...                                  {"statement": "CHANGE REPLICATION SOURCE TO ... FOR CHANNEL ch1"})
    >>> [c.metadata["statement"] for c in store.history(1)]
    ['CHANGE REPLICATION SOURCE TO ... FOR CHANNEL ch1']
    """

    def __init__(self, warehouse: str | os.PathLike, checkpoint_every: int = 50):
        """Nothing touches the disk until the first commit creates the table (and its directories).

        `checkpoint_every`: write a Delta checkpoint after every N-th version (0: never), so a fresh
        process replays at most N log files to load the state.
        """
        super().__init__(warehouse)
        self.checkpoint_every = checkpoint_every
        self._chain_tip: tuple[int, int] | None = None  # (version, newest version <= it that changed filters)

    def commit(self, snapshot: Snapshot, new_state: ServerState, metadata: dict[str, str]) -> int:
        """Write `new_state` as the version right after `snapshot.version` and return that version.

        Raises `ConcurrentCommitError` if another writer committed (or created the table) first; the table is then
        unchanged. `metadata` (e.g. ``{'statement': text, 'operation': 'CHANGE REPLICATION FILTER'}``) is kept
        in the commit, with keys namespaced as ``rpl_sql.<key>``.
        """
        data = state_to_table(new_state)
        info = self._commit_info(metadata)
        before = {} if snapshot.version is None else filter_map(state_to_table(snapshot.state))
        rows = change_rows(before, filter_map(data), None)
        info[CHANGED_KEY] = str(len(rows))
        recorded = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
        if len(recorded) <= CHANGES_MAX_BYTES:
            info[CHANGES_KEY] = recorded
        before = -1 if snapshot.version is None else self._changed_through(snapshot.version)
        if before is not None:
            info[FILTERS_BEFORE_KEY] = str(before)
        version = self._write(snapshot, data, info)
        if before is not None:
            self._chain_tip = (version, version if rows else before)
        return version


    def _write(self, snapshot: Snapshot, data, info: dict[str, str]) -> int:
        """One commit of `data` right after `snapshot` (or creating the table); ConcurrentCommitError if it lost."""
        if snapshot.version is None:
            try:
                with _write_errors(self.state_path, race=lambda e: DeltaTable.is_deltatable(self.state_path)):
                    delta_commit.write(self.state_path, data, mode="error", metadata=info, retries=0, create=True)
            except DeltaError as e:
                if isinstance(e, CommitFailedError) or DeltaTable.is_deltatable(self.state_path):
                    raise ConcurrentCommitError("the state table was created concurrently") from e
                raise
            return 0
        dt = snapshot._table
        if dt is None or dt.version() != snapshot.version:
            dt = self._open(snapshot.version)
            if dt is None:
                raise ConcurrentCommitError(f"version {snapshot.version} of the state table is gone")
        try:
            with _write_errors(self.state_path):
                delta_commit.write(dt, data, mode="overwrite", metadata=info, retries=0)
        except CommitFailedError as e:
            raise ConcurrentCommitError(f"the state table moved past version {snapshot.version}") from e
        version = snapshot.version + 1
        if self.checkpoint_every and version % self.checkpoint_every == 0:
            try:
                dt.create_checkpoint()
            except DeltaError:
                log.warning("checkpoint of %s at version %d failed", self.state_path, version, exc_info=True)
        return version


    def _changed_through(self, version: int) -> int | None:
        """The newest version <= `version` whose commit changed filters or may have (`version` itself for a
        commit of an earlier release, which names none: the history reads on from there); None where the
        commit cannot be read (a remote table): the new commit then names none either."""
        if self._chain_tip is not None and self._chain_tip[0] == version:
            return self._chain_tip[1]
        root = archive.local_root(self.state_path)
        info = None if root is None else state_history.commit_info_of(root, version)
        if info is None:
            return None
        before = info.get(FILTERS_BEFORE_KEY)
        return version if may_change_filters(info) or before is None else int(before)


    @staticmethod
    def _commit_info(metadata: dict[str, str]) -> dict[str, str]:
        info = {}
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"commit metadata must map str to str, got {key!r}: {value!r}")
            if META_PREFIX + key in INTERNAL_KEYS:
                raise ValueError(f"commit metadata key {key!r} is reserved")
            info[META_PREFIX + key] = value
        info[FORMAT_KEY] = FORMAT_VERSION
        return info


    def transact(self, step: Callable[[ServerState], tuple[ServerState, T]], metadata: dict[str, str],
                 retries: int = 20) -> tuple[T, int | None]:
        """Apply the pure `step` to the latest state and commit its result, redoing it on conflicts.

        Returns (step's result, new version), or version None when the step changed nothing (no commit).
        A `MySQLError` from `step` propagates and commits nothing; after `retries` lost races,
        ER_LOCK_DEADLOCK.

        >>> store.transact(lambda s: (s, "nothing to do"), {"statement": "STOP REPLICA"})
        ('nothing to do', None)
        """
        failures = 0
        with self._writer_lock():
            while True:
                snap = self.load()
                new_state, result = step(snap.state)
                if new_state == snap.state:
                    return result, None
                try:
                    return result, self.commit(snap, new_state, metadata)
                except ConcurrentCommitError as e:
                    failures += 1
                    if failures >= retries:
                        raise MySQLError.of("ER_LOCK_DEADLOCK") from e
                    time.sleep(random.uniform(0, min(0.1, 0.002 * 2 ** failures)))


    @contextlib.contextmanager
    def _writer_lock(self) -> Iterator[None]:
        """Writers on this host queue on a lock file, as MySQL queues statements; writers on other hosts
        still meet only the optimistic commit. Re-entrant within a thread (a step may commit through another
        store of the same warehouse); none before the warehouse exists, or where it is read-only."""
        if not os.path.isdir(self.warehouse):
            yield
            return
        path = os.path.realpath(os.path.join(self.warehouse, WRITER_LOCK))
        with _LOCKS_GUARD:
            entry = _LOCKS.setdefault(path, [threading.RLock(), None, 0])
        with entry[0]:
            if entry[2] == 0:
                try:
                    entry[1] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                    fcntl.flock(entry[1], fcntl.LOCK_EX)
                except OSError:
                    entry[1] = None
            entry[2] += 1
            try:
                yield
            finally:
                entry[2] -= 1
                if entry[2] == 0 and entry[1] is not None:
                    os.close(entry[1])
                    entry[1] = None

