"""Shared fixtures: one SparkSession per test run (starting Spark costs seconds), fresh warehouses, and the
MariaDB servers of tests/support/mariadb.py (`mariadb`, `mariadb_pair`) for every test module."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.mariadb"]  # its fixtures, registered once for every module


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from rpl_sql.spark.env import local_spark

    session = local_spark(app_name="rpl_sql-tests")
    yield session
    session.stop()


# ---------------------------------------------------------------- two workers (pytest-xdist, `-n 2`)
# One worker runs every test that uses the in-process SparkSession, so a run still starts one session; the other
# tests go to either worker by module, so a module's servers (and tests/spark/test_cluster.py's cluster: its tests use
# no session) start once. Groups with the most JVM tests (marked `spark`: seconds to minutes each, the rest
# milliseconds) start first, so neither worker ends the run alone with a long one. Only the workers see
# fixtures and marks: they write each test's group and weight to a directory the scheduler reads. (xdist's own
# `loadgroup` does not group under pytest 9.2: it renames `item._nodeid`, which `nodeid` no longer reads.)
_GROUPS = "RPL_SQL_TEST_GROUPS"
_SCRATCH: list[str] = []  # the directories this process made, removed when it ends


def pytest_configure(config):
    # the shell's history goes to a scratch file, never the user's ~/.rpl_sql_history
    if "RPL_SQL_HISTFILE" not in os.environ or not hasattr(config, "workerinput"):
        _SCRATCH.append(tempfile.mkdtemp(prefix="rpl_sql-test-history-"))
        os.environ["RPL_SQL_HISTFILE"] = os.path.join(_SCRATCH[-1], "history")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        os.environ[_GROUPS] = tempfile.mkdtemp(prefix="rpl_sql-test-groups-")


def pytest_unconfigure(config):
    while _SCRATCH:
        shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)
    if not hasattr(config, "workerinput") and os.environ.get(_GROUPS):
        shutil.rmtree(os.environ.pop(_GROUPS), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput") or not os.environ.get(_GROUPS):
        return
    groups = {item.nodeid: ["spark" if "spark" in item.fixturenames else item.nodeid.split("::")[0],
                            1000 if item.get_closest_marker("spark") else 1] for item in items}
    path = Path(os.environ[_GROUPS], config.workerinput["workerid"] + ".json")
    path.with_suffix(".tmp").write_text(json.dumps(groups))
    path.with_suffix(".tmp").replace(path)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which may not be installed
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        """Whole groups to a worker, heaviest first (called once every worker has collected)."""

        groups: dict[str, list] | None = None
        ordered = False  # the work queue, heaviest group first (once, before the first unit is handed out)

        def _group(self, nodeid: str) -> list:
            if self.groups is None:
                self.groups = {}
                for f in sorted(Path(os.environ[_GROUPS]).glob("*.json")):
                    self.groups.update(json.loads(f.read_text()))
            return self.groups.get(nodeid, [nodeid.split("::")[0], 1])

        def _split_scope(self, nodeid: str) -> str:
            return self._group(nodeid)[0]

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:
                self.ordered = True
                queue = sorted(self.workqueue.items(), key=lambda kv: -sum(self._group(n)[1] for n in kv[1]))
                self.workqueue.clear()
                self.workqueue.update(queue)
            super()._assign_work_unit(node)

    return ByGroup(config, log)


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
