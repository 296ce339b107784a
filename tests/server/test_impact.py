"""EXPLAIN CHANGE REPLICATION FILTER: what a filter change would flip among the landed events.

Checked against brute force: every landed event decided one by one with the reference evaluator under the
current and the proposed filters (random rule sets and changes, hostile names), the per-shape rows and the
totals must equal the counts of that brute force. Windows (LAST n EVENTS, SINCE), errors (nothing
committed), and a running SQL thread that does not stop a preview."""
from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from deltalake import write_deltalake

import rpl_sql
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import RowEvent, TableRef, decide, statement_event
from rpl_sql.filters.rules import FilterType, filters_of, filters_text
from rpl_sql.language.parser import parse
from rpl_sql.pipeline.events import EVENTS_SCHEMA, PARTITION_BY, events_path
from rpl_sql.server import impact
from rpl_sql.server.impact import TableChanges, table_changes

NAMES = ["shop", "Shop", "crm", "tmp_1", "tmpx1", "we'ird", "b`q", "c,d", "ü", "x%y", "a\\b", "hr"]
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
WILD = ["%.tmp_%", "shop.%", "x\\%y.%", "%.ü", "we'ird.%"]


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def s_lit(v: str) -> str:
    return "'" + v.replace("\\", "\\\\").replace("'", "''") + "'"


def land(wh: str, channel: str, rnd: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        if rnd.random() < 0.8:
            db, t = rnd.choice(NAMES), rnd.choice(NAMES)
            rows.append({"channel": channel, "seq": i + 1, "event_type": "write_rows", "db_name": db,
                         "table_name": t, "filter_db": db, "source": "binlog",
                         "event_time": T0 + timedelta(seconds=i)})
        else:
            ddb = rnd.choice(NAMES + [None])
            tabs = [{"db": rnd.choice([None, rnd.choice(NAMES)]), "name": rnd.choice(NAMES),
                     "updating": rnd.random() < 0.7} for _ in range(rnd.randint(0, 2))]
            rows.append({"channel": channel, "seq": i + 1, "event_type": "query",
                         "command": rnd.choice(["UPDATE", "INSERT", "CREATE_TABLE", "CREATE_DB", "COMMIT"]),
                         "default_db": ddb, "tables": tabs, "filter_db": ddb or "", "source": "binlog",
                         "event_time": T0 + timedelta(seconds=i)})
    write_deltalake(events_path(wh), pa.Table.from_pylist(rows, schema=EVENTS_SCHEMA), partition_by=PARTITION_BY,
                    mode="append")
    return rows


def random_rules(rnd: random.Random) -> str:
    parts = []
    if rnd.random() < 0.5:
        parts.append(f"REPLICATE_DO_DB = ({', '.join(q(n) for n in rnd.sample(NAMES, 2))})")
    if rnd.random() < 0.5:
        parts.append(f"REPLICATE_IGNORE_DB = ({q(rnd.choice(NAMES))})")
    if rnd.random() < 0.5:
        pattern = rnd.choice(WILD)
        parts.append(f"REPLICATE_WILD_IGNORE_TABLE = ({s_lit(pattern)})")
    if rnd.random() < 0.5:
        parts.append(f"REPLICATE_DO_TABLE = ({q(rnd.choice(NAMES))}.{q(rnd.choice(NAMES))})")
    if rnd.random() < 0.4:
        parts.append(f"REPLICATE_REWRITE_DB = (({q(rnd.choice(NAMES))}, {q(rnd.choice(NAMES))}))")
    return ", ".join(parts) or "REPLICATE_IGNORE_DB = ()"


def event_of(r: dict):
    if r["event_type"] == "write_rows":
        return RowEvent(r["db_name"], r["table_name"])
    return statement_event(r["command"], r["default_db"],
                           [TableRef(t["db"], t["name"], t["updating"]) for t in r["tables"]])


def brute(state, channel, rows):
    out = []
    for r in rows:
        try:
            out.append(decide(state.channel(channel).filters, event_of(r), state.matching))
        except MySQLError:
            out.append(None)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_the_impact_equals_deciding_every_event_twice(tmp_path, seed):
    rnd = random.Random(seed)
    wh = str(tmp_path / "wh")
    s = rpl_sql.connect(wh)
    s.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n"
              f"CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL 'a'")
    rows = land(wh, "a", rnd, 400)
    change = f"CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL 'a'"
    before_version = s.store.version()
    res = s.execute("EXPLAIN " + change)[-1]
    assert s.store.version() == before_version  # a preview commits nothing
    now = brute(s.state, "a", rows)
    s.execute(change)
    after = brute(s.state, "a", rows)
    *flips, total = res.rows
    assert total[3] == len(rows)
    assert total[4] == f"APPLY {sum(1 for d in now if d and d.apply)}"
    assert total[5] == f"APPLY {sum(1 for d in after if d and d.apply)}"
    want = Counter()
    for d0, d1 in zip(now, after):
        k0 = ("ERROR", None) if d0 is None else ("APPLY" if d0.apply else "IGNORE", d0.decided_by)
        k1 = ("ERROR", None) if d1 is None else ("APPLY" if d1.apply else "IGNORE", d1.decided_by)
        if k0 != k1:
            want[(k0, k1)] += 1
    got = Counter()
    for r in flips:
        got[((r[4], r[6]), (r[5], r[7]))] += r[3]
    assert got == want


def test_windows_errors_and_a_running_sql_thread(tmp_path):
    rnd = random.Random(1)
    wh = str(tmp_path / "wh")
    s = rpl_sql.connect(wh)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n"
              "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'b';\n"
              "CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (hr) FOR CHANNEL 'a';\nSTART REPLICA")
    land(wh, "a", rnd, 300)
    land(wh, "b", rnd, 50)
    last = s.execute("EXPLAIN CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = () FOR CHANNEL 'a' LAST 40 EVENTS")
    assert last[-1].rows[-1][3] == 40
    since = (T0 + timedelta(seconds=250)).strftime("%Y-%m-%d %H:%M:%S")
    res = s.execute(f"EXPLAIN CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = () FOR CHANNEL 'a' SINCE '{since}'")
    assert res[-1].rows[-1][3] == 50
    both = s.execute("EXPLAIN CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (shop)")[-1].rows
    assert {r[0] for r in both if r[2] == "(all landed events)"} == {"a", "b"}  # global form: every channel
    version = s.store.version()
    for text, code in [("EXPLAIN CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = () FOR CHANNEL 'zz'", 1794),
                       ("EXPLAIN CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = ('nodot') FOR CHANNEL 'a'", 3067),
                       ("EXPLAIN CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = () FOR CHANNEL 'a' SINCE 'then'",
                        1210)]:
        with pytest.raises(MySQLError) as e:
            s.execute(text)
        assert e.value.code == code
    assert s.store.version() == version
    with pytest.raises(MySQLError) as e:  # the change itself still needs the SQL thread stopped
        s.execute("CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = () FOR CHANNEL 'a'")
    assert e.value.code == 3085


def test_the_tables_key_is_equal_exactly_when_the_lists_are():
    """landed_shapes groups statements by an Arrow-built key of their tables: no two different lists share one."""
    import itertools

    import pyarrow as pa

    from rpl_sql.storage.landed_shapes import _tables_key
    from rpl_sql.pipeline.events import TABLES_TYPE

    parts = [None, "", "a", "1:a", "=", "N", "a=1:N", "中", "x" * 12]
    elems = [{"db": d, "name": n, "updating": u} for d, n, u in
             itertools.product(parts[:5], ["t", "", "1:=N", "中"], [True, False, None])]
    lists = [None, []] + [[e] for e in elems] + [[a, b] for a, b in itertools.product(elems[:12], elems[:12])]
    keys = _tables_key(pa.array(lists, TABLES_TYPE)).to_pylist()
    by_key = {}
    for lst, k in zip(lists, keys):
        by_key.setdefault(k, []).append(lst)
    assert all(len({repr(v) for v in group}) == 1 for group in by_key.values())
    assert len(by_key) == len({repr(v) for v in lists})


@pytest.mark.spark
def test_a_session_with_spark_counts_the_shapes_in_spark_as_arrow_does(spark, tmp_path):
    """Once a session has Spark, EXPLAIN CHANGE and the lint count the landed shapes with a Spark job
    (rpl_sql.spark.shapes_job): the same shapes and counts as the Arrow scan, windows included, and the
    same impact rows, on hostile names and statements with NULL, empty and repeated table lists."""
    from rpl_sql.storage import landed_shapes as arrow_side
    from rpl_sql.spark import shapes_job as spark_side

    rnd = random.Random(5)
    wh = str(tmp_path / "wh")
    s = rpl_sql.connect(wh)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL '';\n"
              "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n"
              "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'b,''c';\n"
              f"CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL 'a'")
    for ch, n in (("", 120), ("a", 400), ("b,'c", 60)):
        land(wh, ch, rnd, n)

    def canon(landed):
        return sorted((ch, repr(ev), n) for ch, evs in landed.items() for ev, n in evs)

    since = (T0 + timedelta(seconds=90)).strftime("%Y-%m-%d %H:%M:%S")
    for args in [(None,), (["b,'c", ""],), (["a", "b,'c"], 30), (["a"], None, since), (["zz"],),
                 (None, None, "2026-11-01 00:00:00+05:00")]:
        assert canon(spark_side.shapes(spark, wh, *args)) == canon(arrow_side.shapes(wh, *args)), args
    assert spark_side.shapes(spark, str(tmp_path / "empty")) == {}

    lint_plain = s.execute("SHOW REPLICATION FILTER WARNINGS")[-1].rows
    changes = [f"EXPLAIN CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL 'a' LAST 250 EVENTS",
               f"EXPLAIN CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL 'b,''c'",
               f"EXPLAIN CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL '' SINCE '{since}'",
               f"EXPLAIN CHANGE REPLICATION FILTER {random_rules(rnd)}"]  # global: every channel
    plain = [s.execute(c)[-1].rows for c in changes]
    with_spark = rpl_sql.register(spark, wh)
    assert with_spark.surface is not None
    assert with_spark.execute("SHOW REPLICATION FILTER WARNINGS")[-1].rows == lint_plain
    assert [with_spark.execute(c)[-1].rows for c in changes] == plain


@pytest.mark.spark
def test_the_impact_in_spark_equals_the_reference_impact_under_lctn(spark, tmp_path, lctn=1):
    """EXPLAIN CHANGE in a session with Spark decides the shapes with the compiled functions of both filter
    sets in one job: with lower_case_table_names=1 (the test above covers 0) its rows equal the reference
    evaluator's impact (random rules and changes, hostile names), and equal deciding every event twice."""
    from rpl_sql.server import impact as core
    from rpl_sql.storage import landed_shapes
    from rpl_sql.language.parser import parse

    rnd = random.Random(100 + lctn)
    wh = str(tmp_path / "wh")
    s = rpl_sql.connect(wh)
    s.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n"
              f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'b';\n"
              f"CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL 'a';\n"
              f"CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL 'b'")
    if lctn:
        from dataclasses import replace
        s.store.transact(lambda st: (replace(st, lower_case_table_names=lctn), None), {"statement": "test: lctn"})
    rows = {"a": land(wh, "a", rnd, 300), "b": land(wh, "b", rnd, 200)}
    with_spark = rpl_sql.register(spark, wh)
    for _ in range(3):
        ch = rnd.choice(["a", "b"])
        change = f"CHANGE REPLICATION FILTER {random_rules(rnd)} FOR CHANNEL '{ch}'"
        got = with_spark.execute("EXPLAIN " + change)[-1].rows
        state = s.state
        after = core.proposed(state, parse(change)[0], 0)
        want = core.impact(state, after, landed_shapes.shapes(wh, [ch]), [ch])
        assert got == want, change
        assert got[-1][3] == len(rows[ch])
        flips = sum(r[3] for r in got[:-1])
        assert flips == sum(1 for d0, d1 in zip(brute(state, ch, rows[ch]), brute(after, ch, rows[ch]))
                            if (d0.apply, d0.decided_by) != (d1.apply, d1.decided_by))


def test_table_changes_name_what_a_change_widens_and_narrows(warehouse):
    s = rpl_sql.connect(warehouse)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'h' FOR CHANNEL 'p'")
    none = s.state.channel("p").filters
    s.execute("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = ('shop.o%', 'crm.%'), "  # after the rewrite
              "REPLICATE_REWRITE_DB = ((src, crm)), REPLICATE_IGNORE_TABLE = (shop.old) FOR CHANNEL 'p'")
    rules = s.state.channel("p").filters
    tables = [("shop", "orders", 5), ("shop", "old", 1), ("src", "c", 2), ("hr", "people", 3)]
    got = table_changes(none, rules, s.state.matching, 0, tables)
    assert got.widened == [("src", "c", "crm", "c", 2)]  # a new rewrite target: copied there
    assert {n[:3] for n in got.narrowed} == {("shop", "old", "shop"), ("src", "c", "src"), ("hr", "people", "hr")}
    back = table_changes(rules, none, s.state.matching, 0, tables)
    assert {w[:3] for w in back.widened} == {("shop", "old", "shop"), ("src", "c", "src"), ("hr", "people", "hr")}
    assert back.narrowed == [("src", "c", "crm", "c", 2)]
    assert isinstance(got, TableChanges) and table_changes(rules, rules, s.state.matching, 0, tables) == TableChanges()
    again, lctn = filters_of(filters_text(rules, 1))
    assert lctn == 1 and all(again.values(t) == rules.values(t) for t in FilterType)


def test_explain_lists_the_replica_tables_a_change_would_backfill_or_stop(warehouse):
    s = rpl_sql.connect(warehouse)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'h' FOR CHANNEL 'p'; "
              "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (shop) FOR CHANNEL 'p'")
    before = s.state
    after = impact.proposed(before, parse("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (shop, `we'ird`), "
                                              "REPLICATE_REWRITE_DB = ((src, `we'ird`)) FOR CHANNEL 'p'")[0], 0)
    listed = [("shop", "orders", 7), ("src", "c", 2), ("we'ird", "x", None), ("hr", "people", 3)]
    rows = impact.table_rows("p", before, after, listed)
    assert [r[1:3] + r[4:6] + r[8:] for r in rows] == [
        ("src", "c", "IGNORE", "APPLY", "BACKFILL INTO we'ird.c", 2),
        ("we'ird", "x", "IGNORE", "APPLY", "BACKFILL", None)]
    assert all(len(r) == len(impact.IMPACT_COLUMNS) and r[0] == "p" and r[3] is None for r in rows)
    back = impact.table_rows("p", after, before, listed)
    assert {(r[1], r[2], r[8]) for r in back} == {("src", "c", "STOP REPLICATING OF we'ird.c"),
                                                   ("we'ird", "x", "STOP REPLICATING")}


def test_explain_says_when_the_source_is_not_reached_and_keeps_the_rest(warehouse):
    """A channel whose tables `rpl-sql replica` keeps, its source down: a warning instead of the table rows, and
    the landed events' rows stand. A channel without replica tables lists none and warns of nothing."""
    from rpl_sql.storage.replica_catalog import Catalog

    s = rpl_sql.connect(warehouse)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = 9, SOURCE_USER = 'u', "
              "SOURCE_PASSWORD = 'sekrit' FOR CHANNEL 'p'")
    change = "EXPLAIN CHANGE REPLICATION FILTER REPLICATE_DO_DB = (shop) FOR CHANNEL 'p'"
    res = s.execute(change)[-1]
    assert res.columns == impact.IMPACT_COLUMNS and not res.warnings
    Catalog.load(warehouse, "p").commit(0)
    res = s.execute(change)[-1]
    assert [r[2] for r in res.rows] == ["(all landed events)"]
    (w,) = res.warnings
    assert w.level == "Warning" and w.code == 2003 and "channel 'p' (127.0.0.1:9) was not reached" in w.message
    assert "sekrit" not in w.message and not any(s.state.channel("p").filters.values(t) for t in FilterType)
