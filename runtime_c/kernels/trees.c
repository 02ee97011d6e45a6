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

/* The leaf that row xr reaches in the tree whose root is node `root`. */
static const int32_t *tree_leaf(const trees_job *j, const float *xr, int32_t root) {
    const int32_t *nd = j->nodes + 4 * (ptrdiff_t)root;
    while ((nd[3] & 7) != MLCC_TREE_LEAF) {
        const float v = xr[nd[0]];
        const float th = j->thresholds[(nd - j->nodes) / 4];
        int go;
        switch (nd[3] & 7) {
        case MLCC_TREE_LEQ: go = v <= th; break;
        case MLCC_TREE_LT: go = v < th; break;
        case MLCC_TREE_GTE: go = v >= th; break;
        case MLCC_TREE_GT: go = v > th; break;
        case MLCC_TREE_EQ: go = v == th; break;
        default: go = v != th; break;
        }
        if (!go && (nd[3] & MLCC_TREE_MISSING_TRUE) && v != v) go = 1;
        nd = j->nodes + 4 * (ptrdiff_t)(go ? nd[1] : nd[2]);
    }
    return nd;
}

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

static void tree_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1) {
    const trees_job *j = (const trees_job *)arg;
    const mlcc_tree_ensemble_params *p = j->p;
    const ptrdiff_t c = (ptrdiff_t)p->targets;
    ptrdiff_t b0, b1, r, t, k, w;
    for (b0 = r0; b0 < r1; b0 = b1) {
        b1 = r1 - b0 < TREE_ROW_BLOCK ? r1 : b0 + TREE_ROW_BLOCK;
        for (k = b0 * c; k < b1 * c; k++) {
            j->scores[k] = 0.0f;
            j->has[k] = 0;
        }
        for (t = 0; t < (ptrdiff_t)p->trees; t++)
            for (r = b0; r < b1; r++) {
                const int32_t *nd = tree_leaf(j, j->x + r * (ptrdiff_t)p->features,
                                              j->roots[t]);
                const ptrdiff_t end = (ptrdiff_t)nd[0] + (ptrdiff_t)nd[1];
                float *s = j->scores + r * c;
                unsigned char *h = j->has + r * c;
                for (w = nd[0]; w < end; w++) {
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
