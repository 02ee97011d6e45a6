"""Residual Adds folded into the 1x1 convolution that produces one of their operands.

Needs: static types; constant biases and BatchNorms already folded into Conv (fold_bias_add,
fold_batchnorm); runs before fuse_activations, which then fuses an activation that follows the
Add into the Conv (applied after the residual, as in the graph).
Guarantees: for `Add(conv_out, other)` or a two-input Sum (ResNet-50's), either order, where conv_out is the only output of an
unfused float32 2-D Conv with constant 1x1 weights and one group (the kernel that takes a
residual: mlcc_f32_conv2d_residual__packed), read by that Add alone and not a graph output, and
`other` is a float32 run-time tensor of the Add's output shape: the Conv takes `other` as input
3 (input 2, the bias, "" when absent), carries attrs["_residual"] = True, writes the Add's
output, and stands where the Add stood (so `other` is computed before it). The sum is
conv + bias, then + residual, then the activation: the unfused order, same bits.
The int8 pipeline leaves it out (a QConv has no residual input).
"""
from __future__ import annotations

from ..ir import Graph, Node
from ..ir.symbolic import same_shape


def _fusable_conv(g: Graph, prod: Node | None) -> bool:
    if prod is None or prod.op_type != "Conv" or prod.domain != "" or len(prod.outputs) != 1:
        return False
    if prod.attrs.get("_act") or prod.attrs.get("_residual"):
        return False
    w = g.const(prod.inputs[1])
    if w is None or w.ndim != 4 or w.shape[2:] != (1, 1) or int(prod.attr("group", 1)) != 1:
        return False
    return g.values[prod.outputs[0]].dtype == "float32"


def fuse_residual_add(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers, outputs = g.producers(), g.consumers(), set(g.outputs)
    moved: dict[int, Node] = {}      # id(Add) -> the Conv that takes its place
    removed: set[int] = set()
    for add in g.nodes:
        if add.op_type not in ("Add", "Sum") or add.domain != "" or len(add.inputs) != 2:
            continue
        out = g.values[add.outputs[0]]
        for k in (0, 1):
            y, other = add.inputs[k], add.inputs[1 - k]
            prod = producers.get(y)
            if not _fusable_conv(g, prod) or id(prod) in removed or y == other:
                continue
            if y in outputs or len(consumers.get(y, [])) != 1:
                continue
            ov = g.values[other]
            if ov.is_const or ov.dtype != "float32" or not same_shape(ov.shape, out.shape) or \
                    not same_shape(g.values[y].shape, out.shape):
                continue
            prod.inputs = [prod.inputs[0], prod.inputs[1], prod.input(2), other]
            prod.attrs["_residual"] = True
            prod.outputs = [add.outputs[0]]
            prod.fused += add.fused + [f"{add.name}:{add.op_type}"]
            removed.add(id(prod))
            moved[id(add)] = prod
            break
    g.nodes = [moved.get(id(n), n) for n in g.nodes if id(n) not in removed]
    return g
