#include "elementwise.h"

/* log(1 + e^x) without overflow for large x */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* max(0, x) + min(0, alpha (e^(x/alpha) - 1)): one term is 0 on either side of 0; NaN takes
   the second branch and stays NaN */
static float celu(float x, float alpha) {
    return x > 0.0f ? x : alpha * (expf(x / alpha) - 1.0f);
}

/* Elements [0, n) of x and y (a thread's range). */
static void unary_range(const mlcc_unary_params *p, const float *x, float *y, ptrdiff_t n) {
    const float alpha = p->alpha, beta = p->beta;
    ptrdiff_t i;
    switch (p->op) {
    case MLCC_UNARY_ACT:
        if (y != x) memmove(y, x, (size_t)n * sizeof(float));
        mlcc_act_apply(&p->act, y, n);
        return;
#define MLCC_UNARY_CASE(name, expr)                     \
    case MLCC_UNARY_##name:                             \
        for (i = 0; i < n; i++) {                       \
            const float v = x[i];                       \
            y[i] = (expr);                              \
        }                                               \
        return;
    MLCC_UNARY_OPS(MLCC_UNARY_CASE)
#undef MLCC_UNARY_CASE
    default:
        return;
    }
}

/* Ranges of elements, in whole cache lines, split between threads: elementwise results do
 * not depend on the split. */
#define RANGE_ALIGN 16

/* Planes (NCHW: the H x W of one channel) of at least this many elements are split between
 * threads within each plane, each unit the same part of every plane (of a binary operation's
 * output: the same rows), instead of by ranges of whole planes: the convolutions that produce
 * and consume maps this large mostly split them by rows or by tiles of rows (Winograd's
 * thread_range, the implicit GEMM's column blocks; not implicit_t, by channel panels), so
 * that a thread reads the rows it wrote in the layer before and the next layer reads what it
 * writes, where ranges of channels made it read half of every input from the other core's
 * cache. With the VM's vCPUs far apart (a 360 ns round trip) an input
 * written on the other core made a ResNet-18 56 x 56 Winograd layer's input transform 1.4x
 * slower and an Add of 64 x 56 x 56 1.15x (no difference with them near). Below it (14 x 14
 * and 7 x 7), Winograd splits the output by channels. */
#ifndef MLCC_PLANE_SPLIT_MIN
#define MLCC_PLANE_SPLIT_MIN 512
#endif

typedef struct unary_job {
    const mlcc_unary_params *p;
    const float *x;
    float *y;
    int units;
} unary_job;

/* Whether a unary operation splits each plane (MLCC_PLANE_SPLIT_MIN): planes of its plane's
 * size that it holds two of at least. */
static int unary_by_planes(const mlcc_unary_params *p) {
    return p->plane >= MLCC_PLANE_SPLIT_MIN && p->n % p->plane == 0 && p->n >= 2 * p->plane;
}

static void unary_unit(void *arg, int unit, int thread) {
    const unary_job *job = (const unary_job *)arg;
    (void)thread;
    if (unary_by_planes(job->p)) {   /* the unit's part of every plane */
        const ptrdiff_t plane = (ptrdiff_t)job->p->plane, blocks = plane / RANGE_ALIGN;
        const ptrdiff_t j0 = unit == 0 ? 0 : blocks * unit / job->units * RANGE_ALIGN;
        const ptrdiff_t j1 = unit + 1 == job->units ? plane
                                                    : blocks * (unit + 1) / job->units * RANGE_ALIGN;
        ptrdiff_t q;
        for (q = 0; q < (ptrdiff_t)job->p->n; q += plane)
            unary_range(job->p, job->x + q + j0, job->y + q + j0, j1 - j0);
    } else {
        const ptrdiff_t blocks = ((ptrdiff_t)job->p->n + RANGE_ALIGN - 1) / RANGE_ALIGN;
        const ptrdiff_t i0 = blocks * unit / job->units * RANGE_ALIGN;
        ptrdiff_t i1 = blocks * (unit + 1) / job->units * RANGE_ALIGN;
        if (i1 > (ptrdiff_t)job->p->n) i1 = (ptrdiff_t)job->p->n;
        if (i1 > i0) unary_range(job->p, job->x + i0, job->y + i0, i1 - i0);
    }
}

/* The number of units for `work` elements on `pool` (mlcc_parallel_units). */
static int elementwise_units(mlcc_threadpool *pool, double work, ptrdiff_t items) {
    return mlcc_parallel_units(mlcc_threadpool_size(pool), work,
                               (double)MLCC_MIN_PARALLEL_ELEMENTS, items);
}

void mlcc_f32_unary(const mlcc_unary_params *p, const float *x, float *y, mlcc_threadpool *pool) {
    unary_job job;
    job.p = p, job.x = x, job.y = y;
    job.units = elementwise_units(pool, (double)p->n, ((ptrdiff_t)p->n + RANGE_ALIGN - 1) /
                                                      RANGE_ALIGN);
    if (job.units <= 1) {
        unary_range(p, x, y, (ptrdiff_t)p->n);
        return;
    }
    mlcc_threadpool_for(pool, unary_unit, &job, job.units, job.units);
}

/* Python's float %: fmod, moved into the divisor's sign. */
static inline float py_mod(float x, float z) {
    const float r = fmodf(x, z);
    return (r != 0.0f && ((r < 0.0f) != (z < 0.0f))) ? r + z : r;
}

#define BINARY_LOOPS(EXPR)                                                          \
    do {                                                                            \
        if (sa == 1 && sb == 1) {                                                   \
            for (i = 0; i < n; i++) { const float x = a[i], z = b[i]; y[i] = EXPR; } \
        } else if (sa == 1 && sb == 0) {                                            \
            const float z = b[0];                                                   \
            for (i = 0; i < n; i++) { const float x = a[i]; y[i] = EXPR; }          \
        } else if (sa == 0 && sb == 1) {                                            \
            const float x = a[0];                                                   \
            for (i = 0; i < n; i++) { const float z = b[i]; y[i] = EXPR; }          \
        } else {                                                                    \
            for (i = 0; i < n; i++) {                                               \
                const float x = a[i * sa], z = b[i * sb];                           \
                y[i] = EXPR;                                                        \
            }                                                                       \
        }                                                                           \
    } while (0)

/* One innermost row: n outputs, inputs at strides sa and sb. */
static void binary_row(int op, const float *a, ptrdiff_t sa, const float *b, ptrdiff_t sb,
                       float *y, ptrdiff_t n) {
    ptrdiff_t i;
    switch (op) {
    case MLCC_BINARY_ADD: BINARY_LOOPS(x + z); return;
    case MLCC_BINARY_SUB: BINARY_LOOPS(x - z); return;
    case MLCC_BINARY_MUL: BINARY_LOOPS(x * z); return;
    case MLCC_BINARY_DIV: BINARY_LOOPS(x / z); return;
    case MLCC_BINARY_POW: BINARY_LOOPS(powf(x, z)); return;
    case MLCC_BINARY_MAX: BINARY_LOOPS((x > z || x != x) ? x : z); return;
    case MLCC_BINARY_MIN: BINARY_LOOPS((x < z || x != x) ? x : z); return;
    case MLCC_BINARY_PRELU: BINARY_LOOPS(x >= 0.0f ? x : x * z); return;
    case MLCC_BINARY_FMOD: BINARY_LOOPS(fmodf(x, z)); return;
    case MLCC_BINARY_MOD: BINARY_LOOPS(py_mod(x, z)); return;
    default: return;
    }
}

/* Rows [r0, r1) of the output, columns [c0, c1) of each. */
static void binary_part(const mlcc_binary_params *p, const float *a, const float *b, float *y,
                        int64_t r0, int64_t r1, ptrdiff_t c0, ptrdiff_t c1) {
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner];
    const ptrdiff_t sa = (ptrdiff_t)p->a_strides[inner], sb = (ptrdiff_t)p->b_strides[inner];
    mlcc_odometer o;
    int64_t r;
    if (r1 <= r0 || !mlcc_odometer_init(&o, p->rank, p->shape, p->a_strides, p->b_strides, NULL))
        return;
    mlcc_odometer_seek(&o, r0);
    for (r = r0;;) {
        binary_row(p->op, a + o.off[0] + c0 * sa, sa, b + o.off[1] + c0 * sb, sb,
                   y + r * n + c0, c1 - c0);
        if (++r == r1 || !mlcc_odometer_next(&o)) break;
    }
}

typedef struct binary_job {
    const mlcc_binary_params *p;
    const float *a, *b;
    float *y;
    int64_t rows;
    int64_t plane_rows;   /* rows per plane split within each plane (MLCC_PLANE_SPLIT_MIN); 0 */
    int units, by_rows;
} binary_job;

/* A range of rows of every plane, a range of rows, or (few long rows) a range of every row's
 * columns in whole cache lines. */
static void binary_unit(void *arg, int unit, int thread) {
    const binary_job *job = (const binary_job *)arg;
    const mlcc_binary_params *p = job->p;
    const ptrdiff_t n = (ptrdiff_t)p->shape[p->rank - 1];
    (void)thread;
    if (job->plane_rows) {
        const int64_t h = job->plane_rows;
        const int64_t h0 = h * unit / job->units, h1 = h * (unit + 1) / job->units;
        int64_t r;
        for (r = 0; r < job->rows; r += h)
            binary_part(p, job->a, job->b, job->y, r + h0, r + h1, 0, n);
    } else if (job->by_rows) {
        binary_part(p, job->a, job->b, job->y, job->rows * unit / job->units,
                    job->rows * (unit + 1) / job->units, 0, n);
    } else {
        const ptrdiff_t blocks = (n + RANGE_ALIGN - 1) / RANGE_ALIGN;
        const ptrdiff_t c0 = blocks * unit / job->units * RANGE_ALIGN;
        ptrdiff_t c1 = blocks * (unit + 1) / job->units * RANGE_ALIGN;
        if (c1 > n) c1 = n;
        if (c1 > c0) binary_part(p, job->a, job->b, job->y, 0, job->rows, c0, c1);
    }
}

void mlcc_f32_binary(const mlcc_binary_params *p, const float *a, const float *b, float *y,
                     mlcc_threadpool *pool) {
    const ptrdiff_t n = (ptrdiff_t)p->shape[p->rank - 1];
    binary_job job;
    job.p = p, job.a = a, job.b = b, job.y = y;
    job.rows = mlcc_odometer_rows(p->rank, p->shape);
    job.by_rows = job.rows >= 2 * mlcc_threadpool_size(pool);
    /* planes (the last two dimensions) split within each: rows of at least one per thread */
    job.plane_rows = p->rank >= 3 && p->shape[p->rank - 2] * n >= MLCC_PLANE_SPLIT_MIN &&
                     p->shape[p->rank - 2] >= mlcc_threadpool_size(pool) &&
                     job.rows >= 2 * p->shape[p->rank - 2] ? p->shape[p->rank - 2] : 0;
    job.units = elementwise_units(pool, (double)job.rows * (double)n,
                                  job.by_rows ? (ptrdiff_t)job.rows
                                              : (n + RANGE_ALIGN - 1) / RANGE_ALIGN);
    if (job.units <= 1) {
        binary_part(p, a, b, y, 0, job.rows, 0, n);
        return;
    }
    mlcc_threadpool_for(pool, binary_unit, &job, job.units, job.units);
}
