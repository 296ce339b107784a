"""A TCP forwarder to a local server that can go silent: the network of a test that needs one which drops
packets without a reset (a firewall, a dead route), as a real source's replicas meet it."""
from __future__ import annotations

import socket
import threading


class SilentableProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target`. `silence()` stops every byte both ways without closing a
    connection; `restore()` drops the silenced connections (their peers gave up on them) and forwards again."""

    def __init__(self, target: int):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.quiet = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> "SilentableProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()
        self._drop()

    def silence(self) -> None:
        self.quiet.set()

    def restore(self) -> None:
        self._drop()
        self.quiet.clear()

    def _drop(self) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.close()
                except OSError:
                    pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if self.quiet.is_set():  # silenced: what comes is never delivered, an end (FIN) neither
                    if not data:
                        return
                    continue
                if not data:
                    b.shutdown(socket.SHUT_WR)
                    return
                b.sendall(data)
        except OSError:
            return
