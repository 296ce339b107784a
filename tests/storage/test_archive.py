"""Commits older than a table's log retention leave `_delta_log` for `_rpl_sql_log/`
(storage/delta/archive.py): delta-rs
still reads every version from the kept checkpoint on, and rpl_sql's own readers of the history (filter
changes, AS OF, the applier's ingest windows, upkeep's vacuum) still see every commit."""
from __future__ import annotations

from concurrent.futures import Future

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st
from deltalake import DeltaTable

from rpl_sql import MySQLError, Session
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta.commit_info import Cut, first_line_info, sliced_info
from rpl_sql.storage.upkeep import upkeep_table


def _age(table: str, seconds: float, below: int | None = None) -> None:
    """Make the log's files (of versions below `below`) look `seconds` old."""
    t = time.time() - seconds
    for f in Path(table, "_delta_log").iterdir():
        if f.name[:20].isdigit() and (below is None or int(f.name[:20]) < below):
            os.utime(f, (t, t))


def _table(path: str, commits: int, checkpoints: tuple[int, ...]) -> None:
    delta_commit.write(path, pa.table({"i": [0]}), mode="append", metadata={"rpl_sql.ingest.channel": "c",
                       "rpl_sql.ingest.last_seq": "0"}, create=True)
    for i in range(1, commits):
        delta_commit.write(path, pa.table({"i": [i]}), mode="append",
                           metadata={"rpl_sql.ingest.channel": "c", "rpl_sql.ingest.last_seq": str(i)})
        if i in checkpoints:
            DeltaTable(path).create_checkpoint()


def _log(path: str) -> list[str]:
    return sorted(os.listdir(os.path.join(path, "_delta_log")))


@pytest.mark.parametrize("text, seconds", [("interval 1 hour", 3600), ("interval 10 minutes", 600),
                                           ("30 days", 30 * 86400), ("interval 1 week", 604800),
                                           ("INTERVAL 2 SECONDS", 2)])
def test_delta_intervals(text, seconds):
    assert archive.interval_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "interval", "1 fortnight", "interval -1 hour", "one hour"])
def test_what_is_not_an_interval_is_refused(text):
    with pytest.raises(ValueError):
        archive.interval_seconds(text)


def test_only_commits_before_a_checkpoint_older_than_the_retention_move(tmp_path):
    path = str(tmp_path / "t")
    _table(path, 30, checkpoints=(10, 20))
    before = DeltaTable(path).history()
    stale = DeltaTable(path, version=5)  # a reader that followed the table, then idled past the retention
    assert delta_commit.TABLE_CONFIG["delta.logRetentionDuration"] == "interval 10 minutes"
    assert archive.log_retention(path) == 600
    assert archive.archive(path) == 0  # nothing is ten minutes old
    _age(path, 7200, below=21)  # versions 0-20 are old, the checkpoint at 20 among them
    assert archive.archive(path) == 20 + 1  # commits 0-19 and the checkpoint at 10
    assert _log(path)[0] == f"{20:020d}.checkpoint.parquet" and len(_log(path)) == 10 + 1 + 1
    # the commits moved, the checkpoint at 10 deleted (derived from them, and read by no one there)
    assert sorted(os.listdir(os.path.join(path, archive.ARCHIVE))) == [f"{v:020d}.json" for v in range(20)]
    assert archive.archive(path) == 0  # a second archiver finds nothing left to move
    dt = DeltaTable(path)
    assert sorted(dt.to_pyarrow_table().column("i").to_pylist()) == list(range(30))
    assert DeltaTable(path, version=20).to_pyarrow_table().num_rows == 21
    with pytest.raises(Exception):  # delta-rs cannot travel to before the kept checkpoint
        DeltaTable(path, version=19)
    assert archive.history(dt) == before
    stale.update_incremental()
    assert stale.version() == 29 and sorted(stale.to_pyarrow_table().column("i").to_pylist()) == list(range(30))
    assert [h["version"] for h in archive.history(dt, 12)] == list(range(29, 17, -1))
    assert archive.commit_versions(path) == list(range(30))
    assert archive.log_retention(path) == 600  # now read from the kept checkpoint's metaData


def test_the_checkpoint_readers_are_told_to_start_at_stays(tmp_path):
    """_last_checkpoint may name an older checkpoint than the newest (a writer killed between the two): what
    it names is never moved, and without it nothing is."""
    path = str(tmp_path / "t")
    _table(path, 30, checkpoints=(10, 20))
    hint = Path(path, "_delta_log", "_last_checkpoint")
    hint.unlink()
    _age(path, 7200)
    assert archive.archive(path) == 0  # no checkpoint named: none is trusted
    hint.write_text(json.dumps({"version": 10, "size": 13}))
    assert archive.archive(path) == 10
    assert _log(path)[0] == f"{10:020d}.checkpoint.parquet"
    assert DeltaTable(path).version() == 29


def test_a_table_without_the_setting_keeps_deltas_thirty_days(tmp_path):
    from deltalake import write_deltalake

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"i": [1]}))
    assert archive.log_retention(path) == 30 * 86400


def test_the_applier_finds_its_ingest_windows_among_archived_commits(tmp_path):
    """An applier far behind (its position is before the log's start) still reads every commit after it."""
    from rpl_sql.pipeline.ingest_position import channel_commits

    path = str(tmp_path / "t")
    _table(path, 30, checkpoints=(20,))
    before = channel_commits(DeltaTable(path), "c", after_seq=5)
    _age(path, 7200)
    assert archive.archive(path) > 0
    assert channel_commits(DeltaTable(path), "c", after_seq=5) == before
    assert [int(m["last_seq"]) for _, m in before] == list(range(6, 30))


def test_history_windows_read_on_from_one_another_equal_one_read(tmp_path, monkeypatch):
    """`below` continues a window newest first, across archived commits; the applier's log reader, asked for
    growing windows as channel_commits asks, reads each commit once and answers as whole reads do."""
    from rpl_sql.pipeline.applier.job import _LogOnce

    path = str(tmp_path / "t")
    _table(path, 30, checkpoints=(20,))
    _age(path, 7200)
    assert archive.archive(path) > 0
    dt = DeltaTable(path)
    whole = archive.history(dt)
    assert [c["version"] for c in whole] == list(range(dt.version(), -1, -1))
    for k in (0, 1, 7, 16, len(whole)):
        head = archive.history(dt, k)
        assert head + archive.history(dt, below=head[-1]["version"] if head else None) == whole
        assert archive.history(dt, 5, below=whole[k - 1]["version"] if k else None) == whole[k:k + 5]
    assert archive.history(path, 5, version=20) == [c for c in whole if c["version"] <= 20][:5]  # by path
    read = []
    real = archive.read_commit_info
    opened = Future()  # delta-rs still opening the table: the reader reads the log back meanwhile

    def counted(t, v, *a):
        read.append(v)
        if len(read) == 11:
            opened.set_result(dt)  # the open done: reading ahead stops at the end of its step
        return real(t, v, *a)
    monkeypatch.setattr(archive, "read_commit_info", counted)
    log = _LogOnce(path, dt.version(), opened)
    log.prefetch(step=4)
    assert len(read) == 12
    limits = (4, 16, 8, 4096, None, 2)
    got = [log.history(limit) for limit in limits]
    monkeypatch.undo()
    assert got == [archive.history(dt, limit) for limit in limits]
    assert sorted(read) == sorted(c["version"] for c in whole)  # each commit once


def _text_of(data: bytes):
    """A cut value as the text of the line's bytes it spans."""
    return lambda start, end: data[start:end].decode("utf-8")


_TEXT = st.text(st.sampled_from('ab"\\:,{}\x00é ') | st.characters(), max_size=12)
_VALUES = st.recursive(st.none() | st.integers() | _TEXT, lambda inner: st.dictionaries(_TEXT | st.just("k"), inner,
                                                                                       max_size=3), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT | st.sampled_from(["k", "x.k", 'a"k']), _VALUES, max_size=5), _TEXT,
       st.booleans(), st.booleans())
def test_commit_info_with_sliced_values_reads_as_json_does(info, long, compact, with_key):
    """Cutting long text values out of a commitInfo line gives what decoding it gives, whatever the keys,
    nesting, escapes and separators."""
    if with_key:
        info = {**info, "k": long * 50}
    line = json.dumps({"commitInfo": info}, separators=(",", ":") if compact else None, ensure_ascii=False)
    data = line.encode("utf-8", "backslashreplace")  # a lone surrogate as its JSON escape, as a writer writes it
    assert sliced_info(data, len(data), ("k", "x.k"), _text_of(data)) == json.loads(line)["commitInfo"]


def test_a_value_that_is_the_stand_in_itself_is_not_taken_for_a_cut_one():
    line = json.dumps({"commitInfo": {"p": {"k": "v"}, "k": "\ud800"}}, separators=(",", ":"))  # as escaped
    data = line.encode()
    assert sliced_info(data, len(data), ("k",), _text_of(data)) == {"p": {"k": "v"}, "k": "\ud800"}


def test_a_commit_line_is_read_whole_and_its_cut_values_from_where_the_file_went(tmp_path):
    """Lines longer than the reader's buffer, a last line without a newline, a short file after a long one
    (the buffer's older bytes are no line of it); a cut value read after its file moved to the archive, and a
    clear error once it is gone."""
    log, moved = tmp_path / "log", tmp_path / "archive"
    log.mkdir()
    moved.mkdir()
    value = "é" + "x" * 300_000
    first = json.dumps({"commitInfo": {"op": "WRITE", "k": value, "n": 1}}, ensure_ascii=False, separators=(",", ":"))
    (log / "a.json").write_text(first + "\n" + json.dumps({"add": {"path": "p"}}) + "\n", encoding="utf-8")
    (log / "b.json").write_text('{"commitInfo":{"k":"short"}}', encoding="utf-8")
    (log / "c.json").write_text('{"add":1}\n', encoding="utf-8")
    got = first_line_info(str(log / "a.json"), ("k",), str(moved / "a.json"))
    assert isinstance(got["k"], Cut) and got == {"op": "WRITE", "k": value, "n": 1}
    assert first_line_info(str(log / "b.json"), ("k",)) == {"k": "short"}
    assert first_line_info(str(log / "c.json"), ("k",)) is None
    os.replace(log / "a.json", moved / "a.json")
    assert str(got["k"]) == value
    os.remove(moved / "a.json")
    with pytest.raises(FileNotFoundError, match="a.json"):
        str(got["k"])


def test_filter_history_and_as_of_read_the_archive(tmp_path):
    wh = tmp_path / "wh"
    s = Session(str(wh))
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c'")
    for i in range(60):
        s.execute(f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`d,{i}'`) FOR CHANNEL 'c'")
    state = str(wh / "rpl_state")
    changes = [(c.version, c.filter_rule, c.previous_rule) for c in s.store.filter_changes()]
    history = [(c.version, c.timestamp, c.metadata) for c in s.store.history()]
    at_5 = s.store.load_version(5)
    when = s.store.history()[-10].timestamp.strftime("%Y-%m-%d %H:%M:%S.%f")
    as_of = s.store.load_as_of(when)
    _age(state, 7200)
    assert archive.archive(state) > 0 and len(_log(state)) < 20
    fresh = Session(str(wh))
    assert [(c.version, c.filter_rule, c.previous_rule) for c in fresh.store.filter_changes()] == changes
    assert [(c.version, c.timestamp, c.metadata) for c in fresh.store.history()] == history
    assert fresh.store.load_version(5) == at_5
    assert fresh.store.load_as_of(when) == as_of
    fresh.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (z) FOR CHANNEL 'c'")
    assert fresh.store.filter_changes(limit=1)[0].previous_rule == "d,59'"


def test_upkeep_archives_and_its_vacuum_still_reads_the_whole_log(tmp_path):
    """The checkpoints an earlier release archived are no leftover data files, and the removes in archived
    commits still let --keep-days delete what they removed."""
    path = str(tmp_path / "t")
    delta_commit.write(path, pa.table({"i": [0]}), mode="overwrite", metadata={"rpl_sql.operation": "T"},
                       create=True)
    for i in range(1, 25):
        delta_commit.write(path, pa.table({"i": [i]}), mode="overwrite", metadata={"rpl_sql.operation": "T"})
        if i in (10, 20):
            DeltaTable(path).create_checkpoint()
    _age(path, 7200)
    report = upkeep_table(path, compact=False)  # its own checkpoint, at 24, is the one kept
    assert report.archived == 24 + 2 and report.removed == [] and report.vacuumed == 0
    moved = os.path.join(path, archive.ARCHIVE)
    assert sorted(os.listdir(moved)) == [f"{v:020d}.json" for v in range(24)]  # the two checkpoints deleted
    kept = next(n for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".checkpoint.parquet"))
    shutil.copy(os.path.join(path, "_delta_log", kept), os.path.join(moved, f"{10:020d}.checkpoint.parquet"))
    report = upkeep_table(path, keep_days=0, compact=False)
    assert report.vacuumed == 24 and report.data_files_after == 1 and report.removed == []
    assert DeltaTable(path).to_pyarrow_table().column("i").to_pylist() == [24]


def test_a_catalog_keeps_its_channel_after_a_users_alter_and_archiving(tmp_path):
    """The channel comes from the newest commit that names it: a property change (as docs/pipeline.md shows)
    names none, and archiving may leave only such commits in the log."""
    from rpl_sql.storage.replica_catalog import Catalog, all_tables, catalog_path

    wh = str(tmp_path / "wh")
    cat = Catalog(wh, "north")
    cat.add_table("shop", "orders", [{"name": "id", "type": "int"}])
    cat.commit(1)
    path = catalog_path(wh, "north")
    DeltaTable(path).create_checkpoint()
    DeltaTable(path).alter.set_table_properties({"delta.logRetentionDuration": "interval 1 second"})
    assert [(ch, e.db, e.name) for ch, e in all_tables(wh)] == [("north", "shop", "orders")]
    DeltaTable(path).create_checkpoint()
    _age(path, 10)
    assert archive.archive(path) > 0
    assert [(ch, e.db, e.name) for ch, e in all_tables(wh)] == [("north", "shop", "orders")]


def _archived(table: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(os.path.join(table, archive.ARCHIVE)) if n.endswith(".json")
                  and n[:20].isdigit())


def test_upkeep_prunes_the_archive_to_what_the_filter_history_walks(tmp_path):
    """`rpl-sql upkeep --keep-days` deletes the archived state commits that changed no filter (the service's
    per-batch commits): the filter history, AS OF after the horizon and the next change's baseline stay."""
    from rpl_sql.cli.maintenance import upkeep_main
    from rpl_sql.storage.upkeep import _log_files

    wh = tmp_path / "wh"
    s = Session(str(wh))
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c'")
    changers = set()
    state = str(wh / "rpl_state")
    for i in range(80):
        if i == 40:  # a property change by hand, as docs/semantics.md shows: a foreign commit that keeps the rows
            DeltaTable(state).alter.set_table_properties({"delta.logRetentionDuration": "interval 10 minutes"})
            altered = DeltaTable(state).version()
        if i % 10 == 3:
            s.execute(f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`d,{i}'`), REPLICATE_WILD_IGNORE_TABLE = "
                      f"('x\\\\_{i}%.t`,%') FOR CHANNEL 'c'")
            changers.add(s.store.version())
        else:  # a commit that changes no filter, as the service's APPLY commits
            s.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_PORT = {1000 + i} FOR CHANNEL 'c'")
    changes = [(c.version, c.filter_name, c.filter_rule, c.previous_rule) for c in s.store.filter_changes()]
    commits = [(c.version, c.metadata) for c in s.store.filter_commits()[0]]
    latest = s.store.history(1)[0]
    pruned_time = next(c for c in s.store.history() if c.version == 15).timestamp  # a commit that changed none
    _age(state, 7200)
    assert upkeep_main(["--warehouse", str(wh), "--keep-days", "0", "--grace", "0"]) == 0
    kept = _archived(state)
    # version 0 (the channel's creation) changed filters too; the walk steps through the foreign commit
    assert kept and set(kept) <= changers | {0, altered - 1, altered}
    assert len(kept) < 12 and archive.pruned_through(state) >= max(kept)
    fresh = Session(str(wh))
    assert [(c.version, c.filter_name, c.filter_rule, c.previous_rule) for c in fresh.store.filter_changes()] == changes
    assert [(c.version, c.metadata) for c in fresh.store.filter_commits()[0]] == commits
    assert fresh.store.version_as_of(latest.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f")) == latest.version
    for when in ("2000-01-01 00:00:00", pruned_time.strftime("%Y-%m-%d %H:%M:%S.%f")):
        with pytest.raises(MySQLError) as e:  # a time in the pruned stretch has no whole history any more
            fresh.store.version_as_of(when)
        assert e.value.code == 1210 and "upkeep --keep-days" in str(e.value)
    assert _log_files(state).whole()  # the next vacuum still reads the removes of every commit it must
    fresh.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (z) FOR CHANNEL 'c'")
    assert fresh.store.filter_changes(limit=1)[0].previous_rule == "d,73'"
    assert upkeep_main(["--warehouse", str(wh), "--keep-days", "0", "--grace", "0"]) == 0  # again: nothing breaks
    assert [(c.version, c.filter_name, c.filter_rule, c.previous_rule)
            for c in Session(str(wh)).store.filter_changes()][1:] == changes


def test_upkeep_keeps_the_events_an_applier_has_not_passed(tmp_path):
    """The events table's archived commits of a channel go once its applier passed them, but its newest (the
    ingest position) stays; a channel without an applier position keeps them all."""
    from dataclasses import replace

    from rpl_sql.storage.upkeep import upkeep
    from rpl_sql.pipeline.events import events_path
    from rpl_sql.pipeline.retention import needed_commits
    from rpl_sql.pipeline.ingest_position import channel_commits, committed_position
    from rpl_sql.filters.state import ApplierPosition

    wh = str(tmp_path / "wh")
    s = Session(wh)
    for ch, seq in (("c", 12), ("d", 100)):  # "e" has no channel in the state
        s.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL '{ch}'")
        s.store.transact(lambda st, ch=ch, seq=seq: (st.with_channel(
            replace(st.channel(ch), applier=ApplierPosition(seq=seq))), None), {"statement": "APPLY"})
    path = events_path(wh)
    delta_commit.write(path, pa.table({"i": [0]}), mode="append", metadata={"rpl_sql.operation": "T"}, create=True)
    for i in range(1, 41):
        meta = {"rpl_sql.ingest.channel": "cde"[i % 3], "rpl_sql.ingest.last_seq": str(i)}
        delta_commit.write(path, pa.table({"i": [i]}), mode="append", metadata=meta if i % 7 else {})
    DeltaTable(path).create_checkpoint()  # at 40: commits 0-39 can be archived
    dt = DeltaTable(path)
    applied = {"c": 12, "d": 100, "e": 0}
    before = {ch: channel_commits(dt, ch, applied[ch]) for ch in "cde"}
    positions = {ch: committed_position(wh, ch, dt) for ch in "cde"}
    _age(path, 7200)
    upkeep(wh, keep_days=0, grace_seconds=0, compact=False, retention=needed_commits(wh))
    metas = [archive.read_commit_info(path, v) for v in _archived(path)]
    assert all("rpl_sql.ingest.channel" in m for m in metas)  # the commits no reader looks up went
    seqs = {ch: [int(m["rpl_sql.ingest.last_seq"]) for m in metas if m["rpl_sql.ingest.channel"] == ch]
            for ch in "cde"}
    assert seqs == {"c": [i for i in range(13, 40) if i % 3 == 0 and i % 7],  # not applied yet
                    "d": [37],  # all applied: the newest stays
                    "e": [i for i in range(1, 40) if i % 3 == 2 and i % 7]}  # no applier: all stay
    dt = DeltaTable(path)
    assert {ch: channel_commits(dt, ch, applied[ch]) for ch in "cde"} == before  # what each applier reads
    assert {ch: committed_position(wh, ch, dt) for ch in "cde"} == positions


@pytest.mark.parametrize("kind", ["applied", "catalog", "replica table"])
def test_the_applied_events_and_catalogs_keep_each_channels_newest_commit(tmp_path, kind):
    from rpl_sql.pipeline.applier.shapes import META_KEY
    from rpl_sql.pipeline.events import applied_path
    from rpl_sql.pipeline.retention import needed_commits
    from rpl_sql.storage.replica_catalog import CHANNEL_KEY, catalog_path

    wh = str(tmp_path / "wh")
    table = {"applied": applied_path(wh), "catalog": catalog_path(wh, "north"),
             "replica table": os.path.join(wh, "replica", "shop", "orders")}[kind]

    def info(channel):
        if kind == "applied":
            return {META_KEY: json.dumps({"channel": channel, "end": 1})}
        return {CHANNEL_KEY: channel}

    old = [(0, {}), (1, info("a")), (2, info("b")), (3, info("a")), (4, {"operation": "OPTIMIZE"})]
    kept = needed_commits(wh)(table)(old)
    assert kept == (set() if kind == "replica table" else {2, 3})


def test_history_read_beside_an_archiver_labels_every_commit_with_its_version(tmp_path):
    """A writer checkpointing every 5 commits and an archiver moving everything before the newest checkpoint,
    while readers open the table and take the newest windows of its history, as the applier does each batch:
    every open succeeds, every commit read is the one its version names, and no version is skipped. (A plain
    DeltaTable(path) failed on a checkpoint moved after it read `_last_checkpoint`, and delta-rs 1.6's own
    history skipped a commit moved while it read and numbered the older ones one too high.)"""
    import threading

    path = str(tmp_path / "t")
    _table(path, 1, checkpoints=())
    done, errors = threading.Event(), []

    def writer():
        try:
            for i in range(1, 400):
                delta_commit.write(path, pa.table({"i": [i]}), mode="append",
                                   metadata={"rpl_sql.ingest.channel": "c", "rpl_sql.ingest.last_seq": str(i)})
                if i % 5 == 0:
                    DeltaTable(path).create_checkpoint()
        except Exception as e:  # pragma: no cover - shown by the assertion below
            errors.append(e)
        finally:
            done.set()

    def archiver():
        while not done.is_set():
            archive.archive(path, retention=0)

    threads = [threading.Thread(target=writer), threading.Thread(target=archiver)]
    for t in threads:
        t.start()
    reads = 0
    try:
        while not done.is_set():
            dt = archive.open_table(path)
            newest = dt.version()
            for limit in (16, 64):
                got = [(h["version"], h.get("rpl_sql.ingest.last_seq")) for h in archive.history(dt, limit)]
                want = [(v, str(v)) for v in range(newest, max(-1, newest - limit), -1)]
                assert got == want, (limit, newest, got, want)
                reads += 1
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not errors and reads > 20 and archive.archived_versions(path), (errors, reads)


def test_a_commits_info_is_found_wherever_its_line_is(tmp_path):
    """A commitInfo line in the form writers write it, first, is read without the lines after it (which here
    are not JSON at all); one written otherwise (spaced, after another action) is still found."""
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text('{"commitInfo":{"operation":"WRITE"}}\nnot json\n')
    (log / f"{1:020d}.json").write_text('{"add":{"path":"a"}}\n\n{ "commitInfo" : {"operation":"OPTIMIZE"}}\n')
    (log / f"{2:020d}.json").write_text('{"add":{"path":"b"}}\n')
    table = str(tmp_path / "t")
    assert archive.read_commit_info(table, 0) == {"operation": "WRITE", "version": 0}
    assert archive.read_commit_info(table, 1) == {"operation": "OPTIMIZE", "version": 1}
    assert archive.read_commit_info(table, 2) == {"version": 2}
    assert archive.read_commit_info(table, 3) is None
    assert archive.commit_info(str(log / f"{1:020d}.json"), 1)["operation"] == "OPTIMIZE"
    assert archive.commit_info(str(log / f"{3:020d}.json"), 3) is None
