"""Progress of long commands as users expect it: one redrawn line with a bar, rate and ETA on a terminal,
plain lines (one per report) when stderr is a file or a pipe."""
from __future__ import annotations

import sys
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def bar(done: int, total: int | None, rate: float, unit: str, width: int = 24) -> str:
    """`[#########-------]  37%  1,234/3,333 events  456 events/s  ETA 0:00:04`; without a total, counts only.

    >>> bar(50, 200, 25.0, "events", width=8)
    '[##------]  25%  50/200 events  25 events/s  ETA 0:00:06'
    """
    if not total:
        return f"{done:,} {unit}  {rate:,.0f} {unit}/s"
    frac = min(1.0, done / total)
    filled = int(frac * width)
    eta = _duration((total - done) / rate) if rate > 0 and done < total else "0:00:00"
    return (f"[{'#' * filled}{'-' * (width - filled)}] {frac:4.0%}  {done:,}/{total:,} {unit}  "
            f"{rate:,.0f} {unit}/s  ETA {eta}")


class Progress:
    """Reports to `stream`: redrawn in place on a terminal, appended lines otherwise."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._width = 0

    def show(self, label: str, line: str) -> None:
        text = f"{label} {line}" if label else line
        if self.tty:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = max(self._width, len(text))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the redrawn line, so what follows starts on its own."""
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0
