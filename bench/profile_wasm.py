"""Per-kernel-call times of a model compiled for wasm, in node, alone or against another build.

    python bench/profile_wasm.py DIR [--runs 21] [--top 25]      # an `mlcc compile -t wasm` folder
    python bench/profile_wasm.py OLD_DIR NEW_DIR [--cpu]           # A/B, runs alternating

The wasm counterpart of bench/profile_layers.py: each folder is copied into a temporary one
with its model.c's kernel calls bracketed by calls of an imported clock (env.mlcc_prof_at, a
measuring build only), rebuilt with the folder's Makefile (emcc) and run in one node process,
the builds alternating run by run on the same random inputs, so the machine's load falls on
both alike: compare ratios. --cpu times by process.cpuUsage() (the process's CPU time, 1 us
resolution) instead of performance.now(): on a busy machine preempted calls do not count.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mlcc.profiling import CALL, statements  # noqa: E402
from profile_layers import describe, print_per_kernel  # noqa: E402

CLOCK = """
__attribute__((import_module("env"), import_name("mlcc_prof_at")))
void mlcc_prof_at(int call, int end);
"""

NODE = r"""
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const ARRAYS = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array,
                 uint8: Uint8Array, int8: Int8Array, bool: Uint8Array };
const clock = job.cpu ? () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e3; }
                      : () => performance.now();
let acc = null, t0 = 0;
const orig = WebAssembly.instantiate;
WebAssembly.instantiate = (m, imports) => {
  imports.env = imports.env || {};
  imports.env.mlcc_prof_at = (i, end) => {
    if (!end) { t0 = clock(); } else { acc[i] += clock() - t0; }
  };
  return orig(m, imports);
};
const builds = [];
for (const b of job.builds) {
  const { createModel } = await import(pathToFileURL(b.module).href);
  const model = await createModel();
  const feeds = {};
  for (const t of model.inputs) {
    const a = new ARRAYS[t.dtype](t.size);
    let s = 12345;
    for (let i = 0; i < a.length; i++) { s = (s * 1103515245 + 12345) % 2147483648; a[i] = s / 2147483648; }
    feeds[t.name] = a;
  }
  builds.push({ model, feeds, n: b.calls, samples: [], totals: [] });
}
for (let r = 0; r < job.runs + 2; r++) {
  for (const b of builds) {
    acc = new Float64Array(b.n);
    const t = clock();
    b.model.run(b.feeds);
    const total = clock() - t;
    if (r >= 2) { b.samples.push(Array.from(acc)); b.totals.push(total); }
  }
}
console.log(JSON.stringify(builds.map((b) => ({ samples: b.samples, totals: b.totals }))));
"""


def instrument(folder: Path, into: Path) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Copies folder to into with every kernel call of model.c timed; rebuilds model.wasm."""
    shutil.copytree(folder, into)
    calls, lines = [], []
    source = (into / "model.c").read_text()
    for line in statements(source):
        m = CALL.match(line)
        if m and line.rstrip().endswith(";"):
            lines += [f"    mlcc_prof_at({len(calls)}, 0);", line,
                      f"    mlcc_prof_at({len(calls)}, 1);"]
            calls.append((m.group(1), m.group(2) or ""))
        else:
            lines.append(line)
    text = "\n".join(lines).replace('#include "model.h"\n', '#include "model.h"\n' + CLOCK, 1)
    (into / "model.c").write_text(text)
    (into / "model.wasm").unlink(missing_ok=True)
    ldflags = re.search(r"^LDFLAGS = (.*)$", (into / "Makefile").read_text(), re.M).group(1)
    subprocess.run(["make", "-s", "-B", "-C", str(into), "model.wasm",
                    f"LDFLAGS={ldflags} -sERROR_ON_UNDEFINED_SYMBOLS=0"], check=True,
                   env={**os.environ, "NODE_PATH": "/usr/share/nodejs"})
    params = dict(re.findall(r"static const \w+ (p_\w+) = \{(.*?)\n\};", text, re.S))
    return calls, params


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="one folder, or two for an A/B")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cpu", action="store_true", help="process CPU time instead of wall time")
    args = ap.parse_args()
    if len(args.folders) > 2:
        ap.error("one folder, or two for an A/B")
    with tempfile.TemporaryDirectory(prefix="mlcc-prof-wasm-") as tmp:
        builds = [instrument(f, Path(tmp) / f"m{i}") for i, f in enumerate(args.folders)]
        job = {"cpu": args.cpu, "runs": args.runs,
               "builds": [{"module": str(Path(tmp) / f"m{i}" / "model.mjs"), "calls": len(c)}
                          for i, (c, _) in enumerate(builds)]}
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        (Path(tmp) / "prof.mjs").write_text(NODE)
        proc = subprocess.run(["node", str(Path(tmp) / "prof.mjs"), str(Path(tmp) / "job.json")],
                              capture_output=True, text=True, check=True)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    meds = [np.median(np.array(o["samples"]), axis=0) for o in out]
    totals = [float(np.median(o["totals"])) for o in out]
    kernels = [float(np.median(np.array(o["samples"]).sum(axis=1))) for o in out]
    calls, params = builds[0]
    n = min(len(b[0]) for b in builds)
    if len(builds) == 1:
        print(f"{args.folders[0]}: run {totals[0]:.3f} ms, kernels {kernels[0]:.3f} ms over "
              f"{n} calls (median of {args.runs})")
    else:
        if [c[0] for c in builds[0][0][:n]] != [c[0] for c in builds[1][0][:n]]:
            print("note: the two builds call different kernels (compared call by call)")
        print(f"run A {totals[0]:.3f} ms, B {totals[1]:.3f} ms, B/A {totals[1] / totals[0]:.3f}; "
              f"kernels B/A {kernels[1] / kernels[0]:.3f}; median ratio of paired runs "
              f"{np.median(np.array(out[1]['totals']) / np.array(out[0]['totals'])):.3f}")
    print_per_kernel(builds, meds, n)
    print(f"slowest calls{' (of A)' if len(builds) == 2 else ''}:")
    for i in sorted(range(n), key=lambda i: -meds[0][i])[:args.top]:
        times = "  ".join(f"{med[i]:7.3f}" for med in meds)
        ratio = f" {meds[1][i] / meds[0][i]:5.2f}" if len(meds) == 2 and meds[0][i] else ""
        print(f"{i:4d} {times} ms{ratio}  {calls[i][0]} {describe(params.get(calls[i][1], ''))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
