"""SmoothQuant-style scale migration (Xiao et al., 2023): a float activation read by integer
MatMuls whose channels have very different ranges (transformers: a few LayerNorm output
channels and FFN hidden channels carry outliers 10-100x the rest) is divided channel by channel
by s, and the weights' rows multiplied by s, before quantization:

    x @ W = (x / s) @ (s W),   s_k = max|x_k|^alpha / max_n |W[k, n]|^(1 - alpha)

so that one per-tensor uint8 scale fits x / s much better, at the price of spreading the
outliers into the (per output channel) int8 weights. alpha = 0 leaves x alone, 1 moves all of
its range into the weights; 0.5 is the paper's default.

Needs: the optimized float graph and calibrated ranges with per-channel minima and maxima of
the values `smoothable` names (Calibrator(channels=...)). Guarantees: the same function
(exactly, up to float rounding of x * (1/s)); each smoothed value x gets one new float Mul node
x * (1/s) -> x/s read by its integer MatMuls in place of x (x's other readers are unchanged),
the MatMuls' weights are replaced by s W, and x/s gets a calibrated range derived from x's
per-channel ranges (exact for minmax).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from .observers import Range
from .predicates import CLAMP_ACTS, fused_act, is_integer_producer

S_MIN, S_MAX = 1e-4, 1e4


def _smooth_readers(g: Graph, x: str, consumers) -> list[Node]:
    return [c for c in consumers.get(x, []) if c.op_type == "MatMul" and c.domain == ""
            and c.inputs[0] == x and is_integer_producer(g, c)
            and g.values[x].shape and g.const(c.inputs[1]).shape[0] == g.values[x].shape[-1]]


def smoothable(g: Graph) -> list[str]:
    """Float values read by integer MatMuls whose producer writes float anyway (LayerNorm,
    attention, a MatMul with a GELU epilogue): dividing them by s costs one elementwise Mul
    and changes nothing upstream."""
    consumers = g.consumers()
    producers = g.producers()
    out = []
    for x, v in g.values.items():
        if v.is_const or v.dtype != "float32" or x in g.inputs or len(v.shape) < 2:
            continue
        p = producers.get(x)
        if p is None:
            continue
        writes_uint8 = (p.op_type in ("Add", "Concat", "Reshape", "Transpose", "MaxPool")
                        or (is_integer_producer(g, p) and fused_act(p)[0] in CLAMP_ACTS))
        if not writes_uint8 and _smooth_readers(g, x, consumers):
            out.append(x)
    return out


def smooth(g: Graph, ranges: dict, alpha: float = 0.5) -> tuple[Graph, dict, list[str]]:
    """The smoothed graph, the ranges with the new values added, and the values smoothed."""
    g = g.copy()
    ranges = dict(ranges)
    consumers = g.consumers()
    done = []
    for x in smoothable(g):
        r = ranges.get(x)
        if r is None or r.channel_lo is None:
            continue
        readers = _smooth_readers(g, x, consumers)
        amax = np.maximum(np.abs(r.channel_lo), np.abs(r.channel_hi))
        wmax = np.max([np.abs(g.const(c.inputs[1])).max(axis=1) for c in readers], axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.power(amax, alpha) / np.power(wmax, 1.0 - alpha)
        s = np.where(np.isfinite(s) & (s > 0), s, 1.0)
        s = np.clip(s, S_MIN, S_MAX).astype(np.float32)
        inv = (np.float32(1.0) / s).astype(np.float32)
        xs = g.fresh_name(f"{x}_smoothed")
        g.values[xs] = Value(xs, "float32", g.values[x].shape)
        inv_name = g.add_const(f"{x}.smooth_inv", inv)
        mul = Node(f"{x}/Smooth", "Mul", [x, inv_name], [xs], {}, "", 14)
        first = min(g.nodes.index(c) for c in readers)
        g.nodes.insert(first, mul)
        for c in readers:
            w = g.const(c.inputs[1])
            c.inputs[1] = g.add_const(f"{c.inputs[1]}.smoothed", (w * s[:, None]).astype(
                np.float32))
            c.inputs[0] = xs
        lo = float(np.min(r.channel_lo * inv.astype(np.float64)))
        hi = float(np.max(r.channel_hi * inv.astype(np.float64)))
        ranges[xs] = Range(lo, hi, lo, hi, 0.0)
        done.append(x)
    return g, ranges, done
