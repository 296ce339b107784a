"""Token-level readers, one per family: the fallback where sqlglot cannot parse, and families it never parses."""
from __future__ import annotations

from rpl_sql.filters.evaluate import TableRef
from rpl_sql.language.lexer import pieces
from rpl_sql.classify.family import _family, _statement_tokens
from rpl_sql.classify.info import _OTHER, StatementInfo, _info
from rpl_sql.classify.tables import (
    _Columns,
    _delete_flags,
    _refs_to_tables,
    _ro_entries,
    _seq,
    _update_entries,
)
from rpl_sql.classify.tokens import _CLAUSE_STOPS, _T, _Cur, _TokenTables, _tools, _word

# ---------------------------------------------------------------- token-level readers, one per family

_INSERT_MODIFIERS = ("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE")
_UPDATE_MODIFIERS = ("LOW_PRIORITY", "IGNORE")
_DELETE_MODIFIERS = ("LOW_PRIORITY", "QUICK", "IGNORE")


def _tok_insert_header(toks, start, n):
    """`INSERT [modifiers] [INTO] tbl [PARTITION (...)] [(cols)]`: ((db, name, pos) or None, is_select, index of
    the body keyword)."""
    c = _Cur(toks, start, n)
    while c.accept(*_INSERT_MODIFIERS):
        pass
    c.accept("INTO")
    ident = c.table_ident()
    if ident is None:
        return None, False, c.i
    if c.w() == "PARTITION" and c.w(1) == "(":
        c.i += 1
        c.skip_parens()
    probe = _TokenTables(toks, n, frozenset())
    if c.w() == "(":
        if probe.is_query_paren(c.i + 1, n):
            return ident, True, c.i
        c.skip_parens()
    is_select = c.w() in ("SELECT", "WITH", "TABLE") or (c.w() == "(" and probe.is_query_paren(c.i + 1, n))
    return ident, is_select, c.i


def _tok_insert(toks, start, n, verb, ctes) -> StatementInfo:
    ident, is_select, body = _tok_insert_header(toks, start, n)
    if ident is None:
        return _info(verb)
    tt = _TokenTables(toks, n, ctes)
    tt.scan(0, start - 1)  # a leading WITH clause
    tt.scan(body, n)
    entries = [(ident[2], TableRef(ident[0], ident[1], True))] + _ro_entries(tt.ro)
    return _info(verb + ("_SELECT" if is_select else ""), _refs_to_tables(_seq(entries)))


#: Texts longer than this are first tried as a bulk INSERT/REPLACE ... VALUES (see `_big_insert`).
_BIG_TEXT = 16384
#: Texts up to this length are memoised by `classify` (the cache keeps the text as its key).
_CACHE_MAX_LEN = 8192


def _safe_cut(text: str, limit: int) -> int | None:
    """The first offset >= limit that is outside any quoted token or comment (None: the text ends first)."""
    return next((s for _, s, _ in pieces(text) if s >= limit), None)


def _big_insert(text: str) -> StatementInfo | None:
    """Bulk `INSERT/REPLACE ... VALUES|VALUE|SET ...` (mysqldump-style extended inserts, megabytes long):
    read only the header's tokens. The result is exact: the body can reference a table only through a
    subquery, i.e. with the word SELECT or TABLE, and when either word occurs anywhere in the body (even inside
    a string) this returns None and the statement is read in full."""
    for limit in (512, 8192):
        cut = _safe_cut(text, limit)
        if cut is None:
            return None
        try:
            toks = _tools()[0].tokenize(text[:cut])
        except Exception:
            return None
        toks, n = _statement_tokens(toks)
        if n == 0:
            return None
        family, start, extras = _family(toks, n)
        if family not in ("INSERT", "REPLACE") or extras.get("with"):
            return None
        ident, is_select, body = _tok_insert_header(toks, start, n)
        if ident is None or is_select:
            return None
        if body >= n - 1:  # the header may go on past the cut: read a longer prefix
            continue
        if _word(toks[body]) not in ("VALUES", "VALUE", "SET"):
            return None
        rest = text[toks[body].end + 1:].upper()
        if "SELECT" in rest or "TABLE" in rest:
            return None
        return _info(family, [TableRef(ident[0], ident[1], True)])
    return None


def _tok_update(toks, start, n, ctes, columns: _Columns) -> StatementInfo:
    c = _Cur(toks, start, n)
    while c.accept(*_UPDATE_MODIFIERS):
        pass
    tt = _TokenTables(toks, n, ctes)
    tt.scan(0, start - 1)  # a leading WITH clause
    refs = tt.refs(c)
    if not refs or not c.accept("SET"):
        return _info("UPDATE")
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
        tt.skip_expr(c, stops=_CLAUSE_STOPS)
        if not c.accept(","):
            break
    tt.scan(c.i, n)
    multi = len(refs) > 1
    entries = _update_entries(refs, targets, tt.ro, columns)
    return _info("UPDATE_MULTI" if multi else "UPDATE", _refs_to_tables(_seq(entries)))


def _tok_delete_targets(c: _Cur) -> list[tuple[str | None, str, int]]:
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


def _tok_delete(toks, start, n, ctes) -> StatementInfo:
    c = _Cur(toks, start, n)
    while c.accept(*_DELETE_MODIFIERS):
        pass
    tt = _TokenTables(toks, n, ctes)
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
            return _info("DELETE")
        refs = tt.refs(c)
        multi = True
    if not refs:
        return _info("DELETE_MULTI" if multi else "DELETE")
    tt.scan(c.i, n)
    if multi:
        flags, extra = _delete_flags(refs, targets)
    else:
        flags, extra = [not refs[0].derived], []
    entries = [(r.pos, TableRef(r.db, r.name, f)) for r, f in zip(refs, flags) if not r.derived] + extra
    entries += _ro_entries(tt.ro)
    return _info("DELETE_MULTI" if multi else "DELETE", _refs_to_tables(_seq(entries)))


def _tok_query(toks, start, n, ctes) -> StatementInfo:
    tt = _TokenTables(toks, n, ctes)
    tt.scan(start, n)
    return _info("OTHER", _refs_to_tables(_seq(_ro_entries(tt.ro))))


def _skip_if(c: _Cur) -> None:
    """Skip `IF [NOT] EXISTS`."""
    if c.w() == "IF" and c.w(1) in ("EXISTS", "NOT"):
        c.i += 2 if c.w(1) == "EXISTS" else 3


def _tok_create_table(toks, i, n, ctes) -> StatementInfo:
    c = _Cur(toks, i, n)
    _skip_if(c)
    ident = c.table_ident()
    if ident is None:
        return _info("CREATE_TABLE")
    entries = [(ident[2], TableRef(ident[0], ident[1], True))]
    tt = _TokenTables(toks, n, ctes)
    if c.accept("LIKE") or (c.w() == "(" and c.w(1) == "LIKE" and c.accept("(") and c.accept("LIKE")):
        src = c.table_ident()
        if src is not None:
            entries.append((src[2], TableRef(src[0], src[1], False)))
        return _info("CREATE_TABLE", _refs_to_tables(_seq(entries)))
    if c.w() == "(" and not tt.is_query_paren(c.i + 1, n):
        c.skip_parens()  # column definitions: FOREIGN KEY ... REFERENCES parents are not listed
    tt.scan(c.i, n)
    return _info("CREATE_TABLE", _refs_to_tables(_seq(entries + _ro_entries(tt.ro))))


def _tok_create_view(toks, i, n, ctes) -> StatementInfo:
    command = "CREATE_VIEW"  # ALTER VIEW is SQLCOM_CREATE_VIEW too
    c = _Cur(toks, i, n)
    ident = c.table_ident()
    if ident is None:
        return _info(command)
    if c.w() == "(":
        c.skip_parens()
    tt = _TokenTables(toks, n, ctes)
    tt.scan(c.i, n)
    return _info(command, _refs_to_tables(_seq([(ident[2], TableRef(ident[0], ident[1], True))]
                                               + _ro_entries(tt.ro))))


def _one_table(command: str, ident) -> StatementInfo:
    return _info(command, [TableRef(ident[0], ident[1], True)] if ident is not None else [])


def _tok_create_index(toks, i, n) -> StatementInfo:
    c = _Cur(toks, i, n)
    c.name(after_dot=True)  # index name
    if c.accept("USING", "TYPE"):
        c.i += 1
    if not c.accept("ON"):
        return _info("CREATE_INDEX")
    return _one_table("CREATE_INDEX", c.table_ident())


def _tok_drop_index(toks, i, n) -> StatementInfo:
    c = _Cur(toks, i, n)
    c.name(after_dot=True)
    if not c.accept("ON"):
        return _info("DROP_INDEX")
    return _one_table("DROP_INDEX", c.table_ident())


def _tok_drop_tables(toks, i, n, command) -> StatementInfo:
    c = _Cur(toks, i, n)
    _skip_if(c)
    names = _TokenTables(toks, n, frozenset()).table_list(c)
    return _info(command, [TableRef(db, name, True) for db, name, _ in names])


def _tok_alter_table(toks, i, n) -> StatementInfo:
    c = _Cur(toks, i, n)
    _skip_if(c)
    ident = c.table_ident()
    if ident is None:
        return _info("ALTER_TABLE")
    refs = [TableRef(ident[0], ident[1], True)]
    # ALTER TABLE t EXCHANGE PARTITION p WITH TABLE u: u's rows change too (UNCONFIRMED: listed updating)
    for k in range(c.i, n - 3):
        if _word(toks[k]) == "EXCHANGE" and _word(toks[k + 1]) == "PARTITION":
            d = _Cur(toks, k + 2, n)
            d.name(after_dot=True)
            if d.accept("WITH") and d.accept("TABLE"):
                other = d.table_ident()
                if other is not None:
                    refs.append(TableRef(other[0], other[1], True))
            break
    return _info("ALTER_TABLE", refs)


def _tok_rename(toks, i, n) -> StatementInfo:
    c = _Cur(toks, i, n)
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
    return _info("RENAME_TABLE", refs)


def _tok_load(toks, i, n) -> StatementInfo:
    for k in range(i, n - 2):
        if _word(toks[k]) == "INTO" and _word(toks[k + 1]) == "TABLE":
            return _one_table("LOAD", _Cur(toks, k + 2, n).table_ident())
    return _info("LOAD")


def _tok_create_trigger(toks, i, n) -> StatementInfo:
    c = _Cur(toks, i, n)
    _skip_if(c)
    if c.table_ident() is None:
        return _info("CREATE_TRIGGER")
    if not (c.accept("BEFORE", "AFTER") and c.accept("INSERT", "UPDATE", "DELETE") and c.accept("ON")):
        return _info("CREATE_TRIGGER")
    return _one_table("CREATE_TRIGGER", c.table_ident())


def _tok_drop_trigger(toks, i, n) -> StatementInfo:
    c = _Cur(toks, i, n)
    _skip_if(c)
    ident = c.table_ident()
    if ident is None:
        return _info("DROP_TRIGGER")
    return _info("DROP_TRIGGER", (), trigger=ident[1], trigger_db=ident[0])


def _tok_database(toks, i, n, command) -> StatementInfo:
    c = _Cur(toks, i, n)
    _skip_if(c)
    t = toks[c.i] if c.i < n else None
    name = None
    if t is not None and (t.token_type is _T.IDENTIFIER or
                          _word(t) not in ("CHARACTER", "CHARSET", "DEFAULT", "COLLATE", "ENCRYPTION", "READ", "")):
        name = c.name(after_dot=True)
    if command != "ALTER_DB" and name is None:
        return _OTHER
    return _info(command, (), database=name)


def _tok_maintenance(toks, i, n) -> StatementInfo:
    """ANALYZE / OPTIMIZE / REPAIR [NO_WRITE_TO_BINLOG | LOCAL] TABLE t1, t2: OTHER, tables updating."""
    c = _Cur(toks, i, n)
    c.accept("NO_WRITE_TO_BINLOG", "LOCAL")
    if not c.accept("TABLE", "TABLES"):
        return _OTHER
    refs = [TableRef(db, name, True) for db, name, _ in _TokenTables(toks, n, frozenset()).table_list(c)]
    return _info("OTHER", refs)


