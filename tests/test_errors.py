"""Bad input gets MySQL's error and leaves the Delta state byte-for-byte unchanged."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rpl_sql import MySQLError, Session


def tree_digest(root: str) -> str:
    """A hash of every file (path and bytes) under the state table: 'unchanged' means byte for byte."""
    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            p = Path(dirpath, f)
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


SETUP = """
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h1' FOR CHANNEL 'ch1';
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h2' FOR CHANNEL 'ch2';
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h3' FOR CHANNEL 'group_replication_applier';
CHANGE REPLICATION SOURCE TO SOURCE_PORT=3306 FOR CHANNEL 'unconf';
CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1), REPLICATE_WILD_IGNORE_TABLE=('db1.tmp%') FOR CHANNEL 'ch1';
CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB=(mysql);
START REPLICA SQL_THREAD FOR CHANNEL 'ch2';
"""

LONG = "c" * 65

BAD = [
    # (statement, code, message fragment)
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DATABASE=(db1)", 1064, "near 'REPLICATE_DO_DATABASE=(db1)' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_TABLE=(t1)", 1064, "near ')' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=('db1')", 1064, "near ''db1')' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB (db1)", 1064, "near '(db1)' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=db1", 1064, "near 'db1' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB=((a,b,c))", 1064, "near ',c))' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB=((a))", 1064, "near '))' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB=(a,b)", 1064, "near 'a,b)' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=('db1.t1", 1064, "at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(`db1)", 1064, "at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=(db1.t1)", 1064, "near 'db1.t1)' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=('db1_t1')", 3067, "'db_pattern.table_pattern'"),
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=('a.b', 'nodot')", 3067, "required format"),
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=('db1.\nt1')", 1525, "not-allowed LF"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL ch1", 1064, "near 'ch1' at line 1"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'nope'", 1794, "Replica is not configured"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'unconf'", 1794, "Replica is not configured"),
    (f"CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL '{LONG}'", 1794, "Replica is not configured"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'group_replication_applier'", 3139,
     "CHANGE REPLICATION FILTER cannot be performed on channel 'group_replication_applier'."),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'group_replication_recovery'", 3139,
     "channel 'group_replication_recovery'"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'ch2'", 3085, "FOR CHANNEL 'ch2' first."),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1)", 3085, "FOR CHANNEL 'ch2' first."),
    (f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='x' FOR CHANNEL '{LONG}'", 3076, "Channel name is either invalid"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='x'", 3079, "Multiple channels exist"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='x' FOR CHANNEL 'ch2'", 3081, "running replication threads"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_HOSTNAME='x' FOR CHANNEL 'ch1'", 1064, "SOURCE_HOSTNAME"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_PORT='3306' FOR CHANNEL 'ch1'", 1064, "'3306'"),
    ("RESET REPLICA FOR CHANNEL 'nope'", 3074, "Replica channel 'nope' does not exist."),
    ("RESET REPLICA ALL FOR CHANNEL 'ch2'", 3081, "FOR CHANNEL 'ch2' first"),
    ("RESET REPLICA ALL", 3081, "FOR CHANNEL 'ch2' first"),
    ("START REPLICA FOR CHANNEL 'nope'", 3074, "does not exist"),
    ("START REPLICA FOR CHANNEL 'unconf'", 1200, "not configured as replica"),
    ("START REPLICA FOR CHANNEL 'group_replication_applier'", 3139, "START REPLICA cannot be performed"),
    ("START REPLICA UNTIL SQL_AFTER_MTS_GAPS FOR CHANNEL 'ch1'", 1235, "UNTIL SQL_AFTER_MTS_GAPS"),
    ("STOP REPLICA FOR CHANNEL 'nope'", 3074, "does not exist"),
    ("SHOW REPLICA STATUS FOR CHANNEL 'nope'", 3074, "does not exist"),
    ("SHOW REPLICA STATUS FOR CHANNEL 'group_replication_applier'", 3139, "SHOW REPLICA STATUS cannot"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(select)", 1064, "near 'select)' at line 1"),
    ("CHANGE REPLICATION FILTERS REPLICATE_DO_DB=(db1)", 1064, "near 'FILTERS"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1);\nCHANGE REPLICATION FILTER REPLICATE_DO_DB=(db2)"
     " FOR CHANNEL ch1", 1064, "at line 1"),
]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    wh = str(tmp_path_factory.mktemp("errors") / "wh")
    s = Session(wh)
    s.execute(SETUP)
    return s


@pytest.mark.parametrize("sql,code,fragment", BAD, ids=[f"{c}:{s[:60]}" for s, c, _ in BAD])
def test_bad_statement_changes_nothing(prepared, sql, code, fragment):
    before_version = prepared.store.version()
    before = tree_digest(prepared.store.state_path)
    with pytest.raises(MySQLError) as e:
        prepared.execute(sql)
    assert e.value.code == code, e.value
    assert fragment in e.value.message, e.value.message
    assert prepared.store.version() == before_version
    assert tree_digest(prepared.store.state_path) == before


def test_syntax_error_in_a_script_runs_nothing(prepared):
    before = tree_digest(prepared.store.state_path)
    with pytest.raises(MySQLError) as e:
        prepared.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db7) FOR CHANNEL 'ch1';\n\n"
                         "CHANGE REPLICATION FILTER REPLICATE_DO_TABLE=(nodot)")
    assert e.value.code == 1064
    assert tree_digest(prepared.store.state_path) == before


def test_cli_error_exit_code_and_format(prepared):
    before = tree_digest(prepared.store.state_path)
    p = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", prepared.warehouse, "-e",
                        "CHANGE REPLICATION FILTER REPLICATE_DO_DB=(db1) FOR CHANNEL 'nope'"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert p.stderr.splitlines()[-2:] == [
        "ERROR 1794 (HY000): Replica is not configured or failed to initialize properly. You must at least set "
        "--server-id to enable either a source or a replica. Additional error messages can be found in the "
        "MySQL error log.",
        "Hint: channel 'nope' does not exist: CHANGE REPLICATION SOURCE TO SOURCE_HOST='...' FOR CHANNEL 'nope' "
        "first"]
    assert tree_digest(prepared.store.state_path) == before


def test_failed_startup_changes_nothing(prepared):
    from rpl_sql import StartupError

    before = tree_digest(prepared.store.state_path)
    for bad in (["--replicate-do-db=ok", "--replicate-do-table=nodot"], ["--replicate-rewrite-db=a-b"],
                ["--lower-case-table-names=7"]):
        with pytest.raises(StartupError):
            prepared.start(bad)
    assert tree_digest(prepared.store.state_path) == before
