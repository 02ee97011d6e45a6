/* RotaryEmbedding (ONNX opset 23): rotates the first rot_dim values of every head by the
 * angles of its position.
 *
 * Thread-compatible: no state; y must not overlap x. */
#ifndef MLCC_ROTARY_H
#define MLCC_ROTARY_H

#include "mlcc_kernel.h"

/* x and y: [batch][seq][heads][head_size] at element strides stride_b, stride_s, stride_h
 * (the last axis contiguous), which covers both ONNX layouts, [batch, heads, seq, head] and
 * [batch, seq, heads * head]. With position ids (pos != NULL, [batch][seq]), the angles of
 * (b, s) are row pos[b][s] of cos and sin ([max_pos][rot_dim / 2]); an id outside
 * [0, max_pos) fails with MLCC_ERR_INDEX_OUT_OF_RANGE before anything is written. Without,
 * cos and sin are [batch][seq][rot_dim / 2]. Pairs (x1, x2) are (j, j + rot_dim / 2), or
 * (2j, 2j + 1) when interleaved: y1 = cos x1 - sin x2, y2 = sin x1 + cos x2; the values past
 * rot_dim are copied. */
typedef struct mlcc_rotary_params {
    int64_t batch, seq, heads, head_size, rot_dim, interleaved;
    int64_t stride_b, stride_s, stride_h;
    int64_t max_pos;
} mlcc_rotary_params;

int mlcc_f32_rotary_embedding(const mlcc_rotary_params *p, const float *x, const float *cos,
                              const float *sin, const int64_t *pos, float *y);

#endif /* MLCC_ROTARY_H */
