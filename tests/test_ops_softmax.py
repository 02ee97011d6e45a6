"""Softmax and LogSoftmax against onnxruntime: the opset < 13 coercion to 2-D and the opset 13
single axis, including non-last axes (inner > 1) at tile edges."""
import numpy as np
import pytest
from onnx import helper

from util import check_model, check_node, make_model, rand, run_same_bits_on_threads


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [
    ((3, 7, 11), -1),
    ((3, 7, 11), 0),                 # outer == 1, inner 77
    ((3, 7, 11), 1),
    ((2, 3, 5, 7), -3),              # channel softmax of NCHW, inner 35
    ((2, 5, 64), 1),                 # inner exactly one tile
    ((2, 5, 131), 1),                # inner = two tiles + 3
    ((2, 70, 3), 1),                 # long axis, narrow inner
    ((1, 1), 0),
    ((13,), 0),
])
def test_softmax_opset13(tmp_path, op, shape, axis):
    check_node(op, {"x": rand(*shape) * 3.0}, tmp_path=tmp_path, opset=13, axis=axis)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [7, 11])
@pytest.mark.parametrize("shape,axis", [((2, 3, 5), None), ((2, 3, 5), 0), ((2, 3, 5), 2),
                                        ((4, 3, 2, 5), -2)])
def test_softmax_coerced_2d(tmp_path, op, opset, shape, axis):
    attrs = {} if axis is None else {"axis": axis}
    check_node(op, {"x": rand(*shape)}, tmp_path=tmp_path, opset=opset, **attrs)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_large_values(tmp_path, op):
    """exp would overflow without subtracting the maximum."""
    x = rand(3, 17, 5) * 100.0
    check_node(op, {"x": x}, tmp_path=tmp_path, opset=13, axis=-1)
    check_node(op, {"x": x}, tmp_path=tmp_path, opset=13, axis=1)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_long_rows(tmp_path, op):
    check_node(op, {"x": rand(2, 50021)}, tmp_path=tmp_path, opset=13)
    check_node(op, {"x": rand(3001, 2, 7)}, tmp_path=tmp_path, opset=13, axis=0)


def test_float64_computes_in_float32(tmp_path):
    """float64 in, float64 out (passes/float32_compute.py)."""
    got = check_node("Softmax", {"x": rand(3, 4, dtype=np.float64)}, tmp_path=tmp_path,
                     opset=13)
    assert got["y0"].dtype == np.float64


@pytest.mark.parametrize("opset,shape,axis", [
    (13, (3, 7, 11), -1), (13, (3, 7, 11), 1), (13, (2, 5, 131), 0), (13, (13,), 0),
    (11, (2, 3, 5), None), (11, (4, 3, 2, 5), -2), (7, (2, 3, 5), 0)])
def test_hardmax(tmp_path, opset, shape, axis):
    attrs = {} if axis is None else {"axis": axis}
    check_node("Hardmax", {"x": rand(*shape)}, tmp_path=tmp_path, opset=opset, **attrs)


def test_hardmax_first_of_ties(tmp_path):
    """Equal maxima: the first one wins (ONNX), also along a non-last axis."""
    x = np.random.default_rng(3).integers(-2, 3, (3, 7, 5)).astype(np.float32)
    check_node("Hardmax", {"x": x}, tmp_path=tmp_path, opset=13, axis=1)
    check_node("Hardmax", {"x": x}, tmp_path=tmp_path, opset=13, axis=-1)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_threads_same_bits(tmp_path, op):
    """Above the threading threshold the softmax vectors are cut into ranges between threads,
    by rows (last axis) or by column tiles that may start mid-row (other axes): 1, 2 and 3
    threads give the same bits, and onnxruntime's values."""
    x = rand(3, 67, 131, seed=4) * 4.0
    for axis in (-1, 1):
        model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis)], {"x": x}, ["y"])
        run_same_bits_on_threads(model, {"x": x}, tmp_path)
        check_model(model, {"x": x}, tmp_path)
