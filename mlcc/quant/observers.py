"""Streaming observers of activation ranges, and the calibrators built on them.

Memory does not grow with the number of samples: a MinMax observer keeps two floats, a
Histogram observer a fixed number of bins over [-A, A] where A is the largest magnitude found
by a first (min/max) pass. Calibrators turn what was observed into a range [lo, hi]:

- minmax: the observed minimum and maximum.
- percentile: the values below which (100 - p)% and p% of all observed values lie, read from
  the histogram (to one bin width, A / 2048), each tail separately.
- entropy: TensorRT's KL-divergence search. On the histogram of |x| (2048 bins over [0, A]),
  every threshold bin i from the number of quantization levels to 2048 is tried: the reference
  distribution P is the histogram cut at i with the clipped mass added to its last bin, Q is P
  quantized to the available levels and expanded back (each level's mass spread over its
  non-empty bins); the i with the smallest KL(P || Q) wins and the range is clipped to
  +-(i * bin width). The levels are 128 for tensors with negative values (one side of a signed
  range) and 256 for non-negative ones (all of uint8 on [0, T]), and the bin at 0 is set to its
  neighbour's count first (exact zeros of ReLU outputs), as NVIDIA's pytorch-quantization does;
  so is every other spike of repeated values (flatten_spikes).
- auto (the default): per tensor, the range [lo, hi] (0 inside it) whose uint8 quantize-
  dequantize error, sum |x - q(x)|^1.5 (AUTO_NORM), is smallest on the observed values: a grid
  search over histogram bin edges (lo fixed at 0 for non-negative tensors, which then get all
  256 levels), each candidate scored from the histogram: the distance of the clipped values
  to the range end, plus the mean rounding error of a value between two levels for each
  non-zero value inside it (exact zeros, counted separately, are represented exactly). See
  auto_range.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

HALF_BINS = 2048            # bins per sign: the histogram has 2 * HALF_BINS over [-A, A]
CALIBRATORS = ("auto", "minmax", "percentile", "entropy")
DEFAULT_CALIBRATOR = "auto"


class MinMaxObserver:
    def __init__(self):
        self.lo = np.inf
        self.hi = -np.inf
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        if x.size:
            self.lo = min(self.lo, float(x.min()))
            self.hi = max(self.hi, float(x.max()))
            self.count += x.size

    @property
    def amax(self) -> float:
        if self.count == 0:                  # only empty tensors seen: lo, hi are +-inf
            return 0.0
        return max(abs(self.lo), abs(self.hi), 0.0)


class HistogramObserver:
    """Counts of values in 2 * HALF_BINS equal bins over [-amax, amax] (amax > 0)."""

    def __init__(self, amax: float, half_bins: int = HALF_BINS):
        self.amax = float(amax) if amax > 0 else 1.0
        self.half = half_bins
        self.hist = np.zeros(2 * half_bins, dtype=np.int64)
        self.zeros = 0          # exact zeros (quantized without error: zero is representable)

    def update(self, x: np.ndarray) -> None:
        x = x.astype(np.float32, copy=False)
        h, _ = np.histogram(x, bins=2 * self.half, range=(-self.amax, self.amax))
        self.hist += h
        self.zeros += int(x.size - np.count_nonzero(x))

    @property
    def width(self) -> float:
        return self.amax / self.half

    def edges(self) -> np.ndarray:
        return np.linspace(-self.amax, self.amax, 2 * self.half + 1)

    def abs_hist(self) -> np.ndarray:
        """Histogram of |x|: HALF_BINS bins over [0, amax]."""
        return self.hist[self.half:] + self.hist[:self.half][::-1]

    def percentile_range(self, p: float) -> tuple[float, float]:
        total = self.hist.sum()
        if total == 0:
            return 0.0, 0.0
        cum = np.cumsum(self.hist)
        edges = self.edges()
        tail = (100.0 - p) / 100.0
        eps = 1e-9 * total                       # counts, not float fractions: no off-by-one
        lo_bin = int(np.searchsorted(cum, tail * total + eps, side="right"))
        hi_bin = int(np.searchsorted(cum, (1.0 - tail) * total - eps, side="left"))
        return float(edges[lo_bin]), float(edges[min(hi_bin + 1, len(edges) - 1)])

    def share_outside(self, lo: float, hi: float) -> float:
        """Share of observed values outside [lo, hi] (to one bin)."""
        total = self.hist.sum()
        if total == 0:
            return 0.0
        centers = (self.edges()[:-1] + self.edges()[1:]) / 2
        return float(self.hist[(centers < lo) | (centers > hi)].sum() / total)


def flatten_zero_bin(hist: np.ndarray) -> np.ndarray:
    """The bin at 0 holds every exact zero (half of a ReLU output): left as is, its spike spread
    over a quantization level costs so much KL that every wide threshold loses. NVIDIA's
    pytorch-quantization entropy calibrator sets it to its neighbour's count; so does mlcc."""
    h = hist.astype(np.float64).copy()
    if len(h) > 1:
        h[0] = h[1]
    return h


SPIKE_WINDOW = 9           # bins of the local baseline a spike is measured against
SPIKE_RATIO = 4.0          # a bin above this many times its baseline is a spike ...
SPIKE_SHARE = 1e-3         # ... if it also holds this share of all values (not tail noise)


def flatten_spikes(hist: np.ndarray) -> np.ndarray:
    """Every bin holding more than SPIKE_RATIO times its baseline (the median of the
    SPIKE_WINDOW bins around it, at least the median non-empty bin) and more than SPIKE_SHARE
    of all values set to that baseline.
    Spikes are values repeated exactly: a convolution over constant padding writes one value
    per channel over the whole padded area (PP-OCR rec's 320-wide lines are mostly padding, so
    its first convolution's histogram is ~40 spikes of 2.4% of the values each), a HardSwish's
    zeros shifted by the affine Mul / Add after it. Left as they are, the KL search's
    expansion of Q, which spreads each level's mass over the non-empty bins of its group,
    charges a spike for being spread over its neighbours at every threshold wide enough to
    put several bins in one level, and only the narrowest thresholds (one bin per level) are
    free of that cost: it clipped 5-13% of several of PP-OCR rec's tensors and the int8
    program read no line. A quantized spike stays a spike (one level), so its height says
    nothing about where to clip: capped at the baseline it weighs like its neighbours."""
    h = np.asarray(hist, np.float64)
    n = len(h)
    if n < SPIKE_WINDOW:
        return h.copy()
    nonempty = h[h > 0]
    floor = float(np.median(nonempty)) if nonempty.size else 0.0
    pad = SPIKE_WINDOW // 2
    padded = np.pad(h, pad, mode="edge")
    local = np.median(np.lib.stride_tricks.sliding_window_view(padded, SPIKE_WINDOW), axis=1)
    base = np.maximum(local, floor)
    return np.where((h > SPIKE_RATIO * base) & (h > SPIKE_SHARE * h.sum()), base, h)


def kl_divergences(hist: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """KL(P_i || Q_i) for every candidate i = levels .. len(hist) (TensorRT's definition, see
    the module docstring), in closed form from prefix sums: within a quantization group every
    non-empty bin gets the same Q, so each candidate costs O(levels) instead of O(i).

    P_i: hist[:i] with the mass of hist[i:] added to bin i - 1. Q_i: hist[:i] (without that
    mass) split into `levels` groups (bin j in group j * levels // i), each group's mass spread
    evenly over its non-empty bins. Both normalized; where P > 0 and Q = 0 (only possible at
    bin i - 1) Q gets 1e-4 and is renormalized. Returns (candidates, kl); kl is inf where Q is
    empty."""
    h = np.asarray(hist, np.float64)
    n = len(h)
    C = np.concatenate([[0.0], np.cumsum(h)])
    NZ = np.concatenate([[0.0], np.cumsum(h > 0)])
    safe = np.where(h > 0, h, 1.0)
    HL = np.concatenate([[0.0], np.cumsum(np.where(h > 0, h * np.log(safe), 0.0))])
    total = C[n]
    cand = np.arange(levels, n + 1)
    g = np.arange(levels + 1)
    bounds = -(-(g[None, :] * cand[:, None]) // levels)          # first bin of each group
    sums = C[bounds[:, 1:]] - C[bounds[:, :-1]]
    nz = NZ[bounds[:, 1:]] - NZ[bounds[:, :-1]]
    qg = np.where(nz > 0, sums / np.maximum(nz, 1.0), 0.0)        # Q of a non-empty bin
    logq = np.log(np.where(qg > 0, qg, 1.0))
    hlast = h[cand - 1]
    suffix = total - C[cand]
    qs = C[cand]
    excl = sums.copy()
    excl[:, -1] -= hlast                                          # all bins but i - 1
    sum_hlogq = np.sum(excl * logq, axis=1)
    mass = C[cand - 1]
    hole = (hlast == 0) & (suffix > 0)
    z = np.where(hole, 1.0 + 1e-4, 1.0)
    qs_safe = np.where(qs > 0, qs, 1.0)
    part = (HL[cand - 1] - mass * np.log(total) - sum_hlogq + mass * np.log(qs_safe)) / total \
        + (mass / total) * np.log(z)
    plast = hlast + suffix
    pn_last = plast / total
    qn_last = np.where(hole, 1e-4 / z, qg[:, -1] / qs_safe)
    last = np.where(plast > 0, pn_last * np.log(np.where(plast > 0, pn_last, 1.0) /
                                                np.where(qn_last > 0, qn_last, 1.0)), 0.0)
    kl = np.where(qs > 0, part + last, np.inf)
    return cand, kl


def kl_threshold_bin(hist: np.ndarray, levels: int) -> int:
    """TensorRT's search: the number of histogram bins (from `levels` to len(hist)) to keep so
    that the clipped and quantized distribution is closest (KL) to the observed one. Every
    candidate is evaluated."""
    h = flatten_spikes(flatten_zero_bin(hist))
    n = len(h)
    if n <= levels or h[levels:].sum() == 0:
        # Everything fits into `levels` bins: no clipping can help.
        nz = np.nonzero(h)[0]
        return int(nz[-1]) + 1 if nz.size else n
    cand, kl = kl_divergences(h, levels)
    return int(cand[int(np.argmin(kl))])


AUTO_COARSE = 4            # bins between the candidate ends of auto's first (coarse) grid
# auto's error norm: sum |x - q(x)|^AUTO_NORM. 2 (MSE) keeps tails that do not matter to the
# task: on PP-OCRv4 rec's 300-line sets 56.7% / 53.7% exact match against 60.7% / 65.7% with
# 1.5 (float 68.3% / 70.0%, percentile 99.99 60.0% / 64.0%); docs/quantization.md.
AUTO_NORM = 1.5


def _clip_costs(h: np.ndarray, centers: np.ndarray, ends: np.ndarray, norm: float
                ) -> np.ndarray:
    """For each end e: the error (|x - e|^norm) of clipping the values of the bins above e to
    e, bin centres standing for their values."""
    d = np.maximum(centers[None, :] - ends[:, None], 0.0)
    return (d ** norm) @ h


def auto_range(hist: HistogramObserver, lo_obs: float, hi_obs: float,
               coarse: int = AUTO_COARSE, norm: float = AUTO_NORM) -> tuple[float, float]:
    """The [lo, hi] of smallest estimated uint8 quantize-dequantize error, sum |x - q(x)|^norm
    (module docstring).

    Candidates: hi at the bin edges in (0, A] on the positive side, lo at the edges in [-A, 0)
    on the negative side (lo = 0 when nothing negative was observed): every pair on a grid of
    every `coarse`-th edge, then every pair within `coarse` edges of the best. Estimated error
    of (lo, hi): clipped values cost their distance to the end they are clipped to, to the
    power norm; each non-zero value inside costs (step / 2)^norm / (norm + 1) with step =
    (hi - lo) / 255 (the mean error of a value uniformly placed between two levels; step^2 / 12
    for norm 2); exact zeros cost nothing. Ties go to the wider range. The result is then cut to the observed [lo_obs, hi_obs]."""
    if not (hi_obs > lo_obs):                     # constant (or empty): nothing to choose
        return lo_obs, hi_obs
    half, w = hist.half, hist.width
    pos = hist.hist[half:].astype(np.float64)
    neg = hist.hist[:half][::-1].astype(np.float64)      # |x| of the negative side
    # the exact zeros were counted in the bins at 0 (positive side: [0, w))
    zeros = float(min(hist.zeros, pos[0])) if len(pos) else 0.0
    pos = pos.copy()
    pos[0] -= zeros
    centers = (np.arange(half) + 0.5) * w
    ends = np.arange(half + 1) * w                     # candidate k: the end k * w
    n_pos = np.concatenate([[0.0], np.cumsum(pos)])          # values of [0, hi_k)
    n_neg = np.concatenate([[0.0], np.cumsum(neg)])
    # only candidates up to the observed extreme (its bin's upper edge)
    top = min(half, int(np.ceil(max(hi_obs, 0.0) / w - 1e-9))) if hi_obs > 0 else 0
    bot = min(half, int(np.ceil(max(-lo_obs, 0.0) / w - 1e-9))) if lo_obs < 0 else 0

    def best(hk: np.ndarray, lk: np.ndarray) -> tuple[int, int]:
        span = (ends[hk][None, :] + ends[lk][:, None])
        inside = n_pos[hk][None, :] + n_neg[lk][:, None]
        err = (_clip_costs(pos, centers, ends[hk], norm)[None, :] +
               _clip_costs(neg, centers, ends[lk], norm)[:, None] +
               inside * (span / 255.0 / 2.0) ** norm / (norm + 1.0))
        err = np.where(span > 0, err, np.inf)
        # ties (flat error, e.g. only zeros) go to the widest candidate: scan from the end
        flat = err[::-1, ::-1]
        i = int(np.argmin(flat))
        li, hi_ = np.unravel_index(i, flat.shape)
        return int(hk[len(hk) - 1 - hi_]), int(lk[len(lk) - 1 - li])

    def grid(lo_k: int, hi_k: int, step: int) -> np.ndarray:
        g = np.arange(lo_k, hi_k + 1, step)
        return np.union1d(g, [hi_k])

    hk = grid(1, top, coarse) if top > 0 else np.array([0])
    lk = grid(1, bot, coarse) if bot > 0 else np.array([0])
    h0, l0 = best(hk, lk)
    if coarse > 1:
        hk = grid(max(1, h0 - coarse), min(top, h0 + coarse), 1) if top > 0 else np.array([0])
        lk = grid(max(1, l0 - coarse), min(bot, l0 + coarse), 1) if bot > 0 else np.array([0])
        h0, l0 = best(hk, lk)
    hi = min(float(ends[h0]), hi_obs) if top > 0 else max(hi_obs, 0.0)
    lo = max(-float(ends[l0]), lo_obs) if bot > 0 else min(lo_obs, 0.0)
    return lo, hi


class ChannelMinMaxObserver:
    """Minimum and maximum of every channel along the last axis (SmoothQuant's statistics)."""

    def __init__(self):
        self.lo: np.ndarray | None = None
        self.hi: np.ndarray | None = None

    def update(self, x: np.ndarray) -> None:
        if x.ndim == 0 or x.size == 0:
            return
        flat = x.reshape(-1, x.shape[-1])
        lo, hi = flat.min(axis=0).astype(np.float64), flat.max(axis=0).astype(np.float64)
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)


@dataclass
class Range:
    lo: float
    hi: float
    observed_lo: float
    observed_hi: float
    clipped: float            # share of observed values outside [lo, hi]
    # per channel along the last axis, for the values calibrate() was asked to watch so
    channel_lo: np.ndarray | None = None
    channel_hi: np.ndarray | None = None


def choose_range(method: str, mm: MinMaxObserver, hist: HistogramObserver | None,
                 percentile: float = 99.99) -> Range:
    if mm.count == 0:
        return Range(0.0, 0.0, 0.0, 0.0, 0.0)
    if method == "minmax" or hist is None:
        return Range(mm.lo, mm.hi, mm.lo, mm.hi, 0.0)
    if method == "percentile":
        lo, hi = hist.percentile_range(percentile)
        lo, hi = max(lo, mm.lo), min(hi, mm.hi)
    elif method == "auto":
        lo, hi = auto_range(hist, mm.lo, mm.hi)
    elif method == "entropy":
        levels = 128 if mm.lo < 0 else 256
        i = kl_threshold_bin(hist.abs_hist(), levels)
        t = i * hist.width
        lo, hi = max(mm.lo, -t), min(mm.hi, t)
    else:
        raise InputError(f"unknown calibrator {method!r} (known: {', '.join(CALIBRATORS)})")
    whole = lo <= mm.lo and hi >= mm.hi            # nothing clipped (a constant's bin centre
    return Range(lo, hi, mm.lo, mm.hi,             # is not its value)
                 0.0 if whole else hist.share_outside(lo, hi))


class Calibrator:
    """Observes named tensors sample by sample; two passes for histogram methods."""

    def __init__(self, method: str = DEFAULT_CALIBRATOR, percentile: float = 99.99,
                 channels: frozenset = frozenset()):
        if method not in CALIBRATORS:
            raise InputError(f"unknown calibrator {method!r} (known: {', '.join(CALIBRATORS)})")
        if not 50.0 < percentile <= 100.0:
            raise InputError(f"percentile must be in (50, 100], got {percentile}")
        self.method = method
        self.percentile = percentile
        self.minmax: dict[str, MinMaxObserver] = {}
        self.hists: dict[str, HistogramObserver] = {}
        self.channels = {n: ChannelMinMaxObserver() for n in channels}

    @property
    def passes(self) -> int:
        return 1 if self.method == "minmax" else 2

    def observe(self, pass_index: int, tensors: dict[str, np.ndarray]) -> None:
        for name, x in tensors.items():
            if pass_index == 0:
                self.minmax.setdefault(name, MinMaxObserver()).update(x)
                if name in self.channels:
                    self.channels[name].update(x)
            else:
                if name not in self.hists:
                    self.hists[name] = HistogramObserver(self.minmax[name].amax)
                self.hists[name].update(x)

    def ranges(self) -> dict[str, Range]:
        out = {n: choose_range(self.method, mm, self.hists.get(n), self.percentile)
               for n, mm in self.minmax.items()}
        for n, ch in self.channels.items():
            if n in out and ch.lo is not None:
                out[n].channel_lo, out[n].channel_hi = ch.lo, ch.hi
        return out
