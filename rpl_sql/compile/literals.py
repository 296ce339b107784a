"""Spark SQL text: Spark's string literals, IN lists and maps, folding, AND/OR/CASE. Identifiers and MySQL's
string literals are rpl_sql.language.quoting's; Spark's parser and shell need the escaping below."""
from __future__ import annotations

import re
from typing import Iterable

from rpl_sql.compile import codes
from rpl_sql.compile.codes import MAP_CHUNK, MAP_PAD_MAX
from rpl_sql.filters.rules import fold_translation

# ---------------------------------------------------------------- Spark's string literals

LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'")  # a string literal as sql_str writes it
_PLAIN = re.compile(r"[A-Za-z0-9 _.%,:;=<>!?@#&|^~*+/()\[\]{}\"`-]*")  # printable, none of \\ ' $


def sql_str(s: str, script_safe: bool = False) -> str:
    """A Spark SQL string literal for `s` (default parser: backslash escapes): every compiled function's text.

    Quote and backslash are escaped, `$` (Spark's ${var} substitution runs on the raw text) and non-printable
    characters become \\uXXXX (surrogate pairs above the BMP): nothing in a name can end the literal, start
    a comment, or be substituted. `script_safe`: also ASCII only and no raw `;`, for scripts that the spark-sql
    shell splits on `;` and reads in the platform's encoding.
    """
    if _PLAIN.fullmatch(s) and not (script_safe and ";" in s):  # the common case; 120,000 calls at 10,000 rules
        return "'" + s + "'"
    return "'" + "".join(escape_char(ch, script_safe) for ch in s) + "'"


def escape_char(ch: str, script_safe: bool = False) -> str:
    """One character as it stands inside a Spark SQL string literal (see sql_str)."""
    if ch == "\\":
        return "\\\\"
    if ch == "'":
        return "\\'"
    if ch == "$":  # Spark substitutes ${var} in the SQL text before parsing
        return "\\u0024"
    if ch.isprintable() and ch != "\u00a0" and not (script_safe and (ch == ";" or not ch.isascii())):
        return ch
    o = ord(ch)
    if o > 0xFFFF:
        o -= 0x10000
        return "\\u%04x\\u%04x" % (0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF))
    return "\\u%04x" % o


def regex_char(ch: str) -> str:
    """One literal character in a java.util.regex pattern: ASCII letters/digits as is, others \\x{h}."""
    if ch.isascii() and (ch.isalnum() or ch == "_"):
        return ch
    return "\\x{%x}" % ord(ch)


def sql_list(values: Iterable[str]) -> str:
    return ", ".join(sql_str(v) for v in sorted(set(values)))


def in_list(expr: str, values: Iterable[str], hash_min: int | None) -> str:
    """`expr` is one of `values` (a hash lookup either way): an IN list, or from SET_MAP_MIN values a
    membership map built from one string literal.

    Spark parses and analyses every element of an IN list as a node, again in every function and query
    that inlines it: at 10,000 rules per channel that was most of CREATE FUNCTION's time. One literal split
    on NUL (which MySQL names cannot hold) is a single node. Spark (4.2+) folds the map once and looks up a
    foldable map through a prebuilt hash from `hash_min` entries on (its mapLookupHashThreshold; None: no
    such lookup, IN lists only), so smaller maps are padded with `false` entries whose keys are not values.
    Same result as IN for a non-NULL `expr` (NULL gives false, not NULL: the compiler never negates these
    tests, so no condition can tell).
    """
    vals = sorted(set(values))
    if not _hashable(vals, hash_min):
        return f"{expr} IN ({sql_list(vals)})"
    return f"coalesce({_hashed_map(vals, f'array_repeat(true, {len(vals)})', hash_min, 'false')}[{expr}], false)"


def hashed_map_get(expr: str, pairs: list[tuple[str, str]], hash_min: int | None) -> str | None:
    """`map[expr]` as one map that Spark looks up through a hash (see in_list), or None where it would not:
    fewer than SET_MAP_MIN pairs, no hash lookup in this Spark, or a NUL in a name. Callers test that `expr`
    is a key first, so the padding keys (numbers that are not keys) are never asked for."""
    if not _hashable([x for kv in pairs for x in kv], hash_min, len(pairs)):
        return None
    values = _split_literal(v for _, v in pairs)
    return f"{_hashed_map([k for k, _ in pairs], values, hash_min, 'CAST(NULL AS STRING)')}[{expr}]"


def map_get(key: str, pairs: list[tuple[str, str]], hash_min: int | None) -> str:
    """`map[key]` of `pairs`: one hashed map where Spark has them (hashed_map_get), else maps of MAP_CHUNK
    pairs, bucketed by the key's byte length."""
    hashed = hashed_map_get(key, pairs, hash_min)
    if hashed is not None:  # long: one hashed map (at 10,000 rules, 4 linear maps a row cost 0.5 s / 3M rows)
        return hashed

    def one(ps):
        return "element_at(map(" + ", ".join(f"{sql_str(k)}, {sql_str(v)}" for k, v in ps) + f"), {key})"
    if len(pairs) <= MAP_CHUNK:
        return one(pairs)
    buckets: dict = {}
    for k, v in pairs:
        buckets.setdefault(len(k.encode("utf-8")), []).append((k, v))
    whens = []
    for n, ps in sorted(buckets.items()):
        ps.sort()
        inner = [one(ps[i:i + MAP_CHUNK]) for i in range(0, len(ps), MAP_CHUNK)]
        whens.append((f"octet_length({key}) = {n}",
                      inner[0] if len(inner) == 1 else f"coalesce({', '.join(inner)})"))
    return sql_case(whens)


def _hashable(names: list[str], hash_min: int | None, n: int | None = None) -> bool:
    """A map of these (n) entries is looked up through a hash here, and its literal can hold every name."""
    return not (hash_min is None or hash_min > MAP_PAD_MAX or (len(names) if n is None else n) < codes.SET_MAP_MIN
                or any("\x00" in v for v in names))


def _split_literal(names: Iterable[str]) -> str:
    """An ARRAY<STRING> of `names` as one string literal split on NUL: one node for Spark to parse."""
    return "split('" + "\\u0000".join(sql_str(v)[1:-1] for v in names) + "', '\\u0000', -1)"


def _hashed_map(keys: list[str], values: str, hash_min: int, fill: str) -> str:
    """map_from_arrays of `keys` and the SQL array `values`, padded to `hash_min` entries (numbers that are
    not keys, mapped to `fill`) so that Spark looks it up through a hash."""
    pad = hash_min - len(keys)
    if pad <= 0:
        return f"map_from_arrays({_split_literal(keys)}, {values})"
    taken, a = set(keys), 1
    while any(str(i) in taken for i in range(a, a + pad)):
        a += pad
    return (f"map_from_arrays(concat({_split_literal(keys)}, CAST(sequence({a}, {a + pad - 1}) AS ARRAY<STRING>)), "
            f"concat({values}, array_repeat({fill}, {pad})))")


def fold_sql(expr: str, lctn: int) -> str:
    """SQL for rules.fold(expr, lctn): per-character simple lowercase, exactly as Python computes it."""
    if not lctn:
        return expr
    src, dst = fold_translation()
    return sql_case([(f"octet_length({expr}) = char_length({expr})", f"lower({expr})")],
                 f"translate({expr}, {sql_str(src)}, {sql_str(dst)})")


def masked_runs(s: str, ones: tuple, n: int) -> list[str]:
    """substring()s of `s` (length n) that skip the positions `ones`."""
    runs, start = [], 0
    for i in ones + (n,):
        if i > start:
            runs.append(f"substring({s}, {start + 1}, {i - start})")
        start = i + 1
    return runs


def latin1(expr: str) -> str:
    """The UTF-8 bytes of a string as ISO-8859-1 characters: regex `.` then matches one byte."""
    return f"decode(encode({expr}, 'UTF-8'), 'ISO-8859-1')"


def sql_junction(parts: Iterable[str], op: str, unit: str, zero: str) -> str:
    """`parts` joined by AND/OR in `coalesce(...)`, not parentheses (module docstring), with the constants
    folded: `unit` drops out, `zero` decides."""
    parts = [p for p in parts if p != unit]
    if zero in parts:
        return zero
    if not parts:
        return unit
    return parts[0] if len(parts) == 1 else "coalesce(" + f" {op} ".join(parts) + ")"


def sql_or(parts: Iterable[str]) -> str:
    return sql_junction(parts, "OR", "false", "true")


def sql_and(parts: Iterable[str]) -> str:
    return sql_junction(parts, "AND", "true", "false")


def sql_case(branches: Iterable[tuple[str, str]], default: str | None = None) -> str:
    """CASE true WHEN ... (see the module docstring) with constant conditions folded away; default None = no
    ELSE (NULL)."""
    whens = []
    for cond, val in branches:
        if cond == "false":
            continue
        if cond == "true":
            default = val
            break
        whens.append((cond, val))
    if not whens:
        return default if default is not None else "NULL"
    body = " ".join(f"WHEN {c} THEN {v}" for c, v in whens)
    return f"CASE true {body}" + (f" ELSE {default}" if default is not None else "") + " END"


