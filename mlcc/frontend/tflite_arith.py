"""TensorFlow Lite's integer arithmetic, in Python, for the constants the TFLite importer
computes at compile time: the per-channel (multiplier, shift) pairs of QuantizeMultiplier, the
activation clamps, and the 256-entry tables of element-wise operators on int8 codes (ReLU,
ReLU6, requantization) and of softmax's exponentials.

These follow TFLite's reference kernels as TensorFlow Lite Micro builds them (double rounding:
TFLITE_SINGLE_ROUNDING is not set), written here from their definitions (gemmlowp's
fixedpoint.h, tensorflow/lite/kernels/internal/common.h and quantization_util.cc):

- QuantizeMultiplier(m): frexp(m) = q * 2^shift, q_fixed = round_half_away(q * 2^31) (TfLiteRound,
  not numpy's half-to-even; mlcc.quant.scheme.fixed_multiplier rounds half to even and stays so
  for mlcc's own int8 path), 2^31 -> 2^30 with shift + 1, shift < -31 -> (0, 0).
- MultiplyByQuantizedMultiplier(x, m, s) = RDBPOT(SRDHM(x * 2^max(s, 0), m), max(-s, 0)).
- int32 arithmetic wraps as the C++ does (the values stay in range for valid models).
"""
from __future__ import annotations

import math

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def wrap32(v: int) -> int:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def tflite_round(v: float) -> int:
    """TfLiteRound (std::round): half away from zero."""
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def quantize_multiplier(m: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier on a double: (q_fixed in [2^30, 2^31), shift). Not
    mlcc.quant.scheme.fixed_multiplier: that one rounds ties to even, for mlcc's own int8
    path (whose outputs must not change), and the frontend layer does not import ops."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    q_fixed = tflite_round(q * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul."""
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) >> 31
    return q if ab + nudge >= 0 else -q          # C division truncates toward zero


def rdbpot(x: int, exponent: int) -> int:
    """gemmlowp RoundingDivideByPOT: round half away from zero."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def mul_by_quantized_multiplier(x: int, mult: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    return rdbpot(srdhm(wrap32(x * (1 << left)), mult), right)


def saturating_shift_left(x: int, e: int) -> int:
    """gemmlowp SaturatingRoundingMultiplyByPOT<e> for e > 0."""
    threshold = (1 << (31 - e)) - 1
    if x > threshold:
        return INT32_MAX
    if x < -threshold:
        return INT32_MIN
    return x << e


def activation_range(act: str, scale: float, zero_point: int, qmin: int = -128,
                     qmax: int = 127) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the int8 clamp of a fused activation (f / scale in
    float32, as TFLite divides)."""
    import numpy as np

    def q(f: float) -> int:
        return zero_point + tflite_round(float(np.float32(f) / np.float32(scale)))

    if act == "NONE":
        return qmin, qmax
    if act == "RELU":
        return max(qmin, q(0.0)), qmax
    if act == "RELU6":
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if act == "RELU_N1_TO_1":
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    raise ValueError(act)


# ------------------------------------------------------------------ gemmlowp fixed point

def _exp_quarter(a: int) -> int:
    """exp(x) for x in [-1/4, 0), Q0.31 in and out."""
    const_term, one_third = 1895147668, 715827883
    x = wrap32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rdbpot(x4, 2)
    poly = rdbpot(wrap32(srdhm(wrap32(x4_over_4 + x3), one_third) + x2), 1)
    return wrap32(const_term + srdhm(const_term, wrap32(x + poly)))


def exp_on_negative_values(a: int, integer_bits: int) -> int:
    """gemmlowp exp_on_negative_values for FixedPoint<int32, integer_bits> (Q0.31 result)."""
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = wrap32((a & (quarter - 1)) - quarter)
    result = _exp_quarter(saturating_shift_left(a_mod, integer_bits) if integer_bits else a_mod)
    remainder = wrap32(a_mod - a)
    for exponent, mult in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                           (2, 39332535), (3, 720401), (4, 242)):
        if integer_bits > exponent and remainder & (1 << (frac + exponent)):
            result = srdhm(result, mult)
    if integer_bits > 5 and a < -(1 << (36 - integer_bits)):
        result = 0
    return INT32_MAX if a == 0 else result


SOFTMAX_DIFF_BITS = 5        # kScaledDiffIntegerBits
SOFTMAX_ACCUM_BITS = 12      # kAccumulationIntegerBits


def softmax_tables(beta: float, input_scale: float) -> tuple[list[int], list[int]]:
    """TFLite's int8 softmax, the part that depends on one input difference d = x - max(row)
    in [-255, 0]: for index -d, exp(d) in Q0.31 and the same rescaled to the Q12.19 sum
    (both 0 where d < diff_min: such an element adds nothing and its output is -128, which a
    zero exponential also gives). The run-time kernel (mlcc_u8_softmax) sums, takes the
    reciprocal and scales."""
    real = min(beta * input_scale * (1 << (31 - SOFTMAX_DIFF_BITS)), float((1 << 31) - 1))
    mult, left_shift = quantize_multiplier(real)
    radius = math.floor(((1 << SOFTMAX_DIFF_BITS) - 1) * (1 << (31 - SOFTMAX_DIFF_BITS))
                        / (1 << left_shift))
    diff_min = -radius
    exps, sums = [], []
    for k in range(256):
        d = -k
        if d < diff_min:
            exps.append(0)
            sums.append(0)
            continue
        rescaled = srdhm(wrap32(d * (1 << left_shift)), mult)
        e = exp_on_negative_values(rescaled, SOFTMAX_DIFF_BITS)
        exps.append(e)
        sums.append(rdbpot(e, SOFTMAX_ACCUM_BITS))
    return exps, sums


# ------------------------------------------------------------------ element-wise tables

def requantize_table(in_zp: int, out_zp: int, mult: int, shift: int, lo: int = -128,
                     hi: int = 127) -> list[int]:
    """out = clamp(MBQM(x - in_zp, mult, shift) + out_zp, lo, hi) for x = -128..127: TFLite's
    Requantize (QUANTIZE int8 -> int8) and ReluQuantized (RELU, RELU6 with their clamp)."""
    return [min(hi, max(lo, mul_by_quantized_multiplier(x - in_zp, mult, shift) + out_zp))
            for x in range(-128, 128)]


def clamp_table(lo: int, hi: int) -> list[int]:
    return [min(hi, max(lo, x)) for x in range(-128, 128)]


def _newton_reciprocal(a: int) -> int:
    """The Q2.29 Newton-Raphson iterate of 1 / ((1 + a) / 2) for a in Q0.31 (gemmlowp's
    one_over_one_plus_x_for_x_in_0_1 and one_minus_x_over_one_plus_x_for_x_in_0_1)."""
    total = a + INT32_MAX + (1 if a + INT32_MAX >= 0 else -1)     # RoundingHalfSum(a, 1)
    half_den = abs(total) // 2 * (1 if total >= 0 else -1)          # C division
    x = wrap32(1515870810 + srdhm(half_den, -1010580540))
    for _ in range(3):
        one_minus = wrap32((1 << 29) - srdhm(half_den, x))
        x = wrap32(x + saturating_shift_left(srdhm(x, one_minus), 2))
    return x


def one_over_one_plus_x(a: int) -> int:
    return saturating_shift_left(_newton_reciprocal(a), 1)


def one_minus_x_over_one_plus_x(a: int) -> int:
    return saturating_shift_left(wrap32(_newton_reciprocal(a) - (1 << 29)), 2)


def fixed_logistic(a: int, integer_bits: int) -> int:
    """gemmlowp logistic: Q(integer_bits) in, Q0.31 out."""
    if a == 0:
        return 1 << 30
    positive = one_over_one_plus_x(exp_on_negative_values(-abs(a), integer_bits))
    return positive if a > 0 else wrap32(INT32_MAX - positive)


def fixed_tanh(a: int, integer_bits: int) -> int:
    """gemmlowp tanh: Q(integer_bits) in, Q0.31 out."""
    if a == 0:
        return 0
    t = one_minus_x_over_one_plus_x(exp_on_negative_values(-abs(a), integer_bits + 1))
    return -t if a < 0 else t


def _q4_input(scale: float) -> tuple[int, int, int]:
    """TFLM's LOGISTIC / TANH int8 preparation: (multiplier, left shift, input radius) of the
    input scale in Q4.27 (frexp and TfLiteRound, without QuantizeMultiplier's 2^31 check)."""
    q, shift = math.frexp(scale * float(1 << 27))
    mult = wrap32(tflite_round(q * (1 << 31)))
    radius = math.floor(15 * (1 << 27) / (1 << shift))
    return mult, shift, radius


def _q4_table(in_scale: float, in_zp: int, fn, out_shift: int, out_zp: int) -> list[int]:
    """TFLM's int8 LOGISTIC / TANH for x = -128..127: inputs beyond the radius saturate, the
    others go to Q4.27, through fn (Q0.31 out), RDBPOT by out_shift, + out_zp, clamped."""
    mult, shift, radius = _q4_input(in_scale)
    out = []
    for x in range(-128, 128):
        v = x - in_zp
        if v <= -radius:
            out.append(-128)
        elif v >= radius:
            out.append(127)
        else:
            r = rdbpot(fn(mul_by_quantized_multiplier(v, mult, shift), 4), out_shift)
            out.append(min(127, max(-128, r + out_zp)))
    return out


def logistic_table(in_scale: float, in_zp: int) -> list[int]:
    """TFLM's int8 LOGISTIC (output zero point -128, scale 1/256)."""
    return _q4_table(in_scale, in_zp, fixed_logistic, 23, -128)


def tanh_table(in_scale: float, in_zp: int) -> list[int]:
    """TFLM's int8 TANH (output zero point 0, scale 1/128)."""
    return _q4_table(in_scale, in_zp, fixed_tanh, 24, 0)


def _wrap16(v: int) -> int:
    return ((v + (1 << 15)) & 0xFFFF) - (1 << 15)


def _srdhm16(a: int, b: int) -> int:
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    q = abs(ab + nudge) >> 15
    return _wrap16(q if ab + nudge >= 0 else -q)


def _sat_shift16(v: int, amount: int) -> int:
    return min((1 << 15) - 1, max(-(1 << 15), v * (1 << amount)))


def _int16_multiplier(m32: int) -> int:
    """DownScaleInt32ToInt16Multiplier."""
    if m32 >= INT32_MAX - (1 << 15):
        return (1 << 15) - 1
    return (m32 + (1 << 15)) >> 16


def hard_swish_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int
                     ) -> list[int]:
    """TFLM's int8 HARD_SWISH (int16 fixed point; its scales computed in float32 as TFLM
    does) for x = -128..127."""
    import numpy as np
    hires = np.float32(1.0 / 128.0) * np.float32(in_scale)
    out_m, out_e = quantize_multiplier(float(np.float32(hires / np.float32(out_scale))))
    relu_m, relu_e = quantize_multiplier(float(np.float32(hires / np.float32(3.0 / 32768.0))))
    if out_e > 0:
        raise ValueError("HARD_SWISH output multiplier above 1")
    out_m16, relu_m16 = _int16_multiplier(out_m), _int16_multiplier(relu_m)
    table = []
    for x in range(-128, 128):
        v = _wrap16(x - in_zp)
        hi = _wrap16(v * 128)
        pre_out = _srdhm16(hi, out_m16)
        r = hi
        if relu_e > 0:
            r = _sat_shift16(r, relu_e - 1)
        r = _srdhm16(r, relu_m16)
        if relu_e > 0:
            r = _sat_shift16(r, 1)
        if relu_e < 0:
            r = rdbpot(r, -relu_e)
        r = _wrap16((r + (1 << 15)) >> 1)
        # SaturatingDoublingHighMul (hard_swish.h's own: no rounding nudge, C division)
        if r == pre_out == -(1 << 15):
            pre = (1 << 15) - 1
        else:
            ab = r * pre_out
            pre = _wrap16(abs(ab) // (1 << 15) * (1 if ab >= 0 else -1))
        o = _wrap16(rdbpot(pre, -out_e) + out_zp)
        table.append(min(127, max(-128, o)))
    return table


def mul_table(x_zp: int, c: int, c_zp: int, mult: int, shift: int, out_zp: int, lo: int,
              hi: int) -> list[int]:
    """TFLite's int8 MUL of a tensor by one constant int8 value c (zero point c_zp)."""
    return [min(hi, max(lo, out_zp + mul_by_quantized_multiplier((x - x_zp) * (c - c_zp),
                                                                  mult, shift)))
            for x in range(-128, 128)]


def add_sub_value(a: int, b: int, q: tuple, subtract: bool) -> int:
    """TFLite's int8 ADD / SUB of one pair: q = (za, zb, zy, a_mult, a_shift, b_mult,
    b_shift, out_mult, out_shift, lo, hi) (int8 zero points)."""
    za, zb, zy, am, ash, bm, bsh, om, osh, lo, hi = q
    sa = mul_by_quantized_multiplier((a - za) * (1 << 20), am, ash)
    sb = mul_by_quantized_multiplier((b - zb) * (1 << 20), bm, bsh)
    raw = wrap32(sa - sb if subtract else sa + sb)
    return min(hi, max(lo, mul_by_quantized_multiplier(raw, om, osh) + zy))


def mean_multiplier(in_scale: float, out_scale: float, count: int) -> tuple[int, int]:
    """TFLM's int8 MEAN: QuantizeMultiplier(s_in / s_out) with 1 / count folded in (the
    multiplier shifted left by floor(log2 count), at most 32 and 31 + shift, then divided)."""
    mult, shift = quantize_multiplier(float(in_scale) / float(out_scale))
    n_shift = min(count.bit_length() - 1, 32, 31 + shift)
    return wrap32((mult << n_shift) // count), shift - n_shift
