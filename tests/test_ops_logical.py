"""Comparisons, boolean logic and Where against onnxruntime, with broadcasting and every dtype."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import UnsupportedError
from util import check_model, check_node, make_model


def arr(shape, dtype="float32", seed=0):
    """Small value ranges so that equal elements occur."""
    rng = np.random.default_rng(seed + 31 * len(shape) + sum(shape))
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype == "float32":
        return rng.integers(-3, 4, shape).astype(np.float32) / 2
    return rng.integers(0 if dtype == "uint8" else -3, 4, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "int8", "uint8"])
def test_comparisons_all_dtypes(tmp_path, dtype):
    a, b = arr((3, 1, 5), dtype), arr((4, 5), dtype, 1)       # broadcast to [3, 4, 5]
    ops = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
    nodes = [helper.make_node(op, ["a", "b"], [f"y_{op}"]) for op in ops]
    model = make_model(nodes, {"a": a, "b": b}, [f"y_{op}" for op in ops], opset=16)
    check_model(model, {"a": a, "b": b}, tmp_path)


def test_equal_bool_and_const(tmp_path):
    check_node("Equal", {"a": arr((2, 7), "bool")}, initializers={"b": arr((7,), "bool", 3)},
               tmp_path=tmp_path, opset=13)


@pytest.mark.parametrize("opset", [7, 9, 13])
def test_less_greater_opsets(tmp_path, opset):
    a, b = arr((2, 3, 1), "float32"), arr((1, 1, 4), "float32", 1)
    nodes = [helper.make_node("Less", ["a", "b"], ["lt"]),
             helper.make_node("Greater", ["a", "b"], ["gt"])]
    model = make_model(nodes, {"a": a, "b": b}, ["lt", "gt"], opset=opset)
    check_model(model, {"a": a, "b": b}, tmp_path)


def test_logic(tmp_path):
    a, b = arr((5, 1, 3), "bool"), arr((4, 3), "bool", 1)
    nodes = [helper.make_node(op, ["a", "b"], [f"y_{op}"]) for op in ("And", "Or", "Xor")]
    nodes.append(helper.make_node("Not", ["a"], ["y_Not"]))
    outs = ["y_And", "y_Or", "y_Xor", "y_Not"]
    model = make_model(nodes, {"a": a, "b": b}, outs)
    check_model(model, {"a": a, "b": b}, tmp_path)


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "int8", "uint8", "bool"])
def test_where_dtypes(tmp_path, dtype):
    check_node("Where", {"c": arr((3, 1, 5), "bool"), "x": arr((4, 5), dtype, 1),
                         "y": arr((3, 4, 1), dtype, 2)}, tmp_path=tmp_path, opset=16)


def test_where_const_branch(tmp_path):
    """The masking pattern of attention models: where(mask, x, -inf-ish constant)."""
    check_node("Where", {"c": arr((2, 1, 7), "bool"), "x": arr((2, 3, 7), "float32")},
               initializers={"y": np.array(-1e9, np.float32)}, tmp_path=tmp_path, opset=9)


def test_compare_then_where_chain(tmp_path):
    x = arr((4, 9), "float32")
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("Not", ["pos"], ["neg"]),
             helper.make_node("Where", ["neg", "x", "zero"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], initializers={"zero": np.array(0, np.float32)})
    check_model(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0},
                                   {"detect_negative": 0, "detect_positive": 0}])
def test_isinf_isnan(tmp_path, attrs):
    x = arr((3, 7, 11), "float32")
    x.reshape(-1)[:9] = [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0,
                         np.finfo(np.float32).max, -np.finfo(np.float32).max, 1e-45]
    nodes = [helper.make_node("IsInf", ["x"], ["inf"], **attrs),
             helper.make_node("IsNaN", ["x"], ["nan"])]
    check_model(make_model(nodes, {"x": x}, ["inf", "nan"], opset=20), {"x": x}, tmp_path)


def test_isnan_isinf_float16_and_float64(tmp_path):
    """float16 computes in float32 (exact for both); float64 IsInf is refused (rounded to
    float32, 1e300 would be infinite) and IsNaN computes in float32 (NaN stays NaN)."""
    x = np.array([1.0, np.inf, -np.inf, np.nan, 65504.0, -0.0], np.float16)
    nodes = [helper.make_node("IsInf", ["x"], ["inf"]), helper.make_node("IsNaN", ["x"], ["nan"])]
    check_model(make_model(nodes, {"x": x}, ["inf", "nan"], opset=20), {"x": x}, tmp_path)
    check_node("IsNaN", {"x": np.array([1e300, np.nan, -np.inf], np.float64)},
               tmp_path=tmp_path, opset=20)
    with pytest.raises(UnsupportedError, match="isinf_node.*float64 input 'x'"):
        check_node("IsInf", {"x": np.ones(3, np.float64)}, tmp_path=tmp_path, opset=20)
