"""Pad against onnxruntime: each opset's way of passing pads and values, modes constant,
reflect, edge and wrap, negative pads (cropping), axes, every dtype."""
import numpy as np
import pytest

from mlcc.errors import UnsupportedError
from util import DTYPES, arr, check_node, rand


@pytest.mark.parametrize("opset,mode", [(7, "constant"), (10, "reflect"), (10, "edge")])
def test_pad_attributes(tmp_path, opset, mode):
    check_node("Pad", {"x": rand(2, 3, 5, 7)}, tmp_path=tmp_path, opset=opset, mode=mode,
               pads=[0, 1, 2, 3, 0, 2, 1, 0], value=1.5)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [
    [0, 0, 1, 2, 0, 0, 3, 1],          # spatial, asymmetric
    [1, 2, 0, 0, 0, 1, 0, 0],          # batch and channel only: rows copied whole
    [0, 0, -1, 2, 0, 0, 3, -2],        # crop and pad on the same axes
    [0, 0, 0, 0, 0, 0, 0, 0],
])
def test_pad_modes_opset13(tmp_path, mode, pads):
    check_node("Pad", {"x": rand(2, 3, 5, 7)},
               initializers={"pads": np.array(pads, np.int64)}, tmp_path=tmp_path, opset=13,
               mode=mode)


def test_pad_constant_value_input(tmp_path):
    check_node("Pad", {"x": rand(3, 11)},
               initializers={"pads": np.array([2, -3, 1, 4], np.int64),
                             "v": np.array(-7.25, np.float32)}, tmp_path=tmp_path, opset=11)


@pytest.mark.parametrize("dtype,value", [("int64", 9), ("int32", -3), ("int8", -128),
                                         ("uint8", 200), ("bool", True)])
def test_pad_dtypes(tmp_path, dtype, value):
    check_node("Pad", {"x": arr((3, 4, 5), dtype)},
               initializers={"pads": np.array([1, 0, 2, 0, 3, 1], np.int64),
                             "v": np.array(value, dtype)}, tmp_path=tmp_path, opset=13)


@pytest.mark.parametrize("dtype", ["int8", "int64"])
def test_pad_reflect_dtypes(tmp_path, dtype):
    check_node("Pad", {"x": arr((4, 6), dtype)},
               initializers={"pads": np.array([3, 2, 1, 5], np.int64)}, tmp_path=tmp_path,
               opset=13, mode="reflect")


def test_pad_axes_opset18(tmp_path):
    check_node("Pad", {"x": rand(2, 3, 5, 7)},
               initializers={"pads": np.array([1, 2, 3, 0], np.int64),
                             "v": np.array(0.5, np.float32),
                             "axes": np.array([-1, 1], np.int64)},
               tmp_path=tmp_path, opset=18)


@pytest.mark.parametrize("pads", [[0, 3, 1, 2], [0, -2, 2, 3], [2, 7, 1, 2]])
def test_pad_wrap_opset19(tmp_path, pads):
    check_node("Pad", {"x": rand(3, 6)}, initializers={"pads": np.array(pads, np.int64)},
               tmp_path=tmp_path, opset=19, mode="wrap")


def test_pad_rank5(tmp_path):
    check_node("Pad", {"x": rand(2, 3, 2, 3, 4)},
               initializers={"pads": np.array([1, 0, 1, 0, 2, 0, 1, 0, 1, 1], np.int64)},
               tmp_path=tmp_path, opset=13, mode="edge")


def test_pad_runtime_pads_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="pad_node.*pads"):
        check_node("Pad", {"x": rand(3, 4), "pads": np.array([1, 1, 1, 1], np.int64)},
                   tmp_path=tmp_path, opset=13)
