"""Shared fixtures: one SparkSession per test run (starting Spark costs seconds), fresh warehouses."""
from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from rpl_sql.sparkenv import local_spark

    session = local_spark(app_name="rpl_sql-tests")
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path):
    """A fresh, empty warehouse directory (a new replica server)."""
    return str(tmp_path / "wh")
