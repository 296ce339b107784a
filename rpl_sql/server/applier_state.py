"""The applier's state as pure functions: the batch record a commit carries, and what
SHOW REPLICA STATUS shows of the applier. No Spark, Delta or I/O: the session reads it, the applier writes it."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from rpl_sql.errors import RplSqlError
from rpl_sql.filters.rules import Filters, FilterType
from rpl_sql.filters.state import ApplierPosition, ServerState
from rpl_sql.server.gtid_set import GtidSet

__all__ = ["ApplyError", "BatchRecord", "slot_signature", "record_batch", "applier_status"]

class ApplyError(RplSqlError):
    """The applier stopped (like a SQL thread error): malformed events, inconsistent positions, a compiler bug."""

    def __init__(self, message: str, channel: str | None = None):
        super().__init__(message if channel is None else f"channel '{channel}': {message}")
        self.channel = channel


# ---------------------------------------------------------------- the batch record (commit metadata)

@dataclass(frozen=True)
class BatchRecord:
    """What one batch decided; stored in the applied table's commit, then applied to the state.

    `counts`: FILTER_NAME -> COUNTER increments; `filters`: FILTER_NAME -> signature of the slot the counts
    belong to (a reconfigured slot has another one); `by_rule`: decided_by -> [applied, ignored].
    """

    channel: str
    start: int
    end: int
    events: int
    applied: int
    ignored: int
    gtid_only: int
    counts: dict[str, int]
    filters: dict[str, str]
    by_rule: dict[str, list[int]]
    gtids: str
    last_file: str | None
    last_pos: int | None
    events_version: int
    source_dropped: int = 0  # events of the range the ingest dropped at the source (their hits are in counts)
    skipped: int = 0         # events skipped by the channel's skip counter (whole transactions; not decided)
    rule_counts: dict[str, list] = field(default_factory=dict)  # FILTER_NAME -> [[value, hits], ...] behind counts
    at: int = 0              # µs UTC the batch was decided: the per-rule counters' last hit
    reset_at: int = 0        # a batch that discards what was received before this RESET REPLICA (not applied,
    #                          its GTIDs not executed, the position left as the RESET made it)

    def to_meta(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> "BatchRecord":
        return cls(**{k: meta[k] for k in cls.__dataclass_fields__ if k in meta})


@dataclass(frozen=True)
class Stop:
    """Where an applier batch must stop (`seq`, excluded with its transaction) and the error its SQL thread
    stops with when nothing comes before it."""

    seq: int
    error: Exception


def slot_signature(filters: Filters, ftype: FilterType) -> str:
    """Identifies one configuration of a slot: reconfiguring (even to the same values) changes ACTIVE_SINCE."""
    s = filters[ftype]
    digest = hashlib.sha1(json.dumps(s.values, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
    return f"{s.active_since}:{digest}"


def record_batch(state: ServerState, rec: BatchRecord) -> ServerState:
    """Pure: add a batch's COUNTERs, move the position, merge GTIDs -- once (a recorded batch is a no-op)."""
    ch = state.channel(rec.channel)
    if ch is None:  # RESET REPLICA ALL since: the channel and its counters are gone
        return state
    pos = ch.applier.seq
    if pos >= rec.end:
        return state
    if pos != rec.start:
        raise ApplyError(f"batch {rec.start + 1}..{rec.end} does not follow the applier position {pos}", rec.channel)
    current = {name for name in rec.filters if rec.filters[name] == slot_signature(ch.filters, FilterType(name))}
    counts = {FilterType(name): n for name, n in rec.counts.items() if n and name in current}
    rules = {FilterType(name): {_value(v): n for v, n in pairs} for name, pairs in rec.rule_counts.items()
             if name in current}
    gtids = str(GtidSet.parse(ch.applier.executed_gtid_set).union(GtidSet.parse(rec.gtids)))
    applier = ApplierPosition(rec.end, gtids,
                              rec.last_file if rec.last_file is not None else ch.applier.source_log_file,
                              rec.last_pos if rec.last_pos is not None else ch.applier.source_log_pos,
                              max(rec.reset_at, ch.applier.reset_at))
    skip = max(0, ch.skip_counter - rec.skipped)  # whole transactions: a skip batch ends at a boundary
    return state.with_channel(replace(ch, filters=ch.filters.add_counts(counts, rules, rec.at), applier=applier,
                                      skip_counter=skip))


def _value(v):
    """A rule value back from JSON: a rewrite pair comes back as a list."""
    return tuple(v) if isinstance(v, list) else v


def rule_counts_meta(rules: dict[FilterType, dict]) -> dict[str, list]:
    """Per-rule hits as BatchRecord.rule_counts (JSON: pairs as lists)."""
    return {t.value: [[list(v) if isinstance(v, tuple) else v, n] for v, n in per.items() if n]
            for t, per in rules.items() if per}


def executed_gtids(state: ServerState) -> GtidSet:
    """gtid_executed: every channel's executed transactions (server-wide, as in MySQL)."""
    executed = GtidSet()
    for ch in state.channels:
        executed = executed.union(GtidSet.parse(ch.applier.executed_gtid_set))
    return executed


def applier_status(state: ServerState) -> dict[str, dict]:
    """What `Session._applier_status` should return: per channel, the SHOW REPLICA STATUS applier columns.

    Executed_Gtid_Set is server-wide in MySQL (gtid_executed), so every channel shows the union.
    """
    executed = executed_gtids(state)
    out = {}
    for ch in state.channels:
        row: dict[str, Any] = {"executed_gtid_set": str(executed)}
        if ch.applier.source_log_file:
            row["relay_source_log_file"] = ch.applier.source_log_file
            row["exec_source_log_pos"] = ch.applier.source_log_pos
        out[ch.name] = row
    return out
