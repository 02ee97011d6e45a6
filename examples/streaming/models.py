"""Two small streaming models built with onnx.helper (fixed seeds): each call takes one chunk
and the recurrent state, and returns its result and the next state.

- vad: a voice-activity detector of the shape of popular streaming VADs. A 512-sample chunk
  x [1, 512] goes through a Conv1d front end (16 filters of 64 taps, stride 32, ReLU: 15
  frames), then an LSTM (hidden 32) whose weights depend on the sample rate: an If on
  `sr == 16000` with an LSTM inside each branch (the 8 kHz branch scales its input first).
  The state is h, c [1, 1, 32] in, h_next, c_next out; the speech probability is
  sigmoid(h_next W + b) [1, 1].
- kws: a keyword spotter: 10 frames of 40 features [10, 1, 40] into a GRU (hidden 64,
  linear_before_reset), state h [1, 1, 64] in, h_next out, probabilities of 12 classes
  (softmax) [1, 12].

A state output named NAME_next is the next value of input NAME (the C example and the Python
script pass it back; the C example in the very same memory).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VAD_CHUNK = 512
KWS_FRAMES, KWS_FEATURES = 10, 40


def _init(rng, name, *shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                   name)


def _lstm_branch(rng, name: str, scaled: bool) -> onnx.GraphProto:
    nodes, x = [], "seq"
    inits = [_init(rng, "W", 1, 4 * 32, 16), _init(rng, "R", 1, 4 * 32, 32),
             _init(rng, "B", 1, 8 * 32, scale=0.1)]
    if scaled:
        inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
        nodes.append(helper.make_node("Mul", ["seq", "half"], ["seq_scaled"], name="scale"))
        x = "seq_scaled"
    nodes.append(helper.make_node("LSTM", [x, "W", "R", "B", "", "h", "c"],
                                  ["", "h_out", "c_out"], hidden_size=32, name="lstm"))
    f = TensorProto.FLOAT
    return helper.make_graph(nodes, name, [], [
        helper.make_tensor_value_info("h_out", f, [1, 1, 32]),
        helper.make_tensor_value_info("c_out", f, [1, 1, 32])], inits)


def vad_model(opset: int = 17) -> onnx.ModelProto:
    rng = np.random.default_rng(2026)
    f = TensorProto.FLOAT
    inits = [_init(rng, "filters", 16, 1, 64, scale=0.2), _init(rng, "filter_bias", 16),
             _init(rng, "w_out", 32, 1), _init(rng, "b_out", 1),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array(16000, np.int64), "sixteen_k")]
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axis1"], ["x3"], name="to_ncw"),
        helper.make_node("Conv", ["x3", "filters", "filter_bias"], ["frames"], strides=[32],
                         name="front_end"),
        helper.make_node("Relu", ["frames"], ["frames_relu"], name="front_end_relu"),
        helper.make_node("Transpose", ["frames_relu"], ["seq"], perm=[2, 0, 1], name="to_seq"),
        helper.make_node("Equal", ["sr", "sixteen_k"], ["is_16k"], name="is_16k"),
        helper.make_node("If", ["is_16k"], ["h_next", "c_next"], name="by_rate",
                         then_branch=_lstm_branch(rng, "rate_16k", False),
                         else_branch=_lstm_branch(rng, "rate_8k", True)),
        helper.make_node("Squeeze", ["h_next", "axis0"], ["h2"], name="last_h"),
        helper.make_node("MatMul", ["h2", "w_out"], ["logit0"], name="head"),
        helper.make_node("Add", ["logit0", "b_out"], ["logit"], name="head_bias"),
        helper.make_node("Sigmoid", ["logit"], ["prob"], name="prob"),
    ]
    graph = helper.make_graph(nodes, "vad", [
        helper.make_tensor_value_info("x", f, [1, VAD_CHUNK]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        helper.make_tensor_value_info("h", f, [1, 1, 32]),
        helper.make_tensor_value_info("c", f, [1, 1, 32])], [
        helper.make_tensor_value_info("prob", f, [1, 1]),
        helper.make_tensor_value_info("h_next", f, [1, 1, 32]),
        helper.make_tensor_value_info("c_next", f, [1, 1, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def kws_model(opset: int = 13) -> onnx.ModelProto:
    rng = np.random.default_rng(2027)
    f = TensorProto.FLOAT
    inits = [_init(rng, "W", 1, 3 * 64, KWS_FEATURES, scale=0.2), _init(rng, "R", 1, 3 * 64, 64),
             _init(rng, "B", 1, 6 * 64, scale=0.1), _init(rng, "w_cls", 64, 12),
             _init(rng, "b_cls", 12),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    nodes = [
        helper.make_node("GRU", ["feats", "W", "R", "B", "", "h"], ["", "h_next"],
                         hidden_size=64, linear_before_reset=1, name="gru"),
        helper.make_node("Squeeze", ["h_next", "axis0"], ["h2"], name="last_h"),
        helper.make_node("MatMul", ["h2", "w_cls"], ["logits0"], name="classifier"),
        helper.make_node("Add", ["logits0", "b_cls"], ["logits"], name="classifier_bias"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="probs"),
    ]
    graph = helper.make_graph(nodes, "kws", [
        helper.make_tensor_value_info("feats", f, [KWS_FRAMES, 1, KWS_FEATURES]),
        helper.make_tensor_value_info("h", f, [1, 1, 64])], [
        helper.make_tensor_value_info("probs", f, [1, 12]),
        helper.make_tensor_value_info("h_next", f, [1, 1, 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def chunks(name: str, count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` chunks of input for model `name` (the non-state inputs): a noisy tone that
    starts half way for vad, random features for kws."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        if name == "vad":
            t = np.arange(VAD_CHUNK) + i * VAD_CHUNK
            tone = np.sin(2 * np.pi * 440 * t / 16000) * (i >= count // 2)
            x = (tone + 0.05 * rng.standard_normal(VAD_CHUNK)).astype(np.float32)
            out.append({"x": x.reshape(1, VAD_CHUNK)})
        else:
            out.append({"feats": rng.standard_normal((KWS_FRAMES, 1, KWS_FEATURES))
                        .astype(np.float32)})
    return out


def initial_state(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Zeros for every input that has a NAME_next output."""
    outs = {o.name for o in model.graph.output}
    return {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
            for i in model.graph.input if f"{i.name}_next" in outs}
