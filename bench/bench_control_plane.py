"""Latency of control-plane statements through the `rpl-sql` command, and proof that no JVM starts.

    .venv/bin/python bench/bench_control_plane.py [--runs 20]

Each run is a fresh `rpl-sql -e "..."` process against one warehouse, as a user would type it.
Measured: wall time and CPU time (user+sys of the child), median and p90. "No JVM" is shown two ways:
every run has no `java` on PATH and JAVA_HOME pointing nowhere (starting Spark would fail), and one
extra run under `python -X importtime` lists every imported module: pyspark must not be among them.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STATEMENTS = [
    "CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db{i}) FOR CHANNEL 'ch1'",
    "CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=('db{i}.tmp%'), REPLICATE_IGNORE_DB=(mysql)",
    "SHOW REPLICA STATUS FOR CHANNEL 'ch1'",
    "STOP REPLICA FOR CHANNEL 'ch1'",
]


def jvm_free_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not (Path(p) / "java").exists())
    env["JAVA_HOME"] = "/nonexistent-no-jvm"
    return env


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"failed: {cmd}\n{p.stderr}")
    return wall, cpu, p


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20, help="runs per statement")
    args = ap.parse_args()
    exe = shutil.which("rpl-sql", path=str(Path(sys.executable).parent)) or "rpl-sql"
    env = jvm_free_env()
    assert shutil.which("java", path=env["PATH"]) is None
    wh = tempfile.mkdtemp(prefix="rpl_bench_cp_")
    run([exe, "--warehouse", wh, "-S", "-e", "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'ch1'"], env)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    print(f"{'statement':<100} {'wall med':>9} {'wall p90':>9} {'cpu med':>8}")
    for template in STATEMENTS:
        walls, cpus = [], []
        for i in range(args.runs):
            w, c, _ = run([exe, "--warehouse", wh, "-S", "-e", template.format(i=i)], env)
            walls.append(w)
            cpus.append(c)
        print(f"{template[:100]:<100} {statistics.median(walls):>8.3f}s {pct(walls, 0.9):>8.3f}s "
              f"{statistics.median(cpus):>7.3f}s")
    _, _, p = run([sys.executable, "-X", "importtime", "-m", "rpl_sql.cli", "--warehouse", wh, "-S", "-e",
                   STATEMENTS[0].format(i=0)], env)
    modules = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    jvm = sorted(m for m in modules if m.split(".")[0] in ("pyspark", "py4j"))
    print(f"no java on PATH, JAVA_HOME={env['JAVA_HOME']}: all runs succeeded")
    print(f"modules imported by one run: {len(modules)}; pyspark/py4j among them: {jvm or 'none'}")
    heavy = sorted({m.split(".")[0] for m in modules} & {"pyarrow", "numpy", "pandas", "sqlglot"})
    print(f"pyarrow/numpy/pandas/sqlglot among them: {heavy or 'none'} (the state is read and written with "
          "deltalake's arro3)")
    shutil.rmtree(wh, ignore_errors=True)


if __name__ == "__main__":
    main()
