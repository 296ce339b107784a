"""Start a local SparkSession the way rpl_sql needs it (no Delta JARs required)."""
from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Iterator, Mapping

from rpl_sql.errors import RplSqlError
from rpl_sql.storage import scratch
from rpl_sql.compile import MAP_HASH_MIN
from rpl_sql.display.stderr import redirected

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
    return scratch.spark_log()


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


DEFAULT_MASTER = "local[2]"


def spark_defaults_path() -> str:
    """The spark-defaults.conf that spark-submit reads: $SPARK_CONF_DIR's, else $SPARK_HOME/conf's (SPARK_HOME
    defaulting to the installed pyspark)."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = os.environ.get("SPARK_HOME")
        if not home:
            from pyspark.find_spark_home import _find_spark_home

            home = _find_spark_home()
        conf_dir = os.path.join(home, "conf")
    return os.path.join(conf_dir, "spark-defaults.conf")


_PROPERTY = re.compile(r"^\s*((?:[^\s=:\\]|\\.)+)\s*[=:\s]\s*(.*)$")


def spark_defaults(path: str | None = None) -> dict[str, str]:
    """The settings in spark-defaults.conf (Java properties syntax, values trimmed as Spark trims them);
    empty when there is no such file."""
    try:
        with open(path or spark_defaults_path(), encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError:
        return {}
    out = {}
    for line in lines:
        if not line.strip() or line.lstrip().startswith(("#", "!")):
            continue
        m = _PROPERTY.match(line)
        if m:
            out[m.group(1).replace("\\", "")] = m.group(2).strip()
        elif line.strip():
            out[line.strip()] = ""
    return out


def session_settings(master: str | None, conf: Mapping[str, str], defaults: Mapping[str, str],
                     env: Mapping[str, str]) -> dict[str, str]:
    """What local_spark passes to spark-submit: `conf` and `master` as given, then rpl_sql's own defaults for
    what neither they, spark-defaults.conf (`defaults`) nor the SPARK_* environment set. The JIT and collector
    flags are added to the driver's and executors' Java options wherever they come from.

    >>> session_settings(None, {}, {"spark.master": "spark://h:7077"}, {})["spark.master"]
    'spark://h:7077'
    """
    out = dict(conf)
    if master:
        out["spark.master"] = master
    elif "spark.master" not in out and "spark.master" not in defaults and not env.get("MASTER"):
        out["spark.master"] = DEFAULT_MASTER
    given = {**defaults, **out}
    ours = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC",
            "spark.sql.python.filterPushdown.enabled": "true",
            "spark.sql.sources.partitionColumnTypeInference.enabled": "false"}
    if not env.get("SPARK_DRIVER_MEMORY"):
        ours["spark.driver.memory"] = env.get("RPL_SQL_DRIVER_MEMORY", "4g")
    for k, v in ours.items():
        if k not in given:
            out[k] = v
    for k in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        out[k] = java_options(given.get(k, ""))
    return out


def configured_master(master: str | None = None, conf: Mapping[str, str] | None = None) -> str:
    """The master local_spark(master, **conf) would start on (spark-defaults.conf and $MASTER included)."""
    defaults = spark_defaults()
    settings = session_settings(master, conf or {}, defaults, os.environ)
    return settings.get("spark.master") or defaults.get("spark.master") or os.environ["MASTER"]


def local_spark(app_name: str = "rpl_sql", master: str | None = None, verbose: bool = False, **conf: str):
    """A SparkSession whose Python workers run this interpreter (so they can import rpl_sql): on `master`, else
    the master that spark-defaults.conf or $MASTER names, else local[2]; settings as session_settings gives them.

    Its JVMs JIT-compile methods over 8,000 bytes of bytecode (HUGE_METHODS_FLAG): whole-stage codegen
    makes such methods for compiled filter functions, which HotSpot otherwise leaves to its interpreter.
    They use the parallel (throughput) collector unless the Java options name one: inside
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

    builder = SparkSession.builder.appName(app_name)
    defaults = spark_defaults()
    settings = session_settings(master, conf, defaults, os.environ)
    if "spark.local.dir" not in {**defaults, **settings} and not os.environ.get("SPARK_LOCAL_DIRS"):
        settings["spark.local.dir"] = scratch.spark_local_dir()  # so upkeep knows what this process left
    for k, v in settings.items():
        builder = builder.config(k, v)
    from pyspark import SparkContext

    starts_jvm = SparkContext._gateway is None
    with _stderr_to(None if verbose or not starts_jvm else spark_log_path()):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session


# loggers whose WARN lines are about rpl_sql's own doing: it replaces its functions and views at every refresh
# (`... replaced a previously registered function`) and creates the replica tables' databases if missing
QUIET_LOGGERS = ("org.apache.spark.sql.catalyst.analysis.SimpleFunctionRegistry",
                 "org.apache.spark.sql.execution.datasources.v2.CreateNamespaceExec")


def quiet_own_warnings(spark) -> None:
    """Only errors from QUIET_LOGGERS (classic sessions; Spark Connect's server logs are its own)."""
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.ERROR
        for name in QUIET_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # Spark Connect: no JVM here
        pass


def hide_console_progress(spark) -> None:
    """Stop Spark's console progress bar (it draws into a notebook cell's output); classic sessions only."""
    try:
        bar = spark.sparkContext._jsc.sc().progressBar()
        if bar.isDefined():
            bar.get().stop()
    except Exception:  # Spark Connect, or a Spark without the bar
        pass


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


class WorkerPythonError(RplSqlError, RuntimeError):
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
