"""The import contract: the layers of docs/architecture.md, data flowing one way, and no import circles.

core (pure: text -> statement -> new state, the evaluator, the compiler) < io (Delta, the store) < session
< spark < pipeline < front ends (cli, the package's own namespace). A module imports only its own layer and
those below; the core imports no Spark, Delta, Arrow or I/O. A function-local import of an rpl_sql module is
there only to defer a heavy dependency the importer does not already load.
"""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "rpl_sql"
CORE = {"errors", "rules", "statements", "lexer", "parser", "evaluate", "state", "server", "startup",
        "performance_schema", "applier_state", "gtid", "render", "progress", "compile", "grammar", "classify",
        "lint", "impact", "configs"}
LAYERS = [  # (layer, top-level names under rpl_sql)
    ("core", CORE),
    ("io", {"stderr", "scratch", "credentials", "delta", "state_table", "store", "service_status", "replica_catalog",
            "landed_shapes", "jvm"}),
    ("session", {"session"}),
    ("spark", {"spark"}),
    ("pipeline", {"pipeline"}),
    ("front", {"cli", "magic", "__init__"}),
]
FORBIDDEN_IN_CORE = {"pyspark", "py4j", "deltalake", "pyarrow", "pymysql", "pymysqlreplication", "subprocess",
                     "socket", "shutil", "tempfile", "IPython"}
HEAVY = {"pyspark", "py4j", "deltalake", "pyarrow", "pymysql", "pymysqlreplication", "IPython", "sqlglot",
         "lark", "pandas"}
# parts of rpl_sql a control-plane statement never needs: a shell or a session loads them only when used
HEAVY_PARTS = {"rpl_sql.compile", "rpl_sql.pipeline"}
# the one allowed upward edge and cycle, both ends function-local: a Session started with spark=True asks the
# Spark layer to attach, and the Spark layer's register() makes a Session when given none
ALLOWED_UPWARD = {("rpl_sql.session", "rpl_sql.spark.surface")}
ALLOWED_CYCLES = [{"rpl_sql.session", "rpl_sql.spark.surface"}]


def modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _target(name: str, known: dict) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports(module: str) -> tuple[frozenset, frozenset, frozenset]:
    """(rpl_sql modules imported at top level, rpl_sql modules imported inside functions, outer packages)."""
    known = modules()
    tree = ast.parse(known[module].read_text(encoding="utf-8"))
    top, local, outer = set(), set(), set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}: relative import (use absolute rpl_sql.* imports)"
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module else []
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for n in names:
            if n.split(".")[0] == "rpl_sql":
                t = _target(n, known)
                if t and t != module:
                    (top if node.col_offset == 0 else local).add(t)
            else:
                outer.add(n.split(".")[0])
    return frozenset(top), frozenset(local), frozenset(outer)


def layer(module: str) -> int:
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    return next(i for i, (_, names) in enumerate(LAYERS) if head in names)


@cache
def heavy(module: str) -> frozenset:
    """Heavy third-party packages importing `module` loads (its top-level imports, transitively)."""
    top, _, _ = imports(module)
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    own = {(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
           for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    out = set(own & HEAVY)
    for t in top:
        out |= heavy(t) | {p for p in HEAVY_PARTS if t == p or t.startswith(p + ".")}
    return frozenset(out)


def graph() -> dict[str, set[str]]:
    return {m: set(imports(m)[0] | imports(m)[1]) for m in modules()}


def cycles(g: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    for m in modules():
        layer(m)


def test_core_imports_no_spark_delta_or_io():
    for m in modules():
        if layer(m) == 0:
            _, _, outer = imports(m)
            assert not outer & FORBIDDEN_IN_CORE, (m, outer & FORBIDDEN_IN_CORE)


def test_layers_import_downward_only():
    bad = [(m, t) for m, ts in graph().items() for t in ts
           if layer(t) > layer(m) and (m, t) not in ALLOWED_UPWARD]
    assert not bad, f"upward imports (see docs/architecture.md): {bad}"


def test_no_import_cycles_but_the_documented_one():
    assert sorted(map(sorted, cycles(graph()))) == sorted(map(sorted, ALLOWED_CYCLES))


def test_function_local_imports_only_defer_heavy_dependencies():
    needless = [(m, t) for m in modules() for t in imports(m)[1]
                if (m, t) not in ALLOWED_UPWARD and not heavy(t) - heavy(m)]
    assert not needless, f"function-local imports that defer nothing (move them to the top): {needless}"


def test_the_contract_is_not_vacuous():
    g = graph()
    assert len(g) > 30 and sum(map(len, g.values())) > 80
    assert heavy("rpl_sql.store") >= {"deltalake"} and not heavy("rpl_sql.server")
    assert heavy("rpl_sql.delta.upkeep") >= {"deltalake", "pyarrow"}
    assert {0, 1, 2, 3, 4, 5} == {layer(m) for m in g}
