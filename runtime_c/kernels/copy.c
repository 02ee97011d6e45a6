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

/* The arguments of one call, for the two range functions below. */
typedef struct copy_call {
    const mlcc_copy_params *p;
    const uint8_t *s;
    uint8_t *d;
    int interleave;
    ptrdiff_t lines, bytes;   /* one contiguous block: its 64-byte lines and its bytes */
} copy_call;

static void copy_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const copy_call *c = (const copy_call *)arg;
    copy_part(c->p, c->s, c->d, c->interleave, r0, r1);
}

/* Lines [l0, l1) of a contiguous block; the range that ends the block takes its tail. */
static void copy_lines(void *arg, ptrdiff_t l0, ptrdiff_t l1) {
    const copy_call *c = (const copy_call *)arg;
    const ptrdiff_t b1 = l1 == c->lines ? c->bytes : l1 * 64;
    memcpy(c->d + l0 * 64, c->s + l0 * 64, (size_t)(b1 - l0 * 64));
}

void mlcc_copy_strided(const mlcc_copy_params *p, const void *src, void *dst,
                       mlcc_threadpool *pool) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    const int inner = p->rank - 1;
    copy_call call;
    double elements = 1.0;
    int64_t rows;
    int axis;
    call.p = p;
    call.s = (const uint8_t *)src + (ptrdiff_t)p->src_offset * es;
    call.d = (uint8_t *)dst + (ptrdiff_t)p->dst_offset * es;
    /* a short innermost axis written contiguously, read across rows: the two inner axes as
     * one interleave per odometer step (the odometer over the axes before them) */
    call.interleave = inner >= 1 && p->shape[inner] <= 8 && p->dst_strides[inner] == 1 &&
                      p->src_strides[inner - 1] == 1 &&
                      p->dst_strides[inner - 1] == p->shape[inner];
    rows = mlcc_odometer_rows(call.interleave ? inner : p->rank, p->shape);
    for (axis = 0; axis < p->rank; axis++) elements *= (double)p->shape[axis];
    call.bytes = (ptrdiff_t)elements * es;
    call.lines = call.bytes / 64;
    /* by rows between threads: bytes, not elements, decide (memory-bound); one contiguous
     * block (a Concat's input, a Slice of whole planes) by ranges of 64-byte lines */
    if (rows == 1 && !call.interleave && inner >= 0 && p->src_strides[inner] == 1 &&
        p->dst_strides[inner] == 1 && call.lines > 0)
        mlcc_parallel_ranges(pool, copy_lines, &call, call.lines, (double)call.bytes,
                             4.0 * (double)MLCC_MIN_PARALLEL_ELEMENTS);
    else
        mlcc_parallel_ranges(pool, copy_rows, &call, (ptrdiff_t)rows, (double)call.bytes,
                             4.0 * (double)MLCC_MIN_PARALLEL_ELEMENTS);
}
