"""The default mix's time estimate: the cost of a rewrite plan's program, node by node, from
the nodes' shapes and a per-target table of costs fitted on measured kernel times.

A node costs its multiply-accumulates at the rate of its kind (float, int8 or W8A16; dense or
depthwise / grouped), plus every element it reads or writes at the rate of its kind
(float element-wise and data movement, uint8 tables and movement, QuantizeLinear,
DequantizeLinear), plus a constant per kernel call. The constants come from the target: a
`CostTable` fitted once on one machine (per-call CPU times of PP-OCR rec's float and
all-integer builds, `bench/profile_layers.py`), not measured at compile time, so the compiled
output does not depend on the machine's load. A target without a fitted table (cross targets:
arm, wasm, Cortex-M) keeps the multiply-accumulate estimate of sensitivity.time_ratio."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir import Graph, Node

MAC_OPS = ("Conv", "QConv", "QConv16", "MatMul", "Gemm", "QFC", "QFC16")
INT8_MAC_OPS = ("QConv", "QFC")
W8A16_MAC_OPS = ("QConv16", "QFC16")
# a window per output (grouped MACs; a global pool's window is its input)
POOL_OPS = ("AveragePool", "QAvgPool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool")
# nodes that compile to no kernel call (a view of their input's memory)
VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
# float nodes with exponentials, divisions or reductions per element
HEAVY_OPS = ("Softmax", "LogSoftmax", "Attention", "LayerNormalization", "Erf", "Gelu", "Exp",
             "Tanh", "Sigmoid", "InstanceNormalization", "GroupNormalization", "ReduceMean")


@dataclass(frozen=True)
class CostTable:
    """Time per unit, in ns (one machine's: only their ratios matter)."""
    name: str
    float_mac: float          # a dense Conv / MatMul / Gemm's multiply-accumulate
    float_dw_mac: float       # a grouped (depthwise) Conv's or a pool's
    int8_mac: float
    int8_dw_mac: float        # a depthwise QConv's (not a pool's: int8_pool_mac)
    w16_mac: float            # a W8A16 layer's (int16 activations x int8 weights)
    w16_dw_mac: float
    float_out: float          # per output of a float Conv / MatMul / Gemm (its epilogue)
    int8_out: float           # per output of an integer one (requantization)
    w16_out: float            # per output of a W8A16 one (its float epilogue)
    float_elem: float         # per element read or written by another float node
    heavy_elem: float         # ... by a float node of HEAVY_OPS
    int8_elem: float          # per element read or written by a uint8 node (tables, movement)
    quantize_elem: float      # QuantizeLinear, per element
    dequantize_elem: float    # DequantizeLinear, per element
    call: float               # per node (a kernel call's fixed cost)
    quantize16_elem: float    # QuantizeLinear to int16 (a W8A16 layer's input), per element
    int8_pool_mac: float      # a uint8 pool's tap


def _numel(g: Graph, name: str) -> int:
    v = g.values.get(name)
    if v is None or v.shape is None or not v.is_static:
        return 0
    return int(v.numel)


def macs(g: Graph, n: Node) -> tuple[int, bool]:
    """(multiply-accumulates of one run, grouped) of a Conv / MatMul / Gemm, float or integer,
    or of a pool (its window per output, grouped); (0, False) for any other node."""
    if not n.outputs or n.op_type not in MAC_OPS + POOL_OPS:
        return 0, False
    out = _numel(g, n.outputs[0])
    if n.op_type in POOL_OPS:
        if n.op_type.startswith("Global") or n.attr("global", 0):
            return _numel(g, n.inputs[0]), True
        return out * int(np.prod(n.attr("kernel_shape", [1]))), True
    if n.op_type in ("Conv", "QConv", "QConv16"):
        w = g.const(n.inputs[1])
        if w is None:
            return 0, False
        return out * int(np.prod(w.shape[1:])), int(n.attr("group", 1) or 1) > 1
    a = g.values.get(n.inputs[0])
    b = g.const(n.inputs[1]) if len(n.inputs) > 1 else None
    if n.op_type == "Gemm" and b is not None:
        k = b.shape[0] if n.attr("transB", 0) == 0 else b.shape[1]
    elif b is not None and b.ndim >= 2 and n.op_type not in ("QFC", "QFC16"):
        k = b.shape[-2]
    elif a is not None and a.shape:
        k = a.shape[-1]
    else:
        return 0, False
    return out * int(k), False


def node_cost(g: Graph, n: Node, t: CostTable) -> float:
    """The estimated time of one node of a (plan's) program: a fixed cost per kernel call,
    its multiply-accumulates at its kind's rate, and every run-time element it reads or
    writes at its kind's rate (a view of its input's memory costs nothing)."""
    if n.op_type in VIEW_OPS:
        return 0.0
    elems = sum(_numel(g, v) for v in list(n.inputs) + list(n.outputs)
                if v and v in g.values and not g.values[v].is_const)
    if n.op_type == "QuantizeLinear":
        int16 = any(g.values[v].dtype == "int16" for v in n.outputs if v in g.values)
        return t.call + (t.quantize16_elem if int16 else t.quantize_elem) * elems
    if n.op_type == "DequantizeLinear":
        return t.call + t.dequantize_elem * elems
    m, grouped = macs(g, n)
    uint8 = any(g.values[v].dtype == "uint8" for v in n.outputs if v in g.values)
    if n.op_type in MAC_OPS and m:
        out = _numel(g, n.outputs[0])
        if n.domain == "mlcc" and n.op_type in W8A16_MAC_OPS:
            return t.call + m * (t.w16_dw_mac if grouped else t.w16_mac) + t.w16_out * out
        if n.domain == "mlcc":
            return t.call + m * (t.int8_dw_mac if grouped else t.int8_mac) + t.int8_out * out
        return t.call + m * (t.float_dw_mac if grouped else t.float_mac) + t.float_out * out
    if n.op_type in POOL_OPS:
        return t.call + m * (t.int8_pool_mac if uint8 else t.float_dw_mac)
    rate = t.int8_elem if uint8 else t.heavy_elem if n.op_type in HEAVY_OPS else t.float_elem
    return t.call + rate * elems


def program_cost(g: Graph, t: CostTable) -> float:
    return sum(node_cost(g, n, t) for n in g.nodes)


# Fitted tables, by the kernels a target builds (table_for). x86_64-avx512: least squares
# (non-negative, each call weighted by 1 / sqrt of its time, each build's total matched) on
# the per-call CPU times of PP-OCRv4 rec's float and all-integer builds for x86-native
# (1x3x48x320, 154 and 147 kernel calls, 15 interleaved runs; `bench/profile_layers.py`'s
# timers, 2026-11-27 on the 2-core Zen machine at load 8-12): float 9.34 ms, integer 4.31 ms.
# The W8A16 rates (w16_*, quantize16_elem): PP-OCR det at 1x3x320x320, float and all-W8A16
# (--w8a16 op:Conv) builds, per-call CPU times (`bench/profile_layers.py --cpu --top 1000`, 11
# runs, twice each at load 14-16 and twice at load 3-8, 2026-11-27, the packed W8A16 kernels of
# the w16k change): per kind (50 dense calls, 554 M MACs; 14 depthwise, 22 M) time = call +
# MACs * rate + outputs * out (least squares, weights 1 / sqrt(time)), in this table's units
# by the float build's convolutions measured in the same runs (the table's estimate of them /
# their time: 1.13-1.29); means of the four fits (depthwise: the last two); quantize16_elem:
# the 42 int16 QuantizeLinear calls' time per element read or written. Dense W8A16 layers
# measured 0.92-1.01x their float time there, depthwise 2.8-3.1x. Refit them when the W8A16
# kernels change (bench/fit_w16_rates.py fits them from rec's builds the same way).
# int8_dw_mac: refitted after the VNNI + VBMI depthwise kernel (dw8 change) on rec's 14
# depthwise calls of its --pure-int8 build against the float build (profile_layers --cpu,
# 15 runs, 2026-11-28, load 6-7 on 2 cores), the call and int8_out fixed, the machine's
# speed divided out by the float convolutions of the same runs (bench/fit_w16_rates.py's
# way): 0.0041 ns per MAC, from 0.0218; the pools keep the rate fitted with the old one
# (int8_pool_mac), their kernels unchanged.
TABLES: dict[str, CostTable] = {
    "x86_64-avx512": CostTable(
        "x86_64-avx512", float_mac=0.0096, float_dw_mac=0.0240, int8_mac=0.0031,
        int8_dw_mac=0.0041, w16_mac=0.0068, w16_dw_mac=0.113, float_out=0.1264,
        int8_out=0.1441, w16_out=0.32, float_elem=0.0373,
        heavy_elem=0.3083, int8_elem=0.0059, quantize_elem=0.0463, dequantize_elem=0.0203,
        call=897.7, quantize16_elem=0.037, int8_pool_mac=0.0218)}


def table_for(target) -> CostTable | None:
    """The fitted table of a target's kernels, or None (the multiply-accumulate estimate):
    x86-64 with 512-bit vectors (x86-native on this project's machines: AVX-512, VNNI
    where the compiler targets it) has one; other targets none yet."""
    if target is None:
        return None
    if target.arch == "x86_64" and target.simd in ("auto", "avx512") and \
            target.vector_bits >= 512:
        return TABLES.get("x86_64-avx512")
    return None


def w8a16_cheaper(g: Graph, node: str, t: CostTable | None) -> bool:
    """Whether a layer's W8A16 kernel is estimated cheaper than its float one (its
    multiply-accumulates and outputs at each kind's rates; the crossings around it are left
    to the whole plan's estimate): where it is not, float is both cheaper and exact, and the
    mix does not offer W8A16 for it. No table (the multiply-accumulate estimate): never."""
    n = next((x for x in g.nodes if x.name == node), None)
    if t is None or n is None:
        return False
    m, grouped = macs(g, n)
    out = _numel(g, n.outputs[0])
    w16 = m * (t.w16_dw_mac if grouped else t.w16_mac) + t.w16_out * out
    return bool(m) and w16 < m * (t.float_dw_mac if grouped else t.float_mac) + \
        t.float_out * out


def estimator(target, allint, cands: list[str], layer_macs: dict[str, int], plan,
              every_node: list[str]) -> tuple[Callable[..., float], str]:
    """(ratio(kept, w16=()) -> the estimated int8 / float time of the plan with the layers
    `kept` in float, those of `w16` at W8A16 and the rest as in `allint`, a description of
    the estimate). With the target's table (table_for): the plan's whole program
    (plan(kept, w16).graph: its float layers, integer kernels and Q/DQ crossings) against
    the all-float program (plan(every_node)); without one: the candidates'
    multiply-accumulates (sensitivity.time_ratio; a W8A16 layer charged as a float one)."""
    from .sensitivity import LayerPlan, time_ratio
    table = table_for(target)
    if table is None:
        integer = {lp.node for lp in allint.layers if lp.integer}

        def mac_ratio(kept, w16=()) -> float:
            return time_ratio([LayerPlan(c, "", c in integer and c not in kept and
                                         c not in w16) for c in cands], layer_macs)
        return mac_ratio, "multiply-accumulates"
    full = program_cost(plan(every_node).graph, table)
    base = program_cost(allint.graph, table)

    def cost_ratio(kept, w16=()) -> float:
        return (program_cost(plan(kept, w16).graph, table) if kept or w16 else base) / full
    return cost_ratio, f"fitted cost table ({table.name})"
