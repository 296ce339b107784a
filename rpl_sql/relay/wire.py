"""The MySQL client/server protocol as a server speaks it to replicas: packets, the handshake and
mysql_native_password, OK/ERR/EOF, text result sets. Only what a replica's connection uses."""
from __future__ import annotations

import hashlib
import os
import socket
import struct

from rpl_sql.errors import RplSqlError

MAX_PAYLOAD = 0xFFFFFF

CLIENT_LONG_PASSWORD, CLIENT_LONG_FLAG, CLIENT_CONNECT_WITH_DB = 0x1, 0x4, 0x8
CLIENT_PROTOCOL_41, CLIENT_TRANSACTIONS, CLIENT_SECURE_CONNECTION = 0x200, 0x2000, 0x8000
CLIENT_MULTI_RESULTS, CLIENT_PLUGIN_AUTH = 0x20000, 0x80000
SERVER_CAPABILITIES = (CLIENT_LONG_PASSWORD | CLIENT_LONG_FLAG | CLIENT_CONNECT_WITH_DB | CLIENT_PROTOCOL_41
                       | CLIENT_TRANSACTIONS | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH)
UTF8MB4 = 45
SERVER_STATUS_AUTOCOMMIT = 0x2


class ProtocolError(RplSqlError, ConnectionError):
    """The peer sent something that is not the protocol (or went away): the connection is closed."""


class Packets:
    """Framed packets over one socket, with the sequence id MySQL expects."""

    def __init__(self, sock: socket.socket):
        self.sock, self.seq = sock, 0
        self.out = bytearray()

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ProtocolError("the peer closed the connection")
            out += chunk
        return bytes(out)

    def read(self) -> bytes:
        payload = bytearray()
        while True:
            head = self._exact(4)
            size = head[0] | head[1] << 8 | head[2] << 16
            if head[3] != self.seq & 0xFF:
                raise ProtocolError(f"packet out of order (sequence {head[3]}, expected {self.seq & 0xFF})")
            self.seq += 1
            payload += self._exact(size)
            if size < MAX_PAYLOAD:
                return bytes(payload)

    def write(self, payload: bytes) -> None:
        self.buffer(payload)
        self.flush()

    def buffer(self, payload: bytes) -> None:
        """Frame `payload` to go with the next flush (a dump sends many events per system call)."""
        out = self.out
        view = memoryview(payload)
        while True:
            chunk = view[:MAX_PAYLOAD]
            view = view[MAX_PAYLOAD:]
            out += struct.pack("<I", len(chunk))[:3] + bytes([self.seq & 0xFF])
            out += chunk
            self.seq += 1
            if len(chunk) < MAX_PAYLOAD:
                break

    def buffer_events(self, events: list[bytes]) -> int:
        """Frame each event as a packet of its own after an OK byte, as a dump sends them; the bytes framed."""
        out, seq, pack, total = self.out, self.seq, struct.pack, 0
        for ev in events:
            n = len(ev) + 1
            if n >= MAX_PAYLOAD:
                self.seq = seq
                self.buffer(b"\x00" + ev)
                seq = self.seq
            else:
                out += pack("<IB", n | (seq & 0xFF) << 24, 0)
                out += ev
                seq += 1
            total += n + 4
        self.seq = seq
        return total

    def flush(self) -> None:
        if self.out:
            self.sock.sendall(self.out)
            self.out = bytearray()


def lenenc_int(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


def lenenc_str(b: bytes) -> bytes:
    return lenenc_int(len(b)) + b


def handshake(version: str, thread_id: int, scramble: bytes) -> bytes:
    """Protocol 10's greeting, offering mysql_native_password with a 20-byte scramble."""
    caps = SERVER_CAPABILITIES
    return (b"\x0a" + version.encode() + b"\0" + struct.pack("<I", thread_id) + scramble[:8] + b"\0"
            + struct.pack("<HBHH", caps & 0xFFFF, UTF8MB4, SERVER_STATUS_AUTOCOMMIT, caps >> 16)
            + bytes([21]) + b"\0" * 10 + scramble[8:] + b"\0" + b"mysql_native_password\0")


def new_scramble() -> bytes:
    """20 bytes without NUL (clients read the scramble's halves as strings)."""
    return bytes(b % 255 + 1 for b in os.urandom(20))


def native_password_ok(password: str, scramble: bytes, token: bytes) -> bool:
    """mysql_native_password: token = SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password)))."""
    if not password:
        return token == b""
    h1 = hashlib.sha1(password.encode()).digest()
    h2 = hashlib.sha1(h1).digest()
    want = bytes(a ^ b for a, b in zip(h1, hashlib.sha1(scramble + h2).digest()))
    return token == want


def parse_login(data: bytes) -> tuple[str, bytes, int]:
    """(user, auth token, client capabilities) of a HandshakeResponse41."""
    caps = struct.unpack("<I", data[:4])[0]
    if not caps & CLIENT_PROTOCOL_41:
        raise ProtocolError("a client without protocol 4.1")
    i = 32
    end = data.index(b"\0", i)
    user = data[i:end].decode("utf-8", "replace")
    i = end + 1
    if caps & CLIENT_SECURE_CONNECTION:
        n = data[i]
        token = data[i + 1:i + 1 + n]
    else:
        end = data.index(b"\0", i)
        token = data[i:end]
    return user, token, caps


def ok() -> bytes:
    return b"\x00\x00\x00" + struct.pack("<HH", SERVER_STATUS_AUTOCOMMIT, 0)


def err(code: int, sqlstate: str, message: str) -> bytes:
    return b"\xff" + struct.pack("<H", code) + b"#" + sqlstate.encode()[:5] + message.encode("utf-8")


def eof() -> bytes:
    return b"\xfe" + struct.pack("<HH", 0, SERVER_STATUS_AUTOCOMMIT)


MYSQL_TYPE_VAR_STRING = 253


def result_set(packets: Packets, names: list[str], rows: list[tuple]) -> None:
    """A text-protocol result set of strings (NULL kept): what replicas read their setup answers from."""
    packets.write(lenenc_int(len(names)))
    for name in names:
        n = name.encode("utf-8")
        packets.write(lenenc_str(b"def") + lenenc_str(b"") + lenenc_str(b"") + lenenc_str(b"") + lenenc_str(n)
                      + lenenc_str(n) + b"\x0c" + struct.pack("<HIBHB", UTF8MB4, 1024, MYSQL_TYPE_VAR_STRING, 0, 0)
                      + b"\0\0")
    packets.write(eof())
    for row in rows:
        packets.write(b"".join(b"\xfb" if v is None else lenenc_str(_text(v)) for v in row))
    packets.write(eof())


def _text(v) -> bytes:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    return str(v).encode("utf-8")
