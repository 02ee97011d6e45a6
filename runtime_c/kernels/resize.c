#include "resize.h"

/* One output row of nearest: out[j] = row[cols[j]]. Fixed element sizes compile to plain
 * loads and stores. */
static void gather_row(uint8_t *out, const uint8_t *row, const int32_t *cols, ptrdiff_t n,
                       ptrdiff_t es) {
    ptrdiff_t j;
    switch (es) {
    case 1:
        for (j = 0; j < n; j++) out[j] = row[cols[j]];
        break;
    case 4:
        for (j = 0; j < n; j++) memcpy(out + j * 4, row + (ptrdiff_t)cols[j] * 4, 4);
        break;
    case 8:
        for (j = 0; j < n; j++) memcpy(out + j * 8, row + (ptrdiff_t)cols[j] * 8, 8);
        break;
    default:
        for (j = 0; j < n; j++)
            memcpy(out + j * es, row + (ptrdiff_t)cols[j] * es, (size_t)es);
        break;
    }
}

/* The arguments of one nearest resize, for nearest_rows. */
typedef struct nearest_call {
    const mlcc_resize_params *p;
    const uint8_t *x;
    const int32_t *map;
    uint8_t *y;
} nearest_call;

/* Output rows [r0, r1) of the planes x out_h, in order. Upsampling repeats source rows: a row
 * that repeats the one before it in its plane and in the range is a copy of it. */
static void nearest_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const nearest_call *c = (const nearest_call *)arg;
    const mlcc_resize_params *p = c->p;
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh = (ptrdiff_t)p->out_h, ow = (ptrdiff_t)p->out_w;
    const int32_t *rows = c->map, *cols = c->map + oh;
    const size_t row_bytes = (size_t)(ow * es);
    ptrdiff_t r;
    for (r = r0; r < r1; r++) {
        const ptrdiff_t plane = r / oh, i = r % oh;
        uint8_t *out = c->y + r * ow * es;
        if (i > 0 && r > r0 && rows[i] == rows[i - 1])
            memcpy(out, out - ow * es, row_bytes);
        else
            gather_row(out, c->x + (plane * ih + (ptrdiff_t)rows[i]) * iw * es, cols, ow, es);
    }
}

/* Split by ranges of output rows in memory order (whole planes, mostly): split by rows of
 * every plane instead, each thread wrote a band of every plane, and on PP-OCR det (24 planes
 * of 160 x 160) that took 1.7x the CPU time of one thread's pass (the loaded project VM). */
void mlcc_resize_nearest(const mlcc_resize_params *p, const void *x, const int32_t *map,
                         void *y, mlcc_threadpool *pool) {
    nearest_call call;
    call.p = p;
    call.x = (const uint8_t *)x;
    call.map = map;
    call.y = (uint8_t *)y;
    /* elements, not bytes: a gather costs per element (YOLOv8n int8's uint8 upsamplings, 31
     * us each for 204800 bytes, stayed on the caller under a threshold in bytes) */
    mlcc_parallel_ranges(pool, nearest_rows, &call, (ptrdiff_t)(p->planes * p->out_h),
                         (double)p->planes * (double)(p->out_h * p->out_w),
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

/* out[j] = w0[j] * row[c0[j]] + w1[j] * row[c1[j]] */
static void blend_row(float *MLCC_RESTRICT out, const float *MLCC_RESTRICT row,
                      const int32_t *c0, const int32_t *c1, const float *w0, const float *w1,
                      ptrdiff_t n) {
    ptrdiff_t j;
    for (j = 0; j < n; j++) out[j] = w0[j] * row[c0[j]] + w1[j] * row[c1[j]];
}

/* A resize split over the pool: unit u of `units` takes items [items u / units, items (u + 1) /
 * units) (output rows in memory order, or planes) on scratch slice `thread` (at most
 * MLCC_RESIZE_SLICES threads). */
typedef struct resize_job {
    const void *p;
    const float *x, *wt;
    const int32_t *map;
    float *y, *scratch;
    ptrdiff_t items, units, slice;      /* slice: floats of scratch per thread */
} resize_job;

static void resize_run(const void *p, const float *x, const int32_t *map, const float *wt,
                       float *y, float *scratch, ptrdiff_t items, ptrdiff_t slice,
                       mlcc_unit_fn fn, mlcc_threadpool *pool, double work) {
    resize_job job;
    job.p = p;
    job.x = x;
    job.map = map;
    job.wt = wt;
    job.y = y;
    job.scratch = scratch;
    job.items = items;
    job.slice = slice;
    mlcc_parallel_sliced(pool, MLCC_RESIZE_SLICES, fn, &job, &job.units, items, work,
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}

/* Output rows of the planes x out_h in a unit's range, in order, each blended from two source
 * rows resized along the width (two buffers, reused by the rows that read them again). */
static void linear_unit(void *arg, int unit, int thread) {
    const resize_job *job = (const resize_job *)arg;
    const mlcc_resize_params *p = (const mlcc_resize_params *)job->p;
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh = (ptrdiff_t)p->out_h, ow = (ptrdiff_t)p->out_w;
    const int32_t *r0 = job->map, *r1 = r0 + oh, *c0 = r0 + 2 * oh, *c1 = c0 + ow;
    const float *wr0 = job->wt, *wr1 = wr0 + oh, *wc0 = wr0 + 2 * oh, *wc1 = wc0 + ow;
    const ptrdiff_t first = job->items * unit / job->units;
    const ptrdiff_t last = job->items * (unit + 1) / job->units;
    float *buf[2];
    int32_t have[2] = {-1, -1};   /* which source row each buffer holds */
    ptrdiff_t r, j, plane = -1;
    buf[0] = job->scratch + thread * job->slice;
    buf[1] = buf[0] + ow;
    for (r = first; r < last; r++) {
        const ptrdiff_t i = r % oh;
        const float *in = job->x + (r / oh) * ih * iw;
        float *out = job->y + r * ow;
        const float *a, *b;
        const float u = wr0[i], v = wr1[i];
        int s0, s1;
        if (r / oh != plane) {        /* a new plane: the buffers hold another plane's rows */
            plane = r / oh;
            have[0] = have[1] = -1;
        }
        if (have[0] == r0[i]) {
            s0 = 0;
        } else if (have[1] == r0[i]) {
            s0 = 1;
        } else {
            s0 = have[0] == r1[i] ? 1 : 0;   /* keep the buffer the second row needs */
            blend_row(buf[s0], in + (ptrdiff_t)r0[i] * iw, c0, c1, wc0, wc1, ow);
            have[s0] = r0[i];
        }
        if (have[s0] == r1[i]) {
            s1 = s0;
        } else {
            s1 = 1 - s0;
            if (have[s1] != r1[i]) {
                blend_row(buf[s1], in + (ptrdiff_t)r1[i] * iw, c0, c1, wc0, wc1, ow);
                have[s1] = r1[i];
            }
        }
        a = buf[s0];
        b = buf[s1];
        for (j = 0; j < ow; j++) out[j] = u * a[j] + v * b[j];
    }
}

/* Split by ranges of output rows in memory order (whole planes, mostly), as the nearest
 * resize is; a range that starts inside a plane blends its first rows again (the same values:
 * the same bits on any number of threads). */
void mlcc_f32_resize_linear(const mlcc_resize_params *p, const float *x, const int32_t *map,
                            const float *wt, float *y, float *scratch, mlcc_threadpool *pool) {
    resize_run(p, x, map, wt, y, scratch, (ptrdiff_t)(p->planes * p->out_h),
               2 * (ptrdiff_t)p->out_w, linear_unit, pool,
               (double)p->planes * (double)(p->out_h * p->out_w));
}

/* The source coordinate of output index i along one axis, in float32 as onnxruntime
 * computes it (mlcc/ops/resize.py: source_coords). */
static float source_coord(int32_t coord, int64_t i, int64_t in, int64_t out, float scale) {
    const float x = (float)i;
    switch (coord) {
    case MLCC_RESIZE_HALF_PIXEL:
        return (x + 0.5f) / scale - 0.5f;
    case MLCC_RESIZE_PYTORCH_HALF_PIXEL:
        return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case MLCC_RESIZE_TF_HALF_PIXEL_FOR_NN:
        return (x + 0.5f) / scale;
    case MLCC_RESIZE_ALIGN_CORNERS:
        return out == 1 ? 0.0f : x * ((float)in - 1.0f) / ((float)out - 1.0f);
    default:
        return x / scale;
    }
}

static float axis_scale(float given, int64_t in, int64_t out) {
    return given > 0.0f ? given : (float)out / (float)in;
}

/* mlcc/ops/resize.py: nearest_table */
static void nearest_map(int32_t *map, int32_t coord, int32_t rounding, int64_t in, int64_t out,
                        float scale) {
    int64_t i;
    for (i = 0; i < out; i++) {
        double x, fl, idx;
        int tie;
        if (scale == 1.0f && out == in) {
            map[i] = (int32_t)i;
            continue;
        }
        x = (double)source_coord(coord, i, in, out, scale);
        fl = floor(x);
        tie = fabs(x - fl - 0.5) <= 1e-6;
        switch (rounding) {
        case MLCC_RESIZE_FLOOR:
            idx = fl;
            break;
        case MLCC_RESIZE_CEIL:
            idx = ceil(x);
            break;
        case MLCC_RESIZE_SIMPLE:
            idx = scale < 1.0f ? ceil(x) : trunc(x);
            break;
        default:
            if (tie)
                idx = rounding == MLCC_RESIZE_ROUND_PREFER_CEIL ? fl + 1.0 : fl;
            else
                idx = x >= 0 ? floor(x + 0.5) : ceil(x - 0.5);
            break;
        }
        if (idx < 0.0) idx = 0.0;
        if (idx > (double)(in - 1)) idx = (double)(in - 1);
        map[i] = (int32_t)idx;
    }
}

void mlcc_resize_nearest__computed(const mlcc_resize_computed_params *p, const void *x,
                                   void *y, void *scratch) {
    const mlcc_resize_params *b = &p->base;
    int32_t *map = (int32_t *)scratch;
    nearest_map(map, p->coord, p->rounding, b->in_h, b->out_h,
                axis_scale(p->scale_h, b->in_h, b->out_h));
    nearest_map(map + b->out_h, p->coord, p->rounding, b->in_w, b->out_w,
                axis_scale(p->scale_w, b->in_w, b->out_w));
    mlcc_resize_nearest(b, x, map, y, NULL);
}

/* mlcc/ops/resize.py: linear_table; i0, i1, w0, w1 each n long. */
static void linear_map(int32_t *i0, int32_t *i1, float *w0, float *w1, int32_t coord, int64_t in,
                       int64_t out, float scale) {
    int64_t i;
    for (i = 0; i < out; i++) {
        float c, top = (float)(in - 1);
        int64_t a, b;
        if (scale == 1.0f && out == in) {
            i0[i] = i1[i] = (int32_t)i;
            w0[i] = 1.0f;
            w1[i] = 0.0f;
            continue;
        }
        c = source_coord(coord, i, in, out, scale);
        if (c < 0.0f) c = 0.0f;
        if (c > top) c = top;
        a = (int64_t)c;
        if (a > in - 1) a = in - 1;
        b = a + 1 < in - 1 ? a + 1 : in - 1;
        i0[i] = (int32_t)a;
        i1[i] = (int32_t)b;
        if (a == b) {
            w0[i] = w1[i] = 0.5f;
        } else {
            w1[i] = fabsf(c - (float)a);
            w0[i] = fabsf(c - (float)b);
        }
    }
}

void mlcc_f32_resize_linear__computed(const mlcc_resize_computed_params *p, const float *x,
                                      float *y, void *scratch) {
    const mlcc_resize_params *b = &p->base;
    const int64_t oh = b->out_h, ow = b->out_w, n = 2 * (oh + ow);
    int32_t *map = (int32_t *)scratch;
    float *wt = (float *)(map + n);
    const float sh = axis_scale(p->scale_h, b->in_h, oh), sw = axis_scale(p->scale_w, b->in_w, ow);
    /* the layout of mlcc_f32_resize_linear's tables: r0, r1, c0, c1 (and their weights) */
    linear_map(map, map + oh, wt, wt + oh, p->coord, b->in_h, oh, sh);
    linear_map(map + 2 * oh, map + 2 * oh + ow, wt + 2 * oh, wt + 2 * oh + ow, p->coord,
               b->in_w, ow, sw);
    mlcc_f32_resize_linear(b, x, map, wt, y, wt + n, NULL);
}

/* The planes of a unit's range: every source row resized along the width into the thread's
 * scratch (in_h x out_w), then blended along the height. */
static void taps_unit(void *arg, int unit, int thread) {
    const resize_job *job = (const resize_job *)arg;
    const mlcc_resize_taps_params *p = (const mlcc_resize_taps_params *)job->p;
    const ptrdiff_t ih = (ptrdiff_t)p->in_h, iw = (ptrdiff_t)p->in_w;
    const ptrdiff_t oh = (ptrdiff_t)p->out_h, ow = (ptrdiff_t)p->out_w;
    const ptrdiff_t th = (ptrdiff_t)p->taps_h, tw = (ptrdiff_t)p->taps_w;
    const int32_t *rows = job->map, *cols = job->map + oh * th;
    const float *wr = job->wt, *wc = job->wt + oh * th;
    float *scratch = job->scratch + thread * job->slice;
    const ptrdiff_t first = job->items * unit / job->units;
    const ptrdiff_t last = job->items * (unit + 1) / job->units;
    ptrdiff_t plane, r, i, j, k;
    for (plane = first; plane < last; plane++) {
        const float *in = job->x + plane * ih * iw;
        float *out = job->y + plane * oh * ow;
        /* Along the width: every source row, once. */
        for (r = 0; r < ih; r++) {
            const float *src = in + r * iw;
            float *dst = scratch + r * ow;
            for (j = 0; j < ow; j++) {
                const int32_t *c = cols + j * tw;
                const float *w = wc + j * tw;
                float acc = 0.0f;
                if (c[0] >= 0)
                    for (k = 0; k < tw; k++) acc += w[k] * src[c[k]];
                dst[j] = acc;
            }
        }
        /* Along the height: blend the resized rows. */
        for (i = 0; i < oh; i++) {
            const int32_t *rr = rows + i * th;
            const float *w = wr + i * th;
            float *o = out + i * ow;
            if (rr[0] < 0) {
                for (j = 0; j < ow; j++) o[j] = p->extrapolation_value;
                continue;
            }
            for (j = 0; j < ow; j++) o[j] = w[0] * scratch[(ptrdiff_t)rr[0] * ow + j];
            for (k = 1; k < th; k++) {
                const float *s = scratch + (ptrdiff_t)rr[k] * ow;
                const float wk = w[k];
                for (j = 0; j < ow; j++) o[j] += wk * s[j];
            }
            for (j = 0; j < ow; j++)
                if (cols[j * tw] < 0) o[j] = p->extrapolation_value;
        }
    }
}

/* Split by planes (each computed whole by one thread: the same bits on any number). */
void mlcc_f32_resize_taps(const mlcc_resize_taps_params *p, const float *x, const int32_t *map,
                          const float *wt, float *y, float *scratch, mlcc_threadpool *pool) {
    resize_run(p, x, map, wt, y, scratch, (ptrdiff_t)p->planes, (ptrdiff_t)(p->in_h * p->out_w),
               taps_unit, pool,
               (double)p->planes * (double)(p->out_h * p->out_w) * (double)(p->taps_h + p->taps_w));
}

/* mlcc/ops/resize.py: _cubic_kernel at distance d. */
static double cubic_weight(double d, double a) {
    d = fabs(d);
    if (d <= 1.0) return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
    if (d < 2.0) return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
    return 0.0;
}

/* The first tap (relative to the coordinate's base) of an antialiased downscale
 * (mlcc/ops/resize.py: antialias_start); the taps run from it to 1 - it. */
static int64_t antialias_start(int cubic, double scale) {
    return (int64_t)floor((cubic ? -2.0 : -1.0) / scale) + 1;
}

/* The weight of tap k before normalization (mlcc/ops/resize.py: taps_table): the filter
 * stretched by 1 / scale (stretch: an antialiased downscale, whose first tap is `first`), or
 * the two linear or four cubic taps around x - ratio. */
static double tap_weight(const mlcc_resize_taps_computed_params *p, int stretch, int64_t first,
                         int64_t k, double ratio, double scale) {
    if (stretch) {
        const double d = ((double)(first + k) - ratio) * scale;
        double w;
        if (p->cubic) return cubic_weight(d, (double)p->cubic_a);
        w = 1.0 - fabs(d);
        return w < 0.0 ? 0.0 : w > 1.0 ? 1.0 : w;
    }
    if (p->cubic)   /* at distances ratio + 1, ratio, 1 - ratio, 2 - ratio */
        return cubic_weight(k == 0 ? ratio + 1.0 : k == 1 ? ratio : (double)(k - 1) - ratio,
                            (double)p->cubic_a);
    return k == 0 ? 1.0 - ratio : ratio;
}

/* The taps per output along an axis at this scale. */
static int64_t taps_of(const mlcc_resize_taps_computed_params *p, double scale) {
    if (p->antialias && scale < 1.0) return 2 - 2 * antialias_start(p->cubic, scale);
    return p->cubic ? 4 : 2;
}

/* mlcc/ops/resize.py: taps_table along one axis (roi0, roi1: tf_crop_and_resize's crop):
 * `taps` indices and weights per output, the weights normalized in double (a stretched
 * filter by its sum; exclude_outside by the sum of the taps inside the input), -1 as the
 * first index of an output outside the input (tf_crop_and_resize). */
static void taps_map(int32_t *idx, float *wt, int64_t taps,
                     const mlcc_resize_taps_computed_params *p, int64_t in, int64_t out,
                     double scale, double roi0, double roi1) {
    const double width = scale * (double)in;
    const int stretch = p->antialias && scale < 1.0;
    const int64_t first = stretch ? antialias_start(p->cubic, scale) : p->cubic ? -1 : 0;
    int64_t i, k;
    for (i = 0; i < out; i++) {
        const double y = (double)i;
        double x, base, ratio, sum = 0.0, inside = 0.0;
        int outside = 0;
        switch (p->coord) {
        case MLCC_RESIZE_ALIGN_CORNERS:
            x = width == 1.0 ? 0.0 : y * (double)(in - 1) / (width - 1.0);
            break;
        case MLCC_RESIZE_TF_CROP_AND_RESIZE:
            x = width == 1.0 ? (roi1 - roi0) * (double)(in - 1) / 2.0
                             : y * (roi1 - roi0) * (double)(in - 1) / (width - 1.0);
            x = x + roi0 * (double)(in - 1);
            outside = x < 0.0 || x > (double)(in - 1);
            break;
        case MLCC_RESIZE_PYTORCH_HALF_PIXEL:
            x = out == 1 ? 0.0 : (y + 0.5) / scale - 0.5;
            break;
        case MLCC_RESIZE_HALF_PIXEL:
            x = (y + 0.5) / scale - 0.5;
            break;
        case MLCC_RESIZE_HALF_PIXEL_SYMMETRIC:
            x = (double)in / 2.0 * (1.0 - (double)out / width) + (y + 0.5) / scale - 0.5;
            break;
        default:
            x = y / scale;
        }
        base = floor(x);
        ratio = x == base ? 1.0 : x - base;         /* in (0, 1]: the taps around x - ratio */
        if (x == base) base -= 1.0;
        for (k = 0; k < taps; k++) sum += tap_weight(p, stretch, first, k, ratio, scale);
        if (!stretch) sum = 1.0;
        for (k = 0; k < taps; k++) {
            const int64_t t = (int64_t)base + first + k;
            if (t >= 0 && t < in) inside += tap_weight(p, stretch, first, k, ratio, scale) / sum;
        }
        if (inside == 0.0) inside = 1.0;
        for (k = 0; k < taps; k++) {
            const int64_t t = (int64_t)base + first + k;
            double w = tap_weight(p, stretch, first, k, ratio, scale) / sum;
            if (p->exclude_outside) w = t < 0 || t >= in ? 0.0 : w / inside;
            idx[i * taps + k] = (int32_t)(t < 0 ? 0 : t > in - 1 ? in - 1 : t);
            wt[i * taps + k] = (float)w;
        }
        if (outside) idx[i * taps] = -1;
    }
}

void mlcc_f32_resize_taps__computed(const mlcc_resize_taps_computed_params *p, const float *x,
                                    float *y, void *scratch) {
    mlcc_resize_taps_params b = p->base;
    const double sh = p->scale_h > 0.0f ? (double)p->scale_h : (double)b.out_h / (double)b.in_h;
    const double sw = p->scale_w > 0.0f ? (double)p->scale_w : (double)b.out_w / (double)b.in_w;
    int32_t *map = (int32_t *)scratch;
    float *wt;
    int64_t n;
    /* this call's counts: at most base's (mlcc/ops/resize.py bounds them over the range) */
    b.taps_h = (int32_t)taps_of(p, sh);
    b.taps_w = (int32_t)taps_of(p, sw);
    n = b.taps_h * b.out_h + b.taps_w * b.out_w;
    wt = (float *)(map + n);
    taps_map(map, wt, b.taps_h, p, b.in_h, b.out_h, sh, (double)p->roi_h0, (double)p->roi_h1);
    taps_map(map + b.taps_h * b.out_h, wt + b.taps_h * b.out_h, b.taps_w, p, b.in_w, b.out_w,
             sw, (double)p->roi_w0, (double)p->roi_w1);
    mlcc_f32_resize_taps(&b, x, map, wt, y, wt + n, NULL);
}
