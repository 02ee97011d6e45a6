"""Linear algebra: Det (float32, [..., M, M] -> [...]), one LU decomposition per matrix."""
from __future__ import annotations

import math

from ..errors import ModelError
from ..ir import Lowering, Node
from .common import require_dtype
from .registry import OpDef, register


@register("Det", since=11)
class Det(OpDef):
    attributes = {}

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, ins, ["float32"])
        if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
            raise ModelError(f"input {list(x.shape)} is not a (batch of) square matrices")
        return [(x.dtype, tuple(x.shape[:-2]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x = lo.value(node.inputs[0])
        n = x.shape[-1]
        lo.call("mlcc_f32_det", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_det_params",
                params={"batch": math.prod(x.shape[:-2]), "n": n},
                scratch_bytes=max(8, 8 * n * n))

    def flops(self, node, g):
        x = g.values[node.inputs[0]]
        return math.prod(x.shape[:-2]) * 2 * x.shape[-1] ** 3 // 3
