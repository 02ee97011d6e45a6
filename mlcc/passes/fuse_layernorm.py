"""LayerNorm written out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div [, Mul, Add]) becomes
one LayerNormalization node.

Exporters before opset 17 (torch) and PaddlePaddle (PP-OCR's SVTR) write LayerNorm this way:
seven to nine kernels, each a pass over the tensor. One LayerNormalization kernel reads the row
once for its moments and once to write it.

Needs: static types; constants folded (epsilon, the exponent 2, gamma and beta must be
constants).
Guarantees: for a float32 x and a suffix A = [r - k, ..., r - 1] of its axes (k >= 1), the chain
    m = ReduceMean(x, A, keepdims=1); d = Sub(x, m); v = ReduceMean(Pow(d, 2) | Mul(d, d), A,
    keepdims=1); y = Div(d, Sqrt(Add(v, eps)))  [; y = Mul(y, gamma)]  [; y = Add(y, beta)]
(operands of Add and Mul in either order; eps a constant scalar; gamma and beta float32
constants that broadcast to x without enlarging it and vary only along A), whose intermediate
values have no readers outside the chain and are not graph outputs, is one
LayerNormalization(x, gamma or ones, beta, axis=r - k, epsilon=eps) named after the chain's last
node and writing its output. Reductions of opset 18 (axes as an input) are matched too.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .fuse_hardswish import _other, _scalar

LAYERNORM_SINCE = 17    # the ONNX opset that defines LayerNormalization


def _suffix_axes(g: Graph, n: Node) -> list[int] | None:
    """The reduced axes of a ReduceMean if they are a suffix of its input's axes, keepdims=1."""
    if n.op_type != "ReduceMean" or n.domain != "" or int(n.attr("keepdims", 1)) != 1:
        return None
    rank = len(g.values[n.inputs[0]].shape)
    if n.version >= 18:
        axes = g.const(n.input(1))
        if axes is None:
            return None
        axes = [int(a) for a in axes.reshape(-1)]
    else:
        axes = n.attr("axes")
    if not axes:
        return None
    axes = sorted(a + rank if a < 0 else a for a in axes)
    return axes if axes == list(range(rank - len(axes), rank)) else None


def _param(g: Graph, name: str, x_shape, axis: int) -> np.ndarray | None:
    """A constant that broadcasts to x, varying only along the normalized axes."""
    c = g.const(name)
    if c is None or c.dtype != np.float32 or c.ndim > len(x_shape):
        return None
    shape = (1,) * (len(x_shape) - c.ndim) + c.shape
    if any(s != 1 for s in shape[:axis]) or any(s not in (1, d) for s, d in zip(shape, x_shape)):
        return None
    return c


def fuse_layernorm(g: Graph) -> Graph:
    g = g.copy()
    consumers = g.consumers()
    outputs = set(g.outputs)

    def readers(value: str) -> list[Node]:
        return [] if value in outputs else consumers.get(value, [])

    def only_reader(value: str, op: str) -> Node | None:
        r = readers(value)
        return r[0] if len(r) == 1 and r[0].op_type == op and r[0].domain == "" else None

    removed: set[int] = set()
    replace: dict[int, Node] = {}
    for rm1 in g.nodes:
        axes = _suffix_axes(g, rm1)
        if axes is None or id(rm1) in removed:
            continue
        x = rm1.inputs[0]
        xv = g.values[x]
        if xv.dtype != "float32":
            continue
        sub = only_reader(rm1.outputs[0], "Sub")
        if sub is None or sub.inputs != [x, rm1.outputs[0]]:
            continue
        d = sub.outputs[0]
        users = list({id(u): u for u in readers(d)}.values())     # Mul(d, d) reads d twice
        sq = next((u for u in users if (u.op_type == "Pow" and u.inputs[0] == d
                                        and _scalar(g, u.inputs[1], 2.0))
                   or (u.op_type == "Mul" and u.inputs == [d, d])), None)
        div = next((u for u in users if u.op_type == "Div" and u.inputs[0] == d), None)
        if len(users) != 2 or sq is None or div is None:
            continue
        rm2 = only_reader(sq.outputs[0], "ReduceMean")
        if rm2 is None or _suffix_axes(g, rm2) != axes:
            continue
        add = only_reader(rm2.outputs[0], "Add")
        eps_name = _other(add, rm2.outputs[0]) if add is not None else None
        eps = g.const(eps_name) if eps_name else None
        if eps is None or eps.size != 1 or eps.dtype != np.float32:
            continue
        sqrt = only_reader(add.outputs[0], "Sqrt")
        if sqrt is None or div.inputs[1] != sqrt.outputs[0] or readers(sqrt.outputs[0]) != [div]:
            continue
        chain = [rm1, sub, sq, rm2, add, sqrt, div]
        axis = axes[0]
        gamma = beta = None
        mul = only_reader(div.outputs[0], "Mul")
        if mul is not None:
            gamma = _param(g, _other(mul, div.outputs[0]) or "", xv.shape, axis)
            if gamma is not None:
                chain.append(mul)
        tail = chain[-1].outputs[0]
        bias_add = only_reader(tail, "Add")
        if bias_add is not None:
            beta = _param(g, _other(bias_add, tail) or "", xv.shape, axis)
            if beta is not None:
                chain.append(bias_add)
        if any(id(m) in removed for m in chain):
            continue
        norm_shape = tuple(xv.shape[axis:])
        scale_name = (_other(chain[7], div.outputs[0]) if gamma is not None else
                      g.add_const(f"{div.name}.ones", np.ones(norm_shape, np.float32)))
        inputs = [x, scale_name] + ([_other(chain[-1], chain[-2].outputs[0])]
                                    if beta is not None else [])
        last = chain[-1]
        replace[id(last)] = Node(
            last.name, "LayerNormalization", inputs, list(last.outputs),
            {"axis": axis, "epsilon": float(eps.reshape(-1)[0])}, version=LAYERNORM_SINCE,
            fused=[f for m in chain[:-1] for f in m.fused + [f"{m.name}:{m.op_type}"]]
            + last.fused)
        removed.update(id(m) for m in chain[:-1])
    g.nodes = [replace.get(id(n), n) for n in g.nodes if id(n) not in removed]
    return g
