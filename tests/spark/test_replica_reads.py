"""Replica tables by name through Spark's own Parquet scan (rpl_sql.jvm.ReplicaTableSource).

- Every read is of one committed version, in a PySpark session and in the real spark-sql shell, while
  `rpl-sql replica` merges a workload and `rpl-sql upkeep` compacts and checkpoints: each source transaction
  moves an amount between two accounts and bumps both rows' `moved`, so a read of a torn or uncommitted state
  would show a total other than 0 or an odd `moved` sum. The reads see many versions go by.
- The rows equal those of the `rpl_sql` Python data source (the reference reader) for tables of every type.
- Files are skipped by their statistics (a point lookup by key reads one file), and a table being backfilled
  or gone says so instead of reading a partial or stale folder.
"""
from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import rpl_sql
from rpl_sql.storage.replica_catalog import BACKFILLING, Catalog
from rpl_sql.spark.replica_tables import create_statements, replica_spark_names
from tests.pipeline.replica.test_replica_service import caught_up, start_service, status, stop_service
from tests.spark.test_spark_sql_cli import export, run_spark_sql
from tests.support.mariadb import SourceWorkload, running

ACCOUNTS = 300
TOTAL = "SELECT count(*) AS n, sum(v) AS total, sum(moved) AS moved FROM bank.acct"


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    with running(tmp_path_factory, 831) as (server,):
        yield server


def _plan(spark, sql: str) -> str:
    return spark.sql(sql)._jdf.queryExecution().executedPlan().toString()


def _transfers(src, stop: threading.Event, seed: int) -> SourceWorkload:
    """Transactions that each move an amount between two accounts (sometimes deleting and inserting one back
    as it was): the sum of v stays 0 and the sum of moved grows by 2 per transaction."""
    def body(conn, cur):
        rnd = random.Random(seed)
        while not stop.is_set():
            a, b = rnd.sample(range(1, ACCOUNTS + 1), 2)
            d = rnd.randint(1, 1000)
            cur.execute("BEGIN")
            cur.execute("UPDATE bank.acct SET v = v - %s, moved = moved + 1 WHERE id = %s", (d, a))
            cur.execute("UPDATE bank.acct SET v = v + %s, moved = moved + 1 WHERE id = %s", (d, b))
            if rnd.random() < 0.1:
                cur.execute("CREATE TEMPORARY TABLE IF NOT EXISTS bank.keep AS SELECT * FROM bank.acct LIMIT 0")
                cur.execute("INSERT INTO bank.keep SELECT * FROM bank.acct WHERE id = %s", (a,))
                cur.execute("DELETE FROM bank.acct WHERE id = %s", (a,))
                cur.execute("INSERT INTO bank.acct SELECT * FROM bank.keep")
                cur.execute("DELETE FROM bank.keep")
            cur.execute("COMMIT")
            time.sleep(0.005)
    worker = SourceWorkload(src, body, "SET SESSION binlog_format = ROW")
    worker.start()
    return worker


def _upkeep(warehouse: str, stop: threading.Event) -> threading.Thread:
    from rpl_sql.cli.maintenance import upkeep_main

    def run():
        while not stop.is_set():
            upkeep_main(["--warehouse", warehouse])  # compaction and checkpoints of every table, as cron runs it
            stop.wait(0.5)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_reads_see_one_committed_version_while_the_service_merges_and_upkeep_compacts(spark, warehouse, src,
                                                                                      tmp_path_factory):
    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE bank",
                "CREATE TABLE bank.acct (id INT PRIMARY KEY, v BIGINT NOT NULL, moved INT NOT NULL)",
                f"INSERT INTO bank.acct SELECT seq, 0, 0 FROM bank.seq_1_to_{ACCOUNTS}")
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + "; START REPLICA FOR CHANNEL 'a'")
    proc = start_service(warehouse)
    stop = threading.Event()
    try:
        caught_up(warehouse, src)
        rpl_sql.register(spark, warehouse)
        assert "ReplicaFileIndex" in _plan(spark, TOTAL)  # Spark's own scan, not the Python data source
        workers = [_transfers(src, stop, 7), _upkeep(warehouse, stop)]
        seen = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (len(seen) < 15 or time.monotonic() < deadline - 45):
            r = spark.sql(TOTAL).collect()[0]
            assert (r.n, r.total, r.moved % 2) == (ACCOUNTS, 0, 0), r
            seen.add(r.moved)
        assert len(seen) >= 5, seen  # the reads followed the service's commits

        # the real spark-sql shell, reading by name with the exported script while the workload goes on
        tmp = tmp_path_factory.mktemp("shell")
        init, text = export([os.sys.executable, "-m", "rpl_sql.cli"], Path(warehouse), tmp)
        assert "USING rpl_sql.jvm.ReplicaTableSource" in text
        # spread over about five seconds: reads back to back could all fall between two of the service's commits
        pause = "SELECT reflect('java.lang.Thread', 'sleep', 400L)"
        rows, _ = run_spark_sql(tmp, init, [s for i in range(12) for s in ((f"r{i}", TOTAL), (f"pause{i}", pause))])
        shown = [tuple(v[0]) for k, v in rows.items() if k.startswith("r")]
        assert all(n == str(ACCOUNTS) and total == "0" and int(moved) % 2 == 0 for n, total, moved in shown), shown
        assert len({m for _, _, m in shown}) >= 2, (  # the shell's reads followed the service's commits too
            shown[:2], "workload:", workers[0].is_alive(), workers[0].failed,
            src.execute("SELECT sum(moved) FROM bank.acct"), {k: v for k, v in status(session).items()
                                                              if k.startswith(("Last_", "Replica_"))})
        stop.set()
        for w in workers:
            w.join(60)
        caught_up(warehouse, src)
        r = spark.sql(TOTAL).collect()[0]
        assert r.moved == sum(x[0] for x in src.execute("SELECT moved FROM bank.acct"))  # and the last one
    finally:
        stop.set()
        stop_service(proc, warehouse)


TYPES = ("CREATE TABLE t.all_types (id BIGINT PRIMARY KEY, i TINYINT, u INT UNSIGNED, b BIGINT UNSIGNED, "
         "d DECIMAL(30,10), f FLOAT, g DOUBLE, s VARCHAR(40), x TEXT, bl BLOB, dt DATE, dtm DATETIME(6), "
         "ts TIMESTAMP(3) NULL, tm TIME(6), y YEAR, bit1 BIT(5), e ENUM('a','b'), j JSON, `we'ird col` INT)")


def test_rows_equal_the_python_data_source_and_files_are_skipped(spark, warehouse, src):
    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "SET time_zone = '+00:00'", "CREATE DATABASE t", TYPES,
                "INSERT INTO t.all_types VALUES (1, -128, 4294967295, 18446744073709551615, "
                "-12345678901234567890.0123456789, 1.5, -2.25e300, 'ü\\'\\\\`', 'long', x'00ff', '1000-01-01', "
                "'9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999', '-838:59:59.000000', 2155, b'10101', "
                "'b', '{\"k\": [1, null]}', 7), (2, NULL, 0, 0, 0, NULL, NULL, '', NULL, NULL, NULL, NULL, NULL, "
                "NULL, NULL, NULL, NULL, NULL, NULL)",
                "CREATE TABLE t.`Odd, name` (k INT PRIMARY KEY, v VARCHAR(5))",
                "INSERT INTO t.`Odd, name` VALUES (1, 'a'), (2, NULL)")
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + "; START REPLICA FOR CHANNEL 'a'")
    proc = start_service(warehouse)
    try:
        caught_up(warehouse, src)
    finally:
        stop_service(proc, warehouse)
    surface = rpl_sql.register(spark, warehouse)
    spark.sql("CREATE DATABASE IF NOT EXISTS ref")
    names = replica_spark_names(warehouse)
    assert len(names) == 2
    for where, entry in names:
        fast = f"{where.quoted()}"
        assert "ReplicaFileIndex" in _plan(spark, f"SELECT * FROM {fast}")
        ref = f"ref.`{where.spark_table}`"
        for stmt in create_statements(warehouse, where, entry, jvm_source=False)[2:]:
            spark.sql(stmt.replace(where.quoted(), ref, 1))
        rows = [sorted(spark.sql(f"SELECT * FROM {t}").collect()) for t in (fast, ref)]
        assert rows[0] == rows[1]
        assert spark.sql(f"SELECT * FROM {fast}").schema == spark.sql(f"SELECT * FROM {ref}").schema

    # a table of many files: a point lookup by key lists only the file whose statistics hold the key
    cat = Catalog.load(warehouse, "a")
    e = cat.add_table("t", "many", [{"name": "id"}, {"name": "v"}])
    for lo in range(0, 1000, 100):
        write_deltalake(cat.data_path(e), pa.table({"id": pa.array(range(lo, lo + 100), pa.int64()),
                                                    "v": pa.array([str(i) for i in range(lo, lo + 100)])}),
                        mode="append")
    cat.commit(cat.seq + 1)
    surface.sql("SELECT 1")  # the session's next Spark statement defines the new table in Spark
    df = spark.sql("SELECT v FROM t.many WHERE id = 437")
    assert [r.v for r in df.collect()] == ["437"]
    scan = df._jdf.queryExecution().executedPlan().collectLeaves().head()
    assert scan.metrics().apply("numFiles").value() == 1
    # columns are pruned: the scan reads only the columns the query names
    assert list(scan.requiredSchema().fieldNames()) == ["id", "v"]
    only_v = spark.sql("SELECT v FROM t.many")._jdf.queryExecution().executedPlan().collectLeaves().head()
    assert list(only_v.requiredSchema().fieldNames()) == ["v"]
    assert spark.sql("SELECT count(*) FROM t.many WHERE id >= 950 OR id < 5").collect()[0][0] == 55
    assert spark.sql("SELECT count(*) FROM t.many WHERE id IN (3, 999, 5000)").collect()[0][0] == 2

    # a table being backfilled is refused rather than read short; a dropped one says it is gone
    cat = Catalog.load(warehouse, "a")
    cat.tables[cat.key("t", "many")] = replace(cat.table("t", "many"), state=BACKFILLING)
    cat.commit(cat.seq + 1)
    with pytest.raises(Exception, match="backfilling"):
        spark.sql("SELECT count(*) FROM t.many").collect()
    cat = Catalog.load(warehouse, "a")
    cat.drop_table("t", "many")
    cat.commit(cat.seq + 1)
    with pytest.raises(Exception, match="has no table t.many now"):
        spark.sql("SELECT count(*) FROM t.many").collect()


DV_COLS = [{"name": "id", "type": "int", "pk": True}, {"name": "v", "type": "text"},
           {"name": "tags", "type": "json"}, {"name": "i8", "type": "tinyint"}, {"name": "big", "type": "bigint"},
           {"name": "d5", "type": "decimal", "precision": 5, "scale": 2},
           {"name": "d12", "type": "decimal", "precision": 12, "scale": 3},
           {"name": "d30", "type": "decimal", "precision": 30, "scale": 4}, {"name": "f", "type": "float"},
           {"name": "x", "type": "double"}, {"name": "day", "type": "date"}, {"name": "at", "type": "datetime"},
           {"name": "ts", "type": "timestamp"}, {"name": "b", "type": "blob"}, {"name": "yr", "type": "year"}]


def _dv_values(rng: random.Random, k: int) -> tuple:
    """Values of DV_COLS past the third, as the events table lands them (None a fifth of the time)."""
    vals = (k % 100 - 50, k * 1_000_003, f"{k % 999}.{k % 100:02d}", f"{k}.{k % 1000:03d}",
            f"{k}{k}.{k % 10000:04d}", k / 4, k / 3, f"2024-{1 + k % 12:02d}-{1 + k % 28:02d}",
            f"2024-01-01 00:00:{k % 60:02d}.{k % 1000:06d}", f"2025-06-01 12:00:{k % 60:02d}",
            {"$binary": "AP8="}, 1901 + k % 250)
    return tuple(None if rng.random() < 0.2 else v for v in vals)


@pytest.mark.parametrize("conf", [{}, {"spark.sql.parquet.enableVectorizedReader": "false"},
                                  {"spark.sql.codegen.wholeStage": "false"}],
                         ids=["batches", "parquet-mr rows", "vectorized rows"])
def test_deletion_vectors_leave_deleted_rows_out_of_reads_by_name(spark, warehouse, src, conf):
    """A table whose merges deleted rows by deletion vectors (and added their new versions in new files) reads
    by name, in every reader mode of Spark's Parquet scan, as rpl_sql's own reader and the Python data source
    read it; a filter pushed into the scan and a point lookup see only live rows."""
    from rpl_sql.pipeline.replica.merge import Changes, apply_changes, create, read_all

    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("dv"))
    cat = Catalog.load(warehouse, "dv")
    e = cat.add_table("d", "t", DV_COLS)
    cat.commit(cat.seq + 1)
    path = cat.data_path(e)
    create(path, DV_COLS, "dv", 0)
    rng = random.Random(3)
    names = [c["name"] for c in DV_COLS]
    model = {}
    seq = 1
    checkpointed = False
    for _ in range(12):
        ch = Changes(DV_COLS)
        for _ in range(400):
            k = rng.randint(0, 3000)
            after = (k, rng.choice(["a", "b", "ü'\\`", None]), '{"k": 1}', *_dv_values(rng, k))
            if k in model and rng.random() < 0.3:
                ch.add(seq, "delete_rows", [{"before": dict(zip(names, (k, *model.pop(k)))), "after": None}])
            elif k in model:
                ch.add(seq, "update_rows", [{"before": dict(zip(names, (k, *model[k]))),
                                             "after": dict(zip(names, after))}])
                model[k] = after[1:]
            else:
                ch.add(seq, "write_rows", [{"before": None, "after": dict(zip(names, after))}])
                model[k] = after[1:]
            seq += 1
        apply_changes(path, ch, "dv", strict=True, table_label="d.t")
        if seq > 3000 and not checkpointed:  # the JVM reads vectors from a checkpoint and from commits after it
            DeltaTable(path).create_checkpoint()
            checkpointed = True
    from rpl_sql.storage.delta.live_files import live_files
    assert sum(1 for a in live_files(path).adds.values() if a.get("deletionVector")) >= 2
    want = sorted((k, v[0]) for k, v in model.items())
    assert sorted(zip(*(read_all(path).column(c).to_pylist() for c in ("id", "v")))) == want
    rpl_sql.register(spark, warehouse)
    (where, entry), = [(w, x) for w, x in replica_spark_names(warehouse) if w.channel == "dv"]
    fast, ref = where.quoted(), f"ref.`dv_{where.spark_table}`"
    spark.sql("CREATE DATABASE IF NOT EXISTS ref")
    spark.sql(f"DROP TABLE IF EXISTS {ref}")
    for stmt in create_statements(warehouse, where, entry, jvm_source=False)[2:]:  # the Python data source
        spark.sql(stmt.replace(where.quoted(), ref, 1))
    old = {k: spark.conf.get(k, None) for k in conf}
    try:
        for k, v in conf.items():
            spark.conf.set(k, v)
        assert sorted(spark.sql(f"SELECT * FROM {fast}").collect()) == \
            sorted(spark.sql(f"SELECT * FROM {ref}").collect())
        assert "ReplicaFileIndex" in _plan(spark, f"SELECT * FROM {fast}")
        assert sorted(tuple(r) for r in spark.sql(f"SELECT id, v FROM {fast}").collect()) == want
        assert spark.sql(f"SELECT count(*) FROM {fast} WHERE v = 'a'").collect()[0][0] == \
            sum(1 for _, v in want if v == "a")
        gone = next(k for k in range(3001) if k not in model)
        assert spark.sql(f"SELECT count(*) FROM {fast} WHERE id = {gone}").collect()[0][0] == 0
        kept = next(iter(model))
        assert [r.v for r in spark.sql(f"SELECT v FROM {fast} WHERE id = {kept}").collect()] == [model[kept][0]]
    finally:
        for k, v in old.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def test_a_batch_keeps_its_vector_classes_with_the_kept_rows_moved_down(spark):
    """ReplicaParquetFormat.compact over Spark's own vectors of every flat type, values not dictionary-encoded
    (the Spark test above reads dictionary-encoded columns): each kept row, NULL or not, lands in order."""
    from rpl_sql import jvm

    jvm.add_jar(spark, str(jvm.jar_path()))
    gw = spark.sparkContext._gateway
    cls = spark._jsparkSession.sharedState().jarClassLoader().loadClass("rpl_sql.jvm.ReplicaParquetFormat")
    compact = next(m for m in cls.getMethods() if m.getName() == "compact")
    T = gw.jvm.org.apache.spark.sql.types.DataTypes
    n = 64
    rng = random.Random(9)
    cases = {  # type -> (put, get, value of row i)
        "boolean": (T.BooleanType, "putBoolean", "getBoolean", lambda i: i % 3 == 0),
        "int": (T.IntegerType, "putInt", "getInt", lambda i: i * 7 - 100),
        "long": (T.LongType, "putLong", "getLong", lambda i: i * 10 ** 12),
        "double": (T.DoubleType, "putDouble", "getDouble", lambda i: i / 3),
        "date": (T.DateType, "putInt", "getInt", lambda i: 19000 + i),
        "timestamp": (T.TimestampType, "putLong", "getLong", lambda i: 1_700_000_000_000_000 + i),
        "decimal(5,2)": (T.createDecimalType(5, 2), "putInt", "getInt", lambda i: i * 11),
        "decimal(12,3)": (T.createDecimalType(12, 3), "putLong", "getLong", lambda i: i * 10 ** 9),
        "string": (T.StringType, "putByteArray", "getUTF8String", lambda i: f"ü{i}'`" * (i % 4)),
        "binary": (T.BinaryType, "putByteArray", "getBinary", lambda i: bytes([i, 0, 255])),
    }
    kept = sorted(rng.sample(range(n), 25))
    arr = gw.new_array(gw.jvm.int, len(kept))
    for j, s in enumerate(kept):
        arr[j] = s
    for name, (t, put, get, value) in cases.items():
        v = gw.jvm.org.apache.spark.sql.execution.vectorized.OnHeapColumnVector(n, t)
        nulls = {i for i in range(n) if rng.random() < 0.25}
        for i in range(n):
            if i in nulls:
                v.putNull(i)
            else:
                x = value(i)
                getattr(v, put)(i, x.encode() if isinstance(x, str) else x)
        args = gw.new_array(gw.jvm.java.lang.Object, 3)
        args[0], args[1], args[2] = v, arr, len(kept)
        compact.invoke(None, args)
        got = [None if v.isNullAt(j) else getattr(v, get)(j) for j in range(len(kept))]
        want = [None if s in nulls else value(s) for s in kept]
        if name == "string":
            got = [None if g is None else g.toString() for g in got]
        assert got == [w if not isinstance(w, float) else pytest.approx(w) for w in want], name
