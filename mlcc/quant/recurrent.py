"""The quantizer's rule for LSTM, GRU and RNN ("recurrent", named by their OpDefs'
quant_rules in mlcc/ops/recurrent.py).

The input projections of every time step and direction (X W^T + bias, the one big product of
a recurrent layer: seq * batch rows) run on the integer GEMM: X quantized to uint8 at its
calibrated parameters, W as int8 per output channel (per gate unit and direction; per tensor
with --per-tensor), float32 out with the bias added in float (an mlcc.QFC with rq float32).
The recurrent node then reads those projections (`_projected`, no W) and keeps in float what
runs per step: the recurrent product h R^T, the gates, the state. The projections are
written in float because every one of them is read once, by the gates' float arithmetic.
"""
from __future__ import annotations

from ..ir import Node
from ..ops.activations import NO_ACT
from ..ops.recurrent import GATES, input_projection
from .rules import LayerPlan, Rewrite, rule
from .scheme import quantize_weights


@rule("recurrent")
def quantize_recurrent(rw: Rewrite, n: Node) -> bool:
    g = rw.g
    x = n.inputs[0]
    if n.attr("_projected") or n.name in rw.opts.keep_float or not rw.has(x) or \
            g.values[x].dtype != "float32" or g.const(x) is not None or \
            g.const(n.inputs[1]) is None or (n.input(3) and g.const(n.input(3)) is None):
        return False
    op = n.op_type
    w, bias = input_projection(op, n, g)                  # [D*G*H, input], [D*G*H]
    wq, ws = quantize_weights(w, rw.opts.per_channel)
    xq = rw.ensure_q(x)
    qx = rw.params_of(x)
    for i in n.inputs[4:]:                               # states, lengths (float or int)
        if i:
            rw.ensure_float(i)
    proj_name = f"{n.name}/input_projection"
    proj = rw.new_value(proj_name, "float32", tuple(g.values[x].shape[:2]) + (w.shape[0],))
    ins = [xq, g.add_const(f"{proj_name}.w_int8", wq)] + rw.channel_consts(
        Node(proj_name, "QFC", [], []), qx.scale, ws, bias, None)
    rw.nodes.append(Node(proj_name, "QFC", ins, [proj],
                         {"x_zero_point": qx.zero_point, "x_scale": qx.scale, "y_scale": 0.0,
                          "rq": ("float32", "float", 0, 0, 255), "_act": NO_ACT},
                         "mlcc", 1, [], n.guard))
    attrs = dict(n.attrs, _projected=1)
    rw.nodes.append(Node(n.name, op, [proj, ""] + list(n.inputs[2:]), list(n.outputs), attrs,
                         n.domain, n.version, list(n.fused), n.guard))
    nd = w.shape[0] // (GATES[op] * g.values[n.inputs[2]].shape[2])
    rw.layers.append(LayerPlan(n.name, op, True,
                               f"input projections of {nd} direction(s) on the int8 GEMM "
                               f"(float out); recurrent product and gates in float"))
    return True
