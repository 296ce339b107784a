"""sql_replica_skip_counter: the statement, where the counter goes, and the applier's skip batch."""
from __future__ import annotations

import pytest

import rpl_sql
from rpl_sql.errors import MySQLError


def status(s, channel):
    res = s.execute(f"SHOW REPLICA STATUS FOR CHANNEL '{channel}'")[-1]
    return dict(zip(res.columns, res.rows[0]))


def test_the_counter_is_set_globally_and_taken_by_the_next_sql_thread_that_starts(warehouse):
    s = rpl_sql.connect(warehouse)
    s.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a';"
              "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'b'")
    s.execute("SET GLOBAL sql_replica_skip_counter = 2")
    assert s.state.skip_counter == 2 and status(s, "a")["Skip_Counter"] == 0
    s.execute("START REPLICA SQL_THREAD FOR CHANNEL 'b'")
    assert status(s, "b")["Skip_Counter"] == 2 and s.state.skip_counter == 0
    s.execute("START REPLICA FOR CHANNEL 'a'")
    assert status(s, "a")["Skip_Counter"] == 0
    s.execute("SET GLOBAL a.sql_slave_skip_counter = 5")  # MariaDB: that connection's own
    assert status(s, "a")["Skip_Counter"] == 5
    assert rpl_sql.connect(warehouse).state.channel("a").skip_counter == 5  # persisted


@pytest.mark.parametrize("text, code", [
    ("SET GLOBAL sql_replica_skip_counter = 'x'", 1232),
    ("SET GLOBAL sql_replica_skip_counter = -1", 1064),
    ("SET sql_replica_skip_counter = 1", 1229),
    ("SET GLOBAL nosuch.sql_slave_skip_counter = 1", 3074),
])
def test_bad_forms_are_mysql_errors_and_change_nothing(warehouse, text, code):
    s = rpl_sql.connect(warehouse)
    before = s.store.version()
    with pytest.raises(MySQLError) as e:
        s.execute(text)
    assert e.value.code == code
    assert s.store.version() == before
