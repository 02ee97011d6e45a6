/* Element type conversion between the run-time types (enum mlcc_dtype), as ONNX Cast:
 * float to integer truncates toward zero; integer to narrower integer keeps the low bits;
 * anything to bool is (x != 0); bool reads as 0 or 1; float16 is IEEE binary16, converted with
 * round-to-nearest-even (overflow to infinity, NaN kept).
 * Float values outside the target's range (and NaN) have no ONNX-defined result; here they give
 * what x86 compilers produce for C casts (INT64_MIN, INT32_MIN, or the low bits of the int32
 * conversion for narrower types), without undefined behaviour. */
#ifndef MLCC_CAST_H
#define MLCC_CAST_H

#include "mlcc_kernel.h"

typedef struct mlcc_cast_params {
    int64_t n;                  /* elements */
    int32_t from, to;           /* enum mlcc_dtype; from != to */
} mlcc_cast_params;

void mlcc_cast(const mlcc_cast_params *p, const void *x, void *y);

#endif /* MLCC_CAST_H */
