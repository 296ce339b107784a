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

SHAPES, GTIDS, LAST_FILE, LAST_POS = "shapes", "gtids", "last_file", "last_pos"  # metadata keys (META + )
ROLLUP = "rollup."  # a compaction's rollup of the commits it merged: the same keys after META + ROLLUP
MAX_ENCODED = 1 << 20  # characters of encoded shapes a commit carries at most (more: no summary)

SHAPES_SCHEMA = pa.schema([("event_type", pa.string()), ("db_name", pa.string()), ("table_name", pa.string()),
                           ("command", pa.string()), ("default_db", pa.string()), ("tables", TABLES_TYPE),
                           ("n", pa.int64()), ("lo", pa.int64()), ("hi", pa.int64())])
_NUMBER = r"^[0-9]{1,18}$"  # what a bigint surely holds
_PLAIN_KEYS = ["event_type", "db_name", "table_name", "command", "default_db"]


@dataclass(frozen=True)
class Summary:
    """One commit's summary (or a rollup of several: `rollup`) and the channel's seqs it holds; its shapes (in
    SHAPES_SCHEMA) decoded when first asked for, so a reader that takes a rollup instead never decodes them."""

    first_seq: int
    last_seq: int
    encoded: str = field(repr=False)
    gtids: GtidSet
    last_file: str | None
    last_pos: int | None

    @functools.cached_property
    def shapes(self) -> pa.Table:
        return pa.ipc.open_stream(base64.b64decode(self.encoded)).read_all()


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
    meta = {SHAPES: s.encoded, GTIDS: str(s.gtids)}
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
    columns and the statement's tables (a list, which Arrow cannot group by: grouped by a text key made from
    it, each group keeping its first row's list). With `rows`, also each input row's group, from the same
    pass (the applier's write finds the events' verdicts through it instead of hashing the shapes again)."""
    keyed = table.select(_PLAIN_KEYS + list(dict.fromkeys(c for c, _ in aggs))) \
        .append_column("_tables", tables_key(table.column("tables"))) \
        .append_column("_row", row_numbers(table.num_rows))
    g = keyed.group_by(_PLAIN_KEYS + ["_tables"], use_threads=False).aggregate(
        list(aggs) + [("_row", "min")] + ([("_row", "list")] if rows else []))
    n, lo, hi = (g.column(f"{c}_{f}").cast(pa.int64()) for c, f in aggs)
    out = pa.table({**{k: g.column(k) for k in _PLAIN_KEYS},
                    "tables": table.column("tables").take(g.column("_row_min")), "n": n, "lo": lo, "hi": hi},
                   schema=SHAPES_SCHEMA)
    if not rows:
        return out, None
    members = g.column("_row_list").combine_chunks()
    group = np.empty(table.num_rows, np.int64)
    group[pc.list_flatten(members).to_numpy()] = pc.list_parent_indices(members).to_numpy()
    return out, group


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
