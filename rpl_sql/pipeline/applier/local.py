"""The applier without Spark: small batches decided by the reference evaluator, for the replica service.

Same input, same output, same two commits as the Spark job (`job.py`): the batch's distinct shapes decided
once each, COUNTER hits, GTIDs and the last position in a `BatchRecord`, the applied events (with
`applied_db` and `decided_by`) in one commit of the applied table, then the state commit. What differs is
the engine: delta-rs reads the channel's new events and Python decides them, so a batch of a few hundred
events costs milliseconds instead of Spark jobs. tests/pipeline/test_apply.py runs both engines on the same events and
requires equal applied tables and state.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from rpl_sql.server.applier_state import ApplyError, BatchRecord, Stop, slot_signature
from rpl_sql.server.gtid_set import GtidSet
from rpl_sql.storage.delta.scan import Followed, read_range
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.applier.commits import BatchCommits
from rpl_sql.pipeline.applier.shapes import APPLIED_SCHEMA, Shape, batch_record, decide_shapes, refs_of
from rpl_sql.pipeline.events import EVENTS_SCHEMA, applied_path, events_path
from rpl_sql.pipeline.source_filter import settle_source_filtering, source_filtered
from rpl_sql.pipeline.ingest_position import SourceFilterConflictError, committed_position
from rpl_sql.filters.rules import TYPES
from rpl_sql.filters.state import channel_key
from rpl_sql.storage.store import DeltaStore

_MARIADB = re.compile(r"(\d+)-(\d+)-(\d+)")


@dataclass
class _Read:
    table: pa.Table      # the batch's events, in seq order
    version: int         # the events table version read
    more: bool           # events were left for the next batch


def _tables_key(tables) -> str | None:
    return None if tables is None else json.dumps(tables, ensure_ascii=False, separators=(",", ":"))


class LocalApplier:
    """Applies one channel's events in batches of about `batch_size` (extended to a transaction's end)."""

    def __init__(self, warehouse: str | os.PathLike, batch_size: int = 5000, store: DeltaStore | None = None):
        self.warehouse = os.fspath(warehouse)
        self.store = store or DeltaStore(self.warehouse)
        self.batch_size = batch_size
        self.commits = BatchCommits(self.store, applied_path(self.warehouse))
        self.events = Followed(events_path(self.warehouse))  # kept open: each batch reads only new log entries
        # stop_before(applied events of a batch) -> Stop | None: the first event the batch must not pass
        # (the replica tables cannot take statement-format DML); the batch ends before its transaction
        self.stop_before: Callable[[list[dict]], Stop | None] | None = None
        # gate(seq before, last seq, applied events): what must hold a batch before it counts as executed (the replica
        # tables: `ReplicaTables.catch_up`), run before the batch's commits. An error it raises for an event
        # (its `seq`) commits the batch up to that event's transaction, and nothing from there on.
        self.gate: Callable[[int, int, pa.Table], object] | None = None
        self.last_event_time: float | None = None  # the last applied event's source time (epoch seconds)
        self.more = False                           # the last batch left events for the next
        self.last_applied: tuple[int, pa.Table] | None = None  # (seq before, applied events) of the last batch

    def _read(self, channel: str, lo: int, through: int | None = None) -> _Read | None:
        dt = self.events.table()
        if dt is None:
            return None
        hi = lo + self.batch_size if through is None else through

        def read(a: int, b: int) -> pa.Table:
            got = read_range(dt, self.events.path, EVENTS_SCHEMA, {"channel": channel or None}, "seq", a, b)
            return got.sort_by("seq")

        t = read(lo, hi)
        if t.num_rows == 0:
            return None
        more = False
        if through is None and t.num_rows == hi - lo:  # extend the batch to the end of its last transaction
            end = hi
            while True:
                nxt = read(end, end + 1000)
                g = t.column("gtid")[t.num_rows - 1].as_py()
                gtids = nxt.column("gtid").to_pylist()
                k = 0
                while g is not None and k < len(gtids) and gtids[k] == g:
                    k += 1
                if k:
                    t = pa.concat_tables([t, nxt.slice(0, k)])
                if k < nxt.num_rows:
                    more = True
                    break
                if nxt.num_rows == 0:
                    break
                end += nxt.num_rows
        # '' reads back NULL from a Delta partition: restore the channel's name
        t = t.set_column(t.schema.get_field_index("channel"), "channel", pa.array([channel] * t.num_rows, pa.string()))
        return _Read(t, dt.version(), more)

    def run_batch(self, channel: str, through: int | None = None) -> BatchRecord | None:
        """Decide and commit the next batch of `channel`; None when its SQL thread is stopped or nothing is new."""
        channel = channel_key(channel)
        snap = self.store.load()
        state = snap.state
        self.batch_state = (state, snap.version)  # what this batch is decided with (the gate follows it)
        ch = state.channel(channel)
        if ch is None or not ch.configured or not ch.sql_running:
            return None
        lo = ch.applier.seq
        if ch.reset_at != ch.applier.reset_at:
            discarded = self._discard_relay(channel, ch)
            if discarded is not None:
                return discarded
        got = self._read(channel, lo, through)
        if got is None:
            return None
        if ch.skip_counter > 0:
            return self._skip(channel, state, got)
        t = got.table
        seqs = t.column("seq").to_pylist()
        if seqs[0] != lo + 1 or seqs[-1] - lo != len(seqs):
            raise ApplyError(f"events {lo + 1}..{seqs[-1]} are not gapless ({len(seqs)} events, first seq "
                             f"{seqs[0]}): ingest must write seq 1, 2, 3, ... per channel", channel)
        cols = {k: t.column(k).to_pylist() for k in ("event_type", "db_name", "table_name", "command", "default_db",
                                                     "tables", "gtid", "binlog_file", "binlog_pos", "statement")}
        shapes: dict[tuple, Shape] = {}
        which: list[Shape] = []
        for i, s in enumerate(seqs):
            tables = cols["tables"][i]
            key = (cols["event_type"][i], cols["db_name"][i], cols["table_name"][i], cols["command"][i],
                   cols["default_db"][i], _tables_key(tables) if cols["event_type"][i] == "query" else None)
            sh = shapes.get(key)
            if sh is None:
                sh = shapes[key] = Shape(key, refs_of(tables), 0, s, s)
            sh.count += 1
            sh.max_seq = s
            which.append(sh)
        for sh in shapes.values():
            if sh.kind.startswith("unknown:"):
                raise ApplyError(f"seq {sh.min_seq}: unknown {sh.describe()}", channel)
            if sh.kind == "row" and (sh.key[1] is None or sh.key[2] is None):
                raise ApplyError(f"seq {sh.min_seq}: cannot decide the malformed {sh.describe()}", channel)
        decide_shapes(channel, ch.filters, [sh for sh in shapes.values() if sh.kind != "gtid"], state.matching)
        if self.stop_before is not None and through is None:
            bad = self.stop_before([
                {"seq": s, "event_type": cols["event_type"][i], "command": cols["command"][i],
                 "default_db": cols["default_db"][i], "tables": cols["tables"][i], "applied_db": which[i].applied_db,
                 "statement": cols["statement"][i]}
                for i, s in enumerate(seqs) if which[i].apply])
            if bad is not None:
                start = seqs[_transaction_starts(t)[seqs.index(bad.seq)]]
                if start == lo + 1:
                    raise bad.error  # the transaction is first: nothing to commit before it
                return self.run_batch(channel, through=start - 1)
        last = seqs[-1]
        try:
            batches = source_filtered(self.warehouse, channel, after_seq=lo, through_seq=last, events=self.events.dt)
            _, settled, settled_rules = settle_source_filtering(state, channel, batches) if batches else (None, {}, {})
        except SourceFilterConflictError as e:
            raise ApplyError(str(e), channel) from None
        rec = batch_record(
            ch, shapes.values(), settled, settled_rules, channel=channel, start=lo, end=last, events=len(seqs),
            gtids=str(_gtids(cols["gtid"], channel)), last_file=cols["binlog_file"][-1],
            last_pos=cols["binlog_pos"][-1], events_version=got.version,
            source_dropped=sum(n for b in batches for n in b.dropped.values()))
        rec = replace(rec, reset_at=ch.reset_at)  # what was received before the channel's last RESET is gone
        keep = pa.array([bool(sh.apply) for sh in which])
        out = t.filter(keep)
        picked = [sh for sh in which if sh.apply]
        out = out.append_column("applied_db", pa.array([sh.applied_db for sh in picked], pa.string()))
        out = out.append_column("decided_by", pa.array([sh.decided_by for sh in picked], pa.string()))
        fdb = out.column("filter_db")
        out = out.set_column(out.schema.get_field_index("filter_db"), "filter_db",
                             pc.coalesce(fdb.cast(pa.string()), pa.scalar("", pa.string())))
        out = _conform(out)
        # CHANGE REPLICATION FILTER needs the SQL thread stopped, and STOP REPLICA waits for the service's
        # batch; this guards that promise: a batch decided under replaced filters is never committed.
        now = self.store.load().state.channel(channel)
        if now is None or {f.value: slot_signature(now.filters, f) for f in TYPES} != rec.filters:
            raise ApplyError(f"the filters of channel {channel!r} changed while batch {lo + 1}..{last} was decided; "
                             "nothing of it was committed", channel)
        if self.gate is not None:
            try:
                self.gate(lo, last, out)
            except MySQLError as e:
                failed = getattr(e, "seq", None)
                if failed is None or not lo < failed <= last:
                    raise
                start = seqs[_transaction_starts(t)[seqs.index(failed)]]
                if start > lo + 1:  # the transactions before it are in the tables: they are executed
                    self.run_batch(channel, through=start - 1)
                raise
        self.commits.commit_applied_rows(rec, out)
        self.commits.commit_state(rec)
        self.last_applied = (lo, out)
        ts = t.column("event_time")[t.num_rows - 1].as_py()
        self.last_event_time, self.more = (ts.timestamp() if ts is not None else None), got.more
        return rec

    def _commit_unapplied(self, rec: BatchRecord) -> BatchRecord:
        """Both commits of a batch that applies nothing (skipped or discarded events)."""
        self.commits.commit_applied_rows(rec, APPLIED_SCHEMA.empty_table())
        self.commits.commit_state(rec)
        self.last_applied = (rec.start, APPLIED_SCHEMA.empty_table())
        return rec

    def _discard_relay(self, channel: str, ch) -> BatchRecord | None:
        """After RESET REPLICA: the events received before it and not yet applied are dropped, as MySQL deletes
        its relay log (not applied, not counted, their GTIDs not executed). The receiver's first commit after
        the reset names the last seq received before it; until it lands, every landed event is from before.
        None when there is nothing to drop (the next batch records that the reset was seen)."""
        pos = committed_position(self.warehouse, channel, self.events.table())
        if pos is None:
            return None
        meta = pos.metadata
        through = int(meta.get("relay_discard_through") or 0) if meta.get("reset_at") == str(ch.reset_at) \
            else pos.last_seq
        lo = ch.applier.seq
        if through <= lo:
            return None
        rec = BatchRecord(
            channel=channel, start=lo, end=through, events=through - lo, applied=0, ignored=through - lo,
            gtid_only=0, counts={}, filters={f.value: slot_signature(ch.filters, f) for f in TYPES},
            by_rule={"RESET REPLICA": [0, through - lo]}, gtids="", last_file=None, last_pos=None,
            events_version=self.events.table().version(), reset_at=ch.reset_at)
        return self._commit_unapplied(rec)

    def _skip(self, channel: str, state, got: _Read) -> BatchRecord:
        """sql_replica_skip_counter: whole transactions from the position on, until at least that many events
        are passed over; they are not decided, not counted, and their GTIDs are executed (as a skip does)."""
        t = got.table
        ch = state.channel(channel)
        lo = ch.applier.seq
        starts = _transaction_starts(t)
        n = 0
        while n < t.num_rows and (n < ch.skip_counter or starts[n] == starts[n - 1]):
            n += 1
        t = t.slice(0, n)
        seqs = t.column("seq").to_pylist()
        rec = BatchRecord(
            channel=channel, start=lo, end=seqs[-1], events=n, applied=0, ignored=n, gtid_only=0, counts={},
            filters={f.value: slot_signature(ch.filters, f) for f in TYPES}, by_rule={"SKIPPED": [0, n]},
            gtids=str(_gtids(t.column("gtid").to_pylist(), channel)),
            last_file=t.column("binlog_file")[n - 1].as_py(), last_pos=t.column("binlog_pos")[n - 1].as_py(),
            events_version=got.version, skipped=n)
        return self._commit_unapplied(rec)


def _transaction_starts(t: pa.Table) -> list[int]:
    """Per event, the index of the first event of its transaction: the same GTID, or BEGIN ... COMMIT, or a
    statement on its own."""
    gtids = t.column("gtid").to_pylist()
    cmds = t.column("command").to_pylist()
    out: list[int] = []
    start, open_ = 0, False
    for i, (g, c) in enumerate(zip(gtids, cmds)):
        if g is not None:
            if i == 0 or g != gtids[i - 1]:
                start = i
        elif not open_:
            start = i
            open_ = c in ("BEGIN", "XA_START")
        elif c in ("COMMIT", "ROLLBACK", "XA_COMMIT", "XA_ROLLBACK", "XA_PREPARE"):
            open_ = False
        out.append(start)
    return out


def _conform(t: pa.Table) -> pa.Table:
    """The applied table's schema exactly (delta-rs reads strings as views; events may lack new columns)."""
    arrays = []
    for f in APPLIED_SCHEMA:
        if f.name in t.column_names:
            arrays.append(t.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=APPLIED_SCHEMA)


def _gtids(values, channel: str) -> GtidSet:
    """The batch's GTIDs, checked as the Spark job checks them ('uuid[:tag]:n' or 'domain-server-n', n >= 1)."""
    items = []
    for g in set(values):
        if g is None:
            continue
        if ":" in g:
            num = g.rsplit(":", 1)[1]
            ok = num.isdigit() and int(num) >= 1
        else:
            m = _MARIADB.fullmatch(g)
            ok = m is not None and int(m.group(3)) >= 1
        if not ok:
            raise ApplyError(f"events carry a GTID that is neither 'uuid:n' nor 'domain-server-n' ({g!r})", channel)
        items.append(g)
    return GtidSet.parse(",".join(items))

