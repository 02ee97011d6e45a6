"""The W8A16 kernels (runtime_c/kernels/qconv16.c: int16 activations x int8 weights) bit for
bit against a numpy model of their arithmetic (qconv16.h), at odd shapes (prime channels,
strides, padding, dilation, groups, depthwise, 1-D, batch 2, K past one int32 block, extreme
values), each output kind (float32, int16, uint8), on 1, 2 and 3 threads; the AVX-512 (with
VNNI) and AVX2 paths against the portable loops."""
from __future__ import annotations

import os
import shlex
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
from cffi import FFI

from mlcc import resources
from mlcc.ops.quant16 import _scratch, direct_bytes, pack_weights16
from util import kernel_cdef, on_every_pool, thread_pools

KERNELS = resources.runtime_c() / "kernels"
CDEF = kernel_cdef("qconv16.h")


def _native_flags(flag: str) -> bool:
    out = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-x", "c", "/dev/null"],
                         capture_output=True, text=True).stdout
    return flag in out


# the vector path is chosen by the target's vector width (MLCC_VECTOR_BYTES) and ISA flags
FLAGS = {"portable": ["-O2"],
         "avx2": ["-O3", "-mavx2", "-mfma", "-DMLCC_VECTOR_BYTES=32", "-ffp-contract=fast"],
         "avx512": ["-O3", "-march=native", "-DMLCC_VECTOR_BYTES=64", "-ffp-contract=fast"]}
NEEDS = {"avx2": "__AVX2__", "avx512": "__AVX512BW__"}
POOL_SIZES = (2, 3)


@pytest.fixture(scope="module", params=sorted(FLAGS))
def lib(request, tmp_path_factory):
    if request.param in NEEDS and not _native_flags(NEEDS[request.param]):
        pytest.skip(f"this CPU has no {NEEDS[request.param]}")
    out = tmp_path_factory.mktemp(f"q16_{request.param}") / "libq16.so"
    src = resources.runtime_c() / "src"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    *FLAGS[request.param], "-DMLCC_MIN_PARALLEL_MACS=0",
                    *shlex.split(os.environ.get("MLCC_TEST_KERNEL_CFLAGS", "")),
                    f"-I{resources.runtime_c() / 'include'}", f"-I{KERNELS}", "-o", str(out),
                    str(KERNELS / "qconv16.c"), str(KERNELS / "qelem.c"),
                    str(KERNELS / "qgemm.c"), str(src / "mlcc_threadpool.c"),
                    str(src / "mlcc_runtime.c"), "-lm", "-lpthread"], check=True)
    ffi = FFI()
    ffi.cdef(CDEF)
    dl = ffi.dlopen(str(out))
    with thread_pools(ffi, dl, POOL_SIZES) as pools:
        yield ffi, dl, request.param, pools


def ptr(ffi, arr):
    return ffi.cast("void *", arr.ctypes.data) if arr is not None else ffi.NULL


OUT_DTYPES = {0: np.float32, 1: np.int16, 2: np.uint8}
ACTS = {"none": (0, 0.0, 0.0), "relu": (1, 0.0, 0.0), "clip": (2, -0.7, 1.3),
        "leaky": (3, 0.1, 0.0)}


def epilogue(acc, scale, fbias, kind, y_scale, zp, act):
    """qconv16.h's epilogue in numpy; acc int64 with the channel on axis 1."""
    shape = [1] * acc.ndim
    shape[1] = -1
    f = (acc.astype(np.float64) * scale.astype(np.float64).reshape(shape)).astype(np.float32)
    f = (f + fbias.reshape(shape)).astype(np.float32)
    k, a, b = ACTS[act]
    if k == 1:
        f = np.maximum(f, np.float32(0))
    elif k == 2:
        f = np.minimum(np.maximum(f, np.float32(a)), np.float32(b))
    elif k == 3:
        f = np.where(f >= 0, f, f * np.float32(a)).astype(np.float32)
    if kind == 0:
        return f
    v = f / np.float32(y_scale)
    if kind == 1:
        return np.rint(np.clip(v, -32768, 32767)).astype(np.int16)
    return (np.rint(np.clip(v, -zp, 255 - zp)) + zp).astype(np.uint8)


def conv_acc(x, w, stride, pads, dil, groups):
    """Exact int64 convolution sums (zero padding), x [N, C, H, W], w [M, C/g, kh, kw]."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dil
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    acc = np.zeros((n, m, oh, ow), np.int64)
    mg = m // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                           j * dw:j * dw + (ow - 1) * sw + 1:sw]
                acc[:, g * mg:(g + 1) * mg] += np.einsum(
                    "nchw,mc->nmhw", patch, w[g * mg:(g + 1) * mg, :, i, j].astype(np.int64))
    return acc


def _lo(chunk_bytes):
    return SimpleNamespace(options={"chunk_bytes": chunk_bytes, "threads": True})


def _ep(kind, y_scale, zp, act):
    k, a, b = ACTS[act]
    return {"out_kind": kind, "y_scale": y_scale, "zero_point": zp,
            "act": {"kind": k, "alpha": a, "beta": b}}


# (N, C, H, W, M, kh, kw, stride, pads (t, l, b, r), dilation, groups)
CONVS = [
    (1, 3, 7, 9, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (1, 6, 11, 13, 9, 3, 2, (2, 3), (1, 0, 2, 1), (1, 1), 3),
    (1, 7, 13, 11, 7, 5, 5, (2, 2), (2, 2, 2, 2), (2, 1), 7),      # depthwise, dilated
    (2, 5, 1, 37, 11, 1, 3, (1, 2), (0, 1, 0, 1), (1, 1), 1),     # 1-D (H = 1), batch 2
    (1, 17, 9, 10, 13, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),    # 1x1: a GEMM
    (1, 67, 5, 6, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),      # K = 603: two int32 blocks
]


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("kind,act", [(0, "leaky"), (1, "none"), (2, "relu"), (1, "clip")])
def test_conv16_matches_numpy(lib, case, kind, act):
    ffi, L, flavour, pools = lib
    n, c, h, wd, m, kh, kw, stride, pads, dil, groups = CONVS[case]
    rng = np.random.default_rng(case * 7 + kind)
    x = rng.integers(-32768, 32768, (n, c, h, wd)).astype(np.int16)
    w = rng.integers(-127, 128, (m, c // groups, kh, kw)).astype(np.int8)
    if case == len(CONVS) - 1:      # the largest sums: every product at its extreme
        x[...] = -32768
        w[...] = -127
        w[1] = 127
    acc = conv_acc(x.astype(np.int64), w, stride, pads, dil, groups)
    assert case != len(CONVS) - 1 or np.abs(acc).max() > 2**31      # int32 would overflow
    kk = c // groups * kh * kw
    # outputs of order 1 (the extreme case's sums are K times the largest product)
    scale = (rng.uniform(0.5, 2.0, m) / (32768 * 127 * (kk if case == len(CONVS) - 1
                                                          else np.sqrt(kk)))).astype(np.float32)
    fbias = rng.normal(0, 1, m).astype(np.float32)
    y_scale, zp = (0.0 if kind == 0 else (1e-4 if kind == 1 else 0.02)), (0 if kind < 2 else 37)
    want = epilogue(acc, scale, fbias, kind, y_scale, zp, act)
    oh, ow = acc.shape[2:]
    # a small chunk budget: several chunks per plane, and a tile at a chunk's edge
    chunk, scratch_bytes = _scratch(_lo(4096), groups, m // groups, c // groups * kh * kw,
                                    oh * ow)
    p = ffi.new("mlcc_s16_conv2d_params *", {
        "batch": n, "in_channels": c, "in_h": h, "in_w": wd, "out_channels": m, "out_h": oh,
        "out_w": ow, "kernel_h": kh, "kernel_w": kw, "stride_h": stride[0],
        "stride_w": stride[1], "dilation_h": dil[0], "dilation_w": dil[1], "pad_top": pads[0],
        "pad_left": pads[1], "groups": groups, "chunk_cols": chunk,
        "ep": _ep(kind, y_scale, zp, act)})
    scratch = np.zeros(scratch_bytes + 64, np.uint8)
    y = np.zeros(want.shape, OUT_DTYPES[kind])
    for fn in (L.mlcc_s16_conv2d, L.mlcc_s16_conv2d__portable):
        got = on_every_pool(ffi, pools, y, lambda pool: fn(p, ptr(ffi, x), ptr(ffi, w), ptr(ffi, scale),
                                                        ptr(ffi, fbias), ptr(ffi, y),
                                                        ptr(ffi, scratch), pool))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows,n,k", [(1, 13, 7), (5, 3, 1), (37, 11, 600), (70, 9, 33)])
@pytest.mark.parametrize("kind", [0, 1, 2])
def test_fc16_matches_numpy(lib, rows, n, k, kind):
    ffi, L, flavour, pools = lib
    rng = np.random.default_rng(rows + k + kind)
    x = rng.integers(-32768, 32768, (rows, k)).astype(np.int16)
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    acc = x.astype(np.int64) @ w.T.astype(np.int64)
    scale = (rng.uniform(0.5, 2.0, n) / (32768 * 127 * np.sqrt(k))).astype(np.float32)
    fbias = rng.normal(0, 1, n).astype(np.float32)
    y_scale, zp = (0.0 if kind == 0 else (1e-4 if kind == 1 else 0.01)), (0 if kind < 2 else 101)
    # the channel is the column: the model's axis 1 is the column axis of [rows, n]
    want = epilogue(acc, scale, fbias, kind, y_scale, zp, "relu" if kind == 2 else "none")
    chunk, scratch_bytes = _scratch(_lo(2048), 1, n, k, rows)
    p = ffi.new("mlcc_s16_fc_params *", {"m": rows, "n": n, "k": k, "chunk_cols": chunk,
                                         "ep": _ep(kind, y_scale, zp,
                                                   "relu" if kind == 2 else "none")})
    scratch = np.zeros(scratch_bytes + 64, np.uint8)
    y = np.zeros(want.shape, OUT_DTYPES[kind])
    for fn in (L.mlcc_s16_fc, L.mlcc_s16_fc__portable):
        got = on_every_pool(ffi, pools, y, lambda pool: fn(p, ptr(ffi, x), ptr(ffi, w), ptr(ffi, scale),
                                                        ptr(ffi, fbias), ptr(ffi, y),
                                                        ptr(ffi, scratch), pool))
        np.testing.assert_array_equal(got, want)


def test_quantize_int16_is_quantize_linear(lib):
    ffi, L, _, _ = lib
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1e9, -1e9, 3.25, -7.75, 0.0], np.float32) * 0.01
    x = np.concatenate([x, np.random.default_rng(0).normal(0, 200, 101).astype(np.float32)])
    scale = np.float32(0.01)
    p = ffi.new("mlcc_quantize_params *", {"count": x.size, "scale": float(scale),
                                           "zero_point": 0})
    y = np.zeros(x.size, np.int16)
    L.mlcc_f32_quantize_int16(p, ptr(ffi, x), ptr(ffi, y))
    want = np.clip(np.rint(x / scale), -32768, 32767).astype(np.int16)
    np.testing.assert_array_equal(y, want)


# the weights packed at compile time (mlcc/ops/quant16.py pack_weights16): tile edges of the 8
# channel rows (8, 9, 17), odd K, grouped, 1x1, strided; every output kind
PACKED = CONVS[:2] + CONVS[3:] + [
    (1, 4, 6, 7, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),       # M = 8: one whole tile
    (1, 5, 7, 5, 9, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),       # M = 9, K = 5
    (1, 6, 9, 8, 34, 3, 3, (2, 2), (0, 1, 1, 0), (1, 1), 2),      # 17 per group
]


def _conv_case(ffi, conv, kind, act, seed, chunk_bytes=4096, packed=False, direct=False):
    """Inputs, the numpy result, the params and the scratch of one convolution."""
    n, c, h, wd, m, kh, kw, stride, pads, dil, groups = conv
    rng = np.random.default_rng(seed)
    x = rng.integers(-32768, 32768, (n, c, h, wd)).astype(np.int16)
    w = rng.integers(-127, 128, (m, c // groups, kh, kw)).astype(np.int8)
    acc = conv_acc(x.astype(np.int64), w, stride, pads, dil, groups)
    kk = c // groups * kh * kw
    scale = (rng.uniform(0.5, 2.0, m) / (32768 * 127 * np.sqrt(kk))).astype(np.float32)
    fbias = rng.normal(0, 1, m).astype(np.float32)
    y_scale, zp = (0.0 if kind == 0 else (1e-4 if kind == 1 else 0.02)), (0 if kind < 2 else 37)
    named = isinstance(act, str)     # else an epilogue dict, no numpy model
    want = epilogue(acc, scale, fbias, kind, y_scale, zp, act) if named else None
    oh, ow = acc.shape[2:]
    # the direct path's K: (tap, channel pair)
    k = kh * kw * 2 * (-(-c // 2)) if direct else kk
    chunk, scratch_bytes = _scratch(_lo(chunk_bytes), groups, m // groups, k, oh * ow,
                                    packed=packed)
    params = {
        "batch": n, "in_channels": c, "in_h": h, "in_w": wd, "out_channels": m, "out_h": oh,
        "out_w": ow, "kernel_h": kh, "kernel_w": kw, "stride_h": stride[0],
        "stride_w": stride[1], "dilation_h": dil[0], "dilation_w": dil[1], "pad_top": pads[0],
        "pad_left": pads[1], "groups": groups, "chunk_cols": chunk, "direct": int(direct),
        "ep": _ep(kind, y_scale, zp, act) if named else act}
    if direct:
        scratch_bytes = max(scratch_bytes, direct_bytes(params))
    p = ffi.new("mlcc_s16_conv2d_params *", params)
    scratch = np.zeros(scratch_bytes + 64, np.uint8)
    y = np.zeros((n, m, oh, ow), OUT_DTYPES[kind])
    return SimpleNamespace(x=x, w=w, scale=scale, fbias=fbias, want=want, p=p,
                           scratch=scratch, y=y)


@pytest.mark.parametrize("case", range(len(PACKED)))
@pytest.mark.parametrize("kind,act", [(0, "leaky"), (1, "clip"), (2, "relu")])
def test_conv16_packed_weights(lib, case, kind, act):
    """mlcc_s16_conv2d__packed with pack_weights16's blob: the numpy model's bytes, on every
    thread count (no weight scratch: _scratch(packed=True))."""
    ffi, L, _, pools = lib
    t = _conv_case(ffi, PACKED[case], kind, act, 100 + case * 3 + kind, packed=True)
    wide = pack_weights16(t.w, PACKED[case][-1])
    got = on_every_pool(ffi, pools, t.y, lambda pool: L.mlcc_s16_conv2d__packed(
        t.p, ptr(ffi, t.x), ptr(ffi, wide), ptr(ffi, t.scale), ptr(ffi, t.fbias),
        ptr(ffi, t.y), ptr(ffi, t.scratch), pool))
    np.testing.assert_array_equal(got, t.want)


# the direct product (groups 1): odd channels, strides 1, 2 and 3 (column phases), dilation,
# asymmetric pads, output widths around its 16 and 32 columns, K past one int32 block
DIRECT = [c for c in PACKED if c[-1] == 1] + [
    (1, 5, 6, 17, 11, 3, 3, (1, 1), (1, 0, 1, 1), (1, 1), 1),     # ow 16
    (2, 3, 9, 35, 8, 3, 3, (2, 2), (1, 1, 0, 1), (1, 1), 1),      # ow 17, batch 2
    (1, 4, 7, 36, 9, 3, 2, (1, 3), (0, 1, 2, 0), (2, 2), 1),      # stride 3, dilated
    (1, 67, 5, 33, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),     # ow 33, 306 pairs
]


@pytest.mark.parametrize("case", range(len(DIRECT)))
@pytest.mark.parametrize("kind,act", [(0, "leaky"), (1, "clip"), (2, "relu")])
def test_conv16_direct(lib, case, kind, act):
    """p->direct: the tap-major weights; the direct product on AVX-512, the im2col of the
    same K order elsewhere: the numpy model's bytes on every thread count."""
    ffi, L, _, pools = lib
    t = _conv_case(ffi, DIRECT[case], kind, act, 400 + case * 3 + kind, packed=True,
                   direct=True)
    wide = pack_weights16(t.w, 1, tap_major=True)
    got = on_every_pool(ffi, pools, t.y, lambda pool: L.mlcc_s16_conv2d__packed(
        t.p, ptr(ffi, t.x), ptr(ffi, wide), ptr(ffi, t.scale), ptr(ffi, t.fbias),
        ptr(ffi, t.y), ptr(ffi, t.scratch), pool))
    np.testing.assert_array_equal(got, t.want)


@pytest.mark.parametrize("rows,n,k", [(1, 8, 7), (37, 17, 600), (33, 9, 2)])
def test_fc16_packed_weights(lib, rows, n, k):
    ffi, L, _, pools = lib
    rng = np.random.default_rng(rows * 3 + k)
    x = rng.integers(-32768, 32768, (rows, k)).astype(np.int16)
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    scale = (rng.uniform(0.5, 2.0, n) / (32768 * 127 * np.sqrt(k))).astype(np.float32)
    fbias = rng.normal(0, 1, n).astype(np.float32)
    want = epilogue(x.astype(np.int64) @ w.T.astype(np.int64), scale, fbias, 1, 1e-4, 0, "clip")
    chunk, scratch_bytes = _scratch(_lo(2048), 1, n, k, rows, packed=True)
    p = ffi.new("mlcc_s16_fc_params *", {"m": rows, "n": n, "k": k, "chunk_cols": chunk,
                                         "ep": _ep(1, 1e-4, 0, "clip")})
    scratch = np.zeros(scratch_bytes + 64, np.uint8)
    y = np.zeros(want.shape, np.int16)
    wide = pack_weights16(w, 1)
    got = on_every_pool(ffi, pools, y, lambda pool: L.mlcc_s16_fc__packed(
        p, ptr(ffi, x), ptr(ffi, wide), ptr(ffi, scale), ptr(ffi, fbias), ptr(ffi, y),
        ptr(ffi, scratch), pool))
    np.testing.assert_array_equal(got, want)


# depthwise (the kernel of its own): widths around the 16-lane vectors (15, 16, 17, 33),
# strides 1, 2 and 3, asymmetric pads, dilation, 1-D, batch 2, a window of 529 taps (more
# than one int32 block: the tiles) and one whose 16 outputs span more than 64 columns
DEPTHWISE = [
    (1, 5, 9, 16, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 5),
    (2, 3, 7, 17, 3, 3, 3, (1, 1), (0, 2, 1, 0), (1, 1), 3),
    (1, 7, 11, 33, 7, 5, 5, (2, 2), (2, 1, 2, 2), (1, 1), 7),
    (1, 4, 8, 15, 4, 3, 3, (2, 2), (1, 1, 1, 1), (2, 2), 4),
    (1, 3, 10, 31, 3, 3, 3, (3, 3), (1, 1, 1, 1), (1, 1), 3),
    (1, 6, 1, 29, 6, 1, 7, (1, 1), (0, 3, 0, 3), (1, 1), 6),
    (1, 2, 25, 24, 2, 23, 23, (1, 1), (1, 1, 1, 1), (1, 1), 2),
    (1, 2, 9, 70, 2, 3, 3, (1, 1), (30, 30, 30, 30), (30, 30), 2),  # 76 columns: the loops
]


@pytest.mark.parametrize("case", range(len(DEPTHWISE)))
@pytest.mark.parametrize("kind,act", [(0, "leaky"), (1, "none"), (2, "relu")])
def test_depthwise16(lib, case, kind, act):
    ffi, L, _, pools = lib
    t = _conv_case(ffi, DEPTHWISE[case], kind, act, 200 + case * 3 + kind)
    for fn in (L.mlcc_s16_conv2d, L.mlcc_s16_conv2d__portable):
        got = on_every_pool(ffi, pools, t.y, lambda pool: fn(
            t.p, ptr(ffi, t.x), ptr(ffi, t.w), ptr(ffi, t.scale), ptr(ffi, t.fbias),
            ptr(ffi, t.y), ptr(ffi, t.scratch), pool))
        np.testing.assert_array_equal(got, t.want)


@pytest.mark.parametrize("act_kind", [5, 6, 8, 9])
@pytest.mark.parametrize("conv", [CONVS[0], DEPTHWISE[2]])
def test_epilogue_activations_match_portable(lib, act_kind, conv):
    """The vector epilogue applies every other activation (hard sigmoid, HardSwish, SiLU,
    GELU) lane for lane as the portable one does: the same bytes."""
    ffi, L, _, pools = lib
    ep = {"out_kind": 0, "y_scale": 0.0, "zero_point": 0,
          "act": {"kind": act_kind, "alpha": 0.3, "beta": 0.5}}
    t = _conv_case(ffi, conv, 0, ep, 300 + act_kind)
    got = []
    for fn in (L.mlcc_s16_conv2d, L.mlcc_s16_conv2d__portable):
        got.append(on_every_pool(ffi, pools, t.y, lambda pool: fn(
            t.p, ptr(ffi, t.x), ptr(ffi, t.w), ptr(ffi, t.scale), ptr(ffi, t.fbias),
            ptr(ffi, t.y), ptr(ffi, t.scratch), pool)))
    assert np.isfinite(got[0]).all() and np.std(got[0]) > 0
    np.testing.assert_array_equal(got[0], got[1])
