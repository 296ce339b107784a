"""rpl_sql.filters.state: channel names have one key everywhere, and lower_case_table_names arrives as a value."""
from __future__ import annotations

import pytest

from rpl_sql import StartupError
from rpl_sql.language.parser import parse_statement
from rpl_sql.pipeline.binlog import BinlogIngest
from rpl_sql.pipeline.ingest_position import app_id
from rpl_sql.server.startup import parse_startup
from rpl_sql.filters.state import channel_key


@pytest.mark.parametrize("name", ["CH1", "Ch1", "ch1"])
def test_every_entry_point_uses_the_same_channel_key(name):
    assert parse_statement(f"START REPLICA FOR CHANNEL '{name}'").channel == "ch1"
    assert parse_statement(f"SET @@default_master_connection = '{name}'").connection == "ch1"
    assert BinlogIngest("/nonexistent", name).channel == "ch1"  # rpl-sql ingest --channel
    assert app_id(channel_key(name)) == app_id("ch1")


def test_channel_key_keeps_what_is_not_case():
    assert channel_key("Ünïcode-ß_%'`") == "ünïcode-ß_%'`"


def test_startup_prefix_is_not_folded():
    parsed = parse_startup(["--replicate-do-db=CH1:db"])
    assert [r.channel for r in parsed.rules] == ["CH1"]


@pytest.mark.parametrize("value", [0, 1, 2])
def test_lower_case_table_names_as_a_value_is_recorded_like_the_option(value):
    parsed = parse_startup(["--replicate-do-db=db"], lower_case_table_names=value)
    assert parsed.lower_case_table_names == value and parsed.raw[-1] == f"--lower-case-table-names={value}"


@pytest.mark.parametrize("value", [3, -1, True])
def test_a_bad_lower_case_table_names_value_is_refused(value):
    with pytest.raises(StartupError):
        parse_startup([], lower_case_table_names=value)


@pytest.mark.parametrize("lctn, mode", [(0, "mysql"), (1, "mysql"), (2, "effective_database")])
def test_matching_bundles_lctn_and_the_filter_mode_for_the_evaluator(lctn, mode):
    from dataclasses import replace

    from rpl_sql.filters.evaluate import RowEvent, StatementEvent, TableRef, decide
    from rpl_sql.filters.rules import Filters, FilterType, Matching
    from rpl_sql.filters.state import ServerState

    state = replace(ServerState(), lower_case_table_names=lctn, filter_mode=mode)
    assert state.matching == Matching(lctn, mode)
    f = Filters().configure(FilterType.DO_DB, ("Sales",), "CHANGE_REPLICATION_FILTER", 1)
    for ev in (RowEvent("SALES", "t"), RowEvent("hr", "t"),
               StatementEvent("UPDATE", "hr", (TableRef("sales", "t", True),))):
        assert decide(f, ev, state.matching) == decide(f, ev, lctn, mode)
