"""Imports flow one way through the pipeline (docs/style.md): a layer may import only the layers
listed for it, so that e.g. the IR never depends on ONNX handling or code generation."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mlcc"

ALLOWED = {
    "errors": set(),
    "dtypes": set(),
    "resources": set(),                  # setup.py loads it on its own: no mlcc imports
    "ir": {"errors", "dtypes"},
    "frontend": {"errors", "ir"},
    "ops": {"errors", "ir"},
    "passes": {"errors", "ir", "ops"},
    "quant": {"errors", "ir", "ops", "passes"},
    "codegen": {"errors", "ir", "ops", "resources", "__init__"},
    "targets": {"errors", "resources"},
    "runtime": {"errors", "dtypes"},
    "api": {"errors", "ir", "frontend", "ops", "passes", "quant", "codegen", "targets",
            "runtime", "benchmark", "__init__"},
    "benchmark": {"errors"},
    "cli": {"errors", "api", "__init__"},
    "__init__": {"api", "errors"},
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
                           [a.name for a in node.names if a.name != "__version__"] or ["__init__"])
                for target in targets:
                    if target not in ALLOWED[layer] and target != layer:
                        bad.append(f"{path.relative_to(PKG)} imports {target}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("mlcc"):
                        bad.append(f"{path.relative_to(PKG)} imports {alias.name} absolutely")
    assert not bad, "\n".join(bad)
