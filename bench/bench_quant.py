"""INT8 quantization benchmark: mlcc int8 against onnxruntime's quantize_static (QDQ,
per-channel int8 weights, uint8 activations, the same calibrator and the same calibration
inputs), output SQNR against the float model and latency on one thread (or N: --threads).

    python bench/bench_quant.py                       # every model
    python bench/bench_quant.py yolov8n ppocr_det --threads 2
    python bench/bench_quant.py digits_cnn ppocr_rec --calibrator entropy
    python bench/bench_quant.py mobilenetv2 --variants pt,pt+eq,pt+bc,pt+eq+bc,pc,pc+eq

Calibration and evaluation inputs are generated here (no downloads): the digits splits of
examples/digits (fetch_models.digits_data), smooth random images
for YOLOv8n and PP-OCR det, and synthetic text lines (dark strokes on a light background,
[-1, 1]) for PP-OCR rec. onnxruntime's calibration runs with MinMax unless told otherwise: its
Percentile calibrator keeps every intermediate tensor in memory (6.8 GB for 32 PP-OCR rec
images), and its Entropy method equals MinMax through quantize_static. This is not a test:
nothing here asserts a number. Progress goes to stderr, the table to stdout.

On one thread the four builds (mlcc and onnxruntime, float and int8) are timed round robin in
this process. With --threads N (N > 1) each engine is timed alone in its own processes, as
`bench_models.py --threads N` does (mlcc.benchmark.measure_in_processes: mlcc's float build
against onnxruntime's float model, then mlcc's int8 build against onnxruntime's QDQ model,
--rounds rounds of one process per engine); a latency is then the median over the rounds of
each round's median (summarize_rounds).

--variants compares mlcc's own options instead (no latencies): each variant is a `+`-joined
set of pt (--per-tensor weights) or pc (per channel, the default), eq (--equalize), eq6
(--equalize-relu6), bc (--bias-correction); the table gives each one's output SQNR against
float (and, for digits_cnn, the test accuracy), next to onnxruntime's quantize_static
(per-channel) on the same inputs. mobilenetv2 (built by tools/fetch_models.py: random weights
with BatchNorm statistics, smooth random images), mobilenetv2_relu (the same with Relu for
Relu6, so that CLE applies exactly) and ppocr_det_text (PP-OCR det on pages of the synthetic
text lines, where its output has signal) are only in this mode's default set.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools"))    # fetch_models

import fetch_models as fm  # noqa: E402


def text_lines(n: int, seed: int, h: int = 48, w: int = 320) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, 1, 3, h, w), np.float32)
    for i in range(n):
        img = np.full((h, w), 0.9) + rng.normal(0, 0.03, (h, w))
        x = int(rng.integers(2, 20))
        end = int(rng.integers(w // 3, w - 10))
        while x < end:
            cw = int(rng.integers(3, 14))
            y0, y1 = int(rng.integers(h // 5, h // 3)), int(rng.integers(2 * h // 3, h - h // 6))
            img[y0:y1, x:x + cw] -= rng.uniform(0.5, 0.9) * (rng.random((y1 - y0, cw)) > 0.4)
            x += cw + int(rng.integers(1, 8))
        out[i, 0] = np.clip(img, 0, 1)[None] * 2 - 1
    return out


def images(n: int, shape, seed: int, lo: float, hi: float) -> np.ndarray:
    x = np.stack([fm.smooth_image(shape, seed + i) for i in range(n)])
    return np.clip((lo + hi) / 2 + (hi - lo) / 4 * x, lo, hi).astype(np.float32)


def digits():
    with np.load(fm.digits_data("calib")) as c, np.load(fm.digits_data("test")) as t:
        return (fm.project_model("digits_cnn"), {"input": (1, 1, 8, 8)}, c["input"][:, None],
                t["input"][:, None])


def mobilenetv2():
    shape = (1, 3, 224, 224)
    return (fm.mobilenetv2(), {"input": shape}, images(16, shape, 0, -2.0, 2.0),
            images(4, shape, 100, -2.0, 2.0))


def text_pages(n: int, seed: int) -> np.ndarray:
    """[n, 1, 3, 640, 640] pages of the synthetic text lines (13 rows of 2 lines each, a
    light background, [-1, 1]): inputs on which PP-OCR det's probability map has signal."""
    lines = text_lines(n * 26, seed)
    out = np.full((n, 1, 3, 640, 640), lines.max(), np.float32)
    for i in range(n):
        for k in range(26):
            r, c = divmod(k, 2)
            out[i, 0, :, r * 48:(r + 1) * 48, c * 320:(c + 1) * 320] = lines[i * 26 + k, 0]
    return out


def mobilenetv2_relu():
    """MobileNetV2 with every Relu6 but the last replaced by Relu (what the CLE paper did):
    a depthwise network CLE can equalize exactly (a ModelProto: fixed_model saves it)."""
    import onnx
    path, shapes, calib, test = mobilenetv2()
    m = onnx.load(str(path))
    clips = [n for n in m.graph.node if n.op_type == "Clip"]
    for n in clips[:-1]:
        n.op_type = "Relu"
        del n.input[1:]
    return m, shapes, calib, test


MODELS = {
    "digits_cnn": digits,
    "yolov8n": lambda: (fm.fetch("yolov8n"), {"images": (1, 3, 320, 320)},
                        images(16, (1, 3, 320, 320), 0, 0.0, 1.0),
                        images(4, (1, 3, 320, 320), 100, 0.0, 1.0)),
    # text pages: on random images the probability map has no signal, and its SQNR (and the
    # default mix, which aims at one) says nothing (-4.6 dB for mlcc, -0.5 for onnxruntime)
    "ppocr_det": lambda: (fm.fetch("ppocr_det"), {"x": (1, 3, 640, 640)},
                          text_pages(8, 0), text_pages(2, 100)),
    "ppocr_rec": lambda: (fm.fetch("ppocr_rec"), {"x": (1, 3, 48, 320)},
                          text_lines(64, 0), text_lines(16, 100)),
}
def cls_lines(n: int, seed: int) -> np.ndarray:
    """[n, 1, 3, 48, 192] text lines for PP-OCR cls (the text-direction classifier): words
    rendered with TrueType fonts (eval_ocr_int8.render, which needs Pillow: the bench extra),
    squeezed from 320 to 192 columns, every other one turned by 180 degrees. (On the blotches
    of text_lines() the float model itself hesitates, and int8 agreed with it on 92.8%.)"""
    import eval_ocr_int8
    x, _ = eval_ocr_int8.render(n, seed=seed)
    cols = np.round(np.linspace(0, x.shape[-1] - 1, 192)).astype(int)
    x = x[..., cols].astype(np.float32)
    x[1::2] = x[1::2, :, :, ::-1, ::-1]
    return np.ascontiguousarray(x)


VARIANT_MODELS = {**MODELS, "mobilenetv2": mobilenetv2, "mobilenetv2_relu": mobilenetv2_relu,
                  # scored by the share of lines whose class (0 or 180 degrees) is float's
                  "ppocr_cls": lambda: (fm.fetch("ppocr_cls"), {"x": (1, 3, 48, 192)},
                                        cls_lines(64, 1), cls_lines(400, 2)),
                  "ppocr_det_text": lambda: (fm.fetch("ppocr_det"), {"x": (1, 3, 640, 640)},
                                             text_pages(8, 0), text_pages(2, 100))}


def sqnr(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    r = np.concatenate([a.ravel() for a in ref]).astype(np.float64)
    g = np.concatenate([a.ravel() for a in got]).astype(np.float64)
    noise = float(np.sum((r - g) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(r * r)) / noise)


def medians_ms(fns: dict, runs: int) -> dict:
    """Median latency of each function, the functions timed in turn (round robin) so that
    the load of a shared machine weighs on all of them alike and their ratios hold."""
    for fn in fns.values():
        fn()
        fn()
    times: dict = {k: [] for k in fns}
    for _ in range(runs):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def medians_in_processes(pairs: dict, feeds: dict, threads: int, rounds: int | None) -> dict:
    """{kind: (ONNX model, mlcc folder)} -> {"mlcc KIND": ms, "ort KIND": ms}: each engine
    alone in its own processes on `threads` threads (measure_in_processes), a pair at a time."""
    from mlcc.benchmark import ROUNDS, measure_in_processes, summarize_rounds
    out = {}
    for kind, (model, folder) in pairs.items():
        m = measure_in_processes(model, folder, feeds, threads, rounds=rounds or ROUNDS)
        for engine, short in (("mlcc", "mlcc"), ("onnxruntime", "ort")):
            t = summarize_rounds(engine, m.latencies[engine], m.calls[engine], 0, 0.0)
            out[f"{short} {kind}"] = 1e3 * t.median_s
    return out


def fixed_model(path: Path, shapes: dict, out: Path) -> Path:
    """The model with static input shapes (quantize_static calibrates with them)."""
    import onnx
    m = path if isinstance(path, onnx.ModelProto) else onnx.load(str(path))
    for vi in m.graph.input:
        if vi.name in shapes:
            for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name]):
                d.Clear()
                d.dim_value = v
    onnx.save(m, str(out))
    return out


def ort_int8(model: Path, calib: Path, method: str, out: Path,
             op_types: tuple[str, ...] = ()) -> Path:
    """onnxruntime's quantize_static, in a child process (it loads and runs models of its own;
    this keeps its memory out of the measurements). calib: an .npz with one array per model
    input, first axis = samples; op_types: the operator types it quantizes (default: all it
    can)."""
    import subprocess
    subprocess.run([sys.executable, __file__, "--ort-quantize", str(model), str(calib),
                    method, str(out), ",".join(op_types)], check=True, stdout=sys.stderr)
    return out


def _ort_int8(model: Path, calib_path: Path, method: str, out: Path,
              op_types: tuple[str, ...] = ()) -> Path:
    with np.load(calib_path) as z:
        calib = {k: z[k] for k in z.files}
    count = len(next(iter(calib.values())))
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(range(count))

        def get_next(self):
            i = next(self.it, None)
            return None if i is None else {k: v[i] for k, v in calib.items()}

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    quantize_static(str(model), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, calibrate_method=methods[method],
                    op_types_to_quantize=list(op_types) or None)
    return out


def session(path: Path):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    o.log_severity_level = 3
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


def bench(name: str, calibrator: str, ort_calibrator: str, runs: int, tmp: Path,
          smooth: float | str | None = "auto", min_sqnr: float | None = None,
          threads: int = 1, rounds: int | None = None) -> str:
    import mlcc
    from mlcc import api

    path, shapes, calib, test = MODELS[name]()
    (inp,) = shapes
    work = tmp / name
    work.mkdir()
    fixed = fixed_model(path, shapes, work / "fixed.onnx")
    np.savez(work / "calib.npz", **{inp: calib})
    say = lambda text: print(f"[{name}] {text}", file=sys.stderr)   # noqa: E731
    t0 = time.perf_counter()
    res = api.compile(fixed, work / "int8", target="x86-native", quantize=api.QuantizeConfig(
        work / "calib.npz", calibrator=calibrator, smooth=smooth, min_sqnr=min_sqnr,
        progress=say))
    t_compile = time.perf_counter() - t0
    api.compile(fixed, work / "float", target="x86-native")
    say(f"mlcc int8 compiled in {t_compile:.1f} s")
    t0 = time.perf_counter()
    ort_q = ort_int8(fixed, work / "calib.npz", ort_calibrator, work / "ort_int8.onnx")
    say(f"onnxruntime quantize_static in {time.perf_counter() - t0:.1f} s")
    f_sess, q_sess = session(fixed), session(ort_q)
    mq, mf = mlcc.load(work / "int8"), mlcc.load(work / "float")
    outs = [o.name for o in f_sess.get_outputs()]
    ref, got_mlcc, got_ort = [], [], []
    for x in test:
        ref += f_sess.run(outs, {inp: x})
        got_ort += q_sess.run(outs, {inp: x})
        r = mq.run({inp: x})
        got_mlcc += [r[o] for o in outs]
    x0 = test[0]
    if threads > 1:
        del mq, mf, f_sess, q_sess        # no thread pools of this process during the timing
        say(f"timing on {threads} threads, each engine in its own processes")
        lat = medians_in_processes({"float": (fixed, work / "float"),
                                    "int8": (ort_q, work / "int8")}, {inp: x0}, threads, rounds)
    else:
        call_q, _ = mq.prepare({inp: x0})
        call_f, _ = mf.prepare({inp: x0})
        lat = medians_ms({"mlcc float": call_f, "mlcc int8": call_q,
                          "ort float": lambda: f_sess.run(outs, {inp: x0}),
                          "ort int8": lambda: q_sess.run(outs, {inp: x0})}, runs)
    q = res.manifest["quantization"]
    fsize = (work / "float" / "weights.bin").stat().st_size
    qsize = (work / "int8" / "weights.bin").stat().st_size
    mode = calibrator + (f" smooth {smooth}" if smooth != "auto" else "") + \
        (f" min-sqnr {min_sqnr:g}" if min_sqnr is not None else "")
    return (f"| {name} | {mode} / {ort_calibrator} | {len(calib)} | {len(test)} | "
            f"{sqnr(ref, got_mlcc):.1f} | {sqnr(ref, got_ort):.1f} | "
            f"{q['integer_layers']} / {len(q['float_layers'])} | "
            + " | ".join(f"{lat[k]:.3g}" for k in ("mlcc float", "mlcc int8", "ort float",
                                                     "ort int8"))
            + f" | {lat['mlcc int8'] / lat['mlcc float']:.2f} | {qsize / fsize:.2f} |")


VARIANT_TOKENS = {"pt": {"per_channel": False}, "pc": {"per_channel": True},
                  "eq": {"equalize": True}, "eq6": {"equalize": "relu6"},
                  "bc": {"bias_correction": True}}


def variant_config(spec: str) -> dict:
    cfg: dict = {}
    for token in spec.split("+"):
        if token not in VARIANT_TOKENS:
            raise SystemExit(f"unknown variant token {token!r} in {spec!r} (known: "
                             f"{', '.join(VARIANT_TOKENS)})")
        cfg.update(VARIANT_TOKENS[token])
    return cfg


def bench_variants(name: str, calibrator: str, ort_calibrator: str, variants: list[str],
                   tmp: Path) -> list[str]:
    """One row per variant: output SQNR against float (and digits accuracy)."""
    import mlcc
    from mlcc import api

    path, shapes, calib, test = VARIANT_MODELS[name]()
    (inp,) = shapes
    work = tmp / name
    work.mkdir()
    fixed = fixed_model(path, shapes, work / "fixed.onnx")
    np.savez(work / "calib.npz", **{inp: calib})
    labels = None
    if name == "digits_cnn":
        with np.load(fm.digits_data("test")) as t:
            labels = t["label"]
    say = lambda text: print(f"[{name}] {text}", file=sys.stderr)   # noqa: E731
    f_sess = session(fixed)
    outs = [o.name for o in f_sess.get_outputs()]
    ref = [f_sess.run(outs, {inp: x}) for x in test]
    if name == "ppocr_cls":       # the goal: the same class as float on >= 99% of inputs
        labels = [int(np.argmax(r[0])) for r in ref]

    def score(got: list[list[np.ndarray]]) -> str:
        db = sqnr([a for r in ref for a in r], [a for r in got for a in r])
        if labels is None:
            return f"{db:.1f} | "
        acc = np.mean([np.argmax(g[0]) == y for g, y in zip(got, labels)])
        return f"{db:.1f} | {100 * acc:.2f}%"
    ort_q = session(ort_int8(fixed, work / "calib.npz", ort_calibrator, work / "ort_int8.onnx"))
    ort_score = score([ort_q.run(outs, {inp: x}) for x in test])
    rows = []
    for k, spec in enumerate(variants):
        t0 = time.perf_counter()
        res = api.compile(fixed, work / f"int8_{k}", target="x86-native",
                          quantize=api.QuantizeConfig(work / "calib.npz", calibrator=calibrator,
                                                      progress=say, **variant_config(spec)))
        m = mlcc.load(work / f"int8_{k}")
        got = [[m.run({inp: x})[o] for o in outs] for x in test]
        q = res.manifest["quantization"]
        note = []
        if "equalize" in q:
            note.append(f"{len(q['equalize']['pairs'])} pairs equalized")
            if q["equalize"]["relu6_replaced"]:
                note.append(f"{len(q['equalize']['relu6_replaced'])} Relu6 -> Relu")
        if "bias_correction" in q:
            note.append(f"{q['bias_correction']['layers']} biases corrected")
        rows.append(f"| {name} | {spec} | {calibrator} | {len(calib)} | {len(test)} | "
                    f"{score(got)} | {ort_score} | {'; '.join(note)} |")
        say(f"{spec}: {rows[-1]} ({time.perf_counter() - t0:.1f} s)")
    return rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--ort-quantize"]:
        _ort_int8(Path(argv[1]), Path(argv[2]), argv[3], Path(argv[4]),
                  tuple(o for o in (argv[5] if len(argv) > 5 else "").split(",") if o))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"default: {', '.join(MODELS)} (with "
                    f"--variants also mobilenetv2)")
    ap.add_argument("--calibrator", default="auto",
                    choices=["auto", "minmax", "percentile", "entropy"])
    ap.add_argument("--ort-calibrator", default="minmax",
                    choices=["minmax", "percentile", "entropy"])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of each engine; above 1, each engine timed alone in its own "
                         "processes (as bench_models.py --threads)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="with --threads N > 1: rounds of one process per engine (default 5)")
    ap.add_argument("--smooth", default="auto", help="mlcc --smooth auto|off|ALPHA")
    ap.add_argument("--min-sqnr", type=float, default=None, help="mlcc --min-sqnr DB")
    ap.add_argument("--variants", default=None,
                    help="compare mlcc options instead: comma-separated variants such as "
                         "pt,pt+eq,pt+bc,pc,pc+eq+bc (see the module docstring)")
    args = ap.parse_args(argv)
    if args.variants:
        variants = args.variants.split(",")
        for v in variants:
            variant_config(v)
        models = args.models or list(VARIANT_MODELS)
        for name in models:
            if name not in VARIANT_MODELS:
                ap.error(f"unknown model {name!r} (known: {', '.join(VARIANT_MODELS)})")
        rows = ["| model | variant | calibrator | calib samples | eval samples | mlcc int8 "
                "SQNR (dB) | accuracy | ort int8 per-channel SQNR (dB) | ort accuracy | "
                "options did |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
        with tempfile.TemporaryDirectory(prefix="mlcc-bench-quant-") as tmp:
            for name in models:
                rows += bench_variants(name, args.calibrator, args.ort_calibrator, variants,
                                       Path(tmp))
        print("\n".join(rows))
        return 0
    for name in args.models:
        if name not in MODELS:
            ap.error(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    if args.threads < 1 or (args.rounds is not None and args.rounds < 1):
        ap.error("--threads and --rounds take a positive number")
    rows = [f"Latencies on {args.threads} thread{'s' if args.threads > 1 else ''}: "
            + ("each engine alone in its own processes, alternated." if args.threads > 1 else
               "the four builds timed round robin in one process."), "",
            "| model | calibrator mlcc / ort | calib samples | eval samples | mlcc int8 SQNR "
            "(dB) | ort int8 SQNR (dB) | mlcc integer / float layers | mlcc float ms | "
            "mlcc int8 ms | ort float ms | ort int8 ms | mlcc int8/float | weights int8/float |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="mlcc-bench-quant-") as tmp:
        for name in args.models or list(MODELS):
            smooth = args.smooth if args.smooth == "auto" else (
                None if args.smooth == "off" else float(args.smooth))
            rows.append(bench(name, args.calibrator, args.ort_calibrator, args.runs, Path(tmp),
                              smooth, args.min_sqnr, args.threads, args.rounds))
            print(rows[-1], file=sys.stderr)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
