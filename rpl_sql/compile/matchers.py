"""SQL tests of pattern lists: one name, a whole key, or a row's dot-free db and table parts.

Each test is exact for MySQL's LIKE under the state's lower_case_table_names and cheap on the common path:
InSets and prefix/suffix lookups first, masked fixed-length forms for `_`, anchored trie regexes last.
"""
from __future__ import annotations

from typing import Iterable

from rpl_sql.compile.channels import ChannelGroup, ChannelRules
from rpl_sql.compile.codes import FIX_CHAIN_MAX, MAX_LENGTH_GROUPS, REGEX_CHUNK
from rpl_sql.compile.hashing import spark_hash
from rpl_sql.compile.literals import in_list, latin1, masked_runs, sql_and, sql_case, sql_or, sql_str
from rpl_sql.compile.patterns import ANY, ONE, literal_of, name_form, trie_regex

ROW_KEY = "concat(k, '.', t)"  # the row key inside tc, built only where a test needs it ...
ROW_KEY_LENGTHS = ("(char_length(k) + char_length(t) + 1)",  # ... and its lengths, known from its parts
                   "(octet_length(k) + octet_length(t) + 1)")


class Matchers:
    """Builds the tests; `map_hash_min` is the session's map lookup threshold (see literals.in_list). About
    290 lines: fast_match and fixed_split combine every other test, and splitting them apart would pass the
    same five arguments through another layer."""

    def __init__(self, lctn: int, map_hash_min: int | None):
        self.lctn = lctn
        self.map_hash_min = map_hash_min
        self._regex_memo: dict[tuple, str] = {}

    def pair_member(self, g: ChannelGroup, k: str, t: str, pairs: Iterable[tuple[ChannelRules, str]],
                    cut: int = 0) -> str:
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

    # ---------------------------------------------------------------- wildcard lists

    def rx_parts(self, g: ChannelGroup, items: list, subject: str) -> list[str]:
        """(channel, tokens) patterns over `subject`, exactly: `%`-free ones by length and masked equality
        (fixed_parts), the others as chunked, trie-factored, anchored RLIKEs."""
        fixed = [(ch, toks) for ch, toks in items if ANY not in toks and ONE in toks]
        rest = [(ch, toks) for ch, toks in items if ANY in toks or ONE not in toks]
        return self.fixed_parts(g, fixed, subject) + self.regex_parts(g, rest, subject)

    def fixed_parts(self, g: ChannelGroup, items: list, subject: str) -> list[str]:
        """Patterns with `_` and no `%` match only subjects of one length, and then only by the characters
        at their literal positions: one lookup of the subject's length, then per length one `concat(substring
        ...) IN (...)` hash lookup per distinct set of `_` positions -- no regex on the common path.

        lower_case_table_names=0 compares bytes (`_` is one byte): the test is on octet_length, and the
        masked form is exact only for ASCII subjects (char_length = octet_length); a non-ASCII subject of
        one of the lengths goes to the byte regex of the patterns.
        """
        if not items:
            return []
        built = subject == ROW_KEY and not g.flat  # its length is known without building it
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
                runs = masked_runs(s, ones, n)
                if not runs:
                    return "true"
                expr = runs[0] if len(runs) == 1 else f"concat({', '.join(runs)})"
                vals = sorted(set(vals))
                return in_list(expr, vals, self.map_hash_min) if len(vals) > 1 else f"{expr} = {sql_str(vals[0])}"

            masked = [mask(ones, vals) for ones, vals in sorted(shapes.items())]
            if len(masked) > 2:  # every shape's `_` positions masked: one lookup rules out most rows
                union = tuple(sorted({i for ones in shapes for i in ones}))
                guard = mask(union, ["".join(t for i, t in enumerate(seq) if i not in union) for seq in seqs])
                masked = [sql_and([guard, sql_or(masked)])]
            per_len.append((n, sql_or(masked)))
        # one lookup of the subject's length first: most rows have none of the patterns' lengths
        outer = ROW_KEY_LENGTHS[0 if self.lctn else 1] if built else size
        lens = f"{outer} IN ({', '.join(str(n) for n in sorted(by_len))})"

        def pick(xs: list) -> str:
            """Binary search on the length: Spark's interpreted CASE indexes a List, O(branches^2)."""
            if len(xs) <= 3:
                return sql_case([(f"{size} = {n}", e) for n, e in xs], "false")
            mid = len(xs) // 2
            return sql_case([(f"{size} < {xs[mid][0]}", pick(xs[:mid]))], pick(xs[mid:]))

        exact = pick(per_len)
        if not self.lctn:
            slow = sql_or(self.regex_parts(g, items, subject))
            exact = sql_case([(f"char_length({s}) = {size}", exact)], slow)
        return [f"coalesce({lens} AND {exact})"]

    def regex_parts(self, g: ChannelGroup, items: list, subject: str) -> list[str]:
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
                rx = self._regex_memo[seqs, byte_mode] = trie_regex(seqs, byte_mode)
            subj = g.keyed(subject)
            out.append(f"{latin1(subj) if byte_mode else subj} RLIKE {sql_str(rx)}")
        return out

    def key_match(self, g: ChannelGroup, items: list, key: str, compact: bool = False) -> str:
        """Any pattern matches the whole key: exact keys by InSet, the rest by regex (rare paths only);
        `compact`: `_`-patterns in the regex too (less code, for a path few rows take)."""
        exact = [(ch, literal_of(t)) for ch, t in items if literal_of(t) is not None]
        allc = {ch.name for ch, t in items if t == (ANY,)}
        rest = [(ch, t) for ch, t in items if literal_of(t) is None and t != (ANY,)]
        rx = self.regex_parts(g, rest, key) if compact else self.rx_parts(g, rest, key)
        return sql_or([g.cond(lambda c: c.name in allc), g.member(key, exact)] + rx)

    def sub_match(self, g: ChannelGroup, items: list, subject: str, compiled: bool = False) -> list[str]:
        """Patterns over one dot-free name: InSet for exact names, left()/right() IN for prefixes/suffixes
        (fix_test), one regex for the rest."""
        exact, allc, rx = [], set(), []
        fixes: dict[str, list] = {"prefix": [], "suffix": []}
        for ch, toks in items:
            f = name_form(toks)
            if f[0] == "exact":
                exact.append((ch, f[1]))
            elif f[0] == "all":
                allc.add(ch.name)
            elif f[0] == "regex":
                rx.append((ch, toks))
            else:
                fixes[f[0]].append((ch, f[1]))
        out = [g.cond(lambda c: c.name in allc), g.member(subject, exact)]
        out += [self.fix_test(g, subject, kind, pairs, compiled) for kind, pairs in fixes.items()]
        return out + self.rx_parts(g, rx, subject)

    def fix_test(self, g: ChannelGroup, subject: str, kind: str, pairs: list[tuple[ChannelRules, str]],
                 compiled: bool = False) -> str:
        """`subject` starts (kind='prefix') or ends ('suffix') with one of the channel's literals.

        Few literals of one length: a chain of startswith()/endswith(), which compare bytes in place; more:
        one left()/right() IN (...), a substring copy and a hash lookup. Beyond MAX_LENGTH_GROUPS lengths, a
        guard first: the literals cut to the shortest length, so most rows pay a single test."""
        if not pairs:
            return "false"
        by_len: dict[int, list] = {}
        for ch, v in pairs:
            by_len.setdefault(len(v), []).append((ch, v))
        tests = [self._fix(g, subject, kind, n, ps, compiled) for n, ps in sorted(by_len.items())]
        if len(tests) <= MAX_LENGTH_GROUPS:
            return sql_or(tests)
        m = min(by_len)
        cut = [(ch, v[:m] if kind == "prefix" else v[len(v) - m:]) for ch, v in pairs]
        return sql_and([self._fix(g, subject, kind, m, cut, compiled), sql_or(tests)])

    def _fix(self, g: ChannelGroup, subject: str, kind: str, n: int, pairs: list[tuple[ChannelRules, str]],
             compiled: bool) -> str:
        """`subject` starts/ends with one of `pairs`' literals, all `n` characters long; `compiled` code
        compares few literals in place (startswith), the interpreter prefers one lookup."""
        vals = sorted({v for _, v in pairs})
        if compiled and not g.flat and len(vals) <= FIX_CHAIN_MAX:
            fn = "startswith" if kind == "prefix" else "endswith"
            return sql_or(f"{fn}({subject}, {sql_str(v)})" for v in vals)
        return g.member(f"{'left' if kind == 'prefix' else 'right'}({subject}, {n})", pairs)

    def fast_match(self, g: ChannelGroup, items: list, k: str, t: str, key: str, rich: bool, compiled: bool) -> str:
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
            la, lb = literal_of(a), literal_of(b)
            if ANY not in toks and ONE in toks and not g.flat and compiled:
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
        parts = self.sub_match(g, on_t, t, compiled) + self.sub_match(g, on_d, k, compiled)
        # literal database, table part exact or a prefix: the whole key is exact or has a literal prefix
        key_exact, key_prefix, rest = [], [], []
        for ch, toks, la in dbg:
            f = name_form(toks[len(la) + 1:])
            if f[0] == "exact":
                key_exact.append((ch, la + "." + f[1]))
            elif f[0] == "prefix":
                key_prefix.append((ch, la + "." + f[1]))
            else:
                rest.append((ch, toks, la))
        if not compiled:  # interpreted: the key is bound once, and each test is one node
            parts += [g.member(key, key_exact), self.fix_test(g, key, "prefix", key_prefix)]
            key_prefix = []
        else:
            parts.append(self.pair_member(g, k, t, key_exact))
        by_cut: dict[int, list] = {}
        for ch, v in key_prefix:
            by_cut.setdefault(len(v) - v.index(".") - 1, []).append((ch, v))
        tests = [self.pair_member(g, k, t, ps, cut=n) for n, ps in sorted(by_cut.items())]
        if len(tests) > 1:
            tests = [sql_and([g.member(k, [(ch, v.split(".")[0]) for ch, v in key_prefix]), sql_or(tests)])]
        parts += tests
        dbg = rest
        for subject, exact, guarded in ((k, db_all, dbg), (t, [], tblg)):
            hit = g.member(subject, [(ch, v) for ch, _, v in exact])
            if not guarded:
                parts.append(hit)
                continue
            rx = sql_or(self.rx_parts(g, [(ch, toks) for ch, toks, _ in guarded], key))
            both = g.member(subject, [(ch, v) for ch, _, v in exact + guarded])
            parts.append(f"coalesce({both} AND {rx})" if not exact else f"coalesce({both} AND coalesce({hit} OR {rx}))")
        return sql_or(parts + self.fixed_split(g, split, k, t, key) + self.rx_parts(g, keyrx, key))

    def fixed_split(self, g: ChannelGroup, items: list, k: str, t: str, key: str) -> list[str]:
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
                runs = masked_runs(k, oa, i) + masked_runs(t, ob, j)
                expr = "''" if not runs else runs[0] if len(runs) == 1 else f"concat({', '.join(runs)})"
                masked.append(in_list(expr, lits, self.map_hash_min))
            tests.append((f"{ln}({k}) = {i} AND {ln}({t}) = {j}", sql_or(masked)))
        exact = sql_case(tests, "false")
        lens = f"{both} IN ({', '.join(str(n) for n in sorted({(size(a) << 32) + size(b) for _, a, b in items}))})"
        if lctn:
            return [f"coalesce({lens} AND {exact})"]
        # after the O(1) length test: char_length() reads the whole name
        ascii_ = f"char_length({k}) = octet_length({k}) AND char_length({t}) = octet_length({t})"
        regex = sql_or(self.regex_parts(g, [(ch, a + (".",) + b) for ch, a, b in items], key))
        return [f"coalesce({lens} AND {sql_case([(ascii_, exact)], regex)})"]

    def rich_dbs(self, g: ChannelGroup) -> list[tuple[ChannelRules, str]]:
        """Databases whose rows can match an exact table rule or a pattern with a literal database."""
        out = []
        for ch in g.reps:
            dbs = {v.split(".")[0] for v in ch.dot | ch.igt if v.count(".") == 1}
            for toks in ch.wdo + ch.wig:
                dots = [i for i, x in enumerate(toks) if x == "."]
                if len(dots) == 1 and literal_of(toks[:dots[0]]) is not None:
                    dbs.add(literal_of(toks[:dots[0]]))
            out += [(ch, d) for d in sorted(dbs)]
        return out
