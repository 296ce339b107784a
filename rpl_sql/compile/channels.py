"""Per-channel model: each channel's filters folded and pre-combined, and groups of channels one CASE branch decides."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from rpl_sql.compile.literals import in_list, sql_list, sql_str
from rpl_sql.compile.patterns import pattern_tokens
from rpl_sql.filters.rules import Filters, fold
from rpl_sql.filters.rules import FilterType as T

# ---------------------------------------------------------------- per-channel model

@dataclass
class ChannelRules:
    """One channel's filters, folded and pre-combined (the rewrite is folded into the db lists)."""

    name: str
    lctn: int
    do_db: bool
    pass_db: frozenset  # has do_db: folded event dbs that pass (rewrite applied)
    rej_db: frozenset  # only ignore_db: folded event dbs that are ignored
    has_db_rules: bool
    key_map: dict  # folded src -> folded dst (entries that change the key)
    out_map: dict  # folded src -> dst as configured (entries that change rewrite_db's result)
    dot: frozenset
    igt: frozenset
    wdo: tuple
    wig: tuple
    table_rules: bool
    default_true: bool  # tables_verdict's DEFAULT verdict

    @property
    def trivial(self) -> bool:
        return not (self.has_db_rules or self.table_rules or self.out_map or self.key_map)

    def signature(self) -> tuple:
        return (self.do_db, self.pass_db, self.rej_db, self.has_db_rules, tuple(sorted(self.key_map.items())),
                tuple(sorted(self.out_map.items())), self.dot, self.igt, self.wdo, self.wig, self.table_rules,
                self.default_true)


def channel_rules(name: str, f: Filters, lctn: int) -> ChannelRules:
    raw: dict = {}
    for src, dst in f.values(T.REWRITE_DB):
        raw.setdefault(fold(src, lctn), dst)
    key_map = {s: fold(d, lctn) for s, d in raw.items() if fold(d, lctn) != s}
    out_map = {s: d for s, d in raw.items() if d != s}
    do = frozenset(fold(v, lctn) for v in f.values(T.DO_DB))
    ign = frozenset(fold(v, lctn) for v in f.values(T.IGNORE_DB))

    def combined(lst: frozenset) -> frozenset:
        return frozenset({d for d in lst if d not in raw} | {s for s, d in raw.items() if fold(d, lctn) in lst})

    wdo = tuple(dict.fromkeys(pattern_tokens(p, lctn) for p in f.values(T.WILD_DO_TABLE)))
    wig = tuple(dict.fromkeys(pattern_tokens(p, lctn) for p in f.values(T.WILD_IGNORE_TABLE)))
    return ChannelRules(
        name=name, lctn=lctn, do_db=bool(do), pass_db=combined(do) if do else frozenset(),
        rej_db=combined(ign) if (ign and not do) else frozenset(), has_db_rules=bool(do or ign),
        key_map=key_map, out_map=out_map,
        dot=frozenset(fold(v, lctn) for v in f.values(T.DO_TABLE)),
        igt=frozenset(fold(v, lctn) for v in f.values(T.IGNORE_TABLE)),
        wdo=wdo, wig=wig, table_rules=f.table_rules_on,
        default_true=not (f.values(T.DO_TABLE) or f.values(T.WILD_DO_TABLE)))


class ChannelGroup:
    """Channels evaluated by one CASE branch. Not flat: identical configurations, plain sets. Flat: any
    channels; every set is keyed `channel SEP value` and per-channel constants become `c IN (...)`.
    `index`: the channel expression `c` is the channel's INT index (_Compiler.channel_index), not its name."""

    def __init__(self, chans: list[ChannelRules], flat: bool, sep: str, hash_min: int | None, c: str = "c",
                 index: dict[str, int] | None = None):
        self.chans, self.flat, self.sep, self.c, self.hash_min = chans, flat, sep, c, hash_min
        self.index = index
        self.reps = chans if flat else chans[:1]
        self.names = [ch.name for ch in chans]

    def channels(self, names: Iterable[str]) -> str:
        """`c IN (...)`'s list for these channels: their indexes, or their names."""
        if self.index is None:
            return sql_list(names)
        return ", ".join(str(i) for i in sorted(self.index[n] for n in set(names)))

    @property
    def dispatch(self) -> str:
        return f"{self.c} IN ({self.channels(self.names)})"

    def keyed(self, expr: str) -> str:
        return f"concat({self.c}, {sql_str(self.sep)}, {expr})" if self.flat else expr

    def member(self, expr: str, pairs: Iterable[tuple[ChannelRules, str]]) -> str:
        """`expr` is in the channel's set; pairs = (channel, value) for the representative channels."""
        vals = [(ch.name + self.sep + v) if self.flat else v for ch, v in pairs]
        if not vals:
            return "false"
        return in_list(self.keyed(expr), vals, self.hash_min)

    def cond(self, pred: Callable[[ChannelRules], bool]) -> str:
        """`pred` of the row's channel. It is asked of the representatives only: callers test membership in
        sets built from them, and a non-flat group's one representative speaks for all its channels."""
        yes = [ch.name for ch in self.reps if pred(ch)]
        if len(yes) == len(self.reps):
            return "true"
        if not yes:
            return "false"
        no = [ch.name for ch in self.reps if not pred(ch)]
        if len(no) < len(yes):
            return f"NOT {self.c} IN ({self.channels(no)})"
        return f"{self.c} IN ({self.channels(yes)})"

    def prefix_toks(self, ch: ChannelRules) -> tuple:
        return tuple(ch.name + self.sep) if self.flat else ()


