"""ops/reference.py: onnx.reference with the operators it gets wrong replaced, as mlcc's
constant folding, compile-time Loops and verify's float64 look evaluate them. Each against
onnxruntime, and folded inside a model that mlcc verifies."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.ops.reference import evaluator


def _one_node(op: str, feeds: dict, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _same_as_onnxruntime(op: str, feeds: dict, **attrs) -> None:
    model = _one_node(op, feeds, **attrs)
    got = evaluator(model).run(None, feeds)[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 2, 3)])
def test_global_max_pool_reduces_only_the_spatial_axes(shape):
    """onnx 1.23's reduced axes (ndim - 2, ndim - 1): the channels of a 3-D input."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    _same_as_onnxruntime("GlobalMaxPool", {"x": x})


# (data shape, indices shape, axis): axes longer than np.choose's 64 choices (onnx 1.23's
# failed or, on 2-D data, returned one element per row), short ones, 3-D, negative axis
GATHER_CASES = [((1, 512), (1, 16), 1), ((3, 97), (3, 5), 1), ((97, 3), (7, 3), 0),
                ((2, 3, 70), (2, 3, 4), 2), ((2, 70, 3), (2, 11, 3), -2), ((3, 40), (3, 5), 1)]


@pytest.mark.parametrize("shape,index_shape,axis", GATHER_CASES)
def test_gather_elements_on_long_axes_and_negative_indices(shape, index_shape, axis):
    rng = np.random.default_rng(2)
    size = shape[axis]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "i": rng.integers(-size, size, index_shape).astype(np.int64)}
    _same_as_onnxruntime("GatherElements", feeds, axis=axis)


def test_gather_elements_refuses_indices_out_of_range():
    feeds = {"x": np.zeros((2, 80), np.float32), "i": np.array([[0], [80]], np.int64)}
    with pytest.raises(ValueError, match="out of range"):
        evaluator(_one_node("GatherElements", feeds, axis=1)).run(None, feeds)


def test_a_folded_gather_elements_of_a_long_buffer_compiles(tmp_path: Path):
    """As the dynamo exporter writes BERT's token type ids: a constant [1, 512] buffer
    gathered at constant positions, folded at compile time, then added to an input."""
    rng = np.random.default_rng(3)
    buffer = rng.standard_normal((1, 512)).astype(np.float32)
    positions = np.arange(3, 19, dtype=np.int64).reshape(1, 16)
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["buffer", "positions"], ["g"], axis=1),
         helper.make_node("Add", ["x", "g"], ["y"])], "bert_buffer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(buffer, "buffer"),
         numpy_helper.from_array(positions, "positions")])
    path = tmp_path / "buffer.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    res = mlcc.verify(path)
    assert res.ok and res.outputs[0].max_abs_error == 0
