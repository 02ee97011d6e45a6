"""The package a user installs: the wheel built from this repository, installed into a clean
virtual environment (the wheel and its dependencies only, from pip's usual sources and cache),
then used from an empty folder outside the checkout: `mlcc targets`, and the digits CNN
compiled, run and verified on x86, arm (qemu-aarch64), wasm (node) and cortex-m4 (a firmware
in qemu-system-arm). The cross cases are skipped where their toolchains are missing, as in
test_targets_arm.py, test_targets_wasm.py and test_cortex_m.py.

What this guards: everything mlcc reads at run time besides its Python code (runtime_c/,
targets/, runtime_js/) ships inside the package and is found there (mlcc/resources.py), never
through the checkout. The fast tests at the end keep it that way in the source.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from mlcc import resources
from test_targets_arm import needs_arm
from test_targets_wasm import needs_wasm
from test_cortex_m import pytestmark as needs_cortex_m
from util import reference_outputs

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
SAMPLES = ROOT / "examples" / "digits" / "digits_sample.npz"
TIMEOUT_S = 600
# The parts of the environment that would let the clean venv see something else.
_LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")


def _run(cmd: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _LEAKS}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    assert r.returncode == 0, \
        f"{' '.join(map(str, cmd))} (in {cwd}) failed:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """Builds the wheel, installs it into a new venv, and returns the venv's bin folder and an
    empty working folder outside the repository."""
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(ROOT)
    # From a copy without what .gitignore lists (build/ above all): setuptools builds in the
    # source tree, and a build/ left by an earlier build would put its files in this wheel.
    ignored = [Path(line.strip().rstrip("/")).name for line in
               (ROOT / ".gitignore").read_text().splitlines() if line.strip()]
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", *ignored))
    wheels = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, source], base)
    [wheel] = wheels.glob("mlcc-*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", venv], base)
    bin_dir = venv / "bin"
    _run([bin_dir / "python", "-m", "pip", "install", wheel], base)
    work = base / "work"
    work.mkdir()
    return {"bin": bin_dir, "work": work, "wheel": wheel}


@pytest.mark.slow
def test_installed_mlcc_lives_in_the_venv(installed):
    """The mlcc the venv imports, and each of its data folders, are the venv's copies."""
    code = ("import sysconfig, mlcc; from mlcc import resources as r; "
            "print(sysconfig.get_paths()['platlib']); print(mlcc.__file__); "
            "[print(r.folder(n)) for n in r.FOLDERS]")
    out = _run([installed["bin"] / "python", "-c", code], installed["work"]).stdout.split("\n")
    site = Path(out[0]).resolve()
    package = Path(out[1]).resolve().parent
    assert package == site / "mlcc", out
    folders = [Path(p).resolve() for p in out[2:2 + len(resources.FOLDERS)]]
    assert folders == [package / "_data" / n for n in resources.FOLDERS], out
    for path in [package, *folders]:
        assert not path.is_relative_to(ROOT), path


@pytest.mark.slow
def test_wheel_carries_the_data_folders_as_they_are(installed):
    """Every file of runtime_c/, targets/ and runtime_js/, byte for byte, and the license."""
    import zipfile
    with zipfile.ZipFile(installed["wheel"]) as z:
        names = set(z.namelist())
        for name in resources.FOLDERS:
            src = resources.folder(name)
            files = sorted(p for p in src.rglob("*") if p.is_file())
            assert files, name
            for path in files:
                arc = f"mlcc/_data/{name}/{path.relative_to(src).as_posix()}"
                assert z.read(arc) == path.read_bytes(), arc
            shipped = {n for n in names if n.startswith(f"mlcc/_data/{name}/")}
            assert len(shipped) == len(files), sorted(shipped)
        assert any(re.fullmatch(r"mlcc-[^/]+\.dist-info/licenses/LICENSE", n) for n in names)


@pytest.mark.slow
def test_mlcc_targets_lists_the_builtin_targets(installed):
    out = _run([installed["bin"] / "mlcc", "targets"], installed["work"]).stdout
    listed = sorted(line.split()[0] for line in out.splitlines() if line.strip())
    assert listed == sorted(p.stem for p in resources.targets().glob("*.yaml")), out


@pytest.mark.slow
@pytest.mark.parametrize("target", ["x86", pytest.param("arm", marks=needs_arm),
                                    pytest.param("wasm", marks=needs_wasm),
                                    pytest.param("cortex-m4", marks=needs_cortex_m)])
def test_compile_run_verify_from_an_empty_folder(installed, target):
    """`mlcc compile`, `mlcc run` (outputs against onnxruntime here) and `mlcc verify`."""
    work = installed["work"] / target
    work.mkdir()
    model = work / DIGITS.name
    shutil.copyfile(DIGITS, model)
    feeds = {"input": np.load(SAMPLES)["input"][:1]}
    np.savez(work / "inputs.npz", **feeds)
    mlcc = installed["bin"] / "mlcc"
    _run([mlcc, "compile", model.name, "--target", target, "-o", "out"], work)
    # the runtime copied into the model folder is the repository's, as the wheel shipped it
    header = "runtime/include/mlcc_runtime.h"
    assert (work / "out" / header).read_bytes() == \
        (resources.runtime_c() / "include" / "mlcc_runtime.h").read_bytes()
    _run([mlcc, "run", "out", "-i", "inputs.npz", "-o", "outputs.npz"], work)
    got = np.load(work / "outputs.npz")
    want = reference_outputs(onnx.load(str(DIGITS)), feeds)
    assert sorted(got.files) == sorted(want)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4, err_msg=name)
    r = _run([mlcc, "verify", model.name, "--target", target], work)
    assert "verified: outputs match onnxruntime" in r.stdout, r.stdout


def test_only_mlcc_resources_locates_files_of_the_package():
    """No other module of mlcc finds files relative to its own location (`__file__`,
    importlib.resources): a path computed from the checkout breaks in an installed mlcc."""
    package = Path(resources.__file__).parent
    bad = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "resources.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "__file__":
                bad.append(f"{path.relative_to(package)}:{node.lineno} uses __file__")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                    [a.name for a in node.names]
                if any(m.startswith("importlib.resources") or m == "pkg_resources" for m in mods):
                    bad.append(f"{path.relative_to(package)}:{node.lineno} imports {mods}")
    assert not bad, "\n".join(bad)


def test_sdist_manifest_grafts_every_data_folder():
    """setup.py copies resources.FOLDERS into the package; an sdist must carry each of them."""
    grafted = re.findall(r"^graft\s+(\S+)\s*$", (ROOT / "MANIFEST.in").read_text(), flags=re.M)
    assert sorted(grafted) == sorted(resources.FOLDERS)
