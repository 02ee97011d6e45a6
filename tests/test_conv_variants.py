"""The convolution kernel choice (mlcc/ops/conv_kernels.py): each variant's rule on
representative layers, the list's invariants, and the variant every Conv node of real models
gets per target against tests/golden/conv_variants.json (recorded when the choice moved from
Conv.lower's if-ladder to the list, with the generated C byte-identical before and after)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import fetch_models as fm
import mlcc
from mlcc.ops import conv_kernels as ck
from mlcc.ops.conv_kernels import (ConvLayer, ConvTarget, Window2d, applicable_variants,
                                   choose_variant)
from mlcc.ops.registry import lookup
from mlcc.targets import load_target

KERNELS = Path(__file__).resolve().parents[1] / "runtime_c" / "kernels"
GOLDEN = Path(__file__).parent / "golden" / "conv_variants.json"
# fixed descriptions, not x86-native (which is whatever CPU runs the tests): x86-avx512 is
# what x86-native was on the AVX-512 machines the golden file was recorded on
TARGETS = ("x86", "x86-avx512", "x86-avx2", "wasm", "arm")


def target(name: str) -> ConvTarget:
    return ConvTarget.from_options(load_target(name).lowering_options())


def conv(cin, cout, hw, k=3, s=1, p=None, d=1, groups=1, const=True, residual=False,
         out=None) -> ConvLayer:
    """A square convolution on a square map: out from the usual formula unless given."""
    p = (k - 1) * d // 2 if p is None else p
    o = out or (hw + 2 * p - d * (k - 1) - 1) // s + 1
    return ConvLayer(1, cin, cout, groups, Window2d(k, k, hw, hw, o, o, s, s, d, d, p, p),
                     const, residual)


X86, NATIVE, AVX2, WASM, ARM = (target(t) for t in TARGETS)


def names(layer: ConvLayer, t: ConvTarget) -> list[str]:
    return [v.name for v in applicable_variants(layer, t)]


# --------------------------------------------------------------------------------- rules

def test_depthwise():
    assert ck.is_depthwise(conv(32, 32, 112, groups=32), X86)           # MobileNetV2
    assert not ck.is_depthwise(conv(32, 64, 112, groups=32), X86)       # channel multiplier
    assert not ck.is_depthwise(conv(32, 32, 112, groups=2), X86)        # grouped
    assert not ck.is_depthwise(conv(1, 1, 28), X86)                     # one channel, dense
    assert choose_variant(conv(32, 32, 112, groups=32, const=False), X86).name == \
        "depthwise_vec"                                                 # weights at run time


def test_winograd_tiles():
    resnet = conv(64, 64, 56)
    assert ck.winograd_4x4_pays(resnet, WASM) and not ck.winograd_2x2_pays(resnet, WASM)
    small = conv(512, 512, 7)
    assert ck.winograd_2x2_pays(small, WASM) and not ck.winograd_4x4_pays(small, WASM)
    assert ck.winograd_tile(resnet, ARM) == 0                            # arm did not opt in
    assert ck.winograd_tile(conv(64, 64, 56, s=2), WASM) == 0          # strided
    assert ck.winograd_tile(conv(3, 64, 56), WASM) == 0                # fewer than 8 channels
    assert ck.winograd_tile(conv(64, 64, 56, const=False), WASM) == 0  # nothing to transform
    # wide vectors: few channels on a large map lose (winograd.pays)
    assert ck.winograd_tile(conv(8, 8, 80), NATIVE) == 0
    assert ck.winograd_tile(conv(8, 8, 80), WASM) == 4


def test_implicit_cols():
    assert ck.implicit_cols_fits(conv(16, 32, 8), X86)      # digits CNN: 80 for 64 columns
    assert ck.implicit_cols_fits(conv(32, 64, 4), X86)      # 24 for 16
    assert not ck.implicit_cols_fits(conv(512, 512, 7), X86)   # 64 for 64 in whole panels
    assert not ck.implicit_cols_fits(conv(16, 32, 8, s=2), X86)
    assert not ck.implicit_cols_fits(conv(16, 32, 8, k=1), X86)
    assert not ck.implicit_cols_fits(conv(16, 32, 32), X86)    # rows wider than TABLE_MAX_W


def test_implicit():
    assert ck.implicit_fits(conv(64, 64, 56), X86)
    assert ck.implicit_fits(conv(64, 128, 56, s=2), X86)           # deep enough when strided
    assert not ck.implicit_fits(conv(64, 128, 56, s=2), WASM)      # wasm: implicit_strided off
    assert ck.implicit_fits(conv(64, 64, 56), WASM)
    assert not ck.implicit_fits(conv(3, 32, 224, s=2), X86)        # 3-channel stem: depth 27
    assert not ck.implicit_fits(conv(64, 64, 56, k=1), X86)        # 1x1: gathered panels
    assert not ck.implicit_fits(conv(3, 16, 4), X86)               # shallow small map: table
    assert not ck.implicit_fits(conv(64, 64, 56, const=False), X86)


def test_implicit_t():
    deep7 = conv(512, 512, 7)                   # 63 virtual columns -> 64 for 49 positions
    assert ck.implicit_t_fits(deep7, NATIVE)
    assert not ck.implicit_t_fits(deep7, X86)   # 128-bit vectors: no channel tiles
    assert not ck.implicit_t_fits(conv(64, 64, 56), NATIVE)     # 3264 columns for 3136
    assert not ck.implicit_t_fits(conv(16, 16, 7), NATIVE)      # too shallow


def test_implicit_rows():
    assert ck.implicit_rows_fits(conv(3, 32, 224, s=2), NATIVE)     # MobileNetV2's stem
    assert ck.implicit_rows_fits(conv(3, 16, 320, s=2), NATIVE)     # YOLOv8n's
    assert not ck.implicit_rows_fits(conv(3, 32, 224, s=2), X86)
    assert not ck.implicit_rows_fits(conv(3, 16, 640, s=2), NATIVE)   # 4.9 MB of sub-planes
    assert not ck.implicit_rows_fits(conv(3, 64, 224, s=2), NATIVE)   # SqueezeNet: 64 outputs
    assert not ck.implicit_rows_fits(conv(3, 32, 224), NATIVE)        # stride 1
    # deeper ones where rows compute no more columns than the implicit GEMM's virtual rows
    assert ck.implicit_rows_fits(conv(3, 64, 224, k=7, s=2), NATIVE)  # ResNet's stem: 147
    assert ck.implicit_rows_fits(conv(16, 32, 160, s=2), NATIVE)      # YOLOv8n's: rows of 80
    assert not ck.implicit_rows_fits(conv(32, 64, 80, s=2), NATIVE)   # rows of 40 in 48
    assert not ck.implicit_rows_fits(conv(30, 64, 224, k=7, s=2), NATIVE)   # two k blocks
    assert not ck.implicit_rows_fits(conv(3, 64, 224, k=7, s=2), WASM)
    assert choose_variant(conv(3, 64, 224, k=7, s=2), NATIVE).name == "implicit_rows"
    assert choose_variant(conv(32, 64, 80, s=2), NATIVE).name == "implicit"


def test_table():
    assert ck.table_fits(conv(32, 64, 4, s=2, out=4), X86)     # small map
    assert not ck.table_fits(conv(32, 64, 4, k=1), X86)        # 1x1
    assert not ck.table_fits(conv(32, 64, 56), X86)            # wide rows
    assert not ck.table_fits(conv(512, 64, 16), X86)           # table over TABLE_MAX_BYTES


def conv1d(cin, cout, length, k, s=1, p=0, d=1, groups=1) -> ConvLayer:
    o = (length + 2 * p - d * (k - 1) - 1) // s + 1
    return ConvLayer(1, cin, cout, groups, Window2d(1, k, 1, length, 1, o, 1, s, 1, d, 0, p))


def test_frames():
    stft = conv1d(1, 257, 1280, 512, s=160)                     # openWakeWord: 5 windows
    assert ck.frames_fit(stft, X86) and ck.frames_fit(stft, NATIVE)
    assert choose_variant(stft, NATIVE).name == "frames"
    assert ck.frames_fit(conv1d(1, 16, 200, 9, s=13), NATIVE)      # 15 windows < 32 lanes
    assert not ck.frames_fit(conv1d(1, 16, 200, 9, s=13), X86)     # ... not < 8
    assert not ck.frames_fit(conv1d(1, 257, 1280, 512, s=16), NATIVE)  # 48 windows
    assert not ck.frames_fit(conv1d(2, 257, 1280, 512, s=160), NATIVE)  # two channels
    assert not ck.frames_fit(conv1d(1, 257, 1280, 512, s=160, p=3), NATIVE)   # padded
    assert not ck.frames_fit(conv1d(1, 8, 1280, 512, s=160), NATIVE)   # half a vector
    assert not ck.frames_fit(conv(1, 64, 9, k=3, s=4), NATIVE)     # 2-D
    assert not ck.frames_fit(ConvLayer(1, 1, 257, 1, stft.window, const_weights=False), NATIVE)


def test_implicit_t_1x1():
    assert ck.implicit_t_1x1_fits(conv(160, 960, 7, k=1), NATIVE)    # MobileNetV2: 64 for 49
    assert not ck.implicit_t_1x1_fits(conv(160, 960, 7, k=1), ARM)
    assert not ck.implicit_t_1x1_fits(conv(256, 1024, 14, k=1), NATIVE)   # expansion, 208/196
    assert ck.implicit_t_1x1_fits(conv(576, 96, 14, k=1), NATIVE)     # deep projection
    assert not ck.implicit_t_1x1_fits(conv(64, 256, 56, k=1), NATIVE)
    assert not ck.implicit_t_1x1_fits(conv(512, 512, 7), NATIVE)      # 3x3


def test_implicit_t_1x1_few_outputs_in_place():
    # SqueezeNet's squeeze layers (128 -> 16 on 55 x 55, 256 -> 32 on 27 x 27): read in place,
    # one channel tile of whole vectors, deeper than the row-by-row nest
    for layer in (conv(128, 16, 55, k=1), conv(256, 32, 27, k=1), conv(192, 32, 28, k=1)):
        assert ck.few_outputs_in_place(layer, NATIVE) and ck.implicit_t_1x1_fits(layer, NATIVE)
        assert choose_variant(layer, NATIVE).name == "implicit_t_1x1"
        assert choose_variant(layer, ARM).name == "packed"             # no channel tiles
    assert ck.implicit_t_1x1_fits(conv(192, 32, 28, k=1, residual=True), NATIVE)
    assert not ck.few_outputs_in_place(conv(64, 16, 55, k=1), NATIVE)     # row-by-row depth
    assert not ck.few_outputs_in_place(conv(32, 16, 112, k=1), NATIVE)    # MobileNetV2's
    assert not ck.few_outputs_in_place(conv(144, 24, 56, k=1), NATIVE)    # 24: a part vector
    assert not ck.few_outputs_in_place(conv(128, 48, 55, k=1), NATIVE)    # two channel tiles
    assert not ck.few_outputs_in_place(conv(128, 16, 55, k=1, s=2), NATIVE)   # gathered
    assert not ck.few_outputs_in_place(conv(128, 16, 55, k=1, p=1), NATIVE)   # padded
    assert not ck.few_outputs_in_place(conv(128, 16, 55, k=3), NATIVE)


def test_fallbacks():
    assert ck.has_const_weights(conv(3, 8, 9), X86)
    assert not ck.has_const_weights(conv(3, 8, 9, const=False), X86)
    assert ck.always(conv(3, 8, 9, const=False), X86)
    assert names(conv(3, 8, 9, const=False), NATIVE) == ["reference"]


def test_residual_takes_only_variants_with_a_residual_form():
    assert names(conv(256, 64, 56, k=1, residual=True), NATIVE) == ["packed"]
    assert names(conv(160, 960, 7, k=1, residual=True), NATIVE) == ["implicit_t_1x1", "packed"]
    v = choose_variant(conv(160, 960, 7, k=1, residual=True), NATIVE)
    assert v.kernel_for(conv(160, 960, 7, k=1, residual=True)) == v.residual_kernel
    assert v.kernel_for(conv(160, 960, 7, k=1)) == v.kernel


# --------------------------------------------------------------------------------- the list

def test_variant_list_invariants():
    vs = ck.VARIANTS
    assert len({v.name for v in vs}) == len(vs)
    assert vs[-1].name == "reference" and vs[-1].rule is ck.always
    assert all(ck.variant_named(v.name) is v for v in vs)
    with pytest.raises(KeyError, match="no convolution variant"):
        ck.variant_named("nope")


def test_applicable_variants_lists_alternatives_in_order():
    layer = conv(512, 512, 7)
    assert names(layer, NATIVE) == ["winograd_2x2", "implicit_t", "implicit", "packed",
                                    "reference"]
    assert names(layer, ARM) == ["implicit", "packed", "reference"]
    assert choose_variant(layer, NATIVE) is applicable_variants(layer, NATIVE)[0]
    assert names(conv(64, 64, 56), WASM) == ["winograd_4x4", "implicit", "packed", "reference"]


def test_every_kernel_is_declared_in_a_header():
    """The kernels the list names are the ones runtime_c/kernels declares."""
    declared = set()
    for h in KERNELS.glob("*.h"):
        declared |= set(re.findall(r"\b(mlcc_\w+)\s*\(", h.read_text()))
    for v in ck.VARIANTS:
        for k in (v.kernel, v.residual_kernel):
            assert k is None or k in declared, f"{v.name}: {k} is not declared"


# --------------------------------------------------------------------------------- models

MODEL_CASES = {
    "yolov8n": lambda: (fm.fetch("yolov8n"), fm.REAL_MODELS["yolov8n"].shapes),
    "ppocr_det": lambda: (fm.fetch("ppocr_det"), fm.REAL_MODELS["ppocr_det"].shapes),
    "ppocr_rec": lambda: (fm.fetch("ppocr_rec"), fm.REAL_MODELS["ppocr_rec"].shapes),
    "ppocr_cls": lambda: (fm.fetch("ppocr_cls"), fm.REAL_MODELS["ppocr_cls"].shapes),
    "resnet18": lambda: (fm.resnet18(), None),
    **{n: (lambda n=n: (fm.randomized_light_model(n), None))
       for n in ("squeezenet", "resnet50", "inception_v1", "shufflenet", "densenet121")},
}


def variants_of(name: str, tgt: str, folder: Path) -> tuple[list[list[str]], list[str]]:
    """([node name, variant] of every Conv node of the model as compiled for the target, the
    kernels those nodes call)."""
    path, shapes = MODEL_CASES[name]()
    result = mlcc.compile(path, folder, target=tgt, shapes=shapes, name="m", build=False)
    options = load_target(tgt).lowering_options()
    g = result.graph
    chosen, kernels = [], []
    for n in g.nodes:
        if n.op_type == "Conv":
            v = lookup(n).variant(n, g, options)
            chosen.append([n.name, v.name])
            kernels.append(v.kernel_for(lookup(n).layer(n, g)))
    return chosen, kernels


@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_model_convolutions_keep_their_variants(name, tmp_path):
    try:
        got = {t: variants_of(name, t, tmp_path / t) for t in TARGETS}
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download {name}: {exc}")
    if os.environ.get("MLCC_UPDATE_GOLDEN"):
        data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        data[name] = {t: chosen for t, (chosen, _) in got.items()}
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())[name]
    conv_kernels = {k for v in ck.VARIANTS for k in (v.kernel, v.residual_kernel) if k}
    for t in TARGETS:
        chosen, kernels = got[t]
        assert chosen == want[t], f"{name} on {t}: the convolutions' variants changed"
        # and the generated C calls those kernels, in that order
        calls = re.findall(r"\b(mlcc_\w+)\(", (tmp_path / t / "model.c").read_text())
        assert [c for c in calls if c in conv_kernels] == kernels
