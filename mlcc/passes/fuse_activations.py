"""Activations fused into the epilogue of the Conv, Gemm, MatMul or ConvTranspose that feeds them.

Needs: static types; constants folded (Clip bounds must be constants).
Guarantees: a producer (an OpDef with `fuses_activation`) whose only reader is an activation
(its OpDef's `activation` hook gives a kind of mlcc/ops/activations.py that fuses as an
epilogue) carries it as attrs["_act"] = (kind, alpha, beta); the activation node is gone. So
does one whose only reader is a view (Reshape, Flatten, Squeeze, Unsqueeze) read only by the
activation, which then reads the activated values: an elementwise function commutes with a
view (onnxruntime writes Reshape -> Gemm -> Reshape for a MatMul with a bias).
"""
from __future__ import annotations

from ..ir import Graph
from ..ops import lookup
from ..ops.activations import BY_KIND, activation_of

VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


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
        view = None
        if (prod is not None and prod.op_type in VIEWS and prod.domain == ""
                and len(consumers.get(src, [])) == 1 and src not in g.outputs):
            view, src = prod, prod.inputs[0]
            prod = producers.get(src)
        d = lookup(prod) if prod is not None else None
        if d is None or not d.fuses_activation:
            continue
        if prod.attrs.get("_act") or len(consumers.get(src, [])) != 1 or src in g.outputs:
            continue
        if g.values[src].dtype != "float32":
            continue
        prod.attrs["_act"] = kind
        prod.fused += act.fused + [f"{act.name}:{act.op_type}"]
        if view is not None:
            view.outputs = [act.outputs[0]]
        else:
            prod.outputs = [act.outputs[0]]
        removed.add(id(act))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    return g
