"""Start a local SparkSession the way rpl_sql needs it (no Delta JARs required)."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator, Mapping

from rpl_sql.compile import MAP_HASH_MIN
from rpl_sql.stderr import redirected

HUGE_METHODS_FLAG = "-XX:-DontCompileHugeMethods"
THROUGHPUT_GC_FLAG = "-XX:+UseParallelGC"
_GC_CHOICE = re.compile(r"-XX:\+Use\w*GC\b")


def java_options(opts: str = "") -> str:
    """The driver JVM options local_spark starts with: `opts`, then HUGE_METHODS_FLAG, then
    THROUGHPUT_GC_FLAG unless `opts` already chooses a collector (-XX:+Use...GC).

    >>> java_options("-XX:+UseG1GC")
    '-XX:+UseG1GC -XX:-DontCompileHugeMethods'
    """
    flags = [opts.strip(), HUGE_METHODS_FLAG] + ([] if _GC_CHOICE.search(opts) else [THROUGHPUT_GC_FLAG])
    return " ".join(f for f in flags if f)


def spark_log_path() -> str:
    """Where a quiet session's JVM writes its console output (log4j, warnings, progress bars)."""
    return os.path.join(tempfile.gettempdir(), f"rpl_sql-spark-{os.getpid()}.log")


@contextlib.contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """File descriptor 2 sent to `path` for the block: a JVM started inside keeps it for life."""
    if path is None:
        yield
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with redirected(fd):
            yield
    finally:
        os.close(fd)


def local_spark(app_name: str = "rpl_sql", master: str = "local[2]", verbose: bool = False, **conf: str):
    """A local SparkSession whose Python workers run this interpreter (so they can import rpl_sql).

    Its JVM JIT-compiles methods over 8,000 bytes of bytecode (HUGE_METHODS_FLAG): whole-stage codegen
    makes such methods for compiled filter functions, which HotSpot otherwise leaves to its interpreter.
    It uses the parallel (throughput) collector unless `spark.driver.extraJavaOptions` names one: inside
    a method that big the JIT cannot prove the decoded strings stay local, so a filter allocates about
    165 bytes per row that a bare scan does not, and under G1 that allocation cost `should_apply`
    about a fifth of its time (bench/bench_should_apply.py --java-opts).

    Quiet unless `verbose`: the JVM's console output (log4j, the JDK's incubator warning, progress bars)
    goes to spark_log_path(), not the terminal; errors still reach Python as exceptions.

    >>> spark = local_spark()  # doctest: +SKIP
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
               .config("spark.driver.memory", os.environ.get("RPL_SQL_DRIVER_MEMORY", "4g")))
    opts = java_options(conf.pop("spark.driver.extraJavaOptions", ""))
    builder = builder.config("spark.driver.extraJavaOptions", opts)
    for k, v in conf.items():
        builder = builder.config(k, v)
    from pyspark import SparkContext

    starts_jvm = SparkContext._gateway is None
    with _stderr_to(None if verbose or not starts_jvm else spark_log_path()):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session


def jit_huge_methods(spark) -> bool:
    """Whether the JVMs running this session's tasks JIT-compile huge methods (HUGE_METHODS_FLAG): the
    driver's own arguments in local mode, spark.executor.extraJavaOptions otherwise; False for Spark
    Connect, whose server is not visible from here."""
    try:
        sc = spark.sparkContext
        if sc.master.startswith("local"):
            args = sc._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
            return any(str(a) == HUGE_METHODS_FLAG for a in args)
        return HUGE_METHODS_FLAG in (sc.getConf().get("spark.executor.extraJavaOptions") or "").split()
    except Exception:  # Spark Connect: no SparkContext
        return False


MAP_LOOKUP_HASH_CONF = "spark.sql.optimizer.mapLookupHashThreshold"


def map_lookup_hash_min(spark) -> int | None:
    """The size from which this session looks up a constant map through a hash (Spark 4.2+), or None where
    Spark has no such lookup (maps would be scanned per row, so compile keeps IN lists)."""
    try:
        return int(spark.conf.get(MAP_LOOKUP_HASH_CONF))  # with a default argument, a registered default is hidden
    except Exception:  # an older Spark has no such key
        return None


def installed_map_lookup_hash_min() -> int | None:
    """map_lookup_hash_min for a session of the installed pyspark with default settings (no session at
    hand: `rpl-sql --export-sql` writes for the spark-sql shipped with it)."""
    try:
        from importlib.metadata import version

        major, minor = (int(x) for x in version("pyspark").split(".")[:2])
    except Exception:
        return None
    return MAP_HASH_MIN if (major, minor) >= (4, 2) else None


class WorkerPythonError(RuntimeError):
    """Spark's Python workers cannot import rpl_sql; the message says what to set."""


_WORKERS_CHECKED: set[int] = set()


def ensure_worker_python(spark) -> None:
    """Make the session's Python workers import rpl_sql (the views' data source runs there), or raise
    WorkerPythonError at once, instead of a ModuleNotFoundError on the first query.

    A session built the ordinary way (`SparkSession.builder.getOrCreate()` in a notebook) runs its workers
    with `python3` from PATH, seldom the kernel's interpreter. In local mode, unless the user chose one
    (PYSPARK_PYTHON, spark.pyspark.python), the workers are pointed at this interpreter, which has rpl_sql.
    Checked once per SparkContext with a one-task job; Spark Connect sessions are the server's business.
    """
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext here
        return
    if id(sc) in _WORKERS_CHECKED:
        return
    chosen = os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python")
    if sc.master.startswith("local") and not chosen:
        sc.pythonExec = sys.executable
    try:
        # a lambda travels by value: the worker needs nothing of rpl_sql to run it
        probe = lambda _: __import__("importlib.util").util.find_spec("rpl_sql") is not None  # noqa: E731
        ok = sc.parallelize([0], 1).map(probe).collect() == [True]
    except Exception as e:  # the interpreter is missing or has no pyspark
        ok, why = False, f" ({type(e).__name__})"
    else:
        why = ""
    if not ok:
        raise WorkerPythonError(
            f"Spark's Python workers ({sc.pythonExec}) cannot import rpl_sql{why}: set PYSPARK_PYTHON="
            f"{sys.executable} before Spark starts (or install rpl_sql for the workers' Python)")
    _WORKERS_CHECKED.add(id(sc))


@contextlib.contextmanager
def session_conf(spark, conf: Mapping[str, str]) -> Iterator[None]:
    """`conf` set on the session for the block, each key restored (or unset) after it, even on error."""
    saved = {k: spark.conf.get(k, None) for k in conf}
    try:
        for k, v in conf.items():
            spark.conf.set(k, v)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
