"""What the filter history and `AS OF '<time>'` cost as the state table's log grows. Prints, asserts nothing.

    .venv/bin/python bench/bench_filter_history.py [--commits 1000,10000,100000] [--repeat 3]

The replica service commits the state once per applied batch (about 4.7 commits a second at the replica
bench's 5,000 rows/s: 400,000 a day), and almost none of those commits change a filter. The state table gets
five filter changes, then that many counter-only commits (copies of one real APPLY commit, each with its own
timestamp, so the log is built in seconds, not days), checkpointed and archived as the service would. Then,
side by side, each the median of `--repeat` on a fresh `DeltaStore`:

- `SHOW REPLICATION FILTER HISTORY` (`filter_changes`) following each commit's pointer to the previous filter
  change, against reading every commit's commitInfo (what a broken chain falls back to, and what the
  releases before the pointer did);
- `SHOW REPLICATION FILTERS AS OF '<time>'`'s version lookup (`version_as_of`) for a time in the middle of the
  log, by binary search over commit timestamps, against scanning the whole history newest first.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deltalake import DeltaTable  # noqa: E402

import rpl_sql.storage.store as store_module  # noqa: E402
from rpl_sql.storage.delta import archive  # noqa: E402
from rpl_sql.filters.rules import CHANGE_REPLICATION_FILTER, FilterType  # noqa: E402
from rpl_sql.storage.store import DeltaStore  # noqa: E402

T0_MS = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC; copy k is committed k * 200 ms later


def timed(f, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = f()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times), result


def whole_history(f):
    """`f` with the per-commit reader broken, so the store reads every commit as before the pointer."""
    with mock.patch.object(store_module, "_commit_info_of", lambda root, version: None):
        return f()


def build(warehouse: str) -> tuple[str, str]:
    """Five filter changes and one counter-only commit; the counter commit's log entry, as a template."""
    store = DeltaStore(warehouse)
    for i in range(5):
        store.transact(lambda s: (replace(s, global_filters=s.global_filters.configure(
            FilterType.DO_DB, (f"db{i}", "x"), CHANGE_REPLICATION_FILTER, i)), None),
            {"statement": f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db{i}, x)"})
    store.transact(lambda s: (replace(s, global_filters=s.global_filters.add_counts({FilterType.DO_DB: 1})), None),
                   {"statement": "APPLY FOR CHANNEL '' events 1..100", "operation": "APPLY"})
    log = os.path.join(store.state_path, "_delta_log")
    return log, Path(log, f"{5:020d}.json").read_text()


def with_timestamp(entry: str, ms: int) -> str:
    lines = []
    for line in entry.splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            action["commitInfo"]["timestamp"] = ms
        lines.append(json.dumps(action))
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commits", default="1000,10000,100000")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    counts = sorted(int(c) for c in args.commits.split(","))
    base = tempfile.mkdtemp(prefix="bench_filter_history_")
    try:
        log, entry = build(base)
        table = os.path.dirname(log)
        print(f"the state table of a warehouse, local storage, {os.cpu_count()} cpus; milliseconds, "
              f"median of {args.repeat}")
        print(f"{'state commits':>14} | {'filter history':^29} | {'AS OF a time':^29}")
        print(f"{'':>14} | {'chain':>8} | {'every commit':>12} | {'ratio':>5} | {'binary':>8} | "
              f"{'every commit':>12} | {'ratio':>5}")
        version = 6
        for n in counts:
            while version < n:
                Path(log, f"{version:020d}.json").write_text(with_timestamp(entry, T0_MS + 200 * version))
                version += 1
            DeltaTable(table).create_checkpoint()
            archive.archive(table, retention=0)
            changes_ms, changes = timed(lambda: DeltaStore(base).filter_changes(), args.repeat)
            whole_ms, whole = timed(lambda: whole_history(lambda: DeltaStore(base).filter_changes()), 1)
            assert changes == whole and len(changes) == 5, (len(changes), len(whole))
            at = datetime.fromtimestamp((T0_MS + 100 * n) / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
            as_of_ms, found = timed(lambda: DeltaStore(base).version_as_of(at), args.repeat)
            linear_ms, linear = timed(lambda: whole_history(lambda: DeltaStore(base).version_as_of(at)), 1)
            assert found == linear, (found, linear)
            print(f"{n:>14,} | {changes_ms:8.1f} | {whole_ms:12.0f} | {whole_ms / changes_ms:5.0f} | "
                  f"{as_of_ms:8.1f} | {linear_ms:12.0f} | {linear_ms / as_of_ms:5.0f}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
