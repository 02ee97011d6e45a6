"""`make bench-wasm`: mlcc's wasm build against onnxruntime-web in node, one Markdown table.

    python bench/bench_wasm.py                         # the four models of issue 4
    python bench/bench_wasm.py yolov8n --seconds 20
    python bench/bench_wasm.py --list

Both engines run in one node process per model on the same seeded inputs: mlcc through its
JavaScript API (model.mjs: run() copies the inputs into wasm memory, runs, copies the outputs
out), onnxruntime-web through its wasm backend (1 thread, SIMD, graph optimizations "all";
session.run with a preallocated input tensor). After warm-up the two alternate, one run each per
round, until the time budget is spent; the table gives medians. onnxruntime-web (pinned below)
is installed with npm into ~/.cache/mlcc-npm (MLCC_NPM_CACHE moves it) the first time. Models
come from bench/bench_models.py (tools/fetch_models.py). The module size is
model.wasm (code only: the weights are in weights.bin) against the .wasm file onnxruntime-web's
wasm backend loads. Progress goes to stderr, the table to stdout. Not a test: nothing here
asserts a time.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_models as bm  # noqa: E402
from mlcc.targets import load_target  # noqa: E402

ORT_WEB_VERSION = "1.30.0"
DEFAULT_MODELS = ["mobilenetv2", "light_squeezenet", "yolov8n", "light_resnet50"]
NPM_CACHE = Path(os.environ.get("MLCC_NPM_CACHE", Path.home() / ".cache" / "mlcc-npm"))

# Runs in node: argv[2] is a JSON job (see _job below); prints one JSON line of results.
NODE_BENCH = r"""
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const ort = await import(pathToFileURL(job.ort_module).href);
const { createModel } = await import(pathToFileURL(job.mlcc_module).href);
ort.env.wasm.numThreads = 1;
ort.env.wasm.simd = true;
const ARRAYS = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array,
                 uint8: Uint8Array, int8: Int8Array, bool: Uint8Array };
const feeds = {}, tensors = {};
for (const t of job.inputs) {
  const bytes = new Uint8Array(readFileSync(t.file));
  feeds[t.name] = new ARRAYS[t.dtype](bytes.buffer);
  tensors[t.name] = new ort.Tensor(t.dtype, feeds[t.name], t.shape);
}
const model = await createModel();
const session = await ort.InferenceSession.create(new Uint8Array(readFileSync(job.onnx)), {
  executionProviders: ["wasm"], graphOptimizationLevel: "all" });
const runMlcc = () => model.run(feeds);
const runOrt = () => session.run(tensors);
let a = runMlcc(), b = await runOrt();
let maxDiff = 0;
for (const name of Object.keys(a)) {
  if (!(name in b)) continue;
  const x = a[name], y = b[name].data;
  for (let i = 0; i < x.length; i++) {
    maxDiff = Math.max(maxDiff, Math.abs(Number(x[i]) - Number(y[i])));
  }
}
const t0 = performance.now();
for (let i = 0; i < 2; i++) { runMlcc(); await runOrt(); }
const samples = { mlcc: [], ort: [] };
const start = performance.now();
while ((performance.now() - start < job.seconds * 1000 && samples.mlcc.length < job.max_runs)
       || samples.mlcc.length < job.min_runs) {
  let t = performance.now(); runMlcc(); samples.mlcc.push(performance.now() - t);
  t = performance.now(); await runOrt(); samples.ort.push(performance.now() - t);
}
console.log(JSON.stringify({ samples, maxDiff, warmup_ms: performance.now() - t0 }));
"""


def ensure_ort_web() -> Path:
    """onnxruntime-web's ESM wasm-backend entry point, installed with npm when missing."""
    package = NPM_CACHE / "node_modules" / "onnxruntime-web"
    entry = package / "dist" / "ort.wasm.min.mjs"
    installed = ""
    if (package / "package.json").is_file():
        installed = json.loads((package / "package.json").read_text()).get("version", "")
    if installed != ORT_WEB_VERSION or not entry.is_file():
        print(f"installing onnxruntime-web@{ORT_WEB_VERSION} into {NPM_CACHE} (npm)",
              file=sys.stderr)
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(NPM_CACHE), "--no-audit", "--no-fund",
                        "--loglevel=error", f"onnxruntime-web@{ORT_WEB_VERSION}"],
                       check=True, timeout=600)
    return entry


def ort_wasm_file(entry: Path) -> Path:
    """The module the wasm backend loads (ort-wasm-simd-threaded.wasm: one build for 1 thread
    and many; the .jsep/.asyncify/.jspi variants are for WebGPU/WebNN)."""
    return entry.parent / "ort-wasm-simd-threaded.wasm"


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def fmt_ms(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    return f"{ms:.3g} ms" if ms >= 1 else f"{ms * 1000:.3g} us"


def fmt_size(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def bench_model(name: str, tmp: Path, ort_entry: Path, seconds: float) -> dict | None:
    import numpy as np

    import mlcc
    from mlcc.api import random_inputs

    model = bm.available(name, tmp)
    if model is None:
        return None
    path, shapes = model
    folder = tmp / name
    print(f"{name}: compiling for wasm", file=sys.stderr)
    res = mlcc.compile(path, folder, target="wasm", shapes=shapes, name="model")
    feeds = random_inputs(res.graph, seed=0)
    inputs = []
    for t in res.manifest["inputs"]:
        file = folder / f"bench_in_{t['name'].replace('/', '_')}.bin"
        np.ascontiguousarray(feeds[t["name"]]).astype(t["dtype"]).tofile(file)
        inputs.append({"name": t["name"], "dtype": t["dtype"], "shape": t["shape"],
                       "file": str(file)})
    job = {"onnx": str(path), "mlcc_module": str(folder / "model.mjs"),
           "ort_module": str(ort_entry), "inputs": inputs, "seconds": seconds,
           "min_runs": 5, "max_runs": 500}
    (tmp / "job.json").write_text(json.dumps(job))
    (tmp / "bench.mjs").write_text(NODE_BENCH)
    print(f"{name}: timing in node (about {seconds:g} s)", file=sys.stderr)
    proc = subprocess.run(["node", str(tmp / "bench.mjs"), str(tmp / "job.json")],
                          capture_output=True, text=True, timeout=seconds * 10 + 600)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: node failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    shape = "x".join(map(str, res.manifest["inputs"][0]["shape"]))
    return {"name": name, "input": shape, "mlcc": median(out["samples"]["mlcc"]),
            "ort": median(out["samples"]["ort"]), "runs": len(out["samples"]["mlcc"]),
            "max_diff": out["maxDiff"], "wasm_size": (folder / "model.wasm").stat().st_size,
            "weights": res.manifest["weights_size"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help="model names (default: the issue's four)")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    ap.add_argument("--seconds", type=float, default=15.0,
                    help="time budget per model (default 15)")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(bm.MODELS))
        return 0
    names = args.models or DEFAULT_MODELS
    unknown = [n for n in names if n not in bm.MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; --list shows them")
    entry = ensure_ort_web()
    node_version = subprocess.run(["node", "--version"], capture_output=True,
                                  text=True).stdout.strip()
    emcc_out = subprocess.run(["emcc", "--version"], capture_output=True, text=True,
                              env={**os.environ, "NODE_PATH": "/usr/share/nodejs"}).stdout
    emcc_version = "emcc " + (re.findall(r"\) (\d+\.\d+\.\d+)", emcc_out) or ["?"])[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mlcc-bench-wasm-") as tmp:
        for name in names:
            row = bench_model(name, Path(tmp), entry, args.seconds)
            if row is not None:
                rows.append(row)
    ort_size = ort_wasm_file(entry).stat().st_size
    date = datetime.date.today().isoformat()
    target = load_target("wasm")
    flags = " ".join(f for f in target.toolchain.cflags if f.startswith(("-O", "-m")))
    if target.gemm_tile:
        flags += f", GEMM tile {target.gemm_tile[0]} x {target.gemm_tile[1]} vectors"
    print(f"Measured with `make bench-wasm` on {date}: {bm.cpu_name()}; node {node_version}, "
          f"1 thread; mlcc at {bm._git_rev()}, target wasm "
          f"({emcc_version}, {flags}); onnxruntime-web {ORT_WEB_VERSION} (wasm backend, "
          f"numThreads 1, SIMD, graph optimizations all). Medians over alternating runs.\n")
    print("| model | input | mlcc wasm | onnxruntime-web | mlcc/ort-web | max abs diff | "
          "model.wasm (code) | weights.bin | runs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for r in rows:
        ratio = r["mlcc"] / r["ort"]
        ratios.append(ratio)
        print(f"| {r['name']} | {r['input']} | {fmt_ms(r['mlcc'])} | {fmt_ms(r['ort'])} | "
              f"{ratio:.2f} | {r['max_diff']:.2g} | {fmt_size(r['wasm_size'])} | "
              f"{fmt_size(r['weights'])} | {r['runs']} |")
    if ratios:
        import math
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        biggest = max(r["wasm_size"] for r in rows)
        print(f"\nGeometric mean of mlcc/onnxruntime-web: {geo:.2f}. onnxruntime-web's "
              f"{ort_wasm_file(entry).name}: {fmt_size(ort_size)}; the largest mlcc "
              f"model.wasm above is {fmt_size(biggest)} (1/{ort_size / biggest:.0f} of it).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
