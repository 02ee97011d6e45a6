"""The arm targets (aarch64 Linux): cross-compiled, run under qemu-aarch64 through the test
harness, compared with onnxruntime on the host at the same tolerance as x86.

Skipped when the cross compiler, its C library or qemu-aarch64 is missing (`make test`
installs them on Debian). This file holds what CI runs on every change for arm alone (the
build, the harness and its runner, status codes, small and medium models); the operator cases
shared with wasm are in test_cross_targets.py; `make test-targets` runs every model of test_models.py for arm as well.
The harness itself is also tested on the host, where it needs no emulator.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fetch_models as fm
import mlcc
from mlcc import resources
import test_models as tm
from mlcc.cli import main as cli_main
from mlcc.errors import InputError, RuntimeStatusError, TargetError
from mlcc.targets import load_target, parse_target

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
ARM = load_target("arm")


def _arm_missing() -> str:
    missing = ARM.missing_tools()
    if missing:
        return "; ".join(missing)
    # The cross gcc installs without its C library (only recommended): ask it for crt1.o.
    crt = subprocess.run([ARM.toolchain.cc, "-print-file-name=crt1.o"], capture_output=True,
                         text=True).stdout.strip()
    if not os.path.isabs(crt):
        return "the aarch64 C library is not installed (apt-get install libc6-dev-arm64-cross)"
    return ""


MISSING = _arm_missing()
needs_arm = pytest.mark.skipif(bool(MISSING), reason=MISSING or "arm toolchain present")


def _elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(head[18:20], "little")


# --------------------------------------------------------------------------------- the folder

@needs_arm
def test_compile_builds_library_and_harness_for_aarch64(tmp_path):
    out = tmp_path / "digits"
    res = mlcc.compile(DIGITS, out, target="arm", name="digits")
    assert _elf_machine(out / "libmodel.so") == 183            # EM_AARCH64
    assert _elf_machine(out / "harness") == 183
    m = res.manifest
    assert m["target"] == "arm" and m["harness"] == "harness"
    assert m["run"] == ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
    assert {"harness", "harness.c", "libmodel.so", "model.h", "weights.bin"} <= set(m["files"])
    assert "-march=armv8-a" in (out / "Makefile").read_text()
    info = subprocess.run([*ARM.run, str(out / "harness"), "--info"], capture_output=True,
                          text=True, check=True).stdout
    assert "model digits" in info and "input 0 input float32 [1,1,8,8] 256 bytes" in info
    assert "output 0 logits float32 [1,10] 40 bytes" in info


@needs_arm
def test_arm_folders_are_deterministic(tmp_path):
    for out in ("a", "b"):
        mlcc.compile(DIGITS, tmp_path / out, target="arm", name="digits")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*")
                   if p.is_file())
    assert Path("harness") in files and Path("libmodel.so") in files
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


@needs_arm
def test_runtime_and_harness_compile_warning_free_for_aarch64():
    """Every kernel, the runtime core and the harness, strict warnings, for both arm cores."""
    rt = resources.runtime_c()
    for target in (ARM, load_target("arm-dotprod")):
        march = [f for f in target.toolchain.cflags if f.startswith("-march")]
        common = [target.toolchain.cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic",
                  "-Werror", *march, *target.defines(), f"-I{rt / 'include'}",
                  f"-I{rt / 'kernels'}", "-fsyntax-only"]
        sources = sorted((rt / "kernels").glob("*.c")) + sorted((rt / "src").glob("*.c"))
        subprocess.run([*common, *map(str, sources)], check=True)
        subprocess.run([*common, "-Wconversion", "-DMLCC_MODEL=digits",
                        str(rt / "harness" / "mlcc_harness.c")], check=True)


# --------------------------------------------------------------------------------- operators

# --------------------------------------------------------------------------------- the runner

@pytest.fixture(scope="module")
def digits_arm(tmp_path_factory) -> Path:
    if MISSING:
        pytest.skip(MISSING)
    out = tmp_path_factory.mktemp("arm") / "digits"
    mlcc.compile(DIGITS, out, target="arm", name="digits")
    return out


def _digits_input(seed: int = 0) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(seed).standard_normal((1, 1, 8, 8)).astype(np.float32)}


def test_runner_checks_inputs_like_the_in_process_model(digits_arm):
    m = mlcc.load(digits_arm)
    assert type(m).__name__ == "HarnessModel"
    x = _digits_input()["input"]
    y = m.run({"input": x})["logits"]
    assert y.shape == (1, 10) and y.dtype == np.float32
    np.testing.assert_array_equal(m({"input": x.astype(np.float64)})["logits"], y)
    with pytest.raises(InputError, match="missing 'input'"):
        m.run({})
    with pytest.raises(InputError, match="shape"):
        m.run({"input": x[..., :4]})
    with pytest.raises(InputError, match="float32"):
        m.run({"input": x.astype(np.int32)})
    assert not [p for p in digits_arm.iterdir() if p.name.startswith(".run-")]


def test_arm_outputs_are_the_x86_targets_bit_for_bit(digits_arm, tmp_path):
    """Neither target fuses multiply-adds, and the kernels fix the order of every sum. arm
    keeps the direct convolution: compared with an x86 target file without Winograd."""
    x86, target = tmp_path / "x86", tmp_path / "x86-direct.yaml"
    target.write_text((resources.targets() / "x86.yaml").read_text()
                      .replace("name: x86", "name: x86-direct", 1)
                      .replace("\nwinograd: true\n", "\nwinograd: false\n"))
    mlcc.compile(DIGITS, x86, target=str(target), name="digits")
    assert "winograd" not in (x86 / "model.c").read_text()
    x = _digits_input(5)
    np.testing.assert_array_equal(mlcc.load(digits_arm).run(x)["logits"],
                                  mlcc.load(x86).run(x)["logits"])


def test_run_command_can_be_replaced(digits_arm, tmp_path):
    """What a user with a board does (e.g. run: [ssh, board]): here a wrapper script that
    logs its arguments and then runs the emulator."""
    log = tmp_path / "calls.txt"
    wrapper = tmp_path / "board"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {" ".join(ARM.run)} "$@"\n')
    wrapper.chmod(0o755)
    x = _digits_input(1)
    via_wrapper = mlcc.load(digits_arm, run=[str(wrapper)]).run(x)
    np.testing.assert_array_equal(via_wrapper["logits"], mlcc.load(digits_arm).run(x)["logits"])
    args = log.read_text().split()
    assert args[0] == str((digits_arm / "harness").resolve()) and len(args) == 4


def test_missing_emulator_names_the_package(digits_arm, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(digits_arm, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["run"] = ["no-such-emulator-xyz"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TargetError, match="no-such-emulator-xyz is not installed.*"
                                          r"apt-get install qemu-user"):
        mlcc.load(folder)


def test_damaged_weights_and_harness_errors(digits_arm, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(digits_arm, folder)
    blob = bytearray((folder / "weights.bin").read_bytes())
    blob[-1] ^= 1
    (folder / "weights.bin").write_bytes(bytes(blob))
    with pytest.raises(RuntimeStatusError, match="init failed: .*corrupted"):
        mlcc.load(folder).run(_digits_input())
    # The harness on its own: a short input file is refused (exit 1), nothing is written.
    (tmp_path / "short.bin").write_bytes(b"\0" * 255)
    proc = subprocess.run([*ARM.run, str(digits_arm / "harness"),
                           str(digits_arm / "weights.bin"), str(tmp_path / "short.bin"),
                           str(tmp_path / "out.bin")], capture_output=True, text=True)
    assert proc.returncode == 1 and "exactly 256 bytes" in proc.stderr
    assert not (tmp_path / "out.bin").exists()
    proc = subprocess.run([*ARM.run, str(digits_arm / "harness")], capture_output=True,
                          text=True)
    assert proc.returncode == 1 and "usage: harness WEIGHTS IN... OUT...  (1 input file, " \
        "then 1 output file, in model order)" in proc.stderr


def test_cli_compile_run_and_verify(digits_arm, tmp_path):
    runner = CliRunner()
    np.savez(tmp_path / "in.npz", **_digits_input(2))
    r = runner.invoke(cli_main, ["run", str(digits_arm), "-i", str(tmp_path / "in.npz"),
                                 "-o", str(tmp_path / "out.npz")])
    assert r.exit_code == 0, r.output
    assert "logits: float32 [1, 10]" in r.output
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["logits"], mlcc.load(digits_arm).run(
            _digits_input(2))["logits"])
    r = runner.invoke(cli_main, ["verify", str(DIGITS), "--target", "arm"])
    assert r.exit_code == 0, r.output
    assert "verified: outputs match onnxruntime" in r.output


# --------------------------------------------------------------------------------- models

@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    return fm.build_small_models(tmp_path_factory.mktemp("small"))


@needs_arm
@pytest.mark.parametrize("name", ["patterns_mlp", "small_cnn", "small_unet"])
def test_small_model(small_models, name):
    path, shapes = small_models[name]
    tm.check(path, shapes, target="arm")


@needs_arm
def test_patterns_mlp_accuracy_matches_onnxruntime(small_models, tmp_path):
    path, shapes = small_models["patterns_mlp"]
    x, labels = fm.pattern_dataset(640, seed=123)
    got, ref = tm._compiled_and_reference(path, x, shapes, tmp_path / "mlp", target="arm")
    assert tm._assert_same_accuracy(got, ref, labels) > 0.9


@needs_arm
@pytest.mark.parametrize("name", tm.DIGITS_MODELS)
def test_digits_model(name):
    """The trained digits networks (examples/digits; fetch_models.PROJECT_MODELS)."""
    path = fm.project_model(name)
    tm.check(path, tm.static_shapes(path), target="arm")


@needs_arm
def test_squeezenet_random_weights():
    tm.check(fm.randomized_light_model("squeezenet"), target="arm")


@needs_arm
def test_arm_dotprod_target(tmp_path):
    """The second arm file: same harness and emulator, ARMv8.2-A code."""
    assert "-march=armv8.2-a+dotprod" in load_target("arm-dotprod").toolchain.cflags
    res = mlcc.verify(DIGITS, target="arm-dotprod", output_dir=tmp_path / "d")
    assert res.ok, [(o.name, o.max_abs_error) for o in res.outputs]
    assert _elf_machine(tmp_path / "d" / "harness") == 183


# --------------------------------------------------------------------------------- host-only

def test_harness_on_the_host_matches_the_library(tmp_path):
    """`make harness` in an x86 folder; mlcc.load(folder, run=[]) then runs it natively:
    the generic harness and the runner, tested without an emulator."""
    out = tmp_path / "digits"
    mlcc.compile(DIGITS, out, target="x86", name="digits")
    assert (out / "harness.c").is_file() and not (out / "harness").exists()
    subprocess.run(["make", "-s", "harness"], cwd=out, check=True, capture_output=True)
    x = _digits_input(3)
    via_harness = mlcc.load(out, run=[]).run(x)["logits"]
    np.testing.assert_array_equal(via_harness, mlcc.load(out).run(x)["logits"])


def test_harness_is_sanitizer_clean(tmp_path):
    """Library and harness rebuilt with ASan and UBSan (through the folder's Makefile), run on
    good inputs and on every error path."""
    out = tmp_path / "digits"
    mlcc.compile(DIGITS, out, target="x86", name="digits", build=False)
    san = "-fsanitize=address,undefined -fno-sanitize-recover=all"
    subprocess.run(["make", "-s", "all", "harness",
                    f"CFLAGS=-O1 -g -std=c99 -fPIC -fvisibility=hidden {san}",
                    f"LDFLAGS=-shared -lm {san}"], cwd=out, check=True, capture_output=True)
    x = _digits_input(4)
    got = mlcc.load(out, run=[]).run(x)["logits"]
    plain = tmp_path / "plain"
    mlcc.compile(DIGITS, plain, target="x86", name="digits")
    np.testing.assert_allclose(got, mlcc.load(plain).run(x)["logits"], rtol=1e-6, atol=1e-5)

    def harness(*args):
        return subprocess.run([str(out / "harness"), *map(str, args)], capture_output=True,
                              text=True, cwd=tmp_path)
    x["input"].astype("<f4").tofile(tmp_path / "in.bin")
    (tmp_path / "bad.bin").write_bytes(b"MLCCWTS" + bytes(100))
    for args, code, message in [
        ((), 1, "usage"),
        (("nofile", "in.bin", "o.bin"), 1, "cannot open nofile"),
        ((out / "weights.bin", out / "weights.bin", "o.bin"), 1, "exactly 256 bytes"),
        (("bad.bin", "in.bin", "o.bin"), 1, "exactly"),
        ((out / "weights.bin", "in.bin", tmp_path / "no" / "o.bin"), 1, "cannot create"),
    ]:
        proc = harness(*args)
        assert proc.returncode == code and message in proc.stderr, (args, proc.stderr)
    blob = bytearray((out / "weights.bin").read_bytes())
    blob[0] ^= 1
    (tmp_path / "magic.bin").write_bytes(bytes(blob))
    proc = harness("magic.bin", "in.bin", "o.bin")
    assert proc.returncode == 2 and "init failed: " in proc.stderr and "(status 5)" in proc.stderr
    assert harness("--info").stdout.splitlines()[2] == "input 0 input float32 [1,1,8,8] 256 bytes"


def test_compiler_without_its_c_library_is_a_target_error(tmp_path):
    """What a cross gcc without libc6-dev-<arch>-cross does: a missing package, not a bug."""
    (tmp_path / "nolibc.yaml").write_text(
        "name: nolibc\narch: x86_64\ntoolchain:\n  cc: gcc\n"
        "  cflags: [-O1, -std=c99, -fPIC, --sysroot=/nonexistent-sysroot]\n"
        "  ldflags: [-shared, -lm]\n  package: libc6-dev-fake\n")
    with pytest.raises(TargetError, match="toolchain is incomplete: .*apt-get install "
                                          "libc6-dev-fake"):
        mlcc.compile(DIGITS, tmp_path / "o", target=str(tmp_path / "nolibc.yaml"))


def test_targets_report_missing_compiler_and_emulator(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    r = CliRunner().invoke(cli_main, ["targets"])
    assert r.exit_code == 0
    line = next(l for l in r.output.splitlines() if l.startswith("arm "))
    assert ("aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu "
            "libc6-dev-arm64-cross)") in line
    assert "qemu-aarch64 is not installed (apt-get install qemu-user)" in line


def test_target_schema_run_keys(tmp_path):
    t = parse_target("name: board\narch: aarch64\ntoolchain: {cc: gcc}\n"
                     "run: [ssh, pi@board]\nrun_package: openssh-client\n")
    assert t.run == ("ssh", "pi@board") and t.run_package == "openssh-client"
    assert not t.is_host
    with pytest.raises(TargetError, match="run_package must be a str"):
        parse_target("name: b\narch: a\ntoolchain: {cc: gcc}\nrun_package: [x]\n")
    with pytest.raises(TargetError, match="non-empty strings"):
        parse_target("name: b\narch: a\ntoolchain: {cc: gcc}\nrun: ['']\n")
