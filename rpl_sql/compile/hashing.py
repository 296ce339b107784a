"""Spark's hash() (Murmur3 over UTF-8 strings), computed here so exact table tests can be hash lookups."""
from __future__ import annotations

# ---------------------------------------------------------------- Spark's hash()

def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & 0xFFFFFFFF
    k1 = ((k1 << 15) | (k1 >> 17)) & 0xFFFFFFFF
    return (k1 * 0x1B873593) & 0xFFFFFFFF


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & 0xFFFFFFFF
    return (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF


def spark_hash(*parts: str) -> int:
    """Spark SQL's `hash(parts...)` of non-NULL strings (Murmur3_x86_32.hashUnsafeBytes, seed 42, each
    column's hash the next one's seed), so a generated `hash(k, t) IN (...)` can guard an exact test."""
    h = 42
    for part in parts:
        data = part.encode("utf-8")
        n = len(data)
        aligned = n - n % 4
        h1 = h
        for i in range(0, aligned, 4):
            h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
        for b in data[aligned:]:  # Spark's legacy tail: each byte, sign-extended, mixed as a whole word
            h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & 0xFFFFFFFF))
        h1 ^= n
        h1 ^= h1 >> 16
        h1 = (h1 * 0x85EBCA6B) & 0xFFFFFFFF
        h1 ^= h1 >> 13
        h1 = (h1 * 0xC2B2AE35) & 0xFFFFFFFF
        h1 ^= h1 >> 16
        h = h1
    return h - (1 << 32) if h & 0x80000000 else h


