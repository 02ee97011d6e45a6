"""The recurrent models of `make bench` (issue 18), built with onnx.helper and seeded random
weights: a 2-layer bidirectional LSTM (input 64, hidden 256, 100 steps, batch 1), a GRU of the
same shape, a CRNN text-line recognizer (convolutions -> 2 BiLSTMs -> LogSoftmax over 32
steps), and one call of the streaming VAD of examples/streaming (a 512-sample chunk, its
state in and out; bench_models.py binds its sample rate)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
STEPS, INPUT, HIDDEN = 100, 64, 256


def bidirectional(cell: str, x: str, width: int, hidden: int, layer: int, shape: str,
                  rng: np.random.Generator) -> tuple[list, list, str]:
    """One bidirectional `cell` layer as exporters write it (nn.LSTM / nn.GRU): the cell,
    then Transpose and Reshape (`shape`, an initializer [steps, batch, 2 * hidden]) joining
    both directions' Y [steps, 2, batch, hidden] into [steps, batch, 2 * hidden]. Weights
    ~ N(0, 1/hidden), biases ~ N(0, 0.01). (nodes, initializers, output name)."""
    gates = 4 if cell == "LSTM" else 3
    w, r, b = f"W{layer}", f"R{layer}", f"B{layer}"
    scale = 1.0 / np.sqrt(hidden)
    inits = [numpy_helper.from_array((rng.standard_normal((2, gates * hidden, width))
                                      * scale).astype(np.float32), w),
             numpy_helper.from_array((rng.standard_normal((2, gates * hidden, hidden))
                                      * scale).astype(np.float32), r),
             numpy_helper.from_array((rng.standard_normal((2, 2 * gates * hidden))
                                      * 0.1).astype(np.float32), b)]
    nodes = [helper.make_node(cell, [x, w, r, b], [f"y{layer}"], hidden_size=hidden,
                              direction="bidirectional", name=f"{cell.lower()}{layer}"),
             helper.make_node("Transpose", [f"y{layer}"], [f"t{layer}"], perm=[0, 2, 1, 3],
                              name=f"t{layer}"),
             helper.make_node("Reshape", [f"t{layer}", shape], [f"h{layer}"],
                              name=f"join{layer}")]
    return nodes, inits, f"h{layer}"


def _save(nodes, inits, name: str, inputs, outputs, path: Path) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def stacked(cell: str, path: Path) -> Path:
    """Two bidirectional layers of `cell` (LSTM or GRU): x [100, 1, 64] -> y [100, 1, 512]."""
    rng = np.random.default_rng(18)
    nodes, inits, x, width = [], [], "x", INPUT
    for layer in range(2):
        more, weights, x = bidirectional(cell, x, width, HIDDEN, layer, "shape", rng)
        nodes += more
        inits += weights
        width = 2 * HIDDEN
    inits.append(numpy_helper.from_array(np.array([STEPS, 1, 2 * HIDDEN], np.int64), "shape"))
    f = TensorProto.FLOAT
    return _save(nodes, inits, f"bi{cell.lower()}",
                 [helper.make_tensor_value_info("x", f, [STEPS, 1, INPUT])],
                 [helper.make_tensor_value_info(x, f, [STEPS, 1, 2 * HIDDEN])], path)


# the CRNN text recognizer: (out channels, pool (kh, kw) or None, batch norm) per 3x3 conv
CRNN_CONVS = [(32, (2, 2), False), (64, (2, 2), False), (128, None, True),
              (128, (2, 1), False), (256, None, True), (256, (2, 1), False)]
CRNN_HEIGHT, CRNN_WIDTH, CRNN_HIDDEN, CRNN_CLASSES = 32, 128, 128, 97


def crnn(path: Path) -> Path:
    """A small CRNN text-line recognizer (CTC style, as in Shi et al. 2015 and the small OCR
    recognizers): a grayscale line image [1, 1, 32, 128] -> six 3x3 convolutions with ReLU
    (two with batch norm), max pools to [1, 256, 2, 32], a 2x1 convolution to height 1 ->
    Squeeze, Transpose to 32 steps [32, 1, 256] -> two bidirectional LSTMs (hidden 128) ->
    a fully connected layer to 97 classes (96 characters and the CTC blank) -> LogSoftmax:
    [32, 1, 97]. Seeded random weights (He-scaled convolutions, so activations keep their
    size; batch norms with random statistics)."""
    rng = np.random.default_rng(1818)
    nodes, inits, x, ch = [], [], "image", 1

    def init(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def conv(k, cin, cout, kernel, pads, bn):
        nonlocal x
        w = rng.standard_normal((cout, cin, *kernel)) * np.sqrt(2.0 / (cin * np.prod(kernel)))
        ins = [x, init(f"conv{k}.w", w)] + ([] if bn else
                                             [init(f"conv{k}.b", rng.normal(0, 0.05, cout))])
        nodes.append(helper.make_node("Conv", ins, [f"c{k}"], kernel_shape=list(kernel),
                                      pads=pads, name=f"conv{k}"))
        x = f"c{k}"
        if bn:
            nodes.append(helper.make_node(
                "BatchNormalization",
                [x, init(f"bn{k}.scale", rng.uniform(0.8, 1.2, cout)),
                 init(f"bn{k}.bias", rng.normal(0, 0.05, cout)),
                 init(f"bn{k}.mean", rng.normal(0, 0.1, cout)),
                 init(f"bn{k}.var", rng.uniform(0.8, 1.2, cout))], [f"bn{k}"],
                epsilon=1e-5, name=f"bn{k}"))
            x = f"bn{k}"
        nodes.append(helper.make_node("Relu", [x], [f"r{k}"], name=f"relu{k}"))
        x = f"r{k}"

    for k, (cout, pool, bn) in enumerate(CRNN_CONVS):
        conv(k, ch, cout, (3, 3), [1, 1, 1, 1], bn)
        ch = cout
        if pool:
            nodes.append(helper.make_node("MaxPool", [x], [f"p{k}"], kernel_shape=list(pool),
                                          strides=list(pool), name=f"pool{k}"))
            x = f"p{k}"
    conv(len(CRNN_CONVS), ch, ch, (2, 1), [0, 0, 0, 0], True)      # height 2 -> 1
    steps = CRNN_WIDTH // 4
    inits += [numpy_helper.from_array(np.array([2], np.int64), "axis2"),
              numpy_helper.from_array(np.array([steps, 1, 2 * CRNN_HIDDEN], np.int64),
                                      "shape")]
    nodes += [helper.make_node("Squeeze", [x, "axis2"], ["features"], name="squeeze"),
              helper.make_node("Transpose", ["features"], ["steps"], perm=[2, 0, 1],
                               name="to_steps")]                  # [32, 1, 256]
    x, width = "steps", ch
    for layer in range(2):
        more, weights, x = bidirectional("LSTM", x, width, CRNN_HIDDEN, layer, "shape", rng)
        nodes += more
        inits += weights
        width = 2 * CRNN_HIDDEN
    init("fc.w", rng.standard_normal((width, CRNN_CLASSES)) / np.sqrt(width))
    init("fc.b", rng.normal(0, 0.05, CRNN_CLASSES))
    nodes += [helper.make_node("MatMul", [x, "fc.w"], ["fc"], name="fc"),
              helper.make_node("Add", ["fc", "fc.b"], ["logits"], name="fc_bias"),
              helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=-1,
                               name="log_softmax")]
    f = TensorProto.FLOAT
    return _save(nodes, inits, "crnn",
                 [helper.make_tensor_value_info("image", f, [1, 1, CRNN_HEIGHT, CRNN_WIDTH])],
                 [helper.make_tensor_value_info("log_probs", f, [steps, 1, CRNN_CLASSES])],
                 path)


def vad(path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "examples" / "streaming"))
    import models
    onnx.save(models.vad_model(), str(path))
    return path
