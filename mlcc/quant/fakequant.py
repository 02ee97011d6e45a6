"""Fake quantization for the mixed-precision search (`--min-sqnr`, `--max-drop`): one float
program, built once, that can simulate any mix of integer and float layers at run time.

The float graph gets, after every value the all-integer program holds as uint8, its
quantize-dequantize (QuantizeLinear -> DequantizeLinear at that value's calibrated scale and
zero point) blended with the float value by a run-time switch, `v + m * (dq(q(v)) - v)`; and
next to every integer Conv / Gemm / MatMul a copy of it with its int8 weights (dequantized,
exactly the rewrite's), blended the same way. The switches are one float input vector
(`CONTROL`), one slot per value and one per weight layer: all zeros is the float model
exactly (`v + 0 * d = v`), and a plan of the rewrite (`quantize_graph` with some layers kept
in float) switches on the values it quantizes and the layers whose weights it quantizes. So
every candidate mix is measured by running one program, without building another.

A W8A16 layer (int16 activations) is simulated by its int8 weights' switch and the int16
quantize-dequantize of the values it reads (slots "16:" + value, from a plan with every
producer at W8A16); the quantization of its output is its reader's, as for a float layer.

A layer whose bias `--bias-correction` shifted (QuantResult.bias_shift) gets the shifted bias
in its int8 twin, as the rewrite builds it.

What it leaves out: rounding inside the integer kernels (the int32 accumulation is exact, the
requantization rounds once, as the output's quantize-dequantize does here), and the bias
rounded to int32 (negligible at scale x_scale * w_scale). A value whose scale a plan changes
(a Concat input written at the Concat's scale) keeps the all-integer plan's. The search
verifies its final choice with one real build (mlcc.api).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph, Node, Value
from .bias_correction import shifted_bias
from .rewrite import QuantResult

CONTROL = "mlcc_fakequant_control"


@dataclass
class FakeQuant:
    graph: Graph                                  # the float graph with the switches
    slots: dict[str, int] = field(default_factory=dict)    # value or "w:" + node -> index
    outputs: dict[str, str] = field(default_factory=dict)  # model output -> sim graph name

    def control(self, values, weights, values16=()) -> np.ndarray:
        """The control vector switching on these values' (uint8; int16: values16) and these
        layers' quantization."""
        c = np.zeros(len(self.slots), np.float32)
        for v in values:
            if v in self.slots:
                c[self.slots[v]] = 1
        for v in values16:
            if "16:" + v in self.slots:
                c[self.slots["16:" + v]] = 1
        for n in weights:
            if "w:" + n in self.slots:
                c[self.slots["w:" + n]] = 1
        return c

    def plan(self, res: QuantResult) -> np.ndarray:
        """The control vector of one rewrite result (its uint8 and int16 values, its int8
        weights)."""
        return self.control(res.qnames, res.weights, res.q16)


def graph_layout_weights(g: Graph, n: Node, wq: np.ndarray, ws: np.ndarray) -> np.ndarray:
    """The rewrite's int8 weights of n (QConv: [M, C/g, k...]; QFC: [N, K]) dequantized into
    the layout of n's own weight input (Gemm's transB and alpha, MatMul's [K, N])."""
    deq = wq.astype(np.float32) * ws.reshape((-1,) + (1,) * (wq.ndim - 1))
    if n.op_type == "Conv":
        return deq
    if n.op_type == "Gemm":
        deq = deq / np.float32(n.attr("alpha", 1.0))
        return deq if n.attr("transB", 0) else np.ascontiguousarray(deq.T)
    return np.ascontiguousarray(deq.T)            # MatMul


def twin_bias(g: Graph, n: Node, shift: np.ndarray) -> np.ndarray:
    """n's bias input with bias correction's shift (per output channel) added, in the layout
    of n's own bias (Gemm's beta divided out); [M] where n has none."""
    b = g.const(n.input(2)) if n.input(2) else None
    beta = np.float32(n.attr("beta", 1.0)) if n.op_type == "Gemm" else np.float32(1.0)
    bias = shifted_bias(None if b is None else b.reshape(-1) * beta, shift) / beta
    return bias.astype(np.float32).reshape(b.shape if b is not None else (-1,))


def build(g: Graph, allint: QuantResult, w16: QuantResult | None = None) -> FakeQuant:
    """The switchable graph for g from the all-integer plan `allint` (its values' qparams and
    its int8 weights), and, from a plan with W8A16 layers (`w16`), the int16
    quantize-dequantize of the values they read (slot "16:" + value, after the uint8 one: a
    value an int8 layer also reads is dequantized, then quantized to int16, as the rewrite
    does)."""
    sg = g.copy()
    fq = FakeQuant(sg)
    quantized = [v for v in allint.qnames if v in g.values and not g.values[v].is_const]
    for v in quantized:
        fq.slots[v] = len(fq.slots)
    sixteen = {v: scale for v, (_, scale) in (w16.q16 if w16 is not None else {}).items()
               if v in g.values and not g.values[v].is_const}
    for v in sixteen:
        fq.slots["16:" + v] = len(fq.slots)
    by_name = {n.name: n for n in g.nodes}
    for name in allint.weights:
        if name in by_name:
            fq.slots["w:" + name] = len(fq.slots)
    sg.inputs = list(g.inputs) + [CONTROL]
    sg.values[CONTROL] = Value(CONTROL, "float32", (len(fq.slots),))
    nodes: list[Node] = []
    rename: dict[str, str] = {}

    def new_value(base: str, like: str) -> str:
        name = sg.fresh_name(base)
        sg.values[name] = Value(name, "float32", sg.values[like].shape)
        return name

    def blend(v: str, alt: str, slot: int, tag: str) -> str:
        """v + m * (alt - v) with m = CONTROL[slot]."""
        idx = sg.add_const(f"{v}.{tag}.slot", np.array([slot], np.int64))
        m = sg.fresh_name(f"{v}.{tag}.m")
        sg.values[m] = Value(m, "float32", (1,))
        d, e, out = (new_value(f"{v}.{tag}.{s}", v) for s in ("d", "e", "out"))
        nodes.extend([Node(f"{m}/Gather", "Gather", [CONTROL, idx], [m], {"axis": 0}, "", 13),
                      Node(f"{d}/Sub", "Sub", [alt, v], [d], {}, "", 14),
                      Node(f"{e}/Mul", "Mul", [d, m], [e], {}, "", 14),
                      Node(f"{out}/Add", "Add", [v, e], [out], {}, "", 14)])
        return out

    def fake_quant(v: str, slot: str, scale: float, zero_point: np.ndarray, tag: str) -> str:
        """The switchable quantize-dequantize of `v` (a value, or its weight blend) at scale
        and zero_point (its dtype: the quantized type), switched by fq.slots[slot]."""
        s = sg.add_const(f"{v}.{tag}.scale", np.array(scale, np.float32))
        z = sg.add_const(f"{v}.{tag}.zero_point", zero_point)
        q = sg.fresh_name(f"{v}.{tag}.q")
        sg.values[q] = Value(q, zero_point.dtype.name, sg.values[v].shape)
        dq = new_value(f"{v}.{tag}.dq", v)
        version = 13 if zero_point.dtype == np.uint8 else 21     # int16: opset 21
        nodes.extend([Node(f"{q}/QuantizeLinear", "QuantizeLinear", [v, s, z], [q], {}, "",
                           version),
                      Node(f"{dq}/DequantizeLinear", "DequantizeLinear", [q, s, z], [dq], {},
                           "", version)])
        return blend(v, dq, fq.slots[slot], tag)

    def both(key: str, v: str) -> str:
        """Value `key`'s uint8 quantize-dequantize, then its int16 one, where they exist."""
        if key in fq.slots:
            qp = allint.qparams[key]
            v = fake_quant(v, key, qp.scale, np.array(qp.zero_point, np.uint8), "fq")
        if "16:" + key in fq.slots:
            v = fake_quant(v, "16:" + key, sixteen[key], np.array(0, np.int16), "fq16")
        return v

    for v in g.inputs:
        if v in fq.slots or "16:" + v in fq.slots:
            rename[v] = both(v, v)
    for n in sg.nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
        nodes.append(n)
        if not n.outputs:
            continue
        y = n.outputs[0]
        if "w:" + n.name in fq.slots:
            wq, ws = allint.weights[n.name]
            wname = sg.add_const(f"{n.name}.fq.w", graph_layout_weights(g, n, wq, ws))
            rest = n.inputs[2:]
            if n.name in allint.bias_shift:           # --bias-correction's shifted bias
                rest = [sg.add_const(f"{n.name}.fq.b",
                                     twin_bias(g, n, allint.bias_shift[n.name]))] + rest[1:]
            yq = new_value(f"{y}.fq.wq", y)
            twin = Node(f"{n.name}/fq", n.op_type, [n.inputs[0], wname] + rest, [yq],
                        dict(n.attrs), n.domain, n.version, [])
            nodes.append(twin)
            rename[y] = blend(y, yq, fq.slots["w:" + n.name], "w")
        for o in n.outputs:
            if o in fq.slots or "16:" + o in fq.slots:
                rename[o] = both(o, rename.get(o, o))
    sg.nodes = nodes
    fq.outputs = {o: rename.get(o, o) for o in g.outputs}
    sg.outputs = [fq.outputs[o] for o in g.outputs]
    return fq
