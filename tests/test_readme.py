"""The README's Python API example runs as written, and its inline comments tell the truth."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_block(section: str) -> str:
    """The first ```python block after the `## <section>` heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)


def test_python_api_example_runs(spark, tmp_path, capsys):
    code = _python_block("Python API")
    assert code.count('"/data/rpl_warehouse"') == 2  # both connect and register name the same warehouse
    ns: dict = {}
    exec(compile(code.replace('"/data/rpl_warehouse"', repr(str(tmp_path / "wh"))), "README.md", "exec"), ns)

    claimed = re.search(r'decide\(ch1\.filters, RowEvent\("sales", "orders"\)\) +'
                        r"# Decision\(apply=(\w+), decided_by='(\w+)'", code)
    d = ns["decide"](ns["ch1"].filters, ns["RowEvent"]("sales", "orders"))
    assert (str(d.apply), d.decided_by) == claimed.groups() == ("True", "REPLICATE_WILD_DO_TABLE")
    assert "REPLICATE_DO_DB" in capsys.readouterr().out  # .show() of the filters after the CHANGE in sql()
    rows = spark.sql("SELECT FILTER_NAME, FILTER_RULE, COUNTER FROM replication_applier_filters "
                     "WHERE CHANNEL_NAME = 'ch1' ORDER BY FILTER_NAME").collect()
    assert [tuple(r) for r in rows] == [("REPLICATE_DO_DB", "sales", 0), ("REPLICATE_IGNORE_DB", "mysql", 0),
                                        ("REPLICATE_WILD_DO_TABLE", "sales.%", 1)]
    assert spark.sql("SELECT should_apply('ch1', 'sales', 'orders'), should_apply('ch1', 'hr', 'pay')").first() \
        == (True, False)


DOCS = [README, *sorted((README.parent / "docs").glob("*.md"))]  # docs/design quotes commit-metadata keys


def _documented_names() -> set[str]:
    """Every `rpl_sql.x.y` name the README and docs/ mention in backticks, and every `from rpl_sql... import`."""
    names = set()
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"`(rpl_sql(?:\.\w+)+)", text))
        for mod, imported in re.findall(r"^from (rpl_sql[\w.]*) import ([\w, ]+)$", text, re.M):
            names.update(f"{mod}.{n.strip()}" for n in imported.split(","))
    return {n for n in names if not n.endswith((".py", ".lark"))}


def test_every_documented_name_is_importable():
    import importlib

    def resolves(name: str) -> bool:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return False
            return True
        return False

    names = _documented_names()
    assert len(names) > 15  # the docs do name modules: the check is not vacuous
    assert [n for n in sorted(names) if not resolves(n)] == []
