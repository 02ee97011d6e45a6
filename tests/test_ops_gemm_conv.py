"""Conv, Gemm and MatMul against onnxruntime on odd shapes."""
import numpy as np
import pytest
from onnx import helper

from util import (check_model, check_node, make_model, rand, reference_outputs,
                  run_same_bits_on_threads)


@pytest.mark.parametrize("n,c,h,w,m,k,stride,pads,dil,group", [
    (1, 3, 7, 11, 5, 3, 1, [1, 1, 1, 1], 1, 1),
    (2, 4, 13, 9, 6, 3, 2, [0, 1, 2, 0], 1, 2),
    (1, 5, 17, 17, 7, 5, 3, [2, 2, 2, 2], 1, 1),
    (1, 6, 11, 13, 6, 3, 1, [1, 1, 1, 1], 2, 6),      # depthwise, dilated
    (1, 8, 9, 9, 8, 3, 2, [1, 1, 1, 1], 1, 8),        # depthwise, stride 2
    (1, 7, 5, 5, 11, 1, 1, [0, 0, 0, 0], 1, 1),       # 1x1 as plain GEMM
    (1, 3, 8, 8, 13, 1, 2, [0, 0, 0, 0], 1, 1),       # strided 1x1
    (1, 4, 6, 6, 4, 2, 1, [0, 0, 1, 1], 1, 1),        # even kernel, asymmetric pad
])
def test_conv2d(tmp_path, n, c, h, w, m, k, stride, pads, dil, group):
    x = rand(n, c, h, w)
    wt = rand(m, c // group, k, k, seed=1)
    b = rand(m, seed=2)
    check_node("Conv", {"x": x}, initializers={"w": wt, "b": b}, tmp_path=tmp_path,
               strides=[stride, stride], pads=pads, dilations=[dil, dil], group=group)


@pytest.mark.parametrize("h,w", [(3, 5), (4, 8)])
def test_packed_conv_of_one_column_panel(tmp_path, h, w):
    """A packed 1x1 convolution whose GEMM has one column panel on x86-native (15 columns: a
    half-width tile; 32: one whole tile), two row blocks (300 outputs > MLCC_GEMM_MC) and two k
    blocks (260 > MLCC_GEMM_KC): the path where each tile fetches the next A panel ahead
    (gemm.c, gemm_packed), within a block and across into the next."""
    check_node("Conv", {"x": rand(1, 260, h, w)},
               initializers={"w": rand(300, 260, 1, 1, seed=1), "b": rand(300, seed=2)},
               tmp_path=tmp_path, target="x86-native")
    assert "mlcc_f32_conv2d__packed(" in next(tmp_path.glob("**/model.c")).read_text()


@pytest.mark.parametrize("c,h,w,m,k,stride,pads,relu", [
    (16, 61, 59, 32, 3, 2, [1, 1, 1, 1], False),   # implicit GEMM: its copy by 16 x 4 sub-planes
    (3, 97, 89, 32, 3, 2, [1, 0, 2, 1], True),     # a 3-channel stem (gathered), odd pads
    (24, 45, 43, 40, 3, 1, [1, 1, 1, 1], True),    # Winograd, the ReLU with each block's tiles
])
def test_conv_threads_same_bits(tmp_path, c, h, w, m, k, stride, pads, relu):
    """Convolutions whose input copy (the implicit GEMM's padded, stride-phase sub-planes) or
    products are split between threads: 1, 2 and 3 threads give the same bits, onnxruntime's
    values within tolerance."""
    x, wt, b = rand(1, c, h, w), rand(m, c, k, k, seed=1), rand(m, seed=2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t" if relu else "y"],
                              strides=[stride, stride], pads=pads)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    model = make_model(nodes, {"x": x}, ["y"], initializers={"w": wt, "b": b})
    got = run_same_bits_on_threads(model, {"x": x}, tmp_path)["y"]
    ref = reference_outputs(model, {"x": x})["y"]
    np.testing.assert_allclose(got, ref, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(tmp_path, auto_pad):
    check_node("Conv", {"x": rand(1, 2, 10, 7)}, initializers={"w": rand(3, 2, 4, 3, seed=1)},
               tmp_path=tmp_path, strides=[2, 3], auto_pad=auto_pad)


def test_conv1d(tmp_path):
    check_node("Conv", {"x": rand(2, 3, 19)}, initializers={"w": rand(4, 3, 5, seed=1)},
               tmp_path=tmp_path, strides=[2], pads=[2, 1])


@pytest.mark.parametrize("target", ["x86", "x86-native"])
@pytest.mark.parametrize("n,length,m,k,stride,dil,bias,relu", [
    (1, 1280, 257, 512, 160, 1, False, False),   # openWakeWord's STFT: 5 windows
    (2, 211, 37, 31, 17, 2, True, True),         # two images, dilated, prime sizes, ReLU fused
    (1, 97, 16, 97, 1, 1, True, False),          # one window covering the whole signal
    (3, 389, 19, 7, 29, 3, True, True),          # 13 windows of 19 taps
])
def test_conv1d_frames(tmp_path, target, n, length, m, k, stride, dil, bias, relu):
    """1-D convolutions over one channel with few windows and many outputs take the frames
    GEMM (mlcc_f32_conv2d__frames: windows read in place, channels along the vectors), on 1
    and 2 threads with the same bits, against onnxruntime."""
    x = rand(n, 1, length)
    inits = {"w": rand(m, 1, k, seed=1), **({"b": rand(m, seed=2)} if bias else {})}
    nodes = [helper.make_node("Conv", ["x", *inits], ["t" if relu else "y"], strides=[stride],
                              dilations=[dil])]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    model = make_model(nodes, {"x": x}, ["y"], initializers=inits)
    check_model(model, {"x": x}, tmp_path / "check", target=target)
    windows = (length - dil * (k - 1) - 1) // stride + 1
    lanes = 16 if target == "x86-native" else 4      # fewer windows than two vectors' lanes
    assert ("mlcc_f32_conv2d__frames(" in next((tmp_path / "check").glob("**/model.c"))
            .read_text()) == (windows < 2 * lanes)
    run_same_bits_on_threads(model, {"x": x}, tmp_path / "threads")


@pytest.mark.parametrize("m,k,n,ta,tb", [(1, 7, 13, 0, 1), (5, 31, 17, 0, 0), (37, 3, 2, 1, 0),
                                         (6, 300, 33, 1, 1)])
def test_gemm(tmp_path, m, k, n, ta, tb):
    a = rand(*((k, m) if ta else (m, k)))
    b = rand(*((n, k) if tb else (k, n)), seed=1)
    c = rand(n, seed=2)
    check_node("Gemm", {"a": a}, initializers={"b": b, "c": c}, tmp_path=tmp_path,
               transA=ta, transB=tb, alpha=0.5, beta=2.0)


@pytest.mark.parametrize("target", ["x86", "x86-native"])
@pytest.mark.parametrize("n,k,finite", [(10, 64, True), (10, 64, False), (37, 300, True),
                                        (130, 70, False)])
def test_one_row_gemm_after_relu(tmp_path, target, n, k, finite):
    """Relu -> Gemm of one row, as in the digits MLP: about half of A is zero. A finite
    constant B skips those rows of B (b_finite); one holding inf and NaN must not, since
    0 * inf is NaN in onnxruntime too. B's rows are padded to 16 floats (n = 10, 37, 130)."""
    b = rand(n, k, seed=1)
    if not finite:
        b[0, ::3], b[n - 1, 1::5] = np.inf, np.nan
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Gemm", ["h", "w", "c"], ["y"], name="fc", transB=1)]
    model = make_model(nodes, {"x": rand(1, k)}, ["y"],
                       initializers={"w": b, "c": rand(n, seed=2)})
    check_model(model, {"x": rand(1, k)}, tmp_path, target=target)


def test_gemm_runtime_b_and_column_bias(tmp_path):
    check_node("Gemm", {"a": rand(4, 6), "b": rand(5, 6, seed=1)},
               initializers={"c": rand(4, 1, seed=2)}, tmp_path=tmp_path, transB=1, beta=0.5)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 5), (5, 7)), ((2, 3, 5), (5, 4)), ((7,), (7, 3)), ((4, 7), (7,)),
    ((2, 1, 3, 5), (4, 5, 6)), ((1, 3, 5), (2, 5, 6)), ((3, 2, 4, 8), (3, 2, 8, 9)),
])
def test_matmul_runtime(tmp_path, a_shape, b_shape):
    check_node("MatMul", {"a": rand(*a_shape), "b": rand(*b_shape, seed=1)}, tmp_path=tmp_path)


@pytest.mark.parametrize("a_shape", [(2, 9, 33), (1, 33)])   # (1, 33): one row, padded B
def test_matmul_const_weight(tmp_path, a_shape):
    check_node("MatMul", {"a": rand(*a_shape)}, initializers={"b": rand(33, 19, seed=1)},
               tmp_path=tmp_path)
