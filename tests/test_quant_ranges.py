"""int8 post-training quantization of a model compiled for a range of sizes (--quantize int8
with --shape x=LO..HI, docs/dynamic-shapes.md): calibrated on samples of different sizes (a
folder of one .npz per sample), the integer kernels take the actual sizes at run time; the
int8 outputs are compared with onnxruntime's float ones by SQNR at the smallest, a middle and
the largest size."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import mlcc
from mlcc.errors import InputError, UnsupportedError
from mlcc.ir.symbolic import DimVar, SymInt
from mlcc.quant.calib import CalibrationSet


def _sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - got) ** 2))
    return 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / max(noise, 1e-30))


def _w(rng, name, *shape, scale=None):
    scale = scale if scale is not None else (2.0 / max(1, np.prod(shape[1:]))) ** 0.5
    return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _cnn(path):
    """Conv+Relu, strided Conv+Relu, depthwise Conv+Relu, 1x1 Conv + residual Add, MaxPool,
    GlobalAveragePool, Gemm: the map's height and width dynamic; outputs the pooled map and
    the logits."""
    rng = np.random.default_rng(0)
    inits = [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "b1", 8, scale=0.1),
             _w(rng, "w2", 16, 8, 3, 3), _w(rng, "b2", 16, scale=0.1),
             _w(rng, "w3", 16, 1, 3, 3), _w(rng, "b3", 16, scale=0.1),
             _w(rng, "w4", 16, 16, 1, 1), _w(rng, "b4", 16, scale=0.1),
             _w(rng, "w5", 10, 16), _w(rng, "b5", 10, scale=0.1)]
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1],
                    name="conv2"),
        h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        h.make_node("Conv", ["r2", "w3", "b3"], ["c3"], group=16, pads=[1, 1, 1, 1],
                    name="dw"),
        h.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        h.make_node("Conv", ["r3", "w4", "b4"], ["c4"], name="pw"),
        h.make_node("Add", ["c4", "r2"], ["a4"], name="residual"),
        h.make_node("MaxPool", ["a4"], ["feat"], kernel_shape=[2, 2], strides=[2, 2],
                    name="pool"),
        h.make_node("GlobalAveragePool", ["feat"], ["gp"], name="gap"),
        h.make_node("Flatten", ["gp"], ["f"], name="flat"),
        h.make_node("Gemm", ["f", "w5", "b5"], ["y"], transB=1, name="fc")]
    g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 10]),
                      h.make_tensor_value_info("feat", T.FLOAT, [1, 16, None, None])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))
    return path


def _transformer(path, d=32, heads=4, ff=64):
    """A MiniLM-like encoder block over a dynamic sequence: Q, K, V projections, heads by
    Reshape [0, 0, heads, d / heads] and Transpose, scaled dot-product Softmax attention, the
    output projection, residual + LayerNormalization, a GELU (Erf) feed-forward, residual +
    LayerNormalization."""
    rng = np.random.default_rng(1)
    dh = d // heads
    inits = [_w(rng, n, d, d) for n in ("wq", "wk", "wv", "wo")] + \
            [_w(rng, n, d, scale=0.1) for n in ("bq", "bk", "bv", "bo")] + \
            [_w(rng, "w1", d, ff), _w(rng, "b1", ff, scale=0.1), _w(rng, "w2", ff, d),
             _w(rng, "b2", d, scale=0.1),
             nh.from_array((1 + 0.1 * rng.standard_normal(d)).astype(np.float32), "g1"),
             nh.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "be1"),
             nh.from_array((1 + 0.1 * rng.standard_normal(d)).astype(np.float32), "g2"),
             nh.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "be2"),
             nh.from_array(np.array([0, 0, heads, dh], np.int64), "split"),
             nh.from_array(np.array([0, 0, d], np.int64), "merge"),
             nh.from_array(np.array(1 / np.sqrt(dh), np.float32), "scale"),
             nh.from_array(np.array(1 / np.sqrt(2), np.float32), "rs2"),
             nh.from_array(np.array(1, np.float32), "one"),
             nh.from_array(np.array(0.5, np.float32), "half")]
    nodes = []
    for p in ("q", "k", "v"):
        nodes += [h.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"], name=f"{p}_proj"),
                  h.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"], name=f"{p}_bias"),
                  h.make_node("Reshape", [f"{p}1", "split"], [f"{p}2"], name=f"{p}_heads"),
                  h.make_node("Transpose", [f"{p}2"], [f"{p}3"],
                              perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3],
                              name=f"{p}_t")]
    nodes += [
        h.make_node("MatMul", ["q3", "k3"], ["s0"], name="scores"),
        h.make_node("Mul", ["s0", "scale"], ["s1"], name="scaled"),
        h.make_node("Softmax", ["s1"], ["p"], axis=-1, name="softmax"),
        h.make_node("MatMul", ["p", "v3"], ["o0"], name="context"),
        h.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3], name="o_t"),
        h.make_node("Reshape", ["o1", "merge"], ["o2"], name="o_merge"),
        h.make_node("MatMul", ["o2", "wo"], ["o3"], name="o_proj"),
        h.make_node("Add", ["o3", "bo"], ["o4"], name="o_bias"),
        h.make_node("Add", ["o4", "x"], ["r1"], name="res1"),
        h.make_node("LayerNormalization", ["r1", "g1", "be1"], ["n1"], axis=-1,
                    epsilon=1e-5, name="ln1"),
        h.make_node("MatMul", ["n1", "w1"], ["f0"], name="ff1"),
        h.make_node("Add", ["f0", "b1"], ["f1"], name="ff1_bias"),
        h.make_node("Mul", ["f1", "rs2"], ["g0"], name="gelu_div"),
        h.make_node("Erf", ["g0"], ["g1e"], name="gelu_erf"),
        h.make_node("Add", ["g1e", "one"], ["g2e"], name="gelu_add"),
        h.make_node("Mul", ["f1", "g2e"], ["g3"], name="gelu_mul"),
        h.make_node("Mul", ["g3", "half"], ["g4"], name="gelu_half"),
        h.make_node("MatMul", ["g4", "w2"], ["f2"], name="ff2"),
        h.make_node("Add", ["f2", "b2"], ["f3"], name="ff2_bias"),
        h.make_node("Add", ["f3", "n1"], ["r2"], name="res2"),
        h.make_node("LayerNormalization", ["r2", "g2", "be2"], ["y"], axis=-1,
                    epsilon=1e-5, name="ln2")]
    g = h.make_graph(nodes, "block", [h.make_tensor_value_info("x", T.FLOAT, [1, "S", d])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, "S", d])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return path


def _calibration_folder(folder, shapes, seed):
    """One .npz per sample, each of its own size."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for i, shape in enumerate(shapes):
        np.savez(folder / f"s{i:02d}.npz", x=rng.uniform(-1, 1, shape).astype(np.float32))
    return folder


def _check_sqnr(path, folder, ranges, calib, sizes, min_db):
    res = mlcc.compile(path, folder, shapes=ranges,
                       quantize=mlcc.api.QuantizeConfig(calibration=calib))
    info = res.manifest["quantization"]
    assert info["samples"] == len(list(calib.iterdir()))
    q = mlcc.load(folder)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(7)
    worst = {}
    for shape in sizes:
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        ref = dict(zip(names, sess.run(None, {"x": x})))
        got = q.run({"x": x})
        for n in names:
            assert got[n].shape == ref[n].shape, (n, shape)
            worst[(n, shape)] = _sqnr_db(ref[n], got[n])
    assert min(worst.values()) >= min_db, worst
    return res


def test_cnn_int8_over_a_range_of_heights_and_widths(tmp_path):
    """Calibrated on 10 images of 10 sizes; the int8 convolutions (im2col, depthwise, 1x1,
    residual add), the uint8 MaxPool and the mean compute with the actual height and width."""
    path = _cnn(tmp_path / "cnn.onnx")
    rng = np.random.default_rng(3)
    cal = [(1, 3, 9, 10), (1, 3, 33, 47)] + [
        (1, 3, int(rng.integers(9, 34)), int(rng.integers(10, 48))) for _ in range(8)]
    calib = _calibration_folder(tmp_path / "calib", cal, seed=4)
    res = _check_sqnr(path, tmp_path / "q", {"x": (1, 3, (9, 33), (10, 47))}, calib,
                      [(1, 3, 9, 10), (1, 3, 17, 29), (1, 3, 33, 47)], min_db=25)
    assert res.manifest["quantization"]["integer_layers"] >= 5
    code = (tmp_path / "q" / "model.c").read_text()
    assert "mlcc_u8_conv2d(" in code and "mlcc_u8_conv2d__depthwise(" in code
    assert [d["name"] for d in res.manifest["dims"]] == ["H", "W"]


def test_transformer_block_int8_over_a_range_of_sequence_lengths(tmp_path):
    """Calibrated on sequences of 1 to 48 tokens; the integer projections (QFC) take the
    number of rows from the sequence length."""
    path = _transformer(tmp_path / "block.onnx")
    cal = [(1, s, 32) for s in (1, 48, 5, 17, 30, 9, 41, 24)]
    calib = _calibration_folder(tmp_path / "calib", cal, seed=5)
    res = _check_sqnr(path, tmp_path / "q", {"x": (1, (1, 48), 32)}, calib,
                      [(1, 1, 32), (1, 13, 32), (1, 48, 32)], min_db=25)
    assert res.manifest["quantization"]["integer_layers"] >= 6
    assert (tmp_path / "q" / "model.c").read_text().count("mlcc_u8_fc(") >= 6


def test_cnn_int8_over_a_batch_range(tmp_path):
    """A dynamic batch (1..8; calibrated on batches of 1, 3 and 8 in an .npy folder): the
    integer kernels loop over the actual batch."""
    from test_dynamic_shapes import _cnn as batch_cnn
    path = batch_cnn(tmp_path / "cnn.onnx")
    folder = tmp_path / "calib"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for n in (1, 3, 8):
        np.save(folder / f"b{n}.npy", rng.uniform(-1, 1, (n, 3, 17, 19)).astype(np.float32))
    _check_sqnr(path, tmp_path / "q", {"x": ((1, 8), 3, 17, 19)}, folder,
                [(1, 3, 17, 19), (5, 3, 17, 19), (8, 3, 17, 19)], min_db=25)


def test_calibration_samples_of_a_range_are_checked(tmp_path):
    """A sample's size must lie in its range (and step), the same wherever its dimension
    appears; a stacked .npz's samples share one size, checked the same way."""
    s = SymInt.var(DimVar("S", 2, 16, 0))
    w = SymInt.var(DimVar("W", 32, 128, 1, step=32))
    spec = {"a": ("float32", (1, s, 4)), "b": ("float32", (s, w))}
    cal = CalibrationSet(tmp_path, spec)
    ok = cal._check("s0", {"a": np.zeros((5, 4), np.float32), "b": np.zeros((5, 64), np.float32)})
    assert ok["a"].shape == (1, 5, 4) and ok["b"].shape == (5, 64)
    for sample, message in [
        ({"a": np.zeros((1, 17, 4)), "b": np.zeros((17, 64))},
         r"s0: input 'a' must have shape \[1, S, 4\] \(one sample\), got \[1, 17, 4\]: "
         r"dimension 'S' is 17, outside the range 2..16 of --shape"),
        ({"a": np.zeros((1, 3, 4)), "b": np.zeros((3, 48))},
         r"dimension 'W' is 48, outside the range 32..128 \(multiples of 32\)"),
        ({"a": np.zeros((1, 3, 4)), "b": np.zeros((4, 64))},
         r"input 'b' .* got \[4, 64\]: dimension 'S' is 4 here but 3 in a\[1\]"),
        ({"a": np.zeros((1, 3, 5)), "b": np.zeros((3, 64))},
         r"input 'a' must have shape \[1, S, 4\] \(one sample\), got \[1, 3, 5\]$"),
    ]:
        with pytest.raises(InputError, match=message):
            cal._check("s0", {k: v.astype(np.float32) for k, v in sample.items()})


def test_a_calibration_sample_out_of_the_range_is_a_one_line_error(tmp_path):
    path = _cnn(tmp_path / "cnn.onnx")
    calib = _calibration_folder(tmp_path / "calib", [(1, 3, 40, 12), (1, 3, 9, 10)], seed=1)
    with pytest.raises(InputError, match=r"s00.npz: input 'x' .*dimension 'H' is 40, outside "
                                         r"the range 9..33 of --shape"):
        mlcc.compile(path, tmp_path / "q", shapes={"x": (1, 3, (9, 33), (10, 47))},
                     build=False, quantize=mlcc.api.QuantizeConfig(calibration=calib))


def test_mixed_precision_search_with_a_range_is_refused(tmp_path):
    path = _cnn(tmp_path / "cnn.onnx")
    calib = _calibration_folder(tmp_path / "calib", [(1, 3, 9, 10)], seed=1)
    with pytest.raises(UnsupportedError, match=r"--min-sqnr / --max-drop with a range of sizes"):
        mlcc.compile(path, tmp_path / "q", shapes={"x": (1, 3, (9, 33), (10, 47))},
                     build=False, quantize=mlcc.api.QuantizeConfig(calib, min_sqnr=30))
    with pytest.raises(UnsupportedError, match=r"--time-budget with a range of sizes"):
        mlcc.compile(path, tmp_path / "q", shapes={"x": (1, 3, (9, 33), (10, 47))},
                     build=False, quantize=mlcc.api.QuantizeConfig(calib, time_budget=0.8))


def test_cli_calibration_sample_out_of_the_range_is_one_line_and_exit_1(tmp_path):
    import subprocess
    import sys
    path = _cnn(tmp_path / "cnn.onnx")
    calib = _calibration_folder(tmp_path / "calib", [(1, 3, 9, 48)], seed=1)
    proc = subprocess.run([sys.executable, "-m", "mlcc.cli", "compile", str(path), "-o",
                           str(tmp_path / "q"), "--shape", "x=1,3,9..33,10..47",
                           "--quantize", "int8", "--calibration", str(calib)],
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlcc: error: ") and \
        lines[0].endswith("dimension 'W' is 48, outside the range 10..47 of --shape"), lines
