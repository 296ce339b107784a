"""ShapeTable decides a batch's shapes by classes, one shape of each through the evaluator: every shape must get
exactly the decision the reference evaluator gives its own event (verdict, deciding rule, hits, the rule behind
each hit, applied database), with hostile names, NULLs, every command and both modes."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import example, given, settings, strategies as st

from rpl_sql.filters.evaluate import COMMANDS, DROP_TEMPORARY_IF_EXISTS, decide, hit_rules, rewrite_db
from rpl_sql.filters.rules import Filters, FilterType, Matching
from rpl_sql.filters.state import Channel
from rpl_sql.pipeline.applier.shape_table import ShapeTable
from rpl_sql.pipeline.applier.shapes import applied_shapes, batch_record, decide_shapes
from rpl_sql.pipeline.events import ROW_EVENT_TYPES
from rpl_sql.pipeline.summary import SHAPES_SCHEMA, merge
from rpl_sql.server.applier_state import ApplyError
from tests.filters.test_evaluate import F, filters_s, name, small, small_filters

_name = st.one_of(name, small)
_command = st.one_of(st.none(), st.sampled_from(sorted(COMMANDS | {DROP_TEMPORARY_IF_EXISTS})),
                     st.sampled_from(["insert", "Set_Option", "drop_trigger", "begin", "GRANT"]), name)
_tables = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"db": st.none() | _name, "name": _name, "updating": st.none() | st.booleans()}), max_size=4))
_statement = st.fixed_dictionaries({"event_type": st.just("query"), "db_name": st.none(), "table_name": st.none(),
                                    "command": _command, "default_db": st.none() | _name, "tables": _tables})
_row = st.fixed_dictionaries({"event_type": st.sampled_from(ROW_EVENT_TYPES), "db_name": _name,
                              "table_name": _name, "command": st.none(), "default_db": st.none(),
                              "tables": st.none()})
_gtid = st.just({"event_type": "gtid", "db_name": None, "table_name": None, "command": None, "default_db": None,
                 "tables": None})


def _table(shapes: list[dict]) -> pa.Table:
    rows = [{**s, "n": i % 3 + 1, "lo": 10 * i + 1, "hi": 10 * i + 1 + i % 3} for i, s in enumerate(shapes)]
    return merge([pa.Table.from_pylist(rows, schema=SHAPES_SCHEMA)])


def _own(filters, shape, matching):
    """The evaluator's decision of one shape's event, as decide_shapes records it."""
    event = shape.event()
    d = decide(filters, event, matching)
    lctn = matching.lower_case_table_names
    return (d.apply, d.decided_by, d.hits, hit_rules(filters, event, d, lctn) if d.hits else (),
            rewrite_db(filters, shape.db, lctn))


def _insert(*tables):
    return {"event_type": "query", "db_name": None, "table_name": None, "command": "INSERT", "default_db": "a",
            "tables": [{"db": d, "name": n, "updating": True} for d, n in tables]}


@settings(max_examples=300, deadline=None)
@example(F(do_table=["a.B"]), [_insert(("a", "b")), _insert(("a", "c"))], Matching(1))  # equal only folded
@example(F(wild_ignore=["x.%"], rewrite=[("a", "x")]), [_insert((None, "b")), _insert(("a", "b"))],
         Matching(0, "effective_database"))  # the effective database rewritten
@given(filters_s, st.lists(st.one_of(_statement, _statement, _row, _gtid), min_size=1, max_size=30),
       st.sampled_from([Matching(), Matching(), Matching(1), Matching(2), Matching(0, "effective_database")]))
def test_each_shape_gets_its_own_events_decision(filters, shapes, matching):
    _each_decided_as_its_own(filters, shapes, matching)


_tiny_tables = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"db": st.none() | small, "name": small, "updating": st.none() | st.booleans()}), max_size=3))
_tiny_statement = st.fixed_dictionaries(
    {"event_type": st.just("query"), "db_name": st.none(), "table_name": st.none(),
     "command": st.sampled_from(["INSERT", "UPDATE", "CREATE_TABLE", "CREATE_DB", "SET_OPTION", "BEGIN"]),
     "default_db": st.none() | small, "tables": _tiny_tables})
_tiny_row = st.fixed_dictionaries({"event_type": st.sampled_from(ROW_EVENT_TYPES), "db_name": small,
                                   "table_name": small, "command": st.none(), "default_db": st.none(),
                                   "tables": st.none()})


def _rows(*names):
    return [{"event_type": "write_rows", "db_name": d, "table_name": t, "command": None, "default_db": None,
             "tables": None} for d, t in names]


@settings(max_examples=300, deadline=None)
@example(F(rewrite=[("a", "b")], ignore_table=["b.a"]), _rows(("a", "a"), ("a", "b")))  # rules see b, not a
@example(F(rewrite=[("a", "b")], wild_do=["b.%"]), _rows(("a", "a"), ("b", "a")) + [_insert((None, "a"))])
@given(small_filters, st.lists(st.one_of(_tiny_statement, _tiny_row), min_size=2, max_size=30))
def test_shapes_that_share_names_each_get_their_own_events_decision(filters, shapes):
    """A name space of four names and rules over it: many shapes share a database, a table or a class, so a
    class that held shapes of two decisions would show."""
    _each_decided_as_its_own(filters, shapes, Matching())


def _each_decided_as_its_own(filters, shapes, matching):
    table = ShapeTable(_table(shapes))
    table.decide("ch", filters, matching)
    every = table.shapes(range(len(table)))
    if matching != Matching():  # not modelled by classes: each shape decided alone
        assert len(table.classes) == sum(s.kind != "gtid" for s in every)
    for i, s in enumerate(every):
        if s.kind == "gtid":
            assert table.cls[i] == -1
            continue
        c = table.classes[table.cls[i]]
        assert (c.apply, c.decided_by, c.hits, c.rule_hits, c.applied_db) == _own(filters, s, matching), s.describe()
    # what the batch's record and write read: equal to the same shapes decided one by one
    decide_shapes("ch", filters, [s for s in every if s.kind != "gtid"], matching)
    fields = dict(channel="ch", start=0, end=0, events=0, gtids="", last_file=None, last_pos=None, events_version=0)
    want = batch_record(_ch(filters), every, {}, **fields)
    got = batch_record(_ch(filters), table.tallies(), {}, **fields)
    def per_rule(rec):  # (the pairs' order is not part of the record: it is read back into a dict)
        return {t: sorted(map(repr, pairs)) for t, pairs in rec.rule_counts.items()}
    assert (got.applied, got.ignored, got.gtid_only, got.counts, got.by_rule, per_rule(got)) == \
        (want.applied, want.ignored, want.gtid_only, want.counts, want.by_rule, per_rule(want))
    a, b = table.applied(), applied_shapes(every)
    assert a.keys.to_pylist() == b.keys.to_pylist() and a.counts.tolist() == b.counts.tolist()
    assert a.applied_db.to_pylist() == b.applied_db.to_pylist()
    assert a.decided_by.to_pylist() == b.decided_by.to_pylist()


def _ch(filters):
    return Channel("ch", filters=filters)


def test_a_row_events_tables_are_no_part_of_its_shape():
    """Row shapes that differ only in a (stray) tables list are one shape, as the events' are grouped."""
    row = {"event_type": "write_rows", "db_name": "d", "table_name": "t", "command": None, "default_db": None}
    table = ShapeTable(_table([{**row, "tables": None}, {**row, "tables": [{"db": "x", "name": "y",
                                                                            "updating": True}]}]))
    assert len(table) == 1 and table.span() == (3, 1, 12)


def test_a_shape_the_evaluator_refuses_stops_with_its_seq():
    """A row event without a table is a class of its own, and the evaluator's refusal names its first seq."""
    table = ShapeTable(_table([{"event_type": "write_rows", "db_name": "d", "table_name": "t", "command": None,
                                "default_db": None, "tables": None},
                               {"event_type": "write_rows", "db_name": None, "table_name": "t", "command": None,
                                "default_db": None, "tables": None}]))
    filters = Filters().configure(FilterType.DO_TABLE, ("d.t",), "STARTUP_OPTIONS", 1)
    with pytest.raises(ApplyError, match="seq 11"):
        table.decide("ch", filters, Matching())


def test_unknown_event_types_are_found():
    table = ShapeTable(_table([{"event_type": "query", "db_name": None, "table_name": None, "command": "BEGIN",
                                "default_db": "d", "tables": None},
                               {"event_type": "heartbeat", "db_name": None, "table_name": None, "command": None,
                                "default_db": None, "tables": None}]))
    assert table.unknown().key[0] == "heartbeat" and table.unknown().min_seq == 11


_stray = st.fixed_dictionaries({"event_type": st.sampled_from(ROW_EVENT_TYPES), "db_name": _name,
                                "table_name": _name, "command": st.none(), "default_db": st.none(),
                                "tables": _tables})  # a row event with a (stray) tables list


@settings(max_examples=200, deadline=None)
@given(filters_s, st.lists(st.lists(st.one_of(_statement, _row, _stray, _gtid), min_size=1, max_size=12),
                           min_size=1, max_size=4), st.data())
def test_each_summarys_shapes_find_their_applied_shape_as_their_keys_do(filters, parts, data):
    """Where the batch's shapes were merged from summaries, each summary's shape rows map to the applied shapes
    (`AppliedShapes.rows_of`, what the write takes events' verdicts by) exactly as a lookup by their key columns
    finds them (hostile names, NULLs, statements' tables, row events with stray tables grouped without them)."""
    from rpl_sql.pipeline.shape_index import ShapeIndex
    from rpl_sql.pipeline.summary import Summary

    summaries, seq = [], 1
    for part in parts:  # shapes may repeat within a summary's rows only as distinct rows: merged first
        part = part + data.draw(st.lists(st.sampled_from(part), max_size=3))  # and across summaries
        t = _table(part)
        s = Summary(seq, seq + 1000, "", None, None, None)
        s.__dict__["shapes"] = t
        summaries.append(s)
        seq += 1001
    table = ShapeTable.of(summaries)
    table.decide("ch", filters, Matching())
    applied = table.applied()
    index = ShapeIndex(applied.keys)
    for s in summaries:
        want = [-1 if r is None else r for r in index.rows(s.shapes).to_pylist()]
        assert applied.rows_of(s).tolist() == want
    assert applied.rows_of(Summary(1, 1000, "", None, None, None)) is None  # by identity, not by its seqs
