"""The ingest commits an applier run can decide from their summaries (pipeline.summary) instead of a pass
over their events."""
from __future__ import annotations

from dataclasses import dataclass

from rpl_sql.pipeline.summary import Summary, parse


@dataclass(frozen=True)
class Landed:
    """The channel's summarised commits from `after_seq + 1` on, gapless and in seq order.

    `complete`: they are all of the channel's commits past `after_seq` up to the run's events version, so a
    batch of all of them leaves nothing behind.
    """

    commits: tuple[Summary, ...]
    complete: bool

    def done(self, after_seq: int) -> bool:
        """Every event of the run is applied once the applier is at `after_seq`."""
        return self.complete and after_seq >= self.commits[-1].last_seq

    def batch(self, after_seq: int, size: int | None) -> tuple[Summary, ...]:
        """The commits of the next batch after `after_seq`: whole commits, at least `size` events (None: all);
        () when the summaries do not start right after `after_seq`."""
        todo = [c for c in self.commits if c.first_seq > after_seq]
        if not todo or todo[0].first_seq != after_seq + 1:
            return ()
        if size is None:
            return tuple(todo)
        out = []
        for c in todo:
            out.append(c)
            if c.last_seq - after_seq >= size:
                break
        return tuple(out)


def summarized(commits: list[tuple[int, dict[str, str]]], after_seq: int) -> Landed:
    """The chain of summaries in the channel's `commits` after `after_seq` (ingest_position.channel_commits: version and
    ingest metadata, oldest first), while each carries one and starts where the previous one ended."""
    chain: list[Summary] = []
    expected = after_seq + 1
    for _, meta in commits:
        s = parse(meta)
        if s is None or s.first_seq != expected:
            break
        chain.append(s)
        expected = s.last_seq + 1
    return Landed(tuple(chain), bool(commits) and len(chain) == len(commits))
