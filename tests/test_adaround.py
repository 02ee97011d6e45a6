"""--adaround (learned weight rounding) and --bias-correction auto (mlcc/quant/adaround.py):
the input rows against the convolution they feed, the coordinate descent against nearest
rounding on odd shapes, SmoothQuant's rescaling of the statistics, `auto` never raising a
layer's held-out error, the int8 program's error with and without, determinism, and bad
option values."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import helper

import mlcc
from mlcc import api
from mlcc.cli import main
from mlcc.errors import InputError
from mlcc.frontend import import_model
from mlcc.ir import Node, Value
from mlcc.passes import INT8_PIPELINE, run_pipeline
from mlcc.quant import adaround
from mlcc.quant.scheme import WMAX, fit_bias, quantize_weights
from util import make_model


def _graph(tmp_path, model):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return run_pipeline(import_model(path), INT8_PIPELINE), path


def _ort(path, x):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("shape,w_shape,attrs", [
    ((2, 6, 9, 11), (9, 2, 3, 2), dict(group=3, strides=[2, 1], pads=[1, 0, 2, 1],
                                       dilations=[1, 2])),
    ((1, 7, 5, 7), (7, 1, 3, 3), dict(group=7, strides=[1, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 13), (4, 3, 3), dict(strides=[2], pads=[1, 2], dilations=[2])),
])
def test_rows_are_the_receptive_fields_the_convolution_reads(tmp_path, shape, w_shape, attrs):
    """Each observed row, times the weights of its group, is the Conv's output at that
    position (strides, dilations, asymmetric pads, groups, depthwise, 1-D)."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, shape).astype(np.float32)
    w = rng.normal(0, 1, w_shape).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    g, path = _graph(tmp_path, make_model([node], {"x": x}, ["y"], initializers={"w": w}))
    n = next(n for n in g.nodes if n.op_type == "Conv")
    site = adaround._site(g, n)
    y = _ort(path, x)
    rows = adaround._rows(site, x, np.random.default_rng(1))
    groups = site.groups
    assert rows.shape == (int(np.prod(y.shape)) // y.shape[1], groups, site.k)
    wg = w.reshape(groups, w.shape[0] // groups, -1)
    got = np.einsum("rgk,gmk->rgm", rows.astype(np.float64), wg).reshape(len(rows), -1)
    want = np.moveaxis(y, 1, -1).reshape(-1, y.shape[1])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _correlated(rng, rows, mix):
    """Rows with correlated features (the same mixing matrix for fit and held-out rows)."""
    return rng.normal(0, 1, (rows, len(mix))) @ mix + 0.3


@pytest.mark.parametrize("groups,m,k", [(1, 13, 37), (3, 5, 9), (7, 1, 25)])
def test_learned_rounding_lowers_the_output_error_on_held_out_rows(groups, m, k):
    rng = np.random.default_rng(groups)
    w = rng.normal(0, 1, (groups, m, k)) * rng.uniform(0.5, 2, (groups, m, 1))
    s = np.abs(w).max(axis=2) / WMAX * 8          # coarse steps: rounding matters
    mixes = [rng.normal(0, 1, (k, k)) / np.sqrt(k) + np.eye(k) for _ in range(groups)]
    fit = np.stack([_correlated(rng, 4000, mix) for mix in mixes])
    held = np.stack([_correlated(rng, 4000, mix) for mix in mixes])
    g_fit = np.matmul(fit.transpose(0, 2, 1), fit) / 4000
    g_held = np.matmul(held.transpose(0, 2, 1), held) / 4000
    q = adaround.learned_rounding(w, s, g_fit)
    z = w / s[..., None]
    near = np.clip(np.rint(z), -WMAX, WMAX)
    assert np.all((q == np.floor(z)) | (q == np.ceil(z))) and np.abs(q).max() <= WMAX
    assert np.any(q != near)

    def err(qq, gram):
        return adaround._quadratic(adaround._errors(w, s, qq), gram)
    assert np.all(err(q, g_fit) <= err(near, g_fit) + 1e-12)       # every channel
    assert err(q, g_held).sum() < 0.8 * err(near, g_held).sum()     # measurably lower
    # the quadratic form is the mean square of the rows' output error
    direct = np.mean(np.einsum("grk,gmk->grm", held, adaround._errors(w, s, q)) ** 2, axis=1)
    np.testing.assert_allclose(err(q, g_held), direct, rtol=1e-9)


def test_statistics_follow_a_per_channel_mul_put_before_the_matmul(tmp_path):
    """SmoothQuant's x * (1/s) before a MatMul, added after calibration: the statistics are
    those of the rescaled input, as if it had been observed."""
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (1, 5, 11)).astype(np.float32)
    w = rng.normal(0, 1, (11, 7)).astype(np.float32)
    g, _ = _graph(tmp_path, make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                                       {"x": x}, ["y"], initializers={"w": w}))
    stats = adaround.RoundingStats(g)
    xs = [rng.normal(0, 1, x.shape).astype(np.float32) for _ in range(4)]
    for i, xi in enumerate(xs):
        stats.observe({"x": xi}, i)
    inv = rng.uniform(0.2, 3, 11).astype(np.float32)
    n = next(n for n in g.nodes if n.op_type == "MatMul")
    g.values["xs"] = Value("xs", "float32", x.shape)
    g.nodes.insert(0, Node("x/Smooth", "Mul", ["x", g.add_const("inv", inv)], ["xs"], {}, "",
                           14))
    n.inputs[0] = "xs"
    halves, why = stats.statistics(g, n)
    assert why == ""
    for parity in (0, 1):
        rows = np.concatenate([xi.reshape(-1, 11) * inv for xi in xs[parity::2]]).astype(
            np.float64)
        np.testing.assert_allclose(halves[parity].second_moment()[0], rows.T @ rows /
                                   len(rows), rtol=1e-5)
        np.testing.assert_allclose(halves[parity].mean()[0], rows.mean(axis=0), rtol=1e-5)


def test_fit_bias_keeps_the_learned_rounding_of_the_channels_it_does_not_grow():
    rng = np.random.default_rng(4)
    w = rng.normal(0, 1, (4, 6)).astype(np.float32)
    w[2] *= 1e-30                                 # negligible next to its bias
    q, s = quantize_weights(w)
    learned = q.copy()
    learned[0, 0] += 1 if learned[0, 0] < WMAX else -1
    q2, s2 = fit_bias(w, learned, s, np.array([0, 0, 5.0, 0], np.float32), 0.01)
    assert s2[2] > s[2] and np.array_equal(np.delete(q2, 2, 0), np.delete(learned, 2, 0))


def _two_layer_model(rng):
    """Conv (stride 2, 3 groups, odd sizes) -> Relu -> Conv -> Flatten -> Gemm, with
    per-channel weight ranges far apart (per tensor, the small channels round coarsely)."""
    init = {"w1": (rng.normal(0, 0.4, (9, 2, 3, 3)) *
                   10 ** rng.uniform(-1, 0, (9, 1, 1, 1))).astype(np.float32),
            "b1": rng.normal(0, 0.2, 9).astype(np.float32),
            "w2": (rng.normal(0, 0.3, (5, 9, 3, 1)) *
                   10 ** rng.uniform(-1, 0, (5, 1, 1, 1))).astype(np.float32),
            "wg": rng.normal(0, 0.2, (5 * 4 * 5, 7)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="c1", group=3,
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["c"], name="c2", pads=[0, 0, 0, 0]),
             helper.make_node("Flatten", ["c"], ["f"]),
             helper.make_node("Gemm", ["f", "wg"], ["y"], name="fc")]
    x = rng.normal(0, 1, (1, 6, 11, 9)).astype(np.float32)
    return make_model(nodes, {"x": x}, ["y"], initializers=init)


def _calibration(tmp_path, rng, count, name="calib"):
    base = np.random.default_rng(99).normal(0, 1, (1, 1, 6, 11, 9))    # shared structure
    xs = (base + 0.7 * rng.normal(0, 1, (count, 1, 6, 11, 9))).astype(np.float32)
    path = tmp_path / f"{name}{count}.npz"
    np.savez(path, x=xs)
    return path, xs


def test_auto_never_raises_a_layers_held_out_error_and_is_deterministic(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "two.onnx"
    onnx.save(_two_layer_model(rng), str(path))
    calib, _ = _calibration(tmp_path, rng, 16)
    runs = {}
    for name, ada, bc in (("auto", "auto", "auto"), ("again", "auto", "auto"),
                          ("on", "on", "off"), ("off", "off", "off")):
        runs[name] = api.compile(path, tmp_path / name, target="x86", build=False,
                                 quantize=api.QuantizeConfig(calib, per_channel=False,
                                                             adaround=ada,
                                                             bias_correction=bc))
    rounding = runs["auto"].manifest["quantization"]["rounding"]
    layers = rounding["layers"]
    assert sorted(layers) == ["c1", "c2", "fc"] and not rounding["skipped"]
    for name, c in layers.items():
        assert c["held_final"] <= c["held_nearest"], name
    assert sum(c["learned"] for c in layers.values()) > 0
    assert sum(c["held_final"] for c in layers.values()) < \
        0.9 * sum(c["held_nearest"] for c in layers.values())
    on = runs["on"].manifest["quantization"]["rounding"]["layers"]
    assert all(c["learned"] == c["channels"] and c["corrected"] == 0 for c in on.values())
    assert "rounding" not in runs["off"].manifest["quantization"]
    # the rewrite's int8 weights are the learned ones: within one step of nearest
    for node, (wq, ws) in runs["auto"].quant.weights.items():
        near = runs["off"].quant.weights[node][0]
        assert np.abs(wq.astype(int) - near).max() <= 1
        assert np.array_equal(ws, runs["off"].quant.weights[node][1])
    assert any(not np.array_equal(runs["auto"].quant.weights[k][0], v[0])
               for k, v in runs["off"].quant.weights.items())
    files = sorted(str(p.relative_to(tmp_path / "auto"))
                   for p in (tmp_path / "auto").rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(tmp_path / "again"))
                           for p in (tmp_path / "again").rglob("*") if p.is_file())
    assert "weights.bin" in files
    for f in files:
        assert (tmp_path / "auto" / f).read_bytes() == (tmp_path / "again" / f).read_bytes(), f


def test_learned_rounding_lowers_the_int8_programs_error(tmp_path):
    """End to end on held-out inputs: the int8 program with --adaround auto (per-tensor
    weights, where rounding errs most) is closer to onnxruntime's float output than
    without."""
    rng = np.random.default_rng(8)
    path = tmp_path / "two.onnx"
    onnx.save(_two_layer_model(rng), str(path))
    calib, _ = _calibration(tmp_path, rng, 24)
    _, test = _calibration(tmp_path, np.random.default_rng(9), 8, "test")
    err = {}
    for mode in ("off", "auto"):
        api.compile(path, tmp_path / mode, target="x86-native",
                    quantize=api.QuantizeConfig(calib, per_channel=False, adaround=mode))
        m = mlcc.load(tmp_path / mode)
        err[mode] = np.mean([(m.run({"x": x})["y"] - _ort(path, x)) ** 2 for x in test])
    assert err["auto"] < 0.9 * err["off"], err


def test_bad_option_values_are_one_line_errors(tmp_path):
    rng = np.random.default_rng(10)
    path = tmp_path / "two.onnx"
    onnx.save(_two_layer_model(rng), str(path))
    calib, _ = _calibration(tmp_path, rng, 4)
    for field, value in (("adaround", "maybe"), ("bias_correction", "sometimes"),
                         ("adaround", 1)):
        with pytest.raises(InputError, match=f"{field} must be auto, on or off"):
            api.compile(path, tmp_path / "x", target="x86", build=False,
                        quantize=api.QuantizeConfig(calib, **{field: value}))
    base = ["compile", str(path), "--target", "x86", "--no-build", "-o", str(tmp_path / "c")]
    for flag in ("--adaround", "--bias-correction"):
        r = CliRunner().invoke(main, base + ["--quantize", "int8", "--calibration", str(calib),
                                             flag, "maybe"])
        assert r.exit_code == 2 and "Invalid value" in r.output and "Traceback" not in r.output
        r = CliRunner().invoke(main, base + [flag, "on"])
        assert r.exit_code == 1 and "need --quantize int8" in r.output
    r = CliRunner().invoke(main, base + ["--quantize", "int8", "--calibration", str(calib),
                                         "--adaround", "auto", "--bias-correction", "auto"])
    assert r.exit_code == 0, r.output
    assert "adaround auto: learned rounding in" in r.output
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    q = manifest["quantization"]
    assert q["rounding"]["adaround"] == "auto" and q["rounding"]["bias_correction"] == "auto"
    assert "--bias-correction auto --adaround auto" in manifest["command"]
