"""The binlog stream's guard against the library reconnecting by itself (which re-lands transactions: see
tests/pipeline/replica/test_replica_status.py for the connection a source ends)."""
from __future__ import annotations

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader

from rpl_sql.pipeline.binlog_stream import BinlogStream
from rpl_sql.pipeline.row_images import ImageDecoder

SETTINGS = {"host": "127.0.0.1", "port": 9, "user": "root", "password": ""}


def test_a_second_connect_is_a_lost_connection_not_a_reconnect(monkeypatch):
    opened = []
    monkeypatch.setattr(BinLogStreamReader, "_BinLogStreamReader__connect_to_stream", lambda self: opened.append(1))
    stream = BinlogStream(connection_settings=SETTINGS, server_id=4712, decoder=ImageDecoder())
    stream._BinLogStreamReader__connect_to_stream()
    with pytest.raises(pymysql.OperationalError) as e:
        stream._BinLogStreamReader__connect_to_stream()
    assert e.value.args[0] == 2013 and opened == [1]


def test_a_library_that_connects_otherwise_is_refused_not_trusted(monkeypatch):
    monkeypatch.delattr(BinLogStreamReader, "_BinLogStreamReader__connect_to_stream")
    with pytest.raises(RuntimeError, match="reconnecting by itself"):
        BinlogStream(connection_settings=SETTINGS, server_id=4712, decoder=ImageDecoder())
