"""A filter change on a running replica keeps every table whole (WL#7057): a widening backfills the newly
applied tables from the source while the stream goes on and a workload changes them (inserts, updates,
deletes, primary-key changes; a keyed table, a keyless one, a database newly mapped by REPLICATE_REWRITE_DB),
and a narrowing leaves the tables it drops as they were, marked with the state version since which."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time

import pytest
from deltalake import DeltaTable

import rpl_sql
from rpl_sql.storage.delta import archive
from rpl_sql.storage.replica_catalog import BACKFILLING, UNREPLICATED, Catalog
from rpl_sql.storage.replica_states import COPY_DONE_KEY, COPY_PROGRESS_KEY, copy_progress
from rpl_sql.storage.store import DeltaStore
from tests.pipeline.replica.test_replica import _normal, _ours
from tests.pipeline.replica.test_replica_service import (caught_up, killed_and_restarted, start_service, status,
                                                         stop_service, wait_for)
from tests.support.mariadb import SourceWorkload, churn_keyed_table, running

ROWS = 4000
MAX_CHANGES, PACE = 40_000, 0.002  # the workload's commits at most, and seconds between two


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    with running(tmp_path_factory, 811) as (server,):
        yield server


def _workload(src, stop: threading.Event, seed: int) -> SourceWorkload:
    """Seeded changes to every table about to be applied (shop.t: see `churn_keyed_table`), and to one already
    applied, one commit each."""
    def body(conn, cur):
        rnd, n = random.Random(seed), ROWS
        for _ in range(MAX_CHANGES):  # paced and bounded: the stream stays small on a slow machine
            if stop.is_set():
                return
            n = churn_keyed_table(cur, rnd, "shop.t", n)
            k = rnd.randint(1, n)
            if k % 2:
                cur.execute("INSERT INTO shop.bag VALUES (%s, 'w')", (k % 7,))
            else:
                cur.execute("DELETE FROM shop.bag WHERE a = %s LIMIT 1", (k % 7,))
            cur.execute("UPDATE src.c SET n = n + 1 WHERE id = %s", (k % 500 + 1,))
            cur.execute("INSERT INTO hr.people VALUES (%s, 'p') ON DUPLICATE KEY UPDATE name = 'q'", (k,))
            conn.commit()
            time.sleep(PACE)
    worker = SourceWorkload(src, body, "SET SESSION binlog_format = ROW")
    worker.start()
    return worker


def _fill(src, rows: int, bag_rows: int) -> None:
    """shop.t (`rows` keyed rows), shop.bag (no key), src.c (to be mapped to crm) and hr.people, the one table
    replicated from the start."""
    src.reset()
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE shop", "CREATE DATABASE src",
                "CREATE DATABASE hr", "CREATE TABLE shop.t (id INT PRIMARY KEY, k INT, v VARCHAR(30))",
                f"INSERT INTO shop.t SELECT seq, seq % 10, CONCAT('v', seq) FROM shop.seq_1_to_{rows}",
                "CREATE TABLE shop.bag (a INT, b TEXT)",
                f"INSERT INTO shop.bag SELECT seq % 7, 'x' FROM shop.seq_0_to_{bag_rows} WHERE seq > 0",
                "CREATE TABLE src.c (id INT PRIMARY KEY, n BIGINT)", "INSERT INTO src.c SELECT seq, 0 FROM "
                "src.seq_1_to_500", "CREATE TABLE hr.people (id INT PRIMARY KEY, name TEXT)",
                "INSERT INTO hr.people VALUES (1, 'a')")


def _expected(src) -> dict:
    """The source's tables as the widened channel maps them (src -> crm)."""
    out = {}
    for k, rows in src.contents().items():
        if isinstance(k, tuple) and rows is not None:
            out[("crm" if k[0] == "src" else k[0], k[1])] = rows
    return _normal(out)


def _serving(warehouse, src, do_db: str, *args):
    """Channel 'a' on `src` with REPLICATE_DO_DB = (`do_db`), started, and `rpl-sql replica` running, caught up:
    (session, service process)."""
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + f"; CHANGE REPLICATION FILTER REPLICATE_DO_DB = ({do_db}) FOR CHANNEL "
                    "'a'; START REPLICA FOR CHANNEL 'a'")
    proc = start_service(warehouse, *args)
    try:
        caught_up(warehouse, src)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return session, proc


def _backfill_path(warehouse: str, db: str, name: str) -> str | None:
    """Where the channel's table `db.name` is being copied to (None: not being backfilled)."""
    cat = Catalog.load(warehouse, "a")
    e = cat.table(db, name)
    return cat.data_path(e) if e is not None and e.state == BACKFILLING else None


def _copy_windows(path: str) -> list[tuple[tuple, tuple]]:
    """(since, exact_after) of each finished copy of the replica table at `path`, oldest first."""
    done = [json.loads(i[COPY_DONE_KEY]) for i in archive.history(DeltaTable(path)) if COPY_DONE_KEY in i]
    return [(tuple(d["since"]), tuple(d["exact_after"] or d["since"])) for d in reversed(done)]


def _log_tail(warehouse: str, lines: int = 40) -> str:
    with open(os.path.join(warehouse, "service.log"), encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def _settled_and_equal(warehouse, src, session, worker, stop: threading.Event, tables) -> dict:
    """Stop the workload, wait until no table is being copied and the service has applied the whole binlog:
    no SQL-thread error, and each of `tables` equal to the source's. The replica's tables, as compared."""
    stop.set()
    worker.join(30)
    wait_for(lambda: not any(e.state for e in Catalog.load(warehouse, "a").tables.values()),
             "the copies to finish", 180)
    caught_up(warehouse, src, timeout=120)
    assert status(session)["Last_SQL_Errno"] == 0, status(session)["Last_SQL_Error"]
    ours, theirs = _normal(_ours(warehouse, ["a"])), _expected(src)
    for key in tables:
        assert ours[key] == theirs[key], key
    return ours


def _explained_tables(session, change: str) -> dict:
    """EXPLAIN's table rows: (source db, table) -> (Table_change, Source_rows)."""
    res = session.execute("EXPLAIN " + change)[-1]
    assert not res.warnings, res.warnings
    return {(r[1], r[2]): (r[8], r[9]) for r in res.rows if r[8] is not None}


def test_widening_mid_stream_backfills_the_new_tables_whole_and_narrowing_keeps_them(warehouse, src):
    _fill(src, ROWS, 300)
    session, proc = _serving(warehouse, src, "hr")
    stop = threading.Event()
    try:
        worker = _workload(src, stop, seed=7057)
        # the workload under way (the binlog's end moved on): the copy below is made while it changes the tables
        start = src.binlog_end()
        wait_for(lambda: src.binlog_end() != start, "the workload")
        widen = "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (hr, shop, crm), REPLICATE_REWRITE_DB = ((src, crm)) " \
                "FOR CHANNEL 'a'"
        foreseen = _explained_tables(session, widen)
        assert {k: v[0] for k, v in foreseen.items()} == {
            ("shop", "t"): "BACKFILL", ("shop", "bag"): "BACKFILL", ("src", "c"): "BACKFILL INTO crm.c"}
        assert all(isinstance(v[1], int) for v in foreseen.values())  # InnoDB's estimates, as TABLE_ROWS has them
        session.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'")
        session.execute(widen)
        widened_at = DeltaStore(warehouse).version()
        session.execute("START REPLICA SQL_THREAD FOR CHANNEL 'a'")
        wait_for(lambda: any(e.state == BACKFILLING for e in Catalog.load(warehouse, "a").tables.values()),
                 "the backfills to start")
        seen_backfilling = wait_for(lambda: "Backfilling" in (status(session)["Replica_SQL_Running_State"] or "")
                                    or not any(e.state == BACKFILLING
                                               for e in Catalog.load(warehouse, "a").tables.values()),
                                    "SHOW REPLICA STATUS to say so")
        assert seen_backfilling
        ours = _settled_and_equal(warehouse, src, session, worker, stop,
                                  (("shop", "t"), ("shop", "bag"), ("crm", "c"), ("hr", "people")))
        with open(os.path.join(warehouse, "service.log")) as f:
            replayed = re.findall(r"shop\.t backfilled \((\d+) rows, (\d+) held events replayed\)", f.read())
        cat = Catalog.load(warehouse, "a")
        # the workload ran while the copy was made: the source's binlog moved between the copy's first page and
        # its last (its events were then held and replayed, or applied onto the copy after it, as the SQL
        # thread's pace had it: both end equal)
        window = _copy_windows(cat.data_path(cat.table("shop", "t")))
        assert replayed and window and window[-1][0] < window[-1][1], (replayed, window)
        assert all(cat.table(*k).since is not None for k in (("shop", "t"), ("shop", "bag"), ("crm", "c")))

        # narrowing: shop goes; its tables stay as they were and say since which version
        kept = ours[("shop", "t")]
        narrow = "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (hr, crm), REPLICATE_REWRITE_DB = ((src, crm)) " \
                 "FOR CHANNEL 'a'"
        assert {k: v[0] for k, v in _explained_tables(session, narrow).items()} == {
            ("shop", "t"): "STOP REPLICATING", ("shop", "bag"): "STOP REPLICATING"}
        session.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'; " + narrow)
        narrowed_at = DeltaStore(warehouse).version()
        session.execute("START REPLICA SQL_THREAD FOR CHANNEL 'a'")
        src.execute("SET SESSION binlog_format = ROW", "DELETE FROM shop.t WHERE id < 100",
                    "INSERT INTO hr.people VALUES (999999, 'late')")
        caught_up(warehouse, src, timeout=120)
        cat = Catalog.load(warehouse, "a")
        entry = cat.table("shop", "t")
        assert entry.state == UNREPLICATED and entry.copy["version"] >= narrowed_at > widened_at
        assert _normal(_ours(warehouse, ["a"]))[("shop", "t")] == kept
        assert status(session)["Last_SQL_Errno"] == 0
        shown = {(r[1], r[2]): r for r in session.execute("SHOW REPLICA TABLES FOR CHANNEL 'a'")[-1].rows}
        assert shown[("shop", "t")][3:5] == ("not replicated", entry.copy["version"])
        assert shown[("hr", "people")][3] == "replicating" and shown[("crm", "c")][3] == "replicating"

        # dropping what is no longer replicated: refused while the SQL thread runs, then done
        from rpl_sql.cli.maintenance import upkeep_main
        assert upkeep_main(["--warehouse", warehouse, "--drop-unreplicated", "--grace", "0"]) == 1
        session.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'")
        wait_for(lambda: status(session)["Replica_SQL_Running"] == "No", "the SQL thread to stop")
        path = Catalog.load(warehouse, "a").data_path(entry)
        assert upkeep_main(["--warehouse", warehouse, "--drop-unreplicated", "--grace", "0"]) == 0
        assert not os.path.exists(path) and Catalog.load(warehouse, "a").table("shop", "t") is None
        assert Catalog.load(warehouse, "a").table("hr", "people") is not None
    finally:
        stop.set()
        stop_service(proc, warehouse)


def test_source_side_filters_changed_on_a_running_replica_widen_and_narrow_its_tables(warehouse, src):
    """A channel's source-side filters (CHANGE REPLICATION SOURCE TO REPLICATE_*, WL#2387) take tables away before
    its own filters see them: dropping the rule backfills those tables while the workload runs, as a widening of
    its own filters does; setting it again leaves them as they were, no longer replicated."""
    _fill(src, ROWS, 300)
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a").replace(" FOR CHANNEL", ", REPLICATE_IGNORE_DB = (shop) FOR CHANNEL")
                    + "; CHANGE REPLICATION FILTER REPLICATE_DO_DB = (hr, shop) FOR CHANNEL 'a'; "
                    "START REPLICA FOR CHANNEL 'a'")
    proc = start_service(warehouse)
    stop = threading.Event()
    try:
        caught_up(warehouse, src)
        assert Catalog.load(warehouse, "a").table("shop", "t") is None  # never sent, never copied
        assert Catalog.load(warehouse, "a").table("hr", "people") is not None
        worker = _workload(src, stop, seed=2387)
        wait_for(lambda: src.binlog_end()[1] > 0, "the workload")
        session.execute("STOP REPLICA FOR CHANNEL 'a'; CHANGE REPLICATION SOURCE TO REPLICATE_IGNORE_DB = () "
                        "FOR CHANNEL 'a'; START REPLICA FOR CHANNEL 'a'")
        wait_for(lambda: Catalog.load(warehouse, "a").table("shop", "t") is not None, "shop.t to be backfilled")
        ours = _settled_and_equal(warehouse, src, session, worker, stop,
                                  (("shop", "t"), ("shop", "bag"), ("hr", "people")))

        kept = ours[("shop", "t")]
        session.execute("STOP REPLICA FOR CHANNEL 'a'; CHANGE MASTER 'a' TO REPLICATE_IGNORE_DB = 'shop'; "
                        "START REPLICA FOR CHANNEL 'a'")
        src.execute("SET SESSION binlog_format = ROW", "DELETE FROM shop.t WHERE id < 100",
                    "INSERT INTO hr.people VALUES (999999, 'late')")
        caught_up(warehouse, src, timeout=120)
        assert Catalog.load(warehouse, "a").table("shop", "t").state == UNREPLICATED
        now = _normal(_ours(warehouse, ["a"]))
        assert now[("shop", "t")] == kept and (999999, "late") in now[("hr", "people")]
        assert status(session)["Last_SQL_Errno"] == 0
    finally:
        stop.set()
        stop_service(proc, warehouse)


def test_backfills_sigkilled_ten_times_resume_and_end_whole(warehouse, src):
    """The service is SIGKILLed ten times while it backfills (small pages, so each life copies a few), with the
    workload running: every copy resumes after its last committed page, no page is copied twice, and the
    tables end equal to the source's."""
    rows = 60_000  # 240 pages: a loaded machine's slower kills (a dozen pages a life) still leave most uncopied
    _fill(src, rows, 0)
    args = ("--copy-page-rows", "250")
    session, proc = _serving(warehouse, src, "hr", *args)
    stop = threading.Event()
    try:
        worker = _workload(src, stop, seed=2387)
        session.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'; CHANGE REPLICATION FILTER "
                        "REPLICATE_DO_DB = (hr, shop) FOR CHANNEL 'a'; START REPLICA SQL_THREAD FOR CHANNEL 'a'")
        path = wait_for(lambda: _backfill_path(warehouse, "shop", "t"), "shop.t to be backfilled")
        kills, last, lives = 0, -1, []

        def past(last: int) -> tuple[int] | None:  # cheap (one table's log), so the kill follows a page closely
            got = copy_progress(path) or {}
            assert "exact_after" not in got and not (got == {} and last >= 0), f"copy done after {kills} kills"
            return (int(got["rows"]),) if got and int(got["rows"]) > last else None
        while kills < 10:
            last, = wait_for(lambda: past(last), "the backfill to make progress", 60)
            lives.append(last)
            proc = killed_and_restarted(proc, warehouse, *args)
            kills += 1
        _settled_and_equal(warehouse, src, session, worker, stop, (("shop", "t"), ("shop", "bag"), ("hr", "people")))
        # read as the product reads it: delta-rs's own history() can skip or misnumber commits the service's
        # archiver moved meanwhile
        hist = archive.history(DeltaTable(path))
        counts = [(h["version"], json.loads(h[COPY_PROGRESS_KEY])["rows"]) for h in reversed(hist)
                  if COPY_PROGRESS_KEY in h]
        rows_seen = {n for _, n in counts}
        back = [(a, b) for a, b in zip(counts, counts[1:]) if b[1] <= a[1]]  # each page once: rows only grow
        # a bare bool, so pytest prints no list diff after the message (CI's report keeps an output's tail)
        whole = not back and counts[-1][1] > rows // 2
        assert whole, (f"copy commits where the rows did not grow, (version, rows) before and after: {back[:5]}; "
                       f"rows at each kill {lives}; the copy's {len(counts)} commits end {counts[-3:]}; the "
                       f"service's log:\n" + _log_tail(warehouse))
        assert kills == 10
        with open(os.path.join(warehouse, "service.log"), encoding="utf-8") as f:
            said = f.read()
        # each life that reached the copy took it up at a committed page (a life killed before it did, because
        # its predecessor's last page landed after the poll read, says nothing)
        resumed = [int(n) for n in re.findall(r"shop\.t: its copy resumes after (\d+) rows", said)]
        assert resumed and resumed == sorted(resumed) and set(resumed) <= {0, *rows_seen} \
            and "copied from its start" not in said, (resumed, _log_tail(warehouse))
    finally:
        stop.set()
        stop_service(proc, warehouse)


def test_resync_copies_chosen_tables_again_while_the_stream_runs(warehouse, src):
    """RESYNC REPLICA TABLE (and `rpl-sql resync`): a replica table someone damaged by hand is copied from the
    source again, with a workload running, and ends equal to the source's; its request is in the state's history
    and survives the state table's round trip."""
    from rpl_sql.cli.commands import resync_main
    from rpl_sql.storage.state_table import state_from_table, state_to_table

    _fill(src, ROWS, 50)
    session, proc = _serving(warehouse, src, "hr, shop")
    stop = threading.Event()
    try:
        cat = Catalog.load(warehouse, "a")
        DeltaTable(cat.data_path(cat.table("shop", "t"))).delete("id <= 500")  # the damage
        DeltaTable(cat.data_path(cat.table("hr", "people"))).delete()
        assert _normal(_ours(warehouse, ["a"]))[("shop", "t")] != _expected(src)[("shop", "t")]
        worker = _workload(src, stop, seed=99)
        session.execute("RESYNC REPLICA TABLE shop.t FOR CHANNEL 'a'")
        assert resync_main(["--warehouse", warehouse, "--channel", "a", "hr.people", "shop.nosuch"]) == 0
        state = session.state
        assert [r[1:] for r in state.channel("a").resync] == [("shop", "t"), ("hr", "people"), ("shop", "nosuch")]
        assert state_from_table(state_to_table(state)).channel("a").resync == state.channel("a").resync
        wait_for(lambda: Catalog.load(warehouse, "a").resync_done == 2, "the requests to be taken")
        _settled_and_equal(warehouse, src, session, worker, stop, (("shop", "t"), ("shop", "bag"), ("hr", "people")))
        assert any("RESYNC REPLICA TABLE" in (c.metadata.get("statement") or "")
                   for c in DeltaStore(warehouse).history(5))
        with open(os.path.join(warehouse, "service.log")) as f:
            assert "RESYNC REPLICA TABLE shop.nosuch: no source table" in f.read()
    finally:
        stop.set()
        stop_service(proc, warehouse)


def test_a_spark_applier_run_backfills_what_a_widening_applies(spark, warehouse, src):
    """`rpl-sql apply --tables` (the Spark applier, which `rpl-sql replica --master` runs batch by batch) keeps
    the tables whole across a widening too: the run fills the newly applied tables from the source, replays what
    it held onto them, and ends with every table equal to the source's. Old rows are updated, deleted and
    re-keyed on both sides of the change, so a table that started empty would stop the run with 1032."""
    from rpl_sql.cli.commands import apply_main
    from rpl_sql.pipeline.binlog import ingest_channel

    _fill(src, 2000, 50)
    session = rpl_sql.connect(warehouse)
    session.execute(src.channel_sql("a") + "; CHANGE REPLICATION FILTER REPLICATE_DO_DB = (hr) FOR CHANNEL 'a'; "
                    "START REPLICA FOR CHANNEL 'a'")
    run = ["--warehouse", warehouse, "--channel", "a", "--tables", "-S"]
    ingest_channel(warehouse, "a")
    assert apply_main(run) == 0
    old_rows = ("UPDATE shop.t SET v = 'before' WHERE id % 5 = 0", "DELETE FROM shop.t WHERE id % 7 = 0",
                "UPDATE shop.t SET id = id + 100000 WHERE id % 11 = 0", "DELETE FROM shop.bag WHERE a = 3",
                "UPDATE src.c SET n = n + 1 WHERE id < 100")
    src.execute("SET SESSION binlog_format = ROW", *old_rows)
    session.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'; CHANGE REPLICATION FILTER REPLICATE_DO_DB = "
                    "(hr, shop, crm), REPLICATE_REWRITE_DB = ((src, crm)) FOR CHANNEL 'a'; "
                    "START REPLICA SQL_THREAD FOR CHANNEL 'a'")
    src.execute("SET SESSION binlog_format = ROW", *(s.replace("before", "after") for s in old_rows),
                "INSERT INTO shop.bag VALUES (9, 'new')", "INSERT INTO hr.people VALUES (2, 'b')")
    ingest_channel(warehouse, "a")
    assert apply_main(run) == 0
    cat = Catalog.load(warehouse, "a")
    assert not any(e.state for e in cat.tables.values())
    assert all(cat.table(*k).since is not None for k in (("shop", "t"), ("shop", "bag"), ("crm", "c")))
    ours, theirs = _normal(_ours(warehouse, ["a"])), _expected(src)
    for key in (("shop", "t"), ("shop", "bag"), ("crm", "c"), ("hr", "people")):
        assert ours[key] == theirs[key], key
    assert status(session)["Last_SQL_Errno"] == 0
