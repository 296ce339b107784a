"""Events found among shapes by an exact integer key: the applier's write finds each event's shape with it,
and the ingest's compaction stores each event's row in the compaction's rollup (`events.SHAPE_ID`)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from rpl_sql.pipeline.summary import tables_key

PLAIN_KEYS = ("event_type", "db_name", "table_name", "command", "default_db")
KEY_BITS = 62  # ShapeIndex's keys stay below 2^KEY_BITS


def _chunks(col) -> list[pa.Array]:
    return col.chunks if isinstance(col, pa.ChunkedArray) else [col]


def _map(col, fn) -> pa.ChunkedArray:
    """fn applied to each chunk of `col`, through its dictionary where it has one: fn(dictionary) taken by the
    indices, NULL rows given fn(NULL) (one more entry past the dictionary's: one take, where an if_else over
    every row made a column's codes cost half as much again)."""
    out = []
    for c in _chunks(col):
        if not pa.types.is_dictionary(c.type):
            out.append(fn(c))
            continue
        got, indices = fn(c.dictionary), c.indices
        if indices.null_count:
            got = pa.concat_arrays([got, fn(pa.nulls(1, c.type.value_type))])
            indices = pc.fill_null(indices, len(c.dictionary))
        out.append(got.take(indices))
    if not out:
        return pa.chunked_array([], fn(pa.array([], pa.string())).type)
    return pa.chunked_array(out)


def key_columns(table: pa.Table) -> list:
    """The six shape-key columns of events (or shapes): the five plain ones and, for a statement, its tables as
    summary.tables_key text (NULL for every other event, as the shapes group them)."""
    query = _map(table.column("event_type"), lambda c: pc.fill_null(pc.equal(c, "query"), False))
    tk = pc.if_else(query, tables_key(table.column("tables")), pa.scalar(None, pa.string()))
    return [table.column(k) for k in PLAIN_KEYS] + [tk]


class ShapeIndex:
    """Shapes (a table of their key columns and `tables`) found again by events, by an integer key: each key
    column's value becomes its place among the shapes' values of that column (NULL included, if a shape has
    it; a value no shape has: NULL, which no key matches), folded into the key as a mixed-radix digit. When the
    radix product would pass 2^KEY_BITS the key so far is made dense among the shapes' prefixes first, so it never
    overflows whatever the names are. An exact key: no hash, so nothing can collide (a text key per event cost
    2.7 times as much)."""

    def __init__(self, shapes: pa.Table):
        self._values: list[pa.Array] = []     # per column: the shapes' distinct values
        self._dense: dict[int, pa.Array] = {}  # column -> the shapes' distinct keys through it, where made dense
        codes = self._encode(key_columns(shapes), build=True)
        keys = pc.unique(codes)
        if len(keys) != shapes.num_rows:
            raise ValueError("the shapes are not distinct")
        self._keys = keys
        self._row_of = pc.sort_indices(pc.index_in(codes, value_set=keys))  # a key's place -> its shape's row

    def _encode(self, columns, build: bool) -> pa.Array:
        key, bound = None, 1
        for i, col in enumerate(columns):
            if build:
                self._values.append(pc.unique(col))
            values = self._values[i]
            if build and key is not None and bound * len(values) >= 1 << KEY_BITS:
                self._dense[i] = pc.unique(key)
            if i in self._dense:
                key, bound = pc.index_in(key, value_set=self._dense[i]).cast(pa.int64()), len(self._dense[i])
            code = _map(col, lambda c: pc.index_in(c, value_set=values).cast(pa.int64()))
            key = code if key is None else pc.add(pc.multiply(key, len(values)), code)
            bound *= len(values)
        return key

    def rows(self, events: pa.Table) -> pa.Array:
        """Per event, the row of its shape; NULL where no shape has its key."""
        return self._row_of.take(pc.index_in(self._encode(key_columns(events), build=False), value_set=self._keys))
