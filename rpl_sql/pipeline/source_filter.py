"""Filtering at the source (WL#2387): drop only what is IGNORE whatever the filters, and settle it exactly once.

Dropped events' decision keys are kept with counts in the ingest commit; the applier re-decides them with the
filters in force when it runs (`settle_source_filtering`), refusing the range if any would now apply.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from deltalake import DeltaTable

from rpl_sql.filters.evaluate import TRANSACTION_CONTROL, RowEvent, TableRef, decide, hit_rules, statement_event
from rpl_sql.pipeline.events import events_path
from rpl_sql.pipeline.ingest_position import IngestError, SourceFilterConflictError, channel_commits, open_table
from rpl_sql.filters.rules import TYPES, FilterType, tally_rule_hits, type_counts
from rpl_sql.filters.state import ServerState

log = logging.getLogger(__name__)



# ============================================================== filtering at the source

def filters_fingerprint(state: ServerState, channel: str) -> str:
    """A hash of everything a channel's decisions depend on: its rule values, lctn and the filter mode."""
    ch = state.channel(channel)
    rules = [] if ch is None else [[t.filter_name, list(map(_plain, ch.filters.values(t)))] for t in TYPES]
    m = state.matching
    text = json.dumps([m.lower_case_table_names, m.filter_mode, ch is not None, rules],
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _key_event(key: tuple):
    """The evaluator's event for a recorded decision key."""
    if key[0] == "row":
        return RowEvent(key[1], key[2])
    _, command, default_db, tables = key
    return statement_event(command, default_db, tuple(TableRef(d, n, u) for d, n, u in tables))


class SourceFilter:
    """Decides at ingest which events may be dropped: IGNORE now, and decided by recorded fields alone.

    Row events: by (db, table) -- always, except inside an XA transaction (the applier must raise
    ER_XA_REPLICATION_FILTERS there, so they are kept). Statement events: by (command, default_db, tables)
    -- except transaction control (always applied), XA statements, DROP TRIGGER (decided on the replica's trigger table,
    which the ingest does not know) and statements whose tables `classify` could not read. The key of every
    dropped event is recorded so the applier can re-decide it (`settle_source_filtering`).
    """

    def __init__(self, state: ServerState, channel: str):
        ch = state.channel(channel)
        if ch is None:
            raise IngestError(f"channel {channel!r} does not exist")
        self.filters, self.matching = ch.filters, state.matching
        self.fingerprint = filters_fingerprint(state, channel)
        self._cache: dict[tuple, bool] = {}

    @classmethod
    def of(cls, filters, matching) -> "SourceFilter":
        """One that decides with `filters` (not a channel's of a state): a relay's, for what a replica forwarded."""
        sf = cls.__new__(cls)
        sf.filters, sf.matching, sf.fingerprint, sf._cache = filters, matching, "", {}
        return sf

    def drops(self, key: tuple) -> bool:
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = not decide(self.filters, _key_event(key), self.matching).apply
            except Exception:  # an error verdict is the applier's to raise: keep the event
                hit = False
            self._cache[key] = hit
        return hit

    @staticmethod
    def row_key(db: str, table: str) -> tuple:
        return ("row", db, table)

    @staticmethod
    def statement_key(command: str, default_db: str | None, tables: Iterable[TableRef], method: str) -> tuple | None:
        if command in TRANSACTION_CONTROL or command == "DROP_TRIGGER" or command.startswith("XA_") \
                or method == "incomplete":
            return None
        return ("stmt", command, default_db or "", tuple((t.db, t.name, bool(t.updating)) for t in tables))


class JoinedFilter:
    """Drops what any of its filters drops: a channel's source-side filters (CHANGE REPLICATION SOURCE TO
    REPLICATE_*, WL#2387) together with its own, as a relay applies them."""

    def __init__(self, *filters: SourceFilter):
        self.filters = filters
        self._cache: dict[tuple, bool] = {}

    def drops(self, key: tuple) -> bool:
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = any(f.drops(key) for f in self.filters)
        return hit

    @classmethod
    def of(cls, *filters: SourceFilter | None) -> "SourceFilter | JoinedFilter | None":
        """Those of `filters` that are there, joined (None: none, the filter itself: one)."""
        there = [f for f in filters if f is not None]
        return None if not there else there[0] if len(there) == 1 else cls(*there)


def source_side_filter(state: ServerState, channel: str) -> SourceFilter | None:
    """The channel's source-side filters as a filter of events (None: it has none)."""
    ch = state.channel(channel)
    side = ch.source_side_filters if ch is not None else None
    return SourceFilter.of(side, state.matching) if side is not None else None


def dropped_json(dropped: Counter) -> str:
    return json.dumps([[list(k[:3]) + ([[list(t) for t in k[3]]] if k[0] == "stmt" else []), n]
                       for k, n in sorted(dropped.items(), key=lambda kv: json.dumps(kv[0], default=str))],
                      separators=(",", ":"), ensure_ascii=False)


def dropped_from_json(text: str) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for key, n in json.loads(text or "[]"):
        if key[0] == "row":
            out[("row", key[1], key[2])] = int(n)
        else:
            out[("stmt", key[1], key[2], tuple((d, nm, bool(u)) for d, nm, u in key[3]))] = int(n)
    return out


@dataclass(frozen=True)
class SourceFiltered:
    """One ingest commit that dropped events at the source: what the applier must settle for it."""

    version: int
    first_seq: int
    last_seq: int
    fingerprint: str
    state_version: int | None
    dropped: dict = field(default_factory=dict)  # decision key -> number of events dropped


def source_filtered(warehouse: str, channel: str, after_seq: int = 0, through_seq: int | None = None,
                    events: DeltaTable | None = None, commits: list[tuple[int, dict]] | None = None
                    ) -> list[SourceFiltered]:
    """The channel's source-filtered commits whose seq range ends in (after_seq, through_seq], oldest first.

    Every such commit landed at least one row (a kept event or a GTID marker), so its `last_seq` is
    greater than the previous commit's: an applier that has applied through seq S owes exactly the
    commits with `last_seq` in its newly applied range. `events`: the events table as a caller that follows
    it holds it (at least as new as the range), instead of opening it again. `commits`: the channel's commits
    as `channel_commits` read them once for several ranges, from at or before `after_seq` on.
    """
    if commits is None:
        dt = events if events is not None else open_table(events_path(warehouse))
        if dt is None:
            return []
        commits = channel_commits(dt, channel, after_seq)
    out = []
    for version, meta in commits:
        last = int(meta["last_seq"])
        if last <= after_seq:
            continue
        if not meta.get("dropped") or meta.get("filter_at_source") != "true" or \
                (through_seq is not None and last > through_seq):
            continue
        sv = meta.get("state_version")
        out.append(SourceFiltered(version, int(meta["first_seq"]), last, meta.get("filters", ""),
                                  int(sv) if sv not in (None, "", "None") else None,
                                  dropped_from_json(meta["dropped"])))
    return out


def settle_source_filtering(state: ServerState, channel: str, batches: Iterable[SourceFiltered]
                            ) -> tuple[ServerState, dict[FilterType, int], dict[FilterType, dict]]:
    """Re-decide what was dropped at the source with the channel's current filters; add the counter hits
    (returned too, per type and per rule).

    Pure, for the applier's own `DeltaStore.transact` step: settle the commits of the range it applies in
    the same state commit that records how far it applied, and the hits are counted exactly once.
    Raises SourceFilterConflictError when a dropped key would now be applied: those events are not in the
    events table, so the range must be re-ingested without filtering at the source.
    """
    ch = state.channel(channel)
    if ch is None:
        raise IngestError(f"channel {channel!r} does not exist")
    rules: dict[FilterType, dict] = {}
    for b in batches:
        for key, n in b.dropped.items():
            event = _key_event(key)
            d = decide(ch.filters, event, state.matching)
            if d.apply:
                raise SourceFilterConflictError(
                    f"channel {channel!r}: seqs {b.first_seq}..{b.last_seq} (events version {b.version}) dropped "
                    f"{n} event(s) {key!r} at the source that the current filters apply ({d.decided_by}); "
                    "re-ingest that range without filter_at_source")
            tally_rule_hits(rules, hit_rules(ch.filters, event, d, state.lower_case_table_names), n)
    if not rules:
        return state, {}, {}
    counts = type_counts(rules)
    return state.with_channel(replace(ch, filters=ch.filters.add_counts(counts, rules))), counts, rules


