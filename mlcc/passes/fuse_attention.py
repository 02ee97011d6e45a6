"""Scaled dot-product attention becomes one mlcc.Attention node (see mlcc/ops/attention.py).

Needs: static types; constants folded (the scale must be a constant); runs after
fuse_matmul_bias (the projections keep their biases) and before fuse_activations.
Guarantees: every chain
    S = MatMul(Q, KT) -> [Div(S, c) | Mul(S, c) | Mul(c, S)] -> [Add(S, M) | Add(M, S)]
      -> Softmax(last axis) -> MatMul(P, V)
over float32 values of rank 3 or 4 with the same batch dimensions, Q [.., Sq, D], KT [.., D, Sk],
V [.., Sk, D] (the same D), c a constant scalar, M any float32 value that broadcasts to S
without enlarging it, and every intermediate value read only by the next node of the chain
and not a graph output, is one Attention node: the [Sq, Sk] scores never reach memory. A
Transpose that produces Q, KT or V and has no other reader is absorbed (the kernel reads its
input through permuted strides), and so is a Transpose that is the only reader of the result:
the Transposes that split and merge the heads of a BERT layer cost nothing.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node
from ..ir.symbolic import as_dim, same_shape
from ..ops.attention import DOMAIN
from ..ops.common import broadcast_shapes, broadcast_strides, contiguous_strides


def _scalar(g: Graph, name: str) -> float | None:
    c = g.const(name)
    if c is None or c.size != 1 or c.dtype != np.float32:
        return None
    return float(c.reshape(-1)[0])


def _pad4(strides: list[int]) -> list[int]:
    return [0] * (4 - len(strides)) + list(strides)


def fuse_attention(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers = g.producers(), g.consumers()
    outputs = set(g.outputs)

    def only_reader(value: str) -> Node | None:
        readers = consumers.get(value, [])
        return None if value in outputs or len(readers) != 1 else readers[0]

    def feeding(value: str, op: str, reader: Node) -> Node | None:
        """The unfused `op` node producing `value` if `reader` is its output's only reader."""
        n = producers.get(value)
        if (n is None or n.op_type != op or n.domain != "" or n.attrs.get("_act")
                or len(n.outputs) != 1 or only_reader(value) is not reader):
            return None
        return n

    def source(value: str, reader: Node) -> tuple[str, list[int], list[Node]]:
        """(storage read, element strides of `value` in it, absorbed Transposes)."""
        t = feeding(value, "Transpose", reader)
        shape = g.values[value].shape
        if t is None:
            return value, contiguous_strides(shape), []
        base = contiguous_strides(g.values[t.inputs[0]].shape)
        perm = t.attr("perm") or list(range(len(shape)))[::-1]
        return t.inputs[0], [base[p] for p in perm], [t]

    def scores(value: str, reader: Node) -> tuple[Node, Node | None, float] | None:
        """(MatMul, scale node or None, scale) if `value` is MatMul(Q, KT) [times or divided
        by a constant scalar], read only by `reader`."""
        scale_node, scale = None, 1.0
        for op in ("Div", "Mul"):
            sc = feeding(value, op, reader)
            if sc is None:
                continue
            k = 0 if _scalar(g, sc.inputs[1]) is not None else 1      # the scores' operand
            c = _scalar(g, sc.inputs[1 - k])
            if c is None or (op == "Div" and k != 0) or c == 0.0:
                return None
            scale_node, scale = sc, (1.0 / c if op == "Div" else c)
            value, reader = sc.inputs[k], sc
            break
        mm1 = feeding(value, "MatMul", reader)
        if mm1 is None or len(mm1.inputs) != 2:
            return None
        return mm1, scale_node, scale

    removed: set[int] = set()
    replace: dict[int, Node] = {}
    for mm2 in g.nodes:
        if mm2.op_type != "MatMul" or mm2.domain != "" or len(mm2.inputs) != 2 or \
                mm2.attrs.get("_act") or id(mm2) in removed:
            continue
        sm = feeding(mm2.inputs[0], "Softmax", mm2)
        if sm is None:
            continue
        s_shape = g.values[sm.inputs[0]].shape
        rank = len(s_shape)
        if rank not in (3, 4) or int(sm.attr("axis", -1 if sm.version >= 13 else 1)) not in (
                -1, rank - 1):
            continue
        chain, mask = [sm], ""
        found = scores(sm.inputs[0], sm)
        add = feeding(sm.inputs[0], "Add", sm) if found is None else None
        if add is not None:
            for k in (0, 1):               # which operand is the scores: Add commutes
                found = scores(add.inputs[k], add)
                if found is not None:
                    mask = add.inputs[1 - k]
                    break
            mv = g.values[mask] if mask else None
            if mv is None or (mv.dtype != "float32" or len(mv.shape) > rank
                              or not same_shape(broadcast_shapes(mv.shape, s_shape), s_shape)):
                continue
            chain.append(add)
        if found is None:
            continue
        mm1, sc, scale = found
        chain += [sc] if sc is not None else []
        q, kt, v = mm1.inputs[0], mm1.inputs[1], mm2.inputs[1]
        qs, kts, vs = (g.values[x].shape for x in (q, kt, v))
        if any(len(s) != rank for s in (qs, kts, vs)) or not (
                qs[:-2] == kts[:-2] == vs[:-2] and qs[-1] == kts[-2] == vs[-1]
                and kts[-1] == vs[-2]) or any(g.values[x].dtype != "float32" for x in (q, kt, v)):
            continue
        q_src, q_str, q_t = source(q, mm1)
        k_src, kt_str, k_t = source(kt, mm1)
        v_src, v_str, v_t = source(v, mm2)
        if q == kt or (q_t and k_t and q_t[0] is k_t[0]):
            continue
        out, out_shape = mm2.outputs[0], g.values[mm2.outputs[0]].shape
        out_str, out_t = contiguous_strides(out_shape), []
        t = only_reader(out)
        if t is not None and t.op_type == "Transpose" and t.domain == "" and t.attr("perm"):
            perm, tshape = t.attr("perm"), g.values[t.outputs[0]].shape
            tstr = contiguous_strides(tshape)
            out_str = [0] * rank
            for a, p in enumerate(perm):
                out_str[p] = tstr[a]
            out, out_shape, out_t = t.outputs[0], tshape, [t]
        k_str = kt_str[:-2] + [kt_str[-1], kt_str[-2]]          # K[b][h][j][c]
        batch_dims = (1,) * (4 - rank) + tuple(qs[:-2])
        attrs = {
            "dims": [as_dim(batch_dims[0]), as_dim(batch_dims[1]), as_dim(qs[-2]),
                     as_dim(kts[-1]), as_dim(qs[-1])],
            "q_strides": _pad4(q_str), "k_strides": _pad4(k_str), "v_strides": _pad4(v_str),
            "mask_strides": _pad4(broadcast_strides(g.values[mask].shape, s_shape))
            if mask else [0, 0, 0, 0],
            "out_strides": _pad4(out_str), "out_shape": [as_dim(d) for d in out_shape],
            "scale": float(np.float32(scale)),
        }
        nodes = q_t + k_t + v_t + [mm1] + chain[::-1] + [mm2]
        last = out_t[0] if out_t else mm2
        fused = [f for m in nodes for f in m.fused + [f"{m.name}:{m.op_type}"]] + \
            (last.fused if out_t else [])
        replace[id(last)] = Node(last.name, "Attention", [q_src, k_src, v_src, mask], [out],
                                 attrs, domain=DOMAIN, version=1,
                                 fused=fused if out_t else fused[:-1])
        removed.update(id(m) for m in nodes if m is not last)
        if out_t:
            removed.add(id(mm2))
    g.nodes = [replace.get(id(n), n) for n in g.nodes if id(n) not in removed]
    # The node is placed where its last absorbed node was; its inputs are all produced earlier
    # because every absorbed node's inputs were.
    return g
