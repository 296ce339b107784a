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


def test_an_unknown_replicate_option_is_refused_with_its_line(tmp_path):
    """mysqld refuses to start on an option it does not know; import-filters, lint and --start say which line,
    and exit non-zero, instead of leaving the rule out. Other servers' options are still passed over."""
    cnf = tmp_path / "my.cnf"
    cnf.write_text("[mysqld]\nport=3306\nreplicate-same-server-id=0\nloose-x:replicate-do-db=y\n"
                   "shop:replicate-wild-ignore-table = shop.tmp%\n")
    wh = str(tmp_path / "wh")
    for args in (["lint", str(cnf)], ["import-filters", str(cnf)], ["--warehouse", wh, "--start", "--defaults-file",
                                                                    str(cnf), "-e", "SHOW REPLICA STATUS"]):
        p = subprocess.run([sys.executable, "-m", "rpl_sql.cli", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0, args
        assert f"unknown variable 'shop:replicate-wild-ignore-table = shop.tmp%' ({cnf}, line 5)" in p.stderr, p.stderr
    cnf.write_text("[mysqld]\nport=3306\nreplicate-same-server-id=0\nloose-x:replicate-do-db=y\nreplicate-do-db=a\n")
    p = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "import-filters", str(cnf)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`a`);\n", p.stderr
