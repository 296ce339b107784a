"""Filter configurations in and out (rpl_sql.configs, `rpl-sql import-filters` / `export-filters`).

Every writer is checked by reading its output back (or evaluating it as the other product would) and
requiring the same decision as the reference evaluator on hostile names; the readers against MySQL's own
start-up and MariaDB's own SET GLOBAL semantics, and the MariaDB statements against a real MariaDB server.
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rpl_sql
from rpl_sql.server import execute as server
from rpl_sql.configs import dms, mariadb, option_files
from rpl_sql.configs import debezium_lists as debezium
from rpl_sql.configs import pattern_tokens as P
from rpl_sql.configs.model import NotExpressibleError, from_state
from rpl_sql.configs.as_statements import write_statements
from rpl_sql.filters.evaluate import RowEvent, TableRef, decide, statement_event
from rpl_sql.language.parser import parse
from rpl_sql.filters.rules import Filters, FilterType as T, normalize_values
from rpl_sql.server.startup import parse_startup, read_option_file
from rpl_sql.filters.state import Channel, ServerState, is_gr_channel

from tests.support.scenarios import SCENARIOS, to_event
from tests.compile.test_compile import channel_sets, instantiate, make_events, values_for

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
HOST = (("SOURCE_HOST", "h"),)


def reachable(f: Filters) -> Filters:
    """Without the wild patterns no statement or option accepts (no '.'), which the generators also make."""
    for t in (T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE):
        if f.values(t):
            f = f.with_slot(t, replace(f[t], values=tuple(v for v in f.values(t) if "." in v)))
    return f


def configured(chans: list[Channel], lctn: int, glob: Filters = Filters()) -> ServerState:
    state = ServerState(lower_case_table_names=lctn, global_filters=reachable(glob))
    for ch in chans:
        state = state.with_channel(replace(ch, options=HOST, filters=reachable(ch.filters)))
    return state


def emptied(state: ServerState) -> ServerState:
    """The same channels, configured, with no filters: where an import lands."""
    return configured([Channel(c.name) for c in state.channels], state.lower_case_table_names)


def run_statements(state: ServerState, text: str) -> ServerState:
    for stmt in parse(text):
        state = server.execute(state, stmt, 1).state
    return state


def events_for(state: ServerState, seed: int, n: int = 120):
    """Row and statement events aimed at the state's rules, per channel name."""
    for ch, db, tbl, cmd, ddb, tables in make_events(state, seed, n):
        if ch is None or state.channel(ch.lower()) is None:
            continue
        if db is not None and tbl is not None:
            yield ch.lower(), RowEvent(db, tbl)
        if tables is not None and cmd and all(t is not None and t[1] is not None for t in tables):
            yield ch.lower(), statement_event(cmd, ddb, [TableRef(t[0], t[1], bool(t[2])) for t in tables])


def same_decisions(a: ServerState, b: ServerState, seed: int) -> None:
    for name, ev in events_for(a, seed):
        if is_gr_channel(name):
            continue
        da, db_ = decide(a.channel(name).filters, ev, a.matching), decide(b.channel(name).filters, ev, b.matching)
        assert (da.apply, da.database) == (db_.apply, db_.database), (name, ev, da, db_)


def same_values(a: ServerState, b: ServerState) -> None:
    for ch in a.configured_channels():
        for t in T:
            assert tuple(ch.filters.values(t)) == tuple(b.channel(ch.name).filters.values(t)), (ch.name, t)


# ---------------------------------------------------------------- CHANGE REPLICATION FILTER statements

@SETTINGS
@given(data=st.data(), lctn=st.sampled_from([0, 1, 2]), seed=st.integers(0, 2**32 - 1))
def test_the_statements_of_a_state_rebuild_it(data, lctn, seed):
    state = configured(data.draw(channel_sets(lctn)), lctn)
    try:
        text = write_statements(from_state(state))
    except NotExpressibleError as e:
        assert "line feed" in e.message or "NUL" in e.message
        return
    rebuilt = run_statements(emptied(state), text)
    same_values(state, rebuilt)
    same_decisions(state, rebuilt, seed)


# ---------------------------------------------------------------- MySQL option files

@st.composite
def startup_states(draw, lctn: int):
    """Global rules, and channels that each keep some global types (copied) and set others of their own."""
    glob = Filters()
    for ftype in T:
        vals = draw(st.one_of(st.just([]), st.lists(values_for(ftype), min_size=1, max_size=3)))
        if vals:
            glob = glob.configure(ftype, normalize_values(ftype, vals, lctn), "STARTUP_OPTIONS", 1)
    chans = []
    for ch in draw(channel_sets(lctn)):
        f = ch.filters
        for ftype in T:
            if not f.values(ftype) and glob.values(ftype) and draw(st.booleans()):
                f = f.configure(ftype, glob.values(ftype), "STARTUP_OPTIONS", 1)
        chans.append(replace(ch, filters=f))
    return configured(chans, lctn, glob)


def restart_from(text: str, state: ServerState) -> ServerState:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "my.cnf"
        path.write_text(text, encoding="utf-8")
        options = parse_startup([], read_option_file(path))
    return server.start(emptied(state), options, 1).state


@SETTINGS
@given(data=st.data(), lctn=st.sampled_from([0, 1, 2]), seed=st.integers(0, 2**32 - 1))
def test_an_exported_option_file_restarts_into_the_same_rules(data, lctn, seed):
    state = data.draw(startup_states(lctn))
    try:
        text = option_files.write_mysql(from_state(state))
    except NotExpressibleError as e:
        assert re.search(r"emptied|':'|quote|'->'", e.message), e.message
        return
    restarted = restart_from(text, state)
    assert restarted.lower_case_table_names == lctn
    for ch in state.channels:
        if not is_gr_channel(ch.name):
            for t in T:
                assert ch.filters.values(t) == restarted.channel(ch.name).filters.values(t), (ch.name, t, text)
    same_decisions(state, restarted, seed)


def _startup_option_lists():
    """Every start-up option list of the spec's scenarios that starts (the failing ones are the parser's)."""
    out = []
    for sid, sc in SCENARIOS.items():
        for attempt in [sc.get("startup")] + list(sc.get("attempts") or []):
            if attempt and attempt.get("options") and not (attempt.get("expect_startup") or {}).get("fails"):
                out.append(pytest.param(attempt["options"], sc.get("lower_case_table_names", 0), id=sid))
    return out


@pytest.mark.parametrize("options,lctn", _startup_option_lists())
def test_imported_option_files_decide_the_spec_cases_as_the_options_do(tmp_path, options, lctn):
    path = tmp_path / "my.cnf"
    path.write_text("[mysqld]\n" + "\n".join(o.lstrip("-") for o in options) + "\n", encoding="utf-8")
    names = {"", "channel_1", "ch1", "ch2"} | {o.split("=", 1)[1].split(":", 1)[0] for o in options
                                               if "=" in o and ":" in o.split("=", 1)[1]}
    names = {n for n in names if n and not is_gr_channel(n)} | {""}
    base = configured([Channel(n) for n in names], lctn)
    by_options = server.start(base, parse_startup(options, lower_case_table_names=lctn), 1).state
    config = option_files.read_mysql(read_option_file(path))
    imported = run_statements(base, write_statements(config))
    same_values(by_options, imported)
    events = [to_event(e) for sc in SCENARIOS.values() for step in sc.get("steps") or []
              for e in ((step.get("apply") or {}).get("events") or [])]
    events += [to_event(e) for sc in SCENARIOS.values() for v in sc.get("variants") or [] for e in v["events"]]
    assert events
    for ch in by_options.channels:
        for ev in events:
            a = decide(ch.filters, ev, by_options.matching)
            b = decide(imported.channel(ch.name).filters, ev, imported.matching)
            assert (a.apply, a.database) == (b.apply, b.database), (ch.name, ev)


def test_option_file_refusals_name_the_rule():
    glob = Filters().configure(T.DO_DB, ("a:b",), "STARTUP_OPTIONS", 1)
    with pytest.raises(NotExpressibleError, match="global REPLICATE_DO_DB rule 'a:b'.*channel name"):
        option_files.write_mysql(from_state(configured([], 0, glob)))
    ch = Channel("c", filters=Filters().configure(T.DO_DB, (), "CHANGE_REPLICATION_FILTER_FOR_CHANNEL", 1))
    glob = Filters().configure(T.DO_DB, ("x",), "STARTUP_OPTIONS", 1)
    with pytest.raises(NotExpressibleError, match="channel 'c' REPLICATE_DO_DB: the channel emptied"):
        option_files.write_mysql(from_state(configured([ch], 0, glob)))
    ch = Channel("c", filters=Filters().configure(T.REWRITE_DB, (("a ", "b"),), "STARTUP_OPTIONS", 1))
    with pytest.raises(NotExpressibleError, match=r"REPLICATE_REWRITE_DB \(a ,b\)"):
        option_files.write_mysql(from_state(configured([ch], 0)))


# ---------------------------------------------------------------- MariaDB

MARIADB_CNF = """
[mysqld]
port = 3306
replicate_do_db = shop
replicate-do-db = crm
s2.replicate_wild_do_table = sales.ord\\\\_%   # a comment
S2.replicate_rewrite_db = "old -> new"
s2.replicate_ignore_table = sales.a,b
[client]
s3.replicate_do_db = never
"""


def test_a_mariadb_option_file_is_per_connection(tmp_path):
    path = tmp_path / "my.cnf"
    path.write_text(MARIADB_CNF, encoding="utf-8")
    pairs = read_option_file(path, sections=option_files.MARIADB_SECTIONS, keep=option_files.is_mariadb_option)
    config = option_files.read_mariadb(pairs)
    assert config.global_rules == ()
    assert dict(config.channels) == {
        "": ((T.DO_DB, ("shop", "crm")),),
        "s2": ((T.IGNORE_TABLE, ("sales.a,b",)), (T.WILD_DO_TABLE, ("sales.ord\\_%",)),
               (T.REWRITE_DB, (("old", "new"),)))}
    text = write_statements(config)
    assert "FOR CHANNEL 's2'" in text and "FOR CHANNEL ''" in text
    state = run_statements(configured([Channel(""), Channel("s2")], 0), text)
    assert state.channel("s2").filters.values(T.IGNORE_TABLE) == ("sales.a,b",)


@SETTINGS
@given(data=st.data(), lctn=st.sampled_from([0, 1]), seed=st.integers(0, 2**32 - 1))
def test_mariadb_statements_rebuild_every_connection(data, lctn, seed):
    state = configured(data.draw(channel_sets(lctn)), lctn)
    try:
        text = mariadb.write_sql(state)
    except NotExpressibleError as e:
        assert "commas" in e.message or "empty" in e.message or "NUL" in e.message
        return
    try:
        statements = write_statements(mariadb.read_sql(text))
    except NotExpressibleError as e:  # MariaDB's variables take a line feed, CHANGE REPLICATION FILTER does not
        assert "line feed" in e.message
        return
    rebuilt = run_statements(emptied(state), statements)
    for ch in state.channels:
        if not is_gr_channel(ch.name):
            for t in T:
                assert ch.filters.values(t) == rebuilt.channel(ch.name).filters.values(t), (ch.name, t)


def _show_all(m) -> dict[str, dict]:
    conn = m.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW ALL SLAVES STATUS")
            names = [d[0] for d in cur.description]
            return {r["Connection_name"].lower(): r for r in (dict(zip(names, row)) for row in cur.fetchall())}
    finally:
        conn.close()


def test_a_real_mariadb_takes_the_exported_statements(tmp_path, mariadb):
    """The script runs on MariaDB as written, and MariaDB then holds, per connection, the rules rpl_sql has."""
    wh = tmp_path / "wh"
    s = rpl_sql.connect(str(wh))
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 's1';"
              "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'S é''2';"
              "CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (`mysql`, `a'b`);"
              "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`shop`, `中文`), REPLICATE_WILD_DO_TABLE = "
              "('shop.ord\\_%', 'x%.t_'), REPLICATE_REWRITE_DB = ((`old`, `shop`)) FOR CHANNEL 's1';"
              "CHANGE REPLICATION FILTER REPLICATE_DO_TABLE = (`a``b`.`t 1`, d.t), REPLICATE_WILD_IGNORE_TABLE = "
              "('d.tmp%') FOR CHANNEL 's é''2'")
    out = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "export-filters", "--warehouse", str(wh),
                          "--to", "mariadb-sql"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    mariadb.stop_following()
    try:
        setup = [f"CHANGE MASTER '{c}' TO MASTER_HOST='127.0.0.1', MASTER_PORT={port}, MASTER_USER='root'"
                 for port, c in ((1, "s1"), (2, "s é''2"))]  # MariaDB refuses two connections to one source
        code = "\n".join(ln for ln in out.stdout.splitlines() if not ln.startswith("--"))
        mariadb.execute(*setup, *[x for x in code.split(";\n") if x.strip()])
        theirs = _show_all(mariadb)
        state, compared = s.state, 0
        for ch in state.channels:
            if not ch.configured:
                continue
            row = theirs[ch.name]
            for t in T:
                col = {T.DO_DB: "Replicate_Do_DB", T.IGNORE_DB: "Replicate_Ignore_DB",
                       T.DO_TABLE: "Replicate_Do_Table", T.IGNORE_TABLE: "Replicate_Ignore_Table",
                       T.WILD_DO_TABLE: "Replicate_Wild_Do_Table",
                       T.WILD_IGNORE_TABLE: "Replicate_Wild_Ignore_Table",
                       T.REWRITE_DB: "Replicate_Rewrite_DB"}[t]
                if col not in row:
                    continue
                mine = ch.filters.values(t)
                if t is T.REWRITE_DB:
                    mine = tuple(f"{a}->{b}" for a, b in mine)
                assert sorted(x for x in (row[col] or "").split(",") if x) == sorted(mine), (ch.name, col, row[col])
                compared += 1
        assert compared >= 12  # six list columns per connection at least (Replicate_Rewrite_DB from 10.11)
    finally:
        mariadb.stop_following()


# ---------------------------------------------------------------- AWS DMS

def _mapping(*rules) -> str:
    out = []
    for i, r in enumerate(rules, 1):
        r = dict(r)
        r.setdefault("rule-id", str(i))
        r.setdefault("rule-name", str(i))
        out.append(r)
    return json.dumps({"rules": out})


def sel(schema, table, action="include", **kw):
    return {"rule-type": "selection", "object-locator": {"schema-name": schema, "table-name": table},
            "rule-action": action, "filters": [], **kw}


def rename(schema, value):
    return {"rule-type": "transformation", "rule-target": "schema", "rule-action": "rename",
            "object-locator": {"schema-name": schema}, "value": value}


def test_a_dms_mapping_becomes_channel_rules():
    text = _mapping(sel("shop", "%"), sel("shop", "audit[_]log", "exclude"), sel("crm", "customers", "explicit"),
                    sel("crm", "customers", "exclude"), sel("hr", "emp[ab]"), rename("shop", "shop_eu"),
                    {"rule-type": "table-settings", "object-locator": {"schema-name": "x", "table-name": "y"}})
    config = dms.read(text, "eu")
    rules = config.channel("eu")
    assert rules == {T.DO_TABLE: ("hr.empa", "hr.empb"), T.IGNORE_TABLE: ("shop_eu.audit_log", "crm.customers"),
                     T.WILD_DO_TABLE: ("shop\\_eu.%",), T.REWRITE_DB: (("shop", "shop_eu"),)}
    assert any("rename target" in n for n in config.notes)
    state = run_statements(configured([Channel("eu")], 0), write_statements(config))
    f = state.channel("eu").filters
    for (db, table), want in {("shop", "orders"): (True, "shop_eu"), ("shop", "audit_log"): (False, "shop_eu"),
                              ("crm", "customers"): (False, "crm"), ("hr", "empa"): (True, "hr"),
                              ("hr", "empc"): (False, "hr")}.items():
        d = decide(f, RowEvent(db, table))
        assert (d.apply, d.database) == want, (db, table)


@pytest.mark.parametrize("rules,match", [
    ([sel("s", "t", filters=[{"filter-type": "source", "column-name": "id"}])], "column filters"),
    ([sel("s", "%"), sel("s", "tmp%", "exclude")], "'1' \\(include\\) and '2' \\(exclude\\) both match 's.tmp'"),
    ([sel("s%", "%"), rename("s1", "x")], "schema pattern matches the renamed schema 's1'"),
    ([sel("s", "%"), rename("s%", "x")], "not the pattern 's%'"),
    ([sel("s", "%"), {"rule-type": "transformation", "rule-target": "table", "rule-action": "rename",
                      "object-locator": {"schema-name": "s", "table-name": "t"}, "value": "u"}], "table rename"),
    ([sel("s", "%", "exclude")], "no include rule"),
    ([sel("s", "[a-z][a-z]")], "more than 64"),
])
def test_dms_rules_without_an_exact_form_are_refused_by_name(rules, match):
    with pytest.raises(NotExpressibleError, match=match):
        dms.read(_mapping(*rules), None)


def test_two_renames_to_one_schema_are_refused_unless_selected_alike():
    alike = _mapping(sel("[as]", "t%", "include"), rename("a", "z"), rename("s", "z"))
    assert dms.read(alike, None).global_rules
    with pytest.raises(NotExpressibleError, match="renames 'a' and 'sales' both to 'z', and rule '1'"):
        dms.read(_mapping(sel("[ab]", "%", "include"), rename("a", "z"), rename("sales", "z")), None)


def test_a_malformed_mapping_is_a_mysql_style_error():
    with pytest.raises(rpl_sql.MySQLError) as e:
        dms.read("{\"rules\": [", None)
    assert e.value.code == 1525 and "DMS table mapping JSON" in e.value.message


ASCII = list("abcxyzABC019_%\\'\"`,;:$- []")
dms_names = st.one_of(st.sampled_from(["ab", "sales", "t1", "orders"]), st.text(alphabet=st.sampled_from(ASCII),
                                                                               max_size=5))
dms_piece = st.one_of(st.sampled_from(["%", "_", "[_]", "[ab]", "a", "s", "sales", "t1", "x%", "[%]"]), dms_names)


@st.composite
def dms_mappings(draw):
    rules = []
    for _ in range(draw(st.integers(1, 5))):
        schema = "".join(draw(st.lists(dms_piece, min_size=1, max_size=3)))
        table = "".join(draw(st.lists(dms_piece, min_size=1, max_size=3)))
        rules.append(sel(schema, table, draw(st.sampled_from(["include", "include", "exclude"]))))
    for _ in range(draw(st.integers(0, 2))):
        rules.append(rename(draw(st.sampled_from(["a", "sales", "s1", "ab"])), draw(st.sampled_from(["z", "t1", "x"]))))
    return _mapping(*rules)


def _probe_names(rnd: random.Random, mapping: dms.Mapping) -> list[tuple[str, str]]:
    pool = ["", "a", "ab", "sales", "t1", "s1", "z", "x", "_", "%", "b", "A"]
    for s in mapping.selections:
        for toks in (s.schema, s.table):
            pool += P.examples(toks)
    pool += [a for pair in mapping.renames for a in pair]
    pool = [p for p in pool if "." not in p]
    return [(rnd.choice(pool), rnd.choice(pool)) for _ in range(300)]


@SETTINGS
@given(text=dms_mappings(), seed=st.integers(0, 2**32 - 1))
@example(text=_mapping(sel("[_]", "%", "include"), sel("[ab]", "%", "include"), rename("a", "z"),
                       rename("sales", "z")), seed=0)
@example(text=_mapping(sel("z", "%", "include"), rename("a", "z")), seed=0)
@example(text=_mapping(sel("[_]", "ab", "include"), sel("%", "ab", "exclude")), seed=0)
def test_an_imported_dms_mapping_selects_as_dms_does(text, seed):
    m = dms.parse(text) if any(r["rule-action"] == "include" for r in json.loads(text)["rules"]
                               if r["rule-type"] == "selection") else None
    try:
        config = dms.read(text, "c")
    except NotExpressibleError:
        return
    f = run_statements(configured([Channel("c")], 0), write_statements(config)).channel("c").filters
    targets = {b for _, b in m.renames}
    for schema, table in _probe_names(random.Random(seed), m):
        if schema in targets and schema not in dict(m.renames):  # the documented assumption
            continue
        want = m.selects(schema, table)
        d = decide(f, RowEvent(schema, table))
        assert d.apply == want[0], (schema, table, text, config)
        if d.apply:
            assert d.database == want[1]


@SETTINGS
@given(data=st.data(), lctn=st.sampled_from([0, 1]), seed=st.integers(0, 2**32 - 1))
def test_an_exported_dms_mapping_selects_what_the_channel_applies(data, lctn, seed):
    ascii_names = st.one_of(st.sampled_from(["db1", "sales", "t1", "x", "a_b", "Ab", "a%b"]), dms_names)
    rules = {}
    for ftype in T:
        if data.draw(st.integers(0, 2)) == 0:
            continue
        if ftype in (T.DO_DB, T.IGNORE_DB):
            vals = data.draw(st.lists(ascii_names, min_size=1, max_size=2))
        elif ftype in (T.DO_TABLE, T.IGNORE_TABLE):
            vals = data.draw(st.lists(st.builds(lambda a, b: f"{a}.{b}", ascii_names, ascii_names), min_size=1,
                                      max_size=2))
        elif ftype is T.REWRITE_DB:
            vals = data.draw(st.lists(st.tuples(ascii_names, ascii_names), min_size=1, max_size=1))
        else:
            vals = data.draw(st.lists(st.builds(lambda a, b: f"{a}.{b}",
                                                st.sampled_from(["%", "db1", "s%", "a\\_b", "sales", "_b"]),
                                                st.sampled_from(["%", "t%", "t_", "x", "o\\%"])),
                                      min_size=1, max_size=2))
        rules[ftype] = normalize_values(ftype, vals, lctn)
    try:
        text, _ = dms.write(rules, lctn, "c")
    except NotExpressibleError:
        return
    m = dms.parse(text)
    f = Filters()
    for t, v in rules.items():
        f = f.configure(t, v, "CHANGE_REPLICATION_FILTER", 1)
    rnd = random.Random(seed)
    pool = ["db1", "DB1", "sales", "Sales", "t1", "T1", "x", "a_b", "axb", "Ab", "ab", "a%b", "tq", "o%", "oX", ""]
    pool += [p for vs in rules.values() for v in vs for p in (v if isinstance(v, tuple) else v.split(".", 1))]
    pool = [p.replace("\\", "") for p in pool if "." not in p]
    targets = {b for _, b in rules.get(T.REWRITE_DB, ())}
    for _ in range(300):
        schema, table = rnd.choice(pool), rnd.choice(pool)
        if schema in targets and schema not in dict(rules.get(T.REWRITE_DB, ())):
            continue
        d = decide(f, RowEvent(schema, table), lctn)
        got = m.selects(schema, table)
        assert got[0] == d.apply, (schema, table, rules, text)


# ---------------------------------------------------------------- Debezium

def python_regex(java: str) -> str:
    return re.sub(r"\\x\{([0-9A-Fa-f]+)\}", lambda x: "\\U%08x" % int(x.group(1), 16), java)


def debezium_decides(conf: dict, db: str, table: str) -> bool:
    def any_match(key, text):
        return any(re.fullmatch(python_regex(r), text) for r in conf[key].split(","))

    if "database.include.list" in conf and not any_match("database.include.list", db):
        return False
    if "database.exclude.list" in conf and any_match("database.exclude.list", db):
        return False
    if "table.include.list" in conf:
        return any_match("table.include.list", f"{db}.{table}")
    if "table.exclude.list" in conf:
        return not any_match("table.exclude.list", f"{db}.{table}")
    return True


@SETTINGS
@given(data=st.data(), lctn=st.sampled_from([0, 1, 2]), seed=st.integers(0, 2**32 - 1))
def test_debezium_lists_decide_every_row_change_as_the_channel(data, lctn, seed):
    ch = data.draw(channel_sets(lctn))[0]
    rules = {t: v for t, v in ((t, ch.filters.values(t)) for t in T) if v and t is not T.REWRITE_DB}
    try:
        conf = json.loads(debezium.write(rules, lctn, ch.name))
    except NotExpressibleError as e:
        assert "too long a regex" in e.message
        return
    assert not any(r == "" for v in conf.values() for r in v.split(","))
    f = Filters()
    for t, v in rules.items():
        f = f.configure(t, v, "CHANGE_REPLICATION_FILTER", 1)
    state = configured([Channel("c", filters=f)], lctn)
    rnd = random.Random(seed)
    for name, ev in events_for(state, seed, 200):
        if isinstance(ev, RowEvent):
            assert debezium_decides(conf, ev.db, ev.table) == decide(f, ev, lctn).apply, (ev, rules, conf)
    for v in rules.get(T.WILD_DO_TABLE, ()) + rules.get(T.WILD_IGNORE_TABLE, ()):
        key = instantiate(v, rnd)
        db, _, table = key.partition(".")
        assert debezium_decides(conf, db, table) == decide(f, RowEvent(db, table), lctn).apply, (key, rules)


def test_debezium_refuses_a_rewrite():
    with pytest.raises(NotExpressibleError, match="ByLogicalTableRouter"):
        debezium.write({T.REWRITE_DB: (("a", "b"),)}, 0, "c")


def test_java_regex_agrees_with_the_python_check(spark):
    """The lists are Java regexes: the JVM's java.util.regex takes them and decides as the check above does."""
    rules = {T.DO_DB: ("shop", "Σ中"), T.DO_TABLE: ("shop.a,b",), T.IGNORE_TABLE: ("shop.tmp_1", "Σ中.x"),
             T.WILD_DO_TABLE: ("shop.t\\_%", "Σ中._", "%.é__")}
    names = [("shop", "a,b"), ("shop", "t_1"), ("shop", "tmp_1"), ("shop", "tx"), ("Σ中", "é"), ("Σ中", "ab"),
             ("Σ中", "x"), ("σ中", "y"), ("shop", "é😀"), ("shop", "éab"), ("shop", "éa"), ("SHOP", "t_1")]
    for lctn in (0, 1):
        conf = json.loads(debezium.write(rules, lctn, "c"))
        rows = []
        for db, table in names:
            for key, subject in (("database.include.list", db), ("table.include.list", f"{db}.{table}")):
                for r in conf[key].split(","):
                    rows.append((r, subject, re.fullmatch(python_regex(r), subject) is not None))
        df = spark.createDataFrame(rows, "r string, s string, py boolean")
        bad = df.selectExpr("r", "s", "py", "regexp_like(s, concat('^(?:', r, ')\\\\z')) AS java") \
            .where("py <> java").collect()
        assert not bad, bad
        for db, table in names:
            assert debezium_decides(conf, db, table) == decide(
                Filters().configure(T.DO_DB, rules[T.DO_DB], "x", 1).configure(
                    T.DO_TABLE, rules[T.DO_TABLE], "x", 1).configure(
                    T.IGNORE_TABLE, rules[T.IGNORE_TABLE], "x", 1).configure(
                    T.WILD_DO_TABLE, rules[T.WILD_DO_TABLE], "x", 1), RowEvent(db, table), lctn).apply


# ---------------------------------------------------------------- the commands

def cli(*args, input_text=None):
    return subprocess.run([sys.executable, "-m", "rpl_sql.cli", *args], capture_output=True, text=True,
                          input=input_text)


def _warehouse_with_channel_eu(tmp_path):
    wh = str(tmp_path / "wh")
    s = rpl_sql.connect(wh)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'eu'")
    return wh, s, s.store.version()


def test_import_prints_then_applies_in_one_commit_and_export_round_trips(tmp_path):
    wh, s, v0 = _warehouse_with_channel_eu(tmp_path)
    cnf = tmp_path / "my.cnf"
    cnf.write_text("[mysqld]\nreplicate-ignore-db=tmp\nreplicate-wild-do-table=eu:shop.%\n"
                   "replicate-rewrite-db=eu:old->shop\n", encoding="utf-8")
    out = cli("import-filters", str(cnf))
    assert out.returncode == 0 and "CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (`tmp`);" in out.stdout
    assert s.refresh() and s.store.version() == v0  # printing changes nothing
    out = cli("import-filters", "--apply", "--warehouse", wh, str(cnf))
    assert out.returncode == 0, out.stderr
    assert s.store.version() == v0 + 1
    ch = s.refresh().channel("eu")
    assert ch.filters.values(T.WILD_DO_TABLE) == ("shop.%",) and ch.filters.values(T.IGNORE_DB) == ("tmp",)
    exported = cli("export-filters", "--warehouse", wh, "--to", "mysql-cnf")
    assert exported.returncode == 0, exported.stderr
    again = tmp_path / "again.cnf"
    again.write_text(exported.stdout, encoding="utf-8")
    assert cli("import-filters", str(again)).stdout.splitlines()[-3:] == out.stdout.splitlines()[-3:]
    dmsj = cli("export-filters", "--warehouse", wh, "--to", "dms", "--channel", "EU")
    assert dmsj.returncode == 0 and json.loads(dmsj.stdout)["rules"][-1]["value"] == "shop"
    assert cli("export-filters", "--warehouse", wh, "--to", "dms").returncode == 2  # which channel? 3079


def test_a_failing_import_changes_nothing(tmp_path):
    wh, s, v0 = _warehouse_with_channel_eu(tmp_path)
    cnf = tmp_path / "my.cnf"
    cnf.write_text("[mysqld]\nreplicate-do-db=a\nreplicate-do-db=nope:b\n", encoding="utf-8")
    out = cli("import-filters", "--apply", "--warehouse", wh, str(cnf))
    assert out.returncode == 2 and "ERROR 1794 (HY000): Replica is not configured" in out.stderr
    assert s.store.version() == v0 and not s.refresh().global_filters.values(T.DO_DB)
    bad = tmp_path / "bad.cnf"
    bad.write_text("[mysqld]\nreplicate-do-table=nodot\n", encoding="utf-8")
    out = cli("import-filters", str(bad))
    assert out.returncode == 2 and "Could not add do table rule 'nodot'!" in out.stderr
