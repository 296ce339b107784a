"""File descriptor 2 sent elsewhere for a block: what native code (a JVM, Rust) prints bypasses sys.stderr."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator


@contextlib.contextmanager
def redirected(fd: int) -> Iterator[None]:
    """fd 2 is `fd` inside the block (a process started inside keeps it for life); Python's own buffered
    writes are flushed on both sides, so each lands where it was written."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
