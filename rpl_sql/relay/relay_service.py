"""`rpl-sql relay`: one source, its binlog read once into the spool, and its replicas served with each one's own
filters from the relay's warehouse.

    rpl-sql relay --warehouse WH --channel src [--listen 127.0.0.1:3307] [--user repl]

The channel's CHANGE REPLICATION SOURCE says where the source is; its filters are what a replica receives
that has no channel of its own. A replica with server_id N that should receive something else gets a channel
`replica_N` in the same warehouse, configured with the usual statements (CHANGE REPLICATION SOURCE ... FOR
CHANNEL 'replica_N', CHANGE REPLICATION FILTER ... FOR CHANNEL 'replica_N'); changes apply from the next
transaction a replica is sent. Rewrite rules stay with the replica (WL#2387): REPLICATE_REWRITE_DB is not
applied here.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from typing import Any, Callable

from rpl_sql.errors import MySQLError
from rpl_sql.filters.rules import FilterType
from rpl_sql.pipeline.source_filter import JoinedFilter, SourceFilter, source_side_filter
from rpl_sql.relay.dump_server import RelayServer
from rpl_sql.relay.spool import Spool
from rpl_sql.relay.upstream import Upstream
from rpl_sql.source_server.connection import connection_settings
from rpl_sql.storage.store import DeltaStore

log = logging.getLogger(__name__)

STATE_EVERY = 1.0  # seconds between two reads of the warehouse's state (filter changes)
RELAY_SERVER_ID = 4_000_000_000  # how the relay registers with the source, unless told otherwise


def replica_channel(server_id: int) -> str:
    """The channel whose filters a replica with this server_id receives, when it exists."""
    return f"replica_{server_id}"


class Relay:
    """The relay of one channel's source: upstream reader, spool, server, and the filters per replica."""

    def __init__(self, warehouse: str, channel: str, *, host: str = "127.0.0.1", port: int = 3307,
                 user: str = "repl", password: str = "", spool: str | None = None,
                 server_id: int = RELAY_SERVER_ID, heartbeat: float = 1.0):
        self.warehouse, self.channel = os.fspath(warehouse), channel
        self.store = DeltaStore(self.warehouse)
        self._state, self._version, self._at = None, None, 0.0
        self._filters: dict[tuple[int | None, str], SourceFilter | None] = {}
        state = self.state()
        ch = state.channel(channel)
        if ch is None:
            raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", channel)
        if not ch.configured:
            raise MySQLError.of("ER_BAD_REPLICA")
        settings, _ = connection_settings(self.warehouse, ch)
        self.spool = Spool(self.spool_folder(self.warehouse, channel, spool))
        self.upstream = Upstream(settings, self.spool, server_id)
        self.server = RelayServer(self.spool, settings, user, password, host, port, heartbeat=heartbeat,
                                  source_server_id=lambda: self.upstream.source_server_id,
                                  filters_for=self.filters_for)
        self.server.status_fn = self.status
        self._lock = threading.Lock()

    @staticmethod
    def spool_folder(warehouse: str, channel: str, spool: str | None = None) -> str:
        """Where the relay of `channel` keeps its copy of the binlog and its status.json."""
        return spool or os.path.join(warehouse, "relay", hashlib.sha1(channel.encode("utf-8")).hexdigest()[:16])

    def state(self):
        now = time.monotonic()
        if self._state is None or now - self._at >= STATE_EVERY:
            snap = self.store.load()
            self._state, self._version, self._at = snap.state, snap.version, now
        return self._state

    def channel_for(self, server_id: int) -> str:
        own = replica_channel(server_id)
        return own if self.state().channel(own) is not None else self.channel

    def filters_for(self, server_id: int) -> Callable[[], SourceFilter | None]:
        last: list = [None, None, 0.0]  # (version, filters, when): asked once per transaction, read once a while

        def now() -> SourceFilter | None:
            if time.monotonic() - last[2] < STATE_EVERY and last[0] == self._version:
                return last[1]
            with self._lock:
                state = self.state()
                name = self.channel_for(server_id)
                key = (self._version, name)
                if key not in self._filters:
                    ch = state.channel(name)
                    wanted = [t for t in FilterType if t is not FilterType.REWRITE_DB and ch.filters.values(t)]
                    own = SourceFilter(state, name) if wanted else None
                    side = source_side_filter(state, name)
                    self._filters[key] = JoinedFilter.of(own, side)
                last[:] = [self._version, self._filters[key], time.monotonic()]
                return last[1]
        return now

    def start(self) -> "Relay":
        self.upstream.start()
        threading.Thread(target=self.server.serve_forever, name="rpl_sql-relay-server", daemon=True).start()
        threading.Thread(target=self._status_loop, name="rpl_sql-relay-status", daemon=True).start()
        return self

    def close(self) -> None:
        self.server.close()
        self.upstream.close()

    def status(self) -> dict[str, Any]:
        """What `rpl-sql relay --status` and SHOW RELAY STATUS show."""
        end = self.spool.end()
        return {"channel": self.channel, "listening": f"{self.server.host}:{self.server.port}",
                "spool": str(self.spool.folder), "spool_end": list(end) if end else None,
                "bytes_read": self.upstream.bytes_read, "source_error": self.upstream.error,
                "replicas": [{"server_id": r.server_id, "user": r.user, "peer": r.peer, "file": r.file, "pos": r.pos,
                              "filters_channel": "(forwarded by the replica)" if r.forwarded
                              else self.channel_for(r.server_id), "events_read": r.events_read,
                              "events_sent": r.events_sent, "bytes_sent": r.bytes_sent}
                             for r in list(self.server.replicas.values())]}

    def _status_loop(self) -> None:
        path = self.spool.folder / "status.json"
        while not self.server.stop.is_set():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.status(), indent=1))
            os.replace(tmp, path)
            self.server.stop.wait(1.0)
