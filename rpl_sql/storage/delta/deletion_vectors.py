"""Delta deletion vectors: the rows of a data file that a table no longer holds, as the protocol stores them.

delta-rs 1.6 reads deletion vectors (its DataFusion scans, merge, delete and optimize apply them) but does not
write them, so a merge rewrites every file that holds one of its keys. rpl_sql writes them for its replica
tables' merges: a file of `deletion_vector_<uuid>.bin` beside the data holds each vector as the protocol's
RoaringBitmapArray (magic number, then 32-bit Roaring bitmaps in their portable serialisation), framed by its
big-endian size and CRC-32. Reading decodes what this module writes and any Delta writer's vectors (run
containers, inline and absolute-path vectors).
"""
from __future__ import annotations

import os
import struct
import uuid
import zlib
from typing import Any

import numpy as np

from rpl_sql.errors import RplSqlError

MAGIC = 1681511377
_NO_RUNS = 12346  # Roaring's portable cookies
_RUNS = 12347
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}


class DeletionVectorError(RplSqlError, ValueError):
    """A deletion vector that cannot be read exactly (damaged, or stored in a way this reader does not know)."""


def _roaring32(lows: np.ndarray) -> bytes:
    """Sorted unique uint32 values as a portable 32-bit Roaring bitmap (array and bitmap containers)."""
    hi = (lows >> 16).astype(np.uint16)
    lo = (lows & 0xFFFF).astype(np.uint16)
    keys, starts = np.unique(hi, return_index=True)
    ends = np.append(starts[1:], len(lows))
    bodies, cards = [], []
    for s, e in zip(starts, ends):
        part = lo[s:e]
        if len(part) <= 4096:
            bodies.append(part.astype("<u2").tobytes())
        else:
            bits = np.zeros(1 << 16, dtype=bool)
            bits[part] = True
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
        cards.append(len(part))
    n = len(bodies)
    head = [struct.pack("<ii", _NO_RUNS, n)]
    head += [struct.pack("<HH", int(k), c - 1) for k, c in zip(keys, cards)]
    at = 8 + 8 * n
    for b in bodies:
        head.append(struct.pack("<I", at))
        at += len(b)
    return b"".join(head + bodies)


def encode(rows: np.ndarray) -> bytes:
    """The deleted row indexes `rows` (any order, repeats allowed) as a serialised RoaringBitmapArray."""
    rows = sorted_unique(np.asarray(rows, dtype=np.uint64))
    highs = rows >> np.uint64(32)
    keys, starts = np.unique(highs, return_index=True)
    ends = np.append(starts, len(rows))[1:]
    out = [struct.pack("<iq", MAGIC, len(keys))]
    for k, s, e in zip(keys, starts, ends):
        out.append(struct.pack("<I", int(k)))
        out.append(_roaring32((rows[s:e] & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
    return b"".join(out)


def decode(data: bytes) -> np.ndarray:
    """The sorted row indexes (uint64) of a serialised RoaringBitmapArray."""
    if len(data) < 12 or struct.unpack_from("<i", data, 0)[0] != MAGIC:
        raise DeletionVectorError("not a Delta deletion vector (bad magic number)")
    (count,) = struct.unpack_from("<q", data, 4)
    at, parts = 12, []
    for _ in range(count):
        (key,) = struct.unpack_from("<I", data, at)
        lows, at = _decode32(data, at + 4)
        parts.append((np.uint64(key) << np.uint64(32)) | lows.astype(np.uint64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def _decode32(data: bytes, at: int) -> tuple[np.ndarray, int]:
    """One portable 32-bit Roaring bitmap at `at`: its values and the offset past it."""
    (cookie,) = struct.unpack_from("<I", data, at)
    if cookie & 0xFFFF == _RUNS:
        n = (cookie >> 16) + 1
        runs = np.unpackbits(np.frombuffer(data, np.uint8, (n + 7) // 8, at + 4), bitorder="little")[:n]
        at += 4 + (n + 7) // 8
        offsets = n >= 4  # Roaring's NO_OFFSET_THRESHOLD
    elif cookie == _NO_RUNS:
        (n,) = struct.unpack_from("<i", data, at + 4)
        runs = np.zeros(n, np.uint8)
        at += 8
        offsets = True
    else:
        raise DeletionVectorError(f"unknown Roaring cookie {cookie}")
    head = np.frombuffer(data, "<u2", 2 * n, at).reshape(n, 2) if n else np.zeros((0, 2), np.uint16)
    at += 4 * n + (4 * n if offsets else 0)
    out = []
    for (key, card1), run in zip(head.astype(np.uint32), runs):
        base = key << 16
        if run:
            (nr,) = struct.unpack_from("<H", data, at)
            pairs = np.frombuffer(data, "<u2", 2 * nr, at + 2).reshape(nr, 2).astype(np.uint32)
            at += 2 + 4 * nr
            out.append(base + np.concatenate([np.arange(s, s + ln + 1, dtype=np.uint32) for s, ln in pairs]))
        elif card1 + 1 <= 4096:
            out.append(base + np.frombuffer(data, "<u2", card1 + 1, at).astype(np.uint32))
            at += 2 * (card1 + 1)
        else:
            bits = np.unpackbits(np.frombuffer(data, np.uint8, 8192, at), bitorder="little")
            out.append(base + np.flatnonzero(bits).astype(np.uint32))
            at += 8192
    return (np.concatenate(out) if out else np.zeros(0, np.uint32)), at


def z85_encode(b: bytes) -> str:
    if len(b) % 4:
        raise ValueError("Z85 encodes whole 4-byte words")
    out = []
    for (v,) in struct.iter_unpack(">I", b):
        word = []
        for _ in range(5):
            v, r = divmod(v, 85)
            word.append(_Z85[r])
        out.extend(reversed(word))
    return "".join(out)


def z85_decode(s: str) -> bytes:
    if len(s) % 5:
        raise DeletionVectorError("a Z85 text is whole 5-character words")
    out = bytearray()
    for i in range(0, len(s), 5):
        v = 0
        for c in s[i:i + 5]:
            v = v * 85 + _Z85_VALUE[c]
        out += struct.pack(">I", v)
    return bytes(out)


def sorted_unique(rows: np.ndarray) -> np.ndarray:
    """`rows` sorted without repeats: as given where they already are (callers mostly pass them so)."""
    rows = np.asarray(rows)
    return np.unique(rows) if len(rows) > 1 and not bool(np.all(rows[1:] > rows[:-1])) else rows


def in_sorted(sorted_rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which of `values` are in `sorted_rows` (sorted), by binary search: a vector is not sorted again."""
    if not len(sorted_rows):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_rows, values), len(sorted_rows) - 1)
    return sorted_rows[at] == values


def write_file(root: str, vectors: list[np.ndarray]) -> tuple[str, list[dict[str, Any]]]:
    """One file of deletion vectors in the table at `root`: its path and the descriptor of each vector (an add
    action's `deletionVector`), in the order given."""
    ident = uuid.uuid4()
    chunks, descriptors, at = [b"\x01"], [], 1
    for rows in vectors:
        data = encode(rows)
        descriptors.append({"storageType": "u", "pathOrInlineDv": z85_encode(ident.bytes), "offset": at,
                            "sizeInBytes": len(data), "cardinality": len(sorted_unique(rows))})
        chunks += [struct.pack(">i", len(data)), data, struct.pack(">I", zlib.crc32(data))]
        at += 8 + len(data)
    path = os.path.join(root, f"deletion_vector_{ident}.bin")
    with open(path, "xb") as f:
        f.write(b"".join(chunks))
        f.flush()
        os.fsync(f.fileno())
    return path, descriptors


def file_of(root: str, descriptor: dict[str, Any]) -> str | None:
    """The file holding a descriptor's vector (None for one stored inline)."""
    kind, where = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "u":
        prefix, ident = where[:-20], uuid.UUID(bytes=z85_decode(where[-20:]))
        return os.path.join(root, prefix, f"deletion_vector_{ident}.bin")
    if kind == "p":
        return where[7:] if where.startswith("file://") else where
    if kind == "i":
        return None
    raise DeletionVectorError(f"unknown deletion vector storage type {kind!r}")


def read(root: str, descriptor: dict[str, Any]) -> np.ndarray:
    """The sorted deleted row indexes of a file, from its add action's `deletionVector`."""
    path = file_of(root, descriptor)
    size = descriptor["sizeInBytes"]
    if path is None:
        data = z85_decode(descriptor["pathOrInlineDv"])[:size]
    else:
        with open(path, "rb") as f:
            f.seek(descriptor.get("offset") or 1)
            head = f.read(4)
            data = f.read(size)
            tail = f.read(4)
        if len(head) < 4 or struct.unpack(">i", head)[0] != size or len(data) != size or len(tail) < 4 or \
                struct.unpack(">I", tail)[0] != zlib.crc32(data):
            raise DeletionVectorError(f"{path}: the deletion vector at {descriptor.get('offset')} is damaged")
    rows = decode(data)
    if len(rows) != descriptor.get("cardinality", len(rows)):
        raise DeletionVectorError(f"a deletion vector holds {len(rows)} rows, its descriptor says "
                                  f"{descriptor.get('cardinality')}")
    return rows


def unique_id(descriptor: dict[str, Any] | None) -> str | None:
    """The protocol's identity of a vector: a file is the pair (path, this), in adds and removes alike."""
    if not descriptor:
        return None
    off = descriptor.get("offset")
    return descriptor["storageType"] + descriptor["pathOrInlineDv"] + (f"@{off}" if off is not None else "")
