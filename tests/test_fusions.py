"""Fusion passes: SiLU into the producer's epilogue (fuse_silu + fuse_activations), constant
bias Adds into Conv/ConvTranspose/Gemm (fold_bias_add), BatchNormalization into ConvTranspose
(fold_batchnorm). Each case checks the graph after the pipeline and the numbers against
onnxruntime; the SiLU kernels run at vector widths 128 (x86) and 512 (x86-native) with tails."""
import numpy as np
import onnx
import pytest
from onnx import helper

from mlcc.frontend import import_model
from mlcc.passes import (PIPELINE, fold_batchnorm, fold_bias_add, fuse_silu, run_pipeline)
from util import check_model, make_model, rand

TARGETS = ["x86", "x86-native"]


def _graph(model, tmp_path):
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    return run_pipeline(import_model(path))


def _ops(g):
    """'Op+Fused+...' per node, in order."""
    return ["+".join([n.op_type] + [f.split(":")[-1] for f in n.fused]) for n in g.nodes]


def _conv(name, x, w, y, b=None, **attrs):
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [y], name=name, **attrs)


def _silu(x, y, tag="", swap=False):
    s = f"{x}_sig{tag}"
    return [helper.make_node("Sigmoid", [x], [s], name=f"sig{tag}"),
            helper.make_node("Mul", [s, x] if swap else [x, s], [y], name=f"mul{tag}")]


# --------------------------------------------------------------------------------- SiLU

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("swap", [False, True])
def test_silu_fuses_into_conv(tmp_path, target, swap):
    # 7x5 outputs: rows of 35 values, not a multiple of any vector width (tails)
    x = rand(1, 3, 9, 7)
    nodes = [_conv("conv", "x", "w", "c", "b", pads=[0, 0, 0, 0])] + _silu("c", "y", swap=swap)
    model = make_model(nodes, {"x": x}, ["y"], initializers={
        "w": rand(5, 3, 3, 3, seed=1) * 2, "b": rand(5, seed=2)})
    g = _graph(model, tmp_path)
    assert _ops(g) == ["Conv+Sigmoid+Swish"]
    assert g.nodes[0].attrs["_act"] == ("SILU", 1.0, 0.0)
    assert g.nodes[0].fused == ["sig:Sigmoid", "mul:Swish"]
    check_model(model, {"x": x}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_silu_fuses_into_gemm_matmul_and_conv_transpose(tmp_path, target):
    x = rand(3, 19)
    nodes = ([helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="fc1", transB=1)]
             + _silu("h1", "a1", "1")
             + [helper.make_node("MatMul", ["a1", "w2"], ["h2"], name="mm")]
             + _silu("h2", "a2", "2", swap=True)
             + [helper.make_node("Reshape", ["a2", "shape"], ["r"], name="reshape"),
                helper.make_node("ConvTranspose", ["r", "w3"], ["h3"], name="up", strides=[2, 2])]
             + _silu("h3", "y", "3"))
    inits = {"w1": rand(23, 19, seed=1), "b1": rand(23, seed=2), "w2": rand(23, 12, seed=3),
             "shape": np.array([3, 3, 2, 2], np.int64), "w3": rand(3, 4, 3, 3, seed=4)}
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    g = _graph(model, tmp_path)
    assert _ops(g) == ["Gemm+Sigmoid+Swish", "MatMul+Sigmoid+Swish", "Reshape",
                       "ConvTranspose+Sigmoid+Swish"]
    check_model(model, {"x": x}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_standalone_silu_is_one_swish_kernel(tmp_path, target):
    # extremes: exp clamping, signed zeros, NaN; 101 values (vector tails)
    x = np.concatenate([np.linspace(-120, 120, 95), [0.0, -0.0, 1e-30, -1e-30, 88.5, np.nan]]
                       ).astype(np.float32).reshape(1, 101)
    model = make_model(_silu("x", "y"), {"x": x}, ["y"])
    g = _graph(model, tmp_path)
    assert _ops(g) == ["Swish+Sigmoid"]
    check_model(model, {"x": x}, tmp_path, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_sigmoid_kernel_over_its_whole_range(tmp_path, target):
    x = np.concatenate([np.linspace(-100, 100, 2001), [np.nan, 0.0, -0.0]]).astype(np.float32)
    model = make_model([helper.make_node("Sigmoid", ["x"], ["y"], name="s")], {"x": x}, ["y"])
    got = check_model(model, {"x": x}, tmp_path, target=target)["y"]
    ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    finite = ~np.isnan(x)
    assert np.max(np.abs(got[finite] - ref[finite])) < 2e-7 and np.isnan(got[~finite]).all()


def test_swish_operator(tmp_path):
    x = rand(2, 3, 17)
    model = make_model([helper.make_node("Swish", ["x"], ["y"], name="sw", alpha=0.7)],
                       {"x": x}, ["y"], opset=24)
    check_model(model, {"x": x}, tmp_path)


def test_sigmoid_with_another_reader_is_not_fused(tmp_path):
    x = rand(1, 2, 5, 5)
    nodes = [_conv("conv", "x", "w", "c")] + _silu("c", "y") + [
        helper.make_node("Relu", ["c_sig"], ["z"], name="other")]
    model = make_model(nodes, {"x": x}, ["y", "z"], initializers={"w": rand(4, 2, 1, 1)})
    g = _graph(model, tmp_path)
    assert sorted(_ops(g)) == ["Conv", "Mul", "Relu", "Sigmoid"]
    check_model(model, {"x": x}, tmp_path)


def test_silu_of_another_value_is_not_fused(tmp_path):
    # Mul(a, Sigmoid(b)) with a != b is a gate, not a SiLU
    a, b = rand(2, 7), rand(2, 7, seed=1)
    nodes = [helper.make_node("Sigmoid", ["b"], ["s"], name="sig"),
             helper.make_node("Mul", ["a", "s"], ["y"], name="gate")]
    model = make_model(nodes, {"a": a, "b": b}, ["y"])
    assert _ops(_graph(model, tmp_path)) == ["Sigmoid", "Mul"]


# --------------------------------------------------------------------------------- bias Add

@pytest.mark.parametrize("bias", [None, "b"])
@pytest.mark.parametrize("d_shape", [(1, 5, 1, 1), (5, 1, 1), (1, 1, 1, 1), (1,), ()])
def test_channel_constant_add_folds_into_conv(tmp_path, bias, d_shape):
    x = rand(2, 3, 8, 6)
    d = (rand(*d_shape, seed=3) if d_shape else np.float32(0.37) * np.ones((), np.float32))
    nodes = [_conv("conv", "x", "w", "c", bias, pads=[1, 0, 0, 1], strides=[2, 1]),
             helper.make_node("Add", ["c", "d"] if d_shape != (1,) else ["d", "c"], ["a"],
                              name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    inits = {"w": rand(5, 3, 3, 2, seed=1), "d": d}
    if bias:
        inits["b"] = rand(5, seed=2)
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    g = _graph(model, tmp_path)
    assert _ops(g) == ["Conv+Add+Relu"]
    check_model(model, {"x": x}, tmp_path)


def test_sub_folds_and_chains_of_adds_fold(tmp_path):
    x = rand(1, 3, 5, 5)
    nodes = [_conv("conv", "x", "w", "c", "b"),
             helper.make_node("Sub", ["c", "d1"], ["s"], name="sub"),
             helper.make_node("Add", ["s", "d2"], ["y"], name="add")]
    model = make_model(nodes, {"x": x}, ["y"], initializers={
        "w": rand(4, 3, 1, 1), "b": rand(4, seed=1), "d1": rand(4, 1, 1, seed=2),
        "d2": rand(1, 4, 1, 1, seed=3)})
    assert _ops(_graph(model, tmp_path)) == ["Conv+Sub+Add"]
    check_model(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("c_shape,beta,d_shape", [
    (None, 1.0, (7,)), ((7,), 0.5, (1, 7)), ((3, 1), 2.0, (3, 7)), (None, 1.0, ())])
def test_constant_add_folds_into_gemm(tmp_path, c_shape, beta, d_shape):
    x = rand(3, 11)
    inits = {"w": rand(7, 11, seed=1), "d": rand(*d_shape, seed=2) if d_shape
             else np.array(1.5, np.float32)}
    ins = ["x", "w"]
    if c_shape:
        inits["c"] = rand(*c_shape, seed=3)
        ins.append("c")
    nodes = [helper.make_node("Gemm", ins, ["h"], name="fc", transB=1, beta=beta),
             helper.make_node("Add", ["h", "d"], ["y"], name="add")]
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    g = _graph(model, tmp_path)
    assert _ops(g) == ["Gemm+Add"] and g.nodes[0].attr("beta", 1.0) == 1.0
    check_model(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("case", ["spatial", "broadcasts_larger", "second_reader",
                                  "runtime_operand", "sub_reversed"])
def test_adds_that_are_not_biases_stay(tmp_path, case):
    x = rand(1, 2, 4, 6)
    inits = {"w": rand(3, 2, 1, 1)}
    inputs = {"x": x}
    outputs = ["y"]
    nodes = [_conv("conv", "x", "w", "c")]
    if case == "spatial":            # varies along H and W: not one value per channel
        inits["d"] = rand(1, 1, 4, 6, seed=1)
        nodes.append(helper.make_node("Add", ["c", "d"], ["y"], name="add"))
    elif case == "broadcasts_larger":
        inits["d"] = rand(2, 3, 1, 1, seed=1)
        nodes.append(helper.make_node("Add", ["c", "d"], ["y"], name="add"))
    elif case == "second_reader":
        inits["d"] = rand(3, 1, 1, seed=1)
        nodes += [helper.make_node("Add", ["c", "d"], ["y"], name="add"),
                  helper.make_node("Relu", ["c"], ["z"], name="relu")]
        outputs.append("z")
    elif case == "runtime_operand":
        inputs["e"] = rand(1, 3, 1, 1, seed=2)
        nodes.append(helper.make_node("Add", ["c", "e"], ["y"], name="add"))
    else:                            # d - conv(x) negates the convolution
        inits["d"] = rand(3, 1, 1, seed=1)
        nodes.append(helper.make_node("Sub", ["d", "c"], ["y"], name="sub"))
    model = make_model(nodes, inputs, outputs, initializers=inits)
    ops = _ops(_graph(model, tmp_path))
    assert "Conv" in ops and ("Add" in ops or "Sub" in ops)
    check_model(model, inputs, tmp_path)


# --------------------------------------------------------------------------------- ConvTranspose

def _bn_inits(m, seed):
    rng = np.random.default_rng(seed)
    return {"gamma": rng.uniform(0.5, 1.5, m).astype(np.float32),
            "beta": rng.uniform(-0.3, 0.3, m).astype(np.float32),
            "mean": rng.uniform(-0.2, 0.2, m).astype(np.float32),
            "var": rng.uniform(0.5, 1.5, m).astype(np.float32)}


@pytest.mark.parametrize("group,bias,act", [(1, False, "Relu"), (2, False, "Sigmoid"),
                                            (3, True, "Relu")])
def test_conv_transpose_add_batchnorm_activation_fold(tmp_path, group, bias, act):
    """PP-OCR det's head: ConvTranspose (no bias) -> Add(bias) -> BatchNorm -> Relu/Sigmoid."""
    c, mg = 6, 5
    m = mg * group
    x = rand(1, c, 5, 7)
    inits = {"w": rand(c, mg, 2, 2, seed=1), "d": rand(1, m, 1, 1, seed=2), **_bn_inits(m, 3)}
    if bias:
        inits["b"] = rand(m, seed=4)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["u"],
                              name="up", strides=[2, 2], group=group),
             helper.make_node("Add", ["u", "d"], ["a"], name="add"),
             helper.make_node("BatchNormalization", ["a", "gamma", "beta", "mean", "var"],
                              ["n"], name="bn", epsilon=1e-3),
             helper.make_node(act, ["n"], ["y"], name="act")]
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    g = _graph(model, tmp_path)
    assert _ops(g) == [f"ConvTranspose+Add+BatchNormalization+{act}"]
    check_model(model, {"x": x}, tmp_path)


# --------------------------------------------------------------------------------- pass contracts

def test_passes_are_pure_and_in_the_pipeline(tmp_path):
    x = rand(1, 3, 6, 6)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["u"], name="up"),
             helper.make_node("Add", ["u", "d"], ["a"], name="add"),
             helper.make_node("BatchNormalization", ["a", "gamma", "beta", "mean", "var"],
                              ["n"], name="bn")] + _silu("n", "y")
    model = make_model(nodes, {"x": x}, ["y"], initializers={
        "w": rand(3, 4, 3, 3), "d": rand(4, 1, 1, seed=1), **_bn_inits(4, 2)})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = run_pipeline(import_model(path), passes=PIPELINE[:3])
    before = [(n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in g.nodes]
    for p in (fold_bias_add, fold_batchnorm, fuse_silu):
        p(g)
        assert [(n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs))
                for n in g.nodes] == before, p.__name__
    names = [p.__name__ for p in PIPELINE]
    assert names.index("fold_bias_add") < names.index("fold_batchnorm") < \
        names.index("fuse_silu") < names.index("fuse_activations")
    assert _ops(run_pipeline(import_model(path))) == [
        "ConvTranspose+Add+BatchNormalization+Sigmoid+Swish"]


@pytest.mark.parametrize("view,act", [("Reshape", "Relu"), ("Flatten", "Gelu"),
                                      ("Unsqueeze", "Sigmoid")])
def test_activation_after_a_view_fuses_into_the_producer(tmp_path, view, act):
    """Gemm -> view -> activation (onnxruntime writes Reshape -> Gemm -> Reshape for a
    MatMul with a bias): the activation moves into the Gemm's epilogue, the view stays."""
    x = rand(6, 7)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="gemm")]
    inits = {"w": rand(7, 10, seed=1), "b": rand(10, seed=2)}
    if view == "Reshape":
        inits["shape"] = np.array([2, 3, 10], np.int64)
        nodes.append(helper.make_node("Reshape", ["h", "shape"], ["v"], name="view"))
    elif view == "Unsqueeze":
        inits["axes"] = np.array([0], np.int64)
        nodes.append(helper.make_node("Unsqueeze", ["h", "axes"], ["v"], name="view"))
    else:
        nodes.append(helper.make_node("Flatten", ["h"], ["v"], name="view", axis=0))
    nodes.append(helper.make_node(act, ["v"], ["y"], name="act"))
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits, opset=20)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = run_pipeline(import_model(path))
    assert [n.op_type for n in g.nodes] == ["Gemm", view], [n.op_type for n in g.nodes]
    assert g.nodes[0].attrs["_act"][0] == {"Relu": "RELU", "Gelu": "GELU",
                                          "Sigmoid": "SIGMOID"}[act]
    check_model(model, {"x": x}, tmp_path)


def test_activation_after_a_view_with_another_reader_stays(tmp_path):
    x = rand(6, 7)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"], name="gemm"),
             helper.make_node("Flatten", ["h"], ["v"], name="view", axis=0),
             helper.make_node("Relu", ["v"], ["y"], name="act"),
             helper.make_node("Neg", ["h"], ["z"], name="other")]
    model = make_model(nodes, {"x": x}, ["y", "z"], initializers={"w": rand(7, 10, seed=1)})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = run_pipeline(import_model(path))
    assert "Relu" in [n.op_type for n in g.nodes]
    check_model(model, {"x": x}, tmp_path)
