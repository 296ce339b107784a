"""Statement and start-up semantics beyond cases.md (spec/statements.md), through the public Session."""
from __future__ import annotations

import itertools

import pytest

from rpl_sql import MySQLError, Session, StartupError
from rpl_sql.server.performance_schema import REPLICA_STATUS_COLUMNS, SLAVE_STATUS_COLUMNS
from rpl_sql.server.startup import parse_startup, read_option_file


@pytest.fixture
def s(tmp_path):
    ticks = itertools.count(1_700_000_000_000_000, 1_000_000)
    return Session(str(tmp_path / "wh"), clock=lambda: next(ticks))


def rows(session):
    return [(c, n, r, b, k) for c, n, r, b, _, k in session.filters()]


def configure(s, *names):
    s.execute(";".join(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL '{n}'" for n in names))


def messages(results):
    return [(w.level, w.code, w.message) for r in results for w in r.warnings]


def test_start_stop_notes_single_and_multi_channel(s):
    configure(s, "a", "b")
    assert messages(s.execute("START REPLICA FOR CHANNEL 'a'")) == []
    assert messages(s.execute("START REPLICA FOR CHANNEL 'a'")) == [("Note", 1254, "Replica is already running")]
    assert messages(s.execute("START REPLICA")) == [
        ("Note", 3083, "Replication thread(s) for channel 'a' are already runnning.")]
    s.execute("STOP REPLICA")
    assert messages(s.execute("STOP REPLICA")) == [
        ("Note", 3084, "Replication thread(s) for channel 'a' are already stopped."),
        ("Note", 3084, "Replication thread(s) for channel 'b' are already stopped.")]
    assert messages(s.execute("STOP REPLICA FOR CHANNEL 'a'")) == [("Note", 1255, "Replica already has been stopped")]


def test_thread_types_and_io_thread_does_not_unblock_filters(s):
    configure(s, "a")
    s.execute("START REPLICA IO_THREAD FOR CHANNEL 'a'")
    ch = s.state.channel("a")
    assert (ch.io_running, ch.sql_running) == (True, False)
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(x) FOR CHANNEL 'a'")  # receiver may run
    s.execute("START REPLICA RELAY_THREAD, SQL_THREAD FOR CHANNEL 'a'")
    with pytest.raises(MySQLError) as e:
        s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(y) FOR CHANNEL 'a'")
    assert e.value.code == 3085
    s.execute("STOP REPLICA SQL_THREAD FOR CHANNEL 'a'")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(y) FOR CHANNEL 'a'")


def test_start_with_nothing_configured_is_bad_replica(s):
    with pytest.raises(MySQLError) as e:
        s.execute("START REPLICA")
    assert e.value.code == 1200


def test_legacy_spellings_warn_1287(s):
    res = s.execute("CHANGE MASTER TO MASTER_HOST='h', MASTER_PORT=3307")
    assert messages(res) == [
        ("Warning", 1287, "'CHANGE MASTER' is deprecated and will be removed in a future release. "
                          "Please use CHANGE REPLICATION SOURCE instead"),
        ("Warning", 1287, "'MASTER_HOST' is deprecated and will be removed in a future release. "
                          "Please use SOURCE_HOST instead"),
        ("Warning", 1287, "'MASTER_PORT' is deprecated and will be removed in a future release. "
                          "Please use SOURCE_PORT instead")]
    assert s.state.channel("").option("SOURCE_PORT") == 3307
    assert messages(s.execute("START SLAVE"))[0][2].startswith("'START SLAVE' is deprecated")
    assert messages(s.execute("STOP SLAVE"))[0][2].endswith("Please use STOP REPLICA instead")
    assert messages(s.execute("RESET SLAVE"))[0][2].startswith("'RESET SLAVE' is deprecated")


def test_show_slave_status_uses_old_column_names(s):
    configure(s, "a")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB=((x,y)) FOR CHANNEL 'a'")
    r = s.execute("SHOW SLAVE STATUS")[0]
    assert r.columns == SLAVE_STATUS_COLUMNS
    row = dict(zip(r.columns, r.rows[0]))
    assert row["Slave_IO_Running"] == "No" and row["Master_Host"] == "h" and row["Get_master_public_key"] == 0
    assert row["Replicate_Rewrite_DB"] == "(x,y)" and row["Channel_Name"] == "a"
    r = s.execute("SHOW REPLICA STATUS")[0]
    assert r.columns == REPLICA_STATUS_COLUMNS
    assert REPLICA_STATUS_COLUMNS.index("Replicate_Do_DB") == REPLICA_STATUS_COLUMNS.index("Replica_SQL_Running") + 1
    assert REPLICA_STATUS_COLUMNS.index("Replicate_Rewrite_DB") == REPLICA_STATUS_COLUMNS.index("Auto_Position") + 1
    assert REPLICA_STATUS_COLUMNS.index("Channel_Name") == REPLICA_STATUS_COLUMNS.index("Replicate_Rewrite_DB") + 1


def test_show_status_lists_configured_channels_in_name_order(s):
    configure(s, "zz", "B", "a", "group_replication_applier", "group_replication_recovery")
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_PORT=1 FOR CHANNEL 'unconf'")
    names = [r[REPLICA_STATUS_COLUMNS.index("Channel_Name")] for r in s.execute("SHOW REPLICA STATUS")[0].rows]
    assert names == ["a", "b", "group_replication_recovery", "zz"]
    assert s.execute("SHOW REPLICA STATUS FOR CHANNEL 'unconf'")[0].rows == []


def test_channel_names_are_lower_cased_everywhere(s):
    configure(s, "CH_1")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(Db1) FOR CHANNEL 'Ch_1'")
    assert rows(s) == [("ch_1", "REPLICATE_DO_DB", "Db1", "CHANGE_REPLICATION_FILTER_FOR_CHANNEL", 0)]


def test_reconfiguring_a_configured_channel_copies_nothing(s):
    configure(s, "a")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(g1)")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=() FOR CHANNEL 'a'")
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_PORT=3310 FOR CHANNEL 'a'")
    assert rows(s) == [("a", "REPLICATE_DO_DB", "", "CHANGE_REPLICATION_FILTER_FOR_CHANNEL", 0)]


def test_global_statement_skips_unconfigured_and_gr_channels_and_copies_later(s):
    configure(s, "a", "group_replication_applier")
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_PORT=1 FOR CHANNEL 'later'")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB=(mysql), REPLICATE_DO_TABLE=()")
    assert rows(s) == [("a", "REPLICATE_IGNORE_DB", "mysql", "CHANGE_REPLICATION_FILTER", 0),
                       ("a", "REPLICATE_DO_TABLE", "", "CHANGE_REPLICATION_FILTER", 0)]
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'later'")
    # the emptied global type is not copied: the new channel gets only the non-empty one
    assert rows(s)[-1:] == [("later", "REPLICATE_IGNORE_DB", "mysql", "CHANGE_REPLICATION_FILTER", 0)]


def test_one_statement_one_active_since(s):
    configure(s, "a", "b")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(x), REPLICATE_IGNORE_DB=(y)")
    stamps = {r[4] for r in s.filters()} | {r[3] for r in s.global_filters()}
    assert len(stamps) == 1
    before = s.filters()
    s.execute("START REPLICA; STOP REPLICA; RESET REPLICA")
    assert s.filters() == before
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(x) FOR CHANNEL 'a'")  # same value: restarts stats
    assert s.filters()[0][4] > before[0][4]


def test_table_rules_are_a_sorted_set(s):
    configure(s, "a")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_TABLE=(db2.b, db1.a, db1.a), "
              "REPLICATE_IGNORE_TABLE=(b.x, B.y) FOR CHANNEL 'a'")
    assert [r[2] for r in rows(s)] == ["db1.a,db2.b", "B.y,b.x"]


def test_max_channels(s):
    configure(s, *[f"c{i}" for i in range(255)])  # + the default channel = 256
    with pytest.raises(MySQLError) as e:
        configure(s, "one_too_many")
    assert e.value.code == 3080


def test_reset_replica_keeps_filters_clears_positions_and_all_spares_gr(s):
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h', SOURCE_LOG_FILE='b.000002', SOURCE_LOG_POS=120 "
              "FOR CHANNEL 'a'")
    configure(s, "group_replication_recovery")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(x) FOR CHANNEL 'a'")
    s.execute("RESET REPLICA FOR CHANNEL 'a'")
    ch = s.state.channel("a")
    assert ch.configured and ch.option("SOURCE_LOG_FILE") is None and ch.option("SOURCE_HOST") == "h"
    assert rows(s) == [("a", "REPLICATE_DO_DB", "x", "CHANGE_REPLICATION_FILTER_FOR_CHANNEL", 0)]
    s.execute("RESET REPLICA ALL")
    assert [c.name for c in s.state.channels] == ["", "group_replication_recovery"]
    assert not s.state.channel("").configured and rows(s) == []


def test_change_source_without_channel_needs_a_single_channel(s):
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h'")
    assert s.state.channel("").configured
    configure(s, "x")
    with pytest.raises(MySQLError) as e:
        s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h2'")
    assert e.value.code == 3079


# ---------------------------------------------------------------- start-up (spec §8)

def test_startup_warnings_for_gr_unconfigured_and_missing_channels(s):
    configure(s, "a")
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_PORT=1 FOR CHANNEL 'unconf'")
    warnings = s.start(["--replicate-do-db=group_replication_applier:x", "--replicate-do-db=unconf:y",
                        "--replicate-do-db=A:z", "--replicate-do-db=a:w"])
    assert [w.message for w in warnings] == [
        "There are per-channel replication filter(s) configured for group replication channel "
        "'group_replication_applier' which is disallowed. The filter(s) have been discarded.",
        "There are per-channel replication filter(s) configured for channel 'unconf' which is not configured. "
        "The filter(s) have been discarded.",
        "There are per-channel replication filter(s) configured for channel 'A' which does not exist. "
        "The filter(s) have been discarded."]
    assert rows(s) == [("a", "REPLICATE_DO_DB", "w", "STARTUP_OPTIONS_FOR_CHANNEL", 0)]


def test_restart_drops_statement_filters_and_counters(s):
    configure(s, "a")
    s.start(["--replicate-do-db=db1"])
    s.execute("CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB=(tmp) FOR CHANNEL 'a'")
    from rpl_sql import RowEvent

    s.apply_events("a", [RowEvent("db1", "t")])
    assert rows(s) == [("a", "REPLICATE_DO_DB", "db1", "STARTUP_OPTIONS", 1),
                       ("a", "REPLICATE_IGNORE_DB", "tmp", "CHANGE_REPLICATION_FILTER_FOR_CHANNEL", 0)]
    s.execute("START REPLICA")
    s.start(["--replicate-do-db=db1"])
    assert rows(s) == [("a", "REPLICATE_DO_DB", "db1", "STARTUP_OPTIONS", 0)]
    assert not s.state.channel("a").sql_running


def test_options_accumulate_and_are_never_split_on_commas():
    opts = parse_startup(["--replicate-do-db=a,b", "--replicate_do_db=c", "--replicate-do-db=",
                          "--loose-replicate-ignore-db=x:y:z"])
    assert [(r.channel, r.value) for r in opts.rules] == [(None, "a,b"), (None, "c"), (None, ""), ("x", "y:z")]


def test_an_option_without_its_argument_aborts_start():
    """mysqld's my_getopt refuses a REQUIRED_ARG option given bare (MySQL 8.0; the spec is silent)."""
    with pytest.raises(StartupError, match="option '--replicate-do-db' requires an argument"):
        parse_startup(["--replicate-do-db"])


def test_lctn_dedupes_table_rules_case_insensitively(s):
    configure(s, "a")
    s.start(["--replicate-do-table=DB.T", "--replicate-do-table=db.t", "--replicate-do-table=db.u"],
            lower_case_table_names=1)
    assert rows(s) == [("a", "REPLICATE_DO_TABLE", "DB.T,db.u", "STARTUP_OPTIONS", 0)]


def test_option_file(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "extra.cnf").write_text("[mysqld]\nreplicate-ignore-db = extra\n")
    cnf = tmp_path / "my.cnf"
    cnf.write_text("# replica config\n[client]\nreplicate-do-db=not_me\n[mysqld]\nport=3307\ndatadir=/var/lib\n"
                   "replicate-do-db = db1   # trailing comment\nreplicate_wild_do_table='db%.t\\\\_%'\n"
                   "loose-replicate-rewrite-db=\"ch1:a -> b\"\n!includedir conf.d\n")
    assert read_option_file(cnf) == [("replicate-do-db", "db1"), ("replicate_wild_do_table", "db%.t\\_%"),
                                     ("loose-replicate-rewrite-db", "ch1:a -> b"), ("replicate-ignore-db", "extra")]
    opts = parse_startup(["--replicate-do-db=cli"], read_option_file(cnf))
    assert [r.value for r in opts.rules] == ["db1", "db%.t\\_%", ("a", "b"), "extra", "cli"]


def test_missing_option_file_is_a_startup_error(s, tmp_path):
    with pytest.raises(StartupError):
        s.start(defaults_file=tmp_path / "nope.cnf")


def test_filter_history_is_the_audit_trail(s):
    configure(s, "a")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(x) FOR CHANNEL 'a'")
    s.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(y) FOR CHANNEL 'a'")
    s.execute("START REPLICA; STOP REPLICA")
    r = s.execute("SHOW REPLICATION FILTER HISTORY FOR CHANNEL 'a'")[0]
    got = [dict(zip(r.columns, row)) for row in r.rows]
    assert [(g["FILTER_RULE"], g["PREVIOUS_RULE"]) for g in got] == [("y", "x"), ("x", None)]
    assert got[0]["STATEMENT"] == "CHANGE REPLICATION FILTER REPLICATE_DO_DB=(y) FOR CHANNEL 'a'"
    assert len(s.execute("SHOW REPLICATION FILTER HISTORY LIMIT 1")[0].rows) == 1
