"""The C kernels' build on first use: compiled once into the cache and loaded from it after, and answered None
(the numpy twin works instead) where no compiler builds them or RPL_SQL_NATIVE=0 asks so."""
from __future__ import annotations

import ctypes

import pytest

from rpl_sql import native


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("RPL_SQL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RPL_SQL_NATIVE", raising=False)
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setattr(native, "_FUNCTIONS", {})
    return tmp_path / "cache"


def test_a_kernel_is_built_once_and_loaded_from_the_cache(fresh, monkeypatch):
    if native._compiler() is None:
        pytest.skip("no C compiler here (cc, gcc or $CC)")
    lib = native.library("verdicts")
    assert lib is not None and lib.rpl_sql_verdicts
    built = list(fresh.glob("rpl_sql-verdicts-*.so"))
    assert len(built) == 1 and not list(fresh.glob("rpl_sql-native-*"))  # no build directory left behind
    monkeypatch.setattr(native, "_LOADED", {})  # a new process: the cache serves, no compiler is asked
    monkeypatch.setattr(native, "_compiler", lambda: pytest.fail("compiled again"))
    assert native.library("verdicts") is not None


@pytest.mark.parametrize("why", ["no compiler", "a failing compiler", "RPL_SQL_NATIVE=0"])
def test_without_a_build_the_answer_is_none(fresh, monkeypatch, why):
    if why == "no compiler":
        monkeypatch.setattr(native, "_compiler", lambda: None)
    elif why == "a failing compiler":
        monkeypatch.setenv("CC", "false")
    else:
        monkeypatch.setenv("RPL_SQL_NATIVE", "0")
    assert native.library("verdicts") is None
    assert not list(fresh.glob("*.so"))


def test_a_build_error_says_what_failed(fresh, monkeypatch):
    monkeypatch.setenv("CC", "false")
    with pytest.raises(native.BuildError, match="false failed on verdicts.c"):
        native._built("verdicts")


def test_a_kernels_function_comes_typed_and_is_typed_once(fresh):
    if native._compiler() is None:
        pytest.skip("no C compiler here (cc, gcc or $CC)")
    fn = native.function("take", [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], None)
    assert fn is not None and fn.restype is None and len(fn.argtypes) == 4
    assert native.function("take", [], ctypes.c_int) is fn and fn.restype is None  # set up once, not again
