"""A commit file's commitInfo read without copying out the long text values its reader names: an events table's
commitInfo lines are mostly the ingest's summaries (62 MB over the log of bench/bench_apply.py's 10M events), of
which an applier run decodes a few (a rollup stands for the commits it merged). The line is read into one
reused buffer and each such value left in the file, as a `Cut` that reads it when asked; reading every line as
text and slicing the values out cost three times as much, most of it the fresh memory each took."""
from __future__ import annotations

import json
import threading
from typing import Any, Callable

_HEAD = b'{"commitInfo":'
_MARK = b"\\ud800"  # the JSON decoder's stand-in for a value cut out: no text read from a file holds it
_buffers = threading.local()


class Cut:
    """A text value of a commit line, read from the commit file when first asked for (`str(cut)`): at the
    first of `paths` that still holds the file (an archived commit moved from the log holds the same bytes)."""

    __slots__ = ("_paths", "_start", "_end")

    def __init__(self, paths: tuple[str, ...], start: int, end: int):
        self._paths, self._start, self._end = paths, start, end

    def __str__(self) -> str:
        for path in self._paths:
            try:
                with open(path, "rb") as f:
                    f.seek(self._start)
                    data = f.read(self._end - self._start)
            except FileNotFoundError:
                continue
            return data.decode("utf-8")
        raise FileNotFoundError(f"commit file gone before its value was read: {self._paths[0]}")

    def __len__(self) -> int:
        return self._end - self._start

    def __eq__(self, other: object) -> bool:
        return str(self) == (str(other) if isinstance(other, Cut) else other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"Cut({len(self)} bytes)"


def first_line_info(path: str, sliced: tuple[str, ...], moved: str | None = None) -> dict | None:
    """The commitInfo of the commit file at `path` when its first line is one (as writers write it), the
    top-level text values of the keys in `sliced` as `Cut`s (`moved`: where the file is once archived); None
    when the first line is something else. FileNotFoundError when there is no such file."""
    with open(path, "rb", buffering=0) as f:
        buf = getattr(_buffers, "buf", None) or bytearray(1 << 16)
        n, nl = 0, -1
        while True:
            got = f.readinto(memoryview(buf)[n:])
            nl = buf.find(b"\n", n, n + got) if got else -1
            n += got
            if nl >= 0 or not got:
                break
            if n == len(buf):
                buf.extend(bytes(len(buf)))  # doubled: the next line probably needs it too
        _buffers.buf = buf
    end = n if nl < 0 else nl
    if end < len(_HEAD) or not buf.startswith(_HEAD):  # (the buffer's bytes past `n` are an older line's)
        return None
    return sliced_info(buf, end, sliced, lambda a, b: Cut((path,) if moved is None else (path, moved), a, b))


def sliced_info(line: bytes | bytearray, end: int, sliced: tuple[str, ...], cut: Callable[[int, int], Any]) -> dict:
    """json.loads(line[:end])["commitInfo"], with the top-level values of the keys in `sliced` given as
    `cut(start, end)` (their bytes' offsets in the line) instead of scanned by the JSON decoder. Each is replaced
    by `_MARK` for the decoder: a value found elsewhere than at the top (nested), written otherwise than as
    plain text right after its key (escapes, spaces), or a line that holds the stand-in itself, is decoded as
    usual."""
    spans = []
    for key in sliced:
        mark = b'"' + key.encode() + b'":"'
        i = line.find(mark, 0, end)
        start = i + len(mark)
        stop = line.find(b'"', start, end) if i >= 0 else -1
        if stop >= 0 and line.find(b"\\", start, stop) < 0:
            spans.append((start, stop, key))
    if not spans:
        return json.loads(bytes(line[:end]))["commitInfo"]
    spans.sort()
    pieces, at = [], 0
    for start, stop, _ in spans:
        pieces += [line[at:start], _MARK]
        at = stop
    rest = b"".join(pieces + [line[at:end]])
    if rest.count(_MARK) != len(spans):  # the line holds the stand-in itself
        return json.loads(bytes(line[:end]))["commitInfo"]
    info = json.loads(rest)["commitInfo"]
    if any(info.get(k) != "\ud800" for _, _, k in spans):  # not at the top
        return json.loads(bytes(line[:end]))["commitInfo"]
    info.update({k: cut(start, stop) for start, stop, k in spans})
    return info
