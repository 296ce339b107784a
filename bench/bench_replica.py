"""The replica service against a local MariaDB: catch-up throughput, end-to-end lag, memory. Prints, asserts nothing.

    .venv/bin/python bench/bench_replica.py [--catchup-rows 100000] [--repeat 2] [--rate 5000] [--seconds 60]

1. Catch-up. `--catchup-rows` row changes are generated in the server (a stored procedure, transactions of
   `--per-txn` single-row INSERTs/UPDATEs into two tables) before the service starts; then, side by side:
   python-mysql-replication alone decoding the same binlog (every row image read), the receiver's part alone
   (`rpl-sql ingest` to the events table), and `rpl-sql replica` (a separate process) from start until its
   replica tables hold everything, and a stock MariaDB replica (a second server, one SQL thread) from START
   SLAVE until it executed the whole binlog (no target yet). Each `--repeat` times, taking turns (a shared
   2-core machine varies by +-20% from run to run); the best time of each side, its rows/s and its ratio to the
   bare reader's best.
2. Lag. The service runs while a client inserts at a steady `--rate` rows/s for `--seconds` (one multi-row
   INSERT every 20 ms); each row's id is timed at its COMMIT. A sampler reads the replica table's highest id
   from its Delta log every 50 ms: a row's lag is the time it became visible minus its commit. p50/p99.
3. Memory: the service's RSS (with its SQL-thread processes) every 5 s during the lag run (first sample
   after it caught up, middle, last, max; every minute; the slope by least squares; medians of three minutes).
4. Log growth: every minute of the lag run, each table's newest checkpoint (which grows with the tombstones
   it carries) and the files in its `_delta_log`. With `--log-retention SECONDS` every table is given that
   log retention (`delta.logRetentionDuration`, ten minutes by default; set with the service stopped, after a first
   start made the tables), so the service's archiving (storage/delta/archive.py) shows within the run. Also every
   minute: the commits in the tables' archives (`_rpl_sql_log/`), their count and MB.
5. With `--upkeep-every SECONDS --keep-days N`, `rpl-sql upkeep --keep-days N` runs beside the service that
   often, as a cron job would: the archives then stop growing (upkeep prunes the commits no reader needs).
6. With `--backfill-rows N`, a table of N rows that the channel ignores is brought in a third into the lag run
   (STOP REPLICA SQL_THREAD, CHANGE REPLICATION FILTER, START): the time its backfill took, and the stream's lag
   for the rows committed meanwhile.
7. With `--update-lag-rows N,N,...`, only this: updates of random existing keys at `--rate` a second into a table
   of N rows (copied by `rpl-sql snapshot` first), the lag p50/p99/max per size (`update_lag`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.mariadb import MariaDBServer, binaries  # noqa: E402

import rpl_sql  # noqa: E402
from rpl_sql.storage import service_status  # noqa: E402
from rpl_sql.storage.replica_catalog import Catalog  # noqa: E402
from rpl_sql.storage.store import DeltaStore  # noqa: E402
from rpl_sql.pipeline.replica.merge import read_all  # noqa: E402

GEN = """
CREATE PROCEDURE bench.gen(IN n INT, IN per_txn INT)
BEGIN
  DECLARE i INT DEFAULT 0;
  DECLARE j INT;
  WHILE i * per_txn < n DO
    START TRANSACTION;
    SET j = 0;
    WHILE j < per_txn DO
      IF (i + j) % 4 = 3 THEN
        UPDATE app.orders SET v = REPEAT('u', 32), k = k + 1 WHERE id = 1 + (i * 7 + j) % GREATEST(1, i);
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


def rss_mb(pid: int) -> tuple[float, float]:
    """RSS of the process and its descendants (the service runs each channel's SQL thread as a child), and of
    the process alone (the receivers)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, own, todo = 0.0, 0.0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
                        own += int(line.split()[1]) / 1024 if p == pid else 0
        except OSError:
            pass
    return total, own


def service(warehouse: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rpl_sql.cli", "replica", "--warehouse", warehouse],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def wait_caught_up(warehouse: str, m: MariaDBServer, timeout: float = 3600) -> None:
    end = m.binlog_end()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ch = DeltaStore(warehouse).load().state.channel("a")
        if (ch.applier.source_log_file, ch.applier.source_log_pos) == end and \
                Catalog.load(warehouse, "a").seq == ch.applier.seq:
            return
        time.sleep(0.1)
    raise TimeoutError("the service did not catch up")


def bare_reader(m: MariaDBServer) -> tuple[int, float]:
    """python-mysql-replication alone: every row image of the binlog decoded. (rows, seconds)"""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    t = time.monotonic()
    stream = BinLogStreamReader(connection_settings={"host": "127.0.0.1", "port": m.port, "user": "root",
                                                     "passwd": ""}, server_id=4242, blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                freeze_schema=True, log_file=m.execute("SHOW BINARY LOGS")[0][0], log_pos=4,
                                resume_stream=True)
    rows = 0
    for ev in stream:
        rows += len(ev.rows)
    stream.close()
    return rows, time.monotonic() - t


def receive_only(warehouse: str, m: MariaDBServer) -> float:
    """The receiver's part alone: the same binlog landed in the events table (`rpl-sql ingest`), seconds."""
    from rpl_sql.pipeline.binlog import ingest_channel

    configure(warehouse, m)
    t = time.monotonic()
    ingest_channel(warehouse, "a", batch_rows=5_000, batch_seconds=0.2)  # as the service commits
    return time.monotonic() - t


def configure(warehouse: str, m: MariaDBServer) -> None:
    rpl_sql.connect(warehouse).execute(m.channel_sql("a") + ";\nCHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = "
                                       "((app, crm)) FOR CHANNEL 'a';\nSTART REPLICA")


def replica_catch_up(warehouse: str, m: MariaDBServer) -> float:
    """`rpl-sql replica` from its start until the replica tables hold the whole binlog, seconds."""
    configure(warehouse, m)
    proc = service(warehouse)
    try:
        while (st := service_status.read_status(warehouse, "a")) is None or st.sql != "Yes":  # the process is up
            time.sleep(0.02)
        t = time.monotonic()
        wait_caught_up(warehouse, m)
        return time.monotonic() - t
    finally:
        proc.terminate()
        proc.wait()


def mariadb_replica_catch_up(base: str, m: MariaDBServer) -> float:
    """A stock MariaDB replica (a fresh server, its defaults: one SQL thread) from START SLAVE until it has
    executed the whole binlog, seconds. No filters: REPLICATE_REWRITE_DB would need crm.orders made by hand."""
    r = MariaDBServer(base, server_id=2).start()
    try:
        t = time.monotonic()
        r.follow(m, "bench")
        r.caught_up(m, "bench", timeout=3600)
        return time.monotonic() - t
    finally:
        r.stop()


def catch_up(base: str, m: MariaDBServer, n: int, per_txn: int, repeat: int) -> None:
    m.reset()
    m.execute("CREATE DATABASE bench", "CREATE DATABASE app",
              "CREATE TABLE app.orders (id INT AUTO_INCREMENT PRIMARY KEY, k INT, v VARCHAR(64), at DATETIME)", GEN)
    t = time.monotonic()
    m.execute("SET SESSION binlog_format=ROW", f"CALL bench.gen({n}, {per_txn})", timeout=3600)
    print(f"1. catch-up: {n:,} row changes generated in {time.monotonic() - t:.1f} s "
          f"({per_txn} per transaction, 1/4 UPDATEs); each side {repeat} times, taking turns, best of each")
    bare_reader(m)  # once to warm the server's caches, so neither side below pays for it
    bare, receiving, ours, theirs = [], [], [], []
    for i in range(repeat):
        rows, s = bare_reader(m)
        bare.append(s)
        receiving.append(receive_only(f"{base}/receive{i}", m))
        ours.append(replica_catch_up(f"{base}/catchup{i}", m))
        theirs.append(mariadb_replica_catch_up(f"{base}/mariadb_replica{i}", m))

    def line(label: str, times: list[float], ratio: bool = True) -> None:
        best = min(times)
        runs = " / ".join(f"{x:.1f}" for x in times)
        print(f"   {label}: {best:.1f} s (runs {runs}) = {rows / best:,.0f} rows/s"
              + (f" = {min(bare) / best:.2f} x the bare reader" if ratio else ""))

    line(f"python-mysql-replication alone, {rows:,} row images", bare, ratio=False)
    line("receiving alone (rpl-sql ingest to the events table, one process)", receiving)
    line("rpl-sql replica (threads running to replica tables current)", ours)
    line("a stock MariaDB replica (START SLAVE to the whole binlog executed; no target yet)", theirs)
    print(f"   rpl-sql replica's best against the MariaDB replica's: {min(ours) / min(theirs):.2f} x its time")


def slope(points: list[tuple[float, float]]) -> float:
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def checkpoint_kb(wh: str) -> dict[str, tuple[float, int]]:
    """The size of each Delta table's newest checkpoint under `wh` and the files in its log, by its path."""
    import json

    out = {}
    for hint in Path(wh).rglob("_last_checkpoint"):
        table = hint.parent.parent.relative_to(wh).as_posix()
        try:
            out[table] = json.loads(hint.read_text())["sizeInBytes"] / 1024, len(os.listdir(hint.parent))
        except (OSError, ValueError, KeyError):
            pass
    return out


def set_log_retention(wh: str, seconds: int) -> None:
    from deltalake import DeltaTable

    from rpl_sql.storage.delta import log as deltalog

    for table in deltalog.tables(wh):
        DeltaTable(table).alter.set_table_properties({"delta.logRetentionDuration": f"interval {seconds} seconds"})


def archive_size(wh: str) -> tuple[int, float]:
    """The commit files in every table's archive under `wh` and their MB."""
    n, size = 0, 0
    for d in Path(wh).rglob("_rpl_sql_log"):
        for f in d.iterdir():
            if f.name.endswith(".json") and f.name[:20].isdigit():
                try:
                    size += f.stat().st_size
                    n += 1
                except FileNotFoundError:
                    pass
    return n, size / 2**20


def lag(base: str, m: MariaDBServer, rate: int, seconds: float, log_retention: int | None = None,
        upkeep_every: float | None = None, keep_days: float | None = None, backfill_rows: int = 0) -> None:
    m.reset()
    m.execute("CREATE DATABASE app", "CREATE TABLE app.ticks (id INT PRIMARY KEY, v VARCHAR(32))")
    wh = f"{base}/lag"
    configure(wh, m)
    backfill: dict[str, float] = {}
    if backfill_rows:  # a big table the channel ignores until the run's middle, then backfills
        m.execute("SET SESSION sql_log_bin = 0",  # loaded long ago: its rows are not in the binlog the channel reads
                  "CREATE DATABASE big", "CREATE TABLE big.t (id BIGINT PRIMARY KEY, a INT, b VARCHAR(32), "
                  "c DECIMAL(12,2), d DATETIME)", "INSERT INTO big.t SELECT seq, seq % 1000, CONCAT('name-', seq), "
                  f"seq / 7, '2024-01-01' + INTERVAL seq SECOND FROM big.seq_1_to_{backfill_rows}", timeout=3600)
        rpl_sql.connect(wh).execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'; CHANGE REPLICATION FILTER "
                                    "REPLICATE_IGNORE_DB = (big) FOR CHANNEL 'a'; START REPLICA SQL_THREAD FOR "
                                    "CHANNEL 'a'")
    proc = service(wh)
    if log_retention is not None:
        wait_caught_up(wh, m, 120)
        proc.terminate()
        proc.wait()
        set_log_retention(wh, log_retention)
        proc = service(wh)
    committed: dict[int, float] = {}
    visible: dict[int, float] = {}
    mem: list[tuple[float, float]] = []
    logs: list[dict[str, float]] = []  # every minute, each table's newest checkpoint
    archives: list[tuple[int, float]] = []  # every minute, the archived commits and their MB
    upkeeps: list[tuple[float, int, str]] = []  # (seconds, exit status, stderr) of each upkeep run
    stop = threading.Event()
    ready = threading.Event()  # the service is up and caught up: memory is sampled from here

    def writer() -> None:
        conn = m.connect()
        per = max(1, rate // 50)  # one INSERT of `per` rows every 20 ms
        nxt, i, t0 = time.monotonic(), 0, time.monotonic()
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_format=ROW")
            while time.monotonic() - t0 < seconds:
                vals = ",".join(f"({i + k}, 'x')" for k in range(per))
                cur.execute(f"INSERT INTO app.ticks VALUES {vals}")
                conn.commit()
                now = time.monotonic()
                for k in range(per):
                    committed[i + k] = now
                i += per
                nxt += 0.02
                time.sleep(max(0.0, nxt - time.monotonic()))
        conn.close()

    def sampler() -> None:
        from deltalake import DeltaTable

        seen = -1
        while not stop.is_set():
            cat = Catalog.load(wh, "a")
            e = cat.table("crm", "ticks")
            if e is not None:
                try:
                    import pyarrow as pa

                    actions = pa.table(DeltaTable(cat.data_path(e)).get_add_actions(flatten=True)).to_pydict()
                    top = max((v for v in actions.get("max.id", []) if v is not None), default=-1)
                except Exception:
                    top = seen
                now = time.monotonic()
                for j in range(seen + 1, top + 1):
                    visible[j] = now
                seen = max(seen, top)
            time.sleep(0.05)

    def memory() -> None:
        ready.wait()
        t0 = time.monotonic()
        while not stop.is_set():
            mem.append((time.monotonic() - t0, *rss_mb(proc.pid)))
            if len(mem) % 12 == 1:
                logs.append(checkpoint_kb(wh))
                archives.append(archive_size(wh))
            stop.wait(5)

    def upkeep() -> None:
        ready.wait()
        while not stop.wait(upkeep_every):
            t0 = time.monotonic()
            run = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "upkeep", "--warehouse", wh,
                                  "--keep-days", str(keep_days)], capture_output=True, text=True)
            upkeeps.append((time.monotonic() - t0, run.returncode, run.stderr.strip()[-300:]))

    threads = [threading.Thread(target=f) for f in (sampler, memory) + ((upkeep,) if upkeep_every else ())]
    for th in threads:
        th.start()
    try:
        wait_caught_up(wh, m, 120)
        ready.set()
        w = threading.Thread(target=writer)
        w.start()
        if backfill_rows:
            time.sleep(seconds / 3)
            backfill["start"] = time.monotonic()
            rpl_sql.connect(wh).execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'; CHANGE REPLICATION FILTER "
                                        "REPLICATE_IGNORE_DB = () FOR CHANNEL 'a'; START REPLICA SQL_THREAD FOR "
                                        "CHANNEL 'a'")
            while time.monotonic() - backfill["start"] < 3600:
                e = Catalog.load(wh, "a").table("big", "t")
                if e is not None and e.state is None:
                    backfill["end"] = time.monotonic()
                    break
                time.sleep(0.1)
        w.join()
        wait_caught_up(wh, m, 600)
        time.sleep(0.2)
    finally:
        stop.set()
        ready.set()
        for th in threads:
            th.join()
        proc.terminate()
        proc.wait()
    cat = Catalog.load(wh, "a")
    ids = read_all(cat.data_path(cat.table("crm", "ticks")), columns=["id"]).column("id")
    print(f"   the replica table at the end: {len(ids):,} rows, {len(set(ids.to_pylist())):,} distinct ids; the "
          f"source inserted {len(committed):,}")
    lags = sorted(visible[i] - committed[i] for i in committed if i in visible)
    if len(lags) < 2:
        print(f"2. lag: only {len(lags)} of {len(committed):,} rows were seen in the replica table")
        return
    q = statistics.quantiles(lags, n=100)
    achieved = len(committed) / seconds
    print(f"2. lag at {achieved:,.0f} rows/s for {seconds:.0f} s ({len(committed):,} rows, target {rate:,}/s): "
          f"p50 {q[49]:.2f} s, p99 {q[98]:.2f} s, max {lags[-1]:.2f} s")
    if "end" in backfill:
        during = sorted(visible[i] - committed[i] for i in committed if i in visible
                        and backfill["start"] <= committed[i] <= backfill["end"])
        took = backfill["end"] - backfill["start"]
        if len(during) >= 2:
            qd = statistics.quantiles(during, n=100)
            print(f"   during the backfill of big.t ({backfill_rows:,} rows in {took:.1f} s from the filter change, "
                  f"{backfill_rows / took:,.0f} rows/s): lag p50 {qd[49]:.2f} s, p99 {qd[98]:.2f} s, "
                  f"max {during[-1]:.2f} s over {len(during):,} rows")
    elif backfill_rows:
        print("   the backfill of big.t did not finish within the run")
    if mem:
        mid = mem[len(mem) // 2]
        print(f"3. service RSS (with its SQL-thread process): first {mem[0][1]:.0f} MB, middle {mid[1]:.0f} MB, "
              f"last {mem[-1][1]:.0f} MB, "
              f"max {max(v for _, v, _ in mem):.0f} MB ({len(mem)} samples over {mem[-1][0]:.0f} s); of it the "
              f"receiving process: {mem[0][2]:.0f} / {mid[2]:.0f} / {mem[-1][2]:.0f} MB, the SQL-thread "
              f"process(es): {mem[0][1] - mem[0][2]:.0f} / {mid[1] - mid[2]:.0f} / {mem[-1][1] - mem[-1][2]:.0f} MB")
        minutes = [next(x for x in mem if x[0] >= 60 * k) for k in range(int(mem[-1][0] // 60) + 1)]
        print("   every minute, service (receiving process) MB: " +
              ", ".join(f"{v:.0f} ({r:.0f})" for _, v, r in minutes))
        spans = [(a, b) for a, b in ((1, 10), (10, 20), (20, 30)) if mem[-1][0] >= 60 * b - 5]
        if spans:
            print("   slope of the service's RSS (least squares over the 5-s samples), MB a minute: " + ", ".join(
                f"minutes {a}-{b} {slope([(t / 60, v) for t, v, _ in mem if 60 * a <= t <= 60 * b]):.2f}"
                for a, b in spans))
        # medians of three-minute windows: a single sample taken during a compaction does not move them
        windows = [(a, a + 3) for a in range(1, int(mem[-1][0] // 60) - 2, 3)]
        if windows:
            print("   median of the service's RSS (receiving process) per three minutes, MB: " + ", ".join(
                f"{a}-{b} {statistics.median(v for t, v, _ in mem if 60 * a <= t < 60 * b):.0f} "
                f"({statistics.median(r for t, _, r in mem if 60 * a <= t < 60 * b):.0f})" for a, b in windows))
    if logs:
        print("4. each table's newest checkpoint, KB (removed files stay in them ten minutes), and the files in its "
              f"_delta_log, every minute (log retention: {log_retention or 600} s):")
        for name in sorted(logs[-1]):
            print(f"   {name}: " + ", ".join(f"{c[name][0]:.0f} KB/{c[name][1]}" if name in c else "-" for c in logs))
    if archives:
        print("   the archived commits (_rpl_sql_log/ of every table), every minute: "
              + ", ".join(f"{n:,} ({mb:.1f} MB)" for n, mb in archives))
        print("   at the end, per table: " + ", ".join(
            f"{Path(d).parent.relative_to(wh).as_posix()} {archive_size(str(Path(d).parent))[0]:,}"
            for d in sorted(Path(wh).rglob("_rpl_sql_log"))))
    if upkeeps:
        failed = [u for u in upkeeps if u[1] != 0]
        print(f"5. `rpl-sql upkeep --keep-days {keep_days}` every {upkeep_every:.0f} s beside the service: "
              f"{len(upkeeps)} runs, {len(failed)} failed, "
              f"{statistics.fmean(u[0] for u in upkeeps):.1f} s a run (max {max(u[0] for u in upkeeps):.1f} s)"
              + "".join(f"\n   failed: {u[2]}" for u in failed[:3]))


def update_lag(base: str, m: MariaDBServer, rows: int, rate: int, seconds: float) -> None:
    """The lag of updates to random existing keys of a table of `rows` rows (issue #55: it must not grow with the
    table). The table is filled without the binlog and copied by `rpl-sql snapshot`; then the service runs while
    a client updates `rate` random keys a second (one UPDATE ... WHERE id IN (...) every 20 ms), each
    transaction's GTID timed at its COMMIT; a sampler reads the channel's Executed_Gtid_Set (which moves only
    once a batch's rows are in the replica tables) every 100 ms. p50 / p99 / max of visible - committed."""
    import random

    m.reset()
    m.execute("SET SESSION sql_log_bin = 0", "CREATE DATABASE app", "CREATE TABLE app.big (id BIGINT PRIMARY KEY, "
              "v INT NOT NULL, pad VARCHAR(32))", f"INSERT INTO app.big SELECT seq, 0, CONCAT('row-', seq) FROM "
              f"app.seq_1_to_{rows}", timeout=7200)
    wh = f"{base}/update_lag_{rows}"
    rpl_sql.connect(wh).execute(m.channel_sql("a"))
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "rpl_sql.cli", "snapshot", "--warehouse", wh, "--channel", "a"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    copied = time.monotonic() - t
    rpl_sql.connect(wh).execute("START REPLICA FOR CHANNEL 'a'")
    proc = service(wh)
    committed: dict[int, float] = {}
    visible: dict[int, float] = {}
    peak = [0.0]
    stop = threading.Event()
    def executed() -> int:
        done = DeltaStore(wh).load().state.channel("a").applier.executed_gtid_set
        return max((int(p.rsplit("-", 1)[1]) for p in done.split(",") if p.startswith("0-")), default=0)

    try:
        # the service is up and has read the key index of every file (the first batch after a start pays that)
        spread = ",".join(str(1 + i * (rows // 200)) for i in range(200))
        m.execute("SET SESSION binlog_format = ROW", f"UPDATE app.big SET v = v + 1 WHERE id IN ({spread})")
        first = int(m.execute("SELECT @@gtid_binlog_pos")[0][0].rsplit("-", 1)[1])
        deadline = time.monotonic() + 600
        while executed() < first:
            if time.monotonic() > deadline:
                raise TimeoutError("the service did not apply the first update")
            time.sleep(0.2)

        def sampler() -> None:
            while not stop.is_set():
                top = executed()
                now = time.monotonic()
                for seq in [s for s in list(committed) if s not in visible and s <= top]:
                    visible[seq] = now
                peak[0] = max(peak[0], rss_mb(proc.pid)[0])
                time.sleep(0.1)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        conn = m.connect()
        rnd = random.Random(55)
        per = max(1, rate // 50)
        nxt = t0 = time.monotonic()
        with conn.cursor() as cur:
            cur.execute("SET SESSION binlog_format = ROW")
            while time.monotonic() - t0 < seconds:
                keys = ",".join(str(rnd.randint(1, rows)) for _ in range(per))
                cur.execute(f"UPDATE app.big SET v = v + 1 WHERE id IN ({keys})")
                conn.commit()
                now = time.monotonic()
                cur.execute("SELECT @@last_gtid")
                committed[int(cur.fetchone()[0].rsplit("-", 1)[1])] = now
                nxt += 0.02
                time.sleep(max(0.0, nxt - time.monotonic()))
        conn.close()
        deadline = time.monotonic() + 600
        while len(visible) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        th.join()
    finally:
        proc.terminate()
        proc.wait()
    cat = Catalog.load(wh, "a")
    got = read_all(cat.data_path(cat.table("app", "big")), columns=["id", "v"])
    want = m.execute("SELECT COUNT(*), SUM(v), BIT_XOR(id * 1000003 + v) FROM app.big")[0]
    ours = (got.num_rows, sum(got.column("v").to_pylist()),
            __import__("functools").reduce(lambda a, b: a ^ b, (i * 1000003 + v for i, v in zip(
                got.column("id").to_pylist(), got.column("v").to_pylist())), 0))
    same = "equal" if ours == tuple(int(x) for x in want) else "DIFFERENT"
    print(f"   the replica table at the end: {ours[0]:,} rows, sum(v) {ours[1]:,}; the source's "
          f"{int(want[0]):,} rows, sum(v) {int(want[1]):,}: {same}")
    lags = sorted(visible[s] - committed[s] for s in committed if s in visible)
    missing = len(committed) - len(lags)
    q = lambda f: lags[min(len(lags) - 1, int(f * len(lags)))] if lags else float("nan")  # noqa: E731
    print(f"{rows:>12,} rows: snapshot {copied:6.1f} s; {len(committed) * per / seconds:,.0f} updates/s of random "
          f"keys for {seconds:.0f} s: lag p50 {q(0.5):.2f} s, p99 {q(0.99):.2f} s, max {lags[-1] if lags else 0:.2f}"
          f" s{f', {missing} never visible' if missing else ''}; service RSS max {peak[0]:.0f} MB")
    minutes = sorted({int((committed[s] - t0) // 60) for s in committed if s in visible})
    for i in minutes:  # a lag that grows with the run shows here, where the whole run's p99 hides it
        ls = sorted(visible[s] - committed[s] for s in committed if s in visible and (committed[s] - t0) // 60 == i)
        print(f"   minute {i + 1}: {len(ls):,} transactions, lag p50 {ls[len(ls) // 2]:.2f} s, "
              f"p99 {ls[min(len(ls) - 1, int(0.99 * len(ls)))]:.2f} s, max {ls[-1]:.2f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--catchup-rows", type=int, default=100_000)
    p.add_argument("--per-txn", type=int, default=5)
    p.add_argument("--repeat", type=int, default=2, help="catch-up runs of each side (the best counts)")
    p.add_argument("--rate", type=int, default=5000)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--log-retention", type=int, metavar="SECONDS",
                   help="give every table of the lag run this log retention (default: theirs, ten minutes)")
    p.add_argument("--upkeep-every", type=float, metavar="SECONDS",
                   help="run `rpl-sql upkeep --keep-days` beside the service this often during the lag run")
    p.add_argument("--keep-days", type=float, default=0.002, metavar="N",
                   help="upkeep's --keep-days with --upkeep-every (default 0.002, about three minutes)")
    p.add_argument("--backfill-rows", type=int, default=0, metavar="N",
                   help="a table of N rows the channel ignores until a third into the lag run, then backfills "
                        "(its lag meanwhile is printed)")
    p.add_argument("--keep", action="store_true", help="keep the server's and the warehouses' directory")
    p.add_argument("--update-lag-rows", metavar="N,N,...",
                   help="only this: the lag of --rate updates/s to random keys of tables of these sizes "
                        "(e.g. 1000000,10000000,50000000)")
    args = p.parse_args()
    if binaries() is None:
        sys.exit("mariadbd is not installed (apt-get install -y mariadb-server)")
    base = tempfile.mkdtemp(prefix="bench_replica_")
    print(f"rpl_sql replica bench: MariaDB, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    m = MariaDBServer(Path(base) / "m", server_id=11)
    try:
        m.start()
        if args.update_lag_rows:
            for rows in (int(n) for n in args.update_lag_rows.split(",")):
                update_lag(base, m, rows, args.rate, args.seconds)
            return
        if args.catchup_rows:
            catch_up(base, m, args.catchup_rows, args.per_txn, args.repeat)
        if args.seconds:
            lag(base, m, args.rate, args.seconds, args.log_retention, args.upkeep_every, args.keep_days,
                args.backfill_rows)
    finally:
        m.stop()
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
