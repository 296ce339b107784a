"""Tests for the reference evaluator rpl_sql.filters.evaluate (spec/filter-evaluation.md §4-§10, cases.md).

Layout:
  1. §10 worked examples (all 69 rows; ids are the row numbers)
  2. §7 / cases.md counter scenarios (MSF-4, TNE, MAN-EX197, MAN-DODB, MAN-STARTUP, MAN-RESETALL, LCTN)
  3. targeted example tests (rewrite counter, XA, DROP TRIGGER, labels)
  4. hypothesis invariants
  5. §9 'effective_database' mode
"""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import (COMMANDS, DATABASE_COMMANDS, LABELS, TRANSACTION_CONTROL, Decision, RowEvent,
                              DROP_TEMPORARY_IF_EXISTS, Decider, StatementEvent, TableRef, decide, decision_key,
                              hit_rules, rewrite_db, statement_decision_key, statement_event)
from rpl_sql.filters.rules import TABLE_TYPES, Filters, FilterType, Matching, fold

T = FilterType
DO_DB, IGNORE_DB, DO_TABLE, IGNORE_TABLE = T.DO_DB, T.IGNORE_DB, T.DO_TABLE, T.IGNORE_TABLE
WILD_DO, WILD_IGNORE, REWRITE = T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE, T.REWRITE_DB

NONE, DEFAULT, TC, EXEMPT = "NONE", "DEFAULT", "TRANSACTION_CONTROL", "EXEMPT"
NO_UPDATED_TABLE, TRIGGER_NOT_FOUND = "NO_UPDATED_TABLE", "TRIGGER_NOT_FOUND"

KEYS = {"do_db": DO_DB, "ignore_db": IGNORE_DB, "do_table": DO_TABLE, "ignore_table": IGNORE_TABLE,
        "wild_do": WILD_DO, "wild_ignore": WILD_IGNORE, "rewrite": REWRITE}


def F(**cfg) -> Filters:
    """A channel filter object configured by start-up options (all other types empty)."""
    f = Filters()
    for key, values in cfg.items():
        f = f.configure(KEYS[key], tuple(values), "STARTUP_OPTIONS", 1)
    return f


def S(cmd: str, ddb: str | None, tables=(), **kw) -> StatementEvent:
    """A statement event; `tables` are (db-or-None, name[, updating]) tuples in global-table-list order."""
    return StatementEvent(cmd, ddb, tuple(t if isinstance(t, TableRef) else TableRef(*t) for t in tables), **kw)


def R(db: str, table: str, in_xa: bool = False) -> RowEvent:
    return RowEvent(db, table, in_xa)


def hitcount(d: Decision) -> Counter:
    return Counter(d.hits)


# ================================================================ 1. §10 worked examples

EX10 = dict(do_db=["db1"], ignore_db=[], do_table=[], ignore_table=[])
ROW10 = dict(ignore_db=["db1"], do_table=["db2.t3"])
TNE = dict(do_table=["test.t1", "test.t2", "test.t3"], ignore_table=["test.t4", "test.t5", "test.t6"])
MSF1 = dict(do_db=["db1"], wild_do=["db%.t1%"])
MSF3 = dict(ignore_db=["db33"], wild_ignore=["db%.t1%"])


def _u(*names):
    """UPDATE_MULTI table list: names prefixed with '*' are updated, others only read."""
    return [(None, n.lstrip("*"), n.startswith("*")) for n in names]


# (row, lctn, cfg, event, apply, decided_by, hits or None, database or None)
SECTION10 = [
    (1, 0, {}, S("INSERT", "db1", [(None, "t1")]), True, NONE, (), "db1"),
    (2, 0, dict(do_db=["sales"]), S("UPDATE", "prices", [("sales", "january")]), False, "REPLICATE_DO_DB", (), None),
    (3, 0, dict(do_db=["sales"]), R("sales", "february"), True, "REPLICATE_DO_DB", (DO_DB,), "sales"),
    # row 4: ddb 'sales' is irrelevant for a row event -- the Table_map's own db decides
    (4, 0, dict(do_db=["sales"]), R("prices", "march"), False, "REPLICATE_DO_DB", (), None),
    (5, 0, dict(do_db=["db1"]), S("UPDATE_MULTI", "db1", [("db1", "table1"), ("db2", "table2")]),
     True, "REPLICATE_DO_DB", (DO_DB,), "db1"),
    (6, 0, dict(do_db=["db1"]), R("db2", "table2"), False, "REPLICATE_DO_DB", (), None),
    (7, 0, dict(do_db=["db1"]), S("UPDATE_MULTI", "db4", [("db1", "table1"), ("db2", "table2")]),
     False, "REPLICATE_DO_DB", (), None),
    # "ignore_db not matched": no rule decided
    (8, 0, dict(ignore_db=["sales"]), S("UPDATE", "prices", [("sales", "january")]), True, NONE, (), "prices"),
    (9, 0, dict(ignore_db=["sales"]), R("sales", "january"), False, "REPLICATE_IGNORE_DB", (IGNORE_DB,), None),
    (10, 0, ROW10, S("CREATE_TABLE", "db1", [(None, "t2", True), (None, "t1", False)]),
     False, "REPLICATE_IGNORE_DB", (IGNORE_DB,), None),
    (11, 0, ROW10, S("INSERT", "db1", [("db2", "t3")]), False, "REPLICATE_IGNORE_DB", (IGNORE_DB,), None),
    (12, 0, ROW10, R("db2", "t3"), True, "REPLICATE_DO_TABLE", (DO_TABLE,), None),
    (13, 0, ROW10, S("INSERT", "db2", [(None, "t3")]), True, "REPLICATE_DO_TABLE", (DO_TABLE,), None),
    (14, 0, dict(do_db=["db1"], ignore_db=["db1"]), S("INSERT", "db1", [(None, "t1")]),
     True, "REPLICATE_DO_DB", (DO_DB,), None),
    (15, 0, dict(do_db=["db1"], ignore_db=["db2"]), S("INSERT", "db3", [(None, "t1")]),
     False, "REPLICATE_DO_DB", (), None),
    (16, 0, dict(do_db=["db1"]), S("INSERT", "", [("db1", "t1")]), False, "REPLICATE_DO_DB", (), ""),
    (17, 0, dict(ignore_db=["db1"]), S("INSERT", "", [("db1", "t1")]), True, NONE, (), ""),
    (18, 0, dict(do_db=["db1"]), S("BEGIN", "db2"), True, TC, (), None),
    (19, 0, dict(do_db=["db1"]), S("COMMIT", "db2"), True, TC, (), None),
    (20, 0, dict(do_db=["db1"]), S("XA_START", "db2"), False, "REPLICATE_DO_DB", (), None),
    # row 21: issued under USE db9, but the event's default db is the target db1
    (21, 0, dict(do_db=["db1"]), S("CREATE_DB", "db1"), True, "REPLICATE_DO_DB", (DO_DB,), None),
    (22, 0, dict(do_db=["db1"]), S("DROP_DB", "db2"), False, "REPLICATE_DO_DB", (), None),
    (23, 0, dict(wild_do=["db1.%"]), S("CREATE_DB", "db1"), True, "REPLICATE_WILD_DO_TABLE", (WILD_DO,), None),
    (24, 0, dict(wild_do=["db1.t%"]), S("CREATE_DB", "db1"), False, DEFAULT, (), None),
    (25, 0, dict(wild_ignore=["db1.%"]), S("DROP_DB", "db1"), False, "REPLICATE_WILD_IGNORE_TABLE",
     (WILD_IGNORE,), None),
    (26, 0, dict(wild_ignore=["db1.%"]), S("DROP_DB", "db2"), True, DEFAULT, (), None),
    (27, 0, dict(do_db=["db2"], wild_do=["db1.%"]), S("CREATE_DB", "db1"), False, "REPLICATE_DO_DB", (), None),
    (28, 0, TNE, S("UPDATE_MULTI", "test", _u("*t7", "*t4")), False, "REPLICATE_IGNORE_TABLE", (IGNORE_TABLE,), None),
    (29, 0, TNE, S("UPDATE_MULTI", "test", _u("*t7", "*t8", "*t9")), False, DEFAULT, (), None),
    (30, 0, TNE, S("UPDATE_MULTI", "test", _u("t1", "*t7")), False, DEFAULT, (), None),
    (31, 0, TNE, S("UPDATE_MULTI", "test", _u("t1", "t2", "t3", "*t5")), False, "REPLICATE_IGNORE_TABLE",
     (IGNORE_TABLE,), None),
    (32, 0, TNE, S("UPDATE_MULTI", "test", _u("*t4", "*t1", "*t2", "*t3")), False, "REPLICATE_IGNORE_TABLE",
     (IGNORE_TABLE,), None),
    (33, 0, TNE, S("UPDATE_MULTI", "test", _u("*t1", "*t4")), True, "REPLICATE_DO_TABLE", (DO_TABLE,), None),
    (34, 0, TNE, S("UPDATE_MULTI", "test", _u("t4", "*t1", "*t5", "*t6")), True, "REPLICATE_DO_TABLE",
     (DO_TABLE,), None),
    (35, 0, TNE, S("UPDATE_MULTI", "test", _u("*t7", "*t1")), True, "REPLICATE_DO_TABLE", (DO_TABLE,), None),
    (36, 0, TNE, S("UPDATE_MULTI", "test", _u("*t7", "*t1", "*t4", "*t2")), True, "REPLICATE_DO_TABLE",
     (DO_TABLE,), None),
    (37, 0, TNE, S("UPDATE_MULTI", "test", _u("*t7", "*t4", "*t1", "*t2")), False, "REPLICATE_IGNORE_TABLE",
     (IGNORE_TABLE,), None),
    (38, 0, dict(ignore_table=["db.t1"]), S("INSERT", "db", [(None, "t2")]), True, DEFAULT, (), None),
    # INSERT INTO t1 SELECT * FROM t2 -> [t1 updating, t2 read]
    (39, 0, dict(do_table=["db.t1"]), S("INSERT_SELECT", "db", [(None, "t1", True), (None, "t2", False)]),
     True, "REPLICATE_DO_TABLE", (DO_TABLE,), None),
    (40, 0, dict(ignore_table=["db.t2"]), S("INSERT_SELECT", "db", [(None, "t1", True), (None, "t2", False)]),
     True, DEFAULT, (), None),
    (41, 0, dict(do_table=["db.t1"]), S("DROP_TABLE", "db", [(None, "tmp2")], drop_temporary_if_exists=True),
     True, EXEMPT, (), None),
    (42, 0, dict(do_table=["db.t1"]), S("DROP_TABLE", "db", [(None, "tmp2")]), False, DEFAULT, (), None),
    (43, 0, dict(wild_ignore=["mysql.%"]), S("OTHER", "test"), True, NONE, (), None),    # GRANT
    (44, 0, dict(do_table=["db.t1"]), S("OTHER", "db"), True, NONE, (), None),            # CREATE PROCEDURE
    # row 45: the table prints ddb 'db1 (target)', but the target of CREATE DATABASE db11 is db11 (§5 inputs;
    # cases.md MSF-4 logs it with db: db11); with ddb db1 the verdict would be APPLY.
    (45, 0, MSF1, S("CREATE_DB", "db11"), False, "REPLICATE_DO_DB", (), None),
    (46, 0, MSF1, R("db1", "t11"), True, "REPLICATE_WILD_DO_TABLE", (DO_DB, WILD_DO), None),
    (47, 0, MSF1, R("db1", "t2"), False, DEFAULT, (DO_DB,), None),
    (48, 0, MSF3, S("CREATE_TABLE", "db333", [("db333", "t1")]), False, "REPLICATE_WILD_IGNORE_TABLE",
     (WILD_IGNORE,), None),
    (49, 0, MSF3, S("CREATE_TABLE", "db3", [("db3", "t2")]), True, DEFAULT, (), None),
    # row 50: the rewrite does not decide a verdict (no filtering rule at all) -> NONE; it moves the counter
    (50, 0, dict(rewrite=[("db4", "db44")]), S("CREATE_TABLE", "db4", [("db4", "t4")]), True, NONE, (REWRITE,),
     "db44"),
    (51, 0, dict(do_table=["db5.t1"]), S("CREATE_TABLE", "db55", [("db55", "t1")]), False, DEFAULT, (), None),
    (52, 0, dict(ignore_table=["db6.t1"]), R("db66", "t1"), True, DEFAULT, (), None),
    (53, 0, dict(rewrite=[("db1", "db2")], do_db=["db1"]), S("INSERT", "db1", [(None, "t1")]),
     False, "REPLICATE_DO_DB", (REWRITE,), "db2"),
    (54, 0, dict(rewrite=[("db1", "db2")], do_db=["db2"]), R("db1", "t1"), True, "REPLICATE_DO_DB",
     (REWRITE, DO_DB), "db2"),
    (55, 0, dict(rewrite=[("db1", "db2")], do_table=["db2.t1"]), S("INSERT", "db1", [(None, "t1")]),
     True, "REPLICATE_DO_TABLE", (REWRITE, DO_TABLE), "db2"),
    (56, 0, dict(rewrite=[("db1", "db2")], do_table=["db2.t1"]), S("INSERT", "db3", [("db1", "t1")]),
     False, DEFAULT, (), "db3"),
    (57, 0, dict(rewrite=[("a", "b"), ("a", "c")]), R("a", "t"), True, NONE, (REWRITE,), "b"),
    (58, 0, dict(rewrite=[("a", "b"), ("b", "c")]), R("a", "t"), True, NONE, (REWRITE,), "b"),
    (59, 0, dict(wild_do=["my\\_own\\%db.%"]), R("my_own%db", "t"), True, "REPLICATE_WILD_DO_TABLE",
     (WILD_DO,), None),
    (60, 0, dict(wild_do=["my\\_own\\%db.%"]), R("my1ownAABCdb", "t"), False, DEFAULT, (), None),
    (61, 0, dict(wild_do=["foo%.bar%"]), R("foo1", "bar2"), True, "REPLICATE_WILD_DO_TABLE", (WILD_DO,), None),
    (62, 0, dict(wild_do=["db_.t1"]), R("db12", "t1"), False, DEFAULT, (), None),
    (63, 0, dict(do_table=["DB1.T1"]), R("db1", "t1"), False, DEFAULT, (), None),
    (64, 1, dict(do_table=["DB1.T1"]), R("Db1", "T1"), True, "REPLICATE_DO_TABLE", (DO_TABLE,), "db1"),
    (65, 0, dict(do_db=["Db1"]), S("UPDATE", "db1", [(None, "t1")]), False, "REPLICATE_DO_DB", (), None),
    (66, 1, dict(do_db=["MyDB"]), R("mydb", "t"), True, "REPLICATE_DO_DB", (DO_DB,), None),
    (67, 0, dict(do_db=["db1"]), S("SET_OPTION", "db1"), True, "REPLICATE_DO_DB", (DO_DB,), None),
    (68, 0, dict(do_table=["db.t1"]), S("DROP_TRIGGER", "db", trigger_table=TableRef("db", "t1", False)),
     True, "REPLICATE_DO_TABLE", (DO_TABLE,), None),
    (69, 0, dict(do_table=["db.t1"]), S("DROP_TRIGGER", "db"), False, TRIGGER_NOT_FOUND, (), None),
]
assert [r[0] for r in SECTION10] == list(range(1, 70))

def _ex10_params():
    for row in SECTION10:
        yield pytest.param(*row[1:], id=str(row[0]))


@pytest.mark.parametrize("row", [pytest.param(r, id=str(r[0])) for r in SECTION10])
def test_section10_verdict(row):
    _, lctn, cfg, event, apply, *_ = row
    assert decide(F(**cfg), event, lctn).apply is apply


@pytest.mark.parametrize("lctn, cfg, event, apply, decided_by, hits, database", list(_ex10_params()))
def test_section10_decided_by_and_counters(lctn, cfg, event, apply, decided_by, hits, database):
    d = decide(F(**cfg), event, lctn)
    assert d.apply is apply
    assert d.decided_by == decided_by
    assert d.decided_by in LABELS
    assert hitcount(d) == Counter(hits)
    if database is not None:
        assert d.database == database


def test_section10_row26_wild_rules_consulted_none_matched():
    """Row 26: wild rules were consulted and none matched, with no do rule: DEFAULT applies, no counter moves."""
    d = decide(F(wild_ignore=["db1.%"]), S("DROP_DB", "db2"))
    assert d.apply and d.hits == () and d.decided_by == DEFAULT


def test_section10_row50_table_key_not_rewritten():
    """Row 50: qualified db4.t4 keeps db4 (only the default db is rewritten): with a do_table on db4.t4 the
    statement is applied, a do_table on db44.t4 does not match."""
    f = F(rewrite=[("db4", "db44")], do_table=["db4.t4"])
    assert decide(f, S("CREATE_TABLE", "db4", [("db4", "t4")])).decided_by == "REPLICATE_DO_TABLE"
    f = F(rewrite=[("db4", "db44")], do_table=["db44.t4"])
    d = decide(f, S("CREATE_TABLE", "db4", [("db4", "t4")]))
    assert (d.apply, d.decided_by, hitcount(d)) == (False, DEFAULT, Counter([REWRITE]))


def test_section10_row68_unqualified_trigger_table_resolves_to_ddb():
    f = F(do_table=["db.t1"])
    assert decide(f, S("DROP_TRIGGER", "db", trigger_table=TableRef(None, "t1", False))).decided_by == \
        "REPLICATE_DO_TABLE"
    assert not decide(f, S("DROP_TRIGGER", "db", trigger_table=TableRef("db", "t2"))).apply


# ================================================================ 2. §7 counters and cases.md scenarios

def run(filters: Filters, events, lctn: int = 0):
    """Feed (event, expected apply) pairs; return the filters with counters added (the applier's bookkeeping).

    The slot counters are cross-checked against a plain sum of Decision.hits per FilterType."""
    total: Counter = Counter()
    for i, (ev, expected) in enumerate(events):
        d = decide(filters, ev, lctn)
        assert d.apply is expected, (i, ev, d)
        total.update(d.hits)
        filters = filters.add_counts(Counter(d.hits))
    assert {t.value: n for t, n in total.items()} == {k: v for k, v in counters(filters).items() if v}
    return filters


def counters(f: Filters) -> dict:
    """COUNTER per configured type (the P_S rows of the channel)."""
    return {t.value: f[t].counter for t, _ in f.rows()}


GLOBAL_IGNORE = dict(ignore_table=["global_db.t1"])      # MSF-1 copies this global filter into every channel

MSF4 = {
    "channel_1": (dict(GLOBAL_IGNORE, do_db=["db1"], wild_do=["db%.t1%"]), [
        (S("CREATE_DB", "db1"), True),
        (S("CREATE_DB", "db11"), False),
        (S("CREATE_DB", "db111"), False),
        (S("CREATE_TABLE", "db1", [("db1", "t1")]), True),
        (S("BEGIN", "db1"), True),
        (R("db1", "t1"), True),
        (S("CREATE_TABLE", "db1", [("db1", "t11")]), True),
        (S("BEGIN", "db1"), True),
        (R("db1", "t11"), True),
        (S("CREATE_TABLE", "db1", [("db1", "t2")]), False),
        (S("BEGIN", "db1"), True),
        (R("db1", "t2"), False),
    ], {"REPLICATE_DO_DB": 7, "REPLICATE_IGNORE_TABLE": 0, "REPLICATE_WILD_DO_TABLE": 4}),
    "channel_3": (dict(GLOBAL_IGNORE, ignore_db=["db33"], wild_ignore=["db%.t1%"]), [
        (S("CREATE_DB", "db3"), True),
        (S("CREATE_DB", "db33"), False),
        (S("CREATE_DB", "db333"), True),
        (S("CREATE_TABLE", "db3", [("db3", "t1")]), False),
        (R("db3", "t1"), False),
        (S("CREATE_TABLE", "db3", [("db3", "t11")]), False),
        (S("CREATE_TABLE", "db3", [("db3", "t2")]), True),
        (R("db3", "t2"), True),
        (S("CREATE_TABLE", "db333", [("db333", "t1")]), False),
        (R("db333", "t1"), False),
    ], {"REPLICATE_IGNORE_DB": 1, "REPLICATE_IGNORE_TABLE": 0, "REPLICATE_WILD_IGNORE_TABLE": 5}),
    "channel_4": (dict(GLOBAL_IGNORE, rewrite=[("db4", "db44")]), [
        (S("CREATE_DB", "db4"), True),
        (S("CREATE_TABLE", "db4", [("db4", "t4")]), True),
    ], {"REPLICATE_IGNORE_TABLE": 0, "REPLICATE_REWRITE_DB": 1}),
    "channel_5": (dict(GLOBAL_IGNORE, do_table=["db5.t1"]), [
        (S("CREATE_DB", "db5"), True),
        (S("CREATE_DB", "db55"), True),
        (S("CREATE_TABLE", "db5", [("db5", "t1")]), True),
        (R("db5", "t1"), True),
        (S("CREATE_TABLE", "db5", [("db5", "t2")]), False),
        (R("db5", "t2"), False),
        (S("CREATE_TABLE", "db55", [("db55", "t1")]), False),
        (R("db55", "t1"), False),
    ], {"REPLICATE_DO_TABLE": 2, "REPLICATE_IGNORE_TABLE": 0}),
    # channel_6's own ignore_table replaces the copied global one
    "channel_6": (dict(ignore_table=["db6.t1"]), [
        (S("CREATE_DB", "db6"), True),
        (S("CREATE_DB", "db66"), True),
        (S("CREATE_TABLE", "db6", [("db6", "t1")]), False),
        (R("db6", "t1"), False),
        (S("CREATE_TABLE", "db6", [("db6", "t2")]), True),
        (R("db6", "t2"), True),
        (S("CREATE_TABLE", "db66", [("db66", "t1")]), True),
        (R("db66", "t1"), True),
    ], {"REPLICATE_IGNORE_TABLE": 2}),
}


@pytest.mark.parametrize("channel", sorted(MSF4))
def test_msf4_counters(channel):
    cfg, events, expected = MSF4[channel]
    assert counters(run(F(**cfg), events)) == expected


@pytest.mark.parametrize("channel", sorted(MSF4))
def test_msf4_counters_without_global_copy(channel):
    """§7's worked check names only the per-channel rules; the copied global ignore_table changes nothing."""
    cfg, events, expected = MSF4[channel]
    cfg = {k: v for k, v in cfg.items() if v != GLOBAL_IGNORE["ignore_table"]}
    expected = {k: v for k, v in expected.items() if k != "REPLICATE_IGNORE_TABLE" or channel == "channel_6"}
    assert counters(run(F(**cfg), events)) == expected


TNE_EVENTS = [
    (S("CREATE_TABLE", "test", _u("*t1")), True),
    (S("CREATE_TABLE", "test", _u("*t4")), False),
    (S("CREATE_TABLE", "test", _u("*t7")), False),
    (S("UPDATE_MULTI", "test", _u("*t7", "*t4")), False),
    (S("UPDATE_MULTI", "test", _u("*t7", "*t8", "*t9")), False),
    (S("UPDATE_MULTI", "test", _u("t1", "*t4")), False),
    (S("UPDATE_MULTI", "test", _u("t1", "*t7")), False),
    (S("UPDATE_MULTI", "test", _u("t1", "t2", "t3", "*t5")), False),
    (S("UPDATE_MULTI", "test", _u("*t4", "*t1")), False),
    (S("UPDATE_MULTI", "test", _u("*t4", "*t1", "*t2", "*t3")), False),
    (S("UPDATE_MULTI", "test", _u("*t7", "*t4", "*t1", "*t2")), False),
    (S("UPDATE_MULTI", "test", _u("*t7", "*t8", "*t4", "*t1")), False),
    (S("UPDATE_MULTI", "test", _u("*t1", "t4")), True),
    (S("UPDATE_MULTI", "test", _u("*t1", "*t7")), True),
    (S("UPDATE_MULTI", "test", _u("*t7", "*t1")), True),
    (S("UPDATE_MULTI", "test", _u("*t7", "t4", "t5", "*t3")), True),
    (S("UPDATE_MULTI", "test", _u("*t1", "*t4")), True),
    (S("UPDATE_MULTI", "test", _u("t4", "*t1", "*t5", "*t6")), True),
    (S("UPDATE_MULTI", "test", _u("*t7", "*t1", "*t4", "*t2")), True),
]


def test_tne_counters():
    assert counters(run(F(**TNE), TNE_EVENTS)) == {"REPLICATE_DO_TABLE": 8, "REPLICATE_IGNORE_TABLE": 8}


def test_man_ex197_counters():
    events = [
        (S("CREATE_TABLE", "db1", [(None, "t2", True), (None, "t1", False)]), False),   # CREATE TABLE t2 LIKE t1
        (S("INSERT", "db1", [("db2", "t3")]), False),
        (R("db2", "t3"), True),
        (S("INSERT", "db2", [(None, "t3")]), True),
    ]
    assert counters(run(F(**ROW10), events)) == {"REPLICATE_IGNORE_DB": 2, "REPLICATE_DO_TABLE": 2}


def test_man_dodb_counters():
    events = [
        (S("UPDATE", "prices", [("sales", "january")]), False),
        (R("sales", "february"), True),
        (R("prices", "march"), False),
        (S("UPDATE_MULTI", "db4", [("sales", "t1"), ("db2", "t2")]), False),
        (S("UPDATE_MULTI", "sales", [("sales", "t1"), ("db2", "t2")]), True),
        (S("INSERT", "", [("sales", "t1")]), False),
        (S("INSERT", None, [("sales", "t1")]), False),          # NULL default db is ''
        (S("BEGIN", "prices"), True),
        (S("COMMIT", "prices"), True),
    ]
    # ch2 copies the global do_db; the default channel's own ignore_db is never consulted next to a do_db
    assert counters(run(F(do_db=["sales"]), events)) == {"REPLICATE_DO_DB": 2}
    assert counters(run(F(do_db=["sales"], ignore_db=["other"]), events)) == {
        "REPLICATE_DO_DB": 2, "REPLICATE_IGNORE_DB": 0}


def test_man_startup_verdicts():
    ch1 = F(do_db=["db2"], ignore_db=["db4"], wild_do=["db6.t1%"])
    ch2 = F(do_db=["db1", "db3"], ignore_db=["db5"])
    f1 = run(ch1, [(R("db2", "t1x"), False), (R("db2", "t1"), False), (R("db1", "t1"), False)])
    assert counters(f1) == {"REPLICATE_DO_DB": 2, "REPLICATE_IGNORE_DB": 0, "REPLICATE_WILD_DO_TABLE": 0}
    f2 = run(ch2, [(R("db3", "t9"), True), (R("db2", "t9"), False)])
    assert counters(f2) == {"REPLICATE_DO_DB": 1, "REPLICATE_IGNORE_DB": 0}


def test_man_resetall_counters():
    f = run(F(do_db=["db1"], ignore_table=["db1.t9"]), [(R("db1", "t9"), False), (R("db1", "t8"), True)])
    assert counters(f) == {"REPLICATE_DO_DB": 2, "REPLICATE_IGNORE_TABLE": 1}


@pytest.mark.parametrize("lctn, verdicts, expected", [
    (0, [True, False, False, False], {"REPLICATE_DO_TABLE": 1, "REPLICATE_WILD_IGNORE_TABLE": 1}),
    (1, [True, True, False, False], {"REPLICATE_DO_TABLE": 2, "REPLICATE_WILD_IGNORE_TABLE": 2}),
    (2, [True, True, False, False], {"REPLICATE_DO_TABLE": 2, "REPLICATE_WILD_IGNORE_TABLE": 2}),
])
def test_lctn_scenario(lctn, verdicts, expected):
    rows = [R("DB1", "T1"), R("db1", "t1"), R("Logs2024", "x"), R("logs2024", "x")]
    f = run(F(do_table=["DB1.T1"], wild_ignore=["Logs%.%"]), list(zip(rows, verdicts)), lctn)
    assert counters(f) == expected
    # the rules keep their spelling
    assert f.values(DO_TABLE) == ("DB1.T1",) and f.values(WILD_IGNORE) == ("Logs%.%",)


# ================================================================ 3. targeted examples

@pytest.mark.parametrize("cmd, counted", [
    ("INSERT", True), ("CREATE_TABLE", True), ("ALTER_DB", True), ("XA_START", True), ("XA_PREPARE", True),
    ("SET_OPTION", True), ("OTHER", True),
    ("CREATE_DB", False), ("DROP_DB", False), ("BEGIN", False), ("COMMIT", False),
    # step 0: all transaction control returns before anything is counted
    ("SAVEPOINT", False), ("ROLLBACK", False), ("ROLLBACK_TO_SAVEPOINT", False),
])
@pytest.mark.parametrize("cfg", [{}, dict(do_db=["nothere"]), dict(do_db=["b"]), dict(do_table=["x.y"])])
def test_rewrite_counter_statement_commands(cmd, counted, cfg):
    """§4: +1 per statement whose default db was changed, except CREATE/DROP DATABASE, BEGIN, COMMIT;
    counted whether the statement is then applied or filtered."""
    d = decide(F(rewrite=[("a", "b")], **cfg), S(cmd, "a", [(None, "t")]))
    assert (REWRITE in d.hits) is counted
    assert d.hits.count(REWRITE) <= 1


def test_rewrite_counter_once_per_statement_many_tables():
    d = decide(F(rewrite=[("a", "b")], ignore_table=["b.t9"]),
               S("UPDATE_MULTI", "a", [(None, "t1"), (None, "t2"), ("a", "t3")]))
    assert d.hits == (REWRITE,)


def test_rewrite_counter_row_even_when_filtered():
    d = decide(F(rewrite=[("a", "b")], do_db=["zzz"]), R("a", "t"))
    assert (d.apply, d.decided_by, d.hits, d.database) == (False, "REPLICATE_DO_DB", (REWRITE,), "b")


def test_identity_rewrite_and_unmatched_rewrite_do_not_count():
    for ev in (R("a", "t"), S("INSERT", "a", [(None, "t")]), S("ALTER_DB", "a")):
        assert REWRITE not in decide(F(rewrite=[("a", "a"), ("a", "b")]), ev).hits
        assert decide(F(rewrite=[("a", "a"), ("a", "b")]), ev).database == "a"
        assert REWRITE not in decide(F(rewrite=[("x", "y")]), ev).hits


def test_rewrite_lctn1_folds_from_and_keeps_target_spelling():
    """§2: with lctn != 0 the event db is lower-cased before the rewrite lookup; the target is used as
    configured. A rule (a, A) therefore does change the string and counts (spec §4: 'string differs')."""
    f = F(rewrite=[("DB1", "Target")])
    for ev in (R("db1", "t"), S("INSERT", "Db1", [(None, "t")])):
        d = decide(f, ev, 1)
        assert d.database == "Target" and REWRITE in d.hits
        assert decide(f, ev, 0).database != "Target"
    assert rewrite_db(f, "DB1", 1) == "Target"
    assert rewrite_db(f, "DB1", 0) == "Target"
    assert rewrite_db(f, "db1", 0) == "db1"
    assert rewrite_db(f, None, 1) is None
    assert REWRITE in decide(F(rewrite=[("a", "A")]), R("a", "t"), 1).hits
    assert REWRITE not in decide(F(rewrite=[("A", "a")]), R("A", "t"), 1).hits


def test_rewrite_then_do_table_uses_rewritten_db_in_rows():
    f = F(rewrite=[("db1", "db2")], do_table=["db2.t1"])
    assert decide(f, R("db1", "t1")).decided_by == "REPLICATE_DO_TABLE"
    assert not decide(f, R("db2", "t2")).apply


@pytest.mark.parametrize("cmd", sorted(["XA_START", "XA_END", "XA_COMMIT", "XA_ROLLBACK"]))
def test_xa_statements_do_not_count_db_rules(cmd):
    d = decide(F(do_db=["db1"]), S(cmd, "db1"))
    assert d.apply and d.decided_by == "REPLICATE_DO_DB" and d.hits == ()
    d = decide(F(ignore_db=["db1"]), S(cmd, "db1"))
    assert not d.apply and d.decided_by == "REPLICATE_IGNORE_DB" and d.hits == ()


def test_xa_prepare_counts_db_rules():
    assert decide(F(do_db=["db1"]), S("XA_PREPARE", "db1")).hits == (DO_DB,)
    assert decide(F(ignore_db=["db1"]), S("XA_PREPARE", "db1")).hits == (IGNORE_DB,)


def test_row_event_in_xa_filtered_raises():
    with pytest.raises(MySQLError) as e:
        decide(F(do_db=["db1"]), R("db2", "t", in_xa=True))
    assert e.value.name == "ER_XA_REPLICATION_FILTERS"
    assert decide(F(do_db=["db1"]), R("db1", "t", in_xa=True)).apply


@pytest.mark.parametrize("cmd", sorted(TRANSACTION_CONTROL))
def test_transaction_control_lowercase_command(cmd):
    d = decide(F(do_db=["x"], do_table=["x.y"]), S(cmd.lower(), "zzz"))
    assert d == Decision(True, TC)


def test_no_updated_table_is_skipped_only_when_table_rules_on():
    ev = S("UPDATE_MULTI", "db", [(None, "t1", False), (None, "t2", False)])
    d = decide(F(ignore_table=["x.y"]), ev)
    assert (d.apply, d.decided_by, d.hits) == (False, NO_UPDATED_TABLE, ())
    assert decide(F(do_db=["db"]), ev).apply            # table rules off: the table list is never read
    assert decide(Filters(), ev).decided_by == NONE


def test_exempt_statements_still_pass_db_rules():
    """§5 notes: SET and DROP TEMPORARY TABLE IF EXISTS skip step 5 but not step 2."""
    ev = S("DROP_TABLE", "db2", [(None, "tmp")], drop_temporary_if_exists=True)
    d = decide(F(do_db=["db1"], do_table=["db1.x"]), ev)
    assert (d.apply, d.decided_by) == (False, "REPLICATE_DO_DB")
    d = decide(F(do_db=["db2"], do_table=["db1.x"]), ev)
    assert (d.apply, d.decided_by, d.hits) == (True, EXEMPT, (DO_DB,))
    d = decide(F(ignore_table=["db2.tmp"]), S("SET_OPTION", "db2", [("db2", "tmp")]))
    assert (d.apply, d.decided_by) == (True, EXEMPT)
    d = decide(F(ignore_table=["db2.tmp"]), S("INSERT", "db2", [("db2", "tmp")], in_stored_program=True))
    assert (d.apply, d.decided_by) == (True, EXEMPT)


def test_drop_trigger_not_found_even_without_rules():
    """§5 step 4 is not gated on table rules: a trigger unknown on the replica is skipped silently."""
    d = decide(Filters(), S("DROP_TRIGGER", "db"))
    assert (d.apply, d.decided_by, d.hits) == (False, TRIGGER_NOT_FOUND, ())
    # ... but after the db rules, which are checked (and counted) first
    assert decide(F(do_db=["x"]), S("DROP_TRIGGER", "db")).decided_by == "REPLICATE_DO_DB"
    d = decide(F(do_db=["db"]), S("DROP_TRIGGER", "db"))
    assert (d.decided_by, d.hits) == (TRIGGER_NOT_FOUND, (DO_DB,))
    assert decide(Filters(), S("DROP_TRIGGER", "db", trigger_table=TableRef("db", "t"))).decided_by == NONE


def test_database_statement_wild_rules_only_without_db_rules():
    """§5 step 3: the wild fallback only runs when there are no do_db/ignore_db rules; do/ignore_table never."""
    assert decide(F(do_table=["db1.t1"]), S("CREATE_DB", "db9")).apply
    assert decide(F(ignore_table=["db1.t1"]), S("DROP_DB", "db1")).apply
    assert decide(F(ignore_db=["other"], wild_do=["db1.t%"]), S("CREATE_DB", "db1")).apply
    # wild_do checked before wild_ignore; ALTER DATABASE too
    d = decide(F(wild_do=["db1.%"], wild_ignore=["db1.%"]), S("ALTER_DB", "db1"))
    assert (d.apply, d.decided_by, d.hits) == (True, "REPLICATE_WILD_DO_TABLE", (WILD_DO,))
    d = decide(F(wild_do=["x.%"], wild_ignore=["db1.%"]), S("ALTER_DB", "db1"))
    assert (d.apply, d.decided_by, d.hits) == (False, "REPLICATE_WILD_IGNORE_TABLE", (WILD_IGNORE,))
    # the key is the rewritten db
    d = decide(F(rewrite=[("a", "db1")], wild_do=["db1.%"]), S("CREATE_DB", "a"))
    assert (d.apply, d.hits) == (True, (WILD_DO,))      # CREATE DATABASE: rewrite not counted


def test_non_database_statement_without_tables_ignores_wild_rules():
    assert decide(F(wild_do=["db1.t%"]), S("OTHER", "db1")).apply
    assert decide(F(wild_ignore=["%.%"]), S("CREATE_VIEW", "db1")).apply


def test_first_matching_rule_value_reported():
    f = F(wild_do=["x.%", "db%.t%", "db1.%"])
    d = decide(f, R("db1", "t1"))
    assert d.rule == "db%.t%"
    assert decide(F(do_db=["a", "DB", "db"]), R("db", "t"), 1).rule == "DB"


def test_statement_event_helper():
    ev = statement_event("drop_temporary_table_if_exists", "db", [TableRef(None, "tmp")])
    assert ev.drop_temporary_if_exists and ev.command == "DROP_TABLE"
    assert decide(F(do_table=["db.t1"]), ev).decided_by == EXEMPT
    assert statement_event("DROP_TRIGGER", "db", []).trigger_table is None
    assert statement_event("drop_trigger", "db", [TableRef("db", "t1")]).trigger_table == TableRef("db", "t1")
    assert decide(F(do_table=["db.t1"]), statement_event("DROP_TRIGGER", "db", [TableRef("db", "t1")])).apply
    assert statement_event(None, None).command == "OTHER"


# ================================================================ 4. hypothesis invariants

HOSTILE = "aAbBzZ019 '\"`\\,.%_-$#éÉßΣσ€😀\x00\n"
POOL = ["db1", "DB1", "Db1", "db2", "t1", "T1", "t", "", "a.b", "%", "_", "x'y", "`q`", "a\\", "é", "É", "db1.",
        "d,b"]
name = st.one_of(st.sampled_from(POOL), st.text(HOSTILE, max_size=5))
ascii_name = st.one_of(st.sampled_from([p for p in POOL if p.isascii()]),
                       st.text("aAbBzZ019 '\"`\\,.%_-", max_size=5))
pattern_part = st.one_of(name, st.sampled_from(["%", "_", "db%", "t_", "\\%", "\\_", "\\\\", "%\\"]))
pattern = st.builds(lambda a, b: a + "." + b, pattern_part, pattern_part)
table_rule = st.builds(lambda a, b: a + "." + b, name, name)
lctn_s = st.sampled_from([0, 1, 2])


def filters_strategy(names=name, patterns=pattern, tables=table_rule):
    lists = dict(
        do_db=st.lists(names, max_size=2), ignore_db=st.lists(names, max_size=2),
        do_table=st.lists(tables, max_size=2), ignore_table=st.lists(tables, max_size=2),
        wild_do=st.lists(patterns, max_size=2), wild_ignore=st.lists(patterns, max_size=2),
        rewrite=st.lists(st.tuples(names, names), max_size=2))
    # most examples leave most types empty so each rule type gets exercised alone and in pairs
    return st.fixed_dictionaries({}, optional={k: v for k, v in lists.items()}).map(lambda cfg: F(**cfg))


# a tiny name space so that rules and events collide often
small = st.sampled_from(["a", "b", "A", ""])
small_filters = filters_strategy(
    small, st.builds(lambda a, b: a + "." + b, st.sampled_from(["a", "b", "%", "_", "A"]),
                     st.sampled_from(["a", "b", "%", "_", "B"])),
    st.builds(lambda a, b: a + "." + b, small, small))
filters_s = st.one_of(filters_strategy(), small_filters)
tableref_s = st.builds(TableRef, st.one_of(st.none(), name), name, st.booleans())
non_tc_commands = sorted(COMMANDS - TRANSACTION_CONTROL)
small_tref = st.builds(TableRef, st.one_of(st.none(), small), small, st.booleans())
stmt_s = st.one_of(*[st.builds(
    StatementEvent, st.sampled_from(non_tc_commands), st.one_of(st.none(), nm),
    st.lists(tr, max_size=4).map(tuple), st.booleans(), st.booleans(),
    st.one_of(st.none(), tr)) for nm, tr in ((name, tableref_s), (small, small_tref))])
row_s = st.one_of(st.builds(RowEvent, name, name), st.builds(RowEvent, small, small))
event_s = st.one_of(stmt_s, row_s)

PROP = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


def sig(d: Decision):
    """The observable outcome, hits as a multiset (their order is not specified)."""
    return d.apply, d.decided_by, d.rule, Counter(d.hits), d.database


@PROP
@given(filters_s, event_s, lctn_s)
def test_decide_never_raises_and_is_well_formed(f, ev, lctn):
    d = decide(f, ev, lctn)
    assert isinstance(d.apply, bool)
    assert d.decided_by in LABELS
    c = Counter(d.hits)
    assert all(n == 1 for n in c.values())                         # each counter at most +1 per event
    assert not (c[DO_DB] and c[IGNORE_DB])
    assert sum(c[t] for t in TABLE_TYPES) <= 1                     # one table-rule decision
    if d.decided_by in {t.value for t in T}:
        dtype = T(d.decided_by)
        assert dtype is not REWRITE                                # rewrite never decides a verdict
        if dtype in TABLE_TYPES:
            assert c[dtype] == 1 and d.rule is not None
            assert d.apply is (dtype in (DO_TABLE, WILD_DO))
        if dtype is IGNORE_DB:
            assert not d.apply and d.rule is not None
    else:
        assert d.rule is None
        assert not any(c[t] for t in TABLE_TYPES)                  # no counter for a default / label
    if d.decided_by == DEFAULT:
        assert f.table_rules_on
    if d.decided_by in (NO_UPDATED_TABLE, TRIGGER_NOT_FOUND):
        assert not d.apply
    if d.decided_by == EXEMPT:
        assert d.apply
    # the effective mode never raises and never counts
    e = decide(f, ev, lctn, mode="effective_database")
    assert e.decided_by in LABELS and e.hits == ()


@PROP
@given(filters_s, st.sampled_from(sorted(TRANSACTION_CONTROL)), st.one_of(st.none(), name),
       st.lists(tableref_s, max_size=3), lctn_s)
def test_transaction_control_always_applies_without_hits(f, cmd, ddb, tables, lctn):
    for ev in (S(cmd, ddb, ()), StatementEvent(cmd, ddb, tuple(tables)), StatementEvent(cmd.lower(), ddb)):
        d = decide(f, ev, lctn)
        assert d.apply and d.decided_by == TC and d.hits == ()


@PROP
@given(event_s, lctn_s)
def test_no_rules_everything_applies(ev, lctn):
    d = decide(Filters(), ev, lctn)
    if isinstance(ev, StatementEvent) and ev.command == "DROP_TRIGGER" and ev.trigger_table is None:
        assert (d.apply, d.decided_by) == (False, TRIGGER_NOT_FOUND)    # §5 step 4, not a filter rule
    else:
        assert (d.apply, d.decided_by, d.hits) == (True, NONE, ())


@PROP
@given(st.lists(st.tuples(name, name), min_size=1, max_size=3), event_s, lctn_s)
def test_rewrite_only_never_filters(pairs, ev, lctn):
    d = decide(F(rewrite=pairs), ev, lctn)
    if isinstance(ev, StatementEvent) and ev.command == "DROP_TRIGGER" and ev.trigger_table is None:
        return
    assert d.apply and d.decided_by == NONE and set(d.hits) <= {REWRITE}


def _rewritten(f: Filters, db: str, lctn: int) -> str:
    """Spec §4 independently: first pair whose folded `from` equals the folded db."""
    db = fold(db, lctn)
    for src, dst in f.values(REWRITE):
        if fold(src, lctn) == db:
            return dst
    return db


def _listed(db: str, values, lctn: int) -> bool:
    return any(fold(v, lctn) == fold(db, lctn) for v in values)


@PROP
@given(filters_s, row_s, lctn_s)
def test_row_ignored_when_do_db_does_not_list_its_rewritten_db(f, ev, lctn):
    assume(f.values(DO_DB))
    new = _rewritten(f, ev.db, lctn)
    d = decide(f, ev, lctn)
    assert d.database == new
    if not _listed(new, f.values(DO_DB), lctn):
        assert (d.apply, d.decided_by) == (False, "REPLICATE_DO_DB")
        assert set(d.hits) <= {REWRITE}
    else:
        assert DO_DB in d.hits and IGNORE_DB not in d.hits          # ignore_db never consulted


@PROP
@given(filters_s, stmt_s, lctn_s)
def test_statement_judged_on_rewritten_default_db_only(f, ev, lctn):
    """§5 step 2: only the (rewritten) default db, never the databases named in the statement."""
    assume(f.values(DO_DB) or f.values(IGNORE_DB))
    new = _rewritten(f, ev.default_db or "", lctn)
    d = decide(f, ev, lctn)
    assert d.database == new
    counted = ev.command not in {"XA_START", "XA_END", "XA_COMMIT", "XA_ROLLBACK"}
    if f.values(DO_DB):
        if not _listed(new, f.values(DO_DB), lctn):
            assert (d.apply, d.decided_by) == (False, "REPLICATE_DO_DB")
        else:
            assert (DO_DB in d.hits) is counted
    elif _listed(new, f.values(IGNORE_DB), lctn):
        assert (d.apply, d.decided_by) == (False, "REPLICATE_IGNORE_DB")
        assert (IGNORE_DB in d.hits) is counted


@PROP
@given(filters_s, event_s, lctn_s)
def test_rewrite_counter_rule(f, ev, lctn):
    """§4: +1 iff the first matching pair changes the string; statements excluding CREATE/DROP DB,
    BEGIN, COMMIT (and the step-0 transaction control)."""
    d = decide(f, ev, lctn)
    if isinstance(ev, RowEvent):
        db, excluded = ev.db, False
    else:
        db, excluded = ev.default_db or "", ev.command in {"CREATE_DB", "DROP_DB"}
    changed = _rewritten(f, db, lctn) != fold(db, lctn)
    assert (REWRITE in d.hits) is (changed and not excluded)
    assert rewrite_db(f, db, lctn) == _rewritten(f, db, lctn)


@PROP
@given(filters_s, st.lists(name, min_size=1, max_size=3), event_s)
def test_identity_rewrite_never_counts_nor_changes_anything(f, identities, ev):
    base = f.configure(REWRITE, (), "STARTUP_OPTIONS", 1)
    with_id = base.configure(REWRITE, tuple((a, a) for a in identities), "STARTUP_OPTIONS", 1)
    assert sig(decide(with_id, ev, 0)) == sig(decide(base, ev, 0))
    lower = base.configure(REWRITE, tuple((a.lower(), a.lower()) for a in identities), "STARTUP_OPTIONS", 1)
    assert REWRITE not in decide(lower, ev, 1).hits


def _add(f: Filters, ftype: FilterType, values) -> Filters:
    return f.configure(ftype, f.values(ftype) + tuple(values), "STARTUP_OPTIONS", 1)


@PROP
@given(filters_s, event_s, lctn_s, st.lists(table_rule, min_size=1, max_size=2), st.lists(pattern, min_size=1,
                                                                                             max_size=2))
def test_adding_ignore_table_rules_never_unignores(f, ev, lctn, tables, patterns):
    if decide(f, ev, lctn).apply:
        return
    assert not decide(_add(f, IGNORE_TABLE, tables), ev, lctn).apply
    assert not decide(_add(f, WILD_IGNORE, patterns), ev, lctn).apply


@PROP
@given(filters_s, event_s, lctn_s, st.lists(name, min_size=1, max_size=2))
def test_adding_ignore_db_never_unignores_outside_database_statements(f, ev, lctn, dbs):
    """True for rows, for non-database statements, and whenever db rules already exist. Not in general:
    see test_adding_ignore_db_can_unignore_a_database_statement."""
    is_db_stmt = isinstance(ev, StatementEvent) and ev.command in DATABASE_COMMANDS
    assume(not is_db_stmt or f.values(DO_DB) or f.values(IGNORE_DB))
    if not decide(f, ev, lctn).apply:
        assert not decide(_add(f, IGNORE_DB, dbs), ev, lctn).apply


def test_adding_ignore_db_can_unignore_a_database_statement():
    """Spec §5 step 3: the wildcard fallback for database statements runs ONLY when there are no do_db /
    ignore_db rules at all, so adding an unrelated ignore_db turns row 24's IGNORE into APPLY."""
    ev = S("CREATE_DB", "db1")
    assert not decide(F(wild_do=["db1.t%"]), ev).apply
    assert decide(F(wild_do=["db1.t%"], ignore_db=["unrelated"]), ev).apply


@PROP
@given(filters_s, event_s, lctn_s)
def test_rule_order_and_duplicates_do_not_change_the_verdict(f, ev, lctn):
    base = decide(f, ev, lctn)
    rev = f
    for t in (DO_DB, IGNORE_DB, DO_TABLE, IGNORE_TABLE, WILD_DO, WILD_IGNORE):
        rev = rev.configure(t, tuple(reversed(f.values(t))), "STARTUP_OPTIONS", 1)
    d = decide(rev, ev, lctn)
    assert (d.apply, d.decided_by, Counter(d.hits), d.database) == \
        (base.apply, base.decided_by, Counter(base.hits), base.database)
    dup = f
    for t in T:
        dup = dup.configure(t, f.values(t) + f.values(t), "STARTUP_OPTIONS", 1)
    assert sig(decide(dup, ev, lctn)) == sig(base)


@PROP
@given(filters_s, stmt_s, lctn_s, st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), name), name),
                                           min_size=1, max_size=3))
def test_read_only_tables_are_invisible(f, ev, lctn, extra):
    """§5.1: tables that are not updated are skipped (as long as the list stays non-empty either way)."""
    assume(ev.tables)
    tables = list(ev.tables)
    for pos, db, n in extra:
        tables.insert(min(pos, len(tables)), TableRef(db, n, False))
    ev2 = StatementEvent(ev.command, ev.default_db, tuple(tables), ev.drop_temporary_if_exists,
                         ev.in_stored_program, ev.trigger_table)
    assert sig(decide(f, ev2, lctn)) == sig(decide(f, ev, lctn))


@PROP
@given(small_filters, st.sampled_from(sorted(set(non_tc_commands) - DATABASE_COMMANDS - {"DROP_TRIGGER"})), small,
       st.lists(small_tref, min_size=1, max_size=3),
       st.lists(small_tref, min_size=1, max_size=3), lctn_s, st.sampled_from(sorted(TABLE_TYPES, key=str)),
       st.booleans())
def test_first_deciding_table_wins(f, cmd, ddb, tables, tail, lctn, ftype, exempt):
    """§5.1: once an updated table matches a rule, the tables after it are irrelevant (whatever they are)."""
    updated = [t for t in tables if t.updating]
    assume(updated)
    t0 = updated[0]
    key = (t0.db if t0.db is not None else _rewritten(f, ddb, lctn)) + "." + t0.name
    f = _add(f, ftype, [key if ftype in (DO_TABLE, IGNORE_TABLE) else _escape(key)])
    ev = S(cmd, ddb, tables, drop_temporary_if_exists=exempt)
    d = decide(f, ev, lctn)
    assert d.decided_by not in (DEFAULT, NO_UPDATED_TABLE)
    ev2 = S(cmd, ddb, tables + tail, drop_temporary_if_exists=exempt)
    assert sig(decide(f, ev2, lctn)) == sig(d)


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _swap(s: str, mask: int) -> str:
    return "".join(c.swapcase() if (mask >> (i % 16)) & 1 else c for i, c in enumerate(s))


ascii_filters = filters_strategy(
    ascii_name,
    st.builds(lambda a, b: a + "." + b, st.one_of(ascii_name, st.sampled_from(["%", "_", "DB%", "T_", "\\%"])),
              st.one_of(ascii_name, st.sampled_from(["%", "_", "t%", "\\_"]))),
    st.builds(lambda a, b: a + "." + b, ascii_name, ascii_name))
ascii_tref = st.builds(TableRef, st.one_of(st.none(), ascii_name), ascii_name, st.booleans())
ascii_event = st.one_of(
    st.builds(RowEvent, ascii_name, ascii_name),
    st.builds(StatementEvent, st.sampled_from(non_tc_commands), st.one_of(st.none(), ascii_name),
              st.lists(ascii_tref, max_size=3).map(tuple), st.booleans(), st.just(False),
              st.one_of(st.none(), ascii_tref)))


def _case_variant(ev, mask):
    if isinstance(ev, RowEvent):
        return RowEvent(_swap(ev.db, mask), _swap(ev.table, mask >> 1))
    tr = lambda t: None if t is None else TableRef(None if t.db is None else _swap(t.db, mask), _swap(t.name, ~mask),
                                                   t.updating)
    return StatementEvent(ev.command, None if ev.default_db is None else _swap(ev.default_db, mask >> 3),
                          tuple(tr(t) for t in ev.tables), ev.drop_temporary_if_exists, ev.in_stored_program,
                          tr(ev.trigger_table))


@PROP
@given(ascii_filters, ascii_event, st.integers(0, 2 ** 16 - 1), st.sampled_from([1, 2]))
def test_lctn1_invariant_under_case_of_event_names(f, ev, mask, lctn):
    d, d2 = decide(f, ev, lctn), decide(f, _case_variant(ev, mask), lctn)
    assert sig(d2) == sig(d)


@PROP
@given(ascii_filters, ascii_event, st.integers(0, 2 ** 16 - 1))
def test_lctn1_invariant_under_case_of_rule_values(f, ev, mask):
    """Rule spelling is irrelevant with lctn=1 -- except a rewrite target, which is used as configured."""
    g = f
    for t in T:
        if t is REWRITE:
            vals = tuple((_swap(a, mask), b) for a, b in f.values(t))
        else:
            vals = tuple(_swap(v, mask) for v in f.values(t))
        g = g.configure(t, vals, "STARTUP_OPTIONS", 1)
    d, d2 = decide(f, ev, 1), decide(g, ev, 1)
    assert (d2.apply, d2.decided_by, Counter(d2.hits), d2.database) == \
        (d.apply, d.decided_by, Counter(d.hits), d.database)


def test_lctn1_case_invariance_greek_sigma():
    """MySQL's utf8mb3_tolower_ci lower-cases each character alone: 'ΑΣ' and 'ασ' are the same name."""
    f = F(do_db=["ασ"])
    assert decide(f, R("ΑΣ", "t"), 1).apply == decide(f, R("ασ", "t"), 1).apply


DML = ["INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD"]


@PROP
@given(filters_s, st.sampled_from(DML), name, name, lctn_s)
def test_statement_and_row_format_coincide_for_single_table_dml(f, cmd, db, table, lctn):
    """Single-table DML on an unqualified table under its own default db: both formats judge db rules on the
    same (rewritten) db and table rules on the same key '<rewritten db>.<table>' (§5 vs §6). This holds with
    rewrite rules and dotted names too; the rewrite counter moves in both (INSERT etc. are not excluded)."""
    stmt = decide(f, S(cmd, db, [(None, table, True)]), lctn)
    row = decide(f, R(db, table), lctn)
    assert sig(stmt) == sig(row)


@PROP
@given(filters_s, st.sampled_from(DML), name, name, name, lctn_s)
def test_qualified_statement_differs_from_row_only_through_db_rules_and_rewrite(f, cmd, ddb, db, table, lctn):
    """A qualified table in a statement: same table key as the row event when no rewrite touches `db`/`ddb`
    and there are no db rules (then only the table rules decide, on the same key)."""
    assume(not f.values(DO_DB) and not f.values(IGNORE_DB) and not f.values(REWRITE))
    stmt = decide(f, S(cmd, ddb, [(db, table, True)]), lctn)
    row = decide(f, R(db, table), lctn)
    assert (stmt.apply, stmt.decided_by, stmt.rule, Counter(stmt.hits)) == \
        (row.apply, row.decided_by, row.rule, Counter(row.hits))


@st.composite
def same_decision_input(draw):
    """(event, a variant `decision_key` says reads the same): the command swapped within its class (any
    case), tables the statement only reads added or dropped (an empty list stays empty, a non-empty one
    non-empty), NULL and ''
    default databases swapped; transaction control with anything else changed."""
    ev = draw(event_s)
    if isinstance(ev, RowEvent):
        return ev, RowEvent(ev.db, ev.table, ev.in_xa)
    cmd = draw(st.sampled_from(sorted(COMMANDS)))
    if cmd in TRANSACTION_CONTROL:
        return (StatementEvent(cmd, ev.default_db, ev.tables),
                StatementEvent(draw(st.sampled_from(sorted(TRANSACTION_CONTROL))).lower(), draw(st.none() | name),
                               draw(st.lists(tableref_s, max_size=3).map(tuple)), draw(st.booleans())))
    ev = StatementEvent(cmd, ev.default_db, ev.tables, ev.drop_temporary_if_exists, ev.in_stored_program,
                        ev.trigger_table)
    same_class = [c for c in sorted(COMMANDS - TRANSACTION_CONTROL)
                  if decision_key(StatementEvent(c))[1] == decision_key(ev)[1]]
    other = draw(st.sampled_from(same_class))
    other = draw(st.sampled_from([other, other.lower(), other.title()]))
    tables = [t for t in ev.tables if t.updating or draw(st.booleans())]
    for _ in range(draw(st.integers(0, 2)) if ev.tables else 0):
        tables.insert(draw(st.integers(0, len(tables))), TableRef(draw(st.none() | name), draw(name), False))
    if ev.tables and not tables:
        tables = [TableRef(draw(st.none() | name), draw(name), False)]
    ddb = {None: "", "": None}.get(ev.default_db, ev.default_db)
    return ev, StatementEvent(other, ddb, tuple(tables), ev.drop_temporary_if_exists, ev.in_stored_program,
                              ev.trigger_table if cmd == "DROP_TRIGGER" else draw(st.none() | tableref_s))


@settings(max_examples=300, deadline=None)
@given(filters_s, same_decision_input(), lctn_s)
def test_events_of_one_decision_key_get_one_decision(f, pair, lctn):
    """The applier decides one event per `decision_key` and gives every event of that key its decision (and
    per-rule hits): equal keys must mean equal decisions, in both modes."""
    a, b = pair
    assert decision_key(a) == decision_key(b)
    for mode in ("mysql", "effective_database"):
        try:
            da = decide(f, a, lctn, mode=mode)
        except MySQLError as e:
            with pytest.raises(MySQLError) as other:
                decide(f, b, lctn, mode=mode)
            assert other.value.code == e.code
            continue
        db = decide(f, b, lctn, mode=mode)
        assert db == da
        assert hit_rules(f, b, db, lctn) == hit_rules(f, a, da, lctn)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.none(), st.sampled_from(sorted(COMMANDS | {"", "OTHER"})),
                 st.sampled_from(["DROP_TRIGGER", DROP_TEMPORARY_IF_EXISTS]), name)
       .flatmap(lambda c: st.sampled_from([c, c.lower(), c.title()]) if c else st.just(c)),
       st.one_of(st.none(), name),
       st.lists(st.builds(TableRef, st.one_of(st.none(), name), name, st.sampled_from([True, False, None])),
                max_size=3))
def test_a_statements_key_without_its_event_is_its_events_key(command, default_db, tables):
    """The applier keys each statement shape by `statement_decision_key`, building the event only for a key not
    decided yet: it must be the event's own key (DROP_TRIGGER and DROP TEMPORARY's pseudo-command included,
    any case, hostile names, a NULL updating flag as the events may hold it)."""
    assert statement_decision_key(command, default_db, tables) == \
        decision_key(statement_event(command, default_db, tables))


tiny_tref = st.builds(TableRef, st.sampled_from([None, "a"]), st.sampled_from(["a", "b"]), st.booleans())
tiny_event = st.one_of(
    st.builds(StatementEvent, st.sampled_from(sorted(COMMANDS)), st.sampled_from([None, "", "a", "A"]),
              st.lists(tiny_tref, max_size=2).map(tuple), st.booleans(), st.booleans(), st.none() | tiny_tref),
    st.builds(RowEvent, st.sampled_from(["a", "A"]), st.sampled_from(["a", "b"]), st.booleans()))


@settings(max_examples=150, deadline=None)
@given(filters_s, st.lists(tiny_event, min_size=20, max_size=40), lctn_s)
def test_decision_key_groups_only_events_decided_alike(f, events, lctn):
    """Events drawn from a tiny space, grouped by `decision_key`: every group decides alike, with the same
    steps that name a rule in its trace (what the lint counts per rule). Unlike the test above this varies
    every field, so a key that forgot one (a flag, the table list being empty) fails here."""
    groups: dict[tuple, list] = {}
    for ev in events:
        groups.setdefault(decision_key(ev), []).append(ev)
    for same in groups.values():
        for mode in ("mysql", "effective_database"):
            got = set()
            for ev in same:
                trace: list = []
                try:
                    d = decide(f, ev, lctn, mode=mode, trace=trace)
                    got.add((d, hit_rules(f, ev, d, lctn),
                             tuple((s.check, s.subject, s.outcome, s.rule) for s in trace if s.rule is not None)))
                except MySQLError as e:
                    got.add(e.code)
            assert len(got) == 1, same


# ================================================================ 5. §9 effective-database mode

EFF = "effective_database"


def test_effective_mode_judges_qualified_names_on_their_own_db():
    f = F(do_db=["sales"])
    ev = S("UPDATE", "prices", [("sales", "january")])             # §10 row 2
    assert not decide(f, ev).apply
    d = decide(f, ev, mode=EFF)
    assert (d.apply, d.decided_by, d.hits) == (True, "REPLICATE_DO_DB", ())
    assert decide(f, R("sales", "january"), mode=EFF).apply
    # §9: "... else APPLY" -- a DO rule only wins over IGNORE rules; alone it filters nothing
    for ev in (S("UPDATE", "sales", [("prices", "march")]), R("prices", "march")):
        d = decide(f, ev, mode=EFF)
        assert (d.apply, d.decided_by, d.database) == (True, NONE, "prices")
    g = F(do_db=["sales"], ignore_db=["prices"])
    assert not decide(g, S("UPDATE", "sales", [("prices", "march")]), mode=EFF).apply
    assert decide(g, S("UPDATE", "prices", [("sales", "march")]), mode=EFF).apply


def test_effective_mode_statement_equals_row():
    f = F(rewrite=[("db1", "db2")], do_db=["db2"])
    for ev in (S("INSERT", "db3", [("db1", "t1")]), S("INSERT", "db1", [(None, "t1")]), R("db1", "t1")):
        d = decide(f, ev, mode=EFF)
        assert (d.apply, d.decided_by, d.database) == (True, "REPLICATE_DO_DB", "db2")
    # MySQL mode judges the statement on its default db instead
    assert not decide(f, S("INSERT", "db3", [("db1", "t1")])).apply


def test_effective_mode_do_before_ignore_and_default_apply():
    f = F(ignore_table=["db.t4"], do_table=["db.t1"])
    # any DO match wins even if an earlier table matches IGNORE (MySQL mode: first table decides)
    ev = S("UPDATE_MULTI", "db", [(None, "t4"), (None, "t1")])
    assert decide(f, ev, mode=EFF).apply
    assert not decide(f, ev).apply
    assert not decide(f, S("UPDATE", "db", [(None, "t4")]), mode=EFF).apply
    # nothing matches -> APPLY (MySQL mode: IGNORE because a do rule exists)
    assert decide(f, S("UPDATE", "db", [(None, "t9")]), mode=EFF).decided_by == NONE
    assert decide(f, R("db", "t9"), mode=EFF).apply
    assert not decide(f, R("db", "t9")).apply
    # read-only tables are not considered
    assert decide(f, S("UPDATE_MULTI", "db", [(None, "t4", False), (None, "t9")]), mode=EFF).apply
    # exact table rules are literal, not patterns
    d = decide(F(do_table=["d_b.t%"]), R("dxb", "tt"), mode=EFF)
    assert (d.apply, d.decided_by) == (True, NONE)
    assert decide(F(do_table=["d_b.t%"]), R("d_b", "t%"), mode=EFF).decided_by == "REPLICATE_DO_TABLE"
    assert decide(F(ignore_table=["d_b.t%"]), R("dxb", "tt"), mode=EFF).apply
    assert not decide(F(ignore_table=["d_b.t%"]), R("d_b", "t%"), mode=EFF).apply


def test_effective_mode_database_statements_and_transaction_control():
    assert decide(F(wild_do=["db1.%"]), S("CREATE_DB", "db1"), mode=EFF).apply
    assert not decide(F(wild_ignore=["db1.%"]), S("DROP_DB", "db1"), mode=EFF).apply
    assert not decide(F(ignore_db=["db1"]), S("DROP_DB", "db1"), mode=EFF).apply
    assert decide(F(ignore_db=["db1"]), S("BEGIN", "db1"), mode=EFF) == Decision(True, TC)


@PROP
@given(filters_s, st.sampled_from(DML + ["UPDATE_MULTI", "CREATE_TABLE"]), name, st.one_of(st.none(), name), name,
       lctn_s)
def test_effective_mode_statement_and_row_agree(f, cmd, ddb, db, table, lctn):
    """§9: the effective db is the explicit db if qualified, else the default db -- in both formats."""
    eff_db = ddb if db is None else db
    stmt = decide(f, S(cmd, ddb, [(db, table, True)]), lctn, mode=EFF)
    row = decide(f, R(eff_db, table), lctn, mode=EFF)
    assert sig(stmt) == sig(row)
    assert stmt.hits == ()


colliding_tref = st.builds(TableRef, st.sampled_from([None, "a", "A"]), st.sampled_from(["a", "b"]), st.booleans())
colliding_event = st.one_of(  # commands of every class the Decider's caches tell apart, on the same few names
    st.builds(StatementEvent, st.sampled_from(["INSERT", "update", "XA_START", "xa_end", "CREATE_DB", "DROP_DB",
                                               "ALTER_DB", "BEGIN", "COMMIT", "DROP_TRIGGER", "SET_OPTION"]),
              st.sampled_from([None, "", "a", "A", "b"]), st.lists(colliding_tref, max_size=2).map(tuple),
              st.booleans(), st.booleans(), st.none() | colliding_tref),
    st.builds(RowEvent, st.sampled_from(["a", "A", "b"]), st.sampled_from(["a", "b"]), st.booleans()))


colliding_filters = filters_strategy(st.sampled_from(["a", "A", "b"]), st.sampled_from(["a.a", "A.%", "_.b", "%.a"]),
                                     st.sampled_from(["a.a", "A.a", "a.b", "A.b"]))


@settings(max_examples=400, deadline=None)
@given(st.one_of(colliding_filters, filters_s), st.lists(st.one_of(colliding_event, event_s), min_size=1, max_size=40),
       lctn_s, st.sampled_from(["mysql", "effective_database"]))
def test_decider_decides_as_decide(f, events, lctn, mode):
    """One Decider (the applier's, caching each command class and default database's steps and each table's
    rules) over many events, hostile names among them: every decision equal to `decide`'s, every refusal the
    same error. Most events share a few names, so its caches answer most of them."""
    decider = Decider(f, Matching(lctn, mode))
    for ev in events:
        try:
            want = decide(f, ev, lctn, mode=mode)
        except MySQLError as e:
            with pytest.raises(MySQLError) as got:
                decider.decide(ev)
            assert got.value.code == e.code
            continue
        assert decider.decide(ev) == want
