"""Compile a replica's filter state into Spark SQL functions that agree exactly with `evaluate.py`.

The output is a list of `CREATE OR REPLACE TEMPORARY FUNCTION ... RETURN <expr>` texts. Spark inlines SQL
functions into the plan, so no Python runs per row. Public functions (argument names are part of the API):

* ``rewrite_db(channel_name, db_name)``
* ``should_apply(channel_name, db_name, table_name)`` / ``filter_decided_by(...)`` -- row events (spec §6)
* ``should_apply_statement(channel_name, command, default_db, tables)`` /
  ``filter_decided_by_statement(...)`` -- statement events, via `evaluate.statement_event` (spec §5)

NULL contract: unknown or NULL channel -> NULL (MySQL has no applier for it); NULL db_name -> NULL; NULL
table_name -> NULL unless the database rules alone reject the row (then FALSE and their label, the
three-valued answer); statements: NULL command = 'OTHER', NULL default_db = '', NULL tables = empty, a NULL
element or element name in `tables` -> NULL, a NULL `updating` counts as false. Row events inside an XA
transaction (MySQL stops the applier) and the P_S counters are out of scope: these are pure functions.

Case folding (lower_case_table_names != 0): rule values are folded in Python with `rules.fold`, event names
in SQL with the same per-character table (`translate`, `lower()` only for pure ASCII, where both agree), so
folding is exact for every string. Channel names are matched with Spark's `lower()`.

Encoding (the reason this module is long): every exact list is a hash lookup: an `IN` list, which Spark
turns into an InSet, or from SET_MAP_MIN values a membership map folded from one string literal (_in_list),
so that Spark does not parse and analyse one node per value in every function and query; the rewrite
map is looked up only behind an InSet guard; a wildcard list becomes cheap exact forms (InSet on the db
part, on the table part, on the key, on prefixes/suffixes of the key) plus a few trie-factored, anchored
`RLIKE`s that run only when a cheap InSet guard says they may match. Channels
are dispatched by a CASE over distinct filter configurations ("case") or, when there are many, through
channel-keyed sets `concat(channel, SEP, value)` ("flat"), so the expression size does not grow with the
channel count; with few channels, "case" dispatches on the channel's INT index (channel_index). Derived
values every row needs (the channel's index or name, folded names, the rewritten db) are arguments of
helper functions: Spark computes a SQL function's arguments once per row, before its body (in
a WHERE clause too, while one argument looks expensive to it; see `x` in functions()). Anything only some
rows need is computed in the branch that needs it.

Text the parser predicts cheaply: Spark's ANTLR parser decides `CASE WHEN` (CASE is not a reserved word)
and a `(` that opens an expression (parenthesised, row or lambda) by scanning ahead to the construct's end,
and builds new DFA states for every distinct token sequence it scans: in a fresh JVM at 10,000 rules per
channel that one decision took 4.4 s of a 5.1 s parse (up to 10,105 tokens ahead). So the compiler writes
`CASE true WHEN c THEN ...` and groups as `coalesce(a AND b)`; the optimizer turns both back into `CASE
WHEN c` and `a AND b`, and the parser looks at most 13 tokens ahead (the same parse: 1.1 s).

A row event's common path never builds the key `db.table`: copying strings is what costs (a concat and a
lookup cost about as much as the bare scan). Its tests read the names in place: startswith()/endswith() for
few prefixes, `hash(db, table) IN (ints)` before any exact table test (spark_hash computes Spark's values
here), `_`-patterns by the lengths and masked characters of each part (fixed_split). Names with a '.' take a
compact whole-key path (InSets and regexes on the key). (At 100 rules per channel this cut the cost over a
bare scan from 5.5x to 3.8x: bench/bench_should_apply.py --ab 6750e0d; computing the hash and the dotted
path only in their branches, not as arguments, took 4.05x to 3.42x: --ab 02ca175.)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from .evaluate import (DATABASE_COMMANDS, DEFAULT, DROP_TEMPORARY_IF_EXISTS, EXEMPT, NO_UPDATED_TABLE, NONE,
                       TRANSACTION, TRANSACTION_CONTROL, TRIGGER_NOT_FOUND)
from .rules import FilterType as T, Filters, fold, fold_translation, like_tokens
from .state import ServerState

ANY, ONE = 0, 1  # wildcard tokens; a literal token is the 1-character string itself

# decision codes shared by all functions: code -> decided_by label; TRUE_CODES are the applied ones
LABELS = {
    1: TRANSACTION, 2: T.DO_DB.value, 3: T.IGNORE_DB.value, 4: T.WILD_DO_TABLE.value,
    5: T.WILD_IGNORE_TABLE.value, 6: DEFAULT, 7: TRIGGER_NOT_FOUND, 8: EXEMPT, 9: NO_UPDATED_TABLE,
    10: T.DO_TABLE.value, 11: T.IGNORE_TABLE.value, 12: T.WILD_DO_TABLE.value, 13: T.WILD_IGNORE_TABLE.value,
    14: DEFAULT, 15: DEFAULT, 16: T.DO_DB.value, 17: NONE, 18: NONE, 19: DEFAULT,
}
TRUE_CODES = (1, 4, 8, 10, 12, 14, 16, 17, 18, 19)
ROW_TABLE_TRUE = (0, 10, 12, 14)  # table code 0: the channel has no table rules

CASE_MAX_GROUPS = 4  # more distinct non-trivial filter configurations than this -> flat encoding
CHANNEL_INDEX_MAX = 8  # case encoding with up to this many channels: dispatch on an INT index (channel_index)
REGEX_CHUNK = 12000  # max regex source chars per RLIKE (Spark embeds it in generated Java as a constant)
COMPILE_MAX_CHARS = 6000  # a larger row table code is interpreted, not compiled (see functions())
# ... unless the JVMs JIT-compile huge methods (-XX:-DontCompileHugeMethods): then up to this size, which keeps
# whole-stage codegen's method under Janino's 64 KB limit (27,000 characters made a 49 KB method)
COMPILE_MAX_CHARS_JIT = 30000
MAP_CHUNK = 64  # max entries of one literal map (element_at scans maps linearly)
SET_MAP_MIN = 64  # an exact list this long is one map literal, not an IN list (see _in_list)
MAP_HASH_MIN = 1000  # Spark 4.2's default spark.sql.optimizer.mapLookupHashThreshold
MAP_PAD_MAX = 10000  # a session whose threshold is higher keeps IN lists (padding would cost more than it saves)
MAX_LENGTH_GROUPS = 4  # more distinct prefix/suffix lengths than this: a guard lookup first (fix_test)
FIX_CHAIN_MAX = 4  # up to this many prefixes of one length: startswith() each (no copy), else left() IN (...)
STATEMENT_TYPE = "ARRAY<STRUCT<db: STRING, name: STRING, updating: BOOLEAN>>"
_P = "rpl_sql__"  # prefix of the helper functions
APPLIER_PREFIX = "rpl_sql_apply__"  # prefix of the applier's set: its own helpers, never the session's


@dataclass(frozen=True)
class Guard:
    """A check every public function makes before deciding: `condition` (SQL, true to go on), else
    raise_error(`message`, a SQL string expression). An uncorrelated subquery in it runs once per query."""

    condition: str
    message: str


@dataclass(frozen=True)
class CompiledFunctions:
    """CREATE FUNCTION texts in dependency order, and which encoding was chosen and why."""

    statements: tuple[str, ...]
    encoding: str


# ---------------------------------------------------------------- quoting: the only place text is escaped

_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'")  # a string literal as sql_str writes it
_PLAIN = re.compile(r"[A-Za-z0-9 _.%,:;=<>!?@#&|^~*+/()\[\]{}\"`-]*")  # printable, none of \\ ' $


def sql_str(s: str) -> str:
    """A Spark SQL string literal for `s` (default parser: backslash escapes). Used for every literal.

    Quote and backslash are escaped, `$` (Spark's ${var} substitution runs on the raw text) and non-printable
    characters become \\uXXXX (surrogate pairs above the BMP): nothing in a name can end the literal, start
    a comment, or be substituted.
    """
    if _PLAIN.fullmatch(s):  # the common case, and at 10,000 rules 120,000 calls
        return "'" + s + "'"
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "$":  # Spark substitutes ${var} in the SQL text before parsing
            out.append("\\u0024")
        elif ch.isprintable() and ch != "\u00a0":
            out.append(ch)
        else:
            o = ord(ch)
            if o > 0xFFFF:
                o -= 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF)))
            else:
                out.append("\\u%04x" % o)
    return "'" + "".join(out) + "'"


def _rx_char(ch: str) -> str:
    """One literal character in a java.util.regex pattern: ASCII letters/digits as is, others \\x{h}."""
    if ch.isascii() and (ch.isalnum() or ch == "_"):
        return ch
    return "\\x{%x}" % ord(ch)


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join(sql_str(v) for v in sorted(set(values)))


def _in_list(expr: str, values: Iterable[str], hash_min: int | None) -> str:
    """`expr` is one of `values` (a hash lookup either way): an IN list, or from SET_MAP_MIN values a
    membership map built from one string literal.

    Spark parses and analyses every element of an IN list as a node, again in every function and query
    that inlines it: at 10,000 rules per channel that was most of CREATE FUNCTION's time. One literal split
    on NUL (which MySQL names cannot hold) is a single node. Spark (4.2+) folds the map once and looks up a
    foldable map through a prebuilt hash from `hash_min` entries on (its mapLookupHashThreshold; None: no
    such lookup, IN lists only), so smaller maps are padded with `false` entries whose keys are not values.
    Same result as IN for a non-NULL `expr` (NULL gives false, not NULL: the compiler never negates these
    tests, so no condition can tell).
    """
    vals = sorted(set(values))
    if (hash_min is None or hash_min > MAP_PAD_MAX or len(vals) < SET_MAP_MIN
            or any("\x00" in v for v in vals)):
        return f"{expr} IN ({_sql_list(vals)})"
    keys = "'" + "\\u0000".join(sql_str(v)[1:-1] for v in vals) + "'"
    split = f"split({keys}, '\\u0000', -1)"
    pad = hash_min - len(vals)
    if pad <= 0:
        m = f"map_from_arrays({split}, array_repeat(true, {len(vals)}))"
    else:
        taken, a = set(vals), 1
        while any(str(i) in taken for i in range(a, a + pad)):
            a += pad
        m = (f"map_from_arrays(concat({split}, CAST(sequence({a}, {a + pad - 1}) AS ARRAY<STRING>)), "
             f"concat(array_repeat(true, {len(vals)}), array_repeat(false, {pad})))")
    return f"coalesce({m}[{expr}], false)"


def fold_sql(expr: str, lctn: int) -> str:
    """SQL for rules.fold(expr, lctn): per-character simple lowercase, exactly as Python computes it."""
    if not lctn:
        return expr
    src, dst = fold_translation()
    return _case([(f"octet_length({expr}) = char_length({expr})", f"lower({expr})")],
                 f"translate({expr}, {sql_str(src)}, {sql_str(dst)})")


def _runs(s: str, ones: tuple, n: int) -> list[str]:
    """substring()s of `s` (length n) that skip the positions `ones`."""
    runs, start = [], 0
    for i in ones + (n,):
        if i > start:
            runs.append(f"substring({s}, {start + 1}, {i - start})")
        start = i + 1
    return runs


def _latin1(expr: str) -> str:
    """The UTF-8 bytes of a string as ISO-8859-1 characters: regex `.` then matches one byte."""
    return f"decode(encode({expr}, 'UTF-8'), 'ISO-8859-1')"


# ---------------------------------------------------------------- Spark's hash()

def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & 0xFFFFFFFF
    k1 = ((k1 << 15) | (k1 >> 17)) & 0xFFFFFFFF
    return (k1 * 0x1B873593) & 0xFFFFFFFF


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & 0xFFFFFFFF
    return (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF


def spark_hash(*parts: str) -> int:
    """Spark SQL's `hash(parts...)` of non-NULL strings (Murmur3_x86_32.hashUnsafeBytes, seed 42, each
    column's hash the next one's seed), so a generated `hash(k, t) IN (...)` can guard an exact test."""
    h = 42
    for part in parts:
        data = part.encode("utf-8")
        n = len(data)
        aligned = n - n % 4
        h1 = h
        for i in range(0, aligned, 4):
            h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
        for b in data[aligned:]:  # Spark's legacy tail: each byte, sign-extended, mixed as a whole word
            h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & 0xFFFFFFFF))
        h1 ^= n
        h1 ^= h1 >> 16
        h1 = (h1 * 0x85EBCA6B) & 0xFFFFFFFF
        h1 ^= h1 >> 13
        h1 = (h1 * 0xC2B2AE35) & 0xFFFFFFFF
        h1 ^= h1 >> 16
        h = h1
    return h - (1 << 32) if h & 0x80000000 else h


# ---------------------------------------------------------------- LIKE patterns

def _tokens(pattern: str, lctn: int) -> tuple:
    """MySQL LIKE tokens exactly as rules._like_regex reads them, with runs of `%` collapsed."""
    out: list = []
    for kind, ch in like_tokens(fold(pattern, lctn)):
        if kind == "any":
            if not out or out[-1] != ANY:
                out.append(ANY)
        else:
            out.append(ONE if kind == "one" else ch)
    return tuple(out)


def _lits(toks: Sequence) -> str | None:
    """The literal text of a wildcard-free token run, else None."""
    if ANY not in toks and ONE not in toks:
        return "".join(toks)
    return None


def _sub_form(toks: tuple) -> tuple:
    """Classify a pattern over one dot-free name: ('exact', s), ('all',), ('prefix', p), ('suffix', s) need
    no regex; ('regex',) otherwise."""
    lit = _lits(toks)
    if lit is not None:
        return ("exact", lit)
    if toks == (ANY,):
        return ("all",)
    if len(toks) >= 2 and toks[-1] == ANY and _lits(toks[:-1]) is not None:
        return ("prefix", _lits(toks[:-1]))
    if len(toks) >= 2 and toks[0] == ANY and _lits(toks[1:]) is not None:
        return ("suffix", _lits(toks[1:]))
    return ("regex",)


def _trie_regex(seqs: tuple[tuple, ...], byte_mode: bool) -> str:
    """One anchored regex matching exactly the token sequences, factored as a trie (shared prefixes once).

    byte_mode: literals become their UTF-8 bytes as latin-1 characters (subject is _latin1(key)), so `_`
    (regex `.`) matches one byte as in MySQL's binary comparison.
    """
    root: dict = {}
    for seq in seqs:
        node = root
        for t in seq:
            if isinstance(t, str) and byte_mode:
                for b in t.encode("utf-8"):
                    node = node.setdefault(chr(b), {})
            else:
                node = node.setdefault(t, {})
        node[None] = {}

    def tok(t) -> str:
        return ".*" if t == ANY else "." if t == ONE else _rx_char(t)

    def emit(node: dict) -> str:
        out = []
        while True:  # chains of single children: no group needed
            edges = [k for k in node if k is not None]
            if len(edges) == 1 and None not in node:
                out.append(tok(edges[0]))
                node = node[edges[0]]
                continue
            break
        edges = [k for k in node if k is not None]
        if edges:
            alts = [tok(k) + emit(node[k]) for k in edges]
            body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
            if len(alts) == 1 and len(body) > 1:
                body = "(?:" + body + ")"
            out.append(body + ("?" if None in node else ""))
        return "".join(out)

    return "(?s)\\A(?:" + emit(root) + ")\\z"


# ---------------------------------------------------------------- per-channel model

@dataclass
class _Chan:
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
                tuple(sorted(self.out_map.items())), self.dot, self.igt, self.wdo, self.wig, self.table_rules, self.default_true)


def _chan(name: str, f: Filters, lctn: int) -> _Chan:
    raw: dict = {}
    for src, dst in f.values(T.REWRITE_DB):
        raw.setdefault(fold(src, lctn), dst)
    key_map = {s: fold(d, lctn) for s, d in raw.items() if fold(d, lctn) != s}
    out_map = {s: d for s, d in raw.items() if d != s}
    do = frozenset(fold(v, lctn) for v in f.values(T.DO_DB))
    ign = frozenset(fold(v, lctn) for v in f.values(T.IGNORE_DB))

    def combined(lst: frozenset) -> frozenset:
        return frozenset({d for d in lst if d not in raw} | {s for s, d in raw.items() if fold(d, lctn) in lst})

    wdo = tuple(dict.fromkeys(_tokens(p, lctn) for p in f.values(T.WILD_DO_TABLE)))
    wig = tuple(dict.fromkeys(_tokens(p, lctn) for p in f.values(T.WILD_IGNORE_TABLE)))
    return _Chan(
        name=name, lctn=lctn, do_db=bool(do), pass_db=combined(do) if do else frozenset(),
        rej_db=combined(ign) if (ign and not do) else frozenset(), has_db_rules=bool(do or ign),
        key_map=key_map, out_map=out_map,
        dot=frozenset(fold(v, lctn) for v in f.values(T.DO_TABLE)),
        igt=frozenset(fold(v, lctn) for v in f.values(T.IGNORE_TABLE)),
        wdo=wdo, wig=wig, table_rules=f.table_rules_on,
        default_true=not (f.values(T.DO_TABLE) or f.values(T.WILD_DO_TABLE)))


class _Group:
    """Channels evaluated by one CASE branch. Not flat: identical configurations, plain sets. Flat: any
    channels; every set is keyed `channel SEP value` and per-channel constants become `c IN (...)`.
    `index`: the channel expression `c` is the channel's INT index (_Compiler.channel_index), not its name."""

    def __init__(self, chans: list[_Chan], flat: bool, sep: str, hash_min: int | None, c: str = "c",
                 index: dict[str, int] | None = None):
        self.chans, self.flat, self.sep, self.c, self.hash_min = chans, flat, sep, c, hash_min
        self.index = index
        self.reps = chans if flat else chans[:1]
        self.names = [ch.name for ch in chans]

    def channels(self, names: Iterable[str]) -> str:
        """`c IN (...)`'s list for these channels: their indexes, or their names."""
        if self.index is None:
            return _sql_list(names)
        return ", ".join(str(i) for i in sorted(self.index[n] for n in set(names)))

    @property
    def dispatch(self) -> str:
        return f"{self.c} IN ({self.channels(self.names)})"

    def keyed(self, expr: str) -> str:
        return f"concat({self.c}, {sql_str(self.sep)}, {expr})" if self.flat else expr

    def member(self, expr: str, pairs: Iterable[tuple[_Chan, str]]) -> str:
        """`expr` is in the channel's set; pairs = (channel, value) for the representative channels."""
        vals = [(ch.name + self.sep + v) if self.flat else v for ch, v in pairs]
        if not vals:
            return "false"
        return _in_list(self.keyed(expr), vals, self.hash_min)

    def cond(self, pred: Callable[[_Chan], bool]) -> str:
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

    def prefix_toks(self, ch: _Chan) -> tuple:
        return tuple(ch.name + self.sep) if self.flat else ()


def _junction(parts: Iterable[str], op: str, unit: str, zero: str) -> str:
    """`parts` joined by AND/OR in `coalesce(...)`, not parentheses (module docstring), with the constants
    folded: `unit` drops out, `zero` decides."""
    parts = [p for p in parts if p != unit]
    if zero in parts:
        return zero
    if not parts:
        return unit
    return parts[0] if len(parts) == 1 else "coalesce(" + f" {op} ".join(parts) + ")"


def _or(parts: Iterable[str]) -> str:
    return _junction(parts, "OR", "false", "true")


def _and(parts: Iterable[str]) -> str:
    return _junction(parts, "AND", "true", "false")


def _case(branches: Iterable[tuple[str, str]], default: str | None = None) -> str:
    """CASE true WHEN ... (see the module docstring) with constant conditions folded away; default None = no
    ELSE (NULL)."""
    whens = []
    for cond, val in branches:
        if cond == "false":
            continue
        if cond == "true":
            default = val
            break
        whens.append((cond, val))
    if not whens:
        return default if default is not None else "NULL"
    body = " ".join(f"WHEN {c} THEN {v}" for c, v in whens)
    return f"CASE true {body}" + (f" ELSE {default}" if default is not None else "") + " END"


class _Compiler:
    def __init__(self, state: ServerState, encoding: str | None, jit_huge_methods: bool = False,
                 map_hash_min: int | None = None):
        self.map_hash_min = map_hash_min
        self.max_compiled = COMPILE_MAX_CHARS_JIT if jit_huge_methods else COMPILE_MAX_CHARS
        self._regex_memo: dict[tuple, str] = {}
        # a composite built on demand (the row key) -> its (char_length, octet_length) from its parts
        self.lengths: dict[str, tuple[str, str]] = {}
        self.compiled_row = False  # while compiling the row table code that whole-stage codegen compiles
        self.constant_chars = 0  # characters of its dotted paths' literals (constants, not code)
        self.lctn = state.lower_case_table_names
        chans = [_chan(ch.name, ch.filters, self.lctn) for ch in state.channels if ch.name == ch.name.lower()]
        self.chans = chans
        used = "".join(ch.name for ch in chans)
        self.sep = next(s for s in ["\u0001", "\u0002", "\u0003", "\u0004", "\u001f", "\ufffe", "\uffff"]
                        + [chr(c) for c in range(0xE000, 0xF900)] if s not in used)
        trivial = [ch for ch in chans if ch.trivial]
        rest = [ch for ch in chans if not ch.trivial]
        by_sig: dict = {}
        for ch in rest:
            by_sig.setdefault(ch.signature(), []).append(ch)
        if encoding is None:
            encoding = "case" if len(by_sig) <= CASE_MAX_GROUPS else "flat"
            why = (f"{len(by_sig)} distinct non-trivial filter configurations "
                   f"{'<=' if encoding == 'case' else '>'} {CASE_MAX_GROUPS}")
        else:
            why = "forced"
        if encoding not in ("case", "flat"):
            raise ValueError(f"unknown encoding {encoding!r}")
        self.mode = encoding
        # flat sets are keyed by the channel's name, so only the case encoding can use an index
        self.index = ({ch.name: i for i, ch in enumerate(chans)}
                      if encoding == "case" and len(chans) <= CHANNEL_INDEX_MAX else None)
        if encoding == "case":
            groups = [_Group(g, False, self.sep, map_hash_min, index=self.index) for g in by_sig.values()]
        else:
            groups = [_Group(rest, True, self.sep, map_hash_min)] if rest else []
        if trivial:
            groups.append(_Group(trivial, False, self.sep, map_hash_min, index=self.index))
        self.groups = groups
        self.interpreted = False
        self.why = why

    @property
    def ctype(self) -> str:
        """The SQL type of the helpers' channel parameter."""
        return "STRING" if self.index is None else "INT"

    # ---------------------------------------------------------------- expressions

    def fold_sql(self, expr: str) -> str:
        return fold_sql(expr, self.lctn)

    def canon(self, arg: str = "channel_name") -> str:
        """The channel as the helpers take it: its index (channel_index), or its name as stored, exact
        match first (no lower() for already-lower names). NULL for a channel that does not exist."""
        if not self.chans:
            return f"CAST(NULL AS {self.ctype})"
        if self.index is not None:
            return self.channel_index(arg)
        return _case([(f"{arg} IN ({_sql_list(ch.name for ch in self.chans)})", arg)], f"lower({arg})")

    def channel_index(self, arg: str) -> str:
        """The channel's position in self.chans, from a few string comparisons once a row (lower() only
        for names not stored as given); every dispatch after that compares integers. Side by side this
        took 9-16% off should_apply at 1 rule per channel, 0-10% at 100, 6% at 200."""
        def by_name(x: str) -> str:
            return f"CASE {x} " + " ".join(f"WHEN {sql_str(n)} THEN {i}" for n, i in self.index.items())
        return f"{by_name(arg)} ELSE {by_name(f'lower({arg})')} END END"

    def groups_for(self, c: str) -> list[_Group]:
        return [_Group(g.chans, g.flat, g.sep, g.hash_min, c, g.index) for g in self.groups]

    def dispatch(self, body: Callable[[_Group], str], null_if: str | None = None, c: str = "c") -> str:
        """CASE over the channel groups (channel expression `c`); unknown channel -> NULL."""
        branches = [(null_if, "NULL")] if null_if else []
        branches += [(g.dispatch, body(g)) for g in self.groups_for(c)]
        return _case(branches)

    def lookup(self, g: _Group, d: str, mapping: Callable[[_Chan], dict]) -> str:
        """`CASE WHEN d IN (sources) THEN map[d] ELSE d END`: the map is scanned only for rewritten dbs."""
        pairs = [(ch, s, v) for ch in g.reps for s, v in mapping(ch).items()]
        if not pairs:
            return d
        guard = g.member(d, [(ch, s) for ch, s, _ in pairs])
        if len({v for _, _, v in pairs}) == 1:
            return _case([(guard, sql_str(pairs[0][2]))], d)
        keyed = [((ch.name + self.sep + s) if g.flat else s, v) for ch, s, v in pairs]
        return _case([(guard, self._map_get(g.keyed(d), keyed))], d)

    def _map_get(self, key: str, pairs: list[tuple[str, str]]) -> str:
        def one(ps):
            return "element_at(map(" + ", ".join(f"{sql_str(k)}, {sql_str(v)}" for k, v in ps) + f"), {key})"
        if len(pairs) <= MAP_CHUNK:
            return one(pairs)
        buckets: dict = {}
        for k, v in pairs:
            buckets.setdefault(len(k.encode("utf-8")), []).append((k, v))
        whens = []
        for n, ps in sorted(buckets.items()):
            ps.sort()
            inner = [one(ps[i:i + MAP_CHUNK]) for i in range(0, len(ps), MAP_CHUNK)]
            whens.append((f"octet_length({key}) = {n}", inner[0] if len(inner) == 1 else f"coalesce({', '.join(inner)})"))
        return _case(whens)

    def key_db(self, d: str, c: str = "c") -> str:
        """The folded, rewritten database of a folded db `d` (the db part of table keys)."""
        gs = [g for g in self.groups_for(c) if any(ch.key_map for ch in g.reps)]
        if not gs:
            return d
        return _case([(g.dispatch, self.lookup(g, d, lambda ch: ch.key_map)) for g in gs], d)

    def pair_member(self, g: _Group, k: str, t: str, pairs: Iterable[tuple[_Chan, str]], cut: int = 0) -> str:
        """The row key `k.t` (k and t dot-free) is one of the channel's `db.table` values; with `cut`, k.t
        starts with one of them (table parts `cut` characters long).

        A hash of the parts, `hash(k, t) IN (ints)`, rules out nearly every row without building the key;
        the exact test behind it builds the key only for the rows whose hash is one of the values'."""
        split = [(ch, v.split(".")) for ch, v in pairs if v.count(".") == 1]  # others cannot match k.t
        if not split:
            return "false"
        tt = f"left({t}, {cut})" if cut else t
        h = f"hash({', '.join([g.c, k, tt] if g.flat else [k, tt])})"
        hashes = sorted({spark_hash(*([ch.name] if g.flat else []), a, b) for ch, (a, b) in split})
        exact = g.member(f"concat({k}, '.', {tt})", [(ch, f"{a}.{b}") for ch, (a, b) in split])
        return f"coalesce({h} IN ({', '.join(map(str, hashes))}) AND {exact})"

    def db_code(self, g: _Group, d: str) -> str:
        """2 do_db miss, 3 ignore_db hit, 16 do_db hit, 17 ignore_db miss, 18 no db rules."""
        if not g.flat:
            ch = g.chans[0]
            if ch.do_db:
                return _case([(g.member(d, [(ch, v) for v in ch.pass_db]), "16")], "2")
            if ch.has_db_rules:
                return _case([(g.member(d, [(ch, v) for v in ch.rej_db]), "3")], "17")
            return "18"
        do = g.member(d, [(ch, v) for ch in g.reps for v in ch.pass_db])
        ign = g.member(d, [(ch, v) for ch in g.reps for v in ch.rej_db])
        return _case([(g.cond(lambda ch: ch.do_db), _case([(do, "16")], "2")),
                      (ign, "3"), (g.cond(lambda ch: ch.has_db_rules), "17")], "18")

    # ---------------------------------------------------------------- wildcard lists

    def rx_parts(self, g: _Group, items: list, subject: str) -> list[str]:
        """(channel, tokens) patterns over `subject`, exactly: `%`-free ones by length and masked equality
        (fixed_parts), the others as chunked, trie-factored, anchored RLIKEs."""
        fixed = [(ch, toks) for ch, toks in items if ANY not in toks and ONE in toks]
        rest = [(ch, toks) for ch, toks in items if ANY in toks or ONE not in toks]
        return self.fixed_parts(g, fixed, subject) + self.regex_parts(g, rest, subject)

    def fixed_parts(self, g: _Group, items: list, subject: str) -> list[str]:
        """Patterns with `_` and no `%` match only subjects of one length, and then only by the characters
        at their literal positions: one lookup of the subject's length, then per length one `concat(substring
        ...) IN (...)` hash lookup per distinct set of `_` positions -- no regex on the common path.

        lower_case_table_names=0 compares bytes (`_` is one byte): the test is on octet_length, and the
        masked form is exact only for ASCII subjects (char_length = octet_length); a non-ASCII subject of
        one of the lengths goes to the byte regex of the patterns.
        """
        if not items:
            return []
        built = subject in self.lengths and not g.flat  # its length is known without building it
        s = g.keyed(subject)
        by_len: dict[int, list] = {}
        for ch, toks in items:
            seq = g.prefix_toks(ch) + tuple(toks)
            n = len(seq) if self.lctn else sum(1 if t == ONE else len(t.encode("utf-8")) for t in seq)
            by_len.setdefault(n, []).append(seq)
        size = f"char_length({s})" if self.lctn else f"octet_length({s})"
        per_len = []
        for n, group in sorted(by_len.items()):
            # lctn=0: only ASCII patterns can match the ASCII subjects the masked form is exact for
            seqs = [seq for seq in group if self.lctn or all(t == ONE or t.isascii() for t in seq)]
            shapes: dict[tuple, set] = {}
            for seq in seqs:
                ones = tuple(i for i, t in enumerate(seq) if t == ONE)
                shapes.setdefault(ones, set()).add("".join(t for t in seq if t != ONE))

            def mask(ones: tuple, vals: Iterable[str]) -> str:
                runs = _runs(s, ones, n)
                if not runs:
                    return "true"
                expr = runs[0] if len(runs) == 1 else f"concat({', '.join(runs)})"
                vals = sorted(set(vals))
                return _in_list(expr, vals, self.map_hash_min) if len(vals) > 1 else f"{expr} = {sql_str(vals[0])}"

            masked = [mask(ones, vals) for ones, vals in sorted(shapes.items())]
            if len(masked) > 2:  # every shape's `_` positions masked: one lookup rules out most rows
                union = tuple(sorted({i for ones in shapes for i in ones}))
                guard = mask(union, ["".join(t for i, t in enumerate(seq) if i not in union) for seq in seqs])
                masked = [_and([guard, _or(masked)])]
            per_len.append((n, _or(masked)))
        # one lookup of the subject's length first: most rows have none of the patterns' lengths
        outer = self.lengths[subject][0 if self.lctn else 1] if built else size
        lens = f"{outer} IN ({', '.join(str(n) for n in sorted(by_len))})"

        def pick(xs: list) -> str:
            """Binary search on the length: Spark's interpreted CASE indexes a List, O(branches^2)."""
            if len(xs) <= 3:
                return _case([(f"{size} = {n}", e) for n, e in xs], "false")
            mid = len(xs) // 2
            return _case([(f"{size} < {xs[mid][0]}", pick(xs[:mid]))], pick(xs[mid:]))

        exact = pick(per_len)
        if not self.lctn:
            slow = _or(self.regex_parts(g, items, subject))
            exact = _case([(f"char_length({s}) = {size}", exact)], slow)
        return [f"coalesce({lens} AND {exact})"]

    def regex_parts(self, g: _Group, items: list, subject: str) -> list[str]:
        """Chunked, trie-factored, anchored RLIKEs of (channel, tokens) over `subject` (exact, any tokens).

        A chunk containing `_` under lower_case_table_names=0 matches the latin-1 view of the UTF-8 bytes."""
        items = sorted(items, key=lambda it: (it[0].name, str(it[1])))
        chunks, cur, size = [], [], 0
        for ch, toks in items:
            est = 4 * (len(toks) + (len(ch.name) + 1 if g.flat else 0)) + 8
            if cur and size + est > REGEX_CHUNK:
                chunks.append(cur)
                cur, size = [], 0
            cur.append((ch, toks))
            size += est
        if cur:
            chunks.append(cur)
        out = []
        for chunk in chunks:
            byte_mode = self.lctn == 0 and any(ONE in toks for _, toks in chunk)
            seqs = tuple(g.prefix_toks(ch) + tuple(toks) for ch, toks in chunk)
            rx = self._regex_memo.get((seqs, byte_mode))
            if rx is None:  # the row and statement codes repeat lists: at 10,000 rules 327 calls, 94 distinct
                rx = self._regex_memo[seqs, byte_mode] = _trie_regex(seqs, byte_mode)
            subj = g.keyed(subject)
            out.append(f"{_latin1(subj) if byte_mode else subj} RLIKE {sql_str(rx)}")
        return out

    def key_match(self, g: _Group, items: list, key: str, compact: bool = False) -> str:
        """Any pattern matches the whole key: exact keys by InSet, the rest by regex (rare paths only);
        `compact`: `_`-patterns in the regex too (less code, for a path few rows take)."""
        exact = [(ch, _lits(t)) for ch, t in items if _lits(t) is not None]
        allc = {ch.name for ch, t in items if t == (ANY,)}
        rest = [(ch, t) for ch, t in items if _lits(t) is None and t != (ANY,)]
        rx = self.regex_parts(g, rest, key) if compact else self.rx_parts(g, rest, key)
        return _or([g.cond(lambda c: c.name in allc), g.member(key, exact)] + rx)

    def sub_match(self, g: _Group, items: list, subject: str) -> list[str]:
        """Patterns over one dot-free name: InSet for exact names, left()/right() IN for prefixes/suffixes
        (fix_test), one regex for the rest."""
        exact, allc, rx = [], set(), []
        fixes: dict[str, list] = {"prefix": [], "suffix": []}
        for ch, toks in items:
            f = _sub_form(toks)
            if f[0] == "exact":
                exact.append((ch, f[1]))
            elif f[0] == "all":
                allc.add(ch.name)
            elif f[0] == "regex":
                rx.append((ch, toks))
            else:
                fixes[f[0]].append((ch, f[1]))
        out = [g.cond(lambda c: c.name in allc), g.member(subject, exact)]
        out += [self.fix_test(g, subject, kind, pairs) for kind, pairs in fixes.items()]
        return out + self.rx_parts(g, rx, subject)

    def fix_test(self, g: _Group, subject: str, kind: str, pairs: list[tuple[_Chan, str]]) -> str:
        """`subject` starts (kind='prefix') or ends ('suffix') with one of the channel's literals.

        Few literals of one length: a chain of startswith()/endswith(), which compare bytes in place; more:
        one left()/right() IN (...), a substring copy and a hash lookup. Beyond MAX_LENGTH_GROUPS lengths, a
        guard first: the literals cut to the shortest length, so most rows pay a single test."""
        if not pairs:
            return "false"
        by_len: dict[int, list] = {}
        for ch, v in pairs:
            by_len.setdefault(len(v), []).append((ch, v))
        tests = [self._fix(g, subject, kind, n, ps) for n, ps in sorted(by_len.items())]
        if len(tests) <= MAX_LENGTH_GROUPS:
            return _or(tests)
        m = min(by_len)
        cut = [(ch, v[:m] if kind == "prefix" else v[len(v) - m:]) for ch, v in pairs]
        return _and([self._fix(g, subject, kind, m, cut), _or(tests)])

    def _fix(self, g: _Group, subject: str, kind: str, n: int, pairs: list[tuple[_Chan, str]]) -> str:
        """`subject` starts/ends with one of `pairs`' literals, all `n` characters long."""
        vals = sorted({v for _, v in pairs})
        if self.compiled_row and not g.flat and len(vals) <= FIX_CHAIN_MAX:
            fn = "startswith" if kind == "prefix" else "endswith"
            return _or(f"{fn}({subject}, {sql_str(v)})" for v in vals)
        return g.member(f"{'left' if kind == 'prefix' else 'right'}({subject}, {n})", pairs)

    def fast_match(self, g: _Group, items: list, k: str, t: str, key: str, rich: bool) -> str:
        """A wild list on a row whose db part `k` and table `t` hold no '.': the pattern's one literal dot
        is then the separator, so 'A.B' matches iff A matches k and B matches t. Patterns with a literal A
        can only match on the rich path (k is one of the rules' literal databases)."""
        db_all, dbg, tblg, on_t, on_d, keyrx, split = [], [], [], [], [], [], []
        for ch, toks in items:
            dots = [i for i, x in enumerate(toks) if x == "."]
            if len(dots) != 1:
                if not dots:  # no literal dot (MySQL refuses such patterns): the whole key
                    keyrx.append((ch, toks))
                continue  # two or more literal dots cannot match dot-free parts
            a, b = toks[:dots[0]], toks[dots[0] + 1:]
            la, lb = _lits(a), _lits(b)
            if ANY not in toks and ONE in toks and not g.flat and self.compiled_row:
                if la is None or rich:
                    split.append((ch, a, b))
            elif la is not None:
                if rich:
                    (db_all if b == (ANY,) else dbg).append((ch, toks, la))
            elif a == (ANY,):
                on_t.append((ch, b))
            elif b == (ANY,):
                on_d.append((ch, a))
            elif lb is not None:
                tblg.append((ch, toks, lb))
            else:
                keyrx.append((ch, toks))
        parts = self.sub_match(g, on_t, t) + self.sub_match(g, on_d, k)
        # literal database, table part exact or a prefix: the whole key is exact or has a literal prefix
        key_exact, key_prefix, rest = [], [], []
        for ch, toks, la in dbg:
            f = _sub_form(toks[len(la) + 1:])
            if f[0] == "exact":
                key_exact.append((ch, la + "." + f[1]))
            elif f[0] == "prefix":
                key_prefix.append((ch, la + "." + f[1]))
            else:
                rest.append((ch, toks, la))
        if not self.compiled_row:  # interpreted: the key is bound once, and each test is one node
            parts += [g.member(key, key_exact), self.fix_test(g, key, "prefix", key_prefix)]
            key_prefix = []
        else:
            parts.append(self.pair_member(g, k, t, key_exact))
        by_cut: dict[int, list] = {}
        for ch, v in key_prefix:
            by_cut.setdefault(len(v) - v.index(".") - 1, []).append((ch, v))
        tests = [self.pair_member(g, k, t, ps, cut=n) for n, ps in sorted(by_cut.items())]
        if len(tests) > 1:
            tests = [_and([g.member(k, [(ch, v.split(".")[0]) for ch, v in key_prefix]), _or(tests)])]
        parts += tests
        dbg = rest
        for subject, exact, guarded in ((k, db_all, dbg), (t, [], tblg)):
            hit = g.member(subject, [(ch, v) for ch, _, v in exact])
            if not guarded:
                parts.append(hit)
                continue
            rx = _or(self.rx_parts(g, [(ch, toks) for ch, toks, _ in guarded], key))
            both = g.member(subject, [(ch, v) for ch, _, v in exact + guarded])
            parts.append(f"coalesce({both} AND {rx})" if not exact else f"coalesce({both} AND coalesce({hit} OR {rx}))")
        return _or(parts + self.fixed_split(g, split, k, t, key) + self.rx_parts(g, keyrx, key))

    def fixed_split(self, g: _Group, items: list, k: str, t: str, key: str) -> list[str]:
        """`%`-free patterns 'A.B' with a `_` (not flat): A matches the dot-free k and B the dot-free t, so
        the lengths of k and t select the patterns (one lookup of both as one number), and per pair of `_`
        positions one masked `concat(substring(k ...), substring(t ...)) IN (...)`; the key is never built.

        lower_case_table_names=0 compares bytes: a non-ASCII k or t of the patterns' lengths goes to the
        byte regex over the key, built only then."""
        if not items:
            return []
        lctn = self.lctn

        def size(toks: tuple) -> int:
            return len(toks) if lctn else sum(1 if x == ONE else len(x.encode("utf-8")) for x in toks)

        by_len: dict[tuple, dict] = {}
        for ch, a, b in items:
            if not lctn and not all(x == ONE or x.isascii() for x in a + b):
                continue  # matches only non-ASCII names: the byte regex below
            ones = (tuple(i for i, x in enumerate(a) if x == ONE), tuple(i for i, x in enumerate(b) if x == ONE))
            lit = "".join(x for x in a if x != ONE) + "".join(x for x in b if x != ONE)
            by_len.setdefault((size(a), size(b)), {}).setdefault(ones, set()).add(lit)
        ln = "char_length" if lctn else "octet_length"
        both = f"coalesce({ln}({k}) * 4294967296 + {ln}({t}))"  # a BIGINT: exact for any lengths
        tests = []
        for (i, j), shapes in sorted(by_len.items()):
            masked = []
            for (oa, ob), lits in sorted(shapes.items()):
                runs = _runs(k, oa, i) + _runs(t, ob, j)
                expr = "''" if not runs else runs[0] if len(runs) == 1 else f"concat({', '.join(runs)})"
                masked.append(_in_list(expr, lits, self.map_hash_min))
            tests.append((f"{ln}({k}) = {i} AND {ln}({t}) = {j}", _or(masked)))
        exact = _case(tests, "false")
        lens = f"{both} IN ({', '.join(str(n) for n in sorted({(size(a) << 32) + size(b) for _, a, b in items}))})"
        if lctn:
            return [f"coalesce({lens} AND {exact})"]
        # after the O(1) length test: char_length() reads the whole name
        ascii_ = f"char_length({k}) = octet_length({k}) AND char_length({t}) = octet_length({t})"
        regex = _or(self.regex_parts(g, [(ch, a + (".",) + b) for ch, a, b in items], key))
        return [f"coalesce({lens} AND {_case([(ascii_, exact)], regex)})"]

    def rich_dbs(self, g: _Group) -> list[tuple[_Chan, str]]:
        """Databases whose rows can match an exact table rule or a pattern with a literal database."""
        out = []
        for ch in g.reps:
            dbs = {v.split(".")[0] for v in ch.dot | ch.igt if v.count(".") == 1}
            for toks in ch.wdo + ch.wig:
                dots = [i for i, x in enumerate(toks) if x == "."]
                if len(dots) == 1 and _lits(toks[:dots[0]]) is not None:
                    dbs.add(_lits(toks[:dots[0]]))
            out += [(ch, d) for d in sorted(dbs)]
        return out

    # ---------------------------------------------------------------- table tiers

    def tiers(self, g: _Group, key: str, wdo: str, wig: str, exact: bool = True,
              member: Callable | None = None) -> str:
        """tables_verdict for one key: 10 do_table, 11 ignore_table, 12 wild do, 13 wild ignore, 14/15
        DEFAULT (true/false). `member(pairs)` tests the exact sets (default: the key IN (...))."""
        member = member or (lambda pairs: g.member(key, pairs))
        sets = [(member([(ch, v) for ch in g.reps for v in ch.dot]), "10"),
                (member([(ch, v) for ch in g.reps for v in ch.igt]), "11")] if exact else []
        return _case(sets + [(wdo, "12"), (wig, "13")], _case([(g.cond(lambda ch: ch.default_true), "14")], "15"))

    def table_code(self, g: _Group, key: str) -> str:
        """Statement tables (inside a lambda: no helper functions, key only); 0 = no table rules."""
        if not any(ch.table_rules for ch in g.reps):
            return "0"
        t = self.tiers(g, key, self.key_match(g, [(ch, x) for ch in g.reps for x in ch.wdo], key),
                       self.key_match(g, [(ch, x) for ch in g.reps for x in ch.wig], key))
        on = g.cond(lambda ch: ch.table_rules)
        return _case([(on, t)], "0")

    def row_table_code(self, g: _Group, k: str, t: str, key: str) -> str:
        """A row's table code. A '.' inside the db or table name (rare) -> whole-key forms; otherwise tests
        on k and t. Compiled, one path for all dot-free names, and the dotted names' path is compact (its
        code is compiled too, but few rows run it). Interpreted, the rows whose db is not among the rules'
        literal databases skip the exact sets and the literal-database patterns."""
        if not any(ch.table_rules for ch in g.reps):
            return "0"
        wdo = [(ch, x) for ch in g.reps for x in ch.wdo]
        wig = [(ch, x) for ch in g.reps for x in ch.wig]
        compiled = self.compiled_row
        slow = self.tiers(g, key, self.key_match(g, wdo, key, compiled), self.key_match(g, wig, key, compiled))
        rich = self.tiers(g, key, self.fast_match(g, wdo, k, t, key, True),
                          self.fast_match(g, wig, k, t, key, True),
                          member=(lambda ps: self.pair_member(g, k, t, ps)) if compiled else None)
        if compiled:
            body = _case([(f"contains({k}, '.') OR contains({t}, '.')", slow)], rich)
            self.constant_chars += sum(map(len, _LITERAL.findall(slow)))
        else:
            poor = self.tiers(g, key, self.fast_match(g, wdo, k, t, key, False),
                              self.fast_match(g, wig, k, t, key, False), exact=False)
            body = _case([(f"contains({k}, '.') OR contains({t}, '.')", slow), (g.member(k, self.rich_dbs(g)), rich)], poor)
        on = g.cond(lambda ch: ch.table_rules)
        return _case([(on, body)], "0")

    def statement_code(self, g: _Group, cmd: str, ts: str, dc: str, k: str, d: str) -> str:
        """Steps 3-5 of decide_statement for one group (steps 0-2 are shared)."""
        branches = []
        nodb = g.cond(lambda ch: not ch.has_db_rules)
        wild_on = any(ch.wdo or ch.wig for ch in g.reps)
        if nodb != "false" and wild_on:
            # CREATE/ALTER/DROP DATABASE without db rules: wild rules on the key 'db.' decide, or fall through
            dbkey = f"concat({k}, '.')"
            dbcmd = f"{cmd} IN ({_sql_list(DATABASE_COMMANDS)}) AND {dc} = 18"
            wdo = self.key_match(g, [(ch, x) for ch in g.reps for x in ch.wdo], dbkey)
            wig = self.key_match(g, [(ch, x) for ch in g.reps for x in ch.wig], dbkey)
            branches.append((_and([dbcmd, wdo]), "4"))
            branches.append((_and([dbcmd, wig]), "5"))
            branches.append((_and([dbcmd, g.cond(lambda ch: bool(ch.wdo))]), "6"))
        n = f"coalesce(size({ts}), 0)"
        branches.append((f"{cmd} = 'DROP_TRIGGER' AND {n} = 0", "7"))
        on = g.cond(lambda ch: ch.table_rules)
        if on != "false":
            exempt = f"{cmd} IN ({_sql_list(['SET_OPTION', DROP_TEMPORARY_IF_EXISTS])})"
            kx = f"concat({_case([('t_.db IS NULL', k)], self.fold_sql('t_.db'))}, '.', {self.fold_sql('t_.name')})"
            tables = _case([(f"{cmd} = 'DROP_TRIGGER'", f"slice({ts}, 1, 1)")],
                           f"filter({ts}, t_ -> coalesce(t_.updating, false))")
            keys = f"transform({tables}, t_ -> {kx})"
            code = self.table_code(g, "x_")
            agg = f"aggregate({keys}, 9, (acc_, x_) -> {_case([('acc_ IN (10, 11, 12, 13)', 'acc_')], code)})"
            branches.append((_and([on, f"{n} > 0"]), _case([(exempt, "8")], agg)))
        # a database statement that the wild-ignore rules did not match is applied by DEFAULT
        wig_only = g.cond(lambda ch: bool(ch.wig) and not ch.wdo and not ch.has_db_rules)
        if wig_only != "false":
            dbcmd = f"{cmd} IN ({_sql_list(DATABASE_COMMANDS)})"
            return _case(branches, _case([(_and([dbcmd, f"{dc} = 18", wig_only]), "19")], dc))
        return _case(branches, dc)

    # ---------------------------------------------------------------- functions

    def functions(self, applier: bool = False) -> list[tuple[str, str, str, str]]:
        """(name, params, return type, body) in dependency order: 4-5 helpers + the 5 public functions, or
        with `applier` the applier's set (see compile_functions).

        Few statements on purpose: CREATE FUNCTION re-analyses every function it calls.
        """
        S, P, TS = "STRING", APPLIER_PREFIX if applier else _P, STATEMENT_TYPE
        row_params = "channel_name STRING, db_name STRING, table_name STRING"
        st_params = f"channel_name STRING, command STRING, default_db STRING, tables {TS}"
        rewrite = (P + "rewrite_db" if applier else "rewrite_db", "channel_name STRING, db_name STRING", S)
        codes = [(P + "row_code", row_params, "INT"), (P + "statement_code", st_params, "INT")]
        if not self.chans:
            return [(n, p, rt, f"CAST(NULL AS {rt})") for n, p, rt in [rewrite] + (codes if applier else [
                ("should_apply", row_params, "BOOLEAN"), ("filter_decided_by", row_params, S),
                ("should_apply_statement", st_params, "BOOLEAN"), ("filter_decided_by_statement", st_params, S)])]
        # folding: a helper outside lambdas (the translate table is ~3k characters), inline inside them
        f = (lambda x: f"{P}fold({x})") if self.lctn else (lambda x: x)
        C, Fd, Ft = self.canon(), f("db_name"), f("table_name")
        # try_element_at, not element_at: Spark 4.2 treats element_at(<literal array>, <nullable index>) as
        # non-nullable and returns the last element for a NULL index (tests pin this)
        labels = "array(" + ", ".join(sql_str(LABELS[i]) for i in range(1, max(LABELS) + 1)) + ")"
        out = []

        # helpers: fold, database code, table code for one key, statement steps 3-5, row label code
        if self.lctn:
            out.append((P + "fold", "x STRING", S, self.fold_sql("x")))
        dbc = self.dispatch(lambda g: self.db_code(g, "d"), "d IS NULL")
        out.append((P + "dbc", f"c {self.ctype}, d STRING", "INT", dbc))
        # The table code is one helper, tc(c, k, t). A SQL function's arguments are computed for every row
        # before its body (a projection), so nothing that only some rows need is an argument: the key `k.t`
        # is built only where a test needs it, `hash(k, t)` only by channels with exact table tests.
        key = "concat(k, '.', t)"
        self.lengths[key] = ("(char_length(k) + char_length(t) + 1)", "(octet_length(k) + octet_length(t) + 1)")
        self.compiled_row, self.constant_chars = True, 0
        tc = self.dispatch(lambda g: self.row_table_code(g, "k", "t", key), "k IS NULL OR t IS NULL")
        self.lengths.clear()
        self.compiled_row = False
        # the size of the code: the dotted paths' regexes and sets are constants in the generated class
        if len(tc) - self.constant_chars > self.max_compiled:
            # Whole-stage codegen puts a projection's expressions into one Java method; past HotSpot's
            # 8000-byte limit it is never JIT-compiled (unless -XX:-DontCompileHugeMethods) and runs in the
            # bytecode interpreter, many times slower than Spark's expression interpreter. A higher-order
            # function is evaluated by that interpreter (CodegenFallback): the big table code runs node by
            # node, visiting only the branches it takes.
            # The arguments are bound once, as a struct: in a WHERE clause Spark does not project them and
            # would otherwise re-evaluate the rewrite and the key at every reference.
            body = self.dispatch(lambda g: self.row_table_code(g, "r_.k", "r_.t", "r_.key"), "r_.key IS NULL",
                                 c="r_.c")
            # the key is an argument here, projected (compiled) once per row, as the interpreter needs it anyway
            tc = "aggregate(array(named_struct('c', c, 'k', k, 't', t, 'key', key)), 0, (acc0_, r_) -> " + body + ")"
            self.interpreted = True
        else:
            tc = _case([("x IS NOT NULL", "x")], tc)
        fourth = "key STRING" if self.interpreted else "x INT"
        out.append((P + "tc", f"c {self.ctype}, k STRING, t STRING, {fourth}", "INT", tc))
        body = self.dispatch(lambda g: self.statement_code(g, "cmd", "ts", "dc", "k", "d"))
        stc = _case([("exists(ts, t_ -> t_ IS NULL OR t_.name IS NULL)", "NULL"), ("dc IS NULL", "NULL"),
                     (f"cmd IN ({_sql_list(TRANSACTION_CONTROL)})", "1"), ("dc IN (2, 3)", "dc")], body)
        out.append((P + "stc", f"c {self.ctype}, cmd STRING, d STRING, ts {TS}, dc INT, k STRING", "INT", stc))

        # rewrite_db
        rw = self.dispatch(lambda g: self.lookup(g, Fd, lambda ch: ch.out_map), null_if="db_name IS NULL", c=C)
        out.append((*rewrite, rw))

        # rows: `db_ok(channel, db) AND rest`, the first conjunct references only channel_name and db_name
        K = self.key_db(Fd, c=C)
        # tc's last argument: interpreted, the key; compiled, `x`: NULL for every row, but a regex to Spark
        # (4.2+, SPARK-47672), which then keeps a WHERE clause above the projection of tc's arguments instead
        # of substituting them at each of their references. It reads the raw column: no second fold.
        last = (f"concat({K}, '.', {Ft})" if self.interpreted
                else "CASE true WHEN octet_length(table_name) < 0 THEN CAST(table_name RLIKE '' AS INT) END")
        tc_call = f"{P}tc({C}, {K}, {Ft}, {last})"
        # the row's code from (database code, table code); a lambda, not a helper function: Spark refuses SQL
        # functions whose arguments hold a lambda (the interpreted table code)
        row_code = (f"aggregate(array(named_struct('dc', {P}dbc({C}, {Fd}), 'tc', {tc_call})), "
                    f"0, (a_, r_) -> {_case([('r_.dc IN (2, 3)', 'r_.dc'), ('r_.tc = 0', 'r_.dc')], 'r_.tc')})")
        if not applier:
            out.append(("should_apply", row_params, "BOOLEAN",
                        f"{P}dbc({C}, {Fd}) >= 16 AND {tc_call} IN ({', '.join(map(str, ROW_TABLE_TRUE))})"))
            out.append(("filter_decided_by", row_params, S, f"try_element_at({labels}, {row_code})"))

        # statements
        Fddb = f("coalesce(default_db, '')")
        cmd = "upper(coalesce(nullif(command, ''), 'OTHER'))"
        stc_call = f"{P}stc({C}, {cmd}, {Fddb}, tables, {P}dbc({C}, {Fddb}), {self.key_db(Fddb, c=C)})"
        if applier:
            return out + [(*codes[0], row_code), (*codes[1], stc_call)]
        out.append(("should_apply_statement", st_params, "BOOLEAN",
                    f"{stc_call} IN ({', '.join(map(str, TRUE_CODES))})"))
        out.append(("filter_decided_by_statement", st_params, S, f"try_element_at({labels}, {stc_call})"))
        return out


def compile_functions(state: ServerState, *, encoding: str | None = None, jit_huge_methods: bool = False,
                      applier: bool = False, map_hash_min: int | None = None,
                      guard: Guard | None = None) -> CompiledFunctions:
    """The CREATE FUNCTION statements for `state`; `encoding` ('case' / 'flat') overrides the size rule.

    applier: instead of the public functions, the applier's set under APPLIER_PREFIX: its own helpers,
    `rewrite_db`, and `row_code` / `statement_code`, the INT code behind both `should_apply*` (code in
    TRUE_CODES) and `filter_decided_by*` (LABELS[code]), built from the same expressions. The applier reads
    one code per shape instead of a verdict and a label (deciding costs about half: bench_apply.py
    --decide-ab), its CREATEs analyse the big table code half as often, and it never replaces the helpers
    that a session's public functions call.

    jit_huge_methods: the session's JVMs run with -XX:-DontCompileHugeMethods (sparkenv.jit_huge_methods
    tells), so larger table codes stay compiled: at 100 rules per channel 2.7x less CPU than interpreted.

    map_hash_min: the session's spark.sql.optimizer.mapLookupHashThreshold (sparkenv.map_lookup_hash_min;
    None where Spark has none): long exact lists become membership maps (_in_list), which CREATE FUNCTION
    and every query inlining them analyse as one node instead of one per value.

    guard: wraps the public functions' bodies (not the helpers', so it is checked once per call).
    """
    comp = _Compiler(state, encoding, jit_huge_methods, map_hash_min)
    funcs = comp.functions(applier)
    if guard is not None:
        funcs = [(n, p, rt, body if n.startswith((_P, APPLIER_PREFIX)) else
                  f"CASE WHEN {guard.condition} THEN {body} ELSE raise_error({guard.message}) END")
                 for n, p, rt, body in funcs]
    stmts = tuple(f"CREATE OR REPLACE TEMPORARY FUNCTION {name}({params}) RETURNS {rt} RETURN {body}"
                  for name, params, rt, body in funcs)
    size = sum(map(len, stmts))
    maps = (f" or, from {SET_MAP_MIN} values, maps (hash lookup from {map_hash_min} entries)"
            if map_hash_min is not None and map_hash_min <= MAP_PAD_MAX else "")
    desc = (f"{comp.mode}: {comp.why}; {len(comp.chans)} channels in {len(comp.groups)} CASE branches"
            f"{', dispatched by INT index' if comp.index is not None else ''}"
            f"{' (one channel-keyed flat branch)' if comp.mode == 'flat' and any(g.flat for g in comp.groups) else ''}"
            f"; lower_case_table_names={comp.lctn}; exact lists as IN/InSet"
            f"{maps}"
            f", rewrite behind an InSet guard, "
            f"wildcards as InSet/prefix/suffix forms plus {sum(s.count(' RLIKE ') for s in stmts)} guarded trie "
            f"RLIKE chunk(s); "
            f"row table code {'interpreted (past ' + str(comp.max_compiled) + ' chars)' if comp.interpreted else 'compiled'}"
            f"{' (JIT of huge methods on)' if jit_huge_methods else ''}; "
            f"{size} chars of SQL")
    return CompiledFunctions(stmts, desc)
