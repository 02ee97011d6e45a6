#include "reduce.h"

/* Columns reduced together when inner > 1: the accumulators stay in registers or L1 while
 * each step reads TILE contiguous floats. */
#define TILE 64
/* Contiguous sums run in float lanes over blocks this long, then add into a double: the
 * error stays that of a 64-element float sum however long the row, at float speed. */
#define LANES 8
#define BLOCK 512

static float finish(const mlcc_reduce_params *p, double v) {
    const float s = (float)(v * (double)p->scale);
    switch (p->post) {
    case MLCC_REDUCE_POST_SQRT: return sqrtf(s);
    case MLCC_REDUCE_POST_LOG: return logf(s);
    default: return s;
    }
}

static int is_finite_max(float m) { return m == m && m != -INFINITY && m != INFINITY; }

/* ------------------------------------------------------------ contiguous rows (inner == 1) */

#define BLOCKED_SUM(F)                                                        \
    do {                                                                      \
        ptrdiff_t start, i, j;                                                \
        for (start = 0; start < n; start += BLOCK) {                          \
            const ptrdiff_t len = n - start < BLOCK ? n - start : BLOCK;      \
            const ptrdiff_t body = len - len % LANES;                         \
            const float *xb = x + start;                                      \
            float lane[LANES] = {0};                                          \
            float part = 0.0f;                                                \
            for (i = 0; i < body; i += LANES)                                 \
                for (j = 0; j < LANES; j++) lane[j] += F(xb[i + j]);          \
            for (i = body; i < len; i++) part += F(xb[i]);                    \
            for (j = 0; j < LANES; j++) part += lane[j];                      \
            total += part;                                                    \
        }                                                                     \
    } while (0)

#define F_ID(v) (v)
#define F_SQUARE(v) ((v) * (v))
#define F_ABS(v) fabsf(v)

static double row_sum(const float *x, ptrdiff_t n, int op) {
    double total = 0.0;
    switch (op) {
    case MLCC_REDUCE_SUM_SQUARE: BLOCKED_SUM(F_SQUARE); break;
    case MLCC_REDUCE_SUM_ABS: BLOCKED_SUM(F_ABS); break;
    default: BLOCKED_SUM(F_ID); break;
    }
    return total;
}

/* ROWS rows of row_sum(x, n, MLCC_REDUCE_SUM) of at most BLOCK values (one block each) at
 * once, n apart, into out: each row's operations in row_sum's order (the same bits), their
 * chains of dependent vector adds interleaved. One row at a time waited on the latency of each
 * add: GlobalAveragePool over 13 x 13 maps (SqueezeNet's 1000 rows of 169) ran at a third of
 * the speed of reading them. */
#define ROWS 8
static void rows_sum(const float *x, ptrdiff_t n, double *out) {
    float lane[ROWS][LANES] = {{0}};
    const ptrdiff_t body = n - n % LANES;
    ptrdiff_t i, j, r;
    for (i = 0; i < body; i += LANES)
        for (r = 0; r < ROWS; r++)
            for (j = 0; j < LANES; j++) lane[r][j] += x[r * n + i + j];
    for (r = 0; r < ROWS; r++) {
        double total = 0.0;
        float part = 0.0f;
        for (i = body; i < n; i++) part += x[r * n + i];
        for (j = 0; j < LANES; j++) part += lane[r][j];
        total += part;
        out[r] = total;
    }
}

/* NaN-propagating max / min, as numpy and onnxruntime's reductions. */
#define MAX_OF(a, v) ((v) > (a) || (v) != (v) ? (v) : (a))
#define MIN_OF(a, v) ((v) < (a) || (v) != (v) ? (v) : (a))

static float row_extreme(const float *x, ptrdiff_t n, int is_max) {
    float lane[LANES];
    float r = is_max ? -INFINITY : INFINITY;
    const ptrdiff_t body = n - n % LANES;
    ptrdiff_t i, j;
    for (j = 0; j < LANES; j++) lane[j] = r;
    if (is_max) {
        for (i = 0; i < body; i += LANES)
            for (j = 0; j < LANES; j++) lane[j] = MAX_OF(lane[j], x[i + j]);
        for (i = body; i < n; i++) r = MAX_OF(r, x[i]);
        for (j = 0; j < LANES; j++) r = MAX_OF(r, lane[j]);
    } else {
        for (i = 0; i < body; i += LANES)
            for (j = 0; j < LANES; j++) lane[j] = MIN_OF(lane[j], x[i + j]);
        for (i = body; i < n; i++) r = MIN_OF(r, x[i]);
        for (j = 0; j < LANES; j++) r = MIN_OF(r, lane[j]);
    }
    return r;
}

static double row_reduce(const float *x, ptrdiff_t n, int op) {
    ptrdiff_t i;
    switch (op) {
    case MLCC_REDUCE_MAX: return row_extreme(x, n, 1);
    case MLCC_REDUCE_MIN: return row_extreme(x, n, 0);
    case MLCC_REDUCE_PROD: {
        double r = 1.0;
        for (i = 0; i < n; i++) r *= x[i];
        return r;
    }
    case MLCC_REDUCE_LOG_SUM_EXP: {
        const float m = row_extreme(x, n, 1);
        double s = 0.0;
        if (!is_finite_max(m)) return m;
        for (i = 0; i < n; i++) s += expf(x[i] - m);
        return (double)m + log(s);
    }
    default: return row_sum(x, n, op);
    }
}

/* ------------------------------------------------------- strided columns (inner > 1) */

/* Reduces columns [0, w) of the rows x + r * inner, r < n, into y[0, w). */
static void tile_reduce(const mlcc_reduce_params *p, const float *x, ptrdiff_t n,
                        ptrdiff_t inner, ptrdiff_t w, float *y) {
    double acc[TILE];
    float ext[TILE];
    ptrdiff_t r, j;
    switch (p->op) {
    case MLCC_REDUCE_MAX:
    case MLCC_REDUCE_MIN:
    case MLCC_REDUCE_LOG_SUM_EXP: {
        const int is_min = p->op == MLCC_REDUCE_MIN;
        for (j = 0; j < w; j++) ext[j] = is_min ? INFINITY : -INFINITY;
        if (is_min) {
            for (r = 0; r < n; r++) {
                const float *xr = x + r * inner;
                for (j = 0; j < w; j++) ext[j] = MIN_OF(ext[j], xr[j]);
            }
        } else {
            for (r = 0; r < n; r++) {
                const float *xr = x + r * inner;
                for (j = 0; j < w; j++) ext[j] = MAX_OF(ext[j], xr[j]);
            }
        }
        if (p->op != MLCC_REDUCE_LOG_SUM_EXP) {
            for (j = 0; j < w; j++) y[j] = finish(p, ext[j]);
            return;
        }
        /* Columns whose maximum is not finite (all -inf, +inf or NaN) keep it; the others
         * subtract it so that no exp overflows. */
        for (j = 0; j < w; j++) acc[j] = 0.0;
        for (r = 0; r < n; r++) {
            const float *xr = x + r * inner;
            for (j = 0; j < w; j++)
                acc[j] += is_finite_max(ext[j]) ? expf(xr[j] - ext[j]) : 0.0f;
        }
        for (j = 0; j < w; j++)
            y[j] = finish(p, is_finite_max(ext[j]) ? (double)ext[j] + log(acc[j]) : ext[j]);
        return;
    }
    case MLCC_REDUCE_PROD:
        for (j = 0; j < w; j++) acc[j] = 1.0;
        for (r = 0; r < n; r++) {
            const float *xr = x + r * inner;
            for (j = 0; j < w; j++) acc[j] *= xr[j];
        }
        break;
    case MLCC_REDUCE_SUM_SQUARE:
        for (j = 0; j < w; j++) acc[j] = 0.0;
        for (r = 0; r < n; r++) {
            const float *xr = x + r * inner;
            for (j = 0; j < w; j++) acc[j] += (double)(xr[j] * xr[j]);
        }
        break;
    case MLCC_REDUCE_SUM_ABS:
        for (j = 0; j < w; j++) acc[j] = 0.0;
        for (r = 0; r < n; r++) {
            const float *xr = x + r * inner;
            for (j = 0; j < w; j++) acc[j] += fabsf(xr[j]);
        }
        break;
    default:
        for (j = 0; j < w; j++) acc[j] = 0.0;
        for (r = 0; r < n; r++) {
            const float *xr = x + r * inner;
            for (j = 0; j < w; j++) acc[j] += xr[j];
        }
        break;
    }
    for (j = 0; j < w; j++) y[j] = finish(p, acc[j]);
}

/* Outputs [o0, o1) of the reduction (output o: outer o / inner, column o % inner), by rows
 * (inner == 1) or by tiles of up to TILE columns that do not cross an outer row. */
static void reduce_part(const mlcc_reduce_params *p, const float *x, float *y, ptrdiff_t o0,
                        ptrdiff_t o1) {
    const ptrdiff_t n = (ptrdiff_t)p->reduce, inner = (ptrdiff_t)p->inner;
    ptrdiff_t o;
    if (inner == 1) {
        o = o0;
        if (p->op == MLCC_REDUCE_SUM && n <= BLOCK) {
            double sums[ROWS];
            ptrdiff_t r;
            for (; o + ROWS <= o1; o += ROWS) {
                rows_sum(x + o * n, n, sums);
                for (r = 0; r < ROWS; r++) y[o + r] = finish(p, sums[r]);
            }
        }
        for (; o < o1; o++) y[o] = finish(p, row_reduce(x + o * n, n, p->op));
        return;
    }
    for (o = o0; o < o1;) {
        const ptrdiff_t row = o / inner, i = o % inner;
        const ptrdiff_t row_end = (row + 1) * inner;
        const ptrdiff_t w = (o1 < row_end ? o1 : row_end) - o;
        const ptrdiff_t tw = w < TILE ? w : TILE;
        tile_reduce(p, x + row * n * inner + i, n, inner, tw, y + o);
        o += tw;
    }
}

/* The arguments of one call, for reduce_range. */
typedef struct reduce_call {
    const mlcc_reduce_params *p;
    const float *x;
    float *y;
} reduce_call;

static void reduce_range(void *arg, ptrdiff_t o0, ptrdiff_t o1) {
    const reduce_call *c = (const reduce_call *)arg;
    reduce_part(c->p, c->x, c->y, o0, o1);
}

void mlcc_f32_reduce(const mlcc_reduce_params *p, const float *x, float *y,
                     mlcc_threadpool *pool) {
    const ptrdiff_t outer = (ptrdiff_t)p->outer, n = (ptrdiff_t)p->reduce;
    const ptrdiff_t inner = (ptrdiff_t)p->inner;
    reduce_call call;
    ptrdiff_t o;
    if (n == 0) {
        /* Nothing to reduce: every output is the identity (0, 1, -inf, +inf) after post. */
        const float v = finish(p, row_reduce(x, 0, p->op));
        for (o = 0; o < outer * inner; o++) y[o] = v;
        return;
    }
    /* by ranges of outputs, each reduced whole by one thread: the same sums in the same
     * order whatever the threads */
    call.p = p;
    call.x = x;
    call.y = y;
    mlcc_parallel_ranges(pool, reduce_range, &call, outer * inner,
                         (double)outer * (double)n * (double)inner,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}
