"""LIKE patterns as tokens, their literal and prefix/suffix forms, and trie-factored anchored regexes."""
from __future__ import annotations

from typing import Sequence

from rpl_sql.compile.literals import regex_char
from rpl_sql.filters.rules import fold, like_tokens

ANY, ONE = 0, 1  # wildcard tokens; a literal token is the 1-character string itself

# ---------------------------------------------------------------- LIKE patterns

def pattern_tokens(pattern: str, lctn: int) -> tuple:
    """MySQL LIKE tokens exactly as rules._like_regex reads them, with runs of `%` collapsed."""
    out: list = []
    for kind, ch in like_tokens(fold(pattern, lctn)):
        if kind == "any":
            if not out or out[-1] != ANY:
                out.append(ANY)
        else:
            out.append(ONE if kind == "one" else ch)
    return tuple(out)


def literal_of(toks: Sequence) -> str | None:
    """The literal text of a wildcard-free token run, else None."""
    if ANY not in toks and ONE not in toks:
        return "".join(toks)
    return None


def name_form(toks: tuple) -> tuple:
    """Classify a pattern over one dot-free name: ('exact', s), ('all',), ('prefix', p), ('suffix', s) need
    no regex; ('regex',) otherwise."""
    lit = literal_of(toks)
    if lit is not None:
        return ("exact", lit)
    if toks == (ANY,):
        return ("all",)
    if len(toks) >= 2 and toks[-1] == ANY and literal_of(toks[:-1]) is not None:
        return ("prefix", literal_of(toks[:-1]))
    if len(toks) >= 2 and toks[0] == ANY and literal_of(toks[1:]) is not None:
        return ("suffix", literal_of(toks[1:]))
    return ("regex",)


def trie_regex(seqs: tuple[tuple, ...], byte_mode: bool) -> str:
    """One anchored regex matching exactly the token sequences, factored as a trie (shared prefixes once).

    byte_mode: literals become their UTF-8 bytes as latin-1 characters (subject is latin1(key)), so `_`
    (regex `.`) matches one byte as in MySQL's binary comparison.
    """
    root: dict = {}
    for seq in seqs:
        node = root
        for t in seq:
            if isinstance(t, str) and byte_mode:
                for b in t.encode("utf-8"):
                    node = node.setdefault(chr(b), {})
            else:
                node = node.setdefault(t, {})
        node[None] = {}

    def tok(t) -> str:
        return ".*" if t == ANY else "." if t == ONE else regex_char(t)

    def emit(node: dict) -> str:
        out = []
        while True:  # chains of single children: no group needed
            edges = [k for k in node if k is not None]
            if len(edges) == 1 and None not in node:
                out.append(tok(edges[0]))
                node = node[edges[0]]
                continue
            break
        edges = [k for k in node if k is not None]
        if edges:
            alts = [tok(k) + emit(node[k]) for k in edges]
            body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
            if len(alts) == 1 and len(body) > 1:
                body = "(?:" + body + ")"
            out.append(body + ("?" if None in node else ""))
        return "".join(out)

    return "(?s)\\A(?:" + emit(root) + ")\\z"


