"""`mlcc compile --tune`: the convolution kernel of every layer chosen by timing, on the CPU that
compiles, instead of by the rules of ops/conv_kernels.py (measured on one CPU).

For each distinct float convolution of the model (ops.conv_kernels.layer_key) the variants that
can run it (tuning_candidates) are compiled into one tuning library, a Conv node per variant on
random weights of the layer's shape; the library is built once with a timer around every kernel
call (profiling.py), run on one thread, and per layer the fastest variant whose output matches
the rule's choice is kept, the rule's choice unless another one is at least MARGIN faster (the
build is never slower than the untuned one by more than the measurement's noise). Choices are
cached per CPU model and target (~/.cache/mlcc/tuning) for the kernels' sources and flags that
measured them, so a second compile on the same machine measures nothing new, and written into the output folder as tuning.json, which `--tuning FILE`
reuses elsewhere for a reproducible build. docs/performance.md has the measurements."""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .api import compile as compile_model
from .errors import InputError, TargetError
from .frontend import import_model
from .machine import cpu_model
from .ops import lookup
from .ops.conv_kernels import (ConvLayer, ConvTarget, choose_variant, layer_key,
                               tuning_candidates)
from .passes import run_pipeline
from .profiling import FIELDS, instrument
from .resources import runtime_c
from .runtime import load
from .targets import load_target

MARGIN = 0.03          # a variant replaces the rule's choice when at least this much faster
BUDGET_S = 60.0        # the whole tuning, compile of the tuning library included
MIN_RUNS, MAX_RUNS = 5, 31
FORMAT = 1             # tuning.json's layout


@dataclass
class Tuning:
    """What tune() found: choices by layer key, and per layer the times (ms) it measured."""
    cpu: str
    target: str
    choices: dict[str, str] = field(default_factory=dict)
    times_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    rejected: dict[str, list[str]] = field(default_factory=dict)   # wrong outputs (a bug)
    measured: int = 0          # layers timed now (not found in the cache)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"format": FORMAT, "cpu": self.cpu, "target": self.target,
                "choices": dict(sorted(self.choices.items())),
                "times_ms": {k: dict(sorted(v.items())) for k, v in sorted(self.times_ms.items())},
                **({"rejected": self.rejected} if self.rejected else {})}


def read_tuning(path: str | Path) -> dict[str, str]:
    """The choices of a tuning.json (`--tuning FILE`)."""
    try:
        data = json.loads(Path(path).read_text())
        choices = data["choices"]
        if data.get("format") != FORMAT or not isinstance(choices, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in choices.items()):
            raise ValueError("not a tuning file of this mlcc")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"--tuning {path}: {exc}") from None
    return choices


def _cache_path(cpu: str, target: str) -> Path:
    root = Path(os.environ.get("MLCC_TUNING_CACHE") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlcc" /
                "tuning")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{cpu} {target}").strip("-").lower()
    return root / f"{slug}.json"


def kernels_digest(defines: list[str]) -> str:
    """What the cached times were measured on: the kernels' sources and the target's macros
    (vector width, register tile). Choices measured on other kernels are stale: after the AVX2
    register tile changed, the cache still held the variants timed on the old one."""
    h = hashlib.sha256("\n".join(defines).encode())
    for path in sorted((runtime_c() / "kernels").iterdir()):
        if path.suffix in (".c", ".h"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _read_cache(path: Path, kernels: str) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if data.get("format") == FORMAT and data.get("kernels") == kernels else {}
    except (OSError, ValueError):
        return {}


def conv_layers(model: str | Path, shapes=None, bind=None) -> list[ConvLayer]:
    """The float convolutions of the model as the kernel choice sees them, after the
    optimization passes (fusions change the layers), once each, in graph order."""
    g = run_pipeline(import_model(model, shapes, bind))
    layers: dict[str, ConvLayer] = {}
    for node in g.nodes:
        if node.op_type != "Conv" or node.domain:
            continue
        layer = lookup(node).layer(node, g)
        if layer.const_weights and not any(not isinstance(d, int) for d in layer.window):
            layers.setdefault(layer_key(layer), layer)
    return list(layers.values())


def _tuning_model(jobs: list[tuple[str, ConvLayer, list[str]]], path: Path) -> dict:
    """An ONNX model with one Conv per (layer, variant), on random weights of the layer's shape;
    returns its feeds and writes the model to path."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for i, (_, l, variants) in enumerate(jobs):
        w = l.window
        pb = max(0, (w.oh - 1) * w.sh + (w.kh - 1) * w.dh + 1 - w.ih - w.pt)
        pr = max(0, (w.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1 - w.iw - w.pl)
        x = f"x{i}"
        inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                                    [l.batch, l.cin, w.ih, w.iw]))
        feeds[x] = rng.standard_normal((l.batch, l.cin, w.ih, w.iw)).astype(np.float32)
        weight = rng.standard_normal((l.cout, l.cin_g, w.kh, w.kw)).astype(np.float32)
        weight *= 1.0 / np.sqrt(l.kdim)
        inits += [onnx.numpy_helper.from_array(weight, f"w{i}"),
                  onnx.numpy_helper.from_array(
                      rng.standard_normal(l.cout).astype(np.float32), f"b{i}")]
        for j, variant in enumerate(variants):
            # Each variant reads an input written just before it, as a layer in a model reads
            # its producer's output from the caches: read cold from memory (a tuning model
            # holds every layer's input), a memory-bound kernel timed 6x its time in the
            # model (a depthwise 96x112x112 on Zen 5: 0.58 against 0.09 ms).
            warm = f"x{i}_{j}"
            nodes.append(helper.make_node("Relu", [x], [warm], name=f"warm_{i}_{j}"))
            y = f"y{i}_{j}"
            nodes.append(helper.make_node(
                "Conv", [warm, f"w{i}", f"b{i}"], [y], name=f"tune_{i}_{j}",
                kernel_shape=[w.kh, w.kw], strides=[w.sh, w.sw], dilations=[w.dh, w.dw],
                group=l.groups, pads=[w.pt, w.pl, pb, pr]))
            outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT,
                                                         [l.batch, l.cout, w.oh, w.ow]))
    graph = helper.make_graph(nodes, "mlcc_tuning", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return feeds


def _measure(jobs, folder: Path, feeds: dict, deadline: float) -> tuple[dict, dict]:
    """Per (layer index, variant index) the median wall time of its call (ms), and the outputs
    of one plain run."""
    outputs = load(folder).run(feeds)
    calls, _ = instrument(folder, folder.parent / "timed")
    model = load(folder.parent / "timed", threads=1)
    model._ffi.cdef("double *mlcc_prof(void);")
    prof = model._lib.mlcc_prof()
    run, _ = model.prepare(feeds)
    where = {}
    for c, (_, param) in enumerate(calls):
        m = re.fullmatch(r"p_tune_(\d+)_(\d+)", param)
        if m:
            where[c] = (int(m.group(1)), int(m.group(2)))
    samples = []
    for r in range(MAX_RUNS + 1):
        for k in range(len(calls) * FIELDS):
            prof[k] = 0.0
        run()
        if r:    # the first run warms the caches up
            samples.append(np.frombuffer(model._ffi.buffer(prof, len(calls) * FIELDS * 8))
                           .reshape(len(calls), FIELDS)[:, 0].copy())
        if r >= MIN_RUNS and time.monotonic() > deadline:
            break
    med = np.median(np.array(samples), axis=0) * 1e3
    return {where[c]: float(med[c]) for c in where}, outputs


def tune(model: str | Path, target: str = "x86-native", shapes=None, bind=None,
         budget_s: float = BUDGET_S, use_cache: bool = True) -> Tuning:
    """Times the convolution variants of the model's layers on this CPU (see the module)."""
    start = time.monotonic()
    tgt = load_target(target)
    if not tgt.is_host:
        raise TargetError(f"--tune times kernels on this machine: target {tgt.name} does not "
                          f"run here (use --tuning FILE with choices measured on the device)")
    if tgt.missing_cpu_features():
        raise TargetError(f"--tune times kernels on this machine: target {tgt.name}'s code uses "
                          f"{', '.join(tgt.missing_cpu_features())}, which this CPU does not "
                          f"have (use --tuning FILE with choices measured on such a CPU)")
    conv_target = ConvTarget.from_options(tgt.lowering_options())
    result = Tuning(cpu_model(), tgt.name)
    cache_file = _cache_path(result.cpu, tgt.name)
    kernels = kernels_digest(tgt.defines())
    cache = _read_cache(cache_file, kernels) if use_cache else {}
    jobs = []
    for layer in conv_layers(model, shapes, bind):
        key = layer_key(layer)
        default = choose_variant(layer, conv_target).name
        names = [v.name for v in tuning_candidates(layer, conv_target)]
        if default not in names:
            names.insert(0, default)
        if len(names) < 2:
            result.choices[key] = default
        elif (key in cache.get("choices", {}) and cache["choices"][key] in names
              and set(names) <= set(cache.get("times_ms", {}).get(key, {}))):
            # (timed against every variant that can run it now, not fewer)
            result.choices[key] = cache["choices"][key]
            result.times_ms[key] = cache.get("times_ms", {}).get(key, {})
        else:
            jobs.append((key, layer, [default] + [n for n in names if n != default]))
    if jobs:
        with tempfile.TemporaryDirectory(prefix="mlcc-tune-") as tmp:
            path = Path(tmp) / "tuning.onnx"
            feeds = _tuning_model(jobs, path)
            compile_model(path, Path(tmp) / "out", target=target, conv_choices={
                f"node:tune_{i}_{j}": v for i, (_, _, names) in enumerate(jobs)
                for j, v in enumerate(names)})
            times, outputs = _measure(jobs, Path(tmp) / "out", feeds, start + budget_s)
        for i, (key, _, names) in enumerate(jobs):
            ref = outputs[f"y{i}_0"]
            tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
            ok = {n: times[(i, j)] for j, n in enumerate(names)
                  if (i, j) in times and np.abs(outputs[f"y{i}_{j}"] - ref).max() <= tol}
            bad = [n for n in names if n not in ok]
            if bad:
                result.rejected[key] = bad
            best = min(ok, key=ok.get)
            result.choices[key] = (best if ok[best] < (1.0 - MARGIN) * ok[names[0]]
                                   else names[0])
            result.times_ms[key] = {n: round(t, 4) for n, t in ok.items()}
        result.measured = len(jobs)
        if use_cache:
            merged = {"format": FORMAT, "cpu": result.cpu, "target": tgt.name, "kernels": kernels,
                      "choices": {**cache.get("choices", {}), **result.choices},
                      "times_ms": {**cache.get("times_ms", {}), **result.times_ms}}
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp_file = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp_file.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
            tmp_file.replace(cache_file)
    result.seconds = time.monotonic() - start
    return result
