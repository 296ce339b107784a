"""Load the spec's end-to-end scenarios (tests/spec/cases.md) and run them through a driver.

A driver is the public entry point under test: the Python API, or the `rpl-sql` command line. The
runner checks rows, warnings and errors after every step, and that a failed statement commits nothing.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from rpl_sql import Session
from rpl_sql.errors import MySQLError, StartupError
from rpl_sql.filters.evaluate import RowEvent, StatementEvent, TableRef

CASES = Path(__file__).resolve().parents[1] / "spec" / "cases.md"


def load_scenarios() -> dict[str, dict]:
    blocks = re.findall(r"```yaml\n(.*?)```", CASES.read_text(encoding="utf-8"), re.S)
    return {d["id"]: d for d in map(yaml.safe_load, blocks)}


SCENARIOS = load_scenarios()


def chain(sid: str) -> list[dict]:
    """The scenario and its `extends` ancestors, oldest first."""
    out = []
    while sid:
        sc = SCENARIOS[sid]
        out.insert(0, sc)
        sid = sc.get("extends")
    return out


def to_event(e: dict):
    if e["kind"] == "row":
        db, table = e["table"]
        return RowEvent(db, table)
    tables = tuple(TableRef(t[0], t[1], bool(t[2])) for t in e.get("tables") or ())
    return StatementEvent(e["cmd"], e.get("db"), tables)


@dataclass
class StepError:
    code: int
    name: str
    message: str


class ApiDriver:
    """Statements through `Session.execute`."""

    name = "api"

    def __init__(self, warehouse: str):
        self.session = Session(warehouse)

    def sql(self, text: str) -> StepError | list:
        try:
            return self.session.execute(text)
        except MySQLError as e:
            return StepError(e.code, e.name, e.message)

    def start(self, options: list[str], lctn: int | None):
        return [w.message for w in self.session.start(options, lower_case_table_names=lctn)]


class CliDriver(ApiDriver):
    """Statements and start-up through the `rpl-sql` command, in a new process each time."""

    name = "cli"

    def _run(self, args: list[str]) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "rpl_sql.cli", "--warehouse", self.session.warehouse, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ))

    def sql(self, text: str):
        p = self._run(["-S", "-e", text])
        if p.returncode == 0:
            return p.stdout
        m = re.search(r"^ERROR (\d+) \((\w+)\): (.*)$", p.stderr, re.M)
        assert m, p.stderr
        return StepError(int(m.group(1)), "", m.group(3))

    def start(self, options: list[str], lctn: int | None):
        extra = [f"--lower-case-table-names={lctn}"] if lctn is not None else []
        p = self._run(["--start", *options, *extra, "-e", ""])
        if p.returncode != 0:
            m = re.search(r"^\[ERROR\] (.*)$", p.stderr, re.M)
            raise StartupError("", m.group(1) if m else p.stderr)
        return re.findall(r"^\[Warning\] (.*)$", p.stderr, re.M)


def filter_rows(session: Session) -> list[list]:
    return [[c, n, r, b, k] for c, n, r, b, _, k in session.filters()]


def global_rows(session: Session) -> list[list]:
    return [[n, r, b] for n, r, b, _ in session.global_filters()]


class Runner:
    """Runs one scenario; `observe` returns (filters, global_filters) rows, by default from the session."""

    def __init__(self, driver: ApiDriver, observe: Callable | None = None):
        self.d = driver
        self.observe = observe or (lambda s: (filter_rows(s), global_rows(s)))
        self.last = None

    def check_views(self, expect: dict) -> None:
        filters, global_filters = self.observe(self.d.session)
        if "filters" in expect:
            want = self.last[0] if expect["filters"] == "unchanged" else expect["filters"]
            assert filters == want, f"filters:\n got {filters}\nwant {want}"
        if "global_filters" in expect:
            want = self.last[1] if expect["global_filters"] == "unchanged" else expect["global_filters"]
            assert global_filters == want, f"global_filters:\n got {global_filters}\nwant {want}"
        self.last = (filters, global_filters)

    def startup(self, sc: dict, lctn: int | None) -> None:
        st = sc.get("startup", {})
        for entry in st.get("catalog") or []:
            res = self.d.sql(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='catalog-host' "
                             f"FOR CHANNEL '{entry['channel']}'")
            assert not isinstance(res, StepError), res
        expect = sc.get("expect_startup") or {}
        fails = expect.get("fails", False)
        version = self.d.session.store.version()
        if fails:
            try:
                self.d.start(st.get("options", []), lctn)
            except StartupError as e:
                assert e.message == fails["log_error"]
                assert self.d.session.store.version() == version, "a failed start-up persisted something"
                return
            raise AssertionError("start-up should have failed")
        warnings = self.d.start(st.get("options", []), lctn)
        if "log_warnings" in expect:
            assert warnings == expect["log_warnings"]
        self.check_views(expect)

    def step(self, step: dict) -> None:
        if "apply" in step:
            a = step["apply"]
            decisions = self.d.session.apply_events(a["channel"], [to_event(e) for e in a["events"]])
            for e, d in zip(a["events"], decisions):
                assert ("apply" if d.apply else "ignore") == e["expect"], f"{e} -> {d}"
            return
        sql, expect = step["sql"], step["expect"]
        version = self.d.session.store.version()
        if sql.strip().upper() == "SELECT 1":  # the spec's pure observation point
            res = []
        else:
            res = self.d.sql(sql)
        if "error" in expect:
            err = expect["error"]
            assert isinstance(res, StepError), f"{sql!r} should fail with {err['code']}, got {res!r}"
            assert res.code == err["code"], res
            if "message" in err:
                assert res.message == err["message"]
            assert self.d.session.store.version() == version, "a failed statement committed"
        else:
            assert not isinstance(res, StepError), f"{sql!r} failed: {res}"
        if "replica_status" in expect:
            for channel, cols in expect["replica_status"].items():
                rs = self.d.session.execute(f"SHOW REPLICA STATUS FOR CHANNEL '{channel}'")[0]
                row = dict(zip(rs.columns, rs.rows[0]))
                for col, want in cols.items():
                    assert row[col] == want, f"{col}: {row[col]!r} != {want!r}"
        self.check_views(expect)

    def run(self, sid: str) -> None:
        scs = chain(sid)
        root = scs[0]
        if "attempts" in root:
            for i, att in enumerate(root["attempts"]):
                sub = type(self.d)(self.d.session.warehouse + f"/attempt{i}")
                Runner(sub, self.observe).startup({"startup": {"options": att["options"]},
                                                   "expect_startup": att["expect_startup"]}, None)
            return
        if "variants" in root:
            for i, var in enumerate(root["variants"]):
                sub = Runner(type(self.d)(self.d.session.warehouse + f"/variant{i}"), self.observe)
                sub.startup(var, var.get("lower_case_table_names"))
                sub.step({"apply": {"channel": "", "events": var["events"]}})
                sub.check_views({"filters": var["expect_filters"]})
            return
        self.startup(root, root.get("lower_case_table_names"))
        for sc in scs:
            for step in sc.get("steps", []):
                self.step(step)
