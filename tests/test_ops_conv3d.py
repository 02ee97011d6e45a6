"""3-D convolution (NCDHW) against onnxruntime: every attribute, each of the three ways it runs
as a 2-D convolution (mlcc/ops/conv3d.py: rows, channels, gather, and gather in several
blocks), the same bits on any thread count, a small video-style network, int8 and refusals."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import mlcc
from mlcc import api
from mlcc.errors import MlccError
from mlcc.frontend import import_model
from mlcc.ops import conv3d
from mlcc.ops.registry import lookup
from mlcc.passes import run_pipeline
from util import (assert_refused, check_model, make_model, rand, reference_outputs,
                  run_same_bits_on_threads)


def conv_model(x_shape, w_shape, *, bias=True, act=None, runtime_weights=False, **attrs):
    """One Conv (and an activation after it), its feeds."""
    w = rand(*w_shape, seed=1)
    inputs = {"x": rand(*x_shape)}
    inits = {}
    (inputs if runtime_weights else inits)["w"] = w
    names = ["x", "w"]
    if bias:
        inits["b"] = rand(w_shape[0], seed=2)
        names.append("b")
    nodes = [helper.make_node("Conv", names, ["c" if act else "y"], name="conv3d", **attrs)]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"], name="act"))
    return make_model(nodes, inputs, ["y"], initializers=inits), inputs


def plan_of(model: onnx.ModelProto, tmp_path: Path) -> conv3d.Conv3dPlan:
    path = tmp_path / "plan.onnx"
    onnx.save(model, str(path))
    g = run_pipeline(import_model(path))
    node = next(n for n in g.nodes if n.op_type == "Conv")
    return lookup(node).plan3d(node, g)


# x shape, w shape, attributes, how it runs
CASES = [
    # 3x3x3 / 1, padding 1, prime sizes: gathered depth taps
    ((1, 3, 5, 7, 11), (4, 3, 3, 3, 3), dict(pads=[1] * 6), "gather"),
    # stride (2, 2, 2), asymmetric pads, two groups, batch 2
    ((2, 4, 7, 9, 5), (6, 2, 3, 3, 3), dict(group=2, strides=[2, 2, 2],
                                           pads=[1, 0, 2, 0, 1, 1]), "gather"),
    # stride (1, 2, 2), one input channel, a 3x7x7 stem
    ((2, 1, 7, 13, 11), (4, 1, 3, 7, 7), dict(strides=[1, 2, 2], pads=[1, 3, 3, 1, 3, 3]),
     "gather"),
    # dilation along every axis, no padding
    ((1, 2, 11, 9, 13), (3, 2, 3, 2, 3), dict(dilations=[2, 3, 1]), "gather"),
    # depthwise 3-D with a depth dilation
    ((1, 6, 7, 9, 9), (6, 1, 3, 3, 3), dict(group=6, pads=[1] * 6, dilations=[2, 1, 1]),
     "gather"),
    # (k, 1, 1): a temporal convolution, the input viewed as [N, C, D, H * W]
    ((1, 3, 5, 7, 11), (5, 3, 3, 1, 1), dict(pads=[1, 0, 0, 1, 0, 0]), "rows"),
    ((2, 4, 13, 5, 3), (8, 2, 3, 1, 1), dict(group=2, strides=[2, 1, 1], dilations=[3, 1, 1],
                                             pads=[2, 0, 0, 0, 0, 0]), "rows"),
    # 1x1x1, batch 2
    ((2, 3, 5, 7, 11), (5, 3, 1, 1, 1), {}, "rows"),
    # 1x1x1 depthwise: runs as the 2-D depthwise kernel
    ((1, 5, 3, 7, 11), (5, 1, 1, 1, 1), dict(group=5), "rows"),
    # (1, k, k) over a whole depth of 1; and a window of the whole depth
    ((2, 3, 1, 7, 11), (5, 3, 1, 3, 3), dict(pads=[0, 1, 1, 0, 1, 1]), "channels"),
    ((1, 3, 3, 7, 11), (5, 3, 3, 3, 3), dict(pads=[0, 1, 1, 0, 1, 1]), "channels"),
    # a depth of 1 under a 3x3x3 kernel padded by 1: the taps that read padding are dropped
    ((1, 3, 1, 7, 11), (5, 3, 3, 3, 3), dict(pads=[1] * 6), "channels"),
    # (1, k, k) spatial convolutions of R(2+1)D over several depths
    ((1, 4, 5, 9, 9), (6, 4, 1, 3, 3), dict(strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]),
     "gather"),
    # auto_pad
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(auto_pad="SAME_UPPER", strides=[2, 1, 2]), "gather"),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(auto_pad="SAME_LOWER", strides=[2, 1, 2]), "gather"),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(auto_pad="VALID"), "gather"),
    # output depths whose windows lie in the padding only
    ((1, 2, 1, 5, 5), (3, 2, 1, 3, 3), dict(pads=[2, 1, 1, 2, 1, 1]), "gather"),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,mode", CASES)
def test_conv3d(tmp_path, x_shape, w_shape, attrs, mode):
    model, feeds = conv_model(x_shape, w_shape, **attrs)
    assert plan_of(model, tmp_path).mode == mode
    check_model(model, feeds, tmp_path)


@pytest.mark.parametrize("act", ["Relu", "Sigmoid"])
def test_conv3d_fused_activation(tmp_path, act):
    model, feeds = conv_model((1, 3, 5, 7, 11), (4, 3, 3, 3, 3), act=act, pads=[1] * 6)
    check_model(model, feeds, tmp_path)
    code = next(tmp_path.glob("**/model.c")).read_text()
    assert f"MLCC_ACT_{act.upper()}" in code and "mlcc_f32_unary" not in code


def test_conv3d_without_bias_and_runtime_weights(tmp_path):
    model, feeds = conv_model((1, 3, 5, 6, 7), (4, 3, 3, 3, 3), bias=False, pads=[1] * 6)
    check_model(model, feeds, tmp_path / "const")
    for x_shape, attrs in [((2, 3, 5, 6, 7), dict(pads=[1] * 6, strides=[2, 1, 1])),
                           ((1, 3, 3, 6, 7), dict(pads=[0, 1, 1, 0, 1, 1]))]:
        model, feeds = conv_model(x_shape, (4, 3, 3, 3, 3), runtime_weights=True, **attrs)
        check_model(model, feeds, tmp_path / f"runtime{x_shape[0]}")


def test_conv3d_gather_in_blocks(tmp_path, monkeypatch):
    """Blocks of one output depth (the gathered tensor and the 2-D output reused by the next
    block), and blocks of images where there is one output depth."""
    monkeypatch.setattr(conv3d, "GATHER_BYTES", 1)
    model, feeds = conv_model((2, 3, 5, 7, 11), (4, 3, 3, 3, 3), pads=[1, 1, 1, 0, 1, 1],
                              strides=[1, 2, 1])
    p = plan_of(model, tmp_path)
    assert (p.mode, p.block, p.od) == ("gather", 1, 4)
    check_model(model, feeds, tmp_path / "depths")
    model, feeds = conv_model((3, 3, 4, 7, 11), (4, 3, 3, 3, 3), pads=[1, 1, 1, 0, 1, 1],
                              strides=[4, 1, 1])
    p = plan_of(model, tmp_path)
    assert (p.mode, p.block, p.od) == ("gather", 1, 1)
    check_model(model, feeds, tmp_path / "images")


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 8, 7, 13, 11), (16, 8, 3, 3, 3), dict(pads=[1] * 6)),
    ((1, 16, 5, 9, 9), (16, 16, 3, 1, 1), dict(pads=[1, 0, 0, 1, 0, 0])),
    ((1, 16, 1, 9, 9), (32, 16, 3, 3, 3), dict(pads=[1] * 6, strides=[2, 2, 2])),
])
def test_conv3d_same_bits_on_threads(tmp_path, x_shape, w_shape, attrs):
    model, feeds = conv_model(x_shape, w_shape, act="Relu", **attrs)
    got = run_same_bits_on_threads(model, feeds, tmp_path)
    check_model(model, feeds, tmp_path)
    assert np.array_equal(got["y"], mlcc.load(next(tmp_path.glob("m*/out"))).run(feeds)["y"])


def video_net():
    """A stem (3x7x7 / (1, 2, 2)), a residual block of two 3x3x3 convolutions with BatchNorm and
    Relu, a strided (2, 2, 2) block with a 1x1x1 projection, a (2+1)-D pair ((1, 3, 3) then
    (3, 1, 1)), GlobalAveragePool and a classifier."""
    rng = np.random.default_rng(3)
    inits, nodes = {}, []

    def conv(name, x, cin, cout, k, stride=(1, 1, 1), pad=None, relu=True):
        pad = pad or [kk // 2 for kk in k] * 2
        inits[f"{name}.w"] = (rng.standard_normal((cout, cin, *k)) /
                              np.sqrt(cin * np.prod(k))).astype(np.float32)
        nodes.append(helper.make_node("Conv", [x, f"{name}.w"], [f"{name}.c"], name=name,
                                      strides=list(stride), pads=pad))
        for p, v in [("g", rng.uniform(0.5, 1.5, cout)), ("b", rng.normal(0, 0.1, cout)),
                     ("m", rng.normal(0, 0.1, cout)), ("v", rng.uniform(0.5, 1.5, cout))]:
            inits[f"{name}.{p}"] = v.astype(np.float32)
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.c"] + [
            f"{name}.{p}" for p in "gbmv"], [f"{name}.bn"], name=f"{name}_bn"))
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.y"], name=f"{name}_relu"))
        return f"{name}.y"

    def add_relu(name, a, b):
        nodes.append(helper.make_node("Add", [a, b], [f"{name}.s"], name=f"{name}_add"))
        nodes.append(helper.make_node("Relu", [f"{name}.s"], [f"{name}.y"], name=f"{name}_relu"))
        return f"{name}.y"

    x = conv("stem", "x", 3, 8, (3, 7, 7), (1, 2, 2))
    y = conv("b1c1", x, 8, 8, (3, 3, 3))
    x = add_relu("b1", conv("b1c2", y, 8, 8, (3, 3, 3), relu=False), x)
    y = conv("b2c1", x, 8, 16, (3, 3, 3), (2, 2, 2))
    skip = conv("b2proj", x, 8, 16, (1, 1, 1), (2, 2, 2), pad=[0] * 6, relu=False)
    x = add_relu("b2", conv("b2c2", y, 16, 16, (3, 3, 3), relu=False), skip)
    y = conv("b3s", x, 16, 12, (1, 3, 3))
    x = add_relu("b3", conv("b3t", y, 12, 16, (3, 1, 1), relu=False), x)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    inits["fc.w"] = rng.standard_normal((16, 5)).astype(np.float32)
    inits["fc.b"] = rng.standard_normal(5).astype(np.float32)
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc"))
    return nodes, inits


def test_video_net(tmp_path):
    nodes, inits = video_net()
    feeds = {"x": rand(2, 3, 7, 23, 19)}
    model = make_model(nodes, feeds, ["logits"], initializers=inits)
    check_model(model, feeds, tmp_path)
    code = next(tmp_path.glob("**/model.c")).read_text()
    # BatchNorms folded, the Relus after convolutions fused: those after the 3 Adds remain
    assert "(Conv+BatchNormalization+Relu)" in code and "(BatchNormalization)" not in code
    assert code.count("mlcc_f32_unary(") == 3


def test_video_net_int8_keeps_3d_convolutions_float(tmp_path):
    """--quantize int8 has no integer 3-D convolution: they stay float (the report says so)
    and the model still compiles and runs close to onnxruntime."""
    nodes, inits = video_net()
    feeds = {"x": rand(1, 3, 5, 16, 16)}
    model = make_model(nodes, feeds, ["logits"], initializers=inits)
    onnx.save(model, str(tmp_path / "video.onnx"))
    np.savez(tmp_path / "calib.npz", x=np.stack([rand(1, 3, 5, 16, 16, seed=s)[0]
                                                 for s in range(4)])[:, None])
    mlcc.compile(tmp_path / "video.onnx", tmp_path / "out",
                 quantize=api.QuantizeConfig(tmp_path / "calib.npz"))
    code = (tmp_path / "out" / "model.c").read_text()
    assert "mlcc_f32_conv2d" in code
    got = mlcc.load(tmp_path / "out").run(feeds)["logits"]
    ref = reference_outputs(model, feeds)["logits"]
    assert np.abs(got - ref).max() <= 0.1 * max(1.0, np.abs(ref).max())


def test_conv4d_and_dynamic_3d_are_refused(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv4d")
    assert_refused(tmp_path, node, {"x": rand(1, 2, 3, 3, 3, 3), "w": rand(2, 2, 1, 1, 1, 1)},
                   13, r"4-D convolution is not supported \(1-D, 2-D and 3-D are\)")
    model, _ = conv_model((1, 3, 5, 7, 11), (4, 3, 3, 3, 3), pads=[1] * 6)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "frames"
    onnx.save(model, str(tmp_path / "dyn.onnx"))
    with pytest.raises(MlccError, match=r"conv3d.*3-D convolution needs static shapes"):
        mlcc.compile(tmp_path / "dyn.onnx", tmp_path / "dyn", shapes={"x": (1, 3, (4, 8), 7, 11)})
