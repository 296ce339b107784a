"""Tables stay whole when what a channel applies changes on a running replica (WL#7057's promise).

The SQL thread (`materialize.ReplicaTables`) compares the filters its batch was decided with against the ones
its catalog followed so far (`Catalog.filters`). When they differ, `rpl_sql.server.impact.table_changes` lists the
source's tables by both:
- a table the new filters apply and the old did not (a new do or wild-do rule, an ignore rule gone, a database
  newly mapped by REPLICATE_REWRITE_DB to another target) is *widened*: its catalog entry becomes BACKFILLING
  on a fresh path, and a worker thread copies it from the source (`table_copy`: keyset pages between two
  watermarks, or one consistent read when it has no primary key; no lock, nothing written to the source);
- a table the old filters applied and the new do not is *narrowed*: its entry says UNREPLICATED since that
  state version; its rows stay as they were (dropped by `rpl-sql upkeep --drop-unreplicated`).
While a table is backfilled the stream holds its events: they stay in the applied table, and once the copy is
done the SQL thread replays them onto it from where the backfill began (events the copy holds are passed over,
those of its copy window applied as upserts), and the table is replicated from there on. Every other table goes
on being applied meanwhile. A worker that dies, or a service that is SIGKILLed, resumes after the last page it
committed.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import RowEvent, applies_past_source_side, rewrite_db
from rpl_sql.filters.rules import Filters, filters_of, filters_text, source_side_of
from rpl_sql.source_server.connection import connection_settings
from rpl_sql.source_server.table_list import source_tables
from rpl_sql.pipeline.replica.table_copy import ColumnsMovedError, TableCopy, copy_done, source_columns
from rpl_sql.server.impact import table_changes
from rpl_sql.storage.replica_catalog import BACKFILLING, UNREPLICATED
from rpl_sql.storage.store import DeltaStore

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0  # a worker whose source went away tries again after this


@dataclass
class CopyStatus:
    """A running backfill as the status and the views show it."""

    table: str
    rows: int = 0
    estimate: int | None = None
    seconds: float = 0.0
    error: str = ""


class Backfills:
    """One channel's backfill workers, started and watched by its SQL thread."""

    def __init__(self, channel: str, settings: Callable[[], dict], *, page_rows: int = 200_000, readers: int = 2):
        self.channel, self.settings = channel, settings
        self.page_rows, self.readers = page_rows, readers
        self.workers: dict[str, threading.Thread] = {}  # path -> its worker
        self.stops: dict[str, threading.Event] = {}     # path -> what stops its worker
        self.status: dict[str, CopyStatus] = {}
        self.stop = threading.Event()
        self.pending = True  # a table may be BACKFILLING (unknown until the SQL thread's first look)

    def ensure(self, path: str, source: tuple[str, str], estimate: int | None) -> None:
        """A worker copying `source` into `path`, unless one runs (it resumes a copy the path holds)."""
        t = self.workers.get(path)
        if t is not None and t.is_alive():
            return
        st = self.status.setdefault(path, CopyStatus(f"{source[0]}.{source[1]}", estimate=estimate))
        stop = self.stops[path] = threading.Event()
        t = threading.Thread(target=self._work, args=(path, source, st, stop), daemon=True,
                             name=f"rpl_sql-backfill-{source[0]}.{source[1]}")
        self.workers[path] = t
        t.start()

    def forget(self, path: str) -> None:
        """Stop and forget the copy into `path` (its table was narrowed away or copied again)."""
        self.stops.pop(path, threading.Event()).set()
        self.workers.pop(path, None)
        self.status.pop(path, None)

    def _work(self, path: str, source: tuple[str, str], st: CopyStatus, stop: threading.Event) -> None:
        def progress(rows: int, seconds: float) -> None:
            st.rows, st.seconds = rows, seconds
        while not self.stop.is_set() and not stop.is_set():
            try:
                settings = self.settings()
                cols, full = source_columns(settings, *source)
                TableCopy(settings, source[0], source[1], path, self.channel, page_rows=self.page_rows,
                          readers=self.readers, progress=progress, stop=stop).run(cols, full)
                st.error = ""
                return
            except ColumnsMovedError as e:
                log.info("channel %r: %s; copying it again", self.channel, e)
            except InterruptedError:
                return
            except Exception as e:  # the source went away, say: the stream's IO thread says so too
                st.error = f"{type(e).__name__}: {e}"
                log.warning("channel %r: backfill of %s.%s failed (%s); trying again in %.0fs", self.channel,
                            *source, st.error, RETRY_SECONDS)
                stop.wait(RETRY_SECONDS)

    def close(self) -> None:
        self.stop.set()
        for stop in self.stops.values():
            stop.set()
        for t in list(self.workers.values()):
            t.join(30)

    def describe(self) -> str:
        """For Replica_SQL_Running_State: what the backfills are doing ('' when none runs)."""
        live = [st for p, st in self.status.items() if self.workers.get(p) and self.workers[p].is_alive()]
        if not live:
            return ""
        parts = [f"{st.table} {st.rows:,}" + (f" of ~{st.estimate:,}" if st.estimate else "") + " rows"
                 + (f" (failed, trying again: {st.error})" if st.error else "") for st in live]
        return f"Backfilling {len(live)} table{'s' if len(live) > 1 else ''}: " + ", ".join(parts)


class ChannelBackfills:
    """channel -> its `Backfills`, made when first asked for, reaching the channel's source as its state says
    then: what a Spark applier run (`rpl-sql apply --tables`) hands its tables."""

    def __init__(self, warehouse: str, **kw):
        self.warehouse, self.kw = warehouse, kw
        self.made: dict[str, Backfills] = {}

    def __call__(self, channel: str) -> Backfills:
        if channel not in self.made:
            self.made[channel] = Backfills(channel, lambda: self._settings(channel), **self.kw)
        return self.made[channel]

    def _settings(self, channel: str) -> dict:
        ch = DeltaStore(self.warehouse).load().state.channel(channel)
        return connection_settings(self.warehouse, ch)[0]


def follow_changes(rt: Any, ch, matching, version: int | None) -> None:
    """What the SQL thread does before each batch (`ch`: the channel's state the batch was decided with)."""
    follow_filters(rt, ch.filters, matching, version, ch.source_side_filters)
    follow_resync(rt, ch, matching, version)
    finish_backfills(rt)


def unfollowed_change(rt: Any, ch) -> None:
    """Tables kept without backfills (no source to copy from) refuse a batch decided with other filters than
    theirs: a newly applied table would start empty, silently short of its old rows."""
    if rt.cat.filters is not None and rt.cat.filters != filters_text(ch.filters, rt.lctn, ch.source_side_filters):
        raise MySQLError(1105, "HY000", "ER_UNKNOWN_ERROR", f"the filters of channel '{rt.channel}' changed since "
                         "its replica tables were last kept, and nothing here can backfill what they newly apply: "
                         "keep them with `rpl-sql replica` or `rpl-sql apply --tables`, which do")


def follow_filters(rt: Any, filters: Filters, matching, version: int | None, source_side: Filters | None = None
                   ) -> None:
    """Bring the catalog (of `rt`, the channel's `materialize.ReplicaTables`) to the filters the SQL thread's
    batch was decided with (and the source-side ones its events were received with): widened tables start
    their backfill (their events held from here), narrowed ones are marked as no longer replicated."""
    cat = rt.cat
    text = filters_text(filters, rt.lctn, source_side)
    if cat.filters == text:
        return
    if cat.filters is None:  # a catalog of an earlier release, or a new channel: what it follows from now on
        cat.filters = text
        return
    old, _ = filters_of(cat.filters)
    change = table_changes(old, filters, matching, rt.lctn, source_tables(rt.backfills.settings()),
                           source_side_of(cat.filters), source_side)
    for db, name, target, tname, _ in change.narrowed:
        e = cat.table(target, tname)
        if e is not None and e.state != UNREPLICATED:
            rt.backfills.forget(cat.data_path(e))
            cat.tables[cat.key(target, tname)] = replace(e, state=UNREPLICATED, copy={
                "source": [db, name], "version": version, "at": int(time.time())})
            log.info("channel %r: %s.%s is no longer replicated (state version %s)", rt.channel, target, tname,
                     version)
    for db, name, target, tname, estimate in change.widened:
        e = cat.table(target, tname)
        if e is not None and e.state == BACKFILLING and e.copy["source"] == [db, name]:
            continue
        cat.drop_table(target, tname)  # what an earlier replication left there is replaced by the copy
        cat.add_table(target, tname, None, state=BACKFILLING, copy={
            "source": [db, name], "held_from": cat.seq, "version": version, "estimate": estimate,
            "at": int(time.time())})
        log.info("channel %r: %s.%s is now replicated: backfilling it from %s.%s", rt.channel, target, tname,
                 db, name)
    cat.filters = text
    cat.commit(cat.seq)


def follow_resync(rt: Any, ch, matching, version: int | None) -> None:
    """Act on the channel's RESYNC REPLICA TABLE requests the tables were not given yet: each named table is
    backfilled afresh from the source table the filters map to it."""
    cat = rt.cat
    todo = [(n, db, name) for n, db, name in ch.resync if n > cat.resync_done]
    if not todo:
        return
    listed = None
    for _, db, name in todo:
        e = cat.table(db, name)
        found = [tuple(e.copy["source"]) + (e.copy.get("estimate"),)] if e is not None and (e.copy or {}).get(
            "source") else []
        if not found:
            listed = listed if listed is not None else source_tables(rt.backfills.settings())
            found = [(sdb, sname, est) for sdb, sname, est in listed
                     if applies_past_source_side(ch.filters, ch.source_side_filters, RowEvent(sdb, sname), matching)
                     and cat.key(rewrite_db(ch.filters, sdb, rt.lctn), sname) == cat.key(db, name)]
        if not found:
            log.warning("channel %r: RESYNC REPLICA TABLE %s.%s: no source table the channel applies is replicated "
                        "there; nothing to copy", rt.channel, db, name)
            continue
        sdb, sname, estimate = found[0]
        key = cat.key(db, name)
        cat.drop_table(db, name)
        cat.add_table(db, name, None, state=BACKFILLING, copy={
            "source": [sdb, sname], "held_from": cat.seq, "version": version, "estimate": estimate,
            "at": int(time.time())})
        log.info("channel %r: %s.%s is copied again from %s.%s (RESYNC REPLICA TABLE)", rt.channel, *key, sdb, sname)
    cat.resync_done = max(n for n, _, _ in todo)
    cat.commit(cat.seq)


def finish_backfills(rt: Any) -> None:
    """Keep a worker on every unfinished backfill; replay the held events onto each finished copy and replicate
    the table from there."""
    from deltalake import DeltaTable

    cat = rt.cat
    rt.backfills.pending = False
    for key, e in list(cat.tables.items()):
        if e.state != BACKFILLING:
            continue
        rt.backfills.pending = True
        path = cat.data_path(e)
        done = copy_done(path) if DeltaTable.is_deltatable(path) else None
        if done is None:
            rt.backfills.ensure(path, tuple(e.copy["source"]), e.copy.get("estimate"))
            continue
        rt.forget_table(path)
        cat.tables[key] = replace(e, columns=done.columns, since=done.since, exact_after=done.exact_after,
                                  state=None, copy=None)
        held = [ev for ev in rt.events_between(e.copy["held_from"], cat.seq) if _touches(rt, ev, key)]
        if held:
            rt.apply_events(held, cat.seq)
        rt.backfills.forget(path)
        cat.commit(cat.seq)
        log.info("channel %r: %s.%s backfilled (%d rows, %d held events replayed)", rt.channel, e.db, e.name,
                 done.rows, len(held))


def _touches(rt: Any, ev: dict, key: tuple[str, str]) -> bool:
    """Whether an applied event is on the replica table `key` (a row event) or names it (a statement)."""
    if ev["event_type"] == "query":
        try:
            return any(rt.cat.key(*rt.resolve(t["db"], t["name"], ev)) == key for t in ev["tables"] or [])
        except Exception:  # no database to resolve it in: not this table's
            return False
    db = ev["applied_db"] if ev["applied_db"] is not None else ev["db_name"]
    return db is not None and ev["table_name"] is not None and rt.cat.key(db, ev["table_name"]) == key
