"""Row images of a binlog rows event, decoded from its bytes by code compiled once per table definition.

python-mysql-replication decodes every column of every row through one long chain of type tests and reads
each value through three layers of buffered reads; that is most of what a catch-up of a row workload costs.
`ImageDecoder` gives the same Python values (its differential test compares them on real MariaDB binlogs)
from a function generated per table map and columns-present bitmap. Column types it does not compile (BIT,

ENUM, SET, JSON, GEOMETRY, the pre-5.6 temporal types), a table map without column names, a partial JSON
update, or any value it cannot read the same way return None, and the caller asks the library instead.
"""
from __future__ import annotations

import codecs
import datetime
import decimal
import struct

from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from rpl_sql.errors import RplSqlError

_FIXED = {  # type -> little-endian struct format (signed, unsigned) of fixed-width numbers
    FIELD_TYPE.TINY: ("b", "B"), FIELD_TYPE.SHORT: ("h", "H"), FIELD_TYPE.LONG: ("i", "I"),
    FIELD_TYPE.LONGLONG: ("q", "Q"), FIELD_TYPE.FLOAT: ("f", "f"), FIELD_TYPE.DOUBLE: ("d", "d"),
}
_UNPACK = {f: struct.Struct("<" + f) for pair in _FIXED.values() for f in pair}
# rows events whose body this reads (MySQL's PARTIAL_UPDATE_ROWS_EVENT is left to the library):
# event type -> (kind, post-header length, version 2)
ROWS_EVENTS = {
    BINLOG.WRITE_ROWS_EVENT_V1: ("write_rows", 8, False), BINLOG.UPDATE_ROWS_EVENT_V1: ("update_rows", 8, False),
    BINLOG.DELETE_ROWS_EVENT_V1: ("delete_rows", 8, False), BINLOG.WRITE_ROWS_EVENT_V2: ("write_rows", 10, True),
    BINLOG.UPDATE_ROWS_EVENT_V2: ("update_rows", 10, True), BINLOG.DELETE_ROWS_EVENT_V2: ("delete_rows", 10, True),
}
_COMPRESSED = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_EPOCH = datetime.datetime.utcfromtimestamp


def _be(buf: bytes, pos: int, size: int) -> int:
    """A signed big-endian integer of 1 to 5 bytes, as python-mysql-replication's read_int_be_by_size."""
    if size == 5:
        return (buf[pos] << 32) + int.from_bytes(buf[pos + 1:pos + 5], "big")
    return int.from_bytes(buf[pos:pos + size], "big", signed=True)


def _fsp(buf: bytes, pos: int, fsp: int) -> tuple[int, int]:
    n = (fsp + 1) // 2
    if not n:
        return 0, pos
    micro = _be(buf, pos, n)
    if fsp % 2:
        micro = int(micro / 10)
    return micro * 10 ** (6 - fsp), pos + n


def _datetime2(buf: bytes, pos: int, fsp: int):
    data = _be(buf, pos, 5)
    ym = (data >> 22) & 0x1FFFF
    try:
        t = datetime.datetime(int(ym / 13), ym % 13, (data >> 17) & 0x1F, (data >> 12) & 0x1F,
                              (data >> 6) & 0x3F, data & 0x3F)
    except ValueError:
        return None, _fsp(buf, pos + 5, fsp)[1]
    micro, pos = _fsp(buf, pos + 5, fsp)
    return (t.replace(microsecond=micro) if micro > 0 else t), pos


def _timestamp2(buf: bytes, pos: int, fsp: int):
    """Seconds 0 is MySQL's zero TIMESTAMP ('0000-00-00 00:00:00'; the type starts at 00:00:01 UTC): None, as
    other zero dates, not 1970-01-01."""
    seconds = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
    micro, pos = _fsp(buf, pos + 4, fsp)
    if seconds == 0:
        return None, pos
    t = _EPOCH(seconds)
    return (t.replace(microsecond=micro) if micro > 0 else t), pos


def _time2(buf: bytes, pos: int, fsp: int):
    """MySQL's TIME2 (my_time_packed_from_binary): a negative value with a fraction stores its integer part
    one lower and the fraction as its complement, so both are taken back before the sign is split off."""
    n = (fsp + 1) // 2
    if n == 3:
        packed = int.from_bytes(buf[pos:pos + 6], "big") - 0x800000000000
    else:
        intpart = int.from_bytes(buf[pos:pos + 3], "big") - 0x800000
        frac = int.from_bytes(buf[pos + 3:pos + 3 + n], "big")
        if intpart < 0 and frac:
            intpart, frac = intpart + 1, frac - (0x100 if n == 1 else 0x10000)
        packed = (intpart << 24) + frac * (10000 if n == 1 else 100)
    sign, packed = (-1, -packed) if packed < 0 else (1, packed)
    hms = packed >> 24
    return datetime.timedelta(hours=(hms >> 12) & 0x3FF, minutes=(hms >> 6) & 0x3F, seconds=hms & 0x3F,
                              microseconds=packed & 0xFFFFFF) * sign, pos + 3 + n


def _library_time2(self, column) -> datetime.timedelta:
    """python-mysql-replication's TIME2 reader (RowsEvent.__read_time2) takes the fraction of a negative TIME as
    it is stored, complemented: -00:00:00.000001 reads as -00:00:00.999999. Its rows events read TIME2 here."""
    n = (column.fsp + 1) // 2
    return _time2(self.packet.read(3 + n), 0, column.fsp)[0]


RowsEvent._RowsEvent__read_time2 = _library_time2


def _date(buf: bytes, pos: int):
    v = buf[pos] + (buf[pos + 1] << 8) + (buf[pos + 2] << 16)
    year, month, day = (v >> 9) & 0x7FFF, (v >> 5) & 0xF, v & 0x1F
    if v == 0 or year == 0 or month == 0 or day == 0:
        return None, pos + 3
    return datetime.date(year, month, day), pos + 3


def _decimal(buf: bytes, pos: int, precision: int, scale: int):
    integral = precision - scale
    uncomp_int, uncomp_frac = integral // 9, scale // 9
    comp_int, comp_frac = integral - uncomp_int * 9, scale - uncomp_frac * 9
    size = _COMPRESSED[comp_int] + uncomp_int * 4 + uncomp_frac * 4 + _COMPRESSED[comp_frac]
    raw = bytearray(buf[pos:pos + size])
    if raw[0] & 0x80:
        res, mask = "", 0
    else:
        res, mask = "-", -1
    raw[0] ^= 0x80
    p = 0
    n = _COMPRESSED[comp_int]
    if n:
        res += str(_be(raw, 0, n) ^ mask)
        p = n
    for _ in range(uncomp_int):
        res += f"{int.from_bytes(raw[p:p + 4], 'big', signed=True) ^ mask:09d}"
        p += 4
    res += "."
    for _ in range(uncomp_frac):
        res += f"{int.from_bytes(raw[p:p + 4], 'big', signed=True) ^ mask:09d}"
        p += 4
    n = _COMPRESSED[comp_frac]
    if n:
        res += f"{_be(raw, p, n) ^ mask:0{comp_frac}d}"
    return decimal.Decimal(res), pos + size


class _UnsupportedImageError(RplSqlError):
    pass


def _encoding(column) -> str | None:
    """The codec a string column's bytes are decoded with; None keeps bytes (as the library does when the
    charset has no Python codec, e.g. `binary`)."""
    from pymysqlreplication.row_event import RowsEvent

    enc = RowsEvent.charset_to_encoding(column.character_set_name) if column.character_set_name else "utf-8"
    try:
        return codecs.lookup(enc).name
    except LookupError:
        return None


def _column_code(column, k: int, env: dict) -> list[str]:
    """Statements that read column value `v{k}` at `pos` and advance `pos`."""
    t = column.type
    if getattr(column, "fsp", 0) > 6:
        raise _UnsupportedImageError
    if t in _FIXED:
        unpack = _UNPACK[_FIXED[t][1 if column.unsigned else 0]]
        env[f"U{k}"] = unpack.unpack_from
        return [f"v{k} = U{k}(buf, pos)[0]", f"pos += {unpack.size}"]
    if t == FIELD_TYPE.INT24:
        code = [f"v{k} = buf[pos] + (buf[pos + 1] << 8) + (buf[pos + 2] << 16)", "pos += 3"]
        if not column.unsigned:
            code.insert(1, f"if v{k} >= 0x800000: v{k} -= 0x1000000")
        return code
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
        size = column.length_size if t == FIELD_TYPE.BLOB else (2 if column.max_length > 255 else 1)
        if size not in (1, 2, 3, 4):
            raise _UnsupportedImageError
        n = " + ".join(f"(buf[pos + {i}] << {8 * i})" if i else "buf[pos]" for i in range(size))
        enc = _encoding(column)
        # without a codec the library keeps bytes, except that Python decodes b"" as "" under any name
        value = f"buf[pos:pos + n{k}]" + (f".decode({enc!r})" if enc else f" if n{k} else ''")
        return [f"n{k} = {n}", f"pos += {size}", f"v{k} = {value}", f"pos += n{k}"]
    if t == FIELD_TYPE.NEWDECIMAL:
        return [f"v{k}, pos = _decimal(buf, pos, {column.precision}, {column.decimals})"]
    if t == FIELD_TYPE.DATETIME2:
        return [f"v{k}, pos = _datetime2(buf, pos, {column.fsp})"]
    if t == FIELD_TYPE.TIMESTAMP2:
        return [f"v{k}, pos = _timestamp2(buf, pos, {column.fsp})"]
    if t == FIELD_TYPE.TIME2:
        return [f"v{k}, pos = _time2(buf, pos, {column.fsp})"]
    if t == FIELD_TYPE.DATE:
        return [f"v{k}, pos = _date(buf, pos)"]
    if t == FIELD_TYPE.YEAR:
        return [f"v{k} = buf[pos] + 1900", "pos += 1"]
    raise _UnsupportedImageError


def compile_image(columns: list, present: bytes):
    """`read(buf, pos) -> (image, pos)` for one row image of these columns with this columns-present bitmap;
    None when a column's type is not compiled here. Absent columns read None (a MINIMAL image), as in the
    library."""
    names = [c.name for c in columns]
    if not all(names):
        return None
    env = {"_decimal": _decimal, "_datetime2": _datetime2, "_timestamp2": _timestamp2, "_time2": _time2,
           "_date": _date}
    nbytes = (sum(bin(b).count("1") for b in present) + 7) // 8  # every set bit, as the library counts
    body = [f"nb = buf[pos:pos + {nbytes}]", f"pos += {nbytes}"]
    j = 0
    try:
        for i, c in enumerate(columns):
            if not present[i >> 3] >> (i & 7) & 1:
                body.append(f"v{i} = None")
                continue
            body.append(f"if nb[{j >> 3}] & {1 << (j & 7)}:")
            body.append(f"    v{i} = None")
            body.append("else:")
            body.extend("    " + line for line in _column_code(c, i, env))
            j += 1
    except _UnsupportedImageError:
        return None
    for i, name in enumerate(names):
        env[f"K{i}"] = name
    body.append("return {" + ", ".join(f"K{i}: v{i}" for i in range(len(names))) + "}, pos")
    src = "def read(buf, pos):\n" + "".join(f"    {line}\n" for line in body)
    exec(compile(src, "<row image>", "exec"), env)
    return env["read"]


class ImageDecoder:
    """Row images of rows events, read by compiled code where it applies (`images`), else None."""

    def __init__(self):
        self._compiled: dict[tuple, object] = {}

    def clear(self) -> None:
        """Forget the compiled readers (table ids are reused after a new binlog file starts)."""
        self._compiled.clear()

    def _reader(self, table_id: int, table, present: bytes):
        key = (table_id, present)
        hit = self._compiled.get(key)
        if hit is None or hit[0] is not table:
            hit = (table, compile_image(table.columns, present))
            self._compiled[key] = hit
        return hit[1]

    def images(self, ev, etype: str) -> list[dict] | None:
        """The event's images as `[{"before": ..., "after": ...}]`, or None (ask the library: `ev.rows`).
        Reads nothing from `ev` unless it succeeds, so the library can still decode the event after a None."""
        if ev.event_type not in ROWS_EVENTS:
            return None
        wrapper = ev.packet
        if wrapper._BinLogPacketWrapper__data_buffer or not ev.complete:
            return None
        raw = wrapper.packet
        start = raw._position
        return self.decode(ev.table_id, ev.table_map[ev.table_id], ev.columns_present_bitmap,
                           ev.columns_present_bitmap2 if etype == "update_rows" else None, raw._data, start,
                           start + ev.event_size - wrapper.read_bytes, etype)

    def decode(self, table_id: int, table, present: bytes, present2: bytes | None, data: bytes, start: int,
               end: int, etype: str) -> list[dict] | None:
        """The images in `data[start:end]` (a rows event's body after its bitmaps) of the table map `table`, or
        None when they cannot be read here exactly."""
        first = self._reader(table_id, table, present)
        second = self._reader(table_id, table, present2) if etype == "update_rows" else None
        if first is None or (etype == "update_rows" and second is None):
            return None
        buf = data[:end]  # a string length past the event's end fails, not reads the checksum
        pos, out = start, []
        try:  # a loop per kind: the per-row path tests nothing but the position
            if etype == "update_rows":
                while pos < end:
                    before, pos = first(buf, pos)
                    after, pos = second(buf, pos)
                    out.append({"before": before, "after": after})
            elif etype == "write_rows":
                while pos < end:
                    after, pos = first(buf, pos)
                    out.append({"before": None, "after": after})
            else:
                while pos < end:
                    before, pos = first(buf, pos)
                    out.append({"before": before, "after": None})
        except (ValueError, IndexError, UnicodeDecodeError, struct.error, decimal.InvalidOperation,
                OverflowError):
            return None
        if pos != end:
            return None
        return out
