"""The replica tables against a real MariaDB replica: two MariaDB sources, per-channel filters (rewrite, wild,
do, ignore), a row-format workload with DDL and the common types; every table and database rpl_sql keeps must
equal what MariaDB's own replica, configured with the same filters, holds."""
from __future__ import annotations

import datetime as dt

import pytest
from deltalake import DeltaTable

import rpl_sql

from tests.support.mariadb import MariaDBServer, _require, two_channels
from rpl_sql.pipeline.applier import apply
from rpl_sql.pipeline.binlog import ingest_channel
from rpl_sql.storage.replica_catalog import Catalog
from rpl_sql.storage.store import DeltaStore
from rpl_sql.pipeline.replica.merge import read_all


def session_state(warehouse):
    return DeltaStore(warehouse).load().state

FILTERS_A = ("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((shop, crm)), "
             "REPLICATE_WILD_IGNORE_TABLE = ('crm.tmp%', 'crm.x\\_%') FOR CHANNEL 'a'")
FILTERS_B = ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = ('inv%.%'), "
             "REPLICATE_IGNORE_TABLE = (inv1.secret) FOR CHANNEL 'b'")
ORACLE_A = {"replicate_rewrite_db": "shop->crm", "replicate_wild_ignore_table": "crm.tmp%,crm.x\\\\_%"}
ORACLE_B = {"replicate_wild_do_table": "inv%.%", "replicate_ignore_table": "inv1.secret"}

TYPES = ("id INT UNSIGNED NOT NULL PRIMARY KEY, i8 TINYINT, u8 TINYINT UNSIGNED, i16 SMALLINT, i24 MEDIUMINT, "
         "i64 BIGINT, u64 BIGINT UNSIGNED, d DECIMAL(30,4), d2 DECIMAL(5,0), f FLOAT, g DOUBLE, "
         "v VARCHAR(40) CHARACTER SET utf8mb4, c CHAR(3), t TEXT CHARACTER SET utf8mb4, b BLOB, vb VARBINARY(8), "
         "da DATE, dtm DATETIME(6), dt0 DATETIME, ts TIMESTAMP(3) NULL, tm TIME(2), y YEAR, j JSON, "
         "e ENUM('red','green'), s SET('x','y','z'), bt BIT(10)")
ROW_1 = ("(1, -128, 255, -32768, -8388608, -9223372036854775808, 18446744073709551615, "
         "12345678901234567890.1234, 99999, 1.5, 2.25, 'héllo wörld ✓ 日本', 'ab', 'long ✓', x'00ff10', x'0102', "
         "'2024-02-29', '2024-02-29 23:59:59.999999', '1999-12-31 00:00:00', '2024-01-02 03:04:05.678', "
         "'-838:59:59.00', 2155, '{\"k\": [1, 2]}', 'green', 'z,x', b'1010101010')")
ROW_2 = "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, " \
        "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"

WORKLOAD_A = [
    "SET SESSION binlog_format = ROW",
    "CREATE DATABASE shop", "USE shop",
    f"CREATE TABLE orders ({TYPES})",
    f"INSERT INTO orders VALUES {ROW_1}, {ROW_2}",
    "INSERT INTO orders (id, v) VALUES (3, 'three'), (4, 'four'), (5, 'five')",
    "UPDATE orders SET v = 'changed ✓', d = -0.0001 WHERE id = 3",
    "UPDATE orders SET id = 30 WHERE id = 4",                       # a primary key change
    "DELETE FROM orders WHERE id = 5",
    "CREATE TABLE log (a INT, b VARCHAR(10))",                      # no primary key
    "INSERT INTO log VALUES (1, 'dup'), (1, 'dup'), (2, NULL), (3, 'x')",
    "DELETE FROM log WHERE a = 1 LIMIT 1",                          # one of two identical rows
    "UPDATE log SET b = 'upd' WHERE a = 3",
    "CREATE TABLE tmp_scratch (k INT PRIMARY KEY)", "INSERT INTO tmp_scratch VALUES (1)",   # wild-ignored
    "CREATE TABLE x_1 (k INT PRIMARY KEY)", "INSERT INTO x_1 VALUES (1)",                   # escaped _: ignored
    "CREATE TABLE xa1 (k INT PRIMARY KEY)", "INSERT INTO xa1 VALUES (1)",                   # not matched: kept
    "ALTER TABLE orders ADD COLUMN flag TINYINT NOT NULL DEFAULT 7 AFTER id, DROP COLUMN c",
    "INSERT INTO orders (id, flag) VALUES (6, 1)",
    "ALTER TABLE orders CHANGE v title VARCHAR(60) CHARACTER SET utf8mb4",
    "UPDATE orders SET title = 'renamed' WHERE id = 1",
    "CREATE TABLE gone (k INT PRIMARY KEY)", "INSERT INTO gone VALUES (1)", "DROP TABLE gone",
    "CREATE TABLE empty_one (k INT PRIMARY KEY, v DATE)",
    "RENAME TABLE log TO log2",
    "CREATE TABLE trunc (k INT PRIMARY KEY)", "INSERT INTO trunc VALUES (1), (2)", "TRUNCATE TABLE trunc",
    "INSERT INTO trunc VALUES (3)",
    "CREATE TABLE crm_direct (k INT PRIMARY KEY)",
    "CREATE DATABASE other", "CREATE TABLE other.t (k INT PRIMARY KEY)", "INSERT INTO other.t VALUES (9)",
]
WORKLOAD_B = [
    "SET SESSION binlog_format = ROW",
    "CREATE DATABASE inv1", "CREATE DATABASE inv2", "CREATE DATABASE sales",
    "CREATE TABLE inv1.stock (sku VARCHAR(20) PRIMARY KEY, qty INT, price DECIMAL(8,2))",
    "CREATE TABLE inv1.secret (k INT PRIMARY KEY)", "INSERT INTO inv1.secret VALUES (1)",
    "CREATE TABLE inv2.moves (id BIGINT NOT NULL, ts DATETIME(3), PRIMARY KEY (id, ts))",
    "CREATE TABLE sales.s (k INT PRIMARY KEY)", "INSERT INTO sales.s VALUES (1)",
    "INSERT INTO inv1.stock VALUES ('a-1', 5, 9.99), ('b\\'2', 0, NULL), ('ü', -1, 0.01)",
    "INSERT INTO inv2.moves VALUES (1, '2024-01-01 00:00:00.001'), (1, '2024-01-01 00:00:00.002')",
    "UPDATE inv1.stock SET qty = qty + 1",
    "UPDATE inv2.moves SET ts = '2025-01-01' WHERE ts = '2024-01-01 00:00:00.002'",
    "DELETE FROM inv1.stock WHERE sku = 'a-1'",
    "DROP DATABASE sales",
]


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """A third MariaDB server: the replica rpl_sql's tables are compared with."""
    _require()
    server = MariaDBServer(tmp_path_factory.mktemp("oracle"), server_id=301)
    try:
        yield server.start()
    finally:
        server.stop()


def _ours(warehouse: str, channels=("a", "b")) -> dict:
    out: dict = {}
    for ch in channels:
        cat = Catalog.load(warehouse, ch)
        for db in cat.databases.values():
            out[db] = None
        for e in cat.tables.values():
            assert e.columns is not None, f"{e.db}.{e.name} has no columns"
            t = read_all(cat.data_path(e))
            names = tuple(c["name"] for c in e.columns)
            assert tuple(t.column_names) == names
            rows = [tuple(_theirs_form(v, c) for v, c in zip(r, e.columns)) for r in
                    zip(*(t.column(n).to_pylist() for n in names))] if t.num_rows else []
            out[(e.db, e.name)] = [names] + sorted(rows, key=repr)
    return out


def _theirs_form(v, col):
    """A replica table value as pymysql returns the MariaDB column (the comparison's common form)."""
    if v is None:
        return None
    t = col["type"]
    if t == "timestamp":
        return v.replace(tzinfo=None)
    if t == "bigint" and col.get("unsigned"):
        return int(v)
    if t == "float":
        return float(f"{v:.6g}")
    if t == "bit":
        return int(v).to_bytes((col["bits"] + 7) // 8, "big")
    return v


def _normal(contents: dict) -> dict:
    def fix(v):
        if isinstance(v, dt.timedelta):
            sign = "-" if v < dt.timedelta(0) else ""
            us = abs(v) // dt.timedelta(microseconds=1)
            s, us = divmod(us, 1_000_000)
            return f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" + (f".{us:06d}" if us else "")
        return v
    out = {}
    for k, rows in contents.items():
        if rows is None:
            out[k] = None
            continue
        out[k] = [rows[0]] + sorted((tuple(fix(v) for v in r) for r in rows[1:]), key=repr)
    return out


def test_replica_tables_equal_a_mariadb_replica(spark, warehouse, mariadb_pair, oracle, monkeypatch):
    monkeypatch.setattr("rpl_sql.pipeline.replica.merge.COMPACT_EVERY", 1)  # a compaction after each merge
    m1, m2 = mariadb_pair
    session = two_channels(mariadb_pair, warehouse, ";\n".join([FILTERS_A, FILTERS_B, "START REPLICA"]))
    oracle.stop_following()
    oracle.reset()
    oracle.execute("CREATE DATABASE crm")  # a MySQL-family replica needs the rewrite target to exist
    m1.execute(*WORKLOAD_A)
    m2.execute(*WORKLOAD_B)
    oracle.follow(m1, "a", ORACLE_A)
    oracle.follow(m2, "b", ORACLE_B)
    for ch in ("a", "b"):
        ingest_channel(warehouse, ch, batch_rows=7)  # several ingest commits
    report = apply(spark, warehouse, batch_size=5, tables=True)  # a batch per ingest commit: DDL inside batches
    assert {c.channel: c.status for c in report.channels} == {"a": "applied", "b": "applied"}
    oracle.caught_up(m1, "a")
    oracle.caught_up(m2, "b")
    theirs = oracle.contents()
    theirs = _normal(theirs)
    ours = _normal(_ours(warehouse))
    assert {("crm", "orders"), ("crm", "log2"), ("crm", "xa1"), ("crm", "empty_one"), ("other", "t"),
            ("inv1", "stock"), ("inv2", "moves"), "shop", "crm"} <= set(ours)
    assert not {("crm", "tmp_scratch"), ("crm", "x_1"), ("crm", "gone"), ("inv1", "secret"), "sales"} & set(ours)
    assert len(ours[("crm", "orders")]) == 1 + 5 and ours[("crm", "orders")][0][:3] == ("id", "flag", "i8")
    assert sorted(map(str, ours)) == sorted(map(str, theirs))
    for k in theirs:
        assert ours[k] == theirs[k], k
    # Types, not strings: the replica table keeps the source's types.
    orders = Catalog.load(warehouse, "a").table("crm", "orders")
    orders_dt = DeltaTable(Catalog.load(warehouse, "a").data_path(orders))
    assert any(h.get("operation") in ("OPTIMIZE", "COMPACT SMALL FILES") for h in orders_dt.history())  # compacted
    schema = read_all(Catalog.load(warehouse, "a").data_path(orders)).schema
    assert str(schema.field("u64").type) == "decimal128(20, 0)" and str(schema.field("d").type) == "decimal128(30, 4)"

    # By name in Spark, typed and current; a table created later appears at the session's next statement.
    s = rpl_sql.register(spark, session=session)
    got = spark.sql("SELECT id, title, u64, dtm FROM crm.orders ORDER BY id").collect()
    assert [r.id for r in got] == sorted(r[0] for r in ours[("crm", "orders")][1:])
    assert got[0].title == "renamed" and got[0].u64 == 2 ** 64 - 1
    types = {r.col_name: r.data_type for r in spark.sql("DESCRIBE crm.orders").collect()}
    assert (types["u64"], types["dtm"], types["ts"], types["b"]) == ("decimal(20,0)", "timestamp_ntz", "timestamp",
                                                                     "binary")
    assert spark.sql("SELECT count(*) AS n FROM inv1.stock").collect()[0].n == len(ours[("inv1", "stock")]) - 1
    m1.execute("SET SESSION binlog_format = ROW", "CREATE TABLE shop.later (k INT PRIMARY KEY)",
               "INSERT INTO shop.later VALUES (5)")
    ingest_channel(warehouse, "a")
    apply(spark, warehouse, ["a"], tables=True)
    assert [r.k for r in s.sql("SELECT k FROM crm.later").collect()] == [5]


def test_replica_tables_resume_exactly_after_a_crash_between_commits(spark, warehouse, mariadb_pair):
    """A crash after some table commits but before the catalog's: the next run applies nothing twice."""
    from rpl_sql.pipeline.replica.materialize import ReplicaTables

    m1, _ = mariadb_pair
    two_channels(mariadb_pair, warehouse, ";\n".join([FILTERS_A, "START REPLICA"]))
    m1.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE shop", "USE shop",
               "CREATE TABLE n (a INT)", "CREATE TABLE p (k INT PRIMARY KEY, v INT)",
               *[f"INSERT INTO n VALUES ({i})" for i in range(5)],
               *[f"INSERT INTO p VALUES ({i}, {i})" for i in range(5)], "UPDATE p SET v = v + 10")
    ingest_channel(warehouse, "a")
    apply(spark, warehouse, ["a"])  # the event log only
    rt = ReplicaTables(warehouse, "a")
    orig_commit = Catalog.commit
    end = session_state(warehouse).channel("a").applier.seq

    def crash(self, seq):
        if seq == end:  # the tables' merges and the DDL commits went through; the batch's end did not
            raise KeyboardInterrupt
        return orig_commit(self, seq)

    Catalog.commit = crash
    try:
        with pytest.raises(KeyboardInterrupt):
            rt.catch_up()
    finally:
        Catalog.commit = orig_commit
    # The rerun is the CLI's: `rpl-sql apply --tables` completes the replica tables before applying more.
    from rpl_sql.cli.commands import apply_main

    assert apply_main(["--warehouse", warehouse, "--channel", "a", "--tables", "--exec-mode", "strict", "-S"]) == 0
    assert Catalog.load(warehouse, "a").seq == end
    cat = Catalog.load(warehouse, "a")
    n = read_all(cat.data_path(cat.table("crm", "n")))
    p = read_all(cat.data_path(cat.table("crm", "p")))
    assert sorted(n.column("a").to_pylist()) == [0, 1, 2, 3, 4]
    assert sorted(zip(p.column("k").to_pylist(), p.column("v").to_pylist())) == [(i, i + 10) for i in range(5)]


def test_one_replica_tables_object_across_batches_with_ddl_between_them(spark, warehouse, mariadb_pair):
    """As the service's SQL thread runs: one ReplicaTables (its catalog and the tables it keeps open) over many
    small batches, with TRUNCATE, ALTER, RENAME, DROP and a new table under an old name between merges."""
    from rpl_sql.pipeline.applier.local import LocalApplier
    from rpl_sql.pipeline.replica.materialize import ReplicaTables

    m1, _ = mariadb_pair
    two_channels(mariadb_pair, warehouse, ";\n".join([FILTERS_A, "START REPLICA"]))
    m1.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE shop", "USE shop",
               "CREATE TABLE p (k INT PRIMARY KEY, v INT)", "INSERT INTO p VALUES (1, 1), (2, 2)",
               "UPDATE p SET v = v + 1", "TRUNCATE TABLE p", "INSERT INTO p VALUES (3, 3)",
               "UPDATE p SET v = 30 WHERE k = 3", "ALTER TABLE p ADD COLUMN w INT DEFAULT 7",
               "INSERT INTO p VALUES (4, 4, 4)", "UPDATE p SET w = 8 WHERE k = 3", "RENAME TABLE p TO q",
               "CREATE TABLE p (k INT PRIMARY KEY)", "INSERT INTO p VALUES (9)", "DELETE FROM q WHERE k = 4",
               "DROP TABLE p", "CREATE TABLE p (k INT PRIMARY KEY, s VARCHAR(5))", "INSERT INTO p VALUES (1, 'x')",
               "UPDATE p SET s = 'y'", "UPDATE q SET k = 5 WHERE k = 3")
    ingest_channel(warehouse, "a")
    local = LocalApplier(warehouse, batch_size=2)
    tables = ReplicaTables(warehouse, "a")
    local.stop_before = tables.statement_conflict
    batches = 0
    while (rec := local.run_batch("a")) is not None:
        tables.catch_up(rec.end, handed=local.last_applied)
        batches += 1
    assert batches > 10
    cat = Catalog.load(warehouse, "a")
    assert sorted(e.name for e in cat.tables.values()) == ["p", "q"]
    q = read_all(cat.data_path(cat.table("crm", "q")))
    p = read_all(cat.data_path(cat.table("crm", "p")))
    assert sorted(q.to_pylist(), key=repr) == [{"k": 5, "v": 30, "w": 8}]
    assert p.to_pylist() == [{"k": 1, "s": "y"}]
