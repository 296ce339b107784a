"""The statement family from its leading keywords (after DEFINER= and the like), and the tokens to read."""
from __future__ import annotations

from sqlglot.tokens import Token, TokenType

from rpl_sql.classify.tokens import TokenCursor, TokenTables


def _skip_definer(c: TokenCursor) -> None:
    """CREATE/ALTER prefixes: OR REPLACE, ALGORITHM = x, DEFINER = user, SQL SECURITY x."""
    while c.i < c.n:
        w = c.w()
        if w == "OR" and c.w(1) == "REPLACE":
            c.i += 2
        elif w == "ALGORITHM" and c.w(1) == "=":
            c.i += 3
        elif w == "SQL SECURITY":
            c.i += 2
        elif w == "DEFINER" and c.w(1) == "=":
            c.i += 3
            if c.w() == "(":
                c.skip_parens()
            if c.i < c.n and c.toks[c.i].token_type is TokenType.PARAMETER:  # user@host
                c.i += 2
        else:
            return


def statement_family(toks: list[Token], n: int) -> tuple[str, int, dict]:
    """(family, index after the leading keywords, extras) from the leading keywords."""
    c = TokenCursor(toks, 0, n)
    w = c.w()
    nxt = c.w(1)
    if w in ("INSERT", "REPLACE"):
        return w, 1, {}
    if w in ("UPDATE", "DELETE"):
        return w, 1, {}
    if w == "WITH":
        # skip the WITH clause to the statement it prefixes
        c.i = 1
        c.accept("RECURSIVE")
        while c.i < n:
            if c.name(after_dot=True) is None:
                break
            if c.w() == "(":
                c.skip_parens()
            if not c.accept("AS") or c.w() != "(":
                break
            c.skip_parens()
            if not c.accept(","):
                break
        main = c.w()
        if main in ("UPDATE", "DELETE", "INSERT", "REPLACE"):
            return main, c.i + 1, {"with": True}
        return "QUERY", 0, {}
    if w in ("SELECT", "TABLE", "VALUES") or (w == "(" and TokenTables(toks, n, frozenset()).is_query_paren(0, n)):
        return "QUERY", 0, {}
    if w == "BEGIN" and (nxt in (None, "WORK", ";")):
        return "BEGIN", n, {}
    if w == "START" and nxt == "TRANSACTION":
        return "BEGIN", n, {}
    if w == "COMMIT":
        return "COMMIT", n, {}
    if w == "ROLLBACK":
        c.i = 1
        c.accept("WORK")
        return ("ROLLBACK_TO_SAVEPOINT" if c.w() == "TO" else "ROLLBACK"), n, {}
    if w == "SAVEPOINT":
        return "SAVEPOINT", n, {}
    if w == "RELEASE" and nxt == "SAVEPOINT":
        return "RELEASE_SAVEPOINT", n, {}
    if w == "XA":
        return {"START": "XA_START", "BEGIN": "XA_START", "END": "XA_END", "PREPARE": "XA_PREPARE",
                "COMMIT": "XA_COMMIT", "ROLLBACK": "XA_ROLLBACK"}.get(nxt or "", "OTHER"), n, {}
    if w == "SET":
        if nxt in ("PASSWORD", "ROLE") or (nxt == "DEFAULT" and c.w(2) == "ROLE") or \
                (nxt == "RESOURCE" and c.w(2) == "GROUP"):
            return "OTHER", n, {}
        return "SET_OPTION", 0, {}
    if w == "TRUNCATE":
        c.i = 1
        c.accept("TABLE")
        return "TRUNCATE", c.i, {}
    if w == "RENAME" and nxt in ("TABLE", "TABLES"):
        return "RENAME_TABLE", 2, {}
    if w == "LOAD" and nxt in ("DATA", "XML"):
        return "LOAD", 2, {}
    if w in ("ANALYZE", "OPTIMIZE", "REPAIR"):
        return "MAINTENANCE", 1, {}
    if w == "CREATE":
        c.i = 1
        _skip_definer(c)
        temporary = c.accept("TEMPORARY")
        if c.accept("TABLE"):
            return "CREATE_TABLE", c.i, {"temporary": temporary}
        if c.accept("VIEW"):
            return "CREATE_VIEW", c.i, {}
        c.accept("UNIQUE", "FULLTEXT", "SPATIAL")
        if c.accept("INDEX"):
            return "CREATE_INDEX", c.i, {}
        if c.accept("TRIGGER"):
            return "CREATE_TRIGGER", c.i, {}
        if c.accept("DATABASE", "SCHEMA"):
            return "CREATE_DB", c.i, {}
        return "OTHER", n, {}
    if w == "ALTER":
        c.i = 1
        c.accept("ONLINE", "OFFLINE")
        c.accept("IGNORE")
        if c.accept("TABLE"):
            return "ALTER_TABLE", c.i, {}
        if c.accept("DATABASE", "SCHEMA"):
            return "ALTER_DB", c.i, {}
        _skip_definer(c)
        if c.accept("VIEW"):
            return "ALTER_VIEW", c.i, {}
        return "OTHER", n, {}
    if w == "DROP":
        c.i = 1
        temporary = c.accept("TEMPORARY")
        if c.accept("TABLE", "TABLES"):
            return "DROP_TABLE", c.i, {"temporary": temporary, "if_exists": c.w() == "IF" and c.w(1) == "EXISTS"}
        if temporary:
            return "OTHER", n, {}
        if c.accept("VIEW"):
            return "DROP_VIEW", c.i, {}
        c.accept("ONLINE", "OFFLINE")
        if c.accept("INDEX"):
            return "DROP_INDEX", c.i, {}
        if c.accept("TRIGGER"):
            return "DROP_TRIGGER", c.i, {}
        if c.accept("DATABASE", "SCHEMA"):
            return "DROP_DB", c.i, {}
        return "OTHER", n, {}
    return "OTHER", n, {}


def statement_tokens(toks: list[Token]) -> tuple[list[Token], int]:
    """Drop optimizer hints (`/*+ ... */`) and leading semicolons; the first statement ends at index n."""
    toks = [t for t in toks if t.token_type is not TokenType.HINT]
    lead = 0
    while lead < len(toks) and toks[lead].token_type is TokenType.SEMICOLON:
        lead += 1
    toks = toks[lead:]
    return toks, next((k for k, t in enumerate(toks) if t.token_type is TokenType.SEMICOLON), len(toks))
