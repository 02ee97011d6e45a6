#include "copy.h"

/* Copies the innermost axis: one memcpy when both sides are contiguous. */
static void copy_row(const uint8_t *src, uint8_t *dst, ptrdiff_t n, ptrdiff_t ss, ptrdiff_t ds,
                     ptrdiff_t es) {
    ptrdiff_t i;
    if (ss == 1 && ds == 1) {
        memcpy(dst, src, (size_t)(n * es));
    } else if (es == 4) {
        for (i = 0; i < n; i++) memcpy(dst + i * ds * 4, src + i * ss * 4, 4);
    } else {
        for (i = 0; i < n; i++) memcpy(dst + i * ds * es, src + i * ss * es, (size_t)es);
    }
}

/* Interleaves k source rows (k >= 2, each n elements, ss apart) into dst: dst[i * k + j] =
 * src[j * ss + i], one element type per loop so that the stores vectorize as a group. The
 * shape of DepthToSpace and of a Transpose that moves a short axis innermost, where a row of
 * k elements per odometer step would cost a function call per element. */
#define MLCC_INTERLEAVE(T)                                                                \
    do {                                                                                  \
        const T *s_ = (const T *)src;                                                     \
        T *d_ = (T *)dst;                                                                 \
        if (k == 2) {                                                                     \
            for (i = 0; i < n; i++) { d_[2 * i] = s_[i]; d_[2 * i + 1] = s_[ss + i]; }  \
        } else {                                                                          \
            for (i = 0; i < n; i++)                                                       \
                for (j = 0; j < k; j++) d_[i * k + j] = s_[j * ss + i];                 \
        }                                                                                 \
    } while (0)

static void interleave_rows(const uint8_t *src, uint8_t *dst, ptrdiff_t n, ptrdiff_t k,
                            ptrdiff_t ss, ptrdiff_t es) {
    ptrdiff_t i, j;
    if (es == 1) MLCC_INTERLEAVE(uint8_t);
    else if (es == 2) MLCC_INTERLEAVE(uint16_t);
    else if (es == 4) MLCC_INTERLEAVE(uint32_t);
    else
        for (i = 0; i < n; i++)
            for (j = 0; j < k; j++)
                memcpy(dst + (i * k + j) * es, src + (j * ss + i) * es, (size_t)es);
}

/* Rows [r0, r1) of the copy (rows: the outer axes, or for the interleave the axes before the
 * two inner ones). */
static void copy_part(const mlcc_copy_params *p, const uint8_t *s, uint8_t *d, int interleave,
                      int64_t r0, int64_t r1) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    const int inner = p->rank - 1;
    mlcc_odometer o;
    int64_t r;
    if (r1 <= r0 || !mlcc_odometer_init(&o, interleave ? inner : p->rank, p->shape,
                                        p->src_strides, p->dst_strides, NULL))
        return;
    mlcc_odometer_seek(&o, r0);
    for (r = r0;;) {
        if (interleave)
            interleave_rows(s + o.off[0] * es, d + o.off[1] * es, (ptrdiff_t)p->shape[inner - 1],
                            (ptrdiff_t)p->shape[inner], (ptrdiff_t)p->src_strides[inner], es);
        else
            copy_row(s + o.off[0] * es, d + o.off[1] * es, (ptrdiff_t)p->shape[inner],
                     (ptrdiff_t)p->src_strides[inner], (ptrdiff_t)p->dst_strides[inner], es);
        if (++r == r1 || !mlcc_odometer_next(&o)) break;
    }
}

typedef struct copy_job {
    const mlcc_copy_params *p;
    const uint8_t *s;
    uint8_t *d;
    int interleave, units;
    int64_t rows;
    ptrdiff_t flat_lines;     /* > 0: one contiguous block of this many 64-byte lines */
    ptrdiff_t flat_bytes;
} copy_job;

static void copy_unit(void *arg, int unit, int thread) {
    const copy_job *job = (const copy_job *)arg;
    (void)thread;
    if (job->flat_lines > 0) {   /* a range of whole lines; the last unit takes the tail */
        const ptrdiff_t b0 = job->flat_lines * unit / job->units * 64;
        const ptrdiff_t b1 = unit + 1 == job->units
                                 ? job->flat_bytes
                                 : job->flat_lines * (unit + 1) / job->units * 64;
        memcpy(job->d + b0, job->s + b0, (size_t)(b1 - b0));
        return;
    }
    copy_part(job->p, job->s, job->d, job->interleave, job->rows * unit / job->units,
              job->rows * (unit + 1) / job->units);
}

void mlcc_copy_strided(const mlcc_copy_params *p, const void *src, void *dst,
                       mlcc_threadpool *pool) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size, nt = mlcc_threadpool_size(pool);
    const int inner = p->rank - 1;
    copy_job job;
    double elements = 1.0;
    int axis;
    job.p = p;
    job.s = (const uint8_t *)src + (ptrdiff_t)p->src_offset * es;
    job.d = (uint8_t *)dst + (ptrdiff_t)p->dst_offset * es;
    /* a short innermost axis written contiguously, read across rows: the two inner axes as
     * one interleave per odometer step (the odometer over the axes before them) */
    job.interleave = inner >= 1 && p->shape[inner] <= 8 && p->dst_strides[inner] == 1 &&
                     p->src_strides[inner - 1] == 1 && p->dst_strides[inner - 1] == p->shape[inner];
    job.rows = mlcc_odometer_rows(job.interleave ? inner : p->rank, p->shape);
    for (axis = 0; axis < p->rank; axis++) elements *= (double)p->shape[axis];
    /* by rows between threads: bytes, not elements, decide (memory-bound); one contiguous
     * block (a Concat's input, a Slice of whole planes) by ranges of 64-byte lines */
    job.flat_lines = 0;
    job.flat_bytes = (ptrdiff_t)elements * es;
    if (job.rows == 1 && !job.interleave && inner >= 0 && p->src_strides[inner] == 1 &&
        p->dst_strides[inner] == 1)
        job.flat_lines = job.flat_bytes / 64;
    job.units = mlcc_parallel_units(nt, elements * (double)es,
                                    4.0 * (double)MLCC_MIN_PARALLEL_ELEMENTS,
                                    job.flat_lines > 0 ? job.flat_lines : (ptrdiff_t)job.rows);
    if (job.units <= 1) {
        copy_part(p, job.s, job.d, job.interleave, 0, job.rows);
        return;
    }
    mlcc_threadpool_for(pool, copy_unit, &job, job.units, job.units);
}
