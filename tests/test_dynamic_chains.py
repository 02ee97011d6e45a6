"""Chains of a detector's postprocess over sizes that depend on the data
(docs/dynamic-outputs.md): GatherND with indices of a data-dependent size (NonZero ->
Transpose -> GatherND) or data carrying one, against onnxruntime with counts of 0, 1, some
and the maximum, and the refusals that remain. The same kernels on arm and wasm:
tests/test_cross_targets.py."""
import numpy as np
import onnx
import pytest
from onnx import helper

import mlcc
from mlcc.errors import RuntimeStatusError, UnsupportedError
from util import check_model, make_model, rand


def fills(shape, seed=0):
    """Inputs for a `> 0.5` mask: none, one, some and every element above it."""
    x = rand(*shape, seed=seed)
    one = np.zeros(shape, np.float32)
    one.reshape(-1)[-1] = 2.0
    return [np.full(shape, -1, np.float32), one, x, np.full(shape, 3, np.float32) + x]


def selected_rows(x_shape, mask_axes, extra=(), batch_dims=0, unsqueeze=False):
    """Greater -> NonZero -> Transpose -> GatherND(x, the coordinates of the mask)."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["s"], name="score", keepdims=0,
                              axes=list(range(mask_axes, len(x_shape))))
             if mask_axes < len(x_shape) else helper.make_node("Identity", ["x"], ["s"]),
             helper.make_node("Greater", ["s", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["idx"], name="tr", perm=[1, 0])]
    idx = "idx"
    if unsqueeze:
        nodes.append(helper.make_node("Unsqueeze", ["idx", "ax0"], ["idx3"], name="unsq"))
        idx = "idx3"
    nodes.append(helper.make_node("GatherND", ["x", idx], ["y"], name="gnd",
                                  batch_dims=batch_dims))
    nodes += extra
    return nodes


@pytest.mark.parametrize("x_shape,mask_axes", [((7, 5), 2), ((3, 5, 4), 2), ((11, 3), 1)])
def test_gathernd_of_nonzero_coordinates(tmp_path, x_shape, mask_axes):
    inits = {"thr": np.array(0.5, np.float32)}
    nodes = selected_rows(x_shape, mask_axes,
                          [helper.make_node("Mul", ["y", "two"], ["y2"], name="double")])
    inits["two"] = np.array(2, np.float32)
    model = make_model(nodes, {"x": rand(*x_shape)}, ["y2", "idx"], initializers=inits,
                       opset=17)
    sizes = []
    for i, x in enumerate(fills(x_shape)):
        got = check_model(model, {"x": x}, tmp_path / str(i))
        sizes.append(got["y2"].shape[0])
    full = int(np.prod(x_shape[:mask_axes]))
    assert sizes[0] == 0 and sizes[1] == 1 and 1 < sizes[2] < full and sizes[3] == full


def test_gathernd_counted_with_batch_dims(tmp_path):
    """Indices [1, N, 2] (an Unsqueeze of the coordinates) into data [1, 5, 6, 3] with
    batch_dims 1: the count stays on axis 1 of the output [1, N, 3]."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["s4"], name="score", keepdims=0, axes=[3]),
             helper.make_node("Squeeze", ["s4", "ax0"], ["s"], name="sq"),
             helper.make_node("Greater", ["s", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["idx"], name="tr", perm=[1, 0]),
             helper.make_node("Unsqueeze", ["idx", "ax0"], ["idx3"], name="unsq"),
             helper.make_node("GatherND", ["x", "idx3"], ["y"], name="gnd", batch_dims=1)]
    inits = {"thr": np.array(0.5, np.float32), "ax0": np.array([0], np.int64)}
    model = make_model(nodes, {"x": rand(1, 5, 6, 3)}, ["y"], initializers=inits, opset=17)
    for i, x in enumerate(fills((1, 5, 6, 3), seed=3)):
        got = check_model(model, {"x": x}, tmp_path / str(i))
        assert got["y"].shape[::2] == (1, 3)


def test_gathernd_of_data_with_a_counted_trailing_axis(tmp_path):
    """Data NonZero's [2, N] (the count on a sliced axis), constant tuples of 1: [3, N]."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("GatherND", ["nz", "rows"], ["y"], name="gnd")]
    inits = {"thr": np.array(0.5, np.float32),
             "rows": np.array([[1], [0], [-1]], np.int64)}
    model = make_model(nodes, {"x": rand(3, 7)}, ["y"], initializers=inits, opset=17)
    for i, x in enumerate(fills((3, 7), seed=5)):
        check_model(model, {"x": x}, tmp_path / str(i))


def test_gathernd_checks_only_the_valid_tuples(tmp_path):
    """Coordinates - (5, 0) into data [4, 9]: the valid rows (1 to 4 of the mask) are in
    range, the padding's (-5, 0) is not and must not fail the run; a valid tuple out of range
    (row 0 of the mask) is a status."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["idx"], name="tr", perm=[1, 0]),
             helper.make_node("Sub", ["idx", "shift"], ["idx2"], name="shift"),
             helper.make_node("GatherND", ["d", "idx2"], ["y"], name="gnd")]
    inits = {"thr": np.array(0.5, np.float32), "shift": np.array([5, 0], np.int64),
             "d": rand(4, 9)}
    model = make_model(nodes, {"x": rand(5, 9)}, ["y"], initializers=inits, opset=17)
    onnx.save(model, tmp_path / "m.onnx")
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    m = mlcc.load(tmp_path / "out")
    x = np.zeros((5, 9), np.float32)
    x[1, 2] = x[4, 8] = 1
    np.testing.assert_array_equal(m.run({"x": x})["y"], inits["d"][[0, 3], [2, 8]])
    x[0, 6] = 1
    with pytest.raises(RuntimeStatusError, match="out of range"):
        m.run({"x": x})


@pytest.mark.parametrize("case", ["tuple_axis", "indexed_data_axis"])
def test_gathernd_refusals(tmp_path, case):
    inits = {"thr": np.array(0.5, np.float32)}
    if case == "tuple_axis":      # NonZero's [1, N] as indices: N coordinates per tuple
        nodes = [helper.make_node("Greater", ["v", "thr"], ["m"], name="gt"),
                 helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
                 helper.make_node("GatherND", ["x", "nz"], ["y"], name="gnd")]
        model = make_model(nodes, {"x": rand(3, 5), "v": rand(2)}, [], initializers=inits,
                           opset=17)
        model.graph.output.append(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT,
                                                                [1]))
    else:                         # the tuples index the data's data-dependent axis
        nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
                 helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
                 helper.make_node("Transpose", ["nz"], ["t"], name="tr", perm=[1, 0]),
                 helper.make_node("GatherND", ["t", "first"], ["y"], name="gnd")]
        inits["first"] = np.array([[0]], np.int64)
        model = make_model(nodes, {"x": rand(3, 5)}, ["y"], initializers=inits, opset=17)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=r"'gnd' \(GatherND-13\).*depends on the data"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


# --------------------------------------------------------------- TopK over a counted axis

def scores_of_selected(n, extra, inputs=None, inits=None):
    """x [n] -> the elements below -0.5 (negative: padding zeros would beat them) -> extra."""
    nodes = [helper.make_node("Less", ["x", "thr"], ["m"], name="lt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["idx"], name="tr", perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["s"], name="gnd")] + extra
    return nodes, {"x": rand(n), **(inputs or {})}, {"thr": np.array(-0.5, np.float32),
                                                      **(inits or {})}


def negatives(n, count, seed=0, ties=False):
    """n values of which `count` are below -0.5 (with ties: three distinct values)."""
    x = np.abs(rand(n, seed=seed)) * 0.4
    pick = np.random.default_rng(seed).permutation(n)[:count]
    x[pick] = (-1.0 - np.arange(count) % 3) if ties else -0.6 - np.abs(rand(count, seed=seed))
    return x


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_over_a_counted_axis_constant_k(tmp_path, largest):
    """Only the valid elements compete (the padding's zeros are larger than every valid
    score, and smaller when largest=0); ties to the lower index; k = the count; k above
    the count is a status, as onnxruntime fails."""
    nodes, feeds, inits = scores_of_selected(
        29, [helper.make_node("TopK", ["s", "k"], ["v", "i"], name="topk", largest=largest)],
        inits={"k": np.array([3], np.int64)})
    model = make_model(nodes, feeds, ["v", "i"], initializers=inits, opset=17)
    for count, ties in [(3, False), (4, True), (17, True), (29, False)]:
        x = negatives(29, count, seed=count, ties=ties)
        check_model(model, {"x": x}, tmp_path / f"{count}")
    onnx.save(model, tmp_path / "m.onnx")
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    with pytest.raises(RuntimeStatusError, match="exceeds its compiled maximum"):
        mlcc.load(tmp_path / "out").run({"x": negatives(29, 2)})


def test_topk_over_a_counted_axis_runtime_k(tmp_path):
    """k known at run time (0, 1, some, the count): the outputs' count is k."""
    nodes, feeds, inits = scores_of_selected(
        31, [helper.make_node("TopK", ["s", "k"], ["v", "i"], name="topk")],
        inputs={"k": np.array([1], np.int64)})
    model = make_model(nodes, feeds, ["v", "i"], initializers=inits, opset=17)
    for count, k in [(0, 0), (1, 1), (1, 0), (12, 5), (13, 13), (31, 31)]:
        x = negatives(31, count, seed=count, ties=True)
        got = check_model(model, {"x": x, "k": np.array([k], np.int64)}, tmp_path / f"{count}_{k}")
        assert got["v"].shape == (k,)


def test_topk_carries_a_counted_other_axis(tmp_path):
    """Rows [N, 5] gathered by NonZero's coordinates, TopK 2 along the static axis: [N, 2]."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["s"], name="score", keepdims=0, axes=[1]),
             helper.make_node("Greater", ["s", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["idx"], name="tr", perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["rows"], name="gnd"),
             helper.make_node("TopK", ["rows", "k"], ["v", "i"], name="topk", axis=-1,
                              largest=0)]
    inits = {"thr": np.array(0.5, np.float32), "k": np.array([2], np.int64)}
    model = make_model(nodes, {"x": rand(13, 5)}, ["v", "i"], initializers=inits, opset=17)
    for i, x in enumerate(fills((13, 5), seed=2)):
        check_model(model, {"x": x}, tmp_path / str(i))


def test_topk_refuses_runtime_k_over_another_counted_axis(tmp_path):
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("TopK", ["nz", "k"], ["v", "i"], name="topk", axis=0)]
    model = make_model(nodes, {"x": rand(3, 5), "k": np.array([1], np.int64)}, ["v", "i"],
                       initializers={"thr": np.array(0.5, np.float32)}, opset=17)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=r"'topk' \(TopK-11\).*two data-dependent"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


# ------------------------------------------- Shape and Size of a data-dependent size, at run time

def test_shape_and_size_of_a_counted_tensor(tmp_path, target="x86"):
    """Shape (whole, from axis 1, up to axis 1) and Size of NonZero's [2, N], and integer
    arithmetic on them (Sub, Div, Max, Add, ReduceSum, ReduceProd, ReduceMax, Gather,
    Concat), as outputs: computed at run time from the count (mlcc.Sizes)."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Shape", ["nz"], ["shape"], name="shape"),
             helper.make_node("Shape", ["nz"], ["tail"], name="tail", start=1),
             helper.make_node("Shape", ["nz"], ["head"], name="head", end=1),
             helper.make_node("Size", ["nz"], ["size"], name="size"),
             helper.make_node("Sub", ["size", "one"], ["last"], name="sub"),
             helper.make_node("Div", ["size", "three"], ["third"], name="div"),
             helper.make_node("Max", ["shape", "four"], ["at_least"], name="max"),
             helper.make_node("Add", ["tail", "tail"], ["sum"], name="add"),
             helper.make_node("ReduceSum", ["shape"], ["rsum"], name="rsum", keepdims=1),
             helper.make_node("ReduceProd", ["shape"], ["rprod"], name="rprod", keepdims=0),
             helper.make_node("ReduceMax", ["shape"], ["rmax"], name="rmax", keepdims=0),
             helper.make_node("Gather", ["shape", "one"], ["n"], name="gather", axis=0),
             helper.make_node("Concat", ["tail", "head", "rsum"], ["cat"], name="cat", axis=0),
             helper.make_node("Equal", ["rprod", "zero"], ["empty"], name="empty")]
    inits = {"thr": np.array(0.5, np.float32), "one": np.array(1, np.int64),
             "three": np.array(3, np.int64), "four": np.array([4, 4], np.int64),
             "zero": np.array(0, np.int64)}
    outs = ["shape", "tail", "head", "size", "last", "third", "at_least", "sum", "rsum", "rprod",
            "rmax", "n", "cat", "empty"]
    model = make_model(nodes, {"x": rand(3, 5)}, outs, initializers=inits, opset=17)
    for i, x in enumerate(fills((3, 5), seed=4)):
        got = check_model(model, {"x": x}, tmp_path / str(i), target=target)
        assert got["size"] == 2 * got["n"]


def test_topk_k_from_the_count(tmp_path):
    """torchvision's per-class top-k: k = min(cap, the number of scores above the threshold)
    (Shape -> Gather -> Unsqueeze -> Concat with the cap -> ReduceMin -> Reshape -> TopK's K),
    (read by two TopKs: one mlcc.Sizes), then the Shape of TopK's output; counts 0, 1, below,
    at and above the cap, every element."""
    extra = [helper.make_node("Shape", ["s"], ["sh"], name="shape"),
             helper.make_node("Gather", ["sh", "zero"], ["n"], name="g0", axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
             helper.make_node("Concat", ["cap", "n1"], ["both"], name="cat", axis=0),
             helper.make_node("ReduceMin", ["both"], ["k0"], name="rmin", keepdims=0),
             helper.make_node("Reshape", ["k0", "one"], ["k"], name="rs"),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], name="topk"),
             helper.make_node("TopK", ["s", "k"], ["lv", "li"], name="bottomk", largest=0),
             helper.make_node("Shape", ["v"], ["vs"], name="vshape")]
    inits = {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
             "cap": np.array([5], np.int64), "one": np.array([1], np.int64)}
    nodes, feeds, inits = scores_of_selected(23, extra, inits=inits)
    model = make_model(nodes, feeds, ["v", "i", "lv", "li", "vs", "k"], initializers=inits,
                       opset=17)
    for count in [0, 1, 4, 5, 6, 23]:
        x = negatives(23, count, seed=count, ties=True)
        got = check_model(model, {"x": x}, tmp_path / str(count))
        assert got["vs"].tolist() == [min(count, 5)]


@pytest.mark.parametrize("op", ["Expand", "Cast"])
def test_shape_of_a_counted_tensor_refusals(tmp_path, op):
    """What a size the data decides cannot yet become: an Expand's shape, or a float (a Cast
    of it as an output). (A Reshape's: test_reshape_refusals.)"""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Shape", ["nz"], ["s"], name="shape"),
             helper.make_node(op, {"Expand": ["thr", "s"]}.get(op, ["s"]), ["y"], name="bad",
                              **({"to": 1} if op == "Cast" else {}))]
    model = make_model(nodes, {"x": rand(3, 5)}, [], initializers={
        "thr": np.array(0.5, np.float32)}, opset=17)
    elem = onnx.TensorProto.FLOAT if op in ("Cast", "Expand") else onnx.TensorProto.INT64
    model.graph.output.append(helper.make_tensor_value_info("y", elem, None))
    model.graph.output[0].type.tensor_type.shape.SetInParent()
    onnx.save(model, tmp_path / "m.onnx")
    want = (r"graph output 'y'.*the count of 'nz' \(0..15\), which the data decides"
            if op == "Cast" else rf"'bad' \({op}-\d+\): shape .*must be a constant")
    with pytest.raises(UnsupportedError, match=want):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


# -------------------------------------------------------- Gather along a data-dependent axis

def test_gather_of_the_topk_rows(tmp_path):
    """torchvision: the rows of the boxes whose scores pass the threshold (GatherND), TopK of
    their scores, Gather of those rows by TopK's indices (both counted) and of the first and
    last valid row (constant indices 0 and -1: against the count, not the maximum)."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["score"], name="score", keepdims=0,
                              axes=[1]),
             helper.make_node("Greater", ["score", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["idx"], name="tr", perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["rows"], name="rows"),
             helper.make_node("GatherND", ["score", "idx"], ["s"], name="scores"),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], name="topk"),
             helper.make_node("Gather", ["rows", "i"], ["best"], name="best", axis=0),
             helper.make_node("Gather", ["rows", "ends"], ["ends_rows"], name="ends", axis=0)]
    inits = {"thr": np.array(0.5, np.float32), "ends": np.array([0, -1], np.int64)}
    feeds = {"x": rand(17, 3), "k": np.array([2], np.int64)}
    model = make_model(nodes, feeds, ["best", "ends_rows", "v"], initializers=inits, opset=17)
    for count, k in [(1, 1), (1, 0), (2, 2), (9, 4), (17, 17)]:
        x = np.abs(rand(17, 3, seed=count)) * 0.4
        x[np.random.default_rng(count).permutation(17)[:count], 1] = 1 + rand(count) ** 2
        got = check_model(model, {"x": x, "k": np.array([k], np.int64)},
                          tmp_path / f"{count}_{k}")
        assert got["best"].shape == (k, 3)
    onnx.save(model, tmp_path / "m.onnx")      # no valid row: index 0 is out of range
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    with pytest.raises(RuntimeStatusError, match="out of range"):
        mlcc.load(tmp_path / "out").run({"x": np.zeros((17, 3), np.float32),
                                         "k": np.array([0], np.int64)})


def counted_gather(tmp_path, target="x86"):
    """Run-time indices into NonZero's [2, N] along N (4 valid columns): in range of the
    count, negative ones from its end. (model, x)."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Gather", ["nz", "j"], ["y"], name="pick", axis=1)]
    feeds = {"x": rand(3, 5), "j": np.array([[0, -1], [2, -3]], np.int64)}
    model = make_model(nodes, feeds, ["y"], initializers={"thr": np.array(0.5, np.float32)},
                       opset=17)
    x = np.zeros((3, 5), np.float32)
    x[0, 1] = x[1, 4] = x[2, 0] = x[2, 2] = 1
    check_model(model, {"x": x, "j": feeds["j"]}, tmp_path / "ok", target=target)
    return model, x


def test_gather_along_a_counted_axis_checks_the_count(tmp_path):
    """An index in the padding is a status, as onnxruntime fails."""
    model, x = counted_gather(tmp_path)
    onnx.save(model, tmp_path / "m.onnx")
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    m = mlcc.load(tmp_path / "out")
    for j in ([[0, 4], [1, 1]], [[0, -5], [1, 1]]):     # 4 and -5: in the padding
        with pytest.raises(RuntimeStatusError, match="out of range"):
            m.run({"x": x, "j": np.array(j, np.int64)})


# ------------------------------------- ConstantOfShape of a count, Concat along a counted axis

def per_class_detections(x_shape=(13, 3)):
    """torchvision's postprocess over classes: per class (column) the rows whose score passes
    (GatherND of NonZero's coordinates), their labels (ConstantOfShape of the count), then all
    classes concatenated along the counted axis (a static block too), and its Shape; their
    scores concatenated too, plus the labels (two Concats of the same counts: one count)."""
    nodes, outs = [], []
    for c in range(x_shape[1]):
        nodes += [helper.make_node("Gather", ["x", f"c{c}"], [f"s{c}"], name=f"col{c}", axis=1),
                  helper.make_node("Greater", [f"s{c}", "thr"], [f"m{c}"], name=f"gt{c}"),
                  helper.make_node("NonZero", [f"m{c}"], [f"nz{c}"], name=f"nz{c}"),
                  helper.make_node("Transpose", [f"nz{c}"], [f"i{c}"], name=f"tr{c}",
                                   perm=[1, 0]),
                  helper.make_node("GatherND", ["x", f"i{c}"], [f"rows{c}"], name=f"rows{c}"),
                  helper.make_node("GatherND", [f"s{c}", f"i{c}"], [f"s{c}_sel"],
                                   name=f"sel{c}"),
                  helper.make_node("Shape", [f"i{c}"], [f"sh{c}"], name=f"shape{c}", end=1),
                  helper.make_node("ConstantOfShape", [f"sh{c}"], [f"lab{c}"], name=f"lab{c}",
                                   value=helper.make_tensor("v", onnx.TensorProto.INT64, [1],
                                                            [c + 1]))]
    n = x_shape[1]
    nodes += [helper.make_node("Concat", [f"rows{c}" for c in range(n)] + ["extra"], ["rows"],
                               name="cat_rows", axis=0),
              helper.make_node("Concat", [f"lab{c}" for c in range(n)], ["labels"],
                               name="cat_labels", axis=0),
              helper.make_node("Shape", ["labels"], ["n"], name="count"),
              # the scores of every class again: the same counts, so one count (Add)
              helper.make_node("Concat", [f"s{c}_sel" for c in range(n)], ["scores"],
                               name="cat_scores", axis=0),
              helper.make_node("Cast", ["labels"], ["flabels"], name="flabels", to=1),
              helper.make_node("Add", ["scores", "flabels"], ["scored"], name="offset")]
    inits = {"thr": np.array(0.5, np.float32), "extra": rand(2, x_shape[1], seed=9),
             **{f"c{c}": np.array(c, np.int64) for c in range(n)}}
    return make_model(nodes, {"x": rand(*x_shape)}, ["rows", "labels", "n", "scored"],
                      initializers=inits, opset=17)


def test_concat_along_a_counted_axis(tmp_path):
    model = per_class_detections()
    for i, x in enumerate(fills((13, 3), seed=6)):
        got = check_model(model, {"x": x}, tmp_path / str(i))
        assert got["rows"].shape[0] == got["n"][0] + 2


def test_concat_of_nonzero_outputs_along_their_counted_axis(tmp_path):
    """[2, N] + a constant [2, 2] + [2, M] along axis 1 (outer 2: each row packed)."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Less", ["x", "low"], ["m2"], name="lt"),
             helper.make_node("NonZero", ["m2"], ["nz2"], name="nz2"),
             helper.make_node("Concat", ["nz", "two", "nz2"], ["cat"], name="cat", axis=-1),
             helper.make_node("Transpose", ["cat"], ["t"], name="tr", perm=[1, 0])]
    inits = {"thr": np.array(0.5, np.float32), "low": np.array(-0.5, np.float32),
             "two": np.array([[9, 8], [7, 6]], np.int64)}
    model = make_model(nodes, {"x": rand(3, 5)}, ["cat", "t"], initializers=inits, opset=17)
    for i, x in enumerate(fills((3, 5), seed=7) + [np.full((3, 5), -2, np.float32)]):
        check_model(model, {"x": x}, tmp_path / str(i))


def test_constant_of_shape_of_a_count_as_an_output(tmp_path):
    """ConstantOfShape of NonZero's whole shape [2, N], the only output: NonZero still runs
    (its count is the output's, passes/dead_code.py)."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Shape", ["nz"], ["s"], name="shape"),
             helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill",
                              value=helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [2.5]))]
    model = make_model(nodes, {"x": rand(3, 5)}, ["y"], initializers={
        "thr": np.array(0.5, np.float32)}, opset=17)
    for i, x in enumerate(fills((3, 5), seed=8)):
        check_model(model, {"x": x}, tmp_path / str(i))


def test_constant_of_shape_of_a_count_plus_one_is_refused(tmp_path):
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Shape", ["nz"], ["s"], name="shape"),
             helper.make_node("Add", ["s", "one"], ["s1"], name="plus_one"),
             helper.make_node("ConstantOfShape", ["s1"], ["y"], name="bad")]
    model = make_model(nodes, {"x": rand(3, 5)}, [], initializers={
        "thr": np.array(0.5, np.float32), "one": np.array(1, np.int64)}, opset=17)
    model.graph.output.append(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None))
    model.graph.output[0].type.tensor_type.shape.SetInParent()
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=r"'bad' \(ConstantOfShape-9\): output 'y' would "
                                               r"have the shape .* depends on the data"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


# ---------------------------------------------------------- reductions over a counted axis

REDUCTIONS = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceSumSquare",
              "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


def counted_reductions():
    """Every reduction over the negated selected scores (the padding's zeros would be the
    maximum), int64 ones of the coordinates (over all axes, and along the static one: counted)."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["i"], name="tr", perm=[1, 0]),
             helper.make_node("GatherND", ["x", "i"], ["s"], name="g"),
             helper.make_node("Neg", ["s"], ["ns"], name="neg"),
             helper.make_node("ReduceMax", ["i"], ["imax"], name="imax", keepdims=0),
             helper.make_node("ReduceSum", ["i"], ["isum"], name="isum", keepdims=1),
             helper.make_node("ReduceMin", ["i"], ["icols"], name="icols", keepdims=1, axes=[1])]
    nodes += [helper.make_node(op, ["ns" if op != "ReduceLogSum" else "s"], [op], name=op,
                               keepdims=0) for op in REDUCTIONS]
    return make_model(nodes, {"x": rand(3, 5)}, ["imax", "isum", "icols"] + REDUCTIONS,
                      initializers={"thr": np.array(0.5, np.float32)}, opset=17)


def test_reductions_over_a_counted_axis(tmp_path, target="x86"):
    model = counted_reductions()
    for i, x in enumerate(fills((3, 5), seed=9)):
        check_model(model, {"x": x}, tmp_path / str(i), target=target)


def test_reduce_mean_over_a_counted_axis_is_refused(tmp_path):
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Cast", ["nz"], ["f"], name="f", to=1),
             helper.make_node("ReduceMean", ["f"], ["y"], name="mean", keepdims=0)]
    model = make_model(nodes, {"x": rand(3, 5)}, ["y"], initializers={
        "thr": np.array(0.5, np.float32)}, opset=17)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=r"'mean' \(ReduceMean-13\).*depends on the "
                                               r"data.*reduces over that axis"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


# ------------------------------------------------------- NonMaxSuppression of counted boxes

def nms_of_selected_boxes(n=23):
    """torchvision's batched NMS input: the boxes whose score passes the threshold ([N, 4]
    rows of x, GatherND) and their scores, unsqueezed to [1, N, 4] and [1, 1, N], then
    NonMaxSuppression without a score threshold (the padding's zero boxes and scores would be
    kept if they were candidates) and Gather of the kept boxes."""
    nodes = [helper.make_node("Slice", ["x", "s0", "s1", "one"], ["score2"], name="score_col"),
             helper.make_node("Squeeze", ["score2", "one"], ["score"], name="score_sq"),
             helper.make_node("Greater", ["score", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["i"], name="tr", perm=[1, 0]),
             helper.make_node("GatherND", ["boxes", "i"], ["b"], name="sel_boxes"),
             helper.make_node("GatherND", ["score", "i"], ["s"], name="sel_scores"),
             helper.make_node("Unsqueeze", ["b", "zero"], ["b3"], name="b3"),
             helper.make_node("Unsqueeze", ["s", "zero_one"], ["s3"], name="s3"),
             helper.make_node("NonMaxSuppression", ["b3", "s3", "per_class", "iou"], ["sel"],
                              name="nms"),
             helper.make_node("Gather", ["sel", "two"], ["k"], name="k", axis=1),
             helper.make_node("Squeeze", ["k", "one"], ["keep"], name="keep"),
             helper.make_node("Gather", ["b", "keep"], ["kept"], name="kept", axis=0)]
    inits = {"thr": np.array(0.5, np.float32), "s0": np.array([4], np.int64),
             "s1": np.array([5], np.int64), "one": np.array([1], np.int64),
             "zero": np.array([0], np.int64), "zero_one": np.array([0, 1], np.int64),
             "per_class": np.array([100], np.int64), "iou": np.array([0.3], np.float32),
             "two": np.array([2], np.int64)}
    return make_model(nodes, {"x": rand(n, 5), "boxes": rand(n, 4)}, ["sel", "keep", "kept"],
                      initializers=inits, opset=17)


def overlapping_boxes(n, count, seed=0):
    """n boxes [y1, x1, y2, x2] in clusters that overlap, and x whose column 4 (the score)
    passes 0.5 for `count` of them."""
    rng = np.random.default_rng(seed)
    centre = rng.integers(0, 4, n)[:, None] * 3.0 + rng.uniform(-0.6, 0.6, (n, 2))
    boxes = np.concatenate([centre - 1, centre + 1], axis=1).astype(np.float32)
    x = rng.uniform(0, 0.4, (n, 5)).astype(np.float32)
    x[rng.permutation(n)[:count], 4] = rng.uniform(0.6, 1, count)
    return x, boxes


def test_nms_of_counted_boxes(tmp_path, target="x86"):
    model = nms_of_selected_boxes()
    for count in ([0, 1, 9, 23] if target == "x86" else [9]):
        x, boxes = overlapping_boxes(23, count, seed=count)
        got = check_model(model, {"x": x, "boxes": boxes}, tmp_path / str(count), target=target)
        assert min(count, 1) <= got["keep"].shape[0] < max(count, 1) or count == 1


# ----------------------- a run-time If with a counted branch output, Slice and Split of one

def if_of_a_counted_branch():
    """torchvision's `if boxes.numel() == 0: keep = empty else: keep = nms(...)`: the
    condition computed at run time from the count (Size -> Equal), the then-branch an empty
    constant, the else-branch the selected coordinates' column 1 ([N] counted); then the first
    4 of the kept (Slice of the counted axis: a count of min(N, 4)) and Split of the
    coordinates along the static axis."""
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["empty"], name="empty",
                          value=helper.make_tensor("e", onnx.TensorProto.INT64, [0], []))],
        "then", [], [helper.make_tensor_value_info("empty", onnx.TensorProto.INT64, [0])])
    other = helper.make_graph(
        [helper.make_node("Gather", ["i", "one_s"], ["col"], name="col", axis=1),
         helper.make_node("Mul", ["col", "ten"], ["keep"], name="times_ten")],
        "else", [], [helper.make_tensor_value_info("keep", onnx.TensorProto.INT64, ["n"])])
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["i"], name="tr", perm=[1, 0]),
             helper.make_node("Size", ["nz"], ["size"], name="size"),
             helper.make_node("Equal", ["size", "zero"], ["none"], name="none"),
             helper.make_node("If", ["none"], ["kept"], name="if", then_branch=then,
                              else_branch=other),
             helper.make_node("Slice", ["kept", "zero1", "four"], ["first"], name="first4"),
             helper.make_node("Split", ["i"], ["rows", "cols"], name="split", axis=1,
                              num_outputs=2)]
    inits = {"thr": np.array(0.5, np.float32), "zero": np.array(0, np.int64),
             "one_s": np.array(1, np.int64), "ten": np.array(10, np.int64),
             "zero1": np.array([0], np.int64), "four": np.array([4], np.int64)}
    return make_model(nodes, {"x": rand(3, 5)}, ["kept", "first", "rows", "cols"],
                      initializers=inits, opset=18)


def test_if_slice_and_split_of_counted_values(tmp_path, target="x86"):
    model = if_of_a_counted_branch()
    for i, x in enumerate(fills((3, 5), seed=10)):
        got = check_model(model, {"x": x}, tmp_path / str(i), target=target)
        assert got["first"].shape == (min(got["kept"].shape[0], 4),)


@pytest.mark.parametrize("starts,ends", [([-2], [100]), ([0], [-1])])
def test_slice_of_a_counted_axis_from_its_end_is_refused(tmp_path, starts, ends):
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Slice", ["nz", "s", "e", "ax"], ["y"], name="cut")]
    inits = {"thr": np.array(0.5, np.float32), "s": np.array(starts, np.int64),
             "e": np.array(ends, np.int64), "ax": np.array([1], np.int64)}
    model = make_model(nodes, {"x": rand(3, 5)}, ["y"], initializers=inits, opset=17)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=r"'cut' \(Slice-13\).*slices that axis \(with "
                                               r"bounds other than non-negative"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


# ------------------------------------------------ torchvision's postprocess_detections, whole

def torchvision_postprocess(anchors=29, classes=4, cap=5, keep=6):
    """torchvision's SSD postprocess_detections as its TorchScript export writes it, on
    scores [anchors, classes] and boxes [anchors, 4]: per class but the background, the scores
    above a threshold (NonZero -> GatherND), their top min(cap, count) (TopK with k from the
    Shape), the boxes of those and their labels (ConstantOfShape); every class concatenated;
    then `if boxes.numel() == 0` an empty result, else the batched NMS (boxes offset by
    label x (max + 1), ReduceMax over the counted boxes), the first `keep` kept, and the
    boxes, scores and labels gathered by them."""
    I64 = onnx.TensorProto.INT64
    nodes, parts = [], {"b": [], "s": [], "l": []}
    for c in range(1, classes):
        p = f"c{c}_"
        nodes += [
            helper.make_node("Gather", ["scores", f"{p}idx"], [p + "s"], axis=1),
            helper.make_node("Greater", [p + "s", "thr"], [p + "m"]),
            helper.make_node("NonZero", [p + "m"], [p + "nz"]),
            helper.make_node("Transpose", [p + "nz"], [p + "t"], perm=[1, 0]),
            helper.make_node("GatherND", [p + "s", p + "t"], [p + "sc"]),
            helper.make_node("GatherND", ["boxes", p + "t"], [p + "bc"]),
            helper.make_node("Shape", [p + "sc"], [p + "sh"]),
            helper.make_node("Gather", [p + "sh", "zero"], [p + "n"], axis=0),
            helper.make_node("Unsqueeze", [p + "n", "ax0"], [p + "n1"]),
            helper.make_node("Concat", ["cap", p + "n1"], [p + "both"], axis=0),
            helper.make_node("ReduceMin", [p + "both"], [p + "k0"], keepdims=0),
            helper.make_node("Reshape", [p + "k0", "one1"], [p + "k"]),
            helper.make_node("TopK", [p + "sc", p + "k"], [p + "v", p + "i"]),
            helper.make_node("Gather", [p + "bc", p + "i"], [p + "bt"], axis=0),
            helper.make_node("Shape", [p + "v"], [p + "vs"]),
            helper.make_node("ConstantOfShape", [p + "vs"], [p + "lab"],
                             value=helper.make_tensor("v", I64, [1], [c]))]
        parts["b"].append(p + "bt")
        parts["s"].append(p + "v")
        parts["l"].append(p + "lab")
    nodes += [helper.make_node("Concat", parts["b"], ["B"], axis=0),
              helper.make_node("Concat", parts["s"], ["S"], axis=0),
              helper.make_node("Concat", parts["l"], ["L"], axis=0),
              helper.make_node("Size", ["B"], ["numel"]),
              helper.make_node("Equal", ["numel", "zero"], ["none"])]
    empty = helper.make_graph(
        [helper.make_node("Constant", [], ["empty"],
                          value=helper.make_tensor("e", I64, [0], []))],
        "then", [], [helper.make_tensor_value_info("empty", I64, [0])])
    nms = helper.make_graph(
        [helper.make_node("ReduceMax", ["B"], ["mx"], keepdims=0),
         helper.make_node("Cast", ["L"], ["lf"], to=1),
         helper.make_node("Add", ["mx", "onef"], ["mx1"]),
         helper.make_node("Mul", ["lf", "mx1"], ["off"]),
         helper.make_node("Unsqueeze", ["off", "one1"], ["off2"]),
         helper.make_node("Add", ["B", "off2"], ["bn"]),
         helper.make_node("Unsqueeze", ["bn", "ax0"], ["bn3"]),
         helper.make_node("Unsqueeze", ["S", "ax01"], ["s3"]),
         helper.make_node("NonMaxSuppression", ["bn3", "s3", "per_class", "iou"], ["sel"]),
         helper.make_node("Gather", ["sel", "two1"], ["k2"], axis=1),
         helper.make_node("Squeeze", ["k2", "one1"], ["kept"])],
        "else", [], [helper.make_tensor_value_info("kept", I64, ["n"])])
    nodes += [helper.make_node("If", ["none"], ["keep_all"], then_branch=empty,
                               else_branch=nms),
              helper.make_node("Slice", ["keep_all", "zero1", "keep"], ["keep_n"]),
              helper.make_node("Gather", ["B", "keep_n"], ["out_boxes"], axis=0),
              helper.make_node("Gather", ["S", "keep_n"], ["out_scores"], axis=0),
              helper.make_node("Gather", ["L", "keep_n"], ["out_labels"], axis=0)]
    for k, n in enumerate(nodes):
        n.name = f"n{k}_{n.op_type}"
    inits = {"thr": np.array(0.5, np.float32), "zero": np.array(0, np.int64),
             "ax0": np.array([0], np.int64), "ax01": np.array([0, 1], np.int64),
             "cap": np.array([cap], np.int64), "one1": np.array([1], np.int64),
             "two1": np.array([2], np.int64), "zero1": np.array([0], np.int64),
             "keep": np.array([keep], np.int64), "onef": np.array(1, np.float32),
             "per_class": np.array([1000], np.int64), "iou": np.array([0.45], np.float32),
             **{f"c{c}_idx": np.array(c, np.int64) for c in range(1, classes)}}
    feeds = {"scores": rand(anchors, classes), "boxes": rand(anchors, 4)}
    return make_model(nodes, feeds, ["out_boxes", "out_scores", "out_labels"],
                      initializers=inits, opset=18)


def detector_inputs(anchors, classes, passing, seed=0):
    """Scores with `passing` (anchor, class) pairs above 0.5 (distinct values), clustered
    boxes [y1, x1, y2, x2] that overlap within a cluster."""
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0, 0.45, (anchors, classes)).astype(np.float32)
    flat = rng.permutation(anchors * classes)[:passing]
    scores.reshape(-1)[flat] = np.linspace(0.55, 0.99, passing, dtype=np.float32)
    centre = rng.integers(0, 3, anchors)[:, None] * 2.5 + rng.uniform(-0.5, 0.5, (anchors, 2))
    boxes = np.concatenate([centre - 1, centre + 1], axis=1).astype(np.float32)
    return {"scores": scores, "boxes": boxes}


def test_torchvision_postprocess_detections(tmp_path, target="x86"):
    """The whole chain against onnxruntime: no score passes (the If's empty branch), one,
    fewer than the cap per class, more than the cap (TopK cuts), more kept than `keep` (the
    Slice cuts), every score passing."""
    model = torchvision_postprocess()
    for passing in ([0, 1, 4, 15, 40, 116] if target == "x86" else [15]):
        feeds = detector_inputs(29, 4, passing, seed=passing)
        got = check_model(model, feeds, tmp_path / str(passing), target=target)
        assert (got["out_labels"].size == 0) == (passing == 0 or
                                                 not (feeds["scores"][:, 1:] > 0.5).any())


# ------------------------------------------------------------ Reshape of a counted tensor

def test_reshape_around_a_counted_axis(tmp_path, target="x86"):
    """RetinaNet's and FCOS's box decoding: [N, 2, 2] -> [N, 4] with a constant target
    ([-1, 4]) and with one computed from the Shape (the count, 4): a view, the count kept."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["t"], name="tr", perm=[1, 0]),
             helper.make_node("Concat", ["t", "t"], ["tt"], name="pair", axis=1),
             helper.make_node("Reshape", ["tt", "n22"], ["r3"], name="to3"),
             helper.make_node("Reshape", ["r3", "n4"], ["flat_const"], name="flat_const"),
             helper.make_node("Shape", ["t"], ["sh"], name="shape"),
             helper.make_node("Gather", ["sh", "zero"], ["n"], name="n"),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="n1"),
             helper.make_node("Concat", ["n1", "four"], ["target"], name="target", axis=0),
             helper.make_node("Reshape", ["r3", "target"], ["flat"], name="flat")]
    inits = {"thr": np.array(0.5, np.float32), "n22": np.array([-1, 2, 2], np.int64),
             "n4": np.array([-1, 4], np.int64), "zero": np.array(0, np.int64),
             "ax0": np.array([0], np.int64), "four": np.array([4], np.int64)}
    model = make_model(nodes, {"x": rand(3, 5)}, ["r3", "flat_const", "flat"],
                       initializers=inits, opset=17)
    for i, x in enumerate(fills((3, 5), seed=11)):
        check_model(model, {"x": x}, tmp_path / str(i), target=target)


@pytest.mark.parametrize("case", ["merge", "static"])
def test_reshape_refusals(tmp_path, case):
    """Merging the counted axis with another ([2, N] -> [2N]) is refused; so is reshaping a
    static tensor to a size the data decides."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz")]
    inits = {"thr": np.array(0.5, np.float32)}
    if case == "merge":
        nodes.append(helper.make_node("Reshape", ["nz", "flat"], ["y"], name="bad"))
        inits["flat"] = np.array([-1], np.int64)
        want = r"'bad' \(Reshape-14\).*would reshape its axis 1"
    else:
        nodes += [helper.make_node("Shape", ["nz"], ["s"], name="shape"),
                  helper.make_node("Reshape", ["w", "s"], ["y"], name="bad")]
        inits["w"] = rand(2, 15)
        want = r"'bad' \(Reshape-14\).*depends on the count of 'nz'"
    model = make_model(nodes, {"x": rand(3, 5)}, [], initializers=inits, opset=17)
    model.graph.output.append(helper.make_tensor_value_info(
        "y", onnx.TensorProto.INT64 if case == "merge" else onnx.TensorProto.FLOAT, None))
    model.graph.output[0].type.tensor_type.shape.SetInParent()
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=want):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


@pytest.mark.parametrize("start,end", [(0, 4), (2, 100), (3, 3), (1, 9)])
def test_slice_of_a_counted_axis(tmp_path, start, end):
    """NonZero's [2, N] sliced along N from `start` to `end`: a count of
    max(0, min(N, end) - start), for N of 0, 1, some and all."""
    nodes = [helper.make_node("Greater", ["x", "thr"], ["m"], name="gt"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nz"),
             helper.make_node("Slice", ["nz", "s", "e", "ax"], ["y"], name="cut")]
    inits = {"thr": np.array(0.5, np.float32), "s": np.array([start], np.int64),
             "e": np.array([end], np.int64), "ax": np.array([-1], np.int64)}
    model = make_model(nodes, {"x": rand(3, 5)}, ["y"], initializers=inits, opset=17)
    for i, x in enumerate(fills((3, 5), seed=12)):
        got = check_model(model, {"x": x}, tmp_path / str(i))
        n = int((x > 0.5).sum())
        assert got["y"].shape == (2, max(0, min(n, end) - start))
