"""QuantizeLinear and DequantizeLinear beyond per-tensor uint8 (mlcc/ops/quant.py): int8,
int16, uint16, int32, int4, uint4, float8 and per-axis uint8, per tensor, per axis
(negative axis too) and per block (a last block cut short), ties rounding to even, saturation,
against onnxruntime (onnx.reference where it lacks a case); a run-time scale is refused by
name."""
import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import UnsupportedError
from util import check_model, check_node, compile_and_run, make_model, rand, reference_outputs


def _codes(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f" or dtype in (ml_dtypes.float8_e4m3fn,):
        return rng.uniform(-6, 6, shape).astype(dtype)
    info = ml_dtypes.iinfo(dtype) if dtype in (ml_dtypes.int4, ml_dtypes.uint4) else \
        np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def _param_shape(shape, axis, block):
    """The shape of a scale or zero point: per block, per axis (axis given) or per tensor."""
    if block:
        return [-(-d // block) if a == axis else d for a, d in enumerate(shape)]
    return [shape[axis]] if axis is not None else []


def _axis_attrs(axis, block):
    attrs = {} if axis is None else {"axis": axis}
    if block:
        attrs["block_size"] = block
    return attrs


@pytest.mark.parametrize("dtype,axis,block,zero_point", [
    (np.int8, 1, 0, True),                        # per axis, zero points
    (np.int16, None, 0, True),                    # per tensor
    (np.int32, None, 0, False),
    (np.uint8, -1, 0, True),                      # per axis, negative axis (not the u8 kernel)
    (ml_dtypes.int4, 1, 2, True),                 # per block of 2 along 5: 3 blocks
    (ml_dtypes.uint4, 0, 3, False),
    (ml_dtypes.float8_e4m3fn, None, 0, False),
])
def test_dequantize_runtime_input(tmp_path, dtype, axis, block, zero_point):
    x = _codes((4, 5, 3), dtype, seed=1)
    pshape = _param_shape(x.shape, axis, block)
    scale = rand(*pshape, seed=2, low=0.01, high=0.5) if pshape else np.array(0.05, np.float32)
    inits = {"scale": scale}
    if zero_point:
        inits["zp"] = _codes(pshape, dtype, seed=3)
    attrs = _axis_attrs(axis, block)
    check_node("DequantizeLinear", {"x": x}, initializers=inits, tmp_path=tmp_path, opset=21,
               **attrs)


def test_dequantize_runtime_scale_is_refused(tmp_path):
    x, scale = _codes((3, 4), np.int8, seed=4), np.array(0.1, np.float32)
    node = helper.make_node("DequantizeLinear", ["x", "scale"], ["y"], name="dq_node")
    model = make_model([node], {"x": x, "scale": scale}, ["y"], opset=21)
    with pytest.raises(UnsupportedError, match="dq_node.*x_scale.*must be a constant"):
        compile_and_run(model, {"x": x, "scale": scale}, tmp_path)


@pytest.mark.parametrize("dtype,axis,block,zero_point", [
    (np.int8, 1, 0, True),
    (np.int16, None, 0, True),
    (np.uint16, -1, 0, False),
    (ml_dtypes.uint4, 1, 2, True),
    (ml_dtypes.int4, None, 0, True),
])
def test_quantize_runtime_output(tmp_path, dtype, axis, block, zero_point):
    """x / scale lands on k + 0.5 for some elements (ties to even) and beyond the type's range
    for others (saturation)."""
    rng = np.random.default_rng(5)
    x = ((rng.integers(-300, 300, (4, 5, 3)) + 0.5) * 0.25).astype(np.float32)
    pshape = _param_shape(x.shape, axis, block)
    scale = np.full(pshape, 0.5, np.float32) if pshape else np.array(0.5, np.float32)
    if pshape:
        scale = scale * rng.choice([1.0, 2.0, 0.25], pshape).astype(np.float32)
    inits = {"scale": scale}
    if zero_point:
        inits["zp"] = _codes(pshape, dtype, seed=6)
    attrs = _axis_attrs(axis, block)
    if not zero_point:
        attrs["output_dtype"] = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    check_node("QuantizeLinear", {"x": x}, initializers=inits, tmp_path=tmp_path, opset=21,
               **attrs)


@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_float8(tmp_path, saturate):
    """Compared bit for bit: rounding to nearest even, overflow and infinity to 448 or NaN."""
    x = np.array([0.1, -3.3, 500.0, -1000.0, 447.0, 1e-4, np.inf, 2.25], np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["y"], saturate=saturate)
    model = make_model([node], {"x": x}, ["y"], opset=21, initializers={
        "scale": np.array(0.5, np.float32), "zp": np.zeros((), ml_dtypes.float8_e4m3fn)})
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    want = reference_outputs(model, {"x": x})["y"]
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8])
def test_quantize_runtime_scale_and_zero_point(tmp_path, zp_dtype):
    """A per-tensor scale and zero point computed at run time (DynamicQuantizeLinear's
    function body, quantize_dynamic's graphs), with ties and saturation."""
    rng = np.random.default_rng(7)
    x = ((rng.integers(-600, 600, (3, 7)) + 0.5) * 0.125).astype(np.float32)
    feeds = {"x": x, "scale": np.array(0.25, np.float32),
             "zp": np.array(3 if zp_dtype == np.uint8 else -2, zp_dtype)}
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["y"])
    check_model(make_model([node], feeds, ["y"], opset=13), feeds, tmp_path)
