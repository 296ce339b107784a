"""The shapes' grouping (`summary._grouped`, what a commit's summary and the applier's merge are made by) must
group rows exactly as the text key the write's `ShapeIndex` finds events by: a shape the merge split in two, or
two it joined, would give events a verdict not their own."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from rpl_sql.pipeline import summary
from rpl_sql.pipeline.summary import SHAPES_SCHEMA, merge_rows, tables_key
from tests.filters.test_evaluate import name, small

_name = st.one_of(st.none(), name, small)
_tables = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"db": _name, "name": _name, "updating": st.none() | st.booleans()}), max_size=4))
_row = st.fixed_dictionaries({"event_type": st.sampled_from(["query", "write_rows", "gtid", "Query"]),
                              "db_name": _name, "table_name": _name, "command": _name, "default_db": _name,
                              "tables": _tables, "n": st.integers(1, 5), "lo": st.integers(1, 100),
                              "hi": st.integers(100, 200)})


def _reference(rows: list[dict]) -> list[int]:
    """Each row's group, numbered by first appearance, by the plain columns and `tables_key`'s text."""
    keys = tables_key(pa.chunked_array([pa.array([r["tables"] for r in rows], SHAPES_SCHEMA.field("tables").type)]))
    seen: dict = {}
    return [seen.setdefault((r["event_type"], r["db_name"], r["table_name"], r["command"], r["default_db"], k),
                            len(seen)) for r, k in zip(rows, keys.to_pylist())]


def _renumbered(groups) -> list[int]:
    seen: dict = {}
    return [seen.setdefault(g, len(seen)) for g in groups]


def _near(row: dict, data) -> dict:
    """`row` again, or with one part changed a little: a list's entry's flag or NULL, its order, a name."""
    how = data.draw(st.sampled_from(["same", "flag", "db", "name", "order", "plain", "list"]))
    tables = [dict(t) for t in row["tables"]] if row["tables"] else row["tables"]
    if how == "list":
        tables = None if tables is not None else []
    elif how == "order" and tables:
        tables = tables[::-1]
    elif how in ("flag", "db", "name") and tables:
        t = tables[data.draw(st.integers(0, len(tables) - 1))]
        t[{"flag": "updating", "db": "db", "name": "name"}[how]] = data.draw(
            st.sampled_from([None, True, False]) if how == "flag" else st.sampled_from([None, "", "a", "A"]))
    out = {**row, "tables": tables}
    if how == "plain":
        key = data.draw(st.sampled_from(summary._PLAIN_KEYS))
        out[key] = data.draw(st.sampled_from([None, "", "a", "A"]))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_row, min_size=1, max_size=10), min_size=1, max_size=3), st.booleans(), st.data())
def test_shapes_group_exactly_as_their_text_keys(parts, dense, data):
    """Hostile names, NULLs everywhere, lists that differ in one entry's NULL, order or flag, several summaries
    (chunks); `dense`: the key made dense at every digit, as it is when names would overflow it."""
    drawn = [r for p in parts for r in p]
    parts = [p + [_near(data.draw(st.sampled_from(drawn)), data) for _ in range(data.draw(st.integers(0, 6)))]
             for p in parts]
    old = summary._KEY_LIMIT
    summary._KEY_LIMIT = 2 if dense else old
    try:
        merged, group = merge_rows([pa.Table.from_pylist(p, schema=SHAPES_SCHEMA) for p in parts])
    finally:
        summary._KEY_LIMIT = old
    rows = [r for p in parts for r in p]
    assert _renumbered(group.tolist()) == _reference(rows)
    got = merged.to_pylist()
    assert len(got) == len(set(group.tolist()))
    for g, shape in enumerate(got):
        members = [r for r, at in zip(rows, group.tolist()) if at == g]
        first = members[0]
        assert {k: shape[k] for k in summary._PLAIN_KEYS + ["tables"]} == \
            {k: first[k] for k in summary._PLAIN_KEYS + ["tables"]}  # the first row's values, its list included
        assert (shape["n"], shape["lo"], shape["hi"]) == \
            (sum(r["n"] for r in members), min(r["lo"] for r in members), max(r["hi"] for r in members))
