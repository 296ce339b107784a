"""The applier's two commits per batch and the recovery between them.

A batch's applied events land first, in one commit of the applied table carrying the app transaction
(`app_id(channel)`, version = the batch's last seq) and the batch's record in its metadata; then one state
commit adds COUNTER, moves the applier position and merges the GTIDs. A crash between the two leaves the
applied table ahead of the state: `recover` completes the state commit from the record, never recomputing.
"""
from __future__ import annotations

import json
import logging
import time

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from rpl_sql.language.quoting import channel_predicate
from rpl_sql.server.applier_state import ApplyError, BatchRecord, record_batch
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta.log import check
from rpl_sql.storage.delta.scan import Followed
from rpl_sql.storage.upkeep import compact_growing_table
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.applier.report import ChannelReport
from rpl_sql.pipeline.applier.shapes import APPLIED_SCHEMA, META_KEY, app_id
from rpl_sql.pipeline.events import DELTA_ENCODED

log = logging.getLogger(__name__)

COMPACT_EVERY = 40  # a channel's applied batches (written from memory) merged into one file (0: never)
COMPACT_BATCH_BYTES = 4 << 20   # a batch this big stays its own file
COMPACT_KEEP_BYTES = 32 << 20   # compact early rather than keep more than this in memory


def apply_meta(info: dict) -> dict | None:
    """The batch record an applied-events commit carries (its META_KEY metadata), None if it has none."""
    meta = info.get(META_KEY)
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    return meta if isinstance(meta, dict) else None


class BatchCommits:
    """The applied table and the state store of one warehouse, committed in that order.

    The applied table stays open between batches (each brings it up to date by the new log entries only):
    opening it again per batch costs time and memory in its number of files."""

    def __init__(self, store, applied: str):
        self.store, self.applied = store, applied
        self._open = Followed(applied)
        self._columns_checked = False  # columns a newer release added: added once, at the first commit
        # per channel: (end seq, rows) of the consecutive batches `commit_applied_rows` committed since the
        # channel's last compaction
        self._loose: dict[str, list[tuple[int, pa.Table]]] = {}

    def table(self, create: bool):
        check(self.applied)
        dt = self._open.table()
        if dt is None:
            if not create:
                return None
            try:
                DeltaTable.create(self.applied, APPLIED_SCHEMA, mode="ignore", name="applied_events",
                                  description="events applied by rpl_sql's applier",
                                  configuration=delta_commit.TABLE_CONFIG)
            except Exception:
                if not DeltaTable.is_deltatable(self.applied):
                    raise
            dt = self._open.table()
        elif create and not self._columns_checked:
            if delta_commit.add_missing_columns(dt, APPLIED_SCHEMA):
                dt = self._open.table()
            self._columns_checked = True
        return dt

    @staticmethod
    def find_record(dt, channel: str, end: int) -> BatchRecord | None:
        """The metadata of the commit that moved `channel` to `end` (newest commits first: it is recent)."""
        for limit in (64, 1024, None):
            history = archive.history(dt, limit)
            for info in history:
                meta = apply_meta(info)
                if meta is not None and meta.get("channel") == channel and meta.get("end") == end:
                    return BatchRecord.from_meta(meta)
            if limit is not None and len(history) < limit:
                break
        return None

    def recover(self, channel: str, report: ChannelReport, gate=None) -> None:
        """Finish a batch that reached the applied table but not the state (crash between the two commits);
        `gate(rec)` first, as for a new batch (the replica tables take it before it counts as executed)."""
        state = self.store.load().state
        ch = state.channel(channel)
        dt = self.table(create=False)
        done = (dt.transaction_version(app_id(channel)) or 0) if dt is not None else 0
        pos = ch.applier.seq
        if done == pos:
            return
        if done < pos:
            raise ApplyError(f"the applied table has events through seq {done} but the applier position is {pos} "
                             f"(was {self.applied} replaced or the position edited?)", channel)
        rec = self.find_record(dt, channel, done)
        if rec is None:
            raise ApplyError(f"the applied table's commit of batch ..{done} has no rpl_sql.apply metadata", channel)
        if rec.start != pos:
            raise ApplyError(f"the applied table is at seq {done} (batch from {rec.start}) but the applier position "
                             f"is {pos} (was the channel reset?)", channel)
        if gate is not None:
            gate(rec)
        self.commit_state(rec)
        report.recovered += 1
        report.add(rec)

    def commit_state(self, rec: BatchRecord) -> None:
        self.store.transact(lambda s: (record_batch(s, rec), None),
                            {"operation": "APPLY",
                             "statement": f"APPLY FOR CHANNEL '{rec.channel}' events {rec.start + 1}..{rec.end}"})

    def commit_applied(self, rec: BatchRecord, actions: list) -> bool:
        """Commit the batch's files with its app transaction; False if this batch was already committed."""
        return self._commit(rec, lambda dt, kw: delta_commit.add_files(dt, actions, schema=APPLIED_SCHEMA, **kw))

    def commit_applied_rows(self, rec: BatchRecord, rows: pa.Table) -> bool:
        """`commit_applied` for rows in memory (an Arrow table of APPLIED_SCHEMA), written by delta-rs. Every
        COMPACT_EVERY such batches of a channel, their files are rewritten as one (`compact`)."""
        done = self._commit(rec, lambda dt, kw: delta_commit.write(dt, rows, mode="append",
                                                                   delta_encoded=DELTA_ENCODED, **kw))
        if not done or not COMPACT_EVERY:
            return done
        loose = self._loose.get(rec.channel)
        if loose and loose[-1][0] != rec.start:  # not the next batch: the kept ones no longer cover a range
            self.compact(rec.channel)
        if rows.nbytes >= COMPACT_BATCH_BYTES:  # a file big enough already (and a bound on what is kept)
            self.compact(rec.channel)
            return done
        loose = self._loose.setdefault(rec.channel, [])
        loose.append((rec.end, rows))
        if len(loose) >= COMPACT_EVERY or sum(t.nbytes for _, t in loose) >= COMPACT_KEEP_BYTES:
            self.compact(rec.channel)
        return done

    def withdraw_applied(self, rec: BatchRecord) -> None:
        """Take back the applied commit of a batch whose state was not committed (the replica tables refused
        one of its events): its rows go and the channel's app transaction is back at the batch's start, so
        recovery does not complete it and the events are applied again from there."""
        where = channel_predicate(rec.channel)
        self._loose.pop(rec.channel, None)
        delta_commit.write(self.table(create=True), APPLIED_SCHEMA.empty_table(), mode="overwrite",
                           predicate=f"{where} AND seq > {rec.start} AND seq <= {rec.end}",
                           metadata={"rpl_sql.operation": "APPLY WITHDRAW",
                                     "rpl_sql.apply.withdrawn": f"{rec.channel}:{rec.start + 1}-{rec.end}"},
                           app=(app_id(rec.channel), rec.start))

    def compact(self, channel: str) -> None:
        """Rewrite the channel's batches committed by this object since its last compaction into one file, in
        one commit (a predicate overwrite of exactly their seqs; the rows kept in memory, not read back).

        Without it the service adds a file per batch for as long as it runs, and every open or append of the
        table costs more. Rows, app transactions and batch records stay. Best effort, as the events writer's:
        on a conflict or an error the files stay as they are."""
        loose = self._loose.pop(channel, [])
        rows = pa.concat_tables([t for _, t in loose]) if len(loose) > 1 else None
        if rows is None or rows.num_rows == 0:
            return
        seqs = rows.column("seq")
        lo, hi = pc.min(seqs).as_py(), pc.max(seqs).as_py()
        where = channel_predicate(channel)
        try:
            delta_commit.write(self.table(create=True), rows.sort_by("seq"), mode="overwrite",
                               predicate=f"{where} AND seq >= {lo} AND seq <= {hi}",
                               metadata={"rpl_sql.operation": "APPLY COMPACT",
                                         "rpl_sql.apply.compacted": f"{channel}:{lo}-{hi}"},
                               delta_encoded=DELTA_ENCODED)
        except (DeltaError, OSError) as e:
            log.warning("applied events of channel %r, seqs %d..%d: compaction skipped (%s)", channel, lo, hi, e)
        try:
            # the merged files, by tiers (as the events writer's)
            compact_growing_table(self.table(create=True), delta_encoded=DELTA_ENCODED)
        except (DeltaError, OSError) as e:
            log.warning("applied events: compaction by tiers skipped (%s)", e)

    def _commit(self, rec: BatchRecord, commit) -> bool:
        for attempt in range(50):
            dt = self.table(create=True)
            done = dt.transaction_version(app_id(rec.channel)) or 0
            if done == rec.end:
                return False
            if done != rec.start:
                raise ApplyError(f"another applier moved the channel to seq {done} while this one applied "
                                 f"{rec.start + 1}..{rec.end}", rec.channel)
            try:
                commit(dt, {"metadata": {META_KEY: rec.to_meta(), "rpl_sql.operation": "APPLY"},
                            "app": (app_id(rec.channel), rec.end), "retries": 0, "checkpoint": True})
                return True
            except CommitFailedError:
                time.sleep(min(0.5, 0.01 * 2 ** attempt))
        raise MySQLError.of("ER_LOCK_DEADLOCK")

