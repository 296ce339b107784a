"""`rpl-sql --export-sql` in the real `spark-sql` shell, and the `rpl_sql` data source behind its views.

Every shell runs in a temporary directory outside the checkout, with no PYTHONPATH: only PYSPARK_PYTHON, as the
script's header says. The editable-install scenario costs two spark-sql starts (~20-40 s each): one run checks
the views and functions against the Python API and the reference evaluator; after a filter change made with the
Python API, a second run of the same script shows the views live, the stale functions raising an error that
names both versions, and `source` of a fresh export giving the new verdicts. tests/spark/test_cluster.py runs the
script of a wheel installed in a new virtual environment (wheel_venv) on a standalone cluster.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.sparkjvm import spark_jvm_env

from rpl_sql import Session
from rpl_sql.compile.literals import sql_str
from rpl_sql.filters.evaluate import RowEvent, StatementEvent, TableRef, decide, rewrite_db

# Hostile names: quote, `;`, backslash, unicode (BMP and not), `$`, and `${...}` (CLI variable syntax).
SETUP = r"""
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h1' FOR CHANNEL 'ch1';
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h;2' FOR CHANNEL 'c;h\'2';
CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1, `we;ird'db`, `back\slash`, `ünï€😀`, `${env:HOME}`, `a$b`),
    REPLICATE_WILD_IGNORE_TABLE = ('db1.tmp%', 'db1.a\\_b%', 'we;ird\'db.x;%') FOR CHANNEL 'ch1';
CHANGE REPLICATION FILTER REPLICATE_IGNORE_TABLE = (`db;x`.`t'1`),
    REPLICATE_REWRITE_DB = ((`s;rc`, `dst'db`)) FOR CHANNEL 'c;h\'2';
CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (mysql);
"""
HOME = os.path.expanduser("~")
ROW_EVENTS = [
    ("ch1", "db1", "t1"), ("ch1", "db1", "tmp_x"), ("ch1", "db2", "t1"), ("ch1", "we;ird'db", "t"),
    ("ch1", "we;ird'db", "x;y"), ("ch1", "back\\slash", "t"), ("ch1", "ünï€😀", "t"), ("ch1", "${env:HOME}", "t"),
    ("ch1", HOME, "t"), ("ch1", "a$b", "t"), ("ch1", "db1", "a_bc"), ("ch1", "db1", "aXbc"),
    ("c;h'2", "db;x", "t'1"), ("c;h'2", "s;rc", "t'1"), ("c;h'2", "s;rc", "t"), ("c;h'2", "mysql", "t"),
    ("c;h'2", "x", "y"), ("ch1", "db2", "t5_x"), ("ch1", "db2", "t5x"), ("ch1", "db2", "a😀"), ("ch1", "db2", "t2"),
]
STATEMENT_EVENTS = [  # (channel, command, default_db, tables)
    ("ch1", "INSERT", "db1", (TableRef(None, "t1"),)),
    ("ch1", "UPDATE", "db2", (TableRef("db1", "tmp_1"),)),
    ("c;h'2", "INSERT", "s;rc", (TableRef(None, "t'1"),)),
    ("c;h'2", "CREATE_DB", "mysql", ()),
]


def script_literal(value: str) -> str:
    return sql_str(value, script_safe=True)


ROOT = Path(__file__).resolve().parents[2]


def spark_sql_binary() -> Path:
    import pyspark

    binary = Path(pyspark.__file__).parent / "bin" / "spark-sql"
    if not binary.exists():
        pytest.skip(f"pyspark ships no {binary}")
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("no Java runtime")
    return binary


def run_spark_sql(tmp: Path, init: Path, sections: list[tuple[str, str]], python: str = sys.executable,
                  ignore_errors: bool = False, master: str = "local[1]") -> tuple[dict[str, list[list[str]]], str]:
    """Run `spark-sql -S --master master -i init -e <queries>` in `tmp`, its workers on `python`; each section's
    rows (tab-split stdout lines) and stderr. With ignore_errors a failing section has no rows."""
    assert ROOT not in tmp.resolve().parents, "run the shell outside the checkout"
    script = "".join(f"SELECT '@@{name}';\n{query};\n" for name, query in sections)
    cmd = [str(spark_sql_binary()), "-S", "--master", master,
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.session.timeZone=UTC",
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.driver.memory=1g",
           "--conf", f"spark.sql.warehouse.dir={tmp / 'spark-warehouse'}",
           "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={tmp}",
           "--hiveconf", f"hive.cli.errors.ignore={str(ignore_errors).lower()}",
           "-i", str(init), "-e", script]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp, env=spark_jvm_env(tmp, python), capture_output=True, timeout=900)
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8", errors="replace")
    print(f"spark-sql run took {time.monotonic() - t0:.1f} s")
    assert proc.returncode == 0, f"spark-sql failed ({proc.returncode}):\n{err[-5000:]}"
    result: dict[str, list[list[str]]] = {}
    current = None
    for line in out.split("\n"):
        if line.startswith("@@"):
            current = result.setdefault(line[2:], [])
        elif line and current is not None:
            current.append(line.split("\t"))
    assert list(result) == [name for name, _ in sections], out
    return result, err


def export(rpl_sql: list[str], wh: Path, cwd: Path, name: str = "rpl_init.sql") -> tuple[Path, str]:
    """`rpl-sql --warehouse wh --export-sql` run in `cwd`, written to cwd/name; the file and its text."""
    exported = subprocess.run(rpl_sql + ["--warehouse", str(wh), "--export-sql"], cwd=cwd,
                              capture_output=True, timeout=120)
    assert exported.returncode == 0, exported.stderr.decode()
    init = cwd / name
    init.write_bytes(exported.stdout)
    return init, exported.stdout.decode("utf-8")


def cell(v: object) -> str:
    """A value as spark-sql prints it."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if hasattr(v, "strftime"):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(v)


def byte_order(rows):
    return sorted(rows, key=lambda r: tuple(str(v).encode("utf-8") for v in r))


def tables_sql(tables) -> str:
    items = [f"named_struct('db', {'CAST(NULL AS STRING)' if t.db is None else script_literal(t.db)}, "
             f"'name', {script_literal(t.name)}, 'updating', {str(t.updating).lower()})" for t in tables]
    return f"array({', '.join(items)})" if items else \
        "CAST(array() AS ARRAY<STRUCT<db: STRING, name: STRING, updating: BOOLEAN>>)"


FILTER_QUERY = ("SELECT CHANNEL_NAME, FILTER_NAME, FILTER_RULE, CONFIGURED_BY, "
                "date_format(ACTIVE_SINCE, 'yyyy-MM-dd HH:mm:ss.SSSSSS'), COUNTER "
                "FROM replication_applier_filters ORDER BY CHANNEL_NAME, FILTER_NAME")


def function_sections() -> list[tuple[str, str]]:
    rows = ", ".join(f"({i}, {script_literal(c)}, {script_literal(d)}, {script_literal(t)})"
                     for i, (c, d, t) in enumerate(ROW_EVENTS))
    stmts = " UNION ALL ".join(
        f"SELECT {i} AS i, should_apply_statement({script_literal(c)}, {script_literal(cmd)}, {script_literal(ddb)}, "
        f"{tables_sql(tables)}) AS a" for i, (c, cmd, ddb, tables) in enumerate(STATEMENT_EVENTS))
    return [
        ("rows", f"SELECT i, should_apply(c, d, t), rewrite_db(c, d), filter_decided_by(c, d, t) "
                 f"FROM VALUES {rows} AS e(i, c, d, t) ORDER BY i"),
        ("statements", f"SELECT i, a FROM ({stmts}) ORDER BY i"),
    ]


def expected_functions(state) -> tuple[list[list[str]], list[list[str]]]:
    """What the reference evaluator says for ROW_EVENTS and STATEMENT_EVENTS on `state`."""
    lctn, mode = state.lower_case_table_names, state.filter_mode
    rows = []
    for i, (c, d, t) in enumerate(ROW_EVENTS):
        filters = state.channel(c).filters
        decision = decide(filters, RowEvent(d, t), lctn, mode)
        rows.append([str(i), cell(decision.apply), cell(rewrite_db(filters, d, lctn)), cell(decision.decided_by)])
    stmts = [[str(i), cell(decide(state.channel(c).filters, StatementEvent(cmd, ddb, tables), lctn, mode).apply)]
             for i, (c, cmd, ddb, tables) in enumerate(STATEMENT_EVENTS)]
    return rows, stmts


REPLICA_QUERY = "SELECT id, note, amount FROM shop.orders ORDER BY id"


def replica_rows(wh: Path, rows, seq: int) -> None:
    """Insert `rows` into the replica table shop.orders of channel 'a' (as the replica service would)."""
    from rpl_sql.pipeline.replica.merge import Changes, apply_changes, create
    from rpl_sql.storage.replica_catalog import Catalog

    cols = [{"name": "id", "type": "int", "pk": True}, {"name": "note", "type": "text"},
            {"name": "amount", "type": "decimal", "precision": 9, "scale": 2}]
    cat = Catalog.load(str(wh), "a")
    entry = cat.table("shop", "orders") or cat.add_table("shop", "orders", cols)
    path = cat.data_path(entry)
    if seq == 1:
        create(path, cols, "a", 0)
    ch = Changes(cols)
    ch.add(seq, "write_rows", [{"before": None, "after": dict(zip(("id", "note", "amount"), r))} for r in rows])
    apply_changes(path, ch, "a", strict=True, table_label="shop.orders")
    cat.commit(seq)


@pytest.mark.spark
def test_exported_script_in_spark_sql(tmp_path):
    """Views equal the Python API's rows and are live; functions equal the reference, and once the filters
    change they raise an error until the session runs a fresh export."""
    wh = tmp_path / "wh"
    session = Session(str(wh))
    session.execute(SETUP)
    before = session.state

    replica_rows(wh, [(1, "ünï ✓", "1.50"), (2, None, None)], seq=1)
    # tables Spark cannot name as MySQL does: defined under names of their own, and the script goes on past them
    from tests.spark.test_spark_replica_names import TABLES, hostile_replica

    from rpl_sql.spark.replica_tables import replica_spark_names

    hostile = [t for t in TABLES if t[:2] != ("shop", "orders")]
    hostile_replica(str(wh), tables=hostile, seq=1)
    spark_name = {(n.db, n.name): n.quoted() for n, _ in replica_spark_names(str(wh))}
    hostile_query = " UNION ALL ".join(f"SELECT id FROM {spark_name[(db, t)]}" for db, t, _, _ in hostile)

    # the CLI entry point writes the script (no Spark involved)
    init, text = export([sys.executable, "-m", "rpl_sql.cli"], wh, tmp_path)
    assert "CREATE TABLE `shop`.`orders` (`id` int COMMENT 'rpl_sql replica table " in text
    assert "USING rpl_sql OPTIONS (path " + script_literal(str(wh.resolve())) in text
    assert "CREATE OR REPLACE TEMPORARY FUNCTION should_apply" in text
    assert text.splitlines()[3] == f"--   PYSPARK_PYTHON={sys.executable} spark-sql -i rpl_init.sql"
    code = [ln for ln in text.splitlines() if not ln.startswith("--")]
    assert all(ln.isascii() and "${" not in ln for ln in code), "statements must be ASCII, without ${"

    sections = [
        ("filters", FILTER_QUERY),
        ("global", "SELECT FILTER_NAME, FILTER_RULE, CONFIGURED_BY FROM replication_applier_global_filters"),
        ("channels", "SELECT * FROM rpl_sql_channels ORDER BY CHANNEL_NAME"),
        ("rule_hits", "SELECT CHANNEL_NAME, FILTER_NAME, FILTER_RULE, HITS FROM rpl_sql_filter_rule_hits"),
        ("history", "SELECT count(*), count(DISTINCT VERSION) FROM rpl_sql_filter_history"),
        ("describe", "DESCRIBE replication_applier_filters"),
        ("hostile", f"SELECT * FROM ({hostile_query}) ORDER BY id"),
        ("replica", REPLICA_QUERY), ("replica_types", "DESCRIBE shop.orders"),
    ] + function_sections()
    first, _ = run_spark_sql(tmp_path, init, sections)
    assert first["hostile"] == [[str(row[0])] for _, _, _, row in hostile]
    assert first["replica"] == [["1", "ünï ✓", "1.50"], ["2", "NULL", "NULL"]]
    assert [[c.strip() for c in r[:2]] for r in first["replica_types"]] == [
        ["id", "int"], ["note", "string"], ["amount", "decimal(9,2)"]]

    assert first["filters"] == byte_order([[cell(v) for v in r] for r in session.filters()])
    assert first["global"] == [[cell(v) for v in r[:3]] for r in session.global_filters()]
    from rpl_sql.server.performance_schema import channel_rows
    assert first["channels"] == byte_order([[cell(v) for v in r] for r in channel_rows(before)])
    from rpl_sql.server.performance_schema import rule_hit_rows
    assert byte_order(first["rule_hits"]) == byte_order([[cell(v) for v in r[:4]] for r in rule_hit_rows(before)])
    assert len(first["rule_hits"]) >= 3
    changes = session.store.filter_changes()
    assert first["history"] == [[str(len(changes)), str(len({c.version for c in changes}))]]
    assert [[c.strip() for c in r[:2]] for r in first["describe"]] == [  # DESCRIBE pads its columns
        ["CHANNEL_NAME", "string"], ["FILTER_NAME", "string"], ["FILTER_RULE", "string"],
        ["CONFIGURED_BY", "string"], ["ACTIVE_SINCE", "timestamp"], ["COUNTER", "bigint"]]
    rows, stmts = expected_functions(before)
    assert first["rows"] == rows
    assert first["statements"] == stmts
    assert ROW_EVENTS[8][1] == HOME and rows[8][1] == "false"  # `${env:HOME}` stayed literal

    # change the rules with the Python API; run the same (not re-exported) script again. The new rules are
    # many: the fresh export's row code is the JVM's Catalyst expression, which a Hive function from rpl_sql's
    # jar registers in the shell's session
    exported_version = session.store.version()
    many = ", ".join(f"'db2.t{i}\\_%'" for i in range(400))
    session.execute(f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db2), REPLICATE_WILD_IGNORE_TABLE = ({many}, "
                    f"'db1.tmp%', 'db2.t1', 'we;ird\\'db.x;%', '%.%😀') FOR CHANNEL 'ch1'")
    assert decide(session.state.channel("ch1").filters, RowEvent("db2", "t2")).apply
    assert not decide(session.state.channel("ch1").filters, RowEvent("db2", "t1")).apply
    fresh, fresh_text = export([sys.executable, "-m", "rpl_sql.cli"], wh, tmp_path, "fresh.sql")
    assert "AS 'rpl_sql.jvm.RowCodeHive' USING JAR" in fresh_text
    assert "SELECT rpl_sql__jinstall('rpl_sql__jrc rpl_sql__jrw rpl_sql__jsc', 'rpl_sql table rules 3|" in fresh_text
    assert re.search(r"FUNCTION should_apply\(.* THEN rpl_sql__jrc\(", fresh_text)
    replica_rows(wh, [(3, "new", "3.00")], seq=2)
    second, err = run_spark_sql(tmp_path, init, [("filters", FILTER_QUERY)] + function_sections()[:1] + [
        ("refresh", f"source {fresh}"), ("rows_after", function_sections()[0][1]), ("replica", REPLICA_QUERY),
        ("jvm", "DESCRIBE FUNCTION rpl_sql__jrc")], ignore_errors=True)
    assert ["Class: rpl_sql.jvm.RowCodeFunction"] in second["jvm"], second["jvm"]
    assert second["replica"] == [["1", "ünï ✓", "1.50"], ["2", "NULL", "NULL"], ["3", "new", "3.00"]]  # live
    assert second["filters"] == byte_order([[cell(v) for v in r] for r in session.filters()])
    assert ["ch1", "REPLICATE_DO_DB", "db2"] in [r[:3] for r in second["filters"]]  # live
    assert second["rows"] == []  # stale: an error instead of the old verdicts
    message = re.search(r"\[USER_RAISED_EXCEPTION\] (rpl_sql: [^\n]*?) SQLSTATE", err).group(1)
    assert message == (f"rpl_sql: these functions were compiled from version {exported_version} of warehouse "
                       f"{wh.resolve()}, whose filters have changed since (now version {session.store.version()}). "
                       f"Refresh them: rpl-sql --warehouse {wh.resolve()} --export-sql > rpl_init.sql, "
                       "then in this session: source rpl_init.sql;")
    assert second["rows_after"] == expected_functions(session.state)[0] != rows


def wheel_venv(tmp_path: Path) -> Path:
    """A new virtual environment with a wheel of this checkout installed (its dependencies, pyspark's ~500 MB
    among them, from this environment, after the venv's own packages); its directory."""
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("rpl_sql-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                              str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    # a path in a .pth file is added as is, so this environment's editable rpl_sql stays out
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    import pyspark
    Path(site, "deps.pth").write_text(str(Path(pyspark.__file__).parent.parent) + "\n")
    where = subprocess.run([python, "-c", "import rpl_sql, pyspark_rpl_sql; print(rpl_sql.__file__); "
                            "print(pyspark_rpl_sql.__file__)"], capture_output=True, text=True, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert all(Path(p).is_relative_to(venv) for p in where.stdout.split()), where.stdout
    return venv


def test_export_header_and_stale_check(tmp_path):
    """The header's first lines say what the shell needs; the functions carry the fingerprint check."""
    session = Session(str(tmp_path / "wh"))
    session.execute(SETUP)
    from rpl_sql.spark.export import STATE_VIEW, export_sql

    text = export_sql(session)
    head = text.splitlines()[:5]
    assert head[1].startswith(f"-- NEEDS: Spark 4.0+ whose Python workers run {sys.executable}")
    assert head[3] == f"--   PYSPARK_PYTHON={sys.executable} spark-sql -i rpl_init.sql"
    fingerprint = session.state.filters_fingerprint()
    public = [ln for ln in text.splitlines() if ln.startswith("CREATE OR REPLACE TEMPORARY FUNCTION ")
              and not ln.startswith("CREATE OR REPLACE TEMPORARY FUNCTION rpl_sql__")]
    assert len(public) == 5
    assert all(f"(SELECT FILTERS_FINGERPRINT FROM {STATE_VIEW}) <=> '{fingerprint}'" in ln for ln in public)
    assert f"USING rpl_sql OPTIONS (path {script_literal(str((tmp_path / 'wh').resolve()))}, table 'state_version')" \
        in text
    assert "raise_error" not in export_sql(session, stale_check=False)




# ---------------------------------------------------------------- the data source, in-process


@pytest.mark.spark
def test_data_source_reads_live_state(spark, warehouse):
    from pyspark.sql.types import StructType

    from rpl_sql.server import performance_schema as pfs
    from rpl_sql.session import HISTORY_COLUMNS
    from rpl_sql.server.performance_schema import CHANNELS_SCHEMA, channel_rows
    from rpl_sql.spark.datasource import HISTORY_SCHEMA, DefaultSource

    spark.dataSource.register(DefaultSource)  # explicit: discovery depends on how rpl_sql was installed
    session = Session(warehouse)
    session.execute(SETUP)

    def read(table):
        return spark.read.format("rpl_sql").option("table", table).load(os.path.abspath(warehouse))

    def local(dt):  # classic PySpark collects TIMESTAMP as naive local time
        return dt.astimezone().replace(tzinfo=None)

    df = read("filters")
    assert df.schema == StructType.fromDDL(pfs.FILTERS_SCHEMA)
    assert sorted(tuple(r) for r in df.collect()) == sorted(
        (*r[:4], local(r[4]), r[5]) for r in session.filters())
    assert read("global_filters").schema == StructType.fromDDL(pfs.GLOBAL_FILTERS_SCHEMA)
    assert [tuple(r) for r in read("global_filters").collect()] == [
        (*r[:3], local(r[3])) for r in session.global_filters()]
    assert read("channels").schema == StructType.fromDDL(CHANNELS_SCHEMA)
    assert sorted(tuple(r) for r in read("channels").collect()) == sorted(channel_rows(session.state))
    history = read("filter_history")
    assert history.schema == StructType.fromDDL(HISTORY_SCHEMA)
    assert tuple(history.columns) == HISTORY_COLUMNS
    assert history.count() == len(session.store.filter_changes())

    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW ds_filters USING rpl_sql "
              f"OPTIONS (path {script_literal(os.path.abspath(warehouse))}, table 'filters')")
    session.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db9) FOR CHANNEL 'ch1'")
    assert spark.sql("SELECT FILTER_RULE FROM ds_filters WHERE CHANNEL_NAME = 'ch1' "
                     "AND FILTER_NAME = 'REPLICATE_DO_DB'").collect()[0][0] == "db9"
    with pytest.raises(Exception, match="table='nope'"):
        read("nope").collect()


# ---------------------------------------------------------------- literal hardening

HOSTILE = ["a;b", "it's", 'dq"x', "back\\slash", "trail\\", "${env:HOME}", "$", "${system:java.version}",
           "ünï€😀", "line\nbreak\n  -- not a comment; x", "tab\tx\r", "\x01ctl", "\\u0041 stays", "%_\\%\\_"]


def naive_literal(value: str) -> str:
    """How a generator typically writes a Spark SQL literal: only backslash and quote escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"






