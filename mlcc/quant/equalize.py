"""Cross-layer equalization (Nagel et al., 2019, "Data-Free Quantization Through Weight
Equalization and Bias Correction", section 4.1), `--equalize`.

For two convolutions in a row, y = f(W1 x + b1) and z = W2 y + b2, with f positively
homogeneous (f(x / s) = f(x) / s for s > 0), scaling output channel i of the first by 1 / s_i
and input channel i of the second by s_i leaves z unchanged:

    W1[i] /= s_i,  b1[i] /= s_i,  W2[:, i] *= s_i,     s_i = sqrt(r1_i * r2_i) / r2_i

where r1_i is the range (max |w|) of output channel i of W1 and r2_i that of input channel i
of W2. After it both ranges equal sqrt(r1_i * r2_i): the paper's fixed point, which makes
per-tensor int8 weights lose much less on channels whose range was far below the layer's.
Chains (Conv -> depthwise Conv -> Conv in MobileNet blocks) are equalized pair by pair,
repeatedly, until no scale moves by more than TOLERANCE (at most MAX_ITERATIONS sweeps).

Which pairs: a Conv (constant float weights, constant or no bias, any group count) whose
output is read by exactly one node, a Conv with constant weights reading it as its data
input, and is not a graph output (MaxPool, AveragePool, Relu and LeakyRelu nodes may sit in
between, each read once: they commute with a positive per-channel scale); the first
Conv's fused activation (attrs["_act"]) must be positively homogeneous: none, Relu,
LeakyRelu, or Clip with lower bound 0 and no upper bound. Relu6 (Clip(0, 6)) is not homogeneous (Clip(x / s, 0, 6) != Clip(x, 0, 6) / s): such
pairs are skipped, unless relu6=True, which replaces the Relu6 of each equalized pair by Relu
as the paper does for MobileNetV2 (this changes the float function wherever a value exceeded
6; the int8 program is then measured against the original float model, so the cost shows).
Grouped second convolutions scale per group (input channel i of group g is W2[g * M/g :
(g + 1) * M/g, i % (C/g)]); depthwise is the case C/g = 1. Gemm / MatMul pairs are not
equalized (only convolutions). Channels with a zero range on either side (dead channels)
keep s = 1, and s stays within [S_MIN, S_MAX].

Needs: the optimized float graph (BatchNorm folded into the Conv weights, activations fused).
Guarantees: the same nodes and values; the equalized Convs read new weight and bias
constants; the graph's function is unchanged up to float rounding (with relu6=True: except
for the replaced clips). The scaling is done in float64 and rounded to float32 once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph, Node
from ..ops.activations import fused_act

TOLERANCE = 1e-6           # stop when every scale of a sweep is within 1 +- this
MAX_ITERATIONS = 100
S_MIN, S_MAX = 1e-4, 1e4
DEAD = 1e-12               # a channel range below this times the layer's largest is dead


@dataclass
class EqualizeResult:
    graph: Graph
    pairs: list[tuple[str, str]] = field(default_factory=list)   # (first, second) Conv names
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (first, second, why)
    relu6_replaced: list[str] = field(default_factory=list)      # Convs whose Relu6 -> Relu
    iterations: int = 0
    # per first Conv of a pair (its output channels are the ones rescaled): mean over output
    # channels of channel range / layer range (how well one per-tensor scale fits its
    # channels; 1 = every channel spans the layer's range)
    precision_before: dict[str, float] = field(default_factory=dict)
    precision_after: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        if not self.pairs:
            return f"equalized no Conv pairs ({len(self.skipped)} skipped)"
        names = sorted(self.precision_before)
        before = float(np.mean([self.precision_before[n] for n in names]))
        after = float(np.mean([self.precision_after[n] for n in names]))
        text = (f"equalized {len(self.pairs)} Conv pairs in {self.iterations} sweeps "
                f"({len(self.skipped)} skipped); mean channel range / layer range "
                f"{before:.3f} -> {after:.3f} over the {len(names)} first Convs")
        if self.relu6_replaced:
            text += f"; Relu6 replaced by Relu after {len(self.relu6_replaced)} Convs"
        return text


def _conv_ok(g: Graph, n: Node) -> bool:
    if n.domain != "" or n.op_type != "Conv" or not n.inputs:
        return False
    w = g.const(n.input(1))
    x = g.values.get(n.inputs[0])
    return (w is not None and w.dtype == np.float32 and w.ndim in (3, 4) and x is not None
            and not x.is_const and (not n.input(2) or g.const(n.input(2)) is not None))


def homogeneous(act: tuple) -> bool:
    """f(x / s) = f(x) / s for every s > 0."""
    kind = act[0]
    return kind in ("NONE", "RELU", "LEAKY_RELU") or (
        kind == "CLIP" and act[1] == 0.0 and act[2] == np.inf)


def is_relu6(act: tuple) -> bool:
    return act[0] == "CLIP" and act[1] == 0.0 and np.isfinite(act[2]) and act[2] > 0


def _passes_scaling(n: Node) -> bool:
    """Nodes between the two Convs that commute with a positive per-channel scaling (NCHW):
    max and average pooling (including their padding), Relu, LeakyRelu."""
    return n.domain == "" and n.op_type in ("MaxPool", "AveragePool", "Relu", "LeakyRelu") \
        and len([o for o in n.outputs if o]) == 1


def find_pairs(g: Graph, relu6: bool = False
               ) -> tuple[list[tuple[Node, Node]], list[tuple[str, str, str]]]:
    """The (first, second) Conv pairs CLE may scale, in graph order, and the Conv -> Conv
    links it skips with the reason."""
    consumers = g.consumers()
    pairs, skipped = [], []
    for n in g.nodes:
        if not _conv_ok(g, n):
            continue
        y = n.outputs[0]
        readers = consumers.get(y, [])
        via = []            # pooling and Relu nodes in between (they commute with the scaling)
        while len(readers) == 1 and y not in g.outputs and _passes_scaling(readers[0]):
            via.append(readers[0])
            y = readers[0].outputs[0]
            readers = consumers.get(y, [])
        convs = [c for c in readers if c.op_type == "Conv" and c.domain == ""]
        if not convs:
            continue
        second = convs[0]
        why = ""
        if y in g.outputs or any(v.outputs[0] in g.outputs for v in via):
            why = "the intermediate is a graph output"
        elif len(readers) > 1:
            why = f"the intermediate has {len(readers)} readers"
        elif not _conv_ok(g, second) or second.inputs[0] != y or y in second.inputs[1:]:
            why = "the second Conv's weights are not constant float"
        elif g.const(n.input(1)).shape[0] != \
                g.const(second.input(1)).shape[1] * int(second.attr("group", 1)):
            why = "channel counts differ"
        elif not homogeneous(fused_act(n)) and not (relu6 and is_relu6(fused_act(n))):
            why = (f"activation {fused_act(n)[0]}"
                   + (f"({fused_act(n)[1]:g}, {fused_act(n)[2]:g})" if fused_act(n)[0] == "CLIP" else "")
                   + " is not positively homogeneous")
        if why:
            skipped.append((n.name, second.name, why))
        else:
            pairs.append((n, second))
    return pairs, skipped


def _out_ranges(w: np.ndarray) -> np.ndarray:
    return np.abs(w).reshape(w.shape[0], -1).max(axis=1)


def _in_ranges(w: np.ndarray, groups: int) -> np.ndarray:
    """Range of each input channel of a (grouped) Conv weight [M, C/g, ...]: [C]."""
    m, cg = w.shape[:2]
    r = np.abs(w).reshape(groups, m // groups, cg, -1).max(axis=(1, 3))
    return r.reshape(groups * cg)


def _precision(w: np.ndarray) -> float:
    r = _out_ranges(w)
    top = r.max()
    return float(np.mean(r / top)) if top > 0 else 1.0


def scales(r1: np.ndarray, r2: np.ndarray) -> np.ndarray:
    """s_i = sqrt(r1_i * r2_i) / r2_i (= sqrt(r1_i / r2_i)), 1 for dead channels."""
    live = (r1 > DEAD * max(r1.max(), 0.0)) & (r2 > DEAD * max(r2.max(), 0.0)) & \
        (r1 > 0) & (r2 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(live, np.sqrt(r1 * r2) / r2, 1.0)
    return np.clip(s, S_MIN, S_MAX)


def equalize(g: Graph, relu6: bool = False) -> EqualizeResult:
    """The equalized graph (a copy) and what was done."""
    g = g.copy()
    pairs, skipped = find_pairs(g, relu6)
    res = EqualizeResult(g, [(a.name, b.name) for a, b in pairs], skipped)
    if not pairs:
        return res
    convs = {id(n): n for pair in pairs for n in pair}
    w = {k: g.const(n.input(1)).astype(np.float64) for k, n in convs.items()}
    b = {k: g.const(n.input(2)).astype(np.float64) for k, n in convs.items() if n.input(2)}
    firsts = [id(first) for first, _ in pairs]
    for k in firsts:
        res.precision_before[convs[k].name] = _precision(w[k])
    for it in range(MAX_ITERATIONS):
        res.iterations = it + 1
        moved = 0.0
        for first, second in pairs:
            k1, k2 = id(first), id(second)
            groups = int(second.attr("group", 1))
            s = scales(_out_ranges(w[k1]), _in_ranges(w[k2], groups))
            moved = max(moved, float(np.max(np.abs(s - 1.0))))
            shape1 = (-1,) + (1,) * (w[k1].ndim - 1)
            w[k1] = w[k1] / s.reshape(shape1)
            if k1 in b:
                b[k1] = b[k1] / s
            m, cg = w[k2].shape[:2]
            w2 = w[k2].reshape(groups, m // groups, cg, -1) * s.reshape(groups, 1, cg, 1)
            w[k2] = w2.reshape(w[k2].shape)
        if moved < TOLERANCE:
            break
    for k, n in convs.items():
        n.inputs[1] = g.add_const(f"{n.input(1)}.equalized", w[k].astype(np.float32))
        if k in b:
            n.inputs[2] = g.add_const(f"{n.input(2)}.equalized", b[k].astype(np.float32))
        if k in firsts:
            res.precision_after[n.name] = _precision(w[k])
    if relu6:
        for first, _ in pairs:
            if is_relu6(fused_act(first)):
                first.attrs["_act"] = ("RELU", 0.0, 0.0)
                res.relu6_replaced.append(first.name)
    return res
