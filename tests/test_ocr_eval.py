"""The parts of the PP-OCR rec text-line evaluation (bench/eval_ocr_int8.py) that need no
renderer: CTC greedy decoding, the scores, the model's character list and the preprocessing;
and `--keep-float`, the selection of groups kept in float that reaches issue 5's accuracy goal
on that model, on a small built model."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from eval_ocr_int8 import charset, ctc_greedy, edit_distance, scores, to_input
from mlcc import api
from mlcc.cli import main
from mlcc.errors import InputError
from mlcc.frontend import import_model
from mlcc.quant.sensitivity import select_nodes

CHARS = ["<blank>", "a", "b", "c", " "]


def _onehot(seq):
    p = np.full((len(seq), len(CHARS)), 0.01, np.float32)
    p[np.arange(len(seq)), seq] = 0.9
    return p


def test_ctc_greedy_collapses_repeats_then_drops_blanks():
    assert ctc_greedy(_onehot([0, 1, 1, 0, 1, 2, 2, 2, 0, 0, 3, 4]), CHARS) == "aabc "
    assert ctc_greedy(_onehot([1, 1, 1]), CHARS) == "a"
    assert ctc_greedy(_onehot([0, 0]), CHARS) == ""
    assert ctc_greedy(_onehot([2, 0, 2])[None], CHARS) == "bb"      # [1, T, C]
    with pytest.raises(ValueError, match="batch of 2"):
        ctc_greedy(np.stack([_onehot([1])] * 2), CHARS)
    with pytest.raises(ValueError, match="for 5 classes"):
        ctc_greedy(np.zeros((3, 4)), CHARS)


def test_scores_exact_match_and_character_accuracy():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "abc") == 0
    em, ca = scores(["abcd", "xy", " ab"], ["abcd", "xyz", "ab"])
    assert em == pytest.approx(100 / 3)
    assert ca == pytest.approx(100 * (1 - 2 / 9))


def test_charset_is_blank_metadata_space(tmp_path):
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g)
    onnx.save(m, str(tmp_path / "none.onnx"))
    with pytest.raises(ValueError, match="no 'character' metadata"):
        charset(tmp_path / "none.onnx")
    helper.set_model_props(m, {"character": "x\n7\n疗"})
    onnx.save(m, str(tmp_path / "m.onnx"))
    assert charset(tmp_path / "m.onnx") == ["<blank>", "x", "7", "疗", " "]


def test_to_input_keeps_aspect_scales_and_pads():
    img = np.full((24, 70), 255, np.uint8)
    img[:, :35] = 0
    x = to_input(img)
    assert x.shape == (1, 3, 48, 320) and x.dtype == np.float32
    assert np.all(x[..., 140:] == 0)                   # 70 * 48 / 24 = 140 columns of image
    assert np.all(x[..., :69] == -1) and np.all(x[..., 71:140] == 1)
    assert np.all(x[0, 0] == x[0, 2])
    wide = to_input(np.zeros((10, 1000), np.uint8))     # wider than 320 at height 48: squeezed
    assert np.all(wide == -1)


# ------------------------------------------------------------------ --keep-float

def _two_layer_model(tmp_path):
    """Conv (+Relu) -> MatMul over x [1, 3, 5, 7]; calibration c.npz."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "m"], ["y"], name="fc1")]
    consts = {"w": rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32),
              "b": rng.normal(0, 0.1, 4).astype(np.float32),
              "m": rng.normal(0, 0.3, (7, 6)).astype(np.float32)}
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])],
        [numpy_helper.from_array(a, n) for n, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "c.npz", x=rng.normal(0, 1, (6, 1, 3, 5, 7)).astype(np.float32))
    return path, tmp_path / "c.npz"


def test_select_nodes_by_op_type_and_name_pattern(tmp_path):
    path, _ = _two_layer_model(tmp_path)
    g = import_model(path)
    assert select_nodes(g, ["op:MatMul"]) == (frozenset({"fc1"}), [])
    assert select_nodes(g, ["conv*", "op:Gemm", "fc?"]) == (frozenset({"conv1", "fc1"}),
                                                            ["op:Gemm"])
    assert select_nodes(g, ["Conv1"])[1] == ["Conv1"]              # case-sensitive


def test_keep_float_runs_the_selected_groups_in_float(tmp_path):
    """The MatMul kept in float by a name pattern: the Conv stays an integer kernel, the
    MatMul is a float kernel in model.c, and the manifest counts one integer layer."""
    path, calib = _two_layer_model(tmp_path)
    res = api.compile(path, tmp_path / "q", target="x86-native", build=False,
                      quantize=api.QuantizeConfig(calib, keep_float=("fc*",)))
    layers = {lp.node: lp.integer for lp in res.quant.layers}
    assert layers["conv1"] and not layers["fc1"]
    info = json.loads((tmp_path / "q" / "manifest.json").read_text())["quantization"]
    assert info["integer_layers"] == 1 and "fc1" in info["float_layers"]
    code = (tmp_path / "q" / "model.c").read_text()
    assert "mlcc_u8_conv2d" in code and "mlcc_u8_fc" not in code


def test_keep_float_from_the_cli_and_its_errors(tmp_path):
    path, calib = _two_layer_model(tmp_path)
    base = ["compile", str(path), "--target", "x86-native", "--no-build"]
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "a"), "--quantize", "int8",
                                         "--calibration", str(calib),
                                         "--keep-float", "op:MatMul,conv1"])
    assert r.exit_code == 0, r.output
    assert "0 integer layers" in r.output and "conv1" in r.output and "fc1" in r.output
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "b"), "--quantize", "int8",
                                         "--calibration", str(calib), "--keep-float", "op:Conv",
                                         "--keep-float", "nosuch*"])
    assert r.exit_code == 1 and "nosuch* matches no node" in r.output
    assert not (tmp_path / "b" / "model.c").exists()
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "c"), "--keep-float", "op:Conv"])
    assert r.exit_code == 1 and "need --quantize int8" in r.output
    with pytest.raises(InputError, match="op:Nope matches no node"):
        api.compile(path, tmp_path / "d", target="x86-native", build=False,
                    quantize=api.QuantizeConfig(calib, keep_float=("op:Nope",)))


def test_line_agreement_compares_decoded_lines():
    """The --metric for the recognizer: lines whose CTC decoding equals float's, in %."""
    from eval_ocr_int8 import line_agreement
    f = [{"y": _onehot([1, 1, 0, 2])}, {"y": _onehot([3, 0, 3])}]
    q = [{"y": _onehot([1, 0, 0, 2])}, {"y": _onehot([3, 3, 3])}]   # same text / "c" vs "cc"
    assert line_agreement(f, q) == 50.0 and line_agreement(f, f) == 100.0


def test_variant_options_parse():
    from eval_ocr_int8 import parse_variant
    assert parse_variant("mlcc-auto+maxdrop=1+metric=lines") == (
        "mlcc", "auto", (), {"maxdrop": "1", "metric": "lines"})
    assert parse_variant("mlcc-percentile+keep=a|b") == ("mlcc", "percentile", ("a", "b"), {})
    with pytest.raises(SystemExit):
        parse_variant("mlcc-auto+maxdorp=1")


def test_exact_match_metric_reads_the_truth_file(tmp_path, monkeypatch):
    """The task metric as --metric: exact match (%) of the decoded lines against the texts of
    the JSON file $MLCC_OCR_TRUTH names (whatever the float outputs say)."""
    import json

    from eval_ocr_int8 import TRUTH_ENV, exact_match
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g)
    helper.set_model_props(m, {"character": "a\nb\nc"})
    onnx.save(m, str(tmp_path / "m.onnx"))
    (tmp_path / "t.json").write_text(json.dumps({"model": str(tmp_path / "m.onnx"),
                                                 "truth": ["ab", "c", "cc"]}))
    monkeypatch.setenv(TRUTH_ENV, str(tmp_path / "t.json"))
    q = [{"y": _onehot([1, 0, 2])}, {"y": _onehot([3, 3])}, {"y": _onehot([3])}]
    assert exact_match(q, q) == pytest.approx(200 / 3)          # "c" is not "cc"
