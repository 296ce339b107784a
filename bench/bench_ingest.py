"""Ingest throughput from a local MariaDB, and what filtering at the source saves. Prints figures, asserts nothing.

    .venv/bin/python bench/bench_ingest.py [--row-events 100000] [--statement-events 20000]
                                           [--filter-events 100000] [--per-txn 5]

Workloads are generated inside the server by a stored procedure (no client round trips), in transactions of
`--per-txn` single-row INSERTs into a 4-column table:

* rows:       binlog_format=ROW, `--row-events` INSERTs -> one Table_map + Write_rows per INSERT, one Xid per
              transaction;
* statements: binlog_format=STATEMENT, `--statement-events` INSERTs, each logged as its own Query event
              (with NAME_CONST(...) values: every text differs, so `classify` parses each one);
* filter:     ROW, `--filter-events` INSERTs of which 90% go to database `noise`, ignored by the channel's
              REPLICATE_WILD_IGNORE_TABLE=('noise.%'); ingested twice, without and with `filter_at_source`.
              Transactions are whole-noise or whole-app, so a noise transaction lands as one GTID marker.

"Events" are the binlog events the ingest handles (GTID, Query, Write_rows, Xid, ...; the Table_map before each
rows event is consumed inside the reader and not counted, so the source sent ~1.7x as many for the row
workload); "rows" are canonical rows landed; "source MB" is binlog bytes read. A section with 0 events is
skipped. Bytes written are the parquet files the commits added; the applier-side
read is a full scan of the channel's rows with pyarrow (what an applier reads).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.mariadb import MariaDBServer, binaries  # noqa: E402

import rpl_sql  # noqa: E402
from rpl_sql.pipeline.events import events_path  # noqa: E402
from rpl_sql.pipeline.binlog import ingest_channel  # noqa: E402

GEN = """
CREATE PROCEDURE bench.gen(IN n INT, IN per_txn INT, IN noise_pct INT)
BEGIN
  DECLARE i INT DEFAULT 0;
  DECLARE j INT;
  WHILE i * per_txn < n DO
    START TRANSACTION;
    SET j = 0;
    WHILE j < per_txn DO
      IF i % 100 < noise_pct THEN
        INSERT INTO noise.log (k, v, at) VALUES (i, REPEAT('n', 32), NOW());
      ELSE
        INSERT INTO app.orders (k, v, at) VALUES (i, REPEAT('a', 32), NOW());
      END IF;
      SET j = j + 1;
    END WHILE;
    COMMIT;
    SET i = i + 1;
  END WHILE;
END
"""


def prepare(m: MariaDBServer) -> None:
    m.reset()
    m.execute("CREATE DATABASE bench", "CREATE DATABASE app", "CREATE DATABASE noise",
              "CREATE TABLE app.orders (id INT AUTO_INCREMENT PRIMARY KEY, k INT, v VARCHAR(64), at DATETIME)",
              "CREATE TABLE noise.log (id INT AUTO_INCREMENT PRIMARY KEY, k INT, v VARCHAR(64), at DATETIME)",
              GEN)


def generate(m: MariaDBServer, fmt: str, n: int, per_txn: int, noise_pct: int) -> float:
    t = time.monotonic()
    m.execute(f"SET SESSION binlog_format={fmt}", f"CALL bench.gen({n}, {per_txn}, {noise_pct})", timeout=600)
    return time.monotonic() - t


def dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*.parquet"))


def scan(warehouse: str, channel: str) -> tuple[float, int, int]:
    """An applier's read: every column of the channel's rows. Returns (seconds, rows, bytes of files read)."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    t = time.monotonic()
    dt = DeltaTable(events_path(warehouse))
    table = dt.to_pyarrow_dataset().to_table(filter=ds.field("channel") == channel)
    return time.monotonic() - t, table.num_rows, dir_bytes(events_path(warehouse))


def run(warehouse: str, m: MariaDBServer, filters: str | None = None, **kw):
    s = rpl_sql.connect(warehouse)
    s.execute(m.channel_sql("a"))
    if filters:
        s.execute(filters)
    return ingest_channel(warehouse, "a", **kw)


def line(label: str, r, extra: str = "") -> None:
    print(f"  {label:<28} {r.events_read:>9,} events {r.landed:>9,} rows {r.seconds:>7.1f} s "
          f"{r.rate:>8,.0f} events/s {r.events_read and r.landed / r.seconds:>8,.0f} rows/s "
          f"{r.bytes_written / 1e6:>7.2f} MB written  source {r.source_bytes / 1e6:.1f} MB{extra}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row-events", type=int, default=100_000)
    p.add_argument("--statement-events", type=int, default=20_000)
    p.add_argument("--filter-events", type=int, default=100_000)
    p.add_argument("--per-txn", type=int, default=5)
    p.add_argument("--batch-rows", type=int, default=20_000)
    args = p.parse_args()
    if binaries() is None:
        sys.exit("mariadbd is not installed (apt-get install -y mariadb-server)")
    base = tempfile.mkdtemp(prefix="bench_ingest_")
    print(f"rpl_sql ingest bench: MariaDB, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}, "
          f"{args.per_txn} INSERTs per transaction, batches of {args.batch_rows:,} rows")
    m = MariaDBServer(Path(base) / "m", server_id=11)
    try:
        m.start()
        kw = dict(batch_rows=args.batch_rows)

        if args.row_events:
            prepare(m)
            g = generate(m, "ROW", args.row_events, args.per_txn, 0)
            r = run(f"{base}/w_rows", m, **kw)
            print(f"row-based ({args.row_events:,} INSERTs generated in {g:.1f} s):")
            line("ingest", r)

        if args.statement_events:
            prepare(m)
            g = generate(m, "STATEMENT", args.statement_events, args.per_txn, 0)
            r = run(f"{base}/w_stmt", m, **kw)
            print(f"statement-based ({args.statement_events:,} INSERTs generated in {g:.1f} s):")
            line("ingest", r)

        if not args.filter_events:
            return
        prepare(m)
        g = generate(m, "ROW", args.filter_events, args.per_txn, 90)
        flt = "CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=('noise.%') FOR CHANNEL 'a'"
        full = run(f"{base}/w_full", m, flt, **kw)
        pre = run(f"{base}/w_pre", m, flt, filter_at_source=True, **kw)
        print(f"filtering at the source, 90% of {args.filter_events:,} INSERTs ignored (generated in {g:.1f} s):")
        line("without filter_at_source", full)
        line("with filter_at_source", pre, f"  ({pre.dropped:,} events dropped)")
        s_full, n_full, b_full = scan(f"{base}/w_full", "a")
        s_pre, n_pre, b_pre = scan(f"{base}/w_pre", "a")
        print(f"  applier read: {n_full:,} rows / {b_full / 1e6:.2f} MB in {s_full:.2f} s without, "
              f"{n_pre:,} rows / {b_pre / 1e6:.2f} MB in {s_pre:.2f} s with")
        print(f"  savings: bytes written x{full.bytes_written / max(pre.bytes_written, 1):.1f} less, "
              f"rows x{full.landed / max(pre.landed, 1):.1f} fewer, ingest time x{full.seconds / pre.seconds:.2f}, "
              f"applier scan x{s_full / max(s_pre, 1e-9):.1f}")
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
