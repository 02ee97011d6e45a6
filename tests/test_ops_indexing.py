"""ArgMax/ArgMin, CumSum, CumProd, GatherElements, ReverseSequence and Trilu against
onnxruntime (onnx.reference where it lacks the opset) on odd shapes."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import RuntimeStatusError
from util import arr, check_model, check_node, compile_and_run, make_model, rand


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (2, 0, 1)])
def test_arg_reduce(tmp_path, op, axis, keepdims, last):
    x = rand(3, 7, 5)
    x[1, 2:5, 3] = 9.0             # ties: first or last index
    x[0, 0, :] = -9.0
    check_node(op, {"x": x}, tmp_path=tmp_path, opset=13, axis=axis, keepdims=keepdims,
               select_last_index=last)


# onnxruntime has ArgMax/ArgMin for these; the 16-bit and unsigned 32/64-bit kernels are
# checked against onnx.reference (CLIP's text model takes the ArgMax of int32 token ids)
ARG_REFERENCE = {"float64": "onnxruntime", "int8": "onnxruntime", "uint8": "onnxruntime",
                 "int32": "onnxruntime", "int64": "onnxruntime", "int16": "onnx.reference",
                 "uint16": "onnx.reference", "uint32": "onnx.reference",
                 "uint64": "onnx.reference"}


@pytest.mark.parametrize("dtype", list(ARG_REFERENCE))
@pytest.mark.parametrize("op,axis,last", [("ArgMax", 1, 0), ("ArgMin", -1, 1), ("ArgMax", 0, 1)])
def test_arg_reduce_of_every_type(tmp_path, dtype, op, axis, last):
    x = arr((3, 7, 5), "float32").astype(dtype) if dtype == "float64" else arr((3, 7, 5), dtype)
    x[1, 2:5, 3] = x.max()         # ties at the largest and the smallest value
    x[2, 4, 1:3] = x.min()
    x[0, 1, :] = x[0, 1, 0]
    node = helper.make_node(op, ["x"], ["y0"], axis=axis, keepdims=0, select_last_index=last)
    model = make_model([node], {"x": x}, ["y0"], opset=13)
    check_model(model, {"x": x}, tmp_path, reference=ARG_REFERENCE[dtype])


def test_arg_reduce_nan(tmp_path):
    """NaN is neither larger nor smaller: it keeps the index it is met at only in front."""
    x = np.array([[np.nan, 1.0, 3.0, 3.0], [2.0, np.nan, 5.0, -1.0]], np.float32)
    got = check_node("ArgMax", {"x": x}, tmp_path=tmp_path, opset=13, axis=1, keepdims=0)
    assert got["y0"].tolist() == [0, 2]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("axis,exclusive,reverse", [(0, 0, 0), (1, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_cumsum(tmp_path, dtype, axis, exclusive, reverse):
    x = arr((3, 11, 5), "float32").astype(dtype) if dtype.startswith("float") else \
        arr((3, 11, 5), dtype)
    check_node("CumSum", {"x": x}, initializers={"axis": np.array(axis, np.int64)},
               tmp_path=tmp_path, opset=14, exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(tmp_path, dtype, axis):
    data = arr((5, 7, 3), dtype)
    rng = np.random.default_rng(axis + 5)
    shape = [4, 6, 3]
    dim = data.shape[axis]
    idx = rng.integers(-dim, dim, shape).astype(np.int64)
    check_node("GatherElements", {"data": data, "idx": idx}, tmp_path=tmp_path, opset=13,
               axis=axis)


def test_gather_elements_constant_int32_indices(tmp_path):
    idx = np.array([[0, 2, 1], [1, 0, -1]], np.int32)
    check_node("GatherElements", {"data": rand(2, 3)}, initializers={"idx": idx},
               tmp_path=tmp_path, opset=13, axis=1)


def test_gather_elements_bad_runtime_index_is_a_status(tmp_path):
    model = make_model([helper.make_node("GatherElements", ["d", "i"], ["y"], axis=0)],
                       {"d": rand(3, 2), "i": np.zeros((2, 2), np.int64)}, ["y"], opset=13)
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, {"d": rand(3, 2), "i": np.array([[0, 1], [3, 0]], np.int64)},
                        tmp_path)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [0, 2, -3])
def test_trilu(tmp_path, upper, k):
    check_node("Trilu", {"x": rand(2, 5, 7)}, initializers={"k": np.array(k, np.int64)},
               tmp_path=tmp_path, opset=14, upper=upper)


def test_trilu_int64_without_k(tmp_path):
    check_node("Trilu", {"x": arr((6, 4), "int64")}, tmp_path=tmp_path, opset=14, upper=0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint32", "uint64"])
@pytest.mark.parametrize("axis,exclusive,reverse", [(0, 0, 0), (-1, 1, 0), (1, 0, 1),
                                                    (-2, 1, 1)])
def test_cumprod(tmp_path, dtype, axis, exclusive, reverse):
    """Against onnx.reference (opset 26); integers large enough to wrap."""
    rng = np.random.default_rng(axis + 5)
    if dtype.startswith("float"):
        x = rng.uniform(0.5, 1.5, (3, 7, 5)).astype(dtype)
        x *= np.where(rng.random(x.shape) < 0.3, -1, 1).astype(dtype)
    else:
        lo = 0 if dtype.startswith("u") else -50
        x = rng.integers(lo, 50, (3, 7, 5)).astype(dtype)
    check_node("CumProd", {"x": x}, initializers={"axis": np.array(axis, np.int64)},
               tmp_path=tmp_path, opset=26, exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("shape,batch_axis,time_axis", [((7, 5, 3), 1, 0), ((5, 7, 3, 2), 0, 1),
                                                        ((4, 3), 1, 0), ((3, 4), 0, 1)])
def test_reverse_sequence(tmp_path, dtype, shape, batch_axis, time_axis):
    batch, time = shape[batch_axis], shape[time_axis]
    lens = np.random.default_rng(batch).integers(0, time + 1, batch).astype(np.int64)
    lens[0] = time
    check_node("ReverseSequence", {"x": arr(shape, dtype), "lens": lens}, tmp_path=tmp_path,
               opset=10, batch_axis=batch_axis, time_axis=time_axis)


def test_reverse_sequence_bad_runtime_length_is_a_status(tmp_path):
    x, lens = rand(4, 3), np.array([1, 5, 2], np.int64)
    model = make_model([helper.make_node("ReverseSequence", ["x", "lens"], ["y"])],
                       {"x": x, "lens": lens}, ["y"], opset=10)
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, {"x": x, "lens": lens}, tmp_path)
