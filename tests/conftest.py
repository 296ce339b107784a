"""Shared fixtures: one SparkSession per test run (starting Spark costs seconds), fresh warehouses, and the
MariaDB servers of tests/mariadb.py (`mariadb`, `mariadb_pair`) for every test module."""
from __future__ import annotations

import os
import sys

import pytest

pytest_plugins = ["mariadb"]  # its fixtures, registered once for every module


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from rpl_sql.spark.env import local_spark

    session = local_spark(app_name="rpl_sql-tests")
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path):
    """A fresh, empty warehouse directory (a new replica server)."""
    return str(tmp_path / "wh")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say loudly what a run skipped and why: a machine without mariadbd or Java runs less than CI does."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.write_sep("!", f"{len(skipped)} TESTS SKIPPED: this run covers less than CI", red=True)
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n:4d} skipped: {reason}", red=True)
