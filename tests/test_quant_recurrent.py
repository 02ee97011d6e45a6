"""int8 post-training quantization of recurrent models (mlcc/quant/recurrent.py): the input
projections of LSTM, GRU and RNN on the integer GEMM (uint8 X, int8 W per channel), the
recurrent product and gates in float; checked by SQNR against float on models with realistic
inputs (log-mel-like features, smooth in time and frequency) and trained-like weights
(Xavier W, orthogonal R), calibrated on other samples than those measured. Also: a run-time
Loop's body stays float under --quantize, and gives the float answer."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.api import QuantizeConfig
from util import reference_outputs

F = TensorProto.FLOAT
SEQ, FEATURES = 40, 20


def features(n: int, seed: int, batch: int = 1, layout: int = 0) -> np.ndarray:
    """n samples of log-mel-like features [SEQ, batch, FEATURES] (layout 1: [batch, SEQ,
    FEATURES]): a few formant-like ridges drifting over time, plus noise, around -4."""
    rng = np.random.default_rng(seed)
    t = np.arange(SEQ)[:, None]
    f = np.arange(FEATURES)[None, :]
    out = []
    for _ in range(n * batch):
        x = -4.0 + 0.3 * rng.standard_normal((SEQ, FEATURES))
        for _k in range(3):
            centre = rng.uniform(2, FEATURES - 2) + rng.uniform(-3, 3) * np.sin(
                t / rng.uniform(4, 12) + rng.uniform(0, 6))
            x += rng.uniform(1, 3) * np.exp(-0.5 * ((f - centre) / rng.uniform(1, 3)) ** 2)
        out.append(x)
    a = np.asarray(out, np.float32).reshape(n, batch, SEQ, FEATURES)
    return a if layout else a.transpose(0, 2, 1, 3).copy()


def _orthogonal(rng, rows: int, cols: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((max(rows, cols), min(rows, cols))))
    return (q if rows >= cols else q.T)[:rows, :cols]


def cell_weights(rng, op: str, nd: int, hidden: int, width: int) -> dict[str, np.ndarray]:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    lim = np.sqrt(6.0 / (width + hidden))
    w = rng.uniform(-lim, lim, (nd, gates * hidden, width))
    r = np.stack([np.concatenate([_orthogonal(rng, hidden, hidden) for _ in range(gates)])
                  for _ in range(nd)])
    b = rng.normal(0, 0.1, (nd, 2 * gates * hidden))
    if op == "LSTM":    # forget-gate bias 1, as trained LSTMs tend to have
        b[:, 2 * hidden:3 * hidden] += 1.0
    return {"W": w.astype(np.float32), "R": r.astype(np.float32), "B": b.astype(np.float32)}


def kws_model(layout: int = 0, batch: int = 1, lengths: bool = False) -> onnx.ModelProto:
    """features -> bidirectional LSTM (hidden 48) -> GRU (hidden 32, linear_before_reset)
    -> MatMul + Add to 12 classes per step: logits [SEQ, batch, 12] (layout 1: [batch, SEQ,
    12]) and the GRU's last state. With `lengths`, a run-time sequence_lens and initial
    states for the LSTM."""
    rng = np.random.default_rng(180)
    inits, nodes = [], []

    def add(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    lstm = cell_weights(rng, "LSTM", 2, 48, FEATURES)
    gru = cell_weights(rng, "GRU", 1, 32, 96)
    inputs = [helper.make_tensor_value_info(
        "x", F, [batch, SEQ, FEATURES] if layout else [SEQ, batch, FEATURES])]
    lstm_ins = ["x", add("lstm.W", lstm["W"]), add("lstm.R", lstm["R"]), add("lstm.B", lstm["B"])]
    if lengths:
        state = [batch, 2, 48] if layout else [2, batch, 48]
        inputs += [helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]),
                   helper.make_tensor_value_info("h0", F, state),
                   helper.make_tensor_value_info("c0", F, state)]
        lstm_ins += ["lens", "h0", "c0"]
    nodes.append(helper.make_node("LSTM", lstm_ins, ["y1"], hidden_size=48, layout=layout,
                                  direction="bidirectional", name="lstm"))
    if layout:      # y1 [batch, seq, 2, 48]
        nodes.append(helper.make_node("Reshape", ["y1", add("s1", np.array(
            [batch, SEQ, 96], np.int64))], ["x2"], name="join"))
    else:           # y1 [seq, 2, batch, 48]
        nodes += [helper.make_node("Transpose", ["y1"], ["t1"], perm=[0, 2, 1, 3], name="t1"),
                  helper.make_node("Reshape", ["t1", add("s1", np.array(
                      [SEQ, batch, 96], np.int64))], ["x2"], name="join")]
    nodes.append(helper.make_node("GRU", ["x2", add("gru.W", gru["W"]), add("gru.R", gru["R"]),
                                          add("gru.B", gru["B"])], ["y2", "state"],
                                  hidden_size=32, layout=layout, linear_before_reset=1,
                                  name="gru"))
    shape = [batch, SEQ, 32] if layout else [SEQ, batch, 32]
    nodes += [helper.make_node("Reshape", ["y2", add("s2", np.array(shape, np.int64))], ["z"],
                               name="flat"),
              helper.make_node("MatMul", ["z", add("fc.w", (rng.standard_normal((32, 12))
                                                            / np.sqrt(32)).astype(np.float32))],
                               ["fc"], name="fc"),
              helper.make_node("Add", ["fc", add("fc.b", rng.normal(0, 0.1, 12).astype(
                  np.float32))], ["logits"], name="fc_bias")]
    state = [batch, 1, 32] if layout else [1, batch, 32]
    g = helper.make_graph(nodes, "kws", inputs,
                          [helper.make_tensor_value_info("logits", F, shape[:2] + [12]),
                           helper.make_tensor_value_info("state", F, state)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    return float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((ref - got) ** 2), 1e-30)))


def _extra_feeds(n: int, batch: int, layout: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    state = (n, batch, 2, 48) if layout else (n, 2, batch, 48)
    return {"lens": rng.integers(1, SEQ + 1, (n, batch)).astype(np.int32),
            "h0": (0.5 * rng.standard_normal(state)).astype(np.float32),
            "c0": (0.5 * rng.standard_normal(state)).astype(np.float32)}


def quantized(tmp_path, model, calib: dict, target: str = "x86", **cfg):
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "calib.npz", **calib)
    res = mlcc.compile(tmp_path / "m.onnx", tmp_path / f"int8_{target}", target=target,
                       quantize=QuantizeConfig(tmp_path / "calib.npz", **cfg))
    return res, mlcc.load(tmp_path / f"int8_{target}")


def test_lstm_gru_input_projections_on_the_integer_gemm(tmp_path):
    """SQNR >= 30 dB of the logits and the state against onnxruntime's float outputs on 8
    held-out samples; the LSTM and GRU read their projections from an int8 QFC (no float
    W panels in the program), and the layers say so."""
    model = kws_model()
    res, lib = quantized(tmp_path, model, {"x": features(16, seed=1)})
    c = (tmp_path / "int8_x86" / "model.c").read_text()
    assert c.count("mlcc_u8_fc(") == 3                  # lstm, gru projections; fc
    assert "lstm_w_panels" not in c and "gru_w_panels" not in c
    layers = {layer.node: layer for layer in res.quant.layers}
    assert layers["lstm"].integer and "int8 GEMM" in layers["lstm"].note
    assert layers["gru"].integer
    refs, gots = {"logits": [], "state": []}, {"logits": [], "state": []}
    for x in features(8, seed=2):
        ref = reference_outputs(model, {"x": x})
        got = lib.run({"x": x})
        for k in refs:
            refs[k].append(ref[k])
            gots[k].append(got[k])
    for k in refs:
        db = sqnr_db(np.stack(refs[k]), np.stack(gots[k]))
        assert db >= 30, (k, db)
        assert db < 80, (k, db)        # it is quantized: not the float answer


@pytest.mark.parametrize("per_channel", [True, False])
def test_layout_1_lengths_states_and_batch(tmp_path, per_channel):
    """Layout 1, a batch of 3 with run-time sequence lengths and initial states: the int8
    build against mlcc's float build of the same model (onnxruntime has no layout 1), SQNR
    >= 30 dB, per channel and per tensor; steps past a sequence's end are exactly zero."""
    model = kws_model(layout=1, batch=3, lengths=True)
    calib = {"x": features(12, seed=3, batch=3, layout=1), **_extra_feeds(12, 3, 1, 4)}
    _, lib = quantized(tmp_path, model, calib, per_channel=per_channel)
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "float")
    ref_lib = mlcc.load(tmp_path / "float")
    xs, extra = features(6, seed=5, batch=3, layout=1), _extra_feeds(6, 3, 1, 6)
    refs, gots = [], []
    for k in range(6):
        feeds = {"x": xs[k], **{n: a[k] for n, a in extra.items()}}
        refs.append(ref_lib.run(feeds)["state"])
        gots.append(lib.run(feeds)["state"])
    assert sqnr_db(np.stack(refs), np.stack(gots)) >= 30


@pytest.mark.parametrize("op", ["RNN", "GRU"])
def test_one_node_models_and_keep_float(tmp_path, op):
    """A lone RNN (Tanh) or GRU (linear_before_reset 0) reading the graph input: quantized
    within 30 dB (the GRU's --report row too); --keep-float NODE keeps it in float (its W
    panels back, no QFC)."""
    rng = np.random.default_rng(7)
    w = cell_weights(rng, op, 1, 24, FEATURES)
    node = helper.make_node(op, ["x", "W", "R", "B"], ["y"], hidden_size=24, name="cell")
    g = helper.make_graph([node], "one", [helper.make_tensor_value_info("x", F,
                                                                       [SEQ, 1, FEATURES])],
                          [helper.make_tensor_value_info("y", F, [SEQ, 1, 1, 24])],
                          [numpy_helper.from_array(a, n) for n, a in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    # standardized features: the RNN's tanh would saturate on raw log-mels
    calib = features(16, seed=8)
    calib = (calib + 4.0) / 1.5
    _, lib = quantized(tmp_path, model, {"x": calib})
    xs = (features(4, seed=9) + 4.0) / 1.5
    ref = np.stack([reference_outputs(model, {"x": x})["y"] for x in xs])
    got = np.stack([lib.run({"x": x})["y"] for x in xs])
    assert 30 <= sqnr_db(ref, got) < 80
    if op == "GRU":     # the layer report measures the layer's float output
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "reported", quantize=QuantizeConfig(
            tmp_path / "calib.npz", report=tmp_path / "report.md"))
        row = next(line for line in (tmp_path / "report.md").read_text().splitlines()
                   if line.startswith("| `y` | `cell` | GRU |"))
        assert float(row.split("|")[5]) >= 30            # its SQNR column
    res = mlcc.compile(tmp_path / "m.onnx", tmp_path / "kept", quantize=QuantizeConfig(
        tmp_path / "calib.npz", keep_float=("cell",)))
    c = (tmp_path / "kept" / "model.c").read_text()
    assert "mlcc_u8_fc(" not in c and "cell_w_panels" in c
    assert not any(layer.integer for layer in res.quant.layers if layer.node == "cell")


def test_run_time_loop_body_stays_float(tmp_path):
    """A Loop with a run-time trip count whose body holds a MatMul, after an integer MatMul:
    under --quantize the MatMul outside becomes an integer kernel, the body stays float, and
    the result is the float one up to the outer layer's quantization."""
    rng = np.random.default_rng(11)
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "wb"], ["m"], name="body_mm"),
         helper.make_node("Tanh", ["m"], ["h_out"], name="body_tanh"),
         helper.make_node("Identity", ["c_in"], ["c_out"], name="again")],
        "body", [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []),
                 vi("h_in", F, [4, 16])],
        [vi("c_out", TensorProto.BOOL, []), vi("h_out", F, [4, 16])],
        [numpy_helper.from_array((rng.standard_normal((16, 16)) / 4).astype(np.float32),
                                 "wb")])
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="first"),
         helper.make_node("Loop", ["n", "", "h0"], ["h"], body=body, name="loop")],
        "loopq", [vi("x", F, [4, 8]), vi("n", TensorProto.INT64, [])], [vi("h", F, [4, 16])],
        [numpy_helper.from_array((rng.standard_normal((8, 16)) / 3).astype(np.float32),
                                 "w0")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    calib = {"x": rng.standard_normal((8, 4, 8)).astype(np.float32),
             "n": np.full(8, 3, np.int64)}
    res, lib = quantized(tmp_path, model, calib)
    c = (tmp_path / "int8_x86" / "model.c").read_text()
    assert c.count("mlcc_u8_fc(") == 1 and "for (int64_t i0 = 0;" in c
    layers = {layer.node: layer for layer in res.quant.layers}
    assert layers["first"].integer and not layers["loop"].integer
    x = rng.standard_normal((4, 8)).astype(np.float32)
    for n in (0, 1, 5):
        feeds = {"x": x, "n": np.array(n, np.int64)}
        ref = reference_outputs(model, feeds)["h"]
        got = lib.run(feeds)["h"]
        assert sqnr_db(ref, got) >= 30, n
