"""Debezium records -> typed replica tables: each column type in each of Debezium's encodings comes back as the
exact value, and a channel fed only by Debezium records ends with Delta tables of the source's types.

The encoder here is written from Debezium's MySQL connector documentation ("Data type mappings": precise and
string decimals, adaptive_time_microseconds and connect temporal modes, little-endian BIT bytes, base64 bytes,
ZonedTimestamp text, bigint.unsigned.handling.mode=long), independently of rpl_sql's decoder; the tests
compare the replica's values with the values the records were made from.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pyarrow as pa
from hypothesis import given, settings, strategies as st

import rpl_sql
from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.debezium import ingest_debezium
from rpl_sql.pipeline.debezium_types import RowDecoder
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica.materialize import materialize
from rpl_sql.storage.replica_catalog import Catalog
from rpl_sql.pipeline.replica.merge import read_all

EPOCH = dt.datetime(1970, 1, 1)
UTC = dt.timezone.utc


# ---------------------------------------------------------------- the encoder, after Debezium's documentation

def enc_decimal(d: decimal.Decimal, scale: int) -> str:
    unscaled = int(d.scaleb(scale, context=decimal.Context(prec=100)))
    return base64.b64encode(unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)).decode()


def enc_bits(n: int, bits: int) -> str:
    return base64.b64encode(n.to_bytes((bits + 7) // 8, "little")).decode()


def us(t: dt.timedelta) -> int:
    return t // dt.timedelta(microseconds=1)


def time_of(text: str) -> dt.timedelta:
    sign = -1 if text.startswith("-") else 1
    h, m, s = text.lstrip("-").split(":")
    return sign * dt.timedelta(hours=int(h), minutes=int(m), seconds=float(s))


def field(name, ctype, semantic=None, source=None, **params):
    f = {"type": ctype, "optional": True, "field": name}
    if semantic:
        f["name"] = semantic
    p = {k.replace("_", "."): str(v) for k, v in params.items()}
    if source:  # column.propagate.source.type
        typ, *rest = source
        p["__debezium.source.column.type"] = typ
        if rest and rest[0] is not None:
            p["__debezium.source.column.length"] = str(rest[0])
        if len(rest) > 1:
            p["__debezium.source.column.scale"] = str(rest[1])
    if p:
        f["parameters"] = p
    return f


# (column, the value as the replica holds it, Debezium's field schema, Debezium's value)
def cases(mode: str = "default"):
    d = decimal.Decimal
    return [
        ("tiny", -128, field("tiny", "int16"), -128),
        ("num", d("-12345678.90"), field("num", "bytes", "org.apache.kafka.connect.data.Decimal", scale=2,
                                         connect_decimal_precision=10), enc_decimal(d("-12345678.90"), 2)),
        ("wide", d("123456789012345678901234567890.12345678"),
         field("wide", "bytes", "org.apache.kafka.connect.data.Decimal", scale=8, connect_decimal_precision=38),
         enc_decimal(d("123456789012345678901234567890.12345678"), 8)),
        ("born", dt.date(1969, 12, 31), field("born", "int32", "io.debezium.time.Date"), -1),
        ("at3", dt.datetime(2024, 2, 29, 23, 59, 59, 125000),
         field("at3", "int64", "io.debezium.time.Timestamp"),
         us(dt.datetime(2024, 2, 29, 23, 59, 59, 125000) - EPOCH) // 1000),
        ("at6", dt.datetime(1960, 1, 1, 0, 0, 0, 1), field("at6", "int64", "io.debezium.time.MicroTimestamp"),
         us(dt.datetime(1960, 1, 1, 0, 0, 0, 1) - EPOCH)),
        ("ts", dt.datetime(2038, 1, 19, 3, 14, 7, 499999, tzinfo=UTC),
         field("ts", "string", "io.debezium.time.ZonedTimestamp"), "2038-01-19T03:14:07.499999Z"),
        ("dur", "-838:59:59.500000", field("dur", "int64", "io.debezium.time.MicroTime"),
         us(time_of("-838:59:59.5"))),
        ("flag", 1, field("flag", "boolean"), True),
        ("mask", 5, field("mask", "bytes", "io.debezium.data.Bits", length=3), enc_bits(5, 3)),
        ("mask64", d(2 ** 64 - 2), field("mask64", "bytes", "io.debezium.data.Bits", length=64),
         enc_bits(2 ** 64 - 2, 64)),
        ("doc", '{"a": [1, 2], "é": null}', field("doc", "string", "io.debezium.data.Json"), '{"a":[1,2],"é":null}'),
        ("size", "M", field("size", "string", "io.debezium.data.Enum", allowed="S,M,L"), "M"),
        ("tags", "x,z", field("tags", "string", "io.debezium.data.EnumSet", allowed="x,y,z"), "x,z"),
        ("yr", 2155, field("yr", "int32", "io.debezium.time.Year"), 2155),
        ("raw", b"\x00\xff'\\", field("raw", "bytes"), base64.b64encode(b"\x00\xff'\\").decode()),
        ("txt", "naïve ' \" ` \\ , % _ 日本", field("txt", "string"), "naïve ' \" ` \\ , % _ 日本"),
        ("dbl", 1.5e300, field("dbl", "float64"), 1.5e300),
    ]


def decoded(fields, values):
    dec = RowDecoder.of({"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": fields}]})
    image = json.loads(json.dumps(dec.image(values)))   # through the events table's JSON
    return dec.columns, image


def test_every_encoding_comes_back_as_the_source_value():
    cs = cases()
    cols, image = decoded([c[2] for c in cs], {c[0]: c[3] for c in cs})
    for col, (name, want, _, _) in zip(cols, cs):
        got = C.converter(col)(image[name])
        assert pa.array([got], type=C.arrow_type(col)).to_pylist() == [want], (name, col, image[name])
    assert all(c.get("inferred") for c in cols)  # no source types propagated: the replica's DDL types stand


def test_the_other_modes_and_propagated_source_types():
    """decimal.handling.mode=string and =double, time.precision.mode=connect, NanoTimestamp, and with
    column.propagate.source.type the exact MySQL types (BIGINT UNSIGNED in long mode wraps past 2^63)."""
    fields = [field("s", "string", source=("DECIMAL", 6, 3)), field("f", "float64", source=("DECIMAL", 4, 1)),
              field("d", "int32", "org.apache.kafka.connect.data.Date", source=("DATE",)),
              field("t", "int32", "org.apache.kafka.connect.data.Time", source=("TIME", 3)),
              field("n", "int64", "io.debezium.time.NanoTimestamp", source=("DATETIME", 6)),
              field("u", "int64", source=("BIGINT UNSIGNED", 20)), field("i", "int64", source=("INT UNSIGNED", 10)),
              field("j", "int64", source=("INT UNSIGNED", 10)),
              field("e", "string", "io.debezium.data.Enum", source=("ENUM", 1), allowed="a,b'c"),
              field("v", "bytes", "io.debezium.data.VariableScaleDecimal")]
    values = {"s": "-1.250", "f": 12.3, "d": 19782, "t": 3_723_004, "n": 1_700_000_000_123_456_789,
              "u": -1, "i": 4_294_967_295, "j": 7, "e": "b'c",
              "v": {"scale": 3, "value": base64.b64encode((-1).to_bytes(1, "big", signed=True)).decode()}}
    cols, image = decoded(fields, values)
    assert [(c["type"], c.get("unsigned"), c.get("precision"), c.get("scale"), c.get("fsp")) for c in cols[:7]] == [
        ("decimal", None, 6, 3, None), ("decimal", None, 4, 1, None), ("date", None, None, None, None),
        ("time", None, None, None, 3), ("datetime", None, None, None, 6), ("bigint", True, None, None, None),
        ("int", True, None, None, None)]
    assert [c["name"] for c in cols] == [f["field"] for f in fields]  # two columns of one type stay two
    assert cols[8]["values"] == ["a", "b'c"] and not any(c.get("inferred") for c in cols[:9])
    got = [C.converter(c)(image[c["name"]]) for c in cols]
    assert got == [decimal.Decimal("-1.250"), decimal.Decimal("12.3"), dt.date(2024, 2, 29), "01:02:03.004000",
                   dt.datetime(2023, 11, 14, 22, 13, 20, 123456), decimal.Decimal(2 ** 64 - 1), 4_294_967_295, 7,
                   "b'c", "-0.001"]


@settings(max_examples=150, deadline=None)
@given(st.decimals(min_value=-10 ** 12, max_value=10 ** 12, places=4, allow_nan=False, allow_infinity=False),
       st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 12, 31)),
       st.integers(min_value=-us(dt.timedelta(hours=838, minutes=59, seconds=59)),
                   max_value=us(dt.timedelta(hours=838, minutes=59, seconds=59))),
       st.integers(min_value=0, max_value=2 ** 63 - 1), st.binary(max_size=40))
def test_round_trip_property(num, when, dur_us, bits, raw):
    fields = [field("num", "bytes", "org.apache.kafka.connect.data.Decimal", scale=4, connect_decimal_precision=17),
              field("at", "int64", "io.debezium.time.MicroTimestamp"),
              field("dur", "int64", "io.debezium.time.MicroTime"),
              field("ts", "string", "io.debezium.time.ZonedTimestamp"),
              field("day", "int32", "io.debezium.time.Date"),
              field("b", "bytes", "io.debezium.data.Bits", length=63), field("raw", "bytes")]
    zoned = when.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
    values = {"num": enc_decimal(num, 4), "at": us(when - EPOCH), "dur": dur_us, "ts": zoned,
              "day": (when.date() - EPOCH.date()).days, "b": enc_bits(bits, 63),
              "raw": base64.b64encode(raw).decode()}
    cols, image = decoded(fields, values)
    got = {c["name"]: C.converter(c)(image[c["name"]]) for c in cols}
    assert got["num"] == num and got["at"] == when and got["ts"] == when.replace(tzinfo=UTC)
    assert time_of(got["dur"]) == dt.timedelta(microseconds=dur_us) and got["day"] == when.date()
    assert got["b"] == bits and got["raw"] == raw


# ---------------------------------------------------------------- a channel fed by Debezium only

F = "mysql-bin.000007"
GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
ODD = "we'ird \"x\", %_ é\\"   # a hostile column name


def envelope(db, table, fields):
    return {"type": "struct", "optional": False, "name": f"srv.{db}.{table}.Envelope",
            "fields": [{"type": "struct", "optional": True, "field": "before", "fields": fields},
                       {"type": "struct", "optional": True, "field": "after", "fields": fields},
                       {"type": "struct", "optional": False, "field": "source"},
                       {"type": "string", "optional": False, "field": "op"}]}


def record(op, db, table, pos, fields, before=None, after=None, row=0, snapshot="false", n=0):
    src = {"connector": "mysql", "name": "srv", "ts_ms": 1_700_000_000_000, "snapshot": snapshot, "db": db,
           "table": table, "server_id": 1, "gtid": f"{GTID}:{n}" if n else None, "file": F, "pos": pos, "row": row}
    return {"schema": envelope(db, table, fields),
            "payload": {"before": before, "after": after, "source": src, "op": op, "ts_ms": 1_700_000_000_001}}


def ddl(db, text, pos, n=0):
    src = {"connector": "mysql", "name": "srv", "ts_ms": 1_700_000_000_000, "snapshot": "false", "db": db,
           "table": None, "server_id": 1, "gtid": f"{GTID}:{n}" if n else None, "file": F, "pos": pos, "row": 0}
    return {"schema": {"type": "struct", "name": "io.debezium.connector.mysql.SchemaChangeValue"},
            "payload": {"source": src, "databaseName": db, "ddl": text, "tableChanges": []}}


CREATE_ITEMS = ("CREATE TABLE items (id INT PRIMARY KEY, tiny TINYINT, num DECIMAL(10,2), wide DECIMAL(38,8), "
                "born DATE, at3 DATETIME(3), at6 DATETIME(6), ts TIMESTAMP(6), dur TIME(6), flag BIT(1), "
                "mask BIT(3), mask64 BIT(64), doc JSON, size ENUM('S','M','L'), tags SET('x','y','z'), yr YEAR, "
                "raw VARBINARY(16), txt VARCHAR(100), dbl DOUBLE)")


def test_a_debezium_channel_gets_typed_replica_tables(warehouse):
    """A snapshot, DDL, inserts, an update of a key and of non-key columns, deletes and NULLs, into a table
    created by DDL (typed by it), one known only from its records (typed by their schema, no key: rows are
    matched by their whole before image) and one with the source types propagated; then the replica tables hold
    exactly the source's rows, in the source's types."""
    cs = cases()
    fields = [field("id", "int32")] + [c[2] for c in cs]

    def item(i, **over):
        v = {"id": i, **{c[0]: c[3] for c in cs}, **over}
        return v

    def want_item(i, **over):
        return {"id": i, **{c[0]: c[1] for c in cs}, **over}

    loose = [field("k", "int64"), field(ODD, "string"), field("when", "int32", "io.debezium.time.Date")]
    exact = [field("u", "int64", source=("BIGINT UNSIGNED", 20)), field("t", "int16", source=("TINYINT", 4))]
    records = [
        ddl("shop", "CREATE DATABASE shop", 100),
        ddl("shop", CREATE_ITEMS, 200),
        record("r", "shop", "items", 300, fields, after=item(1), snapshot="first"),
        record("r", "shop", "items", 300, fields, after=item(2, txt=None, num=None), snapshot="last"),
        record("c", "shop", "items", 400, fields, after=item(3), n=10),
        record("c", "shop", "items", 500, fields, after=item(4, dur=0), n=11),
        record("c", "shop", "items", 500, fields, after=item(5), row=1, n=11),
        record("u", "shop", "items", 600, fields, before=item(3), after=item(30), n=12),              # key change
        record("u", "shop", "items", 700, fields, before=item(4, dur=0), after=item(4, dur=0, txt="ü", dbl=-0.5), n=13),
        record("d", "shop", "items", 800, fields, before=item(5), n=14),
        record("c", "shop", "notes", 900, loose, after={"k": 1, ODD: "a", "when": 0}, n=15),
        record("c", "shop", "notes", 900, loose, after={"k": 1, ODD: "a", "when": 0}, row=1, n=15),   # a twin
        record("c", "shop", "notes", 900, loose, after={"k": 2, ODD: None, "when": None}, row=2, n=15),
        record("u", "shop", "notes", 1000, loose, before={"k": 1, ODD: "a", "when": 0},
               after={"k": 1, ODD: "b", "when": 1}, n=16),
        record("d", "shop", "notes", 1100, loose, before={"k": 2, ODD: None, "when": None}, n=17),
        record("c", "shop", "big", 1200, exact, after={"u": -2, "t": -1}, n=18),
    ]
    rpl_sql.connect(warehouse).execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='kafka' FOR CHANNEL 'cdc';"
                                       "START REPLICA SQL_THREAD FOR CHANNEL 'cdc'")
    # delivered twice, as Kafka may: nothing lands twice
    assert ingest_debezium(warehouse, "cdc", records, batch_rows=4).landed == 13
    assert ingest_debezium(warehouse, "cdc", records).landed == 0
    applier = LocalApplier(warehouse, batch_size=5)
    while applier.run_batch("cdc") is not None:
        pass
    materialize(warehouse, "cdc")

    cat = Catalog.load(warehouse, "cdc")

    def table(name):
        t = read_all(cat.data_path(cat.table("shop", name)))
        return t.select([n for n in t.schema.names if not n.startswith("_")])

    items = table("items")
    assert items.schema == C.arrow_schema(cat.table("shop", "items").columns)
    assert [f.type for f in items.schema][:4] == [pa.int32(), pa.int8(), pa.decimal128(10, 2), pa.decimal128(38, 8)]
    assert sorted(items.to_pylist(), key=lambda r: r["id"]) == [
        want_item(1), want_item(2, txt=None, num=None), want_item(4, dur="00:00:00", txt="ü", dbl=-0.5),
        want_item(30)]
    notes = table("notes")
    assert notes.schema == pa.schema([("k", pa.int64()), (ODD, pa.string()), ("when", pa.date32())])
    assert sorted(notes.to_pylist(), key=repr) == sorted([
        {"k": 1, ODD: "a", "when": dt.date(1970, 1, 1)}, {"k": 1, ODD: "b", "when": dt.date(1970, 1, 2)}], key=repr)
    big = table("big")
    assert big.schema == pa.schema([("u", pa.decimal128(20, 0)), ("t", pa.int8())])
    assert big.to_pylist() == [{"u": decimal.Decimal(2 ** 64 - 2), "t": -1}]
