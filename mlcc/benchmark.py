"""Timing a compiled model against onnxruntime in one process: the machinery behind
mlcc.bench() (api.py) and `mlcc bench`.

Method: both engines get the same inputs and preallocated outputs (mlcc: prepare()'s call of
NAME_run_v; onnxruntime: run_with_iobinding on bound numpy buffers, through bound_call), so
neither pays for Python-side allocation or a Python function around the call. After warm-up,
each engine's calls are grouped into samples of at least
MIN_SAMPLE_S (many calls per sample for models of a few microseconds, one for large ones), and
the samples of the two engines are interleaved (alternating which goes first), so that a slow
phase of a shared machine hits both. Latency = sample time / calls per sample; the report gives
the median and the 90th percentile over samples.
"""
from __future__ import annotations

import functools
import gc
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import resources
from .errors import MlccError

MIN_SAMPLE_S = 0.002        # a sample lasts at least this long (timer noise << 1%)
WARMUP_S = 0.3              # per engine, and at least WARMUP_CALLS calls
WARMUP_CALLS = 3
TIME_BUDGET_S = 10.0        # total timed time when runs are not given
SETTLE_S = 0.1              # with threads: untimed calls before each sample (measure)
MIN_RUNS, MAX_RUNS = 10, 300
ROUNDS = 5                  # separate processes (threads > 1): 2 x ROUNDS children
CHILD_TIMEOUT_S = 600.0     # one child's start, load, warm-up and timed budget
ENGINES = ("mlcc", "onnxruntime")
SHARED, PROCESSES = "shared", "processes"     # both engines in one process / each alone
ISOLATIONS = ("auto", SHARED, PROCESSES)      # auto: PROCESSES with threads > 1


@dataclass
class Timing:
    engine: str
    median_s: float
    p90_s: float
    samples: int
    calls_per_sample: int
    gflops: float               # at the median latency
    peak_fraction: float        # of the peak of the cores this engine may use

    @property
    def median_ms(self) -> float:
        return self.median_s * 1e3


@dataclass
class Peak:
    gflops_per_core: float      # fp32
    assumption: str


@dataclass
class BenchResult:
    model: str
    target: str
    shapes: dict
    threads: int
    flops: int                  # per inference, from the OpDefs' flops() (as mlcc inspect)
    mlcc: Timing
    onnxruntime: Timing
    peak: Peak
    arena_size: int
    weights_size: int
    library_size: int
    compile_time_s: float
    kernel_calls: int
    max_abs_error: float        # mlcc vs onnxruntime on the timed inputs
    outputs_agree: bool
    notes: list[str] = field(default_factory=list)
    isolation: str = SHARED     # SHARED: one process, interleaved; PROCESSES: see notes
    # the engine in the `onnxruntime` field: "onnxruntime", or "TFLM" (TensorFlow Lite Micro's
    # reference kernels) for a .tflite model
    reference: str = "onnxruntime"

    @property
    def ratio(self) -> float:
        """mlcc median latency / onnxruntime median latency (< 1: mlcc is faster)."""
        return self.mlcc.median_s / self.onnxruntime.median_s

    @property
    def mode(self) -> str:
        return ("each engine in its own process, alternated" if self.isolation == PROCESSES
                else "both engines in one process, interleaved")

    def report(self) -> str:
        shapes = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in self.shapes.items())
        lines = [
            f"mlcc bench {self.model}: target {self.target}, inputs {shapes or '(as declared)'}, "
            f"{self.threads} thread{'s' * (self.threads != 1)}, {self.mode}",
            f"compile {self.compile_time_s:.2f} s (graph, C generation and the C compiler), "
            f"{self.kernel_calls} kernel calls; arena {format_bytes(self.arena_size)}, weights "
            f"{format_bytes(self.weights_size)}, library {format_bytes(self.library_size)}",
            f"work: {self.flops / 1e9:.4g} GFLOP per inference (the OpDefs' flops(), as "
            f"mlcc inspect counts them)",
            "",
            "| engine | median | p90 | GFLOP/s | % of peak | samples x calls |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for t in (self.mlcc, self.onnxruntime):
            lines.append(f"| {t.engine} | {format_seconds(t.median_s)} | "
                         f"{format_seconds(t.p90_s)} | {t.gflops:.2f} | "
                         f"{100 * t.peak_fraction:.1f}% | {t.samples} x {t.calls_per_sample} |")
        lines += [
            "",
            f"ratio mlcc/{self.reference} (median latency): {self.ratio:.3f} "
            f"({'mlcc faster' if self.ratio < 1 else self.reference + ' faster'})",
            f"peak: {self.peak.gflops_per_core:.1f} GFLOP/s per core assumed: "
            f"{self.peak.assumption}",
            f"outputs: {'agree' if self.outputs_agree else 'DIFFER'} (max abs error "
            f"{self.max_abs_error:.3g} vs {self.reference})",
        ]
        lines += self.notes
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------- a range of sizes

RANGE_SIZES = 5             # default sizes a range build is timed at: the ends and 3 between


def range_sizes(dims: list[dict], count: int = RANGE_SIZES) -> list[tuple[int, ...]]:
    """Sizes to time a build of dynamic dimensions at (`dims`: manifest.json's, each with
    "min" and "max"): every dimension at the same step of a geometric progression from its
    smallest to its largest size (32..1280: 32, 80, 202, 509, 1280; 1..8: 1, 2, 3, 5, 8), so
    that small sizes, where fixed costs weigh most, are seen as well as the large ones."""
    out: list[tuple[int, ...]] = []
    for k in range(count):
        f = k / (count - 1) if count > 1 else 1.0
        sizes = tuple(min(d["max"], max(d["min"], round(d["min"] * (d["max"] / d["min"]) ** f)))
                      for d in dims)
        if sizes not in out:
            out.append(sizes)
    return out


@dataclass
class RangeRow:
    """One size of a range bench: the range build, a static build of that size and the
    reference, timed interleaved in one process."""
    sizes: tuple[int, ...]
    range: Timing
    static: Timing
    reference: Timing
    static_arena: int
    range_error: float          # max abs error vs the reference, range build
    static_error: float
    outputs_agree: bool         # both builds agree with the reference

    @property
    def vs_static(self) -> float:
        return self.range.median_s / self.static.median_s

    @property
    def vs_reference(self) -> float:
        return self.range.median_s / self.reference.median_s


@dataclass
class RangeBenchResult:
    model: str
    target: str
    shapes: str                 # the --shape text, ranges as LO..HI
    dims: list[str]             # the dynamic dimensions' names, in the order of sizes
    threads: int
    rows: list[RangeRow]
    arena_size: int             # of the range build
    static_max_arena: int       # of a static build at the largest sizes
    weights_size: int
    library_size: int
    compile_time_s: float
    notes: list[str] = field(default_factory=list)
    reference: str = "onnxruntime"

    @property
    def worst_vs_static(self) -> float:
        return max(r.vs_static for r in self.rows)

    def report(self) -> str:
        ref = self.reference
        lines = [
            f"mlcc bench {self.model}: target {self.target}, inputs {self.shapes}, "
            f"{self.threads} thread{'s' * (self.threads != 1)}: one range build against a "
            f"static build of each size and {ref}, the three interleaved in one process",
            f"range build: compile {self.compile_time_s:.2f} s, arena "
            f"{format_bytes(self.arena_size)} (a static build at the largest sizes: "
            f"{format_bytes(self.static_max_arena)}, ratio "
            f"{self.arena_size / max(self.static_max_arena, 1):.3f}), weights "
            f"{format_bytes(self.weights_size)}, library {format_bytes(self.library_size)}",
            "",
            "| " + " | ".join(self.dims) + f" | range | static | {ref} | range/static | "
            f"range/{ref} | static arena | outputs |",
            "|" + "---:|" * (len(self.dims) + 6) + "---|",
        ]
        for r in self.rows:
            lines.append(
                "| " + " | ".join(map(str, r.sizes)) + f" | {format_seconds(r.range.median_s)} | "
                f"{format_seconds(r.static.median_s)} | {format_seconds(r.reference.median_s)} | "
                f"{r.vs_static:.3f} | {r.vs_reference:.3f} | {format_bytes(r.static_arena)} | "
                + ("agree" if r.outputs_agree else
                   f"DIFFER (max abs error {r.range_error:.3g}, static {r.static_error:.3g})")
                + " |")
        lines += ["", f"worst range/static (median latency): {self.worst_vs_static:.3f}"]
        lines += self.notes
        return "\n".join(lines) + "\n"


def format_seconds(s: float) -> str:
    if s < 1e-3:   # 0.617 us (a tiny model's call), 15.2 us
        return f"{s * 1e6:.3f} us" if s < 1e-6 else f"{s * 1e6:.1f} us"
    if s < 1.0:
        return f"{s * 1e3:.3g} ms" if s < 0.1 else f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def format_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def peak_of(target) -> Peak:
    """fp32 peak of one core from the target description: GHz x FMA units x vector lanes x 2."""
    ghz = float(target.cpu.get("ghz", 0) or 0)
    fma = float(target.cpu.get("fma_units", 0) or 0)
    lanes = max(target.vector_bits // 32, 1)
    where = f"target {target.name}" + (f" ({Path(target.path).name})" if target.path else "")
    if ghz <= 0 or fma <= 0:
        return Peak(math.nan, f"unknown ({where} gives no cpu.ghz and cpu.fma_units)")
    return Peak(ghz * fma * lanes * 2,
                f"{ghz:g} GHz x {fma:g} FMA units x {lanes} fp32 lanes "
                f"({target.vector_bits}-bit vectors) x 2 FLOP per FMA, from {where}")


# One core's fp32 peak, measured: 12 independent chains of multiply-adds on the target's
# widest vectors, so that neither the FMA latency nor anything but the FMA units limits it.
# A description's GHz x FMA units x lanes is wrong on CPUs that split wide vectors (Zen 4
# runs 512-bit FMAs on 256-bit units: half the peak of a Zen 5 with the same flags).
_PEAK_LOOP = r"""
typedef float vf __attribute__((vector_size(VECTOR_BYTES)));
#define CHAIN(x) x = x * m + a
__attribute__((visibility("default"))) float mlcc_peak_loop(long iters, float seed) {
    vf zero = {0}, m = zero + seed * 0.99999f, a = zero + seed * 1e-6f;
    vf c0 = m + seed, c1 = c0 + 1, c2 = c0 + 2, c3 = c0 + 3, c4 = c0 + 4, c5 = c0 + 5,
       c6 = c0 + 6, c7 = c0 + 7, c8 = c0 + 8, c9 = c0 + 9, c10 = c0 + 10, c11 = c0 + 11;
    for (long i = 0; i < iters; i++) {
        CHAIN(c0); CHAIN(c1); CHAIN(c2); CHAIN(c3); CHAIN(c4); CHAIN(c5);
        CHAIN(c6); CHAIN(c7); CHAIN(c8); CHAIN(c9); CHAIN(c10); CHAIN(c11);
    }
    vf s = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)) + ((c8 + c9) + (c10 + c11));
    float total = 0;
    for (unsigned i = 0; i < sizeof s / sizeof s[0]; i++) total += s[i];
    return total;
}
"""
_PEAK_CHAINS = 12


@functools.lru_cache(maxsize=None)
def _measure_peak(cc: str, cflags: tuple[str, ...], ldflags: tuple[str, ...],
                  vector_bits: int) -> float:
    """GFLOP/s of _PEAK_LOOP built with this toolchain, best of 5 runs of ~30 ms each."""
    import ctypes
    with tempfile.TemporaryDirectory(prefix="mlcc-peak-") as tmp:
        src, lib = Path(tmp) / "peak.c", Path(tmp) / "peak.so"
        src.write_text(_PEAK_LOOP)
        subprocess.run([cc, *cflags, f"-DVECTOR_BYTES={vector_bits // 8}", "-o", str(lib),
                        str(src), *ldflags], check=True, capture_output=True, timeout=60)
        loop = ctypes.CDLL(str(lib)).mlcc_peak_loop
        loop.argtypes, loop.restype = [ctypes.c_long, ctypes.c_float], ctypes.c_float
        iters = 10_000
        while _timed(lambda: loop(iters, 1.0)) < 0.01:      # size one run to about 30 ms
            iters *= 4
        iters *= 3
        best = min(_timed(lambda: loop(iters, 1.0)) for _ in range(5))
    flops = iters * _PEAK_CHAINS * (vector_bits // 32) * 2
    return flops / best / 1e9


def _timed(call: Callable[[], object]) -> float:
    """CPU seconds of the calling thread: time the machine gave to other jobs is not counted."""
    t0 = time.thread_time()
    call()
    return time.thread_time() - t0


def machine_peak(target) -> Peak:
    """The peak of one core of this machine measured with the target's own compiler and
    flags, when its libraries run here (a host target whose compiler is installed); the
    description's peak (peak_of) otherwise. Both are named in the assumption."""
    described = peak_of(target)
    if not (target.is_host and target.compiler_found()):
        return described
    tc = target.toolchain
    try:
        ldflags = tuple(tc.ldflags) + (() if "-shared" in tc.ldflags else ("-shared",))
        measured = _measure_peak(tc.cc, tuple(tc.cflags), ldflags,
                                 max(target.vector_bits, 128))
    except (OSError, subprocess.SubprocessError):
        return described
    return Peak(measured, f"measured on this machine: {_PEAK_CHAINS} chains of "
                          f"{max(target.vector_bits, 128)}-bit multiply-adds on one core, "
                          f"built with {target.name}'s compiler and flags; target "
                          f"{target.name} describes {described.gflops_per_core:.0f}: "
                          f"{described.assumption}")


def onnxruntime_session(model, opts):
    """An onnxruntime CPU session of `model` (a path or serialized bytes). onnxruntime refusing
    to load it (its own checks are stricter in places: shape inference inside If branches that
    mlcc compiles only once bound) is a fact about the model, not a bug of mlcc."""
    import onnxruntime as ort
    try:
        return ort.InferenceSession(model if isinstance(model, bytes) else str(model), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:    # onnxruntime's pybind errors share no public base class
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MlccError(f"onnxruntime, the reference mlcc compares against, cannot load the "
                        f"model: {first}") from None


def onnxruntime_runner(model_path: str, feeds: dict[str, np.ndarray], threads: int
                       ) -> tuple[Callable[[], None], dict[str, np.ndarray]]:
    """(call, outputs): onnxruntime with `threads` intra-op threads and every graph
    optimization, inputs and outputs bound to preallocated CPU buffers."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = onnxruntime_session(model_path, opts)
    names = [o.name for o in sess.get_outputs()]
    # One plain run tells the output shapes; the bound buffers then get reused.
    first = dict(zip(names, sess.run(names, feeds)))
    outs = {n: np.empty_like(a) for n, a in first.items()}
    inputs = {n: np.ascontiguousarray(a) for n, a in feeds.items()}
    binding = sess.io_binding()
    for name, arr in inputs.items():
        binding.bind_cpu_input(name, arr)
    for name, arr in outs.items():
        binding.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
    try:
        sess.run_with_iobinding(binding)
    except Exception:                       # noqa: BLE001 - onnxruntime raises plain ones
        # A model whose declared output rank differs from what it produces (ddddocr's CRNN
        # declares [1, seqlen] and gives [seqlen, 1, classes]) runs with a warning, but
        # IOBinding refuses its outputs (bound by buffer, or reused after a first run): time
        # plain runs, which allocate those outputs at every call.
        return bound_call(sess.run, names, inputs, keep=(sess, inputs)), first
    # the outputs are bound by address: the call keeps them alive, like the session and the
    # inputs (a caller that dropped them made onnxruntime write into freed memory)
    return bound_call(sess.run_with_iobinding, binding, keep=(sess, inputs, outs)), outs


def bound_call(method, *args, keep=None) -> Callable[[], object]:
    """method(*args) as a call of no arguments, with no Python function around it (mlcc's
    prepare() gives such a call, so both engines pay the same Python loop); it holds `keep`.
    For a method written in Python (onnxruntime's run_with_iobinding): a copy of its function
    whose defaults are `args`, bound to the same object, which costs what `run(binding)`
    written in the loop costs. A closure would add a Python frame, and functools.partial a
    call from C into Python (CPython 3.11 inlines only Python-to-Python calls). Anything
    else: functools.partial."""
    func, obj = getattr(method, "__func__", None), getattr(method, "__self__", None)
    if isinstance(func, types.FunctionType) and obj is not None:
        code, defaults = func.__code__, func.__defaults__ or ()
        rest = code.co_argcount - 1 - len(args)     # parameters after self and args
        if 0 <= rest <= len(defaults):
            copy = types.FunctionType(code, func.__globals__, func.__name__,
                                      args + defaults[len(defaults) - rest:], func.__closure__)
            copy.__kwdefaults__ = func.__kwdefaults__
            copy.keep = keep
            return types.MethodType(copy, obj)
    call = functools.partial(method, *args)
    call.keep = keep
    return call


def _time_calls(call: Callable, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    return time.perf_counter() - t0


def _warm_up(call: Callable) -> float:
    """Runs `call` for WARMUP_S (at least WARMUP_CALLS times); returns the fastest call."""
    best, spent, calls = math.inf, 0.0, 0
    while calls < WARMUP_CALLS or spent < WARMUP_S:
        t = _time_calls(call, 1)
        best, spent, calls = min(best, t), spent + t, calls + 1
    return best


def _run_for(call: Callable, seconds: float) -> None:
    """Untimed calls for about `seconds` (at least one)."""
    end = time.perf_counter() + seconds
    call()
    while time.perf_counter() < end:
        call()


def measure(engines: dict[str, Callable], runs: int | None = None,
            settle_s: float = 0.0, budget_s: float = TIME_BUDGET_S) -> dict[str, list[float]]:
    """Interleaved per-call latencies (seconds, one per sample) of each engine.

    runs: samples per engine; None picks as many as fit budget_s (MIN_RUNS..MAX_RUNS).
    settle_s > 0 (engines with several threads): before each sample, run the same engine
    untimed for that long. onnxruntime's workers spin for 20-50 ms after a run returns
    (measured here), and a spinning worker of one engine takes the CPU the other's worker
    needs: timed right after onnxruntime on 2 threads, mlcc's MobileNetV2 took 5.5 ms instead
    of 2.9-3.4. Resting instead (a sleep, then one call) was no better (5.5 ms): on this VM a
    worker that has slept a while is slow to come back. Each sample so measures an engine in
    the steady state of back-to-back calls, with its own workers warm and the other's asleep.
    Returns {engine: [latency per sample]} and, under the key "_calls", calls per sample."""
    per_call = {name: _warm_up(call) for name, call in engines.items()}
    calls = {name: max(1, math.ceil(MIN_SAMPLE_S / max(t, 1e-9))) for name, t in per_call.items()}
    if runs is None:
        pair = sum(per_call[n] * (calls[n] + (settle_s > 0)) + settle_s for n in engines)
        runs = int(min(MAX_RUNS, max(MIN_RUNS, budget_s / max(pair, 1e-9))))
    names = list(engines)
    samples: dict[str, list[float]] = {n: [] for n in names}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(runs):
            for name in names if i % 2 == 0 else names[::-1]:
                if settle_s > 0:
                    _run_for(engines[name], settle_s)
                samples[name].append(_time_calls(engines[name], calls[name]) / calls[name])
    finally:
        if enabled:
            gc.enable()
    samples["_calls"] = [float(calls[n]) for n in names]
    return samples


def summarize(engine: str, latencies: list[float], calls: int, flops: int,
              peak_gflops: float) -> Timing:
    lat = np.asarray(latencies)
    median, p90 = float(np.median(lat)), float(np.percentile(lat, 90))
    gflops = flops / median / 1e9 if median > 0 else math.nan
    return Timing(engine, median, p90, len(latencies), calls, gflops,
                  gflops / peak_gflops if peak_gflops > 0 else math.nan)


def summarize_rounds(engine: str, rounds: list[list[float]], calls: int, flops: int,
                     peak_gflops: float) -> Timing:
    """A Timing over several rounds (separate processes): the median and the p90 are the
    medians over the rounds of each round's median and p90 (a round in a slow phase of the
    machine moves them less than pooling its samples would); samples counts all rounds."""
    per_round = [summarize(engine, lat, calls, flops, peak_gflops) for lat in rounds]
    median = float(np.median([t.median_s for t in per_round]))
    p90 = float(np.median([t.p90_s for t in per_round]))
    gflops = flops / median / 1e9 if median > 0 else math.nan
    return Timing(engine, median, p90, sum(len(lat) for lat in rounds), calls, gflops,
                  gflops / peak_gflops if peak_gflops > 0 else math.nan)


# ------------------------------------------------------------------- separate processes

class WorkerError(MlccError):
    """A benchmark child process crashed, hung or gave no result."""


def save_arrays(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """An .npz of named arrays whatever their names (np.savez's keywords would clash with
    its own parameters): the arrays by position, their names in `names`."""
    np.savez(path, np.array(list(arrays), dtype=str), *arrays.values())


def load_arrays(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        names = [str(n) for n in z["arr_0"]]
        return {n: z[f"arr_{i + 1}"] for i, n in enumerate(names)}


def _tail(text, limit: int = 2000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = (text or "").strip()
    return ("..." + text[-limit:]) if len(text) > limit else (text or "(empty)")


def _child_env() -> dict[str, str]:
    """The environment with this mlcc importable first (a checkout used without install)."""
    env = dict(os.environ)
    here = str(resources.import_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def run_worker(argv: list[str], what: str, timeout_s: float = CHILD_TIMEOUT_S) -> dict:
    """Runs one child (argv) to its end and returns the JSON object of its last stdout line.
    A child that exits non-zero, gives no JSON or outlives timeout_s (it is then killed and
    reaped) raises WorkerError with `what` and the end of its stderr."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL, env=_child_env())
    except subprocess.TimeoutExpired as exc:
        raise WorkerError(f"{what}: no result after {timeout_s:g} s, killed; its stderr: "
                          f"{_tail(exc.stderr)}") from None
    if out.returncode != 0:
        how = (f"killed by signal {-out.returncode}" if out.returncode < 0
               else f"exit status {out.returncode}")
        raise WorkerError(f"{what}: failed ({how}); its stderr: {_tail(out.stderr)}")
    lines = out.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        raise WorkerError(f"{what}: no JSON result on stdout ({_tail(out.stdout, 500)}); "
                          f"its stderr: {_tail(out.stderr)}") from None


@dataclass
class ProcessRounds:
    """The results of measure_in_processes, per engine: one entry per round."""
    latencies: dict[str, list[list[float]]]
    calls: dict[str, int]                   # calls per sample (the first round's)
    children: list[dict]                    # every child's JSON, in the order they ran
    outputs: dict[str, dict[str, np.ndarray]]


def measure_in_processes(model_path: str | Path, folder: str | Path,
                         feeds: dict[str, np.ndarray], threads: int, rounds: int = ROUNDS,
                         budget_s: float | None = None, runs: int | None = None,
                         settle_s: float = SETTLE_S, timeout_s: float = CHILD_TIMEOUT_S,
                         python: str = sys.executable,
                         ort_feeds: dict[str, np.ndarray] | None = None) -> ProcessRounds:
    """Each engine alone in its own process (python -m mlcc.benchmark_worker), one process
    per engine and round, in the order mlcc, onnxruntime, mlcc, onnxruntime, ...: only one
    engine's thread pool exists at a time. Each child loads its engine, warms up and times
    for budget_s (default: TIME_BUDGET_S shared over all the children, as in one process),
    or `runs` samples. The first round's children also write their outputs for the check.
    ort_feeds: onnxruntime's inputs where they differ from mlcc's (inputs bound at compile time
    are inputs of the ONNX model only)."""
    budget = TIME_BUDGET_S / (2 * rounds) if budget_s is None else budget_s
    result = ProcessRounds({e: [] for e in ENGINES}, {}, [], {})
    with tempfile.TemporaryDirectory(prefix="mlcc-bench-proc-") as tmp:
        feeds_paths = {"mlcc": Path(tmp) / "feeds.npz", "onnxruntime": Path(tmp) / "feeds.npz"}
        save_arrays(feeds_paths["mlcc"], feeds)
        if ort_feeds is not None:
            feeds_paths["onnxruntime"] = Path(tmp) / "ort-feeds.npz"
            save_arrays(feeds_paths["onnxruntime"], ort_feeds)
        for r in range(rounds):
            for engine in ENGINES:
                argv = [python, "-m", "mlcc.benchmark_worker", engine, "--model",
                        str(model_path), "--folder", str(folder), "--feeds", str(feeds_paths[engine]),
                        "--threads", str(threads), "--budget", repr(budget),
                        "--settle", repr(settle_s)]
                argv += ["--runs", str(runs)] if runs is not None else []
                outs = Path(tmp) / f"{engine}-outputs.npz"
                argv += ["--outputs", str(outs)] if r == 0 else []
                child = run_worker(argv, f"the {engine} benchmark process (round {r + 1} of "
                                         f"{rounds}, {threads} threads)", timeout_s)
                result.children.append(child)
                result.latencies[engine].append([float(x) for x in child["latencies"]])
                result.calls.setdefault(engine, int(child["calls"]))
                if r == 0:
                    result.outputs[engine] = load_arrays(outs)
    return result


# --------------------------------------------------------------------------------- tables

TABLE_COLUMNS = ["model", "input", "GFLOP", "mlcc median", "mlcc p90", "onnxruntime median",
                 "onnxruntime p90", "mlcc/ort", "mlcc GFLOP/s", "mlcc % peak", "ort % peak",
                 "arena", "library", "compile"]


def markdown_table(rows: list[tuple[str, BenchResult]]) -> str:
    """One Markdown table over several bench results, with the geometric mean of the ratios."""
    out = ["| " + " | ".join(TABLE_COLUMNS) + " |",
           "|" + "|".join("---" if i < 2 else "---:" for i in range(len(TABLE_COLUMNS))) + "|"]
    for label, r in rows:
        shape = "; ".join("x".join(map(str, v)) for v in r.shapes.values())
        out.append("| " + " | ".join([
            label, shape, f"{r.flops / 1e9:.3g}",
            format_seconds(r.mlcc.median_s), format_seconds(r.mlcc.p90_s),
            format_seconds(r.onnxruntime.median_s), format_seconds(r.onnxruntime.p90_s),
            f"{r.ratio:.2f}" + ("" if r.outputs_agree else " (outputs differ)"),
            f"{r.mlcc.gflops:.1f}", f"{100 * r.mlcc.peak_fraction:.0f}%",
            f"{100 * r.onnxruntime.peak_fraction:.0f}%",
            format_bytes(r.arena_size), format_bytes(r.library_size),
            f"{r.compile_time_s:.1f} s"]) + " |")
    if rows:
        gm = math.exp(sum(math.log(r.ratio) for _, r in rows) / len(rows))
        out.append(f"\nGeometric mean of mlcc/onnxruntime over {len(rows)} models: {gm:.2f}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- peak memory

# Runs in a fresh interpreter: the peak resident memory (VmHWM) after the imports is
# subtracted from the peak after loading the model and running it once, so that the
# interpreter, numpy and each engine's code are not counted. Inputs are zeros of the compiled
# shapes and types (memory does not depend on the values).
_MEMORY_CHILD = r"""
import json, resource, sys
import numpy as np
engine, model, folder = sys.argv[1:4]
info = json.load(open(folder + "/manifest.json"))
feeds = {i["name"]: np.zeros(i["shape"], i["dtype"]) for i in info["inputs"]}
# inputs bound at compile time are still inputs of the ONNX model
ort_feeds = dict(feeds, **{b["name"]: np.array(b["values"], b["dtype"]).reshape(b["shape"])
                           for b in info.get("bound", []) if "values" in b})
def peak():
    # VmHWM belongs to this address space; ru_maxrss would start from the parent's peak
    # (Linux carries it across fork and exec), the benchmark process with its models loaded
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if engine == "onnxruntime":
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    base = peak()
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    sess.run(None, ort_feeds)
else:
    from mlcc.runtime import load
    base = peak()
    load(folder).run(feeds)
print(json.dumps({"added": peak() - base}))
"""


@dataclass
class MemoryResult:
    arena_size: int             # mlcc's static need, known at compile time
    weights_size: int
    mlcc_added: int             # peak RSS a fresh process adds by loading and one run
    onnxruntime_added: int

    @property
    def ratio(self) -> float:
        """mlcc arena + weights / onnxruntime's added peak RSS (< 1: mlcc needs less); NaN
        when onnxruntime's run stays under the peak its imports reached (tiny models)."""
        if self.onnxruntime_added <= 0:
            return math.nan
        return (self.arena_size + self.weights_size) / self.onnxruntime_added


def peak_memory_added(engine: str, model_path: str | Path, folder: str | Path) -> int:
    """Bytes of peak RSS that loading `engine` ("mlcc" or "onnxruntime") and one inference
    add to a fresh Python process."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, engine, str(model_path),
                          str(folder)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} memory measurement failed: {out.stderr.strip()[-500:]}")
    return int(json.loads(out.stdout.strip().splitlines()[-1])["added"])


def measure_memory(model_path: str | Path, folder: str | Path) -> MemoryResult:
    """mlcc's arena + weights (from the compiled folder's manifest) and both engines' peak."""
    import json

    info = json.loads((Path(folder) / "manifest.json").read_text())
    return MemoryResult(int(info["arena_size"]), int(info["weights_size"]),
                        peak_memory_added("mlcc", model_path, folder),
                        peak_memory_added("onnxruntime", model_path, folder))


MEMORY_COLUMNS = ["model", "mlcc arena", "mlcc weights", "mlcc arena + weights",
                  "mlcc process added", "onnxruntime process added",
                  "mlcc (arena + weights) / ort"]


def memory_table(rows: list[tuple[str, MemoryResult]]) -> str:
    out = ["| " + " | ".join(MEMORY_COLUMNS) + " |",
           "|---|" + "---:|" * (len(MEMORY_COLUMNS) - 1)]
    for label, m in rows:
        out.append("| " + " | ".join([
            label, format_bytes(m.arena_size), format_bytes(m.weights_size),
            format_bytes(m.arena_size + m.weights_size), format_bytes(m.mlcc_added),
            format_bytes(m.onnxruntime_added),
            "-" if math.isnan(m.ratio) else f"{m.ratio:.2f}"]) + " |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------- instructions on a microcontroller
#
# No time can be measured under qemu-system-arm, so `mlcc bench --target cortex-m4` counts
# instructions instead, with the TCG plugin of runtime_c/qemu-icount (built here with the host
# gcc): the firmware runs once with --runs 1 and once with --runs 2, and the difference is
# exactly one inference (no boot, file reading or init); --runs 1 is counted twice to check
# that the count repeats. Per layer, a second build of the firmware calls mlcc_layer_mark()
# around every kernel call (firmware.instrument_layers) and the plugin notes the count there.

ICOUNT_LINE = re.compile(
    r"^icount: insns (\d+) simd (\d+) fp (\d+) simd_mem (\d+) target (\S+)$", re.M)
ICOUNT_MARKS = re.compile(r"^icount: marks((?: \d+)*)$", re.M)



def build_icount_plugin(out_dir: Path, cc: str = "gcc") -> Path:
    """Compiles runtime_c/qemu-icount/icount.c into out_dir/icount.so with the host compiler."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / "icount.so"
    cmd = [cc, "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
           "-fvisibility=hidden", "-o", str(lib),
           str(resources.runtime_c() / "qemu-icount" / "icount.c")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise MlccError(f"{cc} is not installed (apt-get install gcc): it builds the "
                        f"instruction-counting plugin") from None
    if proc.returncode != 0:
        raise MlccError(f"building the instruction-counting qemu plugin failed",
                        detail=proc.stderr)
    return lib


def parse_icount(stderr: str) -> tuple[int, list[int]]:
    """(instructions, marks) from the plugin's lines in QEMU's stderr."""
    found = ICOUNT_LINE.findall(stderr)
    if not found:
        raise MlccError("the instruction-counting plugin wrote no count (does this QEMU load "
                        "TCG plugins?)", detail=stderr[-2000:])
    marks = ICOUNT_MARKS.findall(stderr)
    return int(found[-1][0]), [int(m) for m in marks[-1].split()] if marks else []


@dataclass
class LayerCount:
    nodes: str            # the ONNX nodes of one kernel call
    op: str
    kernel: str
    insns: int


@dataclass
class FirmwareBench:
    """`mlcc bench` on a firmware target: instructions, not time."""
    model: str
    target: str
    description: str
    insns: int                          # one inference
    memory: dict                        # manifest.json "memory"
    arena_size: int
    layers: list[LayerCount] = field(default_factory=list)
    check: str = ""                     # the comparison with onnxruntime, one line
    notes: list[str] = field(default_factory=list)

    def report(self, top: int = 20) -> str:
        ram, flash = self.memory["ram"], self.memory["flash"]
        lines = [f"model {self.model} on {self.target} ({self.description})",
                 f"instructions per inference: {self.insns:,} (counted in QEMU: a lower "
                 f"bound of the cycles of these in-order cores)",
                 f"RAM:   {ram['total']:,} of {ram['size']:,} bytes: arena {ram['arena']:,}, "
                 f"input/output buffers {ram['io']:,}, statics {ram['statics']:,}, stack "
                 f"{ram['stack']:,}",
                 f"flash: {flash['total']:,} of {flash['size']:,} bytes: code "
                 f"{flash['code']:,}, weights {flash['weights']:,}"]
        if self.check:
            lines.append(self.check)
        if self.layers:
            lines += ["", f"{'instructions':>14} {'share':>6}  layer (op, kernel)"]
            order = sorted(range(len(self.layers)), key=lambda i: -self.layers[i].insns)
            for i in sorted(order[:top]):
                layer = self.layers[i]
                lines.append(f"{layer.insns:>14,} {100 * layer.insns / max(self.insns, 1):5.1f}%"
                             f"  {layer.nodes} ({layer.op.split(' ')[0]}, {layer.kernel})")
            if len(self.layers) > top:
                lines.append(f"  ... and {len(self.layers) - top} more layers")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"
