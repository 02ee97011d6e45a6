#include "int_arith.h"

/* Every operation runs on 64-bit values: signed types sign-extended, unsigned zero-extended;
 * + - * in uint64_t (wrapping, no signed overflow), then truncated to the element type by the
 * store, which keeps the low bits as two's complement does. */
static int64_t sdiv(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0 - (uint64_t)a);            /* INT64_MIN / -1 wraps */
    return a / b;
}
static int64_t smod(int64_t a, int64_t b, int c_style) {
    int64_t r;
    if (b == 0 || b == -1) return 0;
    r = a % b;
    if (!c_style && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static uint64_t upow(uint64_t base, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}
static int64_t spow(int64_t base, int64_t e) {
    if (e < 0) return base == 1 ? 1 : base == -1 ? (((uint64_t)e & 1) ? -1 : 1) : 0;
    return (int64_t)upow((uint64_t)base, (uint64_t)e);
}

static uint64_t uop(int op, uint64_t a, uint64_t b) {
    switch (op) {
    case MLCC_INT_ADD: return a + b;
    case MLCC_INT_SUB: return a - b;
    case MLCC_INT_MUL: return a * b;
    case MLCC_INT_DIV: return b ? a / b : 0;
    case MLCC_INT_MOD: case MLCC_INT_FMOD: return b ? a % b : 0;
    case MLCC_INT_MAX: return a > b ? a : b;
    case MLCC_INT_MIN: return a < b ? a : b;
    case MLCC_INT_AND: return a & b;
    case MLCC_INT_OR: return a | b;
    case MLCC_INT_XOR: return a ^ b;
    /* the narrower types are zero-extended to 64 bits: shifting there then keeping the low
     * bits is the narrow shift; 64 and more would be undefined in C */
    case MLCC_INT_SHL: return b < 64 ? a << b : 0;
    case MLCC_INT_SHR: return b < 64 ? a >> b : 0;
    default: return upow(a, b);
    }
}

static int64_t sop(int op, int64_t a, int64_t b) {
    switch (op) {
    case MLCC_INT_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case MLCC_INT_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case MLCC_INT_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case MLCC_INT_DIV: return sdiv(a, b);
    case MLCC_INT_MOD: return smod(a, b, 0);
    case MLCC_INT_FMOD: return smod(a, b, 1);
    case MLCC_INT_MAX: return a > b ? a : b;
    case MLCC_INT_MIN: return a < b ? a : b;
    case MLCC_INT_AND: return a & b;
    case MLCC_INT_OR: return a | b;
    case MLCC_INT_XOR: return a ^ b;
    /* shifts of a sign-extended value: left keeps the low bits, right is arithmetic (written
     * without shifting a negative number, which C leaves to the implementation); a shift
     * by a negative amount or by 64 and more gives 0, or -1 for a negative a shifted right */
    case MLCC_INT_SHL: return b < 0 || b >= 64 ? 0 : (int64_t)((uint64_t)a << b);
    case MLCC_INT_SHR:
        if (b < 0 || b >= 64) return a < 0 ? -1 : 0;
        return a < 0 ? ~(~a >> b) : a >> b;
    default: return spow(a, b);
    }
}

/* One innermost row for element type T, computed in W (int64_t or uint64_t) by F. The store
 * of a signed result goes through the unsigned type of T: no implementation-defined
 * narrowing. */
#define INT_ROW(NAME, T, UT, W, F)                                                          \
    static void NAME(int op, const void *va, ptrdiff_t sa, const void *vb, ptrdiff_t sb,   \
                     void *vy, ptrdiff_t n) {                                              \
        const T *a = (const T *)va, *b = (const T *)vb;                                    \
        T *y = (T *)vy;                                                                    \
        ptrdiff_t i;                                                                       \
        for (i = 0; i < n; i++) {                                                          \
            const UT bits = (UT)(uint64_t)F(op, (W)a[i * sa], (W)b[i * sb]);               \
            memcpy(&y[i], &bits, sizeof bits);                                             \
        }                                                                                  \
    }

INT_ROW(row_i8, int8_t, uint8_t, int64_t, sop)
INT_ROW(row_i16, int16_t, uint16_t, int64_t, sop)
INT_ROW(row_i32, int32_t, uint32_t, int64_t, sop)
INT_ROW(row_i64, int64_t, uint64_t, int64_t, sop)
INT_ROW(row_u8, uint8_t, uint8_t, uint64_t, uop)
INT_ROW(row_u16, uint16_t, uint16_t, uint64_t, uop)
INT_ROW(row_u32, uint32_t, uint32_t, uint64_t, uop)
INT_ROW(row_u64, uint64_t, uint64_t, uint64_t, uop)

typedef void (*int_row_fn)(int, const void *, ptrdiff_t, const void *, ptrdiff_t, void *,
                           ptrdiff_t);

/* The row function and element size of an integer dtype; 0 for any other type. */
static ptrdiff_t int_row_of(int dtype, int_row_fn *row) {
    switch (dtype) {
    case MLCC_INT8: *row = row_i8; return 1;
    case MLCC_INT16: *row = row_i16; return 2;
    case MLCC_INT32: *row = row_i32; return 4;
    case MLCC_INT64: *row = row_i64; return 8;
    case MLCC_UINT8: *row = row_u8; return 1;
    case MLCC_UINT16: *row = row_u16; return 2;
    case MLCC_UINT32: *row = row_u32; return 4;
    case MLCC_UINT64: *row = row_u64; return 8;
    default: return 0;
    }
}

/* Addition, subtraction and multiplication of 32-bit values wrap the same way signed or
 * unsigned: one row of them in uint32_t, with the unit and broadcast strides as loops of
 * their own so that they vectorize (the bias Add after a ConvInteger is a row of a tensor
 * plus one value). The same bits as the 64-bit row functions. */
#define W32_ROW(NAME, EXPR)                                                                 \
    static void NAME(int op, const void *va, ptrdiff_t sa, const void *vb, ptrdiff_t sb,   \
                     void *vy, ptrdiff_t n) {                                              \
        const uint32_t *a = (const uint32_t *)va, *b = (const uint32_t *)vb;               \
        uint32_t *y = (uint32_t *)vy;                                                      \
        ptrdiff_t i;                                                                       \
        (void)op;                                                                          \
        if (sa == 1 && sb == 1) {                                                          \
            for (i = 0; i < n; i++) y[i] = (uint32_t)(a[i] EXPR b[i]);                     \
        } else if (sa == 1 && sb == 0) {                                                   \
            const uint32_t bv = b[0];                                                      \
            for (i = 0; i < n; i++) y[i] = (uint32_t)(a[i] EXPR bv);                       \
        } else if (sa == 0 && sb == 1) {                                                   \
            const uint32_t av = a[0];                                                      \
            for (i = 0; i < n; i++) y[i] = (uint32_t)(av EXPR b[i]);                       \
        } else {                                                                           \
            for (i = 0; i < n; i++) y[i] = (uint32_t)(a[i * sa] EXPR b[i * sb]);           \
        }                                                                                  \
    }

W32_ROW(row_w32_add, +)
W32_ROW(row_w32_sub, -)
W32_ROW(row_w32_mul, *)

void mlcc_int_binary(const mlcc_int_binary_params *p, const void *a, const void *b, void *y) {
    int_row_fn row;
    const int inner = p->rank - 1;
    const ptrdiff_t n = (ptrdiff_t)p->shape[inner];
    const ptrdiff_t es = int_row_of(p->dtype, &row);
    mlcc_odometer o;
    if (!es) return;
    if (es == 4 && p->op == MLCC_INT_ADD) row = row_w32_add;
    if (es == 4 && p->op == MLCC_INT_SUB) row = row_w32_sub;
    if (es == 4 && p->op == MLCC_INT_MUL) row = row_w32_mul;
    if (!mlcc_odometer_init(&o, p->rank, p->shape, p->a_strides, p->b_strides, NULL)) return;
    do {
        row(p->op, (const uint8_t *)a + o.off[0] * es, (ptrdiff_t)p->a_strides[inner],
            (const uint8_t *)b + o.off[1] * es, (ptrdiff_t)p->b_strides[inner], y, n);
        y = (uint8_t *)y + n * es;
    } while (mlcc_odometer_next(&o));
}

void mlcc_int_reduce(const mlcc_int_reduce_params *p, const void *x, void *y) {
    int_row_fn row;
    const ptrdiff_t es = int_row_of(p->dtype, &row);
    const ptrdiff_t inner = (ptrdiff_t)p->inner, red = (ptrdiff_t)p->reduce;
    ptrdiff_t o, r;
    if (!es || red < 1) return;
    for (o = 0; o < (ptrdiff_t)p->outer; o++) {
        const uint8_t *src = (const uint8_t *)x + o * red * inner * es;
        uint8_t *dst = (uint8_t *)y + o * inner * es;
        memcpy(dst, src, (size_t)(inner * es));
        for (r = 1; r < red; r++)          /* in place: each element is read, then written */
            row(p->op, dst, 1, src + r * inner * es, 1, dst, inner);
    }
}
