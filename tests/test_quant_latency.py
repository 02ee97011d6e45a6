"""The default mix's time estimate (mlcc/quant/latency.py): which targets have a fitted cost
table, and what the table says about a plan's program: integer kernels are cheaper than
float ones, and a high-resolution layer with few channels costs more in float per
multiply-accumulate than a deep one (its element-wise work and its Q/DQ crossings), which
the multiply-accumulate estimate does not see. No C is built: the plans come from
quantize_graph on fixed ranges."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from onnx import helper
from test_quant import _save_model

from mlcc.frontend import import_model
from mlcc.passes import INT8_PIPELINE, run_pipeline
from mlcc.quant import (QuantOptions, Range, conv_transpose_as_conv, needed_ranges,
                        quantize_graph, split_table_activations)
from mlcc.quant import latency, sensitivity
from mlcc.targets import load_target


def _stem_and_deep(tmp_path):
    """S: 3 -> 8 channels, 3x3 at 95 x 97 (27 MACs per output); W: depthwise 3x3 on S's
    output; M: 8 -> 32, 3x3 stride 4;
    D: 32 -> 128, 3x3 stride 4 on 24 x 25 (288 MACs per output); pooling and a Gemm. Fixed
    ranges (the estimate does not depend on them)."""
    rng = np.random.default_rng(0)
    consts = {"ws": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
              "ww": rng.normal(0, 0.3, (8, 1, 3, 3)).astype(np.float32),
              "wm": rng.normal(0, 0.1, (32, 8, 3, 3)).astype(np.float32),
              "wd": rng.normal(0, 0.05, (128, 32, 3, 3)).astype(np.float32),
              "wg": rng.normal(0, 0.1, (128, 10)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "ws"], ["s"], pads=[1, 1, 1, 1], name="S"),
             helper.make_node("Relu", ["s"], ["rs"]),
             helper.make_node("Conv", ["rs", "ww"], ["w"], pads=[1, 1, 1, 1], group=8,
                              name="W"),
             helper.make_node("Relu", ["w"], ["rw"]),
             helper.make_node("Conv", ["rw", "wm"], ["m"], pads=[1, 1, 1, 1], strides=[4, 4],
                              name="M"),
             helper.make_node("Relu", ["m"], ["rm"]),
             helper.make_node("Conv", ["rm", "wd"], ["d"], pads=[1, 1, 1, 1], strides=[4, 4],
                              name="D"),
             helper.make_node("Relu", ["d"], ["rd"]),
             helper.make_node("GlobalAveragePool", ["rd"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wg"], ["y"], name="G")]
    path = _save_model(tmp_path, nodes, [1, 3, 95, 97], {"y": [1, 10]}, consts)
    g = split_table_activations(conv_transpose_as_conv(
        run_pipeline(import_model(path), INT8_PIPELINE)))
    opts = QuantOptions()
    ranges = {v: Range(-2.0, 2.0, -2.0, 2.0, 0.0) for v in needed_ranges(g, opts)}
    allint = quantize_graph(g, ranges, opts)
    cands = sensitivity.candidates(allint.layers)
    assert {"S", "W", "M", "D", "G"} <= set(cands)

    def plan(kept, w16=()):
        return quantize_graph(g, ranges, replace(opts, keep_float=frozenset(kept),
                                                 w8a16=frozenset(w16)))
    macs = {c: sensitivity.macs(g, c) for c in cands}
    return g, allint, cands, macs, plan


@pytest.mark.parametrize("name,fitted", [("x86-avx512", True), ("x86-avx2", False),
                                         ("x86", False), ("arm", False), ("wasm", False),
                                         ("cortex-m4", False)])
def test_only_targets_with_a_fitted_table_use_it(name, fitted):
    assert (latency.table_for(load_target(name)) is not None) == fitted


def test_fitted_estimate_charges_high_resolution_float_layers_more(tmp_path):
    g, allint, cands, macs, plan = _stem_and_deep(tmp_path)
    every = [n.name for n in g.nodes]
    ratio, how = latency.estimator(load_target("x86-avx512"), allint, cands, macs, plan, every)
    assert how.startswith("fitted")
    assert ratio(every) == pytest.approx(1.0)
    base = ratio([])
    assert 0.05 < base < 0.8
    stem, deep = ratio(["S"]) - base, ratio(["D"]) - base
    assert stem > 0 and deep > 0
    # per multiply-accumulate, the few-channel stem's float premium is above the deep
    # layer's (its outputs and its input's crossing; the MAC estimate charges them alike)
    assert stem / macs["S"] > 1.1 * deep / macs["D"], (stem, deep, macs)
    # a float island pays its crossings: the depthwise W alone in float costs its float
    # MACs over its int8 ones plus its dequantized input and quantized output; next to a
    # float S, the crossing between them is gone: less, by at least that crossing's cost
    alone = ratio(["W"]) - base
    together = ratio(["S", "W"]) - ratio(["S"])
    t = latency.table_for(load_target("x86-avx512"))
    full = latency.program_cost(plan(every).graph, t)
    crossings = [n for n in plan(["W"]).graph.nodes
                 if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    between = min(latency.node_cost(plan(["W"]).graph, n, t) for n in crossings) / full
    assert 0 < together < alone - 0.9 * between, (alone, together, between)
    mac_ratio, how = latency.estimator(load_target("arm"), allint, cands, macs, plan, every)
    assert how == "multiply-accumulates"
    assert mac_ratio([]) == pytest.approx(sensitivity.INT8_FLOAT_RATIO)
    assert mac_ratio(["S"]) - mac_ratio([]) == pytest.approx(
        (1 - sensitivity.INT8_FLOAT_RATIO) * macs["S"] / sum(macs.values()))


def test_w8a16_is_priced_and_offered_only_where_cheaper_than_float(tmp_path):
    """A W8A16 layer costs its MACs and outputs at the table's W8A16 rates (dearer than int8,
    and with the int16 conversion of its input); w8a16_cheaper offers it where its kernel is
    estimated below the float kernel, never without a table."""
    g, allint, cands, macs, plan = _stem_and_deep(tmp_path)
    every = [n.name for n in g.nodes]
    table = latency.TABLES["x86_64-avx512"]
    ratio, _ = latency.estimator(load_target("x86-avx512"), allint, cands, macs, plan, every)
    base = ratio([])
    assert ratio([], ["D"]) > base and ratio([], ["D", "M"]) > ratio([], ["D"])
    pg = plan([], ["D"]).graph
    d16 = next(n for n in pg.nodes if n.name == "D")
    assert d16.op_type == "QConv16"
    assert latency.macs(pg, d16) == latency.macs(g, next(n for n in g.nodes if n.name == "D"))
    cheap = replace(table, w16_mac=table.float_mac / 2, w16_dw_mac=table.float_dw_mac / 2,
                    w16_out=table.float_out / 2)
    dear = replace(table, w16_mac=table.float_mac * 2, w16_dw_mac=table.float_dw_mac * 2,
                   w16_out=table.float_out * 2)
    assert all(latency.w8a16_cheaper(g, c, cheap) for c in ("S", "W", "M", "D"))
    assert not any(latency.w8a16_cheaper(g, c, dear) for c in ("S", "W", "M", "D"))
    assert not latency.w8a16_cheaper(g, "D", None)
    mac_ratio, _ = latency.estimator(load_target("arm"), allint, cands, macs, plan, every)
    assert mac_ratio([], ["D"]) == pytest.approx(mac_ratio(["D"]))


def test_w8a16_layers_priced_at_their_own_rates(tmp_path):
    """The fitted table prices W8A16 layers (QConv16 / QFC16) at its w16 rates, dense or
    depthwise, and the int16 QuantizeLinear of their inputs at quantize16_elem."""
    g, allint, cands, macs, plan = _stem_and_deep(tmp_path)
    ranges = {v: Range(-2.0, 2.0, -2.0, 2.0, 0.0)
              for v in needed_ranges(g, QuantOptions(w8a16=frozenset(cands)))}
    res = quantize_graph(g, ranges, QuantOptions(w8a16=frozenset(cands)))
    t = latency.table_for(load_target("x86-avx512"))
    q16 = res.graph
    seen = set()
    for n in q16.nodes:
        if n.op_type in ("QConv16", "QFC16"):
            m, grouped = latency.macs(q16, n)
            out = int(q16.values[n.outputs[0]].numel)
            rate = t.w16_dw_mac if grouped else t.w16_mac
            assert m > 0 and latency.node_cost(q16, n, t) == pytest.approx(
                t.call + m * rate + t.w16_out * out)
            seen.add((n.op_type, grouped))
        elif n.op_type == "QuantizeLinear" and q16.values[n.outputs[0]].dtype == "int16":
            numel = int(q16.values[n.outputs[0]].numel)
            assert latency.node_cost(q16, n, t) == pytest.approx(
                t.call + 2 * numel * t.quantize16_elem)
            seen.add(("Q16", False))
    assert seen == {("QConv16", False), ("QConv16", True), ("QFC16", False), ("Q16", False)}
    assert 0 < t.w16_mac < t.float_mac and t.w16_dw_mac > 0 and t.quantize16_elem > 0
