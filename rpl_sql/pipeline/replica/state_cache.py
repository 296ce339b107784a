"""The state table as a service's loops read it: often (START/STOP REPLICA reach them within STATE_EVERY),
from one shared copy."""
from __future__ import annotations

import threading
import time

from rpl_sql.filters.state import ServerState
from rpl_sql.storage.store import DeltaStore

STATE_EVERY = 0.2      # seconds between reads of the state table (START/STOP reach the loops within this)


class StateCache:
    """The state table, re-read at most every STATE_EVERY seconds (shared by a channel's two loops)."""

    def __init__(self, store: DeltaStore):
        self.store, self.at, self.value, self.version = store, 0.0, None, -1
        self.lock = threading.Lock()

    def get(self) -> ServerState:
        return self.versioned()[0]

    def invalidate(self) -> None:
        """The next read goes to the table (after this process committed to it)."""
        with self.lock:
            self.at = 0.0

    def versioned(self) -> tuple[ServerState, int]:
        """The state and its table version (-1 before the first commit)."""
        with self.lock:
            now = time.monotonic()
            if self.value is None or now - self.at >= STATE_EVERY:
                snap = self.store.load()
                self.value, self.version, self.at = snap.state, -1 if snap.version is None else snap.version, now
            return self.value, self.version
