"""`rpl-sql upkeep`: leftovers of killed processes go, a checkpoint is written, --keep-days vacuums old
versions while the filter history stays whole."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rpl_sql import MySQLError, Session
from rpl_sql.delta.upkeep import upkeep


def _many(wh: Path, n: int) -> Session:
    s = Session(str(wh))
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c'")
    s.execute(";".join(f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (d{i}), "
                       f"REPLICATE_IGNORE_TABLE = (`d{i}`.`t,{i}`) FOR CHANNEL 'c'" for i in range(n)))
    return s


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_upkeep_removes_leftovers_and_keeps_the_history(tmp_path):
    wh = tmp_path / "wh"
    s = _many(wh, 60)
    state = wh / "rpl_state"
    history = [(c.version, c.filter_name, c.filter_rule, c.previous_rule) for c in s.store.filter_changes()]
    before = len(list(state.glob("*.parquet")))
    # what a killed writer leaves: a temp file in the log, a data file no commit names; and a fresh one
    some = next(state.glob("*.parquet"))
    for name, age in (("orphan-old.parquet", 7200), ("orphan-new.parquet", 10)):
        shutil.copy(some, state / name)
        _age(state / name, age)
    (state / "_delta_log" / "_commit_x.json.tmp").write_text("{")
    _age(state / "_delta_log" / "_commit_x.json.tmp", 7200)

    (dry,), _ = upkeep(str(wh), keep_days=0, dry_run=True)
    assert sorted(dry.removed) == ["_delta_log/_commit_x.json.tmp", "orphan-old.parquet"]
    assert (state / "orphan-old.parquet").exists()

    (report,), _ = upkeep(str(wh), keep_days=0)
    assert sorted(report.removed) == ["_delta_log/_commit_x.json.tmp", "orphan-old.parquet"]
    assert (state / "orphan-new.parquet").exists()  # within the grace period: maybe a writer's
    assert report.vacuumed == before - 1 and report.data_files_after == 2  # the live file, the young orphan
    assert report.checkpoint == s.store.version()
    fresh = Session(str(wh))
    assert [(c.version, c.filter_name, c.filter_rule, c.previous_rule)
            for c in fresh.store.filter_changes()] == history
    assert [r[2] for r in fresh.filters()][0] == "d59"
    fresh.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (z) FOR CHANNEL 'c'")
    assert fresh.store.filter_changes(limit=1)[0].previous_rule == "d59"
    with pytest.raises(Exception):  # time travel before the horizon is gone, as documented
        fresh.store.load_version(3)


def test_upkeep_keeps_files_the_history_still_needs(tmp_path, monkeypatch):
    """Commits written before changes were recorded keep their data files whatever --keep-days says."""
    import rpl_sql.store as store

    monkeypatch.setattr(store, "CHANGES_MAX_BYTES", 0)  # as if written by an older rpl_sql
    wh = tmp_path / "wh"
    s = _many(wh, 10)
    monkeypatch.undo()
    history = [(c.version, c.filter_rule) for c in s.store.filter_changes()]
    (report,), _ = upkeep(str(wh), keep_days=0)
    assert report.vacuumed == 0
    assert [(c.version, c.filter_rule) for c in Session(str(wh)).store.filter_changes()] == history


def test_upkeep_refuses_a_damaged_table_and_the_cli_reports(tmp_path):
    wh = tmp_path / "wh"
    s = _many(wh, 3)
    p = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "upkeep", "--warehouse", str(wh)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "| rpl_state |" in p.stdout, p.stderr
    (wh / "rpl_state" / "_delta_log" / f"{s.store.version():020d}.json").write_bytes(b"")
    with pytest.raises(MySQLError) as raised:
        upkeep(str(wh))
    assert raised.value.code == 1194
    p = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "upkeep", "--warehouse", str(wh)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr.startswith("ERROR 1194 (HY000)")
