/* The recurrent operators LSTM, GRU and RNN (ONNX), one kernel for the three cells.
 *
 * Each direction runs the same three stages (docs/recurrent.md):
 *   1. the input projections of all time steps and directions as ONE product,
 *      XW[row][dir * G * H + g] = sum_i X[row][i] * W[dir][g][i] + bias[dir][g]
 *      (the panel GEMM, W transposed and packed in 32-column panels at compile time);
 *   2. per time step, the recurrent product H_{t-1} R^T on the same kernel (R packed likewise);
 *   3. per time step, the gates in one pass over the hidden units.
 * G, the gates per cell: 4 for LSTM (i, o, f, c), 3 for GRU (z, r, h), 1 for RNN. */
#ifndef MLCC_RECURRENT_H
#define MLCC_RECURRENT_H

#include "mlcc_kernel.h"

enum mlcc_rnn_cell { MLCC_RNN_CELL_LSTM = 0, MLCC_RNN_CELL_GRU = 1, MLCC_RNN_CELL_RNN = 2 };

/* The activation functions of the ONNX recurrent operators (their spec's names). */
enum mlcc_rnn_act_kind {
    MLCC_RNN_ACT_RELU = 0, MLCC_RNN_ACT_TANH = 1, MLCC_RNN_ACT_SIGMOID = 2,
    MLCC_RNN_ACT_AFFINE = 3,           /* alpha * x + beta */
    MLCC_RNN_ACT_LEAKY_RELU = 4,       /* x >= 0 ? x : alpha * x */
    MLCC_RNN_ACT_THRESHOLDED_RELU = 5, /* x > alpha ? x : 0 */
    MLCC_RNN_ACT_SCALED_TANH = 6,      /* alpha * tanh(beta * x) */
    MLCC_RNN_ACT_HARD_SIGMOID = 7,     /* min(max(alpha * x + beta, 0), 1) */
    MLCC_RNN_ACT_ELU = 8,              /* x >= 0 ? x : alpha * (exp(x) - 1) */
    MLCC_RNN_ACT_SOFTSIGN = 9,         /* x / (1 + |x|) */
    MLCC_RNN_ACT_SOFTPLUS = 10         /* log(1 + exp(x)) */
};

#define MLCC_RNN_MAX_ACTS 3            /* per direction: f, g, h (LSTM); f, g (GRU); f (RNN) */

typedef struct mlcc_recurrent_params {
    int32_t cell;                      /* enum mlcc_rnn_cell */
    int64_t seq, batch, input, hidden;
    int32_t num_directions;            /* 1 or 2 */
    int32_t reverse;                   /* 1: the only direction runs backwards (direction=reverse) */
    int32_t layout;                    /* 0: X [seq][batch][input]; 1: X [batch][seq][input] */
    int32_t input_forget;              /* LSTM: f = 1 - i */
    int32_t linear_before_reset;       /* GRU */
    int32_t has_clip;
    float clip;                        /* pre-activations clipped to [-clip, clip] */
    int32_t act_kind[2 * MLCC_RNN_MAX_ACTS];       /* [direction][f, g, h] */
    float act_alpha[2 * MLCC_RNN_MAX_ACTS], act_beta[2 * MLCC_RNN_MAX_ACTS];
} mlcc_recurrent_params;

/* x: layout 0 [seq][batch][input], 1 [batch][seq][input].
 * w_panels: [W[0]; W[1]]^T (input x num_directions * G * H) in column panels; or NULL: x then
 *      holds the input projections themselves, [seq * batch][num_directions * G * H] with the
 *      bias added, rows in x's order (an int8 model computes them on the integer GEMM), and
 *      neither `input` nor `bias` is read.
 * scratch: mlcc/ops/recurrent.py scratch_floats() floats (without the projections' part when
 *      w_panels is NULL).
 * r_panels: per direction, R^T (H x G * H) in column panels; for GRU two products, those of
 *      z and r (H x 2H) then those of h (H x H). Each direction's panels start where the
 *      previous one's end (mlcc/ops/recurrent.py packs them).
 * bias: [num_directions][G * H], added to the input projections (Wb + Rb; GRU's h gate: Wbh).
 * rbh: GRU only, [num_directions][H] = Rbh, added to the h gate's recurrent product (inside the
 *      reset for linear_before_reset = 1); NULL otherwise.
 * peep: LSTM's P [num_directions][3 * H] (i, o, f) or NULL.
 * seq_lens: [batch] or NULL (all seq). init_h, init_c: [num_directions][batch][H] (layout 0) or
 *      [batch][num_directions][H] (layout 1), or NULL (zeros).
 * y: layout 0 [seq][num_directions][batch][H], 1 [batch][seq][num_directions][H]; y_h, y_c
 *      as init_h. Each may be NULL (not wanted). Outputs past a sequence's length are zero;
 *      y_h and y_c hold the state after its last valid step (zero for a length of 0, as
 *      onnxruntime gives).
 * pool: the input projections are split over its threads, and the two directions of a
 *      bidirectional layer run on two threads at once; the bits do not depend on it.
 * Returns MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE (having written nothing) when a sequence
 * length is negative or longer than seq. */
int mlcc_f32_recurrent(const mlcc_recurrent_params *p, const float *x, const float *w_panels,
                       const float *r_panels, const float *bias, const float *rbh,
                       const float *peep, const int32_t *seq_lens, const float *init_h,
                       const float *init_c, float *y, float *y_h, float *y_c, float *scratch,
                       mlcc_threadpool *pool);

/* v rounded to float on its own, never fused into a multiply-add (-ffp-contract=fast): where
 * the recurrent kernels follow onnxruntime's rounding exactly. */
static inline float mlcc_unfused(float v) {
    volatile float r = v;
    return r;
}

/* Shared with the other recurrent kernel files (qrecurrent.c), not called by generated code:
 * steps 2 and 3 of every direction over a job's buffers.
 *
 * step: NULL for the float recurrent product above. Otherwise it replaces step 2 for the
 *      LSTM cell: at step s of direction d, step(step_ctx, d, s, h, gates, pool) writes
 *      gates[b][0..4H) for every sequence b of the batch from h[b][0..H): its whole
 *      pre-activation but the bias (the input projection of b's time step included), and
 *      gate_bias ([num_directions][4 * H] or NULL) is added to it next, where the float
 *      path adds the input projection row (xw is then not read). */
typedef void (*mlcc_recurrent_step_fn)(const void *ctx, int64_t d, int64_t s, const float *h,
                                       float *gates, mlcc_threadpool *pool);

typedef struct mlcc_recurrent_job {
    const mlcc_recurrent_params *p;
    const float *xw, *r_panels, *rbh, *peep, *init_h, *init_c;
    const int32_t *seq_lens;
    float *y, *y_h, *y_c;
    float *state;             /* per direction mlcc_recurrent_state_floats: gates, h, c, tmp, hh */
    mlcc_recurrent_step_fn step;
    const void *step_ctx;
    const float *gate_bias;
    int32_t ort_arithmetic;   /* LSTM: onnxruntime's sigmoid, tanh and order of the cell's sums
                               * (recurrent.c), which a dynamic-quantized LSTM follows exactly */
    /* set by mlcc_recurrent_directions */
    int64_t state_floats;     /* of one direction */
    mlcc_threadpool *pool;    /* for the products inside a direction; NULL when directions
                               * run in parallel */
} mlcc_recurrent_job;

/* Floats of one direction's state (gates, h, c and two temporaries, each rounded up to 16). */
int64_t mlcc_recurrent_state_floats(const mlcc_recurrent_params *p);
/* Runs every direction of the job (the two of a bidirectional layer on two threads when the
 * pool has them; the bits do not depend on it). */
void mlcc_recurrent_directions(mlcc_recurrent_job *job, mlcc_threadpool *pool);

#endif /* MLCC_RECURRENT_H */
