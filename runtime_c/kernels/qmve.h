/* Helium (MVE, the M-profile vector extension of Armv8.1-M: Cortex-M55, M85) inner loops of the
 * int8 kernels: the u8 x s8 GEMM of the convolutions and fully connected layers (qgemm.c) and
 * the depthwise convolution (qconv.c), with their requantizing epilogues in vector registers.
 * Written here with arm_mve.h intrinsics; selected by __ARM_FEATURE_MVE (set by
 * -mcpu=cortex-m55), off with -DMLCC_NO_MVE (then the M55 runs the SMLAD paths of the M4).
 *
 * Every sum is an exact integer (int32, wrapping only where the portable kernels' int32 would)
 * and every requantization step is the portable one's in vector form, so the outputs are the
 * portable kernels' bit for bit (tests/test_cortex_m.py compares them with the x86 build on odd
 * shapes; the MLPerf Tiny models with TensorFlow Lite Micro).
 *
 * GEMM. VMLADAVA multiplies 16 int8 lanes of two vectors and adds the 16 products to a scalar
 * int32 sum: a dot product along k, which wants both operands contiguous in k. The row operand
 * is (rows of 4 * k4 bytes); the packed column operand ([k4][n][4], qgemm.h) is not, so each
 * block of 4 columns is transposed once (VST4 interleaves 4 vectors of 4 columns' words) into
 * a stack buffer of 16-byte k chunks, [k / 16][4 columns][16], and every row of the block then
 * reads it: per 16 k, a convolution's two weight rows at a time take two row loads, four
 * column loads and eight VMLADAVA (mlcc_mve_dot2_s8), a Gemm's row one, four and four. The
 * im2col packing itself interleaves 16 pixels of 4 taps a VST4 (mlcc_mve_interleave4).
 * VMLADAVA takes both operands signed or both unsigned: the column operand's bytes are
 * flipped at the transpose (bit 7: u8 b becomes the s8 b - 128, s8 b the u8 b + 128), and
 * 128 times the row's sum is added back (conv: s8 weights x u8 columns) or taken off (Gemm:
 * u8 activations x s8 weights). Every load past the end of an operand (the k tail of a row,
 * the last columns) is predicated (VCTP): inactive lanes read nothing and give zero.
 *
 * Requantization, 4 lanes at a time: the fixed mode (gemmlowp) as gemmlowp's own NEON code
 * does it, VQSHL (the saturating left shift: the portable clamp), VQRDMULH (exactly
 * SaturatingRoundingDoublingHighMul: (2ab + 2^31) >> 32 is its nudge-and-truncate for either
 * sign), then RoundingDivideByPOT as x - 1 for negative x (VQADD) before VRSHL's rounding
 * right shift (half up), which is half away from zero; the float mode in MVE float (int to
 * float, multiply, clamp, VCVTN: round half to even as the portable magic-number add). */
#ifndef MLCC_QMVE_H
#define MLCC_QMVE_H

#include "qgemm.h"

#if defined(__ARM_FEATURE_MVE) && !defined(MLCC_NO_MVE)
#include <arm_mve.h>
#define MLCC_QMVE 1
#else
#define MLCC_QMVE 0
#endif

#if MLCC_QMVE
#define MLCC_MVE_KC 512      /* k bytes of a transposed column block (4 columns: 2 KiB of stack) */
#define MLCC_MVE_RB 32       /* rows per block: their sums and accumulators on the stack */

/* nr (0 to 4, more counts as 4) active 32-bit lanes. */
static inline mve_pred16_t mlcc_mve_lanes(ptrdiff_t nr) {
    return vctp32q((uint32_t)(nr < 0 ? 0 : (nr > 4 ? 4 : nr)));
}

/* gemmlowp's fixed requantization (qgemm.c fixed_requant) of 4 lanes. */
static inline int32x4_t mlcc_mve_fixed(int32x4_t v, int32x4_t mult, int32x4_t shift) {
    const int32x4_t zero = vdupq_n_s32(0);
    const int32x4_t right = vminq_s32(shift, zero);      /* -e of RoundingDivideByPOT */
    v = vqshlq_s32(v, vmaxq_s32(shift, zero));
    v = vqrdmulhq_s32(v, mult);
    v = vqaddq_s32(v, vshrq_n_s32(vandq_s32(v, right), 31));   /* -1 where v < 0 and e > 0 */
    return vrshlq_s32(v, right);
}

/* The epilogue (qgemm.c mlcc_requant_run / requant_cols) of 4 accumulators, its constants
 * loaded once into vectors: one channel c for all lanes, or (per_lane) channels c .. c + 3
 * (the first nr of them). uint8 with either requantization and int32 in registers; float
 * outputs (and the float requantization without MVE float) through mlcc_requant_run. */
enum { MLCC_MVE_FIXED, MLCC_MVE_FLOAT, MLCC_MVE_S32, MLCC_MVE_SCALAR };

typedef struct mlcc_mve_epi {
    int kind, per_lane;
    ptrdiff_t c;
    int32x4_t bias, mult, shift, zp, lo, hi;
#if (__ARM_FEATURE_MVE & 2)
    float32x4_t scale, flo, fhi;
#endif
} mlcc_mve_epi;

static inline void mlcc_mve_epi_init(mlcc_mve_epi *e, const mlcc_requant *rq,
                                     const mlcc_qchannels *ch, ptrdiff_t c, int per_lane,
                                     ptrdiff_t nr) {
    const mve_pred16_t p = mlcc_mve_lanes(nr);
    e->c = c;
    e->per_lane = per_lane;
    e->kind = rq->out_kind == MLCC_QOUT_S32 ? MLCC_MVE_S32
            : rq->out_kind != MLCC_QOUT_U8 ? MLCC_MVE_SCALAR
            : rq->mode == MLCC_REQUANT_FIXED ? MLCC_MVE_FIXED
#if (__ARM_FEATURE_MVE & 2)
            : MLCC_MVE_FLOAT;
#else
            : MLCC_MVE_SCALAR;
#endif
    e->bias = per_lane ? vldrwq_z_s32(ch->bias + c, p) : vdupq_n_s32(ch->bias[c]);
    e->zp = vdupq_n_s32(rq->zero_point);
    e->lo = vdupq_n_s32(rq->qmin);
    e->hi = vdupq_n_s32(rq->qmax);
    e->mult = e->shift = vdupq_n_s32(0);
    if (e->kind == MLCC_MVE_FIXED) {
        e->mult = per_lane ? vldrwq_z_s32(ch->mult + c, p) : vdupq_n_s32(ch->mult[c]);
        e->shift = per_lane ? vldrwq_z_s32(ch->shift + c, p) : vdupq_n_s32(ch->shift[c]);
    }
#if (__ARM_FEATURE_MVE & 2)
    e->scale = e->flo = e->fhi = vdupq_n_f32(0.0f);
    if (e->kind == MLCC_MVE_FLOAT) {
        e->scale = per_lane ? vldrwq_z_f32(ch->scale + c, p) : vdupq_n_f32(ch->scale[c]);
        e->flo = vdupq_n_f32((float)(rq->qmin - rq->zero_point));
        e->fhi = vdupq_n_f32((float)(rq->qmax - rq->zero_point));
    }
#endif
}

/* The first nr lanes of acc through the epilogue, to elements at .. at + nr - 1 of y. */
static inline void mlcc_mve_epi_store(const mlcc_mve_epi *e, const mlcc_requant *rq,
                                      const mlcc_qchannels *ch, int32x4_t acc, ptrdiff_t nr,
                                      void *y, ptrdiff_t at) {
    const mve_pred16_t p = mlcc_mve_lanes(nr);
    int32x4_t v = vaddq_s32(acc, e->bias);
    switch (e->kind) {
    case MLCC_MVE_FIXED:
        v = vaddq_s32(mlcc_mve_fixed(v, e->mult, e->shift), e->zp);
        vstrbq_p_s32((int8_t *)y + at, vminq_s32(vmaxq_s32(v, e->lo), e->hi), p);
        return;
#if (__ARM_FEATURE_MVE & 2)
    case MLCC_MVE_FLOAT: {
        float32x4_t f = vmulq_f32(vcvtq_f32_s32(v), e->scale);
        f = vminnmq_f32(vmaxnmq_f32(f, e->flo), e->fhi);
        vstrbq_p_s32((int8_t *)y + at, vaddq_s32(vcvtnq_s32_f32(f), e->zp), p);
        return;
    }
#endif
    case MLCC_MVE_S32:
        vstrwq_p_s32((int32_t *)y + at, v, p);
        return;
    default: {
        int32_t t[4];
        ptrdiff_t j;
        vst1q_s32(t, acc);
        if (!e->per_lane) {
            mlcc_requant_run(rq, ch, e->c, t, nr, y, at);
            return;
        }
        for (j = 0; j < nr; j++) mlcc_requant_run(rq, ch, e->c + j, t + j, 1, y, at + j);
    }
    }
}

/* Columns j0 .. j0 + nr - 1 (nr <= 4) of the packed operand b ([k4][n][4]), k groups
 * g0 .. g0 + gn - 1, into bt as [ceil(gn / 4)][4 columns][16 bytes] with bit 7 of every byte
 * flipped; groups past gn (up to the next 4) are zero, columns past nr zero before the flip. */
static inline void mlcc_mve_transpose(const uint8_t *b, ptrdiff_t n, ptrdiff_t j0, ptrdiff_t nr,
                                      ptrdiff_t g0, ptrdiff_t gn, uint32_t *bt) {
    const mve_pred16_t p = vctp8q((uint32_t)(4 * nr));
    const uint8x16_t flip = vdupq_n_u8(0x80);
    const uint8_t *src = b + (g0 * n + j0) * 4;
    const ptrdiff_t step = 4 * n;
    ptrdiff_t g;
    for (g = 0; g + 4 <= gn; g += 4, bt += 16, src += 4 * step) {
        uint32x4x4_t v;
        v.val[0] = vreinterpretq_u32_u8(veorq_u8(vldrbq_z_u8(src, p), flip));
        v.val[1] = vreinterpretq_u32_u8(veorq_u8(vldrbq_z_u8(src + step, p), flip));
        v.val[2] = vreinterpretq_u32_u8(veorq_u8(vldrbq_z_u8(src + 2 * step, p), flip));
        v.val[3] = vreinterpretq_u32_u8(veorq_u8(vldrbq_z_u8(src + 3 * step, p), flip));
        vst4q_u32(bt, v);
    }
    if (g < gn) {
        uint32x4x4_t v;
        int t;
        for (t = 0; t < 4; t++)
            v.val[t] = vreinterpretq_u32_u8(g + t < gn ? veorq_u8(vldrbq_z_u8(src + t * step, p),
                                                                  flip)
                                                       : vdupq_n_u8(0));
        vst4q_u32(bt, v);
    }
}

/* Two rows' dot products (s8) with the same 4 transposed columns: 8 sums, per 16 k two row
 * loads, four column loads and eight VMLADAVA (against 10 loads a row at a time). The k loop
 * in assembly: VMLADAVA writes even registers only, so the 8 sums take all of them (r0 to
 * r12 and lr; the loop counts in an odd one with SUBS and BNE, not LE, which needs lr), the
 * pointers odd ones; GCC 12 spilled two sums from C (24 instructions per 16 k, not 16).
 * The k tail (predicated loads) in C. */
static inline void mlcc_mve_dot2_s8(const int8_t *a0, const int8_t *a1, const int8_t *bt,
                                    ptrdiff_t kn, int32x4_t *o0, int32x4_t *o1) {
    register int32_t s00 __asm__("r0") = 0;
    register int32_t s01 __asm__("r2") = 0;
    register int32_t s02 __asm__("r4") = 0;
    register int32_t s03 __asm__("r6") = 0;
    register int32_t s10 __asm__("r8") = 0;
    register int32_t s11 __asm__("r10") = 0;
    register int32_t s12 __asm__("r12") = 0;
    register int32_t s13 __asm__("lr") = 0;
    register const int8_t *pa0 __asm__("r1") = a0;
    register const int8_t *pa1 __asm__("r3") = a1;
    register const int8_t *pb __asm__("r5") = bt;
    register ptrdiff_t cnt __asm__("r9") = kn / 16;
    if (cnt != 0)
        __asm__ volatile(
            "1:\n\t"
            "vldrb.8 q0, [%[pa0]], #16\n\t"
            "vldrb.8 q1, [%[pa1]], #16\n\t"
            "vldrb.8 q2, [%[pb]], #16\n\t"
            "vmladava.s8 %[s00], q0, q2\n\t"
            "vmladava.s8 %[s10], q1, q2\n\t"
            "vldrb.8 q2, [%[pb]], #16\n\t"
            "vmladava.s8 %[s01], q0, q2\n\t"
            "vmladava.s8 %[s11], q1, q2\n\t"
            "vldrb.8 q2, [%[pb]], #16\n\t"
            "vmladava.s8 %[s02], q0, q2\n\t"
            "vmladava.s8 %[s12], q1, q2\n\t"
            "vldrb.8 q2, [%[pb]], #16\n\t"
            "vmladava.s8 %[s03], q0, q2\n\t"
            "vmladava.s8 %[s13], q1, q2\n\t"
            "subs %[cnt], %[cnt], #1\n\t"
            "bne 1b\n\t"
            : [s00] "+r"(s00), [s01] "+r"(s01), [s02] "+r"(s02), [s03] "+r"(s03),
              [s10] "+r"(s10), [s11] "+r"(s11), [s12] "+r"(s12), [s13] "+r"(s13),
              [pa0] "+r"(pa0), [pa1] "+r"(pa1), [pb] "+r"(pb), [cnt] "+r"(cnt)
            :
            : "q0", "q1", "q2", "cc", "memory");
    if (kn % 16 != 0) {
        const mve_pred16_t p = vctp8q((uint32_t)(kn % 16));
        const int8x16_t x0 = vldrbq_z_s8(pa0, p), x1 = vldrbq_z_s8(pa1, p);
        int8x16_t b = vldrbq_s8(pb);
        s00 = vmladavaq_s8(s00, x0, b); s10 = vmladavaq_s8(s10, x1, b);
        b = vldrbq_s8(pb + 16);
        s01 = vmladavaq_s8(s01, x0, b); s11 = vmladavaq_s8(s11, x1, b);
        b = vldrbq_s8(pb + 32);
        s02 = vmladavaq_s8(s02, x0, b); s12 = vmladavaq_s8(s12, x1, b);
        b = vldrbq_s8(pb + 48);
        s03 = vmladavaq_s8(s03, x0, b); s13 = vmladavaq_s8(s13, x1, b);
    }
    *o0 = vsetq_lane_s32(s03, vsetq_lane_s32(s02, vsetq_lane_s32(s01, vdupq_n_s32(s00), 1), 2),
                         3);
    *o1 = vsetq_lane_s32(s13, vsetq_lane_s32(s12, vsetq_lane_s32(s11, vdupq_n_s32(s10), 1), 2),
                         3);
}

/* The sum of the kn bytes of a row, signed or not (as uint32: it wraps as int32 would). */
static inline uint32_t mlcc_mve_row_sum(const uint8_t *a, ptrdiff_t kn, int is_signed) {
    uint32_t s = 0;
    ptrdiff_t k;
    if (is_signed) {
        const int8_t *x = (const int8_t *)a;
        for (k = 0; k + 16 <= kn; k += 16) s = (uint32_t)vaddvaq_s8((int32_t)s, vldrbq_s8(x + k));
        if (k < kn) {
            const mve_pred16_t p = vctp8q((uint32_t)(kn - k));
            s = (uint32_t)vaddvaq_p_s8((int32_t)s, vldrbq_z_s8(x + k, p), p);
        }
        return s;
    }
    for (k = 0; k + 16 <= kn; k += 16) s = vaddvaq_u8(s, vldrbq_u8(a + k));
    if (k < kn) {
        const mve_pred16_t p = vctp8q((uint32_t)(kn - k));
        s = vaddvaq_p_u8(s, vldrbq_z_u8(a + k, p), p);
    }
    return s;
}

/* Four dot products of kn bytes (a multiple of 4): row a with the 4 transposed columns of bt;
 * per 16 k one row load, four column loads, four VMLADAVA (a last odd row, and a fully
 * connected layer's single row). Lanes of a past kn are predicated off (zero): bt's bytes
 * there do not count. */
#define MLCC_MVE_DOT(NAME, T, VT, S, LD, LDZ, MLA)                                          \
    static inline int32x4_t NAME(const T *a, const T *bt, ptrdiff_t kn) {                   \
        S s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                   \
        ptrdiff_t c;                                                                        \
        for (c = kn / 16; c != 0; c--, a += 16, bt += 64) {                                 \
            const VT x = LD(a);                                                             \
            s0 = MLA(s0, x, LD(bt));                                                        \
            s1 = MLA(s1, x, LD(bt + 16));                                                   \
            s2 = MLA(s2, x, LD(bt + 32));                                                   \
            s3 = MLA(s3, x, LD(bt + 48));                                                   \
        }                                                                                   \
        if (kn % 16 != 0) {                                                                 \
            const VT x = LDZ(a, vctp8q((uint32_t)(kn % 16)));                               \
            s0 = MLA(s0, x, LD(bt));                                                        \
            s1 = MLA(s1, x, LD(bt + 16));                                                   \
            s2 = MLA(s2, x, LD(bt + 32));                                                   \
            s3 = MLA(s3, x, LD(bt + 48));                                                   \
        }                                                                                   \
        return vsetq_lane_s32((int32_t)s3, vsetq_lane_s32((int32_t)s2, vsetq_lane_s32(      \
            (int32_t)s1, vdupq_n_s32((int32_t)s0), 1), 2), 3);                              \
    }
MLCC_MVE_DOT(mlcc_mve_dot_s8, int8_t, int8x16_t, int32_t, vldrbq_s8, vldrbq_z_s8, vmladavaq_s8)
MLCC_MVE_DOT(mlcc_mve_dot_u8, uint8_t, uint8x16_t, uint32_t, vldrbq_u8, vldrbq_z_u8,
             vmladavaq_u8)
#undef MLCC_MVE_DOT

/* The scalar constants of output channel c for mlcc_mve_row_store, gathered once: add (the
 * flip's correction) and the bias together, the multiplier, shift and scale. */
typedef struct mlcc_mve_rowq {
    ptrdiff_t c;
    int32_t add, bias, mult, shift;
    float scale;
} mlcc_mve_rowq;

static inline mlcc_mve_rowq mlcc_mve_rowq_of(const mlcc_qchannels *ch, ptrdiff_t c,
                                             int32_t add) {
    mlcc_mve_rowq q;
    q.c = c;
    q.add = add;
    q.bias = (int32_t)((uint32_t)add + (uint32_t)ch->bias[c]);
    q.mult = ch->mult ? ch->mult[c] : 0;
    q.shift = ch->shift ? ch->shift[c] : 0;
    q.scale = ch->scale ? ch->scale[c] : 0.0f;
    return q;
}

/* The epilogue of one output channel (a convolution's row, a depthwise plane: its constants
 * are scalars, which the vector instructions take from core registers, VQRDMULH and VRSHL by
 * a scalar: nothing gathered per block) on 4 sums, the first nr to elements at .. at + nr - 1
 * of y; the arithmetic of mlcc_mve_epi_store. */
static inline void mlcc_mve_row_store(const mlcc_mve_epi *e, const mlcc_requant *rq,
                                      const mlcc_qchannels *ch, const mlcc_mve_rowq *q,
                                      int32x4_t acc, ptrdiff_t nr, void *y, ptrdiff_t at) {
    const mve_pred16_t p = mlcc_mve_lanes(nr);
    switch (e->kind) {
    case MLCC_MVE_FIXED: {
        int32x4_t v = vaddq_n_s32(acc, q->bias);
        if (q->shift > 0) v = vqshlq_r_s32(v, q->shift);
        v = vqrdmulhq_n_s32(v, q->mult);
        if (q->shift < 0) v = vrshlq_n_s32(vqaddq_s32(v, vshrq_n_s32(v, 31)), q->shift);
        v = vaddq_s32(v, e->zp);
        vstrbq_p_s32((int8_t *)y + at, vminq_s32(vmaxq_s32(v, e->lo), e->hi), p);
        return;
    }
#if (__ARM_FEATURE_MVE & 2)
    case MLCC_MVE_FLOAT: {
        float32x4_t f = vmulq_n_f32(vcvtq_f32_s32(vaddq_n_s32(acc, q->bias)), q->scale);
        f = vminnmq_f32(vmaxnmq_f32(f, e->flo), e->fhi);
        vstrbq_p_s32((int8_t *)y + at, vaddq_s32(vcvtnq_s32_f32(f), e->zp), p);
        return;
    }
#endif
    case MLCC_MVE_S32:
        vstrwq_p_s32((int32_t *)y + at, vaddq_n_s32(acc, q->bias), p);
        return;
    default: {
        int32_t t[4];
        vst1q_s32(t, vaddq_n_s32(acc, q->add));
        mlcc_requant_run(rq, ch, q->c, t, nr, y, at);
    }
    }
}

/* mlcc_mve_row_store for the fixed requantization with a right shift (TFLite's: shift < 0)
 * and the lanes' predicate given: no test left. */
static inline void mlcc_mve_store_fr(const mlcc_mve_epi *e, const mlcc_mve_rowq *q,
                                     int32x4_t acc, mve_pred16_t p, void *y, ptrdiff_t at) {
    int32x4_t v = vqrdmulhq_n_s32(vaddq_n_s32(acc, q->bias), q->mult);
    v = vrshlq_n_s32(vqaddq_s32(v, vshrq_n_s32(v, 31)), q->shift);
    v = vaddq_s32(v, e->zp);
    vstrbq_p_s32((int8_t *)y + at, vminq_s32(vmaxq_s32(v, e->lo), e->hi), p);
}

/* mlcc_u8s8_gemm on Helium (qgemm.h's contract) for a Gemm (the channel is the column: its
 * constants per lane, mlcc_mve_epi_store, gathered once per block of columns): blocks of
 * MLCC_MVE_RB rows, in them blocks of 4 columns, transposed per MLCC_MVE_KC bytes of k (once
 * per block of rows when K fits), then a row at a time (mlcc_mve_dot_u8). The column
 * operand's flip is undone by taking 128 x the row's sum off (it was s8, the row u8). */
static inline void mlcc_mve_qgemm_cols(const mlcc_qgemm_desc *d, const uint8_t *a, const uint8_t *b,
                                  const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
    uint32_t bt[MLCC_MVE_KC];                       /* 4 columns x MLCC_MVE_KC bytes */
    uint32_t rs[MLCC_MVE_RB];
    int32x4_t acc[MLCC_MVE_RB];
    mlcc_mve_epi e;
    const ptrdiff_t m = (ptrdiff_t)d->m, n = (ptrdiff_t)d->n, kp = 4 * (ptrdiff_t)d->k4;
    const ptrdiff_t lda = (ptrdiff_t)d->lda, ldy = (ptrdiff_t)d->ldy;
    const int rows = d->channel_is_row, sa = d->a_signed;
    ptrdiff_t i0, j0, k0, r;
    if (m <= 0 || n <= 0) return;
    /* the constants of row 0 or of columns 0 .. 3; replaced below as the rows or columns go */
    mlcc_mve_epi_init(&e, rq, ch, 0, !rows, rows || n > 4 ? 4 : n);
    for (i0 = 0; i0 < m; i0 += MLCC_MVE_RB) {
        const ptrdiff_t mb = m - i0 < MLCC_MVE_RB ? m - i0 : MLCC_MVE_RB;
        const uint8_t *ab = a + i0 * lda;
        for (r = 0; r < mb; r++) rs[r] = mlcc_mve_row_sum(ab + r * lda, kp, sa) << 7;
        for (j0 = (ptrdiff_t)d->n0; j0 < n; j0 += 4) {
            const ptrdiff_t nr = n - j0 < 4 ? n - j0 : 4;
            for (k0 = 0; k0 < kp; k0 += MLCC_MVE_KC) {
                const ptrdiff_t kn = kp - k0 < MLCC_MVE_KC ? kp - k0 : MLCC_MVE_KC;
                mlcc_mve_transpose(b, (ptrdiff_t)d->ldb, j0, nr, k0 / 4, kn / 4, bt);
                for (r = 0; r < mb; r++) {
                    const uint8_t *ar = ab + r * lda + k0;
                    const int32x4_t t =
                        sa ? mlcc_mve_dot_s8((const int8_t *)ar, (const int8_t *)bt, kn)
                           : mlcc_mve_dot_u8(ar, (const uint8_t *)bt, kn);
                    acc[r] = k0 == 0 ? t : vaddq_s32(acc[r], t);
                }
            }
            if (!rows) mlcc_mve_epi_init(&e, rq, ch, j0, 1, nr);
            for (r = 0; r < mb; r++) {
                /* the flip of the column operand undone: +128 x row sum (it was u8, the row
                 * s8) or -128 x row sum (it was s8, the row u8) */
                const int32x4_t v = sa ? vaddq_s32(acc[r], vdupq_n_s32((int32_t)rs[r]))
                                       : vsubq_s32(acc[r], vdupq_n_s32((int32_t)rs[r]));
                if (rows) mlcc_mve_epi_init(&e, rq, ch, i0 + r, 0, nr);
                mlcc_mve_epi_store(&e, rq, ch, v, nr, y, (i0 + r) * ldy + j0);
            }
        }
    }
}

/* mlcc_u8s8_gemm on Helium for a convolution (the channel is the row; weights s8 x columns
 * u8): as mlcc_mve_qgemm_cols, but the rows two at a time (mlcc_mve_dot2_s8), 128 x the row's
 * sum added back (the columns were u8), and each row's constants gathered once per block of
 * rows (mlcc_mve_rowq): scalars, which VQRDMULH and VRSHL take from core registers. */
static inline void mlcc_mve_qgemm_rows(const mlcc_qgemm_desc *d, const uint8_t *a,
                                       const uint8_t *b, const mlcc_requant *rq,
                                       const mlcc_qchannels *ch, void *y) {
    uint32_t bt[MLCC_MVE_KC];                       /* 4 columns x MLCC_MVE_KC bytes */
    mlcc_mve_rowq rc[MLCC_MVE_RB];                  /* the rows' correction and constants */
    int32x4_t acc[MLCC_MVE_RB];
    mlcc_mve_epi e;
    const ptrdiff_t m = (ptrdiff_t)d->m, n = (ptrdiff_t)d->n, kp = 4 * (ptrdiff_t)d->k4;
    const ptrdiff_t lda = (ptrdiff_t)d->lda, ldy = (ptrdiff_t)d->ldy;
    ptrdiff_t i0, j0, k0, r;
    if (m <= 0 || n <= 0) return;
    /* the kind, the zero point and the clamp */
    mlcc_mve_epi_init(&e, rq, ch, 0, 0, 4);
    for (i0 = 0; i0 < m; i0 += MLCC_MVE_RB) {
        const ptrdiff_t mb = m - i0 < MLCC_MVE_RB ? m - i0 : MLCC_MVE_RB;
        const uint8_t *ab = a + i0 * lda;
        /* every row of the block with TFLite's requantization (right shifts): lean stores */
        int fr = e.kind == MLCC_MVE_FIXED;
        for (r = 0; r < mb; r++) {
            rc[r] = mlcc_mve_rowq_of(ch, i0 + r,
                                     (int32_t)(mlcc_mve_row_sum(ab + r * lda, kp, 1) << 7));
            fr = fr && rc[r].shift < 0;
        }
        for (j0 = (ptrdiff_t)d->n0; j0 < n; j0 += 4) {
            const ptrdiff_t nr = n - j0 < 4 ? n - j0 : 4;
            const mve_pred16_t pn = mlcc_mve_lanes(nr);
            for (k0 = 0; k0 < kp; k0 += MLCC_MVE_KC) {
                const ptrdiff_t kn = kp - k0 < MLCC_MVE_KC ? kp - k0 : MLCC_MVE_KC;
                /* the last block of k: the sums go to the epilogue */
                const int last = k0 + kn == kp;
                mlcc_mve_transpose(b, (ptrdiff_t)d->ldb, j0, nr, k0 / 4, kn / 4, bt);
                for (r = 0; r < mb; r += 2) {
                    const int8_t *ar = (const int8_t *)(ab + r * lda + k0);
                    const ptrdiff_t r1 = r + 1 < mb ? r + 1 : r;  /* a last odd row: alone */
                    uint8_t *y0 = (uint8_t *)y + (i0 + r) * ldy + j0;
                    int32x4_t t0, t1;
                    if (r1 == r)
                        t0 = t1 = mlcc_mve_dot_s8(ar, (const int8_t *)bt, kn);
                    else
                        mlcc_mve_dot2_s8(ar, ar + lda, (const int8_t *)bt, kn, &t0, &t1);
                    if (k0 != 0) {
                        t0 = vaddq_s32(acc[r], t0);
                        t1 = vaddq_s32(acc[r1], t1);
                    }
                    if (!last) {
                        acc[r] = t0;
                        acc[r1] = t1;
                    } else if (fr) {
                        mlcc_mve_store_fr(&e, &rc[r], t0, pn, y0, 0);
                        if (r1 != r) mlcc_mve_store_fr(&e, &rc[r1], t1, pn, y0, ldy);
                    } else {
                        mlcc_mve_row_store(&e, rq, ch, &rc[r], t0, nr, y, (i0 + r) * ldy + j0);
                        if (r1 != r)
                            mlcc_mve_row_store(&e, rq, ch, &rc[r1], t1, nr, y,
                                               (i0 + r1) * ldy + j0);
                    }
                }
            }
        }
    }
}

/* mlcc_u8s8_gemm on Helium. */
static inline void mlcc_mve_qgemm(const mlcc_qgemm_desc *d, const uint8_t *a, const uint8_t *b,
                                  const mlcc_requant *rq, const mlcc_qchannels *ch, void *y) {
    if (d->channel_is_row && d->a_signed)
        mlcc_mve_qgemm_rows(d, a, b, rq, ch, y);
    else
        mlcc_mve_qgemm_cols(d, a, b, rq, ch, y);
}

/* qconv.c interleave4 on Helium, d[4 q + t] = r_t[q * s] for q < n (the im2col packing of 4
 * taps into qgemm.h's [k4][P][4] words): at stride 1, 16 pixels a VST4 (it interleaves the
 * four rows' 16 bytes); the rest, and other strides, 4 pixels at a time as words (widening
 * loads, or gathers of offsets 0, s, 2 s, 3 s, then VSLI puts rows 1 to 3 into bytes 1 to 3),
 * predicated past n: 8 instructions for 4 pixels or 5 for 16, against 24 for 4 with the
 * DSP extension's byte transposes. d is 4-byte aligned (the words' stores). */
static inline void mlcc_mve_interleave4(const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                                        const uint8_t *r3, ptrdiff_t n, ptrdiff_t s,
                                        uint8_t *d) {
    ptrdiff_t q = 0;
    if (s == 1) {
        for (; q + 16 <= n; q += 16) {
            uint8x16x4_t v;
            v.val[0] = vld1q_u8(r0 + q);
            v.val[1] = vld1q_u8(r1 + q);
            v.val[2] = vld1q_u8(r2 + q);
            v.val[3] = vld1q_u8(r3 + q);
            vst4q_u8(d + 4 * q, v);
        }
        for (; q < n; q += 4) {
            const mve_pred16_t p = vctp32q((uint32_t)(n - q));
            uint32x4_t v = vldrbq_z_u32(r0 + q, p);
            v = vsliq_n_u32(v, vldrbq_z_u32(r1 + q, p), 8);
            v = vsliq_n_u32(v, vldrbq_z_u32(r2 + q, p), 16);
            v = vsliq_n_u32(v, vldrbq_z_u32(r3 + q, p), 24);
            vstrwq_p_u32((uint32_t *)(void *)(d + 4 * q), v, p);
        }
        return;
    }
    {
        const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)s);
        for (; q < n; q += 4) {
            const mve_pred16_t p = vctp32q((uint32_t)(n - q));
            const ptrdiff_t at = q * s;
            uint32x4_t v = vldrbq_gather_offset_z_u32(r0 + at, offs, p);
            v = vsliq_n_u32(v, vldrbq_gather_offset_z_u32(r1 + at, offs, p), 8);
            v = vsliq_n_u32(v, vldrbq_gather_offset_z_u32(r2 + at, offs, p), 16);
            v = vsliq_n_u32(v, vldrbq_gather_offset_z_u32(r3 + at, offs, p), 24);
            vstrwq_p_u32((uint32_t *)(void *)(d + 4 * q), v, p);
        }
    }
}

/* qconv.c dw_padded_plane on Helium: one channel plane minus the zero point as int16, zero
 * on every side the kernel window reaches (hp x wp): the whole plane zeroed 8 int16 a store
 * where there is padding, then each input row widened 8 columns at a time (VLDRB.U16), the
 * zero point taken off, stored at its place, the last columns predicated. */
static inline void mlcc_mve_dw_pad_plane(const uint8_t *plane, ptrdiff_t in_h, ptrdiff_t in_w,
                                         ptrdiff_t pad_top, ptrdiff_t pad_left, int32_t zp,
                                         ptrdiff_t hp, ptrdiff_t wp, int16_t *dst) {
    const int16x8_t zero = vdupq_n_s16(0);
    /* the input rows and columns inside the padded plane (hp x wp may cut the input short) */
    const ptrdiff_t r1 = in_h + pad_top < hp ? in_h : hp - pad_top;
    const ptrdiff_t w1 = in_w + pad_left < wp ? in_w : wp - pad_left;
    ptrdiff_t r, q;
    if (pad_top > 0 || pad_left > 0 || r1 + pad_top < hp || w1 + pad_left < wp) {
        const ptrdiff_t total = hp * wp;
        for (q = 0; q < total; q += 8)
            vstrhq_p_s16(dst + q, zero, vctp16q((uint32_t)(total - q)));   /* VCTP: at most 8 */
    }
    for (r = 0; r < r1; r++) {
        const uint8_t *src = plane + r * in_w;
        int16_t *d = dst + (r + pad_top) * wp + pad_left;
        for (q = 0; q < w1; q += 8) {
            const mve_pred16_t p = vctp16q((uint32_t)(w1 - q));
            const int16x8_t x = vreinterpretq_s16_u16(vldrbq_z_u16(src + q, p));
            vstrhq_p_s16(d + q, vsubq_n_s16(x, (int16_t)zp), p);
        }
    }
}

/* int32x4 sums of a depthwise plane's outputs, each tap one widening load (VLDRH.S32: stride
 * 1; else a gather of offsets 0, sw, 2 sw, 3 sw) and one VMLA by the weight: row is the input
 * row of kernel row 0 at the first output, step the distance of kernel rows. One output row
 * (pair 0): NV (1 to 4) vectors of outputs o .. o + 4 NV - 1 in a[0 .. NV - 1]. Two rows
 * (pair 1, rows of at most 8 outputs, the second's input `second` int16 further): NV (1 or
 * 2) vectors of each, in a[0], a[1] and a[2], a[3]; narrow rows (keyword spotting's 5
 * outputs) fill the vectors twice as well. Lanes past the row (rem outputs) are computed
 * from whatever the plane holds there and never stored; where that could read past the
 * plane's end (safe 0: the last rows), their loads are predicated off instead. NV, pair, sw,
 * safe and, for 3 x 3 kernels, the kernel's size are constants where inlined: each
 * combination a loop of its own, 3 x 3 fully unrolled. */
static inline __attribute__((always_inline)) void mlcc_mve_dw_sums(
        const int16_t *row, ptrdiff_t step, ptrdiff_t second, const int8_t *wc, int kh_n,
        int kw_n, int dw, int sw, uint32x4_t offs, ptrdiff_t rem, const int nv, const int pair,
        const int safe, int32x4_t a[4]) {
    const mve_pred16_t p0 = mlcc_mve_lanes(rem), p1 = mlcc_mve_lanes(rem - 4),
                       p2 = pair ? p0 : mlcc_mve_lanes(rem - 8),
                       p3 = pair ? p1 : mlcc_mve_lanes(rem - 12);
    const ptrdiff_t o2 = pair ? second : 8 * sw, o3 = pair ? second + 4 * sw : 12 * sw;
    const int v1 = nv > 1, v2 = pair || nv > 2, v3 = pair ? nv > 1 : nv > 3;
    int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
    int kh, kw;
#define MLCC_MVE_DW_LD(P, PRED)                                                             \
    (safe ? (sw == 1 ? vldrhq_s32(P) : vldrhq_gather_shifted_offset_s32(P, offs))           \
          : (sw == 1 ? vldrhq_z_s32(P, PRED)                                                \
                     : vldrhq_gather_shifted_offset_z_s32(P, offs, PRED)))
    for (kh = 0; kh < kh_n; kh++, row += step) {
        const int16_t *s = row;
        for (kw = 0; kw < kw_n; kw++, s += dw) {
            const int32_t w = *wc++;
            a0 = vmlaq_n_s32(a0, MLCC_MVE_DW_LD(s, p0), w);
            if (v1) a1 = vmlaq_n_s32(a1, MLCC_MVE_DW_LD(s + 4 * sw, p1), w);
            if (v2) a2 = vmlaq_n_s32(a2, MLCC_MVE_DW_LD(s + o2, p2), w);
            if (v3) a3 = vmlaq_n_s32(a3, MLCC_MVE_DW_LD(s + o3, p3), w);
        }
    }
#undef MLCC_MVE_DW_LD
    a[0] = a0; a[1] = a1; a[2] = a2; a[3] = a3;
}

/* Two output rows of a 3 x 3 kernel at stride 1 and dilation 1 (mlcc_mve_dw_sums' pair case):
 * input row j (0 to 3, wp int16 apart from r) serves kernel row j of the first output row
 * and kernel row j - 1 of the second, so each load feeds two VMLA (24 loads for 36 VMLA, not
 * 36). NV (1 or 2) vectors a row; safe as there. */
static inline __attribute__((always_inline)) void mlcc_mve_dw3_pair(
        const int16_t *r, ptrdiff_t wp, const int32_t *w, mve_pred16_t p0, mve_pred16_t p1,
        const int nv, const int safe, int32x4_t a[4]) {
    int32x4_t a0 = vdupq_n_s32(0), a1 = a0, b0 = a0, b1 = a0;
    int j, kw;
#pragma GCC unroll 4
    for (j = 0; j < 4; j++, r += wp) {
#pragma GCC unroll 3
        for (kw = 0; kw < 3; kw++) {
            const int32x4_t x0 = safe ? vldrhq_s32(r + kw) : vldrhq_z_s32(r + kw, p0);
            const int32x4_t x1 = nv < 2 ? x0 : safe ? vldrhq_s32(r + kw + 4)
                                                    : vldrhq_z_s32(r + kw + 4, p1);
            if (j < 3) {
                a0 = vmlaq_n_s32(a0, x0, w[3 * j + kw]);
                if (nv > 1) a1 = vmlaq_n_s32(a1, x1, w[3 * j + kw]);
            }
            if (j > 0) {
                b0 = vmlaq_n_s32(b0, x0, w[3 * j - 3 + kw]);
                if (nv > 1) b1 = vmlaq_n_s32(b1, x1, w[3 * j - 3 + kw]);
            }
        }
        /* GCC 12 otherwise hoists all 24 loads to the top and spills the 8 vector
         * registers MVE has */
        __asm__ volatile("" ::: "memory");
    }
    a[0] = a0; a[1] = a1; a[2] = b0; a[3] = b1;
}

/* mlcc_mve_dw3_pair on rem outputs of two rows from r0 (predicates p0, p1 of its two
 * vectors), requantized (mlcc_mve_store_fr) to elements at .. and at + ow_n .. of y; end: the
 * plane's size from xp, where the loads must stop. */
static inline __attribute__((always_inline)) void mlcc_mve_dw3_pair_store(
        const int16_t *xp, const int16_t *r0, ptrdiff_t wp, ptrdiff_t end, const int32_t *w9,
        ptrdiff_t rem, mve_pred16_t p0, mve_pred16_t p1, const mlcc_mve_epi *e,
        const mlcc_mve_rowq *q, void *y, ptrdiff_t at, ptrdiff_t ow_n) {
    /* the loads reach 3 rows below r0 and 7 + 2 columns right of it */
    const int safe = (r0 - xp) + 3 * wp + 9 < end;
    int32x4_t a[4];
    if (rem > 4) {
        if (safe) mlcc_mve_dw3_pair(r0, wp, w9, p0, p1, 2, 1, a);
        else mlcc_mve_dw3_pair(r0, wp, w9, p0, p1, 2, 0, a);
        mlcc_mve_store_fr(e, q, a[0], p0, y, at);
        mlcc_mve_store_fr(e, q, a[1], p1, y, at + 4);
        mlcc_mve_store_fr(e, q, a[2], p0, y, at + ow_n);
        mlcc_mve_store_fr(e, q, a[3], p1, y, at + ow_n + 4);
    } else {
        if (safe) mlcc_mve_dw3_pair(r0, wp, w9, p0, p1, 1, 1, a);
        else mlcc_mve_dw3_pair(r0, wp, w9, p0, p1, 1, 0, a);
        mlcc_mve_store_fr(e, q, a[0], p0, y, at);
        mlcc_mve_store_fr(e, q, a[2], p0, y, at + ow_n);
    }
}

/* The depthwise convolution of one channel plane (qconv.c dw_channel) on Helium: xp is the
 * plane minus the zero point as int16, padded (hp x wp), wc the channel's kh_n x kw_n
 * weights; up to 16 outputs of a row at a time, or two rows at once when they have at most 8
 * (mlcc_mve_dw_sums: as many vectors as the rows need), then the epilogue of channel c
 * (mlcc_mve_row_store: its constants scalars). Outputs from element y_index of y. */
static inline void mlcc_mve_dw_plane(const int16_t *xp, ptrdiff_t hp, ptrdiff_t wp,
                                     const int8_t *wc, ptrdiff_t kh_n, ptrdiff_t kw_n,
                                     ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t dh, ptrdiff_t dw,
                                     ptrdiff_t oh_n, ptrdiff_t ow_n, const mlcc_requant *rq,
                                     const mlcc_qchannels *ch, ptrdiff_t c, void *y,
                                     ptrdiff_t y_index) {
    const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)sw);   /* 0, sw, 2sw, 3sw */
    const int khn = (int)kh_n, kwn = (int)kw_n, dwi = (int)dw, swi = (int)sw;
    const ptrdiff_t step = dh * wp, second = sh * wp;
    /* the last element a call's loads may reach, from its first output's row start */
    const ptrdiff_t reach = (kh_n - 1) * step + (kw_n - 1) * dw + 15 * sw, end = hp * wp;
    ptrdiff_t oh = 0, o0, v;
    mlcc_mve_epi e;
    mlcc_mve_rowq q;
    mlcc_mve_epi_init(&e, rq, ch, c, 0, 4);
    q = mlcc_mve_rowq_of(ch, c, 0);
    /* the stride, the vector count and the loads' predication constant in each call: loops
     * of their own */
#define MLCC_MVE_DW1(NV, PAIR, SAFE)                                                        \
    (sw == 1 ? mlcc_mve_dw_sums(r0, step, second, wc, khn, kwn, dwi, 1, offs, rem, NV, PAIR, \
                                SAFE, a)                                                    \
             : mlcc_mve_dw_sums(r0, step, second, wc, khn, kwn, dwi, swi, offs, rem, NV,     \
                                PAIR, SAFE, a))
#define MLCC_MVE_DW(NV, PAIR)                                                               \
    do {                                                                                    \
        if ((r0 - xp) + reach + (PAIR ? second : 0) < end) MLCC_MVE_DW1(NV, PAIR, 1);       \
        else MLCC_MVE_DW1(NV, PAIR, 0);                                                     \
    } while (0)
    if (kh_n == 3 && kw_n == 3 && sw == 1 && sh == 1 && dh == 1 && dw == 1 &&
        e.kind == MLCC_MVE_FIXED && q.shift < 0) {
        /* keyword spotting's and visual wake words' 3 x 3 stride 1: two rows a pass, 8
         * columns at a time (4 sums and 2 loaded vectors: the 8 vector registers hold them),
         * shared loads, lean stores; the last chunk of a row has `last` outputs */
        const ptrdiff_t last = ow_n - (ow_n - 1) / 8 * 8;
        const mve_pred16_t all = mlcc_mve_lanes(4), l0 = mlcc_mve_lanes(last),
                           l1 = mlcc_mve_lanes(last - 4);
        int32_t w9[9];
        for (v = 0; v < 9; v++) w9[v] = wc[v];
        if (ow_n <= 8) {            /* one chunk a row: no loop over columns */
            for (oh = 0; oh + 1 < oh_n; oh += 2)
                mlcc_mve_dw3_pair_store(xp, xp + oh * wp, wp, end, w9, ow_n, l0, l1, &e, &q, y,
                                        y_index + oh * ow_n, ow_n);
        } else {
            for (oh = 0; oh + 1 < oh_n; oh += 2) {
                for (o0 = 0; o0 < ow_n; o0 += 8) {
                    const ptrdiff_t rem = ow_n - o0;
                    mlcc_mve_dw3_pair_store(xp, xp + oh * wp + o0, wp, end, w9, rem,
                                            rem >= 8 ? all : l0, rem >= 8 ? all : l1, &e, &q,
                                            y, y_index + oh * ow_n + o0, ow_n);
                }
            }
        }
    }
    for (; oh + 1 < oh_n && ow_n <= 8; oh += 2) {       /* narrow rows: two at once */
        const int16_t *r0 = xp + oh * second;
        const ptrdiff_t rem = ow_n, at = y_index + oh * ow_n;
        int32x4_t a[4];
        if (rem > 4) MLCC_MVE_DW(2, 1);
        else MLCC_MVE_DW(1, 1);
        mlcc_mve_row_store(&e, rq, ch, &q, a[0], rem, y, at);
        if (rem > 4) mlcc_mve_row_store(&e, rq, ch, &q, a[1], rem - 4, y, at + 4);
        mlcc_mve_row_store(&e, rq, ch, &q, a[2], rem, y, at + ow_n);
        if (rem > 4) mlcc_mve_row_store(&e, rq, ch, &q, a[3], rem - 4, y, at + ow_n + 4);
    }
    for (; oh < oh_n; oh++) {
        const int16_t *row = xp + oh * second;
        for (o0 = 0; o0 < ow_n; o0 += 16) {
            const ptrdiff_t rem = ow_n - o0, at = y_index + oh * ow_n + o0;
            const int16_t *r0 = row + o0 * sw;
            int32x4_t a[4];
            if (rem > 12) MLCC_MVE_DW(4, 0);
            else if (rem > 8) MLCC_MVE_DW(3, 0);
            else if (rem > 4) MLCC_MVE_DW(2, 0);
            else MLCC_MVE_DW(1, 0);
            for (v = 0; v < 4 && 4 * v < rem; v++)
                mlcc_mve_row_store(&e, rq, ch, &q, a[v], rem - 4 * v, y, at + 4 * v);
        }
    }
#undef MLCC_MVE_DW
#undef MLCC_MVE_DW1
}
#endif /* MLCC_QMVE */

#endif /* MLCC_QMVE_H */
