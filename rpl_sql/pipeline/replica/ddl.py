"""What a replicated DDL statement does to the replica's tables, read with sqlglot (MySQL dialect).

Only the table structure matters here: columns, their types and the primary key. Which tables a statement
names comes from the classifier (the events table's `tables`); this module reads CREATE TABLE column lists
and ALTER TABLE actions. A statement sqlglot cannot read yields None: the next table map of the table (every
row event carries one) then says what its columns are.
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

_INT = {"TINYINT": "tinyint", "SMALLINT": "smallint", "MEDIUMINT": "mediumint", "INT": "int", "BIGINT": "bigint"}
_BLOB = {"BINARY", "VARBINARY", "BLOB", "TINYBLOB", "MEDIUMBLOB", "LONGBLOB", "GEOMETRY", "POINT", "LINESTRING",
         "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON", "GEOMETRYCOLLECTION"}
_TEXT = {"CHAR", "VARCHAR", "NCHAR", "NVARCHAR", "TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT", "UUID", "INET4",
         "INET6"}


@dataclass
class CreateTable:
    db: str | None
    name: str
    columns: list[dict] | None        # None: CREATE TABLE ... LIKE (see `like`) or unreadable
    like: tuple[str | None, str] | None = None
    if_not_exists: bool = False


@dataclass
class AlterTable:
    db: str | None
    name: str
    actions: list[tuple] = field(default_factory=list)  # ("add", col, default, after) | ("drop", name) |
    # ("modify", old name, col) | ("rename_column", old, new) | ("rename", db, name) | ("pk", [names]) | ("drop_pk",)
    complete: bool = True             # False: some action was not understood (the next table map decides)


def _params(dt) -> list[int]:
    out = []
    for p in dt.expressions:
        try:
            out.append(int(p.this.this if hasattr(p.this, "this") else p.this))
        except (TypeError, ValueError, AttributeError):
            out.append(None)
    return out


def column(cdef) -> dict | None:
    """One sqlglot ColumnDef as a column of the vocabulary (columns.py); None for an unknown type."""
    from sqlglot import exp

    name = cdef.this.this if isinstance(cdef.this, exp.Identifier) else cdef.name
    kind = cdef.args.get("kind")
    if kind is None:
        return None
    t = kind.this.name  # DType member name
    unsigned = t.startswith("U") and t[1:] in _INT
    base = t[1:] if unsigned else t
    p = _params(kind)
    d: dict[str, Any] = {"name": name}
    if base in _INT:
        d["type"] = _INT[base]
    elif t == "BOOLEAN":
        d["type"] = "tinyint"
    elif t == "BIT":
        d.update(type="bit", bits=p[0] if p and p[0] else 1)
    elif t in ("DECIMAL", "UDECIMAL", "BIGDECIMAL"):
        d.update(type="decimal", precision=p[0] if p and p[0] else 10, scale=p[1] if len(p) > 1 and p[1] else 0)
    elif t in ("FLOAT", "UFLOAT"):
        d["type"] = "double" if (len(p) == 1 and p[0] and p[0] > 24) else "float"
    elif t in ("DOUBLE", "UDOUBLE"):
        d["type"] = "double"
    elif t == "DATE":
        d["type"] = "date"
    elif t in ("DATETIME", "DATETIME2", "DATETIME64"):
        d.update(type="datetime", fsp=p[0] if p and p[0] else 0)
    elif t in ("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMPLTZ"):
        d.update(type="timestamp", fsp=p[0] if p and p[0] else 0)
    elif t == "TIME":
        d.update(type="time", fsp=p[0] if p and p[0] else 0)
    elif t == "YEAR":
        d["type"] = "year"
    elif t == "JSON":
        d["type"] = "json"
    elif t in ("ENUM", "SET"):
        d.update(type=t.lower(), values=[e.this if isinstance(e, exp.Literal) else e.name for e in kind.expressions])
    elif t in _BLOB:
        d["type"] = "blob"
    elif t in _TEXT:
        d["type"] = "text"
    else:
        return None
    if unsigned:
        d["unsigned"] = True
    for c in cdef.args.get("constraints") or []:
        if isinstance(c.kind, exp.PrimaryKeyColumnConstraint):
            d["pk"] = True
    return d


class Now:
    """A CURRENT_TIMESTAMP default: the rows already there get the time the source ran the ALTER."""


class Unknown:
    """A default rpl_sql cannot compute (an expression, a generated column): `text` says which."""

    def __init__(self, text: str):
        self.text = text


_NOW = ("CURRENT_TIMESTAMP", "NOW", "LOCALTIMESTAMP", "LOCALTIME", "CURRENTTIMESTAMP")


def default_of(cdef) -> tuple[bool, Any]:
    """(has a default, the default): what ADD COLUMN puts in the rows already there; the default is a literal's
    text, None, `Now` or an `Unknown`."""
    from sqlglot import exp

    not_null = False
    for c in cdef.args.get("constraints") or []:
        if isinstance(c.kind, (exp.ComputedColumnConstraint, exp.GeneratedAsIdentityColumnConstraint)):
            return True, Unknown(c.sql(dialect="mysql"))
        if isinstance(c.kind, exp.DefaultColumnConstraint):
            v = c.kind.this
            while isinstance(v, (exp.Paren, exp.Introducer)):  # (5), _utf8mb4'x'
                v = v.expression if isinstance(v, exp.Introducer) else v.this
            if isinstance(v, exp.Null):
                return True, None
            if isinstance(v, exp.Literal):
                return True, v.this
            if isinstance(v, exp.Neg) and isinstance(v.this, exp.Literal):
                return True, "-" + v.this.this
            if isinstance(v, exp.Boolean):
                return True, int(v.this)
            if isinstance(v, exp.BitString):
                return True, int(v.this or "0", 2)
            if isinstance(v, exp.HexString):
                raw = bytes.fromhex(v.this if len(v.this) % 2 == 0 else "0" + v.this)
                typed = column(cdef)
                if typed is not None and typed["type"] == "blob":
                    return True, {"$binary": base64.b64encode(raw).decode("ascii")}
                if typed is not None and typed["type"] in ("text", "enum", "set", "json"):
                    return True, raw.decode("utf-8", "replace")
                return True, int.from_bytes(raw, "big")
            if isinstance(v, (exp.CurrentTimestamp, exp.CurrentDatetime)) or \
                    (isinstance(v, (exp.Column, exp.Anonymous, exp.Var)) and v.name.upper() in _NOW):
                return True, Now()
            return True, Unknown(c.sql(dialect="mysql"))
        if isinstance(c.kind, exp.NotNullColumnConstraint) and not c.kind.args.get("allow_null"):
            not_null = True
    return not_null, "" if not_null else None  # NOT NULL without a default: the type's implicit default


# ALTER TABLE clauses that change columns (what a statement rpl_sql cannot read fully may do to the rows)
_QUOTED = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"", re.S)
_COLUMN_CLAUSE = re.compile(
    r"\b(?:CHANGE|MODIFY)\b|\bRENAME\s+COLUMN\b|"
    r"\b(?:ADD|DROP)\s+(?!(?:INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|CONSTRAINT|FOREIGN|PRIMARY|PARTITION|CHECK|PERIOD|"
    r"SYSTEM|IF\s+EXISTS\s+(?:INDEX|KEY|FOREIGN|CONSTRAINT|PARTITION)|IF\s+NOT\s+EXISTS\s+(?:INDEX|KEY|"
    r"PARTITION)|DEFAULT)\b)(?=\S)", re.I)


def changes_columns(sql: str) -> str | None:
    """The first clause of an ALTER TABLE that may add, drop, change or rename a column, or None."""
    m = _COLUMN_CLAUSE.search(_QUOTED.sub("x", sql))
    return " ".join(m.group(0).upper().split()) if m else None


def _table(t) -> tuple[str | None, str]:
    return (t.db or None), t.name


def parse(sql: str) -> CreateTable | AlterTable | None:
    """CREATE TABLE / ALTER TABLE as structure changes; None when sqlglot cannot read the statement."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        tree = sqlglot.parse_one(sql, read="mysql", error_level=sqlglot.ErrorLevel.IGNORE)
    except (ParseError, ValueError, RecursionError):
        return None
    if isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() == "TABLE":
        target = tree.this
        if isinstance(target, exp.Schema):
            db, name = _table(target.this)
            cols: list[dict] = []
            pk: list[str] = []
            for e in target.expressions:
                if isinstance(e, exp.ColumnDef):
                    c = column(e)
                    if c is None:
                        return CreateTable(db, name, None, if_not_exists=bool(tree.args.get("exists")))
                    cols.append(c)
                elif isinstance(e, exp.PrimaryKey):
                    pk = [x.name for x in e.expressions]
            if pk:
                low = {p.lower() for p in pk}
                for c in cols:
                    if c["name"].lower() in low:
                        c["pk"] = True
            return CreateTable(db, name, cols, if_not_exists=bool(tree.args.get("exists")))
        if isinstance(target, exp.Table):
            db, name = _table(target)
            props = tree.args.get("properties")
            like = next((p for p in (props.expressions if props else []) if isinstance(p, exp.LikeProperty)), None)
            return CreateTable(db, name, None, like=_table(like.this) if like is not None else None,
                               if_not_exists=bool(tree.args.get("exists")))
        return None
    if isinstance(tree, exp.Alter) and str(tree.args.get("kind", "")).upper() == "TABLE":
        db, name = _table(tree.this)
        out = AlterTable(db, name)
        for a in tree.args.get("actions") or []:
            if isinstance(a, exp.ColumnDef):
                c = column(a)
                if c is None:
                    out.complete = False
                    continue
                pos = a.args.get("position")
                after = None
                if pos is not None:
                    after = "" if str(pos.args.get("position", "")).upper() == "FIRST" else pos.this.name
                out.actions.append(("add", c, default_of(a), after))
            elif isinstance(a, exp.Drop) and str(a.args.get("kind", "")).upper() == "COLUMN":
                out.actions.extend(("drop", t.name) for t in a.args.get("tables") or [])
            elif isinstance(a, exp.ModifyColumn) if hasattr(exp, "ModifyColumn") else False:
                c = column(a.this)
                if c is None:
                    out.complete = False
                    continue
                old = a.args.get("rename_from")
                out.actions.append(("modify", old.name if old is not None else c["name"], c))
            elif isinstance(a, exp.RenameColumn):
                out.actions.append(("rename_column", a.this.name, a.args["to"].name))
            elif isinstance(a, exp.AlterRename):
                out.actions.append(("rename", *_table(a.this)))
            elif isinstance(a, exp.AddConstraint):
                for e in a.expressions:
                    if isinstance(e, exp.PrimaryKey):
                        out.actions.append(("pk", [x.name for x in e.expressions]))
            elif isinstance(a, exp.DropPrimaryKey) if hasattr(exp, "DropPrimaryKey") else False:
                out.actions.append(("drop_pk",))
            elif isinstance(a, (exp.Drop,)) or type(a).__name__ in ("AlterIndex", "AlterSet"):
                continue  # indexes, engine and table options: no change to columns
            else:
                out.complete = False
        if not tree.args.get("actions") and "ALTER" in sql.upper():
            out.complete = True  # options only (ENGINE=...): nothing to do
        return out
    return None
