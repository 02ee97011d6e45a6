"""Gather against onnxruntime: any axis, constant and run-time indices (int64 and int32,
negative), every dtype, and the run-time index check."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import ModelError, RuntimeStatusError
from util import (DTYPES, arr, check_model, check_node, compile_and_run, make_model,
                  rand)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_runtime_indices_dtypes(tmp_path, dtype):
    check_node("Gather", {"x": arr((5, 7, 3), dtype), "i": np.array([[4, -1], [0, 2], [-5, 3]])},
               tmp_path=tmp_path, axis=1 if dtype == "int8" else 0)


@pytest.mark.parametrize("axis,shape,idx", [
    (0, (11, 5), [[3, 10, -11, 0]]),
    (1, (2, 13, 3), [12, -13, 5, 5, 0]),
    (-1, (3, 4, 7), [[6], [-7], [1]]),
    (2, (2, 3, 5, 4), 3),                    # scalar index: the axis disappears
])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_gather_runtime_axes(tmp_path, axis, shape, idx, index_dtype):
    check_node("Gather", {"x": rand(*shape), "i": np.array(idx, dtype=index_dtype)},
               tmp_path=tmp_path, axis=axis)


@pytest.mark.parametrize("idx", [
    [2],                        # one index
    [1, 3, 5],                  # even step: a strided copy
    [6, 5, 4, 3],               # reversal
    [-1, -1, -1],               # repeated (step 0)
    [0, 4, 1, -2],              # uneven: gather kernel with a constant table
    np.array(3),                # scalar
])
def test_gather_const_indices(tmp_path, idx):
    check_node("Gather", {"x": arr((3, 7, 5), "int32")},
               initializers={"i": np.array(idx, dtype=np.int64)}, tmp_path=tmp_path, axis=1)


def test_gather_embedding(tmp_path):
    """An embedding lookup: constant table, indices from the caller."""
    i = np.array([[7, 0, 3], [2, 2, -8]], dtype=np.int64)
    node = helper.make_node("Gather", ["table", "i"], ["y"], axis=0)
    model = make_model([node], {"i": i}, ["y"], initializers={"table": rand(8, 6)})
    check_model(model, {"i": i}, tmp_path)


@pytest.mark.parametrize("bad", [5, -6, 1 << 40])
def test_gather_runtime_out_of_range(tmp_path, bad):
    x = rand(5, 3)
    i = np.array([0, bad, 1], dtype=np.int64)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    model = make_model([node], {"x": x, "i": i}, ["y"])
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, {"x": x, "i": i}, tmp_path)


def test_gather_runtime_out_of_range_int32(tmp_path):
    x = arr((2, 4), "uint8")
    i = np.array([3, -5], dtype=np.int32)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    model = make_model([node], {"x": x, "i": i}, ["y"])
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, {"x": x, "i": i}, tmp_path)


def test_gather_const_out_of_range_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="gather_node"):
        check_node("Gather", {"x": rand(4, 3)}, initializers={"i": np.array([4])},
                   tmp_path=tmp_path, axis=0)
