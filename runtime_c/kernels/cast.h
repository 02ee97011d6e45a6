/* Element type conversion between the run-time types (enum mlcc_dtype), as ONNX Cast:
 * float to integer truncates toward zero; integer to narrower integer keeps the low bits;
 * anything to bool is (x != 0); bool reads as 0 or 1; float16 is IEEE binary16, converted with
 * round-to-nearest-even (overflow to infinity, NaN kept).
 * The storage-only types (mlcc_runtime.h) follow ONNX Cast-25 as the ONNX reference implements
 * it (onnx.reference with ml_dtypes): bfloat16, float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) and
 * float4 e2m1 round to nearest even from the exact source value. float8 with saturate != 0
 * clamps finite overflow and infinities to the largest finite value; with saturate == 0 they
 * become infinity (e5m2) or NaN (e4m3fn, the FNUZ types: 0x80, which have no negative zero).
 * float4 e2m1 always clamps (it has no infinity or NaN; NaN gives the code ml_dtypes gives).
 * float8 e8m0 (a power of two, 0xFF = NaN) takes the float32 exponent of the source, rounded
 * by round_mode (up, down, nearest), the sign ignored; saturate keeps 0xFE from rounding up
 * into NaN. int4, uint4, int2 and uint2 keep the low bits of the integer (floats truncated
 * toward zero first), as the other narrowing integer casts and as the ONNX reference does.
 * Packed outputs (int4, uint4, float4, int2, uint2) are written whole bytes at a time, in
 * order, with the unused high bits of the last byte 0: x and y must not overlap.
 * Float values outside the target's range (and NaN) have no ONNX-defined result; here they give
 * what x86 compilers produce for C casts (INT64_MIN, INT32_MIN, or the low bits of the int32
 * conversion for narrower types), without undefined behaviour. */
#ifndef MLCC_CAST_H
#define MLCC_CAST_H

#include "mlcc_kernel.h"

enum mlcc_round_mode { MLCC_ROUND_UP = 0, MLCC_ROUND_DOWN = 1, MLCC_ROUND_NEAREST = 2 };

typedef struct mlcc_cast_params {
    int64_t n;                  /* elements */
    int32_t from, to;           /* enum mlcc_dtype; from != to */
    int32_t saturate;           /* float8 targets: 1 clamps overflow to the largest finite */
    int32_t round_mode;         /* float8 e8m0 targets: enum mlcc_round_mode */
} mlcc_cast_params;

void mlcc_cast(const mlcc_cast_params *p, const void *x, void *y);

#endif /* MLCC_CAST_H */
