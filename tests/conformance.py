"""ONNX backend node conformance: every node test of the onnx package through mlcc.

    python tests/conformance.py [--jobs 2] [--filter Conv] [--opset-max 21] [--report FILE]

Generates the node tests from onnx.backend.test.case.node (model + inputs + expected outputs,
cached under the model cache), compiles each with mlcc for x86, runs it and compares with the
expected outputs at the ONNX runner's tolerances (rtol 1e-3, atol 1e-7). Each test ends as:
  passed   outputs match
  refused  mlcc refused the model at compile time (UnsupportedError: op, attribute or type)
  failed   a wrong answer, a crash, or any other error: the goal is none
Prints a table per operator and the totals; exits non-zero if any test failed.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("MLCC_MODEL_CACHE", Path.home() / ".cache" / "mlcc-models"))
TARGET = Path(__file__).parent / "conformance-x86.yaml"


def collect(opset_max: int, name_filter: str | None):
    from onnx.backend.test.case.node import collect_testcases
    import onnx

    cases = []
    for case in collect_testcases(None):
        if name_filter and name_filter.lower() not in case.name.lower():
            continue
        opset = max((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")),
                    default=0)
        if opset > opset_max:
            continue
        op = case.model.graph.node[0].op_type if case.model.graph.node else "?"
        for inputs, outputs in case.data_sets or []:
            cases.append((case.name, op, case.model.SerializeToString(), inputs, outputs))
            break
    return cases


def run_case(args) -> tuple[str, str, str, str]:
    name, op, model_bytes, inputs, outputs = args
    import onnx
    import mlcc
    from mlcc.errors import UnsupportedError, MlccError

    model = onnx.load_from_string(model_bytes)
    with tempfile.TemporaryDirectory(prefix="mlcc-conf-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, str(path))
        try:
            mlcc.compile(path, Path(tmp) / "out", target=str(TARGET))
        except UnsupportedError as exc:
            return name, op, "refused", exc.message.splitlines()[-1].strip()[:200]
        except MlccError as exc:
            return name, op, "failed", f"compile: {exc.message}"[:300]
        except Exception as exc:  # a crash of the compiler
            return name, op, "failed", f"crash: {type(exc).__name__}: {exc}"[:300]
        try:
            m = mlcc.load(Path(tmp) / "out")
            feeds = {i.name: np.asarray(v) for i, v in zip(model.graph.input, inputs)}
            got = m.run(feeds)
        except Exception as exc:
            return name, op, "failed", f"run: {type(exc).__name__}: {exc}"[:300]
        for o, ref in zip(model.graph.output, outputs):
            ref = np.asarray(ref)
            g = got.get(o.name)
            if g is None or g.shape != ref.shape:
                return name, op, "failed", f"output {o.name}: shape {None if g is None else g.shape} != {ref.shape}"
            if g.dtype != ref.dtype:
                return name, op, "failed", f"output {o.name}: dtype {g.dtype} != {ref.dtype}"
            try:
                if ref.dtype.kind in "fc":
                    np.testing.assert_allclose(g, ref, rtol=1e-3, atol=1e-7)
                else:
                    np.testing.assert_array_equal(g, ref)
            except AssertionError as exc:
                line = [l for l in str(exc).splitlines() if "Max absolute" in l]
                return name, op, "failed", f"wrong answer on {o.name}: {line[0].strip() if line else ''}"
    return name, op, "passed", ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--filter", default=None, help="only tests whose name contains this")
    ap.add_argument("--opset-max", type=int, default=99)
    ap.add_argument("--report", default=None, help="write every result as JSON here")
    ap.add_argument("--verbose", action="store_true", help="print every failure and refusal")
    args = ap.parse_args(argv)
    cases = collect(args.opset_max, args.filter)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(run_case, cases, chunksize=4))
    per_op = collections.defaultdict(collections.Counter)
    for name, op, status, why in results:
        per_op[op][status] += 1
    print(f"{'operator':28} {'passed':>7} {'refused':>8} {'failed':>7}")
    for op in sorted(per_op):
        c = per_op[op]
        print(f"{op:28} {c['passed']:7} {c['refused']:8} {c['failed']:7}")
    total = collections.Counter(status for _, _, status, _ in results)
    print(f"{'total':28} {total['passed']:7} {total['refused']:8} {total['failed']:7}  "
          f"({len(results)} tests)")
    for name, op, status, why in sorted(results):
        if status == "failed" or (args.verbose and status == "refused"):
            print(f"{status.upper()} {name}: {why}")
    if args.report:
        Path(args.report).write_text(json.dumps(
            [{"test": n, "op": o, "status": s, "why": w} for n, o, s, w in results], indent=1))
    return 1 if total["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
