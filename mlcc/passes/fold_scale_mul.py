"""A constant multiplier after a Conv, ConvTranspose, Gemm or MatMul folded into its weights.

Needs: static types; constants folded; runs before fold_bias_add (PP-OCR's "learnable affine"
blocks are Conv -> Mul(scale) -> Add(shift): the scale folds here, the shift there).
Guarantees: Mul(y, D), Mul(D, y) and Div(y, D), where y is the only use of the output of such
a producer without fused activation and D a float32 constant with one value per output channel
(axis 1 of a convolution's output; the last axis of a Gemm's or MatMul's), are gone: the
producer's weights and bias are scaled by D (1 / D for Div) per output channel and it writes the
Mul's output. Nothing changes where D varies along another axis, would broadcast the output to
a larger shape, has a zero divisor, or where the weight or bias is computed at run time.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ir.symbolic import same_shape
from .patterns import constant_operands

PRODUCERS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}


def _per_channel(d: np.ndarray, out_shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """D as one value per channel of `axis`, or None if it varies along another axis."""
    if d.ndim > len(out_shape) or not isinstance(out_shape[axis], int):
        return None         # (a dynamic size along the axis: no weights to fold into)
    shape = (1,) * (len(out_shape) - d.ndim) + d.shape
    if any(s != 1 for i, s in enumerate(shape) if i != axis) or shape[axis] not in (
            1, out_shape[axis]):
        return None
    return np.broadcast_to(d.reshape(-1), (out_shape[axis],)).astype(np.float64)


def _scaled(g: Graph, prod: Node, s: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The producer's weight and bias (None if it has none) scaled by s per output channel."""
    w = g.const(prod.inputs[1])
    bias_name = prod.input(2)
    bias = g.const(bias_name) if bias_name else None
    if w is None or w.dtype != np.float32 or (bias_name and bias is None):
        return None
    w64 = w.astype(np.float64)
    k = (1,) * (w.ndim - 2)
    if prod.op_type == "Conv":
        w2 = w64 * s.reshape((-1, 1) + k)
    elif prod.op_type == "ConvTranspose":
        group = int(prod.attr("group", 1))
        grouped = w64.reshape((group, w.shape[0] // group) + w.shape[1:])
        w2 = (grouped * s.reshape((group, 1, w.shape[1]) + k)).reshape(w.shape)
    elif prod.op_type == "Gemm":
        # output column j comes from column j of op(B): row j of B when transB
        w2 = w64 * (s.reshape(-1, 1) if prod.attr("transB", 0) else s.reshape(1, -1))
    elif w.ndim >= 2:                         # MatMul: B [..., K, N], output [..., N]
        w2 = w64 * s
    else:
        return None
    # a Conv bias is [M]; a Gemm's C broadcasts to [M, N]: scaling its columns keeps that
    b2 = None if bias is None else (bias.astype(np.float64) * s).astype(np.float32)
    return w2.astype(np.float32), b2


def fold_scale_mul(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    outputs = set(g.outputs)
    removed = set()
    for mul in g.nodes:
        if mul.op_type not in ("Mul", "Div"):
            continue
        for y, prod, d in constant_operands(g, mul, producers, consumers, outputs, PRODUCERS,
                                            commutative=mul.op_type == "Mul"):
            out_shape = g.values[y].shape
            if not same_shape(g.values[mul.outputs[0]].shape, out_shape) or not out_shape:
                continue
            axis = 1 if prod.op_type in ("Conv", "ConvTranspose") else len(out_shape) - 1
            s = _per_channel(d, out_shape, axis)
            if s is None or (mul.op_type == "Div" and not np.all(s != 0)):
                continue
            got = _scaled(g, prod, 1.0 / s if mul.op_type == "Div" else s)
            if got is None:
                continue
            w2, b2 = got
            prod.inputs = list(prod.inputs)
            prod.inputs[1] = g.add_const(f"{prod.name}.weight_scaled", w2)
            if b2 is not None:
                prod.inputs[2] = g.add_const(f"{prod.name}.bias_scaled", b2)
            prod.outputs = [mul.outputs[0]]
            prod.fused += mul.fused + [f"{mul.name}:{mul.op_type}"]
            producers[mul.outputs[0]] = prod
            removed.add(id(mul))
            break
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
