"""What a replica of the relay is sent, without servers: the relay's fast path (`feed_buffer`, many events a
call) against its event-by-event path (`feed`) and against the reference evaluator, over made-up binlogs with
hostile names, random filters and random cuts of the spool."""
from __future__ import annotations

import random
import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from rpl_sql.filters.evaluate import RowEvent, decide
from rpl_sql.filters.rules import Matching
from rpl_sql.pipeline.source_filter import SourceFilter
from rpl_sql.relay import binlog_events as E
from rpl_sql.relay.filtering import ReplicaFilter
from tests.filters.test_evaluate import filters_s

NAMES = ["db1", "DB1", "t1", "T1", "it's", "back\\slash", "`tick`", "a,b", "p%c", "u_s", "ünï", "MiXed", "a.b", "%"]
WRITE_ROWS, STMT_END_F, FL_STANDALONE = 23, 0x1, 0x1


class Binlog:
    """Made-up events at increasing positions, each rows event carrying a tag of its own (so it can be found in
    what is sent) and the table it is of."""

    def __init__(self, crc: bool):
        self.crc, self.pos, self.events, self.tagged = crc, 4, [], {}
        body = struct.pack("<H", 4) + b"10.11.0-MariaDB".ljust(50, b"\0") + struct.pack("<IB", 0, 19) + bytes(40)
        self.add(E.FORMAT_DESCRIPTION, body + bytes([1 if crc else 0]), with_crc=crc)

    def add(self, etype: int, body: bytes, flags: int = 0, with_crc: bool | None = None) -> bytes:
        crc = self.crc if with_crc is None else with_crc
        size = E.HEADER + len(body) + (4 if crc else 0)
        ev = E.make(etype, 1, self.pos + size, body, crc, flags)
        self.pos += size
        self.events.append(ev)
        return ev

    def gtid(self, domain: int, seq: int, standalone: bool = False) -> None:
        self.add(E.MARIADB_GTID, struct.pack("<QIB", seq, domain, FL_STANDALONE if standalone else 0) + bytes(6))

    def query(self, sql: str, db: str = "") -> None:
        d = db.encode()
        self.add(E.QUERY, struct.pack("<IIBHH", 0, 0, len(d), 0, 0) + d + b"\0" + sql.encode())

    def table_map(self, table_id: int, db: str, table: str) -> None:
        d, t = db.encode(), table.encode()
        self.add(E.TABLE_MAP, struct.pack("<Q", table_id)[:6] + b"\0\0" + bytes([len(d)]) + d + b"\0"
                 + bytes([len(t)]) + t + b"\0" + b"\x01\x03\x00\x01\x00")

    def rows(self, table_id: int, last: bool, tag: int, table: tuple[str, str]) -> None:
        ev = self.add(WRITE_ROWS, struct.pack("<Q", table_id)[:6] + struct.pack("<H", STMT_END_F if last else 0)
                      + b"\x01\xff\x00" + struct.pack("<Q", tag))
        self.tagged[tag] = (table, ev)

    def xid(self) -> None:
        self.add(E.XID, struct.pack("<Q", 1))

    def data(self) -> bytes:
        return b"\xfebin" + b"".join(self.events)


def workload(rnd: random.Random, crc: bool) -> Binlog:
    """Row transactions of one or more statements over one or more tables, statement transactions, DDL
    groups, empty transactions, in two GTID domains."""
    log, seq, tag = Binlog(crc), {0: 0, 1: 0}, 0
    ids: dict[tuple[str, str], int] = {}
    for _ in range(rnd.randint(5, 40)):
        domain = rnd.choice([0, 0, 1])
        seq[domain] += 1
        kind = rnd.random()
        if kind < 0.6:
            log.gtid(domain, seq[domain])
            for _ in range(rnd.randint(1, 3)):
                log.add(E.ANNOTATE_ROWS, b"INSERT INTO t VALUES (1)")
                tables = [(rnd.choice(NAMES), rnd.choice(NAMES)) for _ in range(rnd.randint(1, 2))]
                for t in tables:
                    log.table_map(ids.setdefault(t, len(ids) + 1), *t)
                count = rnd.randint(1, 3)
                for i in range(count):
                    tag += 1
                    t = rnd.choice(tables)
                    log.rows(ids[t], i == count - 1, tag, t)
            log.xid()
        elif kind < 0.75:
            log.gtid(domain, seq[domain])
            log.query("BEGIN")
            db, t = rnd.choice(NAMES), rnd.choice(NAMES)
            log.query(f"INSERT INTO `{t.replace('`', '``')}` VALUES (1)", db)
            log.query("COMMIT")
        elif kind < 0.9:
            log.gtid(domain, seq[domain], standalone=True)
            db, t = rnd.choice(NAMES), rnd.choice(NAMES)
            log.query(f"CREATE TABLE `{t.replace('`', '``')}` (a INT)", db)
        else:
            log.gtid(domain, seq[domain])
            log.xid()
    return log


def sent_by_events(filt: ReplicaFilter, data: bytes) -> list[bytes]:
    out, at = [], 4
    while at < len(data):
        size = struct.unpack_from("<I", data, at + 9)[0]
        out += filt.feed(data[at:at + size])
        at += size
    return out + filt.flush()


def sent_by_buffers(filt: ReplicaFilter, data: bytes, rnd: random.Random) -> list[bytes]:
    """As the dump reads the spool: chunks of any size, the unfinished event carried over to the next."""
    out, buf, at, pos = [], b"", 0, 4
    while pos < len(data) or at < len(buf):
        step = rnd.choice([1, 7, 30, 100, 1000, 1 << 20])
        buf, at = buf[at:] + data[pos:pos + step], 0
        pos += step
        events, at = filt.feed_buffer(buf, at)
        out += events
        if pos >= len(data) and at < len(buf) and len(buf) - at < E.HEADER:
            break
    return out + filt.flush()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filters=filters_s, seed=st.integers(0, 2**32), crc=st.booleans(), annotate=st.booleans(),
       lctn=st.sampled_from([0, 1, 2]), has=st.sampled_from([None, {0: 3}, {0: 2, 1: 1}]))
def test_the_fast_path_sends_what_the_event_path_sends_and_rows_as_the_reference_decides(filters, seed, crc,
                                                                                        annotate, lctn, has):
    rnd = random.Random(seed)
    log = workload(rnd, crc)
    data = log.data()
    sf = SourceFilter.of(filters, Matching(lctn))

    def replica() -> ReplicaFilter:
        return ReplicaFilter(lambda: sf, dict(has) if has else None, annotate)

    by_events = sent_by_events(replica(), data)
    assert sent_by_buffers(replica(), data, rnd) == by_events

    sent = {struct.unpack_from("<Q", ev, len(ev) - 8 - (4 if crc else 0))[0] for ev in by_events
            if ev[4] == WRITE_ROWS}
    applied = {tag for tag, ((db, table), _) in log.tagged.items()
               if decide(filters, RowEvent(db, table), Matching(lctn)).apply}
    if has is None:
        assert sent == applied  # a rows event is sent exactly when the reference applies its table
        last = {}
        for ev in log.events:
            if ev[4] == E.MARIADB_GTID:
                seq, domain = struct.unpack_from("<QI", ev, E.HEADER)
                last[domain] = ev
        assert all(ev in by_events for ev in last.values())  # every domain's last GTID reaches the replica
    else:
        assert sent <= applied
    assert annotate or not any(ev[4] == E.ANNOTATE_ROWS for ev in by_events)
    for ev in by_events:  # every event sent is whole, with a right checksum where the binlog has them
        assert struct.unpack_from("<I", ev, 9)[0] == len(ev)
        if crc and ev[4] != E.FORMAT_DESCRIPTION:
            assert E.with_checksum(ev[:-4], True) == ev
