"""Operators over bounded dynamic sizes (--shape x=LO..HI, docs/dynamic-shapes.md) beyond the
first set: Resize (tables computed at run time), Range and ConstantOfShape of a size computed
from the dimensions, Expand to such a shape, Slice up to one, ranges with a step (LO..HI:STEP,
sizes that are multiples of it), and the real models these make compile: PP-OCR det, YOLOv8n and
MiniLM over their ranges. Each is compared with onnxruntime at the smallest size, odd sizes in
between and the largest."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import mlcc
from mlcc.errors import InputError, ModelError, UnsupportedError
from mlcc.frontend import parse_shape_option
from mlcc.ir.symbolic import DimVar, SymbolicError, SymInt
from test_targets_arm import needs_arm
from test_targets_wasm import needs_wasm


def _save(path, nodes, inputs, outputs, inits=(), opset=13):
    """The model; outputs declared without a shape get their rank from ONNX's inference
    (every dimension left unnamed)."""
    g = h.make_graph(nodes, "m", inputs, outputs, list(inits))
    model = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {v.name: len(v.type.tensor_type.shape.dim)
             for v in list(inferred.graph.value_info) + list(inferred.graph.output)
             if v.type.tensor_type.HasField("shape")}
    for o in model.graph.output:
        if not o.type.tensor_type.HasField("shape"):
            shape = o.type.tensor_type.shape
            shape.SetInParent()
            for _ in range(ranks[o.name]):
                shape.dim.add()
    onnx.save(model, str(path))
    return path


def _feeds(sess, shapes, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = shapes[i.name]
        if i.type == "tensor(int64)":
            feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _compare(path, folder, ranges, sizes, atol=1e-5, rtol=1e-4, target="x86", feeds=None):
    """Compiles once with `ranges` and compares every output with onnxruntime at each entry
    of `sizes` ({input: shape}). Returns the compile result."""
    res = mlcc.compile(path, folder, shapes=ranges, target=target)
    m = mlcc.load(folder)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for k, shapes in enumerate(sizes):
        x = feeds(shapes) if feeds else _feeds(sess, shapes, k)
        got = m.run(x)
        for name, ref in zip(names, sess.run(None, x)):
            assert got[name].shape == ref.shape, (name, shapes)
            np.testing.assert_allclose(got[name], ref, rtol=rtol, atol=atol,
                                       err_msg=f"{name} at {shapes}")
    return res


def _resize_model(path, mode, coord, scales=None, sizes_from_shape=None, nearest="floor",
                  opset=13):
    """x [1, 3, H, W] -> Resize -> y; the output size from constant scales, or from the
    input's Shape times sizes_from_shape (a Shape -> Slice -> Mul -> Concat chain)."""
    inits, nodes = [], []
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    if scales is not None:
        inits.append(nh.from_array(np.array(scales, np.float32), "scales"))
        ins = ["x", "", "scales"]
    else:
        inits += [nh.from_array(np.array([2], np.int64), "two"),
                  nh.from_array(np.array([4], np.int64), "four"),
                  nh.from_array(np.array(sizes_from_shape, np.int64), "factor"),
                  nh.from_array(np.array([1, 3], np.int64), "lead")]
        nodes += [h.make_node("Shape", ["x"], ["shp"], name="shape"),
                  h.make_node("Slice", ["shp", "two", "four"], ["hw"], name="hw"),
                  h.make_node("Mul", ["hw", "factor"], ["ohw"], name="mul"),
                  h.make_node("Concat", ["lead", "ohw"], ["sizes"], axis=0, name="concat")]
        ins = ["x", "", "", "sizes"]
    nodes.append(h.make_node("Resize", ins, ["y"], name="resize", **attrs))
    return _save(path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits, opset)


HW = {"x": (1, 3, (5, 23), (4, 17))}
HW_SIZES = [{"x": s} for s in ((1, 3, 5, 4), (1, 3, 13, 9), (1, 3, 11, 16), (1, 3, 23, 17))]


RESIZE_CASES = [     # mode, coordinate_transformation_mode, scales, nearest_mode
    ("nearest", "asymmetric", [1, 1, 2, 2], "floor"),                  # YOLOv8, PP-OCR det
    ("nearest", "half_pixel", [1, 1, 1.5, 0.75], "round_prefer_floor"),
    ("nearest", "tf_half_pixel_for_nn", [1, 1, 3, 2], "round_prefer_ceil"),
    ("nearest", "align_corners", [1, 1, 2, 0.5], "ceil"),
    ("linear", "half_pixel", [1, 1, 2, 0.5], None),
    ("linear", "pytorch_half_pixel", [1, 1, 1.25, 3], None),
    ("linear", "align_corners", [1, 1, 2, 3], None),
    ("linear", "asymmetric", [1, 1, 0.25, 1], None),
]


def test_resize_scales_over_dynamic_sizes(tmp_path):
    """The output size floor(scale x size) is symbolic; the kernel computes the source indices
    and weights at each run, as the compiler's tables do for a static size (one model, one
    Resize per case)."""
    nodes, inits, outs = [], [], []
    for k, (mode, coord, scales, nearest) in enumerate(RESIZE_CASES):
        attrs = {"mode": mode, "coordinate_transformation_mode": coord}
        if nearest:
            attrs["nearest_mode"] = nearest
        inits.append(nh.from_array(np.array(scales, np.float32), f"scales{k}"))
        nodes.append(h.make_node("Resize", ["x", "", f"scales{k}"], [f"y{k}"],
                                 name=f"resize{k}", **attrs))
        outs.append(h.make_tensor_value_info(f"y{k}", T.FLOAT, None))
    path = _save(tmp_path / "m.onnx", nodes,
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])], outs, inits)
    _compare(path, tmp_path / "out", HW, HW_SIZES)


@pytest.mark.parametrize("mode, coord", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                         ("nearest", "pytorch_half_pixel")])
def test_resize_sizes_from_a_shape_chain(tmp_path, mode, coord):
    """sizes computed from the input's Shape: the scales are out / in at run time."""
    path = _resize_model(tmp_path / "m.onnx", mode, coord, sizes_from_shape=[2, 3])
    _compare(path, tmp_path / "out", HW, HW_SIZES)


def test_upsample_and_resize10_over_a_dynamic_width(tmp_path):
    path = _save(tmp_path / "m.onnx",
                 [h.make_node("Resize", ["x", "scales"], ["y"], mode="nearest", name="r10")],
                 [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 6, "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)],
                 [nh.from_array(np.array([1, 1, 0.5, 1.5], np.float32), "scales")], opset=10)
    _compare(path, tmp_path / "out", {"x": (2, 3, 6, (1, 19))},
             [{"x": (2, 3, 6, w)} for w in (1, 2, 7, 19)])


@pytest.mark.parametrize("attrs, scales, message", [
    ({"mode": "cubic", "coordinate_transformation_mode": "tf_half_pixel_for_nn"},
     [1, 1, 2, 2], r"a resize with mode='cubic', "
                   r"coordinate_transformation_mode='tf_half_pixel_for_nn'"),
    ({"mode": "nearest"}, [1, 1, 1.3, 1], r"the output size of a resize by a scale of 1.3"),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1, 1, 1.5, 1],
     r"align_corners resize by a scale that is not an integer"),
])
def test_resize_refusals_name_node_op_and_dimension(tmp_path, attrs, scales, message):
    path = _save(tmp_path / "m.onnx",
                 [h.make_node("Resize", ["x", "", "scales"], ["y"], name="rs", **attrs)],
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)],
                 [nh.from_array(np.array(scales, np.float32), "scales")], opset=18)
    with pytest.raises(UnsupportedError,
                       match=rf"node 'rs' \(Resize-18\): .*{message}.* depends on the size of "
                             rf"H \(4..9\)"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": (1, 3, (4, 9), 8)}, build=False)


@pytest.mark.parametrize("attrs, scales, sizes_from_shape", [
    ({"coordinate_transformation_mode": "half_pixel"}, [1, 1, 2, 0.5], None),
    ({"coordinate_transformation_mode": "asymmetric", "exclude_outside": 1}, [1, 1, 1.5, 3],
     None),
    ({"coordinate_transformation_mode": "align_corners", "cubic_coeff_a": -0.5}, [1, 1, 3, 2],
     None),
    ({"coordinate_transformation_mode": "pytorch_half_pixel"}, None, [3, 2]),
])
def test_cubic_resize_over_dynamic_sizes(tmp_path, attrs, scales, sizes_from_shape):
    """Cubic taps and weights computed at each run (constant scales, or sizes from a Shape
    chain: the scale out / in at run time), against onnxruntime."""
    inits = [nh.from_array(np.array(scales, np.float32), "scales")] if scales else []
    nodes = []
    ins = ["x", "", "scales"]
    if sizes_from_shape:
        inits += [nh.from_array(np.array(v, np.int64), n) for n, v in
                  (("two", [2]), ("four", [4]), ("factor", sizes_from_shape), ("lead", [1, 3]))]
        nodes += [h.make_node("Shape", ["x"], ["shp"], name="shape"),
                  h.make_node("Slice", ["shp", "two", "four"], ["hw"], name="hw"),
                  h.make_node("Mul", ["hw", "factor"], ["ohw"], name="mul"),
                  h.make_node("Concat", ["lead", "ohw"], ["sizes"], axis=0, name="concat")]
        ins = ["x", "", "", "sizes"]
    nodes.append(h.make_node("Resize", ins, ["y"], name="resize", mode="cubic", **attrs))
    path = _save(tmp_path / "m.onnx", nodes,
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits, 13)
    _compare(path, tmp_path / "out", HW, HW_SIZES, atol=1e-4)


def _sizes_chain(out_hw):
    """Nodes and initializers of a sizes input [1, 3, *out_hw(H, W)] computed from x's Shape
    (out_hw: the node list's two outputs from the scalars "h" and "w")."""
    i = lambda name, v: nh.from_array(np.array(v, np.int64), name)       # noqa: E731
    nodes = [h.make_node("Shape", ["x"], ["shp"], name="shape"),
             h.make_node("Gather", ["shp", "k2"], ["h"], axis=0, name="gh"),
             h.make_node("Gather", ["shp", "k3"], ["w"], axis=0, name="gw"),
             *out_hw,
             h.make_node("Concat", ["lead", "oh", "ow"], ["sizes"], axis=0, name="concat")]
    return nodes, [i("k2", [2]), i("k3", [3]), i("lead", [1, 3]), i("two", [2]),
                   i("three", [3]), i("four", [4])]


ANTIALIAS_CASES = [   # mode, attributes, scales (None: sizes H // 2, W // 3 from the Shape)
    ("linear", {"coordinate_transformation_mode": "half_pixel"}, [1, 1, 0.5, 0.375]),
    ("cubic", {"coordinate_transformation_mode": "pytorch_half_pixel", "exclude_outside": 1},
     [1, 1, 0.625, 1.5]),
    ("linear", {"coordinate_transformation_mode": "asymmetric"}, [1, 1, 0.25, 0.75]),
    ("cubic", {"coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.5}, None),
    ("linear", {"coordinate_transformation_mode": "half_pixel"}, None),
]


@pytest.mark.parametrize("mode, attrs, scales", ANTIALIAS_CASES)
def test_antialiased_resize_over_dynamic_sizes(tmp_path, mode, attrs, scales):
    """Antialiased downscales: the taps of the stretched filter and their weights computed at
    each call. By constant scales the count is fixed; by sizes from a Shape chain (scales
    between 0.4 and 0.5, and 0.25 and 0.33, at run time) it changes with the size, within
    the room of the range's largest count. Against onnxruntime."""
    if scales is None:
        nodes, inits = _sizes_chain([h.make_node("Div", ["h", "two"], ["oh"], name="dh"),
                                     h.make_node("Div", ["w", "three"], ["ow"], name="dw")])
        ins = ["x", "", "", "sizes"]
    else:
        nodes, inits = [], [nh.from_array(np.array(scales, np.float32), "scales")]
        ins = ["x", "", "scales"]
    nodes.append(h.make_node("Resize", ins, ["y"], name="resize", mode=mode, antialias=1,
                             **attrs))
    path = _save(tmp_path / "m.onnx", nodes,
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits, 18)
    _compare(path, tmp_path / "out", {"x": (1, 3, (5, 23), (6, 17))},
             [{"x": s} for s in ((1, 3, 5, 6), (1, 3, 13, 9), (1, 3, 11, 16), (1, 3, 23, 17))],
             atol=1e-5)


def test_antialias_by_sizes_over_two_dimensions_is_refused(tmp_path):
    """An antialiased output height of (H + W) // 4: its count of taps hangs on two
    dimensions at once; refused with the node, its operator and a dimension named."""
    nodes, inits = _sizes_chain([h.make_node("Add", ["h", "w"], ["hw"], name="add"),
                                 h.make_node("Div", ["hw", "four"], ["oh"], name="dh"),
                                 h.make_node("Div", ["w", "two"], ["ow"], name="dw")])
    nodes.append(h.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="rs", mode="linear",
                             antialias=1))
    path = _save(tmp_path / "m.onnx", nodes,
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits, 18)
    with pytest.raises(UnsupportedError, match=r"node 'rs' \(Resize-18\): .*antialiased resize "
                                               r"by a scale of sizes over several dimensions"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": (1, 3, (5, 23), (6, 17))},
                     build=False)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("sizes", ["constant", "chain"])
def test_tf_crop_and_resize_over_dynamic_sizes(tmp_path, mode, sizes):
    """A roi reaching outside the input on both axes, over a dynamic input (constant output
    sizes: the scale out / in at run time) or a dynamic output (sizes 2H - 1 and W + 3 from
    the Shape): the crop's coordinates and the outputs outside it (extrapolation_value)
    computed at each call. onnx.reference is the yardstick, as for static sizes
    (tests/test_ops_resize.py: onnxruntime has no tf_crop_and_resize cubic)."""
    from onnx.reference import ReferenceEvaluator
    roi = nh.from_array(np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32), "roi")
    if sizes == "constant":
        nodes, inits = [], [nh.from_array(np.array([1, 3, 6, 13], np.int64), "sizes")]
    else:
        nodes, inits = _sizes_chain([
            h.make_node("Mul", ["h", "two"], ["h2"], name="mh"),
            h.make_node("Sub", ["h2", "one"], ["oh"], name="sh"),
            h.make_node("Add", ["w", "three"], ["ow"], name="aw")])
        inits.append(nh.from_array(np.array([1], np.int64), "one"))
    nodes.append(h.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], name="resize",
                             mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                             extrapolation_value=7.5))
    path = _save(tmp_path / "m.onnx", nodes,
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits + [roi], 19)
    mlcc.compile(path, tmp_path / "out", shapes={"x": (1, 3, (2, 19), (3, 14))})
    m, ref = mlcc.load(tmp_path / "out"), ReferenceEvaluator(onnx.load(str(path)))
    rng = np.random.default_rng(0)
    for hh, ww in ((2, 3), (7, 11), (19, 14)):
        x = rng.standard_normal((1, 3, hh, ww)).astype(np.float32)
        want = ref.run(None, {"x": x})[0]
        assert (want == 7.5).any() and (want != 7.5).any()
        np.testing.assert_allclose(m.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{hh}x{ww}")


# ------------------------------------------------------------------ ranges with a step

def test_step_ranges_parse_bind_and_check(tmp_path):
    assert parse_shape_option("x=1,3,64..960:32,32..64") == \
        ("x", (1, 3, (64, 960, 32), (32, 64)))
    for text in ("x=1,3,64..960:", "x=1,3,64..960:a"):
        with pytest.raises(ModelError, match="LO..HI:STEP"):
            parse_shape_option(text)
    path = _resize_model(tmp_path / "m.onnx", "nearest", "asymmetric", scales=[1, 1, 2, 2])
    with pytest.raises(ModelError, match=r"range 8..30:8 must have LO and HI multiples of "
                                         r"STEP >= 1"):
        mlcc.compile(path, tmp_path / "bad", shapes={"x": (1, 3, (8, 30, 8), 5)}, build=False)
    res = mlcc.compile(path, tmp_path / "out", shapes={"x": (1, 3, (8, 32, 8), 5)})
    assert res.manifest["dims"] == [{"name": "H", "symbol": "H", "min": 8, "max": 32,
                                     "step": 8}]
    assert res.manifest["outputs"][0]["shape"] == [1, 3, "2*H", 10]
    m = mlcc.load(tmp_path / "out")
    for hgt in (8, 24, 32):
        assert m.run({"x": np.ones((1, 3, hgt, 5), np.float32)})["y"].shape == (1, 3, 2 * hgt, 10)
    with pytest.raises(InputError, match=r"'H' \(x\[2\]\) is 12, outside the range 8..32 "
                                         r"\(multiples of 8\)"):
        m.run({"x": np.ones((1, 3, 12, 5), np.float32)})
    assert "_DIM0_STEP" in (tmp_path / "out" / "model.h").read_text()


@needs_wasm
def test_step_in_the_javascript_api(tmp_path):
    """model.shapes(dims) / model.run(inputs, dims) take a multiple of the step and refuse
    any other size with MLCC_ERR_DIMS_OUT_OF_RANGE, naming the dimension."""
    from test_targets_wasm import node
    path = _resize_model(tmp_path / "m.onnx", "nearest", "asymmetric", scales=[1, 1, 2, 2])
    mlcc.compile(path, tmp_path / "w", shapes={"x": (1, 3, (8, 32, 8), 5)}, target="wasm")
    r = node('import { createModel } from "./model.mjs";\n'
             'const m = await createModel();\n'
             'console.log(JSON.stringify(m.shapes({ H: 24 }).outputs));\n'
             'try { m.shapes({ H: 12 }); } catch (e) { console.log(e.status, e.message); }\n',
             tmp_path / "w")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "[[1,3,48,10]]"
    assert lines[1] == ('14 dimension "H" is 12, outside the range 8..32 (multiples of 8) the '
                        'model was compiled for')


def test_step_makes_strided_halving_exact():
    """ceil(H / 2) five times, then doubled back: with H a multiple of 32 every size is a
    polynomial (the skip connections of a U-Net or FPN add equal shapes), without it they are
    not the same expression."""
    def chain(hgt):
        sizes = [hgt]
        for _ in range(5):
            sizes.append((sizes[-1] + 2 - 3) // 2 + 1)      # 3x3 stride-2 convolution, pad 1
        return sizes
    stepped = chain(SymInt.var(DimVar("H", 64, 960, 0, 32)))
    assert stepped[-1] * 2 - stepped[-2] == 0 and stepped[-1].c_expr() == "(dims[0] / 32)"
    plain = chain(SymInt.var(DimVar("H", 64, 960, 0)))
    assert not isinstance(plain[-1] * 2 - plain[-2], int)
    with pytest.raises(SymbolicError, match=r"depends on the size of H \(64..960\); .* a "
                                            r"range with a step, LO..HI:STEP, may decide it"):
        assert plain[-1] * 2 == plain[-2]


@pytest.mark.parametrize("width", [(4, 20, 2), (4, 21)])
def test_split_and_concat_along_a_dynamic_axis(tmp_path, width):
    """Split in two along a dynamic axis (ceil(W / 2) and the rest; with a step of 2, halves
    of W = 2k), Concat back in the other order along that axis, and a Slice of it."""
    i = lambda name, v: nh.from_array(np.array(v, np.int64), name)      # noqa: E731
    path = _save(tmp_path / "m.onnx", [
        h.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2, name="split"),
        h.make_node("Concat", ["b", "a", "x"], ["y"], axis=1, name="concat"),
        h.make_node("Slice", ["y", "st", "en", "ax"], ["y2"], name="slice")],
        [h.make_tensor_value_info("x", T.FLOAT, [3, "W"])],
        [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "y2")],
        [i("st", [1]), i("en", [-2]), i("ax", [1])], opset=18)
    _compare(path, tmp_path / "out", {"x": (3, width)},
             [{"x": (3, w)} for w in ((4, 10, 20) if len(width) > 2 else (4, 9, 21))])


# ------------------------------------------------------ sizes computed into tensors

def _anchor_model(path):
    """YOLOv8's anchor grid: Shape -> Gather -> Cast(float) -> Range(0, W, 1) + 0.5,
    Reshape, Expand to [H, W] (a shape from two Shapes), Concat along the dynamic axis, a
    ConstantOfShape of [H*W, 1] (the stride), and a Slice of a constant table up to W."""
    f = lambda name, v: nh.from_array(np.array(v, np.float32), name)      # noqa: E731
    i = lambda name, v: nh.from_array(np.array(v, np.int64), name)        # noqa: E731
    inits = [f("zero", 0.0), f("one", 1.0), f("half", 0.5), i("k2", 2), i("k3", 3),
             i("row", [-1, 1]), i("col", [1, -1]), i("flat", [-1]), i("ax0", [0]),
             i("s0", [0]), i("hw_len", [-1, 1]),
             nh.from_array(np.arange(40 * 3, dtype=np.float32).reshape(40, 3), "table")]
    nodes = [
        h.make_node("Shape", ["x"], ["shp"], name="shape"),
        h.make_node("Gather", ["shp", "k2"], ["hh"], axis=0, name="g_h"),
        h.make_node("Gather", ["shp", "k3"], ["ww"], axis=0, name="g_w"),
        h.make_node("Cast", ["hh"], ["hf"], to=T.FLOAT, name="cast_h"),
        h.make_node("Cast", ["ww"], ["wf"], to=T.FLOAT, name="cast_w"),
        h.make_node("Range", ["zero", "hf", "one"], ["ry"], name="range_h"),
        h.make_node("Range", ["zero", "wf", "one"], ["rx"], name="range_w"),
        h.make_node("Add", ["ry", "half"], ["ry5"], name="add_h"),
        h.make_node("Add", ["rx", "half"], ["rx5"], name="add_w"),
        h.make_node("Reshape", ["ry5", "row"], ["ry2"], name="reshape_h"),
        h.make_node("Reshape", ["rx5", "col"], ["rx2"], name="reshape_w"),
        h.make_node("Slice", ["shp", "k2_1", "k4_1"], ["hw"], name="hw"),
        h.make_node("Expand", ["ry2", "hw"], ["gy"], name="expand_h"),
        h.make_node("Expand", ["rx2", "hw"], ["gx"], name="expand_w"),
        h.make_node("Reshape", ["gy", "flat"], ["gy1"], name="flat_h"),
        h.make_node("Reshape", ["gx", "flat"], ["gx1"], name="flat_w"),
        h.make_node("Concat", ["gx1", "gy1"], ["grid"], axis=0, name="concat"),
        h.make_node("Mul", ["hh", "ww"], ["n"], name="mul"),
        h.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        h.make_node("Concat", ["n1", "one_i"], ["cshape"], axis=0, name="cshape"),
        h.make_node("ConstantOfShape", ["cshape"], ["stride"], name="cos",
                    value=nh.from_array(np.array([8.0], np.float32))),
        h.make_node("Reshape", ["x", "hw_len"], ["xf"], name="x_flat"),
        h.make_node("Slice", ["xf", "s0", "n1"], ["xs"], name="x_slice"),
        h.make_node("Mul", ["xs", "stride"], ["y2"], name="scaled"),
        h.make_node("Slice", ["table", "s0", "ww1", "ax0"], ["y3"], name="table_slice"),
        h.make_node("Unsqueeze", ["ww", "ax0"], ["ww1"], name="unsq_w"),
        h.make_node("Identity", ["grid"], ["y"], name="out")]
    inits += [i("k2_1", [2]), i("k4_1", [4]), i("one_i", [1])]
    order = ["shape", "g_h", "g_w", "cast_h", "cast_w", "range_h", "range_w", "add_h", "add_w",
             "reshape_h", "reshape_w", "hw", "expand_h", "expand_w", "flat_h", "flat_w",
             "concat", "mul", "unsq", "cshape", "cos", "x_flat", "x_slice", "scaled", "unsq_w",
             "table_slice", "out"]
    nodes = sorted(nodes, key=lambda n: order.index(n.name))
    return _save(path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 1, "H", "W"])],
                 [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "y2", "y3")],
                 inits)


def test_range_constant_of_shape_expand_slice_over_dynamic_sizes(tmp_path):
    path = _anchor_model(tmp_path / "m.onnx")
    _compare(path, tmp_path / "out", {"x": (1, 1, (2, 11), (3, 40))},
             [{"x": (1, 1, hh, ww)} for hh, ww in ((2, 3), (7, 13), (11, 40))])


def test_float_arithmetic_on_a_size_is_refused(tmp_path):
    """A size cast to float and divided: refused naming the node (not folded as integers)."""
    path = _save(tmp_path / "m.onnx", [
        h.make_node("Shape", ["x"], ["s"], name="shape"),
        h.make_node("Cast", ["s"], ["sf"], to=T.FLOAT, name="cast"),
        h.make_node("Div", ["sf", "three"], ["y"], name="div")],
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
        [h.make_tensor_value_info("y", T.FLOAT, [2])],
        [nh.from_array(np.array(3.0, np.float32), "three")])
    with pytest.raises(UnsupportedError, match=r"node 'div' \(Div-13\): .*size of N \(1..4\)"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": ((1, 4), 3)}, build=False)


def _decoding_step_model(path):
    """One decoding step over a KV cache of P entries, as exporters write it: the position P
    (a size) read as data (a Gather of a table row, cast to float and scaled: rotary angles;
    compared with a run-time Range: the causal mask), torch's expand of the mask
    (Where(Equal(shape, -1), 1, shape), Max), and batched MatMuls whose matrices have P
    columns or P rows (scores over the cache, their weighted sum; a broadcast batch too)."""
    i64 = lambda name, v: nh.from_array(np.array(v, np.int64), name)  # noqa: E731
    rng = np.random.default_rng(5)
    nodes = [
        h.make_node("Concat", ["past", "x"], ["kv"], axis=2, name="cat"),
        h.make_node("Shape", ["past"], ["s"], name="shape"),
        h.make_node("Gather", ["s", "two"], ["p"], axis=0, name="p"),
        h.make_node("Unsqueeze", ["p", "zero"], ["pu"], name="pu"),
        h.make_node("Gather", ["table", "pu"], ["pos"], axis=0, name="pos"),
        h.make_node("Cast", ["pu"], ["pf"], to=T.FLOAT, name="pf"),
        h.make_node("Mul", ["pf", "freq"], ["angles"], name="angles"),
        h.make_node("Add", ["p", "one"], ["t"], name="t"),
        h.make_node("Range", ["zero_s", "t", "one"], ["r"], name="range"),
        h.make_node("LessOrEqual", ["r", "pu"], ["le"], name="le"),
        h.make_node("Cast", ["le"], ["lef"], to=T.FLOAT, name="lef"),
        h.make_node("Unsqueeze", ["t", "zero"], ["tu"], name="tu"),
        h.make_node("Concat", ["ones3", "tu"], ["shape2"], axis=0, name="shape2"),
        h.make_node("Equal", ["shape2", "minus1"], ["isneg"], name="isneg"),
        h.make_node("Where", ["isneg", "ones4", "shape2"], ["shape3"], name="where"),
        h.make_node("Max", ["shape3", "ones4"], ["shape4"], name="max"),
        h.make_node("Expand", ["lef", "shape4"], ["mask"], name="expand"),
        h.make_node("Transpose", ["kv"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
        h.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        h.make_node("Add", ["scores", "mask"], ["masked"], name="masked"),
        h.make_node("Softmax", ["masked"], ["w"], axis=-1, name="softmax"),
        h.make_node("MatMul", ["w", "kv"], ["y"], name="wv"),
        h.make_node("MatMul", ["a", "b"], ["ab"], name="broadcast_batch")]
    inits = [i64("two", 2), i64("zero", [0]), i64("zero_s", 0), i64("one", 1),
             i64("ones3", [1, 1, 1]), i64("minus1", -1), i64("ones4", [1, 1, 1, 1]),
             nh.from_array(rng.standard_normal((17, 4)).astype(np.float32), "table"),
             nh.from_array(rng.standard_normal(4).astype(np.float32), "freq")]
    vi = h.make_tensor_value_info
    return _save(path, nodes,
                 [vi("past", T.FLOAT, [1, 3, "P", 4]), vi("x", T.FLOAT, [1, 3, 1, 4]),
                  vi("q", T.FLOAT, [1, 3, 1, 4]), vi("a", T.FLOAT, [2, 1, 3, "P"]),
                  vi("b", T.FLOAT, [1, 3, "P", 5])],
                 [vi(n, T.FLOAT, None) for n in ("y", "kv", "pos", "angles", "ab")], inits)


def test_decoding_step_over_a_kv_cache(tmp_path):
    path = _decoding_step_model(tmp_path / "m.onnx")
    ranges = {"past": (1, 3, (1, 13), 4), "a": (2, 1, 3, (1, 13))}
    _compare(path, tmp_path / "out", ranges,
             [{"past": (1, 3, p, 4), "x": (1, 3, 1, 4), "q": (1, 3, 1, 4), "a": (2, 1, 3, p),
               "b": (1, 3, p, 5)} for p in (1, 6, 13)])


@pytest.mark.parametrize("target", [pytest.param("arm", marks=needs_arm),
                                    pytest.param("wasm", marks=needs_wasm)])
def test_decoding_step_on_cross_targets(tmp_path, target):
    """The sizes computed as data and the batched MatMul over dynamic matrices on arm (qemu)
    and wasm (node)."""
    path = _decoding_step_model(tmp_path / "m.onnx")
    _compare(path, tmp_path / "out", {"past": (1, 3, (1, 13), 4), "a": (2, 1, 3, (1, 13))},
             [{"past": (1, 3, p, 4), "x": (1, 3, 1, 4), "q": (1, 3, 1, 4), "a": (2, 1, 3, p),
               "b": (1, 3, p, 5)} for p in (2, 13)], target=target)


def test_sizes_read_as_data_that_no_range_computes_are_refused(tmp_path):
    """A shape over the sizes that a kernel reads, neither one value nor an increasing
    progression ([1, 3, P, 4] times a float): refused naming the node and the dimension."""
    path = _save(tmp_path / "m.onnx", [
        h.make_node("Shape", ["x"], ["s"], name="shape"),
        h.make_node("Cast", ["s"], ["sf"], to=T.FLOAT, name="cast"),
        h.make_node("Mul", ["sf", "x1"], ["y"], name="mul")],
        [h.make_tensor_value_info("x", T.FLOAT, [1, 3, "P", 4]),
         h.make_tensor_value_info("x1", T.FLOAT, [4])],
        [h.make_tensor_value_info("y", T.FLOAT, [4])])
    with pytest.raises(UnsupportedError, match=r"node 'mul' \(Mul-13\): .*read as data at run "
                       r"time .*size of P \(1..9\)"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": (1, 3, (1, 9), 4)}, build=False)


# ------------------------------------------------------------------ cross targets

@pytest.mark.parametrize("target", [pytest.param("arm", marks=needs_arm),
                                    pytest.param("wasm", marks=needs_wasm)])
def test_resize_and_range_on_cross_targets(tmp_path, target):
    """The run-time tables and Range on arm (qemu) and wasm (node): the same results."""
    path = _resize_model(tmp_path / "r.onnx", "linear", "half_pixel", scales=[1, 1, 2, 0.5])
    _compare(path, tmp_path / "r", HW, [HW_SIZES[0], HW_SIZES[2]], target=target)
    path = _resize_model(tmp_path / "n.onnx", "nearest", "asymmetric", sizes_from_shape=[2, 3])
    _compare(path, tmp_path / "n", HW, [HW_SIZES[1], HW_SIZES[3]], target=target)
    path = _anchor_model(tmp_path / "a.onnx")
    _compare(path, tmp_path / "a", {"x": (1, 1, (2, 11), (3, 40))},
             [{"x": (1, 1, 7, 13)}], target=target)
    path = _save(tmp_path / "p.onnx",
                 [h.make_node("Pad", ["x", "pads"], ["y"], mode="edge", name="pad")],
                 [h.make_tensor_value_info("x", T.FLOAT, [2, "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)],
                 [nh.from_array(np.array([1, -1, 0, 2], np.int64), "pads")])
    _compare(path, tmp_path / "p", {"x": (2, (2, 9))}, [{"x": (2, 2)}, {"x": (2, 7)}],
             target=target)


# ------------------------------------------------------------------ Pad

def _pad_model(path, mode, pads, opset):
    inits = [nh.from_array(np.array(pads, np.int64), "pads"),
             nh.from_array(np.array(1.5, np.float32), "cv")]
    return _save(path, [h.make_node("Pad", ["x", "pads", "cv"], ["y"], mode=mode, name="pad")],
                 [h.make_tensor_value_info("x", T.FLOAT, [2, 3, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits, opset)


@pytest.mark.parametrize("mode, pads", [
    ("constant", [0, 0, 1, 2, 0, 0, 3, 0]),          # the dynamic axes padded
    ("constant", [0, 1, -1, 0, 0, 0, 2, -2]),        # cropping a dynamic axis, padding another
    ("edge", [0, 0, 2, 1, 0, 0, 1, 3]),
    ("edge", [1, 0, -1, 2, 0, 2, 0, -1]),
    ("reflect", [0, 0, 2, 1, 0, 0, 1, 3]),           # pads up to the smallest size - 1
    ("reflect", [1, 0, -1, 1, 0, 1, 0, -1]),         # a static axis too, crops before mirroring
    ("wrap", [0, 0, 3, 1, 0, 0, 1, 4]),
    ("wrap", [1, 1, -1, 2, 0, 2, 0, -2]),
])
def test_pad_over_dynamic_sizes(tmp_path, mode, pads):
    """Every mode's maps computed at run time, against onnxruntime (wrap: opset 19)."""
    path = _pad_model(tmp_path / "m.onnx", mode, pads, 19 if mode == "wrap" else 13)
    _compare(path, tmp_path / "out", {"x": (2, 3, (3, 9), (4, 17))},
             [{"x": (2, 3, hh, ww)} for hh, ww in ((3, 4), (5, 11), (9, 17))])


@pytest.mark.parametrize("mode", ["reflect", "wrap"])
def test_pad_wider_than_the_axis_over_dynamic_sizes(tmp_path, mode):
    """Pads wider than the axis (down to one element kept after cropping: reflect repeats
    it) mirror or wrap again and again, as the ONNX reference's np.pad does (after the crop,
    as onnxruntime orders them), at every size of the range."""
    path = _pad_model(tmp_path / "m.onnx", mode, [0, 0, 7, -1, 0, 0, 2, 9], 19)
    mlcc.compile(path, tmp_path / "out", shapes={"x": (2, 3, (1, 5), (2, 6))})
    m = mlcc.load(tmp_path / "out")
    rng = np.random.default_rng(0)
    for hh in range(1, 6):
        for ww in range(2, 7):
            x = rng.standard_normal((2, 3, hh, ww)).astype(np.float32)
            ref = np.pad(x[..., 1:], ((0, 0), (0, 0), (7, 2), (0, 9)), mode=mode)
            np.testing.assert_array_equal(m.run({"x": x})["y"], ref, err_msg=f"{hh}x{ww}")


def test_pad_that_may_crop_a_whole_axis_is_refused(tmp_path):
    """A reflect pad of an axis that some sizes of the range crop away: the node, its
    operator and the dimension named."""
    path = _pad_model(tmp_path / "m.onnx", "reflect", [0, 0, 1, 0, 0, 0, -3, 0], 13)
    with pytest.raises(UnsupportedError, match=r"node 'pad' \(Pad-13\): .*depends on the size "
                                               r"of H \(3..9\)"):
        mlcc.compile(path, tmp_path / "out", shapes={"x": (2, 3, (3, 9), 5)}, build=False)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [1, 3], "pads": [0, 1, 2, 0], "dilations": [1, 2]},
])
def test_strided_max_pool_over_a_dynamic_width(tmp_path, attrs):
    """A MaxPool striding along a dynamic width runs the 2-D kernel, which computes its tap
    offsets into the stride phases at the actual width (pool.h, tap_offsets NULL)."""
    path = _save(tmp_path / "m.onnx", [h.make_node("MaxPool", ["x"], ["y"], name="pool",
                                                   **attrs)],
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 2, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)])
    _compare(path, tmp_path / "out", {"x": (1, 2, (4, 9), (5, 23))},
             [{"x": (1, 2, hh, ww)} for hh, ww in ((4, 5), (7, 12), (9, 23))])
    assert "mlcc_f32_maxpool2d(" in (tmp_path / "out" / "model.c").read_text()


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 2], "strides": [3, 2]},                      # PP-OCR rec's
    {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 2, 0, 0]},
    {"kernel_shape": [2, 3], "strides": [2, 3], "pads": [0, 1, 1, 0], "count_include_pad": 1},
    {"kernel_shape": [1, 3], "strides": [1, 2], "dilations": [1, 2]},
    {"kernel_shape": [2, 2]},
])
def test_average_pool_over_a_dynamic_width_runs_the_2d_kernel(tmp_path, attrs):
    """An AveragePool over a dynamic width (static height) runs the 2-D kernel, as a static
    build does: its column divisors at the largest width hold for every smaller one (no end
    padding, floor mode), and a stride's tap offsets are computed at the actual width."""
    path = _save(tmp_path / "m.onnx", [h.make_node("AveragePool", ["x"], ["y"], name="pool",
                                                   **attrs)],
                 [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 6, "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], opset=19)
    _compare(path, tmp_path / "out", {"x": ((1, 2), 3, 6, (6, 131))},
             [{"x": (n, 3, 6, ww)} for n, ww in ((1, 6), (2, 7), (1, 64), (2, 131))])
    assert "mlcc_f32_avgpool2d(" in (tmp_path / "out" / "model.c").read_text()


# ------------------------------------------------------------------ normalizations

@pytest.mark.parametrize("axis, scale_shape, stats", [
    (1, [6], True),          # over the dynamic axis and the last: Scale broadcast along S
    (-2, [1, 6], False),
    (-1, [6], True),         # over the static axis (the kernel's rows are the dynamic ones)
])
def test_layer_norm_over_a_dynamic_axis(tmp_path, axis, scale_shape, stats):
    rng = np.random.default_rng(2)
    inits = [nh.from_array(rng.standard_normal(scale_shape).astype(np.float32), "g"),
             nh.from_array(rng.standard_normal(scale_shape).astype(np.float32), "b")]
    outs = ["y", "mean", "inv"] if stats else ["y"]
    path = _save(tmp_path / "m.onnx",
                 [h.make_node("LayerNormalization", ["x", "g", "b"], outs, axis=axis,
                              epsilon=1e-3, name="ln")],
                 [h.make_tensor_value_info("x", T.FLOAT, [2, "S", 6])],
                 [h.make_tensor_value_info(o, T.FLOAT, None) for o in outs], inits, 17)
    _compare(path, tmp_path / "out", {"x": (2, (1, 9), 6)},
             [{"x": (2, s, 6)} for s in (1, 4, 9)])


@pytest.mark.parametrize("node, opset", [
    (h.make_node("InstanceNormalization", ["x", "c", "c2"], ["y"], epsilon=1e-3,
                 name="n"), 13),
    (h.make_node("GroupNormalization", ["x", "c", "c2"], ["y"], num_groups=2, epsilon=1e-3,
                 name="n"), 21),
    (h.make_node("LpNormalization", ["x"], ["y"], axis=2, p=2, name="n"), 13),
    (h.make_node("LpNormalization", ["x"], ["y"], axis=3, p=1, name="n"), 13),
    (h.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2, 3], name="n"), 13),
])
def test_normalizations_over_dynamic_maps(tmp_path, node, opset):
    """Normalizations whose statistics run over the dynamic height and width."""
    rng = np.random.default_rng(3)
    inits = [nh.from_array(rng.standard_normal(4).astype(np.float32), n) for n in ("c", "c2")]
    path = _save(tmp_path / "m.onnx", [node],
                 [h.make_tensor_value_info("x", T.FLOAT, [2, 4, "H", "W"])],
                 [h.make_tensor_value_info("y", T.FLOAT, [2, 4, None, None])],
                 [i for i in inits if i.name in node.input], opset)
    _compare(path, tmp_path / "out", {"x": (2, 4, (1, 7), (3, 12))},
             [{"x": (2, 4, hh, ww)} for hh, ww in ((1, 3), (4, 9), (7, 12))])



# ------------------------------------------------------------------ TopK

def _topk_model(path, k_node, largest):
    i = lambda name, v: nh.from_array(np.array(v, np.int64), name)      # noqa: E731
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape"),
             h.make_node("Slice", ["s", "one", "two"], ["w"], name="w"),
             h.make_node("Div", ["w", "two"], ["half"], name="half"),
             h.make_node("TopK", ["x", k_node], ["v", "ix"], axis=-1, largest=largest,
                         name="topk")]
    return _save(path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, "W"])],
                 [h.make_tensor_value_info("v", T.FLOAT, None),
                  h.make_tensor_value_info("ix", T.INT64, None)],
                 [i("k3", [3]), i("one", [1]), i("two", [2])])


@pytest.mark.parametrize("k, largest", [("k3", 1), ("k3", 0), ("half", 1)])
def test_topk_along_a_dynamic_axis(tmp_path, k, largest):
    """k constant (3, at most the axis's smallest size) or half the axis (W // 2 from its
    Shape: W // 2 <= W is decided with the division bounded): the kernel's sizes are the
    actual ones."""
    _compare(_topk_model(tmp_path / "m.onnx", k, largest), tmp_path / "out",
             {"x": (2, (3, 20))}, [{"x": (2, w)} for w in (3, 8, 13, 20)])


def test_topk_of_a_k_larger_than_some_sizes_is_refused(tmp_path):
    """k = 3 over widths from 2: k <= W is not true at every size (onnxruntime fails at W = 2):
    refused, naming the node and the dimension."""
    with pytest.raises(UnsupportedError, match=r"node 'topk' \(TopK-11\): .*depends on the "
                                               r"size of W \(2..20\)"):
        mlcc.compile(_topk_model(tmp_path / "m.onnx", "k3", 1), tmp_path / "out",
                     shapes={"x": (2, (2, 20))}, build=False)


# ------------------------------------------------------------------ batched MatMul

def test_batched_matmul_over_a_dynamic_batch(tmp_path):
    """A dynamic outermost batch axis, B broadcast along the inner one and a shared B: the
    offset tables at the largest batch hold for every smaller one."""
    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), "w")
    path = _save(tmp_path / "m.onnx", [
        h.make_node("MatMul", ["a", "b"], ["y"], name="bmm"),
        h.make_node("MatMul", ["a", "w"], ["y2"], name="shared")],
        [h.make_tensor_value_info("a", T.FLOAT, ["N", 3, 7, 4]),
         h.make_tensor_value_info("b", T.FLOAT, ["N", 1, 4, 6])],
        [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "y2")], [w])
    _compare(path, tmp_path / "out", {"a": ((1, 5), 3, 7, 4)},
             [{"a": (n, 3, 7, 4), "b": (n, 1, 4, 6)} for n in (1, 2, 5)])


def test_one_row_of_a_dynamic_batch(tmp_path):
    """A dynamic row count that may be 1: B in column panels (250 columns: a partial last
    panel and vector) and a narrow B (3 columns) kept in unpadded rows, whose one-row loop
    skips A's zeros (after a ReLU) at 1 row (b_finite); the weights of a static build at 8
    rows. Against onnxruntime at 1, 2 and 7 rows, depths over two k blocks."""
    rng = np.random.default_rng(5)
    w = lambda name, *shape: nh.from_array(rng.standard_normal(shape).astype(np.float32),  # noqa
                                           name)
    path = _save(tmp_path / "m.onnx", [
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("MatMul", ["r", "w1"], ["m1"], name="wide"),
        h.make_node("Add", ["m1", "b1"], ["a1"], name="bias"),
        h.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        h.make_node("Gemm", ["r1", "w2", "b2"], ["y"], transB=1, alpha=0.5, name="narrow")],
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 300])],
        [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("a1", T.FLOAT,
                                                                                None)],
        [w("w1", 300, 250), w("b1", 250), w("w2", 3, 250), w("b2", 3)])
    res = _compare(path, tmp_path / "range", {"x": ((1, 8), 300)},
                   [{"x": (n, 300)} for n in (1, 2, 7)], atol=1e-4)
    code = (tmp_path / "range" / "model.c").read_text()
    assert "mlcc_f32_gemm__panels_threaded(" in code and code.count(".b_finite = 1") == 1
    static8 = mlcc.compile(path, tmp_path / "static8", shapes={"x": (8, 300)}, build=False)
    assert res.manifest["weights_size"] == static8.manifest["weights_size"]


# ------------------------------------------------------------------ real models

def _real(name):
    import fetch_models as fm
    try:
        return fm.fetch(name)
    except fm.DownloadError as exc:      # no network or no index: not a failure of mlcc
        pytest.skip(f"cannot download {name}: {exc}")


@pytest.mark.slow
def test_ppocr_det_64_to_960_in_steps_of_32(tmp_path):
    """PP-OCRv4 det over both sides, multiples of 32 (its FPN adds maps halved five times and
    doubled back): smallest, odd multiples in between, largest; the arena at most the static
    build's at 960 x 960."""
    path = _real("ppocr_det")
    rng = (64, 960, 32)
    res = _compare(path, tmp_path / "det", {"x": (1, 3, rng, rng)},
                   [{"x": (1, 3, hh, ww)} for hh, ww in ((64, 64), (96, 416), (352, 160))],
                   atol=1e-4, rtol=1e-3)
    static = mlcc.compile(path, tmp_path / "static", shapes={"x": (1, 3, 960, 960)},
                          build=False)
    assert res.manifest["arena_size"] <= static.manifest["arena_size"]


@pytest.mark.slow
def test_yolov8n_160_to_640_in_steps_of_32(tmp_path):
    path = _real("yolov8n")
    rng = (160, 640, 32)
    _compare(path, tmp_path / "yolo", {"images": (1, 3, rng, rng)},
             [{"images": (1, 3, hh, ww)} for hh, ww in ((160, 160), (224, 416), (640, 640))],
             atol=2e-3, rtol=1e-3)


def _minilm_feeds(shapes):
    n = shapes["input_ids"][1]
    rng = np.random.default_rng(n)
    ids = rng.integers(1000, 30000, (1, n)).astype(np.int64)
    mask = np.ones((1, n), np.int64)
    mask[0, max(1, n - n // 4):] = 0          # padding at the end: the mask matters
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.slow
def test_minilm_sequence_1_to_256(tmp_path):
    """all-MiniLM-L6-v2 written with a dynamic sequence length: LayerNorm over the hidden
    axis, the projections, attention (softmax over the dynamic axis, the mask) and the mean
    pooling over 1 to 256 tokens."""
    import fetch_models as fm
    try:
        path = fm.minilm("sequence")
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download MiniLM: {exc}")
    _compare(path, tmp_path / "minilm", {"input_ids": (1, (1, 256))},
             [{"input_ids": (1, n), "attention_mask": (1, n)} for n in (1, 9, 128, 256)],
             atol=2e-4, rtol=1e-3, feeds=_minilm_feeds)


def test_computed_tables_at_every_width_under_address_sanitizer(tmp_path):
    """Every width of the range (and one past each end, a status) through the run-time
    Resize tables (nearest by 1.5, linear from sizes 2x), an edge Pad and a Range, buffers
    of exactly their size, under AddressSanitizer and UBSan: no read or write past any (and
    the same model against onnxruntime at three widths)."""
    from test_dynamic_shapes import run_every_size_under_asan
    i = lambda name, v: nh.from_array(np.array(v, np.int64), name)      # noqa: E731
    f = lambda name, v: nh.from_array(np.array(v, np.float32), name)    # noqa: E731
    path = _save(tmp_path / "m.onnx", [
        h.make_node("Resize", ["x", "", "sc"], ["r1"], mode="nearest", name="near",
                    coordinate_transformation_mode="half_pixel"),
        h.make_node("Pad", ["r1", "pads"], ["y"], mode="edge", name="pad"),
        h.make_node("Shape", ["x"], ["s"], name="shape"),
        h.make_node("Mul", ["s", "two"], ["sizes"], name="mul"),
        h.make_node("Resize", ["x", "", "", "sizes"], ["r2"], mode="linear", name="lin"),
        h.make_node("Gather", ["s", "k3"], ["w"], axis=0, name="w"),
        h.make_node("Cast", ["w"], ["wf"], to=T.FLOAT, name="cast"),
        h.make_node("Range", ["zero", "wf", "one"], ["ramp"], name="range"),
        h.make_node("Reshape", ["ramp", "shape4"], ["ramp4"], name="ramp4"),
        h.make_node("Resize", ["ramp4", "", "sc2"], ["ramp2"], mode="nearest", name="ramp2"),
        h.make_node("Add", ["r2", "ramp2"], ["y2"], name="add")],
        [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 5, "W"])],
        [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "y2")],
        [f("sc", [1, 1, 1, 1.5]), i("pads", [0, 0, 1, -1, 0, 0, 0, 2]),
         i("two", [1, 1, 2, 2]), i("k3", 3), f("zero", 0.0), f("one", 1.0),
         f("sc2", [1, 1, 10, 2]), i("shape4", [1, 1, 1, -1])])
    _compare(path, tmp_path / "out", {"x": (1, 2, 5, (3, 40))},
             [{"x": (1, 2, 5, w)} for w in (3, 17, 40)])
    run_every_size_under_asan(path, tmp_path / "wide", {"x": (1, 2, 5, (3, 40))})
