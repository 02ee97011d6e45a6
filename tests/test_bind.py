"""Compile-time binding of inputs (--bind, mlcc.compile(bind=...)): a bound input stops being an
input of the compiled model and folds like an initializer; errors are one line, exit 1, and
write nothing."""
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import mlcc
from mlcc.cli import main
from mlcc.errors import InputError, UnsupportedError

BOUND = {"shape": np.array([3, 4], np.int64), "starts": np.array([1], np.int64),
         "eshape": np.array([2, 2, 4], np.int64), "gain": np.array(0.5, np.float32)}


def shape_model() -> onnx.ModelProto:
    """y = Relu(Expand(Slice(Reshape(x, shape), starts, [100], [0]), eshape)) * gain: the
    Reshape, Slice and Expand take their shapes from graph inputs, which mlcc needs as
    constants; x (and w, an initializer) stay as they are."""
    vi = helper.make_tensor_value_info
    inputs = [vi("x", TensorProto.FLOAT, [2, 6]), vi("shape", TensorProto.INT64, [2]),
              vi("starts", TensorProto.INT64, [1]), vi("eshape", TensorProto.INT64, [3]),
              vi("gain", TensorProto.FLOAT, [])]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"]),
             helper.make_node("Expand", ["s", "eshape"], ["e"]),
             helper.make_node("Relu", ["e"], ["e2"]),
             helper.make_node("Mul", ["e2", "gain"], ["y"])]
    inits = [helper.make_tensor("ends", TensorProto.INT64, [1], [100]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [0])]
    g = helper.make_graph(nodes, "bind", inputs, [vi("y", TensorProto.FLOAT, [2, 2, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.fixture
def shape_path(tmp_path) -> Path:
    path = tmp_path / "shape.onnx"
    onnx.save(shape_model(), str(path))
    return path


def ort_run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_unbound_model_is_refused_and_names_the_option(shape_path, tmp_path):
    with pytest.raises(UnsupportedError, match=r"--bind shape="):
        mlcc.compile(shape_path, tmp_path / "out")


def test_cli_bind_folds_the_inputs_away(shape_path, tmp_path):
    np.save(tmp_path / "gain.npy", BOUND["gain"])
    out = tmp_path / "out"
    r = cli("compile", shape_path, "-o", out, "--bind", "shape=3,4", "--bind", "starts=1",
            "--bind", "eshape=2,2,4", "--bind", f"gain={tmp_path / 'gain.npy'}")
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["inputs"] == [{"name": "x", "dtype": "float32", "shape": [2, 6]}]
    assert m["bound"] == [
        {"name": "shape", "dtype": "int64", "shape": [2], "values": [3, 4]},
        {"name": "starts", "dtype": "int64", "shape": [1], "values": [1]},
        {"name": "eshape", "dtype": "int64", "shape": [3], "values": [2, 2, 4]},
        {"name": "gain", "dtype": "float32", "shape": [], "values": [0.5]}]
    header = (out / "model.h").read_text()
    assert "const float *x," in header and "gain" not in header and "eshape" not in header
    x = np.arange(12, dtype=np.float32).reshape(2, 6) - 5
    got = mlcc.load(out).run({"x": x})["y"]
    np.testing.assert_allclose(got, ort_run(shape_path, {"x": x, **BOUND})[0], atol=1e-6)
    with pytest.raises(InputError):        # the Python binding takes x only
        mlcc.load(out).run({"x": x, "gain": BOUND["gain"]})


def test_api_bind_compile_verify_bench(shape_path, tmp_path):
    bind = {"shape": [3, 4], "starts": 1, "eshape": BOUND["eshape"], "gain": BOUND["gain"]}
    res = mlcc.compile(shape_path, tmp_path / "out", bind=bind)
    assert res.graph.inputs == ["x"]
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
    got = mlcc.load(tmp_path / "out").run({"x": x})["y"]
    np.testing.assert_allclose(got, ort_run(shape_path, {"x": x, **BOUND})[0], atol=1e-6)
    v = mlcc.verify(shape_path, bind=bind)
    assert v.ok and [c.name for c in v.outputs] == ["y"]
    b = mlcc.bench(shape_path, target="x86", bind=bind, runs=2)
    assert b.outputs_agree and b.shapes == {"x": (2, 6)}
    assert any("bound at compile time: shape, starts, eshape, gain" in n for n in b.notes)


def test_cli_verify_feeds_the_bound_values_to_onnxruntime(shape_path, tmp_path):
    binds = ["--bind", "shape=3,4", "--bind", "starts=1", "--bind", "eshape=2,2,4",
             "--bind", "gain=0.5"]
    r = cli("verify", shape_path, *binds)
    assert r.exit_code == 0 and "verified" in r.output, r.output
    np.savez(tmp_path / "in.npz", x=np.ones((2, 6), np.float32))
    r = cli("verify", shape_path, *binds, "-i", tmp_path / "in.npz", "--per-layer")
    assert r.exit_code == 0 and "verified" in r.output, r.output
    # a different bound value gives a different, still verified, model
    r = cli("verify", shape_path, *binds[:6], "--bind", "gain=-2")
    assert r.exit_code == 0 and "verified" in r.output, r.output
    np.savez(tmp_path / "both.npz", x=np.ones((2, 6), np.float32), gain=np.float32(1))
    r = cli("verify", shape_path, *binds, "-i", tmp_path / "both.npz")
    assert r.exit_code == 1 and "'gain', which --bind gives at compile time" in r.output


def test_large_bound_values_are_recorded_by_sha256(tmp_path):
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "big",
                          [vi("x", TensorProto.FLOAT, [100]), vi("w", TensorProto.FLOAT, [100])],
                          [vi("y", TensorProto.FLOAT, [100])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "big.onnx"))
    w = np.arange(100, dtype=np.float32) / 7
    res = mlcc.compile(tmp_path / "big.onnx", tmp_path / "out", bind={"w": w})
    import hashlib
    assert res.manifest["bound"] == [{"name": "w", "dtype": "float32", "shape": [100],
                                      "sha256": hashlib.sha256(w.tobytes()).hexdigest()}]
    x = np.ones(100, np.float32)
    np.testing.assert_allclose(mlcc.load(tmp_path / "out").run({"x": x})["y"], x + w)


def test_bound_input_with_dynamic_dimension_takes_the_values_count(tmp_path):
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"])], "dyn",
                          [vi("x", TensorProto.FLOAT, ["n"]), vi("b", TensorProto.FLOAT, ["n"])],
                          [vi("y", TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "dyn.onnx"))
    r = cli("compile", tmp_path / "dyn.onnx", "-o", tmp_path / "out", "--shape", "x=3",
            "--bind", "b=1,2.5,-3")
    assert r.exit_code == 0, r.output
    got = mlcc.load(tmp_path / "out").run({"x": np.zeros(3, np.float32)})["y"]
    np.testing.assert_array_equal(got, np.array([1, 2.5, -3], np.float32))


@pytest.mark.parametrize("binds, message", [
    (["nosuch=1"], "--bind nosuch: 'nosuch' is not an input of the model; the model's inputs "
                   "are: x, shape, starts, eshape, gain"),
    (["ends=1"], "--bind ends: 'ends' is an initializer (already a constant)"),
    (["shape=3,4,1"], "--bind shape: 3 values given, but input 'shape' has shape [2] "
                      "(2 values)"),
    (["shape=3.5,4"], "--bind shape: input 'shape' is int64; 3.5 is not an integer"),
    (["shape=3,x"], "--bind shape: 'x' is not a number"),
    (["shape"], "--bind 'shape': expected NAME=V1,V2,... or NAME=FILE.npy"),
    (["shape=3,4", "shape=3,4"], "--bind shape is given twice"),
    (["starts=99999999999999999999"], "--bind starts: the value (object) is not numbers"),
    (["gain=GAIN64"], "--bind gain: the value is float64, but input 'gain' is float32"),
    (["gain=MISSING"], "--bind gain: cannot read"),
    (["eshape=EMAT"], "--bind eshape: the value has shape [3, 1], but input 'eshape' has "
                      "shape [3]"),
])
def test_bind_errors_are_one_line_and_write_nothing(shape_path, tmp_path, binds, message):
    np.save(tmp_path / "gain64.npy", np.array(0.5))
    np.save(tmp_path / "emat.npy", np.ones((3, 1), np.int64))
    files = {"GAIN64": tmp_path / "gain64.npy", "MISSING": tmp_path / "missing.npy",
             "EMAT": tmp_path / "emat.npy"}
    args = []
    for b in binds:
        for key, path in files.items():
            b = b.replace(key, str(path))
        args += ["--bind", b]
    out = tmp_path / "out"
    for command in (["compile", shape_path, "-o", out], ["verify", shape_path]):
        r = CliRunner().invoke(main, [str(a) for a in command + args])
        assert r.exit_code == 1, r.output
        assert r.output.startswith("mlcc: error: ") and message in r.output, r.output
        assert r.output.count("\n") == 1 and "Traceback" not in r.output
        assert not out.exists()


def test_api_bind_type_errors(shape_path, tmp_path):
    with pytest.raises(InputError, match="the value is int32, but input 'shape' is int64"):
        mlcc.compile(shape_path, tmp_path / "out", bind={"shape": np.array([3, 4], np.int32)})
    with pytest.raises(InputError, match="out of the range of int64"):
        mlcc.compile(shape_path, tmp_path / "out", bind={"starts": [2 ** 63]})
    assert not (tmp_path / "out").exists()


def test_bound_input_is_not_an_input_of_the_javascript_wrapper(shape_path, tmp_path):
    mlcc.compile(shape_path, tmp_path / "web", target="wasm", build=False, bind=BOUND)
    text = (tmp_path / "web" / "model.mjs").read_text()
    info = json.loads(text.split("const MODEL = ", 1)[1].split(";\n", 1)[0])
    assert [i["name"] for i in info["inputs"]] == ["x"]
