"""Every scenario of the spec's cases.md, through the Python API and through the `rpl-sql` command."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scenarios import CASES, SCENARIOS, ApiDriver, CliDriver, Runner

SHARED = Path(__file__).resolve().parents[3] / "shared" / "spec" / "cases.md"


@pytest.mark.parametrize("sid", list(SCENARIOS))
def test_scenario_api(sid, tmp_path):
    Runner(ApiDriver(str(tmp_path / "wh"))).run(sid)


@pytest.mark.parametrize("sid", list(SCENARIOS))
def test_scenario_cli(sid, tmp_path):
    Runner(CliDriver(str(tmp_path / "wh"))).run(sid)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/spec is not beside this checkout")
def test_vendored_cases_match_shared_spec():
    assert CASES.read_text(encoding="utf-8") == SHARED.read_text(encoding="utf-8")
