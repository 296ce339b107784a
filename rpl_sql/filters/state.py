"""The replica's control-plane state as immutable values: server settings, channels, filter objects.

Nothing here does I/O; `server.py` maps (state, statement) to a new state and `store.py` persists it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Iterator

from rpl_sql.filters.rules import Filters, FilterType, Matching

DEFAULT_CHANNEL = ""
GR_CHANNELS = ("group_replication_applier", "group_replication_recovery")
MAX_CHANNEL_NAME = 64
MAX_CHANNELS = 256
# CHANGE REPLICATION SOURCE's source-side filters (WL#2387): every type but rewrite, which stays on the replica
SOURCE_SIDE_KEYS = frozenset(t.value for t in FilterType if t is not FilterType.REWRITE_DB)


def is_gr_channel(name: str) -> bool:
    return name in GR_CHANNELS


@dataclass(frozen=True)
class ApplierPosition:
    """How far a channel's applier (`rpl_sql.pipeline.applier`) got: mysql.slave_relay_log_info plus the GTIDs
    it executed.

    Kept in the state so one commit moves the position and the COUNTERs together (the crash-safety anchor).
    """

    seq: int = 0  # last events.seq processed (applied or ignored); 0 = nothing yet
    executed_gtid_set: str = ""  # every processed transaction's GTID, compact ('uuid:1-100' / 'domain-server-seq')
    source_log_file: str = ""  # binlog file and end position of that event (Relay_Source_Log_File, Exec_Source_Log_Pos)
    source_log_pos: int = 0
    reset_at: int = 0  # the channel's RESET REPLICA whose received-but-unapplied events the applier discarded


@dataclass(frozen=True)
class Channel:
    """A replication channel: its source options, thread flags and own filter object."""

    name: str
    options: tuple[tuple[str, object], ...] = ()  # canonical SOURCE_* keys, in first-set order
    io_running: bool = False
    sql_running: bool = False
    filters: Filters = field(default_factory=Filters)
    applier: ApplierPosition = field(default_factory=ApplierPosition)
    skip_counter: int = 0  # landed events its SQL thread skips next (whole transactions), from sql_replica_skip_counter
    reset_at: int = 0      # µs of the last RESET REPLICA: what the receiver had read before it is forgotten
    # RESYNC REPLICA TABLE requests, (number, db, table) each: the replica service copies those tables again
    resync: tuple[tuple[int, str, str], ...] = ()

    @property
    def configured(self) -> bool:
        """MySQL's test: the channel has a non-empty source host."""
        return bool(self.option("SOURCE_HOST"))

    @property
    def is_gr(self) -> bool:
        return is_gr_channel(self.name)

    def option(self, key: str, default: object = None) -> object:
        for k, v in self.options:
            if k == key:
                return v
        return default

    def with_options(self, updates: dict[str, object]) -> "Channel":
        """`updates` over the options; an empty source-side filter list clears that option."""
        opts = dict(self.options)
        opts.update(updates)
        return replace(self, options=tuple((k, v) for k, v in opts.items()
                                           if not (k in SOURCE_SIDE_KEYS and not v)))

    @property
    def source_side_filters(self) -> Filters | None:
        """The filters its source (a relay), or else its own ingest, applies before anything reaches the replica:
        WL#2387's extension, CHANGE REPLICATION SOURCE TO REPLICATE_* (None: it has none)."""
        got = [(FilterType(k), tuple(v)) for k, v in self.options if k in SOURCE_SIDE_KEYS]
        if not got:
            return None
        f = Filters()
        for ftype, values in got:
            f = f.configure(ftype, values, "CHANGE_REPLICATION_SOURCE", 0)
        return f


def channel_key(name: str) -> str:
    """A channel name as stored and looked up: MySQL compares channel names case-insensitively, so every
    entry point (FOR CHANNEL, connection names, --channel options, the Python API) keeps them lower-cased.
    The start-up options' `CH:` prefix is deliberately not folded (spec), and the compiled SQL folds with
    Spark's lower(), which agrees on every code point Python and the JVM both know."""
    return name.lower()


@dataclass(frozen=True)
class ServerState:
    """Everything a replica server knows about replication filters and channels.

    `channels` is kept sorted by name (byte order), MySQL's channel-map order.
    """

    lower_case_table_names: int = 0
    global_filters: Filters = field(default_factory=Filters)
    channels: tuple[Channel, ...] = ()
    startup_options: tuple[str, ...] = ()
    started_at: int = 0  # µs UTC of the last start-up
    filter_mode: str = "mysql"  # or 'effective_database' (WL#2516, opt-in)
    skip_counter: int = 0  # SET GLOBAL sql_replica_skip_counter: taken by the next channel whose SQL thread starts

    @property
    def matching(self) -> Matching:
        """lower_case_table_names and the filter mode, as one value for the evaluator and the pipeline."""
        return Matching(self.lower_case_table_names, self.filter_mode)

    def channel(self, name: str) -> Channel | None:
        for ch in self.channels:
            if ch.name == name:
                return ch
        return None

    def __iter__(self) -> Iterator[Channel]:
        return iter(self.channels)

    def with_channel(self, ch: Channel) -> "ServerState":
        others = [c for c in self.channels if c.name != ch.name]
        others.append(ch)
        return replace(self, channels=tuple(sorted(others, key=lambda c: c.name.encode("utf-8"))))

    def without_channel(self, name: str) -> "ServerState":
        return replace(self, channels=tuple(c for c in self.channels if c.name != name))

    def configured_channels(self, include_gr: bool = False) -> list[Channel]:
        return [c for c in self.channels if c.configured and (include_gr or not c.is_gr)]

    def filters_fingerprint(self) -> str:
        """A digest of everything a decision depends on (channels, rule values, case and filter mode).

        Counters, timestamps and thread flags are left out: compiled functions go stale only when this changes.
        """
        parts = [self.lower_case_table_names, self.filter_mode,
                 [(c.name, [s.values for s in c.filters.slots]) for c in self.channels]]
        return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()[:16]


def initial_state() -> ServerState:
    """A fresh warehouse: as if started with no options (the default channel exists, unconfigured)."""
    return ServerState(channels=(Channel(DEFAULT_CHANNEL),))
