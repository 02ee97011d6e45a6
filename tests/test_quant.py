"""Post-training int8 quantization: observers and calibrators against numpy, the scheme's
arithmetic against onnxruntime's QLinearConv, calibration data errors, the rewrite's float
fallback, and end-to-end accuracy on the digits CNN."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc import api
from mlcc.cli import main
from mlcc.errors import InputError
from mlcc.quant.calib import CalibrationSet
from mlcc.quant.observers import (Calibrator, HistogramObserver, MinMaxObserver,
                                  flatten_spikes, flatten_zero_bin, kl_divergences,
                                  kl_threshold_bin)
from mlcc.quant.scheme import (QParams, activation_qparams, fixed_multipliers,
                               float_multipliers, quantize_weights, requantize_fixed,
                               requantize_float)
from util import native_vector_flags, ort_session

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
DIGITS_DATA = ROOT / "examples" / "digits" / "digits_sample.npz"


# ------------------------------------------------------------------ observers, calibrators

def _save_model(tmp_path, nodes, x_shape, outputs: dict, consts: dict) -> Path:
    """tmp_path/m.onnx: nodes over one float input x (opset 17, IR 8), float outputs."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
        [numpy_helper.from_array(a, n) for n, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def _calibration(tmp_path, rng, samples: int, x_shape) -> Path:
    """tmp_path/c.npz: samples normal draws of input x."""
    calib = tmp_path / "c.npz"
    np.savez(calib, x=rng.normal(0, 1, (samples, *x_shape)).astype(np.float32))
    return calib


def _compile_int8(path, folder, calib):
    return api.compile(path, folder, target="x86-native", quantize=api.QuantizeConfig(calib))


def _kernel_calls(folder) -> list[str]:
    """The kernel calls of folder's model.c, in order."""
    return re.findall(r"^    (mlcc_\w+)\(", (folder / "model.c").read_text(), re.M)


def _sqnr_vs_onnxruntime(path, folder, xs):
    """SQNR (dB) of the compiled folder's output y against onnxruntime's over the samples xs,
    and mlcc's outputs."""
    sess = ort_session(str(path))
    m = mlcc.load(folder)
    ref = np.stack([sess.run(None, {"x": x})[0] for x in xs])
    got = np.stack([m.run({"x": x})["y"] for x in xs])
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2)), got


def test_minmax_streams_to_numpy_min_max():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(i, 2 + i, (3, 7)).astype(np.float32) for i in range(9)]
    mm = MinMaxObserver()
    for c in chunks:
        mm.update(c)
    allv = np.concatenate([c.ravel() for c in chunks])
    assert (mm.lo, mm.hi) == (float(allv.min()), float(allv.max()))


def test_percentile_range_is_numpy_percentile_to_a_bin():
    rng = np.random.default_rng(1)
    chunks = [rng.standard_t(4, 5000).astype(np.float32) for _ in range(6)]
    allv = np.concatenate(chunks)
    h = HistogramObserver(float(np.abs(allv).max()))
    for c in chunks:
        h.update(c)
    for p in (99.0, 99.9, 99.99):
        lo, hi = h.percentile_range(p)
        assert abs(lo - np.percentile(allv, 100 - p)) <= 2 * h.width   # a bin, plus ranks
        assert abs(hi - np.percentile(allv, p)) <= 2 * h.width


def _kl_loop(hist, levels, i):
    """TensorRT's KL for threshold bin i, written as the plain loop."""
    hist = flatten_spikes(flatten_zero_bin(hist))
    p = hist[:i].copy()
    p[i - 1] += hist[i:].sum()
    group = (np.arange(i) * levels) // i
    src = hist[:i]
    sums = np.bincount(group, weights=src, minlength=levels)
    nonzero = np.bincount(group, weights=(src > 0).astype(np.float64), minlength=levels)
    q = np.where(src > 0, sums[group] / np.maximum(nonzero[group], 1.0), 0.0)
    pn, qn = p / p.sum(), q / q.sum()
    mask = pn > 0
    if np.any(mask & (qn == 0)):
        qn = np.where(mask & (qn == 0), 1e-4, qn)
        qn = qn / qn.sum()
    return float(np.sum(pn[mask] * np.log(pn[mask] / qn[mask])))


@pytest.mark.parametrize("levels", [128, 256])
def test_entropy_search_evaluates_every_candidate_exactly(levels):
    rng = np.random.default_rng(levels)
    h, _ = np.histogram(np.abs(rng.standard_t(3, 40000)), bins=2048)
    h[rng.integers(1, 2048, 300)] = 0                # holes, including at candidate ends
    cand, kl = kl_divergences(flatten_spikes(flatten_zero_bin(h)), levels)
    assert list(cand) == list(range(levels, 2049))
    ref = np.array([_kl_loop(h, levels, i) for i in cand])
    np.testing.assert_allclose(kl, ref, rtol=1e-9, atol=1e-12)
    assert kl_threshold_bin(h, levels) == cand[int(np.argmin(ref))]


def test_entropy_clips_outliers_and_differs_from_minmax():
    rng = np.random.default_rng(3)
    x = np.maximum(rng.normal(0, 1, 200000), 0).astype(np.float32)
    x[:20] = 40.0                                     # rare outliers
    cal = {m: Calibrator(m) for m in ("minmax", "entropy", "percentile")}
    for c in cal.values():
        for p in range(c.passes):
            for chunk in np.split(x, 10):
                c.observe(p, {"t": chunk})
    r = {m: c.ranges()["t"] for m, c in cal.items()}
    assert r["minmax"].hi == 40.0
    assert 2.5 < r["entropy"].hi < 10.0 and 0 < r["entropy"].clipped < 0.01
    assert 3.0 < r["percentile"].hi < 5.0


def test_observer_memory_does_not_grow_with_samples():
    cal = Calibrator("entropy")
    rng = np.random.default_rng(0)
    sizes = []
    for p in range(2):
        for k in range(50):
            cal.observe(p, {"a": rng.normal(size=(4, 5)), "b": rng.normal(size=7)})
            if p == 1:
                sizes.append(sum(h.hist.nbytes for h in cal.hists.values()))
    assert len(set(sizes)) == 1


# ------------------------------------------------------------------ scheme

def test_activation_params_cover_zero_and_the_range():
    qp = activation_qparams(-1.0, 3.0)
    assert qp.scale == pytest.approx(4 / 255) and qp.zero_point == 64
    assert activation_qparams(0.5, 2.0).zero_point == 0          # range widened to hold 0
    assert activation_qparams(0.0, 0.0).scale == 1.0             # a constant-zero tensor


def test_weights_symmetric_per_channel():
    w = np.array([[1.0, -2.0], [0.1, 0.05], [0.0, 0.0]], np.float32)
    q, s = quantize_weights(w)
    np.testing.assert_array_equal(q[0], [64, -127])
    assert s[2] == 1.0 and not q[2].any()
    _, st = quantize_weights(w, per_channel=False)
    assert np.all(st == st[0])


def test_float_requant_is_bit_exact_with_onnxruntime_qlinearconv(tmp_path):
    """onnxruntime's QLinearConv against the numpy model of the float requantization (the C
    kernel matches that model bit for bit, tests/test_quant_kernels.py)."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (1, 8, 11, 13)).astype(np.uint8)
    w = rng.integers(-127, 128, (24, 8, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.001, 0.02, 24).astype(np.float32)
    b = rng.integers(-5000, 5000, 24).astype(np.int32)
    xs, xz, ys, yz = np.float32(0.023), np.uint8(17), np.float32(0.11), np.uint8(120)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=[1, 1, 1, 1])
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             [("xs", xs), ("xz", xz), ("w", w), ("ws", w_scale), ("wz", np.zeros(24, np.int8)),
              ("ys", ys), ("yz", yz), ("b", b)]]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.UINT8, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.UINT8, [1, 24, 11, 13])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    ref = ort_session(model).run(None, {"x": x})[0]
    xp = np.pad(x.astype(np.int32) - int(xz), ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((1, 24, 11, 13), np.int64) + b.reshape(1, -1, 1, 1)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + 11, j:j + 13],
                             w[:, :, i, j].astype(np.int64))
    mult = float_multipliers(float(xs), w_scale, float(ys)).reshape(1, -1, 1, 1)
    got = requantize_float(acc.astype(np.int32), mult, QParams(float(ys), int(yz)))
    assert ref.size == 3432
    np.testing.assert_array_equal(got, ref)
    # and the ONNX QLinearConv node itself, compiled by mlcc onto the integer kernels
    np.testing.assert_array_equal(_mlcc_run(model, {"x": x}, tmp_path)["y"], ref)


def _mlcc_run(model, feeds, tmp_path):
    onnx.save(model, str(tmp_path / "m.onnx"))
    api.compile(tmp_path / "m.onnx", tmp_path / "m", target="x86-native")
    return mlcc.load(tmp_path / "m").run(feeds)


def test_qlinearmatmul_matches_onnxruntime(tmp_path):
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (2, 5, 37)).astype(np.uint8)
    b = rng.integers(-127, 128, (37, 19)).astype(np.int8)
    consts = [("as", np.float32(0.05)), ("az", np.uint8(128)), ("b", b),
              ("bs", rng.uniform(0.001, 0.01, 19).astype(np.float32)),
              ("bz", np.zeros(19, np.int8)), ("ys", np.float32(0.3)), ("yz", np.uint8(100))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "a", TensorProto.UINT8, list(a.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.UINT8, [2, 5, 19])],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    ref = ort_session(model).run(None, {"a": a})[0]
    np.testing.assert_array_equal(_mlcc_run(model, {"a": a}, tmp_path)["y"], ref)


def test_fixed_requant_within_one_step_of_exact():
    rng = np.random.default_rng(2)
    acc = rng.integers(-2**20, 2**20, 20000).astype(np.int64)
    real = rng.uniform(1e-5, 0.9, 20000)
    m0, sh = fixed_multipliers(real)
    got = requantize_fixed(acc, m0, sh, QParams(1.0, 0, -2**31, 2**31 - 1, "int64"))
    exact = np.floor(acc * real + 0.5)
    assert np.max(np.abs(got - exact)) <= 1


# ------------------------------------------------------------------ calibration data

SPEC = {"input": ("float32", (1, 1, 8, 8))}


def _iterate(path):
    return list(CalibrationSet(path, SPEC))


def test_readers_npz_folder_and_python(tmp_path):
    x = np.random.default_rng(0).random((5, 1, 1, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "a.npz", input=x)
    assert len(_iterate(tmp_path / "a.npz")) == 5
    np.savez(tmp_path / "b.npz", input=x[:, 0])                   # [samples, 1, 8, 8]
    assert len(_iterate(tmp_path / "b.npz")) == 5
    folder = tmp_path / "f"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"{i}.npy", x[i])
    got = _iterate(folder)
    assert len(got) == 3 and np.array_equal(got[2]["input"], x[2])
    (tmp_path / "gen.py").write_text(
        "import numpy as np\n"
        "def calibration_data():\n"
        "    for i in range(4):\n"
        "        yield {'input': np.full((1, 1, 8, 8), i, np.float32)}\n")
    got = _iterate(tmp_path / "gen.py")
    assert [float(s["input"].max()) for s in got] == [0, 1, 2, 3]


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_memory_does_not_grow_with_samples(tmp_path, compressed):
    """An .npz of the calibration set is read one sample at a time from the zip member's
    stream, stored or deflated: the peak of Python allocations stays near one sample (16 KiB
    here) for a 16 MiB file, and the samples are the file's, in order."""
    import tracemalloc
    spec = {"input": ("float32", (1, 1, 64, 64))}
    x = np.random.default_rng(0).random((1024, 1, 1, 64, 64), dtype=np.float32)
    path = tmp_path / "big.npz"
    (np.savez_compressed if compressed else np.savez)(path, input=x)
    del x
    tracemalloc.start()
    try:
        n, checksum = 0, 0.0
        for i, sample in enumerate(CalibrationSet(path, spec)):
            assert sample["input"].shape == (1, 1, 64, 64)
            checksum += float(sample["input"][0, 0, i % 64, i % 64])
            n += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    x = np.load(path)["input"]
    assert n == 1024 and checksum == pytest.approx(
        sum(float(x[i, 0, 0, i % 64, i % 64]) for i in range(1024)))
    assert peak < 1 << 20, f"peak {peak} bytes while reading a {x.nbytes}-byte set"


def test_npz_truncated_or_with_objects_is_a_clear_error(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, input=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="Python objects"):
        _iterate(path)
    path = tmp_path / "cut.npz"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InputError, match="cannot read calibration data"):
        _iterate(path)
    # a flipped byte in the samples (0.5 stays finite whatever byte flips): the zip member's
    # CRC fails once streaming reaches its end, still a clear error
    np.savez(path, input=np.full((40, 1, 1, 8, 8), 0.5, np.float32))
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"cut.npz: array 'input.npy': cannot read sample"):
        _iterate(path)


@pytest.mark.parametrize("arrays,message", [
    ({"pixels": np.zeros((2, 1, 8, 8), np.float32)}, "has no array for input(s) 'input'"),
    ({"input": np.zeros((2, 1, 9, 8), np.float32)}, "must have shape [1, 1, 8, 8]"),
    ({"input": np.zeros((2, 1, 8, 8), np.int32)}, "must be float32, got int32"),
    ({"input": np.zeros((0, 1, 8, 8), np.float32)}, "is empty"),
    ({"input": np.full((2, 1, 8, 8), np.nan, np.float32)}, "NaN or Inf"),
])
def test_bad_calibration_data_is_a_clear_error(tmp_path, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(InputError, match=None) as exc:
        _iterate(path)
    assert message in exc.value.message


def test_bad_calibration_data_exits_1_from_the_cli(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, input=np.full((3, 1, 8, 8), np.inf, np.float32))
    r = CliRunner().invoke(main, ["compile", str(DIGITS), "-o", str(tmp_path / "o"),
                                  "--quantize", "int8", "--calibration", str(bad)])
    assert r.exit_code == 1
    assert "NaN or Inf" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["compile", str(DIGITS), "-o", str(tmp_path / "o"),
                                  "--quantize", "int8"])
    assert r.exit_code == 1 and "needs --calibration" in r.output   # not a QDQ model
    r = CliRunner().invoke(main, ["compile", str(DIGITS), "-o", str(tmp_path / "o"),
                                  "--quantize", "int8", "--calibration",
                                  str(tmp_path / "missing.npz")])
    assert r.exit_code == 1 and "does not exist" in r.output


# ------------------------------------------------------------------ rewrite and end to end

def _argmax_agreement(folder, model, x):
    m = mlcc.load(folder)
    sess = ort_session(str(model))
    name = sess.get_inputs()[0].name
    same = 0
    for xi in x:
        got = list(m.run({name: xi[None]}).values())[0]
        ref = sess.run(None, {name: xi[None]})[0]
        same += int(np.argmax(got) == np.argmax(ref))
    return same / len(x)


def test_report_range_of_a_value_without_its_own_range():
    """An average pool's output keeps its input's parameters and has no calibrated range of
    its own: the report printed [nan, nan] for it."""
    import math
    from mlcc.quant.report import ErrorStats, LayerRow, range_text
    qp = QParams(0.5, 10)
    own = LayerRow("a", "n", "QConv", ErrorStats(), -1.0, 2.0, qp)
    inherited = LayerRow("b", "n", "QAvgPool", ErrorStats(), math.nan, math.nan, qp)
    float_out = LayerRow("c", "n", "QFC", ErrorStats(), math.nan, math.nan, None)
    assert range_text(own) == "[-1, 2]"
    assert range_text(inherited) == "[-5, 122.5] (input's)"
    assert range_text(float_out) == "float"


@pytest.mark.parametrize("requant", ["float", "fixed"])
def test_example_digits_int8_agrees_with_float(tmp_path, requant):
    with np.load(DIGITS_DATA) as d:
        x = d["input"].astype(np.float32)
    calib = tmp_path / "calib.npz"
    np.savez(calib, input=x[:, None])
    report = tmp_path / "report.md"
    res = api.compile(DIGITS, tmp_path / "q", target="x86", quantize=api.QuantizeConfig(
        calib, calibrator="entropy", requant=requant, report=report,
        export_qdq=tmp_path / "qdq.onnx"))
    q = res.manifest["quantization"]
    assert q["integer_layers"] == 7 and q["float_layers"] == [] and q["requant"] == requant
    assert _argmax_agreement(tmp_path / "q", DIGITS, x) >= 0.95
    text = (tmp_path / "q" / "model.c").read_text()
    assert "mlcc_u8_conv2d(" in text and "x_scale=" in text and "y_zp=" in text
    assert "mlcc_f32_conv2d" not in text                # no float convolution left
    rep = report.read_text()
    assert "## Layers, most damaging first" in rep and "| logits |" in rep
    assert res.manifest["weights_size"] < 0.3 * DIGITS.stat().st_size
    # the exported QDQ model runs the same quantization in onnxruntime
    exported = onnx.load(str(tmp_path / "qdq.onnx"))
    onnx.checker.check_model(exported)
    ops = [n.op_type for n in exported.graph.node]
    assert ops.count("QuantizeLinear") >= 5    # activations; + one DQ per weight (5 layers)
    assert ops.count("DequantizeLinear") == ops.count("QuantizeLinear") + 5
    sess = ort_session(str(tmp_path / "qdq.onnx"))
    m = mlcc.load(tmp_path / "q")
    for xi in x[:8]:
        a = sess.run(None, {"input": xi[None]})[0]
        b = m.run({"input": xi[None]})["logits"]
        if requant == "float":      # onnxruntime's arithmetic: equal up to the last float Gemm
            np.testing.assert_allclose(a, b, atol=1e-4 * np.abs(a).max())
        assert np.argmax(a) == np.argmax(b)
    if requant == "fixed":
        _sanitized_run_matches(tmp_path / "q", res.manifest["name"], x[0][None], m)


def _sanitized_run_matches(folder: Path, prefix: str, x: np.ndarray, loaded) -> None:
    """The int8 program built with -march=native (the VNNI path where the CPU has it), strict
    warnings, ASan and UBSan, run by the generic harness: clean and the same output."""
    sources = ["model.c"] + [str(p.relative_to(folder)) for p in
                             sorted((folder / "runtime").rglob("*.c"))]
    exe = folder / "harness_asan"
    subprocess.run(["gcc", "-std=c99", "-O1", "-g", *native_vector_flags(), "-Wall", "-Wextra",
                    "-Werror", "-pedantic", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=all", f"-DMLCC_MODEL={prefix}",
                    "-I.", "-Iruntime/include", "-Iruntime/kernels", "harness.c", *sources,
                    "-o", str(exe), "-lm"], cwd=folder, check=True)
    x.astype("<f4").tofile(folder / "in.bin")
    proc = subprocess.run([str(exe), "weights.bin", "in.bin", "out.bin"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(folder / "out.bin", dtype="<f4")
    np.testing.assert_array_equal(got, loaded.run({"input": x})["logits"].ravel())


@pytest.mark.parametrize("calibrator", ["auto", "entropy"])
def test_digits_int8_accuracy_within_half_a_point(tmp_path, calibrator):
    with np.load(DIGITS.parent / "digits_test.npz") as d:
        x, labels = d["input"].astype(np.float32), d["label"]
    api.compile(DIGITS, tmp_path / "q", target="x86-native",
                quantize=api.QuantizeConfig(DIGITS.parent / "digits_calib.npz",
                                            calibrator=calibrator))
    m = mlcc.load(tmp_path / "q")
    sess = ort_session(str(DIGITS))
    acc_q = np.mean([np.argmax(m.run({"input": xi[None]})["logits"]) == y
                     for xi, y in zip(x, labels)])
    acc_f = np.mean([np.argmax(sess.run(None, {"input": xi[None]})[0]) == y
                     for xi, y in zip(x, labels)])
    assert acc_q >= acc_f - 0.005, (acc_q, acc_f)


def test_operators_without_integer_kernels_run_in_float(tmp_path):
    """Conv -> Sigmoid (a table on the conv's uint8 pre-activation codes) -> Conv+Relu ->
    MaxPool -> Add(residual) -> Softmax (float): integer where possible, Q/DQ exactly at the
    crossings."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (6, 6, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.3, (6, 6, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s1"]),
             helper.make_node("Conv", ["s1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p2", "w3"], ["c3"]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Add", ["r3", "p2"], ["a"]),
             helper.make_node("Softmax", ["a"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 10, 14])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 6, 5, 7])],
        [numpy_helper.from_array(w, n) for n, w in (("w1", w1), ("w2", w2), ("w3", w3))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    calib = tmp_path / "c.npz"
    np.savez(calib, x=rng.normal(0, 1, (16, 1, 3, 10, 14)).astype(np.float32))
    out = api.verify_quantized(path, api.QuantizeConfig(calib), inputs=calib, min_sqnr=25.0,
                               output_dir=tmp_path / "q")
    assert out.ok, out.outputs
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    assert manifest["quantization"]["integer_layers"] == 6
    assert len(manifest["quantization"]["float_layers"]) == 1      # the Softmax
    calls = _kernel_calls(tmp_path / "q")
    assert calls == ["mlcc_f32_quantize", "mlcc_u8_conv2d",     # Conv
                     "mlcc_u8_lut", "mlcc_u8_conv2d",              # Sigmoid, Conv+Relu
                     "mlcc_u8_maxpool2d", "mlcc_u8_conv2d", "mlcc_u8_add",
                     "mlcc_u8_dequantize", "mlcc_f32_softmax"]


def test_qdq_model_from_onnxruntime_runs_on_integer_kernels_bit_exact(tmp_path):
    """A model quantized by onnxruntime.quantization.quantize_static (QDQ, per-channel) compiles
    without calibration onto the same integer kernels, using its own int8 weights and scales,
    and matches onnxruntime's own int8 run bit for bit."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    rng = np.random.default_rng(0)
    arrays = {"w1": rng.normal(0, 0.3, (8, 3, 3, 3)), "b1": rng.normal(0, 0.1, 8),
              "w2": rng.normal(0, 0.2, (16, 8, 3, 3)), "b2": rng.normal(0, 0.1, 16),
              "wf": rng.normal(0, 0.1, (16 * 4 * 5, 10)), "bf": rng.normal(0, 0.1, 10)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "f.onnx"))
    samples = [rng.normal(0, 1, (1, 3, 8, 10)).astype(np.float32) for _ in range(16)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {"x": x}

    quantize_static(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    res = api.compile(tmp_path / "q.onnx", tmp_path / "out", target="x86-native",
                      quantize=api.QuantizeConfig())
    q = res.manifest["quantization"]
    assert q["qdq_import"] and q["integer_layers"] == 5
    calls = (tmp_path / "out" / "model.c").read_text()
    assert calls.count("mlcc_u8_conv2d(") == 2 and "mlcc_u8_fc(" in calls
    lib = mlcc.load(tmp_path / "out")
    sess = ort_session(str(tmp_path / "q.onnx"))
    for _ in range(10):
        x = rng.normal(0, 1, (1, 3, 8, 10)).astype(np.float32)
        np.testing.assert_array_equal(lib.run({"x": x})["y"], sess.run(None, {"x": x})[0])


def test_target_yaml_int8_settings():
    from mlcc.errors import TargetError
    from mlcc.targets import load_target, parse_target
    base = "name: t\narch: x86_64\ntoolchain: {cc: gcc}\n"
    t = parse_target(base + "int8: {activations: uint8, requant: fixed}\n")
    assert (t.int8_activations, t.int8_requant) == ("uint8", "fixed")
    assert load_target("x86-native").int8_requant == "float"
    for bad in ("int8: {requant: exact}\n", "int8: {activations: int4}\n", "int8: {bits: 8}\n"):
        with pytest.raises(TargetError, match="int8"):
            parse_target(base + bad)


@pytest.mark.parametrize("op", ["ConvInteger", "MatMulInteger"])
def test_integer_ops_match_onnxruntime(tmp_path, op):
    rng = np.random.default_rng(11)
    if op == "ConvInteger":
        x = rng.integers(0, 256, (1, 6, 9, 7)).astype(np.uint8)
        w = rng.integers(-127, 128, (6, 3, 3, 2)).astype(np.int8)
        node = helper.make_node(op, ["x", "w", "xz"], ["y"], pads=[1, 0, 1, 1], group=2,
                                strides=[2, 1])
        out_shape = [1, 6, 5, 7]
    else:
        x = rng.integers(0, 256, (3, 4, 29)).astype(np.uint8)
        w = rng.integers(-127, 128, (29, 11)).astype(np.int8)
        node = helper.make_node(op, ["x", "w", "xz"], ["y"])
        out_shape = [3, 4, 11]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.UINT8, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.INT32, out_shape)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(77), "xz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    ref = ort_session(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(_mlcc_run(model, {"x": x}, tmp_path)["y"], ref)


def test_matmul_with_fused_bias_keeps_its_bias(tmp_path):
    """MatMul + constant Add (a transformer projection): fuse_matmul_bias moves the bias into
    the MatMul, and the integer layer must add it (it once dropped it)."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.3, (7, 11)).astype(np.float32)
    b = rng.normal(2.0, 1.0, (11,)).astype(np.float32)        # large next to x @ w
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 5, 7])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 5, 11])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    calib = tmp_path / "c.npz"
    np.savez(calib, x=rng.normal(0, 1, (16, 1, 5, 7)).astype(np.float32))
    out = api.verify_quantized(path, api.QuantizeConfig(calib), inputs=calib, min_sqnr=30.0,
                               output_dir=tmp_path / "q")
    assert out.ok, out.outputs
    assert "mlcc_u8_fc(" in (tmp_path / "q" / "model.c").read_text()


def _layernorm_two_matmuls(tmp_path, rng, k: int, outlier: float = 1.0):
    """x [1, 7, k] -> LayerNormalization n (its last channel's gamma times `outlier`) ->
    MatMul by w1 [k, 5] and by w2 [k, 3], and n + x: the optimized graph, w1, w2 and the
    model's path."""
    from mlcc.frontend import import_model
    from mlcc.passes import run_pipeline

    gamma = rng.normal(1, 0.2, k).astype(np.float32)
    gamma[-1] *= outlier
    w1 = rng.normal(0, 0.3, (k, 5)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (k, 3)).astype(np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w1"], ["y1"]),
             helper.make_node("MatMul", ["n", "w2"], ["y2"]),
             helper.make_node("Add", ["n", "x"], ["y3"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 7, k])], [helper.make_tensor_value_info(o, TensorProto.FLOAT,
                                                                            [1, 7, d])
                                          for o, d in (("y1", 5), ("y2", 3), ("y3", k))],
        [numpy_helper.from_array(a, n) for n, a in (("gamma", gamma), ("w1", w1), ("w2", w2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    return run_pipeline(import_model(tmp_path / "m.onnx")), w1, w2, tmp_path / "m.onnx"


def test_smooth_moves_channel_ranges_into_the_weights(tmp_path):
    """SmoothQuant's rewrite: x -> x * (1/s) read by both MatMuls (the Add still reads x), the
    weights' rows multiplied by s, the function unchanged, and x/s's range derived from x's
    per-channel ranges (channel k's range divided by s_k)."""
    from mlcc.quant.observers import Range
    from mlcc.quant.smooth import smooth, smoothable

    rng = np.random.default_rng(7)
    k = 11
    g, w1, w2, _ = _layernorm_two_matmuls(tmp_path, rng, k)
    assert smoothable(g) == ["n"]
    lo = -np.abs(rng.normal(0, 1, k)) * np.array([1] * 10 + [40])     # one outlier channel
    hi = np.abs(rng.normal(0, 1, k)) * np.array([1] * 10 + [40])
    ranges = {"n": Range(lo.min(), hi.max(), lo.min(), hi.max(), 0.0, lo, hi)}
    sg, sranges, done = smooth(g, ranges, 0.5)
    assert done == ["n"]
    mul = next(n for n in sg.nodes if n.op_type == "Mul")
    inv = sg.const(mul.inputs[1])
    xs = mul.outputs[0]
    readers = [n for n in sg.nodes if n.op_type == "MatMul"]
    assert all(n.inputs[0] == xs for n in readers)
    assert next(n for n in sg.nodes if n.op_type == "Add").inputs[0] == "n"
    x = rng.normal(0, 1, (7, k)).astype(np.float32) * (hi - lo).astype(np.float32)
    for n, w in zip(readers, (w1, w2)):
        ws = sg.const(n.inputs[1])
        np.testing.assert_allclose((x * inv) @ ws, x @ w, rtol=1e-4, atol=1e-4)
    s = 1 / inv.astype(np.float64)
    amax = np.maximum(-lo, hi)
    wmax = np.maximum(np.abs(w1).max(axis=1), np.abs(w2).max(axis=1))
    np.testing.assert_allclose(s, np.sqrt(amax) / np.sqrt(wmax), rtol=1e-6)
    assert sranges[xs].lo == pytest.approx((lo * inv).min())
    assert sranges[xs].hi == pytest.approx((hi * inv).max())
    # the outlier channel no longer dominates: the range shrinks relative to typical channels
    assert (hi * inv).max() / np.median(hi * inv) < hi.max() / np.median(hi)


def test_smooth_auto_chooses_the_alpha_of_least_held_out_product_error(tmp_path):
    """--smooth auto: each candidate's score is the error of the integer products of the graph
    smooth() writes for that alpha (x * (1/s) at its derived range, the smoothed weights
    quantized per column; "none": x at the calibrator's range, the original weights), with
    the ranges calibrated on the even samples and the error measured on the odd ones, and the
    other way round; the smallest wins. With one outlier channel 40x the others, smoothing
    wins by a wide margin."""
    from mlcc.quant.observers import Calibrator
    from mlcc.quant.smooth import ALPHAS, _product_error, choose_alphas, smooth

    rng = np.random.default_rng(11)
    k = 11
    g, w1, w2, _ = _layernorm_two_matmuls(tmp_path, rng, k)
    parts = [rng.normal(0, 1, (16, k)).astype(np.float32) for _ in range(6)]
    for x in parts:                 # a systematic outlier channel, as in LayerNorm outputs
        x[:, -1] = x[:, -1] * 5 + 40

    def calibrated(x):
        cal = Calibrator("auto", channels=frozenset({"n"}))
        cal.observe(0, {"n": x})
        cal.observe(1, {"n": x})
        return cal.ranges()

    alphas, scores = choose_alphas(g, calibrated(np.concatenate(parts)), {"n": parts})
    even, odd = np.concatenate(parts[0::2]), np.concatenate(parts[1::2])
    want: dict = {}
    for fit, held in ((even, odd), (odd, even)):
        ranges = calibrated(fit)
        refs = [held.astype(np.float64) @ w for w in (w1, w2)]
        got = {"none": _product_error(held, ranges["n"].lo, ranges["n"].hi, [w1, w2], refs,
                                      True)}
        for a in ALPHAS:
            sg, sranges, _ = smooth(g, ranges, a)
            mul = next(n for n in sg.nodes if n.op_type == "Mul")
            xs = mul.outputs[0]
            got[f"{a:g}"] = _product_error(
                held * sg.const(mul.inputs[1]), sranges[xs].lo, sranges[xs].hi,
                [sg.const(n.inputs[1]) for n in sg.nodes if n.op_type == "MatMul"], refs, True)
        want = {c: want.get(c, 0.0) + e for c, e in got.items()}
    assert scores["n"] == pytest.approx(want, rel=1e-5)
    best = min(want, key=want.get)
    assert best != "none" and alphas == {"n": float(best)}
    assert want[best] < want["none"] / 1.5
    # only the values given: smooth() with {value: alpha} leaves the others alone
    assert smooth(g, calibrated(even), {})[2] == []
    assert smooth(g, calibrated(even), alphas)[2] == ["n"]


def test_smooth_option_auto_off_and_alpha(tmp_path):
    """The default (auto) records the alphas chosen in the manifest; --smooth off and an
    alpha from the CLI; a bad value is a one-line error with exit code 2 (click's usage
    error), not a traceback."""
    rng = np.random.default_rng(5)
    _, _, _, path = _layernorm_two_matmuls(tmp_path, rng, 11, outlier=30.0)
    calib = tmp_path / "c.npz"
    np.savez(calib, x=rng.normal(0, 1, (12, 1, 7, 11)).astype(np.float32))
    res = api.compile(path, tmp_path / "auto", target="x86-native",
                      quantize=api.QuantizeConfig(calib))
    q = res.manifest["quantization"]
    assert q["smooth_alpha"] == "auto" and set(q["smooth_alphas"]) == {"n"}
    base = ["compile", str(path), "--quantize", "int8", "--calibration", str(calib)]
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "off"), "--smooth", "off"])
    assert r.exit_code == 0, r.output
    assert "smooth_alpha" not in json.loads((tmp_path / "off" / "manifest.json").read_text())[
        "quantization"]
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "a"), "--smooth", "0.5"])
    assert r.exit_code == 0 and "smoothed (alpha 0.5)" in r.output, r.output
    for bad in ("2", "sometimes"):
        r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "b"), "--smooth", bad])
        assert r.exit_code == 2 and "is not auto, off or a number in [0, 1]" in r.output
        assert "Traceback" not in r.output
    with pytest.raises(InputError, match="smooth must be"):
        api.compile(path, tmp_path / "c", target="x86-native",
                    quantize=api.QuantizeConfig(calib, smooth=1.5))


def test_matmul_writes_float_where_its_uint8_form_would_only_be_dequantized(tmp_path):
    """MatMul -> Reshape -> Softmax (float) writes float (no uint8 round trip and no
    DequantizeLinear), while MatMul -> Relu -> MatMul still hands uint8 to the next integer
    MatMul; an Add with a float input leaves its MatMul input in float too."""
    from mlcc.frontend import import_model
    from mlcc.passes import run_pipeline
    from mlcc.quant import observed_values, quantize_graph
    from mlcc.quant.observers import Range

    rng = np.random.default_rng(2)
    w = {n: rng.normal(0, 0.3, (6, 6)).astype(np.float32) for n in ("w1", "w2", "w3")}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["b"]),
             helper.make_node("Reshape", ["b", "shape"], ["br"]),
             helper.make_node("Softmax", ["br"], ["y"], axis=-1),
             helper.make_node("MatMul", ["r", "w3"], ["c"]),
             helper.make_node("Exp", ["x"], ["sx"]),        # no integer form
             helper.make_node("Add", ["c", "sx"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 12]), helper.make_tensor_value_info(
            "z", TensorProto.FLOAT, [4, 6])],
        [numpy_helper.from_array(a, n) for n, a in w.items()]
        + [numpy_helper.from_array(np.array([2, 12], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    g = run_pipeline(import_model(tmp_path / "m.onnx"))
    ranges = {v: Range(-1.0, 1.0, -1.0, 1.0, 0.0) for v in observed_values(g)}
    qg = quantize_graph(g, ranges).graph
    out_kind = {n.name: n.attr("rq")[0] for n in qg.nodes if n.op_type == "QFC"}
    assert len(out_kind) == 3
    first = next(n for n in qg.nodes if n.op_type == "QFC")
    assert out_kind[first.name] == "uint8"
    assert sorted(out_kind.values()) == ["float32", "float32", "uint8"]
    assert not any(n.op_type == "DequantizeLinear" for n in qg.nodes)


def test_activations_run_as_tables_on_preactivation_codes(tmp_path):
    """Conv -> SiLU (Mul(x, Sigmoid(x))) -> Conv -> HardSwish -> Mul(c) -> Add(c) -> Conv+Relu:
    each activation is taken out of its convolution again, the convolution writes uint8 at the
    calibrated pre-activation scale (HardSwish's codes start at -3, below which it is 0) and
    the activation runs as one table on the codes, the scalar affine after it composed into
    the same table. A channel whose weights are negligible next to its bias (1e-30 against
    3.0) gets a weight scale its int32 bias fits (it overflowed before)."""
    rng = np.random.default_rng(7)
    w1 = rng.normal(0, 0.4, (5, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (7, 5, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.3, (4, 7, 1, 1)).astype(np.float32)
    w3[2] = 1e-30
    b3 = np.array([0.1, -0.2, 3.0, 0.0], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s1"]),
             helper.make_node("Mul", ["c1", "s1"], ["m1"]),
             helper.make_node("Conv", ["m1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("HardSwish", ["c2"], ["h2"]),
             helper.make_node("Mul", ["h2", "k"], ["a2"]),
             helper.make_node("Add", ["a2", "d"], ["e2"]),
             helper.make_node("Conv", ["e2", "w3", "b3"], ["c3"]),
             helper.make_node("Relu", ["c3"], ["y"])]
    consts = {"w1": w1, "w2": w2, "w3": w3, "b3": b3, "k": np.array(1.7, np.float32),
              "d": np.array(-0.2, np.float32)}
    path = _save_model(tmp_path, nodes, [1, 3, 11, 13], {"y": [1, 4, 6, 7]}, consts)
    res = _compile_int8(path, tmp_path / "q", _calibration(tmp_path, rng, 24, [1, 3, 11, 13]))
    calls = _kernel_calls(tmp_path / "q")
    assert calls == ["mlcc_f32_quantize", "mlcc_u8_conv2d", "mlcc_u8_lut",
                     "mlcc_u8_conv2d", "mlcc_u8_lut", "mlcc_u8_conv2d"]   # float out
    luts = [n for n in res.graph.nodes if n.op_type == "QLut"]
    assert [n.attr("act") for n in luts] == ["Swish", "HardSwish+Mul+Add"]
    scale, zp = luts[1].attr("x")
    assert -zp * scale >= -3.0 - scale             # the codes start at HardSwish's knee
    xs = rng.normal(0, 1, (8, 1, 3, 11, 13)).astype(np.float32)
    sqnr, got = _sqnr_vs_onnxruntime(path, tmp_path / "q", xs)
    assert sqnr > 30, sqnr
    # the dead channel: relu(3.0) everywhere, to the output's step
    y_step = float(np.ptp(got)) / 255
    np.testing.assert_allclose(got[:, 0, 2], 3.0, atol=y_step)


def test_split_and_concat_stay_integer(tmp_path):
    """YOLOv8's C2f block: Conv+Relu -> Split -> one part through Conv+Relu -> Concat of the
    parts and that output -> Conv. The Split moves uint8 data; the convolution read only by
    the Concat writes at the Concat's scale (no requantization for it); the Split parts, at
    their input's scale, are requantized into it."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.4, (6, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.4, (3, 3, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.3, (5, 9, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Split", ["r1", "sizes"], ["p0", "p1"], axis=1),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Concat", ["p0", "p1", "r2"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"])]
    consts = {"w1": w1, "w2": w2, "w3": w3, "sizes": np.array([3, 3], np.int64)}
    path = _save_model(tmp_path, nodes, [1, 3, 9, 11], {"y": [1, 5, 9, 11]}, consts)
    res = _compile_int8(path, tmp_path / "q", _calibration(tmp_path, rng, 16, [1, 3, 9, 11]))
    assert res.manifest["quantization"]["float_layers"] == []
    calls = _kernel_calls(tmp_path / "q")
    assert calls[0] == "mlcc_f32_quantize" and calls[-1] == "mlcc_u8_conv2d"
    assert not any(c.startswith("mlcc_f32") or "dequantize" in c for c in calls[1:])
    assert calls.count("mlcc_u8_requantize") <= 2                  # the two Split parts
    q = res.quant
    assert q.qparams["r2"] == q.qparams["cat"] and q.qparams["p0"] == q.qparams["r1"]
    xs = rng.normal(0, 1, (6, 1, 3, 9, 11)).astype(np.float32)
    assert _sqnr_vs_onnxruntime(path, tmp_path / "q", xs)[0] > 30


def test_conv_transpose_with_stride_equal_to_kernel_runs_as_integer_conv(tmp_path):
    """PP-OCR det's upsampling head: ConvTranspose k2 s2 (+bias, Relu) and k3 s3 (no bias,
    Sigmoid) become a 1x1 QConv to out_channels * k * k and a DepthToSpace on uint8; one with
    padding (overlap trimmed) stays a float ConvTranspose."""
    rng = np.random.default_rng(5)
    w0 = rng.normal(0, 0.4, (5, 3, 3, 3)).astype(np.float32)
    w1 = rng.normal(0, 0.4, (5, 3, 2, 2)).astype(np.float32)
    w2 = rng.normal(0, 0.4, (3, 2, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.4, (2, 2, 2, 2)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("ConvTranspose", ["r0", "w1", "b1"], ["t1"], strides=[2, 2]),
             helper.make_node("Relu", ["t1"], ["r1"]),
             helper.make_node("ConvTranspose", ["r1", "w2"], ["t2"], strides=[3, 3],
                              kernel_shape=[3, 3]),
             helper.make_node("Sigmoid", ["t2"], ["s2"]),
             helper.make_node("ConvTranspose", ["s2", "w3"], ["y"], strides=[2, 2],
                              pads=[1, 1, 1, 1])]
    consts = {"w0": w0, "w1": w1, "w2": w2, "w3": w3,
              "b1": rng.normal(0, 0.3, 3).astype(np.float32)}
    path = _save_model(tmp_path, nodes, [1, 3, 7, 5], {"y": [1, 2, 40, 28]}, consts)
    res = _compile_int8(path, tmp_path / "q", _calibration(tmp_path, rng, 16, [1, 3, 7, 5]))
    calls = _kernel_calls(tmp_path / "q")
    assert calls.count("mlcc_f32_conv_transpose2d") == 1 and calls.count("mlcc_u8_conv2d") == 3
    assert [n.op_type for n in res.quant.graph.nodes].count("DepthToSpace") == 2
    xs = rng.normal(0, 1, (6, 1, 3, 7, 5)).astype(np.float32)
    assert _sqnr_vs_onnxruntime(path, tmp_path / "q", xs)[0] > 30


def test_resize_nearest_moves_uint8_and_linear_stays_float(tmp_path):
    """An FPN's upsampling (PP-OCR det): Resize nearest of a uint8 value is data movement at
    its input's scale, read by an integer Add; a linear Resize (blends) stays float."""
    rng = np.random.default_rng(7)
    w0 = rng.normal(0, 0.4, (4, 3, 3, 3)).astype(np.float32)
    w1 = rng.normal(0, 0.4, (4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Resize", ["r0", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["up", "c1"], ["s"]),
             helper.make_node("Resize", ["s", "", "scales"], ["y"], mode="linear")]
    consts = {"w0": w0, "w1": w1, "scales": np.array([1, 1, 2, 2], np.float32)}
    path = _save_model(tmp_path, nodes, [1, 3, 10, 14], {"y": [1, 4, 20, 28]}, consts)
    res = _compile_int8(path, tmp_path / "q", _calibration(tmp_path, rng, 16, [1, 3, 10, 14]))
    calls = _kernel_calls(tmp_path / "q")
    assert calls[:5] == ["mlcc_f32_quantize", "mlcc_u8_conv2d", "mlcc_resize_nearest",
                         "mlcc_u8_conv2d", "mlcc_u8_add"]
    assert calls[5:] == ["mlcc_u8_dequantize", "mlcc_f32_resize_linear"]
    assert res.quant.qparams["up"] == res.quant.qparams["r0"]
    xs = rng.normal(0, 1, (6, 1, 3, 10, 14)).astype(np.float32)
    assert _sqnr_vs_onnxruntime(path, tmp_path / "q", xs)[0] > 30


@pytest.mark.parametrize("fused_add", [True, False])
def test_squeeze_excitation_product_runs_on_uint8(tmp_path, fused_add):
    """PP-OCR det's squeeze-excitation: x * hardsigmoid(conv(pool(x))) (a per-channel scale of
    a run-time tensor) and the Add x + x * s after it run as one QChannelScale on x's codes
    (x * (s + 1)), so the Add and what reads it (Resize nearest, Add) stay integer; without
    the Add, x * s alone."""
    rng = np.random.default_rng(11)
    w0 = rng.normal(0, 0.4, (5, 3, 3, 3)).astype(np.float32)
    w1 = rng.normal(0, 0.4, (5, 5, 1, 1)).astype(np.float32)
    w2 = rng.normal(0, 0.4, (4, 5, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c0"], ["p"]),
             helper.make_node("Conv", ["p", "w1"], ["c1"]),
             helper.make_node("HardSigmoid", ["c1"], ["s"], alpha=0.2, beta=0.5),
             helper.make_node("Mul", ["c0", "s"], ["m"])]
    if fused_add:
        nodes.append(helper.make_node("Add", ["c0", "m"], ["a"]))
    nodes += [helper.make_node("Resize", ["a" if fused_add else "m", "", "scales"], ["up"],
                               mode="nearest"),
              helper.make_node("Conv", ["up", "w2"], ["y"], pads=[1, 1, 1, 1])]
    consts = {"w0": w0, "w1": w1, "w2": w2, "scales": np.array([1, 1, 2, 2], np.float32)}
    path = _save_model(tmp_path, nodes, [1, 3, 7, 9], {"y": [1, 4, 14, 18]}, consts)
    res = _compile_int8(path, tmp_path / "q", _calibration(tmp_path, rng, 16, [1, 3, 7, 9]))
    calls = _kernel_calls(tmp_path / "q")
    assert calls == ["mlcc_f32_quantize", "mlcc_u8_conv2d", "mlcc_u8_avgpool2d",
                     "mlcc_u8_conv2d",                    # Conv + HardSigmoid, float out
                     "mlcc_u8_channel_scale", "mlcc_resize_nearest", "mlcc_u8_conv2d"]
    plans = {p.node: p for p in res.quant.layers}
    assert all(p.integer for p in plans.values())
    assert res.quant.qparams["up"] == res.quant.qparams["a" if fused_add else "m"]
    xs = rng.normal(0, 1, (6, 1, 3, 7, 9)).astype(np.float32)
    assert _sqnr_vs_onnxruntime(path, tmp_path / "q", xs)[0] > 30


def test_entropy_is_not_fooled_by_spikes_of_repeated_values():
    """PP-OCR rec's degenerate case: a convolution over constant padding writes one value per
    channel over the whole padded area, so its histogram is mostly ~40 spikes. TensorRT's KL
    search (zero bin flattened only) then clipped 20% of the values (the int8 program read no
    text line); with the spikes flattened it clips almost none."""
    rng = np.random.default_rng(5)
    consts = rng.normal(0, 1.5, 40).astype(np.float32)          # per-channel padding values
    padding = np.repeat(consts[:, None], 20000, axis=1).ravel()
    text = rng.normal(0, 4, 40000).astype(np.float32)
    x = np.concatenate([padding, text])
    h = HistogramObserver(float(np.abs(x).max()))
    h.update(x)
    cand, kl = kl_divergences(flatten_zero_bin(h.abs_hist()), 128)
    t_old = cand[int(np.argmin(kl))] * h.width
    assert np.mean(np.abs(x) > t_old) > 0.1                    # the defect, reproduced
    cal = Calibrator("entropy")
    for p in range(cal.passes):
        for chunk in np.array_split(x, 8):
            cal.observe(p, {"t": chunk})
    r = cal.ranges()["t"]
    assert r.clipped < 0.001 and r.hi > 10.0
    assert np.all((consts >= r.lo) & (consts <= r.hi))       # every padding value kept
    # a spike is capped at its neighbourhood, not removed; ordinary bins are left alone
    f = flatten_spikes(h.abs_hist())
    assert np.all(f <= h.abs_hist()) and np.all(f > 0) == np.all(h.abs_hist() > 0)
    smooth, _ = np.histogram(np.abs(rng.normal(0, 1, 100000)), bins=2048)
    np.testing.assert_array_equal(flatten_spikes(smooth), smooth)


def test_int8_threads_give_bit_identical_outputs(tmp_path):
    """The integer convolutions (im2col, direct and depthwise) and the fully connected product
    split their rows and channels between threads: the same bytes on 1, 2 and 3 threads (layers
    large enough to pass MLCC_MIN_PARALLEL_INT8_MACS)."""
    rng = np.random.default_rng(5)
    consts = {"w1": rng.normal(0, 0.3, (32, 3, 3, 3)), "w2": rng.normal(0, 0.1, (48, 32, 3, 3)),
              "w3": rng.normal(0, 0.3, (48, 1, 3, 3)), "w4": rng.normal(0, 0.1, (64, 48, 3, 3)),
              "shape": np.array([1, 64, 256]), "w5": rng.normal(0, 0.1, (256, 384))}
    consts = {k: v.astype(np.int64 if k == "shape" else np.float32) for k, v in consts.items()}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2"], ["b"], pads=[1, 1, 1, 1]),     # direct
             helper.make_node("Relu", ["b"], ["b1"]),
             helper.make_node("Conv", ["b1", "w3"], ["c"], pads=[1, 1, 1, 1], group=48,
                              strides=[2, 2]),                                    # depthwise
             helper.make_node("Conv", ["c", "w4"], ["d"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),                                    # im2col
             helper.make_node("Reshape", ["d", "shape"], ["e"]),
             helper.make_node("MatMul", ["e", "w5"], ["y"])]                      # fc
    path = _save_model(tmp_path, nodes, [1, 3, 64, 61], {"y": [1, 64, 384]}, consts)
    calib = _calibration(tmp_path, rng, 4, [1, 3, 64, 61])
    _compile_int8(path, tmp_path / "q", calib)
    calls = _kernel_calls(tmp_path / "q")
    assert {"mlcc_u8_conv2d", "mlcc_u8_conv2d__depthwise", "mlcc_u8_fc"} <= set(calls), calls
    x = rng.normal(0, 1, (1, 3, 64, 61)).astype(np.float32)
    outs = [mlcc.load(tmp_path / "q", threads=t).run({"x": x})["y"] for t in (1, 2, 3)]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


def test_calibration_running_ahead_observes_the_same_samples_in_the_same_order():
    """calibrate() runs the next sample while it observes this one (ahead=True, the default),
    or one sample at a time: each sample is run once per pass, in order, one run at a time,
    and the ranges are the same bits either way (auto: two passes, histograms)."""
    from mlcc.quant import calibrate
    rng = np.random.default_rng(7)
    data = [{"x": rng.normal(0, 1 + i, (3, 17)).astype(np.float32)} for i in range(9)]
    results = {}
    for ahead in (True, False):
        seen, running = [], []

        def run(s):
            running.append(1)
            assert len(running) == 1                 # never two runs at once
            seen.append(float(s["x"][0, 0]))
            out = {"y": np.maximum(s["x"], 0) * 3, "z": np.tanh(s["x"])}
            running.pop()
            return out
        ranges = calibrate(data, run, ["x", "y", "z"], ahead=ahead)
        assert seen == [float(s["x"][0, 0]) for s in data] * 2
        results[ahead] = {n: (r.lo, r.hi) for n, r in ranges.items()}
    assert results[True] == results[False]
