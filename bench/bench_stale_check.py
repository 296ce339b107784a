"""Cost of the exported functions' stale check: `should_apply` with and without it, side by side.

    .venv/bin/python bench/bench_stale_check.py                 # 1M and 10M rows, 100 rules per channel
    .venv/bin/python bench/bench_stale_check.py --rows 1000000 --rules 1000 --repeat 7

`rpl-sql --export-sql` guards each public function with `(SELECT FILTERS_FINGERPRINT FROM
rpl_sql_state_version) <=> '<fingerprint>'`: an uncorrelated subquery over the `rpl_sql` data source, which
Spark runs once per query (a Python worker reads the Delta state) before the scan. This prints, per row count,
the median wall time of the guarded and the unguarded functions (SELECT and WHERE forms, alternated in one JVM),
the difference in seconds and the ratio. Data and rules are bench_should_apply.py's. Nothing asserts on time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_should_apply import ensure_data, make_rules  # noqa: E402

from rpl_sql.compile import compile_functions  # noqa: E402
from rpl_sql.spark.export import STATE_VIEW, stale_guard  # noqa: E402
from rpl_sql.session import Session  # noqa: E402
from rpl_sql.spark.env import local_spark, map_lookup_hash_min  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1000000,10000000", help="comma-separated row counts")
    ap.add_argument("--rules", type=int, default=100, help="rules per channel")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    spark = local_spark("bench_stale_check", **{"spark.ui.showConsoleProgress": "false"})
    state = make_rules(args.rules)
    with tempfile.TemporaryDirectory() as tmp:
        wh = os.path.join(tmp, "wh")
        store = Session(wh).store
        store.commit(store.load(), state, {"operation": "bench"})
        snapshot = store.load()
        from rpl_sql.spark.datasource import DefaultSource

        spark.dataSource.register(DefaultSource)
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {STATE_VIEW} USING rpl_sql "
                  f"OPTIONS (path '{wh}', table 'state_version')")
        guard = stale_guard(wh, snapshot.version, snapshot.state.filters_fingerprint())
        hash_min = map_lookup_hash_min(spark)
        for name, g in (("plain", None), ("guarded", guard)):
            compiled = compile_functions(snapshot.state, map_hash_min=hash_min, guard=g)
            # each set under its own names, so both live in the session at once
            for text in compiled.statements:
                if text.startswith(("CREATE OR REPLACE TEMPORARY FUNCTION rpl_sql__",
                                    "CREATE OR REPLACE TEMPORARY FUNCTION should_apply(")):
                    spark.sql(text.replace("rpl_sql__", f"rpl_sql__{name}_")
                              .replace("FUNCTION should_apply(", f"FUNCTION should_apply_{name}("))
        print(f"{args.rules} rules per channel, state version {snapshot.version}, fingerprint "
              f"{snapshot.state.filters_fingerprint()}; median of {args.repeat}")
        print(f"{'rows':>12} {'form':>7} {'plain s':>9} {'guarded s':>10} {'diff s':>8} {'ratio':>6}")
        for rows in (int(r) for r in args.rows.split(",")):
            path = ensure_data(spark, rows)
            spark.read.parquet(path).createOrReplaceTempView("events")
            forms = {"SELECT": "SELECT count_if(should_apply_{n}(channel, db_name, table_name)) FROM events",
                     "WHERE": "SELECT count(*) FROM events WHERE should_apply_{n}(channel, db_name, table_name)"}
            for form, q in forms.items():
                times = {"plain": [], "guarded": []}
                counts = set()
                for _ in range(args.repeat + 1):  # the first round warms up both
                    for name in ("plain", "guarded"):
                        t0 = time.perf_counter()
                        counts.add(spark.sql(q.format(n=name)).collect()[0][0])
                        times[name].append(time.perf_counter() - t0)
                assert len(counts) == 1, counts  # the guard changes no verdict
                p, g = (statistics.median(times[n][1:]) for n in ("plain", "guarded"))
                print(f"{rows:>12,} {form:>7} {p:>9.3f} {g:>10.3f} {g - p:>8.3f} {g / p:>6.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
