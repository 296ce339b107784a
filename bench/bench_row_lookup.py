"""Nanoseconds a row of the JVM row code's lookup (RowCodeMemo) beside Spark's hash() of the same three names,
with no Spark scan around them: bench_should_apply's rounds range 0.7-2.2x, too wide to show a change of a few
nanoseconds a row. This one's JVMs agree within about a nanosecond on a quiet machine; compare revisions in
one sitting, in turn, and look at lookup / hash as well (a busy host slows the copy and the hash too).

    .venv/bin/python bench/bench_row_lookup.py                                  # 10M rows, 1,000 rules a channel
    .venv/bin/python bench/bench_row_lookup.py --names numbered --run-length 8 --jvms 5
    git stash; .venv/bin/python bench/bench_row_lookup.py; git stash pop        # a change against the one before

The rows are bench_should_apply's (same --rows, --run-length, --names, --layout; generated with Spark if missing), the
rules its make_rules(--rules). bench/java/RowLookupBench.java, compiled against this checkout's jar, hands each
row's names to the memo as the generated code does, copying them first as Parquet's dictionary reader does;
a miss is decided by a stand-in (the codes' values do not change what a lookup costs). Fresh JVMs take turns
(--jvms), each --rounds rounds of copy, hash and lookup over every row; the first three rounds warm up. Prints
each JVM's medians and their median: the hash's and the lookup's nanoseconds beyond the copy, and their ratio.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_should_apply as bsa  # noqa: E402

from rpl_sql import jvm  # noqa: E402
from rpl_sql.compile import compile_functions  # noqa: E402

HARNESS = ROOT / "bench" / "java" / "RowLookupBench.java"
WARM = 3


def rows_and_names(path: Path, out: Path) -> int:
    """The rows' names as indexes into one list of distinct names (channel, db, table for each row), written to
    out/names.txt and out/rows.i32; the number of rows."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["channel", "db_name", "table_name"])
    if any(table[c].null_count for c in table.column_names):
        raise SystemExit("the harness hands no NULL names; the bench's rows have none")
    names: list[str] = []
    cols = []
    for c in table.column_names:
        enc = pc.dictionary_encode(table[c]).combine_chunks()
        values = enc.dictionary.to_pylist()
        if any("\n" in v for v in values):
            raise SystemExit("a name with a newline")
        cols.append(enc.indices.to_numpy().astype(np.int32) + len(names))
        names += values
    (out / "names.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    np.stack(cols, axis=1).astype("<i4").tofile(out / "rows.i32")
    return table.num_rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--run-length", type=int, default=1)
    ap.add_argument("--names", choices=["words", "numbered"], default="words")
    ap.add_argument("--layout", choices=["rows", "by_db"], default="rows")
    ap.add_argument("--rules", type=int, default=1000, help="rules per channel (make_rules)")
    ap.add_argument("--jvms", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args(argv)
    java = shutil.which("java", path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin") + os.pathsep
                        + os.environ.get("PATH", ""))
    if java is None or jvm._javac() is None:
        raise SystemExit("needs a JDK 17 (java and javac)")
    bsa.use_names(args.names)
    path = bsa.data_path(args.rows, args.run_length, args.names, args.layout)
    if not (path / "_SUCCESS").exists():
        from rpl_sql.spark.env import local_spark

        spark = local_spark(app_name="bench_row_lookup")
        bsa.ensure_data(spark, args.rows, args.run_length, args.names, args.layout)
        spark.stop()
    jar = jvm.jar_path()
    jars = Path(__import__("pyspark").__file__).parent / "jars"
    with tempfile.TemporaryDirectory(prefix="rpl_sql-row-lookup-") as tmp:
        out = Path(tmp)
        n = rows_and_names(path, out)
        spec = compile_functions(bsa.make_rules(args.rules), jit_huge_methods=True, jvm="expression").jvm_spec
        if spec is None:
            raise SystemExit(f"{args.rules} rules compile to SQL, not to the JVM row code")
        (out / "spec.txt").write_text(spec, encoding="utf-8")
        cp = f"{jar}{os.pathsep}{jars / '*'}"
        subprocess.run([jvm._javac(), "-nowarn", "--release", "17", "-d", str(out / "classes"), "-cp", cp,
                        str(HARNESS)], check=True)
        print(f"{n:,} rows ({path.name}), {args.rules:,} rules a channel; {args.jvms} JVMs in turn, "
              f"rounds {WARM + 1}-{args.rounds} of each; ns a row beyond copying the names")
        print("| JVM | copy | hash | lookup | lookup - hash | lookup / hash |")
        print("|---|---|---|---|---|---|")
        per = []
        for i in range(args.jvms):
            res = subprocess.run([java, "-XX:+UseParallelGC", "-Xmx4g", "-cp", f"{out / 'classes'}{os.pathsep}{cp}",
                                  "rpl_sql.jvm.RowLookupBench", str(out / "names.txt"), str(out / "rows.i32"),
                                  str(out / "spec.txt"), str(args.rounds)], capture_output=True, text=True)
            if res.returncode:
                raise SystemExit(res.stderr[-3000:])
            rounds = [tuple(map(float, m.groups())) for m in
                      re.finditer(r"copy ([\d.]+) hash ([\d.]+) lookup ([\d.]+)", res.stdout)][WARM:]
            copy = statistics.median(r[0] for r in rounds)
            hash_ = statistics.median(r[1] - r[0] for r in rounds)
            look = statistics.median(r[2] - r[0] for r in rounds)
            per.append((copy, hash_, look))
            print(f"| {i + 1} | {copy:.1f} | {hash_:.1f} | {look:.1f} | {look - hash_:.1f} | {look / hash_:.2f} |",
                  flush=True)
        copy, hash_, look = (statistics.median(p[j] for p in per) for j in range(3))
        print(f"| median | {copy:.1f} | {hash_:.1f} | {look:.1f} | {look - hash_:.1f} | {look / hash_:.2f} |")


if __name__ == "__main__":
    main()
