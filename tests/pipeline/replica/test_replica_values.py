"""Edge values of every MySQL type the replica keeps, against a real MariaDB replica of the same binlog: negative
and fractional TIME at each precision, empty and full SET, the empty ENUM, BIT at its widths, the widest DECIMALs,
floats' extremes, strings with every kind of character."""
from __future__ import annotations

import decimal

import pytest

from tests.support.mariadb import running
from rpl_sql.pipeline.applier import apply
from rpl_sql.pipeline.binlog import ingest_channel
from tests.pipeline.replica.test_replica import _normal, _ours

TABLE = ("CREATE TABLE edge.v (id INT PRIMARY KEY, "
         "t0 TIME, t1 TIME(1), t3 TIME(3), t6 TIME(6), "
         "st SET('a','b','c'), en ENUM('x','y'), "
         "b1 BIT(1), b9 BIT(9), b64 BIT(64), "
         "d40 DECIMAL(40,10), d65 DECIMAL(65,30), d38 DECIMAL(38,0), d0 DECIMAL(5,5), "
         "f FLOAT, g DOUBLE, tx VARCHAR(20) CHARACTER SET utf8mb4)")
ROWS = [
    "(1, '-838:59:59', '-00:00:00.1', '-12:34:56.789', '-00:00:00.000001', '', '', b'0', b'0', b'0', "
    "0, 0, 0, 0, 0, 0, '')",
    "(2, '838:59:59', '838:59:59.9', '-838:59:58.999', '-838:59:58.999999', 'a,b,c', 'y', b'1', b'111111111', "
    "18446744073709551615, 999999999999999999999999999999.9999999999, "
    "-99999999999999999999999999999999999.999999999999999999999999999999, "
    "99999999999999999999999999999999999999, 0.99999, 3.40282e38, 1.7976931348623157e308, 'x''\\\\`\"%_é日本')",
    "(3, '-00:00:01', '00:00:00.5', '00:00:00.001', '-01:00:00.000100', 'b', 'x', NULL, b'100000000', "
    "9223372036854775808, -0.0000000001, 0.000000000000000000000000000001, -1, -0.00001, -1.17549e-38, "
    "-2.2250738585072014e-308, NULL)",
    "(4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1.5e-45, 4.9e-324, ' ')",
]
CHANGES = ["UPDATE edge.v SET st = '', d40 = 0 WHERE id = 2", "UPDATE edge.v SET st = 'c,a', t6 = '-00:00:00.5' "
           "WHERE id = 1", "INSERT INTO edge.v (id, st) VALUES (5, '')"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A source and the oracle replica."""
    with running(tmp_path_factory, 501, 502) as servers:
        yield servers


def _text_decimals(contents: dict) -> dict:
    """pymysql gives DECIMAL as Decimal('0E-10'); the replica keeps the widest as the text MySQL shows."""
    return {k: rows if rows is None else
            [rows[0]] + sorted((tuple(format(v, "f") if isinstance(v, decimal.Decimal) else v for v in r)
                                for r in rows[1:]), key=repr)
            for k, rows in contents.items()}


@pytest.mark.spark
def test_edge_values_of_every_type_equal_a_mariadb_replica(spark, warehouse, pair):
    import rpl_sql

    src, oracle = pair
    src.execute("SET SESSION binlog_format = ROW", "SET SESSION sql_mode = ''", "CREATE DATABASE edge", TABLE,
                "INSERT INTO edge.v VALUES " + ", ".join(ROWS), *CHANGES)
    oracle.follow(src, "a")
    rpl_sql.connect(warehouse).execute(src.channel_sql("a") + "; START REPLICA")
    ingest_channel(warehouse, "a")
    report = apply(spark, warehouse, ["a"], tables=True)
    assert [c.status for c in report.channels] == ["applied"]
    oracle.caught_up(src, "a")
    ours = _text_decimals(_normal(_ours(warehouse, ["a"])))
    theirs = _text_decimals(_normal(oracle.contents()))
    assert ours[("edge", "v")] == theirs[("edge", "v")]
    rows = {r[0]: dict(zip(ours[("edge", "v")][0], r)) for r in ours[("edge", "v")][1:]}
    # the values the issue found wrong, spelled out
    assert rows[1]["t3"] == "-12:34:56.789000" and rows[1]["t6"] == "-00:00:00.500000"
    assert rows[3]["t6"] == "-01:00:00.000100" and rows[2]["t3"] == "-838:59:58.999000"
    assert rows[2]["st"] == "" and rows[5]["st"] == "" and rows[4]["st"] is None and rows[1]["st"] == "a,c"
    assert rows[1]["d40"] == "0.0000000000" and rows[3]["d40"] == "-0.0000000001"


@pytest.mark.spark
def test_zero_dates_become_null_and_nothing_else_changes(spark, warehouse, pair):
    """A lax sql_mode lets MySQL store zero dates and dates with a zero month or day, which no Spark or Delta
    date holds: the replica keeps NULL there (as the docs say), and every other value as the source has it."""
    import rpl_sql

    src, oracle = pair
    src.reset()
    oracle.stop_following()
    oracle.reset()
    src.execute("SET SESSION binlog_format = ROW", "SET SESSION sql_mode = ''", "CREATE DATABASE z",
                "CREATE TABLE z.d (id INT PRIMARY KEY, d DATE, t DATETIME(6), s TIMESTAMP NULL, n INT)",
                "INSERT INTO z.d VALUES (1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', 1), "
                "(2, '2001-00-00', '2001-02-00 10:00:00', NULL, 2), (3, '2001-02-03', '2001-02-03 04:05:06.5', "
                "'2001-02-03 04:05:06', 3)")
    oracle.follow(src, "a")
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + "; START REPLICA")
    ingest_channel(warehouse, "a")
    report = apply(spark, warehouse, ["a"], tables=True)
    assert [c.status for c in report.channels] == ["applied"]
    oracle.caught_up(src, "a")
    ours = _normal(_ours(warehouse, ["a"]))[("z", "d")]
    theirs = _normal(oracle.contents())[("z", "d")]
    assert ours[0] == theirs[0]
    for mine, source in zip(ours[1:], theirs[1:]):
        for a, b in zip(mine, source):
            zero = isinstance(b, str) and ("-00" in b)  # pymysql gives a date it cannot make as its text
            assert a is None if zero else a == b, (mine, source)
    assert ours[1][1:4] == (None, None, None) and ours[2][1:3] == (None, None)
