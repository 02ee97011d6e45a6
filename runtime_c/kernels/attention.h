/* Scaled dot-product attention in one pass per query row: the row of scores lives in a small
 * scratch buffer (in cache) instead of a [heads, Sq, Sk] tensor written and read back by
 * MatMul, Div, Add, Softmax and MatMul kernels in turn.
 *
 * Thread-compatible: no state. out must not overlap q, k, v or mask. */
#ifndef MLCC_ATTENTION_H
#define MLCC_ATTENTION_H

#include "mlcc_kernel.h"

/* Scores are padded to a multiple of this many columns in the scratch buffer. */
#define MLCC_ATTENTION_PAD 16

/* Threads of a pool that share one attention (each with its own scratch copy). */
#define MLCC_ATTENTION_SLICES 4

/* For b < batch, h < heads, i < sq (every operand addressed through its own element strides,
 * in the order [b][h][row][column], so that transposed and broadcast operands cost nothing;
 * key and value head g = h / group, so that group query heads share one key/value head):
 *   t[j]       = scale * sum_{c < d} q[b][h][i][c] * k[b][g][j][c]
 *   s[j]       = (softcap > 0 ? softcap * tanh(t[j] / softcap) : t[j]) + mask[b][h][i][j]
 *   p[j]       = exp(s[j] - max s) / sum_j' exp(s[j'] - max s)          (j < sk)
 *   out[b][h][i][c] = sum_j p[j] * v[b][g][j][c]                         (c < dv)
 * mask may be NULL (no mask). A row whose mask is -inf at every key (no key may be attended)
 * gives out = 0 (ONNX Attention's fully-masked-row rule), not NaN. scratch holds MLCC_ATTENTION_SLICES copies of (d + 4) *
 * round_up(sk, MLCC_ATTENTION_PAD) floats (mlcc/ops/attention.py scratch_floats()), one per
 * thread. On pool (NULL: the calling thread only), up to MLCC_ATTENTION_SLICES threads take
 * units of (batch, head, range of query rows); the cut depends on the shape alone, so the
 * results are the same bits on any number of threads. Under MLCC_MIN_PARALLEL_MACS
 * multiply-adds everything runs on the caller. */
typedef struct mlcc_attention_params {
    int64_t batch, heads, sq, sk, d, dv, group;   /* dv: value head size; group >= 1 */
    int64_t q_strides[4], k_strides[4], v_strides[4], mask_strides[4], out_strides[4];
    float scale, softcap;                          /* softcap 0: none */
} mlcc_attention_params;

void mlcc_f32_attention(const mlcc_attention_params *p, const float *q, const float *k,
                        const float *v, const float *mask, float *out, float *scratch,
                        mlcc_threadpool *pool);

#endif /* MLCC_ATTENTION_H */
