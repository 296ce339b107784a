"""rpl_sql.classify: statement text -> (command, kind, global table list) for the §5 decision procedure.

Layout:
  1. spec §10 worked examples: classify(text) -> evaluate event equals the table's event, same verdict
  2. cases.md: every statement event's `cmd`/`tables` reproduced from its `text`
  3. TNE and MAN-EX197 run end to end from the statement texts (verdicts and COUNTERs)
  4. multi-table UPDATE: the hints (table_map_for_update bitmap, columns) and the no-schema rule
  5. commands and kinds, one family at a time
  6. names, comments, case, executable comments
  7. multi-table DELETE, derived tables, CTEs, subqueries
  8. the token reader (sqlglot fallback): forced, and consistent with the sqlglot reader
  9. never crash (hypothesis), bulk INSERT fast path, logging, threads, timing smoke test
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rpl_sql.classify import dispatch as classify_module
from rpl_sql.language.lexer import expand_executable_comments
from rpl_sql.classify import KINDS, StatementInfo, classify
from rpl_sql.filters.evaluate import (COMMANDS, DROP_TEMPORARY_IF_EXISTS, TRANSACTION_CONTROL, RowEvent, StatementEvent,
                              TableRef, decide)
from rpl_sql.filters.rules import Filters
from rpl_sql.server.startup import parse_startup
from tests.support.scenarios import SCENARIOS
from tests.filters.test_evaluate import F, SECTION10

ALL_COMMANDS = COMMANDS | {DROP_TEMPORARY_IF_EXISTS}
TNE_COLUMNS = {f"t{k}": {"id", col} for k, col in enumerate("abcdefghi", 1)}  # t1 has a, t4 has d, ...


def U(name: str, db: str | None = None) -> TableRef:
    """An updated table."""
    return TableRef(db, name, True)


def R(name: str, db: str | None = None) -> TableRef:
    """A table only read."""
    return TableRef(db, name, False)


def tables_of(sql: str, **kw) -> tuple[TableRef, ...]:
    return classify(sql, **kw).tables


def tokens_only(sql: str, columns=None, table_map=None) -> StatementInfo:
    """The token reader alone (what runs when sqlglot cannot parse a statement)."""
    return classify_module.classify_with_hints(sql, classify_module.ColumnHints(columns, table_map), use_sqlglot=False)


def sqlglot_first(sql: str, columns=None) -> StatementInfo:
    return classify_module.classify_with_hints(sql, classify_module.ColumnHints(columns))


# ================================================================ 1. §10 worked examples

TNE_TEXTS = {
    28: "UPDATE t7 LEFT JOIN t4 ON (t4.id=t7.id) SET d=0, g=0 where t7.id=1",
    29: "UPDATE t7 LEFT JOIN (t8, t9) ON (t7.id=t8.id and t7.id=t9.id) SET g=0, h=0, i=0 where t7.id=1",
    30: "UPDATE t1 LEFT JOIN t7 ON (t1.id=t7.id) SET g=0 where t1.id=1",
    31: "UPDATE t1 LEFT JOIN (t2, t3, t5) ON (t1.id=t2.id and t1.id=t3.id and t1.id=t5.id) SET e=0 where t1.id=1",
    32: "UPDATE t4 LEFT JOIN (t1, t2, t3) ON (t1.id=t4.id and t2.id=t4.id and t3.id=t4.id) SET a=0, b=0, c=0, d=0 "
        "where t4.id=1",
    33: "UPDATE t1 LEFT JOIN t4 ON (t1.id=t4.id) SET a=0, d=0 where t1.id=1",
    34: "UPDATE t4 LEFT JOIN (t1, t5, t6) ON (t4.id=t1.id and t4.id=t5.id and t4.id=t6.id) SET a=0, e=0, f=0 "
        "where t4.id=1",
    35: "UPDATE t7 LEFT JOIN t1 ON (t1.id=t7.id) SET a=0, g=0 where t7.id=1",
    36: "UPDATE t7 LEFT JOIN (t1, t4, t2) ON (t7.id=t1.id and t7.id=t4.id and t7.id=t2.id) SET a=0, b=0, d=0, g=0 "
        "where t7.id=1",
    37: "UPDATE t7 LEFT JOIN (t4, t1, t2) ON (t7.id=t4.id and t7.id=t1.id and t7.id=t2.id) SET a=0, b=0, d=0, g=0 "
        "where t7.id=1",
}

# Statement texts for the statement rows of §10 (the table elides values with '…'); row -> (text, default db
# passed to StatementInfo.event: the session's db, which database statements replace by their target).
SECTION10_TEXTS = {
    1: "INSERT INTO t1 VALUES (1)",
    2: "UPDATE sales.january SET amount=amount+1000",
    5: "UPDATE db1.table1, db2.table2 SET db1.table1.c=10, db2.table2.c=20",
    7: "UPDATE db1.table1, db2.table2 SET db1.table1.c=10, db2.table2.c=20",
    8: "UPDATE sales.january SET amount=amount+1000",
    10: "CREATE TABLE t2 LIKE t1",
    11: "INSERT INTO db2.t3 VALUES (1)",
    13: "INSERT INTO t3 VALUES (1)",
    14: "INSERT INTO t1 VALUES (1)",
    15: "INSERT INTO t1 VALUES (1)",
    16: "INSERT INTO db1.t1 VALUES (1)",
    17: "INSERT INTO db1.t1 VALUES (1)",
    18: "BEGIN",
    19: "COMMIT",
    20: "XA START 'x'",
    21: "CREATE DATABASE db1",
    22: "DROP DATABASE db2",
    23: "CREATE DATABASE db1",
    24: "CREATE DATABASE db1",
    25: "DROP DATABASE db1",
    26: "DROP DATABASE db2",
    27: "CREATE DATABASE db1",
    **TNE_TEXTS,
    38: "INSERT INTO t2 VALUES (1)",
    39: "INSERT INTO t1 SELECT * FROM t2",
    40: "INSERT INTO t1 SELECT * FROM t2",
    41: "DROP TEMPORARY TABLE IF EXISTS tmp2",
    42: "DROP TEMPORARY TABLE tmp2",
    43: "GRANT SELECT ON *.* TO u",
    44: "CREATE PROCEDURE p() BEGIN SELECT * FROM t1; END",
    45: "CREATE DATABASE db11",
    48: "CREATE TABLE db333.t1 (c1 int)",
    49: "CREATE TABLE db3.t2 (c1 int)",
    50: "CREATE TABLE db4.t4 (c1 int)",
    51: "CREATE TABLE db55.t1 (c1 int)",
    53: "INSERT INTO t1 VALUES (1)",
    55: "INSERT INTO t1 VALUES (1)",
    56: "INSERT INTO db1.t1 VALUES (1)",
    65: "UPDATE t1 SET a=1",
    67: "SET @a = 1",
    68: "DROP TRIGGER trg",
    69: "DROP TRIGGER trg",
}
SESSION_DB = {21: "db9"}  # row 21: CREATE DATABASE db1 issued under USE db9


def _statement_rows():
    for row in SECTION10:
        if isinstance(row[3], StatementEvent):
            yield pytest.param(row, id=str(row[0]))


def test_every_statement_row_of_section10_has_a_text():
    assert sorted(SECTION10_TEXTS) == [row[0] for row in SECTION10 if isinstance(row[3], StatementEvent)]


@pytest.mark.parametrize("row", list(_statement_rows()))
def test_section10_event_and_verdict_from_text(row):
    n, lctn, cfg, expected, apply, decided_by, hits, _ = row
    info = classify(SECTION10_TEXTS[n], columns=TNE_COLUMNS if n in TNE_TEXTS else None)
    event = info.event(SESSION_DB.get(n, expected.default_db), trigger_table=expected.trigger_table)
    assert event == expected
    d = decide(F(**cfg), event, lctn)
    assert d.apply is apply
    assert Counter(d.hits) == Counter(hits)
    assert d.decided_by == decided_by
    if info.kind == "DATABASE_DDL":
        assert info.database == expected.default_db
    if n in (68, 69):
        assert (info.command, info.trigger, info.trigger_db, info.tables) == ("DROP_TRIGGER", "trg", None, ())


# ================================================================ 2. cases.md statement events


def _case_statements():
    for sid, sc in SCENARIOS.items():
        steps = list(sc.get("steps") or [])
        for k, st_ in enumerate(steps):
            for j, e in enumerate((st_.get("apply") or {}).get("events") or []):
                if e["kind"] == "statement":
                    yield pytest.param(sid, e, id=f"{sid}-{k}-{j}")


CASE_STATEMENTS = list(_case_statements())


def test_cases_md_has_statement_events():
    assert len(CASE_STATEMENTS) >= 50
    assert {p.values[0] for p in CASE_STATEMENTS} >= {"TNE", "MAN-EX197", "MSF-4", "MAN-DODB"}


@pytest.mark.parametrize("sid, e", CASE_STATEMENTS)
def test_cases_md_cmd_and_tables_from_text(sid, e):
    info = classify(e["text"], columns=TNE_COLUMNS if sid == "TNE" else None)
    assert info.command == e["cmd"]
    assert info.tables == tuple(TableRef(t[0], t[1], bool(t[2])) for t in e["tables"])
    if info.kind == "DATABASE_DDL":
        assert info.database == e["db"]
    assert info.method == "sqlglot" or e["cmd"] in ("BEGIN", "COMMIT")


# ================================================================ 3. TNE and MAN-EX197 end to end from the texts


def _startup_filters(sc: dict) -> Filters:
    grouped: dict = {}
    for rule in parse_startup(sc["startup"]["options"]).rules:
        assert rule.channel is None
        grouped.setdefault(rule.ftype, []).append(rule.value)
    f = Filters()
    for ftype, values in grouped.items():
        f = f.configure(ftype, tuple(values), "STARTUP_OPTIONS", 1)
    return f


def _run_from_texts(sid: str, classify_kw) -> tuple[list, dict]:
    """Feed the scenario's events (statements via classify(text) only); return (mismatches, counters)."""
    sc = SCENARIOS[sid]
    f = _startup_filters(sc)
    total: Counter = Counter()
    wrong = []
    for st_ in sc["steps"]:
        for e in (st_.get("apply") or {}).get("events") or []:
            if e["kind"] == "row":
                ev = RowEvent(*e["table"])
            else:
                ev = classify(e["text"], **classify_kw(e)).event(e["db"])
            d = decide(f, ev)
            total.update(d.hits)
            if d.apply is not (e["expect"] == "apply"):
                wrong.append(e.get("text", e.get("table")))
    return wrong, {t.value: n for t, n in total.items()}


def _expected_counters(sid: str) -> dict:
    last = [s["expect"]["filters"] for s in SCENARIOS[sid]["steps"] if "sql" in s and "filters" in s["expect"]][-1]
    return {row[1]: row[4] for row in last if row[4]}


def _flags_bitmap(e: dict) -> int:
    return sum(1 << k for k, t in enumerate(e.get("tables") or ()) if t[2])


@pytest.mark.parametrize("sid, classify_kw", [
    ("TNE", lambda e: {"columns": TNE_COLUMNS}),
    ("TNE", lambda e: {"table_map_for_update": _flags_bitmap(e)}),
    ("MAN-EX197", lambda e: {}),
], ids=["TNE-columns", "TNE-table_map_for_update", "MAN-EX197"])
def test_scenario_verdicts_and_counters_from_texts(sid, classify_kw):
    wrong, counters = _run_from_texts(sid, classify_kw)
    assert wrong == []
    assert counters == _expected_counters(sid)


def test_tne_without_hints_differs_exactly_where_documented():
    """No schema, no bitmap: every joined table counts as updated. The 5 documented TNE statements flip."""
    wrong, _ = _run_from_texts("TNE", lambda e: {})
    assert wrong == [
        "UPDATE t1 LEFT JOIN t4 ON (t1.id=t4.id) SET d=0 where t1.id=1",          # MySQL ignores (t4), we apply
        "UPDATE t1 LEFT JOIN t7 ON (t1.id=t7.id) SET g=0 where t1.id=1",          # MySQL: default ignore
        "UPDATE t1 LEFT JOIN (t2, t3, t5) ON (t1.id=t2.id and t1.id=t3.id and t1.id=t5.id) SET e=0 where t1.id=1",
        "UPDATE t7 LEFT JOIN (t4, t5, t3) ON (t7.id=t4.id and t7.id=t5.id and t7.id=t3.id) SET g=0, c=0 "
        "where t7.id=1",                                                          # MySQL applies (t3), we ignore
        "UPDATE t4 LEFT JOIN (t1, t5, t6) ON (t4.id=t1.id and t4.id=t5.id and t4.id=t6.id) SET a=0, e=0, f=0 "
        "where t4.id=1",
    ]


# ================================================================ 4. multi-table UPDATE hints


def test_unqualified_set_without_schema_marks_every_joined_table():
    assert tables_of("UPDATE t1 LEFT JOIN t4 ON (t1.id=t4.id) SET d=0") == (U("t1"), U("t4"))


def test_unqualified_set_with_columns_marks_the_owner():
    assert tables_of("UPDATE t1 LEFT JOIN t4 ON (t1.id=t4.id) SET d=0", columns=TNE_COLUMNS) == (R("t1"), U("t4"))


def test_columns_are_case_insensitive_and_keys_may_be_qualified():
    cols = {"DB.T4": ["D"], "t1": ["a"]}
    assert tables_of("UPDATE t1 JOIN db.T4 ON 1 SET d=0", columns=cols) == (R("t1"), U("T4", "db"))


def test_columns_mapping_missing_a_table_makes_the_unmapped_tables_candidates():
    # x is in no mapped table: the unmapped t2 may own it, t1 (mapped, without x) cannot
    assert tables_of("UPDATE t1 JOIN t2 JOIN t3 SET x=1", columns={"t1": {"a"}, "t3": {"c"}}) == (
        R("t1"), U("t2"), R("t3"))
    # nothing can own it: back to every table
    assert tables_of("UPDATE t1 JOIN t2 SET x=1", columns={"t1": {"a"}, "t2": {"b"}}) == (U("t1"), U("t2"))


def test_qualified_set_columns_resolve_by_alias_then_name_then_db():
    assert tables_of("UPDATE t1 AS a JOIN t2 AS b ON a.id=b.id SET b.x=1") == (R("t1"), U("t2"))
    assert tables_of("UPDATE t1 JOIN t2 ON t1.id=t2.id SET t2.x=1, t1.y=2") == (U("t1"), U("t2"))
    assert tables_of("UPDATE db1.t1, db2.t1 SET db2.t1.a = 1") == (R("t1", "db1"), U("t1", "db2"))
    assert tables_of("UPDATE t1 AS a JOIN t1 AS b ON a.id=b.p SET b.x = a.x") == (R("t1"), U("t1"))
    # an unknown qualifier resolves to nothing: every table, as without schema
    assert tables_of("UPDATE t1 JOIN t2 SET zz.x=1") == (U("t1"), U("t2"))


def test_table_map_for_update_bitmap_decides_when_positions_are_certain():
    sql = "UPDATE t1 JOIN t2 ON t1.a=t2.a SET x=1 WHERE t1.b IN (SELECT b FROM t3)"
    assert tables_of(sql, table_map_for_update=0b10) == (R("t1"), U("t2"), R("t3"))
    assert tables_of(sql, table_map_for_update=0b01, columns={"t2": {"x"}}) == (U("t1"), R("t2"), R("t3"))
    # a derived table in the join list: MySQL's positions are not ours, the bitmap is not used
    sql = "UPDATE t1 JOIN (SELECT * FROM t3) d ON 1 JOIN t2 SET t2.x=1"
    assert tables_of(sql, table_map_for_update=0b1) == (R("t1"), R("t3"), U("t2"))
    # the bitmap means nothing for other statements
    assert tables_of("UPDATE t1 SET a=1", table_map_for_update=0) == (U("t1"),)


def test_single_table_update_is_updating_whatever_the_set_list():
    info = classify("UPDATE t1 SET t1.a = (SELECT max(b) FROM t2) WHERE c IN (SELECT c FROM t3)")
    assert (info.command, info.tables) == ("UPDATE", (U("t1"), R("t2"), R("t3")))


# ================================================================ 5. commands and kinds

FAMILIES = [
    # DML
    ("INSERT INTO t1 VALUES (1)", "INSERT", "DML", (U("t1"),)),
    ("INSERT t1 SET a=1", "INSERT", "DML", (U("t1"),)),
    ("INSERT LOW_PRIORITY IGNORE INTO db.t1 (a) VALUES (1) ON DUPLICATE KEY UPDATE a=VALUES(a)", "INSERT", "DML",
     (U("t1", "db"),)),
    ("INSERT INTO t1 VALUES ((SELECT max(a) FROM t2))", "INSERT", "DML", (U("t1"), R("t2"))),
    ("INSERT INTO t1 SELECT * FROM t2", "INSERT_SELECT", "DML", (U("t1"), R("t2"))),
    ("INSERT INTO t1 (a) SELECT a FROM t2 UNION SELECT a FROM t3", "INSERT_SELECT", "DML", (U("t1"), R("t2"), R("t3"))),
    ("INSERT INTO t1 TABLE t2", "INSERT_SELECT", "DML", (U("t1"), R("t2"))),
    ("INSERT INTO t1 WITH c AS (SELECT 1) SELECT * FROM c", "INSERT_SELECT", "DML", (U("t1"),)),
    ("REPLACE INTO t1 VALUES (1)", "REPLACE", "DML", (U("t1"),)),
    ("REPLACE LOW_PRIORITY INTO t1 SET a = 1", "REPLACE", "DML", (U("t1"),)),
    ("REPLACE INTO t1 SELECT * FROM db.t2", "REPLACE_SELECT", "DML", (U("t1"), R("t2", "db"))),
    ("UPDATE t1 SET a=1", "UPDATE", "DML", (U("t1"),)),
    ("UPDATE LOW_PRIORITY IGNORE t1 SET a=1 ORDER BY b LIMIT 10", "UPDATE", "DML", (U("t1"),)),
    ("UPDATE t1 STRAIGHT_JOIN t2 ON t1.a=t2.a SET t1.b=1", "UPDATE_MULTI", "DML", (U("t1"), R("t2"))),
    ("UPDATE t1, t2 SET t2.b=1", "UPDATE_MULTI", "DML", (R("t1"), U("t2"))),
    ("DELETE FROM t1 WHERE a=1", "DELETE", "DML", (U("t1"),)),
    ("DELETE LOW_PRIORITY QUICK IGNORE FROM db.t1 WHERE a=1", "DELETE", "DML", (U("t1", "db"),)),
    ("DELETE t1 FROM t1 JOIN t2 ON t1.id=t2.id", "DELETE_MULTI", "DML", (U("t1"), R("t2"))),
    ("DELETE FROM t2 USING t1 JOIN t2 ON t1.id=t2.id", "DELETE_MULTI", "DML", (R("t1"), U("t2"))),
    ("LOAD DATA INFILE 'f' INTO TABLE t1", "LOAD", "DML", (U("t1"),)),
    ("LOAD DATA CONCURRENT LOCAL INFILE '/tmp/SQL_LOAD-1-2-3.data' REPLACE INTO TABLE `db`.`t1` "
     "FIELDS TERMINATED BY ',' (a, @b) SET c = @b", "LOAD", "DML", (U("t1", "db"),)),
    ("LOAD XML INFILE 'x' INTO TABLE t1 ROWS IDENTIFIED BY '<row>'", "LOAD", "DML", (U("t1"),)),
    # table DDL
    ("CREATE TABLE t1 (id int, a int)", "CREATE_TABLE", "TABLE_DDL", (U("t1"),)),
    ("CREATE TEMPORARY TABLE IF NOT EXISTS db.t1 (a int) ENGINE=InnoDB", "CREATE_TABLE", "TABLE_DDL",
     (U("t1", "db"),)),
    ("CREATE TABLE t2 LIKE t1", "CREATE_TABLE", "TABLE_DDL", (U("t2"), R("t1"))),
    ("CREATE TABLE t2 (LIKE db.t1)", "CREATE_TABLE", "TABLE_DDL", (U("t2"), R("t1", "db"))),
    ("CREATE TABLE t3 AS SELECT * FROM t1 JOIN t2", "CREATE_TABLE", "TABLE_DDL", (U("t3"), R("t1"), R("t2"))),
    ("CREATE TABLE t2 IGNORE SELECT * FROM t1", "CREATE_TABLE", "TABLE_DDL", (U("t2"), R("t1"))),
    ("CREATE TABLE c (id INT, p INT, FOREIGN KEY (p) REFERENCES parent(id))", "CREATE_TABLE", "TABLE_DDL",
     (U("c"),)),
    ("ALTER TABLE t1 ADD COLUMN b int", "ALTER_TABLE", "TABLE_DDL", (U("t1"),)),
    ("ALTER TABLE db.t1 RENAME TO db.t9", "ALTER_TABLE", "TABLE_DDL", (U("t1", "db"),)),
    ("ALTER TABLE t1 ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES t2(id)", "ALTER_TABLE", "TABLE_DDL", (U("t1"),)),
    ("ALTER TABLE t1 EXCHANGE PARTITION p0 WITH TABLE t2", "ALTER_TABLE", "TABLE_DDL", (U("t1"), U("t2"))),
    ("DROP TABLE t1, db.t2", "DROP_TABLE", "TABLE_DDL", (U("t1"), U("t2", "db"))),
    ("DROP TABLE IF EXISTS t1", "DROP_TABLE", "TABLE_DDL", (U("t1"),)),
    ("DROP TEMPORARY TABLE t1", "DROP_TABLE", "TABLE_DDL", (U("t1"),)),
    ("DROP TEMPORARY TABLE IF EXISTS t1, t2", DROP_TEMPORARY_IF_EXISTS, "TABLE_DDL", (U("t1"), U("t2"))),
    ("TRUNCATE TABLE t1", "TRUNCATE", "TABLE_DDL", (U("t1"),)),
    ("TRUNCATE db.t1", "TRUNCATE", "TABLE_DDL", (U("t1", "db"),)),
    ("RENAME TABLE a TO b, db.c TO db.d", "RENAME_TABLE", "TABLE_DDL", (U("a"), U("b"), U("c", "db"), U("d", "db"))),
    ("CREATE INDEX i ON t1 (a)", "CREATE_INDEX", "TABLE_DDL", (U("t1"),)),
    ("CREATE UNIQUE INDEX i USING BTREE ON db.t1 (a) ALGORITHM=INPLACE", "CREATE_INDEX", "TABLE_DDL",
     (U("t1", "db"),)),
    ("DROP INDEX i ON t1", "DROP_INDEX", "TABLE_DDL", (U("t1"),)),
    ("DROP INDEX `PRIMARY` ON db.t1 ALGORITHM=INPLACE", "DROP_INDEX", "TABLE_DDL", (U("t1", "db"),)),
    ("CREATE VIEW v AS SELECT * FROM t1", "CREATE_VIEW", "TABLE_DDL", (U("v"), R("t1"))),
    ("CREATE OR REPLACE ALGORITHM=MERGE DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW db.v (a) AS "
     "SELECT a FROM t1 WITH CHECK OPTION", "CREATE_VIEW", "TABLE_DDL", (U("v", "db"), R("t1"))),
    ("ALTER VIEW v AS SELECT * FROM t2", "CREATE_VIEW", "TABLE_DDL", (U("v"), R("t2"))),
    ("DROP VIEW IF EXISTS v1, v2", "DROP_VIEW", "TABLE_DDL", (U("v1"), U("v2"))),
    ("CREATE TRIGGER trg BEFORE INSERT ON t1 FOR EACH ROW SET NEW.a = 1", "CREATE_TRIGGER", "TABLE_DDL", (U("t1"),)),
    ("CREATE DEFINER=`root`@`%` TRIGGER db.trg AFTER UPDATE ON db.t1 FOR EACH ROW BEGIN INSERT INTO t2 VALUES (1); "
     "DELETE FROM t3; END", "CREATE_TRIGGER", "TABLE_DDL", (U("t1", "db"),)),
    ("DROP TRIGGER trg", "DROP_TRIGGER", "TABLE_DDL", ()),
    # database DDL: no tables
    ("CREATE DATABASE db1", "CREATE_DB", "DATABASE_DDL", ()),
    ("CREATE SCHEMA IF NOT EXISTS db1 CHARACTER SET utf8mb4", "CREATE_DB", "DATABASE_DDL", ()),
    ("ALTER DATABASE db1 CHARACTER SET utf8", "ALTER_DB", "DATABASE_DDL", ()),
    ("ALTER SCHEMA db1 DEFAULT COLLATE utf8mb4_bin", "ALTER_DB", "DATABASE_DDL", ()),
    ("DROP DATABASE IF EXISTS db1", "DROP_DB", "DATABASE_DDL", ()),
    ("DROP SCHEMA db1", "DROP_DB", "DATABASE_DDL", ()),
    # transaction control
    ("BEGIN", "BEGIN", "TRANSACTION", ()),
    ("BEGIN WORK", "BEGIN", "TRANSACTION", ()),
    ("START TRANSACTION", "BEGIN", "TRANSACTION", ()),
    ("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", "BEGIN", "TRANSACTION", ()),
    ("COMMIT", "COMMIT", "TRANSACTION", ()),
    ("COMMIT WORK AND NO CHAIN", "COMMIT", "TRANSACTION", ()),
    ("ROLLBACK", "ROLLBACK", "TRANSACTION", ()),
    ("ROLLBACK TO SAVEPOINT s1", "ROLLBACK_TO_SAVEPOINT", "TRANSACTION", ()),
    ("ROLLBACK WORK TO s1", "ROLLBACK_TO_SAVEPOINT", "TRANSACTION", ()),
    ("SAVEPOINT s1", "SAVEPOINT", "TRANSACTION", ()),
    ("RELEASE SAVEPOINT s1", "OTHER", "TRANSACTION", ()),  # SQLCOM_RELEASE_SAVEPOINT: db rules apply
    ("XA START 'x'", "XA_START", "TRANSACTION", ()),
    ("XA BEGIN X'31',X'',1", "XA_START", "TRANSACTION", ()),
    ("XA END 'x'", "XA_END", "TRANSACTION", ()),
    ("XA PREPARE 'x'", "XA_PREPARE", "TRANSACTION", ()),
    ("XA COMMIT 'x' ONE PHASE", "XA_COMMIT", "TRANSACTION", ()),
    ("XA ROLLBACK 'x'", "XA_ROLLBACK", "TRANSACTION", ()),
    ("XA RECOVER", "OTHER", "OTHER", ()),
    # SET
    ("SET @a=1", "SET_OPTION", "OTHER", ()),
    ("SET NAMES utf8mb4 COLLATE utf8mb4_bin", "SET_OPTION", "OTHER", ()),
    ("SET SESSION sql_mode='', @@session.autocommit=1", "SET_OPTION", "OTHER", ()),
    ("SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "SET_OPTION", "OTHER", ()),
    ("SET CHARACTER SET utf8", "SET_OPTION", "OTHER", ()),
    ("SET @a = (SELECT COUNT(*) FROM t1)", "SET_OPTION", "OTHER", (R("t1"),)),
    ("SET PASSWORD FOR u = 'x'", "OTHER", "OTHER", ()),
    ("SET ROLE r", "OTHER", "OTHER", ()),
    ("SET DEFAULT ROLE ALL TO u", "OTHER", "OTHER", ()),
    # everything else
    ("GRANT SELECT ON *.* TO u", "OTHER", "OTHER", ()),
    ("GRANT SELECT ON db.t1 TO 'u'@'%'", "OTHER", "OTHER", ()),
    ("REVOKE ALL ON *.* FROM u", "OTHER", "OTHER", ()),
    ("CREATE USER 'u'@'%' IDENTIFIED BY 'p'", "OTHER", "OTHER", ()),
    ("ALTER USER u IDENTIFIED BY 'x'", "OTHER", "OTHER", ()),
    ("DROP USER u", "OTHER", "OTHER", ()),
    ("CREATE PROCEDURE p() BEGIN INSERT INTO t1 VALUES (1); END", "OTHER", "OTHER", ()),
    ("CREATE DEFINER=`root`@`localhost` FUNCTION f() RETURNS INT RETURN (SELECT 1 FROM t1)", "OTHER", "OTHER", ()),
    ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO DELETE FROM t1", "OTHER", "OTHER", ()),
    ("DROP PROCEDURE IF EXISTS p", "OTHER", "OTHER", ()),
    ("CALL p(1)", "OTHER", "OTHER", ()),
    ("FLUSH PRIVILEGES", "OTHER", "OTHER", ()),
    ("FLUSH TABLES t1", "OTHER", "OTHER", ()),
    ("DO SLEEP(1)", "OTHER", "OTHER", ()),
    ("LOAD INDEX INTO CACHE t1", "OTHER", "OTHER", ()),
    ("LOCK TABLES t1 WRITE", "OTHER", "OTHER", ()),
    ("USE db1", "OTHER", "OTHER", ()),
    # MySQL lists these tables with TL_OPTION_UPDATING (PT_analyze_table_stmt / PT_repair_table_stmt)
    ("ANALYZE TABLE t1, db.t2", "OTHER", "OTHER", (U("t1"), U("t2", "db"))),
    ("ANALYZE TABLE t1 UPDATE HISTOGRAM ON a", "OTHER", "OTHER", (U("t1"),)),
    ("OPTIMIZE NO_WRITE_TO_BINLOG TABLE t1", "OTHER", "OTHER", (U("t1"),)),
    ("REPAIR TABLE t1 QUICK", "OTHER", "OTHER", (U("t1"),)),
    # queries: their tables are read (with table rules on, MySQL skips them)
    ("SELECT * FROM t1 WHERE a = (SELECT 1 FROM t2)", "OTHER", "OTHER", (R("t1"), R("t2"))),
    ("TABLE t1", "OTHER", "OTHER", (R("t1"),)),
    ("(SELECT 1 FROM t1) UNION (SELECT 2 FROM t2)", "OTHER", "OTHER", (R("t1"), R("t2"))),
    ("", "OTHER", "OTHER", ()),
    (";", "OTHER", "OTHER", ()),
    ("/* only a comment */", "OTHER", "OTHER", ()),
]


@pytest.mark.parametrize("sql, command, kind, tables", FAMILIES, ids=[f[0][:60] for f in FAMILIES])
def test_command_kind_and_tables(sql, command, kind, tables):
    info = classify(sql)
    assert (info.command, info.kind, info.tables) == (command, kind, tables)
    assert info.command in ALL_COMMANDS and info.kind in KINDS


def test_database_statements_carry_their_target():
    assert classify("CREATE DATABASE IF NOT EXISTS `my-db`").database == "my-db"
    assert classify("DROP SCHEMA `x.y`").database == "x.y"
    assert classify("ALTER DATABASE db1 CHARACTER SET utf8").database == "db1"
    assert classify("ALTER DATABASE DEFAULT CHARACTER SET utf8mb4").database is None  # the default database
    ev = classify("CREATE DATABASE db1").event("db9")
    assert (ev.command, ev.default_db, ev.tables) == ("CREATE_DB", "db1", ())
    assert classify("ALTER DATABASE CHARACTER SET utf8").event("cur").default_db == "cur"


def test_drop_trigger_names_the_trigger_and_needs_the_replica_lookup():
    info = classify("DROP TRIGGER IF EXISTS `db`.`trg`")
    assert (info.command, info.trigger, info.trigger_db, info.tables) == ("DROP_TRIGGER", "trg", "db", ())
    assert info.event("db").trigger_table is None
    assert info.event("db", TableRef("db", "t1", False)).trigger_table == TableRef("db", "t1", False)


def test_drop_temporary_if_exists_pseudo_command_maps_to_the_exempt_event():
    ev = classify("DROP TEMPORARY TABLE IF EXISTS tmp2").event("db")
    assert ev == StatementEvent("DROP_TABLE", "db", (U("tmp2"),), drop_temporary_if_exists=True)
    assert decide(F(do_table=["db.t1"]), ev).apply  # §10 row 41


def test_transaction_kind_and_filter_exemption_are_different_things():
    for sql in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT a", "ROLLBACK TO a"):
        assert classify(sql).command in TRANSACTION_CONTROL
    for sql in ("XA START 'x'", "XA END 'x'", "XA PREPARE 'x'", "XA COMMIT 'x'", "XA ROLLBACK 'x'",
                "RELEASE SAVEPOINT a"):
        info = classify(sql)
        assert info.kind == "TRANSACTION" and info.command not in TRANSACTION_CONTROL
        assert not decide(F(do_db=["db1"]), info.event("db2")).apply  # database rules still apply


def test_analyze_is_subject_to_table_rules_grant_is_not():
    f = F(do_table=["db.t1"])
    assert not decide(f, classify("ANALYZE TABLE t2").event("db")).apply
    assert decide(f, classify("ANALYZE TABLE t1").event("db")).apply
    assert decide(f, classify("GRANT SELECT ON db.t2 TO u").event("db")).apply


def test_incomplete_statements_are_flagged():
    for sql in ("UPDATE", "INSERT INTO", "DELETE FROM", "CREATE TABLE", "DROP TRIGGER", "TRUNCATE"):
        info = classify(sql)
        assert info.method == "incomplete" and info.tables == (), sql
    assert classify("UPDATE t1 SET a=1").method == "sqlglot"
    assert classify("RENAME TABLE a TO b").method == "tokens"


# ================================================================ 6. names, comments, case, executable comments

NAMES = [
    ("INSERT INTO `we.ird``na\"me` VALUES (1)", (U('we.ird`na"me'),)),
    ("INSERT INTO `d.b`.`t.1` SELECT * FROM `o'ther`.`x``y`", (U("t.1", "d.b"), R("x`y", "o'ther"))),
    ("UPDATE `a.b` AS x JOIN `c d` AS y ON x.id=y.id SET y.v = 1", (R("a.b"), U("c d"))),
    ("DELETE FROM `select` WHERE 1", (U("select"),)),
    ("INSERT INTO `db`.`from` (`where`) VALUES (1)", (U("from", "db"),)),
    ("INSERT INTO `` VALUES (1)", (U(""),)),
    ("TRUNCATE `db`.`t``1`", (U("t`1", "db"),)),
    ("RENAME TABLE `a.b` TO `c``d`", (U("a.b"), U("c`d"))),
    ("DROP TABLE `é`, `日本`.`表`", (U("é"), U("表", "日本"))),
    ("INSERT INTO MyDb.MyTable VALUES (1)", (U("MyTable", "MyDb"),)),  # case kept as written
    ("INSERT INTO db.1t VALUES (1)", (U("1t", "db"),)),
    ("INSERT INTO status VALUES (1)", (U("status"),)),  # non-reserved keyword as a name
    ("UPDATE `t;1` SET a=';'", (U("t;1"),)),
]


@pytest.mark.parametrize("sql, tables", NAMES, ids=[n[0][:50] for n in NAMES])
def test_hostile_names_come_back_exactly(sql, tables):
    assert tables_of(sql) == tables
    assert tokens_only(sql).tables == tables


COMMENTS = [
    ("/* c */ iNsErT /* d */ InTo /* e */ `T1` VaLuEs (1) -- trailing", "INSERT", (U("T1"),)),
    ("-- leading comment\nINSERT INTO t1 VALUES (1)", "INSERT", (U("t1"),)),
    ("# hash comment\nupdate t1 set a=1", "UPDATE", (U("t1"),)),
    ("DROP TABLE IF EXISTS `t1` /* generated by server */", "DROP_TABLE", (U("t1"),)),
    ("insert /*+ SET_VAR(sort_buffer_size = 16M) */ into t1 select * from t2", "INSERT_SELECT", (U("t1"), R("t2"))),
    ("Create Table t2 Like t1", "CREATE_TABLE", (U("t2"), R("t1"))),
    ("dElEtE t1 fRoM t1 jOiN t2", "DELETE_MULTI", (U("t1"), R("t2"))),
    ("INSERT INTO t1 VALUES ('/*!40101 DROP TABLE x */', \"it's\", '\\'; DROP TABLE y')", "INSERT", (U("t1"),)),
    ("\n\t  BEGIN  \n", "BEGIN", ()),
    ("COMMIT;", "COMMIT", ()),
    (";;INSERT INTO t1 VALUES (1); DELETE FROM t2", "INSERT", (U("t1"),)),  # the first statement only
    # executable comments, as in mysqldump output and the server's own binlog texts
    ("/*!40101 SET NAMES utf8 */", "SET_OPTION", ()),
    ("/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;", "SET_OPTION", ()),
    ("/*!40000 ALTER TABLE `t1` DISABLE KEYS */;", "ALTER_TABLE", (U("t1"),)),
    ("DROP /*!40005 TEMPORARY */ TABLE IF EXISTS `tmp1` /* generated by server */", DROP_TEMPORARY_IF_EXISTS,
     (U("tmp1"),)),
    ("/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER `trg` BEFORE INSERT ON `t1` "
     "FOR EACH ROW SET NEW.a = 1 */", "CREATE_TRIGGER", (U("t1"),)),
    ("/*!*/ INSERT INTO t1 VALUES ('*/')", "INSERT", (U("t1"),)),
    ("/*!90000 DROP TABLE t9 */ INSERT INTO t1 VALUES (1)", "INSERT", (U("t1"),)),  # newer server only
    ("/*!80013 UPDATE t1 SET a=1 */", "UPDATE", (U("t1"),)),
]


@pytest.mark.parametrize("sql, command, tables", COMMENTS, ids=[c[0][:50] for c in COMMENTS])
def test_comments_case_and_executable_comments(sql, command, tables):
    info = classify(sql)
    assert (info.command, info.tables) == (command, tables)
    tok = tokens_only(sql)
    assert (tok.command, tok.tables) == (command, tables)


def test_expand_executable_comments():
    # markers blanked in place (offsets kept), comments for a newer server blanked whole
    assert expand_executable_comments("/*!40101 SET NAMES utf8 */") == " " * 8 + " SET NAMES utf8 " + "  "
    assert expand_executable_comments("a /*! b */ c") == "a " + "   " + " b " + "  " + " c"
    assert expand_executable_comments("a /*!90000 b */ c") == "a " + " " * 13 + " c"
    assert expand_executable_comments("a /*!80013 b */", version_id=80012) == "a " + " " * 13
    assert expand_executable_comments("'/*!1 x */' /* /*!2 */") == "'/*!1 x */' /* /*!2 */"
    assert expand_executable_comments("`/*!` -- /*!1\n#/*!1\nx") == "`/*!` -- /*!1\n#/*!1\nx"
    assert expand_executable_comments("/*!40101 'a*/b' */ c") == " " * 8 + " 'a*/b' " + "  " + " c"
    assert expand_executable_comments("/*!40101 unterminated") == " " * 8 + " unterminated"
    assert expand_executable_comments("plain") == "plain"


# ================================================================ 7. multi-table DELETE, derived tables, CTEs

STRUCTURE = [
    ("DELETE a1, a2 FROM t1 AS a1 INNER JOIN t2 AS a2 WHERE a1.id=a2.id", "DELETE_MULTI", (U("t1"), U("t2"))),
    ("DELETE t1.* FROM t1, t2 WHERE t1.a=t2.a", "DELETE_MULTI", (U("t1"), R("t2"))),
    ("DELETE FROM t1.*, t2 USING t1, t2, t3 WHERE 1", "DELETE_MULTI", (U("t1"), U("t2"), R("t3"))),
    ("DELETE db1.t1, t2 FROM db1.t1, db2.t2 WHERE 1", "DELETE_MULTI", (U("t1", "db1"), U("t2", "db2"))),
    ("DELETE x FROM db.t1 AS x JOIN t2 ON x.id=t2.id", "DELETE_MULTI", (U("t1", "db"), R("t2"))),
    ("DELETE t2 FROM t1 JOIN t2 ON t1.id=t2.id WHERE t1.x IN (SELECT x FROM t3)", "DELETE_MULTI",
     (R("t1"), U("t2"), R("t3"))),
    ("DELETE FROM t1 WHERE a IN (SELECT a FROM t2)", "DELETE", (U("t1"), R("t2"))),
    ("DELETE FROM db.t1 AS x WHERE x.a=1", "DELETE", (U("t1", "db"),)),
    ("UPDATE t1, (SELECT * FROM t2) AS d SET t1.a = d.a WHERE t1.id = d.id", "UPDATE_MULTI", (U("t1"), R("t2"))),
    ("UPDATE t1 SET a=1 WHERE id IN (SELECT id FROM (SELECT id FROM t1) AS x)", "UPDATE", (U("t1"), R("t1"))),
    ("UPDATE t1 JOIN t2 ON t1.a = (SELECT max(a) FROM t3) SET t2.b = 1", "UPDATE_MULTI", (R("t1"), U("t2"), R("t3"))),
    ("UPDATE t1 JOIN (t2 JOIN t3 ON t2.a=t3.a) ON t1.a=t2.a SET t3.x=1", "UPDATE_MULTI", (R("t1"), R("t2"), U("t3"))),
    ("UPDATE t7 LEFT JOIN (t4, t1, t2) ON (1) SET t1.a=0", "UPDATE_MULTI", (R("t7"), R("t4"), U("t1"), R("t2"))),
    ("WITH c AS (SELECT * FROM t2) UPDATE t1 JOIN c ON t1.id=c.id SET t1.a=c.a", "UPDATE_MULTI", (R("t2"), U("t1"))),
    ("WITH c AS (SELECT * FROM t2) DELETE t1 FROM t1 JOIN c ON t1.id=c.id", "DELETE_MULTI", (R("t2"), U("t1"))),
    ("INSERT INTO t1 SELECT * FROM t2 WHERE a IN (WITH c AS (SELECT 1 FROM t3) SELECT * FROM c)", "INSERT_SELECT",
     (U("t1"), R("t2"), R("t3"))),
    ("WITH RECURSIVE c (n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c WHERE n < 5) SELECT * FROM c JOIN t1", "OTHER",
     (R("t1"),)),
    ("INSERT INTO t1 SELECT * FROM db.c", "INSERT_SELECT", (U("t1"), R("c", "db"))),
    ("CREATE TABLE t2 SELECT * FROM (SELECT * FROM t1) AS d", "CREATE_TABLE", (U("t2"), R("t1"))),
    ("INSERT INTO t1 SELECT * FROM JSON_TABLE('[]', '$[*]' COLUMNS (a INT PATH '$')) AS jt", "INSERT_SELECT",
     (U("t1"),)),
    ("INSERT INTO t1 (a) VALUES (1) ON DUPLICATE KEY UPDATE a = (SELECT max(a) FROM t2)", "INSERT", (U("t1"), R("t2"))),
]


@pytest.mark.parametrize("sql, command, tables", STRUCTURE, ids=[s[0][:60] for s in STRUCTURE])
def test_global_table_list_structure(sql, command, tables):
    info = classify(sql)
    assert (info.command, info.tables) == (command, tables)


# ================================================================ 8. the token reader


NOT_PARSED_BY_SQLGLOT = [
    # sqlglot 30 raises, returns exp.Command, or never sees the table (REPLACE/RENAME are swallowed whole)
    ("UPDATE t1 JOIN t2 ON t1.a = t2.a SET t1.x = MATCH (c) AGAINST ('y') WHERE 1 <=> 2 ^ 3 FOR_SURE", "UPDATE_MULTI",
     (U("t1"), R("t2"))),
    ("INSERT INTO t1 VALUES (1) RETURNING_IS_NOT_MYSQL ???", "INSERT", (U("t1"),)),
    ("DELETE FROM t1 WHERE a = 1 !! garbage", "DELETE", (U("t1"),)),
    ("CREATE TABLE t2 REPLACE SELECT * FROM t1", "CREATE_TABLE", (U("t2"), R("t1"))),
    ("ALTER TABLE t1 CONVERT TO CHARACTER SET utf8mb4", "ALTER_TABLE", (U("t1"),)),
    ("CREATE FULLTEXT INDEX i ON t1 (a)", "CREATE_INDEX", (U("t1"),)),
    ("ALTER ONLINE TABLE t1 ADD COLUMN x int", "ALTER_TABLE", (U("t1"),)),
]


@pytest.mark.parametrize("sql, command, tables", NOT_PARSED_BY_SQLGLOT, ids=[s[0][:50] for s in NOT_PARSED_BY_SQLGLOT])
def test_statements_sqlglot_cannot_parse_fall_back_to_tokens(sql, command, tables):
    info = classify(sql)
    assert (info.command, info.tables, info.method) == (command, tables, "tokens")


def _corpus() -> list[str]:
    out = [SECTION10_TEXTS[k] for k in sorted(SECTION10_TEXTS)]
    out += [p.values[1]["text"] for p in CASE_STATEMENTS]
    out += [f[0] for f in FAMILIES] + [n[0] for n in NAMES] + [c[0] for c in COMMENTS] + [s[0] for s in STRUCTURE]
    return list(dict.fromkeys(out))


@pytest.mark.parametrize("sql", _corpus())
def test_token_reader_agrees_with_sqlglot_reader(sql):
    """The fallback reader, run on its own, reproduces what the sqlglot reader found."""
    a, b = sqlglot_first(sql, TNE_COLUMNS), tokens_only(sql, TNE_COLUMNS)
    assert (a.command, a.kind, a.tables, a.database, a.trigger, a.trigger_db) == \
           (b.command, b.kind, b.tables, b.database, b.trigger, b.trigger_db)


def test_most_of_the_corpus_is_really_parsed_by_sqlglot():
    methods = Counter(sqlglot_first(s).method for s in _corpus())
    assert methods["sqlglot"] > 2 * methods["tokens"]


def test_token_reader_uses_the_table_map_too():
    sql = "UPDATE t1 LEFT JOIN t4 ON (t1.id=t4.id) SET d=0 where t1.id=1"
    assert tokens_only(sql, table_map=0b10).tables == (R("t1"), U("t4"))


# ================================================================ 9. never crash, bulk INSERT, logging, threads, timing


def _well_formed(info) -> None:
    assert isinstance(info, StatementInfo)
    assert info.command in ALL_COMMANDS
    assert info.kind in KINDS
    assert isinstance(info.tables, tuple) and all(isinstance(t, TableRef) for t in info.tables)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_any_text_classifies(text):
    _well_formed(classify(text))


WORDS = ("INSERT REPLACE UPDATE DELETE INTO FROM USING SET WHERE JOIN LEFT ( ) , . * = ; AS ON t1 t2 `a``b` db "
         "SELECT WITH TABLE VALUES CREATE DROP ALTER TEMPORARY IF EXISTS NOT VIEW INDEX TRIGGER DATABASE SCHEMA "
         "RENAME TO LOAD DATA TRUNCATE XA START BEGIN COMMIT ROLLBACK SAVEPOINT RELEASE ANALYZE LIKE BEFORE AFTER "
         "DEFINER @ 'x' 1 /*!40101 */ /* -- # \n PARTITION ORDER BY LIMIT STRAIGHT_JOIN LOW_PRIORITY IGNORE USE "
         "FOR EXCHANGE LATERAL DUAL JSON_TABLE RECURSIVE c ` ' \" \\").split(" ")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(WORDS), max_size=16), st.booleans(), st.integers(0, 2 ** 64 - 1))
def test_sql_like_token_soup_never_raises_inside(words, use_sqlglot, table_map):
    """Stronger than the public guarantee: the readers themselves do not raise (the catch-all stays unused)."""
    sql = " ".join(words)
    for cols in (None, TNE_COLUMNS):
        info = classify_module.classify_with_hints(sql, classify_module.ColumnHints(cols, table_map), use_sqlglot)
        _well_formed(info)


@pytest.mark.parametrize("value", [None, 42, b"INSERT INTO t1 VALUES (1)", bytearray(b"\xff\xfe"), ["x"]])
def test_non_text_input(value):
    info = classify(value)
    _well_formed(info)
    if value == b"INSERT INTO t1 VALUES (1)":
        assert info.tables == (U("t1"),)


def test_deep_nesting_does_not_crash():
    _well_formed(classify("SELECT " + "(" * 5000 + "1" + ")" * 5000))
    _well_formed(classify("UPDATE t1 SET a = " + "(" * 5000))


def test_bulk_insert_reads_only_the_header_and_is_exact():
    rows = ",".join(f"({i},'v{i}',NULL,0x{i:x})" for i in range(60000))
    sql = "INSERT INTO db.t1 (a,b,c,d) VALUES " + rows
    assert len(sql) > 1_000_000
    t0 = time.perf_counter()
    info = classify(sql)
    assert time.perf_counter() - t0 < 2.0  # the full parse takes tens of seconds
    assert (info.command, info.tables) == ("INSERT", (U("t1", "db"),))
    # a subquery anywhere in the body: read in full, the read-only table is listed
    sql2 = "REPLACE INTO t1 VALUES " + ",".join(f"({i})" for i in range(3000)) + ",((SELECT max(a) FROM t2))"
    assert classify(sql2).tables == (U("t1"), R("t2"))


def test_no_sqlglot_warnings_are_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="sqlglot"):
        for sql in ("ALTER TABLE t1 DISABLE KEYS", "CREATE FULLTEXT INDEX i ON t1 (a)",
                    "CREATE TABLE t2 IGNORE SELECT * FROM t1"):
            classify(sql + " /* fresh */")
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]


def test_threads_share_nothing_mutable():
    sqls = [TNE_TEXTS[k] for k in sorted(TNE_TEXTS)] * 5
    expected = [classify(s, columns=TNE_COLUMNS) for s in sqls]
    results: dict[int, list] = {}

    def work(k):
        results[k] = [classify(s, columns=TNE_COLUMNS) for s in sqls]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results.values())


def test_repeated_texts_are_memoised():
    sql = "INSERT INTO memo_t VALUES (1) /* memo */"
    assert classify(sql) is classify(sql)
    assert classify(sql, columns={"x": {"y"}}) == classify(sql)


def test_typical_dml_timing_smoke():
    """Per-statement cost for distinct texts (no memo); generous bound, the report quotes measured values."""
    texts = [f"UPDATE t{k} LEFT JOIN t4 ON (t{k}.id=t4.id) SET a=0, d=0 WHERE t{k}.id={k}" for k in range(20)]
    texts += [f"INSERT INTO db.t{k} (a, b) VALUES ({k}, 'x{k}')" for k in range(20)]
    t0 = time.perf_counter()
    for s in texts:
        classify(s, columns=TNE_COLUMNS)
    per_statement = (time.perf_counter() - t0) / len(texts)
    assert per_statement < 0.1


# ================================================================ 10. generated DML against an oracle

_POOL = [(None, "t1", "t1"), (None, "t2", "t2"), ("db1", "t1", "db1.t1"), ("db2", "t3", "db2.t3"),
         (None, "a.b", "`a.b`"), ("my db", "select", "`my db`.`select`"), (None, "T4", "T4")]


@st.composite
def _dml(draw):
    """A random UPDATE / DELETE / INSERT ... SELECT over a join list, with the global table list MySQL builds.

    Returns (sql, command, expected tables). Join-list entries: base tables (aliased or not), parenthesised
    nests, derived tables; read-only subqueries in ON / WHERE."""
    counter = iter(range(1, 1000))
    entries = []  # (db, name, qualifier) of the base tables of the join list, in order
    ro_seen = []  # every table in textual order: (db, name, qualifier or None for read-only)
    used_plain = set()

    def base():
        db, name, text = draw(st.sampled_from(_POOL))
        if draw(st.booleans()) or (db, name) in used_plain or any(e[1] == name for e in entries):
            alias = f"x{next(counter)}"
            sql = f"{text} AS {alias}" if draw(st.booleans()) else f"{text} {alias}"
            qual = alias
        else:
            used_plain.add((db, name))
            sql, qual = text, (f"`{name}`" if name in ("a.b", "select") else name)
        entries.append((db, name, qual))
        ro_seen.append((db, name, qual))
        return sql

    def readonly_query():
        db, name, text = draw(st.sampled_from(_POOL))
        ro_seen.append((db, name, None))
        return f"SELECT 1 FROM {text}"

    def factor():
        kind = draw(st.sampled_from(["base", "base", "base", "nest", "derived"]))
        if kind == "nest":
            return "(" + ", ".join(base() for _ in range(draw(st.integers(2, 3)))) + ")"
        if kind == "derived":
            return f"({readonly_query()}) AS d{next(counter)}"
        return base()

    def join_list():
        sql = factor()
        for _ in range(draw(st.integers(0, 3))):
            sep = draw(st.sampled_from([", ", " JOIN ", " LEFT JOIN ", " INNER JOIN ", " STRAIGHT_JOIN "]))
            sql += sep + factor()
            if sep.strip() in ("LEFT JOIN", "INNER JOIN", "STRAIGHT_JOIN"):
                sql += " ON " + (f"1 IN ({readonly_query()})" if draw(st.booleans()) else "1=1")
        return sql

    def where():
        return f" WHERE 2 IN ({readonly_query()})" if draw(st.booleans()) else ""

    def expected(updated):
        return tuple(TableRef(db, name, qual is not None and qual in updated) for db, name, qual in ro_seen)

    verb = draw(st.sampled_from(["UPDATE", "DELETE", "DELETE_USING", "INSERT"]))
    if verb == "UPDATE":
        refs = join_list()
        multi = len(ro_seen) > 1 or "(" in refs
        if not entries:
            refs += ", " + base()
            multi = True
        chosen = draw(st.lists(st.sampled_from([e[2] for e in entries]), min_size=1, max_size=3))
        sets = ", ".join(f"{q}.c{k} = {k}" for k, q in enumerate(chosen))
        sql = f"UPDATE {refs} SET {sets}" + where()
        return sql, ("UPDATE_MULTI" if multi else "UPDATE"), expected(set(chosen) if multi else {entries[0][2]})
    if verb in ("DELETE", "DELETE_USING"):
        refs = join_list()
        if not entries:
            refs += ", " + base()
        targets = draw(st.lists(st.sampled_from([e[2] for e in entries]), min_size=1, max_size=3, unique=True))
        tlist = ", ".join(t + draw(st.sampled_from(["", ".*"])) for t in targets)
        sql = (f"DELETE {tlist} FROM {refs}" if verb == "DELETE" else f"DELETE FROM {tlist} USING {refs}") + where()
        return sql, "DELETE_MULTI", expected(set(targets))
    db, name, text = draw(st.sampled_from(_POOL))
    sql = f"INSERT INTO {text} SELECT * FROM {join_list()}" + where()
    ro_seen.insert(0, (db, name, "__target__"))
    return sql, "INSERT_SELECT", expected({"__target__"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dml())
def test_generated_dml_matches_the_oracle_in_both_readers(case):
    sql, command, tables = case
    for info in (sqlglot_first(sql), tokens_only(sql)):
        assert (info.command, info.tables) == (command, tables), (sql, info.method)


def test_executable_comments_run_for_the_same_releases_as_in_the_shell():
    """One emulated release for both readers: a logged statement and a typed one agree on /*!NNNNN */."""
    from rpl_sql.classify import classify
    from rpl_sql.language.lexer import MYSQL_VERSION_ID
    from rpl_sql.language.parser import parse_statement
    from rpl_sql.language.statements import OtherSQL

    for version, runs in ((MYSQL_VERSION_ID, True), (MYSQL_VERSION_ID + 10, False)):
        logged = classify(f"/*!{version} DROP TABLE t1 */").command
        typed = parse_statement(f"/*!{version} STOP REPLICA */")
        assert (logged == "DROP_TABLE") is runs, (version, logged)
        assert (not isinstance(typed, OtherSQL)) is runs, (version, typed)
