"""Binlog events as bytes: the 19-byte header, the events the relay makes itself (rotate, heartbeat) and the
checksum MySQL appends when binlog_checksum=CRC32."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

HEADER = 19
QUERY, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP, HEARTBEAT = 2, 4, 15, 16, 19, 27
ANNOTATE_ROWS, BINLOG_CHECKPOINT, MARIADB_GTID, GTID_LIST = 160, 161, 162, 163
ROWS_V1 = (23, 24, 25)  # MariaDB's write/update/delete rows
ROWS_V2 = (30, 31, 32)  # MySQL 5.6+
LOG_EVENT_ARTIFICIAL_F = 0x20
CHECKSUM_CRC32 = 1


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
