"""The integer scheme and numpy models of its arithmetic (the C kernels must match them bit for
bit; tests/test_quant.py checks it).

- Activations: per tensor, asymmetric uint8 (x86's u8 x s8 dot products want unsigned
  activations): real = scale * (q - zero_point), q in [0, 255], zero exactly representable.
- Weights: symmetric int8 per output channel (or per tensor), q in [-127, 127], zero point 0.
- Bias: int32 at scale x_scale * w_scale[c].
- Requantization of an int32 accumulator to uint8, two modes (target YAML int8.requant):
  "float": q = clamp(rint_half_even(float(acc) * M[c])) + zp with M[c] the float32 product
  x_scale * w_scale[c] / y_scale computed in float32 in that order, and the clamp applied in
  float before rounding: onnxruntime's QLinearConv arithmetic (MlasRequantizeOutput).
  "fixed": gemmlowp/TFLite integer-only: M[c] = m0 * 2^e with m0 a Q31 integer in [2^30, 2^31);
  q = clamp(RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc << max(e, 0), m0),
  max(-e, 0)) + zp).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops.activations import BY_KIND

QMIN_U8, QMAX_U8 = 0, 255
WMAX = 127
REQUANT_MODES = ("float", "fixed")


@dataclass(frozen=True)
class QParams:
    scale: float
    zero_point: int
    qmin: int = QMIN_U8
    qmax: int = QMAX_U8
    dtype: str = "uint8"

    def quantize(self, x: np.ndarray) -> np.ndarray:
        return quantize_linear(x, self)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return dequantize_linear(q, self)


def activation_qparams(lo: float, hi: float) -> QParams:
    """uint8 asymmetric parameters covering [lo, hi] and 0 (ONNX / onnxruntime's formula)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = np.float32((hi - lo) / (QMAX_U8 - QMIN_U8))
    if not np.isfinite(scale) or scale <= 0:
        scale = np.float32(1.0)
    zp = int(np.clip(np.rint(QMIN_U8 - lo / float(scale)), QMIN_U8, QMAX_U8))
    return QParams(float(scale), zp)


def quantize_linear(x: np.ndarray, qp: QParams) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(rint(x / scale) + zp), computed in float32."""
    y = np.rint(np.asarray(x, np.float32) / np.float32(qp.scale)) + np.float32(qp.zero_point)
    return np.clip(y, qp.qmin, qp.qmax).astype(qp.dtype)


def dequantize_linear(q: np.ndarray, qp: QParams) -> np.ndarray:
    return ((q.astype(np.int32) - qp.zero_point).astype(np.float32) * np.float32(qp.scale))


def quantize_weights(w: np.ndarray, per_channel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights and their float32 scales (one per output channel = axis 0, or
    one repeated for every channel)."""
    w = np.asarray(w, np.float32)
    flat = w.reshape(w.shape[0], -1)
    amax = np.abs(flat).max(axis=1) if per_channel else np.full(w.shape[0], np.abs(flat).max())
    scale = (amax / WMAX).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    q = np.clip(np.rint(flat / scale[:, None]), -WMAX, WMAX).astype(np.int8)
    return q.reshape(w.shape), scale


QMAX_S16 = 32767


def int16_scale(r) -> float:
    """The symmetric int16 scale (zero point 0) of a W8A16 layer's input from its calibrated
    observers.Range: the whole observed range (minmax: at 16 bits a step is 1/32767 of it, so
    clipping outliers buys nothing worth their error)."""
    amax = max(abs(float(r.observed_lo)), abs(float(r.observed_hi)))
    scale = np.float32(amax / QMAX_S16)
    return float(scale) if np.isfinite(scale) and scale > 0 else 1.0


BIAS_LIMIT = 2**30      # |quantized bias| bound: the folded zero-point term still fits int32


def fit_bias(w: np.ndarray, q: np.ndarray, scale: np.ndarray, b: np.ndarray | None,
             x_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Weights (q, scale) whose channels' quantized bias b / (x_scale * scale) stays within
    BIAS_LIMIT: a channel whose weights are negligible next to its bias (PP-OCR rec has
    them: weights near 1e-30) gets the larger scale |b| / (x_scale * BIAS_LIMIT) and its weights
    requantized with it (onnxruntime's quantizer adjusts such weight scales the same way)."""
    if b is None:
        return q, scale
    need = (np.abs(np.asarray(b, np.float64).reshape(-1)) /
            (np.float64(np.float32(x_scale)) * BIAS_LIMIT)).astype(np.float32)
    # float32 rounding of need may land a hair below the bound: one step up
    need = np.nextafter(need, np.float32(np.inf))
    grow = need > scale
    if not np.any(grow):
        return q, scale
    scale = np.where(grow, need, scale).astype(np.float32)
    flat = np.asarray(w, np.float32).reshape(w.shape[0], -1)
    again = np.clip(np.rint(flat / scale[:, None]), -WMAX, WMAX).astype(np.int8)
    # only the grown channels change (the others may hold learned rounding: adaround.py)
    q = np.where(grow[:, None], again, q.reshape(again.shape)).reshape(q.shape)
    return q, scale


def quantize_bias(b: np.ndarray | None, x_scale: float, w_scale: np.ndarray) -> np.ndarray:
    if b is None:
        return np.zeros(len(w_scale), np.int32)
    s = np.float32(x_scale) * w_scale.astype(np.float32)
    return np.clip(np.rint(np.asarray(b, np.float32) / s), -2**31, 2**31 - 1).astype(np.int32)


def float_multipliers(x_scale: float, w_scale: np.ndarray, y_scale: float) -> np.ndarray:
    """float32 (x_scale * w_scale[c]) / y_scale, rounded like onnxruntime computes it."""
    return ((np.float32(x_scale) * w_scale.astype(np.float32)) / np.float32(y_scale)
            ).astype(np.float32)


def requantize_float(acc: np.ndarray, mult: np.ndarray, qp: QParams,
                     lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """acc: int32 [..., channels along `mult`'s broadcasting]; mult float32."""
    lo = qp.qmin if lo is None else lo
    hi = qp.qmax if hi is None else hi
    f = acc.astype(np.float32) * mult.astype(np.float32)
    f = np.minimum(np.maximum(f, np.float32(lo - qp.zero_point)), np.float32(hi - qp.zero_point))
    return (np.rint(f).astype(np.int32) + qp.zero_point).astype(qp.dtype)


def fixed_multiplier(m: float) -> tuple[int, int]:
    """m = m0 * 2^(shift - 31) with m0 in [2^30, 2^31): gemmlowp's QuantizeMultiplier."""
    if m <= 0:
        return 0, 0
    mant, exp = np.frexp(np.float64(m))
    m0 = int(np.round(mant * (1 << 31)))
    if m0 == 1 << 31:
        m0 //= 2
        exp += 1
    if exp < -31:
        return 0, 0
    return m0, int(exp)


def fixed_multipliers(mults: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pairs = [fixed_multiplier(float(m)) for m in np.asarray(mults, np.float64)]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def _trunc_div(a: np.ndarray, d: int) -> np.ndarray:
    """C integer division (toward zero) on int64."""
    q = np.abs(a) // d
    return np.where(a < 0, -q, q)


def srdhm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values (int64 arrays)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    r = _trunc_div(ab + nudge, 1 << 31)
    return np.where((a == -2**31) & (b == -2**31), 2**31 - 1, r)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.int64)
    e = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def multiply_by_quantized_multiplier(acc: np.ndarray, m0: np.ndarray, shift: np.ndarray
                                     ) -> np.ndarray:
    left = np.maximum(shift, 0).astype(np.int64)
    right = np.maximum(-shift, 0).astype(np.int64)
    x = np.clip(np.asarray(acc, np.int64) * (np.int64(1) << left), -2**31, 2**31 - 1)
    return rounding_divide_by_pot(srdhm(x, m0), right)


def requantize_fixed(acc: np.ndarray, m0: np.ndarray, shift: np.ndarray, qp: QParams,
                     lo: int | None = None, hi: int | None = None) -> np.ndarray:
    lo = qp.qmin if lo is None else lo
    hi = qp.qmax if hi is None else hi
    v = multiply_by_quantized_multiplier(acc, m0, shift) + qp.zero_point
    return np.clip(v, lo, hi).astype(qp.dtype)


def act_clamp(act: tuple, qp: QParams) -> tuple[int, int]:
    """The quantized clamp bounds that implement a fused Relu/Clip (or none): an activation
    whose int8 rule is "clamp" (mlcc/ops/activations.py)."""
    kind, a, b = act
    lo_f, hi_f = BY_KIND[kind].clamp(a, b)
    lo = qp.qmin if lo_f == -np.inf else int(np.clip(np.rint(lo_f / qp.scale) + qp.zero_point,
                                                     qp.qmin, qp.qmax))
    hi = qp.qmax if hi_f == np.inf else int(np.clip(np.rint(hi_f / qp.scale) + qp.zero_point,
                                                    qp.qmin, qp.qmax))
    return lo, hi


def activation_table(act: tuple, x: QParams, y: QParams) -> np.ndarray:
    """The 256 uint8 outputs of an activation (mlcc_act kind, alpha, beta) for every uint8
    input code: function_table of its float definition (mlcc/ops/activations.py)."""
    kind, a, b = act
    ref = BY_KIND[kind].ref
    return function_table(lambda v: ref(v.astype(np.float64), a, b), x, y)


def function_table(fn, x: QParams, y: QParams) -> np.ndarray:
    """quantize(fn(dequantize(code, x)), y) for the 256 input codes: an element-wise function
    of one uint8 tensor as a table. fn gets float32 reals and may compute in float64; its
    result is rounded to float32 before quantizing. Computed once by the compiler, so every
    target reads the same bytes: bit-exact by construction."""
    real = dequantize_linear(np.arange(256, dtype=np.uint8), x)
    return quantize_linear(np.asarray(fn(real)).astype(np.float32), y)
