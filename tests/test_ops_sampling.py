"""GridSample, AffineGrid, Col2Im and CenterCropPad against onnxruntime (onnx.reference where
onnxruntime lacks a case): odd sizes, every mode, padding mode and align_corners, points
outside the image (far outside too), 1 to 3 spatial axes, and refusals."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import UnsupportedError
from util import (check_model, check_node, compile_and_run, make_model, rand,
                  reference_outputs, run_same_bits_on_threads)


def _grid(n, out_shape, nd, seed, spread=1.3):
    """Coordinates in [-spread, spread] (outside the image beyond 1), some exactly on pixel
    centres and edges, and one far outside."""
    g = rand(n, *out_shape, nd, seed=seed, low=-spread, high=spread)
    flat = g.reshape(-1)
    flat[:4] = [-1.0, 1.0, 0.0, 0.5][:flat.size]
    flat[-1] = 7.5
    return g


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(tmp_path, padding, align):
    """One model per padding mode and align_corners: nearest, linear and cubic side by side
    (opset 20's names), on a 5 x 7 image sampled at 3 x 4 points."""
    x, grid = rand(2, 3, 5, 7, seed=1), _grid(2, (3, 4), 2, seed=2)
    nodes = [helper.make_node("GridSample", ["x", "grid"], [f"y_{mode}"], mode=mode,
                              padding_mode=padding, align_corners=align)
             for mode in ("nearest", "linear", "cubic")]
    feeds = {"x": x, "grid": grid}
    check_model(make_model(nodes, feeds, [n.output[0] for n in nodes], opset=20), feeds,
                tmp_path)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_opset16_names(tmp_path, padding):
    x, grid = rand(1, 2, 6, 5, seed=3), _grid(1, (5, 3), 2, seed=4)
    for mode in ("bilinear", "bicubic"):
        check_node("GridSample", {"x": x, "grid": grid}, tmp_path=tmp_path, opset=16,
                   mode=mode, padding_mode=padding, align_corners=1)


@pytest.mark.parametrize("spatial", [(7,), (3, 5, 4)])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_1d_3d(tmp_path, spatial, padding):
    """1-D and volumetric inputs (opset 20), nearest and linear, against onnx.reference
    (onnxruntime's CPU kernel takes 4-D and 5-D inputs only)."""
    nd = len(spatial)
    x, grid = rand(2, 2, *spatial, seed=5), _grid(2, (2, 3, 2)[:nd] or (3,), nd, seed=6)
    nodes = [helper.make_node("GridSample", ["x", "grid"], [f"y_{mode}_{a}"], mode=mode,
                              padding_mode=padding, align_corners=a)
             for mode in ("nearest", "linear") for a in (0, 1)]
    feeds = {"x": x, "grid": grid}
    check_model(make_model(nodes, feeds, [n.output[0] for n in nodes], opset=20), feeds,
                tmp_path)


def test_grid_sample_refuses_a_mode_of_another_opset(tmp_path):
    x, grid = rand(1, 1, 3, 3), _grid(1, (2, 2), 2, seed=7)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs_node", mode="bilinear")
    model = make_model([node], {"x": x, "grid": grid}, ["y"], opset=20)
    with pytest.raises(UnsupportedError, match="gs_node.*'bilinear' is not a mode"):
        compile_and_run(model, {"x": x, "grid": grid}, tmp_path)


@pytest.mark.parametrize("size,align", [([2, 3, 5, 7], 0), ([2, 3, 5, 7], 1),
                                        ([1, 1, 3, 4, 5], 0), ([3, 2, 2, 3, 1], 0)])
def test_affine_grid(tmp_path, size, align):
    nd = len(size) - 2
    theta = rand(size[0], nd, nd + 1, seed=8)
    check_node("AffineGrid", {"theta": theta}, tmp_path=tmp_path, opset=20,
               initializers={"size": np.array(size, np.int64)}, align_corners=align)


def test_affine_grid_then_grid_sample(tmp_path):
    """The spatial transformer: AffineGrid's grid read by GridSample."""
    x, theta = rand(2, 3, 7, 5, seed=9), rand(2, 2, 3, seed=10) * 0.5
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"]),
             helper.make_node("GridSample", ["x", "grid"], ["y"])]
    feeds = {"x": x, "theta": theta}
    model = make_model(nodes, feeds, ["y"], opset=20,
                       initializers={"size": np.array([2, 3, 6, 4], np.int64)})
    check_model(model, feeds, tmp_path)


def test_affine_grid_refuses_align_corners_on_size_one(tmp_path):
    theta = rand(1, 2, 3)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], name="ag_node",
                            align_corners=1)
    model = make_model([node], {"theta": theta}, ["y"], opset=20,
                       initializers={"size": np.array([1, 1, 1, 4], np.int64)})
    with pytest.raises(UnsupportedError, match="ag_node.*size of 1"):
        compile_and_run(model, {"theta": theta}, tmp_path)


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 7], [2, 3], {}),
    ([7, 6], [3, 2], {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ([11], [3], {"strides": [2], "pads": [1, 1]}),
    ([4, 5, 3], [2, 2, 2], {"dilations": [1, 2, 1]}),
])
def test_col2im(tmp_path, image, block, attrs):
    nd = len(image)
    strides = attrs.get("strides", [1] * nd)
    dil = attrs.get("dilations", [1] * nd)
    pads = attrs.get("pads", [0] * 2 * nd)
    cols = [(image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
            for i in range(nd)]
    x = rand(2, 3 * int(np.prod(block)), int(np.prod(cols)), seed=11)
    inits = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    if nd != 3:
        check_node("Col2Im", {"x": x}, tmp_path=tmp_path, opset=18, initializers=inits, **attrs)
        return
    # onnxruntime 1.32 gets 3-D Col2Im with dilations wrong (6.8 off; onnx.reference and a
    # brute-force sum agree with mlcc): compare with onnx.reference
    from onnx.reference import ReferenceEvaluator
    model = make_model([helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)],
                       {"x": x}, ["y"], opset=18, initializers=inits)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,target,axes", [
    ((5, 7, 3), [3, 10, 3], None),           # crop odd, pad odd, keep
    ((6, 4), [3, 9], None),
    ((2, 9, 8, 3), [4, 11], [1, -2]),        # negative axis
])
def test_center_crop_pad(tmp_path, shape, target, axes):
    attrs = {} if axes is None else {"axes": axes}
    for dtype in ("float32", "int64"):
        x = (rand(*shape, seed=12) * 10).astype(dtype)
        check_node("CenterCropPad", {"x": x}, tmp_path=tmp_path, opset=18,
                   initializers={"shape": np.array(target, np.int64)}, **attrs)


@pytest.mark.parametrize("opset,attrs", [
    (16, {}),
    (16, {"coordinate_transformation_mode": "output_half_pixel", "sampling_ratio": 2}),
    (16, {"mode": "max", "sampling_ratio": 3, "spatial_scale": 0.5}),
    (10, {"output_height": 3, "output_width": 2}),
])
def test_roi_align(tmp_path, opset, attrs):
    """Boxes inside, across the edge and beyond one pixel outside of a 2 x 3 x 9 x 11 input,
    one of zero size; adaptive and fixed sampling grids."""
    x = rand(2, 3, 9, 11, seed=13)
    rois = np.array([[0.5, 1.0, 6.3, 7.7], [-3.0, -2.0, 4.0, 3.0], [2.0, 2.0, 2.0, 2.0],
                     [8.0, 6.0, 14.5, 12.0], [-9.0, -9.0, -4.0, -3.0]], np.float32)
    idx = np.array([0, 1, 1, 0, 1], np.int64)
    check_node("RoiAlign", {"x": x, "rois": rois, "idx": idx}, tmp_path=tmp_path, opset=opset,
               **{"output_height": 4, "output_width": 5, **attrs})


def test_roi_align_batch_index_out_of_range_is_a_status(tmp_path):
    from mlcc.errors import RuntimeStatusError
    x, rois = rand(1, 2, 5, 5), np.array([[0, 0, 3, 3]], np.float32)
    idx = np.array([1], np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"])
    feeds = {"x": x, "rois": rois, "idx": idx}
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(make_model([node], feeds, ["y"], opset=16), feeds, tmp_path)


# boxes (batch index, x1, y1, x2, y2): inside, across the top-left and bottom-right edges, one
# of zero size, one reversed (a malformed box is 1 x 1), one entirely outside, corners on .5
MAX_ROI_BOXES = np.array([[0, 0.5, 1.0, 6.3, 7.7], [1, -3.0, -2.0, 4.0, 3.0],
                          [1.0, 2.0, 2.0, 2.0, 2.0], [0, 8.0, 6.0, 14.5, 12.0],
                          [1, 5.0, 6.0, 1.0, 2.0], [0, -9.0, -9.0, -4.0, -3.0],
                          [1.7, 2.5, 3.5, 9.5, 8.5]], np.float32)


@pytest.mark.parametrize("pooled,scale", [((3, 2), 1.0), ((1, 1), 1.0), ((4, 5), 0.5),
                                          ((2, 7), 1.3)])
def test_max_roi_pool(tmp_path, pooled, scale):
    """Against onnxruntime on a 2 x 3 x 9 x 11 input (batch 2): non-square pooled shapes,
    spatial_scale below and above 1, bins larger and smaller than a pixel. The values are
    positive: onnxruntime starts each maximum at FLT_MIN (test below)."""
    x = rand(2, 3, 9, 11, seed=21, low=0.01, high=2.0)
    check_node("MaxRoiPool", {"x": x, "rois": MAX_ROI_BOXES}, tmp_path=tmp_path, opset=1,
               pooled_shape=list(pooled), spatial_scale=scale)


def _max_roi_pool_reference(x, rois, pooled, scale):
    """MaxRoiPool as onnxruntime computes it, its maximum started at -inf instead of FLT_MIN."""
    out = np.zeros((len(rois), x.shape[1], *pooled), np.float32)
    height, width = x.shape[2:]
    for r, (b, *box) in enumerate(rois):
        v = np.float32(box) * np.float32(scale)
        x1, y1, x2, y2 = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(int)
        bin_h = np.float32(max(y2 - y1 + 1, 1)) / np.float32(pooled[0])
        bin_w = np.float32(max(x2 - x1 + 1, 1)) / np.float32(pooled[1])
        for i in range(pooled[0]):
            h0 = min(max(int(np.floor(np.float32(i) * bin_h)) + y1, 0), height)
            h1 = min(max(int(np.ceil(np.float32(i + 1) * bin_h)) + y1, 0), height)
            for j in range(pooled[1]):
                w0 = min(max(int(np.floor(np.float32(j) * bin_w)) + x1, 0), width)
                w1 = min(max(int(np.ceil(np.float32(j + 1) * bin_w)) + x1, 0), width)
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def test_max_roi_pool_of_negative_values_is_their_maximum(tmp_path):
    """Where onnxruntime differs: a bin of only negative values is its maximum, not FLT_MIN.
    Checked against the reference above, which agrees with onnxruntime on positive values."""
    x = rand(2, 3, 9, 11, seed=22, low=0.01, high=2.0)
    feeds = {"x": x, "rois": MAX_ROI_BOXES}
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[4, 5],
                            spatial_scale=0.5)
    model = make_model([node], feeds, ["y"], opset=1)
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, feeds)[0],
                                  _max_roi_pool_reference(x, MAX_ROI_BOXES, (4, 5), 0.5))
    feeds["x"] = -x
    got = compile_and_run(model, feeds, tmp_path)["y"]
    expected = _max_roi_pool_reference(-x, MAX_ROI_BOXES, (4, 5), 0.5)
    assert (expected < 0).any() and (expected == 0).any()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("row", [[2, 0, 0, 3, 3], [-1, 0, 0, 3, 3], [np.nan, 0, 0, 3, 3],
                                 [0, 0, np.inf, 3, 3], [0, 0, 0, 3e10, 3]])
def test_max_roi_pool_bad_box_is_a_status(tmp_path, row):
    """A batch index outside [0, N) (after truncation), or a corner non-finite or too far out,
    is a run-time status, never a read outside the input."""
    from mlcc.errors import RuntimeStatusError
    feeds = {"x": rand(2, 2, 5, 5), "rois": np.array([[0, 1, 1, 2, 2], row], np.float32)}
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 2])
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(make_model([node], feeds, ["y"], opset=1), feeds, tmp_path)


def test_max_roi_pool_refusals(tmp_path):
    feeds = {"x": rand(1, 2, 5, 5), "rois": np.array([[0, 1, 1, 2, 2]], np.float32)}
    for attrs in ({"pooled_shape": [2, 0]}, {"pooled_shape": [2]},
                  {"pooled_shape": [2, 2], "spatial_scale": 0.0}):
        node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], name="mrp", **attrs)
        model = make_model([node], {"x": feeds["x"]}, [], opset=1,
                           initializers={"rois": feeds["rois"]})
        model.graph.output.append(helper.make_tensor_value_info("y", 1, list("rchw")))
        with pytest.raises(UnsupportedError, match="mrp"):
            compile_and_run(model, {"x": feeds["x"]}, tmp_path)


@pytest.mark.parametrize("attrs,group,og,with_mask,with_bias", [
    ({}, 1, 1, False, False),
    ({"pads": [1, 2, 0, 1], "strides": [2, 1]}, 1, 1, True, True),
    ({"dilations": [2, 1], "pads": [1, 1, 1, 1]}, 2, 2, True, False),
])
def test_deform_conv(tmp_path, attrs, group, og, with_mask, with_bias):
    """Offsets of up to +-3 pixels (taps landing outside the image too), groups and offset
    groups, strides, asymmetric pads, dilations, the mask and the bias."""
    x, w = rand(2, 4, 7, 6, seed=14), rand(6, 4 // group, 3, 2, seed=15)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    oh, ow = (7 + p[0] + p[2] - 2 * dh - 1) // sh + 1, (6 + p[1] + p[3] - dw - 1) // sw + 1
    feeds = {"x": x, "w": w, "offset": rand(2, og * 6 * 2, oh, ow, seed=16, low=-3, high=3)}
    names = ["x", "w", "offset", "b" if with_bias else "", "mask" if with_mask else ""]
    if with_bias:
        feeds["b"] = rand(6, seed=17)
    if with_mask:
        feeds["mask"] = rand(2, og * 6, oh, ow, seed=18, low=0, high=1)
    while not names[-1]:
        names.pop()
    node = helper.make_node("DeformConv", names, ["y"], group=group, offset_group=og, **attrs)
    check_model(make_model([node], feeds, ["y"], opset=19), feeds, tmp_path)


def test_grid_sample_and_deform_conv_threads_same_bits(tmp_path):
    """Above the threading threshold GridSample (every mode) and DeformConv split their
    output points between threads, each point's channels computed by one: 1, 2 and 3
    threads give the same bits, onnxruntime's values (DeformConv: 2 images, so that ranges
    cross from one image to the next)."""
    x, grid = rand(1, 13, 31, 29, seed=3), _grid(1, (37, 41), 2, seed=4)
    nodes = [helper.make_node("GridSample", ["x", "grid"], [f"y_{mode}"], mode=mode,
                              padding_mode="border")
             for mode in ("nearest", "linear", "cubic")]
    xd, w = rand(2, 8, 23, 19, seed=5), rand(24, 8, 3, 3, seed=6)   # 1.5 M multiply-adds
    offset = rand(2, 2 * 9 * 2, 23, 19, seed=7, low=-3, high=3)
    nodes.append(helper.make_node("DeformConv", ["xd", "w", "offset"], ["y_deform"],
                                  offset_group=2, pads=[1, 1, 1, 1]))
    feeds = {"x": x, "grid": grid, "xd": xd, "w": w, "offset": offset}
    model = make_model(nodes, feeds, [n.output[0] for n in nodes], opset=20)
    got = run_same_bits_on_threads(model, feeds, tmp_path)
    ref = reference_outputs(model, feeds)
    for name, r in ref.items():
        np.testing.assert_allclose(got[name], r, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("op", ["RoiAlign-avg", "RoiAlign-max", "MaxRoiPool"])
def test_rois_threads_same_bits(tmp_path, op):
    """Above the threading threshold RoiAlign and MaxRoiPool split their RoIs between threads,
    each RoI computed by one (every box checked before any is): 1, 2 and 3 threads give the
    same bits, onnxruntime's values. 61 boxes over two images of 16 channels."""
    rng = np.random.default_rng(len(op))
    x = rand(2, 16, 29, 31, seed=23, low=0.01, high=2.0)
    corners = rng.uniform(-3, 32, (61, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    idx = rng.integers(0, 2, 61)
    if op == "MaxRoiPool":
        rois = np.concatenate([idx[:, None].astype(np.float32), boxes], axis=1)
        node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[7, 6],
                                spatial_scale=0.9)
        feeds, opset = {"x": x, "rois": rois}, 1
    else:
        node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=7,
                                output_width=6, sampling_ratio=2, mode=op.split("-")[1])
        feeds, opset = {"x": x, "rois": boxes, "idx": idx}, 16
    model = make_model([node], feeds, ["y"], opset=opset)
    got = run_same_bits_on_threads(model, feeds, tmp_path)
    np.testing.assert_allclose(got["y"], reference_outputs(model, feeds)["y"], rtol=1e-5,
                               atol=1e-5)
