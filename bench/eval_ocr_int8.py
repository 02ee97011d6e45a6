"""PP-OCRv4 recognizer, the task metric of issue 5: exact match and character accuracy on text
lines rendered here (the ground truth is the rendered string), float against int8.

    python bench/eval_ocr_int8.py                        # the full table (a few minutes)
    python bench/eval_ocr_int8.py --lines 300 --calib 64 --variants mlcc-minmax,mlcc-percentile

Lines: random strings of letters and digits (4-10 characters) drawn with Pillow in a few
DejaVu fonts (Debian's fonts-dejavu-core) and sizes, lightly blurred, with pixel noise, resized
to height 48 keeping the aspect ratio, padded to width 320 and scaled to [-1, 1] as PaddleOCR
does. Calibration and evaluation lines are rendered from different seeds. Decoding: CTC greedy
over the character list that the model carries in its metadata (`character`), with PaddleOCR's
blank first and space last. Pillow is a bench-only extra (`pip install -e .[bench]`); this
script installs it into the running interpreter's environment when it is missing.

Each variant is compiled for x86-native and run one line at a time; latency is the median of
the int8 and the float program timed alternately in this process (the machine's load is
printed with it). This is not a test: nothing here asserts a number (tests/test_ocr_eval.py
tests the decoding and the preprocessing). Progress goes to stderr, the table to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools"))    # fetch_models

H, W = 48, 320
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONTS = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf",
         "DejaVuSansCondensed.ttf")
ALPHABET = string.ascii_letters + string.digits
PILLOW = "pillow==13.0.0"          # keep equal to pyproject's [bench] extra


# ---------------------------------------------------------------- renderer-free parts (tested)

def charset(model_path: str | Path) -> list[str]:
    """The recognizer's classes: blank, the characters of its `character` metadata, space."""
    import onnx
    m = onnx.load(str(model_path), load_external_data=False)
    meta = {p.key: p.value for p in m.metadata_props}
    if "character" not in meta:
        raise ValueError(f"{model_path}: no 'character' metadata (not a PP-OCR recognizer?)")
    return ["<blank>"] + meta["character"].splitlines() + [" "]


def ctc_ids(probs: np.ndarray, classes: int | None = None) -> list[int]:
    """CTC greedy decoding of one line: [T, C] (or [1, T, C]) scores -> class ids. The best
    class per time step; repeats collapse, then blanks (class 0) drop."""
    p = np.asarray(probs)
    if p.ndim == 3:
        if p.shape[0] != 1:
            raise ValueError(f"one line at a time: got a batch of {p.shape[0]}")
        p = p[0]
    if p.ndim != 2 or (classes is not None and p.shape[1] != classes):
        raise ValueError(f"scores of shape {p.shape} for {classes} classes")
    best = p.argmax(axis=1)
    keep = np.ones(len(best), bool)
    keep[1:] = best[1:] != best[:-1]
    return [int(i) for i in best[keep] if i != 0]


def ctc_greedy(probs: np.ndarray, chars: list[str]) -> str:
    """CTC greedy decoding of one line to text (ctc_ids over the model's characters)."""
    return "".join(chars[i] for i in ctc_ids(probs, len(chars)))


def line_agreement(float_outputs: list[dict], quant_outputs: list[dict]) -> float:
    """An `mlcc compile --metric` for the recognizer: the share (%) of lines whose decoded
    text is the float model's (`--metric bench/eval_ocr_int8.py:line_agreement`)."""
    same = [ctc_ids(next(iter(f.values()))) == ctc_ids(next(iter(q.values())))
            for f, q in zip(float_outputs, quant_outputs, strict=True)]
    return 100.0 * sum(same) / len(same)


TRUTH_ENV = "MLCC_OCR_TRUTH"     # a JSON file: {"model": path, "truth": [line texts]}


def exact_match(float_outputs: list[dict], quant_outputs: list[dict]) -> float:
    """An `mlcc compile --metric` scoring the task itself: exact match (%) of the quantized
    model's lines against their ground truth, read from the JSON file named by
    $MLCC_OCR_TRUTH (the search lines' texts, in order; float_outputs are not needed: mlcc
    scores float against itself for the reference)."""
    spec = json.loads(Path(os.environ[TRUTH_ENV]).read_text())
    chars = charset(spec["model"])
    preds = [ctc_greedy(next(iter(q.values())), chars) for q in quant_outputs]
    return scores(preds, spec["truth"])[0]


def edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def scores(preds: list[str], truth: list[str]) -> tuple[float, float]:
    """(exact match %, character accuracy %): 1 - total edit distance / total characters."""
    exact = sum(p == t for p, t in zip(preds, truth, strict=True))
    dist = sum(edit_distance(p, t) for p, t in zip(preds, truth))
    return 100 * exact / len(truth), 100 * (1 - dist / sum(len(t) for t in truth))


def to_input(gray: np.ndarray) -> np.ndarray:
    """A grey line image (uint8 [h, w]) -> the model's [1, 3, 48, 320] input: resized to height
    48 keeping the aspect ratio (width at most 320), scaled to [-1, 1], zero-padded on the
    right (PaddleOCR's resize_norm_img). Resizing is bilinear (numpy, so that this part has no
    Pillow dependency and is tested)."""
    img = resize_line(gray, W)
    out = np.zeros((1, 3, H, W), np.float32)
    out[0, :, :, :img.shape[1]] = img
    return out


def resize_line(gray: np.ndarray, max_width: int) -> np.ndarray:
    """A grey line image (uint8 [h, w]) resized (bilinear) to height 48 keeping the aspect
    ratio, width at most max_width, scaled to [-1, 1]: [48, width] float32."""
    h, w = gray.shape
    nw = max(1, min(max_width, int(np.ceil(H * w / h))))
    ys = (np.arange(H) + 0.5) * h / H - 0.5
    xs = (np.arange(nw) + 0.5) * w / nw - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, h - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, w - 1)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy = np.clip(ys - y0, 0, 1)[:, None]
    fx = np.clip(xs - x0, 0, 1)[None, :]
    g = gray.astype(np.float32) / 255
    top = g[y0][:, x0] * (1 - fx) + g[y0][:, x1] * fx
    bot = g[y1][:, x0] * (1 - fx) + g[y1][:, x1] * fx
    return ((top * (1 - fy) + bot * fy) * 2 - 1).astype(np.float32)


# ---------------------------------------------------------------- rendering (Pillow)

def ensure_pillow() -> None:
    try:
        import PIL  # noqa: F401
    except ImportError:
        print(f"installing {PILLOW} (the bench extra) into {sys.prefix}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", PILLOW], check=True)


def render(n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """n lines [n, 1, 3, 48, 320] and their strings, deterministic for a seed."""
    ensure_pillow()
    from PIL import Image, ImageDraw, ImageFilter, ImageFont
    fonts = [FONT_DIR / f for f in FONTS if (FONT_DIR / f).exists()]
    if not fonts:
        raise SystemExit(f"no DejaVu fonts in {FONT_DIR}: apt-get install fonts-dejavu-core")
    rng = np.random.default_rng(seed)
    xs, texts = np.empty((n, 1, 3, H, W), np.float32), []
    for i in range(n):
        text = "".join(rng.choice(list(ALPHABET), int(rng.integers(4, 11))))
        font = ImageFont.truetype(str(fonts[int(rng.integers(len(fonts)))]),
                                  int(rng.integers(22, 41)))
        left, top, right, bottom = font.getbbox(text)
        mx, my = int(rng.integers(4, 16)), int(rng.integers(3, 10))
        bg, ink = int(rng.integers(200, 256)), int(rng.integers(0, 70))
        img = Image.new("L", (right - left + 2 * mx, bottom - top + 2 * my), bg)
        ImageDraw.Draw(img).text((mx - left, my - top), text, fill=ink, font=font)
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.0, 1.0))))
        g = np.asarray(img, np.float32) + rng.normal(0, rng.uniform(2, 10), (img.height,
                                                                                img.width))
        xs[i] = to_input(np.clip(g, 0, 255).astype(np.uint8))
        texts.append(text)
    return xs, texts


# ---------------------------------------------------------------- engines

def _ort_session(path):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    o.log_severity_level = 3
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


def read_ort(path, xs, chars) -> list[str]:
    s = _ort_session(path)
    inp, out = s.get_inputs()[0].name, s.get_outputs()[0].name
    return [ctc_greedy(s.run([out], {inp: x})[0], chars) for x in xs]


def read_mlcc(model, xs, chars) -> list[str]:
    (out,) = [t["name"] for t in model.outputs]
    return [ctc_greedy(model.run({"x": x})[out], chars) for x in xs]


def load_avg() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def cpu_seconds() -> float:
    """User and system CPU time of this process and of the children it waited for (the C
    compiler): a compile's cost that a loaded machine does not stretch."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def alternate_ms(fq, ff, runs: int) -> tuple[float, float]:
    """Median ms of fq and ff, timed alternately (a shared machine's load weighs on both)."""
    for f in (fq, ff, fq, ff):
        f()
    tq, tf = [], []
    for _ in range(runs):
        for f, t in ((fq, tq), (ff, tf)):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(tq)), 1e3 * float(np.median(tf))


# the last: the setting that meets issue 5's goal (docs/quantization.md, "PP-OCR rec on
# rendered text lines")
VARIANTS = ("ort-float", "mlcc-float", "ort-minmax", "ort-percentile", "mlcc-minmax",
            "mlcc-percentile", "mlcc-entropy", "mlcc-auto",
            "mlcc-percentile+keep=p2o.Conv.2[4-9]|p2o.Conv.3[0-2]")


def parse_variant(v: str) -> tuple[str, str, tuple[str, ...], dict[str, str]]:
    """`mlcc-CAL[:PCT][+keep=P1|P2][+maxdrop=D][+minsqnr=DB][+metric=lines|exact][+ada=M]
    [+bc=M]` -> (engine, calibrator, --keep-float patterns, the other options: maxdrop,
    minsqnr, metric, ada (--adaround M), bc (--bias-correction M))."""
    head, *opts = v.split("+")
    engine, _, cal = head.partition("-")
    options = dict(o.partition("=")[::2] for o in opts)
    bad = set(options) - {"keep", "maxdrop", "minsqnr", "metric", "ada", "bc"}
    if bad or options.get("metric", "lines") not in ("lines", "exact"):
        raise SystemExit(f"variant {v!r}: unknown option(s) {sorted(bad) or options['metric']}")
    keep = options.pop("keep", "")
    return engine, cal, tuple(k for k in keep.split("|") if k), options


def main(argv=None) -> int:
    import bench_quant as bq
    import fetch_models as fm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300, help="evaluation lines")
    ap.add_argument("--calib", type=int, default=64, help="calibration lines")
    ap.add_argument("--ort-percentile-calib", type=int, default=32,
                    help="calibration lines for onnxruntime's Percentile calibrator, which "
                         "holds every intermediate tensor in memory (6.8 GB for 32 lines)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated: " + ", ".join(VARIANTS) + "; an mlcc variant may "
                         "be percentile:P (e.g. mlcc-percentile:99.999) and add +keep=P1|P2 "
                         "(--keep-float patterns, e.g. op:Conv|p2o.MatMul.*)")
    ap.add_argument("--seed", type=int, default=2,
                    help="seed of the evaluation lines (the calibration lines use 1)")
    ap.add_argument("--runs", type=int, default=30, help="latency runs")
    ap.add_argument("--search-lines", type=int, default=64,
                    help="held-out lines (seed 5) on which +maxdrop / +minsqnr variants "
                         "search (mlcc compile --eval-data)")
    ap.add_argument("--save-samples", type=Path, default=None,
                    help="write the first 8 evaluation lines as PNG files here")
    ap.add_argument("--keep", type=Path, default=None,
                    help="build in this folder and keep the builds (e.g. for "
                         "bench/profile_layers.py FLOAT_DIR INT8_DIR --cpu)")
    args = ap.parse_args(argv)

    import mlcc
    from mlcc import api

    model = fm.fetch("ppocr_rec")
    chars = charset(model)
    say = lambda text: print(text, file=sys.stderr, flush=True)   # noqa: E731
    cx, _ = render(args.calib, seed=1)
    if args.seed == 1:
        raise SystemExit("--seed 1 renders the calibration lines: choose another")
    ex, truth = render(args.lines, seed=args.seed)
    if args.save_samples:
        from PIL import Image
        args.save_samples.mkdir(parents=True, exist_ok=True)
        for i in range(min(8, len(ex))):
            a = ((ex[i, 0, 0] + 1) * 127.5).clip(0, 255).astype(np.uint8)
            Image.fromarray(a).save(args.save_samples / f"{i}_{truth[i]}.png")
    rows = ["| variant | calibration lines | exact match % | char accuracy % | "
            "mlcc integer / float layers | int8 ms | mlcc float ms | int8/float | load |",
            "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory(prefix="mlcc-ocr-") as tmp:
        tmp = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = args.keep
        fixed = bq.fixed_model(model, {"x": (1, 3, H, W)}, tmp / "fixed.onnx")
        np.savez(tmp / "calib.npz", x=cx)
        np.savez(tmp / "calib_small.npz", x=cx[:args.ort_percentile_calib])
        if any("+maxdrop=" in v or "+minsqnr=" in v for v in args.variants.split(",")):
            sx, struth = render(args.search_lines, seed=5)
            np.savez(tmp / "search.npz", x=sx)
            (tmp / "search_truth.json").write_text(json.dumps({"model": str(model),
                                                               "truth": struth}))
            os.environ[TRUTH_ENV] = str(tmp / "search_truth.json")
        mf = None
        for i, v in enumerate(args.variants.split(",")):
            engine, cal, keep, search = parse_variant(v)
            t0 = time.perf_counter()
            lat, counts = " | | | ", ""
            ncal = "" if cal == "float" else len(cx)
            if v == "ort-float":
                preds = read_ort(fixed, ex, chars)
            elif engine == "ort":
                calib = tmp / ("calib_small.npz" if cal == "percentile" else "calib.npz")
                ncal = args.ort_percentile_calib if cal == "percentile" else len(cx)
                q = bq.ort_int8(fixed, calib, cal, tmp / f"ort_{cal}.onnx")
                preds = read_ort(q, ex, chars)
            elif engine == "mlcc":
                if mf is None:
                    api.compile(fixed, tmp / "float", target="x86-native")
                    mf = mlcc.load(tmp / "float")
                if cal == "float":
                    preds = read_mlcc(mf, ex, chars)
                else:
                    out = tmp / f"variant{i}"
                    cal, _, pct = cal.partition(":")
                    qc = api.QuantizeConfig(tmp / "calib.npz", calibrator=cal,
                                            percentile=float(pct or 99.99), keep_float=keep,
                                            progress=say)
                    qc.adaround = search.get("ada", qc.adaround)
                    qc.bias_correction = search.get("bc", qc.bias_correction)
                    if "maxdrop" in search or "minsqnr" in search:
                        qc.eval_data = tmp / "search.npz"
                        qc.max_drop = float(search["maxdrop"]) if "maxdrop" in search else None
                        qc.min_sqnr = float(search["minsqnr"]) if "minsqnr" in search else None
                        if "metric" in search:
                            fn = {"lines": "line_agreement", "exact": "exact_match"}
                            qc.metric = f"{Path(__file__).resolve()}:{fn[search['metric']]}"
                    t1, c1 = time.perf_counter(), cpu_seconds()
                    res = api.compile(fixed, out, target="x86-native", quantize=qc)
                    say(f"{v}: compiled in {time.perf_counter() - t1:.0f} s, "
                        f"{cpu_seconds() - c1:.0f} CPU-seconds (load {load_avg()})")
                    mq = mlcc.load(out)
                    preds = read_mlcc(mq, ex, chars)
                    qi = res.manifest["quantization"]
                    counts = f"{qi['integer_layers']} / {len(qi['float_layers'])}"
                    cq, _ = mq.prepare({"x": ex[0]})
                    cf, _ = mf.prepare({"x": ex[0]})
                    tq, tf = alternate_ms(cq, cf, args.runs)
                    lat = f"{tq:.2f} | {tf:.2f} | {tq / tf:.2f} | {load_avg()}"
            else:
                raise SystemExit(f"unknown variant {v!r}")
            em, ca = scores(preds, truth)
            wrong = [(p, t) for p, t in zip(preds, truth) if p != t][:4]
            say(f"{v}: exact {em:.1f}% chars {ca:.1f}% ({time.perf_counter() - t0:.0f} s); "
                f"e.g. {wrong}")
            rows.append(f"| {v} | {ncal} | {em:.1f} | {ca:.1f} | {counts} | {lat} |")
            print(rows[-1], file=sys.stderr)
    print(f"{len(ex)} evaluation lines (seed {args.seed}), PP-OCRv4 rec, x86-native, 1 thread")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
