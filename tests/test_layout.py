"""The import contract and the folders that show it: the layers of docs/architecture.md, data flowing one way, no
import circles, one folder per layer, no two modules or classes with the same name, and modules of a readable size.

core (pure: text -> statement -> new state, the evaluator, the compiler) < io (Delta, the store) < session
< spark < pipeline < front ends (cli, the package's own namespace). A module imports only its own layer and
those below; the core imports no Spark, Delta, Arrow or I/O. A function-local import of an rpl_sql module is
there only to defer a heavy dependency the importer does not already load.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rpl_sql"
CORE = {"errors", "filters", "language", "server", "display", "compile", "classify", "configs"}
LAYERS = [  # (layer, the folders and top-level modules under rpl_sql that make it)
    ("core", CORE),
    ("io", {"storage", "source_server", "jvm", "native"}),
    ("session", {"session"}),
    ("spark", {"spark"}),
    ("pipeline", {"pipeline", "relay"}),
    ("front", {"cli", "__init__"}),
]
TOP_MODULES = {"__init__", "errors", "session"}  # everything else sits in a folder named after its layer or job
FORBIDDEN_IN_CORE = {"pyspark", "py4j", "deltalake", "pyarrow", "pymysql", "pymysqlreplication", "subprocess",
                     "socket", "shutil", "tempfile", "IPython"}
HEAVY = {"pyspark", "py4j", "deltalake", "pyarrow", "pymysql", "pymysqlreplication", "IPython", "sqlglot",
         "lark", "pandas"}
# parts of rpl_sql a control-plane statement never needs: a shell or a session loads them only when used
HEAVY_PARTS = {"rpl_sql.compile", "rpl_sql.pipeline"}
ALLOWED_UPWARD: set[tuple[str, str]] = set()
ALLOWED_CYCLES: list[set[str]] = []
MAX_MODULE_LINES, MAX_CLASS_LINES = 500, 250
# Past those sizes, each with a docstring that says why ("About N lines: ..."); a module here may not grow, and
# no other may pass the limits.
OVERSIZED = {
    "rpl_sql/pipeline/replica/service.py": 570,
    "_Applier": 280, "ReplicaTables": 290, "BinlogIngest": 386, "_Compiler": 357, "Session": 348, "Matchers": 289,
}


def modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
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
    assert heavy("rpl_sql.storage.store") >= {"deltalake"} and not heavy("rpl_sql.server.execute")
    assert heavy("rpl_sql.storage.upkeep") >= {"deltalake", "pyarrow"}
    assert {0, 1, 2, 3, 4, 5} == {layer(m) for m in g}


# ---------------------------------------------------------------- folders, names and sizes

def test_the_repository_has_the_design_cards_top_level():
    for path in ("setup.cfg", "rpl_sql/__init__.py", "tests", "sql", "README.md"):
        assert (ROOT / path).exists(), path
    assert list((ROOT / "grammar").glob("*.lark")), "the Lark grammar lives in grammar/ at the top"
    assert not (ROOT / "src" / "rpl_sql").exists() and not (PACKAGE / "grammar").exists()


def test_the_top_of_the_package_holds_only_its_face_errors_and_the_session():
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == TOP_MODULES, f"modules to move into a layer's folder: {sorted(top - TOP_MODULES)}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    named = set().union(*(names for _, names in LAYERS))
    assert folders <= named, f"folders without a layer (add them to LAYERS): {sorted(folders - named)}"


def test_no_two_modules_share_a_name():
    seen: dict[str, list[str]] = defaultdict(list)
    for p in PACKAGE.rglob("*.py"):
        if p.name not in ("__init__.py", "__main__.py"):
            seen[p.stem].append(str(p.relative_to(ROOT)))
    for p in PACKAGE.rglob("__init__.py"):
        if p.parent != PACKAGE:
            seen[p.parent.name].append(str(p.parent.relative_to(ROOT)) + "/")
    assert not {k: v for k, v in seen.items() if len(v) > 1}


def _classes() -> list[tuple[str, str, int]]:
    out = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out.append((node.name, name, node.end_lineno - node.lineno + 1))
    return out


def test_no_module_imports_another_ones_private_names():
    """A folder's modules talk through names without a leading underscore: its internal API."""
    private = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rpl_sql"):
                private += [f"{name}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert not private, private


def test_no_two_classes_share_a_name():
    seen: dict[str, list[str]] = defaultdict(list)
    for cls, module, _ in _classes():
        seen[cls].append(module)
    assert not {k: v for k, v in seen.items() if len(v) > 1}


def test_modules_and_classes_stay_readable_in_size():
    big = {}
    for path in PACKAGE.rglob("*.py"):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        key = str(path.relative_to(ROOT))
        if lines > OVERSIZED.get(key, MAX_MODULE_LINES):
            big[key] = lines
    for cls, module, lines in _classes():
        if lines > OVERSIZED.get(cls, MAX_CLASS_LINES):
            big[f"{module}.{cls}"] = lines
    assert not big, f"split these (at most {MAX_MODULE_LINES} lines a module, {MAX_CLASS_LINES} a class): {big}"


_ABOUT = re.compile(r"About\s+(\d+)\s+lines")


def test_what_is_past_the_limits_says_why():
    """Each module and class allowed past the limits says in its docstring how big it is and why, and the size it
    states is its size within 10%."""
    docs = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs[str(path.relative_to(ROOT))] = (ast.get_docstring(tree) or "", len(path.read_text().splitlines()))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                docs[node.name] = (ast.get_docstring(node) or "", node.end_lineno - node.lineno + 1)
    wrong = {}
    for key in OVERSIZED:
        doc, size = docs[key]
        m = _ABOUT.search(doc)
        if m is None or abs(int(m.group(1)) - size) > size / 10:
            wrong[key] = (m.group(0) if m else "no 'About N lines: why' in its docstring", size)
    assert not wrong, wrong


_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.(?:py|lark|md|ipynb|sql|java))\b")
_OUTSIDE = ("spec/",)  # the behavioural spec, kept beside the repository


def test_docs_and_docstrings_point_only_at_files_that_exist():
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *PACKAGE.rglob("*.py"),
             *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
    missing = {}
    for f in texts:
        text = f.read_text(encoding="utf-8")
        if f.name in ("bench_should_apply.py", "test_layout.py"):  # the compiler's places in earlier revisions
            text = text.replace("src/rpl_sql/compile", "").replace("rpl_sql/compile.py", "")
        for m in _PATH.finditer(text):
            path = m.group(1)
            if path.startswith(_OUTSIDE):
                continue
            bases = (ROOT, PACKAGE, f.parent, ROOT / "docs", ROOT / "tests", PACKAGE / "pipeline", PACKAGE / "spark",
                     PACKAGE / "storage")
            if not any((b / path).exists() for b in bases):
                missing.setdefault(path, str(f.relative_to(ROOT)))
    assert not missing, f"paths that name no file (moved or renamed?): {missing}"


def test_links_into_the_design_notes_name_a_section_there():
    notes = (ROOT / "docs" / "design" / "README.md").read_text(encoding="utf-8")
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", notes, re.M)}
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *PACKAGE.rglob("*.py")]
    links = {(m, str(f.relative_to(ROOT))) for f in texts
             for m in re.findall(r"design/README\.md#([\w-]+)", f.read_text(encoding="utf-8"))}
    assert links and not {(a, f) for a, f in links if a not in anchors}


def test_every_exception_has_one_root_and_says_error():
    """One root to catch (RplSqlError); MySQL's errors keep their codes under it (MySQLError)."""
    import importlib
    import inspect

    from rpl_sql.errors import RplSqlError

    found = []
    for name in modules():  # importing a module starts nothing (no JVM, no server)
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if cls.__module__ == name and issubclass(cls, BaseException) and not issubclass(cls, Warning):
                found.append(cls)
                assert issubclass(cls, RplSqlError), f"{name}.{cls.__name__} does not derive from RplSqlError"
                assert cls.__name__.endswith("Error"), f"{name}.{cls.__name__}: an exception's name ends in Error"
    assert len(found) > 25


def test_one_quoter():
    """Identifiers and MySQL strings are quoted by language/quoting.py only (Spark's literals: compile/literals)."""
    own = {PACKAGE / "language" / "quoting.py", PACKAGE / "compile" / "literals.py"}
    by_hand = re.compile(r"""replace\(\s*(["'])(`|\\')\1\s*,|["']`["']\s*\+|\+\s*["']`["']""")
    found = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
             if p not in own and by_hand.search(p.read_text(encoding="utf-8"))]
    assert not found, f"quoting by hand (use rpl_sql.language.quoting): {found}"


def test_tests_mirror_the_package_folders():
    """A test module sits in the folder of what it tests (tests/<folder>/ for rpl_sql/<folder>/); the helpers they
    share sit in tests/support/; tests of the top-level modules and of the repository stay at the top."""
    tests = ROOT / "tests"
    folders = {p.relative_to(tests).as_posix() for p in tests.rglob("__init__.py")} - {"__init__.py"}
    for init in folders:
        folder = init.rsplit("/", 1)[0]
        assert folder == "support" or (PACKAGE / folder).is_dir(), f"tests/{folder}/ mirrors no rpl_sql/{folder}/"
    top = {p.stem for p in tests.glob("test_*.py")}
    assert top <= {"test_errors", "test_session", "test_layout", "test_readme", "test_lint"}, top
    helpers = [p.name for p in tests.rglob("*.py") if not p.name.startswith(("test_", "__init__", "conftest"))
               and p.parent.name != "support"]
    assert not helpers, f"shared helpers belong in tests/support/: {helpers}"


def test_benches_import_only_what_exists():
    """Every rpl_sql or tests name a bench imports, at the top or inside a function, exists: a bench is run by
    hand, so a move must not leave it broken until someone does."""
    import importlib

    missing = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("rpl_sql", "tests"):
                module = importlib.import_module(node.module)
                missing += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                            if not hasattr(module, a.name) and
                            importlib.util.find_spec(f"{node.module}.{a.name}") is None]
            elif isinstance(node, ast.Import):
                missing += [f"{path.name}: {a.name}" for a in node.names if a.name.split(".")[0] == "rpl_sql"
                            and importlib.util.find_spec(a.name) is None]
    assert not missing, missing
