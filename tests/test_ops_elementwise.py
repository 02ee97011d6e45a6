"""The unary operators added through elementwise.h's MLCC_UNARY_OPS list (trigonometric and
hyperbolic functions and their inverses) against onnxruntime, on odd shapes (no whole vector)
and over each function's domain, all in one model (one compile)."""
import numpy as np
from onnx import helper

from util import check_model, compile_and_run, make_model, rand, reference_outputs

# op -> (shape, low, high): inputs inside the domain, away from poles
CASES = {"Tan": ((3, 7), -1.4, 1.4), "Asin": ((5, 1, 3), -0.99, 0.99),
         "Acos": ((11,), -0.99, 0.99), "Atan": ((2, 3, 5), -20.0, 20.0),
         "Sinh": ((1, 13), -5.0, 5.0), "Cosh": ((7, 3), -5.0, 5.0),
         "Asinh": ((3, 3, 3), -50.0, 50.0), "Acosh": ((17,), 1.0, 50.0),
         "Atanh": ((2, 9), -0.99, 0.99)}


def test_trigonometric_and_hyperbolic_against_onnxruntime(tmp_path):
    feeds = {f"x_{op}": rand(*shape, seed=i, low=lo, high=hi)
             for i, (op, (shape, lo, hi)) in enumerate(CASES.items())}
    nodes = [helper.make_node(op, [f"x_{op}"], [f"y_{op}"], name=op.lower()) for op in CASES]
    model = make_model(nodes, feeds, [f"y_{op}" for op in CASES], opset=17)
    got = check_model(model, feeds, tmp_path)
    for op in CASES:
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
