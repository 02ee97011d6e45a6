"""The ONNX backend node tests through mlcc (tools/conformance.py), and the test that every
registered operator is executed by some test (tests/op_coverage.py, issue 17).

- The node tests of the operator types the real models use (conformance.py MODEL_OPS): none may
  give a wrong answer or crash. To stay within its CI budget this runs a deterministic third of
  them: every third one in name order (MLCC_CONFORMANCE_STRIDE=1 runs them all). Refusals are
  allowed here (`make conformance` lists them over all 1,884 tests).
- Every registered operator: a few node tests of each operator of the default and ai.onnx.ml
  domains, one of which must run it (op_coverage.node_test_picks), or the witness test
  op_coverage.WITNESSES names for it.

The two share their results: a node test both select is compiled and run once."""
import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conformance
import op_coverage

STRIDE = int(os.environ.get("MLCC_CONFORMANCE_STRIDE", "3"))
JOBS = min(2, os.cpu_count() or 1)
HERE = Path(__file__).parent

_done: dict[str, conformance.Result] = {}


def _index() -> list[dict]:
    return conformance.generate(conformance.cache_dir())


def _results(entries: list[dict]) -> list[conformance.Result]:
    """The results of these node tests, running those this module has not run yet."""
    todo = [e for e in entries if e["name"] not in _done]
    for r in conformance.run(todo, conformance.cache_dir(), jobs=JOBS):
        _done[r.name] = r
    return [_done[e["name"]] for e in entries]


@pytest.mark.slow
def test_model_operator_node_tests_never_give_a_wrong_answer():
    entries = sorted(conformance.select(_index(), "model", None, 99), key=lambda e: e["name"])
    entries = entries[::STRIDE]
    start = time.monotonic()
    results = _results(entries)
    failed = [f"{r.name} [{r.op}]: {r.why}" for r in results if r.status == "failed"]
    passed = sum(1 for r in results if r.status in ("passed", "bound"))
    print(f"\n{len(results)} node tests in {time.monotonic() - start:.0f} s: {passed} passed, "
          f"{len(failed)} failed")
    assert not failed, "\n".join(failed)
    # The model operators must keep passing: a refusal creeping in is a regression too.
    assert passed >= 0.95 * len(results), f"only {passed} of {len(results)} passed"


def _runs(domain: str, op: str, r: conformance.Result) -> bool:
    """Whether this node test ran op through mlcc: passed, with op in the compiled program (or
    folded, for an operator that exists only at compile time)."""
    return r.status in ("passed", "bound") and (
        (domain, op) in r.lowered or op_coverage.runs_at_compile_time_only(domain, op))


def test_every_registered_operator_is_executed_by_a_test():
    index = _index()
    start = time.monotonic()
    operators = op_coverage.registered()
    # the operators the ONNX node tests cover: the default domain's and ai.onnx.ml's
    onnx_ops = [(d, op) for d, op in operators if d in op_coverage.NODE_TEST_DOMAINS]
    picks = {key: op_coverage.node_test_picks(index, key[1]) for key in onnx_ops}
    _results([e for key in onnx_ops for e in picks[key][0]])
    problems, ran = [], 0
    for domain, op in onnx_ops:
        first, rest = picks[(domain, op)]
        name = f"{domain}.{op}" if domain else op
        results = _results(first)
        # None of the picks runs op: its other node tests, a few at a time, until one does.
        while rest and not any(_runs(domain, op, r) for r in results) and \
                (domain, op) not in op_coverage.WITNESSES:
            results += _results(rest[:2 * JOBS])
            rest = rest[2 * JOBS:]
        ran += len(results)
        problems += [f"{name}: {r.name} failed: {r.why}" for r in results
                     if r.status == "failed"]
        if not any(_runs(domain, op, r) for r in results) and \
                (domain, op) not in op_coverage.WITNESSES:
            why = "; ".join(f"{r.name}: {r.status} {r.why}".strip() for r in results[:3])
            problems.append(
                f"{name}: no test executes it: none of its {len(results)} ONNX node tests ran "
                f"it through mlcc ({why or 'it has none'}); make one pass, or add a test "
                f"against onnxruntime that compiles it and name it in tests/op_coverage.py "
                f"WITNESSES")
    for domain, op in operators:
        if domain not in op_coverage.NODE_TEST_DOMAINS and \
                (domain, op) not in op_coverage.WITNESSES:
            problems.append(
                f"{domain}.{op}: no test executes it: an operator of domain {domain!r} (no ONNX "
                f"node tests: written by the compiler itself, or onnxruntime's) needs the test "
                f"that compiles it and checks the result, named in tests/op_coverage.py "
                f"WITNESSES")
    print(f"\n{len(onnx_ops)} ONNX operators, {ran} node tests, "
          f"{time.monotonic() - start:.0f} s; {len(op_coverage.WITNESSES)} witnesses")
    assert not problems, "\n".join(problems)


def test_every_witness_names_a_registered_operator_and_a_collected_test():
    registered = set(op_coverage.registered())
    problems = [f"{d}.{op}" if d else op for d, op in op_coverage.WITNESSES
                if (d, op) not in registered]
    problems = [f"{op} has a witness in tests/op_coverage.py but is not registered"
                for op in problems]
    tests = sorted(set(op_coverage.WITNESSES.values()))
    files = sorted({t.split("::")[0] for t in tests})
    for f in files:   # a quick look first: a missing file or function is a clear message
        if not (HERE / f).is_file():
            problems.append(f"witness file tests/{f} does not exist")
            continue
        defined = {n.name for n in ast.walk(ast.parse((HERE / f).read_text()))
                   if isinstance(n, ast.FunctionDef)}
        problems += [f"witness {t}: no function {t.split('::')[1].split('[')[0]} in tests/{f}"
                     for t in tests if t.startswith(f + "::") and
                     t.split("::")[1].split("[")[0] not in defined]
    assert not problems, "\n".join(problems)
    # The exact ids (parameters included), as pytest collects them.
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                          "no:xdist", "-p", "no:cacheprovider", *files],
                         cwd=HERE, capture_output=True, text=True)
    collected = set()
    for line in out.stdout.splitlines():
        path, sep, test = line.strip().partition("::")
        if sep:
            collected.add(f"{Path(path).name}::{test}")
    missing = [t for t in tests if t not in collected]
    assert not missing, (f"witness tests pytest does not collect: {missing}\n"
                         f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
