"""The kernels' portable scalar loops, on the host: a target with `simd: none` builds them with
-DMLCC_NO_VECTORS even under GCC (they are what other compilers get, and what arm-portable
measures the NEON code against). Checked against onnxruntime where the kernels have vector
paths (GEMM tiles and their edges, the K blocking, pooling, the vector exp of Sigmoid and
SiLU), and for warnings under -pedantic."""
from __future__ import annotations

import subprocess

import pytest
from onnx import helper

from mlcc import resources
from mlcc.targets import load_target, parse_target
from util import check_model, check_node, make_model, rand


@pytest.fixture(scope="module")
def portable(tmp_path_factory) -> str:
    """targets/x86.yaml with simd: none, as a file."""
    text = (resources.targets() / "x86.yaml").read_text()
    assert "\nsimd: sse2\n" in text
    path = tmp_path_factory.mktemp("target") / "x86-portable.yaml"
    path.write_text(text.replace("\nname: x86\n", "\nname: x86-portable\n")
                    .replace("\nsimd: sse2\n", "\nsimd: none\n"))
    assert load_target(str(path)).defines() == ["-DMLCC_NO_VECTORS"]
    return str(path)


def test_simd_level_picks_the_kernel_defines():
    base = "name: t\narch: aarch64\ntoolchain: {cc: gcc}\n"
    assert parse_target(base).defines() == ["-DMLCC_VECTOR_BYTES=16"]   # simd: auto
    assert parse_target(base + "simd: none\n").defines() == ["-DMLCC_NO_VECTORS"]
    assert parse_target(base + "simd: neon\nvector_bits: 128\n").defines() == [
        "-DMLCC_VECTOR_BYTES=16"]


def test_portable_kernels_compile_warning_free():
    rt = resources.runtime_c()
    sources = sorted((rt / "kernels").glob("*.c"))
    subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic", "-Werror",
                    "-DMLCC_NO_VECTORS", f"-I{rt / 'include'}", f"-I{rt / 'kernels'}",
                    "-fsyntax-only", *map(str, sources)], check=True)


@pytest.mark.parametrize("m,k,n,tb", [(7, 13, 17, 1), (6, 300, 33, 0), (1, 9, 8, 1)])
def test_gemm(portable, tmp_path, m, k, n, tb):
    """Tile edges in both directions, K past one cache block (256)."""
    b = rand(*((n, k) if tb else (k, n)), seed=1)
    check_node("Gemm", {"a": rand(m, k)}, initializers={"b": b, "c": rand(n, seed=2)},
               tmp_path=tmp_path, target=portable, transB=tb, alpha=0.5, beta=2.0)


def test_conv_pool_and_vector_activations(portable, tmp_path):
    """im2col + GEMM with asymmetric pads, depthwise, SiLU and Sigmoid epilogues (the vector
    exp in the vector build), max and average pooling with edges."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 0, 2, 1],
                              strides=[2, 2]),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"], ["silu"], name="silu_mul"),
             helper.make_node("Conv", ["silu", "dw"], ["d"], name="dwconv", group=6,
                              pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["d"], ["ds"], name="dsig"),
             helper.make_node("MaxPool", ["ds"], ["mp"], name="maxpool", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
             helper.make_node("AveragePool", ["d"], ["ap"], name="avgpool", kernel_shape=[3, 2],
                              strides=[2, 1], pads=[1, 1, 0, 0], count_include_pad=0)]
    x = rand(1, 3, 13, 11)
    model = make_model(nodes, {"x": x}, ["mp", "ap"],
                       initializers={"w": rand(6, 3, 3, 3, seed=1), "dw": rand(6, 1, 3, 3, seed=2)})
    check_model(model, {"x": x}, tmp_path, target=portable)
