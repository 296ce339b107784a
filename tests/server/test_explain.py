"""EXPLAIN REPLICATION FILTER: the reference evaluator's own trace, as a result set.

Checked: on the events the compiled functions' differential test generates (hostile names, all filter
types, lower_case_table_names 0/1/2), the DECISION row is the evaluator's verdict and `decided_by` (which
`filter_decided_by` is compared with in tests/compile/test_compile.py, through `explain_decision` there), the step that
decided carries the same verdict, and the checks come in MySQL's order; the statement's forms, errors and
routing; the shell."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rpl_sql
from rpl_sql.server import execute as server
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import RowEvent, TableRef, decide, statement_event
from rpl_sql.language.parser import parse
from rpl_sql.language.routing import route
from rpl_sql.filters.rules import FilterType as T
from rpl_sql.language.statements import ExplainReplicationFilter

from tests.compile.test_compile import _as_sql_statement, channel_sets, make_events, states

ORDER = {T.REWRITE_DB.value: 0, "TRANSACTION_CONTROL": 0, T.DO_DB.value: 1, T.IGNORE_DB.value: 1,
         "DATABASE_RULES": 1, "TRIGGER_NOT_FOUND": 2, "EXEMPT": 2, "TABLE_RULES": 2, "TABLE_LOOP": 2,
         T.DO_TABLE.value: 2, T.IGNORE_TABLE.value: 2, T.WILD_DO_TABLE.value: 2, T.WILD_IGNORE_TABLE.value: 2,
         "NO_UPDATED_TABLE": 3, "DEFAULT": 3, "NONE": 3, "DECISION": 4}


def explained(state, channel, event) -> list[tuple]:
    if isinstance(event, RowEvent):
        stmt = ExplainReplicationFilter(channel=channel, table=(event.db, event.table))
    else:
        cmd, ddb, tables = _as_sql_statement(event)  # should_apply_statement's arguments
        stmt = ExplainReplicationFilter(channel=channel, command=cmd, default_db=ddb, tables=tuple(tables))
    return list(server.explain_filter(state, stmt).result.rows)


def check_trace(rows, d) -> None:
    *steps, last = rows
    assert last[1] == "DECISION" and last[4] == d.decided_by and last[5] == ("APPLY" if d.apply else "IGNORE")
    decided = [r for r in steps if r[5] is not None]
    assert len(decided) == 1 and decided[0] is steps[-1] and decided[0][5] == last[5], rows
    ranks = [ORDER[r[1]] for r in rows if r[1] in ORDER]
    assert ranks == sorted(ranks), rows


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), lctn=st.sampled_from([0, 1, 2]), seed=st.integers(0, 2**32 - 1))
def test_the_trace_agrees_with_the_evaluator_on_the_differential_events(data, lctn, seed):
    chans = data.draw(channel_sets(lctn))
    state = states(lctn, chans)
    for ch, db, tbl, cmd, ddb, tables in make_events(state, seed, 150):
        c = state.channel(ch.lower()) if ch else None
        if c is None:
            continue
        if db is not None and tbl is not None:
            ev = RowEvent(db, tbl)
            check_trace(explained(state, c.name, ev), decide(c.filters, ev, state.matching))
        if tables is not None and all(t is not None and t[1] is not None for t in tables):
            ev = statement_event(cmd, ddb, [TableRef(t[0], t[1], bool(t[2])) for t in tables])
            check_trace(explained(state, c.name, ev), decide(c.filters, ev, state.matching))


def _session(tmp_path):
    s = rpl_sql.connect(str(tmp_path / "wh"))
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n"
              "CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((`sh'op`, crm)), REPLICATE_DO_DB = (crm), "
              "REPLICATE_WILD_IGNORE_TABLE = ('crm.tmp\\_%') FOR CHANNEL 'a'")
    return s


def test_the_forms_in_a_session(tmp_path):
    s = _session(tmp_path)
    rows = s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' ROW EVENT ON `sh'op`.tmp_1")[-1].rows
    assert [r[1] for r in rows] == ["REPLICATE_REWRITE_DB", "REPLICATE_DO_DB", "REPLICATE_WILD_IGNORE_TABLE",
                                    "DECISION"]
    assert rows[-1][4:] == ("REPLICATE_WILD_IGNORE_TABLE", "IGNORE") and rows[2][4] == "crm.tmp\\_%"
    # `_` escaped: tmpx1 is not matched; the default then applies (only ignore rules)
    assert s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' ROW EVENT ON `sh'op`.tmpx1")[-1].rows[-1][4:] == \
        ("DEFAULT", "APPLY")
    # SQL text, classified as the ingest does: only the updated table is judged
    rows = s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' STATEMENT "
                     "'UPDATE tmp_1 t JOIN hr.p ON t.id = p.id SET p.x = 1' DEFAULT DATABASE `sh'op`")[-1].rows
    assert ("TABLE_LOOP", "crm.tmp_1") in [(r[1], r[2]) for r in rows] and rows[-1][2] == "UPDATE_MULTI"
    # the command form: the same decision as should_apply_statement's arguments
    rows = s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' STATEMENT 'update' DEFAULT DATABASE hr "
                     "TABLES (t)")[-1].rows
    assert rows[-1][4:] == ("REPLICATE_DO_DB", "IGNORE")
    assert s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' STATEMENT 'COMMIT'")[-1].rows[-1][4:] == \
        ("TRANSACTION_CONTROL", "APPLY")


@pytest.mark.parametrize("text, code", [
    ("EXPLAIN REPLICATION FILTER FOR CHANNEL 'zz' ROW EVENT ON a.b", 3074),
    ("EXPLAIN REPLICATION FILTER ROW EVENT ON a.b", 3079),                    # two channels, none named
    ("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' ROW EVENT ON a", 1064),
    ("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' STATEMENT 'FOO'", 1210),
    ("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' STATEMENT 'UPDATE t SET a=1' TABLES (t)", 1210),
    ("EXPLAIN REPLICATON FILTER FOR CHANNEL 'a' ROW EVENT ON a.b", 1064),
])
def test_errors_change_nothing(tmp_path, text, code):
    s = _session(tmp_path)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'b'")
    before = s.store.load().version
    with pytest.raises(MySQLError) as e:
        s.execute(text)
    assert e.value.code == code
    assert s.store.load().version == before


def test_routing_leaves_sparks_explain_to_spark():
    assert route("EXPLAIN REPLICATION FILTER ROW EVENT ON a.b").owner == "grammar"
    assert route("EXPLAIN SELECT 1").owner == "spark" and route("explain extended select 1").owner == "spark"
    assert route("EXPLAIN REPLICATON FILTER").owner == "typo"
    assert parse("EXPLAIN REPLICATION FILTER ROW EVENT ON `a.b`.`c``d`")[0].table == ("a.b", "c`d")


def test_in_the_shell_without_spark(tmp_path):
    wh = str(tmp_path / "wh")
    _session(tmp_path)
    out = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", wh, "-e",
                          "EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' ROW EVENT ON hr.t"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "| DECISION" in out.stdout and "REPLICATE_DO_DB" in out.stdout and "rows in set" in out.stderr


def test_the_spark_table_functions_return_the_shells_rows(spark, tmp_path):
    s = _session(tmp_path)
    s = rpl_sql.register(spark, str(tmp_path / "wh"), session=s)
    want = s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' ROW EVENT ON `sh'op`.tmp_1")[-1].rows
    got = spark.sql("SELECT * FROM replication_filter_explain('A', 'sh''op', 'tmp_1')").collect()
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    text = "UPDATE tmp_1 t JOIN hr.p ON t.id = p.id SET p.x = 'a\\\\_b'"
    want = s.execute("EXPLAIN REPLICATION FILTER FOR CHANNEL 'a' STATEMENT 'UPDATE tmp_1 t JOIN hr.p "
                     "ON t.id = p.id SET p.x = ''a\\\\_b''' DEFAULT DATABASE `sh'op`")[-1].rows
    got = spark.sql("SELECT * FROM replication_filter_explain_statement('a', ?, ?)",
                    args=[text, "sh'op"]).collect()
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    verdicts = spark.sql("SELECT verdict FROM replication_filter_explain_statement('a', 'commit', NULL) "
                         "WHERE check = 'DECISION'").collect()
    assert [r[0] for r in verdicts] == ["APPLY"]
