"""The signals of the replica service's SQL-thread processes: Ctrl-C reaches the whole process group, and the
parent stops its children over their pipes at a batch boundary, so a child ignores it from its first
instruction on; and a child dies with its parent."""
from __future__ import annotations

import signal
from multiprocessing import resource_tracker


def start_with_ctrl_c_blocked(proc) -> None:
    """`proc.start()` with SIGINT blocked in the child until it calls ignore_ctrl_c() (a signal mask survives
    fork and exec): a Ctrl-C while it imports would otherwise kill it with a traceback, and the parent would
    report its end as an error."""
    resource_tracker.ensure_running()  # starting the tracker unblocks SIGINT in the calling thread
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def ignore_ctrl_c() -> None:
    """In the child, first thing: SIGINT ignored, then unblocked (one sent while it started is dropped)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies (a SIGKILLed service leaves no SQL thread
    running behind it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
