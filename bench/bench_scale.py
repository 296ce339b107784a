"""Scale curve: how time grows with the data, for `should_apply` (rows) and the applier (events).

    .venv/bin/python bench/bench_scale.py                          # 1M, 10M, 30M; 100 rules per channel
    .venv/bin/python bench/bench_scale.py --millions 1,3 --rules 1000 --repeat 1

One local SparkSession (as rpl_sql starts it). For each size N, smallest first:
- should_apply: N rows of bench_should_apply's data (3 channels, skewed databases and tables), its rule mix at
  --rules per channel; `count_if(should_apply(...))` and the WHERE form beside the bare scan of the same
  columns, medians of --repeat.
- the applier: N events of bench_apply's data (3 channels, row transactions, statements, dropped-at-source
  markers) and its rule sets at --rules per channel; one whole `apply` (after one untimed warm-up apply on the
  smallest size; on the local master the arrow engine writes) beside two copies of the same events to Parquet
  (Spark's read_delta -> Parquet, and pyarrow's as bench_apply.arrow_copy), best of --repeat.
Each line gives seconds, nanoseconds per row or event, and the ratios; the last table puts the per-item cost
of every size beside the smallest's, which is how linear the growth is. Data is generated once under
bench/data (git-ignored): at 30M, about 1.6 GB of events. No asserts on time.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

import bench_apply as BA  # noqa: E402
import bench_should_apply as BS  # noqa: E402


def should_apply_at(spark, meter, rows: int, rules: int, repeat: int, jit: bool) -> dict:
    from rpl_sql.compile import compile_functions

    ev = spark.read.parquet(BS.ensure_data(spark, rows))
    ev.createOrReplaceTempView("ev")
    for s in compile_functions(BS.make_rules(rules), jit_huge_methods=jit,
                               **BS.map_kw(sys.modules["rpl_sql.compile"], spark)).statements:
        spark.sql(s)
    bare_q = "SELECT count_if(hash(channel, db_name, table_name) <> 0) FROM ev"
    fn_q = "SELECT count_if(should_apply(channel, db_name, table_name)) FROM ev"
    where_q = "SELECT count(*) FROM ev WHERE should_apply(channel, db_name, table_name)"
    spark.sql(bare_q).collect()
    applied = spark.sql(fn_q).collect()[0][0]  # warm: compiles the function's code once
    bare = meter.run(lambda: spark.sql(bare_q).collect(), repeat)[0]
    fn = meter.run(lambda: spark.sql(fn_q).collect(), repeat)[0]
    where, _, n = meter.run(lambda: spark.sql(where_q).collect()[0][0], repeat)
    assert n == applied, (n, applied)
    return {"bare": bare, "fn": fn, "where": where, "applied": applied}


def applier_at(spark, data: str, events: int, rules: int, repeat: int, warm: bool) -> dict:
    from rpl_sql.pipeline.applier import apply
    from rpl_sql.spark.deltaread import read_delta

    wh = os.path.join(data, f"apply_wh_ingested_{events}")
    if not os.path.exists(BA.events_path(wh)):
        shutil.rmtree(wh, ignore_errors=True)
        print(f"  generating {events:,} events under {wh} ...", flush=True)
        print(f"  generated in {BA.generate(wh, events):.0f}s", flush=True)
        from rpl_sql import Session

        Session(wh).execute(";".join(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='src{i}' FOR CHANNEL '{c}'"
                                     for i, c in enumerate(BA.CHANNELS)))
    ev = BA.events_path(wh)
    copy_dir = os.path.join(data, "copy_tmp")

    def copy():
        shutil.rmtree(copy_dir, ignore_errors=True)
        read_delta(spark, ev, engine="delta-rs").write.parquet(copy_dir)
        shutil.rmtree(copy_dir, ignore_errors=True)

    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    t_copy = BA.timed(copy, repeat)[0]
    t_acopy = BA.timed(lambda: BA.arrow_copy(ev, copy_dir), repeat)[0]
    if warm:  # the session's first apply pays JIT and class loading
        BA.configure(wh, rules)
        apply(spark, wh, verify="auto")
    best = None
    for _ in range(repeat):
        BA.configure(wh, rules)
        t, _, report = BA.timed(lambda: apply(spark, wh, verify="auto"))
        best = t if best is None else min(best, t)
    return {"copy": t_copy, "arrow_copy": t_acopy, "apply": best, "events": report.events,
            "applied": sum(c.applied for c in report.channels)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--millions", default="1,10,30", help="sizes in millions of rows/events (default 1,10,30)")
    p.add_argument("--rules", type=int, default=100, help="rules per channel (default 100)")
    p.add_argument("--repeat", type=int, default=2, help="runs per figure (default 2)")
    p.add_argument("--only", choices=("should_apply", "apply"), help="measure one side only")
    p.add_argument("--data", default=os.path.join(BA.ROOT, "bench", "data"))
    args = p.parse_args(argv)
    sizes = [int(float(m) * 1_000_000) for m in args.millions.split(",")]

    os.environ.setdefault("RPL_SQL_DRIVER_MEMORY", "8g")
    spark, _ = BA.measured_session("bench_scale")
    from rpl_sql.spark.env import jit_huge_methods

    jit = jit_huge_methods(spark)
    meter = BS.Meter(spark)
    sa, ap = {}, {}
    if args.only != "apply":
        for n in sizes:
            r = sa[n] = should_apply_at(spark, meter, n, args.rules, args.repeat, jit)
            print(f"should_apply {n / 1e6:g}M rows, {args.rules} rules/channel: bare {r['bare']:.2f}s, "
                  f"should_apply {r['fn']:.2f}s ({r['fn'] / r['bare']:.2f}x), WHERE {r['where']:.2f}s "
                  f"({r['where'] / r['bare']:.2f}x); {r['fn'] / n * 1e9:.0f} ns/row", flush=True)
    if args.only != "should_apply":
        for i, n in enumerate(sizes):
            r = ap[n] = applier_at(spark, args.data, n, args.rules, args.repeat, warm=i == 0)
            print(f"apply {n / 1e6:g}M events, {args.rules} rules/channel: Spark's copy {r['copy']:.1f}s, pyarrow's "
                  f"{r['arrow_copy']:.1f}s, apply {r['apply']:.1f}s ({r['apply'] / r['copy']:.2f}x Spark's copy, "
                  f"{r['apply'] / r['arrow_copy']:.2f}x pyarrow's, {r['applied'] / r['events']:.0%} applied); "
                  f"{r['apply'] / n * 1e9:.0f} ns/event", flush=True)

    first = sizes[0]
    print(f"\n| size | should_apply s | ns/row | × bare | WHERE × bare | ns/row ÷ {first / 1e6:g}M's "
          f"| apply s | ns/event | × Spark's copy | × pyarrow's copy | ns/event ÷ {first / 1e6:g}M's |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        s, a = sa.get(n), ap.get(n)
        cells = [f"{n / 1e6:g}M"]
        cells += ([f"{s['fn']:.2f}", f"{s['fn'] / n * 1e9:.0f}", f"{s['fn'] / s['bare']:.2f}",
                   f"{s['where'] / s['bare']:.2f}", f"{(s['fn'] / n) / (sa[first]['fn'] / first):.2f}"]
                  if s else ["-"] * 5)
        cells += ([f"{a['apply']:.1f}", f"{a['apply'] / n * 1e9:.0f}", f"{a['apply'] / a['copy']:.2f}",
                   f"{a['apply'] / a['arrow_copy']:.2f}", f"{(a['apply'] / n) / (ap[first]['apply'] / first):.2f}"]
                  if a else ["-"] * 5)
        print("| " + " | ".join(cells) + " |")
    print(f"\nmachine load average at the end: {os.getloadavg()}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
