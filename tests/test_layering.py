"""Imports flow one way through the pipeline (docs/style.md): a layer may import only the layers
listed for it, so that e.g. the IR never depends on ONNX handling or code generation; and no
two modules of mlcc import each other, directly or around a longer loop, at module level or
inside a function (a lazy import hides a cycle, it does not remove it)."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mlcc"

ALLOWED = {
    "errors": set(),
    "dtypes": set(),
    "dimexpr": set(),                    # dimension expressions as text: a leaf
    "resources": set(),                  # setup.py loads it on its own: no mlcc imports
    "version": set(),
    "machine": set(),                    # /proc/cpuinfo: a leaf
    "ir": {"errors", "dtypes"},
    "frontend": {"errors", "ir", "dimexpr"},
    "ops": {"errors", "ir"},
    "passes": {"errors", "ir", "ops"},
    "quant": {"errors", "ir", "ops", "passes"},
    "codegen": {"errors", "ir", "ops", "resources", "version"},
    "targets": {"errors", "resources", "machine"},
    "runtime": {"errors", "dtypes", "dimexpr", "machine"},
    "api": {"errors", "ir", "frontend", "ops", "passes", "quant", "codegen", "targets",
            "runtime", "benchmark", "version"},
    "benchmark": {"errors", "resources"},
    "profiling": set(),                  # text of a measuring build; no mlcc imports
    "tuning": {"errors", "ir", "frontend", "ops", "passes", "targets", "runtime", "api",
               "profiling", "machine", "resources"},
    "benchmark_worker": {"errors", "benchmark", "runtime"},   # a child process's entry point
    "cli": {"errors", "api", "tuning", "version"},
    "__init__": {"api", "errors", "version"},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def test_imports_flow_one_way():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        layer = _layer(path)
        tree = ast.parse(path.read_text())
        depth = len(path.relative_to(PKG).parts) - 1
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                up = node.level - 1          # levels above the file's own package
                if up < depth:
                    continue                 # inside its own layer
                # "from . import x" names its modules in the aliases
                targets = ([node.module.split(".")[0]] if node.module else
                           [a.name for a in node.names] or ["__init__"])
                for target in targets:
                    if target not in ALLOWED[layer] and target != layer:
                        bad.append(f"{path.relative_to(PKG)} imports {target}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("mlcc"):
                        bad.append(f"{path.relative_to(PKG)} imports {alias.name} absolutely")
    assert not bad, "\n".join(bad)


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """mlcc module -> the mlcc modules it imports anywhere in its text. `from P import x`
    imports module P.x if that is a module of mlcc, else P itself (x is one of P's names);
    a compiled extension (runtime/_fastcall) is outside the graph."""
    files = {_module(p): p for p in PKG.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for mod, path in sorted(files.items()):
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out = edges.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")
                    up = ".".join(up[:len(up) - (node.level - 1)])
                    base = f"{up}.{node.module}" if node.module else up
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    ext = files.get(base, Path()).parent.glob(f"{alias.name}.*")
                    if sub in files:
                        out.add(sub)
                    elif not (base in files and files[base].name == "__init__.py" and
                              any(p.suffix != ".py" for p in ext)):
                        out.add(base)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        edges[mod] = (out & set(files)) - {mod}
    return edges


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    cycles = import_cycles(import_graph())
    assert not cycles, "modules that import each other: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_cycle_check_sees_lazy_imports():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(edges) == [["a", "b", "c"]]
    graph = import_graph()
    # a function-level import counts (mlcc.ops.elementwise imports .cast inside Pow.lower)
    assert "mlcc.ops.cast" in graph["mlcc.ops.elementwise"]
    # the compiled helper is no module of the graph, and not its package either
    assert "mlcc.runtime" not in graph["mlcc.runtime.loader"]
