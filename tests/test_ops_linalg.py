"""Det against onnxruntime: odd sizes, batches, singular matrices and ones that need
pivoting."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from mlcc.errors import ModelError
from util import check_node, compile_and_run, rand


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (7, 7), (13, 13), (2, 3, 5, 5),
                                   (4, 1, 1)])
def test_det(tmp_path, shape):
    check_node("Det", {"x": rand(*shape)}, tmp_path=tmp_path, opset=11)


def test_det_pivoting_and_singular(tmp_path):
    """A zero leading entry (a row swap flips the sign), a singular matrix (repeated row), the
    identity and a permutation."""
    x = np.stack([np.array([[0, 2, 1], [3, 0, 1], [1, 1, 0]], np.float32),
                  np.array([[1, 2, 3], [1, 2, 3], [4, 5, 6]], np.float32),
                  np.eye(3, dtype=np.float32),
                  np.eye(3, dtype=np.float32)[[1, 0, 2]]])
    got = check_node("Det", {"x": x}, tmp_path=tmp_path, opset=11)["y0"]
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), atol=1e-5)


def test_det_refuses_non_square(tmp_path):
    """ONNX shape inference rejects it too: the model types its output itself."""
    node = helper.make_node("Det", ["x"], ["y"], name="det_node")
    graph = helper.make_graph([node], "det",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 9
    with pytest.raises(ModelError, match="not a .batch of. square"):
        compile_and_run(model, {"x": rand(3, 4)}, tmp_path)
