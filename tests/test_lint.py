"""The linter is part of the test command: line length (ruff.toml) and pyflakes' checks over the whole tree."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_limits_are_the_documented_ones():
    text = (ROOT / "ruff.toml").read_text()
    assert "line-length = 120" in text and '"E501"' in text
