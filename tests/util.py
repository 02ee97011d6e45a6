"""Shared helpers for tests: build one-node ONNX models, compile them, compare with references."""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mlcc
from mlcc import resources
from mlcc.api import compare
from mlcc.errors import MlccError
from mlcc.quant.ort_saturation import reference_model

_counter = itertools.count()
RUNTIME = resources.runtime_c()


def cpu_has(flag: str) -> bool:
    """Whether this x86-64 CPU has the instruction set `flag` (as /proc/cpuinfo names it:
    avx2, avx512f, avx512_vnni...); tests that run code built for it skip without."""
    import platform
    try:
        return platform.machine() == "x86_64" and f" {flag}" in open("/proc/cpuinfo").read()
    except OSError:
        return False


def native_vector_flags() -> list[str]:
    """-march=native and the vector width x86-native builds for on this CPU (512 bits with
    AVX-512, 256 with AVX2: gcc refuses 64-byte vectors under -Werror without AVX-512)."""
    from mlcc.targets.target import load_target
    return ["-march=native", f"-DMLCC_VECTOR_BYTES={load_target('x86-native').vector_bits // 8}"]


def build_kernels(lib_path: Path, build: str, sources: list[str], defines=()) -> Path:
    """Runtime sources (paths under runtime_c/) as one shared library for the kernel tests,
    with a target's flags (build: a target name, or "scalar": x86's with MLCC_NO_VECTORS, the
    fallback of compilers without vector extensions) and MLCC_MIN_PARALLEL_MACS=0, so that
    even small cases use the pool. MLCC_TEST_KERNEL_CFLAGS adds flags, e.g. "-fsanitize=address
    -g" (then run pytest with LD_PRELOAD=$(gcc -print-file-name=libasan.so), -s and
    -p no:faulthandler, or the report is lost). Each source compiles to its own object through
    MLCC_CC_LAUNCHER (ccache in the tests: kernel files another module built with the same
    flags are cache hits), then they link."""
    from mlcc.targets import load_target
    from mlcc.targets.objects import launcher
    target = load_target("x86" if build == "scalar" else build)
    cflags = [f for f in target.toolchain.cflags if f != "-fvisibility=hidden"]
    if build == "scalar":
        cflags.append("-DMLCC_NO_VECTORS")
    cflags += shlex.split(os.environ.get("MLCC_TEST_KERNEL_CFLAGS", ""))
    objects = []
    for i, source in enumerate(sources):
        objects.append(str(lib_path.parent / f"{lib_path.stem}-{i}-{Path(source).stem}.o"))
        subprocess.run([*launcher(), target.toolchain.cc, *cflags, *target.defines(), *defines,
                        "-Wall", "-Wextra", "-Werror", "-DMLCC_MIN_PARALLEL_MACS=0",
                        f"-I{RUNTIME / 'include'}", f"-I{RUNTIME / 'kernels'}", "-c",
                        str(RUNTIME / source), "-o", objects[-1]], check=True)
    subprocess.run([target.toolchain.cc, *cflags, "-shared", *objects, "-o", str(lib_path),
                    "-lm"], check=True)
    return lib_path


@contextlib.contextmanager
def thread_pools(ffi, lib, sizes):
    """{n: an mlcc thread pool of n threads} made by the kernel library `lib` (its cffi
    handle), destroyed on leaving."""
    pools = {}
    try:
        for n in sizes:
            p = ffi.new("mlcc_threadpool **")
            assert lib.mlcc_threadpool_create(p, n) == 0
            pools[n] = p[0]
        yield pools
    finally:
        for p in pools.values():
            lib.mlcc_threadpool_destroy(p)


def on_every_pool(ffi, pools, y, call):
    """Runs call(pool) without a pool and on each pool of `pools` (thread_pools): the same
    bytes in y every time (kernels that split rows and channels between threads, with exact
    integer sums); returns them."""
    call(ffi.NULL)
    first = y.copy()
    for pool in pools.values():
        y[...] = 0
        call(pool)
        np.testing.assert_array_equal(y, first)
    return first


def kernel_cdef(*headers: str, defines=("-DMLCC_NO_VECTORS",)) -> str:
    """cffi declarations (ffi.cdef text) of runtime headers (names under runtime_c/kernels or
    runtime_c/include), read from the headers themselves so that a test's structs and
    prototypes cannot drift from the C: the headers (and what they include from runtime_c)
    run through the C preprocessor (macros expanded, #if resolved with `defines`), then keep
    their typedefs, structs, enums and prototypes; static inline functions, static data and
    everything from system headers are dropped, so are vector types (GNU vector_size: no cffi
    equivalent) and what uses them, and other GNU attributes are stripped."""
    src = "".join(f'#include "{h}"\n' for h in headers)
    out = subprocess.run(["gcc", "-E", "-std=c99", *defines, f"-I{RUNTIME / 'include'}",
                          f"-I{RUNTIME / 'kernels'}", "-"], input=src, capture_output=True,
                         text=True, check=True).stdout
    runtime, keep, lines = str(RUNTIME.resolve()), False, []
    for line in out.splitlines():
        marker = re.match(r'# \d+ "(.*)"', line)
        if marker:     # which file the following lines come from
            keep = str(Path(marker.group(1)).resolve()).startswith(runtime + os.sep)
        elif keep:
            lines.append(line)
    text = "\n".join(lines)
    decls, vectors, stmt, depth = [], [], [], 0
    for ch in text:
        stmt.append(ch)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            head = "".join(stmt).split("{", 1)[0].strip()
            if depth == 0 and head.endswith(")"):      # a function's body: not a declaration
                stmt = []
        elif ch == ";" and depth == 0:
            decl = " ".join("".join(stmt).split())
            if "vector_size" in decl:
                vectors.append(re.search(r"(\w+)\s*__attribute__", decl).group(1))
            elif (not decl.startswith("static ") and decl != ";"
                  and not any(re.search(rf"\b{v}\b", decl) for v in vectors)):
                decl = re.sub(r"__attribute__\s*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\)",
                              "", decl)
                decls.append(re.sub(r"\b(__restrict__|__restrict|__inline__|__inline|"
                                    r"__extension__)\b ?", "", decl))
            stmt = []
    return "\n".join(decls) + "\n"


def make_model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], *,
               initializers: dict[str, np.ndarray] | None = None, opset: int = 17,
               input_shapes: dict[str, list] | None = None) -> onnx.ModelProto:
    """A model from nodes; graph inputs are typed from the example arrays (or input_shapes,
    which may hold dim_param strings), outputs are left for inference."""
    graph_inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(arr.dtype),
            (input_shapes or {}).get(name, list(arr.shape)))
        for name, arr in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), "test", graph_inputs, [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)   # onnxruntime reads IR <= 10
    # Output types come from ONNX shape inference, as an exporter would write them.
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in outputs:
        vi = known.get(o)
        if vi is None or not vi.type.tensor_type.elem_type:
            raise ValueError(f"ONNX shape inference cannot type output {o!r}")
        model.graph.output.append(vi)
    return model


def ort_session(model, opts=None):
    """An onnxruntime CPU session of `model` (a ModelProto or a path) as mlcc's reference: its
    uint8 x int8 products exact (reference_model; they saturate on CPUs without VNNI)."""
    import onnxruntime as ort
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    return ort.InferenceSession(reference_model(model).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def reference_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                      reference: str = "onnxruntime") -> dict:
    """onnxruntime's outputs; onnx.reference where onnxruntime cannot run the model, or
    (reference="onnx") always: the implementation the ONNX node tests were made with.
    onnxruntime runs the model's uint8 x int8 products exactly (reference_model: they
    saturate on CPUs without VNNI)."""
    import onnxruntime as ort
    names = [o.name for o in model.graph.output]
    try:
        if reference == "onnx":
            raise NotImplementedError
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(reference_model(model).SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        return dict(zip(names, sess.run(names, feeds)))
    except Exception:
        from onnx.reference import ReferenceEvaluator
        return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


def compile_and_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path, *,
                    target: str = "x86", shapes=None) -> dict[str, np.ndarray]:
    folder = Path(tmp_path) / f"m{next(_counter)}"
    folder.mkdir(parents=True)
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    mlcc.compile(path, folder / "out", target=target, shapes=shapes)
    return mlcc.load(folder / "out").run(feeds)


def run_same_bits_on_threads(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                             tmp_path: Path, threads=(2, 3)) -> dict[str, np.ndarray]:
    """The model compiled for x86 once and run without a pool and on pools of each of
    `threads`: asserts that every output has the same bits on each; returns the 1-thread
    outputs (for a comparison with a reference)."""
    folder = Path(tmp_path) / f"m{next(_counter)}"
    folder.mkdir(parents=True)
    onnx.save(model, str(folder / "model.onnx"))
    mlcc.compile(folder / "model.onnx", folder / "out", target="x86")
    one = mlcc.load(folder / "out").run(feeds)
    for n in threads:
        got = mlcc.load(folder / "out", threads=n).run(feeds)
        for name, value in one.items():
            assert np.array_equal(got[name], value, equal_nan=True), (name, f"{n} threads")
    return one


def check_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path, *,
                target: str = "x86", shapes=None, rtol_scale: float = 1.0,
                reference: str = "onnxruntime") -> dict:
    """Compiles and runs the model and asserts every output matches the reference
    (reference_outputs) within mlcc's verify tolerance (1e-4 x max(1, max |ref|))."""
    got = compile_and_run(model, feeds, tmp_path, target=target, shapes=shapes)
    ref = reference_outputs(model, feeds, reference)
    for name, r in ref.items():
        r = np.asarray(r)
        g = got[name]
        assert g.shape == r.shape, f"{name}: shape {g.shape} != reference {r.shape}"
        assert g.dtype == r.dtype, f"{name}: dtype {g.dtype} != reference {r.dtype}"
        c = compare(name, g, r)
        assert c.max_abs_error <= c.tolerance * rtol_scale, (
            f"{name}: max abs error {c.max_abs_error} > {c.tolerance * rtol_scale}")
    return got


def check_node(op_type: str, inputs: dict[str, np.ndarray], *, tmp_path: Path,
               initializers: dict[str, np.ndarray] | None = None, n_outputs: int = 1,
               opset: int = 17, target: str = "x86", **attrs) -> dict:
    """One-node model: runtime inputs from `inputs`, constant ones from `initializers`
    (given in node input order: inputs first, then initializers, unless names say otherwise)."""
    initializers = initializers or {}
    in_names = list(inputs) + list(initializers)
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, in_names, outs, name=f"{op_type.lower()}_node", **attrs)
    model = make_model([node], inputs, outs, initializers=initializers, opset=opset)
    return check_model(model, inputs, tmp_path, target=target)


def rand(*shape, seed: int = 0, dtype=np.float32, low=None, high=None) -> np.ndarray:
    rng = np.random.default_rng(seed + sum(shape) * 7919)
    if low is not None:
        return rng.uniform(low, high, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


DTYPES = ["float32", "int64", "int32", "int8", "uint8", "bool"]


def arr(shape, dtype="float32", seed=0):
    """Random data of any dtype (ints span negative values where the type has them)."""
    rng = np.random.default_rng(seed + 31 * len(shape) + sum(shape))
    if dtype == "float32":
        return rng.standard_normal(shape).astype(np.float32)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)


def assert_refused(tmp_path: Path, node, feeds: dict[str, np.ndarray], opset: int,
                   message: str, out_type: int = TensorProto.FLOAT) -> None:
    """A one-node model (its outputs of type out_type and of the first input's rank, with
    symbolic sizes: ONNX shape inference may refuse such a node too) that mlcc must refuse at
    compile time with `message` and the node's name."""
    rank = len(next(iter(feeds.values())).shape)
    graph = helper.make_graph([node], "refused", [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, out_type, [f"{o}_{i}" for i in range(rank)])
         for o in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    path = Path(tmp_path) / "refused.onnx"
    onnx.save(model, str(path))
    with pytest.raises(MlccError, match=message) as e:
        mlcc.compile(path, Path(tmp_path) / "refused")
    assert repr(node.name) in str(e.value), str(e.value)
