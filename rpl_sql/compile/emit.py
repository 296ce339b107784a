"""The compiler proper: filter state to CREATE FUNCTION texts that agree exactly with `rpl_sql.filters.evaluate`."""
from __future__ import annotations

from typing import Callable

from rpl_sql.compile import codes
from rpl_sql.compile.channels import ChannelGroup, ChannelRules, channel_rules
from rpl_sql.compile.codes import (
    APPLIER_PREFIX,
    CASE_MAX_GROUPS,
    COMPILE_MAX_CHARS_JIT,
    HELPER_PREFIX,
    JVM_MIN_CHARS,
    JVM_REWRITE,
    JVM_ROW_CODE,
    JVM_STATEMENT_CODE,
    LABELS,
    MAP_PAD_MAX,
    APPLYING_DB_CODE,
    ROW_TRUE_CODES,
    ROW_TRUE_GIVEN_APPLYING_DB,
    STATEMENT_TYPE,
    TRUE_CODES,
    CompiledFunctions,
    Guard,
)
from rpl_sql.compile.literals import LITERAL, fold_sql, map_get, sql_and, sql_case, sql_list, sql_str
from rpl_sql.compile.jvm_spec import table_rules_spec
from rpl_sql.compile.matchers import ROW_KEY, Matchers
from rpl_sql.filters.evaluate import (
    DATABASE_COMMANDS,
    DROP_TEMPORARY_IF_EXISTS,
    TRANSACTION_CONTROL,
)
from rpl_sql.filters.state import ServerState

ROW_PARAMS = "channel_name STRING, db_name STRING, table_name STRING"
STATEMENT_PARAMS = f"channel_name STRING, command STRING, default_db STRING, tables {STATEMENT_TYPE}"


class _Compiler:
    """One state's compilation: channel groups, the database/table/statement codes per group, and one method
    per emitted function. About 370 lines because the codes and the functions that call them share the
    group dispatch and the channel index; the pattern tests live apart, in matchers.Matchers."""

    def __init__(self, state: ServerState, encoding: str | None, jit_huge_methods: bool = False,
                 map_hash_min: int | None = None, jvm: str | None = None):
        self.map_hash_min = map_hash_min
        self.jvm = jvm
        self.jvm_spec: str | None = None
        self.max_compiled = COMPILE_MAX_CHARS_JIT if jit_huge_methods else codes.COMPILE_MAX_CHARS
        self.lctn = state.lower_case_table_names
        self.match = Matchers(self.lctn, map_hash_min)
        chans = [channel_rules(ch.name, ch.filters, self.lctn) for ch in state.channels if ch.name == ch.name.lower()]
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
                      if encoding == "case" and len(chans) <= codes.CHANNEL_INDEX_MAX else None)
        if encoding == "case":
            groups = [ChannelGroup(g, False, self.sep, map_hash_min, index=self.index) for g in by_sig.values()]
        else:
            groups = [ChannelGroup(rest, True, self.sep, map_hash_min)] if rest else []
        if trivial:
            groups.append(ChannelGroup(trivial, False, self.sep, map_hash_min, index=self.index))
        self.groups = groups
        self.interpreted = False
        self.why = why

    @property
    def row_jvm(self) -> bool:
        """The rows' whole code is the JVM's (JVM_ROW_CODE): where the table code is its Catalyst expression,
        the database rules and the rewrite go in the same memoised lookup (table_code_helper decides)."""
        return self.jvm_spec is not None

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
        return sql_case([(f"{arg} IN ({sql_list(ch.name for ch in self.chans)})", arg)], f"lower({arg})")

    def channel_index(self, arg: str) -> str:
        """The channel's position in self.chans, from a few string comparisons once a row (lower() only
        for names not stored as given); every dispatch after that compares integers. Side by side this
        took 9-16% off should_apply at 1 rule per channel, 0-10% at 100, 6% at 200."""
        def by_name(x: str) -> str:
            return f"CASE {x} " + " ".join(f"WHEN {sql_str(n)} THEN {i}" for n, i in self.index.items())
        return f"{by_name(arg)} ELSE {by_name(f'lower({arg})')} END END"

    def groups_for(self, c: str) -> list[ChannelGroup]:
        return [ChannelGroup(g.chans, g.flat, g.sep, g.hash_min, c, g.index) for g in self.groups]

    def dispatch(self, body: Callable[[ChannelGroup], str], null_if: str | None = None, c: str = "c") -> str:
        """CASE over the channel groups (channel expression `c`); unknown channel -> NULL."""
        branches = [(null_if, "NULL")] if null_if else []
        branches += [(g.dispatch, body(g)) for g in self.groups_for(c)]
        return sql_case(branches)

    def lookup(self, g: ChannelGroup, d: str, mapping: Callable[[ChannelRules], dict]) -> str:
        """`CASE WHEN d IN (sources) THEN map[d] ELSE d END`: the map is scanned only for rewritten dbs."""
        pairs = [(ch, s, v) for ch in g.reps for s, v in mapping(ch).items()]
        if not pairs:
            return d
        guard = g.member(d, [(ch, s) for ch, s, _ in pairs])
        if len({v for _, _, v in pairs}) == 1:
            return sql_case([(guard, sql_str(pairs[0][2]))], d)
        keyed = [((ch.name + self.sep + s) if g.flat else s, v) for ch, s, v in pairs]
        return sql_case([(guard, map_get(g.keyed(d), keyed, self.map_hash_min))], d)

    def key_db(self, d: str, c: str = "c") -> str:
        """The folded, rewritten database of a folded db `d` (the db part of table keys)."""
        gs = [g for g in self.groups_for(c) if any(ch.key_map for ch in g.reps)]
        if not gs:
            return d
        return sql_case([(g.dispatch, self.lookup(g, d, lambda ch: ch.key_map)) for g in gs], d)

    def db_code(self, g: ChannelGroup, d: str) -> str:
        """2 do_db miss, 3 ignore_db hit, 16 do_db hit, 17 ignore_db miss, 18 no db rules."""
        if not g.flat:
            ch = g.chans[0]
            if ch.do_db:
                return sql_case([(g.member(d, [(ch, v) for v in ch.pass_db]), "16")], "2")
            if ch.has_db_rules:
                return sql_case([(g.member(d, [(ch, v) for v in ch.rej_db]), "3")], "17")
            return "18"
        do = g.member(d, [(ch, v) for ch in g.reps for v in ch.pass_db])
        ign = g.member(d, [(ch, v) for ch in g.reps for v in ch.rej_db])
        return sql_case([(g.cond(lambda ch: ch.do_db), sql_case([(do, "16")], "2")),
                      (ign, "3"), (g.cond(lambda ch: ch.has_db_rules), "17")], "18")

    # ---------------------------------------------------------------- table tiers

    def tiers(self, g: ChannelGroup, key: str, wdo: str, wig: str, exact: bool = True,
              member: Callable | None = None) -> str:
        """tables_verdict for one key: 10 do_table, 11 ignore_table, 12 wild do, 13 wild ignore, 14/15
        DEFAULT (true/false). `member(pairs)` tests the exact sets (default: the key IN (...))."""
        member = member or (lambda pairs: g.member(key, pairs))
        sets = [(member([(ch, v) for ch in g.reps for v in ch.dot]), "10"),
                (member([(ch, v) for ch in g.reps for v in ch.igt]), "11")] if exact else []
        return sql_case(sets + [(wdo, "12"), (wig, "13")], sql_case([(g.cond(lambda ch: ch.default_true), "14")], "15"))

    def table_code(self, g: ChannelGroup, key: str) -> str:
        """Statement tables (inside a lambda: no helper functions, key only); 0 = no table rules."""
        if not any(ch.table_rules for ch in g.reps):
            return "0"
        t = self.tiers(g, key, self.match.key_match(g, [(ch, x) for ch in g.reps for x in ch.wdo], key),
                       self.match.key_match(g, [(ch, x) for ch in g.reps for x in ch.wig], key))
        on = g.cond(lambda ch: ch.table_rules)
        return sql_case([(on, t)], "0")

    def row_table_code(self, g: ChannelGroup, k: str, t: str, key: str, compiled: bool,
                       none: str) -> tuple[str, int]:
        """A row's table code, `none` where the channel has no table rules. A '.' inside the db or table name
        (rare) -> whole-key forms; otherwise tests on k and t. Compiled, one path for all dot-free names, and
        the dotted names' path is compact (its code is compiled too, but few rows run it). Interpreted, the
        rows whose db is not among the rules' literal databases skip the exact sets and the literal-database
        patterns.

        Returns the code and how many of its characters are the dotted path's literals: constants in the
        generated class, not code that counts against the JIT's method size."""
        if not any(ch.table_rules for ch in g.reps):
            return none, 0
        wdo = [(ch, x) for ch in g.reps for x in ch.wdo]
        wig = [(ch, x) for ch in g.reps for x in ch.wig]
        constants = 0
        slow = self.tiers(g, key, self.match.key_match(g, wdo, key, compiled),
                          self.match.key_match(g, wig, key, compiled))
        rich = self.tiers(g, key, self.match.fast_match(g, wdo, k, t, key, True, compiled),
                          self.match.fast_match(g, wig, k, t, key, True, compiled),
                          member=(lambda ps: self.match.pair_member(g, k, t, ps)) if compiled else None)
        if compiled:
            body = sql_case([(f"contains({k}, '.') OR contains({t}, '.')", slow)], rich)
            constants = sum(map(len, LITERAL.findall(slow)))
        else:
            poor = self.tiers(g, key, self.match.fast_match(g, wdo, k, t, key, False, compiled),
                              self.match.fast_match(g, wig, k, t, key, False, compiled), exact=False)
            body = sql_case([(f"contains({k}, '.') OR contains({t}, '.')", slow),
                             (g.member(k, self.match.rich_dbs(g)), rich)], poor)
        on = g.cond(lambda ch: ch.table_rules)
        return sql_case([(on, body)], none), constants

    def statement_code(self, g: ChannelGroup, cmd: str, ts: str, dc: str, k: str, d: str) -> str:
        """Steps 3-5 of decide_statement for one group (steps 0-2 are shared)."""
        branches = []
        nodb = g.cond(lambda ch: not ch.has_db_rules)
        wild_on = any(ch.wdo or ch.wig for ch in g.reps)
        if nodb != "false" and wild_on:
            # CREATE/ALTER/DROP DATABASE without db rules: wild rules on the key 'db.' decide, or fall through
            dbkey = f"concat({k}, '.')"
            dbcmd = f"{cmd} IN ({sql_list(DATABASE_COMMANDS)}) AND {dc} = 18"
            wdo = self.match.key_match(g, [(ch, x) for ch in g.reps for x in ch.wdo], dbkey)
            wig = self.match.key_match(g, [(ch, x) for ch in g.reps for x in ch.wig], dbkey)
            branches.append((sql_and([dbcmd, wdo]), "4"))
            branches.append((sql_and([dbcmd, wig]), "5"))
            branches.append((sql_and([dbcmd, g.cond(lambda ch: bool(ch.wdo))]), "6"))
        n = f"coalesce(size({ts}), 0)"
        branches.append((f"{cmd} = 'DROP_TRIGGER' AND {n} = 0", "7"))
        on = g.cond(lambda ch: ch.table_rules)
        if on != "false":
            exempt = f"{cmd} IN ({sql_list(['SET_OPTION', DROP_TEMPORARY_IF_EXISTS])})"
            kx = f"concat({sql_case([('t_.db IS NULL', k)], self.fold_sql('t_.db'))}, '.', {self.fold_sql('t_.name')})"
            tables = sql_case([(f"{cmd} = 'DROP_TRIGGER'", f"slice({ts}, 1, 1)")],
                           f"filter({ts}, t_ -> coalesce(t_.updating, false))")
            keys = f"transform({tables}, t_ -> {kx})"
            code = self.table_code(g, "x_")
            agg = f"aggregate({keys}, 9, (acc_, x_) -> {sql_case([('acc_ IN (10, 11, 12, 13)', 'acc_')], code)})"
            branches.append((sql_and([on, f"{n} > 0"]), sql_case([(exempt, "8")], agg)))
        # a database statement that the wild-ignore rules did not match is applied by DEFAULT
        wig_only = g.cond(lambda ch: bool(ch.wig) and not ch.wdo and not ch.has_db_rules)
        if wig_only != "false":
            dbcmd = f"{cmd} IN ({sql_list(DATABASE_COMMANDS)})"
            return sql_case(branches, sql_case([(sql_and([dbcmd, f"{dc} = 18", wig_only]), "19")], dc))
        return sql_case(branches, dc)

    # ---------------------------------------------------------------- functions

    def functions(self, applier: bool = False, prefix: str | None = None) -> list[tuple[str, str, str, str]]:
        """(name, params, return type, body) in dependency order: 3-4 helpers and the 5 public functions, or
        with `applier` the applier's set (see compile_functions) under `prefix` (default APPLIER_PREFIX).

        Few statements on purpose: CREATE FUNCTION re-analyses every function it calls.
        """
        prefix = (prefix or APPLIER_PREFIX) if applier else HELPER_PREFIX
        rewrite = (prefix + "rewrite_db" if applier else "rewrite_db", "channel_name STRING, db_name STRING", "STRING")
        codes_ = [(prefix + "row_code", ROW_PARAMS, "INT"), (prefix + "statement_code", STATEMENT_PARAMS, "INT")]
        if not self.chans:
            return [(n, p, rt, f"CAST(NULL AS {rt})") for n, p, rt in [rewrite] + (codes_ if applier else [
                ("should_apply", ROW_PARAMS, "BOOLEAN"), ("filter_decided_by", ROW_PARAMS, "STRING"),
                ("should_apply_statement", STATEMENT_PARAMS, "BOOLEAN"),
                ("filter_decided_by_statement", STATEMENT_PARAMS, "STRING")])]
        # folding: a helper outside lambdas (the translate table is ~3k characters), inline inside them
        fold = (lambda x: f"{prefix}fold({x})") if self.lctn else (lambda x: x)
        out = [self.fold_helper(prefix)] if self.lctn else []
        table_code = self.table_code_helper(prefix)  # None where the rows' whole code is the JVM's (row_jvm)
        out += [self.db_code_helper(prefix)] + ([table_code] if table_code else [])
        out += [] if self.row_jvm else [self.statement_code_helper(prefix)]
        channel = self.canon()
        out.append((*rewrite, self.rewrite_body(channel, fold("db_name"))))
        row_code, table_call = self.row_calls(prefix, channel, fold("db_name"), fold("table_name"))
        statement_code = self.statement_call(prefix, channel, fold("coalesce(default_db, '')"))
        if applier:
            return out + [(*codes_[0], row_code), (*codes_[1], statement_code)]
        return out + self.public_functions(prefix, channel, fold("db_name"), table_call, row_code, statement_code)

    # ---------------------------------------------------------------- one method per emitted function

    def fold_helper(self, prefix: str) -> tuple[str, str, str, str]:
        """`fold(x)`: lower_case_table_names' folding of a name, as `rules.fold` does it."""
        return prefix + "fold", "x STRING", "STRING", self.fold_sql("x")

    def db_code_helper(self, prefix: str) -> tuple[str, str, str, str]:
        """`dbc(c, d)`: the database rules' code for channel `c` and folded db `d` (see db_code)."""
        return (prefix + "dbc", f"c {self.ctype}, d STRING", "INT",
                self.dispatch(lambda g: self.db_code(g, "d"), "d IS NULL"))

    def table_code_helper(self, prefix: str) -> tuple[str, str, str, str] | None:
        """`tc(c, k, t, x | key, dc)`: the row's code given its database code `dc`: `dc` where the database
        rules decide (2, 3) or the channel has no table rules, else the table rules' code of the row key `k.t`,
        compiled or interpreted.

        One helper: a SQL function's arguments are computed for every row before its body (a projection), so
        nothing that only some rows need is an argument: the key `k.t` is built only where a test needs it,
        `hash(k, t)` only by channels with exact table tests, and the table rules run only for rows that the
        database rules left open (a helper picking between two codes would have both computed for every row).
        Sets `self.interpreted`, which row_calls reads.
        """
        constants = 0

        def compiled_code(g: ChannelGroup) -> str:
            nonlocal constants
            code, literal_chars = self.row_table_code(g, "k", "t", ROW_KEY, compiled=True, none="dc")
            constants += literal_chars
            return code

        code = self.dispatch(compiled_code, "k IS NULL OR t IS NULL")
        # the size of the code: the dotted paths' regexes and sets are constants in the generated class
        size = len(code) - constants
        too_big = size > self.max_compiled
        if self.jvm == "expression" and (too_big or size > JVM_MIN_CHARS):
            # the rows' whole code is the JVM's Catalyst expression instead (row_calls): one memoised lookup a
            # row at any rule count, faster than this SQL from a few rules on; no tc helper then
            self.jvm_spec = self.rules_spec()
            return None
        if too_big:
            # Whole-stage codegen puts a projection's expressions into one Java method; past HotSpot's
            # 8000-byte limit it is never JIT-compiled (unless -XX:-DontCompileHugeMethods) and runs in the
            # bytecode interpreter, many times slower than Spark's expression interpreter. A higher-order
            # function is evaluated by that interpreter (CodegenFallback): the big table code runs node by
            # node, visiting only the branches it takes.
            # The arguments are bound once, as a struct: in a WHERE clause Spark does not project them and
            # would otherwise re-evaluate the rewrite and the key at every reference.
            body = self.dispatch(lambda g: self.row_table_code(g, "r_.k", "r_.t", "r_.key", compiled=False,
                                                               none="r_.dc")[0], "r_.key IS NULL", c="r_.c")
            # the key is an argument here, projected (compiled) once per row, as the interpreter needs it anyway
            code = sql_case([("dc IN (2, 3)", "dc")], "aggregate(array(named_struct('c', c, 'k', k, 't', t, "
                            "'key', key, 'dc', dc)), 0, (acc0_, r_) -> " + body + ")")
            self.interpreted = True
        else:
            code = sql_case([("x IS NOT NULL", "x"), ("dc IN (2, 3)", "dc")], code)
        fourth = "key STRING" if self.interpreted else "x INT"
        return prefix + "tc", f"c {self.ctype}, k STRING, t STRING, {fourth}, dc INT", "INT", code

    def rules_spec(self) -> str:
        """Every channel's rules as the JVM code reads them (compile.jvm_spec), keyed as the helpers' `c`."""
        return table_rules_spec([(ch.name if self.index is None else str(self.index[ch.name]), ch)
                                 for ch in self.chans], self.lctn, self.index is not None)

    def statement_code_helper(self, prefix: str) -> tuple[str, str, str, str]:
        """`stc(c, cmd, d, ts, dc, k)`: a statement's code from its command, tables and database code."""
        body = self.dispatch(lambda g: self.statement_code(g, "cmd", "ts", "dc", "k", "d"))
        code = sql_case([("exists(ts, t_ -> t_ IS NULL OR t_.name IS NULL)", "NULL"), ("dc IS NULL", "NULL"),
                      (f"cmd IN ({sql_list(TRANSACTION_CONTROL)})", "1"), ("dc IN (2, 3)", "dc")], body)
        return (prefix + "stc", f"c {self.ctype}, cmd STRING, d STRING, ts {STATEMENT_TYPE}, dc INT, k STRING",
                "INT", code)

    def rewrite_body(self, channel: str, folded_db: str) -> str:
        """rewrite_db's body: the configured target of the channel's rewrite rule for the db, else the db."""
        if self.row_jvm:
            return f"{JVM_REWRITE}(channel_name, db_name, {channel}, {folded_db})"
        return self.dispatch(lambda g: self.lookup(g, folded_db, lambda ch: ch.out_map), null_if="db_name IS NULL",
                             c=channel)

    def row_calls(self, prefix: str, channel: str, folded_db: str, folded_table: str) -> tuple[str, str]:
        """(the row's code, should_apply's call of the table code helper) that the row functions share: both
        one call of `tc`, given the row's database code or, for should_apply (which has tested it), an
        applying one. The JVM's is memoised on the raw names: its key and folds run only for rows it misses."""
        if self.row_jvm:
            code = f"{JVM_ROW_CODE}(channel_name, db_name, table_name, {channel}, {folded_db}, {folded_table})"
            return code, code
        key_db = self.key_db(folded_db, c=channel)
        # tc's fourth argument: interpreted, the key; compiled, `x`: NULL for every row, but a regex to Spark
        # (4.2+, SPARK-47672), which then keeps a WHERE clause above the projection of tc's arguments instead
        # of substituting them at each of their references. It reads the raw column: no second fold.
        last = (f"concat({key_db}, '.', {folded_table})" if self.interpreted
                else "CASE true WHEN octet_length(table_name) < 0 THEN CAST(table_name RLIKE '' AS INT) END")

        def call(dc: str) -> str:
            return f"{prefix}tc({channel}, {key_db}, {folded_table}, {last}, {dc})"
        return call(f"{prefix}dbc({channel}, {folded_db})"), call(str(APPLYING_DB_CODE))

    def statement_call(self, prefix: str, channel: str, folded_default_db: str) -> str:
        """The call of the statement code helper for the public functions' arguments."""
        cmd = "upper(coalesce(nullif(command, ''), 'OTHER'))"
        if self.row_jvm:  # the JVM's, memoised on the raw arguments: no lambdas over the tables, no CASE a row
            derived = f"{channel}, {cmd}, {folded_default_db}"
            return f"{JVM_STATEMENT_CODE}(channel_name, command, default_db, tables, {derived})"
        return (f"{prefix}stc({channel}, {cmd}, {folded_default_db}, tables, {prefix}dbc({channel}, "
                f"{folded_default_db}), {self.key_db(folded_default_db, c=channel)})")

    def public_functions(self, prefix: str, channel: str, folded_db: str, table_call: str, row_code: str,
                         statement_code: str) -> list[tuple[str, str, str, str]]:
        """should_apply and filter_decided_by, for rows and for statements.

        should_apply is `db_ok(channel, db) AND rest`: its first conjunct references only channel_name and
        db_name, so Spark can push it down (partition pruning) by itself."""
        # try_element_at, not element_at: Spark 4.2 treats element_at(<literal array>, <nullable index>) as
        # non-nullable and returns the last element for a NULL index (tests pin this)
        labels = "array(" + ", ".join(sql_str(LABELS[i]) for i in range(1, max(LABELS) + 1)) + ")"
        row_true = ", ".join(map(str, ROW_TRUE_GIVEN_APPLYING_DB))
        should_apply = (f"{row_code} IN ({', '.join(map(str, ROW_TRUE_CODES))})" if self.row_jvm else
                        f"{prefix}dbc({channel}, {folded_db}) >= 16 AND {table_call} IN ({row_true})")
        return [
            ("should_apply", ROW_PARAMS, "BOOLEAN", should_apply),
            ("filter_decided_by", ROW_PARAMS, "STRING", f"try_element_at({labels}, {row_code})"),
            ("should_apply_statement", STATEMENT_PARAMS, "BOOLEAN",
             f"{statement_code} IN ({', '.join(map(str, TRUE_CODES))})"),
            ("filter_decided_by_statement", STATEMENT_PARAMS, "STRING", f"try_element_at({labels}, {statement_code})"),
        ]


def compile_functions(state: ServerState, *, encoding: str | None = None, jit_huge_methods: bool = False,
                      applier: bool = False, map_hash_min: int | None = None,
                      guard: Guard | None = None, prefix: str | None = None,
                      jvm: str | None = None) -> CompiledFunctions:
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
    None where Spark has none): long exact lists become membership maps (in_list), which CREATE FUNCTION
    and every query inlining them analyse as one node instead of one per value.

    guard: wraps the public functions' bodies (not the helpers', so it is checked once per call).

    prefix: the applier's set under another prefix, so that two states' sets live in one session (the
    impact of a filter change decides with the current and the proposed filters side by side).

    jvm: 'expression': from JVM_MIN_CHARS of the row table code's SQL on, the rows' whole code by
    JVM_ROW_CODE instead, a Catalyst expression (rpl_sql/jvm) that the caller registers with the result's
    jvm_spec (Python sessions through py4j; the spark-sql shell through the Hive function JVM_INSTALL).
    """
    if jvm not in (None, "expression"):
        raise ValueError(f"jvm {jvm!r}: None or 'expression'")
    if prefix is not None and not (applier and prefix.isidentifier()):
        raise ValueError(f"prefix {prefix!r}: an identifier, for the applier's set only")
    comp = _Compiler(state, encoding, jit_huge_methods, map_hash_min, jvm)
    funcs = comp.functions(applier, prefix)
    if guard is not None:
        funcs = [(n, p, rt, body if n.startswith((HELPER_PREFIX, APPLIER_PREFIX)) else
                  f"CASE WHEN {guard.condition} THEN {body} ELSE raise_error({guard.message}) END")
                 for n, p, rt, body in funcs]
    stmts = tuple(f"CREATE OR REPLACE TEMPORARY FUNCTION {name}({params}) RETURNS {rt} RETURN {body}"
                  for name, params, rt, body in funcs)
    size = sum(map(len, stmts))
    past = f"past {comp.max_compiled} chars"
    table_form = (f"a JVM function ({jvm}, from {JVM_MIN_CHARS} chars), with the database rules and rewrite, "
                  "and rewrite_db and the statements' codes as JVM functions beside it"
                  if comp.row_jvm else f"interpreted ({past})" if comp.interpreted else "compiled")
    maps = (f" or, from {codes.SET_MAP_MIN} values, maps (hash lookup from {map_hash_min} entries)"
            if map_hash_min is not None and map_hash_min <= MAP_PAD_MAX else "")
    desc = (f"{comp.mode}: {comp.why}; {len(comp.chans)} channels in {len(comp.groups)} CASE branches"
            f"{', dispatched by INT index' if comp.index is not None else ''}"
            f"{' (one channel-keyed flat branch)' if comp.mode == 'flat' and any(g.flat for g in comp.groups) else ''}"
            f"; lower_case_table_names={comp.lctn}; exact lists as IN/InSet"
            f"{maps}"
            f", rewrite behind an InSet guard, "
            f"wildcards as InSet/prefix/suffix forms plus {sum(s.count(' RLIKE ') for s in stmts)} guarded trie "
            f"RLIKE chunk(s); "
            f"row table code "
            f"{table_form}"
            f"{' (JIT of huge methods on)' if jit_huge_methods else ''}; "
            f"{size} chars of SQL")
    return CompiledFunctions(stmts, desc, comp.jvm_spec)
