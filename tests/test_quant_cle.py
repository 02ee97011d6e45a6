"""--equalize (cross-layer equalization) and --bias-correction: the equalized float model
against onnxruntime on the original, the equalized ranges, which pairs are skipped, the bias
correction's arithmetic and its effect on an int8 output biased by weight rounding, the
options from the command line, the report and determinism."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import mlcc
from mlcc import api
from mlcc.cli import main
from mlcc.errors import InputError
from mlcc.frontend import import_model
from mlcc.ir import Node
from mlcc.passes import INT8_PIPELINE, run_pipeline
from mlcc.quant.bias_correction import ChannelMeans, correction
from mlcc.quant.equalize import _in_ranges, _out_ranges, equalize
from mlcc.quant.scheme import quantize_weights
from util import make_model


def _conv_w(rng, m, c, k, spread=2.0):
    """Conv weights whose output channels' ranges differ by up to 10^spread either way."""
    w = rng.normal(0, 0.3, (m, c, k, k)) * 10 ** rng.uniform(-spread, spread, (m, 1, 1, 1))
    return w.astype(np.float32)


def _chain(rng, kind: str) -> tuple[onnx.ModelProto, dict]:
    """Small models: conv -> act -> conv (-> ...) in the shapes CLE must handle or skip."""
    x = rng.normal(0, 1, (1, 6, 11, 13)).astype(np.float32)
    init, nodes = {}, []

    def conv(name, inp, out, m, c, k, group=1, pad=1, in_spread=0.0):
        init[f"{name}.w"] = _conv_w(rng, m, c // group, k) * 10 ** rng.uniform(
            -in_spread, in_spread, (1, c // group, 1, 1)).astype(np.float32)
        init[f"{name}.b"] = rng.normal(0, 0.5, m).astype(np.float32)
        nodes.append(helper.make_node("Conv", [inp, f"{name}.w", f"{name}.b"], [out], name=name,
                                      group=group, pads=[pad] * 4, kernel_shape=[k, k]))

    outs = ["y"]
    if kind == "relu":                # Conv -> Relu -> Conv
        conv("c1", "x", "a", 10, 6, 3)
        nodes.append(helper.make_node("Relu", ["a"], ["r"]))
        conv("c2", "r", "y", 7, 10, 3, in_spread=2.0)
    elif kind == "depthwise":         # MobileNet block: 1x1 -> Relu -> dw 3x3 -> Relu -> 1x1,
        conv("c1", "x", "a", 12, 6, 1, pad=0)      # then a grouped conv (3 groups)
        nodes.append(helper.make_node("Relu", ["a"], ["r"]))
        conv("dw", "r", "d", 12, 12, 3, group=12)
        nodes.append(helper.make_node("LeakyRelu", ["d"], ["dr"], alpha=0.1))
        conv("c2", "dr", "p", 9, 12, 1, pad=0)
        conv("c3", "p", "y", 6, 9, 3, group=3)
    elif kind == "pool":              # pooling in between commutes with the scaling
        conv("c1", "x", "a", 10, 6, 3)
        nodes.append(helper.make_node("Relu", ["a"], ["r"]))
        nodes.append(helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2],
                                      strides=[2, 2]))
        nodes.append(helper.make_node("AveragePool", ["mp"], ["ap"], kernel_shape=[3, 3],
                                      pads=[1, 1, 1, 1]))
        conv("c2", "ap", "y", 7, 10, 3)
    elif kind == "branch":            # the intermediate read twice: skipped
        conv("c1", "x", "a", 10, 6, 3)
        nodes.append(helper.make_node("Relu", ["a"], ["r"]))
        conv("c2", "r", "y", 7, 10, 3)
        conv("c3", "r", "z", 5, 10, 1, pad=0)
        outs.append("z")
    elif kind == "relu6":             # Clip(0, 6): not positively homogeneous
        init["lo"], init["hi"] = np.array(0, np.float32), np.array(6, np.float32)
        conv("c1", "x", "a", 10, 6, 3)
        nodes.append(helper.make_node("Clip", ["a", "lo", "hi"], ["r"]))
        conv("c2", "r", "y", 7, 10, 3)
    return make_model(nodes, {"x": x}, outs, initializers=init), {"x": x}


def _float_graph(model: onnx.ModelProto, tmp_path: Path):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return run_pipeline(import_model(path), INT8_PIPELINE)


def _with_weights(model: onnx.ModelProto, g, relu6_replaced=()) -> onnx.ModelProto:
    """The ONNX model with the IR's (equalized) Conv weights and biases, and Relu for the
    Clips after the Convs in relu6_replaced."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    by_name = {n.name: n for n in g.nodes}
    inits = {t.name: t for t in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "Conv":
            n = by_name[node.name]
            for i in (1, 2):
                inits[node.input[i]].CopyFrom(numpy_helper.from_array(g.const(n.inputs[i]),
                                                                      node.input[i]))
    outs = {node.output[0]: node.name for node in m.graph.node if node.op_type == "Conv"}
    for node in m.graph.node:
        if node.op_type == "Clip" and outs.get(node.input[0]) in relu6_replaced:
            node.op_type = "Relu"
            del node.input[1:]
    return m


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("kind, pairs", [
    ("relu", [("c1", "c2")]),
    ("depthwise", [("c1", "dw"), ("dw", "c2"), ("c2", "c3")]),
    ("pool", [("c1", "c2")]),
    ("branch", []),
    ("relu6", []),
])
def test_equalize_keeps_the_float_function_and_equalizes_ranges(tmp_path, kind, pairs):
    model, feeds = _chain(np.random.default_rng(7), kind)
    g = _float_graph(model, tmp_path)
    res = equalize(g)
    assert res.pairs == pairs
    if kind == "branch":
        assert res.skipped == [("c1", "c2", "the intermediate has 2 readers")]
    if kind == "relu6":
        assert res.skipped == [("c1", "c2", "activation CLIP(0, 6) is not positively "
                                            "homogeneous")]
    # the float function, against onnxruntime on the original model
    ref = _run(model, feeds)
    got = _run(_with_weights(model, res.graph), feeds)
    for r, o in zip(ref, got):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * np.abs(r).max())
    # the paper's fixed point: both sides of every pair have the same per-channel ranges
    by_name = {n.name: n for n in res.graph.nodes}
    for a, b in pairs:
        w1 = res.graph.const(by_name[a].inputs[1])
        w2 = res.graph.const(by_name[b].inputs[1])
        np.testing.assert_allclose(_out_ranges(w1), _in_ranges(w2, by_name[b].attr("group", 1)),
                                   rtol=1e-3)
    if kind == "relu":  # one pair: the paper's objective sum_i p1_i p2_i (p = channel
        # range / tensor range; the precision per-tensor weights keep) is at its maximum
        def objective(graph):
            n = {x.name: x for x in graph.nodes}
            r1 = _out_ranges(graph.const(n["c1"].inputs[1]))
            r2 = _in_ranges(graph.const(n["c2"].inputs[1]), 1)
            return float(np.sum(r1 / r1.max() * r2 / r2.max()))
        assert objective(res.graph) > 1.5 * objective(g)


def test_equalize_relu6_replaces_the_clip_by_relu(tmp_path):
    model, feeds = _chain(np.random.default_rng(3), "relu6")
    res = equalize(_float_graph(model, tmp_path), relu6=True)
    assert res.pairs == [("c1", "c2")] and res.relu6_replaced == ["c1"]
    act = next(n for n in res.graph.nodes if n.name == "c1").attrs["_act"]
    assert act[0] == "RELU"
    # the same function as the model with Relu in place of the Clip
    relu_model = _with_weights(model, _float_graph(model, tmp_path), ["c1"])
    ref = _run(relu_model, feeds)
    got = _run(_with_weights(model, res.graph, ["c1"]), feeds)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-4 * np.abs(ref[0]).max())


def test_channel_means_stream_and_correction_matches_a_grouped_conv():
    rng = np.random.default_rng(0)
    xs = rng.normal(2, 1, (9, 1, 6, 5, 7)).astype(np.float32)
    cm = ChannelMeans({"x": 1})
    for x in xs:
        cm.observe({"x": x})
        assert cm.sums["x"].shape == (6,)            # one sum per channel, whatever the count
    np.testing.assert_allclose(cm.means()["x"], xs.mean(axis=(0, 1, 3, 4)), rtol=1e-6)
    # (W - Wq) E[x] equals the grouped conv of the weight error over an input that is each
    # channel's mean everywhere (3 groups, 6 input and 9 output channels, 3x3 taps)
    node = onnx.helper.make_node("Conv", ["x", "w"], ["y"], group=3)
    n = Node("c", "Conv", ["x", "w"], ["y"], {"group": 3}, "", 11)
    w = rng.normal(0, 1, (9, 2, 3, 3)).astype(np.float32)
    wq, ws = quantize_weights(w, per_channel=False)
    mean = cm.means()["x"]
    err = w - wq * ws[:, None, None, None]
    plane = np.broadcast_to(mean.reshape(1, 6, 1, 1), (1, 6, 3, 3)).astype(np.float32)
    model = make_model([node], {"x": plane}, ["y"], initializers={"w": err})
    want = _run(model, {"x": plane})[0].reshape(9)
    np.testing.assert_allclose(correction(n, w, wq, ws, mean), want, rtol=1e-4, atol=1e-6)


def test_bias_correction_moves_the_int8_mean_to_the_float_mean(tmp_path):
    """A 1x1 Conv whose weights all sit 0.4 of a quantization step above the int8 grid (each
    row's largest weight fixes the step at 1/127 of it), on inputs with mean 4: rounding
    lowers every output by about 63 * 0.4 * step * 4, which the correction must remove."""
    rng = np.random.default_rng(1)
    m, c = 8, 64
    step = rng.uniform(0.001, 0.003, m)
    k = rng.integers(-100, 100, (m, c)).astype(np.float64) + 0.4
    k[:, 0] = 127
    w = (k * step[:, None]).reshape(m, c, 1, 1).astype(np.float32)
    x0 = (4 + rng.normal(0, 1, (1, c, 5, 5))).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    path = tmp_path / "biased.onnx"
    onnx.save(make_model([node], {"x": x0}, ["y"], initializers={"w": w}), str(path))
    calib = tmp_path / "calib.npz"
    xs = (4 + rng.normal(0, 1, (32, 1, c, 5, 5))).astype(np.float32)
    np.savez(calib, x=xs)
    # the rounding's shift of each output channel without correction: -(W - Wq) E[x]
    wq, ws = quantize_weights(w)
    bias_of_rounding = -(w - wq * ws[:, None, None, None]).reshape(m, c) @ \
        xs.mean(axis=(0, 1, 3, 4), dtype=np.float64)
    assert np.all(bias_of_rounding < -0.05)
    # all integer: the default mix may keep a one-layer model's only layer in float (its
    # estimated time budget allows it), and then there is no rounding to correct
    res = api.compile(path, tmp_path / "q", target="x86-native",
                      quantize=api.QuantizeConfig(calib, bias_correction=True, auto_mix=False))
    np.testing.assert_allclose(res.quant.bias_shift["conv"], -bias_of_rounding, rtol=1e-5)
    assert res.manifest["quantization"]["bias_correction"]["layers"] == 1
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    q = mlcc.load(tmp_path / "q")
    err = np.stack([q.run({"x": x})["y"] - sess.run(None, {"x": x})[0] for x in xs[:8]])
    # per output channel, the int8 program's mean error is a small part of the rounding's
    assert np.all(np.abs(err.mean(axis=(0, 1, 3, 4))) < 0.1 * np.abs(bias_of_rounding))


def test_options_from_the_cli_report_and_determinism(tmp_path):
    model, feeds = _chain(np.random.default_rng(5), "depthwise")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    calib = tmp_path / "c.npz"
    np.savez(calib, x=np.random.default_rng(6).normal(0, 1, (8, 1, 6, 11, 13)).astype(
        np.float32))
    base = ["compile", str(path), "--target", "x86", "--no-build", "--quantize", "int8",
            "--calibration", str(calib), "--equalize", "--bias-correction", "--per-tensor"]
    runner = CliRunner()
    r1 = runner.invoke(main, base + ["-o", str(tmp_path / "a"), "--report",
                                     str(tmp_path / "r.md")])
    assert r1.exit_code == 0, r1.output
    r2 = runner.invoke(main, base + ["-o", str(tmp_path / "b")])
    assert r2.exit_code == 0, r2.output
    assert "equalized 3 Conv pairs" in r1.output
    assert "bias correction: 4 layers' biases shifted" in r1.output
    files = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*")
                   if p.is_file())
    assert files == sorted(str(p.relative_to(tmp_path / "b"))
                           for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert "weights.bin" in files and "model.c" in files
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    text = (tmp_path / "r.md").read_text()
    assert "Cross-layer equalization (--equalize) applied: equalized 3 Conv pairs" in text
    assert "- equalized `dw` -> `c2`" in text
    assert "Bias correction (--bias-correction) applied: 4 layers' biases shifted" in text
    q = json.loads((tmp_path / "a" / "manifest.json").read_text())["quantization"]
    assert [tuple(p) for p in q["equalize"]["pairs"]] == [("c1", "dw"), ("dw", "c2"),
                                                          ("c2", "c3")]
    assert sorted(q["bias_correction"]["max_abs_shift"]) == ["c1", "c2", "c3", "dw"]
    # clear errors
    bad = runner.invoke(main, ["compile", str(path), "--equalize", "-o", str(tmp_path / "c")])
    assert bad.exit_code == 1 and "need --quantize int8" in bad.output
    bad = runner.invoke(main, base + ["-o", str(tmp_path / "d"), "--export-qdq",
                                      str(tmp_path / "e.onnx")])
    assert bad.exit_code == 1 and "--export-qdq cannot write --equalize" in bad.output


def test_bad_equalize_value_is_a_clear_error(tmp_path):
    model, _ = _chain(np.random.default_rng(2), "relu")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    calib = tmp_path / "c.npz"
    np.savez(calib, x=np.zeros((2, 1, 6, 11, 13), np.float32))
    with pytest.raises(InputError, match="equalize must be True, False or 'relu6'"):
        api.compile(path, tmp_path / "o", build=False,
                    quantize=api.QuantizeConfig(calib, equalize="relu"))
    assert not (tmp_path / "o").exists()
