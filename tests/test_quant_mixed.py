"""Mixed precision (--min-sqnr, --max-drop, --metric): the fake-quant program against the float
model and the real integer program, the bisection, the per-layer report, and the errors
(a metric that raises or returns NaN, a target no mix meets)."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import helper
from test_quant import _calibration, _save_model

from mlcc import api
from mlcc.cli import main
from mlcc.errors import InputError
from mlcc.frontend import import_model
from mlcc.passes import INT8_PIPELINE, run_pipeline
from mlcc.quant import (QuantOptions, calibrate, conv_transpose_as_conv, needed_ranges,
                        quantize_graph, split_table_activations)
from mlcc.quant import fakequant, sensitivity
from mlcc.quant.calib import CalibrationSet


def _cnn(tmp_path, rng) -> tuple[Path, Path]:
    """A small CNN on odd shapes (3x11x13 input; a 3x3 Conv+Relu, a strided 3x3 Conv with
    HardSwish (a table), a residual-free 1x1 Conv, Add, global pooling, Gemm) and 12
    calibration samples."""
    w1 = rng.normal(0, 0.5, (5, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (7, 5, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.3, (7, 5, 1, 1)).astype(np.float32)
    wg = rng.normal(0, 0.4, (7, 5)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("HardSwish", ["c2"], ["h2"]),
             helper.make_node("Conv", ["r1", "w3"], ["c3"], strides=[2, 2]),
             helper.make_node("Add", ["h2", "c3"], ["a"]),
             helper.make_node("GlobalAveragePool", ["a"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wg"], ["y"])]
    path = _save_model(tmp_path, nodes, [1, 3, 11, 13], {"y": [1, 5]},
                       {"w1": w1, "w2": w2, "w3": w3, "wg": wg, "b1": b1})
    return path, _calibration(tmp_path, rng, 12, (1, 3, 11, 13))


def test_fake_quant_program_is_float_when_off_and_the_int8_program_when_on(tmp_path,
                                                                             monkeypatch):
    """All switches off: the float model (onnxruntime). The all-integer plan's switches on:
    within rounding of the real integer program (its error against float is the same to
    0.5 dB, and the two differ by less than either differs from float: rounding flips
    in the pooling, the Add and the table)."""
    rng = np.random.default_rng(3)
    path, calib = _cnn(tmp_path, rng)
    g = split_table_activations(conv_transpose_as_conv(
        run_pipeline(import_model(path), INT8_PIPELINE)))
    opts = QuantOptions()
    names = needed_ranges(g, opts)
    data = CalibrationSet(calib, {"x": ("float32", (1, 3, 11, 13))})
    run_f = api.float_runner(g, tmp_path / "float", names)
    ranges = calibrate(data, run_f, names)
    allint = quantize_graph(g, ranges, opts)
    fq = fakequant.build(g, allint)
    assert {k[2:] for k in fq.slots if k.startswith("w:")} == set(allint.weights) and \
        len(allint.weights) == 4
    run_sim = api._host_runner(fq.graph, tmp_path / "sim", "sim")
    run_q = api._host_runner(allint.graph, tmp_path / "q", "q")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    off, on = fq.control((), ()), fq.plan(allint)
    assert on.sum() == len(fq.slots) and off.sum() == 0
    refs, sims, reals = [], [], []
    for s in data:
        ref = sess.run(None, s)[0]
        got_off = run_sim({**s, fakequant.CONTROL: off})[fq.outputs["y"]]
        np.testing.assert_allclose(got_off, ref, rtol=1e-4, atol=1e-5)
        refs.append({"y": ref})
        sims.append({"y": run_sim({**s, fakequant.CONTROL: on})[fq.outputs["y"]]})
        reals.append({"y": run_q(s)["y"]})
    sim_db = sensitivity.output_sqnr(refs, sims)
    real_db = sensitivity.output_sqnr(refs, reals)
    assert 15 < real_db < 60 and abs(sim_db - real_db) < 0.5, (sim_db, real_db)
    assert sensitivity.output_sqnr(reals, sims) > real_db + 5
    # many runs at once (the sensitivity's), over the cores on copies of the program: the
    # same outputs in the same order as one at a time
    sim = api._Simulator(g, fq, run_sim)
    pairs = [(s, c) for s in data for c in (off, on, fq.control((), [allint.layers[0].node]))]
    one = [sim(s, c) for s, c in pairs]
    for cores in (1, 3):
        monkeypatch.setattr(api, "usable_cores", lambda: cores)
        many = list(sim.map(pairs))
        assert len(many) == len(one) and all(
            np.array_equal(a["y"], b["y"]) for a, b in zip(one, many)), cores


def test_fake_quant_twins_take_the_bias_correction(tmp_path):
    """With --bias-correction the rewrite adds (W - Wq) E[x] to each integer layer's bias;
    each layer's int8 twin in the fake-quant program carries that shifted bias (in its own
    layout: a Conv's [M], a Gemm's C that it did not have), so the search simulates the
    program it builds. No C is built."""
    from mlcc.quant import Range
    g = split_table_activations(conv_transpose_as_conv(
        run_pipeline(import_model(_cnn(tmp_path, np.random.default_rng(3))[0]),
                     INT8_PIPELINE)))
    layers = [n for n in g.nodes if n.op_type in ("Conv", "Gemm")]
    rng = np.random.default_rng(4)
    means = {n.inputs[0]: rng.normal(0, 2, g.values[n.inputs[0]].shape[1]) for n in layers}
    ranges = {v: Range(-3.0, 3.0, -3.0, 3.0, 0.0) for v in needed_ranges(g, QuantOptions())}
    allint = quantize_graph(g, ranges, QuantOptions(input_means=means))
    assert {n.name for n in layers} <= set(allint.bias_shift)
    fq = fakequant.build(g, allint)
    consts = {n.name: n for n in fq.graph.nodes}
    for n in layers:
        twin = consts[f"{n.name}/fq"]
        own = g.const(n.input(2)) if n.input(2) else np.zeros(len(allint.bias_shift[n.name]))
        np.testing.assert_allclose(fq.graph.const(twin.inputs[2]).reshape(-1),
                                   own.reshape(-1) + allint.bias_shift[n.name], rtol=1e-6,
                                   atol=1e-7)
        assert np.abs(allint.bias_shift[n.name]).max() > 0
    # without the correction the twins read the layers' own biases
    plain = fakequant.build(g, quantize_graph(g, ranges, QuantOptions()))
    twins = {n.name: n for n in plain.graph.nodes if n.name.endswith("/fq")}
    assert all(twins[f"{n.name}/fq"].inputs[2:] == n.inputs[2:] for n in layers)


def test_bisect_finds_the_least_count_that_meets():
    scores = [1, 2, 2, 5, 7, 9, 9, 12]          # grows with the layers kept in float
    calls = []

    def ev(k):
        calls.append(k)
        return scores[k]
    k, steps = sensitivity.bisect(7, ev, lambda s: s >= 7)
    assert k == 4 and [c for c, _ in steps] == calls and len(calls) <= 2 + 3
    assert sensitivity.bisect(7, ev, lambda s: s >= 1)[0] == 0
    assert sensitivity.bisect(7, ev, lambda s: s >= 100) == (7, [(0, 1), (7, 12)])
    assert sensitivity.bisect(0, ev, lambda s: s >= 100)[0] == 0


def test_top1_agreement_and_targets():
    f = [{"y": np.array([[0.1, 0.9], [0.8, 0.2]])}, {"y": np.array([[0.3, 0.7], [0.6, 0.4]])}]
    q = [{"y": np.array([[0.6, 0.4], [0.8, 0.2]])}, {"y": np.array([[0.3, 0.7], [0.6, 0.4]])}]
    assert sensitivity.top1_agreement(f, q) == 75.0
    t = sensitivity.Target.drop(20.0)
    t.start(f)
    assert t.reference == 100.0 and t.meets(80.0) and not t.meets(79.9)
    assert sensitivity.Target.sqnr(30).meets(30.0) and not sensitivity.Target.sqnr(30).meets(29)
    with pytest.raises(InputError, match="needs an output with classes on its last axis"):
        sensitivity.Target.drop(1.0).start([{"y": np.zeros((4, 1))}, {"y": np.zeros((4, 1))}])


def _mlp(tmp_path, rng):
    w1 = rng.normal(0, 0.4, (13, 17)).astype(np.float32)
    w2 = rng.normal(0, 0.4, (17, 7)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    path = _save_model(tmp_path, nodes, [3, 13], {"y": [3, 7]}, {"w1": w1, "w2": w2})
    return path, _calibration(tmp_path, rng, 8, (3, 13))


def test_min_sqnr_from_the_cli_keeps_the_most_sensitive_in_float(tmp_path):
    """--min-sqnr 300 on a two-layer MLP: both layers end in float (inf dB), found by bisection
    on the simulation and verified by one build; the manifest, the CLI and the report say
    what was kept, each layer's sensitivity, precision and estimated cost."""
    path, calib = _mlp(tmp_path, np.random.default_rng(5))
    report = tmp_path / "r.md"
    r = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "q"),
                                  "--target", "x86-native", "--quantize", "int8",
                                  "--calibration", str(calib), "--min-sqnr", "300",
                                  "--report", str(report)])
    assert r.exit_code == 0, r.output
    info = json.loads((tmp_path / "q" / "manifest.json").read_text())["quantization"]
    mp = info["mixed_precision"]
    assert mp["met"] and mp["final"] == float("inf") and mp["steps"][0][1] < 60
    assert sorted(mp["kept"]) == sorted(mp["order"]) == ["MatMul_0", "MatMul_2"]
    assert mp["order"][0] == min(mp["sensitivity_db"], key=mp["sensitivity_db"].get)
    assert mp["verified"] == [[2, float("inf")]] and mp["macs"] == {"MatMul_0": 3 * 17 * 13,
                                                                    "MatMul_2": 3 * 7 * 17}
    assert "mlcc_u8_fc(" not in (tmp_path / "q" / "model.c").read_text()
    assert "--min-sqnr 300 dB met: 2 of 2 layers kept in float" in r.output
    text = report.read_text()
    assert "## Mixed precision" in text and "| `MatMul_0` |" in text and "| float |" in text
    assert "ms" not in mp                                # no timing in the output folder
    r = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "f"),
                                  "--min-sqnr", "30"])
    assert r.exit_code == 1 and "--min-sqnr needs --quantize int8" in r.output


METRICS = ("import numpy as np\n"
           "def neg_err(f, q):\n"
           "    return -sum(float(np.abs(a['y'] - b['y']).mean()) for a, b in zip(f, q))\n"
           "def boom(f, q):\n    raise ValueError('no labels here')\n"
           "def nan(f, q):\n    return float('nan')\n"
           "def same_object(f, q):\n    return float(f is q)\n")


def _compile_with(tmp_path, out, *extra):
    path, calib = _mlp(tmp_path, np.random.default_rng(5))
    (tmp_path / "metric.py").write_text(METRICS)
    return CliRunner().invoke(main, ["compile", str(path), "--target", "x86-native",
                                     "--quantize", "int8", "--calibration", str(calib),
                                     "-o", str(tmp_path / out), *extra])


def test_metric_that_raises_returns_nan_or_is_missing_is_a_clear_error(tmp_path):
    """One-line errors, exit 1, no traceback; the metric is first called on the float outputs
    right after calibration (before the fake-quant build)."""
    metric = tmp_path / "metric.py"
    for fn, message in (("boom", "metric.py:boom failed (ValueError: no labels here)"),
                        ("nan", "metric.py:nan returned NaN"),
                        ("missing", "defines no function missing")):
        r = _compile_with(tmp_path, fn, "--max-drop", "1", "--metric", f"{metric}:{fn}")
        assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, \
            r.output
        assert not (tmp_path / fn / "model.c").exists()
    r = _compile_with(tmp_path, "x", "--metric", f"{metric}:neg_err")
    assert r.exit_code == 1 and "give --max-drop too" in r.output
    r = _compile_with(tmp_path, "x", "--max-drop", "1", "--metric", "nowhere.py:f")
    assert r.exit_code == 1 and "nowhere.py does not exist" in r.output


def test_max_drop_with_a_user_metric_met_or_unreachable(tmp_path):
    """--max-drop with --metric FILE.py:FN: met with every layer int8 when the drop allowed is
    large; a target no mix meets says the best reached and what limits it (exit 1)."""
    metric = tmp_path / "metric.py"
    r = _compile_with(tmp_path, "q", "--max-drop", "1e9", "--metric", f"{metric}:neg_err")
    assert r.exit_code == 0, r.output
    mp = json.loads((tmp_path / "q" / "manifest.json").read_text())["quantization"][
        "mixed_precision"]
    assert mp["kept"] == [] and mp["reference"] == 0.0 and mp["metric"] == "metric.py:neg_err"
    r = _compile_with(tmp_path, "u", "--max-drop", "0.5", "--metric", f"{metric}:same_object")
    assert r.exit_code == 1 and "cannot be met: the best mix reached 0" in r.output and \
        "all 2 candidate layers in float" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "u" / "model.c").exists()


def test_max_drop_default_metric_on_held_out_samples(tmp_path):
    """--max-drop without --metric bounds the drop of top-1 agreement (%), measured on
    --eval-data; a large allowance keeps every layer integer."""
    rng = np.random.default_rng(9)
    path, calib = _mlp(tmp_path, rng)
    held = tmp_path / "held.npz"
    np.savez(held, x=rng.normal(0, 1, (5, 3, 13)).astype(np.float32))   # not c.npz's draws
    r = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "q"),
                                  "--target", "x86-native", "--quantize", "int8",
                                  "--calibration", str(calib), "--max-drop", "100",
                                  "--eval-data", str(held)])
    assert r.exit_code == 0, r.output
    mp = json.loads((tmp_path / "q" / "manifest.json").read_text())["quantization"][
        "mixed_precision"]
    assert mp["samples"] == 5 and mp["kept"] == [] and mp["reference"] == 100.0
    assert mp["metric"] == "top-1 agreement %"
    assert "mlcc_u8_fc(" in (tmp_path / "q" / "model.c").read_text()


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_bar_only_on_a_terminal(monkeypatch):
    from mlcc.cli import _progress_bar
    for tty in (True, False):
        err = _Stream(tty)
        monkeypatch.setattr(sys, "stderr", err)
        _progress_bar("sensitivity", 3, 12)
        _progress_bar("sensitivity", 12, 12)
        text = err.getvalue()
        if tty:
            assert text.startswith("\r sensitivity [#######") and "3/12" in text and \
                text.endswith("] 12/12\n")
        else:
            assert text == ""


def test_progress_of_every_long_step(tmp_path):
    """progress_bar hears from every long step of a --min-sqnr compile with a report, each
    counting up to its total: both calibration passes (the total read from the .npz before
    the first pass), each C build by objects (the float program, the fake-quant program, the
    chosen program, the final library, the report's two programs) and the sensitivity."""
    path, calib = _mlp(tmp_path, np.random.default_rng(5))
    seen: dict[str, list[tuple[int, int]]] = {}
    cfg = api.QuantizeConfig(calib, min_sqnr=300, report=tmp_path / "r.md",
                             progress_bar=lambda label, done, total:
                             seen.setdefault(label, []).append((done, total)))
    api.compile(path, tmp_path / "q", target="x86-native", quantize=cfg)
    assert set(seen) == {"calibration 1/2", "calibration 2/2", "C float", "C fake-quant",
                         "C int8", "C build", "C report", "sensitivity"}
    assert seen["calibration 1/2"] == seen["calibration 2/2"] == [(k, 8) for k in range(1, 9)]
    # the report builds a float program of its own, under "C float" too
    for label, steps in seen.items():
        total = steps[0][1]
        assert all(t == total for _, t in steps) and total > 0, label
        assert [d for d, _ in steps] == list(range(1, total + 1)) * (len(steps) // total)
    assert CalibrationSet(calib, {"x": ("float32", (3, 13))}, 5).known_count() == 5


def test_a_message_clears_a_bar_left_on_the_terminal(monkeypatch):
    from mlcc.cli import _Progress
    err = _Stream(True)
    monkeypatch.setattr(sys, "stderr", err)
    term = _Progress()
    term.bar("C float", 1, 3)
    term.say("calibrating")
    term.bar("C float", 3, 3)
    term.say("done")
    assert err.getvalue() == ("\r     C float [##########....................] 1/3"
                              "\r\033[Kcalibrating\n"
                              "\r     C float [##############################] 3/3\ndone\n")


def _outlier_cnn(tmp_path, rng, factor: float = 1000) -> tuple[Path, Path]:
    """A CNN with one deliberately sensitive tensor: `a`, the output of the small 1x1 Conv
    `A`, has one channel `factor` (1000) times the others (its weights and bias scaled), so
    one per-tensor uint8 scale for `a` crushes the other three channels, which carry the
    output (the next Conv `B` reads the big channel with weights that much smaller). Two 3x3
    Convs before them hold most of the multiply-accumulates, so keeping A and B in float is
    cheap."""
    wa = rng.normal(0, 0.3, (4, 16, 1, 1)).astype(np.float32)
    ba = rng.normal(0, 0.1, 4).astype(np.float32)
    wb = rng.normal(0, 0.5, (8, 4, 1, 1)).astype(np.float32)
    wa[3] *= factor
    ba[3] *= factor
    wb[:, 3] /= factor
    consts = {"w0": rng.normal(0, 0.4, (16, 3, 3, 3)).astype(np.float32),
              "w1": rng.normal(0, 0.15, (16, 16, 3, 3)).astype(np.float32),
              "wa": wa, "ba": ba, "wb": wb,
              "wg": rng.normal(0, 0.4, (8, 5)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="C0"),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="C1"),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wa", "ba"], ["a"], name="A"),
             helper.make_node("Conv", ["a", "wb"], ["b"], name="B"),
             helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("GlobalAveragePool", ["rb"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wg"], ["y"], name="G")]
    path = _save_model(tmp_path, nodes, [1, 3, 13, 17], {"y": [1, 5]}, consts)
    return path, _calibration(tmp_path, rng, 16, (1, 3, 13, 17))


def default_mix_outlier(tmp_path, factor: float = 1000):
    """_outlier_cnn compiled from the CLI with default int8 options and a report: (model,
    calibration, 8 held-out inputs, report path, CLI result, the manifest's quantization)."""
    rng = np.random.default_rng(11)
    path, calib = _outlier_cnn(tmp_path, rng, factor)
    xs = rng.normal(0, 1, (8, 1, 3, 13, 17)).astype(np.float32)
    report = tmp_path / "r.md"
    r = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "mix"),
                                  "--target", "x86-native", "--quantize", "int8",
                                  "--calibration", str(calib), "--report", str(report)])
    assert r.exit_code == 0, r.output
    q = json.loads((tmp_path / "mix" / "manifest.json").read_text())["quantization"]
    return path, calib, xs, report, r, q


@pytest.mark.usefixtures("avx512_prices")
def test_default_mix_keeps_a_sensitive_layer_in_float_and_meets_its_sqnr(tmp_path):
    """With default options the sensitivity finds the layers around the outlier tensor and
    keeps them in float, within the time budget, and the built program's output SQNR against
    onnxruntime reaches the default target on held-out inputs; --pure-int8 keeps every layer
    integer and loses most of the signal."""
    from test_quant import _sqnr_vs_onnxruntime
    path, calib, xs, report, r, q = default_mix_outlier(tmp_path)
    mp = q["mixed_precision"]
    assert mp["auto"] and mp["met"] and mp["steps"][0][1] < 20 <= sensitivity.AUTO_SQNR_DB
    assert set(mp["order"][:2]) == {"A", "B"} and set(mp["kept"]) <= {"A", "B"}
    assert "C0" not in mp["kept"] and "C1" not in mp["kept"]
    assert mp["time_ratio"] <= mp["budget"] and mp["time_model"].startswith("fitted")
    assert "default mix" in r.output and "Default mix" in report.read_text()
    mixed_db = _sqnr_vs_onnxruntime(path, tmp_path / "mix", xs)[0]
    assert mixed_db >= sensitivity.AUTO_SQNR_DB, mixed_db
    r = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "pure"),
                                  "--target", "x86-native", "--quantize", "int8",
                                  "--calibration", str(calib), "--pure-int8"])
    assert r.exit_code == 0, r.output
    q = json.loads((tmp_path / "pure" / "manifest.json").read_text())["quantization"]
    assert "mixed_precision" not in q and q["float_layers"] == []
    pure_db = _sqnr_vs_onnxruntime(path, tmp_path / "pure", xs)[0]
    assert pure_db < 20 < mixed_db, (pure_db, mixed_db)


def test_default_mix_respects_the_time_budget():
    """within_budget takes layers in sensitivity order only while the estimated int8 / float
    time stays within the budget (a big layer is skipped, smaller later ones still fit), and
    time_ratio is INT8_FLOAT_RATIO for an all-integer plan and 1 for an all-float one."""
    macs = {"big": 900, "small": 50, "tiny": 50}
    LP = sensitivity.LayerPlan

    def ratio(kept):
        return sensitivity.time_ratio([LP(c, "", c not in kept) for c in macs], macs)
    assert ratio([]) == pytest.approx(sensitivity.INT8_FLOAT_RATIO)
    assert ratio(list(macs)) == pytest.approx(1.0)
    assert sensitivity.within_budget(["big", "small", "tiny"], ratio, 0.5) == ["small", "tiny"]
    assert sensitivity.within_budget(["small", "big", "tiny"], ratio, 0.44) == ["small"]
    assert sensitivity.within_budget(["big"], ratio, 1.0) == ["big"]
    # the budget: AUTO_TIME_BUDGET, or above it the all-integer estimate plus a margin
    assert sensitivity.auto_budget(0.46) == sensitivity.AUTO_TIME_BUDGET
    assert sensitivity.auto_budget(0.8) == pytest.approx(0.8 + sensitivity.AUTO_TIME_MARGIN)


def test_ladder_tries_w8a16_before_float_and_prices_each_move():
    """The searches' moves: each layer in sensitivity order to its cheaper better precision
    (W8A16 where offered and cheaper, else float), then the W8A16 ones to float, a later
    move replacing an earlier one; priced, only moves within the budget are taken and each
    one's marginal cost is recorded."""
    order = ["a", "b", "c"]
    moves = sensitivity.ladder(order, {"c", "a"})
    assert moves == [("a", "w8a16"), ("b", "float"), ("c", "w8a16"), ("a", "float"),
                     ("c", "float")]
    assert sensitivity.ladder(order, set()) == [(c, "float") for c in order]
    assert sensitivity.mix_of(moves[:1]) == ([], ["a"])
    assert sensitivity.mix_of(moves[:3]) == (["b"], ["a", "c"])
    assert sensitivity.mix_of(moves[:4]) == (["a", "b"], ["c"])
    assert sensitivity.mix_of(moves) == (["a", "b", "c"], [])
    price = {"a": (0.05, 0.15), "b": (0.01, 0.2), "c": (0.3, 0.1)}   # (W8A16, float)

    def ratio(taken):
        kept, w16 = sensitivity.mix_of(taken)
        return 0.4 + sum(price[c][1] for c in kept) + sum(price[c][0] for c in w16)
    costs: dict = {}
    taken = sensitivity.ladder(order, {"a", "b", "c"}, ratio, 0.62, costs)
    # a: W8A16 (0.45); b: W8A16 (0.46); c: float is cheaper (0.56); a to float: 0.66, over
    # the budget; b to float: 0.75, over
    assert taken == [("a", "w8a16"), ("b", "w8a16"), ("c", "float")]
    assert costs[("a", "w8a16")] == pytest.approx(0.05)
    assert costs[("c", "w8a16")] == pytest.approx(0.3)
    assert costs[("b", "float")] == pytest.approx(0.19)
    # without W8A16: float moves within the budget, in order (within_budget)
    assert sensitivity.ladder(order, set(), ratio, 0.66) == [("a", "float"), ("c", "float")]


def test_default_mix_grid_search_meets_or_takes_the_fewest_near_the_best():
    """The default mix's search: the least k that meets the target (grid 0, 1, 2, 4, ...,
    count, then bisection below the first grid point that meets), else the fewest layers
    within near_best dB of the best score evaluated (scores need not grow with k)."""
    scores = [10, 11, 12, 14, 20, 21, 25, 31, 33, 30, 29]     # k = 0..10

    def run(target, near=1.0):
        calls = []

        def ev(k):
            calls.append(k)
            return scores[k]
        k, steps = sensitivity.grid_search(10, ev, lambda s: s >= target, near)
        assert [c for c, _ in steps] == calls and len(set(calls)) == len(calls)
        return k, calls
    assert run(30) == (7, [0, 1, 2, 4, 8, 6, 7])
    assert run(10) == (0, [0])
    assert run(100) == (8, [0, 1, 2, 4, 8, 10])             # best 33 at 8; 10 reads 29
    assert run(100, near=5.0)[0] == 8
    assert run(100, near=20.0)[0] == 4 and run(100, near=21.0)[0] == 2    # 14, 12 >= 33 - near
    assert sensitivity.grid_search(0, lambda k: 5.0, lambda s: s > 9, 1.0) == (0, [(0, 5.0)])
