"""Dynamic quantization (issue 19): DynamicQuantizeLinear, MatMulInteger and ConvInteger with
a zero point computed at run time and weight zero points, and the models that
onnxruntime.quantization.quantize_dynamic writes, compared with onnxruntime (the integer
parts bit for bit). docs/quantization.md, "Models quantized by onnxruntime"."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.errors import UnsupportedError

from util import compile_and_run, make_model, reference_outputs


def _dql_model(shape):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"], name="dql")
    return make_model([node], {"x": np.zeros(shape, np.float32)}, ["y", "s", "z"], opset=17)


def _edge_inputs():
    rng = np.random.default_rng(5)
    yield "random", rng.normal(0.3, 2.0, (3, 7, 11)).astype(np.float32)
    yield "zeros", np.zeros((3, 7, 11), np.float32)
    yield "positive", rng.uniform(0.5, 9.0, (3, 7, 11)).astype(np.float32)
    yield "negative", rng.uniform(-9.0, -0.5, (3, 7, 11)).astype(np.float32)
    yield "single", np.array([[[-2.75]]], np.float32)
    yield "single_positive", np.array([[[1e-3]]], np.float32)
    # values on half steps of the code grid: round half to even decides
    yield "halves", (np.arange(-38, 39, dtype=np.float32).reshape(1, 7, 11) * 0.5)
    yield "wide", rng.normal(0, 1e6, (2, 5, 13)).astype(np.float32)
    yield "tiny", rng.normal(0, 1e-30, (2, 5, 13)).astype(np.float32)


@pytest.mark.parametrize("case", [c for c, _ in _edge_inputs()])
def test_dynamic_quantize_linear_bit_exact_with_onnxruntime(tmp_path, case):
    x = dict(_edge_inputs())[case]
    model = _dql_model(x.shape)
    got = compile_and_run(model, {"x": x}, tmp_path)
    ref = reference_outputs(model, {"x": x})
    for name in ("y", "s", "z"):
        assert got[name].dtype == ref[name].dtype
        np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{case}: {name}")


def test_dynamic_quantize_linear_nan_policy(tmp_path):
    """NaN elements are left out of the range and quantize to code 0 (docs/quantization.md);
    the other elements are quantized as if the NaN were absent."""
    x = np.array([[-1.5, np.nan, 0.25, 3.0, np.nan, 2.0, -0.125]], np.float32)
    got = compile_and_run(_dql_model(x.shape), {"x": x}, tmp_path)
    clean = x[~np.isnan(x)].reshape(1, -1)
    ref = reference_outputs(_dql_model(clean.shape), {"x": clean})
    np.testing.assert_array_equal(got["s"], ref["s"])
    np.testing.assert_array_equal(got["z"], ref["z"])
    np.testing.assert_array_equal(got["y"][~np.isnan(x)], ref["y"].reshape(-1))
    assert np.all(got["y"][np.isnan(x)] == 0)


@pytest.mark.parametrize("where", ["first", "body", "tail"])
def test_dynamic_quantize_linear_range_over_vectors(tmp_path, where):
    """The range is taken in vector lanes and then the tail: the extremes and NaNs placed in
    the first lanes, the middle of the vector part or the scalar tail (211 elements: no
    vector width divides it) give onnxruntime's range."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-1.0, 2.0, (1, 211)).astype(np.float32)
    at = {"first": [0, 1, 2], "body": [70, 101, 150], "tail": [208, 209, 210]}[where]
    x[0, at[0]], x[0, at[1]], x[0, at[2]] = -7.5, 11.25, np.nan
    got = compile_and_run(_dql_model(x.shape), {"x": x}, tmp_path)
    keep = ~np.isnan(x)
    ref = reference_outputs(_dql_model((1, int(keep.sum()))), {"x": x[keep].reshape(1, -1)})
    for name in ("s", "z"):
        np.testing.assert_array_equal(got[name], ref[name])
    np.testing.assert_array_equal(got["y"][keep], ref["y"].reshape(-1))


def _dq_then(op, w, wz, attrs=None):
    """DynamicQuantizeLinear of x feeding op(xq, w, xz, wz): the zero point is run-time."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
             helper.make_node(op, ["xq", "w", "xz"] + (["wz"] if wz is not None else []),
                              ["y"], name="op", **(attrs or {}))]
    inits = {"w": w} | ({"wz": wz} if wz is not None else {})
    return nodes, inits


MATMUL_CASES = {
    # (A shape, K, N, weight dtype, weight zero point: None, "tensor" or "column")
    "s8_nozp": ((3, 5, 29), 29, 11, np.int8, None),
    "s8_tensor": ((7, 13), 13, 17, np.int8, "tensor"),
    "s8_column": ((2, 3, 31), 31, 5, np.int8, "column"),
    "u8_tensor": ((1, 9, 16), 16, 23, np.uint8, "tensor"),
    "u8_column": ((4, 37), 37, 3, np.uint8, "column"),
    "k1": ((5, 1), 1, 7, np.uint8, "column"),
}


@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_matmul_integer_runtime_zero_point_bit_exact(tmp_path, case):
    shape, k, n, wdt, zkind = MATMUL_CASES[case]
    rng = np.random.default_rng(len(case))
    info = np.iinfo(wdt)
    w = rng.integers(info.min, info.max + 1, (k, n)).astype(wdt)
    wz = None if zkind is None else rng.integers(info.min, info.max + 1,
                                                 () if zkind == "tensor" else (n,)).astype(wdt)
    x = rng.normal(0.7, 1.9, shape).astype(np.float32)
    nodes, inits = _dq_then("MatMulInteger", w, wz)
    model = make_model(nodes, {"x": x}, ["y", "xs"], initializers=inits)
    got = compile_and_run(model, {"x": x}, tmp_path)
    ref = reference_outputs(model, {"x": x})
    np.testing.assert_array_equal(got["y"], ref["y"])
    np.testing.assert_array_equal(got["xs"], ref["xs"])


CONV_CASES = {
    # (x shape, w shape, weight dtype, zero point kind, attributes)
    "plain": ((1, 3, 11, 7), (5, 3, 3, 3), np.int8, None, {"pads": [1, 1, 1, 1]}),
    "grouped_zp": ((2, 6, 9, 7), (6, 3, 3, 2), np.int8, "column",
                   {"pads": [1, 0, 1, 1], "group": 2, "strides": [2, 1]}),
    "depthwise_u8": ((1, 5, 13, 11), (5, 1, 3, 3), np.uint8, "tensor",
                     {"pads": [1, 1, 1, 1], "group": 5}),
    "depthwise_s8": ((1, 4, 7, 9), (4, 1, 3, 3), np.int8, None,
                     {"pads": [0, 2, 1, 0], "group": 4, "strides": [2, 2]}),
    "u8_column_dilated": ((1, 4, 12, 10), (7, 4, 3, 2), np.uint8, "column",
                          {"pads": [2, 1, 0, 1], "dilations": [2, 1]}),
    "conv1d": ((2, 3, 17), (4, 3, 5), np.uint8, "tensor", {"pads": [2, 1]}),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_integer_runtime_zero_point_bit_exact(tmp_path, case):
    xshape, wshape, wdt, zkind, attrs = CONV_CASES[case]
    rng = np.random.default_rng(len(case) + 100)
    info = np.iinfo(wdt)
    w = rng.integers(info.min, info.max + 1, wshape).astype(wdt)
    wz = None if zkind is None else rng.integers(
        info.min, info.max + 1, () if zkind == "tensor" else (wshape[0],)).astype(wdt)
    x = rng.normal(-0.4, 2.3, xshape).astype(np.float32)
    nodes, inits = _dq_then("ConvInteger", w, wz, attrs)
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    got = compile_and_run(model, {"x": x}, tmp_path)
    np.testing.assert_array_equal(got["y"], reference_outputs(model, {"x": x})["y"])


def test_integer_ops_refuse_what_they_cannot_do(tmp_path):
    w = np.ones((4, 3), np.int8)
    node = helper.make_node("MatMulInteger", ["a", "w", "az"], ["y"], name="mmi")
    a = np.zeros((2, 4), np.uint8)
    model = make_model([node], {"a": a, "az": np.zeros((2, 1), np.uint8)}, ["y"],
                       initializers={"w": w})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match="mmi.*MatMulInteger.*zero point of x"):
        mlcc.compile(path, tmp_path / "out")


# ------------------------------------------------------------------ quantize_dynamic models

def _weight(rng, name, *shape):
    return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)


def _float_model(kind: str) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    mk = helper.make_node
    if kind == "mlp":     # MatMul + Add, prime sizes
        nodes = [mk("MatMul", ["x", "w1"], ["h"]), mk("Add", ["h", "b1"], ["h1"]),
                 mk("Relu", ["h1"], ["r"]), mk("MatMul", ["r", "w2"], ["o"]),
                 mk("Add", ["o", "b2"], ["y"])]
        x, inits = [3, 37], [_weight(rng, "w1", 37, 53), _weight(rng, "b1", 53),
                             _weight(rng, "w2", 53, 10), _weight(rng, "b2", 10)]
    elif kind == "cnn":   # plain, depthwise strided, 1x1 convolutions, then a MatMul head
        nodes = [mk("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                 mk("Relu", ["c1"], ["r1"]),
                 mk("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=6,
                    strides=[2, 2]),
                 mk("Relu", ["c2"], ["r2"]), mk("Conv", ["r2", "w3"], ["c3"]),
                 mk("GlobalAveragePool", ["c3"], ["p"]), mk("Flatten", ["p"], ["f"]),
                 mk("MatMul", ["f", "w4"], ["y"])]
        x, inits = [1, 3, 15, 13], [_weight(rng, "w1", 6, 3, 3, 3), _weight(rng, "b1", 6),
                                    _weight(rng, "w2", 6, 1, 3, 3), _weight(rng, "b2", 6),
                                    _weight(rng, "w3", 8, 6, 1, 1), _weight(rng, "w4", 8, 5)]
    else:                 # a transformer-like block: attention projections, an MLP
        d, f = 16, 29
        nodes = [mk("MatMul", ["x", "wq"], ["q"]), mk("MatMul", ["x", "wk"], ["k"]),
                 mk("MatMul", ["x", "wv"], ["v"]), mk("Transpose", ["k"], ["kt"],
                                                      perm=[0, 2, 1]),
                 mk("MatMul", ["q", "kt"], ["s"]), mk("Mul", ["s", "scale"], ["ss"]),
                 mk("Softmax", ["ss"], ["p"], axis=-1), mk("MatMul", ["p", "v"], ["a"]),
                 mk("MatMul", ["a", "wo"], ["o"]), mk("Add", ["o", "x"], ["r"]),
                 mk("MatMul", ["r", "w1"], ["h"]), mk("Add", ["h", "b1"], ["h1"]),
                 mk("Sigmoid", ["h1"], ["sg"]), mk("Mul", ["h1", "sg"], ["g"]),
                 mk("MatMul", ["g", "w2"], ["m"]), mk("Add", ["m", "r"], ["y"])]
        x = [2, 7, d]
        inits = [_weight(rng, n, d, d) for n in ("wq", "wk", "wv", "wo")] + [
            numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
            _weight(rng, "w1", d, f), _weight(rng, "b1", f), _weight(rng, "w2", f, d)]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", 1, x)],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def quantize_dynamic_model(tmp_path, kind: str, per_channel: bool, weight_type: str):
    """The float model `kind` after onnxruntime.quantization.quantize_dynamic."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    src, dst = tmp_path / f"{kind}.onnx", tmp_path / f"{kind}_dyn.onnx"
    onnx.save(_float_model(kind), str(src))
    quantize_dynamic(str(src), str(dst), per_channel=per_channel,
                     weight_type=getattr(QuantType, weight_type))
    ops = {n.op_type for n in onnx.load(str(dst)).graph.node}
    assert "DynamicQuantizeLinear" in ops and "MatMulInteger" in ops
    return dst


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_quantize_dynamic_models_verify(tmp_path, kind, per_channel, weight_type):
    path = quantize_dynamic_model(tmp_path, kind, per_channel, weight_type)
    if kind == "cnn":
        assert "ConvInteger" in {n.op_type for n in onnx.load(str(path)).graph.node}
    res = mlcc.verify(path, output_dir=tmp_path / "out")
    assert res.ok, res.outputs
    src = (tmp_path / "out" / "model.c").read_text()
    assert "mlcc_f32_dynamic_quantize(" in src


def test_dynamic_quantize_linear_folds_and_unused_outputs(tmp_path):
    """A constant input folds at compile time (the numpy twin of the kernel, exact with
    onnxruntime); with run-time input, outputs nobody reads still get storage."""
    rng = np.random.default_rng(2)
    x = rng.normal(0, 3, (4, 9)).astype(np.float32)
    mk = helper.make_node
    nodes = [mk("DynamicQuantizeLinear", ["c"], ["cy", "cs", "cz"]),
             mk("Cast", ["cy"], ["cf"], to=1), mk("Cast", ["cz"], ["czf"], to=1),
             mk("Mul", ["cf", "cs"], ["m"]), mk("Add", ["m", "czf"], ["a"]),
             mk("Add", ["x", "a"], ["o"]),
             mk("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])]
    model = make_model(nodes, {"x": x}, ["o", "y"],
                       initializers={"c": rng.normal(0.5, 2, (4, 9)).astype(np.float32)})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    mlcc.compile(path, tmp_path / "out")
    assert (tmp_path / "out" / "model.c").read_text().count("mlcc_f32_dynamic_quantize(") == 1
    got = mlcc.load(tmp_path / "out").run({"x": x})
    ref = reference_outputs(model, {"x": x})
    np.testing.assert_array_equal(got["o"], ref["o"])
    np.testing.assert_array_equal(got["y"], ref["y"])
