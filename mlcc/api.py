"""The public Python API: compile, load, verify, inspect, bench. The CLI is a thin layer over
it."""
from __future__ import annotations

import json
import math
import os
import queue
import shlex
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from .version import __version__
from . import benchmark as _bench
from .codegen import generate, model_prefix, write_folder
from .codegen.lower import lower_graph
from .codegen.memory import peak_layers, plan_memory
from .errors import DoesNotFit, InputError, MlccError, UnsupportedError
from .frontend import float64
from .frontend import (bound_record, dim_text, import_model, import_tflite, is_tflite,
                       load_onnx, parse_bind_option,
                       parse_shape_option, specialize, to_graph)
from .ir import Graph, LoopScope, format_type, symbolic
from .ops import lookup, unsupported_reason
from .ops import reference
from .ops.control_flow import DEFAULT_MAX_ITERATIONS
from .ops.registry import describe
from .ops.selection import MAX_OUTPUT
from .passes import INT8_PIPELINE, run_pipeline
from .quant import (DEFAULT_CALIBRATOR, CalibrationSet, QuantOptions, QuantResult, calibrate, needed_ranges,
                    conv_transpose_as_conv, observed_values, quantize_graph,
                    split_table_activations)
from .quant.export import export_qdq
from .quant import adaround
from .quant.bias_correction import ChannelMeans, watched
from .quant.bias_correction import summary as bias_summary
from .quant.equalize import equalize as equalize_graph
from .quant.smooth import AUTO as AUTO_SMOOTH
from .quant.smooth import choose_alphas, sample_rows, smooth, smoothable
from .quant import ort_saturation
from .quant.qdq import extract_qdq, has_qdq
from .quant.report import ErrorStats, LayerRow, markdown
from .runtime import ModelBase
from .runtime import load as _load
from .runtime import save_arrays  # noqa: F401  (mlcc run -o: ml_dtypes arrays stay typed)
from .targets import builtin_targets, load_target
from .targets import firmware as _fw
from .targets.build import (HARNESS_EXE, build_firmware, build_harness, build_library,
                            builds_harness, harness_files, makefile, usable_cores,
                            wasm_exports)
from .targets.objects import object_path
from .targets.wasm import HARNESS_JS, js_files

Shapes = dict[str, tuple[int, ...]]
# Inputs bound at compile time: name -> value (an ndarray of the input's type, or numbers)
Binds = dict[str, object]


@dataclass
class CompileResult:
    folder: Path
    manifest: dict
    graph: Graph
    quant: QuantResult | None = None
    calls: list = field(default_factory=list)         # the program's KernelCalls, in order
    sources: list[str] = field(default_factory=list)  # the .c files of the library
    firmware_defines: list[str] = field(default_factory=list)   # firmware targets: -D flags


@dataclass
class QuantizeConfig:
    """Post-training int8 quantization (`--quantize int8`).

    calibration: an .npz (one array per input, first axis = samples), a folder of .npy/.npz
    files, or a .py file defining calibration_data() that yields input dicts.
    calibrator: auto (the default: per tensor, the range of least quantize-dequantize error on
    the calibration data), minmax, percentile (at `percentile`) or entropy (KL search).
    requant: None = the target's int8.requant ("float" or "fixed")."""
    calibration: str | Path | None = None       # None: a QDQ model's own parameters
    calibrator: str = DEFAULT_CALIBRATOR
    percentile: float = 99.99
    per_channel: bool = True
    requant: str | None = None
    report: str | Path | None = None
    export_qdq: str | Path | None = None         # write the quantization as a QDQ ONNX model
    max_samples: int | None = None
    progress: Callable[[str], None] | None = None
    # mixed precision (mlcc/quant/sensitivity.py): keep the most sensitive layers in float
    # until the worst output SQNR reaches min_sqnr (dB), or until a metric of the float and
    # the quantized outputs drops by at most max_drop from float's own score; the metric is
    # `FILE.py:FN` (metric) or the built-in top-1 agreement (%). eval_data: the samples the
    # search measures on (same forms as calibration; default: the first calibration samples)
    min_sqnr: float | None = None
    max_drop: float | None = None
    metric: str | None = None
    eval_data: str | Path | None = None
    # progress_bar(label, done, total): the progress of the long steps (calibration, the C
    # builds, the search's sensitivity); the CLI draws it on a terminal
    progress_bar: Callable[[str, int, int], None] | None = None
    # SmoothQuant for the float activations read by integer MatMuls (mlcc/quant/smooth.py):
    # "auto" (per value, the alpha of least product error on the calibration data, or none),
    # an alpha in [0, 1] for every such value, or None (off)
    smooth: float | str | None = "auto"
    # groups to keep in float: node names of the optimized graph as the report names them,
    # shell-style patterns over them, or op:TYPE (mlcc/quant/sensitivity.select_nodes)
    keep_float: tuple[str, ...] = ()
    # groups to run as W8A16 (int16 activations x int8 weights, mlcc.QConv16 / QFC16), the
    # same patterns as keep_float (docs/quantization.md, W8A16)
    w8a16: tuple[str, ...] = ()
    # cross-layer equalization of Conv -> Conv pairs before calibration: True (exact pairs
    # only) or "relu6" (also through Relu6, replaced by Relu); mlcc/quant/equalize.py
    equalize: bool | str = False
    # add (W - Wq) E[x] (E[x] from the calibration data) to each integer layer's bias;
    # mlcc/quant/bias_correction.py. "on" (or True), "off" (or False), or "auto": per output
    # channel where it lowers the layer's held-out output error (mlcc/quant/adaround.py)
    bias_correction: bool | str = False
    # learned weight rounding (mlcc/quant/adaround.py): "auto" (per output channel where it
    # lowers the layer's held-out output error), "on" or "off"
    adaround: str = "off"
    # the default mix: without min_sqnr / max_drop, keep the few layers the sensitivity ranks
    # worst in float until the output SQNR reaches sensitivity.AUTO_SQNR_DB, within an
    # estimated time budget (`_auto_mix`); False: every layer that can be integer is
    # (`--pure-int8`)
    auto_mix: bool = True
    # the default mix's budget: the estimated int8 / float time it may spend on W8A16 and
    # float layers (`--time-budget R`, in (0, 1.5]); None: sensitivity.AUTO_TIME_BUDGET, raised
    # to what reaches the output SQNR target where that is at most sensitivity.AUTO_TIME_CAP
    time_budget: float | None = None


def _optimize(model: str | Path, shapes: Shapes | None, extra_outputs: list[str] | None,
              dump: Callable[[str], None] | None, bind: Binds | None = None) -> Graph:
    g = import_model(model, shapes, bind)
    if extra_outputs:
        g.outputs = list(g.outputs) + [o for o in extra_outputs if o not in g.outputs]
    return run_pipeline(g, dump=dump)


def compile(model: str | Path, output_dir: str | Path, *, target: str = "x86",
            shapes: Shapes | None = None, name: str | None = None,
            max_arena: int | None = None, dump_ir: Callable[[str], None] | None = None,
            build: bool = True, extra_outputs: list[str] | None = None,
            embed_weights: bool = False, quantize: QuantizeConfig | None = None,
            bind: Binds | None = None, max_outputs: dict[str, int] | None = None,
            conv_choices: dict[str, str] | None = None,
            max_loop_iterations: int | None = None,
            progress_bar: Callable[[str, int, int], None] | None = None) -> CompileResult:
    """Compiles an ONNX file into `output_dir` (model.h, model.c, weights.bin, runtime sources,
    Makefile, manifest.json and, with build=True, the library). With `quantize`, the model is
    calibrated and compiled to integer kernels (see QuantizeConfig). `bind` gives inputs their
    values at compile time: they stop being inputs and fold like initializers
    (frontend/binding.py); manifest.json lists them under "bound". `max_outputs` lowers the
    planned maximum of outputs whose size depends on the data ({value name: N}; see
    docs/dynamic-outputs.md). `conv_choices` picks convolution kernels by layer
    (tuning.tune's choices; docs/performance.md). `max_loop_iterations` bounds every Loop
    whose trip count or condition is known only at run time (default
    DEFAULT_MAX_ITERATIONS): one more iteration returns MLCC_ERR_LOOP_LIMIT; manifest.json
    records the bound when such a Loop exists or the option was given. progress_bar(label,
    done, total) (default: quantize's) draws the C build's progress."""
    loop_limit = check_max_loop_iterations(max_loop_iterations)
    bar = progress_bar or (quantize.progress_bar if quantize is not None else None)
    tgt = load_target(target)
    qdq = None
    raw = import_model(model, shapes, bind)
    _set_max_outputs(raw, max_outputs or {})
    if quantize is not None and (quantize.min_sqnr is not None or quantize.max_drop is not None) \
            and any(raw.values[n].is_dynamic for n in raw.inputs):
        raise UnsupportedError("--min-sqnr / --max-drop with a range of sizes (--shape LO..HI) "
                               "is not supported yet: give fixed sizes, or leave the search "
                               "out (--keep-float picks float layers by hand)")
    if quantize is not None and quantize.time_budget is not None and \
            any(raw.values[n].is_dynamic for n in raw.inputs):
        raise UnsupportedError("--time-budget with a range of sizes (--shape LO..HI): a range "
                               "build has no default mix (it is all integer); give fixed "
                               "sizes, or leave --time-budget out")
    if quantize is not None and quantize.auto_mix and \
            any(raw.values[n].is_dynamic for n in raw.inputs):
        # the default mix simulates its candidates at fixed sizes: a range build is all
        # integer, as with --pure-int8 (docs/dynamic-shapes.md)
        quantize = replace(quantize, auto_mix=False)
    bound = bound_record(raw, bind or {})
    if quantize is not None and has_qdq(raw):
        raw, qdq = extract_qdq(raw)           # an already-quantized model: its own parameters
    if extra_outputs:
        raw.outputs = list(raw.outputs) + [o for o in extra_outputs if o not in raw.outputs]
    if quantize is not None:
        g = run_pipeline(raw, INT8_PIPELINE, dump=dump_ir)
        dynamic = [v.name for v in g.values.values() if v.dyn is not None]
        if dynamic:
            raise UnsupportedError(f"--quantize int8 does not handle values whose size depends "
                                   f"on the data yet ({dynamic[0]!r}: docs/dynamic-outputs.md); "
                                   f"compile the model in float")
        if qdq is None:     # calibrate the pre-activation ranges the tables need
            g = split_table_activations(conv_transpose_as_conv(g))
    else:
        g = run_pipeline(raw, dump=dump_ir)
    _check_max_outputs(g, max_outputs or {})
    prefix = model_prefix(name or Path(model).stem)
    extra = {"shapes": {k: [d if isinstance(d, int) else dim_text(d) for d in v]
                        for k, v in sorted((shapes or {}).items())},
             "library": tgt.library_name}
    if bound:
        extra["bound"] = bound
    if conv_choices:
        extra["conv_choices"] = dict(sorted(conv_choices.items()))
    quant_result, float_graph = None, g
    if quantize is not None:
        g, quant_result, qinfo = _quantize(g, tgt, model, quantize, dump_ir, qdq)
        extra["quantization"] = qinfo
    built = [tgt.library_name]
    if builds_harness(tgt):
        # Python cannot load a library built for another machine: it runs this executable
        # through the target's command prefix instead (mlcc/runtime/runner.py).
        extra.update(harness=HARNESS_EXE, run=list(tgt.run), run_package=tgt.run_package)
        built.append(HARNESS_EXE)
    if tgt.output == "wasm":
        # model.wasm runs in node through harness.mjs over the JavaScript wrapper.
        extra.update(harness=HARNESS_JS, run=list(tgt.run), run_package=tgt.run_package)
    if tgt.output == "firmware":
        # a microcontroller has no files: the weights go to flash as a const array, and
        # firmware.elf runs under the target's emulator (FirmwareModel in mlcc/runtime)
        embed_weights = True
        extra.update(harness=_fw.FIRMWARE_ELF, run=list(tgt.run), run_package=tgt.run_package,
                     output="firmware")
        built += [_fw.FIRMWARE_ELF, _fw.FIRMWARE_MAP]
    command = compile_command(model, target=target, shapes=shapes, name=name,
                              embed_weights=embed_weights, extra_outputs=extra_outputs,
                              quantize=quantize, max_outputs=max_outputs,
                              max_loop_iterations=max_loop_iterations)
    extra["command"] = " ".join(command)
    if tgt.native:     # what `native` meant on the machine that compiled (reproducing a build)
        extra["target_machine"] = tgt.machine_summary
    if tgt.cpu_features():     # what the loader checks before it loads the library
        extra["cpu_features"] = tgt.cpu_features()
    gen = generate(g, prefix=prefix, target_name=tgt.name, source_name=Path(model).name,
                   max_arena=max_arena, embed_weights=embed_weights, manifest_extra=extra,
                   pointer_bits=tgt.pointer_bits, arch=tgt.arch,
                   options={**tgt.lowering_options(), "conv_choices": conv_choices or {},
                            "max_loop_iterations": loop_limit},
                   command=command)
    if max_loop_iterations is not None or any(
            isinstance(e, LoopScope) and e.limit is not None
            for c in gen.program.calls for e in c.guard):
        gen.manifest["max_loop_iterations"] = loop_limit
    shapes_fn = any("dynamic_axis" in t for t in gen.manifest["outputs"])
    if shapes_fn and tgt.output == "firmware":
        raise UnsupportedError(
            f"target {tgt.name}: outputs whose size depends on the data "
            f"({', '.join(t['name'] for t in gen.manifest['outputs'] if 'dynamic_axis' in t)}) "
            f"are not supported on firmware targets yet (its harness reports no actual sizes)")
    dims = len(gen.manifest.get("dims", []))
    if dims and tgt.output == "firmware":
        raise UnsupportedError(
            f"target {tgt.name}: a range of sizes (--shape LO..HI) is not supported on "
            f"firmware targets yet (its harness runs at fixed sizes and passes no dims); "
            f"compile fixed sizes")
    exports = (wasm_exports(prefix, embed_weights, shapes_fn, bool(dims))
               if tgt.output == "wasm" else [])
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise MlccError(f"output folder {folder} exists and is not a folder")
    fw_defines: list[str] = []
    if tgt.output == "wasm":
        gen.files.update(js_files(gen.manifest))
    elif tgt.output == "firmware":
        fw_defines = _firmware_check(tgt, gen)
        gen.files.update(_fw.firmware_files(tgt))
    else:
        gen.files.update(harness_files())
    built += [object_path(s) for s in gen.sources]   # so a recompile removes them
    gen.files["Makefile"] = (_fw.makefile(tgt, gen.sources, fw_defines) if fw_defines else
                             makefile(tgt, gen.sources, prefix, exports, shapes_fn,
                                      dims)).encode()
    gen.manifest["files"] = sorted(gen.files) + built
    gen.files["manifest.json"] = (json.dumps(gen.manifest, indent=2, sort_keys=True) + "\n"
                                  ).encode()
    write_folder(folder, gen.files)
    if build and fw_defines:
        try:
            elf = build_firmware(tgt, folder, gen.sources, fw_defines,
                                 _build_progress(bar, "C build"))
        except DoesNotFit as exc:
            raise DoesNotFit(f"{exc.message}; {peak_layers(gen.program, gen.plan)}",
                             detail=exc.detail) from None
        gen.manifest["memory"] = _fw.memory_report(elf, tgt.firmware)
        (folder / "manifest.json").write_text(json.dumps(gen.manifest, indent=2,
                                                         sort_keys=True) + "\n")
    elif build:
        build_library(tgt, folder, gen.sources, exports, _build_progress(bar, "C build"))
        if builds_harness(tgt):
            build_harness(tgt, folder, prefix, shapes_fn, dims)
    if quantize is not None and quantize.report:
        _write_report(quant_result.float_graph or float_graph, quant_result, quantize, model,
                      tgt.name, qinfo)
    if quantize is not None and quantize.export_qdq:
        notes = export_qdq(model, quantize.export_qdq, quant_result)
        for note in notes:
            (quantize.progress or (lambda text: None))(f"export-qdq: {note}")
    return CompileResult(folder, gen.manifest, gen.program.graph, quant_result,
                         list(gen.program.calls), list(gen.sources), fw_defines)


def _firmware_check(tgt, gen) -> list[str]:
    """Refuses a model whose arena, buffers and stack cannot fit the target's RAM or whose
    weights cannot fit its flash (naming the layers at the arena's peak), before anything is
    built; returns the firmware harness's -D flags."""
    g = gen.program.graph
    io = _fw.io_size([g.values[n].nbytes for n in g.inputs + g.outputs])
    problems = _fw.fit_problems(tgt.firmware, gen.plan.arena_size, io,
                                gen.manifest["weights_size"])
    if problems:
        raise DoesNotFit(f"the model does not fit target {tgt.name} ({tgt.path}): "
                         + "; ".join(problems) + f"; {peak_layers(gen.program, gen.plan)}")
    return _fw.harness_defines(gen.manifest["name"], gen.plan.arena_size, io)


def compile_command(model: str | Path, *, target: str = "x86", shapes: Shapes | None = None,
                    name: str | None = None, embed_weights: bool = False,
                    extra_outputs: list[str] | None = None,
                    quantize: QuantizeConfig | None = None,
                    max_outputs: dict[str, int] | None = None,
                    max_loop_iterations: int | None = None) -> list[str]:
    """The `mlcc compile` command line (as words) equivalent to compile() with these arguments:
    those that change what is generated, paths reduced to file names (so the record is the
    same wherever the files are and leaks no directories). Arguments the CLI does not have
    follow a "#" word, as a shell comment."""
    words = ["mlcc", "compile", Path(model).name, "--target", Path(str(target)).name]
    for k, dims in sorted((shapes or {}).items()):
        words += ["--shape", f"{k}={','.join(dim_text(d) for d in dims)}"]
    if name is not None:
        words += ["--name", name]
    if embed_weights:
        words.append("--embed-weights")
    for k, n in sorted((max_outputs or {}).items()):
        words += ["--max-output", f"{k}={n}"]
    if max_loop_iterations is not None:
        words += ["--max-loop-iterations", str(max_loop_iterations)]
    api_only = []
    q = quantize
    if q is not None:
        words += ["--quantize", "int8"]
        if q.calibration is not None:
            words += ["--calibration", Path(q.calibration).name]
        if q.calibrator != DEFAULT_CALIBRATOR:
            words += ["--calibrator", q.calibrator]
        if q.calibrator == "percentile":
            words += ["--percentile", f"{q.percentile:g}"]
        if not q.per_channel:
            words.append("--per-tensor")
        if q.requant is not None:
            words += ["--requant", q.requant]
        if q.min_sqnr is not None:
            words += ["--min-sqnr", f"{q.min_sqnr:g}"]
        if q.max_drop is not None:
            words += ["--max-drop", f"{q.max_drop:g}"]
        if q.time_budget is not None:
            words += ["--time-budget", f"{q.time_budget:g}"]
        if q.metric is not None:
            words += ["--metric", Path(q.metric).name]
        if q.eval_data is not None:
            words += ["--eval-data", Path(q.eval_data).name]
        if q.smooth != AUTO_SMOOTH:
            words += ["--smooth", "off" if q.smooth is None else f"{q.smooth:g}"]
        if q.equalize:
            words.append("--equalize-relu6" if q.equalize == "relu6" else "--equalize")
        bc = adaround.mode("bias_correction", q.bias_correction)
        if bc != "off":
            words += ["--bias-correction"] + ([bc] if bc != "on" else [])
        ada = adaround.mode("adaround", q.adaround)
        if ada != adaround.mode("adaround", QuantizeConfig.adaround):
            words += ["--adaround", ada]
        if not q.auto_mix:
            words.append("--pure-int8")
        for pattern in q.keep_float:
            words += ["--keep-float", pattern]
        for pattern in q.w8a16:
            words += ["--w8a16", pattern]
        if q.max_samples is not None:
            api_only.append(f"max_samples={q.max_samples}")
    if extra_outputs:
        api_only.append(f"extra_outputs=<{len(extra_outputs)} values>")
    words = [shlex.quote(w) for w in words]
    return words + (["#", "API:", *api_only] if api_only else [])


def _set_max_outputs(g: Graph, max_outputs: dict[str, int]) -> None:
    """--max-output NAME=N: the node producing NAME plans its data-dependent size for at
    most N (ops/selection.py MAX_OUTPUT)."""
    producers = g.producers()
    for name, n in sorted(max_outputs.items()):
        node = producers.get(name)
        d = lookup(node) if node is not None else None
        if d is None or MAX_OUTPUT not in d.attributes:
            raise InputError(f"--max-output {name}: not an output of a data-dependent size "
                             f"(NonZero, NonMaxSuppression, Compress, Unique, TopK with a "
                             f"run-time k)")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError(f"--max-output {name}={n}: the maximum must be an integer >= 0")
        node.attrs[MAX_OUTPUT] = n


def _check_max_outputs(g: Graph, max_outputs: dict[str, int]) -> None:
    for name in sorted(max_outputs):
        v = g.values.get(name)
        if v is not None and v.dyn is None and not v.is_const:
            raise InputError(f"--max-output {name}: not an output of a data-dependent size "
                             f"(its size is known at compile time: {list(v.shape)})")


MAX_INT64 = (1 << 63) - 1     # the C loop counts iterations in an int64_t


def check_max_loop_iterations(n) -> int:
    """The bound of run-time Loops: `n` (an integer >= 1) or, for None, the default."""
    if n is None:
        return DEFAULT_MAX_ITERATIONS
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_INT64:
        raise InputError(f"--max-loop-iterations {n!r}: expected an integer from 1 to "
                         f"{MAX_INT64}")
    return int(n)


def parse_max_loop_iterations(text: str | None) -> int | None:
    """--max-loop-iterations N (text) -> N, checked; None when the option is not given."""
    if text is None:
        return None
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or not 1 <= int(t) <= MAX_INT64:
        raise InputError(f"--max-loop-iterations {text!r}: expected an integer from 1 to "
                         f"{MAX_INT64}")
    return int(t)


def parse_max_outputs(texts) -> dict[str, int]:
    """--max-output options ("sel=100", ...) -> {"sel": 100}."""
    def parse(text: str) -> tuple[str, int]:
        name, sep, value = text.rpartition("=")
        if not sep or not name or not value.strip().isdigit():
            raise InputError(f"--max-output {text!r}: expected NAME=N (N an integer >= 0)")
        return name, int(value)
    return _by_name(texts, parse, "--max-output")


def _input_spec(g: Graph) -> dict:
    return {n: (g.values[n].dtype, tuple(g.values[n].shape)) for n in g.inputs}


# Memory the tool may spend to run ahead: calibration runs the next sample while it observes
# this one when one sample's values take at most AHEAD_BYTES (PP-OCR rec: 92 MB), and the
# sensitivity's worker threads load at most as many copies of the fake-quant program (arena
# and weights) as fit in SIMULATOR_COPIES_BYTES.
AHEAD_BYTES = 256 << 20
SIMULATOR_COPIES_BYTES = 1 << 30


def _build_progress(bar, label: str):
    """A C build's progress(done, total) drawing `bar` (QuantizeConfig.progress_bar) under
    `label`; None without a bar."""
    return None if bar is None else (lambda done, total: bar(label, done, total))


def _host_runner(g: Graph, folder: Path, prefix: str, bar=None, label: str = "C build"):
    """Builds a graph for this machine (x86-native: the fastest float code) into `folder` and
    returns its run(); bar(label, objects done, objects): the build's progress."""
    import platform
    host = load_target("x86-native" if platform.machine() in ("x86_64", "AMD64") else "x86")
    gen = generate(g, prefix=prefix, target_name=host.name, source_name=prefix,
                   manifest_extra={"library": host.library_name},
                   # the host's layouts (B panels of MLCC_GEMM_B_PANEL columns) and kernel
                   # facts, without Winograd's rounding in the float reference
                   options={**host.lowering_options(), "winograd": False})
    gen.files["Makefile"] = makefile(host, gen.sources, prefix).encode()
    gen.manifest["files"] = (sorted(gen.files) + [host.library_name]
                             + [object_path(s) for s in gen.sources])
    gen.files["manifest.json"] = json.dumps(gen.manifest, indent=2, sort_keys=True).encode()
    write_folder(folder, gen.files)
    build_library(host, folder, gen.sources, progress=_build_progress(bar, label))
    return _load(folder).run


def float_runner(g: Graph, folder: Path, names: list[str], bar=None):
    """Builds the optimized float graph for this machine with `names` as extra outputs and
    returns run(sample) -> {name: array} (one sample at a time: nothing accumulates)."""
    fg = g.copy()
    fg.outputs = list(g.outputs) + [n for n in names if n not in g.outputs and n not in g.inputs]
    return _host_runner(fg, folder, "mlcc_float", bar, "C float")


REPORT_SAMPLES = 32


def _write_report(fg: Graph, qres: QuantResult, cfg: QuantizeConfig, model, target_name: str,
                  info: dict) -> None:
    """Runs the float and the int8 program side by side on (up to REPORT_SAMPLES) calibration
    samples and writes the markdown report (mlcc/quant/report.py)."""
    qg0 = qres.graph
    values = [v for v in qres.qnames if v in fg.values]
    producers = qg0.producers()
    # float outputs of the integer layers: QConv / QFC writing float32, and recurrent layers
    # whose input projections run on the integer GEMM (their QFC's projections are values of
    # the int8 graph only)
    float_outs = [o for n in qg0.nodes
                  if (n.domain == "mlcc" and n.op_type in ("QConv", "QFC")) or
                  n.attr("_projected")
                  for o in n.outputs[:1]
                  if o in fg.values and qg0.values[o].dtype == "float32"]
    limit = min(cfg.max_samples or REPORT_SAMPLES, REPORT_SAMPLES)
    data = CalibrationSet(cfg.calibration, _input_spec(fg), limit)
    stats = {v: ErrorStats() for v in values + float_outs}
    outs = {o: ErrorStats() for o in fg.outputs}
    with tempfile.TemporaryDirectory(prefix="mlcc-report-") as tmp:
        run_f = float_runner(fg, Path(tmp) / "float", values + float_outs, cfg.progress_bar)
        qg = qg0.copy()
        extra = [qres.qnames[v] for v in values] + float_outs
        qg.outputs = list(qg.outputs) + [e for e in extra if e not in qg.outputs]
        run_q = _host_runner(qg, Path(tmp) / "int8", "mlcc_int8", cfg.progress_bar,
                             "C report")
        for sample in data:
            f, q = run_f(sample), run_q(sample)
            f = {**sample, **f}
            for v in values:
                qp = qres.qparams[v]
                stats[v].update(f[v], qp.dequantize(q[qres.qnames[v]]), qp)
            for v in float_outs:
                stats[v].update(f[v], q[v])
            for o in fg.outputs:
                outs[o].update(f[o], q[o])
    rows = []
    for v in values + float_outs:
        node = producers.get(qres.qnames.get(v, v))
        r = qres.ranges.get(v)
        op = "+".join([node.op_type] + [x.rsplit(":", 1)[-1] for x in node.fused]) if node \
            else "input"
        rows.append(LayerRow(v, node.name if node else v, op, stats[v],
                             r.lo if r else math.nan, r.hi if r else math.nan,
                             qres.qparams.get(v) if v in qres.qnames else None))
    header = [f"Model `{Path(model).name}`, target {target_name}; calibrator {cfg.calibrator}"
              + (f" ({cfg.percentile})" if cfg.calibrator == "percentile" else "")
              + f" on {info['samples']} samples of `{Path(cfg.calibration).name}`; weights "
              f"{'per channel' if cfg.per_channel else 'per tensor'}, requantization "
              f"{info['requant']}; statistics over the first {data.count} calibration samples.",
              "", f"{info['integer_layers']} layers run as integer kernels, "
              f"{len(info['float_layers'])} in float."]
    header += _option_lines(info)
    text = markdown("mlcc int8 quantization report", header, rows, info["float_layers"],
                    list(outs.items()),
                    {**info["mixed_precision"], **qres.timing}
                    if "mixed_precision" in info else None, info.get("w8a16_layers", []))
    path = Path(cfg.report)
    try:
        path.write_text(text)
    except OSError as exc:
        raise MlccError(f"cannot write the report to {path}: {exc}") from None


def _option_lines(info: dict) -> list[str]:
    """The report's account of --equalize, --adaround and --bias-correction."""
    lines = []
    if "equalize" in info:
        eq = info["equalize"]
        lines += ["", f"Cross-layer equalization (--equalize{'-relu6' if eq['relu6'] else ''}) "
                  f"applied: {eq['summary']}. The per-layer statistics below compare with "
                  f"the equalized float model (the same function, rescaled channels)."]
        lines += [f"- equalized `{a}` -> `{b}`" for a, b in eq["pairs"]]
        lines += [f"- skipped `{a}` -> `{b}`: {why}" for a, b, why in eq["skipped"]]
    if "rounding" in info:
        lines += ["", f"Weight rounding (--adaround, --bias-correction auto): "
                  f"{info['rounding']['summary']}."]
    if "bias_correction" in info:
        bc = info["bias_correction"]
        lines += ["", f"Bias correction (--bias-correction) applied: {bc['summary']}. "
                  f"Largest |shift| per layer (float units of the layer's output):"]
        top = sorted(bc["max_abs_shift"].items(), key=lambda kv: (-kv[1], kv[0]))
        lines += [f"- `{k}`: {v:.4g}" for k, v in top[:10]]
        if len(top) > 10:
            lines.append(f"- ... and {len(top) - 10} more")
    return lines


def _alpha_summary(alphas: list[float]) -> str:
    """'0.5 x3, 0.6 x1': how many smoothed values took each alpha."""
    return ", ".join(f"{a:g} x{alphas.count(a)}" for a in sorted(set(alphas))) or "none"


def _quantize(g: Graph, tgt, model, cfg: QuantizeConfig, dump_ir, qdq=None
              ) -> tuple[Graph, QuantResult, dict]:
    from .quant.sensitivity import check_time_budget, select_nodes
    if not (cfg.smooth is None or cfg.smooth == AUTO_SMOOTH or (
            isinstance(cfg.smooth, (int, float)) and 0.0 <= cfg.smooth <= 1.0)):
        raise InputError(f"smooth must be 'auto', None (off) or an alpha in [0, 1], not "
                         f"{cfg.smooth!r}")
    bc = adaround.mode("bias_correction", cfg.bias_correction)
    ada = adaround.mode("adaround", cfg.adaround)
    keep, unmatched = select_nodes(g, cfg.keep_float)
    if unmatched:
        raise InputError(f"--keep-float: {', '.join(unmatched)} matches no node of the "
                         f"optimized graph (give node names as the compile output and the "
                         f"report print them, shell-style patterns over them, or op:TYPE, "
                         f"e.g. op:Conv)")
    w16, unmatched = select_nodes(g, (cfg.w8a16,) if isinstance(cfg.w8a16, str) else cfg.w8a16)
    if unmatched:
        raise InputError(f"--w8a16: {', '.join(unmatched)} matches no node of the optimized "
                         f"graph (the same patterns as --keep-float)")
    if keep & w16:
        raise InputError(f"--w8a16 and --keep-float both name {', '.join(sorted(keep & w16))}")
    if w16 and cfg.calibration is None:
        raise InputError("--w8a16 needs --calibration DATA (the int16 ranges are calibrated)")
    opts = QuantOptions(per_channel=cfg.per_channel, requant=cfg.requant or tgt.int8_requant,
                        activations=tgt.int8_activations, keep_float=keep, w8a16=w16)
    target = _mix_target(cfg)
    if cfg.time_budget is not None:
        check_time_budget(cfg.time_budget)
        if target is not None or not cfg.auto_mix:
            raise InputError("--time-budget bounds the default mix: --min-sqnr and "
                             "--max-drop search without a budget, --pure-int8 has no mix")
    say = cfg.progress or (lambda text: None)
    ranges: dict = {}
    auto = None                     # the default mix's account (_auto_mix)
    alphas: dict | float = {}       # SmoothQuant's alpha per smoothed value (or one for all)
    watch: frozenset = frozenset()  # the values SmoothQuant may smooth
    data = None
    rounding = None                 # --adaround / --bias-correction auto's statistics
    if cfg.calibration is None:
        if qdq is None:
            raise InputError("--quantize int8 needs --calibration DATA (an .npz, a folder of "
                             ".npy/.npz files or a .py file): the model has no "
                             "QuantizeLinear/DequantizeLinear pairs of its own")
        if cfg.report:
            raise InputError("--report needs --calibration DATA (the samples it measures on)")
        if cfg.equalize or bc == "on" or ada == "on":
            raise InputError("--equalize, --bias-correction and --adaround need --calibration "
                             "DATA (a QDQ model's own parameters cannot be recomputed for "
                             "them)")
    else:
        data = CalibrationSet(cfg.calibration, _input_spec(g), cfg.max_samples)
        data.check_first()
        eq = None
        if cfg.export_qdq and (cfg.equalize or bc != "off"):
            raise InputError("--export-qdq cannot write --equalize or --bias-correction "
                             "(they change the weights and biases, not only the "
                             "quantization): leave them out to export")
        if cfg.equalize and qdq is not None:
            raise InputError("--equalize cannot rescale an already-quantized (QDQ) model: "
                             "its own scales were fixed for the original channels")
        if cfg.equalize:
            if cfg.equalize not in (True, "relu6"):
                raise InputError(f"equalize must be True, False or 'relu6', not "
                                 f"{cfg.equalize!r}")
            eq = equalize_graph(g, relu6=cfg.equalize == "relu6")
            g = eq.graph
            say(eq.summary())
        means = ChannelMeans(watched(g) if bc != "off" else {})
        # --adaround, --bias-correction auto: each integer layer's input statistics
        rounding = adaround.RoundingStats(g) if ada != "off" or bc == "auto" else None
        seen = [0]
        # --min-sqnr may keep any group in float, which makes its neighbours quantize values
        # the all-integer program keeps in uint8 (a MaxPool's output): observe them all
        needed = observed_values(g) if target is not None else needed_ranges(g, opts)
        names = [n for n in needed if qdq is None or n not in qdq.activations]
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="mlcc-calibrate-") as tmp:
            # --bias-correction reads the means of every integer layer's input, including
            # those whose range is not needed (a MaxPool's output keeps its input's scale)
            extra = list(means.axes) + (rounding.inputs if rounding is not None else [])
            run = float_runner(g, Path(tmp) / "float",
                               names + [v for v in dict.fromkeys(extra) if v not in names],
                               cfg.progress_bar)
            bar = cfg.progress_bar or (lambda label, done, total: None)
            total = data.known_count() or 0

            def progress(p, passes, k):
                bar(f"calibration {p + 1}/{passes}", k, data.count or total)
                if k % 8 == 0:
                    say(f"calibrating ({cfg.calibrator}): pass {p + 1}/{passes}, {k} samples")
            watch = frozenset(smoothable(g)) if cfg.smooth is not None else frozenset()

            def run_observed(sample):
                values = run(sample)
                if means.axes:          # --bias-correction: per-channel input means
                    means.observe({**sample, **values})
                if rounding is not None and (data.count is None or seen[0] < data.count):
                    rounding.observe({**sample, **values}, seen[0])   # the first pass only
                    seen[0] += 1
                return values
            ranges = calibrate(data, run_observed, names, method=cfg.calibrator,
                               percentile=cfg.percentile, progress=progress, channels=watch,
                               ahead=sum(g.values[n].nbytes for n in names if n in g.values)
                               <= AHEAD_BYTES)
            if bc != "off":
                opts = replace(opts, input_means=means.means())
            say(f"calibrated {len(ranges)} tensors on {data.count} samples in "
                f"{time.perf_counter() - t0:.1f} s")
            if cfg.smooth is not None:
                alphas = cfg.smooth
                if cfg.smooth == AUTO_SMOOTH:      # 16 more float runs, where there is a value
                    rows = sample_rows(data, run, sorted(watch)) if watch else {}
                    alphas, _ = choose_alphas(g, ranges, rows, opts.per_channel,
                                              cfg.calibrator, cfg.percentile)
                g, ranges, smoothed = smooth(g, ranges, alphas)
                if opts.input_means:    # the smoothed copy x * (1/s) has mean E[x] / s
                    m = dict(opts.input_means)
                    for n in g.nodes:
                        if n.name.endswith("/Smooth") and n.inputs[0] in m:
                            m[n.outputs[0]] = m[n.inputs[0]] * g.const(n.inputs[1])
                    opts = replace(opts, input_means=m)
                if cfg.smooth != AUTO_SMOOTH:
                    say(f"smoothed (alpha {cfg.smooth:g}) the inputs of the integer MatMuls "
                        f"reading {len(smoothed)} values")
                elif watch:
                    chosen = sorted(alphas.values())
                    say(f"smoothed (alpha auto: {_alpha_summary(chosen)}) the inputs of the "
                        f"integer MatMuls reading {len(smoothed)} of {len(watch)} values")
            if rounding is not None:
                rplan = adaround.plan(g, rounding, opts, ada, bc)
                opts = replace(opts, rounded=rplan.rounded, bias_channels=rplan.bias_channels)
                say(rplan.summary())
            if target is not None:
                opts, sens, timing = _mixed_search(g, ranges, opts, qdq, cfg, target, run,
                                                   Path(tmp), say, tgt)
            elif cfg.auto_mix and qdq is None:
                opts, auto = _auto_mix(g, ranges, opts, qdq, cfg, run, Path(tmp), say, tgt)
    if target is not None and data is None:
        raise InputError(f"{target.goal()} needs --calibration DATA (the samples it "
                         f"measures on)")
    res = quantize_graph(g, ranges, opts, qdq)
    res.ranges = ranges
    if cfg.equalize:
        res.float_graph = g
    if dump_ir is not None:
        from .ir import format_graph
        dump_ir(format_graph(res.graph, "quantize"))
    info = {"scheme": "int8",
            "calibrator": cfg.calibrator if data is not None else "none (QDQ model)",
            "samples": data.count if data is not None else 0,
            "qdq_import": qdq is not None,
            "per_channel": cfg.per_channel, "requant": opts.requant,
            "activations": opts.activations,
            "integer_layers": sum(1 for layer in res.layers if layer.integer),
            "float_layers": [layer.node for layer in res.layers if not layer.integer]}
    w8a16 = [layer.node for layer in res.layers if layer.precision == "w8a16"]
    if w8a16:
        info["w8a16_layers"] = w8a16
    if cfg.calibrator == "percentile":
        info["percentile"] = cfg.percentile
    if target is not None:
        info["mixed_precision"] = sens   # deterministic: scores and sizes, no latencies
        res.timing = timing
    elif auto is not None:
        info["mixed_precision"] = auto
    if cfg.smooth is not None and (cfg.smooth != AUTO_SMOOTH or watch):
        info["smooth_alpha"] = cfg.smooth
        if cfg.smooth == AUTO_SMOOTH:
            info["smooth_alphas"] = dict(sorted(alphas.items()))
    if cfg.equalize:
        info["equalize"] = {"relu6": cfg.equalize == "relu6",
                            "pairs": [list(p) for p in eq.pairs],
                            "skipped": [list(p) for p in eq.skipped],
                            "relu6_replaced": eq.relu6_replaced, "iterations": eq.iterations,
                            "summary": eq.summary()}
    if rounding is not None:
        info["rounding"] = rplan.info()
    if bc != "off":
        info["bias_correction"] = {
            "layers": len(res.bias_shift),
            "max_abs_shift": {k: float(np.abs(v).max())
                              for k, v in sorted(res.bias_shift.items())},
            "summary": bias_summary(res.bias_shift)}
        say(f"bias correction: {info['bias_correction']['summary']}")
    return res.graph, res, info


SEARCH_SAMPLES = 16       # calibration samples the mixed-precision search measures on
RANK_SAMPLES = 8          # of which (or of --eval-data's) the per-layer sensitivity uses


def _mix_target(cfg: QuantizeConfig):
    """The mixed-precision target of cfg (sensitivity.Target), or None; a metric file that
    cannot be loaded is reported here, before calibration."""
    from .quant import sensitivity
    if cfg.min_sqnr is not None and cfg.max_drop is not None:
        raise InputError("--min-sqnr and --max-drop are two targets for the same search: "
                         "give one")
    if cfg.metric is not None and cfg.max_drop is None:
        raise InputError("--metric is the score --max-drop bounds: give --max-drop too")
    if cfg.eval_data is not None and cfg.min_sqnr is None and cfg.max_drop is None:
        raise InputError("--eval-data holds the samples of the --min-sqnr / --max-drop "
                         "search: give one of them")
    if cfg.max_drop is not None:
        if not math.isfinite(cfg.max_drop) or cfg.max_drop < 0:
            raise InputError(f"--max-drop must be a number >= 0, not {cfg.max_drop:g}")
        return sensitivity.Target.drop(cfg.max_drop, *(sensitivity.load_metric(cfg.metric)
                                                       if cfg.metric else ()))
    if cfg.min_sqnr is not None:
        return sensitivity.Target.sqnr(cfg.min_sqnr)
    return None


def _mixed_search(g: Graph, ranges: dict, opts: QuantOptions, qdq, cfg: QuantizeConfig,
                  target, run_float, tmp: Path, say, tgt=None
                  ) -> tuple[QuantOptions, dict, dict]:
    """--min-sqnr / --max-drop (mlcc/quant/sensitivity.py): the per-layer sensitivity and the
    search on the fake-quant program (mlcc/quant/fakequant.py, one build) over the moves of
    sensitivity.ladder (the most sensitive layers to W8A16 where the target's cost table
    estimates that cheaper than float, then to float), then the choice verified with one
    real build (more moves taken if it misses the target)."""
    from .quant import fakequant
    from .quant import sensitivity as sens

    bar = cfg.progress_bar or (lambda label, done, total: None)
    t0 = time.perf_counter()
    samples = list(CalibrationSet(cfg.eval_data, _input_spec(g)) if cfg.eval_data is not None
                   else CalibrationSet(cfg.calibration, _input_spec(g), SEARCH_SAMPLES))
    refs = [{o: run_float(s)[o] for o in g.outputs} for s in samples]
    target.start(refs)          # a metric that fails, fails before the next build
    allint = quantize_graph(g, ranges, opts, qdq)
    cands = sens.candidates(allint.layers)
    sixteen = _w8a16_offers(g, allint, cands, tgt, ranges)
    fq = fakequant.build(g, allint, quantize_graph(
        g, ranges, replace(opts, w8a16=opts.w8a16 | frozenset(sixteen)), qdq)
        if sixteen else None)
    run_sim = _host_runner(fq.graph, tmp / "fakequant", "mlcc_fakequant", bar, "C fake-quant")
    tb = time.perf_counter()
    say(f"mixed precision: fake-quant program ({len(fq.slots)} switches) built in "
        f"{tb - t0:.1f} s")

    sim = _Simulator(g, fq, run_sim)
    # 1. each candidate quantized alone
    ranked = samples[:RANK_SAMPLES]
    alone, order = _sensitivity(g, fq, sim, cands, ranked, refs, bar)
    say(f"mixed precision: sensitivity of {len(cands)} layers on {len(ranked)} samples in "
        f"{time.perf_counter() - tb:.1f} s")

    # 2. bisection on the number of moves taken (to W8A16, then to float), each mix simulated
    planner = _mix_planner(g, ranges, opts, qdq)
    priced = None
    if sixteen:             # W8A16 or float per layer, whichever the cost table finds cheaper
        from .quant import latency
        ratio, _ = latency.estimator(tgt, allint, cands, {c: sens.macs(g, c) for c in cands},
                                     planner, [n.name for n in g.nodes])
        priced = lambda moves: ratio(*sens.mix_of(moves))      # noqa: E731
    moves = sens.ladder(order, sixteen, priced)

    def plan(k: int) -> QuantResult:
        return planner(*sens.mix_of(moves[:k]))

    def simulate(k: int) -> float:
        control = fq.plan(plan(k))
        score = target.call(refs, list(sim.map((s, control) for s in samples)))
        say(f"mixed precision: {_moves_text(moves[:k])}: {target.text(score)} (simulated)")
        return score
    k, steps = sens.bisect(len(moves), simulate, target.meets)
    res = sens.MixResult(target, order, alone, steps, simulated=dict(steps)[k])

    # 3. the choice verified with a real build
    def real(k: int):
        qres = plan(k)
        folder = tmp / f"mixed{k}"
        run_q = _host_runner(qres.graph, folder, "mlcc_int8", bar, "C int8")
        score = target.call(refs, [{o: run_q(s)[o] for o in g.outputs} for s in samples])
        res.verified.append((k, score))
        say(f"mixed precision: {_moves_text(moves[:k])}: {target.text(score)} (built and "
            f"run)")
        return qres, run_q, score, folder
    qres, run_q, score, folder = real(k)
    while not target.meets(score) and k < len(moves):
        k = len(moves) if len(res.verified) >= 3 else min(len(moves), k + max(1, k // 2))
        qres, run_q, score, folder = real(k)
    (res.kept, res.w8a16), res.met = sens.mix_of(moves[:k]), target.meets(score)
    if not res.met:
        still = [f"{lp.node} ({lp.op})" for lp in qres.layers if lp.integer]
        raise InputError(
            f"{target.goal()} cannot be met: the best mix reached {target.text(score)} on "
            f"{len(samples)} samples with all {len(order)} candidate layers in float; what "
            f"limits it: " + (f"the layers still integer, {', '.join(still[:8])}"
                              + (", ..." if len(still) > 8 else "") if still else
                              "nothing quantized is left (the float program itself does not "
                              "meet it on these samples)"))
    ms = _median_ms(run_q, samples[0])
    say(f"mixed precision: {len(res.kept)} of {len(order)} layers kept in float"
        + (f", {len(res.w8a16)} at W8A16" if sixteen else "") + f", {target.text(score)} "
        f"({target.goal()}) in {time.perf_counter() - t0:.1f} s")
    layer_macs = {c: sens.macs(g, c) for c in cands}
    info = {"target": target.goal(), "kind": target.kind, "value": target.value,
            "metric": target.name, "met": res.met,
            "reference": target.reference if target.kind == "drop" else None,
            "samples": len(samples), "rank_samples": len(ranked), "kept": res.kept,
            "w8a16": res.w8a16, "w8a16_offered": sixteen, "order": order,
            "sensitivity_db": {c: round(v, 3) for c, v in alone.items()},
            "steps": [[n, v] for n, v in res.steps],
            "verified": [[n, v] for n, v in res.verified], "final": score,
            "macs": layer_macs,
            "weights": json.loads((folder / "manifest.json").read_text())["weights_size"]}
    float_macs = sum(layer_macs[c] for c in res.kept)
    int_macs = sum(layer_macs.values()) - float_macs
    per_mac = ms / max(1.0, float_macs + sens.INT8_FLOAT_RATIO * int_macs)
    timing = {"ms": ms, "extra_ms_per_float_mac": per_mac * (1 - sens.INT8_FLOAT_RATIO),
              "int8_float_ratio": sens.INT8_FLOAT_RATIO}
    return replace(opts, keep_float=opts.keep_float | frozenset(res.kept),
                   w8a16=(opts.w8a16 | frozenset(res.w8a16)) - frozenset(res.kept)), info, \
        timing


def _moves_text(moves) -> str:
    """'3 layers in float, 2 at W8A16' for the mix a ladder prefix makes."""
    from .quant.sensitivity import mix_of
    kept, w16 = mix_of(moves)
    return f"{len(kept)} layers in float" + (f", {len(w16)} at W8A16" if w16 else "")


class _Simulator:
    """sim(sample, control) -> the model outputs of the fake-quant program (run_sim: a loaded
    program's run). sim.map(pairs) runs many (sample, control) pairs over the usable cores,
    a few pairs ahead of the caller: each run at a time on a copy of the program of its own
    (loaded once, its own arena; a run releases the GIL). The results come in the order of
    the pairs and are the same arrays as one at a time."""

    def __init__(self, g: Graph, fq, run_sim):
        from .quant.fakequant import CONTROL
        self._control = CONTROL
        self._outputs = {o: fq.outputs[o] for o in g.outputs}
        self._run = run_sim
        self._copies: queue.SimpleQueue = queue.SimpleQueue()   # loaded copies not running

    def _call(self, run, sample, control) -> dict[str, np.ndarray]:
        out = run({**sample, self._control: control})
        return {o: out[name] for o, name in self._outputs.items()}

    def __call__(self, sample, control) -> dict[str, np.ndarray]:
        return self._call(self._run, sample, control)

    def _worker_call(self, pair) -> dict[str, np.ndarray]:
        try:
            run = self._copies.get_nowait()
        except queue.Empty:
            run = _load(self._run.__self__.folder).run
        try:
            return self._call(run, *pair)
        finally:
            self._copies.put(run)

    def map(self, pairs):
        """The outputs of each (sample, control) pair, in order (a generator)."""
        pairs = list(pairs)
        model = getattr(self._run, "__self__", None)
        size = (int(model.manifest["arena_size"]) + int(model.manifest["weights_size"])
                if model is not None else 0)
        jobs = min(usable_cores(), len(pairs), SIMULATOR_COPIES_BYTES // max(size, 1))
        if jobs <= 1 or model is None:
            yield from (self(s, c) for s, c in pairs)
            return
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            ahead = []
            for pair in pairs:
                ahead.append(pool.submit(self._worker_call, pair))
                if len(ahead) > 2 * jobs:
                    yield ahead.pop(0).result()
            for future in ahead:
                yield future.result()


def _sensitivity(g: Graph, fq, sim, cands: list[str], ranked: list, refs: list, bar
                 ) -> tuple[dict[str, float], list[str]]:
    """Each candidate quantized alone (its weights and the activations it reads and writes):
    the worst output SQNR per layer over the `ranked` samples, and the candidates most
    sensitive (lowest SQNR) first."""
    from .quant import sensitivity as sens
    controls = {c: fq.control(sens.touched(g, c, fq.slots), [c]) for c in cands}
    stats: dict[str, dict[str, ErrorStats]] = {c: {} for c in cands}
    pairs = [(i, c) for i in range(len(ranked)) for c in cands]
    outs = sim.map((ranked[i], controls[c]) for i, c in pairs)
    for k, ((i, c), out) in enumerate(zip(pairs, outs), 1):
        for o in g.outputs:
            stats[c].setdefault(o, ErrorStats()).update(refs[i][o], out[o])
        bar("sensitivity", k, len(pairs))
    alone = {c: sens.worst_db([st.sqnr_db for st in stats[c].values()]) for c in cands}
    return alone, sorted(cands, key=lambda c: (alone[c], cands.index(c)))


def _w8a16_offers(g: Graph, allint: QuantResult, cands: list[str], tgt, ranges: dict
                  ) -> list[str]:
    """The candidate layers the mixes may run at W8A16 (int16 activations) before float: an
    int8 Conv / Gemm / MatMul whose W8A16 kernel the target's cost table estimates cheaper
    than its float one (latency.w8a16_cheaper; none without a table), and whose input has a
    calibrated range (its int16 scale; a MaxPool output read at its input's scale has none:
    the calibration observes no more values for the mix)."""
    from .quant import latency
    table = latency.table_for(tgt)
    int8 = {lp.node for lp in allint.layers if lp.integer and lp.precision == "int8"}
    first_input = {n.name: n.inputs[0] for n in g.nodes if n.inputs}
    return [c for c in cands if c in allint.weights and c in int8 and
            first_input.get(c) in ranges and latency.w8a16_cheaper(g, c, table)]


def _auto_mix(g: Graph, ranges: dict, opts: QuantOptions, qdq, cfg: QuantizeConfig,
              run_float, tmp: Path, say, tgt=None) -> tuple[QuantOptions, dict | None]:
    """The default mix (no --min-sqnr / --max-drop, not --pure-int8): if the all-integer
    program's simulated output SQNR is below sensitivity.AUTO_SQNR_DB, the layers the
    one-pass sensitivity ranks worst are moved to W8A16 (where the target's cost table
    estimates that cheaper than float: _w8a16_offers), then to float
    (sensitivity.ladder) until it reaches it, taking only moves that keep the estimated
    int8 / float time within the budget (--time-budget, else sensitivity.auto_budget; by the
    target's fitted cost table where it has one, else by multiply-accumulates:
    quant/latency.py); when the target is out of reach, the fewest of those moves whose
    simulated SQNR is near the best mix tried (sensitivity.grid_search). A missed target is
    searched again without a budget: the budget it needs is recorded (`target_cost`), and
    without --time-budget it becomes the budget where sensitivity.raised_budget allows. One
    fake-quant build and no other: the choice is not rebuilt to be verified."""
    from .quant import fakequant, latency
    from .quant import sensitivity as sens

    t0 = time.perf_counter()
    allint = quantize_graph(g, ranges, opts, qdq)
    cands = sens.candidates(allint.layers)
    if not cands:
        return opts, None
    samples = list(CalibrationSet(cfg.calibration, _input_spec(g),
                                  min(SEARCH_SAMPLES, cfg.max_samples or SEARCH_SAMPLES)))
    refs = [{o: run_float(s)[o] for o in g.outputs} for s in samples]
    sixteen = _w8a16_offers(g, allint, cands, tgt, ranges)
    all16 = quantize_graph(g, ranges, replace(opts, w8a16=opts.w8a16 | frozenset(sixteen)),
                           qdq) if sixteen else None
    fq = fakequant.build(g, allint, all16)
    sim = _Simulator(g, fq, _host_runner(fq.graph, tmp / "fakequant", "mlcc_fakequant",
                                         cfg.progress_bar, "C fake-quant"))
    target = sens.Target.sqnr(sens.AUTO_SQNR_DB)
    layer_macs = {c: sens.macs(g, c) for c in cands}
    plan = _mix_planner(g, ranges, opts, qdq)

    sims: dict = {}
    prices: dict = {}

    def key(kept, w16=()) -> tuple:
        return frozenset(kept), frozenset(w16)

    def simulate(moves) -> float:
        kept, w16 = sens.mix_of(moves)
        if key(kept, w16) not in sims:
            control = fq.plan(plan(kept, w16))
            sims[key(kept, w16)] = target.call(refs, list(sim.map((s, control)
                                                                  for s in samples)))
        return sims[key(kept, w16)]
    score = simulate([])
    estimate, time_model = latency.estimator(tgt, allint, cands, layer_macs, plan,
                                             [n.name for n in g.nodes])

    def ratio(kept, w16=()) -> float:
        if key(kept, w16) not in prices:
            prices[key(kept, w16)] = estimate(kept, w16)
        return prices[key(kept, w16)]
    given = cfg.time_budget is not None
    budget = sens.check_time_budget(cfg.time_budget) if given else sens.auto_budget(ratio([]))
    info = {"auto": True, "target": f"auto: output SQNR >= {sens.AUTO_SQNR_DB:g} dB within "
            f"{budget:.2g} of float's estimated time"
            + (" (--time-budget)" if given else ""), "kind": "sqnr",
            "value": sens.AUTO_SQNR_DB, "budget": round(budget, 4),
            "budget_given": given,
            "metric": target.name, "reference": None, "samples": len(samples),
            "rank_samples": 0, "kept": [], "w8a16": [], "order": [], "sensitivity_db": {},
            "steps": [[0, score]], "verified": [], "final": score, "macs": layer_macs,
            "time_ratio": round(ratio([]), 4), "time_model": time_model,
            "w8a16_offered": sixteen, "met": target.meets(score)}
    if info["met"]:
        say(f"int8: simulated output SQNR {score:.1f} dB all integer (>= "
            f"{sens.AUTO_SQNR_DB:g}): no layer kept in float")
        return opts, info
    ranked = samples[:sens.auto_rank_samples(layer_macs, RANK_SAMPLES)]
    bar = cfg.progress_bar or (lambda label, done, total: None)
    alone, order = _sensitivity(g, fq, sim, cands, ranked, refs, bar)
    priced = lambda moves: ratio(*sens.mix_of(moves))      # noqa: E731

    def search(limit: float) -> tuple[list, dict, int, list]:
        """The moves affordable within `limit`, their prices, how many the search takes
        and the (moves, simulated SQNR) it evaluated."""
        costs: dict = {}
        moves = sens.ladder(order, sixteen, priced, limit, costs)
        k, steps = sens.grid_search(len(moves), lambda k: simulate(moves[:k]), target.meets,
                                    sens.AUTO_NEAR_BEST_DB)
        return moves, costs, k, steps
    affordable, costs, k, steps = search(budget)
    if not target.meets(simulate(affordable[:k])):
        # what the target would cost: the same moves with no budget
        unbounded = search(math.inf)
        every, reach = unbounded[0], unbounded[2]
        # the budget the least mix that meets it needs: the peak estimate along its moves (a
        # later move to float can remove crossings and lower the estimate), rounded up
        info["target_cost"] = math.ceil(max(priced(every[:j]) for j in range(reach + 1))
                                        * 1e4) / 1e4 \
            if target.meets(simulate(every[:reach])) else None
        info["probability_outputs"] = sens.probability_outputs(g)
        info["budget_cap"] = sens.AUTO_TIME_CAP
        raised = None if given else sens.raised_budget(
            info["target_cost"], bool(info["probability_outputs"]),
            latency.table_for(tgt) is not None)
        if raised is not None:
            budget = raised
            affordable, costs, k, steps = unbounded
            info.update({"budget": round(budget, 4), "budget_raised": True,
                         "target": f"auto: output SQNR >= {sens.AUTO_SQNR_DB:g} dB, the "
                         f"budget raised to {budget:.2g} of float's estimated time (what "
                         f"reaches it; at most {sens.AUTO_TIME_CAP:g})"})
    kept, w16 = sens.mix_of(affordable[:k])
    score = simulate(affordable[:k])
    info.update({"rank_samples": len(ranked), "order": order, "kept": kept, "w8a16": w16,
                 "affordable": [c for c, p in affordable if p == sens.FLOAT],
                 "affordable_w8a16": [c for c, p in affordable if p == sens.W8A16],
                 "move_cost": {p: {c: round(v, 4) for (c, q), v in costs.items() if q == p}
                               for p in (sens.W8A16, sens.FLOAT)},
                 "sensitivity_db": {c: round(v, 3) for c, v in alone.items()},
                 "steps": [[0, info["steps"][0][1]]] + [[n, v] for n, v in steps if n],
                 "final": score, "met": target.meets(score),
                 "time_ratio": round(ratio(kept, w16), 4)})
    say(f"int8: {len(kept)} of {len(cands)} layers kept in float"
        + (f" and {len(w16)} at W8A16" if sixteen else "") + f" by the sensitivity "
        f"(simulated output SQNR {info['steps'][0][1]:.1f} -> {score:.1f} dB, estimated "
        f"int8/float time {info['time_ratio']:.2f}) in {time.perf_counter() - t0:.1f} s")
    return replace(opts, keep_float=opts.keep_float | frozenset(kept),
                   w8a16=opts.w8a16 | frozenset(w16)), info


def _mix_planner(g: Graph, ranges: dict, opts: QuantOptions, qdq):
    """plan(kept, w16=()) -> the rewrite's plan with the layers `kept` in float and those of
    `w16` at W8A16, on top of the options' own."""
    def plan(kept, w16=()) -> QuantResult:
        return quantize_graph(g, ranges, replace(
            opts, keep_float=opts.keep_float | frozenset(kept),
            w8a16=(opts.w8a16 | frozenset(w16)) - frozenset(kept)), qdq)
    return plan


def _median_ms(run, sample, reps: int = 5) -> float:
    import statistics
    run(sample)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        run(sample)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def load(folder: str | Path, *, run: list[str] | None = None, threads: int = 1) -> ModelBase:
    """Loads a compiled model folder: m.run({"input": array}) -> {"output": array}.

    A model built for the host is loaded into this process (cffi); `threads` > 1 gives it a
    thread pool of that many threads (outputs are bit-identical whatever the count). A model
    built for a cross target runs in its test harness through the target's command prefix
    (manifest.json "run", e.g. qemu-aarch64), one process per run; `run` replaces that prefix
    (e.g. ["ssh", "board"]).
    """
    return _load(folder, run=run, threads=threads)


# --------------------------------------------------------------------------------- verify

@dataclass
class OutputCheck:
    name: str
    max_abs_error: float
    tolerance: float
    argmax_ok: bool | None
    ok: bool


@dataclass
class LayerCheck:
    node: str
    op_type: str
    value: str
    max_abs_error: float
    tolerance: float


@dataclass
class VerifyResult:
    ok: bool
    outputs: list[OutputCheck]
    first_divergence: LayerCheck | None = None
    layers_checked: int = 0
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)
    reference: str = "onnxruntime"
    ties: list[str] = field(default_factory=list)   # rounding ties forced (quant/ties.py)


def random_inputs(g: Graph, seed: int = 0, sizes: dict[str, int] | None = None
                  ) -> dict[str, np.ndarray]:
    """sizes: of the dynamic dimensions (by name), for inputs of a dynamic shape."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in g.inputs:
        v = g.values[name]
        shape = symbolic.evaluate(tuple(v.shape), sizes or {})
        if v.dtype.startswith("float"):
            feeds[name] = rng.standard_normal(shape).astype(v.dtype)
        elif v.dtype == "bool":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(v.dtype)
    return feeds


def verify_sizes(dims: list[dict]) -> list[dict[str, int]]:
    """The sizes `mlcc verify` checks a model of dynamic dimensions at: every dimension at its
    smallest, at a size in between (odd where it can be), and at its largest."""
    sets = []
    for pick in (lambda d: d["min"], lambda d: (d["min"] + d["max"]) // 2 | 1,
                 lambda d: d["max"]):
        # (a dimension with a step: the multiple of it at or below the pick)
        sizes = {d["name"]: min(max(pick(d) // d.get("step", 1) * d.get("step", 1), d["min"]),
                                d["max"]) for d in dims}
        if sizes not in sets:
            sets.append(sizes)
    return sets


def tolerance_for(reference: np.ndarray) -> float:
    """1e-4 x max(1, max |reference|): relative for large outputs, absolute for small ones."""
    peak = float(np.max(np.abs(reference))) if reference.size else 0.0
    return 1e-4 * max(1.0, peak if math.isfinite(peak) else 1.0)


def compare(name: str, got: np.ndarray, ref: np.ndarray) -> OutputCheck:
    tol = tolerance_for(ref)
    if got.shape != ref.shape:
        return OutputCheck(name, math.inf, tol, None, False)
    if got.dtype.kind in "fc":
        # NaN where both are NaN, and equal infinities (inf - inf is NaN), are no error
        same = (np.isnan(got) & np.isnan(ref)) | (got == ref)
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.abs(got.astype(np.float64) - ref.astype(np.float64)))
        err = float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0
    else:
        err = float(np.max(np.abs(got.astype(np.int64) - ref.astype(np.int64)))) if got.size else 0.0
    argmax_ok = None
    if ref.ndim == 2 and ref.shape[1] > 1 and got.dtype.kind == "f":
        top = np.argmax(ref, axis=1)
        mine = np.argmax(got, axis=1)
        rows = np.arange(ref.shape[0])
        # A disagreement only counts where the reference's top two are not a tie within tol.
        near_tie = np.abs(ref[rows, top] - ref[rows, mine]) <= tol
        argmax_ok = bool(np.all((top == mine) | near_tie))
    ok = err <= tol and argmax_ok is not False
    return OutputCheck(name, err, tol, argmax_ok, ok)


def _onnxruntime_outputs(model_path: str | Path, feeds: dict, names: list[str] | None = None
                         ) -> dict[str, np.ndarray]:
    import onnx
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    proto = onnx.load(str(model_path)) if names or ort_saturation.saturates() else None
    if proto is not None:
        exact = ort_saturation.reference_model(proto)
        have = {o.name for o in exact.graph.output}
        for n in names or ():
            if n not in have:
                exact.graph.output.append(onnx.ValueInfoProto(name=n))
        proto = exact if exact is not proto or names else None
    sess = _bench.onnxruntime_session(
        model_path if proto is None else proto.SerializeToString(), opts)
    wanted = names or [o.name for o in sess.get_outputs()]
    return dict(zip(wanted, sess.run(wanted, feeds)))


def parse_shapes(texts) -> Shapes:
    """--shape options ("images=1,3,224,224", ...) -> {"images": (1, 3, 224, 224)}."""
    return _by_name(texts, parse_shape_option, "--shape")


def parse_binds(texts) -> Binds:
    """--bind options ("sr=16000", "w=w.npy", ...) -> {"sr": [16000], "w": array}."""
    return _by_name(texts, parse_bind_option, "--bind")


def _by_name(texts, parse, option: str) -> dict:
    found: dict = {}
    for text in texts:
        name, value = parse(text)
        if name in found:
            raise InputError(f"{option} {name} is given twice")
        found[name] = value
    return found


def bound_feeds(model: str | Path, shapes: Shapes | None, bind: Binds | None
                ) -> dict[str, np.ndarray]:
    """The bound values as the original model's inputs take them (what onnxruntime is fed)."""
    if not bind:
        return {}
    g = import_model(model, shapes, bind)
    return {n: g.values[n].const for n in bind}


def refuse_missing_cpu_features(tgt, what: str) -> None:
    """`what` (bench, --tune) runs the target's code on this CPU: refused, before anything is
    built, where that code needs x86 features the CPU lacks."""
    missing = tgt.missing_cpu_features()
    if missing:
        raise InputError(f"target {tgt.name}'s code uses {', '.join(missing)}, which this CPU "
                         f"does not have: {what} runs it here (use x86-native)")


def list_targets() -> list[tuple[str, str, str]]:
    """(name, description, "ready" or what to install) for every built-in target."""
    rows = []
    for name in builtin_targets():
        t = load_target(name)
        here = f" (here: {t.machine_summary})" if t.native else ""
        rows.append((name, t.description + here, "; ".join(t.missing_tools()) or "ready"))
    return rows


def load_inputs_npz(path: str | Path, model: str | Path, shapes: Shapes | None = None,
                    bind: Binds | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz file for each input of the model (keyed by input name) that is
    not bound at compile time."""
    g = import_model(model, shapes, bind)
    try:
        with np.load(path, allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
    except Exception as exc:
        raise InputError(f"{path}: cannot read inputs ({exc})") from None
    missing = [n for n in g.inputs if n not in feeds]
    if missing:
        raise InputError(f"{path}: has no array for input(s) {', '.join(missing)} "
                         f"(it has {', '.join(feeds) or 'none'})")
    extra = [k for k in feeds if k not in g.inputs]
    if extra and bind and extra[0] in bind:
        raise InputError(f"{path}: has an array for {extra[0]!r}, which --bind gives at "
                         f"compile time (leave one of them out)")
    if extra:    # a misspelt name or the wrong file: better said than silently ignored
        raise InputError(f"{path}: array(s) {', '.join(map(repr, extra))} are not inputs of "
                         f"the model (it takes {', '.join(map(repr, g.inputs))})")
    return {n: feeds[n] for n in g.inputs}


def verify(model: str | Path, *, target: str = "x86", shapes: Shapes | None = None,
           inputs: dict[str, np.ndarray] | None = None, per_layer: bool = False,
           output_dir: str | Path | None = None, seed: int = 0,
           bind: Binds | None = None, max_outputs: dict[str, int] | None = None,
           max_loop_iterations: int | None = None) -> VerifyResult:
    """Compiles the model, runs it and onnxruntime on the same inputs and compares; the values
    of `bind` are compiled in and fed to onnxruntime as inputs. Outputs whose size depends on
    the data compare at their actual size (max_outputs, max_loop_iterations: as compile's)."""
    if is_tflite(model):
        if per_layer:
            raise InputError("--per-layer compares with onnxruntime's intermediate values: "
                             "not available for .tflite models")
        return _verify_tflite(model, target, inputs, output_dir, seed)
    with tempfile.TemporaryDirectory(prefix="mlcc-verify-") as tmp:
        folder = Path(output_dir) if output_dir else Path(tmp) / "model"
        res = compile(model, folder, target=target, shapes=shapes, bind=bind,
                      max_outputs=max_outputs, max_loop_iterations=max_loop_iterations)
        dims = res.manifest.get("dims", [])
        compiled = _load(folder)
        bound = bound_feeds(model, shapes, bind)
        checks: list[OutputCheck] = []
        notes: list[str] = []
        ties: list[str] = []
        rechecked: list[str] = []     # outputs checked against the float64 evaluation
        # a model of dynamic dimensions: checked at its smallest, a middle and its largest sizes
        for sizes in (verify_sizes(dims) if dims and inputs is None else [None]):
            feeds = inputs if inputs is not None else random_inputs(res.graph, seed, sizes)
            got = compiled.run(feeds)
            ref = _onnxruntime_outputs(model, {**{k: np.asarray(v) for k, v in feeds.items()},
                                               **bound})
            at = "" if not sizes else " at " + ", ".join(f"{k}={v}" for k, v in sizes.items())
            now = [compare(n + at, got[n], ref[n]) for n in got]
            if not all(c.ok for c in now):
                now = _explain_ties(model, Path(tmp) / "taps", feeds, bound, got, now, notes,
                                    ties, at, target=target, shapes=shapes, bind=bind,
                                    max_outputs=max_outputs,
                                    max_loop_iterations=max_loop_iterations)
            if not all(c.ok for c in now) and not ties:
                now = _explain_precision(model, feeds, bound, got, ref, now, notes, at,
                                         rechecked)
            checks += now
            if not all(c.ok for c in now):
                break             # (the feeds --per-layer looks at: the first that fails)
        result = VerifyResult(all(c.ok for c in checks), checks, folder=folder, notes=notes,
                              ties=ties)
        if rechecked:
            exact = ("a float64 evaluation of the model (onnx.reference), which onnxruntime's "
                     "float32 result strays from")
            result.reference = (exact if len(rechecked) == len(checks) else
                                f"onnxruntime ({', '.join(rechecked)}: {exact})")
        if per_layer and (not result.ok or per_layer == "always"):
            result.first_divergence, result.layers_checked = _first_divergence(
                model, target, shapes, feeds, Path(tmp) / "layers", bind, max_loop_iterations)
        return result


def _explain_ties(model, folder: Path, feeds: dict, bound: dict, got: dict,
                  checks: list[OutputCheck], notes: list[str], ties: list[str], at: str,
                  **build) -> list[OutputCheck]:
    """verify's second look at outputs that differ, in a model with data-dependent quantizers
    (mlcc/quant/ties.py): a build with every quantizer tapped, then onnxruntime (graph
    optimizations off) with mlcc's codes forced at each rounding tie. Returns the checks
    against that reference when the outputs agree after the ties (appending them to `ties`),
    else `checks`; says what it found in `notes`."""
    from .quant import ties as _ties
    proto = load_onnx(model)
    if not _ties.quantizers(proto) and _ties.split_internal(proto) is None:
        return checks
    notes.append("against onnxruntime (default optimizations): " + "; ".join(
        f"{c.name} max abs error {c.max_abs_error:.3g} > {c.tolerance:.3g}"
        for c in checks if not c.ok))
    ort_feeds = {**{k: np.asarray(v) for k, v in feeds.items()}, **bound}
    outs = list(got)
    try:
        tapped, split = _ties.tappable(proto, ort_feeds)
        notes += [split] if split else []
        if tapped is not proto:       # DynamicQuantizeMatMul split in two: mlcc builds it too
            import onnx
            model, proto = folder.with_name("split.onnx"), tapped
            onnx.save(proto, str(model))
        compile(model, folder, extra_outputs=_ties.tap_names(proto), **build)
        mine = _load(folder).run(feeds)
        moved = max((float(np.max(np.abs(mine[n].astype(np.float64) - got[n])))
                     for n in outs if got[n].size and got[n].dtype.kind == "f"), default=0.0)
        if moved:       # (the same model: tapping should change nothing)
            notes.append(f"the tapped build's outputs differ from the build's by {moved:.3g}")
        ex = _ties.explain(proto, ort_feeds, mine, outs,
                           lambda ref: all(compare(n, got[n], ref[n]).ok for n in outs))
    except Exception as exc:    # (onnxruntime's errors have no common base) a second look
        # that cannot be taken leaves the first verdict, the failure, as it is
        text = (str(exc).splitlines() or [""])[0]
        notes.append(f"the quantizers could not be tapped: {type(exc).__name__}: {text}")
        return checks
    for i, tie in enumerate(ex.ties, 1):
        notes.append(f"rounding tie {i}{at}: {tie.text()}")
    if not ex.ok:
        notes.append(f"not explained by rounding ties{at}: {ex.failure}")
        return checks
    ties += [t.text() for t in ex.ties]
    notes.append(f"compared again with onnxruntime, graph optimizations off"
                 + (f", mlcc's codes fed at the {len(ex.ties)} tie(s)" if ex.ties else
                    " (its default optimizations round differently)"))
    return [compare(n + at, got[n], ex.reference[n]) for n in outs]


def _explain_precision(model, feeds: dict, bound: dict, got: dict, ref: dict,
                       checks: list[OutputCheck], notes: list[str], at: str,
                       rechecked: list[str]) -> list[OutputCheck]:
    """verify's second look at float outputs that differ from onnxruntime's in a model without
    quantizers: the model evaluated in float64 (onnx.reference, frontend/float64.py). An output
    that is within tolerance of it is checked against it instead (its name appended to
    `rechecked`): the difference is onnxruntime's float32 rounding, not mlcc's. Says in
    `notes` how far each engine is from it."""
    failing = [n for n, c in zip(got, checks) if not c.ok and got[n].dtype == np.float32]
    if not failing:
        return checks
    proto = load_onnx(model)
    why = float64.refusal(proto)
    if why:
        notes.append(f"no float64 evaluation to compare with: {why}")
        return checks
    try:
        outs = reference.evaluator(float64.to_float64(proto)).run(failing, float64.feeds_float64(
            {**{k: np.asarray(v) for k, v in feeds.items()}, **bound}))
    except Exception as exc:   # (onnx.reference's errors have no common base) a second look
        # that cannot be taken leaves the first verdict, the failure, as it is
        text = (str(exc).splitlines() or [""])[0]
        notes.append(f"no float64 evaluation to compare with: {type(exc).__name__}: {text}")
        return checks
    exact = dict(zip(failing, outs))
    result = []
    for n, c in zip(got, checks):
        if n not in exact:
            result.append(c)
            continue
        mine, theirs = compare(n + at, got[n], exact[n]), compare(n + at, ref[n], exact[n])
        notes.append(f"{n}{at}: a float64 evaluation of the model (onnx.reference) is "
                     f"{mine.max_abs_error:.3g} from mlcc's output, {theirs.max_abs_error:.3g} "
                     f"from onnxruntime's")
        if mine.ok:
            rechecked.append(n + at)
        result.append(mine if mine.ok else c)
    return result


def tflite_random_inputs(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of an imported .tflite graph: int8 over its whole range; float32 uniform over
    the range its QUANTIZE maps to int8 (so that every code occurs), else standard normal."""
    rng = np.random.default_rng(seed)
    users = g.consumers()
    feeds = {}
    for name in g.inputs:
        v = g.values[name]
        if v.dtype == "int8":
            feeds[name] = rng.integers(-128, 128, v.shape).astype(np.int8)
            continue
        quant = [n for n in users.get(name, []) if n.op_type == "TFLQuantize"]
        if quant:
            scale, zp = quant[0].attr("scale"), quant[0].attr("zero_point")
            lo, hi = scale * (0 - zp - 0.5), scale * (255 - zp + 0.5)
            feeds[name] = rng.uniform(lo, hi, v.shape).astype(v.dtype)
        else:
            feeds[name] = rng.standard_normal(v.shape).astype(v.dtype)
    return feeds


def _tflm_interpreter(model: str | Path):
    """TensorFlow Lite Micro's interpreter on the model (an arena of at least 4 MiB)."""
    try:
        from tflite_micro import runtime as tflm
    except ImportError:
        raise MlccError("checking or timing a .tflite model runs TensorFlow Lite Micro: pip "
                        "install tflite-micro") from None
    data = Path(model).read_bytes()
    return tflm.Interpreter.from_bytes(data, arena_size=max(10 * len(data), 1 << 22))


def tflm_outputs(model: str | Path, feeds: dict[str, np.ndarray], g: Graph
                 ) -> dict[str, np.ndarray]:
    """The outputs of TensorFlow Lite Micro's reference kernels (the `tflite-micro` package)
    on the graph's inputs, in order, keyed by the graph's output names."""
    interp = _tflm_interpreter(model)
    for k, name in enumerate(g.inputs):
        interp.set_input(np.ascontiguousarray(feeds[name]), k)
    interp.invoke()
    return {name: np.asarray(interp.get_output(k)) for k, name in enumerate(g.outputs)}


def _verify_tflite(model, target: str, inputs, output_dir, seed: int) -> VerifyResult:
    """verify() for .tflite: the outputs must equal TensorFlow Lite Micro's, bit for bit."""
    with tempfile.TemporaryDirectory(prefix="mlcc-verify-") as tmp:
        folder = Path(output_dir) if output_dir else Path(tmp) / "model"
        res = compile(model, folder, target=target)
        feeds = inputs if inputs is not None else tflite_random_inputs(res.graph, seed)
        got = _load(folder).run(feeds)
        ref = tflm_outputs(model, feeds, res.graph)
        checks = []
        for n in got:
            a, b = got[n], ref[n].reshape(got[n].shape) if ref[n].size == got[n].size \
                else ref[n]
            same = a.shape == b.shape and a.dtype == b.dtype and \
                np.array_equal(a.view(np.uint8), b.view(np.uint8))
            err = (float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                   if a.shape == b.shape and a.size else (0.0 if same else math.inf))
            checks.append(OutputCheck(n, err, 0.0, None, same))
        return VerifyResult(all(c.ok for c in checks), checks, folder=folder,
                            reference="TensorFlow Lite Micro")


DEFAULT_MIN_SQNR = 15.0


@dataclass
class QuantOutputCheck:
    name: str
    sqnr_db: float
    cosine: float
    argmax_agreement: float | None
    samples: int
    min_sqnr: float
    ok: bool


@dataclass
class QuantVerifyResult:
    ok: bool
    outputs: list[QuantOutputCheck]
    folder: Path | None = None


def verify_quantized(model: str | Path, cfg: QuantizeConfig, *, target: str = "x86",
                     shapes: Shapes | None = None, inputs: str | Path | None = None,
                     output_dir: str | Path | None = None,
                     min_sqnr: float = DEFAULT_MIN_SQNR, bind: Binds | None = None,
                     max_loop_iterations: int | None = None) -> QuantVerifyResult:
    """Compiles the model to int8 and compares its outputs with onnxruntime's float outputs on
    every sample of `inputs` (same formats as calibration data; default: the calibration set):
    SQNR over all samples, cosine, and argmax agreement for outputs whose last axis holds
    scores. An output passes with SQNR >= min_sqnr."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="mlcc-verify-") as tmp:
        folder = Path(output_dir) if output_dir else Path(tmp) / "model"
        res = compile(model, folder, target=target, shapes=shapes, quantize=cfg, bind=bind,
                      max_loop_iterations=max_loop_iterations)
        bound = bound_feeds(model, shapes, bind)
        compiled = _load(folder)
        if inputs is None and cfg.calibration is None:
            raise InputError("verify --quantize needs inputs (-i) or --calibration data")
        data = CalibrationSet(inputs or cfg.calibration, _input_spec(res.graph))
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = _bench.onnxruntime_session(model, opts)
        names = [o.name for o in sess.get_outputs()]
        stats = {n: ErrorStats() for n in names}
        for sample in data:
            got = compiled.run(sample)
            for n, ref in zip(names, sess.run(names, {**sample, **bound})):
                stats[n].update(ref, got[n])
        checks = [QuantOutputCheck(n, st.sqnr_db, st.cosine, st.argmax_agreement, data.count,
                                   min_sqnr, st.sqnr_db >= min_sqnr) for n, st in stats.items()]
        return QuantVerifyResult(all(c.ok for c in checks), checks, folder)


def _first_divergence(model, target, shapes, feeds, folder, bind: Binds | None = None,
                      max_loop_iterations: int | None = None
                      ) -> tuple[LayerCheck | None, int]:
    """Compiles again with every surviving ONNX value as an output and finds, in order,
    the first node whose output differs from onnxruntime's."""
    g = _optimize(model, shapes, None, None, bind)
    proto = load_onnx(model)
    onnx_values = {o for n in proto.graph.node for o in n.output if o}
    producers = {o: n for n in g.nodes for o in n.outputs}
    candidates = [o for n in g.nodes for o in n.outputs
                  if o in onnx_values and o not in g.outputs]
    res = compile(model, folder, target=target, shapes=shapes, extra_outputs=candidates,
                  bind=bind, max_loop_iterations=max_loop_iterations)
    got = _load(folder).run(feeds)
    ref = _onnxruntime_outputs(model, {**feeds, **bound_feeds(model, shapes, bind)},
                               candidates + list(g.outputs))
    checked = 0
    for name in candidates + list(g.outputs):
        if name not in got or name not in ref:
            continue
        checked += 1
        c = compare(name, got[name], ref[name])
        if c.max_abs_error > c.tolerance:
            node = producers.get(name)
            label = node.name if node is not None else name
            op = "+".join([node.op_type] + [f.split(":")[-1] for f in node.fused]) if node else "?"
            return LayerCheck(label, op, name, c.max_abs_error, c.tolerance), checked
    del res
    return None, checked


# --------------------------------------------------------------------------------- inspect

@dataclass
class InspectReport:
    text: str
    unsupported: list[str]


def inspect(model: str | Path, *, shapes: Shapes | None = None, bind: Binds | None = None,
            target: str = "x86") -> InspectReport:
    """Operators, shapes, FLOPs, every unsupported node, and the memory plan as `target`'s
    kernels need it (their scratch depends on its cache and threads)."""
    tgt = load_target(target)
    if is_tflite(model):
        try:
            raw = import_tflite(model)
        except UnsupportedError as exc:
            return InspectReport(f"model {Path(model).name}: TensorFlow Lite\n{exc.message}\n",
                                 [exc.message])
        lines = [f"model {Path(model).name}: TensorFlow Lite (int8), {len(raw.nodes)} nodes "
                 f"after import, {sum(1 for v in raw.values.values() if v.is_const)} constants"]
    else:
        raw = to_graph(load_onnx(model))
        lines = [f"model {Path(model).name}: opset {raw.opset}, {len(raw.nodes)} nodes, "
                 f"{sum(1 for v in raw.values.values() if v.is_const)} initializers"]
    counts = Counter(n.op_type for n in raw.nodes)
    lines.append("operators: " + ", ".join(f"{op} x{c}" for op, c in sorted(counts.items())))
    lines.append("inputs: " + ", ".join(f"{n} {format_type(raw.values[n])}" for n in raw.inputs))
    g = specialize(raw, shapes, bind)
    try:
        g = run_pipeline(g)
    except UnsupportedError as exc:
        unsupported = exc.message.splitlines()[1:] or [exc.message]
        lines.append(exc.message)
        return InspectReport("\n".join(lines) + "\n", [u.strip() for u in unsupported])
    total_flops = 0
    lines.append("")
    lines.append(f"{'node':40} {'op':24} {'output':32} {'MFLOPs':>10}")
    for n in g.nodes:
        fl = node_flops(n, g)
        total_flops += fl
        op = "+".join([n.op_type] + [f.split(":")[-1] for f in n.fused])
        out = format_type(g.values[n.outputs[0]]) if n.outputs else ""
        lines.append(f"{n.name[:40]:40} {op[:24]:24} {out[:32]:32} {fl / 1e6:10.2f}")
    prog, slots = lower_graph(g, tgt.lowering_options())
    plan = plan_memory(prog, slots)
    weights = sum(np.asarray(v.const).nbytes for v in prog.constants())
    dynamic = any(g.values[i].is_dynamic for i in g.inputs)      # (--shape LO..HI)
    lines += ["",
              f"total: {total_flops / 1e9:.3f} GFLOPs per inference"
              f"{' (at the largest sizes)' if dynamic else ''}, "
              f"{len(g.nodes)} nodes after "
              f"optimization, {len(prog.calls)} kernel calls",
              f"memory plan: arena {plan.arena_size} bytes (sum of all intermediate tensors "
              f"{plan.total_intermediate} bytes, {_ratio(plan)}), weights {weights} bytes",
              "peak layers: " + "; ".join(
                  f"{', '.join(prog.calls[t].nodes) or prog.calls[t].kernel} "
                  f"({plan.live_bytes[t]} bytes live)" for t in plan.peak_calls())]
    return InspectReport("\n".join(lines) + "\n", [])


def node_flops(n, g: Graph) -> int:
    """FLOPs of one node (a model of dynamic sizes: at the largest sizes)."""
    d = lookup(n)
    return symbolic.upper(d.flops(n, g)) if d is not None else 0


def graph_flops(g: Graph) -> int:
    """Run-time FLOPs of an optimized graph per inference (a multiply-add counts as two)."""
    return sum(node_flops(n, g) for n in g.nodes)


def _ratio(plan) -> str:
    if not plan.total_intermediate:
        return "no intermediates"
    return f"reuse saves {100 * (1 - plan.arena_size / plan.total_intermediate):.0f}%"


# --------------------------------------------------------------------------------- bench

BenchResult = _bench.BenchResult


def bench(model: str | Path, *, target: str = "x86-native", shapes: Shapes | None = None,
          threads: int = 1, runs: int | None = None, output_dir: str | Path | None = None,
          seed: int = 0, isolation: str = "auto", rounds: int | None = None,
          child_timeout_s: float = _bench.CHILD_TIMEOUT_S, bind: Binds | None = None,
          quantize: QuantizeConfig | None = None, per_layer: bool = True,
          conv_choices: dict[str, str] | None = None,
          max_loop_iterations: int | None = None,
          sizes: list[tuple[int, ...]] | None = None
          ) -> BenchResult | _bench.FirmwareBench | _bench.RangeBenchResult:
    """Compiles the model, then times the library and onnxruntime (`threads` intra-op threads,
    graph optimizations ALL); see mlcc/benchmark.py for the method.

    isolation: "shared" times both engines interleaved in this process; "processes" times
    each engine alone in child processes, alternated over `rounds` rounds (default
    benchmark.ROUNDS), each killed after child_timeout_s; "auto" (default) is "shared" on 1
    thread and "processes" on more (two thread pools in one process disturb each other).
    runs: timed samples per engine (per engine and round with "processes"; None: as many as
    fit about 10 s in all). mlcc runs on a thread pool of `threads` threads
    (load(threads=...)), onnxruntime with as many intra-op threads.

    On a firmware target (cortex-m*), nothing is timed: the instructions of one inference
    are counted in the emulator, per layer too (`per_layer`), and the RAM and flash of the
    firmware reported (a FirmwareBench); `quantize` compiles the model to int8 first.
    conv_choices: as for compile (`--tune`).
    max_loop_iterations: as compile's.
    With a range of sizes in `shapes` (LO..HI), the range build is timed at several sizes
    (`sizes`: one tuple per size, a size per dynamic dimension in manifest.json's order;
    default benchmark.range_sizes), each against a static build of exactly that size and
    onnxruntime, the three interleaved in this process (a RangeBenchResult)."""
    check_max_loop_iterations(max_loop_iterations)
    tgt = load_target(target)
    refuse_missing_cpu_features(tgt, "bench")
    if tgt.output == "firmware":
        return _bench_firmware(model, tgt, target, shapes, output_dir, seed, bind, quantize,
                               per_layer, max_loop_iterations)
    if quantize is not None:
        raise InputError("bench compiles float models on this target: --quantize is for "
                         "firmware targets (cortex-m*), whose instructions it counts")
    if threads < 1:
        raise InputError("threads must be at least 1")
    if runs is not None and runs < 1:
        raise InputError("runs must be at least 1")
    if rounds is not None and rounds < 1:
        raise InputError("rounds must be at least 1")
    if isolation not in _bench.ISOLATIONS:
        raise InputError(f"isolation must be one of {', '.join(_bench.ISOLATIONS)}, "
                         f"not {isolation!r}")
    tflite = is_tflite(model)
    if tflite and threads != 1:
        raise InputError("a .tflite model is timed against TensorFlow Lite Micro, which runs "
                         "on one thread: --threads 1")
    if any(isinstance(d, tuple) for dims in (shapes or {}).values() for d in dims):
        if tflite:
            raise InputError("a range of sizes (--shape LO..HI) is for ONNX models")
        if isolation == _bench.PROCESSES:
            raise InputError("a range build is timed against static builds in one process "
                             "(--isolation shared)")
        if not tgt.is_host:
            raise InputError(f"target {tgt.name} does not run on this machine: bench times "
                             f"host targets only")
        return _bench_range(model, target, shapes, threads, runs, output_dir, seed, bind,
                            sizes)
    if sizes is not None:
        raise InputError("--sizes times a build over a range of sizes: give a dimension of "
                         "--shape as LO..HI")
    if isolation == "auto":
        isolation = _bench.PROCESSES if threads > 1 else _bench.SHARED
    if tflite and isolation != _bench.SHARED:
        raise InputError("a .tflite model is timed against TensorFlow Lite Micro in this "
                         "process only (isolation 'shared')")
    if not tgt.is_host:
        raise InputError(f"target {tgt.name} does not run on this machine: bench times host "
                         f"targets only" + (" (for wasm, `make bench-wasm` times it in node "
                                            "against onnxruntime-web)"
                                            if tgt.output == "wasm" else ""))
    with tempfile.TemporaryDirectory(prefix="mlcc-bench-") as tmp:
        folder = Path(output_dir) if output_dir else Path(tmp) / "model"
        t0 = time.perf_counter()
        res = compile(model, folder, target=target, shapes=shapes, bind=bind,
                      conv_choices=conv_choices,
                      max_loop_iterations=max_loop_iterations)
        compile_time = time.perf_counter() - t0
        flops = graph_flops(res.graph)
        feeds = (tflite_random_inputs if tflite else random_inputs)(res.graph, seed)
        ort_feeds = {**feeds, **bound_feeds(model, shapes, bind)}
        settle = _bench.SETTLE_S if threads > 1 else 0.0
        peak = _bench.machine_peak(tgt)
        cores_peak = peak.gflops_per_core * threads
        if isolation == _bench.SHARED:
            reference = (_tflm_runner(model, feeds, res.graph) if tflite else
                         ("onnxruntime", _bench.onnxruntime_runner(str(model), ort_feeds,
                                                                   threads)))
            timings, mode, got, ref = _bench_shared(folder, feeds, reference, threads,
                                                    runs, settle, flops, cores_peak)
        else:
            timings, mode, got, ref = _bench_processes(model, folder, feeds, ort_feeds,
                                                       threads, runs, settle, flops,
                                                       cores_peak, rounds, child_timeout_s)
        checks = [compare(n, got[n], ref[n].reshape(got[n].shape)) for n in got if n in ref]
        if threads == 1:
            notes = ["threads: 1 for both"]
        else:
            notes = [f"threads: {threads} for both (mlcc: a pool of {threads} threads; "
                     f"onnxruntime: {threads} intra-op threads); % of the peak of "
                     f"{threads} cores; each sample after {_bench.SETTLE_S:g} s of untimed "
                     f"calls of the same engine"
                     + (" (the other's workers stop spinning)"
                        if isolation == _bench.SHARED else "")]
        if bind:
            notes.append(f"bound at compile time: {', '.join(bind)} (onnxruntime is fed the "
                         f"same values as inputs)")
        notes.append(mode)
        return BenchResult(
            model=Path(model).name, target=tgt.name,
            shapes={n: tuple(res.graph.values[n].shape) for n in res.graph.inputs},
            threads=threads, flops=flops, mlcc=timings["mlcc"],
            onnxruntime=timings["reference"], peak=peak,
            arena_size=int(res.manifest["arena_size"]),
            weights_size=int(res.manifest["weights_size"]),
            library_size=os.path.getsize(folder / res.manifest["library"]),
            compile_time_s=compile_time, kernel_calls=int(res.manifest["kernel_calls"]),
            max_abs_error=max((c.max_abs_error for c in checks), default=0.0),
            outputs_agree=all(c.ok for c in checks), notes=notes, isolation=isolation,
            reference=timings["reference"].engine)


def _count_firmware(fm, feeds: dict, runs: int, plugin: Path, mark: int = 0
                    ) -> tuple[int, list[int], dict]:
    """(instructions, marks, outputs) of one boot of the firmware running `runs` inferences."""
    fm.extra_args = ["--runs", str(runs)]
    fm.qemu_options = ["-plugin", f"{plugin},mark={mark:#x}" if mark else str(plugin),
                       "-d", "plugin"]
    got = fm.run(feeds)
    insns, marks = _bench.parse_icount(fm.last_stderr)
    return insns, marks, got


def _bench_firmware(model, tgt, target: str, shapes, output_dir, seed, bind, quantize,
                    per_layer: bool, max_loop_iterations: int | None = None
                    ) -> _bench.FirmwareBench:
    """Instructions per inference of the firmware under its emulator (mlcc/benchmark.py)."""
    from .runtime import FirmwareModel

    with tempfile.TemporaryDirectory(prefix="mlcc-bench-") as tmp:
        folder = Path(output_dir) if output_dir else Path(tmp) / "model"
        res = compile(model, folder, target=target, shapes=shapes, bind=bind,
                      quantize=quantize, max_loop_iterations=max_loop_iterations)
        plugin = _bench.build_icount_plugin(Path(tmp) / "plugin")
        tflite = is_tflite(model)
        feeds = tflite_random_inputs(res.graph, seed) if tflite else random_inputs(res.graph,
                                                                                    seed)
        fm = FirmwareModel(folder)
        one, _, got = _count_firmware(fm, feeds, 1, plugin)
        two, _, _ = _count_firmware(fm, feeds, 2, plugin)
        again, _, _ = _count_firmware(fm, feeds, 1, plugin)
        if again != one:
            raise MlccError(f"the instruction count did not repeat ({one} then {again})")
        notes = [f"--runs 2 minus --runs 1 under {shlex.join(tgt.run)}, counted by the TCG "
                 f"plugin of runtime_c/qemu-icount (repeatable); inputs: random (seed {seed})"]
        check = ""
        if tflite:      # as verify: identical to TFLM, bit for bit
            ref = tflm_outputs(model, feeds, res.graph)
            same = all(np.array_equal(got[n].ravel(), ref[n].ravel()) for n in got if n in ref)
            check = (f"outputs {'identical to' if same else 'DIFFER from'} TensorFlow Lite "
                     f"Micro's")
        elif quantize is None:
            ref = _onnxruntime_outputs(model, {**feeds, **bound_feeds(model, shapes, bind)})
            checks = [compare(n, got[n], ref[n]) for n in got if n in ref]
            check = (f"outputs {'match' if all(c.ok for c in checks) else 'DO NOT match'} "
                     f"onnxruntime (max abs error "
                     f"{max((c.max_abs_error for c in checks), default=0.0):.3g})")
        layers = []
        if per_layer:
            layers = _count_layers(res, tgt, Path(tmp) / "layers", feeds, plugin)
            notes.append("per layer: a second build calls an empty function before and after "
                         "every kernel call; each layer's count includes its 2 instructions")
        return _bench.FirmwareBench(
            model=Path(model).name, target=tgt.name, description=tgt.description,
            insns=two - one, memory=res.manifest["memory"],
            arena_size=int(res.manifest["arena_size"]), layers=layers, check=check,
            notes=notes)


def _count_layers(res: CompileResult, tgt, copy: Path, feeds: dict, plugin: Path
                  ) -> list[_bench.LayerCount]:
    """Instructions of each kernel call: the firmware rebuilt in `copy` with a mark around
    every call (firmware.instrument_layers), counted in one boot."""
    import shutil
    from .runtime import FirmwareModel

    shutil.copytree(res.folder, copy)
    m = res.manifest
    calls = res.calls
    model_c = copy / "model.c"
    model_c.write_text(_fw.instrument_layers(model_c.read_text(), m["name"], len(calls)))
    elf = build_firmware(tgt, copy, res.sources, res.firmware_defines)
    _, marks, _ = _count_firmware(FirmwareModel(copy), feeds, 1, plugin,
                                  _fw.symbol_address(elf, _fw.LAYER_MARK))
    if len(marks) != len(calls) + 1:
        raise MlccError(f"the per-layer build marked {len(marks)} points, not "
                        f"{len(calls) + 1}")
    return [_bench.LayerCount(", ".join(c.nodes) or c.kernel, c.op, c.kernel, b - a)
            for c, a, b in zip(calls, marks, marks[1:])]


def _tflm_runner(model, feeds: dict, g: Graph) -> tuple[str, tuple]:
    """("TFLM", (call, outputs)): TensorFlow Lite Micro's reference kernels; each call sets
    the inputs again (TFLM's arena may reuse an input's bytes once it is read)."""
    interp = _tflm_interpreter(model)
    inputs = [np.ascontiguousarray(feeds[n]) for n in g.inputs]

    def call():
        for k, arr in enumerate(inputs):
            interp.set_input(arr, k)
        interp.invoke()

    call()
    return "TFLM", (call, {n: np.asarray(interp.get_output(k)).copy()
                           for k, n in enumerate(g.outputs)})


def _bench_range(model, target: str, shapes: Shapes, threads: int, runs: int | None,
                 output_dir, seed: int, bind: Binds | None,
                 sizes: list[tuple[int, ...]] | None) -> _bench.RangeBenchResult:
    """mlcc bench with a range of sizes (see bench): the range build, a static build of each
    size and onnxruntime, interleaved in this process at each size."""
    with tempfile.TemporaryDirectory(prefix="mlcc-bench-") as tmp:
        folder = Path(output_dir) if output_dir else Path(tmp) / "model"
        # the dynamic dimensions (to check `sizes` before anything is built)
        dims = compile(model, Path(tmp) / "plan", target=target, shapes=shapes, bind=bind,
                       build=False).manifest["dims"]
        names = [d["name"] for d in dims]
        sets = [tuple(int(v) for v in one) for one in sizes] if sizes else \
            _bench.range_sizes(dims)
        if not sets:
            raise InputError("--sizes: give at least one size")
        for one in sets:
            if len(one) != len(dims):
                raise InputError(f"--sizes {'x'.join(map(str, one))}: give {len(dims)} "
                                 f"size{'s' * (len(dims) != 1)} per entry, one per dynamic "
                                 f"dimension ({', '.join(names)}), joined by x")
            for v, d in zip(one, dims):
                if not d["min"] <= v <= d["max"]:
                    raise InputError(f"--sizes: {d['name']} = {v} is outside its range "
                                     f"{d['min']}..{d['max']}")
        largest = tuple(d["max"] for d in dims)
        t0 = time.perf_counter()
        res = compile(model, folder, target=target, shapes=shapes, bind=bind)
        compile_time = time.perf_counter() - t0
        ranged = _load(folder, threads=threads)
        settle = _bench.SETTLE_S if threads > 1 else 0.0
        peak = _bench.machine_peak(load_target(target))
        fixed = {k: v for k, v in (shapes or {}).items()
                 if not any(isinstance(d, tuple) for d in v)}

        def static_shapes(env: dict[str, int]) -> Shapes:
            return {**fixed, **{n: tuple(symbolic.evaluate(tuple(res.graph.values[n].shape),
                                                           env)) for n in res.graph.inputs}}

        static_max_arena = int(compile(
            model, Path(tmp) / "static_max", target=target,
            shapes=static_shapes(dict(zip(names, largest))), bind=bind,
            build=False).manifest["arena_size"])
        rows = []
        for i, one in enumerate(sets):
            env = dict(zip(names, one))
            sres = compile(model, Path(tmp) / f"static{i}", target=target,
                           shapes=static_shapes(env), bind=bind)
            feeds = random_inputs(res.graph, seed, env)
            run_range, got = ranged.prepare(feeds)
            static = _load(Path(tmp) / f"static{i}", threads=threads)
            run_static, got_static = static.prepare(feeds)
            for run, what in ((run_range, "the range build"), (run_static, "a static build")):
                status = run()
                if status != 0:
                    raise MlccError(f"run failed ({what} at {env}): "
                                    f"{ranged.status_string(status)}")
            run_ref, ref = _bench.onnxruntime_runner(
                str(model), {**feeds, **bound_feeds(model, shapes, bind)}, threads)
            run_ref()
            samples = _bench.measure({"range": run_range, "static": run_static,
                                      "onnxruntime": run_ref}, runs, settle_s=settle,
                                     budget_s=_bench.TIME_BUDGET_S / len(sets))
            flops = graph_flops(sres.graph)
            t = {e: _bench.summarize(e, samples[e], int(c), flops,
                                     peak.gflops_per_core * threads)
                 for e, c in zip(("range", "static", "onnxruntime"), samples["_calls"])}
            ours = [compare(n, got[n], ref[n].reshape(got[n].shape)) for n in got if n in ref]
            theirs = [compare(n, got_static[n], ref[n].reshape(got_static[n].shape))
                      for n in got_static if n in ref]
            rows.append(_bench.RangeRow(
                one, t["range"], t["static"], t["onnxruntime"], int(sres.manifest["arena_size"]),
                max((c.max_abs_error for c in ours), default=0.0),
                max((c.max_abs_error for c in theirs), default=0.0),
                all(c.ok for c in ours + theirs)))
            del static, run_static
        notes = [f"sizes: {', '.join(names)}; each size's three engines timed "
                 f"interleaved (alternating which goes first), about "
                 f"{_bench.TIME_BUDGET_S / len(sets):.2g} s of samples per size; "
                 f"ratios are of median latencies (< 1: the range build is faster)"]
        if threads > 1:
            notes.append(f"threads: {threads} for every engine, each sample after "
                         f"{_bench.SETTLE_S:g} s of untimed calls of the same engine")
        if bind:
            notes.append(f"bound at compile time: {', '.join(bind)}")
        return _bench.RangeBenchResult(
            model=Path(model).name, target=load_target(target).name,
            shapes="; ".join(f"{k}={','.join(dim_text(d) for d in v)}"
                             for k, v in (shapes or {}).items()),
            dims=names, threads=threads, rows=rows, arena_size=int(res.manifest["arena_size"]),
            static_max_arena=static_max_arena, weights_size=int(res.manifest["weights_size"]),
            library_size=os.path.getsize(folder / res.manifest["library"]),
            compile_time_s=compile_time, notes=notes)


def _bench_shared(folder, feeds, reference, threads, runs, settle, flops, cores_peak):
    """({"mlcc": Timing, "reference": Timing}, the report's mode line, mlcc outputs, the
    reference's outputs), both engines loaded in this process, their samples interleaved.
    reference: (name, (call, outputs)) of onnxruntime or TFLM."""
    compiled = _load(folder, threads=threads)
    run_mlcc, got = compiled.prepare(feeds)
    status = run_mlcc()
    if status != 0:
        raise MlccError(f"run failed: {compiled.status_string(status)}")
    name, (run_ref, ref) = reference
    run_ref()
    samples = _bench.measure({"mlcc": run_mlcc, name: run_ref}, runs, settle_s=settle)
    calls = samples["_calls"]
    timings = {key: _bench.summarize(e, samples[e], int(c), flops, cores_peak)
               for key, e, c in zip(("mlcc", "reference"), ("mlcc", name), calls)}
    mode = ("mode: one process, both engines loaded, their samples interleaved (alternating "
            "which goes first)")
    return timings, mode, got, ref


def _bench_processes(model, folder, feeds, ort_feeds, threads, runs, settle, flops, cores_peak,
                     rounds, timeout_s):
    """As _bench_shared, each engine timed alone in child processes (measure_in_processes)."""
    rounds = rounds or _bench.ROUNDS
    m = _bench.measure_in_processes(model, folder, feeds, threads, rounds=rounds, runs=runs,
                                    settle_s=settle, timeout_s=timeout_s,
                                    ort_feeds=ort_feeds)
    timings = {key: _bench.summarize_rounds(e, m.latencies[e], m.calls[e], flops, cores_peak)
               for key, e in zip(("mlcc", "reference"), _bench.ENGINES)}
    mode = (f"mode: separate processes, one engine at a time: {2 * rounds} child processes "
            f"alternated (mlcc, onnxruntime, mlcc, ...), {rounds} rounds, each child timed for "
            + (f"{runs} samples" if runs else f"{_bench.TIME_BUDGET_S / (2 * rounds):.3g} s")
            + " after its warm-up; median and p90 = medians over the rounds of each round's "
              "median and p90" + _helper_cpu_note(m.children))
    return timings, mode, m.outputs["mlcc"], m.outputs["onnxruntime"]


# A worker that ran for less than half of the caller's CPU time was not on a CPU of its own
# (0-1% when another job held the second CPU; 0.97-1.00 on the quiet machine, spinning included)
STARVED_HELPER = 0.5


def _helper_cpu_note(children: list[dict]) -> str:
    """The lowest share of a worker's CPU time per engine over its rounds (benchmark_worker's
    helper_cpu): well under 1, a round whose worker waited for a CPU (a busy machine)."""
    low = {}
    for c in children:
        if c.get("helper_cpu") is not None:
            low[c["engine"]] = min(low.get(c["engine"], c["helper_cpu"]), c["helper_cpu"])
    if not low:
        return ""
    starved = [e for e, v in low.items() if v < STARVED_HELPER]
    return ("; the worker's CPU time over the caller's, lowest round: "
            + ", ".join(f"{e} {v:.2f}" for e, v in low.items())
            + (f" ({' and '.join(starved)}: a worker waited for a CPU, a busy machine; "
               f"those rounds time fewer threads)" if starved else ""))


__all__ = ["compile", "load", "verify", "inspect", "bench", "CompileResult", "VerifyResult",
           "BenchResult", "graph_flops",
           "random_inputs", "compare", "__version__", "describe", "unsupported_reason"]
