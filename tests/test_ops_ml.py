"""The classical-ML operators of the ai.onnx.ml domain (mlcc/ops/ml_trees.py, mlcc/ops/ml.py)
against onnxruntime, on models built with onnx.helper: random trees of 1 to 50 trees and depth
1 to 8 over 1 and 7 features, batches of 1 and 13, thresholds equal to the feature values for
every branch mode, NaN features either way of missing_value_tracks_true, every aggregate and
post transform, double thresholds (opset 3's *_as_tensor), two-class classifiers as
onnxruntime writes them, a gradient-boosted and a random-forest model trained here with numpy,
the same bits on any number of threads, and the refusals (docs/classical-ml.md)."""
from __future__ import annotations

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

