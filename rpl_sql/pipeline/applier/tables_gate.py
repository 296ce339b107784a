"""The replica tables' side of a Spark applier run (`rpl-sql apply --tables`, `rpl-sql replica --master`): each
batch enters the tables between its applied commit and its state commit, so the executed position means "in
the tables", as in the service's own applier (`LocalApplier.gate`)."""
from __future__ import annotations

import time
from typing import Any, Callable

from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.applier.commits import BatchCommits
from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.applier.report import timed
from rpl_sql.pipeline.events import applied_path
from rpl_sql.pipeline.replica.backfill import ChannelBackfills
from rpl_sql.pipeline.replica.materialize import ReplicaTables
from rpl_sql.server.applier_state import BatchRecord
from rpl_sql.storage.store import DeltaStore


class TablesGate:
    """Keeps each channel's replica tables at its applier position, batch by batch."""

    def __init__(self, warehouse: str, exec_mode: str = "STRICT", backfills: Callable[[str], Any] | None = None):
        """`backfills`: channel -> the `backfill.Backfills` that copy what a filter change newly applies (by
        default one per channel, reaching its source as the state says)."""
        self.warehouse, self.exec_mode = warehouse, exec_mode
        self.backfills = backfills or ChannelBackfills(warehouse)
        self.store = DeltaStore(warehouse)

    def tables(self, channel: str, lctn: int) -> ReplicaTables:
        return ReplicaTables(self.warehouse, channel, lctn=lctn, exec_mode=self.exec_mode,
                             backfills=self.backfills(channel))

    def materialize(self, channel: str) -> None:
        """Bring the channel's replica tables to its applier position (a backfill done meanwhile replayed)."""
        state = self.store.load().state
        with timed("replica tables", channel):
            self.tables(channel, state.lower_case_table_names).catch_up(state.channel(channel).applier.seq)

    def gate(self, rec: BatchRecord) -> None:
        """The batch into the tables. When they refuse an event (1032, 1049, ... with its `seq`), the batch's
        applied commit is taken back, the transactions before that event's are applied and counted as
        executed, and the error stops the run."""
        snap = self.store.load()
        state = snap.state
        tables = self.tables(rec.channel, state.lower_case_table_names)
        try:
            with timed("replica tables", rec.channel):
                tables.catch_up(rec.end, state=state, version=snap.version)
        except MySQLError as e:
            failed = getattr(e, "seq", None)
            if failed is None or not rec.start < failed <= rec.end:
                raise
            BatchCommits(self.store, applied_path(self.warehouse)).withdraw_applied(rec)
            local = LocalApplier(self.warehouse, store=self.store)
            local.gate = lambda lo, last, out: tables.catch_up(last, handed=(lo, out), state=state)
            local.run_batch(rec.channel, through=failed)  # commits up to the failing transaction, then raises
            raise


class _NoTables:
    """A run that keeps no replica tables."""

    def materialize(self, channel: str) -> None:
        pass

    def gate(self, rec: BatchRecord) -> None:
        pass


NO_TABLES = _NoTables()


def finish_backfills(gate: TablesGate, channels: list[str], show: Callable[[str], None] | None = None,
                     poll: float = 0.5) -> None:
    """Wait for the channels' backfills and replay their held events onto the copies: the end of a one-shot
    run (`rpl-sql apply --tables`), which leaves no table half filled. `show` gets what they are doing."""
    for channel in channels:
        backfills = gate.backfills(channel)
        gate.materialize(channel)  # a worker on every unfinished copy (a run interrupted before resumes)
        while backfills.pending:
            if show is not None and backfills.describe():
                show(f"channel '{channel}': {backfills.describe()}")
            if not any(t.is_alive() for t in backfills.workers.values()):
                gate.materialize(channel)  # the copies are done: their held events replayed
                continue
            time.sleep(poll)
        backfills.close()
