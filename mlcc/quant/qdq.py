"""Importing an already-quantized model in QDQ form (QuantizeLinear / DequantizeLinear around
the float operators, as onnxruntime.quantization.quantize_static writes it).

Needs: the imported graph before the pass pipeline (the pairs are still there).
Guarantees: every QuantizeLinear -> DequantizeLinear pair on a run-time value v with per-tensor
uint8 parameters is removed (readers of the DequantizeLinear read v again) and its (scale,
zero point) recorded for v; DequantizeLinear nodes of constant int8 weights stay (they fold to
float weights) and their integer values and scales are recorded under the folded value's name,
so that the rewrite uses the model's own int8 weights and scales, not recomputed ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph
from .scheme import QParams


@dataclass
class QDQParams:
    activations: dict[str, QParams] = field(default_factory=dict)
    weights: dict[str, tuple[np.ndarray, np.ndarray, int]] = field(default_factory=dict)


def _scalar_params(g: Graph, node) -> tuple[float, int] | None:
    scale = g.const(node.input(1))
    zp = g.const(node.input(2)) if node.input(2) else np.array(0, np.uint8)
    if scale is None or zp is None or np.size(scale) != 1 or np.size(zp) != 1:
        return None
    if np.asarray(zp).dtype != np.uint8:
        return None
    return float(np.float32(np.asarray(scale).reshape(()))), int(np.asarray(zp).reshape(()))


def has_qdq(g: Graph) -> bool:
    return any(n.op_type == "QuantizeLinear" and n.domain == "" for n in g.nodes)


def extract_qdq(g: Graph) -> tuple[Graph, QDQParams]:
    g = g.copy()
    out = QDQParams()
    consumers = g.consumers()
    removed: set[int] = set()
    for n in g.nodes:
        if n.domain != "" or n.op_type != "DequantizeLinear":
            continue
        q = g.const(n.inputs[0])
        if q is None or q.dtype not in (np.int8, np.int32):
            continue
        scale = np.asarray(g.const(n.input(1)), np.float32)
        if scale is None:
            continue
        out.weights[n.outputs[0]] = (np.asarray(q), scale.reshape(-1),
                                     int(n.attr("axis", 1)))
    for n in g.nodes:
        if n.domain != "" or n.op_type != "QuantizeLinear" or g.values[n.inputs[0]].is_const:
            continue
        params = _scalar_params(g, n)
        readers = consumers.get(n.outputs[0], [])
        if params is None or not readers or n.outputs[0] in g.outputs:
            continue
        if any(r.op_type != "DequantizeLinear" or r.domain != "" or
               _scalar_params(g, r) != params or r.outputs[0] in g.outputs for r in readers):
            continue
        v = n.inputs[0]
        out.activations[v] = QParams(params[0], params[1])
        for r in readers:
            g.replace_uses(r.outputs[0], v)
            removed.add(id(r))
        removed.add(id(n))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g, out
