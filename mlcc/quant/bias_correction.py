"""Empirical bias correction (Nagel et al., 2019, section 4.2), `--bias-correction`.

Rounding the weights of a layer shifts the mean of its output: with Wq the dequantized int8
weights, E[Wq x] = E[W x] - (W - Wq) E[x], the same shift for every sample, per output
channel. Adding (W - Wq) E[x] to the bias removes it. E[x] is measured on the calibration
data, per input channel (the channel axis: 1 for Conv, the last for Gemm / MatMul), as the
mean over the samples and every other axis (the paper's per-channel input mean; a Conv's
zero padding at the borders is not accounted for). ChannelMeans streams: it keeps one sum and
one count per channel of each watched value, whatever the number of samples; a calibrator
that makes two passes over the data sees every sample twice, which leaves the means equal.

The correction of output channel o is sum over its weights of (W - Wq) times the mean of the
input channel each weight reads: for a Conv of `group` groups, output channel o reads input
channels [g * C/g, (g + 1) * C/g) with g = o // (M / group), every kernel tap alike.

Needs: the float graph the rewrite quantizes and the means of its integer producers' data
inputs. Guarantees: correction() is the shift added to the float bias before it is quantized.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .predicates import is_integer_producer


def channel_axis(op: str) -> int:
    return 1 if op == "Conv" else -1


def watched(g: Graph) -> dict[str, int]:
    """Data inputs of the Conv / Gemm / MatMul nodes with constant weights (the ones the
    rewrite may run as integer kernels) -> their channel axis."""
    out: dict[str, int] = {}
    for n in g.nodes:
        if is_integer_producer(g, n):
            x = g.values[n.inputs[0]]
            if len(x.shape) >= 2:
                out.setdefault(n.inputs[0], channel_axis(n.op_type))
    return out


class ChannelMeans:
    """Streaming per-channel means: observe(values) once per sample, then means()."""

    def __init__(self, axes: dict[str, int]):
        self.axes = dict(axes)
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, int] = {}

    def observe(self, values: dict[str, np.ndarray]) -> None:
        for name, axis in self.axes.items():
            v = values.get(name)
            if v is None:
                continue
            v = np.asarray(v)
            axis = axis % v.ndim
            rest = tuple(a for a in range(v.ndim) if a != axis)
            s = v.sum(axis=rest, dtype=np.float64)
            if name in self.sums:
                self.sums[name] += s
            else:
                self.sums[name] = s
            self.counts[name] = self.counts.get(name, 0) + v.size // v.shape[axis]

    def means(self) -> dict[str, np.ndarray]:
        return {n: self.sums[n] / self.counts[n] for n in sorted(self.sums)}


def correction(n: Node, w: np.ndarray, wq: np.ndarray, ws: np.ndarray,
               mean: np.ndarray) -> np.ndarray:
    """(W - Wq) E[x] per output channel, float64 [M]. w: float weights in the rewrite's
    layout ([M, C/g, k...] for Conv, [N, K] for Gemm / MatMul); wq, ws: int8 weights and
    per-channel scales; mean: E[x] per input channel."""
    err = w.astype(np.float64) - wq.astype(np.float64) * ws.astype(np.float64).reshape(
        (-1,) + (1,) * (w.ndim - 1))
    m, cg = err.shape[:2]
    per_in = err.reshape(m, cg, -1).sum(axis=2)            # [M, C/g]: taps summed
    if n.op_type == "Conv":
        groups = int(n.attr("group", 1))
        means = np.asarray(mean, np.float64).reshape(groups, cg)
        mean_of = np.repeat(means, m // groups, axis=0)     # [M, C/g]
    else:
        mean_of = np.broadcast_to(np.asarray(mean, np.float64).reshape(1, cg), (m, cg))
    return np.sum(per_in * mean_of, axis=1)


def shifted_bias(bias: np.ndarray | None, shift: np.ndarray) -> np.ndarray:
    """The float32 bias with the weight rounding's mean shift added back."""
    b = np.zeros(len(shift)) if bias is None else np.asarray(bias, np.float64).reshape(-1)
    return (b + shift).astype(np.float32)


def summary(shifts: dict[str, np.ndarray]) -> str:
    if not shifts:
        return "no layer had a measured input mean"
    top = max(shifts, key=lambda k: (float(np.abs(shifts[k]).max()), k))
    mean = float(np.mean([np.abs(s).mean() for s in shifts.values()]))
    return (f"{len(shifts)} layers' biases shifted by (W - Wq) E[x]; mean "
            f"|shift| {mean:.3g}, largest {float(np.abs(shifts[top]).max()):.3g} in {top}")
