"""Cost of the compiled `should_apply` SQL function against a bare scan and an Arrow Python UDF.

    .venv/bin/python bench/bench_should_apply.py            # 10M rows, 1/100/1000/10000 rules per channel
    .venv/bin/python bench/bench_should_apply.py --quick    # 1M rows, 1/100/1000 rules
    .venv/bin/python bench/bench_should_apply.py --rows 3000000 --sizes 100,10000 --repeat 5
    .venv/bin/python bench/bench_should_apply.py --ab 6750e0d --sizes 1,100 --repeat 7   # vs a revision
    .venv/bin/python bench/bench_should_apply.py --cold-ab c027deb --sizes 10000 --rounds 3  # setup, fresh JVMs
    .venv/bin/python bench/bench_should_apply.py --java-opts=-XX:+UseG1GC   # Java 17's default collector
    .venv/bin/python bench/bench_should_apply.py --functions --no-udf   # filter_decided_by, rewrite_db, statements too
    .venv/bin/python bench/bench_should_apply.py --functions --statement-columns --no-udf   # args as columns
    .venv/bin/python bench/bench_should_apply.py --statement-columns --no-udf --no-where \
        --property-ab rpl_sql.jvm.statementsNotAsRows   # statements looked up by shape, or by the statement memo
    .venv/bin/python bench/bench_should_apply.py --run-length 8 --property-ab rpl_sql.rowcode.noLastRow  # A/B
    .venv/bin/python bench/bench_should_apply.py --spark-sql-ab 17e8b30 --sizes 100,10000   # in the spark-sql shell

Everything is measured side by side in one run and printed as ratios; nothing asserts on time (the box is
shared, wall clock is noisy, so CPU seconds of the JVM and its Python workers are printed as well). The bare
scan and the functions' queries take turns, one run each per round; a ratio is the median of the ratios
within a round, so the machine's drift between rounds does not enter it. The JVM
is started by rpl_sql.spark.env.local_spark, with the parallel collector unless --java-opts names another;
the bytes each query allocates are printed too, since allocation is what the collector changes.

Data (generated once, cached under bench/data/, git-ignored): Parquet with columns channel, db_name,
table_name; 3 channels ('' 50%, 'src_eu' 30%, 'src_us' 20%); 300 databases (app_000..app_279 plus 20 named
ones) with a skewed (power-law) frequency; 120 table names per database (a vocabulary of realistic names such
as orders, tmp_import, log_2024_07, users_bak, then t_000..), also skewed. Each row is drawn on its own (0.01%
of rows equal the row before), or with --run-length L in runs of L equal rows, as a transaction's row events
share a table. With --names numbered the databases are shop_0000.. and the tables orders_0000..
(as many; the rules drawn from them alike), names that differ only in their last bytes, as shards and
partitions do. With --layout by_db the same rows are sorted by channel and db, as the events table's files
(partitioned by channel and filter_db) hold them: a row's channel and db are mostly the row before's.

Rules, R per channel (largest-remainder split, deterministic):
  ''      do-style:      do_db 30%, do_table 20%, wild_do 50%
  src_eu  ignore-style:  ignore_db 25%, ignore_table 25%, wild_ignore 50%
  src_us  table-style:   rewrite_db 5%, do_table 25%, wild_do 30%, wild_ignore 40%
Exact names are drawn half from the data and half invented (so most rules do not match anything, as in a
real config); wildcard rules: 35% 'db.%', 20% 'db.prefix%' (escaped `\\_`), 15% 'dbprefix%.%',
15% starting with '%' ('%.tmp\\_%', '%.%\\_bak', '%.<table>'), 15% with an unescaped '_' ('app_01_.orders').

Bare scan: `count_if(hash(channel, db_name, table_name) <> 0)` -- it reads and decodes the same three
columns and touches every value once, in the same aggregate shape as the function query. (A plain count(*)
is answered without decoding the columns, and `hash(...) IS NOT NULL` is folded to TRUE because hash() is
never NULL, so both would measure no column work at all.)
should_apply: `count_if(should_apply(channel, db_name, table_name))` (a projection: Spark computes the
function's derived arguments once per row) and, for reference, `count(*) WHERE should_apply(...)`.
Python UDF: `@udf(useArrow=True)` running a best-effort exact evaluator (per channel: Python sets with the
rewrite folded in, one trie-factored compiled regex per wildcard list, memoised per distinct
(channel, db, table)); it runs on the first --udf-rows rows and its time is scaled to --rows.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rpl_sql.compile import compile_functions  # noqa: E402
from rpl_sql.filters.evaluate import RowEvent, decide_row  # noqa: E402
from rpl_sql.filters.rules import FilterType as T, fold, like_tokens  # noqa: E402
from rpl_sql.filters.state import ServerState  # noqa: E402

DATA = ROOT / "bench" / "data"
CHANNELS = ("", "src_eu", "src_us")
NAMED_DBS = ["shop", "crm", "billing", "analytics", "mysql", "sys", "tmp", "archive_2023", "archive_2024",
             "reporting", "auth", "search", "cms", "payments", "inventory", "hr", "legacy", "staging",
             "ml_features", "web"]
DBS = [f"app_{i:03d}" for i in range(280)] + NAMED_DBS
VOCAB = ["orders", "order_items", "customers", "products", "payments", "invoices", "audit_log", "sessions",
         "events", "users", "tmp_import", "tmp_export", "orders_bak", "users_bak", "cache_entries", "settings",
         "addresses", "shipments", "refunds", "carts"] + [f"log_2024_{m:02d}" for m in range(1, 13)]
TABLES = VOCAB + [f"t_{i:03d}" for i in range(120 - len(VOCAB))]
# --names numbered: as many names, spelled as shards and partitions are, differing only in their last bytes
NUMBERED_DBS = [f"shop_{i:04d}" for i in range(len(DBS))]
NUMBERED_TABLES = [f"orders_{i:04d}" for i in range(len(TABLES))]


# ---------------------------------------------------------------- data and rules

def sql_array(values) -> str:
    return "array(" + ", ".join("'" + v + "'" for v in values) + ")"


def use_names(names: str) -> None:
    """The names the data and make_rules draw from: "words" (DBS, TABLES as above) or "numbered"."""
    global DBS, TABLES
    if names == "numbered":
        DBS, TABLES = NUMBERED_DBS, NUMBERED_TABLES


def data_path(rows: int, run_length: int = 1, names: str = "words", layout: str = "rows") -> Path:
    """Where ensure_data keeps those rows."""
    return DATA / (f"events_{rows}_runs{run_length}" + ("" if names == "words" else f"_{names}")
                   + ("" if layout == "rows" else "_by_db") + ".parquet")


def ensure_data(spark, rows: int, run_length: int = 1, names: str = "words", layout: str = "rows") -> str:
    """The rows in id order, eight files of consecutive ids; with `run_length` L, in runs of L equal rows (as the
    row events of a transaction share a table), each run drawn as a row is otherwise. No repartition: its
    round-robin sorts the rows first, which put 83% of rows right after an equal one (the data before
    2026-12-03, events_<rows>.parquet). Layout "by_db": the same rows sorted by channel and db (eight files of
    ranges), as the events table's files hold them (partitioned by channel and filter_db); tables vary."""
    path = data_path(rows, run_length, names, layout)
    if not (path / "_SUCCESS").exists():
        t = time.time()
        key = "id" if run_length == 1 else f"id DIV {run_length}"
        u = f"(pmod(hash({key}, {{k}}), 1000003) / 1000003.0)"
        spark.sql(f"""
            SELECT CASE WHEN {u.format(k=1)} < 0.5 THEN '' WHEN {u.format(k=1)} < 0.8 THEN 'src_eu' ELSE 'src_us' END
                     AS channel,
                   element_at({sql_array(DBS)}, cast(floor({len(DBS)} * pow({u.format(k=2)}, 2.5)) AS INT) + 1)
                     AS db_name,
                   element_at({sql_array(TABLES)}, cast(floor({len(TABLES)} * pow({u.format(k=3)}, 2.0)) AS INT) + 1)
                     AS table_name
            FROM range(0, {rows}, 1, 8)""" + ("" if layout == "rows" else " ORDER BY channel, db_name")
                  ).write.mode("overwrite").parquet(str(path))
        print(f"generated {rows:,} rows in {time.time() - t:.1f}s -> {path}")
    return str(path)


def ensure_statement_data(spark, path: str) -> str:
    """The rows at `path` as statements whose arguments are columns, as an events table holds them: `command`
    (INSERT, UPDATE, DELETE or REPLACE, drawn by the table's name, so a statement repeats as its row does),
    `default_db` and `tables` (the row's table, unqualified and updated), written once beside them."""
    out = path.replace(".parquet", "_statements.parquet")
    if not (Path(out) / "_SUCCESS").exists():
        spark.read.parquet(path).selectExpr(
            "channel", "element_at(array('INSERT', 'UPDATE', 'DELETE', 'REPLACE'), pmod(hash(table_name, 7), 4) + 1)"
            " AS command", "db_name AS default_db",
            "array(named_struct('db', CAST(NULL AS STRING), 'name', table_name, 'updating', true)) AS tables"
        ).write.mode("overwrite").parquet(out)
    return out


# the statement forms over ensure_statement_data's columns, beside a scan that hashes the same columns
COLUMN_STATEMENTS = {
    "bare": "SELECT count_if(hash(channel, command, default_db, tables) <> 0) FROM evs",
    "should_apply_statement (columns)":
        "SELECT count_if(should_apply_statement(channel, command, default_db, tables)) FROM evs",
    "should_apply_statement WHERE (columns)":
        "SELECT count(*) FROM evs WHERE should_apply_statement(channel, command, default_db, tables)",
    "filter_decided_by_statement (columns)":
        "SELECT count_if(filter_decided_by_statement(channel, command, default_db, tables) = 'DEFAULT') FROM evs",
}


def split(total: int, weights: dict) -> dict:
    """Largest-remainder split of `total` rules over the lists (deterministic)."""
    raw = {k: total * w for k, w in weights.items()}
    out = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: (-(raw[k] - out[k]), str(k)))[:total - sum(out.values())]:
        out[k] += 1
    return out


def make_rules(r: int, modules=None) -> ServerState:
    """R rules per channel; `modules`: the rules and state modules of another revision (compiler_at's), whose
    compiler takes only its own classes."""
    rules_mod, state_mod = modules or (sys.modules["rpl_sql.filters.rules"], sys.modules["rpl_sql.filters.state"])
    T_, Filters_, ServerState_, Channel_ = (rules_mod.FilterType, rules_mod.Filters, state_mod.ServerState,
                                            state_mod.Channel)
    rnd = random.Random(r)

    def db():
        return rnd.choice(DBS) if rnd.random() < 0.5 else f"gone_{rnd.randrange(10**6):06d}"

    def tbl():
        return rnd.choice(TABLES) if rnd.random() < 0.5 else f"old_{rnd.randrange(10**6):06d}"

    def esc(s):
        return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")

    def wild():
        x = rnd.random()
        if x < 0.35:
            return f"{esc(db())}.%"
        if x < 0.55:
            return f"{esc(db())}.{esc(rnd.choice(['tmp_', 'log_2024_', 'order', 'cache', 'old_']))}%"
        if x < 0.70:
            d = db()
            return f"{esc(d[:rnd.randint(min(3, len(d)), len(d))])}%.%"
        if x < 0.85:
            return rnd.choice(["%.tmp\\_%", "%.%\\_bak", f"%.{esc(tbl())}", f"%.{esc(tbl())}%"])
        return f"{db()}.{tbl()}"  # unescaped '_' is a one-byte wildcard

    specs = {
        "": {T_.DO_DB: 0.3, T_.DO_TABLE: 0.2, T_.WILD_DO_TABLE: 0.5},
        "src_eu": {T_.IGNORE_DB: 0.25, T_.IGNORE_TABLE: 0.25, T_.WILD_IGNORE_TABLE: 0.5},
        "src_us": {T_.REWRITE_DB: 0.05, T_.DO_TABLE: 0.25, T_.WILD_DO_TABLE: 0.3, T_.WILD_IGNORE_TABLE: 0.4},
    }
    state = ServerState_()
    for name, weights in specs.items():
        f = Filters_()
        for ftype, n in split(r, weights).items():
            if not n:
                continue
            if ftype in (T_.DO_DB, T_.IGNORE_DB):
                vals = [db() for _ in range(n)]
            elif ftype in (T_.DO_TABLE, T_.IGNORE_TABLE):
                vals = [f"{db()}.{tbl()}" for _ in range(n)]
            elif ftype is T_.REWRITE_DB:
                vals = [(rnd.choice(DBS), f"replica_{i}") for i in range(n)]
            else:
                vals = [wild() for _ in range(n)]
            if ftype in (T_.DO_DB, T_.IGNORE_DB, T_.DO_TABLE, T_.IGNORE_TABLE):
                vals = list(dict.fromkeys(vals))
            f = f.configure(ftype, tuple(vals), "STARTUP_OPTIONS", 1)
        state = state.with_channel(Channel_(name, filters=f))
    return state


# ---------------------------------------------------------------- the Python side (best effort, exact)

def _py_trie_regex(patterns, lctn):
    """One trie-factored fullmatch regex per list (Python `re`), bytes for lctn=0 like rules._like_regex."""
    root: dict = {}
    for p in patterns:
        node = root
        for kind, ch in like_tokens(fold(p, lctn) if lctn else p):
            if kind == "lit":
                for part in (ch.encode("utf-8") if not lctn else [ch]):
                    node = node.setdefault(("l", part), {})
            else:
                node = node.setdefault((kind, None), {})
        node[None] = {}

    def tok(k):
        kind, v = k
        if kind == "any":
            return ".*"
        if kind == "one":
            return "."
        return re.escape(bytes([v]).decode("latin-1") if isinstance(v, int) else v)

    def emit(node):
        alts = [tok(k) + emit(c) for k, c in node.items() if k is not None]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return "(?:" + body + ")?" if None in node else body

    if not patterns:
        return None
    rx = emit(root)
    return re.compile(rx.encode("latin-1") if not lctn else rx, re.DOTALL)


class PyDecider:
    """decide_row(...).apply with sets and compiled regexes, memoised per distinct (channel, db, table)."""

    def __init__(self, state: ServerState):
        self.lctn = lctn = state.lower_case_table_names
        self.chans = {}
        for ch in state.channels:
            f = ch.filters
            rw = {}
            for s, d in f.values(T.REWRITE_DB):
                rw.setdefault(fold(s, lctn), d)
            do = {fold(v, lctn) for v in f.values(T.DO_DB)}
            ign = {fold(v, lctn) for v in f.values(T.IGNORE_DB)}
            self.chans[ch.name] = (
                rw, do, ign, {fold(v, lctn) for v in f.values(T.DO_TABLE)},
                {fold(v, lctn) for v in f.values(T.IGNORE_TABLE)},
                _py_trie_regex(f.values(T.WILD_DO_TABLE), lctn), _py_trie_regex(f.values(T.WILD_IGNORE_TABLE), lctn),
                f.table_rules_on, not (f.values(T.DO_TABLE) or f.values(T.WILD_DO_TABLE)))
        self.memo: dict = {}

    def __getstate__(self):
        return {"lctn": self.lctn, "chans": self.chans, "memo": {}}

    def __call__(self, channel, db, tbl):
        k = (channel, db, tbl)
        v = self.memo.get(k, 0)
        if v == 0:
            v = self.memo[k] = self._decide(channel, db, tbl)
        return v

    def _decide(self, channel, db, tbl):
        c = self.chans.get(channel.lower()) if channel is not None else None
        if c is None or db is None or tbl is None:
            return None
        rw, do, ign, dot, igt, wdo, wig, on, default = c
        lctn = self.lctn
        d = fold(db, lctn)
        d = fold(rw.get(d, d), lctn)
        if do:
            if d not in do:
                return False
        elif d in ign:
            return False
        if not on:
            return True
        key = d + "." + fold(tbl, lctn)
        if key in dot:
            return True
        if key in igt:
            return False
        subject = key.encode("utf-8").decode("latin-1") if not lctn else key
        if wdo is not None and wdo.fullmatch(subject if lctn else subject.encode("latin-1")):
            return True
        if wig is not None and wig.fullmatch(subject if lctn else subject.encode("latin-1")):
            return False
        return default


def check_py_decider(state, decider, keys):
    for ch, db, tbl in keys:
        want = decide_row(state.channel(ch).filters, RowEvent(db, tbl), state.lower_case_table_names).apply
        assert decider(ch, db, tbl) == want, (ch, db, tbl)


# ---------------------------------------------------------------- A/B against another revision

# Where the compiler sits at a revision, newest layout first: (its path, the folder holding the rpl_sql package
# or None for a one-module compiler, that revision's rules and state modules)
_LAYOUTS = (
    ("rpl_sql/compile/__init__.py", "", "rpl_sql.filters.rules", "rpl_sql.filters.state"),
    ("src/rpl_sql/compile/__init__.py", "src", "rpl_sql.rules", "rpl_sql.state"),
    ("src/rpl_sql/compile.py", None, None, None),
    ("rpl_sql/compile.py", None, None, None),
)


def _layout(ref: str) -> tuple:
    import subprocess

    for layout in _LAYOUTS:
        if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{ref}:{layout[0]}"],
                          capture_output=True).returncode == 0:
            return layout
    raise SystemExit(f"no compiler at {ref}")


def src_at(ref: str, prefix: str) -> str:
    """A new temporary directory that holds the rpl_sql package of git revision `ref` (`git archive`) and can
    go on sys.path or PYTHONPATH as it is."""
    import subprocess
    import tempfile

    root = _layout(ref)[1] or ""
    tmp = tempfile.mkdtemp(prefix=prefix)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, f"{root}/rpl_sql" if root else "rpl_sql",
                              *([] if root else ["grammar", "pyspark_rpl_sql.py"])],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    return os.path.join(tmp, root) if root else tmp


def compiler_at(ref: str):
    """rpl_sql.compile as of git revision `ref`, imported beside this checkout's. A one-module compiler is
    executed in place (its relative imports resolve to this checkout's modules); the compile/ package is
    imported from `git archive` of the revision, with this checkout's rpl_sql modules set aside meanwhile."""
    import importlib
    import importlib.util
    import subprocess

    path, root, rules, state = _layout(ref)
    if root is not None:
        tree = src_at(ref, "rpl_sql-compile-at-")
        ours = {k: v for k, v in sys.modules.items() if k == "rpl_sql" or k.startswith("rpl_sql.")}
        for k in ours:
            del sys.modules[k]
        sys.path.insert(0, tree)
        try:
            mod = importlib.import_module("rpl_sql.compile")
            # its own rules and state classes: make_rules builds the states it is given with them
            mod.rpl_modules = (importlib.import_module(rules), importlib.import_module(state))
            return mod
        finally:
            sys.path.remove(tree)
            for k in [k for k in sys.modules if k == "rpl_sql" or k.startswith("rpl_sql.")]:
                del sys.modules[k]
            sys.modules.update(ours)
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], check=True,
                         capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("rpl_sql._compile_at_ref", loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "rpl_sql"
    sys.modules[spec.name] = mod  # dataclasses look their module up
    exec(compile(src, f"{ref}:{path}", "exec"), mod.__dict__)
    mod.rpl_modules = None  # a one-module compiler uses this checkout's classes
    return mod


def map_kw(mod, spark) -> dict:
    """compile_functions' map_hash_min as rpl_sql.register passes it, for compilers that take it."""
    import inspect

    from rpl_sql.spark.env import map_lookup_hash_min

    if "map_hash_min" not in inspect.signature(mod.compile_functions).parameters:
        return {}
    return {"map_hash_min": map_lookup_hash_min(spark)}


def side_by_side(spark, meter, ref: str, sizes: list[int], repeat: int, jit: bool) -> None:
    """Both revisions' should_apply and filter_decided_by in one JVM, renamed apart, interleaved with the bare
    scan: the ratio of a compiler change measured without the machine's run-to-run noise. Without the JVM table
    code (the two revisions would share its name), so past the compiled size both are interpreted."""
    old = compiler_at(ref)
    print(f"\nside by side: this checkout vs {ref}, {repeat} interleaved rounds, medians of the per-round ratios")
    print("| rules/channel | bare scan s | function | form | " + f"{ref} × bare wall / CPU | "
          "this checkout × bare wall / CPU |")
    print("|---|---|---|---|---|---|")
    public = ("should_apply", "filter_decided_by")
    for r in sizes:
        queries = {"bare": "SELECT count_if(hash(channel, db_name, table_name) <> 0) FROM ev"}
        for tag, mod in (("ref", old), ("new", sys.modules["rpl_sql.compile"])):
            state = make_rules(r, getattr(mod, "rpl_modules", None))
            for stmt in mod.compile_functions(state, jit_huge_methods=jit, **map_kw(mod, spark)).statements:
                if "FUNCTION rpl_sql__" in stmt or any(f"FUNCTION {f}(" in stmt for f in public):
                    for f in public:
                        stmt = stmt.replace(f"FUNCTION {f}(", f"FUNCTION ab_{tag}_{f}(")
                    spark.sql(stmt.replace("rpl_sql__", f"ab_{tag}__"))
            args = "channel, db_name, table_name"
            queries[f"{tag} should_apply"] = f"SELECT count_if(ab_{tag}_should_apply({args})) FROM ev"
            queries[f"{tag} should_apply WHERE"] = f"SELECT count(*) FROM ev WHERE ab_{tag}_should_apply({args})"
            queries[f"{tag} filter_decided_by"] = \
                f"SELECT count_if(ab_{tag}_filter_decided_by({args}) = 'DEFAULT') FROM ev"
            queries[f"{tag} filter_decided_by WHERE"] = \
                f"SELECT count(*) FROM ev WHERE ab_{tag}_filter_decided_by({args}) = 'DEFAULT'"
        labels = {tag: spark.sql(f"SELECT ab_{tag}_filter_decided_by(channel, db_name, table_name) AS f, count(*) "
                                 "FROM ev GROUP BY 1 ORDER BY 1").collect() for tag in ("ref", "new")}
        assert labels["ref"] == labels["new"], labels
        m = interleaved(spark, meter, queries, repeat)
        for f in public:
            for form in ("", " WHERE"):
                ref_, new_ = m[f"ref {f}{form}"], m[f"new {f}{form}"]
                assert ref_["result"] == new_["result"], (f, form, ref_["result"], new_["result"])
                print(f"| {r:,} | {m['bare']['wall']:.2f} | {f} | {form.strip() or 'SELECT'} | "
                      f"{ref_['ratio']:.2f} / {ref_['cpu_ratio']:.2f} | "
                      f"{new_['ratio']:.2f} / {new_['cpu_ratio']:.2f} |", flush=True)


def cold_ab(ref: str, sizes: list[int], rounds: int, rows: int) -> None:
    """Setup cost in fresh JVMs, as a user's first `register` pays it: REF's compiler and this checkout's
    alternate (the order swaps every round), each in its own process that runs one untimed bare scan, then
    compiles, creates the functions and runs the first query and two more."""
    import json
    import subprocess

    print(f"\ncold setup, fresh JVMs: this checkout vs {ref}, {rounds} rounds (order swapped each round), medians")
    print("| rules/channel | side | compile s | CREATE FUNCTION s | first query s | query after s | rows applied |")
    print("|---|---|---|---|---|---|---|")
    for r in sizes:
        res: dict = {"ref": [], "new": []}
        for i in range(rounds):
            for side in (("ref", "new") if i % 2 == 0 else ("new", "ref")):
                out = subprocess.run([sys.executable, __file__, "--cold-child", ref if side == "ref" else "",
                                      "--sizes", str(r), "--rows", str(rows)], capture_output=True, text=True)
                line = [x for x in out.stdout.splitlines() if x.startswith("COLD-RESULT ")]
                if out.returncode or not line:
                    raise SystemExit(f"child failed ({side}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
                res[side].append(json.loads(line[0][12:]))
        assert len({x["applied"] for v in res.values() for x in v}) == 1, res
        for side, label in (("ref", ref), ("new", "this checkout")):
            med = {k: statistics.median(x[k] for x in res[side]) for k in ("compile", "create", "first", "after")}
            print(f"| {r:,} | {label} | {med['compile']:.2f} | {med['create']:.2f} | {med['first']:.2f} | "
                  f"{med['after']:.2f} | {res[side][0]['applied']:,} |", flush=True)
            runs = {k: " ".join(f"{x[k]:.2f}" for x in res[side]) for k in ("compile", "create", "first")}
            print(f"|  | runs | {runs['compile']} | {runs['create']} | {runs['first']} | | |")


SHELL_QUERIES = {
    "bare": "SELECT count_if(hash(channel, db_name, table_name) <> 0) FROM ev",
    "should_apply": "SELECT count_if(should_apply(channel, db_name, table_name)) FROM ev",
    "should_apply WHERE": "SELECT count(*) FROM ev WHERE should_apply(channel, db_name, table_name)",
    "filter_decided_by": "SELECT count_if(filter_decided_by(channel, db_name, table_name) = 'DEFAULT') FROM ev"}


def spark_sql_shell(sizes: list[int], repeat: int, rows: int, ref: str | None) -> None:
    """The real spark-sql shell running the script `rpl-sql --export-sql` writes (with --no-stale-check: the
    check is one subquery per query, not per row) for a warehouse holding the bench's rules: the queries
    take turns with the bare scan, each run twice in a row and the second timed by the shell's own
    `Time taken`. With `ref`, that revision's export (its rpl_sql on PYTHONPATH, its jar) side by side."""
    import re
    import shutil
    import subprocess
    import tempfile

    import pyspark

    from rpl_sql.spark.env import local_spark
    from rpl_sql.storage.store import DeltaStore

    spark = local_spark(app_name="bench_should_apply_data")
    data = ensure_data(spark, rows)
    spark.stop()  # one JVM at a time: the shell's comes next
    binary = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-sql")
    tree = None
    if ref:
        tree = src_at(ref, "bench_ref_")
    print(f"\nspark-sql shell, {rows:,} rows, {repeat} rounds, medians of per-round ratios to the bare scan")
    print("| rules/channel | export | " + " | ".join(k for k in SHELL_QUERIES if k != "bare") + " | bare s |")
    print("|---|---|" + "---|" * len(SHELL_QUERIES))
    for r in sizes:
        for label, src in ([(ref, tree)] if ref else []) + [("this checkout", str(ROOT))]:
            tmp = tempfile.mkdtemp(prefix="bench_shell_")
            try:
                store = DeltaStore(os.path.join(tmp, "wh"))
                store.commit(store.load(), make_rules(r), {})
                env = dict(os.environ, PYTHONPATH=src, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
                init = subprocess.run([sys.executable, "-m", "rpl_sql.cli", "--warehouse", os.path.join(tmp, "wh"),
                                       "--export-sql", "--no-stale-check"], capture_output=True, text=True,
                                      check=True, env=env, cwd=tmp).stdout
                with open(os.path.join(tmp, "init.sql"), "w") as f:
                    f.write(init)
                script, order = f"CREATE TEMPORARY VIEW ev USING parquet OPTIONS (path '{data}');\n", []
                for q in SHELL_QUERIES.values():
                    script += q + ";\n"
                    order.append(None)  # warm-up
                for _ in range(repeat):
                    for k, q in SHELL_QUERIES.items():
                        script += q + ";\n" + q + ";\n"
                        order += [None, k]
                out = subprocess.run([binary, "--master", "local[*]", "--conf", "spark.ui.enabled=false",
                                      "--conf", "spark.driver.memory=4g", "--conf", f"spark.sql.warehouse.dir={tmp}/sw",
                                      "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={tmp}",
                                      "-i", os.path.join(tmp, "init.sql"), "-e", script],
                                     cwd=tmp, env=env, capture_output=True, text=True)
                times = [float(t) for t in re.findall(r"Time taken: ([0-9.]+) seconds, Fetched 1 row", out.stderr)]
                if out.returncode or len(times) < len(order):
                    raise SystemExit(f"spark-sql failed ({out.returncode}):\n{out.stderr[-4000:]}")
                runs: dict = {k: [] for k in SHELL_QUERIES}
                for k, t in zip(order, times[-len(order):]):
                    if k:
                        runs[k].append(t)
                ratios = {k: statistics.median(t / b for t, b in zip(v, runs["bare"])) for k, v in runs.items()}
                form = ("JVM row code" if "jinstall(" in init else
                        "Hive table code" if "TableCodeHive" in init else "compiled SQL")
                print(f"| {r:,} | {label} ({form}) | " + " | ".join(f"{ratios[k]:.2f}" for k in SHELL_QUERIES
                                                                   if k != "bare")
                      + f" | {statistics.median(runs['bare']):.2f} |", flush=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    if tree:
        shutil.rmtree(tree, ignore_errors=True)
    print(f"\nmachine load average at the end: {os.getloadavg()}")


def cold_child(ref: str, size: int, rows: int) -> None:
    import json

    from rpl_sql.spark.env import jit_huge_methods, local_spark

    spark = local_spark(app_name="bench_cold", **{"spark.ui.showConsoleProgress": "false",
                                                  "spark.sql.shuffle.partitions": "2"})
    spark.read.parquet(ensure_data(spark, rows)).createOrReplaceTempView("ev")
    spark.sql("SELECT count_if(hash(channel, db_name, table_name) <> 0) FROM ev").collect()
    mod = compiler_at(ref) if ref else sys.modules["rpl_sql.compile"]
    state = make_rules(size, getattr(mod, "rpl_modules", None))
    t0 = time.perf_counter()
    stmts = mod.compile_functions(state, jit_huge_methods=jit_huge_methods(spark), **map_kw(mod, spark)).statements
    t1 = time.perf_counter()
    for s in stmts:
        spark.sql(s)
    t2 = time.perf_counter()
    q = "SELECT count_if(should_apply(channel, db_name, table_name)) FROM ev"
    applied = spark.sql(q).collect()[0][0]
    t3 = time.perf_counter()
    after = []
    for _ in range(2):
        t = time.perf_counter()
        spark.sql(q).collect()
        after.append(time.perf_counter() - t)
    print("COLD-RESULT " + json.dumps(dict(compile=t1 - t0, create=t2 - t1, first=t3 - t2, after=min(after),
                                           applied=applied)), flush=True)
    spark.stop()


# ---------------------------------------------------------------- measuring

class Meter:
    """Wall and CPU seconds (the JVM plus its Python workers) of one action, and the JVM's allocation."""

    def __init__(self, spark):
        self.pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        self.threads = spark._jvm.java.lang.management.ManagementFactory.getThreadMXBean()

    def cpu(self) -> float:
        try:
            import psutil
        except ImportError:
            return float("nan")
        p = psutil.Process(self.pid)
        total = 0.0
        for q in [p] + p.children(recursive=True):
            try:
                t = q.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return total

    def allocated(self, fn) -> float:
        """MB allocated by the JVM's threads while `fn` runs (local mode: the tasks run in this JVM)."""
        mx = self.threads

        def total() -> int:
            return sum(x for x in mx.getThreadAllocatedBytes(mx.getAllThreadIds()) if x > 0)

        before = total()
        fn()
        return (total() - before) / 1e6

    def run(self, fn, repeat: int):
        """Median wall and CPU seconds of `repeat` runs of `fn`, and its last result."""
        walls, cpus, result = [], [], None
        for _ in range(repeat):
            c0, t0 = self.cpu(), time.perf_counter()
            result = fn()
            walls.append(time.perf_counter() - t0)
            cpus.append(self.cpu() - c0)
        return statistics.median(walls), statistics.median(cpus), result


def run_query(spark, q):
    """A query's one value; `q` is its SQL, or (SQL, a JVM property set to true while it runs: local mode's
    tasks run in this JVM)."""
    sql, prop = (q, None) if isinstance(q, str) else q
    jsys = spark._jvm.java.lang.System
    if prop:
        jsys.setProperty(prop, "true")
    try:
        return spark.sql(sql).collect()[0][0]
    finally:
        if prop:
            jsys.clearProperty(prop)


def interleaved(spark, meter, queries: dict, repeat: int, warm: int = 1) -> dict:
    """Each query in turn, `repeat` rounds (a warm-up first): a query's ratio to the bare scan is the median of
    its ratios within a round, so the machine's drift between rounds cancels out. Within a round each query
    runs `warm` + 1 times back to back and its last run counts: the run right after another query's pays for
    that query's garbage and for JIT profiles it disturbed."""
    for q in queries.values():
        run_query(spark, q)
    runs: dict = {k: [] for k in queries}
    for _ in range(repeat):
        for k, q in queries.items():
            for _ in range(warm):
                run_query(spark, q)
            runs[k].append(meter.run(lambda: run_query(spark, q), 1))
    out = {}
    for k, rs in runs.items():
        ratios = [w / b[0] for (w, _, _), b in zip(rs, runs["bare"])]
        cpu_ratios = [c / b[1] for (_, c, _), b in zip(rs, runs["bare"])]
        out[k] = {"wall": statistics.median(w for w, _, _ in rs), "cpu": statistics.median(c for _, c, _ in rs),
                  "ratio": statistics.median(ratios), "cpu_ratio": statistics.median(cpu_ratios),
                  "ratios": ratios, "result": rs[-1][2]}
    return out


# the statement forms' arguments for a row: an INSERT into its table, the default database its db
STATEMENT_ARGS = ("channel, 'INSERT', db_name, array(named_struct('db', CAST(NULL AS STRING), 'name', table_name, "
                  "'updating', true))")

def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--run-length", type=int, default=1, help="rows in runs of this many equal rows (a "
                    "transaction's row events share a table); default 1: every row drawn on its own")
    ap.add_argument("--layout", choices=["rows", "by_db"], default="rows", help="rows: each row drawn on its own "
                    "(or in runs); by_db: sorted by channel and db, as the events table's files hold them")
    ap.add_argument("--names", choices=["words", "numbered"], default="words", help="words: app_000, orders, "
                    "t_000 (below); numbered: shop_0000, orders_0000 (as many, differing only in their last bytes)")
    ap.add_argument("--sizes", default="1,100,1000,10000", help="rules per channel, comma separated")
    ap.add_argument("--udf-rows", type=int, default=None, help="rows for the Python UDF (default min(rows, 1M))")
    ap.add_argument("--repeat", type=int, default=3, help="rounds: every query once per round, in turn")
    ap.add_argument("--warm", type=int, default=1, help="runs of a query before the one that counts, per round "
                    "(0: each run follows another query's)")
    ap.add_argument("--quick", action="store_true", help="1M rows, sizes 1,100,1000, 2 repeats, UDF on 200k")
    ap.add_argument("--no-udf", action="store_true")
    ap.add_argument("--no-where", action="store_true", help="skip the WHERE-form measurement")
    ap.add_argument("--ab", metavar="GIT_REF", help="only compare should_apply and filter_decided_by compiled by "
                    "this checkout and by GIT_REF's compile.py, side by side (with --sizes and --repeat)")
    ap.add_argument("--cold-ab", metavar="GIT_REF", help="compare setup (compile, CREATE FUNCTION, first query) "
                    "of this checkout and GIT_REF in fresh JVMs, alternating (with --sizes and --rounds)")
    ap.add_argument("--rounds", type=int, default=3, help="--cold-ab rounds")
    ap.add_argument("--property-ab", metavar="NAME", help="each function's query also with the JVM system property "
                    "NAME set to true, in turn (e.g. rpl_sql.rowcode.noLastRow)")
    ap.add_argument("--java-opts", default="", help="the driver JVM's extra options, e.g. -XX:+UseG1GC "
                    "(local_spark adds the parallel collector unless these name one)")
    ap.add_argument("--functions", action="store_true",
                    help="also filter_decided_by, rewrite_db and the statement forms (each row as an INSERT into its "
                         "table), SELECT and WHERE forms, beside the bare scan")
    ap.add_argument("--statement-columns", action="store_true",
                    help="also the statement forms with every argument a column (command, default_db, tables, as "
                         "an events table holds them), beside a scan hashing those columns")
    ap.add_argument("--jvm", choices=["auto", "off"], default="auto",
                    help="auto: the JVM table code past the size limit, as rpl_sql.register decides; off: the SQL")
    ap.add_argument("--spark-sql", action="store_true", help="the real spark-sql shell running the exported script "
                    "(with --sizes, --repeat, --rows)")
    ap.add_argument("--spark-sql-ab", metavar="GIT_REF", help="--spark-sql, GIT_REF's export side by side")
    ap.add_argument("--cold-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cold_child is not None:
        return cold_child(args.cold_child, int(args.sizes), args.rows)
    if args.spark_sql or args.spark_sql_ab:
        return spark_sql_shell([int(x) for x in args.sizes.split(",")], args.repeat, args.rows, args.spark_sql_ab)
    if args.cold_ab:
        return cold_ab(args.cold_ab, [int(s) for s in args.sizes.split(",")], args.rounds, args.rows)
    if args.quick:
        args.rows, args.sizes, args.repeat = 1_000_000, "1,100,1000", 2
        args.udf_rows = args.udf_rows or 200_000
    udf_rows = min(args.udf_rows or 1_000_000, args.rows)
    sizes = [int(s) for s in args.sizes.split(",")]

    os.environ.setdefault("RPL_SQL_DRIVER_MEMORY", "8g")
    from rpl_sql.spark.env import local_spark

    spark = local_spark(app_name="bench_should_apply", **{"spark.ui.showConsoleProgress": "false",
                                                          "spark.sql.shuffle.partitions": "2",
                                                          "spark.driver.extraJavaOptions": args.java_opts})
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import BooleanType

    from rpl_sql.spark.env import jit_huge_methods

    jit = jit_huge_methods(spark)  # as rpl_sql.register decides: local_spark's JVM JIT-compiles huge methods
    use_names(args.names)  # the data and the rules both
    path = ensure_data(spark, args.rows, args.run_length, args.names, args.layout)
    ev = spark.read.parquet(path)
    ev.createOrReplaceTempView("ev")
    ev.limit(udf_rows).createOrReplaceTempView("ev_udf")
    if args.statement_columns:
        spark.read.parquet(ensure_statement_data(spark, path)).createOrReplaceTempView("evs")
    meter = Meter(spark)
    bare_q = "SELECT count_if(hash(channel, db_name, table_name) <> 0) FROM ev"
    spark.sql(bare_q).collect()  # warm-up
    gcs = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    print(f"\n{args.rows:,} rows, Parquet ({path}); {args.repeat} interleaved rounds (+{args.warm} warm-up run "
          "each), medians; "
          f"UDF on {udf_rows:,} rows scaled x{args.rows / udf_rows:g}; JIT of huge methods: {jit}; "
          f"collector: {', '.join(str(b.getName()) for b in gcs)}\n")

    if args.ab:
        side_by_side(spark, meter, args.ab, sizes, args.repeat, jit)
        spark.stop()
        return
    table = []
    for r in sizes:
        state = make_rules(r)
        t0 = time.perf_counter()
        compiled = compile_functions(state, jit_huge_methods=jit, jvm="expression" if args.jvm == "auto" else None,
                                     **map_kw(sys.modules["rpl_sql.compile"], spark))
        t_compile = time.perf_counter() - t0
        if compiled.jvm_spec is not None:
            from rpl_sql.spark.functions import register_table_code

            register_table_code(spark, compiled.jvm_spec)
        for s in compiled.statements:
            spark.sql(s)
        t_create = time.perf_counter() - t0 - t_compile
        q = "SELECT count_if(should_apply(channel, db_name, table_name)) FROM ev"
        first = spark.sql(q)
        applied = first.collect()[0][0]
        t_first = time.perf_counter() - t0 - t_compile - t_create
        plan = first._jdf.queryExecution().executedPlan().toString()  # the final adaptive plan
        codegen = "*(" in plan and "should_apply" in plan

        bare_mb = meter.allocated(lambda: spark.sql(bare_q).collect())
        fn_mb = meter.allocated(lambda: spark.sql(q).collect())
        queries = {"bare": bare_q, "should_apply": q}
        if not args.no_where:
            queries["should_apply WHERE"] = "SELECT count(*) FROM ev WHERE should_apply(channel, db_name, table_name)"
        if args.functions:
            queries.update({
                "filter_decided_by": "SELECT count_if(filter_decided_by(channel, db_name, table_name) = 'DEFAULT') "
                                     "FROM ev",
                "filter_decided_by WHERE": "SELECT count(*) FROM ev "
                                           "WHERE filter_decided_by(channel, db_name, table_name) = 'DEFAULT'",
                "rewrite_db": "SELECT count_if(rewrite_db(channel, db_name) <> db_name) FROM ev",
                "rewrite_db WHERE": "SELECT count(*) FROM ev WHERE rewrite_db(channel, db_name) <> db_name",
                "should_apply_statement": f"SELECT count_if(should_apply_statement({STATEMENT_ARGS})) FROM ev",
                "should_apply_statement WHERE": "SELECT count(*) FROM ev "
                                                f"WHERE should_apply_statement({STATEMENT_ARGS})",
                "filter_decided_by_statement": "SELECT count_if(filter_decided_by_statement("
                                               f"{STATEMENT_ARGS}) = 'DEFAULT') FROM ev"})
        twins = {f"{k} [{args.property_ab}]": k for k in queries if k != "bare"} if args.property_ab else {}
        queries.update({t: (queries[k], args.property_ab) for t, k in twins.items()})
        m = interleaved(spark, meter, queries, args.repeat, args.warm)
        for t, k in twins.items():
            assert m[t]["result"] == m[k]["result"], (t, m[t]["result"], m[k]["result"])
        if "should_apply WHERE" in m:
            assert m["should_apply WHERE"]["result"] == applied, (m["should_apply WHERE"]["result"], applied)
        if args.statement_columns:
            col_queries = dict(COLUMN_STATEMENTS)
            col_twins = ({f"{k} [{args.property_ab}]": k for k in col_queries if k != "bare"}
                         if args.property_ab else {})
            col_queries.update({t: (col_queries[k], args.property_ab) for t, k in col_twins.items()})
            cols = interleaved(spark, meter, col_queries, args.repeat, args.warm)
            for t, k in col_twins.items():
                assert cols[t]["result"] == cols[k]["result"], (t, cols[t]["result"], cols[k]["result"])
            m.update({k: v for k, v in cols.items() if k != "bare"})
            if "should_apply_statement" in m:  # the command is another DML one: the same verdicts
                assert m["should_apply_statement (columns)"]["result"] == m["should_apply_statement"]["result"]
        bare_w, bare_c = m["bare"]["wall"], m["bare"]["cpu"]
        fn_w, fn_c = m["should_apply"]["wall"], m["should_apply"]["cpu"]
        where_w = m["should_apply WHERE"]["wall"] if "should_apply WHERE" in m else float("nan")
        for name, x in m.items():
            if name != "bare":
                print(f"  {name}: {x['wall']:.2f}s ({x['cpu']:.1f} cpu-s) = {x['ratio']:.2f}x the bare scan, "
                      f"{x['cpu_ratio']:.2f}x its CPU (per round: {', '.join(f'{r:.2f}' for r in x['ratios'])})",
                      flush=True)

        udf_w = udf_c = float("nan")
        if not args.no_udf:
            decider = PyDecider(state)
            sample = spark.sql("SELECT DISTINCT channel, db_name, table_name FROM ev_udf LIMIT 300").collect()
            check_py_decider(state, decider, [tuple(x) for x in sample])
            py_apply = udf(decider, BooleanType(), useArrow=True)
            udf_df = spark.table("ev_udf").select(
                py_apply(col("channel"), col("db_name"), col("table_name")).alias("a"))
            py_n = udf_df.where("a").count()
            sql_n = spark.sql("SELECT count_if(should_apply(channel, db_name, table_name)) FROM ev_udf").collect()[0][0]
            assert py_n == sql_n, (py_n, sql_n)  # same verdicts on the UDF subset
            w, c, _ = meter.run(lambda: udf_df.where("a").count(), max(1, min(args.repeat, 2)))
            scale = args.rows / udf_rows
            udf_w, udf_c = w * scale, c * scale

        row = dict(rules=r, sql_chars=sum(map(len, compiled.statements)), compile=t_compile, create=t_create,
                   first=t_first, bare_w=bare_w, bare_c=bare_c, fn_w=fn_w, fn_c=fn_c, where_w=where_w,
                   ratio=m["should_apply"]["ratio"], cpu_ratio=m["should_apply"]["cpu_ratio"], m=m,
                   udf_w=udf_w, udf_c=udf_c, applied=applied, codegen=codegen, encoding=compiled.encoding,
                   bare_mb=bare_mb, fn_mb=fn_mb)
        table.append(row)
        print(f"R={r}: {compiled.encoding}")
        print(f"  setup: compile {t_compile:.2f}s + CREATE FUNCTION {t_create:.2f}s + first query {t_first:.2f}s"
              f" = {t_compile + t_create + t_first:.2f}s; whole-stage codegen: {'yes' if codegen else 'NO'};"
              f" applied {applied:,} of {args.rows:,}")
        print(f"  bare {bare_w:.2f}s ({bare_c:.1f} cpu-s) | should_apply {fn_w:.2f}s ({fn_c:.1f}) = "
              f"{m['should_apply']['ratio']:.2f}x wall, {m['should_apply']['cpu_ratio']:.2f}x cpu | allocated "
              f"MB/query: bare {bare_mb:,.0f}, should_apply {fn_mb:,.0f} | WHERE form {where_w:.2f}s | "
              f"Arrow UDF {udf_w:.2f}s ({udf_c:.1f}) = {udf_w / fn_w:.1f}x slower wall, {udf_c / fn_c:.1f}x cpu",
              flush=True)

    print("\n| rules/channel | SQL chars | compile+CREATE+first query s | bare scan s (cpu) | should_apply s (cpu) "
          "| ratio to bare wall/cpu | allocated MB bare / should_apply | WHERE form s (x bare) "
          "| Arrow UDF s, scaled (cpu) | UDF / should_apply wall/cpu |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in table:
        print(f"| {x['rules']:,} | {x['sql_chars']:,} | {x['compile'] + x['create'] + x['first']:.1f} "
              f"({x['compile']:.2f}+{x['create']:.2f}+{x['first']:.2f}) | {x['bare_w']:.2f} ({x['bare_c']:.1f}) | "
              f"{x['fn_w']:.2f} ({x['fn_c']:.1f}) | {x['ratio']:.2f} / {x['cpu_ratio']:.2f} | "
              f"{x['bare_mb']:,.0f} / {x['fn_mb']:,.0f} | "
              f"{x['where_w']:.2f} ({x['m'].get('should_apply WHERE', {}).get('ratio', float('nan')):.2f}x) | "
              f"{x['udf_w']:.1f} ({x['udf_c']:.1f}) | "
              f"{x['udf_w'] / x['fn_w']:.1f} / {x['udf_c'] / x['fn_c']:.1f} |")
    if args.functions or args.statement_columns:
        names = [k for k in table[0]["m"] if k != "bare"]
        print("\nratios to the bare scan, wall / CPU (medians of the per-round ratios; the (columns) forms to a "
              "scan hashing their columns)\n")
        print("| rules/channel | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for x in table:
            print(f"| {x['rules']:,} | " + " | ".join(f"{x['m'][k]['ratio']:.2f} / {x['m'][k]['cpu_ratio']:.2f}"
                                                     for k in names) + " |")
    print(f"\nmachine load average at the end: {os.getloadavg()}")
    spark.stop()


if __name__ == "__main__":
    main()
