"""Replica tables read by name against Spark's own Parquet scan of the same files. Prints, asserts nothing.

    .venv/bin/python bench/bench_read.py [--rows 10000000] [--files 40] [--many-files 120] [--repeat 2]

A replica table of `--rows` rows (id BIGINT key, amount DECIMAL(21,2), k INT, name STRING, at TIMESTAMP_NTZ) in
`--files` Delta commits, written as the replica service writes (delta-rs, a catalog entry), and a second one of
`--many-files` smaller files for the point lookup. Then, side by side and taking turns `--repeat` times (best of
each; a shared 2-core machine varies by +-20% from run to run):
1. a PySpark session (`rpl_sql.register`): the table by name through Spark's own scan (rpl_sql.jvm.ReplicaTableSource),
   by name through the `rpl_sql` Python data source (what every session used before; still the fallback without a
   JDK), and `spark.read.parquet` over the same snapshot files;
2. the real `spark-sql` shell with the exported script (`rpl-sql --export-sql`): the table by name, and a parquet
   view over the same files; the shell's own "Time taken" of each query.
In the PySpark session also a copy of the big table with a deletion vector on every file (`--deleted` of its rows,
as merges leave it) by name, against the parquet scan of its files (which reads the deleted rows too).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

QUERIES = [("count(*), sum(amount)", "SELECT count(*), sum(amount) FROM {t}"),
           ("point lookup id = 123456", "SELECT * FROM {t} WHERE id = 123456"),
           ("group by 1,000 keys", "SELECT k, count(*), sum(amount) FROM {t} GROUP BY k ORDER BY k LIMIT 5")]
LOOKUP = "SELECT * FROM {t} WHERE id = 123456"


def make_table(warehouse: str, db: str, name: str, rows: int, files: int) -> str:
    """A replica table as the service leaves it: a catalog entry and `files` delta-rs commits. Its folder."""
    import numpy as np
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from rpl_sql.storage.replica_catalog import Catalog

    cat = Catalog.load(warehouse, "a")
    entry = cat.add_table(db, name, [{"name": c} for c in ("id", "amount", "k", "name", "at")])
    path = cat.data_path(entry)
    per = -(-rows // files)
    for lo in range(0, rows, per):
        ids = np.arange(lo, min(rows, lo + per), dtype=np.int64)
        write_deltalake(path, pa.table({
            "id": ids,
            "amount": pa.array(ids % 100_000, pa.int64()).cast(pa.decimal128(21, 2)),
            "k": pa.array(ids % 1000, pa.int32()),
            "name": pa.array([f"name-{i}" for i in ids.tolist()]),
            "at": pa.array(ids * 1_000_000, pa.timestamp("us"))}), mode="append")
    DeltaTable(path).create_checkpoint()
    cat.commit(cat.seq + 1)
    return path


def delete_by_vectors(path: str, share: float) -> None:
    """A deletion vector on every file of the table at `path`, deleting `share` of its rows (random ones)."""
    import numpy as np
    from deltalake import DeltaTable

    from rpl_sql.storage.delta import dv_commit, live_files

    dt = DeltaTable(path)
    dv_commit.enable(dt)
    dt.update_incremental()
    live = live_files.live_files(path, dt.version())
    rng = np.random.default_rng(1)
    gone = {}
    for add in live.adds.values():
        n = dv_commit._records(path, add)
        gone[add["path"]] = np.unique(rng.integers(0, n, int(n * share))).astype(np.uint64)
    dv_commit.after_commit(dt, dv_commit.commit(live, gone, None, metadata={}, app=None, operation="DELETE"))


def timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def pyspark_side(warehouse: str, big: str, many: str, repeat: int, dv: str | None = None) -> dict[str, float]:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

    import rpl_sql
    from rpl_sql.spark.replica_tables import create_statements, replica_spark_names

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rpl_sql.register(spark, warehouse)  # the tables by name, through Spark's own scan where the JVM is here
    spark.sql("CREATE DATABASE IF NOT EXISTS py")
    for where, entry in replica_spark_names(warehouse):  # the same tables through the Python data source
        create = create_statements(warehouse, where, entry, jvm_source=False)[-1]
        spark.sql(create.replace(where.quoted(), f"py.{where.spark_table}", 1))
    spark.read.parquet(*DeltaTable(big).file_uris()).createOrReplaceTempView("pq_big")
    spark.read.parquet(*DeltaTable(many).file_uris()).createOrReplaceTempView("pq_many")
    if dv is not None:
        spark.read.parquet(*DeltaTable(dv).file_uris()).createOrReplaceTempView("pq_dv")
    plan = spark.sql(LOOKUP.format(t="shop.big"))._jdf.queryExecution().executedPlan().toString()
    assert "ReplicaFileIndex" in plan, f"not read through Spark's own scan:\n{plan}"
    sides = {"by name (Spark's scan)": ("shop.big", "shop.many"), "by name (Python data source)": ("py.big", "py.many"),
             "spark.read.parquet, same files": ("pq_big", "pq_many")}
    best: dict[str, float] = {}
    queries = QUERIES + [(f"point lookup, {len(DeltaTable(many).file_uris())} files", LOOKUP)]
    if dv is not None:
        queries.append(("count+sum, deletion vectors", QUERIES[0][1]))
    for label, sql in queries:
        for side, (t_big, t_many) in sides.items():
            t = t_many if "files" in label else t_big
            if "deletion" in label:
                t = {"shop.big": "shop.dv", "pq_big": "pq_dv"}.get(t)
                if t is None:
                    continue
            spark.sql(sql.format(t=t)).collect()  # planned and warmed once
        for _ in range(repeat):
            for side, (t_big, t_many) in sides.items():
                t = t_many if "files" in label else t_big
                if "deletion" in label:
                    t = {"shop.big": "shop.dv", "pq_big": "pq_dv"}.get(t)
                    if t is None:
                        continue
                s = timed(lambda: spark.sql(sql.format(t=t)).collect())
                best[(label, side)] = min(best.get((label, side), float("inf")), s)
    spark.stop()
    return best


def spark_sql_side(warehouse: str, big: str, many: str, repeat: int, base: str) -> dict[str, float]:
    import pyspark

    init = Path(base, "rpl_init.sql")
    out = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", warehouse, "--export-sql"],
                         capture_output=True, text=True, check=True)
    init.write_text(out.stdout)
    statements = [f"CREATE TEMPORARY VIEW pq_big USING parquet OPTIONS (path '{big}')",
                  f"CREATE TEMPORARY VIEW pq_many USING parquet OPTIONS (path '{many}')"]
    order = []
    for label, sql in QUERIES + [("point lookup, many files", LOOKUP)]:
        for side, t_big, t_many in (("by name (Spark's scan)", "shop.big", "shop.many"),
                                    ("spark.read.parquet, same files", "pq_big", "pq_many")):
            t = t_many if "files" in label else t_big
            for i in range(repeat + 1):  # the first run warms
                statements.append(sql.format(t=t))
                order.append((label, side, i))
    binary = Path(pyspark.__file__).parent / "bin" / "spark-sql"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_HOME": str(binary.parent.parent)}
    proc = subprocess.run([str(binary), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.sql.shuffle.partitions=4", "-i", str(init),
                           "-e", ";\n".join(statements) + ";"],
                          cwd=base, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    taken = [float(x) for x in re.findall(r"Time taken: ([0-9.]+) seconds", proc.stderr)]
    taken = taken[-len(order):]  # the init script's statements come first
    best: dict[tuple[str, str], float] = {}
    for (label, side, i), s in zip(order, taken):
        if i > 0:
            best[(label, side)] = min(best.get((label, side), float("inf")), s)
    return best


def report(title: str, best: dict, sides: list[str]) -> None:
    print(title)
    labels = list(dict.fromkeys(label for label, _ in best))
    print(f"  {'query':32}" + "".join(f"{s:>32}" for s in sides) + f"{'by name / parquet':>20}")
    for label in labels:
        cells = [best.get((label, s)) for s in sides]
        ratio = cells[0] / cells[-1] if cells[0] and cells[-1] else float("nan")
        print(f"  {label:32}" + "".join(f"{c:31.2f}s" if c is not None else f"{'':>32}" for c in cells)
              + f"{ratio:19.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--many-files", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-spark-sql", action="store_true")
    ap.add_argument("--deleted", type=float, default=0.1, metavar="SHARE",
                    help="share of the deletion-vector table's rows deleted (0: no such table)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench_read_")
    warehouse = os.path.join(base, "wh")
    try:
        t = time.perf_counter()
        big = make_table(warehouse, "shop", "big", args.rows, args.files)
        many = make_table(warehouse, "shop", "many", max(args.many_files * 2000, args.rows // 10), args.many_files)
        dv = None
        if args.deleted:
            dv = make_table(warehouse, "shop", "dv", args.rows, args.files)
            delete_by_vectors(dv, args.deleted)
        print(f"tables written in {time.perf_counter() - t:.1f}s: shop.big {args.rows:,} rows in {args.files} files, "
              f"shop.many in {args.many_files} files; best of {args.repeat}, taking turns")
        report("PySpark session (rpl_sql.register):", pyspark_side(warehouse, big, many, args.repeat, dv),
               ["by name (Spark's scan)", "by name (Python data source)", "spark.read.parquet, same files"])
        if not args.skip_spark_sql:
            report("spark-sql shell with the exported script (the shell's Time taken):",
                   spark_sql_side(warehouse, big, many, args.repeat, base),
                   ["by name (Spark's scan)", "spark.read.parquet, same files"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
