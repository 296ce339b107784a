"""The relay's reader of the source's binlog when the network between them goes silent: no reset, no byte,
not even the heartbeat it asks for every second."""
from __future__ import annotations

from rpl_sql.relay import upstream
from rpl_sql.relay.spool import Spool
from rpl_sql.relay.upstream import Upstream
from tests.pipeline.replica.test_replica_service import wait_for
from tests.support.mariadb import running
from tests.support.tcp_proxy import SilentableProxy


def test_a_silent_source_is_taken_for_gone_and_the_copy_goes_on_where_it_ended(tmp_path_factory, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setattr(upstream, "NET_TIMEOUT", 3.0)  # 60 s in the relay, as MySQL's replica_net_timeout
    with running(tmp_path_factory, 951) as (src,), SilentableProxy(src.port) as net:
        src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE d", "CREATE TABLE d.t (k INT)",
                    "INSERT INTO d.t VALUES (1)")
        up = Upstream({"host": "127.0.0.1", "port": net.port, "user": "root", "password": ""},
                      Spool(tmp_path / "spool"), server_id=4000000001).start()
        try:
            wait_for(lambda: up.spool.end() == src.binlog_end(), "the spool to hold the binlog")
            net.silence()
            src.execute("SET SESSION binlog_format = ROW", "INSERT INTO d.t VALUES (2)")
            wait_for(lambda: "2013" in up.error, "the reader to give the connection up", 30)
            assert up.spool.end() != src.binlog_end()
            net.restore()
            wait_for(lambda: up.spool.end() == src.binlog_end(), "the spool to hold the rest", 30)
        finally:
            up.close()
