#include "trees.h"

/* The job of tree_rows: float comparisons and sums (onnxruntime's threshold type for float
 * inputs), each row's scores its own accumulators, then the post transform. */
typedef struct trees_job {
    const mlcc_tree_ensemble_params *p;
    const float *x;
    const int32_t *roots, *nodes, *weight_target;
    const float *thresholds, *weight_value, *base;
    const int64_t *labels;
    int64_t *label;
    float *scores;
    unsigned char *has;
} trees_job;

/* Whether row value v takes the true branch of a node of this mode (and flags: a NaN takes it
 * with MLCC_TREE_MISSING_TRUE). */
static inline int branch_true(int mode, float v, float th, int32_t flags) {
    int go;
    switch (mode) {
    case MLCC_TREE_LEQ: go = v <= th; break;
    case MLCC_TREE_LT: go = v < th; break;
    case MLCC_TREE_GTE: go = v >= th; break;
    case MLCC_TREE_GT: go = v > th; break;
    case MLCC_TREE_EQ: go = v == th; break;
    default: go = v != th; break;
    }
    return go | (((flags & MLCC_TREE_MISSING_TRUE) != 0) & (v != v));
}

/* One step down from branch nd (node k) for row xr, every branch compared as `mode` (-1: each
 * its own mode): the next node, chosen by a mask, not a jump (half the comparisons go each
 * way: as a branch, gcc's code mispredicted at every other level). */
static inline ptrdiff_t step(const trees_job *j, const int32_t *nd, ptrdiff_t k, const float *xr,
                             int mode) {
    const int m = mode < 0 ? nd[3] & 7 : mode;
    const int32_t take = -(int32_t)branch_true(m, xr[nd[0]], j->thresholds[k], nd[3]);
    return (nd[1] & take) | (nd[2] & ~take);
}

#define IS_LEAF(nd) (((nd)[3] & 7) == MLCC_TREE_LEAF)

/* Row r's scores (summed by tree_rows) to its outputs: base values, the average, the label,
 * the post transform. */
static void finish_row(const trees_job *j, ptrdiff_t r) {
    const mlcc_tree_ensemble_params *p = j->p;
    const ptrdiff_t c = (ptrdiff_t)p->targets, nb = (ptrdiff_t)p->n_base;
    float *s = j->scores + r * c;
    unsigned char *h = j->has + r * c;
    ptrdiff_t k;
    if (!p->classifier) {
        for (k = 0; k < c; k++) {
            float v = s[k];
            if (p->aggregate == MLCC_TREE_AVERAGE) v /= (float)p->trees;
            if (p->aggregate >= MLCC_TREE_MIN && !h[k]) v = 0.0f;
            s[k] = nb ? v + j->base[k] : v;
        }
        /* one target: onnxruntime applies PROBIT only */
        if (c > 1 || p->post == MLCC_ML_POST_PROBIT)
            mlcc_ml_post_transform(p->post, s, c);
    } else if (c > 2) {
        ptrdiff_t best = -1;
        for (k = 0; k < nb; k++) {
            s[k] = h[k] ? s[k] + j->base[k] : j->base[k];
            h[k] = 1;
        }
        for (k = 0; k < c; k++)
            if (h[k] && (best < 0 || s[k] > s[best])) best = k;
        j->label[r] = j->labels[best < 0 ? 0 : best];
        mlcc_ml_post_transform(p->post, s, c);
    } else {
        /* two classes: onnxruntime's rules, one score column or two */
        int two = 1, which = -1;
        float s1 = 0, pos;
        if (nb == 2) {
            if (h[1]) {
                s[1] = j->base[1] + s[0];
                s[0] = -s[1];
            } else {
                s[1] += j->base[1];
                s[0] += j->base[0];
            }
        } else if (nb == 1) {
            s[0] += j->base[0];
            two = h[1];
        } else {
            which = 3;
            two = h[1];
        }
        if (two && h[1]) s1 = s[1];
        pos = (two && h[1]) ? s1 : (h[0] ? s[0] : 0.0f);
        if (p->binary_case) {
            if (p->all_positive)
                which = pos > 0.5f ? 0 : 1;
            else
                which = pos > 0.0f ? 2 : 3;
            j->label[r] = j->labels[which == 0 || which == 2];
        } else {
            j->label[r] = pos > 0.0f ? 1 : 0;
        }
        if (two) {
            /* a class no leaf gave a score to is written as 0 (base values ignored) */
            for (k = 0; k < 2; k++)
                if (!h[k]) s[k] = 0.0f;
            mlcc_ml_post_transform(p->post, s, 2);
        }
        else
            mlcc_ml_binary_scores(s[0], p->post, which, s);
    }
}

/* Rows per block: each tree is walked by every row of a block before the next tree, so that
 * a forest larger than the L2 cache is read once per block rather than once per row (each
 * row still adds its trees' leaves in tree order: the same sums). */
#define TREE_ROW_BLOCK 128

/* A leaf's weights into row r's scores. */
static void add_leaf(const trees_job *j, ptrdiff_t r, const int32_t *leaf) {
    const mlcc_tree_ensemble_params *p = j->p;
    const ptrdiff_t c = (ptrdiff_t)p->targets, end = (ptrdiff_t)leaf[0] + (ptrdiff_t)leaf[1];
    float *s = j->scores + r * c;
    unsigned char *h = j->has + r * c;
    ptrdiff_t w;
    for (w = leaf[0]; w < end; w++) {
        const ptrdiff_t i = j->weight_target[w];
        const float val = j->weight_value[w];
        if (p->aggregate == MLCC_TREE_MIN)
            s[i] = (!h[i] || val < s[i]) ? val : s[i];
        else if (p->aggregate == MLCC_TREE_MAX)
            s[i] = (!h[i] || val > s[i]) ? val : s[i];
        else
            s[i] += val;
        h[i] = 1;
    }
}

/* Walks side by side (walk_together). */
#define TREE_WALKS 4

/* The leaves that TREE_WALKS rows xr[i] reach from nodes k[i] (several rows down one tree, or
 * one row down several trees), into leaf[i]: the walks step together while all are on
 * branches, each one's chain of dependent loads overlapping the others', then each finishes
 * alone. Called with a constant mode (-1: each node its own), the comparison compiles into
 * the loops: every converter writes trees of one mode. */
static inline void walk_together(const trees_job *j, const float *const *xr, ptrdiff_t *k,
                                 const int32_t **leaf, int mode) {
    const int32_t *nd[TREE_WALKS];
    int i, all = 1;
    for (i = 0; i < TREE_WALKS; i++) {
        nd[i] = j->nodes + 4 * k[i];
        all &= !IS_LEAF(nd[i]);
    }
    while (all) {
        for (i = 0; i < TREE_WALKS; i++) {
            k[i] = step(j, nd[i], k[i], xr[i], mode);
            nd[i] = j->nodes + 4 * k[i];
        }
        for (i = 0; i < TREE_WALKS; i++) all &= !IS_LEAF(nd[i]);
    }
    for (i = 0; i < TREE_WALKS; i++) {
        for (; !IS_LEAF(nd[i]); nd[i] = j->nodes + 4 * k[i])
            k[i] = step(j, nd[i], k[i], xr[i], mode);
        leaf[i] = nd[i];
    }
}

/* The leaf row xr reaches from node k, alone. */
static inline const int32_t *walk_alone(const trees_job *j, const float *xr, ptrdiff_t k,
                                        int mode) {
    const int32_t *nd = j->nodes + 4 * k;
    for (; !IS_LEAF(nd); nd = j->nodes + 4 * k) k = step(j, nd, k, xr, mode);
    return nd;
}

/* Rows [b0, b1) through every tree, their scores summed (each row adds its trees' leaves in
 * tree order whichever way the walks are grouped: the same bits). Groups of TREE_WALKS rows
 * walk one tree together, tree by tree; the rows left over (all of them at batch 1) walk
 * TREE_WALKS trees together, row by row. Against one walk at a time with the comparison
 * jumping on each node's mode (Zen 5, 1 thread, a 100-tree forest of depth 10 and a
 * 100-tree boosted classifier of depth 6, 20 features, batch 1,000): the mode built in 0.88x
 * and 0.90x, the next node chosen by a mask instead of a jump (gcc's code mispredicted half
 * the comparisons) 0.64x and 0.66x, four walks together 0.71x and 0.72x (two: 0.87x and 0.96x;
 * three, six and eight, or stepping every walk until the last reaches its leaf, were slower). */
static inline void walk_block(const trees_job *j, ptrdiff_t b0, ptrdiff_t b1, int mode) {
    const mlcc_tree_ensemble_params *p = j->p;
    const ptrdiff_t f = (ptrdiff_t)p->features, trees = (ptrdiff_t)p->trees;
    const ptrdiff_t grouped = b0 + (b1 - b0) / TREE_WALKS * TREE_WALKS;
    const float *xr[TREE_WALKS];
    const int32_t *leaf[TREE_WALKS];
    ptrdiff_t k[TREE_WALKS], r, t;
    int i;
    for (t = 0; t < trees; t++)
        for (r = b0; r < grouped; r += TREE_WALKS) {
            for (i = 0; i < TREE_WALKS; i++) {
                xr[i] = j->x + (r + i) * f;
                k[i] = j->roots[t];
            }
            walk_together(j, xr, k, leaf, mode);
            for (i = 0; i < TREE_WALKS; i++) add_leaf(j, r + i, leaf[i]);
        }
    for (r = grouped; r < b1; r++) {
        for (i = 0; i < TREE_WALKS; i++) xr[i] = j->x + r * f;
        for (t = 0; t + TREE_WALKS <= trees; t += TREE_WALKS) {
            for (i = 0; i < TREE_WALKS; i++) k[i] = j->roots[t + i];
            walk_together(j, xr, k, leaf, mode);
            for (i = 0; i < TREE_WALKS; i++) add_leaf(j, r, leaf[i]);
        }
        for (; t < trees; t++) add_leaf(j, r, walk_alone(j, xr[0], j->roots[t], mode));
    }
}

static void tree_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const trees_job *j = (const trees_job *)arg;
    const ptrdiff_t c = (ptrdiff_t)j->p->targets;
    ptrdiff_t b0, b1, r, k;
    for (b0 = r0; b0 < r1; b0 = b1) {
        b1 = r1 - b0 < TREE_ROW_BLOCK ? r1 : b0 + TREE_ROW_BLOCK;
        for (k = b0 * c; k < b1 * c; k++) {
            j->scores[k] = 0.0f;
            j->has[k] = 0;
        }
        switch (j->p->same_mode) {
        case MLCC_TREE_LEQ: walk_block(j, b0, b1, MLCC_TREE_LEQ); break;
        case MLCC_TREE_LT: walk_block(j, b0, b1, MLCC_TREE_LT); break;
        case MLCC_TREE_GTE: walk_block(j, b0, b1, MLCC_TREE_GTE); break;
        case MLCC_TREE_GT: walk_block(j, b0, b1, MLCC_TREE_GT); break;
        case MLCC_TREE_EQ: walk_block(j, b0, b1, MLCC_TREE_EQ); break;
        case MLCC_TREE_NEQ: walk_block(j, b0, b1, MLCC_TREE_NEQ); break;
        default: walk_block(j, b0, b1, -1); break;
        }
        for (r = b0; r < b1; r++) finish_row(j, r);
    }
}

/* Each row walks about trees x depth nodes: the work the parallel cut weighs. */
static double tree_work(const mlcc_tree_ensemble_params *p) {
    return (double)p->rows * (double)p->trees * (double)(p->max_depth + 1);
}

void mlcc_f32_tree_ensemble(const mlcc_tree_ensemble_params *p, const float *x,
                            const int32_t *roots, const int32_t *nodes, const float *thresholds,
                            const int32_t *weight_target, const float *weight_value,
                            const float *base, const int64_t *labels, int64_t *label,
                            float *scores, void *scratch, mlcc_threadpool *pool) {
    trees_job j;
    j.p = p;
    j.x = x;
    j.roots = roots;
    j.nodes = nodes;
    j.weight_target = weight_target;
    j.thresholds = thresholds;
    j.weight_value = weight_value;
    j.base = base;
    j.labels = labels;
    j.label = label;
    j.scores = scores;
    j.has = (unsigned char *)scratch;
    mlcc_parallel_ranges(pool, tree_rows, &j, (ptrdiff_t)p->rows, tree_work(p),
                         (double)MLCC_MIN_PARALLEL_ELEMENTS);
}
