"""`rpl-sql relay` (WL#2387 beside the source) with real MariaDB servers: a primary, the relay, a stock MariaDB
replica connected to the relay with no filters of its own (the relay holds them), and a second, direct MariaDB
replica given the same filters as `replicate_*` settings: the oracle.

A seeded workload in row format (inserts, updates, deletes, DDL, transactions spanning kept and ignored tables,
transactions wholly ignored, a binlog rotation) runs; the two replicas end with equal tables and equal GTID
positions, the relay's replica at the source's own file and position, and the relay sent fewer bytes than it read.
"""
from __future__ import annotations

import errno
import random
import socket
import struct
import time

import pymysql
import pytest

import rpl_sql
from rpl_sql.relay.relay_service import Relay
from tests.support.mariadb import free_port, port_holders, running

FILTERS = ("REPLICATE_DO_DB = (shop, crm), REPLICATE_IGNORE_TABLE = (shop.secret), "
           "REPLICATE_WILD_IGNORE_TABLE = ('crm.tmp%')")
MARIADB_FILTERS = {"replicate_do_db": "shop,crm", "replicate_ignore_table": "shop.secret",
                   "replicate_wild_ignore_table": "crm.tmp%"}
DBS = ("shop", "crm", "hr")
NO_FILTERS = [f"SET GLOBAL replicate_{k} = ''" for k in ("do_db", "ignore_db", "do_table", "ignore_table",
                                                        "wild_do_table", "wild_ignore_table")]
FILTER_SETS = [  # (rpl_sql's, MariaDB's): database rules with ignore-table rules; ignore-db with do-table rules
    (FILTERS, MARIADB_FILTERS),
    ("REPLICATE_IGNORE_DB = (hr), REPLICATE_DO_TABLE = (shop.orders), REPLICATE_WILD_DO_TABLE = ('crm.p%')",
     {"replicate_ignore_db": "hr", "replicate_do_table": "shop.orders", "replicate_wild_do_table": "crm.p%"}),
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with running(tmp_path_factory, 1, 3, 4) as trio:
        yield trio


def _workload(src, seed: int, n: int, fmt: str = "ROW") -> None:
    """Seeded changes to kept and ignored tables. Every statement runs in its table's database, unqualified, as
    statement-based replication needs (its filters go by the default database)."""
    rnd = random.Random(seed)
    conn = src.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION binlog_format = {fmt}")

            def run(db: str, sql: str, *args) -> None:
                cur.execute(f"USE {db}")
                cur.execute(sql, args or None)
            for i in range(n):
                r = rnd.random()
                db, table = rnd.choice([("shop", "orders"), ("shop", "secret"), ("crm", "people"),
                                        ("crm", "tmp_x"), ("hr", "staff")])
                if r < 0.5:
                    run(db, f"INSERT INTO {table} VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = v + 1",
                        rnd.randint(1, 60), rnd.randint(0, 9))
                elif r < 0.7:
                    run(db, f"UPDATE {table} SET v = v * 2 WHERE id %% 7 = %s", rnd.randint(0, 6))
                elif r < 0.8:
                    run(db, f"DELETE FROM {table} WHERE id = %s", rnd.randint(1, 60))
                elif r < 0.9:  # one transaction over a kept and an ignored table
                    cur.execute("BEGIN")
                    run("shop", "INSERT INTO orders VALUES (%s, 1) ON DUPLICATE KEY UPDATE v = 0", rnd.randint(1, 60))
                    run("hr", "INSERT INTO staff VALUES (%s, 1) ON DUPLICATE KEY UPDATE v = 0", rnd.randint(1, 60))
                    run("shop", "UPDATE secret SET v = v + 1")
                    cur.execute("COMMIT")
                elif r < 0.95:  # DDL in a kept or an ignored database
                    d = rnd.choice(["shop", "hr", "crm"])
                    run(d, f"CREATE TABLE IF NOT EXISTS t{seed}_{i} (id INT PRIMARY KEY)")
                    run(d, f"INSERT INTO t{seed}_{i} VALUES (1)")
                else:
                    cur.execute("FLUSH BINARY LOGS")
    finally:
        conn.close()


def _through(server, src, timeout: float = 120) -> dict:
    """The replica's status once it has executed the source's whole binlog; reconnecting meanwhile (the relay or
    the source restarting) is no error, a stopped SQL thread is."""
    deadline = time.monotonic() + timeout
    while True:
        row = dict(zip(*_status(server)))
        if row["Last_SQL_Errno"]:
            raise AssertionError(row["Last_SQL_Error"])
        if (row["Relay_Master_Log_File"], int(row["Exec_Master_Log_Pos"])) == src.binlog_end():
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"not caught up: {row}")
        time.sleep(0.2)


def _status(server):
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE STATUS")
            return [d[0] for d in cur.description], cur.fetchone()
    finally:
        conn.close()


def _gtid_slave_pos(server) -> str:
    return server.execute("SELECT @@gtid_slave_pos")[0][0]


def _restarted(start, port: int):
    """`start()` of a relay on `port`, which its last run held until it closed; if the port is still taken,
    a failure naming who holds it."""
    try:
        return start()
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        raise AssertionError(f"port {port} still in use: {port_holders(port)}") from e


@pytest.mark.parametrize("filters,mariadb_filters", FILTER_SETS, ids=["db-rules", "table-rules"])
def test_a_stock_replica_of_the_relay_equals_a_replica_with_the_same_filters(servers, warehouse, tmp_path, filters,
                                                                             mariadb_filters):
    src, via_relay, direct = servers
    src.reset()
    # MySQL 8 applies no CREATE DATABASE under table-only rules (MariaDB does): the databases exist on the
    # replicas beforehand, as a DBA using such rules makes them
    src.execute("SET SESSION binlog_format = ROW", *[f"CREATE DATABASE IF NOT EXISTS {d}" for d in DBS],
                *[s for t in ("shop.orders", "shop.secret", "crm.people", "crm.tmp_x", "hr.staff")
                  for s in (f"USE {t.split('.')[0]}",  # statements go by the default db
                            f"CREATE TABLE {t.split('.')[1]} (id INT PRIMARY KEY, v INT)")])
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("src") + "; "
                    "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1' FOR CHANNEL 'replica_3'; "
                    f"CHANGE REPLICATION FILTER {filters} FOR CHANNEL 'replica_3'")
    port = free_port()
    relay = Relay(warehouse, "src", port=port, user="repl", password="relay-pw", spool=str(tmp_path / "spool")).start()
    try:
        first = src.execute("SHOW BINARY LOGS")[0][0]
        for server in (via_relay, direct):
            server.execute("STOP ALL SLAVES", "RESET SLAVE ALL", "SET GLOBAL gtid_slave_pos = ''", *NO_FILTERS,
                           *[f"DROP DATABASE IF EXISTS {d}" for d in DBS], *[f"CREATE DATABASE {d}" for d in DBS])
        # the replica of the relay has no filters; the relay holds them
        via_relay.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={port}, MASTER_CONNECT_RETRY=1, "
                          f"MASTER_USER='repl', MASTER_PASSWORD='relay-pw', MASTER_USE_GTID=no, "
                          f"MASTER_LOG_FILE='{first}', MASTER_LOG_POS=4", "START SLAVE")
        direct.follow(src, "", mariadb_filters)
        _workload(src, seed=2387, n=200)
        _workload(src, seed=2386, n=100, fmt="STATEMENT")  # statements, decided by their default database
        _through(direct, src)
        _through(via_relay, src)  # at the source's own file and position
        ours, theirs = via_relay.contents(), direct.contents()
        assert ours == theirs
        assert ("hr", "staff") not in ours and ("shop", "secret") not in ours and ("shop", "orders") in ours
        assert any(isinstance(k, tuple) and k[0] == "crm" and len(v) > 1 for k, v in ours.items())
        assert _gtid_slave_pos(via_relay) == _gtid_slave_pos(direct) != ""  # empty transactions kept the GTIDs
        st = relay.status()
        (rep,) = st["replicas"]
        assert rep["server_id"] == 3 and rep["filters_channel"] == "replica_3"
        assert rep["bytes_sent"] < st["bytes_read"] * 0.8, st

        # by GTID (MASTER_USE_GTID=slave_pos: MariaDB's @slave_connect_state), across a restart of the relay
        # (it goes on from its spool) and of the source (it reconnects)
        via_relay.execute("STOP SLAVE", "CHANGE MASTER TO MASTER_USE_GTID=slave_pos", "START SLAVE")
        _workload(src, seed=2388, n=100)
        relay.close()
        _workload(src, seed=2389, n=50)
        relay = _restarted(lambda: Relay(warehouse, "src", port=port, user="repl", password="relay-pw",
                                         spool=str(tmp_path / "spool")).start(), port)
        src.restart()
        _workload(src, seed=2390, n=100)
        _through(direct, src)
        row = _through(via_relay, src)  # (the source logs binlog checkpoints after the last commit: end last)
        assert via_relay.contents() == direct.contents()
        assert _gtid_slave_pos(via_relay) == _gtid_slave_pos(direct)
        assert row["Using_Gtid"] == "Slave_Pos"

        # pointed back at the source itself, at the file and position it reached (its filters its own now)
        via_relay.execute("STOP SLAVE")
        row = dict(zip(*_status(via_relay)))
        via_relay.execute(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={src.port}, MASTER_USER='root', "
                          f"MASTER_PASSWORD='', MASTER_USE_GTID=no, MASTER_LOG_FILE='{row['Relay_Master_Log_File']}', "
                          f"MASTER_LOG_POS={row['Exec_Master_Log_Pos']}",
                          *[f"SET GLOBAL {k} = '{v}'" for k, v in mariadb_filters.items()], "START SLAVE")
        _workload(src, seed=2391, n=100)
        _through(direct, src)
        _through(via_relay, src)
        assert via_relay.contents() == direct.contents()  # nothing lost or applied twice
    finally:
        relay.close()
        for server in (via_relay, direct):
            server.execute("STOP ALL SLAVES", *NO_FILTERS)


def test_the_relay_refuses_bad_passwords_and_survives_garbage(servers, warehouse, tmp_path):
    src = servers[0]
    rpl_sql.connect(warehouse).execute(src.channel_sql("src"))
    relay = Relay(warehouse, "src", port=0, user="repl", password="pw", spool=str(tmp_path / "spool")).start()
    try:
        import pymysql

        with pytest.raises(pymysql.err.OperationalError, match="1045"):
            pymysql.connect(host="127.0.0.1", port=relay.server.port, user="repl", password="wrong")
        for junk in (b"", b"\x00" * 3, b"\xff\xff\xff\x00garbage", bytes(range(256)) * 40):
            s = socket.create_connection(("127.0.0.1", relay.server.port))
            s.recv(4096)  # the greeting
            s.sendall(junk)
            s.close()
        conn = pymysql.connect(host="127.0.0.1", port=relay.server.port, user="repl", password="pw")
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id")
            assert cur.fetchone()[0] == "1"  # answered by the source
            cur.execute("SHOW RELAY STATUS")
            assert [d[0] for d in cur.description][0] == "Server_Id"
        conn.close()
    finally:
        relay.close()


def _tables_and_a_relay(src, tmp_path) -> tuple[Relay, int]:
    """The source's five tables, empty, and a relay of it that holds no filters of its own: (relay, port)."""
    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE shop", "CREATE DATABASE crm",
                "CREATE DATABASE hr", *[s for t in ("shop.orders", "shop.secret", "crm.people", "crm.tmp_x", "hr.staff")
                                        for s in (f"USE {t.split('.')[0]}",
                                                  f"CREATE TABLE {t.split('.')[1]} (id INT PRIMARY KEY, v INT)")])
    relay_wh = str(tmp_path / "relay_wh")
    rpl_sql.connect(relay_wh).execute(src.channel_sql("src"))
    port = free_port()
    return Relay(relay_wh, "src", port=port, user="repl", password="relay-pw",
                 spool=str(tmp_path / "spool")).start(), port


def test_an_rpl_sql_channel_forwards_its_filters_to_the_relay(servers, warehouse, tmp_path):
    """WL#2387 Part 1: `rpl-sql replica` reading through the relay sends its channel's filters when it connects
    (SET @rpl_sql_filters); the relay, which holds no filters for it, sends only what they apply, and the
    replica tables equal a direct MariaDB replica's with the same filters. The rewrite stays on the replica."""

    from tests.pipeline.replica.test_replica import _normal, _ours
    from tests.pipeline.replica.test_replica_service import caught_up, start_service, stop_service

    src, _, direct = servers
    relay, port = _tables_and_a_relay(src, tmp_path)
    session = rpl_sql.connect(warehouse)
    session.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = {port}, "
                    "SOURCE_USER = 'repl', SOURCE_PASSWORD = 'relay-pw' FOR CHANNEL 'a'; "
                    f"CHANGE REPLICATION FILTER {FILTERS} FOR CHANNEL 'a'; START REPLICA FOR CHANNEL 'a'")
    direct.execute("STOP ALL SLAVES", "RESET SLAVE ALL", "SET GLOBAL gtid_slave_pos = ''", *NO_FILTERS,
                   *[f"DROP DATABASE IF EXISTS {d}" for d in ("shop", "crm", "hr")])
    direct.follow(src, "", MARIADB_FILTERS)
    proc = start_service(warehouse)
    try:
        _workload(src, seed=52387, n=200)
        time.sleep(1)  # a rotation's binlog checkpoint comes a moment later; end on a transaction
        src.execute("INSERT INTO shop.orders VALUES (1000, 1)")
        _through(direct, src)
        caught_up(warehouse, src, timeout=120)
        tables = lambda d: {k: v for k, v in d.items() if isinstance(k, tuple)}  # noqa: E731
        assert tables(_normal(_ours(warehouse, ["a"]))) == tables(_normal(direct.contents()))
        (rep,) = relay.status()["replicas"]
        assert rep["filters_channel"] == "(forwarded by the replica)"
        assert rep["events_sent"] < rep["events_read"] * 0.8, rep
    finally:
        stop_service(proc, warehouse)
        relay.close()
        direct.execute("STOP ALL SLAVES", *NO_FILTERS)


def test_source_side_filters_set_with_change_replication_source(servers, tmp_path):
    """WL#2387's extension: filters given in the channel definition itself, in MySQL's list form and in
    MariaDB's `CHANGE MASTER 'c' TO ..., REPLICATE_DO_DB = '...'`. Through a relay, the relay applies them (the
    channel forwards them); reading the source itself, the channel's ingest does. Either way the replica tables
    equal a direct MariaDB replica's with the same filters as replicate_* settings, and rpl_sql_channels shows
    them."""

    from rpl_sql.server.performance_schema import channel_rows
    from rpl_sql.storage.store import DeltaStore
    from tests.pipeline.replica.test_replica import _normal, _ours
    from tests.pipeline.replica.test_replica_service import caught_up, start_service, stop_service

    src, _, direct = servers
    relay, port = _tables_and_a_relay(src, tmp_path)
    through, itself = str(tmp_path / "through_relay"), str(tmp_path / "source_itself")
    rpl_sql.connect(through).execute(
        f"CHANGE MASTER 'a' TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {port}, MASTER_USER = 'repl', "
        "MASTER_PASSWORD = 'relay-pw', REPLICATE_DO_DB = 'shop,crm', REPLICATE_IGNORE_TABLE = 'shop.secret', "
        "REPLICATE_WILD_IGNORE_TABLE = 'crm.tmp%'; START REPLICA FOR CHANNEL 'a'")
    rpl_sql.connect(itself).execute(
        src.channel_sql("a").replace(" FOR CHANNEL", ", REPLICATE_DO_DB = (shop, crm), REPLICATE_IGNORE_TABLE = "
                                     "(shop.secret), REPLICATE_WILD_IGNORE_TABLE = ('crm.tmp%') FOR CHANNEL", 1)
        + "; START REPLICA FOR CHANNEL 'a'")
    for wh in (through, itself):
        (row,) = [r for r in channel_rows(DeltaStore(wh).load().state) if r[0] == "a"]
        assert row[-1] == ("REPLICATE_DO_DB: shop,crm; REPLICATE_IGNORE_TABLE: shop.secret; "
                           "REPLICATE_WILD_IGNORE_TABLE: crm.tmp%"), row
    direct.execute("STOP ALL SLAVES", "RESET SLAVE ALL", "SET GLOBAL gtid_slave_pos = ''", *NO_FILTERS,
                   *[f"DROP DATABASE IF EXISTS {d}" for d in ("shop", "crm", "hr")])
    direct.follow(src, "", MARIADB_FILTERS)
    procs = [start_service(through), start_service(itself)]
    try:
        _workload(src, seed=72387, n=200)
        time.sleep(1)  # end on a transaction the channels apply (a row event of a kept table)
        src.execute("SET SESSION binlog_format = ROW", "INSERT INTO shop.orders VALUES (1000, 1)")
        _through(direct, src)
        tables = lambda d: {k: v for k, v in d.items() if isinstance(k, tuple)}  # noqa: E731
        want = tables(_normal(direct.contents()))
        assert ("hr", "staff") not in want and ("shop", "orders") in want
        for wh in (through, itself):
            caught_up(wh, src, timeout=120)
            assert tables(_normal(_ours(wh, ["a"]))) == want, wh
        (rep,) = relay.status()["replicas"]
        assert rep["filters_channel"] == "(forwarded by the replica)"
        assert rep["events_sent"] < rep["events_read"] * 0.8, rep
    finally:
        for proc, wh in zip(procs, (through, itself)):
            stop_service(proc, wh)
        relay.close()
        direct.execute("STOP ALL SLAVES", *NO_FILTERS)


def _dump_client(port: int, server_id: int, first: str, stop_after: int | None = None) -> int:
    """A replica's IO thread in miniature: COM_BINLOG_DUMP from the start of `first`; the events it read until
    the heartbeat that says it has everything (or until it hangs up after `stop_after`)."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user="repl", password="pw", autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
        conn._next_seq_id = 0
        cmd = struct.pack("<BIHI", 0x12, 4, 0, server_id) + first.encode()
        conn._write_bytes(struct.pack("<I", len(cmd))[:3] + b"\x00" + cmd)
        conn._next_seq_id = 1
        events = 0
        while True:
            data = conn._read_packet().get_all_data()
            if data[5] == 27:  # a heartbeat: the relay has sent all it holds
                return events
            events += 1
            if stop_after is not None and events >= stop_after:
                return events  # hangs up mid-stream
    finally:
        conn.close()


def test_many_replicas_at_once_and_one_hanging_up_mid_stream(servers, warehouse, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    src = servers[0]
    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE shop", "USE shop",
                "CREATE TABLE t (id INT PRIMARY KEY)", *[f"INSERT INTO t VALUES ({i})" for i in range(300)])
    rpl_sql.connect(warehouse).execute(src.channel_sql("src"))
    relay = Relay(warehouse, "src", port=0, user="repl", password="pw", spool=str(tmp_path / "spool"),
                  heartbeat=0.3).start()
    try:
        first = src.execute("SHOW BINARY LOGS")[0][0]
        while relay.spool.end() != src.binlog_end():
            time.sleep(0.05)
        with ThreadPoolExecutor(8) as pool:
            quitter = pool.submit(_dump_client, relay.server.port, 50, first, 10)
            full = [pool.submit(_dump_client, relay.server.port, 60 + i, first) for i in range(6)]
            counts = [f.result(timeout=120) for f in full]
        assert quitter.result() == 10
        assert len(set(counts)) == 1 and counts[0] > 900, counts  # every replica got the same, whole binlog
        assert _dump_client(relay.server.port, 70, first) == counts[0]  # and the relay serves on
    finally:
        relay.close()
