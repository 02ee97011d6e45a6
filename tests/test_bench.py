"""`mlcc bench` and mlcc.bench(): they run and report every promised figure. No timing is
asserted (benchmarks are not tests): only that the numbers exist and are consistent."""
import math
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import mlcc
from mlcc.benchmark import TABLE_COLUMNS, markdown_table, peak_of
from mlcc.cli import main
from mlcc.errors import InputError


def test_cli_bench_prints_the_report(tiny_static_path):
    r = CliRunner().invoke(main, ["bench", str(tiny_static_path), "--runs", "3"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "| engine | median | p90 | GFLOP/s | % of peak | samples x calls |" in out
    assert "| mlcc |" in out and "| onnxruntime |" in out
    for text in ("ratio mlcc/onnxruntime", "peak:", "GHz", "FMA units", "arena", "library",
                 "compile", "outputs: agree", "threads: 1 for both"):
        assert text in out, text


def test_bench_api_result(tiny_model_path, tmp_path):
    res = mlcc.bench(tiny_model_path, shapes={"images": (2, 2, 6, 6)}, runs=3, threads=2,
                     output_dir=tmp_path / "kept")
    assert (tmp_path / "kept" / "libmodel.so").is_file()
    assert res.shapes == {"images": (2, 2, 6, 6)} and res.threads == 2
    # conv 4x2x3x3 on 6x6 (same padding) per image, then Gemm 144 -> 5
    assert res.flops == 2 * (2 * 4 * 36 * 18) + 2 * (2 * 5 * 144)
    for t in (res.mlcc, res.onnxruntime):
        assert t.samples == 3 and t.calls_per_sample >= 1
        assert 0 < t.median_s <= t.p90_s
        assert math.isclose(t.gflops, res.flops / t.median_s / 1e9)
    # both engines run 2 threads: each share is of the peak of 2 cores
    for t in (res.mlcc, res.onnxruntime):
        assert math.isclose(t.peak_fraction * 2 * res.peak.gflops_per_core, t.gflops)
    assert math.isclose(res.ratio, res.mlcc.median_s / res.onnxruntime.median_s)
    assert res.outputs_agree and res.arena_size > 0 and res.library_size > 0
    assert res.compile_time_s > 0 and res.kernel_calls >= 2
    assert "2 intra-op threads" in res.report() and "a pool of 2 threads" in res.report()
    table = markdown_table([("tiny", res)])
    assert table.splitlines()[0] == "| " + " | ".join(TABLE_COLUMNS) + " |"
    assert "| tiny | 2x2x6x6 |" in table and "Geometric mean" in table


def test_peak_from_the_target_description():
    target = SimpleNamespace(name="t", path="", vector_bits=256,
                             cpu={"ghz": 3.0, "fma_units": 2})
    peak = peak_of(target)
    assert peak.gflops_per_core == 3.0 * 2 * 8 * 2
    assert "3 GHz" in peak.assumption and "8 fp32 lanes" in peak.assumption
    unknown = peak_of(SimpleNamespace(name="t", path="", vector_bits=128, cpu={}))
    assert math.isnan(unknown.gflops_per_core) and "unknown" in unknown.assumption


def test_bench_refuses_bad_counts(tiny_static_path):
    with pytest.raises(InputError):
        mlcc.bench(tiny_static_path, threads=0)
    r = CliRunner().invoke(main, ["bench", str(tiny_static_path), "--runs", "0"])
    assert r.exit_code == 2
