"""Speed and memory of range builds (--shape x=LO..HI, issue 21): a convolution on a feature
map of a dynamic size runs the kernel static builds choose at most sizes of the range (the
implicit GEMM's offsets computed at run time, Winograd's plan from the sizes), checked against
onnxruntime at odd sizes, for its arena against the static build at the largest size, and at
every width under AddressSanitizer; `mlcc bench` with a range prints its table."""
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import mlcc
from mlcc.errors import InputError
from mlcc.ops import conv_kernels as ck
from mlcc.ops.registry import lookup
from mlcc.targets import load_target
from test_dynamic_shapes import _needs, every_width_under_address_sanitizer

W_RANGE = (12, 61)
WIDTHS = (12, 13, 29, 47, 61)
DYNAMIC_MAP_KERNELS = {"implicit", "implicit_t", "implicit_t_1x1", "implicit_rows",
                       "implicit_cols", "winograd_2x2", "winograd_4x4"}


def _wide_convs(path):
    """Convolutions over a 13 x W map of every kind the kernel choice tells apart: a 3-channel
    strided stem, 3x3 of stride 1 and 2, a depthwise one, a 1x1 with a residual Add, a deep
    3x3 on the small map, a dilated one, an asymmetric 1x3 of stride (1, 2); two outputs (the
    driver of test_dynamic_shapes' AddressSanitizer test takes two)."""
    rng = np.random.default_rng(7)

    def w(name, *shape):
        return nh.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                             .astype(np.float32), name)

    def conv(x, y, wname, cout, cin, kh, kw, **attrs):
        inits.extend([w(wname, cout, cin, kh, kw), w(wname + "_b", cout)])
        return h.make_node("Conv", [x, wname, wname + "_b"], [y], name=y, **attrs)

    inits: list = []
    nodes = [
        conv("x", "stem", "w0", 16, 3, 3, 3, strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["stem"], ["r0"], name="relu0"),
        conv("r0", "c1", "w1", 32, 16, 3, 3, pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        conv("r1", "c2", "w2", 64, 32, 3, 3, strides=[2, 2], pads=[1, 1, 1, 1]),
        conv("c2", "dw", "w3", 64, 1, 3, 3, group=64, pads=[1, 1, 1, 1]),
        conv("dw", "pw", "w4", 64, 64, 1, 1),
        h.make_node("Add", ["pw", "c2"], ["res"], name="residual"),
        h.make_node("Relu", ["res"], ["r2"], name="relu2"),
        conv("r2", "deep", "w5", 64, 64, 3, 3, pads=[1, 1, 1, 1]),
        conv("deep", "dil", "w6", 48, 64, 3, 3, dilations=[2, 2], pads=[2, 2, 2, 2]),
        conv("dil", "y", "w7", 40, 48, 1, 3, strides=[1, 2], pads=[0, 1, 0, 1]),
        h.make_node("GlobalAveragePool", ["c1"], ["y2"], name="gap"),
    ]
    g = h.make_graph(nodes, "wide", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 13, "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 40, 4, "V"]),
                      h.make_tensor_value_info("y2", T.FLOAT, [1, 32, 1, 1])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return path


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    return _wide_convs(tmp_path_factory.mktemp("speed") / "wide.onnx")


def _variants(res, tgt: str) -> dict[str, str]:
    options = load_target(tgt).lowering_options()
    g = res.graph
    return {n.name: lookup(n).variant(n, g, options).name for n in g.nodes
            if n.op_type == "Conv"}


@pytest.mark.parametrize("tgt", ["x86", "x86-native"])
def test_range_build_runs_the_static_kernels(wide, tmp_path, tgt):
    """The variant of every Conv is the static build's at the largest width; the outputs match
    onnxruntime at odd widths and the arena is at most the static build's at the largest."""
    res = mlcc.compile(wide, tmp_path / "range", target=tgt,
                       shapes={"x": (1, 3, 13, W_RANGE)})
    static = mlcc.compile(wide, tmp_path / "static", target=tgt,
                          shapes={"x": (1, 3, 13, W_RANGE[1])}, build=False)
    chosen = _variants(res, tgt)
    assert chosen == _variants(static, tgt)
    assert len(set(chosen.values()) & DYNAMIC_MAP_KERNELS) >= 2, chosen
    # the offsets are computed by the kernel (NULL), not tabulated over one width
    assert "implicit_offsets" not in (tmp_path / "range" / "model.c").read_text()
    # the arena: the static build's at the largest width, but for the offsets table that a
    # kernel of the implicit GEMM now computes into its scratch (the static build has it in
    # the weights) when that kernel's call is at the peak
    g, options = res.graph, load_target(tgt).lowering_options()
    tables = [4 * -(-lookup(n).layer(n, g).kdim // 16) * 16 for n in g.nodes
              if n.op_type == "Conv" and lookup(n).variant(n, g, options).name.startswith(
                  "implicit")]
    assert res.manifest["arena_size"] <= static.manifest["arena_size"] + max(tables)
    assert res.manifest["weights_size"] < static.manifest["weights_size"]
    m = mlcc.load(tmp_path / "range")
    sess = ort.InferenceSession(str(wide), providers=["CPUExecutionProvider"])
    for width in WIDTHS:
        x = np.random.default_rng(width).standard_normal((1, 3, 13, width)).astype(np.float32)
        got = m.run({"x": x})
        for name, ref in zip(("y", "y2"), sess.run(None, {"x": x})):
            assert got[name].shape == ref.shape
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} at W={width}")
    # on a pool of 3 threads (the offsets computed once, before the workers read them): the
    # same bits
    x = np.random.default_rng(0).standard_normal((1, 3, 13, 59)).astype(np.float32)
    one, three = m.run({"x": x}), mlcc.load(tmp_path / "range", threads=3).run({"x": x})
    for name in ("y", "y2"):
        np.testing.assert_array_equal(one[name], three[name])


@pytest.mark.parametrize("target", [pytest.param("arm", marks=_needs("arm")),
                                    pytest.param("wasm", marks=_needs("wasm"))])
def test_width_range_on_cross_targets(wide, tmp_path, target):
    """The run-time offsets and plans in the arm (NEON, qemu) and wasm (SIMD128, node)
    builds: the conv test model against onnxruntime at both ends and an odd width between."""
    res = mlcc.compile(wide, tmp_path / target, target=target,
                       shapes={"x": (1, 3, 13, W_RANGE)})
    assert set(_variants(res, target).values()) & DYNAMIC_MAP_KERNELS
    m = mlcc.load(tmp_path / target)
    sess = ort.InferenceSession(str(wide), providers=["CPUExecutionProvider"])
    for width in (W_RANGE[0], 29, W_RANGE[1]):
        x = np.random.default_rng(width).standard_normal((1, 3, 13, width)).astype(np.float32)
        got = m.run({"x": x})
        for name, ref in zip(("y", "y2"), sess.run(None, {"x": x})):
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} at W={width}")


def test_a_dynamic_map_takes_the_choice_of_most_sizes():
    """1x1, 64 -> 64 channels on a 1 x W map, W in 8..32 (x86-native): the packed GEMM's
    panels of 32 waste columns at every width but 32, where a static build runs `packed`;
    the range build runs what the static builds run at most widths."""
    from mlcc.ir.symbolic import DimVar, SymInt
    w = SymInt.var(DimVar("W", 8, 32, 0))
    layer = ck.ConvLayer(1, 64, 64, 1, ck.Window2d(1, 1, 1, w, 1, w, 1, 1, 1, 1, 0, 0))
    native = ck.ConvTarget.from_options(load_target("x86-native").lowering_options())
    assert ck.choose_variant(ck.at_largest(layer), native).name == "packed"
    votes = [ck.choose_variant(ck.at_sizes(layer, {"W": v}), native).name for v in range(8, 33)]
    assert votes.count("implicit_t_1x1") > len(votes) // 2
    assert ck.choose_variant(layer, native).name == "implicit_t_1x1"


def test_dynamic_map_variants_are_the_kernels_with_run_time_geometry():
    """Every variant but the compile-time im2col table runs a map of a dynamic size."""
    assert set(ck.DYNAMIC_MAP_VARIANTS) == {v.name for v in ck.VARIANTS} - {"packed_table"}


@pytest.mark.parametrize("tgt,flags", [("x86", []), ("x86-native", ["-march=native"])])
def test_every_width_under_address_sanitizer(wide, tmp_path, tgt, flags):
    """All widths of the range (and one past each end), buffers of exactly their size, the
    arena of exactly ARENA_SIZE: no read or write past any under AddressSanitizer / UBSan."""
    folder = tmp_path / "wide"
    mlcc.compile(wide, folder, target=tgt, shapes={"x": (1, 3, 13, W_RANGE)}, name="wide",
                 build=False)
    every_width_under_address_sanitizer(folder, flags)


# ------------------------------------------------------------------ mlcc bench with a range

def test_bench_range_default_sizes():
    from mlcc.benchmark import range_sizes
    assert range_sizes([{"min": 32, "max": 1280}]) == [(32,), (80,), (202,), (509,), (1280,)]
    assert range_sizes([{"min": 1, "max": 8}]) == [(1,), (2,), (3,), (5,), (8,)]
    assert range_sizes([{"min": 4, "max": 5}]) == [(4,), (5,)]
    assert range_sizes([{"min": 1, "max": 8}, {"min": 64, "max": 64}])[-1] == (8, 64)


def test_bench_bad_sizes_are_clear_errors(wide):
    with pytest.raises(InputError, match="outside its range 12..61"):
        mlcc.bench(wide, shapes={"x": (1, 3, 13, W_RANGE)}, sizes=[(62,)], runs=1)
    with pytest.raises(InputError, match="give 1 size per entry"):
        mlcc.bench(wide, shapes={"x": (1, 3, 13, W_RANGE)}, sizes=[(13, 2)], runs=1)
    with pytest.raises(InputError, match="--sizes times a build over a range"):
        mlcc.bench(wide, shapes={"x": (1, 3, 13, 20)}, sizes=[(13,)], runs=1)


def test_cli_bench_with_a_range(wide):
    """The range build, a static build of each size and onnxruntime: one row per size."""
    from click.testing import CliRunner

    from mlcc.cli import main
    run = CliRunner().invoke(main, ["bench", str(wide), "--shape", "x=1,3,13,12..61",
                                    "--sizes", "12,47", "--runs", "2"])
    assert run.exit_code == 0, run.output
    out = run.output
    assert "inputs x=1,3,13,12..61, 1 thread: one range build against a static build" in out
    assert re.search(r"^range build: compile .* arena .* \(a static build at the largest "
                     r"sizes: .*, ratio 1\.0\d\d\)", out, re.M), out
    assert "| W | range | static | onnxruntime | range/static | range/onnxruntime |" in out
    rows = re.findall(r"^\| (\d+) \| .* \| ([\d.]+) \| [\d.]+ \| .* \| (\w+) \|$", out, re.M)
    assert [(w, agree) for w, _, agree in rows] == [("12", "agree"), ("47", "agree")]
    worst = max(float(r) for _, r, _ in rows)
    assert f"worst range/static (median latency): {worst:.3f}" in out
    bad = CliRunner().invoke(main, ["bench", str(wide), "--shape", "x=1,3,13,12..61",
                                    "--sizes", "12,wide"])
    assert bad.exit_code == 1 and "--sizes '12,wide'" in bad.output
