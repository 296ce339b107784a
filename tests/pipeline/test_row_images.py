"""The compiled row-image reader against python-mysql-replication, on binlogs a real MariaDB wrote.

`rpl_sql.pipeline.row_images` reads rows events by code generated per table definition, for speed; the library's
own decoding is the reference. Hypothesis draws rows of every compiled column type (integers at their edges,
float, double, decimals up to DECIMAL(65,30), strings in utf8mb4 and latin1, binary strings and blobs, dates,
DATETIME/TIMESTAMP/TIME at each fractional precision, negative TIMEs, zero dates, YEAR, NULLs) under hostile
column names, writes, updates (the key too) and deletes them in FULL, MINIMAL and NOBLOB row images, and every
rows event read back must give the library's images exactly, from the compiled code (no silent fallback).
`rpl_sql.pipeline.binlog_stream` frames those rows events from their packets: the same events, in the same order,
with the same statement-end flags and images, and what it cannot frame read by the library in its place.
"""
from __future__ import annotations

import datetime as dt
import decimal

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rpl_sql.pipeline import binlog
from rpl_sql.pipeline.binlog import ingest_channel
from rpl_sql.pipeline.binlog_txn import library_images
from rpl_sql.pipeline.binlog_stream import BinlogStream, FramedRows
from rpl_sql.pipeline.row_images import ImageDecoder

pytest.importorskip("pymysqlreplication", reason="pip install '.[ingest]' (mysql-replication, pymysql)")
pytestmark = pytest.mark.filterwarnings("ignore:'db' is deprecated:DeprecationWarning")

TEXT = st.characters(blacklist_categories=("Cs",))
LATIN = st.sampled_from([chr(c) for c in [*range(0x20, 0x7F), *range(0xA0, 0x100)]])


def _int(bits: int, unsigned: bool):
    lo, hi = (0, 2 ** bits - 1) if unsigned else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return st.sampled_from([lo, lo + 1, -1 if lo else 1, 0, hi - 1, hi]) | st.integers(lo, hi)  # edges often


def _decimal(p: int, s: int):
    top = decimal.Decimal(10) ** (p - s) - decimal.Decimal(10) ** -s
    edges = [top, -top, decimal.Decimal(0), decimal.Decimal(10) ** -s, -decimal.Decimal(10) ** -s]
    return (st.sampled_from(edges) | st.decimals(min_value=-top, max_value=top, places=s, allow_nan=False,
                                                 allow_infinity=False)).map(str)


def _datetime(fsp: int, lo=dt.datetime(1000, 1, 1), hi=dt.datetime(9999, 12, 31, 23, 59, 59)):
    return st.datetimes(lo, hi).map(lambda t: t.strftime("%Y-%m-%d %H:%M:%S.%f")[:20 + fsp].rstrip("."))


def _time(fsp: int):
    def text(us: int) -> str:
        sign, us = ("-" if us < 0 else ""), abs(us)
        s, frac = divmod(us, 1_000_000)
        return f"{sign}{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" + (f".{frac:06d}"[:fsp + 1] if fsp else "")
    return st.integers(-(838 * 3600 + 3599) * 10 ** 6, (838 * 3600 + 3599) * 10 ** 6).map(text)


# name, SQL type, values (the hostile names exercise the compiled code's constants)
COLUMNS = [
    ("ti", "TINYINT", _int(8, False)), ("TU", "TINYINT UNSIGNED", _int(8, True)),
    ("si", "SMALLINT", _int(16, False)), ("su", "SMALLINT UNSIGNED", _int(16, True)),
    ("mi", "MEDIUMINT", _int(24, False)), ("mu", "MEDIUMINT UNSIGNED", _int(24, True)),
    ("we'ird \"x\", %_ é", "INT", _int(32, False)), ("iu", "INT UNSIGNED", _int(32, True)),
    ("bi", "BIGINT", _int(64, False)), ("bu", "BIGINT UNSIGNED", _int(64, True)),
    ("f", "FLOAT", st.floats(width=32, allow_nan=False, allow_infinity=False)),
    ("d", "DOUBLE", st.floats(allow_nan=False, allow_infinity=False)),
    ("de1", "DECIMAL(10,2)", _decimal(10, 2)), ("de2", "DECIMAL(65,30)", _decimal(65, 30)),
    ("de3", "DECIMAL(5,5)", _decimal(5, 5)), ("de4", "DECIMAL(18,0)", _decimal(18, 0)),
    ("de5", "DECIMAL(13,4)", _decimal(13, 4)),
    ("c", "CHAR(10)", st.text(TEXT, max_size=10)), ("back\\slash", "VARCHAR(300)", st.text(TEXT, max_size=300)),
    ("vl", "VARCHAR(20) CHARACTER SET latin1", st.text(LATIN, max_size=20)),
    ("b", "BINARY(4)", st.binary(max_size=4)), ("tick`s", "VARBINARY(300)", st.binary(max_size=300)),
    ("tt", "TINYTEXT", st.text(TEXT, max_size=60)), ("tx", "TEXT", st.text(TEXT, max_size=300)),
    ("mt", "MEDIUMTEXT", st.text(TEXT, max_size=100)), ("lb", "LONGBLOB", st.binary(max_size=400)),
    ("dt", "DATE", st.dates(dt.date(1000, 1, 1)).map(str) | st.just("0000-00-00")),
    ("t0", "DATETIME", _datetime(0) | st.just("0000-00-00 00:00:00")), ("t3", "DATETIME(3)", _datetime(3)),
    ("t6", "DATETIME(6)", _datetime(6)),
    ("s0", "TIMESTAMP NULL", _datetime(0, dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))),
    ("s2", "TIMESTAMP(2) NULL", _datetime(2, dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))),
    ("s5", "TIMESTAMP(5) NULL", _datetime(5, dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18))),
    ("m0", "TIME", _time(0)), ("m1", "TIME(1)", _time(1)), ("m4", "TIME(4)", _time(4)), ("m6", "TIME(6)", _time(6)),
    ("y", "YEAR", st.sampled_from([0, 1901, 2155]) | st.integers(1901, 2155)),
]


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


ROW = st.fixed_dictionaries({name: st.none() | values for name, _, values in COLUMNS})


def _types(images: list[dict]) -> list:
    return [[(k, type(v)) for k, v in (img[side] or {}).items()] for img in images for side in ("before", "after")]


def rows_events(m, start: tuple[str, int], framed: bool = False):
    """(event, kind) of the rows events from `start`: the library's, or `BinlogStream`'s (`framed`, asking for the
    events the ingest asks for), which frames what it can and leaves the rest to the library (the rows event after
    a table id's first table map among them)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication import event
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    kinds = {WriteRowsEvent: "write_rows", UpdateRowsEvent: "update_rows", DeleteRowsEvent: "delete_rows"}
    wanted = [*kinds, *([event.MariadbGtidEvent, event.QueryEvent, event.XidEvent] if framed else [])]
    kwargs = dict(connection_settings={"host": "127.0.0.1", "port": m.port, "user": "root", "password": ""},
                  server_id=4711, blocking=False, only_events=wanted, log_file=start[0], log_pos=start[1],
                  resume_stream=True, freeze_schema=True)
    stream = BinlogStream(**kwargs, decoder=ImageDecoder()) if framed else BinLogStreamReader(**kwargs)
    try:
        for ev in stream:
            if type(ev) is FramedRows or type(ev) in kinds:
                yield ev, ev.etype if type(ev) is FramedRows else kinds[type(ev)]
    finally:
        stream.close()


def _framed_images(ev, kind) -> list[dict]:
    return ev.images if type(ev) is FramedRows else library_images(ev, kind)


@pytest.fixture(scope="module")
def source(mariadb):
    mariadb.reset()
    cols = ", ".join(f"{q(n)} {t}" for n, t, _ in COLUMNS)
    mariadb.execute("CREATE DATABASE `ty pes`",
                    f"CREATE TABLE `ty pes`.`t` (id INT PRIMARY KEY, {cols}) DEFAULT CHARSET utf8mb4",
                    "CREATE TABLE `ty pes`.other (id INT PRIMARY KEY, e ENUM('a','b'), s SET('x','y'), "
                    "bt BIT(5), j JSON)")
    return mariadb


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(ROW, min_size=1, max_size=5), changes=st.lists(ROW, max_size=3),
       image=st.sampled_from(["FULL", "MINIMAL", "NOBLOB"]), data=st.data())
def test_every_compiled_image_equals_the_librarys(source, rows, changes, image, data):
    m = source
    conn = m.connect()
    with conn.cursor() as cur:
        cur.execute("DELETE FROM `ty pes`.t")
        cur.execute("SHOW MASTER STATUS")
        start = cur.fetchone()[:2]
        cur.execute(f"SET SESSION binlog_format=ROW, binlog_row_image={image}, sql_mode='', time_zone='+00:00'")
        names = [n for n, _, _ in COLUMNS]
        qp = lambda n: q(n).replace("%", "%%")  # noqa: E731  (pymysql formats the statement with %)
        insert = (f"INSERT INTO `ty pes`.t (id, {', '.join(map(qp, names))}) "
                  f"VALUES ({', '.join(['%s'] * (len(names) + 1))})")
        cur.executemany(insert, [(i, *(r[n] for n in names)) for i, r in enumerate(rows)])
        for i, change in enumerate(changes):
            set_cols = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=6, unique=True))
            key = i % len(rows)
            new_key = data.draw(st.sampled_from([key, 100 + i]))
            cur.execute("UPDATE `ty pes`.t SET id = %s, " + ", ".join(f"{qp(n)} = %s" for n in set_cols) +
                        " WHERE id = %s", (new_key, *(change[n] for n in set_cols), key))
        cur.execute("DELETE FROM `ty pes`.t WHERE id = 0")
    conn.close()
    decoder, expected = ImageDecoder(), []
    for ev, kind in rows_events(m, start):
        ours = decoder.images(ev, kind)
        assert ours is not None, f"{kind} of {ev.table} in {image} image fell back to the library"
        library = library_images(ev, kind)
        assert ours == library
        assert _types(ours) == _types(library)  # 1 == 1.0 and b"" != "" aside: the same Python types
        expected.append((kind, ev.flags, library))
    assert len(expected) >= 2
    # the same events framed from their packets: in order, the same kinds, flags (statement ends) and images
    framed = list(rows_events(m, start, framed=True))
    got = [(kind, ev.flags, _framed_images(ev, kind)) for ev, kind in framed]
    assert got == expected
    assert [_types(images) for _, _, images in got] == [_types(images) for _, _, images in expected]
    assert sum(type(ev) is not FramedRows for ev, _ in framed) == 1  # only the one after the new table map


def _micros(text: str) -> int:
    """A TIME as the server prints it ('-12:34:56.789') in microseconds."""
    sign, text = (-1, text[1:]) if text.startswith("-") else (1, text)
    hms, _, frac = text.partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    return sign * (((h * 60 + m) * 60 + s) * 10 ** 6 + int((frac + "000000")[:6]))


TIMES = [f"m{fsp}" for fsp in range(7)]
EDGE_TIMES = st.sampled_from(["-00:00:00.000001", "-00:00:00.5", "-12:34:56.789", "-838:59:59", "838:59:59",
                              "-838:59:58.999999", "-00:00:01", "-00:00:00.99", "00:00:00", "-01:00:00.000100"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(*[st.none() | EDGE_TIMES | _time(fsp) for fsp in range(7)]), min_size=1,
                     max_size=8))
def test_negative_fractional_times_are_the_servers(source, rows):
    """Every TIME precision, negative and fractional values above all, decoded from the rows event (compiled, and
    by the library with rpl_sql's TIME2 reader in place of its own, which got these wrong) equals what the server
    itself shows for the row (its own CAST to text)."""
    from rpl_sql.pipeline.replica.columns import time_text

    m = source
    m.execute("CREATE TABLE IF NOT EXISTS `ty pes`.times (id INT PRIMARY KEY, "
              + ", ".join(f"m{fsp} TIME({fsp})" for fsp in range(7)) + ")", "DELETE FROM `ty pes`.times")
    start = m.binlog_end()
    conn = m.connect()
    with conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format=ROW, sql_mode=''")
        cur.executemany("INSERT INTO `ty pes`.times VALUES (%s" + ", %s" * 7 + ")",
                        [(i, *r) for i, r in enumerate(rows)])
        cur.execute("SELECT id, " + ", ".join(f"CAST(m{fsp} AS CHAR)" for fsp in range(7)) + " FROM `ty pes`.times")
        server = {r[0]: [None if v is None else _micros(v) for v in r[1:]] for r in cur.fetchall()}
    conn.close()
    decoded = {}
    for ev, kind in rows_events(m, start):
        ours = ImageDecoder().images(ev, kind)
        assert ours == library_images(ev, kind)
        for img in ours:
            after = img["after"]
            decoded[after["id"]] = [None if after[c] is None else after[c] // dt.timedelta(microseconds=1)
                                    for c in TIMES]
            assert all(v is None or _micros(time_text(v)) == v // dt.timedelta(microseconds=1)
                       for v in (after[c] for c in TIMES))  # and shown as the server shows it
    assert decoded == server


def test_a_statement_logged_in_several_rows_events_is_framed_event_by_event(source):
    """A big statement is split into rows events of about 8 KB; only the last carries the statement end, which the
    ingest groups by. The framed flags, kinds and images equal the library's."""
    m = source
    m.execute("CREATE TABLE IF NOT EXISTS `ty pes`.big (id INT PRIMARY KEY, v VARCHAR(200)) DEFAULT CHARSET utf8mb4")
    start = m.binlog_end()
    m.execute("SET SESSION binlog_format=ROW",
              "INSERT INTO `ty pes`.big SELECT seq, REPEAT('é', 100) FROM `ty pes`.seq_1_to_400",
              "UPDATE `ty pes`.big SET v = 'x', id = id + 1000", "DELETE FROM `ty pes`.big")
    library = [(kind, ev.flags, library_images(ev, kind)) for ev, kind in rows_events(m, start)]
    framed = list(rows_events(m, start, framed=True))
    assert [(kind, ev.flags, _framed_images(ev, kind)) for ev, kind in framed] == library
    assert sum(type(ev) is not FramedRows for ev, _ in framed) == 1
    assert [flags & 1 for _, flags, _ in library].count(0) >= 6  # events that continue a statement
    assert [kind for kind, flags, _ in library if flags & 1] == ["write_rows", "update_rows", "delete_rows"]


def test_types_it_does_not_compile_are_read_by_the_library(source):
    m = source
    start = m.binlog_end()
    m.execute("SET SESSION binlog_format=ROW", "INSERT INTO `ty pes`.other VALUES (1, 'b', 'x,y', b'10101', "
              "'{\"k\": [1, 2.5, \"é\"]}')", "UPDATE `ty pes`.other SET e = 'a' WHERE id = 1")
    library = []
    for ev, kind in rows_events(m, start):
        assert ImageDecoder().images(ev, kind) is None
        library.append((kind, ev.rows))
    assert [kind for kind, _ in library] == ["write_rows", "update_rows"]
    framed = list(rows_events(m, start, framed=True))  # every packet handed back to the library, in order
    assert not any(type(ev) is FramedRows for ev, _ in framed)
    assert [(kind, ev.rows) for ev, kind in framed] == library


def test_an_ingest_lands_the_same_rows_with_and_without_the_compiled_reader(source, tmp_path, monkeypatch):
    """End to end: the events table's row images (JSON text) are the same bytes either way (without it, every
    rows event is framed and decoded by the library, handed back by `BinlogStream` in order)."""
    import rpl_sql
    from deltalake import DeltaTable

    from rpl_sql.pipeline.events import events_path

    m = source
    m.execute("DELETE FROM `ty pes`.t")
    start = m.binlog_end()  # this test's events only: the other tests' negative fractional TIMEs are before it
    m.execute("SET SESSION binlog_format=ROW, sql_mode='', time_zone='+00:00'",
              "INSERT INTO `ty pes`.t (id, ti, `back\\slash`, t6, m6, de2, lb) VALUES "
              "(1, -128, 'é\\\\\"x', '2024-02-29 23:59:59.999999', '-838:59:59.000001', "
              "'-12345678901234567890.000000000000000000000000000001', x'00ff'), (2, NULL, '', NULL, NULL, 0, '')",
              "UPDATE `ty pes`.t SET id = 3, m6 = '00:00:00.5' WHERE id = 2", "DELETE FROM `ty pes`.t WHERE id = 1")

    def landed(wh, *, compiled: bool):
        if not compiled:
            monkeypatch.setattr(binlog.ImageDecoder, "decode", lambda self, *args: None)
        rpl_sql.connect(wh).execute(m.channel_sql("a") + f"; CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE="
                                    f"'{start[0]}', SOURCE_LOG_POS={start[1]} FOR CHANNEL 'a'")
        ingest_channel(wh, "a")
        monkeypatch.undo()
        t = DeltaTable(events_path(str(wh))).to_pyarrow_table(columns=["seq", "rows"]).sort_by("seq")
        return [r for r in t.column("rows").to_pylist() if r]

    ours, library = landed(tmp_path / "a", compiled=True), landed(tmp_path / "b", compiled=False)
    assert ours == library and len(ours) == 3
