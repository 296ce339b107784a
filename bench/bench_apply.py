"""Benchmark of the applier (rpl_sql.pipeline.applier) and of read_delta, figures printed side by side (no asserts).

    .venv/bin/python bench/bench_apply.py --quick          # 1M events, 1/100/1,000 rules per channel
    .venv/bin/python bench/bench_apply.py                  # 10M events, 1/100/1,000/10,000 rules per channel
    .venv/bin/python bench/bench_apply.py --rules 1,10000 --decide-ab 5   # + deciding: public functions vs codes
    .venv/bin/python bench/bench_apply.py --rules 10000 --ab e809a38 --rounds 2   # whole applies vs a revision
    .venv/bin/python bench/bench_apply.py --rules 1,10000 --split 3   # deciding, and writing alone, vs the copy
    .venv/bin/python bench/bench_apply.py --rules 1,10000 --alternate 6   # the copy, the selection, the apply in turn

Events (3 channels, row-based transactions with 1-4 row events, 5% statements, 1% dropped-at-source GTID
markers; 50 databases x 40 tables per channel) are generated once with numpy/pyarrow and written with delta-rs
under bench/data/ (git-ignored), partitioned like the canonical events table. Each rule set is configured with
CHANGE REPLICATION FILTER, the applied table and positions are reset, and one `apply` run is timed (after one
untimed warm-up apply: the session's first run pays JIT and class loading).

The baselines: a bare scan of every event column (Spark's Parquet reader on the directory, and read_delta),
and two copies, the floor of any applier that writes what it applies: Spark's (read_delta -> Parquet files)
and pyarrow's (each events file read and written again, two threads, with the arrow engine's dictionary
columns and writer options; with --alternate also the selection: that copy writing only the events the
filters apply, found beforehand). Each rule set is applied by both engines (`apply(engine=...)`: arrow,
pyarrow in this process; spark, the session), and once more as if the commits had no summaries (Spark's pass
decides; the arrow engine writes).

--ab REF: whole `apply` runs of git revision REF (extracted with `git archive` into a temporary directory)
and of this checkout, alternating in fresh processes (each: configure, one untimed warm-up apply, one timed
apply; which side goes first swaps every round), printed side by side per round. Fresh processes, because two
versions of the package cannot share
one interpreter; alternating, because the shared machine's speed drifts.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

import numpy as np
import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --ab-child DIR: this process measures the rpl_sql package found in DIR (a revision's tree)
CODE_ROOT = sys.argv[sys.argv.index("--ab-child") + 1] if "--ab-child" in sys.argv else ROOT
sys.path.insert(0, os.path.join(CODE_ROOT, "src") if os.path.isdir(os.path.join(CODE_ROOT, "src")) else CODE_ROOT)



def _module(*names: str):
    """The first of these modules the measured tree has (--ab: revisions before the subpackage layout)."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(names[0])


_events = _module("rpl_sql.pipeline.events", "rpl_sql.events")
EVENTS_SCHEMA, PARTITION_BY, applied_path, events_path = (_events.EVENTS_SCHEMA, _events.PARTITION_BY,
                                                          _events.applied_path, _events.events_path)
APPLIER_LOGGERS = ("rpl_sql.pipeline.applier", "rpl_sql.apply")  # the applier's logger, new and old layout

CHANNELS = ("ch1", "ch2", "ch3")
N_DB, N_TABLE = 50, 40
UUIDS = {"ch1": "3e11fa47-71ca-11e1-9e33-c80aa9429562", "ch2": "5f22fa47-71ca-11e1-9e33-c80aa9429563",
         "ch3": "7a33fa47-71ca-11e1-9e33-c80aa9429564"}


# ---------------------------------------------------------------- data

def _strings(idx: np.ndarray, pool: list[str], mask: np.ndarray | None = None) -> pa.Array:
    arr = pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32), mask=mask), pa.array(pool)).cast(pa.string())
    return arr


def channel_events(channel: str, n_events: int, seed: int) -> pa.Table:
    """n_events canonical rows of one channel: seq 1..n, GTID per transaction, vectorized."""
    rnd = np.random.default_rng(seed)
    kinds = rnd.choice(4, size=n_events, p=[0.90, 0.05, 0.04, 0.01])  # row txn, DML stmt, DDL, marker
    nrows = rnd.integers(1, 5, size=n_events)
    sizes = np.where(kinds == 0, nrows + 2, np.where(kinds == 1, 3, 1))
    ends = np.cumsum(sizes)
    n_full = int(np.searchsorted(ends, n_events, side="right"))  # whole transactions that fit
    rest = n_events - (int(ends[n_full - 1]) if n_full else 0)  # the tail: dropped-at-source markers
    kinds = np.concatenate([kinds[:n_full], np.full(rest, 3)])
    sizes = np.concatenate([sizes[:n_full], np.ones(rest, dtype=sizes.dtype)])
    n_txn = len(sizes)
    txn = np.repeat(np.arange(n_txn), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = np.arange(n_events) - starts[txn]
    k = kinds[txn]
    size = sizes[txn]
    # event type: 0 query, 1 write, 2 update, 3 delete, 4 gtid
    etype = np.zeros(n_events, dtype=np.int32)
    is_row = (k == 0) & (pos > 0) & (pos < size - 1)
    etype[is_row] = 1 + rnd.integers(0, 3, size=int(is_row.sum()))
    etype[k == 3] = 4
    txn_db = rnd.integers(0, N_DB, size=n_txn)
    db = np.where(is_row, rnd.integers(0, N_DB, size=n_events), txn_db[txn])
    tbl = rnd.integers(0, N_TABLE, size=n_events)
    # command: 0 BEGIN, 1 COMMIT, 2.. statement commands
    stmt_cmds = ["INSERT", "UPDATE", "UPDATE_MULTI", "DELETE", "REPLACE"]
    ddl_cmds = ["CREATE_TABLE", "ALTER_TABLE", "DROP_TABLE", "CREATE_DB", "DROP_DB", "OTHER"]
    cmd_pool = ["BEGIN", "COMMIT"] + stmt_cmds + ddl_cmds
    cmd = np.where((k == 0) | (k == 1), np.where(pos == 0, 0, np.where(pos == size - 1, 1, 0)), 0)
    stmt = (k == 1) & (pos == 1)
    cmd[stmt] = 2 + rnd.integers(0, len(stmt_cmds), size=int(stmt.sum()))
    ddl = k == 2
    cmd[ddl] = 2 + len(stmt_cmds) + rnd.integers(0, len(ddl_cmds), size=int(ddl.sum()))
    is_query = etype == 0

    # tables of statements: a pool of 2,000 lists (qualified, unqualified, read-only)
    prnd = np.random.default_rng(seed + 1)
    pool = []
    for _ in range(2000):
        pool.append([{"db": None if prnd.random() < 0.5 else f"db{prnd.integers(N_DB)}",
                      "name": f"t{prnd.integers(N_TABLE)}", "updating": bool(prnd.random() < 0.7)}
                     for _ in range(prnd.integers(0, 4))])
    pool_arr = pa.array(pool, type=EVENTS_SCHEMA.field("tables").type)
    has_tables = (stmt | ddl) & ~np.isin(cmd, [cmd_pool.index("CREATE_DB"), cmd_pool.index("DROP_DB"),
                                                cmd_pool.index("OTHER")])
    tidx = rnd.integers(0, len(pool), size=n_events)
    tables = pool_arr.take(pa.array(tidx, mask=~has_tables))
    payloads = [f'[{{"before": {{"id": {i}, "v": "x{i * 7}"}}, "after": {{"id": {i}, "v": "y{i * 13}"}}}}]'
                for i in range(1000)]
    dbs = [f"db{i}" for i in range(N_DB)]
    tbls = [f"t{i}" for i in range(N_TABLE)]
    seq = np.arange(1, n_events + 1, dtype=np.int64)
    gno = txn.astype(np.int64) + 1
    gtid = pa.array(np.char.add(UUIDS[channel] + ":", gno.astype(str)).astype(object))
    etypes = ["query", "write_rows", "update_rows", "delete_rows", "gtid"]
    kinds_txt = ["TRANSACTION", "DML", "TABLE_DDL", "DATABASE_DDL", "OTHER"]
    kind_idx = np.where(cmd <= 1, 0, np.where(cmd < 2 + len(stmt_cmds), 1, 2))
    ts = pa.array(1_714_521_600_000_000 + seq * 1000, pa.timestamp("us", tz="UTC"))
    cols = {
        "channel": pa.array([channel] * n_events, pa.string()),
        "seq": pa.array(seq),
        "gtid": gtid,
        "binlog_file": pa.array(["binlog.000001"] * n_events, pa.string()),
        "binlog_pos": pa.array(seq * 200 + 4),
        "event_type": _strings(etype, etypes),
        "command": _strings(cmd, cmd_pool, mask=~is_query),
        "statement_kind": _strings(kind_idx, kinds_txt, mask=~is_query),
        "default_db": _strings(db, dbs, mask=~is_query),
        "db_name": _strings(db, dbs, mask=~is_row),
        "table_name": _strings(tbl, tbls, mask=~is_row),
        "tables": tables,
        "statement": _strings(cmd, [f"/* {c} */ ..." for c in cmd_pool], mask=~is_query),
        "rows": _strings(rnd.integers(0, len(payloads), size=n_events), payloads, mask=~is_row),
        "event_time": ts,
        "filter_db": _strings(db, dbs),
        "source": pa.array(["binlog"] * n_events, pa.string()),
        "columns": pa.nulls(n_events, pa.string()),
        "shape_id": pa.nulls(n_events, pa.int32()),  # set by the compaction
    }
    return pa.table(cols, schema=EVENTS_SCHEMA)


def generate(warehouse: str, n_events: int, commit_rows: int = 20_000) -> float:
    """Land the events as the ingest does: through its EventsWriter, in commits of whole transactions of about
    `commit_rows` events (the binlog ingest's default batch), each carrying its summary for the applier, and
    compacted every 40 commits; then vacuumed, as upkeep would."""
    import pyarrow.compute as pc

    EventsWriter = _module("rpl_sql.pipeline.writer").EventsWriter
    t = time.perf_counter()
    per = n_events // len(CHANNELS)
    for i, ch in enumerate(CHANNELS):
        n = per + (n_events - per * len(CHANNELS) if i == 0 else 0)
        tbl = channel_events(ch, n, seed=100 + i)
        g = tbl.column("gtid").combine_chunks()
        starts = np.flatnonzero(np.asarray(pc.fill_null(pc.not_equal(g[1:], g[:-1]), True))) + 1  # txn starts
        cuts = sorted(set(starts[np.searchsorted(starts, np.arange(commit_rows, n, commit_rows))].tolist()) - {n})
        with EventsWriter(warehouse, ch) as w:
            for lo, hi in zip([0, *cuts], [*cuts, n]):
                w.commit(tbl.slice(lo, hi - lo), {"source": "binlog"})
            w.compact()
        del tbl
    from deltalake import DeltaTable  # the files compaction replaced: a directory scan must not see them

    DeltaTable(events_path(warehouse)).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    return time.perf_counter() - t


# ---------------------------------------------------------------- rule sets

def rules_script(r: int) -> str:
    """r rules per channel: ch1 wildcards (do + ignore), ch2 exact tables + rewrite, ch3 databases + wild ignore."""
    def q(v):
        return "'" + v.replace("'", "\\'") + "'"

    def lst(vals):
        return "(" + ", ".join(vals) + ")"

    ch1_do = ["db%.t1%", "db%.t2%"][:r] + [f"zz{i}%.t{i}_%" for i in range(max(0, r // 2 - 2))]
    ch1_ign = [f"%.tmp{i}%" for i in range(r - len(ch1_do))]
    ch2_rw = [f"(db{i}, db{i}_r)" for i in range(min(2, r - 1))]
    ch2_ign = [f"db{i % N_DB}.t{(i * 7) % N_TABLE}" if i < 60 else f"x{i}.y{i}" for i in range(r - len(ch2_rw))]
    ch3_ign = [f"db{i}" for i in range(min(10, r))] + [f"nodb{i}" for i in range(max(0, r // 2 - 10))]
    ch3_wild = [f"%.t{i}x%" for i in range(r - len(ch3_ign))]
    # every type a rule set uses is named, empty or not: CHANGE REPLICATION FILTER keeps the types it does not
    # name, so a smaller rule set must clear what a larger one left
    out = [f"CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = {lst(map(q, ch1_do))}, "
           f"REPLICATE_WILD_IGNORE_TABLE = {lst(map(q, ch1_ign))} FOR CHANNEL 'ch1'",
           f"CHANGE REPLICATION FILTER REPLICATE_IGNORE_TABLE = {lst(ch2_ign)}, "
           f"REPLICATE_REWRITE_DB = ({', '.join(ch2_rw)}) FOR CHANNEL 'ch2'",
           f"CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = {lst(ch3_ign)}, "
           f"REPLICATE_WILD_IGNORE_TABLE = {lst(map(q, ch3_wild))} FOR CHANNEL 'ch3'"]
    return ";\n".join(out)


def configure(warehouse: str, r: int) -> float:
    from rpl_sql import Session
    from rpl_sql.filters.state import ApplierPosition
    from rpl_sql.storage.store import DeltaStore

    t = time.perf_counter()
    s = Session(warehouse)
    s.execute("STOP REPLICA")
    s.execute(rules_script(r))
    s.execute("START REPLICA")
    store = DeltaStore(warehouse)
    store.transact(lambda st: (replace(st, channels=tuple(replace(c, applier=ApplierPosition())
                                                             for c in st.channels)), None),
                   {"statement": "bench: reset applier positions"})
    shutil.rmtree(applied_path(warehouse), ignore_errors=True)
    # expired state commits archived, as the service does every few minutes: the benchmark's own thousands of
    # commits left in the log made each state load list them (5 ms each at 5,400)
    _module("rpl_sql.storage.delta.archive", "rpl_sql.archive").archive(store.state_path)
    return time.perf_counter() - t


# ---------------------------------------------------------------- timing

class Phases(logging.Handler):
    """Collects rpl_sql.pipeline.applier's debug timings ("channel 'x': <phase> 1.23s")."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.by_phase: dict[str, float] = {}

    def emit(self, record):
        msg = record.getMessage()
        try:
            phase, secs = msg.split(": ", 1)[1].rsplit(" ", 1)
            phase = phase.split(" of ")[0]
            self.by_phase[phase] = self.by_phase.get(phase, 0.0) + float(secs.rstrip("s"))
        except (IndexError, ValueError):
            pass


_JVM_PID = None


def cpu_seconds() -> float:
    """User + system CPU of the driver JVM (local mode: all of Spark) and of this Python process."""
    tick = os.sysconf("SC_CLK_TCK")
    jvm = 0.0
    if _JVM_PID is not None:
        with open(f"/proc/{_JVM_PID}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        jvm = (int(fields[11]) + int(fields[12])) / tick
    return jvm + sum(os.times()[:2])


def timed(fn, repeat: int = 1):
    """(wall seconds, CPU seconds, result) of the fastest of `repeat` runs (the machine is shared: noisy)."""
    best = None
    for _ in range(repeat):
        c, t = cpu_seconds(), time.perf_counter()
        out = fn()
        cur = (time.perf_counter() - t, cpu_seconds() - c, out)
        best = cur if best is None or cur[1] < best[1] else best
    return best


def decide_side_by_side(spark, warehouse: str, channel: str, repeat: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) of one channel's shape query alone, deciding with the public functions (a verdict
    and a label per shape, as the applier did before) and with the applier's decision codes, interleaved."""
    from pyspark.sql import functions as F

    from rpl_sql.pipeline.events import ROW_EVENT_TYPES
    from rpl_sql.pipeline.applier.shapes import decision_columns, shape_frame, with_shape_key
    from rpl_sql.compile import compile_functions, sql_str
    from rpl_sql.spark.deltaread import read_snapshot, snapshot
    from rpl_sql.spark.env import jit_huge_methods, map_lookup_hash_min
    from rpl_sql.storage.store import DeltaStore

    state = DeltaStore(warehouse).load().state
    for applier in (False, True):
        for text in compile_functions(state, jit_huge_methods=jit_huge_methods(spark), applier=applier,
                                      map_hash_min=map_lookup_hash_min(spark)).statements:
            spark.sql(text)
    snap = snapshot(events_path(warehouse), None, {"channel": [channel]})
    et, c = F.col("event_type"), sql_str(channel)
    row, query = et.isin(*ROW_EVENT_TYPES), et == "query"

    def shapes():  # a new DataFrame each run: a re-executed one would reuse its shuffle files
        return shape_frame(with_shape_key(read_snapshot(spark, snap)))

    def public():  # as the applier decided before it had its own set: a verdict and a label per shape
        return shapes().select("*", *(F.when(row, F.expr(r)).when(query, F.expr(q)) for r, q in (
            (f"should_apply({c}, db_name, table_name)", f"should_apply_statement({c}, command, default_db, t)"),
            (f"filter_decided_by({c}, db_name, table_name)",
             f"filter_decided_by_statement({c}, command, default_db, t)"),
            (f"rewrite_db({c}, db_name)", f"rewrite_db({c}, default_db)"))))

    variants = {"shapes only": shapes, "public functions": public,
                "decision codes": lambda: shapes().select("*", *decision_columns(channel))}
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for i in range(repeat + 1):
        for name, df in variants.items():
            cpu, t = cpu_seconds(), time.perf_counter()
            df().toArrow()
            if i:  # the first round warms up
                runs[name].append((time.perf_counter() - t, cpu_seconds() - cpu))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}


def arrow_copy(events: str, copy_dir: str, keep: dict | None = None) -> None:
    """Every events file read and written to Parquet again by pyarrow, on two threads, read and written as the
    arrow engine reads and writes (its dictionary columns and writer options: the tightest copy). `keep`: per
    file path, the events to write (the selection: the copy of only what the filters apply)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    from rpl_sql.pipeline.applier.arrow_write import DICTIONARY_READ, PARQUET_OPTIONS

    files = [f.path for f in _module("rpl_sql.spark.deltaread").snapshot(events).files]
    shutil.rmtree(copy_dir, ignore_errors=True)
    os.makedirs(copy_dir)

    def one(i: int) -> None:
        t = pq.read_table(files[i], read_dictionary=DICTIONARY_READ)
        pq.write_table(t if keep is None else t.filter(keep[files[i]]), os.path.join(copy_dir, f"{i}.parquet"),
                       **PARQUET_OPTIONS)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, range(len(files))))
    shutil.rmtree(copy_dir, ignore_errors=True)


def measured_session(app_name: str):
    """A local SparkSession whose JVM cpu_seconds() reads, and the Phases collecting the applier's timings."""
    local_spark = _module("rpl_sql.spark.env", "rpl_sql.sparkenv").local_spark

    global _JVM_PID
    spark = local_spark(app_name=app_name, **{"spark.ui.showConsoleProgress": "false"})
    _JVM_PID = spark._jvm.java.lang.ProcessHandle.current().pid()
    phases = Phases()
    for name in APPLIER_LOGGERS:
        logging.getLogger(name).addHandler(phases)
        logging.getLogger(name).setLevel(logging.DEBUG)
    return spark, phases


def ab_child(wh: str, r: int) -> None:
    """One side of --ab: configure, warm up, time one apply; the result as a JSON line."""
    import rpl_sql

    apply = _module("rpl_sql.pipeline.applier", "rpl_sql.apply").apply
    assert os.path.abspath(rpl_sql.__file__).startswith(os.path.abspath(CODE_ROOT)), rpl_sql.__file__
    spark, phases = measured_session("bench_apply_ab")
    configure(wh, r)
    apply(spark, wh, verify="auto")
    configure(wh, r)
    phases.by_phase.clear()
    wall, cpu, report = timed(lambda: apply(spark, wh, verify="auto"))
    print("AB-RESULT " + json.dumps({"wall": wall, "cpu": cpu, "events": report.events, "phases": phases.by_phase}),
          flush=True)


def ab_runs(ref: str, n: int, data: str, rules: list[int], rounds: int) -> None:
    """--ab: REF and this checkout alternating in fresh processes, side by side per round."""
    tree = tempfile.mkdtemp(prefix="rpl_sql_ab_")
    try:
        archive = subprocess.run(["git", "-C", ROOT, "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        sides = {ref: tree, "this checkout": ROOT}
        for r in rules:
            got: dict[str, list[dict]] = {k: [] for k in sides}
            for i in range(rounds):
                # each round swaps which side runs first: a same-code A/B (HEAD vs this checkout) measured the
                # second process 9% slower, a position effect that would otherwise count against one side
                for name, code in (list(sides.items()) if i % 2 == 0 else list(sides.items())[::-1]):
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--ab-child", code, "--data", data,
                                          "--rules", str(r), "--events", str(n)],
                                         capture_output=True, text=True)
                    line = next((x for x in out.stdout.splitlines() if x.startswith("AB-RESULT ")), None)
                    if out.returncode or line is None:
                        raise SystemExit(f"{name}: exit {out.returncode}\n{out.stderr[-3000:]}")
                    res = json.loads(line.split(" ", 1)[1])
                    got[name].append(res)
                    print(f"rules/channel={r} round {i + 1} {name:>14}: apply {res['wall']:6.1f}s wall, "
                          f"{res['cpu']:6.1f}s CPU  [" + ", ".join(f"{k} {v:.1f}s" for k, v in res["phases"].items()
                                                              if v >= 0.05) + "]", flush=True)
            (a, b) = (got[ref], got["this checkout"])
            med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
            print(f"rules/channel={r}: median of {rounds} -- {ref}: {med(a, 'wall'):.1f}s / {med(a, 'cpu'):.1f} CPU s; "
                  f"this checkout: {med(b, 'wall'):.1f}s / {med(b, 'cpu'):.1f} CPU s; this / {ref}: "
                  f"{med(b, 'wall') / med(a, 'wall'):.2f} wall, {med(b, 'cpu') / med(a, 'cpu'):.2f} CPU "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def decided(wh: str) -> list:
    """Each channel's batch decided as the applier decides it (the summaries read and merged, the shapes
    decided; nothing written): (channel, its events files, its ShapeTable, its rollups) per channel."""
    from rpl_sql.storage.delta import archive
    from rpl_sql.pipeline.applier import batch_shapes, job
    from rpl_sql.pipeline.applier.landed import summarized
    from rpl_sql.pipeline.ingest_position import channel_commits

    deltaread = _module("rpl_sql.spark.deltaread")
    ev = events_path(wh)
    from concurrent.futures import Future

    dt, opened = archive.open_table(ev), Future()
    opened.set_result(dt)
    history = job._LogOnce(ev, dt.version(), opened).history
    todo = []
    for ch in CHANNELS:
        applier = job._Applier(lambda: None, wh, None, None, "auto", engine="arrow")
        state = applier.store.load().state
        snap = deltaread.snapshot(ev, dt.version(), {"channel": [ch]}, table=dt)
        rollups: list = []
        landed = summarized(channel_commits(dt, ch, 0, history=history, rollups=rollups), 0, rollups)
        shapes, _, _ = batch_shapes.summarized_shapes(landed.covered(landed.commits))
        batch_shapes.decide_batch(state, state.channel(ch), shapes, False, "auto")
        todo.append((ch, snap.files, shapes, landed.rollups))
    return todo


def kept_masks(wh: str) -> dict:
    """Per events file, which of its events the configured filters apply (the applier's own verdicts)."""
    from rpl_sql.pipeline.applier import arrow_write
    from rpl_sql.pipeline.applier.verdicts import Verdicts

    out = {}
    for ch, files, shapes, rollups in decided(wh):
        found = Verdicts(shapes.applied(), rollups, 0, None, ch)
        for f in files:
            got = found.of_file(arrow_write._read(f.path))
            out[f.path] = pa.array(np.ones(got.events, bool)) if got.keep is None else got.keep
    return out


def split_runs(wh: str, r: int, rounds: int) -> None:
    """--split: the arrow engine's apply in its two halves, each side by side with pyarrow's copy, per round:
    deciding every channel's batch (the summaries read and merged, the shapes decided; nothing written), then
    writing the three channels' applied events with those decisions (`arrow_write.write_applied`, as the
    write stage does: one channel after another, a thread per core). No Spark. The applier overlaps the two
    (the next channel is decided while one is written), so its wall time lies between the larger and the sum."""
    from rpl_sql.pipeline.applier import arrow_write
    from rpl_sql.pipeline.applier.verdicts import Verdicts

    configure(wh, r)
    ev = events_path(wh)
    out = os.path.join(os.path.dirname(wh), "split_tmp")

    def decide_all() -> list:
        return decided(wh)

    def write_all(todo: list) -> None:
        shutil.rmtree(out, ignore_errors=True)
        for i, (ch, files, shapes, rollups) in enumerate(todo):
            found = Verdicts(shapes.applied(), rollups, 0, None, ch)
            arrow_write.write_applied(files, found, os.path.join(out, str(i)), arrow_write.pafs.LocalFileSystem(),
                                      threads=min(8, os.cpu_count() or 2))
        shutil.rmtree(out, ignore_errors=True)

    for i in range(rounds):
        (w_dec, c_dec, todo) = timed(decide_all)
        w_wr, c_wr, _ = timed(lambda: write_all(todo))
        w_cp, c_cp, _ = timed(lambda: arrow_copy(ev, out))
        print(f"rules/channel={r} round {i + 1}: deciding {w_dec:.2f}s ({c_dec:.1f} CPU s) = {w_dec / w_cp:.2f}x "
              f"pyarrow's copy; writing alone {w_wr:.2f}s ({c_wr:.1f} CPU s) = {w_wr / w_cp:.2f}x wall, "
              f"{c_wr / c_cp:.2f}x CPU; pyarrow's copy {w_cp:.2f}s ({c_cp:.1f} CPU s); "
              f"{sum(len(s) for _, _, s, _ in todo):,} shapes (load average {os.getloadavg()[0]:.1f})", flush=True)


def alternate_runs(wh: str, rule_sets: list[int], rounds: int) -> None:
    """--alternate: pyarrow's copy, and at each rule set the selection (the copy writing only the events the
    filters apply, found beforehand: the floor of any applier that filters with pyarrow) and the arrow engine's
    whole apply, in turn, `rounds` times (the rule sets' order swapped every round), no Spark; the page cache's
    dirty pages written out (`sync`) before each, so one's writeback does not land in the next. Per round the
    ratios to that round's copy, then the medians: this machine's speed drifts by a fifth between minutes, so
    only side by side counts."""
    apply = _module("rpl_sql.pipeline.applier", "rpl_sql.apply").apply
    ev, out = events_path(wh), os.path.join(os.path.dirname(wh), "alternate_tmp")

    def no_spark():
        raise AssertionError("the events carry summaries: the arrow engine needs no Spark")
    keep = {}
    for r in rule_sets:
        configure(wh, r)
        keep[r] = kept_masks(wh)
    apply(no_spark, wh, verify="auto", engine="arrow")  # warm-up: imports, page cache
    runs: dict[object, list[tuple[float, float]]] = {}
    for i in range(rounds):
        os.sync()
        runs.setdefault("copy", []).append(timed(lambda: arrow_copy(ev, out))[:2])
        for r in rule_sets if i % 2 == 0 else rule_sets[::-1]:
            configure(wh, r)
            os.sync()
            runs.setdefault(("selection", r), []).append(timed(lambda: arrow_copy(ev, out, keep[r]))[:2])
            os.sync()
            runs.setdefault(r, []).append(timed(lambda: apply(no_spark, wh, verify="auto", engine="arrow"))[:2])
        copy_w, copy_c = runs["copy"][-1]

        def ratio(key) -> str:
            w, c = runs[key][-1]
            return f"{w:.2f}s ({c:.1f} CPU s) = {w / copy_w:.2f}x wall, {c / copy_c:.2f}x CPU"
        print(f"round {i + 1}: pyarrow's copy {copy_w:.2f}s ({copy_c:.1f} CPU s); " + "; ".join(
            f"{r} rules/channel: selection {ratio(('selection', r))}, apply {ratio(r)}" for r in rule_sets) +
            f" (load average {os.getloadavg()[0]:.1f})", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    med = statistics.median

    def summary(key) -> str:
        walls = [a[0] / c[0] for a, c in zip(runs[key], runs["copy"])]
        cpus = [a[1] / c[1] for a, c in zip(runs[key], runs["copy"])]
        return (f"{med(w for w, _ in runs[key]):.2f}s / {med(c for _, c in runs[key]):.1f} CPU s; per round: median "
                f"{med(walls):.2f}x wall ({min(walls):.2f}-{max(walls):.2f}), {med(cpus):.2f}x CPU "
                f"({min(cpus):.2f}-{max(cpus):.2f})")
    print(f"pyarrow's copy {med(w for w, _ in runs['copy']):.2f}s / {med(c for _, c in runs['copy']):.1f} CPU s "
          f"(medians of {rounds})")
    for r in rule_sets:
        print(f"rules/channel={r}: the selection {summary(('selection', r))}", flush=True)
        print(f"rules/channel={r}: the arrow apply {summary(r)}", flush=True)


@contextlib.contextmanager
def _deciding_by(how: str):
    """'summaries': as the applier runs (the ingest commits' summaries); 'pass': as if the commits had none
    (its own pass over the events, as for events landed by an older rpl_sql)."""
    job = _module("rpl_sql.pipeline.applier.job")
    real = getattr(job, "summarized", None)
    if how == "summaries" or real is None:
        yield
        return
    job.summarized = lambda *a, **k: _module("rpl_sql.pipeline.applier.landed").Landed((), False)
    try:
        yield
    finally:
        job.summarized = real


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1M events, rule sets 1/100/1000")
    p.add_argument("--events", type=int, help="events in total (default 10M, 1M with --quick)")
    p.add_argument("--rules", help="comma-separated rules per channel (default 1,100,1000,10000)")
    p.add_argument("--data", default=os.path.join(ROOT, "bench", "data"), help="where the data goes")
    p.add_argument("--decide-ab", type=int, default=0, metavar="N",
                   help="after each rule set, N interleaved runs of channel ch1's shape query: public functions "
                        "vs decision codes")
    p.add_argument("--ab", metavar="GIT_REF", help="only whole applies of GIT_REF and of this checkout, "
                   "alternating in fresh processes")
    p.add_argument("--rounds", type=int, default=2, help="--ab: rounds (each runs both sides once)")
    p.add_argument("--ab-child", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("--alternate", type=int, default=0, metavar="N",
                   help="only pyarrow's copy and the arrow engine's apply per rule set, in turn, N rounds")
    p.add_argument("--split", type=int, default=0, metavar="N",
                   help="only the arrow engine's two halves (deciding; writing alone) beside pyarrow's copy, N rounds")
    args = p.parse_args(argv)
    n = args.events or (1_000_000 if args.quick else 10_000_000)
    rule_sets = [int(x) for x in (args.rules or ("1,100,1000" if args.quick else "1,100,1000,10000")).split(",")]

    from rpl_sql import Session

    apply = _module("rpl_sql.pipeline.applier", "rpl_sql.apply").apply
    deltaread = _module("rpl_sql.spark.deltaread", "rpl_sql.deltaread")
    read_delta, snapshot = deltaread.read_delta, deltaread.snapshot

    wh = os.path.join(args.data, f"apply_wh_ingested_{n}")  # (apply_wh_<n>: the data before commit summaries)
    fresh = not os.path.exists(events_path(wh))
    if fresh:
        shutil.rmtree(wh, ignore_errors=True)
        print(f"generating {n:,} events under {wh} ...", flush=True)
        gen = generate(wh, n)
        print(f"  generated and written with delta-rs in {gen:.1f}s", flush=True)
    s = Session(wh)
    if not all(s.state.channel(c) is not None and s.state.channel(c).configured for c in CHANNELS):
        s.execute(";".join(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='src{i}' FOR CHANNEL '{c}'"
                           for i, c in enumerate(CHANNELS)))
    snap = snapshot(events_path(wh))
    print(f"events: {sum(f.num_records or 0 for f in snap.files):,} in {len(snap.files)} files "
          f"({sum(f.size for f in snap.files) / 2**20:,.0f} MiB), 3 channels, {N_DB} dbs x {N_TABLE} tables each")
    if args.ab_child:
        ab_child(wh, rule_sets[0])
        return 0
    if args.ab:
        ab_runs(args.ab, n, args.data, rule_sets, args.rounds)
        return 0
    if args.alternate:
        alternate_runs(wh, rule_sets, args.alternate)
        return 0
    if args.split:
        for r in rule_sets:
            split_runs(wh, r, args.split)
        return 0

    spark, phases = measured_session("bench_apply")
    ev = events_path(wh)

    def noop(df):
        df.write.format("noop").mode("overwrite").save()

    copy_dir = os.path.join(args.data, "copy_tmp")

    def copy():
        shutil.rmtree(copy_dir, ignore_errors=True)
        read_delta(spark, ev, engine="delta-rs").write.parquet(copy_dir)
        shutil.rmtree(copy_dir, ignore_errors=True)

    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    noop(spark.read.parquet(ev))  # warm-up: JIT, page cache
    base = {
        "Parquet scan, all columns (spark.read.parquet)": timed(lambda: noop(spark.read.parquet(ev)), 2),
        "read_delta scan, all columns (delta-rs files)":
            timed(lambda: noop(read_delta(spark, ev, engine="delta-rs")), 2),
        "Parquet count(*)": timed(lambda: spark.read.parquet(ev).count(), 2),
        "read_delta count(*)": timed(lambda: read_delta(spark, ev, engine="delta-rs").count(), 2),
        "copy: read_delta -> Parquet files": timed(copy, 2),
        "copy: pyarrow read -> Parquet files, 2 threads": timed(lambda: arrow_copy(ev, copy_dir), 2),
    }
    t_rd, c_rd = base["read_delta scan, all columns (delta-rs files)"][:2]
    t_copy, c_copy = base["copy: read_delta -> Parquet files"][:2]
    t_acopy, c_acopy = base["copy: pyarrow read -> Parquet files, 2 threads"][:2]
    print()
    print(f"{'baseline (best of 2)':<50} {'wall s':>7} {'CPU s':>7} {'M ev/s':>7}")
    for name, (w, c, _) in base.items():
        print(f"{name:<50} {w:7.1f} {c:7.1f} {n / w / 1e6:7.2f}")
    print(flush=True)

    # warm-up: the session's first apply pays JIT and class loading (the baselines above are warm too)
    configure(wh, rule_sets[0])
    t_warm = timed(lambda: apply(spark, wh, verify="auto"))[0]
    print(f"warm-up apply ({rule_sets[0]} rules/channel, not counted): {t_warm:.1f}s", flush=True)
    results = []
    for r, engine, how in [(r, e, how) for r in rule_sets
                           for e, how in (("arrow", "summaries"), ("spark", "summaries"), ("arrow", "pass"))]:
        t_cfg = configure(wh, r)
        phases.by_phase.clear()
        with _deciding_by(how):
            t_apply, c_apply, report = timed(lambda: apply(spark, wh, verify="auto", engine=engine))
        applied = sum(c.applied for c in report.channels)
        ph = dict(phases.by_phase)
        # the copies again, right after: this shared machine's speed drifts by a fifth between minutes
        t_beside = timed(copy if engine == "spark" else lambda: arrow_copy(ev, copy_dir))[0]
        results.append((r, engine, how, t_cfg, t_apply, c_apply, report.events, applied, ph, t_beside))
        print(f"rules/channel={r:>6} ({engine}, {how}): apply {t_apply:6.1f}s wall, {c_apply:6.1f}s CPU "
              f"({report.events / t_apply / 1e6:.2f} M ev/s, {applied / max(report.events, 1):.0%} applied) = "
              f"{t_apply / t_rd:.2f}x scan, {t_apply / t_copy:.2f}x Spark's copy, {t_apply / t_acopy:.2f}x "
              f"pyarrow's (CPU {c_apply / c_copy:.2f}x, {c_apply / c_acopy:.2f}x), {t_apply / t_beside:.2f}x "
              f"{'Spark' if engine == 'spark' else 'pyarrow'}'s copy right after it ({t_beside:.1f}s)"
              f"  [configure {t_cfg:.1f}s; " +
              ", ".join(f"{k} {v:.1f}s" for k, v in ph.items() if v >= 0.05) + "]", flush=True)
        if args.decide_ab:
            ab = decide_side_by_side(spark, wh, "ch1", args.decide_ab)
            print(f"  ch1's shape query, median of {args.decide_ab}: " + "; ".join(
                f"{k} {w:.2f}s wall / {c:.2f} CPU s" for k, (w, c) in ab.items()), flush=True)

    print()
    print(f"{'rules/ch':>8} {'engine':>6} {'shapes by':>9} {'apply s':>8} {'CPU s':>7} {'M ev/s':>7} {'x scan':>7} "
          f"{'x Spark copy':>12} {'x pyarrow copy':>14} {'x its copy after':>16} {'CPU x Spark copy':>16} "
          f"{'CPU x pyarrow copy':>18} {'compile s':>9} {'shapes s':>9} {'decide s':>9} {'write s':>8} {'applied':>8}")
    for r, engine, how, t_cfg, t_apply, c_apply, events, applied, ph, t_beside in results:
        print(f"{r:>8} {engine:>6} {how:>9} {t_apply:8.1f} {c_apply:7.1f} {events / t_apply / 1e6:7.2f} "
              f"{t_apply / t_rd:7.2f} {t_apply / t_copy:12.2f} {t_apply / t_acopy:14.2f} {t_apply / t_beside:16.2f} "
              f"{c_apply / c_copy:16.2f} {c_apply / c_acopy:18.2f} "
              f"{ph.get('compile + register functions', 0.0):9.1f} "
              f"{ph.get('shapes + verdicts + gtids', 0.0) + ph.get('shapes + gtids', 0.0):9.1f} "
              f"{ph.get('hits', 0.0) + ph.get('decide', 0.0):9.1f} {ph.get('write', 0.0):8.1f} "
              f"{applied / max(events, 1):8.0%}")
    print(f"(scan = read_delta all-column scan {t_rd:.1f}s / {c_rd:.1f} CPU s; Spark copy = read_delta -> Parquet "
          f"{t_copy:.1f}s / {c_copy:.1f} CPU s; pyarrow copy {t_acopy:.1f}s / {c_acopy:.1f} CPU s; best of 2 before "
          f"the applies; its copy after = the engine's copy, once, right after each apply; {os.cpu_count()} cores "
          f"shared, load average "
          f"{os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
