"""The Parquet writers this machine ships, on one channel's events: pyarrow's (the arrow engine's and its copy's)
against delta-rs' (arrow-rs), and reading, side by side in one run; polars' and DuckDB's writers too where they
are installed (not rpl_sql's dependencies: `pip install polars duckdb` to include them).

The applier's target is a ratio to pyarrow's copy; this says whether another writer at hand would move the
floor under it (docs/benchmarks.md, "The applier").

    python bench/bench_parquet_writers.py [--events 1000000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5, help="rounds; each runs every writer once, in turn")
    args = p.parse_args(argv)

    import pyarrow.parquet as pq
    from bench_apply import channel_events
    from deltalake import write_deltalake
    from deltalake.writer import WriterProperties

    from rpl_sql.pipeline.applier.arrow_write import DICTIONARY_READ, PARQUET_OPTIONS

    tmp = tempfile.mkdtemp(prefix="rpl_sql-bench-writers-")
    try:
        src = os.path.join(tmp, "events.parquet")
        pq.write_table(channel_events("ch1", args.events, 1), src, **PARQUET_OPTIONS)
        as_dict = pq.read_table(src, read_dictionary=DICTIONARY_READ)
        plain = pq.read_table(src)
        out = os.path.join(tmp, "out")
        props = WriterProperties(compression="SNAPPY")

        def into(fn):
            def run():
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                fn()
            return run
        cases = {
            "read, dictionary columns (the engine's read)": lambda: pq.read_table(src, read_dictionary=DICTIONARY_READ),
            "pyarrow write, dictionary columns (the engine's write)":
                into(lambda: pq.write_table(as_dict, os.path.join(out, "a.parquet"), **PARQUET_OPTIONS)),
            "pyarrow write, plain columns": into(lambda: pq.write_table(plain, os.path.join(out, "a.parquet"),
                                                                        **PARQUET_OPTIONS)),
            "delta-rs write_deltalake, dictionary columns":
                into(lambda: write_deltalake(out, as_dict, mode="overwrite", writer_properties=props)),
            "delta-rs write_deltalake, plain columns":
                into(lambda: write_deltalake(out, plain, mode="overwrite", writer_properties=props)),
        }
        cases.update(_other_writers(src, into, out))
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        for _ in range(args.repeat):
            for name, fn in cases.items():
                w0, c0 = time.perf_counter(), _cpu()
                fn()
                got[name].append((time.perf_counter() - w0, _cpu() - c0))
        base = statistics.median(w for w, _ in got["pyarrow write, dictionary columns (the engine's write)"])
        base_cpu = statistics.median(c for _, c in got["pyarrow write, dictionary columns (the engine's write)"])
        print(f"{args.events:,} events, {os.path.getsize(src) / 2**20:.0f} MiB of Parquet; medians of {args.repeat}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{'':<56} {'wall s':>7} {'CPU s':>7} {'x the engine write':>19} {'CPU x':>6}")
        for name, runs in got.items():
            w, c = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"{name:<56} {w:7.2f} {c:7.2f} {w / base:19.2f} {c / base_cpu:6.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _other_writers(src: str, into, out: str) -> dict:
    """polars' and DuckDB's writes of the same events (read into each one's own frame first), where installed.
    Each uses its own thread pool: the CPU column says what they would cost the applier's two busy threads."""
    cases = {}
    try:
        import polars as pl
    except ImportError:
        print("polars: not installed, left out")
    else:
        frame = pl.read_parquet(src)
        cases["polars write_parquet (snappy, no statistics)"] = into(lambda: frame.write_parquet(
            os.path.join(out, "a.parquet"), compression="snappy", statistics=False))
    try:
        import duckdb
    except ImportError:
        print("duckdb: not installed, left out")
    else:
        con = duckdb.connect()
        con.execute(f"CREATE TABLE ev AS SELECT * FROM read_parquet('{src}')")
        cases["duckdb COPY TO parquet (snappy)"] = into(lambda: con.execute(
            f"COPY ev TO '{os.path.join(out, 'a.parquet')}' (FORMAT parquet, COMPRESSION snappy)"))
    return cases


if __name__ == "__main__":
    sys.exit(main())
