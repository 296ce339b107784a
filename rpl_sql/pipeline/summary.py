"""What one ingest commit landed, in a few hundred bytes of its commit metadata: the distinct shapes (the
applier's decision inputs) with counts and seq ranges, the GTIDs as a set, and the last binlog position.

The writer computes it from the Arrow table it commits, in the same Delta commit, so it can never disagree
with the rows. The applier then decides a batch of whole commits from their summaries and reads the events
once, to write them (issue 20 part 2); a commit without one (landed by an older rpl_sql, or too many shapes to
carry) sends the applier back to its own pass over the events.
"""
from __future__ import annotations

import base64
import functools
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rpl_sql.server.gtid_set import GtidSet
from rpl_sql.pipeline.events import TABLES_TYPE
from rpl_sql.storage.delta.commit_info import Cut

SHAPES, GTIDS, LAST_FILE, LAST_POS = "shapes", "gtids", "last_file", "last_pos"  # metadata keys (META + )
ROLLUP = "rollup."  # a compaction's rollup of the commits it merged: the same keys after META + ROLLUP
MAX_ENCODED = 1 << 20  # characters of encoded shapes a commit carries at most (more: no summary)

SHAPES_SCHEMA = pa.schema([("event_type", pa.string()), ("db_name", pa.string()), ("table_name", pa.string()),
                           ("command", pa.string()), ("default_db", pa.string()), ("tables", TABLES_TYPE),
                           ("n", pa.int64()), ("lo", pa.int64()), ("hi", pa.int64())])
_NUMBER = r"^[0-9]{1,18}$"  # what a bigint surely holds
_PLAIN_KEYS = ["event_type", "db_name", "table_name", "command", "default_db"]
_KEY_LIMIT = 1 << 62  # `_group_key`'s keys stay below it


@dataclass(frozen=True)
class Summary:
    """One commit's summary (or a rollup of several: `rollup`) and the channel's seqs it holds; its shapes (in
    SHAPES_SCHEMA) decoded when first asked for, so a reader that takes a rollup instead never decodes them.
    `encoded`: their text, or what gives it by str() (the log reader's `commit_info.Cut`)."""

    first_seq: int
    last_seq: int
    encoded: str | Cut = field(repr=False)
    gtids: GtidSet
    last_file: str | None
    last_pos: int | None

    @functools.cached_property
    def shapes(self) -> pa.Table:
        return pa.ipc.open_stream(base64.b64decode(str(self.encoded))).read_all()


def summary_of(table: pa.Table, seqs: tuple[int, int] | None = None) -> Summary | None:
    """The Summary of canonical event rows (the first and last seq: `seqs`, else the rows'), or None when it
    cannot be carried (too many shapes, or a GTID the applier would refuse: its own pass then reports it)."""
    if table.num_rows == 0:
        return None
    gtids = _gtid_set(table.column("gtid"))
    if gtids is None:
        return None
    shapes = _shapes(table)
    encoded = _encode(shapes)
    if len(encoded) > MAX_ENCODED:
        return None
    seq = table.column("seq")
    last = table.take([pc.index(seq, pc.max(seq)).as_py()]).to_pylist()[0]
    first, end = seqs or (pc.min(seq).as_py(), last["seq"])
    s = Summary(first, end, encoded, gtids, last["binlog_file"], last["binlog_pos"])
    s.__dict__["shapes"] = shapes  # decoded already (a writer's compaction merges them into its rollup)
    return s


def metadata(s: Summary) -> dict[str, str]:
    """A summary's commit metadata (keys without the prefix; the commit's own first_seq and last_seq aside)."""
    meta = {SHAPES: str(s.encoded), GTIDS: str(s.gtids)}
    if s.last_file is not None:
        meta[LAST_FILE] = s.last_file
    if s.last_pos is not None:
        meta[LAST_POS] = str(s.last_pos)
    return meta


def rollup(summaries: list[Summary]) -> Summary | None:
    """Consecutive summaries as one (shapes merged, GTID sets joined, the last one's position): what an ingest
    compaction records for the commits it merged, so an applier deciding all of them decodes one summary.
    None when they are not consecutive or the merged shapes are too many to carry."""
    if not summaries or any(b.first_seq != a.last_seq + 1 for a, b in zip(summaries, summaries[1:])):
        return None
    shapes = merge([s.shapes for s in summaries])
    encoded = _encode(shapes)
    if len(encoded) > MAX_ENCODED:
        return None
    gtids = functools.reduce(GtidSet.union, (s.gtids for s in summaries), GtidSet())
    last = summaries[-1]
    rolled = Summary(summaries[0].first_seq, last.last_seq, encoded, gtids, last.last_file, last.last_pos)
    rolled.__dict__["shapes"] = shapes  # the rows `encoded` holds (the compaction indexes its events by them)
    return rolled


def parse(meta: dict[str, str]) -> Summary | None:
    """The summary in a commit's ingest metadata, or a rollup's (keys without the prefixes), or None when it
    has none."""
    if SHAPES not in meta or "first_seq" not in meta:
        return None
    pos = meta.get(LAST_POS)
    return Summary(int(meta["first_seq"]), int(meta["last_seq"]), meta[SHAPES], GtidSet.parse(meta.get(GTIDS, "")),
                   meta.get(LAST_FILE), int(pos) if pos else None)


def merge(shapes: list[pa.Table]) -> pa.Table:
    """Several commits' shapes as one: counts added, seq ranges widened (Arrow does the grouping, so Spark
    gets only the distinct shapes)."""
    return _grouped(pa.concat_tables(shapes), ("n", "sum"), ("lo", "min"), ("hi", "max"))[0]


def merge_rows(shapes: list[pa.Table]) -> tuple[pa.Table, np.ndarray]:
    """`merge`, and for each row of the shapes given (concatenated), the row of the merged table it went to."""
    return _grouped(pa.concat_tables(shapes), ("n", "sum"), ("lo", "min"), ("hi", "max"), rows=True)


def _shapes(table: pa.Table) -> pa.Table:
    return _grouped(table, ("seq", "count"), ("seq", "min"), ("seq", "max"))[0]


def _grouped(table: pa.Table, *aggs: tuple[str, str], rows: bool = False) -> tuple[pa.Table, np.ndarray | None]:
    """Distinct shapes as the applier groups them, with `aggs` giving n, lo and hi: by the five plain key
    columns and the statement's tables (a list, which Arrow cannot group by: by its entries' codes, each group
    keeping its first row's list), all six folded into one integer key (`_group_key`: hashing six columns of
    text took twice as long). With `rows`, also each input row's group (the applier's write finds the events'
    verdicts through it instead of hashing the shapes again)."""
    key = _group_key([table.column(k) for k in _PLAIN_KEYS] + [_tables_codes(table.column("tables"))])
    keyed = table.select(list(dict.fromkeys(c for c, _ in aggs))) \
        .append_column("_key", pa.array(key)).append_column("_row", row_numbers(table.num_rows))
    g = keyed.group_by(["_key"], use_threads=False).aggregate(list(aggs) + [("_row", "min")])
    n, lo, hi = (g.column(f"{c}_{f}").cast(pa.int64()) for c, f in aggs)
    first = g.column("_row_min")
    out = pa.table({**{k: table.column(k).take(first) for k in _PLAIN_KEYS},
                    "tables": table.column("tables").take(first), "n": n, "lo": lo, "hi": hi}, schema=SHAPES_SCHEMA)
    if not rows:
        return out, None
    return out, pc.index_in(pa.array(key), value_set=g.column("_key")).to_numpy()


def _group_key(columns: list) -> np.ndarray:
    """Per row, an int64 equal exactly where every column's value is (NULL a value too): each column's code
    among its distinct values folded in as a mixed-radix digit, the key so far made dense first whenever the
    next digit could overflow it."""
    key, bound = np.zeros(len(columns[0]), np.int64), 1
    for col in columns:
        code, width = _codes(col)
        if bound * width >= _KEY_LIMIT:
            distinct, key = np.unique(key, return_inverse=True)
            key, bound = key.reshape(-1).astype(np.int64), len(distinct)
        key = key * width + code
        bound *= width
    return key


def row_numbers(n: int) -> pa.Array:
    """0 .. n-1 as int64, made by Arrow (pa.array(range(n)) converts Python ints: 0.1 s a million)."""
    return pc.indices_nonzero(pa.repeat(pa.scalar(True), n)).cast(pa.int64())


def tables_key(tables: pa.ChunkedArray) -> pa.Array:
    """Each list of (db, name, updating) as text that equal lists, and only they, share (every part is
    length-prefixed, so no name can forge a boundary); NULL for NULL."""
    tables = tables.combine_chunks()
    base, end = tables.offsets[0].as_py(), tables.offsets[-1].as_py()
    entries = tables.values.slice(base, end - base)

    def sized(text):
        return pc.binary_join_element_wise(pc.cast(pc.binary_length(text), pa.string()), text, ":")

    db = entries.field("db")
    db = pc.if_else(pc.is_valid(db), pc.binary_join_element_wise("+", sized(db), ""), "-")  # NULL: unqualified
    upd = pc.if_else(pc.fill_null(entries.field("updating"), False), "1", "0")
    text = pc.binary_join_element_wise(db, sized(pc.fill_null(entries.field("name"), "")), upd, "")
    lists = pa.ListArray.from_arrays(pc.subtract(tables.offsets, base), text, mask=tables.is_null())
    return pc.binary_join(lists, "")


def _codes(col) -> tuple[np.ndarray, int]:
    """Each value's place among the column's distinct values (NULL one of them), and how many there are (1 at
    least, so it can serve as a radix)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    enc = pc.dictionary_encode(col, null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), max(len(enc.dictionary), 1)


def _tables_codes(tables: pa.ChunkedArray) -> pa.Array:
    """What `tables_key` groups by, as bytes that only the lists of one call compare by: each entry's (db, name,
    updating) as its 8-byte code among the call's distinct entries: a fifth of the text's cost (a channel's
    rollups: 0.003 s against 0.015), and no name can forge a boundary, every entry being 8 bytes."""
    tables = tables.combine_chunks()
    base, end = tables.offsets[0].as_py(), tables.offsets[-1].as_py()
    entries = tables.values.slice(base, end - base)
    db, n_db = _codes(entries.field("db"))  # NULL (unqualified) a value of its own
    name, n_name = _codes(pc.fill_null(entries.field("name"), ""))  # as tables_key reads them
    upd = pc.fill_null(entries.field("updating"), False).to_numpy(zero_copy_only=False).astype(np.int64)
    if n_db * n_name >= 1 << 62:  # cannot be: each count is at most the entries' (below 2^31 in a list array)
        raise OverflowError("too many distinct tables to code")
    code = (db * n_name + name) * 2 + upd
    offsets = (np.asarray(tables.offsets, np.int64) - base) * 8
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(tables), [
        tables.is_valid().buffers()[1] if tables.null_count else None,
        pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(code))], tables.null_count)


def _encode(shapes: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SHAPES_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(shapes)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def _gtid_set(column: pa.ChunkedArray) -> GtidSet | None:
    """The commit's GTIDs as a set, by the applier's rules ('uuid[:tag]:n' or 'domain-server-n', n >= 1),
    or None when one breaks them (parsed by Arrow: a commit holds a GTID per few events)."""
    g = pc.drop_null(pc.unique(column))
    if len(g) == 0:
        return GtidSet()
    colon = pc.match_substring(g, ":")
    mysql: dict[str, list[tuple[int, int]]] = {}
    my = g.filter(colon)
    if len(my):
        parts = pc.split_pattern(my, ":", max_splits=1, reverse=True)
        nums = pc.list_element(parts, 1)
        if not pc.all(pc.match_substring_regex(nums, _NUMBER)).as_py():
            return None
        keys = pc.utf8_lower(pc.list_element(parts, 0)).to_pylist()
        for key, n in zip(keys, pc.cast(nums, pa.int64()).to_pylist()):
            mysql.setdefault(key, []).append((n, n))
    mariadb: dict[int, tuple[int, int]] = {}
    ma = g.filter(pc.invert(colon))
    if len(ma):
        parts = pc.split_pattern(ma, "-")
        if not pc.all(pc.equal(pc.list_value_length(parts), 3)).as_py() or \
                not pc.all(pc.match_substring_regex(pc.list_flatten(parts), _NUMBER)).as_py():
            return None
        for d, srv, n in zip(*(pc.cast(pc.list_element(parts, i), pa.int64()).to_pylist() for i in range(3))):
            if n < 1:
                return None
            if d not in mariadb or n > mariadb[d][1]:
                mariadb[d] = (srv, n)
    if any(n < 1 for v in mysql.values() for n, _ in v):
        return None
    return GtidSet(mysql, mariadb)
