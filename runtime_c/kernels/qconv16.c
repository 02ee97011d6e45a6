/* W8A16 convolution and fully connected kernels (see qconv16.h). */
#include "qconv16.h"

/* The vector path follows the target's vector width (MLCC_VECTOR_BYTES, from its YAML) and
 * the instruction sets it compiles for; never a run-time CPU test. */
#if defined(MLCC_VECTOR_BYTES) && MLCC_VECTOR_BYTES >= 64 && defined(__AVX512F__) && \
    defined(__AVX512BW__) && !defined(MLCC_NO_VECTORS)
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

#define S16_MR 4        /* channels per tile */
#define S16_NR 32       /* output positions per tile */
#define S16_KB MLCC_S16_BLOCK_PAIRS

typedef int64_t s16_acc[S16_MR][S16_NR];

typedef struct {
    const mlcc_s16_conv2d_params *conv;    /* NULL: fully connected */
    const mlcc_s16_fc_params *fc;
    int64_t batch, groups, mg, k, k2, cols, chunk_cols, chunks, channels;
    const int16_t *x;
    const int16_t *wide;                   /* [groups][MLCC_S16_ROWS(mg)][k2][2] */
    const float *scale, *fbias;
    const mlcc_s16_epilogue *ep;
    void *y;
    uint8_t *slices;
    size_t slice_bytes;
    int portable;
} s16_job;


/* acc[r][j] = sum over the k2 pairs of a row r . column j, exactly, for j < nc. a: row r at
 * a + r * 2 * k2; b: column j's pair kk at b + kk * ldb + 2 * j. */
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
            const int16_t *bk = b + kk * ldb;
            for (r = 0; r < S16_MR; r++) {
                const int32_t a0 = a[(r * k2 + kk) * 2], a1 = a[(r * k2 + kk) * 2 + 1];
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

static void add_block(int64_t *acc, __m512i v) {
    int32_t t[16];
    int i;
    _mm512_storeu_si512((void *)t, v);
    for (i = 0; i < 16; i++) acc[i] += t[i];
}

/* All 32 columns (the packed chunk is zero-padded to a multiple of 32). */
static void core_vector(const int16_t *a, const int16_t *b, int64_t k2, int64_t ldb,
                        s16_acc acc) {
    int64_t kb, kk;
    memset(acc, 0, sizeof(s16_acc));
    for (kb = 0; kb < k2; kb += S16_KB) {
        const int64_t ke = kb + S16_KB < k2 ? kb + S16_KB : k2;
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
                c21 = c00, c30 = c00, c31 = c00;
        for (kk = kb; kk < ke; kk++) {
            const __m512i b0 = _mm512_loadu_si512((const void *)(b + kk * ldb));
            const __m512i b1 = _mm512_loadu_si512((const void *)(b + kk * ldb + 32));
            __m512i w = _mm512_set1_epi32(load_pair(a + kk * 2));
            c00 = madd512(c00, w, b0);
            c01 = madd512(c01, w, b1);
            w = _mm512_set1_epi32(load_pair(a + (k2 + kk) * 2));
            c10 = madd512(c10, w, b0);
            c11 = madd512(c11, w, b1);
            w = _mm512_set1_epi32(load_pair(a + (2 * k2 + kk) * 2));
            c20 = madd512(c20, w, b0);
            c21 = madd512(c21, w, b1);
            w = _mm512_set1_epi32(load_pair(a + (3 * k2 + kk) * 2));
            c30 = madd512(c30, w, b0);
            c31 = madd512(c31, w, b1);
        }
        add_block(acc[0], c00); add_block(acc[0] + 16, c01);
        add_block(acc[1], c10); add_block(acc[1] + 16, c11);
        add_block(acc[2], c20); add_block(acc[2] + 16, c21);
        add_block(acc[3], c30); add_block(acc[3] + 16, c31);
    }
}
#elif S16_AVX2
static void add_block(int64_t *acc, __m256i v) {
    int32_t t[8];
    int i;
    _mm256_storeu_si256((__m256i *)t, v);
    for (i = 0; i < 8; i++) acc[i] += t[i];
}

#define MADD256(c, a, b) c = _mm256_add_epi32(c, _mm256_madd_epi16(a, b))

/* All 32 columns, as two halves of 16. */
static void core_vector(const int16_t *a, const int16_t *b, int64_t k2, int64_t ldb,
                        s16_acc acc) {
    int64_t kb, kk;
    int h;
    memset(acc, 0, sizeof(s16_acc));
    for (h = 0; h < 2; h++) {
        const int16_t *bh = b + 32 * h;
        for (kb = 0; kb < k2; kb += S16_KB) {
            const int64_t ke = kb + S16_KB < k2 ? kb + S16_KB : k2;
            __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
                    c21 = c00, c30 = c00, c31 = c00;
            for (kk = kb; kk < ke; kk++) {
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)(bh + kk * ldb));
                const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bh + kk * ldb + 16));
                __m256i w = _mm256_set1_epi32(load_pair(a + kk * 2));
                MADD256(c00, w, b0);
                MADD256(c01, w, b1);
                w = _mm256_set1_epi32(load_pair(a + (k2 + kk) * 2));
                MADD256(c10, w, b0);
                MADD256(c11, w, b1);
                w = _mm256_set1_epi32(load_pair(a + (2 * k2 + kk) * 2));
                MADD256(c20, w, b0);
                MADD256(c21, w, b1);
                w = _mm256_set1_epi32(load_pair(a + (3 * k2 + kk) * 2));
                MADD256(c30, w, b0);
                MADD256(c31, w, b1);
            }
            add_block(acc[0] + 16 * h, c00); add_block(acc[0] + 16 * h + 8, c01);
            add_block(acc[1] + 16 * h, c10); add_block(acc[1] + 16 * h + 8, c11);
            add_block(acc[2] + 16 * h, c20); add_block(acc[2] + 16 * h + 8, c21);
            add_block(acc[3] + 16 * h, c30); add_block(acc[3] + 16 * h + 8, c31);
        }
    }
}
#endif

/* rows channels from c0, nc positions from p0 (the plane of batch b, or the rows of x). */
static void epilogue(const s16_job *j, s16_acc acc, int64_t b, int64_t c0, int rows,
                     int64_t p0, int nc) {
    const mlcc_s16_epilogue *ep = j->ep;
    const float lo = ep->out_kind == MLCC_S16_OUT_U8 ? (float)(0 - ep->zero_point) : -32768.0f;
    const float hi = ep->out_kind == MLCC_S16_OUT_U8 ? (float)(255 - ep->zero_point) : 32767.0f;
    const float magic = 12582912.0f;
    /* conv: y[b][c][p]; fc: y[p][c] */
    const int64_t ldc = j->conv ? j->cols : 1, ldp = j->conv ? 1 : j->channels;
    const int64_t base = j->conv ? b * j->channels * j->cols : 0;
    int r, t;
    for (r = 0; r < rows; r++) {
        const int64_t c = c0 + r;
        const double s = (double)j->scale[c];
        const float fb = j->fbias ? j->fbias[c] : 0.0f;
        const int64_t y0 = base + c * ldc + p0 * ldp;
        float f[S16_NR];
        for (t = 0; t < nc; t++) f[t] = (float)((double)acc[r][t] * s) + fb;
        mlcc_act_apply(&ep->act, f, nc);
        if (ep->out_kind == MLCC_S16_OUT_F32) {
            float *y = (float *)j->y + y0;
            for (t = 0; t < nc; t++) y[t * ldp] = f[t];
            continue;
        }
        for (t = 0; t < nc; t++) {
            float v = f[t] / ep->y_scale;
            v = v > lo ? v : lo;                /* NaN -> lo, as mlcc_f32_quantize */
            v = v < hi ? v : hi;
            f[t] = (v + magic) - magic;         /* round half to even */
        }
        if (ep->out_kind == MLCC_S16_OUT_S16) {
            int16_t *y = (int16_t *)j->y + y0;
            for (t = 0; t < nc; t++) y[t * ldp] = (int16_t)(int32_t)f[t];
        } else {
            uint8_t *y = (uint8_t *)j->y + y0;
            for (t = 0; t < nc; t++) y[t * ldp] = (uint8_t)((int32_t)f[t] + ep->zero_point);
        }
    }
}

/* Packs positions [p0, p0 + pc) of group input xg (cg planes) into b ([k2][ncols][2]), the
 * taps outside the input and the columns past pc as 0. */
static void pack_conv(const mlcc_s16_conv2d_params *p, const int16_t *xg, int64_t cg,
                      int64_t k2, int64_t p0, int64_t pc, int64_t ncols, int16_t *b) {
    const int64_t kh_n = p->kernel_h, kw_n = p->kernel_w, ow_n = p->out_w;
    const int64_t ih_n = p->in_h, iw_n = p->in_w, sw = p->stride_w;
    const int64_t taps = cg * kh_n * kw_n;
    int64_t k, t;
    for (k = 0; k < 2 * k2; k++) {
        int16_t *dst = b + (k >> 1) * ncols * 2 + (k & 1);
        if (k < taps) {
            const int64_t c = k / (kh_n * kw_n), kh = k / kw_n % kh_n, kw = k % kw_n;
            const int16_t *xc = xg + c * ih_n * iw_n;
            const int64_t off_w = kw * p->dilation_w - p->pad_left;
            int64_t q = 0;
            while (q < pc) {        /* one output row's run at a time */
                const int64_t pos = p0 + q, oh = pos / ow_n, ow0 = pos % ow_n;
                const int64_t n = ow_n - ow0 < pc - q ? ow_n - ow0 : pc - q;
                const int64_t ih = oh * p->stride_h + kh * p->dilation_h - p->pad_top;
                int16_t *d = dst + 2 * q;
                if (ih < 0 || ih >= ih_n) {
                    for (t = 0; t < n; t++) d[2 * t] = 0;
                } else {
                    const int16_t *row = xc + ih * iw_n;
                    for (t = 0; t < n; t++) {
                        const int64_t iw = (ow0 + t) * sw + off_w;
                        d[2 * t] = iw >= 0 && iw < iw_n ? row[iw] : 0;
                    }
                }
                q += n;
            }
        } else {
            for (t = 0; t < pc; t++) dst[2 * t] = 0;
        }
        for (t = pc; t < ncols; t++) dst[2 * t] = 0;
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
    const int64_t ncols = (pc + S16_NR - 1) / S16_NR * S16_NR, rows4 = MLCC_S16_ROWS(j->mg);
    int16_t *pk = (int16_t *)(void *)(j->slices + (size_t)thread * j->slice_bytes);
    int64_t r0, q;
    s16_acc acc;
    if (j->conv) {
        const mlcc_s16_conv2d_params *p = j->conv;
        const int64_t cg = p->in_channels / p->groups;
        pack_conv(p, j->x + (b * p->in_channels + g * cg) * p->in_h * p->in_w, cg, j->k2, p0,
                  pc, ncols, pk);
    } else {
        pack_fc(j->x, j->k, j->k2, p0, pc, ncols, pk);
    }
    for (r0 = 0; r0 < j->mg; r0 += S16_MR) {
        const int16_t *a = j->wide + (g * rows4 + r0) * j->k2 * 2;
        const int rows = (int)(j->mg - r0 < S16_MR ? j->mg - r0 : S16_MR);
        for (q = 0; q < pc; q += S16_NR) {
            const int nc = (int)(pc - q < S16_NR ? pc - q : S16_NR);
#if S16_AVX512 || S16_AVX2
            if (!j->portable && nc > 8)
                core_vector(a, pk + 2 * q, j->k2, 2 * ncols, acc);
            else
#endif
                core_portable(a, pk + 2 * q, j->k2, 2 * ncols, nc, acc);
            epilogue(j, acc, b, g * j->mg + r0, rows, p0 + q, nc);
        }
    }
}

/* Widens w ([groups * mg][k] int8) into [groups][rows4][k2][2] int16, zero-padded. */
static void widen(const int8_t *w, int64_t groups, int64_t mg, int64_t k, int16_t *wide) {
    const int64_t rows4 = MLCC_S16_ROWS(mg), k2 = MLCC_S16_K2(k);
    int64_t g, r, t;
    for (g = 0; g < groups; g++)
        for (r = 0; r < rows4; r++) {
            int16_t *d = wide + (g * rows4 + r) * k2 * 2;
            const int8_t *src = r < mg ? w + (g * mg + r) * k : NULL;
            for (t = 0; t < 2 * k2; t++) d[t] = src && t < k ? (int16_t)src[t] : 0;
        }
}

static void s16_run(s16_job *j, const int8_t *w, uint8_t *scratch, mlcc_threadpool *pool) {
    const size_t wbytes = MLCC_S16_WEIGHT_BYTES(j->groups, j->mg, j->k);
    const double macs = (double)j->batch * (double)j->groups * (double)j->mg *
                        (double)j->cols * (double)j->k;
    int64_t units;
    j->k2 = MLCC_S16_K2(j->k);
    j->chunks = (j->cols + j->chunk_cols - 1) / j->chunk_cols;
    j->wide = (const int16_t *)(const void *)scratch;
    j->slices = scratch + wbytes;
    j->slice_bytes = MLCC_S16_SLICE_BYTES(j->k, j->chunk_cols);
    widen(w, j->groups, j->mg, j->k, (int16_t *)(void *)scratch);
    units = j->batch * j->groups * j->chunks;
    if (units < 1 || j->cols < 1) return;
    /* int16 pairs: 2 multiply-adds per int32 lane, between the float and int8 thresholds */
    if (macs < (double)(2 * MLCC_MIN_PARALLEL_MACS)) pool = NULL;
    /* each unit's outputs are computed whole, exactly: any split gives the same bytes */
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
    j->x = x; j->scale = scale; j->fbias = fbias; j->ep = &p->ep; j->y = y;
}

static void fc_job(s16_job *j, const mlcc_s16_fc_params *p, const int16_t *x,
                   const float *scale, const float *fbias, void *y) {
    memset(j, 0, sizeof *j);
    j->fc = p;
    j->batch = 1;
    j->groups = 1;
    j->mg = p->n;
    j->k = p->k;
    j->cols = p->m;
    j->chunk_cols = p->chunk_cols;
    j->channels = p->n;
    j->x = x; j->scale = scale; j->fbias = fbias; j->ep = &p->ep; j->y = y;
}

void mlcc_s16_conv2d(const mlcc_s16_conv2d_params *p, const int16_t *x, const int8_t *w,
                     const float *scale, const float *fbias, void *y, uint8_t *scratch,
                     mlcc_threadpool *pool) {
    s16_job j;
    conv_job(&j, p, x, scale, fbias, y);
    s16_run(&j, w, scratch, pool);
}

void mlcc_s16_conv2d__portable(const mlcc_s16_conv2d_params *p, const int16_t *x,
                               const int8_t *w, const float *scale, const float *fbias, void *y,
                               uint8_t *scratch, mlcc_threadpool *pool) {
    s16_job j;
    conv_job(&j, p, x, scale, fbias, y);
    j.portable = 1;
    s16_run(&j, w, scratch, pool);
}

void mlcc_s16_fc(const mlcc_s16_fc_params *p, const int16_t *x, const int8_t *w,
                 const float *scale, const float *fbias, void *y, uint8_t *scratch,
                 mlcc_threadpool *pool) {
    s16_job j;
    fc_job(&j, p, x, scale, fbias, y);
    s16_run(&j, w, scratch, pool);
}

void mlcc_s16_fc__portable(const mlcc_s16_fc_params *p, const int16_t *x, const int8_t *w,
                           const float *scale, const float *fbias, void *y, uint8_t *scratch,
                           mlcc_threadpool *pool) {
    s16_job j;
    fc_job(&j, p, x, scale, fbias, y);
    j.portable = 1;
    s16_run(&j, w, scratch, pool);
}

void mlcc_f32_quantize_int16(const mlcc_quantize_params *p, const float *x, int16_t *y) {
    const float s = p->scale, magic = 12582912.0f;
    const int64_t n = p->count;
    int64_t i;
    for (i = 0; i < n; i++) {
        float f = x[i] / s;
        f = f > -32768.0f ? f : -32768.0f;     /* NaN -> -32768 */
        f = f < 32767.0f ? f : 32767.0f;
        f = (f + magic) - magic;                /* round half to even */
        y[i] = (int16_t)(int32_t)f;
    }
}
