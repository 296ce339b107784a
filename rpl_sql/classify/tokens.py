"""sqlglot's MySQL tokens, a cursor over them, and the token-level recognizer of table references."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from sqlglot.dialects.mysql import MySQL
from sqlglot.tokens import Token, TokenType

# ---------------------------------------------------------------- tokens

_DIALECT = MySQL()
TokenType = TokenType


class _Tokenizer(MySQL.Tokenizer):
    """sqlglot's MySQL tokenizer without "command" swallowing: by default it turns everything after a leading
    REPLACE / RENAME / CALL / OPTIMIZE ... into one opaque string token, hiding the table names."""

    COMMANDS: set = set()


SQLGLOT_STATE = threading.local()


class _QuietWhileClassifying(logging.Filter):
    """Drops sqlglot's "falling back to parsing as a Command" warnings raised by our own parse calls (the token
    reader handles those statements); sqlglot's logging elsewhere in the process is untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(SQLGLOT_STATE, "quiet", False)


logging.getLogger("sqlglot").addFilter(_QuietWhileClassifying())


def sqlglot_tools():
    """A tokenizer and a parser per thread (neither is thread-safe; building them costs ~25 us each)."""
    tools = getattr(SQLGLOT_STATE, "tools", None)
    if tools is None:
        tools = SQLGLOT_STATE.tools = (_Tokenizer(dialect=_DIALECT), _DIALECT.parser())
    return tools

_LITERALS = frozenset(getattr(TokenType, n) for n in ("STRING", "BIT_STRING", "HEX_STRING", "BYTE_STRING",
                                               "NATIONAL_RAW_STRING", "NATIONAL_STRING", "RAW_STRING",
                                               "HEREDOC_STRING", "UNICODE_STRING", "IDENTIFIER", "NUMBER")
                      if hasattr(TokenType, n))

# Words that cannot be an unquoted table name or alias where we read one (MySQL reserved words that matter here).
_RESERVED = frozenset("""
SELECT FROM WHERE SET JOIN INNER CROSS LEFT RIGHT NATURAL OUTER FULL STRAIGHT_JOIN ON USING ORDER GROUP LIMIT
HAVING WINDOW UNION EXCEPT INTERSECT AS INTO VALUES VALUE PARTITION USE IGNORE FORCE FOR LOCK WITH TABLE
DUAL LATERAL INDEX KEY LOW_PRIORITY HIGH_PRIORITY DELAYED QUICK REPLACE DUPLICATE AND OR NOT IN IS LIKE
BETWEEN CASE WHEN THEN ELSE END DEFAULT PROCEDURE INSERT UPDATE DELETE CREATE ALTER DROP TO IF EXISTS
LINES FIELDS COLUMNS CHARACTER CHARSET COLLATE TERMINATED ESCAPED OPTIONALLY ENCLOSED STARTING ROWS BY
""".split())
_JOIN_WORDS = frozenset({"JOIN", "INNER", "CROSS", "LEFT", "RIGHT", "NATURAL", "OUTER", "FULL", "STRAIGHT_JOIN"})
_QUERY_START = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
CLAUSE_STOPS = frozenset({"WHERE", "ORDER BY", "ORDER", "LIMIT"})
_ON_STOPS = _JOIN_WORDS | CLAUSE_STOPS | {"SET", "GROUP BY", "HAVING", "WINDOW", "UNION", "EXCEPT", "INTERSECT",
                                           "FOR", "LOCK", "INTO", "USING"}


def word_of(tok: Token) -> str:
    """Upper-cased text of an unquoted token; '' for literals and quoted identifiers."""
    if tok.token_type in _LITERALS:
        return ""
    w = tok.text.upper()
    return " ".join(w.split()) if " " in w or "\n" in w or "\t" in w or "\r" in w else w  # 'ORDER BY'...


def _is_word(text: str) -> bool:
    return bool(text) and all(ch.isalnum() or ch in "_$" for ch in text)


def _match_paren(toks: list[Token], i: int, n: int) -> int:
    """Index of the R_PAREN closing toks[i] (an L_PAREN); n if unbalanced."""
    depth = 0
    for j in range(i, n):
        tt = toks[j].token_type
        if tt is TokenType.L_PAREN:
            depth += 1
        elif tt is TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return j
    return n


class TokenCursor:
    """A cursor over toks[i:n]."""

    __slots__ = ("toks", "i", "n")

    def __init__(self, toks: list[Token], i: int = 0, n: int | None = None):
        self.toks, self.i, self.n = toks, i, len(toks) if n is None else n

    def w(self, k: int = 0) -> str | None:
        j = self.i + k
        return word_of(self.toks[j]) if j < self.n else None

    def accept(self, *words: str) -> bool:
        if self.w() in words:
            self.i += 1
            return True
        return False

    def skip_parens(self) -> None:
        """At an L_PAREN: move past its R_PAREN."""
        self.i = min(_match_paren(self.toks, self.i, self.n) + 1, self.n)

    def name(self, after_dot: bool = False) -> str | None:
        """An identifier (quoted: exact text; unquoted: as written), or None (cursor unchanged)."""
        if self.i >= self.n:
            return None
        t = self.toks[self.i]
        if t.token_type is TokenType.IDENTIFIER:
            self.i += 1
            return t.text
        if t.token_type in _LITERALS or not _is_word(t.text):
            return None
        if not after_dot and t.text.upper() in _RESERVED:
            return None
        self.i += 1
        return t.text

    def table_ident(self) -> tuple[str | None, str, int] | None:
        """`name` or `db.name`: (db, name, start offset)."""
        if self.i >= self.n:
            return None
        pos = self.toks[self.i].start
        a = self.name()
        if a is None:
            return None
        if self.w() == "." and self.i + 1 < self.n:
            save = self.i
            self.i += 1
            b = self.name(after_dot=True)
            if b is not None:
                return a, b, pos
            self.i = save
        return None, a, pos


@dataclass
class RawRef:
    """A table reference of a join list (derived: a derived table / CTE reference / table function)."""

    db: str | None
    name: str | None
    alias: str | None
    pos: float
    derived: bool = False

    @property
    def visible(self) -> str | None:
        return self.alias or self.name


def same_ci(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.lower() == b.lower()


# ---------------------------------------------------------------- the token-level recognizer


class TokenTables:
    """Reads table references from tokens; read-only tables met on the way are collected in `ro`."""

    def __init__(self, toks: list[Token], n: int, ctes: frozenset[str]):
        self.toks, self.n, self.ctes = toks, n, ctes
        self.ro: list[RawRef] = []

    def is_query_paren(self, i: int, n: int) -> bool:
        while i < n and self.toks[i].token_type is TokenType.L_PAREN:
            i += 1
        return i < n and word_of(self.toks[i]) in _QUERY_START

    def alias(self, c: TokenCursor) -> str | None:
        if c.accept("AS"):
            return c.name(after_dot=True)
        return c.name()

    def refs(self, c: TokenCursor) -> list[RawRef]:
        """A join list (MySQL `table_reference_list`), stopping at the first token that cannot continue it."""
        out: list[RawRef] = []
        if not self.factor(c, out):
            return out
        while c.i < c.n:
            w = c.w()
            if w == ",":
                c.i += 1
                if not self.factor(c, out):
                    break
                continue
            if w in _JOIN_WORDS and not (w in ("LEFT", "RIGHT") and c.w(1) == "("):
                while c.w() in _JOIN_WORDS and c.w() not in ("JOIN", "STRAIGHT_JOIN"):
                    c.i += 1
                c.accept("JOIN", "STRAIGHT_JOIN")
                if not self.factor(c, out):
                    break
                if c.accept("ON"):
                    self.skip_expr(c, stops=_ON_STOPS)
                elif c.w() == "USING" and c.w(1) == "(":
                    c.i += 1
                    c.skip_parens()
                continue
            break
        return out

    def factor(self, c: TokenCursor, out: list[RawRef]) -> bool:
        w = c.w()
        if w is None:
            return False
        if w == "(":
            j = _match_paren(self.toks, c.i, c.n)
            pos = self.toks[c.i].start
            if self.is_query_paren(c.i + 1, j):
                self.scan(c.i + 1, j)
                c.i = min(j + 1, c.n)
                alias = self.alias(c)
                if c.w() == "(":
                    c.skip_parens()
                out.append(RawRef(None, None, alias, pos, derived=True))
            else:
                out.extend(self.refs(TokenCursor(self.toks, c.i + 1, j)))
                c.i = min(j + 1, c.n)
            return True
        if w == "LATERAL":
            c.i += 1
            return self.factor(c, out)
        if w == "DUAL":
            c.i += 1
            return True
        if w == "JSON_TABLE" and c.w(1) == "(":
            pos = self.toks[c.i].start
            c.i += 1
            c.skip_parens()
            out.append(RawRef(None, None, self.alias(c), pos, derived=True))
            return True
        ident = c.table_ident()
        if ident is None:
            return False
        db, name, pos = ident
        if c.w() == "PARTITION" and c.w(1) == "(":
            c.i += 1
            c.skip_parens()
        alias = self.alias(c)
        while c.w() in ("USE", "IGNORE", "FORCE") and c.w(1) in ("INDEX", "KEY"):
            c.i += 2
            if c.accept("FOR"):
                while c.w() in ("JOIN", "ORDER", "GROUP", "BY", "ORDER BY", "GROUP BY"):
                    c.i += 1
            if c.w() == "(":
                c.skip_parens()
        if db is None and name.lower() in self.ctes:
            out.append(RawRef(None, name, alias, pos, derived=True))
        else:
            out.append(RawRef(db, name, alias, pos))
        return True

    def skip_expr(self, c: TokenCursor, stops: frozenset[str] | set[str]) -> None:
        """Skip an expression up to a top-level ',' or stop word; subqueries inside feed `ro`."""
        while c.i < c.n:
            w = c.w()
            if w == ",":
                return
            if w == "(":
                j = _match_paren(self.toks, c.i, c.n)
                self.scan(c.i + 1, j)
                c.i = min(j + 1, c.n)
                continue
            if w in stops and not (w in ("LEFT", "RIGHT") and c.w(1) == "("):
                return
            if w == ";":
                return
            c.i += 1

    def scan(self, lo: int, hi: int) -> None:
        """Collect, read-only, every table referenced by a query (FROM lists, TABLE t) within toks[lo:hi]."""
        i = lo
        while i < hi:
            w = word_of(self.toks[i])
            if w == "FROM":
                c = TokenCursor(self.toks, i + 1, hi)
                self.ro.extend(r for r in self.refs(c) if not r.derived)
                i = max(c.i, i + 1)
                continue
            if w == "TABLE":
                prev = word_of(self.toks[i - 1]) if i > lo else None
                if prev in (None, "(", "UNION", "ALL", "DISTINCT", "EXCEPT", "INTERSECT", "AS"):
                    c = TokenCursor(self.toks, i + 1, hi)
                    ident = c.table_ident()
                    if ident is not None and not (ident[0] is None and ident[1].lower() in self.ctes):
                        self.ro.append(RawRef(ident[0], ident[1], None, ident[2]))
                    i = max(c.i, i + 1)
                    continue
            i += 1

    def table_list(self, c: TokenCursor) -> list[tuple[str | None, str, int]]:
        """`t1, db.t2, ...` (DROP TABLE, ANALYZE TABLE, ...)."""
        out = []
        while True:
            ident = c.table_ident()
            if ident is None:
                break
            out.append(ident)
            if not c.accept(","):
                break
        return out


def cte_names(toks: list[Token], n: int) -> frozenset[str]:
    """Names defined by `WITH [RECURSIVE] name [(cols)] AS (...) [, ...]` anywhere in toks[:n] (lower-cased)."""
    names = set()
    for i in range(n):
        if toks[i].token_type is not TokenType.WITH:
            continue
        c = TokenCursor(toks, i + 1, n)
        c.accept("RECURSIVE")
        while True:
            name = c.name(after_dot=True)
            if name is None:
                break
            if c.w() == "(":
                c.skip_parens()
            if not (c.accept("AS") and c.w() == "("):
                break
            names.add(name.lower())
            c.skip_parens()
            if not c.accept(","):
                break
    return frozenset(names)


