"""If: a streaming detector whose sample-rate input picks a branch (If on sr == 16000, different
Conv/MatMul in each branch, a nested If in one of them) compiles with --bind sr=... (the If
folded, the branch inlined) and agrees with onnxruntime; without the binding both branches are
compiled behind a C `if` and the one the run-time condition picks runs."""
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import mlcc
from mlcc.cli import main
from mlcc.errors import UnsupportedError

rng = np.random.default_rng(7)
vi = helper.make_tensor_value_info


def _branch(name: str, kernel: int, stride: int, nested: bool) -> onnx.GraphProto:
    """Conv1d(x) -> Relu -> mean over time -> (+/- state h) -> MatMul; both branches use the
    same value names (sibling scopes), the weights are the branch's own initializers, the
    MatMul's is an outer-scope initializer of the main graph."""
    w = numpy_helper.from_array(rng.standard_normal((8, 1, kernel)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[stride], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], axes=[2], keepdims=0, name="mean")]
    if nested:   # s = m + h above 4 kHz, m - h otherwise: an If in a branch, on sr again
        inner = [helper.make_graph([helper.make_node(op, ["m", "h"], ["t"], name="mix")],
                                   f"{name}_{op}", [], [vi("t", TensorProto.FLOAT, [1, 8])])
                 for op in ("Add", "Sub")]
        nodes += [helper.make_node("Greater", ["sr", "four_k"], ["hi"], name="is_hi"),
                  helper.make_node("If", ["hi"], ["s"], then_branch=inner[0],
                                   else_branch=inner[1], name="if_hi")]
    else:
        nodes.append(helper.make_node("Add", ["m", "h"], ["s"], name="mix"))
    nodes += [helper.make_node("MatMul", ["s", f"proj_{name}"], ["p"], name="proj"),
              helper.make_node("Tanh", ["s"], ["hn"], name="state")]
    return helper.make_graph(nodes, name, [], [vi("p", TensorProto.FLOAT, [1, 2]),
                                               vi("hn", TensorProto.FLOAT, [1, 8])], [w])


def detector() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(16000, np.int64), "sixteen_k"),
             numpy_helper.from_array(np.array(4000, np.int64), "four_k"),
             numpy_helper.from_array(rng.standard_normal((8, 2)).astype(np.float32), "proj_16k"),
             numpy_helper.from_array(rng.standard_normal((8, 2)).astype(np.float32), "proj_8k")]
    nodes = [helper.make_node("Equal", ["sr", "sixteen_k"], ["is_16k"], name="is_16k"),
             helper.make_node("If", ["is_16k"], ["logits", "state"], name="by_rate",
                              then_branch=_branch("16k", 5, 2, False),
                              else_branch=_branch("8k", 3, 1, True)),
             helper.make_node("Softmax", ["logits"], ["prob"], axis=-1, name="softmax")]
    g = helper.make_graph(nodes, "vad", [vi("x", TensorProto.FLOAT, [1, 1, 64]),
                                          vi("sr", TensorProto.INT64, []),
                                          vi("h", TensorProto.FLOAT, [1, 8])],
                          [vi("prob", TensorProto.FLOAT, [1, 2]),
                           vi("state", TensorProto.FLOAT, [1, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.fixture(scope="module")
def vad_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("vad") / "vad.onnx"
    onnx.save(detector(), str(path))
    return path


def _ort(path, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip(["prob", "state"], sess.run(["prob", "state"], feeds)))


@pytest.mark.parametrize("sr", [16000, 8000, 3000])
def test_if_on_a_bound_sample_rate_matches_onnxruntime(vad_path, tmp_path, sr):
    res = mlcc.compile(vad_path, tmp_path / "out", bind={"sr": sr})
    assert res.graph.inputs == ["x", "h"]
    ops = sorted({n.op_type for n in res.graph.nodes})
    assert "If" not in ops and "Conv" in ops
    x = rng.standard_normal((1, 1, 64)).astype(np.float32)
    h = rng.standard_normal((1, 8)).astype(np.float32)
    got = mlcc.load(tmp_path / "out").run({"x": x, "h": h})
    ref = _ort(vad_path, {"x": x, "h": h, "sr": np.array(sr, np.int64)})
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6)
    assert mlcc.verify(vad_path, bind={"sr": sr}).ok


def test_inlined_names_are_prefixed_unique_and_deterministic(vad_path, tmp_path):
    g = mlcc.compile(vad_path, tmp_path / "a", bind={"sr": 8000}, build=False).graph
    names = [n.name for n in g.nodes]
    assert len(names) == len(set(names))
    assert any(n.startswith("by_rate/conv") for n in names)
    fused = [f for n in g.nodes for f in [n.name] + n.fused]
    assert "by_rate/if_hi/mix" in fused           # the nested If's branch, inlined in turn
    mlcc.compile(vad_path, tmp_path / "b", bind={"sr": 8000}, build=False)
    assert (tmp_path / "a" / "model.c").read_bytes() == (tmp_path / "b" / "model.c").read_bytes()


def test_cli_verify_with_bind_picks_the_branch(vad_path, tmp_path):
    r = CliRunner().invoke(main, ["verify", str(vad_path), "--bind", "sr=16000"])
    assert r.exit_code == 0 and "verified" in r.output, r.output
    r = CliRunner().invoke(main, ["compile", str(vad_path), "-o", str(tmp_path / "o"),
                                  "--bind", "sr=8000"])
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert [i["name"] for i in m["inputs"]] == ["x", "h"]
    assert m["bound"] == [{"name": "sr", "dtype": "int64", "shape": [], "values": [8000]}]


def test_if_on_a_run_time_condition_runs_the_taken_branch(vad_path, tmp_path):
    """Without --bind, sr stays an input: both branches are compiled, each inside a C `if` on
    the condition (the nested If's branches on both conditions), and Where picks the outputs;
    the memory plan keeps the branches' outputs apart until then."""
    res = mlcc.compile(vad_path, tmp_path / "out")
    assert res.graph.inputs == ["x", "sr", "h"]
    text = (tmp_path / "out" / "model.c").read_text()
    run = text[text.index("int vad_run("):]
    assert run.count("if (*(const uint8_t *)") == 1 and run.count("if (!*(const uint8_t *)") == 4
    assert " && *(const uint8_t *)" in run and " && !*(const uint8_t *)" in run
    assert run.count("mlcc_where(") == 3
    names = [n.name for n in res.graph.nodes]
    assert len(names) == len(set(names))
    assert {"by_rate/then/conv", "by_rate/else/conv", "by_rate/else/if_hi/then/mix",
            "by_rate/select:logits"} <= set(names) | {f for n in res.graph.nodes for f in n.fused}
    m = mlcc.load(tmp_path / "out")
    for sr in (16000, 8000, 3000, 16000):
        x = rng.standard_normal((1, 1, 64)).astype(np.float32)
        h = rng.standard_normal((1, 8)).astype(np.float32)
        feeds = {"x": x, "sr": np.array(sr, np.int64), "h": h}
        got = m.run(feeds)
        ref = _ort(vad_path, feeds)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=f"{sr} {k}")


def test_run_time_if_with_branches_of_different_shapes_is_refused(tmp_path):
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [vi("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Slice", ["x", "zero", "two"], ["e"])], "else",
                              [], [vi("e", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
         helper.make_node("Greater", ["mx", "zerof"], ["pos"]),
         helper.make_node("If", ["pos"], ["y"], then_branch=then, else_branch=other,
                          name="pick")],
        "g", [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, ["n"])],
        [numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([2], np.int64), "two"),
         numpy_helper.from_array(np.array(0, np.float32), "zerof")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError) as info:
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    msg = info.value.message
    assert "node 'pick' (If" in msg and "known only at run time" in msg, msg
    assert "float32[4] and float32[2]" in msg and "same type and static shape" in msg, msg
    assert not (tmp_path / "out").exists()
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o",
                                  str(tmp_path / "out")])
    assert r.exit_code == 3 and "pick" in r.output and "Traceback" not in r.output


def test_if_branch_returning_constants_and_repeated_values(tmp_path):
    """Branch outputs that are not one node's own output (a branch initializer, the same
    value twice) reach the If's outputs through copies."""
    then = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "then", [],
                             [vi("b", TensorProto.FLOAT, [3]), vi("k", TensorProto.FLOAT, [3]),
                              vi("b", TensorProto.FLOAT, [3])],
                             [numpy_helper.from_array(np.array([1, 2, 3], np.float32), "k")])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["n"])], "else", [],
                              [vi("n", TensorProto.FLOAT, [3])] * 3)
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("If", ["flag"], ["o1", "o2", "o3"], then_branch=then,
                          else_branch=other, name="pick"),
         helper.make_node("Sum", ["o1", "o2", "o3"], ["y"])],
        "g", [vi("x", TensorProto.FLOAT, [3]), vi("flag", TensorProto.BOOL, [])],
        [vi("y", TensorProto.FLOAT, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "m.onnx"))
    x = np.array([-1, 0.5, 2], np.float32)
    for flag, want in ((True, 2 * np.maximum(x, 0) + [1, 2, 3]), (False, -3 * np.maximum(x, 0))):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / f"o{flag}", bind={"flag": flag})
        got = mlcc.load(tmp_path / f"o{flag}").run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6)
        # (onnxruntime 1.32 drops a branch output given twice; onnx.reference agrees with us)
        ref = ReferenceEvaluator(m).run(None, {"x": x, "flag": np.array(flag)})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_run_time_if_on_aarch64(vad_path, tmp_path):
    """The guarded calls are plain C: the same model built for aarch64 (qemu-user) agrees."""
    from test_targets_arm import MISSING
    if MISSING:
        pytest.skip(MISSING)
    mlcc.compile(vad_path, tmp_path / "arm", target="arm")
    m = mlcc.load(tmp_path / "arm")
    for sr in (16000, 8000, 3000):
        feeds = {"x": rng.standard_normal((1, 1, 64)).astype(np.float32),
                 "sr": np.array(sr, np.int64), "h": rng.standard_normal((1, 8)).astype(np.float32)}
        got, ref = m.run(feeds), _ort(vad_path, feeds)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=f"{sr} {k}")


def _rate_switch(tmp_path, name: str, shape_dependent: bool) -> Path:
    """x [t, 1, 4] -> If sr == 16000: LSTM(x), else LSTM(x with its leading 1 squeezed away),
    which is invalid (rank 2) for t = 1. With `shape_dependent` the squeeze sits in an If on
    x's shape (as in silero-vad), so that onnxruntime cannot see the rank before it runs."""
    w = numpy_helper.from_array(rng.standard_normal((1, 12, 4)).astype(np.float32), "w")
    r = numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "r")

    def branch(rate, squeeze):
        if not squeeze:
            nodes = [helper.make_node("Identity", ["x"], ["xs"], name="keep")]
        elif shape_dependent:
            inner = [helper.make_graph([helper.make_node(*op)], f"{rate}_{i}", [],
                                       [vi(f"xs{i}", TensorProto.FLOAT, None)])
                     for i, op in enumerate((("Squeeze", ["x", "zero"], ["xs0"]),
                                             ("Identity", ["x"], ["xs1"])))]
            nodes = [helper.make_node("Shape", ["x"], ["shape"], end=1),
                     helper.make_node("Equal", ["shape", "one"], ["single"]),
                     helper.make_node("Squeeze", ["single"], ["lead_is_1"]),
                     helper.make_node("If", ["lead_is_1"], ["xs"], then_branch=inner[0],
                                      else_branch=inner[1], name="squeeze")]
        else:
            nodes = [helper.make_node("Squeeze", ["x", "zero"], ["xs"], name="squeeze")]
        nodes.append(helper.make_node("LSTM", ["xs", "w", "r"], ["", "hn"], hidden_size=3,
                                      name="rnn"))
        return helper.make_graph(nodes, rate, [], [vi("hn", TensorProto.FLOAT, None)])
    g = helper.make_graph(
        [helper.make_node("Equal", ["sr", "sixteen_k"], ["is_16k"], name="is_16k"),
         helper.make_node("If", ["is_16k"], ["h"], then_branch=branch("16k", False),
                          else_branch=branch("8k", True), name="by_rate")],
        "g", [vi("x", TensorProto.FLOAT, ["t" if shape_dependent else 1, 1, 4]),
              vi("sr", TensorProto.INT64, [])],
        [vi("h", TensorProto.FLOAT, [1, 1, 3])],
        [w, r, numpy_helper.from_array(np.array(16000, np.int64), "sixteen_k"),
         numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([1], np.int64), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    path = tmp_path / name
    onnx.save(m, str(path))
    return path


def test_invalid_branch_of_a_run_time_if_names_the_input_to_bind(tmp_path):
    """A branch written for other shapes (silero-vad's 8 kHz decoder fed a 16 kHz chunk) is
    invalid for the shapes given; the error says which input to bind to compile only the
    branch taken, and binding it compiles and verifies."""
    path = _rate_switch(tmp_path, "m.onnx", shape_dependent=True)
    out = CliRunner().invoke(main, ["compile", str(path), "--shape", "x=1,1,4",
                                    "-o", str(tmp_path / "out")])
    assert out.exit_code != 0 and "Traceback" not in out.output, out.output
    assert "by_rate/else/rnn" in out.output and "X must be 3-D, not float32[1x4]" in out.output
    assert "'is_16k' is False" in out.output and "--bind sr=..." in out.output, out.output
    out = CliRunner().invoke(main, ["verify", str(path), "--shape", "x=1,1,4",
                                    "--bind", "sr=16000", "-o", str(tmp_path / "bound")])
    assert out.exit_code == 0 and "verified" in out.output, out.output


def test_verify_says_when_onnxruntime_cannot_load_the_model(tmp_path):
    """onnxruntime's shape inference refuses the invalid branch when it loads the model, which
    mlcc (the branch not taken once sr is bound) compiles: verify says so, exit code 1, not a
    bug of mlcc."""
    path = _rate_switch(tmp_path, "static.onnx", shape_dependent=False)
    out = CliRunner().invoke(main, ["verify", str(path), "--bind", "sr=16000", "-o",
                                    str(tmp_path / "static")])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    assert "onnxruntime, the reference mlcc compares against, cannot load the model" \
        in out.output and "rank 3" in out.output, out.output


@pytest.fixture(scope="module")
def silero_path():
    import fetch_models as fm
    try:
        return fm.fetch("silero_vad")
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the silero-vad wheel: {exc}")


def _chunks(samples: int, count: int = 3) -> list[dict]:
    """Speech-like chunks (a chirp in noise) and a carried state, as a stream feeds them."""
    t = np.arange(samples * count, dtype=np.float32) / 16000
    audio = (0.3 * np.sin(2 * np.pi * (200 + 600 * t) * t)
             + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    return [audio[i * samples:(i + 1) * samples][None] for i in range(count)]


def test_silero_vad_streams_like_onnxruntime(silero_path, tmp_path):
    """A real streaming model (silero-vad 6.2.3: If on the sample rate around an STFT, a conv
    encoder and an LSTM cell; nested Ifs on shapes): with `sr` bound to each rate, and with
    `sr` a run-time input (both branches compiled behind a C `if`, 256-sample chunks, valid for
    both), three chunks in a row carry the state like onnxruntime's."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(silero_path), providers=["CPUExecutionProvider"])
    builds = [(16000, 512, {"sr": [16000]}), (8000, 256, {"sr": [8000]}), (None, 256, None)]
    for sr, samples, bind in builds:
        folder = tmp_path / f"b{sr}_{samples}"
        mlcc.compile(silero_path, folder, shapes={"input": (1, samples), "state": (2, 1, 128)},
                     bind=bind)
        model = mlcc.load(folder)
        for rate in ([sr] if sr else [16000, 8000]):
            state = ref_state = np.zeros((2, 1, 128), np.float32)
            for chunk in _chunks(samples):
                feeds = {"input": chunk, "state": state}
                if sr is None:
                    feeds["sr"] = np.array(rate, np.int64)
                got = model.run(feeds)
                ref, ref_state = sess.run(None, {"input": chunk, "state": ref_state,
                                                 "sr": np.array(rate, np.int64)})
                np.testing.assert_allclose(got["output"], ref, atol=1e-5)
                np.testing.assert_allclose(got["stateN"], ref_state, atol=1e-4)
                state = got["stateN"]
    # 512 samples are a 16 kHz chunk only: the 8 kHz branch cannot take them (its LSTM would
    # get a rank-5 input), so with `sr` at run time the error names the input to bind
    with pytest.raises(mlcc.MlccError) as info:
        mlcc.compile(silero_path, tmp_path / "bad", shapes={"input": (1, 512),
                                                            "state": (2, 1, 128)})
    assert "X must be 3-D" in info.value.message and "--bind sr=..." in info.value.message


def test_run_time_if_on_a_condition_through_a_no_op_cast(tmp_path):
    """openWakeWord's hey_jarvis model: Cast(GreaterOrEqual(p, threshold), to=BOOL) -> If. The
    bool -> bool Cast is removed as a no-op; the guards of both branches read its input from
    then on (they kept the Cast's output, which no longer existed: KeyError in the memory
    plan). Both branches run, against onnxruntime."""
    w = numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w")
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                              helper.make_node("Sigmoid", ["m"], ["t"])], "then", [],
                             [vi("t", TensorProto.FLOAT, [1, 3])], [w])
    other = helper.make_graph([helper.make_node("Identity", ["p"], ["e"])], "else", [],
                              [vi("e", TensorProto.FLOAT, [1, 3])])
    g = helper.make_graph(
        [helper.make_node("ReduceMax", ["p"], ["top"], keepdims=0),
         helper.make_node("GreaterOrEqual", ["top", "threshold"], ["ge"]),
         helper.make_node("Cast", ["ge"], ["cond"], to=TensorProto.BOOL),
         helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other,
                          name="verifier")],
        "g", [vi("x", TensorProto.FLOAT, [1, 5]), vi("p", TensorProto.FLOAT, [1, 3])],
        [vi("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "threshold")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    model = mlcc.load(tmp_path / "out")
    import onnxruntime as ort
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((1, 5)).astype(np.float32)
    for p in ([[0.1, 0.7, 0.2]], [[0.1, 0.3, 0.2]]):
        feeds = {"x": x, "p": np.array(p, np.float32)}
        np.testing.assert_allclose(model.run(feeds)["y"], sess.run(None, feeds)[0], rtol=1e-6)
