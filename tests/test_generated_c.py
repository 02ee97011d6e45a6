"""The shape of the generated C (docs/generated-c.md): lines of at most 100 columns, weight and
arena offsets named after the ONNX tensors, the compile command in the banner, and a public
runtime header that holds only what an application calls."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import mlcc
from mlcc import api
from mlcc.codegen.c_format import WIDTH, call, comment, initializer
from mlcc.codegen.names import MAX_LENGTH, NameTable, shorten
from util import make_model, reference_outputs

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
# Exporter-style names, long enough to need wrapping and shortening.
STEM = "/backbone/stage.0/block.0"
LONG = "encoder.layer.11.attention.self.query.weight.transposed.for.the.matmul"


def _many_kinds(rng) -> onnx.ModelProto:
    """A small network with many node kinds (convolutions, depthwise, pooling, residual add,
    concat, attention-like MatMuls, softmax, a Gemm head), named like an exporter names
    things, plus two initializers whose C names collide and one far too long for C."""
    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    inits = {
        f"{STEM}.conv.weight": w(8, 3, 3, 3), f"{STEM}.conv.bias": w(8),
        f"{STEM}.dw.weight": w(8, 1, 3, 3), f"{STEM}.pw.weight": w(8, 8, 1, 1),
        "head.fc.weight": w(8 * 32, 10), "head.fc.bias": w(10),
        "scale.a": w(1, 8, 32), "scale_a": w(1, 8, 32),        # both "scale_a" in C
        LONG: w(32, 32), "shape.flat": np.array([1, -1], np.int64),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", f"{STEM}.conv.weight", f"{STEM}.conv.bias"], ["c0"],
          name=f"{STEM}/conv/Conv", pads=[1, 1, 1, 1]),
        n("Relu", ["c0"], ["r0"], name=f"{STEM}/act/Relu"),
        n("Conv", ["r0", f"{STEM}.dw.weight"], ["dw"], name=f"{STEM}/dw/Conv", group=8,
          pads=[1, 1, 1, 1]),
        n("Sigmoid", ["dw"], ["sg"], name=f"{STEM}/act/Sigmoid"),
        n("Mul", ["dw", "sg"], ["silu"], name=f"{STEM}/act/Mul"),
        n("Conv", ["silu", f"{STEM}.pw.weight"], ["pw"], name=f"{STEM}/pw/Conv"),
        n("Add", ["pw", "r0"], ["res"], name=f"{STEM}/Add"),
        n("MaxPool", ["res"], ["mp"], name="/backbone/MaxPool", kernel_shape=[2, 2],
          strides=[2, 2]),
        n("Concat", ["mp", "mp"], ["cat"], name="/neck/Concat", axis=1),
        n("Reshape", ["cat", "shape.flat"], ["flat"], name="/neck/Reshape"),
        n("Reshape", ["flat", "shape_seq"], ["seq"], name="/attn/Reshape"),
        n("MatMul", ["seq", LONG], ["q"], name="/attn/query/MatMul"),
        n("Mul", ["q", "scale.a"], ["qa"], name="/attn/scale/Mul"),
        n("Add", ["qa", "scale_a"], ["qb"], name="/attn/shift/Add"),
        n("Softmax", ["qb"], ["sm"], name="/attn/Softmax", axis=-1),
        n("Reshape", ["sm", "shape.flat"], ["sm_flat"], name="/head/Flatten"),
        n("Gemm", ["sm_flat", "head.fc.weight", "head.fc.bias"], ["logits"],
          name="/head/fc/Gemm"),
    ]
    inits["shape_seq"] = np.array([1, 8, 32], np.int64)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    return make_model(nodes, {"x": x}, ["logits"], initializers=inits)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    rng = np.random.default_rng(0)
    folder = tmp_path_factory.mktemp("many")
    path = folder / "many_kinds.onnx"
    onnx.save(_many_kinds(rng), str(path))
    calib = folder / "calibration.npz"
    np.savez(calib, x=rng.standard_normal((8, 1, 3, 8, 8)).astype(np.float32))
    return path, calib


def _long_lines(folder: Path) -> list[str]:
    return [f"{f}:{i + 1}: {len(line)} columns" for f in ("model.c", "model.h")
            for i, line in enumerate((folder / f).read_text().splitlines())
            if len(line) > WIDTH]


def test_float_model_source_fits_100_columns_and_runs(many, tmp_path):
    path, _ = many
    res = mlcc.compile(path, tmp_path / "f", shapes={"x": (1, 3, 8, 8)})
    assert _long_lines(res.folder) == []
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = mlcc.load(res.folder).run({"x": x})["logits"]
    ref = reference_outputs(onnx.load(str(path)), {"x": x})["logits"]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_int8_model_source_fits_100_columns(many, tmp_path):
    path, calib = many
    res = mlcc.compile(path, tmp_path / "q", build=False,
                       quantize=api.QuantizeConfig(calib, calibrator="percentile",
                                                   per_channel=False))
    assert res.quant is not None and res.manifest["quantization"]["integer_layers"] > 0
    assert _long_lines(res.folder) == []
    assert "--quantize int8 --calibration calibration.npz --calibrator percentile " \
           "--percentile 99.99 --per-tensor" in _command(res.folder / "model.c")


def _command(path: Path) -> str:
    """The command line recorded in a generated file's banner (wrapped over comment lines)."""
    banner = path.read_text().split("*/")[0].splitlines()
    start = banner.index(" * Compiled with:") + 1
    return " ".join(line.lstrip("/* ") for line in banner[start:-1])


def _defines(text: str) -> dict[str, str]:
    return dict(re.findall(r"^#define ([WAS]_\w+) (\(A_\w+ \+ \d+\)|\w+)", text, flags=re.M))


def test_offsets_are_named_after_the_onnx_tensors(many, tmp_path):
    path, _ = many
    res = mlcc.compile(path, tmp_path / "f", build=False)
    text = (res.folder / "model.c").read_text()
    # no bare numbers: every tensor argument is a named offset, defined once
    args = re.findall(r"\b(WEIGHT|ARENA)\(([^)]*)\)", text.split("#define WEIGHT")[1])
    assert args and all(re.fullmatch(r"[WAS]_\w+", a) for _, a in args), args
    defines = _defines(text)
    assert {a for _, a in args} <= set(defines)
    assert all(len(name) <= MAX_LENGTH for name in defines)
    # initializers used as they are keep their sanitized names; colliding ones get _2
    assert "W_scale_a" in defines and "W_scale_a_2" in defines
    assert any(n.startswith("W_backbone_stage_0_block_0_") for n in defines)
    # the one too long for a readable name keeps its start and end around a stable tag
    long_names = [n for n in defines if n.startswith("W_encoder_layer_11_")]
    assert len(long_names) == 1 and re.search(r"_[0-9a-f]{6}_", long_names[0])
    # arena tensors by value name, views by their own name defined as their storage's
    assert any(n.startswith("A_backbone") or n.startswith("A_") for n in defines)
    views = re.findall(r"^#define (A_\w+) (A_\w+)  /\* .*, a view of ", text, flags=re.M)
    assert views and all(target in defines for _, target in views)
    # a Concat's input computed into its part of the output: defined as that part
    slices = re.findall(r"^#define (A_\w+) \((A_\w+) \+ (\d+)\)", text, flags=re.M)
    assert slices and all(target in defines and int(off) % 64 == 0 for _, target, off in slices)
    # and every offset is where the weight blob layout put it
    offsets = [int(v) for k, v in defines.items() if k.startswith("W_")]
    assert offsets == sorted(offsets) and offsets[0] == 64


def test_generated_sources_are_reproducible_and_hold_no_paths(many, tmp_path):
    path, calib = many
    a = mlcc.compile(path, tmp_path / "a", build=False, shapes={"x": (1, 3, 8, 8)},
                     name="net", embed_weights=True)
    other = tmp_path / "elsewhere"
    other.mkdir()
    copy = other / path.name
    copy.write_bytes(path.read_bytes())
    b = mlcc.compile(copy, tmp_path / "b", build=False, shapes={"x": (1, 3, 8, 8)},
                     name="net", embed_weights=True)
    for f in ("model.c", "model.h", "weights.c"):
        ta, tb = (a.folder / f).read_text(), (b.folder / f).read_text()
        assert ta == tb, f
        assert str(tmp_path) not in ta and "/tmp" not in ta.split("*/")[0]
        assert _command(a.folder / f) == "mlcc compile many_kinds.onnx --target x86 --shape " \
                                          "x=1,3,8,8 --name net --embed-weights", f
    assert a.manifest["command"] == "mlcc compile many_kinds.onnx --target x86 --shape " \
                                    "x=1,3,8,8 --name net --embed-weights"


def test_digits_source_fits_and_names_its_weights(tmp_path):
    res = mlcc.compile(DIGITS, tmp_path / "d", build=False)
    assert _long_lines(res.folder) == []
    defines = _defines((res.folder / "model.c").read_text())
    assert "W_fc1_bias" in defines and "W_fc2_bias" in defines


# ------------------------------------------------------------------ names and layout units

def test_names_are_unique_case_insensitively_and_in_order():
    t = NameTable({"ARENA"})
    assert [t.take(s, prefix="W_") for s in ["a.b", "a_b", "A-b", "a b"]] == \
        ["W_a_b", "W_a_b_2", "W_A_b_3", "W_a_b_4"]
    assert t.take("arena") == "arena_2"            # reserved names, whatever their case
    assert t.take("3x") == "t_3x" and t.take("int") == "int_"


def test_shortened_names_are_stable_distinct_and_bounded():
    a = "W_model_22_cv2_0_cv2_0_1_conv_Conv_W_winograd_for_the_layer"
    b = "W_model_22_cv2_1_cv2_1_1_conv_Conv_W_winograd_for_the_layer"
    sa, sb = shorten(a, a), shorten(b, b)
    assert sa == shorten(a, a) and sa != sb
    assert len(sa) <= MAX_LENGTH and sa.startswith("W_model_22") and sa.endswith("the_layer")
    assert shorten("W_short", "short") == "W_short"
    huge = "W_" + "x" * 200
    assert len(shorten(huge, huge)) <= MAX_LENGTH


def test_layout_wraps_calls_comments_and_initializers_within_the_width():
    args = [f"WEIGHT(W_some_fairly_long_weight_name_{i})" for i in range(6)]
    lines = call("mlcc_f32_conv2d__implicit", args, indent="    ")
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert lines[1].index("WEIGHT") == lines[0].index("(") + 1        # under the parenthesis
    text = "a " * 80 + "x[1, 16, 80, 80] -> y[1, 32, 40, 40]"
    lines = comment(text, "    ")
    assert all(len(line) <= WIDTH for line in lines) and lines[-1].endswith("*/")
    assert any("x[1, 16, 80, 80]" in line for line in lines)      # shapes are not split
    params = {"conv": {f"field_{i}": i for i in range(30)}, "strides": list(range(40)),
              "name": '"' + "n" * 150 + '"'}
    lines = initializer("static const t p = ", params, str)
    assert all(len(line) <= WIDTH for line in lines)
    joined = re.sub(r'"\s*"', "", "".join(lines))
    assert "n" * 150 in joined and lines[-1] == "};"


def test_public_runtime_header_declares_only_the_application_api():
    public = (ROOT / "runtime_c" / "include" / "mlcc_runtime.h").read_text()
    code = re.sub(r"/\*.*?\*/", "", public, flags=re.S)
    functions = re.findall(r"^[^#\n][^;{}]*?\b(mlcc_\w+)\s*\(", code, flags=re.M)
    assert set(functions) >= {"mlcc_status_string", "mlcc_context_init",
                              "mlcc_threadpool_create", "mlcc_context_set_threadpool"}
    for name in functions:                     # every one exported: what an application calls
        decl = re.search(rf"^.*\b{name}\s*\(", code, flags=re.M).group(0)
        assert decl.startswith("MLCC_EXPORT"), decl
    for internal in ("mlcc_threadpool_for", "mlcc_crc32", "mlcc_unit_fn"):
        assert internal not in code
        assert internal in (ROOT / "runtime_c" / "src" / "mlcc_internal.h").read_text()
