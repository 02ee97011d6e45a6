"""Per-channel constant scales folded into weights (fold_scale_mul) and HardSwish written out in
elementary operators recognized (fuse_hardswish): PP-OCR's Conv -> Mul -> Add -> x*clip(x+3,0,6)/6
blocks become one convolution. Graph after the pipeline, and numbers against onnxruntime."""
import numpy as np
import onnx
import pytest
from onnx import helper

from mlcc.frontend import import_model
from mlcc.passes import PIPELINE, fold_scale_mul, fuse_hardswish, run_pipeline
from util import check_model, make_model, rand


def _graph(model, tmp_path):
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    return run_pipeline(import_model(path))


def _ops(g):
    return ["+".join([n.op_type] + [f.split(":")[-1] for f in n.fused]) for n in g.nodes]


def _c(value):
    return np.asarray(value, np.float32)


def _hardswish(x, y, form):
    """HardSwish of x into y, written the way exporters do."""
    n = helper.make_node
    if form == "paddle":        # Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)
        return [n("Add", [x, "three"], ["hs_a"], name="hs_add"),
                n("Clip", ["hs_a", "zero", "six"], ["hs_c"], name="hs_clip"),
                n("Mul", [x, "hs_c"], ["hs_m"], name="hs_mul"),
                n("Div", ["hs_m", "six"], [y], name="hs_div")]
    if form == "div_first":     # Mul(Div(Clip(Add(3, x), 0, 6), 6), x), 1/6 as a Mul
        return [n("Add", ["three", x], ["hs_a"], name="hs_add"),
                n("Clip", ["hs_a", "zero", "six"], ["hs_c"], name="hs_clip"),
                n("Mul", ["sixth", "hs_c"], ["hs_d"], name="hs_scale"),
                n("Mul", ["hs_d", x], [y], name="hs_mul")]
    return [n("HardSigmoid", [x], ["hs_s"], name="hs_sig", alpha=1 / 6, beta=0.5),
            n("Mul", [x, "hs_s"], [y], name="hs_mul")]


HS_CONSTS = {"three": _c(3.0), "zero": _c(0.0), "six": _c(6.0), "sixth": _c(1 / 6)}


# --------------------------------------------------------------------------------- scales

@pytest.mark.parametrize("d_shape", [(1,), (), (1, 6, 1, 1), (6, 1, 1)])
@pytest.mark.parametrize("op", ["Mul", "Div"])
def test_channel_scale_folds_into_conv(tmp_path, d_shape, op):
    x = rand(1, 3, 9, 8)
    d = rand(*d_shape, low=0.5, high=2.0, seed=5) if d_shape else _c(-1.7)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c", "d"] if op == "Div" or d_shape != (1,) else ["d", "c"],
                              ["m"], name="scale"),
             helper.make_node("Add", ["m", "shift"], ["y"], name="shift")]
    model = make_model(nodes, {"x": x}, ["y"], initializers={
        "w": rand(6, 3, 3, 3, seed=1), "b": rand(6, seed=2), "d": d, "shift": rand(1, seed=3)})
    assert _ops(_graph(model, tmp_path)) == [f"Conv+{op}+Add"]
    check_model(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("trans_b,c_shape", [(0, None), (1, (7,)), (1, (4, 1))])
def test_column_scale_folds_into_gemm(tmp_path, trans_b, c_shape):
    x = rand(4, 9)
    w = rand(7, 9, seed=1) if trans_b else rand(9, 7, seed=1)
    inits = {"w": w, "d": rand(7, low=-2, high=2, seed=2)}
    ins = ["x", "w"]
    if c_shape:
        inits["c"] = rand(*c_shape, seed=3)
        ins.append("c")
    nodes = [helper.make_node("Gemm", ins, ["h"], name="fc", transB=trans_b, alpha=0.5,
                              beta=1.5),
             helper.make_node("Mul", ["h", "d"], ["y"], name="scale")]
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    assert _ops(_graph(model, tmp_path)) == ["Gemm+Mul"]
    check_model(model, {"x": x}, tmp_path)


def test_scales_fold_into_matmul_and_grouped_conv_transpose(tmp_path):
    x = rand(2, 5, 8)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm"),
             helper.make_node("Div", ["h", "d1"], ["h2"], name="div"),
             helper.make_node("Reshape", ["h2", "shape"], ["r"], name="reshape"),
             helper.make_node("ConvTranspose", ["r", "w2"], ["u"], name="up", group=2,
                              strides=[2, 1]),
             helper.make_node("Mul", ["u", "d2"], ["y"], name="mul")]
    model = make_model(nodes, {"x": x}, ["y"], initializers={
        "w1": rand(8, 6, seed=1), "d1": rand(1, 1, 6, low=0.5, high=2, seed=2),
        "shape": np.array([1, 4, 5, 3], np.int64), "w2": rand(4, 3, 2, 2, seed=3),
        "d2": rand(1, 6, 1, 1, low=-2, high=2, seed=4)})
    assert _ops(_graph(model, tmp_path)) == ["MatMul+Div", "Reshape", "ConvTranspose+Mul"]
    check_model(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("case", ["spatial", "zero_divisor", "runtime_operand", "reversed_div",
                                  "activation_first"])
def test_scales_that_do_not_fold(tmp_path, case):
    x = rand(1, 2, 5, 4)
    inputs, inits = {"x": x}, {"w": rand(3, 2, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")]
    src = "c"
    if case == "activation_first":   # Relu(conv) * s: the scale would have to pass the Relu
        nodes.append(helper.make_node("Relu", ["c"], ["r"], name="relu"))
        src = "r"
    op, operands = "Mul", [src, "d"]
    if case == "spatial":
        inits["d"] = rand(1, 1, 5, 4, seed=1)
    elif case == "zero_divisor":
        op, inits["d"] = "Div", _c([[[1.0]], [[0.0]], [[2.0]]])
    elif case == "runtime_operand":
        inputs["d"] = rand(1, 3, 1, 1, seed=2)
    elif case == "reversed_div":
        op, operands, inits["d"] = "Div", ["d", src], rand(3, 1, 1, low=1, high=2, seed=3)
    else:
        inits["d"] = rand(3, 1, 1, low=-2, high=2, seed=4)
    nodes.append(helper.make_node(op, operands, ["y"], name="scale"))
    model = make_model(nodes, inputs, ["y"], initializers=inits)
    assert op in _ops(_graph(model, tmp_path))
    if case != "zero_divisor":
        check_model(model, inputs, tmp_path)


# --------------------------------------------------------------------------------- HardSwish

@pytest.mark.parametrize("form", ["paddle", "div_first", "hard_sigmoid"])
def test_hardswish_patterns_fuse_into_conv(tmp_path, form):
    """PP-OCR's block: Conv -> Mul(scale) -> Add(shift) -> HardSwish -> Mul -> Add."""
    x = rand(1, 4, 7, 9) * 3
    nodes = ([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                               group=4),
              helper.make_node("Mul", ["s1", "c"], ["m1"], name="lab_scale"),
              helper.make_node("Add", ["m1", "t1"], ["a1"], name="lab_shift")]
             + _hardswish("a1", "h", form)
             + [helper.make_node("Mul", ["s2", "h"], ["m2"], name="post_scale"),
                helper.make_node("Add", ["m2", "t2"], ["y"], name="post_shift")])
    inits = {"w": rand(4, 1, 3, 3, seed=1) * 2, "b": rand(4, seed=2), "s1": _c([1.3]),
             "t1": _c([0.2]), "s2": _c([0.9]), "t2": _c([-0.1]), **HS_CONSTS}
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    ops = _ops(_graph(model, tmp_path))
    assert ops[0].startswith("Conv+Mul+Add+") and ops[0].endswith("+HardSwish")
    assert ops[1:] == ["Mul", "Add"]
    check_model(model, {"x": x}, tmp_path)


def test_standalone_hardswish_pattern_is_one_kernel(tmp_path):
    x = np.linspace(-8, 8, 97, dtype=np.float32).reshape(1, 97)
    model = make_model(_hardswish("x", "y", "paddle"), {"x": x}, ["y"], initializers=HS_CONSTS)
    assert _ops(_graph(model, tmp_path)) == ["HardSwish+Add+Clip+Mul"]
    check_model(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("case", ["add_two", "clip_to_five", "mul_other", "read_twice"])
def test_near_misses_of_hardswish_stay(tmp_path, case):
    x, z = rand(2, 11), rand(2, 11, seed=1)
    consts = dict(HS_CONSTS, two=_c(2.0), five=_c(5.0))
    n = helper.make_node
    nodes = [n("Add", ["x", "two" if case == "add_two" else "three"], ["a"], name="add"),
             n("Clip", ["a", "zero", "five" if case == "clip_to_five" else "six"], ["c"],
               name="clip"),
             n("Mul", ["z" if case == "mul_other" else "x", "c"], ["m"], name="mul"),
             n("Div", ["m", "six"], ["y"], name="div")]
    outputs = ["y"]
    if case == "read_twice":
        nodes.append(n("Neg", ["c"], ["w"], name="neg"))
        outputs.append("w")
    model = make_model(nodes, {"x": x, "z": z}, outputs, initializers=consts)
    assert "HardSwish" not in "".join(_ops(_graph(model, tmp_path)))
    check_model(model, {"x": x, "z": z}, tmp_path)


def test_passes_are_pure_and_ordered(tmp_path):
    x = rand(1, 2, 4, 4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Mul", ["c", "s"], ["m"], name="scale")] + _hardswish(
        "m", "y", "paddle")
    model = make_model(nodes, {"x": x}, ["y"], initializers={
        "w": rand(3, 2, 1, 1), "s": _c([2.0]), **HS_CONSTS})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    g = run_pipeline(import_model(path), passes=PIPELINE[:3])
    before = [(n.op_type, list(n.inputs), list(n.outputs)) for n in g.nodes]
    for p in (fold_scale_mul, fuse_hardswish):
        p(g)
        assert [(n.op_type, list(n.inputs), list(n.outputs)) for n in g.nodes] == before
    names = [p.__name__ for p in PIPELINE]
    assert names.index("fold_scale_mul") < names.index("fold_bias_add")
    assert names.index("fuse_hardswish") < names.index("fuse_activations")
