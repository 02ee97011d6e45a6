"""`mlcc bench` and mlcc.bench(): they run and report every promised figure. No timing is
asserted (benchmarks are not tests): only that the numbers exist and are consistent."""
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
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
                     output_dir=tmp_path / "kept", isolation="shared")
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
    assert res.isolation == "shared" and "both engines in one process" in res.report()
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


DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits" / "digits_cnn.onnx"


def test_bench_two_threads_runs_each_engine_alone_alternated(monkeypatch):
    """With 2 threads (isolation auto), each engine runs in child processes of its own (not
    this one, a new one each round), in the order mlcc, onnxruntime, mlcc, onnxruntime, their
    timed parts one after the other; the numbers are sane and the outputs compared."""
    from mlcc import benchmark

    children = []
    real = benchmark.run_worker

    def recording(argv, what, timeout_s=benchmark.CHILD_TIMEOUT_S):
        children.append(real(argv, what, timeout_s))
        return children[-1]

    monkeypatch.setattr(benchmark, "run_worker", recording)
    res = mlcc.bench(DIGITS, threads=2, runs=2, rounds=2)
    assert res.isolation == "processes"
    assert [c["engine"] for c in children] == ["mlcc", "onnxruntime"] * 2
    pids = [c["pid"] for c in children]
    assert len(set(pids)) == 4 and os.getpid() not in pids
    assert all(c["threads"] == 2 for c in children)
    for before, after in zip(children, children[1:]):      # one engine at a time
        assert before["end"] <= after["start"]
    for t in (res.mlcc, res.onnxruntime):
        assert t.samples == 2 * 2 and t.calls_per_sample >= 1
        assert 0 < t.median_s <= t.p90_s < 1.0
        assert math.isclose(t.gflops, res.flops / t.median_s / 1e9)
    assert math.isclose(res.ratio, res.mlcc.median_s / res.onnxruntime.median_s)
    assert res.outputs_agree and res.max_abs_error < 1e-3
    report = res.report()
    assert "each engine in its own process, alternated" in report
    assert "mode: separate processes" in report and "2 rounds" in report
    assert "| mlcc |" in report and "| onnxruntime |" in report
    if sys.platform.startswith("linux"):   # each child's worker CPU share, in the mode line
        assert all(c["helper_cpu"] is not None and c["helper_cpu"] >= 0 for c in children)
        assert "the worker's CPU time over the caller's, lowest round: mlcc " in report


def test_helper_cpu_is_the_busiest_other_threads_share():
    """benchmark_worker.helper_cpu: the busiest other thread's CPU time over the caller's
    between two readings; None without a reading, another thread or caller time."""
    from mlcc.benchmark_worker import helper_cpu
    before = {1: 100, 2: 50, 3: 0}
    assert helper_cpu(before, {1: 300, 2: 150, 3: 20}, 1) == 0.5
    assert helper_cpu(before, {1: 300, 2: 50, 3: 0, 4: 400}, 1) == 2.0   # a new thread
    assert helper_cpu(None, {1: 300}, 1) is None
    assert helper_cpu(before, {1: 300}, 1) is None
    assert helper_cpu(before, {1: 100, 2: 60}, 1) is None


def test_summarize_rounds_takes_medians_over_rounds():
    from mlcc.benchmark import summarize_rounds
    rounds = [[1.0, 2.0, 3.0], [10.0, 10.0, 10.0], [2.0, 2.0, 100.0]]
    t = summarize_rounds("e", rounds, 4, flops=2_000_000_000, peak_gflops=2.0)
    assert t.median_s == 2.0                  # medians 2, 10, 2
    assert t.p90_s == 10.0                    # p90s 2.8, 10, 80.4
    assert t.samples == 9 and t.calls_per_sample == 4
    assert t.gflops == 1.0 and t.peak_fraction == 0.5


def test_a_failing_benchmark_child_is_a_clear_error(tmp_path):
    """A child that cannot load its engine fails the bench with the engine, the round and
    its stderr; nothing is left running."""
    from mlcc.benchmark import WorkerError, measure_in_processes
    feeds = {"input": np.zeros((1, 1, 8, 8), np.float32)}
    (tmp_path / "empty").mkdir()
    with pytest.raises(WorkerError) as exc:
        measure_in_processes(DIGITS, tmp_path / "empty", feeds, threads=2, rounds=1,
                             runs=1, timeout_s=120)
    msg = str(exc.value)
    assert "the mlcc benchmark process (round 1 of 1, 2 threads): failed (exit status" in msg
    assert "manifest" in msg, msg           # the child's own error, from its stderr


def test_a_hanging_or_killed_child_is_reported_and_reaped():
    from mlcc.benchmark import WorkerError, run_worker
    hang = [sys.executable, "-c", "import os, sys, time; print(os.getpid(), file=sys.stderr, "
                                  "flush=True); time.sleep(60)"]
    with pytest.raises(WorkerError, match=r"^hanger: no result after 3 s, killed; its stderr: "
                                          r"\d+") as exc:
        run_worker(hang, "hanger", timeout_s=3)
    pid = int(str(exc.value).rsplit(" ", 1)[1])
    with pytest.raises(ProcessLookupError):     # killed and reaped: no stray process
        os.kill(pid, 0)
    abort = [sys.executable, "-c", "import os; os.abort()"]
    with pytest.raises(WorkerError, match="aborter: failed \\(killed by signal 6\\)"):
        run_worker(abort, "aborter", timeout_s=60)
    silent = [sys.executable, "-c", "print('not json')"]
    with pytest.raises(WorkerError, match="silent: no JSON result on stdout \\(not json\\)"):
        run_worker(silent, "silent", timeout_s=60)


def test_bench_refuses_an_unknown_isolation(tiny_static_path):
    with pytest.raises(InputError, match="isolation must be one of"):
        mlcc.bench(tiny_static_path, isolation="threads")
    r = CliRunner().invoke(main, ["bench", str(tiny_static_path), "--isolation", "threads"])
    assert r.exit_code == 2


def test_onnxruntime_runner_times_a_model_whose_declared_output_rank_is_wrong():
    """ddddocr's captcha CRNN declares its output [1, seqlen] and produces [seqlen, 1,
    classes]: onnxruntime runs it with a warning, but IOBinding refuses the output from the
    second run on (`mlcc bench` failed inside onnxruntime). The runner times plain runs
    instead, and every call gives the real output."""
    import fetch_models as fm

    from mlcc.benchmark import onnxruntime_runner
    try:
        path = fm.fetch("ddddocr_old")
    except fm.DownloadError as exc:
        pytest.skip(f"cannot download the ddddocr wheel: {exc}")
    x = np.random.default_rng(0).random((1, 1, 64, 97), np.float32)
    call, outs = onnxruntime_runner(str(path), {"input1": x}, 1)
    for _ in range(3):
        call()
    (out,) = outs.values()
    assert out.ndim == 3 and out.shape[1:] == (1, 8210), out.shape


def test_helper_cpu_note_names_only_starved_engines():
    """The mode line's note gives each engine's lowest helper_cpu and calls an engine starved
    only below api.STARVED_HELPER (a quiet run reads 0.97-1.00)."""
    from mlcc.api import _helper_cpu_note
    quiet = [{"engine": "mlcc", "helper_cpu": 0.98}, {"engine": "onnxruntime", "helper_cpu": 1.0},
             {"engine": "mlcc", "helper_cpu": 0.99}]
    assert _helper_cpu_note(quiet).endswith("mlcc 0.98, onnxruntime 1.00")
    busy = quiet + [{"engine": "mlcc", "helper_cpu": 0.01}]
    assert "mlcc 0.01" in _helper_cpu_note(busy) and "(mlcc: a worker waited" in \
        _helper_cpu_note(busy)
    assert _helper_cpu_note([{"engine": "mlcc", "helper_cpu": None}]) == ""
