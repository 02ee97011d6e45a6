"""Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSum, ReduceLogSumExp) over any set of axes, on one kernel.

Any set of reduced axes is canonicalized at compile time: size-1 axes are dropped and adjacent
axes that are both reduced or both kept are merged, leaving alternating groups
[kept, reduced, kept, reduced, ...]. Each reduced group is one [outer, reduce, inner] call of
mlcc_f32_reduce, with the inner (kept, contiguous) dimension innermost; every reduction here
composes (a sum of partial sums, a max of partial maxima, a log-sum-exp of partial
log-sum-exps), so the first call applies the element transform (square, abs) and the last the
final one (mean scale, sqrt, log). Typical cases (last axis, channel axis, spatial axes) are
one call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Graph, Lowering, Node
from .common import (C_DTYPES, INT_DTYPES, emit_plain_copy, ints_attr_or_input, norm_axis,
                     require_dtype)
from .registry import OpDef, refuse_dynamic, register


@dataclass(frozen=True)
class ReduceKind:
    first: str              # mlcc_reduce_op of the first call (applies the element transform)
    rest: str               # mlcc_reduce_op of the later calls (combines partial results)
    post: str = "NONE"      # mlcc_reduce_post of the last call
    mean: bool = False      # the last call scales by 1 / (number of reduced elements)

    @property
    def is_identity_on_one(self) -> bool:
        """Whether reducing a single element returns it unchanged (then no kernel is needed)."""
        return self.first in ("SUM", "MAX", "MIN", "PROD", "LOG_SUM_EXP") and self.post == "NONE"


KINDS = {
    "ReduceSum": ReduceKind("SUM", "SUM"),
    "ReduceMean": ReduceKind("SUM", "SUM", mean=True),
    "ReduceMax": ReduceKind("MAX", "MAX"),
    "ReduceMin": ReduceKind("MIN", "MIN"),
    "ReduceProd": ReduceKind("PROD", "PROD"),
    "ReduceSumSquare": ReduceKind("SUM_SQUARE", "SUM"),
    "ReduceL1": ReduceKind("SUM_ABS", "SUM"),
    "ReduceL2": ReduceKind("SUM_SQUARE", "SUM", post="SQRT"),
    "ReduceLogSum": ReduceKind("SUM", "SUM", post="LOG"),
    "ReduceLogSumExp": ReduceKind("LOG_SUM_EXP", "LOG_SUM_EXP"),
}


def reduce_groups(shape: Sequence[int], axes: set[int]) -> list[list]:
    """[size, reduced?] groups after dropping size-1 axes and merging alike neighbours."""
    groups: list[list] = []
    for axis, d in enumerate(shape):
        if isinstance(d, int) and d == 1:    # (a dynamic size may be 1: kept, still right)
            continue
        red = axis in axes
        if groups and groups[-1][1] == red:
            groups[-1][0] *= d
        else:
            groups.append([d, red])
    return groups


def reduce_calls(shape: Sequence[int], axes: set[int]) -> list[tuple[int, int, int]]:
    """The [outer, reduce, inner] views of the successive calls: the largest reduced group
    first (it shrinks the data most), each later call reading the previous one's result."""
    groups = reduce_groups(shape, axes)
    calls = []
    while any(red for _, red in groups):
        j = max((k for k, (_, red) in enumerate(groups) if red),
                key=lambda k: (groups[k][0], k))
        outer = math.prod(d for d, _ in groups[:j])
        inner = math.prod(d for d, _ in groups[j + 1:])
        calls.append((outer, groups[j][0], inner))
        del groups[j]
        if 0 < j < len(groups) and not groups[j - 1][1] and not groups[j][1]:
            groups[j - 1][0] *= groups[j][0]
            del groups[j]
    return calls


def emit_reduce(lo: Lowering, kind: ReduceKind, src: str, dst: str, axes: set[int],
                op: str = "") -> None:
    """dst = the reduction of src over `axes` (dst has the kept shape, with or without the
    reduced axes as 1s: only its element order matters)."""
    shape = lo.value(src).shape
    count = math.prod(shape[a] for a in axes)
    calls = reduce_calls(shape, axes)
    if not calls:
        if kind.is_identity_on_one:
            if dst in lo.graph.outputs or src in lo.graph.outputs:
                emit_plain_copy(lo, src, dst, op=op or "copy")
            else:
                lo.alias(dst, src)
            return
        calls = [(1, 1, math.prod(shape))]     # the element transform alone
    if lo.value(dst).numel == 0:
        return
    scale = (1.0 / count if count else float("nan")) if kind.mean else 1.0
    cur = src
    for t, (outer, red, inner) in enumerate(calls):
        last = t == len(calls) - 1
        out = dst if last else lo.temp(f"{dst}.partial{t}", "float32", (outer, inner))
        lo.call("mlcc_f32_reduce", [cur, out], [out], params_type="mlcc_reduce_params", params={
            "outer": outer, "reduce": red, "inner": inner,
            "op": Enum(f"MLCC_REDUCE_{kind.first if t == 0 else kind.rest}"),
            "post": Enum(f"MLCC_REDUCE_POST_{kind.post if last else 'NONE'}"),
            "scale": scale if last else 1.0}, op=op, pool=True)
        cur = out


# The reductions that also run on integer tensors (mlcc_int_reduce), by their mlcc_int_op.
INT_REDUCE_OPS = {"ReduceSum": "ADD", "ReduceProd": "MUL", "ReduceMax": "MAX",
                  "ReduceMin": "MIN"}


def emit_int_reduce(lo: Lowering, op: str, src: str, dst: str, axes: set[int]) -> None:
    """dst = the integer (or bool) reduction (mlcc_int_op `op`) of src over `axes`,
    wrapping."""
    v = lo.value(src)
    calls = reduce_calls(v.shape, axes)
    if not calls or lo.value(dst).numel == 0:
        if dst in lo.graph.outputs or src in lo.graph.outputs:
            emit_plain_copy(lo, src, dst)
        else:
            lo.alias(dst, src)
        return
    cur = src
    for t, (outer, red, inner) in enumerate(calls):
        out = dst if t == len(calls) - 1 else lo.temp(f"{dst}.partial{t}", v.dtype,
                                                        (outer, inner))
        lo.call("mlcc_int_reduce", [cur, out], [out], params_type="mlcc_int_reduce_params",
                params={"outer": outer, "reduce": red, "inner": inner,
                        "op": Enum(f"MLCC_INT_{op}"),
                        # bools are bytes 0 and 1: their max and min are uint8's
                        "dtype": Enum(C_DTYPES["uint8" if v.dtype == "bool" else v.dtype])})
        cur = out


# The element a padding position of a data-dependent axis holds for a reduction over it to
# skip it (mlcc_fill_padding): the reduction's identity, by dtype kind (f: float, i: integer,
# b: bool). ReduceMean is not here: its divisor would be the run-time count.
PADDING_IDENTITY = {
    "ReduceMax": {"f": -np.inf, "i": "min", "b": 0},
    "ReduceMin": {"f": np.inf, "i": "max", "b": 1},
    "ReduceSum": {"f": 0.0, "i": 0}, "ReduceProd": {"f": 1.0, "i": 1},
    "ReduceSumSquare": {"f": 0.0}, "ReduceL1": {"f": 0.0}, "ReduceL2": {"f": 0.0},
    "ReduceLogSum": {"f": 0.0}, "ReduceLogSumExp": {"f": -np.inf},
}


def _fill_padding(lo: Lowering, node: Node, x) -> str:
    """A copy of x whose padding along its data-dependent axis is the identity of node's
    reduction."""
    axis = x.dyn[0]
    dtype = np.dtype("uint8" if x.dtype == "bool" else x.dtype)
    kind = "b" if x.dtype == "bool" else "f" if dtype.kind == "f" else "i"
    fill = PADDING_IDENTITY[node.op_type][kind]
    if fill in ("min", "max"):
        fill = getattr(np.iinfo(dtype), fill)
    fill_name = lo.add_const(f"{node.name}.padding", np.array([fill], dtype=dtype))
    dst = lo.temp(f"{x.name}.padded", x.dtype, x.shape)
    lo.call("mlcc_fill_padding", [x.name, lo.count_of(x.name), fill_name, dst], [dst],
            params_type="mlcc_fill_padding_params",
            params={"outer": math.prod(x.shape[:axis]), "max": x.shape[axis],
                    "inner": math.prod(x.shape[axis + 1:]), "elem_size": dtype.itemsize},
            returns_status=True)
    return dst


class _Reduce(OpDef):
    attributes = {"axes": None, "keepdims": lambda v: v in (0, 1),
                  "noop_with_empty_axes": lambda v: v in (0, 1)}
    axes_input_since = 18          # opset where axes moved from attribute to input

    def _axes(self, node: Node, g: Graph, rank: int) -> list[int]:
        """The reduced axes, sorted. noop_with_empty_axes with no axes reduces over none: the
        output is the element transform of the input (x for ReduceSum, |x| for ReduceL1, ...),
        as onnxruntime and the ONNX reference."""
        axes = ints_attr_or_input(g, node, "axes", 1, self.axes_input_since)
        if not axes:
            noop = node.version >= self.axes_input_since and node.attr("noop_with_empty_axes", 0)
            return [] if noop else list(range(rank))
        norm = sorted(norm_axis(a, rank, "axes") for a in axes)
        if len(set(norm)) != len(norm):
            raise ModelError(f"axes {axes} repeat an axis")
        return norm

    def infer(self, node, ins, g):
        x = ins[0]
        ints = INT_DTYPES if node.op_type in INT_REDUCE_OPS else []
        if node.op_type in ("ReduceMax", "ReduceMin"):    # any and all, on 0/1 bytes
            ints = ints + ["bool"]
        require_dtype(node, ins[:1], ["float32"] + ints)
        axes = self._axes(node, g, len(x.shape))
        if x.dtype != "float32" and any(x.shape[a] == 0 for a in axes):
            raise UnsupportedError(f"an integer {node.op_type} over an empty axis is not "
                                   f"supported")
        if node.attr("keepdims", 1):
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [(x.dtype, shape)]

    def dynamic(self, node, ins, g):
        """Over a data-dependent axis: the padding filled with the reduction's identity
        first (PADDING_IDENTITY; not ReduceMean, whose divisor would be the count); along
        another axis, the output carries the count."""
        x = ins[0]
        refuse_dynamic(node, ins[1:])
        if x.dyn is None:
            return [None]
        axis, key = x.dyn
        axes = self._axes(node, g, len(x.shape))
        if axis not in axes:
            kept = axis if node.attr("keepdims", 1) else axis - sum(a < axis for a in axes)
            return [(kept, key)]
        if node.op_type not in PADDING_IDENTITY:
            refuse_dynamic(node, [x], "reduces over that axis (over a data-dependent axis "
                                      "mlcc reduces with " + ", ".join(PADDING_IDENTITY) + ")")
        return [None]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        axes = self._axes(node, lo.graph, len(x.shape))
        src = node.inputs[0]
        if x.dyn is not None and x.dyn[0] in axes:     # the padding as the identity
            src = _fill_padding(lo, node, x)
        if x.dtype != "float32":
            emit_int_reduce(lo, INT_REDUCE_OPS[node.op_type], src, node.outputs[0], set(axes))
            return
        emit_reduce(lo, KINDS[node.op_type], src, node.outputs[0], set(axes))

    def flops(self, node, g):
        return g.values[node.inputs[0]].numel


for _name in KINDS:
    register(_name)(type(_name, (_Reduce,), {"axes_input_since": 13 if _name == "ReduceSum"
                                             else 18}))
