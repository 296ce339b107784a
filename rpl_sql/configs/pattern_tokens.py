"""Name patterns across formats: MySQL's LIKE (`%`, `_`, `\\` escapes), DMS's (`%`, `_`, `[set]`) and Java
regular expressions (Debezium), over one token form, with a witness finder for the overlap of two patterns.

Tokens: ('lit', c), ('one',), ('any',), ('set', chars). Matching here is per character; MySQL's byte-wise
`_` under lower_case_table_names=0 is handled where it matters (`regex`).
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache
from itertools import product

from rpl_sql.filters.rules import fold, fold_translation, like_tokens

ANY, ONE = ("any",), ("one",)


def mysql_tokens(pattern: str) -> list[tuple]:
    return [("lit", c) if k == "lit" else ANY if k == "any" else ONE for k, c in like_tokens(pattern)]


def mysql_text(tokens: list[tuple]) -> str:
    """A MySQL wild pattern for tokens without sets: literal `\\`, `%` and `_` escaped."""
    out = []
    for t in tokens:
        if t[0] == "lit":
            out.append("\\" + t[1] if t[1] in "\\%_" else t[1])
        else:
            out.append("%" if t == ANY else "_")
    return "".join(out)


def dms_tokens(pattern: str) -> list[tuple]:
    """DMS's wildcards: `%`, `_`, `[abc]`, `[a-d]` (so `[_]` is a literal underscore); an unclosed `[` is literal."""
    out: list[tuple] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        end = pattern.find("]", i + 2) if c == "[" else -1
        if c == "[" and end != -1:
            body, chars = pattern[i + 1:end], set()
            j = 0
            while j < len(body):
                if j + 2 < len(body) and body[j + 1] == "-":
                    chars.update(chr(x) for x in range(ord(body[j]), ord(body[j + 2]) + 1))
                    j += 3
                else:
                    chars.add(body[j])
                    j += 1
            out.append(("lit", next(iter(chars))) if len(chars) == 1 else ("set", frozenset(chars)))
            i = end + 1
            continue
        out.append(ANY if c == "%" else ONE if c == "_" else ("lit", c))
        i += 1
    return out


def dms_text(tokens: list[tuple], lctn: int = 0) -> str:
    """A DMS pattern; with lower_case_table_names set, each letter becomes the set of its case variants."""
    out = []
    for t in tokens:
        if t == ANY:
            out.append("%")
        elif t == ONE:
            out.append("_")
        else:
            variants = sorted(case_variants(t[1])) if lctn else [t[1]]
            if len(variants) > 1:
                out.append("[" + "".join(variants) + "]")
            else:
                c = variants[0]
                out.append(f"[{c}]" if c in "%_[" else c)
    return "".join(out)


def expand_sets(tokens: list[tuple], limit: int = 64) -> list[list[tuple]] | None:
    """The set-free token lists a pattern with `[sets]` stands for, or None past `limit` of them."""
    choices = [sorted(t[1]) if t[0] == "set" else [None] for t in tokens]
    count = 1
    for c in choices:
        count *= len(c)
    if count > limit:
        return None
    out = []
    for pick in product(*choices):
        out.append([("lit", p) if p is not None else t for t, p in zip(tokens, pick)])
    return out


def literal_tokens(text: str) -> list[tuple]:
    """The pattern that matches exactly `text`."""
    return [("lit", c) for c in text]


def matches(tokens: list[tuple], text: str, fold_lctn: int = 0) -> bool:
    """Whether the pattern matches the whole of `text` (per character, folded when `fold_lctn`)."""
    return witness(tokens, literal_tokens(text), fold_lctn) is not None


def literal(tokens: list[tuple]) -> str | None:
    """The one string a wildcard-free pattern matches, else None."""
    if all(t[0] == "lit" for t in tokens):
        return "".join(t[1] for t in tokens)
    return None


def split_at_dot(tokens: list[tuple]) -> tuple[list[tuple], list[tuple]] | None:
    """(database part, table part) of a `db.table` pattern with exactly one literal dot, else None."""
    dots = [i for i, t in enumerate(tokens) if t == ("lit", ".")]
    if len(dots) != 1:
        return None
    return tokens[:dots[0]], tokens[dots[0] + 1:]


def _chars(t: tuple) -> frozenset | None:
    """The characters one step of token `t` may consume (None: any character)."""
    return frozenset(t[1]) if t[0] == "set" else frozenset((t[1],)) if t[0] == "lit" else None


def witness(a: list[tuple], b: list[tuple], fold_lctn: int = 0) -> str | None:
    """A string both patterns match (per character, names folded when `fold_lctn`), or None if none exists."""
    def step(toks, i):  # (chars consumed, next index) moves from position i
        if i >= len(toks):
            return []
        t = toks[i]
        if t == ANY:
            return [(None, i)]
        return [(_chars(t), i + 1)]

    def norm(cs):
        return None if cs is None else frozenset(fold(c, fold_lctn) for c in cs)

    start = (0, 0)
    seen = {start: ""}
    queue = deque([start])
    while queue:
        i, j = queue.popleft()
        text = seen[(i, j)]
        if i == len(a) and j == len(b):
            return text
        nexts = []
        if i < len(a) and a[i] == ANY:
            nexts.append(((i + 1, j), ""))
        if j < len(b) and b[j] == ANY:
            nexts.append(((i, j + 1), ""))
        for ca, ni in step(a, i):
            for cb, nj in step(b, j):
                ca_n, cb_n = norm(ca), norm(cb)
                if ca_n is None and cb_n is None:
                    ch = "x"
                elif ca_n is None or cb_n is None:
                    options = ca if cb_n is None else cb
                    ch = min(options)
                else:
                    common = ca_n & cb_n
                    if not common:
                        continue
                    ch = min(c for c in (ca or ()) if fold(c, fold_lctn) in common)
                nexts.append(((ni, nj), ch))
        for state, ch in nexts:
            if state not in seen:
                seen[state] = text + ch
                queue.append(state)
    return None


def examples(tokens: list[tuple]) -> list[str]:
    """A few strings the pattern matches: wildcards as nothing, one character, and several."""
    out = []
    for any_text, one_text in (("", "x"), ("x", "Y"), ("ab_%", "_")):
        s = []
        for t in tokens:
            s.append(any_text if t == ANY else one_text if t == ONE else min(t[1]) if t[0] == "set" else t[1])
        out.append("".join(s))
    return out


@lru_cache(maxsize=1)
def _fold_classes() -> dict[str, frozenset[str]]:
    src, dst = fold_translation()
    classes: dict[str, set[str]] = {}
    for s, d in zip(src, dst):
        classes.setdefault(d, {d}).add(s)
    return {k: frozenset(v) for k, v in classes.items()}


def case_variants(c: str) -> frozenset[str]:
    """Every character MySQL's lower_case_table_names=1/2 comparison takes as equal to `c`."""
    return _fold_classes().get(fold(c, 1), frozenset((fold(c, 1),)))
