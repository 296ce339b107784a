"""What a long JSON log costs delta-rs on local storage: open, refresh and append at growing commit counts.
Prints, asserts nothing.

    .venv/bin/python bench/bench_log_length.py [--commits 1000,30000,100000] [--repeat 5]

rpl_sql keeps every table's whole log (storage/delta/commit.py), and the replica service commits to each of its tables
about once a batch (4.7 commits a second per table at the replica bench's 5,000 rows/s). A table is given that
many commits (copies of one real append commit, so the log is built in seconds, not days), checkpointed at the
last one as the service's checkpoints every 100 versions would, and then timed through rpl_sql's commit helper
(no checkpoint in the timed appends): `DeltaTable(path)`, `update_incremental()` with nothing new, and an append,
each the median of `--repeat`. With the checkpoint at the newest version there is nothing to replay, so what
grows is the listing of `_delta_log` (once, by hand: a two-commit table whose log held 100,000 other files was
slower still, seconds per open).

Then the same table with its log archived (storage/delta/archive.py: what the replica service does once a minute to
commits older than the table's log retention), timed the same way beside it, and how long the archiving took;
the archived files go back into the log before the next count.
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
from deltalake import DeltaTable  # noqa: E402

from rpl_sql.storage.delta import archive  # noqa: E402
from rpl_sql.storage.delta import commit as delta_commit  # noqa: E402


def timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def measure(path: str, repeat: int) -> tuple[float, float, float]:
    rows = pa.table({"a": [1]})
    opened = [timed(lambda: DeltaTable(path)) for _ in range(repeat)]
    dt = DeltaTable(path)
    refreshed = [timed(dt.update_incremental) for _ in range(repeat)]
    appended = [timed(lambda: delta_commit.write(dt, rows, mode="append", metadata={"rpl_sql.operation": "BENCH"}))
                for _ in range(repeat)]
    return tuple(1000 * statistics.median(x) for x in (opened, refreshed, appended))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commits", default="1000,30000,100000")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    counts = sorted(int(c) for c in args.commits.split(","))
    base = tempfile.mkdtemp(prefix="bench_log_length_")
    try:
        path = os.path.join(base, "t")
        delta_commit.write(path, pa.table({"a": [0]}), mode="append", metadata={"rpl_sql.operation": "BENCH"},
                           create=True)
        delta_commit.write(path, pa.table({"a": [1]}), mode="append", metadata={"rpl_sql.operation": "BENCH"})
        log = os.path.join(path, "_delta_log")
        commit = Path(log, f"{1:020d}.json").read_text()
        print(f"delta-rs on local storage, {os.cpu_count()} cpus; milliseconds, median of {args.repeat}")
        print(f"{'':>20} | {'whole log':^30} | {'archived':^30} |")
        print(f"{'commits in the log':>20} | {'open':>8} | {'refresh':>8} | {'append':>8} | {'open':>8} | "
              f"{'refresh':>8} | {'append':>8} | {'archiving':>9}")
        version = DeltaTable(path).version() + 1
        for n in counts:
            while version < n:
                Path(log, f"{version:020d}.json").write_text(commit)
                version += 1
            DeltaTable(path).create_checkpoint()
            whole = measure(path, args.repeat)
            version += args.repeat
            DeltaTable(path).create_checkpoint()
            t = time.perf_counter()
            archive.archive(path, retention=0)
            archiving = time.perf_counter() - t
            archived = measure(path, args.repeat)
            version += args.repeat
            moved = os.path.join(path, archive.ARCHIVE)
            for name in os.listdir(moved):
                os.replace(os.path.join(moved, name), os.path.join(log, name))
            print(f"{n:>20,} | " + " | ".join(f"{ms:8.0f}" for ms in whole + archived)
                  + f" | {archiving * 1000:9.0f}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
