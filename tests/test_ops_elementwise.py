"""Elementwise operators the ONNX node tests cover thinly, against onnxruntime: prime sizes (the
vector loops' tails), special values (zeros of both signs, halves for Round's ties to even, the
poles and domain edges of Log and Reciprocal, infinities, NaN, large magnitudes), attribute
values, and broadcasting (PRelu's slope, Mean of one to three inputs)."""
import numpy as np
import pytest
from onnx import helper

from mlcc.targets import load_target
from util import (check_model, check_node, compile_and_run, make_model, rand,
                  reference_outputs)

# Values where the functions have edges: signed zeros, ties (Round is half to even), integers,
# the poles and domain limits of Log and Reciprocal, large, tiny and non-finite values.
SPECIAL = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, -3.5, 1.0, -1.0, 2.0,
                    0.49999997, -0.49999997, 4194304.5, -8388607.5, 8388609.0, -8388611.0,
                    16777215.0, 1e-38, -1e-38, 1e-45,
                    20.0, -20.0, 88.0, -88.0, 100.0, -100.0, 1000.0, -1000.0, 1e30, -1e30,
                    np.inf, -np.inf, np.nan], np.float32)


def special_input(shape, seed=0, scale=4.0) -> np.ndarray:
    """Random values of shape (normal, times scale) with SPECIAL written over the first ones."""
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[:SPECIAL.size] = SPECIAL[:flat.size]
    return x


def assert_matches(got: np.ndarray, ref: np.ndarray, what: str, signed_zero: bool = False,
                   exact: bool = False):
    """Same shape and dtype; NaN and infinities where the reference has them; each finite value
    within 1e-4 x max(1, |its reference|) (mlcc's verify tolerance, per element: the special
    values span 1e-45 to 1e30), or equal with exact; with signed_zero, zeros of the
    reference's sign."""
    ref = np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (
        f"{what}: {got.dtype}{list(got.shape)} != reference {ref.dtype}{list(ref.shape)}")
    finite = np.isfinite(ref)
    bad = ~finite & ~((np.isnan(ref) & np.isnan(got)) | (got == ref))
    assert not bad.any(), (f"{what}: at inputs where the reference is not finite: got "
                           f"{got[bad][:8]}, reference {ref[bad][:8]}")
    err = np.abs(got[finite].astype(np.float64) - ref[finite])
    tol = 0.0 if exact else 1e-4 * np.maximum(1.0, np.abs(ref[finite].astype(np.float64)))
    tol = np.broadcast_to(tol, err.shape)
    err = np.where(np.isnan(err), np.inf, err)
    worst = int(np.argmax(err - tol)) if err.size else 0
    assert not err.size or err[worst] <= tol[worst], (
        f"{what}: abs error {err[worst]} > {tol[worst]} at input {worst} of the finite "
        f"outputs (got {got[finite][worst]}, reference {ref[finite][worst]})")
    if signed_zero:
        zero = finite & (ref == 0)
        assert np.array_equal(np.signbit(got[zero]), np.signbit(ref[zero])), (
            f"{what}: a zero of the wrong sign")


def assert_all_match(cases) -> None:
    """assert_matches over (got, ref, what, op) cases, reporting every mismatch; op says
    whether zeros must have the reference's sign and whether the values must be exact."""
    errors = []
    for got, ref, what, op in cases:
        try:
            assert_matches(got, ref, what, op in SIGNED_ZERO, op in EXACT)
        except AssertionError as exc:
            errors.append(str(exc).splitlines()[0])
    assert not errors, "\n".join(errors)


def run_unary(tmp_path, ops: dict[str, dict], xs: dict[str, np.ndarray], target="x86",
              opset=18) -> dict:
    """One model applying each op (with its attributes; "Elu:a" is another Elu) to each input;
    mlcc's and the reference's outputs by (op, input)."""
    cases = [(op, x) for op in ops for x in xs]
    nodes = [helper.make_node(op.split(":")[0], [x], [f"y{i}"], name=f"n{i}", **ops[op])
             for i, (op, x) in enumerate(cases)]
    outs = [f"y{i}" for i in range(len(cases))]
    model = make_model(nodes, xs, outs, opset=opset)
    got = compile_and_run(model, xs, tmp_path, target=target)
    ref = reference_outputs(model, xs)
    return {case: (got[o], ref[o]) for case, o in zip(cases, outs)}


# The math functions, with the values where each is special. Ceil, Floor, Round and Reciprocal
# (of -0) keep the sign of zero in onnxruntime (C's ceilf, floorf, nearbyintf).
UNARY = {"Softsign": {}, "Mish": {}, "Sin": {}, "Cos": {}, "Softplus": {}, "Sign": {},
         "Round": {}, "Floor": {}, "Ceil": {}, "Log": {}, "Reciprocal": {}}
SIGNED_ZERO = {"Round", "Floor", "Ceil", "Reciprocal"}
EXACT = {"Round", "Floor", "Ceil", "Sign"}      # integers: no rounding error to allow
# Activations with alpha/gamma away from the defaults; ThresholdedRelu's threshold is strict
# (x == alpha gives 0) and may be zero or negative.
PARAMETRIC = {"Elu": {}, "Elu:a": {"alpha": 0.37}, "Elu:b": {"alpha": 2.5},
              "Selu": {}, "Selu:a": {"alpha": 2.0, "gamma": 0.5},
              "Selu:b": {"alpha": 0.25, "gamma": 3.0},
              "Celu": {}, "Celu:a": {"alpha": 0.6}, "Celu:b": {"alpha": 2.5},
              "ThresholdedRelu": {}, "ThresholdedRelu:a": {"alpha": 0.7},
              "ThresholdedRelu:b": {"alpha": 0.0}, "ThresholdedRelu:c": {"alpha": -0.5},
              "Shrink": {}, "Shrink:a": {"lambd": 1.5, "bias": 1.5},
              "Shrink:b": {"lambd": 0.0, "bias": -0.25}, "Shrink:c": {"lambd": 0.7}}


@pytest.mark.parametrize("target", ["x86", "x86-native", "arm", "wasm"])
def test_math_functions_and_activations_at_special_values(tmp_path, target):
    # arm runs under qemu-aarch64, wasm in node: their C libraries' sinf, nearbyintf, ...
    missing = load_target(target).missing_tools()
    if missing:
        pytest.skip("; ".join(missing))
    x = special_input((3, 7, 11))     # prime sizes: the vector loops' tails
    x.reshape(-1)[-6:] = [0.7, -0.5, 0.70000005, 0.69999995, -0.49999997, -0.50000006]
    results = run_unary(tmp_path, UNARY | PARAMETRIC, {"x": x}, target=target)
    assert_all_match((got, ref, op, op) for (op, _), (got, ref) in results.items())


def test_math_functions_at_every_tail_length(tmp_path):
    # prime sizes below and above the vector widths, on quarters around the ties and zero
    xs = {f"x{n}": (np.random.default_rng(n).integers(-12, 13, n) / 4).astype(np.float32)
          for n in (1, 2, 3, 5, 13, 31, 67)}
    results = run_unary(tmp_path, UNARY, xs)
    assert_all_match((got, ref, f"{op} of {xs[x].size}", op)
                     for (op, x), (got, ref) in results.items())


def test_round_is_half_to_even(tmp_path):
    # ONNX Round: ties to the even neighbour, the sign of zero kept, integers unchanged
    # (above 2^23, x + 0.5 rounds to the next even float: floor(x + 0.5) moved 8388609 to
    # 8388610)
    x = np.array([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.0, 0.0, 0.49999997,
                  -0.49999997, -0.4, 4194304.5, 8388607.0, 8388609.0, -8388611.0, 16777215.0],
                 np.float32)
    got = run_unary(tmp_path, {"Round": {}}, {"x": x})[("Round", "x")][0]
    want = np.array([-4, -2, -2, -0.0, 0, 2, 2, 4, -0.0, 0, 0, -0.0, -0.0, 4194304, 8388607,
                     8388609, -8388611, 16777215], np.float32)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want)), got


SLOPES = [(5, 1, 1), (3,), (7, 1), (1,), (), (2, 5, 7, 3), (1, 7, 3)]


@pytest.mark.parametrize("slope_is_input", [False, True])
def test_prelu_slope_broadcasting(tmp_path, slope_is_input):
    # x [2, 5, 7, 3]: a per-channel slope [5, 1, 1] (as exporters write it), one per last axis,
    # per middle axes, a single one, a scalar, a full one; constant or a run-time input
    x = special_input((2, 5, 7, 3), seed=2)
    slopes = {f"s{i}": (np.random.default_rng(3 + i).standard_normal(s) * 0.5).astype(np.float32)
              for i, s in enumerate(SLOPES)}
    nodes = [helper.make_node("PRelu", ["x", s], [f"y_{s}"], name=f"prelu_{s}") for s in slopes]
    inputs = {"x": x, **slopes} if slope_is_input else {"x": x}
    model = make_model(nodes, inputs, [f"y_{s}" for s in slopes], opset=16,
                       initializers=None if slope_is_input else slopes)
    got = compile_and_run(model, inputs, tmp_path)
    assert_all_match((got[name], ref, f"PRelu with a slope of shape {slopes[name[2:]].shape}",
                      "PRelu") for name, ref in reference_outputs(model, inputs).items())


MEANS = [[(3, 1, 5)], [(3, 1, 5), (4, 5)], [(3, 1, 5), (4, 5), (1,)],
         [(7,), (2, 1), (1, 1, 7)], [(2, 3), (2, 3), (2, 3)]]


def test_mean_of_one_to_three_inputs_broadcasting(tmp_path):
    inputs, nodes = {}, []
    for k, shapes in enumerate(MEANS):
        names = [f"m{k}_{i}" for i in range(len(shapes))]
        inputs.update({n: special_input(s, seed=10 * k + i)
                       for i, (n, s) in enumerate(zip(names, shapes))})
        nodes.append(helper.make_node("Mean", names, [f"y{k}"], name=f"mean{k}"))
    # and one with a constant input
    nodes.append(helper.make_node("Mean", ["m0_0", "c"], ["y_const"], name="mean_const"))
    const = {"c": np.array([1.0, -2.0, 0.5, 3.0, -0.0], np.float32)}
    outs = [f"y{k}" for k in range(len(MEANS))] + ["y_const"]
    model = make_model(nodes, inputs, outs, opset=13, initializers=const)
    got = compile_and_run(model, inputs, tmp_path)
    assert_all_match((got[name], ref, f"Mean {name}", "Mean")
                     for name, ref in reference_outputs(model, inputs).items())


# The trigonometric and hyperbolic operators added through elementwise.h's MLCC_UNARY_OPS list,
# on odd shapes and over each function's domain, all in one model (one compile).
# op -> (shape, low, high): inputs inside the domain, away from poles
TRIG = {"Tan": ((3, 7), -1.4, 1.4), "Asin": ((5, 1, 3), -0.99, 0.99),
         "Acos": ((11,), -0.99, 0.99), "Atan": ((2, 3, 5), -20.0, 20.0),
         "Sinh": ((1, 13), -5.0, 5.0), "Cosh": ((7, 3), -5.0, 5.0),
         "Asinh": ((3, 3, 3), -50.0, 50.0), "Acosh": ((17,), 1.0, 50.0),
         "Atanh": ((2, 9), -0.99, 0.99)}


def test_trigonometric_and_hyperbolic_against_onnxruntime(tmp_path):
    feeds = {f"x_{op}": rand(*shape, seed=i, low=lo, high=hi)
             for i, (op, (shape, lo, hi)) in enumerate(TRIG.items())}
    nodes = [helper.make_node(op, [f"x_{op}"], [f"y_{op}"], name=op.lower()) for op in TRIG]
    model = make_model(nodes, feeds, [f"y_{op}" for op in TRIG], opset=17)
    got = check_model(model, feeds, tmp_path)
    for op in TRIG:
        assert np.all(np.isfinite(got[f"y_{op}"])), op


def test_clip_with_one_bound_as_onnxruntime(tmp_path):
    """A standalone Clip with constant bounds runs as the activation (MLCC_UNARY_ACT); an
    absent bound clamps to the float range, as onnxruntime's (+-inf become +-FLT_MAX), and NaN
    stays NaN."""
    x = rand(4, 5, seed=3) * 4.0
    x[0, :3] = [np.inf, -np.inf, np.nan]
    model = make_model([helper.make_node("Clip", ["x", "lo"], ["y"], name="clip_lo"),
                        helper.make_node("Clip", ["x", "", "hi"], ["z"], name="clip_hi")],
                       {"x": x}, ["y", "z"], initializers={"lo": np.float32(-1.0),
                                                         "hi": np.float32(2.0)}, opset=13)
    got = compile_and_run(model, {"x": x}, tmp_path)
    ref = reference_outputs(model, {"x": x})
    for name in ("y", "z"):
        np.testing.assert_array_equal(got[name], ref[name])
    big = np.finfo(np.float32).max
    assert got["y"][0, 0] == big and got["z"][0, 1] == -big and np.isnan(got["y"][0, 2])


# ---------------------------------------------------------------------------------------------
# Bitwise operators and BitShift (mlcc_int_binary)

def int_arr(shape, dtype, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed + sum(shape)).integers(info.min, info.max, shape,
                                                             dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_bitwise_every_integer_type_broadcasting(tmp_path, dtype):
    a, b = int_arr((3, 1, 5), dtype), int_arr((7, 5), dtype, 1)
    nodes = [helper.make_node(op, ["a", "b"], [f"y_{op}"])
             for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")]
    nodes.append(helper.make_node("BitwiseNot", ["a"], ["y_not"]))
    outs = [n.output[0] for n in nodes]
    check_model(make_model(nodes, {"a": a, "b": b}, outs, opset=18), {"a": a, "b": b},
                tmp_path)


@pytest.mark.parametrize("dtype", ["int32", "uint32"])
def test_int32_add_sub_mul_wrap_with_broadcasts(tmp_path, dtype):
    """32-bit Add, Sub and Mul (their own vectorized rows) wrap as two's complement, with
    either side broadcast along the innermost axis or elsewhere, on odd sizes."""
    a, b = int_arr((3, 1, 37), dtype), int_arr((5, 37), dtype, 1)
    c, d = int_arr((3, 5, 1), dtype, 2), int_arr((1, 1, 37), dtype, 3)
    nodes = [helper.make_node(op, ins, [f"y_{op}_{i}"])
             for op in ("Add", "Sub", "Mul")
             for i, ins in enumerate((["a", "b"], ["c", "d"], ["d", "c"], ["a", "a"]))]
    outs = [n.output[0] for n in nodes]
    feeds = {"a": a, "b": b, "c": c, "d": d}
    check_model(make_model(nodes, feeds, outs, opset=14), feeds, tmp_path)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint64"])
def test_integer_neg_and_abs_at_run_time(tmp_path, dtype):
    """Neg (signed types) and Abs of integer tensors computed at run time (T5's relative
    positions over a KV cache), on an odd shape with the extreme values: the most negative
    value wraps to itself, as in onnxruntime."""
    info = np.iinfo(dtype)
    a = int_arr((3, 5, 7), dtype)
    a.reshape(-1)[:3] = [info.min, info.max, 0]
    nodes = [helper.make_node("Abs", ["a"], ["y_abs"])]
    if info.min < 0:
        nodes.append(helper.make_node("Neg", ["a"], ["y_neg"]))
    check_model(make_model(nodes, {"a": a}, [n.output[0] for n in nodes], opset=13),
                {"a": a}, tmp_path)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_unsigned_with_wide_shifts(tmp_path, dtype, direction):
    """Shift amounts up to past the width (numpy and onnxruntime give 0 there), broadcast."""
    bits = np.iinfo(dtype).bits
    x = int_arr((5, 1, 3), dtype)
    s = np.array([0, 1, bits - 1, bits, bits + 3, 63, 64, 200][:7], dtype=dtype).reshape(7, 1)
    check_node("BitShift", {"x": x, "s": s}, tmp_path=tmp_path, opset=11, direction=direction)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_signed_opset28(tmp_path, dtype, direction):
    """Opset 28's signed shifts (onnx.reference): arithmetic right shift, negative amounts."""
    bits = np.iinfo(dtype).bits
    x = int_arr((2, 1, 3), dtype)
    x.reshape(-1)[:2] = [-1, np.iinfo(dtype).min]
    s = np.array([-1, 0, 1, bits - 1, bits, bits + 5, 3], dtype=dtype).reshape(7, 1)
    check_node("BitShift", {"x": x, "s": s}, tmp_path=tmp_path, opset=28, direction=direction)


def test_pow_by_a_constant_two_squares(tmp_path):
    """Pow by a constant 2 (power spectra, variances) is x * x, as onnxruntime computes it
    (the same bits: one rounding), special values included; an exponent of 2s whose shape
    broadcasts the base to a larger output keeps the general kernel."""
    x = np.concatenate([rand(1, 5, 37).reshape(-1),
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3e19, -1e-23], np.float32)])
    x = x.reshape(1, 1, -1)
    model = make_model([helper.make_node("Pow", ["x", "two"], ["y"]),
                        helper.make_node("Pow", ["x", "twos"], ["z"])], {"x": x}, ["y", "z"],
                       initializers={"two": np.array(2.0, np.float32),
                                     "twos": np.full((3, 1, 1), 2.0, np.float32)})
    got = check_model(model, {"x": x}, tmp_path)
    with np.errstate(over="ignore"):
        square = x * x
    np.testing.assert_array_equal(got["y"], square)
    np.testing.assert_array_equal(got["z"], np.broadcast_to(square, (3, 1, x.size)))
    text = next(tmp_path.glob("**/model.c")).read_text()
    assert text.count(".op = MLCC_BINARY_MUL") == 1 and text.count(".op = MLCC_BINARY_POW") == 1
