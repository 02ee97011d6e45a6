"""The classical-ML operators of the ai.onnx.ml domain (mlcc/ops/ml_trees.py, mlcc/ops/ml.py)
against onnxruntime, on models built with onnx.helper: random trees of 1 to 50 trees and depth
1 to 8 over 1 and 7 features, batches of 1 and 13, thresholds equal to the feature values for
every branch mode, NaN features either way of missing_value_tracks_true, every aggregate and
post transform, double thresholds (opset 3's *_as_tensor), two-class classifiers as
onnxruntime writes them, a gradient-boosted and a random-forest model trained here with numpy,
the same bits on any number of threads, and the refusals (docs/classical-ml.md)."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.errors import MlccError
from util import check_model, compile_and_run, reference_outputs, run_same_bits_on_threads

ML = "ai.onnx.ml"
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
# feature values and thresholds from one small grid: many exact ties at the split value
GRID = np.arange(-3, 4, dtype=np.float32) / 2


def ml_model(nodes, inputs: dict[str, np.ndarray], outputs: dict[str, tuple[int, list]], *,
             ml_opset: int = 3, initializers: dict[str, np.ndarray] | None = None
             ) -> onnx.ModelProto:
    """A model of ai.onnx.ml nodes; outputs: name -> (element type, shape)."""
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                         list(v.shape)) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(k, t, s) for k, (t, s) in outputs.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), "ml", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, ml_opset)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def features(rows: int, cols: int, seed: int, nan: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.choice(GRID, size=(rows, cols)).astype(np.float32)
    x[rng.random((rows, cols)) < nan] = np.nan
    return x


def random_trees(rng, n_trees: int, depth: int, n_features: int, n_targets: int, *,
                 modes=MODES, weights=(-2.0, 2.0), per_leaf: int = 1) -> dict:
    """Attributes of random trees (prefix-free: nodes_*, and leaf weights under "w_*"). Node
    ids are shuffled within each tree, trees listed in an order other than their ids; leaves
    at random depths up to `depth`."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_modes", "nodes_featureids",
                         "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                         "nodes_missing_value_tracks_true", "w_ids", "w_nodeids", "w_treeids",
                         "w_weights")}
    tree_ids = rng.permutation(n_trees) + 3
    for tid in tree_ids:
        shape = []            # (depth, parent slot) in creation order; root first

        def grow(d):
            k = len(shape)
            shape.append(None)
            leaf = d == depth or (d > 0 and rng.random() < 0.25)
            if leaf:
                shape[k] = ("LEAF",)
            else:
                t = grow(d + 1)
                f = grow(d + 1)
                shape[k] = (str(rng.choice(modes)), t, f)
            return k
        grow(0)
        ids = list(rng.permutation(len(shape)))      # node ids in [0, nodes), as onnxruntime
                                                     # needs; the root is listed first
        for k, s in enumerate(shape):
            a["nodes_treeids"].append(int(tid))
            a["nodes_nodeids"].append(int(ids[k]))
            a["nodes_modes"].append(s[0])
            if s[0] == "LEAF":
                a["nodes_featureids"].append(0)
                a["nodes_values"].append(0.0)
                a["nodes_truenodeids"].append(0)
                a["nodes_falsenodeids"].append(0)
                a["nodes_missing_value_tracks_true"].append(0)
                for target in rng.choice(n_targets, size=per_leaf):
                    a["w_ids"].append(int(target))
                    a["w_nodeids"].append(int(ids[k]))
                    a["w_treeids"].append(int(tid))
                    a["w_weights"].append(float(np.float32(rng.uniform(*weights))))
            else:
                a["nodes_featureids"].append(int(rng.integers(n_features)))
                a["nodes_values"].append(float(rng.choice(GRID)))
                a["nodes_truenodeids"].append(int(ids[s[1]]))
                a["nodes_falsenodeids"].append(int(ids[s[2]]))
                a["nodes_missing_value_tracks_true"].append(int(rng.random() < 0.5))
    return a


def with_prefix(a: dict, prefix: str) -> dict:
    return {(k.replace("w_", prefix + "_", 1) if k.startswith("w_") else k): v
            for k, v in a.items()}


def regressor(a: dict, rows: int, n_features: int, n_targets: int, *, tensors=False,
              **attrs) -> onnx.ModelProto:
    a = with_prefix(a, "target")
    if tensors:      # opset 3: thresholds and weights as tensors of this type
        a["nodes_values_as_tensor"] = numpy_helper.from_array(
            np.array(a.pop("nodes_values"), tensors))
        a["target_weights_as_tensor"] = numpy_helper.from_array(
            np.array(a.pop("target_weights"), tensors))
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML,
                            n_targets=n_targets, **a, **attrs)
    return ml_model([node], {"X": np.zeros((rows, n_features), np.float32)},
                    {"Y": (TensorProto.FLOAT, [rows, n_targets])})


def classifier(a: dict, rows: int, n_features: int, labels: list[int], **attrs
               ) -> onnx.ModelProto:
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["L", "S"], domain=ML,
                            classlabels_int64s=labels, **with_prefix(a, "class"), **attrs)
    return ml_model([node], {"X": np.zeros((rows, n_features), np.float32)},
                    {"L": (TensorProto.INT64, [rows]),
                     "S": (TensorProto.FLOAT, [rows, len(labels)])})


# ------------------------------------------------------------------ TreeEnsembleRegressor

@pytest.mark.parametrize("trees,depth,n_features,rows,n_targets,aggregate", [
    (1, 1, 1, 1, 1, "SUM"), (1, 8, 7, 13, 1, "SUM"), (50, 8, 7, 13, 1, "SUM"),
    (50, 4, 7, 13, 3, "SUM"), (7, 3, 1, 13, 2, "AVERAGE"), (50, 8, 7, 1, 1, "AVERAGE"),
    (7, 5, 7, 13, 3, "MIN"), (50, 6, 7, 13, 1, "MAX"), (1, 2, 7, 13, 2, "MAX")])
def test_tree_regressor(tmp_path, trees, depth, n_features, rows, n_targets, aggregate):
    rng = np.random.default_rng(trees * 100 + depth * 10 + n_targets)
    a = random_trees(rng, trees, depth, n_features, n_targets, per_leaf=1 + (n_targets > 1))
    base = {"base_values": list(rng.uniform(-1, 1, n_targets))} if n_targets != 2 else {}
    model = regressor(a, rows, n_features, n_targets, aggregate_function=aggregate, **base)
    check_model(model, {"X": features(rows, n_features, seed=depth)}, tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_tree_modes_at_equal_thresholds_and_nan(tmp_path, mode):
    """One split on each feature value of the grid, with and without NaN tracking: rows that
    hit the threshold exactly, lie either side, or are NaN."""
    x = np.concatenate([GRID, [np.nan, -np.inf, np.inf]]).astype(np.float32)[:, None]
    for missing in (0, 1):
        a = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2],
             "nodes_modes": [mode, "LEAF", "LEAF"], "nodes_featureids": [0, 0, 0],
             "nodes_values": [0.5, 0, 0], "nodes_truenodeids": [1, 0, 0],
             "nodes_falsenodeids": [2, 0, 0], "nodes_missing_value_tracks_true": [missing, 0, 0],
             "w_ids": [0, 0], "w_nodeids": [1, 2], "w_treeids": [0, 0], "w_weights": [1.0, 2.0]}
        got = check_model(regressor(a, len(x), 1, 1), {"X": x}, tmp_path)["Y"][:, 0]
        assert set(got) == {1.0, 2.0}
        assert got[list(GRID).index(0.5)] == (1.0 if mode in ("BRANCH_LEQ", "BRANCH_GTE",
                                                               "BRANCH_EQ") else 2.0)
        assert got[len(GRID)] == (1.0 if missing or mode == "BRANCH_NEQ" else 2.0)


@pytest.mark.parametrize("mode", MODES)
def test_trees_of_one_mode(tmp_path, mode):
    """Trees whose branches all share one mode (as converters write them) take the walk with
    that comparison built in, four rows side by side: deep random trees of each mode and
    single-leaf trees, NaN features with and without missing-value tracking, 1, 2 and 13 rows
    (fewer than four rows walk one by one; 13 = three groups of four and one), against
    onnxruntime."""
    rng = np.random.default_rng(len(mode))
    a = random_trees(rng, 30, 9, 7, 2, modes=[mode], per_leaf=2)
    # and three trees that are a single leaf (every row stops at the root)
    single = random_trees(rng, 3, 0, 7, 2, per_leaf=2)
    for key in ("nodes_treeids", "w_treeids"):
        single[key] = [t + 100 for t in single[key]]
    a = {key: a[key] + single[key] for key in a}
    assert {m for m in a["nodes_modes"]} == {mode, "LEAF"}
    for rows in (1, 2, 13):
        check_model(regressor(a, rows, 7, 2), {"X": features(rows, 7, seed=rows, nan=0.2)},
                    tmp_path / str(rows))
    src = "".join(f.read_text() for f in tmp_path.glob("13/**/model.c"))
    assert f".same_mode = {MODES.index(mode)}" in src


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_tree_regressor_post_transforms(tmp_path, post):
    rng = np.random.default_rng(5)
    # PROBIT's argument must be a probability: averages of weights in (0, 1)
    a = random_trees(rng, 9, 4, 7, 3, per_leaf=2,
                     weights=(0.05, 0.95) if post == "PROBIT" else (-2, 2))
    model = regressor(a, 13, 7, 3, post_transform=post,
                      aggregate_function="AVERAGE" if post == "PROBIT" else "SUM")
    check_model(model, {"X": features(13, 7, seed=3)}, tmp_path)


def test_tree_regressor_tensor_attributes(tmp_path):
    """opset 3's nodes_values_as_tensor and target_weights_as_tensor (float32)."""
    rng = np.random.default_rng(11)
    a = random_trees(rng, 20, 6, 7, 2, per_leaf=2)
    model = regressor(a, 13, 7, 2, tensors=np.float32, base_values=[0.25, -0.5])
    check_model(model, {"X": features(13, 7, seed=4)}, tmp_path)


def test_tree_ensemble_same_bits_on_any_thread_count(tmp_path):
    """2000 rows of 50 trees of depth 8: the rows split over the pool, each row whole on one
    thread: the same bits on 1, 2 and 3 threads, and onnxruntime's values."""
    rng = np.random.default_rng(2)
    a = random_trees(rng, 50, 8, 7, 3, per_leaf=2)
    model = regressor(a, 2000, 7, 3, aggregate_function="SUM", post_transform="SOFTMAX")
    x = features(2000, 7, seed=9)
    one = run_same_bits_on_threads(model, {"X": x}, tmp_path)
    ref = reference_outputs(model, {"X": x})["Y"]
    np.testing.assert_allclose(one["Y"], ref, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ TreeEnsembleClassifier

@pytest.mark.parametrize("trees,depth,n_features,rows,labels,post,base", [
    (1, 1, 1, 1, [0, 1, 2], "NONE", False), (50, 8, 7, 13, [4, -1, 7, 9, 2], "SOFTMAX", True),
    (9, 4, 7, 13, [0, 1, 2], "LOGISTIC", False), (9, 4, 7, 13, [5, 6, 7], "SOFTMAX_ZERO", True),
    (9, 5, 7, 13, [10, 20, 30, 40], "PROBIT", False), (30, 6, 7, 13, [3, 8], "NONE", False),
    (30, 6, 7, 13, [3, 8], "SOFTMAX", True), (30, 6, 1, 13, [0, 1], "LOGISTIC", False)])
def test_tree_classifier(tmp_path, trees, depth, n_features, rows, labels, post, base):
    """Every class among the leaves' weights (several per leaf)."""
    rng = np.random.default_rng(trees + depth + len(labels))
    a = random_trees(rng, trees, depth, n_features, len(labels), per_leaf=len(labels),
                     weights=(0.05, 0.95) if post == "PROBIT" else (-1, 1))
    b = {"base_values": list(rng.uniform(-0.5, 0.5, len(labels)))} if base else {}
    model = classifier(a, rows, n_features, labels, post_transform=post, **b)
    check_model(model, {"X": features(rows, n_features, seed=trees)}, tmp_path)


@pytest.mark.parametrize("class_id", [0, 1])
@pytest.mark.parametrize("n_base", [0, 1, 2])
@pytest.mark.parametrize("weights,post", [((0.0, 1.0), "NONE"), ((-2.0, 2.0), "NONE"),
                                          ((-2.0, 2.0), "LOGISTIC"), ((0.0, 1.0), "LOGISTIC")])
def test_tree_binary_classifier(tmp_path, class_id, n_base, weights, post):
    """Two labels and one class id among the weights (what converters write for binary
    gradient boosting): onnxruntime's two score columns and labels, for weights all positive
    (probabilities) or mixed (margins), with 0, 1 or 2 base values."""
    rng = np.random.default_rng(class_id * 10 + n_base)
    a = random_trees(rng, 12, 5, 7, 1, weights=weights)
    a["w_ids"] = [class_id] * len(a["w_ids"])
    b = {"base_values": [0.125, -0.25][:n_base]} if n_base else {}
    model = classifier(a, 13, 7, [-3, 11], post_transform=post, **b)
    check_model(model, {"X": features(13, 7, seed=7)}, tmp_path)



# ------------------------------------------------------------------ models trained here

def fit_tree(x: np.ndarray, grad: np.ndarray, hess: np.ndarray, depth: int, min_rows: int = 4):
    """A regression tree as gradient boosting grows it (the split of the best gain, midpoints
    between sorted values as thresholds, leaf = -sum(grad) / sum(hess)): nested tuples
    ("split", feature, threshold, left, right) or ("leaf", values)."""
    def leaf(rows):
        return ("leaf", -grad[rows].sum(0) / max(hess[rows].sum(), 1e-9))

    def grow(rows, d):
        if d == depth or len(rows) < 2 * min_rows:
            return leaf(rows)
        g_all, h_all = grad[rows].sum(0), hess[rows].sum()
        best = None
        for f in range(x.shape[1]):
            order = rows[np.argsort(x[rows, f], kind="stable")]
            v = x[order, f]
            g, h = np.cumsum(grad[order], 0), np.cumsum(hess[order])
            for i in range(min_rows - 1, len(order) - min_rows):
                if v[i] == v[i + 1]:
                    continue
                gain = ((g[i] ** 2).sum() / h[i] + ((g_all - g[i]) ** 2).sum() / (h_all - h[i]))
                if best is None or gain > best[0]:
                    best = (gain, f, np.float32((v[i] + v[i + 1]) / 2))
        if best is None:
            return leaf(rows)
        _, f, t = best
        left = rows[x[rows, f] <= t]
        right = rows[x[rows, f] > t]
        return ("split", f, t, grow(left, d + 1), grow(right, d + 1))
    return grow(np.arange(len(x)), 0)


def tree_attrs(trees: list, scale: float = 1.0) -> dict:
    """The trees as TreeEnsemble attributes (BRANCH_LEQ, node ids in preorder)."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_modes", "nodes_featureids",
                         "nodes_values", "nodes_truenodeids", "nodes_falsenodeids", "w_ids",
                         "w_nodeids", "w_treeids", "w_weights")}
    for tid, tree in enumerate(trees):
        counter = [0]

        def emit(t):
            nid = counter[0]
            counter[0] += 1
            a["nodes_treeids"].append(tid)
            a["nodes_nodeids"].append(nid)
            at = len(a["nodes_modes"])
            a["nodes_modes"].append("LEAF" if t[0] == "leaf" else "BRANCH_LEQ")
            for k in ("nodes_featureids", "nodes_values", "nodes_truenodeids",
                      "nodes_falsenodeids"):
                a[k].append(0)
            if t[0] == "leaf":
                for c, v in enumerate(np.atleast_1d(t[1])):
                    a["w_ids"].append(c)
                    a["w_nodeids"].append(nid)
                    a["w_treeids"].append(tid)
                    a["w_weights"].append(float(v) * scale)
            else:
                a["nodes_featureids"][at] = int(t[1])
                a["nodes_values"][at] = float(t[2])
                a["nodes_truenodeids"][at] = emit(t[3])
                a["nodes_falsenodeids"][at] = emit(t[4])
            return nid
        emit(tree)
    return a


def two_moons(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    t = rng.uniform(0, np.pi, n)
    x = np.stack([np.cos(t) + y * 1.0, np.sin(t) * (1 - 2 * y) + y * 0.4,
                  *rng.standard_normal((3, n)) * 0.3], 1)
    return (x + rng.standard_normal(x.shape) * 0.15).astype(np.float32), y


def test_gradient_boosted_classifier_trained_here(tmp_path):
    """30 boosting rounds of depth-3 trees on logistic loss, written as converters write
    binary gradient boosting (one class id, the prior as base value, LOGISTIC): labels and
    probabilities as onnxruntime's, and the model learned something."""
    x, y = two_moons(400, seed=1)
    prior = float(np.log(y.mean() / (1 - y.mean())))
    margin = np.full(len(x), prior)
    trees = []
    for _ in range(30):
        p = 1 / (1 + np.exp(-margin))
        tree = fit_tree(x, (p - y)[:, None], p * (1 - p), depth=3)
        trees.append(tree)
        def predict(t, row):
            while t[0] == "split":
                t = t[3] if row[t[1]] <= t[2] else t[4]
            return float(t[1][0])
        margin += 0.3 * np.array([predict(tree, r) for r in x])
    a = tree_attrs(trees, scale=0.3)
    a["w_ids"] = [0] * len(a["w_ids"])
    x_test, y_test = two_moons(13, seed=2)
    model = classifier(a, 13, 5, [0, 1], post_transform="LOGISTIC", base_values=[prior])
    got = check_model(model, {"X": x_test}, tmp_path)
    assert (got["L"] == y_test).mean() >= 0.75


def test_random_forest_regressor_trained_here(tmp_path):
    """A forest of 20 bootstrapped depth-6 trees over 3 targets, AVERAGE: as onnxruntime."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 7)).astype(np.float32)
    y = np.stack([np.sin(x[:, 0]) + x[:, 1], x[:, 2] * x[:, 3], np.abs(x[:, 4])], 1)
    trees = []
    for _ in range(20):
        rows = rng.integers(0, len(x), len(x))
        trees.append(fit_tree(x[rows], -y[rows], np.ones(len(rows)), depth=6))
    a = tree_attrs(trees)
    x_test = rng.standard_normal((13, 7)).astype(np.float32)
    model = regressor(a, 13, 7, 3, aggregate_function="AVERAGE")
    got = check_model(model, {"X": x_test}, tmp_path)["Y"]
    want = np.stack([np.sin(x_test[:, 0]) + x_test[:, 1], x_test[:, 2] * x_test[:, 3],
                     np.abs(x_test[:, 4])], 1)
    assert np.corrcoef(got[:, 0], want[:, 0])[0, 1] > 0.7


# ------------------------------------------------------------------ refusals

def compile_error(model: onnx.ModelProto, tmp_path) -> str:
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(MlccError) as info:
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
    return info.value.message


def simple_trees() -> dict:
    return random_trees(np.random.default_rng(0), 2, 2, 3, 2, per_leaf=2)


@pytest.mark.parametrize("change,words", [
    (dict(classlabels_strings=["a", "b"]), ["string class labels", "refused: strings",
                                            "integer labels"]),
    (dict(post_transform="PROBIT"), ["PROBIT with two classes"]),
    (dict(base_values=[0.1, 0.2, 0.3]), ["3 base_values"]),
])
def test_tree_classifier_refusals(tmp_path, change, words):
    a = with_prefix(simple_trees(), "class")
    attrs = {"classlabels_int64s": [0, 1], **a, **change}
    if "classlabels_strings" in change:
        del attrs["classlabels_int64s"]
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["L", "S"], name="forest",
                            domain=ML, **attrs)
    model = ml_model([node], {"X": np.zeros((4, 3), np.float32)},
                     {"L": (TensorProto.INT64 if "classlabels_strings" not in change
                            else TensorProto.STRING, [4]), "S": (TensorProto.FLOAT, [4, 2])})
    message = compile_error(model, tmp_path)
    assert "'forest' (TreeEnsembleClassifier" in message
    for w in words:
        assert w in message, message


@pytest.mark.parametrize("change,words", [
    (dict(post_transform="LOGISTIC"), ["LOGISTIC with one target", "no one answer"]),
    (dict(tensors=np.float64), ["nodes_values_as_tensor of type float64", "float inputs"]),
    (dict(nodes_truenodeids="cycle"), ["has a cycle"]),
    (dict(nodes_featureids="outside"), ["reads feature 9 of rows of 3"]),
    (dict(nodes_falsenodeids="missing"), ["which the tree does not have"]),
    (dict(target_nodeids="branch"), ["a branch"]),
    (dict(nodes_values="short"), ["nodes_values do not have one entry per node"]),
])
def test_tree_regressor_refusals(tmp_path, change, words):
    a = simple_trees()
    if change.get("nodes_truenodeids") == "cycle":      # the root its own true branch
        a["nodes_truenodeids"][0] = a["nodes_nodeids"][0]
        change = {}
    elif change.get("nodes_featureids") == "outside":
        a["nodes_featureids"][0] = 9
        change = {}
    elif change.get("nodes_falsenodeids") == "missing":
        a["nodes_falsenodeids"][0] = 99
        change = {}
    elif change.get("target_nodeids") == "branch":     # a weight on the root, a branch
        a["w_nodeids"][0] = a["nodes_nodeids"][0]
        a["w_treeids"][0] = a["nodes_treeids"][0]
        change = {}
    elif change.get("nodes_values") == "short":
        a["nodes_values"] = a["nodes_values"][:-1]
        change = {}
    model = regressor(a, 4, 3, 1 if "post_transform" in change else 2, **change)
    model.graph.node[0].name = "forest"
    message = compile_error(model, tmp_path)
    assert "'forest' (TreeEnsembleRegressor" in message
    for w in words:
        assert w in message, message


@pytest.mark.parametrize("as_output", [True, False])
def test_zipmap_is_refused_with_the_way_around_it(tmp_path, as_output):
    """ZipMap (a sequence of maps) is refused naming the tensor to read instead, and whether
    it is a graph output; through the CLI, one line and exit code 3."""
    from click.testing import CliRunner
    from mlcc.cli import main
    a = with_prefix(simple_trees(), "class")
    forest = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "probabilities"],
                              domain=ML, classlabels_int64s=[0, 1], **a)
    zipmap = helper.make_node("ZipMap", ["probabilities"], ["output_probability"],
                              domain=ML, classlabels_int64s=[0, 1], name="zip")
    if as_output:       # the sequence of maps as converters declare it
        seq = helper.make_value_info("output_probability", helper.make_sequence_type_proto(
            helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(
                TensorProto.FLOAT, []))))
        graph = helper.make_graph(
            [forest, zipmap], "ml", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                   [4, 3])],
            [helper.make_tensor_value_info("label", TensorProto.INT64, [4]), seq])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid(ML, 3)])
        model.ir_version = 9
    else:
        model = ml_model([forest, zipmap], {"X": np.zeros((4, 3), np.float32)},
                         {"label": (TensorProto.INT64, [4])})
    onnx.save(model, str(tmp_path / "m.onnx"))
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o",
                                  str(tmp_path / "out")])
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    message = r.output
    assert "'zip' (ZipMap" in message and "refused: sequences and optionals" in message
    assert "'zipmap': False" in message and "'probabilities' instead" in message
    assert ("'output_probability' is a graph output" in message) == as_output


# ------------------------------------------------------------------ the other operators

def check_ml(tmp_path, op: str, feeds: dict, outs: dict, *, ml_opset=3, n_out=None,
             initializers=None, **attrs):
    node = helper.make_node(op, list(feeds) + list(initializers or {}), list(outs), domain=ML,
                            name=op.lower(), **attrs)
    model = ml_model([node], feeds, outs, ml_opset=ml_opset, initializers=initializers)
    return check_model(model, feeds, tmp_path)


@pytest.mark.parametrize("rows,n_features,targets,post", [
    (1, 1, 1, "NONE"), (13, 7, 1, "NONE"), (13, 7, 3, "SOFTMAX"), (13, 7, 2, "LOGISTIC"),
    (1, 7, 3, "SOFTMAX_ZERO"), (13, 7, 1, "PROBIT"), (13, 7, 2, "PROBIT")])
def test_linear_regressor(tmp_path, rows, n_features, targets, post):
    rng = np.random.default_rng(rows + targets)
    x = rng.standard_normal((rows, n_features)).astype(np.float32)
    if post == "PROBIT":        # of probabilities
        x = np.abs(x) / n_features / 4
    check_ml(tmp_path, "LinearRegressor", {"X": x},
             {"Y": (TensorProto.FLOAT, [rows, targets])}, targets=targets, post_transform=post,
             coefficients=list(rng.uniform(0, 1, targets * n_features) if post == "PROBIT"
                               else rng.standard_normal(targets * n_features)),
             intercepts=list(rng.uniform(0.1, 0.3, targets) if post == "PROBIT"
                             else rng.standard_normal(targets)))


@pytest.mark.parametrize("rows,n_features,labels,post", [
    (1, 1, [4, 9, 2], "NONE"), (13, 7, [0, 1, 2, 3, 4], "SOFTMAX"), (13, 7, [3, 8], "NONE"),
    (13, 7, [3, 8, 9], "LOGISTIC"), (13, 7, [-1, 1], "LOGISTIC"), (13, 1, [0, 1], "NONE")])
def test_linear_classifier(tmp_path, rows, n_features, labels, post):
    """Several classes, two classes with two coefficient rows, and the binary form (one row,
    two labels: the last two cases)."""
    rng = np.random.default_rng(rows * 7 + len(labels))
    rows_of_coef = 1 if labels in ([-1, 1], [0, 1]) else len(labels)
    x = rng.standard_normal((rows, n_features)).astype(np.float32)
    check_ml(tmp_path, "LinearClassifier", {"X": x},
             {"L": (TensorProto.INT64, [rows]),
              "S": (TensorProto.FLOAT, [rows, max(2, rows_of_coef)])},
             classlabels_ints=labels, post_transform=post, multi_class=0,
             coefficients=list(rng.standard_normal(rows_of_coef * n_features)),
             intercepts=list(rng.standard_normal(rows_of_coef)))


@pytest.mark.parametrize("shape,per_feature", [((1,), False), ((13, 7), True),
                                               ((13, 7), False), ((1, 1), True)])
def test_scaler_imputer_binarizer(tmp_path, shape, per_feature):
    rng = np.random.default_rng(len(shape))
    x = rng.choice(GRID, size=shape).astype(np.float32)
    x[rng.random(shape) < 0.2] = np.nan
    f = shape[-1] if per_feature else 1
    out = {"Y": (TensorProto.FLOAT, list(shape))}
    check_ml(tmp_path / "s", "Scaler", {"X": x}, out, offset=list(rng.standard_normal(f)),
             scale=list(rng.uniform(0.5, 2, f)))
    # onnxruntime fails on NaN, the ONNX reference gives 0 (NaN > t is false): so does mlcc
    check_ml(tmp_path / "b", "Binarizer", {"X": np.nan_to_num(x, nan=0.5)}, out, threshold=0.5)
    got = compile_and_run(ml_model([helper.make_node("Binarizer", ["X"], ["Y"], domain=ML,
                                                     threshold=0.5)], {"X": x}, out),
                          {"X": x}, tmp_path / "nan")
    np.testing.assert_array_equal(got["Y"], (x > 0.5).astype(np.float32))
    got = check_ml(tmp_path / "n", "Imputer", {"X": x}, out,
                   imputed_value_floats=list(rng.standard_normal(f)),
                   replaced_value_float=float("nan"))
    assert not np.isnan(got["Y"]).any()
    check_ml(tmp_path / "v", "Imputer", {"X": x}, out, imputed_value_floats=[9.0] * f,
             replaced_value_float=0.5)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("shape", [(1, 1), (13, 7), (1, 7)])
def test_normalizer(tmp_path, norm, shape):
    x = np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)
    x[0, 0] = 3.5       # a positive maximum in every row 0
    check_ml(tmp_path, "Normalizer", {"X": x}, {"Y": (TensorProto.FLOAT, list(shape))},
             norm=norm)


@pytest.mark.parametrize("dtype,shape,idx", [
    (np.float32, (13, 7), [6, 0, 3, 3]), (np.int64, (2, 3, 5), [4]),
    (np.float32, (7,), [1, 5])])
def test_array_feature_extractor(tmp_path, dtype, shape, idx):
    x = (np.random.default_rng(1).standard_normal(shape) * 10).astype(dtype)
    out_shape = (list(shape[:-1]) if len(shape) > 1 else [1]) + [len(idx)]
    check_ml(tmp_path, "ArrayFeatureExtractor", {"X": x},
             {"Y": (helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), out_shape)},
             initializers={"I": np.array(idx, np.int64)})


def test_array_feature_extractor_runtime_index_out_of_range(tmp_path):
    x = np.zeros((3, 5), np.float32)
    node = helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain=ML)
    model = ml_model([node], {"X": x, "I": np.array([1, 2], np.int64)},
                     {"Y": (TensorProto.FLOAT, [3, 2])})
    got = compile_and_run(model, {"X": x + 1, "I": np.array([4, 0], np.int64)}, tmp_path)
    assert (got["Y"] == 1).all()
    with pytest.raises(Exception, match="out of range|OUT_OF_RANGE|index"):
        compile_and_run(model, {"X": x, "I": np.array([5, 0], np.int64)}, tmp_path)


@pytest.mark.parametrize("shape,zeros", [((13,), 1), ((13, 3), 1), ((1,), 0)])
def test_one_hot_encoder(tmp_path, shape, zeros):
    x = np.random.default_rng(5).choice([3, -2, 7, 11, 5], size=shape).astype(np.int64)
    cats = [7, -2, 3, 11] + ([5] if not zeros else [])
    check_ml(tmp_path, "OneHotEncoder", {"X": x},
             {"Y": (TensorProto.FLOAT, list(shape) + [len(cats)])}, cats_int64s=cats,
             zeros=zeros)


@pytest.mark.parametrize("case", ["i2i", "i2f", "f2i", "f2f", "tensor"])
def test_label_encoder(tmp_path, case):
    rng = np.random.default_rng(3)
    if case.startswith("i"):
        x = rng.choice([5, -1, 9, 100, 2, 7], size=(13,)).astype(np.int64)
        keys = {"keys_int64s": [9, 5, 2, -1]}
    else:
        x = rng.choice([0.5, -1.0, 2.25, 3.0, np.nan], size=(13, 3)).astype(np.float32)
        keys = {"keys_floats": [2.25, 0.5, -1.0, float("nan")]}
    if case.endswith("2i"):
        values, out = {"values_int64s": [10, 20, 30, 40], "default_int64": -7}, TensorProto.INT64
    else:
        values, out = {"values_floats": [0.1, 0.2, 0.3, 0.4]}, TensorProto.FLOAT
    if case == "tensor":      # opset 4
        keys = {"keys_tensor": numpy_helper.from_array(np.array([9, 5, 2, -1], np.int64))}
        values = {"values_tensor": numpy_helper.from_array(np.array([1.5, 2, 3, 4], np.float32)),
                  "default_tensor": numpy_helper.from_array(np.array([8.5], np.float32))}
        x = rng.choice([5, -1, 9, 100, 2, 7], size=(13,)).astype(np.int64)
        out = TensorProto.FLOAT
    check_ml(tmp_path, "LabelEncoder", {"X": x}, {"Y": (out, list(x.shape))},
             ml_opset=4 if case == "tensor" else 2, **keys, **values)


@pytest.mark.parametrize("op,attrs,words", [
    ("LabelEncoder", dict(keys_strings=["a"], values_int64s=[1]), "refused: strings"),
    ("OneHotEncoder", dict(cats_strings=["a"]), "refused: strings"),
    ("LinearClassifier", dict(classlabels_strings=["a", "b"], coefficients=[1.0],
                              intercepts=[0.0]), "integer labels"),
    ("Normalizer", dict(norm="L3"), "norm='L3' is not supported"),
    ("LinearRegressor", dict(coefficients=[1.0], post_transform="LOGISTIC"),
     "LOGISTIC with one target"),
    ("SVMClassifier", dict(classlabels_ints=[0, 1], coefficients=[1.0, 2.0], rho=[0.0],
                           prob_a=[1.0], prob_b=[0.0]), "probability=True"),
])
def test_other_refusals(tmp_path, op, attrs, words):
    x = np.zeros((2, 1), np.int64 if op == "OneHotEncoder" else np.float32)
    node = helper.make_node(op, ["X"], ["Y"] + (["S"] if "Classifier" in op else []),
                            domain=ML, name="n", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "X", helper.np_dtype_to_tensor_dtype(x.dtype), [2, 1])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2]) for o in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, 2)])
    model.ir_version = 9
    message = compile_error(model, tmp_path)
    assert f"'n' ({op}" in message and words in message, message


# ------------------------------------------------------------------ TreeEnsemble (opset 5)

def to_v5(a: dict, members: bool = False, rng=None) -> dict:
    """random_trees' attributes (one weight per leaf) as TreeEnsemble-5 writes them: branches
    and leaves in arrays of their own, integer modes; with `members`, thresholds doubled
    (whole numbers: onnxruntime takes integer members only, and truncates the feature before
    the test where the ONNX text compares exactly; the two agree on whole numbers) and every
    BRANCH_EQ node a set-membership node of its threshold and two other such values."""
    scale = 2.0 if members else 1.0
    key = list(zip(a["nodes_treeids"], a["nodes_nodeids"]))
    branch = [k for k, m in enumerate(a["nodes_modes"]) if m != "LEAF"]
    leaf = [k for k, m in enumerate(a["nodes_modes"]) if m == "LEAF"]
    b_index = {key[k]: i for i, k in enumerate(branch)}
    l_index = {key[k]: i for i, k in enumerate(leaf)}
    weight = {(t, n): (c, w) for t, n, c, w in zip(a["w_treeids"], a["w_nodeids"], a["w_ids"],
                                                    a["w_weights"])}
    v = {k: [] for k in ("nodes_featureids", "nodes_modes", "nodes_splits",
                         "nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                         "nodes_falseleafs", "nodes_missing_value_tracks_true")}
    sets = []
    for k in branch:
        tree = a["nodes_treeids"][k]
        mode = MODES.index(a["nodes_modes"][k])
        if members and mode == 4:
            mode = 6
            sets += [a["nodes_values"][k] * scale, *rng.choice(GRID * scale, 2), np.nan]
        v["nodes_featureids"].append(a["nodes_featureids"][k])
        v["nodes_modes"].append(mode)
        v["nodes_splits"].append(a["nodes_values"][k] * scale if mode != 6 else np.nan)
        v["nodes_missing_value_tracks_true"].append(a["nodes_missing_value_tracks_true"][k])
        for side in ("true", "false"):
            child = (tree, a[f"nodes_{side}nodeids"][k])
            is_leaf = child in l_index
            v[f"nodes_{side}nodeids"].append(l_index[child] if is_leaf else b_index[child])
            v[f"nodes_{side}leafs"].append(int(is_leaf))
    out = {k: x for k, x in v.items() if k not in ("nodes_modes", "nodes_splits")}
    out["nodes_modes"] = numpy_helper.from_array(np.array(v["nodes_modes"], np.uint8))
    out["nodes_splits"] = numpy_helper.from_array(np.array(v["nodes_splits"], np.float32))
    out["leaf_targetids"] = [weight[key[k]][0] for k in leaf]
    out["leaf_weights"] = numpy_helper.from_array(
        np.array([weight[key[k]][1] for k in leaf], np.float32))
    first = {}
    for k in branch:
        first.setdefault(a["nodes_treeids"][k], b_index[key[k]])
    out["tree_roots"] = list(first.values())
    if sets:
        out["membership_values"] = numpy_helper.from_array(np.array(sets, np.float32))
    return out


@pytest.mark.parametrize("trees,depth,n_features,rows,n_targets,aggregate,post,members", [
    (1, 1, 1, 1, 1, 1, 0, False), (50, 8, 7, 13, 1, 1, 0, False),
    (20, 6, 7, 13, 3, 0, 4, True), (20, 5, 7, 13, 2, 2, 0, False),
    (9, 4, 7, 13, 3, 3, 3, True), (9, 4, 7, 13, 1, 0, 4, False)])
def test_tree_ensemble_opset5(tmp_path, trees, depth, n_features, rows, n_targets, aggregate,
                              post, members):
    """Aggregates by number (0 AVERAGE, 1 SUM, 2 MIN, 3 MAX), post transforms 0 (NONE), 3
    (SOFTMAX_ZERO) and 4 (PROBIT; 1 and 2 are refused: test_tree_ensemble_opset5_refusals)
    and set-membership nodes (a chain of BRANCH_EQ)."""
    rng = np.random.default_rng(trees + depth)
    a = random_trees(rng, trees, depth, n_features, n_targets,
                     weights=(0.05, 0.95) if post == 4 else (-2, 2))
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=n_targets,
                            aggregate_function=aggregate, post_transform=post,
                            **to_v5(a, members, rng))
    model = ml_model([node], {"X": np.zeros((rows, n_features), np.float32)},
                     {"Y": (TensorProto.FLOAT, [rows, n_targets])}, ml_opset=5)
    model.opset_import[0].version = 21
    x = features(rows, n_features, seed=depth) * (2 if members else 1)
    check_model(model, {"X": x}, tmp_path)


@pytest.mark.parametrize("post", [1, 2])
def test_tree_ensemble_opset5_refusals(tmp_path, post):
    """post_transform 1 and 2: SOFTMAX and LOGISTIC in the ONNX text, the other way round
    in onnxruntime 1.32."""
    a = random_trees(np.random.default_rng(0), 2, 2, 3, 2)
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=2, name="t5",
                            post_transform=post, **to_v5(a))
    model = ml_model([node], {"X": np.zeros((4, 3), np.float32)},
                     {"Y": (TensorProto.FLOAT, [4, 2])}, ml_opset=5)
    model.opset_import[0].version = 21
    message = compile_error(model, tmp_path)
    assert "'t5' (TreeEnsemble" in message and "no one answer" in message, message


@pytest.mark.parametrize("kernel,params,vectors,one_class", [
    ("RBF", [0.3, 0.0, 0.0], 11, 0), ("LINEAR", [0.0, 0.0, 0.0], 5, 0),
    ("POLY", [0.5, 1.0, 3.0], 7, 0), ("SIGMOID", [0.2, -0.5, 0.0], 7, 1),
    ("LINEAR", [0.0, 0.0, 0.0], 0, 0), ("RBF", [1.5, 0.0, 0.0], 1, 1)])
def test_svm_regressor(tmp_path, kernel, params, vectors, one_class):
    """Support vectors with each kernel, liblinear coefficients (no vectors), one_class."""
    rng = np.random.default_rng(vectors + len(kernel))
    x = rng.standard_normal((13, 7)).astype(np.float32)
    attrs = dict(kernel_type=kernel, kernel_params=params, n_supports=vectors,
                 one_class=one_class, rho=[0.25],
                 coefficients=list(rng.standard_normal(vectors or 7)))
    if vectors:
        attrs["support_vectors"] = list(rng.standard_normal(vectors * 7))
    check_ml(tmp_path, "SVMRegressor", {"X": x}, {"Y": (TensorProto.FLOAT, [13, 1])}, **attrs)


@pytest.mark.parametrize("kernel,classes,per_class,post", [
    ("RBF", 3, [4, 2, 5], "NONE"), ("POLY", 4, [2, 3, 1, 2], "SOFTMAX"),
    ("LINEAR", 3, [3, 3, 3], "LOGISTIC"), ("RBF", 2, [3, 4], "NONE"),
    ("SIGMOID", 2, [2, 5], "LOGISTIC"), ("LINEAR", 3, [], "NONE"), ("LINEAR", 2, [], "NONE")])
def test_svm_classifier(tmp_path, kernel, classes, per_class, post):
    """libsvm's one-vs-one SVC (decision values, votes) with each kernel, two classes (the
    two score columns), and liblinear's per-class scores (no support vectors)."""
    rng = np.random.default_rng(classes * 10 + len(per_class))
    x = rng.standard_normal((13, 7)).astype(np.float32)
    vectors = sum(per_class)
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 2.0], post_transform=post,
                 classlabels_ints=list(range(5, 5 + classes)))
    if vectors:
        attrs.update(vectors_per_class=per_class,
                     support_vectors=list(rng.standard_normal(vectors * 7)),
                     coefficients=list(rng.standard_normal((classes - 1) * vectors)),
                     rho=list(rng.standard_normal(classes * (classes - 1) // 2)))
        width = classes * (classes - 1) // 2 if classes > 2 else 2
    else:
        attrs.update(coefficients=list(rng.standard_normal(classes * 7)), rho=[0.1])
        width = classes
    check_ml(tmp_path, "SVMClassifier", {"X": x},
             {"L": (TensorProto.INT64, [13]), "S": (TensorProto.FLOAT, [13, width])}, **attrs)


@pytest.mark.parametrize("op,kernel", [("SVMClassifier", "RBF"), ("SVMClassifier", "POLY"),
                                       ("SVMRegressor", "RBF"), ("SVMRegressor", "SIGMOID")])
def test_svm_blocks_and_threads(tmp_path, op, kernel):
    """Support vectors over several blocks of 16, the last one partial (39), rows enough to
    be split over the pool: the same bits on 1, 2 and 3 threads, and onnxruntime's values."""
    rng = np.random.default_rng(len(op) + len(kernel))
    rows, features, per_class = 2500, 13, [17, 9, 13]
    vectors = sum(per_class)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    attrs = dict(kernel_type=kernel, kernel_params=[0.05, 0.5, 2.0],
                 support_vectors=list(rng.standard_normal(vectors * features)))
    if op == "SVMClassifier":
        attrs.update(vectors_per_class=per_class, classlabels_ints=[3, 1, 4],
                     coefficients=list(rng.standard_normal(2 * vectors)),
                     rho=list(rng.standard_normal(3)))
        outs = {"L": (TensorProto.INT64, [rows]), "S": (TensorProto.FLOAT, [rows, 3])}
    else:
        attrs.update(n_supports=vectors, rho=[0.25],
                     coefficients=list(rng.standard_normal(vectors)))
        outs = {"Y": (TensorProto.FLOAT, [rows, 1])}
    node = helper.make_node(op, ["X"], list(outs), domain=ML, name=op.lower(), **attrs)
    model = ml_model([node], {"X": x}, outs)
    got = run_same_bits_on_threads(model, {"X": x}, tmp_path)
    ref = reference_outputs(model, {"X": x})
    for name, r in ref.items():
        if r.dtype == np.int64:
            np.testing.assert_array_equal(got[name], r, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-4 * np.abs(r).max())


@pytest.mark.parametrize("shapes,dims", [
    ([(13, 3), (13, 1), (13, 4)], [3, 1, 4]), ([(13, 5), (13, 2)], [3, 4]),
    ([(7,), (7,)], [7, 2]), ([(1, 2, 3)], [6])])
def test_feature_vectorizer(tmp_path, shapes, dims):
    """Inputs concatenated along the features: extra columns dropped, missing ones 0."""
    rng = np.random.default_rng(len(shapes))
    feeds = {f"X{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    rows = shapes[0][0] if len(shapes[0]) > 1 else 1
    check_ml(tmp_path, "FeatureVectorizer", feeds,
             {"Y": (TensorProto.FLOAT, [rows, sum(dims)])}, inputdimensions=dims)


# ------------------------------------------------------------------ real conversions

@functools.lru_cache(maxsize=1)
def sklearn_cases():
    """(name, fitted model) for the converted models (the `ml` extra), fitted once."""
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                                  RandomForestClassifier, RandomForestRegressor)
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, Normalizer as SkNormalizer, StandardScaler
    from sklearn.svm import SVC, SVR
    from sklearn.tree import DecisionTreeClassifier
    x, y = two_moons(300, seed=3)
    y3 = (y + (x[:, 2] > 0.2)).astype(np.int64)           # three classes
    r = x[:, 0] * 2 + np.sin(x[:, 1] * 3)
    return [
        ("gbc_binary", GradientBoostingClassifier(n_estimators=30, max_depth=3).fit(x, y)),
        ("gbc_3", GradientBoostingClassifier(n_estimators=20, max_depth=3).fit(x, y3)),
        ("rfc_3", RandomForestClassifier(n_estimators=15, max_depth=6, random_state=0)
         .fit(x, y3)),
        ("rfr", RandomForestRegressor(n_estimators=15, max_depth=8, random_state=0).fit(x, r)),
        ("gbr", GradientBoostingRegressor(n_estimators=40, max_depth=4).fit(x, r)),
        ("tree", DecisionTreeClassifier(max_depth=8, random_state=0).fit(x, y3)),
        ("logreg", make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y3)),
        ("linreg", make_pipeline(MinMaxScaler(), LinearRegression()).fit(x, r)),
        ("svc", make_pipeline(StandardScaler(), SVC(kernel="rbf")).fit(x, y3)),
        ("svc_binary", make_pipeline(SkNormalizer(), SVC(kernel="poly", degree=2)).fit(x, y)),
        ("svr", SVR(kernel="rbf").fit(x, r)),
    ]


@pytest.mark.parametrize("index", range(11))
def test_scikit_learn_models_converted_by_skl2onnx(tmp_path, index):
    """Real conversions: each model through skl2onnx (ZipMap off), compiled and compared with
    onnxruntime on 13 rows; skipped without the `ml` extra (scikit-learn, skl2onnx)."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    name, model = sklearn_cases()[index]
    x_test, _ = two_moons(13, seed=8)
    options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
    onx = skl2onnx.to_onnx(model, x_test[:1], options=options, target_opset={"": 17,
                                                                              ML: 3})
    onx.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 13
    got = check_model(onx, {onx.graph.input[0].name: x_test}, tmp_path)
    if hasattr(model, "predict_proba") or name.startswith("svc"):
        np.testing.assert_array_equal(got[onx.graph.output[0].name], model.predict(x_test))


def test_scikit_learn_zipmap_refused(tmp_path):
    """A classifier converted with ZipMap (skl2onnx's default) is refused with the way
    around it."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LogisticRegression
    x, y = two_moons(50, seed=1)
    onx = skl2onnx.to_onnx(LogisticRegression().fit(x, y), x[:1],
                           target_opset={"": 17, ML: 3})
    onx.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    message = compile_error(onx, tmp_path)
    assert "is a graph output" in message and "'zipmap': False" in message, message
