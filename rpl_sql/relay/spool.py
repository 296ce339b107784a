"""The relay's copy of the source's binlog: each file byte for byte as the source has it, so every position
is the source's and a replica of the relay can be pointed back at the source. Written by one upstream
reader (`upstream.py`); read by every replica's dump from any (file, position), following what is appended."""
from __future__ import annotations

import os
import threading
from pathlib import Path

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
