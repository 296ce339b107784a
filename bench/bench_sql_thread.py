"""The replica service's SQL thread in isolation: memory and speed over many batches, per allocator setting.
Prints, asserts nothing.

    .venv/bin/python bench/bench_sql_thread.py [--batches 300] [--rows 2500] [--key int|text]

Each setting runs in a fresh process, all at once (so they share the machine alike): a loop that commits a
batch of `--rows` row changes (25 write_rows events) to the events table, applies it with `LocalApplier` and
merges it into the replica table with `ReplicaTables`, as the service's SQL-thread process does (the events are
committed in the same process here, by the events writer). Settings: deltalake's jemalloc as it comes
(`_RJEM_MALLOC_CONF` unset), the service's `SERVICE_MALLOC_CONF`, the service's earlier setting (thread caches
on), and freed pages returned at once. Prints
the mean RSS of every 50 batches and the seconds taken, side by side. `--key text`: the replica table's primary
key is a growing string ('k000000000001', ...), looked up through text statistics instead of integer ones.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rpl_sql.pipeline.replica.service_memory import MALLOC_CONF_VAR, SERVICE_MALLOC_CONF  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, {src!r})
import pyarrow as pa
import rpl_sql
from rpl_sql.pipeline import writer as W
from rpl_sql.pipeline.events import EVENTS_SCHEMA
from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.replica.materialize import ReplicaTables

wh, batches, rows, key = {wh!r}, {batches}, {rows}, {key!r}
EVENTS = 25
KEY_TYPE = "varchar" if key == "text" else "int"
COLS = json.dumps([{{"name": "id", "type": KEY_TYPE, "pk": True}}, {{"name": "v", "type": "text"}},
                   {{"name": "at", "type": "datetime", "fsp": 0}}])
per = rows // EVENTS


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


rpl_sql.connect(wh).execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c'; "
                            "START REPLICA SQL_THREAD FOR CHANNEL 'c'")
w = W.EventsWriter(wh, "c").open()
next_id = 0


def ident(n):
    return f"k{{n:012d}}" if key == "text" else n


def batch(first):
    global next_id
    cols = {{f.name: pa.nulls(EVENTS, f.type) for f in EVENTS_SCHEMA}}
    images = []
    for _ in range(EVENTS):
        images.append(json.dumps([{{"before": None, "after": {{"id": ident(next_id + j), "v": "a" * 32,
                                                               "at": "2026-11-27T00:00:00"}}}} for j in range(per)]))
        next_id += per
    seqs = pa.array(range(first, first + EVENTS), pa.int64())
    cols.update(channel=pa.array(["c"] * EVENTS), seq=seqs, event_type=pa.array(["write_rows"] * EVENTS),
                db_name=pa.array(["app"] * EVENTS), filter_db=pa.array(["app"] * EVENTS),
                table_name=pa.array(["ticks"] * EVENTS), rows=pa.array(images), columns=pa.array([COLS] * EVENTS),
                binlog_file=pa.array(["b.000001"] * EVENTS), binlog_pos=seqs, source=pa.array(["binlog"] * EVENTS))
    return pa.table(cols, schema=EVENTS_SCHEMA)


local = LocalApplier(wh)
tables = ReplicaTables(wh, "c")
local.stop_before = tables.statement_conflict
samples, windows = [], []
t0 = time.perf_counter()
for i in range(batches):
    w.commit(batch(w.last_seq + 1), {{"source": "binlog", "binlog_file": "b.000001", "binlog_pos": str(w.last_seq)}})
    while (rec := local.run_batch("c")) is not None:
        tables.catch_up(rec.end, handed=local.last_applied, state=local.store.load().state)  # as the service
    samples.append(rss())
    if len(samples) % 50 == 0:
        windows.append(sum(samples[-50:]) / 50)
print(json.dumps({{"seconds": time.perf_counter() - t0, "windows": windows, "max": max(samples)}}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--rows", type=int, default=2500)
    p.add_argument("--key", choices=("int", "text"), default="int")
    args = p.parse_args()
    settings = {"jemalloc as it comes": None, f"the service's ({SERVICE_MALLOC_CONF})": SERVICE_MALLOC_CONF,
                "the service's until 2026-11-28 (with thread caches)": "narenas:1,dirty_decay_ms:200,muzzy_decay_ms:0",
                "pages returned at once (narenas:1,dirty_decay_ms:0)": "narenas:1,dirty_decay_ms:0,muzzy_decay_ms:0"}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for i, (name, conf) in enumerate(settings.items()):
            env = {k: v for k, v in os.environ.items() if k != MALLOC_CONF_VAR}
            if conf is not None:
                env[MALLOC_CONF_VAR] = conf
            code = CHILD.format(src=str(ROOT), wh=f"{tmp}/wh{i}", batches=args.batches, rows=args.rows,
                               key=args.key)
            procs[name] = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        results = {name: json.loads(pr.communicate()[0].strip().splitlines()[-1]) for name, pr in procs.items()}
    base = results["jemalloc as it comes"]["seconds"]
    print(f"{args.batches} batches of {args.rows:,} rows ({args.key} key), {len(settings)} processes side by side; "
          "mean RSS per 50 batches (MB):")
    width = max(map(len, results))
    for name, r in results.items():
        w = r["windows"]
        print(f"  {name:{width}s} {' '.join(f'{v:4.0f}' for v in w)}  growth {w[-1] - w[0]:+.0f} MB, "
              f"max {r['max']:.0f} MB, {r['seconds']:.0f} s ({r['seconds'] / base:.2f}x)")


if __name__ == "__main__":
    main()
