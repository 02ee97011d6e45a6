"""HardSwish written out in elementary operators becomes one HardSwish node.

Needs: static types; constants folded (the constants 3, 6 and 1/6 and Clip's bounds must be
constants); runs before fuse_activations, which then folds the HardSwish into the Conv, Gemm,
MatMul or ConvTranspose that produces x.
Guarantees: these chains over a float32 x, whose intermediate values have no other reader and
are not graph outputs, are one HardSwish(x) node, named after the chain's last node:
    Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)      (PaddlePaddle's export; as in PP-OCR)
    Mul(x, Div(Clip(Add(x, 3), 0, 6), 6))
    Mul(x, HardSigmoid(x, alpha=1/6, beta=0.5))
with operands of Add and Mul in either order and Mul by 1/6 in place of Div by 6.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .patterns import sole_reader
from ..ops.activations import activation_of

HARDSWISH_SINCE = 14    # the ONNX opset that defines HardSwish


def _scalar(g: Graph, name: str, value: float) -> bool:
    c = g.const(name)
    return (c is not None and c.size == 1 and c.dtype == np.float32
            and abs(float(c.reshape(-1)[0]) - value) <= 1e-6 * abs(value))


def _other(n: Node, name: str) -> str | None:
    """The input of binary node n that is not `name` (None if n does not read it)."""
    if len(n.inputs) != 2 or name not in n.inputs:
        return None
    return n.inputs[1] if n.inputs[0] == name else n.inputs[0]


def _is_sixth(g: Graph, n: Node, src: str) -> bool:
    """n computes src / 6 (Div by 6, or Mul by 1/6 in either order)."""
    if n.op_type == "Div":
        return n.inputs[0] == src and _scalar(g, n.inputs[1], 6.0)
    other = _other(n, src) if n.op_type == "Mul" else None
    return other is not None and _scalar(g, other, 1.0 / 6.0)


def _chain(g: Graph, start: Node, only_reader) -> tuple[str, list[Node]] | None:
    """(x, nodes of the chain, last one last) if a HardSwish pattern starts at `start`."""
    if start.op_type == "HardSigmoid":
        x = start.inputs[0]
        if (abs(float(start.attr("alpha", 0.2)) - 1 / 6) > 1e-6
                or abs(float(start.attr("beta", 0.5)) - 0.5) > 1e-6):
            return None
        mul = only_reader(start.outputs[0])
        if mul is None or mul.op_type != "Mul" or _other(mul, start.outputs[0]) != x:
            return None
        return x, [start, mul]
    if start.op_type != "Add" or len(start.inputs) != 2:
        return None
    x = next((i for i, j in (start.inputs, start.inputs[::-1]) if _scalar(g, j, 3.0)), None)
    clip = only_reader(start.outputs[0])
    if x is None or clip is None or clip.op_type != "Clip" or clip.inputs[0] != start.outputs[0]:
        return None
    if activation_of(clip, g) != ("CLIP", 0.0, 6.0):
        return None
    third = only_reader(clip.outputs[0])
    if third is None:
        return None
    if third.op_type == "Mul" and _other(third, clip.outputs[0]) == x:
        last = only_reader(third.outputs[0])
        if last is None or not _is_sixth(g, last, third.outputs[0]):
            return None
    elif _is_sixth(g, third, clip.outputs[0]):
        last = only_reader(third.outputs[0])
        if last is None or last.op_type != "Mul" or _other(last, third.outputs[0]) != x:
            return None
    else:
        return None
    return x, [start, clip, third, last]


def fuse_hardswish(g: Graph) -> Graph:
    g = g.copy()

    only_reader = sole_reader(g)
    removed: set[int] = set()
    replace: dict[int, Node] = {}
    for n in g.nodes:
        if n.domain != "" or id(n) in removed:
            continue
        found = _chain(g, n, only_reader)
        if found is None:
            continue
        x, nodes = found
        if g.values[x].dtype != "float32" or any(id(m) in removed for m in nodes):
            continue
        last = nodes[-1]
        replace[id(last)] = Node(last.name, "HardSwish", [x], list(last.outputs),
                                 version=HARDSWISH_SINCE,
                                 fused=[f for m in nodes[:-1] for f in m.fused + [
                                     f"{m.name}:{m.op_type}"]] + last.fused)
        removed.update(id(m) for m in nodes[:-1])
    g.nodes = [replace.get(id(n), n) for n in g.nodes if id(n) not in removed]
    return g
