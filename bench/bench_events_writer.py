"""The events table's writer over many commits, with and without its compaction. Prints, asserts nothing.

    .venv/bin/python bench/bench_events_writer.py [--commits 600] [--rows 1000] [--databases 50]

Each run is a fresh process appending `--commits` batches of `--rows` row events spread over `--databases`
databases (so a commit writes one file per database, as the service's ingest of a busy source does), side by
side: `COMPACT_EVERY=0` (never) and the default. Prints ms per commit over the first and the last 10% of the
commits, their ratio (flat is 1.0), the data files the table ends with, and the process's peak RSS.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {src!r})
import pyarrow as pa
from rpl_sql.pipeline import writer as W
from rpl_sql.pipeline.events import EVENTS_SCHEMA

W.COMPACT_EVERY = {every}
commits, rows, dbs = {commits}, {rows}, {databases}


def batch(first):
    cols = {{f.name: pa.nulls(rows, f.type) for f in EVENTS_SCHEMA}}
    names = [f"db{{i % dbs}}" for i in range(rows)]
    cols.update(channel=pa.array(["c"] * rows), seq=pa.array(range(first, first + rows), pa.int64()),
                event_type=pa.array(["write_rows"] * rows), db_name=pa.array(names), filter_db=pa.array(names),
                table_name=pa.array(["t"] * rows), rows=pa.array(['[{{"after":{{"id":1,"v":"x"}}}}]'] * rows))
    return pa.table(cols, schema=EVENTS_SCHEMA)


w = W.EventsWriter({wh!r}, "c").open()
times = []
for _ in range(commits):
    t0 = time.perf_counter()
    w.commit(batch(w.last_seq + 1), {{"source": "bench"}})
    times.append(time.perf_counter() - t0)
print(json.dumps({{"times": times, "files": len(w.dt.file_uris()),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(every: int, args, tmp: str) -> dict:
    code = CHILD.format(src=str(ROOT), every=every, commits=args.commits, rows=args.rows,
                        databases=args.databases, wh=f"{tmp}/wh{every}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commits", type=int, default=600)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--databases", type=int, default=50)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from rpl_sql.pipeline.writer import COMPACT_EVERY

    k = max(1, args.commits // 10)
    print(f"{args.commits} commits of {args.rows} row events over {args.databases} databases")
    print(f"{'':<28}{'first 10%':>12}{'last 10%':>12}{'last/first':>12}{'files':>8}{'peak RSS':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for every, label in ((0, "never compacted"), (COMPACT_EVERY, f"compacted every {COMPACT_EVERY}")):
            r = run(every, args, tmp)
            first, last = sum(r["times"][:k]) / k * 1000, sum(r["times"][-k:]) / k * 1000
            print(f"{label:<28}{first:>9.0f} ms{last:>9.0f} ms{last / first:>11.2f}x{r['files']:>8}"
                  f"{r['rss_mb']:>7.0f} MB", flush=True)


if __name__ == "__main__":
    main()
