"""The int8 kernels (runtime_c/kernels/qgemm.c, qconv.c, qelem.c) bit for bit against numpy
models of the same integer arithmetic (mlcc/quant/scheme.py), at odd shapes and tile edges;
the vector (AVX512-VNNI) path against its portable twin."""
from __future__ import annotations

import os
import shlex
import subprocess

import numpy as np
import pytest
from cffi import FFI

from mlcc import resources
from types import SimpleNamespace

from mlcc.ops.quant import _conv_scratch, add_fixed_multipliers, fixed_multiplier
from mlcc.quant.scheme import (QParams, activation_table, fixed_multipliers,
                               multiply_by_quantized_multiplier, quantize_linear,
                               requantize_fixed, requantize_float)
from util import kernel_cdef, on_every_pool, thread_pools

KERNELS = resources.runtime_c() / "kernels"

CDEF = kernel_cdef("qgemm.h", "qconv.h", "qelem.h")

FLAGS = {"portable": ["-O2"], "native": ["-O3", "-march=native", "-ffp-contract=fast"]}


def _native_has_vnni() -> bool:
    out = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-x", "c", "/dev/null"],
                         capture_output=True, text=True).stdout
    return "__AVX512VNNI__" in out


POOL_SIZES = (2, 3)


@pytest.fixture(scope="module", params=sorted(FLAGS))
def lib(request, tmp_path_factory):
    """The kernels with the thread pool, MLCC_MIN_PARALLEL_MACS=0 and
    MLCC_MIN_PARALLEL_ELEMENTS=0 so that even these small cases split; yields (ffi, lib,
    flavour, pools by size)."""
    out = tmp_path_factory.mktemp(f"qk_{request.param}") / "libq.so"
    src = resources.runtime_c() / "src"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    *FLAGS[request.param], "-DMLCC_MIN_PARALLEL_MACS=0",
                    "-DMLCC_MIN_PARALLEL_ELEMENTS=0",
                    *shlex.split(os.environ.get("MLCC_TEST_KERNEL_CFLAGS", "")),  # see util.py
                    f"-I{resources.runtime_c() / 'include'}",
                    f"-I{KERNELS}", "-o", str(out), str(KERNELS / "qgemm.c"),
                    str(KERNELS / "qconv.c"), str(KERNELS / "qelem.c"),
                    str(src / "mlcc_threadpool.c"), str(src / "mlcc_runtime.c"), "-lm",
                    "-lpthread"], check=True)
    ffi = FFI()
    ffi.cdef(CDEF)
    dl = ffi.dlopen(str(out))
    with thread_pools(ffi, dl, POOL_SIZES) as pools:
        yield ffi, dl, request.param, pools


def ptr(ffi, arr):
    return ffi.cast("void *", arr.ctypes.data) if arr is not None else ffi.NULL


def requant(ffi, out_kind, mode, zp, qmin=0, qmax=255, act=0):
    return {"out_kind": out_kind, "mode": mode, "zero_point": zp, "qmin": qmin, "qmax": qmax,
            "act": {"kind": act, "alpha": 0.0, "beta": 0.0}}


def channel_consts(rng, m, mode):
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    scale = rng.uniform(2e-4, 2e-2, m).astype(np.float32)
    m0, sh = fixed_multipliers(scale.astype(np.float64))
    fbias = rng.normal(0, 1, m).astype(np.float32)
    return bias, scale, fbias, m0, sh


def expected(acc, scale, fbias, m0, sh, out_kind, mode, zp, qmin, qmax, axis):
    """The epilogue's numpy model; channel constants broadcast along `axis` of acc."""
    shape = [1] * acc.ndim
    shape[axis] = -1
    r = lambda a: a.reshape(shape)   # noqa: E731
    qp = QParams(1.0, zp)
    if out_kind == 1:
        return acc.astype(np.float32) * r(scale) + r(fbias)
    if mode == 1:
        return requantize_fixed(acc, r(m0), r(sh), qp, qmin, qmax)
    return requantize_float(acc, r(scale), qp, qmin, qmax)


MODES = [(0, 0), (0, 1), (1, 0)]        # (out_kind, mode): u8 float, u8 fixed, f32


def check(flavour, got, want, out_kind):
    """uint8 outputs bit for bit; float outputs too, except that the native build contracts
    acc * scale + bias into one FMA (-ffp-contract=fast, as the float kernels): one rounding
    fewer."""
    if out_kind == 1 and flavour == "native":
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("out_kind,mode", MODES)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 17, 5), (4, 16, 4), (5, 15, 67),
                                   (9, 33, 13), (2, 64, 100),
                                   # past MLCC_MIN_PARALLEL_INT8_MACS: the pools split the
                                   # columns (k a multiple of 4), or the rows (k = 1003)
                                   (20, 211, 1024), (3, 1409, 1024), (13, 331, 1003)])
def test_qfc_matches_numpy(lib, m, n, k, out_kind, mode):
    ffi, L, flavour, pools = lib
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    x = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    bias, scale, fbias, m0, sh = channel_consts(rng, n, mode)
    k4 = -(-k // 4)
    packed = np.zeros((4 * k4, n), np.int8)
    packed[:k] = w.T
    packed = np.ascontiguousarray(packed.reshape(k4, 4, n).transpose(0, 2, 1))
    zp, qmin, qmax = 7, 7, 250
    y = np.zeros((m, n), np.float32 if out_kind else np.uint8)
    scratch = np.zeros(m * 4 * k4, np.uint8)
    p = ffi.new("mlcc_qfc_params *", {"m": m, "n": n, "k": k,
                                      "rq": requant(ffi, out_kind, mode, zp, qmin, qmax)})
    on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_fc(
        p, ptr(ffi, x), ptr(ffi, packed), ptr(ffi, bias), ptr(ffi, scale), ptr(ffi, fbias),
        ptr(ffi, m0), ptr(ffi, sh), ptr(ffi, y), ptr(ffi, scratch), pool))
    acc = x.astype(np.int32) @ w.T.astype(np.int32) + bias[None, :]
    want = expected(acc, scale, fbias, m0, sh, out_kind, mode, zp, qmin, qmax, axis=1)
    check(flavour, y, want, out_kind)


def _conv_reference(x, w, bias, zp, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])),
                constant_values=zp) - zp          # real zero outside the input
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    acc = np.zeros((n, m, oh, ow), np.int64) + bias.reshape(1, m, 1, 1)
    mg = m // groups
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dil[0]: i * dil[0] + stride[0] * (oh - 1) + 1: stride[0],
                       j * dil[1]: j * dil[1] + stride[1] * (ow - 1) + 1: stride[1]]
            for g in range(groups):
                acc[:, g * mg:(g + 1) * mg] += np.einsum(
                    "nchw,mc->nmhw", patch[:, g * cg:(g + 1) * cg],
                    w[g * mg:(g + 1) * mg, :, i, j].astype(np.int64))
    return acc.astype(np.int32), oh, ow


CONVS = [  # n, c, h, w, m, k, stride, pad, dil, groups
    (1, 3, 7, 9, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (2, 4, 6, 5, 6, (2, 3), (2, 1), (0, 1), (1, 1), 2),
    (1, 5, 11, 13, 17, (1, 1), (1, 1), (0, 0), (1, 1), 1),
    (1, 7, 9, 8, 7, (3, 3), (2, 2), (1, 1), (1, 1), 7),       # depthwise
    (1, 6, 10, 10, 6, (5, 5), (1, 1), (2, 2), (2, 2), 6),     # depthwise, dilated
    (1, 8, 5, 37, 16, (3, 3), (1, 2), (1, 1), (1, 1), 1),
    # depthwise as PP-OCR rec has them: stride (2, 1); 5 x 5; a row longer than the kernel's
    # 256-column chunk; stride 3 and unequal padding (the padded plane's edges)
    (1, 5, 9, 23, 5, (3, 3), (2, 1), (1, 1), (1, 1), 5),
    (2, 3, 7, 11, 3, (5, 5), (1, 1), (2, 2), (1, 1), 3),
    (1, 2, 3, 301, 2, (3, 3), (1, 1), (1, 1), (1, 1), 2),
    (1, 3, 8, 13, 3, (2, 4), (3, 3), (0, 2), (1, 1), 3),
    # the AVX-512 tap-pair path (stride_w 1): rows of 1, 15, 16, 17, 31, 33 outputs and even
    # kernel widths; a width-1 kernel (portable path)
    (1, 2, 5, 1, 2, (3, 3), (1, 1), (1, 1), (1, 1), 2),
    (1, 3, 6, 15, 3, (5, 5), (2, 1), (2, 2), (1, 1), 3),
    (1, 2, 4, 16, 2, (3, 2), (1, 1), (1, 0), (2, 1), 2),
    (1, 2, 5, 17, 2, (3, 3), (1, 1), (1, 1), (1, 1), 2),
    (1, 2, 3, 31, 2, (1, 4), (1, 1), (0, 2), (1, 1), 2),
    (1, 3, 4, 33, 3, (3, 5), (1, 1), (1, 2), (1, 1), 3),
    (1, 2, 6, 9, 2, (3, 1), (1, 1), (1, 0), (1, 1), 2),
    # the stride-2 tap-pair path: rows of 1, 15, 16, 17, 33 outputs, kernel widths 2 to 5,
    # stride (2, 2) as PP-OCR det downsamples and (1, 2), a row past the 256-column chunk
    (1, 3, 7, 2, 3, (3, 3), (2, 2), (1, 1), (1, 1), 3),
    (1, 2, 9, 30, 2, (3, 3), (2, 2), (1, 1), (1, 1), 2),
    (2, 3, 5, 32, 3, (5, 5), (1, 2), (2, 2), (1, 1), 3),
    (1, 2, 6, 34, 2, (2, 4), (2, 2), (0, 1), (2, 1), 2),
    (1, 3, 4, 66, 3, (3, 5), (1, 2), (1, 2), (1, 1), 3),
    (1, 2, 3, 601, 2, (3, 3), (1, 2), (1, 1), (1, 1), 2),
    # the VNNI + VBMI byte path (3 x 3 and 5 x 5, strides 1 and 2): rec's 5 x 5 stride (2, 1)
    # at 80 columns with 6 output rows (a block of 4, then 2); 5 x 5 stride (2, 2) past 64
    # input columns; no padding; stride (1, 2) with padding only on the left and right;
    # padding wider than the kernel (windows wholly outside the input)
    (1, 4, 12, 80, 4, (5, 5), (2, 1), (2, 2), (1, 1), 4),
    (1, 3, 13, 70, 3, (5, 5), (2, 2), (2, 2), (1, 1), 3),
    (1, 3, 6, 19, 3, (3, 3), (1, 1), (0, 0), (1, 1), 3),
    (1, 2, 8, 66, 2, (5, 5), (1, 2), (0, 2), (1, 1), 2),
    (1, 2, 3, 5, 2, (3, 3), (1, 1), (3, 3), (1, 1), 2),
    # rows of more than DW_BYTES_MAX_W (512) outputs: float / int32 / fixed-mode outputs
    # then take the tap pairs (uint8 with the float requantization stays on the byte path)
    (1, 2, 4, 530, 2, (5, 5), (1, 1), (2, 2), (1, 1), 2),
    # packed from padded planes: stride 2 as YOLOv8n downsamples; a 1 x 1 stride-2 conv (no
    # padding but a copy); a 1 x 1 conv read in place with K not a multiple of 4; a window
    # that does not reach the last input row / column; dilation with groups
    (1, 6, 11, 13, 7, (3, 3), (2, 2), (1, 1), (1, 1), 1),
    (1, 5, 9, 9, 3, (1, 1), (2, 2), (0, 0), (1, 1), 1),
    (2, 7, 5, 3, 9, (1, 1), (1, 1), (0, 0), (1, 1), 1),
    (1, 4, 10, 12, 5, (3, 2), (3, 3), (0, 0), (1, 1), 1),
    (1, 6, 9, 10, 4, (3, 3), (1, 1), (2, 2), (2, 2), 2),
    # packed and multiplied in chunks of output rows (the compiler's chunk_rows, here from
    # 256 KiB of columns as on x86): one row per chunk; two rows per chunk with a shorter last
    # chunk
    (1, 64, 5, 457, 3, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (1, 32, 5, 350, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    # the direct VNNI path (groups 1, stride_w 1, more than one tap; qconv.c's qconv_direct):
    # channels not a multiple of 4, 8-channel blocks with a tail (9, 17, 25), rows of 1, 15,
    # 16, 31, 32, 33, 43, 49 outputs, stride_h 2, dilation, unequal kernels, padding wider
    # than the input; packed instead: 64 channels of rows of 20 (too many lanes lost) and a
    # 1 x 1 output whose scratch is too small for it
    (1, 5, 4, 15, 9, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (1, 6, 3, 16, 17, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (2, 7, 5, 49, 25, (3, 3), (2, 1), (1, 1), (1, 1), 1),
    (1, 7, 4, 20, 64, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (1, 9, 3, 31, 8, (2, 3), (1, 1), (0, 1), (2, 1), 1),
    (1, 4, 4, 32, 4, (1, 3), (1, 1), (0, 1), (1, 1), 1),
    (1, 3, 5, 33, 24, (3, 1), (1, 1), (1, 0), (1, 1), 1),
    (1, 13, 6, 47, 5, (3, 5), (1, 1), (2, 2), (1, 2), 1),
    (1, 2, 1, 1, 2, (3, 3), (1, 1), (2, 2), (1, 1), 1),
    (1, 3, 3, 3, 40, (3, 3), (1, 1), (0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("out_kind,mode", MODES)
@pytest.mark.parametrize("case", CONVS)
def test_qconv_matches_numpy(lib, case, out_kind, mode):
    ffi, L, flavour, pools = lib
    n, c, h, wd, m, k, stride, pad, dil, groups = case
    rng = np.random.default_rng(sum(case[:5]))
    zp = 37
    x = rng.integers(0, 256, (n, c, h, wd)).astype(np.uint8)
    w = rng.integers(-127, 128, (m, c // groups, *k)).astype(np.int8)
    bias, scale, fbias, m0, sh = channel_consts(rng, m, mode)
    depthwise = groups == c == m
    acc, oh, ow = _conv_reference(x, w, bias, zp, stride, pad, dil, groups)
    params = {"batch": n, "in_channels": c, "in_h": h, "in_w": wd, "out_channels": m,
              "out_h": oh, "out_w": ow, "kernel_h": k[0], "kernel_w": k[1],
              "stride_h": stride[0], "stride_w": stride[1], "dilation_h": dil[0],
              "dilation_w": dil[1], "pad_top": pad[0], "pad_left": pad[1], "groups": groups,
              "x_zero_point": zp, "rq": requant(ffi, out_kind, mode, 3, 3, 255)}
    p = ffi.new("mlcc_qconv2d_params *", params)
    y = np.zeros((n, m, oh, ow), np.float32 if out_kind else np.uint8)
    # qconv.h's MLCC_QCONV_PADDED_H / _W: the input rows and columns the window reaches
    ph = (oh - 1) * stride[0] + (k[0] - 1) * dil[0] + 1
    pw = (ow - 1) * stride[1] + (k[1] - 1) * dil[1] + 1
    if depthwise:
        # a slice per thread (MLCC_DW_SLICES: 4): one channel plane as int16, 64-byte aligned
        scratch = np.zeros(4 * (-(-2 * ph * pw // 64) * 64), np.uint8)
        wc = np.ascontiguousarray(w)
        on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_conv2d__depthwise(
            p, ptr(ffi, x), ptr(ffi, wc), ptr(ffi, bias), ptr(ffi, scale), ptr(ffi, fbias),
            ptr(ffi, m0), ptr(ffi, sh), ptr(ffi, y), ptr(ffi, scratch), pool))
    else:
        kk = w[0].size
        k4 = -(-kk // 4)
        wp = np.zeros((m, 4 * k4), np.int8)
        wp[:, :kk] = w.reshape(m, -1)
        # the kernel's bias has the input zero point folded in (as the compiler does)
        eff = (bias - zp * w.reshape(m, -1).astype(np.int32).sum(axis=1)).astype(np.int32)
        want = expected(acc, scale, fbias, m0, sh, out_kind, mode, 3, 3, 255, axis=1)
        # chunks of one output row (Cortex-M), of 700 bytes of columns (a few rows, the last
        # one shorter), of 256 KiB (x86), and the direct path where the scratch has room: the
        # scratch the compiler plans (mlcc/ops/quant.py), not a byte more (a guard after it)
        for chunk, direct in ((0, False), (700, False), (262144, True)):
            opts = {"chunk_bytes": chunk, "threads": True, "int8_direct": direct}
            params["chunk_rows"], params["direct"], size = _conv_scratch(
                SimpleNamespace(options=opts), params, k4, ph, pw)
            p = ffi.new("mlcc_qconv2d_params *", params)
            scratch = np.full(size + 256, 0xA5, np.uint8)
            y[...] = 0
            on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_conv2d(
                p, ptr(ffi, x), ptr(ffi, wp), ptr(ffi, eff), ptr(ffi, scale), ptr(ffi, fbias),
                ptr(ffi, m0), ptr(ffi, sh), ptr(ffi, y), ptr(ffi, scratch), pool))
            assert (scratch[size:] == 0xA5).all(), (chunk, direct)
            check(flavour, y, want, out_kind)
        return
    want = expected(acc, scale, fbias, m0, sh, out_kind, mode, 3, 3, 255, axis=1)
    check(flavour, y, want, out_kind)


# y over x, as the compiler plans it for same-size convolutions (out_channels <= in_channels,
# stride 1, one group): (channels in, out, h, w, kernel, pad, dilation)
IN_PLACE = [(5, 5, 7, 9, (3, 3), (1, 1), (1, 1)), (6, 4, 11, 5, (5, 5), (2, 2), (1, 1)),
            (4, 4, 9, 13, (3, 3), (2, 2), (2, 2)), (8, 3, 6, 6, (1, 1), (0, 0), (1, 1)),
            (3, 3, 17, 4, (3, 1), (1, 0), (1, 1)), (16, 16, 32, 32, (3, 3), (1, 1), (1, 1))]


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("case", IN_PLACE)
def test_qconv_in_place_matches_numpy(lib, case, mode):
    """The output written over the input, in chunks of 1, a few and all rows, with and
    without a pool (the kernel then runs the chunks in order itself): the same bytes as
    into a separate buffer."""
    ffi, L, flavour, pools = lib
    c, m, h, wd, k, pad, dil = case
    rng = np.random.default_rng(sum(case[:4]))
    zp = 37
    x = rng.integers(0, 256, (1, c, h, wd)).astype(np.uint8)
    w = rng.integers(-127, 128, (m, c, *k)).astype(np.int8)
    bias, scale, fbias, m0, sh = channel_consts(rng, m, mode)
    acc, oh, ow = _conv_reference(x, w, bias, zp, (1, 1), pad, dil, 1)
    assert (oh, ow) == (h, wd)
    want = expected(acc, scale, fbias, m0, sh, 0, mode, 3, 3, 255, axis=1)
    kk = w[0].size
    k4 = -(-kk // 4)
    wp = np.zeros((m, 4 * k4), np.int8)
    wp[:, :kk] = w.reshape(m, -1)
    eff = (bias - zp * w.reshape(m, -1).astype(np.int32).sum(axis=1)).astype(np.int32)
    params = {"batch": 1, "in_channels": c, "in_h": h, "in_w": wd, "out_channels": m,
              "out_h": oh, "out_w": ow, "kernel_h": k[0], "kernel_w": k[1], "stride_h": 1,
              "stride_w": 1, "dilation_h": dil[0], "dilation_w": dil[1], "pad_top": pad[0],
              "pad_left": pad[1], "groups": 1, "x_zero_point": zp,
              "rq": requant(ffi, 0, mode, 3, 3, 255)}
    ph, pw = oh + (k[0] - 1) * dil[0], ow + (k[1] - 1) * dil[1]
    for chunk, direct in ((0, False), (100, False), (262144, False), (262144, True)):
        opts = {"chunk_bytes": chunk, "threads": True, "int8_direct": direct}
        params["chunk_rows"], params["direct"], size = _conv_scratch(
            SimpleNamespace(options=opts), params, k4, ph, pw)
        p = ffi.new("mlcc_qconv2d_params *", params)
        scratch = np.zeros(size, np.uint8)
        for pool in [ffi.NULL, *pools.values()]:
            buf = x.copy()
            L.mlcc_u8_conv2d(p, ptr(ffi, buf), ptr(ffi, wp), ptr(ffi, eff), ptr(ffi, scale),
                             ptr(ffi, fbias), ptr(ffi, m0), ptr(ffi, sh), ptr(ffi, buf),
                             ptr(ffi, scratch), pool)
            got = buf.ravel()[:m * oh * ow].reshape(1, m, oh, ow)
            check(flavour, got, want, 0)


@pytest.mark.parametrize("m,n,k4", [(1, 1, 1), (3, 15, 2), (4, 16, 3), (5, 17, 1),
                                    (8, 31, 7), (7, 33, 5), (13, 48, 2)])
@pytest.mark.parametrize("a_signed", [0, 1])
@pytest.mark.parametrize("out_kind,channel_is_row", [(1, 1), (0, 1), (0, 0)])
def test_vector_qgemm_matches_portable_twin(lib, m, n, k4, a_signed, out_kind, channel_is_row):
    """Float outputs (exact: |acc| < 2^24) and uint8 codes through the vector path's own
    requantizing epilogue, per row (conv) and per column (Gemm)."""
    ffi, L, flavour, pools = lib
    if flavour == "native" and not _native_has_vnni():
        pytest.skip("this CPU has no AVX512-VNNI: both names run the portable code")
    rng = np.random.default_rng(m * 100 + n + k4)
    a = rng.integers(-128 if a_signed else 0, 128 if a_signed else 256, (m, 4 * k4 + 3))
    a = a.astype(np.int8 if a_signed else np.uint8)
    b = rng.integers(0 if a_signed else -128, 256 if a_signed else 128, (k4, n, 4))
    b = b.astype(np.uint8 if a_signed else np.int8)
    bias = rng.integers(-100000, 100000, max(m, n)).astype(np.int32)
    if out_kind == 1:
        scale = np.ones(max(m, n), np.float32)
    else:       # codes spread over [0, 255], clamped at both ends, halves to round
        scale = rng.uniform(2e-4, 2e-3, max(m, n)).astype(np.float32)
        scale[::3] = 0.5
    fbias = np.zeros(max(m, n), np.float32)
    d = ffi.new("mlcc_qgemm_desc *", {"m": m, "n": n, "k4": k4, "lda": 4 * k4 + 3, "ldy": n,
                                      "ldb": n,
                                      "channel_is_row": channel_is_row, "a_signed": a_signed})
    rq = ffi.new("mlcc_requant *", requant(ffi, out_kind, 0, 0 if out_kind else 131, 2, 250))
    ch = ffi.new("mlcc_qchannels *", {"bias": ffi.cast("int32_t *", bias.ctypes.data),
                                      "scale": ffi.cast("float *", scale.ctypes.data),
                                      "fbias": ffi.cast("float *", fbias.ctypes.data)})
    dtype = np.float32 if out_kind else np.uint8
    y1 = np.zeros((m, n), dtype)
    y2 = np.ones((m, n), dtype)
    L.mlcc_u8s8_gemm(d, ptr(ffi, a), ptr(ffi, b), rq, ch, ptr(ffi, y1))
    L.mlcc_u8s8_gemm__portable(d, ptr(ffi, a), ptr(ffi, b), rq, ch, ptr(ffi, y2))
    np.testing.assert_array_equal(y1, y2)
    acc = (a[:, :4 * k4].astype(np.int64) @ b.transpose(0, 2, 1).reshape(4 * k4, n)
           .astype(np.int64))
    if out_kind == 1:
        np.testing.assert_array_equal(y1, (acc + bias[:m, None]).astype(np.float32))
    else:
        axis = 0 if channel_is_row else 1
        ch_bias = bias[:m, None] if channel_is_row else bias[None, :n]
        want = expected(acc + ch_bias, scale[:(m if channel_is_row else n)], None, None, None,
                        0, 0, 131, 2, 250, axis)
        np.testing.assert_array_equal(y1, want)


def test_lut_matches_numpy(lib):
    """mlcc_u8_lut: table[x] for every code, at a length that is no vector multiple; the
    table of an activation is quantize(act(dequantize(code))) (scheme.activation_table)."""
    ffi, L, _, pools = lib
    rng = np.random.default_rng(5)
    qx, qy = QParams(0.061, 140), QParams(0.024, 12)
    table = activation_table(("SILU", 1.0, 0.0), qx, qy)
    real = (np.arange(256) - 140) * np.float32(0.061)
    np.testing.assert_array_equal(
        table, np.clip(np.rint(real / (1 + np.exp(-real)) / np.float32(0.024)) + 12, 0, 255))
    x = np.concatenate([np.arange(256), rng.integers(0, 256, 1000)]).astype(np.uint8)
    y = np.zeros(x.size, np.uint8)
    p = ffi.new("mlcc_lut_params *", {"count": x.size})
    on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_lut(p, ptr(ffi, x), ptr(ffi, table),
                                                            ptr(ffi, y), pool))
    np.testing.assert_array_equal(y, table[x])


def test_quantize_dequantize_match_numpy(lib):
    ffi, L, _, pools = lib
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 3, 1001), np.arange(-20, 20) * 0.25,
                        [1e9, -1e9, np.nan]]).astype(np.float32)
    qp = QParams(0.5, 11)
    p = ffi.new("mlcc_quantize_params *", {"count": x.size, "scale": 0.5, "zero_point": 11})
    y = np.zeros(x.size, np.uint8)
    on_every_pool(ffi, pools, y, lambda pool: L.mlcc_f32_quantize(p, ptr(ffi, x), ptr(ffi, y),
                                                                  pool))
    finite = np.isfinite(x)
    np.testing.assert_array_equal(y[finite], quantize_linear(x[finite], qp))
    assert y[-1] == 0                                      # NaN -> the lowest code
    back = np.zeros(x.size, np.float32)
    L.mlcc_u8_dequantize(p, ptr(ffi, y), ptr(ffi, back))
    np.testing.assert_array_equal(back, (y.astype(np.int32) - 11).astype(np.float32) * 0.5)


def _qadd_model(a, b, sa, za, sb, zb, sy, zy, mode):
    if mode == 0:
        ma, mb = float(np.float32(sa / sy)), float(np.float32(sb / sy))
        f = (a.astype(np.float64) - za) * ma + (b.astype(np.float64) - zb) * mb
        return (np.clip(np.rint(np.clip(f, -zy, 255 - zy)) + zy, 0, 255)).astype(np.uint8)
    am, ash, bm, bsh, om, osh = add_fixed_multipliers(sa, sb, sy)
    xa = multiply_by_quantized_multiplier((a.astype(np.int64) - za) << 20, np.int64(am), ash)
    xb = multiply_by_quantized_multiplier((b.astype(np.int64) - zb) << 20, np.int64(bm), bsh)
    out = multiply_by_quantized_multiplier(xa + xb, np.int64(om), osh) + zy
    return np.clip(out, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("mode", [0, 1])
def test_qadd_and_requantize_match_numpy(lib, mode):
    """Add, Sub (TFLite's fixed mode) and requantize against numpy, the same bytes on every
    pool, and Add in place (the output over its first input, as the memory plan allows)."""
    ffi, L, _, pools = lib
    rng = np.random.default_rng(mode)
    a = rng.integers(0, 256, 997).astype(np.uint8)
    b = rng.integers(0, 256, 997).astype(np.uint8)
    sa, za, sb, zb, sy, zy = 0.02, 100, 0.05, 3, 0.06, 90
    am, ash, bm, bsh, om, osh = add_fixed_multipliers(sa, sb, sy)
    p = ffi.new("mlcc_qadd_params *", {
        "count": a.size, "a_zero_point": za, "b_zero_point": zb,
        "a_mult_f": float(np.float32(sa / sy)), "b_mult_f": float(np.float32(sb / sy)), "a_mult": am, "a_shift": ash, "b_mult": bm, "b_shift": bsh,
        "out_mult": om, "out_shift": osh, "rq": requant(ffi, 0, mode, zy)})
    y = np.zeros(a.size, np.uint8)
    on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_add(p, ptr(ffi, a), ptr(ffi, b),
                                                            ptr(ffi, y), pool))
    np.testing.assert_array_equal(y, _qadd_model(a, b, sa, za, sb, zb, sy, zy, mode))
    for pool in pools.values():
        over = a.copy()
        L.mlcc_u8_add(p, ptr(ffi, over), ptr(ffi, b), ptr(ffi, over), pool)
        np.testing.assert_array_equal(over, y)
    if mode == 1:
        on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_sub(p, ptr(ffi, a), ptr(ffi, b),
                                                                ptr(ffi, y), pool))
        xa = multiply_by_quantized_multiplier((a.astype(np.int64) - za) << 20, np.int64(am), ash)
        xb = multiply_by_quantized_multiplier((b.astype(np.int64) - zb) << 20, np.int64(bm), bsh)
        want = multiply_by_quantized_multiplier(xa - xb, np.int64(om), osh) + zy
        np.testing.assert_array_equal(y, np.clip(want, 0, 255).astype(np.uint8))
    # requantize: u8 at (0.02, 100) -> (0.03, 20)
    mf = np.float32(np.float32(0.02) / np.float32(0.03))
    m0, sh = fixed_multiplier(0.02 / 0.03)
    p = ffi.new("mlcc_qrequant_params *", {"count": a.size, "x_zero_point": 100,
                                           "mult_f": float(mf), "mult": m0, "shift": sh,
                                           "rq": requant(ffi, 0, mode, 20)})
    on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_requantize(p, ptr(ffi, a), ptr(ffi, y),
                                                                   pool))
    acc = a.astype(np.int32) - 100
    if mode == 0:
        want = requantize_float(acc, np.float32(mf), QParams(1.0, 20))
    else:
        want = requantize_fixed(acc, np.int64(m0), np.int64(sh), QParams(1.0, 20))
    np.testing.assert_array_equal(y, want)


def _fixed_cases():
    """(acc, mult, shift) triples for the fixed requantization: every right shift 1..31 (the
    one-sum form of qgemm.h's mlcc_mbqm_apply) with multipliers at both ends of [2^30, 2^31)
    and between, accumulators spread over the codes the output can hold, exact ties of the
    final rounding (mult = 2^30 makes the high multiply floor((acc + 1) / 2)) on both signs,
    values around 0 and the int32 extremes; then shift 0 (the high multiply alone), shifts 1
    and 2 (left) and mult 0, which take mlcc_mbqm."""
    rng = np.random.default_rng(22)
    out = []
    for e in range(1, 32):
        for mult in (1 << 30, (1 << 31) - 1, int(rng.integers(1 << 30, 1 << 31))):
            span = min(2**31 - 1, int(130 * 2.0 ** (31 + e) / mult))
            acc = rng.integers(-span, span, 400, endpoint=True)
            q = np.arange(-130, 131, dtype=np.int64)
            ties = 2 * (q * (1 << e) + (1 << (e - 1)))        # s = q 2^e + 2^(e-1)
            ties = ties[(ties > -2**31) & (ties < 2**31)]
            edge = np.array([0, 1, -1, 2, -2, 2**31 - 1, -2**31, span, -span], np.int64)
            acc = np.concatenate([acc, ties, ties - 1, edge]).astype(np.int64)
            out.append((acc, mult, -e))
    # (results within +-2^30: the zero point is added in int32, as TFLite does)
    for sh, mult in ((0, 1 << 30), (0, (1 << 31) - 1), (1, (1 << 31) - 1), (2, 1 << 30),
                     (-3, 0)):
        span = 2**31 if mult == 0 else 2**29 >> max(sh, 0)
        out.append((rng.integers(-span, span, 600).astype(np.int64), mult, sh))
    return out


def test_fixed_requantization_exact_on_ties_and_extremes(lib):
    """mlcc_requant_run's fixed mode (one 64-bit sum, qgemm.h) against the numpy model of
    TFLite's MultiplyByQuantizedMultiplier, zero point 128 so that codes -128..127 show."""
    ffi, L, _, _ = lib
    rq = ffi.new("mlcc_requant *", requant(ffi, 0, 1, 128))
    for acc, mult, sh in _fixed_cases():
        m0, shift = np.array([mult], np.int32), np.array([sh], np.int32)
        bias = np.zeros(1, np.int32)
        ch = ffi.new("mlcc_qchannels *", {"bias": ptr(ffi, bias), "mult": ptr(ffi, m0),
                                          "shift": ptr(ffi, shift)})
        a32 = acc.astype(np.int32)
        y = np.zeros(a32.size, np.uint8)
        L.mlcc_requant_run(rq, ch, 0, ptr(ffi, a32), a32.size, ptr(ffi, y), 0)
        want = requantize_fixed(a32, np.int64(mult), np.int64(sh), QParams(1.0, 128), 0, 255)
        np.testing.assert_array_equal(y, want, err_msg=f"mult {mult} shift {sh}")


@pytest.mark.parametrize("n,c,h,w,kh,kw,s,pad", [
    (2, 3, 7, 9, 3, 2, 2, 1),
    (1, 37, 41, 43, 5, 5, 1, 2),     # YOLOv8n's SPPF window; enough taps for the pool
    # no padding, every window inside (the checks-free loop): as PP-OCR rec's last AvgPool
    # (one output row); windows that do not reach the last input row and column
    (1, 6, 3, 81, 3, 3, 3, 0),
    (2, 3, 8, 11, 2, 3, 2, 0),
    (1, 4, 9, 10, 2, 2, 2, 0),
    (1, 2, 3, 2100, 2, 3, 1, 0),     # rows past the 1024 column sums of one chunk
])
def test_pools_match_numpy(lib, n, c, h, w, kh, kw, s, pad):
    """Max and average pooling against numpy, without a pool and on every pool (large ones
    split by planes): the same bytes."""
    ffi, L, _, pools = lib
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (n, c, h, w)).astype(np.uint8)
    oh, ow = (h + 2 * pad - kh) // s + 1, (w + 2 * pad - kw) // s + 1
    p = ffi.new("mlcc_qpool2d_params *", {
        "planes": n * c, "in_h": h, "in_w": w, "out_h": oh, "out_w": ow, "kernel_h": kh,
        "kernel_w": kw, "stride_h": s, "stride_w": s, "dilation_h": 1, "dilation_w": 1,
        "pad_top": pad, "pad_left": pad, "pad_value": 0})
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-1)
    want_max = np.zeros((n, c, oh, ow), np.int64)
    want_avg = np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s:i * s + kh, j * s:j * s + kw].reshape(n, c, -1)
            valid = win >= 0
            want_max[:, :, i, j] = win.max(axis=2)
            total, count = np.where(valid, win, 0).sum(axis=2), valid.sum(axis=2)
            want_avg[:, :, i, j] = (total + count // 2) // count
    for pool in [ffi.NULL, *pools.values()]:
        ymax = np.zeros((n, c, oh, ow), np.uint8)
        yavg = np.zeros((n, c, oh, ow), np.uint8)
        L.mlcc_u8_maxpool2d(p, ptr(ffi, x), ptr(ffi, ymax), pool)
        L.mlcc_u8_avgpool2d(p, ptr(ffi, x), ptr(ffi, yavg), pool)
        np.testing.assert_array_equal(ymax, want_max)
        np.testing.assert_array_equal(yavg, want_avg)


@pytest.mark.parametrize("h,w", [(1, 1), (7, 9), (160, 160), (300, 257)])
def test_global_avgpool_matches_numpy(lib, h, w):
    """The whole-plane window (contiguous sums; 300 x 257 spans two 2^16 blocks)."""
    ffi, L, _, _ = lib
    x = np.random.default_rng(h * w).integers(0, 256, (3, h, w)).astype(np.uint8)
    p = ffi.new("mlcc_qpool2d_params *", {
        "planes": 3, "in_h": h, "in_w": w, "out_h": 1, "out_w": 1, "kernel_h": h,
        "kernel_w": w, "stride_h": 1, "stride_w": 1, "dilation_h": 1, "dilation_w": 1,
        "pad_top": 0, "pad_left": 0, "pad_value": 0})
    y = np.zeros(3, np.uint8)
    L.mlcc_u8_avgpool2d(p, ptr(ffi, x), ptr(ffi, y), ffi.NULL)
    total, count = x.reshape(3, -1).astype(np.int64).sum(axis=1), h * w
    np.testing.assert_array_equal(y, (total + count // 2) // count)


@pytest.mark.parametrize("batch,channels,plane,s_batch,offset", [
    (1, 5, 21, 0, 0.0), (2, 3, 37, 0, 1.0), (2, 7, 1, 7, 1.0), (3, 1, 65, 1, 0.0)])
def test_channel_scale_matches_numpy(lib, batch, channels, plane, s_batch, offset):
    """mlcc_u8_channel_scale (squeeze-excitation x * (s + offset) on codes) bit for bit against
    its float32 model, with negative and large scales (clamped both ways), clamp [3, 250];
    the same bytes on every pool (split by planes)."""
    ffi, L, _, pools = lib
    rng = np.random.default_rng(batch * 100 + channels * 10 + plane)
    x = rng.integers(0, 256, (batch, channels, plane)).astype(np.uint8)
    s = rng.uniform(-1.5, 3.0, (batch if s_batch else 1, channels)).astype(np.float32)
    zx, zy, mf = 131, 17, np.float32(0.8137)
    p = ffi.new("mlcc_qchannel_scale_params *", {
        "batch": batch, "channels": channels, "plane": plane, "s_batch": s_batch,
        "x_zero_point": zx, "offset": offset, "mult_f": float(mf),
        "rq": requant(ffi, 0, 0, zy, 3, 250)})
    y = np.zeros_like(x)
    on_every_pool(ffi, pools, y, lambda pool: L.mlcc_u8_channel_scale(p, ptr(ffi, x),
                                                                      ptr(ffi, s), ptr(ffi, y),
                                                                      pool))
    m = ((s + np.float32(offset)) * mf).astype(np.float32)
    m = np.broadcast_to(m, (batch, channels))[:, :, None]
    f = (x.astype(np.int32) - zx).astype(np.float32) * m
    f = np.clip(f, np.float32(3 - zy), np.float32(250 - zy))
    want = (np.rint(f).astype(np.int32) + zy).astype(np.uint8)
    np.testing.assert_array_equal(y, want)
