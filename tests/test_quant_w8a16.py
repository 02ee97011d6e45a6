"""W8A16 layers in the int8 rewrite (mlcc/quant/rules.py quantize_w8a16, rewrite.py
fuse_output_quantize): int16 inputs, int8 weights, the float epilogue, and the boundaries to
int8 and float neighbours; against a float model with the same int8 weights (the only error
left is the int16 rounding of the activations), against the int8 program, and the option's
errors."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from test_quant import _calibration, _save_model

from mlcc import api
from mlcc.errors import InputError
from mlcc.frontend import import_model
from mlcc.passes import INT8_PIPELINE, run_pipeline
from mlcc.quant import (QuantOptions, calibrate, conv_transpose_as_conv, needed_ranges,
                        quantize_graph, split_table_activations)
from mlcc.quant import fakequant, sensitivity
from mlcc.quant.calib import CalibrationSet

SHAPE = (1, 3, 11, 13)


def _cnn(tmp_path, rng):
    """3x3 Conv+Relu, strided 3x3 Conv+HardSwish (a table activation), depthwise 3x3,
    global pooling, Gemm; 12 calibration samples."""
    consts = {"w1": rng.normal(0, 0.5, (5, 3, 3, 3)), "b1": rng.normal(0, 0.1, 5),
              "w2": rng.normal(0, 0.3, (7, 5, 3, 3)), "wd": rng.normal(0, 0.4, (7, 1, 3, 3)),
              "bd": rng.normal(0, 0.1, 7), "wg": rng.normal(0, 0.4, (7, 5))}
    consts = {k: v.astype(np.float32) for k, v in consts.items()}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("HardSwish", ["c2"], ["h2"]),
             helper.make_node("Conv", ["h2", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=7),
             helper.make_node("GlobalAveragePool", ["d"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wg"], ["y"])]
    path = _save_model(tmp_path, nodes, list(SHAPE), {"y": [1, 5]}, consts)
    return path, _calibration(tmp_path, rng, 12, SHAPE)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The optimized graph, its calibrated ranges, the samples and onnxruntime's outputs."""
    tmp = tmp_path_factory.mktemp("w8a16")
    rng = np.random.default_rng(5)
    path, calib = _cnn(tmp, rng)
    g = split_table_activations(conv_transpose_as_conv(
        run_pipeline(import_model(path), INT8_PIPELINE)))
    producers = sorted(n.name for n in g.nodes if n.op_type in ("Conv", "Gemm"))
    opts = QuantOptions(w8a16=frozenset(producers))
    names = sorted(set(needed_ranges(g, opts)) | set(needed_ranges(g, QuantOptions())))
    data = CalibrationSet(calib, {"x": ("float32", SHAPE)})
    ranges = calibrate(data, api.float_runner(g, tmp / "float", names), names)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    samples = list(data)
    refs = [{"y": sess.run(None, s)[0]} for s in samples]
    int8 = _run(tmp, "i8", quantize_graph(g, ranges, QuantOptions()), samples)
    return tmp, path, calib, g, ranges, producers, samples, refs, \
        sensitivity.output_sqnr(refs, int8)


def _run(tmp, name, res, samples):
    run = api._host_runner(res.graph, tmp / name, name)
    return [{"y": run(s)["y"]} for s in samples]


def _same_weights_float(path, g, res, samples):
    """onnxruntime's outputs of the model with each layer's weights replaced by the
    rewrite's int8 weights, dequantized (the optimized graph's weights are the model's
    initializers here: nothing to fold)."""
    model = onnx.load(str(path))
    by_name = {n.name: n for n in g.nodes}
    deq = {by_name[name].inputs[1]: fakequant.graph_layout_weights(g, by_name[name], wq, ws)
           for name, (wq, ws) in res.weights.items()}
    for init in model.graph.initializer:
        if init.name in deq:
            init.CopyFrom(numpy_helper.from_array(deq.pop(init.name), init.name))
    assert not deq
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [{"y": sess.run(None, s)[0]} for s in samples]


def test_all_w8a16_is_float_with_int8_weights_up_to_int16_rounding(setup):
    """Every Conv and the Gemm at W8A16: the program equals the float model run with the
    same int8 weights (dequantized) to >= 60 dB (the int16 activations' rounding: 1/32767
    of each range), and beats the int8 program against float by >= 5 dB (here 41 against 33: the int8
    weights' error stays). A W8A16 layer read
    only by another writes int16 itself (the QuantizeLinear fused into its epilogue); the
    HardSwish table goes back into its epilogue."""
    tmp, path, _, g, ranges, producers, samples, refs, db8 = setup
    res = quantize_graph(g, ranges, QuantOptions(w8a16=frozenset(producers)))
    ops = [n.op_type for n in res.graph.nodes]
    assert ops.count("QConv16") == 3 and ops.count("QFC16") == 1 and "QConv" not in ops
    assert {lp.node for lp in res.layers if lp.precision == "w8a16"} == set(producers)
    kinds = {n.name: n.attr("out")[0] for n in res.graph.nodes if n.op_type == "QConv16"}
    assert sorted(kinds.values()) == ["float32", "int16", "int16"], kinds
    q16 = [n for n in res.graph.nodes if n.op_type == "QuantizeLinear"]
    assert len(q16) == 2        # the model input and the Flatten output (after float pooling)
    assert any("HardSwish" in f for n in res.graph.nodes for f in n.fused)
    got = _run(tmp, "w16", res, samples)
    assert sensitivity.output_sqnr(_same_weights_float(path, g, res, samples), got) > 60
    db16 = sensitivity.output_sqnr(refs, got)
    assert db16 > db8 + 5, (db16, db8)


def test_one_w8a16_layer_between_int8_layers(setup):
    """The strided Conv alone at W8A16: the int8 Conv before it writes float (its uint8
    form would only be dequantized), the W8A16 layer writes the uint8 codes the int8
    depthwise Conv after it reads (QuantizeLinear fused); about as accurate as all int8
    (this layer is not where the int8 program's error is)."""
    tmp, _, _, g, ranges, producers, samples, refs, db8 = setup
    mid = next(n.name for n in g.nodes if n.op_type == "Conv" and
               list(n.attr("strides", [1, 1])) == [2, 2])
    res = quantize_graph(g, ranges, QuantOptions(w8a16=frozenset([mid])))
    node = next(n for n in res.graph.nodes if n.op_type == "QConv16")
    assert node.name == mid and node.attr("out")[0] == "uint8"
    first = next(n for n in res.graph.nodes if n.op_type == "QConv")
    assert first.attr("rq")[0] == "float32"
    assert [lp.precision for lp in res.layers if lp.node == mid] == ["w8a16"]
    got = _run(tmp, "mid16", res, samples)
    assert sensitivity.output_sqnr(refs, got) > db8 - 2


def test_option_manifest_and_errors(setup):
    """--w8a16 through api.compile: the manifest lists the W8A16 layers, model.c calls the
    int16 kernels; a pattern that matches nothing and a layer named by both --w8a16 and
    --keep-float are one-line errors."""
    tmp, path, calib, *_ = setup
    res = api.compile(path, tmp / "api", target="x86-native",
                      quantize=api.QuantizeConfig(calib, w8a16=("op:Conv",), auto_mix=False))
    q = json.loads((tmp / "api" / "manifest.json").read_text())["quantization"]
    assert len(q["w8a16_layers"]) == 3 and res.quant is not None
    text = (tmp / "api" / "model.c").read_text()
    assert "mlcc_s16_conv2d(" in text and "mlcc_f32_quantize_int16(" in text
    with pytest.raises(InputError, match="--w8a16: nothing"):
        api.compile(path, tmp / "e1", target="x86-native", build=False,
                    quantize=api.QuantizeConfig(calib, w8a16=("nothing",), auto_mix=False))
    with pytest.raises(InputError, match="both name"):
        api.compile(path, tmp / "e2", target="x86-native", build=False,
                    quantize=api.QuantizeConfig(calib, w8a16=("op:Conv",),
                                                keep_float=("op:Conv",), auto_mix=False))


def test_fake_quant_simulates_int16_activations(setup):
    """The fake-quant program built with the all-W8A16 plan has an int16 switch per value a
    W8A16 layer reads: off, the float model; that plan's switches on, the real all-W8A16
    program to within 0.5 dB of its error against float (and far closer to it than either
    is to float)."""
    tmp, _, _, g, ranges, producers, samples, refs, _ = setup
    all16 = quantize_graph(g, ranges, QuantOptions(w8a16=frozenset(producers)))
    fq = fakequant.build(g, quantize_graph(g, ranges, QuantOptions()), all16)
    assert {k[3:] for k in fq.slots if k.startswith("16:")} == set(all16.q16) == {"x", "f",
                                                                                  "r1", "h2"}
    run_sim = api._host_runner(fq.graph, tmp / "sim16", "sim16")
    on, off = fq.plan(all16), fq.control((), ())
    assert on[[fq.slots["16:" + v] for v in all16.q16]].all() and not off.any()
    sims = []
    for s, ref in zip(samples, refs):
        np.testing.assert_allclose(run_sim({**s, fakequant.CONTROL: off})[fq.outputs["y"]],
                                   ref["y"], rtol=1e-4, atol=1e-5)
        sims.append({"y": run_sim({**s, fakequant.CONTROL: on})[fq.outputs["y"]]})
    real = _run(tmp, "w16b", all16, samples)
    sim_db, real_db = sensitivity.output_sqnr(refs, sims), sensitivity.output_sqnr(refs, real)
    assert abs(sim_db - real_db) < 0.5 and sensitivity.output_sqnr(real, sims) > real_db + 10, \
        (sim_db, real_db)


@pytest.mark.usefixtures("avx512_prices")
def test_default_mix_tries_w8a16_before_float(tmp_path, monkeypatch):
    """Where the target's cost table prices W8A16 below float (here: free), the default
    mix moves each sensitive layer to W8A16 before float: on test_quant_mixed's CNN with
    one channel 30x the others (`A` writes it, `B` reads it), the most sensitive layer's
    first move is to W8A16, the built mix (W8A16 layers, and float where W8A16 was not
    enough) meets the default 30 dB against onnxruntime, and the manifest, the compile
    output and the report give each layer's precision and the moves' estimated costs."""
    from test_quant import _sqnr_vs_onnxruntime
    from test_quant_mixed import default_mix_outlier

    from mlcc.quant import latency
    t = latency.TABLES["x86_64-avx512"]
    # W8A16 kernels, the int16 conversions and the calls priced free (in this tiny model a
    # kernel call's fixed cost outweighs the MACs): cheaper than float everywhere
    monkeypatch.setitem(latency.TABLES, "x86_64-avx512", replace(
        t, w16_mac=0.0, w16_dw_mac=0.0, w16_out=0.0, quantize_elem=0.0, call=0.0))
    path, _, xs, report, r, q = default_mix_outlier(tmp_path, factor=30)
    mp = q["mixed_precision"]
    assert mp["auto"] and mp["met"] and set(mp["order"][:2]) == {"A", "B"}
    # the Convs offered (not the Gemm: its input, a Flatten of the pooled codes, has no
    # range of its own); the most sensitive layer's first move is to W8A16, the cheaper
    assert set(mp["w8a16_offered"]) == {"A", "B", "C0", "C1"}
    assert mp["affordable_w8a16"][0] == mp["order"][0]
    assert mp["move_cost"]["w8a16"]["A"] < mp["move_cost"]["float"]["A"]
    assert mp["w8a16"] and sorted(q["w8a16_layers"]) == sorted(mp["w8a16"])
    assert not set(mp["w8a16"]) & set(mp["kept"])
    assert f", {len(mp['w8a16'])} at W8A16" in r.output
    text = report.read_text()
    row = text.split(f"| `{mp['w8a16'][0]}` |")[-1].split("\n")[0]
    assert "| W8A16 |" in row, row
    assert _sqnr_vs_onnxruntime(path, tmp_path / "mix", xs)[0] >= 30
