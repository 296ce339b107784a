"""RESYNC REPLICA TABLE: the request it records in the channel's state, and MySQL's errors for the rest."""
from __future__ import annotations

import pytest

from rpl_sql.errors import MySQLError
from rpl_sql.filters.state import ServerState
from rpl_sql.language.parser import parse
from rpl_sql.server import execute as server


def run(state: ServerState, text: str) -> ServerState:
    for stmt in parse(text):
        state = server.execute(state, stmt, 1).state
    return state


def test_requests_are_numbered_per_channel_and_keep_exact_names():
    state = run(ServerState(), "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a'")
    state = run(state, "RESYNC REPLICA TABLE shop.t, `x.y`.`it's`, shop.t FOR CHANNEL 'a'")
    assert state.channel("a").resync == ((1, "shop", "t"), (1, "x.y", "it's"))  # a name once per request
    state = run(state, "RESYNC SLAVE TABLE `Db`.`T`")  # the one configured channel; SLAVE as MySQL's old word
    assert state.channel("a").resync[-1] == (2, "Db", "T")


@pytest.mark.parametrize("setup, text, code", [
    ("", "RESYNC REPLICA TABLE shop.t", 1200),
    ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a'", "RESYNC REPLICA TABLE shop.t FOR CHANNEL 'b'",
     3074),
    ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a'; CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' "
     "FOR CHANNEL 'b'", "RESYNC REPLICA TABLE shop.t", 3079),
    ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'a'", "RESYNC REPLICA TABLE shop FOR CHANNEL 'a'",
     1064),
])
def test_errors_are_mysqls_and_change_nothing(setup, text, code):
    state = run(ServerState(), setup) if setup else ServerState()
    with pytest.raises(MySQLError) as e:
        run(state, text)
    assert e.value.code == code
