"""Filter lint (rpl_sql.filters.lint): every warning fires on a rule set where it should and stays quiet on a close
one where it should not; SHOW REPLICATION FILTER WARNINGS with hits over landed events; `rpl-sql lint` on
a script and an option file (hostile names in the rules)."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rpl_sql
from rpl_sql.cli.lint_command import apply_script
from rpl_sql.filters.lint import CODES, lint_state
from rpl_sql.filters.state import initial_state


def codes(script: str) -> list[tuple[str, str, str]]:
    state = apply_script(initial_state(), script)
    return [(w.code, w.filter, w.rule) for w in lint_state(state)]


def F(rules: str, channel: str = "a") -> str:
    return f"CHANGE REPLICATION FILTER {rules} FOR CHANNEL '{channel}'"


CASES = [  # (code, fires on, quiet on)
    ("RPL001", F("REPLICATE_DO_DB = (`s'a,les`), REPLICATE_IGNORE_DB = (tmp)"), F("REPLICATE_IGNORE_DB = (tmp)")),
    ("RPL002", F("REPLICATE_DO_DB = (sales), REPLICATE_DO_TABLE = (hr.people)"),
     F("REPLICATE_DO_DB = (sales, hr), REPLICATE_DO_TABLE = (hr.people)")),
    ("RPL002", F("REPLICATE_IGNORE_DB = (`h%r`), REPLICATE_WILD_IGNORE_TABLE = ('h\\%r.x%')"),
     F("REPLICATE_IGNORE_DB = (hr), REPLICATE_WILD_IGNORE_TABLE = ('h\\%r.x%')")),
    ("RPL003", F("REPLICATE_WILD_DO_TABLE = ('sales.order_%')"), F("REPLICATE_WILD_DO_TABLE = ('sales.order\\_%')")),
    ("RPL003", F("REPLICATE_WILD_IGNORE_TABLE = ('sa%les.x')"), F("REPLICATE_WILD_IGNORE_TABLE = ('sales%.x')")),
    ("RPL004", F("REPLICATE_DO_DB = (Sales, sales)"), F("REPLICATE_DO_DB = (sales, sales2)")),
    ("RPL005", F("REPLICATE_DO_DB = (shop), REPLICATE_REWRITE_DB = ((shop, crm))"),
     F("REPLICATE_DO_DB = (crm), REPLICATE_REWRITE_DB = ((shop, crm))")),
    ("RPL005", F("REPLICATE_IGNORE_DB = (shop), REPLICATE_REWRITE_DB = ((shop, crm))"),
     F("REPLICATE_IGNORE_DB = (crm2), REPLICATE_REWRITE_DB = ((shop, crm))")),
    ("RPL005", F("REPLICATE_REWRITE_DB = ((shop, crm)), REPLICATE_WILD_IGNORE_TABLE = ('shop.tmp%')"),
     F("REPLICATE_REWRITE_DB = ((shop, crm)), REPLICATE_WILD_IGNORE_TABLE = ('crm.tmp%', 'sh%.tmp%')")),
    ("RPL005", F("REPLICATE_REWRITE_DB = ((shop, crm)), REPLICATE_DO_TABLE = (shop.orders)"),
     F("REPLICATE_REWRITE_DB = ((shop, crm), (crm, shop)), REPLICATE_DO_TABLE = (shop.orders)")),
    ("RPL006", F("REPLICATE_REWRITE_DB = ((a, b), (b, `c``d`))"), F("REPLICATE_REWRITE_DB = ((a, b), (c, d))")),
    ("RPL007", F("REPLICATE_DO_DB = (sales), REPLICATE_IGNORE_TABLE = (sales.tmp)"),
     F("REPLICATE_IGNORE_TABLE = (sales.tmp)")),
]


@pytest.mark.parametrize("code, fires, quiet", CASES)
def test_each_warning_fires_and_stays_quiet(code, fires, quiet):
    setup = "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n"
    assert code in {c for c, _, _ in codes(setup + fires)}, codes(setup + fires)
    assert code not in {c for c, _, _ in codes(setup + quiet)}, codes(setup + quiet)


def test_letter_case_under_lower_case_table_names():
    """lctn=0: two names, of which the source can have only one spelling; lctn=1: one rule written twice."""
    def why(lctn):
        state = apply_script(replace(initial_state(), lower_case_table_names=lctn),
                             F("REPLICATE_DO_DB = (sales, Sales)"))
        return [w.why for w in lint_state(state) if w.code == "RPL004"]

    assert len(why(0)) == 1 and "two different names" in why(0)[0]
    assert len(why(1)) == 1 and "the rules are one" in why(1)[0]


def test_every_code_is_documented_and_tested():
    assert {c for c, _, _ in CASES} | {"RPL008"} == set(CODES)


def test_never_matched_rules_over_landed_events(tmp_path):
    """RPL008 from the landed events: each shape decided once with the evaluator's trace, its count credited."""
    from deltalake import write_deltalake
    import pyarrow as pa

    from rpl_sql.pipeline.events import EVENTS_SCHEMA, PARTITION_BY, events_path

    wh = str(tmp_path / "wh")
    s = rpl_sql.connect(wh)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n"
              + F("REPLICATE_REWRITE_DB = ((shop, crm)), REPLICATE_WILD_IGNORE_TABLE = ('crm.tmp\\_%', 'nope.%')"))
    rows = [{"channel": "a", "seq": i + 1, "event_type": "write_rows", "db_name": "shop",
             "table_name": "tmp_1" if i % 2 else "orders", "filter_db": "shop", "source": "binlog"}
            for i in range(6)]
    rows.append({"channel": "a", "seq": 7, "event_type": "query", "command": "UPDATE", "default_db": "shop",
                 "tables": [{"db": None, "name": "t", "updating": True}], "filter_db": "shop", "source": "binlog"})
    write_deltalake(events_path(wh), pa.Table.from_pylist(rows, schema=EVENTS_SCHEMA), partition_by=PARTITION_BY)
    res = s.execute("SHOW REPLICATION FILTER WARNINGS FOR CHANNEL 'a'")[-1]
    never = {(r[2], r[3]): r[4] for r in res.rows if r[0] == "RPL008"}
    assert never == {("REPLICATE_WILD_IGNORE_TABLE", "nope.%"): "matched none of the channel's 7 landed events"}
    s.execute(F("REPLICATE_WILD_IGNORE_TABLE = ('nope.%')"))
    never = {(r[2], r[3]) for r in s.execute("SHOW REPLICATION FILTER WARNINGS")[-1].rows if r[0] == "RPL008"}
    assert never == {("REPLICATE_WILD_IGNORE_TABLE", "nope.%")}  # and the rewrite still matched 7


def test_rpl_sql_lint_on_a_script_and_an_option_file(tmp_path):
    cnf = tmp_path / "my.cnf"
    cnf.write_text("[mysqld]\nreplicate-do-db = sales\nreplicate-ignore-db = tmp\n"
                   "replicate-wild-do-table = a:sales.order_%\n", encoding="utf-8")
    clean = tmp_path / "clean.sql"
    clean.write_text(F("REPLICATE_DO_DB = (crm)", "b") + ";\n", encoding="utf-8")
    bad = tmp_path / "bad.sql"
    bad.write_text(F("REPLICATE_DO_DB = (crm", "b"), encoding="utf-8")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "rpl_sql.cli", "lint", *map(str, args)], capture_output=True,
                              text=True, timeout=120)

    out = run(cnf)
    assert out.returncode == 1 and "RPL001 global filters: REPLICATE_IGNORE_DB tmp" in out.stdout
    assert "RPL003 channel 'a': REPLICATE_WILD_DO_TABLE sales.order_%" in out.stdout
    out = run(clean)
    assert (out.returncode, out.stdout) == (0, "") and "0 warnings" in out.stderr
    out = run(bad)
    assert out.returncode == 2 and "ERROR 1064 (42000)" in out.stderr


NAMES = st.sampled_from(["shop", "crm", "Shop", "a_b", "a%b", "x"])


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(NAMES, NAMES), max_size=3),
       rules=st.lists(st.tuples(st.sampled_from(["REPLICATE_DO_TABLE", "REPLICATE_IGNORE_TABLE",
                                                 "REPLICATE_WILD_DO_TABLE", "REPLICATE_WILD_IGNORE_TABLE"]),
                                NAMES, st.sampled_from(["t", "tmp%", "t_1"])), min_size=1, max_size=3),
       lctn=st.sampled_from([0, 1]))
def test_a_table_rule_rpl005_flags_never_decides_a_row_event(pairs, rules, lctn):
    """What RPL005 says of a table rule under a rewrite holds in the reference evaluator: no row event of any
    database is decided by that rule."""
    from rpl_sql.filters.evaluate import RowEvent, decide
    from rpl_sql.filters.rules import FilterType

    pairs = list({p[0].lower() if lctn else p[0]: p for p in pairs}.values())  # one pair per source
    by_type: dict[str, list[str]] = {}
    for ftype, db, table in rules:
        wild = "WILD" in ftype
        by_type.setdefault(ftype, []).append(f"'{db}.{table}'" if wild else f"`{db}`.`{table}`")
    text = ", ".join(f"{t} = ({', '.join(v)})" for t, v in by_type.items())
    if pairs:
        text += ", REPLICATE_REWRITE_DB = (" + ", ".join(f"(`{a}`, `{b}`)" for a, b in pairs) + ")"
    state = apply_script(replace(initial_state(), lower_case_table_names=lctn),
                         "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';\n" + F(text))
    flagged = {(w.filter, w.rule) for w in lint_state(state) if w.code == "RPL005" and "TABLE" in w.filter}
    filters = state.channel("a").filters
    for db in ["shop", "crm", "Shop", "a_b", "a%b", "x", "axb"]:
        for table in ["t", "tmp", "tmpx", "t_1", "t11"]:
            d = decide(filters, RowEvent(db, table), state.matching)
            rule = (d.decided_by, str(d.rule)) if d.rule is not None else None
            assert rule not in flagged, (db, table, d, flagged)
    assert all(FilterType(f) for f, _ in flagged)
