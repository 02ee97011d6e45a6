"""Transpose, Concat, Split, Slice, Expand, Tile, DepthToSpace and SpaceToDepth against
onnxruntime on odd shapes and every dtype the runtime knows."""
import numpy as np
import pytest
from onnx import helper

from mlcc.errors import UnsupportedError
from util import DTYPES, arr, check_model, check_node, make_model, rand


# ---------------------------------------------------------------------------------- Transpose

@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_dtypes(tmp_path, dtype):
    check_node("Transpose", {"x": arr((3, 5, 7), dtype)}, tmp_path=tmp_path, perm=[2, 0, 1])


@pytest.mark.parametrize("shape,perm", [
    ((2, 3, 5, 7), None),                 # default: reversed axes
    ((2, 3, 5, 7), [0, 2, 3, 1]),         # NCHW -> NHWC
    ((1, 13, 1, 11), [3, 1, 2, 0]),       # size-1 axes merge away
    ((2, 3, 2, 3, 2), [4, 2, 0, 3, 1]),
])
def test_transpose_perms(tmp_path, shape, perm):
    attrs = {} if perm is None else {"perm": perm}
    check_node("Transpose", {"x": rand(*shape)}, tmp_path=tmp_path, **attrs)


def test_transpose_rank9_unrolls(tmp_path):
    """Nine axes of size 2 that do not merge: more than MLCC_MAX_RANK, split into several
    copies. (Graph inputs and outputs are limited to rank 8, so the rank-9 tensor is inner.)"""
    x = arr((8, 8, 8), "int8")
    nodes = [helper.make_node("Reshape", ["x", "s9"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[8, 7, 6, 5, 4, 3, 2, 1, 0]),
             helper.make_node("Reshape", ["t", "s3"], ["y"])]
    inits = {"s9": np.array([2] * 9, np.int64), "s3": np.array([8, 8, 8], np.int64)}
    check_model(make_model(nodes, {"x": x}, ["y"], initializers=inits), {"x": x}, tmp_path)


# ---------------------------------------------------------------------------------- Concat

@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "uint8"])
def test_concat_runtime_and_const(tmp_path, dtype):
    check_node("Concat", {"a": arr((2, 3, 5), dtype), "b": arr((2, 7, 5), dtype, 1)},
               initializers={"c": arr((2, 1, 5), dtype, 2)}, tmp_path=tmp_path, axis=1)


@pytest.mark.parametrize("axis", [0, -1, -2])
def test_concat_axes(tmp_path, axis):
    shapes = {0: [(1, 3, 4), (2, 3, 4), (4, 3, 4)], -1: [(2, 3, 1), (2, 3, 5), (2, 3, 2)],
              -2: [(2, 3, 4), (2, 1, 4), (2, 5, 4)]}[axis]
    inputs = {f"x{i}": rand(*s, seed=i) for i, s in enumerate(shapes)}
    check_node("Concat", inputs, tmp_path=tmp_path, axis=axis)


# ---------------------------------------------------------------------------------- Split

def test_split_attribute_opset11(tmp_path):
    check_node("Split", {"x": arr((3, 10, 2), "int32")}, tmp_path=tmp_path, opset=11,
               n_outputs=3, axis=1, split=[2, 5, 3])


def test_split_input_opset13_negative_axis(tmp_path):
    check_node("Split", {"x": rand(4, 3, 11)}, initializers={"s": np.array([4, 0, 7])},
               tmp_path=tmp_path, opset=13, n_outputs=3, axis=-1)


def test_split_equal(tmp_path):
    check_node("Split", {"x": arr((6, 5), "bool")}, tmp_path=tmp_path, opset=13, n_outputs=3)


def test_split_num_outputs_uneven_opset18(tmp_path):
    check_node("Split", {"x": rand(2, 11, 3)}, tmp_path=tmp_path, opset=18, n_outputs=4,
               axis=1, num_outputs=4)


# ---------------------------------------------------------------------------------- Slice

def test_slice_attributes_opset9(tmp_path):
    x = rand(5, 7, 9)
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -4], ends=[100, -1], axes=[2, 0])
    model = make_model([node], {"x": x}, [], opset=9)
    # ONNX shape inference leaves this output's shape unknown: state it as an exporter would.
    model.graph.output.append(helper.make_tensor_value_info("y", 1, [3, 7, 8]))
    check_model(model, {"x": x}, tmp_path)


I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [I64_MAX, 5], [1, 3], [2, 3]),           # INT64 max end, steps 2 and 3
    ([-1], [I64_MIN], [2], [-1]),                      # full reversal
    ([100, -2], [-100, 0], [1, -1], [-2, -3]),         # clamped starts, negative steps
    ([-20, 3], [20, 5], [0, 2], [1, 1]),               # clamped to the whole axis
    ([2, 1], [7, 9], [-3, -2], None),                  # negative axes, default steps
])
def test_slice_inputs(tmp_path, starts, ends, axes, steps):
    inits = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
             "axes": np.array(axes, np.int64)}
    if steps is not None:
        inits["steps"] = np.array(steps, np.int64)
    check_node("Slice", {"x": rand(3, 11, 7, 13)}, initializers=inits, tmp_path=tmp_path, opset=13)


@pytest.mark.parametrize("dtype", ["int64", "int8", "bool"])
def test_slice_dtypes_int32_params(tmp_path, dtype):
    check_node("Slice", {"x": arr((6, 9), dtype)},
               initializers={"starts": np.array([5, 1], np.int32),
                              "ends": np.array([0, 8], np.int32),
                              "axes": np.array([0, 1], np.int32),
                              "steps": np.array([-2, 3], np.int32)},
               tmp_path=tmp_path, opset=13)


def test_slice_runtime_starts_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="slice_node"):
        check_node("Slice", {"x": rand(4, 5), "starts": np.array([1], np.int64)},
                   initializers={"ends": np.array([3], np.int64)}, tmp_path=tmp_path)


# ---------------------------------------------------------------------------------- Expand

@pytest.mark.parametrize("dtype,in_shape,shape", [
    ("float32", (3, 1), [2, 3, 5]),
    ("int64", (1, 7, 1), [4, 1, 3]),        # target 1 keeps the input's 7
    ("bool", (5,), [3, 1]),
    ("uint8", (2, 1, 3), [2, 4, 3]),
])
def test_expand(tmp_path, dtype, in_shape, shape):
    check_node("Expand", {"x": arr(in_shape, dtype)},
               initializers={"shape": np.array(shape, np.int64)}, tmp_path=tmp_path)


# ---------------------------------------------------------------------------------- Tile

@pytest.mark.parametrize("dtype,shape,reps", [
    ("float32", (3, 5), [2, 3]),
    ("int32", (2, 1, 3), [1, 4, 2]),
    ("int8", (2, 3, 2, 3, 2), [2, 3, 2, 2, 3]),    # 10 interleaved axes: unrolled
    ("bool", (7,), [3]),
])
def test_tile(tmp_path, dtype, shape, reps):
    check_node("Tile", {"x": arr(shape, dtype)},
               initializers={"repeats": np.array(reps, np.int64)}, tmp_path=tmp_path)


# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

@pytest.mark.parametrize("mode,b,shape", [("DCR", 2, (2, 12, 3, 5)), ("CRD", 3, (1, 18, 5, 2)),
                                          ("DCR", 3, (1, 9, 1, 1))])
def test_depth_to_space(tmp_path, mode, b, shape):
    check_node("DepthToSpace", {"x": rand(*shape)}, tmp_path=tmp_path, blocksize=b, mode=mode)


def test_depth_to_space_opset9_int64(tmp_path):
    check_node("DepthToSpace", {"x": arr((1, 8, 3, 3), "int64")}, tmp_path=tmp_path, opset=9,
               blocksize=2)


@pytest.mark.parametrize("b,shape", [(2, (2, 3, 6, 10)), (3, (1, 2, 9, 3))])
def test_space_to_depth(tmp_path, b, shape):
    check_node("SpaceToDepth", {"x": rand(*shape)}, tmp_path=tmp_path, blocksize=b)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_mode(tmp_path, mode):
    """Opset 28's mode (onnx.reference: onnxruntime does not run opset 28)."""
    check_node("SpaceToDepth", {"x": rand(1, 3, 4, 6)}, tmp_path=tmp_path, opset=28,
               blocksize=2, mode=mode)


def test_chain_transpose_slice_concat(tmp_path):
    """Views and copies in a chain: a Reshape view read by several copies."""
    x = rand(2, 3, 8)
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Slice", ["t", "st", "en", "ax", "sp"], ["s"]),
        helper.make_node("Concat", ["s", "t"], ["y"], axis=2),
    ]
    inits = {"shape": np.array([6, 2, 4], np.int64), "st": np.array([3], np.int64),
             "en": np.array([0], np.int64), "ax": np.array([2], np.int64),
             "sp": np.array([-1], np.int64)}
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    check_model(model, {"x": x}, tmp_path)


def test_split_unread_output_is_not_copied(tmp_path):
    x = rand(4, 6)
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1),
             helper.make_node("Add", ["a", "c"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], opset=13)
    check_model(model, {"x": x}, tmp_path)
    model_c = next(tmp_path.glob("m*/out/model.c")).read_text()
    assert model_c.count("mlcc_copy_strided(") == 2
