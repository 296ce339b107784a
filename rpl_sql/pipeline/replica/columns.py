"""A replicated table's columns in one vocabulary (MySQL's type names), from a binlog table map or from DDL,
and their lossless Arrow/Delta types.

A column is a small dict, as it is stored in the events table's `columns` JSON and in the replica catalog:
``{"name": "id", "type": "int", "unsigned": true, "pk": true}``; further keys by type: `precision`/`scale`
(decimal), `fsp` (datetime, timestamp, time), `bits` (bit), `values` (enum, set). Types with no exact Spark
counterpart keep their values whole: BIGINT UNSIGNED and BIT(64) as DECIMAL(20,0), DECIMAL wider than 38
digits and TIME as strings, SET as the comma-joined members in definition order (as MySQL shows them).
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
from typing import Any, Callable, Iterable

import pyarrow as pa

from rpl_sql.errors import RplSqlError

# binlog column type codes (pymysqlreplication.constants.FIELD_TYPE) -> vocabulary
_INTS = {1: "tinyint", 2: "smallint", 9: "mediumint", 3: "int", 8: "bigint"}
_TEXTUAL = {15, 253, 254, 249, 250, 251, 252}  # varchar, var_string, string (char), the blobs
_SIGNED = {"tinyint": pa.int8(), "smallint": pa.int16(), "mediumint": pa.int32(), "int": pa.int32(),
           "bigint": pa.int64()}
_UNSIGNED = {"tinyint": pa.int16(), "smallint": pa.int32(), "mediumint": pa.int32(), "int": pa.int64(),
             "bigint": pa.decimal128(20, 0)}
MAX_DECIMAL = 38  # Spark's and Delta's widest decimal
_WIDE = decimal.Context(prec=80)  # MySQL's DECIMAL(65, 30) fits; the default 28 digits do not


class UnsupportedColumnError(RplSqlError, ValueError):
    """A binlog column type that the replica cannot represent (named in the message)."""


def from_table_map(columns: Iterable[Any]) -> list[dict]:
    """The columns of a python-mysql-replication table map (`RowsEvent.columns`), in table order."""
    out = []
    for c in columns:
        code = c.type
        d: dict[str, Any] = {"name": c.name}
        if code in _INTS:
            d["type"] = _INTS[code]
            if getattr(c, "unsigned", False):
                d["unsigned"] = True
        elif code in (0, 246):
            d.update(type="decimal", precision=int(c.precision), scale=int(c.decimals))
        elif code == 4:
            d["type"] = "float"
        elif code == 5:
            d["type"] = "double"
        elif code in (10, 14):
            d["type"] = "date"
        elif code in (12, 18):
            d.update(type="datetime", fsp=int(getattr(c, "fsp", 0) or 0))
        elif code in (7, 17):
            d.update(type="timestamp", fsp=int(getattr(c, "fsp", 0) or 0))
        elif code in (11, 19):
            d.update(type="time", fsp=int(getattr(c, "fsp", 0) or 0))
        elif code == 13:
            d["type"] = "year"
        elif code == 16:
            d.update(type="bit", bits=int(c.bits))
        elif code == 245:
            d["type"] = "json"
        elif code == 247 or getattr(c, "enum_values", None):
            d.update(type="enum", values=list(c.enum_values or []))
        elif code == 248 or getattr(c, "set_values", None):
            d.update(type="set", values=list(c.set_values or []))
        elif code == 255:
            d["type"] = "blob"
        elif code in _TEXTUAL:
            d["type"] = "blob" if getattr(c, "character_set_name", None) == "binary" else "text"
        else:
            raise UnsupportedColumnError(f"column {c.name!r}: binlog type {code} is not supported")
        if getattr(c, "is_primary", False):
            d["pk"] = True
        out.append(d)
    return out


def columns_json(columns: list[dict]) -> str:
    return json.dumps(columns, ensure_ascii=False, separators=(",", ":"))


def primary_key(columns: list[dict]) -> list[str]:
    return [c["name"] for c in columns if c.get("pk")]


def same_shape(a: list[dict], b: list[dict]) -> bool:
    """Same names and Arrow types in the same order (what decides whether the Delta table must change)."""
    return [(c["name"], arrow_type(c)) for c in a] == [(c["name"], arrow_type(c)) for c in b]


def settle(event: list[dict], known: list[dict] | None) -> list[dict]:
    """A row event's columns against the replica table's: where the event's types were only inferred (a
    Debezium record without its source types) and the names agree, the table's own types (from its DDL) stand."""
    if known is not None and any(c.get("inferred") for c in event) and \
            [c["name"].lower() for c in event] == [c["name"].lower() for c in known]:
        return known
    return event


def arrow_type(c: dict) -> pa.DataType:
    t = c["type"]
    if t in _SIGNED:
        return (_UNSIGNED if c.get("unsigned") else _SIGNED)[t]
    if t == "decimal":
        p, s = int(c.get("precision", 10)), int(c.get("scale", 0))
        return pa.decimal128(p, s) if p <= MAX_DECIMAL else pa.string()
    if t == "float":
        return pa.float32()
    if t == "double":
        return pa.float64()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "year":
        return pa.int16()
    if t == "bit":
        return pa.int64() if int(c.get("bits", 1)) < 64 else pa.decimal128(20, 0)
    if t == "blob":
        return pa.binary()
    return pa.string()  # text, enum, set, json, time, wide decimals


def arrow_schema(columns: list[dict]) -> pa.Schema:
    return pa.schema([pa.field(c["name"], arrow_type(c)) for c in columns])


def _binary(v: Any) -> bytes:
    if isinstance(v, dict) and "$binary" in v:
        return base64.b64decode(v["$binary"])
    if isinstance(v, str):
        return v.encode("utf-8")
    raise TypeError(f"not a binary value: {v!r}")


def _text(v: Any) -> str:
    if isinstance(v, dict) and "$binary" in v:  # text the reader could not decode: keep what it can
        return base64.b64decode(v["$binary"]).decode("utf-8", "replace")
    return v if isinstance(v, str) else str(v)


def converter(c: dict) -> Callable[[Any], Any]:
    """From a landed row image value (the events table's JSON) to the Python value of its Arrow type."""
    t = c["type"]
    at = arrow_type(c)
    if t in _SIGNED or t == "year":
        return decimal.Decimal if pa.types.is_decimal(at) else int
    if t == "decimal":
        if pa.types.is_decimal(at):
            q = decimal.Decimal(1).scaleb(-int(c.get("scale", 0)))
            return lambda v: decimal.Decimal(v).quantize(q, context=_WIDE)
        # wider than Spark's decimals: the value's digits as text, never an exponent ('0E-10' for 0.0000000000)
        return lambda v: format(decimal.Decimal(v), "f")
    if t in ("float", "double"):
        return float
    if t == "date":
        return _dt.date.fromisoformat
    if t == "datetime":
        return _dt.datetime.fromisoformat
    if t == "timestamp":
        return lambda v: _dt.datetime.fromisoformat(v).replace(tzinfo=_dt.timezone.utc)
    if t == "bit":
        conv = decimal.Decimal if pa.types.is_decimal(at) else int
        return lambda v: conv(int(v, 2)) if isinstance(v, str) else conv(v)
    if t == "blob":
        return _binary
    if t == "set":
        order = {m: i for i, m in enumerate(c.get("values") or [])}

        def joined(v: Any) -> str:
            if isinstance(v, str):
                return v
            return ",".join(sorted(v, key=lambda m: order.get(m, len(order))))
        return joined
    if t == "json":
        return lambda v: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(", ", ": "))
    return _text


def converters(columns: list[dict]) -> list[tuple[str, Callable[[Any], Any]]]:
    return [(c["name"], converter(c)) for c in columns]


def to_arrow(columns: list[dict], images: list[dict]) -> pa.Table:
    """Row images (dicts of landed values) as a table of the columns' types; missing keys read NULL."""
    convs = converters(columns)
    data = {n: [None if (v := img.get(n)) is None else f(v) for img in images] for n, f in convs}
    return pa.table({n: pa.array(data[n], type=arrow_type(c)) for (n, _), c in zip(convs, columns)})


# ---------------------------------------------------------------- a snapshot: information_schema and client values

_IS_INTS = {"tinyint", "smallint", "mediumint", "int", "bigint"}
_IS_BLOB = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
            "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}


def _members(column_type: str) -> list[str]:
    """The members of `enum('a','b')` / `set('x','y')` as information_schema spells them."""
    inner = column_type[column_type.index("(") + 1:column_type.rindex(")")]
    out, cur, i = [], None, 0
    while i < len(inner):
        c = inner[i]
        if cur is None:
            if c == "'":
                cur = ""
        elif c == "'" and i + 1 < len(inner) and inner[i + 1] == "'":
            cur += "'"
            i += 1
        elif c == "\\" and i + 1 < len(inner):
            cur += inner[i + 1]
            i += 1
        elif c == "'":
            out.append(cur)
            cur = None
        else:
            cur += c
        i += 1
    return out


def from_information_schema(rows: Iterable[dict]) -> list[dict]:
    """Columns of one table from information_schema.COLUMNS rows (in ORDINAL_POSITION order), in the same
    vocabulary a binlog table map gives, so the first row event after a snapshot changes nothing."""
    out = []
    for r in rows:
        dt, ct = r["DATA_TYPE"].lower(), r["COLUMN_TYPE"].lower()
        d: dict[str, Any] = {"name": r["COLUMN_NAME"]}
        if dt in _IS_INTS:
            d["type"] = dt
            if "unsigned" in ct:
                d["unsigned"] = True
        elif dt in ("decimal", "numeric"):
            d.update(type="decimal", precision=int(r["NUMERIC_PRECISION"]), scale=int(r["NUMERIC_SCALE"] or 0))
        elif dt in ("float", "double"):
            d["type"] = dt
        elif dt == "date":
            d["type"] = "date"
        elif dt in ("datetime", "timestamp", "time"):
            d.update(type=dt, fsp=int(r.get("DATETIME_PRECISION") or 0))
        elif dt == "year":
            d["type"] = "year"
        elif dt == "bit":
            d.update(type="bit", bits=int(r["NUMERIC_PRECISION"]))
        elif dt == "json":
            d["type"] = "json"
        elif dt in ("enum", "set"):
            d.update(type=dt, values=_members(r["COLUMN_TYPE"]))
        elif dt in _IS_BLOB:
            d["type"] = "blob"
        else:
            d["type"] = "text"
        if r.get("COLUMN_KEY") == "PRI":
            d["pk"] = True
        out.append(d)
    return out


def time_text(v: _dt.timedelta) -> str:
    """A MySQL TIME value as MySQL shows it ('-838:59:59', '12:00:00.500000')."""
    sign = "-" if v < _dt.timedelta(0) else ""
    us = abs(v) // _dt.timedelta(microseconds=1)
    s, us = divmod(us, 1_000_000)
    return f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" + (f".{us:06d}" if us else "")


def client_converter(c: dict) -> Callable[[Any], Any]:
    """From a value as pymysql returns it (session time_zone '+00:00') to the Python value of its Arrow type."""
    t = c["type"]
    if t in ("date", "datetime"):
        return lambda v: v if isinstance(v, (_dt.date, _dt.datetime)) else converter(c)(v)
    if t == "timestamp":
        return lambda v: v.replace(tzinfo=_dt.timezone.utc) if isinstance(v, _dt.datetime) else converter(c)(v)
    if t == "time":
        return lambda v: time_text(v) if isinstance(v, _dt.timedelta) else str(v)
    if t == "bit":
        conv = decimal.Decimal if pa.types.is_decimal(arrow_type(c)) else int
        return lambda v: conv(int.from_bytes(v, "big")) if isinstance(v, (bytes, bytearray)) else conv(v)
    if t == "blob":
        return lambda v: bytes(v) if isinstance(v, (bytes, bytearray)) else str(v).encode("utf-8")
    if t in ("text", "enum", "json"):
        return lambda v: v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)
    if t == "set":
        joined = converter(c)  # members in definition order, as MySQL shows them
        return lambda v: joined(list(v)) if isinstance(v, (set, frozenset)) else str(v)
    return converter(c)
