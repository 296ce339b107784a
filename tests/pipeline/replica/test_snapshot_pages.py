"""Provisioning in keyset pages while the source keeps changing: rows inserted, updated, deleted and given new
primary keys during the copy, the copy interrupted between pages and resumed, and the stream from the first
watermark. The replica then equals a MariaDB replica that replayed the whole binlog, and no page was copied
twice."""
from __future__ import annotations

import json
import random
import threading
import time

import pytest
from deltalake import DeltaTable

from rpl_sql.pipeline.applier.local import LocalApplier
from rpl_sql.pipeline.binlog import ingest_channel
from rpl_sql.pipeline.replica.materialize import ReplicaTables
from rpl_sql.pipeline.replica.snapshot import SourceSnapshot
from rpl_sql.storage.replica_states import COPY_PROGRESS_KEY
from rpl_sql.storage.replica_catalog import COPYING, Catalog
from tests.pipeline.replica.test_replica import _normal, _ours
from tests.pipeline.replica.test_replica_service import fresh_pair
from tests.support.mariadb import SourceWorkload, churn_keyed_table, running

ROWS = 3000
MAX_CHANGES, PACE = 20_000, 0.002  # the workload's commits at most, and seconds between two


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with running(tmp_path_factory, 701, 702) as pair:
        yield pair


def _workload(src, stop: threading.Event, seed: int) -> SourceWorkload:
    """Seeded random changes to shop.t (see `churn_keyed_table`) and inserts into shop.keyless, one per commit."""
    def body(conn, cur):
        rnd, n = random.Random(seed), ROWS
        for _ in range(MAX_CHANGES):  # paced and bounded: the stream that follows stays small on a slow machine
            if stop.is_set():
                return
            n = churn_keyed_table(cur, rnd, "shop.t", n)
            cur.execute("INSERT INTO shop.keyless VALUES (%s, 'w')", (n % 7,))
            conn.commit()
            time.sleep(PACE)
    worker = SourceWorkload(src, body, "SET SESSION binlog_format = ROW")
    worker.start()
    return worker


def _setup(warehouse, src, oracle):
    session = fresh_pair(warehouse, src, oracle, "REPLICATE_REWRITE_DB = ((shop, crm))",
                         {"replicate_rewrite_db": "shop->crm"}, start="")
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE shop", "USE shop",  # rewrite needs USE
                "CREATE TABLE t (id INT PRIMARY KEY, k INT, v VARCHAR(30))",
                f"INSERT INTO t SELECT seq, seq % 10, CONCAT('v', seq) FROM seq_1_to_{ROWS}",
                "CREATE TABLE keyless (a INT, b TEXT)", "INSERT INTO keyless VALUES (1, 'x'), (1, 'x')")
    return session


def _stop_mid_table(pr):
    if pr.table == "shop.t" and not pr.finished and pr.rows >= 1000:
        raise KeyboardInterrupt  # a crash between two pages


def _apply_all(warehouse):
    ingest_channel(warehouse, "a")
    local, tables = LocalApplier(warehouse), ReplicaTables(warehouse, "a")
    while (rec := local.run_batch("a")) is not None:
        tables.catch_up(rec.end, handed=local.last_applied)


def _page_commits(warehouse) -> list[int]:
    """The running row count each page commit of crm.t recorded, oldest first."""
    cat = Catalog.load(warehouse, "a")
    hist = DeltaTable(cat.data_path(cat.table("crm", "t"))).history()
    return [json.loads(h[COPY_PROGRESS_KEY])["rows"] for h in reversed(hist) if COPY_PROGRESS_KEY in h]


def test_a_paged_copy_under_writes_interrupted_and_resumed_equals_a_replica_of_the_whole_binlog(
        warehouse, servers):
    src, oracle = servers
    session = _setup(warehouse, src, oracle)
    stop = threading.Event()
    worker = _workload(src, stop, seed=54)
    try:
        with pytest.raises(KeyboardInterrupt):
            SourceSnapshot(warehouse, "a", batch_rows=250, progress=_stop_mid_table).run()
        assert Catalog.load(warehouse, "a").table("crm", "t").state == COPYING
        before = _page_commits(warehouse)
        SourceSnapshot(warehouse, "a", batch_rows=250).run()
    finally:
        stop.set()
        worker.join(30)
    after = _page_commits(warehouse)
    assert after[:len(before)] == before and len(after) > len(before)
    assert after == sorted(after) and len(set(after)) == len(after)  # each page once, resumed after the last
    cat = Catalog.load(warehouse, "a")
    assert cat.table("crm", "t").state is None and cat.table("crm", "t").exact_after > cat.table("crm", "t").since
    src.execute("SET SESSION binlog_format = ROW", "UPDATE shop.t SET v = 'late' WHERE id <= 50",
                "DELETE FROM shop.t WHERE id BETWEEN 51 AND 60")
    session.execute("START REPLICA FOR CHANNEL 'a'")
    _apply_all(warehouse)
    oracle.caught_up(src, "a")
    ours, theirs = _normal(_ours(warehouse, ["a"])), _normal(oracle.contents())
    assert len(ours[("crm", "t")]) > ROWS // 2
    assert ours[("crm", "t")] == theirs[("crm", "t")]
    assert ours == theirs


def test_a_channel_started_on_an_unfinished_copy_stops_instead_of_leaving_the_table_short(warehouse, servers):
    src, oracle = servers
    session = _setup(warehouse, src, oracle)
    with pytest.raises(KeyboardInterrupt):
        SourceSnapshot(warehouse, "a", batch_rows=250, progress=_stop_mid_table).run()
    session.execute("START REPLICA FOR CHANNEL 'a'")
    with pytest.raises(Exception, match="the copy of crm.t has not finished: run `rpl-sql snapshot"):
        _apply_all(warehouse)
