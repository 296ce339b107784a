"""Readers of sqlglot's AST, one per statement family sqlglot's MySQL dialect parses."""
from __future__ import annotations

from typing import Iterable

from sqlglot import exp

from rpl_sql.errors import RplSqlError
from rpl_sql.filters.evaluate import TableRef
from rpl_sql.classify.info import StatementInfo, statement_info
from rpl_sql.classify.tables import (ColumnHints, delete_flags, numbered, read_only_entries, refs_to_tables,
                                     update_entries)
from rpl_sql.classify.tokens import SQLGLOT_STATE, RawRef

# ---------------------------------------------------------------- sqlglot AST readers


class _UnsupportedSyntaxError(RplSqlError):
    """The AST is not one we read: use the token recognizer."""


def _ident_pos(node: exp.Expression) -> float:
    for part in ("db", "this"):
        ident = node.args.get(part)
        if isinstance(ident, exp.Identifier):
            start = ident.meta.get("start")
            if start is not None:
                return float(start)
    return float("inf")


def _ast_ref(t: exp.Table, ctes: frozenset[str]) -> RawRef:
    pos = _ident_pos(t)
    alias = t.alias or None
    if not isinstance(t.this, exp.Identifier):  # table function
        return RawRef(None, None, alias, pos, derived=True)
    db = t.args.get("db")
    dbname = db.this if isinstance(db, exp.Identifier) else None
    name = t.this.this
    if dbname is None and name.lower() in ctes:
        return RawRef(None, name, alias, pos, derived=True)
    return RawRef(dbname, name, alias, pos)


def _ast_from_items(node: exp.Expression | None, ctes: frozenset[str], out: list[tuple[RawRef, exp.Expression]]):
    """The entries of a join tree in order: (ref, node). Nested join lists `(t8, t9)` are flattened."""
    if node is None:
        return
    if isinstance(node, exp.Join):
        _ast_from_items(node.this, ctes, out)
        return
    if isinstance(node, exp.Table):
        out.append((_ast_ref(node, ctes), node))
    elif isinstance(node, exp.Subquery) and isinstance(node.this, (exp.Table, exp.Subquery)) \
            and not node.alias:
        _ast_from_items(node.this, ctes, out)  # a parenthesised join nest, not a derived table
    elif isinstance(node, exp.Subquery):
        out.append((RawRef(None, None, node.alias or None, _first_pos(node), derived=True), node))
    else:
        out.append((RawRef(None, None, None, _first_pos(node), derived=True), node))
    for j in node.args.get("joins") or ():
        _ast_from_items(j, ctes, out)


def _first_pos(node: exp.Expression) -> float:
    best = float("inf")
    for t in node.find_all(exp.Table):
        best = min(best, _ident_pos(t))
    return best


def _ast_ctes(root: exp.Expression) -> frozenset[str]:
    if not getattr(SQLGLOT_STATE, "has_with", True):  # no WITH token in the statement: skip the tree walk
        return frozenset()
    return frozenset(cte.alias.lower() for cte in root.find_all(exp.CTE) if cte.alias)


def _ast_readonly(nodes: Iterable[exp.Expression | None], ctes: frozenset[str], exclude: set[int]) -> list[RawRef]:
    """Every real table referenced under `nodes` except those whose id() is in `exclude`."""
    out = []
    for node in nodes:
        if node is None:
            continue
        for t in node.find_all(exp.Table):
            if id(t) in exclude:
                continue
            r = _ast_ref(t, ctes)
            if not r.derived:
                out.append(r)
    return out






def _table_of(node: exp.Expression | None) -> exp.Table:
    if isinstance(node, exp.Schema):
        node = node.this
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise _UnsupportedSyntaxError
    return node


def _plain(t: exp.Table, updating: bool = True) -> tuple[float, TableRef]:
    r = _ast_ref(t, frozenset())
    return r.pos, TableRef(r.db, r.name, updating)


def _ast_insert(node: exp.Insert, verb: str) -> StatementInfo:
    target = _table_of(node.this)
    ctes = _ast_ctes(node)
    entries = [_plain(target)] + read_only_entries(_ast_readonly([node], ctes, {id(target)}))
    query = node.expression
    is_select = isinstance(query, (exp.Query, exp.Subquery)) and not isinstance(query, exp.Values)
    return statement_info(verb + ("_SELECT" if is_select else ""), refs_to_tables(numbered(entries)), "sqlglot")


def _ast_update(node: exp.Update, columns: ColumnHints) -> StatementInfo:
    ctes = _ast_ctes(node)
    items: list[tuple[RawRef, exp.Expression]] = []
    _ast_from_items(node.this, ctes, items)
    frm = node.args.get("from_") or node.args.get("from")
    if frm is not None:
        _ast_from_items(frm.this, ctes, items)
        for j in frm.args.get("joins") or ():
            _ast_from_items(j, ctes, items)
    if not items:
        raise _UnsupportedSyntaxError
    refs = [r for r, _ in items]
    main_ids = {id(n) for r, n in items if not r.derived}
    multi = len(refs) > 1
    if multi:
        targets = []
        for e in node.expressions:
            col = e.this if isinstance(e, exp.EQ) else None
            if not isinstance(col, exp.Column) or not col.name:
                raise _UnsupportedSyntaxError
            targets.append((col.db or None, col.table or None, col.name))
    else:
        targets = []
    entries = update_entries(refs, targets, _ast_readonly([node], ctes, main_ids), columns)
    return statement_info("UPDATE_MULTI" if multi else "UPDATE", refs_to_tables(numbered(entries)), "sqlglot")


def _ast_delete(node: exp.Delete) -> StatementInfo:
    ctes = _ast_ctes(node)
    using = node.args.get("using")
    target_nodes: list[exp.Expression]
    items: list[tuple[RawRef, exp.Expression]] = []
    if using:
        target_items: list[tuple[RawRef, exp.Expression]] = []
        _ast_from_items(node.this, ctes, target_items)
        target_nodes = [n for _, n in target_items]
        for u in using if isinstance(using, list) else [using]:
            _ast_from_items(u, ctes, items)
        multi = True
    elif node.args.get("tables"):
        target_nodes = list(node.args["tables"])
        _ast_from_items(node.this, ctes, items)
        multi = True
    else:
        target_nodes = []
        _ast_from_items(node.this, ctes, items)
        multi = False
        if len(items) != 1:
            raise _UnsupportedSyntaxError
    refs = [r for r, _ in items]
    if multi:
        targets = []
        for t in target_nodes:
            t = _table_of(t)
            r = _ast_ref(t, frozenset())
            targets.append((r.db, r.name, r.pos))
        flags, extra = delete_flags(refs, targets)
    else:
        flags, extra = [not refs[0].derived], []
    entries = [(r.pos, TableRef(r.db, r.name, f)) for r, f in zip(refs, flags) if not r.derived] + extra
    exclude = {id(n) for r, n in items if not r.derived}
    for t in target_nodes:
        exclude.update(id(x) for x in t.find_all(exp.Table))
    entries += read_only_entries(_ast_readonly([node], ctes, exclude))
    return statement_info("DELETE_MULTI" if multi else "DELETE", refs_to_tables(numbered(entries)), "sqlglot")


def _ast_query(node: exp.Expression) -> StatementInfo:
    entries = read_only_entries(_ast_readonly([node], _ast_ctes(node), set()))
    return statement_info("OTHER", refs_to_tables(numbered(entries)), "sqlglot")


def _ast_create(node: exp.Create, family: str) -> StatementInfo:
    kind = (node.args.get("kind") or "").upper()
    if family == "CREATE_TABLE" and kind == "TABLE":
        target = _table_of(node.this)
        sources: list[exp.Expression] = []
        for holder in (node.args.get("properties"), node.this if isinstance(node.this, exp.Schema) else None):
            for p in (holder.expressions if holder is not None else ()):
                if isinstance(p, exp.LikeProperty):
                    sources.append(p)
        if node.expression is not None:
            sources.append(node.expression)
        ro = _ast_readonly(sources, _ast_ctes(node.expression) if node.expression is not None else frozenset(),
                           set())
        entries = numbered([_plain(target)] + read_only_entries(ro))
        return statement_info("CREATE_TABLE", refs_to_tables(entries), "sqlglot")
    if family == "CREATE_VIEW" and kind == "VIEW":
        target = _table_of(node.this)
        q = node.expression
        ro = _ast_readonly([q], _ast_ctes(q) if q is not None else frozenset(), set())
        entries = numbered([_plain(target)] + read_only_entries(ro))
        return statement_info("CREATE_VIEW", refs_to_tables(entries), "sqlglot")
    if family == "CREATE_INDEX" and kind == "INDEX" and isinstance(node.this, exp.Index):
        return statement_info("CREATE_INDEX", [_plain(_table_of(node.this.args.get("table")))[1]], "sqlglot")
    if family == "CREATE_DB" and kind in ("DATABASE", "SCHEMA"):
        return statement_info("CREATE_DB", (), "sqlglot", database=_db_name(node.this))
    raise _UnsupportedSyntaxError


def _db_name(node: exp.Expression | None) -> str:
    if isinstance(node, exp.Table):
        names = [p.this for p in (node.args.get("this"), node.args.get("db"), node.args.get("catalog"))
                 if isinstance(p, exp.Identifier)]
        if len(names) == 1:
            return names[0]
    raise _UnsupportedSyntaxError


def _ast_drop(node: exp.Drop, family: str) -> StatementInfo:
    kind = (node.args.get("kind") or "").upper()
    tables = list(node.args.get("tables") or ([node.this] if node.this is not None else []))
    if family in ("DROP_TABLE", "DROP_VIEW") and kind == family[5:]:
        refs = [_plain(_table_of(t))[1] for t in tables]
        if not refs:
            raise _UnsupportedSyntaxError
        return statement_info(family, refs, "sqlglot")
    if family == "DROP_INDEX" and kind == "INDEX":
        on = node.args.get("cluster")
        if not isinstance(on, exp.OnProperty):
            raise _UnsupportedSyntaxError
        return statement_info("DROP_INDEX", [_plain(_table_of(on.this))[1]], "sqlglot")
    if family == "DROP_TRIGGER" and kind == "TRIGGER" and len(tables) == 1:
        ref = _plain(_table_of(tables[0]))[1]
        return statement_info("DROP_TRIGGER", (), "sqlglot", trigger=ref.name, trigger_db=ref.db)
    if family == "DROP_DB" and kind in ("DATABASE", "SCHEMA") and len(tables) == 1:
        return statement_info("DROP_DB", (), "sqlglot", database=_db_name(tables[0]))
    raise _UnsupportedSyntaxError


def _ast_alter(node: exp.Alter, family: str) -> StatementInfo:
    kind = (node.args.get("kind") or "").upper()
    target = _table_of(node.this)
    if family == "ALTER_TABLE" and kind == "TABLE":
        return statement_info("ALTER_TABLE", [_plain(target)[1]], "sqlglot")
    if family == "CREATE_VIEW" and kind == "VIEW":
        actions = node.args.get("actions") or []
        ro = _ast_readonly(actions, frozenset().union(*(_ast_ctes(a) for a in actions)), set())
        entries = numbered([_plain(target)] + read_only_entries(ro))
        return statement_info("CREATE_VIEW", refs_to_tables(entries), "sqlglot")
    raise _UnsupportedSyntaxError


def read_ast(node: exp.Expression, family: str, columns: ColumnHints) -> StatementInfo:
    if family in ("INSERT", "REPLACE") and isinstance(node, exp.Insert):
        return _ast_insert(node, family)
    if family == "UPDATE" and isinstance(node, exp.Update):
        return _ast_update(node, columns)
    if family == "DELETE" and isinstance(node, exp.Delete):
        return _ast_delete(node)
    if family == "QUERY" and isinstance(node, exp.Query):
        return _ast_query(node)
    if isinstance(node, exp.Create):
        return _ast_create(node, family)
    if isinstance(node, exp.Drop):
        return _ast_drop(node, family)
    if isinstance(node, exp.Alter):
        return _ast_alter(node, family)
    if family == "TRUNCATE" and isinstance(node, exp.TruncateTable) and not node.args.get("is_database"):
        refs = [_plain(_table_of(t))[1] for t in node.expressions]
        if not refs:
            raise _UnsupportedSyntaxError
        return statement_info("TRUNCATE", refs, "sqlglot")
    if family == "SET_OPTION" and isinstance(node, exp.Set):
        entries = numbered(read_only_entries(_ast_readonly([node], _ast_ctes(node), set())))
        return statement_info("SET_OPTION", refs_to_tables(entries), "sqlglot")
    raise _UnsupportedSyntaxError


