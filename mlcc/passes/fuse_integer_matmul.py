"""The float rescale after an integer MatMul joins it: MatMulIntegerToFloat.

onnxruntime.quantization.quantize_dynamic writes every quantized MatMul as
MatMulInteger(xq, W, x_zp, w_zp) -> Cast(to float) -> Mul(., S) -> Add(bias, .), with
S = Mul(x_scale, w_scale). This pass makes that one com.microsoft MatMulIntegerToFloat node
(what onnxruntime's own MatMulIntegerToFloatFusion does when it loads the model), whose kernel
rescales each row of the int32 product in cache, with the bias and then a fused activation (the
GELU of a transformer's FFN, by fuse_activations), instead of four passes over the output and
a standalone activation.

The result is bit-identical to the unfused graph: the Cast of an int32 to float32 is the same
conversion, the kernel's multiplier is the same float32 product x_scale * w_scale[j]
(multiplication commutes, bit for bit), then one multiply and one add, as the Mul and Add did.

Needs: static types; constants folded; runs before fuse_gelu / fuse_activations.
Guarantees: a default-domain MatMulInteger of a uint8 A and a constant 2-D weight whose output
is read only by a Cast to float32, read only by a Mul by S, where S is a constant of 1 or N
values or a Mul of a one-value scale by a constant of 1 or N float32 values (N = the weight's
columns), is one MatMulIntegerToFloat writing the Mul's output, or the output of an Add of a
constant float32 [N] bias that only reads the Mul's output; the Cast, Mul and Add are gone (S's
Mul stays for dead-code elimination, if nothing else reads it).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node
from ..ops.contrib_quant import MS


def _scales(g: Graph, s_name: str, producers: dict, n: int) -> tuple[str, str] | None:
    """(a_scale, b_scale) names whose float32 product is S, a_scale one value, b_scale a
    constant of 1 or n values; None if S is not of that form."""
    def column(name):
        c = g.const(name)
        return c is not None and c.dtype == np.float32 and c.size in (1, n) and \
            (c.size == 1 or c.shape[-1:] == (n,))
    if column(s_name):
        return g.add_const(f"{s_name}.one", np.ones((), np.float32)), s_name
    smul = producers.get(s_name)
    if smul is None or smul.op_type != "Mul" or smul.domain != "" or len(smul.inputs) != 2:
        return None
    for a, b in (smul.inputs, smul.inputs[::-1]):
        v = g.values[a]
        if v.dtype == "float32" and math.prod(v.shape) == 1 and column(b):
            return a, b
    return None


def fuse_integer_matmul(g: Graph) -> Graph:
    g = g.copy()
    producers, consumers, outputs = g.producers(), g.consumers(), set(g.outputs)

    def sole(value: str) -> Node | None:
        readers = consumers.get(value, [])
        if value in outputs or len(readers) != 1 or readers[0].domain != "":
            return None
        return readers[0]

    replaced: dict[int, Node] = {}
    removed: set[int] = set()
    for mm in g.nodes:
        if mm.op_type != "MatMulInteger" or mm.domain != "" or len(mm.outputs) != 1:
            continue
        w = g.const(mm.input(1))
        if w is None or w.ndim != 2 or g.values[mm.inputs[0]].dtype != "uint8":
            continue           # left for MatMulInteger to refuse under its own name
        n = w.shape[1]
        cast = sole(mm.outputs[0])
        if cast is None or cast.op_type != "Cast" or cast.attr("to") != 1:
            continue
        mul = sole(cast.outputs[0])
        if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2 or \
                g.values[mul.outputs[0]].shape != g.values[mm.outputs[0]].shape:
            continue
        k = mul.inputs.index(cast.outputs[0])
        scales = _scales(g, mul.inputs[1 - k], producers, n)
        if scales is None:
            continue
        out, bias, fused = mul.outputs[0], "", [cast, mul]
        add = sole(out)
        if add is not None and add.op_type == "Add" and len(add.inputs) == 2:
            other = add.inputs[1 - add.inputs.index(out)]
            c = g.const(other)
            if c is not None and c.dtype == np.float32 and c.shape == (n,) and \
                    g.values[add.outputs[0]].shape == g.values[out].shape:
                out, bias = add.outputs[0], other
                fused.append(add)
        if any(x.guard != mm.guard for x in fused):
            continue
        node = Node(mm.name, "MatMulIntegerToFloat",
                    [mm.inputs[0], mm.inputs[1], scales[0], scales[1], mm.input(2),
                     mm.input(3), bias], [out], {}, MS, 1, guard=mm.guard)
        node.fused = mm.fused + [f for x in fused for f in x.fused + [f"{x.name}:{x.op_type}"]]
        replaced[id(mm)] = node
        removed.update(id(x) for x in fused)
    g.nodes = [replaced.get(id(x), x) for x in g.nodes if id(x) not in removed]
    return g
