"""WL#2387's optional extension: source-side filters in the channel definition (CHANGE REPLICATION SOURCE TO
... REPLICATE_* = (...), MariaDB's CHANGE MASTER 'c' TO ... REPLICATE_* = '...'): how they are written, kept,
shown and refused, and what they take away from a channel's tables."""
from __future__ import annotations

import pytest

import rpl_sql
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import RowEvent
from rpl_sql.filters.rules import FilterType, Matching, filters_of, source_side_of
from rpl_sql.pipeline.source_filter import SourceFilter
from rpl_sql.relay.filtering import forwarded_filter
from rpl_sql.server.impact import table_changes
from rpl_sql.server.performance_schema import channel_rows
from rpl_sql.source_server.connection import forwarded_filters
from rpl_sql.storage.store import DeltaStore

HOST = "SOURCE_HOST = '127.0.0.1'"


def state(wh):
    return DeltaStore(wh).load().state


def test_both_forms_set_the_same_filters_and_rpl_sql_channels_shows_them(warehouse):
    s = rpl_sql.connect(warehouse)
    s.execute(f"CHANGE REPLICATION SOURCE TO {HOST}, REPLICATE_DO_DB = (shop, `we,ird`), REPLICATE_IGNORE_TABLE = "
              "(shop.secret), REPLICATE_WILD_IGNORE_TABLE = ('shop.tmp%') FOR CHANNEL 'A'")
    s.execute("CHANGE MASTER 'b' TO MASTER_HOST = '127.0.0.1', REPLICATE_DO_DB = 'shop, crm', "
              "REPLICATE_DO_TABLE = 'shop.orders,crm.people', REPLICATE_WILD_DO_TABLE = 'crm.p%'")
    st = state(warehouse)
    a, b = st.channel("a").source_side_filters, st.channel("b").source_side_filters
    assert a.values(FilterType.DO_DB) == ("shop", "we,ird")
    assert a.values(FilterType.IGNORE_TABLE) == ("shop.secret",)
    assert b.values(FilterType.DO_DB) == ("shop", "crm")
    assert b.values(FilterType.DO_TABLE) == ("shop.orders", "crm.people")
    assert b.values(FilterType.WILD_DO_TABLE) == ("crm.p%",)
    assert not st.channel("a").filters.values(FilterType.DO_DB)  # the replica's own filters are another thing
    shown = {r[0]: r[-1] for r in channel_rows(st)}
    assert shown["a"] == ("REPLICATE_DO_DB: shop,we,ird; REPLICATE_IGNORE_TABLE: shop.secret; "
                          "REPLICATE_WILD_IGNORE_TABLE: shop.tmp%")
    assert shown[""] is None
    # other options leave them; an empty list or string clears one type
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_PORT = 3307, REPLICATE_IGNORE_TABLE = () FOR CHANNEL 'a'")
    s.execute("CHANGE MASTER 'B' TO REPLICATE_DO_DB = '', REPLICATE_DO_TABLE = (), REPLICATE_WILD_DO_TABLE = ''")
    st = state(warehouse)
    assert st.channel("a").source_side_filters.values(FilterType.DO_DB) == ("shop", "we,ird")
    assert not st.channel("a").source_side_filters.values(FilterType.IGNORE_TABLE)
    assert st.channel("b").source_side_filters is None


@pytest.mark.parametrize("sql,code", [
    ("CHANGE REPLICATION SOURCE TO REPLICATE_REWRITE_DB = ((a, b)) FOR CHANNEL 'a'", 1210),
    ("CHANGE MASTER 'a' TO REPLICATE_REWRITE_DB = 'a->b'", 1210),
    ("CHANGE MASTER 'a' TO REPLICATE_DO_TABLE = 'no_dot'", 3067),
    ("CHANGE MASTER 'a' TO REPLICATE_WILD_IGNORE_TABLE = 'x.%,nodot'", 3067),
    ("CHANGE REPLICATION SOURCE TO REPLICATE_WILD_DO_TABLE = ('nodot') FOR CHANNEL 'a'", 3067),
    ("CHANGE REPLICATION SOURCE TO REPLICATE_DO_TABLE = (t) FOR CHANNEL 'a'", 1064),
    ("CHANGE MASTER 'a' TO REPLICATE_DO_DB = 'x' FOR CHANNEL 'b'", 1210),
    ("CHANGE REPLICATION SOURCE TO REPLICATE_DO_DB = x FOR CHANNEL 'a'", 1064),
])
def test_bad_source_side_filters_are_refused_and_change_nothing(warehouse, sql, code):
    s = rpl_sql.connect(warehouse)
    s.execute(f"CHANGE REPLICATION SOURCE TO {HOST}, REPLICATE_DO_DB = (kept) FOR CHANNEL 'a'")
    before = state(warehouse)
    with pytest.raises(MySQLError) as e:
        s.execute(sql)
    assert e.value.code == code
    assert state(warehouse) == before


def test_a_running_channel_keeps_its_source_side_filters_until_stopped(warehouse):
    s = rpl_sql.connect(warehouse)
    s.execute(f"CHANGE REPLICATION SOURCE TO {HOST} FOR CHANNEL 'a'; START REPLICA FOR CHANNEL 'a'")
    with pytest.raises(MySQLError) as e:
        s.execute("CHANGE REPLICATION SOURCE TO REPLICATE_DO_DB = (x) FOR CHANNEL 'a'")
    assert e.value.code == 3081


def test_what_a_channel_forwards_and_what_the_relay_drops(warehouse):
    """The relay drops what either the channel's own filters or its source-side ones drop."""
    s = rpl_sql.connect(warehouse)
    s.execute(f"CHANGE REPLICATION SOURCE TO {HOST}, REPLICATE_IGNORE_DB = (hr) FOR CHANNEL 'a'; "
              "CHANGE REPLICATION FILTER REPLICATE_IGNORE_TABLE = (shop.secret) FOR CHANNEL 'a'")
    text = forwarded_filters(state(warehouse), "a")
    own, _ = filters_of(text)
    assert own.values(FilterType.IGNORE_TABLE) == ("shop.secret",) and not own.values(FilterType.IGNORE_DB)
    assert source_side_of(text).values(FilterType.IGNORE_DB) == ("hr",)
    relay = forwarded_filter(text)
    drops = {t: relay.drops(SourceFilter.row_key(*t)) for t in [("hr", "staff"), ("shop", "secret"),
                                                                ("shop", "orders")]}
    assert drops == {("hr", "staff"): True, ("shop", "secret"): True, ("shop", "orders"): False}
    s.execute("CHANGE REPLICATION SOURCE TO REPLICATE_IGNORE_DB = () FOR CHANNEL 'a'")
    assert source_side_of(forwarded_filters(state(warehouse), "a")) is None


def test_tables_follow_the_source_side_filters_too():
    """A table the source side drops is never copied nor backfilled (its events would never come); dropping it
    there narrows, allowing it again widens, as a change of the channel's own filters does."""
    from rpl_sql.filters.rules import Filters

    own = Filters().configure(FilterType.DO_DB, ("shop", "hr"), "", 0)
    side = Filters().configure(FilterType.IGNORE_TABLE, ("shop.secret",), "", 0)
    tables = [("shop", "orders", 10), ("shop", "secret", 5), ("hr", "staff", 1), ("crm", "people", 2)]
    m = Matching()
    change = table_changes(own, own, m, 0, tables, None, side)
    assert [t[:2] for t in change.narrowed] == [("shop", "secret")] and not change.widened
    change = table_changes(own, own, m, 0, tables, side, None)
    assert [t[:2] for t in change.widened] == [("shop", "secret")] and not change.narrowed
    from rpl_sql.filters.evaluate import applies_past_source_side

    assert not applies_past_source_side(own, side, RowEvent("shop", "secret"), m)
    assert applies_past_source_side(own, side, RowEvent("shop", "orders"), m)
    assert not applies_past_source_side(own, side, RowEvent("crm", "people"), m)


def test_a_debezium_feed_refuses_a_channel_with_source_side_filters(warehouse):
    """A Debezium feed cannot apply them: what they drop would land and the tables would diverge."""
    from rpl_sql.pipeline.debezium import ingest_debezium

    rpl_sql.connect(warehouse).execute(f"CHANGE REPLICATION SOURCE TO {HOST}, REPLICATE_DO_DB = (shop) "
                                       "FOR CHANNEL 'a'")
    with pytest.raises(MySQLError, match="include and exclude lists") as e:
        ingest_debezium(warehouse, "a", [])
    assert e.value.code == 1210
