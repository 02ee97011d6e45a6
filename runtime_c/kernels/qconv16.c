/* W8A16 convolution and fully connected kernels (see qconv16.h). */
#include "qconv16.h"

/* The vector path follows the target's vector width (MLCC_VECTOR_BYTES, from its YAML) and
 * the instruction sets it compiles for; never a run-time CPU test. */
#if defined(MLCC_VECTOR_BYTES) && MLCC_VECTOR_BYTES >= 64 && defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
    !defined(MLCC_NO_VECTORS)
#include <immintrin.h>
#define S16_AVX512 1
#define S16_AVX2 0
#elif defined(MLCC_VECTOR_BYTES) && MLCC_VECTOR_BYTES >= 32 && defined(__AVX2__) && \
    !defined(MLCC_NO_VECTORS)
#include <immintrin.h>
#define S16_AVX512 0
#define S16_AVX2 1
#else
#define S16_AVX512 0
#define S16_AVX2 0
#endif

#define S16_MR MLCC_S16_MR  /* channels per tile */
#define S16_NR 32           /* output positions per tile */
#define S16_KB MLCC_S16_BLOCK_PAIRS
#define S16_SEG 128         /* positions per im2col segment (two int16 rows on the stack) */

typedef int64_t s16_acc[S16_MR][S16_NR];

typedef struct {
    const mlcc_s16_conv2d_params *conv;    /* NULL: fully connected */
    int64_t batch, groups, mg, k, k2, cols, chunk_cols, chunks, channels;
    int64_t ldc, ldp;                      /* y of (channel c, position q): c * ldc + q * ldp */
    const int16_t *x;
    const int16_t *wide;                   /* MLCC_S16 packed: [groups][rows / 8][k2][8][2] */
    const int8_t *w8;                      /* depthwise: the int8 weights [channels][taps] */
    const float *scale, *fbias;
    const mlcc_s16_epilogue *ep;
    void *y;
    uint8_t *slices;
    size_t slice_bytes;
    int portable;
    int tap_major;                         /* K in (tap, channel pair) order (p->direct) */
    int64_t taps, c2n;                     /* tap_major: taps per channel, channel pairs */
    const int16_t *planes;                 /* the direct path's xc (direct_planes) */
    int64_t hp, wq, ybatch;                /* its rows, columns per phase; y of its batch */
} s16_job;

/* ---- the epilogue: act((float)((double)acc * scale[c]) + fbias[c]), then the output ---- */

/* n values of channel c from acc, written at y index y0 + t * ldp. */
static void epilogue_row(const s16_job *j, const int64_t *acc, int64_t c, int64_t y0, int n) {
    const mlcc_s16_epilogue *ep = j->ep;
    const float lo = ep->out_kind == MLCC_S16_OUT_U8 ? (float)(0 - ep->zero_point) : -32768.0f;
    const float hi = ep->out_kind == MLCC_S16_OUT_U8 ? (float)(255 - ep->zero_point) : 32767.0f;
    const float magic = 12582912.0f;
    const int64_t ldp = j->ldp;
    const double s = (double)j->scale[c];
    const float fb = j->fbias ? j->fbias[c] : 0.0f;
    float f[S16_NR];
    int t;
    for (t = 0; t < n; t++) f[t] = (float)((double)acc[t] * s) + fb;
    mlcc_act_apply(&ep->act, f, n);
    if (ep->out_kind == MLCC_S16_OUT_F32) {
        float *y = (float *)j->y + y0;
        for (t = 0; t < n; t++) y[t * ldp] = f[t];
        return;
    }
    for (t = 0; t < n; t++) {
        float v = f[t] / ep->y_scale;
        v = v > lo ? v : lo;                /* NaN -> lo, as mlcc_f32_quantize */
        v = v < hi ? v : hi;
        f[t] = (v + magic) - magic;         /* round half to even */
    }
    if (ep->out_kind == MLCC_S16_OUT_S16) {
        int16_t *y = (int16_t *)j->y + y0;
        for (t = 0; t < n; t++) y[t * ldp] = (int16_t)(int32_t)f[t];
    } else {
        uint8_t *y = (uint8_t *)j->y + y0;
        for (t = 0; t < n; t++) y[t * ldp] = (uint8_t)((int32_t)f[t] + ep->zero_point);
    }
}

#if S16_AVX512
/* The same operations as epilogue_row on 16 lanes: the double product, its rounding to
 * float, the bias, the activation (lane-wise: mlcc_act_apply on the 16 values), then the
 * division, the clamps (maxps / minps keep the scalar's NaN -> lo), the magic-number rounding. */
static inline __m512 ep_float(__m512d lo, __m512d hi, double s, float fb) {
    const __m512d sv = _mm512_set1_pd(s);
    const __m256 a = _mm512_cvtpd_ps(_mm512_mul_pd(lo, sv));
    const __m256 b = _mm512_cvtpd_ps(_mm512_mul_pd(hi, sv));
    const __m512 f = _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(_mm512_castps256_ps512(a)), _mm256_castps_pd(b), 1));
    return _mm512_add_ps(f, _mm512_set1_ps(fb));
}

/* Sums under 2^24 in magnitude are floats, and their product with the float scale has at
 * most 48 significant bits: exact in double, so rounding it to float is rounding the exact
 * product once, which is what vmulps does (with its rounding explicit: never fused with the
 * bias add). Larger sums take the double product. */
static inline __m512 ep_from32(__m512i acc, double s, float fb) {
    const __mmask16 big = _mm512_cmpgt_epu32_mask(_mm512_abs_epi32(acc),
                                                  _mm512_set1_epi32(0xFFFFFF));
    if (!big)
        return _mm512_add_ps(_mm512_mul_round_ps(_mm512_cvtepi32_ps(acc),
                                                 _mm512_set1_ps((float)s),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                             _mm512_set1_ps(fb));
    return ep_float(_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)),
                    _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1)), s, fb);
}

static inline __m512 ep_from64(const int64_t *acc, double s, float fb) {
    return ep_float(_mm512_cvtepi64_pd(_mm512_loadu_si512((const void *)acc)),
                    _mm512_cvtepi64_pd(_mm512_loadu_si512((const void *)(acc + 8))), s, fb);
}

/* Activation classes the vector epilogue specializes (others: mlcc_act_apply per lane). */
enum { S16_ACT_NONE, S16_ACT_RELU, S16_ACT_OTHER };

static int act_class(const mlcc_act *act) {
    return act->kind == MLCC_ACT_NONE ? S16_ACT_NONE
           : act->kind == MLCC_ACT_RELU ? S16_ACT_RELU : S16_ACT_OTHER;
}

/* Activation and output of lanes [0, n) (n <= 16) at y index y0 + t * ldp; kind, actc and
 * contig (ldp == 1) are the epilogue's (constants where inlined: one loop per case). */
static inline __attribute__((always_inline)) void ep_store(
        const s16_job *j, __m512 f, int64_t y0, int n, const int kind, const int actc,
        const int contig) {
    const mlcc_s16_epilogue *ep = j->ep;
    const __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
    const int64_t ldp = j->ldp;
    __m512i q;
    int32_t tq[16];
    int t;
    if (actc == S16_ACT_RELU) {
        f = _mm512_max_ps(f, _mm512_setzero_ps());      /* f > 0 ? f : 0 */
    } else if (actc == S16_ACT_OTHER) {
        float tf[16];
        _mm512_storeu_ps(tf, f);
        mlcc_act_apply(&ep->act, tf, 16);
        f = _mm512_loadu_ps(tf);
    }
    if (kind == MLCC_S16_OUT_F32) {
        float *y = (float *)j->y + y0;
        if (contig) {
            _mm512_mask_storeu_ps(y, m, f);
        } else {
            float tf[16];
            _mm512_storeu_ps(tf, f);
            for (t = 0; t < n; t++) y[t * ldp] = tf[t];
        }
        return;
    }
    {
        const int u8 = kind == MLCC_S16_OUT_U8;
        const __m512 lo = _mm512_set1_ps(u8 ? (float)(0 - ep->zero_point) : -32768.0f);
        const __m512 hi = _mm512_set1_ps(u8 ? (float)(255 - ep->zero_point) : 32767.0f);
        __m512 v = _mm512_div_ps(f, _mm512_set1_ps(ep->y_scale));
        v = _mm512_max_ps(v, lo);           /* v > lo ? v : lo */
        v = _mm512_min_ps(v, hi);           /* v < hi ? v : hi */
        /* to nearest, ties to even: what (v + 1.5 2^23) - 1.5 2^23 gives for |v| <= 2^22 */
        q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (u8) q = _mm512_add_epi32(q, _mm512_set1_epi32(ep->zero_point));
    }
    if (contig) {
        if (kind == MLCC_S16_OUT_S16)
            _mm256_mask_storeu_epi16((int16_t *)j->y + y0, m, _mm512_cvtepi32_epi16(q));
        else
            _mm_mask_storeu_epi8((uint8_t *)j->y + y0, m, _mm512_cvtepi32_epi8(q));
        return;
    }
    _mm512_storeu_si512((void *)tq, q);
    if (kind == MLCC_S16_OUT_S16) {
        int16_t *y = (int16_t *)j->y + y0;
        for (t = 0; t < n; t++) y[t * ldp] = (int16_t)tq[t];
    } else {
        uint8_t *y = (uint8_t *)j->y + y0;
        for (t = 0; t < n; t++) y[t * ldp] = (uint8_t)tq[t];
    }
}

/* Calls `body` (a statement using the constants KIND, ACTC and CONTIG) specialized for the
 * job's output kind, activation class and contiguity. */
#define S16_EP_DISPATCH(j, body)                                                            \
    do {                                                                                    \
        const int kind_ = (j)->ep->out_kind, actc_ = act_class(&(j)->ep->act);              \
        if ((j)->ldp != 1) {                                                                \
            const int KIND = kind_, ACTC = actc_, CONTIG = 0;                               \
            body;                                                                           \
        }                                                                                   \
        S16_EP_CASE(j, body, MLCC_S16_OUT_F32) S16_EP_CASE(j, body, MLCC_S16_OUT_S16)       \
        S16_EP_CASE(j, body, MLCC_S16_OUT_U8)                                               \
    } while (0)
#define S16_EP_CASE(j, body, k)                                                             \
    else if (kind_ == (k) && actc_ == S16_ACT_NONE) {                                       \
        const int KIND = (k), ACTC = S16_ACT_NONE, CONTIG = 1;                              \
        body;                                                                               \
    } else if (kind_ == (k) && actc_ == S16_ACT_RELU) {                                     \
        const int KIND = (k), ACTC = S16_ACT_RELU, CONTIG = 1;                              \
        body;                                                                               \
    } else if (kind_ == (k)) {                                                              \
        const int KIND = (k), ACTC = S16_ACT_OTHER, CONTIG = 1;                             \
        body;                                                                               \
    }
#endif

/* ---- the products: tiles of 8 channels x 32 positions ---- */

/* acc[r][j] = sum over the k2 pairs of row r . column j, exactly, for j < nc. a: the tile's
 * packed rows, pair kk of row r at a + (kk * 8 + r) * 2; b: column j's pair kk at
 * b + kk * ldb + 2 * j. */
static void core_portable(const int16_t *a, const int16_t *b, int64_t k2, int64_t ldb, int nc,
                          s16_acc acc) {
    int64_t kb, kk;
    int r, j;
    for (r = 0; r < S16_MR; r++)
        for (j = 0; j < nc; j++) acc[r][j] = 0;
    for (kb = 0; kb < k2; kb += S16_KB) {
        const int64_t ke = kb + S16_KB < k2 ? kb + S16_KB : k2;
        int32_t t[S16_MR][S16_NR];
        memset(t, 0, sizeof t);
        for (kk = kb; kk < ke; kk++) {
            const int16_t *bk = b + kk * ldb, *ak = a + kk * 2 * S16_MR;
            for (r = 0; r < S16_MR; r++) {
                const int32_t a0 = ak[2 * r], a1 = ak[2 * r + 1];
                for (j = 0; j < nc; j++)
                    t[r][j] += a0 * (int32_t)bk[2 * j] + a1 * (int32_t)bk[2 * j + 1];
            }
        }
        for (r = 0; r < S16_MR; r++)
            for (j = 0; j < nc; j++) acc[r][j] += t[r][j];
    }
}

#if S16_AVX512 || S16_AVX2
/* One pair of int16 weights as the int32 a broadcast repeats. */
static int32_t load_pair(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
#endif

#if S16_AVX512
static inline __m512i madd512(__m512i c, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(c, a, b);     /* the same exact int32 sums, one instruction */
#else
    return _mm512_add_epi32(c, _mm512_madd_epi16(a, b));
#endif
}

/* Block sums into the int64 tile (first: set it). */
static inline void add_block(int64_t *acc, __m512i v, int first) {
    const __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
    const __m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
    if (!first) {
        _mm512_storeu_si512((void *)acc,
                            _mm512_add_epi64(lo, _mm512_loadu_si512((const void *)acc)));
        _mm512_storeu_si512((void *)(acc + 8),
                            _mm512_add_epi64(hi, _mm512_loadu_si512((const void *)(acc + 8))));
    } else {
        _mm512_storeu_si512((void *)acc, lo);
        _mm512_storeu_si512((void *)(acc + 8), hi);
    }
}

#define S16_ROW(r)                                                            \
    w = _mm512_set1_epi32(load_pair(ak + 2 * (r)));                         \
    c##r##0 = madd512(c##r##0, w, b0);                                      \
    c##r##1 = madd512(c##r##1, w, b1);
#define S16_DECL(r) __m512i c##r##0 = _mm512_setzero_si512(), c##r##1 = c##r##0;
#define S16_OUT32(r)                                                          \
    _mm512_storeu_si512((void *)t32[r], c##r##0);                           \
    _mm512_storeu_si512((void *)(t32[r] + 16), c##r##1);
#define S16_OUT64(r)                                                          \
    add_block(acc[r], c##r##0, kb == 0);                                    \
    add_block(acc[r] + 16, c##r##1, kb == 0);

/* All 32 columns (the packed chunk is zero-padded to a multiple of 32) of the 8 rows. One
 * block (k2 <= S16_KB): the int32 sums into t32, returns 0; more: the int64 sums into acc,
 * returns 1. */
static int core_vector(const int16_t *a, const int16_t *b, int64_t k2, int64_t ldb,
                       int32_t t32[S16_MR][S16_NR], s16_acc acc) {
    int64_t kb, kk;
    for (kb = 0; kb < k2; kb += S16_KB) {
        const int64_t ke = kb + S16_KB < k2 ? kb + S16_KB : k2;
        S16_DECL(0) S16_DECL(1) S16_DECL(2) S16_DECL(3)
        S16_DECL(4) S16_DECL(5) S16_DECL(6) S16_DECL(7)
        for (kk = kb; kk < ke; kk++) {
            const __m512i b0 = _mm512_loadu_si512((const void *)(b + kk * ldb));
            const __m512i b1 = _mm512_loadu_si512((const void *)(b + kk * ldb + 32));
            const int16_t *ak = a + kk * 2 * S16_MR;
            __m512i w;
            S16_ROW(0) S16_ROW(1) S16_ROW(2) S16_ROW(3)
            S16_ROW(4) S16_ROW(5) S16_ROW(6) S16_ROW(7)
        }
        if (k2 <= S16_KB) {
            S16_OUT32(0) S16_OUT32(1) S16_OUT32(2) S16_OUT32(3)
            S16_OUT32(4) S16_OUT32(5) S16_OUT32(6) S16_OUT32(7)
            return 0;
        }
        S16_OUT64(0) S16_OUT64(1) S16_OUT64(2) S16_OUT64(3)
        S16_OUT64(4) S16_OUT64(5) S16_OUT64(6) S16_OUT64(7)
    }
    return 1;
}

/* The tile's outputs: rows channels from c0, nc positions, y index y0 of (c0, first). */
static inline __attribute__((always_inline)) void ep_tile(
        const s16_job *j, int32_t t32[S16_MR][S16_NR], s16_acc acc, int wide, int64_t c0,
        int rows, int64_t y0, int nc, const int kind, const int actc, const int contig) {
    int r, h;
    for (r = 0; r < rows; r++) {
        const int64_t c = c0 + r;
        const double s = (double)j->scale[c];
        const float fb = j->fbias ? j->fbias[c] : 0.0f;
        for (h = 0; h < S16_NR && h < nc; h += 16) {
            const __m512 f = wide ? ep_from64(acc[r] + h, s, fb)
                                  : ep_from32(_mm512_loadu_si512((const void *)(t32[r] + h)),
                                              s, fb);
            ep_store(j, f, y0 + r * j->ldc + h * j->ldp, nc - h, kind, actc, contig);
        }
    }
}

static void epilogue_tile(const s16_job *j, int32_t t32[S16_MR][S16_NR], s16_acc acc,
                          int wide, int64_t c0, int rows, int64_t y0, int nc) {
    S16_EP_DISPATCH(j, ep_tile(j, t32, acc, wide, c0, rows, y0, nc, KIND, ACTC, CONTIG));
}
#elif S16_AVX2
static void add_block(int64_t *acc, __m256i v) {
    int32_t t[8];
    int i;
    _mm256_storeu_si256((__m256i *)t, v);
    for (i = 0; i < 8; i++) acc[i] += t[i];
}

#define MADD256(c, a, b) c = _mm256_add_epi32(c, _mm256_madd_epi16(a, b))

/* All 32 columns, as two halves of 16, for each half of the 8 rows. */
static void core_vector(const int16_t *a, const int16_t *b, int64_t k2, int64_t ldb,
                        s16_acc acc) {
    int64_t kb, kk;
    int h, rh;
    memset(acc, 0, sizeof(s16_acc));
    for (rh = 0; rh < S16_MR; rh += 4)
        for (h = 0; h < 2; h++) {
            const int16_t *bh = b + 32 * h;
            for (kb = 0; kb < k2; kb += S16_KB) {
                const int64_t ke = kb + S16_KB < k2 ? kb + S16_KB : k2;
                __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00,
                        c20 = c00, c21 = c00, c30 = c00, c31 = c00;
                for (kk = kb; kk < ke; kk++) {
                    const __m256i b0 = _mm256_loadu_si256((const __m256i *)(bh + kk * ldb));
                    const __m256i b1 =
                        _mm256_loadu_si256((const __m256i *)(bh + kk * ldb + 16));
                    const int16_t *ak = a + (kk * S16_MR + rh) * 2;
                    __m256i w = _mm256_set1_epi32(load_pair(ak));
                    MADD256(c00, w, b0);
                    MADD256(c01, w, b1);
                    w = _mm256_set1_epi32(load_pair(ak + 2));
                    MADD256(c10, w, b0);
                    MADD256(c11, w, b1);
                    w = _mm256_set1_epi32(load_pair(ak + 4));
                    MADD256(c20, w, b0);
                    MADD256(c21, w, b1);
                    w = _mm256_set1_epi32(load_pair(ak + 6));
                    MADD256(c30, w, b0);
                    MADD256(c31, w, b1);
                }
                add_block(acc[rh] + 16 * h, c00); add_block(acc[rh] + 16 * h + 8, c01);
                add_block(acc[rh + 1] + 16 * h, c10); add_block(acc[rh + 1] + 16 * h + 8, c11);
                add_block(acc[rh + 2] + 16 * h, c20); add_block(acc[rh + 2] + 16 * h + 8, c21);
                add_block(acc[rh + 3] + 16 * h, c30); add_block(acc[rh + 3] + 16 * h + 8, c31);
            }
        }
}
#endif

/* ---- packing the columns ---- */

/* u[t] = channel c (of cg) of xg under tap `tap` at positions pos + t, t < n; 0 outside the
 * input, for c >= cg and at positions >= end. */
static void gather_tap(const mlcc_s16_conv2d_params *p, const int16_t *xg, int64_t c,
                       int64_t cg, int64_t tap, int64_t pos, int64_t end, int64_t n,
                       int16_t *u) {
    const int64_t kw_n = p->kernel_w, ow_n = p->out_w;
    const int64_t ih_n = p->in_h, iw_n = p->in_w, sw = p->stride_w;
    const int64_t kh = tap / kw_n, kw = tap % kw_n;
    const int16_t *xc = xg + (c < cg ? c : 0) * ih_n * iw_n;
    const int64_t off_w = kw * p->dilation_w - p->pad_left;
    const int64_t valid = c < cg && end > pos ? (end - pos < n ? end - pos : n) : 0;
    int64_t q = 0, t;
    while (q < valid) {         /* one output row's run at a time */
        const int64_t at = pos + q, oh = at / ow_n, ow0 = at % ow_n;
        const int64_t len = ow_n - ow0 < valid - q ? ow_n - ow0 : valid - q;
        const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
        int16_t *d = u + q;
        if (ih < 0 || ih >= ih_n) {
            memset(d, 0, (size_t)len * sizeof *d);
        } else if (sw == 1) {   /* iw = ow0 + t + off_w: one contiguous run inside */
            const int64_t i0 = ow0 + off_w;
            const int64_t lo = i0 < 0 ? (-i0 < len ? -i0 : len) : 0;
            const int64_t hi = iw_n - i0 < len ? (iw_n - i0 > lo ? iw_n - i0 : lo) : len;
            memset(d, 0, (size_t)lo * sizeof *d);
            if (hi > lo)
                memcpy(d + lo, xc + ih * iw_n + i0 + lo, (size_t)(hi - lo) * sizeof *d);
            memset(d + hi, 0, (size_t)(len - hi) * sizeof *d);
        } else {
            const int16_t *row = xc + ih * iw_n;
            t = 0;
#if S16_AVX512
            if (sw == 2) {  /* the inside run: the even int16 of 32 (vpmovdw) */
                const int64_t i0 = ow0 * 2 + off_w;
                const int64_t lo = i0 < 0 ? (-i0 + 1) / 2 : 0;
                const int64_t hi = i0 < iw_n ? (iw_n - 1 - i0) / 2 + 1 : 0;
                const int64_t e = hi < len ? hi : len;
                for (; t < lo && t < len; t++) d[t] = 0;
                for (; t + 16 <= e - 1; t += 16)    /* reads up to element 2 t + 31 < 2 e */
                    _mm256_storeu_si256((__m256i *)(void *)(d + t), _mm512_cvtepi32_epi16(
                        _mm512_loadu_si512((const void *)(row + i0 + 2 * t))));
            }
#endif
            for (; t < len; t++) {
                const int64_t iw = (ow0 + t) * sw + off_w;
                d[t] = iw >= 0 && iw < iw_n ? row[iw] : 0;
            }
        }
        q += len;
    }
    if (valid < n) memset(u + valid, 0, (size_t)(n - valid) * sizeof *u);
}

/* d[2t] = u[t], d[2t + 1] = v[t], t < n. */
static void interleave(const int16_t *u, const int16_t *v, int64_t n, int16_t *d) {
    int64_t t = 0;
#if S16_AVX512
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                        40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                        1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (; t + 32 <= n; t += 32) {
        const __m512i a = _mm512_loadu_si512((const void *)(u + t));
        const __m512i b = _mm512_loadu_si512((const void *)(v + t));
        _mm512_storeu_si512((void *)(d + 2 * t), _mm512_permutex2var_epi16(a, lo, b));
        _mm512_storeu_si512((void *)(d + 2 * t + 32), _mm512_permutex2var_epi16(a, hi, b));
    }
#endif
    for (; t < n; t++) {
        d[2 * t] = u[t];
        d[2 * t + 1] = v[t];
    }
}

/* Packs positions [p0, p0 + pc) of group input xg (cg planes) into b ([k2][ncols][2]), the
 * taps outside the input and the columns past pc as 0. Pair kk: taps 2 kk and 2 kk + 1 of
 * the (channel, tap) order, or (tap_major) channels 2 c2 and 2 c2 + 1 of tap kk / c2n. */
static void pack_conv(const s16_job *j, const int16_t *xg, int64_t cg, int64_t p0, int64_t pc,
                      int64_t ncols, int16_t *b) {
    const mlcc_s16_conv2d_params *p = j->conv;
    const int64_t taps = p->kernel_h * p->kernel_w;
    int16_t u[S16_SEG], v[S16_SEG];
    int64_t kk, q;
    for (kk = 0; kk < j->k2; kk++) {
        int64_t c0, t0, c1, t1;
        if (j->tap_major) {
            c0 = 2 * (kk % j->c2n), t0 = kk / j->c2n, c1 = c0 + 1, t1 = t0;
        } else {
            c0 = 2 * kk / taps, t0 = 2 * kk % taps;
            c1 = (2 * kk + 1) / taps, t1 = (2 * kk + 1) % taps;
        }
        for (q = 0; q < ncols; q += S16_SEG) {
            const int64_t n = ncols - q < S16_SEG ? ncols - q : S16_SEG;
            gather_tap(p, xg, c0, cg, t0, p0 + q, p0 + pc, n, u);
            gather_tap(p, xg, c1, cg, t1, p0 + q, p0 + pc, n, v);
            interleave(u, v, n, b + (kk * ncols + q) * 2);
        }
    }
}

/* Rows [p0, p0 + pc) of x ([rows][k]) as columns. */
static void pack_fc(const int16_t *x, int64_t k, int64_t k2, int64_t p0, int64_t pc,
                    int64_t ncols, int16_t *b) {
    int64_t t, kk;
    for (t = 0; t < ncols; t++) {
        const int16_t *row = t < pc ? x + (p0 + t) * k : NULL;
        for (kk = 0; kk < k2; kk++) {
            int16_t *d = b + (kk * ncols + t) * 2;
            d[0] = row ? row[2 * kk] : 0;
            d[1] = row && 2 * kk + 1 < k ? row[2 * kk + 1] : 0;
        }
    }
}

static void s16_unit(void *arg, int unit, int thread) {
    const s16_job *j = (const s16_job *)arg;
    const int64_t chunk = unit % j->chunks, bg = unit / j->chunks;
    const int64_t g = bg % j->groups, b = bg / j->groups;
    const int64_t p0 = chunk * j->chunk_cols;
    const int64_t pc = j->cols - p0 < j->chunk_cols ? j->cols - p0 : j->chunk_cols;
    const int64_t ncols = (pc + S16_NR - 1) / S16_NR * S16_NR, rows8 = MLCC_S16_ROWS(j->mg);
    const int64_t ybase = b * j->channels * j->cols;
    int16_t *pk = (int16_t *)(void *)(j->slices + (size_t)thread * j->slice_bytes);
    int64_t r0, q;
    s16_acc acc;
#if S16_AVX512
    int32_t t32[S16_MR][S16_NR];
#endif
    if (j->conv) {
        const mlcc_s16_conv2d_params *p = j->conv;
        const int64_t cg = p->in_channels / p->groups;
        pack_conv(j, j->x + (b * p->in_channels + g * cg) * p->in_h * p->in_w, cg, p0, pc,
                  ncols, pk);
    } else {
        pack_fc(j->x, j->k, j->k2, p0, pc, ncols, pk);
    }
    for (q = 0; q < pc; q += S16_NR) {
        const int nc = (int)(pc - q < S16_NR ? pc - q : S16_NR);
        for (r0 = 0; r0 < j->mg; r0 += S16_MR) {
            const int16_t *a = j->wide + (g * rows8 + r0) * j->k2 * 2;
            const int rows = (int)(j->mg - r0 < S16_MR ? j->mg - r0 : S16_MR);
            const int64_t c0 = g * j->mg + r0, y0 = ybase + c0 * j->ldc + (p0 + q) * j->ldp;
            int r;
#if S16_AVX512
            if (!j->portable) {
                const int wide = core_vector(a, pk + 2 * q, j->k2, 2 * ncols, t32, acc);
                epilogue_tile(j, t32, acc, wide, c0, rows, y0, nc);
                continue;
            }
#elif S16_AVX2
            if (!j->portable && nc > 8)
                core_vector(a, pk + 2 * q, j->k2, 2 * ncols, acc);
            else
#endif
                core_portable(a, pk + 2 * q, j->k2, 2 * ncols, nc, acc);
            for (r = 0; r < rows; r++) epilogue_row(j, acc[r], c0 + r, y0 + r * j->ldc, nc);
        }
    }
}

#if S16_AVX512
/* ---- direct ("implicit GEMM", as qconv.c's int8 one): no im2col ---- */

/* The input of one batch as rows of channel pairs, xc[hp][c2][sw][wq][2]: padded row r,
 * padded column i at phase i % sw, index i / sw (zeros outside the input and for a missing
 * odd channel), so that a tap's pairs of 16 consecutive outputs of a row are contiguous. */
static void direct_planes(const s16_job *j, const int16_t *x, int16_t *xc) {
    const mlcc_s16_conv2d_params *p = j->conv;
    const int64_t C = p->in_channels, plane = p->in_h * p->in_w, sw = p->stride_w;
    const int64_t hp = j->hp, wq = j->wq;
    int64_t c2, r, ph, i;
    for (c2 = 0; c2 < j->c2n; c2++)
        for (r = 0; r < hp; r++) {
            const int64_t ih = r - p->pad_top;
            const int ok = ih >= 0 && ih < p->in_h, two = 2 * c2 + 1 < C;
            const int16_t *s0 = ok ? x + 2 * c2 * plane + ih * p->in_w : x;
            const int16_t *s1 = two ? s0 + plane : s0;
            for (ph = 0; ph < sw; ph++) {
                int16_t *d = xc + ((r * j->c2n + c2) * sw + ph) * wq * 2;
                /* the columns inside the input: iw = i * sw + ph - pad_left in [0, in_w) */
                const int64_t first = ph - p->pad_left;
                const int64_t lo = first >= 0 ? 0 : (-first + sw - 1) / sw;
                int64_t hi = first < p->in_w ? (p->in_w - 1 - first) / sw + 1 : 0;
                hi = hi < wq ? hi : wq;
                if (!ok || lo >= hi) {
                    memset(d, 0, (size_t)wq * 4);
                    continue;
                }
                memset(d, 0, (size_t)lo * 4);
                if (sw == 1 && two) {
                    interleave(s0 + first + lo, s1 + first + lo, hi - lo, d + 2 * lo);
                } else {
                    for (i = lo; i < hi; i++) {
                        d[2 * i] = s0[i * sw + first];
                        d[2 * i + 1] = two ? s1[i * sw + first] : 0;
                    }
                }
                memset(d + 2 * hi, 0, (size_t)(wq - hi) * 4);
            }
        }
}

#define S16_DROW(r)                                                           \
    w = _mm512_set1_epi32(load_pair(ak + 2 * (r)));                         \
    c##r##0 = madd512(c##r##0, w, b0);                                      \
    if (NV > 1) c##r##1 = madd512(c##r##1, w, b1);
#define S16_ZERO(r) c##r##0 = _mm512_setzero_si512(); c##r##1 = c##r##0;
#define S16_FLUSH(r)                                                          \
    add_block(acc[r], c##r##0, first);                                      \
    add_block(acc[r] + 16, c##r##1, first);

/* Channels [c0, c0 + 8) (the packed tile a, tap-major) x nc <= 16 NV outputs of row oh from
 * ow0. */
static inline __attribute__((always_inline)) void direct_tile(
        const s16_job *j, const int16_t *a, int64_t c0, int rows, int64_t oh, int64_t ow0,
        int nc, const int NV) {
    const mlcc_s16_conv2d_params *p = j->conv;
    const int64_t sw = p->stride_w, cstride = sw * j->wq * 2;
    const __mmask16 m0 = (__mmask16)(nc >= 16 ? 0xFFFFu : (1u << nc) - 1u);
    const __mmask16 m1 = (__mmask16)(nc >= 32 ? 0xFFFFu : nc > 16 ? (1u << (nc - 16)) - 1u : 0u);
    int32_t t32[S16_MR][S16_NR];
    s16_acc acc;
    int64_t kh, kw, c2, count = 0;
    int first = 1;
    __m512i c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
    S16_ZERO(0) S16_ZERO(1) S16_ZERO(2) S16_ZERO(3)
    S16_ZERO(4) S16_ZERO(5) S16_ZERO(6) S16_ZERO(7)
    for (kh = 0; kh < p->kernel_h; kh++)
        for (kw = 0; kw < p->kernel_w; kw++) {
            const int64_t col = kw * p->dilation_w;
            const int16_t *b = j->planes +
                (((oh * p->stride_h + kh * p->dilation_h) * j->c2n * sw + col % sw) * j->wq +
                 ow0 + col / sw) * 2;
            const int16_t *ak = a + (kh * p->kernel_w + kw) * j->c2n * 2 * S16_MR;
            c2 = 0;
            while (c2 < j->c2n) {
                /* the channel pairs up to the end of the int32 block: a loop of products only */
                const int64_t e = j->c2n - c2 < S16_KB - count ? j->c2n : c2 + S16_KB - count;
                count += e - c2;
                for (; c2 < e; c2++, b += cstride, ak += 2 * S16_MR) {
                    const __m512i b0 = _mm512_maskz_loadu_epi32(m0, b);
                    const __m512i b1 = NV > 1 ? _mm512_maskz_loadu_epi32(m1, b + 32) : b0;
                    __m512i w;
                    S16_DROW(0) S16_DROW(1) S16_DROW(2) S16_DROW(3)
                    S16_DROW(4) S16_DROW(5) S16_DROW(6) S16_DROW(7)
                }
                if (count == S16_KB) {      /* a full int32 block: into the int64 sums */
                    S16_FLUSH(0) S16_FLUSH(1) S16_FLUSH(2) S16_FLUSH(3)
                    S16_FLUSH(4) S16_FLUSH(5) S16_FLUSH(6) S16_FLUSH(7)
                    S16_ZERO(0) S16_ZERO(1) S16_ZERO(2) S16_ZERO(3)
                    S16_ZERO(4) S16_ZERO(5) S16_ZERO(6) S16_ZERO(7)
                    count = 0;
                    first = 0;
                }
            }
        }
    if (first) {
        S16_OUT32(0) S16_OUT32(1) S16_OUT32(2) S16_OUT32(3)
        S16_OUT32(4) S16_OUT32(5) S16_OUT32(6) S16_OUT32(7)
    } else if (count) {
        S16_FLUSH(0) S16_FLUSH(1) S16_FLUSH(2) S16_FLUSH(3)
        S16_FLUSH(4) S16_FLUSH(5) S16_FLUSH(6) S16_FLUSH(7)
    }
    epilogue_tile(j, t32, acc, !first, c0, rows,
                  j->ybatch + c0 * j->ldc + oh * p->out_w + ow0, nc);
}

/* One output row (unit oh) of every channel of the batch whose planes j holds. */
static void direct_row(void *arg, int oh, int thread) {
    const s16_job *j = (const s16_job *)arg;
    int64_t ow0, r0;
    (void)thread;
    for (ow0 = 0; ow0 < j->conv->out_w; ow0 += S16_NR) {
        const int nc = (int)(j->conv->out_w - ow0 < S16_NR ? j->conv->out_w - ow0 : S16_NR);
        for (r0 = 0; r0 < j->mg; r0 += S16_MR) {
            const int rows = (int)(j->mg - r0 < S16_MR ? j->mg - r0 : S16_MR);
            if (nc > 16)
                direct_tile(j, j->wide + r0 * j->k2 * 2, r0, rows, oh, ow0, nc, 2);
            else
                direct_tile(j, j->wide + r0 * j->k2 * 2, r0, rows, oh, ow0, nc, 1);
        }
    }
}

static void run_direct(s16_job *j, uint8_t *scratch, mlcc_threadpool *pool) {
    const mlcc_s16_conv2d_params *p = j->conv;
    const double macs = (double)j->batch * (double)j->mg * (double)j->cols * (double)j->k;
    int64_t b;
    j->k2 = MLCC_S16_K2(j->k);
    j->hp = MLCC_S16_DIRECT_ROWS(p);
    j->wq = MLCC_S16_DIRECT_COLS(p);
    j->planes = (const int16_t *)(const void *)scratch;
    if (macs < (double)(2 * MLCC_MIN_PARALLEL_MACS)) pool = NULL;
    for (b = 0; b < j->batch; b++) {
        direct_planes(j, j->x + b * p->in_channels * p->in_h * p->in_w,
                      (int16_t *)(void *)scratch);
        j->ybatch = b * j->channels * j->cols;
        /* rows are independent and their sums exact: any split gives the same bytes */
        mlcc_threadpool_for(pool, direct_row, j, (int)p->out_h, MLCC_DW_SLICES);
    }
}
#endif

/* ---- depthwise: one channel per unit, straight from the int16 planes ---- */

/* Depthwise convolutions whose window sums fit one int32 block take dw_unit. */
static int is_depthwise(const mlcc_s16_conv2d_params *p) {
    return p->groups > 1 && p->groups == p->in_channels && p->groups == p->out_channels &&
           p->kernel_h * p->kernel_w <= 2 * S16_KB;
}

#if S16_AVX512
/* Columns a depthwise vector of 16 outputs reads: at most 64 for dw_plane512. */
static int64_t dw_span(const mlcc_s16_conv2d_params *p) {
    return 15 * p->stride_w + (p->kernel_w - 1) * p->dilation_w + 1;
}

/* NV vectors of 16 outputs of row oh from ow0 (dw_plane512). */
static inline __attribute__((always_inline)) void dw_vectors(
        const s16_job *j, const int16_t *xc, const int16_t *idx, const int32_t *wp, int64_t oh,
        int64_t ow0, const int NV, double s, float fb, int64_t yc, const int kind,
        const int actc, const int contig) {
    const mlcc_s16_conv2d_params *p = j->conv;
    const int64_t kh_n = p->kernel_h, kw_n = p->kernel_w, ih_n = p->in_h, iw_n = p->in_w;
    const int64_t ow_n = p->out_w, sw = p->stride_w, nq = (kw_n + 1) / 2;
    const int two = dw_span(p) > 32;
    uint64_t bits[4];
    int64_t i0[4], kh, q;
    __m512i acc[4];
    int v;
    for (v = 0; v < NV; v++) {
        /* the columns i0 + e inside the row: e in [lo, hi) of the 64 */
        const int64_t at = (ow0 + 16 * v) * sw - p->pad_left;
        const int64_t lo = at < 0 ? -at : 0, hi = iw_n - at < 64 ? iw_n - at : 64;
        bits[v] = hi > lo ? (hi - lo == 64 ? ~(uint64_t)0
                             : (((uint64_t)1 << (hi - lo)) - 1u) << lo) : 0u;
        i0[v] = at;
        acc[v] = _mm512_setzero_si512();
    }
    for (kh = 0; kh < kh_n; kh++) {
        const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
        __m512i a[4], b[4];
        if (ih < 0 || ih >= ih_n) continue;
        for (v = 0; v < NV; v++) {
            /* the address of column i0, which may lie outside the row (masked off) */
            const int16_t *src = (const int16_t *)(const void *)(
                (uintptr_t)(xc + ih * iw_n) + (uintptr_t)(i0[v] * 2));
            a[v] = _mm512_maskz_loadu_epi16((__mmask32)bits[v], src);
            b[v] = two ? _mm512_maskz_loadu_epi16((__mmask32)(bits[v] >> 32), src + 32) : a[v];
        }
        for (q = 0; q < nq; q++) {
            const __m512i ix = _mm512_loadu_si512((const void *)(idx + q * 32));
            const __m512i w = _mm512_set1_epi32(wp[kh * nq + q]);
            /* (x[kw], x[kw + 1]) pairs: odd kw_n's last without its second */
            const __mmask32 keep = 2 * q + 1 < kw_n ? 0xFFFFFFFFu : 0x55555555u;
            for (v = 0; v < NV; v++)
                acc[v] = madd512(acc[v], _mm512_maskz_permutex2var_epi16(keep, a[v], ix, b[v]),
                                 w);
        }
    }
    for (v = 0; v < NV; v++) {
        const int64_t n = ow_n - ow0 - 16 * v < 16 ? ow_n - ow0 - 16 * v : 16;
        ep_store(j, ep_from32(acc[v], s, fb), yc + oh * ow_n + ow0 + 16 * v, (int)n, kind,
                 actc, contig);
    }
}

/* One channel's plane: 16 outputs of a row per vector. Per kernel row, the 64 input columns
 * the vector reads are loaded once (masked: zeros outside the row) and vpermt2w makes the
 * int16 pairs of two taps (kw, kw + 1) for each lane (the second of an odd last one zeroed),
 * so that vpdpwssd sums two taps per instruction, in int32 (at most 512 products: exact). */
static inline __attribute__((always_inline)) void dw_plane512(
        const s16_job *j, const int16_t *xc, const int8_t *wc, int64_t c, int64_t yc,
        const int kind, const int actc, const int contig) {
    const mlcc_s16_conv2d_params *p = j->conv;
    const int64_t kh_n = p->kernel_h, kw_n = p->kernel_w, oh_n = p->out_h, ow_n = p->out_w;
    const int64_t sw = p->stride_w, nq = (kw_n + 1) / 2;
    const double s = (double)j->scale[c];
    const float fb = j->fbias ? j->fbias[c] : 0.0f;
    int32_t wp[2 * S16_KB];
    int16_t idx[32 * 32];
    int64_t oh, ow0, kh, q, t;
    for (kh = 0; kh < kh_n; kh++)
        for (q = 0; q < nq; q++)
            wp[kh * nq + q] = (int32_t)((uint32_t)(uint16_t)(int16_t)wc[kh * kw_n + 2 * q] |
                                        (2 * q + 1 < kw_n ? (uint32_t)(uint16_t)(int16_t)
                                         wc[kh * kw_n + 2 * q + 1] << 16 : 0u));
    for (q = 0; q < nq; q++)
        for (t = 0; t < 16; t++) {
            idx[q * 32 + 2 * t] = (int16_t)(t * sw + 2 * q * p->dilation_w);
            idx[q * 32 + 2 * t + 1] = (int16_t)(2 * q + 1 < kw_n
                                                ? t * sw + (2 * q + 1) * p->dilation_w : 0);
        }
    /* four (two) vectors of a row at a time where there are: independent chains */
    for (oh = 0; oh < oh_n; oh++) {
        for (ow0 = 0; ow0 + 64 <= ow_n; ow0 += 64)
            dw_vectors(j, xc, idx, wp, oh, ow0, 4, s, fb, yc, kind, actc, contig);
        for (; ow0 + 32 <= ow_n; ow0 += 32)
            dw_vectors(j, xc, idx, wp, oh, ow0, 2, s, fb, yc, kind, actc, contig);
        for (; ow0 < ow_n; ow0 += 16)
            dw_vectors(j, xc, idx, wp, oh, ow0, 1, s, fb, yc, kind, actc, contig);
    }
}
#endif

static void dw_unit(void *arg, int unit, int thread) {
    const s16_job *j = (const s16_job *)arg;
    const mlcc_s16_conv2d_params *p = j->conv;
    const int64_t ch = p->out_channels, c = unit % ch, b = unit / ch;
    const int64_t kh_n = p->kernel_h, kw_n = p->kernel_w, ih_n = p->in_h, iw_n = p->in_w;
    const int64_t oh_n = p->out_h, ow_n = p->out_w, sh = p->stride_h, sw = p->stride_w;
    const int16_t *xc = j->x + (b * ch + c) * ih_n * iw_n;
    const int8_t *wc = j->w8 + c * kh_n * kw_n;
    const int64_t yc = (b * ch + c) * j->cols;
    int64_t oh, ow0, kh, kw;
    (void)thread;
#if S16_AVX512
    if (!j->portable && dw_span(p) <= 64) {
        S16_EP_DISPATCH(j, dw_plane512(j, xc, wc, c, yc, KIND, ACTC, CONTIG));
        return;
    }
#endif
    for (oh = 0; oh < oh_n; oh++)
        for (ow0 = 0; ow0 < ow_n; ow0 += S16_NR) {
            const int n = (int)(ow_n - ow0 < S16_NR ? ow_n - ow0 : S16_NR);
            int64_t acc[S16_NR];
            int t;
            for (t = 0; t < n; t++) {
                int32_t sum = 0;    /* at most 2 * S16_KB products: exact */
                for (kh = 0; kh < kh_n; kh++) {
                    const int64_t ih = oh * sh + kh * p->dilation_h - p->pad_top;
                    if (ih < 0 || ih >= ih_n) continue;
                    for (kw = 0; kw < kw_n; kw++) {
                        const int64_t iw = (ow0 + t) * sw + kw * p->dilation_w - p->pad_left;
                        if (iw >= 0 && iw < iw_n)
                            sum += (int32_t)xc[ih * iw_n + iw] * wc[kh * kw_n + kw];
                    }
                }
                acc[t] = sum;
            }
            epilogue_row(j, acc, c, yc + oh * ow_n + ow0, n);
        }
}

/* ---- entry points ---- */

/* Widens w ([groups * mg][k] int8) into the packed layout, zero-padded. */
static void widen(const int8_t *w, int64_t groups, int64_t mg, int64_t k, int16_t *wide) {
    const int64_t rows8 = MLCC_S16_ROWS(mg), k2 = MLCC_S16_K2(k);
    int64_t g, r, t;
    for (g = 0; g < groups; g++)
        for (r = 0; r < rows8; r++) {
            int16_t *d = wide + g * rows8 * k2 * 2 + (r / S16_MR) * S16_MR * k2 * 2 +
                         (r % S16_MR) * 2;
            const int8_t *src = r < mg ? w + (g * mg + r) * k : NULL;
            for (t = 0; t < 2 * k2; t++)
                d[(t >> 1) * 2 * S16_MR + (t & 1)] = src && t < k ? (int16_t)src[t] : 0;
        }
}

static void s16_run(s16_job *j, uint8_t *slices, mlcc_threadpool *pool) {
    const double macs = (double)j->batch * (double)j->groups * (double)j->mg *
                        (double)j->cols * (double)j->k;
    int64_t units;
    j->k2 = MLCC_S16_K2(j->k);
    j->chunks = (j->cols + j->chunk_cols - 1) / j->chunk_cols;
    j->slices = slices;
    j->slice_bytes = MLCC_S16_SLICE_BYTES(j->k, j->chunk_cols);
    units = j->batch * j->groups * j->chunks;
    if (units < 1 || j->cols < 1) return;
    /* int16 pairs: 2 multiply-adds per int32 lane, between the float and int8 thresholds */
    if (macs < (double)(2 * MLCC_MIN_PARALLEL_MACS)) pool = NULL;
    /* each unit's outputs are computed whole, exactly: any split gives the same bytes */
    if (j->w8)
        mlcc_threadpool_for(pool, dw_unit, j, (int)(j->batch * j->channels), MLCC_DW_SLICES);
    else
        mlcc_threadpool_for(pool, s16_unit, j, (int)units, MLCC_DW_SLICES);
}

static void conv_job(s16_job *j, const mlcc_s16_conv2d_params *p, const int16_t *x,
                     const float *scale, const float *fbias, void *y) {
    memset(j, 0, sizeof *j);
    j->conv = p;
    j->batch = p->batch;
    j->groups = p->groups;
    j->mg = p->out_channels / p->groups;
    j->k = p->in_channels / p->groups * p->kernel_h * p->kernel_w;
    j->cols = p->out_h * p->out_w;
    j->chunk_cols = p->chunk_cols;
    j->channels = p->out_channels;
    j->ldc = j->cols;
    j->ldp = 1;
    j->x = x; j->scale = scale; j->fbias = fbias; j->ep = &p->ep; j->y = y;
}

static void fc_job(s16_job *j, const mlcc_s16_fc_params *p, const int16_t *x,
                   const float *scale, const float *fbias, void *y) {
    memset(j, 0, sizeof *j);
    j->batch = 1;
    j->groups = 1;
    j->mg = p->n;
    j->k = p->k;
    j->cols = p->m;
    j->chunk_cols = p->chunk_cols;
    j->channels = p->n;
    j->ldc = 1;
    j->ldp = p->n;
    j->x = x; j->scale = scale; j->fbias = fbias; j->ep = &p->ep; j->y = y;
}

/* The int8-weight entries: depthwise straight from w, the rest widened into scratch. */
static void run_int8(s16_job *j, const int8_t *w, uint8_t *scratch, mlcc_threadpool *pool) {
    if (j->conv && is_depthwise(j->conv)) {
        j->w8 = w;
        s16_run(j, NULL, pool);
        return;
    }
    widen(w, j->groups, j->mg, j->k, (int16_t *)(void *)scratch);
    j->wide = (const int16_t *)(const void *)scratch;
    s16_run(j, scratch + MLCC_S16_WEIGHT_BYTES(j->groups, j->mg, j->k), pool);
}

void mlcc_s16_conv2d(const mlcc_s16_conv2d_params *p, const int16_t *x, const int8_t *w,
                     const float *scale, const float *fbias, void *y, uint8_t *scratch,
                     mlcc_threadpool *pool) {
    s16_job j;
    conv_job(&j, p, x, scale, fbias, y);
    run_int8(&j, w, scratch, pool);
}

void mlcc_s16_conv2d__portable(const mlcc_s16_conv2d_params *p, const int16_t *x,
                               const int8_t *w, const float *scale, const float *fbias, void *y,
                               uint8_t *scratch, mlcc_threadpool *pool) {
    s16_job j;
    conv_job(&j, p, x, scale, fbias, y);
    j.portable = 1;
    run_int8(&j, w, scratch, pool);
}

void mlcc_s16_conv2d__packed(const mlcc_s16_conv2d_params *p, const int16_t *x,
                             const int16_t *w, const float *scale, const float *fbias, void *y,
                             uint8_t *scratch, mlcc_threadpool *pool) {
    s16_job j;
    conv_job(&j, p, x, scale, fbias, y);
    j.wide = w;
    if (p->direct) {
        j.tap_major = 1;
        j.taps = p->kernel_h * p->kernel_w;
        j.c2n = (p->in_channels / p->groups + 1) / 2;
        j.k = j.taps * 2 * j.c2n;
#if S16_AVX512
        if (p->groups == 1 && j.cols > 0) {
            run_direct(&j, scratch, pool);
            return;
        }
#endif
    }
    s16_run(&j, scratch, pool);
}

void mlcc_s16_fc(const mlcc_s16_fc_params *p, const int16_t *x, const int8_t *w,
                 const float *scale, const float *fbias, void *y, uint8_t *scratch,
                 mlcc_threadpool *pool) {
    s16_job j;
    fc_job(&j, p, x, scale, fbias, y);
    run_int8(&j, w, scratch, pool);
}

void mlcc_s16_fc__portable(const mlcc_s16_fc_params *p, const int16_t *x, const int8_t *w,
                           const float *scale, const float *fbias, void *y, uint8_t *scratch,
                           mlcc_threadpool *pool) {
    s16_job j;
    fc_job(&j, p, x, scale, fbias, y);
    j.portable = 1;
    run_int8(&j, w, scratch, pool);
}

void mlcc_s16_fc__packed(const mlcc_s16_fc_params *p, const int16_t *x, const int16_t *w,
                         const float *scale, const float *fbias, void *y, uint8_t *scratch,
                         mlcc_threadpool *pool) {
    s16_job j;
    fc_job(&j, p, x, scale, fbias, y);
    j.wide = w;
    s16_run(&j, scratch, pool);
}

void mlcc_f32_quantize_int16(const mlcc_quantize_params *p, const float *x, int16_t *y) {
    const float s = p->scale, magic = 12582912.0f;
    const int64_t n = p->count;
    int64_t i = 0;
#if S16_AVX512
    {   /* the same operations on 16 lanes (ep_store's) */
        const __m512 sv = _mm512_set1_ps(s), lo = _mm512_set1_ps(-32768.0f);
        const __m512 hi = _mm512_set1_ps(32767.0f);
        for (; i + 16 <= n; i += 16) {
            __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), sv);
            v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            _mm256_storeu_si256((__m256i *)(void *)(y + i), _mm512_cvtepi32_epi16(
                _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        }
    }
#endif
    for (; i < n; i++) {
        float f = x[i] / s;
        f = f > -32768.0f ? f : -32768.0f;     /* NaN -> -32768 */
        f = f < 32767.0f ? f : 32767.0f;
        f = (f + magic) - magic;                /* round half to even */
        y[i] = (int16_t)(int32_t)f;
    }
}
