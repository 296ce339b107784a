"""A batch's shapes from the ingest's summaries kept as columns, and decided by classes of equal decisions.

Deciding a channel's 46,000 shapes one `Shape` at a time (each built, keyed and given to the evaluator) cost the
arrow engine about half a CPU second a channel, all of it holding the GIL its write threads wait for
(docs/benchmarks.md, the applier). Here pyarrow and numpy give each shape a class that only shapes of one
decision share: a row event's database and what the table rules make of its table (the result of the first
rule that matches it, or none); a statement's (command, default database) and what its tables come to under
the table rules (the rule result of the first updated table that any rule matches, or that none does, or that
it updates no table). The table rules are asked once per table a batch names (`_TableChecks`, shared by both
kinds), the reference evaluator then decides one shape of each class, as `decide_shapes` decides any shape.
Shapes outside what the classes model (lower_case_table_names, the effective-database mode, DROP TRIGGER, DROP
TEMPORARY TABLE IF EXISTS, NULL names) are each a class of their own. tests/pipeline/test_shape_table.py checks
every shape's decision against the evaluator's, hostile names included.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rpl_sql.filters.evaluate import DROP_TEMPORARY_IF_EXISTS, Started, rewrite, statement_start, table_check
from rpl_sql.filters.rules import Filters, Matching
from rpl_sql.pipeline.applier.shapes import AppliedShapes, Shape, decide_shapes, refs_of
from rpl_sql.pipeline.events import ROW_EVENT_TYPES
from rpl_sql.pipeline.summary import Summary, merge_rows

_PLAIN = ("event_type", "db_name", "table_name", "command", "default_db")
_ROW, _QUERY, _GTID, _UNKNOWN = 0, 1, 2, 3
# a statement's outcome past its (command, default database) steps: >= 0, the table rule result (an index
# among the batch's distinct ones) of its first updated table a rule matches; else one of these
_DEFAULT, _NO_UPDATED, _NO_TABLES, _EXEMPT = -1, -2, -3, -4


@dataclass(frozen=True)
class Tally:
    """What `batch_record` reads of shapes, summed over one class of them (or the GTID-only ones)."""

    kind: str
    apply: bool | None
    decided_by: str | None
    hits: tuple
    rule_hits: tuple
    count: int


class _TableChecks:
    """The table rules' result (`table_check`) for table keys (`db.name`), each key checked once a batch, and
    each distinct result a code: the row events' and the statements' tables name mostly the same tables."""

    def __init__(self, filters: Filters):
        self.filters = filters
        self._by_key: dict[str, int] = {}
        self._results: dict = {}

    def codes(self, keys: pa.Array) -> np.ndarray:
        """Per key, its result's code (-1: no rule matches it)."""
        idx, distinct = _codes(keys)
        by_key, results = self._by_key, self._results
        per = np.empty(len(distinct), np.int64)
        for i, k in enumerate(distinct):
            got = by_key.get(k)
            if got is None:
                r = table_check(self.filters, k)
                got = by_key[k] = -1 if r is None else results.setdefault(r, len(results))
            per[i] = got
        return per[idx]


def _column(t: pa.Table, name: str) -> pa.Array:
    return t.column(name).combine_chunks()


def _codes(col: pa.Array) -> tuple[np.ndarray, list]:
    """Each value's index among the column's distinct values (NULL one of them), and those values."""
    enc = pc.dictionary_encode(col, null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


class ShapeTable:
    """The distinct shapes of a batch's commits (`summary.SHAPES_SCHEMA` rows, merged) and, once `decide`d, each
    one's verdict: its class's, whose `Shape` the evaluator decided."""

    def __init__(self, merged: pa.Table, sources: Sequence[tuple[Summary, np.ndarray]] = ()):
        query = pc.fill_null(pc.equal(merged.column("event_type"), "query"), False)
        if pc.any(pc.and_(pc.invert(query), pc.is_valid(merged.column("tables")))).as_py():
            # a row event's tables are no part of its shape: grouped again without them, as the events' are
            nulls = pa.nulls(merged.num_rows, merged.schema.field("tables").type)
            merged, again = merge_rows([merged.set_column(merged.schema.get_field_index("tables"), "tables",
                                                          pc.if_else(query, merged.column("tables"), nulls))])
            sources = tuple((s, again[rows]) for s, rows in sources)
        self.table = merged.combine_chunks()
        self.sources = tuple(sources)  # summaries merged here, each with its shapes' rows in `table`
        self.count = self.table.column("n").to_numpy()
        self.lo, self.hi = self.table.column("lo").to_numpy(), self.table.column("hi").to_numpy()
        et, names = _codes(_column(self.table, "event_type"))
        self.kind = np.array([_ROW if n in ROW_EVENT_TYPES else _QUERY if n == "query" else _GTID if n == "gtid"
                              else _UNKNOWN for n in names], np.int64)[et]
        self.cls: np.ndarray | None = None  # per shape: its class (-1: GTID only)
        self.classes: list[Shape] = []      # per class: the shape the evaluator decided

    @classmethod
    def of(cls, summaries: Sequence[Summary]) -> "ShapeTable":
        """The shapes of these summaries merged, knowing where each summary's shapes went."""
        merged, row = merge_rows([s.shapes for s in summaries])
        ends = np.cumsum([s.shapes.num_rows for s in summaries])
        return cls(merged, tuple(zip(summaries, np.split(row, ends[:-1]))))

    def __len__(self) -> int:
        return self.table.num_rows

    def span(self) -> tuple[int, int, int]:
        """(events, first seq, last seq)."""
        return int(self.count.sum()), int(self.lo.min()), int(self.hi.max())

    def shapes(self, rows) -> list[Shape]:
        """These rows as Shapes (undecided)."""
        rows = np.asarray(rows, np.int64)
        return [Shape(tuple(r[k] for k in _PLAIN) + (None,), refs_of(r["tables"]) if kind == _QUERY else None,
                      r["n"], r["lo"], r["hi"])
                for r, kind in zip(self.table.take(pa.array(rows)).to_pylist(), self.kind[rows])]

    def unknown(self) -> Shape | None:
        """The first shape of an event type the applier does not know, if any."""
        bad = np.flatnonzero(self.kind == _UNKNOWN)
        return self.shapes(bad[:1])[0] if len(bad) else None

    def decide(self, channel: str, filters: Filters, matching: Matching) -> None:
        """Each shape's class, and one shape of each decided by the reference evaluator (`decide_shapes`: its
        ApplyError names that shape's first seq)."""
        n = len(self)
        a, b = np.zeros(n, np.int64), np.zeros(n, np.int64)  # with the category, the class's key
        cat = np.where(self.kind == _GTID, -1, np.where(self.kind == _ROW, 0, 1))
        if matching.filter_mode == "mysql" and not matching.lower_case_table_names:
            own = self.kind == _UNKNOWN  # a class of its own
            checks = _TableChecks(filters)
            rows = np.flatnonzero(self.kind == _ROW)
            if len(rows):
                a[rows], b[rows], irregular = self._row_classes(rows, filters, checks)
                own[rows[irregular]] = True
            queries = np.flatnonzero(self.kind == _QUERY)
            if len(queries):
                a[queries], b[queries], irregular = self._statement_classes(queries, filters, checks)
                own[queries[irregular]] = True
        else:
            own = self.kind != _GTID
        a[own], b[own], cat[own] = np.flatnonzero(own), 0, 2
        decided = np.flatnonzero(cat >= 0)
        cls = np.full(n, -1, np.int64)
        if len(decided):
            ca, aa, ba = cat[decided], a[decided], b[decided] - _EXEMPT  # b from 0
            # a below the shapes' count, b below the table entries' count + 4: the key cannot overflow
            width_a, width_b = int(aa.max()) + 1, int(ba.max()) + 1
            _, first, inverse = np.unique((ca * width_a + aa) * width_b + ba, return_index=True, return_inverse=True)
            cls[decided] = inverse.reshape(-1)
            self.classes = self.shapes(decided[first])
            decide_shapes(channel, filters, self.classes, matching)
        self.cls = cls

    def _row_classes(self, rows: np.ndarray, filters: Filters, checks: "_TableChecks"
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row event shape: its database's code, what the table rules make of its table (`_TableChecks`'
        code; 0 when there are none: the database decides alone), and whether it names no table."""
        t = self.table.take(rows)
        db, table = _column(t, "db_name"), _column(t, "table_name")
        irregular = ~(db.is_valid().to_numpy(zero_copy_only=False) & table.is_valid().to_numpy(zero_copy_only=False))
        code, dbs = _codes(db)
        outcome = np.zeros(len(rows), np.int64)
        if filters.table_rules_on:  # the evaluator's key: the database as rewritten, '.', the table
            rewritten = pa.array(["" if d is None else rewrite(filters, d)[0] for d in dbs], pa.string())
            outcome = checks.codes(pc.binary_join_element_wise(rewritten.take(pa.array(code)),
                                                               pc.fill_null(table, ""), "."))
        return code, outcome, irregular

    def _statement_classes(self, queries: np.ndarray, filters: Filters, checks: "_TableChecks"
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per statement shape: its (command, default database) code, its outcome past them, and whether it
        is one the classes do not model."""
        cmd, commands = _codes(_column(self.table, "command"))  # (the whole columns: cheaper than a take)
        ddb, dbs = _codes(_column(self.table, "default_db"))
        cmd, ddb = cmd[queries], ddb[queries]
        upper = [(c or "OTHER").upper() for c in commands]  # as statement_event makes the command
        steps = [c.upper() for c in upper]  # and as decide_statement reads it
        irregular = np.isin(cmd, [i for i, c in enumerate(upper) if c in ("DROP_TRIGGER", DROP_TEMPORARY_IF_EXISTS)])
        start = cmd * len(dbs) + ddb
        starts, start_idx = np.unique(start, return_inverse=True)
        start_idx = start_idx.reshape(-1)
        # per (command, default database): the evaluator's steps before the tables
        begun = [statement_start(filters, steps[s // len(dbs)], dbs[s % len(dbs)]) for s in starts]
        tables = _column(self.table, "tables")
        sizes = pc.fill_null(pc.list_value_length(tables), 0).to_numpy(zero_copy_only=False)[queries]
        outcome = np.full(len(queries), _NO_TABLES, np.int64)
        if not filters.table_rules_on:
            return start_idx, outcome, irregular
        started = np.array([isinstance(g, Started) for g in begun])[start_idx]
        exempt = np.array([steps[s // len(dbs)] == "SET_OPTION" for s in starts])[start_idx]
        loop = started & (sizes > 0) & ~irregular
        outcome[loop & exempt] = _EXEMPT
        loop &= ~exempt
        at = np.flatnonzero(loop)
        if not len(at):
            return start_idx, outcome, irregular
        # the looped statements' tables, from the whole column: each entry's statement among `at` (-1: none)
        of_row = np.full(len(self), -1, np.int64)
        of_row[queries[at]] = np.arange(len(at))
        parent = of_row[pc.list_parent_indices(tables).to_numpy(zero_copy_only=False)]
        keep = pa.array(parent >= 0)
        entries = pc.list_flatten(tables)
        parent = parent[parent >= 0]
        name = entries.field("name").filter(keep)
        if name.null_count:  # the evaluator refuses such a table: each such statement is decided alone
            bad = np.unique(parent[~name.is_valid().to_numpy(zero_copy_only=False)])
            irregular[at[bad]] = True
        # the evaluator's key of each table: its database, or the statement's as the steps left it, '.', name
        start_db = pa.array([g.db if isinstance(g, Started) else "" for g in begun], pa.string())
        own_db = start_db.take(pa.array(start_idx[at][parent]))
        db = entries.field("db").filter(keep)
        key = pc.binary_join_element_wise(pc.if_else(db.is_valid(), db, own_db), pc.fill_null(name, ""), ".")
        updating = pc.fill_null(entries.field("updating").filter(keep), False).to_numpy(zero_copy_only=False)
        code = np.full(len(parent), -1, np.int64)
        if updating.any():
            code[updating] = checks.codes(key.filter(pa.array(updating)))
        got = np.where(np.bincount(parent[updating], minlength=len(at)) > 0, _DEFAULT, _NO_UPDATED)
        hit = np.flatnonzero(code >= 0)
        first_of, first = np.unique(parent[hit], return_index=True)
        got[first_of] = code[hit[first]]
        outcome[at] = got
        return start_idx, outcome, irregular

    def _verdicts(self) -> tuple[np.ndarray, list]:
        if self.cls is None:
            raise RuntimeError("the shapes are not decided yet")
        return self.cls, self.classes

    def tallies(self) -> list[Tally]:
        """What `batch_record` sums, by class (events counted per class), and the GTID-only shapes'."""
        cls, classes = self._verdicts()
        gtid = cls < 0
        counts = np.bincount(cls[~gtid], weights=self.count[~gtid], minlength=len(classes)).astype(np.int64)
        out = [Tally(s.kind, s.apply, s.decided_by, s.hits, s.rule_hits, int(c)) for s, c in zip(classes, counts) if c]
        if gtid.any():
            out.append(Tally("gtid", None, None, (), (), int(self.count[gtid].sum())))
        return out

    def applied(self) -> AppliedShapes:
        """The applied shapes, as the writes find events by them."""
        cls, classes = self._verdicts()
        applies = np.array([bool(s.apply) for s in classes] + [False], bool)  # [-1]: GTID only
        mine = np.flatnonzero(applies[cls])
        of = pa.array(cls[mine])
        position = np.full(len(self), -1, np.int64)
        position[mine] = np.arange(len(mine))
        return AppliedShapes(self.table.select([*_PLAIN, "tables"]).take(mine),
                             pa.array([s.applied_db for s in classes], pa.string()).take(of),
                             pa.array([s.decided_by for s in classes], pa.string()).take(of),
                             self.count[mine].astype(np.int64),
                             tuple((s, position[rows]) for s, rows in self.sources))
