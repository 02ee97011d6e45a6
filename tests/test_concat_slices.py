"""Concat without copies (ops/movement.py Concat.lower, Lowering.slice_alias): an input that
is one aligned, contiguous run of the output is computed straight into it (SqueezeNet's fire
modules: the 1x1 and 3x3 expand convolutions write their channels of the Concat), and every
case where that would be wrong keeps its copy. Results against onnxruntime, copies counted in
the generated C."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

from mlcc.codegen.memory import plan_memory
from mlcc.ir import Graph, Program
from mlcc.ir.graph import Value
from mlcc.ir.program import KernelCall
from test_targets_arm import needs_arm
from test_targets_wasm import needs_wasm
from util import check_model, make_model, rand

TARGETS = ("x86", "x86-native")
CROSS = [pytest.param("arm", marks=needs_arm), pytest.param("wasm", marks=needs_wasm)]


def _copies(tmp_path) -> int:
    """The Concat nodes' copy calls in the generated C."""
    model_c = sorted(tmp_path.glob("m*/out/model.c"))[-1].read_text()
    return len(re.findall(r"\(Concat\): .*\*/\n\s*mlcc_copy_strided\(", model_c))


def _conv(name, x, w, y, k, pad=0, relu=True):
    nodes = [helper.make_node("Conv", [x, w, f"{w}_b"], [y + ("_c" if relu else "")],
                              name=name, kernel_shape=[k, k], pads=[pad] * 4)]
    if relu:
        nodes.append(helper.make_node("Relu", [y + "_c"], [y]))
    return nodes


def _weights(specs, seed=10):
    inits = {}
    for i, (w, cout, cin, k) in enumerate(specs):
        inits[w] = rand(cout, cin, k, k, seed=seed + i) * 0.3
        inits[f"{w}_b"] = rand(cout, seed=seed + 50 + i) * 0.1
    return inits


def _fire(cin, squeeze, e1, e3, hw, order=("a", "b")):
    """x -> squeeze 1x1 -> (expand 1x1 a, expand 3x3 pad 1 b) -> Concat in this order (b, a:
    the part computed second comes first) -> MaxPool 3x3/2 -> 1x1."""
    nodes = (_conv("squeeze", "x", "ws", "s", 1) + _conv("expand1", "s", "w1", "a", 1)
             + _conv("expand3", "s", "w3", "b", 3, pad=1)
             + [helper.make_node("Concat", list(order), ["cat"], axis=1),
                helper.make_node("MaxPool", ["cat"], ["p"], kernel_shape=[3, 3],
                                 strides=[2, 2])]
             + _conv("head", "p", "wh", "y", 1, relu=False))
    inits = _weights([("ws", squeeze, cin, 1), ("w1", e1, squeeze, 1), ("w3", e3, squeeze, 3),
                      ("wh", 7, e1 + e3, 1)])
    x = rand(1, cin, hw, hw, seed=1)
    return make_model(nodes, {"x": x}, ["y"], initializers=inits), {"x": x}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
@pytest.mark.parametrize("cin,squeeze,e1,e3,hw,copies", [
    (24, 16, 64, 64, 16, 0),       # both expands written into the Concat
    (37, 11, 17, 33, 12, 0),       # 17 x 144 floats: the 3x3's part starts on 64 bytes
    (13, 5, 3, 19, 11, 1),         # 3 x 121 floats: the 3x3's part is unaligned, copied
])
def test_fire_module(tmp_path, target, order, cin, squeeze, e1, e3, hw, copies):
    model, feeds = _fire(cin, squeeze, e1, e3, hw, order)
    check_model(model, feeds, tmp_path, target=target)
    assert _copies(tmp_path) == copies


@pytest.mark.parametrize("target", CROSS)
def test_fire_module_on_cross_targets(tmp_path, target):
    # the slices' defines in the generated C on arm (qemu) and wasm (node): the part computed
    # second first, an unaligned part copied
    model, feeds = _fire(13, 5, 3, 19, 11, ("b", "a"))
    check_model(model, feeds, tmp_path, target=target)
    assert _copies(tmp_path) == 1


@pytest.mark.parametrize("hw", [7, 14, 23])
def test_writers_stay_in_their_part(tmp_path, hw):
    # every kind of producer written into a Concat whose parts are in the reverse order of
    # computation: a kernel that wrote past its part would overwrite one computed before it
    x = rand(1, 16, hw, hw, seed=6)
    dw = dict(group=16, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = (_conv("c1", "x", "w1", "p1", 1) + _conv("c3", "x", "w3", "p3", 3, pad=1)
             + [helper.make_node("Conv", ["x", "wd"], ["p_dw"], name="dw", **dw),
                helper.make_node("Conv", ["x", "wd"], ["p_dw2"], name="dw2", strides=[2, 2],
                                 **dw),
                helper.make_node("Resize", ["p_dw2", "", "sc"], ["p_up"], mode="nearest"),
                helper.make_node("MaxPool", ["x"], ["p_mp"], kernel_shape=[3, 3],
                                 pads=[1, 1, 1, 1]),
                helper.make_node("Sigmoid", ["p1"], ["p_sg"]),
                helper.make_node("Add", ["p3", "x"], ["p_add"])])
    parts = ["p_add", "p_sg", "p_mp", "p_dw", "p3", "p1"]
    if hw % 2 == 0:
        parts.insert(0, "p_up")
    nodes.append(helper.make_node("Concat", parts, ["cat"], axis=1))
    nodes.append(helper.make_node("Mul", ["cat", "cat"], ["y"]))
    inits = {**_weights([("w1", 16, 16, 1), ("w3", 16, 16, 3)]),
             "wd": rand(16, 1, 3, 3, seed=7), "sc": np.array([1, 1, 2, 2], np.float32)}
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    check_model(model, {"x": x}, tmp_path, target="x86-native")
    assert _copies(tmp_path) == 0


def test_nested_concat_and_a_second_reader(tmp_path):
    # cat2 = Concat(Concat(a, b), c): a and b go to cat2 through cat1; b is also read by a
    # later Add (reading the slice), c by a Sigmoid before the Concat
    x = rand(1, 16, 8, 8, seed=2)
    nodes = (_conv("ca", "x", "wa", "a", 1) + _conv("cb", "x", "wb", "b", 3, pad=1)
             + _conv("cc", "x", "wc", "c", 1)
             + [helper.make_node("Sigmoid", ["c"], ["cs"]),
                helper.make_node("Concat", ["a", "b"], ["cat1"], axis=1),
                helper.make_node("Concat", ["cat1", "c"], ["cat2"], axis=1),
                helper.make_node("Add", ["b", "a"], ["ab"]),
                helper.make_node("ReduceMean", ["cat2"], ["m"], axes=[2, 3], keepdims=1),
                helper.make_node("Mul", ["ab", "cs"], ["y1"])])
    inits = _weights([("wa", 16, 16, 1), ("wb", 16, 16, 3), ("wc", 16, 16, 1)])
    model = make_model(nodes, {"x": x}, ["y1", "m"], initializers=inits)
    check_model(model, {"x": x}, tmp_path, target="x86-native")
    assert _copies(tmp_path) == 0


def test_cases_that_keep_their_copies(tmp_path):
    # a graph input, a constant, a repeated input, a graph output and a batch of 2 (the parts
    # are not contiguous) are copied; the results are right either way
    x = rand(1, 16, 4, 4, seed=3)
    x2 = rand(2, 16, 4, 4, seed=4)
    nodes = (_conv("ca", "x", "wa", "a", 1) + _conv("cb", "x", "wb", "b", 1)
             + _conv("c2", "x2", "w2", "d", 1)
             + [helper.make_node("Concat", ["x", "k", "a", "a"], ["cat1"], axis=1),
                helper.make_node("Concat", ["d", "d"], ["cat2"], axis=1),
                helper.make_node("Concat", ["a", "b"], ["cat3"], axis=1),
                helper.make_node("Relu", ["cat3"], ["r3"])])
    inits = {**_weights([("wa", 16, 16, 1), ("wb", 16, 16, 1), ("w2", 16, 16, 1)]),
             "k": rand(1, 16, 4, 4, seed=5)}
    model = make_model(nodes, {"x": x, "x2": x2}, ["cat1", "cat2", "b", "r3"],
                       initializers=inits)
    check_model(model, {"x": x, "x2": x2}, tmp_path, target="x86-native")
    # cat1: x, k and both a's are copied (cat1 is an output); cat2: batch 2, both copied;
    # cat3: a into place, b (an output) copied
    assert _copies(tmp_path) == 4 + 2 + 1


def test_in_place_never_takes_a_slice():
    # a and b are slices of cat; f declares in_place (z, a) and reads a last, g likewise
    # (cat, y): neither the slice's output nor an output into a slice shares bytes
    values = {n: Value(n, "uint8", (s,)) for n, s in
              {"x": 64, "a": 2048, "b": 2048, "cat": 4096, "z": 2048, "w": 64}.items()}
    g = Graph("g", [], values, ["x"], ["w"], 17)
    prog = Program(g, [KernelCall("p", ["x", "a"], ["a"]), KernelCall("q", ["x", "b"], ["b"]),
                       KernelCall("r", ["cat", "w"], ["w"]),
                       KernelCall("f", ["a", "z"], ["z"], in_place=(("z", "a"),)),
                       KernelCall("h", ["z", "w"], ["w"])])
    prog.aliases.update(a="cat", b="cat")
    prog.slices.update(a=0, b=2048)
    plan = plan_memory(prog, {"w": 0})
    assert plan.storage["z"].index != plan.storage["cat"].index
    assert prog.byte_offset("b") == 2048 and prog.is_slice("b") and not prog.is_slice("cat")
