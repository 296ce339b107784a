"""What an event source is: the shape a new one (Maxwell, a Kafka topic, ...) must have to feed the pipeline.

A source lands one channel's change events in the events table through `writer.EventsWriter`: whole
transactions per commit, its resume position (or marks) in the same commit, and an `IngestReport` back.
The binlog reader (`binlog.BinlogIngest`) and the Debezium reader (`debezium.DebeziumIngest`) are the two.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from rpl_sql.pipeline.writer import IngestReport


@runtime_checkable
class EventSource(Protocol):
    """Constructed with a warehouse and a channel (and what it reads); `run()` lands what there is now."""

    warehouse: str
    channel: str

    def run(self) -> IngestReport:
        """Land the events available now; safe to repeat after a crash (nothing lands twice)."""
        ...
