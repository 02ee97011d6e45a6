#include "norm.h"

#define LANES 8
#define BLOCK 512

/* The operands of the normalizations split into ranges of rows (norm_job): each row whole on
 * one thread, the same bits on any number of threads. */
typedef struct norm_job {
    const void *p;
    const float *x, *scale, *bias;
    float *y, *mean, *inv_std;
} norm_job;

/* Rows [r0, r1) of outer x channels, each `inner` values of one channel. */
static void channel_affine_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const norm_job *job = (const norm_job *)arg;
    const mlcc_channel_affine_params *p = (const mlcc_channel_affine_params *)job->p;
    const ptrdiff_t channels = (ptrdiff_t)p->channels, inner = (ptrdiff_t)p->inner;
    ptrdiff_t r, i;
    for (r = r0; r < r1; r++) {
        const ptrdiff_t c = r % channels;
        const float s = job->scale[c], b = job->bias[c];
        const float *xr = job->x + r * inner;
        float *yr = job->y + r * inner;
        for (i = 0; i < inner; i++) yr[i] = xr[i] * s + b;
    }
}

void mlcc_f32_channel_affine(const mlcc_channel_affine_params *p, const float *x,
                             const float *scale, const float *shift, float *y,
                             mlcc_threadpool *pool) {
    norm_job job = {p, x, scale, shift, y, NULL, NULL};
    mlcc_parallel_ranges(pool, channel_affine_rows, &job, (ptrdiff_t)(p->outer * p->channels),
                         (double)p->outer * (double)p->channels * (double)p->inner,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

/* y[i] = x[i] * (k + a * y[i])^-beta: y holds the sums of squares. beta 0.75 (AlexNet,
 * GoogLeNet, ZFNet) as 1 / (r * sqrt(r)) with r = sqrt(t): two square roots and a division
 * cost a fraction of powf, within a few ulp of it. */
static void lrn_scale(const float *x, float *y, ptrdiff_t n, float k, float a, float beta) {
    ptrdiff_t i;
    if (beta == 0.75f) {
        for (i = 0; i < n; i++) {
            const float r = sqrtf(k + a * y[i]);
            y[i] = x[i] / (r * sqrtf(r));
        }
        return;
    }
    for (i = 0; i < n; i++) y[i] = x[i] * powf(k + a * y[i], -beta);
}

/* Rows [r0, r1) of the output, a row being one (batch, channel) plane of `inner` values. */
static void lrn_rows(const mlcc_lrn_params *p, const float *x, float *y, ptrdiff_t r0,
                     ptrdiff_t r1) {
    const ptrdiff_t channels = (ptrdiff_t)p->channels, inner = (ptrdiff_t)p->inner;
    const ptrdiff_t before = (ptrdiff_t)(p->size - 1) / 2, after = (ptrdiff_t)p->size / 2;
    ptrdiff_t r, j, i;
    for (r = r0; r < r1; r++) {
        const ptrdiff_t n = r / channels, c = r % channels;
        const float *xn = x + n * channels * inner;
        const ptrdiff_t lo = c - before < 0 ? 0 : c - before;
        const ptrdiff_t hi = c + after >= channels ? channels - 1 : c + after;
        float *yr = y + r * inner;
        /* y accumulates the sum of squares first, then becomes the result */
        for (i = 0; i < inner; i++) yr[i] = 0.0f;
        for (j = lo; j <= hi; j++) {
            const float *xj = xn + j * inner;
            for (i = 0; i < inner; i++) yr[i] += xj[i] * xj[i];
        }
        lrn_scale(x + r * inner, yr, inner, p->bias, p->alpha_over_size, p->beta);
    }
}

/* The arguments of one call, for lrn_range. */
typedef struct lrn_call {
    const mlcc_lrn_params *p;
    const float *x;
    float *y;
} lrn_call;

static void lrn_range(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const lrn_call *c = (const lrn_call *)arg;
    lrn_rows(c->p, c->x, c->y, r0, r1);
}

void mlcc_f32_lrn(const mlcc_lrn_params *p, const float *x, float *y, mlcc_threadpool *pool) {
    const ptrdiff_t rows = (ptrdiff_t)(p->batch * p->channels);
    lrn_call call;
    call.p = p;
    call.x = x;
    call.y = y;
    /* by ranges of (batch, channel) planes: each output element computed by one thread */
    mlcc_parallel_ranges(pool, lrn_range, &call, rows,
                         (double)rows * (double)p->inner * (double)(p->size + 8),
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

/* Sum of (x[i] - center)^2 over n floats: float lanes per block, the blocks added in
 * double. */
static double sum_squares(const float *x, ptrdiff_t n, float center) {
    double total = 0.0;
    ptrdiff_t start, i, j;
    for (start = 0; start < n; start += BLOCK) {
        const ptrdiff_t len = n - start < BLOCK ? n - start : BLOCK;
        const ptrdiff_t body = len - len % LANES;
        const float *xb = x + start;
        float lane[LANES] = {0};
        float part = 0.0f;
        for (i = 0; i < body; i += LANES)
            for (j = 0; j < LANES; j++) {
                const float d = xb[i + j] - center;
                lane[j] += d * d;
            }
        for (i = body; i < len; i++) {
            const float d = xb[i] - center;
            part += d * d;
        }
        for (j = 0; j < LANES; j++) part += lane[j];
        total += part;
    }
    return total;
}

/* Mean and biased variance of n floats, in two passes (no cancellation), with float lanes per
 * block and the blocks added in double. */
static void row_moments(const float *x, ptrdiff_t n, float *mean, float *var) {
    double total = 0.0, m;
    ptrdiff_t start, i, j;
    float mf;
    if (n == 0) {
        *mean = 0.0f;
        *var = 0.0f;
        return;
    }
    for (start = 0; start < n; start += BLOCK) {
        const ptrdiff_t len = n - start < BLOCK ? n - start : BLOCK;
        const ptrdiff_t body = len - len % LANES;
        const float *xb = x + start;
        float lane[LANES] = {0};
        float part = 0.0f;
        for (i = 0; i < body; i += LANES)
            for (j = 0; j < LANES; j++) lane[j] += xb[i + j];
        for (i = body; i < len; i++) part += xb[i];
        for (j = 0; j < LANES; j++) part += lane[j];
        total += part;
    }
    m = total / (double)n;
    mf = (float)m;
    *mean = mf;
    *var = (float)(sum_squares(x, n, mf) / (double)n);
}

/* Rows [r0, r1) of batch x channels, each one channel's `inner` values. */
static void instance_norm_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const norm_job *job = (const norm_job *)arg;
    const mlcc_instance_norm_params *p = (const mlcc_instance_norm_params *)job->p;
    const ptrdiff_t channels = (ptrdiff_t)p->channels, inner = (ptrdiff_t)p->inner;
    ptrdiff_t r, i;
    for (r = r0; r < r1; r++) {
        const ptrdiff_t c = r % channels;
        const float *xr = job->x + r * inner;
        float *yr = job->y + r * inner;
        float mean, var, a;
        const float b = job->bias[c];
        row_moments(xr, inner, &mean, &var);
        a = job->scale[c] / sqrtf(var + p->epsilon);
        for (i = 0; i < inner; i++) yr[i] = (xr[i] - mean) * a + b;
    }
}

void mlcc_f32_instance_norm(const mlcc_instance_norm_params *p, const float *x,
                            const float *scale, const float *bias, float *y,
                            mlcc_threadpool *pool) {
    norm_job job = {p, x, scale, bias, y, NULL, NULL};
    mlcc_parallel_ranges(pool, instance_norm_rows, &job, (ptrdiff_t)(p->batch * p->channels),
                         (double)p->batch * (double)p->channels * (double)p->inner,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

static void layer_norm_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const norm_job *job = (const norm_job *)arg;
    const mlcc_layer_norm_params *p = (const mlcc_layer_norm_params *)job->p;
    const ptrdiff_t n = (ptrdiff_t)p->n;
    const float *scale = job->scale, *bias = job->bias;
    ptrdiff_t o, j;
    for (o = r0; o < r1; o++) {
        const float *xr = job->x + o * n;
        float *yr = job->y + o * n;
        float mean, var, inv;
        row_moments(xr, n, &mean, &var);
        inv = 1.0f / sqrtf(var + p->epsilon);
        if (bias != NULL)
            for (j = 0; j < n; j++) yr[j] = (xr[j] - mean) * inv * scale[j] + bias[j];
        else
            for (j = 0; j < n; j++) yr[j] = (xr[j] - mean) * inv * scale[j];
    }
}

void mlcc_f32_layer_norm(const mlcc_layer_norm_params *p, const float *x, const float *scale,
                         const float *bias, float *y, mlcc_threadpool *pool) {
    norm_job job = {p, x, scale, bias, y, NULL, NULL};
    mlcc_parallel_ranges(pool, layer_norm_rows, &job, (ptrdiff_t)p->outer,
                         (double)p->outer * (double)p->n,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

static void layer_norm_stats_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const norm_job *job = (const norm_job *)arg;
    const mlcc_layer_norm_params *p = (const mlcc_layer_norm_params *)job->p;
    const ptrdiff_t n = (ptrdiff_t)p->n;
    ptrdiff_t o;
    for (o = r0; o < r1; o++) {
        float m, var;
        row_moments(job->x + o * n, n, &m, &var);
        job->mean[o] = m;
        job->inv_std[o] = 1.0f / sqrtf(var + p->epsilon);
    }
}

void mlcc_f32_layer_norm_stats(const mlcc_layer_norm_params *p, const float *x, float *mean,
                               float *inv_std, mlcc_threadpool *pool) {
    norm_job job = {p, x, NULL, NULL, NULL, mean, inv_std};
    mlcc_parallel_ranges(pool, layer_norm_stats_rows, &job, (ptrdiff_t)p->outer,
                         (double)p->outer * (double)p->n,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

void mlcc_f32_batchnorm_train(const mlcc_batchnorm_train_params *p, const float *x,
                              const float *scale, const float *bias, const float *in_mean,
                              const float *in_var, float *y, float *running_mean,
                              float *running_var) {
    const ptrdiff_t batch = (ptrdiff_t)p->batch, channels = (ptrdiff_t)p->channels;
    const ptrdiff_t inner = (ptrdiff_t)p->inner;
    const double count = (double)batch * (double)inner;
    ptrdiff_t n, c, i;
    for (c = 0; c < channels; c++) {
        double sum = 0.0, sq = 0.0, mean, var;
        float a, b;
        for (n = 0; n < batch; n++) {
            const float *xr = x + (n * channels + c) * inner;
            for (i = 0; i < inner; i++) sum += xr[i];
        }
        mean = count > 0 ? sum / count : 0.0;
        for (n = 0; n < batch; n++) {
            const float *xr = x + (n * channels + c) * inner;
            for (i = 0; i < inner; i++) sq += (xr[i] - mean) * (xr[i] - mean);
        }
        var = count > 0 ? sq / count : 0.0;
        a = (float)(scale[c] / sqrt(var + p->epsilon));
        b = (float)(bias[c] - mean * a);
        for (n = 0; n < batch; n++) {
            const float *xr = x + (n * channels + c) * inner;
            float *yr = y + (n * channels + c) * inner;
            for (i = 0; i < inner; i++) yr[i] = xr[i] * a + b;
        }
        if (running_mean != NULL)
            running_mean[c] = (float)(in_mean[c] * p->momentum + mean * (1.0 - p->momentum));
        if (running_var != NULL)
            running_var[c] = (float)(in_var[c] * p->momentum + var * (1.0 - p->momentum));
    }
}

/* Rows [r0, r1) of batch x groups, each channels_per_group x inner values. */
static void group_norm_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const norm_job *job = (const norm_job *)arg;
    const mlcc_group_norm_params *p = (const mlcc_group_norm_params *)job->p;
    const ptrdiff_t groups = (ptrdiff_t)p->groups, cpg = (ptrdiff_t)p->channels_per_group;
    const ptrdiff_t inner = (ptrdiff_t)p->inner;
    ptrdiff_t r, c, i;
    for (r = r0; r < r1; r++) {
        const ptrdiff_t g = r % groups, row = r * cpg * inner;
        float mean, var, inv;
        row_moments(job->x + row, cpg * inner, &mean, &var);
        inv = 1.0f / (sqrtf(var + p->epsilon) + p->std_epsilon);
        for (c = 0; c < cpg; c++) {
            const ptrdiff_t ch = g * cpg + c;
            const float a = job->scale != NULL ? job->scale[ch] * inv : inv;
            const float b = job->bias != NULL ? job->bias[ch] : 0.0f;
            const float *xr = job->x + row + c * inner;
            float *yr = job->y + row + c * inner;
            for (i = 0; i < inner; i++) yr[i] = (xr[i] - mean) * a + b;
        }
    }
}

void mlcc_f32_group_norm(const mlcc_group_norm_params *p, const float *x, const float *scale,
                         const float *bias, float *y, mlcc_threadpool *pool) {
    norm_job job = {p, x, scale, bias, y, NULL, NULL};
    mlcc_parallel_ranges(pool, group_norm_rows, &job, (ptrdiff_t)(p->batch * p->groups),
                         (double)p->batch * (double)p->groups * (double)p->channels_per_group *
                             (double)p->inner,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

static void rms_norm_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const norm_job *job = (const norm_job *)arg;
    const mlcc_rms_norm_params *p = (const mlcc_rms_norm_params *)job->p;
    const ptrdiff_t n = (ptrdiff_t)p->n;
    ptrdiff_t o, j;
    for (o = r0; o < r1; o++) {
        const float *xr = job->x + o * n;
        float *yr = job->y + o * n;
        const float ms = n > 0 ? (float)(sum_squares(xr, n, 0.0f) / (double)n) : 0.0f;
        const float inv = 1.0f / sqrtf(ms + p->epsilon);
        for (j = 0; j < n; j++) yr[j] = xr[j] * inv * job->scale[j];
    }
}

void mlcc_f32_rms_norm(const mlcc_rms_norm_params *p, const float *x, const float *scale,
                       float *y, mlcc_threadpool *pool) {
    norm_job job = {p, x, scale, NULL, y, NULL, NULL};
    mlcc_parallel_ranges(pool, rms_norm_rows, &job, (ptrdiff_t)p->outer,
                         (double)p->outer * (double)p->n,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

void mlcc_f32_lp_norm(const mlcc_lp_norm_params *p, const float *x, float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n, inner = (ptrdiff_t)p->inner;
    ptrdiff_t o, j, i;
    for (o = 0; o < (ptrdiff_t)p->outer; o++) {
        const float *xo = x + o * n * inner;
        float *yo = y + o * n * inner;
        for (i = 0; i < inner; i++) {
            double acc = 0.0;
            float inv;
            for (j = 0; j < n; j++) {
                const double v = xo[j * inner + i];
                acc += p->p == 1 ? fabs(v) : v * v;
            }
            if (p->p != 1) acc = sqrt(acc);
            inv = acc > 0.0 ? (float)(1.0 / acc) : 0.0f;
            for (j = 0; j < n; j++) yo[j * inner + i] = xo[j * inner + i] * inv;
        }
    }
}
