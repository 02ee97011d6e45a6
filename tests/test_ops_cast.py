"""Cast and CastLike between every pair of run-time types, against onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from mlcc.errors import UnsupportedError
from util import check_model, check_node, compile_and_run, make_model, reference_outputs

DTYPES = ["float32", "int64", "int32", "int8", "uint8", "bool"]

# Values every conversion handles the same way in ORT, numpy and mlcc: fractions of both signs
# (truncation toward zero), zeros, and integers that wrap when narrowed.
SAMPLES = {
    "float32": np.array([0.0, -0.0, 0.4, -0.6, 1.5, -2.5, 7.9, -8.99, 100.25, -127.5, 0.001,
                         -1e-3, 3.0, 126.7, -100.0], np.float32),
    "int64": np.array([0, 1, -1, 127, -128, 255, 256, 300, -300, 70000, -70000, 2**31 + 5,
                       -(2**31) - 7, 2**40 + 3, -(2**62)], np.int64),
    "int32": np.array([0, 1, -1, 127, -128, 255, 256, 300, -300, 70000, -70000, 2**31 - 1,
                       -(2**31), 12345678, -9], np.int32),
    "int8": np.array([0, 1, -1, 127, -128, 5, -5, 100, -100, 64, -64, 2, -2, 3, 9], np.int8),
    "uint8": np.array([0, 1, 255, 128, 127, 5, 200, 100, 64, 2, 3, 9, 250, 129, 17], np.uint8),
    "bool": np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1], bool),
}


@pytest.mark.parametrize("src", DTYPES)
def test_cast_to_every_type(tmp_path, src):
    x = SAMPLES[src].reshape(3, 5)
    targets = [d for d in DTYPES if d != src]
    if src == "float32":
        # Negative floats to uint8 are out of range (no ONNX-defined result): use magnitudes.
        nodes = [helper.make_node("Abs", ["x"], ["ax"])]
        nodes += [helper.make_node("Cast", ["x" if d != "uint8" else "ax"], [f"y_{d}"],
                                   to=helper.np_dtype_to_tensor_dtype(np.dtype(d)))
                  for d in targets]
    else:
        nodes = [helper.make_node("Cast", ["x"], [f"y_{d}"],
                                  to=helper.np_dtype_to_tensor_dtype(np.dtype(d)))
                 for d in targets]
    model = make_model(nodes, {"x": x}, [f"y_{d}" for d in targets], opset=13)
    check_model(model, {"x": x}, tmp_path)


def test_cast_odd_shape_large(tmp_path):
    x = np.random.default_rng(0).uniform(-1000, 1000, (3, 37, 41)).astype(np.float32)
    check_node("Cast", {"x": x}, tmp_path=tmp_path, to=TensorProto.INT32)


def test_cast_opset19_saturate_attribute(tmp_path):
    check_node("Cast", {"x": SAMPLES["int32"]}, tmp_path=tmp_path, opset=19,
               to=TensorProto.FLOAT, saturate=0)


def test_cast_same_type_graph_input_to_output(tmp_path):
    check_node("Cast", {"x": SAMPLES["int8"]}, tmp_path=tmp_path, to=TensorProto.INT8)


@pytest.mark.parametrize("opset", [15, 19])
def test_castlike(tmp_path, opset):
    x = SAMPLES["float32"]
    like = np.zeros((2,), np.int8)
    check_node("CastLike", {"x": x, "like": like}, tmp_path=tmp_path, opset=opset)


def test_castlike_const_target(tmp_path):
    check_node("CastLike", {"x": SAMPLES["int64"]}, initializers={"like": np.array([1.0],
               np.float32)}, tmp_path=tmp_path, opset=15)


WIDE = ["float16", "float64", "int16", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("other", WIDE)
def test_cast_float16_float64_and_wide_ints(tmp_path, other):
    """float32 <-> float16 (round to nearest even: ties, subnormals, overflow to inf), float64,
    and the 16/32/64-bit integer types, both ways and through int64, against onnxruntime."""
    if other.startswith("float"):
        x = np.array([0.0, -0.0, 1.0 / 3, 65504.0, 65520.0, 1e5, -1e5, 6e-8, 3e-8, 1e-10,
                      2049.0, 2051.0, -7.25, 0.1, np.inf, -np.inf, 1.00048828125,
                      1.0009765625 * 3], np.float32)
    else:
        x = np.array([0, 1, 2, 3, 100, 127, 200, 255, 1000, 4095, 30000, 65535, 7, 9, 11, 13,
                      17, 19], np.float32)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(other))
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=t),
             helper.make_node("Cast", ["a"], ["back"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["a"], ["wide"], to=TensorProto.INT64 if
                              not other.startswith("float") else TensorProto.DOUBLE),
             helper.make_node("Cast", ["wide"], ["again"], to=t)]
    feeds = {"x": x.reshape(3, 6)}
    model = make_model(nodes, feeds, ["a", "back", "wide", "again"], opset=13)
    got, ref = compile_and_run(model, feeds, tmp_path), reference_outputs(model, feeds)
    for name, r in ref.items():   # conversions are exact: bit for bit (inf included)
        assert got[name].dtype == r.dtype, name
        np.testing.assert_array_equal(got[name], r, err_msg=name)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_integer_arithmetic(tmp_path, dtype):
    """Add/Sub/Mul/Div/Mod/Max/Min/Pow on every integer type with broadcasting (odd shapes),
    wrap-around included, against onnxruntime."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    a = rng.integers(max(info.min, -100), min(info.max, 100), (3, 1, 7)).astype(dtype)
    b = rng.integers(1, min(info.max, 13), (5, 1)).astype(dtype)
    w = a.copy()
    w.flat[0] = info.max   # Add/Mul wrap around (onnxruntime computes int64 Mod in double:
    # not at the extremes)
    ops = ["Add", "Sub", "Mul", "Div", "Max", "Min"]
    nodes = [helper.make_node(op, ["w" if op in ("Add", "Mul") else "a", "b"], [f"y_{op}"])
             for op in ops]
    nodes.append(helper.make_node("Mod", ["a", "b"], ["y_Mod"], fmod=1))
    ops.append("Mod")
    if dtype in ("int32", "int64"):
        nodes.append(helper.make_node("Pow", ["p", "b"], ["y_Pow"]))   # no overflow
        nodes.append(helper.make_node("Mod", ["a", "b"], ["y_ModPy"]))
        ops += ["Pow", "ModPy"]
    feeds = {"a": a, "b": b, "w": w}
    if "Pow" in ops:
        feeds["p"] = rng.integers(-5, 6, (3, 1, 7)).astype(dtype)
    # opset 14: Add/Sub/Mul/Div take 8- and 16-bit integers from version 14 on
    model = make_model(nodes, feeds, [f"y_{op}" for op in ops], opset=14)
    check_model(model, feeds, tmp_path)


def test_cast_to_string_refused(tmp_path):
    # float8 and the other storage types: tests/test_cast_storage.py
    with pytest.raises(UnsupportedError, match="cast_node.*STRING.*strings have no run-time"):
        check_node("Cast", {"x": SAMPLES["float32"]}, tmp_path=tmp_path, opset=19,
                   to=TensorProto.STRING)
