"""Debezium's MySQL encodings read back: a change event's Kafka Connect schema as replica columns, its values as
the canonical values the binlog ingest lands.

    >>> row = RowDecoder.of(envelope_schema)                                         # doctest: +SKIP
    >>> row.image({"id": 1, "price": "Ark=", "born": 19000})                         # doctest: +SKIP
    {'id': 1, 'price': '24.75', 'born': '2022-01-08'}

How Debezium encodes a column depends on connector options (decimal.handling.mode, time.precision.mode,
binary.handling.mode, bigint.unsigned.handling.mode); each field's schema names the encoding it got (a
semantic `name` such as `io.debezium.time.MicroTimestamp`, and `parameters`), so the schema is read, never the
options. The column types are exact when the connector propagates the source types
(`column.propagate.source.type` / `datatype.propagate.source.type`: the `__debezium.source.column.*`
parameters); otherwise they are inferred from the Connect types and marked `inferred`, and the replica keeps the
types its DDL gave the table when the names agree. Without a schema (JsonConverter `schemas.enable=false`)
there is nothing to read: values land as they came and the columns stay unknown.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import functools
import json
from typing import Any, Callable

from rpl_sql.language.quoting import mysql_str
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica import ddl

__all__ = ["RowDecoder"]

_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_DAY = _dt.date(1970, 1, 1)
_SOURCE = "__debezium.source.column."
_INFERRED = {"int8": {"type": "tinyint"}, "int16": {"type": "smallint"}, "int32": {"type": "int"},
             "int64": {"type": "bigint"}, "float32": {"type": "float"}, "float64": {"type": "double"},
             "boolean": {"type": "bit", "bits": 1}, "string": {"type": "text"}, "bytes": {"type": "blob"}}

Decode = Callable[[Any], Any]


def _unscaled(b64: str, scale: int) -> str:
    """A Connect Decimal (big-endian two's complement of the unscaled value) as exact decimal text."""
    n = int.from_bytes(base64.b64decode(b64), "big", signed=True)
    sign, digits, _ = decimal.Decimal(n).as_tuple()
    return str(decimal.Decimal((sign, digits, -scale)))


def _decimal(scale: int) -> Decode:
    return lambda v: _unscaled(v, scale) if isinstance(v, str) else v


def _variable_decimal(v: Any) -> Any:
    return _unscaled(v["value"], int(v["scale"])) if isinstance(v, dict) else v


def _days(v: Any) -> Any:
    return (_EPOCH_DAY + _dt.timedelta(days=v)).isoformat() if isinstance(v, int) else v


_TO_MICROS: dict[str, Callable[[int], int]] = {"ms": lambda v: v * 1000, "us": lambda v: v, "ns": lambda v: v // 1000}


def _since_epoch(unit: str) -> Decode:
    to_us = _TO_MICROS[unit]
    return lambda v: (_EPOCH + _dt.timedelta(microseconds=to_us(v))).isoformat() if isinstance(v, int) else v


def _zoned(v: Any) -> Any:
    """An ISO-8601 instant ('2024-01-02T03:04:05.5Z') as the naive UTC text a binlog TIMESTAMP lands as."""
    if not isinstance(v, str):
        return v
    t = _dt.datetime.fromisoformat(v)
    return (t.astimezone(_dt.timezone.utc) if t.tzinfo else t).replace(tzinfo=None).isoformat()


def _time(unit: str) -> Decode:
    to_us = _TO_MICROS[unit]
    return lambda v: C.time_text(_dt.timedelta(microseconds=to_us(v))) if isinstance(v, int) else v


def _bits(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    return int.from_bytes(base64.b64decode(v), "little") if isinstance(v, str) else v  # Debezium: little-endian


def _bytes(v: Any) -> Any:
    return {"$binary": v} if isinstance(v, str) else v


def _geometry(v: Any) -> Any:
    return {"$binary": v["wkb"]} if isinstance(v, dict) and "wkb" in v else v


def _json(v: Any) -> Any:
    """JSON text as the document (landed as the binlog lands MySQL's binary JSON); text that is not JSON
    stays text."""
    if not isinstance(v, str):
        return v
    try:
        return json.loads(v)
    except ValueError:
        return v


def _bool(v: Any) -> Any:
    return int(v) if isinstance(v, bool) else v


# semantic schema name -> (inferred column, decoder)
_SEMANTIC: dict[str, Callable[[dict], tuple[dict, Decode | None]]] = {
    "org.apache.kafka.connect.data.Decimal": lambda p: (
        {"type": "decimal", "precision": int(p.get("connect.decimal.precision", 65)), "scale": int(p.get("scale", 0))},
        _decimal(int(p.get("scale", 0)))),
    "io.debezium.data.VariableScaleDecimal": lambda p: ({"type": "decimal", "precision": 65, "scale": 30},
                                                        _variable_decimal),
    "io.debezium.time.Date": lambda p: ({"type": "date"}, _days),
    "org.apache.kafka.connect.data.Date": lambda p: ({"type": "date"}, _days),
    "io.debezium.time.Timestamp": lambda p: ({"type": "datetime", "fsp": 3}, _since_epoch("ms")),
    "org.apache.kafka.connect.data.Timestamp": lambda p: ({"type": "datetime", "fsp": 3}, _since_epoch("ms")),
    "io.debezium.time.MicroTimestamp": lambda p: ({"type": "datetime", "fsp": 6}, _since_epoch("us")),
    "io.debezium.time.NanoTimestamp": lambda p: ({"type": "datetime", "fsp": 6}, _since_epoch("ns")),
    "io.debezium.time.ZonedTimestamp": lambda p: ({"type": "timestamp", "fsp": 6}, _zoned),
    "io.debezium.time.Time": lambda p: ({"type": "time", "fsp": 3}, _time("ms")),
    "org.apache.kafka.connect.data.Time": lambda p: ({"type": "time", "fsp": 3}, _time("ms")),
    "io.debezium.time.MicroTime": lambda p: ({"type": "time", "fsp": 6}, _time("us")),
    "io.debezium.time.NanoTime": lambda p: ({"type": "time", "fsp": 6}, _time("ns")),
    "io.debezium.time.Year": lambda p: ({"type": "year"}, None),
    "io.debezium.data.Json": lambda p: ({"type": "json"}, _json),
    "io.debezium.data.Enum": lambda p: ({"type": "enum", "values": _members(p)}, None),
    "io.debezium.data.EnumSet": lambda p: ({"type": "set", "values": _members(p)}, None),
    "io.debezium.data.Bits": lambda p: ({"type": "bit", "bits": int(p.get("length", 64))}, _bits),
    "io.debezium.data.geometry.Geometry": lambda p: ({"type": "blob"}, _geometry),
    "io.debezium.data.geometry.Point": lambda p: ({"type": "blob"}, _geometry),
}


def _members(params: dict) -> list[str]:
    allowed = params.get("allowed")
    return allowed.split(",") if allowed else []


@functools.lru_cache(maxsize=1024)
def _declared(type_name: str, length: int | None, scale: int | None, members: tuple[str, ...]) -> dict | None:
    """The column of a propagated source type ('INT UNSIGNED', 'DECIMAL' with length 10 and scale 2, ...), read
    as DDL; None when the DDL reader does not know the type."""
    base = type_name.strip().upper()
    unsigned = base.endswith(" UNSIGNED") or " UNSIGNED " in base
    word = base.split()[0] if base else ""
    if word in ("ENUM", "SET"):
        text = f"{word}({', '.join(mysql_str(m) for m in members)})"
    elif word in ("DECIMAL", "NUMERIC", "DEC") and length is not None:
        text = f"DECIMAL({length},{scale or 0})"
    elif word in ("DATETIME", "TIMESTAMP", "TIME", "BIT") and length is not None:
        text = f"{word}({length})"
    else:
        text = word
    if unsigned:
        text += " UNSIGNED"
    stmt = ddl.parse(f"CREATE TABLE t (c {text})")
    cols = getattr(stmt, "columns", None)
    return dict(cols[0]) if cols else None


def _int_param(params: dict, key: str) -> int | None:
    v = params.get(_SOURCE + key)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _field(f: dict) -> tuple[dict, Decode | None]:
    """One Connect field: its column and the decoder of its values (None: lands as it came)."""
    params = f.get("parameters") or {}
    semantic = _SEMANTIC.get(f.get("name") or "")
    if semantic is not None:
        col, decode = semantic(params)
    elif f.get("type") in _INFERRED:
        col, decode = dict(_INFERRED[f["type"]]), (_bytes if f["type"] == "bytes" else
                                                   _bool if f["type"] == "boolean" else None)
    else:
        col, decode = {"type": "text"}, None  # arrays, maps, structs: kept as landed
    declared = None
    if params.get(_SOURCE + "type"):
        declared = _declared(params[_SOURCE + "type"], _int_param(params, "length"), _int_param(params, "scale"),
                             tuple(col.get("values") or ()))
    if declared is None:
        col["inferred"] = True
    else:
        col = dict(declared)  # the cached column is shared by every field of that type
        if col["type"] == "bigint" and col.get("unsigned") and f.get("type") == "int64":
            decode = _unsigned_long  # bigint.unsigned.handling.mode=long wraps values above 2^63 - 1
    col["name"] = f["field"]
    return col, decode


def _unsigned_long(v: Any) -> Any:
    return v + 2 ** 64 if isinstance(v, int) and v < 0 else v


class RowDecoder:
    """A table's row images as Debezium encoded them -> the canonical landed images, and the table's columns."""

    def __init__(self, fields: list[dict]):
        cols, decs = [], []
        for f in fields:
            col, decode = _field(f)
            cols.append(col)
            if decode is not None:
                decs.append((f["field"], decode))
        self.columns = cols
        self.columns_json = C.columns_json(cols)
        self._decoders = decs

    def image(self, values: dict | None) -> dict | None:
        if not values or not self._decoders:
            return values
        out = dict(values)
        for name, decode in self._decoders:
            v = out.get(name)
            if v is not None:
                out[name] = decode(v)
        return out

    @classmethod
    def of(cls, envelope: dict | None) -> "RowDecoder | None":
        """The decoder for a change event's envelope schema (its `before`/`after` struct); None without one."""
        fields = _row_fields(envelope)
        if fields is None:
            return None
        key = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return _cached(key)


def _row_fields(envelope: dict | None) -> list[dict] | None:
    if not isinstance(envelope, dict):
        return None
    for f in envelope.get("fields") or ():
        if f.get("field") in ("after", "before") and f.get("type") == "struct" and f.get("fields"):
            return f["fields"]
    return None


@functools.lru_cache(maxsize=256)
def _cached(key: str) -> RowDecoder:
    return RowDecoder(json.loads(key))
