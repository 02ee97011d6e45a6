"""BatchNormalization folded into the convolution that feeds it.

Needs: static types; constants folded (and fold_bias_add before it, so that a constant Add
between the convolution and the BatchNormalization is already in the bias).
Guarantees: a Conv or ConvTranspose whose only reader is an inference-mode BatchNormalization
with constant statistics absorbs it: W' = W * s, b' = (b - mean) * s + beta with
s = gamma / sqrt(var + eps) per output channel. The output channel is weight axis 0 for Conv
([M, C/group, k...]) and, within each group, axis 1 for ConvTranspose ([C, M/group, k...]).
Other BatchNormalization nodes are left for their own kernel.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node


def _scale_weight(conv: Node, w: np.ndarray, scale: np.ndarray) -> np.ndarray | None:
    """W with output channel o multiplied by scale[o]; None if the shapes do not fit."""
    w64, k = w.astype(np.float64), (1,) * (w.ndim - 2)
    if conv.op_type == "Conv":
        if w.shape[0] != scale.size:
            return None
        return (w64 * scale.reshape((-1, 1) + k)).astype(np.float32)
    group = int(conv.attr("group", 1))
    if w.shape[0] % group or w.shape[1] * group != scale.size:
        return None
    grouped = w64.reshape((group, w.shape[0] // group) + w.shape[1:])
    return (grouped * scale.reshape((group, 1, w.shape[1]) + k)).reshape(w.shape).astype(
        np.float32)


def fold_batchnorm(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    removed = set()
    for bn in g.nodes:
        if bn.op_type != "BatchNormalization" or bn.domain != "":
            continue
        if len([o for o in bn.outputs if o]) != 1 or bn.attr("training_mode", 0):
            continue
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op_type not in ("Conv", "ConvTranspose"):
            continue
        if conv.attrs.get("_act"):
            continue
        if len(consumers.get(conv.outputs[0], [])) != 1 or conv.outputs[0] in g.outputs:
            continue
        params = [g.const(i) for i in bn.inputs[1:5]]
        w = g.const(conv.inputs[1])
        bias = g.const(conv.input(2)) if conv.input(2) else None
        if any(p is None for p in params) or w is None or (conv.input(2) and bias is None):
            continue
        if w.dtype != np.float32:
            continue
        gamma, beta, mean, var = (p.astype(np.float64) for p in params)
        scale = gamma / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        w2 = _scale_weight(conv, w, scale)
        if w2 is None:
            continue
        b0 = bias.astype(np.float64) if bias is not None else np.zeros_like(scale)
        b2 = ((b0 - mean) * scale + beta).astype(np.float32)
        conv.inputs = [conv.inputs[0], g.add_const(f"{conv.name}.weight_bn", w2),
                       g.add_const(f"{conv.name}.bias_bn", b2)]
        conv.outputs = [bn.outputs[0]]
        conv.fused.append(f"{bn.name}:BatchNormalization")
        removed.add(id(bn))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
