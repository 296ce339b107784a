"""The arrow engine's verdicts by shape id (verdicts.Verdicts): found by the C kernel, by numpy's runs of events
in seq order (as a compacted file holds them) and by numpy's search per event, they must be equal, for any order
of events, rollups with gaps between them, events outside them and ids that lie."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from rpl_sql import native
from rpl_sql.pipeline.applier import verdicts
from rpl_sql.pipeline.applier.verdicts import KEY_COLUMNS, Verdicts
from rpl_sql.pipeline.applier.shapes import AppliedShapes
from rpl_sql.pipeline.events import EVENTS_SCHEMA, SHAPE_ID
from rpl_sql.pipeline.summary import Summary
from rpl_sql.server.applier_state import ApplyError


def _verdicts(spans: list[tuple[int, int, int]], seed: int) -> Verdicts:
    """Rollups of seqs first..last with `size` shapes each, their shapes mapped to applied rows at random."""
    rng = np.random.default_rng(seed)
    rollups, by_summary = [], []
    for first, last, size in spans:
        r = Summary(first, last, "", None, None, None)
        rollups.append(r)
        by_summary.append((r, rng.integers(-1, 5, size)))
    applied = AppliedShapes(pa.table({k: pa.nulls(5, EVENTS_SCHEMA.field(k).type) for k in KEY_COLUMNS}),
                            pa.array(["a", None, "c", "a", "é"]), pa.array(["b", "b", None, "d`,'", "%_"]),
                            np.zeros(5, np.int64), tuple(by_summary))
    return Verdicts(applied, rollups, 0, None, "ch")


def _events(seqs: list[int], ids: list[int]) -> pa.Table:
    cols = {k: pa.nulls(len(seqs), EVENTS_SCHEMA.field(k).type) for k in KEY_COLUMNS}
    return pa.table({**cols, "seq": pa.array(seqs, pa.int64()), SHAPE_ID: pa.array(ids, pa.int32())})


def _outcome(found: Verdicts, events: pa.Table):
    """What `_by_ids` made of the events: its verdicts and the sample's shape positions, or its error."""
    try:
        got = found._by_ids(events)
    except ApplyError as e:
        return "error", str(e)
    if got is None:
        return "by key", None
    sample = [(k.to_pylist(), a.tolist(), q.tolist()) for k, a, q in found._samples]
    return "verdicts", (got.events, None if got.keep is None else got.keep.to_pylist(),
                        None if got.rows is None else got.rows.tolist(), got.applied_db.to_pylist(),
                        got.decided_by.to_pylist(), got.counts.tolist(), sample)


@st.composite
def _case(draw):
    spans, seq = [], 1
    for _ in range(draw(st.integers(1, 6))):
        seq += draw(st.sampled_from([0, 0, 0, 3]))  # sometimes a gap no rollup covers
        n = draw(st.integers(1, 40))
        spans.append((seq, seq + n - 1, draw(st.integers(1, 8))))
        seq += n
    top = seq + draw(st.sampled_from([0, 0, 2]))  # sometimes events past the last rollup
    runs = draw(st.lists(st.lists(st.integers(1, top), min_size=1, max_size=30, unique=True), min_size=1,
                         max_size=6))
    seqs = [q for run in runs for q in sorted(run)]
    size_of = {q: size for first, last, size in spans for q in range(first, last + 1)}
    lie = draw(st.sampled_from([False, False, True]))
    ids = [draw(st.integers(-1, size_of.get(q, 1))) if lie else draw(st.integers(0, size_of.get(q, 1) - 1))
           for q in seqs]
    return spans, seqs, ids, draw(st.integers(0, 2 ** 32 - 1))


@settings(max_examples=400, deadline=None)
@given(_case())
def test_the_kernel_the_runs_and_the_search_per_event_agree(case):
    spans, seqs, ids, seed = case
    events = _events(seqs, ids)
    if native._compiler() is None:
        pytest.skip("no C compiler here (cc, gcc or $CC): the kernel's numpy twin is what the applier runs")
    kernel = _verdicts(spans, seed)
    assert kernel._kernel is not None
    by_kernel = _outcome(kernel, events)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("RPL_SQL_NATIVE", "0")
        by_runs = _outcome(_verdicts(spans, seed), events)
        m.setattr(verdicts, "MAX_RUNS", -1)  # every file too many runs: the search per event
        per_event = _outcome(_verdicts(spans, seed), events)
    assert by_kernel == by_runs == per_event


@pytest.mark.parametrize("kernel", ["1", "0"], ids=["kernel", "numpy"])
def test_a_lying_id_in_a_later_run_is_refused_with_its_seq(monkeypatch, kernel):
    monkeypatch.setenv("RPL_SQL_NATIVE", kernel)
    found = _verdicts([(1, 10, 3), (11, 20, 2)], seed=1)
    assert (found._kernel is not None) == (kernel == "1" and native._compiler() is not None)
    with pytest.raises(ApplyError, match="seq 12: shape id 2 is not among the 2 shapes"):
        found._by_ids(_events([1, 5, 11, 2, 12, 13], [0, 2, 1, 1, 2, 0]))


@pytest.mark.parametrize("kernel", ["1", "0"], ids=["kernel", "numpy"])
def test_an_id_past_32_bits_is_refused_not_wrapped(monkeypatch, kernel):
    """Ids of a wider type than the schema's int32 are checked whole: 2^32 + 1 is not shape 1."""
    monkeypatch.setenv("RPL_SQL_NATIVE", kernel)
    found = _verdicts([(1, 10, 3)], seed=1)
    events = _events([1, 2], [0, 0])
    wide = pa.array([0, 2 ** 32 + 1], pa.int64())
    events = events.set_column(events.schema.get_field_index(SHAPE_ID), SHAPE_ID, wide)
    with pytest.raises(ApplyError, match="seq 2: shape id 4294967297 is not among the 3 shapes"):
        found._by_ids(events)
