"""The numeric ai.onnx.ml operators other than the tree ensembles (mlcc/ops/ml_trees.py):
LinearRegressor, LinearClassifier, SVMRegressor, SVMClassifier, Scaler, Normalizer,
Binarizer, Imputer, ArrayFeatureExtractor, FeatureVectorizer, OneHotEncoder and LabelEncoder,
as onnxruntime computes them (float32; int64 labels, categories and keys). String
attributes and tensors are refused (strings category): convert the model with integer
labels. Kernels in runtime_c/kernels/ml.h; ArrayFeatureExtractor runs on Gather's kernel
(runtime_c/kernels/gather.h), FeatureVectorizer on strided copies.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Lowering, Node
from .common import emit_copy, require_dtype
from .gather import INDEX_KERNELS
from .ml_trees import ML, POST_TRANSFORMS, attr_array, one_target_post, post_transform, text
from .refusals import STRINGS, refusal
from .registry import OpDef, describe, register

POST = {"post_transform": lambda v: text(v) in POST_TRANSFORMS}


def rows_features(node: Node, x) -> tuple[int, int]:
    """[N, F] or [F] (one row) as onnxruntime reads the input of the linear models."""
    require_dtype(node, [x], ["float32"])
    if len(x.shape) not in (1, 2):
        raise ModelError(f"input {list(x.shape)} is not [N, F] or [F]")
    return (x.shape[0] if len(x.shape) == 2 else 1), x.shape[-1]


def floats(node: Node, name: str, default=None) -> np.ndarray:
    v = attr_array(node, name, np.float32)
    if v is None:
        if default is None:
            raise ModelError(f"{describe(node)} needs the attribute {name}")
        return np.asarray(default, np.float32).reshape(-1)
    return v


def strings_refused(node: Node, names: tuple[str, ...]) -> list[str]:
    return [f"attribute {n} (strings): {refusal(STRINGS)}; convert the model with integer "
            f"labels" for n in names if node.attr(n) is not None]


class _Linear(OpDef):
    def coefficients(self, node: Node, features: int) -> tuple[np.ndarray, np.ndarray]:
        coef = floats(node, "coefficients")
        intercepts = floats(node, "intercepts", [])
        targets = self.targets(node)
        if coef.size != targets * features:
            raise ModelError(f"{describe(node)}: {coef.size} coefficients for {targets} "
                             f"targets of {features} features")
        if intercepts.size == 0:
            intercepts = np.zeros(targets, np.float32)
        if intercepts.size != targets:
            raise ModelError(f"{describe(node)}: {intercepts.size} intercepts for {targets} "
                             f"targets")
        return coef.reshape(targets, features), intercepts

    def emit(self, node: Node, lo: Lowering, outs: list[str], labels: str, binary: bool):
        rows, features = rows_features(node, lo.value(node.inputs[0]))
        coef, intercepts = self.coefficients(node, features)
        lo.call("mlcc_f32_linear",
                [node.inputs[0], lo.add_const(f"{node.name}.coef", coef),
                 lo.add_const(f"{node.name}.intercepts", intercepts), labels, *outs],
                [o for o in outs if o], params_type="mlcc_linear_params",
                params={"rows": rows, "features": features, "targets": coef.shape[0],
                        "post": Enum(POST_TRANSFORMS[post_transform(node)]),
                        "classifier": int(bool(labels)), "binary": int(binary)})

    def flops(self, node, g):
        x = g.values[node.inputs[0]]
        return 2 * math.prod(x.shape) * self.targets(node)


@register("LinearRegressor", domain=ML)
class LinearRegressor(_Linear):
    """Y [N, targets] = X coefficients^T + intercepts, then the post transform."""
    attributes = {"coefficients": None, "intercepts": None, "targets": lambda v: v >= 1,
                  **POST}

    def check(self, node):
        return super().check(node) + one_target_post(node, self.targets(node))

    def targets(self, node):
        return int(node.attr("targets", 1))

    def infer(self, node, ins, g):
        rows, _ = rows_features(node, ins[0])
        return [("float32", (rows, self.targets(node)))]

    def lower(self, node, lo):
        self.emit(node, lo, ["", node.outputs[0]], "", False)


@register("LinearClassifier", domain=ML)
class LinearClassifier(_Linear):
    """Y [N] int64 labels and Z [N, classes] scores; one coefficient row with two labels is
    a binary model (label by the sign of the score, two score columns, as onnxruntime)."""
    attributes = {"coefficients": None, "intercepts": None, "classlabels_ints": None,
                  "classlabels_strings": None, "multi_class": None, **POST}

    def check(self, node):
        problems = super().check(node) + strings_refused(node, ("classlabels_strings",))
        if problems:
            return problems
        labels = node.attr("classlabels_ints") or []
        targets = self.targets(node)
        if targets == 0:
            return ["LinearClassifier needs intercepts (one per class)"]
        if not (len(labels) == targets >= 2 or (targets == 1 and len(labels) == 2)):
            problems.append(f"{len(labels)} classlabels_ints for {targets} intercepts are not "
                            f"supported (one per score row, or two for one row)")
        if targets == 1 and post_transform(node) not in ("NONE", "LOGISTIC"):
            problems.append(f"post_transform {post_transform(node)} of a binary model is not "
                            f"supported")
        return problems

    def targets(self, node):
        return len(node.attr("intercepts") if node.attr("intercepts") is not None else [])

    def infer(self, node, ins, g):
        rows, _ = rows_features(node, ins[0])
        return [("int64", (rows,)), ("float32", (rows, max(2, self.targets(node))))]

    def lower(self, node, lo):
        labels = lo.add_const(f"{node.name}.labels",
                              np.array(node.attr("classlabels_ints"), np.int64))
        self.emit(node, lo, list(node.outputs), labels, self.targets(node) == 1)


class _Features(OpDef):
    """Elementwise with a per-feature parameter (along the last axis): float32 of any rank
    (a scalar is one feature)."""

    def infer(self, node, ins, g):
        require_dtype(node, [ins[0]], ["float32"])
        return [("float32", tuple(ins[0].shape))]

    def features(self, lo: Lowering, node: Node) -> int:
        shape = lo.value(node.inputs[0]).shape
        return shape[-1] if shape else 1

    def per_feature(self, node: Node, arr: np.ndarray, features: int, what: str) -> np.ndarray:
        if arr.size not in (1, features):
            raise ModelError(f"{describe(node)}: {arr.size} {what} for {features} features "
                             f"(one, or one per feature)")
        return arr

    def params(self, lo: Lowering, node: Node, n_offset=1, n_scale=1, value=0.0) -> dict:
        x = lo.value(node.inputs[0])
        return {"n": math.prod(x.shape), "features": x.shape[-1] if x.shape else 1,
                "n_offset": n_offset,
                "n_scale": n_scale, "value": value}


@register("Scaler", domain=ML)
class Scaler(_Features):
    """Y = (X - offset) * scale, per feature."""
    attributes = {"offset": None, "scale": None}

    def lower(self, node, lo):
        f = self.features(lo, node)
        offset = self.per_feature(node, floats(node, "offset", [0.0]), f, "offsets")
        scale = self.per_feature(node, floats(node, "scale", [1.0]), f, "scales")
        lo.call("mlcc_f32_scaler", [node.inputs[0], lo.add_const(f"{node.name}.offset", offset),
                                    lo.add_const(f"{node.name}.scale", scale), node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_ml_features_params",
                params=self.params(lo, node, offset.size, scale.size))


@register("Imputer", domain=ML)
class Imputer(_Features):
    """Float32 values equal to replaced_value_float (NaN: any NaN) become the imputed value of
    their feature; the int64 form is refused."""
    attributes = {"imputed_value_floats": None, "replaced_value_float": None}

    def lower(self, node, lo):
        f = self.features(lo, node)
        imputed = self.per_feature(node, floats(node, "imputed_value_floats"), f,
                                   "imputed values")
        lo.call("mlcc_f32_imputer", [node.inputs[0], lo.add_const(f"{node.name}.imputed",
                                                                  imputed), node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_ml_features_params",
                params=self.params(lo, node, imputed.size,
                                   value=float(node.attr("replaced_value_float", 0.0))))


@register("Binarizer", domain=ML)
class Binarizer(_Features):
    """Y = X > threshold ? 1 : 0; NaN gives 0 (the ONNX reference: NaN > t is false;
    onnxruntime fails the call)."""
    attributes = {"threshold": None}

    def lower(self, node, lo):
        lo.call("mlcc_f32_binarizer", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_ml_features_params",
                params=self.params(lo, node, value=float(node.attr("threshold", 0.0))))


NORMS = {"MAX": "MLCC_ML_NORM_MAX", "L1": "MLCC_ML_NORM_L1", "L2": "MLCC_ML_NORM_L2"}


@register("Normalizer", domain=ML)
class Normalizer(_Features):
    """Each row divided by its maximum, L1 or L2 norm."""
    attributes = {"norm": lambda v: text(v) in NORMS}

    def lower(self, node, lo):
        x = lo.value(node.inputs[0])
        lo.call("mlcc_f32_normalizer", [node.inputs[0], node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_normalizer_params",
                params={"rows": x.shape[0] if len(x.shape) == 2 else 1,
                        "features": x.shape[-1],
                        "norm": Enum(NORMS[text(node.attr("norm", "MAX"))])})


@register("ArrayFeatureExtractor", domain=ML)
class ArrayFeatureExtractor(OpDef):
    """Y = X[..., indices] (indices int64 or int32, constant or run-time: checked at run time
    by Gather's kernel, MLCC_ERR_INDEX_OUT_OF_RANGE), any element type but strings; a 1-D X
    gives [1, len(indices)], as onnxruntime."""
    attributes = {}

    def infer(self, node, ins, g):
        x, idx = ins
        if x.dtype == "object":
            raise UnsupportedError(f"string tensors: {refusal(STRINGS)}")
        require_dtype(node, [idx], list(INDEX_KERNELS))
        if idx.const is not None and (idx.const < 0).any():
            raise ModelError(f"negative indices {idx.const.reshape(-1)[:4]} (onnxruntime "
                             f"rejects them)")
        lead = tuple(x.shape[:-1]) if len(x.shape) > 1 else (1,)
        return [(x.dtype, lead + (math.prod(idx.shape),))]

    def lower(self, node, lo):
        x, idx = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        lo.call(INDEX_KERNELS[idx.dtype], [node.inputs[0], node.inputs[1], node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_gather_params",
                params={"outer": math.prod(x.shape[:-1]), "axis_dim": x.shape[-1], "inner": 1,
                        "n_indices": math.prod(idx.shape),
                        "elem_size": np.dtype(x.dtype).itemsize},
                returns_status=True)


@register("OneHotEncoder", domain=ML)
class OneHotEncoder(OpDef):
    """int64 X [...] -> float32 [..., categories]; an unknown value gives zeros (zeros=1) or
    fails the call (zeros=0, MLCC_ERR_INDEX_OUT_OF_RANGE), as onnxruntime."""
    attributes = {"cats_int64s": None, "cats_strings": None, "zeros": lambda v: v in (0, 1)}

    def check(self, node):
        problems = super().check(node) + strings_refused(node, ("cats_strings",))
        if not problems and not node.attr("cats_int64s"):
            problems.append("OneHotEncoder needs cats_int64s")
        return problems

    def infer(self, node, ins, g):
        require_dtype(node, [ins[0]], ["int64"])
        return [("float32", tuple(ins[0].shape) + (len(node.attr("cats_int64s")),))]

    def lower(self, node, lo):
        cats = [int(c) for c in node.attr("cats_int64s")]
        if len(set(cats)) != len(cats):
            raise ModelError(f"{describe(node)}: a category is listed twice in cats_int64s")
        x = lo.value(node.inputs[0])
        lo.call("mlcc_i64_one_hot_encoder",
                [node.inputs[0], lo.add_const(f"{node.name}.cats", np.array(cats, np.int64)),
                 node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_one_hot_encoder_params",
                params={"n": math.prod(x.shape), "n_cats": len(cats),
                        "zeros": int(node.attr("zeros", 1))}, returns_status=True)


@register("LabelEncoder", domain=ML, since=2)
class LabelEncoder(OpDef):
    """int64 or float32 keys to int64 or float32 values (opset 2's lists, opset 4's tensors);
    a value missing from the keys gives the default (default_int64 -1, default_float -0.0,
    or default_tensor). Keys are sorted at compile time and found by binary search; NaN
    matches no key (a NaN key is dropped), as in onnxruntime. String keys or values are
    refused."""
    attributes = {k: None for k in (
        "keys_int64s", "keys_floats", "keys_strings", "keys_tensor", "values_int64s",
        "values_floats", "values_strings", "values_tensor", "default_int64", "default_float",
        "default_string", "default_tensor")}

    def check(self, node):
        problems = super().check(node) + strings_refused(
            node, ("keys_strings", "values_strings"))
        for a in ("keys_tensor", "values_tensor", "default_tensor"):
            v = node.attr(a)
            if v is not None and np.asarray(v).dtype == object:
                problems += strings_refused(node, (a,))
            elif v is not None and np.asarray(v).dtype.name not in ("int64", "float32"):
                problems.append(f"attribute {a} of type {np.asarray(v).dtype} is not "
                                f"supported (int64 and float32 are)")
        return problems

    def table(self, node: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Keys (sorted), their values, and the default value."""
        keys = next((np.asarray(node.attr(a)) for a in ("keys_int64s", "keys_floats",
                                                          "keys_tensor")
                     if node.attr(a) is not None), None)
        values = next((np.asarray(node.attr(a)) for a in ("values_int64s", "values_floats",
                                                            "values_tensor")
                       if node.attr(a) is not None), None)
        if keys is None or values is None:
            raise ModelError("LabelEncoder needs keys and values")
        keys = keys.reshape(-1).astype(np.int64 if node.attr("keys_int64s") is not None
                                       else keys.dtype)
        if node.attr("keys_floats") is not None:
            keys = keys.astype(np.float32)
        values = values.reshape(-1)
        values = values.astype(np.float32 if node.attr("values_floats") is not None
                               else np.int64 if node.attr("values_int64s") is not None
                               else values.dtype)
        if len(keys) != len(values):
            raise ModelError(f"{len(keys)} keys for {len(values)} values")
        if keys.dtype == np.float32:        # NaN finds no key in onnxruntime's map
            keys, values = keys[~np.isnan(keys)], values[~np.isnan(keys)]
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
        same = keys[1:] == keys[:-1]
        if np.any(same):
            raise ModelError(f"the key {keys[1:][same][0]} is listed twice")
        if node.attr("default_tensor") is not None:
            default = np.asarray(node.attr("default_tensor")).reshape(-1)[:1]
        elif values.dtype == np.int64:
            default = np.array([node.attr("default_int64", -1)])
        else:
            default = np.array([node.attr("default_float", -0.0)])
        return keys, values, default.astype(values.dtype)

    def infer(self, node, ins, g):
        keys, values, _ = self.table(node)
        require_dtype(node, [ins[0]], [keys.dtype.name])
        return [(values.dtype.name, tuple(ins[0].shape))]

    def lower(self, node, lo):
        keys, values, default = self.table(node)
        x = lo.value(node.inputs[0])
        lo.call(f"mlcc_{'i64' if keys.dtype == np.int64 else 'f32'}_label_encoder",
                [node.inputs[0], lo.add_const(f"{node.name}.keys", keys),
                 lo.add_const(f"{node.name}.values", values),
                 lo.add_const(f"{node.name}.default", default), node.outputs[0]],
                [node.outputs[0]], params_type="mlcc_label_encoder_params",
                params={"n": math.prod(x.shape), "n_keys": len(keys),
                        "value_size": values.dtype.itemsize})


SVM_BLOCK = 16         # MLCC_SVM_BLOCK (ml.h): support vectors per feature-major block
SVM_SLICES = 4         # MLCC_SVM_SLICES (ml.h): threads that share an SVM (scratch slices)


def svm_blocks(sv: np.ndarray, vectors: int, features: int) -> np.ndarray:
    """The support vectors [vectors, features] as the kernels read them (ml.h): blocks of
    SVM_BLOCK vectors, each feature-major, zeros past the last vector."""
    blocks = -(-vectors // SVM_BLOCK)
    out = np.zeros((blocks * SVM_BLOCK, features), np.float32)
    out[:vectors] = sv.reshape(vectors, features)
    return np.ascontiguousarray(out.reshape(blocks, SVM_BLOCK, features).transpose(0, 2, 1))


SVM_KERNELS = {"LINEAR": "MLCC_SVM_LINEAR", "POLY": "MLCC_SVM_POLY", "RBF": "MLCC_SVM_RBF",
               "SIGMOID": "MLCC_SVM_SIGMOID"}


@register("SVMRegressor", domain=ML)
class SVMRegressor(OpDef):
    """Y [N, 1] from X [N, F] float32: support vectors with a LINEAR, POLY, RBF or SIGMOID
    kernel, or liblinear's coefficients (n_supports 0); one_class gives +-1. onnxruntime
    ignores post_transform here: any other than NONE is refused."""
    attributes = {"coefficients": None, "kernel_params": None, "n_supports": lambda v: v >= 0,
                  "one_class": lambda v: v in (0, 1), "rho": None, "support_vectors": None,
                  "kernel_type": lambda v: text(v) in SVM_KERNELS,
                  "post_transform": lambda v: text(v) == "NONE"}

    def infer(self, node, ins, g):
        rows, _ = rows_features(node, ins[0])
        return [("float32", (rows, 1))]

    def lower(self, node, lo):
        rows, features = rows_features(node, lo.value(node.inputs[0]))
        coef = floats(node, "coefficients")
        vectors = int(node.attr("n_supports", 0))
        rho = floats(node, "rho", [0.0])
        params = [float(v) for v in (node.attr("kernel_params") or [0.0, 0.0, 0.0])][:3]
        kernel = text(node.attr("kernel_type", "LINEAR")) if vectors else "LINEAR"
        if vectors:
            sv = floats(node, "support_vectors")
            if sv.size != vectors * features or coef.size != vectors:
                raise ModelError(f"{describe(node)}: {sv.size} support vector values and "
                                 f"{coef.size} coefficients for {vectors} vectors of "
                                 f"{features} features")
        else:
            sv = np.zeros(1, np.float32)
            if coef.size != features:
                raise ModelError(f"{describe(node)}: {coef.size} coefficients for {features} "
                                 f"features")
        if len(params) != 3:
            raise ModelError(f"{describe(node)}: kernel_params needs gamma, coef0, degree")
        if vectors:
            sv = svm_blocks(sv, vectors, features)
        lo.call("mlcc_f32_svm_regressor",
                [node.inputs[0], lo.add_const(f"{node.name}.sv", sv),
                 lo.add_const(f"{node.name}.coef", coef), node.outputs[0]], [node.outputs[0]],
                pool=True, params_type="mlcc_svm_params",
                params={"rows": rows, "features": features, "vectors": vectors,
                        "kernel": Enum(SVM_KERNELS[kernel]),
                        "one_class": int(node.attr("one_class", 0)), "gamma": params[0],
                        "coef0": params[1], "degree": params[2], "rho": float(rho[0])})


@register("SVMClassifier", domain=ML)
class SVMClassifier(OpDef):
    """Y [N] int64 labels and Z scores from X [N, F] float32, without probabilities (prob_a,
    prob_b refused): libsvm's one-vs-one decision values (Z [N, C(C-1)/2], or [N, 2] for two
    classes) and votes, or liblinear's per-class scores (no support vectors, Z [N, C])."""
    attributes = {"classlabels_ints": None, "classlabels_strings": None, "coefficients": None,
                  "kernel_params": None, "kernel_type": lambda v: text(v) in SVM_KERNELS,
                  "post_transform": lambda v: text(v) in POST_TRANSFORMS, "rho": None,
                  "support_vectors": None, "vectors_per_class": None}

    def check(self, node):
        problems = super().check(node) + strings_refused(node, ("classlabels_strings",))
        for a in ("prob_a", "prob_b"):
            if node.attr(a) is not None:
                problems.append(f"attribute {a} (probability estimates: libsvm's pairwise "
                                f"coupling) is not supported; convert without probability=True")
        labels = node.attr("classlabels_ints") or []
        if len(labels) < 2 and node.attr("classlabels_strings") is None:
            problems.append("SVMClassifier needs classlabels_ints of two classes or more")
        if len(labels) == 2 and sum(node.attr("vectors_per_class") or []) > 0 and \
                post_transform(node) not in ("NONE", "LOGISTIC"):
            problems.append(f"post_transform {post_transform(node)} of a two-class SVM is not "
                            f"supported")
        return problems

    def shape(self, node: Node) -> tuple[int, int, int]:
        """Classes, support vectors, score columns."""
        classes = len(node.attr("classlabels_ints"))
        vectors = int(sum(node.attr("vectors_per_class") or []))
        width = (classes * (classes - 1) // 2 if classes > 2 else 2) if vectors else classes
        return classes, vectors, width

    def infer(self, node, ins, g):
        rows, _ = rows_features(node, ins[0])
        return [("int64", (rows,)), ("float32", (rows, self.shape(node)[2]))]

    def lower(self, node, lo):
        rows, features = rows_features(node, lo.value(node.inputs[0]))
        classes, vectors, _ = self.shape(node)
        coef, rho = floats(node, "coefficients"), floats(node, "rho", [0.0])
        pairs = classes * (classes - 1) // 2
        if vectors:
            sv = floats(node, "support_vectors")
            if sv.size != vectors * features or coef.size != (classes - 1) * vectors or \
                    rho.size != pairs or len(node.attr("vectors_per_class")) != classes:
                raise ModelError(f"{describe(node)}: support vectors, coefficients, rho or "
                                 f"vectors_per_class do not fit {classes} classes, {vectors} "
                                 f"vectors of {features} features")
        else:
            sv = np.zeros(1, np.float32)
            if coef.size != classes * features:
                raise ModelError(f"{describe(node)}: {coef.size} coefficients for {classes} "
                                 f"classes of {features} features")
        params = [float(v) for v in (node.attr("kernel_params") or [0.0, 0.0, 0.0])][:3]
        if len(params) != 3:
            raise ModelError(f"{describe(node)}: kernel_params needs gamma, coef0, degree")
        kernel = text(node.attr("kernel_type", "LINEAR")) if vectors else "LINEAR"
        per_class = np.array(node.attr("vectors_per_class") or [0], np.int64)
        name = node.name
        if vectors:
            sv = svm_blocks(sv, vectors, features)
        # per thread that may share it (one without threads): the kernel values of a row
        # (whole blocks) and a vote per class (mlcc_svm_slice_bytes)
        slices = SVM_SLICES if lo.options.get("threads", True) else 1
        slice_bytes = 4 * max(1, -(-vectors // SVM_BLOCK)) * SVM_BLOCK + 8 * classes
        lo.call("mlcc_f32_svm_classifier",
                [node.inputs[0], lo.add_const(f"{name}.sv", sv),
                 lo.add_const(f"{name}.coef", coef), lo.add_const(f"{name}.rho", rho),
                 lo.add_const(f"{name}.per_class", per_class),
                 lo.add_const(f"{name}.labels", np.array(node.attr("classlabels_ints"),
                                                         np.int64)),
                 *node.outputs], list(node.outputs),
                params_type="mlcc_svm_classifier_params",
                params={"svm": {"rows": rows, "features": features, "vectors": vectors,
                                "kernel": Enum(SVM_KERNELS[kernel]), "one_class": 0,
                                "gamma": params[0], "coef0": params[1], "degree": params[2],
                                "rho": float(rho[0])},
                        "classes": classes,
                        "post": Enum(POST_TRANSFORMS[post_transform(node)]),
                        "all_positive": int(bool(np.all(coef >= 0)))},
                scratch_bytes=slices * slice_bytes, pool=True)


@register("FeatureVectorizer", domain=ML)
class FeatureVectorizer(OpDef):
    """Y [N, sum(inputdimensions)]: input i ([N, C_i] or [C_i]) gives inputdimensions[i]
    columns, its first ones (extra columns dropped, missing ones 0), as onnxruntime; float32
    inputs (other types are refused), on the strided copy kernel."""
    attributes = {"inputdimensions": lambda v: len(v) > 0 and min(v) >= 0}

    def infer(self, node, ins, g):
        require_dtype(node, ins, ["float32"])
        dims = [int(d) for d in node.attr("inputdimensions") or []]
        if len(dims) != len(ins):
            raise ModelError(f"{len(ins)} inputs for {len(dims)} inputdimensions")
        rows = {x.shape[0] if len(x.shape) > 1 else 1 for x in ins}
        if len(rows) != 1 or any(len(x.shape) == 0 for x in ins):
            raise ModelError(f"inputs of different batch sizes "
                             f"({', '.join(str(list(x.shape)) for x in ins)})")
        return [("float32", (rows.pop(), sum(dims)))]

    def lower(self, node, lo):
        y = lo.value(node.outputs[0])
        rows, total = y.shape
        dims = [int(d) for d in node.attr("inputdimensions")]
        offset = 0
        for name, d in zip(node.inputs, dims):
            x = lo.value(name)
            cols = math.prod(x.shape[1:]) if len(x.shape) > 1 else x.shape[0]
            take = min(cols, d)
            if take:
                emit_copy(lo, name, node.outputs[0], [rows, take], [cols, 1], [total, 1],
                          dst_offset=offset, op="FeatureVectorizer")
            if d > take:        # columns the input does not have: zeros
                zero = lo.add_const(f"{node.name}.zero", np.zeros(1, np.float32))
                emit_copy(lo, zero, node.outputs[0], [rows, d - take], [0, 0], [total, 1],
                          dst_offset=offset + take, op="FeatureVectorizer")
            offset += d
