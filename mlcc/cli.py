"""The mlcc command line: parse, call the API, print, exit code. Nothing else lives here.

Exit codes: 0 success; 1 a user error (bad model, target, inputs) or a failed verification;
3 the model uses something mlcc does not support; 70 an internal error (a bug in mlcc).
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
from pathlib import Path

import click

from .version import __version__
from .errors import InputError, MlccError

EXIT_VERIFY_FAILED = 1
EXIT_INTERNAL = 70


def _shapes(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    from . import api

    return api.parse_shapes(values)


def _binds(values: tuple[str, ...]) -> dict[str, object]:
    from . import api

    return api.parse_binds(values)


def _sizes(text: str | None) -> list[tuple[int, ...]] | None:
    """--sizes 32,320,1280 or 1x64,8x640: one tuple per entry."""
    if text is None:
        return None
    try:
        return [tuple(int(v) for v in entry.split("x")) for entry in text.split(",")]
    except ValueError:
        raise MlccError(f"--sizes {text!r}: expected sizes such as 32,320,1280 (one dynamic "
                        f"dimension) or 1x64,8x640 (two)") from None


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("b").rstrip("i")
    mult = units.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in units else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise MlccError(f"--max-arena {text!r}: expected a byte count such as 65536 or 512K"
                        ) from None
    if value < 0:
        raise MlccError("--max-arena must not be negative")
    return value


class _Ctx:
    verbose = False


def _fail(exc: BaseException) -> None:
    if isinstance(exc, MlccError):
        click.echo(f"mlcc: error: {exc.message}", err=True)
        if _Ctx.verbose and exc.detail:
            click.echo(exc.detail, err=True)
        sys.exit(exc.exit_code)
    click.echo(f"mlcc: internal error: {type(exc).__name__}: {exc} (this is a bug in mlcc; "
               f"rerun with --verbose for details)", err=True)
    if _Ctx.verbose:
        traceback.print_exc()
    sys.exit(EXIT_INTERNAL)


def _guard(fn):
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except click.exceptions.Exit:
            raise
        except (click.ClickException, click.Abort):
            raise
        except SystemExit:
            raise
        except KeyboardInterrupt:
            click.echo("mlcc: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # The reader of our output went away (`mlcc targets | head`): not an error of ours.
            # stdout is pointed at devnull so that the interpreter's final flush stays quiet.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except BaseException as exc:  # noqa: BLE001 - the one place that turns errors into exits
            _fail(exc)
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlcc")
@click.option("--verbose", "-v", is_flag=True, help="Print details (and tracebacks of bugs).")
def main(verbose: bool) -> None:
    """mlcc: compile ONNX models to portable C and a shared library."""
    _Ctx.verbose = verbose


target_option = click.option("--target", "-t", default="x86", show_default=True,
                             help="Built-in target name (see `mlcc targets`) or a YAML file.")
max_output_option = click.option(
    "--max-output", "max_outputs", multiple=True, metavar="NAME=N",
    help="Plan the output NAME, whose size depends on the data (NonZero, NonMaxSuppression, "
         "...), for at most N along that axis; repeatable.")
shape_option = click.option("--shape", "shapes", multiple=True, metavar="NAME=D1,D2,...",
                            help="Shape of an input; repeat for each input. A dimension "
                                 "LO..HI is a range of sizes, LO..HI:STEP the multiples of "
                                 "STEP in it, P+1 an expression of a dimension name that "
                                 "another input binds.")
max_loop_option = click.option(
    "--max-loop-iterations", "max_loop_iterations", default=None, metavar="N",
    help="Fail a Loop whose trip count or condition is known only at run time with status "
         "MLCC_ERR_LOOP_LIMIT (12) when it needs more than N iterations (default 1000000).")
bind_option = click.option("--bind", "binds", multiple=True, metavar="NAME=V1,V2,...|NAME=F.npy",
                           help="Give an input its value at compile time (it stops being an "
                                "input and folds like a constant); repeatable.")


# mlcc.quant's CALIBRATORS, its default first (the CLI imports only the api, lazily; a test
# checks that the two lists agree)
CALIBRATORS = ("auto", "minmax", "percentile", "entropy")


class SmoothAlpha(click.ParamType):
    """--smooth: auto, off or an alpha in [0, 1]."""
    name = "auto|off|ALPHA"

    def convert(self, value, param, ctx):
        if value in ("auto", "off") or isinstance(value, float):
            return value
        try:
            alpha = float(value)
        except ValueError:
            alpha = float("nan")
        if not 0.0 <= alpha <= 1.0:
            self.fail(f"{value!r} is not auto, off or a number in [0, 1]", param, ctx)
        return alpha


def quant_options(fn):
    """--quantize and its calibration options (compile and verify)."""
    opts = [
        click.option("--quantize", type=click.Choice(["int8"]), default=None,
                     help="Post-training quantization to integer kernels (needs "
                          "--calibration)."),
        click.option("--calibration", default=None, type=click.Path(),
                     help="Calibration inputs: an .npz (one array per input, first axis = "
                          "samples), a folder of .npy/.npz files, or a .py file defining "
                          "calibration_data() that yields input dicts."),
        click.option("--calibrator", type=click.Choice(list(CALIBRATORS)),
                     default=CALIBRATORS[0], show_default=True,
                     help="How activation ranges are chosen: auto (per tensor, the range of "
                          "least quantization error on the calibration data), minmax, "
                          "percentile or entropy (KL search)."),
        click.option("--percentile", default=99.99, show_default=True, type=float,
                     help="For --calibrator percentile."),
        click.option("--per-channel/--per-tensor", default=True, show_default=True,
                     help="Weight scales per output channel or one per tensor."),
        click.option("--requant", type=click.Choice(["float", "fixed"]), default=None,
                     help="Requantization arithmetic (default: the target's int8.requant)."),
        click.option("--report", default=None, type=click.Path(dir_okay=False),
                     help="Write a per-layer accuracy report (markdown) to this file."),
        click.option("--export-qdq", "export_qdq", default=None,
                     type=click.Path(dir_okay=False),
                     help="Also write the quantization as a QDQ ONNX model (for onnxruntime)."),
        click.option("--smooth", default=None, type=SmoothAlpha(), metavar="auto|off|ALPHA",
                     help="SmoothQuant: move activation outliers of the integer MatMuls' "
                          "inputs into their weights; auto (the default) chooses alpha per "
                          "input on the calibration data, off disables it."),
        click.option("--equalize", is_flag=True,
                     help="Cross-layer equalization of Conv -> Conv pairs before "
                          "calibration (exact: pairs through Relu6 are skipped)."),
        click.option("--equalize-relu6", "equalize_relu6", is_flag=True,
                     help="--equalize, also through Relu6, replaced by Relu (changes the "
                          "float function where a value exceeded 6)."),
        click.option("--bias-correction", "bias_correction", is_flag=False,
                     flag_value="on", default=None, type=click.Choice(["auto", "on", "off"]),
                     help="Add the mean output shift of weight rounding, (W - Wq) E[x] with "
                          "E[x] from the calibration data, back to each layer's bias (alone: "
                          "on; auto: per channel where it lowers the held-out output error)."),
        click.option("--adaround", default=None, type=click.Choice(["auto", "on", "off"]),
                     help="Learned weight rounding (up or down per weight, for the least "
                          "layer output error on the calibration data); auto: per channel "
                          "where it lowers the held-out error."),
        click.option("--pure-int8", "pure_int8", is_flag=True,
                     help="Every layer that can be integer is: no layer kept in float by "
                          "the default mix (which keeps the few the sensitivity ranks worst "
                          "until the output SQNR reaches 30 dB, within half of float's "
                          "estimated time)."),
        click.option("--keep-float", "keep_float", multiple=True, metavar="PATTERN",
                     help="Keep these groups in float (repeatable or comma-separated): node "
                          "names as the compile output and the report print them, shell-style "
                          "patterns over them (p2o.Conv.3*), or op:TYPE (op:Conv)."),
        click.option("--w8a16", "w8a16", multiple=True, metavar="PATTERN",
                     help="Run these Conv / Gemm / MatMul groups with int16 activations and "
                          "int8 weights (W8A16 integer kernels; the --keep-float patterns)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _patterns(items) -> tuple[str, ...]:
    """Repeatable, comma-separated node patterns (--keep-float, --w8a16)."""
    return tuple(p.strip() for item in items for p in item.split(",") if p.strip())


def _quant_config(quantize, calibration, calibrator, percentile, per_channel, requant, report,
                  export_qdq=None, smooth=None, equalize=False, equalize_relu6=False,
                  bias_correction=None, keep_float=(), adaround=None,
                  pure_int8=False, w8a16=()):
    from . import api

    if quantize is None:
        if calibration or report or export_qdq or smooth is not None or equalize or \
                equalize_relu6 or bias_correction or keep_float or adaround or pure_int8 or \
                w8a16:
            raise MlccError("--calibration, --report, --export-qdq, --smooth, --equalize, "
                            "--equalize-relu6, --bias-correction, --adaround, --keep-float, "
                            "--w8a16 and --pure-int8 need --quantize int8")
        return None
    defaults = api.QuantizeConfig()
    return api.QuantizeConfig(calibration, calibrator=calibrator, percentile=percentile,
                              per_channel=per_channel, requant=requant, report=report,
                              export_qdq=export_qdq,
                              smooth="auto" if smooth is None else (None if smooth == "off"
                                                                    else smooth),
                              equalize="relu6" if equalize_relu6 else bool(equalize),
                              bias_correction=bias_correction or defaults.bias_correction,
                              adaround=adaround or defaults.adaround,
                              keep_float=_patterns(keep_float), w8a16=_patterns(w8a16),
                              auto_mix=not pure_int8,
                              progress=lambda text: click.echo(text, err=True))


def _target_cost_text(mp: dict) -> str:
    """'; 30 dB would take ...' where the default mix missed its target."""
    if mp["met"] or "target_cost" not in mp:
        return ""
    if mp["target_cost"] is None:
        return f"; {mp['value']:g} dB not reached with every layer moved"
    return (f"; {mp['value']:g} dB would need --time-budget "
            f"{math.ceil(mp['target_cost'] * 100) / 100:g} (of float's estimated time)")


def _progress_bar(label: str, done: int, total: int) -> None:
    """A one-line progress bar on a terminal (nothing in logs: stderr not a terminal)."""
    if not sys.stderr.isatty() or total <= 0:
        return
    width = 30
    fill = int(width * done / total)
    end = "\n" if done >= total else ""
    sys.stderr.write(f"\r{label:>12} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}{end}")
    sys.stderr.flush()


class _Progress:
    """A command's progress on stderr: messages, and on a terminal one-line bars
    (_progress_bar); a message first clears a bar still drawn, which the next step redraws."""

    def __init__(self):
        self.drawn = False

    def say(self, text: str) -> None:
        if self.drawn and sys.stderr.isatty():
            sys.stderr.write("\r\033[K")
        self.drawn = False
        click.echo(text, err=True)

    def bar(self, label: str, done: int, total: int) -> None:
        _progress_bar(label, done, total)
        self.drawn = 0 < total and done < total


@main.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@target_option
@click.option("--output", "-o", "output", default=None, type=click.Path(file_okay=False),
              help="Output folder (default: build/<model name>).")
@shape_option
@bind_option
@click.option("--name", default=None, help="Prefix of the C symbols (default: the file name).")
@click.option("--max-arena", default=None, metavar="BYTES",
              help="Fail if the working memory exceeds this (e.g. 262144 or 256K).")
@click.option("--embed-weights", is_flag=True,
              help="Also compile the weights into the library (weights.c), for devices "
                   "without files.")
@max_output_option
@max_loop_option
@click.option("--dump-ir", is_flag=True, help="Print the graph after each pass.")
@click.option("--no-build", is_flag=True, help="Write the sources only; skip the C compiler.")
@click.option("--min-sqnr", "min_sqnr", type=float, default=None, metavar="DB",
              help="With --quantize: keep the most sensitive layers in float until the "
                   "worst output SQNR against float reaches DB.")
@click.option("--max-drop", "max_drop", type=float, default=None, metavar="D",
              help="With --quantize: keep the most sensitive layers in float until the "
                   "metric (--metric, default: top-1 agreement in %) drops by at most D "
                   "from the float model's.")
@click.option("--time-budget", "time_budget", type=float, default=None, metavar="R",
              help="With --quantize: the estimated int8 / float time the default mix may "
                   "spend keeping sensitive layers at W8A16 or float, in (0, 1.5] (default: "
                   "0.5, raised up to 0.8 where that reaches 30 dB, except for class "
                   "probabilities).")
@click.option("--metric", default=None, metavar="FILE.py:FN",
              help="For --max-drop: FN(float_outputs, quantized_outputs) -> a number, higher "
                   "is better (each a list of dicts output name -> array, one per sample).")
@click.option("--eval-data", "eval_data", default=None, type=click.Path(),
              help="Held-out samples for --min-sqnr / --max-drop, all of them (the forms "
                   "of --calibration; default: the first 16 calibration samples).")
@click.option("--tune", is_flag=True,
              help="Choose each convolution's kernel by timing the candidates on this "
                   "machine (host targets; cached per CPU; written to tuning.json).")
@click.option("--tuning", "tuning_file", default=None, type=click.Path(dir_okay=False),
              help="The kernel choices of a tuning.json (from --tune), for a reproducible "
                   "build.")
@quant_options
@_guard
def compile_cmd(model, target, output, shapes, binds, name, max_arena, embed_weights,
                max_outputs, max_loop_iterations, dump_ir, no_build, min_sqnr, max_drop,
                time_budget, metric, eval_data, tune, tuning_file, quantize, calibration,
                calibrator, percentile, per_channel, requant, report, export_qdq, smooth,
                equalize, equalize_relu6, bias_correction, keep_float, adaround, pure_int8,
                w8a16):
    """Compile MODEL (an .onnx file) into C sources, a weight blob and a library."""
    from . import api, tuning

    qcfg = _quant_config(quantize, calibration, calibrator, percentile, per_channel, requant,
                         report, export_qdq, smooth, equalize, equalize_relu6,
                         bias_correction, keep_float, adaround, pure_int8, w8a16)
    for flag, value in (("--min-sqnr", min_sqnr), ("--max-drop", max_drop),
                        ("--time-budget", time_budget), ("--metric", metric),
                        ("--eval-data", eval_data)):
        if value is not None and qcfg is None:
            raise MlccError(f"{flag} needs --quantize int8")
    term = _Progress()
    if qcfg is not None:
        qcfg.min_sqnr, qcfg.max_drop, qcfg.metric, qcfg.eval_data, qcfg.time_budget = \
            min_sqnr, max_drop, metric, eval_data, time_budget
        qcfg.progress, qcfg.progress_bar = term.say, term.bar
    out = output or str(Path("build") / Path(model).stem)
    if tune and tuning_file:
        raise MlccError("--tune measures the choices, --tuning reads them: give one")
    if (tune or tuning_file) and qcfg is not None:
        raise MlccError("--tune and --tuning choose float convolution kernels; an int8 "
                        "build (--quantize) has none to choose")
    tuned, choices = None, None
    if tune:
        tuned = tuning.tune(model, target, shapes=_shapes(shapes), bind=_binds(binds))
        choices = tuned.choices
        click.echo(f"tuned {len(choices)} convolution layers on {tuned.cpu} "
                   f"({tuned.measured} measured, the others from the cache) in "
                   f"{tuned.seconds:.1f} s")
    elif tuning_file:
        choices = tuning.read_tuning(tuning_file)
    res = api.compile(model, out, target=target, shapes=_shapes(shapes), name=name,
                      max_arena=_size(max_arena), build=not no_build,
                      embed_weights=embed_weights, quantize=qcfg, bind=_binds(binds),
                      max_outputs=api.parse_max_outputs(max_outputs),
                      max_loop_iterations=api.parse_max_loop_iterations(max_loop_iterations),
                      dump_ir=(lambda text: click.echo(text)) if dump_ir else None,
                      conv_choices=choices, progress_bar=term.bar)
    if tuned is not None:
        (Path(res.folder) / "tuning.json").write_text(
            json.dumps(tuned.to_json(), indent=1) + "\n")
    if res.quant is not None:
        q = res.manifest["quantization"]
        floats = q["float_layers"]
        click.echo(f"int8: {q['integer_layers']} integer layers, {len(floats)} in float"
                   + (f" ({', '.join(floats[:8])}{', ...' if len(floats) > 8 else ''})"
                      if floats else "")
                   + (f", {len(q['w8a16_layers'])} at W8A16" if q.get("w8a16_layers") else "")
                   + (f"; report in {report}" if report else ""))
        if "mixed_precision" in q and q["mixed_precision"].get("auto"):
            mp = q["mixed_precision"]
            click.echo(f"default mix ({mp['target']}; --pure-int8: none): "
                       f"{len(mp['kept'])} layers kept in float"
                       + (f", {len(mp['w8a16'])} at W8A16" if mp.get("w8a16") else "")
                       + f", simulated output SQNR "
                       f"{mp['steps'][0][1]:.1f} -> {mp['final']:.1f} dB, estimated "
                       f"int8/float time {mp['time_ratio']:.2f}" + _target_cost_text(mp))
        elif "mixed_precision" in q:
            mp = {**q["mixed_precision"], **res.quant.timing}
            click.echo(f"{mp['target']} met: {len(mp['kept'])} of {len(mp['order'])} layers "
                       f"kept in float"
                       + (f", {len(mp['w8a16'])} at W8A16" if mp.get("w8a16") else "")
                       + f", score {mp['final']:.4g} on {mp['samples']} samples, "
                       f"{mp['ms']:.3g} ms, weights {mp['weights']} bytes")
    m = res.manifest
    click.echo(f"compiled {Path(model).name} for {m['target']} into {res.folder}/: "
               f"{m['kernel_calls']} kernel calls, arena {m['arena_size']} bytes, "
               f"weights {m['weights_size']} bytes"
               + ("" if no_build else f", {m['library']}"))
    if "memory" in m:       # a firmware target: what the linked firmware.elf takes
        ram, flash = m["memory"]["ram"], m["memory"]["flash"]
        click.echo(f"RAM {ram['total']} bytes (arena {ram['arena']}, I/O buffers {ram['io']}, "
                   f"statics {ram['statics']}, stack {ram['stack']}) of {ram['size']}; flash "
                   f"{flash['total']} bytes (code {flash['code']}, weights {flash['weights']}) "
                   f"of {flash['size']}")


@main.command("run")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--inputs", "-i", "inputs", required=True, type=click.Path(dir_okay=False),
              help=".npz file with one array per model input, keyed by input name.")
@click.option("--outputs", "-o", "outputs", default=None, type=click.Path(dir_okay=False),
              help=".npz file to write the outputs to (keyed by output name), or .npy for "
                   "a model of one output.")
@_guard
def run_cmd(folder, inputs, outputs):
    """Run a compiled model FOLDER on inputs from an .npz file."""
    import numpy as np

    from . import api

    m = api.load(folder)
    try:
        with np.load(inputs, allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
    except Exception as exc:
        raise InputError(f"{inputs}: cannot read inputs ({exc})") from None
    try:
        result = m.run(feeds)
    except InputError as exc:
        raise InputError(f"{inputs}: {exc.message}") from None
    if outputs:
        if outputs.endswith(".npy") and len(result) != 1:
            raise InputError(f"{outputs}: an .npy file holds one array and the model has "
                             f"{len(result)} outputs (write an .npz)")
        # bfloat16, float8, int4...: written so that np.load gives the ml_dtypes arrays again
        api.save_arrays(outputs, result)
    for name, arr in result.items():
        flat = arr.reshape(-1)
        # float(x): bfloat16, float8 and int4 scalars (ml_dtypes) have no format of their own
        head = ", ".join(f"{float(x):.6g}" for x in flat[:6]) + (", ..." if flat.size > 6
                                                                  else "")
        click.echo(f"{name}: {arr.dtype} {list(arr.shape)} [{head}]")


@main.command("verify")
@click.argument("model", type=click.Path(dir_okay=False))
@target_option
@shape_option
@bind_option
@click.option("--inputs", "-i", "inputs", default=None, type=click.Path(dir_okay=False),
              help=".npz inputs (default: seeded random inputs).")
@click.option("--per-layer", is_flag=True,
              help="On a mismatch, find the first ONNX node whose output diverges.")
@click.option("--output", "-o", "output", default=None, type=click.Path(file_okay=False),
              help="Keep the compiled model in this folder.")
@click.option("--min-sqnr", default=None, type=float,
              help="With --quantize: the output SQNR (dB) that passes (default 15).")
@max_output_option
@max_loop_option
@quant_options
@_guard
def verify_cmd(model, target, shapes, binds, inputs, per_layer, output, min_sqnr, max_outputs,
               max_loop_iterations, quantize,
               calibration, calibrator, percentile, per_channel, requant, report, export_qdq,
               smooth, equalize, equalize_relu6, bias_correction, keep_float, adaround,
               pure_int8, w8a16):
    """Compile MODEL and compare its outputs with onnxruntime's."""
    from . import api

    sh = _shapes(shapes)
    bind = _binds(binds)
    loop_limit = api.parse_max_loop_iterations(max_loop_iterations)
    qcfg = _quant_config(quantize, calibration, calibrator, percentile, per_channel, requant,
                         report, export_qdq, smooth, equalize, equalize_relu6,
                         bias_correction, keep_float, adaround, pure_int8, w8a16)
    if qcfg is not None:
        if max_outputs:
            raise MlccError("mlcc verify takes --max-output without --quantize only")
        res = api.verify_quantized(model, qcfg, target=target, shapes=sh, inputs=inputs,
                                   output_dir=output, bind=bind,
                                   max_loop_iterations=loop_limit,
                                   min_sqnr=api.DEFAULT_MIN_SQNR if min_sqnr is None else min_sqnr)
        for c in res.outputs:
            agree = "" if c.argmax_agreement is None else \
                f", argmax agrees on {100 * c.argmax_agreement:.1f}% of {c.samples} samples"
            click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: SQNR {c.sqnr_db:.1f} dB "
                       f"(pass >= {c.min_sqnr:.1f}), cosine {c.cosine:.5f}{agree}")
        click.echo("verified: int8 outputs agree with onnxruntime's float outputs" if res.ok
                   else "verification FAILED")
        if not res.ok:
            sys.exit(EXIT_VERIFY_FAILED)
        return
    feeds = api.load_inputs_npz(inputs, model, sh, bind) if inputs else None
    res = api.verify(model, target=target, shapes=sh, inputs=feeds, per_layer=per_layer,
                     output_dir=output, bind=bind,
                     max_outputs=api.parse_max_outputs(max_outputs),
                     max_loop_iterations=loop_limit)
    for note in res.notes:
        click.echo(note)
    for c in res.outputs:
        extra = "" if c.argmax_ok is None else f", argmax {'same' if c.argmax_ok else 'DIFFERS'}"
        click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: max abs error {c.max_abs_error:.3g} "
                   f"(tolerance {c.tolerance:.3g}{extra})")
    if res.first_divergence is not None:
        d = res.first_divergence
        click.echo(f"first diverging node: {d.node!r} ({d.op_type}) output {d.value!r}: max abs "
                   f"error {d.max_abs_error:.3g} > {d.tolerance:.3g}")
    elif per_layer and not res.ok:
        click.echo(f"per-layer: all {res.layers_checked} intermediate values match; only the "
                   f"outputs differ")
    if res.ok and res.ties:
        click.echo(f"verified: outputs within tolerance of {res.reference} after "
                   f"{len(res.ties)} rounding tie{'s' * (len(res.ties) > 1)} at "
                   + "; ".join(res.ties))
    else:
        click.echo(f"verified: outputs match {res.reference}" if res.ok else
                   "verification FAILED")
    if not res.ok:
        sys.exit(EXIT_VERIFY_FAILED)


@main.command("inspect")
@click.argument("model", type=click.Path(dir_okay=False))
@shape_option
@bind_option
@target_option
@_guard
def inspect_cmd(model, shapes, binds, target):
    """Show MODEL's operators, shapes, FLOPs, unsupported nodes and memory plan (as planned
    for TARGET)."""
    from . import api

    report = api.inspect(model, shapes=_shapes(shapes), bind=_binds(binds), target=target)
    click.echo(report.text, nl=False)
    if report.unsupported:
        sys.exit(3)


@main.command("bench")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--target", "-t", default="x86-native", show_default=True,
              help="Built-in target name or a YAML file; it must run on this machine.")
@shape_option
@bind_option
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1),
              help="threads of both engines (mlcc's thread pool, onnxruntime's intra-op threads).")
@click.option("--runs", default=None, type=click.IntRange(min=1),
              help="Timed samples per engine, per round with processes (default: as many as "
                   "fit about 10 s in all).")
@click.option("--isolation", default="auto", show_default=True,
              type=click.Choice(["auto", "shared", "processes"]),
              help="shared: both engines in one process, interleaved; processes: each engine "
                   "alone in child processes, alternated; auto: shared on 1 thread, processes "
                   "on more.")
@click.option("--rounds", default=None, type=click.IntRange(min=1),
              help="Rounds of child processes with --isolation processes (default 5).")
@click.option("--output", "-o", "output", default=None, type=click.Path(file_okay=False),
              help="Keep the compiled model in this folder.")
@click.option("--quantize", type=click.Choice(["int8"]), default=None,
              help="Firmware targets (cortex-m*): count the int8 build (needs --calibration).")
@click.option("--calibration", default=None, type=click.Path(),
              help="With --quantize: calibration inputs, as for mlcc compile.")
@click.option("--sizes", default=None,
              help="With a range in --shape: the sizes to time the range build at, comma-"
                   "separated, each one size per dynamic dimension joined by x (32,320,1280; "
                   "1x64,8x640); default: the smallest, the largest and 3 between.")
@click.option("--tune", is_flag=True,
              help="Compile with the convolution kernels chosen by timing (as mlcc compile "
                   "--tune).")
@click.option("--tuning", "tuning_file", default=None, type=click.Path(dir_okay=False),
              help="Compile with the choices of a tuning.json.")
@max_loop_option
@_guard
def bench_cmd(model, target, shapes, binds, threads, runs, isolation, rounds, output, quantize,
              calibration, tune, tuning_file, max_loop_iterations, sizes):
    """Time MODEL compiled by mlcc against onnxruntime: in one process, interleaved, on 1
    thread; each engine in its own processes, alternated, on more (--isolation). On a
    microcontroller target (cortex-m*), count the instructions of one inference in the
    emulator instead, per layer, and report the firmware's RAM and flash."""
    from . import api, tuning

    qcfg = _quant_config(quantize, calibration, CALIBRATORS[0], 99.99, True, None, None)
    if tune and tuning_file:
        raise MlccError("--tune measures the choices, --tuning reads them: give one")
    choices = (tuning.tune(model, target, shapes=_shapes(shapes), bind=_binds(binds)).choices
               if tune else tuning.read_tuning(tuning_file) if tuning_file else None)
    res = api.bench(model, target=target, shapes=_shapes(shapes), threads=threads, runs=runs,
                    output_dir=output, isolation=isolation, rounds=rounds, bind=_binds(binds),
                    quantize=qcfg, conv_choices=choices,
                    max_loop_iterations=api.parse_max_loop_iterations(max_loop_iterations),
                    sizes=_sizes(sizes))
    click.echo(res.report(), nl=False)


@main.command("targets")
@_guard
def targets_cmd():
    """List the built-in targets and whether their compilers and emulators are installed."""
    from . import api

    rows = api.list_targets()
    width = max(len(description) for _, description, _ in rows)
    for name, description, status in rows:
        click.echo(f"{name:14} {description:{width}} {status}")


if __name__ == "__main__":
    main()
