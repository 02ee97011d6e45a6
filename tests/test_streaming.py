"""Streaming state: models that take a state and return the next one, run chunk by chunk with
the state carried between calls, against onnxruntime run the same way. The C API allows an
output to be the very memory of an input (docs/c-api.md): the C example
(examples/streaming/stream.c) passes each state output the buffer of its state input, so
these tests check the generated code is right when they alias (codegen/lower.py computes an
output written before an input's last read in the arena and copies it at the end)."""
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "streaming"))
import stream  # noqa: E402

vi = helper.make_tensor_value_info


def test_streaming_example_matches_onnxruntime(tmp_path, capsys):
    """The example (`make streaming`): the VAD (LSTM in an If on sr, bound to 16000) and the
    GRU keyword spotter, from Python and from C with the state in place."""
    assert stream.main(["--out", str(tmp_path), "--chunks", "6"]) == 0
    out = capsys.readouterr().out
    assert "outputs match onnxruntime chunk by chunk" in out
    assert out.count("C (state in place)") == 2


def _hazard_models():
    """s_next is written before an input is read again: by a Neg before y = s * x reads s,
    and by a Loop whose body reads x on every iteration, its carried value (the Loop's output
    s_next) written at the end of each one."""
    f = T.FLOAT
    neg = helper.make_graph(
        [helper.make_node("Neg", ["s"], ["s_next"], name="first"),
         helper.make_node("Mul", ["s", "x"], ["y"], name="later")], "neg",
        [vi("s", f, [5]), vi("x", f, [5])], [vi("s_next", f, [5]), vi("y", f, [5])])
    body = helper.make_graph(
        [helper.make_node("Mul", ["v", "half"], ["v1"], name="decay"),
         helper.make_node("Add", ["v1", "x"], ["v2"], name="feed")], "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("v", f, [5])],
        [vi("c", T.BOOL, []), vi("v2", f, [5])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    loop = helper.make_graph(
        [helper.make_node("Loop", ["three", "", "s"], ["s_next"], body=body, name="loop"),
         helper.make_node("Add", ["s_next", "s"], ["y"], name="after")], "loop",
        [vi("s", f, [5]), vi("x", f, [5])], [vi("s_next", f, [5]), vi("y", f, [5])],
        [numpy_helper.from_array(np.array(3, np.int64), "three")])
    out = {}
    for g in (neg, loop):
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        out[g.name] = m
    return out


@pytest.mark.parametrize("name", ["neg", "loop"])
def test_state_output_in_the_memory_of_its_input(tmp_path, name):
    model = _hazard_models()[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    folder = stream.compile_model(name, path, tmp_path)
    assert "output copy" in (folder / "model.c").read_text()
    rng = np.random.default_rng(3)
    chunks = [{"x": rng.standard_normal(5).astype(np.float32)} for _ in range(4)]
    ref = stream.reference(name, path, chunks)
    got, _ = stream.run_c(name, folder, chunks)
    assert stream.max_error(got, ref) < 1e-5
    assert stream.max_error(stream.run_python(folder, path, chunks), ref) < 1e-5
