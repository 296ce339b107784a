"""The relay's COM_BINLOG_DUMP_GTID, the dump a MySQL replica with SOURCE_AUTO_POSITION = 1 asks for, over a spool
in MySQL's binlog format (GTID and Previous_gtids events). MySQL is not installed here, so the spool is made up
and the replica is a client speaking the protocol as MySQL's IO thread does: the relay starts from the last file
whose Previous_gtids the replica has, passes over the transactions the replica has, and sends the rest through
the replica's filters, a transaction filtered away as its GTID, BEGIN and COMMIT (the empty transaction MySQL's
replica-side filtering commits)."""
from __future__ import annotations

import socket
import struct
import threading

import pytest
from pymysql._auth import scramble_native_password

from rpl_sql.filters.rules import FilterType, Filters, Matching
from rpl_sql.pipeline.source_filter import SourceFilter
from rpl_sql.relay import binlog_events as E, wire
from rpl_sql.relay.dump_server import RelayServer
from rpl_sql.relay.spool import INDEX, MAGIC, Spool
from tests.relay.test_relay_filtering import WRITE_ROWS, Binlog

SID = bytes(range(16))
OTHER = bytes(range(16, 32))


class MySQLBinlog(Binlog):
    """A MySQL 8.0 binlog file: its format description, its Previous_gtids, GTID transactions."""

    def __init__(self, before: E.MySQLGtids):
        self.crc, self.pos, self.events, self.tagged = False, 4, [], {}
        body = struct.pack("<H", 4) + b"8.0.36".ljust(50, b"\0") + struct.pack("<IB", 0, 19) + bytes(40)
        self.add(E.FORMAT_DESCRIPTION, body + b"\0")
        self.add(E.PREVIOUS_GTIDS, before.encode())

    def transaction(self, sid: bytes, gno: int, db: str, tag: int) -> None:
        self.add(E.MYSQL_GTID, b"\x01" + sid + struct.pack("<q", gno) + bytes(17))
        self.query("BEGIN", db)
        self.table_map(1, db, "t")
        self.rows(1, True, tag, (db, "t"))
        self.xid()


def spool_of(folder, files: list[tuple[str, MySQLBinlog]]) -> Spool:
    spool = Spool(folder)
    for name, log in files:
        (spool.folder / name).write_bytes(MAGIC + b"".join(log.events))
    (spool.folder / INDEX).write_text("".join(name + "\n" for name, _ in files))
    return spool


@pytest.fixture
def relay(tmp_path):
    """A relay over two files: SID:1-5 in the first, SID:6-10 (and OTHER:1) in the second; even transactions in
    `hr`, which the replica's filters ignore."""
    first, second = MySQLBinlog(E.MySQLGtids()), MySQLBinlog(E.MySQLGtids({SID: [(1, 6)]}))
    for gno in range(1, 11):
        (first if gno <= 5 else second).transaction(SID, gno, "hr" if gno % 2 == 0 else "shop", gno)
    second.transaction(OTHER, 1, "shop", 100)
    spool = spool_of(tmp_path / "spool", [("binlog.000001", first), ("binlog.000002", second)])
    ignore_hr = SourceFilter.of(Filters().configure(FilterType.IGNORE_DB, ("hr",), "", 0), Matching())
    server = RelayServer(spool, {}, "repl", "pw", heartbeat=0.2, filters_for=lambda server_id: (lambda: ignore_hr))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.close()


class ReplicaError(Exception):
    """An ERR packet the relay sent: (code, message)."""


def login(port: int) -> wire.Packets:
    """A replica's connection, logged in (mysql_native_password) and nothing else asked."""
    packets = wire.Packets(socket.create_connection(("127.0.0.1", port), timeout=30))
    greeting = packets.read()
    at = greeting.index(b"\0", 1) + 5
    scramble = greeting[at:at + 8] + greeting[at + 8 + 1 + 18:at + 8 + 1 + 18 + 12]
    token = scramble_native_password(b"pw", scramble)
    caps = wire.CLIENT_PROTOCOL_41 | wire.CLIENT_SECURE_CONNECTION | wire.CLIENT_PLUGIN_AUTH
    packets.write(struct.pack("<IIB", caps, 1 << 24, wire.UTF8MB4) + bytes(23) + b"repl\0" + bytes([len(token)])
                  + token + b"mysql_native_password\0")
    reply = packets.read()
    if reply[0] != 0:
        raise ReplicaError(reply)
    return packets


def dump_gtid(port: int, executed: E.MySQLGtids) -> list[bytes]:
    """The events a MySQL replica's IO thread receives for COM_BINLOG_DUMP_GTID, until the first heartbeat."""
    packets = login(port)
    try:
        block = executed.encode()
        packets.seq = 0
        packets.write(struct.pack("<BHII", 0x1E, 0x04, 9, 0) + struct.pack("<Q", 4) + struct.pack("<I", len(block))
                      + block)
        got = []
        while True:
            data = packets.read()
            if data[0] == 0xFF:
                raise ReplicaError(struct.unpack_from("<H", data, 1)[0], data[9:].decode())
            if data[5] == E.HEARTBEAT:
                return got
            got.append(data[1:])
    finally:
        packets.sock.close()


def sent(events: list[bytes]) -> tuple[list[tuple[bytes, int]], list[int], str]:
    """(GTIDs sent, tags of the rows events sent, the first file named by the first rotate)."""
    gtids = [(ev[E.HEADER + 1:E.HEADER + 17], struct.unpack_from("<q", ev, E.HEADER + 17)[0]) for ev in events
             if ev[4] == E.MYSQL_GTID]
    tags = [struct.unpack_from("<Q", ev, len(ev) - 8)[0] for ev in events if ev[4] == WRITE_ROWS]
    return gtids, tags, E.rotate_target(events[0], False)[0]


def test_a_mysql_replica_gets_what_its_gtid_set_lacks_through_its_filters(relay):
    gtids, tags, first = sent(dump_gtid(relay.port, E.MySQLGtids({SID: [(1, 8)]})))
    assert first == "binlog.000002"  # its Previous_gtids (SID:1-5) is all the replica's
    assert gtids == [(SID, 8), (SID, 9), (SID, 10), (OTHER, 1)]  # 6 and 7 it has; every GTID it lacks comes
    assert tags == [9, 100]  # 8 and 10 (hr) come as empty transactions
    events = dump_gtid(relay.port, E.MySQLGtids({SID: [(1, 8)]}))
    at = [i for i, ev in enumerate(events) if ev[4] == E.MYSQL_GTID][0]
    assert [ev[4] for ev in events[at:at + 3]] == [E.MYSQL_GTID, E.QUERY, E.XID]  # SID:8: GTID, BEGIN, COMMIT


def test_a_new_mysql_replica_starts_at_the_first_file(relay):
    gtids, tags, first = sent(dump_gtid(relay.port, E.MySQLGtids()))
    assert first == "binlog.000001"
    assert gtids == [(SID, n) for n in range(1, 11)] + [(OTHER, 1)]
    assert tags == [1, 3, 5, 7, 9, 100]


def test_a_replica_missing_what_the_spool_no_longer_holds_is_refused(tmp_path):
    later = MySQLBinlog(E.MySQLGtids({SID: [(1, 6)]}))
    later.transaction(SID, 6, "shop", 6)
    server = RelayServer(spool_of(tmp_path / "spool", [("binlog.000007", later)]), {}, "repl", "pw", heartbeat=0.2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ReplicaError) as e:
            dump_gtid(server.port, E.MySQLGtids({SID: [(1, 3)]}))
        assert e.value.args[0] == 1236
    finally:
        server.close()


def test_the_gtid_set_round_trips_and_covers():
    s = E.MySQLGtids({SID: [(1, 8), (10, 12)], OTHER: [(1, 2)]})
    back = E.MySQLGtids.parse(s.encode())
    assert back.sids == s.sids
    assert back.has(SID, 7) and not back.has(SID, 8) and back.has(SID, 11) and not back.has(OTHER, 2)
    assert back.covers(E.MySQLGtids({SID: [(2, 5)]})) and not back.covers(E.MySQLGtids({SID: [(5, 9)]}))
    assert not E.MySQLGtids() and E.MySQLGtids().covers(E.MySQLGtids())


def test_a_closed_relay_frees_its_port_at_once_and_a_new_one_listens_there(tmp_path):
    """close() while serve_forever's thread waits in accept: the port is free when close() returns (it stayed
    listening until that wait ended, and a relay started again on the port met EADDRINUSE)."""
    port = 0
    for _ in range(5):  # each server binds the port the one before it listened on
        server = RelayServer(spool_of(tmp_path / "spool", []), {}, "repl", "pw", port=port)
        port = server.port
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        login(port).sock.close()  # serving: its thread is back in accept
        server.close()
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
        thread.join(5)
        assert not thread.is_alive()
