"""Damaged Delta logs are refused on open (MySQL's 1194) and `rpl-sql repair` rolls them back; bad paths and
bytes are errors, not tracebacks."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rpl_sql import MySQLError, Session
from rpl_sql.storage.delta.log import find_damage

SETUP = ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c';"
         "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a) FOR CHANNEL 'c';"
         "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (b) FOR CHANNEL 'c';"
         "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (c) FOR CHANNEL 'c'")


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rpl_sql.cli", *args], capture_output=True, input=stdin,
                          timeout=120)


def commit_file(wh: Path, version: int) -> Path:
    return wh / "rpl_state" / "_delta_log" / f"{version:020d}.json"


def damage_emptied(p: Path) -> None:
    p.write_bytes(b"")


def damage_no_actions(p: Path) -> None:
    p.write_text("{}\n")


def damage_truncated(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[:len(data) // 2])


def damage_commitinfo_only(p: Path) -> None:
    first = [ln for ln in p.read_text().splitlines() if '"commitInfo"' in ln]
    p.write_text(first[0] + "\n")


@pytest.mark.parametrize("damage", [damage_emptied, damage_no_actions, damage_truncated, damage_commitinfo_only])
def test_damaged_newest_commit_is_refused_and_repaired(tmp_path, damage):
    wh = tmp_path / "wh"
    session = Session(str(wh))
    session.execute(SETUP)
    newest = session.store.version()
    damage(commit_file(wh, newest))

    with pytest.raises(MySQLError) as raised:
        Session(str(wh)).execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (z) FOR CHANNEL 'c'")
    assert raised.value.code == 1194 and f"version {newest}" in raised.value.message
    assert raised.value.hint.endswith(f"rpl-sql repair --warehouse {wh}")  # the real path, ready to run
    for args in (["-e", "SHOW REPLICA STATUS"], ["--export-sql"]):
        p = cli("--warehouse", str(wh), *args)
        assert p.returncode == 1 and p.stderr.decode().startswith("ERROR 1194 (HY000)"), p.stderr

    p = cli("repair", "--warehouse", str(wh))
    assert p.returncode == 0 and f"rolled back to version {newest - 1}" in p.stdout.decode()
    after = Session(str(wh))
    assert after.store.version() == newest - 1
    assert [r[2] for r in after.filters()] == ["b"]
    # the history before the damage is kept; the next statement commits on the good version
    after.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (z) FOR CHANNEL 'c'")
    rules = [c.filter_rule for c in after.store.filter_changes()]
    assert rules[:3] == ["z", "b", "a"] or rules[-3:] == ["a", "b", "z"]
    assert find_damage(str(wh / "rpl_state")) is None


def test_deleted_middle_commit_is_refused(tmp_path):
    wh = tmp_path / "wh"
    Session(str(wh)).execute(SETUP)
    commit_file(wh, 1).unlink()
    with pytest.raises(MySQLError) as raised:
        Session(str(wh)).state
    assert raised.value.code == 1194 and "version 1: missing" in raised.value.message
    assert cli("repair", "--warehouse", str(wh)).returncode == 0
    assert Session(str(wh)).store.version() == 0


def test_bad_paths_and_bytes_are_one_line_errors(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    p = cli("--warehouse", str(afile), "-e", "SHOW REPLICA STATUS")
    assert p.returncode == 1 and p.stderr.decode().splitlines() == [
        f"ERROR 1018 (HY000): Can't read dir of '{afile}' (errno: 20 - Not a directory)"]
    wh = str(tmp_path / "wh")
    for args in (["-f", str(tmp_path / "missing.sql")], ["-f", str(tmp_path)], ["-i", str(tmp_path / "nope")]):
        p = cli("--warehouse", wh, *args)
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and b"cannot read" in p.stderr, p.stderr
    p = cli("--warehouse", wh, stdin=b"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (\xff\xfe);\n")
    assert p.returncode == 1
    assert p.stderr.decode() == "ERROR 1300 (HY000) at line 1: Invalid utf8mb4 character string: 'FFFE'\n"
    p = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", os.fsencode(wh) + b"\xff", "-e",
                        "SHOW REPLICA STATUS"], capture_output=True, timeout=120)
    assert p.returncode == 1 and p.stderr.decode() == "ERROR 1300 (HY000): Invalid utf8mb4 character string: 'FF'\n"
    p = cli("--warehouse", wh, "--start", "--replicate-do-db")
    assert p.returncode == 1 and "option '--replicate-do-db' requires an argument" in p.stderr.decode()
    assert not os.path.exists(wh)


def test_a_read_only_warehouse_is_one_error_line(tmp_path):
    """Writes that fail (here: immutable files, which hold even for root) are 1026, without Rust's panic."""
    wh = tmp_path / "wh"
    Session(str(wh)).execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c'")
    dirs = [str(wh), str(wh / "rpl_state"), str(wh / "rpl_state" / "_delta_log")]
    if subprocess.run(["chattr", "+i", *dirs], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        for args in (["-e", "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a) FOR CHANNEL 'c'"],
                     ["--start", "--replicate-do-db=x"]):
            p = cli("--warehouse", str(wh), *args)
            err = p.stderr.decode()
            assert p.returncode == 1 and len(err.splitlines()) == 1, err
            assert err.startswith(f"ERROR 1026 (HY000): Error writing file '{wh / 'rpl_state'}' (errno: 1 - ")
    finally:
        subprocess.run(["chattr", "-i", *dirs])
    assert Session(str(wh)).store.version() == 0
