"""The import contract: the pure filter core imports no Spark, Delta or I/O, and modules import one way."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "rpl_sql"
# text -> statement -> new state, and the decisions: pure functions and values only
CORE = {"errors", "rules", "statements", "parser", "evaluate", "state", "server", "startup",
        "performance_schema", "applier_state", "render", "progress", "compile"}
FORBIDDEN_IN_CORE = {"pyspark", "py4j", "deltalake", "pyarrow", "pymysql", "pymysqlreplication", "subprocess",
                     "socket", "shutil", "tempfile"}
# the one allowed cycle, both edges function-local: a Session started with spark=True asks the Spark layer
# to attach, and the Spark layer's register() makes a Session when given none
ALLOWED_CYCLES = [{"session", "spark"}]


def imports(module: str) -> tuple[set[str], set[str]]:
    """(rpl_sql modules, top-level third-party/stdlib packages) that `module` imports anywhere in its body."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    inner, outer = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module:
                    inner.add(node.module.split(".")[0])
                else:
                    inner.update(a.name for a in node.names)
            elif node.module:
                outer.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            outer.update(a.name.split(".")[0] for a in node.names)
    return inner - {"grammar"}, outer


def graph() -> dict[str, set[str]]:
    modules = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    return {m: imports(m)[0] & set(modules) for m in modules}


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


def test_core_imports_no_spark_delta_or_io():
    g = graph()
    for module in sorted(CORE):
        inner, outer = imports(module)
        assert not outer & FORBIDDEN_IN_CORE, (module, outer & FORBIDDEN_IN_CORE)
        assert inner & set(g) <= CORE, (module, (inner & set(g)) - CORE)


def test_no_import_cycles_but_the_documented_one():
    assert sorted(map(sorted, cycles(graph()))) == sorted(map(sorted, ALLOWED_CYCLES))
