"""Bounded dynamic shapes (--shape x=LO..HI): one compiled model for a range of sizes, checked
against onnxruntime at several sizes; bad ranges and out-of-range sizes are clear errors."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import mlcc
from mlcc.errors import InputError, ModelError, UnsupportedError
from mlcc.frontend import parse_shape_option
from mlcc.ir.symbolic import DimVar, SymbolicError, SymInt, smax, smin

STATUS_DIMS_OUT_OF_RANGE = 12          # MLCC_ERR_DIMS_OUT_OF_RANGE (mlcc_runtime.h)


def _cnn(path, batch="N"):
    """Conv+Relu, MaxPool, strided Conv, AveragePool, Reshape [0, -1], Gemm+Sigmoid, Softmax;
    and GlobalAveragePool + Flatten: a batch of odd-sized (17 x 19) images."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return nh.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 16, 8, 3, 3), w("b2", 16),
             w("w3", 10, 192), w("b3", 10), nh.from_array(np.array([0, -1], np.int64), "shp")]
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        h.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2],
                    name="pool1"),
        h.make_node("Conv", ["p1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1],
                    name="conv2"),
        h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        h.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[2, 2], name="pool2"),
        h.make_node("Reshape", ["p2", "shp"], ["f"], name="reshape"),
        h.make_node("Gemm", ["f", "w3", "b3"], ["g"], transB=1, name="fc"),
        h.make_node("Sigmoid", ["g"], ["s"], name="sig"),
        h.make_node("Softmax", ["s"], ["y"], axis=-1, name="softmax"),
        h.make_node("GlobalAveragePool", ["r2"], ["gp"], name="gap"),
        h.make_node("Flatten", ["gp"], ["y2"], name="flat")]
    g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 17, 19])],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, 10]),
                      h.make_tensor_value_info("y2", T.FLOAT, [batch, 16])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return _cnn(tmp_path_factory.mktemp("dyn") / "cnn.onnx")


@pytest.fixture(scope="module")
def cnn_batch(cnn, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dyn_out")
    res = mlcc.compile(cnn, folder, shapes={"x": ((1, 8), 3, 17, 19)})
    return res, mlcc.load(folder)


def test_symint_arithmetic_and_decisions():
    n = SymInt.var(DimVar("N", 1, 8, 0))
    w = SymInt.var(DimVar("W", 32, 1280, 1))
    assert (n * 3 * w).hi == 8 * 3 * 1280 and (n * 3 * w).lo == 96
    assert (n * 192) // n == 192 and (n * 192) % n == 0
    half = (w - 1) // 2 + 1
    assert half.evaluate({"W": 97}) == 49 and half.c_expr() == "((dims[1]-1) / (2))+1"
    assert n >= 1 and n + 1 > n and not (n > 8) and n * 2 // 2 == n
    assert smin(n, 9) == n and smax(n, 0) == n and smin(n, w) == n
    for undecidable in (lambda: n == 1, lambda: n > 4, lambda: int(n), lambda: w // (n - 1)):
        with pytest.raises(SymbolicError, match=r"depends on the size of (N|W)"):
            undecidable()


def test_parse_ranges():
    assert parse_shape_option("x=1,3,48,32..1280") == ("x", (1, 3, 48, (32, 1280)))
    with pytest.raises(ModelError, match="integers or ranges"):
        parse_shape_option("x=1,3..")


@pytest.mark.parametrize("shape, message", [
    (((4, 2), 3, 17, 19), r"range 4..2 must have 1 <= LO <= HI"),
    (((0, 8), 3, 17, 19), r"range 0..8 must have 1 <= LO <= HI"),
    ((1, (1, 3), 17, 19), r"dimension 1 is fixed to 3 in the model, not a range 1..3"),
])
def test_bad_ranges_are_one_line_errors(cnn, tmp_path, shape, message):
    with pytest.raises(ModelError, match=message):
        mlcc.compile(cnn, tmp_path / "out", shapes={"x": shape}, build=False)


def test_shared_symbol_follows_and_conflicts(tmp_path):
    """Inputs whose dimensions carry one dim_param are one variable: bound on one input, the
    others follow; bound twice differently, it is an error."""
    g = h.make_graph([h.make_node("Add", ["a", "b"], ["y"], name="add")], "two",
                     [h.make_tensor_value_info("a", T.FLOAT, ["S", 5]),
                      h.make_tensor_value_info("b", T.FLOAT, ["S", 5])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["S", 5])])
    path = tmp_path / "two.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    with pytest.raises(ModelError, match=r"\('S'\) is bound to 1..4, but to 2..4 by a\[0\]"):
        mlcc.compile(path, tmp_path / "bad", shapes={"a": ((2, 4), 5), "b": ((1, 4), 5)},
                     build=False)
    res = mlcc.compile(path, tmp_path / "out", shapes={"a": ((2, 4), 5)})
    assert res.manifest["dims"] == [{"name": "S", "min": 2, "max": 4}]
    m = mlcc.load(tmp_path / "out")
    rng = np.random.default_rng(1)
    for s in (2, 3, 4):
        a, b = (rng.standard_normal((s, 5)).astype(np.float32) for _ in range(2))
        np.testing.assert_array_equal(m.run({"a": a, "b": b})["y"], a + b)
    with pytest.raises(InputError, match=r"'S' is 3 in a\[0\] but 2 in b\[0\]"):
        m.run({"a": np.zeros((3, 5), np.float32), "b": np.zeros((2, 5), np.float32)})


def test_batch_range_matches_onnxruntime(cnn, cnn_batch):
    _, m = cnn_batch
    sess = ort.InferenceSession(str(cnn), providers=["CPUExecutionProvider"])
    for n in (1, 2, 3, 5, 8):
        x = np.random.default_rng(n).standard_normal((n, 3, 17, 19)).astype(np.float32)
        got = m.run({"x": x})
        ref = dict(zip(["y", "y2"], sess.run(None, {"x": x})))
        for name in ("y", "y2"):
            assert got[name].shape == ref[name].shape
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-5)


def test_out_of_range_is_an_error_and_a_status(cnn_batch):
    _, m = cnn_batch
    for n in (9, 0):
        with pytest.raises(InputError, match=rf"'N' \(x\[0\]\) is {n}, outside the range 1..8"):
            m.run({"x": np.zeros((n, 3, 17, 19), np.float32)})
    # the C entry points check too: a status, never an overrun
    x = np.zeros((8, 3, 17, 19), np.float32)
    outs = [np.zeros((8, 10), np.float32), np.zeros((8, 16), np.float32)]
    assert m.run_dims([9], [x], outs) == STATUS_DIMS_OUT_OF_RANGE
    assert m.run_dims([0], [x], outs) == STATUS_DIMS_OUT_OF_RANGE
    assert m.output_shapes([5]) == [[5, 10], [5, 16]]
    with pytest.raises(mlcc.errors.RuntimeStatusError, match="outside the range"):
        m.output_shapes([9])


def test_arena_is_the_static_arena_at_the_largest_size(cnn, cnn_batch, tmp_path):
    res, _ = cnn_batch
    static = mlcc.compile(cnn, tmp_path / "static", shapes={"x": (8, 3, 17, 19)}, build=False)
    assert res.manifest["arena_size"] <= static.manifest["arena_size"]
    assert res.manifest["weights_size"] == static.manifest["weights_size"]


def test_unsupported_dynamic_lowering_names_the_node(tmp_path):
    """An operator whose lowering must choose by the actual size is refused at compile time,
    naming the node, its type and the dimension."""
    g = h.make_graph([h.make_node("Shape", ["x"], ["s"], name="shape"),
                      h.make_node("Cast", ["s"], ["y"], to=T.FLOAT, name="cast")], "shp",
                     [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2])])
    path = tmp_path / "shape.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    with pytest.raises(UnsupportedError, match=r"'shape' \(Shape-\d+\).*size of N \(1..4\)"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": ((1, 4), 3)}, build=False)


# ------------------------------------------------------------------------------ real models

def _real(name):
    import fetch_models as fm
    try:
        return fm.fetch(name)
    except fm.DownloadError as exc:      # no network or no index: not a failure of mlcc
        pytest.skip(f"cannot download {name}: {exc}")


def _check_range(path, folder, shapes, input_shapes, atol):
    """Compiles once with a range and compares with onnxruntime at each of input_shapes."""
    res = mlcc.compile(path, folder, shapes=shapes)
    m = mlcc.load(folder)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for shape in input_shapes:
        x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        got = list(m.run({name: x}).values())
        ref = sess.run(None, {name: x})
        for g, r in zip(got, ref):
            assert g.shape == r.shape, shape
            np.testing.assert_allclose(g, r, rtol=1e-3, atol=atol, err_msg=str(shape))
    return res


@pytest.mark.slow
def test_ppocr_classifier_batch_1_to_8(tmp_path):
    res = _check_range(_real("ppocr_cls"), tmp_path / "cls", {"x": ((1, 8), 3, 48, 192)},
                       [(1, 3, 48, 192), (3, 3, 48, 192), (8, 3, 48, 192)], atol=1e-4)
    static = mlcc.compile(_real("ppocr_cls"), tmp_path / "static",
                          shapes={"x": (8, 3, 48, 192)}, build=False)
    assert res.manifest["arena_size"] <= static.manifest["arena_size"]
