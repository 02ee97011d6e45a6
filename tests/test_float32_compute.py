"""float16, bfloat16 and float64 graphs computed in float32 (mlcc/passes/float32_compute.py):
a float16 CNN converted the way users convert models (onnxruntime's float16 converter, the
onnxconverter-common code it ships) against onnxruntime, float64 graphs, the float16 rounding
kept before step functions, and the refusals."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlcc.errors import UnsupportedError
from util import check_model, compile_and_run, make_model, rand


def _cnn_float32() -> onnx.ModelProto:
    """A small CNN on a 1 x 3 x 13 x 11 image: Conv-Relu-MaxPool, a residual Conv block with
    a Sigmoid, GlobalAveragePool, Gemm, Softmax."""
    w = {"w1": rand(8, 3, 3, 3, seed=1) * 0.4, "b1": rand(8, seed=2) * 0.1,
         "w2": rand(8, 8, 3, 3, seed=3) * 0.2, "b2": rand(8, seed=4) * 0.1,
         "fc": rand(10, 8, seed=5) * 0.5, "fcb": rand(10, seed=6) * 0.1}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("Add", ["s2", "p1"], ["a2"]),
        helper.make_node("GlobalAveragePool", ["a2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 13, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("c1", TensorProto.FLOAT, [1, 8, 13, 11])],
        [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_float16_cnn_against_onnxruntime(tmp_path):
    """The float32 CNN converted to float16 inputs, weights and outputs by onnxruntime's
    float16 converter; mlcc's outputs (float16) against onnxruntime on the float16 model, and
    against the float32 model rounded to float16, which computing in float32 matches more
    closely."""
    import onnxruntime as ort
    from onnxruntime.transformers.float16 import convert_float_to_float16
    model32 = _cnn_float32()
    model16 = convert_float_to_float16(model32, keep_io_types=False)
    x = rand(1, 3, 13, 11, seed=7)
    path = tmp_path / "cnn16.onnx"
    onnx.save(model16, str(path))
    got = compile_and_run(model16, {"x": x.astype(np.float16)}, tmp_path)
    assert got["y"].dtype == np.float16 and got["c1"].dtype == np.float16
    ref32 = dict(zip(["y", "c1"], ort.InferenceSession(
        model32.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["y", "c1"], {"x": x.astype(np.float16).astype(np.float32)})))
    ref16 = dict(zip(["y", "c1"], ort.InferenceSession(
        model16.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["y", "c1"], {"x": x.astype(np.float16)})))
    for name in ("y", "c1"):
        g = got[name].astype(np.float32)
        scale = max(1.0, float(np.abs(ref32[name]).max()))
        # float16 keeps 11 bits: one rounding of the float32 result is 2^-11 relative
        assert np.abs(g - ref32[name]).max() <= 2 ** -11 * scale, name
        assert np.abs(g - ref16[name].astype(np.float32)).max() <= 2e-2 * scale, name


def test_float64_graph(tmp_path):
    """MatMul, Add, Tanh, Softmax, ReduceLogSumExp and LayerNormalization on float64 inputs
    and constants, with float64 outputs; a Transpose (native float64) in between."""
    x, y = rand(3, 5, 7, seed=8).astype(np.float64), rand(7, 4, seed=9).astype(np.float64)
    nodes = [helper.make_node("MatMul", ["x", "y"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["a"]),
             helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Transpose", ["t"], ["tt"], perm=[0, 2, 1]),
             helper.make_node("Softmax", ["tt"], ["s"], axis=-1),
             helper.make_node("ReduceLogSumExp", ["tt"], ["r"], axes=[1], keepdims=0),
             helper.make_node("LayerNormalization", ["tt", "gamma"], ["ln"], axis=-1)]
    feeds = {"x": x, "y": y}
    model = make_model(nodes, feeds, ["s", "r", "ln"], opset=17,
                       initializers={"bias": rand(4, seed=10).astype(np.float64),
                                     "gamma": rand(5, seed=11).astype(np.float64)})
    got = check_model(model, feeds, tmp_path)
    assert all(v.dtype == np.float64 for v in got.values())


def test_float16_keeps_its_rounding_before_a_step_function(tmp_path):
    """Floor(x * 3) in float16: 0.3333 * 3 is 0.99976 in float32 and 1.0 once rounded to
    float16, so Floor must read the float16 value (1), as onnxruntime does."""
    x = np.array([0.33333, 1.6667, -0.33333, 2.3333], np.float16)
    nodes = [helper.make_node("Mul", ["x", "three"], ["m"]),
             helper.make_node("Floor", ["m"], ["f"]),
             helper.make_node("Sqrt", ["m"], ["s"])]
    model = make_model(nodes, {"x": x}, ["f", "s"], opset=13,
                       initializers={"three": np.array(3, np.float16)})
    got = compile_and_run(model, {"x": x}, tmp_path)
    want = np.floor((x * np.float16(3)).astype(np.float16))
    np.testing.assert_array_equal(got["f"], want)
    assert got["f"].dtype == np.float16


def test_bfloat16_relu_and_add(tmp_path):
    import ml_dtypes
    x = rand(4, 6, seed=12).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], opset=14)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    xf = x.astype(np.float32)
    want = (np.maximum(xf, 0) + xf).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_float64_step_function_is_refused(tmp_path):
    x = rand(5, seed=13).astype(np.float64)
    node = helper.make_node("Floor", ["x"], ["y"], name="floor_node")
    model = make_model([node], {"x": x}, ["y"], opset=13)
    with pytest.raises(UnsupportedError, match="floor_node.*float64 input 'x'.*jump a step"):
        compile_and_run(model, {"x": x}, tmp_path)


def test_float64_constant_beyond_float32_is_refused(tmp_path):
    x = rand(3, seed=14).astype(np.float64)
    node = helper.make_node("Mul", ["x", "big"], ["y"], name="mul_node")
    model = make_model([node], {"x": x}, ["y"], opset=13,
                       initializers={"big": np.array([1e300], np.float64)})
    with pytest.raises(UnsupportedError, match="mul_node.*'big'.*beyond float32"):
        compile_and_run(model, {"x": x}, tmp_path)
