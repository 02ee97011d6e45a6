"""Tree ensembles of the ai.onnx.ml domain: TreeEnsembleRegressor and TreeEnsembleClassifier
(opsets 1 and 3: the *_as_tensor attributes) and TreeEnsemble (opset 5), what skl2onnx and
onnxmltools write for scikit-learn, LightGBM and XGBoost trees, on the kernel of
runtime_c/kernels/trees.h.

The compiler flattens the trees (`flatten`; `flatten_v5` for opset 5, whose set-membership
nodes become chains of BRANCH_EQ nodes): nodes by (tree id, node id), each tree's root its
first node in attribute order and trees in that order (as onnxruntime and the ONNX reference
take them), every tree checked acyclic with its features inside the input row. Evaluation
follows onnxruntime: every branch mode, NaN features by missing_value_tracks_true, leaf
weights in attribute order, aggregate SUM / AVERAGE / MIN / MAX, base values, the post
transforms, and its rules for two-class classifiers (one class id: the two score columns it
writes); float32 comparisons and sums, as onnxruntime for float inputs (it takes double
*_as_tensor attributes with double inputs only, which mlcc refuses). Where onnxruntime and
the ONNX text disagree, the node is refused naming both. docs/classical-ml.md lists what is
refused and why.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Lowering, Node
from .common import require_dtype
from .refusals import STRINGS, refusal
from .registry import OpDef, describe, register

ML = "ai.onnx.ml"
MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
         "BRANCH_NEQ": 5, "LEAF": 6}
MISSING_TRUE = 8            # MLCC_TREE_MISSING_TRUE
AGGREGATES = {"SUM": "MLCC_TREE_SUM", "AVERAGE": "MLCC_TREE_AVERAGE", "MIN": "MLCC_TREE_MIN",
              "MAX": "MLCC_TREE_MAX"}
POST_TRANSFORMS = {"NONE": "MLCC_ML_POST_NONE", "LOGISTIC": "MLCC_ML_POST_LOGISTIC",
                   "SOFTMAX": "MLCC_ML_POST_SOFTMAX", "SOFTMAX_ZERO": "MLCC_ML_POST_SOFTMAX_ZERO",
                   "PROBIT": "MLCC_ML_POST_PROBIT"}


def text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def attr_array(node: Node, name: str, dtype=None) -> np.ndarray | None:
    """An attribute as an array: its list form, else its *_as_tensor form, else None."""
    v = node.attr(name)
    if v is None:
        v = node.attr(f"{name}_as_tensor")
    if v is None:
        return None
    a = np.asarray(v).reshape(-1)
    return a.astype(dtype) if dtype is not None else a


def post_transform(node: Node) -> str:
    return text(node.attr("post_transform", "NONE"))


def one_target_post(node: Node, targets: int) -> list[str]:
    """The refusal of a regressor's post transform that onnxruntime skips on one target (it
    applies PROBIT only there; the ONNX text applies every transform)."""
    if targets == 1 and post_transform(node) not in ("NONE", "PROBIT"):
        return [f"post_transform {post_transform(node)} with one target is not supported: "
                f"onnxruntime ignores it where the ONNX text applies it, so the model has no "
                f"one answer"]
    return []


@dataclass
class Flat:
    """The trees as the kernel reads them (runtime_c/kernels/trees.h)."""
    roots: np.ndarray          # int32 [trees]
    nodes: np.ndarray          # int32 [n, 4]
    thresholds: np.ndarray     # float32 [n]
    weight_target: np.ndarray  # int32 [w]
    weight_value: np.ndarray   # float32 [w]
    max_depth: int


def flatten(node: Node, prefix: str, features: int, targets: int) -> Flat:
    """The node's trees (prefix: "target" or "class" for the leaf weights' attributes)."""
    where = describe(node)
    need = ["nodes_treeids", "nodes_nodeids", "nodes_modes", "nodes_truenodeids",
            "nodes_falsenodeids", "nodes_featureids", f"{prefix}_ids", f"{prefix}_nodeids",
            f"{prefix}_treeids"]
    missing = [a for a in need if node.attr(a) is None]
    if missing:
        raise ModelError(f"{where} needs the attributes {', '.join(missing)}")
    tree_ids = [int(v) for v in node.attr("nodes_treeids")]
    node_ids = [int(v) for v in node.attr("nodes_nodeids")]
    modes = [text(m) for m in node.attr("nodes_modes")]
    true_ids = [int(v) for v in node.attr("nodes_truenodeids")]
    false_ids = [int(v) for v in node.attr("nodes_falsenodeids")]
    feature_ids = [int(v) for v in node.attr("nodes_featureids")]
    n = len(tree_ids)
    values = attr_array(node, "nodes_values")
    if values is None:
        values = np.zeros(n, np.float32)
    weights = attr_array(node, f"{prefix}_weights")
    if weights is None:
        raise ModelError(f"{where} needs {prefix}_weights or {prefix}_weights_as_tensor")
    missing_true = [int(v) for v in (node.attr("nodes_missing_value_tracks_true") or [0] * n)]
    lists = {"nodes_nodeids": node_ids, "nodes_modes": modes, "nodes_truenodeids": true_ids,
             "nodes_falsenodeids": false_ids, "nodes_featureids": feature_ids,
             "nodes_values": values, "nodes_missing_value_tracks_true": missing_true}
    bad = [k for k, v in lists.items() if len(v) != n]
    if bad:
        raise ModelError(f"{where}: {', '.join(bad)} do not have one entry per node "
                         f"({n} nodes_treeids)")
    unknown = sorted({m for m in modes if m not in MODES})
    if unknown:
        raise UnsupportedError(f"node mode {unknown[0]!r} is not supported "
                               f"(supported: {', '.join(MODES)})")
    index: dict[tuple[int, int], int] = {}
    roots: list[int] = []
    seen_trees: set[int] = set()
    for k, key in enumerate(zip(tree_ids, node_ids)):
        if key in index:
            raise ModelError(f"{where}: node {key[1]} of tree {key[0]} is listed twice")
        index[key] = k
        if key[0] not in seen_trees:        # a tree's root: its first node listed
            seen_trees.add(key[0])
            roots.append(k)
    w_tree = [int(v) for v in node.attr(f"{prefix}_treeids")]
    w_node = [int(v) for v in node.attr(f"{prefix}_nodeids")]
    w_target = [int(v) for v in node.attr(f"{prefix}_ids")]
    if not len(w_tree) == len(w_node) == len(w_target) == len(weights):
        raise ModelError(f"{where}: {prefix}_treeids, _nodeids, _ids and _weights differ in "
                         f"length")
    by_leaf: dict[int, list[int]] = {}
    for w, (t, nd, c) in enumerate(zip(w_tree, w_node, w_target)):
        k = index.get((t, nd))
        if k is None:
            raise ModelError(f"{where}: weight {w} names node {nd} of tree {t}, which does "
                             f"not exist")
        if modes[k] != "LEAF":
            raise ModelError(f"{where}: weight {w} is on node {nd} of tree {t}, a branch")
        if not 0 <= c < targets:
            raise ModelError(f"{where}: weight {w} is for {prefix} {c}, outside [0, {targets})")
        by_leaf.setdefault(k, []).append(w)
    flat = np.zeros((n, 4), np.int32)
    order: list[int] = []
    for k in range(n):
        if modes[k] == "LEAF":
            ws = by_leaf.get(k, [])
            flat[k] = (len(order), len(ws), 0, MODES["LEAF"])
            order += ws
            continue
        if not 0 <= feature_ids[k] < features:
            raise ModelError(f"{where}: node {node_ids[k]} of tree {tree_ids[k]} reads feature "
                             f"{feature_ids[k]} of rows of {features}")
        children = []
        for child in (true_ids[k], false_ids[k]):
            c = index.get((tree_ids[k], child))
            if c is None:
                raise ModelError(f"{where}: node {node_ids[k]} of tree {tree_ids[k]} branches "
                                 f"to node {child}, which the tree does not have")
            children.append(c)
        flat[k] = (feature_ids[k], children[0], children[1],
                   MODES[modes[k]] | (MISSING_TRUE if missing_true[k] else 0))
    return Flat(np.array(roots, np.int32), flat, values.astype(np.float32),
                np.array([w_target[w] for w in order], np.int32),
                weights[order].astype(np.float32) if order else np.zeros(1, np.float32),
                deepest(where, flat, roots, [f"tree {tree_ids[r]}" for r in roots]))


def same_mode(nodes: np.ndarray) -> int:
    """The mode every branch of the flattened trees shares, or -1 (mixed, or no branch)."""
    modes = {int(m) for m in nodes[:, 3] & 7} - {MODES["LEAF"]}
    return modes.pop() if len(modes) == 1 else -1


def deepest(where: str, flat: np.ndarray, roots: list[int], names: list[str]) -> int:
    """The longest path from a root to a leaf; refuses a cycle (the kernel would not stop)."""
    max_depth, n = 0, len(flat)
    for r, name in zip(roots, names):
        stack = [(r, 0)]
        depth_of: dict[int, int] = {}
        while stack:
            k, depth = stack.pop()
            if depth > n:
                raise ModelError(f"{where}: {name} has a cycle")
            if depth_of.get(k, -1) >= depth:
                continue
            depth_of[k] = depth
            max_depth = max(max_depth, depth)
            if flat[k, 3] & 7 != MODES["LEAF"]:
                stack += [(int(flat[k, 1]), depth + 1), (int(flat[k, 2]), depth + 1)]
    return max_depth


class _TreeEnsemble(OpDef):
    prefix = ""

    common = {"nodes_treeids": None, "nodes_nodeids": None, "nodes_modes": None,
              "nodes_truenodeids": None, "nodes_falsenodeids": None, "nodes_featureids": None,
              "nodes_values": None, "nodes_values_as_tensor": None,
              "nodes_hitrates": None, "nodes_hitrates_as_tensor": None,
              "nodes_missing_value_tracks_true": None,
              "base_values": None, "base_values_as_tensor": None,
              "post_transform": lambda v: text(v) in POST_TRANSFORMS}

    def check(self, node):
        problems = super().check(node)
        for key in sorted(node.attrs):
            v = node.attrs[key]
            if key.endswith("_as_tensor") and np.asarray(v).dtype != np.float32:
                problems.append(f"attribute {key} of type {np.asarray(v).dtype} is not "
                                f"supported: onnxruntime takes double thresholds and weights "
                                f"with double inputs only, and mlcc compiles float32 trees "
                                f"(convert the model with float inputs)")
        return problems

    def targets(self, node: Node) -> int:
        raise NotImplementedError

    def input_shape(self, node, x):
        require_dtype(node, [x], ["float32"])
        if len(x.shape) not in (1, 2):
            raise ModelError(f"input {list(x.shape)} is not [N, F] or [F]")
        rows = x.shape[0] if len(x.shape) == 2 else 1
        return rows, x.shape[-1]

    def base(self, node: Node, allowed: tuple[int, ...]) -> np.ndarray:
        b = attr_array(node, "base_values")
        b = np.zeros(0) if b is None else b
        if len(b) not in allowed:
            raise UnsupportedError(f"{len(b)} base_values for "
                                   f"{self.targets(node)} {self.prefix}s are not supported "
                                   f"(supported: {', '.join(map(str, allowed))})")
        return b.astype(np.float32)

    def emit(self, node: Node, lo: Lowering, flat: Flat, base: np.ndarray, *, rows: int,
             features: int, aggregate: str, classifier: dict | None) -> None:
        name = node.name
        targets = self.targets(node)
        consts = [lo.add_const(f"{name}.roots", flat.roots),
                  lo.add_const(f"{name}.nodes", flat.nodes),
                  lo.add_const(f"{name}.thresholds", flat.thresholds),
                  lo.add_const(f"{name}.weight_target", flat.weight_target),
                  lo.add_const(f"{name}.weight_value", flat.weight_value),
                  lo.add_const(f"{name}.base", base) if len(base) else ""]
        if classifier:
            labels = lo.add_const(f"{name}.labels", classifier["labels"])
            outs = list(node.outputs)
        else:
            labels, outs = "", ["", node.outputs[0]]
        lo.call("mlcc_f32_tree_ensemble",
                [node.inputs[0], *consts, labels, *outs], [o for o in outs if o],
                params_type="mlcc_tree_ensemble_params",
                params={"rows": rows, "features": features, "targets": targets,
                        "trees": len(flat.roots), "max_depth": flat.max_depth,
                        "aggregate": Enum(AGGREGATES[aggregate]),
                        "post": Enum(POST_TRANSFORMS[post_transform(node)]),
                        "n_base": len(base), "classifier": int(bool(classifier)),
                        "binary_case": int(bool(classifier and classifier["binary"])),
                        "all_positive": int(bool(classifier and classifier["positive"])),
                        "same_mode": same_mode(flat.nodes)},
                scratch_bytes=rows * targets, pool=True)

    def flops(self, node, g):
        return 0


@register("TreeEnsembleRegressor", domain=ML)
class TreeEnsembleRegressor(_TreeEnsemble):
    """Y [N, n_targets] float32 from X [N, F] float32."""
    prefix = "target"
    attributes = {**_TreeEnsemble.common, "n_targets": lambda v: v >= 1,
                  "aggregate_function": lambda v: text(v) in AGGREGATES,
                  "target_ids": None, "target_nodeids": None, "target_treeids": None,
                  "target_weights": None, "target_weights_as_tensor": None}

    def check(self, node):
        return super().check(node) + one_target_post(node, int(node.attr("n_targets", 1)))

    def targets(self, node):
        return int(node.attr("n_targets", 1))

    def infer(self, node, ins, g):
        rows, _ = self.input_shape(node, ins[0])
        return [("float32", (rows, self.targets(node)))]

    def lower(self, node, lo):
        rows, features = self.input_shape(node, lo.value(node.inputs[0]))
        flat = flatten(node, "target", features, self.targets(node))
        base = self.base(node, (0, self.targets(node)))
        self.emit(node, lo, flat, base, rows=rows, features=features,
                  aggregate=text(node.attr("aggregate_function", "SUM")), classifier=None)


@register("TreeEnsembleClassifier", domain=ML)
class TreeEnsembleClassifier(_TreeEnsemble):
    """Y [N] int64 labels and Z [N, classes] float32 scores from X [N, F] float32; int64
    class labels (string labels are refused: convert with integer labels)."""
    prefix = "class"
    attributes = {**_TreeEnsemble.common, "classlabels_int64s": None,
                  "classlabels_strings": None, "class_ids": None, "class_nodeids": None,
                  "class_treeids": None, "class_weights": None,
                  "class_weights_as_tensor": None}

    def check(self, node):
        problems = super().check(node)
        if node.attr("classlabels_strings") is not None:
            problems.append(
                f"string class labels (classlabels_strings): {refusal(STRINGS)}; convert the "
                f"model with integer labels (e.g. fit on the label indices and map them back "
                f"after the call)")
        elif len(node.attr("classlabels_int64s") or []) < 2:
            problems.append("a classifier needs classlabels_int64s of two classes or more")
        elif len(node.attr("classlabels_int64s")) == 2 and post_transform(node) == "PROBIT":
            problems.append("post_transform PROBIT with two classes is not supported "
                            "(onnxruntime then writes one of the two score columns)")
        return problems

    def targets(self, node):
        return len(node.attr("classlabels_int64s") or [])

    def infer(self, node, ins, g):
        rows, _ = self.input_shape(node, ins[0])
        return [("int64", (rows,)), ("float32", (rows, self.targets(node)))]

    def lower(self, node, lo):
        rows, features = self.input_shape(node, lo.value(node.inputs[0]))
        classes = self.targets(node)
        flat = flatten(node, "class", features, classes)
        base = self.base(node, (0, classes) if classes > 2 else (0, 1, 2))
        weights = attr_array(node, "class_weights")
        ids = {int(v) for v in node.attr("class_ids")}
        self.emit(node, lo, flat, base, rows=rows, features=features, aggregate="SUM",
                  classifier={"labels": np.array(node.attr("classlabels_int64s"), np.int64),
                              "binary": classes == 2 and len(ids) == 1,
                              "positive": bool(np.all(weights >= 0))})


# TreeEnsemble (ai.onnx.ml 5): integer enums for modes, aggregates and post transforms
V5_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
V5_MEMBER = 6
V5_AGGREGATES = ["AVERAGE", "SUM", "MIN", "MAX"]
V5_POSTS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]


def flatten_v5(node: Node, features: int, targets: int) -> Flat:
    """TreeEnsemble-5's arrays as the kernel reads them: node k stays k, leaf j becomes node
    n + j (its one weight, weight j), and a set-membership node a chain of BRANCH_EQ nodes,
    one per member (the same true branch, the NaN flag on each), appended after the leaves."""
    where = describe(node)
    need = ["nodes_featureids", "nodes_modes", "nodes_splits", "nodes_truenodeids",
            "nodes_trueleafs", "nodes_falsenodeids", "nodes_falseleafs", "leaf_targetids",
            "leaf_weights", "tree_roots"]
    missing = [a for a in need if node.attr(a) is None]
    if missing:
        raise ModelError(f"{where} needs the attributes {', '.join(missing)}")
    ints = {a: [int(v) for v in np.asarray(node.attr(a)).reshape(-1)]
            for a in need if a not in ("nodes_splits", "leaf_weights")}
    splits = np.asarray(node.attr("nodes_splits")).reshape(-1).astype(np.float32)
    weights = np.asarray(node.attr("leaf_weights")).reshape(-1).astype(np.float32)
    n, leaves = len(ints["nodes_modes"]), len(weights)
    missing_true = [int(v) for v in (node.attr("nodes_missing_value_tracks_true") or [0] * n)]
    per_node = ("nodes_featureids", "nodes_truenodeids", "nodes_trueleafs",
                "nodes_falsenodeids", "nodes_falseleafs")
    if any(len(ints[a]) != n for a in per_node) or len(splits) != n or \
            len(missing_true) != n or len(ints["leaf_targetids"]) != leaves:
        raise ModelError(f"{where}: the nodes_* (or leaf_*) attributes differ in length")
    members = list(np.asarray(node.attr("membership_values") if node.attr(
        "membership_values") is not None else []).reshape(-1).astype(np.float32))
    flat = [[0, 0, 0, 0] for _ in range(n)]
    thresholds = list(splits) + [0.0] * leaves
    flat += [[j, 1, 0, MODES["LEAF"]] for j in range(leaves)]

    def child(index: int, leaf: int) -> int:
        limit = leaves if leaf else n
        if not 0 <= index < limit:
            raise ModelError(f"{where}: a branch goes to {'leaf' if leaf else 'node'} {index} "
                             f"of {limit}")
        return n + index if leaf else index

    sets = iter(members)
    for k in range(n):
        mode, feature = ints["nodes_modes"][k], ints["nodes_featureids"][k]
        if not 0 <= feature < features:
            raise ModelError(f"{where}: node {k} reads feature {feature} of rows of {features}")
        t = child(ints["nodes_truenodeids"][k], ints["nodes_trueleafs"][k])
        f = child(ints["nodes_falsenodeids"][k], ints["nodes_falseleafs"][k])
        flag = MISSING_TRUE if missing_true[k] else 0
        if mode < len(V5_MODES):
            flat[k] = [feature, t, f, mode | flag]
            continue
        if mode != V5_MEMBER:
            raise UnsupportedError(f"node mode {mode} is not supported")
        values = []          # this node's members: up to the next NaN
        for v in sets:
            if np.isnan(v):
                break
            values.append(v)
        if not values:
            raise ModelError(f"{where}: set-membership node {k} has no members")
        chain = [k] + [len(flat) + i for i in range(len(values) - 1)]
        flat += [[0, 0, 0, 0] for _ in values[1:]]
        thresholds += [0.0] * (len(values) - 1)
        for i, (at, v) in enumerate(zip(chain, values)):
            nxt = chain[i + 1] if i + 1 < len(chain) else f
            flat[at] = [feature, t, nxt, MODES["BRANCH_EQ"] | flag]
            thresholds[at] = v
    targets_of = ints["leaf_targetids"]
    if any(not 0 <= c < targets for c in targets_of):
        raise ModelError(f"{where}: a leaf's target is outside [0, {targets})")
    roots = [child(r, 0) for r in ints["tree_roots"]]
    flat_arr = np.array(flat, np.int32)
    return Flat(np.array(roots, np.int32), flat_arr, np.array(thresholds, np.float32),
                np.array(targets_of, np.int32), weights if leaves else np.zeros(1, np.float32),
                deepest(where, flat_arr, roots, [f"tree {i}" for i in range(len(roots))]))


@register("TreeEnsemble", domain=ML, since=5)
class TreeEnsemble(TreeEnsembleRegressor):
    """TreeEnsemble (ai.onnx.ml 5): TreeEnsembleRegressor's outputs from other attributes:
    node modes 0-5 and set membership (6), aggregates and post transforms by number; float32
    splits and weights (a double or float16 model is refused, as double attributes above)."""
    attributes = {"nodes_featureids": None, "nodes_modes": None, "nodes_splits": None,
                  "nodes_truenodeids": None, "nodes_trueleafs": None,
                  "nodes_falsenodeids": None, "nodes_falseleafs": None,
                  "nodes_hitrates": None, "nodes_missing_value_tracks_true": None,
                  "leaf_targetids": None, "leaf_weights": None, "tree_roots": None,
                  "membership_values": None, "n_targets": lambda v: v >= 1,
                  "aggregate_function": lambda v: 0 <= v < len(V5_AGGREGATES),
                  "post_transform": lambda v: 0 <= v < len(V5_POSTS)}

    def check(self, node):
        problems = OpDef.check(self, node)
        for key in ("nodes_splits", "leaf_weights", "membership_values", "nodes_hitrates"):
            v = node.attr(key)
            if v is not None and np.asarray(v).dtype != np.float32:
                problems.append(f"attribute {key} of type {np.asarray(v).dtype} is not "
                                f"supported: mlcc compiles float32 trees (convert the model "
                                f"with float inputs)")
        code = int(node.attr("post_transform", 0))
        if code in (1, 2):
            problems.append(f"post_transform {code} is not supported: the ONNX text reads 1 "
                            f"as SOFTMAX and 2 as LOGISTIC, onnxruntime the other way round, "
                            f"so the model has no one answer")
        elif 0 <= code < len(V5_POSTS):
            problems += one_target_post(named_post(node, V5_POSTS[code]), self.targets(node))
        return problems

    def lower(self, node, lo):
        rows, features = self.input_shape(node, lo.value(node.inputs[0]))
        flat = flatten_v5(node, features, self.targets(node))
        post = V5_POSTS[int(node.attr("post_transform", 0))]
        self.emit(named_post(node, post), lo, flat, np.zeros(0, np.float32), rows=rows,
                  features=features,
                  aggregate=V5_AGGREGATES[int(node.attr("aggregate_function", 1))],
                  classifier=None)


def named_post(node: Node, post: str) -> Node:
    """The node with its post transform by name, as the older operators give it."""
    return dataclasses.replace(node, attrs={**node.attrs, "post_transform": post})
