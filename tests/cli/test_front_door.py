"""The front door: who owns a statement, misspelt replication statements, Spark errors in one line, no Spark
unless asked, SHOW WARNINGS, and the shell's own commands."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from rpl_sql import MySQLError, Session, SparkRequiredError, SparkSQLError
from rpl_sql.cli.shell import Shell
from rpl_sql.display.render import display_width, format_table
from rpl_sql.language.parser import ParseError, parse_statement
from rpl_sql.language.routing import route
from rpl_sql.language.statements import OtherSQL, ShowWarnings

TYPOS = [  # text, near, hint
    ("RESET REPLCA", "REPLCA", "RESET REPLICA"),
    ("RESET SLAV", "SLAV", "RESET SLAVE"),
    ("STPO REPLICA", "STPO REPLICA", "STOP REPLICA"),
    ("STRAT REPLICA FOR CHANNEL 'c'", "STRAT REPLICA FOR CHANNEL 'c'", "START REPLICA"),
    ("CHANG REPLICATION FILTER REPLICATE_DO_DB = (a)", "CHANG REPLICATION FILTER REPLICATE_DO_DB = (a)",
     "CHANGE REPLICATION"),
    ("SHOW REPLCA STATUS", "REPLCA STATUS", "SHOW REPLICA"),
    ("reste replica", "reste replica", "RESET REPLICA"),
]
SPARK = ["SELECT 1", "RESET", "RESET spark.sql.shuffle.partitions", "SET spark.sql.x = 1", "SHOW TABLES",
         "SHOW FUNCTIONS", "CREATE TEMPORARY VIEW v AS SELECT 1", "SELCT 1", "/*spark*/ RESET REPLCA",
         "/* SPARK */ STOP REPLI", "WITH x AS (SELECT 1) SELECT * FROM x", "(SELECT 1)", "DESCRIBE t"]


@pytest.mark.parametrize("text,near,hint", TYPOS)
def test_misspelt_replication_statement_is_1064_with_a_hint(text, near, hint):
    with pytest.raises(ParseError) as raised:
        parse_statement(text)
    e = raised.value
    assert (e.code, e.sqlstate, e.near) == (1064, "42000", near)
    assert e.hint.startswith(f"did you mean {hint} ") and "/*spark*/" in e.hint


@pytest.mark.parametrize("text", SPARK)
def test_spark_statements_go_to_spark(text):
    assert isinstance(parse_statement(text), OtherSQL)


@pytest.mark.parametrize("text", ["SET GLOBAL replicate_same_server_id = 1",
                                  "SET GLOBAL conn1.replicate_events_marked_for_skip='x'", "SHOW MASTER STATUS",
                                  "RESET MASTER", "SHOW BINARY LOGS"])
def test_replication_forms_rpl_sql_lacks_are_1235_not_spark(text):
    with pytest.raises(MySQLError) as raised:
        parse_statement(text)
    assert raised.value.code == 1235 and raised.value.hint


def test_grammar_owned_statements_never_reach_spark():
    for text in ["STOP REPLI", "START SLAVE UNTIL", "CHANGE x", "SHOW REPLICA", "SHOW SLAVE STATUS FOR",
                 "RESET REPLICA ALLL"]:
        assert route(text).owner == "grammar"
        with pytest.raises(ParseError):
            parse_statement(text)


def test_no_spark_unless_asked(warehouse):
    session = Session(warehouse)
    with pytest.raises(SparkRequiredError) as raised:
        session.execute("SELECT 1")
    assert isinstance(raised.value, SparkSQLError) and "spark=True" in raised.value.message
    assert session.store.version() is None


def test_show_warnings_lists_the_previous_statements_diagnostics(warehouse):
    session = Session(warehouse)
    (r,) = session.execute("CHANGE MASTER TO MASTER_HOST='h' FOR CHANNEL 'c'")
    (w,) = session.execute("SHOW WARNINGS")
    assert w.columns == ("Level", "Code", "Message") and w.rows and w.rows[0][:2] == ("Warning", 1287)
    assert session.execute("SHOW WARNINGS LIMIT 0")[0].rows == []
    with pytest.raises(MySQLError) as raised:
        session.execute("START REPLICA FOR CHANNEL 'nope'")
    assert session.execute("SHOW WARNINGS")[0].rows == [("Error", raised.value.code, raised.value.message)]
    assert isinstance(parse_statement("show warnings"), ShowWarnings)


# ---------------------------------------------------------------- a fuzz run at Session.execute

CORPUS = [
    "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1, `we;ird'db`) FOR CHANNEL 'c1'",
    "CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE = ('db%.t\\_%', '%.tmp%')",
    "CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((a, b)) FOR CHANNEL 'c2'",
    "CHANGE REPLICATION FILTER REPLICATE_DO_TABLE = (db1.t1, `a.b`.c), REPLICATE_IGNORE_TABLE = ()",
    "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h', SOURCE_PORT=3306 FOR CHANNEL 'c1'",
    "CHANGE MASTER TO MASTER_HOST='h2' FOR CHANNEL 'c2'",
    "START REPLICA FOR CHANNEL 'c1'", "STOP REPLICA IO_THREAD FOR CHANNEL 'c1'", "STOP SLAVE",
    "RESET REPLICA ALL FOR CHANNEL 'c2'", "RESET SLAVE", "SHOW REPLICA STATUS FOR CHANNEL 'c1'",
    "SHOW REPLICATION FILTER HISTORY LIMIT 2", "SHOW WARNINGS", "SET GLOBAL replicate_do_db='x'",
    "SELECT should_apply('c1', 'db1', 't')", "RESET spark.sql.shuffle.partitions", "SHOW TABLES",
]
FUZZ_RUNS = int(os.environ.get("RPL_SQL_FUZZ_RUNS", "25000"))  # RPL_SQL_FUZZ_RUNS=1000000 for a deeper run
HOSTILE = ["'", "\\", "`", ",", "%", "_", "ü", "日本", "😀", ";", "(", ")", "\n", "--", "/*", "*/", "/*!80000",
           "\udcff", "\x00", "FOR", "CHANNEL", "REPLICA", "'c1'", "=", " "]


def mutate(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(2, 4)):
        op = rng.choice((0, 0, 1, 1, 2, 3, 4, 5))
        i = rng.randrange(len(text) + 1)
        if op == 0:
            text = text[:i] + rng.choice(HOSTILE) + text[i:]
        elif op == 1 and text:
            text = text[:i] + text[i + rng.randint(1, 4):]
        elif op == 2:
            words = text.split(" ")
            j = rng.randrange(len(words))
            w = words[j]
            if len(w) > 2:
                k = rng.randrange(len(w) - 1)
                words[j] = w[:k] + w[k + 1] + w[k] + w[k + 2:]
            text = " ".join(words)
        elif op == 3:
            text = text[:i]
        elif op == 4:
            text = text[:i] + text[i:].swapcase()
        elif rng.random() < 0.05:  # a script: the statements before a failure commit, as in mysql
            text = text + ";" + rng.choice(CORPUS)
    return text


def test_fuzzed_statements_are_mysql_errors_or_need_spark_and_change_nothing(tmp_path):
    """FUZZ_RUNS mutated statements: each succeeds, or raises MySQLError or SparkRequiredError (Spark SQL on a session
    without Spark); a text the grammar owns never needs Spark; a failure leaves the warehouse as it was."""
    session = Session(str(tmp_path / "wh"))
    session.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c1'")
    log = tmp_path / "wh" / "rpl_state" / "_delta_log"
    version = session.store.version()
    rng = random.Random(20261125)
    outcomes = {"ok": 0, "mysql": 0, "spark": 0}
    for _ in range(FUZZ_RUNS):
        text = mutate(rng, rng.choice(CORPUS))
        done = []  # results of the statements that ran before a failure (they commit, as in mysql)
        try:
            for result in session.run(text):
                done.append(result)
            outcomes["ok"] += 1
        except MySQLError:
            outcomes["mysql"] += 1
        except SparkRequiredError:
            outcomes["spark"] += 1
            from rpl_sql.language.lexer import expand_executable_comments, split_statements
            from rpl_sql.language.parser import strip_vertical

            # the statement that needed Spark is one the grammar does not own
            owners = [route(expand_executable_comments(strip_vertical(s))).owner for s, _ in split_statements(text)]
            assert "spark" in owners, text
        # one commit per statement that changed the state, none for the one that failed
        committed = [r.version for r in done if r.version is not None]
        assert committed == list(range(version + 1, version + 1 + len(committed))), text
        version += len(committed)
        assert not (log / f"{version + 1:020d}.json").exists(), text
    print(outcomes)
    assert min(outcomes.values()) > FUZZ_RUNS // 100 and outcomes["mysql"] > FUZZ_RUNS // 2, outcomes


# ---------------------------------------------------------------- the shell


def test_empty_set_and_wide_characters(warehouse, capsys):
    shell = Shell(Session(warehouse), out=sys.stdout, err=sys.stderr)
    assert shell.run_script("SHOW REPLICA STATUS")
    assert capsys.readouterr().err.startswith("Empty set (")
    table = format_table(["x", "y"], [("日本語", 1), ("ab", 22)]).splitlines()
    assert len({display_width(line) for line in table}) == 1, table
    assert display_width("日本語") == 6 and display_width("e\u0301") == 1


def test_interactive_commands(warehouse, monkeypatch, capsys):
    """Ctrl-C and \\c drop the statement being typed, help is the shell's, \\q leaves at once."""
    lines = iter(["CHANGE REPLICATION SOURCE TO", KeyboardInterrupt, "help", "CHANGE REPLICATION SOURCE TO",
                  "SOURCE_HOST='h' FOR CHANNEL 'c' \\c", "SHOW WARNINGS;", "\\q", "never read;"])

    def fake_input(prompt=""):
        item = next(lines)
        if item is KeyboardInterrupt:
            raise KeyboardInterrupt
        return item

    monkeypatch.setattr("builtins.input", fake_input)
    monkeypatch.setenv("RPL_SQL_HISTFILE", os.devnull)
    session = Session(warehouse)
    Shell(session, out=sys.stdout, err=sys.stderr).interactive()
    out = capsys.readouterr()
    assert "^C" in out.out and "SHOW REPLICATION FILTER HISTORY" in out.out  # help text
    assert "Empty set" in out.err  # SHOW WARNINGS answered by the shell's session, no Spark
    assert session.store.version() is None  # nothing ran
    assert next(lines) == "never read;"


def test_cli_typo_is_an_error_without_a_jvm(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", str(tmp_path / "wh"), "-e",
                           "RESET REPLCA"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "ERROR 1064 (42000): You have an error in your SQL syntax; check the manual that corresponds to your "
        "MySQL server version for the right syntax to use near 'REPLCA' at line 1",
        "Hint: did you mean RESET REPLICA ...? (to send this text to Spark as it is, start it with /*spark*/)"]
    assert not list(tmp_path.glob("rpl_sql-*/spark-*.log"))


# ---------------------------------------------------------------- with Spark


@pytest.mark.spark
def test_spark_errors_are_one_line_and_scripts_validate_first(spark, warehouse, capfd):
    session = Session(warehouse, spark=spark)
    with pytest.raises(SparkSQLError) as raised:
        session.execute("SELECT * FROM no_such_table")
    e = raised.value
    assert e.error_class == "TABLE_OR_VIEW_NOT_FOUND" and e.sqlstate == "42P01" and "\n" not in e.message
    assert "Py4JJavaError" not in capfd.readouterr().err
    # a Spark syntax error anywhere in a mixed script runs nothing
    with pytest.raises(SparkSQLError) as raised:
        session.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c'; SELEC 1")
    assert raised.value.error_class == "PARSE_SYNTAX_ERROR"
    assert session.store.version() is None


@pytest.mark.spark
def test_the_shell_starts_spark_quietly(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               RPL_SQL_DRIVER_MEMORY="1g")
    proc = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", str(tmp_path / "wh"),
                           "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=2", "-e",
                           "SELECT '日本語' AS x; SET spark.sql.shuffle.partitions"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if "in set" not in ln] == []  # no JVM/log4j lines
    assert "| spark.sql.shuffle.partitions | 2     |" in proc.stdout
    (log,) = tmp_path.glob(f"rpl_sql-{os.getuid()}/spark-*.log")
    assert "log4j" in log.read_text(errors="replace")


CORE_ONLY = """
import sys
class NoSpark:  # the core install: pyspark and delta-spark absent
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j", "delta", "pyspark_rpl_sql"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoSpark())
from rpl_sql.cli.shell import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_core_manages_filters_without_pyspark(tmp_path):
    from importlib.metadata import requires

    core = [r for r in requires("rpl_sql") if "extra ==" not in r]
    assert not [r for r in core if r.startswith(("pyspark", "delta-spark"))], core
    wh = str(tmp_path / "wh")

    def run(*args):
        return subprocess.run([sys.executable, "-c", CORE_ONLY, "--warehouse", wh, *args], capture_output=True,
                              text=True, timeout=120)

    p = run("-e", "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c';"
                  "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a) FOR CHANNEL 'c'; SHOW REPLICA STATUS\\G")
    assert p.returncode == 0 and "Replicate_Do_DB: a" in p.stdout, p.stderr
    assert run("--export-sql").returncode == 0
    p = run("-e", "SELECT 1")
    assert p.returncode == 1 and p.stderr.splitlines() == [
        "ERROR (Spark): this statement is Spark SQL and pyspark is not installed: pip install 'rpl_sql[spark]'"]


# ---------------------------------------------------------------- MariaDB's SET GLOBAL replicate_* forms

SETS = [  # MariaDB's form, and the statement it is
    ("SET GLOBAL replicate_do_db = 'sales, hr'",
     "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (sales, hr) FOR CHANNEL ''"),
    ("SET @@global.replicate_ignore_table = \"db.t1,db.t2\"",
     "CHANGE REPLICATION FILTER REPLICATE_IGNORE_TABLE = (db.t1, db.t2) FOR CHANNEL ''"),
    ("SET GLOBAL c1.replicate_wild_do_table = 'db%.%'",
     "CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = ('db%.%') FOR CHANNEL 'c1'"),
    ("SET GLOBAL `C1`.replicate_rewrite_db = 'a->b, c -> d'",
     "CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((a, b), (c, d)) FOR CHANNEL 'c1'"),
    ("SET GLOBAL replicate_do_db = DEFAULT", "CHANGE REPLICATION FILTER REPLICATE_DO_DB = () FOR CHANNEL ''"),
    ("SET GLOBAL replicate_wild_ignore_table = ''",
     "CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE = () FOR CHANNEL ''"),
]
CHANNELS = "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL ''; " \
           "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c1'"


@pytest.mark.parametrize("mariadb_form,mysql", SETS)
def test_set_global_replicate_is_the_equivalent_statement(tmp_path, mariadb_form, mysql):
    a, b = Session(str(tmp_path / "a")), Session(str(tmp_path / "b"))
    for s in (a, b):
        s.execute(CHANNELS + "; CHANGE REPLICATION FILTER REPLICATE_DO_DB = (x) FOR CHANNEL ''")
    a.execute(mariadb_form)
    b.execute(mysql)
    assert [r[:4] for r in a.filters()] == [r[:4] for r in b.filters()]
    for s in (a, b):  # the threads-stopped rule, with the same error
        s.execute("START REPLICA FOR CHANNEL 'c1'; START REPLICA FOR CHANNEL ''")
    with pytest.raises(MySQLError) as ea:
        a.execute(mariadb_form)
    with pytest.raises(MySQLError) as eb:
        b.execute(mysql)
    assert (ea.value.code, ea.value.message) == (eb.value.code, eb.value.message) == (
        3085, ea.value.message)


def test_default_master_connection_and_show_variables(warehouse):
    s = Session(warehouse)
    s.execute(CHANNELS)
    s.execute("SET GLOBAL replicate_do_db = 'a,b'; SET @@default_master_connection = 'C1'; "
              "SET GLOBAL replicate_rewrite_db = 'x->y'; SET GLOBAL replicate_do_table = 'db.t'")
    rows = dict(s.execute("SHOW VARIABLES LIKE 'replicate%'")[0].rows)
    assert rows["replicate_rewrite_db"] == "x->y" and rows["replicate_do_table"] == "db.t"
    assert rows["replicate_do_db"] == ""  # the default connection is c1 now
    assert s.execute("SHOW GLOBAL VARIABLES LIKE 'default_master%'")[0].rows == [("default_master_connection", "c1")]
    s.execute("SET default_master_connection = ''")
    assert dict(s.execute("SHOW VARIABLES")[0].rows)["replicate_do_db"] == "a,b"
    for bad, code in [("SET replicate_do_db = 'a'", 1229), ("SET GLOBAL default_master_connection = 'c1'", 1228),
                      ("SET GLOBAL replicate_do_table = 'nodot'", 1231),
                      ("SET GLOBAL replicate_rewrite_db = 'a-b'", 1231), ("SET GLOBAL replicate_do_db", 1064)]:
        version = s.store.version()
        with pytest.raises(MySQLError) as raised:
            s.execute(bad)
        assert raised.value.code == code, bad
        assert s.store.version() == version


def test_set_global_replicate_before_a_master_is_configured_as_mariadb(warehouse):
    """Checked on MariaDB 10.11: the default connection keeps its rules before it has a master and applies them
    once it has one; a connection CHANGE MASTER never made is 1210."""
    s = Session(warehouse)
    s.execute("SET GLOBAL replicate_do_db = 'x'")
    assert dict(s.execute("SHOW VARIABLES LIKE 'replicate_do_db'")[0].rows) == {"replicate_do_db": "x"}
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h'")
    assert dict(s.execute("SHOW VARIABLES LIKE 'replicate_do_db'")[0].rows) == {"replicate_do_db": "x"}
    row = s.execute("SHOW REPLICA STATUS")[0]
    assert dict(zip(row.columns, row.rows[0]))["Replicate_Do_DB"] == "x"
    version = s.store.version()
    with pytest.raises(MySQLError) as e:
        s.execute("SET GLOBAL c9.replicate_do_db = 'y'")
    assert (e.value.code, e.value.message) == (1210, "Incorrect arguments to SET") and "'c9'" in e.value.hint
    assert s.store.version() == version


def test_1794_names_the_channel_in_its_hint(warehouse):
    s = Session(warehouse)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'shop'")
    with pytest.raises(MySQLError) as e:
        s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (d) FOR CHANNEL 'shpo'")
    assert e.value.code == 1794 and e.value.message.startswith("Replica is not configured")  # MySQL's message
    assert e.value.hint == ("channel 'shpo' does not exist: CHANGE REPLICATION SOURCE TO SOURCE_HOST='...' FOR "
                            "CHANNEL 'shpo' first")
