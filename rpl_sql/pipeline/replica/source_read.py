"""A source table's rows in the replica's exact Arrow types, read at the server's speed.

connectorx reads a result set straight into Arrow over MySQL's binary protocol (FLOAT and DOUBLE keep their
bits), and each column is selected as an expression whose result maps onto the replica's type without loss:
DATETIME and DATE as microseconds and days since the epoch (a zero date or a zero month reads NULL, as the
binlog path lands it), TIMESTAMP as its epoch, DECIMAL and BIGINT UNSIGNED as their text, TIME as MySQL's
text normalised as `columns.time_text` writes it. A chunk is a keyset page: `WHERE key > last ORDER BY key
LIMIT n`, one statement with its own read view, so no transaction stays open and nothing is locked.

Where connectorx cannot serve (it is not installed, or the channel needs TLS) the same pages are read with
pymysql and `columns.client_converter`: the reference the fast path is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from rpl_sql.language.quoting import ident, mysql_str, qualified
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.source_server.connection import connect

_EPOCH_US = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {c})"
_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "year", "bit"})
_KEY_PREFIX = "__rpl_key_"


@dataclass(frozen=True)
class Page:
    """One chunk of a table: its rows in the replica's schema and the key of its last row (None: no rows)."""

    rows: pa.Table
    last_key: tuple | None


def _value_sql(c: dict) -> str:
    q = ident(c["name"])
    t = c["type"]
    if t == "datetime":
        return _EPOCH_US.format(c=q)
    if t == "date":
        return f"DATEDIFF({q}, '1970-01-01')"
    if t == "timestamp":  # the stored epoch, whatever the session's time zone; 0 is only the zero value
        return f"CAST(NULLIF(UNIX_TIMESTAMP({q}), 0) * 1000000 AS SIGNED)"
    if t == "decimal" and int(c.get("scale", 0)) <= 10 and int(c.get("precision", 10)) - int(c.get("scale", 0)) <= 17:
        # connectorx reads it into rust_decimal (96 bits) at scale 10: 17 integer digits fit; cast back exactly
        return q
    if t == "decimal" or t == "time" or (t == "bigint" and c.get("unsigned")):
        return f"CAST({q} AS CHAR)"
    if t == "bit":
        return f"CAST({q} AS UNSIGNED)"
    return q


def _key_sql(c: dict) -> str:
    """The key column as text that, quoted back into SQL, compares equal to it."""
    q = ident(c["name"])
    if c["type"] == "blob":
        return f"HEX({q})"
    if c["type"] == "bit":
        return f"CAST({q} AS UNSIGNED)"
    return f"CAST({q} AS CHAR)"


def _key_literal(c: dict, text: Any) -> str:
    if c["type"] == "blob":
        return f"X'{text}'"
    if c["type"] in _INTEGERS:
        return str(int(text))
    return mysql_str(str(text))


def table_columns(cur, db: str, name: str) -> list[dict]:
    """The table's columns from information_schema (`cur`: a pymysql cursor), in the binlog's vocabulary."""
    cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, "
                "COLUMN_KEY FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                "ORDER BY ORDINAL_POSITION", (db, name))
    names = [d[0] for d in cur.description]
    return C.from_information_schema([dict(zip(names, r)) for r in cur.fetchall()])


def key_columns(cols: list[dict]) -> list[dict]:
    """The primary key's columns, in the table's column order."""
    return [c for c in cols if c.get("pk")]


def page_sql(db: str, name: str, cols: list[dict], after: tuple | None, limit: int | None,
             upto: int | None = None) -> str:
    """The SELECT of one page: every column as `_value_sql`, then the key as text; rows after `after` (and with
    a single integer key up to `upto`), in key order."""
    keys = key_columns(cols)
    # aliases of their own: ORDER BY would take a column's name for the alias of its converted value
    select = [f"{_value_sql(c)} AS {ident('__rpl_value_' + str(i))}" for i, c in enumerate(cols)]
    select += [f"{_key_sql(c)} AS {ident(_KEY_PREFIX + str(i))}" for i, c in enumerate(keys)]
    sql = f"SELECT {', '.join(select)} FROM {qualified(db, name)}"
    if after is not None:
        # (a, b) > (x, y) spelled out, which every server's range optimizer reads as an index range
        terms = []
        for i, c in enumerate(keys):
            eq = [f"{ident(k['name'])} = {_key_literal(k, after[j])}" for j, k in enumerate(keys[:i])]
            terms.append("(" + " AND ".join(eq + [f"{ident(c['name'])} > {_key_literal(c, after[i])}"]) + ")")
        sql += " WHERE " + " OR ".join(terms)
    if upto is not None:
        sql += (" AND " if after is not None else " WHERE ") + f"{ident(keys[0]['name'])} <= {int(upto)}"
    if keys:
        sql += " ORDER BY " + ", ".join(ident(c["name"]) for c in keys)
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


def _time_text(v: str | None) -> str | None:
    """MySQL's TIME text ('-12:34:56.789') as `columns.time_text` writes it ('-12:34:56.789000')."""
    if v is None or "." not in v:
        return v
    whole, frac = v.split(".", 1)
    return whole if not frac.strip("0") else f"{whole}.{frac.ljust(6, '0')}"


def _to_type(arr: pa.ChunkedArray, c: dict) -> pa.ChunkedArray:
    """A selected column (`_value_sql`) as the replica's Arrow type of `c`."""
    target = C.arrow_type(c)
    t = c["type"]
    if t == "datetime" or t == "timestamp":
        return arr.cast(pa.int64()).cast(target) if arr.type != target else arr
    if t == "date":
        return arr.cast(pa.int32()).cast(target)
    if t == "time":
        return pa.chunked_array([pa.array([_time_text(v) for v in arr.to_pylist()], pa.string())])
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr.cast(target)  # text, or DECIMAL / BIGINT UNSIGNED digits into their decimal type
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), target)
    return arr.cast(target)


def to_replica_schema(raw: pa.Table, cols: list[dict]) -> Page:
    """The page as connectorx (or pymysql) read it, in the replica's schema, and its last key."""
    schema = C.arrow_schema(cols)
    data = [_to_type(raw.column(i), c) for i, c in enumerate(cols)]
    rows = pa.Table.from_arrays(data, schema=schema)
    nkeys = raw.num_columns - len(cols)
    last = None
    if raw.num_rows and nkeys:
        last = tuple(raw.column(len(cols) + i)[raw.num_rows - 1].as_py() for i in range(nkeys))
    return Page(rows, last)


def connectorx_url(settings: dict) -> str | None:
    """A connectorx URL for pymysql `settings`; None where connectorx cannot honour them (TLS, a bind address)."""
    if any(k.startswith("ssl") for k in settings) or settings.get("bind_address"):
        return None
    try:
        import connectorx  # noqa: F401
    except ImportError:
        return None
    user = quote(str(settings.get("user") or ""), safe="")
    password = quote(str(settings.get("password") or ""), safe="")
    auth = f"{user}:{password}@" if password else f"{user}@"
    return f"mysql://{auth}{settings['host']}:{int(settings.get('port') or 3306)}"


def key_ranges(settings: dict, db: str, name: str, cols: list[dict], parts: int) -> list[int | None]:
    """Upper bounds splitting a single integer key's current span into `parts` ranges of equal width, the last
    open (None): [b0, b1, ..., None], range i being (b[i-1], b[i]]. One open range for other keys."""
    keys = key_columns(cols)
    if parts < 2 or len(keys) != 1 or keys[0]["type"] not in _INTEGERS - {"bit", "year"}:
        return [None]
    conn = connect(settings, autocommit=True)
    try:
        with conn.cursor() as cur:
            q = ident(keys[0]["name"])
            cur.execute(f"SELECT MIN({q}), MAX({q}) FROM {qualified(db, name)}")
            lo, hi = cur.fetchone()
    finally:
        conn.close()
    if lo is None or hi - lo < parts * 1000:
        return [None]
    step = (int(hi) - int(lo)) // parts
    return [int(lo) + step * (i + 1) for i in range(parts - 1)] + [None]


def read_page(settings: dict, db: str, name: str, cols: list[dict], after: tuple | None, limit: int | None,
              *, fast: bool = True, upto: int | None = None) -> Page:
    """One keyset page of `db.name` (the whole table with no key or no `limit`)."""
    sql = page_sql(db, name, cols, after, limit, upto)
    url = connectorx_url(settings) if fast else None
    if url is not None:
        import connectorx as cx

        return to_replica_schema(cx.read_sql(url, sql, return_type="arrow"), cols)
    return to_replica_schema(_pymysql_read(settings, sql, cols), cols)


def _pymysql_read(settings: dict, sql: str, cols: list[dict]) -> pa.Table:
    """The same SELECT through pymysql: the reference path."""
    conn = connect(settings, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
    finally:
        conn.close()
    out = {}
    for i, n in enumerate(names):
        vals = [r[i] for r in rows]
        if i < len(cols):
            vals = [_client_value(v, cols[i]) for v in vals]
        out[n] = pa.array(vals, pa.uint64() if i < len(cols) and cols[i]["type"] == "bit" else None)
    return pa.table(out) if names else pa.table({})


def _client_value(v: Any, c: dict) -> Any:
    """A pymysql value of `_value_sql(c)` as the type connectorx gives it."""
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)) and c["type"] != "blob":
        return v.decode("utf-8", "surrogateescape")
    return v
