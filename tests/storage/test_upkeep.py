"""`rpl-sql upkeep`: leftovers of killed processes go, a checkpoint is written, --keep-days vacuums old
versions while the filter history stays whole."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rpl_sql import MySQLError, Session
from rpl_sql.storage.upkeep import upkeep


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
    import rpl_sql.storage.store as store

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


def test_upkeep_compacts_the_events_table_keeping_rows_and_positions(tmp_path):
    """Ingest-sized appends (one small file per batch) become one file per channel partition; the rows, each
    channel's app transaction (its resume position) and the commit history the positions are read from stay."""
    from deltalake import DeltaTable

    from rpl_sql.pipeline.events import events_path
    from rpl_sql.pipeline.canonical_rows import Batch
    from rpl_sql.pipeline.writer import EventsWriter
    from rpl_sql.pipeline.ingest_position import app_id, committed_position

    wh = str(tmp_path / "wh")
    for channel in ("a", "b"):
        with EventsWriter(wh, channel) as w:
            for i in range(6):
                b = Batch(channel, "binlog")
                b.add(f"0-1-{i}", "bin.000001", 100 + i, "query", "COMMIT", "TRANSACTION", "d", time_us=0)
                w.commit(b.to_table(w.last_seq + 1), {"binlog_file": "bin.000001", "binlog_pos": str(100 + i),
                                                      "source": "binlog"})
    path = events_path(wh)
    before = DeltaTable(path)
    rows = sorted(map(str, before.to_pyarrow_table().to_pylist()))
    positions = {c: committed_position(wh, c) for c in ("a", "b")}
    assert len(before.file_uris()) == 12
    from rpl_sql.pipeline.retention import delta_encoded

    reports, _ = upkeep(wh, delta_encoded=delta_encoded(wh))  # as `rpl-sql upkeep` calls it
    (events,) = [r for r in reports if r.table == path]
    assert events.compacted == (12, 2) and events.data_files_after >= 2
    after = DeltaTable(path)
    assert len(after.file_uris()) == 2
    from tests.support.landed import assert_delta_encoded

    assert_delta_encoded(path)  # the integers delta-encoded, as the events writer writes them
    assert sorted(map(str, after.to_pyarrow_table().to_pylist())) == rows
    assert {c: after.transaction_version(app_id(c)) for c in ("a", "b")} == {"a": 6, "b": 6}
    assert {c: committed_position(wh, c) for c in ("a", "b")} == positions
    # the applier finds its batches by the files' seq statistics: compaction keeps them
    from rpl_sql.spark.deltaread import snapshot

    assert [f.max_values.get("seq") for f in snapshot(path, None, {"channel": ["a"]}).files] == [6]
    # nothing left to compact: a second run rewrites nothing
    (again,) = [r for r in upkeep(wh)[0] if r.table == path]
    assert again.compacted == (0, 0)


def test_compaction_tiers_rewrite_one_tier_not_the_whole_table():
    """A growing table is compacted toward the smallest tier, or the tier above the highest one with `fanout`
    files waiting: never toward the largest target just because files exist under it."""
    from rpl_sql.storage.upkeep import compaction_tier

    mb = 1 << 20
    assert compaction_tier([], 128 * mb, 2 * mb, 8) == 2 * mb
    assert compaction_tier([100 * 1024] * 500, 128 * mb, 2 * mb, 8) == 2 * mb  # fresh small files only
    assert compaction_tier([2 * mb] * 7 + [100 * 1024] * 50, 128 * mb, 2 * mb, 8) == 2 * mb
    assert compaction_tier([2 * mb] * 8, 128 * mb, 2 * mb, 8) == 16 * mb
    # a table of full files and a partly filled one waits at the small tier: the big files are not rewritten
    assert compaction_tier([128 * mb] * 20 + [90 * mb, 12 * mb] + [mb] * 3, 128 * mb, 2 * mb, 8) == 2 * mb
    assert compaction_tier([16 * mb] * 8 + [2 * mb] * 8, 128 * mb, 2 * mb, 8) == 128 * mb
    assert compaction_tier([16 * mb] * 8, 128 * mb, 2 * mb, 8) == 128 * mb  # the highest full tier counts
    assert compaction_tier([16 * mb] * 8, 64 * mb, 2 * mb, 8) == 64 * mb  # never above the target


def test_compacting_a_growing_table_keeps_its_rows_and_leaves_bigger_files(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from rpl_sql.storage.upkeep import compact_growing_table, compact_table

    def rows(lo, n):
        return pa.table({"id": list(range(lo, lo + n)), "v": [f"{i:040d}" for i in range(lo, lo + n)]})

    def files(dt):
        acts = pa.table(dt.get_add_actions(flatten=False))
        return dict(zip(acts.column("path").to_pylist(), acts.column("size_bytes").to_pylist()))

    def table(name):
        path = str(tmp_path / name)
        write_deltalake(path, rows(0, 20_000))  # what earlier compactions left: one big file
        for i in range(6):
            write_deltalake(path, rows(20_000 + 100 * i, 100), mode="append")
        return DeltaTable(path)

    tiered, whole = table("tiered"), table("whole")
    big = max(files(tiered), key=files(tiered).get)
    small = min(files(tiered).values())
    assert files(tiered)[big] > 10 * small
    compact_growing_table(tiered, smallest=3 * small, fanout=8)
    after = files(tiered)
    assert big in after and len(after) <= 4  # the big file stays; the six small ones were merged
    assert sorted(tiered.to_pyarrow_table().column("id").to_pylist()) == list(range(20_600))
    whole_big = max(files(whole), key=files(whole).get)
    compact_table(whole)  # one 128 MB target: everything under it, the big file too, is rewritten
    assert len(files(whole)) == 1 and whole_big not in files(whole)


def _write(path: str, tag: str, *, create: bool = False) -> None:
    import pyarrow as pa

    from rpl_sql.storage.delta import commit as delta_commit

    delta_commit.write(path, pa.table({"tag": [tag]}), mode="overwrite", metadata={"rpl_sql.operation": "TEST"},
                       create=create)


def _backdate(path: str, versions: range, seconds: float) -> None:
    """Move the commit timestamps of `versions` `seconds` into the past, as if written then."""
    import json

    for v in versions:
        f = Path(path) / "_delta_log" / f"{v:020d}.json"
        actions = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        for a in actions:
            if "commitInfo" in a:
                a["commitInfo"]["timestamp"] -= int(seconds * 1000)
        f.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_tables_rpl_sql_creates_keep_tombstones_ten_minutes_and_vacuum_reads_the_whole_log(tmp_path, monkeypatch):
    """A removed file leaves the checkpoints after ten minutes (not delta-rs' week: the service removes files at
    every batch); upkeep --keep-days still finds and deletes it, from the JSON commits rpl_sql keeps."""
    from deltalake import DeltaTable

    from rpl_sql.storage.delta import commit as delta_commit
    from rpl_sql.storage.upkeep import upkeep_table

    assert delta_commit.TABLE_CONFIG["delta.deletedFileRetentionDuration"] == "interval 10 minutes"
    monkeypatch.setitem(delta_commit.TABLE_CONFIG, "delta.deletedFileRetentionDuration", "interval 1 seconds")
    path = str(tmp_path / "t")
    _write(path, "v0", create=True)
    for i in range(1, 5):
        _write(path, f"v{i}")
    time.sleep(1.5)
    DeltaTable(path).create_checkpoint()
    dt = DeltaTable(path)
    assert dt.metadata().configuration["delta.deletedFileRetentionDuration"] == "interval 1 seconds"
    # the tombstones expired: delta-rs' own vacuum no longer sees the four removed files
    assert dt.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False) == []
    assert len(list(Path(path).glob("*.parquet"))) == 5
    report = upkeep_table(path, keep_days=0)
    assert report.vacuumed == 4 and report.data_files_after == 1
    assert DeltaTable(path).to_pyarrow_table().column("tag").to_pylist() == ["v4"]


def test_vacuum_keeps_every_file_a_version_since_the_horizon_reads(tmp_path):
    """--keep-days N: versions current N days ago and later stay readable, earlier ones go; a file that was
    removed before the horizon, restored and removed again after it is kept."""
    from deltalake import DeltaTable

    from rpl_sql.storage.upkeep import upkeep_table

    path = str(tmp_path / "t")
    _write(path, "A", create=True)  # v0
    _write(path, "B")  # v1 removes A
    DeltaTable(path).restore(0)  # v2 adds A back, removes B
    _write(path, "C")  # v3 removes A again
    _write(path, "D")  # v4 removes C
    _backdate(path, range(0, 3), 3 * 86400)
    _backdate(path, range(3, 4), 86400 + 600)
    report = upkeep_table(path, keep_days=2)  # the horizon falls between v2 and v3: v2 is what it reads
    assert report.vacuumed == 1  # B: v1 read it, v2 removed it
    assert [DeltaTable(path, version=v).to_pyarrow_table().column("tag").to_pylist() for v in (2, 3, 4)] == \
        [["A"], ["C"], ["D"]]
    with pytest.raises(Exception):
        DeltaTable(path, version=1).to_pyarrow_table()
    assert upkeep_table(path, keep_days=1).vacuumed == 1  # now v3 is the horizon: A goes
    assert [DeltaTable(path, version=v).to_pyarrow_table().column("tag").to_pylist() for v in (3, 4)] == \
        [["C"], ["D"]]


def test_upkeep_vacuums_what_its_own_compaction_removed(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable

    from rpl_sql.storage.delta import commit as delta_commit
    from rpl_sql.storage.upkeep import upkeep_table

    path = str(tmp_path / "t")
    _write(path, "0", create=True)
    for i in range(1, 6):
        delta_commit.write(path, pa.table({"tag": [str(i)]}), mode="append", metadata={"rpl_sql.operation": "T"})
    report = upkeep_table(path, keep_days=0)
    assert report.compacted == (6, 1) and report.vacuumed == 6 and report.data_files_after == 1
    assert sorted(DeltaTable(path).to_pyarrow_table().column("tag").to_pylist()) == list("012345")


def test_upkeep_removes_only_what_rpl_sql_processes_that_are_gone_left(tmp_path, monkeypatch):
    """Other users' and other programs' files in $TMPDIR are never touched, however Spark-like their names;
    in rpl_sql's own folder only a gone process's log and Spark scratch directory go."""
    import tempfile

    from rpl_sql.storage import scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    uuid = "0562ba22-2903-4fe6-972e-705363d85abc"
    foreign = ["spark-" + uuid, "blockmgr-" + uuid, "artifacts-" + uuid, uuid + "_resources"]
    for name in foreign:
        (tmp_path / name).mkdir()
        _age(tmp_path / name, 2 * 86400)
    (tmp_path / "rpl_sql-spark-999999999.log").write_text("another user's, as rpl_sql 0.1 named them")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    own = scratch.folder()
    assert own == str(tmp_path / f"rpl_sql-{os.getuid()}") and stat.S_IMODE(os.stat(own).st_mode) == 0o700
    os.mkdir(scratch.spark_local_dir(gone.pid))
    open(scratch.spark_log(gone.pid), "w").close()
    os.mkdir(scratch.spark_local_dir())  # this process's: alive
    open(scratch.spark_log(), "w").close()
    (tmp_path / "wh").mkdir()
    _, removed = upkeep(str(tmp_path / "wh"))
    assert removed == sorted([scratch.spark_local_dir(gone.pid), scratch.spark_log(gone.pid)])
    assert sorted(os.listdir(own)) == sorted([f"spark-{os.getpid()}", f"spark-{os.getpid()}.log"])
    assert all((tmp_path / name).exists() for name in foreign + ["rpl_sql-spark-999999999.log"])


def _small_files(path: str, n: int) -> None:
    import pyarrow as pa

    from rpl_sql.storage.delta import commit as delta_commit

    delta_commit.write(path, pa.table({"i": [0]}), mode="append", metadata={"rpl_sql.operation": "T"}, create=True)
    for i in range(1, n):
        delta_commit.write(path, pa.table({"i": [i]}), mode="append", metadata={"rpl_sql.operation": "T"})


def test_two_compactions_of_a_table_take_turns_and_never_rewrite_the_same_files(tmp_path):
    """delta-rs commits two compactions planned on the same version both, and every row they both rewrote is
    then there twice; rpl_sql's compactions (the service's, upkeep's) take turns, each on the newest version."""
    import threading

    from deltalake import DeltaTable

    from rpl_sql.storage.upkeep import compact_table

    path = str(tmp_path / "t")
    _small_files(path, 8)
    handles = [DeltaTable(path), DeltaTable(path)]  # two writers that both last read the same version
    done = []
    threads = [threading.Thread(target=lambda dt=dt: done.append(compact_table(dt))) for dt in handles]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(done) == [(0, 0), (8, 1)]  # the second one found the first one's file: nothing to do
    assert sorted(DeltaTable(path).to_pyarrow_table().column("i").to_pylist()) == list(range(8))


def test_upkeep_goes_on_when_a_writer_commits_first(tmp_path, monkeypatch):
    """A running service's merge or delete may land between upkeep's compaction plan and its commit: delta-rs
    refuses the compaction, and upkeep reports it and does the rest of its work instead of failing."""
    from deltalake import DeltaTable

    from rpl_sql.storage import upkeep as upkeep_mod

    path = str(tmp_path / "t")
    _small_files(path, 6)

    def a_writer_first(dt, *args, **kwargs):
        DeltaTable(path).delete("i = 0")  # the writer's commit lands after this plan's version
        return dt.optimize.compact()

    monkeypatch.setattr(upkeep_mod, "compact_table", a_writer_first)
    report = upkeep_mod.upkeep_table(path, keep_days=0, grace_seconds=0)
    assert report.compaction_raced and report.compacted == (0, 0)
    assert report.checkpoint == DeltaTable(path).version()  # the rest of its work done
    assert sorted(DeltaTable(path).to_pyarrow_table().column("i").to_pylist()) == list(range(1, 6))


def test_an_upkeep_compaction_beside_the_events_writers_own_leaves_every_row_once(tmp_path, monkeypatch, caplog):
    """The events writer compacts its own commits (a predicate overwrite through the table it holds) while
    `rpl-sql upkeep` may compact the same files from another process. Upkeep's compaction commits after the
    writer's last commit, the writer still holding the version before it: the writer's compaction is refused
    and skipped (delta-rs sees that the files it rewrote were removed), every event is there once, and the
    writer goes on appending. And the other order: an upkeep compaction planned before the writer's committed
    is refused (upkeep reports it raced and drops it)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    from rpl_sql.storage.upkeep import compact_table
    from rpl_sql.pipeline import writer as W
    from rpl_sql.pipeline.events import events_path
    from rpl_sql.pipeline.canonical_rows import Batch
    from rpl_sql.pipeline.writer import EventsWriter

    monkeypatch.setattr(W, "COMPACT_EVERY", 1000)  # its commits kept for a compaction only this test asks for
    caplog.set_level("WARNING", logger=W.__name__)
    wh = str(tmp_path / "wh")
    path = events_path(wh)

    def batch(w):
        b = Batch(w.channel, "binlog")
        for i in range(3):
            b.add(f"0-1-{w.last_seq + 1}", "bin.000001", 100 + w.last_seq + i, "write_rows", db_name=f"d{i % 2}",
                  table_name="t", rows="[]", time_us=0)
        return b.to_table(w.last_seq + 1)

    w = EventsWriter(wh, "a").open()
    for _ in range(6):
        w.commit(batch(w), {"source": "binlog"})
    compact_table(DeltaTable(path), channel="a")  # upkeep, from its own process
    w.compact()
    w.commit(batch(w), {"source": "binlog"})
    seqs = DeltaTable(path).to_pyarrow_table(columns=["seq"]).column("seq").to_pylist()
    assert sorted(seqs) == list(range(1, 22))
    assert any("compaction skipped" in r.getMessage() for r in caplog.records)
    ops = [c.get("operation") for c in DeltaTable(path).history()]
    assert ops.count("OPTIMIZE") == 1 and ops[0] == "WRITE"
    # the other order: upkeep planned its compaction before the writer's committed, and commits after it
    for _ in range(4):
        w.commit(batch(w), {"source": "binlog"})
    planned = DeltaTable(path)
    w.compact()
    with pytest.raises(CommitFailedError, match="concurrent transaction deleted data this operation read"):
        planned.optimize.compact(partition_filters=[("channel", "=", "a")])
    seqs = DeltaTable(path).to_pyarrow_table(columns=["seq"]).column("seq").to_pylist()
    assert sorted(seqs) == list(range(1, 34))
