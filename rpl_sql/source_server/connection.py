"""How to reach a channel's source: pymysql settings from CHANGE REPLICATION SOURCE, the password from
rpl_sql.storage.credentials (never from the state), TLS as SOURCE_SSL asks."""
from __future__ import annotations

import functools

from rpl_sql.filters.rules import filters_text
from rpl_sql.filters.state import Channel
from rpl_sql.language.quoting import mysql_str
from rpl_sql.storage import credentials


def connection_settings(warehouse: str, ch: Channel) -> tuple[dict, dict]:
    """pymysql connection settings of a configured channel's source, and the origin facts recorded with every
    commit."""
    legacy = str(ch.option("SOURCE_PASSWORD") or "")  # held in the state by warehouses written before 0.2
    password = credentials.password(warehouse, ch.name) or legacy
    settings = {"host": str(ch.option("SOURCE_HOST")), "port": int(ch.option("SOURCE_PORT") or 3306),
                "user": str(ch.option("SOURCE_USER") or ""), "password": password,
                "connect_timeout": 30}
    if ch.option("SOURCE_BIND"):
        settings["bind_address"] = str(ch.option("SOURCE_BIND"))
    if str(ch.option("SOURCE_SSL") or "0") == "1":  # required TLS; otherwise pymysql's "preferred" mode
        tls = {"ssl_ca": ch.option("SOURCE_SSL_CA"), "ssl_cert": ch.option("SOURCE_SSL_CERT"),
               "ssl_key": ch.option("SOURCE_SSL_KEY")}
        settings.update({k: str(v) for k, v in tls.items() if v})
        settings["ssl_verify_cert"] = str(ch.option("SOURCE_SSL_VERIFY_SERVER_CERT") or "0") == "1"
        if not any(tls.values()) and not settings["ssl_verify_cert"]:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            settings["ssl"] = ctx  # encrypted, unverified: SOURCE_SSL=1 without a CA
    origin = {"source_host": settings["host"], "source_port": str(settings["port"]),
              "origin_file": str(ch.option("SOURCE_LOG_FILE") or ""),
              "origin_pos": str(ch.option("SOURCE_LOG_POS") or ""),
              "auto_position": "1" if str(ch.option("SOURCE_AUTO_POSITION") or "0") == "1" else "0"}
    if ch.reset_at:  # recorded with every commit: a commit of an older generation was read before a RESET
        origin["reset_at"] = str(ch.reset_at)
    return settings, origin


@functools.cache
def _connection_class():
    """pymysql's Connection, building the "preferred" mode's SSL context once per process (once per connection,
    loading the CA store, it cost ~20 ms each). Made on first use: pymysql is imported only then."""
    import pymysql

    class _Connection(pymysql.connections.Connection):
        preferred_tls = None

        def _create_ssl_ctx(self, sslp):
            if sslp:
                return super()._create_ssl_ctx(sslp)
            if _Connection.preferred_tls is None:
                _Connection.preferred_tls = super()._create_ssl_ctx(sslp)
            return _Connection.preferred_tls

    return _Connection


def connect(settings: dict, **kw):
    """A pymysql connection to a source with `settings` (`connection_settings`' first half). Without TLS options
    pymysql tries TLS and falls back to plain ("preferred", MySQL's default too); the mode is unchanged, only its
    SSL context is shared (a copy's seven connections spent 150 ms building theirs)."""
    return _connection_class()(**settings, **kw)


# Seconds without a byte from the source (its heartbeats come every second) after which a binlog connection is
# taken for dead and made again, as MySQL's replica_net_timeout (default 60): a network that drops packets
# without a reset would otherwise leave the reader waiting, and the status saying "Yes", forever.
NET_TIMEOUT = 60.0

FILTERS_VARIABLE = "rpl_sql_filters"  # a relay reads a channel's filters from this user variable (WL#2387 Part 1)


def forwarded_filters(state, channel: str) -> str:
    """The channel's filters as it sends them when it connects, so that a relay in front of the source sends
    only what they apply (a real source just keeps the variable): its own, and its source-side ones (CHANGE
    REPLICATION SOURCE TO REPLICATE_*)."""
    ch = state.channel(channel)
    return filters_text(ch.filters, state.lower_case_table_names, ch.source_side_filters)


def forwarding_command(text: str) -> str:
    return f"SET @{FILTERS_VARIABLE} = {mysql_str(text)}"
