"""classify(): the statement family from its leading keywords, then sqlglot's AST or the token readers."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Iterable, Mapping

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from rpl_sql.filters.evaluate import DROP_TEMPORARY_IF_EXISTS
from rpl_sql.language.lexer import expand_executable_comments
from rpl_sql.classify.ast_readers import read_ast
from rpl_sql.classify.family import statement_family, statement_tokens
from rpl_sql.classify.info import KIND_OF, OTHER_STATEMENT, DML, TABLE_DDL, TRANSACTION, StatementInfo, statement_info
from rpl_sql.classify.tables import ColumnHints
from rpl_sql.classify.token_readers import (
    BIG_TEXT,
    CACHE_MAX_LEN,
    DELETE_MODIFIERS,
    INSERT_MODIFIERS,
    UPDATE_MODIFIERS,
    big_insert,
    one_table,
    read_alter_table,
    read_create_index,
    read_create_table,
    read_create_trigger,
    read_create_view,
    read_database,
    read_delete,
    read_drop_index,
    read_drop_tables,
    read_drop_trigger,
    read_insert,
    read_load,
    read_maintenance,
    read_query,
    read_rename,
    read_update,
)
from rpl_sql.classify.tokens import SQLGLOT_STATE, cte_names, TokenCursor, sqlglot_tools, word_of

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
        mods = {"INSERT": INSERT_MODIFIERS, "REPLACE": INSERT_MODIFIERS, "UPDATE": UPDATE_MODIFIERS,
                "DELETE": DELETE_MODIFIERS}[family]
        j = start
        while j < len(out) and word_of(out[j]) in mods:
            j += 1
        if family == "REPLACE":
            t = out[verb]
            out[verb] = Token(TokenType.INSERT, "INSERT", t.line, t.col, t.start, t.end, t.comments)
        out = out[:start] + out[j:]
    if family == "DELETE":
        # `t.*` in the target list: drop `.*`
        k = 0
        res = []
        while k < len(out):
            if word_of(out[k]) == "." and k + 1 < len(out) and out[k + 1].token_type is TokenType.STAR \
                    and (k + 2 == len(out) or word_of(out[k + 2]) in (",", "FROM", "USING")):
                k += 2
                continue
            res.append(out[k])
            k += 1
        out = res
    res = []
    for k, t in enumerate(out):
        if len(t.text) == 13 and word_of(t) == "STRAIGHT_JOIN":
            prev = word_of(out[k - 1]) if k else ""
            if prev in ("SELECT", "DISTINCT", "ALL", "DISTINCTROW", "HIGH_PRIORITY", "SQL_NO_CACHE",
                        "SQL_CALC_FOUND_ROWS", "SQL_SMALL_RESULT", "SQL_BIG_RESULT", "SQL_BUFFER_RESULT"):
                continue
            t = Token(TokenType.JOIN, "JOIN", t.line, t.col, t.start, t.end, t.comments)
        res.append(t)
    return res


def _sqlglot_parse(toks: list[Token], text: str) -> exp.Expression | None:
    SQLGLOT_STATE.quiet = True
    try:
        parsed = sqlglot_tools()[1].parse(toks, text)
    except Exception:  # sqlglot ParseError / TokenError / RecursionError: the token reader takes over
        return None
    finally:
        SQLGLOT_STATE.quiet = False
    first = parsed[0] if parsed else None
    if first is None or isinstance(first, exp.Command):
        return None
    return first


# The token reader of each family: (toks, start, n, family, ctes, hints) -> StatementInfo.
_TOKEN_READERS = {
    **dict.fromkeys(("INSERT", "REPLACE"), lambda t, s, n, f, c, h: read_insert(t, s, n, f, c)),
    "UPDATE": lambda t, s, n, f, c, h: read_update(t, s, n, c, h),
    "DELETE": lambda t, s, n, f, c, h: read_delete(t, s, n, c),
    "QUERY": lambda t, s, n, f, c, h: read_query(t, s, n, c),
    "SET_OPTION": lambda t, s, n, f, c, h: statement_info("SET_OPTION", read_query(t, 1, n, c).tables),
    "CREATE_TABLE": lambda t, s, n, f, c, h: read_create_table(t, s, n, c),
    **dict.fromkeys(("CREATE_VIEW", "ALTER_VIEW"), lambda t, s, n, f, c, h: read_create_view(t, s, n, c)),
    "CREATE_INDEX": lambda t, s, n, f, c, h: read_create_index(t, s, n),
    "DROP_INDEX": lambda t, s, n, f, c, h: read_drop_index(t, s, n),
    **dict.fromkeys(("DROP_TABLE", "DROP_VIEW"), lambda t, s, n, f, c, h: read_drop_tables(t, s, n, f)),
    "ALTER_TABLE": lambda t, s, n, f, c, h: read_alter_table(t, s, n),
    "TRUNCATE": lambda t, s, n, f, c, h: one_table("TRUNCATE", TokenCursor(t, s, n).table_ident()),
    "RENAME_TABLE": lambda t, s, n, f, c, h: read_rename(t, s, n),
    "LOAD": lambda t, s, n, f, c, h: read_load(t, s, n),
    "CREATE_TRIGGER": lambda t, s, n, f, c, h: read_create_trigger(t, s, n),
    "DROP_TRIGGER": lambda t, s, n, f, c, h: read_drop_trigger(t, s, n),
    **dict.fromkeys(("CREATE_DB", "ALTER_DB", "DROP_DB"), lambda t, s, n, f, c, h: read_database(t, s, n, f)),
    "MAINTENANCE": lambda t, s, n, f, c, h: read_maintenance(t, s, n),
    "RELEASE_SAVEPOINT": lambda t, s, n, f, c, h: statement_info("OTHER", kind=TRANSACTION),
}


def _by_tokens(family: str, toks, start: int, n: int, ctes, hints: ColumnHints) -> StatementInfo:
    reader = _TOKEN_READERS.get(family)
    if reader is not None:
        return reader(toks, start, n, family, ctes, hints)
    return statement_info(family) if family in KIND_OF else OTHER_STATEMENT


def classify_with_hints(sql: str, columns: ColumnHints, use_sqlglot: bool = True) -> StatementInfo:
    return _flag_incomplete(_read(sql, columns, use_sqlglot))


def _flag_incomplete(info: StatementInfo) -> StatementInfo:
    """A recognised table statement whose table(s) could not be read is marked method='incomplete'."""
    if info.kind in (DML, TABLE_DDL) and not info.tables and \
            (info.command != "DROP_TRIGGER" or info.trigger is None):
        return replace(info, method="incomplete")
    return info


def _read(sql: str, columns: ColumnHints, use_sqlglot: bool) -> StatementInfo:
    text = expand_executable_comments(sql)
    if len(text) > BIG_TEXT:
        info = big_insert(text)
        if info is not None:
            return info
    try:
        toks = sqlglot_tools()[0].tokenize(text)
    except Exception:  # unterminated string / comment: not a statement MySQL would have logged
        return OTHER_STATEMENT
    toks, n = statement_tokens(toks)
    if n == 0:
        return OTHER_STATEMENT
    family, start, extras = statement_family(toks, n)
    ctes = cte_names(toks, n) if family in ("INSERT", "REPLACE", "UPDATE", "DELETE", "QUERY",
                                                    "CREATE_TABLE", "CREATE_VIEW", "ALTER_VIEW") else frozenset()
    if use_sqlglot and family in _AST_FAMILIES:
        stmt = toks[:n]
        if family in ("INSERT", "REPLACE", "UPDATE", "DELETE"):
            stmt = _normalise_for_sqlglot(stmt, family, start)
        node = _sqlglot_parse(stmt, text)
        SQLGLOT_STATE.has_with = any(t.token_type is TokenType.WITH for t in stmt)
        if node is not None:
            try:
                return _fix_drop(read_ast(node, _AST_FAMILIES[family], columns), family, extras)
            except Exception:  # _UnsupportedSyntaxError, or an AST shape this reader does not know
                pass
    return _fix_drop(_by_tokens(family, toks, start, n, ctes, columns), family, extras)


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
    return classify_with_hints(sql, ColumnHints(None))


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
            return OTHER_STATEMENT
        if not columns and table_map_for_update is None and len(sql) <= CACHE_MAX_LEN:
            return _classify_cached(sql)
        return classify_with_hints(sql, ColumnHints(columns or None, table_map_for_update))
    except Exception:  # the never-crash guarantee; every known path returns before this
        return OTHER_STATEMENT
