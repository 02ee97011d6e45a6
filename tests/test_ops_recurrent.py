"""LSTM, GRU and RNN against onnxruntime (mlcc/ops/recurrent.py, runtime_c/kernels/recurrent.c):
odd sizes, both layouts, every direction, initial states, sequence_lens, clip, peepholes,
input_forget, linear_before_reset, non-default activations; refusals; a 2-layer model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import mlcc
from mlcc.errors import UnsupportedError
from mlcc.api import compare
from util import compile_and_run, make_model, run_same_bits_on_threads

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def ort_run(model: onnx.ModelProto, feeds: dict) -> dict:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds)))


def build(op, *, seq, batch, inp, hidden, direction="forward", layout=0, bias=True,
          init_h=False, init_c=False, seq_lens=None, peep=False, outputs=("Y", "Y_h", "Y_c"),
          seed=0, scale=0.5, **attrs):
    """A one-node model and its feeds: W, R, B, P constant; X, sequence_lens, initial states
    run-time inputs."""
    rng = np.random.default_rng(seed)
    nd = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    st_shape = (batch, nd, hidden) if layout else (nd, batch, hidden)
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    inits = {"W": (rng.standard_normal((nd, g * hidden, inp)) * scale).astype(np.float32),
             "R": (rng.standard_normal((nd, g * hidden, hidden)) * scale).astype(np.float32)}
    names = ["X", "W", "R"]
    if bias:
        inits["B"] = (rng.standard_normal((nd, 2 * g * hidden)) * scale).astype(np.float32)
    names.append("B" if bias else "")
    if seq_lens is not None:
        feeds["sequence_lens"] = np.asarray(seq_lens, np.int32)
    names.append("sequence_lens" if seq_lens is not None else "")
    if init_h:
        feeds["initial_h"] = rng.standard_normal(st_shape).astype(np.float32)
    names.append("initial_h" if init_h else "")
    if op == "LSTM":
        if init_c:
            feeds["initial_c"] = rng.standard_normal(st_shape).astype(np.float32)
        names.append("initial_c" if init_c else "")
        if peep:
            inits["P"] = (rng.standard_normal((nd, 3 * hidden)) * scale).astype(np.float32)
        names.append("P" if peep else "")
    while names and names[-1] == "":
        names.pop()
    if op != "LSTM":
        outputs = tuple(o for o in outputs if o != "Y_c")
    outs = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[:3 if op == "LSTM" else 2]]
    while outs and outs[-1] == "":
        outs.pop()
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", direction=direction,
                            hidden_size=hidden, layout=layout, **attrs)
    model = make_model([node], feeds, [o for o in outs if o], initializers=inits, opset=14)
    return model, feeds


def reference(model: onnx.ModelProto, feeds: dict) -> dict:
    """onnxruntime's outputs. onnxruntime refuses layout 1 ("Batchwise recurrent operations
    are not supported"): a one-node layout-1 model is run as its layout-0 twin on transposed
    inputs, and the outputs transposed back."""
    node = model.graph.node[0]
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if len(model.graph.node) != 1 or not layout:
        return ort_run(model, feeds)
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    tnode = twin.graph.node[0]
    for a in tnode.attribute:
        if a.name == "layout":
            a.i = 0
    tfeeds = {k: (v if k == "sequence_lens" else np.ascontiguousarray(v.transpose(1, 0, 2)))
              for k, v in feeds.items()}
    inits = {t.name: numpy_helper.to_array(t) for t in twin.graph.initializer}
    outs = [o.name for o in model.graph.output]
    twin = make_model([tnode], tfeeds, outs, initializers=inits, opset=14)
    ref = ort_run(twin, tfeeds)
    return {k: np.ascontiguousarray(v.transpose(2, 0, 1, 3) if v.ndim == 4
                                    else v.transpose(1, 0, 2)) for k, v in ref.items()}


def check(tmp_path, model, feeds, target="x86"):
    got = compile_and_run(model, feeds, tmp_path, target=target)
    ref = reference(model, feeds)
    for name, r in ref.items():
        c = compare(name, got[name], r)
        assert got[name].shape == r.shape
        assert c.max_abs_error <= c.tolerance, (name, c.max_abs_error, c.tolerance)
    return got, ref


CASES = [  # seq, batch, input, hidden, direction
    (1, 1, 5, 1, "forward"), (9, 3, 13, 7, "reverse"), (9, 1, 5, 33, "bidirectional"),
    (1, 3, 13, 33, "reverse"), (9, 3, 5, 1, "bidirectional")]


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("case", CASES, ids=lambda s: "x".join(map(str, s)))
def test_sizes_directions(tmp_path, op, case):
    seq, batch, inp, hidden, direction = case
    check(tmp_path, *build(op, seq=seq, batch=batch, inp=inp, hidden=hidden,
                           direction=direction))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("hidden", [7, 31, 130])
def test_batch_of_one_on_the_native_vectors(tmp_path, op, hidden):
    """A batch of one on x86-native: the per-step product_row with several panels at once
    (512-bit vectors: 4; LSTM 31: 4 panels, the last one partial, in 15.5 KiB), or one at a
    time (fewer panels, or an R over 16 KiB: hidden 130)."""
    check(tmp_path, *build(op, seq=6, batch=1, inp=5, hidden=hidden, direction="bidirectional"),
          target="x86-native")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layout", [0, 1])
def test_bidirectional_states_lengths(tmp_path, op, layout):
    """Initial states, per-batch lengths (0 excluded: see test_zero_length), both layouts
    (layout 1 against onnxruntime's layout 0 on transposed data: reference())."""
    check(tmp_path, *build(op, seq=9, batch=3, inp=13, hidden=7, direction="bidirectional",
                           layout=layout, init_h=True, init_c=True, seq_lens=[9, 4, 1],
                           peep=True, seed=3))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_clip_no_bias(tmp_path, op):
    check(tmp_path, *build(op, seq=9, batch=3, inp=5, hidden=7, clip=0.7, bias=False,
                           scale=1.5, direction="bidirectional", seed=5))


def test_lstm_peepholes_input_forget(tmp_path):
    check(tmp_path, *build("LSTM", seq=9, batch=3, inp=5, hidden=33, peep=True,
                           input_forget=1, init_c=True, seed=7))


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(tmp_path, lbr):
    check(tmp_path, *build("GRU", seq=9, batch=3, inp=13, hidden=7, linear_before_reset=lbr,
                           direction="bidirectional", init_h=True, seq_lens=[2, 9, 5], seed=9))


ACT_CASES = {
    "LSTM": [dict(activations=["HardSigmoid", "LeakyRelu", "Softsign"] * 2,
                  activation_alpha=[0.3, 0.05, 0.25, 0.02], activation_beta=[0.4, 0.6]),
             dict(activations=["Sigmoid", "ScaledTanh", "Elu"],
                  activation_alpha=[0.9, 0.7], activation_beta=[1.2])],
    "GRU": [dict(activations=["HardSigmoid", "Softplus", "Sigmoid", "ThresholdedRelu"],
                 activation_alpha=[0.25, 0.1], activation_beta=[0.45])],
    "RNN": [dict(activations=["Relu", "Affine"], activation_alpha=[0.8],
                 activation_beta=[-0.1])],
}


@pytest.mark.parametrize("op,i", [(op, i) for op, cs in ACT_CASES.items()
                                  for i in range(len(cs))])
def test_activations(tmp_path, op, i):
    attrs = ACT_CASES[op][i]
    nd = len(attrs["activations"]) // {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
    check(tmp_path, *build(op, seq=9, batch=3, inp=5, hidden=7,
                           direction="bidirectional" if nd == 2 else "forward", seed=11,
                           **attrs))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("outputs", [("Y",), ("Y_h",), ("Y_c",), ("Y", "Y_c")])
def test_optional_outputs(tmp_path, op, outputs):
    if op == "GRU" and outputs == ("Y_c",):
        outputs = ("Y_h",)
    check(tmp_path, *build(op, seq=9, batch=3, inp=5, hidden=7, outputs=outputs,
                           direction="reverse", seq_lens=[3, 9, 1], layout=1))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_zero_length(tmp_path, op):
    """A sequence of length 0: its outputs and its Y_h / Y_c are zero (not its initial state),
    as onnxruntime gives."""
    model, feeds = build(op, seq=5, batch=3, inp=5, hidden=7, direction="bidirectional",
                         init_h=True, init_c=True, seq_lens=[5, 0, 2])
    got, _ = check(tmp_path, model, feeds)
    assert np.all(got["Y"][:, :, 1] == 0) and np.all(got["Y_h"][:, 1] == 0)


@pytest.mark.parametrize("bad", [[5, 6, 1], [5, -1, 1]])
def test_bad_lengths_are_a_status(tmp_path, bad):
    model, feeds = build("LSTM", seq=5, batch=3, inp=5, hidden=7, seq_lens=[5, 1, 1])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    mlcc.compile(path, tmp_path / "out")
    m = mlcc.load(tmp_path / "out")
    m.run(feeds)
    feeds["sequence_lens"] = np.asarray(bad, np.int32)
    with pytest.raises(Exception, match="out of range"):
        m.run(feeds)


def test_runtime_weights_refused(tmp_path):
    model, feeds = build("RNN", seq=3, batch=1, inp=5, hidden=7)
    w = numpy_helper.to_array(model.graph.initializer[0])
    model.graph.initializer.pop(0)
    model.graph.input.append(helper.make_tensor_value_info("W", onnx.TensorProto.FLOAT,
                                                           list(w.shape)))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match="rnn_node.*RNN|RNN.*rnn_node"):
        mlcc.compile(path, tmp_path / "out")


def test_unknown_activation_refused(tmp_path):
    model, feeds = build("RNN", seq=3, batch=1, inp=5, hidden=7, activations=["Gelu"])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match="rnn_node"):
        mlcc.compile(path, tmp_path / "out")


def test_two_layer_bidirectional_lstm(tmp_path):
    """Two stacked bidirectional LSTMs (as exporters write nn.LSTM(num_layers=2,
    bidirectional=True)): layer 1's Y [seq, 2, batch, H] -> Transpose -> Reshape -> layer 2."""
    rng = np.random.default_rng(21)
    seq, batch, inp, hidden = 9, 3, 13, 33
    inits = {}
    nodes = []
    x = "X"
    for layer, k in enumerate((inp, 2 * hidden)):
        for n, shape in (("W", (2, 4 * hidden, k)), ("R", (2, 4 * hidden, hidden)),
                         ("B", (2, 8 * hidden))):
            inits[f"{n}{layer}"] = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        nodes.append(helper.make_node("LSTM", [x, f"W{layer}", f"R{layer}", f"B{layer}"],
                                      [f"Y{layer}", f"Yh{layer}", f"Yc{layer}"],
                                      name=f"lstm{layer}", direction="bidirectional",
                                      hidden_size=hidden))
        nodes.append(helper.make_node("Transpose", [f"Y{layer}"], [f"T{layer}"],
                                      perm=[0, 2, 1, 3]))
        inits[f"shape{layer}"] = np.array([seq, batch, 2 * hidden], np.int64)
        nodes.append(helper.make_node("Reshape", [f"T{layer}", f"shape{layer}"],
                                      [f"Z{layer}"]))
        x = f"Z{layer}"
    feeds = {"X": rng.standard_normal((seq, batch, inp)).astype(np.float32)}
    model = make_model(nodes, feeds, ["Z1", "Yh1", "Yc1"], initializers=inits, opset=14)
    check(tmp_path, model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_bidirectional_threads_same_bits(tmp_path, op):
    """On a pool the two directions run on two threads at once, each with its own state in the
    scratch: 1, 2 and 3 threads give the same bits, with lengths, initial states and both
    layouts of Y; at a hidden size of 521, LSTM's one-row recurrent product (521 x 2,084,
    over MLCC_MIN_PARALLEL_MACS) takes the panel GEMM, whatever the pool."""
    for layout, hidden in ((0, 7), (1, 521)):
        model, feeds = build(op, seq=5, batch=1 if hidden > 7 else 3, inp=11, hidden=hidden,
                             direction="bidirectional", layout=layout, init_h=True,
                             init_c=True, seq_lens=[5] if hidden > 7 else [5, 2, 1], seed=7,
                             scale=0.1)
        got = run_same_bits_on_threads(model, feeds, tmp_path)
        for name, r in reference(model, feeds).items():
            c = compare(name, got[name], r)
            assert c.max_abs_error <= c.tolerance, (name, c.max_abs_error, c.tolerance)


def test_crnn_bench_model(tmp_path):
    """The CRNN text recognizer of `make bench` (bench/recurrent_models.py: convolutions ->
    two BiLSTMs -> LogSoftmax over 32 steps) against onnxruntime, on two line images in
    [0, 1]: the log-probabilities within verify's tolerance and the same greedy CTC path."""
    import recurrent_models as rm

    path = rm.crnn(tmp_path / "crnn.onnx")
    model = onnx.load(str(path))
    mlcc.compile(path, tmp_path / "out")
    lib = mlcc.load(tmp_path / "out")
    rng = np.random.default_rng(5)
    for image in (rng.uniform(0, 1, (1, 1, 32, 128)),
                  np.clip(np.sin(np.arange(128) / 3.0) * np.cos(np.arange(32)[:, None] / 5.0)
                          + 0.5, 0, 1)[None, None]):
        feeds = {"image": image.astype(np.float32)}
        got = lib.run(feeds)["log_probs"]
        ref = ort_run(model, feeds)["log_probs"]
        assert got.shape == ref.shape == (32, 1, 97)
        c = compare("log_probs", got, ref)
        assert c.ok, c
        assert (got.argmax(-1) == ref.argmax(-1)).all()
        assert len(set(ref.argmax(-1).ravel().tolist())) > 3     # not a constant path
