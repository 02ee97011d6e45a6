"""Outputs whose size depends on the data (docs/dynamic-outputs.md): NonZero,
NonMaxSuppression, TopK (constant and run-time k), Compress and Unique against onnxruntime on
odd shapes, ties, empty results, counts at the maximum and above it (--max-output), the
detector pattern (NMS -> Gather of the selected boxes), the refusals, and the C API's
NAME_output_shape. The same on arm and wasm: tests/test_cross_targets.py."""
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mlcc
from mlcc.errors import MlccError, RuntimeStatusError, UnsupportedError
from test_targets_arm import needs_arm
from test_targets_wasm import needs_wasm
from util import arr, check_model, compile_and_run, make_model, rand, reference_outputs


def one_node(op_type, inputs, n_outputs=1, initializers=None, opset=17, **attrs):
    outs = [f"y{i}" for i in range(n_outputs)]
    names = list(inputs) + list(initializers or {})
    node = helper.make_node(op_type, names, outs, name=f"{op_type.lower()}_node", **attrs)
    return make_model([node], inputs, outs, initializers=initializers, opset=opset)


def many_nodes(op_type, cases, n_outputs=1, opset=17):
    """One model with a node per case (inputs, initializers, attributes), each on inputs of
    its own (names suffixed _i): one compile for many cases. (model, feeds)."""
    nodes, feeds, inits, outs = [], {}, {}, []
    for i, (ins, consts, attrs) in enumerate(cases):
        names = [f"{k}_{i}" for k in list(ins) + list(consts)]
        feeds.update({f"{k}_{i}": v for k, v in ins.items()})
        inits.update({f"{k}_{i}": v for k, v in consts.items()})
        node_outs = [f"y{j}_{i}" for j in range(n_outputs)]
        nodes.append(helper.make_node(op_type, names, node_outs, name=f"{op_type}_{i}",
                                      **attrs))
        outs += node_outs
    return make_model(nodes, feeds, outs, initializers=inits, opset=opset), feeds


# ------------------------------------------------------------------------------ NonZero

@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool"])
def test_nonzero(tmp_path, dtype):
    cases = []
    for shape in [(7,), (3, 5), (2, 3, 5), (1, 1)]:
        x = arr(shape, dtype)
        if dtype == "float32":
            x[x < 0.2] = 0
            x.reshape(-1)[0] = -0.0                 # a zero
            if x.size > 2:
                x.reshape(-1)[2] = np.nan           # not a zero
        elif dtype != "bool":
            x[x % 3 == 0] = 0
        cases.append(({"x": x}, {}, {}))
    model, feeds = many_nodes("NonZero", cases)
    check_model(model, feeds, tmp_path)


@pytest.mark.parametrize("fill", [0, 1])
def test_nonzero_empty_and_full(tmp_path, fill):
    x = np.full((3, 7), fill, np.float32)       # no element / every element (the maximum)
    got = check_model(one_node("NonZero", {"x": x}), {"x": x}, tmp_path)
    assert got["y0"].shape == (2, 21 * fill)


def test_max_output_lowers_the_maximum_and_a_larger_count_is_a_status(tmp_path):
    x = np.zeros((4, 5), np.float32)
    model = one_node("NonZero", {"x": x})
    path = tmp_path / "nz.onnx"
    onnx.save(model, path)
    res = mlcc.compile(path, tmp_path / "out", max_outputs={"y0": 6})
    assert res.manifest["outputs"][0]["shape"] == [2, 6]
    m = mlcc.load(tmp_path / "out")
    x.reshape(-1)[[1, 3, 8, 9, 13, 19]] = 1     # exactly 6: fits
    np.testing.assert_array_equal(m.run({"x": x})["y0"], np.array(np.nonzero(x)))
    x[3, 3] = 2                                 # 7 > 6: a status, not an overrun
    with pytest.raises(RuntimeStatusError, match="exceeds its compiled maximum"):
        m.run({"x": x})
    with pytest.raises(MlccError, match="not an output of a data-dependent size"):
        mlcc.compile(path, tmp_path / "bad", max_outputs={"x": 3})


# --------------------------------------------------------------------------------- TopK

@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "uint8"])
def test_topk_constant_k(tmp_path, dtype):
    cases = []
    for shape, axis, k in [((3, 37), -1, 5), ((3, 37), 1, 37), ((37, 3), 0, 1),
                           ((2, 11, 3), 1, 4), ((5, 13), -1, 0)]:
        for largest in (1, 0):
            x = arr(shape, dtype, seed=len(cases))
            if dtype != "float32":
                x = (x % 5).astype(dtype)       # many ties: the lower index first
            cases.append(({"x": x}, {"k": np.array([k], np.int64)},
                          {"axis": axis, "largest": largest}))
    model, feeds = many_nodes("TopK", cases, 2)
    check_model(model, feeds, tmp_path)


def test_topk_ties_and_heap_boundaries(tmp_path):
    x = np.repeat(np.arange(7, dtype=np.float32), 9)[None, :]     # runs of 9 equal values
    model, feeds = many_nodes("TopK", [({"x": x}, {"k": np.array([k], np.int64)}, {})
                                       for k in (1, 8, 9, 10, 62, 63)], 2)
    check_model(model, feeds, tmp_path)


@pytest.mark.parametrize("k", [0, 3, 13])
def test_topk_runtime_k(tmp_path, k):
    x = rand(4, 13)
    feeds = {"x": x, "k": np.array([k], np.int64)}
    model = one_node("TopK", feeds, 2, axis=1)
    got = check_model(model, feeds, tmp_path)
    assert got["y0"].shape == (4, k)


def test_topk_runtime_k_above_the_axis_is_a_status(tmp_path):
    feeds = {"x": rand(2, 5), "k": np.array([3], np.int64)}
    model = one_node("TopK", feeds, 2)
    compile_and_run(model, feeds, tmp_path)
    m = mlcc.load(next(tmp_path.glob("m*")) / "out")
    for bad in (6, -1):
        with pytest.raises(RuntimeStatusError, match="k is invalid"):
            m.run({**feeds, "k": np.array([bad], np.int64)})


def test_topk_unsorted_returns_the_same_set(tmp_path):
    x = rand(3, 29)
    model = one_node("TopK", {"x": x}, 2, {"k": np.array([6], np.int64)}, sorted=0)
    got = compile_and_run(model, {"x": x}, tmp_path)
    ref = reference_outputs(model, {"x": x})
    np.testing.assert_array_equal(np.sort(got["y1"], axis=1), np.sort(ref["y1"], axis=1))


# -------------------------------------------------------------------- NonMaxSuppression

def boxes_and_scores(batches=2, n=37, classes=3, center=0, seed=0):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 10, (batches, n, 2))
    wh = rng.uniform(0.5, 4, (batches, n, 2))
    if center:
        boxes = np.concatenate([xy, wh], axis=2)
    else:   # [y1, x1, y2, x2], corners in either order
        boxes = np.concatenate([xy, xy + wh], axis=2)[..., [1, 0, 3, 2]]
        boxes[:, ::3] = boxes[:, ::3][..., [2, 3, 0, 1]]
    scores = rng.uniform(0, 1, (batches, classes, n))
    scores[:, :, 5] = scores[:, :, 6]             # equal scores: the lower index first
    boxes[:, 8] = boxes[:, 9]                     # identical boxes
    return boxes.astype(np.float32), scores.astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
def test_nms_constant_parameters(tmp_path, center):
    cases = []
    for per_class, iou, score in [(5, 0.5, 0.3), (100, 0.3, None), (2, 0.0, 0.9),
                                  (37, 1.0, None)]:
        boxes, scores = boxes_and_scores(center=center, seed=len(cases))
        inits = {"m": np.array([per_class], np.int64), "i": np.array([iou], np.float32)}
        if score is not None:
            inits["s"] = np.array([score], np.float32)
        cases.append(({"b": boxes, "sc": scores}, inits, {"center_point_box": center}))
    model, feeds = many_nodes("NonMaxSuppression", cases)
    check_model(model, feeds, tmp_path)


@pytest.mark.parametrize("center", [0, 1])
def test_nms_many_kept_boxes(tmp_path, center):
    """Hundreds of boxes kept per class, so that each candidate is checked against whole
    vectors of kept boxes and a tail: sparse boxes over a large image (most kept), dense ones
    (most suppressed), zero-area and repeated boxes, at three IoU thresholds; exactly
    onnxruntime's selection."""
    rng = np.random.default_rng(center)
    cases = []
    for n, side, iou in [(611, 200.0, 0.5), (389, 30.0, 0.3), (257, 60.0, 0.7)]:
        xy = rng.uniform(0, side, (1, n, 2))
        wh = rng.uniform(0.5, 6, (1, n, 2))
        wh[:, ::17] = 0.0                               # zero-area boxes
        boxes = (np.concatenate([xy, wh], axis=2) if center else
                 np.concatenate([xy, xy + wh], axis=2)[..., [1, 0, 3, 2]])
        boxes[:, 40:50] = boxes[:, 30:40]               # repeats of earlier boxes
        scores = rng.uniform(0, 1, (1, 2, n))
        cases.append(({"b": boxes.astype(np.float32), "sc": scores.astype(np.float32)},
                      {"m": np.array([n], np.int64), "i": np.array([iou], np.float32)},
                      {"center_point_box": center}))
    model, feeds = many_nodes("NonMaxSuppression", cases)
    got = check_model(model, feeds, tmp_path)
    assert max(v.shape[0] for v in got.values()) > 300


def test_nms_runtime_parameters(tmp_path):
    cases = []
    for per_class, iou, score in [(4, 0.5, 0.2), (0, 0.5, 0.2), (-3, 0.5, 0.2),
                                  (50, 0.4, 1.5)]:
        boxes, scores = boxes_and_scores(batches=1, n=23, classes=2, seed=3)
        cases.append(({"b": boxes, "sc": scores, "m": np.array([per_class], np.int64),
                       "i": np.array([iou], np.float32), "s": np.array([score], np.float32)},
                      {}, {}))
    model, feeds = many_nodes("NonMaxSuppression", cases)
    got = check_model(model, feeds, tmp_path)
    assert got["y0_0"].shape[0] > 0
    for i in (1, 2, 3):                          # max_output_boxes_per_class <= 0, score > 1
        assert got[f"y0_{i}"].shape == (0, 3)    # nothing selected


def test_nms_without_optional_inputs_selects_nothing(tmp_path):
    boxes, scores = boxes_and_scores(batches=1, n=11, classes=1)
    feeds = {"b": boxes, "sc": scores}
    got = check_model(one_node("NonMaxSuppression", feeds), feeds, tmp_path)
    assert got["y0"].shape == (0, 3)


def detector_postprocess(boxes, scores, per_class=10):
    """The tail of a detector: NMS, then the selected boxes, classes and scores by Gather."""
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou", "thr"], ["sel"],
                         name="nms", center_point_box=1),
        helper.make_node("Gather", ["sel", "c2"], ["box_idx"], name="box_col", axis=1),
        helper.make_node("Gather", ["sel", "c1"], ["cls_idx"], name="cls_col", axis=1),
        helper.make_node("Squeeze", ["boxes", "ax0"], ["boxes0"], name="squeeze"),
        helper.make_node("Gather", ["boxes0", "box_idx"], ["picked"], name="pick", axis=0),
        helper.make_node("Mul", ["picked", "scale"], ["picked_scaled"], name="scale_boxes"),
        helper.make_node("Cast", ["cls_idx"], ["cls"], name="cls_float", to=TensorProto.FLOAT),
    ]
    inits = {"m": np.array([per_class], np.int64), "iou": np.array([0.45], np.float32),
             "thr": np.array([0.25], np.float32), "c2": np.array(2, np.int64),
             "c1": np.array(1, np.int64), "ax0": np.array([0], np.int64),
             "scale": np.array([2.0, 2.0, 0.5, 0.5], np.float32)}
    return make_model(nodes, {"boxes": boxes, "scores": scores},
                      ["sel", "picked_scaled", "cls"], initializers=inits)


def test_nms_then_gather_of_the_selected_boxes(tmp_path):
    boxes, scores = boxes_and_scores(batches=1, n=41, classes=4, center=1, seed=5)
    feeds = {"boxes": boxes, "scores": scores}
    got = check_model(detector_postprocess(boxes, scores, 30), feeds, tmp_path)
    assert 0 < got["sel"].shape[0] < 4 * 30      # below the planned maximum
    assert got["picked_scaled"].shape == (got["sel"].shape[0], 4)


# ----------------------------------------------------------------------------- Compress

@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_compress_runtime_condition(tmp_path, dtype):
    cases = []
    for shape, axis, n_cond in [((3, 7), None, 21), ((3, 7), 1, 7), ((3, 7), -2, 3),
                                ((2, 5, 3), 1, 4), ((11,), 0, 11)]:
        ins = {"x": arr(shape, dtype), "c": rand(n_cond, seed=len(cases)) > 0}
        cases.append((ins, {}, {} if axis is None else {"axis": axis}))
    model, feeds = many_nodes("Compress", cases)
    check_model(model, feeds, tmp_path)


def test_compress_nothing_and_everything(tmp_path):
    model, feeds = many_nodes("Compress", [({"x": rand(3, 7), "c": np.array(c)}, {}, {"axis": 1})
                                           for c in ([False] * 7, [True] * 7)])
    got = check_model(model, feeds, tmp_path)
    assert got["y0_0"].shape == (3, 0) and got["y0_1"].shape == (3, 7)


def test_compress_constant_condition_is_static(tmp_path):
    x = rand(4, 6)
    model = one_node("Compress", {"x": x}, 1, {"c": np.array([1, 0, 1, 1], bool)}, axis=0)
    got = check_model(model, {"x": x}, tmp_path)
    assert got["y0"].shape == (3, 6)


# ------------------------------------------------------------------------------- Unique

@pytest.mark.parametrize("dtype", ["float32", "int64", "int8"])
def test_unique(tmp_path, dtype):
    cases = []
    for shape, axis in [((17,), None), ((3, 7), None), ((6, 4), 0), ((3, 7), 1),
                        ((2, 5, 3), -2), ((1,), None)]:
        for sorted_ in (1, 0):
            x = (arr(shape, dtype, seed=len(cases)) % 3).astype(dtype)   # values repeat
            attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
            cases.append(({"x": x}, {}, attrs))
    model, feeds = many_nodes("Unique", cases, 4)
    check_model(model, feeds, tmp_path)


def test_unique_all_distinct_fills_the_maximum(tmp_path):
    x = np.arange(13, dtype=np.int64)[::-1].copy()
    got = check_model(one_node("Unique", {"x": x}, 4), {"x": x}, tmp_path)
    assert got["y0"].shape == (13,)


def test_the_count_flows_through_views_transpose_slice_and_concat(tmp_path):
    x = rand(4, 6)
    x[x < 0] = 0
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["t"], name="t", perm=[1, 0]),      # [N, 2]
             helper.make_node("Slice", ["t", "s0", "s1", "s_ax"], ["col"], name="col"),
             helper.make_node("Concat", ["col", "t"], ["cat"], name="cat", axis=1),    # [N, 3]
             helper.make_node("Unsqueeze", ["cat", "ax0"], ["u"], name="u"),          # [1, N, 3]
             helper.make_node("Cast", ["u"], ["f"], name="f", to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "bias"], ["out"], name="add"),
             helper.make_node("Reshape", ["f", "shape"], ["flat"], name="flat")]        # [N, 3]
    inits = {"s0": np.array([1], np.int64), "s1": np.array([2], np.int64),
             "s_ax": np.array([1], np.int64), "ax0": np.array([0], np.int64),
             "bias": np.array([0.5, 1.5, 2.5], np.float32),
             "shape": np.array([-1, 3], np.int64)}
    model = make_model(nodes, {"x": x}, ["out", "u", "flat"], initializers=inits)
    got = check_model(model, {"x": x}, tmp_path)
    assert got["out"].shape == (1, int(np.count_nonzero(x)), 3)


# ----------------------------------------------------------------------------- refusals

def test_a_consumer_that_would_mix_the_padding_is_refused_by_name(tmp_path):
    x = rand(3, 5)
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
             helper.make_node("Cast", ["nz"], ["f"], name="to_float", to=TensorProto.FLOAT),
             helper.make_node("Softmax", ["f"], ["m"], name="softmax_it", axis=1)]
    model = make_model(nodes, {"x": x}, ["m"], opset=17)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=r"softmax_it.*Softmax.*depends on the data"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", build=False)


# --------------------------------------------------------------------- the C API, targets

C_MAIN = r"""
#include <stdio.h>
#include "model.h"
static float arena[(M_ARENA_SIZE + 64) / sizeof(float)];
int main(void) {
    static unsigned char weights[M_WEIGHTS_SIZE + 64];
    float x[M_INPUT_X_SIZE] = {0};
    int64_t y[M_OUTPUT_Y0_SIZE], dims[MLCC_MAX_RANK];
    mlcc_context ctx;
    FILE *f = fopen("weights.bin", "rb");
    if (f == NULL || fread(weights, 1, M_WEIGHTS_SIZE, f) != M_WEIGHTS_SIZE) return 1;
    fclose(f);
    if (m_init(&ctx, weights, M_WEIGHTS_SIZE, arena, sizeof arena) != MLCC_OK) return 2;
    x[1] = 1.0f; x[4] = 2.0f; x[9] = -1.0f;
    if (m_run(&ctx, x, y) != MLCC_OK) return 3;
    if (m_output_shape(&ctx, NULL, 0, dims) != MLCC_OK) return 4;
    if (m_output_shape(&ctx, NULL, 1, dims) != MLCC_ERR_INDEX_OUT_OF_RANGE) return 5;
    printf("%lld %lld | %lld %lld %lld\n", (long long)dims[0], (long long)dims[1],
           (long long)y[0], (long long)y[1], (long long)y[2]);
    return 0;
}
"""


def test_c_api_output_shape(tmp_path):
    x = np.zeros(10, np.float32)
    onnx.save(one_node("NonZero", {"x": x}), tmp_path / "m.onnx")
    out = tmp_path / "out"
    mlcc.compile(tmp_path / "m.onnx", out, name="m")
    (out / "main.c").write_text(C_MAIN)
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I.",
                    "-Iruntime/include", "main.c", "-L.", "-lmodel", "-Wl,-rpath,.", "-o",
                    "main"], cwd=out, check=True)
    run = subprocess.run(["./main"], cwd=out, capture_output=True, text=True, check=True)
    # one row (rank 1) of 3 non-zero elements, at 1, 4 and 9; the maximum is 10
    assert run.stdout.split() == ["1", "3", "|", "1", "4", "9"]


# ------------------------------------------------------------- a detector with NMS at its end

def yolo_with_nms(path, out_path, per_class=20, iou=0.45, score=0.25):
    """yolov8n (fetch_models: [1, 4 + classes, anchors] out) with the postprocess an exporter
    appends: transpose, split boxes / class scores, NonMaxSuppression, Gather of the selected
    boxes and of their classes' scores."""
    model = onnx.load(str(path))
    out = model.graph.output[0].name
    classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value - 4
    consts = {"split": np.array([4, classes], np.int64), "m": np.array([per_class], np.int64),
              "iou": np.array([iou], np.float32), "thr": np.array([score], np.float32),
              "c1": np.array(1, np.int64), "c2": np.array(2, np.int64),
              "ax0": np.array([0], np.int64)}
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in consts.items())
    model.graph.node.extend([
        helper.make_node("Transpose", [out], ["pred"], name="pp_transpose", perm=[0, 2, 1]),
        helper.make_node("Split", ["pred", "split"], ["xywh", "cls"], name="pp_split", axis=2),
        helper.make_node("Transpose", ["cls"], ["cls_t"], name="pp_scores", perm=[0, 2, 1]),
        helper.make_node("NonMaxSuppression", ["xywh", "cls_t", "m", "iou", "thr"],
                         ["selected"], name="pp_nms", center_point_box=1),
        helper.make_node("Gather", ["selected", "c2"], ["box_idx"], name="pp_box_idx", axis=1),
        helper.make_node("Squeeze", ["xywh", "ax0"], ["xywh0"], name="pp_squeeze"),
        helper.make_node("Gather", ["xywh0", "box_idx"], ["boxes"], name="pp_boxes", axis=0),
        helper.make_node("Squeeze", ["cls", "ax0"], ["cls0"], name="pp_cls_squeeze"),
        helper.make_node("Gather", ["cls0", "box_idx"], ["box_scores"], name="pp_box_scores",
                         axis=0),
    ])
    del model.graph.output[:]
    model.graph.output.extend([
        helper.make_tensor_value_info("selected", TensorProto.INT64, ["n", 3]),
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["n", 4]),
        helper.make_tensor_value_info("box_scores", TensorProto.FLOAT, ["n", classes])])
    onnx.save(model, str(out_path))
    return out_path


@pytest.mark.slow
@pytest.mark.parametrize("target", ["x86", pytest.param("arm", marks=needs_arm),
                                    pytest.param("wasm", marks=needs_wasm)])
def test_yolov8n_with_nms_verifies(tmp_path, target):
    import fetch_models as fm
    try:
        path = fm.fetch("yolov8n")
    except fm.DownloadError as exc:      # no network or no index: not a failure of mlcc
        pytest.skip(f"cannot download yolov8n: {exc}")
    shapes = {"images": (1, 3, 320, 320)}
    x = fm.smooth_image((1, 3, 320, 320), seed=3) * 0.25 + 0.5       # an image in [0, 1]-ish
    # On a synthetic image every class score is small: the score threshold goes in the widest
    # gap between onnxruntime's 30th and 80th best scores, so that rounding cannot move a box
    # across it
    import onnxruntime as ort
    raw = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"images": x})[0]
    best = np.sort(raw[0, 4:].reshape(-1))[::-1][30:80]
    gap = int(np.argmax(best[:-1] - best[1:]))
    det = yolo_with_nms(path, tmp_path / "yolov8n_nms.onnx",
                        score=float(best[gap] + best[gap + 1]) / 2)
    res = mlcc.verify(det, target=target, shapes=shapes, inputs={"images": x},
                      output_dir=tmp_path / "out", max_outputs={"selected": 100})
    assert res.ok, [(o.name, o.max_abs_error) for o in res.outputs]
    got = mlcc.load(tmp_path / "out").run({"images": x})
    assert 0 < got["selected"].shape[0] <= 100     # boxes found, trimmed to the actual count
    assert got["boxes"].shape == (got["selected"].shape[0], 4)


def test_cli_compile_run_and_verify_with_max_output(tmp_path):
    from click.testing import CliRunner

    from mlcc.cli import main

    x = np.zeros((3, 4), np.float32)
    x[0, 1] = x[2, 3] = 1.0
    onnx.save(one_node("NonZero", {"x": x}), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=x)
    runner = CliRunner()
    res = runner.invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"),
                               "--max-output", "y0=5"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["run", str(tmp_path / "out"), "-i", str(tmp_path / "in.npz"),
                               "-o", str(tmp_path / "out.npz")])
    assert res.exit_code == 0, res.output
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y0"], [[0, 2], [1, 3]])
    res = runner.invoke(main, ["verify", str(tmp_path / "m.onnx"), "-i", str(tmp_path / "in.npz"),
                               "--max-output", "y0=5"])
    assert res.exit_code == 0 and "ok" in res.output, res.output
    res = runner.invoke(main, ["compile", str(tmp_path / "m.onnx"), "--max-output", "y0"])
    assert res.exit_code == 1 and "expected NAME=N" in res.output


def test_int8_quantization_of_a_data_dependent_size_is_refused(tmp_path):
    boxes, scores = boxes_and_scores(batches=1, n=11, classes=2)
    onnx.save(detector_postprocess(boxes, scores), tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", boxes=boxes[None], scores=scores[None])
    cfg = mlcc.api.QuantizeConfig(calibration=tmp_path / "calib.npz")
    with pytest.raises(UnsupportedError, match="--quantize int8 .* depends on the data"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", quantize=cfg, build=False)
