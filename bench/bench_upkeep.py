"""What `rpl-sql upkeep --keep-days 0` does to a warehouse after many statements, measured before and after.

    .venv/bin/python bench/bench_upkeep.py                 # 2,000 statements
    .venv/bin/python bench/bench_upkeep.py --statements 500

Prints data files, log files and bytes on disk of the state table, and the wall time of a cold
`rpl-sql -e "SHOW REPLICA STATUS"` and of SHOW REPLICATION FILTER HISTORY (median of 3 fresh processes each),
before and after, side by side. Nothing asserts on time.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rpl_sql import Session  # noqa: E402
from rpl_sql.storage.upkeep import upkeep  # noqa: E402


def measure(wh: Path) -> dict[str, float]:
    state = wh / "rpl_state"
    files = [p for p in state.rglob("*") if p.is_file()]

    def cold(sql: str) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", str(wh), "-S", "-e", sql],
                           check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return {"data files": sum(p.suffix == ".parquet" and "_delta_log" not in p.parts for p in files),
            "log files": len(list((state / "_delta_log").iterdir())),
            "MB on disk": sum(p.stat().st_size for p in files) / 1e6,
            "SHOW REPLICA STATUS s": cold("SHOW REPLICA STATUS"),
            "SHOW REPLICATION FILTER HISTORY s": cold("SHOW REPLICATION FILTER HISTORY")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--statements", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wh = Path(tmp) / "wh"
        s = Session(str(wh))
        s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c'")
        t0 = time.perf_counter()
        for i in range(args.statements):
            s.execute(f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (d{i}), REPLICATE_WILD_IGNORE_TABLE = "
                      f"('d{i}.tmp%') FOR CHANNEL 'c'")
        print(f"{args.statements:,} statements in {time.perf_counter() - t0:.1f} s")
        before = measure(wh)
        t0 = time.perf_counter()
        upkeep(str(wh), keep_days=0)
        took = time.perf_counter() - t0
        after = measure(wh)
        print(f"upkeep --keep-days 0 took {took:.1f} s")
        print(f"{'':36} {'before':>10} {'after':>10} {'ratio':>7}")
        for k in before:
            print(f"{k:36} {before[k]:>10.2f} {after[k]:>10.2f} {after[k] / before[k]:>7.2f}")


if __name__ == "__main__":
    main()
