"""Per-rule hit counters (rpl_sql_filter_rule_hits, SHOW REPLICATION FILTER HITS): the rule behind every
COUNTER hit, kept with COUNTER and reset with it.

The appliers' exactness across crashes is checked where COUNTER's is (tests/pipeline/test_apply.py's `counters`
compares the per-rule hits with the reference evaluator's after every killed and resumed run).
"""
from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rpl_sql
from rpl_sql.server import execute as server
from rpl_sql.filters.evaluate import RowEvent, TableRef, decide, hit_rules, statement_event
from rpl_sql.filters.rules import FilterType as T
from rpl_sql.storage.state_table import state_from_table, state_to_table

from tests.compile.test_compile import channel_sets, make_events, states


def _events(state, seed):
    for ch, db, tbl, cmd, ddb, tables in make_events(state, seed, 200):
        c = state.channel(ch.lower()) if ch else None
        if c is None:
            continue
        if db is not None and tbl is not None:
            yield c, RowEvent(db, tbl)
        if cmd and tables is not None and all(t is not None and t[1] is not None for t in tables):
            yield c, statement_event(cmd, ddb, [TableRef(t[0], t[1], bool(t[2])) for t in tables])


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), lctn=st.sampled_from([0, 1, 2]), seed=st.integers(0, 2**32 - 1))
def test_every_hit_has_one_rule_of_its_type_and_the_sums_are_counter(data, lctn, seed):
    state = states(lctn, data.draw(channel_sets(lctn)))
    by_channel: dict[str, list] = {}
    for c, ev in _events(state, seed):
        try:
            d = decide(c.filters, ev, state.matching)
        except rpl_sql.MySQLError:
            continue
        rules = hit_rules(c.filters, ev, d, lctn)
        assert [h for h, _ in rules] == list(d.hits)
        for h, value in rules:
            assert value in c.filters.values(h), (h, value, ev, d)
            if h.value == d.decided_by:
                assert value == d.rule
        by_channel.setdefault(c.name, []).append(ev)
    for name, events in by_channel.items():
        after, decisions = server.apply_events(state, name, events, now=7)
        want = Counter(h for d in decisions for h in d.hits)
        for t in T:
            slot = after.channel(name).filters[t]
            assert slot.counter == want[t] and sum(n for _, n, _ in slot.rule_hits) == want[t]
            assert all(at == 7 for _, _, at in slot.rule_hits)
            hit = {x for x, _, _ in slot.rule_hits}
            assert [v for v, _, _ in slot.rule_hits] == list(dict.fromkeys(v for v in slot.values if v in hit))
        assert state_from_table(state_to_table(after)) == after  # the per-rule hits are stored exactly


def test_the_same_statements_reset_them(tmp_path):
    s = rpl_sql.connect(str(tmp_path / "wh"))
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'c';"
              "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`sh'op`, crm), REPLICATE_WILD_IGNORE_TABLE = "
              "('crm.tmp\\_%') FOR CHANNEL 'c'")
    s.apply_events("c", [RowEvent("sh'op", "t"), RowEvent("crm", "tmp_1"), RowEvent("crm", "t"), RowEvent("x", "t")])

    def hits():
        return {(r[1], r[2]): r[3] for r in s.execute("SHOW REPLICATION FILTER HITS FOR CHANNEL 'c'")[-1].rows}

    assert hits() == {("REPLICATE_DO_DB", "sh'op"): 1, ("REPLICATE_DO_DB", "crm"): 2,
                      ("REPLICATE_WILD_IGNORE_TABLE", "crm.tmp\\_%"): 1}
    rows = s.execute("SHOW REPLICATION FILTER HITS")[-1].rows
    assert all(r[4] is not None for r in rows)  # LAST_HIT
    s.execute("RESET REPLICA FOR CHANNEL 'c'")  # keeps COUNTER, so keeps these
    assert hits()[("REPLICATE_DO_DB", "crm")] == 2
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`sh'op`, crm) FOR CHANNEL 'c'")  # same values: reset
    assert hits() == {("REPLICATE_DO_DB", "sh'op"): 0, ("REPLICATE_DO_DB", "crm"): 0,
                      ("REPLICATE_WILD_IGNORE_TABLE", "crm.tmp\\_%"): 1}
    assert s.execute("SHOW REPLICATION FILTER HITS FOR CHANNEL 'c'")[-1].rows[0][4] is None
    v = s.store.version()
    s.apply_events("c", [RowEvent("crm", "tmp_2")])
    assert s.execute(f"SHOW REPLICATION FILTER HITS FOR CHANNEL 'c' AS OF {v}")[-1].rows[2][3] == 1
    assert hits()[("REPLICATE_WILD_IGNORE_TABLE", "crm.tmp\\_%")] == 2
    s.start([])  # a restart rebuilds the filters from the start-up options: no hits, no rows for 'c'
    assert hits() == {}
    s.execute("RESET REPLICA ALL FOR CHANNEL 'c'")
    assert s.execute("SHOW REPLICATION FILTER HITS")[-1].rows == []
