"""rpl_sql's C kernels (the `*.c` beside this file): what runs per event in the applier's write threads.

Each is compiled on first use by the machine's C compiler (`$CC`, else `cc` or `gcc`) into a shared library
kept in the cache (`~/.cache/rpl_sql`, or `$RPL_SQL_CACHE`) under its source's hash, and loaded with ctypes,
whose calls let the GIL go. Where none can be built (no compiler, a failed build) or RPL_SQL_NATIVE=0 asks so,
`library` answers None and the caller does the same work with numpy or Arrow; tests hold the two equal.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from rpl_sql.errors import RplSqlError

SOURCES = Path(__file__).parent
log = logging.getLogger(__name__)
_LOADED: dict[str, ctypes.CDLL | None] = {}
_FUNCTIONS: dict[str, ctypes._CFuncPtr] = {}
_LOCK = threading.Lock()


class BuildError(RplSqlError, OSError):
    """A kernel could not be compiled here; its numpy or Arrow twin does the work."""


def cache_dir() -> Path:
    """Where rpl_sql keeps what it builds on first use (this package's libraries, the JVM table code's jar)."""
    base = os.environ.get("RPL_SQL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rpl_sql")
    return Path(base)


def enabled() -> bool:
    return os.environ.get("RPL_SQL_NATIVE", "1") != "0"


def library(name: str) -> ctypes.CDLL | None:
    """The kernel `name`.c loaded, built first if the cache lacks it; None where it cannot be (said once at
    DEBUG) or RPL_SQL_NATIVE=0."""
    if not enabled():
        return None
    with _LOCK:
        if name not in _LOADED:
            try:
                _LOADED[name] = ctypes.CDLL(str(_built(name)))
            except OSError as e:  # BuildError, or a library the loader refuses
                log.debug("the C kernel %s is not available (%s): numpy does its work", name, e)
                _LOADED[name] = None
        return _LOADED[name]


def function(name: str, argtypes: list, restype) -> ctypes._CFuncPtr | None:
    """The kernel `name`.c's function `rpl_sql_<name>`, its argument and result types set once (the write
    threads call it while a driver asks for it again); None as `library` says."""
    lib = library(name)
    if lib is None:
        return None
    with _LOCK:
        fn = _FUNCTIONS.get(name)
        if fn is None:
            fn = getattr(lib, f"rpl_sql_{name}")
            fn.argtypes, fn.restype = argtypes, restype
            _FUNCTIONS[name] = fn
        return fn


def _built(name: str) -> Path:
    src = SOURCES / f"{name}.c"
    key = hashlib.sha256(src.read_bytes() + f"\0{sys.platform}\0{platform.machine()}".encode()).hexdigest()[:16]
    out = cache_dir() / f"rpl_sql-{name}-{key}.so"
    if out.exists():
        return out
    cc = _compiler()
    if cc is None:
        raise BuildError("no C compiler (cc, gcc or $CC) on this machine")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rpl_sql-native-", dir=out.parent) as tmp:
        partial = Path(tmp, out.name)
        res = subprocess.run([cc, "-O2", "-std=c99", "-shared", "-fPIC", "-o", str(partial), str(src)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise BuildError(f"{cc} failed on {src.name}: {res.stderr.strip()[-2000:]}")
        os.replace(partial, out)  # atomic: a concurrent build leaves one whole library
    return out


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc"):
        found = cc and shutil.which(cc)
        if found:
            return found
    return None
