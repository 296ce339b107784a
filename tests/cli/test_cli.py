"""The `rpl-sql` shell: -e/-f/-i, --start with options and an option file, the interactive prompt."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

CLI = [sys.executable, "-m", "rpl_sql.cli"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=stdin, timeout=120)


def test_start_with_option_file_init_script_and_file(tmp_path):
    wh = str(tmp_path / "wh")
    cnf = tmp_path / "my.cnf"
    cnf.write_text("[mysqld]\nreplicate-ignore-db=mysql\nreplicate-do-db=ghost:x\n")
    init = tmp_path / "init.sql"
    init.write_text("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'ch1';\n")
    script = tmp_path / "s.sql"
    script.write_text("-- a comment\nSHOW REPLICA STATUS FOR CHANNEL 'ch1'\\G\n")
    p = run("--warehouse", wh, "--start", "--defaults-file", str(cnf), "--replicate-do-table", "db1.t1",
            "-i", str(init), "-f", str(script))
    assert p.returncode == 0, p.stderr
    assert "[Warning] There are per-channel replication filter(s) configured for channel 'ghost' which does " \
           "not exist. The filter(s) have been discarded." in p.stderr
    assert "      Replicate_Ignore_DB: mysql" in p.stdout and "       Replicate_Do_Table: db1.t1" in p.stdout
    assert "Channel_Name: ch1" in p.stdout


def test_startup_options_need_start_and_bad_options_abort(tmp_path):
    wh = str(tmp_path / "wh")
    p = run("--warehouse", wh, "--replicate-do-db=x", "-e", "")
    assert p.returncode == 2 and "add --start" in p.stderr
    p = run("--warehouse", wh, "--start", "--replicate-rewrite-db=a b", "-e", "")
    assert p.returncode == 1
    assert p.stderr.splitlines() == ["[ERROR] Bad syntax in replicate-rewrite-db - missing '->'!", "[ERROR] Aborting"]


def test_the_service_turns_away_bad_sizes_before_it_starts(tmp_path):
    wh = tmp_path / "wh"
    for bad in (["--batch-size", "0"], ["--sql-thread-max-memory", "-1"], ["--net-timeout", "1"],
                ["--net-timeout", "nan"]):
        p = run("replica", "--warehouse", str(wh), *bad)
        assert p.returncode == 2 and "--batch-size wants 1 or more events" in p.stderr, p.stderr
    assert not wh.exists()


def test_every_command_that_starts_spark_turns_away_a_conf_without_a_value(tmp_path):
    wh = tmp_path / "wh"
    for cmd in (["-e", "SHOW REPLICA STATUS"], ["apply"], ["replica", "--master", "local[1]"]):
        p = run(*cmd, "--warehouse", str(wh), "--conf", "spark.sql.shuffle.partitions")
        assert p.returncode == 2, (cmd, p.stderr)
        assert "--conf wants KEY=VALUE, got 'spark.sql.shuffle.partitions'" in p.stderr, (cmd, p.stderr)
        assert p.stderr.startswith("usage: rpl-sql"), (cmd, p.stderr)
    assert not wh.exists()


def test_tables_warnings_and_piped_stdin(tmp_path):
    wh = str(tmp_path / "wh")
    p = run("--warehouse", wh, stdin="CHANGE MASTER TO MASTER_HOST='h';\n"
                                     "CHANGE REPLICATION FILTER REPLICATE_DO_DB=(`a,b`);\n"
                                     "SHOW REPLICATION FILTER HISTORY;\n")
    assert p.returncode == 0, p.stderr
    assert "Warning (Code 1287): 'CHANGE MASTER' is deprecated" in p.stderr
    assert "| CHANNEL_NAME |" in p.stdout and "| a,b " in p.stdout
    p = run("--warehouse", wh, stdin="CHANGE REPLICATION FILTER REPLICATE_DO_DB=('a');\n")
    assert p.returncode == 1 and p.stderr.startswith("ERROR 1064 (42000)")


class Terminal:
    """The shell on a pseudo-terminal, as a person runs it."""

    def __init__(self, args: list[str], env: dict | None = None):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child: the shell on the pseudo-terminal
            os.execve(sys.executable, [*CLI, *args], env or dict(os.environ))
        self.out = b""

    def read_until(self, marker: bytes, timeout: float = 60) -> None:
        end = time.time() + timeout
        while marker not in self.out and time.time() < end:
            if select.select([self.fd], [], [], 0.5)[0]:
                try:
                    self.out += os.read(self.fd, 65536)
                except OSError:
                    break
        assert marker in self.out, self.out.decode(errors="replace")

    def exit_code(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        return os.WEXITSTATUS(status)

    def kill(self) -> None:
        """The shell and what it started (its Spark JVM): the pseudo-terminal made it a session leader."""
        try:
            os.killpg(self.pid, 9)
        except ProcessLookupError:
            pass


def test_interactive_prompt_multiline_statements(tmp_path):
    """A real terminal: the prompt, a statement over three lines, an error that does not end the session."""
    term = Terminal(["--warehouse", str(tmp_path / "wh")])
    fd, read_until = term.fd, term.read_until
    try:
        read_until(b"rpl-sql> ")
        for line in ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h'", "  FOR CHANNEL", "'Ch1';"):
            os.write(fd, line.encode() + b"\r")
        read_until(b"Query OK")
        os.write(fd, b"CHANGE REPLICATION FILTER REPLICATE_DO_DB=(d) FOR CHANNEL 'nope';\r")
        read_until(b"ERROR 1794 (HY000)")
        os.write(fd, b"SHOW REPLICA STATUS\\G\r")
        read_until(b"Channel_Name: ch1")
        os.write(fd, b"quit\r")
        assert term.exit_code() == 0
        assert b"      -> " in term.out  # the continuation prompt
    finally:
        term.kill()


def test_help_lists_every_subcommand():
    from rpl_sql.cli.shell import SUBCOMMANDS

    p = run("--help")
    assert p.returncode == 0
    listed = [ln.split()[0] for ln in p.stdout.split("subcommands", 1)[1].splitlines()[1:] if ln.startswith("  ")]
    assert sorted(listed) == sorted(SUBCOMMANDS)


NO_INGEST = """
import sys
import importlib.util  # the install without the ingest extra
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in ("pymysql", "pymysqlreplication") \\
    else real(name, *a)
from rpl_sql.cli.shell import main
sys.exit(main(sys.argv[1:]))
"""


def test_pipeline_commands_without_the_ingest_extra_say_how_to_get_it(tmp_path):
    for command in ("replica", "snapshot", "ingest", "apply"):
        p = subprocess.run([sys.executable, "-c", NO_INGEST, command, "--warehouse", str(tmp_path / "wh")],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "pip install 'rpl_sql[ingest]'" in p.stderr and "Traceback" not in p.stderr


def test_scripts_as_the_mysql_client_reads_them(tmp_path):
    """A byte-order mark at the start is dropped; a NUL ends the read at once with the mysql client's error (so
    `-f /dev/zero` does not read forever), from a file and from a pipe; the Python API refuses a NUL too."""
    import rpl_sql
    from rpl_sql.errors import MySQLError

    wh = str(tmp_path / "wh")
    bom = tmp_path / "bom.sql"
    bom.write_bytes(b"\xef\xbb\xbfCHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c';\n")
    p = run("--warehouse", wh, "-f", str(bom))
    assert p.returncode == 0 and "Query OK" in p.stderr + p.stdout, p.stderr
    for args, stdin in ((("-f", "/dev/zero"), None), ((), "SHOW REPLICA STATUS;\0")):
        t0 = time.monotonic()
        p = run("--warehouse", wh, *args, stdin=stdin)
        assert p.returncode == 1 and p.stderr.startswith("ERROR: ASCII '\\0' appeared in the statement")
        assert time.monotonic() - t0 < 30
    with pytest.raises(MySQLError) as e:
        rpl_sql.connect(wh).execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`a\0b`) FOR CHANNEL 'c'")
    assert e.value.code == 1300



@pytest.mark.spark
def test_ctrl_c_during_a_spark_query_is_one_line_and_the_shell_goes_on(tmp_path):
    """A real terminal: Ctrl-C while Spark runs the first query (pyspark's own handler then called the JVM from
    inside the interrupted call: 40 lines of 'reentrant call' and Py4JNetworkError)."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYSPARK_PYTHON=sys.executable, RPL_SQL_DRIVER_MEMORY="1g")
    term = Terminal(["--warehouse", str(tmp_path / "wh"), "--master", "local[1]"], env)
    try:
        term.read_until(b"rpl-sql> ")
        os.write(term.fd, b"SELECT sum(hash(id)) FROM range(0, 100000000000, 1, 1);\r")
        logs = list(tmp_path.glob(f"rpl_sql-{os.getuid()}/spark-*.log"))
        end = time.time() + 180
        while time.time() < end and not any("Stage 0" in p.read_text(errors="replace") for p in logs):
            time.sleep(0.5)  # Spark works (its progress bar goes to the quiet log)
            logs = list(tmp_path.glob(f"rpl_sql-{os.getuid()}/spark-*.log"))
        os.write(term.fd, b"\x03")
        term.read_until(b"ERROR 1317 (70100): Query execution was interrupted", 120)
        os.write(term.fd, b"SELECT 6 * 7 AS answer;\r")
        term.read_until(b"| 42 ", 120)
        os.write(term.fd, b"quit\r")
        assert term.exit_code() == 0
        text = term.out.decode(errors="replace")
        assert "Traceback" not in text and "reentrant" not in text and "Py4J" not in text, text
    finally:
        term.kill()
