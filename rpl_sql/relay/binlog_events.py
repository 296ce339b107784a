"""Binlog events as bytes: the 19-byte header, the events the relay makes itself (rotate, heartbeat) and the
checksum MySQL appends when binlog_checksum=CRC32."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

HEADER = 19
QUERY, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP, HEARTBEAT = 2, 4, 15, 16, 19, 27
ANNOTATE_ROWS, BINLOG_CHECKPOINT, MARIADB_GTID, GTID_LIST = 160, 161, 162, 163
MYSQL_GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 33, 34, 35
ROWS_V1 = (23, 24, 25)  # MariaDB's write/update/delete rows
ROWS_V2 = (30, 31, 32)  # MySQL 5.6+
LOG_EVENT_ARTIFICIAL_F = 0x20
CHECKSUM_CRC32 = 1


class MySQLGtids:
    """A MySQL GTID set in its binary form (COM_BINLOG_DUMP_GTID's and Previous_gtids' SID block): per server
    uuid (16 bytes), intervals [start, end)."""

    def __init__(self, sids: dict[bytes, list[tuple[int, int]]] | None = None):
        self.sids = sids or {}

    @classmethod
    def parse(cls, data: bytes, at: int = 0) -> "MySQLGtids":
        n_sids = struct.unpack_from("<Q", data, at)[0]
        at += 8
        sids: dict[bytes, list[tuple[int, int]]] = {}
        for _ in range(n_sids):
            sid = bytes(data[at:at + 16])
            n = struct.unpack_from("<Q", data, at + 16)[0]
            at += 24
            sids.setdefault(sid, []).extend(struct.unpack_from("<qq", data, at + 16 * i) for i in range(n))
            at += 16 * n
        return cls(sids)

    def encode(self) -> bytes:
        out = struct.pack("<Q", len(self.sids))
        for sid, intervals in self.sids.items():
            out += sid + struct.pack("<Q", len(intervals)) + b"".join(struct.pack("<qq", *i) for i in intervals)
        return out

    def has(self, sid: bytes, gno: int) -> bool:
        return any(start <= gno < end for start, end in self.sids.get(sid, ()))

    def covers(self, other: "MySQLGtids") -> bool:
        """Whether every GTID of `other` is in this set."""
        return all(any(s <= start and end <= e for s, e in self.sids.get(sid, ()))
                   for sid, intervals in other.sids.items() for start, end in intervals)

    def __bool__(self) -> bool:
        return any(self.sids.values())


@dataclass(frozen=True)
class Header:
    timestamp: int
    type: int
    server_id: int
    size: int
    log_pos: int
    flags: int

    @classmethod
    def of(cls, ev: bytes) -> "Header":
        return cls(*struct.unpack_from("<IBIIIH", ev, 0))


def with_checksum(ev: bytes, crc: bool) -> bytes:
    return ev + struct.pack("<I", zlib.crc32(ev) & 0xFFFFFFFF) if crc else ev


def make(etype: int, server_id: int, log_pos: int, body: bytes, crc: bool, flags: int = 0,
         timestamp: int = 0) -> bytes:
    """An event of the relay's own (its checksum computed, as the source would)."""
    size = HEADER + len(body) + (4 if crc else 0)
    return with_checksum(struct.pack("<IBIIIH", timestamp, etype, server_id, size, log_pos, flags) + body, crc)


def rotate(server_id: int, file: str, pos: int, crc: bool) -> bytes:
    """The artificial rotate a dump starts with: the file and position the replica reads from."""
    return make(ROTATE, server_id, 0, struct.pack("<Q", pos) + file.encode(), crc, LOG_EVENT_ARTIFICIAL_F)


def heartbeat(server_id: int, file: str, pos: int, crc: bool) -> bytes:
    return make(HEARTBEAT, server_id, pos, file.encode(), crc, LOG_EVENT_ARTIFICIAL_F)


def rotate_target(ev: bytes, crc: bool) -> tuple[str, int]:
    """(next file, position) of a rotate event."""
    end = len(ev) - (4 if crc else 0)
    return ev[HEADER + 8:end].decode(), struct.unpack_from("<Q", ev, HEADER)[0]


def fde_checksum(ev: bytes) -> bool:
    """Whether the events after this format description carry a CRC32 (its algorithm byte, before its own)."""
    # MySQL 5.6.1+/MariaDB 5.3+: the body ends with the checksum algorithm (1 byte) and the event's CRC (4)
    return len(ev) >= HEADER + 57 + 5 and ev[-5] == CHECKSUM_CRC32


def fixed_log_pos(ev: bytes, log_pos: int, crc: bool) -> bytes:
    """The same event with another log_pos in its header (its checksum recomputed)."""
    body = ev[:len(ev) - (4 if crc else 0)]
    return with_checksum(body[:13] + struct.pack("<I", log_pos) + body[17:], crc)


def gtid_list(ev: bytes) -> dict[int, int]:
    """A Gtid_list event (the state a binlog file starts at) as domain -> seq_no."""
    count = struct.unpack_from("<I", ev, HEADER)[0] & 0x0FFFFFFF
    out: dict[int, int] = {}
    for i in range(count):
        domain, _server, seq = struct.unpack_from("<IIQ", ev, HEADER + 4 + 16 * i)
        out[domain] = max(seq, out.get(domain, 0))
    return out
