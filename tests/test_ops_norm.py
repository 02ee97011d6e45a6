"""BatchNormalization (standalone), LRN, InstanceNormalization, LayerNormalization,
GroupNormalization, MeanVarianceNormalization, RMSNormalization and LpNormalization against
onnxruntime (onnx.reference where onnxruntime lacks the opset) on odd shapes."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc.errors import UnsupportedError
from util import (check_model, check_node, compile_and_run, make_model, rand,
                  reference_outputs, run_same_bits_on_threads)


def _bn_params(c, seed=1):
    return {"scale": rand(c, seed=seed), "B": rand(c, seed=seed + 1),
            "mean": rand(c, seed=seed + 2), "var": rand(c, seed=seed + 3, low=0.2, high=2.0)}


@pytest.mark.parametrize("shape,opset", [((3, 7), 15), ((2, 5, 13), 15), ((2, 3, 7, 11), 9),
                                         ((1, 4, 3, 5, 6), 14), ((2, 6, 5, 5), 7)])
def test_batchnorm(tmp_path, shape, opset):
    check_node("BatchNormalization", {"x": rand(*shape)}, initializers=_bn_params(shape[1]),
               tmp_path=tmp_path, opset=opset, epsilon=1e-3)


def test_batchnorm_spatial0_opset7(tmp_path):
    """spatial=0: statistics per (channel, position), an affine map per element."""
    shape = (2, 3, 4, 5)
    params = {"scale": rand(3, 4, 5, seed=1), "B": rand(3, 4, 5, seed=2),
              "mean": rand(3, 4, 5, seed=3), "var": rand(3, 4, 5, seed=4, low=0.2, high=2.0)}
    check_node("BatchNormalization", {"x": rand(*shape)}, initializers=params,
               tmp_path=tmp_path, opset=7, spatial=0)


def test_batchnorm_not_after_conv(tmp_path):
    """A BatchNormalization after an Add has no Conv to fold into: it runs on its own kernel."""
    x, z = rand(1, 4, 6, 7), rand(1, 4, 6, 7, seed=9)
    inits = _bn_params(4)
    nodes = [helper.make_node("Add", ["x", "z"], ["s"]),
             helper.make_node("BatchNormalization", ["s", *inits], ["y"])]
    check_model(make_model(nodes, {"x": x, "z": z}, ["y"], initializers=inits),
                {"x": x, "z": z}, tmp_path)


def test_batchnorm_training_mode_after_conv_is_not_folded(tmp_path):
    """A training-mode BatchNormalization behind a Conv normalizes by the batch's statistics:
    fold_batchnorm must leave it alone."""
    from onnx.reference import ReferenceEvaluator
    inits = {"w": rand(3, 2, 3, 3, seed=5), **_bn_params(3)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", *list(inits)[1:]], ["y"], name="bn",
                              training_mode=1)]
    x = rand(2, 2, 5, 7)
    model = make_model(nodes, {"x": x}, [], initializers=inits, opset=15)
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                            [2, 3, 5, 7]))
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


def test_batchnorm_refuses_runtime_statistics(tmp_path):
    p = _bn_params(3)
    with pytest.raises(UnsupportedError, match="batchnormalization_node.*must be a constant"):
        check_node("BatchNormalization", {"x": rand(2, 3, 4), "scale": p["scale"],
                                          "B": p["B"], "mean": p["mean"]},
                   initializers={"var": p["var"]}, tmp_path=tmp_path, opset=15)


@pytest.mark.parametrize("shape,size,alpha,beta,bias", [
    ((1, 7, 5, 5), 3, 1e-4, 0.75, 1.0),
    ((2, 16, 9, 11), 5, 2e-3, 0.6, 2.0),
    ((1, 3, 2, 2), 9, 0.3, 0.75, 1.0),         # window wider than the channels
])
def test_lrn(tmp_path, shape, size, alpha, beta, bias):
    check_node("LRN", {"x": rand(*shape) * 3.0}, tmp_path=tmp_path, size=size, alpha=alpha,
               beta=beta, bias=bias)


def _lrn_spec(x, size, alpha, beta, bias):
    """The ONNX spec formula (onnxruntime takes only 4-D and odd sizes; onnx.reference's LRN
    loops over the batch axis instead of the channels)."""
    c = x.shape[1]
    sq = np.zeros(x.shape, np.float64)
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + -(-(size - 1) // 2))
        sq[:, ch] = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
    return (x / (bias + alpha / size * sq) ** beta).astype(np.float32)


@pytest.mark.parametrize("shape,size", [((1, 6, 4, 3), 4),     # even: one more channel after
                                        ((2, 5, 13), 3),       # 3-D input
                                        ((1, 7, 2, 3, 2), 2)])  # 5-D input
def test_lrn_against_spec(tmp_path, shape, size):
    x = rand(*shape) * 3.0
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.5, beta=0.9, bias=1.5)
    got = compile_and_run(make_model([node], {"x": x}, ["y"]), {"x": x}, tmp_path)["y"]
    np.testing.assert_allclose(got, _lrn_spec(x, size, 0.5, 0.9, 1.5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beta", [0.75, 0.6])
def test_lrn_threads_same_bits(tmp_path, beta):
    """Above the threading threshold the (batch, channel) planes are cut into ranges between
    threads: 1, 2 and 3 threads give the same bits, within 2e-6 relative of the spec formula
    in float64 (beta 0.75 by square roots, others by powf) on a wide range of sums."""
    x = rand(2, 29, 23, 31, seed=3) * 10.0
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=2e-3, beta=beta, bias=1.0)
    got = run_same_bits_on_threads(make_model([node], {"x": x}, ["y"]), {"x": x}, tmp_path)
    np.testing.assert_allclose(got["y"], _lrn_spec(x.astype(np.float64), 5, 2e-3, beta, 1.0),
                               rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("op,attrs,extra", [
    ("LayerNormalization", {"axis": -1}, {"scale": (97,), "bias": (97,)}),
    ("LayerNormalization", {"axis": 1}, {"scale": (29, 23, 97)}),     # one row per batch
    ("RMSNormalization", {"axis": -1}, {"scale": (97,)}),
    ("GroupNormalization", {"num_groups": 29}, {"scale": (29,), "bias": (29,)}),
    ("InstanceNormalization", {}, {"scale": (29,), "bias": (29,)}),
    ("BatchNormalization", {}, {"scale": (29,), "bias": (29,), "mean": (29,), "var": (29,)})])
def test_normalizations_threads_same_bits(tmp_path, op, attrs, extra):
    """Above the threading threshold the rows (a row, channel or group normalized whole)
    are cut into ranges between threads: 1, 2 and 3 threads give the same bits, onnxruntime's
    values. [3, 29, 23, 97]: 194,097 values, odd counts of rows per range."""
    x = rand(3, 29, 23, 97, seed=11) * 4.0 + 1.0
    inits = {k: (rand(*shape, seed=len(k)) + (2.0 if k == "var" else 0.0))
             for k, shape in extra.items()}
    opset = {"RMSNormalization": 23, "GroupNormalization": 21}.get(op, 17)
    model = _typed_model(op, x.shape, inits, False, opset, **attrs)
    got = run_same_bits_on_threads(model, {"x": x}, tmp_path)
    ref = reference_outputs(model, {"x": x})["y"]   # onnx.reference where onnxruntime has none
    np.testing.assert_allclose(got["y"], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(2, 3, 7, 11), (1, 4, 50), (2, 3, 3, 4, 5), (1, 2, 4099)])
def test_instance_norm(tmp_path, shape):
    c = shape[1]
    check_node("InstanceNormalization", {"x": rand(*shape) * 2.0 + 5.0},
               initializers={"scale": rand(c, seed=1), "B": rand(c, seed=2)},
               tmp_path=tmp_path, epsilon=1e-4)


def test_instance_norm_runtime_scale(tmp_path):
    check_node("InstanceNormalization", {"x": rand(2, 3, 5, 4), "scale": rand(3, seed=1),
                                         "B": rand(3, seed=2)}, tmp_path=tmp_path)


@pytest.mark.parametrize("shape,axis,scale_shape,bias", [
    ((3, 7, 33), -1, (33,), True),
    ((2, 3, 5, 7), 1, (3, 5, 7), True),
    ((2, 3, 5, 7), -2, (5, 7), False),        # no bias
    ((4, 4099), -1, (4099,), True),           # long rows
    ((2, 5, 6), 0, (2, 5, 6), True),          # whole tensor
    ((3, 5, 6), 1, (1, 6), True),             # scale broadcast over axis 1
])
def test_layer_norm(tmp_path, shape, axis, scale_shape, bias):
    inits = {"scale": rand(*scale_shape, seed=1)}
    if bias:
        inits["B"] = rand(*scale_shape, seed=2)
    check_node("LayerNormalization", {"x": rand(*shape) + 3.0}, initializers=inits,
               tmp_path=tmp_path, axis=axis, epsilon=1e-5)


def test_layer_norm_runtime_scale_broadcast(tmp_path):
    check_node("LayerNormalization", {"x": rand(2, 3, 5, 7), "scale": rand(5, 1, seed=1),
                                      "B": rand(7, seed=2)}, tmp_path=tmp_path, axis=-2)


def test_layer_norm_large_mean(tmp_path):
    """Mean 1000, spread 1: E[x^2] - E[x]^2 would lose all digits in float."""
    check_node("LayerNormalization", {"x": rand(3, 257) + 1000.0},
               initializers={"scale": rand(257, seed=1), "B": rand(257, seed=2)},
               tmp_path=tmp_path)


@pytest.mark.parametrize("n_outputs,axis", [(2, -1), (3, 1), (3, -2)])
def test_layer_norm_mean_and_inv_std_outputs(tmp_path, n_outputs, axis):
    check_node("LayerNormalization", {"x": rand(3, 5, 7)},
               initializers={"scale": rand(*(5, 7)[axis + 3 - 1 if axis < 0 else axis - 1:],
                                           seed=1)},
               tmp_path=tmp_path, n_outputs=n_outputs, axis=axis)


def test_lrn_folds_with_the_spec_formula(tmp_path):
    """An LRN of a constant folds at compile time (not through onnx.reference's LRN)."""
    c = (rand(2, 5, 3, 3) * 3.0).astype(np.float32)
    x = rand(2, 5, 3, 3, seed=7)
    nodes = [helper.make_node("LRN", ["c"], ["l"], size=3, alpha=0.5, beta=0.9, bias=1.5),
             helper.make_node("Add", ["x", "l"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], initializers={"c": c})
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_allclose(got, x + _lrn_spec(c, 3, 0.5, 0.9, 1.5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,outputs", [((3, 5, 7, 2), 3), ((2, 4, 9), 1), ((5, 3), 3)])
def test_batchnorm_training_mode(tmp_path, shape, outputs):
    """Batch statistics at run time, with scale, B, mean and var as run-time inputs, and the
    running statistics, against onnx.reference (onnxruntime's CPU build has no training
    mode)."""
    from onnx.reference import ReferenceEvaluator
    c = shape[1]
    feeds = {"x": rand(*shape, low=-2, high=3), "s": rand(c, seed=1), "b": rand(c, seed=2),
             "m": rand(c, seed=3), "v": rand(c, seed=4, low=0.5, high=2)}
    outs = ["y", "rm", "rv"][:outputs]
    node = helper.make_node("BatchNormalization", list(feeds), outs, training_mode=1,
                            momentum=0.7, epsilon=1e-3)
    model = make_model([node], feeds, [], opset=15)   # ONNX cannot type y alone in training
    model.graph.output.extend(
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))] +
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [c]) for o in outs[1:]])
    got = compile_and_run(model, feeds, tmp_path)
    want = ReferenceEvaluator(model).run(None, feeds)
    for name, w in zip(outs, want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)


def _typed_model(op_type, shape, params, runtime_params, opset, **attrs):
    """One node whose output the model types (ONNX shape inference does not type
    GroupNormalization's output, nor MeanVarianceNormalization's with default axes)."""
    node = helper.make_node(op_type, ["x", *params], ["y"], name=f"{op_type.lower()}_node",
                            **attrs)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    if runtime_params:
        ins += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                for k, v in params.items()]
    graph = helper.make_graph(
        [node], "gn", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        [] if runtime_params else [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _group_norm_ref(x, scale, bias, groups, eps):
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, -1).astype(np.float64)
    xh = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps))
    xh = xh.reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return (xh * scale.reshape(bshape) + bias.reshape(bshape)).astype(np.float32)


@pytest.mark.parametrize("shape,groups", [
    ((2, 6, 7, 5), 3), ((3, 5, 11), 5), ((1, 7, 3, 3, 2), 1), ((2, 4), 2), ((3, 9, 13), 3)])
@pytest.mark.parametrize("runtime_params", [False, True])
def test_group_norm(tmp_path, shape, groups, runtime_params):
    """Opset 21 (scale and bias per channel), against the reference and a float64 formula."""
    x = rand(*shape) * 3 + 1
    opset = 21
    params = {"scale": rand(shape[1], seed=1), "bias": rand(shape[1], seed=2)}
    got = check_model(_typed_model("GroupNormalization", shape, params, runtime_params, opset,
                                        num_groups=groups, epsilon=1e-3),
                      {"x": x, **params} if runtime_params else {"x": x}, tmp_path)["y"]
    want = _group_norm_ref(x, params["scale"], params["bias"], groups, 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_group_norm_refuses_indivisible_groups(tmp_path):
    model = _typed_model("GroupNormalization", (2, 5, 3), {"scale": rand(5), "bias": rand(5)}, False, 21,
                              num_groups=2)
    with pytest.raises(mlcc.errors.ModelError, match="not divisible into 2 groups"):
        compile_and_run(model, {"x": rand(2, 5, 3)}, tmp_path)


def test_group_norm_refuses_stash_type(tmp_path):
    model = _typed_model("GroupNormalization", (2, 4, 3), {"scale": rand(4), "bias": rand(4)}, False, 21,
                              num_groups=2, stash_type=10)
    with pytest.raises(UnsupportedError, match="groupnormalization_node.*stash_type"):
        compile_and_run(model, {"x": rand(2, 4, 3)}, tmp_path)


@pytest.mark.parametrize("shape,axes", [
    ((2, 3, 5, 7), None), ((3, 5, 7), [0, 2]), ((3, 5, 7), [-1]), ((2, 3, 5, 7), [1]),
    ((2, 3, 5, 7), [1, 3]), ((4, 13), [0, 1]), ((2, 3, 5, 7), [0, 1, 2, 3])])
def test_mean_variance_normalization(tmp_path, shape, axes):
    attrs = {} if axes is None else {"axes": axes}
    model = _typed_model("MeanVarianceNormalization", shape, {}, False, 13, **attrs)
    check_model(model, {"x": rand(*shape) * 2 - 1}, tmp_path)


def test_mean_variance_normalization_large_mean(tmp_path):
    """Rows far from zero: mlcc's two-pass variance against a float64 formula (onnxruntime's
    E[x^2] - E[x]^2 loses most digits here)."""
    x = (rand(3, 4, 37) * 0.1 + 100).astype(np.float32)
    model = _typed_model("MeanVarianceNormalization", x.shape, {}, False, 13, axes=[0, 2])
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=(0, 2), keepdims=True)
    want = (x64 - mean) / (np.sqrt(((x64 - mean) ** 2).mean(axis=(0, 2), keepdims=True)) + 1e-9)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3)


@pytest.mark.parametrize("shape,axis,scale_shape", [
    ((3, 7), -1, (7,)), ((2, 5, 13), -1, (13,)), ((2, 5, 13), 1, (5, 13)),
    ((2, 5, 13), 1, (1, 13)), ((2, 3, 5, 7), -3, (3, 1, 7)), ((5, 11), 0, (5, 11))])
@pytest.mark.parametrize("runtime_scale", [False, True])
def test_rms_norm(tmp_path, shape, axis, scale_shape, runtime_scale):
    x = rand(*shape) * 2 + 0.5
    scale = {"scale": rand(*scale_shape, seed=3)}
    check_node("RMSNormalization", {"x": x, **scale} if runtime_scale else {"x": x},
               initializers={} if runtime_scale else scale, tmp_path=tmp_path, opset=23,
               axis=axis, epsilon=1e-4)


def test_rms_norm_refuses_stash_type(tmp_path):
    with pytest.raises(UnsupportedError, match="rmsnormalization_node.*stash_type"):
        check_node("RMSNormalization", {"x": rand(2, 3)}, initializers={"scale": rand(3)},
                   tmp_path=tmp_path, opset=23, stash_type=11)


@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((2, 5, 13), 1), ((2, 5, 13), 0),
                                        ((2, 3, 5, 7), -2), ((17,), 0)])
@pytest.mark.parametrize("p", [1, 2])
def test_lp_norm(tmp_path, shape, axis, p):
    check_node("LpNormalization", {"x": rand(*shape)}, tmp_path=tmp_path, opset=13, axis=axis,
               p=p)


def test_lp_norm_zero_vector(tmp_path):
    x = rand(3, 5)
    x[1] = 0
    got = check_node("LpNormalization", {"x": x}, tmp_path=tmp_path, opset=13, axis=1,
                     p=2)["y0"]
    assert np.all(got[1] == 0)


def test_lp_norm_refuses_p3(tmp_path):
    with pytest.raises(UnsupportedError, match="lpnormalization_node.*p"):
        check_node("LpNormalization", {"x": rand(3, 5)}, tmp_path=tmp_path, opset=13, p=3)
