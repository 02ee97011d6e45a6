"""Normalizations: BatchNormalization (inference, and training mode from opset 14), LRN,
InstanceNormalization, LayerNormalization, GroupNormalization, MeanVarianceNormalization,
RMSNormalization and LpNormalization.

A BatchNormalization that follows a Conv is folded into its weights by
passes.fold_batchnorm; the others run here as one per-channel affine kernel whose scale and
shift the compiler computes (in float64) from the constant statistics.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Lowering, Node, Value
from ..ir.symbolic import is_one, is_symbolic, same_shape
from .common import (broadcast_strides, const_input, contiguous_strides, emit_copy, norm_axis,
                     require_dtype)
from .registry import OpDef, register


def _refuse_live_outputs(lo: Lowering, node: Node, what: str) -> None:
    """Optional outputs after the first are statistics mlcc does not compute at run time;
    they are fine as long as nothing reads them (dead code removed their values)."""
    for name in node.outputs[1:]:
        if name and name in lo.graph.values:
            raise UnsupportedError(f"the {what} outputs are not supported at run time "
                                   f"({name!r} is used)")


def _per_channel_params(x: Value, ins: list, names: tuple[str, str]) -> list:
    """The type of an [N, C, ...] normalization's output, once inputs 1 and 2 (`names`) are
    checked to hold one value per channel."""
    for v, what in zip(ins[1:3], names):
        if v is None or v.numel != x.shape[1]:
            raise ModelError(f"{what} must have {x.shape[1]} elements")
    return [(x.dtype, x.shape)]


@register("BatchNormalization")
class BatchNormalization(OpDef):
    attributes = {"epsilon": None, "momentum": None, "spatial": lambda v: v in (0, 1),
                  "is_test": None, "consumed_inputs": None,
                  "training_mode": lambda v: v in (0, 1)}

    def _training(self, node: Node) -> bool:
        return node.version >= 14 and bool(node.attr("training_mode", 0))

    def _stats_shape(self, node: Node, x: Value) -> tuple[int, ...]:
        """Shape of scale/B/mean/var: [C], or [C, D1, ...] for spatial=0 (opset < 9)."""
        if len(x.shape) < 2:
            raise ModelError(f"input {list(x.shape)} has no channel axis")
        if node.version < 9 and node.attr("spatial", 1) == 0:
            return tuple(x.shape[1:])
        return (x.shape[1],)

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins, ["float32"])
        want = self._stats_shape(node, x)
        for i, what in enumerate(("scale", "B", "mean", "var"), start=1):
            if ins[i] is None:
                raise ModelError(f"input {what} is missing")
            if ins[i].numel != math.prod(want):
                raise ModelError(f"{what} has shape {list(ins[i].shape)}, expected "
                                 f"{list(want)}")
        types = [(x.dtype, x.shape)]
        types += [("float32", (x.shape[1],))] * (len(node.outputs) - 1)
        return types

    def lower(self, node: Node, lo: Lowering) -> None:
        if self._training(node):
            self._lower_training(node, lo)
            return
        _refuse_live_outputs(lo, node, "training statistics")
        g = lo.graph
        x = lo.value(node.inputs[0])
        stats = [const_input(g, node, i, what) for i, what in
                 enumerate(("scale", "B", "mean", "var"), start=1)]
        gamma, beta, mean, var = (np.asarray(a, np.float64).reshape(-1) for a in stats)
        scale = gamma / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
        shift = beta - mean * scale
        channels = scale.size
        lo.call("mlcc_f32_channel_affine",
                [node.inputs[0], lo.add_const(f"{node.name}.scale", scale.astype(np.float32)),
                 lo.add_const(f"{node.name}.shift", shift.astype(np.float32)), node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_channel_affine_params",
                params={"outer": x.shape[0], "channels": channels,
                        "inner": x.numel // max(1, x.shape[0] * channels)}, pool=True)

    def _lower_training(self, node: Node, lo: Lowering) -> None:
        """Batch statistics at run time (scale, B, mean and var may be run-time inputs);
        outputs running_mean and running_var when they are used."""
        x = lo.value(node.inputs[0])
        if len(x.shape) < 2 or self._stats_shape(node, x) != (x.shape[1],):
            raise UnsupportedError("training mode needs per-channel statistics")
        outs = [o if o and o in lo.graph.values else "" for o in
                (list(node.outputs) + ["", ""])[1:3]]
        channels = x.shape[1]
        lo.call("mlcc_f32_batchnorm_train",
                [node.inputs[0], *node.inputs[1:5], node.outputs[0], *outs],
                [node.outputs[0]] + [o for o in outs if o],
                params_type="mlcc_batchnorm_train_params",
                params={"batch": x.shape[0], "channels": channels,
                        "inner": x.numel // max(1, x.shape[0] * channels),
                        "epsilon": float(node.attr("epsilon", 1e-5)),
                        "momentum": float(node.attr("momentum", 0.9))})

    def flops(self, node, g):
        return 2 * g.values[node.inputs[0]].numel


@register("LRN")
class LRN(OpDef):
    attributes = {"alpha": None, "beta": None, "bias": None, "size": lambda v: int(v) >= 1}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins[:1], ["float32"])
        if node.attr("size") is None:
            raise ModelError("attribute size is required")
        if len(x.shape) < 2:
            raise ModelError(f"input {list(x.shape)} has no channel axis")
        return [(x.dtype, x.shape)]

    def fold(self, node, arrays):
        # onnx.reference's LRN sums over the wrong axis (it loops over the batch): fold with
        # the spec formula instead.
        x = np.asarray(arrays[0])
        size = int(node.attr("size"))
        alpha, beta = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75))
        bias = float(node.attr("bias", 1.0))
        sq = np.zeros(x.shape, np.float64)
        for c in range(x.shape[1]):
            lo_c, hi_c = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + size // 2)
            sq[:, c] = (x[:, lo_c:hi_c + 1].astype(np.float64) ** 2).sum(axis=1)
        return [(x / (bias + alpha / size * sq) ** beta).astype(x.dtype)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        size = int(node.attr("size"))
        lo.call("mlcc_f32_lrn", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_lrn_params",
                params={"batch": x.shape[0], "channels": x.shape[1],
                        "inner": math.prod(x.shape[2:]), "size": size,
                        "alpha_over_size": float(node.attr("alpha", 1e-4)) / size,
                        "beta": float(node.attr("beta", 0.75)),
                        "bias": float(node.attr("bias", 1.0))}, pool=True)

    def flops(self, node, g):
        return (2 * int(node.attr("size", 1)) + 4) * g.values[node.inputs[0]].numel


@register("InstanceNormalization")
class InstanceNormalization(OpDef):
    attributes = {"epsilon": None}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins, ["float32"])
        if len(x.shape) < 2:
            raise ModelError(f"input {list(x.shape)} has no channel axis")
        return _per_channel_params(x, ins, ("scale", "B"))

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        lo.call("mlcc_f32_instance_norm",
                [node.inputs[0], node.inputs[1], node.inputs[2], node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_instance_norm_params",
                params={"batch": x.shape[0], "channels": x.shape[1],
                        "inner": math.prod(x.shape[2:]),
                        "epsilon": float(node.attr("epsilon", 1e-5))}, pool=True)

    def flops(self, node, g):
        return 6 * g.values[node.inputs[0]].numel


@register("LayerNormalization", since=17)
class LayerNormalization(OpDef):
    attributes = {"axis": None, "epsilon": None, "stash_type": lambda v: v == 1}

    def _axis(self, node: Node, x: Value) -> int:
        return norm_axis(int(node.attr("axis", -1)), len(x.shape))

    def _check_param(self, x: Value, axis: int, p: Value, what: str) -> None:
        """Scale and B broadcast unidirectionally to X; mlcc needs them constant over the
        axes before `axis` (one vector for every normalized row)."""
        rank = len(x.shape)
        if len(p.shape) > rank:
            raise ModelError(f"{what} {list(p.shape)} has a higher rank than X {list(x.shape)}")
        padded = (1,) * (rank - len(p.shape)) + tuple(p.shape)
        for i, (d, xd) in enumerate(zip(padded, x.shape)):
            if d not in (1, xd):
                raise ModelError(f"{what} {list(p.shape)} does not broadcast to X "
                                 f"{list(x.shape)}")
            if i < axis and d != 1:
                raise UnsupportedError(f"{what} {list(p.shape)} varies along axis {i}, before "
                                       f"the normalized axes; not supported")

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [v for v in ins if v is not None], ["float32"])
        axis = self._axis(node, x)
        for v, what in zip(ins[1:3], ("Scale", "B")):
            if v is not None:
                self._check_param(x, axis, v, what)
        if len(ins) < 2 or ins[1] is None:
            raise ModelError("input Scale is missing")
        stats = ("float32", tuple(x.shape[:axis]) + (1,) * (len(x.shape) - axis))
        return [(x.dtype, x.shape)] + [stats] * (len(node.outputs) - 1)

    def _row_vector(self, lo: Lowering, name: str, norm_shape: tuple[int, ...], what: str,
                    node: Node) -> str:
        """`name` as a contiguous vector over the normalized axes (broadcast if needed)."""
        v = lo.value(name)
        trailing = tuple(v.shape[len(v.shape) - len(norm_shape):]) if len(v.shape) >= len(
            norm_shape) else (1,) * (len(norm_shape) - len(v.shape)) + tuple(v.shape)
        if same_shape(trailing, norm_shape) and all(
                is_one(d) for d in v.shape[:len(v.shape) - len(norm_shape)]):
            return name
        # normalized axes of a dynamic size (--shape LO..HI): Scale and B do not vary along
        # them (a constant cannot); broadcast at run time over the actual sizes
        if v.const is not None and not is_symbolic(norm_shape):
            full = np.broadcast_to(np.asarray(v.const).reshape(trailing), norm_shape)
            return lo.add_const(f"{node.name}.{what}", np.ascontiguousarray(full, np.float32))
        tmp = lo.temp(f"{node.name}.{what}", "float32", tuple(norm_shape))
        emit_copy(lo, name, tmp, norm_shape, broadcast_strides(trailing, norm_shape),
                  contiguous_strides(norm_shape), op=f"broadcast {what}")
        return tmp

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        axis = self._axis(node, x)
        norm_shape = tuple(x.shape[axis:])
        scale = self._row_vector(lo, node.inputs[1], norm_shape, "scale", node)
        bias = self._row_vector(lo, node.input(2), norm_shape, "bias", node) \
            if node.input(2) else ""
        lo.call("mlcc_f32_layer_norm", [node.inputs[0], scale, bias, node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_layer_norm_params",
                params={"outer": math.prod(x.shape[:axis]), "n": math.prod(norm_shape),
                        "epsilon": float(node.attr("epsilon", 1e-5))}, pool=True)
        stats = [o if o and o in lo.graph.values else "" for o in node.outputs[1:3]]
        if any(stats):
            stat_shape = tuple(x.shape[:axis]) + (1,) * len(norm_shape)
            mean, inv = [s or lo.temp(f"{node.name}.{what}", "float32", stat_shape)
                         for s, what in zip(stats + [""] * (2 - len(stats)),
                                            ("mean", "inv_std"))]
            lo.call("mlcc_f32_layer_norm_stats", [node.inputs[0], mean, inv], [mean, inv],
                    params_type="mlcc_layer_norm_params",
                    params={"outer": math.prod(x.shape[:axis]), "n": math.prod(norm_shape),
                            "epsilon": float(node.attr("epsilon", 1e-5))}, pool=True)

    def flops(self, node, g):
        return 8 * g.values[node.inputs[0]].numel


@register("GroupNormalization", since=21)
class GroupNormalization(OpDef):
    """Opset 21: scale and bias per channel, stash_type float32 only. Opset 18's per-group
    scale and bias never reach mlcc: the ONNX checker rejects that version as deprecated."""
    attributes = {"epsilon": None, "num_groups": lambda v: int(v) >= 1,
                  "stash_type": lambda v: v == 1}

    def _groups(self, node: Node, x: Value) -> int:
        groups = node.attr("num_groups")
        if groups is None:
            raise ModelError("attribute num_groups is required")
        if len(x.shape) < 2 or x.shape[1] % int(groups):
            raise ModelError(f"X {list(x.shape)}: channels not divisible into {groups} groups")
        return int(groups)

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins, ["float32"])
        self._groups(node, x)
        return _per_channel_params(x, ins, ("scale", "bias"))

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        groups = self._groups(node, x)
        lo.call("mlcc_f32_group_norm",
                [node.inputs[0], node.inputs[1], node.inputs[2], node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_group_norm_params",
                params={"batch": x.shape[0], "groups": groups,
                        "channels_per_group": x.shape[1] // groups,
                        "inner": math.prod(x.shape[2:]),
                        "epsilon": float(node.attr("epsilon", 1e-5)), "std_epsilon": 0.0},
                pool=True)

    def flops(self, node, g):
        return 6 * g.values[node.inputs[0]].numel


@register("MeanVarianceNormalization", since=9)
class MeanVarianceNormalization(OpDef):
    """y = (x - mean) / (std + 1e-9) over `axes` (the ONNX function's epsilon is added to the
    standard deviation). Axes that are not the trailing ones are moved there by a strided
    copy before the kernel and back after it."""
    attributes = {"axes": None}

    def _axes(self, node: Node, x: Value) -> list[int]:
        axes = sorted({norm_axis(int(a), len(x.shape), "axes")
                       for a in node.attr("axes", [0, 2, 3])})
        if not axes:
            raise ModelError("axes is empty")
        return axes

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins, ["float32"])
        self._axes(node, x)
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        axes = self._axes(node, x)
        perm = [a for a in range(len(x.shape)) if a not in axes] + axes
        shape = tuple(x.shape[a] for a in perm)
        rows, n = math.prod(shape[:len(shape) - len(axes)]), math.prod(x.shape[a] for a in axes)
        params = {"batch": 1, "groups": rows, "channels_per_group": 1, "inner": n,
                  "epsilon": 0.0, "std_epsilon": 1e-9}
        if perm == sorted(perm):
            lo.call("mlcc_f32_group_norm", [node.inputs[0], "", "", node.outputs[0]],
                    [node.outputs[0]], params_type="mlcc_group_norm_params", params=params,
                    pool=True)
            return
        x_strides = contiguous_strides(x.shape)
        moved = [x_strides[a] for a in perm]
        src = lo.temp(f"{node.name}.moved", "float32", shape)
        dst = lo.temp(f"{node.name}.normalized", "float32", shape)
        emit_copy(lo, node.inputs[0], src, shape, moved, contiguous_strides(shape),
                  op="move the normalized axes last")
        lo.call("mlcc_f32_group_norm", [src, "", "", dst], [dst],
                params_type="mlcc_group_norm_params", params=params, pool=True)
        emit_copy(lo, dst, node.outputs[0], shape, contiguous_strides(shape), moved,
                  op="move the normalized axes back")

    def flops(self, node, g):
        return 6 * g.values[node.inputs[0]].numel


@register("RMSNormalization", since=23)
class RMSNormalization(LayerNormalization):
    attributes = {"axis": None, "epsilon": None, "stash_type": lambda v: v == 1}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins, ["float32"])
        if len(ins) < 2 or ins[1] is None:
            raise ModelError("input scale is missing")
        self._check_param(x, self._axis(node, x), ins[1], "scale")
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        axis = self._axis(node, x)
        norm_shape = tuple(x.shape[axis:])
        scale = self._row_vector(lo, node.inputs[1], norm_shape, "scale", node)
        lo.call("mlcc_f32_rms_norm", [node.inputs[0], scale, node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_rms_norm_params",
                params={"outer": math.prod(x.shape[:axis]), "n": math.prod(norm_shape),
                        "epsilon": float(node.attr("epsilon", 1e-5))}, pool=True)

    def flops(self, node, g):
        return 4 * g.values[node.inputs[0]].numel


@register("LpNormalization")
class LpNormalization(OpDef):
    attributes = {"axis": None, "p": lambda v: v in (1, 2)}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins, ["float32"])
        norm_axis(int(node.attr("axis", -1)), len(x.shape))
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        axis = norm_axis(int(node.attr("axis", -1)), len(x.shape))
        lo.call("mlcc_f32_lp_norm", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_lp_norm_params",
                params={"outer": math.prod(x.shape[:axis]), "n": x.shape[axis],
                        "inner": math.prod(x.shape[axis + 1:]), "p": int(node.attr("p", 2))})

    def flops(self, node, g):
        return 3 * g.values[node.inputs[0]].numel
