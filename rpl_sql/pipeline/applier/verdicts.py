"""Each event's verdict in the arrow engine's write: which applied shape it is, folded per events file into
what the write needs (which events to keep, their applied_db and decided_by, each applied shape's count).

By shape id in one pass of the C kernel `rpl_sql/native/verdicts.c` where it builds, else by numpy
(`_positions`, `_fold`); tests/pipeline/test_verdicts.py holds the two equal, lying ids and events outside the
rollups included.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rpl_sql import native
from rpl_sql.pipeline.applier.shapes import AppliedShapes
from rpl_sql.pipeline.events import SHAPE_ID
from rpl_sql.pipeline.shape_index import PLAIN_KEYS, ShapeIndex, key_columns
from rpl_sql.pipeline.summary import Summary
from rpl_sql.server.applier_state import ApplyError

MAX_RUNS = 64  # numpy finds ids by runs of events in seq order while a file has at most this many
SAMPLE_EVERY = 1024  # every SAMPLE_EVERY-th event's shape id is checked against its columns
KEY_COLUMNS = (*PLAIN_KEYS, "tables")
_P, _N = ctypes.c_void_p, ctypes.c_int64
_KERNEL_ARGS = [_N, _P, _P, _N, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _N, _P, _P, _P]


@dataclass
class FileVerdicts:
    """One events file's verdicts, as the write uses them."""

    events: int                        # the file's events
    keep: pa.BooleanArray | None       # which of them are applied; None: all
    rows: np.ndarray | None            # their indices (int32); None: all
    applied_db: pa.DictionaryArray     # of the kept events, in order
    decided_by: pa.DictionaryArray
    counts: np.ndarray                 # kept events per applied shape (Verdicts.counts' order)


def _kernel():
    return native.function("verdicts", _KERNEL_ARGS, ctypes.c_int)


class Verdicts:
    """Which applied shape each event is, and that shape's applied_db and decided_by.

    Where an ingest compaction stored each event's row among its rollup's shapes (`events.SHAPE_ID`) and the
    applier knows that rollup, the event's verdict is taken by that id: finding every event's shape by its key
    columns was what put the write above pyarrow's copy of the same files (docs/benchmarks.md, the applier).
    A rollup the batch's shapes were merged from maps its ids to applied shapes as the merge grouped them
    (`AppliedShapes.rows_of`); any other is matched to them by key. Elsewhere (commits not compacted yet,
    events landed by an older rpl_sql) the events' shapes are found by `ShapeIndex`, built when first needed.
    Ids are checked: each must lie within its rollup's shapes, a sample of each file's events (every
    SAMPLE_EVERY-th and the last) must have the key columns of the shape its id names (`check`, once for all
    files), and `write_applied` requires each applied shape's count of written events to equal its count in the
    summaries; else ApplyError, before anything is committed.
    """

    def __init__(self, applied: AppliedShapes, rollups: Sequence[Summary] = (), lo: int = 0, hi: int | None = None,
                 channel: str = ""):
        self.applied = applied
        self._index: ShapeIndex | None = None
        self._lock = threading.Lock()
        # applied_db and decided_by, in the applied shapes' order, as codes into their distinct values (-1: NULL)
        self.lookup = {name: _Coded(arr) for name, arr in (("applied_db", applied.applied_db),
                                                           ("decided_by", applied.decided_by))}
        self.counts = applied.counts  # in the applied shapes' order
        self.channel, self.lo, self.hi = channel, lo, hi
        mine = sorted((r for r in rollups if r.last_seq > lo and (hi is None or r.first_seq <= hi)),
                      key=lambda r: r.first_seq)
        if any(b.first_seq <= a.last_seq for a, b in zip(mine, mine[1:])):
            mine = []  # rollups over the same events: which one an id refers to is not known, so none is used
        self._rollups = mine
        luts = [self._rows_of(r) for r in mine]
        self._starts = np.array([r.first_seq for r in mine], np.int64)
        self._ends = np.array([r.last_seq for r in mine], np.int64)
        self._sizes = np.array([len(x) for x in luts], np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)
        self._lut = np.ascontiguousarray(np.concatenate(luts) if luts else np.empty(0, np.int64), np.int64)
        self._samples: list[tuple[pa.Table, np.ndarray, np.ndarray]] = []  # per file: sampled keys, shapes, seqs
        self._kernel = _kernel() if len(mine) else None

    @property
    def index(self) -> ShapeIndex:
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = ShapeIndex(self.applied.keys)
        return self._index

    def _rows_of(self, rollup: Summary) -> np.ndarray:
        got = self.applied.rows_of(rollup)
        return self._by_key(rollup.shapes) if got is None else got

    def of_file(self, events: pa.Table) -> FileVerdicts:
        """The verdicts of an events file's events (by their shape ids, else by their key columns)."""
        got = self._by_ids(events)
        return self._fold(self._by_key(events)) if got is None else got

    def _by_key(self, table: pa.Table) -> np.ndarray:
        """Per row of `table` (events or shapes), the row of its applied shape found by its columns; -1 if none."""
        return pc.fill_null(self.index.rows(table).cast(pa.int64()), -1).to_numpy()

    def _fold(self, rows: np.ndarray) -> FileVerdicts:
        """`rows` (per event, its applied shape's row or -1) as the write uses them."""
        hit = rows >= 0
        every = bool(hit.all())
        kept = rows if every else rows[hit]
        where = None if every else np.flatnonzero(hit).astype(np.int32)
        return FileVerdicts(len(rows), None if every else pa.array(hit), where, self.lookup["applied_db"].take(kept),
                            self.lookup["decided_by"].take(kept), np.bincount(kept, minlength=len(self.counts)))

    def _by_ids(self, events: pa.Table) -> FileVerdicts | None:
        """By the events' shape ids; None where they cannot serve (no ids, an event outside the rollups known)."""
        if not len(self._starts) or SHAPE_ID not in events.column_names or not events.num_rows:
            return None
        sid = events.column(SHAPE_ID)
        if sid.null_count:
            return None
        seq = np.ascontiguousarray(events.column("seq").to_numpy(), np.int64)
        ids = np.ascontiguousarray(sid.to_numpy(), np.int64)  # (int32 in the schema; any width is checked whole)
        pick = np.r_[np.arange(0, len(seq), SAMPLE_EVERY), len(seq) - 1]
        if self._kernel is not None:
            got = self._native(seq, ids)
            if got is None:
                return None
            at, found = got
        else:
            positions = self._positions(seq, ids)
            if positions is None:
                return None
            at, found = positions[pick], self._fold(self._lut[positions])
        sample = (events.select(KEY_COLUMNS).take(pick), at, seq[pick])
        with self._lock:
            self._samples.append(sample)
        return found

    def _native(self, seq: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, FileVerdicts] | None:
        """`_by_ids` by the C kernel: (the sample's shape positions, the verdicts), or None."""
        n = len(seq)
        bitmap, kept_rows = np.empty((n + 7) // 8, np.uint8), np.empty(n, np.int32)
        codes = [np.empty(n, np.int32), np.empty(n, np.int32)]
        counts = np.zeros(len(self.counts), np.int64)
        picks = np.empty((n - 1) // SAMPLE_EVERY + 2, np.int64)
        kept, bad = np.zeros(1, np.int64), np.zeros(1, np.int64)
        a, b = self.lookup["applied_db"], self.lookup["decided_by"]
        status = self._kernel(n, seq.ctypes.data, ids.ctypes.data, len(self._starts), self._starts.ctypes.data,
                              self._ends.ctypes.data, self._sizes.ctypes.data, self._offsets.ctypes.data,
                              self._lut.ctypes.data, a.codes.ctypes.data, b.codes.ctypes.data, bitmap.ctypes.data,
                              kept_rows.ctypes.data, codes[0].ctypes.data, codes[1].ctypes.data, counts.ctypes.data,
                              SAMPLE_EVERY, picks.ctypes.data, kept.ctypes.data, bad.ctypes.data)
        if status == 1:
            return None
        if status == 2:
            i = int(bad[0])
            self._check_ids(seq[i:i + 1], ids[i:i + 1], np.searchsorted(self._starts, seq[i:i + 1], "right") - 1)
        m = int(kept[0])
        keep = None if m == n else pa.BooleanArray.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bitmap)])
        return picks, FileVerdicts(n, keep, None if m == n else kept_rows[:m], a.wrap(codes[0][:m]),
                                   b.wrap(codes[1][:m]), counts)

    def _positions(self, seq: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
        """Per event, its shape's position among all the rollups' shapes; None when an event lies outside them."""
        at = self._by_runs(seq, ids)
        if at is None:
            r = np.searchsorted(self._starts, seq, side="right") - 1
            if (r < 0).any() or (seq > self._ends[np.maximum(r, 0)]).any():
                return None
            self._check_ids(seq, ids, r)
            at = self._offsets[r] + ids
        return at if len(at) else None

    def _by_runs(self, seq: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
        """`_positions` found by runs: a file's events are a few runs in seq order (one per compaction it
        merged), each spanning few rollups, so each stretch of one run in one rollup is checked by its bounds,
        instead of a search per event; an empty array when an event lies outside the rollups known, None when
        the events are not so."""
        steps = np.flatnonzero(seq[1:] < seq[:-1]) + 1
        if len(steps) > MAX_RUNS:
            return None
        stretches = []  # (rollup, first event, end)
        for a, b in zip([0, *steps], [*steps, len(seq)]):
            first, last = np.searchsorted(self._starts, [seq[a], seq[b - 1]], side="right") - 1
            if first < 0:
                return np.empty(0, np.int64)
            if last - first > MAX_RUNS:
                return None
            cuts = [a, *(a + np.searchsorted(seq[a:b], self._starts[first + 1:last + 1])), b]
            stretches += [(k, lo, hi) for k, lo, hi in zip(range(first, last + 1), cuts, cuts[1:]) if lo < hi]
        if any(seq[hi - 1] > self._ends[k] for k, _, hi in stretches):
            return np.empty(0, np.int64)
        at = np.empty(len(seq), np.int64)
        for k, lo, hi in stretches:
            run = ids[lo:hi]
            if run.min() < 0 or run.max() >= self._sizes[k]:
                self._check_ids(seq[lo:hi], run, np.full(hi - lo, k))
            at[lo:hi] = run + self._offsets[k]
        return at

    def _check_ids(self, seq: np.ndarray, ids: np.ndarray, r: np.ndarray) -> None:
        bad = np.flatnonzero((ids < 0) | (ids >= self._sizes[r]))
        if len(bad):
            i = bad[0]
            raise ApplyError(f"seq {seq[i]}: shape id {ids[i]} is not among the {self._sizes[r[i]]} shapes of the "
                             f"ingest rollup of seqs {self._starts[r[i]]}..{self._ends[r[i]]}", self.channel)

    def check(self) -> None:
        """The sampled events must have the key columns of the shapes their ids named: ApplyError if not."""
        with self._lock:
            samples, self._samples = self._samples, []
        if not samples:
            return
        events = pa.concat_tables([k for k, _, _ in samples])
        at, seqs = np.concatenate([a for _, a, _ in samples]), np.concatenate([q for _, _, q in samples])
        shapes = pa.concat_tables([r.shapes.select(KEY_COLUMNS) for r in self._rollups]).take(pa.array(at))
        same = np.ones(len(at), bool)
        for a, b in zip(key_columns(events), key_columns(shapes)):
            same &= _equal(a, b)
        wrong = np.flatnonzero(~same)
        if len(wrong):
            raise ApplyError(f"seq {seqs[wrong[0]]}: its shape id names another shape than its columns do (an "
                             f"ingest rollup's ids disagree with the events); nothing applied", self.channel)


class _Coded:
    """A column of the applied shapes as codes into its distinct values, so that the events' column is a
    numpy take of codes (Arrow's take of a dictionary column cost four times as much)."""

    def __init__(self, values: pa.Array):
        enc = values.dictionary_encode()
        self.dictionary = enc.dictionary
        self.codes = np.ascontiguousarray(pc.fill_null(enc.indices, -1).to_numpy(), np.int32)
        self.has_null = bool(enc.indices.null_count)

    def take(self, rows: np.ndarray) -> pa.DictionaryArray:
        return self.wrap(self.codes[rows])

    def wrap(self, codes: np.ndarray) -> pa.DictionaryArray:
        """Codes (-1: NULL) as the dictionary column."""
        indices = pa.array(codes, mask=codes < 0) if self.has_null else pa.array(codes)
        return pa.DictionaryArray.from_arrays(indices, self.dictionary, safe=False)  # codes index `dictionary`


def _equal(a, b) -> np.ndarray:
    """Per row, a == b, NULL equal to NULL (dictionary columns compared as their values)."""
    a, b = (pc.cast(x, pa.string()) if pa.types.is_dictionary(x.type) else x for x in (a, b))
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.fill_null(pc.or_kleene(pc.equal(a, b), both_null), False).to_numpy(zero_copy_only=False)
