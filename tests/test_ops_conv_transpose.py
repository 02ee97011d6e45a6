"""ConvTranspose against onnxruntime (and an in-test numpy reference) on odd shapes."""
import numpy as np
import onnx
import pytest
from onnx import helper

import mlcc
from mlcc.errors import UnsupportedError
from util import check_model, check_node, make_model, rand, run_same_bits_on_threads


def convtranspose_ref(x, w, b=None, *, strides, begin, out, dilations, group=1):
    """Plain scatter definition: y[o] += x[i] * w[k] at o = i * stride + k * dilation - begin."""
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    spatial = x.shape[2:]
    y = np.zeros((n, mg * group, *out), np.float64)
    for g in range(group):
        for i in np.ndindex(*spatial):
            for k in np.ndindex(*w.shape[2:]):
                o = [ii * s + kk * d - p for ii, kk, s, d, p in
                     zip(i, k, strides, dilations, begin)]
                if all(0 <= oo < sz for oo, sz in zip(o, out)):
                    xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + i]        # [n, cg]
                    ws = w[(slice(g * cg, (g + 1) * cg), slice(None)) + k]        # [cg, mg]
                    y[(slice(None), slice(g * mg, (g + 1) * mg)) + tuple(o)] += xs @ ws
    if b is not None:
        y += b.reshape((1, -1) + (1,) * len(out))
    return y.astype(np.float32)


def test_numpy_reference_matches_onnxruntime(tmp_path):
    """The in-test reference agrees with onnxruntime, so the cases below test two ways."""
    x, w, b = rand(2, 4, 5, 3), rand(4, 3, 3, 2, seed=1), rand(6, seed=2)
    got = check_node("ConvTranspose", {"x": x}, initializers={"w": w, "b": b},
                     tmp_path=tmp_path, strides=[2, 3], pads=[1, 0, 0, 2], group=2,
                     dilations=[2, 1], output_padding=[1, 2])["y0"]
    ref = convtranspose_ref(x, w, b, strides=[2, 3], begin=[1, 0], out=got.shape[2:],
                            dilations=[2, 1], group=2)
    np.testing.assert_allclose(got, ref, atol=1e-4)


@pytest.mark.parametrize("n,c,h,w,m,k,stride,pads,dil,group,out_pad", [
    (1, 3, 7, 11, 5, 3, 1, [1, 1, 1, 1], 1, 1, 0),
    (2, 4, 5, 3, 6, 3, 2, [0, 1, 2, 0], 1, 2, 1),       # grouped, asymmetric pads
    (1, 5, 4, 7, 7, 5, 3, [2, 2, 2, 2], 1, 1, 2),       # stride 3, output_padding 2
    (1, 6, 6, 5, 6, 3, 1, [1, 1, 1, 1], 2, 6, 0),       # depthwise, dilated
    (1, 7, 5, 5, 11, 1, 1, [0, 0, 0, 0], 1, 1, 0),      # 1x1: direct GEMM path
    (1, 3, 4, 5, 13, 1, 2, [0, 0, 0, 0], 1, 1, 1),      # strided 1x1 leaves holes
    (1, 8, 10, 10, 4, 2, 2, [0, 0, 0, 0], 1, 1, 0),     # the DBNet upsampler: k = s = 2
    (1, 4, 6, 6, 4, 4, 2, [1, 1, 1, 1], 1, 1, 0),       # the usual GAN/U-Net k4 s2 p1
    (3, 2, 3, 3, 3, 3, 2, [3, 2, 4, 1], 2, 1, 1),       # pads that crop more than a tap
])
def test_conv_transpose2d(tmp_path, n, c, h, w, m, k, stride, pads, dil, group, out_pad):
    x = rand(n, c, h, w)
    wt = rand(c, m // group, k, k, seed=1)
    b = rand(m, seed=2)
    check_node("ConvTranspose", {"x": x}, initializers={"w": wt, "b": b}, tmp_path=tmp_path,
               strides=[stride, stride], pads=pads, dilations=[dil, dil], group=group,
               output_padding=[out_pad, out_pad] if out_pad < max(stride, dil) else [0, 0])


@pytest.mark.parametrize("c,h,w,m,k,stride,pads,group,act", [
    (24, 41, 37, 24, 2, 2, [0, 0, 0, 0], 1, "Relu"),   # PP-OCR det's upsampler, odd map
    (24, 131, 127, 1, 2, 2, [0, 0, 0, 0], 1, "Sigmoid"),   # one output channel: by rows
    (6, 61, 67, 24, 3, 1, [1, 1, 1, 1], 2, None),      # overlapping taps, grouped
    (32, 71, 67, 9, 1, 1, [0, 0, 0, 0], 1, "Relu"),    # 1x1: the direct GEMM
])
def test_conv_transpose_threads_same_bits(tmp_path, c, h, w, m, k, stride, pads, group, act):
    """Large enough to be split between threads (the GEMM by tiles, the scatter-add by output
    channels and rows, the activation with its rows): 1, 2 and 3 threads give the same bits,
    within tolerance of the scatter definition."""
    x, wt, b = rand(1, c, h, w), rand(c, m // group, k, k, seed=1), rand(m, seed=2)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t" if act else "y"],
                              strides=[stride, stride], pads=pads, group=group)]
    if act:
        nodes.append(helper.make_node(act, ["t"], ["y"]))
    model = make_model(nodes, {"x": x}, ["y"], initializers={"w": wt, "b": b})
    got = run_same_bits_on_threads(model, {"x": x}, tmp_path)["y"]
    ref = convtranspose_ref(x, wt, b, strides=[stride, stride], begin=pads[:2],
                            out=got.shape[2:], dilations=[1, 1], group=group)
    ref = {None: ref, "Relu": np.maximum(ref, 0), "Sigmoid": 1 / (1 + np.exp(-ref))}[act]
    np.testing.assert_allclose(got, ref, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def test_conv_transpose_no_bias_defaults(tmp_path):
    check_node("ConvTranspose", {"x": rand(1, 3, 4, 6)}, initializers={"w": rand(3, 2, 2, 3)},
               tmp_path=tmp_path)


@pytest.mark.parametrize("auto_pad,strides", [("SAME_UPPER", [2, 3]), ("SAME_LOWER", [2, 3]),
                                              ("SAME_LOWER", [3, 1]), ("VALID", [2, 2])])
def test_conv_transpose_auto_pad(tmp_path, auto_pad, strides):
    check_node("ConvTranspose", {"x": rand(1, 2, 5, 4)}, initializers={"w": rand(2, 3, 3, 4)},
               tmp_path=tmp_path, strides=strides, auto_pad=auto_pad)


@pytest.mark.parametrize("output_shape,auto_pad", [
    ([10, 8], "NOTSET"), ([8, 7], "NOTSET"), ([9, 9], "SAME_UPPER"), ([8, 6], "SAME_LOWER"),
    ([12, 10], "NOTSET"),                       # larger than the taps reach: padded at the end
])
def test_conv_transpose_output_shape(tmp_path, output_shape, auto_pad):
    check_node("ConvTranspose", {"x": rand(1, 2, 5, 4)}, initializers={"w": rand(2, 3, 3, 3)},
               tmp_path=tmp_path, strides=[2, 2], output_shape=output_shape, auto_pad=auto_pad)


def test_conv_transpose_output_shape_overrides_pads(tmp_path):
    check_node("ConvTranspose", {"x": rand(1, 2, 5, 4)}, initializers={"w": rand(2, 3, 3, 3)},
               tmp_path=tmp_path, strides=[2, 2], output_shape=[9, 7], pads=[2, 2, 0, 0])


@pytest.mark.parametrize("stride,pads,out_pad,dil,group", [
    (2, [2, 1], 1, 1, 1), (3, [0, 0], 2, 1, 3), (1, [1, 3], 0, 3, 1)])
def test_conv_transpose1d(tmp_path, stride, pads, out_pad, dil, group):
    check_node("ConvTranspose", {"x": rand(2, 3, 19)},
               initializers={"w": rand(3, 5, 4, seed=1), "b": rand(5 * group, seed=2)},
               tmp_path=tmp_path, strides=[stride], pads=pads, output_padding=[out_pad],
               dilations=[dil], group=group)


def test_conv_transpose1d_output_shape(tmp_path):
    check_node("ConvTranspose", {"x": rand(1, 4, 7)}, initializers={"w": rand(4, 2, 3, seed=1)},
               tmp_path=tmp_path, strides=[2], output_shape=[14])


@pytest.mark.parametrize("act,attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}),
                                       ("Sigmoid", {}), ("HardSigmoid", {})])
def test_conv_transpose_fused_activation(tmp_path, act, attrs):
    x, w, b = rand(1, 4, 6, 5), rand(4, 3, 2, 2, seed=1), rand(3, seed=2)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], name="up", strides=[2, 2]),
             helper.make_node(act, ["t"], ["y"], name="act", **attrs)]
    model = make_model(nodes, {"x": x}, ["y"], initializers={"w": w, "b": b})
    check_model(model, {"x": x}, tmp_path)


def test_conv_transpose_fused_activation_direct_path(tmp_path):
    x, w, b = rand(2, 5, 3, 4), rand(5, 6, 1, 1, seed=1), rand(6, seed=2)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], name="up"),
             helper.make_node("Relu", ["t"], ["y"], name="act")]
    check_model(make_model(nodes, {"x": x}, ["y"], initializers={"w": w, "b": b}), {"x": x},
                tmp_path)


def test_conv_transpose_fuses_activation_into_one_kernel_call(tmp_path):
    x, w = rand(1, 2, 3, 3), rand(2, 2, 3, 3, seed=1)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["t"], name="up", strides=[2, 2]),
             helper.make_node("Relu", ["t"], ["y"], name="act")]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, {"x": x}, ["y"], initializers={"w": w}), str(path))
    res = mlcc.compile(path, tmp_path / "out", build=False)
    assert [n.op_type for n in res.graph.nodes] == ["ConvTranspose"]
    assert "_act" in res.graph.nodes[0].attrs


def test_conv_transpose_runtime_weight_is_refused(tmp_path):
    x, w = rand(1, 2, 3, 3), rand(2, 2, 3, 3, seed=1)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up_rt")
    path = tmp_path / "m.onnx"
    onnx.save(make_model([node], {"x": x, "w": w}, ["y"]), str(path))
    with pytest.raises(UnsupportedError, match="up_rt"):
        mlcc.compile(path, tmp_path / "out", build=False)


@pytest.mark.parametrize("stride,pads,out_pad,dil,group", [
    ([2, 1, 3], [1, 0, 0, 0, 1, 2], [1, 0, 2], [1, 2, 1], 1),
    ([1, 2, 2], [0, 0, 0, 0, 0, 0], [0, 1, 0], [1, 1, 1], 2),
    ([1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 0], [1, 1, 1], 1),      # 1x1x1: the direct path
])
def test_conv_transpose3d(tmp_path, stride, pads, out_pad, dil, group):
    kernel = [1, 1, 1] if stride == [1, 1, 1] else [3, 2, 3]
    x, w, b = rand(2, 4, 3, 5, 4), rand(4, 3, *kernel, seed=1), rand(3 * group, seed=2)
    got = check_node("ConvTranspose", {"x": x}, initializers={"w": w, "b": b},
                     tmp_path=tmp_path, strides=stride, pads=pads, output_padding=out_pad,
                     dilations=dil, group=group)["y0"]
    ref = convtranspose_ref(x, w, b, strides=stride, begin=pads[:3], out=got.shape[2:],
                            dilations=dil, group=group)
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_conv_transpose4d_is_refused(tmp_path):
    x, w = rand(1, 2, 3, 3, 3, 3), rand(2, 2, 2, 2, 2, 2, seed=1)
    path = tmp_path / "m.onnx"
    onnx.save(make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up4d")],
                         {"x": x}, ["y"], initializers={"w": w}), str(path))
    with pytest.raises(UnsupportedError, match="up4d"):
        mlcc.compile(path, tmp_path / "out", build=False)
