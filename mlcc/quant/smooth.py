"""SmoothQuant-style scale migration (Xiao et al., 2023): a float activation read by integer
MatMuls whose channels have very different ranges (transformers: a few LayerNorm output
channels and FFN hidden channels carry outliers 10-100x the rest) is divided channel by channel
by s, and the weights' rows multiplied by s, before quantization:

    x @ W = (x / s) @ (s W),   s_k = max|x_k|^alpha / max_n |W[k, n]|^(1 - alpha)

so that one per-tensor uint8 scale fits x / s much better, at the price of spreading the
outliers into the (per output channel) int8 weights. alpha = 1 moves all of x's range into
the weights; 0.5 is the paper's default.

alpha "auto" (the default, choose_alphas): per smoothed value, the alpha of ALPHAS (or no
smoothing at all) whose quantized products are closest to the float ones on calibration rows
it was not fitted on: the rows of the even calibration samples fit the per-channel ranges,
s and x/s's range (x's own range by the calibrator for "no smoothing"), the odd ones measure
the error, and the other way round; the error is that of every reader's product, each
relative to the product's energy, with x / s in uint8 and s W in int8 as the rewrite
quantizes them. Scored on the fitting rows themselves, the highest alphas always won (x / s
then fills its range evenly) while on held-out sentences MiniLM's embeddings lost most with
them: a token beyond the calibrated range of a flattened channel is clipped, and the
held-out error sees that.

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
from .observers import HistogramObserver, MinMaxObserver, Range, choose_range
from .predicates import CLAMP_ACTS, fused_act, is_integer_producer
from .scheme import activation_qparams, quantize_weights

S_MIN, S_MAX = 1e-4, 1e4
AUTO = "auto"
ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)     # the candidates of auto (and no smoothing)
AUTO_SAMPLES = 16       # calibration samples auto scores on ...
AUTO_ROWS = 1024        # ... at most this many rows (tokens) of each value, evenly spaced


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


def _scales(r: Range, weights: list[np.ndarray], alpha: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """s (float32, one per channel of x) and its reciprocal for the readers' weights [K, N]."""
    amax = np.maximum(np.abs(r.channel_lo), np.abs(r.channel_hi))
    wmax = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.power(amax, alpha) / np.power(wmax, 1.0 - alpha)
    s = np.where(np.isfinite(s) & (s > 0), s, 1.0)
    s = np.clip(s, S_MIN, S_MAX).astype(np.float32)
    return s, (np.float32(1.0) / s).astype(np.float32)


def _smoothed_range(r: Range, inv: np.ndarray) -> tuple[float, float]:
    """x/s's range from x's per-channel ranges (exact for minmax)."""
    return (float(np.min(r.channel_lo * inv.astype(np.float64))),
            float(np.max(r.channel_hi * inv.astype(np.float64))))


def sample_rows(samples, run, names) -> dict[str, list[np.ndarray]]:
    """Rows (last axis = channels) of the float values `names` on the first AUTO_SAMPLES of
    `samples` (`run(sample)` -> values), one array per sample of at most
    AUTO_ROWS / AUTO_SAMPLES rows, evenly spaced."""
    rows: dict[str, list] = {n: [] for n in names}
    per_sample = max(1, AUTO_ROWS // AUTO_SAMPLES)
    for k, sample in enumerate(samples):
        if k >= AUTO_SAMPLES:
            break
        values = run(sample)
        for n in names:
            if n in values:
                x = np.asarray(values[n], np.float32).reshape(-1, values[n].shape[-1])
                if len(x) > per_sample:
                    x = x[np.linspace(0, len(x) - 1, per_sample).round().astype(int)]
                rows[n].append(x)
    return {n: parts for n, parts in rows.items() if parts}


def _product_error(x: np.ndarray, lo: float, hi: float, weights: list[np.ndarray],
                   refs: list[np.ndarray], per_channel: bool) -> float:
    """Sum over the readers of |x W - q(x) q(W)|^2 / |x W|^2, x quantized to uint8 on [lo, hi]
    and W [K, N] to int8 per output column as the rewrite does."""
    qp = activation_qparams(lo, hi)
    xq = qp.dequantize(qp.quantize(x))
    err = 0.0
    for w, ref in zip(weights, refs):
        q, scale = quantize_weights(w.T, per_channel)
        wq = (q.astype(np.float32) * scale[:, None]).T
        diff = (xq @ wq).astype(np.float64) - ref
        err += float(np.sum(diff * diff) / max(float(np.sum(ref * ref)), 1e-30))
    return err


def folds(parts: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(fit rows, held-out rows): the even and the odd samples, both ways (all rows twice
    when there is one sample)."""
    if len(parts) < 2:
        x = np.concatenate(parts)
        return [(x, x)]
    a, b = np.concatenate(parts[0::2]), np.concatenate(parts[1::2])
    return [(a, b), (b, a)]


def fitted_range(x: np.ndarray, method: str, percentile: float) -> Range:
    """The calibrator's range of rows x, with their per-channel minima and maxima."""
    mm = MinMaxObserver()
    mm.update(x)
    hist = None
    if method != "minmax":
        hist = HistogramObserver(mm.amax)
        hist.update(x)
    r = choose_range(method, mm, hist, percentile)
    r.channel_lo, r.channel_hi = x.min(axis=0).astype(np.float64), x.max(axis=0).astype(
        np.float64)
    return r


def candidate_errors(x_fit: np.ndarray, x_held: np.ndarray, weights: list[np.ndarray],
                     per_channel: bool = True, method: str = "auto",
                     percentile: float = 99.99) -> dict[str, float]:
    """The product error on x_held of each candidate ("none" and the alphas of ALPHAS) with
    its ranges and scales fitted on x_fit."""
    r = fitted_range(x_fit, method, percentile)
    refs = [x_held.astype(np.float64) @ w.astype(np.float64) for w in weights]
    err = {"none": _product_error(x_held, r.lo, r.hi, weights, refs, per_channel)}
    for a in ALPHAS:
        s, inv = _scales(r, weights, a)
        lo, hi = _smoothed_range(r, inv)
        err[f"{a:g}"] = _product_error(x_held * inv, lo, hi, [w * s[:, None] for w in weights],
                                       refs, per_channel)
    return err


def choose_alphas(g: Graph, ranges: dict, rows: dict[str, list[np.ndarray]],
                  per_channel: bool = True, method: str = "auto", percentile: float = 99.99
                  ) -> tuple[dict[str, float], dict[str, dict]]:
    """auto: per smoothable value with rows and per-channel ranges, the alpha of ALPHAS with
    the least held-out product error (module docstring), or none if x unsmoothed is better.
    Returns {value: alpha} for the values to smooth and, per value scored, each candidate's
    error ("none" for no smoothing)."""
    consumers = g.consumers()
    alphas, scores = {}, {}
    for x in smoothable(g):
        r = ranges.get(x)
        if r is None or r.channel_lo is None or x not in rows:
            continue
        weights = [g.const(c.inputs[1]) for c in _smooth_readers(g, x, consumers)]
        err: dict[str, float] = {}
        for fit, held in folds(rows[x]):
            for k, e in candidate_errors(fit, held, weights, per_channel, method,
                                         percentile).items():
                err[k] = err.get(k, 0.0) + e
        best = min(err, key=lambda k: (err[k], k != "none"))    # ties: leave x alone
        scores[x] = err
        if best != "none":
            alphas[x] = float(best)
    return alphas, scores


def smooth(g: Graph, ranges: dict, alpha: float | dict[str, float] = 0.5
           ) -> tuple[Graph, dict, list[str]]:
    """The smoothed graph, the ranges with the new values added, and the values smoothed.
    alpha: one for every smoothable value, or {value: alpha} (choose_alphas) for those
    values only."""
    g = g.copy()
    ranges = dict(ranges)
    consumers = g.consumers()
    done = []
    for x in smoothable(g):
        r = ranges.get(x)
        a = alpha.get(x) if isinstance(alpha, dict) else alpha
        if r is None or r.channel_lo is None or a is None:
            continue
        readers = _smooth_readers(g, x, consumers)
        s, inv = _scales(r, [g.const(c.inputs[1]) for c in readers], a)
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
        lo, hi = _smoothed_range(r, inv)
        ranges[xs] = Range(lo, hi, lo, hi, 0.0)
        done.append(x)
    return g, ranges, done
