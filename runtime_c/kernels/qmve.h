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
 * reads it: one row load, four column loads and four VMLADAVA per 16 k. VMLADAVA takes both
 * operands signed or both unsigned: the column operand's bytes are flipped at the transpose
 * (bit 7: u8 b becomes the s8 b - 128, s8 b the u8 b + 128), and 128 times the row's sum is
 * added back (conv: s8 weights x u8 columns) or taken off (Gemm: u8 activations x s8
 * weights). Every load past the end of an operand (the k tail of a row, the last columns) is
 * predicated (VCTP): inactive lanes read nothing and give zero.
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

/* Four dot products of kn bytes (a multiple of 4): row a with the 4 transposed columns of bt;
 * per 16 k one row load, four column loads, four VMLADAVA (two rows at a time need eight
 * sums in the even registers VMLADAVA writes: GCC 12 spills them). Lanes of a past kn are
 * predicated off (zero): bt's bytes there do not count. */
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

/* The sum of the kn bytes of a row, signed or not (as uint32: it wraps as int32 would). */
static inline uint32_t mlcc_mve_row_sum(const uint8_t *a, ptrdiff_t kn, int is_signed) {
    uint32_t s = 0;
    ptrdiff_t k;
    for (k = 0; k < kn; k += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(kn - k < 16 ? kn - k : 16));
        s = is_signed ? (uint32_t)vaddvaq_p_s8((int32_t)s, vldrbq_z_s8((const int8_t *)a + k, p), p)
                      : vaddvaq_p_u8(s, vldrbq_z_u8(a + k, p), p);
    }
    return s;
}

/* mlcc_u8s8_gemm on Helium (qgemm.h's contract): blocks of MLCC_MVE_RB rows, in them blocks of
 * 4 columns, transposed per MLCC_MVE_KC bytes of k (once per block of rows when K fits). */
static inline void mlcc_mve_qgemm(const mlcc_qgemm_desc *d, const uint8_t *a, const uint8_t *b,
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
        for (j0 = 0; j0 < n; j0 += 4) {
            const ptrdiff_t nr = n - j0 < 4 ? n - j0 : 4;
            for (k0 = 0; k0 < kp; k0 += MLCC_MVE_KC) {
                const ptrdiff_t kn = kp - k0 < MLCC_MVE_KC ? kp - k0 : MLCC_MVE_KC;
                mlcc_mve_transpose(b, n, j0, nr, k0 / 4, kn / 4, bt);
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

/* qconv.c dw_padded_plane on Helium: one channel plane minus the zero point as int16, zero
 * on every side the kernel window reaches (hp x wp), 8 columns at a time: the lanes outside
 * the input's columns predicated off (read nothing, written as zero). */
static inline void mlcc_mve_dw_pad_plane(const uint8_t *plane, ptrdiff_t in_h, ptrdiff_t in_w,
                                         ptrdiff_t pad_top, ptrdiff_t pad_left, int32_t zp,
                                         ptrdiff_t hp, ptrdiff_t wp, int16_t *dst) {
    const int16x8_t zero = vdupq_n_s16(0);
    ptrdiff_t r, q;
    for (r = 0; r < hp; r++, dst += wp) {
        const ptrdiff_t ih = r - pad_top;
        const uint8_t *src = plane + ih * in_w - pad_left;
        for (q = 0; q < wp; q += 8) {
            const ptrdiff_t lo = pad_left - q, hi = pad_left + in_w - q;
            const mve_pred16_t in =
                ih < 0 || ih >= in_h ? 0
                : (mve_pred16_t)(vctp16q((uint32_t)(hi < 0 ? 0 : hi > 8 ? 8 : hi)) &
                                 ~vctp16q((uint32_t)(lo < 0 ? 0 : lo > 8 ? 8 : lo)));
            const int16x8_t x = vreinterpretq_s16_u16(vldrbq_z_u16(src + q, in));
            vstrhq_p_s16(dst + q, vpselq_s16(vsubq_n_s16(x, (int16_t)zp), zero, in),
                         vctp16q((uint32_t)(wp - q < 8 ? wp - q : 8)));
        }
    }
}

/* int32x4 sums of a depthwise plane's outputs, each tap one widening load (VLDRH.S32: stride
 * 1; else a gather of offsets 0, sw, 2 sw, 3 sw) and one VMLA by the weight, lanes past the
 * row predicated: row is the input row of kernel row 0 at the first output, step the
 * distance of kernel rows. One output row (pair 0): NV (1 to 4) vectors of outputs
 * o .. o + 4 NV - 1 in a[0 .. NV - 1]. Two rows (pair 1, rows of at most 8 outputs, the
 * second's input `second` int16 further): NV (1 or 2) vectors of each, in a[0], a[1] and
 * a[2], a[3]; narrow rows (keyword spotting's 5 outputs) fill the vectors twice as well.
 * NV, pair and sw are constants where inlined: each combination a loop of its own. */
static inline __attribute__((always_inline)) void mlcc_mve_dw_sums(
        const int16_t *row, ptrdiff_t step, ptrdiff_t second, const int8_t *wc, int kh_n,
        int kw_n, int dw, int sw, uint32x4_t offs, ptrdiff_t rem, const int nv, const int pair,
        int32x4_t a[4]) {
    const mve_pred16_t p0 = mlcc_mve_lanes(rem), p1 = mlcc_mve_lanes(rem - 4),
                       p2 = pair ? p0 : mlcc_mve_lanes(rem - 8),
                       p3 = pair ? p1 : mlcc_mve_lanes(rem - 12);
    const ptrdiff_t o2 = pair ? second : 8 * sw, o3 = pair ? second + 4 * sw : 12 * sw;
    const int v1 = nv > 1, v2 = pair || nv > 2, v3 = pair ? nv > 1 : nv > 3;
    int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
    int kh, kw;
#define MLCC_MVE_DW_LD(P, PRED) \
    (sw == 1 ? vldrhq_z_s32(P, PRED) : vldrhq_gather_shifted_offset_z_s32(P, offs, PRED))
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

/* The depthwise convolution of one channel plane (qconv.c dw_channel) on Helium: xp is the
 * plane minus the zero point as int16, padded (wp columns a row), wc the channel's kh_n x kw_n
 * weights; up to 16 outputs of a row at a time, or two rows at once when they have at most 8
 * (mlcc_mve_dw_sums: as many vectors as the rows need), then the epilogue of channel c.
 * Outputs from element y_index of y. */
static inline void mlcc_mve_dw_plane(const int16_t *xp, ptrdiff_t wp, const int8_t *wc,
                                     ptrdiff_t kh_n, ptrdiff_t kw_n, ptrdiff_t sh, ptrdiff_t sw,
                                     ptrdiff_t dh, ptrdiff_t dw, ptrdiff_t oh_n, ptrdiff_t ow_n,
                                     const mlcc_requant *rq, const mlcc_qchannels *ch,
                                     ptrdiff_t c, void *y, ptrdiff_t y_index) {
    const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)sw);   /* 0, sw, 2sw, 3sw */
    const int khn = (int)kh_n, kwn = (int)kw_n, dwi = (int)dw, swi = (int)sw;
    const ptrdiff_t step = dh * wp, second = sh * wp;
    ptrdiff_t oh, o0, v;
    mlcc_mve_epi e;
    mlcc_mve_epi_init(&e, rq, ch, c, 0, 4);
    /* the stride and the vector count constant in each call: loops of their own */
#define MLCC_MVE_DW(NV, PAIR)                                                               \
    (sw == 1 ? mlcc_mve_dw_sums(r0, step, second, wc, khn, kwn, dwi, 1, offs, rem, NV, PAIR, a) \
             : mlcc_mve_dw_sums(r0, step, second, wc, khn, kwn, dwi, swi, offs, rem, NV, PAIR, a))
    for (oh = 0; oh + 1 < oh_n && ow_n <= 8; oh += 2) {       /* narrow rows: two at once */
        const int16_t *r0 = xp + oh * second;
        const ptrdiff_t rem = ow_n, at = y_index + oh * ow_n;
        int32x4_t a[4];
        if (rem > 4) MLCC_MVE_DW(2, 1);
        else MLCC_MVE_DW(1, 1);
        mlcc_mve_epi_store(&e, rq, ch, a[0], rem, y, at);
        if (rem > 4) mlcc_mve_epi_store(&e, rq, ch, a[1], rem - 4, y, at + 4);
        mlcc_mve_epi_store(&e, rq, ch, a[2], rem, y, at + ow_n);
        if (rem > 4) mlcc_mve_epi_store(&e, rq, ch, a[3], rem - 4, y, at + ow_n + 4);
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
                mlcc_mve_epi_store(&e, rq, ch, a[v], rem - 4 * v, y, at + 4 * v);
        }
    }
#undef MLCC_MVE_DW
}
#endif /* MLCC_QMVE */

#endif /* MLCC_QMVE_H */
