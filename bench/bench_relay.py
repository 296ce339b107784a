"""The relay against the source itself: bytes on the wire and events/s delivered to replicas. Prints, asserts nothing.

    .venv/bin/python bench/bench_relay.py [--transactions 20000] [--repeat 2]

A local MariaDB gets `--transactions` single-row transactions (a 200-byte row each) into `keep.t` and `drop.t`, a
share of them (0%, 50%, 90%) into `drop.t`, which the replica's filters ignore (REPLICATE_IGNORE_DB = (drop), held
by the relay as its channel's filters, which every replica without a channel of its own gets). A replica here is a
dump client (COM_BINLOG_DUMP from the first binlog, every packet read and counted, as a replica's IO thread reads
them) until it has the whole binlog. Side by side, taking turns `--repeat` times, best of each:
1. directly from the source: every event crosses the wire;
2. through the relay (`rpl-sql relay`, a process of its own, its spool already holding the binlog): only what the
   filters apply, and the GTIDs;
3. 1, 4 and 16 such replicas of the relay at once (at 90% filtered), each a process of its own (on 2 cores),
   connected first and starting their dumps together.
Per line: bytes received by one replica, the time it took to have the whole binlog, and the source's transactions
it covered per second (the rate at which the workload reaches it), with the ratios against the direct replica.
"""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import multiprocessing
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.mariadb import MariaDBServer, free_port  # noqa: E402

import rpl_sql  # noqa: E402
from rpl_sql.relay.spool import Spool  # noqa: E402
from rpl_sql.source_server.connection import connect  # noqa: E402

PAYLOAD = "x" * 200


def fill(m: MariaDBServer, n: int, dropped: float) -> None:
    m.reset()
    m.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE keep", "CREATE DATABASE `drop`",
              "USE keep", "CREATE TABLE t (id INT PRIMARY KEY, v TEXT)", "USE `drop`",
              "CREATE TABLE t (id INT PRIMARY KEY, v TEXT)")
    every = 10  # of each 10 transactions, round(dropped * 10) go to drop.t
    k = round(dropped * every)
    m.execute("CREATE PROCEDURE keep.gen(n INT) BEGIN DECLARE i INT DEFAULT 0; WHILE i < n DO "
              f"IF i % {every} < {k} THEN INSERT INTO `drop`.t VALUES (i, '{PAYLOAD}'); "
              f"ELSE INSERT INTO keep.t VALUES (i, '{PAYLOAD}'); END IF; SET i = i + 1; END WHILE; END",
              "SET SESSION binlog_format = ROW", f"CALL keep.gen({n})", timeout=3600)


def dump(host_port: tuple[str, int], user: str, password: str, server_id: int, end: tuple[str, int],
         first: str, ready=None) -> tuple[int, int, float]:
    """(bytes, events, seconds) of one replica's dump from the start of `first` until it has `end`; with
    `ready` (a barrier), connected first and then dumping when every other replica is."""
    conn = connect({"host": host_port[0], "port": host_port[1], "user": user, "password": password},
                   autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @mariadb_slave_capability = 4")
        if ready is not None:
            ready.wait()
        t = time.perf_counter()
        conn._next_seq_id = 0
        cmd = struct.pack("<BIHI", 0x12, 4, 0, server_id) + first.encode()
        conn._write_bytes(struct.pack("<I", len(cmd))[:3] + b"\x00" + cmd)
        conn._next_seq_id = 1
        size = events = 0
        file = first
        while True:
            data = conn._read_packet().get_all_data()
            size += len(data) + 4
            events += 1
            etype, log_pos = data[5], struct.unpack_from("<I", data, 14)[0]
            if etype == 4:  # rotate: the next file
                file = data[1 + 19 + 8:len(data) - 4].decode()
            if (file, log_pos) == end and etype not in (4, 27):
                return size, events, time.perf_counter() - t
            if etype == 27 and (file, log_pos) >= end:
                return size, events, time.perf_counter() - t
    finally:
        conn.close()


def _replica_process(results, *args) -> None:
    results.put(dump(*args))


def many(n: int, port: int, end: tuple[str, int], first: str) -> tuple[list[tuple], float]:
    """`n` replicas (processes) that connect, then dump at once: their results and the wall time from the start."""
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Barrier(n + 1), ctx.Queue()
    procs = [ctx.Process(target=_replica_process, args=(results, ("127.0.0.1", port), "repl", "pw", 100 + i, end,
                                                        first, ready)) for i in range(n)]
    for p in procs:
        p.start()
    ready.wait()
    t = time.perf_counter()
    got = [results.get() for _ in procs]
    wall = time.perf_counter() - t
    for p in procs:
        p.join()
    return got, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench_relay_")
    m = MariaDBServer(os.path.join(base, "db")).start()
    try:
        print(f"{args.transactions:,} single-row transactions (200-byte rows) per workload; best of {args.repeat}")
        print(f"{'':44} {'bytes':>12} {'seconds':>8} {'source txn/s':>13} {'bytes vs direct':>16} "
              f"{'rate vs direct':>15}")
        for dropped in (0.0, 0.5, 0.9):
            fill(m, args.transactions, dropped)
            end, first = m.binlog_end(), m.execute("SHOW BINARY LOGS")[0][0]
            wh = os.path.join(base, f"wh{dropped}")
            rpl_sql.connect(wh).execute(m.channel_sql("src") + "; CHANGE REPLICATION FILTER "
                                        "REPLICATE_IGNORE_DB = (`drop`) FOR CHANNEL 'src'")  # every replica's
            port = free_port()
            spool = Spool(os.path.join(base, f"spool{dropped}"))
            relay = subprocess.Popen([sys.executable, "-m", "rpl_sql.cli", "relay", "--warehouse", wh, "--channel",
                                      "src", "--listen", f"127.0.0.1:{port}", "--spool", str(spool.folder)],
                                     env=dict(os.environ, RPL_SQL_RELAY_PASSWORD="pw"), stderr=subprocess.DEVNULL)
            while spool.end() != end:  # the relay (a process of its own) has read the whole binlog
                time.sleep(0.05)
            best: dict[str, tuple] = {}
            for _ in range(args.repeat):
                for name, target, who in (("direct from the source", ("127.0.0.1", m.port), ("root", "")),
                                          ("through the relay", ("127.0.0.1", port), ("repl", "pw"))):
                    got = dump(target, *who, 7, end, first)
                    if name not in best or got[2] < best[name][2]:
                        best[name] = got
            d = best["direct from the source"]
            for name, (size, _, secs) in best.items():
                print(f"{int(dropped * 100):3d}% filtered away, {name:24} {size:12,} {secs:8.2f} "
                      f"{args.transactions / secs:13,.0f} {d[0] / size:15.1f}x {d[2] / secs:14.2f}x")
            if dropped == 0.9:
                for n in (1, 4, 16):
                    results, wall = many(n, port, end, first)
                    slowest = max(r[2] for r in results)
                    print(f"    {n:2d} replicas of the relay at once: each {results[0][0]:,} bytes; all had the "
                          f"binlog after {wall:.2f} s (slowest {slowest:.2f} s) = "
                          f"{args.transactions / slowest:,.0f} source txn/s each, {d[2] / slowest:.2f}x direct's, "
                          f"{n * args.transactions / wall:,.0f} in all")
            relay.terminate()
            relay.wait(30)
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
