"""The replica service's memory: the allocators its processes run with, handing freed memory back to the system,
and the resident size the SQL-thread processes are replaced at (`SQL_THREAD_MAX_MEMORY`)."""
from __future__ import annotations

import os

# The allocator linked into deltalake (jemalloc, configured by this variable) keeps much of what the SQL
# thread's merges free: with its defaults the process grows for as long as it runs. One arena and freed pages
# handed back after 200 ms about halve that growth at 1.06x the time; without thread caches as well (delta-rs
# runs a hundred runtime threads, each caching freed memory for itself), the service rose about 1 MB a minute
# over minutes 1-10, a third of before, and still 2.6 from minute 10 to 20 (bench/bench_replica.py;
# docs/benchmarks.md, "Where the memory goes").
# Read once, when deltalake loads: set for the SQL-thread processes when they start, and for `rpl-sql replica`
# itself by running it again with it; a value the user set wins.
MALLOC_CONF_VAR = "_RJEM_MALLOC_CONF"
SERVICE_MALLOC_CONF = "narenas:1,tcache:false,dirty_decay_ms:200,muzzy_decay_ms:0"
# pyarrow's own allocations (parquet reads, the batches handed to deltalake) go to glibc's malloc rather than
# pyarrow's default mimalloc: in a thirty-minute run mimalloc's 1 GiB arena in the SQL-thread process went from
# 20 to 55 MB while pyarrow held 0-2 MB at each count, the whole of that process's growth. glibc then keeps
# free space in its arenas instead (33 to 70 MB with an arena per thread; a 52 MB step at minute 27 with two),
# unless its mmap threshold is fixed: large blocks are then mapped and unmapped, and the threshold for
# trimming an arena's top no longer rises with them (docs/benchmarks.md, "pyarrow's allocator"). Read when
# pyarrow and glibc first allocate: set like MALLOC_CONF_VAR.
SERVICE_ALLOCATORS = {MALLOC_CONF_VAR: SERVICE_MALLOC_CONF, "ARROW_DEFAULT_MEMORY_POOL": "system",
                      "MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "262144"}


def set_service_allocators() -> None:
    """Put `SERVICE_ALLOCATORS` in this process's environment (for what it starts or runs again); a value
    already set wins."""
    for var, value in SERVICE_ALLOCATORS.items():
        os.environ.setdefault(var, value)


def _malloc_trim():
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def return_freed_memory() -> None:
    """Hand back to the system what pyarrow's pool and glibc's malloc (one and the same in the service,
    `SERVICE_ALLOCATORS`) hold freed, after each SQL-thread batch and at each receiver heartbeat (microseconds
    a call). The service's RSS was about 25 MB lower at minutes 10 and 20 and rose more slowly, lag unchanged
    (bench/bench_replica.py; docs/benchmarks.md, "Returning freed memory")."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def rss_mb() -> float | None:
    """This process's resident memory (Linux), None where /proc does not say."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return None
