"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (runtime_c/kernels/winograd.c,
mlcc/ops/winograd.py): against the direct convolution (the same model without `winograd`) and
onnxruntime, on odd channel counts and sizes, with padding, bias and fused activations. Runs on
the host through the x86 targets (both `winograd: true`) and a portable copy (the wasm
target's own model tests run in tests/test_targets_wasm.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import mlcc
from mlcc import resources
from mlcc.ops import winograd
from mlcc.targets import load_target
from util import compile_and_run, make_model, reference_outputs



@pytest.fixture(scope="module")
def x86_winograd(tmp_path_factory) -> dict[str, str]:
    """x86's target file (winograd: true) with simd: none: the kernel's scalar loops."""
    folder = tmp_path_factory.mktemp("target")
    text = (resources.targets() / "x86.yaml").read_text()
    assert "\nsimd: sse2\n" in text and "\nwinograd: true\n" in text
    paths = {}
    name = "x86-portable-winograd"
    paths[name] = str(folder / f"{name}.yaml")
    Path(paths[name]).write_text(text.replace("\nsimd: sse2\n", "\nsimd: none\n")
                                 .replace("name: x86", f"name: {name}", 1))
    assert load_target(paths[name]).winograd
    assert load_target(paths["x86-portable-winograd"]).defines() == ["-DMLCC_NO_VECTORS"]
    return paths


def test_weight_transform_matches_definition():
    """U = G g G^T, and the F(2x2, 3x3) identity Y = A^T [U * (B^T d B)] A on one tile."""
    rng = np.random.default_rng(1)
    g, d = rng.standard_normal((3, 3)), rng.standard_normal((4, 4))
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)
    u = winograd.G @ g @ winograd.G.T
    y = at @ (u * (bt @ d @ bt.T)) @ at.T
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(y, direct, rtol=1e-12, atol=1e-12)
    packed = winograd.transform_weights(g.reshape(1, 1, 3, 3))
    # one 8-row panel per product (rows past the one output channel are zero)
    np.testing.assert_allclose(packed.reshape(16, 8)[:, 0], u.reshape(16), rtol=1e-6)


def test_f4x4_transform_matches_definition():
    """F(4x4, 3x3) with its own B^T and A^T (written out here, not taken from the kernel):
    Y = A^T [(G4 g G4^T) * (B^T d B)] A is the direct 4x4 output of a 6x6 patch, and the packed
    weights hold the 36 U_e in order."""
    rng = np.random.default_rng(2)
    g, d = rng.standard_normal((3, 3)), rng.standard_normal((6, 6))
    bt = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                   [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float)
    at = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                   [0, 1, -1, 8, -8, 1]], float)
    u = winograd.G4 @ g @ winograd.G4.T
    y = at @ (u * (bt @ d @ bt.T)) @ at.T
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(4)] for i in range(4)])
    np.testing.assert_allclose(y, direct, rtol=1e-12, atol=1e-12)
    packed = winograd.transform_weights(g.reshape(1, 1, 3, 3), 4)
    np.testing.assert_allclose(packed.reshape(36, 8)[:, 0], u.reshape(36), rtol=1e-6)


def test_tile_size_by_panels():
    """F(4x4) from 11x11 up (fewer products in whole 8-tile panels), F(2x2) below and on thin
    maps; the plan's scratch grows with the 36 products."""
    assert [winograd.tile_size(s, s) for s in (1, 3, 7, 10, 11, 14, 56)] == [2] * 4 + [4] * 3
    assert winograd.tile_size(2, 200) == 2 and winograd.tile_size(200, 2) == 2
    assert winograd.tile_size(5, 11) == 4
    assert winograd.plan(64, 64, 56, 56, 4)[1] > winograd.plan(64, 64, 56, 56, 2)[1]


def test_choice_by_target():
    """4-lane targets take every qualifying layer; 16-lane ones (x86-avx512's 32-column
    panels) only where the fitted cost is below the direct convolution's: not few channels,
    not 6x6 maps or 64 channels at 10x10 (one-layer A/Bs 1.45x, 1.19x, 1.11x slower)."""
    narrow = load_target("x86").lowering_options()
    wide = load_target("x86-avx512").lowering_options()
    assert (narrow["gemm_nr"], narrow["vector_lanes"]) == (4, 4)
    assert (wide["gemm_nr"], wide["vector_lanes"]) == (32, 16)
    assert load_target("wasm").lowering_options()["gemm_nr"] == 8
    for shape in ((8, 8, 80, 80), (192, 384, 6, 6), (64, 64, 10, 10), (64, 64, 56, 56)):
        assert winograd.choose(*shape, narrow) == winograd.tile_size(*shape[2:])
    assert winograd.choose(8, 8, 80, 80, wide) == 0
    assert winograd.choose(192, 384, 6, 6, wide) == 0
    assert winograd.choose(64, 64, 10, 10, wide) == 0
    assert winograd.choose(512, 512, 7, 7, wide) == 2
    assert winograd.choose(64, 64, 56, 56, wide) == 4
    assert winograd.choose(48, 192, 13, 13, wide) == 4
    # F(4x4) whose few tiles fill so little of x86-native's 32-column panels that its GEMM
    # multiplies as much as the direct kernel: a CRNN's 4 x 32 map (8 tiles; 1.25x slower at
    # 256 channels), 11x11 (9 tiles); on 4-lane targets, with 8 or 4 columns, it stays
    assert winograd.choose(256, 256, 4, 32, wide) == 0
    assert winograd.choose(128, 256, 4, 32, wide) == 0
    assert winograd.choose(64, 64, 11, 11, wide) == 0
    assert winograd.choose(128, 128, 8, 32, wide) == 4
    assert winograd.choose(256, 256, 4, 32, narrow) == 4
    assert winograd.choose(64, 64, 56, 56, {**wide, "winograd": False}) == 0


def test_applies_only_to_3x3_stride1_dense():
    assert winograd.applies(3, 3, 1, 1, 1, 1, 1, 16, 16)
    assert not winograd.applies(3, 3, 2, 2, 1, 1, 1, 16, 16)
    assert not winograd.applies(3, 3, 1, 1, 2, 2, 1, 128, 128)
    assert not winograd.applies(3, 3, 1, 1, 1, 1, 2, 16, 16)
    assert not winograd.applies(1, 1, 1, 1, 1, 1, 1, 16, 16)
    assert not winograd.applies(3, 3, 1, 1, 1, 1, 1, 3, 16)


# (in channels, out channels, height, width, padding, activation): 1/3/17 channels, maps from
# 1x1 to 13x13 (odd: partial 2x2 tiles), more tiles than one 64-tile block, a deep one (> 256,
# the GEMM's k block), rows of more than 16 columns (for 4x4 tiles, the vector paths of the row
# split and of the output transform) with partial tiles at the right and bottom, and two large
# enough to be cut between threads (MLCC_MIN_PARALLEL_MACS), the second with an activation
# whose vector form has tails (Sigmoid: applied to each run of tiles by the output transform,
# runs that the cut between threads moves), and two whose last partial panel of tiles the
# threads share by output channels (21: a last A panel of 5 rows), on 2 threads (44 x 48,
# F(4x4), x86-native: 132 tiles = 4 panels of 32 + 4) and on 2 and 3 (34 x 34: F(2x2)'s 289 tiles
# on x86-native's 3 threads and x86's 2 and 3, F(4x4)'s 81 on x86's 2)
CASES = [(1, 1, 1, 1, 1, None), (3, 17, 5, 7, 1, "Relu"), (17, 3, 13, 11, 0, None),
         (17, 17, 13, 13, 1, "Sigmoid"), (3, 1, 3, 3, 0, None), (1, 3, 2, 9, 1, "Relu"),
         (9, 24, 23, 19, 1, None), (300, 9, 4, 5, 1, "Relu"), (5, 7, 18, 37, 1, None),
         (8, 8, 33, 35, 0, "Relu"), (64, 40, 30, 29, 1, "Relu"),
         (24, 24, 31, 27, 1, "Sigmoid"), (24, 21, 44, 48, 1, "Relu"),
         (24, 21, 34, 34, 1, "Sigmoid")]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """Every case as a branch of one model: (model, feeds, outputs of the direct build on x86,
    onnxruntime's outputs), shared by all targets and tiles."""
    rng = np.random.default_rng(5)
    feeds, weights, nodes, outs = {}, {}, [], []
    for i, (cin, cout, h, w, pad, act) in enumerate(CASES):
        feeds[f"x{i}"] = rng.standard_normal((2, cin, h, w)).astype(np.float32)
        weights[f"W{i}"] = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
        weights[f"b{i}"] = rng.standard_normal(cout).astype(np.float32)
        nodes.append(helper.make_node("Conv", [f"x{i}", f"W{i}", f"b{i}"],
                                      [f"c{i}" if act else f"y{i}"], pads=[pad] * 4))
        if act:
            nodes.append(helper.make_node(act, [f"c{i}"], [f"y{i}"]))
        outs.append(f"y{i}")
    model = make_model(nodes, feeds, outs, initializers=weights)
    folder = tmp_path_factory.mktemp("direct")
    target = tmp_path_factory.mktemp("direct-target") / "x86-direct.yaml"
    target.write_text((resources.targets() / "x86.yaml").read_text()
                      .replace("name: x86", "name: x86-direct", 1)
                      .replace("\nwinograd: true\n", "\nwinograd: false\n"))
    direct = compile_and_run(model, feeds, folder, target=str(target))
    assert "mlcc_f32_conv2d__winograd_2x2" not in next(folder.glob("*/out/model.c")).read_text()
    return model, feeds, direct, reference_outputs(model, feeds)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("target", ["x86", "x86-native", "x86-portable-winograd", "wasm"])
def test_winograd_conv(target, tile, x86_winograd, cases, tmp_path, monkeypatch):
    """All cases on F(tile x tile, 3x3), against the direct convolution and onnxruntime. On
    wasm the GEMM's panels are 8 columns wide against 4-lane transforms, on x86-native 32
    against 16 lanes (AVX-512: masked stores of the vectors that straddle two panels or end a
    tile row); the portable build runs the scalar loops the vector builds leave out."""
    if target == "wasm":
        missing = "; ".join(load_target("wasm").missing_tools())
        if missing:
            pytest.skip(missing)

    monkeypatch.setattr(winograd, "MIN_CHANNELS", 1)   # the kernel at every channel count
    monkeypatch.setattr(winograd, "tile_size", lambda oh, ow: tile)
    monkeypatch.setattr(winograd, "pays", lambda *args: True)
    model, feeds, direct, ref = cases
    got = compile_and_run(model, feeds, tmp_path / "w",
                          target=x86_winograd.get(target, target))
    src = next((tmp_path / "w").glob("*/out/model.c")).read_text()
    assert src.count(winograd.KERNELS[tile] + "(") == len(CASES)
    if target in ("x86", "x86-native"):
        # the same bits on 2 and 3 threads: images split by tiles (more than two panels per
        # thread: the last case's F(4x4) on x86, 6 panels of 16, split on 2 threads, phase
        # by phase on 3) or phases cut into units
        for threads in (2, 3):
            threaded = mlcc.load(next((tmp_path / "w").glob("*/out")),
                                 threads=threads).run(feeds)
            for name in ref:
                np.testing.assert_array_equal(threaded[name], got[name],
                                              err_msg=f"{name}, {threads} threads")
    for name in ref:
        assert got[name].shape == ref[name].shape
        # mlcc verify's tolerance: 1e-4 x max(1, max |ref|)
        tol = 1e-4 * max(1.0, float(np.abs(ref[name]).max()))
        assert np.abs(got[name] - direct[name]).max() <= tol, name
        assert np.abs(got[name] - ref[name]).max() <= tol, name
        assert not np.array_equal(got[name], direct[name]) or name == "y0", name


def test_default_targets_opt_in():
    """wasm and both x86 targets compute 3x3 convolutions by Winograd, arm keeps the direct
    convolution (not measured there)."""
    for name in ("wasm", "x86", "x86-native"):
        assert load_target(name).winograd
    for name in ("arm", "arm-dotprod"):
        assert not load_target(name).winograd


def test_winograd_key_is_a_bool():
    from mlcc.targets.target import TargetError, parse_target
    base = "name: t\narch: x86_64\ntoolchain: {cc: gcc}\n"
    assert not parse_target(base).winograd
    assert parse_target(base + "winograd: true\n").winograd
    with pytest.raises(TargetError, match="winograd must be a bool"):
        parse_target(base + "winograd: 1\n")
