"""Binlog ingest from real MariaDB servers into the canonical events table.

Two throwaway MariaDB servers (tests/support/mariadb.py) feed channels 'a' and 'b'. Checked: what lands for row and
statement workloads (multi-table, cross-database, database DDL), positions and GTIDs, gapless seqs, re-runs
that land nothing, incremental runs, SIGKILLed runs that neither lose nor duplicate, one writer per channel,
and filtering at the source against the applier's semantics (the reference evaluator).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

import rpl_sql
from rpl_sql.server import execute as server
from rpl_sql.server.applier_state import ApplyError
from rpl_sql.pipeline.events import EVENTS_SCHEMA, events_path
from rpl_sql.pipeline.ingest_position import (ConcurrentIngestError, IngestError, SourceFilterConflictError,
                                              committed_position)
from rpl_sql.pipeline.writer import EventsWriter
from rpl_sql.pipeline.binlog import BACKLOG_COMMIT_SECONDS, BinlogIngest, _log_key, ingest_all, ingest_channel
from rpl_sql.cli.commands import ingest_main as main
from rpl_sql.pipeline.source_filter import settle_source_filtering, source_filtered
from rpl_sql.filters.rules import FilterType

from tests.support.landed import evaluator_event, landed
from tests.support.mariadb import two_channels

pytest.importorskip("pymysqlreplication", reason="pip install '.[ingest]' (mysql-replication, pymysql)")

# pymysqlreplication's control connection still passes pymysql's deprecated `db` argument
pytestmark = pytest.mark.filterwarnings("ignore:'db' is deprecated:DeprecationWarning")



@pytest.fixture
def sources(mariadb_pair, warehouse):
    """Both servers reset (fresh binlog, no user databases) and channels 'a' and 'b' reading them."""
    session = two_channels(mariadb_pair, warehouse)
    return *mariadb_pair, session


def at_end(position, m, rows) -> bool:
    """The committed position is past the last landed event and at the source's end, give or take the
    housekeeping events (binlog checkpoints) MariaDB may append after the last transaction."""
    end = m.binlog_end()
    last = (rows[-1]["binlog_file"], rows[-1]["binlog_pos"])
    return position[0] == end[0] == last[0] and last[1] <= position[1] <= end[1]


def shape(rows):
    """What matters of a landed event, without seq and time: comparable across warehouses."""
    return [(r["binlog_file"], r["binlog_pos"], r["gtid"], r["event_type"], r["command"], r["statement_kind"],
             r["default_db"], r["db_name"], r["table_name"], json.dumps(r["tables"]), r["statement"], r["rows"])
            for r in rows]


WORKLOAD_A = [
    "CREATE DATABASE d1", "CREATE DATABASE d2", "USE d1",
    "CREATE TABLE t1 (id INT PRIMARY KEY, v VARCHAR(20), amount DECIMAL(8,2), b VARBINARY(4))",
    "CREATE TABLE d2.t2 (id INT PRIMARY KEY, w VARCHAR(20))",
    # row format
    "SET SESSION binlog_format=ROW",
    "INSERT INTO t1 VALUES (1,'a',1.50,x'00ff'),(2,'b',NULL,NULL),(3,'c',3.00,NULL)",
    "INSERT INTO d2.t2 VALUES (1,'x'),(2,'y')",
    "UPDATE t1 JOIN d2.t2 ON t1.id=t2.id SET t1.v='r', t2.w='r'",
    "BEGIN", "DELETE FROM t1 WHERE id=3", "INSERT INTO d2.t2 VALUES (3,'z')", "COMMIT",
    # statement format
    "SET SESSION binlog_format=STATEMENT",
    "INSERT INTO d2.t2 VALUES (4,'s')",
    "UPDATE t1 JOIN d2.t2 ON t1.id=t2.id SET t1.v='s'",
    "USE d2", "UPDATE d1.t1 SET v='q' WHERE id=1",
    # database DDL
    "ALTER DATABASE d1 CHARACTER SET utf8mb4", "DROP TABLE d1.t1", "DROP DATABASE d1",
]

EXPECTED_A = [  # (event_type, command, default_db, db_name, table_name, tables)
    ("query", "CREATE_DB", "d1", None, None, []),
    ("query", "CREATE_DB", "d2", None, None, []),
    ("query", "CREATE_TABLE", "d1", None, None, [(None, "t1", True)]),
    ("query", "CREATE_TABLE", "d1", None, None, [("d2", "t2", True)]),          # cross-database DDL
    ("write_rows", None, None, "d1", "t1", None), ("query", "COMMIT", None, None, None, []),
    ("write_rows", None, None, "d2", "t2", None), ("query", "COMMIT", None, None, None, []),
    ("update_rows", None, None, "d2", "t2", None),                              # one multi-table statement,
    ("update_rows", None, None, "d1", "t1", None),                              # one row event per table
    ("query", "COMMIT", None, None, None, []),
    ("delete_rows", None, None, "d1", "t1", None), ("write_rows", None, None, "d2", "t2", None),
    ("query", "COMMIT", None, None, None, []),
    ("query", "INSERT", "d1", None, None, [("d2", "t2", True)]),                # judged on d1, writes d2
    ("query", "COMMIT", None, None, None, []),
    ("query", "UPDATE_MULTI", "d1", None, None, [(None, "t1", True), ("d2", "t2", False)]),
    ("query", "COMMIT", None, None, None, []),
    ("query", "UPDATE", "d2", None, None, [("d1", "t1", True)]),
    ("query", "COMMIT", None, None, None, []),
    ("query", "ALTER_DB", "d1", None, None, []),
    ("query", "DROP_TABLE", "d2", None, None, [("d1", "t1", True)]),
    ("query", "DROP_DB", "d1", None, None, []),
]


def test_lands_row_and_statement_events_of_two_channels(sources, warehouse):
    m1, m2, _ = sources
    m1.execute(*WORKLOAD_A)
    m2.execute("CREATE DATABASE e1", "CREATE TABLE e1.t (id INT PRIMARY KEY)", "SET SESSION binlog_format=ROW",
               "INSERT INTO e1.t VALUES (1),(2)")
    reports = {r.channel: r for r in ingest_all(warehouse)}
    assert set(reports) == {"a", "b"}
    ra = reports["a"]
    assert ra.flavor == "mariadb" and ra.start == ("binlog.000001", 4)
    rows = landed(warehouse, "a")
    assert at_end(ra.end, m1, rows)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1)) == list(range(ra.first_seq, ra.last_seq + 1))
    got = [(r["event_type"], r["command"], r["default_db"], r["db_name"], r["table_name"],
            None if r["tables"] is None else [(t["db"], t["name"], t["updating"]) for t in r["tables"]])
           for r in rows]
    assert got == EXPECTED_A
    # filter_db partitions: the table's db for rows, the default db for statements ('' reads back as NULL)
    assert [r["filter_db"] for r in rows] == [(r["db_name"] if r["event_type"] != "query" else r["default_db"])
                                              for r in rows]
    assert {r["source"] for r in rows} == {"binlog"}
    assert all(r["statement"] for r in rows if r["event_type"] == "query")
    # MariaDB GTIDs domain-server-seq, one per transaction, in order; positions strictly increase
    gtids = [r["gtid"] for r in rows]
    assert all(g.startswith(f"0-{m1.server_id}-") for g in gtids)
    assert sorted(set(gtids), key=lambda g: int(g.rsplit("-", 1)[1])) == list(dict.fromkeys(gtids))
    assert len(set(gtids)) == 14
    assert [r["binlog_pos"] for r in rows] == sorted(r["binlog_pos"] for r in rows)
    assert len({r["binlog_pos"] for r in rows}) == len(rows)
    # row images with column names (binlog_row_metadata=FULL), exact values
    assert json.loads(rows[4]["rows"]) == [
        {"before": None, "after": {"id": 1, "v": "a", "amount": "1.50", "b": {"$binary": "AP8="}}},
        {"before": None, "after": {"id": 2, "v": "b", "amount": None, "b": None}},
        {"before": None, "after": {"id": 3, "v": "c", "amount": "3.00", "b": None}}]
    assert json.loads(rows[8]["rows"]) == [{"before": {"id": 1, "w": "x"}, "after": {"id": 1, "w": "r"}},
                                           {"before": {"id": 2, "w": "y"}, "after": {"id": 2, "w": "r"}}]
    assert rows[5]["statement"].startswith("COMMIT /* xid=")
    assert rows[0]["event_time"].tzinfo is not None
    # channel b: its own seqs from 1
    rb = landed(warehouse, "b")
    assert [r["seq"] for r in rb] == [1, 2, 3, 4]
    assert [(r["event_type"], r["db_name"] or r["default_db"]) for r in rb] == \
        [("query", "e1"), ("query", ""), ("write_rows", "e1"), ("query", None)]
    # the commit carries the position; the table protocol stays plain
    pos = committed_position(warehouse, "a")
    assert pos.binlog == ra.end and pos.last_seq == len(rows) and pos.metadata["gtid"] == gtids[-1]
    proto = DeltaTable(events_path(warehouse)).protocol()
    assert (proto.min_reader_version, proto.min_writer_version) == (1, 2)


def test_rerun_lands_nothing_and_new_writes_land_incrementally(sources, warehouse):
    m1, _, _ = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)",
               "INSERT INTO d.t VALUES (1, 1)")
    first = ingest_channel(warehouse, "a")
    version = DeltaTable(events_path(warehouse)).version()
    again = ingest_channel(warehouse, "a")
    assert again.landed == 0 and again.start == again.end == first.end
    assert DeltaTable(events_path(warehouse)).version() == version      # nothing committed at all
    m1.execute("SET SESSION binlog_format=ROW", "INSERT INTO d.t VALUES (2, 2)", "FLUSH BINARY LOGS",
               "UPDATE d.t SET v = 3 WHERE id = 2")
    more = ingest_channel(warehouse, "a")
    rows = landed(warehouse, "a")
    assert more.start == first.end and at_end(more.end, m1, rows) and more.end[0] == "binlog.000002"
    assert more.first_seq == first.last_seq + 1 and [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert [(r["binlog_file"], r["event_type"]) for r in rows[first.landed:]] == [
        ("binlog.000001", "write_rows"), ("binlog.000001", "query"),
        ("binlog.000002", "update_rows"), ("binlog.000002", "query")]
    # one clean ingest of the same binlog lands exactly the same events
    clean = warehouse + "_clean"
    rpl_sql.connect(clean).execute(m1.channel_sql("a"))
    ingest_channel(clean, "a")
    assert shape(landed(clean, "a")) == shape(rows)


def test_max_events_stops_at_a_transaction_boundary(sources, warehouse):
    m1, _, _ = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "SET SESSION binlog_format=ROW",
               *[f"INSERT INTO d.t VALUES ({i})" for i in range(10)])
    r = ingest_channel(warehouse, "a", max_events=5)
    rows = landed(warehouse, "a")
    assert r.landed == len(rows) == 6 and rows[-1]["command"] == "COMMIT"   # 2 DDL + 2 x (rows, COMMIT)
    r2 = ingest_channel(warehouse, "a")
    assert r2.start == r.end and len(landed(warehouse, "a")) == 2 + 20


def test_a_backlog_commits_less_often_than_a_followed_stream():
    """Reading what the source held at connect, commits come every BACKLOG_COMMIT_SECONDS at most; from the
    source's end on (a higher file number counts as later), every `batch_seconds`, and it stays so."""
    ing = BinlogIngest("/nowhere", "a", batch_seconds=0.2)
    ing.backlog_end = _log_key("binlog.000009", 500)
    ing.file, ing.pos = "binlog.000009", 499
    assert ing._commit_every() == BACKLOG_COMMIT_SECONDS
    ing.file, ing.pos = "binlog.000010", 4
    assert ing._commit_every() == 0.2
    ing.file, ing.pos = "binlog.000009", 4
    assert ing._commit_every() == 0.2 and ing.backlog_end is None
    assert _log_key("binlog.999999", 9) < _log_key("binlog.1000000", 4) < _log_key("binlog.1000000", 5)
    batch = BinlogIngest("/nowhere", "a", batch_seconds=30.0)  # `rpl-sql ingest`: its own, longer interval
    batch.backlog_end, batch.file, batch.pos = _log_key("binlog.000009", 500), "binlog.000009", 4
    assert batch._commit_every() == 30.0


def test_source_log_position_and_column_names_without_metadata(sources, warehouse):
    m1, _, session = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)", "FLUSH BINARY LOGS")
    m1.execute("SET GLOBAL binlog_row_metadata=MINIMAL")
    try:
        m1.execute("SET SESSION binlog_format=ROW", "INSERT INTO d.t VALUES (1, 10)")
    finally:
        m1.execute("SET GLOBAL binlog_row_metadata=FULL")
    session.execute("CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000002', SOURCE_LOG_POS=4 "
                    "FOR CHANNEL 'a'")
    r = ingest_channel(warehouse, "a")
    rows = landed(warehouse, "a")
    assert r.start == ("binlog.000002", 4) and {x["binlog_file"] for x in rows} == {"binlog.000002"}
    assert json.loads(rows[0]["rows"]) == [{"before": None, "after": {"UNKNOWN_COL0": 1, "UNKNOWN_COL1": 10}}]


def test_unconfigured_channel_and_cli(sources, warehouse, capsys):
    m1, _, _ = sources
    with pytest.raises(IngestError):
        ingest_channel(warehouse, "nope")
    m1.execute("CREATE DATABASE d")
    assert main(["ingest", "--channel", "a", "--warehouse", warehouse]) == 0
    out = capsys.readouterr()
    assert "channel 'a': 1 events landed (seq 1..1)" in out.out and "[ingest 'a']" in out.err
    assert main(["--channel", "nope", "--warehouse", warehouse, "-q"]) == 1


def test_one_writer_per_channel(sources, warehouse):
    m1, _, _ = sources
    m1.execute("CREATE DATABASE d")
    with EventsWriter(warehouse, "a"):                     # another process holds the channel
        with pytest.raises(ConcurrentIngestError):
            ingest_channel(warehouse, "a")
    assert ingest_channel(warehouse, "a").landed == 1


def test_optimistic_check_without_the_lock(warehouse):
    """Two writers that both read seq 0 (no lock, e.g. on an object store): the second commit fails cleanly."""
    from rpl_sql.pipeline.canonical_rows import Batch

    def batch():
        b = Batch("a", "binlog")
        b.add("0-1-1", "binlog.000001", 400, "query", "CREATE_DB", "DATABASE_DDL", "d", time_us=0)
        return b.to_table(1)

    w1, w2 = EventsWriter(warehouse, "a", lock=False).open(), EventsWriter(warehouse, "a", lock=False).open()
    w1.commit(batch(), {"binlog_file": "binlog.000001", "binlog_pos": "400", "source": "binlog"})
    with pytest.raises(ConcurrentIngestError):
        w2.commit(batch(), {"binlog_file": "binlog.000001", "binlog_pos": "400", "source": "binlog"})
    assert [r["seq"] for r in landed(warehouse, "a")] == [1]
    # another channel's concurrent commit is no conflict
    w3, w4 = EventsWriter(warehouse, "b", lock=False).open(), EventsWriter(warehouse, "c", lock=False).open()
    w3.commit(batch(), {"source": "binlog"})
    w4.commit(batch(), {"source": "binlog"})
    assert len(landed(warehouse)) == 3


def test_compacting_the_events_changes_no_row_and_no_position(sources, warehouse, tmp_path, monkeypatch):
    """Every few commits a writer rewrites its commits' files into one per partition: the rows (every column),
    the position and the applier's results are those of an ingest that never compacts, and another channel
    appending meanwhile loses nothing."""
    from rpl_sql.pipeline import writer as W
    from rpl_sql.pipeline.applier.local import LocalApplier

    m1, m2, _ = sources
    m1.execute("SET SESSION binlog_format=ROW", "CREATE DATABASE d1", "CREATE DATABASE d2",
               "CREATE TABLE d1.t (id INT PRIMARY KEY, v TEXT)",
               "CREATE TABLE d2.t (id INT PRIMARY KEY)",
               *[f"INSERT INTO d{1 + i % 2}.t VALUES ({i}{', NULL' if i % 2 == 0 else ''})" for i in range(120)])
    m2.execute("CREATE DATABASE e", "CREATE TABLE e.t (id INT PRIMARY KEY)",
               *[f"INSERT INTO e.t VALUES ({i})" for i in range(40)])
    plain = str(tmp_path / "plain")
    rpl_sql.connect(plain).execute(m1.channel_sql("a") + ";\n" + m2.channel_sql("b"))
    monkeypatch.setattr(W, "COMPACT_EVERY", 0)
    ingest_channel(plain, "a", batch_rows=10)
    monkeypatch.setattr(W, "COMPACT_EVERY", 3)
    seen, other = [], []
    real = W.EventsWriter.compact

    def compact(self):  # another channel commits between this writer's last commit and its compaction commit
        if self.channel == "a" and not other:
            other.append(ingest_channel(warehouse, "b", batch_rows=7).landed)
        real(self)
        seen.append(self.channel)
    monkeypatch.setattr(W.EventsWriter, "compact", compact)
    ingest_channel(warehouse, "a", batch_rows=10)
    assert other[0] > 0 and seen.count("a") >= 5 and "b" in seen
    assert shape(landed(warehouse, "a")) == shape(landed(plain, "a"))
    assert [r["seq"] for r in landed(warehouse, "a")] == [r["seq"] for r in landed(plain, "a")]
    assert len(landed(warehouse, "b")) == other[0]
    a, b = committed_position(warehouse, "a"), committed_position(plain, "a")
    assert a.last_seq == b.last_seq and a.binlog == b.binlog
    files = {wh: sum("channel=a/" in f for f in DeltaTable(events_path(wh)).file_uris()) for wh in (warehouse, plain)}
    assert files[warehouse] < files[plain] / 2, files
    ops = [h.get("rpl_sql.ingest.compacted") for h in DeltaTable(events_path(warehouse)).history()]
    assert sum(op is not None for op in ops) >= 5
    for wh in (warehouse, plain):
        rpl_sql.connect(wh).execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (d1) FOR CHANNEL 'a';"
                                    "START REPLICA FOR CHANNEL 'a'")
        applier = LocalApplier(wh, batch_size=25)
        while applier.run_batch("a") is not None:
            pass
    got = [{k: v for k, v in r.items() if k != "event_time"} for r in
           DeltaTable(f"{warehouse}/applied_events").to_pyarrow_table().sort_by("seq").to_pylist()]
    want = [{k: v for k, v in r.items() if k != "event_time"} for r in
            DeltaTable(f"{plain}/applied_events").to_pyarrow_table().sort_by("seq").to_pylist()]
    assert got == want and {r["db_name"] for r in got} == {None, "d1"}  # d1's rows, and BEGIN/COMMIT


@pytest.mark.parametrize("channel", ["", "it's \\ 中"])
def test_compaction_replaces_exactly_the_writers_rows(warehouse, monkeypatch, channel):
    """The default channel (its partition value reads back NULL) and a hostile name: the rewrite removes what
    it rewrites, whatever the channel is called, and leaves the other channels' files alone."""
    from rpl_sql.pipeline import writer as W
    from rpl_sql.pipeline.canonical_rows import Batch

    monkeypatch.setattr(W, "COMPACT_EVERY", 3)

    def batch(w, n=4):
        b = Batch(w.channel, "binlog")
        for i in range(n):
            b.add("0-1-1", "binlog.000001", 400 + i, "write_rows", db_name=f"d{i % 2}", table_name="t",
                  rows=json.dumps([{"after": {"id": w.last_seq + i}}]), time_us=0)
        return b.to_table(w.last_seq + 1)

    other = EventsWriter(warehouse, "other").open()
    other.commit(batch(other), {"source": "binlog"})
    w = EventsWriter(warehouse, channel).open()
    for _ in range(7):
        w.commit(batch(w), {"source": "binlog"})
    rows = landed(warehouse, channel)
    assert [r["seq"] for r in rows] == list(range(1, 29))
    assert [r["binlog_pos"] for r in rows] == [400, 401, 402, 403] * 7
    assert len(landed(warehouse, "other")) == 4
    dt = DeltaTable(events_path(warehouse))
    # other's two, the two compactions' files merged by tiers into one per database, the last commit's two
    assert len(dt.file_uris()) == 2 + 2 + 2
    assert committed_position(warehouse, channel).last_seq == 28
    # appended, compacted or merged by tiers: seq, binlog_pos and event_time delta-encoded, no dictionary
    from tests.support.landed import assert_delta_encoded

    assert_delta_encoded(events_path(warehouse))


def test_the_events_table_keeps_few_files_however_long_a_writer_runs(warehouse, monkeypatch):
    """Each compaction's merged file would stay: a day of the service made 10,000 of them, and every read
    and open of the table costs more with each. They are merged by tiers, per channel."""
    from rpl_sql.pipeline import writer as W
    from rpl_sql.pipeline.canonical_rows import Batch

    monkeypatch.setattr(W, "COMPACT_EVERY", 2)

    def batch(w):
        b = Batch(w.channel, "binlog")
        b.add("0-1-1", "binlog.000001", 400, "write_rows", db_name="d", table_name="t",
              rows=json.dumps([{"after": {"id": w.last_seq}}]), time_us=0)
        return b.to_table(w.last_seq + 1)

    other = EventsWriter(warehouse, "other").open()
    w = EventsWriter(warehouse, "a'b").open()
    for _ in range(60):
        w.commit(batch(w), {"source": "binlog"})
        other.commit(batch(other), {"source": "binlog"})
    dt = DeltaTable(events_path(warehouse))
    files = [f for f in dt.file_uris()]
    assert sum("channel=a%27b/" in f or "channel=a'b/" in f for f in files) <= 2, files  # 30 compactions
    assert sum("channel=other/" in f for f in files) <= 2, files
    assert [r["seq"] for r in landed(warehouse, "a'b")] == list(range(1, 61))
    assert [r["seq"] for r in landed(warehouse, "other")] == list(range(1, 61))
    assert committed_position(warehouse, "a'b").last_seq == 60


def test_concurrent_ingests_never_duplicate(sources, warehouse):
    m1, _, _ = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
               *[f"INSERT INTO d.t VALUES ({i})" for i in range(300)])
    outcomes = []

    def run():
        try:
            outcomes.append(ingest_channel(warehouse, "a", batch_rows=50).landed)
        except ConcurrentIngestError:
            outcomes.append("refused")

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = landed(warehouse, "a")
    assert [r["seq"] for r in rows] == list(range(1, 603))
    assert len({(r["binlog_file"], r["binlog_pos"]) for r in rows}) == 602
    assert sorted(outcomes, key=str) in ([0, 602], [602, "refused"])


# ------------------------------------------------------------------ crash safety

def _big_workload(m, transactions: int) -> None:
    conn = m.connect()
    try:
        with conn.cursor() as cur:
            for sql in ("CREATE DATABASE big", "CREATE TABLE big.r (id INT PRIMARY KEY, v VARCHAR(40))",
                        "CREATE TABLE big.s (id INT PRIMARY KEY, n INT)"):
                cur.execute(sql)
            for i in range(transactions):
                cur.execute("SET SESSION binlog_format=" + ("ROW" if i % 3 else "STATEMENT"))
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO big.r VALUES ({i}, 'value {i}')")
                cur.execute(f"INSERT INTO big.s VALUES ({i}, {i})")
                if i % 5 == 0:
                    cur.execute(f"UPDATE big.r SET v = 'u' WHERE id = {i}")
                cur.execute("COMMIT")
                if i % 400 == 399:
                    cur.execute("FLUSH BINARY LOGS")
    finally:
        conn.close()


def test_sigkill_at_random_points_neither_loses_nor_duplicates(sources, warehouse):
    m1, _, _ = sources
    _big_workload(m1, 1000)
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "rpl_sql.cli", "ingest", "--channel", "a", "--warehouse", warehouse,
           "--batch-rows", "60", "-q"]
    rng = random.Random(20240601)
    log_dir = Path(events_path(warehouse)) / "_delta_log"

    def commits() -> int:
        return len(list(log_dir.glob("*.json"))) if log_dir.is_dir() else 0

    kills, completed, seen = 0, False, []
    for attempt in range(6):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if attempt < 5:
            # SIGKILL after 0-4 more commits plus 0-0.1 s: during start-up, just after a commit, mid-batch...
            # (a short window: with 0.4 s, a fast machine finished the ingest before the third kill)
            target, deadline = commits() + rng.randint(0, 4), time.monotonic() + 120
            while proc.poll() is None and commits() < target and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.1))
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
        proc.wait(timeout=120)
        out, err = proc.communicate()
        if proc.returncode == -signal.SIGKILL:
            pos = committed_position(warehouse, "a") if log_dir.is_dir() else None
            seen.append(pos.last_seq if pos else 0)
            continue
        assert proc.returncode == 0, err.decode()
        completed = True
        break
    print("committed seq at each kill:", seen)
    assert completed and kills >= 3
    assert len(set(seen)) >= 2, seen          # the kills hit different points of the run
    rows = landed(warehouse, "a")
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))       # gapless, no duplicate seq
    clean = warehouse + "_clean"
    rpl_sql.connect(clean).execute(m1.channel_sql("a"))
    report = ingest_channel(clean, "a")
    clean_rows = landed(clean, "a")
    assert at_end(report.end, m1, clean_rows)
    by_pos = Counter((r["binlog_file"], r["binlog_pos"]) for r in rows)
    assert max(by_pos.values()) == 1                                       # nothing duplicated
    assert set(by_pos) == {(r["binlog_file"], r["binlog_pos"]) for r in clean_rows}  # nothing lost
    assert shape(rows) == shape(clean_rows)
    dt = DeltaTable(events_path(warehouse))
    assert (dt.protocol().min_reader_version, dt.protocol().min_writer_version) == (1, 2)
    assert dt.schema().to_arrow() is not None and dt.to_pyarrow_table().schema.names == EVENTS_SCHEMA.names
    assert at_end(committed_position(warehouse, "a").binlog, m1, rows)
    assert ingest_channel(warehouse, "a").landed == 0


# ------------------------------------------------------------------ filtering at the source

def apply_like_the_applier(warehouse, channel):
    """A reference applier: decide every landed event with the channel's filters, settle what the source
    dropped, and add all hits to COUNTER in one state commit. Returns (positions of applied changes -- not
    transaction control, which a filtered transaction's GTID marker stands for --, GTIDs, counters)."""
    session = rpl_sql.connect(warehouse)
    rows = landed(warehouse, channel)
    state = session.state
    applied, gtids = set(), {r["gtid"] for r in rows}
    ch = state.channel(channel)
    evs = [(r, evaluator_event(r)) for r in rows if r["event_type"] != "gtid"]
    new_state, decisions = server.apply_events(state, channel, [e for _, e in evs])
    for (r, _), d in zip(evs, decisions):
        if d.apply and d.decided_by != "TRANSACTION_CONTROL":   # BEGIN/COMMIT of a filtered transaction
            applied.add((r["binlog_file"], r["binlog_pos"]))
    new_state, _, _ = settle_source_filtering(new_state, channel, source_filtered(warehouse, channel))
    snap = session.store.load()
    session.store.commit(snap, new_state, {"operation": "APPLY", "statement": "reference applier"})
    counters = {f: s.counter for f, s in session.state.channel(channel).filters.rows() if s.counter}
    assert ch is not None
    return applied, gtids, counters


def _noisy_workload(m, transactions: int) -> None:
    """90% of the transactions write the `noise` database, in both binlog formats."""
    conn = m.connect()
    try:
        with conn.cursor() as cur:
            for sql in ("CREATE DATABASE app", "CREATE DATABASE noise",
                        "CREATE TABLE app.orders (id INT PRIMARY KEY, v INT)",
                        "CREATE TABLE noise.log (id INT PRIMARY KEY, v INT)",
                        "CREATE TABLE noise.tmp (id INT PRIMARY KEY)"):
                cur.execute(sql)
            for i in range(transactions):
                cur.execute("SET SESSION binlog_format=" + ("ROW" if i % 2 else "STATEMENT"))
                cur.execute("USE noise" if i % 4 else "USE app")
                if i % 10 == 0:
                    cur.execute(f"INSERT INTO app.orders VALUES ({i}, {i})")
                elif i % 10 == 5:  # a transaction touching both: only the noise part may go
                    cur.execute("BEGIN")
                    cur.execute(f"INSERT INTO noise.log VALUES ({i}, 0)")
                    cur.execute(f"UPDATE app.orders SET v = v + 1 WHERE id = {i - 5}")
                    cur.execute("COMMIT")
                else:
                    cur.execute(f"INSERT INTO noise.log VALUES ({i}, {i})")
            cur.execute("USE app")
            cur.execute("CREATE TABLE noise.t2 (id INT)")      # DDL on noise, default db app
            cur.execute("DROP DATABASE noise")
    finally:
        conn.close()


def test_filtering_at_the_source_matches_the_applier(sources, warehouse):
    m1, _, _ = sources
    _noisy_workload(m1, 300)
    filters = "CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=('noise.%') FOR CHANNEL 'a'"
    full, pre = warehouse + "_full", warehouse + "_pre"
    for wh in (full, pre):
        rpl_sql.connect(wh).execute(m1.channel_sql("a") + "; " + filters)
    r_full = ingest_channel(full, "a")
    r_pre = ingest_channel(pre, "a", filter_at_source=True)
    assert r_full.dropped == 0 and r_pre.dropped > 0
    rows = landed(pre, "a")
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    markers = [r for r in rows if r["event_type"] == "gtid"]
    # one GTID marker per fully dropped transaction: 240 noise-only ones and 5 DDL on noise
    assert len(markers) == 240 + 5 and all(r["gtid"] and r["command"] is None for r in markers)
    assert len(rows) - len(markers) < 0.3 * r_full.landed and r_pre.bytes_written < r_full.bytes_written
    # the dropped events are exactly what the applier ignores: same applied set, same GTIDs, same COUNTERs
    a_full, g_full, c_full = apply_like_the_applier(full, "a")
    a_pre, g_pre, c_pre = apply_like_the_applier(pre, "a")
    assert a_full == a_pre and g_full == g_pre and c_full == c_pre
    assert c_pre[FilterType.WILD_IGNORE_TABLE] > 200
    # commit metadata says which filters were used
    (batch,) = source_filtered(pre, "a")
    assert batch.first_seq == 1 and batch.last_seq == len(rows) and batch.state_version is not None
    assert sum(batch.dropped.values()) == r_pre.dropped
    # a mixed transaction keeps its app part and its BEGIN/COMMIT
    mixed = [r for r in rows if r["gtid"] in {x["gtid"] for x in rows if x["command"] == "UPDATE"
                                                 or x["table_name"] == "orders"}]
    assert all(r["db_name"] in (None, "app") for r in mixed)


def test_changed_filters_and_prefiltered_ranges(sources, warehouse):
    m1, _, session = sources
    _noisy_workload(m1, 40)
    session.execute("CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=('noise.%') FOR CHANNEL 'a'")
    ingest_channel(warehouse, "a", filter_at_source=True)
    batches = source_filtered(warehouse, "a")
    # still ignored, by another rule: the range stays valid and the hits go to the rule in force now
    session.execute("CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=('noise.%', 'other.%'), "
                    "REPLICATE_IGNORE_TABLE=(noise.log) FOR CHANNEL 'a'")
    _, counts, rules = settle_source_filtering(session.state, "a", batches)
    assert counts[FilterType.IGNORE_TABLE] > 0 and counts[FilterType.WILD_IGNORE_TABLE] > 0
    assert rules[FilterType.IGNORE_TABLE] == {"noise.log": counts[FilterType.IGNORE_TABLE]}  # per rule, the same
    assert sum(rules[FilterType.WILD_IGNORE_TABLE].values()) == counts[FilterType.WILD_IGNORE_TABLE]
    # the filters no longer ignore noise: the applier must refuse the pre-filtered range
    session.execute("CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=(), REPLICATE_IGNORE_TABLE=() "
                    "FOR CHANNEL 'a'")
    with pytest.raises(SourceFilterConflictError):
        settle_source_filtering(session.state, "a", batches)
    assert source_filtered(warehouse, "a", after_seq=batches[-1].last_seq) == []
    # the replica service's applier (which reads the commits from the events table it follows) refuses it too
    from rpl_sql.pipeline.applier.local import LocalApplier

    session.execute("START REPLICA FOR CHANNEL 'a'")
    local = LocalApplier(warehouse, batch_size=50)
    with pytest.raises(ApplyError, match="re-ingest that range without filter_at_source"):
        while local.run_batch("a") is not None:
            pass
    assert session.state.channel("a").applier.seq < batches[-1].last_seq


def test_position_falls_back_to_the_data(sources, warehouse):
    m1, _, _ = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "INSERT INTO d.t VALUES (1)")
    r = ingest_channel(warehouse, "a")
    events = events_path(warehouse)
    DeltaTable(events).create_checkpoint()  # the log cleaned as Delta does, up to a checkpoint
    for f in Path(events, "_delta_log").glob("*.json"):
        f.unlink()
    pos = committed_position(warehouse, "a")
    last = landed(warehouse, "a")[-1]
    assert pos.version is None and pos.last_seq == r.last_seq
    assert pos.binlog == (last["binlog_file"], last["binlog_pos"]) and pos.binlog <= r.end


def test_xa_transactions_are_kept_whole(sources, warehouse):
    """A filtered row event inside XA is the applier's error (ER_XA_REPLICATION_FILTERS): never dropped early."""
    m1, _, session = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "SET SESSION binlog_format=ROW",
               "XA START 'x1'", "INSERT INTO d.t VALUES (1)", "XA END 'x1'", "XA PREPARE 'x1'", "XA COMMIT 'x1'",
               "INSERT INTO d.t VALUES (2)")
    session.execute("CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE=('d.%') FOR CHANNEL 'a'")
    ingest_channel(warehouse, "a", filter_at_source=True)
    rows = landed(warehouse, "a")
    assert [(r["event_type"], r["command"]) for r in rows] == [
        ("gtid", None),                                                    # CREATE DATABASE d: wild-ignored
        ("gtid", None),                                                    # CREATE TABLE d.t
        ("write_rows", None), ("query", "XA_END"), ("query", "XA_PREPARE"),  # the XA transaction, whole
        ("query", "XA_COMMIT"),
        ("gtid", None)]                                                    # the plain INSERT: dropped
    assert len({r["gtid"] for r in rows}) == 5                              # XA PREPARE and XA COMMIT: two


def test_rows_events_of_one_statement_land_as_one_row(sources, warehouse):
    """A big statement is logged as several Write_rows events under one Table_map (MySQL counts one filter
    hit): they land as one row holding every image, at the position of the last one."""
    m1, _, _ = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(200))",
               "SET SESSION binlog_format=ROW",
               "USE d", "INSERT INTO d.t SELECT seq, REPEAT('x', 200) FROM seq_1_to_2000",
               "UPDATE d.t SET v = 'y' WHERE id <= 3")
    r = ingest_channel(warehouse, "a")
    rows = landed(warehouse, "a")
    assert [(x["event_type"], x["command"]) for x in rows] == [
        ("query", "CREATE_DB"), ("query", "CREATE_TABLE"), ("write_rows", None), ("query", "COMMIT"),
        ("update_rows", None), ("query", "COMMIT")]
    images = json.loads(rows[2]["rows"])
    assert [i["after"]["id"] for i in images] == list(range(1, 2001))
    assert r.events_read > 2 + 4 + 3              # more than one Write_rows event was read for the INSERT
    assert rows[2]["binlog_pos"] < rows[3]["binlog_pos"] and len(json.loads(rows[4]["rows"])) == 3


def test_source_restart_reuses_table_ids(sources, warehouse):
    """After a restart the source hands out table ids again from the start: Table_maps cached by id
    (freeze_schema) must not survive into the new binlog file."""
    m1, _, _ = sources
    m1.execute("CREATE DATABASE d", "CREATE TABLE d.a (id INT PRIMARY KEY, x INT)",
               "CREATE TABLE d.b (k VARCHAR(10) PRIMARY KEY)", "SET SESSION binlog_format=ROW",
               "INSERT INTO d.a VALUES (1, 1)")
    m1.restart()
    m1.execute("SET SESSION binlog_format=ROW", "INSERT INTO d.b VALUES ('k1')", "INSERT INTO d.a VALUES (2, 2)")
    ingest_channel(warehouse, "a")
    got = [(r["binlog_file"], r["table_name"], json.loads(r["rows"])[0]["after"])
           for r in landed(warehouse, "a") if r["event_type"] == "write_rows"]
    assert got == [("binlog.000001", "a", {"id": 1, "x": 1}), ("binlog.000002", "b", {"k": "k1"}),
                   ("binlog.000002", "a", {"id": 2, "x": 2})]


def test_auto_position_resumes_by_gtid_on_another_source(mariadb_pair, warehouse, tmp_path):
    """SOURCE_AUTO_POSITION = 1: after a failover to a server holding the same transactions at other binlog
    positions (a MariaDB replica of the first source, with log_slave_updates), the receiver asks the new
    source for the GTIDs it lacks: every transaction lands once, in order. Without auto-position the same
    switch is refused (file positions of one server mean nothing on another)."""
    from tests.support.mariadb import LIGHT_OPTIONS, MariaDBServer

    s1 = mariadb_pair[0]
    s1.reset()
    s2 = MariaDBServer(tmp_path / "s2", server_id=232, extra_options=LIGHT_OPTIONS + ("--log-slave-updates",))
    s2.start()
    try:
        s1.execute("SET SESSION binlog_format=ROW", "CREATE DATABASE app",
                   "CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))",
                   *[f"INSERT INTO app.t VALUES ({i}, 'first {i}')" for i in range(5)])
        s2.execute("FLUSH BINARY LOGS")  # its copies of s1's transactions go to another file
        s2.follow(s1, "up")
        s2.caught_up(s1, "up")
        session = rpl_sql.connect(warehouse)
        plain = rpl_sql.connect(warehouse + "_plain")
        for sess, auto in ((session, 1), (plain, 0)):
            sess.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT={s1.port}, "
                         f"SOURCE_USER='root', SOURCE_AUTO_POSITION={auto} FOR CHANNEL 'a'")
        ingest_channel(warehouse, "a")
        ingest_channel(warehouse + "_plain", "a")
        s1.execute("SET SESSION binlog_format=ROW",
                   *[f"INSERT INTO app.t VALUES ({i}, 'second {i}')" for i in range(5, 10)],
                   "UPDATE app.t SET v = 'changed' WHERE id = 2")
        s2.caught_up(s1, "up")
        assert s1.binlog_end() != s2.binlog_end()  # the same transactions at other positions
        for sess in (session, plain):
            sess.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_PORT={s2.port} FOR CHANNEL 'a'")
        report = ingest_channel(warehouse, "a")
        with pytest.raises(IngestError, match="the source changed"):
            ingest_channel(warehouse + "_plain", "a")

        rows = landed(warehouse, "a")
        source_gtids = [g for (g,) in s1.execute("SELECT @@gtid_binlog_pos")][0]
        gtids = []
        for r in rows:
            if r["gtid"] and (not gtids or gtids[-1] != r["gtid"]):
                gtids.append(r["gtid"])
        domain, server_id, last = map(int, source_gtids.split("-"))
        assert gtids == [f"{domain}-{server_id}-{n}" for n in range(1, last + 1)]  # each once, in order
        writes = [json.loads(r["rows"])[0]["after"]["v"] for r in rows if r["event_type"] == "write_rows"]
        assert writes == [f"first {i}" for i in range(5)] + [f"second {i}" for i in range(5, 10)]
        assert [json.loads(r["rows"])[0]["after"]["v"] for r in rows if r["event_type"] == "update_rows"] == \
            ["changed"]
        assert report.gtid_set == source_gtids
        assert rows[-1]["binlog_file"] == s2.binlog_end()[0]  # positions now are the new source's
        result = session.execute("SHOW REPLICA STATUS FOR CHANNEL 'a'")[-1]
        assert dict(zip(result.columns, result.rows[0]))["Auto_Position"] == 1
    finally:
        s2.stop()
