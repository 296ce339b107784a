"""Rows of performance_schema's filter tables and of SHOW REPLICA STATUS, computed from a state.

Column names, order and row order follow spec/performance-schema.md and MySQL 8.0's SHOW output.
"""
from __future__ import annotations

from datetime import datetime, timezone

from rpl_sql.filters.rules import FilterType, format_rule
from rpl_sql.filters.state import Channel, ServerState

FILTERS_COLUMNS = ("CHANNEL_NAME", "FILTER_NAME", "FILTER_RULE", "CONFIGURED_BY", "ACTIVE_SINCE", "COUNTER")
GLOBAL_FILTERS_COLUMNS = ("FILTER_NAME", "FILTER_RULE", "CONFIGURED_BY", "ACTIVE_SINCE")
# Spark DDL of the two views (MySQL's char/longtext/enum are STRING, timestamp(6) is TIMESTAMP).
FILTERS_SCHEMA = ("CHANNEL_NAME STRING NOT NULL, FILTER_NAME STRING NOT NULL, FILTER_RULE STRING NOT NULL, "
                  "CONFIGURED_BY STRING NOT NULL, ACTIVE_SINCE TIMESTAMP NOT NULL, COUNTER BIGINT NOT NULL")
GLOBAL_FILTERS_SCHEMA = ("FILTER_NAME STRING NOT NULL, FILTER_RULE STRING NOT NULL, "
                         "CONFIGURED_BY STRING NOT NULL, ACTIVE_SINCE TIMESTAMP NOT NULL")


def timestamp(micros: int) -> datetime:
    """ACTIVE_SINCE as an aware UTC datetime with microsecond precision."""
    return datetime.fromtimestamp(micros // 1_000_000, tz=timezone.utc).replace(microsecond=micros % 1_000_000)


def applier_filters(state: ServerState) -> list[tuple]:
    """replication_applier_filters: per channel (byte order), per type (fixed order), configured slots."""
    rows = []
    for ch in state.channels:
        for ftype, slot in ch.filters.rows():
            rows.append((ch.name, ftype.filter_name, format_rule(ftype, slot.values), slot.configured_by,
                         timestamp(slot.active_since), slot.counter))
    return rows


def applier_global_filters(state: ServerState) -> list[tuple]:
    """replication_applier_global_filters: no channel, no counter."""
    return [(ftype.filter_name, format_rule(ftype, slot.values), slot.configured_by, timestamp(slot.active_since))
            for ftype, slot in state.global_filters.rows()]


# rpl_sql's own: one counter per rule value (MySQL counts per filter type only)
RULE_HITS_SCHEMA = ("CHANNEL_NAME STRING NOT NULL, FILTER_NAME STRING NOT NULL, FILTER_RULE STRING NOT NULL, "
                    "HITS BIGINT NOT NULL, LAST_HIT TIMESTAMP")


def rule_hit_rows(state: ServerState) -> list[tuple]:
    """rpl_sql_filter_rule_hits: every value of every replication_applier_filters row, with the events it
    counted for (the sum per filter type is COUNTER) and when it last did (NULL: never since configured)."""
    rows = []
    for ch in state.channels:
        for ftype, slot in ch.filters.rows():
            hits = {v: (n, t) for v, n, t in slot.rule_hits}
            for v in slot.values:
                n, t = hits.pop(v, (0, 0))
                rows.append((ch.name, ftype.filter_name, format_rule(ftype, (v,)), n, timestamp(t) if t else None))
    return rows


# ---------------------------------------------------------------- SHOW REPLICA STATUS

REPLICA_STATUS_COLUMNS = (
    "Replica_IO_State", "Source_Host", "Source_User", "Source_Port", "Connect_Retry", "Source_Log_File",
    "Read_Source_Log_Pos", "Relay_Log_File", "Relay_Log_Pos", "Relay_Source_Log_File", "Replica_IO_Running",
    "Replica_SQL_Running", "Replicate_Do_DB", "Replicate_Ignore_DB", "Replicate_Do_Table",
    "Replicate_Ignore_Table", "Replicate_Wild_Do_Table", "Replicate_Wild_Ignore_Table", "Last_Errno",
    "Last_Error", "Skip_Counter", "Exec_Source_Log_Pos", "Relay_Log_Space", "Until_Condition", "Until_Log_File",
    "Until_Log_Pos", "Source_SSL_Allowed", "Source_SSL_CA_File", "Source_SSL_CA_Path", "Source_SSL_Cert",
    "Source_SSL_Cipher", "Source_SSL_Key", "Seconds_Behind_Source", "Source_SSL_Verify_Server_Cert",
    "Last_IO_Errno", "Last_IO_Error", "Last_SQL_Errno", "Last_SQL_Error", "Replicate_Ignore_Server_Ids",
    "Source_Server_Id", "Source_UUID", "Source_Info_File", "SQL_Delay", "SQL_Remaining_Delay",
    "Replica_SQL_Running_State", "Source_Retry_Count", "Source_Bind", "Last_IO_Error_Timestamp",
    "Last_SQL_Error_Timestamp", "Source_SSL_Crl", "Source_SSL_Crlpath", "Retrieved_Gtid_Set",
    "Executed_Gtid_Set", "Auto_Position", "Replicate_Rewrite_DB", "Channel_Name", "Source_TLS_Version",
    "Source_public_key_path", "Get_Source_public_key", "Network_Namespace",
)


def _legacy_name(col: str) -> str:
    """SHOW SLAVE STATUS spells the non-filter columns the old way."""
    if col == "Get_Source_public_key":
        return "Get_master_public_key"
    if col.startswith("Replica_"):
        col = "Slave_" + col[len("Replica_"):]
    return col.replace("Source", "Master")


SLAVE_STATUS_COLUMNS = tuple(_legacy_name(c) for c in REPLICA_STATUS_COLUMNS)

_FILTER_COLUMNS = {
    "Replicate_Do_DB": FilterType.DO_DB, "Replicate_Ignore_DB": FilterType.IGNORE_DB,
    "Replicate_Do_Table": FilterType.DO_TABLE, "Replicate_Ignore_Table": FilterType.IGNORE_TABLE,
    "Replicate_Wild_Do_Table": FilterType.WILD_DO_TABLE,
    "Replicate_Wild_Ignore_Table": FilterType.WILD_IGNORE_TABLE,
    "Replicate_Rewrite_DB": FilterType.REWRITE_DB,
}


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


NO_SERVICE_STATE = "No replica service runs this channel: start rpl-sql replica"


def replica_status_row(ch: Channel, applier: dict | None = None) -> tuple:
    """One channel's SHOW REPLICA STATUS row; `applier` may carry positions and GTID sets of the pipeline and
    what the replica service reports (`service_status.shown`): running threads, states, lag, last errors."""
    a = applier or {}
    o = ch.option
    io_err = a.get("last_io_error") or (0, "", "")
    sql_err = a.get("last_sql_error") or (0, "", "")
    # No replica service has run the channel (no heartbeat at all): START asked for the threads, but no receiver
    # reads the source. MySQL's word for a receiver that is not connected is Connecting; nothing is behind.
    idle = NO_SERVICE_STATE if ch.io_running else ""
    values = {
        "Replica_IO_State": a.get("io_state", idle),
        "Source_Host": o("SOURCE_HOST", ""), "Source_User": o("SOURCE_USER", ""),
        "Source_Port": o("SOURCE_PORT", 3306), "Connect_Retry": o("SOURCE_CONNECT_RETRY", 60),
        "Source_Log_File": a.get("source_log_file", o("SOURCE_LOG_FILE", "")),
        "Read_Source_Log_Pos": a.get("read_source_log_pos", o("SOURCE_LOG_POS", 4)),
        "Relay_Log_File": o("RELAY_LOG_FILE", ""), "Relay_Log_Pos": o("RELAY_LOG_POS", 4),
        "Relay_Source_Log_File": a.get("relay_source_log_file", o("SOURCE_LOG_FILE", "")),
        "Replica_IO_Running": a.get("replica_io_running", "Connecting" if ch.io_running else "No"),
        "Replica_SQL_Running": a.get("replica_sql_running", _yes(ch.sql_running)),
        "Last_Errno": sql_err[0], "Last_Error": sql_err[1], "Skip_Counter": ch.skip_counter,
        "Exec_Source_Log_Pos": a.get("exec_source_log_pos", o("SOURCE_LOG_POS", 4)),
        "Relay_Log_Space": 0, "Until_Condition": "None", "Until_Log_File": "", "Until_Log_Pos": 0,
        "Source_SSL_Allowed": "Yes" if o("SOURCE_SSL", 0) else "No",
        "Source_SSL_CA_File": o("SOURCE_SSL_CA", ""), "Source_SSL_CA_Path": o("SOURCE_SSL_CAPATH", ""),
        "Source_SSL_Cert": o("SOURCE_SSL_CERT", ""), "Source_SSL_Cipher": o("SOURCE_SSL_CIPHER", ""),
        "Source_SSL_Key": o("SOURCE_SSL_KEY", ""),
        "Seconds_Behind_Source": a.get("seconds_behind", None),
        "Source_SSL_Verify_Server_Cert": "Yes" if o("SOURCE_SSL_VERIFY_SERVER_CERT", 0) else "No",
        "Last_IO_Errno": io_err[0], "Last_IO_Error": io_err[1], "Last_SQL_Errno": sql_err[0],
        "Last_SQL_Error": sql_err[1],
        "Replicate_Ignore_Server_Ids": ",".join(str(i) for i in o("IGNORE_SERVER_IDS", ()) or ()),
        "Source_Server_Id": a.get("source_server_id", 0), "Source_UUID": a.get("source_uuid", ""),
        "Source_Info_File": "mysql.slave_master_info", "SQL_Delay": o("SOURCE_DELAY", 0),
        "SQL_Remaining_Delay": None,
        "Replica_SQL_Running_State": a.get("sql_state", "Waiting for events: rpl-sql replica, or rpl-sql apply, "
                                           "applies them" if ch.sql_running else ""),
        "Source_Retry_Count": o("SOURCE_RETRY_COUNT", 86400), "Source_Bind": o("SOURCE_BIND", ""),
        "Last_IO_Error_Timestamp": io_err[2], "Last_SQL_Error_Timestamp": sql_err[2],
        "Source_SSL_Crl": o("SOURCE_SSL_CRL", ""), "Source_SSL_Crlpath": o("SOURCE_SSL_CRLPATH", ""),
        "Retrieved_Gtid_Set": a.get("retrieved_gtid_set", ""), "Executed_Gtid_Set": a.get("executed_gtid_set", ""),
        "Auto_Position": o("SOURCE_AUTO_POSITION", 0), "Channel_Name": ch.name,
        "Source_TLS_Version": o("SOURCE_TLS_VERSION", ""), "Source_public_key_path": o("SOURCE_PUBLIC_KEY_PATH", ""),
        "Get_Source_public_key": o("GET_SOURCE_PUBLIC_KEY", 0), "Network_Namespace": o("NETWORK_NAMESPACE", ""),
    }
    for col, ftype in _FILTER_COLUMNS.items():
        values[col] = format_rule(ftype, ch.filters.values(ftype))
    return tuple(values[c] for c in REPLICA_STATUS_COLUMNS)


# rpl_sql's own view: every channel, configured or not (MySQL shows only configured ones)
CHANNELS_SCHEMA = ("CHANNEL_NAME STRING NOT NULL, CONFIGURED BOOLEAN NOT NULL, SOURCE_HOST STRING, "
                   "SOURCE_PORT BIGINT, SOURCE_USER STRING, IO_RUNNING BOOLEAN NOT NULL, "
                   "SQL_RUNNING BOOLEAN NOT NULL, GROUP_REPLICATION BOOLEAN NOT NULL, SOURCE_SIDE_FILTERS STRING")


def source_side_text(ch: Channel) -> str | None:
    """A channel's source-side filters (CHANGE REPLICATION SOURCE TO REPLICATE_*) as FILTER_RULE shows rules,
    one type after another: 'REPLICATE_DO_DB: a,b; REPLICATE_WILD_IGNORE_TABLE: x.%'."""
    f = ch.source_side_filters
    if f is None:
        return None
    return "; ".join(f"{t.filter_name}: {format_rule(t, f.values(t))}" for t in FilterType if f.values(t))


def channel_rows(state: ServerState) -> list[tuple]:
    """rpl_sql_channels: every channel, configured or not (MySQL shows only configured ones)."""
    return [(c.name, c.configured, c.option("SOURCE_HOST"), c.option("SOURCE_PORT"), c.option("SOURCE_USER"),
             c.io_running, c.sql_running, c.is_gr, source_side_text(c)) for c in state.channels]
