"""Operators on the cross targets, arm (aarch64 under qemu), wasm (in node) and the Cortex-M
microcontrollers (a firmware in qemu-system-arm), against onnxruntime on the host at the same
tolerance as x86: the kernels with vector paths (NEON and SIMD128 from the same
vector-extension source), every data type through the harness's raw files, status codes, and
the int8 program bit for bit against x86.

Each case runs once per target; a target whose toolchain is missing is skipped with the
package to install (`make test` installs them on Debian). Target-specific matters (the
harness, the runner, the JavaScript API) live in test_targets_arm.py, test_targets_wasm.py
and test_cortex_m.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import onnx
from onnx import helper

import mlcc
from mlcc.api import compare
from mlcc.errors import RuntimeStatusError, UnsupportedError
from test_targets_arm import needs_arm
from test_targets_wasm import needs_wasm
from test_cortex_m import pytestmark as needs_cortex_m
from util import (check_model, check_node, compile_and_run, make_model, rand,
                  reference_outputs)

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
# cortex-m4 runs the kernels' portable loops, cortex-m55 those loops as GCC auto-vectorizes
# them for Helium (MVE); cortex-m7 is the M4's instruction set (tests/test_cortex_m.py)
TARGETS = [pytest.param("arm", marks=needs_arm), pytest.param("wasm", marks=needs_wasm),
           pytest.param("cortex-m4", marks=needs_cortex_m),
           pytest.param("cortex-m55", marks=needs_cortex_m)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c,h,w,m,k,stride,pads,group", [
    (3, 11, 9, 5, 3, 2, [1, 0, 2, 1], 1),       # packed GEMM over gathered panels, odd pads
    (7, 5, 5, 11, 1, 1, [0, 0, 0, 0], 1),       # 1x1 stride 1: input planes read directly
    (6, 10, 7, 6, 3, 2, [1, 1, 1, 1], 6),       # depthwise, stride 2
    (8, 9, 13, 8, 5, 1, [2, 2, 2, 2], 8),       # depthwise 5x5
])
def test_conv(tmp_path, target, c, h, w, m, k, stride, pads, group):
    check_node("Conv", {"x": rand(1, c, h, w)},
               initializers={"w": rand(m, c // group, k, k, seed=1), "b": rand(m, seed=2)},
               tmp_path=tmp_path, target=target, strides=[stride, stride], pads=pads,
               group=group)


@pytest.mark.parametrize("target", TARGETS)
def test_conv1d_frames(tmp_path, target):
    """A 1-D convolution over one channel with 5 windows: where there are vectors of 4 lanes
    (arm, wasm), mlcc_f32_conv2d__frames (the GEMM's B panels, 5 rows of its tile, a
    transposed write-back); the Cortex-M targets, without vectors, keep the packed GEMM."""
    check_node("Conv", {"x": rand(2, 1, 301)},
               initializers={"w": rand(13, 1, 61, seed=1), "b": rand(13, seed=2)},
               tmp_path=tmp_path, target=target, strides=[60])
    assert ("mlcc_f32_conv2d__frames(" in next(tmp_path.glob("**/model.c")).read_text()) == \
        (target in ("arm", "wasm"))


@pytest.mark.parametrize("target", TARGETS)
def test_conv3d(tmp_path, target):
    """3-D convolutions as 2-D ones (mlcc/ops/conv3d.py): a 3x3x3 / (1, 2, 2) one over gathered
    depth taps with a fused Relu, then a (3, 1, 1) one over the input viewed as rows."""
    x = rand(1, 3, 5, 9, 7)
    model = make_model([
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1] * 6, strides=[1, 2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 0, 0, 1, 0, 0], group=2)],
        {"x": x}, ["y"], initializers={"w1": rand(6, 3, 3, 3, 3, seed=1), "b1": rand(6, seed=2),
                                       "w2": rand(4, 3, 3, 1, 1, seed=3)})
    check_model(model, {"x": x}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m,k,n,tb", [(7, 13, 17, 1), (6, 300, 33, 0), (1, 9, 8, 1)])
def test_gemm(tmp_path, target, m, k, n, tb):
    """Column counts around the 128-bit tiles (2 x 4 lanes), K past one cache block (256)."""
    b = rand(*((n, k) if tb else (k, n)), seed=1)
    check_node("Gemm", {"a": rand(m, k)}, initializers={"b": b, "c": rand(n, seed=2)},
               tmp_path=tmp_path, target=target, transB=tb, alpha=0.5, beta=2.0)


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_batched_runtime_operands(tmp_path, target):
    check_node("MatMul", {"a": rand(2, 1, 3, 5), "b": rand(4, 5, 9, seed=1)},
               tmp_path=tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1],
                 "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 1, 1, 0],
                 "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 1, 0, 0],
                     "count_include_pad": 0}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),   # pool.c avg_row_2x2
    ("GlobalAveragePool", {}),
    ("LpPool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 1, 0, 0], "p": 3}),
    ("GlobalLpPool", {}),
])
def test_pool(tmp_path, target, op, attrs):
    # 11 planes: GlobalAveragePool sums 8 rows at a time (reduce.c rows_sum), then 3 alone
    check_node(op, {"x": rand(1, 11, 13, 10)}, tmp_path=tmp_path, target=target, **attrs)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op,opset,attrs", [
    ("GroupNormalization", 21, {"num_groups": 3}),
    ("MeanVarianceNormalization", 13, {"axes": [0, 2, 3]}),
    ("RMSNormalization", 23, {"axis": -2}),
    ("LpNormalization", 13, {"axis": 1, "p": 1}),
])
def test_normalizations(tmp_path, target, op, opset, attrs):
    from test_ops_norm import _typed_model
    shape = (2, 6, 5, 7)
    params = {"GroupNormalization": {"scale": rand(6, seed=1), "bias": rand(6, seed=2)},
              "RMSNormalization": {"scale": rand(5, 7, seed=1)}}.get(op, {})
    check_model(_typed_model(op, shape, params, False, opset, **attrs),
                {"x": rand(*shape) * 2 + 0.5}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("equation,shapes", [("bhqd,bhkd->bhqk", [(2, 3, 5, 7), (2, 3, 4, 7)]),
                                             ("ijk,j->ik", [(3, 5, 7), (5,)])])
def test_einsum(tmp_path, target, equation, shapes):
    check_node("Einsum", {f"x{i}": rand(*s, seed=i) for i, s in enumerate(shapes)},
               tmp_path=tmp_path, target=target, opset=12, equation=equation)


@pytest.mark.parametrize("target", TARGETS)
def test_rotary_embedding(tmp_path, target):
    from test_ops_rotary import _case
    model, inputs = _case((2, 5, 12), 3, True, num_heads=2, interleaved=1)
    check_model(model, inputs, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_onnx_attention(tmp_path, target):
    """The fused kernel's grouped heads, value heads of another size, softcap, a broadcast
    bool mask with a fully-masked row, causal over a past (3-D layout), present outputs."""
    from test_ops_attention import check, qkv
    feeds = qkv(2, 6, 2, 5, 5, 4, dv=3, layout=3, past=2)
    mask = np.random.default_rng(5).random((2, 1, 5, 7)) > 0.3
    mask[1, 0, 2] = False
    feeds["attn_mask"] = mask
    check(tmp_path, feeds, n_outputs=3, target=target, is_causal=1, softcap=2.0,
          q_num_heads=6, kv_num_heads=2)


@pytest.mark.parametrize("target", TARGETS)
def test_tensor_scatter(tmp_path, target):
    """Circular (negative and wrapping indices) and linear, and a linear write past the end as
    a status."""
    feeds = {"past": rand(3, 2, 7, 4), "update": rand(3, 2, 3, 4, seed=1),
             "w": np.array([6, -2, 15], np.int64)}
    nodes = [helper.make_node("TensorScatter", ["past", "update", "w"], ["c"], mode="circular"),
             helper.make_node("TensorScatter", ["past", "update"], ["l"])]
    check_model(make_model(nodes, feeds, ["c", "l"], opset=24), feeds, tmp_path, target=target)
    feeds["w"] = np.array([0, 5, 1], np.int64)
    model = make_model([helper.make_node("TensorScatter", ["past", "update", "w"], ["y"])],
                       feeds, ["y"], opset=24)
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, feeds, tmp_path / "status", target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_linear_attention_and_causal_conv(tmp_path, target):
    """The gated-delta recurrence with grouped heads and a past state; the causal convolution
    with its carried state and SiLU."""
    rng = np.random.default_rng(0)
    key = rng.standard_normal((2, 5, 2, 3))
    key /= np.linalg.norm(key, axis=-1, keepdims=True)
    feeds = {"q": rand(2, 5, 12), "k": key.reshape(2, 5, 6).astype(np.float32),
             "v": rand(2, 5, 8, seed=2), "past": rand(2, 2, 3, 4, seed=3),
             "decay": rand(2, 5, 2, seed=4, low=-1.0, high=0.0),
             "beta": rand(2, 5, 2, seed=5, low=0.1, high=0.9),
             "x": rand(2, 5, 7, seed=6), "w": rand(5, 1, 4, seed=7), "state": rand(2, 5, 3)}
    nodes = [helper.make_node("LinearAttention", ["q", "k", "v", "past", "decay", "beta"],
                              ["y", "present"], q_num_heads=4, kv_num_heads=2),
             helper.make_node("CausalConvWithState", ["x", "w", "", "state"], ["c", "cs"],
                              activation="silu")]
    model = make_model(nodes, feeds, ["y", "present", "c", "cs"], opset=27)
    check_model(model, feeds, tmp_path, target=target, reference="onnx")


@pytest.mark.parametrize("target", TARGETS)
def test_det(tmp_path, target):
    check_node("Det", {"x": rand(2, 3, 7, 7)}, tmp_path=tmp_path, target=target, opset=11)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode,ctm", [("linear", "half_pixel"), ("nearest", "asymmetric")])
def test_resize(tmp_path, target, mode, ctm):
    x = rand(1, 3, 7, 9)
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="resize_node",
                            mode=mode, coordinate_transformation_mode=ctm)
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 1.5], np.float32)}
    check_model(make_model([node], {"x": x}, ["y"], initializers=inits, opset=19), {"x": x},
                tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_conv_transpose(tmp_path, target):
    """Its GEMM and scatter-add through the pool's ranges (the caller alone here)."""
    check_node("ConvTranspose", {"x": rand(1, 5, 6, 7)}, initializers={"w": rand(5, 3, 3, 3)},
               tmp_path=tmp_path, target=target, strides=[2, 2], pads=[1, 0, 0, 1])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axis,opset", [(-1, 17), (1, 11)])
def test_softmax(tmp_path, target, axis, opset):
    check_node("Softmax", {"x": rand(3, 37, 5) * 20}, tmp_path=tmp_path, target=target,
               opset=opset, axis=axis)


@pytest.mark.parametrize("target", TARGETS)
def test_transcendentals(tmp_path, target):
    """Sigmoid and Tanh: the C library's expf/tanhf and the vector exp."""
    x = rand(3, 37, 5) * 8
    nodes = [helper.make_node("Sigmoid", ["x"], ["g"], name="sigmoid"),
             helper.make_node("Tanh", ["x"], ["t"], name="tanh")]
    check_model(make_model(nodes, {"x": x}, ["g", "t"]), {"x": x}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_fused_activations_and_broadcasting(tmp_path, target):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c"], ["h"], name="hswish"),
             helper.make_node("Mul", ["h", "s"], ["m"], name="scale"),
             helper.make_node("LeakyRelu", ["m"], ["y"], name="leaky", alpha=0.1)]
    x = rand(1, 4, 9, 6)
    model = make_model(nodes, {"x": x, "s": rand(1, 5, 1, 6, seed=3)}, ["y"],
                       initializers={"w": rand(5, 4, 3, 3, seed=1)})
    check_model(model, {"x": x, "s": rand(1, 5, 1, 6, seed=3)}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_every_dtype_through_the_raw_files(tmp_path, target):
    """bool, int64 (BigInt64Array in JavaScript), uint8, int32 inputs and outputs, several of
    each, in model order."""
    rng = np.random.default_rng(0)
    feeds = {"cond": rng.random((3, 4)) > 0.5, "a": rand(3, 4), "b": rand(1, 4, seed=1),
             "idx": np.array([[2, -1], [0, 1]], np.int64),
             "bytes": rng.integers(0, 256, (2, 5)).astype(np.uint8),
             "i32": rng.integers(-1000, 1000, (4,)).astype(np.int32)}
    nodes = [helper.make_node("Where", ["cond", "a", "b"], ["w"], name="where"),
             helper.make_node("Not", ["cond"], ["ncond"], name="not"),
             helper.make_node("Gather", ["w", "idx"], ["g"], name="gather", axis=1),
             helper.make_node("Concat", ["idx", "idx"], ["idx2"], name="cat", axis=0),
             helper.make_node("Transpose", ["bytes"], ["bytes_t"], name="tr"),
             helper.make_node("Concat", ["i32", "i32"], ["i32n"], name="cat32", axis=0)]
    model = make_model(nodes, feeds, ["g", "ncond", "idx2", "bytes_t", "i32n"])
    got = check_model(model, feeds, tmp_path, target=target)
    assert got["ncond"].dtype == np.bool_ and got["idx2"].dtype == np.int64
    assert list(got) == ["g", "ncond", "idx2", "bytes_t", "i32n"]


@pytest.mark.parametrize("target", TARGETS)
def test_gather_out_of_range_index_is_a_status(tmp_path, target):
    x = rand(5, 3)
    i = np.array([0, 7, 1], dtype=np.int64)
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
                       {"x": x, "i": i}, ["y"])
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, {"x": x, "i": i}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op,layout", [("LSTM", 0), ("GRU", 1), ("RNN", 0)])
def test_recurrent(tmp_path, target, op, layout):
    """LSTM, GRU, RNN bidirectional with initial states, per-batch lengths (recurrent.c on
    the panel GEMM's NEON / SIMD128 paths), peepholes and clip."""
    from test_ops_recurrent import build, check
    check(tmp_path, *build(op, seq=9, batch=3, inp=13, hidden=33, direction="bidirectional",
                           layout=layout, init_h=True, init_c=True, seq_lens=[9, 4, 1],
                           peep=True, clip=3.0, seed=3), target=target)


@pytest.fixture(scope="module")
def digits_int8_x86(tmp_path_factory):
    """The digits CNN's int8 program on x86 (calibrated on digits_sample.npz), its inputs and
    its outputs on the first 6 of them: what every target must reproduce, built once."""
    tmp = tmp_path_factory.mktemp("digits_int8")
    with np.load(ROOT / "examples" / "digits" / "digits_sample.npz") as d:
        x = d["input"].astype(np.float32)
    np.savez(tmp / "calib.npz", input=x[:, None])
    mlcc.compile(DIGITS, tmp / "x86", target="x86",
                 quantize=mlcc.api.QuantizeConfig(tmp / "calib.npz"))
    m = mlcc.load(tmp / "x86")
    return tmp / "calib.npz", x[:6], [m.run({"input": xi[None]})["logits"] for xi in x[:6]]


@pytest.mark.parametrize("target", TARGETS[:2])
def test_w8a16_digits_is_the_x86_native_result_bit_for_bit(tmp_path, target):
    """Every Conv and Gemm at W8A16 (--w8a16): the portable int16 kernels on the target give
    x86-native's AVX-512 bytes (exact sums, one epilogue; the float layers between, Relu,
    MaxPool and Flatten, are exact too)."""
    with np.load(ROOT / "examples" / "digits" / "digits_sample.npz") as d:
        x = d["input"].astype(np.float32)
    np.savez(tmp_path / "calib.npz", input=x[:, None])
    outs = {}
    for name in ("x86-native", target):
        mlcc.compile(DIGITS, tmp_path / name, target=name,
                     quantize=mlcc.api.QuantizeConfig(tmp_path / "calib.npz", auto_mix=False,
                                                      w8a16=("op:Conv", "op:Gemm")))
        assert "mlcc_s16_conv2d__packed(" in (tmp_path / name / "model.c").read_text()
        m = mlcc.load(tmp_path / name)
        outs[name] = [m.run({"input": xi[None]})["logits"] for xi in x[:6]]
    for a, b in zip(outs["x86-native"], outs[target]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("target", TARGETS)
def test_int8_digits_is_the_x86_result_bit_for_bit(tmp_path, target, digits_int8_x86):
    """The int8 program (portable integer kernels, float requantization) gives the same bits
    on the target as on x86."""
    calib, x, x86 = digits_int8_x86
    mlcc.compile(DIGITS, tmp_path / target, target=target,
                 quantize=mlcc.api.QuantizeConfig(calib))
    m = mlcc.load(tmp_path / target)
    for xi, a in zip(x, x86):
        np.testing.assert_array_equal(a, m.run({"input": xi[None]})["logits"])


@pytest.mark.parametrize("target", TARGETS)
def test_int8_recurrent(tmp_path, target, int8_recurrent_x86):
    """int8 LSTM and GRU (input projections on the integer GEMM, the steps in float;
    test_quant_recurrent.py) on the target: SQNR >= 30 dB against onnxruntime's float
    outputs, and the x86 int8 build's outputs up to float rounding (>= 50 dB)."""
    from test_quant_recurrent import features, kws_model, quantized, sqnr_db
    model = kws_model()
    _, lib = quantized(tmp_path, model, {"x": features(16, seed=1)}, target=target)
    xs, ref, x86 = int8_recurrent_x86
    got = np.stack([lib.run({"x": x})["logits"] for x in xs])
    assert sqnr_db(ref, got) >= 30
    assert sqnr_db(x86, got) >= 50


@pytest.fixture(scope="module")
def int8_recurrent_x86(tmp_path_factory):
    """test_int8_recurrent's inputs, onnxruntime's float outputs and the x86 int8 build's
    outputs on them (built once for every target)."""
    from test_quant_recurrent import features, kws_model, quantized
    model = kws_model()
    _, x86 = quantized(tmp_path_factory.mktemp("int8_recurrent"), model,
                       {"x": features(16, seed=1)})
    xs = features(2, seed=2)
    ref = np.stack([reference_outputs(model, {"x": x})["logits"] for x in xs])
    return xs, ref, np.stack([x86.run({"x": x})["logits"] for x in xs])


@pytest.mark.parametrize("target", TARGETS)
def test_quantize_dynamic_cnn(tmp_path, target):
    """onnxruntime's dynamic quantization (DynamicQuantizeLinear, ConvInteger plain and
    depthwise with uint8 per-channel weights and zero points, MatMulInteger)."""
    import onnx
    from test_dynamic_quant import quantize_dynamic_model
    model = onnx.load(str(quantize_dynamic_model(tmp_path, "cnn", True, "QUInt8")))
    check_model(model, {"x": rand(1, 3, 15, 13)}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_contrib_quant_qoperator_cnn(tmp_path, target):
    """onnxruntime's QOperator quantize_static CNN (com.microsoft QLinearAdd, QLinearMul,
    QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, QLinearGlobalAveragePool, QGemm): the
    integer kernels give onnxruntime's output bits on the target too."""
    from test_contrib_quant import _ort, quantize_static_cnn
    model, sample = quantize_static_cnn(tmp_path, per_channel=True)
    got = compile_and_run(model, sample, tmp_path, target=target)["y"]
    np.testing.assert_array_equal(got, _ort(model, sample)["y"])


@pytest.mark.parametrize("target", TARGETS)
def test_contrib_quant_matmuls(tmp_path, target):
    """DynamicQuantizeMatMul and MatMulIntegerToFloat (mlcc_i32_rescale) with per-column
    scales and zero points, a fused Relu, and a 4-bit MatMulNBits, chained."""
    from test_contrib_quant import MS, _model
    rng = np.random.default_rng(4)
    k, n, block = 29, 11, 16
    inits = {"w": rng.integers(-128, 128, (k, n)).astype(np.int8),
             "bs": rng.uniform(0.01, 0.05, n).astype(np.float32),
             "bz": rng.integers(-128, 128, n).astype(np.int8),
             "bias": rng.normal(0, 1, n).astype(np.float32),
             "w2": rng.integers(0, 256, (n, 13)).astype(np.uint8),
             "bs2": np.float32(0.02),
             "nb": rng.integers(0, 256, (7, 1, block * 4 // 8)).astype(np.uint8),
             "ns": rng.uniform(0.01, 0.1, 7).astype(np.float32)}
    nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "w", "bs", "bz", "bias"], ["h"],
                              domain=MS),
             helper.make_node("DynamicQuantizeLinear", ["h"], ["hq", "hs", "hz"]),
             helper.make_node("MatMulIntegerToFloat", ["hq", "w2", "hs", "bs2", "hz"], ["g0"],
                              domain=MS),
             helper.make_node("Relu", ["g0"], ["g"]),       # fused into mlcc_i32_rescale
             helper.make_node("MatMulNBits", ["g", "nb", "ns"], ["y"], domain=MS, K=13, N=7,
                              bits=4, block_size=block)]
    x = rng.normal(0.2, 1.5, (3, 5, k)).astype(np.float32)
    model = _model(nodes, {"x": x}, [("y", np.float32, (3, 5, 7))], inits)
    check_model(model, {"x": x}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_dynamic_quantize_lstm(tmp_path, target):
    """DynamicQuantizeLSTM (qrecurrent.c: uint8 weights, both directions, sequence_lens,
    initial states): onnxruntime's output bits on the target too."""
    from test_contrib_quant import _ort, dq_lstm_model
    model, x, outputs = dq_lstm_model("u8_bidirectional")
    got = compile_and_run(model, {"x": x}, tmp_path, target=target)
    ref = _ort(model, {"x": x}, threads=1)
    for name in outputs:
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)


@pytest.mark.parametrize("target", TARGETS)
def test_bitwise_shift_hardmax_isinf(tmp_path, target):
    """The bitwise and shift rows of mlcc_int_binary, Hardmax, IsInf/IsNaN and Shrink."""
    rng = np.random.default_rng(5)
    a = rng.integers(-2**31, 2**31, (3, 1, 5)).astype(np.int32)
    b = rng.integers(-2**31, 2**31, (7, 5)).astype(np.int32)
    u = rng.integers(0, 2**16, (3, 7), dtype=np.uint16)
    s = np.array([0, 1, 5, 15, 16, 17, 40], np.uint16)
    x = rand(3, 7, 5)
    x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, 0.0]
    nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["and"]),
             helper.make_node("BitwiseXor", ["a", "b"], ["xor"]),
             helper.make_node("BitwiseNot", ["a"], ["not"]),
             helper.make_node("BitShift", ["u", "s"], ["shl"], direction="LEFT"),
             helper.make_node("BitShift", ["u", "s"], ["shr"], direction="RIGHT"),
             helper.make_node("IsInf", ["x"], ["inf"], detect_negative=0),
             helper.make_node("IsNaN", ["x"], ["nan"]),
             helper.make_node("Hardmax", ["h"], ["hard"], axis=1),
             helper.make_node("Shrink", ["h"], ["shrink"], lambd=0.3, bias=0.1)]
    feeds = {"a": a, "b": b, "u": u, "s": s, "x": x, "h": rand(3, 7, 5, seed=1)}
    outs = [n.output[0] for n in nodes]
    check_model(make_model(nodes, feeds, outs, opset=18), feeds, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_gather_scatter_nd_one_hot(tmp_path, target):
    """GatherND (batch_dims), ScatterND and ScatterElements with reductions, OneHot, EyeLike."""
    x = rand(2, 5, 7)
    gi = np.array([[[1, -2], [4, 0], [0, 6]], [[-5, 3], [2, 2], [3, -1]]], np.int64)
    si = np.array([[1, 2], [-1, 0], [1, 2]], np.int64)
    ei = np.array([[[0, 4, -1]], [[2, 2, 0]]], np.int64)
    oi = np.array([[1, -1, 9], [0, 4, -7]], np.int32)
    nodes = [helper.make_node("GatherND", ["x", "gi"], ["g"], batch_dims=1),
             helper.make_node("ScatterND", ["x", "si", "su"], ["s"], reduction="add"),
             helper.make_node("ScatterElements", ["x", "ei", "eu"], ["e"], axis=2,
                              reduction="max"),
             helper.make_node("OneHot", ["oi", "depth", "values"], ["o"], axis=1),
             helper.make_node("EyeLike", ["oi"], ["eye"], k=1, dtype=1)]
    feeds = {"x": x, "gi": gi, "si": si, "su": rand(3, 7, seed=1), "ei": ei,
             "eu": rand(2, 1, 3, seed=2), "oi": oi}
    inits = {"depth": np.array(5, np.int64), "values": np.array([0.5, 3], np.float32)}
    model = make_model(nodes, feeds, ["g", "s", "e", "o", "eye"], initializers=inits,
                       opset=18)
    check_model(model, feeds, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_nd_out_of_range_index_is_a_status(tmp_path, target):
    x, i, u = rand(4, 3), np.array([[1], [4]], np.int64), rand(2, 3, seed=1)
    model = make_model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
                       {"x": x, "i": i, "u": u}, ["y"], opset=16)
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, {"x": x, "i": i, "u": u}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_cumprod_reverse_sequence(tmp_path, target):
    x = rand(3, 7, 5, low=0.5, high=1.5)
    lens = np.array([7, 0, 3], np.int64)
    xi = np.random.default_rng(2).integers(-40, 40, (3, 7, 5)).astype(np.int32)
    nodes = [helper.make_node("CumProd", ["x", "axis"], ["p"], exclusive=1, reverse=1),
             helper.make_node("CumProd", ["xi", "axis"], ["pi"]),
             helper.make_node("ReverseSequence", ["x", "lens"], ["r"], batch_axis=0,
                              time_axis=1)]
    feeds = {"x": x, "xi": xi, "lens": lens}
    model = make_model(nodes, feeds, ["p", "pi", "r"],
                       initializers={"axis": np.array(1, np.int64)}, opset=26)
    check_model(model, feeds, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [12, 97])          # mixed radix (3, 4), Bluestein (a prime)
def test_dft(tmp_path, target, n):
    check_node("DFT", {"x": rand(2, n, 2)}, tmp_path=tmp_path, target=target, opset=17,
               axis=1)


@pytest.mark.parametrize("target", TARGETS)
def test_dft_irfft(tmp_path, target):
    """The one-sided inverse: mirrored conjugate reads, a real output (Bluestein: 13)."""
    check_node("DFT", {"x": rand(2, 7, 2)}, initializers={"n": np.array(13, np.int64)},
               tmp_path=tmp_path, target=target, opset=17, axis=1, inverse=1, onesided=1)


@pytest.mark.parametrize("target", TARGETS)
def test_log_mel_front_end(tmp_path, target):
    """HannWindow and MelWeightMatrix folded, STFT (400, radix 4/5), power, MatMul, Log."""
    from test_ops_audio import log_mel_model
    model, feeds = log_mel_model()
    check_model(model, feeds, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model", ["cnn_float_io", "binary_ops", "mean", "tiny_kws"])
def test_tflite_bit_exact_with_tflm(tmp_path, target, model):
    """.tflite models (tests/test_tflite.py): identical to TensorFlow Lite Micro on arm and wasm
    too (the small CNN, the binary operators and MEAN: every kernel the importer writes;
    keyword spotting: MLPerf Tiny)."""
    pytest.importorskip("tflite_micro")
    import test_tflite as tt
    if model == "tiny_kws":
        path = tt._tiny(model)
    else:
        path = tmp_path / f"{model}.tflite"
        path.write_bytes(tt.SMALL[model]())
    tt._verify(path, seeds=(0,), target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_contrib_transformer_layer(tmp_path, target):
    """onnxruntime's contrib operators (mlcc/ops/contrib.py) as its transformer optimizer
    chains them: the mask's lengths by an integer ReduceSum (mlcc_int_reduce), Attention,
    SkipLayerNormalization with its bias fused into a GEMM, FastGelu as a GEMM epilogue
    (GELU_TANH), FusedMatMul and QuickGelu."""
    from test_contrib_ops import F, ms_model, ms_node
    b, s, hin, h, ff = 2, 7, 11, 15, 19
    mask = np.ones((b, s), np.int32)
    mask[0, 5:] = 0
    nodes = [
        helper.make_node("ReduceSum", ["mask", "axis1"], ["lengths"], keepdims=0, name="rs"),
        ms_node("Attention", ["x", "w_qkv", "b_qkv", "lengths"], ["att"], num_heads=3),
        helper.make_node("MatMul", ["att", "w_o"], ["proj"], name="mm_o"),
        ms_node("SkipLayerNormalization", ["proj", "att", "gamma", "beta", "b_o"], ["ln"]),
        helper.make_node("MatMul", ["ln", "w_ff"], ["ffh"], name="mm_ff"),
        ms_node("FastGelu", ["ffh", "b_ff"], ["act"]),
        helper.make_node("FusedMatMul", ["act", "act"], ["gram"], domain="com.microsoft",
                         name="fmm", transB=1, alpha=0.3),
        ms_node("QuickGelu", ["gram"], ["out"], alpha=1.1)]
    inits = {"axis1": np.array([1], np.int64), "w_qkv": rand(hin, 3 * h, seed=1) * 0.3,
             "b_qkv": rand(3 * h, seed=2), "w_o": rand(h, h, seed=3) * 0.3,
             "gamma": rand(h, seed=4), "beta": rand(h, seed=5), "b_o": rand(h, seed=6),
             "w_ff": rand(h, ff, seed=7) * 0.3, "b_ff": rand(ff, seed=8)}
    feeds = {"x": rand(b, s, hin), "mask": mask}
    model = ms_model(nodes, feeds, {"ln": (F, [b, s, h]), "out": (F, [b, s, s])},
                     initializers=inits)
    check_model(model, feeds, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_loop(tmp_path, target):
    """A Loop run at run time: constant trip count with a scan output (mlcc_slice_store), and
    a run-time trip count with a condition computed in the body; Scan-9 and Scan-8 (its
    batch of sequences with lengths: mlcc_sequence_*)."""
    from test_ops_loop import accumulate, halving, rnd, scan8_model, scan_model
    check_model(accumulate(4), {"x": rnd(3, 5), "y0": rnd(3, 5, seed=1)}, tmp_path,
                target=target)
    check_model(halving(True), {"y0": rnd(7) * 30, "c0": np.array(True),
                                "M": np.array(9, np.int64)}, tmp_path, target=target)
    check_model(*scan_model([1, 1], [1, 0], [1, 2], [0, 1]), tmp_path, target=target)
    check_model(*scan8_model(3, 5, [1, 0], [4, 5, 1]), tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS[:2])    # firmware targets refuse them (below)
def test_data_dependent_sizes(tmp_path, target):
    """NonMaxSuppression then Gather of the selected boxes, TopK with a run-time k and Unique
    along an axis (runtime_c/kernels/selection.c), GatherND of NonZero's coordinates
    (mlcc_gather_nd__counted), TopK over such an axis (mlcc_topk__counted), Shape and Size
    of one computed at run time (mlcc_i64_sizes), Gather along such an axis
    (mlcc_gather__counted_data_i64), Concat along one (mlcc_concat__counted), reductions over
    one (mlcc_fill_padding), NMS of counted boxes (mlcc_f32_nms__counted), a run-time If,
    Slice and Split of counted values: the harness reports the actual sizes."""
    from test_dynamic_outputs import boxes_and_scores, detector_postprocess, one_node

    boxes, scores = boxes_and_scores(batches=1, n=29, classes=3, center=1, seed=7)
    feeds = {"boxes": boxes, "scores": scores}
    check_model(detector_postprocess(boxes, scores), feeds, tmp_path, target=target)
    tk = {"x": rand(4, 13), "k": np.array([5], np.int64)}
    check_model(one_node("TopK", tk, 2, axis=1), tk, tmp_path, target=target)
    u = (np.arange(21, dtype=np.int64).reshape(3, 7) * 5 % 4).astype(np.int64)
    check_model(one_node("Unique", {"x": u}, 4, sorted=0, axis=1), {"x": u}, tmp_path,
                target=target)
    from test_dynamic_chains import selected_rows      # NonZero -> GatherND (counted)
    x = rand(3, 5, 4, seed=8)
    model = make_model(selected_rows(x.shape, 2), {"x": x}, ["y"],
                       initializers={"thr": np.array(0.5, np.float32)}, opset=17)
    check_model(model, {"x": x}, tmp_path, target=target)
    from test_dynamic_chains import negatives, scores_of_selected     # mlcc_topk__counted
    nodes, feeds, inits = scores_of_selected(
        29, [helper.make_node("TopK", ["s", "k"], ["v", "i"], name="topk")],
        inits={"k": np.array([4], np.int64)})
    feeds = {"x": negatives(29, 11, ties=True)}
    check_model(make_model(nodes, feeds, ["v", "i"], initializers=inits, opset=17), feeds,
                tmp_path, target=target)
    from test_dynamic_chains import test_shape_and_size_of_a_counted_tensor   # mlcc_i64_sizes
    test_shape_and_size_of_a_counted_tensor(tmp_path / "sizes", target=target)
    from test_dynamic_chains import counted_gather      # mlcc_gather__counted_data_i64
    counted_gather(tmp_path / "gather", target=target)
    from test_dynamic_chains import per_class_detections     # mlcc_concat__counted
    x = rand(13, 3, seed=3)
    check_model(per_class_detections(), {"x": x}, tmp_path / "concat", target=target)
    from test_dynamic_chains import test_reductions_over_a_counted_axis  # mlcc_fill_padding
    test_reductions_over_a_counted_axis(tmp_path / "reduce", target=target)
    from test_dynamic_chains import test_nms_of_counted_boxes      # mlcc_f32_nms__counted
    test_nms_of_counted_boxes(tmp_path / "nms", target=target)
    from test_dynamic_chains import test_if_slice_and_split_of_counted_values  # If, Slice
    test_if_slice_and_split_of_counted_values(tmp_path / "if", target=target)
    from test_dynamic_chains import test_torchvision_postprocess_detections   # all of them
    test_torchvision_postprocess_detections(tmp_path / "tv", target=target)
    from test_dynamic_chains import test_reshape_around_a_counted_axis
    test_reshape_around_a_counted_axis(tmp_path / "reshape", target=target)


@needs_cortex_m
def test_data_dependent_sizes_are_refused_on_firmware(tmp_path):
    from test_dynamic_outputs import one_node
    tk = {"x": rand(4, 13), "k": np.array([5], np.int64)}
    path = tmp_path / "m.onnx"
    onnx.save(one_node("TopK", tk, 2, axis=1), str(path))
    with pytest.raises(UnsupportedError, match="not supported on firmware"):
        mlcc.compile(path, tmp_path / "out", target="cortex-m4")


@pytest.mark.parametrize("target", TARGETS)
def test_losses_sampling_and_float16(tmp_path, target):
    """The loss kernel (SoftmaxCrossEntropyLoss with log_prob, weighted NLL with ignore_index),
    GridSample (cubic, reflection), Col2Im, RoiAlign, DeformConv, and a float16 Sigmoid
    computed in float32 between Casts."""
    x = rand(2, 5, 7, seed=1)
    t = np.array([[0, 4, 2, 1, 3, 3, 0], [2, 1, 1, 4, 0, 2, 3]], np.int64)
    img = rand(2, 3, 6, 7, seed=2)
    grid = rand(2, 4, 3, 2, seed=3, low=-1.2, high=1.2)
    cols = rand(1, 3 * 4, 30, seed=4)
    rois = np.array([[0.5, 1.0, 5.3, 4.7], [-2.0, -1.0, 3.0, 6.0]], np.float32)
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["sce", "log_prob"]),
             helper.make_node("NegativeLogLikelihoodLoss", ["log_prob", "t", "w"], ["nll"],
                              reduction="none", ignore_index=3),
             helper.make_node("GridSample", ["img", "grid"], ["gs"], mode="cubic",
                              padding_mode="reflection"),
             helper.make_node("Col2Im", ["cols", "image", "block"], ["c2i"]),
             helper.make_node("RoiAlign", ["img", "rois", "ri"], ["roi"], output_height=3,
                              output_width=2, sampling_ratio=2),
             helper.make_node("DeformConv", ["img", "dw", "off"], ["dc"]),
             helper.make_node("Sigmoid", ["h"], ["sig16"])]
    feeds = {"x": x, "t": t, "img": img, "grid": grid, "cols": cols, "rois": rois,
             "ri": np.array([1, 0], np.int64), "off": rand(2, 18, 4, 5, seed=5, low=-2, high=2),
             "h": rand(3, 5, seed=6).astype(np.float16)}
    model = make_model(nodes, feeds, [o for n in nodes for o in n.output], opset=20,
                       initializers={"w": rand(5, seed=7, low=0.5, high=1.5),
                                     "image": np.array([6, 7], np.int64),
                                     "block": np.array([2, 2], np.int64),
                                     "dw": rand(4, 3, 3, 3, seed=8)})
    check_model(model, feeds, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_max_roi_pool_and_tfidf(tmp_path, target):
    """MaxRoiPool (batch 2, a box across the edge, one outside, spatial_scale 0.5), on
    positive values (onnxruntime starts its maxima at FLT_MIN); TfIdfVectorizer (IDF with
    weights, 1- to 3-grams, 2 skips, a batch of int64 tokens)."""
    from test_ops_ngram import POOL, WEIGHTS, _tokens
    from test_ops_sampling import MAX_ROI_BOXES
    feeds = {"x": rand(2, 3, 9, 11, seed=9, low=0.01, high=2.0), "rois": MAX_ROI_BOXES,
             "tokens": _tokens((3, 17), "int64", seed=2)}
    nodes = [helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 4],
                              spatial_scale=0.5),
             helper.make_node("TfIdfVectorizer", ["tokens"], ["tfidf"], mode="IDF",
                              min_gram_length=1, max_gram_length=3, max_skip_count=2,
                              weights=WEIGHTS, **POOL)]
    check_model(make_model(nodes, feeds, ["y", "tfidf"], opset=9), feeds, tmp_path,
                target=target)


# ------------------------------------------------------------------ ranges of sizes

RANGE_TARGETS = TARGETS[:2]     # firmware targets refuse a range (test_dynamic_shapes.py)


def _range_on_target(model: onnx.ModelProto, tmp_path: Path, target: str, ranges: dict,
                     shapes: list[tuple]) -> None:
    """One build for the range on the target; the harness runs it at each of `shapes` (the
    model's one input "x"), compared with onnxruntime on the host within mlcc's verify
    tolerance (1e-4 x max(1, max |ref|))."""
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    mlcc.compile(path, tmp_path / target, target=target, shapes=ranges)
    m = mlcc.load(tmp_path / target)
    for k, shape in enumerate(shapes):
        feeds = {"x": rand(*shape, seed=k)}
        got = m.run(feeds)
        for name, ref in reference_outputs(model, feeds).items():
            c = compare(name, got[name], ref)
            assert c.ok, f"{name} at {shape}: {c}"


@pytest.mark.parametrize("target", RANGE_TARGETS)
def test_conv_resize_pad_over_a_range(tmp_path, target):
    """Convolutions over a dynamic height and width (implicit GEMM offsets computed at run
    time, a strided one, a depthwise one), a linear Resize by 2, a nearest one by a Shape
    chain's sizes, a cubic one and an antialiased one (tables computed at run time), reflect
    and wrap Pads and a LayerNormalization over the dynamic width: at the smallest, a middle
    and the largest size."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], pads=[1, 0, 1, 2]),
             helper.make_node("Conv", ["c2", "w3"], ["c3"], group=6, pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c3", "", "scales"], ["up"], mode="linear",
                              coordinate_transformation_mode="half_pixel"),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "two", "four"], ["s_hw"]),
             helper.make_node("Concat", ["lead", "s_hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["up", "", "", "sizes"], ["back"], mode="nearest"),
             helper.make_node("Pad", ["back", "pads"], ["y"], mode="reflect"),
             helper.make_node("LayerNormalization", ["y", "g"], ["ln"], axis=-1),
             helper.make_node("Resize", ["c3", "", "scales15"], ["cub"], mode="cubic",
                              coordinate_transformation_mode="pytorch_half_pixel"),
             helper.make_node("Pad", ["cub", "pads"], ["wrap"], mode="wrap"),
             helper.make_node("Resize", ["c3", "", "scales_aa"], ["aa"], mode="linear",
                              antialias=1)]
    inits = {"w1": rand(6, 3, 3, 3, seed=1), "b1": rand(6, seed=2),
             "w2": rand(6, 6, 3, 3, seed=3), "w3": rand(6, 1, 3, 3, seed=4),
             "scales": np.array([1, 1, 2, 2], np.float32),
             "lead": np.array([1, 6], np.int64), "two": np.array([2], np.int64),
             "four": np.array([4], np.int64),
             "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64),
             "g": np.array([1.5], np.float32),
             "scales15": np.array([1, 1, 1.5, 2], np.float32),
             "scales_aa": np.array([1, 1, 0.5, 0.75], np.float32)}
    model = make_model(nodes, {"x": rand(1, 3, 5, 4)}, ["y", "ln", "wrap", "aa"],
                       initializers=inits,
                       input_shapes={"x": [1, 3, "H", "W"]}, opset=19)
    _range_on_target(model, tmp_path, target, {"x": (1, 3, (5, 16), (4, 13))},
                     [(1, 3, 5, 4), (1, 3, 11, 7), (1, 3, 16, 13)])


@pytest.mark.parametrize("target", RANGE_TARGETS)
def test_strided_pools_over_a_width_range(tmp_path, target):
    """AveragePool and MaxPool striding along a dynamic width on the 2-D kernel, its tap
    offsets into the stride phases computed at each call."""
    nodes = [helper.make_node("AveragePool", ["x"], ["avg"], kernel_shape=[3, 2],
                              strides=[3, 2]),
             helper.make_node("AveragePool", ["x"], ["avg_pad"], kernel_shape=[2, 3],
                              strides=[1, 3], pads=[1, 2, 0, 0]),
             helper.make_node("MaxPool", ["x"], ["max"], kernel_shape=[2, 3], strides=[2, 2],
                              pads=[0, 1, 0, 0])]
    model = make_model(nodes, {"x": rand(1, 3, 6, 8)}, ["avg", "avg_pad", "max"],
                       input_shapes={"x": [1, 3, 6, "W"]})
    _range_on_target(model, tmp_path, target, {"x": (1, 3, 6, (4, 70))},
                     [(1, 3, 6, 4), (1, 3, 6, 29), (1, 3, 6, 70)])


@pytest.mark.parametrize("target", RANGE_TARGETS)
def test_transformer_block_over_a_sequence_range(tmp_path, target):
    """A MiniLM-like encoder block (tests/test_quant_ranges.py) over 1 to 40 tokens: the
    projections with the sequence as rows, the fused attention, LayerNormalization, GELU."""
    from test_quant_ranges import _transformer
    _transformer(tmp_path / "block.onnx")
    model = onnx.load(str(tmp_path / "block.onnx"))
    _range_on_target(model, tmp_path, target, {"x": (1, (1, 40), 32)},
                     [(1, 1, 32), (1, 13, 32), (1, 40, 32)])


@pytest.mark.slow
@pytest.mark.parametrize("target", RANGE_TARGETS)
def test_ppocr_recognizer_width_range(tmp_path, target):
    """PP-OCR rec compiled once for widths 32..1280, at widths 32, 97 and 1280."""
    from test_dynamic_shapes import _real
    model = onnx.load(str(_real("ppocr_rec")))
    _range_on_target(model, tmp_path, target, {"x": (1, 3, 48, (32, 1280))},
                     [(1, 3, 48, w) for w in (32, 97, 1280)])


RANGE_CNN_SHAPES = {"x": (1, 3, (9, 33), (10, 47))}
RANGE_CNN_SIZES = ((9, 10), (18, 23), (33, 47))


@pytest.fixture(scope="module")
def range_cnn_int8_x86(tmp_path_factory):
    """The int8 CNN of tests/test_quant_ranges.py over heights 9..33 and widths 10..47 on x86
    (calibrated on samples of several sizes) and its outputs at three sizes, built once."""
    from test_quant_ranges import _calibration_folder, _cnn
    tmp = tmp_path_factory.mktemp("range_cnn_int8")
    path = _cnn(tmp / "cnn.onnx")
    calib = _calibration_folder(tmp / "calib", [(1, 3, 9, 10), (1, 3, 20, 31),
                                                (1, 3, 33, 47)], seed=2)
    mlcc.compile(path, tmp / "x86", target="x86", shapes=RANGE_CNN_SHAPES,
                 quantize=mlcc.api.QuantizeConfig(calib))
    m = mlcc.load(tmp / "x86")
    return path, calib, [m.run({"x": rand(1, 3, hh, ww, seed=hh)})
                         for hh, ww in RANGE_CNN_SIZES]


@pytest.mark.parametrize("target", RANGE_TARGETS)
def test_int8_cnn_over_a_range_is_the_x86_result_bit_for_bit(tmp_path, target,
                                                              range_cnn_int8_x86):
    """The int8 CNN over a range of sizes: the same bits on the target as on x86 at three
    sizes."""
    path, calib, x86 = range_cnn_int8_x86
    mlcc.compile(path, tmp_path / target, target=target, shapes=RANGE_CNN_SHAPES,
                 quantize=mlcc.api.QuantizeConfig(calib))
    m = mlcc.load(tmp_path / target)
    for (hh, ww), a in zip(RANGE_CNN_SIZES, x86):
        b = m.run({"x": rand(1, 3, hh, ww, seed=hh)})
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.parametrize("target", TARGETS)
def test_classical_ml(tmp_path, target):
    """The ai.onnx.ml kernels (runtime_c/kernels/trees.c, ml.c): a Scaler, then a forest of
    20 trees of depth 6 (every branch mode, NaN features) with three classes and SOFTMAX, a
    regressor of trees of one mode (the walk with the comparison built in), a linear
    classifier and an RBF SVM of 21 support vectors (two blocks of 16) beside them."""
    from onnx import TensorProto
    from test_ops_ml import ML, features, ml_model, random_trees, with_prefix
    rng = np.random.default_rng(8)
    a = with_prefix(random_trees(rng, 20, 6, 7, 3, per_leaf=3), "class")
    nodes = [helper.make_node("Scaler", ["X"], ["Xs"], domain=ML, offset=[0.25] * 7,
                              scale=list(rng.uniform(0.5, 2, 7))),
             helper.make_node("TreeEnsembleClassifier", ["Xs"], ["L", "S"], domain=ML,
                              classlabels_int64s=[4, 9, 1], post_transform="SOFTMAX", **a),
             helper.make_node("TreeEnsembleRegressor", ["Xs"], ["R"], domain=ML, n_targets=2,
                              **with_prefix(random_trees(rng, 20, 7, 7, 2, modes=["BRANCH_LT"],
                                                         per_leaf=2), "target")),
             helper.make_node("SVMRegressor", ["Z"], ["V"], domain=ML, kernel_type="RBF",
                              kernel_params=[0.2, 0.0, 0.0], n_supports=21, rho=[0.5],
                              support_vectors=list(rng.standard_normal(21 * 7)),
                              coefficients=list(rng.standard_normal(21))),
             helper.make_node("LinearClassifier", ["Z"], ["L2", "S2"], domain=ML,
                              classlabels_ints=[0, 1], coefficients=list(rng.uniform(-1, 1, 7)),
                              intercepts=[0.1], post_transform="LOGISTIC")]
    feeds = {"X": features(13, 7, seed=5), "Z": rand(13, 7)}
    model = ml_model(nodes, feeds, {"L": (TensorProto.INT64, [13]),
                                    "S": (TensorProto.FLOAT, [13, 3]),
                                    "R": (TensorProto.FLOAT, [13, 2]),
                                    "V": (TensorProto.FLOAT, [13, 1]),
                                    "L2": (TensorProto.INT64, [13]),
                                    "S2": (TensorProto.FLOAT, [13, 2])})
    assert np.isnan(feeds["X"]).any()
    check_model(model, feeds, tmp_path, target=target)
