"""The default mix's time budget: `--time-budget R`, what the target would cost when the
budget misses it, and the default rule that raises the budget to what reaches the target
(at most sensitivity.AUTO_TIME_CAP, never for class probabilities)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper
from test_quant import _save_model
from test_quant_mixed import _outlier_cnn

from mlcc import api
from mlcc.cli import main
from mlcc.errors import InputError
from mlcc.frontend import import_model
from mlcc.quant import sensitivity


def _compile(tmp_path, path, calib, out, *extra):
    return CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / out),
                                     "--target", "x86-native", "--quantize", "int8",
                                     "--calibration", str(calib), *extra])


def test_bad_time_budgets_are_one_line_errors(tmp_path):
    """--time-budget outside (0, 1.5], NaN, with --pure-int8 or --min-sqnr (no default mix),
    or without --quantize: exit 1, one line, no traceback, nothing built."""
    path, calib = _outlier_cnn(tmp_path, np.random.default_rng(3))
    for value in ("0", "-0.5", "1.6", "nan", "inf"):
        r = _compile(tmp_path, path, calib, "bad", "--time-budget", value)
        assert r.exit_code == 1 and "--time-budget must be a ratio of float's time in (0, 1.5]" \
            in r.output and "Traceback" not in r.output, (value, r.output)
        assert len(r.output.strip().splitlines()) == 1, r.output
    for extra in (("--pure-int8",), ("--min-sqnr", "20")):
        r = _compile(tmp_path, path, calib, "bad", "--time-budget", "0.8", *extra)
        assert r.exit_code == 1 and "--time-budget bounds the default mix" in r.output, r.output
    r = CliRunner().invoke(main, ["compile", str(path), "-o", str(tmp_path / "bad"),
                                  "--time-budget", "0.8"])
    assert r.exit_code == 1 and "--time-budget needs --quantize int8" in r.output, r.output
    assert not (tmp_path / "bad" / "model.c").exists()
    with pytest.raises(InputError, match="not True"):
        sensitivity.check_time_budget(True)
    assert sensitivity.check_time_budget(1) == 1.0


def test_a_budget_that_misses_the_target_says_what_it_would_cost(tmp_path):
    """The outlier CNN (two layers around a 1000x channel must leave int8 for 30 dB) with a
    budget below its all-integer estimate: no move fits, the target is missed, and the
    manifest, the compile output and the report give the estimated time of the least mix
    that meets it; that mix is what a budget of that cost builds."""
    path, calib = _outlier_cnn(tmp_path, np.random.default_rng(11))
    report = tmp_path / "r.md"
    r = _compile(tmp_path, path, calib, "low", "--time-budget", "0.01", "--report", str(report))
    assert r.exit_code == 0, r.output
    mp = json.loads((tmp_path / "low" / "manifest.json").read_text())["quantization"][
        "mixed_precision"]
    assert not mp["met"] and mp["kept"] == [] and mp["w8a16"] == [] and mp["budget_given"]
    assert mp["budget"] == 0.01 and "budget_raised" not in mp
    cost = mp["target_cost"]
    assert mp["time_ratio"] < cost <= 1.5, mp
    assert f"30 dB would need --time-budget {math.ceil(cost * 100) / 100:g}" in r.output, \
        r.output
    assert f"30 dB needs a budget of {cost:.4g}" in report.read_text()
    assert "more than the `--time-budget` given" in report.read_text()
    r = _compile(tmp_path, path, calib, "enough", "--time-budget", f"{cost:.4f}")
    assert r.exit_code == 0, r.output
    mp = json.loads((tmp_path / "enough" / "manifest.json").read_text())["quantization"][
        "mixed_precision"]
    assert mp["met"] and set(mp["kept"]) | set(mp["w8a16"]) <= {"A", "B"}, mp
    assert mp["time_ratio"] <= cost and "target_cost" not in mp


@pytest.mark.usefixtures("avx512_prices")
def test_the_default_budget_rises_to_what_meets_the_target(tmp_path, monkeypatch):
    """Without --time-budget, a target missed within the default budget (here made negative)
    is met by raising the budget to the least mix that meets it, when that costs at most
    AUTO_TIME_CAP; above the cap, or on a target without a fitted cost table, the budget
    stays and the target is missed."""
    path, calib = _outlier_cnn(tmp_path, np.random.default_rng(11))
    monkeypatch.setattr(sensitivity, "AUTO_TIME_BUDGET", -1.0)
    monkeypatch.setattr(sensitivity, "AUTO_TIME_MARGIN", -2.0)
    report = tmp_path / "r.md"
    cfg = api.QuantizeConfig(calib, report=report)
    q = api.compile(path, tmp_path / "raised", target="x86-native", quantize=cfg).manifest[
        "quantization"]["mixed_precision"]
    assert q["met"] and q["budget_raised"] and q["budget"] == q["target_cost"], q
    assert q["time_ratio"] <= sensitivity.AUTO_TIME_CAP and q["kept"] + q["w8a16"]
    assert "the default budget was raised to it" in report.read_text()
    monkeypatch.setattr(sensitivity, "AUTO_TIME_CAP", q["target_cost"] - 0.01)
    q = api.compile(path, tmp_path / "capped", target="x86-native", quantize=cfg).manifest[
        "quantization"]["mixed_precision"]
    assert not q["met"] and "budget_raised" not in q and q["kept"] == [], q
    assert "above the cap of the default budget" in report.read_text()
    # a target without a fitted cost table (x86 with SSE2: the multiply-accumulate estimate)
    q = api.compile(path, tmp_path / "sse2", target="x86", quantize=cfg).manifest[
        "quantization"]["mixed_precision"]
    assert not q["met"] and "budget_raised" not in q and q["time_model"] == \
        "multiply-accumulates" and q["target_cost"] is not None, q
    assert "raised only by a fitted cost table" in report.read_text()


def test_raised_budget_and_probability_outputs(tmp_path):
    """The rule: the target's cost where it is known and within the cap, never for a model
    with a Softmax (through a Transpose and a Reshape) or LogSoftmax output; a Sigmoid map
    or raw logits are not class probabilities."""
    cap = sensitivity.AUTO_TIME_CAP
    assert sensitivity.raised_budget(cap - 0.1, False) == pytest.approx(cap - 0.1)
    assert sensitivity.raised_budget(cap, False) == cap
    assert sensitivity.raised_budget(cap + 0.01, False) is None
    assert sensitivity.raised_budget(None, False) is None
    assert sensitivity.raised_budget(0.6, True) is None
    assert sensitivity.raised_budget(0.6, False, fitted=False) is None
    rng = np.random.default_rng(2)
    w = rng.normal(0, 0.3, (5, 7)).astype(np.float32)
    heads = {"p": [helper.make_node("Softmax", ["l"], ["s"], axis=-1),
                   helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0]),
                   helper.make_node("Reshape", ["t", "shape"], ["p"])],
             "lp": [helper.make_node("LogSoftmax", ["l"], ["lp"], axis=1)],
             "m": [helper.make_node("Sigmoid", ["l"], ["m"])],
             "l": []}
    for out, nodes in heads.items():
        shape = [35] if out == "p" else [5, 7]
        (tmp_path / out).mkdir()
        model = _save_model(tmp_path / out, [helper.make_node("MatMul", ["x", "w"], ["l"])]
                            + nodes, [5, 5], {out: shape},
                            {"w": w, "shape": np.array([35], np.int64)} if out == "p" else
                            {"w": w})
        found = sensitivity.probability_outputs(import_model(model))
        assert found == ([out] if out in ("p", "lp") else []), (out, found)


def test_the_recorded_command_keeps_the_budget():
    """The manifest's command line says --time-budget where it was given."""
    words = api.compile_command("m.onnx", target="x86-native",
                                quantize=api.QuantizeConfig("c.npz", time_budget=0.75))
    assert words[words.index("--time-budget") + 1] == "0.75"
    assert "--time-budget" not in api.compile_command(
        "m.onnx", target="x86-native", quantize=api.QuantizeConfig("c.npz"))
