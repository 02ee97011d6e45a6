#include "cast.h"

/* Two's complement narrowing without implementation-defined conversions. */
static inline int32_t wrap_i32(int64_t v) {
    uint32_t u = (uint32_t)(uint64_t)v;
    return u <= 0x7FFFFFFFu ? (int32_t)u : (int32_t)(u - 0x80000000u) - INT32_MAX - 1;
}
static inline int8_t wrap_i8(int64_t v) {
    uint8_t u = (uint8_t)(uint64_t)v;
    return u <= 0x7Fu ? (int8_t)u : (int8_t)((int)u - 256);
}
static inline uint8_t wrap_u8(int64_t v) { return (uint8_t)(uint64_t)v; }

/* Truncation toward zero; out of range and NaN give the x86 "integer indefinite" value. */
static inline int64_t f32_to_i64(float v) {
    return (v >= -9223372036854775808.0f && v < 9223372036854775808.0f) ? (int64_t)v : INT64_MIN;
}
static inline int32_t f32_to_i32(float v) {
    return (v >= -2147483648.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN;
}

/* One loop per (source, target) pair: the source is read as its own type, widened to int64_t
 * (integers) or kept as float, then converted by CONV. */
#define CAST_LOOP(TI, TO, CONV)                                   \
    do {                                                          \
        const TI *s = (const TI *)x;                              \
        TO *d = (TO *)y;                                          \
        for (i = 0; i < n; i++) d[i] = CONV(s[i]);                \
        return;                                                   \
    } while (0)

/* Dispatches on the source type for one target type and its two conversions. */
#define CAST_FROM_ANY(TO, FROM_INT, FROM_F32)                     \
    switch (p->from) {                                            \
    case MLCC_FLOAT32: CAST_LOOP(float, TO, FROM_F32);            \
    case MLCC_INT64: CAST_LOOP(int64_t, TO, FROM_INT);            \
    case MLCC_INT32: CAST_LOOP(int32_t, TO, FROM_INT);            \
    case MLCC_INT8: CAST_LOOP(int8_t, TO, FROM_INT);              \
    case MLCC_UINT8:                                              \
    case MLCC_BOOL: CAST_LOOP(uint8_t, TO, FROM_INT);             \
    default: return;                                              \
    }

#define AS_F32(v) ((float)(v))
#define AS_I64(v) ((int64_t)(v))
#define I_TO_I32(v) wrap_i32((int64_t)(v))
#define I_TO_I8(v) wrap_i8((int64_t)(v))
#define I_TO_U8(v) wrap_u8((int64_t)(v))
#define F_TO_I8(v) wrap_i8(f32_to_i32(v))
#define F_TO_U8(v) wrap_u8(f32_to_i32(v))
#define TO_BOOL(v) ((uint8_t)((v) != 0))

void mlcc_cast(const mlcc_cast_params *p, const void *x, void *y) {
    const ptrdiff_t n = (ptrdiff_t)p->n;
    ptrdiff_t i;
    switch (p->to) {
    case MLCC_FLOAT32: CAST_FROM_ANY(float, AS_F32, AS_F32)
    case MLCC_INT64: CAST_FROM_ANY(int64_t, AS_I64, f32_to_i64)
    case MLCC_INT32: CAST_FROM_ANY(int32_t, I_TO_I32, f32_to_i32)
    case MLCC_INT8: CAST_FROM_ANY(int8_t, I_TO_I8, F_TO_I8)
    case MLCC_UINT8: CAST_FROM_ANY(uint8_t, I_TO_U8, F_TO_U8)
    case MLCC_BOOL: CAST_FROM_ANY(uint8_t, TO_BOOL, TO_BOOL)
    default: return;
    }
}
