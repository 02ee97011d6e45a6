"""The instruction counter of `make icount-arm` (runtime_c/qemu-icount, bench/icount_arm.py) and
the arm-portable target it compares against.

Skipped when qemu-aarch64, the aarch64 cross compiler with its C library, or the host gcc is
missing (`make test` installs them on Debian). No count is compared with a stored number:
the plugin is checked exactly on a loop of known instructions, the counts of a model on
repeatability and on the one relation the NEON code exists for (it executes fewer
instructions than the portable loops).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import icount_arm as ic
import mlcc
from mlcc.targets import load_target
from test_targets_arm import MISSING as ARM_MISSING

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
ARM = load_target(ic.VECTOR_TARGET)


def _missing() -> str:
    """What test_targets_arm needs (cross gcc, its C library, qemu) plus the host gcc that
    builds the plugin."""
    if shutil.which("gcc") is None:
        return "gcc is not installed (apt-get install gcc)"
    return ARM_MISSING


MISSING = _missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "tools present")

# Each pass of the loop: one instruction of each class the plugin decodes, then the two that
# count and branch (neither SIMD nor FP). The program runs the loop argv[1] times.
LOOP_C = r"""
#include <stdlib.h>
int main(int argc, char **argv) {
    static float buf[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    long n = argc > 1 ? atol(argv[1]) : 0;
    if (n <= 0) return 0;
    __asm__ volatile(
        "1:\n\t"
        "ldr q1, [%[p]]\n\t"                 /* SIMD&FP load */
        "fmla v0.4s, v1.4s, v1.4s\n\t"       /* Advanced SIMD vector */
        "fadd s2, s2, s1\n\t"                /* scalar FP */
        "subs %[n], %[n], #1\n\t"
        "b.ne 1b\n\t"
        : [n] "+r"(n) : [p] "r"(buf) : "v0", "v1", "v2", "cc", "memory");
    return 0;
}
"""


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    return ic.build_plugin(tmp_path_factory.mktemp("icount"))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The digits CNN compiled for arm and for arm-portable."""
    tmp = tmp_path_factory.mktemp("digits")
    for target in (ic.VECTOR_TARGET, ic.PORTABLE_TARGET):
        mlcc.compile(DIGITS, tmp / target, target=target, name="digits")
    return {t: tmp / t for t in (ic.VECTOR_TARGET, ic.PORTABLE_TARGET)}


def _count_program(plugin: Path, exe: Path, arg: str, log: Path) -> ic.Counts:
    subprocess.run([*ARM.run, "-plugin", str(plugin), "-d", "plugin", "-D", str(log),
                    str(exe), arg], check=True, capture_output=True, timeout=60)
    (insns, simd, fp, simd_mem, target), = ic._LINE.findall(log.read_text())
    assert target == "aarch64"
    return ic.Counts(int(insns), int(simd), int(fp), int(simd_mem))


def test_plugin_counts_a_known_loop_exactly(plugin, tmp_path):
    src, exe = tmp_path / "loop.c", tmp_path / "loop"
    src.write_text(LOOP_C)
    subprocess.run([ARM.toolchain.cc, "-O1", "-o", str(exe), str(src)], check=True,
                   capture_output=True)
    base = _count_program(plugin, exe, "1000", tmp_path / "a.log")
    more = _count_program(plugin, exe, "3500", tmp_path / "b.log")
    assert more - base == ic.Counts(insns=5 * 2500, simd=2500, fp=2500, simd_mem=2500)
    assert _count_program(plugin, exe, "1000", tmp_path / "c.log") == base


def test_neon_build_executes_fewer_instructions_than_the_portable_build(plugin, folders,
                                                                        tmp_path):
    # check=True counts --runs 1 twice and raises unless both counts are identical
    counts = {t: ic.one_inference(folder, plugin, tmp_path / t) for t, folder in folders.items()}
    vec, port = counts[ic.VECTOR_TARGET], counts[ic.PORTABLE_TARGET]
    assert 0 < vec.insns < port.insns
    # No claim on the portable build's SIMD share: GCC auto-vectorizes its plain loops at -O3,
    # more or less depending on how they are written.
    assert vec.simd > 0
    table = ic.markdown_table([("digits_cnn", vec, port)])
    assert f"| digits_cnn | {vec.insns:,} | {port.insns:,} | {port.insns / vec.insns:.2f} |" \
        in table


def test_portable_target_builds_the_scalar_loops(folders):
    """arm-portable is arm with simd: none: -DMLCC_NO_VECTORS, same flags otherwise, and the
    scalar fallback of the kernels gives onnxruntime's outputs (as the vector code does)."""
    portable = load_target(ic.PORTABLE_TARGET)
    assert portable.simd == "none" and portable.defines() == ["-DMLCC_NO_VECTORS"]
    assert portable.toolchain.cflags == ARM.toolchain.cflags and portable.run == ARM.run
    folder = folders[ic.PORTABLE_TARGET]
    assert "-DMLCC_NO_VECTORS" in (folder / "Makefile").read_text()
    x = {"input": np.random.default_rng(5).standard_normal((3, 1, 1, 8, 8)).astype(np.float32)}
    session = ort.InferenceSession(str(DIGITS), providers=["CPUExecutionProvider"])
    model = mlcc.load(folder)
    for i in range(3):
        ref = session.run(None, {"input": x["input"][i]})[0]
        got = model.run({"input": x["input"][i]})["logits"]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_harness_runs_option(folders, tmp_path):
    folder = folders[ic.VECTOR_TARGET]
    inputs = ic.write_inputs(folder, tmp_path)
    outs = []
    for runs in ("1", "3"):
        out = tmp_path / f"out{runs}.bin"
        subprocess.run([*ARM.run, str(folder / "harness"), "--runs", runs,
                        str(folder / "weights.bin"), *map(str, inputs), str(out)], check=True,
                       capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and len(outs[0]) == 40
    for bad in ("0", "x", "2x", "1000001"):
        proc = subprocess.run([*ARM.run, str(folder / "harness"), "--runs", bad,
                               str(folder / "weights.bin"), *map(str, inputs),
                               str(tmp_path / "o.bin")], capture_output=True, text=True)
        assert proc.returncode == 1 and "--runs needs a count" in proc.stderr, bad


def test_table_columns():
    vec, port = ic.Counts(1000, 400, 0, 0), ic.Counts(2500, 500, 0, 0)
    fused = ic.Counts(800, 300, 0, 0)
    two = ic.markdown_table([("m", vec, port)]).splitlines()
    assert two[0].count("|") == 7 and two[2] == "| m | 1,000 | 2,500 | 2.50 | 40.0% | 20.0% |"
    three = ic.markdown_table([("m", vec, port, fused)]).splitlines()
    assert "arm-dotprod" in three[0] and three[0].count("|") == 9
    assert three[2] == "| m | 1,000 | 2,500 | 2.50 | 800 | 3.12 | 40.0% | 20.0% |"
