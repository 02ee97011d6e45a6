/* Boundaries and element-wise integer kernels on uint8 tensors: QuantizeLinear,
 * DequantizeLinear, requantizing Add, a requantizing copy (Concat inputs of another scale),
 * max and average pooling, table lookup.
 *
 * Thread-compatible: no state; outputs must not overlap inputs. The kernels that take a pool
 * (quantize, add, sub, requantize, channel_scale, lut, the poolings) split large calls between its threads:
 * the same bytes on any pool. */
#ifndef MLCC_QELEM_H
#define MLCC_QELEM_H

#include "qgemm.h"

typedef struct mlcc_quantize_params {
    int64_t count;
    float scale;
    int32_t zero_point;
} mlcc_quantize_params;

/* y = clamp(rint_even(x / scale) + zero_point, 0, 255) (ONNX QuantizeLinear; NaN gives 0). */
void mlcc_f32_quantize(const mlcc_quantize_params *p, const float *x, uint8_t *y,
                       mlcc_threadpool *pool);
/* y = (float)(x - zero_point) * scale (ONNX DequantizeLinear). */
void mlcc_u8_dequantize(const mlcc_quantize_params *p, const uint8_t *x, float *y);

/* ONNX DynamicQuantizeLinear (uint8), onnxruntime's arithmetic in float32:
 *   lo = min(0, min(x)), hi = max(0, max(x)) (NaN elements are skipped by the reduction),
 *   scale = hi == lo ? 1 : (hi - lo) / 255,
 *   zero_point = rint_even(clamp(0 - lo / scale, 0, 255)),
 *   y = clamp(rint_even(x / scale) + zero_point, 0, 255) (mlcc_f32_quantize: NaN gives 0).
 * Writes y[count], *y_scale and *y_zero_point. */
typedef struct mlcc_dynamic_quantize_params {
    int64_t count;
} mlcc_dynamic_quantize_params;

void mlcc_f32_dynamic_quantize(const mlcc_dynamic_quantize_params *p, const float *x,
                               uint8_t *y, float *y_scale, uint8_t *y_zero_point);

/* The range and the parameters of mlcc_f32_dynamic_quantize, for the kernels that quantize
 * their own activations at run time that way (qrecurrent.c): *lo = min(*lo, x[i]) and
 * *hi = max(*hi, x[i]) over x[0..n) (NaN skipped; start from 0 and 0), then the scale and
 * the zero point of [lo, hi]. */
static inline void mlcc_f32_widen_range(const float *x, int64_t n, float *lo, float *hi) {
    /* a vector of running minima and maxima (one chain of compares ran at its latency); a
     * selection is exact, so any order gives the same range */
    float lv = *lo, hv = *hi;
    int64_t i = 0;
#if MLCC_HAVE_VECTORS
    if (n >= 2 * MLCC_VF_LANES) {
        mlcc_vf l = mlcc_vf_splat(lv), h = mlcc_vf_splat(hv);
        ptrdiff_t j;
        for (; i + MLCC_VF_LANES <= n; i += MLCC_VF_LANES) {
            const mlcc_vf v = mlcc_vf_load(x + i);
            l = mlcc_vf_select(v < l, v, l);            /* NaN compares false: skipped */
            h = mlcc_vf_select(v > h, v, h);
        }
        for (j = 0; j < MLCC_VF_LANES; j++) {
            lv = l[j] < lv ? l[j] : lv;
            hv = h[j] > hv ? h[j] : hv;
        }
    }
#endif
    for (; i < n; i++) {
        const float v = x[i];
        lv = v < lv ? v : lv;            /* NaN compares false: skipped */
        hv = v > hv ? v : hv;
    }
    *lo = lv;
    *hi = hv;
}

static inline void mlcc_dynamic_qparams(float lo, float hi, float *scale, int32_t *zero_point) {
    const float magic = 12582912.0f;
    const float s = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zp = 0.0f - lo / s;
    zp = zp > 0.0f ? zp : 0.0f;
    zp = zp < 255.0f ? zp : 255.0f;
    zp = (zp + magic) - magic;        /* round half to even */
    *scale = s;
    *zero_point = (int32_t)zp;
}

/* The zero points of ONNX MatMulInteger applied after an integer product with none:
 *   y[i][j] += k * zx * zw[j] - zx * colsum[j] - zw[j] * sum_k x[i][k]
 * which makes y = sum_k (x[i][k] - zx) (w[k][j] - zw[j]) from y = sum_k x[i][k] w[k][j].
 * x: uint8 [m][k]; x_zero_point: one uint8 read at run time (NULL: 0); colsum: int32 [n],
 * sum_k w[k][j]; w_zero_point: int32 [n] (NULL: all 0); y: int32 [m][n], updated in place. */
typedef struct mlcc_zero_point_params {
    int64_t m, n, k;
} mlcc_zero_point_params;

void mlcc_i32_zero_point_correct(const mlcc_zero_point_params *p, const uint8_t *x,
                                 const uint8_t *x_zero_point, const int32_t *colsum,
                                 const int32_t *w_zero_point, int32_t *y);

/* The float output of onnxruntime's MatMulIntegerToFloat and DynamicQuantizeMatMul from the
 * exact int32 product (zero points applied): y[i][j] = act((float)acc[i][j] * mul[j] + bias[j]),
 * mul[j] = a_scale[0] * b_scale[per_column ? j : 0] rounded to float32 first (onnxruntime's
 * multiplier), then one float32 multiply and one add; act is a fused activation (a GELU after
 * the product), applied to each row while it is in cache. a_scale is read at run time (the
 * scale DynamicQuantizeLinear computed); bias: float32 [n], or NULL for none. */
typedef struct mlcc_rescale_params {
    int64_t m, n;
    int32_t per_column;
    mlcc_act act;
} mlcc_rescale_params;

void mlcc_i32_rescale(const mlcc_rescale_params *p, const int32_t *acc, const float *a_scale,
                      const float *b_scale, const float *bias, float *y);

/* Requantizing Add of two uint8 tensors of the same shape:
 *   MLCC_REQUANT_FLOAT: y = clamp(rint_even((a - za) * ma + (b - zb) * mb) + zy) in double,
 *     with ma = sa / sy and mb = sb / sy rounded to float32 by the compiler: each product is
 *     then exact in double and the sum rounds once, with or without FMA contraction;
 *   MLCC_REQUANT_FIXED: TFLite's integer Add: each input shifted left by 20 bits and scaled by
 *     its Q31 multiplier (a_mult, a_shift; b_mult, b_shift) to a common scale, the sum scaled by
 *     (out_mult, out_shift), then + zy and clamped. */
typedef struct mlcc_qadd_params {
    int64_t count;
    int32_t a_zero_point, b_zero_point;
    double a_mult_f, b_mult_f;
    int32_t a_mult, a_shift, b_mult, b_shift, out_mult, out_shift;
    mlcc_requant rq;          /* mode, zero_point, qmin, qmax (out_kind U8) */
} mlcc_qadd_params;

void mlcc_u8_add(const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y,
                 mlcc_threadpool *pool);

/* Requantizing Mul of two uint8 tensors of the same shape, in either arithmetic:
 *   rq.mode FLOAT (onnxruntime's QLinearMul):
 *     y = clamp(rint_even((double)((a - za) * (b - zb)) * mult_f) + zy)
 *     with mult_f = sa * sb / sy computed in double by the compiler from the float32 scales:
 *     the product of the code differences is an exact integer, so the real result rounds once;
 *   rq.mode FIXED (TFLite's int8 MUL, MulElementwise):
 *     y = clamp(zy + MultiplyByQuantizedMultiplier((a - za) * (b - zb), mult, shift)).
 * rq: zero_point, qmin, qmax. */
typedef struct mlcc_qmul_params {
    int64_t count;
    int32_t a_zero_point, b_zero_point;
    double mult_f;
    int32_t mult, shift;
    mlcc_requant rq;
} mlcc_qmul_params;

void mlcc_u8_mul(const mlcc_qmul_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y);

/* y = clamp(requant((x - x_zero_point), m)) + zy: the float mode as (float)(x - zx) * mult_f
 * rounded half to even, the fixed mode through (mult, shift). */
typedef struct mlcc_qrequant_params {
    int64_t count;
    int32_t x_zero_point;
    float mult_f;
    int32_t mult, shift;
    mlcc_requant rq;
} mlcc_qrequant_params;

void mlcc_u8_requantize(const mlcc_qrequant_params *p, const uint8_t *x, uint8_t *y,
                        mlcc_threadpool *pool);

/* A per-channel scale of a uint8 [batch][channels][plane] tensor by a run-time float vector s
 * (squeeze-excitation: x * s, and x + x * s as x * (s + 1)): for plane (n, c),
 *   m = (s[n * s_batch + c] + offset) * mult_f                  (float32; mult_f = sx / sy)
 *   y = clamp(rint_even((float)(x - x_zero_point) * m) + zy)    (mlcc_u8_requantize's float
 * mode with m as its multiplier). s_batch: channels, or 0 when s is shared by the batch. */
typedef struct mlcc_qchannel_scale_params {
    int64_t batch, channels, plane, s_batch;
    int32_t x_zero_point;
    float offset, mult_f;
    mlcc_requant rq;          /* zero_point, qmin, qmax (out_kind U8, mode FLOAT) */
} mlcc_qchannel_scale_params;

void mlcc_u8_channel_scale(const mlcc_qchannel_scale_params *p, const uint8_t *x,
                           const float *s, uint8_t *y, mlcc_threadpool *pool);

/* Pooling over NCHW uint8 planes with the output's scale and zero point equal to the input's
 * (max commutes with the monotonic quantization; an average of codes is the code of the
 * average). Taps as in pool.h (no tap table); average: (sum of codes over taps inside the
 * input + count / 2) / count, count = taps inside the input, integer only. Large ones split
 * by planes between a pool's threads: the same bytes on any pool. */
typedef struct mlcc_qpool2d_params {
    int64_t planes, in_h, in_w, out_h, out_w;
    int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t pad_top, pad_left;
    int32_t pad_value;        /* code of an all-padding max window (the zero point) */
} mlcc_qpool2d_params;

void mlcc_u8_maxpool2d(const mlcc_qpool2d_params *p, const uint8_t *x, uint8_t *y,
                       mlcc_threadpool *pool);
void mlcc_u8_avgpool2d(const mlcc_qpool2d_params *p, const uint8_t *x, uint8_t *y,
                       mlcc_threadpool *pool);

/* y = table[x]: an element-wise function of one uint8 tensor (Sigmoid, SiLU, HardSwish, ...)
 * as a 256-entry table the compiler computes from the input's and the output's scales and
 * zero points (mlcc/quant/scheme.py's activation_table). */
typedef struct mlcc_lut_params {
    int64_t count;
} mlcc_lut_params;

void mlcc_u8_lut(const mlcc_lut_params *p, const uint8_t *x, const uint8_t *table, uint8_t *y,
                 mlcc_threadpool *pool);

/* ---- TensorFlow Lite's arithmetic (models read from .tflite; mlcc/frontend/tflite_import.py).
 * Their int8 tensors are held as uint8 codes (int8 value + 128, the zero point with it), so
 * that the uint8 kernels above run them; these kernels are where TFLite rounds otherwise. */

/* int8 <-> uint8 codes: y = x + 128 (bit 7 flipped), a model's int8 inputs and outputs. */
typedef struct mlcc_recenter_params {
    int64_t count;
} mlcc_recenter_params;

void mlcc_s8_to_u8(const mlcc_recenter_params *p, const int8_t *x, uint8_t *y);
void mlcc_u8_to_s8(const mlcc_recenter_params *p, const uint8_t *x, int8_t *y);

/* TFLite QUANTIZE (AffineQuantize): y = clamp(round_half_away(x / scale) + zero_point, 0, 255)
 * with the division in float32 (the zero point of the codes: int8 zero point + 128). NaN
 * gives 0 (TFLite leaves it undefined). */
void mlcc_f32_quantize__tflite(const mlcc_quantize_params *p, const float *x, uint8_t *y);
/* TFLite DEQUANTIZE: y = (float)((double)scale * (x - zero_point)). */
void mlcc_u8_dequantize__tflite(const mlcc_quantize_params *p, const uint8_t *x, float *y);

/* TFLite's int8 softmax over the last axis (rows of `depth` codes), output scale 1/256 and
 * zero point -128 (code 0). For d = max(row) - x in 0..255 the compiler tabulates exp_q31[d]
 * (gemmlowp exp_on_negative_values of the scaled difference, Q0.31) and exp_acc[d] (the same
 * in Q12.19); per row: sum = sum of exp_acc (int32), shifted = 1 / sum by gemmlowp's
 * Newton-Raphson (GetReciprocal), y = clamp(RDBPOT(SRDHM(shifted, exp_q31[d]),
 * bits_over_unit + 23), 0, 255) in codes. */
typedef struct mlcc_qsoftmax_params {
    int64_t rows, depth;
} mlcc_qsoftmax_params;

void mlcc_u8_softmax(const mlcc_qsoftmax_params *p, const uint8_t *x, const int32_t *exp_q31,
                     const int32_t *exp_acc, uint8_t *y);

/* TFLite's int8 SUB (SubElementwise): mlcc_u8_add's fixed mode with the difference of the
 * scaled inputs (a - b, each rounded on its own as TFLite does, so not a negated multiplier). */
void mlcc_u8_sub(const mlcc_qadd_params *p, const uint8_t *a, const uint8_t *b, uint8_t *y,
                 mlcc_threadpool *pool);


/* TFLite's int8 MEAN over the middle axis of [outer][reduce][inner] codes: acc = sum of the
 * codes - x_zero_point * reduce, y = clamp(MultiplyByQuantizedMultiplier(acc, mult, shift) +
 * zero point, 0, 255), with (mult, shift) TFLite's multiplier already divided by the count. */
typedef struct mlcc_qmean_params {
    int64_t outer, reduce, inner;
    int32_t x_zero_point, y_zero_point;
    int32_t mult, shift;
} mlcc_qmean_params;

void mlcc_u8_mean(const mlcc_qmean_params *p, const uint8_t *x, uint8_t *y);

/* TFLite's int8 AVERAGE_POOL_2D on codes: per window, s = sum of the int8 values (code - 128)
 * of the taps inside the input, n their count, avg = s > 0 ? (s + n / 2) / n : (s - n / 2) / n
 * (C division: half away from zero), clamped to [qmin, qmax] (codes: the fused activation). */
typedef struct mlcc_qavgpool_tflite_params {
    mlcc_qpool2d_params pool;
    int32_t qmin, qmax;
} mlcc_qavgpool_tflite_params;

void mlcc_u8_avgpool2d__tflite(const mlcc_qavgpool_tflite_params *p, const uint8_t *x,
                               uint8_t *y);

#endif /* MLCC_QELEM_H */
