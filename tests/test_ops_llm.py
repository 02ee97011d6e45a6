"""The default domain's newer operators around LLMs, against the ONNX reference: TensorScatter
(opset 24, KV-cache updates: linear and circular, every axis but the batch, run-time and
constant write indices, out-of-range writes), SwiGLU (opset 28) and BitCast (opset 26, every
pair of types of one width, sub-byte ones included)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import mlcc
from mlcc.errors import MlccError, RuntimeStatusError
from util import arr, assert_refused, check_model, compile_and_run, make_model, rand


def one_node(op, feeds, opset, **attrs):
    node = helper.make_node(op, list(feeds), ["y"], name=f"{op.lower()}_node", **attrs)
    return make_model([node], feeds, ["y"], opset=opset)


# ------------------------------------------------------------------------------ TensorScatter

@pytest.mark.parametrize("shape,upd_len,axis", [
    ((2, 3, 11, 5), 3, -2),             # [batch, heads, max_seq, head]
    ((3, 7, 4), 2, 1),                  # [batch, max_seq, hidden]
    ((2, 13), 5, 1),                    # the sequence axis last
    ((2, 5, 3, 2), 5, 1),               # the whole cache rewritten
])
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_tensor_scatter(tmp_path, shape, upd_len, axis, mode, dtype):
    ax = axis % len(shape)
    upd_shape = shape[:ax] + (upd_len,) + shape[ax + 1:]
    max_seq = shape[ax]
    if mode == "linear":
        idx = np.array([max_seq - upd_len, 0, 1][:shape[0]], np.int64)
    else:
        idx = np.array([max_seq - 1, 3 * max_seq + 2, -4][:shape[0]], np.int64)
    feeds = {"past": arr(shape, dtype), "update": arr(upd_shape, dtype, seed=1),
             "write_indices": idx}
    check_model(one_node("TensorScatter", feeds, 24, mode=mode, axis=axis), feeds, tmp_path,
                reference="onnx")


def test_tensor_scatter_without_indices(tmp_path):
    feeds = {"past": rand(2, 2, 7, 3), "update": rand(2, 2, 4, 3, seed=1)}
    check_model(one_node("TensorScatter", feeds, 24), feeds, tmp_path, reference="onnx")


@pytest.mark.parametrize("idx", [[5, 0], [-1, 2]])
def test_tensor_scatter_linear_out_of_range_is_a_status(tmp_path, idx):
    feeds = {"past": rand(2, 7, 3), "update": rand(2, 3, 3, seed=1),
             "write_indices": np.array(idx, np.int64)}
    node = helper.make_node("TensorScatter", list(feeds), ["y"], name="ts", axis=1)
    model = make_model([node], feeds, ["y"], opset=24)
    with pytest.raises(RuntimeStatusError, match="out of range"):
        compile_and_run(model, feeds, tmp_path)


def test_tensor_scatter_constant_indices_are_checked_at_compile_time(tmp_path):
    feeds = {"past": rand(2, 7, 3), "update": rand(2, 3, 3, seed=1)}
    node = helper.make_node("TensorScatter", ["past", "update", "w"], ["y"], name="ts", axis=1)
    model = make_model([node], feeds, ["y"], opset=24,
                       initializers={"w": np.array([5, 0], np.int64)})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(MlccError, match="do not fit"):
        mlcc.compile(path, tmp_path / "out")


# ------------------------------------------------------------------------------------ SwiGLU

@pytest.mark.parametrize("shape,alpha", [((3, 7, 11), None), ((13,), 1.702), ((2, 5), -0.5)])
def test_swiglu(tmp_path, shape, alpha):
    feeds = {"a": rand(*shape, low=-9, high=9), "b": rand(*shape, seed=1)}
    attrs = {} if alpha is None else {"alpha": alpha}
    check_model(one_node("SwiGLU", feeds, 28, **attrs), feeds, tmp_path, reference="onnx")


# ----------------------------------------------------------------------------------- BitCast

PAIRS = [("float32", "int32"), ("int32", "float32"), ("float32", "uint32"),
         ("int64", "float64"), ("float64", "uint64"), ("uint16", "int16"),
         ("float16", "int16"), ("bfloat16", "uint16"), ("int8", "uint8"), ("bool", "uint8"),
         ("uint8", "float8_e4m3fn"), ("int4", "uint4"), ("float32", "float32")]


@pytest.mark.parametrize("src,dst", PAIRS)
@pytest.mark.parametrize("through", [False, True])
def test_bitcast(tmp_path, src, dst, through):
    """Every pair bit for bit; `through`: of an intermediate (a view of it) and read again."""
    import ml_dtypes  # noqa: F401
    rng = np.random.default_rng(0)
    n = 7 * 3 * np.dtype(src).itemsize
    raw = rng.integers(0, 256, n, dtype=np.uint8)
    x = raw.view(np.dtype(src)).reshape(7, 3, -1) if src not in ("bool", "int4") else None
    if src == "bool":
        x = raw.reshape(7, 3, -1) > 127
    if src == "int4":
        x = rng.integers(-8, 8, (7, 3, 2)).astype(ml_dtypes.int4)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    feeds = {"x": x}
    if through and src in ("int4", "bfloat16"):
        pytest.skip("a storage-only type is not transposed")
    if through:          # a view of an intermediate, then a copy back to the input type
        nodes = [helper.make_node("Identity", ["x"], ["t"]),
                 helper.make_node("Transpose", ["t"], ["u"], perm=[1, 0, 2]),
                 helper.make_node("BitCast", ["u"], ["v"], name="bitcast_node", to=to),
                 helper.make_node("BitCast", ["v"], ["y"], to=helper.np_dtype_to_tensor_dtype(
                     x.dtype))]
        model = make_model(nodes, feeds, ["y"], opset=26)
    else:
        node = helper.make_node("BitCast", ["x"], ["y"], name="bitcast_node", to=to)
        model = make_model([node], feeds, ["y"], opset=26)
    got = compile_and_run(model, feeds, tmp_path)["y"]
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert got.tobytes() == ref.tobytes()


@pytest.mark.parametrize("src,to,message", [
    ("float32", TensorProto.INT64, "widths must be equal"),
    ("uint8", TensorProto.INT4, "widths must be equal"),
])
def test_bitcast_refusals(tmp_path, src, to, message):
    node = helper.make_node("BitCast", ["x"], ["y"], name="bitcast_node", to=to)
    assert_refused(tmp_path, node, {"x": arr((3, 2), src)}, 26, message, out_type=to)
