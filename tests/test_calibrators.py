"""The default `auto` calibrator (mlcc/quant/observers.py, auto_range): its range search against
a brute-force search of the real quantize-dequantize error (in its norm, |error|^1.5), on the cases where the right
answer is known (outliers clipped, a uniform kept whole, constant and zero tensors, unsigned
ranges after ReLU); and that auto is the default of the API and the CLI."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from mlcc import api
from mlcc.cli import CALIBRATORS as CLI_CALIBRATORS
from mlcc.cli import main
from mlcc.quant import CALIBRATORS, DEFAULT_CALIBRATOR, calibrate
from mlcc.quant.observers import AUTO_NORM, Calibrator, HistogramObserver, auto_range
from mlcc.quant.scheme import activation_qparams


def _ranges(x: np.ndarray, method: str = "auto", chunks: int = 7):
    cal = Calibrator(method)
    for p in range(cal.passes):
        for c in np.array_split(x, chunks):
            cal.observe(p, {"t": c})
    return cal.ranges()["t"]


def _qdq_mse(x: np.ndarray, lo: float, hi: float) -> float:
    """The real quantize-dequantize error in auto's norm: mean |x - q(x)|^AUTO_NORM."""
    qp = activation_qparams(lo, hi)
    return float(np.mean(np.abs(qp.dequantize(qp.quantize(x)).astype(np.float64) - x)
                         ** AUTO_NORM))


def _brute_force(x: np.ndarray, n: int = 200) -> float:
    """The least real quantize-dequantize MSE over a fine grid of (lo, hi) (hi only for a
    non-negative x)."""
    lo_c = np.linspace(min(x.min(), 0.0), 0.0, n, endpoint=False) if x.min() < 0 else [0.0]
    hi_c = np.linspace(max(x.max(), 0.0), 0.0, n, endpoint=False)
    return min(_qdq_mse(x, lo, hi) for lo in lo_c for hi in hi_c)


def test_gaussian_outliers_are_clipped_and_error_is_near_the_best():
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 1.0, 1_000_003).astype(np.float32)
    x[:3] = [30.0, 25.0, -28.0]                      # rare outliers
    r = _ranges(x)
    assert 3.0 < r.hi < 6.0 and -6.0 < r.lo < -3.0, (r.lo, r.hi)
    assert 0 < r.clipped < 1e-3
    mm = _ranges(x, "minmax")
    assert (mm.lo, mm.hi) == (-28.0, 30.0)
    got = _qdq_mse(x, r.lo, r.hi)
    assert got < 0.5 * _qdq_mse(x, mm.lo, mm.hi)
    y = x[:200_000]                                   # brute force on fewer values
    r = _ranges(y)
    assert _qdq_mse(y, r.lo, r.hi) <= 1.05 * _brute_force(y, 40)


def test_uniform_keeps_about_the_whole_range():
    rng = np.random.default_rng(1)
    x = rng.uniform(-2.0, 3.0, 200_003).astype(np.float32)
    r = _ranges(x)
    assert abs(r.lo - x.min()) < 0.02 and abs(r.hi - x.max()) < 0.02, (r.lo, r.hi)
    assert _qdq_mse(x, r.lo, r.hi) <= 1.02 * _qdq_mse(x, x.min(), x.max())


@pytest.mark.parametrize("value", [0.0, 2.5, -1.25])
def test_constant_tensors_get_their_value(value):
    x = np.full((5, 11), value, np.float32)
    r = _ranges(x)
    assert (r.lo, r.hi) == (value, value)
    assert r.clipped == 0.0
    qp = activation_qparams(r.lo, r.hi)
    assert np.all(qp.dequantize(qp.quantize(x)) == x)


def test_after_relu_the_range_is_unsigned_and_zeros_are_free():
    rng = np.random.default_rng(2)
    x = np.maximum(rng.normal(0.0, 1.0, 300_007), 0.0).astype(np.float32)   # half exact zeros
    x[:2] = 40.0
    r = _ranges(x)
    assert r.lo == 0.0 and 2.5 < r.hi < 40.0, (r.lo, r.hi)
    assert _qdq_mse(x, r.lo, r.hi) <= 1.1 * _brute_force(x[::10], 100)
    assert _qdq_mse(x, r.lo, r.hi) < _qdq_mse(x, 0.0, 40.0)
    qp = activation_qparams(r.lo, r.hi)
    assert qp.zero_point == 0                         # all 256 levels on [0, hi]
    # the exact zeros are not counted as rounding error: without the zero count the search
    # would see 150k more values paying step^2 / 12 and pick a narrower range
    h = HistogramObserver(40.0)
    h.update(x)
    assert h.zeros == int(np.sum(x == 0))
    h.zeros = 0
    lo2, hi2 = auto_range(h, 0.0, 40.0)
    assert hi2 < r.hi


def test_one_sided_negative_and_unobserved_side():
    rng = np.random.default_rng(3)
    x = -np.abs(rng.normal(0.0, 1.0, 100_000)).astype(np.float32)
    r = _ranges(x)
    assert r.hi == 0.0 and -6.0 < r.lo < -2.5
    # a tensor with a tiny negative tail gets a range that includes it only if it pays off
    y = np.abs(rng.normal(0.0, 1.0, 100_000)).astype(np.float32)
    y[0] = -1e-3
    r = _ranges(y)
    assert -1e-2 <= r.lo <= 0.0 and r.hi > 2.5


def test_search_matches_the_real_error_on_a_skewed_distribution():
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.gamma(2.0, 1.0, 60_000), -rng.exponential(0.3, 40_000)])
    x = x.astype(np.float32)
    r = _ranges(x)
    assert _qdq_mse(x, r.lo, r.hi) <= 1.1 * _brute_force(x, 80)


def test_empty_tensor_and_calibrate_default():
    assert _ranges(np.zeros(0, np.float32)).hi == 0.0
    data = [{"x": np.arange(6, dtype=np.float32)}]
    r = calibrate(data, lambda s: {}, ["x"])
    assert r["x"].lo == 0.0 and abs(r["x"].hi - 5.0) < 0.01


def test_auto_is_the_default_everywhere():
    assert DEFAULT_CALIBRATOR == "auto" == CALIBRATORS[0]
    assert Calibrator().method == "auto"
    assert api.QuantizeConfig("c.npz").calibrator == "auto"
    assert "auto" in api.QuantizeConfig.__doc__
    assert tuple(CLI_CALIBRATORS) == tuple(CALIBRATORS)
    out = CliRunner().invoke(main, ["compile", "--help"]).output
    flat = " ".join(out.split())
    assert "--calibrator [auto|minmax|percentile|entropy]" in flat
    assert "[default: auto]" in flat.split("--calibrator", 1)[1].split("--percentile")[0]
