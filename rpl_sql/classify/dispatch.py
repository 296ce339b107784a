"""classify(): the statement family from its leading keywords, then sqlglot's AST or the token readers."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Iterable, Mapping

from sqlglot import exp
from sqlglot.tokens import Token

from rpl_sql.filters.evaluate import DROP_TEMPORARY_IF_EXISTS
from rpl_sql.language.lexer import expand_executable_comments
from rpl_sql.classify.ast_readers import _ast_read
from rpl_sql.classify.family import _family, _statement_tokens
from rpl_sql.classify.info import _KIND_OF, _OTHER, DML, TABLE_DDL, TRANSACTION, StatementInfo, _info
from rpl_sql.classify.tables import _Columns
from rpl_sql.classify.token_readers import (
    _BIG_TEXT,
    _CACHE_MAX_LEN,
    _DELETE_MODIFIERS,
    _INSERT_MODIFIERS,
    _UPDATE_MODIFIERS,
    _big_insert,
    _one_table,
    _tok_alter_table,
    _tok_create_index,
    _tok_create_table,
    _tok_create_trigger,
    _tok_create_view,
    _tok_database,
    _tok_delete,
    _tok_drop_index,
    _tok_drop_tables,
    _tok_drop_trigger,
    _tok_insert,
    _tok_load,
    _tok_maintenance,
    _tok_query,
    _tok_rename,
    _tok_update,
)
from rpl_sql.classify.tokens import _LOCAL, _T, _cte_names_tokens, _Cur, _tools, _word

# ---------------------------------------------------------------- dispatch






# Families read with sqlglot first, and the sqlglot family each maps to.
_AST_FAMILIES = {"INSERT": "INSERT", "REPLACE": "REPLACE", "UPDATE": "UPDATE", "DELETE": "DELETE",
                 "QUERY": "QUERY", "CREATE_TABLE": "CREATE_TABLE", "CREATE_VIEW": "CREATE_VIEW",
                 "ALTER_VIEW": "CREATE_VIEW", "CREATE_INDEX": "CREATE_INDEX", "CREATE_DB": "CREATE_DB",
                 "ALTER_TABLE": "ALTER_TABLE", "DROP_TABLE": "DROP_TABLE", "DROP_VIEW": "DROP_VIEW",
                 "DROP_INDEX": "DROP_INDEX", "DROP_TRIGGER": "DROP_TRIGGER", "DROP_DB": "DROP_DB",
                 "TRUNCATE": "TRUNCATE", "SET_OPTION": "SET_OPTION"}


def _normalise_for_sqlglot(toks: list[Token], family: str, start: int) -> list[Token]:
    """Token-level rewrites of MySQL-only syntax sqlglot 30 rejects; positions are kept."""
    out = list(toks)
    verb = start - 1  # index of INSERT/REPLACE/UPDATE/DELETE
    if family in ("INSERT", "REPLACE", "UPDATE", "DELETE"):
        mods = {"INSERT": _INSERT_MODIFIERS, "REPLACE": _INSERT_MODIFIERS, "UPDATE": _UPDATE_MODIFIERS,
                "DELETE": _DELETE_MODIFIERS}[family]
        j = start
        while j < len(out) and _word(out[j]) in mods:
            j += 1
        if family == "REPLACE":
            t = out[verb]
            out[verb] = Token(_T.INSERT, "INSERT", t.line, t.col, t.start, t.end, t.comments)
        out = out[:start] + out[j:]
    if family == "DELETE":
        # `t.*` in the target list: drop `.*`
        k = 0
        res = []
        while k < len(out):
            if _word(out[k]) == "." and k + 1 < len(out) and out[k + 1].token_type is _T.STAR \
                    and (k + 2 == len(out) or _word(out[k + 2]) in (",", "FROM", "USING")):
                k += 2
                continue
            res.append(out[k])
            k += 1
        out = res
    res = []
    for k, t in enumerate(out):
        if len(t.text) == 13 and _word(t) == "STRAIGHT_JOIN":
            prev = _word(out[k - 1]) if k else ""
            if prev in ("SELECT", "DISTINCT", "ALL", "DISTINCTROW", "HIGH_PRIORITY", "SQL_NO_CACHE",
                        "SQL_CALC_FOUND_ROWS", "SQL_SMALL_RESULT", "SQL_BIG_RESULT", "SQL_BUFFER_RESULT"):
                continue
            t = Token(_T.JOIN, "JOIN", t.line, t.col, t.start, t.end, t.comments)
        res.append(t)
    return res


def _sqlglot_parse(toks: list[Token], text: str) -> exp.Expression | None:
    _LOCAL.quiet = True
    try:
        parsed = _tools()[1].parse(toks, text)
    except Exception:  # sqlglot ParseError / TokenError / RecursionError: the token reader takes over
        return None
    finally:
        _LOCAL.quiet = False
    first = parsed[0] if parsed else None
    if first is None or isinstance(first, exp.Command):
        return None
    return first


def _by_tokens(family: str, toks, start: int, n: int, extras: dict, ctes, columns: _Columns) -> StatementInfo:
    if family in ("INSERT", "REPLACE"):
        return _tok_insert(toks, start, n, family, ctes)
    if family == "UPDATE":
        return _tok_update(toks, start, n, ctes, columns)
    if family == "DELETE":
        return _tok_delete(toks, start, n, ctes)
    if family == "QUERY":
        return _tok_query(toks, start, n, ctes)
    if family == "SET_OPTION":
        return _info("SET_OPTION", _tok_query(toks, 1, n, ctes).tables)
    if family == "CREATE_TABLE":
        return _tok_create_table(toks, start, n, ctes)
    if family in ("CREATE_VIEW", "ALTER_VIEW"):
        return _tok_create_view(toks, start, n, ctes)
    if family == "CREATE_INDEX":
        return _tok_create_index(toks, start, n)
    if family == "DROP_INDEX":
        return _tok_drop_index(toks, start, n)
    if family in ("DROP_TABLE", "DROP_VIEW"):
        return _tok_drop_tables(toks, start, n, family)
    if family == "ALTER_TABLE":
        return _tok_alter_table(toks, start, n)
    if family == "TRUNCATE":
        return _one_table("TRUNCATE", _Cur(toks, start, n).table_ident())
    if family == "RENAME_TABLE":
        return _tok_rename(toks, start, n)
    if family == "LOAD":
        return _tok_load(toks, start, n)
    if family == "CREATE_TRIGGER":
        return _tok_create_trigger(toks, start, n)
    if family == "DROP_TRIGGER":
        return _tok_drop_trigger(toks, start, n)
    if family in ("CREATE_DB", "ALTER_DB", "DROP_DB"):
        return _tok_database(toks, start, n, family)
    if family == "MAINTENANCE":
        return _tok_maintenance(toks, start, n)
    if family == "RELEASE_SAVEPOINT":
        return _info("OTHER", kind=TRANSACTION)
    if family in _KIND_OF:
        return _info(family)
    return _OTHER




def _classify(sql: str, columns: _Columns, use_sqlglot: bool = True) -> StatementInfo:
    return _flag_incomplete(_read(sql, columns, use_sqlglot))


def _flag_incomplete(info: StatementInfo) -> StatementInfo:
    """A recognised table statement whose table(s) could not be read is marked method='incomplete'."""
    if info.kind in (DML, TABLE_DDL) and not info.tables and \
            (info.command != "DROP_TRIGGER" or info.trigger is None):
        return replace(info, method="incomplete")
    return info


def _read(sql: str, columns: _Columns, use_sqlglot: bool) -> StatementInfo:
    text = expand_executable_comments(sql)
    if len(text) > _BIG_TEXT:
        info = _big_insert(text)
        if info is not None:
            return info
    try:
        toks = _tools()[0].tokenize(text)
    except Exception:  # unterminated string / comment: not a statement MySQL would have logged
        return _OTHER
    toks, n = _statement_tokens(toks)
    if n == 0:
        return _OTHER
    family, start, extras = _family(toks, n)
    ctes = _cte_names_tokens(toks, n) if family in ("INSERT", "REPLACE", "UPDATE", "DELETE", "QUERY",
                                                    "CREATE_TABLE", "CREATE_VIEW", "ALTER_VIEW") else frozenset()
    if use_sqlglot and family in _AST_FAMILIES:
        stmt = toks[:n]
        if family in ("INSERT", "REPLACE", "UPDATE", "DELETE"):
            stmt = _normalise_for_sqlglot(stmt, family, start)
        node = _sqlglot_parse(stmt, text)
        _LOCAL.has_with = any(t.token_type is _T.WITH for t in stmt)
        if node is not None:
            try:
                return _fix_drop(_ast_read(node, _AST_FAMILIES[family], columns), family, extras)
            except Exception:  # _UnsupportedSyntaxError, or an AST shape this reader does not know
                pass
    return _fix_drop(_by_tokens(family, toks, start, n, extras, ctes, columns), family, extras)


def _fix_drop(info: StatementInfo, family: str, extras: dict) -> StatementInfo:
    """DROP TEMPORARY TABLE IF EXISTS is decided on the leading keywords, whichever reader listed the tables."""
    if family != "DROP_TABLE":
        return info
    cmd = DROP_TEMPORARY_IF_EXISTS if extras.get("temporary") and extras.get("if_exists") else "DROP_TABLE"
    if cmd == info.command:
        return info
    return StatementInfo(cmd, TABLE_DDL, info.tables, method=info.method)


@lru_cache(maxsize=8192)
def _classify_cached(sql: str) -> StatementInfo:
    return _classify(sql, _Columns(None))


def classify(sql: str, columns: Mapping[str, Iterable[str]] | None = None, *,
             table_map_for_update: int | None = None) -> StatementInfo:
    """Classify one statement text (a Query event's statement).

    Only multi-table UPDATE statements use the two optional hints (see the module docstring):
    `table_map_for_update` is the Query event's status variable Q_TABLE_MAP_FOR_UPDATE_CODE (9), the bitmap
    MySQL's own replica applies (bit k = k-th table of the global list); `columns` maps a table name, or
    `db.table`, to its column names, to resolve unqualified SET columns. Precedence: the bitmap (when the table
    list's positions are certain), then `columns`, then "every joined table is updating".
    Never raises: text that is not a recognisable statement is `OTHER` with no tables.
    """
    try:
        if isinstance(sql, (bytes, bytearray)):
            sql = bytes(sql).decode("utf-8", "surrogateescape")
        if not isinstance(sql, str):
            return _OTHER
        if not columns and table_map_for_update is None and len(sql) <= _CACHE_MAX_LEN:
            return _classify_cached(sql)
        return _classify(sql, _Columns(columns or None, table_map_for_update))
    except Exception:  # the never-crash guarantee; every known path returns before this
        return _OTHER
