"""Fast kernels against their portable twins, at tile edges (XNNPACK's habit; docs/style.md).

The packed convolution (weights packed by mlcc.ops.gemm.pack_a, im2col gathered block by block
into the micro-kernel's panels) is compared with the reference im2col + GEMM convolution of the
same runtime, built from the same sources, for output channels around the micro-kernel's rows
(MLCC_GEMM_MR), output positions around its columns (MLCC_GEMM_NR: 32 with AVX-512, 4 or 8
elsewhere) and the column block, and depths across a k block (MLCC_GEMM_KC = 256). The vector
depthwise convolution is compared with the direct scalar one for row lengths around one and two
vectors (4 to 32 lanes), strides, dilations and asymmetric padding. Each target's
flags (x86: SSE2 without FMA, x86-native: AVX-512 with FMA) build one library; a third is the
x86 build with the wasm target's own register tile (gemm_tile: 4 rows x 2 vectors, each 8-row A
panel read as two halves), the C that model.wasm runs, compiled natively, and x86's with
MLCC_NO_VECTORS a fourth (the scalar fallback). The implicit GEMM convolution must equal the
packed one bit for bit (same sums in the same order), on 1, 2, 3 and 5 threads, and the packed
convolution with a fused residual must equal the packed one, then the Add, then the activation."""

import numpy as np
import pytest

from mlcc.ops.conv_kernels import (CONVT_CP, DW_SLICES, convt_plan, dw_scratch_floats,
                                   im2col_table, implicit_cols_offsets, implicit_offsets,
                                   implicit_plan)
from mlcc.ops.gemm import GEMM_MR, pack_a
from mlcc.targets import load_target
from util import build_kernels, cpu_has, kernel_cdef


CDEF = kernel_cdef("conv.h", "depthwise.h", "gemm.h")


@pytest.fixture(scope="module", params=["x86", "x86-native", "x86+wasm-tile", "scalar"])
def kernels(request, tmp_path_factory):
    """The kernels built with each target's flags; "scalar": x86's with MLCC_NO_VECTORS, the
    portable fallback of compilers without vector extensions."""
    cffi = pytest.importorskip("cffi")
    name, _, tile_of = request.param.partition("+")
    defines = []
    if tile_of:
        defines = load_target(tile_of.removesuffix("-tile")).tile_defines()
        assert defines, f"{tile_of}: the target no longer sets gemm_tile; drop this build"
    lib_path = build_kernels(tmp_path_factory.mktemp(request.param) / "libkernels.so", name,
                             ["kernels/conv.c", "kernels/depthwise.c", "kernels/gemm.c",
                              "src/mlcc_threadpool.c", "src/mlcc_runtime.c"], defines)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    return ffi, ffi.dlopen(str(lib_path))


def _conv(ffi, lib, x, w, bias, *, stride, pad, groups, act, block_cols, pool=None):
    n, c, ih, iw = x.shape
    m, _, kh, kw = w.shape
    oh, ow = (ih + 2 * pad - kh) // stride + 1, (iw + 2 * pad - kw) // stride + 1
    conv = dict(batch=n, in_channels=c, in_h=ih, in_w=iw, out_channels=m, out_h=oh, out_w=ow,
                kernel_h=kh, kernel_w=kw, stride_h=stride, stride_w=stride, dilation_h=1,
                dilation_w=1, pad_top=pad, pad_left=pad, groups=groups,
                act={"kind": act, "alpha": 1.0, "beta": 0.0})
    kdim = c // groups * kh * kw

    def buf(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    ref = np.zeros((n, m, oh, ow), np.float32)
    scratch = np.zeros(kdim * oh * ow + 1, np.float32)
    lib.mlcc_f32_conv2d(ffi.new("mlcc_conv2d_params *", conv), buf(x), buf(w), buf(bias),
                        buf(ref), buf(scratch))
    packed = pack_a(w.reshape(groups, m // groups, kdim))
    cols = min(block_cols, -(-oh * ow // 64) * 64)
    scratch = np.full((kdim + 1) * cols, np.nan, np.float32)   # stale data must never leak
    out = np.full((n, m, oh, ow), np.nan, np.float32)
    lib.mlcc_f32_conv2d__packed(ffi.new("mlcc_conv2d_packed_params *",
                                       {"conv": conv, "block_cols": block_cols}),
                               buf(x), buf(packed), buf(bias), buf(out), buf(scratch),
                               pool or ffi.NULL)
    return ref, out


@pytest.mark.parametrize("m", [1, GEMM_MR // 2, GEMM_MR // 2 + 1, GEMM_MR - 1, GEMM_MR,
                               GEMM_MR + 1, 2 * GEMM_MR + 5])
# (4, 4) and (6, 8): a last panel of exactly one vector (16 or 48 columns with AVX-512, 4 on
# NEON and wasm), which the half-width tile computes whole
@pytest.mark.parametrize("spatial", [(1, 1), (1, 31), (4, 4), (4, 8), (3, 11), (6, 8), (5, 13),
                                     (9, 15)])
def test_packed_conv_matches_reference_at_tile_edges(kernels, m, spatial):
    ffi, lib = kernels
    rng = np.random.default_rng(m * 100 + spatial[1])
    x = rng.standard_normal((1, 3, *spatial)).astype(np.float32)
    w = rng.standard_normal((m, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    act = {1: 0, GEMM_MR - 1: 1, GEMM_MR: 6, GEMM_MR + 1: 8}.get(m, 7)  # none relu hswish silu tanh
    ref, out = _conv(ffi, lib, x, w, b, stride=1, pad=1, groups=1, act=act, block_cols=64)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c,k,stride,pad,groups", [
    (257, 1, 1, 0, 1),       # depth 257: two k blocks, the second one deep
    (29, 3, 2, 1, 1),        # depth 261, strided, padded
    (6, 5, 1, 2, 2),         # grouped
    (64, 3, 1, 0, 1),        # depth 576, no padding
])
def test_packed_conv_matches_reference_across_k_blocks(kernels, c, k, stride, pad, groups):
    ffi, lib = kernels
    rng = np.random.default_rng(c)
    x = rng.standard_normal((2, c, 13, 17)).astype(np.float32)
    w = rng.standard_normal((10, c // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    ref, out = _conv(ffi, lib, x, w, b, stride=stride, pad=pad, groups=groups, act=0,
                     block_cols=64)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


DEPTHWISE_IN_H = 6


def _depthwise_out_size(size, k, stride, dil, pad):
    return (size + 2 * pad - (dil * (k - 1) + 1)) // stride + 1


# Every width with every window, except where the window does not fit the padded input (such a
# convolution is refused at compile time, so the kernel never sees one).
@pytest.mark.parametrize("width,k,stride,dil,pads", [
    (width, k, stride, dil, pads)
    for width in [1, 7, 15, 16, 17, 31, 32, 33, 47]
    for k, stride, dil, pads in [
        (3, 1, 1, (1, 1)), (3, 2, 1, (1, 1)), (5, 2, 1, (2, 2)), (3, 1, 2, (2, 2)),
        (3, 3, 1, (0, 1)), (2, 1, 1, (0, 1)), (3, 2, 1, (0, 0)), (4, 2, 1, (2, 1))]
    if _depthwise_out_size(width, k, stride, dil, pads[1]) >= 1
    and _depthwise_out_size(DEPTHWISE_IN_H, k, stride, dil, pads[0]) >= 1])
def test_vector_depthwise_matches_reference(kernels, width, k, stride, dil, pads):
    ffi, lib = kernels
    rng = np.random.default_rng(width * 10 + k)
    c, ih = 3, DEPTHWISE_IN_H
    x = rng.standard_normal((2, c, ih, width)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    top, left = pads
    oh = _depthwise_out_size(ih, k, stride, dil, top)
    ow = _depthwise_out_size(width, k, stride, dil, left)
    params = dict(
        batch=2, in_channels=c, in_h=ih, in_w=width, out_channels=c, out_h=oh, out_w=ow,
        kernel_h=k, kernel_w=k, stride_h=stride, stride_w=stride, dilation_h=dil,
        dilation_w=dil, pad_top=top, pad_left=left, groups=c,
        act={"kind": 2, "alpha": -0.5, "beta": 0.5})
    conv = ffi.new("mlcc_conv2d_params *", params)

    def buf(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    ref = np.zeros((2, c, oh, ow), np.float32)
    lib.mlcc_f32_conv2d__depthwise(conv, buf(x), buf(w), buf(b), buf(ref))
    scratch = np.full(DW_SLICES * dw_scratch_floats(params), np.nan, np.float32)
    out = np.full((2, c, oh, ow), np.nan, np.float32)
    lib.mlcc_f32_conv2d__depthwise_vec(conv, buf(x), buf(w), buf(b), buf(out), buf(scratch),
                                      ffi.NULL)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ih,width,top,left,k", [
    (14, 14, 1, 1, 3),    # MobileNetV2's 14 -> 7: rows of 7 per phase, one vector each
    (9, 70, 1, 1, 3),     # 35 and 35 per phase: whole vectors, then a partial one
    (11, 33, 0, 0, 3),    # no padding: 17 even, 16 odd columns
    (8, 47, 2, 1, 5),     # 5x5, the even phase one column longer
    (3, 5, 1, 1, 3),      # tiny: the reads would pass the input, scalar
])
def test_vector_depthwise_stride2_rows(kernels, ih, width, top, left, k):
    """The stride-2 fill's whole-vector deinterleave (dw_deinterleave_vec): rows of odd lengths
    and heights, the zeros its last vector writes past a row, the limits at the end of the
    input and of each sub-plane; three channels reuse one padded buffer."""
    ffi, lib = kernels
    rng = np.random.default_rng(ih * 100 + width)
    c = 3
    x = rng.standard_normal((1, c, ih, width)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    oh = (ih + 2 * top - k) // 2 + 1
    ow = (width + 2 * left - k) // 2 + 1
    params = dict(
        batch=1, in_channels=c, in_h=ih, in_w=width, out_channels=c, out_h=oh, out_w=ow,
        kernel_h=k, kernel_w=k, stride_h=2, stride_w=2, dilation_h=1, dilation_w=1,
        pad_top=top, pad_left=left, groups=c, act={"kind": 0, "alpha": 0.0, "beta": 0.0})
    conv = ffi.new("mlcc_conv2d_params *", params)

    def buf(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    ref = np.zeros((1, c, oh, ow), np.float32)
    lib.mlcc_f32_conv2d__depthwise(conv, buf(x), buf(w), buf(b), buf(ref))
    scratch = np.full(DW_SLICES * dw_scratch_floats(params), np.nan, np.float32)
    out = np.full((1, c, oh, ow), np.nan, np.float32)
    lib.mlcc_f32_conv2d__depthwise_vec(conv, buf(x), buf(w), buf(b), buf(out), buf(scratch),
                                      ffi.NULL)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def pools(kernels):
    ffi, lib = kernels
    made = {}
    for n in (2, 3, 5):
        p = ffi.new("mlcc_threadpool **")
        assert lib.mlcc_threadpool_create(p, n) == 0
        made[n] = p[0]
    yield made
    for p in made.values():
        lib.mlcc_threadpool_destroy(p)


@pytest.mark.parametrize("c,m,spatial,stride,block_cols", [
    (3, 21, (9, 15), 1, 64),      # 135 positions: 3 blocks, the last one partial
    (16, 70, (7, 7), 1, 64),      # few panels, many rows: split by rows
    (29, 9, (13, 17), 2, 128),    # strided, one block
    (300, 40, (5, 6), 1, 64),     # two k blocks
    (64, 200, (13, 13), 1, 128),  # blocks of 4 and 2 panels: by rows on 2 threads, panels on 3
])
def test_packed_conv_is_bit_identical_across_thread_counts(kernels, pools, c, m, spatial,
                                                          stride, block_cols):
    """Both static partitions (by panels, by weight rows) compute every output with the same
    tile code and k order: 1, 2, 3 and 5 threads give the same bits, as the reference within
    rounding."""
    ffi, lib = kernels
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((2, c, *spatial)).astype(np.float32)
    w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    kw = dict(stride=stride, pad=1, groups=1, act=8, block_cols=block_cols)
    ref, one = _conv(ffi, lib, x, w, b, **kw)
    np.testing.assert_allclose(one, ref, rtol=1e-4, atol=1e-4)
    for n, pool in pools.items():
        _, out = _conv(ffi, lib, x, w, b, pool=pool, **kw)
        assert np.array_equal(out, one), f"{n} threads"


@pytest.mark.parametrize("ih,iw,k,dil", [
    (7, 7, 3, 1),      # MobileNetV2's 7 x 7: 4 vectors of 16, the last overlapping
    (14, 14, 3, 1),    # 13 vectors: three groups of four chains, one more
    (4, 4, 3, 1),      # 16 values: one vector
    (5, 3, 3, 1),      # 15 values: under one AVX-512 vector (the padded layout)
    (9, 11, 5, 1),     # 5x5, pad 2
    (6, 7, 3, 2),      # dilation 2, pad 2
    (13, 3, 3, 1),     # 3 columns: every lane masked by a column
    (3, 16, 5, 1),     # the widest map taking it, 5x5
    (16, 17, 3, 1),    # too wide: the padded layout
])
def test_depthwise_small_same_planes(request, kernels, pools, ih, iw, k, dil):
    """Stride-1 "same" depthwise convolutions of small planes (depthwise.c dw_small_plane: the plane
    flat, lanes masked by column) give the bits of the padded layout, here run on the input
    padded by hand (a valid convolution, which cannot take the flat path), on 1, 2, 3 and 5
    threads. Where gcc contracts the taps into FMAs with vectors of select()ed loads (x86-native
    on AVX2; AVX-512 masks the loads instead), the two paths contract different products and
    agree to rounding only; each still gives the same bits on every pool."""
    ffi, lib = kernels
    rng = np.random.default_rng(ih * 100 + iw * 10 + k)
    c, pad = 7, dil * (k - 1) // 2
    x = rng.standard_normal((2, c, ih, iw)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    xp = np.ascontiguousarray(np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))))

    def params(h, wd, p):
        return dict(batch=2, in_channels=c, in_h=h, in_w=wd, out_channels=c, out_h=ih,
                    out_w=iw, kernel_h=k, kernel_w=k, stride_h=1, stride_w=1, dilation_h=dil,
                    dilation_w=dil, pad_top=p, pad_left=p, groups=c,
                    act={"kind": 2, "alpha": -0.5, "beta": 0.5})

    def buf(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    def run(inp, prm, pool):
        scratch = np.full(DW_SLICES * dw_scratch_floats(prm), np.nan, np.float32)
        out = np.full((2, c, ih, iw), np.nan, np.float32)
        lib.mlcc_f32_conv2d__depthwise_vec(ffi.new("mlcc_conv2d_params *", prm), buf(inp),
                                          buf(w), buf(b), buf(out), buf(scratch), pool)
        return out

    want = run(xp, params(ih + 2 * pad, iw + 2 * pad, 0), ffi.NULL)
    ref = np.zeros_like(want)
    lib.mlcc_f32_conv2d__depthwise(ffi.new("mlcc_conv2d_params *", params(ih, iw, pad)),
                                  buf(x), buf(w), buf(b), buf(ref))
    np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-5)
    contracted = request.node.callspec.params["kernels"] == "x86-native" and \
        cpu_has("fma") and not cpu_has("avx512f")
    if contracted:
        flat = run(x, params(ih, iw, pad), ffi.NULL)
        np.testing.assert_allclose(flat, want, rtol=1e-5, atol=1e-5)
        want = flat
    for n, pool in [(1, ffi.NULL)] + list(pools.items()):
        assert np.array_equal(run(x, params(ih, iw, pad), pool), want), f"{n} threads"


@pytest.mark.parametrize("channels", [1, 5, 13])
def test_depthwise_is_bit_identical_across_thread_counts(kernels, pools, channels):
    ffi, lib = kernels
    rng = np.random.default_rng(channels)
    ih, iw, k, stride = 11, 19, 3, 2
    x = rng.standard_normal((2, channels, ih, iw)).astype(np.float32)
    w = rng.standard_normal((channels, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    oh, ow = (ih + 2 - k) // stride + 1, (iw + 2 - k) // stride + 1
    params = dict(
        batch=2, in_channels=channels, in_h=ih, in_w=iw, out_channels=channels, out_h=oh,
        out_w=ow, kernel_h=k, kernel_w=k, stride_h=stride, stride_w=stride, dilation_h=1,
        dilation_w=1, pad_top=1, pad_left=1, groups=channels,
        act={"kind": 1, "alpha": 0.0, "beta": 0.0})
    conv = ffi.new("mlcc_conv2d_params *", params)

    def buf(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    scratch = np.full(DW_SLICES * dw_scratch_floats(params), np.nan, np.float32)
    ref = np.zeros((2, channels, oh, ow), np.float32)
    lib.mlcc_f32_conv2d__depthwise(conv, buf(x), buf(w), buf(b), buf(ref))
    outs = []
    for pool in [ffi.NULL, *pools.values()]:
        out = np.full_like(ref, np.nan)
        lib.mlcc_f32_conv2d__depthwise_vec(conv, buf(x), buf(w), buf(b), buf(out),
                                          buf(scratch), pool)
        outs.append(out)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)
    for out in outs[1:]:
        assert np.array_equal(out, outs[0])


@pytest.mark.parametrize("c,ih,iw,stride,pads,act", [
    # output rows of at most 8, 3/4 of the lanes filled: channels in lanes (dw_cil)
    (16, 7, 7, 1, (1, 1), (2, 0.0, 6.0)),     # MobileNetV2's 7 x 7: 49 outputs, the last 1
    (12, 13, 8, 1, (1, 1), (1, 0.0, 0.0)),    # 12 of 16 lanes, chunks across rows of 8
    (24, 14, 14, 2, (1, 1), (2, -0.5, 0.5)),  # 14 -> 7, a tail block of 8
    (13, 5, 3, 2, (1, 1), (0, 0.0, 0.0)),     # 6 outputs: fewer than 16
    (16, 11, 7, 1, (0, 0), (3, 0.1, 0.0)),    # valid, leaky: the generic activation
    (28, 9, 15, 2, (2, 0), (1, 0.0, 0.0)),    # pad 2 on top, none on the left
    (16, 1, 1, 1, (1, 1), (2, 0.0, 6.0)),     # one position
    (320, 14, 14, 2, (1, 1), (2, 0.0, 6.0)),  # on threads: units of whole blocks
    # the other layers (wide rows, few channels): rows read in place (dw_direct)
    (3, 9, 9, 1, (1, 1), (2, 0.0, 6.0)),      # few channels, one partial vector per row
    (5, 11, 37, 1, (1, 1), (6, 0.0, 0.0)),    # 37 columns, odd rows, hard swish (after the rows)
    (4, 8, 33, 1, (0, 0), (0, 0.0, 0.0)),     # valid: 31 outputs from rows of 33
    (3, 7, 20, 1, (2, 2), (2, -0.5, 0.5)),    # pad 2: outputs 22 wide, 2 columns of zeros
    (6, 13, 67, 2, (1, 1), (6, 0.0, 0.0)),    # stride 2, 34 outputs per row, odd rows, hard swish
    (2, 10, 64, 2, (0, 0), (3, 0.1, 0.0)),    # stride 2 valid, leaky
    (3, 9, 41, 2, (2, 1), (1, 0.0, 0.0)),     # pad 2 on top
    (96, 40, 40, 2, (1, 1), (2, 0.0, 6.0)),   # on threads
    (40, 36, 36, 1, (1, 1), (2, 0.0, 6.0)),   # on threads
    (40, 29, 31, 1, (0, 0), (3, 0.1, 0.0)),   # valid, leaky
    (12, 13, 17, 1, (1, 1), (1, 0.0, 0.0)),   # "same": one load per row and vector, shifts
    (8, 5, 3, 2, (1, 1), (0, 0.0, 0.0)),      # 2 outputs per row
    (20, 9, 33, 2, (2, 0), (1, 0.0, 0.0)),    # stride 2 without left padding: 4 loads
    (5, 6, 32, 1, (1, 1), (2, 0.0, 6.0)),     # rows of exactly 2 vectors
])
def test_depthwise_channels_in_lanes(kernels, pools, c, ih, iw, stride, pads, act):
    """AVX-512's 3 x 3 depthwise paths (the other builds take their usual ones): 16 channels
    at a time on narrow planes (depthwise.c dw_cil: partial channel blocks, outputs fewer than 16
    and across rows) and rows read in place (dw_direct: masked ends, stride 2's permutes, two
    output rows at a time with an odd last one), each activation, against the direct kernel,
    and the same bits on 1, 2, 3 and 5 threads (the larger shapes are over the threshold)."""
    ffi, lib = kernels
    rng = np.random.default_rng(c * 1000 + ih * 10 + iw)
    top, left = pads
    oh, ow = (ih + 2 * top - 3) // stride + 1, (iw + 2 * left - 3) // stride + 1
    x = rng.standard_normal((2, c, ih, iw)).astype(np.float32) * 3
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    params = dict(
        batch=2, in_channels=c, in_h=ih, in_w=iw, out_channels=c, out_h=oh, out_w=ow,
        kernel_h=3, kernel_w=3, stride_h=stride, stride_w=stride, dilation_h=1, dilation_w=1,
        pad_top=top, pad_left=left, groups=c,
        act={"kind": act[0], "alpha": act[1], "beta": act[2]})
    conv = ffi.new("mlcc_conv2d_params *", params)

    def buf(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    ref = np.zeros((2, c, oh, ow), np.float32)
    lib.mlcc_f32_conv2d__depthwise(conv, buf(x), buf(w), buf(b), buf(ref))
    outs = []
    for pool in [ffi.NULL, *pools.values()]:
        scratch = np.full(DW_SLICES * dw_scratch_floats(params), np.nan, np.float32)
        out = np.full((2, c, oh, ow), np.nan, np.float32)
        lib.mlcc_f32_conv2d__depthwise_vec(conv, buf(x), buf(w), buf(b), buf(out),
                                          buf(scratch), pool)
        outs.append(out)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)
    for out in outs[1:]:
        assert np.array_equal(out, outs[0])


@pytest.mark.parametrize("c,m,hw,k,stride,pad,groups", [
    (1, 16, (8, 8), 3, 1, 1, 1),      # the digits CNN's first layer
    (32, 64, (4, 4), 3, 1, 1, 1),     # 16 positions: half a 32-column panel
    (6, 10, (7, 5), 3, 2, 1, 2),      # strided, grouped, odd sizes
    (3, 8, (11, 13), 5, 1, 2, 1),     # 143 positions: three blocks of 64, the last partial
])
def test_table_gather_conv_matches_packed(kernels, pools, c, m, hw, k, stride, pad, groups):
    """The small-map convolution gathers im2col through a compile-time offset table: the
    same panels as pack_im2col, so the same bits, on 1 and 3 threads."""
    ffi, lib = kernels
    rng = np.random.default_rng(c * m)
    x = rng.standard_normal((2, c, *hw)).astype(np.float32)
    w = rng.standard_normal((m, c // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ref, out = _conv(ffi, lib, x, w, b, stride=stride, pad=pad, groups=groups, act=1,
                     block_cols=64)
    oh, ow = ref.shape[2:]
    table = im2col_table(c // groups, *hw, k, k, oh, ow, stride, stride, 1, 1, pad, pad)
    kdim = c // groups * k * k
    conv = dict(batch=2, in_channels=c, in_h=hw[0], in_w=hw[1], out_channels=m, out_h=oh,
                out_w=ow, kernel_h=k, kernel_w=k, stride_h=stride, stride_w=stride,
                dilation_h=1, dilation_w=1, pad_top=pad, pad_left=pad, groups=groups,
                act={"kind": 1, "alpha": 1.0, "beta": 0.0})
    packed = pack_a(w.reshape(groups, m // groups, kdim))
    cols = min(64, -(-oh * ow // 64) * 64)

    def buf(a, t="float *"):
        return ffi.cast(t, ffi.from_buffer(a))

    for pool in (ffi.NULL, pools[3]):
        scratch = np.full((kdim + 1) * cols, np.nan, np.float32)
        got = np.full_like(ref, np.nan)
        lib.mlcc_f32_conv2d__packed_table(
            ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": 64}), buf(x),
            buf(packed), buf(b), buf(table, "int32_t *"), buf(got), buf(scratch), pool)
        assert np.array_equal(got, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,m,hw,k,stride,dil,pads,groups,small_blocks", [
    (1, 16, (8, 8), 3, 1, 1, (1, 1, 1, 1), 1, False),     # the digits CNN's first layer
    (16, 32, (8, 8), 3, 1, 1, (1, 1, 1, 1), 1, False),    # its second: two whole panels (cols)
    (32, 64, (4, 4), 3, 1, 1, (1, 1, 1, 1), 1, False),    # its third: two k blocks, half a panel
    (7, 9, (5, 5), 3, 1, 1, (1, 1, 1, 1), 1, False),      # 25 columns (cols: partial panel)
    (3, 5, (6, 9), 2, 1, 1, (0, 1, 0, 0), 1, False),      # 2x2, rows narrower than the output
    (3, 7, (1, 33), 3, 1, 1, (1, 1, 1, 1), 1, False),     # one row of 33: 35 virtual columns
    (5, 9, (7, 31), 3, 1, 1, (1, 1, 1, 1), 1, True),      # rows of 33 virtual columns, 4 blocks
    (4, 1, (6, 30), 3, 1, 1, (1, 1, 1, 1), 1, False),     # wq 32: one panel per row (AVX-512)
    (2, 8, (5, 32), 3, 1, 1, (0, 0, 0, 0), 1, False),     # no padding: 30 of 32 columns kept
    (13, 17, (9, 11), 5, 1, 1, (2, 1, 0, 3), 1, False),   # 5x5, asymmetric pads
    (6, 10, (11, 12), 3, 1, 2, (2, 2, 2, 2), 2, False),   # dilation 2, two groups
    (29, 8, (7, 7), 3, 1, 1, (1, 1, 1, 1), 1, False),     # depth 261: two k blocks, tail of 5
    (60, 21, (13, 10), 3, 1, 1, (1, 1, 1, 1), 1, True),   # three k blocks, partial sums
    (3, 5, (4, 9), 1, 1, 1, (0, 0, 0, 0), 1, False),      # k = 1 here means a 1 x 3 kernel
    (3, 16, (33, 65), 3, 2, 1, (1, 1, 1, 1), 1, False),   # stride 2 (YOLOv8n's stem), odd sizes
    (3, 9, (23, 22), 7, 2, 1, (3, 3, 3, 3), 1, True),     # 7x7/2 (ResNet's stem)
    (31, 8, (10, 13), 3, 2, 1, (0, 1, 1, 0), 1, False),   # stride 2, two k blocks, asymmetric
    (31, 8, (97, 131), 3, 2, 1, (1, 1, 1, 1), 1, False),  # an input copy large enough to be
                                                          # split by channels between threads
    (4, 6, (14, 17), 3, 3, 2, (2, 1, 2, 0), 2, False),    # stride 3, dilation 2, groups
    # AVX-512: small maps as a transposed product (output channels along the vectors); the
    # depth-261, 540 and 279 cases above take it too
    (64, 37, (13, 13), 3, 1, 1, (1, 1, 1, 1), 1, False),  # SqueezeNet's 13 x 13; 32 + 5 channels
    (20, 16, (9, 9), 3, 1, 2, (2, 2, 2, 2), 1, False),    # dilation 2: 84 rows for 81 positions
    # channels along the vectors (implicit_t): 2 panels of 32 channels, the last partial; rows
    # of 19 in chunks of 7, 6, 6; rows of 70 (9 chunks) in blocks of 7 rows of partial sums
    (40, 37, (9, 19), 3, 1, 1, (1, 1, 1, 1), 1, False),
    (31, 33, (23, 70), 3, 2, 1, (1, 1, 1, 1), 1, False),
    # by output rows (implicit_rows): rows of 48 (a whole tile and a half one), 50 (a tile of
    # 18 columns), 24 channels (three 8-row tiles), 13 (a partial one)
    (3, 24, (20, 96), 3, 2, 1, (1, 1, 1, 1), 1, False),
    (3, 13, (9, 100), 3, 2, 1, (1, 0, 1, 1), 1, False),
    # a deeper 7x7/2 (depth 245, as ResNet's stem takes implicit_rows): 41 outputs (five
    # 8-row tiles and a partial one), rows of 38 (a tile, a half one)
    (5, 41, (37, 75), 7, 2, 1, (3, 3, 3, 3), 1, False),
])
def test_implicit_conv_matches_packed(kernels, pools, c, m, hw, k, stride, dil, pads, groups,
                                      small_blocks):
    """The implicit GEMM reads the padded input (split by stride phase) in place instead of
    gathering im2col panels: the same sums in the same order as the packed convolution (so the
    same bits) on 1, 2, 3 and 5 threads, and the reference within rounding; odd channels,
    widths around the panel (NR = 4 or 32), k blocks, pads, strides, dilation, groups."""
    ffi, lib = kernels
    kh, kw = (1, 3) if k == 1 else (k, k)   # k = 1: a 1-D kernel (height 1)
    rng = np.random.default_rng(c * m + k)
    x = rng.standard_normal((2, c, *hw)).astype(np.float32)
    w = rng.standard_normal((m, c // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    pt, pl, pb, pr = pads
    oh = (hw[0] + pt + pb - (kh - 1) * dil - 1) // stride + 1
    ow = (hw[1] + pl + pr - (kw - 1) * dil - 1) // stride + 1
    conv = dict(batch=2, in_channels=c, in_h=hw[0], in_w=hw[1], out_channels=m, out_h=oh,
                out_w=ow, kernel_h=kh, kernel_w=kw, stride_h=stride, stride_w=stride,
                dilation_h=dil, dilation_w=dil, pad_top=pt, pad_left=pl, groups=groups,
                act={"kind": 1, "alpha": 1.0, "beta": 0.0})
    cin_g, kdim = c // groups, c // groups * kh * kw

    def buf(a, t="float *"):
        return ffi.cast(t, ffi.from_buffer(a))

    # every array passed to C is bound to a name: buf() does not keep a temporary alive
    ref = np.zeros((2, m, oh, ow), np.float32)
    ref_scratch = np.zeros(kdim * oh * ow + 1, np.float32)
    lib.mlcc_f32_conv2d(ffi.new("mlcc_conv2d_params *", conv), buf(x), buf(w), buf(b),
                        buf(ref), buf(ref_scratch))
    packed = np.full((2, m, oh, ow), np.nan, np.float32)
    wk = pack_a(w.reshape(groups, m // groups, kdim))
    packed_scratch = np.zeros((kdim + 1) * 64, np.float32)
    lib.mlcc_f32_conv2d__packed(ffi.new("mlcc_conv2d_packed_params *",
                                       {"conv": conv, "block_cols": 64}),
                               buf(x), buf(wk), buf(b), buf(packed), buf(packed_scratch),
                               ffi.NULL)
    block, nbytes, hq, wq = implicit_plan(cin_g, m // groups, kh, kw, oh, ow, stride, stride,
                                          dil, dil, **({"part_bytes": 0} if small_blocks else {}))
    offsets = implicit_offsets(cin_g, kh, kw, stride, stride, dil, dil, hq, wq)
    params = ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": block})
    for pool in (ffi.NULL, *pools.values()):
        scratch = np.full(nbytes // 4, np.nan, np.float32)   # stale data must never leak
        got = np.full_like(ref, np.nan)
        lib.mlcc_f32_conv2d__implicit(params, buf(x), buf(wk), buf(b),
                                     buf(offsets, "int32_t *"), buf(got), buf(scratch), pool)
        assert np.array_equal(got, packed)
    if kdim <= 256:
        # the same tiled by output rows, one k block (mlcc_f32_conv2d__implicit_rows)
        for pool in (ffi.NULL, *pools.values()):
            scratch = np.full(nbytes // 4, np.nan, np.float32)
            got = np.full_like(ref, np.nan)
            lib.mlcc_f32_conv2d__implicit_rows(params, buf(x), buf(wk), buf(b),
                                              buf(offsets, "int32_t *"), buf(got), buf(scratch),
                                              pool)
            assert np.array_equal(got, packed), "implicit_rows"
    # the same sums with output channels along the vectors (mlcc_f32_conv2d__implicit_t)
    wt = pack_a(w.reshape(groups, m // groups, kdim), CONVT_CP)
    nbytes = convt_plan(cin_g, kh, kw, oh, ow, stride, stride, dil, dil)
    for pool in (ffi.NULL, *pools.values()):
        scratch = np.full(nbytes // 4, np.nan, np.float32)
        got = np.full_like(ref, np.nan)
        lib.mlcc_f32_conv2d__implicit_t(params, buf(x), buf(wt), buf(b),
                                       buf(offsets, "int32_t *"), buf(got), buf(scratch), pool)
        assert np.array_equal(got, packed)
    if stride == 1:
        # the same over kernel_w shifted copies of the input (no virtual columns); the
        # input sits inside a NaN-filled buffer: reads outside it must never leak
        block, nbytes, hp, _ = implicit_plan(cin_g, m // groups, kh, kw, oh, ow, 1, 1, dil,
                                             dil, cols=True,
                                             **({"part_bytes": 0} if small_blocks else {}))
        offsets = implicit_cols_offsets(cin_g, kh, kw, dil, hp, ow)
        params = ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": block})
        framed = np.full(x.size + 64, np.nan, np.float32)
        framed[32:32 + x.size] = x.reshape(-1)
        for pool in (ffi.NULL, *pools.values()):
            scratch = np.full(nbytes // 4, np.nan, np.float32)
            got = np.full_like(ref, np.nan)
            lib.mlcc_f32_conv2d__implicit_cols(params, buf(framed[32:]), buf(wk), buf(b),
                                              buf(offsets, "int32_t *"), buf(got),
                                              buf(scratch), pool)
            assert np.array_equal(got, packed)
    np.testing.assert_allclose(packed, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,m,hw", [
    (160, 96, (7, 7)),     # 49 positions: flat tiles of 9 and 10 positions across rows
    (300, 40, (7, 7)),     # two k blocks; 40 channels: a panel of 32, then a half one
    (17, 24, (3, 13)),     # 39 positions; 24 channels: one panel, three quarters used
    (5, 13, (1, 17)),      # 13 channels (a half panel), 17 positions
    (9, 57, (2, 9)),       # 18 positions: two tiles of 9
    (520, 48, (13, 13)),   # three k blocks, 169 positions in 15 tiles of 11-12; 32 + 16
    (7, 16, (3, 3)),       # 9 positions, one tile; 16 channels: one half panel
])
def test_small_map_1x1_conv_matches_implicit(kernels, pools, c, m, hw):
    """1x1 convolutions of small maps through the packed GEMM and through
    mlcc_f32_conv2d__implicit_t (output channels along the vectors, flat tiles of up to 12
    positions across rows, each over the whole depth) against the implicit GEMM, which sums as
    the packed GEMM does: the same bits on 1, 2, 3 and 5 threads, the reference within rounding."""
    ffi, lib = kernels
    rng = np.random.default_rng(c * m)
    x = rng.standard_normal((2, c, *hw)).astype(np.float32)
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    conv = dict(batch=2, in_channels=c, in_h=hw[0], in_w=hw[1], out_channels=m, out_h=hw[0],
                out_w=hw[1], kernel_h=1, kernel_w=1, stride_h=1, stride_w=1, dilation_h=1,
                dilation_w=1, pad_top=0, pad_left=0, groups=1,
                act={"kind": 2, "alpha": 0.0, "beta": 6.0})

    def buf(a, t="float *"):
        return ffi.cast(t, ffi.from_buffer(a))

    ref = np.zeros((2, m, *hw), np.float32)
    ref_scratch = np.zeros(c * hw[0] * hw[1] + 1, np.float32)
    lib.mlcc_f32_conv2d(ffi.new("mlcc_conv2d_params *", conv), buf(x), buf(w), buf(b),
                        buf(ref), buf(ref_scratch))
    wk = pack_a(w.reshape(1, m, c))
    block, nbytes, hq, wq = implicit_plan(c, m, 1, 1, hw[0], hw[1], 1, 1, 1, 1)
    offsets = implicit_offsets(c, 1, 1, 1, 1, 1, 1, hq, wq)
    params = ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": block})
    want = np.full_like(ref, np.nan)
    scratch = np.full(nbytes // 4, np.nan, np.float32)
    lib.mlcc_f32_conv2d__implicit(params, buf(x), buf(wk), buf(b), buf(offsets, "int32_t *"),
                                 buf(want), buf(scratch), ffi.NULL)
    np.testing.assert_allclose(want, ref, rtol=1e-4, atol=1e-4)
    params = ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": 64})
    for n, pool in [(1, ffi.NULL)] + list(pools.items()):
        scratch = np.full((c + 1) * 64, np.nan, np.float32)
        got = np.full_like(ref, np.nan)
        lib.mlcc_f32_conv2d__packed(params, buf(x), buf(wk), buf(b), buf(got), buf(scratch), pool)
        assert np.array_equal(got, want), f"{n} threads"
    wt = pack_a(w.reshape(1, m, c), CONVT_CP)
    for n, pool in [(1, ffi.NULL)] + list(pools.items()):
        got = np.full_like(ref, np.nan)
        lib.mlcc_f32_conv2d__implicit_t(params, buf(x), buf(wt), buf(b),
                                       buf(offsets, "int32_t *"), buf(got), ffi.NULL, pool)
        assert np.array_equal(got, want), f"implicit_t, {n} threads"




@pytest.mark.parametrize("c,m,hw,stride,act", [
    (300, 45, (7, 7), 1, 1),      # two k blocks, 2 channel panels; in place; relu
    (37, 64, (14, 14), 1, 6),     # hard-swish after the residual; rows of 14 in 2 chunks
    (260, 33, (13, 11), 2, 0),    # stride 2: 7 x 6 from the first phase; no activation
    (520, 48, (5, 5), 1, 1),      # three k blocks; a panel of 32 and a half one; 25 positions
    (33, 16, (3, 3), 1, 6),       # one tile of 9, one half panel
    (70, 80, (13, 13), 2, 1),     # stride 2 into 7 x 7: flat tiles; 32 + 32 + a half panel
    (129, 16, (23, 29), 1, 1),    # few outputs read in place (few_outputs_in_place): a half
    (257, 32, (27, 27), 1, 0),    # panel, one panel, on larger maps (SqueezeNet's squeezes)
])
def test_implicit_t_1x1_and_residual(kernels, pools, c, m, hw, stride, act):
    """1x1 convolutions through mlcc_f32_conv2d__implicit_t (ResNets' 7 x 7 and 14 x 14 maps),
    with and without a residual: the packed convolution's bits, and conv, then Add, then the
    activation, on 1, 2, 3 and 5 threads."""
    ffi, lib = kernels
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((2, c, *hw)).astype(np.float32)
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    oh, ow = (hw[0] - 1) // stride + 1, (hw[1] - 1) // stride + 1
    res = rng.standard_normal((2, m, oh, ow)).astype(np.float32)
    plain_ref, plain = _conv(ffi, lib, x, w, b, stride=stride, pad=0, groups=1, act=0,
                             block_cols=64)
    _, with_act = _conv(ffi, lib, x, w, b, stride=stride, pad=0, groups=1, act=act,
                        block_cols=64)
    want = plain + res
    if act == 1:
        want = np.maximum(want, np.float32(0))
    elif act == 6:
        want = want * np.clip(want + np.float32(3), 0, 6) / np.float32(6)
    conv = dict(batch=2, in_channels=c, in_h=hw[0], in_w=hw[1], out_channels=m, out_h=oh,
                out_w=ow, kernel_h=1, kernel_w=1, stride_h=stride, stride_w=stride,
                dilation_h=1, dilation_w=1, pad_top=0, pad_left=0, groups=1,
                act={"kind": act, "alpha": 0.0, "beta": 0.0})
    params = ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": 64})
    wt = pack_a(w.reshape(1, m, c), CONVT_CP)
    offsets = implicit_offsets(c, 1, 1, stride, stride, 1, 1, oh, ow)
    nbytes = convt_plan(c, 1, 1, oh, ow, stride, stride, 1, 1, stride == 1)

    def buf(a, t="float *"):
        return ffi.cast(t, ffi.from_buffer(a))

    for n, pool in [(1, ffi.NULL)] + list(pools.items()):
        scratch = np.full(max(nbytes // 4, 1), np.nan, np.float32)
        got = np.full(res.shape, np.nan, np.float32)
        lib.mlcc_f32_conv2d__implicit_t(params, buf(x), buf(wt), buf(b),
                                       buf(offsets, "int32_t *"), buf(got), buf(scratch), pool)
        assert np.array_equal(got, with_act), f"{n} threads"
        got = np.full(res.shape, np.nan, np.float32)
        lib.mlcc_f32_conv2d_residual__implicit_t(params, buf(x), buf(wt), buf(b),
                                                buf(offsets, "int32_t *"), buf(res), buf(got),
                                                buf(scratch), pool)
        if act == 6:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{n} threads")
        else:
            assert np.array_equal(got, want), f"{n} threads"
    np.testing.assert_allclose(plain, plain_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,m,spatial,block_cols,act", [
    (5, 13, (9, 7), 64, 1),       # 63 positions: one partial panel row; relu
    (3, 21, (9, 15), 64, 0),      # 3 blocks, the last one partial; no activation
    (16, 70, (7, 7), 64, 1),      # few panels, many rows: split by rows on a pool
    (300, 9, (5, 6), 64, 1),      # two k blocks
    (7, 11, (13, 17), 128, 6),    # hard-swish after the residual
    (300, 40, (7, 7), 64, 1),     # 49 positions: AVX-512's transposed product, two k blocks
    (20, 13, (5, 7), 64, 6),      # 35 positions, 13 channels: the same, hard-swish
])
def test_packed_residual_conv_equals_conv_then_add(kernels, pools, c, m, spatial, block_cols,
                                                   act):
    """act(conv + bias + residual) as the unfused graph computes it: the packed convolution
    without activation, then the Add, then the activation (bit for bit where numpy computes
    the same activation: none, relu), on 1, 2, 3 and 5 threads."""
    ffi, lib = kernels
    rng = np.random.default_rng(c * 7 + m)
    x = rng.standard_normal((2, c, *spatial)).astype(np.float32)
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    res = rng.standard_normal((2, m, *spatial)).astype(np.float32)
    _, plain = _conv(ffi, lib, x, w, b, stride=1, pad=0, groups=1, act=0, block_cols=block_cols)
    want = plain + res
    if act == 1:
        want = np.maximum(want, np.float32(0))
    elif act == 6:
        want = want * np.clip(want + np.float32(3), 0, 6) / np.float32(6)
    conv = dict(batch=2, in_channels=c, in_h=spatial[0], in_w=spatial[1], out_channels=m,
                out_h=spatial[0], out_w=spatial[1], kernel_h=1, kernel_w=1, stride_h=1,
                stride_w=1, dilation_h=1, dilation_w=1, pad_top=0, pad_left=0, groups=1,
                act={"kind": act, "alpha": 0.0, "beta": 0.0})
    packed = pack_a(w.reshape(1, m, c))
    cols = min(block_cols, -(-spatial[0] * spatial[1] // 64) * 64)

    def buf(a):
        return ffi.cast("float *", ffi.from_buffer(a))

    for n, pool in [(1, ffi.NULL)] + list(pools.items()):
        scratch = np.full((c + 1) * cols, np.nan, np.float32)
        out = np.full(res.shape, np.nan, np.float32)
        lib.mlcc_f32_conv2d_residual__packed(
            ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": block_cols}),
            buf(x), buf(packed), buf(b), buf(res), buf(out), buf(scratch), pool)
        if act == 6:
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=f"{n} threads")
        else:
            assert np.array_equal(out, want), f"{n} threads"
