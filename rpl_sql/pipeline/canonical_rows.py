"""The events table's canonical rows, collected column by column into Arrow: the row images as JSON text and
each statement's table list (`Batch`)."""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
from collections import Counter
from typing import Any, Iterable

import pyarrow as pa

from rpl_sql.filters.evaluate import TableRef
from rpl_sql.language.lexer import redact
from rpl_sql.pipeline.events import EVENTS_SCHEMA, SHAPE_ID
from rpl_sql.pipeline.replica.columns import time_text

_COLS = [f.name for f in EVENTS_SCHEMA]

try:  # arro3 (a deltalake dependency) hands lists to pyarrow without pa.array's pandas probe (~1.5 s import)
    from arro3.core import Array as _A3Array
    from arro3.core import DataType as _A3Type
    _A3 = {"string": _A3Type.string(), "int64": _A3Type.int64(), "bool": _A3Type.bool()}
except ImportError:  # pragma: no cover
    _A3Array = None

_PA = {"string": pa.string(), "int64": pa.int64(), "bool": pa.bool_()}

_TABLE_STRUCT = EVENTS_SCHEMA.field("tables").type.value_type

def _arr(values: list, kind: str) -> pa.Array:
    if _A3Array is None:
        return pa.array(values, _PA[kind])
    return pa.array(_A3Array(values, _A3[kind]))


class Batch:
    """Canonical rows being collected column by column (`seq` is assigned at commit)."""

    _PLAIN = ("gtid", "binlog_file", "binlog_pos", "event_type", "command", "statement_kind", "default_db",
              "db_name", "table_name", "statement", "rows", "event_time", "filter_db", "columns")

    def __init__(self, channel: str, source: str):
        self.channel, self.source = channel, source
        self.cols: dict[str, list] = {c: [] for c in self._PLAIN}
        # `tables` flattened: per row an offset (None for NULL), then db / name / updating of every entry
        self.t_offsets: list = []
        self.t_db: list = []
        self.t_name: list = []
        self.t_upd: list = []
        self.dropped: Counter = Counter()

    def __len__(self) -> int:
        return len(self.cols["event_type"])

    def add(self, gtid, file, pos, event_type, command=None, kind=None, default_db=None, db_name=None,
            table_name=None, tables=None, statement=None, rows=None, time_us=0, columns=None) -> None:
        c = self.cols
        c["gtid"].append(gtid)
        c["binlog_file"].append(file)
        c["binlog_pos"].append(pos)
        c["event_type"].append(event_type)
        c["command"].append(command)
        c["statement_kind"].append(kind)
        c["default_db"].append(default_db)
        c["db_name"].append(db_name)
        c["table_name"].append(table_name)
        c["statement"].append(redact(statement) if statement else statement)  # the source's passwords too
        c["rows"].append(rows)
        c["event_time"].append(time_us)
        c["columns"].append(columns)
        c["filter_db"].append(db_name if event_type in ("write_rows", "update_rows", "delete_rows")
                              else (default_db or ""))
        if tables is None:
            self.t_offsets.append(None)
        else:
            self.t_offsets.append(len(self.t_db))
            for t in tables:
                self.t_db.append(t["db"])
                self.t_name.append(t["name"])
                self.t_upd.append(t["updating"])

    def _tables(self) -> pa.Array:
        offsets = self.t_offsets
        ends = [len(self.t_db)]
        # ListArray.from_arrays wants n+1 offsets; a NULL list takes the next valid offset (mask marks it)
        fixed, nxt = [], ends[0]
        for o in reversed(offsets):
            fixed.append(nxt if o is None else o)
            if o is not None:
                nxt = o
        fixed.reverse()
        values = pa.StructArray.from_arrays(
            [_arr(self.t_db, "string"), _arr(self.t_name, "string"), _arr(self.t_upd, "bool")],
            fields=list(_TABLE_STRUCT))
        mask = _arr([o is None for o in offsets], "bool")
        return pa.ListArray.from_arrays(_arr(fixed + ends, "int64").cast(pa.int32()), values,
                                        type=EVENTS_SCHEMA.field("tables").type, mask=mask)

    def to_table(self, first_seq: int) -> pa.Table:
        n = len(self)
        c = self.cols
        arrays = []
        for f in EVENTS_SCHEMA:
            name = f.name
            if name == "channel":
                arrays.append(_arr([self.channel] * n, "string"))
            elif name == "seq":
                arrays.append(_arr(list(range(first_seq, first_seq + n)), "int64"))
            elif name == "source":
                arrays.append(_arr([self.source] * n, "string"))
            elif name == "tables":
                arrays.append(self._tables())
            elif name in ("binlog_pos",):
                arrays.append(_arr(c[name], "int64"))
            elif name == "event_time":
                arrays.append(_arr(c[name], "int64").view(f.type))
            elif name == SHAPE_ID:  # set by the ingest's compaction
                arrays.append(pa.nulls(n, f.type))
            else:
                arrays.append(_arr(c[name], "string"))
        return pa.Table.from_arrays(arrays, schema=EVENTS_SCHEMA)

    def clear(self) -> None:
        for v in self.cols.values():
            v.clear()
        for v in (self.t_offsets, self.t_db, self.t_name, self.t_upd):
            v.clear()
        self.dropped.clear()


def _json_default(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, _dt.timedelta):  # MySQL TIME
        return time_text(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$binary": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, (set, frozenset)):
        return sorted(v, key=str)
    raise TypeError(f"cannot land a {type(v).__name__} value")


# one encoder for every call: json.dumps with options builds a new JSONEncoder each time (a third of its cost)
_ENCODER = json.JSONEncoder(default=_json_default, ensure_ascii=False, separators=(",", ":"))

def rows_json(images: list[dict]) -> str:
    """Row images as the canonical JSON text."""
    return _ENCODER.encode(images)


def tables_value(tables: Iterable[TableRef]) -> list[dict]:
    return [{"db": t.db, "name": t.name, "updating": bool(t.updating)} for t in tables]
