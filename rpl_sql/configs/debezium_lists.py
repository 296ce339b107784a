"""Debezium's MySQL connector filters: `database.include|exclude.list` and `table.include|exclude.list`.

Each list is comma-separated Java regular expressions matched against the whole database name or
`db.table`. MySQL's precedence (do-table before ignore-table before wild-do) becomes a negative lookahead;
case and MySQL's byte-wise `_` are spelt out, so the lists decide every table's row changes as the channel.
"""
from __future__ import annotations

import json
from functools import lru_cache

from rpl_sql.configs import pattern_tokens as P
from rpl_sql.configs.model import NotExpressibleError
from rpl_sql.filters.rules import FilterType, fold

T = FilterType
_BY_LENGTH = {1: r"[\x00-\x7F]", 2: r"[\u0080-\u07FF]", 3: r"[\u0800-\uFFFF]", 4: r"[\x{10000}-\x{10FFFF}]"}
MAX_UNDERSCORES = 10  # a run of `_` becomes an alternation that grows about 2x per `_`


def _char(c: str) -> str:
    if c.isascii() and c.isalnum():
        return c
    if ord(c) < 0x20 or c in ", \x7f":
        return f"\\x{ord(c):02X}"  # a comma would split the list; Debezium trims spaces
    if c.isascii():
        return "\\" + c
    return c


def _literal(c: str, lctn: int) -> str:
    if not lctn:
        return _char(c)
    variants = sorted(P.case_variants(c))
    return "[" + "".join(map(_char, variants)) + "]" if len(variants) > 1 else _char(variants[0])


@lru_cache(maxsize=None)
def _bytes(k: int, at_least: bool) -> str:
    """Characters whose UTF-8 encodings add up to exactly `k` bytes (at least `k` with a `%` in the run)."""
    if k <= 0:
        return ".*" if at_least else ""
    alts = [_BY_LENGTH[n] + _bytes(k - n, at_least) for n in range(1, min(k, 4) + 1) if n < k or not at_least]
    if at_least and k <= 4:
        alts += [_BY_LENGTH[n] + ".*" for n in range(k, 5)]
    return "(?:" + "|".join(alts) + ")"


def regex(tokens: list[tuple], lctn: int, rule: str) -> str:
    """A Java regex matching exactly the names the MySQL pattern `tokens` matches."""
    out, i = [], 0
    while i < len(tokens):
        t = tokens[i]
        if t[0] == "lit":
            out.append(_literal(t[1], lctn))
            i += 1
            continue
        j = i
        while j < len(tokens) and tokens[j][0] != "lit":
            j += 1
        run = tokens[i:j]
        ones, any_ = run.count(P.ONE), P.ANY in run
        if lctn:
            out.append("." * ones + (".*" if any_ else ""))
        elif ones > MAX_UNDERSCORES:
            raise NotExpressibleError(f"rule '{rule}': {ones} '_' in a row (MySQL counts bytes) make too long a regex")
        else:
            out.append(_bytes(ones, any_))
        i = j
    return "".join(out)


def _anchored(body: str) -> str:
    return "(?s-i:" + body + ")"


def _name(text: str, lctn: int) -> str:
    return "".join(_literal(c, lctn) for c in text)


def write(rules: dict[FilterType, tuple], lctn: int, channel: str) -> str:
    """A connector-config JSON fragment deciding every table's row changes as the channel's rules do."""
    if rules.get(T.REWRITE_DB):
        a, b = rules[T.REWRITE_DB][0]
        raise NotExpressibleError(f"channel '{channel}' REPLICATE_REWRITE_DB ({a},{b}): Debezium's lists rename "
                                  "nothing (rename topics with a ByLogicalTableRouter transform)")
    conf: dict[str, str] = {}
    do_db, ign_db = rules.get(T.DO_DB, ()), rules.get(T.IGNORE_DB, ())
    if do_db:
        conf["database.include.list"] = ",".join(_anchored(_name(d, lctn)) for d in do_db)
    elif ign_db:
        conf["database.exclude.list"] = ",".join(_anchored(_name(d, lctn)) for d in ign_db)
    do_t, ign_t = rules.get(T.DO_TABLE, ()), rules.get(T.IGNORE_TABLE, ())
    wdo, wign = rules.get(T.WILD_DO_TABLE, ()), rules.get(T.WILD_IGNORE_TABLE, ())
    if do_t or wdo:
        done = {fold(v, lctn) for v in do_t}
        shadow = [_name(v, lctn) for v in ign_t if fold(v, lctn) not in done]
        guard = "(?!(?:" + "|".join(shadow) + r")(?![\s\S]))" if shadow else ""
        items = [_anchored(_name(v, lctn)) for v in do_t]
        items += [_anchored(guard + regex(P.mysql_tokens(w), lctn, w)) for w in wdo]
        conf["table.include.list"] = ",".join(items)
    elif ign_t or wign:
        items = [_anchored(_name(v, lctn)) for v in ign_t]
        items += [_anchored(regex(P.mysql_tokens(w), lctn, w)) for w in wign]
        conf["table.exclude.list"] = ",".join(items)
    return json.dumps(conf, indent=2, ensure_ascii=False) + "\n"
