"""Removal of nodes that compute nothing at inference time.

Needs: static shapes and types (infer_and_fold).
Guarantees: no Identity, Dropout (inference mode), Reshape/Flatten/Squeeze/Unsqueeze that keep
the shape, Cast to the same type, or identity Transpose remains, unless its output is a graph
output fed directly by a graph input (the compiled model must still copy it).
"""
from __future__ import annotations

from ..ir import Graph, Node
from ..ir.symbolic import same_shape


def _is_noop(g: Graph, n: Node) -> bool:
    if n.domain != "":
        return False
    if n.op_type == "Identity":
        return True
    if n.op_type == "Dropout":
        # Inference: output = input; a mask output that is read keeps the node.
        mask = n.outputs[1] if len(n.outputs) > 1 else ""
        return not mask or (mask not in g.outputs and mask not in g.consumers())
    if not n.inputs or not n.inputs[0] or not n.outputs or not n.outputs[0]:
        return False
    src, dst = g.values[n.inputs[0]], g.values[n.outputs[0]]
    if n.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand"):
        return same_shape(src.shape, dst.shape) and src.dtype == dst.dtype
    if n.op_type == "Cast":
        return src.dtype == dst.dtype
    if n.op_type == "Transpose":
        perm = n.attr("perm")
        return perm is not None and list(perm) == sorted(perm)
    return False


def remove_noops(g: Graph) -> Graph:
    g = g.copy()
    kept = []
    outputs = set(g.outputs)
    for n in g.nodes:
        if not _is_noop(g, n):
            kept.append(n)
            continue
        src, dst = n.inputs[0], n.outputs[0]
        if dst in outputs:
            # (a data-dependent count is known by its producer's output name: kept)
            if src in g.inputs or src in outputs or g.values[src].is_const or \
                    any(v.dyn is not None and v.dyn[1] == src for v in g.values.values()):
                kept.append(n)
                continue
            # Let the producer of src write the graph output directly.
            for m in kept:
                m.outputs = [dst if o == src else o for o in m.outputs]
                m.replace_input(src, dst)
            g.replace_uses(src, dst)
            g.values[dst].dtype, g.values[dst].shape = g.values[src].dtype, g.values[src].shape
        else:
            g.replace_uses(dst, src)
    g.nodes = kept
    return g
