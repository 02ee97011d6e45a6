"""Reads the text lines of a page with two compiled models: PP-OCRv4's detector (DBNet) at the
page's size finds the lines, and its recognizer, compiled once for line widths 32..1280
(`--shape x=1,3,48,32..1280`), reads each line at its own width. Every step runs in onnxruntime
too, and the two are compared line by line: the boxes found, the text read, the largest
difference of the recognizer's scores.

    python examples/ocr/ocr.py                          # a rendered page of 8 lines
    python examples/ocr/ocr.py --page scan.png          # your own page (a grey image)
    make ocr-example

The page is rendered here with Pillow (the `bench` extra; its built-in TrueType font, so it
runs anywhere) from a fixed seed, so its ground truth is known and printed beside both
readings. Boxes: DBNet's post-processing (probability > 0.3, connected components whose mean
probability is > 0.6, each rectangle grown by area x 1.5 / perimeter), axis-aligned: a
rendered page is not rotated. Exit status 0 when mlcc and onnxruntime find the same boxes and
read the same text on every line.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "bench"))    # eval_ocr_int8: characters, CTC, line resize
sys.path.insert(0, str(ROOT / "tools"))    # fetch_models

import mlcc  # noqa: E402
from eval_ocr_int8 import charset, ctc_greedy, ensure_pillow, resize_line  # noqa: E402

REC_WIDTHS = (32, 1280)          # the recognizer's range of line widths
DET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)    # PaddleOCR's det normalization
DET_STD = np.array([0.229, 0.224, 0.225], np.float32)
THRESH, BOX_THRESH, UNCLIP, MIN_SIZE = 0.3, 0.6, 1.5, 3
WORDS = ("compile", "model", "kernel", "arena", "tensor", "width", "range", "layer", "static",
         "portable", "runtime", "graph", "weights", "vector", "batch", "line", "page", "text",
         "onnx", "fast", "small", "memory", "shape", "size")


# ----------------------------------------------------------------------------- the page

def render_page(lines: int, seed: int, width: int, height: int) -> tuple[np.ndarray, list[str]]:
    """A white page (grey uint8 [height, width]) with `lines` lines of words and numbers at
    random sizes and indents, and their texts (fewer when the page is full)."""
    ensure_pillow()
    from PIL import Image, ImageDraw, ImageFont
    rng = np.random.default_rng(seed)
    img = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(img)
    texts, y = [], 12
    for _ in range(lines):
        font = ImageFont.load_default(size=int(rng.integers(20, 33)))
        x = int(rng.integers(12, 48))
        words = [str(w) for w in rng.choice(WORDS, int(rng.integers(1, 6)))]
        words.insert(int(rng.integers(0, len(words) + 1)), str(int(rng.integers(1, 10000))))
        while len(words) > 1 and draw.textbbox((x, y), " ".join(words), font=font)[2] > width - 12:
            words.pop()
        text = " ".join(words)
        box = draw.textbbox((x, y), text, font=font)
        if box[3] > height - 12 or box[2] > width - 12:
            break
        draw.text((x, y), text, fill=int(rng.integers(0, 60)), font=font)
        texts.append(text)
        y = box[3] + int(rng.integers(14, 28))
    return np.asarray(img), texts


def load_page(path: str | Path, width: int, height: int) -> np.ndarray:
    """An image file as a grey page of width x height (resized, as the detector is compiled
    for one page size)."""
    ensure_pillow()
    from PIL import Image, UnidentifiedImageError
    try:
        img = Image.open(path)
    except UnidentifiedImageError:
        raise SystemExit(f"{path}: not an image Pillow can read") from None
    return np.asarray(img.convert("L").resize((width, height), Image.BILINEAR))


# ----------------------------------------------------------------------------- detection

def det_input(gray: np.ndarray) -> np.ndarray:
    """A grey page -> the detector's [1, 3, H, W] input (RGB / 255, ImageNet mean and std)."""
    rgb = np.repeat(gray[:, :, None].astype(np.float32) / 255, 3, axis=2)
    return ((rgb - DET_MEAN) / DET_STD).transpose(2, 0, 1)[None].astype(np.float32)


def components(mask: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The 4-connected components of a boolean map, each as (rows, columns) of its pixels:
    runs of each row, joined (union-find) with the overlapping runs of the row above."""
    runs, parent = [], []          # runs: (row, start, end)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    above: list[int] = []
    for r in range(mask.shape[0]):
        row = np.concatenate(([0], mask[r].astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(row))
        here = []
        for s, e in zip(edges[::2], edges[1::2]):
            i = len(runs)
            runs.append((r, int(s), int(e)))
            parent.append(i)
            for j in above:
                if runs[j][1] < e and s < runs[j][2]:
                    a, b = find(i), find(j)
                    parent[max(a, b)] = min(a, b)
            here.append(i)
        above = here
    groups: dict[int, list[int]] = {}
    for i in range(len(runs)):
        groups.setdefault(find(i), []).append(i)
    out = []
    for members in groups.values():
        rows = np.concatenate([np.full(runs[i][2] - runs[i][1], runs[i][0]) for i in members])
        cols = np.concatenate([np.arange(runs[i][1], runs[i][2]) for i in members])
        out.append((rows, cols))
    return out


def text_boxes(prob: np.ndarray) -> list[tuple[int, int, int, int]]:
    """DBNet's probability map [H, W] -> line boxes (x0, y0, x1, y1), top to bottom: the
    components of prob > THRESH whose mean probability is over BOX_THRESH, each rectangle grown
    by UNCLIP x area / perimeter on every side (the shrunk text kernel back to the line)."""
    boxes = []
    h, w = prob.shape
    for rows, cols in components(prob > THRESH):
        y0, y1, x0, x1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
        if min(y1 - y0, x1 - x0) < MIN_SIZE or prob[rows, cols].mean() < BOX_THRESH:
            continue
        d = (y1 - y0) * (x1 - x0) * UNCLIP / (2 * ((y1 - y0) + (x1 - x0)))
        boxes.append((max(0, int(x0 - d)), max(0, int(y0 - d)), min(w, int(np.ceil(x1 + d))),
                      min(h, int(np.ceil(y1 + d)))))
    return sorted(boxes, key=lambda b: (b[1], b[0]))


# ----------------------------------------------------------------------------- recognition

def rec_input(crop: np.ndarray) -> np.ndarray:
    """A grey line crop -> the recognizer's [1, 3, 48, width] input at the line's own width
    (height 48, aspect kept, within REC_WIDTHS; a line narrower than the smallest width is
    zero-padded on the right, as PaddleOCR pads)."""
    img = resize_line(crop, REC_WIDTHS[1])
    width = max(REC_WIDTHS[0], img.shape[1])
    out = np.zeros((1, 3, img.shape[0], width), np.float32)
    out[0, :, :, :img.shape[1]] = img
    return out


def _session(path: Path):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/ocr", help="folder of the two compiled models")
    ap.add_argument("--lines", type=int, default=8, help="lines of the rendered page")
    ap.add_argument("--seed", type=int, default=0, help="of the rendered page")
    ap.add_argument("--size", default="640x480",
                    help="page width x height (multiples of 32): the detector's input")
    ap.add_argument("--page", default=None, help="read this image instead of rendering one")
    ap.add_argument("--target", default="x86", help="a target that runs on this machine")
    args = ap.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.split("x"))
    except ValueError:
        ap.error(f"--size {args.size!r}: expected WIDTHxHEIGHT, e.g. 640x480")
    if width % 32 or height % 32 or width < 64 or height < 64:
        ap.error("--size: width and height must be multiples of 32, at least 64")
    if args.page and not Path(args.page).is_file():
        ap.error(f"--page {args.page}: no such file")
    import fetch_models
    det_path, rec_path = fetch_models.fetch("ppocr_det"), fetch_models.fetch("ppocr_rec")
    chars = charset(rec_path)
    if args.page:
        page, truth = load_page(args.page, width, height), []
    else:
        page, truth = render_page(args.lines, args.seed, width, height)
    out = Path(args.out)

    t0 = time.perf_counter()
    mlcc.compile(det_path, out / "det", target=args.target, shapes={"x": (1, 3, height, width)})
    mlcc.compile(rec_path, out / "rec", target=args.target,
                 shapes={"x": (1, 3, 48, REC_WIDTHS)})
    print(f"compiled PP-OCR det at {width}x{height} and PP-OCR rec for widths "
          f"{REC_WIDTHS[0]}..{REC_WIDTHS[1]} ({args.target}) in "
          f"{time.perf_counter() - t0:.1f} s, into {out}")
    det, rec = mlcc.load(out / "det"), mlcc.load(out / "rec")
    det_ort, rec_ort = _session(det_path), _session(rec_path)

    x = det_input(page)
    prob = next(iter(det.run({"x": x}).values()))[0, 0]
    prob_ort = det_ort.run(None, {"x": x})[0][0, 0]
    boxes, boxes_ort = text_boxes(prob), text_boxes(prob_ort)
    same_boxes = boxes == boxes_ort
    print(f"detector: {len(boxes)} lines (onnxruntime: {len(boxes_ort)}, "
          f"{'the same boxes' if same_boxes else 'DIFFERENT boxes'}); probability map max abs "
          f"difference {np.abs(prob - prob_ort).max():.2e}")

    same_text = 0
    rows = []
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        xi = rec_input(page[y0:y1, x0:x1])
        scores = next(iter(rec.run({"x": xi}).values()))
        scores_ort = rec_ort.run(None, {"x": xi})[0]
        text, text_ort = ctc_greedy(scores, chars), ctc_greedy(scores_ort, chars)
        same_text += text == text_ort
        rows.append((i, xi.shape[3], float(np.abs(scores - scores_ort).max()), text, text_ort,
                     truth[i] if len(truth) == len(boxes) else None))
    print("\n| line | width | mlcc | onnxruntime | max score diff | ground truth |")
    print("|---:|---:|---|---|---:|---|")
    for i, w, diff, text, text_ort, t in rows:
        mark = "" if text == text_ort else " (DIFFER)"
        print(f"| {i} | {w} | {text}{mark} | {text_ort} | {diff:.1e} | "
              f"{'' if t is None else t + (' (ok)' if t == text else '')} |")
    matched = sum(1 for r in rows if r[5] is not None and r[5] == r[3])
    print(f"\n{same_text} of {len(boxes)} lines read the same by mlcc and onnxruntime"
          + (f"; {matched} of {len(truth)} equal to the rendered text" if truth else ""))
    return 0 if same_boxes and same_text == len(boxes) and boxes else 1


if __name__ == "__main__":
    sys.exit(main())
