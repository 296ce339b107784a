"""AWS DMS table mappings: selection rules (include / explicit / exclude, `%` `_` `[set]` wildcards) and
schema renames, to and from one channel's rules.

DMS selects a table when an include rule matches it and no exclude rule does, by its source names, and then
renames the schema; MySQL rewrites the database first and lets the first matching rule type decide
(do-table, ignore-table, wild-do, wild-ignore). Both directions keep that exact or refuse.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from rpl_sql.configs import pattern_tokens as P
from rpl_sql.configs.model import FilterConfig, NotExpressibleError, rules_of
from rpl_sql.errors import MySQLError
from rpl_sql.filters.rules import FilterType, fold, like

T = FilterType
_ONE_NOTE = ("a '_' wildcard matches one character in DMS and one byte in MySQL with lower_case_table_names=0: "
             "they differ only on non-ASCII names")


@dataclass(frozen=True)
class Selection:
    rule: str  # how the user knows the rule: rule-name, or rule-id
    action: str  # include | exclude
    schema: list
    table: list


@dataclass(frozen=True)
class Mapping:
    """A table mapping as DMS evaluates it (names matched case-sensitively, per character)."""

    selections: tuple[Selection, ...]
    renames: tuple[tuple[str, str], ...]  # (source schema, target schema)

    def selects(self, schema: str, table: str) -> tuple[bool, str]:
        """(replicated, target schema) of a source table: included by some rule and excluded by none."""
        def hit(s: Selection) -> bool:
            return P.matches(s.schema, schema) and P.matches(s.table, table)

        inc = any(hit(s) for s in self.selections if s.action == "include")
        exc = any(hit(s) for s in self.selections if s.action == "exclude")
        return inc and not exc, dict(self.renames).get(schema, schema)


def _bad(what: str, value: object) -> MySQLError:
    return MySQLError.of("ER_WRONG_VALUE", f"DMS table mapping {what}", str(value))


def parse(text: str) -> Mapping:
    """The selection and schema-rename rules of a DMS table-mapping document; anything that changes which rows
    or columns travel, or renames tables, is refused by name."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad("JSON", f"{e.msg} at line {e.lineno} column {e.colno}") from None
    rules = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(rules, list):
        raise _bad("document", "no \"rules\" list")
    selections, renames = [], []
    for n, r in enumerate(rules):
        if not isinstance(r, dict):
            raise _bad(f"rule {n + 1}", r)
        name = str(r.get("rule-name") or r.get("rule-id") or n + 1)
        kind, action = r.get("rule-type"), r.get("rule-action")
        loc = r.get("object-locator") or {}
        if kind == "selection":
            if action not in ("include", "explicit", "exclude"):
                raise _bad(f"rule '{name}' rule-action", action)
            if r.get("filters"):
                raise NotExpressibleError(f"DMS rule '{name}': column filters choose rows, and replication filters "
                                          "choose whole tables")
            if loc.get("table-type", "table") == "view":
                raise NotExpressibleError(f"DMS rule '{name}': views have no rows in the binary log")
            if "schema-name" not in loc or "table-name" not in loc:
                raise _bad(f"rule '{name}' object-locator", loc)
            tokens = (P.dms_tokens(loc["schema-name"]), P.dms_tokens(loc["table-name"]))
            if action == "explicit" and any(P.literal(t) is None for t in tokens):
                raise _bad(f"rule '{name}' explicit object-locator", loc)
            selections.append(Selection(name, "exclude" if action == "exclude" else "include", *tokens))
        elif kind == "transformation":
            schema = loc.get("schema-name", "")
            if r.get("rule-target") != "schema" or action != "rename" or "table-name" in loc:
                raise NotExpressibleError(f"DMS rule '{name}': only schema renames have a replication-filter form "
                                          "(REPLICATE_REWRITE_DB); this one is a "
                                          f"{r.get('rule-target')} {action}")
            if P.literal(P.dms_tokens(schema)) is None:
                raise NotExpressibleError(f"DMS rule '{name}': REPLICATE_REWRITE_DB renames one database, not the "
                                          f"pattern '{schema}'")
            renames.append((P.literal(P.dms_tokens(schema)), str(r.get("value", ""))))
        # table-settings and post-processing rules tune the load, not what is selected
    if not any(s.action == "include" for s in selections):
        raise NotExpressibleError("the DMS table mapping has no include rule: DMS replicates nothing, and replication "
                                  "filters cannot ignore every table")
    return Mapping(tuple(selections), tuple(renames))


def read(text: str, channel: str | None) -> FilterConfig:
    """The channel's (or, without one, the global) rules that decide every table as the mapping selects it."""
    m = parse(text)
    renames = dict(m.renames)
    targets = set(renames.values())
    by_target: dict[str, list[str]] = {}
    for src, dst in m.renames:
        by_target.setdefault(dst, []).append(src)
    for dst, srcs in by_target.items():
        for s in m.selections:
            if len({P.matches(s.schema, src) for src in srcs}) > 1:
                other = next(x for x in srcs if P.matches(s.schema, x) != P.matches(s.schema, srcs[0]))
                raise NotExpressibleError(
                    f"DMS renames '{srcs[0]}' and '{other}' both to '{dst}', and rule '{s.rule}' selects one of them "
                    "only: MySQL judges both after the rename, as one database")
    expanded: list[tuple[Selection, list]] = []  # (rule, combined `db.table` tokens with the db renamed)
    for s in m.selections:
        schemas, tables = P.expand_sets(s.schema), P.expand_sets(s.table)
        if schemas is None or tables is None or len(schemas) * len(tables) > 64:
            raise NotExpressibleError(f"DMS rule '{s.rule}': its [sets] stand for more than 64 patterns")
        for st in schemas:
            db = P.literal(st)
            if db is None:
                clash = [x for x in list(renames) + list(targets) if P.matches(st, x)]
                if clash:
                    raise NotExpressibleError(f"DMS rule '{s.rule}': its schema pattern matches the renamed schema "
                                              f"'{clash[0]}', and MySQL judges tables after the rename")
            elif db in targets and db not in renames:
                raise NotExpressibleError(f"DMS rule '{s.rule}' selects the source schema '{db}', and '{db}' is also a "
                                          "rename target: MySQL judges both as one database, after the rename")
            else:
                st = P.literal_tokens(renames.get(db, db))
            for tt in tables:
                expanded.append((s, st + [("lit", ".")] + tt))
    inc = [(s, t) for s, t in expanded if s.action == "include"]
    exc = [(s, t) for s, t in expanded if s.action == "exclude"]
    exact_exc = [P.literal(t) for _, t in exc if P.literal(t) is not None]
    wild_exc = [(s, t) for s, t in exc if P.literal(t) is None]
    for si, ti in inc:
        if P.literal(ti) is not None:
            continue
        for se, te in wild_exc:
            w = P.witness(ti, te)
            if w is not None:
                raise NotExpressibleError(f"DMS rules '{si.rule}' (include) and '{se.rule}' (exclude) both match "
                                          f"'{w}': DMS excludes it, and MySQL's wild-do rules are checked before its "
                                          "wild-ignore rules")
    rules: dict[FilterType, list] = {}

    def add(ftype: FilterType, value) -> None:
        if value not in rules.setdefault(ftype, []):
            rules[ftype].append(value)

    for _, t in inc:
        key = P.literal(t)
        if key is None:
            add(T.WILD_DO_TABLE, P.mysql_text(t))
        elif key not in exact_exc and not any(like(P.mysql_text(te), key) for _, te in wild_exc):
            add(T.DO_TABLE, key)
    if T.DO_TABLE not in rules and T.WILD_DO_TABLE not in rules:
        raise NotExpressibleError(
            "every table the DMS table mapping includes it also excludes: DMS replicates nothing, "
            "and replication filters cannot ignore every table")
    for _, t in exc:
        key = P.literal(t)
        if key is None:
            add(T.WILD_IGNORE_TABLE, P.mysql_text(t))
        else:
            add(T.IGNORE_TABLE, key)
    if renames:
        rules[T.REWRITE_DB] = list(renames.items())
    notes = []
    if any(P.ONE in t for _, t in expanded):
        notes.append(_ONE_NOTE)
    if targets:
        notes.append("assumes the source has no database named like a rename target ("
                     + ", ".join(sorted(targets)) + "): MySQL would judge its tables as the renamed ones")
    notes.append("DMS matches names case-sensitively: exact with lower_case_table_names=0")
    r = rules_of(rules)
    if channel is None:
        return FilterConfig(r, (), notes=tuple(notes))
    return FilterConfig((), ((channel, r),), notes=tuple(notes))


# ---------------------------------------------------------------- writing

def _split(ftype: FilterType, value: str, channel: str) -> tuple[list, list]:
    if ftype in (T.DO_TABLE, T.IGNORE_TABLE):
        db, _, table = value.partition(".")
        return P.literal_tokens(db), P.literal_tokens(table)
    parts = P.split_at_dot(P.mysql_tokens(value))
    if parts is None:
        raise NotExpressibleError(f"channel '{channel}' {ftype.filter_name} rule '{value}': DMS matches schema and "
                                  "table apart, and this pattern has no single literal '.' between them")
    return parts


def write(rules: dict[FilterType, tuple], lctn: int, channel: str) -> tuple[str, list[str]]:
    """(table-mapping JSON, notes) selecting for DMS exactly the tables the channel applies (row events)."""
    rw = dict(rules.get(T.REWRITE_DB, ()))
    targets = set(rw.values())

    def sources(db_tokens: list, rule: str) -> list[list]:
        """The source schemas (as patterns) whose tables MySQL checks as `db_tokens` after the rewrite."""
        db = P.literal(db_tokens)
        if db is None:
            hit = [x for x in list(rw) + list(targets) if P.matches(db_tokens, x, lctn)]
            if hit:
                raise NotExpressibleError(
                    f"channel '{channel}' rule '{rule}': its database pattern matches '{hit[0]}', "
                    "which REPLICATE_REWRITE_DB renames, and DMS selects by the source name")
            return [db_tokens]
        names = [src for src, dst in rw.items() if fold(dst, lctn) == fold(db, lctn)]
        if not any(fold(src, lctn) == fold(db, lctn) for src in rw):
            names.append(db)
        return [P.literal_tokens(n) for n in names]

    do_t, ign_t = rules.get(T.DO_TABLE, ()), rules.get(T.IGNORE_TABLE, ())
    wdo, wign = rules.get(T.WILD_DO_TABLE, ()), rules.get(T.WILD_IGNORE_TABLE, ())
    includes: list[tuple[list, list]] = []
    excludes: list[tuple[list, list]] = []
    if do_t or wdo:
        for ftype, values in ((T.DO_TABLE, do_t), (T.WILD_DO_TABLE, wdo)):
            for v in values:
                db, table = _split(ftype, v, channel)
                includes += [(s, table) for s in sources(db, v)]
        done = {fold(v, lctn) for v in do_t}
        for v in ign_t:
            if fold(v, lctn) not in done and any(like(w, v, lctn) for w in wdo):
                db, table = _split(T.IGNORE_TABLE, v, channel)
                excludes += [(s, table) for s in sources(db, v)]
    else:
        includes.append(([P.ANY], [P.ANY]))
        for ftype, values in ((T.IGNORE_TABLE, ign_t), (T.WILD_IGNORE_TABLE, wign)):
            for v in values:
                db, table = _split(ftype, v, channel)
                excludes += [(s, table) for s in sources(db, v)]
    do_db, ign_db = rules.get(T.DO_DB, ()), rules.get(T.IGNORE_DB, ())
    if do_db:
        narrowed = []
        for d in do_db:
            for src in sources(P.literal_tokens(d), d):
                for db, table in includes:
                    if P.witness(db, src, lctn) is not None:
                        narrowed.append((src, table))
        includes = narrowed
    else:
        for d in ign_db:
            excludes += [(s, [P.ANY]) for s in sources(P.literal_tokens(d), d)]
    out, n = [], 0
    for action, entries in (("include", includes), ("exclude", excludes)):
        for db, table in entries:
            n += 1
            out.append({"rule-type": "selection", "rule-id": str(n), "rule-name": str(n),
                        "object-locator": {"schema-name": P.dms_text(db, lctn), "table-name": P.dms_text(table, lctn)},
                        "rule-action": action, "filters": []})
    for src, dst in rw.items():
        if lctn and any(len(P.case_variants(c)) > 1 for c in src):
            raise NotExpressibleError(
                f"channel '{channel}' REPLICATE_REWRITE_DB ({src},{dst}): with lower_case_table_names={lctn} MySQL "
                f"renames every letter case of '{src}', and a DMS rename takes one spelling")
        n += 1
        out.append({"rule-type": "transformation", "rule-id": str(n), "rule-name": str(n), "rule-target": "schema",
                    "object-locator": {"schema-name": P.dms_text(P.literal_tokens(src), lctn)},
                    "rule-action": "rename", "value": dst})
    notes = []
    if not includes:
        raise NotExpressibleError(
            f"channel '{channel}': its rules apply no table, and a DMS mapping needs an include rule")
    if lctn == 0 and any(P.ONE in db + table for db, table in includes + excludes):
        notes.append(_ONE_NOTE)
    notes.append("DMS selects row changes; statements (DDL) are not judged by these rules")
    return json.dumps({"rules": out}, indent=2, ensure_ascii=False) + "\n", notes
