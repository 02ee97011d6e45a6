"""Issue 20's comparison table: mlcc int8 with its default options against onnxruntime's
quantize_static (QDQ, per-channel int8 weights, uint8 activations; the best of its MinMax,
Percentile and Entropy calibrators on the task metric), on the same calibration data, each
model scored on its task metric, and latency on one thread.

    python bench/compare_ort_int8.py                        # every model (long on a loaded machine)
    python bench/compare_ort_int8.py digits_cnn minilm --runs 20
    python bench/compare_ort_int8.py yolov8n --ort-methods '' --quant adaround=auto  # mlcc only

Models, data and metrics (higher is better everywhere):
- digits_cnn: test accuracy (%) on the 450 test images of examples/digits, calibrated on the
  200 calibration images.
- yolov8n: output SQNR (dB) against the float model (onnxruntime) on 4 smooth random images,
  calibrated on 16 others (bench_quant.MODELS).
- ppocr_det: output SQNR (dB) on 2 pages of synthetic text lines (where its probability map has
  signal; bench_quant.text_pages), calibrated on 8 others.
- ppocr_rec: exact match (%) of the CTC-decoded text of 300 rendered lines (eval_ocr_int8, seed
  2; needs Pillow, the bench extra), calibrated on 64 other lines (seed 1).
- minilm: all-MiniLM-L6-v2 at 32 tokens, the cosine of each sentence embedding to the float
  model's on the EVAL sentences below (the table gives the smallest, and the mean), calibrated
  on the CALIBRATION sentences.

onnxruntime's histogram calibrators (Percentile, Entropy) keep every intermediate tensor of
every calibration sample in memory (6.8 GB for 32 PP-OCR rec lines), so they get the first
HIST_SAMPLES of the calibration samples (all of them for digits_cnn and minilm); MinMax gets them
all. Latency: the median of --runs calls of one input, mlcc float, mlcc int8, onnxruntime float
and onnxruntime int8 (its best calibrator) timed in turn (round robin), 1 thread; the machine's
load average is printed with the table. This is not a test: nothing here asserts a number.
Progress goes to stderr, the table to stdout.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))    # fetch_models

import bench_quant as bq  # noqa: E402
import fetch_models as fm  # noqa: E402

ORT_METHODS = ("minmax", "percentile", "entropy")
MINILM_SEQ = 32

CALIBRATION = [
    "A man is playing a guitar on the street corner.",
    "The central bank raised interest rates by a quarter point.",
    "My grandmother bakes the best apple pie in town.",
    "Scientists discovered a new species of frog in the rainforest.",
    "Can you tell me how to get to the train station?",
    "The software update fixed several security vulnerabilities.",
    "Heavy snow closed the mountain pass for three days.",
    "She finished the marathon in under four hours.",
    "The museum opens at nine and closes at five.",
    "Our flight was cancelled because of the storm.",
    "He plays the violin in the city orchestra.",
    "Add salt and pepper to taste, then stir well.",
    "The committee will vote on the proposal next week.",
    "A small boat drifted slowly across the calm lake.",
    "Why does the sky look blue during the day?",
    "The company reported record profits this quarter.",
    "Kids were building sandcastles on the beach.",
    "Please remember to water the plants while I am away.",
    "The doctor recommended more sleep and less coffee.",
    "Electric cars are becoming cheaper every year.",
    "The old castle stands on a hill above the village.",
    "I can't find my keys anywhere!",
    "Volcanic eruptions can change the global climate.",
    "They adopted a puppy from the animal shelter.",
]
EVAL = [
    "A woman is slicing an onion in the kitchen.",
    "Someone is cutting vegetables for dinner.",
    "The stock price rose after strong earnings.",
    "Two dogs are running through a green field.",
    "The new phone has a larger screen and a better camera.",
    "It is raining heavily in the city tonight.",
    "How do I reset my password?",
    "The recipe needs two cups of flour and one egg.",
    "Photosynthesis converts sunlight into chemical energy.",
    "The government announced new tax rules for small businesses.",
    "A child is riding a red bicycle down the hill.",
    "The concert was postponed until next month.",
    "Astronomers observed a distant galaxy with the new telescope.",
    "I would like a cup of tea with milk, please.",
    "The football team won the championship after extra time.",
    "This hotel room is clean but very noisy.",
    "The river flooded several houses near the bridge.",
    "Learning a new language takes patience and practice.",
    "The cat is sleeping on a warm windowsill.",
    "Our meeting has been moved to Thursday afternoon.",
    "The patient was discharged from the hospital yesterday.",
    "Where can I buy tickets for the museum?",
    "Wind turbines generate electricity without burning fuel.",
    "The author signed copies of her latest novel.",
    "A group of tourists took photos of the cathedral.",
    "The printer keeps jamming whenever I print double-sided.",
    "He apologized for arriving late to the interview.",
    "Fresh bread smells wonderful in the morning.",
    "The police closed the road after the accident.",
    "Bees play an important role in pollinating crops.",
    "She solved the puzzle in less than a minute.",
    "The price of oil dropped sharply last week.",
]


@dataclass
class Task:
    model: Path                          # the ONNX model (static input shapes)
    calib: dict[str, np.ndarray]         # input name -> [samples, *input shape]
    evals: list[dict[str, np.ndarray]]   # evaluation inputs
    metric: str                          # the metric's name
    # (float outputs, quantized outputs), each a list over evals of output name -> array,
    # -> (the number, its text)
    score: Callable[[list[dict], list[dict]], tuple[float, str]]
    hist_samples: int | None = None      # calibration samples of ort's histogram calibrators


def sqnr_score(ref: list[dict], got: list[dict]) -> tuple[float, str]:
    db = bq.sqnr([a for r in ref for a in r.values()], [g[k] for g, r in zip(got, ref)
                                                         for k in r])
    return db, f"{db:.1f} dB"


def digits_task(work: Path) -> Task:
    path, shapes, calib, test = bq.digits()
    with np.load(fm.digits_data("test")) as t:
        labels = t["label"]

    def accuracy(ref, got):
        acc = 100 * float(np.mean([np.argmax(next(iter(g.values()))) == y
                                   for g, y in zip(got, labels, strict=True)]))
        return acc, f"{acc:.2f}%"
    return Task(bq.fixed_model(path, shapes, work / "fixed.onnx"), {"input": calib},
                [{"input": x} for x in test], "accuracy", accuracy)


def image_task(name: str, work: Path, hist: int) -> Task:
    path, shapes, calib, test = bq.VARIANT_MODELS[name]()
    (inp,) = shapes
    return Task(bq.fixed_model(path, shapes, work / "fixed.onnx"), {inp: calib},
                [{inp: x} for x in test], "output SQNR", sqnr_score, hist)


def rec_task(work: Path) -> Task:
    import eval_ocr_int8 as ocr
    model = fm.fetch("ppocr_rec")
    chars = ocr.charset(model)
    cx, _ = ocr.render(64, seed=1)
    ex, truth = ocr.render(300, seed=2)

    def exact(ref, got):
        em, chars_acc = ocr.scores([ocr.ctc_greedy(next(iter(g.values())), chars)
                                    for g in got], truth)
        return em, f"{em:.1f}% ({chars_acc:.1f}% chars)"
    return Task(bq.fixed_model(model, {"x": (1, 3, ocr.H, ocr.W)}, work / "fixed.onnx"),
                {"x": cx}, [{"x": x} for x in ex], "exact match", exact, 16)


def minilm_task(work: Path) -> Task:
    tok = fm.minilm_tokenizer()

    def encode(sentences):
        enc = [tok.encode(s, MINILM_SEQ) for s in sentences]
        return [{"input_ids": i, "attention_mask": m} for i, m in enc]

    calib = encode(CALIBRATION)

    def cosine(ref, got):
        cos = []
        for r, g in zip(ref, got, strict=True):
            a = r["sentence_embedding"].ravel().astype(np.float64)
            b = g["sentence_embedding"].ravel().astype(np.float64)
            cos.append(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))
        return min(cos), f"{min(cos):.4f} (mean {np.mean(cos):.4f})"
    return Task(fm.minilm(MINILM_SEQ), {k: np.stack([c[k] for c in calib]) for k in calib[0]},
                encode(EVAL), "embedding cosine, min", cosine)


TASKS = {"digits_cnn": digits_task,
         "yolov8n": lambda work: image_task("yolov8n", work, 8),
         "ppocr_det": lambda work: image_task("ppocr_det_text", work, 4),
         "ppocr_rec": rec_task,
         "minilm": minilm_task}


def compare(name: str, tmp: Path, runs: int, methods: tuple[str, ...],
            op_types: tuple[str, ...] = (), quant: dict | None = None) -> str:
    import mlcc
    from mlcc import api

    say = lambda text: print(f"[{name}] {text}", file=sys.stderr, flush=True)  # noqa: E731
    work = tmp / name
    work.mkdir()
    task = TASKS[name](work)
    np.savez(work / "calib.npz", **task.calib)
    hist = task.hist_samples
    if hist is not None:
        np.savez(work / "calib_hist.npz", **{k: v[:hist] for k, v in task.calib.items()})
    f_sess = bq.session(task.model)
    outs = [o.name for o in f_sess.get_outputs()]

    def run_ort(sess):
        return [dict(zip(outs, sess.run(outs, x))) for x in task.evals]

    def run_mlcc(m):
        return [{k: v for k, v in m.run(x).items() if k in outs} for x in task.evals]

    ref = run_ort(f_sess)
    float_score = "reference" if task.score is sqnr_score else task.score(ref, ref)[1]
    t0 = time.perf_counter()
    res = api.compile(task.model, work / "int8", target="x86-native",
                      quantize=api.QuantizeConfig(work / "calib.npz", progress=say,
                                                  **(quant or {})))
    say(f"mlcc int8 (defaults) compiled in {time.perf_counter() - t0:.0f} s")
    api.compile(task.model, work / "float", target="x86-native")
    mq, mf = mlcc.load(work / "int8"), mlcc.load(work / "float")
    mlcc_score = task.score(ref, run_mlcc(mq))
    say(f"mlcc int8: {mlcc_score[1]}")
    ort_scores: dict[str, tuple[float, str]] = {}
    sessions = {}
    for method in methods:
        calib = work / ("calib_hist.npz" if hist is not None and method != "minmax"
                        else "calib.npz")
        t0 = time.perf_counter()
        try:
            q = bq.ort_int8(task.model, calib, method, work / f"ort_{method}.onnx", op_types)
        except subprocess.CalledProcessError as exc:
            say(f"onnxruntime quantize_static {method} failed ({exc})")
            ort_scores[method] = (-np.inf, "failed (its error is in the log)")
            continue
        sessions[method] = bq.session(q)
        ort_scores[method] = task.score(ref, run_ort(sessions[method]))
        say(f"onnxruntime {method} ({time.perf_counter() - t0:.0f} s): {ort_scores[method][1]}")
    best = max((m for m in ort_scores if m in sessions), key=lambda m: ort_scores[m][0],
               default=None)
    x0 = task.evals[0]
    call_q, _ = mq.prepare(x0)
    call_f, _ = mf.prepare(x0)
    fns = {"mlcc float": call_f, "mlcc int8": call_q,
           "ort float": lambda: f_sess.run(outs, x0)}
    if best is not None:
        fns["ort int8"] = lambda: sessions[best].run(outs, x0)
    lat = bq.medians_ms(fns, runs)
    q = res.manifest["quantization"]
    ort_cell = f"{ort_scores[best][1]} ({best})" if best else "failed"
    others = "; ".join(f"{m} {s[1]}" for m, s in ort_scores.items() if m != best)
    ort_ms = f"{lat['ort int8']:.3g}" if best else ""
    ratio = f"{lat['ort int8'] / lat['mlcc int8']:.2f}" if best else ""
    return (f"| {name} | {task.metric} | {float_score} | **{mlcc_score[1]}** | {ort_cell} | "
            f"{others} | {q['integer_layers']} / {len(q['float_layers'])} | "
            f"{lat['mlcc int8']:.3g} | {lat['mlcc float']:.3g} | "
            f"{lat['mlcc int8'] / lat['mlcc float']:.2f} | {ort_ms} | {lat['ort float']:.3g} | "
            f"{ratio} |")


def number(text: str):
    """A --quant value: a float where it reads as one (time_budget=0.8), else the text."""
    try:
        return float(text)
    except ValueError:
        return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"default: {', '.join(TASKS)}")
    ap.add_argument("--runs", type=int, default=20, help="latency runs per engine")
    ap.add_argument("--ort-methods", default=",".join(ORT_METHODS),
                    help="onnxruntime calibrators to try (the best one is compared)")
    ap.add_argument("--ort-op-types", default="",
                    help="comma-separated operator types onnxruntime quantizes (e.g. MatMul; "
                         "default: every type it can)")
    ap.add_argument("--quant", default="",
                    help="mlcc options other than the defaults, comma-separated QuantizeConfig "
                         "fields: adaround=auto,bias_correction=auto,time_budget=0.8")
    args = ap.parse_args(argv)
    quant = {k: number(v) for k, v in (kv.split("=", 1) for kv in args.quant.split(",") if kv)}
    for name in args.models:
        if name not in TASKS:
            ap.error(f"unknown model {name!r} (known: {', '.join(TASKS)})")
    methods = tuple(m for m in args.ort_methods.split(",") if m)
    for m in methods:
        if m not in ORT_METHODS:
            ap.error(f"unknown onnxruntime calibrator {m!r} (known: {', '.join(ORT_METHODS)})")
    rows = ["| model | metric | float | mlcc int8, defaults | onnxruntime int8, best | "
            "onnxruntime, other calibrators | mlcc integer / float layers | mlcc int8 ms | "
            "mlcc float ms | mlcc int8/float | ort int8 ms | ort float ms | "
            "ort int8 / mlcc int8 |",
            "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="mlcc-compare-ort-") as tmp:
        for name in args.models or list(TASKS):
            rows.append(compare(name, Path(tmp), args.runs, methods,
                                tuple(o for o in args.ort_op_types.split(",") if o), quant))
            print(rows[-1], file=sys.stderr, flush=True)
    print(f"x86-native, 1 thread; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
