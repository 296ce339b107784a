"""The applier's state as pure functions: executed GTID sets, the batch record a commit carries, and what
SHOW REPLICA STATUS shows of the applier. No Spark, Delta or I/O: the session reads it, the applier writes it."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from rpl_sql.errors import RplSqlError
from rpl_sql.filters.rules import Filters, FilterType
from rpl_sql.filters.state import ApplierPosition, ServerState

__all__ = ["ApplyError", "GtidSet", "BatchRecord", "slot_signature", "record_batch", "applier_status"]

_MARIADB = re.compile(r"^(\d+)-(\d+)-(\d+)$")  # domain-server-seq


class ApplyError(RplSqlError):
    """The applier stopped (like a SQL thread error): malformed events, inconsistent positions, a compiler bug."""

    def __init__(self, message: str, channel: str | None = None):
        super().__init__(message if channel is None else f"channel '{channel}': {message}")
        self.channel = channel


class GtidSet:
    """A compact executed-GTID set: MySQL intervals per source (`uuid:1-100:105`, tags kept in the key) and,
    for MariaDB, the last seq_no per domain (`domain-server-seq`, like gtid_slave_pos)."""

    def __init__(self, mysql: dict[str, list[tuple[int, int]]] | None = None,
                 mariadb: dict[int, tuple[int, int]] | None = None):
        self.mysql = {k: merge_intervals(v) for k, v in (mysql or {}).items() if v}
        self.mariadb = dict(mariadb or {})  # domain -> (server_id, seq_no)

    @classmethod
    def parse(cls, text: str | None) -> "GtidSet":
        mysql: dict[str, list[tuple[int, int]]] = {}
        mariadb: dict[int, tuple[int, int]] = {}
        for item in re.split(r"[,\s]+", text or ""):
            if not item:
                continue
            m = _MARIADB.match(item)
            if m:
                d, s, n = map(int, m.groups())
                if d not in mariadb or n > mariadb[d][1]:
                    mariadb[d] = (s, n)
                continue
            parts = item.split(":")
            key = parts[0].lower()
            for p in parts[1:]:
                if re.fullmatch(r"\d+(-\d+)?", p):
                    a, _, b = p.partition("-")
                    mysql.setdefault(key, []).append((int(a), int(b or a)))
                else:
                    key = parts[0].lower() + ":" + p.lower()
        return cls(mysql, mariadb)

    def union(self, other: "GtidSet") -> "GtidSet":
        mysql = {k: list(v) for k, v in self.mysql.items()}
        for k, v in other.mysql.items():
            mysql.setdefault(k, []).extend(v)
        mariadb = dict(self.mariadb)
        for d, (s, n) in other.mariadb.items():
            if d not in mariadb or n > mariadb[d][1]:
                mariadb[d] = (s, n)
        return GtidSet(mysql, mariadb)

    def __contains__(self, gtid: str) -> bool:
        m = _MARIADB.match(gtid)
        if m:
            d, _, n = map(int, m.groups())
            return d in self.mariadb and n <= self.mariadb[d][1]
        key, _, n = gtid.rpartition(":")
        return any(a <= int(n) <= b for a, b in self.mysql.get(key.lower(), ()))

    def issuperset(self, other: "GtidSet") -> bool:
        """Every GTID of `other` is in this set (MariaDB: per domain, up to its seq_no)."""
        if any(d not in self.mariadb or n > self.mariadb[d][1] for d, (_, n) in other.mariadb.items()):
            return False
        return all(any(a <= lo and hi <= b for a, b in self.mysql.get(k, ())) for k, v in other.mysql.items()
                   for lo, hi in v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GtidSet) and str(self) == str(other)

    def __str__(self) -> str:
        out = [k + ":" + ":".join(str(a) if a == b else f"{a}-{b}" for a, b in v)
               for k, v in sorted(self.mysql.items())]
        out += [f"{d}-{s}-{n}" for d, (s, n) in sorted(self.mariadb.items())]
        return ",".join(out)

    __repr__ = __str__


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


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
