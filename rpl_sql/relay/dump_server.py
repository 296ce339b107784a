"""The relay's face to replicas: a MySQL server that authenticates them (mysql_native_password), answers their
setup queries as the source does (each client's queries go to a connection of its own to the source, so
`SELECT @@server_id` or `SELECT @master_binlog_checksum` after its SET get the source's answers), takes
COM_REGISTER_SLAVE and serves COM_BINLOG_DUMP from the spool, with heartbeats while nothing happens."""
from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rpl_sql.relay import binlog_events as E
from rpl_sql.relay.filtering import ReplicaFilter, forwarded_filter, parse_gtid_state
from rpl_sql.relay import wire
from rpl_sql.relay.spool import MAGIC, Spool, read_event
from rpl_sql.source_server.connection import FILTERS_VARIABLE, connect

log = logging.getLogger(__name__)

COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E
BINLOG_THROUGH_GTID = 0x04  # COM_BINLOG_DUMP_GTID carries the replica's executed GTID set


@dataclass
class ReplicaStatus:
    """One connected replica as the relay's status shows it."""

    peer: str
    user: str = ""
    server_id: int = 0
    file: str = ""
    pos: int = 0
    bytes_sent: int = 0
    events_read: int = 0
    events_sent: int = 0
    forwarded: bool = False  # the replica sent its own filters (an rpl-sql channel)
    connected_at: float = field(default_factory=time.time)


class RelayServer:
    """Listens on `host:port` and serves each client on a thread of its own."""

    def __init__(self, spool: Spool, source_settings: dict, user: str, password: str, host: str = "127.0.0.1",
                 port: int = 0, heartbeat: float = 1.0, source_server_id=lambda: 0,
                 filters_for: Callable[[int], Callable[[], Any]] = lambda server_id: (lambda: None)):
        """`filters_for(server_id)`: what that replica's `ReplicaFilter` asks for its filters (a SourceFilter,
        or None to send everything)."""
        self.spool, self.source_settings, self.source_server_id = spool, source_settings, source_server_id
        self.filters_for = filters_for
        self.user, self.password, self.heartbeat = user, password, heartbeat
        self.sock = socket.create_server((host, port))
        self.host, self.port = host, self.sock.getsockname()[1]
        self.status_fn: Callable[[], dict] = lambda: {"replicas": []}
        self.stop = threading.Event()
        self.replicas: dict[int, ReplicaStatus] = {}
        self._ids = iter(range(1, 1 << 31))
        self.version = "5.5.5-10.11.0-MariaDB-rpl_sql-relay"

    def serve_forever(self) -> None:
        self.sock.settimeout(0.5)
        while not self.stop.is_set():
            try:
                client, addr = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            threading.Thread(target=self._client, args=(client, f"{addr[0]}:{addr[1]}"), daemon=True).start()

    def close(self) -> None:
        """Stops listening now, so the port is free when this returns: a bare close() leaves the socket listening
        while serve_forever's thread waits in accept's poll, which holds it."""
        self.stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the waiting accept and closes the listener at once
        except OSError:  # already shut, or never listening
            pass
        self.sock.close()

    def _client(self, sock: socket.socket, peer: str) -> None:
        tid = next(self._ids)
        status = ReplicaStatus(peer)
        upstream = None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            packets = wire.Packets(sock)
            scramble = wire.new_scramble()
            packets.write(wire.handshake(self.version, tid, scramble))
            user, token, _ = wire.parse_login(packets.read())
            if user != self.user or not wire.native_password_ok(self.password, scramble, token):
                packets.write(wire.err(1045, "28000", f"Access denied for user '{user}'@'{peer.split(':')[0]}' "
                                                     "(using password: YES)"))
                return
            status.user = user
            packets.write(wire.ok())
            while not self.stop.is_set():
                packets.seq = 0
                data = packets.read()
                cmd, arg = data[0], data[1:]
                if cmd == COM_QUIT:
                    return
                if cmd == COM_PING or cmd == COM_INIT_DB:
                    packets.write(wire.ok())
                elif cmd == COM_QUERY:
                    sql = arg.decode("utf-8", "replace")
                    if " ".join(sql.split()).upper().rstrip(";") == "SHOW RELAY STATUS":
                        self._show_status(packets)
                        continue
                    try:
                        upstream = upstream or connect(self.source_settings, autocommit=True)
                    except Exception as e:  # the source is down: say so, as a source that is not there would
                        packets.write(wire.err(2003, "HY000", f"the relay cannot reach its source ({e})"))
                        continue
                    self._query(packets, upstream, sql)
                elif cmd == COM_REGISTER_SLAVE:
                    status.server_id = struct.unpack_from("<I", arg, 0)[0]
                    packets.write(wire.ok())
                elif cmd == COM_BINLOG_DUMP:
                    pos, flags, server_id = struct.unpack_from("<IHI", arg, 0)
                    status.server_id = status.server_id or server_id
                    self.replicas[tid] = status
                    checksum = self._session_checksum(upstream)
                    connect_state = self._session_var(upstream, "slave_connect_state")
                    file = arg[10:].decode()
                    applied = None
                    if connect_state is not None:  # MASTER_USE_GTID: from the GTID position, not the file
                        applied = parse_gtid_state(connect_state)
                        file, pos = self.spool.mariadb_gtid_start(applied), 4
                    self._dump(packets, status, file, pos, checksum, annotate=bool(flags & 0x2), applied=applied,
                               filters=self._forwarded(upstream, status))
                    return
                elif cmd == COM_BINLOG_DUMP_GTID:  # a MySQL replica with SOURCE_AUTO_POSITION = 1
                    flags, server_id, n = struct.unpack_from("<HII", arg, 0)
                    file = arg[10:10 + n].decode()
                    pos = struct.unpack_from("<Q", arg, 10 + n)[0]
                    applied = E.MySQLGtids.parse(arg, 10 + n + 12) if flags & BINLOG_THROUGH_GTID else None
                    status.server_id = status.server_id or server_id
                    self.replicas[tid] = status
                    if applied is not None and not file:
                        file, pos = self.spool.mysql_gtid_start(applied), 4
                        if file is None:
                            packets.write(wire.err(1236, "HY000", "Cannot replicate because the relay's spool "
                                                   "no longer holds GTIDs the replica lacks (it was started after "
                                                   "the source purged them, or its spool was removed)"))
                            return
                    self._dump(packets, status, file, pos, self._session_checksum(upstream), applied=applied,
                               filters=self._forwarded(upstream, status))
                    return
                else:
                    packets.write(wire.err(1047, "08S01", "Unknown command"))
        except (wire.ProtocolError, OSError, ValueError, struct.error) as e:
            log.info("relay: client %s: %s", peer, e)
        finally:
            self.replicas.pop(tid, None)
            if upstream is not None:
                upstream.close()
            sock.close()

    RELAY_STATUS_COLUMNS = ("Server_Id", "User", "Host", "Source_Log_File", "Read_Source_Log_Pos", "Filters_Channel",
                            "Events_Read", "Events_Sent", "Bytes_Sent", "Source_Bytes_Read")

    def _show_status(self, packets: wire.Packets) -> None:
        """SHOW RELAY STATUS: one row per connected replica, with the bytes the relay read from the source."""
        st = self.status_fn()
        rows = [(r["server_id"], r["user"], r["peer"], r["file"], r["pos"], r["filters_channel"], r["events_read"],
                 r["events_sent"], r["bytes_sent"], st.get("bytes_read")) for r in st["replicas"]]
        wire.result_set(packets, list(self.RELAY_STATUS_COLUMNS), rows)

    def _query(self, packets: wire.Packets, upstream, sql: str) -> None:
        import pymysql

        try:
            with upstream.cursor() as cur:
                cur.execute(sql)
                if cur.description is None:
                    packets.write(wire.ok())
                    return
                wire.result_set(packets, [d[0] for d in cur.description], list(cur.fetchall()))
        except pymysql.MySQLError as e:
            code, msg = (e.args + (None, ""))[:2] if e.args else (1105, str(e))
            packets.write(wire.err(int(code or 1105), "HY000", str(msg)))

    @classmethod
    def _session_checksum(cls, upstream) -> bool:
        """Whether the replica asked for checksummed events (SET @master_binlog_checksum, or MySQL 8.0.26+'s
        @source_binlog_checksum, on its connection)."""
        v = cls._session_var(upstream, "master_binlog_checksum") or cls._session_var(upstream, "source_binlog_checksum")
        return v is not None and v.upper() == "CRC32"

    @classmethod
    def _forwarded(cls, upstream, status: ReplicaStatus):
        """The filters an rpl-sql channel sent when it connected (WL#2387 Part 1), as the relay applies them."""
        forwarded = cls._session_var(upstream, FILTERS_VARIABLE)
        status.forwarded = forwarded is not None
        return forwarded_filter(forwarded) if forwarded is not None else None

    @staticmethod
    def _session_var(upstream, name: str) -> str | None:
        """A user variable the replica SET on its connection (kept on its connection to the source)."""
        if upstream is None:
            return None
        with upstream.cursor() as cur:
            cur.execute(f"SELECT @{name}")
            v = cur.fetchone()[0]
        return None if v is None else v.decode() if isinstance(v, bytes) else str(v)

    def _dump(self, packets: wire.Packets, status: ReplicaStatus, file: str, pos: int, crc: bool,
              annotate: bool = False, applied: dict[int, int] | E.MySQLGtids | None = None, filters=None) -> None:
        """Events from (file, pos) of the spool, then whatever is appended, as the source's dump thread sends
        them: an artificial rotate, the file's format description, the events; heartbeats while idle."""
        pos = max(pos, 4)
        sid = self.source_server_id()
        status.file, status.pos = file, pos
        filt = ReplicaFilter((lambda: filters) if filters is not None else self.filters_for(status.server_id), applied,
                             annotate)

        def send(ev: bytes) -> None:
            status.bytes_sent += packets.buffer_events([ev])

        send(E.rotate(sid, file, pos, crc))
        while not self.stop.is_set():
            path = self.spool.path(file)
            while not path.exists():
                packets.flush()
                self.spool.wait(self.heartbeat)
                if self.stop.is_set():
                    return
            with open(path, "rb", buffering=1 << 20) as f:
                if f.read(4) != MAGIC:
                    raise OSError(f"relay spool: {path} is not a binlog")
                if pos > 4:  # the file's format description first, marked as not to be counted
                    fde = read_event(f)
                    filt.feed(fde)
                    send(E.fixed_log_pos(fde, 0, E.fde_checksum(fde)))
                    f.seek(pos)
                last_beat = time.monotonic()
                buf, at = b"", 0  # unsent bytes read ahead from the file, and where in it the next event starts
                while not self.stop.is_set():
                    if len(buf) - at < E.HEADER or len(buf) - at < struct.unpack_from("<I", buf, at + 9)[0]:
                        chunk = f.read(1 << 20)  # events are cut from a large read, not read one by one
                        if chunk:
                            buf, at = buf[at:] + chunk, 0
                            continue
                        offset = f.tell() - (len(buf) - at)  # all sent that the spool holds: held ones go now
                        status.bytes_sent += packets.buffer_events(filt.flush())
                        packets.flush()
                        status.pos, status.events_read, status.events_sent = offset, filt.events_in, filt.events_out
                        nxt = self.spool.next_file(file)
                        if nxt is not None and offset == path.stat().st_size:
                            file, pos = nxt, 4
                            status.file, status.pos = file, pos
                            break
                        if time.monotonic() - last_beat >= self.heartbeat:
                            packets.write(b"\x00" + E.heartbeat(sid, file, offset, crc))
                            last_beat = time.monotonic()
                        self.spool.wait(min(self.heartbeat, 0.2))
                        continue
                    events, at = filt.feed_buffer(buf, at)
                    status.bytes_sent += packets.buffer_events(events)
                    if len(packets.out) >= 1 << 18:
                        packets.flush()
                        last_beat = time.monotonic()
