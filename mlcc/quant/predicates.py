"""What the quantizer's passes ask of a float graph's nodes: which Conv, Gemm and MatMul can
run as integer kernels, and their weights as a matrix. Shared by the rewrite (rewrite.py,
rules.py), bias correction and SmoothQuant, which otherwise would import each other."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops import lookup
from ..ops.activations import CLAMP_ACTS, fused_act

__all__ = ["CLAMP_ACTS", "fused_act", "is_integer_producer", "weight_matrix"]


def weight_matrix(g: Graph, n: Node) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(w [N, K] float32, bias [N] or None) of a Gemm/MatMul the integer kernel can run."""
    if n.op_type == "Gemm":
        b = g.const(n.inputs[1])
        if b is None or n.attr("transA", 0) or g.const(n.inputs[0]) is not None:
            return None
        w = (b if n.attr("transB", 0) else b.T) * np.float32(n.attr("alpha", 1.0))
        bias = None
        if n.input(2):
            c = g.const(n.input(2))
            if c is None or c.size != w.shape[0] or (c.ndim == 2 and c.shape[0] != 1):
                return None
            bias = c.reshape(-1) * np.float32(n.attr("beta", 1.0))
        return w.astype(np.float32), bias
    if n.op_type == "MatMul":
        b = g.const(n.inputs[1])
        x = g.values[n.inputs[0]]
        if b is None or b.ndim != 2 or x.is_const or len(x.shape) < 2:
            return None
        bias = None
        if n.input(2):                    # the bias fuse_matmul_bias moved into the MatMul
            bias = g.const(n.input(2))
            if bias is None or bias.size != b.shape[1]:
                return None
            bias = bias.reshape(-1).astype(np.float32)
        return np.ascontiguousarray(b.T, np.float32), bias
    return None


def is_integer_producer(g: Graph, n: Node) -> bool:
    """A float Conv, Gemm or MatMul (quant rule "integer_producer") with constant weights
    that the integer kernels (mlcc.QConv / mlcc.QFC) can run."""
    d = lookup(n)
    if d is None or "integer_producer" not in d.quant_rules or \
            g.values[n.inputs[0]].dtype != "float32":
        return False
    if n.op_type == "Conv":
        w = g.const(n.inputs[1])
        return (w is not None and w.ndim in (3, 4) and not g.values[n.inputs[0]].is_const
                and (not n.input(2) or g.const(n.input(2)) is not None))
    return weight_matrix(g, n) is not None
