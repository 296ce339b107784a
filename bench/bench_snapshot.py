"""Filling a replica table from a source that holds data, against `mariadb-dump`. Prints, asserts nothing.

    .venv/bin/python bench/bench_snapshot.py [--rows 2000000] [--repeat 2]

A local MariaDB gets `--rows` rows in one 5-column table (BIGINT key, INT, VARCHAR, DECIMAL, DATETIME). Then,
side by side, taking turns `--repeat` times (a shared 2-core machine varies by +-20% from run to run):
1. `mariadb-dump --single-transaction` of the table to /dev/null: the yardstick;
2. the page reader alone (`source_read.read_page` through connectorx, one thread, pages of 100,000 rows);
3. `rpl-sql snapshot` of a fresh channel (in this process): pages read by `--readers` threads over key ranges
   and landed as Delta commits;
4. the copy a backfill worker makes when a filter change newly applies the table (the same TableCopy, run by
   `rpl-sql replica` beside the stream; bench_replica.py --backfill-rows measures it inside a running service).
The best time of each, its rows/s and its rate as a share of mariadb-dump's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.mariadb import MariaDBServer, binaries  # noqa: E402

import rpl_sql  # noqa: E402
from rpl_sql.pipeline.replica.snapshot import SourceSnapshot  # noqa: E402
from rpl_sql.pipeline.replica.source_read import read_page, table_columns  # noqa: E402
from rpl_sql.pipeline.replica.table_copy import TableCopy, source_columns  # noqa: E402


def fill(m: MariaDBServer, rows: int) -> None:
    m.execute("CREATE DATABASE shop",
              "CREATE TABLE shop.big (id BIGINT PRIMARY KEY, a INT, b VARCHAR(32), c DECIMAL(12,2), d DATETIME)",
              "INSERT INTO shop.big SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 7, "
              f"'2024-01-01' + INTERVAL seq SECOND FROM shop.seq_1_to_{rows}", timeout=3600)


def dump(m: MariaDBServer) -> float:
    tool = shutil.which("mariadb-dump") or os.path.join(os.path.dirname(binaries()[0]), "mariadb-dump")
    t = time.perf_counter()
    subprocess.run([tool, "-uroot", "-h127.0.0.1", f"-P{m.port}", "--single-transaction", "shop", "big"],
                   stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def pages(m: MariaDBServer) -> float:
    settings = {"host": "127.0.0.1", "port": m.port, "user": "root", "password": ""}
    conn = m.connect()
    with conn.cursor() as cur:
        cols = table_columns(cur, "shop", "big")
    conn.close()
    t, after = time.perf_counter(), None
    while True:
        page = read_page(settings, "shop", "big", cols, after, 100_000)
        if page.last_key is None:
            return time.perf_counter() - t
        after = page.last_key


def snapshot(m: MariaDBServer, base: str, run: int, page_rows: int, readers: int) -> float:
    warehouse = os.path.join(base, f"wh{run}")
    rpl_sql.connect(warehouse).execute(m.channel_sql("a") + "; CHANGE REPLICATION FILTER "
                                       "REPLICATE_DO_DB = (shop) FOR CHANNEL 'a'")
    t = time.perf_counter()
    SourceSnapshot(warehouse, "a", batch_rows=page_rows, readers=readers).run()
    took = time.perf_counter() - t
    shutil.rmtree(warehouse, ignore_errors=True)
    return took


def backfill(m: MariaDBServer, base: str, run: int, page_rows: int, readers: int) -> float:
    """The copy a backfill worker of `rpl-sql replica` makes of a newly applied table (backfill.Backfills runs
    exactly this TableCopy, while the stream goes on), into a fresh replica table folder."""
    settings = {"host": "127.0.0.1", "port": m.port, "user": "root", "password": ""}
    path = os.path.join(base, f"backfill{run}")
    cols, full = source_columns(settings, "shop", "big")
    t = time.perf_counter()
    TableCopy(settings, "shop", "big", path, "a", page_rows=page_rows, readers=readers).run(cols, full)
    took = time.perf_counter() - t
    shutil.rmtree(path, ignore_errors=True)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--page-rows", type=int, default=200_000, help="rows per page (SourceSnapshot batch_rows)")
    ap.add_argument("--readers", type=int, default=2, help="key ranges read side by side")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench_snapshot_")
    m = MariaDBServer(os.path.join(base, "db")).start()
    try:
        t = time.perf_counter()
        fill(m, args.rows)
        print(f"{args.rows:,} rows loaded in {time.perf_counter() - t:.1f}s; best of {args.repeat}, taking turns")
        best: dict[str, float] = {}
        for run in range(args.repeat):
            for name, f in (("mariadb-dump --single-transaction", lambda: dump(m)),
                            ("page reader (connectorx) alone", lambda: pages(m)),
                            ("rpl-sql snapshot (pages -> Delta)",
                             lambda: snapshot(m, base, run, args.page_rows, args.readers)),
                            ("backfill copy (pages -> Delta)",
                             lambda: backfill(m, base, run, args.page_rows, args.readers))):
                best[name] = min(best.get(name, float("inf")), f())
        yard = best["mariadb-dump --single-transaction"]
        print(f"{'':36} {'seconds':>8} {'rows/s':>12} {'share of mariadb-dump':>22}")
        for name, s in best.items():
            print(f"{name:36} {s:8.2f} {args.rows / s:12,.0f} {yard / s:21.0%}")
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
