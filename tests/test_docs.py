"""The README's examples and tables must stay true: its C example compiles and runs against a
freshly compiled model, and its operator table lists exactly the registered operators."""
import re
import subprocess
from pathlib import Path

import mlcc
from mlcc.ops import registered_ops

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_c_example_compiles_and_runs(tmp_path, monkeypatch):
    code = re.search(r"```c\n(.*?)```", README, re.S).group(1)
    out = tmp_path / "build" / "digits"
    mlcc.compile(ROOT / "examples/digits/digits_cnn.onnx", out, name="digits")
    (tmp_path / "main.c").write_text(code)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{out}",
                    f"-I{out}/runtime/include", str(tmp_path / "main.c"), f"-L{out}", "-lmodel",
                    f"-Wl,-rpath,{out}", "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("logit[0] = ")


def test_readme_operator_table_matches_the_registry():
    section = README.split("## Supported operators", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([A-Z][A-Za-z0-9]+)`", section))
    assert listed == set(registered_ops()), (
        f"missing from README: {sorted(set(registered_ops()) - listed)}; "
        f"not registered: {sorted(listed - set(registered_ops()))}")
