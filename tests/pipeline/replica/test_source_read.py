"""The fast page reader (connectorx, typed SELECT expressions) against the binlog path, which lands the exact
values: every type's edge values read by pages equal what the stream put in the replica table, through
connectorx and through pymysql, and keyset pages over a hostile composite key read every row once, in order."""
from __future__ import annotations

import pyarrow as pa
import pytest

import rpl_sql
from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.binlog import ingest_channel
from rpl_sql.pipeline.replica.materialize import ReplicaTables
from rpl_sql.pipeline.replica.source_read import key_columns, read_page, table_columns
from rpl_sql.storage.replica_catalog import Catalog
from rpl_sql.pipeline.replica.merge import read_all
from tests.pipeline.replica.test_replica_values import ROWS, TABLE

MORE = ("CREATE TABLE edge.w (id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT UNSIGNED, si SMALLINT UNSIGNED, "
        "mi MEDIUMINT, i INT UNSIGNED, bs BIGINT, dt DATETIME, dt6 DATETIME(6), d DATE, ts TIMESTAMP NULL, "
        "ts3 TIMESTAMP(3) NULL, y YEAR, bl BLOB, vb VARBINARY(8), j JSON, lat VARCHAR(10) CHARACTER SET latin1, "
        "txt TEXT, d12 DECIMAL(12,2), d28 DECIMAL(28,10), d20 DECIMAL(20,0) UNSIGNED, d27 DECIMAL(27,10))")
MORE_ROWS = [
    "(18446744073709551615, 255, 65535, -8388608, 4294967295, -9223372036854775808, '0000-00-00 00:00:00', "
    "'1001-02-03 04:05:06.500001', '2001-00-00', '0000-00-00 00:00:00', '2038-01-19 03:14:07.999', 2155, "
    "x'00ff', x'', '{\"a\": [1, \"x\"]}', 'é''\\\\', '日本', -9999999999.99, "
    "-999999999999999999.9999999999, 99999999999999999999, -99999999999999999.9999999999)",
    "(0, 0, 0, 8388607, 0, 9223372036854775807, '9999-12-31 23:59:59', '1970-01-01 00:00:00', '1000-01-01', "
    "'1970-01-01 00:00:01', '2001-02-03 04:05:06.123', 1901, '', NULL, '[]', '', '', 0, 0.0000000001, 0, 0.0000000001)",
    "(7" + ", NULL" * 20 + ")",
]
HOSTILE = ("CREATE TABLE edge.k (a VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, b VARBINARY(4), "
           "c INT, v INT, PRIMARY KEY (a, b, c))")
HOSTILE_KEYS = ["it''s", "back\\\\slash", "`tick`", "a,b", "%", "_", "ünï", "MiXed", "mixed", "日本", ""]


@pytest.fixture(scope="module")
def streamed(tmp_path_factory, mariadb):
    """The edge tables, landed by the binlog path into one channel's replica tables."""
    warehouse = str(tmp_path_factory.mktemp("wh"))
    mariadb.reset()
    rows = [f"('{k}', x'{i:02x}', {c}, {i})" for i, k in enumerate(HOSTILE_KEYS) for c in (2, 1, -1)]
    mariadb.execute("SET SESSION binlog_format = ROW", "SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'",
                    "CREATE DATABASE edge", TABLE, "INSERT INTO edge.v VALUES " + ", ".join(ROWS), MORE,
                    "INSERT INTO edge.w VALUES " + ", ".join(MORE_ROWS), HOSTILE,
                    "INSERT INTO edge.k VALUES " + ", ".join(rows))
    rpl_sql.connect(warehouse).execute(mariadb.channel_sql("a") + "; START REPLICA")
    ingest_channel(warehouse, "a")
    local, tables = LocalApplier(warehouse), ReplicaTables(warehouse, "a")
    while (rec := local.run_batch("a")) is not None:
        tables.catch_up(rec.end, handed=local.last_applied)
    return warehouse


def _settings(server) -> dict:
    return {"host": "127.0.0.1", "port": server.port, "user": "root", "password": ""}


def _stream_rows(warehouse, name) -> list[dict]:
    cat = Catalog.load(warehouse, "a")
    t = read_all(cat.data_path(cat.table("edge", name)))
    return sorted(t.to_pylist(), key=lambda r: repr([r[k] for k in r if k in ("id", "a", "b", "c")]))


@pytest.mark.parametrize("fast", [True, False], ids=["connectorx", "pymysql"])
@pytest.mark.parametrize("name", ["v", "w", "k"])
def test_pages_equal_what_the_binlog_landed(streamed, mariadb, name, fast):
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cols = table_columns(cur, "edge", name)
    conn.close()
    whole = read_page(_settings(mariadb), "edge", name, cols, None, None, fast=fast)
    assert whole.rows.schema == pa.schema([(f.name, f.type) for f in whole.rows.schema])
    expected = _stream_rows(streamed, name)
    got = sorted(whole.rows.to_pylist(), key=lambda r: repr([r[k] for k in r if k in ("id", "a", "b", "c")]))
    assert got == expected
    pages, after = [], None
    while True:  # pages of 2 rows, each starting after the last key of the one before
        page = read_page(_settings(mariadb), "edge", name, cols, after, 2, fast=fast)
        if page.last_key is None:
            break
        pages.append(page.rows)
        after = page.last_key
    paged = pa.concat_tables(pages).to_pylist()
    keys = [tuple(r[c["name"]] for c in key_columns(cols)) for r in paged]
    assert len(set(keys)) == len(keys) == len(expected)
    assert sorted(paged, key=lambda r: repr([r[k] for k in r if k in ("id", "a", "b", "c")])) == expected

