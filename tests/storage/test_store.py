"""Tests for rpl_sql.storage.store: the control-plane state in one Delta table written by delta-rs (no Spark).

Round trips of any state, optimistic concurrency (stale snapshots, two processes racing), the commit
history and the filter-change audit trail.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import replace
from datetime import timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings, strategies as st

from rpl_sql.errors import MySQLError
from rpl_sql.filters.rules import (CHANGE_REPLICATION_FILTER, CHANGE_REPLICATION_FILTER_FOR_CHANNEL, STARTUP_OPTIONS,
                           STARTUP_OPTIONS_FOR_CHANNEL, TYPES, Filters, FilterType, Slot, format_rule)
from rpl_sql.filters.state import GR_CHANNELS, ApplierPosition, Channel, ServerState, initial_state
from rpl_sql.storage.state_table import SCHEMA, state_from_table, state_to_table
import rpl_sql.storage.state_history as history_module
import rpl_sql.storage.store as store_module
from rpl_sql.storage.store import Commit, ConcurrentCommitError, DeltaStore, FilterChange, Snapshot

T = FilterType
NOW = 1_700_000_000_000_000
META = {"statement": "CHANGE REPLICATION FILTER ...", "operation": "CHANGE REPLICATION FILTER"}

HOSTILE = ["", "ch1", "CH1", "a'b", 'q"q', "back\\slash", "trail\\", "com,ma", "(x,y)", "a->b", "ünï",
           "\U0001f642", "nul\x00byte", " ", "NULL", "null", "%_", "line\nbreak", *GR_CHANNELS]


def rich_state() -> ServerState:
    """Every kind of row: all 7 filter types, counters, the default channel '', GR channels, hostile names."""
    g = Filters()
    g = g.configure(T.DO_DB, ("db1", "a'b", "com,ma"), STARTUP_OPTIONS, NOW)
    g = g.configure(T.REWRITE_DB, (("from", "to"), ("x,y", "(z)")), STARTUP_OPTIONS, NOW + 1)
    g = g.add_counts({T.DO_DB: 7})
    full = Filters()
    for i, ftype in enumerate(TYPES):
        values = (("s\\1", "t'1"),) if ftype is T.REWRITE_DB else (
            ("db.t%", "d\\_b.%") if ftype.is_table_rule else ("ünï", ""))
        full = full.configure(ftype, values, CHANGE_REPLICATION_FILTER_FOR_CHANNEL, NOW + i)
    full = full.add_counts({t: 2 ** 40 + i for i, t in enumerate(TYPES)})
    ch_default = Channel("", options=(("SOURCE_HOST", "h1"), ("SOURCE_PORT", 3306), ("SOURCE_AUTO_POSITION", True),
                                      ("SOURCE_CONNECT_RETRY", None), ("SOURCE_HEARTBEAT_PERIOD", 2.5),
                                      ("IGNORE_SERVER_IDS", (1, 2, 3))),
                         io_running=True, sql_running=False,
                         filters=Filters().configure(T.IGNORE_DB, ("mysql",), STARTUP_OPTIONS_FOR_CHANNEL, NOW))
    ch_full = Channel("ch'1\\,x", options=(("SOURCE_USER", "r\"oot"), ("SOURCE_HOST", "h2")), sql_running=True,
                      filters=full, applier=ApplierPosition(42, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42",
                                                            "binlog.000007", 2 ** 40))
    # configured with an empty list: a P_S row with an empty rule
    ch_empty_rule = Channel("empty", filters=Filters().configure(T.DO_TABLE, (), CHANGE_REPLICATION_FILTER, NOW))
    gr = Channel(GR_CHANNELS[0], options=(("SOURCE_HOST", "gr"),))
    state = ServerState(lower_case_table_names=1, global_filters=g, startup_options=("--replicate-do-db=db1",),
                        started_at=NOW - 5, filter_mode="effective_database")
    for ch in (ch_full, gr, ch_default, ch_empty_rule):
        state = state.with_channel(ch)
    return state


def do_db(state: ServerState) -> tuple:
    return state.global_filters.values(T.DO_DB)


def with_do_db(state: ServerState, values: tuple, now: int = NOW) -> ServerState:
    return replace(state, global_filters=state.global_filters.configure(T.DO_DB, values, CHANGE_REPLICATION_FILTER,
                                                                         now))


# ---------------------------------------------------------------- serialization

def test_round_trip_rich_state():
    s = rich_state()
    assert state_from_table(state_to_table(s)) == s


def test_table_layout():
    import pyarrow as pa

    s = rich_state()
    t = pa.table(state_to_table(s))  # an arro3 table: any Arrow library reads it
    assert t.schema == pa.schema(SCHEMA)
    rows = t.to_pylist()
    assert [r["seq"] for r in rows] == list(range(len(rows)))
    assert rows[0]["kind"] == "server" and rows[0]["channel_name"] is None
    assert json.loads(rows[0]["payload"]) == {"lower_case_table_names": 1, "startup_options": ["--replicate-do-db=db1"],
                                              "started_at": NOW - 5, "filter_mode": "effective_database"}
    glob = [r for r in rows if r["kind"] == "global_filter"]
    assert [(r["channel_name"], r["filter_name"], r["filter_rule"], r["counter"]) for r in glob] == [
        (None, "REPLICATE_DO_DB", "db1,a'b,com,ma", 7),
        (None, "REPLICATE_REWRITE_DB", "(from,to),(x,y,(z))", 0)]
    assert json.loads(glob[1]["filter_values"]) == [["from", "to"], ["x,y", "(z)"]]
    assert glob[0]["active_since"].timestamp() * 1_000_000 == NOW

    default = next(r for r in rows if r["kind"] == "channel" and r["channel_name"] == "")
    assert json.loads(default["payload"]) == {
        "options": {"SOURCE_HOST": "h1", "SOURCE_PORT": 3306, "SOURCE_AUTO_POSITION": True,
                    "SOURCE_CONNECT_RETRY": None, "SOURCE_HEARTBEAT_PERIOD": 2.5, "IGNORE_SERVER_IDS": [1, 2, 3]},
        "io_running": True, "sql_running": False}
    assert list(json.loads(default["payload"])["options"]) == [k for k, _ in s.channel("").options]
    # channel rows in state order, each followed by its filter rows
    assert [(r["kind"], r["channel_name"]) for r in rows if r["kind"].startswith("channel")][:3] == [
        ("channel", ""), ("channel_filter", ""), ("channel", "ch'1\\,x")]
    for r in rows:
        if r["kind"].endswith("_filter"):
            ftype = FilterType(r["filter_name"])
            values = tuple(tuple(v) if isinstance(v, list) else v for v in json.loads(r["filter_values"]))
            assert r["filter_rule"] == format_rule(ftype, values)
    empty = next(r for r in rows if r["channel_name"] == "empty" and r["kind"] == "channel_filter")
    assert (empty["filter_rule"], empty["filter_values"]) == ("", "[]")


def test_a_slot_s_texts_are_its_own_when_kept_between_states(monkeypatch):
    """The kept FILTER_RULE and values texts (state_table._slot_texts_of) belong to one (type, values), and the
    kept values (`_slot_values_of`) to one text: equal values of another type (DO_TABLE's text is sorted,
    WILD_DO_TABLE's is not), other values of the same type, and a state read back from its table all give what
    a fresh encoding gives, and read back equal, past the bound too."""
    import rpl_sql.storage.state_table as state_table

    texts = functools.lru_cache(maxsize=3)(state_table._slot_texts_of.__wrapped__)
    values_of = functools.lru_cache(maxsize=3)(state_table._slot_values_of.__wrapped__)
    monkeypatch.setattr(state_table, "_slot_texts_of", texts)
    monkeypatch.setattr(state_table, "_slot_values_of", values_of)
    values = ("z.t", "a.t", "ünï.\\x", "q'.b")
    states = []
    for ftype, vals in [(T.DO_TABLE, values), (T.WILD_DO_TABLE, values), (T.DO_TABLE, values[:2]),
                        (T.IGNORE_TABLE, values), (T.DO_TABLE, ("y.t", "b.t")), (T.DO_TABLE, values)]:
        ch = Channel("c", filters=Filters().configure(ftype, vals, CHANGE_REPLICATION_FILTER, NOW))
        states.append(replace(initial_state(), channels=(ch,)))
    assert [state_from_table(state_to_table(s)) for s in states] == states
    for state in states + [state_from_table(state_to_table(s)) for s in states]:
        row = next(r for r in pa.table(state_to_table(state)).to_pylist() if r["kind"] == "channel_filter")
        slot = next(sl for sl in state.channel("c").filters.slots if sl.values)
        ftype = T(row["filter_name"])
        assert row["filter_rule"] == format_rule(ftype, slot.values)
        assert json.loads(row["filter_values"]) == [list(v) if isinstance(v, tuple) else v for v in slot.values]
    assert texts.cache_info().currsize <= 3 and values_of.cache_info().currsize <= 3
    assert texts.cache_info().hits and values_of.cache_info().hits  # kept texts and values were used


def test_initial_state_rows():
    t = state_to_table(initial_state())
    assert t.column("kind").to_pylist() == ["server", "channel"]
    assert t.column("channel_name").to_pylist() == [None, ""]
    assert state_from_table(t) == initial_state()


def test_row_order_comes_from_seq():
    s = rich_state()
    t = pa.table(state_to_table(s))
    shuffled = t.take(pa.array(list(reversed(range(t.num_rows)))))
    assert state_from_table(shuffled) == s


def test_channel_order_is_kept_even_unsorted():
    s = ServerState(channels=(Channel("b"), Channel("a"), Channel("")))
    assert state_from_table(state_to_table(s)).channels == s.channels


def test_never_configured_slot_is_stored_as_null():
    t = pa.table(state_to_table(replace(initial_state(), global_filters=Filters().with_slot(T.DO_DB, Slot(counter=3)))))
    row = t.to_pylist()[1]
    assert (row["kind"], row["active_since"], row["configured_by"], row["counter"]) == ("global_filter", None, None, 3)
    assert state_from_table(t).global_filters[T.DO_DB] == Slot(counter=3)


def test_unstorable_states_are_refused():
    with pytest.raises(ValueError, match="appears twice"):
        state_to_table(ServerState(channels=(Channel("a"), Channel("a"))))
    with pytest.raises(ValueError, match="set twice"):
        state_to_table(ServerState(channels=(Channel("a", options=(("K", 1), ("K", 2))),)))
    with pytest.raises(TypeError, match="cannot store"):
        state_to_table(ServerState(channels=(Channel("a", options=(("K", {1}),)),)))


def test_corrupt_tables_are_refused():
    t = pa.table(state_to_table(rich_state()))
    with pytest.raises(ValueError, match="no server row"):
        state_from_table(t.slice(1))
    rows = t.to_pylist()
    orphan = [r for r in rows if not (r["kind"] == "channel" and r["channel_name"] == "")]
    with pytest.raises(ValueError, match="missing channels"):
        state_from_table(pa.Table.from_pylist(orphan, schema=pa.schema(SCHEMA)))


# hypothesis: any state, hostile names included

names = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=10))
int64 = st.integers(-(2 ** 63), 2 ** 63 - 1)


def slots(ftype: FilterType):
    value = st.tuples(names, names) if ftype is T.REWRITE_DB else names
    return st.one_of(st.just(Slot()), st.builds(
        Slot,
        values=st.lists(value, max_size=4).map(tuple),
        configured_by=st.one_of(st.none(), st.sampled_from([STARTUP_OPTIONS, CHANGE_REPLICATION_FILTER,
                                                            STARTUP_OPTIONS_FOR_CHANNEL,
                                                            CHANGE_REPLICATION_FILTER_FOR_CHANNEL]), names),
        active_since=st.one_of(st.just(0), int64),
        counter=st.integers(0, 2 ** 63 - 1)))


filters = st.tuples(*[slots(t) for t in TYPES]).map(Filters)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    names)
option_values = st.one_of(scalars, st.lists(scalars, max_size=3).map(tuple))
appliers = st.one_of(st.just(ApplierPosition()), st.builds(
    ApplierPosition, seq=st.integers(0, 2 ** 63 - 1), executed_gtid_set=names, source_log_file=names,
    source_log_pos=st.integers(0, 2 ** 64)))
channels = st.builds(Channel, name=names, applier=appliers,
                     options=st.lists(st.tuples(names, option_values), max_size=5,
                                      unique_by=lambda kv: kv[0]).map(tuple),
                     io_running=st.booleans(), sql_running=st.booleans(), filters=filters)
states = st.builds(ServerState,
                   lower_case_table_names=st.integers(0, 2), global_filters=filters,
                   channels=st.lists(channels, max_size=4, unique_by=lambda c: c.name).map(tuple),
                   startup_options=st.lists(names, max_size=3).map(tuple), started_at=int64,
                   filter_mode=st.one_of(st.sampled_from(["mysql", "effective_database"]), names))


@settings(max_examples=150, deadline=None)
@given(states)
def test_round_trip_any_state(s):
    assert state_from_table(state_to_table(s)) == s


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states, states)
def test_round_trip_through_delta(s1, s2):
    with tempfile.TemporaryDirectory() as wh:
        store = DeltaStore(wh)
        store.commit(store.load(), s1, META)
        assert DeltaStore(wh).load() == Snapshot(s1, 0)
        store.commit(store.load(), s2, META)
        assert DeltaStore(wh).load() == Snapshot(s2, 1)


# ---------------------------------------------------------------- commits and versions

def test_fresh_warehouse(warehouse):
    store = DeltaStore(warehouse)
    assert store.state_path == warehouse + "/rpl_state"
    assert store.load() == Snapshot(initial_state(), None)
    assert store.version() is None
    assert store.history() == [] and store.filter_changes() == []
    assert not os.path.exists(warehouse)  # created lazily, by the first commit


def test_commits_make_versions(warehouse):
    store = DeltaStore(warehouse)
    s1 = with_do_db(initial_state(), ("db1",))
    assert store.commit(store.load(), s1, META) == 0
    assert store.load() == Snapshot(s1, 0)
    s2 = with_do_db(s1, ("db1", "db2"))
    assert store.commit(store.load(), s2, META) == 1
    assert store.version() == 1
    assert DeltaStore(warehouse).load() == Snapshot(s2, 1)
    # old versions stay readable by time travel
    dt = DeltaTable(store.state_path, version=0)
    paths = dt.file_uris()
    assert state_from_table(pa.concat_tables([pq.read_table(p) for p in paths])) == s1


def test_table_protocol_and_schema(warehouse):
    store = DeltaStore(warehouse)
    store.commit(store.load(), rich_state(), META)
    dt = DeltaTable(store.state_path)
    assert (dt.protocol().min_reader_version, dt.protocol().min_writer_version) == (1, 2)
    assert not dt.protocol().reader_features and not dt.protocol().writer_features
    fields = {f.name: f for f in dt.schema().fields}
    assert str(fields["active_since"].type) == 'PrimitiveType("timestamp")'  # UTC, not timestamp_ntz
    assert not fields["kind"].nullable and fields["channel_name"].nullable
    assert dt.metadata().partition_columns == []
    assert dt.metadata().configuration.get("delta.enableExpiredLogCleanup") == "false"


def test_transact_without_change_commits_nothing(warehouse):
    store = DeltaStore(warehouse)
    assert store.transact(lambda s: (s, "no-op"), META) == ("no-op", None)
    assert store.version() is None
    store.transact(lambda s: (with_do_db(s, ("a",)), None), META)
    assert store.transact(lambda s: (s, 42), META) == (42, None)
    assert store.version() == 0 and len(store.history()) == 1


def test_transact_returns_result_and_version(warehouse):
    store = DeltaStore(warehouse)
    assert store.transact(lambda s: (with_do_db(s, ("a",)), "first"), META) == ("first", 0)
    assert store.transact(lambda s: (with_do_db(s, do_db(s) + ("b",)), "second"), META) == ("second", 1)
    assert do_db(store.load().state) == ("a", "b")


def test_stale_snapshot_conflicts(warehouse):
    store = DeltaStore(warehouse)
    store.commit(store.load(), with_do_db(initial_state(), ("a",)), META)
    stale = store.load()
    store.commit(store.load(), with_do_db(stale.state, ("b",)), META)
    with pytest.raises(ConcurrentCommitError):
        store.commit(stale, with_do_db(stale.state, ("c",)), META)
    assert store.version() == 1
    assert do_db(store.load().state) == ("b",)


def test_a_snapshot_commits_at_most_once(warehouse):
    store = DeltaStore(warehouse)
    store.commit(store.load(), with_do_db(initial_state(), ("a",)), META)
    snap = store.load()
    assert store.commit(snap, with_do_db(snap.state, ("b",)), META) == 1
    with pytest.raises(ConcurrentCommitError):
        store.commit(snap, with_do_db(snap.state, ("c",)), META)
    assert store.version() == 1


def test_a_snapshot_built_by_hand_is_checked_too(warehouse):
    store = DeltaStore(warehouse)
    store.commit(store.load(), with_do_db(initial_state(), ("a",)), META)
    store.commit(store.load(), with_do_db(initial_state(), ("b",)), META)
    with pytest.raises(ConcurrentCommitError):
        store.commit(Snapshot(initial_state(), 0), with_do_db(initial_state(), ("c",)), META)
    assert store.version() == 1


def test_concurrent_create_conflicts(warehouse):
    a, b = DeltaStore(warehouse), DeltaStore(warehouse)
    snap_a, snap_b = a.load(), b.load()
    assert a.commit(snap_a, with_do_db(snap_a.state, ("a",)), META) == 0
    with pytest.raises(ConcurrentCommitError):
        b.commit(snap_b, with_do_db(snap_b.state, ("b",)), META)
    assert a.version() == 0 and do_db(a.load().state) == ("a",)


def test_transact_reruns_the_step_after_a_conflict(warehouse):
    store, other = DeltaStore(warehouse), DeltaStore(warehouse)
    store.transact(lambda s: (with_do_db(s, ("a",)), None), META)
    seen = []

    def step(state):
        seen.append(do_db(state))
        if len(seen) == 1:  # another writer sneaks in between our load and our commit
            other.transact(lambda s: (with_do_db(s, do_db(s) + ("other",)), None), META)
        return with_do_db(state, do_db(state) + ("mine",)), len(seen)

    assert store.transact(step, META) == (2, 2)
    assert seen == [("a",), ("a", "other")]
    assert do_db(store.load().state) == ("a", "other", "mine")


def test_transact_gives_up_with_deadlock(warehouse):
    store, other = DeltaStore(warehouse), DeltaStore(warehouse)
    store.transact(lambda s: (with_do_db(s, ("a",)), None), META)
    calls = []

    def step(state):
        calls.append(1)
        other.transact(lambda s: (with_do_db(s, do_db(s) + (f"o{len(calls)}",)), None), META)
        return with_do_db(state, ("never",)), None

    with pytest.raises(MySQLError) as e:
        store.transact(step, META, retries=3)
    assert (e.value.name, e.value.code, e.value.sqlstate) == ("ER_LOCK_DEADLOCK", 1213, "40001")
    assert len(calls) == 3
    assert do_db(store.load().state) == ("a", "o1", "o2", "o3")


def test_step_errors_propagate_and_commit_nothing(warehouse):
    store = DeltaStore(warehouse)
    store.transact(lambda s: (with_do_db(s, ("a",)), None), META)

    def step(state):
        raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", "nope")

    with pytest.raises(MySQLError, match="nope"):
        store.transact(step, META)
    assert store.version() == 0


def test_checkpoints(warehouse):
    store = DeltaStore(warehouse, checkpoint_every=3)
    for i in range(8):
        store.transact(lambda s, i=i: (with_do_db(s, do_db(s) + (f"v{i}",), NOW + i), None), {"statement": f"s{i}"})
    log = sorted(os.listdir(os.path.join(store.state_path, "_delta_log")))
    assert [f for f in log if "checkpoint.parquet" in f] == [f"{v:020d}.checkpoint.parquet" for v in (3, 6)]
    assert DeltaStore(warehouse).load() == Snapshot(with_do_db(initial_state(), tuple(f"v{i}" for i in range(8)),
                                                               NOW + 7), 7)
    assert [c.version for c in DeltaStore(warehouse).filter_changes()] == list(range(7, -1, -1))


# ---------------------------------------------------------------- two processes racing

WORKER = textwrap.dedent("""
    import os, sys, time
    from dataclasses import replace
    from rpl_sql.filters.rules import FilterType, CHANGE_REPLICATION_FILTER
    from rpl_sql.storage.store import DeltaStore

    warehouse, tag, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = DeltaStore(warehouse)
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(n):
        value = f"{tag}_{i}"
        def step(state, value=value):
            g = state.global_filters
            old = g.values(FilterType.DO_DB)
            g = g.configure(FilterType.DO_DB, old + (value,), CHANGE_REPLICATION_FILTER, time.time_ns() // 1000)
            return replace(state, global_filters=g), value
        result, version = store.transact(step, {"statement": value}, retries=200)
        assert result == value and version is not None
        print(version, flush=True)
""")


def test_two_processes_lose_no_update(warehouse, tmp_path):
    n = 30
    go = str(tmp_path / "go")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, warehouse, f"p{k}", str(n), go],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    time.sleep(0.5)  # let both import before the start signal
    open(go, "w").close()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    versions = sorted(int(v) for out, _ in outs for v in out.split())
    assert versions == list(range(2 * n))  # every commit got its own version, none was redone

    state = DeltaStore(warehouse).load().state
    values = do_db(state)
    expected = {f"p{k}_{i}" for k in range(2) for i in range(n)}
    assert len(values) == 2 * n and set(values) == expected
    history = DeltaStore(warehouse).history()
    assert len(history) == 2 * n and DeltaStore(warehouse).version() == 2 * n - 1
    # version v holds exactly the values of commits 0..v, in commit order
    assert [c.metadata["statement"] for c in reversed(history)] == list(values)


# ---------------------------------------------------------------- history and the filter audit trail

def test_history(warehouse):
    store = DeltaStore(warehouse)
    store.transact(lambda s: (with_do_db(s, ("a",)), None), {"statement": "one", "operation": "X", "user": "me"})
    store.transact(lambda s: (replace(s, started_at=1), None), {"statement": "two"})
    h = store.history()
    assert [c.version for c in h] == [1, 0]
    assert h[1].metadata == {"statement": "one", "operation": "X", "user": "me"}
    assert (h[1].operation, h[0].operation, h[0].delta_operation) == ("X", "WRITE", "WRITE")
    assert h[0].metadata == {"statement": "two"}
    assert all(c.format == "1" for c in h)
    assert (h[1].filters_changed, h[0].filters_changed) == (1, 0)
    assert h[0].timestamp.tzinfo == timezone.utc and h[0].timestamp >= h[1].timestamp
    assert store.history(limit=1) == h[:1]
    raw = DeltaTable(store.state_path).history(1)[0]  # what other Delta readers see
    assert (raw["rpl_sql.statement"], raw["rpl_sql.version"], raw["operation"]) == ("two", "1", "WRITE")


def test_metadata_is_checked(warehouse):
    store = DeltaStore(warehouse)
    with pytest.raises(ValueError, match="reserved"):
        store.commit(store.load(), rich_state(), {"version": "2"})
    with pytest.raises(TypeError):
        store.commit(store.load(), rich_state(), {"statement": 1})
    assert store.version() is None


def audit_story(store: DeltaStore) -> None:
    """Seven commits: filters set, counted, left alone, changed, re-set to the same values, dropped."""
    def commit(text, step):
        store.transact(step, {"statement": text, "operation": text.split()[0]})

    commit("CRF do_db=(a,b)", lambda s: (with_do_db(s, ("a", "b"), NOW), None))                       # v0
    ch1 = Channel("ch1", options=(("SOURCE_HOST", "h"),),
                  filters=Filters().configure(T.WILD_DO_TABLE, ("db.%",), CHANGE_REPLICATION_FILTER_FOR_CHANNEL, NOW)
                  .configure(T.REWRITE_DB, (("x", "y"),), CHANGE_REPLICATION_FILTER_FOR_CHANNEL, NOW))
    commit("CRS ch1", lambda s: (s.with_channel(ch1), None))                                            # v1
    commit("APPLY 3 events", lambda s: (replace(s, global_filters=s.global_filters.add_counts({T.DO_DB: 3})), None))
    commit("START REPLICA", lambda s: (s.with_channel(replace(s.channel("ch1"), io_running=True)), None))   # v3

    def v4(s):
        s = with_do_db(s, ("c",), NOW + 4)
        default = s.channel("")
        return s.with_channel(replace(default, filters=default.filters.configure(
            T.IGNORE_DB, ("mysql",), CHANGE_REPLICATION_FILTER_FOR_CHANNEL, NOW + 4))), None
    commit("CRF two scopes", v4)                                                                        # v4

    def v5(s):
        ch = s.channel("ch1")
        return s.with_channel(replace(ch, filters=ch.filters.configure(
            T.WILD_DO_TABLE, ("db.%",), CHANGE_REPLICATION_FILTER_FOR_CHANNEL, NOW + 5))), None
    commit("CRF same values", v5)                                                                       # v5
    commit("RESET REPLICA ALL ch1", lambda s: (s.without_channel("ch1"), None))                         # v6


def test_filter_changes(warehouse):
    store = DeltaStore(warehouse)
    audit_story(store)
    assert [c.filters_changed for c in reversed(store.history())] == [1, 2, 0, 0, 2, 1, 2]
    got = [(c.version, c.statement, c.operation, c.channel_name, c.filter_name, c.filter_rule, c.previous_rule,
            c.configured_by) for c in store.filter_changes()]
    CFC = CHANGE_REPLICATION_FILTER_FOR_CHANNEL
    assert got == [
        (6, "RESET REPLICA ALL ch1", "RESET", "ch1", "REPLICATE_WILD_DO_TABLE", "", "db.%", None),
        (6, "RESET REPLICA ALL ch1", "RESET", "ch1", "REPLICATE_REWRITE_DB", "", "(x,y)", None),
        (5, "CRF same values", "CRF", "ch1", "REPLICATE_WILD_DO_TABLE", "db.%", "db.%", CFC),
        (4, "CRF two scopes", "CRF", None, "REPLICATE_DO_DB", "c", "a,b", CHANGE_REPLICATION_FILTER),
        (4, "CRF two scopes", "CRF", "", "REPLICATE_IGNORE_DB", "mysql", None, CFC),
        (1, "CRS ch1", "CRS", "ch1", "REPLICATE_WILD_DO_TABLE", "db.%", None, CFC),
        (1, "CRS ch1", "CRS", "ch1", "REPLICATE_REWRITE_DB", "(x,y)", None, CFC),
        (0, "CRF do_db=(a,b)", "CRF", None, "REPLICATE_DO_DB", "a,b", None, CHANGE_REPLICATION_FILTER),
    ]
    changes = store.filter_changes()
    assert all(isinstance(c, FilterChange) and c.committed_at.tzinfo == timezone.utc for c in changes)
    by_version = {c.version: c.timestamp for c in store.history()}
    assert all(c.committed_at == by_version[c.version] for c in changes)

    assert [(c.version, c.filter_name) for c in store.filter_changes(channel="")] == [(4, "REPLICATE_IGNORE_DB")]
    assert [c.version for c in store.filter_changes(channel="ch1")] == [6, 6, 5, 1, 1]
    assert store.filter_changes(channel="nope") == []
    assert store.filter_changes(limit=3) == changes[:3]
    assert [c.version for c in store.filter_changes(channel="ch1", limit=3)] == [6, 6, 5]


def test_filter_changes_by_time_travel_agree(warehouse, monkeypatch):
    """The fast path (reading each rpl_sql commit's own data file) and plain time travel give the same trail."""
    audit_story(DeltaStore(warehouse, checkpoint_every=2))
    fast = DeltaStore(warehouse).filter_changes()
    monkeypatch.setattr(history_module, "_overwrite_files", lambda path, version: None)
    assert DeltaStore(warehouse).filter_changes() == fast


def test_filter_changes_see_foreign_commits(warehouse):
    """A commit rpl_sql did not write (no 'filters_changed' count) is compared like any other."""
    store = DeltaStore(warehouse)
    store.transact(lambda s: (with_do_db(s, ("a",)), None), META)
    store.transact(lambda s: (replace(s, started_at=1), None), META)
    foreign = with_do_db(store.load().state, ("b",), NOW + 1)
    write_deltalake(DeltaTable(store.state_path), state_to_table(foreign), mode="overwrite",
                    commit_properties=CommitProperties(custom_metadata={"by": "hand"}))
    store.transact(lambda s: (replace(s, started_at=2), None), META)
    h = store.history()
    assert [c.filters_changed for c in h] == [0, None, 0, 1]
    assert h[1] == Commit(2, h[1].timestamp, "WRITE", {}, "WRITE", None, None)
    got = [(c.version, c.filter_rule, c.previous_rule, c.statement) for c in store.filter_changes()]
    assert got == [(2, "b", "a", None), (0, "a", None, META["statement"])]


def test_counter_only_commits_are_not_changes(warehouse):
    store = DeltaStore(warehouse)
    store.transact(lambda s: (with_do_db(s, ("a",)), None), META)
    for _ in range(3):
        store.transact(lambda s: (replace(s, global_filters=s.global_filters.add_counts({T.DO_DB: 1})), None),
                       {"statement": "APPLY"})
    assert store.load().state.global_filters[T.DO_DB].counter == 3
    assert [c.version for c in store.filter_changes()] == [0]


def _whole_history_changes(store: DeltaStore, monkeypatch, **kw) -> list[FilterChange]:
    """filter_changes read the old way, from every commit (what a broken chain falls back to)."""
    with monkeypatch.context() as m:
        m.setattr(history_module, "commit_info_of", lambda root, version: None)
        return DeltaStore(store.warehouse).filter_changes(**kw)


def test_filter_history_reads_the_commits_that_changed_filters_not_every_commit(warehouse, monkeypatch):
    """The service commits the state once per applied batch; the history must not read them all."""
    store = DeltaStore(warehouse)
    audit_story(store)
    for i in range(150):
        store.transact(lambda s: (replace(s, global_filters=s.global_filters.add_counts({T.DO_DB: 1})), None),
                       {"statement": f"APPLY {i}", "operation": "APPLY"})
    store.transact(lambda s: (with_do_db(s, ("z",), NOW + 9), None), META)
    for i in range(50):
        store.transact(lambda s: (replace(s, global_filters=s.global_filters.add_counts({T.DO_DB: 1})), None),
                       {"statement": f"APPLY {i}", "operation": "APPLY"})
    reads = []
    real = history_module.commit_info_of
    monkeypatch.setattr(history_module, "commit_info_of", lambda root, v: reads.append(v) or real(root, v))
    got = DeltaStore(warehouse).filter_changes()
    # the newest commit and the six that changed filters (v0, v1, v4, v5, v6 of the story, v157): the 200
    # counter-only commits and the story's v2 and v3 are jumped over
    assert reads == [207, 157, 6, 5, 4, 1, 0]
    assert [(c.version, c.filter_rule) for c in got[:1]] == [(157, "z")]
    monkeypatch.setattr(history_module, "commit_info_of", real)
    assert got == _whole_history_changes(store, monkeypatch)
    assert DeltaStore(warehouse).filter_changes(channel="ch1", limit=2) == \
        _whole_history_changes(store, monkeypatch, channel="ch1", limit=2)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["filter", "counter", "start", "foreign", "foreign-same", "big", "old-release"]),
                min_size=1, max_size=14))
def test_filter_history_by_the_chain_equals_reading_every_commit(monkeypatch, steps):
    """Any mix of filter changes, counter-only commits, foreign writers' commits (changing filters or not),
    change sets too big to record, and commits of an earlier release (which name no earlier change)."""
    with tempfile.TemporaryDirectory() as wh:
        store = DeltaStore(wh)
        for i, step in enumerate(steps):
            if step in ("foreign", "foreign-same"):
                if store.version() is None:
                    continue
                state = store.load().state
                if step == "foreign":
                    state = with_do_db(state, (f"f{i}",), NOW + i)
                write_deltalake(DeltaTable(store.state_path), state_to_table(state), mode="overwrite",
                                commit_properties=CommitProperties(custom_metadata={"by": "hand"}))
                continue
            with monkeypatch.context() as m:
                if step == "big":
                    m.setattr(store_module, "CHANGES_MAX_BYTES", 10)
                if step == "old-release":
                    m.setattr(DeltaStore, "_changed_through", lambda self, version: None)
                if step == "counter":
                    change = lambda s: replace(s, global_filters=s.global_filters.add_counts({T.DO_DB: 1}))  # noqa: E731
                elif step == "start":
                    change = lambda s: replace(s, started_at=(s.started_at or 0) + 1)  # noqa: E731
                else:
                    change = lambda s: with_do_db(s, (f"v{i}", "w"), NOW + i)  # noqa: E731
                DeltaStore(wh).transact(lambda s: (change(s), None), {"statement": f"{step} {i}"})
        assert DeltaStore(wh).filter_changes() == _whole_history_changes(store, monkeypatch)


def test_as_of_a_time_reads_a_few_commits_and_agrees_with_the_whole_history(warehouse, monkeypatch):
    store = DeltaStore(warehouse)
    for i in range(40):
        store.transact(lambda s: (with_do_db(s, (f"d{i}",), NOW + i) if i % 10 == 0 else
                                  replace(s, started_at=i), None), {"statement": f"s{i}"})
        if i % 7 == 0:
            time.sleep(0.005)
    history = store.history()
    reads = []
    real = history_module.commit_info_of
    monkeypatch.setattr(history_module, "commit_info_of", lambda root, v: reads.append(v) or real(root, v))
    for c in history:
        for at in (c.timestamp, c.timestamp + timedelta(microseconds=500)):
            text = at.strftime("%Y-%m-%d %H:%M:%S.%f")
            whole = next(h.version for h in history if h.timestamp <= at)
            reads.clear()
            assert store.version_as_of(text) == whole
            assert len(reads) <= 6
    first = history[-1].timestamp - timedelta(seconds=1)
    with pytest.raises(MySQLError, match="before the first commit"):
        store.version_as_of(first.strftime("%Y-%m-%d %H:%M:%S"))


# ---------------------------------------------------------------- process hygiene

def test_store_does_not_pull_in_pandas(warehouse):
    """pyarrow imports pandas (about half a second) on the first `pa.array(list)`; statements must not pay it."""
    code = textwrap.dedent(f"""
        import sys
        from dataclasses import replace
        import rpl_sql.storage.store as store
        before = set(sys.modules)
        s = store.DeltaStore({warehouse!r})
        s.transact(lambda st: (replace(st, started_at=1), None), {{"statement": "x"}})
        s.transact(lambda st: (replace(st, started_at=2), None), {{"statement": "y"}})
        s.load(); s.history(); s.filter_changes()
        print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("pandas", "pyarrow")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    new = eval(out.stdout)
    assert not [m for m in new if m.startswith("pandas")], new


def test_a_control_plane_statement_loads_neither_pyarrow_nor_numpy(tmp_path):
    """The state is read and written with deltalake's arro3: pyarrow's and numpy's imports were a third of a
    `rpl-sql -e` statement's time (bench/bench_control_plane.py)."""
    code = textwrap.dedent(f"""
        import sys
        from rpl_sql.cli.shell import main
        main(["--warehouse", {str(tmp_path / 'wh')!r}, "-e",
              "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c';"
              "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (d) FOR CHANNEL 'c'; SHOW REPLICA STATUS;"
              "SHOW REPLICATION FILTERS; STOP REPLICA"])
        print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"pyarrow", "numpy", "pandas"}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"
