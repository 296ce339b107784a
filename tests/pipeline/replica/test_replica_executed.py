"""The executed position means "in the replica tables", as in MySQL: Executed_Gtid_Set and Exec_Source_Log_Pos
never run ahead of what a reader of the tables sees, an error at the table stage leaves them before the failing
transaction, and the skip counter and IDEMPOTENT mode act on that transaction, not the next one."""
from __future__ import annotations

import threading

import pytest
from deltalake import DeltaTable

import rpl_sql
from tests.support.mariadb import running
from rpl_sql.storage.replica_catalog import Catalog
from rpl_sql.pipeline.replica.merge import read_all
from tests.pipeline.replica.test_replica_service import caught_up, start_service, status, stop_service, wait_for


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    with running(tmp_path_factory, 601) as (server,):
        yield server


def _gtid(src) -> str:
    return src.execute("SELECT @@gtid_binlog_pos")[0][0]


def _rows(warehouse, db, name) -> list:
    cat = Catalog.load(warehouse, "a")
    entry = cat.table(db, name)
    if entry is None or not DeltaTable.is_deltatable(cat.data_path(entry)):
        return []
    return sorted(read_all(cat.data_path(entry)).column(0).to_pylist())


def _wedge(warehouse, src):
    """The issue's reproduction on a fresh source, under REPLICATE_WILD_DO_TABLE = ('wedge.t%'): the session, and
    each statement's (GTID set, binlog end) once the source ran it."""
    src.reset()
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + ";\nCHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = ('wedge.t%') "
                    "FOR CHANNEL 'a';\nSTART REPLICA")
    marks = []
    for sql in ("CREATE DATABASE wedge", "CREATE TABLE wedge.t1 (id INT PRIMARY KEY)",
                "INSERT INTO wedge.t1 VALUES (1)", "CREATE TABLE wedge.t2 (id INT PRIMARY KEY)",
                "INSERT INTO wedge.t2 VALUES (2)"):
        src.execute("SET SESSION binlog_format = ROW", sql)
        marks.append((_gtid(src), src.binlog_end()))
    return session, marks


def test_an_error_at_the_table_stage_leaves_the_position_before_its_transaction(warehouse, src):
    """The issue's reproduction: CREATE TABLE in a database the replica never got stops with 1049. The executed
    GTIDs and position are those before it; the skip counter then skips exactly it."""
    session, marks = _wedge(warehouse, src)
    proc = start_service(warehouse)
    try:
        row = wait_for(lambda: (r := status(session))["Last_SQL_Errno"] and r, "the SQL thread's error")
        assert row["Last_SQL_Errno"] == 1049 and row["Replica_SQL_Running"] == "No"
        assert row["Executed_Gtid_Set"] == marks[0][0]  # CREATE DATABASE (ignored) is executed; CREATE TABLE not
        assert (row["Relay_Source_Log_File"], row["Exec_Source_Log_Pos"]) == marks[0][1]
        session.execute("SET GLOBAL sql_replica_skip_counter = 1;\nSTART REPLICA SQL_THREAD FOR CHANNEL 'a'")
        caught_up(warehouse, src)
        # the skip went past CREATE TABLE wedge.t1 only: the insert is applied (its table made from the table map,
        # which puts the database on the replica, so CREATE TABLE wedge.t2 then finds it)
        row = status(session)
        assert (row["Last_SQL_Errno"], row["Skip_Counter"], row["Executed_Gtid_Set"]) == (0, 0, marks[-1][0])
        assert _rows(warehouse, "wedge", "t2") == [2]
        assert _rows(warehouse, "wedge", "t1") == [1]
    finally:
        stop_service(proc, warehouse)


def test_a_read_after_the_gtid_is_executed_sees_the_row(warehouse, src):
    """Read-your-writes under a steady write load: each marker row's GTID awaited with WAIT_FOR_EXECUTED_GTID_SET
    (and MariaDB's MASTER_GTID_WAIT, in the shell's own SQL) is in its replica table the moment the wait returns."""
    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE ryw", "CREATE TABLE ryw.load (k INT PRIMARY KEY, "
                "v VARCHAR(40))", "CREATE TABLE ryw.marks (k INT PRIMARY KEY)")
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + ";\nSTART REPLICA")
    stop = threading.Event()

    def load():
        conn = src.connect()
        k = 0
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_format = ROW")
            while not stop.is_set():
                cur.execute("INSERT INTO ryw.load VALUES " + ", ".join(f"({k + i}, 'x')" for i in range(100)))
                k += 100
                stop.wait(0.05)  # about 2,000 rows/s in 20 transactions/s
        conn.close()

    proc = start_service(warehouse)
    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    try:
        for i in range(15):
            src.execute("SET SESSION binlog_format = ROW", f"INSERT INTO ryw.marks VALUES ({i})")
            gtid = _gtid(src)
            if i % 2:
                assert session.wait_for_executed_gtid_set(gtid, 60) == 0
            else:
                [res] = session.execute(f"SELECT MASTER_GTID_WAIT('{gtid}', 60)")
                assert res.rows == [(0,)]
            assert i in _rows(warehouse, "ryw", "marks"), (i, gtid, status(session))
        assert session.wait_for_executed_gtid_set("0-601-999999999", 0.2) == 1  # not yet: a timeout, 1
    finally:
        stop.set()
        writer.join(30)
        stop_service(proc, warehouse)


def test_reset_replica_forgets_the_position_and_the_unapplied_events(warehouse, src):
    """MySQL's RESET REPLICA (spec §5): positions are reset, the relay log (received, not applied) is deleted,
    filters and gtid_executed stay. The next START reads the source from its first binlog; what was received
    before the reset and never applied is discarded, not applied."""
    from rpl_sql.pipeline.applier.local import LocalApplier
    from rpl_sql.pipeline.binlog import ingest_channel

    src.reset()
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + ";\nCHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (x) FOR CHANNEL 'a';\n"
                    "START REPLICA")
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE r", "CREATE TABLE r.t (k INT PRIMARY KEY)",
                "INSERT INTO r.t VALUES (1)")
    applied_gtid = _gtid(src)
    ingest_channel(warehouse, "a")
    local = LocalApplier(warehouse)
    while local.run_batch("a") is not None:
        pass
    src.execute("SET SESSION binlog_format = ROW", "INSERT INTO r.t VALUES (2)")  # received, never applied
    received = ingest_channel(warehouse, "a")
    session.execute("STOP REPLICA FOR CHANNEL 'a'; RESET REPLICA FOR CHANNEL 'a'")
    row = status(session)
    assert (row["Source_Log_File"], row["Read_Source_Log_Pos"], row["Relay_Source_Log_File"]) == ("", 4, "")
    assert row["Executed_Gtid_Set"] == applied_gtid and row["Replicate_Ignore_DB"] == "x"  # kept, as MySQL
    session.execute("START REPLICA FOR CHANNEL 'a'")
    again = ingest_channel(warehouse, "a")
    assert again.start == (src.execute("SHOW BINARY LOGS")[0][0], 4)  # the source's first binlog
    first = local.run_batch("a")
    assert (first.end, first.applied, first.gtids) == (received.last_seq, 0, "")
    state = session.state.channel("a").applier
    assert state.seq == received.last_seq and state.executed_gtid_set == applied_gtid  # discarded, not executed
    while local.run_batch("a") is not None:
        pass
    assert session.state.channel("a").applier.executed_gtid_set == _gtid(src)  # read again, applied


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_the_spark_applier_counts_a_batch_executed_only_once_the_tables_hold_it(spark, warehouse, src, engine):
    """`rpl-sql apply --tables` and `rpl-sql replica --master` (the Spark job): the same reproduction in one
    batch. The tables refuse CREATE TABLE wedge.t1 (1049): the batch's applied commit is taken back, the
    transactions before it count as executed and nothing after; the skip counter then goes past exactly it."""
    from rpl_sql import MySQLError
    from rpl_sql.pipeline.applier import apply
    from rpl_sql.pipeline.binlog import ingest_channel

    session, marks = _wedge(warehouse, src)
    ingest_channel(warehouse, "a")
    with pytest.raises(MySQLError) as e:
        apply(spark, warehouse, ["a"], tables=True, engine=engine)
    assert e.value.code == 1049
    row = status(session)
    assert row["Executed_Gtid_Set"] == marks[0][0]
    assert (row["Relay_Source_Log_File"], row["Exec_Source_Log_Pos"]) == marks[0][1]
    session.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a';\nSET GLOBAL sql_replica_skip_counter = 1;\n"
                    "START REPLICA SQL_THREAD FOR CHANNEL 'a'")
    apply(spark, warehouse, ["a"], tables=True, engine=engine)
    row = status(session)
    assert (row["Skip_Counter"], row["Executed_Gtid_Set"]) == (0, marks[-1][0])
    assert _rows(warehouse, "wedge", "t1") == [1] and _rows(warehouse, "wedge", "t2") == [2]
