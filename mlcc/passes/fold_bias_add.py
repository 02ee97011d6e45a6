"""A constant added after a Conv, ConvTranspose or Gemm folded into its bias.

Needs: static types; constants folded; runs before fold_batchnorm and fuse_activations (so that
the bias is in place when BatchNormalization folds and the activation fuses behind it).
Guarantees: Add(y, D), Add(D, y) and Sub(y, D), where y is the only use of the output of a
Conv or ConvTranspose without fused activation and D a float32 constant that is the same for
every position of a channel (shape [M], [1, M, 1, 1], a scalar, ...), are gone: the producer's
bias is b + D (or -D) and it writes the Add's output. The same for a Gemm and any constant D that
broadcasts to its [M, N] output (its C becomes beta * C + D, beta 1). Nothing changes where the
Add would broadcast the output to a larger shape, or where the existing bias is computed at run
time. (MatMul has no bias input here: passes.fuse_matmul_bias gives it one.)
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ir.symbolic import same_shape
from ..ops.common import broadcast_shapes
from .patterns import constant_operands

PRODUCERS = {"Conv", "ConvTranspose", "Gemm"}


def _channel_vector(d: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """D as one value per output channel (axis 1), or None if it varies along another axis."""
    if d.ndim > len(out_shape):
        return None
    shape = (1,) * (len(out_shape) - d.ndim) + d.shape
    if any(s != 1 for i, s in enumerate(shape) if i != 1) or shape[1] not in (1, out_shape[1]):
        return None
    return np.broadcast_to(d.reshape(-1), (out_shape[1],))


def _new_bias(g: Graph, prod: Node, d: np.ndarray) -> tuple[np.ndarray, dict] | None:
    """The producer's new bias input (and attributes to set), or None if D does not fit."""
    out_shape = g.values[prod.outputs[0]].shape
    old_name = prod.input(2)
    old = g.const(old_name) if old_name else None
    if old_name and old is None:
        return None                                   # a bias computed at run time
    if prod.op_type == "Gemm":
        if d.ndim > 2 or not same_shape(broadcast_shapes(d.shape, out_shape), out_shape):
            return None
        beta = float(prod.attr("beta", 1.0))
        base = old.astype(np.float64) * beta if old is not None else np.zeros((), np.float64)
        return (base + d.astype(np.float64)).astype(np.float32), {"beta": 1.0}
    per_channel = _channel_vector(d, out_shape)
    if per_channel is None:
        return None
    base = old.astype(np.float64) if old is not None else np.zeros(out_shape[1], np.float64)
    return (base + per_channel.astype(np.float64)).astype(np.float32), {}


def fold_bias_add(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    outputs = set(g.outputs)
    removed = set()
    for add in g.nodes:
        if add.op_type not in ("Add", "Sub"):
            continue
        for y, prod, d in constant_operands(g, add, producers, consumers, outputs, PRODUCERS,
                                            commutative=add.op_type == "Add"):
            if not same_shape(g.values[add.outputs[0]].shape, g.values[y].shape):
                continue                              # the Add broadcasts to a larger shape
            got = _new_bias(g, prod, -d if add.op_type == "Sub" else d)
            if got is None:
                continue
            bias, attrs = got
            prod.inputs = prod.inputs[:2] + [g.add_const(f"{prod.name}.bias_add", bias)]
            prod.attrs.update(attrs)
            prod.outputs = [add.outputs[0]]
            prod.fused += add.fused + [f"{add.name}:{add.op_type}"]
            producers[add.outputs[0]] = prod            # a second Add may fold in as well
            removed.add(id(add))
            break
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
