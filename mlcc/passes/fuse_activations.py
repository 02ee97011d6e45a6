"""Activations fused into the epilogue of the Conv, Gemm or MatMul that feeds them.

Needs: static types; constants folded (Clip bounds must be constants).
Guarantees: a producer whose only reader is one of the activations below carries it as
attrs["_act"] = (kind, alpha, beta), with kind an mlcc_act_kind name; the activation node is gone.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node

PRODUCERS = {"Conv", "Gemm", "MatMul", "ConvTranspose"}


def _act_of(g: Graph, n: Node):
    if n.domain != "":
        return None
    t = n.op_type
    if t == "Relu":
        return ("RELU", 0.0, 0.0)
    if t == "LeakyRelu":
        return ("LEAKY_RELU", float(n.attr("alpha", 0.01)), 0.0)
    if t == "Sigmoid":
        return ("SIGMOID", 0.0, 0.0)
    if t == "Tanh":
        return ("TANH", 0.0, 0.0)
    if t == "HardSigmoid":
        return ("HARD_SIGMOID", float(n.attr("alpha", 0.2)), float(n.attr("beta", 0.5)))
    if t == "HardSwish":
        return ("HARD_SWISH", 0.0, 0.0)
    if t == "Gelu" and n.attr("approximate", "none") == "none":
        return ("GELU", 0.0, 0.0)
    if t == "Swish":
        return ("SILU", float(n.attr("alpha", 1.0)), 0.0)
    if t == "Clip":
        if n.version < 11:
            lo, hi = n.attr("min", -np.inf), n.attr("max", np.inf)
        else:
            lo_name, hi_name = n.input(1), n.input(2)
            lo_arr, hi_arr = g.const(lo_name), g.const(hi_name)
            if (lo_name and lo_arr is None) or (hi_name and hi_arr is None):
                return None
            if any(a is not None and a.size != 1 for a in (lo_arr, hi_arr)):
                return None
            # onnxruntime accepts bounds of shape [1] as well as scalars
            lo = float(lo_arr.reshape(-1)[0]) if lo_arr is not None else -np.inf
            hi = float(hi_arr.reshape(-1)[0]) if hi_arr is not None else np.inf
        return ("CLIP", float(lo), float(hi))
    return None


def fuse_activations(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    removed = set()
    for act in g.nodes:
        kind = _act_of(g, act)
        if kind is None or not act.inputs or not act.inputs[0]:
            continue
        src = act.inputs[0]
        prod = producers.get(src)
        if prod is None or prod.op_type not in PRODUCERS or prod.domain != "":
            continue
        if prod.attrs.get("_act") or len(consumers.get(src, [])) != 1 or src in g.outputs:
            continue
        if g.values[src].dtype != "float32":
            continue
        prod.attrs["_act"] = kind
        prod.outputs = [act.outputs[0]]
        prod.fused += act.fused + [f"{act.name}:{act.op_type}"]
        removed.add(id(act))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
