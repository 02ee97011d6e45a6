/* The recurrence of ONNX LinearAttention (linear, gated, delta and gated-delta linear attention),
 * one step after the other. Thread-compatible: no state of its own. */
#ifndef MLCC_LINEAR_ATTENTION_H
#define MLCC_LINEAR_ATTENTION_H

#include "mlcc_kernel.h"

/* For each batch b, key/value head h and step t in order, on the state
 * S = state[b][h] ([dk][dv], starting as past, or zeros when past is NULL):
 *   gating (decay != NULL):  S[d][:] *= exp(decay[b][t][h][d or 0])   (decay_dk: per key dim)
 *   delta (beta != NULL):    u = beta[b][t][h or 0] * (v_t - S^T k_t), else u = v_t
 *   S += k_t (outer) u;   out[b][t][g][:] = scale * q_t[g]^T S  for the query heads g of h
 * q [batch][t][qh * dk], k [batch][t][kvh * dk], v [batch][t][kvh * dv], out [batch][t][qh *
 * dv], state [batch][kvh][dk][dv] (present_state); query head g reads head g / (qh / kvh).
 * scratch: dv floats. */
typedef struct mlcc_linear_attention_params {
    int64_t batch, t, qh, kvh, dk, dv;
    int32_t decay_dk, beta_heads;      /* beta_heads: kvh, or 1 (one beta for every head) */
    float scale;
} mlcc_linear_attention_params;

void mlcc_f32_linear_attention(const mlcc_linear_attention_params *p, const float *q,
                               const float *k, const float *v, const float *past,
                               const float *decay, const float *beta, float *out,
                               float *state, float *scratch);

#endif /* MLCC_LINEAR_ATTENTION_H */
