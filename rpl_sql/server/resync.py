"""RESYNC REPLICA TABLE db.t [, ...] [FOR CHANNEL 'c']: a request, kept in the channel's state, that the replica
service copy those tables from the source again (pipeline/replica/backfill.py acts on it), as Debezium's
execute-snapshot signal does. The statement only records it: one commit, in the filter history's log."""
from __future__ import annotations

from dataclasses import replace

from rpl_sql.errors import MySQLError
from rpl_sql.filters.state import ServerState
from rpl_sql.language.statements import ResyncReplicaTables

KEPT = 1000  # requests a channel keeps: the service acts on each within a batch of it


def resync_tables(state: ServerState, stmt: ResyncReplicaTables) -> ServerState:
    """The new state with the request appended (numbered after the channel's last)."""
    if stmt.channel is None:
        chans = state.configured_channels()
        if len(chans) != 1:
            raise MySQLError.of("ER_REPLICA_MULTIPLE_CHANNELS_CMD") if chans else MySQLError.of("ER_BAD_REPLICA")
        ch = chans[0]
    else:
        ch = state.channel(stmt.channel)
        if ch is None:
            raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", stmt.channel)
        if not ch.configured:
            raise MySQLError.of("ER_BAD_REPLICA")
    number = (ch.resync[-1][0] if ch.resync else 0) + 1
    asked = tuple((number, db, name) for db, name in dict.fromkeys(stmt.tables))
    return state.with_channel(replace(ch, resync=(ch.resync + asked)[-KEPT:]))
