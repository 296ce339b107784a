"""The relay's one reader of the source's binlog: a replica connection (COM_BINLOG_DUMP by file and position)
whose events go into the spool as the source wrote them, from where the spool ends (a restarted relay goes on
where it stopped), reconnecting when the source goes away."""
from __future__ import annotations

import logging
import struct
import threading

from rpl_sql.relay import binlog_events as E
from rpl_sql.relay.spool import Spool
from rpl_sql.source_server.connection import NET_TIMEOUT, connect

log = logging.getLogger(__name__)

COM_BINLOG_DUMP, COM_REGISTER_SLAVE = 0x12, 0x15
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x2
RETRY_SECONDS = 1.0


class Upstream:
    """Copies the source's binlog into `spool` on a thread of its own until `stop` is set."""

    def __init__(self, settings: dict, spool: Spool, server_id: int):
        self.settings, self.spool, self.server_id = settings, spool, server_id
        self.stop = threading.Event()
        self.bytes_read = 0
        self.source_server_id = 0
        self.error = ""
        self.thread = threading.Thread(target=self._run, name="rpl_sql-relay-upstream", daemon=True)

    def start(self) -> "Upstream":
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.spool.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self._dump()
            except Exception as e:  # the source went away, say: as a replica's IO thread, try again
                self.error = f"{type(e).__name__}: {e}"
                log.warning("relay: reading the source failed (%s); again in %.0fs", self.error, RETRY_SECONDS)
                self.stop.wait(RETRY_SECONDS)

    def _dump(self) -> None:
        conn = connect(self.settings, autocommit=True, read_timeout=NET_TIMEOUT)  # heartbeats come every second
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@server_id, @@global.binlog_checksum")
                sid, checksum = cur.fetchone()
                self.source_server_id = int(sid)
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
                cur.execute("SET @mariadb_slave_capability = 4")
                cur.execute("SET @master_heartbeat_period = 1000000000")  # 1 s, in nanoseconds
                start = self.spool.end()
                if start is None:
                    cur.execute("SHOW BINARY LOGS")
                    start = (cur.fetchone()[0], 4)
            file, pos = start
            conn._next_seq_id = 0
            # every event of the file, MariaDB's Annotate_rows too (sent only on request): the spool is its copy
            cmd = struct.pack("<BIHI", COM_BINLOG_DUMP, max(pos, 4), BINLOG_SEND_ANNOTATE_ROWS_EVENT,
                              self.server_id) + file.encode()
            conn._write_bytes(struct.pack("<I", len(cmd))[:3] + b"\x00" + cmd)
            conn._next_seq_id = 1
            self.error = ""
            crc = str(checksum).upper() == "CRC32"  # the dump's own events too, as @master_binlog_checksum asks
            while not self.stop.is_set():
                packet = conn._read_packet()
                data = packet.get_all_data()
                if data[:1] == b"\xfe" and len(data) < 9:
                    raise ConnectionError("the source ended the dump")
                ev = data[1:]
                self.bytes_read += len(data)
                h = E.Header.of(ev)
                if h.type == E.ROTATE:
                    target, _ = E.rotate_target(ev, crc)
                    if h.log_pos != 0 and not h.flags & E.LOG_EVENT_ARTIFICIAL_F:
                        self.spool.append(file, h.log_pos, ev)  # the real one ends the old file
                    file = target
                    continue
                if h.type == E.FORMAT_DESCRIPTION:
                    crc = E.fde_checksum(ev)
                if h.type == E.HEARTBEAT or h.log_pos == 0:
                    continue  # made up by the dump, not in the file
                self.spool.append(file, h.log_pos, ev)
        finally:
            conn.close()

