/* Integer (int8) kernels: u8 x s8 -> s32 matrix products with a requantizing epilogue.
 *
 * Arithmetic (the Python side, mlcc/quant/scheme.py, holds numpy models of it that tests
 * compare bit for bit):
 *   acc[i][j] = bias[ch] + sum_k A[i][k] * B[k][j]                 (exact, int32)
 * where ch is the output channel: the row i (convolutions: rows are output channels) or the
 * column j (Gemm: columns are output features). The zero point of the uint8 operand is already
 * folded into bias by the compiler (bias[ch] -= zx * sum_k w[ch][k]), so the product needs no
 * subtraction. The epilogue then writes one of
 *   MLCC_QOUT_U8, requant MLCC_REQUANT_FLOAT (onnxruntime's QLinearConv arithmetic):
 *       y = (uint8) (rint_even(min(max((float) acc * scale[ch], qmin - zp), qmax - zp)) + zp)
 *   MLCC_QOUT_U8, requant MLCC_REQUANT_FIXED (gemmlowp, integer only):
 *       y = clamp(rdbpot(srdhm(acc << max(shift, 0), mult[ch]), max(-shift, 0)) + zp, qmin, qmax)
 *   MLCC_QOUT_F32 (a float consumer, or an activation without an integer form):
 *       y = act((float) acc * scale[ch] + fbias[ch])
 *   MLCC_QOUT_S32 (ONNX ConvInteger / MatMulInteger): y = acc (int32)
 * qmin/qmax hold the fused Relu/Clip as a clamp in the quantized domain.
 *
 * Packed layout of the "vector" operand (B): [ceil(K / 4)][N][4]: for each group of 4 k, the
 * 4 bytes of column j are adjacent (what VNNI vpdpbusd and arm sdot consume). K is padded to a
 * multiple of 4 with zeros (in both operands).
 *
 * Thread-compatible: no state. */
#ifndef MLCC_QGEMM_H
#define MLCC_QGEMM_H

#include "mlcc_kernel.h"

/* gemmlowp's SaturatingRoundingDoublingHighMul: (ab + nudge) / 2^31 rounded toward zero,
 * nudge 2^30 for ab >= 0 and 1 - 2^30 below, which is floor((ab + 2^30) / 2^31) for every ab
 * (for ab < 0: trunc(v / 2^31) = floor((v + 2^31 - 1) / 2^31) with v = ab + 1 - 2^30 < 0):
 * one arithmetic shift, not a 64-bit division (a long multiply, add and shift on 32-bit
 * cores, where the requantization had cost as much as the products). */
static inline int32_t mlcc_srdhm(int32_t a, int32_t b) {
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    return (int32_t)(((int64_t)a * (int64_t)b + ((int64_t)1 << 30)) >> 31);
}

/* gemmlowp's RoundingDivideByPOT (round half away from zero). */
static inline int32_t mlcc_rdbpot(int32_t x, int32_t e) {
    const int32_t mask = (int32_t)(((int64_t)1 << e) - 1);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (remainder > threshold ? 1 : 0);
}

/* TFLite's MultiplyByQuantizedMultiplier (the fixed requantization of qgemm.h, also the
 * int8 element-wise kernels' of qelem.c). */
static inline int32_t mlcc_mbqm(int32_t acc, int32_t mult, int32_t shift) {
    if (shift > 0) {        /* a left shift first, saturated (multipliers of 1 and more) */
        int64_t v = (int64_t)acc * ((int64_t)1 << shift);
        if (v > INT32_MAX) v = INT32_MAX;
        if (v < INT32_MIN) v = INT32_MIN;
        acc = (int32_t)v;
    }
    return mlcc_rdbpot(mlcc_srdhm(acc, mult), shift < 0 ? -shift : 0);
}

/* mlcc_mbqm with one channel's constants prepared once (mlcc_mbqm_prep), for the loops that
 * requantize many values of a channel: where the multiplier is not negative and the shift is
 * a right shift e in [1, 31] (every TFLite convolution's), both roundings in one 64-bit sum,
 *   X = acc * mult + 2^30 + 2^(30+e) - [acc < 0] * 2^31,   result = (X >> 32) >> (e - 1)
 * (|X| < 2^63; on a 32-bit core: the constant's two words, one SMLAL and a shift of the high
 * word). Why it is exact: mlcc_srdhm is s = floor((acc * mult + 2^30) / 2^31) and
 * mlcc_rdbpot(s, e) = floor((s + 2^(e-1) - [s < 0]) / 2^e) (round half away from zero), and
 * nested floors of divisions compose, so the result is floor((acc * mult + 2^30 + 2^(30+e) -
 * [s < 0] * 2^31) / 2^(31+e)); [s < 0] may be replaced by [acc < 0] (mult >= 0: they differ
 * only where -2^30 <= acc * mult < 0, s = 0, and there both give 0 for e >= 1). Tests
 * compare it with TFLite's arithmetic on ties and extremes (tests/test_quant_kernels.py).
 * With shift 0 and mult >= 0, mlcc_srdhm alone (no INT32_MIN x INT32_MIN case); other cases:
 * mlcc_mbqm itself. */
typedef struct mlcc_mbqm_c {
    int64_t round;             /* 2^30 + 2^(30+e) */
    int32_t mult, shift, e1;
    int32_t fast;              /* 1: the form above; 2: shift 0, mult >= 0; 0: mlcc_mbqm */
} mlcc_mbqm_c;

static inline mlcc_mbqm_c mlcc_mbqm_prep(int32_t mult, int32_t shift) {
    mlcc_mbqm_c c;
    c.mult = mult;
    c.shift = shift;
    c.fast = mult >= 0 && shift <= -1 && shift >= -31 ? 1 : (mult >= 0 && shift == 0 ? 2 : 0);
    c.e1 = c.fast == 1 ? -shift - 1 : 0;
    c.round = c.fast == 1 ? ((int64_t)1 << 30) + ((int64_t)1 << (30 - shift)) : 0;
    return c;
}

static inline int32_t mlcc_mbqm_apply(int32_t acc, const mlcc_mbqm_c *c) {
    if (c->fast == 1) {
        const int64_t x = (int64_t)acc * c->mult + c->round -
                          (int64_t)((uint32_t)acc & 0x80000000u);
        return (int32_t)(x >> 32) >> c->e1;
    }
    if (c->fast == 2)       /* shift 0 (TFLite ADD's larger input): mlcc_srdhm alone */
        return (int32_t)(((int64_t)acc * c->mult + ((int64_t)1 << 30)) >> 31);
    return mlcc_mbqm(acc, c->mult, c->shift);
}

/* One value (an accumulator plus its bias) to a uint8 code: the float requantization (lo,
 * hi: qmin - zp and qmax - zp as floats; rounded half to even by the magic-number add) and
 * the fixed one, of qgemm.h's epilogue (mlcc_requant_run, and kernels that requantize in
 * registers). */
static inline uint8_t mlcc_requant_float_one(int32_t v, float s, float lo, float hi,
                                             int32_t zp) {
    const float magic = 12582912.0f;
    float f = (float)v * s;
    f = f < lo ? lo : f;
    f = f > hi ? hi : f;
    f = (f + magic) - magic;
    return (uint8_t)((int32_t)f + zp);
}

static inline uint8_t mlcc_requant_fixed_one(int32_t v, const mlcc_mbqm_c *c, int32_t zp,
                                             int32_t qmin, int32_t qmax) {
    v = mlcc_mbqm_apply(v, c) + zp;
    return (uint8_t)(v < qmin ? qmin : (v > qmax ? qmax : v));
}

/* One channel's uint8 requantization, its constants gathered once (mlcc_rq1_prep), for the
 * kernels that requantize sums where they are (the SMLAD GEMM and depthwise convolution). */
typedef struct mlcc_rq1 {
    int32_t bias, zp, qmin, qmax, fixed;
    int32_t fast;              /* fixed, with mlcc_mbqm_apply's one-sum form: mlcc_rq1_fast */
    int32_t full;              /* qmin 0, qmax 255: the clamp is one USAT on these cores */
    mlcc_mbqm_c m;
    float scale, lo, hi;
} mlcc_rq1;

/* Cores with the DSP extension (Cortex-M4, M7, M55): SMLAD, two 16-bit multiply-accumulates
 * in one instruction, in qgemm.c's GEMM and qconv.c's depthwise convolution (-DMLCC_NO_SMLAD:
 * the portable loops, for comparison). */
#if defined(__ARM_FEATURE_DSP) && defined(__ARM_FEATURE_SIMD32) && !defined(MLCC_NO_SMLAD)
#include <arm_acle.h>
#define MLCC_SMLAD 1
/* Bytes 0 and 2 (even) or 1 and 3 (odd) of a word into 16-bit lanes, sign- or
 * zero-extended: SXTB16/UXTB16, with their free rotation for the odd bytes (GCC 12 does not
 * fold a rotate into __sxtb16). */
static inline int16x2_t mlcc_sxtb16_even(uint32_t x) { return __sxtb16((int32_t)x); }
static inline int16x2_t mlcc_uxtb16_even(uint32_t x) { return __uxtb16((int32_t)x); }

static inline int16x2_t mlcc_sxtb16_odd(uint32_t x) {
    int16x2_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}

static inline int16x2_t mlcc_uxtb16_odd(uint32_t x) {
    int16x2_t r;
    __asm__("uxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}
#else
#define MLCC_SMLAD 0
#endif

/* 4 bytes as one word, at any alignment (the SMLAD paths' loads). */
static inline uint32_t mlcc_load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

enum mlcc_qout_kind { MLCC_QOUT_U8 = 0, MLCC_QOUT_F32 = 1, MLCC_QOUT_S32 = 2 };
enum mlcc_requant_mode { MLCC_REQUANT_FLOAT = 0, MLCC_REQUANT_FIXED = 1 };

typedef struct mlcc_requant {
    int32_t out_kind;          /* mlcc_qout_kind */
    int32_t mode;              /* mlcc_requant_mode */
    int32_t zero_point;        /* of the uint8 output */
    int32_t qmin, qmax;        /* clamp of the uint8 output (fused Relu/Clip) */
    mlcc_act act;              /* MLCC_QOUT_F32 only */
} mlcc_requant;

/* Per-channel constants of the epilogue (arrays in the weight blob; unused ones may be NULL):
 * bias (int32, always), scale (float: MLCC_REQUANT_FLOAT or MLCC_QOUT_F32), fbias (float,
 * MLCC_QOUT_F32), mult and shift (int32, MLCC_REQUANT_FIXED). */
typedef struct mlcc_qchannels {
    const int32_t *bias;
    const float *scale;
    const float *fbias;
    const int32_t *mult;
    const int32_t *shift;
} mlcc_qchannels;

/* rq->out_kind must be MLCC_QOUT_U8. */
static inline mlcc_rq1 mlcc_rq1_prep(const mlcc_requant *rq, const mlcc_qchannels *ch,
                                     int64_t c) {
    mlcc_rq1 q;
    q.bias = ch->bias[c];
    q.zp = rq->zero_point;
    q.qmin = rq->qmin;
    q.qmax = rq->qmax;
    q.fixed = rq->mode == MLCC_REQUANT_FIXED;
    q.m = mlcc_mbqm_prep(q.fixed ? ch->mult[c] : 0, q.fixed ? ch->shift[c] : 0);
    q.fast = q.fixed && q.m.fast == 1;
    q.full = q.qmin == 0 && q.qmax == 255;
    q.scale = q.fixed ? 0.0f : ch->scale[c];
    q.lo = (float)(q.qmin - q.zp);
    q.hi = (float)(q.qmax - q.zp);
    return q;
}

/* mlcc_rq1_apply where q->fast: no branch but the clamp's, and with full (q->full, a
 * constant where this is inlined) the clamp to [0, 255], one USAT on cores with the DSP
 * extension (the inner loops of the SMLAD kernels test both once, outside) */
static inline uint8_t mlcc_rq1_fast(const mlcc_rq1 *q, int32_t acc, const int full) {
    const int32_t v = acc + q->bias;
    const int64_t x = (int64_t)v * q->m.mult + q->m.round - (int64_t)((uint32_t)v & 0x80000000u);
    const int32_t r = ((int32_t)(x >> 32) >> q->m.e1) + q->zp;
#if MLCC_SMLAD && defined(__ARM_FEATURE_SAT)
    if (full) return (uint8_t)__usat(r, 8);
#endif
    if (full) return (uint8_t)(r < 0 ? 0 : (r > 255 ? 255 : r));
    return (uint8_t)(r < q->qmin ? q->qmin : (r > q->qmax ? q->qmax : r));
}

static inline uint8_t mlcc_rq1_apply(const mlcc_rq1 *q, int32_t acc) {
    return q->fixed ? mlcc_requant_fixed_one(acc + q->bias, &q->m, q->zp, q->qmin, q->qmax)
                    : mlcc_requant_float_one(acc + q->bias, q->scale, q->lo, q->hi, q->zp);
}

/* C = epilogue(bias + A B) for an m x n block. k4 = ceil(K / 4).
 * a: the row operand, row i at a + i * lda (4 * k4 bytes used per row);
 * b: the packed column operand ([k4][n][4], see above);
 * y: output, element (i, j) at y + i * ldy + j (uint8_t or float per rq->out_kind);
 * channel_is_row: 1 if the channel index is i (conv), 0 if it is j (Gemm).
 * a_signed: 1 if a is int8 and b uint8 (conv: weights x columns), 0 if a is uint8 and b int8
 * (Gemm: activations x packed weights).
 * n0, ldb: columns [n0, n) only (n0 a multiple of 16; 0 for the whole product), of a b
 * whose rows hold ldb columns (n for the whole product); y and the channel constants are
 * indexed by the same j: threads share a product with few rows by its columns this way. */
typedef struct mlcc_qgemm_desc {
    int64_t m, n, k4;
    int64_t lda, ldy;
    int64_t n0, ldb;
    int32_t channel_is_row;
    int32_t a_signed;
} mlcc_qgemm_desc;

/* The fastest path the compiler flags allow (AVX512-VNNI where __AVX512VNNI__ is defined). */
void mlcc_u8s8_gemm(const mlcc_qgemm_desc *d, const void *a, const void *b,
                    const mlcc_requant *rq, const mlcc_qchannels *ch, void *y);
/* The portable C twin: bit-identical results (tests compare them at tile edges). */
void mlcc_u8s8_gemm__portable(const mlcc_qgemm_desc *d, const void *a, const void *b,
                              const mlcc_requant *rq, const mlcc_qchannels *ch, void *y);

/* Requantizes `count` accumulators of one channel run (shared by the integer kernels). */
void mlcc_requant_run(const mlcc_requant *rq, const mlcc_qchannels *ch, int64_t channel,
                      const int32_t *acc, int64_t count, void *y, int64_t y_index);

/* Fully connected layer: y[i][j] = epilogue(sum_k x[i][k] w[j][k]) with the weights packed as
 * [ceil(k / 4)][n][4] int8 by the compiler; x rows are `k` bytes apart but the kernel reads
 * 4 * ceil(k / 4) bytes per row, so x is first copied into scratch with zero padding when k is
 * not a multiple of 4 (scratch: m * 4 * ceil(k / 4) bytes, else NULL). */
typedef struct mlcc_qfc_params {
    int64_t m, n, k;
    mlcc_requant rq;
} mlcc_qfc_params;

void mlcc_u8_fc(const mlcc_qfc_params *p, const uint8_t *x, const int8_t *w_packed,
                const int32_t *bias, const float *scale, const float *fbias,
                const int32_t *mult, const int32_t *shift, void *y, uint8_t *scratch,
                mlcc_threadpool *pool);

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
/* The float requantization to uint8 (mlcc_requant_run's arithmetic, the same operations in
 * the same order up to the rounding, done by the conversion: the same bits) of one row of a tile, in registers: per-row constants
 * (conv: the channel is the row) or per-column ones (Gemm). Shared by qgemm.c and qconv.c
 * (AVX-512 F, BW and VL: the masked byte store). */
/* Its per-layer constants, set up once where a loop would reload them (the output may alias
 * the requant parameters for the compiler): mlcc_rq16_prep, then mlcc_u8_store_rq16. */
typedef struct mlcc_rq16 {
    __m512 lo, hi;
    __m512i zp;
} mlcc_rq16;

static inline mlcc_rq16 mlcc_rq16_prep(const mlcc_requant *rq) {
    mlcc_rq16 k;
    k.lo = _mm512_set1_ps((float)(rq->qmin - rq->zero_point));
    k.hi = _mm512_set1_ps((float)(rq->qmax - rq->zero_point));
    k.zp = _mm512_set1_epi32(rq->zero_point);
    return k;
}

static inline void mlcc_u8_store_rq16(__m512i c, __m512i bias, __m512 scale,
                                      const mlcc_rq16 *k, __mmask16 mask, uint8_t *out) {
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(c, bias)), scale);
    f = _mm512_max_ps(f, k->lo);
    f = _mm512_min_ps(f, k->hi);
    /* rounded half to even by the conversion itself (the portable loop's (f + magic) -
     * magic, in one instruction: f is clamped to [-255, 255], an exact integer either way) */
    _mm_mask_storeu_epi8(out, mask, _mm512_cvtepi32_epi8(
        _mm512_add_epi32(_mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT |
                                                         _MM_FROUND_NO_EXC), k->zp)));
}

static inline void mlcc_u8_store_requant16(__m512i c, __m512i bias, __m512 scale,
                                           const mlcc_requant *rq, __mmask16 mask,
                                           uint8_t *out) {
    const mlcc_rq16 k = mlcc_rq16_prep(rq);
    mlcc_u8_store_rq16(c, bias, scale, &k, mask, out);
}
#endif

#endif /* MLCC_QGEMM_H */
