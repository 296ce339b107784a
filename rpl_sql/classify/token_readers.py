"""Token-level readers, one per family: the fallback where sqlglot cannot parse, and families it never parses."""
from __future__ import annotations

from sqlglot.tokens import TokenType

from rpl_sql.filters.evaluate import TableRef
from rpl_sql.language.lexer import pieces
from rpl_sql.classify.family import statement_family, statement_tokens
from rpl_sql.classify.info import OTHER_STATEMENT, StatementInfo, statement_info
from rpl_sql.classify.tables import (ColumnHints, delete_flags, numbered, read_only_entries, refs_to_tables,
                                     update_entries)
from rpl_sql.classify.tokens import CLAUSE_STOPS, TokenCursor, TokenTables, sqlglot_tools, word_of

# ---------------------------------------------------------------- token-level readers, one per family

INSERT_MODIFIERS = ("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE")
UPDATE_MODIFIERS = ("LOW_PRIORITY", "IGNORE")
DELETE_MODIFIERS = ("LOW_PRIORITY", "QUICK", "IGNORE")


def _tok_insert_header(toks, start, n):
    """`INSERT [modifiers] [INTO] tbl [PARTITION (...)] [(cols)]`: ((db, name, pos) or None, is_select, index of
    the body keyword)."""
    c = TokenCursor(toks, start, n)
    while c.accept(*INSERT_MODIFIERS):
        pass
    c.accept("INTO")
    ident = c.table_ident()
    if ident is None:
        return None, False, c.i
    if c.w() == "PARTITION" and c.w(1) == "(":
        c.i += 1
        c.skip_parens()
    probe = TokenTables(toks, n, frozenset())
    if c.w() == "(":
        if probe.is_query_paren(c.i + 1, n):
            return ident, True, c.i
        c.skip_parens()
    is_select = c.w() in ("SELECT", "WITH", "TABLE") or (c.w() == "(" and probe.is_query_paren(c.i + 1, n))
    return ident, is_select, c.i


def read_insert(toks, start, n, verb, ctes) -> StatementInfo:
    ident, is_select, body = _tok_insert_header(toks, start, n)
    if ident is None:
        return statement_info(verb)
    tt = TokenTables(toks, n, ctes)
    tt.scan(0, start - 1)  # a leading WITH clause
    tt.scan(body, n)
    entries = [(ident[2], TableRef(ident[0], ident[1], True))] + read_only_entries(tt.ro)
    return statement_info(verb + ("_SELECT" if is_select else ""), refs_to_tables(numbered(entries)))


#: Texts longer than this are first tried as a bulk INSERT/REPLACE ... VALUES (see `big_insert`).
BIG_TEXT = 16384
#: Texts up to this length are memoised by `classify` (the cache keeps the text as its key).
CACHE_MAX_LEN = 8192


def _safe_cut(text: str, limit: int) -> int | None:
    """The first offset >= limit that is outside any quoted token or comment (None: the text ends first)."""
    return next((s for _, s, _ in pieces(text) if s >= limit), None)


def big_insert(text: str) -> StatementInfo | None:
    """Bulk `INSERT/REPLACE ... VALUES|VALUE|SET ...` (mysqldump-style extended inserts, megabytes long):
    read only the header's tokens. The result is exact: the body can reference a table only through a
    subquery, i.e. with the word SELECT or TABLE, and when either word occurs anywhere in the body (even inside
    a string) this returns None and the statement is read in full."""
    for limit in (512, 8192):
        cut = _safe_cut(text, limit)
        if cut is None:
            return None
        try:
            toks = sqlglot_tools()[0].tokenize(text[:cut])
        except Exception:
            return None
        toks, n = statement_tokens(toks)
        if n == 0:
            return None
        family, start, extras = statement_family(toks, n)
        if family not in ("INSERT", "REPLACE") or extras.get("with"):
            return None
        ident, is_select, body = _tok_insert_header(toks, start, n)
        if ident is None or is_select:
            return None
        if body >= n - 1:  # the header may go on past the cut: read a longer prefix
            continue
        if word_of(toks[body]) not in ("VALUES", "VALUE", "SET"):
            return None
        rest = text[toks[body].end + 1:].upper()
        if "SELECT" in rest or "TABLE" in rest:
            return None
        return statement_info(family, [TableRef(ident[0], ident[1], True)])
    return None


def read_update(toks, start, n, ctes, columns: ColumnHints) -> StatementInfo:
    c = TokenCursor(toks, start, n)
    while c.accept(*UPDATE_MODIFIERS):
        pass
    tt = TokenTables(toks, n, ctes)
    tt.scan(0, start - 1)  # a leading WITH clause
    refs = tt.refs(c)
    if not refs or not c.accept("SET"):
        return statement_info("UPDATE")
    targets = []
    while c.i < n:
        parts = []
        part = c.name(after_dot=True)
        while part is not None:
            parts.append(part)
            if not c.accept("."):
                break
            part = c.name(after_dot=True)
        if not parts or not c.accept("="):
            break
        parts = [None] * (3 - len(parts[-3:])) + parts[-3:]
        targets.append((parts[0], parts[1], parts[2]))
        tt.skip_expr(c, stops=CLAUSE_STOPS)
        if not c.accept(","):
            break
    tt.scan(c.i, n)
    multi = len(refs) > 1
    entries = update_entries(refs, targets, tt.ro, columns)
    return statement_info("UPDATE_MULTI" if multi else "UPDATE", refs_to_tables(numbered(entries)))


def _tok_delete_targets(c: TokenCursor) -> list[tuple[str | None, str, int]]:
    out = []
    while True:
        ident = c.table_ident()
        if ident is None:
            break
        if c.w() == "." and c.w(1) == "*":
            c.i += 2
        out.append(ident)
        if not c.accept(","):
            break
    return out


def read_delete(toks, start, n, ctes) -> StatementInfo:
    c = TokenCursor(toks, start, n)
    while c.accept(*DELETE_MODIFIERS):
        pass
    tt = TokenTables(toks, n, ctes)
    tt.scan(0, start - 1)  # a leading WITH clause
    if c.accept("FROM"):
        save = c.i
        targets = _tok_delete_targets(c)
        if targets and c.accept("USING"):  # DELETE FROM t1, t2.* USING <join list>
            refs = tt.refs(c)
            multi = True
        else:
            c.i = save
            refs, targets, multi = tt.refs(c), [], False
    else:
        targets = _tok_delete_targets(c)
        if not targets or not c.accept("FROM"):
            return statement_info("DELETE")
        refs = tt.refs(c)
        multi = True
    if not refs:
        return statement_info("DELETE_MULTI" if multi else "DELETE")
    tt.scan(c.i, n)
    if multi:
        flags, extra = delete_flags(refs, targets)
    else:
        flags, extra = [not refs[0].derived], []
    entries = [(r.pos, TableRef(r.db, r.name, f)) for r, f in zip(refs, flags) if not r.derived] + extra
    entries += read_only_entries(tt.ro)
    return statement_info("DELETE_MULTI" if multi else "DELETE", refs_to_tables(numbered(entries)))


def read_query(toks, start, n, ctes) -> StatementInfo:
    tt = TokenTables(toks, n, ctes)
    tt.scan(start, n)
    return statement_info("OTHER", refs_to_tables(numbered(read_only_entries(tt.ro))))


def _skip_if(c: TokenCursor) -> None:
    """Skip `IF [NOT] EXISTS`."""
    if c.w() == "IF" and c.w(1) in ("EXISTS", "NOT"):
        c.i += 2 if c.w(1) == "EXISTS" else 3


def read_create_table(toks, i, n, ctes) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    _skip_if(c)
    ident = c.table_ident()
    if ident is None:
        return statement_info("CREATE_TABLE")
    entries = [(ident[2], TableRef(ident[0], ident[1], True))]
    tt = TokenTables(toks, n, ctes)
    if c.accept("LIKE") or (c.w() == "(" and c.w(1) == "LIKE" and c.accept("(") and c.accept("LIKE")):
        src = c.table_ident()
        if src is not None:
            entries.append((src[2], TableRef(src[0], src[1], False)))
        return statement_info("CREATE_TABLE", refs_to_tables(numbered(entries)))
    if c.w() == "(" and not tt.is_query_paren(c.i + 1, n):
        c.skip_parens()  # column definitions: FOREIGN KEY ... REFERENCES parents are not listed
    tt.scan(c.i, n)
    return statement_info("CREATE_TABLE", refs_to_tables(numbered(entries + read_only_entries(tt.ro))))


def read_create_view(toks, i, n, ctes) -> StatementInfo:
    command = "CREATE_VIEW"  # ALTER VIEW is SQLCOM_CREATE_VIEW too
    c = TokenCursor(toks, i, n)
    ident = c.table_ident()
    if ident is None:
        return statement_info(command)
    if c.w() == "(":
        c.skip_parens()
    tt = TokenTables(toks, n, ctes)
    tt.scan(c.i, n)
    return statement_info(command, refs_to_tables(numbered([(ident[2], TableRef(ident[0], ident[1], True))]
                                               + read_only_entries(tt.ro))))


def one_table(command: str, ident) -> StatementInfo:
    return statement_info(command, [TableRef(ident[0], ident[1], True)] if ident is not None else [])


def read_create_index(toks, i, n) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    c.name(after_dot=True)  # index name
    if c.accept("USING", "TYPE"):
        c.i += 1
    if not c.accept("ON"):
        return statement_info("CREATE_INDEX")
    return one_table("CREATE_INDEX", c.table_ident())


def read_drop_index(toks, i, n) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    c.name(after_dot=True)
    if not c.accept("ON"):
        return statement_info("DROP_INDEX")
    return one_table("DROP_INDEX", c.table_ident())


def read_drop_tables(toks, i, n, command) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    _skip_if(c)
    names = TokenTables(toks, n, frozenset()).table_list(c)
    return statement_info(command, [TableRef(db, name, True) for db, name, _ in names])


def read_alter_table(toks, i, n) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    _skip_if(c)
    ident = c.table_ident()
    if ident is None:
        return statement_info("ALTER_TABLE")
    refs = [TableRef(ident[0], ident[1], True)]
    # ALTER TABLE t EXCHANGE PARTITION p WITH TABLE u: u's rows change too (UNCONFIRMED: listed updating)
    for k in range(c.i, n - 3):
        if word_of(toks[k]) == "EXCHANGE" and word_of(toks[k + 1]) == "PARTITION":
            d = TokenCursor(toks, k + 2, n)
            d.name(after_dot=True)
            if d.accept("WITH") and d.accept("TABLE"):
                other = d.table_ident()
                if other is not None:
                    refs.append(TableRef(other[0], other[1], True))
            break
    return statement_info("ALTER_TABLE", refs)


def read_rename(toks, i, n) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    refs = []
    while True:
        a = c.table_ident()
        if a is None or not c.accept("TO"):
            break
        b = c.table_ident()
        if b is None:
            break
        refs += [TableRef(a[0], a[1], True), TableRef(b[0], b[1], True)]
        if not c.accept(","):
            break
    return statement_info("RENAME_TABLE", refs)


def read_load(toks, i, n) -> StatementInfo:
    for k in range(i, n - 2):
        if word_of(toks[k]) == "INTO" and word_of(toks[k + 1]) == "TABLE":
            return one_table("LOAD", TokenCursor(toks, k + 2, n).table_ident())
    return statement_info("LOAD")


def read_create_trigger(toks, i, n) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    _skip_if(c)
    if c.table_ident() is None:
        return statement_info("CREATE_TRIGGER")
    if not (c.accept("BEFORE", "AFTER") and c.accept("INSERT", "UPDATE", "DELETE") and c.accept("ON")):
        return statement_info("CREATE_TRIGGER")
    return one_table("CREATE_TRIGGER", c.table_ident())


def read_drop_trigger(toks, i, n) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    _skip_if(c)
    ident = c.table_ident()
    if ident is None:
        return statement_info("DROP_TRIGGER")
    return statement_info("DROP_TRIGGER", (), trigger=ident[1], trigger_db=ident[0])


def read_database(toks, i, n, command) -> StatementInfo:
    c = TokenCursor(toks, i, n)
    _skip_if(c)
    t = toks[c.i] if c.i < n else None
    name = None
    if t is not None and (t.token_type is TokenType.IDENTIFIER or
                          word_of(t) not in ("CHARACTER", "CHARSET", "DEFAULT", "COLLATE", "ENCRYPTION", "READ", "")):
        name = c.name(after_dot=True)
    if command != "ALTER_DB" and name is None:
        return OTHER_STATEMENT
    return statement_info(command, (), database=name)


def read_maintenance(toks, i, n) -> StatementInfo:
    """ANALYZE / OPTIMIZE / REPAIR [NO_WRITE_TO_BINLOG | LOCAL] TABLE t1, t2: OTHER, tables updating."""
    c = TokenCursor(toks, i, n)
    c.accept("NO_WRITE_TO_BINLOG", "LOCAL")
    if not c.accept("TABLE", "TABLES"):
        return OTHER_STATEMENT
    refs = [TableRef(db, name, True) for db, name, _ in TokenTables(toks, n, frozenset()).table_list(c)]
    return statement_info("OTHER", refs)


