"""The unary operators added through elementwise.h's MLCC_UNARY_OPS list (trigonometric and
hyperbolic functions and their inverses) against onnxruntime, on odd shapes (no whole vector)
and over each function's domain, all in one model (one compile)."""
import numpy as np
from onnx import helper

from util import check_model, make_model, rand

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
