/* Tree ensembles of the ai.onnx.ml domain: TreeEnsembleRegressor and TreeEnsembleClassifier
 * (mlcc/ops/ml_trees.py), evaluated in the order and precision onnxruntime uses: trees in the
 * order of their first node, leaf weights in attribute order, float comparisons and sums.
 *
 * The compiler flattens the trees: node k is nodes[4k .. 4k+3]:
 *   a branch: feature, true child, false child, mode | MLCC_TREE_MISSING_TRUE (the mode one of
 *             enum mlcc_tree_mode; with the flag, a NaN feature takes the true branch);
 *   a leaf:   first weight, number of weights, 0, MLCC_TREE_LEAF.
 * Child indices are node indices; the compiler checked that every tree is acyclic and every
 * feature index is inside a row, so the kernel has no run-time failure. A leaf's weights add
 * value[w] to target (or class) target[w] of the row's scores.
 *
 * Rows are independent: a pool splits them into ranges, each row computed whole by one thread
 * in the same order, so the bits do not depend on the number of threads.
 * Thread-compatible: no state; the outputs must not overlap x. */
#ifndef MLCC_TREES_H
#define MLCC_TREES_H

#include "ml.h"

enum mlcc_tree_mode {
    MLCC_TREE_LEQ = 0, MLCC_TREE_LT = 1, MLCC_TREE_GTE = 2, MLCC_TREE_GT = 3,
    MLCC_TREE_EQ = 4, MLCC_TREE_NEQ = 5, MLCC_TREE_LEAF = 6
};
#define MLCC_TREE_MISSING_TRUE 8

enum mlcc_tree_aggregate {
    MLCC_TREE_SUM = 0, MLCC_TREE_AVERAGE = 1, MLCC_TREE_MIN = 2, MLCC_TREE_MAX = 3
};

/* rows x features input; `targets` scores per row (the classes of a classifier). n_base: the
 * number of base values (0, or targets; a two-class classifier also 1). classifier: 0 writes
 * the scores only; 1 also the label of each row (labels[class]), with onnxruntime's rules for
 * two classes (binary_case: one class id among the weights; all_positive: no negative
 * weight). max_depth: the deepest path, for the parallel cut. same_mode: the comparison of
 * every branch where they all share one (the walk then has it built in), else -1. The
 * scratch holds rows x targets flags (bytes): which scores a leaf has set. */
typedef struct mlcc_tree_ensemble_params {
    int64_t rows, features, targets, trees, max_depth;
    int32_t aggregate;          /* enum mlcc_tree_aggregate */
    int32_t post;               /* enum mlcc_ml_post */
    int32_t n_base;
    int32_t classifier, binary_case, all_positive;
    int32_t same_mode;          /* the mode of every branch (enum mlcc_tree_mode), or -1 */
} mlcc_tree_ensemble_params;

void mlcc_f32_tree_ensemble(const mlcc_tree_ensemble_params *p, const float *x,
                            const int32_t *roots, const int32_t *nodes, const float *thresholds,
                            const int32_t *weight_target, const float *weight_value,
                            const float *base, const int64_t *labels, int64_t *label,
                            float *scores, void *scratch, mlcc_threadpool *pool);

#endif /* MLCC_TREES_H */
