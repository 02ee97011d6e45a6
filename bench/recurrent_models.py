"""The recurrent models of `make bench` (issue 18), built with onnx.helper and seeded random
weights: a 2-layer bidirectional LSTM (input 64, hidden 256, 100 steps, batch 1), a GRU of the
same shape, and one call of the streaming VAD of examples/streaming (a 512-sample chunk, its
state in and out; bench_models.py binds its sample rate)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
STEPS, INPUT, HIDDEN = 100, 64, 256


def stacked(cell: str, path: Path) -> Path:
    """Two bidirectional layers of `cell` (LSTM or GRU): x [100, 1, 64] -> y [100, 1, 512]."""
    rng = np.random.default_rng(18)
    gates = 4 if cell == "LSTM" else 3
    nodes, inits, x, width = [], [], "x", INPUT
    for layer in range(2):
        w, r, b = f"W{layer}", f"R{layer}", f"B{layer}"
        scale = 1.0 / np.sqrt(HIDDEN)
        inits += [numpy_helper.from_array((rng.standard_normal((2, gates * HIDDEN, width))
                                           * scale).astype(np.float32), w),
                  numpy_helper.from_array((rng.standard_normal((2, gates * HIDDEN, HIDDEN))
                                           * scale).astype(np.float32), r),
                  numpy_helper.from_array((rng.standard_normal((2, 2 * gates * HIDDEN))
                                           * 0.1).astype(np.float32), b)]
        nodes += [helper.make_node(cell, [x, w, r, b], [f"y{layer}"], hidden_size=HIDDEN,
                                   direction="bidirectional", name=f"{cell.lower()}{layer}"),
                  helper.make_node("Transpose", [f"y{layer}"], [f"t{layer}"], perm=[0, 2, 1, 3],
                                   name=f"t{layer}"),
                  helper.make_node("Reshape", [f"t{layer}", "shape"], [f"h{layer}"],
                                   name=f"join{layer}")]
        x, width = f"h{layer}", 2 * HIDDEN
    inits.append(numpy_helper.from_array(np.array([STEPS, 1, 2 * HIDDEN], np.int64), "shape"))
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, f"bi{cell.lower()}",
                              [helper.make_tensor_value_info("x", f, [STEPS, 1, INPUT])],
                              [helper.make_tensor_value_info(x, f, [STEPS, 1, 2 * HIDDEN])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def vad(path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "examples" / "streaming"))
    import models
    onnx.save(models.vad_model(), str(path))
    return path
