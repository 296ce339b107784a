"""The seven filter types, one filter object, FILTER_RULE formatting and MySQL's name matching.

Values are kept exactly as the user wrote them; only comparisons fold case (spec §2).
"""
from __future__ import annotations

import enum
import json
import re
import threading
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Iterable, Union

Pair = tuple[str, str]
Value = Union[str, Pair]


class FilterType(enum.Enum):
    """A filter type; declaration order is performance_schema's row order."""

    DO_DB = "REPLICATE_DO_DB"
    IGNORE_DB = "REPLICATE_IGNORE_DB"
    DO_TABLE = "REPLICATE_DO_TABLE"
    IGNORE_TABLE = "REPLICATE_IGNORE_TABLE"
    WILD_DO_TABLE = "REPLICATE_WILD_DO_TABLE"
    WILD_IGNORE_TABLE = "REPLICATE_WILD_IGNORE_TABLE"
    REWRITE_DB = "REPLICATE_REWRITE_DB"

    @property
    def filter_name(self) -> str:
        return self.value

    @property
    def option(self) -> str:
        """The start-up option, e.g. ``replicate-wild-do-table``."""
        return self.value.lower().replace("_", "-")

    @property
    def is_table_rule(self) -> bool:
        return self in TABLE_TYPES

    @classmethod
    def from_name(cls, name: str) -> "FilterType":
        return cls(name.upper())


TYPES: tuple[FilterType, ...] = tuple(FilterType)
_POSITION = {t: i for i, t in enumerate(TYPES)}  # Filters' slot of a type (the evaluator asks per rule list)
TABLE_TYPES = frozenset({FilterType.DO_TABLE, FilterType.IGNORE_TABLE,
                         FilterType.WILD_DO_TABLE, FilterType.WILD_IGNORE_TABLE})

# CONFIGURED_BY values (performance-schema.md §4)
STARTUP_OPTIONS = "STARTUP_OPTIONS"
CHANGE_REPLICATION_FILTER = "CHANGE_REPLICATION_FILTER"
STARTUP_OPTIONS_FOR_CHANNEL = "STARTUP_OPTIONS_FOR_CHANNEL"
CHANGE_REPLICATION_FILTER_FOR_CHANNEL = "CHANGE_REPLICATION_FILTER_FOR_CHANNEL"


def _simple_lower(c: str) -> str:
    """Unicode's simple (one-to-one, context-free) lowercase mapping of one character."""
    if c == "\u0130":  # the one letter whose full lowercase mapping has two characters
        return "i"
    low = c.lower()
    return low if len(low) == 1 else c


@lru_cache(maxsize=1)
def fold_translation() -> tuple[str, str]:
    """(from, to): every character whose simple lowercase differs, for SQL `translate(x, from, to)`."""
    src, dst = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        low = _simple_lower(c)
        if low != c:
            src.append(c)
            dst.append(low)
    return "".join(src), "".join(dst)


def fold(name: str, lctn: int) -> str:
    """The comparison form of a name: as is with lower_case_table_names=0, else lower-cased per character.

    MySQL compares through utf8mb3_tolower_ci: each character's simple lowercase mapping, no context
    (so final sigma stays itself, and U+0130 becomes 'i'), accent sensitive. `str.lower()` is not that.
    """
    if not lctn or name.isascii():
        return name.lower() if lctn else name
    return "".join(map(_simple_lower, name))


def normalize_values(ftype: FilterType, values: Iterable[Value], lctn: int = 0) -> tuple:
    """Store values as MySQL does: table rules are a set keyed by `db.table` (first spelling kept)."""
    values = tuple(values)
    if ftype in (FilterType.DO_TABLE, FilterType.IGNORE_TABLE):
        seen: set[str] = set()
        kept = []
        for v in values:
            k = fold(v, lctn)
            if k not in seen:
                seen.add(k)
                kept.append(v)
        return tuple(kept)
    if ftype is FilterType.REWRITE_DB:
        return tuple((a, b) for a, b in values)
    return values


def format_rule(ftype: FilterType, values: tuple) -> str:
    """FILTER_RULE / SHOW REPLICA STATUS text (performance-schema.md §3)."""
    if ftype is FilterType.REWRITE_DB:
        return ",".join(f"({a},{b})" for a, b in values)
    if ftype in (FilterType.DO_TABLE, FilterType.IGNORE_TABLE):
        return ",".join(sorted(values, key=lambda v: v.encode("utf-8")))
    return ",".join(values)


@dataclass(frozen=True)
class Matching:
    """How a replica compares names and judges events, the two settings that travel together:
    lower_case_table_names (0, 1, 2) and the filter mode ('mysql', or 'effective_database' for WL#2516)."""

    lower_case_table_names: int = 0
    filter_mode: str = "mysql"


@dataclass(frozen=True)
class Slot:
    """One filter type on one filter object: its values and P_S statistics."""

    values: tuple = ()
    configured_by: str | None = None
    active_since: int = 0  # microseconds since the epoch, UTC; 0 = never configured (no P_S row)
    counter: int = 0
    rule_hits: tuple = ()  # (value, hits, last hit µs UTC) per value hit since configured, in `values` order

    @property
    def has_row(self) -> bool:
        return self.active_since != 0

    def with_rule_hits(self, per_rule: dict, at: int) -> "Slot":
        """Add hits per value (values this configuration does not hold are not counted)."""
        merged = {v: [n, t] for v, n, t in self.rule_hits}
        for value, n in per_rule.items():
            if n and value in self.values:
                cur = merged.setdefault(value, [0, 0])
                cur[0] += n
                cur[1] = max(cur[1], at)
        order = {v: i for i, v in reversed(list(enumerate(self.values)))}
        kept = sorted(merged.items(), key=lambda kv: order[kv[0]])
        return replace(self, rule_hits=tuple((v, n, t) for v, (n, t) in kept))


@dataclass(frozen=True)
class Filters:
    """A filter object: one slot per type, in FilterType order."""

    slots: tuple[Slot, ...] = field(default_factory=lambda: tuple(Slot() for _ in TYPES))

    def __getitem__(self, ftype: FilterType) -> Slot:
        return self.slots[_POSITION[ftype]]

    def values(self, ftype: FilterType) -> tuple:
        return self.slots[_POSITION[ftype]].values

    def with_slot(self, ftype: FilterType, slot: Slot) -> "Filters":
        i = _POSITION[ftype]
        return Filters(self.slots[:i] + (slot,) + self.slots[i + 1:])

    def configure(self, ftype: FilterType, values: tuple, configured_by: str, now: int) -> "Filters":
        """Replace one type's values; statistics restart (counter 0) even for an identical value."""
        return self.with_slot(ftype, Slot(values, configured_by, now, 0))

    def add_counts(self, counts: dict[FilterType, int], rules: dict[FilterType, dict] | None = None,
                   at: int = 0) -> "Filters":
        """COUNTER increments per type, and with `rules` the per-value hits behind them (last hit at `at`)."""
        out = self
        for ftype, n in counts.items():
            if n:
                s = out[ftype]
                out = out.with_slot(ftype, replace(s, counter=s.counter + n))
        for ftype, per_rule in (rules or {}).items():
            out = out.with_slot(ftype, out[ftype].with_rule_hits(per_rule, at))
        return out

    @cached_property  # asked once or twice per decision; the slots never change
    def table_rules_on(self) -> bool:
        """MySQL's `is_on()`: some table rule (exact or wild) is non-empty."""
        return any(self.values(t) for t in TABLE_TYPES)

    def rows(self) -> list[tuple[FilterType, Slot]]:
        """The slots that have a performance_schema row, in row order."""
        return [(t, s) for t, s in zip(TYPES, self.slots) if s.has_row]


def tally_rule_hits(into: dict[FilterType, dict], rule_hits: Iterable[tuple[FilterType, Value]], n: int = 1) -> None:
    """Add `n` events' worth of `evaluate.hit_rules` output to per-type, per-value counts."""
    for ftype, value in rule_hits:
        per = into.setdefault(ftype, {})
        per[value] = per.get(value, 0) + n


def type_counts(rules: dict[FilterType, dict]) -> dict[FilterType, int]:
    """COUNTER's increments from per-rule hits: every hit has exactly one rule."""
    return {ftype: sum(per.values()) for ftype, per in rules.items()}


# ---------------------------------------------------------------- wildcard matching (spec §3)

def like_tokens(pattern: str) -> list[tuple[str, str]]:
    """Split a MySQL LIKE pattern into ('lit', ch) / ('any', '%') / ('one', '_') tokens.

    A backslash escapes the next character; a trailing backslash is a literal backslash.
    """
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(("lit", pattern[i + 1]))
            i += 2
            continue
        if c == "%":
            out.append(("any", c))
        elif c == "_":
            out.append(("one", c))
        else:
            out.append(("lit", c))
        i += 1
    return out


@lru_cache(maxsize=65536)
def _like_regex(pattern: str, lctn: int) -> re.Pattern:
    """Compile a LIKE pattern: over UTF-8 bytes with lctn=0 (`_` is one byte), over folded text otherwise."""
    if lctn == 0:
        parts = []
        for kind, ch in like_tokens(pattern):
            if kind == "any":
                parts.append(b".*")
            elif kind == "one":
                parts.append(b".")
            else:
                parts.append(re.escape(ch.encode("utf-8")))
        return re.compile(b"".join(parts), re.DOTALL)
    sparts = []
    for kind, ch in like_tokens(fold(pattern, lctn)):
        sparts.append(".*" if kind == "any" else "." if kind == "one" else re.escape(ch))
    return re.compile("".join(sparts), re.DOTALL)


def like(pattern: str, subject: str, lctn: int = 0) -> bool:
    """MySQL's wild-table match of `pattern` against the whole `subject` (a `db.table` key)."""
    return _like_regex(pattern, lctn).fullmatch(_like_subject(subject, lctn)) is not None


def _like_subject(subject: str, lctn: int) -> bytes | str:
    """What a `_like_regex` matches: UTF-8 bytes with lctn=0, folded text otherwise."""
    return subject.encode("utf-8", "surrogatepass") if lctn == 0 else fold(subject, lctn)


# ---------------------------------------------------------------- the first matching rule of a long list

LONG_LIST = 16  # from this many values on, lookups go through a cached index (below: the plain loop)
_MEMO_MAX = 65536  # subjects remembered per wild list, then forgotten all at once
_INDEX_MAX = 64  # lists indexed at once (a server holds a few per channel)
_by_id: dict[tuple[int, int, str], tuple[tuple, object]] = {}  # the fast path: this very tuple
_by_value: dict[tuple[tuple, int, str], object] = {}  # an equal list read again (each state load makes new tuples)
_indexes_lock = threading.Lock()  # the replica service decides on several threads
_MISS = object()


def _bounded_put(d: dict, key, value) -> None:
    if len(d) >= _INDEX_MAX:
        d.pop(next(iter(d)))
    d[key] = value


def _index(values: tuple, lctn: int, kind: str):
    """The index of one value list ('wild', 'equal' or 'pair': by the `from` of rewrite pairs), built once per
    distinct list, so a wild list's answers per table outlive the state object (Filters are immutable: a
    channel's lists are the same tuples from decision to decision, and equal ones after a reload)."""
    key = (id(values), lctn, kind)
    hit = _by_id.get(key)
    if hit is not None and hit[0] is values:
        return hit[1]
    with _indexes_lock:
        index = _by_value.get((values, lctn, kind))
        if index is None:
            index = _WildIndex(values, lctn) if kind == "wild" else _equal_index(values, lctn, kind == "pair")
            _bounded_put(_by_value, (values, lctn, kind), index)
        _bounded_put(_by_id, key, (values, index))
    return index


def _equal_index(values: tuple, lctn: int, pairs: bool) -> dict:
    out: dict = {}
    for v in values:
        out.setdefault(fold(v[0] if pairs else v, lctn), v)
    return out


def _longest_literal(pattern: str, lctn: int) -> bytes | str:
    """The longest run of literal characters of a LIKE pattern, in the form `like` matches (UTF-8 bytes at
    lctn 0, folded text otherwise): a subject without it cannot match."""
    runs, run = [], []
    for kind, ch in like_tokens(pattern if lctn == 0 else fold(pattern, lctn)):
        if kind == "lit":
            run.append(ch)
        else:
            runs.append("".join(run))
            run = []
    best = max(runs + ["".join(run)], key=len)
    return best.encode("utf-8", "surrogatepass") if lctn == 0 else best


class _WildIndex:
    """`first_like` over one long pattern list: a pattern is tried only on subjects holding its longest literal
    run, and each subject's answer is remembered (the same tables come back batch after batch).

    The patterns a subject holds the literal of are found by looking up the subject's substrings of each
    literal length, not by testing every literal: with 5,000 patterns, a first answer for a table took 2 ms.
    """

    def __init__(self, patterns: tuple, lctn: int):
        self.lctn = lctn
        self.entries = [(_longest_literal(p, lctn), p) for p in patterns]  # regexes compiled when first tried
        self.by_literal: dict = {}
        for i, (need, _) in enumerate(self.entries):
            self.by_literal.setdefault(need, []).append(i)
        self.lengths = sorted({len(need) for need in self.by_literal})
        self.memo: dict[str, str | None] = {}

    def _holding(self, s) -> list[int] | None:
        """The entries whose literal `s` holds, in list order; None when looking them up costs more than a scan."""
        if sum(len(s) - k + 1 for k in self.lengths if k <= len(s)) > len(self.entries):
            return None
        found: set[int] = set()
        for k in self.lengths:
            if k > len(s):
                break
            for i in range(len(s) - k + 1):
                hit = self.by_literal.get(s[i:i + k])
                if hit is not None:
                    found.update(hit)
        return sorted(found)

    def _match(self, pattern: str, s) -> bool:
        return _like_regex(pattern, self.lctn).fullmatch(s) is not None

    def first(self, subject: str) -> str | None:
        hit = self.memo.get(subject, _MISS)
        if hit is not _MISS:
            return hit
        s = _like_subject(subject, self.lctn)
        holding = self._holding(s)
        if holding is None:
            hit = next((p for need, p in self.entries if need in s and self._match(p, s)), None)
        else:
            hit = next((p for p in (self.entries[i][1] for i in holding) if self._match(p, s)), None)
        if len(self.memo) >= _MEMO_MAX:
            self.memo.clear()
        self.memo[subject] = hit
        return hit


def first_like(patterns: tuple, subject: str, lctn: int = 0) -> str | None:
    """The first of `patterns`, in order, that `subject` matches (`like`); None when none does."""
    if len(patterns) < LONG_LIST:
        s = _like_subject(subject, lctn)
        return next((p for p in patterns if _like_regex(p, lctn).fullmatch(s) is not None), None)
    return _index(patterns, lctn, "wild").first(subject)


def first_equal(values: tuple, value: str, lctn: int = 0) -> str | None:
    """The first of `values` equal to `value` under lctn folding; None when none is."""
    if len(values) < LONG_LIST:
        v = fold(value, lctn)
        return next((c for c in values if fold(c, lctn) == v), None)
    return _index(values, lctn, "equal").get(fold(value, lctn))


def first_pair(pairs: tuple, db: str, lctn: int = 0) -> Pair | None:
    """The first REPLICATE_REWRITE_DB pair whose `from` equals `db` (already folded); None when none does."""
    if len(pairs) < LONG_LIST:
        return next((p for p in pairs if fold(p[0], lctn) == db), None)
    return _index(pairs, lctn, "pair").get(db)


def filters_text(filters: Filters, lctn: int, source_side: "Filters | None" = None) -> str:
    """A channel's rules as stable text: what a replica catalog follows, and what a channel forwards to a relay;
    its source-side filters (CHANGE REPLICATION SOURCE TO REPLICATE_*), if any, under "source_side"."""
    got = {"lctn": lctn, **{t.value: [list(v) if isinstance(v, tuple) else v for v in filters.values(t)]
                            for t in TYPES}}
    if source_side is not None:
        got["source_side"] = {t.value: list(source_side.values(t)) for t in TYPES if source_side.values(t)}
    return json.dumps(got, ensure_ascii=False, sort_keys=True)


def filters_of(text: str) -> tuple[Filters, int]:
    """`filters_text` read back (the channel's own rules)."""
    got = json.loads(text)
    return _filters(got), int(got.get("lctn", 0))


def source_side_of(text: str) -> Filters | None:
    """The source-side filters `filters_text` holds (None: none)."""
    side = json.loads(text).get("source_side")
    return _filters(side) if side else None


def _filters(got: dict) -> Filters:
    f = Filters()
    for t in TYPES:
        vals = got.get(t.value) or []
        f = f.configure(t, tuple(tuple(v) if isinstance(v, list) else v for v in vals), "", 0)
    return f
