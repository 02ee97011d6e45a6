"""Softmax and LogSoftmax on one [outer, n, inner] kernel, Hardmax on the same view.

Before opset 13 the input is coerced to 2-D at `axis` (default 1): the normalized "row" is
everything from `axis` on, so inner = 1. From opset 13 the normalization runs along the single
axis `axis` (default -1); a non-last axis keeps its trailing dimensions as the contiguous inner
dimension of the kernel instead of being transposed to the end.
"""
from __future__ import annotations

import math

from ..ir import Graph, Lowering, Node
from .common import norm_axis, require_dtype
from .registry import OpDef, register


class _Softmax(OpDef):
    attributes = {"axis": None}
    log = False

    def _view(self, node: Node, shape: tuple[int, ...]) -> tuple[int, int, int]:
        """[outer, n, inner] of the normalization."""
        rank = len(shape)
        if rank == 0:
            return 1, 1, 1
        if node.version < 13:
            axis = norm_axis(int(node.attr("axis", 1)), rank)
            return math.prod(shape[:axis]), math.prod(shape[axis:]), 1
        axis = norm_axis(int(node.attr("axis", -1)), rank)
        return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins[:1], ["float32"])
        self._view(node, x.shape)
        return [(x.dtype, x.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        outer, n, inner = self._view(node, lo.value(node.inputs[0]).shape)
        if outer * n * inner == 0:
            return
        lo.call("mlcc_f32_softmax", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_softmax_params",
                params={"outer": outer, "n": n, "inner": inner, "log": int(self.log)},
                pool=True)

    def flops(self, node: Node, g: Graph) -> int:
        return 4 * g.values[node.outputs[0]].numel


@register("Softmax")
class Softmax(_Softmax):
    log = False


@register("LogSoftmax")
class LogSoftmax(_Softmax):
    log = True


@register("Hardmax")
class Hardmax(_Softmax):
    """1 at the first largest value along the axis (or the coerced 2-D row before opset 13)."""

    def lower(self, node: Node, lo: Lowering) -> None:
        outer, n, inner = self._view(node, lo.value(node.inputs[0]).shape)
        if outer * n * inner == 0:
            return
        lo.call("mlcc_f32_hardmax", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_hardmax_params",
                params={"outer": outer, "n": n, "inner": inner})

    def flops(self, node: Node, g: Graph) -> int:
        return g.values[node.outputs[0]].numel
