"""The relay's copy of the source's binlog: each file byte for byte as the source has it, so every position
is the source's and a replica of the relay can be pointed back at the source. Written by one upstream
reader (`upstream.py`); read by every replica's dump from any (file, position), following what is appended."""
from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

from rpl_sql.relay import binlog_events as E

MAGIC = b"\xfebin"
INDEX = "spool.index"  # the files in order, one name a line (as a MySQL binlog index)


class Spool:
    """One folder of binlog files and their index."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.changed = threading.Condition()
        self._out = None
        self._name: str | None = None

    def files(self) -> list[str]:
        try:
            return [n for n in (self.folder / INDEX).read_text().split("\n") if n]
        except FileNotFoundError:
            return []

    def end(self) -> tuple[str, int] | None:
        """Where the copy ends: the last file and its size (None: nothing copied yet)."""
        files = self.files()
        if not files:
            return None
        return files[-1], (self.folder / files[-1]).stat().st_size

    def append(self, file: str, log_pos: int, ev: bytes) -> None:
        """Write the event that ends at `log_pos` of `file` (a new file starts with the magic)."""
        if file != self._name:
            if self._out is not None:
                self._out.close()
            path = self.folder / file
            fresh = not path.exists()
            self._out = open(path, "ab")
            if fresh or path.stat().st_size == 0:
                self._out.write(MAGIC)
                self._out.flush()
            if file not in self.files():
                with open(self.folder / INDEX, "a") as f:
                    f.write(file + "\n")
            self._name = file
        at = self._out.tell()
        start = log_pos - len(ev)
        if start < at:  # already copied (a dump restarted before it): the source's bytes are the same
            return
        if start != at:
            raise OSError(f"relay spool: {file} would have a gap ({at} -> {start})")
        self._out.write(ev)
        self._out.flush()
        with self.changed:
            self.changed.notify_all()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def path(self, file: str) -> Path:
        return self.folder / file

    def next_file(self, file: str) -> str | None:
        files = self.files()
        return files[files.index(file) + 1] if file in files and files.index(file) + 1 < len(files) else None

    def wait(self, timeout: float) -> None:
        with self.changed:
            self.changed.wait(timeout)

    def first_of(self, name: str, etype: int) -> bytes | None:
        """The first event of `etype` among a file's first three (its Gtid_list or Previous_gtids)."""
        with open(self.path(name), "rb") as f:
            f.seek(4)
            for _ in range(3):
                ev = read_event(f)
                if ev is None:
                    return None
                if ev[4] == etype:
                    return ev
        return None

    def mariadb_gtid_start(self, applied: dict[int, int]) -> str:
        """Where a MariaDB replica connecting by GTID starts: the last file whose starting Gtid_list it has wholly
        applied (the first file if none)."""
        files = self.files()
        if not files:
            raise OSError("the relay has not read any of the source's binlog yet")
        start = files[0]
        for name in files:
            ev = self.first_of(name, E.GTID_LIST)
            begins = E.gtid_list(ev) if ev is not None else None
            if begins is not None and all(seq <= applied.get(d, 0) for d, seq in begins.items()):
                start = name
        return start

    def mysql_gtid_start(self, applied: E.MySQLGtids) -> str | None:
        """Where a MySQL replica connecting by GTID starts, as MySQL's dump thread: the last file whose
        Previous_gtids it has all of; None (1236) when even the first file begins past what it has."""
        chosen = None
        for name in self.files():
            before = self.first_of(name, E.PREVIOUS_GTIDS)
            if before is not None and applied.covers(E.MySQLGtids.parse(before, E.HEADER)):
                chosen = name
        return chosen


def read_event(f) -> bytes | None:
    """The next whole event of the file, or None (the writer has not appended it all yet)."""
    at = f.tell()
    head = f.read(E.HEADER)
    if len(head) < E.HEADER:
        f.seek(at)
        return None
    size = struct.unpack_from("<I", head, 9)[0]
    rest = f.read(size - E.HEADER)
    if len(rest) < size - E.HEADER:
        f.seek(at)
        return None
    return head + rest
