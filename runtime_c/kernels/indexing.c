#include "indexing.h"

/* The arg reduction for element type T: one comparison per element, in order (NaN is
 * neither better nor worse, so a NaN in front keeps index 0, as onnxruntime's). */
#define ARG_REDUCE(T)                                                                        \
    do {                                                                                     \
        const T *xs = (const T *)x;                                                          \
        for (o = 0; o < (ptrdiff_t)p->outer; o++)                                            \
            for (i = 0; i < inner; i++) {                                                    \
                const T *col = xs + o * dim * inner + i;                                     \
                ptrdiff_t best = 0;                                                          \
                T v = col[0];                                                                \
                for (k = 1; k < dim; k++) {                                                  \
                    const T c = col[k * inner];                                              \
                    const int better = p->is_min ? (p->select_last ? c <= v : c < v)         \
                                                 : (p->select_last ? c >= v : c > v);        \
                    if (better) {                                                            \
                        v = c;                                                               \
                        best = k;                                                            \
                    }                                                                        \
                }                                                                            \
                y[o * inner + i] = (int64_t)best;                                            \
            }                                                                                \
    } while (0)

void mlcc_arg_reduce(const mlcc_arg_reduce_params *p, const void *x, int64_t *y) {
    const ptrdiff_t dim = (ptrdiff_t)p->dim, inner = (ptrdiff_t)p->inner;
    ptrdiff_t o, i, k;
    if (dim <= 0) return;   /* (the compiler refuses an empty axis) */
    switch (p->dtype) {
    case MLCC_FLOAT32: ARG_REDUCE(float); break;
    case MLCC_FLOAT64: ARG_REDUCE(double); break;
    case MLCC_INT8: ARG_REDUCE(int8_t); break;
    case MLCC_UINT8: ARG_REDUCE(uint8_t); break;
    case MLCC_INT16: ARG_REDUCE(int16_t); break;
    case MLCC_UINT16: ARG_REDUCE(uint16_t); break;
    case MLCC_INT32: ARG_REDUCE(int32_t); break;
    case MLCC_UINT32: ARG_REDUCE(uint32_t); break;
    case MLCC_INT64: ARG_REDUCE(int64_t); break;
    case MLCC_UINT64: ARG_REDUCE(uint64_t); break;
    default: break;
    }
}

/* Running sums (prod = 0) or products (prod = 1) for element type T, accumulated in ACC
 * (the unsigned type of the same size for integers: they wrap, without signed overflow) and
 * stored bit for bit. */
#define CUMULATE(T, ACC)                                                                     \
    do {                                                                                     \
        const T *xs = (const T *)x;                                                          \
        T *ys = (T *)y;                                                                      \
        for (o = 0; o < (ptrdiff_t)p->outer; o++)                                            \
            for (i = 0; i < inner; i++) {                                                    \
                ACC acc = (ACC)(prod ? 1 : 0);                                               \
                for (j = 0; j < dim; j++) {                                                  \
                    const ptrdiff_t k = p->reverse ? dim - 1 - j : j;                        \
                    const ptrdiff_t at = (o * dim + k) * inner + i;                          \
                    const ACC v = (ACC)xs[at];                                               \
                    if (!p->exclusive) acc = prod ? (ACC)(acc * v) : (ACC)(acc + v);         \
                    memcpy(&ys[at], &acc, sizeof acc);                                       \
                    if (p->exclusive) acc = prod ? (ACC)(acc * v) : (ACC)(acc + v);          \
                }                                                                            \
            }                                                                                \
    } while (0)

static void cumulate(const mlcc_cumsum_params *p, const void *x, void *y, int prod) {
    const ptrdiff_t dim = (ptrdiff_t)p->dim, inner = (ptrdiff_t)p->inner;
    ptrdiff_t o, i, j;
    switch (p->dtype) {
    case MLCC_FLOAT32: CUMULATE(float, float); break;
    case MLCC_FLOAT64: CUMULATE(double, double); break;
    case MLCC_INT32: CUMULATE(int32_t, uint32_t); break;
    case MLCC_INT64: CUMULATE(int64_t, uint64_t); break;
    case MLCC_UINT32: CUMULATE(uint32_t, uint32_t); break;
    case MLCC_UINT64: CUMULATE(uint64_t, uint64_t); break;
    default: break;
    }
}

void mlcc_cumsum(const mlcc_cumsum_params *p, const void *x, void *y) {
    cumulate(p, x, y, 0);
}

void mlcc_cumprod(const mlcc_cumprod_params *p, const void *x, void *y) {
    cumulate(p, x, y, 1);
}

static int gather_elements(const mlcc_gather_elements_params *p, const void *data,
                           const void *indices, int wide, void *out) {
    const ptrdiff_t es = (ptrdiff_t)p->elem_size;
    const uint8_t *src = (const uint8_t *)data;
    uint8_t *dst = (uint8_t *)out;
    int64_t index[MLCC_MAX_RANK] = {0};
    ptrdiff_t total = 1, n, off = 0;
    int axis;
    for (axis = 0; axis < p->rank; axis++) total *= (ptrdiff_t)p->shape[axis];
    if (mlcc_elements_check(indices, wide, total, p->axis_dim) != MLCC_OK)
        return MLCC_ERR_INDEX_OUT_OF_RANGE;
    for (n = 0; n < total; n++) {
        int64_t idx = mlcc_elements_index(indices, wide, n);
        if (idx < 0) idx += p->axis_dim;
        memcpy(dst + n * es,
               src + (off + (ptrdiff_t)(idx * p->data_strides[p->axis])) * es, (size_t)es);
        mlcc_elements_next(p->rank, p->axis, p->shape, p->data_strides, index, &off);
    }
    return MLCC_OK;
}

int mlcc_gather_elements__i64(const mlcc_gather_elements_params *p, const void *data,
                              const int64_t *indices, void *out) {
    return gather_elements(p, data, indices, 1, out);
}

int mlcc_gather_elements__i32(const mlcc_gather_elements_params *p, const void *data,
                              const int32_t *indices, void *out) {
    return gather_elements(p, data, indices, 0, out);
}

int mlcc_reverse_sequence(const mlcc_reverse_sequence_params *p, const void *x,
                          const int64_t *lens, void *y) {
    const ptrdiff_t es = p->elem_size, row = (ptrdiff_t)p->inner * es;
    const uint8_t *src = (const uint8_t *)x;
    uint8_t *dst = (uint8_t *)y;
    ptrdiff_t b, t;
    for (b = 0; b < (ptrdiff_t)p->batch; b++)
        if (lens[b] < 0 || lens[b] > p->time) return MLCC_ERR_INDEX_OUT_OF_RANGE;
    for (b = 0; b < (ptrdiff_t)p->batch; b++)
        for (t = 0; t < (ptrdiff_t)p->time; t++) {
            const ptrdiff_t from = t < (ptrdiff_t)lens[b] ? (ptrdiff_t)lens[b] - 1 - t : t;
            memcpy(dst + (b * (ptrdiff_t)p->batch_stride + t * (ptrdiff_t)p->time_stride) * es,
                   src + (b * (ptrdiff_t)p->batch_stride + from * (ptrdiff_t)p->time_stride) * es,
                   (size_t)row);
        }
    return MLCC_OK;
}
