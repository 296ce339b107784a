"""What an applier run reports: per-batch progress, per-channel counts, and the run's table."""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

from rpl_sql.server.applier_state import BatchRecord
from rpl_sql.display.render import format_table

log = logging.getLogger(__name__)


@contextlib.contextmanager
def timed(what: str, channel: str):
    """A step of a run, its seconds logged at DEBUG (`rpl-sql apply -v`)."""
    t = time.perf_counter()
    yield
    logging.getLogger("rpl_sql.pipeline.applier.job").debug("channel '%s': %s %.2fs", channel, what,
                                                            time.perf_counter() - t)


# ---------------------------------------------------------------- reports

@dataclass
class ApplyProgress:
    """Reported after every batch (and once per channel at the start)."""

    channel: str
    batch: int
    position: int  # applier position (seq) after the batch
    events_done: int  # events processed for this channel in this run
    events_pending: int | None  # estimate of what is left (from the events table's file stats)
    seconds: float  # since the channel started in this run

    @property
    def rate(self) -> float:
        return self.events_done / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        left = f", ~{self.events_pending:,} left" if self.events_pending is not None else ""
        return (f"[apply] channel '{self.channel}': batch {self.batch}, position {self.position:,}, "
                f"{self.events_done:,} events in {self.seconds:.1f}s ({self.rate:,.0f} events/s){left}")


@dataclass
class ChannelReport:
    """One channel's run: what was read, applied, ignored, and by which rule."""

    channel: str
    status: str = "up to date"  # 'applied' | 'up to date' | 'not running' | 'stopped' | 'no events'
    start_seq: int = 0
    end_seq: int = 0
    events: int = 0
    applied: int = 0
    ignored: int = 0
    gtid_only: int = 0
    source_dropped: int = 0  # ignored at the source by the ingest (not in the events table)
    batches: int = 0
    recovered: int = 0  # half-done batches completed from the applied table's metadata
    by_rule: dict[str, list[int]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    note: str = ""

    def add(self, rec: BatchRecord) -> None:
        self.events += rec.events
        self.applied += rec.applied
        self.ignored += rec.ignored
        self.gtid_only += rec.gtid_only
        self.source_dropped += rec.source_dropped
        self.end_seq = rec.end
        for k, (a, i) in rec.by_rule.items():
            cur = self.by_rule.setdefault(k, [0, 0])
            cur[0] += a
            cur[1] += i
        for k, n in rec.counts.items():
            if n:
                self.counters[k] = self.counters.get(k, 0) + n


@dataclass
class ApplyReport:
    """The summary of one `apply` run."""

    channels: list[ChannelReport]
    seconds: float = 0.0

    @property
    def events(self) -> int:
        return sum(c.events for c in self.channels)

    def channel(self, name: str) -> ChannelReport:
        return next(c for c in self.channels if c.channel == name)

    def table(self) -> str:
        """Per channel: events read, applied, ignored; then per channel and deciding rule."""
        head = ("Channel", "Status", "Seqs", "Events", "Applied", "Ignored", "GTID only", "Dropped at source",
                "Batches", "Seconds", "Events/s")
        rows = [(c.channel, c.status + (f" ({c.note})" if c.note else ""),
                 f"{c.start_seq + 1}..{c.end_seq}" if c.end_seq > c.start_seq else "-", c.events, c.applied,
                 c.ignored, c.gtid_only, c.source_dropped, c.batches, f"{c.seconds:.1f}",
                 f"{c.events / c.seconds:,.0f}" if c.seconds > 0 and c.events else "-") for c in self.channels]
        out = format_table(head, rows)
        rule_rows = [(c.channel, rule, a, i, c.counters.get(rule, "")) for c in self.channels
                     for rule, (a, i) in sorted(c.by_rule.items())]
        if rule_rows:
            out += "\n" + format_table(("Channel", "Decided by", "Applied", "Ignored", "COUNTER +"), rule_rows)
        extra = [(c.channel, k, n) for c in self.channels for k, n in sorted(c.counters.items()) if k not in c.by_rule]
        if extra:
            out += "\n" + format_table(("Channel", "Filter", "COUNTER +"), extra)
        return out


