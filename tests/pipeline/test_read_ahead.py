"""The arrow engine's read-ahead (arrow_write.ReadAhead): files read in the order the write threads take them,
each handed over once, bounded, stoppable, and never the cause of a wrong or missing write."""
from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rpl_sql.pipeline.applier import arrow_write
from rpl_sql.pipeline.applier.arrow_write import ReadAhead
from rpl_sql.pipeline.events import EVENTS_SCHEMA
from rpl_sql.spark.deltaread import DeltaFile


@pytest.fixture
def files(tmp_path):
    """Six events files of seqs 1-10, 11-20, ... (listed out of order: the runs sort them by seq)."""
    out = []
    for i in range(6):
        path = str(tmp_path / f"f{i}.parquet")
        seqs = list(range(i * 10 + 1, i * 10 + 11))
        cols = {f.name: pa.nulls(10, f.type) for f in EVENTS_SCHEMA}
        cols.update(seq=pa.array(seqs, pa.int64()), statement=pa.array([f"s'\\`{q}" for q in seqs]),
                    command=pa.array(["INSERT"] * 10))
        pq.write_table(pa.table(cols, schema=EVENTS_SCHEMA), path)
        out.append(DeltaFile(path, None, (), 1, 10, {"seq": seqs[0]}, {"seq": seqs[-1]}))
    return out[3:] + out[:3]


def test_files_are_read_in_the_write_threads_order_and_taken_once(files):
    ahead = ReadAhead(files, 0, None, threads=2)
    ahead._thread.join(10)
    by_seq = sorted(files, key=lambda f: f.min_values["seq"])
    assert ahead._order == [by_seq[i].path for i in (0, 3, 1, 4, 2, 5)]  # runs 0-2 and 3-5, in turn
    for f in files:
        assert ahead.take(f.path).equals(arrow_write._read(f.path))
        assert ahead.take(f.path) is None  # handed over once: the write holds it now


def test_only_the_files_of_the_batch_are_read(files):
    ahead = ReadAhead(files, 15, 40, threads=2)  # seqs 16..40: the files of 11-20, 21-30, 31-40
    ahead._thread.join(10)
    assert sorted(ahead._tables) == sorted(f.path for f in files if 11 <= f.min_values["seq"] <= 31)


def test_reading_stops_past_the_bytes_it_may_hold(files, monkeypatch):
    monkeypatch.setattr(arrow_write, "READ_AHEAD_BYTES", 1)
    ahead = ReadAhead(files, 0, None, threads=2)
    ahead._thread.join(10)
    assert list(ahead._tables) == ahead._order[:1]


def test_stop_lets_the_file_under_way_finish_and_reads_no_more(files, monkeypatch):
    """`take` of the file being read waits for it; after `stop` nothing more is read; `close` drops the rest."""
    release, reading = threading.Event(), threading.Event()
    real = arrow_write._read

    def slow(path, threads=True):
        reading.set()
        release.wait(10)
        return real(path, threads)
    monkeypatch.setattr(arrow_write, "_read", slow)
    ahead = ReadAhead(files, 0, None, threads=2)
    first = ahead._order[0]
    assert reading.wait(10)
    got = []
    taker = threading.Thread(target=lambda: got.append(ahead.take(first)))
    taker.start()
    taker.join(0.2)
    assert taker.is_alive()  # waits for the read under way rather than reading the file again
    ahead.stop()
    release.set()
    taker.join(10)
    ahead._thread.join(10)
    assert got[0].equals(arrow_write._read(first))
    assert all(ahead.take(p) is None for p in ahead._order[1:])  # not read after the stop


def test_a_file_the_read_ahead_cannot_read_is_left_to_the_write(files, monkeypatch):
    """A failed read ahead holds nothing: the write reads the file itself, and its error is the write's."""
    real = arrow_write._read

    def fails_once(path, threads=True):
        if not threads:  # the read-ahead's reads
            raise OSError("disk went away")
        return real(path, threads)
    monkeypatch.setattr(arrow_write, "_read", fails_once)
    ahead = ReadAhead(files, 0, None, threads=2)
    ahead._thread.join(10)
    assert all(ahead.take(f.path) is None for f in files)


def test_close_drops_what_no_write_took(files):
    ahead = ReadAhead(files, 0, None, threads=2)
    ahead._thread.join(10)
    ahead.close()
    assert ahead._tables == {} and all(ahead.take(f.path) is None for f in files)


def test_an_apply_reads_each_events_file_once_some_of_them_ahead(tmp_path, monkeypatch):
    """A whole arrow apply (hostile names, three channels): its first batch's files read ahead while it is
    decided, no file read twice, and the applied events the reference's."""
    from rpl_sql.pipeline.applier import apply
    from rpl_sql.storage.store import DeltaStore
    from tests.pipeline.test_apply import check_against_reference, hostile_log, land_in_commits, setup_server

    reads: list[tuple[str, str]] = []
    real = arrow_write._read

    def counted(path, threads=True):
        reads.append((threading.current_thread().name, path))
        return real(path, threads)
    monkeypatch.setattr(arrow_write, "_read", counted)
    wh = str(tmp_path / "wh")
    setup_server(wh)
    log = hostile_log(seed=47)
    land_in_commits(wh, log, seed=47)
    before = DeltaStore(wh).load().state

    def no_spark():
        raise AssertionError("summarised events need no Spark")
    apply(no_spark, wh, verify="all", engine="arrow")
    check_against_reference(None, wh, log, before)
    paths = [p for _, p in reads]
    assert len(paths) == len(set(paths))
    assert any(name == "rpl_sql-arrow-read-ahead" for name, _ in reads)


def test_a_read_ahead_no_batch_takes_is_closed(tmp_path, monkeypatch):
    """The read-ahead a channel starts before its log is read is closed when no batch takes it (here the log
    read fails): nothing it read stays held, and it reads no more."""
    from rpl_sql.pipeline.applier import apply, job
    from tests.pipeline.test_apply import hostile_log, land_in_commits, setup_server

    started: list[ReadAhead] = []

    class Recorded(ReadAhead):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.append(self)
    monkeypatch.setattr("rpl_sql.pipeline.applier.batch_files.ReadAhead", Recorded)

    def broken(*a, **kw):
        raise OSError("the log went away")
    monkeypatch.setattr(job, "channel_commits", broken)
    wh = str(tmp_path / "wh")
    setup_server(wh)
    land_in_commits(wh, hostile_log(seed=5), seed=5)
    with pytest.raises(OSError, match="the log went away"):
        apply(lambda: None, wh, engine="arrow")
    assert len(started) == 1
    started[0]._thread.join(10)
    assert started[0]._closed and started[0]._tables == {}
