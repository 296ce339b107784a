"""Filter lint: rule sets that do not do what they look like they do, given MySQL's evaluation order.

    >>> from rpl_sql.filters.rules import Filters, FilterType as T
    >>> f = Filters().configure(T.DO_DB, ("sales",), "STARTUP_OPTIONS", 1)
    >>> [w.code for w in lint_filters(f.configure(T.IGNORE_DB, ("tmp",), "STARTUP_OPTIONS", 1), "a", 0)]
    ['RPL001']

Each warning names the rule, why it misleads and a fix (SHOW REPLICATION FILTER WARNINGS, `rpl-sql lint`).
Pure: the rules' hits over landed events (RPL008) are counted by the caller and passed in.
"""
from __future__ import annotations

from dataclasses import dataclass

from rpl_sql.filters.rules import Filters, FilterType, fold, like_tokens
from rpl_sql.filters.state import ServerState

T = FilterType

WARNING_COLUMNS = ("Code", "Channel", "Filter", "Rule", "Why", "Fix")
CODES = {
    "RPL001": "ignore-db rules beside do-db rules",
    "RPL002": "a table rule its database rule never lets through",
    "RPL003": "a wildcard that matches more than the name suggests",
    "RPL004": "rules that differ only by letter case",
    "RPL005": "a rewrite target the database rules then ignore",
    "RPL006": "rewrites that look chained",
    "RPL007": "table rules that statement events without a default database never reach",
    "RPL008": "a rule that matched none of the channel's landed events",
}


@dataclass(frozen=True)
class FilterWarning:
    code: str
    channel: str | None   # None: the global filters
    filter: str           # the filter type (REPLICATE_DO_DB, ...)
    rule: str             # the rule as SHOW REPLICA STATUS writes it
    why: str
    fix: str

    def row(self) -> tuple:
        return (self.code, self.channel, self.filter, self.rule, self.why, self.fix)


def _rule(ftype: FilterType, value) -> str:
    return f"({value[0]},{value[1]})" if ftype is T.REWRITE_DB else str(value)


def _literal_db(table_value: str, wild: bool) -> str | None:
    """The database part of a table rule when it is a plain name (None for a wild part or no dot)."""
    if "." not in table_value:
        return None
    db = table_value.split(".", 1)[0]
    if wild and any(kind != "lit" for kind, _ in like_tokens(db)):
        return None
    if wild:
        return "".join(ch for _, ch in like_tokens(db))
    return db


def lint_filters(f: Filters, channel: str | None, lctn: int, hits: dict | None = None,
                 events: int = 0) -> list[FilterWarning]:
    """The warnings of one filter object. `hits`: (filter type, rule value) -> events it matched, over
    `events` landed events of the channel (None: not counted, no RPL008)."""
    out: list[FilterWarning] = []

    def warn(code, ftype, value, why, fix):
        out.append(FilterWarning(code, channel, ftype.value, _rule(ftype, value), why, fix))

    literal: dict[tuple[str, bool], str | None] = {}  # _literal_db once per rule (100,000 rules: seconds)

    def literal_db(v: str, wild: bool) -> str | None:
        key = (v, wild)
        if key not in literal:
            literal[key] = _literal_db(v, wild)
        return literal[key]

    do_db, ignore_db = f.values(T.DO_DB), f.values(T.IGNORE_DB)
    folded_do = {fold(d, lctn) for d in do_db}
    folded_ignore = {fold(d, lctn) for d in ignore_db}
    # RPL001: with REPLICATE_DO_DB rules, REPLICATE_IGNORE_DB is never consulted
    if do_db:
        for v in ignore_db:
            warn("RPL001", T.IGNORE_DB, v, "REPLICATE_DO_DB has rules, so REPLICATE_IGNORE_DB is never consulted: "
                 "every database not in REPLICATE_DO_DB is ignored already",
                 "remove it (REPLICATE_DO_DB decides alone), or drop the REPLICATE_DO_DB rules")
    # RPL002: database rules run first; a table rule on a database they stop never decides anything
    for ftype in (T.DO_TABLE, T.IGNORE_TABLE, T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE):
        wild = ftype in (T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE)
        for v in f.values(ftype):
            db = literal_db(v, wild)
            if db is None:
                continue
            if do_db and fold(db, lctn) not in folded_do:
                warn("RPL002", ftype, v, f"database {db!r} is not in REPLICATE_DO_DB, which ignores its events "
                     "before any table rule is checked", f"add {db} to REPLICATE_DO_DB, or remove this rule")
            elif not do_db and fold(db, lctn) in folded_ignore:
                warn("RPL002", ftype, v, f"REPLICATE_IGNORE_DB ignores database {db!r} before any table rule is "
                     "checked", f"remove {db} from REPLICATE_IGNORE_DB, or remove this rule")
    # RPL003: `_` is any one character, `%` inside a word any run of characters
    for ftype in (T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE):
        for v in f.values(ftype):
            toks = like_tokens(v)
            unders = [i for i, (kind, _) in enumerate(toks) if kind == "one"]
            inner = [i for i, (kind, _) in enumerate(toks) if kind == "any" and 0 < i < len(toks) - 1
                     and toks[i - 1][0] == "lit" and toks[i + 1][0] == "lit"
                     and toks[i - 1][1] not in "._" and toks[i + 1][1] not in "."]
            if unders:
                example = "".join("x" if kind == "one" else ("" if kind == "any" else ch) for kind, ch in toks)
                escaped = "".join("\\_" if kind == "one" else ("%" if kind == "any" else
                                                                 ("\\" + ch if ch in "\\%" else ch))
                                  for kind, ch in toks)
                warn("RPL003", ftype, v, f"'_' matches any one character, so this also matches {example!r}",
                     f"escape it if it is part of a name: '{escaped}'")
            elif inner:
                warn("RPL003", ftype, v, "'%' inside a name matches any run of characters there, dots included",
                     "split the pattern at the dot or name the tables exactly")
    # RPL004: letter case
    for ftype in T:
        if ftype is T.REWRITE_DB:
            continue
        seen: dict[str, str] = {}
        for v in f.values(ftype):
            low = str(v).lower()
            if low in seen and seen[low] != v:
                why = ("lower_case_table_names=0 compares names exactly: these are two different names, and "
                       "only one may exist on the source" if lctn == 0 else
                       f"lower_case_table_names={lctn} folds names: the rules are one")
                warn("RPL004", ftype, v, f"differs from {seen[low]!r} only by letter case; " + why,
                     "keep the one spelling the source uses")
            seen.setdefault(low, v)
    # RPL005: rewrite targets are what the database rules see
    pairs = f.values(T.REWRITE_DB)
    for src, dst in pairs:
        target = fold(dst, lctn)
        if do_db and target not in folded_do:
            warn("RPL005", T.REWRITE_DB, (src, dst), f"events of {src!r} are rewritten to {dst!r} and then "
                 f"ignored: REPLICATE_DO_DB, checked after the rewrite, does not name {dst!r}",
                 f"add {dst} to REPLICATE_DO_DB")
        elif not do_db and target in folded_ignore:
            warn("RPL005", T.REWRITE_DB, (src, dst), f"events of {src!r} are rewritten to {dst!r}, which "
                 "REPLICATE_IGNORE_DB then ignores", f"remove {dst} from REPLICATE_IGNORE_DB, or the rewrite")
        if fold(src, lctn) in folded_ignore and fold(src, lctn) != target and not do_db:
            warn("RPL005", T.IGNORE_DB, src, f"database rules see the rewritten name: events of {src!r} are "
                 f"judged as {dst!r}, so this rule never matches them", f"ignore {dst} instead")
    # RPL005: table rules also see a row event's rewritten database (the table map is rewritten first)
    rewritten = {fold(s, lctn): d for s, d in pairs if fold(s, lctn) != fold(d, lctn)}
    targets = {fold(d, lctn) for _, d in pairs}
    for ftype in (T.DO_TABLE, T.IGNORE_TABLE, T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE) if rewritten else ():
        wild = ftype in (T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE)
        for v in f.values(ftype):
            db = literal_db(v, wild)
            if db is None or fold(db, lctn) not in rewritten or fold(db, lctn) in targets:
                continue
            dst = rewritten[fold(db, lctn)]
            shown = "".join("\\" + c if c in "\\%_" else c for c in dst) if wild else dst
            warn("RPL005", ftype, v, f"row events of {db!r} are rewritten to {dst!r} before the table rules are "
                 "checked, so this rule never matches them (only statements that name the table as "
                 f"{db}.table do)", f"write it as {shown}.{v.split('.', 1)[1]}")
    # RPL006: MySQL applies the first matching pair once
    sources = {fold(s, lctn): (s, d) for s, d in pairs}
    for src, dst in pairs:
        nxt = sources.get(fold(dst, lctn))
        if nxt is not None and fold(dst, lctn) != fold(src, lctn):
            warn("RPL006", T.REWRITE_DB, (src, dst), f"{src!r} becomes {dst!r}, not {nxt[1]!r}: MySQL applies one "
                 f"rewrite, the pair ({nxt[0]},{nxt[1]}) does not apply after it",
                 f"rewrite ({src},{nxt[1]}) directly if that is meant")
    # RPL007: a statement without a default database meets REPLICATE_DO_DB first (database '')
    if do_db and f.table_rules_on:
        for ftype in (T.DO_TABLE, T.IGNORE_TABLE, T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE):
            for v in f.values(ftype):
                warn("RPL007", ftype, v, "statement-format events are judged by their default database first: "
                     "one run without a default database (no USE) is ignored by REPLICATE_DO_DB before this rule "
                     "is checked, even when it names the table as db.table",
                     "use binlog_format=ROW on the source, or USE the database before such statements")
    # RPL008: never matched
    if hits is not None:
        for ftype in T:
            for v in f.values(ftype):
                key = (ftype.value, _rule(ftype, v))
                if not hits.get(key):
                    warn("RPL008", ftype, v, f"matched none of the channel's {events:,} landed events",
                         "check its spelling against the source's names (and the rewrite, which runs first), "
                         "or remove it")
    return out


def lint_state(state: ServerState, channel: str | None = None, hits: dict | None = None,
               events: dict | None = None) -> list[FilterWarning]:
    """Warnings of every configured channel (or one) and of the global filters; `hits`/`events` per channel."""
    lctn = state.lower_case_table_names
    out: list[FilterWarning] = []
    if channel is None:
        out += lint_filters(state.global_filters, None, lctn)
    for ch in state.configured_channels():
        if channel is None or ch.name == channel:
            n = (events or {}).get(ch.name, 0)  # a channel with nothing landed yet has no evidence either way
            out += lint_filters(ch.filters, ch.name, lctn, (hits or {}).get(ch.name, {}) if n else None, n)
    return out
