"""The ingest commits an applier run can decide from their summaries (pipeline.summary) instead of a pass
over their events, and the compactions' rollups that stand for runs of them."""
from __future__ import annotations

from dataclasses import dataclass

from rpl_sql.pipeline.summary import Summary, parse


@dataclass(frozen=True)
class Landed:
    """The channel's summarised commits from `after_seq + 1` on, gapless and in seq order.

    `complete`: they are all of the channel's commits past `after_seq` up to the run's events version, so a
    batch of all of them leaves nothing behind. `rollups`: summaries of runs of them (by an ingest compaction).
    """

    commits: tuple[Summary, ...]
    complete: bool
    rollups: tuple[Summary, ...] = ()

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

    def covered(self, batch: tuple[Summary, ...]) -> tuple[Summary, ...]:
        """The same seqs as `batch` (consecutive commits), each run of commits that a rollup spans exactly
        replaced by it: one summary to decode where there were dozens."""
        ends = {c.last_seq for c in batch}
        by_first = {r.first_seq: r for r in self.rollups if r.last_seq in ends}
        out: list[Summary] = []
        i = 0
        while i < len(batch):
            r = by_first.get(batch[i].first_seq)
            if r is not None and r.last_seq <= batch[-1].last_seq:
                out.append(r)
                while i < len(batch) and batch[i].last_seq <= r.last_seq:
                    i += 1
            else:
                out.append(batch[i])
                i += 1
        return tuple(out)


def summarized(commits: list[tuple[int, dict[str, str]]], after_seq: int,
               rollups: list[tuple[int, dict[str, str]]] = ()) -> Landed:
    """The chain of summaries in the channel's `commits` after `after_seq` (ingest_position.channel_commits: version and
    ingest metadata, oldest first), while each carries one and starts where the previous one ended; with the
    `rollups` (channel_commits' too, keys without summary.ROLLUP) that span commits of the chain."""
    chain: list[Summary] = []
    expected = after_seq + 1
    for _, meta in commits:
        s = parse(meta)
        if s is None or s.first_seq != expected:
            break
        chain.append(s)
        expected = s.last_seq + 1
    firsts, lasts = {c.first_seq for c in chain}, {c.last_seq for c in chain}
    spans = tuple(r for r in (parse(m) for _, m in rollups)
                  if r is not None and r.first_seq in firsts and r.last_seq in lasts)
    return Landed(tuple(chain), bool(commits) and len(chain) == len(commits), spans)
