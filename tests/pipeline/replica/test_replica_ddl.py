"""DDL the replica cannot apply exactly stops the channel, as a MySQL replica stops, instead of passing by in
silence: DDL on a table the replica does not have (a db.table name a rewrite does not cover), and partition
maintenance that removes rows. A real MariaDB replica with the same filters is the oracle where it stops too."""
from __future__ import annotations

import pytest
from deltalake import DeltaTable

from tests.support.mariadb import running
from rpl_sql.storage.replica_catalog import Catalog
from rpl_sql.pipeline.replica.merge import read_all
from tests.pipeline.replica.test_replica_service import (caught_up, fresh_pair, start_service, status, stop_service,
                                                         wait_for)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """A source and the oracle replica."""
    with running(tmp_path_factory, 901, 902) as pair:
        yield pair


def _oracle_error(oracle) -> tuple[int, str]:
    def stopped():
        conn = oracle.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW SLAVE 'a' STATUS")
                names = [d[0] for d in cur.description]
                row = dict(zip(names, cur.fetchone()))
        finally:
            conn.close()
        return row["Last_SQL_Errno"] and (row["Last_SQL_Errno"], row["Last_SQL_Error"])
    return wait_for(stopped, "the oracle replica's error", why=lambda: str(oracle.execute("SHOW ALL SLAVES STATUS")))


def _rows(warehouse, db, name) -> list:
    cat = Catalog.load(warehouse, "a")
    return sorted(read_all(cat.data_path(cat.table(db, name))).column(0).to_pylist())


@pytest.mark.parametrize("ddl, code", [
    ("ALTER TABLE shop.orders ADD COLUMN note VARCHAR(10) DEFAULT 'new'", 1146),
    ("DROP TABLE shop.orders", 1051),
    ("TRUNCATE TABLE shop.orders", 1146),
])
def test_ddl_on_a_table_the_rewrite_does_not_cover_stops_as_on_mariadb(warehouse, servers, ddl, code):
    """Run without a default database, `shop.orders` is not rewritten to `crm.orders`: the replica has no such
    table. MariaDB's replica stops (1146/1051; for DROP TABLE with slave_ddl_exec_mode=STRICT, MySQL's only
    mode, as MariaDB's IDEMPOTENT default reads it as DROP TABLE IF EXISTS); so does the service, before the
    transaction, naming it."""
    src, oracle = servers
    oracle.execute("SET GLOBAL slave_ddl_exec_mode = 'STRICT'")
    session = fresh_pair(warehouse, src, oracle, "REPLICATE_REWRITE_DB = ((shop, crm))",
                         {"replicate_rewrite_db": "shop->crm"})
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE shop", "USE shop",
                "CREATE TABLE orders (id INT PRIMARY KEY)", "INSERT INTO orders VALUES (1)")
    before = src.execute("SELECT @@gtid_binlog_pos")[0][0]
    src.execute("SET SESSION binlog_format = ROW", ddl, database=None)
    proc = start_service(warehouse)
    try:
        row = wait_for(lambda: (r := status(session))["Last_SQL_Errno"] and r, "the SQL thread's error")
        theirs = _oracle_error(oracle)
        assert row["Last_SQL_Errno"] == theirs[0] == code, (row["Last_SQL_Error"], theirs)
        # it names the table and the statement (as the source logged it: DROP TABLE `shop`.`orders` /* ... */)
        assert "'shop.orders'" in row["Last_SQL_Error"] and f"'{ddl.split()[0]} TABLE " in row["Last_SQL_Error"]
        assert row["Executed_Gtid_Set"] == before  # stopped before the DDL's transaction
        assert _rows(warehouse, "crm", "orders") == [1]
    finally:
        stop_service(proc, warehouse)


def test_partition_ddl_that_removes_rows_stops_the_channel(warehouse, servers):
    """DROP PARTITION deletes the partition's rows on the source (the oracle replica applies it); the replica
    table does not know the partitions, so the service stops before it instead of keeping the rows. ADD
    PARTITION changes no row and passes."""
    src, oracle = servers
    session = fresh_pair(warehouse, src, oracle, "REPLICATE_WILD_DO_TABLE = ('part.%')",
                         {"replicate_wild_do_table": "part.%"})
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE part",
                "CREATE TABLE part.h (k INT PRIMARY KEY) PARTITION BY RANGE (k) (PARTITION p0 VALUES LESS THAN (10), "
                "PARTITION p1 VALUES LESS THAN (100))", "INSERT INTO part.h VALUES (5), (50)",
                "ALTER TABLE part.h ADD PARTITION (PARTITION p2 VALUES LESS THAN (1000))",
                "INSERT INTO part.h VALUES (500)")
    before = src.execute("SELECT @@gtid_binlog_pos")[0][0]
    src.execute("ALTER TABLE part.h DROP PARTITION p0")
    src.execute("SET SESSION binlog_format = ROW", "INSERT INTO part.h VALUES (600)")
    proc = start_service(warehouse)
    try:
        row = wait_for(lambda: (r := status(session))["Last_SQL_Errno"] and r, "the SQL thread's error")
        assert row["Last_SQL_Errno"] == 1105 and "DROP PARTITION" in row["Last_SQL_Error"]
        assert "sql_replica_skip_counter" in row["Last_SQL_Error"] and row["Executed_Gtid_Set"] == before
        assert _rows(warehouse, "part", "h") == [5, 50, 500]
        oracle.caught_up(src, "a")
        assert [r[0] for r in oracle.execute("SELECT k FROM part.h ORDER BY k")] == [50, 500, 600]
        # the way out the message gives: the replica table made to hold what the source's holds, then the skip
        cat = Catalog.load(warehouse, "a")
        DeltaTable(cat.data_path(cat.table("part", "h"))).delete("k < 10")
        session.execute("SET GLOBAL sql_replica_skip_counter = 1;\nSTART REPLICA SQL_THREAD FOR CHANNEL 'a'")
        caught_up(warehouse, src)
        assert _rows(warehouse, "part", "h") == [50, 500, 600] and status(session)["Last_SQL_Errno"] == 0
    finally:
        stop_service(proc, warehouse)


def test_drop_table_if_exists_of_a_missing_table_passes(warehouse, servers):
    src, oracle = servers
    session = fresh_pair(warehouse, src, oracle, "REPLICATE_WILD_DO_TABLE = ('d.%')",
                         {"replicate_wild_do_table": "d.%"})
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE d", "CREATE TABLE d.t (k INT PRIMARY KEY)",
                "INSERT INTO d.t VALUES (1)", "DROP TABLE IF EXISTS d.nope", "DROP TABLE IF EXISTS d.t")
    proc = start_service(warehouse)
    try:
        caught_up(warehouse, src)
        assert status(session)["Last_SQL_Errno"] == 0
        assert Catalog.load(warehouse, "a").table("d", "t") is None
    finally:
        stop_service(proc, warehouse)


def test_alter_table_is_applied_exactly_or_stops_the_channel(warehouse, servers):
    """ADD COLUMN gives the rows already there what the source gives them: a literal or parenthesised default,
    CURRENT_TIMESTAMP of a TIMESTAMP (the ALTER's time), as the oracle replica has them. An ALTER rpl_sql cannot
    read (MariaDB's parenthesised column list) stops the channel before it, naming it; the skip the message
    gives goes past it, and the next row event reshapes the table."""
    src, oracle = servers
    session = fresh_pair(warehouse, src, oracle, "REPLICATE_WILD_DO_TABLE = ('alt.%')",
                         {"replicate_wild_do_table": "alt.%"})
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE alt",
                "CREATE TABLE alt.t (id INT PRIMARY KEY, a INT)", "INSERT INTO alt.t VALUES (1, 10), (2, 20)",
                "ALTER TABLE alt.t ADD COLUMN d5 INT NOT NULL DEFAULT (5)",
                "ALTER TABLE alt.t ADD COLUMN ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
                "INSERT INTO alt.t (id, a, ts) VALUES (3, 30, '2001-02-03 04:05:06')")
    before = src.execute("SELECT @@gtid_binlog_pos")[0][0]
    src.execute("ALTER TABLE alt.t ADD COLUMN (c INT DEFAULT 7, e INT)")
    src.execute("SET SESSION binlog_format = ROW",
                "INSERT INTO alt.t (id, a, ts) VALUES (4, 40, '2001-02-03 04:05:06')")
    proc = start_service(warehouse)
    try:
        row = wait_for(lambda: (r := status(session))["Last_SQL_Errno"] and r, "the SQL thread's error")
        assert row["Last_SQL_Errno"] == 1105 and "ADD COLUMN (c INT DEFAULT 7, e INT)" in row["Last_SQL_Error"]
        assert "alt.t" in row["Last_SQL_Error"] and "sql_replica_skip_counter = 1" in row["Last_SQL_Error"]
        assert row["Executed_Gtid_Set"] == before
        oracle.caught_up(src, "a")
        theirs = oracle.execute("SELECT id, a, d5, UNIX_TIMESTAMP(ts) FROM alt.t WHERE id <= 3 ORDER BY id")
        cat = Catalog.load(warehouse, "a")
        ours = read_all(cat.data_path(cat.table("alt", "t"))).sort_by("id").to_pylist()
        assert [(r["id"], r["a"], r["d5"], int(r["ts"].timestamp())) for r in ours] == [tuple(r) for r in theirs]

        session.execute("SET GLOBAL sql_replica_skip_counter = 1;\nSTART REPLICA SQL_THREAD FOR CHANNEL 'a'")
        caught_up(warehouse, src)
        assert status(session)["Last_SQL_Errno"] == 0
        cat = Catalog.load(warehouse, "a")
        ours = read_all(cat.data_path(cat.table("alt", "t"))).sort_by("id").to_pylist()
        assert [(r["id"], r["c"], r["e"]) for r in ours] == [(1, None, None), (2, None, None), (3, None, None),
                                                            (4, 7, None)]  # as the message said
    finally:
        stop_service(proc, warehouse)
