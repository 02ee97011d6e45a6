"""Learned weight rounding (`--adaround auto|on|off`, after Nagel et al., 2020, "Up or Down?
Adaptive Rounding for Post-Training Quantization") and the per-layer choices of `auto`: learned
rounding and bias correction applied to a layer only where they lower its output error on
held-out calibration samples.

The layer's output error. A Conv / Gemm / MatMul with constant weights computes, per output
channel o, y_o = w_o . x (x one row of its input: a Conv's receptive field of one output
position and group, flattened as [C/g, kh, kw] like the weights; a Gemm / MatMul's input row).
With int8 weights q_o at the fixed per-channel scale s_o the error is e_o . x with e_o = w_o -
s_o q_o, so its mean square over the rows is the quadratic form e_o^T G e_o, G = E[x x^T] (the
rows' second moment). Calibration accumulates, per layer and group, G and the row sums on two
halves of the samples (even and odd sample indices: `fit` and `held`), on at most
ROWS_PER_SAMPLE rows of each sample (random output positions of a Conv, seeded: the compiler's
output stays deterministic); memory is two K x K matrices per layer, not the rows.

The rounding. AdaRound chooses, per weight, floor or ceil of w / s (not the nearest) to
minimize that output error; the paper relaxes the choice with a rectified sigmoid and anneals
a regularizer towards 0/1 over thousands of gradient steps on sampled rows. Here the objective
is exact (the quadratic form) and the choice is made by coordinate descent on it, from nearest
rounding: for each weight in turn, flipping it to its other neighbour changes e_o by -s_o d
(d = +-1) and the error by 2 d' (G e_o)_i + d'^2 G_ii with d' = -s_o d, a flip is kept where
that is negative, and G e_o is updated in place (K flops per flip); sweeps repeat until none
flips (at most SWEEPS). Every flip lowers the fitted error, so it ends at a local minimum of
the same problem the paper relaxes, in a few sweeps of O(M K^2) arithmetic (no learning rate,
no annealing schedule); every channel of a group shares G, so all of them move at once.

`on` fits each layer on all samples and uses the learned rounding everywhere. `auto` (the
rounding fitted on `fit`) keeps it, per output channel, only where e^T G e on `held` is lower
than nearest rounding's: with few rows per weight (a wide layer, few samples) the descent can
fit the noise of `fit`, which `held` exposes. Bias correction `auto` (the shift c_o = (w_o -
s_o q_o) . E[x] of mlcc/quant/bias_correction.py, added to the bias) is kept per output channel
where the held-out error with the shift, e^T G e - 2 c e . E_held[x] + c^2, is lower than
without. So `auto` never raises a layer's measured held-out error. With one calibration sample
there is no held-out half and `auto` changes nothing.

Needs: the float graph as the rewrite will quantize it (SmoothQuant's per-channel Mul before a
MatMul, applied after calibration, is followed: the statistics are rescaled by it); the
rewrite's weight layout (quantize_weights, weight_matrix). Guarantees: `rounded` holds int8
weights in the rewrite's layout with the rewrite's scales; each differs from nearest rounding
by at most one step per weight.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..ir import Graph, Node
from ..ops.conv import window_geometry
from .bias_correction import correction
from .predicates import is_integer_producer, weight_matrix
from .scheme import WMAX, quantize_weights

MODES = ("auto", "on", "off")
ROWS_PER_SAMPLE = 128       # rows of a layer's input observed per sample (random positions),
ROW_FLOPS = 1 << 27         # fewer where rows * groups * k^2 would pass this (wide layers)
MIN_ROWS = 8
FLUSH_ROWS = 1024           # rows gathered before they are added to the K x K sums
SWEEPS = 6                  # coordinate-descent sweeps at most (each flips ~1-10% at first)
BUDGET_BYTES = 1 << 30      # the statistics' memory; layers beyond it keep nearest rounding
TINY = 1e-9                 # a flip must lower the error by more than this share of its term


def mode(option: str, value) -> str:
    """auto / on / off from a QuantizeConfig field (True / False mean on / off); anything else
    is a one-line error."""
    if value is True or value is False:
        return "on" if value else "off"
    if value not in MODES:
        raise InputError(f"{option} must be auto, on or off, not {value!r}")
    return value


@dataclass
class _Site:
    """How the rows of one layer's input are formed."""
    x: str
    conv: bool
    groups: int
    k: int                                     # row length per group
    kernel: tuple = ()
    strides: tuple = ()
    dilations: tuple = ()
    begin: tuple = ()
    end: tuple = ()
    rows: int = ROWS_PER_SAMPLE                # rows per sample at most


@dataclass
class _Half:
    """Sums over the rows of one half of the samples. An ungrouped layer's rows wait in
    `pending` until min(K, FLUSH_ROWS) of them are there: adding to a K x K sum costs K^2
    memory traffic whatever the rows (2 s a sample for K = 2880 under load). Grouped ones
    (depthwise: many small sums) add each sample's rows at once: numpy's batched matmul of
    480 groups took 60x longer for 8x the rows."""
    gram: np.ndarray                           # [groups, k, k] sum of x x^T
    total: np.ndarray                          # [groups, k] sum of x
    rows: int = 0
    pending: list = field(default_factory=list)

    def add(self, rows: np.ndarray) -> None:
        """rows [groups, rows, k] float32."""
        self.pending.append(rows)
        groups, _, k = rows.shape
        if groups > 1 or sum(p.shape[1] for p in self.pending) >= min(k, FLUSH_ROWS):
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        # contiguous operands: numpy's matmul takes BLAS only then (a transposed view ran
        # 30x slower); the batch's sums in float32, the running sums in float64
        t = np.ascontiguousarray(np.concatenate(self.pending, axis=1))
        self.pending = []
        self.gram += np.matmul(np.ascontiguousarray(t.transpose(0, 2, 1)), t)
        self.total += t.sum(axis=1, dtype=np.float64)
        self.rows += t.shape[1]

    def second_moment(self) -> np.ndarray:
        self.flush()
        return self.gram / max(self.rows, 1)

    def mean(self) -> np.ndarray:
        self.flush()
        return self.total / max(self.rows, 1)


def _site(g: Graph, n: Node) -> _Site | None:
    """None where the input's shape is not fixed."""
    shape = tuple(g.values[n.inputs[0]].shape)
    if not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
        return None
    if n.op_type != "Conv":
        return _Site(n.inputs[0], False, 1, int(shape[-1]))
    w = g.const(n.inputs[1])
    groups = int(n.attr("group", 1))
    kernel = tuple(int(k) for k in w.shape[2:])
    geo = window_geometry(n, list(shape[2:]), list(kernel))
    return _Site(n.inputs[0], True, groups, int(np.prod(w.shape[1:])), kernel,
                 tuple(geo["strides"]), tuple(geo["dilations"]), tuple(geo["begin"]),
                 tuple(geo["end"]))


def _rows(site: _Site, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """At most site.rows rows of the layer's input, [rows, groups, k] float32."""
    x = np.asarray(x, np.float32)
    if not site.conv:
        flat = x.reshape(-1, site.k)
        if len(flat) > site.rows:
            flat = flat[np.sort(rng.choice(len(flat), site.rows, replace=False))]
        return flat.reshape(len(flat), 1, site.k)
    two = len(site.kernel) == 1                 # 1-D: a 2-D window of height 1
    kernel = (1,) + site.kernel if two else site.kernel
    strides = (1,) + site.strides if two else site.strides
    dil = (1,) + site.dilations if two else site.dilations
    begin = (0,) + site.begin if two else site.begin
    end = (0,) + site.end if two else site.end
    if two:
        x = x[:, :, None, :]
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])))
    oh = (h + begin[0] + end[0] - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (w + begin[1] + end[1] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    total = n * oh * ow
    pos = np.arange(total) if total <= site.rows else \
        np.sort(rng.choice(total, site.rows, replace=False))
    b, rest = np.divmod(pos, oh * ow)
    r, q = np.divmod(rest, ow)
    ki = np.arange(kernel[0]) * dil[0]
    kj = np.arange(kernel[1]) * dil[1]
    rows = xp[b[:, None, None, None], np.arange(c)[None, :, None, None],
              (r * strides[0])[:, None, None, None] + ki[None, None, :, None],
              (q * strides[1])[:, None, None, None] + kj[None, None, None, :]]
    return rows.reshape(len(pos), site.groups, site.k)


class RoundingStats:
    """Per-layer second moments and sums of the integer layers' input rows, on the even and
    the odd calibration samples. observe() once per sample of the first calibration pass."""

    def __init__(self, g: Graph, seed: int = 0):
        self.seed = seed
        self.sites: dict[str, _Site] = {}        # node name -> its rows
        self.halves: dict[str, list[_Half]] = {}
        self.skipped: dict[str, str] = {}
        self.samples = 0
        used = 0
        for n in g.nodes:
            if not is_integer_producer(g, n):
                continue
            site = _site(g, n)
            if site is None:
                self.skipped[n.name] = "its input shape is not fixed"
                continue
            site.rows = int(np.clip(ROW_FLOPS // (site.groups * site.k * site.k), MIN_ROWS,
                                    ROWS_PER_SAMPLE))
            need = 2 * site.groups * site.k * (site.k + 1) * 8
            if used + need > BUDGET_BYTES:
                self.skipped[n.name] = f"statistics over the {BUDGET_BYTES >> 20} MiB budget"
                continue
            used += need
            self.sites[n.name] = site
            self.halves[n.name] = [_Half(np.zeros((site.groups, site.k, site.k)),
                                         np.zeros((site.groups, site.k))) for _ in range(2)]

    @property
    def inputs(self) -> list[str]:
        """The values observe() reads."""
        return sorted({s.x for s in self.sites.values()})

    def observe(self, values: dict[str, np.ndarray], index: int) -> None:
        """Sample number `index`'s values (its input arrays included)."""
        for j, (name, site) in enumerate(self.sites.items()):
            if site.x not in values:
                continue
            rng = np.random.default_rng([self.seed, index, j])
            rows = _rows(site, values[site.x], rng)
            self.halves[name][index % 2].add(rows.transpose(1, 0, 2))   # [groups, rows, k]
        self.samples = max(self.samples, index + 1)

    def statistics(self, g: Graph, n: Node) -> tuple[list[_Half] | None, str]:
        """The two halves for n as the rewrite sees it: a per-channel Mul by a constant put
        before n's input after calibration (SmoothQuant) rescales them."""
        if n.name not in self.sites:
            return None, self.skipped.get(n.name, "not observed")
        site, halves = self.sites[n.name], self.halves[n.name]
        for h in halves:
            h.flush()
        if n.inputs[0] == site.x:
            return halves, ""
        prod = g.producers().get(n.inputs[0])
        inv = g.const(prod.inputs[1]) if prod is not None and prod.op_type == "Mul" and \
            prod.inputs[0] == site.x else None
        if inv is None or site.conv or inv.size != site.k:
            return None, "its input changed after calibration"
        s = inv.reshape(-1).astype(np.float64)
        return [_Half(h.gram * np.outer(s, s)[None], h.total * s[None], h.rows)
                for h in halves], ""


def _errors(w: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    return w - s[..., None] * q


def _times(e: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """e G per group: [groups, m, k] x [groups, k, k] (one BLAS product for one group;
    numpy's batched matmul of many small groups is slower than einsum's loop)."""
    if e.shape[0] == 1:
        return (e[0] @ gram[0])[None]
    return np.einsum("gmk,gkl->gml", e, gram)


def _quadratic(e: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """e_o^T G e_o per channel: e [groups, m, k], G [groups, k, k] -> [groups, m]."""
    return np.einsum("gmk,gmk->gm", _times(e, gram), e)


def learned_rounding(w: np.ndarray, s: np.ndarray, gram: np.ndarray,
                     sweeps: int = SWEEPS) -> np.ndarray:
    """Integer weights, each floor or ceil of w / s (within [-WMAX, WMAX]), lowering
    e^T G e channel by channel from nearest rounding by coordinate descent.
    w [groups, m, k] float64, s [groups, m], gram [groups, k, k] -> q [groups, m, k]."""
    z = w / s[..., None]
    q = np.clip(np.rint(z), -WMAX, WMAX)
    lo = np.clip(np.floor(z), -WMAX, WMAX)
    hi = np.clip(np.ceil(z), -WMAX, WMAX)
    r = _times(_errors(w, s, q), gram)                      # (G e)_i for every channel
    diag = np.diagonal(gram, axis1=1, axis2=2)              # [groups, k]
    for _ in range(sweeps):
        flips = 0
        for i in range(w.shape[2]):
            qi = q[:, :, i]
            alt = np.where(qi == lo[:, :, i], hi[:, :, i], lo[:, :, i])
            de = -s * (alt - qi)                                  # change of e_i
            term = de * de * diag[:, i][:, None]
            take = (2 * de * r[:, :, i] + term < -TINY * term) & (alt != qi)
            if not take.any():
                continue
            gi, mi = np.nonzero(take)
            q[gi, mi, i] = alt[gi, mi]
            r[gi, mi, :] += de[gi, mi][:, None] * gram[gi, i, :]
            flips += len(gi)
        if not flips:
            break
    return q


@dataclass
class LayerChoice:
    """What auto / on chose for one layer, with the held-out output errors (mean square per
    row, summed over output channels) it was chosen on."""
    node: str
    channels: int
    learned: int                  # channels with the learned rounding
    corrected: int                # channels whose bias shift is applied
    held_nearest: float
    held_final: float


@dataclass
class RoundingPlan:
    """QuantOptions' `rounded` and `bias_channels`, and what they come from."""
    rounded: dict[str, np.ndarray] = field(default_factory=dict)
    bias_channels: dict[str, np.ndarray] | None = None
    layers: list[LayerChoice] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    adaround: str = "off"
    bias: str = "off"

    def summary(self) -> str:
        parts = []
        if self.adaround != "off":
            parts.append(f"adaround {self.adaround}: learned rounding in "
                         f"{sum(1 for c in self.layers if c.learned)} of {len(self.layers)} "
                         f"layers ({sum(c.learned for c in self.layers)} of "
                         f"{sum(c.channels for c in self.layers)} channels)")
        if self.bias == "auto":
            parts.append(f"bias correction auto: "
                         f"{sum(1 for c in self.layers if c.corrected)} layers "
                         f"({sum(c.corrected for c in self.layers)} channels)")
        near = sum(c.held_nearest for c in self.layers)
        final = sum(c.held_final for c in self.layers)
        if near > 0:
            parts.append(f"held-out layer output error {final / near:.3f} of nearest "
                         f"rounding's")
        if self.skipped:
            parts.append(f"{len(self.skipped)} layers not measured")
        return "; ".join(parts)

    def info(self) -> dict:
        return {"adaround": self.adaround, "bias_correction": self.bias,
                "layers": {c.node: {"channels": c.channels, "learned": c.learned,
                                    "corrected": c.corrected,
                                    "held_nearest": c.held_nearest,
                                    "held_final": c.held_final} for c in self.layers},
                "skipped": dict(sorted(self.skipped.items())), "summary": self.summary()}


def _grouped(a: np.ndarray, groups: int) -> np.ndarray:
    """[M, ...] (output channels first) -> [groups, M / groups, rest]."""
    return a.reshape(groups, a.shape[0] // groups, -1)


def plan(g: Graph, stats: RoundingStats, opts, adaround: str, bias: str) -> RoundingPlan:
    """The learned rounding (adaround on / auto) and the bias-correction channels (bias auto)
    of each integer layer of g, for QuantOptions (opts: the rewrite's options; its
    input_means are bias correction's E[x])."""
    out = RoundingPlan(adaround=adaround, bias=bias,
                       bias_channels={} if bias == "auto" else None)
    if adaround == "off" and bias != "auto":
        return out
    for n in g.nodes:
        if not is_integer_producer(g, n) or n.name in opts.keep_float:
            continue
        halves, why = stats.statistics(g, n)
        if halves is None:
            out.skipped[n.name] = why
            continue
        fit, held = halves
        if n.op_type == "Conv":
            w = g.const(n.inputs[1]).astype(np.float32)
        else:
            w = weight_matrix(g, n)[0]
        q0, scale = quantize_weights(w, opts.per_channel)
        groups = stats.sites[n.name].groups
        wg = _grouped(w.astype(np.float64), groups)
        sg = _grouped(scale.astype(np.float64), groups)[..., 0]
        near = _grouped(q0.astype(np.float64), groups)
        q = near
        has_held = held.rows > 0 and fit.rows > 0
        g_held = held.second_moment() if has_held else None
        zeros = np.zeros(near.shape[:2])
        nearest = _quadratic(_errors(wg, sg, near), g_held) if has_held else zeros
        base = nearest                 # the held-out error of the rounding chosen
        if adaround == "on":
            both = _Half(fit.gram + held.gram, fit.total + held.total, fit.rows + held.rows)
            q = learned_rounding(wg, sg, both.second_moment())
            learned = np.ones(near.shape[:2], bool)
            base = _quadratic(_errors(wg, sg, q), g_held) if has_held else zeros
        elif adaround == "auto" and has_held:
            cand = learned_rounding(wg, sg, fit.second_moment())
            ours = _quadratic(_errors(wg, sg, cand), g_held)
            learned = ours < nearest
            q = np.where(learned[..., None], cand, near)
            base = np.where(learned, ours, nearest)
        else:
            learned = np.zeros(near.shape[:2], bool)
        wq = q.reshape(w.shape).astype(np.int8)
        if learned.any():
            out.rounded[n.name] = wq
        e = _errors(wg, sg, q)
        final = base
        corrected = 0
        if bias == "auto":
            mean = opts.input_means.get(n.inputs[0])
            keep = np.zeros(w.shape[0], bool)
            if mean is not None and has_held:
                c = _grouped(correction(n, w, wq, scale, mean), groups)[..., 0]
                ex = np.einsum("gmk,gk->gm", e, held.mean())
                with_c = base - 2 * c * ex + c * c
                better = with_c < base
                keep = better.reshape(-1)
                final = np.where(better, with_c, base)
            out.bias_channels[n.name] = keep
            corrected = int(keep.sum())
        out.layers.append(LayerChoice(n.name, int(w.shape[0]), int(learned.sum()), corrected,
                                      float(nearest.sum()), float(final.sum())))
    return out
