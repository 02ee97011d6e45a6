#include "softmax.h"

#define TILE 64
#define LANES 8
#define BLOCK 512

/* exp(x) for x <= 0, the only arguments softmax needs (x - max): relative error < 1e-7 (about
 * 1.5 ulp) down to x = -87.3, 0 below (where exp is subnormal or 0) and for -inf; NaN stays
 * NaN. Branch-free (Cody-Waite range reduction, Cephes polynomial, exponent built from bits)
 * so that loops over it vectorize, unlike calls to expf. */
static float exp_neg(float x) {
    const float round_magic = 12582912.0f;   /* 1.5 * 2^23: adding it rounds to an integer */
    float n, r, q, y;
    uint32_t bits, keep;
    int32_t k;
    n = x * 1.44269504088896341f + round_magic;
    memcpy(&bits, &n, sizeof bits);
    k = (int32_t)(bits - 0x4B400000u);        /* round(x / ln 2); wraps harmlessly for huge x */
    k = k < -127 ? -127 : k;                  /* (no upper clamp: x <= 0) */
    keep = 0u - (uint32_t)(k > -127);         /* all ones unless the result underflows */
    n = (float)k;
    r = x - n * 0.693359375f;                 /* x - k ln 2, ln 2 split in two parts */
    r = r + n * 2.12194440e-4f;
    q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    q = q * r * r + r + 1.0f;                 /* exp(r), |r| <= ln 2 / 2 */
    bits = (uint32_t)(k + 127) << 23;         /* 2^k */
    memcpy(&y, &bits, sizeof y);
    y *= q;
    memcpy(&bits, &y, sizeof bits);
    bits &= keep;
    memcpy(&y, &bits, sizeof y);
    return y;
}

static float row_max(const float *x, ptrdiff_t n) {
    float lane[LANES];
    float m = -INFINITY;
    const ptrdiff_t body = n - n % LANES;
    ptrdiff_t i, j;
    for (j = 0; j < LANES; j++) lane[j] = -INFINITY;
    for (i = 0; i < body; i += LANES)
        for (j = 0; j < LANES; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    for (i = body; i < n; i++) m = x[i] > m ? x[i] : m;
    for (j = 0; j < LANES; j++) m = lane[j] > m ? lane[j] : m;
    return m;
}

/* sum_i exp(x[i] - m), also stored to e[i] unless e is NULL: float lanes per block, the
 * blocks added in double. */
static double row_exp_sum(const float *x, ptrdiff_t n, float m, float *e) {
    double total = 0.0;
    ptrdiff_t start, i, j;
    for (start = 0; start < n; start += BLOCK) {
        const ptrdiff_t len = n - start < BLOCK ? n - start : BLOCK;
        const ptrdiff_t body = len - len % LANES;
        const float *xb = x + start;
        float lane[LANES] = {0};
        float part = 0.0f;
        if (e != NULL) {
            float *eb = e + start;
            for (i = 0; i < len; i++) eb[i] = exp_neg(xb[i] - m);
            for (i = 0; i < body; i += LANES)
                for (j = 0; j < LANES; j++) lane[j] += eb[i + j];
            for (i = body; i < len; i++) part += eb[i];
        } else {
            for (i = 0; i < body; i += LANES)
                for (j = 0; j < LANES; j++) lane[j] += exp_neg(xb[i + j] - m);
            for (i = body; i < len; i++) part += exp_neg(xb[i] - m);
        }
        for (j = 0; j < LANES; j++) part += lane[j];
        total += part;
    }
    return total;
}

/* Rows [o0, o1) (inner == 1). */
static void softmax_rows(const mlcc_softmax_params *p, const float *x, float *y, ptrdiff_t o0,
                         ptrdiff_t o1) {
    const ptrdiff_t n = (ptrdiff_t)p->n;
    ptrdiff_t o, i;
    for (o = o0; o < o1; o++) {
        const float *xr = x + o * n;
        float *yr = y + o * n;
        const float m = row_max(xr, n);
        if (p->log) {
            const float lse = (float)log(row_exp_sum(xr, n, m, NULL));
            for (i = 0; i < n; i++) yr[i] = (xr[i] - m) - lse;
        } else {
            const float inv = (float)(1.0 / row_exp_sum(xr, n, m, yr));
            for (i = 0; i < n; i++) yr[i] *= inv;
        }
    }
}

/* Columns [0, w) of the rows x + a * inner, a < n (w <= TILE). */
static void softmax_tile(const mlcc_softmax_params *p, const float *x, float *y, ptrdiff_t n,
                         ptrdiff_t inner, ptrdiff_t w) {
    float m[TILE], f[TILE];
    double s[TILE];
    ptrdiff_t a, j;
    for (j = 0; j < w; j++) {
        m[j] = -INFINITY;
        s[j] = 0.0;
    }
    for (a = 0; a < n; a++) {
        const float *xr = x + a * inner;
        for (j = 0; j < w; j++) m[j] = xr[j] > m[j] ? xr[j] : m[j];
    }
    if (p->log) {
        for (a = 0; a < n; a++) {
            const float *xr = x + a * inner;
            for (j = 0; j < w; j++) s[j] += exp_neg(xr[j] - m[j]);
        }
        for (j = 0; j < w; j++) f[j] = (float)log(s[j]);
        for (a = 0; a < n; a++) {
            const float *xr = x + a * inner;
            float *yr = y + a * inner;
            for (j = 0; j < w; j++) yr[j] = (xr[j] - m[j]) - f[j];
        }
    } else {
        for (a = 0; a < n; a++) {
            const float *xr = x + a * inner;
            float *yr = y + a * inner;
            for (j = 0; j < w; j++) {
                const float e = exp_neg(xr[j] - m[j]);
                yr[j] = e;
                s[j] += e;
            }
        }
        for (j = 0; j < w; j++) f[j] = (float)(1.0 / s[j]);
        for (a = 0; a < n; a++) {
            float *yr = y + a * inner;
            for (j = 0; j < w; j++) yr[j] *= f[j];
        }
    }
}

/* Softmax vectors [v0, v1) of the outer x inner ones (vector v: outer v / inner, column
 * v % inner), by rows or by tiles of up to TILE columns that do not cross an outer row. */
static void softmax_part(const mlcc_softmax_params *p, const float *x, float *y, ptrdiff_t v0,
                         ptrdiff_t v1) {
    const ptrdiff_t n = (ptrdiff_t)p->n, inner = (ptrdiff_t)p->inner;
    ptrdiff_t v;
    if (inner == 1) {
        softmax_rows(p, x, y, v0, v1);
        return;
    }
    for (v = v0; v < v1;) {
        const ptrdiff_t o = v / inner, i = v % inner, row_end = (o + 1) * inner;
        const ptrdiff_t w = (v1 < row_end ? v1 : row_end) - v;
        const ptrdiff_t tw = w < TILE ? w : TILE;
        const ptrdiff_t at = o * n * inner + i;
        softmax_tile(p, x + at, y + at, n, inner, tw);
        v += tw;
    }
}

/* The arguments of one call, for softmax_range. */
typedef struct softmax_call {
    const mlcc_softmax_params *p;
    const float *x;
    float *y;
} softmax_call;

static void softmax_range(void *arg, ptrdiff_t v0, ptrdiff_t v1) {
    const softmax_call *c = (const softmax_call *)arg;
    softmax_part(c->p, c->x, c->y, v0, v1);
}

void mlcc_f32_softmax(const mlcc_softmax_params *p, const float *x, float *y,
                      mlcc_threadpool *pool) {
    const ptrdiff_t n = (ptrdiff_t)p->n, inner = (ptrdiff_t)p->inner;
    const ptrdiff_t vectors = (ptrdiff_t)p->outer * inner;
    softmax_call call;
    if (n == 0 || inner == 0) return;
    /* by ranges of softmax vectors, each computed whole by one thread: the same bits */
    call.p = p;
    call.x = x;
    call.y = y;
    mlcc_parallel_ranges(pool, softmax_range, &call, vectors, (double)vectors * (double)n * 4.0,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

void mlcc_f32_hardmax(const mlcc_hardmax_params *p, const float *x, float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n, inner = (ptrdiff_t)p->inner;
    ptrdiff_t o, i, a;
    for (o = 0; o < (ptrdiff_t)p->outer; o++)
        for (i = 0; i < inner; i++) {
            const ptrdiff_t base = o * n * inner + i;
            ptrdiff_t best = 0;
            for (a = 1; a < n; a++)
                if (x[base + a * inner] > x[base + best * inner]) best = a;
            for (a = 0; a < n; a++) y[base + a * inner] = a == best ? 1.0f : 0.0f;
        }
}
