"""Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), boolean logic (And, Or, Xor,
Not) and Where, with numpy broadcasting. Comparisons take any run-time dtype and give bool;
one kernel, mlcc_compare, covers them all (Not is Equal to false). Where moves elements of any
size."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..errors import ModelError
from ..ir import Enum, Lowering, Node
from .common import (MAX_RANK, C_DTYPES, broadcast_shapes, broadcast_strides,
                     elementwise_dynamic, merge_broadcast_axes, require_dtype)
from .registry import OpDef, register


def emit_compare(lo: Lowering, op: str, a: str, b: str, out: str) -> None:
    out_shape = lo.value(out).shape
    sa = broadcast_strides(lo.value(a).shape, out_shape)
    sb = broadcast_strides(lo.value(b).shape, out_shape)
    dims, (sa, sb) = merge_broadcast_axes(out_shape, [sa, sb])
    pad = MAX_RANK - len(dims)
    lo.call("mlcc_compare", [a, b, out], [out], params_type="mlcc_compare_params",
            params={"op": Enum(f"MLCC_COMPARE_{op}"),
                    "dtype": Enum(C_DTYPES[lo.value(a).dtype]), "rank": len(dims),
                    "shape": dims + [1] * pad, "a_strides": sa + [0] * pad,
                    "b_strides": sb + [0] * pad})


class _Compare(OpDef):
    attributes = {}
    compare_op = "EQUAL"
    # float16 would need converting first: refused
    input_dtypes = [d for d in C_DTYPES if d != "float16"]

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins, g)

    def infer(self, node, ins, g):
        if len(ins) != 2 or any(v is None for v in ins):
            raise ModelError(f"{node.op_type} takes two inputs")
        require_dtype(node, ins, self.input_dtypes)
        return [("bool", broadcast_shapes(ins[0].shape, ins[1].shape))]

    def lower(self, node: Node, lo: Lowering) -> None:
        emit_compare(lo, self.compare_op, node.inputs[0], node.inputs[1], node.outputs[0])

    def flops(self, node, g):
        return g.values[node.outputs[0]].numel


for _name, _op, _since in [("Equal", "EQUAL", 7), ("Less", "LESS", 7),
                           ("Greater", "GREATER", 7), ("LessOrEqual", "LESS_EQUAL", 12),
                           ("GreaterOrEqual", "GREATER_EQUAL", 12)]:
    register(_name, since=_since)(type(_name, (_Compare,), {"compare_op": _op}))

for _name, _op in [("And", "AND"), ("Or", "OR"), ("Xor", "XOR")]:
    register(_name, since=7)(type(_name, (_Compare,), {"compare_op": _op,
                                                       "input_dtypes": ["bool"]}))


@register("Not")
class Not(OpDef):
    attributes = {}

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins, g)

    def infer(self, node, ins, g):
        require_dtype(node, ins[:1], ["bool"])
        return [("bool", ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        false = lo.add_const(f"{node.name}.false", np.array(False))
        emit_compare(lo, "EQUAL", node.inputs[0], false, node.outputs[0])


# The attribute passes/control_flow.py's Where selecting a run-time If's branch outputs gets
# (infer_and_fold) when a branch's size along that axis depends on the data.
SELECT_AXIS = "_select_axis"


@register("Where", since=9)
class Where(OpDef):
    attributes = {SELECT_AXIS: None}

    def dynamic(self, node, ins, g):
        if SELECT_AXIS in node.attrs:     # the taken branch's count, as a count of its own
            return [(node.attrs[SELECT_AXIS], node.outputs[0])]
        return elementwise_dynamic(node, ins, g)

    def infer(self, node, ins, g):
        cond, x, y = ins
        if cond.dtype != "bool":
            raise ModelError(f"the condition must be bool, not {cond.dtype}")
        dtype = require_dtype(node, [x, y], list(C_DTYPES))
        if SELECT_AXIS in node.attrs:
            a = node.attrs[SELECT_AXIS]
            if cond.numel != 1 or len(x.shape) != len(y.shape) or not 0 <= a < len(x.shape):
                raise ModelError(f"{SELECT_AXIS} selects a run-time If's branch output")
            return [(dtype, x.shape[:a] + (max(x.shape[a], y.shape[a]),) + x.shape[a + 1:])]
        return [(dtype, broadcast_shapes(cond.shape, x.shape, y.shape))]

    def lower(self, node: Node, lo: Lowering) -> None:
        c, x, y = node.inputs
        if SELECT_AXIS in node.attrs:
            self._select_counted(node, lo)
            return
        emit_where(lo, c, x, y, node.outputs[0])

    def _select_counted(self, node: Node, lo: Lowering) -> None:
        """A run-time If's branch output of a data-dependent size: the taken branch's valid
        part copied (mlcc_concat__counted of that one input, under the If's condition), its
        count the output's."""
        c, out = node.inputs[0], lo.value(node.outputs[0])
        a = node.attrs[SELECT_AXIS]
        count = lo.count(out.name)
        for src, want in ((node.inputs[1], True), (node.inputs[2], False)):
            v = lo.value(src)
            lo.begin(replace(node, guard=node.guard + ((c, want),)))
            lo.call("mlcc_concat__counted",
                    [src if v.numel else "", lo.count_of(src) if v.dyn is not None else "",
                     count, out.name], [count, out.name],
                    params_type="mlcc_concat_counted_params",
                    params={"outer": math.prod(out.shape[:a]), "src_max": v.shape[a],
                            "inner": math.prod(out.shape[a + 1:]), "dst_max": out.shape[a],
                            "elem_size": np.dtype(out.dtype).itemsize, "first": 1},
                    returns_status=True)
        lo.begin(node)


def emit_where(lo: Lowering, c: str, x: str, y: str, out: str) -> None:
    """out = c ? x : y with broadcasting (c bool; x, y and out of one type)."""
    out_shape = lo.value(out).shape
    strides = [broadcast_strides(lo.value(n).shape, out_shape) for n in (c, x, y)]
    dims, (sc, sx, sy) = merge_broadcast_axes(out_shape, strides)
    pad = MAX_RANK - len(dims)
    lo.call("mlcc_where", [c, x, y, out], [out], params_type="mlcc_where_params",
            params={"elem_size": np.dtype(lo.value(out).dtype).itemsize, "rank": len(dims),
                    "shape": dims + [1] * pad, "c_strides": sc + [0] * pad,
                    "x_strides": sx + [0] * pad, "y_strides": sy + [0] * pad})


class _Classify(OpDef):
    """IsNaN and IsInf of float32 values, as bool (mlcc_f32_classify)."""
    attributes = {}
    is_inf = 0

    def dynamic(self, node, ins, g):
        return elementwise_dynamic(node, ins, g)

    def infer(self, node, ins, g):
        require_dtype(node, ins[:1], ["float32"])
        return [("bool", ins[0].shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        if x.numel == 0:
            return
        lo.call("mlcc_f32_classify", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_classify_params",
                params={"n": x.numel, "is_inf": self.is_inf,
                        "detect_negative": int(node.attr("detect_negative", 1)),
                        "detect_positive": int(node.attr("detect_positive", 1))})


@register("IsNaN", since=9)
class IsNaN(_Classify):
    pass


@register("IsInf", since=10)
class IsInf(_Classify):
    attributes = {"detect_negative": lambda v: v in (0, 1),
                  "detect_positive": lambda v: v in (0, 1)}
    is_inf = 1
