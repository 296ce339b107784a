"""Which archived commits of a warehouse's tables their readers still need, so that `rpl-sql upkeep
--keep-days` can delete the rest (storage/delta/archive.py `prune`): without it the archive grows by every commit
the service makes, some 6 GB a day at 5,000 rows/s.

Per table, of the commits older than the kept days:
- the state table: those the filter history walks (each commit that changed filters, and the commits that
  name no predecessor); all of them when that chain is broken;
- the events table: a channel's commits its applier has not passed (their summaries and source-filtered
  ranges are read when it applies them) and its newest (the ingest position); all of a channel with no
  applier position yet;
- the applied events: each channel's newest (crash recovery finds the last batch's record there);
- a replica catalog: its newest commit that names its channel;
- anything else (the replica tables): none.

And which integer columns a table's compaction delta-encodes, as its writer does (`delta_encoded`).
"""
from __future__ import annotations

import os
from typing import Callable

from rpl_sql.storage.delta.archive import Needed
from rpl_sql.pipeline.applier.commits import apply_meta
from rpl_sql.pipeline.events import DELTA_ENCODED, applied_path, events_path
from rpl_sql.pipeline.ingest_position import ingest_meta
from rpl_sql.storage.replica_catalog import CHANNEL_KEY, replica_root
from rpl_sql.storage.store import STATE_TABLE, DeltaStore


def delta_encoded(warehouse: str) -> Callable[[str], tuple[str, ...]]:
    """For a table path of `warehouse`, the integer columns its writer delta-encodes (upkeep's compaction keeps
    them so): the events' and the applied events'."""
    same = os.path.realpath
    tables = {same(events_path(warehouse)), same(applied_path(warehouse))}
    return lambda table: DELTA_ENCODED if same(table) in tables else ()


def needed_commits(warehouse: str) -> Callable[[str], Needed]:
    """For a table path of `warehouse`, the choice of its archived commits to keep."""
    store = DeltaStore(warehouse)
    same = os.path.realpath
    named = {same(os.path.join(warehouse, STATE_TABLE)): lambda: _filter_history(store),
             same(events_path(warehouse)): lambda: _unapplied_events(store),
             same(applied_path(warehouse)): lambda: _newest_per_channel(_apply_channel)}
    catalogs = same(os.path.join(replica_root(warehouse), "_catalog"))

    def for_table(table: str) -> Needed:
        path = same(table)
        if path in named:
            return named[path]()
        if os.path.dirname(path) == catalogs:
            return _newest_per_channel(lambda info: info.get(CHANNEL_KEY))
        return lambda old: set()

    return for_table


def _filter_history(store: DeltaStore) -> Needed:
    def needed(old: list[tuple[int, dict]]) -> set[int]:
        walked = store.filter_history_versions()  # after upkeep's own commits to the table
        return {v for v, _ in old} if walked is None else walked
    return needed


def _unapplied_events(store: DeltaStore) -> Needed:
    def needed(old: list[tuple[int, dict]]) -> set[int]:
        applied = {ch.name: ch.applier.seq for ch in store.load().state.channels}  # read before judging: it only grows
        keep: set[int] = set()
        newest: dict[str, int] = {}
        for version, info in old:
            meta = ingest_meta(info)
            channel, last = meta.get("channel"), meta.get("last_seq")
            if channel is None:
                continue  # a compaction's or upkeep's own commit: no reader looks one up
            newest[channel] = version
            if not applied.get(channel) or last is None or int(last) > applied[channel]:
                keep.add(version)
        return keep | set(newest.values())
    return needed


def _apply_channel(info: dict) -> str | None:
    meta = apply_meta(info)
    return None if meta is None else meta.get("channel")


def _newest_per_channel(channel_of: Callable[[dict], str | None]) -> Needed:
    def needed(old: list[tuple[int, dict]]) -> set[int]:
        newest: dict[str, int] = {}
        for version, info in old:
            channel = channel_of(info)
            if channel is not None:
                newest[channel] = version
        return set(newest.values())
    return needed
