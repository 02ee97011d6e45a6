"""A constant bias added after a MatMul becomes the MatMul's third (bias) input.

torch and most exporters write a Linear layer over a 3-D input as MatMul(x, W) then Add(b, .);
the GEMM kernel adds a bias per column in its epilogue, before the fused activation, so the
Add costs nothing more than the store it replaces.

Needs: static types; constants folded; runs before fuse_activations (the activation after the
Add then fuses behind the bias).
Guarantees: Add(y, b) and Add(b, y), where y (rank >= 2, float32) is the only use of the
output of a MatMul whose operands both have rank >= 2 and that has no bias and no fused
activation yet, and b is a float32 constant that varies along the last axis only (shape [N],
[1, N], [1, 1, N], a scalar, ...) and does not broadcast y to a larger shape, are gone: the
MatMul reads b as a contiguous [N] vector in input 2 and writes the Add's output. Input 2 of a
MatMul exists only after this pass (ONNX's MatMul has two inputs).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..ir.symbolic import same_shape
from .patterns import constant_operands


def _column_vector(d: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray | None:
    if d.ndim > len(out_shape) or any(s != 1 for s in d.shape[:-1]):
        return None
    if d.ndim and d.shape[-1] not in (1, out_shape[-1]):
        return None
    return np.ascontiguousarray(np.broadcast_to(d.reshape(-1), (out_shape[-1],)), np.float32)


def fuse_matmul_bias(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    outputs = set(g.outputs)
    removed = set()
    for add in g.nodes:
        if add.op_type != "Add":
            continue
        for y, mm, d in constant_operands(g, add, producers, consumers, outputs, {"MatMul"},
                                          commutative=True):
            shape = g.values[y].shape
            if (len(mm.inputs) > 2 or len(shape) < 2
                    or not same_shape(g.values[add.outputs[0]].shape, shape)
                    or any(len(g.values[i].shape) < 2 for i in mm.inputs)):
                continue
            bias = _column_vector(d, shape)
            if bias is None:
                continue
            mm.inputs = mm.inputs[:2] + [g.add_const(f"{mm.name}.bias", bias)]
            mm.outputs = [add.outputs[0]]
            mm.fused += add.fused + [f"{add.name}:{add.op_type}"]
            removed.add(id(add))
            break
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
