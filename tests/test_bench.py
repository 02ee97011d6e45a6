"""`mlcc bench` and mlcc.bench(): they run and report every promised figure. No timing is
asserted (benchmarks are not tests): only that the numbers exist and are consistent."""
import math
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import mlcc
from mlcc.benchmark import TABLE_COLUMNS, machine_peak, markdown_table, peak_of
from mlcc.cli import main
from mlcc.errors import InputError
from mlcc.targets.target import load_target


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


def test_peak_measured_on_the_host_described_elsewhere():
    """The host target's peak is measured (a positive figure, the description named beside
    it); a target whose binaries do not run here keeps the description's."""
    host = load_target("x86")
    peak = machine_peak(host)
    assert peak.gflops_per_core > 0 and "measured on this machine" in peak.assumption
    assert "128-bit" in peak.assumption and "x86.yaml" in peak.assumption
    cross = SimpleNamespace(name="board", path="", vector_bits=128, is_host=False,
                            cpu={"ghz": 2.0, "fma_units": 1})
    assert machine_peak(cross).gflops_per_core == 2.0 * 1 * 4 * 2


def test_bench_refuses_bad_counts(tiny_static_path):
    with pytest.raises(InputError):
        mlcc.bench(tiny_static_path, threads=0)
    r = CliRunner().invoke(main, ["bench", str(tiny_static_path), "--runs", "0"])
    assert r.exit_code == 2


def test_ab_models_compares_a_pass_left_out(tiny_static_path, tmp_path, capsys):
    """bench/ab_models.py, the A/B tool the pass measurements in docs/performance-log.md come
    from: leaving fuse_activations out must leave a separate Relu kernel in the old build and
    give the same outputs; the report names both builds and gives both clocks."""
    import ab_models

    old, new = ab_models.compile_pair(str(tiny_static_path), ["fuse_activations"], "x86",
                                      None, tmp_path)
    assert "MLCC_UNARY_ACT" in (old / "model.c").read_text()
    assert "MLCC_UNARY_ACT" not in (new / "model.c").read_text()
    ab_models.ab(old, new, threads=2, rounds=3, seed=0)
    out = capsys.readouterr().out
    assert "max |old - new| over the outputs 0\n" in out
    assert "wall clock: old" in out and "caller CPU time: old" in out
    with pytest.raises(SystemExit, match="no pass named fuse_everything"):
        ab_models.compile_pair(str(tiny_static_path), ["fuse_everything"], "x86", None, tmp_path)


def test_peak_memory_counts_each_engines_weights(tmp_path):
    """The memory table of `make bench`: each engine's fresh process must be seen holding
    the 8 MiB of weights of a 1024 x 2048 MatMul (the parent's own peak must not leak in:
    ru_maxrss carries it across fork and exec, which once made every figure 0)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mlcc.benchmark import measure_memory, memory_table
    w = np.random.default_rng(0).standard_normal((1024, 2048)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    mlcc.compile(path, tmp_path / "out", target="x86")
    m = measure_memory(path, tmp_path / "out")
    assert m.weights_size >= w.nbytes
    assert m.mlcc_added >= w.nbytes and m.onnxruntime_added >= w.nbytes
    assert m.ratio == (m.arena_size + m.weights_size) / m.onnxruntime_added
    assert "| mm | " in memory_table([("mm", m)])


def test_measure_settles_before_each_sample_with_threads():
    """With settle_s, every sample follows untimed calls of its own engine (onnxruntime's
    spinning workers must not run into mlcc's samples, nor mlcc's into its)."""
    from mlcc.benchmark import measure
    log = []
    engines = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    res = measure(engines, runs=4, settle_s=0.002)
    assert len(res["a"]) == len(res["b"]) == 4
    calls = dict(zip("ab", map(int, res["_calls"])))
    text = "".join(log)
    # the measured part: rounds ab ba ab ba, so runs a, bb, aa, bb, a of one engine each,
    # each sample its timed calls plus at least one untimed call
    runs = text.replace("ab", "a|b").replace("ba", "b|a").split("|")[-5:]
    assert [r[0] for r in runs] == ["a", "b", "a", "b", "a"]
    for r, samples in zip(runs, (1, 2, 2, 2, 1)):
        assert len(r) >= samples * (calls[r[0]] + 1), (len(r), samples, calls)
