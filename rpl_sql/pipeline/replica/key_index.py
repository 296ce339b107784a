"""The integer primary keys of a replica table's data files, kept sorted in memory to find a batch's rows.

A batch of random keys touches every file of a large table, and reading and matching each file's key column
at every batch cost 2 s at 50M rows, most of a batch's time once merges write deletion vectors. A data file
never changes, so its keys are read once, sorted (a copied table's files already are) and searched with
numpy's binary search; the rows deletion vectors removed are left out by the caller. At most BUDGET bytes of
keys are kept, the least recently used file going first.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np
import pyarrow.parquet as pq

BUDGET = int(os.environ.get("RPL_SQL_KEY_INDEX_MB", "1024")) << 20


class _Keys:
    __slots__ = ("keys", "order", "size")

    def __init__(self, column: np.ndarray):
        if len(column) > 1 and not bool(np.all(column[1:] >= column[:-1])):
            self.order = np.argsort(column, kind="stable")
            self.keys = column[self.order]
        else:
            self.order = None
            self.keys = column
        self.size = self.keys.nbytes + (self.order.nbytes if self.order is not None else 0)


_FILES: OrderedDict[tuple[str, str], _Keys] = OrderedDict()
_USED = [0]
_LOCK = threading.Lock()


def _keys(path: str, column: str) -> _Keys:
    with _LOCK:
        got = _FILES.get((path, column))
        if got is not None:
            _FILES.move_to_end((path, column))
            return got
    col = pq.read_table(path, columns=[column], pre_buffer=False).column(0)
    got = _Keys(col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False))
    with _LOCK:
        if (path, column) not in _FILES:
            _FILES[(path, column)] = got
            _USED[0] += got.size
        while _USED[0] > BUDGET and len(_FILES) > 1:
            _, old = _FILES.popitem(last=False)
            _USED[0] -= old.size
    return got


def find(path: str, column: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (row indexes, keys) of the file's rows whose integer `column` is one of `values` (sorted, unique),
    deleted rows included."""
    k = _keys(path, column)
    if not len(k.keys) or not len(values):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo = np.searchsorted(k.keys, values, side="left")
    hi = np.searchsorted(k.keys, values, side="right")
    counts = hi - lo
    hit = counts > 0
    if not hit.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts, counts, keys = lo[hit], counts[hit], values[hit]
    idx = np.repeat(starts - np.cumsum(np.concatenate(([0], counts[:-1]))), counts) + np.arange(counts.sum())
    rows = k.order[idx] if k.order is not None else idx
    return rows.astype(np.int64), np.repeat(keys, counts)
