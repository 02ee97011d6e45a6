/* TfIdfVectorizer (ONNX opset 9, as its reference implementation and onnxruntime): n-gram
 * counts of integer token ids, with skips, weighted. */
#ifndef MLCC_NGRAM_H
#define MLCC_NGRAM_H

#include "mlcc_kernel.h"

/* x: rows x cols token ids; y: rows x out_size. The n-grams of the pool are a trie built at
 * compile time: node 0 is the root; node k's children are nodes first[k] .. first[k] +
 * count[k] - 1, sorted by their token keys[]; out[k] is the output index of the n-gram that
 * ends at node k, or -1. For each skip distance 1 .. max_skip + 1 and each start position,
 * the tokens at start, start + skip, ... are followed down the trie (at most max_gram tokens),
 * counting every n-gram met of at least min_gram tokens (unigrams only at skip distance 1).
 * Then y = weight if its count > 0, else 0 (idf), or weight times the count (the compiler
 * passes weights of 1 where the mode or the model gives none). Counts are exact: the compiler
 * refuses rows whose counts could pass 2^24. */
typedef struct mlcc_tfidf_params {
    int64_t rows, cols, out_size;
    int64_t min_gram, max_gram, max_skip;
    int32_t idf;
} mlcc_tfidf_params;

void mlcc_i64_tfidf(const mlcc_tfidf_params *p, const int64_t *x, const int64_t *keys,
                    const int64_t *first, const int64_t *count, const int64_t *out,
                    const float *weights, float *y);
void mlcc_i32_tfidf(const mlcc_tfidf_params *p, const int32_t *x, const int64_t *keys,
                    const int64_t *first, const int64_t *count, const int64_t *out,
                    const float *weights, float *y);

#endif /* MLCC_NGRAM_H */
