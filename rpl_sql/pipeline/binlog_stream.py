"""The source's binlog stream: python-mysql-replication's reader, with rows events framed here.

The library builds a wrapper and an event object for every packet, through several layers of buffered reads;
for a row workload that costs more than reading the packets themselves and decoding their row images. Here the
rows events whose images `ImageDecoder` reads, and the table maps of table ids already known (which the
library skips under `freeze_schema`), are framed from the packet's bytes: a rows event becomes one `FramedRows`.
Every other packet (GTID, query, XID, rotate, a new table map, a rows event of a type not compiled, any packet
this cannot frame exactly) is handed back to the library's own `fetchone`, which reads it as before, so
connecting, reconnecting and every other event stay the library's.
"""
from __future__ import annotations

import logging
import socket
import struct

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import BINLOG

from rpl_sql.pipeline.row_images import ROWS_EVENTS, ImageDecoder

_HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_size, log_pos, flags (after the OK byte)
_U16 = struct.Struct("<H")
_SKIPPED = object()
# the library's private reader state this reads (checked at construction: without it, the library frames all)
_LIBRARY_STATE = ("connected_stream", "connected_ctl", "use_checksum", "post_header_lengths")
# the library's warning on a lost connection says it connects again, which this reader does not
logging.getLogger("pymysqlreplication.binlogstream").addFilter(
    lambda record: "Re-request the connection" not in record.getMessage())


class FramedRows:
    """A rows event framed here: the attributes of the library's rows event that the ingest reads, and its
    images already decoded."""

    __slots__ = ("etype", "timestamp", "log_pos", "table_id", "schema", "table", "columns", "flags", "images")

    def __init__(self, etype, timestamp, log_pos, table_id, table, flags, images):
        self.etype, self.timestamp, self.log_pos = etype, timestamp, log_pos
        self.table_id, self.schema, self.table, self.columns = table_id, table.schema, table.table, table.columns
        self.flags, self.images = flags, images


class BinlogStream(BinLogStreamReader):
    """`BinLogStreamReader` that yields `FramedRows` for the rows events `decoder` reads, library events for the
    rest, in binlog order. Built with `freeze_schema=True` and no table or schema filters (as the ingest is);
    otherwise every packet goes to the library."""

    def __init__(self, *args, decoder: ImageDecoder, **kwargs):
        if not callable(getattr(BinLogStreamReader, "_BinLogStreamReader__connect_to_stream", None)):
            raise RuntimeError("this mysql-replication connects its binlog stream otherwise: rpl_sql cannot keep it "
                               "from reconnecting by itself (which lands transactions twice); install 1.0.x")
        super().__init__(*args, **kwargs)
        self.decoder = decoder
        self._stream_opened = False
        self._wrapped = None      # the stream connection whose `_read_packet` hands back `_pending` first
        self._read_raw = None
        self._pending = None      # a packet (or a read's error) for the library's fetchone to read next
        self._frames = (kwargs.get("freeze_schema") and not any(
            kwargs.get(k) for k in ("only_tables", "ignored_tables", "only_schemas", "ignored_schemas",
                                    "skip_to_timestamp", "end_log_pos"))
            and all(hasattr(self, "_BinLogStreamReader__" + a) for a in _LIBRARY_STATE))

    def _BinLogStreamReader__connect_to_stream(self):
        """Connect once. The library reconnects by itself when a read fails with 2013/2006, from where it last
        stood: with auto-position from the GTID set it started with (the source sends every transaction since
        again) and inside a transaction in the middle of it. The ingest reconnects instead, from what landed."""
        if self._stream_opened:
            raise pymysql.OperationalError(2013, "Lost connection to the source during the binlog dump; the "
                                                 "receiver reconnects from the last transaction it landed")
        self._stream_opened = True
        super()._BinLogStreamReader__connect_to_stream()

    def interrupt(self) -> None:
        """End a read that waits on the source, from another thread: it fails with 2013 at once."""
        sock = getattr(getattr(self, "_stream_connection", None), "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed meanwhile
                pass

    def fetchone(self):
        while self._frames and self._connected():
            try:
                packet = self._read_raw()
            except pymysql.OperationalError as e:  # the library decides: reconnect, or raise
                self._pending = e
                break
            event = self._frame(packet)
            if event is _SKIPPED:
                continue
            if event is not None:
                return event
            self._pending = packet
            break
        return super().fetchone()

    def _connected(self) -> bool:
        if not (self._BinLogStreamReader__connected_stream and self._BinLogStreamReader__connected_ctl):
            return False
        conn = self._stream_connection
        if conn is not self._wrapped:  # a new connection (the first, or after a reconnect)
            self._wrapped, self._read_raw, self._pending = conn, conn._read_packet, None
            conn._read_packet = self._read_pending
        return True

    def _read_pending(self, *args, **kwargs):
        pending, self._pending = self._pending, None
        if pending is None:
            return self._read_raw(*args, **kwargs)
        if isinstance(pending, BaseException):
            raise pending
        return pending

    def _frame(self, packet):
        """A `FramedRows`, `_SKIPPED` for a known table id's table map, or None: the library reads it."""
        data = packet._data
        if len(data) < 27 or data[0] != 0:
            return None
        timestamp, event_type, _, size, log_pos, _ = _HEADER.unpack_from(data, 1)
        rows = ROWS_EVENTS.get(event_type)
        if rows is None and event_type != BINLOG.TABLE_MAP_EVENT:
            return None
        table_id = int.from_bytes(data[20:26], "little")
        table = self.table_map.get(table_id)
        if table is None:
            return None
        if rows is None:  # a table map of a known table id: the library skips it too (freeze_schema)
            self.log_pos = log_pos or self.log_pos
            return _SKIPPED
        etype, post_header, v2 = rows
        lengths = self._BinLogStreamReader__post_header_lengths
        if lengths and len(lengths) >= event_type and lengths[event_type - 1] != post_header:
            return None
        flags = _U16.unpack_from(data, 26)[0]
        pos = 28
        if v2:
            if _U16.unpack_from(data, 28)[0] != 2:  # extra row info (partitions, NDB): the library's
                return None
            pos = 30
        ncols = data[pos]
        if ncols >= 251:
            return None
        pos += 1
        if ncols != len(table.columns):
            return None
        nbytes = (ncols + 7) // 8
        present = data[pos:pos + nbytes]
        pos += nbytes
        present2 = None
        if etype == "update_rows":
            present2 = data[pos:pos + nbytes]
            pos += nbytes
        end = 1 + size - (4 if self._BinLogStreamReader__use_checksum else 0)
        if end > len(data) or pos > end:
            return None
        images = self.decoder.decode(table_id, table, present, present2, data, pos, end, etype)
        if images is None:
            return None
        self.log_pos = log_pos or self.log_pos
        return FramedRows(etype, timestamp, log_pos, table_id, table, flags, images)
