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
    chosen, fixed = _variants(res, tgt), _variants(static, tgt)
    # a variant for static maps only (packed_table: the strided 'y' on 256-bit x86, where
    # strided layers skip the implicit GEMM) gives way to one that takes a dynamic map
    assert chosen.keys() == fixed.keys()
    for name, variant in chosen.items():
        assert variant == fixed[name] if fixed[name] in ck.DYNAMIC_MAP_VARIANTS else \
            variant in ck.DYNAMIC_MAP_VARIANTS, (name, variant, fixed[name])
    assert len(set(chosen.values()) & DYNAMIC_MAP_KERNELS) >= 2, chosen
    # the offsets are computed by the kernel (NULL), not tabulated over one width
    code = (tmp_path / "range" / "model.c").read_text()
    assert "implicit_offsets" not in code
    # layers whose static kernel changes within the range run the small widths' kernel
    # there (WIDTHS has widths on both sides of each bound)
    target = ck.ConvTarget.from_options(load_target(tgt).lowering_options())
    layers = [lookup(n).layer(n, res.graph) for n in res.graph.nodes if n.op_type == "Conv"]
    classes = [(la, ck.choose_variants(la, target)) for la in layers]
    classes = [(la, c) for la, c in classes if len(c) == 2]
    assert classes
    for layer, ((small, v2), (rest, v1)) in classes:
        assert f"if ({small.c_expr()}) {{" in code and f"if ({rest.c_expr()}) {{" in code
        assert v1.name != v2.name and f"{v2.kernel_for(layer)}(" in code
        bound = small.bounds[0][1]
        assert any(w <= bound for w in WIDTHS) and any(w > bound for w in WIDTHS)
    # the arena: the static build's at the largest width, but for the offsets table that a
    # kernel of the implicit GEMM now computes into its scratch (the static build has it in
    # the weights) when that kernel's call is at the peak
    g, options = res.graph, load_target(tgt).lowering_options()
    tables = [4 * -(-lookup(n).layer(n, g).kdim // 16) * 16 for n in g.nodes
              if n.op_type == "Conv" and lookup(n).variant(n, g, options).name.startswith(
                  "implicit")]
    assert res.manifest["arena_size"] <= static.manifest["arena_size"] + max(tables)
    # the weights: the static build's, but for its offset tables, and a second packing of
    # each layer run by size class (at most 16 floats per weight: Winograd F(2x2)'s 4x4)
    extra = sum(64 + 4 * 16 * la.cin * la.cout_g for la, _ in classes)
    assert res.manifest["weights_size"] < static.manifest["weights_size"] + extra
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
    """1x1, 64 -> 64 channels on a 1 x W map, W in 8..32 (x86-avx512): the packed GEMM's
    panels of 32 waste columns at every width but 32, where a static build runs `packed`;
    the range build runs what the static builds run at most widths."""
    from mlcc.ir.symbolic import DimVar, SymInt
    w = SymInt.var(DimVar("W", 8, 32, 0))
    layer = ck.ConvLayer(1, 64, 64, 1, ck.Window2d(1, 1, 1, w, 1, w, 1, 1, 1, 1, 0, 0))
    native = ck.ConvTarget.from_options(load_target("x86-avx512").lowering_options())
    assert ck.choose_variant(ck.at_largest(layer), native).name == "packed"
    votes = [ck.choose_variant(ck.at_sizes(layer, {"W": v}), native).name for v in range(8, 33)]
    assert votes.count("implicit_t_1x1") > len(votes) // 2
    assert ck.choose_variant(layer, native).name == "implicit_t_1x1"


def test_small_maps_of_a_range_run_the_static_small_map_variant():
    """3x3, 256 -> 256 on a W x W map, W in 8..32 (x86): static builds run Winograd F(2x2) up
    to W = 10 and F(4x4) above. The range build runs both, F(2x2) where W is at most 10 and
    F(4x4) elsewhere; over two dimensions, in a box of sample sizes that all choose the small
    map's variant; without a range, or with a tuning choice, one variant."""
    from mlcc.ir.symbolic import DimVar, SymInt
    x86 = ck.ConvTarget.from_options(load_target("x86").lowering_options())
    w = SymInt.var(DimVar("W", 8, 32, 0))
    layer = ck.ConvLayer(1, 256, 256, 1, ck.Window2d(3, 3, w, w, w, w, 1, 1, 1, 1, 1, 1))
    static = {v: ck.choose_variant(ck.at_sizes(layer, {"W": v}), x86).name for v in range(8, 33)}
    assert {static[v] for v in range(8, 11)} == {"winograd_2x2"} and static[11] == "winograd_4x4"
    (small, v2), (rest, v1) = ck.choose_variants(layer, x86)
    assert (v2.name, v1) == ("winograd_2x2", ck.choose_variant(layer, x86))
    assert v1.name == "winograd_4x4"
    assert small.c_expr() == "dims[0] <= 10" and rest.c_expr() == "!(dims[0] <= 10)"
    assert small.env(w * w) == {"W": 10} and rest.env(w * w) == {"W": 32}
    hh, ww = SymInt.var(DimVar("H", 8, 32, 0)), SymInt.var(DimVar("W", 6, 40, 1))
    layer2 = ck.ConvLayer(1, 256, 256, 1, ck.Window2d(3, 3, hh, ww, hh, ww, 1, 1, 1, 1, 1, 1))
    (small, v2), (rest, v1) = ck.choose_variants(layer2, x86)
    assert [d.name for d, _ in small.bounds] == ["H", "W"] and v2.name == "winograd_2x2"
    box = [e for e in ck.sample_sizes(layer2) if all(e[d.name] <= b for d, b in small.bounds)]
    assert box and all(ck.choose_variant(ck.at_sizes(layer2, e), x86) == v2 for e in box)
    assert small.c_expr() == " && ".join(f"dims[{i}] <= {b}"
                                         for i, (_, b) in enumerate(small.bounds))
    assert ck.choose_variants(ck.at_sizes(layer, {"W": 9}), x86) == [
        (None, ck.variant_named("winograd_2x2"))]
    tuned = {ck.layer_key(layer): "winograd_4x4"}
    assert ck.choose_variants(layer, x86, tuned) == [(None, ck.variant_named("winograd_4x4"))]


def test_dynamic_map_variants_are_the_kernels_with_run_time_geometry():
    """Every variant runs a map of a dynamic size but those whose geometry is fixed at compile
    time: packed_table's im2col table, and frames' GEMM, whose rows are the windows."""
    assert set(ck.DYNAMIC_MAP_VARIANTS) == {v.name for v in ck.VARIANTS} - {"packed_table",
                                                                            "frames"}


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
