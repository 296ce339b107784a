"""A source password never lands where others can read it: not in the state table, its history, the event
tables, a log, the shell's history or any output; only in the warehouse's owner-only credentials file."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rpl_sql
from rpl_sql.storage import credentials
from rpl_sql.language.lexer import SECRET, redact
from rpl_sql.language.parser import parse

PASSWORD = "Zq9-s3cr3t!pw"
CLI = [sys.executable, "-m", "rpl_sql.cli"]


def files_holding(root: str | Path, secret: str) -> list[str]:
    """Every file under `root` (binary too: Parquet, checkpoints) whose bytes hold `secret`, but the
    credentials file."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.join(credentials.FOLDER, credentials.FILE) in path:
                continue
            with open(path, "rb") as f:
                if secret.encode() in f.read():
                    found.append(path)
    return found


@given(pw=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n"), min_size=1,
                  max_size=20),
       key=st.sampled_from(["SOURCE_PASSWORD", "master_password", "Source_Password"]),
       eq=st.sampled_from(["=", " = ", "= /* c */ "]), quote=st.sampled_from(["'", '"']))
@settings(max_examples=200, deadline=None)
def test_redact_hides_any_password_and_keeps_the_statement(pw, key, eq, quote):
    literal = quote + pw.replace("\\", "\\\\").replace(quote, quote * 2) + quote
    text = f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h', {key}{eq}{literal}, SOURCE_USER='u' FOR CHANNEL 'c'"
    shown = redact(text)
    assert shown == text.replace(f"{key}{eq}{literal}", f"{key}{eq}{SECRET}")
    assert parse(text)  # what was redacted was a real statement


def test_errors_about_a_password_do_not_show_it():
    from rpl_sql.errors import MySQLError

    with pytest.raises(MySQLError) as e:
        parse(f"CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD='{PASSWORD}\n'")
    assert e.value.code == 1525 and PASSWORD not in str(e.value)


def test_a_password_set_by_statement_lives_only_in_the_owner_only_file(tmp_path):
    wh = str(tmp_path / "wh")
    p = subprocess.run([*CLI, "--warehouse", wh, "-e",
                        f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h', SOURCE_USER='repl', "
                        f"SOURCE_PASSWORD='{PASSWORD}' FOR CHANNEL 'shop';\n"
                        "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (d) FOR CHANNEL 'shop';\n"
                        "SHOW REPLICA STATUS FOR CHANNEL 'shop'\\G\nSHOW REPLICATION FILTER HISTORY;"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert PASSWORD not in p.stdout + p.stderr
    assert files_holding(wh, PASSWORD) == []
    folder = Path(wh, credentials.FOLDER)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / credentials.FILE).stat().st_mode) == 0o600
    assert credentials.password(wh, "shop") == PASSWORD
    session = rpl_sql.connect(wh)
    assert "SOURCE_PASSWORD" not in dict(session.state.channel("shop").options)
    assert all(SECRET not in (c.metadata.get("statement") or "") or PASSWORD not in c.metadata["statement"]
               for c in session.store.history(10))
    assert any(SECRET in (c.metadata.get("statement") or "") for c in session.store.history(10))
    # a changed password replaces the stored one; RESET REPLICA ALL forgets it, as MySQL's does
    session.execute("CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD='other' FOR CHANNEL 'shop'")
    assert credentials.password(wh, "shop") == "other"
    session.execute("RESET REPLICA ALL FOR CHANNEL 'shop'")
    assert not credentials.has_password(wh, "shop")


def test_the_environment_overrides_the_stored_password(tmp_path, monkeypatch):
    wh = str(tmp_path / "wh")
    credentials.save(wh, {"shop-eu": "stored"})
    assert credentials.password(wh, "shop-eu") == "stored"
    monkeypatch.setenv("RPL_SQL_SOURCE_PASSWORD", "common")
    assert (credentials.password(wh, "shop-eu"), credentials.password(wh, "other")) == ("stored", "common")
    monkeypatch.setenv("RPL_SQL_SOURCE_PASSWORD_SHOP_EU", "mine")
    assert credentials.password(wh, "shop-eu") == "mine"


def test_the_shell_keeps_no_password_line_in_its_history(tmp_path, monkeypatch):
    readline = pytest.importorskip("readline")
    from rpl_sql.cli import shell

    hist = tmp_path / "hist"
    monkeypatch.setenv("RPL_SQL_HISTFILE", str(hist))
    readline.clear_history()
    lines = iter(["CHANGE REPLICATION SOURCE TO SOURCE_HOST='h',", f"  SOURCE_PASSWORD='{PASSWORD}';",
                  "SHOW REPLICA STATUS;"])

    def typed(prompt=""):  # as input() on a terminal: each line read joins readline's history
        try:
            line = next(lines)
        except StopIteration:
            raise EOFError from None
        readline.add_history(line)
        return line

    monkeypatch.setattr("builtins.input", typed)
    out = open(os.devnull, "w")
    shell.Shell(rpl_sql.connect(str(tmp_path / "wh")), out, out).interactive()
    text = hist.read_text()
    assert PASSWORD not in text and "SHOW REPLICA STATUS;" in text
    assert stat.S_IMODE(hist.stat().st_mode) == 0o600


def test_the_service_logs_in_with_the_stored_password_and_writes_it_nowhere(warehouse, mariadb):
    from tests.pipeline.replica.test_replica_service import caught_up, service_running, start_service, wait_for

    mariadb.reset()
    mariadb.execute("CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED BY '" + PASSWORD + "'",
                    "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'127.0.0.1'")
    session = rpl_sql.connect(warehouse)
    session.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT={mariadb.port}, "
                    f"SOURCE_USER='repl', SOURCE_PASSWORD='{PASSWORD}' FOR CHANNEL 'a'; START REPLICA")
    mariadb.execute("SET SESSION binlog_format=ROW", "CREATE DATABASE shop",
                    "CREATE TABLE shop.t (id INT PRIMARY KEY, v TEXT)", "INSERT INTO shop.t VALUES (1, 'x')")
    proc = start_service(warehouse)
    try:
        wait_for(lambda: service_running(warehouse), "the service")
        caught_up(warehouse, mariadb)
    finally:
        proc.terminate()
        proc.wait(60)
    assert files_holding(warehouse, PASSWORD) == []
    assert Path(warehouse, "service.log").exists()
    # the source's own CREATE USER landed with its password redacted, as MySQL writes it to its logs
    from deltalake import DeltaTable

    from rpl_sql.pipeline.events import events_path

    landed = DeltaTable(events_path(warehouse)).to_pyarrow_table(columns=["statement"])["statement"].to_pylist()
    assert any(s and s.startswith("CREATE USER") and f"IDENTIFIED BY {SECRET}" in s for s in landed), landed


def test_a_warehouse_on_object_storage_refuses_a_password_before_anything_is_committed():
    from rpl_sql.errors import MySQLError

    session = rpl_sql.Session("s3://nowhere-bucket/wh")
    with pytest.raises(MySQLError) as e:
        session.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h', SOURCE_PASSWORD='{PASSWORD}' FOR CHANNEL 'a'")
    assert e.value.code == 1210 and "RPL_SQL_SOURCE_PASSWORD_A" in e.value.hint and PASSWORD not in str(e.value)
