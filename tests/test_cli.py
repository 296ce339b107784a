"""The `rpl-sql` shell: -e/-f/-i, --start with options and an option file, the interactive prompt."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

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
    for bad in (["--batch-size", "0"], ["--sql-thread-max-memory", "-1"]):
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


def test_interactive_prompt_multiline_statements(tmp_path):
    """A real terminal: the prompt, a statement over three lines, an error that does not end the session."""
    wh = str(tmp_path / "wh")
    pid, fd = pty.fork()
    if pid == 0:  # child: the shell on the pseudo-terminal
        os.execv(sys.executable, [*CLI, "--warehouse", wh])
    out = b""

    def read_until(marker: bytes, timeout: float = 60) -> None:
        nonlocal out
        end = time.time() + timeout
        while marker not in out and time.time() < end:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    break
        assert marker in out, out.decode(errors="replace")

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
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert b"      -> " in out  # the continuation prompt
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
