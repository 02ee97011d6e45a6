"""The residual Add (or two-input Sum) folded into the 1x1 Conv that produces one operand
(passes.fuse_residual_add), with a following activation fused after it: the graph after the
pipeline, the numbers against onnxruntime, and the same bits as the unfused graph (the epilogue
sums conv + bias, then the residual, then applies the activation, as the separate nodes do)."""
import numpy as np
import pytest
from onnx import helper

import mlcc.passes as passes
from util import check_model, compile_and_run, make_model, rand
from test_fusions import _graph, _ops


def _block(add_op="Add", swap=False, act="Relu", c=13, m=13, hw=(9, 7), bias=True):
    """x -> 3x3 conv (the branch), 1x1 conv of the branch + x -> act: a ResNet block's tail."""
    x = rand(1, c, *hw)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="c3", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["hr"], name="r1"),
             helper.make_node("Conv", ["hr", "w2"] + (["b2"] if bias else []), ["p"], name="c1")]
    nodes.append(helper.make_node(add_op, ["x", "p"] if swap else ["p", "x"], ["s"], name="add"))
    out = "s"
    if act:
        nodes.append(helper.make_node(act, ["s"], ["y"], name="act"))
        out = "y"
    inits = {"w1": rand(m, c, 3, 3, seed=1) * 0.3, "b1": rand(m, seed=2),
             "w2": rand(c, m, 1, 1, seed=3) * 0.3, "b2": rand(c, seed=4)}
    return make_model(nodes, {"x": x}, [out], initializers=inits), x, out


@pytest.mark.parametrize("case", [
    dict(add_op="Add", swap=True, act=None, target="x86"),
    # 300 channels (two k blocks) on 15 x 17 positions (two gathered column blocks of 192, the
    # last partial), no bias, a Relu after the residual
    dict(add_op="Sum", act="Relu", c=300, m=11, hw=(15, 17), bias=False, target="x86-native"),
])
def test_residual_add_fuses_into_1x1_conv(tmp_path, monkeypatch, case):
    target = case.pop("target")
    model, x, out = _block(**case)
    g = _graph(model, tmp_path)
    tail = "Conv+Add" if case["add_op"] == "Add" else "Conv+Sum"
    assert _ops(g) == ["Conv+Relu", tail + ("+Relu" if case["act"] else "")]
    fused = g.nodes[1]
    assert fused.attrs["_residual"] and fused.inputs[3] == "x"
    got = check_model(model, {"x": x}, tmp_path / "fused", target=target)
    monkeypatch.setattr(passes, "PIPELINE", passes.INT8_PIPELINE)
    plain = compile_and_run(model, {"x": x}, tmp_path / "plain", target=target)
    assert np.array_equal(got[out], plain[out])


def test_residual_not_fused_where_the_kernel_cannot(tmp_path):
    x = rand(1, 6, 5, 5)
    inits = {"w1": rand(6, 6, 1, 1, seed=1), "w3": rand(6, 6, 3, 3, seed=2),
             "wg": rand(6, 3, 1, 1, seed=3), "bc": rand(6, 1, 1, seed=4)}
    nodes = [
        # the conv output read twice: it must stay
        helper.make_node("Conv", ["x", "w1"], ["a"], name="shared"),
        helper.make_node("Add", ["a", "x"], ["s1"], name="add1"),
        helper.make_node("Mul", ["a", "s1"], ["m1"], name="mul1"),
        # 3x3: the implicit GEMM takes no residual
        helper.make_node("Conv", ["m1", "w3"], ["b"], name="k3", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "x"], ["s2"], name="add2"),
        # grouped 1x1
        helper.make_node("Conv", ["s2", "wg"], ["c"], name="grouped", group=2),
        helper.make_node("Add", ["c", "x"], ["s3"], name="add3"),
        # a broadcast operand
        helper.make_node("Conv", ["s3", "w1"], ["d"], name="bcast"),
        helper.make_node("Add", ["d", "r"], ["y"], name="add4"),
    ]
    model = make_model(nodes, {"x": x, "r": rand(1, 6, 1, 5, seed=5)}, ["y"],
                       initializers={k: v for k, v in inits.items() if k != "bc"})
    g = _graph(model, tmp_path)
    assert not any(n.attrs.get("_residual") for n in g.nodes)
    assert [n.op_type for n in g.nodes].count("Add") == 4
