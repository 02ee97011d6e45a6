"""GELU written out with Erf becomes one Gelu node.

Needs: static types; constants folded (sqrt 2, 1 and 0.5 must be constants); runs before
fuse_activations, which then folds the Gelu into the MatMul or Gemm that produces x (the
feed-forward block of every BERT-style encoder).
Guarantees: these chains over a float32 x, whose intermediate values have no other reader and
are not graph outputs, are one Gelu(x) node (approximate="none"), named after the chain's last
node and writing its output:
    Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)       (torch.onnx.export of nn.GELU)
    Mul(Mul(x, 0.5), Add(Erf(Div(x, sqrt 2)), 1))       (x * 0.5 * (1 + erf(x / sqrt 2)))
    Mul(x, Mul(Add(Erf(Div(x, sqrt 2)), 1), 0.5))
with the operands of Add and Mul in either order and Mul by 1/sqrt 2 in place of Div by sqrt 2.
"""
from __future__ import annotations

import math

from ..ir import Graph, Node
from .fuse_hardswish import _other, _scalar
from .patterns import sole_reader

GELU_SINCE = 20    # the ONNX opset that defines Gelu


def _erf_argument(g: Graph, div: Node | None) -> str | None:
    """x if `div` computes x / sqrt 2 (or x * (1 / sqrt 2))."""
    if div is None or div.domain != "" or len(div.inputs) != 2:
        return None
    if div.op_type == "Div" and _scalar(g, div.inputs[1], math.sqrt(2.0)):
        return div.inputs[0]
    if div.op_type == "Mul":
        for k in (0, 1):
            if _scalar(g, div.inputs[1 - k], 1.0 / math.sqrt(2.0)):
                return div.inputs[k]
    return None


def _chain(g: Graph, erf: Node, producers, only_reader) -> tuple[str, list[Node]] | None:
    """(x, nodes of the chain, last one last) if a GELU pattern goes through this Erf."""
    div = producers.get(erf.inputs[0])
    x = _erf_argument(g, div)
    if x is None or only_reader(div.outputs[0]) is not erf:
        return None
    add = only_reader(erf.outputs[0])
    if add is None or add.op_type != "Add" or not _scalar(g, _other(add, erf.outputs[0]) or "",
                                                          1.0):
        return None
    m1 = only_reader(add.outputs[0])
    if m1 is None or m1.op_type != "Mul":
        return None
    other = _other(m1, add.outputs[0])
    if other == x:                                   # x * (1 + erf) then * 0.5
        m2 = only_reader(m1.outputs[0])
        if m2 is None or m2.op_type != "Mul" or not _scalar(g, _other(m2, m1.outputs[0]) or "",
                                                            0.5):
            return None
        return x, [div, erf, add, m1, m2]
    if other is not None and _scalar(g, other, 0.5):  # (1 + erf) * 0.5, then * x
        m2 = only_reader(m1.outputs[0])
        if m2 is None or m2.op_type != "Mul" or _other(m2, m1.outputs[0]) != x:
            return None
        return x, [div, erf, add, m1, m2]
    half = producers.get(other) if other else None  # (x * 0.5) * (1 + erf)
    if (half is not None and half.op_type == "Mul" and half.domain == ""
            and _scalar(g, _other(half, x) or "", 0.5) and only_reader(half.outputs[0]) is m1):
        return x, [half, div, erf, add, m1]
    return None


def fuse_gelu(g: Graph) -> Graph:
    g = g.copy()
    producers = g.producers()

    only_reader = sole_reader(g)
    removed: set[int] = set()
    replace: dict[int, Node] = {}
    for n in g.nodes:
        if n.op_type != "Erf" or n.domain != "" or id(n) in removed:
            continue
        found = _chain(g, n, producers, only_reader)
        if found is None:
            continue
        x, nodes = found
        if g.values[x].dtype != "float32" or any(id(m) in removed for m in nodes):
            continue
        last = nodes[-1]
        replace[id(last)] = Node(last.name, "Gelu", [x], list(last.outputs), version=GELU_SINCE,
                                 fused=[f for m in nodes[:-1] for f in m.fused + [
                                     f"{m.name}:{m.op_type}"]] + last.fused)
        removed.update(id(m) for m in nodes[:-1])
    g.nodes = [replace.get(id(n), n) for n in g.nodes if id(n) not in removed]
    return g
