"""Operators that only reinterpret a tensor's shape: views of the same bytes at run time."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Lowering, Node
from ..ir.symbolic import SymInt, as_dim, count_var, dim_vars
from .common import (const_input, contiguous_strides, emit_copy, emit_plain_copy,
                     ints_attr_or_input, norm_axis, view_dynamic)
from .refusals import RANDOM, refusal
from .registry import OpDef, refuse_dynamic, register


class _View(OpDef):
    """Output = input with another shape; lowered to an alias (a copy if it is a graph output)."""

    def dynamic(self, node, ins, g):
        refuse_dynamic(node, ins[1:])
        return view_dynamic(node, ins[0], g.values[node.outputs[0]]) * len(node.outputs)

    def lower(self, node: Node, lo: Lowering) -> None:
        src, dst = node.inputs[0], node.outputs[0]
        if dst in lo.graph.outputs or src in lo.graph.outputs:
            emit_plain_copy(lo, src, dst, op=node.op_type)
        else:
            lo.alias(dst, src)


@register("Reshape")
class Reshape(_View):
    quant_rules = ("movement",)
    counted_shapes = "view"
    attributes = {"allowzero": None, "shape": None}   # "shape" is the opset < 5 attribute

    def infer(self, node, ins, g):
        x = ins[0]
        if node.version < 5:
            target = [int(d) for d in node.attr("shape", [])]
        else:
            target = [as_dim(d) for d in const_input(g, node, 1, "shape").reshape(-1)]
        shape = x.shape
        if x.dyn is not None and any(v.count for v in dim_vars(target)):
            # a target computed from the count: the input's size is that count too
            a, key = x.dyn
            shape = shape[:a] + (SymInt.var(count_var(key, shape[a])),) + shape[a + 1:]
        return [(x.dtype, reshape_target(shape, target, bool(node.attr("allowzero", 0))))]


def reshape_target(shape, target, allowzero=False) -> tuple[int, ...]:
    out = [shape[i] if isinstance(d, int) and d == 0 and not allowzero and i < len(shape)
           else d for i, d in enumerate(target)]
    total = math.prod(shape)
    if out.count(-1) > 1:
        raise ModelError(f"reshape target {target} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise ModelError(f"cannot reshape {list(shape)} to {target}")
        out[out.index(-1)] = total // known
    if any(d < 0 for d in out) or math.prod(out) != total:
        raise ModelError(f"cannot reshape {list(shape)} ({total} elements) to {target}")
    return tuple(out)


@register("Flatten")
class Flatten(_View):
    quant_rules = ("movement",)
    attributes = {"axis": None}

    def infer(self, node, ins, g):
        x = ins[0]
        axis = int(node.attr("axis", 1))     # in [-rank, rank]: rank flattens to [N, 1]
        if not -len(x.shape) <= axis <= len(x.shape):
            raise ModelError(f"axis {axis} is out of range for rank {len(x.shape)}")
        axis = axis + len(x.shape) if axis < 0 else axis
        return [(x.dtype, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


@register("Squeeze")
class Squeeze(_View):
    quant_rules = ("movement",)
    attributes = {"axes": None}

    def infer(self, node, ins, g):
        x = ins[0]
        axes = ints_attr_or_input(g, node, "axes", 1, 13)
        if axes is None:
            return [(x.dtype, tuple(d for d in x.shape if d != 1))]
        axes = {norm_axis(a, len(x.shape), "axes") for a in axes}
        if any(x.shape[a] != 1 for a in axes):
            raise ModelError(f"cannot squeeze axes {sorted(axes)} of {list(x.shape)}")
        return [(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


@register("Unsqueeze")
class Unsqueeze(_View):
    quant_rules = ("movement",)
    attributes = {"axes": None}

    def infer(self, node, ins, g):
        x = ins[0]
        axes = ints_attr_or_input(g, node, "axes", 1, 13)
        if axes is None:
            raise ModelError("Unsqueeze needs axes")
        rank = len(x.shape) + len(axes)
        axes = sorted(norm_axis(a, rank, "axes") for a in axes)
        if len(set(axes)) != len(axes):
            raise ModelError(f"repeated axes {axes}")
        dims = iter(x.shape)
        return [(x.dtype, tuple(1 if i in axes else next(dims) for i in range(rank)))]


@register("Identity")
class Identity(_View):
    quant_rules = ("movement",)
    attributes = {}

    def infer(self, node, ins, g):
        return [(ins[0].dtype, ins[0].shape)]


@register("Dropout")
class Dropout(_View):
    """Inference Dropout is the identity and its mask all true. Training mode drops random
    elements, which a compiled model cannot reproduce, unless the ratio is 0."""
    attributes = {"ratio": None, "seed": None, "is_test": None}

    def infer(self, node, ins, g):
        x = ins[0]
        training = const_input(g, node, 2, "training_mode") if node.version >= 12 else None
        if training is not None and bool(np.asarray(training)):
            ratio = const_input(g, node, 1, "ratio")
            if ratio is None or float(np.asarray(ratio)) != 0.0:
                raise UnsupportedError("Dropout in training mode (random, with a non-zero "
                                       "ratio) cannot be compiled for inference: "
                                       + refusal(RANDOM))
        types = [(x.dtype, x.shape)]
        if len(node.outputs) > 1:
            types.append(("bool", x.shape))
        return types

    def fold(self, node, arrays):
        outs = [arrays[0]]
        if len(node.outputs) > 1:
            outs.append(np.ones(arrays[0].shape, dtype=bool))
        return outs

    def lower(self, node: Node, lo: Lowering) -> None:
        mask = node.outputs[1] if len(node.outputs) > 1 else ""
        if mask:
            # All true: one constant element broadcast over the mask (stride 0).
            one = lo.add_const(f"{node.name}.true", np.ones(1, dtype=bool))
            shape = lo.value(mask).shape
            emit_copy(lo, one, mask, list(shape), [0] * len(shape),
                      contiguous_strides(shape), op=node.op_type)
        super().lower(node, lo)
