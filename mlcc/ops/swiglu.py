"""SwiGLU (opset 28): Y = Swish_alpha(A) * B, A and B of one shape (no broadcasting), float32:
the Swish activation's kernel (mlcc_f32_unary, SILU) into a temporary, then the binary
kernel's product (contrib.lower_parts lowers the two parts through their own OpDefs)."""
from __future__ import annotations

from ..errors import ModelError
from ..ir import Graph, Lowering, Node
from .common import require_dtype
from .contrib import lower_parts, part
from .registry import OpDef, register


@register("SwiGLU", since=28)
class SwiGLU(OpDef):
    attributes = {"alpha": None}

    def infer(self, node, ins, g):
        a, b = ins[:2]
        require_dtype(node, [a, b], ["float32"])
        if tuple(a.shape) != tuple(b.shape):
            raise ModelError(f"A {list(a.shape)} and B {list(b.shape)} must have one shape "
                             f"(SwiGLU does not broadcast)")
        return [("float32", a.shape)]

    def lower(self, node: Node, lo: Lowering) -> None:
        a = lo.value(node.inputs[0])
        gate = lo.temp(f"{node.name}.swish", "float32", a.shape)
        lower_parts(lo, [
            part(f"{node.name}/swish", "Swish", [node.inputs[0]], [gate],
                 alpha=float(node.attr("alpha", 1.0))),
            part(f"{node.name}/mul", "Mul", [gate, node.inputs[1]], [node.outputs[0]])], {})

    def flops(self, node: Node, g: Graph) -> int:
        return 5 * g.values[node.outputs[0]].numel

