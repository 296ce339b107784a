"""The replica service's SQL thread when Spark decides (`rpl-sql replica --master`): the Spark job applies
what landed, batch by batch, and keeps the replica tables."""
from __future__ import annotations

from rpl_sql.pipeline.applier.job import apply
from rpl_sql.pipeline.applier.tables_gate import TablesGate
from rpl_sql.pipeline.events import events_path
from rpl_sql.pipeline.ingest_position import app_id as ingest_app_id
from rpl_sql.storage.delta.scan import Followed


def spark_sql_thread(self, state_every: float) -> None:
    """The SQL thread with Spark deciding (`--master`; `self` is the channel's `service.ChannelLoops`): whenever
    events wait, the Spark job (`rpl-sql apply`) applies them batch by batch on the cluster and keeps the replica
    tables; it is asked between batches whether to go on, so STOP REPLICA waits for at most one batch."""
    st = self.status
    spark = None
    started = False
    events = Followed(events_path(self.svc.warehouse))
    gate = TablesGate(self.svc.warehouse, self.svc.exec_mode, lambda _channel: self.backfills)

    class Interrupted(Exception):
        pass

    while not self.svc.stopping.is_set():
        state, version = self.svc.state.versioned()
        ch = state.channel(self.channel)
        if ch is None or not ch.configured or not ch.sql_running or version <= self.error_version:
            started = False
            self._stopped("sql", version)
            self.svc.stopping.wait(state_every)
            continue
        st.sql_version = version
        try:
            if not started:
                st.last_sql_error = [0, "", ""]
                st.sql, st.sql_state = "Yes", "Applying batch"
                self.svc.publish(self)
                started = True
            dt = events.table()
            landed = (dt.transaction_version(ingest_app_id(self.channel)) or 0) if dt is not None else 0
            if landed <= ch.applier.seq:
                if self.backfills.pending:  # a copy may be done: its held events replayed while idle
                    gate.materialize(self.channel)
                st.sql_state = self.backfills.describe() or "Replica has read all relay log; waiting for more updates"
                st.seconds_behind = 0
                self.svc.stopping.wait(self.svc.poll)
                continue
            if spark is None:
                st.sql_state = "Starting Spark"
                spark = self.svc.spark()
            backfilling = self.backfills.describe()
            st.sql_state = "Applying batch" + (f"; {backfilling}" if backfilling else "")

            def between(_progress) -> None:
                now, _ = self.svc.state.versioned()
                c = now.channel(self.channel)
                if self.svc.stopping.is_set() or c is None or not c.sql_running:
                    raise Interrupted()

            apply(spark, self.svc.warehouse, [self.channel], batch_size=self.svc.batch_size, progress=between,
                  tables=True, exec_mode=self.svc.exec_mode, backfills=gate.backfills)
            st.sql_version = version
        except Interrupted:
            continue
        except Exception as e:
            self._sql_error(e)
            started = False
    self._stopped("sql", self.svc.state.versioned()[1])
