"""End to end: two real MariaDB sources -> per-channel filters set with SQL -> ingest -> apply.

Channel 'a' reads server 1 and lands everything; channel 'b' reads server 2 with filtering at the source. The
workloads mix row- and statement-based events, multi-table and cross-database statements, database DDL and a
rewritten database. What the applier produced is compared with MySQL's semantics three ways:

* spot checks written from the spec (the cross-database statement judged on its default database, the
  rewritten row landing in the new database, events dropped at the source never landing);
* every event: the applied set, target database and deciding rule equal the reference evaluator run over
  *everything the source logged* (for 'b', a second, unfiltered ingest of the same binlog), and so do the
  COUNTERs -- events dropped at the source are counted, once;
* positions and GTIDs: each channel's applier position is its last event, SHOW REPLICA STATUS shows the
  source binlog coordinates of the last event, and Executed_Gtid_Set equals the sources' own
  @@gtid_binlog_pos (ignored transactions are executed too, as MySQL commits them empty).
"""
from __future__ import annotations

import pytest
from deltalake import DeltaTable

import rpl_sql
from rpl_sql.server.applier_state import ApplyError
from rpl_sql.pipeline.applier import apply
from rpl_sql.spark.deltaread import read_delta
from rpl_sql.pipeline.events import ROW_EVENT_TYPES, applied_path, events_path
from rpl_sql.pipeline.binlog import ingest_channel
from rpl_sql.filters.rules import TYPES

from tests.support.landed import expected_applied, landed
from tests.support.mariadb import two_channels

pytest.importorskip("pymysqlreplication", reason="pip install '.[ingest]' (mysql-replication, pymysql)")
pytestmark = pytest.mark.filterwarnings("ignore:'db' is deprecated:DeprecationWarning")

FILTERS = """
CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((crm, crm_a)), REPLICATE_DO_DB = (shop, crm_a),
    REPLICATE_WILD_IGNORE_TABLE = ('shop.tmp%') FOR CHANNEL 'a';
CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (scratch), REPLICATE_WILD_DO_TABLE = ('inv.%', 'log%.events'),
    REPLICATE_IGNORE_TABLE = (inv.secret) FOR CHANNEL 'b';
START REPLICA;
"""

WORKLOAD_1 = [
    "CREATE DATABASE shop", "CREATE DATABASE crm", "CREATE DATABASE other", "USE shop",
    "CREATE TABLE orders (id INT PRIMARY KEY, amount DECIMAL(8,2))",
    "CREATE TABLE tmp_import (id INT PRIMARY KEY)",
    "CREATE TABLE crm.customers (id INT PRIMARY KEY, name VARCHAR(20))",       # cross-database DDL
    "CREATE TABLE other.t (id INT PRIMARY KEY)",
    "SET SESSION binlog_format=ROW",
    "INSERT INTO orders VALUES (1, 10.00), (2, 20.00)",
    "INSERT INTO tmp_import VALUES (1)",
    "INSERT INTO crm.customers VALUES (1, 'ann'), (2, 'bo')",                  # rewritten to crm_a
    "INSERT INTO other.t VALUES (1)",
    "UPDATE orders JOIN crm.customers ON orders.id = customers.id SET orders.amount = 11, customers.name = 'cy'",
    "BEGIN", "INSERT INTO orders VALUES (3, 30)", "INSERT INTO other.t VALUES (2)", "COMMIT",
    "SET SESSION binlog_format=STATEMENT",
    "USE other", "INSERT INTO shop.orders VALUES (4, 40)",                     # judged on 'other': ignored
    "USE shop", "INSERT INTO other.t VALUES (3)",                              # judged on 'shop': applied
    "USE crm", "UPDATE customers SET name = 'dee' WHERE id = 1",               # crm -> crm_a: applied
    "USE shop", "UPDATE orders JOIN crm.customers ON orders.id = customers.id SET orders.amount = 12",
    "DELETE FROM tmp_import",
    "CREATE DATABASE crm2", "ALTER DATABASE other CHARACTER SET utf8mb4", "DROP DATABASE other",
]

WORKLOAD_2 = [
    "SET SESSION gtid_domain_id = 2",
    "CREATE DATABASE inv", "CREATE DATABASE scratch", "CREATE DATABASE logs1",
    "CREATE TABLE inv.items (id INT PRIMARY KEY, qty INT)", "CREATE TABLE inv.secret (id INT PRIMARY KEY)",
    "CREATE TABLE scratch.t (id INT PRIMARY KEY)", "CREATE TABLE logs1.events (id INT PRIMARY KEY)",
    "CREATE TABLE logs1.other (id INT PRIMARY KEY)",
    "SET SESSION binlog_format=ROW",
    "INSERT INTO inv.items VALUES (1, 5), (2, 6)",
    "INSERT INTO inv.secret VALUES (1)",
    "INSERT INTO scratch.t VALUES (1)",
    "INSERT INTO logs1.events VALUES (1)",
    "INSERT INTO logs1.other VALUES (1)",
    "BEGIN", "INSERT INTO inv.items VALUES (3, 7)", "INSERT INTO scratch.t VALUES (2)", "COMMIT",
    "UPDATE inv.items JOIN scratch.t ON items.id = t.id SET items.qty = 0, t.id = t.id + 10",
    "SET SESSION binlog_format=STATEMENT",
    "USE inv", "UPDATE items SET qty = qty + 1",
    "USE scratch", "INSERT INTO inv.items VALUES (9, 9)",                      # ignored by IGNORE_DB
    "USE inv", "UPDATE items JOIN secret ON items.id = secret.id SET items.qty = 0",
    "DROP DATABASE scratch",
]


def ident(r) -> tuple:
    """An event's identity in the source binlog, the same whichever warehouse it landed in."""
    return (r["binlog_file"], r["binlog_pos"], r["event_type"], r["db_name"], r["table_name"], r["command"])


def reference(state, channel, rows):
    """MySQL's verdicts over every event the source logged: ({ident: (applied_db, decided_by)}, counters)."""
    after, applied = expected_applied(state, channel, rows, key=ident)
    ch = after.channel(channel)
    return applied, {t.value: ch.filters[t].counter for t in TYPES if ch.filters[t].counter}


@pytest.fixture
def pipeline(mariadb_pair, warehouse):
    """Both sources reset and loaded; channel 'a' (server 1) and 'b' (server 2) configured with SQL."""
    session = two_channels(mariadb_pair, warehouse, FILTERS)
    m1, m2 = mariadb_pair
    m1.execute(*WORKLOAD_1)
    m2.execute(*WORKLOAD_2)
    return m1, m2, session


def test_two_sources_ingest_and_apply_like_a_mysql_replica(spark, warehouse, pipeline):
    m1, m2, session = pipeline
    configured = session.state
    full = warehouse + "_unfiltered"  # what 'b' looks like without filtering at the source
    rpl_sql.connect(full).execute(m2.channel_sql("b"))
    ra = ingest_channel(warehouse, "a")
    rb = ingest_channel(warehouse, "b", filter_at_source=True)
    ingest_channel(full, "b")
    assert ra.dropped == 0 and rb.dropped > 0

    report = apply(spark, warehouse)
    assert {c.channel: c.status for c in report.channels} == {"a": "applied", "b": "applied"}
    out = [r.asDict() for r in read_delta(spark, applied_path(warehouse)).collect()]
    after = session.refresh()
    for channel, source_rows in (("a", landed(warehouse, "a")), ("b", landed(full, "b"))):
        want, want_counts = reference(configured, channel, source_rows)
        mine = landed(warehouse, channel)
        # a transaction dropped whole at the source lands as its GTID alone: MySQL would have applied only
        # its BEGIN/COMMIT (an empty transaction), which the marker stands for
        markers = {r["gtid"] for r in mine if r["event_type"] == "gtid"}
        empty = {ident(r) for r in source_rows if r["gtid"] in markers}
        assert all(want[i][1] == "TRANSACTION_CONTROL" for i in empty if i in want)
        want = {i: v for i, v in want.items() if i not in empty}
        got = {ident(r): (r["applied_db"], r["decided_by"]) for r in out if r["channel"] == channel}
        assert got == want, channel
        ch = after.channel(channel)
        assert {t.value: ch.filters[t].counter for t in TYPES if ch.filters[t].counter} == want_counts, channel
        rep = report.channel(channel)
        assert (rep.events, rep.applied + rep.ignored + rep.gtid_only) == (len(mine), len(mine))
        assert rep.source_dropped == (rb.dropped if channel == "b" else 0)
        assert ch.applier.seq == mine[-1]["seq"]
        res = session.execute(f"SHOW REPLICA STATUS FOR CHANNEL '{channel}'")[0]
        status = dict(zip(res.columns, res.rows[0]))
        assert (status["Relay_Source_Log_File"], status["Exec_Source_Log_Pos"]) == (
            mine[-1]["binlog_file"], mine[-1]["binlog_pos"])

    # spot checks from the spec, independent of the evaluator
    by_text = {r["statement"]: r for r in out if r["event_type"] == "query"}
    assert "INSERT INTO shop.orders VALUES (4, 40)" not in by_text      # default db 'other' decides
    assert by_text["INSERT INTO other.t VALUES (3)"]["applied_db"] == "shop"
    assert by_text["UPDATE customers SET name = 'dee' WHERE id = 1"]["applied_db"] == "crm_a"
    assert "INSERT INTO inv.items VALUES (9, 9)" not in by_text                # IGNORE_DB scratch
    rows_a = {(r["db_name"], r["table_name"], r["applied_db"]) for r in out
              if r["channel"] == "a" and r["event_type"] in ROW_EVENT_TYPES}
    assert rows_a == {("shop", "orders", "shop"), ("crm", "customers", "crm_a")}
    rows_b = {(r["db_name"], r["table_name"]) for r in out
              if r["channel"] == "b" and r["event_type"] in ROW_EVENT_TYPES}
    assert rows_b == {("inv", "items"), ("logs1", "events")}
    # dropped at the source: never landed, but their transactions' GTIDs are there
    kept_b = landed(warehouse, "b")
    assert not [r for r in kept_b if r["db_name"] in ("scratch",) or r["table_name"] in ("secret", "other")]
    assert {r["gtid"] for r in kept_b} == {r["gtid"] for r in landed(full, "b")}

    # GTIDs: every transaction of both sources is executed, applied or not
    executed = status["Executed_Gtid_Set"]
    sources = sorted(m.execute("SELECT @@gtid_binlog_pos")[0][0] for m in (m1, m2))
    assert sorted(executed.split(",")) == sorted(",".join(sources).split(","))

    # a second run has nothing to do and changes nothing
    again = apply(spark, warehouse)
    assert {c.status for c in again.channels} == {"up to date"}
    assert session.refresh() == after


def test_applier_refuses_a_source_filtered_range_the_filters_would_now_apply(spark, warehouse, pipeline):
    """Events dropped at the source are not in the table: if today's filters would apply them, stop."""
    _, _, session = pipeline
    ingest_channel(warehouse, "b", filter_at_source=True)
    session.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'b'; "
                    "CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = () FOR CHANNEL 'b'; "
                    "START REPLICA SQL_THREAD FOR CHANNEL 'b'")
    before = session.refresh()
    with pytest.raises(ApplyError, match="re-ingest that range without filter_at_source"):
        apply(spark, warehouse, ["b"])
    assert session.refresh() == before
    assert DeltaTable(events_path(warehouse)).version() >= 0
    assert not DeltaTable.is_deltatable(applied_path(warehouse))
