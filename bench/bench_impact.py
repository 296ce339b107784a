"""EXPLAIN CHANGE REPLICATION FILTER over a channel's landed events against one should_apply scan of them.
Prints, asserts nothing.

    .venv/bin/python bench/bench_impact.py [--events 10000000] [--rules 100] [--repeat 3]

One channel's events (bench_apply's generator: row-based transactions over 50 databases x 40 tables, 5%
statements) are written once with delta-rs under bench/data/ (git-ignored), and the channel gets `--rules`
wild rules (bench_apply's rule set for ch1). Side by side, best of `--repeat` after one warm-up each:
- should_apply: `SELECT count_if(should_apply(channel, db_name, table_name)) FROM events` in a local Spark
  session (2 cores), the events read jar-free (read_delta), the functions compiled for the same rules;
- the impact of a filter change: `EXPLAIN CHANGE REPLICATION FILTER ... FOR CHANNEL 'ch1'` through a
  Session, which reads, counts and decides every landed event of the channel: first without Spark (one
  Arrow scan of the shape columns in this process), then in the same session registered in the Spark
  session (the shapes counted by one Spark job, rpl_sql.spark.shapes_job); each shape decided twice by
  the reference evaluator either way, and both give the same rows.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_apply import channel_events, rules_script  # noqa: E402

from rpl_sql.pipeline.events import PARTITION_BY, events_path  # noqa: E402

CHANGE = ("EXPLAIN CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE = ('%.tmp1%', 'db1.%', 'db2%.t3%') "
          "FOR CHANNEL 'ch1'")


def best(fn, repeat: int) -> tuple[float, object]:
    fn()  # warm-up: JIT, page cache, imports
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--rules", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--data", default=os.path.join(ROOT, "bench", "data"))
    args = p.parse_args()
    import rpl_sql
    from deltalake import write_deltalake

    wh = os.path.join(args.data, f"impact_wh_{args.events}")
    if not os.path.exists(events_path(wh)):
        t = time.perf_counter()
        tbl = channel_events("ch1", args.events, seed=7)
        for done in range(0, args.events, 2_000_000):
            write_deltalake(events_path(wh), tbl.slice(done, 2_000_000), partition_by=PARTITION_BY, mode="append")
        del tbl
        print(f"generated {args.events:,} events of channel ch1 in {time.perf_counter() - t:.1f} s -> {wh}")
    s = rpl_sql.connect(wh)
    if s.state.channel("ch1") is None:
        s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='src' FOR CHANNEL 'ch1'")
    s.execute(rules_script(args.rules).split(";\n")[0])
    print(f"rpl_sql impact bench: {args.events:,} landed events, {args.rules} rules on the channel, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")

    impact_s, res = best(lambda: s.execute(CHANGE)[-1], args.repeat)
    total = res.rows[-1]
    print(f"  EXPLAIN CHANGE REPLICATION FILTER: {impact_s:.2f} s ({total[3]:,} events, {len(res.rows) - 1} "
          f"shapes change; now {total[4]}, after {total[5]})")

    from rpl_sql.spark.deltaread import read_delta
    from rpl_sql.spark.env import local_spark

    spark = local_spark(app_name="bench_impact", **{"spark.ui.showConsoleProgress": "false"})
    rpl_sql.register(spark, wh, session=s)
    read_delta(spark, events_path(wh), engine="delta-rs").createOrReplaceTempView("events")
    scan_s, got = best(lambda: spark.sql("SELECT count_if(should_apply(channel, db_name, table_name)) "
                                         "FROM events").collect()[0][0], args.repeat)
    print(f"  one should_apply scan (Spark, local[2]): {scan_s:.2f} s ({got:,} rows applied)")
    spark_s, res2 = best(lambda: s.execute(CHANGE)[-1], args.repeat)  # registered: the shapes counted by Spark
    assert res2.rows == res.rows
    print(f"  EXPLAIN CHANGE REPLICATION FILTER in the session with Spark: {spark_s:.2f} s (same rows)")
    print(f"  impact / should_apply scan: without Spark {impact_s / scan_s:.2f} x, with Spark "
          f"{spark_s / scan_s:.2f} x")
    spark.stop()


if __name__ == "__main__":
    main()
