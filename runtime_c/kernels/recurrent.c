/* LSTM, GRU and RNN: see recurrent.h and docs/recurrent.md. */
#include "recurrent.h"

#include "gemm.h"

/* The recurrent weights' column panels stay 32 wide on every target (MLCC_GEMM_B_PANEL is 16
 * on 256-bit vectors): at batch 1, product_row runs a panel of 32 as 4 independent chains where
 * one of 16 gave 2 (one panel at a time for matrices over 16 KiB): a BiLSTM of 256 took 1.10x
 * and a BiGRU 1.14x the time in panels of 16 (Zen 3). mlcc/ops/recurrent.py RECURRENT_PANEL. */
#define MLCC_RECURRENT_PANEL 32

/* Floats of a K x N matrix in column panels of MLCC_RECURRENT_PANEL. */
static int64_t panel_floats(int64_t k, int64_t n) {
    return (n + MLCC_RECURRENT_PANEL - 1) / MLCC_RECURRENT_PANEL * MLCC_RECURRENT_PANEL * k;
}

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

#if MLCC_HAVE_VECTORS
/* tanh per lane, within a few ulp of tanhf: Cephes' tanhf (an odd polynomial below 0.625,
 * 1 - 2 / (e^2|x| + 1) above it, with mlcc_vf_exp), the sign restored; NaN stays NaN. */
static inline mlcc_vf vf_tanh(mlcc_vf x) {
    const mlcc_vf zero = mlcc_vf_splat(0.0f), ax = mlcc_vf_select(x < zero, -x, x);
    const mlcc_vf z = x * x;
    mlcc_vf p = z * -5.70498872745e-3f + 2.06390887954e-2f, big;
    p = p * z + -5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z + -3.33332819422e-1f;
    p = p * z * x + x;
    big = 1.0f - 2.0f / (mlcc_vf_exp(ax + ax) + 1.0f);
    big = mlcc_vf_select(x < zero, -big, big);
    return mlcc_vf_select(ax < mlcc_vf_splat(0.625f), p, big);
}

/* Sigmoid or tanh over v[0..n) in vectors, the last partial vector through a padded copy:
 * every element by the same function. Returns 0 for other kinds (done by the scalar loops). */
static int act_apply_vectors(int32_t kind, float *v, int64_t n) {
    float tail[MLCC_VECTOR_BYTES / sizeof(float)];
    int64_t i, r;
    if (kind != MLCC_RNN_ACT_SIGMOID && kind != MLCC_RNN_ACT_TANH) return 0;
    for (i = 0; i < n; i += MLCC_VF_LANES) {
        float *at = v + i;
        mlcc_vf x;
        r = n - i < MLCC_VF_LANES ? n - i : MLCC_VF_LANES;
        if (r < MLCC_VF_LANES) {
            memset(tail, 0, sizeof tail);
            memcpy(tail, at, (size_t)r * sizeof(float));
            at = tail;
        }
        x = mlcc_vf_load(at);
        x = kind == MLCC_RNN_ACT_TANH ? vf_tanh(x) : mlcc_vf_sigmoid(x, 1.0f);
        mlcc_vf_store(at, x);
        if (at == tail) memcpy(v + i, tail, (size_t)r * sizeof(float));
    }
    return 1;
}
#endif

/* v[i] = act(v[i]) for i < n: the switch outside the loops. Sigmoid and tanh, most of a
 * small cell's time, run in vectors where the target has them (within a few ulp of expf and
 * tanhf, which the portable build calls). */
static void act_apply(int32_t kind, float a, float b, float *v, int64_t n) {
    int64_t i;
#if MLCC_HAVE_VECTORS
    if (act_apply_vectors(kind, v, n)) return;
#endif
    switch (kind) {
    case MLCC_RNN_ACT_RELU: for (i = 0; i < n; i++) v[i] = v[i] > 0.0f ? v[i] : 0.0f; break;
    case MLCC_RNN_ACT_TANH: for (i = 0; i < n; i++) v[i] = tanhf(v[i]); break;
    case MLCC_RNN_ACT_SIGMOID:
        for (i = 0; i < n; i++) v[i] = 1.0f / (1.0f + expf(-v[i]));
        break;
    case MLCC_RNN_ACT_AFFINE: for (i = 0; i < n; i++) v[i] = a * v[i] + b; break;
    case MLCC_RNN_ACT_LEAKY_RELU:
        for (i = 0; i < n; i++) v[i] = v[i] >= 0.0f ? v[i] : a * v[i];
        break;
    case MLCC_RNN_ACT_THRESHOLDED_RELU:
        for (i = 0; i < n; i++) v[i] = v[i] > a ? v[i] : 0.0f;
        break;
    case MLCC_RNN_ACT_SCALED_TANH: for (i = 0; i < n; i++) v[i] = a * tanhf(b * v[i]); break;
    case MLCC_RNN_ACT_HARD_SIGMOID:
        for (i = 0; i < n; i++) v[i] = mlcc_clampf(a * v[i] + b, 0.0f, 1.0f);
        break;
    case MLCC_RNN_ACT_ELU:
        for (i = 0; i < n; i++) v[i] = v[i] >= 0.0f ? v[i] : a * (expf(v[i]) - 1.0f);
        break;
    case MLCC_RNN_ACT_SOFTSIGN: for (i = 0; i < n; i++) v[i] = v[i] / (1.0f + fabsf(v[i])); break;
    case MLCC_RNN_ACT_SOFTPLUS: for (i = 0; i < n; i++) v[i] = log1pf(expf(v[i])); break;
    default: break;
    }
}

/* onnxruntime's sigmoid and tanh on x86-64 (MlasComputeLogistic and MlasComputeTanh, its
 * FMA3 kernels): Eigen's rational approximations, x clamped to [-18, 18] (sigmoid) or [-9, 9]
 * (tanh), the polynomials in x^2 by fused multiply-adds, p / q (+ 0.5, at least 0, for
 * sigmoid). A dynamic-quantized LSTM follows them bit for bit (job->ort_arithmetic): it
 * quantizes h to uint8 at every step, so that one ulp of difference can move a code and the
 * error then grows step by step. Checked against onnxruntime's Sigmoid and Tanh on 3e5 inputs
 * (equal). */
static const float ORT_LOG_NUM[] = {4.37031012579801e-11f, 1.15627324459942e-07f,
                                    6.08574864600143e-05f, 8.51377133304701e-03f,
                                    2.48287947061529e-01f};
static const float ORT_LOG_DEN[] = {6.10247389755681e-13f, 5.76102136993427e-09f,
                                    6.29106785017040e-06f, 1.70198817374094e-03f,
                                    1.16817656904453e-01f, 9.93151921023180e-01f};
static const float ORT_TANH_NUM[] = {-2.76076847742355e-16f, 2.00018790482477e-13f,
                                     -8.60467152213735e-11f, 5.12229709037114e-08f,
                                     1.48572235717979e-05f, 6.37261928875436e-04f,
                                     4.89352455891786e-03f};
static const float ORT_TANH_DEN[] = {1.19825839466702e-06f, 1.18534705686654e-04f,
                                     2.26843463243900e-03f, 4.89352518554385e-03f};

static float ort_poly(float x2, const float *c, int n) {
    float p = fmaf(x2, c[0], c[1]);
    int i;
    for (i = 2; i < n; i++) p = fmaf(x2, p, c[i]);
    return p;
}

static float ort_logistic(float x) {
    float v, x2, r;
    x = x > -18.0f ? x : -18.0f;
    x = x < 18.0f ? x : 18.0f;
    x2 = x * x;
    v = x * ort_poly(x2, ORT_LOG_NUM, 5);
    r = v / ort_poly(x2, ORT_LOG_DEN, 6) + 0.5f;
    return r > 0.0f ? r : 0.0f;
}

static float ort_tanh(float x) {
    float x2;
    x = x > -9.0f ? x : -9.0f;
    x = x < 9.0f ? x : 9.0f;
    x2 = x * x;
    return x * ort_poly(x2, ORT_TANH_NUM, 7) / ort_poly(x2, ORT_TANH_DEN, 4);
}

/* The same functions in vectors where the target has a fused multiply-add per lane (one
 * rounding, as fmaf) and IEEE division: every lane gives ort_logistic's and ort_tanh's bits
 * (tests/test_quant_recurrent.py compares them on millions of inputs). The clamps are
 * `x > lo ? x : lo`, as above (x86's max/min keep the second operand on NaN; NEON selects).
 * ORT_KEEP(v): an empty asm that v passes through, so that a product is rounded on its own,
 * never fused with the sum it feeds (-ffp-contract=fast contracts intrinsics too).
 * Elsewhere (no FMA: SSE2, wasm) the scalar loops run, fmaf included. */
#if defined(__AVX512F__) && defined(MLCC_VECTOR_BYTES) && MLCC_VECTOR_BYTES >= 64
#include <immintrin.h>
#define ORT_VECTORS 1
#define ORT_LANES 16
typedef __m512 ort_v;
#define ORT_SET1(c) _mm512_set1_ps(c)
#define ORT_LOAD(p) _mm512_loadu_ps(p)
#define ORT_STORE(p, v) _mm512_storeu_ps((p), (v))
#define ORT_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define ORT_MUL(a, b) _mm512_mul_ps((a), (b))
#define ORT_DIV(a, b) _mm512_div_ps((a), (b))
#define ORT_ADD(a, b) _mm512_add_ps((a), (b))
#define ORT_MAX(x, lo) _mm512_max_ps((x), (lo))
#define ORT_MIN(x, hi) _mm512_min_ps((x), (hi))
#define ORT_KEEP(v) __asm__("" : "+v"(v))
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ORT_VECTORS 1
#define ORT_LANES 8
typedef __m256 ort_v;
#define ORT_SET1(c) _mm256_set1_ps(c)
#define ORT_LOAD(p) _mm256_loadu_ps(p)
#define ORT_STORE(p, v) _mm256_storeu_ps((p), (v))
#define ORT_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define ORT_MUL(a, b) _mm256_mul_ps((a), (b))
#define ORT_DIV(a, b) _mm256_div_ps((a), (b))
#define ORT_ADD(a, b) _mm256_add_ps((a), (b))
#define ORT_MAX(x, lo) _mm256_max_ps((x), (lo))
#define ORT_MIN(x, hi) _mm256_min_ps((x), (hi))
#define ORT_KEEP(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_FMA)
#include <arm_neon.h>
#define ORT_VECTORS 1
#define ORT_LANES 4
typedef float32x4_t ort_v;
#define ORT_SET1(c) vdupq_n_f32(c)
#define ORT_LOAD(p) vld1q_f32(p)
#define ORT_STORE(p, v) vst1q_f32((p), (v))
#define ORT_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define ORT_MUL(a, b) vmulq_f32((a), (b))
#define ORT_DIV(a, b) vdivq_f32((a), (b))
#define ORT_ADD(a, b) vaddq_f32((a), (b))
#define ORT_MAX(x, lo) vbslq_f32(vcgtq_f32((x), (lo)), (x), (lo))
#define ORT_MIN(x, hi) vbslq_f32(vcltq_f32((x), (hi)), (x), (hi))
#define ORT_KEEP(v) __asm__("" : "+w"(v))
#else
#define ORT_VECTORS 0
#endif

#if ORT_VECTORS
static inline ort_v ort_vpoly(ort_v x2, const float *c, int n) {
    ort_v p = ORT_FMA(x2, ORT_SET1(c[0]), ORT_SET1(c[1]));
    int i;
    for (i = 2; i < n; i++) p = ORT_FMA(x2, p, ORT_SET1(c[i]));
    return p;
}

static inline ort_v ort_vlogistic(ort_v x) {
    ort_v x2, v, r;
    x = ORT_MAX(x, ORT_SET1(-18.0f));
    x = ORT_MIN(x, ORT_SET1(18.0f));
    x2 = ORT_MUL(x, x);
    v = ORT_MUL(x, ort_vpoly(x2, ORT_LOG_NUM, 5));
    r = ORT_ADD(ORT_DIV(v, ort_vpoly(x2, ORT_LOG_DEN, 6)), ORT_SET1(0.5f));
    return ORT_MAX(r, ORT_SET1(0.0f));
}

static inline ort_v ort_vtanh(ort_v x) {
    ort_v x2;
    x = ORT_MAX(x, ORT_SET1(-9.0f));
    x = ORT_MIN(x, ORT_SET1(9.0f));
    x2 = ORT_MUL(x, x);
    return ORT_DIV(ORT_MUL(x, ort_vpoly(x2, ORT_TANH_NUM, 7)), ort_vpoly(x2, ORT_TANH_DEN, 4));
}
#endif

/* v[i] = ort_logistic(v[i]) or ort_tanh(v[i]) for i < n: whole vectors, then the rest */
static void ort_logistic_n(float *v, int64_t n) {
    int64_t i = 0;
#if ORT_VECTORS
    for (; i + ORT_LANES <= n; i += ORT_LANES) ORT_STORE(v + i, ort_vlogistic(ORT_LOAD(v + i)));
#endif
    for (; i < n; i++) v[i] = ort_logistic(v[i]);
}

static void ort_tanh_n(float *v, int64_t n) {
    int64_t i = 0;
#if ORT_VECTORS
    for (; i + ORT_LANES <= n; i += ORT_LANES) ORT_STORE(v + i, ort_vtanh(ORT_LOAD(v + i)));
#endif
    for (; i < n; i++) v[i] = ort_tanh(v[i]);
}

/* act_apply, with onnxruntime's sigmoid and tanh where `ort` */
static void act_lstm(int ort, int32_t kind, float a, float b, float *v, int64_t n) {
    if (ort && kind == MLCC_RNN_ACT_SIGMOID)
        ort_logistic_n(v, n);
    else if (ort && kind == MLCC_RNN_ACT_TANH)
        ort_tanh_n(v, n);
    else
        act_apply(kind, a, b, v, n);
}

/* c = f * c + i * g, each product rounded (onnxruntime's order, where `ort`) */
static void cell_update(int ort, float *c, const float *f, const float *i, const float *g,
                        int64_t n) {
    int64_t j = 0;
    if (ort) {
#if ORT_VECTORS
        for (; j + ORT_LANES <= n; j += ORT_LANES) {
            ort_v cf = ORT_MUL(ORT_LOAD(c + j), ORT_LOAD(f + j));
            ort_v ig = ORT_MUL(ORT_LOAD(i + j), ORT_LOAD(g + j));
            ORT_KEEP(cf);    /* each product rounded: no fused multiply-add */
            ORT_KEEP(ig);
            ORT_STORE(c + j, ORT_ADD(cf, ig));
        }
#endif
        for (; j < n; j++) c[j] = mlcc_unfused(c[j] * f[j]) + mlcc_unfused(i[j] * g[j]);
    } else
        for (j = 0; j < n; j++) c[j] = f[j] * c[j] + i[j] * g[j];
}

static void peephole(int ort, float *v, const float *pw, const float *c, int64_t n) {
    int64_t i;
    if (ort)
        for (i = 0; i < n; i++) v[i] += mlcc_unfused(c[i] * pw[i]);
    else
        for (i = 0; i < n; i++) v[i] += pw[i] * c[i];
}

static void clip_all(const mlcc_recurrent_params *p, float *v, int64_t n) {
    int64_t i;
    if (p->has_clip)
        for (i = 0; i < n; i++) v[i] = mlcc_clampf(v[i], -p->clip, p->clip);
}

/* X's row (and the input projections' row) of sequence b at time t. */
static int64_t x_row(const mlcc_recurrent_params *p, int64_t b, int64_t t) {
    return p->layout ? b * p->seq + t : t * p->batch + b;
}

/* Y[t][d][b] (layout 0) or Y[b][t][d] (layout 1) = h, when Y is wanted. */
static void store_y(const mlcc_recurrent_params *p, float *y, const float *h, int64_t b,
                    int64_t t, int64_t d) {
    const int64_t nd = p->num_directions, H = p->hidden;
    if (!y) return;
    memcpy(y + (p->layout ? (b * p->seq + t) * nd + d : (t * nd + d) * p->batch + b) * H, h,
           (size_t)H * sizeof(float));
}

#if MLCC_HAVE_VECTORS
/* Vectors in a panel's row, and the panels product_row runs at once: enough for 8
 * independent chains of FMAs (one panel of 2 vectors was one chain per vector, as long as k:
 * the latency of k FMAs per panel, most of a small LSTM's step). */
#define ROW_VECS (MLCC_RECURRENT_PANEL / MLCC_VF_LANES)
#define ROW_PANELS (ROW_VECS >= 8 ? 1 : 8 / ROW_VECS)
/* ... while the whole matrix takes at most half of a 32 KiB L1 data cache (the smallest of
 * the cores mlcc targets), the rest left to the step's other data: larger ones stream from L2
 * at every step, and there ROW_PANELS streams a panel apart (k x 128 bytes: the same cache
 * sets when k is a multiple of 32) ran slower than one (a CRNN's LSTM of hidden 128, 256 KiB
 * per direction: 1.09x). */
#define ROW_PANELS_MAX_BYTES (16 * 1024)

/* acc = a[k] times panels q0..q0+nq of B (nq <= ROW_PANELS, inlined with a constant nq) */
static inline void panels_row(int64_t nq, int64_t k, const float *a, const float *panels,
                              mlcc_vf *acc) {
    int64_t p, v;
    for (v = 0; v < nq * ROW_VECS; v++) acc[v] = mlcc_vf_splat(0.0f);
    for (p = 0; p < k; p++) {
        const mlcc_vf ap = mlcc_vf_splat(a[p]);
        for (v = 0; v < nq * ROW_VECS; v++)
            acc[v] += ap * mlcc_vf_load(panels + (v / ROW_VECS * k + p) * MLCC_RECURRENT_PANEL +
                                        v % ROW_VECS * MLCC_VF_LANES);
    }
}
#endif

/* c[n] = a[k] times B (k x n, panels) plus bias: the recurrent product of a batch of one,
 * where the panel GEMM would fill one row of its register tile. The sums of each column in
 * k order; with vectors, ROW_PANELS panels at a time, each vector an accumulator of its own
 * (the same sums: only their interleaving changes). */
static void product_row(int64_t n, int64_t k, const float *a, const float *b_panels,
                        const float *bias, float *c) {
    int64_t jp, p, j;
#if MLCC_HAVE_VECTORS
    const int64_t panels = (n + MLCC_RECURRENT_PANEL - 1) / MLCC_RECURRENT_PANEL;
    const int64_t at_once = panels * k * MLCC_RECURRENT_PANEL * (int64_t)sizeof(float) <=
                            ROW_PANELS_MAX_BYTES ? ROW_PANELS : 1;
    int64_t q0;
    for (q0 = 0; q0 < panels; q0 += at_once) {
        const int64_t nq = panels - q0 < at_once ? panels - q0 : at_once;
        mlcc_vf acc[ROW_PANELS * ROW_VECS];
        float out[MLCC_RECURRENT_PANEL];
        int64_t q;
        if (nq == ROW_PANELS)
            panels_row(ROW_PANELS, k, a, b_panels + q0 * k * MLCC_RECURRENT_PANEL, acc);
        else
            for (q = 0; q < nq; q++)
                panels_row(1, k, a, b_panels + (q0 + q) * k * MLCC_RECURRENT_PANEL,
                           acc + q * ROW_VECS);
        for (q = 0; q < nq; q++) {
            const int64_t w = n - (q0 + q) * MLCC_RECURRENT_PANEL;
            jp = (q0 + q) * MLCC_RECURRENT_PANEL;
            memcpy(out, acc + q * ROW_VECS, sizeof out);
            for (j = 0; j < (w < MLCC_RECURRENT_PANEL ? w : MLCC_RECURRENT_PANEL); j++)
                c[jp + j] = bias ? out[j] + bias[jp + j] : out[j];
        }
    }
    (void)p;
#else
    for (jp = 0; jp < n; jp += MLCC_RECURRENT_PANEL) {
        const float *panel = b_panels + jp * k;
        const int64_t w = n - jp < MLCC_RECURRENT_PANEL ? n - jp : MLCC_RECURRENT_PANEL;
        float acc[MLCC_RECURRENT_PANEL];
        for (j = 0; j < MLCC_RECURRENT_PANEL; j++) acc[j] = 0.0f;
        for (p = 0; p < k; p++) {
            const float ap = a[p];
            const float *row = panel + p * MLCC_RECURRENT_PANEL;
            for (j = 0; j < MLCC_RECURRENT_PANEL; j++) acc[j] += ap * row[j];
        }
        for (j = 0; j < w; j++) c[jp + j] = bias ? acc[j] + bias[jp + j] : acc[j];
    }
#endif
}

/* C[m x n] = A[m x k] (rows of a_stride floats) times B (k x n, panels), plus bias rows. The
 * path depends on the shape alone, never on the pool, so the bits do not depend on threads. */
static void product(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_stride,
                    const float *b_panels, const float *bias, float *c,
                    mlcc_threadpool *pool) {
    mlcc_gemm_params g;
    if (m == 1 && n * k < MLCC_MIN_PARALLEL_MACS) {
        product_row(n, k, a, b_panels, bias, c);
        return;
    }
    memset(&g, 0, sizeof g);
    g.m = m;
    g.n = n;
    g.k = k;
    g.a_row_stride = a_stride;
    g.a_col_stride = 1;
    g.ldb = n;
    g.ldc = n;
    g.bias_row_stride = 0;
    g.bias_col_stride = 1;
    g.alpha = 1.0f;
    g.beta = bias ? 1.0f : 0.0f;
    g.act.kind = MLCC_ACT_NONE;
    mlcc_f32_gemm__panels_of_threaded(&g, a, b_panels, MLCC_RECURRENT_PANEL, bias, c, pool);
}

/* Steps 2 and 3 of direction d: every time step's recurrent product and gates, then Y_h, Y_c. */
static void run_direction(const mlcc_recurrent_job *job, int64_t d) {
    const mlcc_recurrent_params *p = job->p;
    const int64_t S = p->seq, B = p->batch, H = p->hidden, ND = p->num_directions;
    const int is_lstm = p->cell == MLCC_RNN_CELL_LSTM, is_gru = p->cell == MLCC_RNN_CELL_GRU;
    const int64_t G = is_lstm ? 4 : is_gru ? 3 : 1;
    const int64_t GH = G * H;
    /* the first recurrent product's columns (GRU: z and r), and the per-direction panels */
    const int64_t n0 = is_gru ? 2 * H : GH;
    const int64_t r0_floats = panel_floats(H, n0);
    const int64_t r_dir_floats = r0_floats + (is_gru ? panel_floats(H, H) : 0);
    const float *xw = job->xw, *rbh = job->rbh;
    const int32_t *seq_lens = job->seq_lens;
    float *y = job->y;
    mlcc_threadpool *pool = job->pool;
    float *gates = job->state + d * job->state_floats;    /* [B][GH] */
    float *h = gates + round16(B * GH);                   /* [B][H] */
    float *c = h + round16(B * H);                        /* [B][H] */
    float *tmp = c + round16(B * H);                      /* [B][H] (GRU: r * h) */
    float *hh = tmp + round16(B * H);                     /* [B][H] (GRU: the h product) */
    const int rev = d == 1 || p->reverse;
    const int32_t *kind = p->act_kind + d * MLCC_RNN_MAX_ACTS;
    const float *al = p->act_alpha + d * MLCC_RNN_MAX_ACTS;
    const float *be = p->act_beta + d * MLCC_RNN_MAX_ACTS;
    const float *rp = job->r_panels + d * r_dir_floats;
    const float *pw = job->peep ? job->peep + d * 3 * H : NULL;   /* i, o, f */
    const int ort = job->ort_arithmetic;
    int64_t b, s, j;
    for (b = 0; b < B; b++) {
        const int64_t st = p->layout ? (b * ND + d) * H : (d * B + b) * H;
        if (job->init_h) memcpy(h + b * H, job->init_h + st, (size_t)H * sizeof(float));
        else memset(h + b * H, 0, (size_t)H * sizeof(float));
        if (is_lstm) {
            if (job->init_c) memcpy(c + b * H, job->init_c + st, (size_t)H * sizeof(float));
            else memset(c + b * H, 0, (size_t)H * sizeof(float));
        }
    }
    for (s = 0; s < S; s++) {
        /* 2. the recurrent product of every sequence of the batch (or the job's own step:
         * the input projection included) */
        if (job->step) job->step(job->step_ctx, d, s, h, gates, pool);
        else product(B, n0, H, h, H, rp, NULL, gates, pool);
        /* 3. the gates (GRU: z and r, then its h gate after its second product) */
        for (b = 0; b < B; b++) {
            const int64_t len = seq_lens ? seq_lens[b] : S;
            float *g = gates + b * n0, *hb = h + b * H, *cb = c + b * H;
            const float *xr;
            if (s >= len) {   /* this sequence has ended: its state stays */
                if (is_gru) memset(tmp + b * H, 0, (size_t)H * sizeof(float));
                continue;
            }
            xr = job->step ? (job->gate_bias ? job->gate_bias + d * GH : NULL)
                           : xw + x_row(p, b, rev ? len - 1 - s : s) * ND * GH + d * GH;
            if (is_lstm) {
                float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
                /* onnxruntime adds the bias after the peepholes: xr (the bias) then waits */
                const float *late = ort && pw ? xr : NULL;
                if (xr && !late)
                    for (j = 0; j < GH; j++) g[j] += xr[j];
                if (!pw && !p->input_forget) {
                    /* i, o and f, contiguous, take the same function and, with no
                     * peepholes, do not wait for c: one pass over the three */
                    clip_all(p, g, GH);
                    act_lstm(ort, kind[0], al[0], be[0], g, 3 * H);
                    act_lstm(ort, kind[1], al[1], be[1], gc, H);
                    cell_update(ort, cb, gf, gi, gc, H);
                } else {
                    if (pw) {
                        peephole(ort, gi, pw, cb, H);
                        peephole(ort, gf, pw + 2 * H, cb, H);
                    }
                    if (late) {
                        for (j = 0; j < H; j++) gi[j] += late[j];
                        for (j = 0; j < H; j++) gf[j] += late[2 * H + j];
                        for (j = 0; j < H; j++) gc[j] += late[3 * H + j];
                    }
                    clip_all(p, gi, H);
                    clip_all(p, gf, H);
                    clip_all(p, gc, H);
                    act_lstm(ort, kind[0], al[0], be[0], gi, H);
                    if (p->input_forget)
                        for (j = 0; j < H; j++) gf[j] = 1.0f - gi[j];
                    else
                        act_lstm(ort, kind[0], al[0], be[0], gf, H);
                    act_lstm(ort, kind[1], al[1], be[1], gc, H);
                    cell_update(ort, cb, gf, gi, gc, H);
                    if (pw) peephole(ort, go, pw + H, cb, H);
                    if (late)
                        for (j = 0; j < H; j++) go[j] += late[H + j];
                    clip_all(p, go, H);
                    act_lstm(ort, kind[0], al[0], be[0], go, H);
                }
                memcpy(gc, cb, (size_t)H * sizeof(float));
                act_lstm(ort, kind[2], al[2], be[2], gc, H);
                for (j = 0; j < H; j++) hb[j] = go[j] * gc[j];
            } else if (is_gru) {
                for (j = 0; j < 2 * H; j++) g[j] += xr[j];
                clip_all(p, g, 2 * H);
                act_apply(kind[0], al[0], be[0], g, 2 * H);
                if (!p->linear_before_reset)
                    for (j = 0; j < H; j++) tmp[b * H + j] = g[H + j] * hb[j];
                continue;
            } else {
                for (j = 0; j < H; j++) g[j] += xr[j];
                clip_all(p, g, H);
                act_apply(kind[0], al[0], be[0], g, H);
                memcpy(hb, g, (size_t)H * sizeof(float));
            }
            store_y(p, y, hb, b, rev ? len - 1 - s : s, d);
        }
        if (!is_gru) continue;
        /* GRU's h gate: (r * h) R_h^T, or h R_h^T inside the reset (linear_before_reset) */
        product(B, H, H, p->linear_before_reset ? h : tmp, H, rp + r0_floats, NULL, hh,
                pool);
        for (b = 0; b < B; b++) {
            const int64_t len = seq_lens ? seq_lens[b] : S;
            const float *g = gates + b * n0, *rb = rbh ? rbh + d * H : NULL;
            float *hb = h + b * H, *hc = hh + b * H;
            const float *xr;
            if (s >= len) continue;
            xr = xw + x_row(p, b, rev ? len - 1 - s : s) * ND * GH + d * GH + 2 * H;
            if (p->linear_before_reset)
                for (j = 0; j < H; j++)
                    hc[j] = xr[j] + g[H + j] * (hc[j] + (rb ? rb[j] : 0.0f));
            else
                for (j = 0; j < H; j++) hc[j] += xr[j] + (rb ? rb[j] : 0.0f);
            clip_all(p, hc, H);
            act_apply(kind[1], al[1], be[1], hc, H);
            for (j = 0; j < H; j++) hb[j] = (1.0f - g[j]) * hc[j] + g[j] * hb[j];
            store_y(p, y, hb, b, rev ? len - 1 - s : s, d);
        }
    }
    for (b = 0; b < B; b++) {
        const int64_t len = seq_lens ? seq_lens[b] : S;
        const int64_t st = p->layout ? (b * ND + d) * H : (d * B + b) * H;
        int64_t t;
        if (y)   /* past the sequence's end */
            for (t = len; t < S; t++)
                memset(y + (p->layout ? (b * S + t) * ND + d : (t * ND + d) * B + b) * H, 0,
                       (size_t)H * sizeof(float));
        /* a sequence of length 0 has zero states, not its initial ones (onnxruntime) */
        if (job->y_h && len > 0) memcpy(job->y_h + st, h + b * H, (size_t)H * sizeof(float));
        if (job->y_h && len == 0) memset(job->y_h + st, 0, (size_t)H * sizeof(float));
        if (job->y_c && is_lstm && len > 0)
            memcpy(job->y_c + st, c + b * H, (size_t)H * sizeof(float));
        if (job->y_c && is_lstm && len == 0) memset(job->y_c + st, 0, (size_t)H * sizeof(float));
    }
}

static void direction_unit(void *arg, int unit, int thread) {
    (void)thread;
    run_direction((const mlcc_recurrent_job *)arg, unit);
}

int64_t mlcc_recurrent_state_floats(const mlcc_recurrent_params *p) {
    const int64_t G = p->cell == MLCC_RNN_CELL_LSTM ? 4 : p->cell == MLCC_RNN_CELL_GRU ? 3 : 1;
    return round16(p->batch * G * p->hidden) + 4 * round16(p->batch * p->hidden);
}

void mlcc_recurrent_directions(mlcc_recurrent_job *job, mlcc_threadpool *pool) {
    int64_t d;
    job->state_floats = mlcc_recurrent_state_floats(job->p);
    /* 2-3. the two directions of a bidirectional layer are independent: one thread each
     * (their steps are too small to split), each with its own state */
    if (job->p->num_directions == 2 && mlcc_threadpool_size(pool) > 1) {
        job->pool = NULL;
        mlcc_threadpool_for(pool, direction_unit, job, 2, 2);
    } else {
        job->pool = pool;
        for (d = 0; d < job->p->num_directions; d++) run_direction(job, d);
    }
}

int mlcc_f32_recurrent(const mlcc_recurrent_params *p, const float *x, const float *w_panels,
                       const float *r_panels, const float *bias, const float *rbh,
                       const float *peep, const int32_t *seq_lens, const float *init_h,
                       const float *init_c, float *y, float *y_h, float *y_c, float *scratch,
                       mlcc_threadpool *pool) {
    const int64_t S = p->seq, B = p->batch, I = p->input, H = p->hidden;
    const int64_t ND = p->num_directions;
    const int64_t G = p->cell == MLCC_RNN_CELL_LSTM ? 4 : p->cell == MLCC_RNN_CELL_GRU ? 3 : 1;
    const int64_t GH = G * H;
    /* the input projections [S * B][ND * GH]: computed into the scratch, or given as x */
    float *proj = w_panels ? scratch : NULL;
    mlcc_recurrent_job job;
    int64_t b;

    if (seq_lens)
        for (b = 0; b < B; b++)
            if (seq_lens[b] < 0 || seq_lens[b] > S) return MLCC_ERR_INDEX_OUT_OF_RANGE;

    /* 1. the input projections of every step and direction: rows in X's order (with no
     * w_panels, x holds them already: the int8 product of the quantized model) */
    if (w_panels) product(S * B, ND * GH, I, x, I, w_panels, bias, proj, pool);

    memset(&job, 0, sizeof job);
    job.p = p;
    job.xw = w_panels ? proj : x;
    job.r_panels = r_panels;
    job.rbh = rbh;
    job.peep = peep;
    job.init_h = init_h;
    job.init_c = init_c;
    job.seq_lens = seq_lens;
    job.y = y;
    job.y_h = y_h;
    job.y_c = y_c;
    job.state = scratch + (w_panels ? round16(S * B * ND * GH) : 0);
    mlcc_recurrent_directions(&job, pool);
    return MLCC_OK;
}
