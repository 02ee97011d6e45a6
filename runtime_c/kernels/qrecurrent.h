/* onnxruntime's DynamicQuantizeLSTM (com.microsoft): an LSTM with int8 or uint8 weights whose
 * activations are quantized at run time, as onnxruntime's CPU kernel computes it
 * (docs/quantization.md). Per direction:
 *   1. the input projections of the steps that run (rows t < max(sequence_lens) of X, every
 *      sequence of the batch) as ONE product: those rows of X quantized together to uint8 as
 *      DynamicQuantizeLinear does (scale xs, zero point xz), times W in int32, then
 *      proj = (float)acc * (xs * w_scale[col]) (the multiplier rounded to float32 first);
 *   2. per time step, h_{t-1} of the batch quantized the same way (its own hs, hz, over the
 *      sequences still running, and, when Y is wanted, those that ended at this step: an
 *      ended one's h counts as 0 in onnxruntime, which never widens the range; without Y it
 *      keeps its last h, which counts), times R in int32, accumulated into the step's
 *      projection: gates = proj + (float)acc * (hs * r_scale[col]);
 *   3. the gates of mlcc_f32_recurrent (recurrent.c) with the bias Wb + Rb added first.
 * The int32 sums are exact: the bits do not depend on the number of threads. */
#ifndef MLCC_QRECURRENT_H
#define MLCC_QRECURRENT_H

#include "recurrent.h"

typedef struct mlcc_dynamic_quantize_lstm_params {
    mlcc_recurrent_params r;           /* cell LSTM, layout 0 */
    /* per direction: the packed weights hold int8 codes c = w - 128 (uint8 W) or w (int8 W);
     * offset = (128 or 0) - zero point, so that w - zero point = c + offset */
    int32_t w_offset[2], r_offset[2];
} mlcc_dynamic_quantize_lstm_params;

/* x: [seq][batch][input] float.
 * w_packed: the codes c of W of both directions as one [input x num_directions * 4H] matrix,
 *      packed for mlcc_u8_fc ([ceil(input / 4)][num_directions * 4H][4]);
 * r_packed: per direction, R's codes [hidden x 4H] packed likewise, one after the other;
 * colsum: int32 [2][num_directions * 4H]: per column, sum_k (w - zero point) of W, then R;
 * scale: float [2][num_directions * 4H]: the scale of each column of W, then R;
 * bias: [num_directions][4H] = Wb + Rb, or NULL; peep, seq_lens, init_h, init_c, y, y_h, y_c
 *      as mlcc_f32_recurrent (layout 0).
 * scratch: mlcc/ops/contrib_quant.py dq_lstm_scratch_bytes() bytes.
 * Returns MLCC_OK, or MLCC_ERR_INDEX_OUT_OF_RANGE (having written nothing) when a sequence
 * length is negative or longer than seq. */
int mlcc_f32_dynamic_quantize_lstm(const mlcc_dynamic_quantize_lstm_params *p, const float *x,
                                   const int8_t *w_packed, const int8_t *r_packed,
                                   const int32_t *colsum, const float *scale, const float *bias,
                                   const float *peep, const int32_t *seq_lens,
                                   const float *init_h, const float *init_c, float *y,
                                   float *y_h, float *y_c, void *scratch,
                                   mlcc_threadpool *pool);

#endif /* MLCC_QRECURRENT_H */
