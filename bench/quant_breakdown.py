"""Where a model's int8 error comes from, on the fake-quant program (mlcc/quant/fakequant.py):
one build, every mix a run. For a model of bench_quant.VARIANT_MODELS, calibrated with the
default calibrator on its calibration samples and scored (output SQNR against float) on its
evaluation samples:

- all integer; activations alone; weights alone;
- weights alone by kind of layer (dense k x k, 1x1, depthwise, squeeze-excitation
  convolutions on a 1x1 map, Gemm / MatMul), and each layer's weights alone (the worst --top);
- each layer's own weight SQNR (its int8 weights against its float ones, the worst channel
  too), which says whether a layer's weights are hard to quantize per channel;
- how the error of the output is spread: the share of the noise energy in the 1% of output
  elements with the largest error.

    python bench/quant_breakdown.py ppocr_det_text [--top 12] [--w8a16]

--w8a16 also scores every candidate layer at W8A16 (int16 activations) alone and all of them
at once. This is not a test: nothing here asserts a number. Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_quant as bq  # noqa: E402

from mlcc import api  # noqa: E402
from mlcc.frontend import import_model  # noqa: E402
from mlcc.passes import INT8_PIPELINE, run_pipeline  # noqa: E402
from mlcc.quant import (QuantOptions, calibrate, conv_transpose_as_conv,  # noqa: E402
                        observed_values, quantize_graph, split_table_activations)
from mlcc.quant import fakequant, sensitivity  # noqa: E402


def kind(g, name: str) -> str:
    n = next(x for x in g.nodes if x.name == name)
    if n.op_type != "Conv":
        return n.op_type
    w = g.const(n.inputs[1])
    x = g.values[n.inputs[0]].shape
    if int(n.attr("group", 1)) > 1:
        return "depthwise" if w.shape[1] == 1 else "grouped"
    if x[2:] and all(d == 1 for d in x[2:]):
        return "conv on 1x1 map (SE)"
    return "1x1" if all(d == 1 for d in w.shape[2:]) else "kxk"


def weight_db(g, name: str, wq: np.ndarray, ws: np.ndarray) -> tuple[float, float]:
    """(the layer's weight SQNR, its worst channel's), its int8 weights against its float
    ones in the rewrite's layout."""
    n = next(x for x in g.nodes if x.name == name)
    deq = fakequant.graph_layout_weights(g, n, wq, ws).astype(np.float64)
    w = g.const(n.inputs[1]).astype(np.float64)
    err = (w - deq) ** 2
    db = 10 * np.log10(np.sum(w * w) / max(np.sum(err), 1e-300))
    axis = 0 if n.op_type == "Conv" else 1 if n.op_type == "MatMul" or \
        not n.attr("transB", 0) else 0
    wc = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    ec = np.moveaxis(err, axis, 0).reshape(w.shape[axis], -1)
    sig, noi = np.sum(wc * wc, 1), np.sum(ec, 1)
    live = sig > 0
    per = 10 * np.log10(sig[live] / np.maximum(noi[live], 1e-300)) if live.any() else [np.inf]
    return float(db), float(np.min(per))


def spread(refs, outs) -> float:
    """Share of the noise energy in the 1% of output elements with the largest error."""
    e = np.concatenate([(r[k].astype(np.float64) - o[k]).ravel() ** 2
                        for r, o in zip(refs, outs) for k in r])
    top = max(1, e.size // 100)
    return float(np.sort(e)[-top:].sum() / max(e.sum(), 1e-300))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=sorted(bq.VARIANT_MODELS))
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--calibrator", default="auto")
    ap.add_argument("--w8a16", action="store_true")
    a = ap.parse_args()
    path, shapes, calib, test = bq.VARIANT_MODELS[a.model]()
    if not isinstance(path, (str, Path)):
        raise SystemExit("a model built in memory: not supported here")
    g = split_table_activations(conv_transpose_as_conv(
        run_pipeline(import_model(path, shapes), INT8_PIPELINE)))
    (inp,) = g.inputs
    with tempfile.TemporaryDirectory(prefix="mlcc-breakdown-") as tmp:
        tmp = Path(tmp)
        names = observed_values(g)
        run = api.float_runner(g, tmp / "float", names)
        cal = [{inp: s} for s in calib]
        ranges = calibrate(cal, run, names, method=a.calibrator)
        samples = [{inp: s} for s in test]
        refs = [{o: run(s)[o] for o in g.outputs} for s in samples]
        allint = quantize_graph(g, ranges, QuantOptions())
        cands = sensitivity.candidates(allint.layers)
        producers = [c for c in cands if c in allint.weights]
        all16 = quantize_graph(g, ranges, QuantOptions(w8a16=frozenset(producers))) \
            if a.w8a16 else None
        fq = fakequant.build(g, allint, all16)
        sim = api._Simulator(g, fq, api._host_runner(fq.graph, tmp / "fq", "mlcc_fq"))

        def score(control) -> tuple[float, list]:
            outs = [sim(s, control) for s in samples]
            return sensitivity.output_sqnr(refs, outs), outs

        print(f"{a.model}: {len(cands)} candidate layers, {len(producers)} with weights, "
              f"{len(samples)} evaluation samples, calibrator {a.calibrator}")
        for label, control in [("all integer", fq.plan(allint)),
                               ("activations alone", fq.control(allint.qnames, ())),
                               ("weights alone", fq.control((), allint.weights))]:
            db, outs = score(control)
            print(f"  {label:<24} {db:6.2f} dB  (top 1% of elements: "
                  f"{100 * spread(refs, outs):.0f}% of the noise)")
        kinds: dict[str, list[str]] = {}
        for c in producers:
            kinds.setdefault(kind(g, c), []).append(c)
        print("weights alone, by kind of layer:")
        for k, layers in sorted(kinds.items()):
            macs = sum(sensitivity.macs(g, c) for c in layers)
            db, _ = score(fq.control((), layers))
            print(f"  {k:<24} {db:6.2f} dB  ({len(layers)} layers, {macs / 1e6:.0f} M MACs)")
        rows = []
        for c in producers:
            db, _ = score(fq.control((), [c]))
            wdb, worst = weight_db(g, c, *allint.weights[c])
            rows.append((db, c, kind(g, c), wdb, worst))
        rows.sort()
        print(f"each layer's weights alone, the worst {a.top} (output SQNR; the layer's own "
              f"weight SQNR and its worst channel's):")
        for db, c, k, wdb, worst in rows[:a.top]:
            print(f"  {c:<28} {k:<22} {db:6.2f} dB  weights {wdb:5.1f} dB, worst channel "
                  f"{worst:5.1f} dB")
        wrows = sorted(rows, key=lambda r: r[3])
        print(f"the worst own weight SQNRs: " + ", ".join(
            f"{c} {wdb:.1f} ({k})" for _, c, k, wdb, _ in wrows[:a.top]))
        if all16 is not None:
            db, _ = score(fq.plan(all16))
            print(f"every producer at W8A16: {db:.2f} dB")
            alone = []
            for c in producers:
                one = quantize_graph(g, ranges, QuantOptions(w8a16=frozenset([c])))
                ctl = fq.control(sensitivity.touched(g, c, fq.slots), [c])
                ctl16 = fq.control((), [c], [v for v in one.q16])
                alone.append((score(ctl)[0], score(ctl16)[0], c))
            alone.sort()
            print("the most sensitive layers alone: int8 -> W8A16 (output SQNR):")
            for d8, d16, c in alone[:a.top]:
                print(f"  {c:<28} {d8:6.2f} -> {d16:6.2f} dB")


if __name__ == "__main__":
    main()
