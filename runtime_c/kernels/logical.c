#include "logical.h"

/* One innermost row of a comparison for one element type T: the op switch sits outside the
 * loops so that each loop is a plain vectorizable compare. */
#define COMPARE_ROW(NAME, T)                                                                \
    static void NAME(int op, const void *va, ptrdiff_t sa, const void *vb, ptrdiff_t sb,   \
                     uint8_t *y, ptrdiff_t n) {                                            \
        const T *a = (const T *)va, *b = (const T *)vb;                                    \
        ptrdiff_t i;                                                                       \
        switch (op) {                                                                      \
        case MLCC_COMPARE_EQUAL:                                                           \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] == b[i * sb]);              \
            break;                                                                         \
        case MLCC_COMPARE_LESS:                                                            \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] < b[i * sb]);               \
            break;                                                                         \
        case MLCC_COMPARE_LESS_EQUAL:                                                      \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] <= b[i * sb]);              \
            break;                                                                         \
        case MLCC_COMPARE_GREATER:                                                         \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] > b[i * sb]);               \
            break;                                                                         \
        case MLCC_COMPARE_GREATER_EQUAL:                                                   \
            for (i = 0; i < n; i++) y[i] = (uint8_t)(a[i * sa] >= b[i * sb]);              \
            break;                                                                         \
        case MLCC_COMPARE_AND:                                                             \
            for (i = 0; i < n; i++) y[i] = (uint8_t)((a[i * sa] != 0) & (b[i * sb] != 0)); \
            break;                                                                         \
        case MLCC_COMPARE_OR:                                                              \
            for (i = 0; i < n; i++) y[i] = (uint8_t)((a[i * sa] != 0) | (b[i * sb] != 0)); \
            break;                                                                         \
        default:                                                                           \
            for (i = 0; i < n; i++) y[i] = (uint8_t)((a[i * sa] != 0) ^ (b[i * sb] != 0)); \
            break;                                                                         \
        }                                                                                  \
    }

COMPARE_ROW(compare_f32, float)
COMPARE_ROW(compare_i64, int64_t)
COMPARE_ROW(compare_i32, int32_t)
COMPARE_ROW(compare_i8, int8_t)
COMPARE_ROW(compare_u8, uint8_t)
COMPARE_ROW(compare_i16, int16_t)
COMPARE_ROW(compare_u16, uint16_t)
COMPARE_ROW(compare_u32, uint32_t)
COMPARE_ROW(compare_u64, uint64_t)
COMPARE_ROW(compare_f64, double)

void mlcc_compare(const mlcc_compare_params *p, const void *a, const void *b, uint8_t *y) {
    void (*row)(int, const void *, ptrdiff_t, const void *, ptrdiff_t, uint8_t *, ptrdiff_t);
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner];
    ptrdiff_t es;
    int64_t index[MLCC_MAX_RANK] = {0};
    ptrdiff_t ao = 0, bo = 0, yo = 0;
    int axis;
    switch (p->dtype) {
    case MLCC_FLOAT32: row = compare_f32; es = 4; break;
    case MLCC_INT64: row = compare_i64; es = 8; break;
    case MLCC_INT32: row = compare_i32; es = 4; break;
    case MLCC_INT8: row = compare_i8; es = 1; break;
    case MLCC_INT16: row = compare_i16; es = 2; break;
    case MLCC_UINT16: row = compare_u16; es = 2; break;
    case MLCC_UINT32: row = compare_u32; es = 4; break;
    case MLCC_UINT64: row = compare_u64; es = 8; break;
    case MLCC_FLOAT64: row = compare_f64; es = 8; break;
    default: row = compare_u8; es = 1; break;   /* uint8 and bool */
    }
    for (axis = 0; axis < p->rank; axis++)
        if (p->shape[axis] == 0) return;
    for (;;) {
        row(p->op, (const uint8_t *)a + ao * es, (ptrdiff_t)p->a_strides[inner],
            (const uint8_t *)b + bo * es, (ptrdiff_t)p->b_strides[inner], y + yo, n);
        yo += n;
        for (axis = inner - 1; axis >= 0; axis--) {
            index[axis]++;
            ao += (ptrdiff_t)p->a_strides[axis];
            bo += (ptrdiff_t)p->b_strides[axis];
            if (index[axis] < p->shape[axis]) break;
            ao -= (ptrdiff_t)(p->a_strides[axis] * p->shape[axis]);
            bo -= (ptrdiff_t)(p->b_strides[axis] * p->shape[axis]);
            index[axis] = 0;
        }
        if (axis < 0) return;
    }
}

/* One innermost row of Where for elements of ES bytes: memcpy of a constant size compiles to
 * one load and store, and keeps the element type out of the aliasing rules. */
#define WHERE_ROW(NAME, ES)                                                                  \
    static void NAME(const uint8_t *c, ptrdiff_t sc, const uint8_t *x, ptrdiff_t sx,        \
                     const uint8_t *y, ptrdiff_t sy, uint8_t *o, ptrdiff_t n) {              \
        ptrdiff_t i;                                                                         \
        for (i = 0; i < n; i++)                                                              \
            memcpy(o + i * (ES), c[i * sc] ? x + i * sx * (ES) : y + i * sy * (ES), (ES));  \
    }

WHERE_ROW(where_1, 1)
WHERE_ROW(where_4, 4)
WHERE_ROW(where_8, 8)

void mlcc_where(const mlcc_where_params *p, const uint8_t *cond, const void *x, const void *y,
                void *out) {
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner], es = (ptrdiff_t)p->elem_size;
    const uint8_t *xb = (const uint8_t *)x, *yb = (const uint8_t *)y;
    uint8_t *ob = (uint8_t *)out;
    int64_t index[MLCC_MAX_RANK] = {0};
    ptrdiff_t co = 0, xo = 0, yo = 0, oo = 0, i;
    int axis;
    for (axis = 0; axis < p->rank; axis++)
        if (p->shape[axis] == 0) return;
    for (;;) {
        const uint8_t *c = cond + co;
        const ptrdiff_t sc = (ptrdiff_t)p->c_strides[inner];
        const ptrdiff_t sx = (ptrdiff_t)p->x_strides[inner], sy = (ptrdiff_t)p->y_strides[inner];
        switch (es) {
        case 1: where_1(c, sc, xb + xo, sx, yb + yo, sy, ob + oo * es, n); break;
        case 4: where_4(c, sc, xb + xo * 4, sx, yb + yo * 4, sy, ob + oo * es, n); break;
        case 8: where_8(c, sc, xb + xo * 8, sx, yb + yo * 8, sy, ob + oo * es, n); break;
        default:
            for (i = 0; i < n; i++)
                memcpy(ob + (oo + i) * es, c[i * sc] ? xb + (xo + i * sx) * es
                                                     : yb + (yo + i * sy) * es, (size_t)es);
            break;
        }
        oo += n;
        for (axis = inner - 1; axis >= 0; axis--) {
            index[axis]++;
            co += (ptrdiff_t)p->c_strides[axis];
            xo += (ptrdiff_t)p->x_strides[axis];
            yo += (ptrdiff_t)p->y_strides[axis];
            if (index[axis] < p->shape[axis]) break;
            co -= (ptrdiff_t)(p->c_strides[axis] * p->shape[axis]);
            xo -= (ptrdiff_t)(p->x_strides[axis] * p->shape[axis]);
            yo -= (ptrdiff_t)(p->y_strides[axis] * p->shape[axis]);
            index[axis] = 0;
        }
        if (axis < 0) return;
    }
}
