#include "elementwise.h"

/* log(1 + e^x) without overflow for large x */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* max(0, x) + min(0, alpha (e^(x/alpha) - 1)): one term is 0 on either side of 0; NaN takes
   the second branch and stays NaN */
static float celu(float x, float alpha) {
    return x > 0.0f ? x : alpha * (expf(x / alpha) - 1.0f);
}

void mlcc_f32_unary(const mlcc_unary_params *p, const float *x, float *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n;
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

void mlcc_f32_binary(const mlcc_binary_params *p, const float *a, const float *b, float *y) {
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner];
    mlcc_odometer o;
    if (!mlcc_odometer_init(&o, p->rank, p->shape, p->a_strides, p->b_strides, NULL)) return;
    do {
        binary_row(p->op, a + o.off[0], (ptrdiff_t)p->a_strides[inner], b + o.off[1],
                   (ptrdiff_t)p->b_strides[inner], y, n);
        y += n;
    } while (mlcc_odometer_next(&o));
}
