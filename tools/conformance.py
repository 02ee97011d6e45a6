"""ONNX backend node conformance: every node test of the onnx package through mlcc.

    python tools/conformance.py [--jobs 2] [--filter conv] [--ops model|all|Conv,Relu]
                                [--opset-max 21] [--report FILE] [--verbose]
                                [--merge REPORT] [--write-docs [FILE]]

The node tests come from onnx.backend.test.case.node (`collect_testcases()`); onnx 1.23's
`cmd_tools generate-data` no longer writes them, so they are serialized here once per onnx
version, as the ONNX backend layout (model.onnx, test_data_set_0/input_*.pb, output_*.pb), into
the model cache (~/.cache/mlcc-models/onnx-node-tests-<onnx version>/). Each test is compiled
with mlcc for x86 (tools/conformance-x86.yaml: -O1, since build time dominates), run, and
compared with the expected outputs at the ONNX runner's tolerances (rtol 1e-3, atol 1e-7).

Each test ends as:
  passed   outputs match
  bound    outputs match once the graph inputs that mlcc needs as compile-time constants (the
           ones it names in "must be a constant": axes, shapes, starts, sizes, split sizes, an If's
           condition, ..., and the scales, zero points and weights of the integer operators) are
           bound to the test's values with mlcc.compile(bind=...), as a user of a static compiler
           would with --bind
  refused  mlcc refused the model at compile time (UnsupportedError: op, attribute or type)
  failed   a wrong answer, a crash, or any other error: the goal is none

The operator of a test is its node's op type; an "_expanded" test (the operator's function
body written out) counts for the operator it expands. Prints a table per operator and the
totals; exits non-zero if any test failed.

--write-docs rewrites two tables of docs/conformance.md between their markers (MARKERS): the
results per operator and the refused tests per refusal category (mlcc/ops/refusals.py; a
refusal's message names its category). Both are sorted and carry no date, so the same results
write the same text. --merge REPORT first takes the results of an earlier --report and
replaces those of the tests this run ran, so that a run of a few operators updates their rows
of a whole sweep's tables.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

import numpy as np

CACHE = Path(os.environ.get("MLCC_MODEL_CACHE", Path.home() / ".cache" / "mlcc-models"))
TARGET = Path(__file__).parent / "conformance-x86.yaml"
RTOL, ATOL = 1e-3, 1e-7
# Tests whose stored outputs are further from the exact answer than ATOL, with the atol they
# are compared at instead (and why). Each entry names the measured error of the stored data.
INEXACT_EXPECTED = {
    # ifft of a ramp: where the exact imaginary part is 0 (-7e-16 in float64) the stored
    # output holds 1.9e-7; the data is 1.5e-6 from numpy's float64 ifft at worst (mlcc 4.4e-7,
    # onnxruntime 1.9e-5); docs/audio.md
    "test_dft_inverse": 1e-5,
    "test_dft_inverse_opset19": 1e-5,
    # Attention's function body in float16 / bfloat16: the stored outputs (onnx.reference, which
    # rounds every operator's result, MatMul sums included, to the type) are further from the
    # same graph evaluated in float64 than mlcc's (float32 inside, rounded once at the output;
    # docs/conformance.md "float16, bfloat16 and float64"): stored 4.9e-4 from it, mlcc
    # 4.0e-4 (float16); stored 3.6e-3 to 5.0e-3, mlcc 2.9e-3 to 3.4e-3 (bfloat16, whose outputs
    # are then compared as values at this atol instead of bit for bit)
    "test_attention_4d_causal_fp16_expanded": 1e-3,
    "test_attention_3d_causal_bf16_expanded": 1e-2,
    "test_attention_4d_causal_bf16_expanded": 1e-2,
    "test_attention_4d_attn_mask_causal_bf16_expanded": 1e-2,
    "test_attention_4d_padded_kv_bf16_expanded": 1e-2,
    "test_attention_4d_causal_padded_kv_bf16_expanded": 1e-2,
    # the operator itself on bfloat16 inputs, computed in float32 and rounded once: 1 or 2
    # bfloat16 units from the stored outputs (which round the reference's float32 result
    # differently after its own summation order), so compared as values at the same atol
    "test_attention_3d_causal_bf16": 1e-2,
    "test_attention_4d_causal_bf16": 1e-2,
    "test_attention_4d_attn_mask_causal_bf16": 1e-2,
    "test_attention_4d_padded_kv_bf16": 1e-2,
    "test_attention_4d_causal_padded_kv_bf16": 1e-2,
}
MAX_BIND_ROUNDS = 8

# The operator types of the real models the project works with: its digits CNNs and MobileNetV2
# (fetch_models.PROJECT_MODELS), the onnx package's light_* model zoo, YOLOv8n, PP-OCRv4
# det/rec/cls (all fetched or built by tools/fetch_models.py) and the MiniLM
# sentence-transformer exports (BERT-style encoder) when they are in the cache (they add
# ReduceL2).
# model_op_types() recomputes the first part from the files; this list is what the CI subset
# uses, so that it does not depend on which models happen to be cached.
MODEL_OPS = sorted(set("""
Add AveragePool BatchNormalization Cast Clip Concat Constant ConstantOfShape Conv ConvTranspose
Div Dropout Equal Erf Expand Flatten Gather Gemm GlobalAveragePool HardSigmoid Identity LRN
LayerNormalization MatMul MaxPool Mul Not Pow Range ReduceL2 ReduceMean ReduceSum Relu Reshape
Resize Shape Sigmoid Slice Softmax Split Sqrt Squeeze Sub Sum Tanh Transpose Unsqueeze Where
""".split()))


def model_op_types() -> set[str]:
    """Op types of every model file in the cache, examples/digits and the onnx light models."""
    import onnx
    roots = [CACHE, Path(__file__).resolve().parents[1] / "examples" / "digits",
             Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"]
    ops: set[str] = set()
    for root in roots:
        for f in sorted(root.rglob("*.onnx")) if root.is_dir() else []:
            if "onnx-node-tests" in str(f):
                continue
            m = onnx.load(str(f), load_external_data=False)
            ops |= {n.op_type for n in m.graph.node}
    return ops


def cache_dir() -> Path:
    import onnx
    return CACHE / f"onnx-node-tests-{onnx.__version__}"


def generate(folder: Path) -> list[dict]:
    """Serializes every node test (first data set) into folder; returns the index."""
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case.node import collect_testcases

    index_file = folder / "index.json"
    if index_file.is_file():
        return json.loads(index_file.read_text())
    tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=folder.parent if folder.parent.is_dir()
                                else None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = list(collect_testcases(None))
    single = {c.name: c.model.graph.node[0].op_type for c in cases
              if len(c.model.graph.node) == 1}
    index = []
    for case in cases:
        opset = max((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")),
                    default=0)
        base = re.sub(r"_expanded.*$", "", case.name)
        nodes = case.model.graph.node
        op = single.get(base) or (nodes[0].op_type if len(nodes) == 1 else None)
        if op is None:   # a multi-node test that is no expansion: name it by its last node
            op = nodes[-1].op_type if nodes else "?"
        d = tmp / case.name
        (d / "test_data_set_0").mkdir(parents=True)
        onnx.save(case.model, str(d / "model.onnx"))
        tensors = True
        for inputs, outputs in (case.data_sets or [])[:1]:
            for kind, arrays in (("input", inputs), ("output", outputs)):
                for i, a in enumerate(arrays):
                    try:
                        t = a if isinstance(a, onnx.TensorProto) else \
                            numpy_helper.from_array(np.asarray(a))
                    except Exception:
                        tensors = False
                        break
                    (d / "test_data_set_0" / f"{kind}_{i}.pb").write_bytes(t.SerializeToString())
        index.append({"name": case.name, "op": op, "opset": opset,
                      "tensors": tensors and bool(case.data_sets)})
    (tmp / "index.json").write_text(json.dumps(index, indent=0))
    try:
        tmp.rename(folder)
    except OSError:   # another process generated it first
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return json.loads(index_file.read_text())


def _read(folder: Path, kind: str) -> list[np.ndarray]:
    import onnx
    from onnx import numpy_helper
    out, i = [], 0
    while (folder / f"{kind}_{i}.pb").is_file():
        t = onnx.TensorProto()
        t.ParseFromString((folder / f"{kind}_{i}.pb").read_bytes())
        out.append(numpy_helper.to_array(t))
        i += 1
    return out


# What mlcc says of a graph input it needs as a compile-time constant: a shape-like value
# (ops/common.py const_input; passes/control_flow.py for a Loop's inputs and an If's condition:
# "must be a constant once shapes are static ... give its value with --bind NAME=...") or a
# quantization parameter or integer weight (ops/quant.py: "'NAME' must be a constant").
# The first form is tried first: its message also names the computed value in the second
# form's place ("(input 1, 'pads') must be a constant ... --bind shape=...").
_CONST_INPUTS = (re.compile(r"must be a constant once shapes are static.*?--bind ([^=\s]+)="),
                 re.compile(r"'([^']+)'\)? must be a constant\b"))


def const_input_named(message: str) -> str | None:
    """The graph input a refusal asks to bind, if it names one."""
    for pattern in _CONST_INPUTS:
        m = pattern.search(message)
        if m:
            return m.group(1)
    return None


class Result(NamedTuple):
    name: str
    op: str
    status: str       # passed, bound, refused or failed
    why: str
    # The (domain, op type) of every node of the compiled graph once the compiler's passes have
    # run: what the generated C executes (an operator folded at compile time is not in it).
    lowered: tuple[tuple[str, str], ...] = ()
    # a refusal's category (mlcc/ops/refusals.py CATEGORIES), when its message names one
    category: str = ""


def run_case(entry: dict, root: Path) -> Result:
    """Compiles and runs one test."""
    import onnx
    import mlcc
    from mlcc.errors import UnsupportedError, MlccError
    from mlcc.ops.refusals import category_of

    name, op = entry["name"], entry["op"]
    d = root / name
    model = onnx.load(str(d / "model.onnx"))
    inputs = _read(d / "test_data_set_0", "input") if entry["tensors"] else []
    outputs = _read(d / "test_data_set_0", "output") if entry["tensors"] else []
    feeds = {i.name: v for i, v in zip(model.graph.input, inputs)}
    bound: dict[str, np.ndarray] = {}
    lowered: tuple[tuple[str, str], ...] = ()

    def end(status: str, why: str, category: str | None = None) -> Result:
        return Result(name, op, status, why, lowered, category or "")

    with tempfile.TemporaryDirectory(prefix="mlcc-conf-") as tmp:
        for _ in range(MAX_BIND_ROUNDS + 1):
            try:
                compiled = mlcc.compile(d / "model.onnx", Path(tmp) / "out",
                                        target=str(TARGET), bind=bound)
                lowered = tuple(sorted({(n.domain, n.op_type) for n in compiled.graph.nodes}))
                break
            except UnsupportedError as exc:
                bind_name = const_input_named(exc.message)
                if bind_name and bind_name in feeds:
                    # Bind that input to the test's value (mlcc.compile(bind=...), --bind)
                    bound[bind_name] = feeds.pop(bind_name)
                    continue
                return end("refused", exc.message.splitlines()[-1].strip()[:200],
                           category_of(exc.message))
            except MlccError as exc:
                return end("failed", f"compile: {exc.message}"[:300])
            except Exception as exc:  # a crash of the compiler
                return end("failed", f"crash: {type(exc).__name__}: {exc}"[:300])
        else:
            return end("refused", f"needs more than {MAX_BIND_ROUNDS} bound inputs")
        if not entry["tensors"]:
            return end("failed", "compiled a test whose inputs are not tensors")
        try:
            m = mlcc.load(Path(tmp) / "out")
            got = m.run(feeds)
        except Exception as exc:
            return end("failed", f"run: {type(exc).__name__}: {exc}"[:300])
        for o, ref in zip(model.graph.output, outputs):
            ref = np.asarray(ref)
            g = got.get(o.name)
            if g is None or g.shape != ref.shape:
                return end("failed", (f"output {o.name}: shape "
                                      f"{None if g is None else g.shape} != {ref.shape}"))
            if g.dtype != ref.dtype:
                return end("failed", f"output {o.name}: dtype {g.dtype} != {ref.dtype}")
            try:
                if ref.dtype.kind == "V" and name in INEXACT_EXPECTED:
                    # a computed bfloat16 output whose stored value is inexact (above)
                    np.testing.assert_allclose(g.astype(np.float32), ref.astype(np.float32),
                                               rtol=RTOL, atol=INEXACT_EXPECTED[name])
                elif ref.dtype.kind == "V":
                    # ml_dtypes types (bfloat16, float8, float4, int4, int2): the exact codes,
                    # so NaN, the sign of zero and the FNUZ rules are checked too
                    bits = np.dtype(f"u{ref.dtype.itemsize}")
                    np.testing.assert_array_equal(g.view(bits), ref.view(bits))
                elif ref.dtype.kind in "fc":
                    np.testing.assert_allclose(g, ref, rtol=RTOL,
                                               atol=INEXACT_EXPECTED.get(name, ATOL))
                else:
                    np.testing.assert_array_equal(g, ref)
            except AssertionError as exc:
                line = [l for l in str(exc).splitlines() if "Max absolute" in l]
                return end("failed", (f"wrong answer on {o.name}: "
                                      f"{line[0].strip() if line else str(exc)[:200]}"))
    if bound:
        return end("bound", "bound: " + ", ".join(bound))
    return end("passed", "")


def _run_one(args):
    return run_case(*args)


def select(index: list[dict], ops: str, name_filter: str | None, opset_max: int) -> list[dict]:
    if ops == "all":
        wanted = None
    elif ops == "model":
        wanted = set(MODEL_OPS)
    else:
        wanted = set(ops.split(","))
    return [e for e in index
            if (wanted is None or e["op"] in wanted) and e["opset"] <= opset_max
            and (not name_filter or re.search(name_filter, e["name"], re.I))]


def run(entries: list[dict], root: Path, jobs: int) -> list[Result]:
    if jobs <= 1:
        return [run_case(e, root) for e in entries]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_run_one, [(e, root) for e in entries], chunksize=2))


def table(results: list[Result]) -> str:
    per_op = collections.defaultdict(collections.Counter)
    for r in results:
        per_op[r.op][r.status] += 1
    lines = [f"| operator | passed | bound | refused | failed |", "|---|---:|---:|---:|---:|"]
    for op in sorted(per_op):
        c = per_op[op]
        lines.append(f"| {op} | {c['passed']} | {c['bound']} | {c['refused']} | {c['failed']} |")
    total = collections.Counter(r.status for r in results)
    lines.append(f"| **total ({len(results)} tests, {len(per_op)} operators)** | "
                 f"{total['passed']} | {total['bound']} | {total['refused']} | {total['failed']} |")
    return "\n".join(lines)


# The sections of docs/conformance.md that --write-docs rewrites: name -> (begin, end) lines.
MARKERS = {name: (f"<!-- {name}: written by tools/conformance.py --write-docs -->",
                  f"<!-- end of {name} -->") for name in ("results per operator",
                                                          "refusal categories")}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "conformance.md"
OTHER = ("outside these categories: other domains (training, preview) and the ai.onnx.ml "
         "operators mlcc does not compile, an attribute, type or value of a supported "
         "operator, each named in its refusal")


def category_table(results: list[Result]) -> str:
    """Refused node tests per refusal category (mlcc/ops/refusals.py), with the operators of
    the default domain in each and why it is refused."""
    from mlcc.ops.refusals import CATEGORIES, REFUSED
    refused = collections.Counter(r.category or OTHER for r in results if r.status == "refused")
    lines = ["| category | operators of the default domain | node tests refused | why |",
             "|---|---|---:|---|"]
    for category, why in CATEGORIES.items():
        ops = ", ".join(f"`{op}`" for op in sorted(o for o, c in REFUSED.items()
                                                   if c == category))
        lines.append(f"| {category} | {ops} | {refused[category]} | {why} |")
    lines.append(f"| {OTHER} | | {refused[OTHER]} | |")
    return "\n".join(lines)


def merge(results: list[Result], report: Path) -> list[Result]:
    """An earlier report's results, those of the tests in `results` replaced by these."""
    mine = {r.name for r in results}
    old = [Result(e["test"], e["op"], e["status"], e["why"], (), e.get("category", ""))
           for e in json.loads(report.read_text()) if e["test"] not in mine]
    return sorted(old + list(results))


def write_docs(results: list[Result], path: Path = DOCS) -> None:
    """Rewrites the MARKERS sections of `path` with the tables of these results."""
    text = path.read_text()
    for name, body in (("results per operator", table(results)),
                       ("refusal categories", category_table(results))):
        begin, end = MARKERS[name]
        if text.count(begin) != 1 or text.count(end) != 1 or \
                text.index(begin) > text.index(end):
            raise SystemExit(f"{path}: needs one {begin!r} line and, after it, one {end!r}")
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1]
    path.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--filter", default=None,
                    help="only tests whose name this matches (a regular expression, any case)")
    ap.add_argument("--ops", default="all",
                    help="'all', 'model' (the op types of the real models) or a comma list")
    ap.add_argument("--opset-max", type=int, default=99)
    ap.add_argument("--report", default=None, help="write every result as JSON here")
    ap.add_argument("--verbose", action="store_true", help="print every refusal too")
    ap.add_argument("--merge", default=None, metavar="REPORT",
                    help="add the results of an earlier --report for the tests not run now")
    ap.add_argument("--write-docs", nargs="?", const=str(DOCS), default=None, metavar="FILE",
                    help="rewrite the per-operator and refusal-category tables between their "
                         "markers in FILE (default: docs/conformance.md)")
    args = ap.parse_args(argv)
    root = cache_dir()
    index = generate(root)
    results = run(select(index, args.ops, args.filter, args.opset_max), root, args.jobs)
    failed = any(r.status == "failed" for r in results)
    if args.merge:
        results = merge(results, Path(args.merge))
    print(table(results))
    for r in sorted(results):
        if r.status == "failed" or (args.verbose and r.status in ("refused", "bound")):
            print(f"{r.status.upper()} {r.name} [{r.op}]: {r.why}")
    if args.report:
        Path(args.report).write_text(json.dumps(
            [{"test": r.name, "op": r.op, "status": r.status, "why": r.why,
              "category": r.category} for r in results], indent=1))
    if args.write_docs:
        write_docs(results, Path(args.write_docs))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
