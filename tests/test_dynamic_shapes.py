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

STATUS_DIMS_OUT_OF_RANGE = 14          # MLCC_ERR_DIMS_OUT_OF_RANGE (mlcc_runtime.h)


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
    p = SymInt.var(DimVar("P", 1, 64, 2))     # a multiple of a sum: the reshape of a KV cache
    assert (64 * p + 64) // (16 * p + 16) == 4 and (64 * p + 64) % (16 * p + 16) == 0
    assert not isinstance((48 * p + 64) // (16 * p + 16), int)
    for undecidable in (lambda: n == 1, lambda: n > 4, lambda: int(n), lambda: w // (n - 1)):
        with pytest.raises(SymbolicError, match=r"depends on the size of (N|W)"):
            undecidable()


def test_parse_ranges():
    assert parse_shape_option("x=1,3,48,32..1280") == ("x", (1, 3, 48, (32, 1280)))
    with pytest.raises(ModelError, match="integers, ranges"):
        parse_shape_option("x=1,3..")
    assert parse_shape_option("mask=1, P + 1") == ("mask", (1, "P + 1"))
    with pytest.raises(ModelError, match="expressions of the model's dimension names"):
        parse_shape_option("x=1,P+1.5")


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
    assert res.manifest["dims"] == [{"name": "S", "symbol": "S", "min": 2, "max": 4}]
    m = mlcc.load(tmp_path / "out")
    rng = np.random.default_rng(1)
    for s in (2, 3, 4):
        a, b = (rng.standard_normal((s, 5)).astype(np.float32) for _ in range(2))
        np.testing.assert_array_equal(m.run({"a": a, "b": b})["y"], a + b)
    with pytest.raises(InputError, match=r"'S' is 3 in a\[0\] but 2 in b\[0\]"):
        m.run({"a": np.zeros((3, 5), np.float32), "b": np.zeros((2, 5), np.float32)})


def _kv_step(path, mask_dim):
    """A decoding step with a KV cache: past [1, 3, P, 5] and the new key [1, 3, 1, 5]
    concatenated along the sequence, times the mask [1, mask_dim] (P + 1 long) broadcast over
    heads and features."""
    nodes = [h.make_node("Concat", ["past", "new"], ["kv"], axis=-2, name="concat"),
             h.make_node("Unsqueeze", ["mask", "axes"], ["m4"], name="unsq"),
             h.make_node("Mul", ["kv", "m4"], ["y"], name="mul")]
    g = h.make_graph(nodes, "kv", [h.make_tensor_value_info("past", T.FLOAT, [1, 3, "P", 5]),
                                   h.make_tensor_value_info("new", T.FLOAT, [1, 3, 1, 5]),
                                   h.make_tensor_value_info("mask", T.FLOAT, [1, mask_dim])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 3, "Y", 5])],
                     [nh.from_array(np.array([1, 3], np.int64), "axes")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return path


@pytest.mark.parametrize("mask_dim, shapes", [
    ("P + 1", {"past": (1, 3, (1, 9), 5)}),                  # torch.export: "P + 1"
    ("T", {"past": (1, 3, (1, 9), 5), "mask": (1, "P+1")}),  # a symbol of its own: given
    ("P + 1", {"mask": (1, (2, 10)), "past": (1, 3, (1, 9), 5)}),   # its range, checked
])
def test_dimension_expressions_follow_their_symbols(tmp_path, mask_dim, shapes):
    """A dimension the model writes as an expression of another input's dim_param (what
    exporters write for the attention mask of a decoding step with a KV cache), or that
    --shape gives as one, is that expression: one dynamic dimension, P."""
    path = _kv_step(tmp_path / "kv.onnx", mask_dim)
    res = mlcc.compile(path, tmp_path / "out", shapes=shapes)
    assert res.manifest["dims"] == [{"name": "P", "symbol": "P", "min": 1, "max": 9}]
    m = mlcc.load(tmp_path / "out")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for p in (1, 4, 9):
        feeds = {"past": rng.standard_normal((1, 3, p, 5)).astype(np.float32),
                 "new": rng.standard_normal((1, 3, 1, 5)).astype(np.float32),
                 "mask": rng.standard_normal((1, p + 1)).astype(np.float32)}
        np.testing.assert_array_equal(m.run(feeds)["y"], sess.run(None, feeds)[0])
    with pytest.raises(InputError, match=r"input 'mask' must have shape \[1, 'P\+1'\]"):
        m.run({**feeds, "mask": np.zeros((1, 9), np.float32)})


@pytest.mark.parametrize("mask_dim, shapes, message", [
    ("P + 1", {"mask": (1, (2, 10))},
     r"input 'past': dimension 2 \('P'\) is dynamic"),
    ("P + 1", {"mask": (1, (2, 11)), "past": (1, 3, (1, 9), 5)},
     r"--shape mask: dimension 1 is 'P \+ 1' in the model, 2..10 by the other bindings, "
     r"not 2..11"),
    ("T", {"past": (1, 3, (1, 9), 5), "mask": (1, "Q+1")},
     r"--shape mask: dimension 1 'Q\+1' reads Q, which no input binds"),
])
def test_dimension_expression_errors(tmp_path, mask_dim, shapes, message):
    path = _kv_step(tmp_path / "kv.onnx", mask_dim)
    with pytest.raises(ModelError, match=message):
        mlcc.compile(path, tmp_path / "out", shapes=shapes, build=False)


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


def _width_model(path):
    """Feature maps of a dynamic width W: Conv, depthwise strided Conv, MaxPool of stride 1
    (the kernel picks its narrow-map path at run time), AveragePool over W, a Slice of W,
    Softmax along W, and GlobalAveragePool (its 1 / (H x W) computed at run time)."""
    rng = np.random.default_rng(3)

    def w(name, *shape):
        return nh.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    def ints(name, values):
        return nh.from_array(np.array(values, np.int64), name)

    inits = [w("w1", 6, 4, 3, 3), w("b1", 6), w("wd", 6, 1, 3, 3), w("bd", 6),
             ints("st", [1]), ints("en", [-1]), ints("ax", [3])]
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Relu", ["c1"], ["r1"], name="relu"),
        h.make_node("Conv", ["r1", "wd", "bd"], ["c2"], group=6, strides=[2, 2],
                    pads=[1, 1, 1, 1], name="depthwise"),
        h.make_node("MaxPool", ["c2"], ["p1"], kernel_shape=[2, 2], pads=[0, 0, 1, 1],
                    name="maxpool"),
        h.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[1, 2], strides=[1, 2],
                    name="avgpool"),
        h.make_node("Slice", ["p2", "st", "en", "ax"], ["s"], name="slice"),
        h.make_node("Softmax", ["s"], ["y"], axis=-1, name="softmax"),
        h.make_node("GlobalAveragePool", ["c2"], ["y2"], name="gap")]
    g = h.make_graph(nodes, "wide", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 9, "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 6, 5, "V"]),
                      h.make_tensor_value_info("y2", T.FLOAT, [1, 6, 1, 1])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return path


def test_width_range_matches_onnxruntime(tmp_path):
    path = _width_model(tmp_path / "wide.onnx")
    sizes = [(1, 4, 9, w) for w in (12, 13, 17, 40, 64)]
    _check_range(path, tmp_path / "out", {"x": (1, 4, 9, (12, 64))}, sizes, atol=1e-5)


def _one_node(path, node, inits, x_shape):
    g = h.make_graph([node], "one", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 3, "Y", 5])], inits)
    model = onnx.shape_inference.infer_shapes(
        h.make_model(g, opset_imports=[h.make_opsetid("", 13)]))
    model.graph.output[0].type.tensor_type.shape.SetInParent()
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("node, inits, message", [
    # a shape that would be a run-time value
    (h.make_node("Shape", ["x"], ["s0"], name="shape"), [], None),
    # offset tables that would change with the size (a batched MatMul of a dynamic inner
    # batch axis)
    (h.make_node("MatMul", ["x", "x"], ["y"], name="matmul"), [],
     r"node 'matmul' \(MatMul-13\): .*depends on the size of N \(1..4\)"),
])
def test_unsupported_dynamic_operators_name_the_node(tmp_path, node, inits, message):
    """An operator that cannot take a dynamic size is refused at compile time, naming the
    node, its type and the dimension."""
    if node.op_type == "Shape":       # Shape -> Cast to float as an output: the shape's values
        g = h.make_graph([node, h.make_node("Cast", ["s0"], ["y"], to=T.FLOAT, name="cast")],
                         "shp", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2])])
        path = tmp_path / "m.onnx"
        onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
        message = r"graph output 'y', a value computed from the sizes, depends on the size of N " \
            r"\(1..4\)"
    else:
        x_shape = [2, "N", 3, 3] if node.op_type == "MatMul" else ["N", 3]
        path = _one_node(tmp_path / "m.onnx", node, inits, x_shape)
    shape = (2, (1, 4), 3, 3) if node.op_type == "MatMul" else ((1, 4), 3)
    with pytest.raises(UnsupportedError, match=message):
        mlcc.compile(path, tmp_path / "out", shapes={"x": shape}, build=False)


def test_verify_checks_smallest_middle_and_largest(cnn):
    result = mlcc.verify(cnn, shapes={"x": ((1, 8), 3, 17, 19)})
    assert result.ok
    assert [c.name for c in result.outputs] == [
        f"{n} at N={s}" for s in (1, 5, 8) for n in ("y", "y2")]


def test_no_range_is_unchanged(cnn, tmp_path):
    """A fixed --shape compiles as before: no dims in the manifest, no dims in the C API."""
    res = mlcc.compile(cnn, tmp_path / "fixed", shapes={"x": (2, 3, 17, 19)}, build=False)
    assert "dims" not in res.manifest
    header = (tmp_path / "fixed" / "model.h").read_text()
    assert "dims" not in header and "run_dims" not in header


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
def test_ppocr_recognizer_width_32_to_1280(tmp_path):
    res = _check_range(_real("ppocr_rec"), tmp_path / "rec", {"x": (1, 3, 48, (32, 1280))},
                       [(1, 3, 48, w) for w in (32, 97, 320, 1280)], atol=1e-4)
    static = mlcc.compile(_real("ppocr_rec"), tmp_path / "static",
                          shapes={"x": (1, 3, 48, 1280)}, build=False)
    assert res.manifest["arena_size"] <= static.manifest["arena_size"]


@pytest.mark.slow
def test_ppocr_classifier_batch_1_to_8(tmp_path):
    res = _check_range(_real("ppocr_cls"), tmp_path / "cls", {"x": ((1, 8), 3, 48, 192)},
                       [(1, 3, 48, 192), (3, 3, 48, 192), (8, 3, 48, 192)], atol=1e-4)
    static = mlcc.compile(_real("ppocr_cls"), tmp_path / "static",
                          shapes={"x": (8, 3, 48, 192)}, build=False)
    assert res.manifest["arena_size"] <= static.manifest["arena_size"]


def test_cli_bad_range_is_one_line_and_exit_1(cnn, tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "mlcc.cli", "compile", str(cnn), "-o",
                           str(tmp_path / "o"), "--shape", "x=8..2,3,17,19"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "mlcc: error: --shape x: dimension 0 range 8..2 must have 1 <= LO <= HI"]


# ------------------------------------------------------------------------------ cross targets

def _needs(target):
    if target == "arm":
        from test_targets_arm import needs_arm
        return needs_arm
    from test_targets_wasm import needs_wasm
    return needs_wasm


@pytest.mark.parametrize("target", [pytest.param("arm", marks=_needs("arm")),
                                    pytest.param("wasm", marks=_needs("wasm"))])
def test_batch_range_on_cross_targets(cnn, tmp_path, target):
    """The same generated C on another target: the harness takes --dims, inputs and outputs
    at those sizes; a size out of range is the C status, reported as a run failure."""
    folder = tmp_path / target
    mlcc.compile(cnn, folder, target=target, shapes={"x": ((1, 8), 3, 17, 19)})
    m = mlcc.load(folder)
    sess = ort.InferenceSession(str(cnn), providers=["CPUExecutionProvider"])
    for n in (1, 4, 8):
        x = np.random.default_rng(n).standard_normal((n, 3, 17, 19)).astype(np.float32)
        got, ref = m.run({"x": x}), sess.run(None, {"x": x})
        for name, r in zip(("y", "y2"), ref):
            np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-5)
    import subprocess
    cmd = [*m.command, str(m.harness), "--dims", "9", str(m.weights), "a", "b", "c"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2 and "outside the range" in proc.stderr


ASAN_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"

/* Every size in the range, buffers of exactly their size (the arena of exactly
 * ARENA_SIZE): AddressSanitizer reports any read or write past one. */
static size_t elements(int is_output, int index, const int64_t *dims) {
    int64_t shape[8];
    size_t n = 1;
    int d, rank = is_output ? wide_model_info()->outputs[index].rank
                            : wide_model_info()->inputs[index].rank;
    if (wide_tensor_shape(dims, is_output, index, shape) != MLCC_OK) exit(3);
    for (d = 0; d < rank; d++) n *= (size_t)shape[d];
    return n;
}

int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    void *weights = aligned_alloc(MLCC_WEIGHTS_ALIGN, WIDE_WEIGHTS_SIZE);
    void *arena = aligned_alloc(64, WIDE_ARENA_SIZE);
    mlcc_context ctx;
    int64_t w;
    (void)argc;
    if (!f || fread(weights, 1, WIDE_WEIGHTS_SIZE, f) != WIDE_WEIGHTS_SIZE) return 2;
    fclose(f);
    if (wide_init(&ctx, weights, WIDE_WEIGHTS_SIZE, arena, WIDE_ARENA_SIZE) != MLCC_OK) return 2;
    for (w = WIDE_DIM0_MIN - 1; w <= WIDE_DIM0_MAX + 1; w++) {
        int64_t dims[1];
        void *in[1], *out[2];
        size_t i, n;
        int k, status;
        dims[0] = w;
        if (w < WIDE_DIM0_MIN || w > WIDE_DIM0_MAX) {
            float dummy[1];
            void *p[2] = {dummy, dummy};
            if (wide_run_dims(&ctx, dims, (const void *const *)p, p) !=
                MLCC_ERR_DIMS_OUT_OF_RANGE) return 4;
            continue;
        }
        n = elements(0, 0, dims);
        in[0] = malloc(n * sizeof(float));
        for (i = 0; i < n; i++) ((float *)in[0])[i] = (float)((int)(i % 13) - 6) / 5.0f;
        for (k = 0; k < 2; k++) out[k] = malloc(elements(1, k, dims) * sizeof(float));
        status = wide_run_dims(&ctx, dims, (const void *const *)in, out);
        free(in[0]);
        free(out[0]);
        free(out[1]);
        if (status != MLCC_OK) return 5;
    }
    free(arena);
    free(weights);
    printf("ok\n");
    return 0;
}
"""


def run_every_size_under_asan(path, folder, shapes, flags=()):
    """Compiles a model of one input, two outputs and one dynamic dimension into `folder`
    and runs ASAN_DRIVER over it (every_width_under_address_sanitizer)."""
    mlcc.compile(path, folder, shapes=shapes, name="wide", build=False)
    every_width_under_address_sanitizer(folder, flags)


def every_width_under_address_sanitizer(folder, flags=()):
    """Builds ASAN_DRIVER with the model in `folder` (compiled with name="wide", build=False:
    one input, two outputs) under AddressSanitizer and UBSan, and runs it."""
    import shutil
    import subprocess
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    (folder / "driver.c").write_text(ASAN_DRIVER)
    sources = ["driver.c", "model.c"] + sorted(
        str(p.relative_to(folder)) for p in (folder / "runtime").rglob("*.c"))
    subprocess.run(["gcc", "-std=c11", "-O1", "-g", *flags, "-Wall", "-Wextra", "-Werror",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-I.",
                    "-Iruntime/include", "-Iruntime/kernels", *sources, "-o", "driver", "-lm",
                    "-pthread"], cwd=folder, check=True)
    proc = subprocess.run([str(folder / "driver"), str(folder / "weights.bin")], cwd=folder,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_every_width_under_address_sanitizer(tmp_path):
    """All widths of the range (and one past each end, a status), buffers of exactly their
    size, under AddressSanitizer and UBSan: no overrun at any size."""
    path = _width_model(tmp_path / "wide.onnx")
    folder = tmp_path / "wide"
    mlcc.compile(path, folder, shapes={"x": (1, 4, 9, (12, 64))}, name="wide", build=False)
    every_width_under_address_sanitizer(folder)


def test_inspect_and_bench_with_a_range(cnn):
    report = mlcc.inspect(cnn, shapes={"x": ((1, 8), 3, 17, 19)})
    assert "GFLOPs per inference (at the largest sizes)" in report.text
    assert "float32[Nx16x1x1]" in report.text
    # (mlcc bench with a range: tests/test_dynamic_speed.py)


# ------------------------------------------- with outputs whose size depends on the data

def _relu_model(path, nonzero=False):
    nodes = [h.make_node("Relu", ["x"], ["r" if nonzero else "y"], name="relu")]
    out = h.make_tensor_value_info("y", T.FLOAT, ["N", 3])
    if nonzero:
        nodes.append(h.make_node("NonZero", ["r"], ["y"], name="nz"))
        out = h.make_tensor_value_info("y", T.INT64, [2, "K"])
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])], [out])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return path


def test_range_with_a_data_dependent_output_is_refused(tmp_path):
    """One model with both a range and an output whose size depends on the data is refused at
    compile time, naming the node (NAME_output_shape handles each alone)."""
    path = _relu_model(tmp_path / "m.onnx", nonzero=True)
    with pytest.raises(UnsupportedError, match=r"node 'nz' \(NonZero-13\): an output whose size "
                                               r"depends on the data .* range of sizes"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": ((1, 4), 3)}, build=False)


def test_firmware_targets_refuse_a_range(tmp_path):
    """The firmware harness runs at fixed sizes (it passes no dims): a clear compile error."""
    path = _relu_model(tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match="range of sizes .* not supported on firmware"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": ((1, 4), 3)}, target="cortex-m4",
                     build=False)


def test_output_shape_of_a_range_model_needs_no_context(tmp_path):
    """NAME_output_shape(ctx, dims, index, shape): ctx may be NULL for a model without
    data-dependent outputs, dims NULL means the largest sizes; a bad index is
    MLCC_ERR_INDEX_OUT_OF_RANGE, a size out of range MLCC_ERR_DIMS_OUT_OF_RANGE (14)."""
    import subprocess
    out = tmp_path / "out"
    mlcc.compile(_relu_model(tmp_path / "m.onnx"), out, shapes={"x": ((1, 4), 3)}, name="m")
    (out / "main.c").write_text(r"""
#include <stdio.h>
#include "model.h"
int main(void) {
    int64_t dims[1] = {3}, bad[1] = {5}, shape[MLCC_MAX_RANK];
    if (m_output_shape(NULL, dims, 0, shape) != MLCC_OK) return 1;
    printf("%lld %lld ", (long long)shape[0], (long long)shape[1]);
    if (m_output_shape(NULL, NULL, 0, shape) != MLCC_OK) return 2;
    printf("%lld\n", (long long)shape[0]);
    if (m_output_shape(NULL, dims, 1, shape) != MLCC_ERR_INDEX_OUT_OF_RANGE) return 3;
    if (m_output_shape(NULL, bad, 0, shape) != MLCC_ERR_DIMS_OUT_OF_RANGE) return 4;
    return MLCC_ERR_DIMS_OUT_OF_RANGE == 14 ? 0 : 5;
}
""")
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I.", "-Iruntime/include",
                    "main.c", "-L.", "-lmodel", "-Wl,-rpath,.", "-o", "main"], cwd=out,
                   check=True)
    run = subprocess.run(["./main"], cwd=out, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.split() == ["3", "3", "4"]


def test_harness_builds_with_dims_and_output_shapes_together():
    """The C harness compiles with -DMLCC_MODEL_DIMS and -DMLCC_OUTPUT_SHAPES, alone and
    together (C99, every warning an error)."""
    import subprocess
    from mlcc import resources
    runtime = resources.runtime_c()
    for defines in (["-DMLCC_MODEL_DIMS=2"], ["-DMLCC_OUTPUT_SHAPES"],
                    ["-DMLCC_MODEL_DIMS=2", "-DMLCC_OUTPUT_SHAPES"]):
        subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                        f"-I{runtime / 'include'}", "-DMLCC_MODEL=m", *defines,
                        str(runtime / "harness" / "mlcc_harness.c")], check=True)
