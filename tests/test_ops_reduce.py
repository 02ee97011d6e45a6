"""Reduce* operators against onnxruntime: every op, axis sets that need one, two and three
kernel calls, both opset forms of axes, keepdims, noop_with_empty_axes, long reductions."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mlcc
from mlcc.errors import UnsupportedError
from mlcc.ops.reduce import reduce_calls
from util import check_node, make_model, check_model, rand, run_same_bits_on_threads

OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
       "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def _input(op, shape, seed=0):
    x = rand(*shape, seed=seed)
    if op == "ReduceProd":
        return (1.0 + 0.1 * x).astype(np.float32)       # products of O(1) numbers
    if op == "ReduceLogSum":
        return np.abs(x) + 0.1                           # a positive sum
    return x


def _reduce(op, x, tmp_path, axes, opset=18, **attrs):
    """Axes as an input from opset 18 (13 for ReduceSum), as an attribute before."""
    since = 13 if op == "ReduceSum" else 18
    if axes is None:
        return check_node(op, {"x": x}, tmp_path=tmp_path, opset=opset, **attrs)
    if opset >= since:
        return check_node(op, {"x": x}, initializers={"axes": np.array(axes, np.int64)},
                          tmp_path=tmp_path, opset=opset, **attrs)
    return check_node(op, {"x": x}, tmp_path=tmp_path, opset=opset, axes=axes, **attrs)


@pytest.mark.parametrize("op", OPS)
def test_each_op_middle_axes(tmp_path, op):
    # axes 1 and 3 of 5-D: two reduced groups, two kernel calls (inner > 1 and inner == 1)
    _reduce(op, _input(op, (2, 3, 5, 7, 4)), tmp_path, [1, -1])


@pytest.mark.parametrize("op", OPS)
def test_each_op_attribute_form_last_axis(tmp_path, op):
    _reduce(op, _input(op, (3, 5, 13)), tmp_path, [-1], opset=13, keepdims=0)


@pytest.mark.parametrize("shape,axes,keepdims", [
    ((2, 3, 5, 7, 4), [0], 1),                # outer == 1, inner > 1
    ((2, 3, 5, 7, 4), [1, 2], 0),             # adjacent axes merge into one call
    ((2, 3, 5, 7, 4), [0, 2, 4], 1),          # three groups, three calls
    ((2, 3, 5, 7, 4), [-4, -2], 0),           # negative axes
    ((2, 1, 5, 1, 3), [1, 2, 3], 1),          # size-1 axes dropped before merging
    ((2, 1, 5, 1, 3), [1, 3], 0),             # only size-1 axes: a copy
    ((3, 67, 130), None, 1),                  # all axes (no axes given)
    ((11,), [0], 0),                          # to a scalar
])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceL2"])
def test_axis_patterns(tmp_path, op, shape, axes, keepdims):
    _reduce(op, _input(op, shape, seed=3), tmp_path, axes, keepdims=keepdims)


@pytest.mark.parametrize("shape,axes", [((1, 100003), [1]), ((20011, 3), [0]),
                                        ((7, 4099, 5), [1])])
def test_long_sums(tmp_path, shape, axes):
    """Sums of many positive values: float accumulation would drift past the tolerance."""
    x = rand(*shape, low=0.5, high=1.5)
    _reduce("ReduceSum", x, tmp_path, axes)
    _reduce("ReduceMean", x, tmp_path, axes)


def test_log_sum_exp_large_values(tmp_path):
    x = rand(4, 9, 6) * 80.0            # exp would overflow without the max shift
    _reduce("ReduceLogSumExp", x, tmp_path, [1])
    _reduce("ReduceLogSumExp", x, tmp_path, [2])


@pytest.mark.parametrize("op,opset", [("ReduceSum", 13), ("ReduceL2", 18),
                                      ("ReduceSumSquare", 18), ("ReduceMax", 18)])
def test_noop_with_empty_axes(tmp_path, op, opset):
    """No axes with noop_with_empty_axes=1 reduces over nothing: the element transform."""
    x = _input(op, (3, 4, 5))
    check_node(op, {"x": x}, tmp_path=tmp_path, opset=opset, noop_with_empty_axes=1)
    check_node(op, {"x": x}, initializers={"axes": np.zeros(0, np.int64)}, tmp_path=tmp_path,
               opset=opset, noop_with_empty_axes=0)      # empty axes, no noop: reduce all


def test_reduce_feeds_another_op(tmp_path):
    """The usual pattern: mean over H, W then a consumer (output not a graph output)."""
    x = rand(2, 6, 5, 7)
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("ReduceMax", ["m"], ["y"], axes=[-1], keepdims=1)]
    check_model(make_model(nodes, {"x": x}, ["y"], opset=13), {"x": x}, tmp_path)


def test_reduce_calls_canonical_form():
    assert reduce_calls((2, 3, 5, 7), {1, 2}) == [(2, 15, 7)]
    assert reduce_calls((2, 1, 5, 1, 3), {0, 1, 3}) == [(1, 2, 15)]
    assert reduce_calls((2, 3, 5, 7, 4), {1, 3}) == [(30, 7, 4), (2, 3, 20)]
    assert reduce_calls((2, 3, 5), {0, 1, 2}) == [(1, 30, 1)]
    assert reduce_calls((4, 1, 1), {1, 2}) == []


def test_refuses_runtime_axes(tmp_path):
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="reducemean_node")
    graph = helper.make_graph(
        [node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                      helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match="reducemean_node.*axes"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


def test_refuses_bad_keepdims(tmp_path):
    with pytest.raises(UnsupportedError, match="reducesum_node.*keepdims"):
        check_node("ReduceSum", {"x": rand(3, 4)}, tmp_path=tmp_path, opset=11, axes=[1],
                   keepdims=2)


@pytest.mark.parametrize("op,dtype", [(op, d) for op in ("ReduceSum", "ReduceProd")
                                      for d in ("int32", "int64")] +
                         [(op, d) for op in ("ReduceMax", "ReduceMin")
                          for d in ("int32", "int64", "int8", "uint8")])     # as ONNX types them
def test_integer_reductions(tmp_path, op, dtype):
    """mlcc_int_reduce: two reduced groups (two calls), negative values, compared exactly.
    Values stay clear of overflow: there onnxruntime saturates int32 sums, mlcc wraps as
    numpy and every other integer kernel of mlcc do."""
    rng = np.random.default_rng(7)
    if op == "ReduceProd":
        x = rng.choice([-1, 1, 2, -1, 1], (2, 3, 5, 7))
    else:
        low = 0 if dtype.startswith("u") else -5
        x = rng.integers(low, 6 if dtype.endswith("8") else 1000, (2, 3, 5, 7))
    x = x.astype(dtype)
    got = _reduce(op, x, tmp_path, [1, -1])
    assert got["y0"].dtype == np.dtype(dtype)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_bool_any_and_all(tmp_path, op):
    """ReduceMax and ReduceMin of bools (opset 20): any and all, over two reduced groups;
    rows all true, all false and mixed."""
    x = np.random.default_rng(9).random((3, 4, 5, 2)) < 0.5
    x[0, :, :, 0], x[1, :, :, 1] = True, False
    got = _reduce(op, x, tmp_path, [1, 2], opset=20)
    np.testing.assert_array_equal(got["y0"], (np.all if op == "ReduceMin" else np.any)(
        x, axis=(1, 2), keepdims=True))


def test_integer_reduce_sum_of_a_mask(tmp_path):
    """The sequence lengths of an attention mask, as onnxruntime's transformer optimizer
    computes them: ReduceSum over the last axis of an int32 mask, keepdims=0."""
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], np.int32)
    got = _reduce("ReduceSum", mask, tmp_path, [1], keepdims=0)
    assert got["y0"].tolist() == [3, 5, 1]


def test_integer_reduce_over_an_empty_axis_is_refused(tmp_path):
    model = make_model([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=1)],
                       {"x": np.zeros((2, 0, 3), np.int32)}, ["y"], opset=13)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match="empty axis"):
        mlcc.compile(path, tmp_path / "out")


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceLogSumExp", "ReduceSumSquare"])
def test_threads_same_bits(tmp_path, op):
    """Above the threading threshold (2^16 elements) the outputs are cut into ranges between
    threads, by rows (inner 1) or by column tiles that may start mid-row: 1, 2 and 3 threads
    give the same bits, and onnxruntime's values."""
    x = _input(op, (3, 263, 101), seed=5)
    for axes in ([1], [2], [0, 2]):
        model = make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], {"x": x},
                           ["y"], initializers={"axes": np.array(axes, np.int64)}, opset=18)
        run_same_bits_on_threads(model, {"x": x}, tmp_path)
        check_model(model, {"x": x}, tmp_path)
