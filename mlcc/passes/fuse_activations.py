"""Activations fused into the epilogue of the Conv, Gemm, MatMul or ConvTranspose that feeds them.

Needs: static types; constants folded (Clip bounds must be constants).
Guarantees: a producer (an OpDef with `fuses_activation`) whose only reader is an activation
(its OpDef's `activation` hook gives a kind of mlcc/ops/activations.py that fuses as an
epilogue) carries it as attrs["_act"] = (kind, alpha, beta); the activation node is gone.
"""
from __future__ import annotations

from ..ir import Graph
from ..ops import lookup
from ..ops.activations import BY_KIND, activation_of


def fuse_activations(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    removed = set()
    for act in g.nodes:
        kind = activation_of(act, g)
        if kind is None or not BY_KIND[kind[0]].epilogue or not act.inputs or not act.inputs[0]:
            continue
        src = act.inputs[0]
        prod = producers.get(src)
        d = lookup(prod) if prod is not None else None
        if d is None or not d.fuses_activation:
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
