"""rpl_sql on a Spark standalone cluster, not only `local[*]`: a master and two one-core workers started from
pyspark's own `spark-class` on 127.0.0.1 (tests/support/cluster.py). `rpl-sql apply` finds the master in
spark-defaults.conf, the real spark-sql shell runs the exported functions and views with `--master`, and the
replica service's SQL thread decides on the cluster. The warehouse is a local path, which every worker of this
one-machine cluster sees, as a shared filesystem would give a real one."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from tests.support.cluster import StandaloneCluster
from tests.pipeline.test_apply import check_against_reference, land, mixed_log, setup_server
from tests.pipeline.replica.test_replica_service import (PHASE_1, caught_up, fresh_pair, servers,  # noqa: F401
                                                         start_service, status, stop_service)
from tests.pipeline.replica.test_replica import _normal, _ours
from tests.spark.test_spark_sql_cli import (FILTER_QUERY, ROW_EVENTS, SETUP, STATEMENT_EVENTS, byte_order, cell,
                                            export, expected_functions, function_sections, run_spark_sql,
                                            script_literal, wheel_venv)

from rpl_sql import Session
from rpl_sql.filters.evaluate import RowEvent, StatementEvent, TableRef, decide
from rpl_sql.spark.env import (DEFAULT_MASTER, HUGE_METHODS_FLAG, THROUGHPUT_GC_FLAG, session_settings,
                               spark_defaults)
from rpl_sql.storage.store import DeltaStore

def test_settings_come_from_the_command_then_spark_defaults_then_rpl_sql(tmp_path):
    """spark-submit's order: --master/--conf over spark-defaults.conf over the environment; rpl_sql's own
    defaults only fill the gaps, and the JIT/collector flags join whatever Java options were chosen."""
    f = tmp_path / "spark-defaults.conf"
    f.write_text("# comment\n! also a comment\n\nspark.master   spark://h:7077\nspark.driver.memory=2g\n"
                 "spark.sql.shuffle.partitions : 64\nspark.executor.extraJavaOptions -Dx=1 -Dy=a b\n"
                 "spark.a\\=b  v\n")
    d = spark_defaults(str(f))
    assert d == {"spark.master": "spark://h:7077", "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "64",
                 "spark.executor.extraJavaOptions": "-Dx=1 -Dy=a b", "spark.a=b": "v"}
    flags = f"{HUGE_METHODS_FLAG} {THROUGHPUT_GC_FLAG}"
    got = session_settings(None, {}, d, {})
    assert "spark.master" not in got and "spark.driver.memory" not in got  # spark-submit reads them itself
    assert "spark.sql.shuffle.partitions" not in got and got["spark.sql.session.timeZone"] == "UTC"
    assert got["spark.executor.extraJavaOptions"] == f"-Dx=1 -Dy=a b {flags}"
    assert got["spark.driver.extraJavaOptions"] == flags
    got = session_settings("local[1]", {"spark.sql.shuffle.partitions": "2"}, d, {"MASTER": "spark://other:1"})
    assert got["spark.master"] == "local[1]" and got["spark.sql.shuffle.partitions"] == "2"
    assert session_settings(None, {}, {}, {})["spark.master"] == DEFAULT_MASTER
    assert "spark.master" not in session_settings(None, {}, {}, {"MASTER": "spark://m:7077"})
    assert session_settings(None, {}, {}, {})["spark.driver.memory"] == "4g"
    assert "spark.driver.memory" not in session_settings(None, {}, {}, {"SPARK_DRIVER_MEMORY": "1g"})
    assert spark_defaults(str(tmp_path / "none.conf")) == {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = StandaloneCluster(tmp_path_factory.mktemp("cluster")).start()
    try:
        yield c
    finally:
        c.stop()


def _descendants(pid: int) -> list[str]:
    """The command lines of a process's descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                out.append(f.read().replace(b"\0", b" ").decode("utf-8", "replace"))
        except OSError:
            pass
    return out


def new_apps(cluster: StandaloneCluster, before: list[dict]) -> list[dict]:
    seen = {a["id"] for a in before}
    return [a for a in cluster.apps() if a["id"] not in seen]


@pytest.mark.spark
def test_apply_runs_on_the_master_that_spark_defaults_names(cluster, warehouse, tmp_path):
    """No --master: the one in $SPARK_CONF_DIR/spark-defaults.conf, as spark-submit reads it; both workers run
    executors, and the applied events, COUNTERs and per-rule hits equal the reference evaluator's."""
    setup_server(warehouse)
    log = mixed_log(seed=5)
    land(warehouse, log)
    before_state = DeltaStore(warehouse).load().state
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"# a user's defaults\nspark.master  {cluster.url}\n"
                                              "spark.executor.memory=700m\nspark.cores.max 2\n")
    env = dict(cluster.env, SPARK_CONF_DIR=str(conf), SPARK_DRIVER_MEMORY="1g")
    apps = cluster.apps()
    proc = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "apply", "--warehouse", warehouse, "-S",
                           "--batch-size", "0", "--conf", "spark.sql.shuffle.partitions=2"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""  # quiet on a cluster too
    check_against_reference(None, warehouse, log, before_state)  # read with delta-rs: no session in this module
    (app,) = new_apps(cluster, apps)
    assert app["name"] == "rpl_sql-apply" and app["memoryperexecutor"] == 700
    assert cluster.executor_workers(app["id"]) == [0, 1]


def many_wild_rules(session: Session) -> None:
    """Enough wild rules on ch1 that the row table code is the JVM function in every kind of session."""
    session.execute(SETUP)
    many = ", ".join(f"'db1.zz{i}\\_%'" for i in range(400))
    session.execute(f"CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE = ({many}, 'db1.tmp%', 'db1.a\\_b%', "
                    f"'we;ird\\'db.x;%') FOR CHANNEL 'ch1'")


def spread_query(rows: int = 300000) -> str:
    """The row events over `rows` rows in six partitions: counts per event of what the functions answer."""
    n = len(ROW_EVENTS)

    def pick(k: int) -> str:
        return f"element_at(array({', '.join(script_literal(e[k]) for e in ROW_EVENTS)}), CAST(id % {n} AS INT) + 1)"

    return (f"SELECT i, count(*), count_if(should_apply(c, d, t)), min(filter_decided_by(c, d, t)), "
            f"min(rewrite_db(c, d)) FROM (SELECT /*+ REPARTITION(6) */ id % {n} AS i, {pick(0)} AS c, "
            f"{pick(1)} AS d, {pick(2)} AS t FROM range({rows})) GROUP BY i ORDER BY i")


def spread_want(session: Session, rows: int = 300000) -> list[list[str]]:
    """spread_query's rows as the reference evaluator has them, as spark-sql prints cells."""
    n, want = len(ROW_EVENTS), []
    for i, (c, d, t) in enumerate(ROW_EVENTS):
        dec = decide(session.state.channel(c).filters, RowEvent(d, t))
        count = len(range(i, rows, n))
        want.append([str(i), str(count), str(count if dec.apply else 0), cell(dec.decided_by), cell(dec.database)])
    return want


# one-table statements; those of one command and flag differ in their table's db (ch1 ignores db1.tmp%)
ONE_TABLE_STATEMENTS = [e for e in STATEMENT_EVENTS if len(e[3]) == 1] + [
    ("ch1", "UPDATE", "db1", (TableRef("db2", "tmp_1"),)), ("ch1", "UPDATE", "db1", (TableRef(None, "tmp_1"),)),
    ("ch1", "update", "db2", (TableRef(None, "tmp_1"),))]


def statement_spread_query(rows: int = 300000) -> str:
    """The one-table statement events over `rows` rows in six partitions, every argument a column (the JVM looks
    them up by their command, table db and flag on each executor): counts per event of what
    should_apply_statement answers."""
    n = len(ONE_TABLE_STATEMENTS)

    def pick(values) -> str:
        items = ", ".join("CAST(NULL AS STRING)" if v is None else script_literal(v) for v in values)
        return f"element_at(array({items}), CAST(id % {n} AS INT) + 1)"

    e = ONE_TABLE_STATEMENTS
    return (f"SELECT i, count(*), count_if(should_apply_statement(c, cmd, d, array(named_struct('db', tdb, 'name', t, "
            f"'updating', true)))) FROM (SELECT /*+ REPARTITION(6) */ id % {n} AS i, {pick(x[0] for x in e)} AS c, "
            f"{pick(x[1] for x in e)} AS cmd, {pick(x[2] for x in e)} AS d, {pick(x[3][0].db for x in e)} AS tdb, "
            f"{pick(x[3][0].name for x in e)} AS t FROM range({rows})) GROUP BY i ORDER BY i")


def statement_spread_want(session: Session, rows: int = 300000) -> list[list[str]]:
    """statement_spread_query's rows as the reference evaluator has them."""
    n, want = len(ONE_TABLE_STATEMENTS), []
    for i, (c, cmd, ddb, tables) in enumerate(ONE_TABLE_STATEMENTS):
        dec = decide(session.state.channel(c).filters, StatementEvent(cmd, ddb, tables),
                     session.state.lower_case_table_names, session.state.filter_mode)
        count = len(range(i, rows, n))
        want.append([str(i), str(count), str(count if dec.apply else 0)])
    return want


@pytest.mark.spark
def test_a_wheel_in_spark_sql_on_the_cluster(cluster, tmp_path):
    """A wheel installed in a new virtual environment: its `rpl-sql` exports, and the real spark-sql shell runs
    the script with `--master spark://...`, from a directory outside the checkout, the executors' Python
    workers on that venv's Python: the views (Python data source) and the compiled functions (with the JVM table
    code) over rows spread across both executors equal the Python API and the reference evaluator."""
    venv = wheel_venv(tmp_path)
    python = str(venv / "bin" / "python")
    wh = tmp_path / "wh"
    session = Session(str(wh))
    many_wild_rules(session)  # the JVM row code, registered by a Hive function from the jar the wheel's rpl-sql builds
    init, text = export([str(venv / "bin" / "rpl-sql")], wh, tmp_path)
    assert f"PYSPARK_PYTHON={python} spark-sql" in text
    assert "AS 'rpl_sql.jvm.RowCodeHive' USING JAR" in text
    assert re.search(r"FUNCTION should_apply\(.* THEN rpl_sql__jrc\(", text)
    spread = spread_query()
    apps = cluster.apps()
    got, _ = run_spark_sql(tmp_path, init, [("filters", FILTER_QUERY), ("spread", spread),
                                            ("statement_spread", statement_spread_query())] + function_sections(),
                           python=python, master=cluster.url)
    assert got["filters"] == byte_order([[cell(v) for v in r] for r in session.filters()])
    assert [got["rows"], got["statements"]] == list(expected_functions(session.state))
    want = spread_want(session)
    assert got["spread"] == want
    assert got["statement_spread"] == statement_spread_want(session)
    assert {r[2] for r in got["statement_spread"]} > {"0"}  # some applied, some not
    (app,) = new_apps(cluster, apps)
    assert cluster.executor_workers(app["id"]) == [0, 1]


@pytest.mark.spark
def test_the_replica_service_decides_on_the_cluster(warehouse, servers, cluster):  # noqa: F811
    """`rpl-sql replica --master spark://...`: each channel's SQL thread applies with the Spark job on the
    cluster; its tables equal a MariaDB replica's (STOP/CHANGE/START between batches is the local service
    tests' part)."""
    src, oracle = servers
    session = fresh_pair(warehouse, src, oracle, "REPLICATE_REWRITE_DB = ((shop, crm)), REPLICATE_IGNORE_DB = (hr)",
                         {"replicate_rewrite_db": "shop->crm", "replicate_ignore_db": "hr"})
    apps = cluster.apps()
    proc = start_service(warehouse, "--master", cluster.url, "--conf", "spark.sql.shuffle.partitions=2",
                         "--conf", "spark.executor.memory=700m", env=dict(cluster.env, SPARK_DRIVER_MEMORY="1g"))
    try:
        src.execute(*PHASE_1)
        caught_up(warehouse, src, timeout=300)
        oracle.caught_up(src, "a")
        assert _normal(_ours(warehouse, ["a"])) == _normal(oracle.contents())
        assert any("org.apache.spark.deploy.SparkSubmit" in c for c in _descendants(proc.pid))
        assert status(session)["Replica_SQL_Running"] == "Yes"
        (app,) = new_apps(cluster, apps)
        assert app["name"] == "rpl_sql-replica" and cluster.executor_workers(app["id"]) == [0, 1]
        assert stop_service(proc, warehouse, timeout=120) == 0  # its application gives the cluster's cores back
        # a PySpark session on the cluster reads the replica table by name through Spark's own scan
        got = _python_session(cluster, warehouse, "SELECT id, note, amount, should_apply('a', 'crm', 'orders') "
                                                  "FROM crm.orders ORDER BY id", warehouse)
        assert "ReplicaFileIndex" in got["plan"]
        assert got["rows"] == [["1", "ünï", "1.50", "true"], ["20", "NULL", "NULL", "true"]]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# Runs in its own interpreter (the module has no session): argv = master URL, warehouse, query. Prints JSON.
PYTHON_SESSION = r'''
import json, sys
from pyspark.sql import SparkSession
import rpl_sql

url, wh, query = sys.argv[1:4]
spark = (SparkSession.builder.master(url).appName("rpl_sql-python").config("spark.ui.enabled", "false")
         .config("spark.executor.memory", "700m").config("spark.cores.max", "2")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
session = rpl_sql.register(spark, wh)
encoding = session.surface.functions.encoding
rows = [["NULL" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in r]
        for r in spark.sql(query).collect()]
plan = spark.sql(query)._jdf.queryExecution().executedPlan().toString()
print("RESULT " + json.dumps({"encoding": encoding, "rows": rows, "plan": plan}))
spark.stop()
'''


def _python_session(cluster, wh, query: str, cwd) -> dict:
    """PYTHON_SESSION's answer: the functions' encoding, the query's rows (as text) and its executed plan."""
    proc = subprocess.run([sys.executable, "-c", PYTHON_SESSION, cluster.url, str(wh), query],
                          env=dict(cluster.env, SPARK_DRIVER_MEMORY="1g", PYSPARK_PYTHON=sys.executable),
                          capture_output=True, text=True, timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):])


@pytest.mark.spark
def test_the_jvm_table_code_of_a_python_session_on_the_cluster(cluster, tmp_path):
    """A PySpark session on the cluster: `register` puts the JVM table code in as a Catalyst expression, the
    executors load it from the jar the driver added, and the functions' answers over rows spread across both
    executors equal the reference evaluator's."""
    wh = tmp_path / "wh"
    session = Session(str(wh))
    many_wild_rules(session)
    apps = cluster.apps()
    got = _python_session(cluster, wh, spread_query(), tmp_path)
    assert "a JVM function (expression" in got["encoding"]
    assert got["rows"] == spread_want(session)
    (app,) = new_apps(cluster, apps)
    assert cluster.executor_workers(app["id"]) == [0, 1]
