"""The replica tables a filter change would backfill or stop replicating (EXPLAIN CHANGE REPLICATION FILTER),
decided over the source's table list as the running service will decide them (`impact.table_changes`)."""
from __future__ import annotations

import os

from rpl_sql.errors import MySQLWarning
from rpl_sql.filters.state import ServerState
from rpl_sql.server import impact
from rpl_sql.source_server.connection import connection_settings
from rpl_sql.source_server.table_list import source_tables


def table_change_rows(warehouse: str, before: ServerState, after: ServerState,
                      names: list[str]) -> tuple[list[tuple], list[MySQLWarning]]:
    """Rows of impact.IMPACT_COLUMNS for each channel whose tables `rpl-sql replica` keeps (a catalog exists),
    and a warning for each source not reached: the rest of the report stands without its tables."""
    from rpl_sql.storage.replica_catalog import catalog_path  # with delta-rs: loaded when asked

    rows, warnings = [], []
    for name in names:
        ch = before.channel(name)
        if ch is None or not ch.configured or ch.filters == after.channel(name).filters or \
                not os.path.isdir(os.path.join(catalog_path(warehouse, name), "_delta_log")):
            continue
        settings, _ = connection_settings(warehouse, ch)
        try:
            listed = source_tables(settings)
        except Exception as e:  # down, or refusing this user: pymysql's (code, message), else a connect error
            code = e.args[0] if e.args and isinstance(e.args[0], int) else 2003
            detail = e.args[1] if len(e.args) > 1 else str(e)
            warnings.append(MySQLWarning(
                "Warning", code, "ER_SOURCE_NOT_REACHED",
                f"The source of channel '{name}' ({settings['host']}:{settings['port']}) was not reached "
                f"({detail}); the replica tables this change would backfill or stop replicating are not listed"))
            continue
        rows += impact.table_rows(name, before, after, listed)
    return rows, warnings
