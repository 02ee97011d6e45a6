"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, LpPool and GlobalLpPool against
onnxruntime on odd shapes."""
import shutil
import subprocess

import numpy as np
import pytest
from onnx import helper

import mlcc
from mlcc import resources
from mlcc.errors import UnsupportedError
from mlcc.ir import Node
from mlcc.ops.conv import window_geometry
from util import (check_model, check_node, compile_and_run, cpu_has, make_model, rand,
                  reference_outputs)


@pytest.mark.parametrize("shape,kernel,strides,pads,dil,ceil", [
    ((1, 3, 9, 11), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),
    ((2, 4, 13, 7), [2, 2], [2, 2], [0, 0, 0, 0], [1, 1], 0),      # the classic 2x2/2
    ((1, 5, 17, 13), [3, 2], [3, 1], [2, 0, 1, 1], [1, 1], 0),      # asymmetric pads, stride 3
    ((1, 2, 11, 11), [3, 3], [2, 3], [1, 1, 0, 2], [2, 2], 0),      # dilated
    ((1, 3, 10, 7), [3, 3], [2, 2], [0, 0, 0, 0], [1, 1], 1),       # ceil_mode adds a window
    ((1, 2, 7, 7), [2, 2], [3, 3], [1, 1, 1, 1], [1, 1], 1),        # ceil window would start
                                                                    # in the right pad: dropped
    ((1, 2, 5, 9), [2, 3], [3, 2], [1, 0, 1, 2], [2, 1], 1),        # ceil + dilation
    ((1, 3, 10, 10), [5, 5], [1, 1], [2, 2, 2, 2], [1, 1], 0),      # YOLOv8n's SPPF: stride 1
    ((2, 2, 7, 13), [3, 4], [1, 1], [0, 2, 1, 1], [1, 1], 0),       # on a narrow map (padded
                                                                    # copy, flat passes)
    # stride 2 over rows of at most 3 taps in one pass (pool.c max_row_s2), interiors of 16+
    # outputs (AVX-512 vectors, the last one overlapping) and borders:
    ((1, 3, 23, 37), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),      # ResNet's stem pool
    ((1, 2, 19, 41), [3, 3], [2, 2], [0, 0, 0, 0], [1, 1], 1),      # SqueezeNet's, ceil_mode
    ((2, 3, 11, 37), [2, 2], [2, 2], [0, 0, 1, 1], [1, 1], 1),      # 2x2/2, end pads and ceil
    ((1, 2, 13, 43), [3, 2], [2, 2], [1, 0, 1, 1], [2, 1], 0),      # dilated rows
    ((1, 2, 17, 71), [3, 3], [2, 2], [2, 1, 0, 2], [1, 1], 1),      # asymmetric pads
    ((1, 2, 7, 41), [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 0),       # 3x3/1, wide rows
])
def test_maxpool2d(tmp_path, shape, kernel, strides, pads, dil, ceil):
    check_node("MaxPool", {"x": rand(*shape)}, tmp_path=tmp_path, kernel_shape=kernel,
               strides=strides, pads=pads, dilations=dil, ceil_mode=ceil)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_auto_pad(tmp_path, op, auto_pad):
    attrs = {"count_include_pad": 1} if op == "AveragePool" else {}
    check_node(op, {"x": rand(1, 3, 10, 13)}, tmp_path=tmp_path, kernel_shape=[4, 3],
               strides=[2, 3], auto_pad=auto_pad, **attrs)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("kernel,strides,pads,ceil", [
    ([3], [2], [1, 1], 0), ([4], [3], [2, 1], 1), ([1], [2], [0, 0], 0)])
def test_pool1d(tmp_path, op, kernel, strides, pads, ceil):
    check_node(op, {"x": rand(2, 3, 23)}, tmp_path=tmp_path, kernel_shape=kernel,
               strides=strides, pads=pads, ceil_mode=ceil)


@pytest.mark.parametrize("shape,kernel,strides,pads,include,ceil", [
    ((1, 3, 9, 11), [3, 3], [2, 2], [1, 1, 1, 1], 0, 0),
    ((1, 3, 9, 11), [3, 3], [2, 2], [1, 1, 1, 1], 1, 0),
    ((2, 2, 10, 7), [3, 2], [2, 2], [0, 1, 2, 0], 0, 1),
    ((2, 2, 10, 7), [3, 2], [2, 2], [0, 1, 2, 0], 1, 1),           # the last windows reach past
                                                                   # the padding: not counted
    ((1, 4, 13, 17), [5, 4], [3, 3], [2, 1, 2, 3], 1, 1),
    ((1, 2, 7, 7), [7, 7], [1, 1], [0, 0, 0, 0], 0, 0),            # global-sized window
])
def test_avgpool2d(tmp_path, shape, kernel, strides, pads, include, ceil):
    check_node("AveragePool", {"x": rand(*shape)}, tmp_path=tmp_path, kernel_shape=kernel,
               strides=strides, pads=pads, count_include_pad=include, ceil_mode=ceil)


@pytest.mark.parametrize("include", [0, 1])
def test_avgpool_dilations_opset19(tmp_path, include):
    check_node("AveragePool", {"x": rand(1, 3, 11, 12)}, tmp_path=tmp_path, opset=19,
               kernel_shape=[3, 3], strides=[2, 1], pads=[1, 2, 1, 0], dilations=[2, 3],
               count_include_pad=include, ceil_mode=1)


@pytest.mark.parametrize("op,opset", [("MaxPool", 8), ("MaxPool", 11), ("MaxPool", 12),
                                      ("AveragePool", 7), ("AveragePool", 10)])
def test_pool_older_opsets(tmp_path, op, opset):
    check_node(op, {"x": rand(1, 2, 8, 9)}, tmp_path=tmp_path, opset=opset, kernel_shape=[3, 3],
               strides=[2, 2], pads=[1, 0, 0, 1])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (1, 3, 31), (1, 2, 3, 5, 7), (3, 7, 1, 1)])
def test_global_pool(tmp_path, op, shape):
    check_node(op, {"x": rand(*shape)}, tmp_path=tmp_path)


def test_pool_windows_all_padding(tmp_path):
    """Dilated taps can all miss the input: MaxPool gives -FLT_MAX and AveragePool without
    count_include_pad 0, as onnxruntime (compared exactly: -FLT_MAX would swamp the tolerance)."""
    x = rand(1, 2, 1, 7)
    for op, attrs in (("MaxPool", {}), ("AveragePool", {"count_include_pad": 0})):
        node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2, 1], strides=[3, 2],
                                pads=[1, 0, 1, 0], dilations=[2, 1], **attrs)
        model = make_model([node], {"x": x}, ["y"], opset=19)
        got = compile_and_run(model, {"x": x}, tmp_path)["y"]
        ref = reference_outputs(model, {"x": x})["y"]
        assert got.shape == ref.shape == (1, 2, 1, 4)
        np.testing.assert_array_equal(got, ref)
        assert got.flat[0] == (np.finfo(np.float32).min if op == "MaxPool" else 0.0)


def test_pool_chain(tmp_path):
    """Pools compose with other ops (and their outputs feed later kernels)."""
    x = rand(1, 3, 12, 12)
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                              ceil_mode=1)]
    check_model(make_model(nodes, {"x": x}, ["y"]), {"x": x}, tmp_path)


KERNELS = resources.runtime_c()

TWIN_C = r"""
/* The pool kernels' vector path against their scalar twin (MLCC_HAVE_VECTORS 0) and a naive
 * reference, over random geometries. Prints the number of mismatches. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pool.h"
#undef MLCC_HAVE_VECTORS
#define MLCC_HAVE_VECTORS 0
#define mlcc_f32_maxpool2d scalar_maxpool2d
#define mlcc_f32_avgpool2d scalar_avgpool2d
#define mlcc_f32_maxpool_nd scalar_f32_maxpool_nd
#define mlcc_u8_maxpool_nd scalar_u8_maxpool_nd
#define mlcc_s8_maxpool_nd scalar_s8_maxpool_nd
#define mlcc_f32_avgpool_nd scalar_f32_avgpool_nd
#define mlcc_f32_lppool_nd scalar_f32_lppool_nd
#include "pool.c"
#undef mlcc_f32_maxpool2d
#undef mlcc_f32_avgpool2d

static int rnd(int lo, int hi) { return lo + rand() % (hi - lo + 1); }

int main(void) {
    int trial, bad = 0, special;
    for (trial = 0; trial < 3000; trial++) {
        mlcc_pool2d_params p;
        int64_t taps[8];
        float x[2 * 30 * 96], y0[2 * 30 * 96], y1[2 * 30 * 96], scr[40 * 96], inv[200];
        long i, k, n;
        p.planes = 2; p.in_h = rnd(1, 9); p.in_w = rnd(1, 40);
        p.kernel_h = rnd(1, 4); p.kernel_w = rnd(1, 4);
        p.stride_h = rnd(1, 3); p.stride_w = rnd(1, 4);
        p.dilation_h = rnd(1, 2); p.dilation_w = rnd(1, 3);
        p.pad_top = rnd(0, 3); p.pad_left = rnd(0, 3);
        if (trial % 3 == 0) {   /* 2- or 3-wide windows of stride 2 on rows of up to 33
                                   columns, or up to 96 (several blocks of 16 lanes), pads 0
                                   or 1: max_row_s2 and the row buffer around a vector */
            p.in_h = rnd(1, 30); p.in_w = rnd(2, trial % 2 ? 96 : 33); p.kernel_w = rnd(2, 3);
            p.stride_w = 2; p.dilation_w = 1; p.pad_left = rnd(0, 1);
            if (trial % 2) {   /* 3-row windows of stride 2 dilations: pairs of output rows */
                p.kernel_h = 3; p.stride_h = 2 * p.dilation_h;
            } else if (trial % 4 == 0) {   /* 2x2/2 without padding: rows of all planes */
                p.kernel_h = p.kernel_w = 2; p.stride_h = 2; p.dilation_h = 1;
                p.pad_top = p.pad_left = 0;
            }
        }
        p.scratch_slice = 40 * 96;
        {
            long eh = p.dilation_h * (p.kernel_h - 1) + 1, ew = p.dilation_w * (p.kernel_w - 1) + 1;
            long sh = p.in_h + p.pad_top + rnd(0, 3) - eh;
            long swid = p.in_w + p.pad_left + rnd(0, 3) - ew;
            if (sh < 0 || swid < 0) continue;
            p.out_h = sh / p.stride_h + 1; p.out_w = swid / p.stride_w + 1;
        }
        p.phase_width = (p.in_w + p.stride_w - 1) / p.stride_w;
        for (k = 0; k < p.kernel_w; k++) {
            long t = k * p.dilation_w - p.pad_left, s = p.stride_w, q = ((t % s) + s) % s;
            taps[k] = s == 1 ? t : q * p.phase_width + (t - q) / s;
        }
        n = p.planes * p.in_h * p.in_w;
        special = trial % 4 == 3;   /* NaN, signed zeros, infinities and ties in 1 of 8 */
        for (i = 0; i < n; i++) {
            const float specials[6] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 0.25f};
            x[i] = special && rand() % 8 == 0 ? specials[rand() % 6]
                                              : (float)rand() / RAND_MAX - 0.5f;
        }
        for (i = 0; i < p.out_h + p.out_w; i++) inv[i] = 1.0f / (float)rnd(1, 9);
        for (k = 0; k < 2; k++) {
            long plane, oh, ow, kh, kw;
            if (k == 0) {
                /* a small-map max pool gets exactly the scratch pool.h counts (ASan sees
                   any access past it) */
                float *exact = mlcc_maxpool_small(&p)
                    ? malloc(sizeof(float) * (size_t)mlcc_maxpool_small_floats(&p)) : NULL;
                mlcc_f32_maxpool2d(&p, x, taps, y0, exact ? exact : scr, NULL);
                scalar_maxpool2d(&p, x, taps, y1, exact ? exact : scr, NULL);
                free(exact);
                /* the same bits, NaN and signed zeros included */
                if (memcmp(y0, y1, sizeof(float) * (size_t)(p.planes * p.out_h * p.out_w))) {
                    if (bad < 5) printf("vector and scalar bits differ, trial %d\n", trial);
                    bad++;
                }
                if (special) continue;   /* the naive loop skips NaN, -inf gives -FLT_MAX */
            } else {
                mlcc_f32_avgpool2d(&p, x, taps, inv, y0, scr, NULL);
                scalar_avgpool2d(&p, x, taps, inv, y1, scr, NULL);
                /* the sums in the same order: the same bits too (on x86 NaN's too: where
                   inf - inf meets a NaN, the running sum's NaN) */
                if (memcmp(y0, y1, sizeof(float) * (size_t)(p.planes * p.out_h * p.out_w))) {
                    if (bad < 5) printf("vector and scalar average bits differ, trial %d\n",
                                        trial);
                    bad++;
                }
                if (special) continue;
            }
            for (plane = 0; plane < p.planes; plane++)
                for (oh = 0; oh < p.out_h; oh++)
                    for (ow = 0; ow < p.out_w; ow++) {
                        float r = k == 0 ? -FLT_MAX : 0.0f;
                        long o = (plane * p.out_h + oh) * p.out_w + ow;
                        for (kh = 0; kh < p.kernel_h; kh++)
                            for (kw = 0; kw < p.kernel_w; kw++) {
                                long ih = oh * p.stride_h + kh * p.dilation_h - p.pad_top;
                                long iw = ow * p.stride_w + kw * p.dilation_w - p.pad_left;
                                float v;
                                if (ih < 0 || ih >= p.in_h || iw < 0 || iw >= p.in_w) continue;
                                v = x[(plane * p.in_h + ih) * p.in_w + iw];
                                r = k == 0 ? (v > r ? v : r) : r + v;
                            }
                        if (k == 1) r *= inv[oh] * inv[p.out_h + ow];
                        if ((k == 0 && (y0[o] != r || y1[o] != r)) ||
                            (k == 1 && (fabsf(y0[o] - r) > 1e-5f || fabsf(y1[o] - r) > 1e-5f))) {
                            if (bad < 5) printf("mismatch k=%ld trial %d\n", k, trial);
                            bad++;
                        }
                    }
        }
    }
    printf("%d mismatches\n", bad);
    return bad != 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("vector_flags", [
    [],                                                     # 4 lanes (SSE, as NEON, wasm)
    pytest.param(["-mavx2", "-DMLCC_VECTOR_BYTES=32"],      # 8 lanes: last block overlapping
                 marks=pytest.mark.skipif(not cpu_has("avx2"), reason="needs AVX2")),
    pytest.param(["-mavx512f", "-DMLCC_VECTOR_BYTES=64"],   # 16, as x86-native: masked ends
                 marks=pytest.mark.skipif(not cpu_has("avx512f"), reason="needs AVX-512"))])
def test_pool_kernels_against_scalar_twin_and_naive(tmp_path, vector_flags):
    """The vector path, the portable scalar path (MLCC_HAVE_VECTORS 0) and a naive loop agree on
    3000 random geometries (strides 1-4 through the phase split, dilations, pads, borders),
    under ASan and UBSan; the max pools bit for bit with NaN, signed zeros and infinities."""
    (tmp_path / "twin.c").write_text(TWIN_C)
    cmd = ["gcc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-O1", "-g",
           *vector_flags,
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{KERNELS / 'include'}", f"-I{KERNELS / 'kernels'}", str(tmp_path / "twin.c"),
           str(KERNELS / "kernels" / "pool.c"), str(KERNELS / "src" / "mlcc_threadpool.c"),
           "-o", str(tmp_path / "twin"), "-lm", "-pthread"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    run = subprocess.run([str(tmp_path / "twin")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def _ceil_rule_reference(i, k, s, d, pb, pe):
    """PyTorch / onnxruntime: ceil, minus a window that would start in the right padding."""
    o = -(-(i + pb + pe - d * (k - 1) - 1) // s) + 1
    return o - 1 if (o - 1) * s >= i + pb else o


def test_window_geometry_ceil_rule():
    rng = np.random.default_rng(0)
    for _ in range(500):
        i, k, s, d = (int(v) for v in rng.integers(1, 9, 4))
        pb, pe = (int(v) for v in rng.integers(0, k, 2))
        if i + pb + pe < d * (k - 1) + 1:
            continue
        node = Node("n", "MaxPool", ["x"], ["y"], {"kernel_shape": [k], "strides": [s],
                                                   "pads": [pb, pe], "dilations": [d]})
        geo = window_geometry(node, [i], [k], ceil_mode=True)
        assert geo["out"] == [_ceil_rule_reference(i, k, s, d, pb, pe)], (i, k, s, d, pb, pe)


def _compile_fails(tmp_path, op, n_outputs=1, **attrs):
    with pytest.raises(UnsupportedError, match=f"{op.lower()}_node") as err:
        check_node(op, {"x": rand(1, 2, 6, 6)}, tmp_path=tmp_path, n_outputs=n_outputs, **attrs)
    return str(err.value)


@pytest.mark.parametrize("shape,kernel,strides,pads,storage_order", [
    ((2, 3, 7, 9), [3, 2], [2, 2], [1, 0, 1, 1], 0),
    ((1, 2, 6, 11), [2, 3], [1, 3], [0, 1, 1, 0], 1),      # column-major indices
    ((2, 3, 13), [4], [3], [2, 1], 0),                      # 1-D
    ((1, 2, 5, 6, 7), [2, 3, 2], [2, 1, 3], [1, 0, 1, 0, 1, 1], 1),   # 3-D, column-major
])
def test_maxpool_indices(tmp_path, shape, kernel, strides, pads, storage_order):
    """The Indices output: flat indices into x (plane offset included), row- or column-major
    over the spatial axes."""
    x = np.random.default_rng(3).permutation(np.prod(shape)).reshape(shape).astype(np.float32)
    check_node("MaxPool", {"x": x}, tmp_path=tmp_path, n_outputs=2, kernel_shape=kernel,
               strides=strides, pads=pads, storage_order=storage_order, opset=12)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("kernel,strides,pads,dil,ceil", [
    ([2, 2, 2], [2, 2, 2], [0] * 6, [1, 1, 1], 0),
    ([3, 2, 3], [2, 3, 1], [1, 0, 1, 1, 1, 0], [1, 1, 1], 1),
    ([2, 3, 2], [1, 2, 2], [0, 1, 0, 1, 0, 1], [2, 1, 2], 0),
])
def test_pool3d(tmp_path, op, kernel, strides, pads, dil, ceil):
    attrs = {"count_include_pad": 1} if op == "AveragePool" and pads[1] else {}
    check_node(op, {"x": rand(2, 3, 7, 9, 5)}, tmp_path=tmp_path, kernel_shape=kernel,
               strides=strides, pads=pads, dilations=dil, ceil_mode=ceil, opset=19, **attrs)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_maxpool_8bit(tmp_path, dtype):
    info = np.iinfo(dtype)
    x = np.random.default_rng(5).integers(info.min, info.max + 1, (2, 3, 9, 7)).astype(dtype)
    got = check_node("MaxPool", {"x": x}, tmp_path=tmp_path, kernel_shape=[3, 2],
                     strides=[2, 2], pads=[1, 1, 1, 0], opset=12)
    assert got["y0"].dtype == dtype


def test_refuses_4d_pool(tmp_path):
    x = rand(1, 1, 3, 3, 3, 3)
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool4d", kernel_shape=[2, 2, 2, 2])
    model = make_model([node], {"x": x}, ["y"])
    path = tmp_path / "m.onnx"
    import onnx
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match="pool4d.*4-D pooling"):
        mlcc.compile(path, tmp_path / "out", build=False)


def test_refuses_same_with_dilation(tmp_path):
    msg = _compile_fails(tmp_path, "MaxPool", kernel_shape=[2, 2], auto_pad="SAME_UPPER",
                         dilations=[2, 2])
    assert "dilations" in msg


@pytest.mark.parametrize("shape,attrs", [
    ((1, 3, 11, 9), {"kernel_shape": [3, 2]}),
    ((2, 5, 13, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1],
                      "ceil_mode": 1}),
    ((1, 2, 17), {"kernel_shape": [4], "strides": [3], "pads": [2, 1], "p": 1}),
    ((1, 3, 9, 7), {"kernel_shape": [2, 3], "dilations": [2, 1], "p": 3}),
    ((1, 2, 5, 7, 6), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "p": 2}),
    ((1, 4, 7, 7), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}),
])
def test_lppool(tmp_path, shape, attrs):
    check_node("LpPool", {"x": rand(*shape)}, tmp_path=tmp_path, opset=18, **attrs)


@pytest.mark.parametrize("shape,p", [((2, 5, 7, 3), 2), ((1, 3, 13), 1), ((2, 3, 3, 5, 4), 3),
                                     ((1, 7, 1, 1), 2)])
def test_global_lppool(tmp_path, shape, p):
    check_node("GlobalLpPool", {"x": rand(*shape)}, tmp_path=tmp_path, opset=13, p=p)


def test_lppool_refuses_nonpositive_p(tmp_path):
    with pytest.raises(UnsupportedError, match="lppool_node.*p"):
        check_node("LpPool", {"x": rand(1, 2, 5, 5)}, tmp_path=tmp_path, opset=18,
                   kernel_shape=[2, 2], p=0)


# --------------------------------------------------------------------------------- MaxUnpool

def _unpool_model(nodes, inputs: dict, out_shape, initializers=None):
    """ONNX shape inference leaves MaxUnpool's output shape open: it is given here."""
    import onnx
    from onnx import numpy_helper
    graph = helper.make_graph(
        nodes, "unpool",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                       list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(
            next(iter(inputs.values())).dtype), list(out_shape))],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("shape,kernel,strides,pads", [
    # sizes where the unpooled shape is the input's (else MaxPool's indices, in the input's
    # layout, do not fit it: what output_shape is for)
    ((2, 3, 10, 14), [2, 2], [2, 2], [0, 0, 0, 0]),      # the classic 2x2/2
    ((1, 2, 13, 7), [3, 3], [2, 2], [1, 1, 1, 1]),       # padded windows, odd sizes
    ((1, 3, 9, 7), [3, 2], [3, 1], [2, 0, 1, 1]),        # asymmetric pads, stride 1: equal
                                                         # indices from overlapping windows
    ((2, 3, 17), [3], [2], [1, 1]),                      # 1-D
    ((1, 2, 6, 7, 5), [2, 3, 2], [2, 2, 2], [0, 1, 0, 0, 1, 1]),   # 3-D
])
def test_max_unpool_after_max_pool(tmp_path, shape, kernel, strides, pads):
    """MaxPool's values and Indices into MaxUnpool, against onnxruntime; the same graph with
    an output_shape equal to the unpooled shape."""
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads)
    x = rand(*shape, seed=3)
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], **attrs),
             helper.make_node("MaxUnpool", ["p", "i"], ["y"], name="unpool", **attrs)]
    got = check_model(_unpool_model(nodes, {"x": x}, shape), {"x": x}, tmp_path)
    assert (got["y"] != 0).sum() > 0
    nodes[1] = helper.make_node("MaxUnpool", ["p", "i", "s"], ["y"], name="unpool", **attrs)
    model = _unpool_model(nodes, {"x": x}, shape,
                          initializers={"s": np.array(shape, np.int64)})
    check_model(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_max_unpool_of_run_time_indices(tmp_path, dtype):
    """Indices fed at run time (any order, repeated: the last wins, as in the ONNX reference),
    the other float types."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 3, 2)).astype(dtype)
    i = rng.integers(0, 2 * 3 * 7 * 5, size=x.shape).astype(np.int64)
    i.reshape(-1)[5] = i.reshape(-1)[2]
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[3, 3],
                            strides=[3, 2], pads=[1, 0, 1, 0])
    got = check_model(_unpool_model([node], {"x": x, "i": i}, (2, 3, 7, 5)),
                      {"x": x, "i": i}, tmp_path, reference="onnx")
    assert got["y"].dtype == x.dtype
    flat = i.reshape(-1)
    last = np.flatnonzero(flat == flat[5])[-1]          # of the elements sent there
    assert got["y"].reshape(-1)[flat[5]] == x.reshape(-1)[last]


def test_max_unpool_refusals_and_index_status(tmp_path):
    import onnx
    from mlcc.errors import RuntimeStatusError
    x, i = rand(1, 1, 2, 2), np.array([[[[5, 7], [13, 15]]]], np.int64)
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    larger = _unpool_model([helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], name="unpool",
                                             **attrs)], {"x": x, "i": i}, (1, 1, 5, 5),
                           initializers={"s": np.array([1, 1, 5, 5], np.int64)})
    with pytest.raises(UnsupportedError, match=r"'unpool' \(MaxUnpool.*output_shape \[1, 1, 5, "
                                               r"5\] other than the unpooled shape \[1, 1, 4, 4\]"):
        compile_and_run(larger, {"x": x, "i": i}, tmp_path)
    model = _unpool_model([helper.make_node("MaxUnpool", ["x", "i"], ["y"], **attrs)],
                          {"x": x, "i": i}, (1, 1, 4, 4))
    onnx.save(model, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out")
    m = mlcc.load(tmp_path / "out")
    np.testing.assert_array_equal(m.run({"x": x, "i": i})["y"].reshape(-1)[[5, 7, 13, 15]],
                                  x.reshape(-1))
    with pytest.raises(RuntimeStatusError, match="out of range"):
        m.run({"x": x, "i": np.array([[[[5, 7], [13, 16]]]], np.int64)})
