"""A replica table's compaction as the table grows: one 128 MB target against the tiers. Prints, asserts nothing.

    .venv/bin/python bench/bench_replica_compaction.py [--batches 1600] [--rows 2500]

Two tables get the same appends (a file a batch of `--rows` rows of about 100 bytes, as the SQL thread's
insert-only batches add them), taking turns, and every COMPACT_EVERY versions each is compacted by its policy:
`compact_table` toward 128 MB (what the replica tables had) or `compact_growing_table` (tiers of 2, 16 and
128 MB). Prints, per policy and per quarter of the run, the seconds and MB a compaction rewrote, and at the end
the table's size and file count.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from rpl_sql.storage import upkeep  # noqa: E402
from rpl_sql.pipeline.replica.merge import COMPACT_EVERY  # noqa: E402


def batch(first: int, rows: int) -> pa.Table:
    ids = range(first, first + rows)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "v": pa.array([os.urandom(48).hex() for _ in ids], pa.string())})


def files(dt: DeltaTable) -> dict[str, int]:
    acts = pa.table(dt.get_add_actions(flatten=False))
    return dict(zip(acts.column("path").to_pylist(), acts.column("size_bytes").to_pylist()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=1600)
    p.add_argument("--rows", type=int, default=2500)
    a = p.parse_args()
    policies = {"one 128 MB target": upkeep.compact_table, "tiers (2 / 16 / 128 MB)": upkeep.compact_growing_table}
    base = tempfile.mkdtemp(prefix="rpl_sql_bench_compaction_")
    paths = {name: os.path.join(base, str(i)) for i, name in enumerate(policies)}
    runs: dict[str, list[tuple[int, float, float]]] = {name: [] for name in policies}  # (batch, s, MB)
    print(f"replica table compaction: {a.batches} appends of {a.rows:,} rows (~100 bytes each), compacted every "
          f"{COMPACT_EVERY} versions; {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    tables: dict[str, DeltaTable] = {}
    for i in range(a.batches):
        data = batch(i * a.rows, a.rows)
        for name, compact in policies.items():
            if name not in tables:
                write_deltalake(paths[name], data, mode="append")
                tables[name] = DeltaTable(paths[name])
            else:
                write_deltalake(tables[name], data, mode="append")
            dt = tables[name]
            if dt.version() % COMPACT_EVERY == 0:
                before = files(dt)
                t = time.perf_counter()
                compact(dt)
                s = time.perf_counter() - t
                mb = sum(size for path, size in before.items() if path not in files(dt)) / 2 ** 20
                runs[name].append((i + 1, s, mb))
    quarter = a.batches / 4
    for name in policies:
        dt = DeltaTable(paths[name])
        sizes = list(files(dt).values())
        print(f"  {name}: {len(runs[name])} compactions, {sum(s for _, s, _ in runs[name]):.1f} s and "
              f"{sum(mb for _, _, mb in runs[name]):,.0f} MB rewritten in all; table {sum(sizes) / 2 ** 20:.0f} MB "
              f"in {len(sizes)} files at the end")
        for q in range(4):
            part = [(s, mb) for b, s, mb in runs[name] if q * quarter < b <= (q + 1) * quarter]
            if part:
                print(f"    batches {q * quarter + 1:,.0f}-{(q + 1) * quarter:,.0f}: per compaction mean "
                      f"{statistics.mean(s for s, _ in part):.2f} s (max {max(s for s, _ in part):.2f}), "
                      f"{statistics.mean(mb for _, mb in part):.1f} MB rewritten (max {max(mb for _, mb in part):.1f})")
    shutil.rmtree(base)


if __name__ == "__main__":
    main()
