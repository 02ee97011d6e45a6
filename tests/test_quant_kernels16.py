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
from mlcc.ops.quant16 import _scratch
from util import kernel_cdef, thread_pools

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


def _run_all(ffi, pools, y, call):
    """call(pool) without a pool and on each pool: the same bytes every time."""
    call(ffi.NULL)
    first = y.copy()
    for pool in pools.values():
        y[...] = 0
        call(pool)
        np.testing.assert_array_equal(y, first)
    return first


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
        got = _run_all(ffi, pools, y, lambda pool: fn(p, ptr(ffi, x), ptr(ffi, w), ptr(ffi, scale),
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
        got = _run_all(ffi, pools, y, lambda pool: fn(p, ptr(ffi, x), ptr(ffi, w), ptr(ffi, scale),
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
