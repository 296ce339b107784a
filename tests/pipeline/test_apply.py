"""The applier job (rpl_sql.pipeline.applier) and the Delta reader it uses (rpl_sql.spark.deltaread).

Events tables are built directly with delta-rs in the canonical schema; every applier result is compared
with the reference evaluator run over the same events (`server.apply_events`): which events are applied,
into which database, decided by which rule, and the COUNTERs.
"""
from __future__ import annotations

import hashlib
import itertools
import os
from pathlib import Path
import random
import signal
import subprocess
import sys
import textwrap
import time
from urllib.parse import unquote
from dataclasses import replace
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st
from deltalake import DeltaTable, write_deltalake
from tests.support.landed import evaluator_event, expected_applied

from rpl_sql import MySQLError, Session
from rpl_sql.server import execute as server
from rpl_sql.server.applier_state import ApplyError, BatchRecord, applier_status, record_batch, slot_signature
from rpl_sql.server.gtid_set import GtidSet
from rpl_sql.filters.evaluate import COMMANDS, DROP_TEMPORARY_IF_EXISTS, RowEvent, TableRef, decide, statement_event
from rpl_sql.pipeline.applier import job as A
from rpl_sql.pipeline.applier import apply, arrow_write, spark_write
from rpl_sql.pipeline.applier.shapes import APPLIED_SCHEMA, app_id, derive_hits
from rpl_sql.pipeline.events import EVENTS_SCHEMA, PARTITION_BY, ROW_EVENT_TYPES, applied_path, events_path
from rpl_sql.filters.rules import TYPES, Filters
from rpl_sql.filters.rules import FilterType as T
from rpl_sql.spark.deltaread import read_delta
from rpl_sql.filters.state import ApplierPosition, Channel, ServerState
from rpl_sql.language.statements import ShowReplicaStatus
from rpl_sql.storage.store import DeltaStore

UUID1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID2 = "5f22fa47-71ca-11e1-9e33-c80aa9429563"


# ---------------------------------------------------------------- building events

class Log:
    """Canonical event rows per channel with gapless seq, transactions sharing one GTID."""

    def __init__(self):
        self.rows: list[dict] = []
        self.seq: dict[str, int] = {}
        self.gno: dict[str, int] = {}

    def _row(self, channel, event_type, gtid, **kw):
        seq = self.seq[channel] = self.seq.get(channel, 0) + 1
        row = {f.name: None for f in EVENTS_SCHEMA}
        row.update(channel=channel, seq=seq, gtid=gtid, binlog_file="binlog.000001", binlog_pos=1000 + 100 * seq,
                   event_type=event_type, event_time=datetime(2024, 5, 1, tzinfo=timezone.utc), source="binlog")
        row.update(kw)
        if event_type in ROW_EVENT_TYPES:
            row["filter_db"] = row["db_name"]
            row.setdefault("rows", '[{"after": {"id": 1}}]')
        else:
            row["filter_db"] = row["default_db"] or ""
        self.rows.append(row)
        return row

    def next_gtid(self, channel, flavor="mysql"):
        n = self.gno[channel] = self.gno.get(channel, 0) + 1
        if flavor == "mysql":
            return f"{UUID1 if channel == 'ch1' else UUID2}:{n}"
        if flavor == "mariadb":
            return f"0-7-{n}"
        return None

    def rows_txn(self, channel, tables, flavor="mysql", ddb="app"):
        """BEGIN, one row event per (db, table), COMMIT: a row-based transaction."""
        g = self.next_gtid(channel, flavor)
        self._row(channel, "query", g, command="BEGIN", statement_kind="TRANSACTION", default_db=ddb, statement="BEGIN")
        for i, (db, tbl) in enumerate(tables):
            self._row(channel, ROW_EVENT_TYPES[i % 3], g, db_name=db, table_name=tbl)
        self._row(channel, "query", g, command="COMMIT", statement_kind="TRANSACTION", default_db=ddb,
                  statement="COMMIT")

    def stmt(self, channel, command, ddb, tables=(), flavor="mysql", kind="DML", text=None):
        """One statement-based event in its own transaction (DDL is, DML gets BEGIN/COMMIT around it)."""
        g = self.next_gtid(channel, flavor)
        tl = [{"db": d, "name": n, "updating": u} for d, n, u in tables]
        if kind == "DML":
            self._row(channel, "query", g, command="BEGIN", statement_kind="TRANSACTION", default_db=ddb)
        self._row(channel, "query", g, command=command, statement_kind=kind, default_db=ddb, tables=tl,
                  statement=text or command)
        if kind == "DML":
            self._row(channel, "query", g, command="COMMIT", statement_kind="TRANSACTION", default_db=ddb)

    def marker(self, channel, flavor="mysql"):
        """A transaction ingest dropped at the source: only its GTID is left."""
        self._row(channel, "gtid", self.next_gtid(channel, flavor))

    def extend(self, more: "Log") -> None:
        """Append `more`'s events after this log's, each channel's seqs continuing and GTIDs renumbered apart."""
        for r in more.rows:
            r["seq"] += self.seq.get(r["channel"], 0)
            r["gtid"] = None if r["gtid"] is None else r["gtid"].replace(":", ":9").replace("0-7-", "0-7-9")
        self.rows += more.rows
        for ch, n in more.seq.items():
            self.seq[ch] = self.seq.get(ch, 0) + n

    def table(self, rows=None) -> pa.Table:
        return pa.Table.from_pylist(self.rows if rows is None else rows, schema=EVENTS_SCHEMA)


def land(warehouse, log: Log, rows=None):
    write_deltalake(events_path(warehouse), log.table(rows), partition_by=PARTITION_BY, mode="append")


def reference(state: ServerState, rows):
    """What the applier must produce, from the reference evaluator: (state with counters, {(ch, seq): row})."""
    applied = {}
    for name in sorted({r["channel"] for r in rows}):
        mine = sorted((r for r in rows if r["channel"] == name), key=lambda r: r["seq"])
        state, got = expected_applied(state, name, mine, key=lambda r, name=name: (name, r["seq"]))
        applied.update(got)
    return state, applied


def counters(state: ServerState):
    return {(c.name, t.value): c.filters[t].counter for c in state.channels for t in TYPES if c.filters[t].counter}


def rule_hits(state: ServerState):
    """The per-rule hits behind each COUNTER (their last-hit times aside); they add up to it."""
    out = {}
    for c in state.channels:
        for t in TYPES:
            slot = c.filters[t]
            assert sum(n for _, n, _ in slot.rule_hits) == slot.counter, (c.name, t, slot)
            if slot.rule_hits:
                out[(c.name, t.value)] = {v: n for v, n, _ in slot.rule_hits}
    return out


def applied_rows(spark, warehouse):
    """The applied events' keys and verdicts, read by Spark or, with spark None, by delta-rs (which reads the
    default channel's partition value '' back as NULL)."""
    if spark is None:
        t = DeltaTable(applied_path(warehouse)).to_pyarrow_table(columns=["channel", "seq", "applied_db",
                                                                          "decided_by"])
        return [((r["channel"] or "", r["seq"]), (r["applied_db"], r["decided_by"])) for r in t.to_pylist()]
    rows = read_delta(spark, applied_path(warehouse)).select("channel", "seq", "applied_db", "decided_by").collect()
    return [((r.channel, r.seq), (r.applied_db, r.decided_by)) for r in rows]


def gtid_set(rows, channel):
    s = GtidSet()
    for r in rows:
        if r["channel"] == channel and r["gtid"]:
            s = s.union(GtidSet.parse(r["gtid"]))
    return str(s)


SETUP = """
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h0' FOR CHANNEL '';
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h1' FOR CHANNEL 'ch1';
CHANGE REPLICATION SOURCE TO SOURCE_HOST='h2' FOR CHANNEL 'ch2';
CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1, db9), REPLICATE_WILD_DO_TABLE = ('db%.t1%', 'db1.x\\_%')
    FOR CHANNEL 'ch1';
CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((db2, db22), (app, app2)), REPLICATE_IGNORE_TABLE = (db22.t9),
    REPLICATE_WILD_IGNORE_TABLE = ('%.tmp%', 'db3.%') FOR CHANNEL 'ch2';
CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (mysql), REPLICATE_DO_TABLE = (app.t1, db1.t2) FOR CHANNEL '';
"""


def setup_server(warehouse, start=True, script=SETUP):
    ticks = itertools.count(1_700_000_000_000_000, 1_000_000)
    s = Session(warehouse, clock=lambda: next(ticks))
    s.execute(script)
    if start:
        s.execute("START REPLICA")
    return s


def mixed_log(seed=7, scale=1) -> Log:
    """Row and statement events across channels: multi-table and cross-db statements, database DDL, rewrite,
    DROP TRIGGER / DROP TEMPORARY TABLE IF EXISTS / SET / XA START, GTID markers, MySQL and MariaDB GTIDs."""
    rnd = random.Random(seed)
    log = Log()
    dbs = ["db1", "db2", "db3", "db9", "app", "mysql", "db11", "Db1"]
    tables = ["t1", "t2", "t9", "t11", "tmp_x", "x_y", "xzy"]
    for _ in range(60 * scale):
        ch = rnd.choice(["", "ch1", "ch2"])
        flavor = "mariadb" if ch == "ch2" else "mysql"
        r = rnd.random()
        if r < 0.45:
            log.rows_txn(ch, [(rnd.choice(dbs), rnd.choice(tables)) for _ in range(rnd.randint(1, 4))], flavor)
        elif r < 0.7:
            cmd = rnd.choice(["INSERT", "UPDATE", "UPDATE_MULTI", "DELETE_MULTI", "INSERT_SELECT", "REPLACE"])
            tl = [(rnd.choice([None, *dbs]), rnd.choice(tables), rnd.random() < 0.6) for _ in range(rnd.randint(0, 3))]
            log.stmt(ch, cmd, rnd.choice(["", *dbs]), tl, flavor)
        elif r < 0.85:
            cmd = rnd.choice(["CREATE_DB", "ALTER_DB", "DROP_DB"])
            log.stmt(ch, cmd, rnd.choice(dbs), (), flavor, kind="DATABASE_DDL")
        elif r < 0.93:
            cmd = rnd.choice(["CREATE_TABLE", "DROP_TRIGGER", DROP_TEMPORARY_IF_EXISTS, "SET_OPTION", "XA_START",
                              "GRANT" if False else "OTHER"])
            tl = [] if cmd in ("SET_OPTION", "OTHER", "XA_START") else [(None, rnd.choice(tables), True)]
            if cmd == "DROP_TRIGGER" and rnd.random() < 0.3:
                tl = []
            log.stmt(ch, cmd, rnd.choice(dbs), tl, flavor, kind="TABLE_DDL")
        else:
            log.marker(ch, flavor)
    return log


# ---------------------------------------------------------------- pure parts (no Spark)

def test_gtid_set_parse_union_format():
    s = GtidSet.parse(f"{UUID1}:1-5:7,{UUID2}:3")
    assert str(s.union(GtidSet.parse(f"{UUID1}:6,{UUID1}:8-9"))) == f"{UUID1}:1-9,{UUID2}:3"
    assert f"{UUID1}:4" in s and f"{UUID1}:6" not in s
    m = GtidSet.parse("0-1-100,1-2-5").union(GtidSet.parse("0-3-90,1-2-7"))
    assert str(m) == "0-1-100,1-2-7" and "0-1-99" in m
    assert str(GtidSet.parse(f"{UUID1.upper()}:tag:1-3")) == f"{UUID1}:tag:1-3"
    assert str(GtidSet.parse("")) == ""


def random_filters(rnd: random.Random, lctn: int) -> Filters:
    names = ["db1", "DB1", "db2", "db3", "", "app"]
    f = Filters()
    pick = lambda pool, k: tuple(rnd.sample(pool, rnd.randint(0, k)))  # noqa: E731
    f = f.configure(T.DO_DB, pick(names, 2) if rnd.random() < 0.4 else (), "X", 1)
    f = f.configure(T.IGNORE_DB, pick(names, 2), "X", 1)
    do_tables = pick(["db1.t1", "db2.t2", "DB1.T1", "db22.t1"], 2) if rnd.random() < 0.4 else ()
    f = f.configure(T.DO_TABLE, do_tables, "X", 1)
    f = f.configure(T.IGNORE_TABLE, pick(["db1.t2", "db3.t1", "db22.t9"], 2), "X", 1)
    f = f.configure(T.WILD_DO_TABLE, pick(["db%.t1%", "db1.%", "%.x\\_%", "d_2.%"], 2) if rnd.random() < 0.4 else (),
                    "X", 1)
    f = f.configure(T.WILD_IGNORE_TABLE, pick(["%.tmp%", "db3.%", "DB%.%"], 2), "X", 1)
    f = f.configure(T.REWRITE_DB, pick([("db2", "db22"), ("db1", "db1"), ("DB2", "x"), ("app", "App")], 2), "X", 1)
    return f


def test_derive_hits_equals_the_evaluator():
    """The applier's hit rule reproduces evaluate.decide(...).hits exactly, over random filters and events."""
    rnd = random.Random(1)
    commands = sorted(COMMANDS | {DROP_TEMPORARY_IF_EXISTS, "", None}, key=str)
    names = ["db1", "DB1", "db2", "db22", "db3", "", "app", "x"]
    tables = ["t1", "t2", "T1", "t9", "tmp", "x_y"]
    checked = 0
    for _ in range(300):
        lctn = rnd.choice([0, 1])
        f = random_filters(rnd, lctn)
        for _ in range(40):
            if rnd.random() < 0.5:
                ev, kind, cmd, db = RowEvent(rnd.choice(names), rnd.choice(tables)), "row", None, None
                db = ev.db
            else:
                cmd, db = rnd.choice(commands), rnd.choice(names + [None])
                refs = [TableRef(rnd.choice([None] + names), rnd.choice(tables), rnd.random() < 0.6)
                        for _ in range(rnd.randint(0, 3))]
                ev, kind = statement_event(cmd, db, refs), "query"
            d = decide(f, ev, lctn)
            got = derive_hits(f, kind, cmd, db, d.apply, d.decided_by, lctn)
            assert sorted(h.value for h in got) == sorted(h.value for h in d.hits), (f, ev, d)
            checked += 1
    assert checked == 12000


def _rec(**kw):
    base = dict(channel="c", start=0, end=10, events=10, applied=6, ignored=3, gtid_only=1,
                counts={"REPLICATE_DO_DB": 5, "REPLICATE_REWRITE_DB": 2}, filters={}, by_rule={},
                gtids=f"{UUID1}:1-3", last_file="binlog.000002", last_pos=400, events_version=3)
    base.update(kw)
    return BatchRecord(**base)


def test_record_batch_once_and_only_for_unchanged_filters():
    f = Filters().configure(T.DO_DB, ("db1",), "X", 10).configure(T.REWRITE_DB, (("a", "b"),), "X", 10)
    state = ServerState(channels=(Channel("c", options=(("SOURCE_HOST", "h"),), filters=f),))
    sig = {t.value: slot_signature(f, t) for t in TYPES}
    s1 = record_batch(state, _rec(filters=sig))
    ch = s1.channel("c")
    assert (ch.filters[T.DO_DB].counter, ch.filters[T.REWRITE_DB].counter) == (5, 2)
    assert ch.applier == ApplierPosition(10, f"{UUID1}:1-3", "binlog.000002", 400)
    assert record_batch(s1, _rec(filters=sig)) == s1  # recorded once
    with pytest.raises(ApplyError, match="does not follow"):
        record_batch(s1, _rec(start=20, end=30, filters=sig))
    # DO_DB reconfigured (same values, new ACTIVE_SINCE) after the batch was decided: its count is gone
    f2 = f.configure(T.DO_DB, ("db1",), "X", 11)
    s2 = record_batch(state.with_channel(replace(state.channel("c"), filters=f2)), _rec(filters=sig))
    assert (s2.channel("c").filters[T.DO_DB].counter, s2.channel("c").filters[T.REWRITE_DB].counter) == (0, 2)
    s3 = record_batch(s1, _rec(start=10, end=12, gtids=f"{UUID1}:4,0-1-9", filters=sig, last_file=None,
                               last_pos=None))
    assert s3.channel("c").applier == ApplierPosition(12, f"{UUID1}:1-4,0-1-9", "binlog.000002", 400)
    assert record_batch(state.without_channel("c"), _rec(filters=sig)) == state.without_channel("c")


def test_applier_status_for_show_replica_status():
    state = ServerState(channels=(
        Channel("a", options=(("SOURCE_HOST", "h"),), applier=ApplierPosition(5, f"{UUID1}:1-5", "binlog.000003", 77)),
        Channel("b", options=(("SOURCE_HOST", "h"),), applier=ApplierPosition(2, "0-1-2"))))
    status = applier_status(state)
    assert status["a"] == {"executed_gtid_set": f"{UUID1}:1-5,0-1-2", "relay_source_log_file": "binlog.000003",
                           "exec_source_log_pos": 77}
    assert status["b"] == {"executed_gtid_set": f"{UUID1}:1-5,0-1-2"}
    out = server.show_replica_status(state, ShowReplicaStatus(text="", channel="a"), status)
    row = dict(zip(out.result.columns, out.result.rows[0]))
    assert (row["Executed_Gtid_Set"], row["Relay_Source_Log_File"], row["Exec_Source_Log_Pos"]) == (
        f"{UUID1}:1-5,0-1-2", "binlog.000003", 77)


def test_applier_position_round_trips_through_the_store(warehouse):
    store = DeltaStore(warehouse)
    pos = ApplierPosition(42, f"{UUID1}:1-42", "binlog.000009", 12345)
    store.transact(lambda s: (s.with_channel(Channel("x", applier=pos)), None), {"statement": "t"})
    assert store.load().state.channel("x").applier == pos













HOSTILE = ["3:a+", "-", "it's", "back\\slash", "`tick`", "a,b", "p%c", "u_s", "ünï", "MiXed", "", "Db1"]


def hostile_log(seed: int) -> Log:
    """mixed_log plus events whose names hold quotes, backslashes, backticks, commas, % and _, unicode and
    mixed case; statements with no tables, NULL default databases and unqualified tables."""
    rnd = random.Random(seed)
    log = mixed_log(seed)
    for _ in range(40):
        ch = rnd.choice(["", "ch1", "ch2"])
        flavor = "mariadb" if ch == "ch2" else "mysql"
        if rnd.random() < 0.5:
            log.rows_txn(ch, [(rnd.choice(HOSTILE), rnd.choice(HOSTILE)) for _ in range(rnd.randint(1, 3))], flavor,
                         ddb=rnd.choice(HOSTILE))
        else:
            tl = [(rnd.choice([None, *HOSTILE]), rnd.choice(HOSTILE), rnd.random() < 0.5)
                  for _ in range(rnd.randint(0, 2))]
            log.stmt(ch, rnd.choice(["INSERT", "UPDATE_MULTI", "DELETE"]), rnd.choice([None, *HOSTILE]), tl, flavor)
    return log


def land_in_commits(warehouse, log: Log, seed: int, rows=None, unsummarized=()):
    """Land `log` through the ingest's EventsWriter, each channel in commits of 1-4 whole transactions (so each
    commit carries its summary); the commits numbered in `unsummarized` go without one. Returns the commits."""
    from rpl_sql.pipeline import writer as W

    rnd = random.Random(seed)
    rows = log.rows if rows is None else rows
    n = 0
    for ch in sorted({r["channel"] for r in rows}):
        mine = sorted((r for r in rows if r["channel"] == ch), key=lambda r: r["seq"])
        txns = [list(g) for _, g in itertools.groupby(mine, key=lambda r: r["gtid"])]
        with W.EventsWriter(warehouse, ch) as w:
            while txns:
                k = rnd.randint(1, 4)
                part, txns = [r for t in txns[:k] for r in t], txns[k:]
                summary_of = W.summaries_.summary_of
                if n in unsummarized:
                    W.summaries_.summary_of = lambda table, seqs=None: None
                try:
                    w.commit(log.table(part), {"source": "binlog"})
                finally:
                    W.summaries_.summary_of = summary_of
                n += 1
    return n


def test_commit_summaries_hold_the_shapes_gtids_and_last_position():
    from rpl_sql.pipeline import summary

    log = hostile_log(seed=21)
    for ch in ("", "ch1", "ch2"):
        rows = [r for r in log.rows if r["channel"] == ch]
        s = summary.parse({**summary.metadata(summary.summary_of(log.table(rows))), "first_seq": "1",
                           "last_seq": str(len(rows))})
        want: dict = {}
        for r in rows:
            key = (r["event_type"], r["db_name"], r["table_name"], r["command"], r["default_db"],
                   None if r["event_type"] != "query" or r["tables"] is None
                   else tuple((t["db"], t["name"], t["updating"]) for t in r["tables"]))
            n, lo, hi = want.get(key, (0, r["seq"], r["seq"]))
            want[key] = (n + 1, min(lo, r["seq"]), max(hi, r["seq"]))
        got = {(r["event_type"], r["db_name"], r["table_name"], r["command"], r["default_db"],
                None if r["tables"] is None else tuple((t["db"], t["name"], t["updating"]) for t in r["tables"])):
               (r["n"], r["lo"], r["hi"]) for r in s.shapes.to_pylist()}
        assert got == want and len(got) == s.shapes.num_rows
        assert str(s.gtids) == gtid_set(rows, ch)
        assert (s.last_file, s.last_pos) == (rows[-1]["binlog_file"], rows[-1]["binlog_pos"])
    # what the applier would refuse, or too much to carry: no summary (the applier's pass decides, or reports)
    bad = log.table([{**log.rows[0], "gtid": "0-x-1"}])
    assert summary.summary_of(bad) is None
    assert summary.metadata(summary.summary_of(log.table(log.rows[:1])))[summary.SHAPES]


def test_a_rollup_is_its_commits_summaries_merged():
    """What a compaction records for the commits it merged: the shapes of all their events (counts added, seq
    ranges widened), their GTIDs, the last one's position; nothing for commits that are not consecutive."""
    from rpl_sql.pipeline import summary

    log = hostile_log(seed=23)
    for ch in ("", "ch1", "ch2"):
        rows = [r for r in log.rows if r["channel"] == ch]
        cuts = sorted(random.Random(ch).sample(range(1, len(rows)), min(3, len(rows) - 1)))
        parts = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)])]
        rolled = summary.rollup([summary.summary_of(log.table(p)) for p in parts])
        whole = summary.summary_of(log.table(rows))
        assert (rolled.first_seq, rolled.last_seq, str(rolled.gtids), rolled.last_file, rolled.last_pos) == \
            (whole.first_seq, whole.last_seq, str(whole.gtids), whole.last_file, whole.last_pos)
        assert sorted(map(str, rolled.shapes.to_pylist())) == sorted(map(str, whole.shapes.to_pylist()))
        back = summary.parse({**summary.metadata(rolled), "first_seq": "1", "last_seq": "9"})
        assert back.shapes.equals(rolled.shapes) and str(back.gtids) == str(rolled.gtids)
        if len(parts) > 2:
            assert summary.rollup([summary.summary_of(log.table(p)) for p in (parts[0], parts[2])]) is None


_NAMES = st.sampled_from(HOSTILE + ["t", "db2"])
_TABLE_LISTS = st.one_of(st.none(), st.lists(st.tuples(st.none() | _NAMES, _NAMES, st.none() | st.booleans()),
                                             max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([*ROW_EVENT_TYPES, "query"]), st.none() | _NAMES, st.none() | _NAMES,
       st.none() | st.sampled_from(sorted(COMMANDS | {DROP_TEMPORARY_IF_EXISTS})).map(str.lower) | _NAMES,
       st.none() | _NAMES, _TABLE_LISTS)
def test_a_shapes_decision_key_is_its_events(et, db, table, command, default_db, tables):
    """decide_shapes keys a shape without building its event (only a key not decided yet gets one): the key
    must be the event's, for row and statement shapes alike."""
    from rpl_sql.filters.evaluate import decision_key
    from rpl_sql.pipeline.applier.shapes import Shape

    refs = None if tables is None else tuple(TableRef(*t) for t in tables)
    s = Shape((et, db, table, command, default_db, None), refs, 1, 1, 1)
    assert s.decision_key() == decision_key(s.event())


@settings(max_examples=200, deadline=None)
@given(st.lists(_TABLE_LISTS, min_size=1, max_size=12), st.integers(0, 4))
def test_statement_tables_read_from_arrow_are_the_events_tables(lists, cut):
    """ShapeTable reads each statement's tables from the merged summaries, whatever their chunks: the same
    TableRefs as from the rows one by one, and tables_array gives the events table's lists back, NULL kept (a
    NULL `updating` too: Spark's write joins the events by their lists)."""
    from rpl_sql.pipeline.applier.shape_table import ShapeTable
    from rpl_sql.pipeline.applier.shapes import refs_of, tables_array
    from rpl_sql.pipeline.summary import SHAPES_SCHEMA

    rows = [None if x is None else [{"db": d, "name": n, "updating": u} for d, n, u in x] for x in lists]
    shapes = pa.Table.from_pylist([{"event_type": "query", "command": "INSERT", "default_db": "d", "tables": r,
                                    "n": 1, "lo": i + 1, "hi": i + 1} for i, r in enumerate(rows)], SHAPES_SCHEMA)
    cut = min(cut, len(rows))
    table = ShapeTable(pa.concat_tables([shapes.slice(0, cut), shapes.slice(cut)]))
    got = table.shapes(range(len(table)))
    assert [s.min_seq for s in got] == list(range(1, len(rows) + 1))
    assert [s.tables for s in got] == [refs_of(r) for r in rows]
    assert tables_array(got).to_pylist() == rows


def test_too_many_shapes_for_a_commit_go_without_a_summary(monkeypatch):
    from rpl_sql.pipeline import summary

    log = hostile_log(seed=2)
    monkeypatch.setattr(summary, "MAX_ENCODED", 100)
    assert summary.summary_of(log.table()) is None


# ---------------------------------------------------------------- the applier, in-process

def check_against_reference(spark, warehouse, log: Log, state_before: ServerState):
    want_state, want_rows = reference(state_before, log.rows)
    got = applied_rows(spark, warehouse)
    if spark is not None:  # the two readers agree (the cluster tests read with delta-rs: no session there)
        assert sorted(applied_rows(None, warehouse)) == sorted(got)
    assert len(got) == len(set(k for k, _ in got)), "duplicate applied events"
    assert dict(got) == want_rows
    after = DeltaStore(warehouse).load().state
    assert counters(after) == counters(want_state)
    assert rule_hits(after) == rule_hits(want_state)
    for ch in ("", "ch1", "ch2"):
        assert after.channel(ch).applier.seq == log.seq.get(ch, 0)
        assert after.channel(ch).applier.executed_gtid_set == gtid_set(log.rows, ch)
    return after


def colliding_key_hash(monkeypatch, caplog):
    """Shapes share join hashes (two values for all of them): the write must see the extra rows and write the
    batch again, joined on the key columns null-safe. Returns a check that it did."""
    from pyspark.sql import functions as F

    monkeypatch.setattr(spark_write, "key_hash", lambda *cols: F.pmod(F.xxhash64(*cols), F.lit(2)))
    caplog.set_level("INFO", logger=spark_write.__name__)
    return lambda: any("share a key hash" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("engine,collide", [("arrow", False), ("spark", False), ("spark", True)],
                         ids=["arrow", "spark-hash-join", "spark-colliding-hashes"])
def test_apply_matches_the_reference_evaluator(spark, warehouse, caplog, monkeypatch, engine, collide):
    rewrote = colliding_key_hash(monkeypatch, caplog) if collide else None
    setup_server(warehouse)
    log = mixed_log()
    land(warehouse, log)
    before = DeltaStore(warehouse).load().state
    seen = []
    report = apply(spark, warehouse, verify="all", progress=seen.append, engine=engine)
    after = check_against_reference(spark, warehouse, log, before)
    assert rewrote is None or rewrote()
    assert {c.channel for c in report.channels} == {"", "ch1", "ch2"}
    for c in report.channels:
        mine = [r for r in log.rows if r["channel"] == c.channel]
        assert c.events == len(mine) and c.gtid_only == sum(r["event_type"] == "gtid" for r in mine)
        assert c.applied + c.ignored + c.gtid_only == c.events and c.status == "applied"
        assert c.counters == {t: n for (ch, t), n in counters(after).items() if ch == c.channel}
    assert len(seen) == 3 and "events/s" in str(seen[0])
    text = report.table()
    assert "Decided by" in text and "REPLICATE_DO_DB" in text
    # applied rows keep every event column, plus where and why
    df = read_delta(spark, applied_path(warehouse))
    assert df.columns == APPLIED_SCHEMA.names
    row = df.where("channel = 'ch2' AND event_type = 'write_rows' AND db_name = 'db2'").limit(1).collect()
    if row:
        assert row[0].applied_db == "db22" and row[0].rows.startswith("[")
    stmts = df.where("channel = '' AND tables IS NOT NULL AND size(tables) > 1").limit(1).collect()
    assert not stmts or isinstance(stmts[0].tables[0].name, str)
    # SHOW REPLICA STATUS through the hook
    status = applier_status(after)
    assert status["ch1"]["executed_gtid_set"].startswith(UUID1) and "0-7-" in status["ch1"]["executed_gtid_set"]
    last = max((r for r in log.rows if r["channel"] == "ch1"), key=lambda r: r["seq"])
    assert status["ch1"]["exec_source_log_pos"] == last["binlog_pos"]


@pytest.mark.parametrize("engine,batch_size,unsummarized,collide,compact_every", [
    ("arrow", None, (), False, 0), ("arrow", 70, (1, 4), False, 0), ("arrow", None, (), False, 3),
    ("arrow", 70, (1, 4), False, 2), ("spark", None, (), False, 0), ("spark", 70, (1, 4), False, 0),
    ("spark", None, (), True, 0)],
    ids=["arrow-one-batch", "arrow-batches-gaps", "arrow-rollups", "arrow-rollups-batches-gaps", "spark-one-batch",
         "spark-batches-gaps", "spark-colliding-hashes"])
def test_apply_from_commit_summaries_equals_the_reference(spark, warehouse, monkeypatch, caplog, engine, batch_size,
                                                          unsummarized, collide, compact_every):
    """Commits landed by the ingest's writer carry summaries: the applier decides from them, without its pass
    over the events, where they cover the batch; a commit without one (older rpl_sql) sends it to the pass.
    With compactions (`compact_every` commits), runs of commits are decided from the compactions' rollups."""
    from rpl_sql.pipeline import writer as W

    from rpl_sql.pipeline.applier import verdicts

    calls, decoded, by_id = [], [], []
    real, real_shapes, real_by_ids = A.aggregate, A.summarized_shapes, verdicts.Verdicts._by_ids

    def counted(ev, ch, sql):
        calls.append(ch.name)
        return real(ev, ch, sql)

    def counted_shapes(commits):
        decoded.append(len(commits))
        return real_shapes(commits)
    def counted_ids(self, events):
        got = real_by_ids(self, events)
        by_id.append(0 if got is None else got.events)
        return got
    monkeypatch.setattr(A, "aggregate", counted)
    monkeypatch.setattr(A, "summarized_shapes", counted_shapes)
    monkeypatch.setattr(verdicts.Verdicts, "_by_ids", counted_ids)
    monkeypatch.setattr(W, "COMPACT_EVERY", compact_every)
    rewrote = colliding_key_hash(monkeypatch, caplog) if collide else None
    setup_server(warehouse)
    log = hostile_log(seed=31)
    commits = land_in_commits(warehouse, log, seed=31, unsummarized=unsummarized)
    before = DeltaStore(warehouse).load().state
    report = apply(spark, warehouse, verify="all", batch_size=batch_size, engine=engine)
    check_against_reference(spark, warehouse, log, before)
    if compact_every and batch_size is None:  # each channel's commits: by rollups of 3, and the rest
        assert sum(decoded) < commits - 3
    if compact_every and engine == "arrow":  # the compacted events' verdicts taken by their shape ids
        assert sum(by_id) > len(log.rows) / 4
    assert rewrote is None or rewrote()
    assert sum(c.events for c in report.channels) == len(log.rows)
    assert (calls == []) == (not unsummarized)
    if batch_size is not None:  # batches of whole commits: as many as the batch size asks for, about
        assert sum(c.batches for c in report.channels) > 3
    # more events: the next run starts where the last one stopped, at a commit boundary
    cut = len(log.rows)
    log.extend(hostile_log(seed=32))
    calls.clear()
    land_in_commits(warehouse, log, seed=33, rows=log.rows[cut:])
    apply(spark, warehouse, verify="all", batch_size=batch_size, engine=engine)
    check_against_reference(spark, warehouse, log, before)
    assert calls == []


def test_a_compaction_stores_each_events_row_among_its_rollups_shapes(tmp_path, monkeypatch):
    """After the ingest's compaction every event carries `shape_id`, the row of its own shape (hostile names,
    NULL against '') in the rollup that compaction recorded; events not compacted yet carry NULL."""
    from rpl_sql.pipeline import summary, writer as W
    from rpl_sql.pipeline.ingest_position import channel_commits
    from rpl_sql.pipeline.shape_index import ShapeIndex

    monkeypatch.setattr(W, "COMPACT_EVERY", 3)
    wh = str(tmp_path / "wh")
    setup_server(wh)
    log = hostile_log(seed=37)
    land_in_commits(wh, log, seed=37)
    dt = DeltaTable(events_path(wh))
    events = dt.to_pyarrow_table()
    for ch in sorted({r["channel"] for r in log.rows}):
        rollups: list = []
        channel_commits(dt, ch, 0, rollups=rollups)
        mine = events.filter(pc.equal(events.column("channel"), ch)) if ch else \
            events.filter(pc.is_null(events.column("channel")))
        ids = mine.column("shape_id").to_pylist()
        seqs = mine.column("seq").to_pylist()
        parsed = [summary.parse(m) for _, m in rollups]
        assert parsed and all(r is not None for r in parsed)
        for r in parsed:
            inside = [i for i, q in enumerate(seqs) if r.first_seq <= q <= r.last_seq]
            rows = mine.take(inside)
            assert ShapeIndex(r.shapes).rows(rows).to_pylist() == rows.column("shape_id").to_pylist()
        covered = {q for r in parsed for q in range(r.first_seq, r.last_seq + 1)}
        assert all((i is None) == (q not in covered) for i, q in zip(ids, seqs))


@pytest.mark.parametrize("damage", ["another shape", "past the rollup"])
def test_shape_ids_that_lie_stop_the_apply_with_nothing_committed(tmp_path, monkeypatch, damage):
    """An event whose shape id names another shape of its rollup, or none, is refused: its channel's batch is
    not committed, its files are deleted, and its applier position stays."""
    import pyarrow.parquet as pq

    from rpl_sql.pipeline import writer as W

    monkeypatch.setattr(W, "COMPACT_EVERY", 2)
    wh = str(tmp_path / "wh")
    setup_server(wh)
    log = hostile_log(seed=43)
    land_in_commits(wh, log, seed=43)
    adds = pa.table(DeltaTable(events_path(wh)).get_add_actions(flatten=True)).to_pylist()
    for add in adds:
        path = os.path.join(events_path(wh), unquote(add["path"]))
        t = pq.read_table(path)
        ids = t.column("shape_id").to_pylist()
        if None in ids or len(set(ids)) < 2:
            continue
        ids[0] = 10 ** 6 if damage == "past the rollup" else next(i for i in ids if i != ids[0])
        pq.write_table(t.set_column(t.schema.get_field_index("shape_id"), "shape_id", pa.array(ids, pa.int32())),
                       path)
        channel = add["partition.channel"] or ""
        break
    else:
        pytest.fail("no compacted file with two shapes")

    def no_spark():
        raise AssertionError("summarised events need no Spark")
    turns, read_applied = [], arrow_write._applied
    monkeypatch.setattr(arrow_write, "_applied",
                        lambda *a: turns.append(sys.getswitchinterval()) or read_applied(*a))
    before = sys.getswitchinterval()
    with pytest.raises(ApplyError, match="shape id"):
        apply(no_spark, wh, verify="all", engine="arrow")
    assert turns and turns == pytest.approx([arrow_write.GIL_TURN] * len(turns))  # while the write threads run
    assert sys.getswitchinterval() == before
    assert DeltaStore(wh).load().state.channel(channel).applier.seq == 0
    applied = applied_path(wh)
    mine = ([r for r in applied_rows(None, wh) if r[0][0] == channel]
            if os.path.exists(os.path.join(applied, "_delta_log")) else [])
    assert mine == []
    hashed = hashlib.sha1(channel.encode("utf-8")).hexdigest()[:12]
    assert not os.path.exists(os.path.join(applied, "data", hashed)) or not any(
        f.endswith(".parquet") for _, _, fs in os.walk(os.path.join(applied, "data", hashed)) for f in fs)


def test_short_gil_turns_end_with_the_last_write_that_needs_them():
    """Writes in two threads, ending in either order: the switch interval is short while any runs and the
    caller's own once none does."""
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.002)
        for order in ((0, 1), (1, 0)):
            runs = [arrow_write._short_gil_turns(), arrow_write._short_gil_turns()]
            for r in runs:
                r.__enter__()
            for i in order:
                assert sys.getswitchinterval() == pytest.approx(arrow_write.GIL_TURN)
                runs[i].__exit__(None, None, None)
            assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(before)


def test_the_arrow_and_spark_engines_write_equal_applied_tables(spark, tmp_path):
    """Every column of every applied event, hostile names included, from events with and without summaries,
    in batches: the pyarrow write equals Spark's. And events that all carry summaries need no Spark at all."""
    tables = {}
    for engine in ("arrow", "spark"):
        wh = str(tmp_path / engine)
        setup_server(wh)
        log = hostile_log(seed=41)
        land_in_commits(wh, log, seed=41, unsummarized=(2,))
        apply(spark, wh, verify="all", batch_size=60, engine=engine)
        t = DeltaTable(applied_path(wh)).to_pyarrow_table()
        # each file's Delta statistics name its channel (the arrow engine's footers have none: it gives them)
        for add in pa.table(DeltaTable(applied_path(wh)).get_add_actions(flatten=True)).to_pylist():
            held = pq.read_table(os.path.join(applied_path(wh), unquote(add["path"])), columns=["channel"])
            assert {add["min.channel"], add["max.channel"]} == set(held.column("channel").to_pylist())
            assert add["null_count.channel"] == 0
        tables[engine] = t.cast(APPLIED_SCHEMA).sort_by([("channel", "ascending"), ("seq", "ascending")])
    assert tables["arrow"].num_rows > 100
    assert tables["arrow"].equals(tables["spark"])
    # the arrow engine's files (seq, binlog_pos and event_time delta-encoded, no dictionary) read by Spark's
    # own Parquet reader as delta-rs reads them
    from tests.support.landed import assert_delta_encoded

    assert_delta_encoded(applied_path(str(tmp_path / "arrow")))
    cols = ["channel", "seq", "binlog_pos", "event_time", "gtid", "db_name", "tables", "applied_db", "decided_by"]
    by_spark = read_delta(spark, applied_path(str(tmp_path / "arrow"))).select(*cols).toArrow()
    assert sorted(by_spark.to_pylist(), key=lambda r: (r["channel"] or "", r["seq"])) == \
        tables["arrow"].select(cols).to_pylist()

    def no_spark():
        raise AssertionError("the arrow engine started Spark for summarised events")

    wh = str(tmp_path / "no-spark")
    setup_server(wh)
    log = hostile_log(seed=42)
    before = DeltaStore(wh).load().state
    land_in_commits(wh, log, seed=42)
    apply(no_spark, wh, verify="all", engine="arrow")
    check_against_reference(None, wh, log, before)


def test_rerun_is_a_no_op_and_new_events_continue_in_batches(spark, warehouse):
    setup_server(warehouse)
    log = mixed_log(seed=11)
    cut = len(log.rows)
    land(warehouse, log)
    before = DeltaStore(warehouse).load().state
    apply(spark, warehouse)
    v_applied = DeltaTable(applied_path(warehouse)).version()
    v_state = DeltaStore(warehouse).version()
    again = apply(spark, warehouse, batch_size=25)
    assert all(c.events == 0 and c.status == "up to date" for c in again.channels)
    assert (DeltaTable(applied_path(warehouse)).version(), DeltaStore(warehouse).version()) == (v_applied, v_state)
    # more events land: the next run continues after the position, in batches cut at transaction ends
    log.extend(mixed_log(seed=12))
    land(warehouse, log, log.rows[cut:])
    report = apply(spark, warehouse, batch_size=45)
    assert sum(c.batches for c in report.channels) > 3
    check_against_reference(spark, warehouse, log, before)
    # batches end at transaction boundaries: every batch's last event ends its GTID's transaction
    dt = DeltaTable(applied_path(warehouse))
    ends = [(h[ "rpl_sql.apply"]["channel"], h["rpl_sql.apply"]["end"]) for h in dt.history() if "rpl_sql.apply" in h]
    by_key = {(r["channel"], r["seq"]): r for r in log.rows}
    for ch, end in ends:
        nxt = by_key.get((ch, end + 1))
        assert nxt is None or nxt["gtid"] is None or nxt["gtid"] != by_key[(ch, end)]["gtid"]


def test_refuses_a_channel_whose_sql_thread_is_stopped(spark, warehouse):
    s = setup_server(warehouse, start=False)
    s.execute("START REPLICA FOR CHANNEL 'ch1'; START REPLICA IO_THREAD FOR CHANNEL 'ch2'")
    log = mixed_log(seed=3)
    land(warehouse, log)
    with pytest.raises(MySQLError) as e:
        apply(spark, warehouse, ["ch1", "CH2"])
    assert (e.value.code, e.value.name) == (1199, "ER_REPLICA_NOT_RUNNING") and "'ch2'" in e.value.message
    assert not DeltaTable.is_deltatable(applied_path(warehouse))
    with pytest.raises(MySQLError, match="3074"):
        apply(spark, warehouse, ["nope"])
    # all channels: the running one is applied, the stopped ones are reported, not applied
    report = apply(spark, warehouse)
    assert report.channel("ch1").status == "applied"
    assert [(c.channel, c.status, c.events) for c in report.channels if c.channel != "ch1"] == [
        ("", "not running", 0), ("ch2", "not running", 0)]
    assert {k[0] for k, _ in applied_rows(spark, warehouse)} == {"ch1"}


def test_crash_between_the_two_commits_is_completed_from_the_metadata(spark, warehouse, monkeypatch):
    from rpl_sql.pipeline.applier import commits as commits_mod

    setup_server(warehouse)
    log = mixed_log(seed=5)
    land(warehouse, log)
    before = DeltaStore(warehouse).load().state
    calls = []
    real = commits_mod.BatchCommits.commit_state

    def crash(self, rec):
        calls.append(rec.channel)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the data commit and the state commit")
        return real(self, rec)

    monkeypatch.setattr(commits_mod.BatchCommits, "commit_state", crash)
    with pytest.raises(KeyboardInterrupt):
        apply(spark, warehouse, batch_size=10)
    monkeypatch.setattr(commits_mod.BatchCommits, "commit_state", real)
    half = calls[-1]
    dt = DeltaTable(applied_path(warehouse))
    state = DeltaStore(warehouse).load().state
    assert (dt.transaction_version(app_id(half)) or 0) > state.channel(half).applier.seq
    report = apply(spark, warehouse)  # the half-done batch completed, then the rest in one batch
    assert report.channel(half).recovered == 1
    check_against_reference(spark, warehouse, log, before)

    # counts of a half-done batch go only to filters not reconfigured since it was decided
    wh2 = warehouse + "2"
    s2 = setup_server(wh2)
    land(wh2, log)
    calls.clear()
    monkeypatch.setattr(commits_mod.BatchCommits, "commit_state", lambda self, rec: (_ for _ in ()).throw(
        KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        apply(spark, wh2, ["ch1"])
    monkeypatch.setattr(commits_mod.BatchCommits, "commit_state", real)
    s2.execute("STOP REPLICA FOR CHANNEL 'ch1'; CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1, db9) "
               "FOR CHANNEL 'ch1'")
    report = apply(spark, wh2, ["ch2"])  # recovery of ch1 is not asked for: ch1 stays half-done
    st = DeltaStore(wh2).load().state
    assert st.channel("ch1").applier.seq == 0
    with pytest.raises(MySQLError, match="1199"):
        apply(spark, wh2, ["ch1"])  # recovery runs first, then the stopped thread is refused
    st = DeltaStore(wh2).load().state
    assert st.channel("ch1").applier.seq == log.seq["ch1"]
    rec = next(h["rpl_sql.apply"] for h in DeltaTable(applied_path(wh2)).history()
               if h.get("rpl_sql.apply", {}).get("channel") == "ch1")
    assert rec["channel"] == "ch1" and rec["counts"]["REPLICATE_DO_DB"] > 0
    # DO_DB was reconfigured: its COUNTER restarted after the batch; the others got the batch's counts
    assert {t.value: st.channel("ch1").filters[t].counter for t in TYPES} == {
        t.value: 0 if t is T.DO_DB else rec["counts"].get(t.value, 0) for t in TYPES}


def test_malformed_events_stop_the_applier_before_any_commit(spark, warehouse):
    setup_server(warehouse)
    log = Log()
    log.rows_txn("ch1", [("db1", "t1")])
    log._row("ch1", "write_rows", f"{UUID1}:2", db_name="db1", table_name=None)
    land(warehouse, log)
    with pytest.raises(ApplyError, match="seq 4: cannot decide the malformed write_rows event"):
        apply(spark, warehouse, ["ch1"])
    assert DeltaStore(warehouse).load().state.channel("ch1").applier.seq == 0
    gap = Log()
    gap.rows_txn("ch2", [("db1", "t1")])
    rows = [r for r in gap.rows if r["seq"] != 2]
    land(warehouse, gap, rows)
    with pytest.raises(ApplyError, match="not gapless"):
        apply(spark, warehouse, ["ch2"])


@pytest.mark.parametrize("gtid", [f"{UUID1}:x", f"{UUID1}:0", "0-7", "0-7-x", "a-7-1", "0-x-1", "0-7-1-2", "0-7-0"])
def test_malformed_gtids_stop_the_applier_before_any_commit(spark, warehouse, gtid):
    setup_server(warehouse)
    log = Log()
    log.rows_txn("ch1", [("db1", "t1")])
    log._row("ch1", "gtid", gtid)
    land(warehouse, log)
    with pytest.raises(ApplyError, match="neither 'uuid:n' nor 'domain-server-n'"):
        apply(spark, warehouse, ["ch1"])
    assert DeltaStore(warehouse).load().state.channel("ch1").applier.seq == 0


def test_effective_database_mode_uses_the_reference_semantics(spark, warehouse):
    s = setup_server(warehouse, start=False)
    s.start(["--replicate-do-db=ch1:db1"])
    store = DeltaStore(warehouse)
    store.transact(lambda st: (replace(st, filter_mode="effective_database"), None), {"statement": "mode"})
    s.execute("START REPLICA FOR CHANNEL 'ch1'")
    log = Log()
    log.stmt("ch1", "INSERT", "db2", [("db1", "t1", True)])  # effective db of the table is db1: applied
    log.rows_txn("ch1", [("db2", "t1")])
    land(warehouse, log)
    apply(spark, warehouse, ["ch1"])
    got = dict(applied_rows(spark, warehouse))
    state = store.load().state
    for r in log.rows:
        d = decide(state.channel("ch1").filters, evaluator_event(r), 0, "effective_database")
        assert (("ch1", r["seq"]) in got) == d.apply


# ---------------------------------------------------------------- crash safety: SIGKILL a real run

CHILD = textwrap.dedent("""
    import os, random, sys, time
    sys.path.insert(0, {root!r})
    from rpl_sql.pipeline.applier import commits as C, job as A
    real_state, real_applied = C.BatchCommits.commit_state, C.BatchCommits.commit_applied

    def slow_applied(self, rec, actions):
        out = real_applied(self, rec, actions)
        print("DATA", rec.channel, rec.end, flush=True)
        time.sleep(random.uniform(0.2, 0.8))  # widen the window between the two commits
        return out

    C.BatchCommits.commit_applied = slow_applied
    spark = __import__("rpl_sql.spark.env", fromlist=["x"]).local_spark(
        app_name="kill-test", **{{"spark.ui.showConsoleProgress": "false"}})
    print("READY", flush=True)
    A.apply(spark, {wh!r}, batch_size={batch}, engine={engine!r})
    print("DONE", flush=True)
""")


@pytest.mark.slow
def test_sigkill_at_random_points_loses_nothing_and_counts_once(spark, warehouse, tmp_path):
    """Kill an applier process (and its JVM) at random moments, rerun until done: applied events have no gap
    and no duplicate per (channel, seq), and the COUNTERs equal those of the reference. The engines take
    turns, so each recovers what the other left half done."""
    setup_server(warehouse)
    log = mixed_log(seed=21, scale=3)
    land(warehouse, log)
    before = DeltaStore(warehouse).load().state
    rnd = random.Random(int(os.environ.get("RPL_SQL_KILL_SEED", "0")) or None)
    kills = 0
    # each attempt is killed: kill points follow progress, and work remains (20 batches; an attempt does a few)
    for attempt, engine in enumerate(["arrow", "spark", "arrow", "spark"]):
        script = tmp_path / f"child_{attempt}.py"
        script.write_text(CHILD.format(root=str(Path(__file__).resolve().parents[2]), wh=warehouse,
                                       batch=30, engine=engine))
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, start_new_session=True)
        try:
            assert proc.stdout.readline().strip() == "READY"
            # Kill points follow progress (DATA lines), not a clock, so a fast machine cannot finish the run
            # before the last kill. Attempt 0: right after a data commit, a half-done batch for sure. Later:
            # after 0-2 data commits plus up to 1 s: during registration, between the two commits, mid-batch.
            data_lines, delay = (1, 0.0) if attempt == 0 else (rnd.randint(0, 2), rnd.uniform(0, 1.0))
            while data_lines and (line := proc.stdout.readline()):
                data_lines -= line.startswith("DATA")
            time.sleep(delay)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the child and its JVM (same new session)
                kills += 1
            proc.wait()
        if attempt == 0:  # killed between the two commits: the applied table is ahead of the state
            st, dt = DeltaStore(warehouse).load().state, DeltaTable(applied_path(warehouse))
            assert any((dt.transaction_version(app_id(c)) or 0) > st.channel(c).applier.seq for c in ("", "ch1", "ch2"))
    assert kills >= 4
    apply(spark, warehouse)  # recovery, then the rest in one batch per channel
    check_against_reference(spark, warehouse, log, before)
    seqs = {}
    for (ch, seq), _ in applied_rows(spark, warehouse):
        seqs.setdefault(ch, []).append(seq)
    for ch, got in seqs.items():
        assert len(got) == len(set(got))


def test_cli_apply(spark, warehouse, capsys):
    from rpl_sql.cli.commands import apply_main as main

    s = setup_server(warehouse, start=False)
    s.execute("START REPLICA FOR CHANNEL 'ch1'")
    log = mixed_log(seed=9)
    land(warehouse, log)
    assert main(["--warehouse", warehouse, "--channel", "ch2"]) == 1
    assert "ERROR 1199 (HY000)" in capsys.readouterr().err
    assert main(["--warehouse", warehouse, "--batch-size", "0"]) == 0
    out = capsys.readouterr()
    assert "| ch1 " in out.out and "not running" in out.out and "Decided by" in out.out
    assert "[apply] channel 'ch1': batch 1" in out.err
    with pytest.raises(SystemExit):
        main(["--warehouse", warehouse, "--engine", "jvm"])
    assert "invalid choice: 'jvm'" in capsys.readouterr().err
    assert main(["--warehouse", warehouse, "--engine", "spark"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_the_local_engine_equals_the_spark_job(spark, warehouse, tmp_path):
    """LocalApplier (the replica service's applier, no Spark) writes the same applied events, COUNTERs,
    positions and GTIDs as the Spark job, batch size or not, and stops on the same malformed input."""
    from rpl_sql.pipeline.applier.local import LocalApplier

    other = str(tmp_path / "local_wh")
    log = mixed_log(seed=11, scale=3)
    for wh in (warehouse, other):
        setup_server(wh)
        land(wh, log)
    before = DeltaStore(other).load().state
    apply(spark, warehouse, engine="spark")
    local = LocalApplier(other, batch_size=7)
    batches = 0
    for ch in ("", "ch1", "ch2"):
        while local.run_batch(ch) is not None:
            batches += 1
    assert batches > 10
    check_against_reference(spark, other, log, before)
    assert sorted(applied_rows(spark, other)) == sorted(applied_rows(spark, warehouse))
    a, b = DeltaStore(warehouse).load().state, DeltaStore(other).load().state
    assert counters(a) == counters(b) and rule_hits(a) == rule_hits(b)
    assert [c.applier for c in a.channels] == [c.applier for c in b.channels]
    bad = Log()
    bad.rows_txn("ch1", [("db1", "t1")])
    bad._row("ch1", "gtid", "0-7-0")
    third = str(tmp_path / "bad_wh")
    setup_server(third)
    land(third, bad)
    with pytest.raises(ApplyError, match="neither 'uuid:n' nor 'domain-server-n'"):
        LocalApplier(third).run_batch("ch1")
    assert DeltaStore(third).load().state.channel("ch1").applier.seq == 0


def test_the_local_engine_compacts_its_batches_and_changes_no_row(warehouse, tmp_path, monkeypatch):
    """The service's applier rewrites every few of a channel's batches into one file (a predicate overwrite of
    their seqs, from the rows it kept): with three channels' batches interleaved, the applied table holds the
    same rows, positions and batch records as without compaction, in far fewer files."""
    from rpl_sql.pipeline.applier import commits as K
    from rpl_sql.pipeline.applier.local import LocalApplier

    plain = str(tmp_path / "plain")
    log = mixed_log(seed=5, scale=3)
    for wh in (warehouse, plain):
        setup_server(wh)
        land(wh, log)

    def run(wh):
        local, busy, batches = LocalApplier(wh, batch_size=5), ["", "ch1", "ch2"], 0
        while busy:
            for ch in list(busy):
                if local.run_batch(ch) is None:
                    busy.remove(ch)
                else:
                    batches += 1
        return batches

    monkeypatch.setattr(K, "COMPACT_EVERY", 0)
    assert run(plain) > 40
    monkeypatch.setattr(K, "COMPACT_EVERY", 4)
    run(warehouse)

    def rows(wh):
        t = DeltaTable(applied_path(wh)).to_pyarrow_table()
        return sorted(t.to_pylist(), key=lambda r: (r["channel"] or "", r["seq"]))
    assert rows(warehouse) == rows(plain) and len(rows(plain)) > 100
    a, b = DeltaTable(applied_path(warehouse)), DeltaTable(applied_path(plain))
    assert len(a.file_uris()) * 3 < len(b.file_uris())
    assert sum(h.get("rpl_sql.operation") == "APPLY COMPACT" for h in a.history()) >= 8
    # and the compactions' files are merged by tiers in turn, so the count stays small however long it runs:
    # here one merged file and three batches committed since the channels' last compactions
    assert len(a.file_uris()) <= 4 and any(h.get("rpl_sql.operation") == "COMPACT TIERS" for h in a.history())
    assert all(a.transaction_version(app_id(c)) == b.transaction_version(app_id(c)) for c in ("", "ch1", "ch2"))
    sa, sb = DeltaStore(warehouse).load().state, DeltaStore(plain).load().state
    assert [c.applier for c in sa.channels] == [c.applier for c in sb.channels]
    assert counters(sa) == counters(sb) and rule_hits(sa) == rule_hits(sb)
    assert K.BatchCommits.find_record(a, "ch1", sa.channel("ch1").applier.seq) is not None


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_events_landed_before_the_columns_column_apply(spark, warehouse, engine):
    """An events table that an older rpl_sql landed has no `columns` (the table map's columns, added with the
    replica tables): the applier reads it as NULL and applies as the reference says, with either engine."""
    setup_server(warehouse)
    log = mixed_log(seed=3)
    write_deltalake(events_path(warehouse), log.table().drop_columns(["columns"]), partition_by=PARTITION_BY,
                    mode="append")
    before = DeltaStore(warehouse).load().state
    apply(spark, warehouse, engine=engine)
    check_against_reference(spark, warehouse, log, before)
    assert read_delta(spark, applied_path(warehouse)).where("columns IS NOT NULL").count() == 0


_NAMES = st.one_of(st.none(), st.sampled_from(["", "db1", "a:b", "1:a", "-", "a-", "3:abc", "x'y", "a\\b", "`", ",",
                                               "%", "_", "中文", "Σ", "straße", "1+", "+"]),
                   st.text(alphabet=st.sampled_from(list("ab:+-01\\'`,%_é中")), max_size=4))
_TABLES = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"db": _NAMES, "name": _NAMES.filter(lambda v: v is not None), "updating": st.booleans()}), max_size=3))
_EVENTS = st.fixed_dictionaries({"event_type": st.sampled_from(["query", "write_rows", "delete_rows", "gtid", None]),
                                 "db_name": _NAMES, "table_name": _NAMES, "command": _NAMES, "default_db": _NAMES,
                                 "tables": _TABLES})


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENTS, min_size=1, max_size=40), st.sampled_from([62, 1, 3]), st.booleans())
def test_arrow_engine_finds_each_events_own_shape(events, key_bits, dictionaries):
    """The arrow engine's ShapeIndex finds every event's own shape and no other, whatever the names hold
    (':', '-', '+', digits, quotes, unicode, NULL against ''), and no shape for an event whose shape it lacks;
    also when its keys are made dense after every column or some (key_bits 1, 3), and when the events' text
    columns come dictionary-encoded, in chunks with dictionaries of their own (as the engine reads them)."""
    from rpl_sql.pipeline import shape_index
    from rpl_sql.pipeline.shape_index import ShapeIndex
    from rpl_sql.pipeline.events import TABLES_TYPE

    shape_index.KEY_BITS = key_bits  # (hypothesis runs examples in one test call: no monkeypatch fixture)

    def table(rows):
        return pa.table({**{k: pa.array([e[k] for e in rows], pa.string())
                            for k in ("event_type", "db_name", "table_name", "command", "default_db")},
                         "tables": pa.array([e["tables"] for e in rows], TABLES_TYPE)})

    def plain(e):
        tables = None if e["event_type"] != "query" or e["tables"] is None else tuple(
            (x["db"], x["name"], x["updating"]) for x in e["tables"])
        return (e["event_type"], e["db_name"], e["table_name"], e["command"], e["default_db"], tables)

    shapes = list({plain(e): e for e in events}.values())
    known = shapes[::2]  # every other shape: the rest must find none
    if not known:
        return
    looked_up = table(events)
    if dictionaries:
        half = len(events) // 2
        def encoded(c):
            return pa.chunked_array([c.slice(0, half).dictionary_encode(), c.slice(half).dictionary_encode()])
        looked_up = pa.table({n: c if n == "tables" else encoded(c.combine_chunks())
                              for n, c in zip(looked_up.column_names, looked_up.columns)})
    try:
        rows = ShapeIndex(table(known)).rows(looked_up).to_pylist()
    finally:
        shape_index.KEY_BITS = 62
    for e, r in zip(events, rows):
        want = [i for i, k in enumerate(known) if plain(k) == plain(e)]
        assert (r,) == tuple(want) if want else r is None


def test_the_engine_follows_the_master(monkeypatch, tmp_path):
    """auto: pyarrow writes on a local master, Spark's executors on a cluster (or a remote Connect server)."""
    class Conf:
        def __init__(self, master):
            self.master = master

        def get(self, key, default=None):
            assert key == "spark.master"
            if self.master is None:
                raise RuntimeError("not shown")
            return self.master

    class Session:
        def __init__(self, master):
            self.conf = Conf(master)

    assert A.engine_for(Session("local[2]")) == "arrow"
    assert A.engine_for(Session("spark://127.0.0.1:7077")) == "spark"
    assert A.engine_for(Session("yarn")) == "spark"
    assert A.engine_for(Session(None)) == "spark"
    monkeypatch.delenv("MASTER", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert A.engine_for(None) == "arrow"
    (tmp_path / "spark-defaults.conf").write_text("spark.master spark://10.0.0.1:7077\n")
    assert A.engine_for(None) == "spark" and A.engine_for(lambda: None) == "spark"
    with pytest.raises(ValueError, match="engine must be one of"):
        apply(None, str(tmp_path / "wh"), engine="jvm")
