"""mlcc verify's float64 look: float outputs that differ from onnxruntime's are compared with
the model evaluated in float64 (onnx.reference on frontend/float64.py's copy), and pass when
mlcc's are within tolerance of it (an ill-conditioned model, where onnxruntime's float32
rounding strays); a wrong output still fails. Also ops/reference.py's fixed operators."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc import api
from mlcc.cli import main
from mlcc.frontend import float64
from mlcc.ops.reference import evaluator

import fetch_models as fm


def _layer_norm_variance(n: int = 512, c: int = 256) -> onnx.ModelProto:
    """sqrt(E[x^2] - E[x]^2 + eps) over axis 1 of [1, n, c], as jax2tf writes a LayerNorm
    (magika 1.0's model): on values of mean 1-4 and spread 0.03 the difference cancels about
    four digits, and the two engines' sums of 512 terms round differently."""
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.array(1.0 / n, np.float32), "inv_n"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"]),
             helper.make_node("Mul", ["x", "x"], ["x2"]),
             helper.make_node("ReduceSum", ["x2", "axes"], ["s2"]),
             helper.make_node("Mul", ["s", "inv_n"], ["mean"]),
             helper.make_node("Mul", ["s2", "inv_n"], ["mean_sq"]),
             helper.make_node("Mul", ["mean", "mean"], ["sq_mean"]),
             helper.make_node("Sub", ["mean_sq", "sq_mean"], ["var"]),
             helper.make_node("Add", ["var", "eps"], ["var_eps"]),
             helper.make_node("Sqrt", ["var_eps"], ["y"])]
    graph = helper.make_graph(
        nodes, "ill_conditioned", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 [1, n, c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, c])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _spread_inputs(n: int = 512, c: int = 256) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, n, c)) * 0.03 + rng.uniform(1, 4, (1, 1, c))
    return {"x": x.astype(np.float32)}


def test_ill_conditioned_model_verifies_against_float64(tmp_path: Path):
    model = tmp_path / "ill.onnx"
    onnx.save(_layer_norm_variance(), str(model))
    feeds = _spread_inputs()
    res = api.verify(model, inputs=feeds, output_dir=tmp_path / "out")
    # against onnxruntime alone it fails: the float64 look is what passes it
    ort_y = ort.InferenceSession(str(model)).run(None, feeds)[0]
    mine = mlcc.load(tmp_path / "out").run(feeds)["y"]
    assert not api.compare("y", mine, ort_y).ok
    assert res.ok, res.notes
    assert res.reference.startswith("a float64 evaluation")
    assert any("from mlcc's output" in n and "from onnxruntime's" in n for n in res.notes)
    exact = evaluator(float64.to_float64(_layer_norm_variance())).run(
        None, {"x": feeds["x"].astype(np.float64)})[0]
    assert res.outputs[0].max_abs_error == pytest.approx(np.abs(mine - exact).max())
    # the CLI says which reference passed it, and exits 0
    np.savez(tmp_path / "in.npz", **feeds)
    out = CliRunner().invoke(main, ["verify", str(model), "-i", str(tmp_path / "in.npz")])
    assert out.exit_code == 0, out.output
    assert "float64 evaluation" in out.output.splitlines()[-1]


def test_a_wrong_output_is_not_excused(tmp_path: Path):
    """An output that is far from the float64 value too keeps onnxruntime's failing check."""
    model = tmp_path / "ill.onnx"
    onnx.save(_layer_norm_variance(), str(model))
    feeds = _spread_inputs()
    ref = dict(zip(["y"], ort.InferenceSession(str(model)).run(None, feeds)))
    got = {"y": ref["y"] + np.float32(0.01)}
    checks = [api.compare("y", got["y"], ref["y"])]
    notes, rechecked = [], []
    after = api._explain_precision(model, feeds, {}, got, ref, checks, notes, "", rechecked)
    assert after == checks and not after[0].ok and rechecked == []
    assert "from mlcc's output" in notes[0]


def _float_pieces() -> onnx.ModelProto:
    """Every place a float32 type hides: an initializer, Constant value_float(s), a Cast to
    float, ConstantOfShape's value, an If whose branches hold float initializers."""
    f = TensorProto.FLOAT
    then = helper.make_graph(
        [helper.make_node("Mul", ["a", "k"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", f, [3])],
        [numpy_helper.from_array(np.array([1 / 3] * 3, np.float32), "k")])
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["e"], value_floats=[0.1, 0.2, 0.3])], "else", [],
        [helper.make_tensor_value_info("e", f, [3])])
    nodes = [helper.make_node("Constant", [], ["c"], value_float=1 / 7),
             helper.make_node("Cast", ["i"], ["fi"], to=f),
             helper.make_node("Add", ["x", "c"], ["xc"]),
             helper.make_node("Mul", ["xc", "fi"], ["a"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                              value=numpy_helper.from_array(np.array([1 / 9], np.float32))),
             helper.make_node("If", ["flag"], ["branch"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["branch", "ones"], ["y"])]
    graph = helper.make_graph(
        nodes, "pieces",
        [helper.make_tensor_value_info("x", f, [3]),
         helper.make_tensor_value_info("i", TensorProto.INT32, [3]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", f, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("flag", [True, False])
def test_to_float64_computes_every_float_in_float64(flag: bool):
    model = _float_pieces()
    feeds = {"x": np.array([0.5, -1.25, 3.0], np.float32), "i": np.array([1, 2, 3], np.int32),
             "flag": np.array(flag)}
    wide = float64.to_float64(model)
    onnx.checker.check_model(wide)
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT   # a copy
    y = evaluator(wide).run(None, float64.feeds_float64(feeds))[0]
    assert y.dtype == np.float64
    # the model's constants are float32 numbers: float64 arithmetic on them
    x, i = feeds["x"].astype(np.float64), feeds["i"].astype(np.float64)
    c7, c3, c9 = (float(np.float32(1 / d)) for d in (7, 3, 9))
    want = ((x + c7) * i * c3 if flag else np.float32([0.1, 0.2, 0.3]).astype(np.float64)) + c9
    np.testing.assert_allclose(y, want, rtol=1e-15)
    narrow = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(narrow, want, rtol=1e-6)


def test_models_without_a_float64_evaluation_say_why():
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant")
    ms = helper.make_node("FusedConv", ["x", "w"], ["y"], name="fused", domain="com.microsoft")
    for node, why in ((q, "'quant' (QuantizeLinear) quantizes"),
                      (ms, "'fused' is of domain 'com.microsoft'")):
        graph = helper.make_graph([node], "g", [], [])
        assert float64.refusal(helper.make_model(graph)) == f"node {why}"
    assert float64.refusal(_float_pieces()) == ""


@pytest.mark.slow
def test_magika_verifies_on_random_bytes_and_on_a_file(tmp_path: Path):
    """magika 1.0: on the default random bytes (0 or 1) its written-out LayerNorms cancel and
    onnxruntime strays (2.5e-3 from the float64 value, mlcc 6.2e-5); on a real file's first
    and last 1024 bytes, as magika reads them, both match onnxruntime directly."""
    try:
        path = fm.fetch("magika")
    except fm.DownloadError as exc:      # no network or no index: not a failure of mlcc
        pytest.skip(f"cannot download magika: {exc}")
    shapes = fm.ILL_CONDITIONED_MODELS["magika"].shapes
    res = api.verify(path, shapes=shapes, output_dir=tmp_path / "out")
    assert res.ok and res.reference.startswith("a float64 evaluation"), res.notes
    text = Path(api.__file__).read_bytes()
    data = np.frombuffer(text[:1024] + text[-1024:], np.uint8).astype(np.int32)[None]
    res = api.verify(path, shapes=shapes, inputs={"bytes": data})
    assert res.ok and res.reference == "onnxruntime", res.notes
