"""Result tables as the mysql client draws them: boxed or vertical (`\\G`), aligned by display width."""
from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Iterable

__all__ = ["format_table", "format_vertical", "display_width"]


def _cell(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(v)


def display_width(text: str) -> int:
    """Terminal columns of `text`: East Asian wide and full-width characters take two, combining marks none."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - display_width(text))


def format_table(columns: Iterable[str], rows: Iterable[tuple]) -> str:
    """A MySQL-client style box table, aligned by display width."""
    columns = list(columns)
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([display_width(c)] + [display_width(r[i]) for r in cells]) for i, c in enumerate(columns)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    line = lambda vals: "| " + " | ".join(_pad(v, w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    return "\n".join([rule, line(columns), rule] + [line(r) for r in cells] + ([rule] if cells else []))


def format_vertical(columns: Iterable[str], rows: Iterable[tuple]) -> str:
    """`\\G` output: one `Column: value` line each, rows separated by star lines."""
    columns = list(columns)
    width = max((display_width(c) for c in columns), default=0)
    out = []
    for i, r in enumerate(rows, 1):
        out.append(f"{'*' * 27} {i}. row {'*' * 27}")
        out += [f"{' ' * (width - display_width(c))}{c}: {_cell(v)}" for c, v in zip(columns, r)]
    return "\n".join(out)
