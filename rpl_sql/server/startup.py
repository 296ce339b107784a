"""`--replicate-*` start-up options and my.cnf-style option files, parsed with MySQL's rules (spec §8).

>>> parse_startup(["--replicate-do-db=db1", "--replicate-rewrite-db=ch1:a->b"]).rules[1]
StartupRule(ftype=<FilterType.REWRITE_DB: 'REPLICATE_REWRITE_DB'>, channel='ch1', value=('a', 'b'))
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rpl_sql.errors import StartupError
from rpl_sql.filters.rules import FilterType, Value

T = FilterType

_TABLE_ERRORS = {
    T.DO_TABLE: "ER_RPL_CANT_ADD_DO_TABLE",
    T.IGNORE_TABLE: "ER_RPL_CANT_ADD_IGNORE_TABLE",
    T.WILD_DO_TABLE: "ER_RPL_FILTER_ADD_WILD_DO_TABLE_FAILED",
    T.WILD_IGNORE_TABLE: "ER_RPL_FILTER_ADD_WILD_IGNORE_TABLE_FAILED",
}
_OPTION_TYPES = {t.option: t for t in T}
LCTN_OPTION = "lower-case-table-names"
FILTER_MODE_OPTION = "rpl-sql-filter-mode"  # rpl_sql's own: 'mysql' (default) or 'effective_database'


@dataclass(frozen=True)
class StartupRule:
    """One `--replicate-*` occurrence: global when `channel` is None."""

    ftype: FilterType
    channel: str | None
    value: Value


@dataclass(frozen=True)
class StartupOptions:
    rules: tuple[StartupRule, ...] = ()
    lower_case_table_names: int | None = None
    filter_mode: str | None = None
    raw: tuple[str, ...] = ()  # the options as given, for the record


def option_name(name: str) -> str:
    """Canonical spelling: no leading dashes, `_` as `-`, lower case, MySQL's `loose-` prefix dropped."""
    name = name.lstrip("-").replace("_", "-").lower()
    return name[len("loose-"):] if name.startswith("loose-") else name


def is_startup_option(name: str) -> bool:
    return option_name(name) in _OPTION_TYPES or option_name(name) in (LCTN_OPTION, FILTER_MODE_OPTION)


def parse_rule(name: str, value: str) -> StartupRule:
    """Parse one `--replicate-*=[channel:]rule`; malformed rules abort start-up like mysqld."""
    ftype = _OPTION_TYPES[option_name(name)]
    channel: str | None = None
    rule = value
    if ":" in value:
        channel, rule = value.split(":", 1)
    if ftype in _TABLE_ERRORS:
        if "." not in rule:
            # MySQL splits the value in place, so a prefixed rule's message shows the channel part.
            raise StartupError.of(_TABLE_ERRORS[ftype], channel if channel is not None else rule)
        return StartupRule(ftype, channel, rule)
    if ftype is T.REWRITE_DB:
        if "->" not in rule:
            raise StartupError.of("ER_RPL_REWRITEDB_MISSING_ARROW")
        src, dst = rule.split("->", 1)
        src, dst = src.rstrip(), dst.lstrip()
        if not src:
            raise StartupError.of("ER_RPL_REWRITEDB_EMPTY_FROM")
        if not dst:
            raise StartupError.of("ER_RPL_REWRITEDB_EMPTY_TO")
        return StartupRule(ftype, channel, (src, dst))
    return StartupRule(ftype, channel, rule)


def _split_option(text: str) -> tuple[str, str | None]:
    name, sep, value = text.partition("=")
    return name.strip(), (value if sep else None)


def parse_startup(options: list[str] | tuple[str, ...], file_options: list[tuple[str, str | None]] = (),
                  lower_case_table_names: int | None = None) -> StartupOptions:
    """Parse option-file pairs first, then `--name=value` strings, in order (mysqld's order); a
    `lower_case_table_names` value given here comes last and is recorded like the option."""
    pairs = list(file_options) + [_split_option(o) for o in options]
    rules: list[StartupRule] = []
    lctn: int | None = None
    mode: str | None = None
    for name, value in pairs:
        canon = option_name(name)
        if canon in _OPTION_TYPES:
            if value is None:
                raise StartupError("ER_OPTION_REQUIRES_ARGUMENT", f"option '--{canon}' requires an argument")
            rules.append(parse_rule(canon, value))
        elif canon == LCTN_OPTION:
            if value not in ("0", "1", "2"):
                raise StartupError("ER_WRONG_VALUE", f"Incorrect value '{value}' for lower_case_table_names")
            lctn = int(value)
        elif canon == FILTER_MODE_OPTION:
            if value not in ("mysql", "effective_database"):
                raise StartupError("ER_WRONG_VALUE", f"Incorrect value '{value}' for {FILTER_MODE_OPTION}")
            mode = value
        else:
            raise StartupError("ER_UNKNOWN_OPTION", f"unknown variable '{name}={value}'")
    raw = tuple(f"--{n.lstrip('-')}" + (f"={v}" if v is not None else "") for n, v in pairs)
    if lower_case_table_names is not None:
        if lower_case_table_names not in (0, 1, 2) or isinstance(lower_case_table_names, bool):
            raise StartupError("ER_WRONG_VALUE", f"Incorrect value '{lower_case_table_names}' for "
                               "lower_case_table_names")
        lctn = int(lower_case_table_names)
        raw += (f"--{LCTN_OPTION}={lctn}",)
    return StartupOptions(tuple(rules), lctn, mode, raw)


# ---------------------------------------------------------------- option files

_SECTIONS = ("mysqld", "server", "rpl_sql")
# mysqld's and mariadbd's options named replicate-* that are no filters (skipped with the other server options)
_OTHER_REPLICATE = frozenset({"replicate-same-server-id", "replicate-annotate-row-events",
                              "replicate-events-marked-for-skip"})


def _unknown_filter_option(name: str) -> bool:
    """A replicate-* name no server knows (`shop:replicate-do-db`, `replicate-do-dbs`): mysqld would refuse to
    start on it, so it is no option to skip in silence. MySQL's `loose-` prefix makes it a warning there."""
    if name.lstrip("-").lower().startswith("loose"):
        return False
    canon = option_name(name)
    base = canon.rpartition(".")[2]  # MariaDB's connection prefix
    return "replicate" in canon and base not in _OTHER_REPLICATE
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "r": "\r", "\\": "\\", "s": " ", '"': '"', "'": "'"}


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), value)


def _strip_comment(line: str) -> str:
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#":
            return line[:i]
    return line


def read_option_file(path: str | os.PathLike, _depth: int = 0, sections: tuple[str, ...] = _SECTIONS,
                     keep: Callable[[str], bool] = is_startup_option) -> list[tuple[str, str | None]]:
    """The replication options of a my.cnf-style file, in file order.

    Reads `[mysqld]`, `[server]` and `[rpl_sql]` sections (or `sections`), follows `!include` /
    `!includedir`, and skips options meant for mysqld alone (port, datadir, ...: what `keep` turns down),
    as a replica's config file has them.
    """
    if _depth > 10:
        raise StartupError("ER_OPTION_FILE", f"Too deep !include nesting in '{path}'")
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): mysqld ends lines at LF only
    except OSError as e:
        raise StartupError("ER_OPTION_FILE", f"Could not open required defaults file: {path} ({e.strerror})")
    out: list[tuple[str, str | None]] = []
    section = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("!include "):
            out += read_option_file(path.parent / line[len("!include "):].strip(), _depth + 1, sections, keep)
            continue
        if line.startswith("!includedir "):
            d = path.parent / line[len("!includedir "):].strip()
            for f in sorted(d.glob("*.cnf")):
                out += read_option_file(f, _depth + 1, sections, keep)
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            continue
        if section not in sections:
            continue
        name, value = _split_option(_strip_comment(line))
        if keep(name):
            out.append((name, _unquote(value) if value is not None else None))
        elif _unknown_filter_option(name):
            raise StartupError("ER_UNKNOWN_OPTION", f"unknown variable '{line}' ({path}, line {number}): a "
                               "filter option is replicate-*=[channel:]rule (MySQL) or [connection.]replicate_* "
                               "(MariaDB)")
    return out
