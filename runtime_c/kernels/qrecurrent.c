/* DynamicQuantizeLSTM: see qrecurrent.h. */
#include "qrecurrent.h"

#include "qelem.h"

#if defined(__AVX512F__) && defined(MLCC_VECTOR_BYTES) && MLCC_VECTOR_BYTES >= 64
#include <immintrin.h>
#define DQ_GATES_AVX512 1     /* step_gates */
#else
#define DQ_GATES_AVX512 0
#endif

static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

/* Bytes of one direction's step buffers: h's codes, their rows padded for mlcc_u8_fc, the
 * per-column int32 start of the product and its int32 result. */
static int64_t step_bytes(const mlcc_recurrent_params *r) {
    const int64_t B = r->batch, H = r->hidden;
    return round64(B * H) + round64(B * 4 * ((H + 3) / 4)) + round64(4 * 4 * H) +
           round64(4 * B * 4 * H);
}

/* What the steps of every direction read (dq_step). */
typedef struct dq_steps {
    const mlcc_dynamic_quantize_lstm_params *p;
    const int8_t *r_packed;
    const int32_t *colsum;     /* R's [num_directions * 4H] */
    const float *scale;        /* R's [num_directions * 4H] */
    const float *proj;         /* [max_len * batch][num_directions * 4H] */
    const int32_t *seq_lens;
    int64_t max_len;
    int y_wanted;
    uint8_t *buffers;          /* per direction, step_bytes */
} dq_steps;

/* The product of codes x[m][k] with packed codes (their column sums' correction `start` per
 * column, computed by the caller) as exact int32 sums: mlcc_u8_fc with an int32 output. */
static void integer_product(int64_t m, int64_t n, int64_t k, const uint8_t *x,
                            const int8_t *packed, const int32_t *start, int32_t *acc,
                            uint8_t *pad, mlcc_threadpool *pool) {
    mlcc_qfc_params f;
    memset(&f, 0, sizeof f);
    f.m = m;
    f.n = n;
    f.k = k;
    f.rq.out_kind = MLCC_QOUT_S32;
    mlcc_u8_fc(&f, x, packed, start, NULL, NULL, NULL, NULL, acc, pad, pool);
}

/* The step's product of few rows (a batch of one, usually): mlcc_u8_fc's tiles are 8 rows
 * (or 4) and one 16-column vector wide, so with one row 3/4 of their multiply-adds repeat it
 * and each column vector runs one chain of dependent sums. Here, with AVX512-VNNI, one row
 * at a time against DQ_COLS columns: 16 independent accumulators, R's packed rows read as
 * 1 KiB runs. The same int32 sums (vpdpbusd does not saturate), so the same bits. */
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#include <immintrin.h>
#define DQ_GEMV 1
#define DQ_VECS 16
#define DQ_COLS (16 * DQ_VECS)
#define DQ_GEMV_MAX_ROWS 4    /* more rows: mlcc_u8_fc, which reads R once per 8 rows */

/* h's codes a[4 kk .. 4 kk + 4) in every int32 lane */
static inline __m512i codes4(const uint8_t *a, int64_t kk) {
    int32_t a4;
    memcpy(&a4, a + 4 * kk, 4);
    return _mm512_set1_epi32(a4);
}

/* acc[j0..j0 + DQ_COLS) = start + a (4 * k4 codes) times the packed columns j0.., all < n:
 * sixteen named accumulators (in an array, GCC copied them between registers at every k) */
#define DQ_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) \
    X(14) X(15)
#define DQ_DECL(v) __m512i c##v = _mm512_loadu_si512((const void *)(start + j0 + 16 * v));
#define DQ_STEP(v) \
    c##v = _mm512_dpbusd_epi32(c##v, av, _mm512_loadu_si512((const void *)(row + 64 * v)));
#define DQ_STORE(v) _mm512_storeu_si512((void *)(acc + j0 + 16 * v), c##v);
static void gemv_full(int64_t n, int64_t k4, const uint8_t *a, const int8_t *packed,
                      const int32_t *start, int64_t j0, int32_t *acc) {
    const int8_t *bj = packed + j0 * 4;
    int64_t kk;
    DQ_EACH(DQ_DECL)
    for (kk = 0; kk < k4; kk++) {
        const int8_t *row = bj + kk * n * 4;
        const __m512i av = codes4(a, kk);
        DQ_EACH(DQ_STEP)
    }
    DQ_EACH(DQ_STORE)
}

/* The same for the last columns (fewer than DQ_COLS), by masks */
static void gemv_part(int64_t n, int64_t k4, const uint8_t *a, const int8_t *packed,
                      const int32_t *start, int64_t j0, int32_t *acc) {
    __m512i c[DQ_VECS];
    __mmask16 m[DQ_VECS];
    const int8_t *bj = packed + j0 * 4;
    int64_t v, kk;
    for (v = 0; v < DQ_VECS; v++) {
        const int64_t left = n - j0 - 16 * v;
        m[v] = (__mmask16)(left >= 16 ? 0xFFFFu : left <= 0 ? 0u : (1u << left) - 1u);
        c[v] = _mm512_maskz_loadu_epi32(m[v], start + j0 + 16 * v);
    }
    for (kk = 0; kk < k4; kk++) {
        const int8_t *row = bj + kk * n * 4;
        const __m512i av = codes4(a, kk);
        for (v = 0; v < DQ_VECS; v++)
            c[v] = _mm512_dpbusd_epi32(c[v], av, _mm512_maskz_loadu_epi32(m[v], row + 64 * v));
    }
    for (v = 0; v < DQ_VECS; v++) _mm512_mask_storeu_epi32(acc + j0 + 16 * v, m[v], c[v]);
}
#elif defined(__AVX2__)
/* AVX2 without VNNI: vpmaddubsw would saturate (255 * -128 * 2), so R's codes widen to int16
 * and vpmaddwd sums pairs of exact products into int32 (at most 2 * 255 * 128): per k4, a
 * vector holds 4 columns' pair sums [c0 (k0 + k1), c0 (k2 + k3), c1 ...]; the pairs are added
 * at the end. The same int32 sums. */
#include <immintrin.h>
#define DQ_GEMV 1
#define DQ_COLS 32             /* 8 vectors of 4 columns' pairs */
#define DQ_GEMV_MAX_ROWS 4

static void gemv_full(int64_t n, int64_t k4, const uint8_t *a, const int8_t *packed,
                      const int32_t *start, int64_t j0, int32_t *acc) {
    __m256i c[8];
    const int8_t *bj = packed + j0 * 4;
    int64_t v, kk;
    for (v = 0; v < 8; v++) c[v] = _mm256_setzero_si256();
    for (kk = 0; kk < k4; kk++) {
        const int8_t *row = bj + kk * n * 4;
        const uint8_t *ak = a + 4 * kk;
        const __m256i av = _mm256_set1_epi64x((int64_t)((uint64_t)ak[0] |
                                                        (uint64_t)ak[1] << 16 |
                                                        (uint64_t)ak[2] << 32 |
                                                        (uint64_t)ak[3] << 48));
        for (v = 0; v < 8; v++)
            c[v] = _mm256_add_epi32(c[v], _mm256_madd_epi16(_mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(const void *)(row + 16 * v))), av));
    }
    for (v = 0; v < 8; v += 2) {
        /* per 128-bit lane [c0 c1 c4 c5 | c2 c3 c6 c7], then the 64-bit pairs in order */
        const __m256i h = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c[v], c[v + 1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(void *)(acc + j0 + 4 * v), _mm256_add_epi32(
            h, _mm256_loadu_si256((const __m256i *)(const void *)(start + j0 + 4 * v))));
    }
}

/* The last columns (fewer than DQ_COLS), one at a time */
static void gemv_part(int64_t n, int64_t k4, const uint8_t *a, const int8_t *packed,
                      const int32_t *start, int64_t j0, int32_t *acc) {
    int64_t j, kk, r;
    for (j = j0; j < n; j++) {
        int32_t sum = start[j];
        for (kk = 0; kk < k4; kk++)
            for (r = 0; r < 4; r++) sum += (int32_t)a[4 * kk + r] * packed[(kk * n + j) * 4 + r];
        acc[j] = sum;
    }
}
#else
#define DQ_GEMV 0
#endif

#if DQ_GEMV
typedef struct dq_gemv {
    int64_t m, n, k4;
    const uint8_t *a;          /* m rows of 4 * k4 codes */
    const int8_t *packed;
    const int32_t *start;
    int32_t *acc;              /* m rows of n */
} dq_gemv;

/* Columns [unit * DQ_COLS, + DQ_COLS) of every row */
static void gemv_unit(void *arg, int unit, int thread) {
    const dq_gemv *g = (const dq_gemv *)arg;
    const int64_t j0 = (int64_t)unit * DQ_COLS;
    int64_t i;
    (void)thread;
    for (i = 0; i < g->m; i++) {
        if (g->n - j0 >= DQ_COLS)
            gemv_full(g->n, g->k4, g->a + i * 4 * g->k4, g->packed, g->start, j0,
                      g->acc + i * g->n);
        else
            gemv_part(g->n, g->k4, g->a + i * 4 * g->k4, g->packed, g->start, j0,
                      g->acc + i * g->n);
    }
}
#endif

/* The step's product: integer_product's result (the same int32 sums), by gemv_unit where it
 * runs. pad: m * 4 * ceil(k / 4) bytes. */
static void step_product(int64_t m, int64_t n, int64_t k, const uint8_t *x,
                         const int8_t *packed, const int32_t *start, int32_t *acc,
                         uint8_t *pad, mlcc_threadpool *pool) {
#if DQ_GEMV
    if (m <= DQ_GEMV_MAX_ROWS) {
        const int64_t k4 = (k + 3) / 4;
        const int64_t units = (n + DQ_COLS - 1) / DQ_COLS;
        int64_t i, threads = mlcc_threadpool_size(pool);
        dq_gemv g;
        if (k % 4 != 0) {
            for (i = 0; i < m; i++) {
                memcpy(pad + i * 4 * k4, x + i * k, (size_t)k);
                memset(pad + i * 4 * k4 + k, 0, (size_t)(4 * k4 - k));
            }
            x = pad;
        }
        g.m = m; g.n = n; g.k4 = k4; g.a = x; g.packed = packed; g.start = start; g.acc = acc;
        if ((double)m * (double)n * (double)k < (double)MLCC_MIN_PARALLEL_INT8_MACS)
            threads = 1;
        if (threads > units) threads = units;
        mlcc_threadpool_for(threads > 1 ? pool : NULL, gemv_unit, &g, (int)units,
                            threads > 1 ? (int)threads : 1);
        return;
    }
#endif
    integer_product(m, n, k, x, packed, start, acc, pad, pool);
}

/* Quantizes v[0..n) with the range [lo, hi] to codes; returns the zero point, *scale. */
static int32_t quantize(const float *v, int64_t n, float lo, float hi, uint8_t *codes,
                        float *scale) {
    mlcc_quantize_params q;
    q.count = n;
    mlcc_dynamic_qparams(lo, hi, &q.scale, &q.zero_point);
    mlcc_f32_quantize(&q, v, codes, NULL);
    *scale = q.scale;
    return q.zero_point;
}

static int32_t row_sum(const uint8_t *codes, int64_t k) {
    int32_t s = 0;
    int64_t i;
    for (i = 0; i < k; i++) s += codes[i];
    return s;
}

/* g[j] = (float)(acc[j] + corr) * (hs * rs[j]) + xr[j] for j < n: onnxruntime's product
 * times the multiplier, rounded, then + the projection (not fused). With AVX-512 16 lanes at
 * a time, the product kept from the sum by an empty asm (-ffp-contract=fast fuses
 * intrinsics too): the same operations per element, the same bits. */
static void step_gates(int64_t n, const int32_t *acc, int32_t corr, float hs, const float *rs,
                       const float *xr, float *g) {
    int64_t j = 0;
#if DQ_GATES_AVX512
    const __m512 hv = _mm512_set1_ps(hs);
    const __m512i cv = _mm512_set1_epi32(corr);
    for (; j + 16 <= n; j += 16) {
        const __m512 m = _mm512_mul_ps(hv, _mm512_loadu_ps(rs + j));
        __m512 v = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_add_epi32(
                _mm512_loadu_si512((const void *)(acc + j)), cv)), m);
        __asm__("" : "+v"(v));
        _mm512_storeu_ps(g + j, _mm512_add_ps(v, _mm512_loadu_ps(xr + j)));
    }
#endif
    for (; j < n; j++) {
        const float m = hs * rs[j];
        g[j] = mlcc_unfused((float)(acc[j] + corr) * m) + xr[j];
    }
}

/* Step s of direction d (mlcc_recurrent_step_fn): gates = proj + h R^T, h quantized. */
static void dq_step(const void *arg, int64_t d, int64_t s, const float *h, float *gates,
                    mlcc_threadpool *pool) {
    const dq_steps *q = (const dq_steps *)arg;
    const mlcc_recurrent_params *r = &q->p->r;
    const int64_t B = r->batch, H = r->hidden, GH = 4 * H, N = r->num_directions * GH;
    const int64_t k4 = (H + 3) / 4;
    uint8_t *codes = q->buffers + d * step_bytes(r);
    uint8_t *pad = codes + round64(B * H);
    int32_t *start = (int32_t *)(pad + round64(B * 4 * k4));
    int32_t *acc = start + round64(4 * GH) / 4;
    const int32_t *colsum = q->colsum + d * GH;
    const float *rs = q->scale + d * GH;
    const int32_t off = q->p->r_offset[d];
    const int rev = d == 1 || r->reverse;
    float lo = 0.0f, hi = 0.0f, hs;
    int32_t hz;
    int64_t b, j;
    if (s >= q->max_len) return;       /* every sequence has ended */
    for (b = 0; b < B; b++) {
        const int64_t len = q->seq_lens ? q->seq_lens[b] : r->seq;
        if (!q->y_wanted || s <= len) mlcc_f32_widen_range(h + b * H, H, &lo, &hi);
    }
    hz = quantize(h, B * H, lo, hi, codes, &hs);
    for (j = 0; j < GH; j++) start[j] = -hz * colsum[j];
    step_product(B, GH, H, codes, q->r_packed + d * 4 * k4 * GH, start, acc, pad, pool);
    for (b = 0; b < B; b++) {
        const int64_t len = q->seq_lens ? q->seq_lens[b] : r->seq;
        const float *xr;
        const int32_t *ab = acc + b * GH;
        float *g = gates + b * GH;
        int32_t corr;
        if (s >= len) continue;
        xr = q->proj + ((rev ? len - 1 - s : s) * B + b) * N + d * GH;
        corr = off ? off * row_sum(codes + b * H, H) : 0;
        step_gates(GH, ab, corr, hs, rs, xr, g);
    }
}

int mlcc_f32_dynamic_quantize_lstm(const mlcc_dynamic_quantize_lstm_params *p, const float *x,
                                   const int8_t *w_packed, const int8_t *r_packed,
                                   const int32_t *colsum, const float *scale, const float *bias,
                                   const float *peep, const int32_t *seq_lens,
                                   const float *init_h, const float *init_c, float *y,
                                   float *y_h, float *y_c, void *scratch,
                                   mlcc_threadpool *pool) {
    const mlcc_recurrent_params *r = &p->r;
    const int64_t S = r->seq, B = r->batch, I = r->input, H = r->hidden;
    const int64_t ND = r->num_directions, GH = 4 * H, N = ND * GH;
    const int64_t k4 = (I + 3) / 4;
    uint8_t *at = (uint8_t *)scratch;
    float *proj = (float *)at;
    uint8_t *xcodes = at + round64(4 * S * B * N);
    uint8_t *xpad = xcodes + round64(S * B * I);
    int32_t *start = (int32_t *)(xpad + round64(S * B * 4 * k4));
    float *state = (float *)((uint8_t *)start + round64(4 * N));
    dq_steps steps;
    mlcc_recurrent_job job;
    int64_t b, i, j, max_len = S, rows;
    int any_offset = p->w_offset[0] != 0 || (ND == 2 && p->w_offset[1] != 0);

    if (seq_lens) {
        max_len = 0;
        for (b = 0; b < B; b++) {
            if (seq_lens[b] < 0 || seq_lens[b] > S) return MLCC_ERR_INDEX_OUT_OF_RANGE;
            if (seq_lens[b] > max_len) max_len = seq_lens[b];
        }
    }
    /* 1. the input projections of the rows that run, both directions at once (their rows
     * hold the same values, quantized alike) */
    rows = max_len * B;
    if (rows > 0) {
        float lo = 0.0f, hi = 0.0f, xs;
        int32_t xz;
        mlcc_f32_widen_range(x, rows * I, &lo, &hi);
        xz = quantize(x, rows * I, lo, hi, xcodes, &xs);
        for (j = 0; j < N; j++) start[j] = -xz * colsum[j];
        /* int32 sums in proj's bytes, turned into floats in place (memcpy: no aliasing) */
        integer_product(rows, N, I, xcodes, w_packed, start, (int32_t *)(void *)proj, xpad,
                        pool);
        for (i = 0; i < rows; i++) {
            const int32_t rs = any_offset ? row_sum(xcodes + i * I, I) : 0;
            int64_t d;
            for (d = 0; d < ND; d++) {   /* the direction's offset outside: a loop of vectors */
                float *pr = proj + i * N + d * GH;
                const float *sc = scale + d * GH;
                const int32_t add = p->w_offset[d] * rs;
                for (j = 0; j < GH; j++) {
                    const float m = xs * sc[j];
                    int32_t a;
                    memcpy(&a, pr + j, sizeof a);
                    pr[j] = (float)(a + add) * m;
                }
            }
        }
    }
    /* 2-3. the steps */
    steps.p = p;
    steps.r_packed = r_packed;
    steps.colsum = colsum + N;
    steps.scale = scale + N;
    steps.proj = proj;
    steps.seq_lens = seq_lens;
    steps.max_len = max_len;
    steps.y_wanted = y != NULL;
    steps.buffers = (uint8_t *)state + round64(4 * ND * mlcc_recurrent_state_floats(r));
    memset(&job, 0, sizeof job);
    job.p = r;
    job.xw = proj;
    job.peep = peep;
    job.init_h = init_h;
    job.init_c = init_c;
    job.seq_lens = seq_lens;
    job.y = y;
    job.y_h = y_h;
    job.y_c = y_c;
    job.state = state;
    job.step = dq_step;
    job.step_ctx = &steps;
    job.gate_bias = bias;
    job.ort_arithmetic = 1;
    mlcc_recurrent_directions(&job, pool);
    return MLCC_OK;
}
