"""The threaded unpacked GEMM (MatMul, Gemm) and attention kernels: the same bits on 1, 2, 3 and
5 threads and without a pool, as the serial GEMM (mlcc_f32_gemm, the reference kept for the
convolutions that call it), and within rounding of float64 numpy; on odd shapes around the
register tile (8 rows x 2 vectors with AVX-512, 6 in the scalar build) and the unit cut (16 column blocks, then row blocks), built
with AVX-512 vectors and as the scalar fallback, with MLCC_MIN_PARALLEL_MACS=0 so that even
these small cases take the pool."""

import numpy as np
import pytest

from mlcc.ops.gemm import pack_a, pack_b_panels
from mlcc.targets import load_target
from util import build_kernels, kernel_cdef


CDEF = kernel_cdef("gemm.h", "attention.h")


def _threaded_lib(folder, build, sources, cdef, defines=()):
    """The kernels built as one library with pools of 2, 3 and 5 threads: (ffi, lib, pools),
    then (after the yield of the fixture that iterates it) the pools destroyed."""
    cffi = pytest.importorskip("cffi")
    path = build_kernels(folder / "libkernels.so", build,
                         [*sources, "src/mlcc_threadpool.c", "src/mlcc_runtime.c"], defines)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    dl = ffi.dlopen(str(path))
    pools = {}
    for n in (2, 3, 5):
        p = ffi.new("mlcc_threadpool **")
        assert dl.mlcc_threadpool_create(p, n) == 0
        pools[n] = p[0]
    yield ffi, dl, pools
    for p in pools.values():
        dl.mlcc_threadpool_destroy(p)


@pytest.fixture(scope="module", params=["x86-native", "scalar"])
def lib(request, tmp_path_factory):
    yield from _threaded_lib(tmp_path_factory.mktemp(request.param), request.param,
                             ["kernels/gemm.c", "kernels/attention.c"], CDEF)


def _f(ffi, a):
    return ffi.cast("float *", ffi.from_buffer(a))


@pytest.mark.parametrize("m,n,k,bias,act", [
    (1, 1, 1, None, 0),
    (7, 33, 5, "row", 1),         # one full and one 1-column tile (AVX-512: 32 columns)
    (13, 600, 257, "col", 8),     # 19 column tiles -> 16 units; two k blocks; SiLU tails
    (97, 65, 300, "full", 9),     # 3 column tiles -> row blocks too; GELU
    (128, 384, 64, "col", 0),     # a MiniLM projection's shape, shallower
    (32, 1536, 384, "col", 9),    # MiniLM at 32 tokens: whole 8-row tiles, 48 B panels
    (9, 70, 300, "col", 0),       # a last B panel of 6 columns (zero-padded), an 8 + 1 row cut
])
def test_gemm_is_bit_identical_across_thread_counts(request, lib, m, n, k, bias, act):
    ffi, dl, pools = lib
    build = request.node.callspec.params["lib"]
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.standard_normal((k, m)).astype(np.float32)       # transposed A: strides (1, m)
    b = rng.standard_normal((k, n)).astype(np.float32)
    shape, strides = {None: ((1,), (0, 0)), "row": ((m,), (1, 0)), "col": ((n,), (0, 1)),
                      "full": ((m, n), (n, 1))}[bias]
    bv = rng.standard_normal(shape).astype(np.float32)
    p = ffi.new("mlcc_gemm_params *", dict(
        m=m, n=n, k=k, a_row_stride=1, a_col_stride=m, ldb=n, ldc=n,
        bias_row_stride=strides[0], bias_col_stride=strides[1], alpha=0.75, beta=1.5,
        act={"kind": act, "alpha": 1.0, "beta": 0.0}))
    bias_ptr = ffi.NULL if bias is None else _f(ffi, bv)

    def run(pool):
        c = np.full((m, n), np.nan, np.float32)
        if pool == "serial":
            dl.mlcc_f32_gemm(p, _f(ffi, a), _f(ffi, b), bias_ptr, _f(ffi, c))
        else:
            dl.mlcc_f32_gemm__threaded(p, _f(ffi, a), _f(ffi, b), bias_ptr, _f(ffi, c), pool)
        return c

    serial = run("serial")
    x = 0.75 * (a.T.astype(np.float64) @ b) + (0 if bias is None else 1.5 * bv.reshape(
        (m, 1) if bias == "row" else bv.shape))
    act_ref = {0: lambda v: v, 1: lambda v: np.maximum(v, 0), 8: lambda v: v / (1 + np.exp(-v)),
               9: lambda v: v * 0.5 * (1 + np.vectorize(__import__("math").erf)(v / 2 ** 0.5))}
    np.testing.assert_allclose(serial, act_ref[act](x), rtol=1e-4, atol=1e-4 * np.sqrt(k))
    for name, pool in [("no pool", ffi.NULL), *pools.items()]:
        assert np.array_equal(run(pool), serial), name
    # B in column panels (constant weights: mlcc.ops.gemm.pack_b_panels): the same bits for
    # every product of more than one row (one row reads B in rows, gemv_block)
    if m > 1:
        # (the panels' width is the build's: 16 columns on 256-bit vectors, else 32)
        panels = pack_b_panels(b, 32 if build == "scalar" else load_target(build).gemm_b_panel())
        for name, pool in [("no pool", ffi.NULL), *pools.items()]:
            c = np.full((m, n), np.nan, np.float32)
            dl.mlcc_f32_gemm__panels_threaded(p, _f(ffi, a), _f(ffi, panels), bias_ptr,
                                             _f(ffi, c), pool)
            assert np.array_equal(c, serial), f"panels, {name}"


@pytest.mark.parametrize("n,k", [(1, 1), (15, 3), (17, 257), (129, 64), (161, 300),
                                 (1000, 1280), (10, 64), (3, 300), (26, 5)])
def test_one_row_gemm_matches_the_tiles_on_every_pool(lib, n, k):
    """A one-row product (gemv_block: 8, 4, 2 vectors of columns per step) gives the same bits on
    every pool and agrees with the same row of a product of more rows (the register tiles;
    within rounding: the compiler may contract alpha * sum + previous blocks differently):
    column counts around one and eight vectors (4-16 lanes), depths across the 256 block,
    the MobileNetV2 classifier's shape, the digits CNN's logits (10 columns: gemv_tail) and
    rows narrower than a vector across k blocks (its loads must stay inside B)."""
    ffi, dl, pools = lib
    rng = np.random.default_rng(n * 7 + k)
    a = rng.standard_normal((3, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bv = rng.standard_normal(n).astype(np.float32)

    def run(m, pool):
        p = ffi.new("mlcc_gemm_params *", dict(
            m=m, n=n, k=k, a_row_stride=k, a_col_stride=1, ldb=n, ldc=n, bias_row_stride=0,
            bias_col_stride=1, alpha=0.75, beta=1.5, act={"kind": 1, "alpha": 0.0, "beta": 0.0}))
        c = np.full((m, n), np.nan, np.float32)
        dl.mlcc_f32_gemm__threaded(p, _f(ffi, a), _f(ffi, b), _f(ffi, bv), _f(ffi, c), pool)
        return c

    tiled = run(3, ffi.NULL)
    ref = np.maximum(0.75 * (a.astype(np.float64) @ b) + 1.5 * bv, 0)
    np.testing.assert_allclose(tiled, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    one = run(1, ffi.NULL)[0]
    np.testing.assert_allclose(one, tiled[0], rtol=1e-6, atol=1e-6 * np.sqrt(k))
    for name, pool in pools.items():
        assert np.array_equal(run(1, pool)[0], one), name


@pytest.mark.parametrize("n,k", [(10, 64), (37, 130), (129, 300), (16, 7), (3, 257)])
def test_one_row_gemm_skips_zero_rows_and_reads_padded_rows_with_the_same_bits(lib, n, k):
    """b_finite (a finite constant B) skips the rows of B met by a zero of A (ReLU outputs:
    here half of A, some of them -0, and whole 64-row words of zeros and of non-zeros), and a
    B whose rows are padded to 16 floats (mlcc.ops.gemm) has its last partial vector read in
    place: the same bits as the dense product on unpadded rows, on every pool. The padding
    holds NaN: no lane of it may reach C."""
    ffi, dl, pools = lib
    rng = np.random.default_rng(n * 3 + k)
    a = np.maximum(rng.standard_normal(k), 0).astype(np.float32)
    a[::7] = -0.0
    a[:min(k, 64)] = 0.0 if k > 128 else a[:min(k, 64)]      # a whole word of zeros
    if k > 200:
        a[128:192] = rng.random(64).astype(np.float32) + 0.5    # a whole word of non-zeros
    b = rng.standard_normal((k, n)).astype(np.float32)
    b[rng.random((k, n)) < 0.1] = 0.0
    bv = rng.standard_normal(n).astype(np.float32)
    ldb = -(-n // 16) * 16
    b_rows = np.full((k, ldb), np.nan, np.float32)
    b_rows[:, :n] = b

    def run(bmat, ld, finite, pool):
        p = ffi.new("mlcc_gemm_params *", dict(
            m=1, n=n, k=k, a_row_stride=k, a_col_stride=1, ldb=ld, ldc=n, bias_row_stride=0,
            bias_col_stride=1, alpha=0.75, beta=1.5, act={"kind": 0, "alpha": 0.0, "beta": 0.0},
            b_finite=finite))
        c = np.full((1, n), np.nan, np.float32)
        dl.mlcc_f32_gemm__threaded(p, _f(ffi, a), _f(ffi, bmat), _f(ffi, bv), _f(ffi, c), pool)
        return c

    dense = run(b, n, 0, ffi.NULL)
    np.testing.assert_allclose(dense[0], 0.75 * (a.astype(np.float64) @ b) + 1.5 * bv,
                               rtol=1e-5, atol=1e-5 * np.sqrt(k))
    for name, pool in [("no pool", ffi.NULL), *pools.items()]:
        assert np.array_equal(run(b_rows, ldb, 1, pool), dense), name
        assert np.array_equal(run(b, n, 1, pool), dense), f"unpadded, {name}"


def test_batched_gemm_is_bit_identical_across_thread_counts(lib):
    """Broadcast batches (B shared by pairs of A batches through the offset tables)."""
    ffi, dl, pools = lib
    batch, m, n, k = 6, 11, 70, 19
    rng = np.random.default_rng(5)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch // 2, k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    a_off = np.arange(batch, dtype=np.int64)              # in matrices (a_matrix = m * k)
    b_off = np.arange(batch, dtype=np.int64) // 2
    p = ffi.new("mlcc_batched_gemm_params *", dict(
        gemm=dict(m=m, n=n, k=k, a_row_stride=k, a_col_stride=1, ldb=n, ldc=n,
                  bias_row_stride=0, bias_col_stride=1, alpha=1.0, beta=1.0,
                  act={"kind": 1, "alpha": 0.0, "beta": 0.0}),
        batch=batch, c_batch_stride=m * n, a_matrix=m * k, b_matrix=k * n))

    def run(pool):
        c = np.full((batch, m, n), np.nan, np.float32)
        dl.mlcc_f32_batched_gemm(p, _f(ffi, a), _f(ffi, b), _f(ffi, bias), _f(ffi, c),
                                 ffi.cast("int64_t *", ffi.from_buffer(a_off)),
                                 ffi.cast("int64_t *", ffi.from_buffer(b_off)), pool)
        return c

    one = run(ffi.NULL)
    ref = np.maximum(a.astype(np.float64) @ np.repeat(b, 2, axis=0) + bias, 0)
    np.testing.assert_allclose(one, ref, rtol=1e-4, atol=1e-4)
    for n_threads, pool in pools.items():
        assert np.array_equal(run(pool), one), f"{n_threads} threads"


@pytest.mark.parametrize("b,h,sq,sk,d,group,softcap", [
    (1, 2, 7, 19, 5, 1, 0.0),      # 2 heads: each cut into 2 row ranges of 4-row tiles
    (2, 3, 33, 16, 17, 1, 0.0),    # 6 pairs x 3 ranges, a partial last tile
    (1, 1, 1, 37, 16, 1, 0.0),     # one row: one unit
    (1, 20, 9, 5, 3, 1, 0.0),      # more pairs than units: one unit per pair
    (2, 6, 9, 11, 4, 3, 1.5),      # 3 query heads per key/value head, softcap
])
def test_attention_is_bit_identical_across_thread_counts(lib, b, h, sq, sk, d, group,
                                                         softcap):
    ffi, dl, pools = lib
    rng = np.random.default_rng(sq * 7 + d)
    q = rng.standard_normal((b, h, sq, d)).astype(np.float32)
    k, v = (rng.standard_normal((b, h // group, sk, d)).astype(np.float32) for _ in "kv")
    mask = (rng.standard_normal((b, 1, 1, sk)) * 3).astype(np.float32)
    scratch = np.zeros(4 * (d + 4) * ((sk + 15) // 16 * 16), np.float32)   # 4 slices
    p = ffi.new("mlcc_attention_params *", dict(
        batch=b, heads=h, sq=sq, sk=sk, d=d, dv=d, group=group,
        q_strides=[s // 4 for s in q.strides],
        k_strides=[s // 4 for s in k.strides], v_strides=[s // 4 for s in v.strides],
        mask_strides=[sk, 0, 0, 1], out_strides=[h * sq * d, sq * d, d, 1], scale=0.37,
        softcap=softcap))

    def run(pool):
        out = np.full((b, h, sq, d), np.nan, np.float32)
        dl.mlcc_f32_attention(p, _f(ffi, q), _f(ffi, k), _f(ffi, v), _f(ffi, mask),
                              _f(ffi, out), _f(ffi, scratch), pool)
        return out

    one = run(ffi.NULL)
    kq, vq = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)    # per query head
    s = np.einsum("bhic,bhjc->bhij", q.astype(np.float64), kq) * np.float64(np.float32(0.37))
    if softcap:
        s = softcap * np.tanh(s / softcap)
    s = np.exp(s + mask - (s + mask).max(-1, keepdims=True))
    ref = np.einsum("bhij,bhjc->bhic", s / s.sum(-1, keepdims=True), vq)
    assert np.abs(one - ref).max() < 2e-6
    for n_threads, pool in pools.items():
        assert np.array_equal(run(pool), one), f"{n_threads} threads"


def test_pool_statistics_count_every_unit(tmp_path):
    """The measuring build (-DMLCC_POOL_STATS, bench/profile_layers.py --pool-stats) compiles
    cleanly and accounts for every unit of a loop exactly once, on whichever thread ran it;
    the shipped runtime is built without it."""
    cffi = pytest.importorskip("cffi")
    path = build_kernels(tmp_path / "libstats.so", "x86", ["kernels/gemm.c",
                         "src/mlcc_threadpool.c", "src/mlcc_runtime.c"],
                         defines=["-DMLCC_POOL_STATS"])
    ffi = cffi.FFI()
    ffi.cdef(CDEF + "void mlcc_threadpool_stats(void *pool, double *out);")
    dl = ffi.dlopen(str(path))
    m, n, k = 40, 1000, 64     # 1000 columns: 16 units of column tiles (GEMM_UNITS)
    a = np.ones((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    c = np.zeros((m, n), np.float32)
    p = ffi.new("mlcc_gemm_params *", dict(
        m=m, n=n, k=k, a_row_stride=k, a_col_stride=1, ldb=n, ldc=n, bias_row_stride=0,
        bias_col_stride=0, alpha=1.0, beta=0.0, act={"kind": 0, "alpha": 0.0, "beta": 0.0}))
    for threads in (2, 3):
        pp = ffi.new("mlcc_threadpool **")
        assert dl.mlcc_threadpool_create(pp, threads) == 0
        out = ffi.new("double[]", 7 * threads)
        dl.mlcc_threadpool_stats(pp[0], out)                 # zeroes them
        for _ in range(3):
            dl.mlcc_f32_gemm__threaded(p, _f(ffi, a), _f(ffi, b), ffi.NULL, _f(ffi, c), pp[0])
        dl.mlcc_threadpool_stats(pp[0], out)
        units = sum(out[7 * t + 1] for t in range(threads))
        assert units == 3 * 16 and out[4] == 3, list(out)    # every unit once; 3 loops
        assert all(out[7 * t] >= 0 for t in range(threads)) and out[2] >= 0
        dl.mlcc_threadpool_stats(pp[0], out)
        # read and reset; a worker may go to sleep after the loop returned (slot 6 counts it)
        assert all(v == 0 for i, v in enumerate(out) if i % 7 != 6), "read and reset"
        dl.mlcc_threadpool_destroy(pp[0])
    assert np.all(c == k)


def test_packed_conv_partition_counts_every_block(tmp_path):
    """The packed convolution's choice of partition counts the panels of all blocks: 13 x 13
    positions in blocks of 128 columns are blocks of 4 and 2 panels; by panels (4 units) one of
    2 threads would run 4 and the other 2, so 2 threads go by weight rows (a gather and a
    multiply loop per block: 4 loops), 3 threads by panels (2, 2 and 2: one loop). The
    measuring build counts the caller's loops (-DMLCC_POOL_STATS); the same bits either way.
    Panels of 32 columns: the AVX-512 build (x86-native here)."""
    cffi = pytest.importorskip("cffi")
    if load_target("x86-native").lowering_options().get("gemm_nr") != 32:
        pytest.skip("the shape is chosen for B panels of 32 columns (AVX-512)")
    path = build_kernels(tmp_path / "libconv.so", "x86-native", ["kernels/conv.c",
                         "kernels/gemm.c",
                         "src/mlcc_threadpool.c", "src/mlcc_runtime.c"],
                         defines=["-DMLCC_POOL_STATS"])
    ffi = cffi.FFI()
    ffi.cdef(kernel_cdef("conv.h", "gemm.h") +
             "void mlcc_threadpool_stats(void *pool, double *out);")
    dl = ffi.dlopen(str(path))
    c, m, hw, block = 64, 200, 13, 128          # 200 x 169 x 64 multiply-adds: on the pool
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    wm = rng.standard_normal((m, c)).astype(np.float32)
    w = pack_a(wm.reshape(1, m, c))
    bias = rng.standard_normal(m).astype(np.float32)
    conv = dict(batch=1, in_channels=c, in_h=hw, in_w=hw, out_channels=m, out_h=hw, out_w=hw,
                kernel_h=1, kernel_w=1, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
                pad_top=0, pad_left=0, groups=1, act={"kind": 1, "alpha": 0.0, "beta": 0.0})
    params = ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": block})
    scratch = np.zeros((c + 1) * block, np.float32)
    outs = []
    for threads, loops in ((1, 0), (2, 4), (3, 1)):
        pp = ffi.new("mlcc_threadpool **")
        assert dl.mlcc_threadpool_create(pp, threads) == 0
        stats = ffi.new("double[]", 7 * threads)
        y = np.full((1, m, hw, hw), np.nan, np.float32)
        dl.mlcc_threadpool_stats(pp[0], stats)               # zeroes them
        dl.mlcc_f32_conv2d__packed(params, _f(ffi, x), _f(ffi, w), _f(ffi, bias), _f(ffi, y),
                                   _f(ffi, scratch), pp[0])
        dl.mlcc_threadpool_stats(pp[0], stats)
        dl.mlcc_threadpool_destroy(pp[0])
        assert stats[4] == loops, f"{threads} threads: {stats[4]} loops"
        outs.append(y)
    ref = np.maximum(np.einsum("mc,chw->mhw", wm, x[0]) + bias[:, None, None], 0)
    np.testing.assert_allclose(outs[0][0], ref, rtol=1e-4, atol=1e-4)
    assert all(np.array_equal(o, outs[0]) for o in outs[1:])


# ------------------------------------------------------------------------ 2-D pooling

@pytest.fixture(scope="module")
def pool_lib(tmp_path_factory):
    yield from _threaded_lib(tmp_path_factory.mktemp("pool"), "x86-native",
                             ["kernels/pool.c"], kernel_cdef("pool.h"))


@pytest.mark.parametrize("planes,h,w,k,s,pad", [
    (37, 23, 29, 3, 2, 1),    # stride 2: the separable max / phase split, in scratch slices
    (5, 16, 18, 2, 2, 0),     # 2x2/2 without padding: rows of all planes, no scratch
    (11, 13, 13, 5, 1, 2),    # stride 1 on a small map: a padded copy per plane in scratch
    (3, 9, 40, 3, 1, 1),      # stride 1, rows wider than MLCC_MAXPOOL_SMALL_W: in place
    (1, 7, 7, 3, 2, 0),       # one plane: one unit
    (7, 37, 111, 3, 2, 0),    # SqueezeNet's 3x3/2: rows of 55 in pairs, 3 vectors + 7 masked
    (9, 27, 27, 3, 2, 0),     # its third pool: rows of 13, narrower than a vector
    (3, 21, 70, 3, 2, 1),     # padded: vectors from the first output inside, a masked end
    (6, 19, 112, 3, 2, 1),    # ResNet's stem pool: rows of 56, a border column, then vectors
    (4, 9, 67, 2, 2, 0),      # 2x2/2 on an odd width: 33 outputs a row
])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_is_bit_identical_across_thread_counts(pool_lib, planes, h, w, k, s, pad, kind):
    ffi, dl, pools = pool_lib
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    pw = -(-w // s)
    t = np.arange(k) - pad
    taps = (t if s == 1 else (t % s) * pw + t // s).astype(np.int64)
    pitch = ow + k - 1
    slice_floats = max(h * s * pw, (oh + k - 1) * pitch + 2 * oh * pitch + k)
    p = ffi.new("mlcc_pool2d_params *", dict(
        planes=planes, in_h=h, in_w=w, out_h=oh, out_w=ow, kernel_h=k, kernel_w=k,
        stride_h=s, stride_w=s, dilation_h=1, dilation_w=1, pad_top=pad, pad_left=pad,
        phase_width=pw, scratch_slice=slice_floats))
    x = np.random.default_rng(planes * h + w).standard_normal((planes, h, w)).astype(np.float32)
    inv = np.ones(oh + ow, np.float32)
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)),
                constant_values=-np.inf if kind == "max" else 0.0)
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::s, ::s]
    ref = windows.max(axis=(3, 4)) if kind == "max" else windows.sum(axis=(3, 4))

    def run(pool):
        y = np.zeros((planes, oh, ow), np.float32)
        scratch = np.zeros(4 * slice_floats + 1, np.float32)
        args = [p, _f(ffi, x), ffi.cast("int64_t *", ffi.from_buffer(taps))]
        if kind == "avg":
            args.append(_f(ffi, inv))
        getattr(dl, f"mlcc_f32_{kind}pool2d")(*args, _f(ffi, y), _f(ffi, scratch), pool)
        return y

    serial = run(ffi.NULL)
    np.testing.assert_allclose(serial, ref, rtol=1e-5, atol=1e-5)
    for n, pool in pools.items():
        np.testing.assert_array_equal(run(pool), serial, err_msg=f"{n} threads")


# ------------------------------------------------------------------ elementwise kernels

@pytest.fixture(scope="module")
def elementwise_lib(tmp_path_factory):
    yield from _threaded_lib(tmp_path_factory.mktemp("elementwise"), "x86-native",
                             ["kernels/elementwise.c"], kernel_cdef("elementwise.h"), defines=["-DMLCC_MIN_PARALLEL_ELEMENTS=0"])


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1000,), (1000,)),              # one long row: split by columns (whole cache lines)
    ((37,), (1,)),                   # a scalar operand, a row shorter than the threads' share
    ((7, 13, 29), (13, 1)),          # rows split between threads, broadcasting on two axes
    ((3, 1, 5), (1, 4, 1)),          # both operands broadcast: an outer product of rows
    ((2, 3), (5, 2, 3)),             # a leading axis of b alone
    ((2, 5, 31, 17), (1, 5, 1, 1)),  # planes of 31 x 17 >= 512: each unit rows of every plane
    ((3, 29, 23), (29, 23)),         # the same, b one plane for all
])
def test_binary_is_bit_identical_across_thread_counts(elementwise_lib, a_shape, b_shape):
    ffi, dl, pools = elementwise_lib
    rng = np.random.default_rng(len(a_shape) * 100 + sum(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out = np.broadcast_shapes(a_shape, b_shape)
    rank = len(out)

    def strides(shape):
        full = np.broadcast_to(np.zeros(shape, np.float32), out)
        return [s // 4 for s in full.strides] + [0] * (8 - rank)

    p = ffi.new("mlcc_binary_params *", dict(op=1, rank=rank, shape=list(out) + [1] * (8 - rank),
                                             a_strides=strides(a_shape),
                                             b_strides=strides(b_shape)))   # SUB

    def run(pool):
        y = np.zeros(out, np.float32)
        dl.mlcc_f32_binary(p, _f(ffi, a), _f(ffi, b), _f(ffi, y), pool)
        return y

    serial = run(ffi.NULL)
    np.testing.assert_array_equal(serial, a - b)
    for n, pool in pools.items():
        np.testing.assert_array_equal(run(pool), serial, err_msg=f"{n} threads")


@pytest.mark.parametrize("n,plane", [(1, 0), (15, 0), (16, 0), (17, 0), (1000, 0), (4099, 0),
                                     (1000, 500),     # planes too small: ranges of elements
                                     (1560, 520),     # 3 planes, each split (not whole lines)
                                     (2352, 784)])    # 3 planes of 28 x 28
@pytest.mark.parametrize("op", ["tanh", "erf"])
def test_unary_is_bit_identical_across_thread_counts(elementwise_lib, n, plane, op):
    """An activation (copied, then applied in place) and an expression of the X-list, by
    ranges of the elements or (planes of MLCC_PLANE_SPLIT_MIN elements) parts of every plane."""
    import math
    ffi, dl, pools = elementwise_lib
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    if op == "tanh":
        p = ffi.new("mlcc_unary_params *", dict(n=n, plane=plane, op=dl.MLCC_UNARY_ACT,
                                                act=dict(kind=dl.MLCC_ACT_TANH)))
        ref = np.tanh(x)
    else:
        p = ffi.new("mlcc_unary_params *", dict(n=n, plane=plane, op=dl.MLCC_UNARY_ERF))
        ref = np.array([math.erf(v) for v in x], np.float32)

    def run(pool):
        y = np.zeros(n, np.float32)
        dl.mlcc_f32_unary(p, _f(ffi, x), _f(ffi, y), pool)
        return y

    serial = run(ffi.NULL)
    np.testing.assert_allclose(serial, ref, rtol=1e-5, atol=1e-6)
    for threads, pool in pools.items():
        np.testing.assert_array_equal(run(pool), serial, err_msg=f"{threads} threads")


# ------------------------------------------------------------------------ strided copies

@pytest.fixture(scope="module")
def copy_lib(tmp_path_factory):
    yield from _threaded_lib(tmp_path_factory.mktemp("copy"), "x86-native",
                             ["kernels/copy.c"], kernel_cdef("copy.h"), defines=["-DMLCC_MIN_PARALLEL_ELEMENTS=0"])


@pytest.mark.parametrize("shape,perm,dtype", [
    ((5, 7, 11), (2, 0, 1), np.float32),     # rows of a transpose split between threads
    ((3, 4, 13), (0, 2, 1), np.uint8),       # a short innermost axis: the interleave path
    ((2, 9, 6, 7), (1, 3, 0, 2), np.int64),
    ((1, 31), (1, 0), np.float32),           # one row per output column
    ((1, 1003), (0, 1), np.float32),         # one contiguous block: ranges of 64-byte lines
    ((4099,), (0,), np.int16),               # the same, a tail shorter than a line
    ((1, 37), (0, 1), np.uint8),             # a block under one line: the caller alone
])
def test_copy_is_bit_identical_across_thread_counts(copy_lib, shape, perm, dtype):
    ffi, dl, pools = copy_lib
    x = (np.arange(np.prod(shape)) * 7 % 251).astype(dtype).reshape(shape)
    ref = np.ascontiguousarray(x.transpose(perm))
    rank, es = len(shape), x.itemsize
    src = [x.strides[a] // es for a in perm]
    dst = [s // es for s in ref.strides]
    p = ffi.new("mlcc_copy_params *", dict(
        rank=rank, elem_size=es, shape=list(ref.shape) + [1] * (8 - rank),
        src_strides=src + [0] * (8 - rank), dst_strides=dst + [0] * (8 - rank),
        src_offset=0, dst_offset=0))

    def run(pool):
        y = np.zeros_like(ref)
        dl.mlcc_copy_strided(p, ffi.from_buffer(x), ffi.from_buffer(y), pool)
        return y

    np.testing.assert_array_equal(run(ffi.NULL), ref)
    for n, pool in pools.items():
        np.testing.assert_array_equal(run(pool), ref, err_msg=f"{n} threads")
