#include "ngram.h"

/* The child of node `node` whose key is `key`, or -1 (binary search of the sorted keys). */
static int64_t trie_child(const int64_t *keys, const int64_t *first, const int64_t *count,
                          int64_t node, int64_t key) {
    int64_t lo = first[node], hi = first[node] + count[node];
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] == key) return mid;
        if (keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* One row; tok(i) reads token i of the row whichever its width. */
static void tfidf_row(const mlcc_tfidf_params *p, const int64_t *x64, const int32_t *x32,
                      const int64_t *keys, const int64_t *first, const int64_t *count,
                      const int64_t *out, const float *weights, float *y) {
    const int64_t cols = p->cols;
    int64_t start_size = p->min_gram, skip, s, i;
    for (i = 0; i < p->out_size; i++) y[i] = 0.0f;
    for (skip = 1; skip <= p->max_skip + 1; skip++) {
        for (s = 0; s < cols; s++) {
            int64_t node = 0, size = 1, item = s;
            if (s + skip * (start_size - 1) >= cols) break;
            while (count[node] > 0 && size <= p->max_gram && item < cols) {
                const int64_t child = trie_child(keys, first, count, node,
                                                 x64 ? x64[item] : (int64_t)x32[item]);
                if (child < 0) break;
                if (size >= start_size && out[child] >= 0) y[out[child]] += 1.0f;
                node = child;
                size++;
                item += skip;
            }
        }
        if (start_size == 1) {     /* unigrams are counted once: skips do not change them */
            start_size = 2;
            if (start_size > p->max_gram) break;
        }
    }
    for (i = 0; i < p->out_size; i++)
        y[i] = p->idf ? (y[i] > 0.0f ? weights[i] : 0.0f) : weights[i] * y[i];
}

void mlcc_i64_tfidf(const mlcc_tfidf_params *p, const int64_t *x, const int64_t *keys,
                    const int64_t *first, const int64_t *count, const int64_t *out,
                    const float *weights, float *y) {
    int64_t r;
    for (r = 0; r < p->rows; r++)
        tfidf_row(p, x + r * p->cols, NULL, keys, first, count, out, weights,
                  y + r * p->out_size);
}

void mlcc_i32_tfidf(const mlcc_tfidf_params *p, const int32_t *x, const int64_t *keys,
                    const int64_t *first, const int64_t *count, const int64_t *out,
                    const float *weights, float *y) {
    int64_t r;
    for (r = 0; r < p->rows; r++)
        tfidf_row(p, NULL, x + r * p->cols, keys, first, count, out, weights,
                  y + r * p->out_size);
}
