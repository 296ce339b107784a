"""SHOW REPLICA STATUS says only what is true: the receiver's errors as MySQL names them, on one line, cleared
once it reads again; Seconds_Behind_Source NULL while the receiver is down; reconnects that start over quickly
after each outage."""
from __future__ import annotations

import os
import threading
import time

import pymysql
import pytest
from deltalake.exceptions import DeltaError

import rpl_sql
from tests.support.mariadb import MariaDBServer, SourceWorkload, _require, running
from rpl_sql.storage.replica_catalog import Catalog
from rpl_sql.pipeline.replica.merge import read_all
from rpl_sql.storage import service_status
from rpl_sql.pipeline.replica.thread_errors import io_error
from rpl_sql.pipeline.ingest_position import IngestError
from tests.pipeline.replica.test_replica_service import caught_up, start_service, status, stop_service, wait_for


@pytest.mark.parametrize("error, code, errno", [
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'"), 2003, None),
    (pymysql.err.OperationalError(1045, "Access denied for user 'repl'"), 1045, None),
    (ConnectionResetError(104, "Connection reset by peer"), 2003, None),
    (OSError(28, "No space left on device"), 1026, 28),
    (DeltaError("Generic error: Failed to write: No space left on device (os error 28)"), 1026, 28),
    (OSError(122, "Disk quota exceeded"), 1026, 122),
    (DeltaError("Generic error: Failed to write: Disk quota exceeded (os error 122)"), 1026, 122),
    (IngestError("the events table refused the batch"), 13114, None),
])
def test_receiver_errors_are_named_as_mysql_names_them(error, code, errno):
    got, message = io_error(error)
    assert got == code and "\n" not in message
    if errno is not None:
        assert f"(errno: {errno} - " in message


def test_errors_and_lag_in_the_status_tell_the_truth(tmp_path):
    st = service_status.ChannelStatus("a", pid=os.getpid(), updated=time.time(), io="Connecting", sql="Yes",
                                      seconds_behind=0,
                                      last_sql_error=[1146, "\x1b[31mTable 'crm.t'\x1b[0m\ndoesn't exist", "x"])
    service_status.write_status(str(tmp_path), st)
    st = service_status.read_status(str(tmp_path), "a")
    assert st.last_sql_error[1] == "Table 'crm.t' doesn't exist"
    shown = service_status.shown(st, True, True)
    assert shown["seconds_behind"] is None  # the receiver is not connected: MySQL shows NULL
    st.io = "Yes"
    assert service_status.shown(st, True, True)["seconds_behind"] == 0


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    with running(tmp_path_factory, 701) as (server,):
        yield server


def test_outages_are_reported_then_cleared_and_reconnects_start_over(warehouse, src):
    src.reset()
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + ";\nSTART REPLICA")
    proc = start_service(warehouse)
    try:
        wait_for(lambda: status(session)["Replica_IO_Running"] == "Yes", "the IO thread")
        for outage in (9.0, 2.0):  # the first one grows the backoff (1, 2, 4, 8 s); the second starts over
            src.stop()  # the connection is lost (2013), then connecting fails (2003)
            row = wait_for(lambda: (r := status(session))["Last_IO_Errno"] == 2003 and r, "the receiver's error")
            assert row["Replica_IO_Running"] == "Connecting"
            assert row["Seconds_Behind_Source"] is None
            first_wait = row["Replica_IO_State"]
            time.sleep(outage)
            src.start()
            wait_for(lambda: status(session)["Replica_IO_Running"] == "Yes", "the reconnect", 60)
            row = status(session)
            assert (row["Last_IO_Errno"], row["Last_IO_Error"]) == (0, "")  # cleared once it reads again
        # the second outage's first retry waits 1 s (2 s if the status was read after the second failure), not
        # the 16 s the first outage had grown it to
        assert first_wait.endswith(("(retry in 1 s)", "(retry in 2 s)")), first_wait
    finally:
        stop_service(proc, warehouse)


def test_another_server_at_the_source_address_stops_the_receiver(warehouse, tmp_path_factory):
    """A fresh server (another server_id and datadir) comes up on the source's host and port: the channel must
    not read its binlog as if it were the old one's. The receiver stops with 13117 naming both servers, in the
    batch ingest as in the service; Source_Server_Id shows the server it read."""
    from rpl_sql.pipeline.binlog import SourceChangedError, ingest_channel

    _require()
    first = MariaDBServer(tmp_path_factory.mktemp("identity_a"), server_id=801).start()
    second = MariaDBServer(tmp_path_factory.mktemp("identity_b"), server_id=802).start()
    try:
        second.stop()
        first.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE d", "CREATE TABLE d.t (k INT PRIMARY KEY)",
                      "INSERT INTO d.t VALUES (1)")
        session = rpl_sql.connect(warehouse)
        session.execute(first.channel_sql("a") + ";\nSTART REPLICA")
        proc = start_service(warehouse)
        try:
            wait_for(lambda: status(session)["Source_Server_Id"] == 801, "Source_Server_Id")
        finally:
            stop_service(proc, warehouse)
        first.stop()
        second.port = first.port  # the other server, at the same address
        second.start()
        second.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE other",
                       "CREATE TABLE other.t (k INT PRIMARY KEY)", "INSERT INTO other.t VALUES (2)")
        with pytest.raises(SourceChangedError) as e:
            ingest_channel(warehouse, "a")
        assert "server_id 801 -> 802" in str(e.value)
        proc = start_service(warehouse)
        try:
            row = wait_for(lambda: (r := status(session))["Last_IO_Errno"] and r, "the receiver's error")
            assert row["Last_IO_Errno"] == 13117 and "server_id 801 -> 802" in row["Last_IO_Error"]
            wait_for(lambda: status(session)["Replica_IO_Running"] == "No", "the IO thread to stop")
            assert not session.state.channel("a").io_running  # stopped, as a fatal receiver error does
        finally:
            stop_service(proc, warehouse)
        from tests.pipeline.replica.test_replica import _ours
        assert "other" not in _ours(warehouse, ["a"])  # nothing of the other server landed
    finally:
        first.stop()
        second.stop()


def test_without_a_service_the_status_says_nothing_reads_the_source(warehouse):
    """START REPLICA on a warehouse no service ever ran: the threads are asked for, but no receiver reads the
    source (it used to show Replica_IO_Running: Yes and a lag of 0)."""
    session = rpl_sql.connect(warehouse)
    session.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a'; START REPLICA")
    row = status(session)
    assert (row["Replica_IO_Running"], row["Replica_SQL_Running"], row["Seconds_Behind_Source"]) == \
        ("Connecting", "Yes", None)
    assert "rpl-sql replica" in row["Replica_IO_State"]
    session.execute("STOP REPLICA")
    row = status(session)
    assert (row["Replica_IO_Running"], row["Replica_SQL_Running"], row["Replica_IO_State"]) == ("No", "No", "")


def _kill_binlog_dump(server) -> int:
    """KILL the source's binlog dump threads (as a DBA, a proxy or net_write_timeout ends the connection)."""
    ids = [r[0] for r in server.execute("SELECT id FROM information_schema.processlist "
                                        "WHERE command LIKE 'Binlog Dump%'")]
    for i in ids:
        try:
            server.execute(f"KILL {i}")
        except pymysql.err.OperationalError:  # it ended on its own meanwhile
            pass
    return len(ids)


@pytest.mark.parametrize("auto_position", [False, True], ids=["file-position", "gtid-auto-position"])
def test_a_binlog_connection_the_source_ends_resumes_from_what_landed(warehouse, src, auto_position):
    """The source ends the receiver's binlog connection, between transactions and while it sends a large one:
    the receiver reconnects from what it landed (whole transactions), as MySQL's IO thread does from its relay
    log, never from where the dump library last stood. Nothing lands twice (a keyless table would hold the row
    twice, silently) and nothing is lost."""
    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE d", "CREATE TABLE d.t (v INT, pad CHAR(200))")
    sql = src.channel_sql("a")
    if auto_position:
        sql = sql.replace(" FOR CHANNEL", ", SOURCE_AUTO_POSITION = 1 FOR CHANNEL")
    session = rpl_sql.connect(warehouse)
    session.execute(sql + ";\nSTART REPLICA")
    proc = start_service(warehouse)
    try:
        n = 0
        for round_ in range(4):
            for _ in range(5):
                n += 1
                src.execute("SET SESSION binlog_format = ROW", f"INSERT INTO d.t VALUES ({n}, 'x')")
            caught_up(warehouse, src)
            if round_ == 0:  # the receiver starts again from what landed (with GTIDs landed: auto-position)
                session.execute("STOP REPLICA IO_THREAD FOR CHANNEL 'a'")
                session.execute("START REPLICA IO_THREAD FOR CHANNEL 'a'")
            big = SourceWorkload(src, lambda conn, cur, lo=n: cur.execute(
                f"INSERT INTO d.t SELECT {lo} + seq, 'big' FROM d.seq_1_to_20000"), "SET SESSION binlog_format = ROW")
            big.start()
            killed = 0
            while not big.done.is_set() or killed == 0:  # while the big transaction is written and sent
                killed += _kill_binlog_dump(src)
                time.sleep(0.02)
            assert not big.failed and killed
            n += 20000
            caught_up(warehouse, src, timeout=120)
        theirs = sorted(r[0] for r in src.execute("SELECT v FROM d.t"))
        cat = Catalog.load(warehouse, "a")
        ours = sorted(read_all(cat.data_path(cat.table("d", "t"))).column("v").to_pylist())
        assert len(ours) == len(theirs) and ours == theirs
        assert status(session)["Last_SQL_Errno"] == 0
    finally:
        stop_service(proc, warehouse)


def test_a_source_gone_silent_is_reconnected_after_the_net_timeout(warehouse, src):
    """The network between the receiver and its source drops every packet without a reset: nothing arrives,
    not even the heartbeats. After --net-timeout seconds (replica_net_timeout) the receiver says 2013 and
    connects again instead of waiting, and showing Replica_IO_Running Yes, forever; once the network is back
    it reads on from what landed, and SIGTERM stops it meanwhile without waiting for the source."""
    from tests.support.tcp_proxy import SilentableProxy

    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE d", "CREATE TABLE d.t (k INT PRIMARY KEY)",
                "INSERT INTO d.t VALUES (1)")
    with SilentableProxy(src.port) as net:
        session = rpl_sql.connect(warehouse)
        session.execute(src.channel_sql("a", port=net.port) + ";\nSTART REPLICA")
        proc = start_service(warehouse, "--net-timeout", "3")
        try:
            caught_up(warehouse, src)
            net.silence()
            src.execute("SET SESSION binlog_format = ROW", "INSERT INTO d.t VALUES (2)")
            time.sleep(1.5)
            assert status(session)["Replica_IO_Running"] == "Yes"  # within the timeout it waits, as MySQL's
            row = wait_for(lambda: (r := status(session))["Last_IO_Errno"] and r, "the receiver's error", 30)
            assert row["Last_IO_Errno"] == 2013 and row["Replica_IO_Running"] == "Connecting", row
            net.restore()
            caught_up(warehouse, src)
            assert status(session)["Last_IO_Errno"] == 0
            cat = Catalog.load(warehouse, "a")
            assert sorted(read_all(cat.data_path(cat.table("d", "t"))).column("k").to_pylist()) == [1, 2]
        finally:
            stop_service(proc, warehouse)
        proc = start_service(warehouse, "--net-timeout", "600")
        try:
            wait_for(lambda: status(session)["Replica_IO_Running"] == "Yes", "the IO thread")
            net.silence()
            time.sleep(2)
            # STOP REPLICA IO_THREAD shuts the silent read instead of waiting 600 s for it (STOP gives up
            # waiting after 60 s); the stop is no error
            session.execute("STOP REPLICA IO_THREAD FOR CHANNEL 'a'")
            assert service_status.read_status(warehouse, "a").io == "No"  # the service's word, not the flag's
            assert status(session)["Last_IO_Errno"] == 0
            net.restore()
            session.execute("START REPLICA IO_THREAD FOR CHANNEL 'a'")
            src.execute("SET SESSION binlog_format = ROW", "INSERT INTO d.t VALUES (3)")
            caught_up(warehouse, src)
            net.silence()
            time.sleep(2)
        finally:  # and so does SIGTERM
            assert stop_service(proc, warehouse, group=False) == 0
        assert status(session)["Last_IO_Errno"] == 0


def test_a_batch_ingest_gives_a_source_gone_silent_up(warehouse, src):
    """`rpl-sql ingest` reads up to the binlog's end and returns; a source that goes silent on the way fails it
    with 2013 after the net timeout instead of leaving it waiting forever, and the next run lands the rest."""
    from rpl_sql.pipeline.binlog import BinlogIngest
    from tests.support.tcp_proxy import SilentableProxy

    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE d", "CREATE TABLE d.t (k INT, pad CHAR(250))",
                *[f"INSERT INTO d.t SELECT seq, REPEAT('x', 250) FROM d.seq_{i * 50000 + 1}_to_{(i + 1) * 50000}"
                  for i in range(4)])  # 50 MB of binlog: more than the sockets buffer
    with SilentableProxy(src.port) as net:
        session = rpl_sql.connect(warehouse)
        session.execute(src.channel_sql("a", port=net.port))
        outcome = []

        def ingest():
            try:
                outcome.append(BinlogIngest(warehouse, "a", net_timeout=3, progress=lambda r: net.silence(),
                                            progress_every=0).run())
            except Exception as e:
                outcome.append(e)
        reader = threading.Thread(target=ingest, daemon=True)
        reader.start()
        reader.join(60)
        assert outcome, "the ingest still waits on the silent source after 60 s"
        assert isinstance(outcome[0], pymysql.OperationalError) and outcome[0].args[0] == 2013, outcome
        net.restore()
        report = BinlogIngest(warehouse, "a").run()
        assert report.end == src.binlog_end()
