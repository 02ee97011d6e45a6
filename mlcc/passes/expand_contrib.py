"""Contrib operators (domain com.microsoft) become the ONNX operators they are made of where a
fusion can then use the parts (mlcc/ops/contrib.py: each OpDef's `parts` and
`expands_for_fusion`).

Needs: static types (runs after infer_and_fold). Guarantees: every contrib node whose OpDef
says its parts fuse (a BiasGelu, FastGelu, BiasAdd or SkipLayerNormalization bias after a
MatMul; a FusedMatMul giving the scores of an attention) is replaced by its parts, in place,
with every intermediate value typed; the others stay and lower as one operator. The parts
compute what the node computes, so this changes speed only: fuse_matmul_bias, fuse_attention
and fuse_activations then treat the graph as if the model had been written with them.
"""
from __future__ import annotations

from ..ir import Graph
from ..ops import lookup
from ..ops.contrib import DOMAIN, Composite


def expand_contrib(g: Graph) -> Graph:
    if not any(n.domain == DOMAIN for n in g.nodes):
        return g
    g = g.copy()
    nodes = []
    for node in g.nodes:
        d = lookup(node) if node.domain == DOMAIN else None
        if not isinstance(d, Composite) or not d.expands_for_fusion(node, g):
            nodes.append(node)
            continue
        parts, temps = d.parts(node, g)
        for name, (dtype, shape) in temps.items():
            v = g.values[name]
            v.dtype, v.shape = dtype, tuple(int(x) for x in shape)
        for p in parts:
            p.fused = list(node.fused) + [f"{node.name}:{node.op_type}"]
        nodes += parts
    g.nodes = nodes
    return g
