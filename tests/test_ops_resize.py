"""Resize and Upsample against onnxruntime: nearest and linear, every coordinate mode and
nearest mode, scales and sizes, each opset's inputs, odd sizes up and down."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import UnsupportedError
from mlcc.ops.resize import linear_table, nearest_table, F32
from util import (check_model, compile_and_run, make_model, rand, reference_outputs,
                  run_same_bits_on_threads)


def resize(tmp_path, x, *, opset=19, scales=None, sizes=None, op="Resize", **attrs):
    """A one-node Resize model with constant scales or sizes, checked against onnxruntime."""
    inits = {}
    if op == "Upsample" or opset == 10:
        inits["scales"] = np.array(scales, np.float32)
        names = ["x", "scales"]
    else:
        inits["roi"] = np.zeros(0, np.float32)
        names = ["x", "roi"]
        if scales is not None:
            inits["scales"] = np.array(scales, np.float32)
            names.append("scales")
        else:
            # Opset 11 wants an (empty) scales tensor before sizes; 13+ takes "".
            if opset == 11:
                inits["no_scales"] = np.zeros(0, np.float32)
            names.append("no_scales" if opset == 11 else "")
            inits["sizes"] = np.array(sizes, np.int64)
            names.append("sizes")
    node = helper.make_node(op, names, ["y"], name="resize_node", **attrs)
    model = make_model([node], {"x": x}, ["y"], initializers=inits, opset=opset)
    return check_model(model, {"x": x}, tmp_path)


def test_yolov8_upsample(tmp_path):
    resize(tmp_path, rand(1, 5, 7, 9), opset=17, scales=[1, 1, 2, 2], mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@pytest.mark.parametrize("shape,scales,dtype", [
    ((1, 37, 23, 29), [1, 1, 2, 2], np.float32),      # rows repeated: copies inside a range
    ((2, 5, 61, 47), [1, 1, 0.6, 1.7], np.float32),   # down the height, up the width
    ((1, 67, 31, 19), [1, 1, 3, 2], np.uint8),
])
def test_nearest_threads_same_bits(tmp_path, shape, scales, dtype):
    """Above the threading threshold nearest splits the output rows (planes x out_h, in memory
    order) between threads, a range's first row gathered, not copied from the row before it:
    1, 2 and 3 threads give the same bits, onnxruntime's values."""
    x = rand(*shape, seed=5)
    x = (x * 100 + 100).astype(dtype) if dtype == np.uint8 else x
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest",
                            coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    model = make_model([node], {"x": x}, ["y"], initializers={
        "roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)}, opset=19)
    got = run_same_bits_on_threads(model, {"x": x}, tmp_path)
    np.testing.assert_array_equal(got["y"], reference_outputs(model, {"x": x})["y"])


@pytest.mark.parametrize("shape,scales,mode", [
    ((1, 37, 23, 29), [1, 1, 2, 2], "linear"),       # ranges that start inside a plane
    ((2, 5, 61, 47), [1, 1, 0.6, 1.7], "linear"),
    ((1, 1, 131, 89), [1, 1, 3, 2], "linear"),       # one plane: rows of it on each thread
    ((1, 37, 23, 29), [1, 1, 2, 2], "cubic"),        # the separable taps, split by planes
    ((3, 7, 31, 19), [1, 1, 1.5, 2.5], "cubic")])
def test_linear_and_cubic_threads_same_bits(tmp_path, shape, scales, mode):
    """Above the threading threshold a linear resize splits its output rows (planes x out_h,
    in memory order) between threads, each range blending its first source rows itself, and
    the separable (cubic) one its planes, each thread in its own scratch slice: 1, 2 and 3
    threads give the same bits, onnxruntime's values within tolerance."""
    x = rand(*shape, seed=7)
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode=mode,
                            coordinate_transformation_mode="half_pixel")
    model = make_model([node], {"x": x}, ["y"], initializers={
        "roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)}, opset=19)
    got = run_same_bits_on_threads(model, {"x": x}, tmp_path)
    np.testing.assert_allclose(got["y"], reference_outputs(model, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners",
                                   "pytorch_half_pixel", "half_pixel_symmetric"])
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
def test_nearest_modes(tmp_path, coord, nearest_mode):
    # Up on H (7 -> 17), down on W (13 -> 6): both directions in one call.
    resize(tmp_path, rand(2, 3, 7, 13), sizes=[2, 3, 17, 6], mode="nearest",
           coordinate_transformation_mode=coord, nearest_mode=nearest_mode)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "ceil"])
def test_nearest_tf_half_pixel_for_nn_opset11(tmp_path, nearest_mode):
    resize(tmp_path, rand(1, 2, 5, 11), opset=11, scales=[1, 1, 2.5, 0.5], mode="nearest",
           coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode=nearest_mode)


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners",
                                   "pytorch_half_pixel", "half_pixel_symmetric"])
@pytest.mark.parametrize("sizes", [[1, 3, 17, 6], [1, 3, 1, 29]])
def test_linear_modes(tmp_path, coord, sizes):
    resize(tmp_path, rand(1, 3, 7, 13), sizes=sizes, mode="linear",
           coordinate_transformation_mode=coord)


@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 1.5, 3], [1, 1, 0.5, 0.75],
                                    [1, 1, 1, 2.5]])
def test_linear_scales_opset13(tmp_path, scales):
    resize(tmp_path, rand(2, 2, 6, 8), opset=13, scales=scales, mode="linear")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64", "int32"])
def test_nearest_dtypes(tmp_path, dtype):
    rng = np.random.default_rng(0)
    x = (rng.random((1, 2, 5, 7)) > 0.5) if dtype == "bool" else \
        rng.integers(-100 if dtype != "uint8" else 0, 100, (1, 2, 5, 7)).astype(dtype)
    resize(tmp_path, x, scales=[1, 1, 2, 3], mode="nearest")


def test_nearest_bool(tmp_path):
    """Neither onnxruntime nor onnx.reference resizes bool tensors: compare with the same
    model run on uint8 by onnxruntime."""
    x = np.random.default_rng(1).random((1, 2, 5, 7)) > 0.5
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 0.5], np.float32)}
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest")
    got = compile_and_run(make_model([node], {"x": x}, ["y"], initializers=inits), {"x": x},
                          tmp_path)["y"]
    as_u8 = make_model([node], {"x": x.astype(np.uint8)}, ["y"], initializers=inits)
    want = reference_outputs(as_u8, {"x": x.astype(np.uint8)})["y"]
    assert got.dtype == bool
    np.testing.assert_array_equal(got, want.astype(bool))


@pytest.mark.parametrize("mode,scales", [("nearest", [1, 1, 2, 3]), ("nearest", [1, 1, 0.6, 0.5]),
                                         ("linear", [1, 1, 2, 1.5]), ("linear", [1, 1, 0.5, 0.8])])
def test_resize_opset10(tmp_path, mode, scales):
    resize(tmp_path, rand(1, 2, 5, 10), opset=10, scales=scales, mode=mode)


@pytest.mark.parametrize("opset,mode", [(7, "nearest"), (7, "linear"), (9, "nearest"),
                                        (9, "linear")])
def test_upsample(tmp_path, opset, mode):
    x = rand(1, 3, 4, 5)
    scales = [1.0, 1.0, 2.0, 3.0]
    if opset == 7:
        node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales)
        model = make_model([node], {"x": x}, ["y"], opset=7)
        check_model(model, {"x": x}, tmp_path)
    else:
        resize(tmp_path, x, opset=9, op="Upsample", scales=scales, mode=mode)


def test_axes_opset18_sizes(tmp_path):
    resize(tmp_path, rand(1, 2, 6, 9), opset=18, sizes=[4, 14], axes=[2, 3], mode="linear")


def test_axes_opset18_negative_scales(tmp_path):
    resize(tmp_path, rand(1, 2, 6, 9), opset=18, scales=[3.0], axes=[-1], mode="nearest")


def test_rank3_width_only(tmp_path):
    resize(tmp_path, rand(2, 5, 11), sizes=[2, 5, 23], mode="linear",
           coordinate_transformation_mode="align_corners")


def test_tables_match_reference_on_exact_cases():
    """Where no float32 tie is near, the tables equal onnx.reference's choice (ratio 2)."""
    np.testing.assert_array_equal(nearest_table("asymmetric", "floor", 8, 4, F32(2)),
                                  [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(nearest_table("half_pixel", "round_prefer_floor", 2, 4,
                                                F32(0.5)), [0, 2])
    i0, i1, w0, w1 = linear_table("half_pixel", 4, 2, F32(2))
    np.testing.assert_array_equal(i0, [0, 0, 0, 1])
    np.testing.assert_allclose(w1, [0.0, 0.25, 0.75, 0.5])


@pytest.mark.parametrize("attrs,match", [
    ({"mode": "area"}, "area"),
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize"},
     "tf_crop_and_resize"),
])
def test_refused_attributes(tmp_path, attrs, match):
    with pytest.raises(UnsupportedError, match=f"resize_node.*{match}"):
        resize(tmp_path, rand(1, 1, 4, 4), scales=[1, 1, 2, 2], **attrs)


def test_refused_channel_scaling(tmp_path):
    with pytest.raises(UnsupportedError, match="resize_node.*axis 1"):
        resize(tmp_path, rand(1, 2, 4, 4), scales=[1, 2, 2, 2], mode="nearest")


@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners",
                                   "pytorch_half_pixel", "half_pixel_symmetric"])
@pytest.mark.parametrize("sizes", [[1, 3, 17, 6], [2, 3, 1, 29]])
def test_cubic_modes(tmp_path, coord, sizes):
    resize(tmp_path, rand(sizes[0], 3, 7, 13), sizes=sizes, mode="cubic",
           coordinate_transformation_mode=coord)


@pytest.mark.parametrize("a,exclude", [(-0.5, 1), (-0.75, 1), (-0.6, 0)])
def test_cubic_coeff_exclude_outside(tmp_path, a, exclude):
    resize(tmp_path, rand(1, 2, 5, 11), scales=[1, 1, 2.6, 0.7], mode="cubic",
           cubic_coeff_a=a, exclude_outside=exclude)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("sizes", [[1, 2, 3, 5], [1, 2, 7, 19], [1, 2, 11, 4]])
def test_antialias(tmp_path, mode, sizes):
    # Down by 1/4 and 1/5 (wide filters), up on one axis (no stretching there).
    resize(tmp_path, rand(1, 2, 13, 23), opset=18, sizes=sizes, mode=mode, antialias=1)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_keep_aspect_ratio_policy(tmp_path, policy, mode):
    resize(tmp_path, rand(1, 3, 9, 14), opset=18, sizes=[5, 17], axes=[2, 3], mode=mode,
           keep_aspect_ratio_policy=policy)


def _reference(model, feeds):
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("extrapolation", [0.0, 7.5])
def test_tf_crop_and_resize(tmp_path, mode, extrapolation):
    """The roi reaches outside the input on both axes: those outputs are the extrapolation
    value. onnx.reference is the yardstick (onnxruntime has no tf_crop_and_resize cubic)."""
    x = rand(2, 3, 7, 11)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32)
    inits = {"roi": roi, "sizes": np.array([2, 3, 5, 13], np.int64)}
    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode=mode,
                            coordinate_transformation_mode="tf_crop_and_resize",
                            extrapolation_value=extrapolation)
    model = make_model([node], {"x": x}, ["y"], initializers=inits, opset=19)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    want = _reference(model, {"x": x})
    assert (want == extrapolation).any() and (want != extrapolation).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_align_corners_fractional_length(tmp_path, mode):
    """Scales whose output length scale x size is fractional (0.6 x 9 = 5.4, 1.7 x 7 = 11.9):
    mlcc divides by the fractional length as onnx.reference does (onnxruntime by the
    integer one)."""
    x = rand(1, 2, 7, 9)
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1.7, 0.6], np.float32)}
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode=mode,
                            coordinate_transformation_mode="align_corners")
    model = make_model([node], {"x": x}, ["y"], initializers=inits, opset=19)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_allclose(got, _reference(model, {"x": x}), rtol=1e-4, atol=1e-5)


def test_tf_crop_and_resize_scales_refused(tmp_path):
    x = rand(1, 1, 4, 4)
    inits = {"roi": np.array([0, 0, 0.2, 0.2, 1, 1, 0.8, 0.8], np.float32),
             "scales": np.array([1, 1, 2, 2], np.float32)}
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="linear",
                            coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(UnsupportedError, match="tf_crop_and_resize with scales"):
        compile_and_run(make_model([node], {"x": x}, ["y"], initializers=inits, opset=19),
                        {"x": x}, tmp_path)
