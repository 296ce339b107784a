"""An events file's applied rows, gathered from its columns by the C kernel `rpl_sql/native/take.c` in one call
for the file (Arrow's filter, a call per column, where it cannot: no compiler, RPL_SQL_NATIVE=0, a type it
does not gather, a column in several chunks). tests/pipeline/test_kept_rows.py holds the two equal.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pyarrow as pa

from rpl_sql import native

_FIELDS = 11  # per column in the kernel's descriptor (take.c)
_KIND, _WIDTH, _OFFSET, _IN_VALID, _IN_VALUES, _IN_DATA, _OUT_VALID, _OUT_VALUES, _OUT_DATA, _NULLS, _LENGTH = \
    range(_FIELDS)
_ALIGN = 64


def _kernel():
    return native.function("take", [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], None)


def take(table: pa.Table, rows: np.ndarray, mask: pa.BooleanArray) -> pa.Table:
    """`table`'s rows at `rows` (ascending), which are those `mask` keeps."""
    kernel = _kernel()
    if kernel is None or any(c.num_chunks != 1 for c in table.columns):
        return table.filter(mask)
    m = len(rows)
    arrays = [c.chunk(0) for c in table.columns]
    plans = [_plan(a.indices if isinstance(a, pa.DictionaryArray) else a, m) for a in arrays]
    gathered = [p for p in plans if p is not None]
    if gathered:
        # from Arrow's pool, which reuses freed pages: numpy's fresh ones cost the kernel's page faults, as
        # much as the gather itself
        buffer = pa.allocate_buffer(sum(p.size for p in gathered) + _ALIGN)
        base = buffer.address
        start = -base % _ALIGN
        desc = np.zeros((len(gathered), _FIELDS), np.int64)
        for i, p in enumerate(gathered):
            start = p.place(desc[i], base, start)
        rows = np.ascontiguousarray(rows, np.int32)
        kernel(m, rows.ctypes.data, len(gathered), desc.ctypes.data)
    out, k = [], 0
    for arr, plan in zip(arrays, plans):
        if plan is None:
            out.append(arr.filter(mask))
            continue
        got = plan.result(desc[k], buffer)
        k += 1
        out.append(pa.DictionaryArray.from_arrays(got, arr.dictionary, safe=False)
                   if isinstance(arr, pa.DictionaryArray) else got)
    return pa.Table.from_arrays(out, schema=table.schema)


class _Plan:
    """One column's gather: what the kernel reads and where it writes in the file's output buffer."""

    def __init__(self, arr: pa.Array, bufs: list, m: int, kind: int, width: int, sizes: list[int]):
        self.arr, self.bufs, self.m, self.kind, self.width = arr, bufs, m, kind, width
        self.sizes = sizes  # validity, values or offsets, text or child rows
        self.size = sum(_up(s) for s in sizes)
        self._at: list[int] = []

    def place(self, d: np.ndarray, base: int, start: int) -> int:
        d[_KIND], d[_WIDTH], d[_OFFSET] = self.kind, self.width, self.arr.offset
        d[_IN_VALID] = self.bufs[0].address if self.bufs[0] is not None and self.arr.null_count else 0
        d[_IN_VALUES] = self.bufs[1].address
        d[_IN_DATA] = self.bufs[2].address if self.kind == 2 and self.bufs[2] is not None else 0
        for field, size in zip((_OUT_VALID, _OUT_VALUES, _OUT_DATA), self.sizes):
            self._at.append(start)
            d[field] = base + start if size else 0
            start += _up(size)
        return start

    def result(self, d: np.ndarray, buffer: pa.Buffer) -> pa.Array:
        m, t = self.m, self.arr.type
        validity = buffer.slice(self._at[0], self.sizes[0]) if d[_IN_VALID] else None
        values = buffer.slice(self._at[1], self.sizes[1])
        nulls = int(d[_NULLS])
        if self.kind == 1:
            return pa.Array.from_buffers(t, m, [validity, values], null_count=nulls)
        if self.kind == 2:
            data = buffer.slice(self._at[2], int(d[_LENGTH]))
            return pa.Array.from_buffers(t, m, [validity, values, data], null_count=nulls)
        child_rows = np.frombuffer(buffer, np.int32, int(d[_LENGTH]), self._at[2])
        child = self.arr.values.take(pa.array(child_rows))
        return pa.Array.from_buffers(t, m, [validity, values], null_count=nulls, children=[child])


def _plan(arr: pa.Array, m: int) -> _Plan | None:
    """How the kernel gathers `arr` (a dictionary column: its indices), None for Arrow's filter."""
    t, bufs = arr.type, arr.buffers()
    validity = (m + 7) // 8 if arr.null_count else 0  # (no validity in: none out)
    if pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_floating(t) or pa.types.is_date(t):
        width = t.bit_width // 8
        return _Plan(arr, bufs, m, 1, width, [validity, m * width, 0]) if width in (1, 2, 4, 8) else None
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return _Plan(arr, bufs, m, 2, 0, [validity, 4 * (m + 1), bufs[2].size if bufs[2] is not None else 0])
    if pa.types.is_list(t):
        return _Plan(arr, bufs, m, 3, 0, [validity, 4 * (m + 1), 4 * len(arr.values)])
    return None


def _up(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN
