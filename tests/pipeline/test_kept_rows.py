"""The applied rows gathered by the C kernel (kept_rows.take) equal Arrow's filter by the same mask, for every
column type an events file holds and some it does not (which go to Arrow's filter), NULLs, empty and hostile
text, lists with NULL and empty entries, sliced arrays (an offset into their buffers), and no rows or all."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from rpl_sql import native
from rpl_sql.pipeline.applier import kept_rows
from rpl_sql.pipeline.events import TABLES_TYPE

_TEXT = st.one_of(st.none(), st.text(alphabet=st.sampled_from("ab'\"\\`,%_é€\x00 "), max_size=6))
_TABLES = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"db": _TEXT, "name": _TEXT, "updating": st.one_of(st.none(), st.booleans())}), max_size=3))


@st.composite
def _case(draw):
    n = draw(st.integers(0, 40))
    skip = draw(st.integers(0, 3))  # sliced: the arrays start `skip` rows into their buffers
    total = n + skip

    def values(strategy):
        return draw(st.lists(strategy, min_size=total, max_size=total))
    ints = values(st.one_of(st.none(), st.integers(-2 ** 63, 2 ** 63 - 1)))
    columns = {
        "seq": pa.array(ints, pa.int64()),
        "small": pa.array(values(st.one_of(st.none(), st.integers(-128, 127))), pa.int8()),
        "id": pa.array(values(st.integers(0, 2 ** 31 - 1)), pa.int32()),
        "at": pa.array([None if v is None else dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
                        + dt.timedelta(microseconds=v % 10 ** 12) for v in ints], pa.timestamp("us", tz="UTC")),
        "x": pa.array(values(st.one_of(st.none(), st.floats(allow_nan=False))), pa.float64()),
        "db_name": pa.array(values(_TEXT), pa.string()).dictionary_encode(),
        "gtid": pa.array(values(_TEXT), pa.string()),
        "raw": pa.array([None if v is None else v.encode() for v in values(_TEXT)], pa.binary()),
        "tables": pa.array(values(_TABLES), TABLES_TYPE),
        "flag": pa.array(values(st.one_of(st.none(), st.booleans())), pa.bool_()),  # Arrow's filter
        "big": pa.array(values(_TEXT), pa.large_string()),                          # Arrow's filter
    }
    table = pa.table({k: v.slice(skip) for k, v in columns.items()})
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return table, keep


def _take(table: pa.Table, keep: list[bool]) -> pa.Table:
    rows = np.flatnonzero(np.array(keep, bool)).astype(np.int32)
    return kept_rows.take(table, rows, pa.array(keep, pa.bool_()))


@settings(max_examples=300, deadline=None)
@given(_case())
def test_the_kernel_keeps_what_arrows_filter_keeps(case):
    if native._compiler() is None:
        pytest.skip("no C compiler here (cc, gcc or $CC): Arrow's filter is what the applier runs")
    table, keep = case
    assert kept_rows._kernel() is not None
    got = _take(table, keep)
    want = table.filter(pa.array(keep, pa.bool_()))
    got.validate(full=True)
    assert got.schema == want.schema
    assert got.equals(want)


def test_columns_in_several_chunks_and_no_kernel_go_to_arrows_filter(monkeypatch):
    table = pa.Table.from_batches([pa.record_batch({"seq": pa.array([1, 2], pa.int64())})] * 2)
    keep = [True, False, False, True]
    assert _take(table, keep).column("seq").to_pylist() == [1, 2]
    monkeypatch.setenv("RPL_SQL_NATIVE", "0")
    assert kept_rows._kernel() is None
    assert _take(table.combine_chunks(), keep).column("seq").to_pylist() == [1, 2]
