"""GatherND, ScatterND, ScatterElements, OneHot and EyeLike against onnxruntime: batch_dims,
negative indices, every reduction, odd shapes, and run-time indices out of range as a status
code."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from mlcc.errors import RuntimeStatusError, UnsupportedError
from util import arr, check_model, check_node, compile_and_run, make_model, rand


def nd_indices(shape, dims, seed=0):
    """int64 index tuples (last axis len(dims)) over dims, negative ones included."""
    rng = np.random.default_rng(seed)
    cols = [rng.integers(-d, d, shape) for d in dims]
    return np.stack(cols, axis=-1).astype(np.int64)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("data_shape,idx_shape,k,batch_dims", [
    ((5, 7, 3), (4,), 1, 0),              # whole [7, 3] slices
    ((5, 7, 3), (2, 3), 2, 0),            # rows of 3
    ((5, 7, 3), (11,), 3, 0),             # single elements
    ((2, 5, 7), (2, 3), 1, 1),            # one batch axis
    ((2, 3, 5, 7), (2, 3, 4), 2, 2),      # two batch axes
])
def test_gather_nd(tmp_path, dtype, data_shape, idx_shape, k, batch_dims):
    dims = data_shape[batch_dims:batch_dims + k]
    idx = nd_indices(idx_shape, dims)
    if batch_dims:
        idx = nd_indices(data_shape[:batch_dims] + idx_shape[batch_dims:], dims)
    check_node("GatherND", {"x": arr(data_shape, dtype), "i": idx}, tmp_path=tmp_path,
               opset=13, batch_dims=batch_dims)


def test_gather_nd_constant_indices(tmp_path):
    check_node("GatherND", {"x": rand(3, 5, 7)},
               initializers={"i": nd_indices((2, 2), (3, 5), seed=4)}, tmp_path=tmp_path)


def _distinct_tuples(n, dims, seed):
    """n distinct index tuples (reduction none leaves the order of duplicates open)."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(int(np.prod(dims)), n, replace=False)
    idx = np.stack(np.unravel_index(flat, dims), axis=-1).astype(np.int64)
    return np.where(rng.random(idx.shape) < 0.5, idx - np.array(dims), idx)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_scatter_nd_reductions(tmp_path, reduction, dtype):
    data = arr((5, 7, 3), dtype)
    if reduction == "none":
        idx = _distinct_tuples(4, (5, 7), seed=1)
    else:       # duplicates: every update combines
        idx = nd_indices((6,), (5, 7), seed=1)
        idx[3] = idx[0]
    upd = arr((len(idx), 3), dtype, seed=2)
    check_node("ScatterND", {"x": data, "i": idx, "u": upd}, tmp_path=tmp_path, opset=18,
               reduction=reduction)


@pytest.mark.parametrize("dtype", ["float32", "uint8", "bool"])
def test_scatter_nd_whole_slices_and_elements(tmp_path, dtype):
    data = arr((5, 3, 2), dtype)
    check_node("ScatterND", {"x": data, "i": _distinct_tuples(3, (5,), 3),
                             "u": arr((3, 3, 2), dtype, 4)}, tmp_path=tmp_path, opset=13)
    check_node("ScatterND", {"x": data, "i": _distinct_tuples(7, (5, 3, 2), 5),
                             "u": arr((7,), dtype, 6)}, tmp_path=tmp_path, opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_dtype", ["int64", "int32"])
def test_scatter_elements(tmp_path, reduction, axis, idx_dtype):
    data = rand(5, 7, 3)
    upd_shape = (3, 5, 2)         # smaller than data on the other axes
    dim = data.shape[axis]
    rng = np.random.default_rng(axis + 7)
    a = axis % 3
    if reduction == "none":     # distinct targets along the axis: permutations, cut short
        perm = np.argsort(rng.random(upd_shape[:a] + (dim,) + upd_shape[a + 1:]), axis=a)
        idx = np.take(perm, np.arange(upd_shape[a]), axis=a)
        idx = np.where(rng.random(idx.shape) < 0.5, idx - dim, idx)
    else:
        idx = rng.integers(-dim, dim, upd_shape)
    idx = idx.astype(idx_dtype)
    check_node("ScatterElements", {"x": data, "i": idx, "u": rand(*upd_shape, seed=3)},
               tmp_path=tmp_path, opset=18, axis=axis, reduction=reduction)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("GatherND", {"x": rand(3, 5), "i": np.array([[0, 1], [3, 0]], np.int64)}, {}),
    ("ScatterND", {"x": rand(3, 5), "i": np.array([[0], [-4]], np.int64),
                   "u": rand(2, 5, seed=1)}, {}),
    ("ScatterElements", {"x": rand(3, 5), "i": np.array([[0, 5]], np.int64),
                         "u": rand(1, 2, seed=1)}, {"axis": 1}),
])
def test_runtime_index_out_of_range_is_a_status(tmp_path, op, inputs, attrs):
    names = list(inputs)
    model = make_model([helper.make_node(op, names, ["y"], **attrs)], inputs, ["y"], opset=16)
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, inputs, tmp_path)


def test_scatter_reduction_on_bool_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="reduction"):
        check_node("ScatterND", {"x": np.ones(3, bool), "i": np.zeros((1, 1), np.int64),
                                 "u": np.ones(1, bool)}, tmp_path=tmp_path, opset=16,
                   reduction="add")


@pytest.mark.parametrize("idx_dtype", ["int64", "int32", "uint8", "float32"])
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_one_hot(tmp_path, idx_dtype, axis):
    """Negative indices count from the end; those outside [-depth, depth) give a zero row."""
    rng = np.random.default_rng(3)
    lo = 0 if idx_dtype == "uint8" else -9
    idx = rng.integers(lo, 9, (3, 5)).astype(idx_dtype)
    check_node("OneHot", {"i": idx},
               initializers={"depth": np.array(7, np.int64),
                             "values": np.array([-2, 5], np.float32)},
               tmp_path=tmp_path, opset=11, axis=axis)


def test_one_hot_int_values_float_depth(tmp_path):
    check_node("OneHot", {"i": np.array([[1, -1, 4, 0, 3]], np.int64)},
               initializers={"depth": np.array([5.0], np.float32),
                             "values": np.array([0, 1], np.int32)}, tmp_path=tmp_path,
               opset=11)


def test_one_hot_runtime_depth_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="depth"):
        check_node("OneHot", {"i": np.array([1, 2], np.int64), "depth": np.array(3, np.int64)},
                   initializers={"values": np.array([0, 1], np.float32)},
                   tmp_path=tmp_path, opset=11)


@pytest.mark.parametrize("shape,k", [((5, 7), 0), ((5, 7), 2), ((7, 5), -3), ((3, 3), 5),
                                     ((1, 11), -1)])
@pytest.mark.parametrize("dtype", [None, TensorProto.INT32, TensorProto.DOUBLE])
def test_eye_like(tmp_path, shape, k, dtype):
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check_node("EyeLike", {"x": rand(*shape)}, tmp_path=tmp_path, opset=9, **attrs)



@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_opset10(tmp_path, axis):
    """Scatter, opsets 9 and 10's ScatterElements: distinct targets along the axis."""
    data = rand(4, 6)
    rng = np.random.default_rng(3)
    if axis == 0:
        idx = np.argsort(rng.random((4, 5)), axis=0)[:3]
    else:
        idx = np.argsort(rng.random((2, 6)), axis=1)[:, :4]
    check_node("Scatter", {"data": data, "idx": idx.astype(np.int64),
                           "upd": rand(*idx.shape, seed=2)}, tmp_path=tmp_path, opset=10,
               axis=axis)
