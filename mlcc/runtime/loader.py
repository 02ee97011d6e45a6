"""Loading a compiled model folder into Python through cffi (ABI mode: no C compiler needed).

This is the convenience layer on top of the C API: it allocates the arena and an aligned copy
of the weights, and checks names, shapes and dtypes of the inputs before calling run. Models
built for another machine run through runner.py instead; load() picks the right one.

run() and prepare()'s call go through the optional helper _fastcall (_fastcall.c, built by
pip install where a C compiler and the Python headers are) when it is there: a call that
converts no arguments, ~20-50 ns instead of the ~230 ns of a cffi ABI call
(docs/python-api.md, "prepare() and the cost of a call"). Without it, the same calls go
through cffi.
"""
from __future__ import annotations

import functools
import json
import shutil
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np
from cffi import FFI

from ..errors import InputError, MlccError, RuntimeStatusError
from ..dimexpr import eval_dim
from ..dtypes import PACKED_BITS, pack_elements, storage_bytes, unpack_elements
from ..machine import missing_x86_features

_CDEF = """
typedef struct mlcc_context { const uint8_t *weights; uint8_t *arena; const void *model;
    void *pool; } mlcc_context;
const char *mlcc_status_string(int status);
int mlcc_threadpool_create(void **pool, int nthreads);
void mlcc_threadpool_destroy(void *pool);
int mlcc_context_set_threadpool(mlcc_context *ctx, void *pool);
int {p}_init(mlcc_context *ctx, const void *weights, size_t weights_size, void *arena,
             size_t arena_size);
int {p}_run_v(const mlcc_context *ctx, const void *const *inputs, void *const *outputs);
"""
_CDEF_EMBEDDED = "int {p}_init_embedded(mlcc_context *ctx, void *arena, size_t arena_size);\n"
# one NAME_output_shape for both: the shape at the sizes in dims (NULL: none or the largest),
# with the count the last run of ctx left along a data-dependent axis (docs/c-api.md)
_CDEF_SHAPE = ("int {p}_output_shape(const mlcc_context *ctx, const int64_t *dims, int index,"
               " int64_t *shape);\n")
_CDEF_DIMS = """
int {p}_run_dims(const mlcc_context *ctx, const int64_t *dims, const void *const *inputs,
                 void *const *outputs);
"""
_loaded_paths: set[str] = set()

try:
    from . import _fastcall
except ImportError:             # not built (no compiler or Python headers at install time)
    _fastcall = None

# prepare()'s call keeps the GIL when a run of the model takes less than this: releasing and
# taking it back costs ~30 ns per call (3-4% of the digits MLP), and another Python thread then
# waits at most that long (the interpreter itself lets a thread run 5 ms before switching).
HOLD_GIL_BELOW_S = 10e-6


def aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    """A uint8 array of nbytes whose data pointer is a multiple of align."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip:skip + nbytes]


def read_manifest(folder: Path) -> dict:
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise MlccError(f"{folder}: not an mlcc output folder (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError as exc:
        raise MlccError(f"{manifest_path}: malformed manifest ({exc})") from None
    missing = [k for k in ("name", "inputs", "outputs", "library")
               if not isinstance(manifest, dict) or k not in manifest]
    if missing:
        raise MlccError(f"{manifest_path}: malformed manifest (no {', '.join(missing)})")
    return manifest


class ModelBase:
    """What every way of running a compiled folder shares: its manifest and the checks of the
    inputs against the model's names, shapes and dtypes."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.prefix = self.manifest["name"]
        self.inputs = self.manifest["inputs"]
        self.outputs = self.manifest["outputs"]
        # the dynamic dimensions (--shape x=LO..HI): [{"name", "min", "max"}], in C order
        self.dims = self.manifest.get("dims", [])
        # what run()'s checks compare on every call, made once: (name, dtype, shape) of each
        # input, None when some input is packed or sized at run time (the full checks then)
        self._exact = None if self.dims or any(t["dtype"] in PACKED_BITS for t in self.inputs) \
            else [(t["name"], np.dtype(t["dtype"]), tuple(t["shape"])) for t in self.inputs]

    def dims_of(self, feeds: dict) -> list[int]:
        """The size of each dynamic dimension in these inputs (checked: in range, and the same
        wherever it appears)."""
        found: dict[str, tuple[int, str]] = {}     # symbol -> (size, where)
        for t in self.inputs:
            arr = feeds.get(t["name"])
            shape = getattr(arr, "shape", None)
            if shape is None or len(shape) != len(t["shape"]):
                continue         # reported by _check_inputs
            for axis, (want, have) in enumerate(zip(t["shape"], shape)):
                if isinstance(want, int):
                    continue
                where = f"{t['name']}[{axis}]"
                if want in found and found[want][0] != have:
                    raise InputError(f"dimension {self._dim_name(want)!r} is {found[want][0]} "
                                     f"in {found[want][1]} but {have} in {where}")
                found.setdefault(want, (int(have), where))
        sizes = []
        for d in self.dims:
            size, where = found.get(d["symbol"], (d["max"], ""))
            step = d.get("step", 1)
            if not d["min"] <= size <= d["max"] or size % step:
                span = f"{d['min']}..{d['max']}" + (f" (multiples of {step})" if step > 1 else "")
                raise InputError(f"dimension {d['name']!r} ({where}) is {size}, outside the "
                                 f"range {span} the model was compiled for")
            sizes.append(size)
        return sizes

    def _dim_name(self, symbol: str) -> str:
        return next((d["name"] for d in self.dims if d["symbol"] == symbol), symbol)

    def shape_at(self, t: dict, sizes: list[int]) -> list[int]:
        """The shape of input or output `t` (a manifest entry) at these sizes of the dynamic
        dimensions: its dimensions are ints or expressions over their names."""
        env = {d["symbol"]: s for d, s in zip(self.dims, sizes)}
        return [d if isinstance(d, int) else _eval_dim(d, env) for d in t["shape"]]

    def _check_inputs(self, feeds: dict, sizes: list[int] | None = None) -> list[np.ndarray]:
        if self._exact is not None and type(feeds) is dict and len(feeds) == len(self._exact):
            # the common case first: every input a C-ordered array of its exact dtype and
            # shape, used as it is (what the checks below return for it), at a fraction of
            # their cost: a small model's call is a few microseconds
            arrays = []
            for name, dtype, shape in self._exact:
                arr = feeds.get(name)
                if (type(arr) is not np.ndarray or arr.dtype != dtype or arr.shape != shape
                        or not arr.flags.c_contiguous):
                    break
                arrays.append(arr)
            else:
                return arrays
        if not isinstance(feeds, dict):
            raise InputError("inputs must be a dict of name -> array")
        names = [t["name"] for t in self.inputs]
        missing = [n for n in names if n not in feeds]
        extra = sorted(set(feeds) - set(names))
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(map(repr, missing))}")
            if extra:
                parts.append(f"unknown {', '.join(map(repr, extra))}")
            raise InputError(f"inputs do not match the model ({'; '.join(parts)}); it takes "
                             f"{', '.join(names)}")
        arrays = []
        for t in self.inputs:
            want = np.dtype(t["dtype"])
            arr = np.asarray(feeds[t["name"]])
            if isinstance(arr.dtype, np.dtypes.VoidDType) and arr.dtype.fields is None \
                    and arr.dtype.itemsize == want.itemsize and want.kind == "V":
                # bfloat16, float8, int4... come back from np.savez/np.load as raw bytes
                # ("V2", "V1"): their codes, which is what C takes
                arr = arr.view(want)
            # float64 -> float32 is accepted (numpy's default); a change of kind is not, and
            # neither is one storage type for another (both of kind "V").
            if arr.dtype != want and (arr.dtype.kind != want.kind or want.kind == "V"):
                raise InputError(f"input {t['name']!r} must be {want.name}, got {arr.dtype.name}")
            want_shape = t["shape"] if sizes is None else self.shape_at(t, sizes)
            if list(arr.shape) != list(want_shape):
                raise InputError(f"input {t['name']!r} must have shape {t['shape']}, got "
                                 f"{list(arr.shape)}")
            arr = np.ascontiguousarray(arr, dtype=want)
            # int4, uint4, int2, uint2, float4: numpy keeps one per byte, C takes them packed
            arrays.append(pack_elements(arr) if want.name in PACKED_BITS else arr)
        return arrays

    def _empty_outputs(self, shapes: list | None = None) -> list[np.ndarray]:
        """Output buffers in the C layout (packed types as their packed bytes); shapes: of a
        model with dynamic dimensions, at the actual sizes."""
        shapes = shapes or [t["shape"] for t in self.outputs]
        return [np.empty(storage_bytes(t["dtype"], int(np.prod(s, dtype=np.int64))),
                         np.uint8) if t["dtype"] in PACKED_BITS
                else np.empty(s, dtype=t["dtype"]) for t, s in zip(self.outputs, shapes)]

    def _from_c(self, outs: list[np.ndarray], shapes: list | None = None
                ) -> dict[str, np.ndarray]:
        shapes = shapes or [t["shape"] for t in self.outputs]
        return {t["name"]: unpack_elements(a, t["dtype"], s)
                if t["dtype"] in PACKED_BITS else a
                for t, a, s in zip(self.outputs, outs, shapes)}

    def dynamic_outputs(self) -> list[int]:
        """Positions of the outputs whose size depends on the data (docs/dynamic-outputs.md)."""
        return [j for j, t in enumerate(self.outputs) if "dynamic_axis" in t]

    def _trim(self, result: dict[str, np.ndarray], shapes: dict[int, list[int]]
              ) -> dict[str, np.ndarray]:
        """Cuts each output of a data-dependent size to the actual shape the run reported
        (the buffer holds the maximum along its dynamic axis): a copy of the valid part."""
        for j, dims in shapes.items():
            t = self.outputs[j]
            axis = t["dynamic_axis"]
            n = int(dims[axis])
            if not 0 <= n <= t["shape"][axis]:
                raise MlccError(f"output {t['name']!r}: the run reported {n} elements along "
                                f"axis {axis}, outside [0, {t['shape'][axis]}]")
            arr = result[t["name"]]
            result[t["name"]] = np.ascontiguousarray(arr[(slice(None),) * axis + (slice(0, n),)])
        return result

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        """Runs one inference: {input name: array} -> {output name: array}."""
        raise NotImplementedError

    def __call__(self, feeds: dict) -> dict[str, np.ndarray]:
        return self.run(feeds)


def _eval_dim(text: str, env: dict[str, int]) -> int:
    """A dimension of manifest.json over the dynamic sizes (dimexpr's form)."""
    try:
        return int(eval_dim(text, env))
    except ValueError:
        raise MlccError(f"malformed manifest: dimension {text!r}") from None


def check_cpu_features(folder: Path, manifest: dict) -> None:
    """Refuses a library whose code uses x86 features (the manifest's `cpu_features`) that
    this CPU lacks: it would stop at an illegal instruction."""
    missing = missing_x86_features(manifest.get("cpu_features") or [])
    if missing:
        raise InputError(f"{folder}: built for target {manifest.get('target', '?')}, whose "
                         f"code uses {', '.join(missing)}, which this CPU does not have (it "
                         f"would stop at an illegal instruction): run it on a CPU that has "
                         f"them, or compile for x86-native here")


class CompiledModel(ModelBase):
    """A compiled model loaded in this process. Not thread-safe: one context, one arena.
    threads > 1 runs it on a thread pool of its own (the calling thread and threads - 1
    workers, created here and stopped with the object); outputs do not depend on threads."""

    def __init__(self, folder: str | Path, threads: int = 1):
        super().__init__(folder)
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise InputError(f"threads must be a positive integer, not {threads!r}")
        library = self.folder / self.manifest["library"]
        if not library.is_file():
            raise MlccError(f"{library}: the compiled library is missing (rebuild with make)")
        check_cpu_features(self.folder, self.manifest)
        embedded = bool(self.manifest.get("embedded_weights"))
        weights_path = self.folder / "weights.bin"
        if not embedded and not weights_path.is_file():
            raise MlccError(f"{weights_path}: the weight blob is missing")
        self._ffi = FFI()
        self._ffi.cdef(_CDEF.replace("{p}", self.prefix) +
                       (_CDEF_EMBEDDED.replace("{p}", self.prefix) if embedded else "") +
                       (_CDEF_SHAPE.replace("{p}", self.prefix)
                        if self.dynamic_outputs() or self.dims else "") +
                       (_CDEF_DIMS.replace("{p}", self.prefix) if self.dims else ""))
        self._lib = self._ffi.dlopen(self._unique_path(library))
        self._arena = aligned_empty(int(self.manifest["arena_size"]))
        self._ctx = self._ffi.new("mlcc_context *")
        if embedded:
            init = getattr(self._lib, f"{self.prefix}_init_embedded")
            status = init(self._ctx, self._ptr(self._arena), self._arena.nbytes)
        else:
            # read straight into the aligned buffer: one copy of the weights in memory, not two
            size = weights_path.stat().st_size
            self._weights = aligned_empty(size)
            with open(weights_path, "rb") as f:
                if f.readinto(memoryview(self._weights)) != size:
                    raise MlccError(f"{weights_path}: the weight blob changed while read")
            init = getattr(self._lib, f"{self.prefix}_init")
            status = init(self._ctx, self._ptr(self._weights), self._weights.nbytes,
                          self._ptr(self._arena), self._arena.nbytes)
        if status != 0:
            raise RuntimeStatusError(f"{self.folder}: init failed: {self.status_string(status)}")
        self.threads = threads
        if threads > 1:
            pool = self._ffi.new("void **")
            status = self._lib.mlcc_threadpool_create(pool, threads)
            if status != 0:
                raise RuntimeStatusError(f"{self.folder}: no pool of {threads} threads: "
                                         f"{self.status_string(status)}")
            # the finalizer holds the library and the pool; the context dies with self first
            weakref.finalize(self, self._lib.mlcc_threadpool_destroy, pool[0])
            self._lib.mlcc_context_set_threadpool(self._ctx, pool[0])
        self._run = getattr(self._lib, f"{self.prefix}_run_v")
        # run()'s pointer arrays, filled at each call; their call releases the GIL
        self._in_ptrs = self._ffi.new("void *[]", max(len(self.inputs), 1))
        self._out_ptrs = self._ffi.new("void *[]", max(len(self.outputs), 1))
        self._run_call = self._call(self._in_ptrs, self._out_ptrs, keep=None)
        # run()'s outputs when none is packed or of a data-dependent size (the common case):
        # (name, dtype, shape), allocated and returned as they are
        self._plain = None if self.dims or self.dynamic_outputs() or any(
            t["dtype"] in PACKED_BITS for t in self.outputs) else [
            (t["name"], np.dtype(t["dtype"]), tuple(t["shape"])) for t in self.outputs]

    def _address(self, cdata) -> int:
        return int(self._ffi.cast("uintptr_t", cdata))

    def _call(self, in_ptrs, out_ptrs, keep):
        """A call of run_v(ctx, in_ptrs, out_ptrs) returning its status, holding `keep`: the
        fast helper's when it is built, else a cffi call (ABI mode) bound with partial."""
        if _fastcall is not None:
            return _fastcall.Call(self._address(self._run), self._address(self._ctx),
                                  self._address(in_ptrs), self._address(out_ptrs),
                                  keep=(keep, in_ptrs, out_ptrs)).run
        call = functools.partial(self._run, self._ctx, in_ptrs, out_ptrs)
        call.keep = keep
        return call

    @staticmethod
    def _unique_path(library: Path) -> str:
        # dlopen returns the already-loaded library for a path it has seen: after a recompile
        # into the same folder, load a private copy so the new code is what runs.
        path = str(library.resolve())
        if path in _loaded_paths:
            tmp = Path(tempfile.mkdtemp(prefix="mlcc-lib-")) / library.name
            shutil.copy2(library, tmp)
            return str(tmp)
        _loaded_paths.add(path)
        return path

    def _ptr(self, arr: np.ndarray):
        # a char[] over the array's buffer: its data pointer, 10x faster than arr.ctypes.data
        return self._ffi.from_buffer(arr)

    def status_string(self, status: int) -> str:
        return self._ffi.string(self._lib.mlcc_status_string(status)).decode()

    def run_dims(self, sizes: list[int], arrays: list[np.ndarray],
                 outs: list[np.ndarray]) -> int:
        """NAME_run_dims on checked buffers: the C status (for tests of the C checks)."""
        dims = self._ffi.new("int64_t[]", [int(s) for s in sizes] or [0])
        ins = self._ffi.new("void *[]", [self._ptr(a) for a in arrays] or [self._ffi.NULL])
        ous = self._ffi.new("void *[]", [self._ptr(a) for a in outs] or [self._ffi.NULL])
        return getattr(self._lib, f"{self.prefix}_run_dims")(self._ctx, dims, ins, ous)

    def _run_dynamic(self, feeds: dict) -> dict[str, np.ndarray]:
        sizes = self.dims_of(feeds)
        arrays = self._check_inputs(feeds, sizes)
        shapes = self.output_shapes(sizes)
        outs = self._empty_outputs(shapes)
        status = self.run_dims(sizes, arrays, outs)
        if status != 0:
            raise RuntimeStatusError(f"run failed: {self.status_string(status)}")
        return self._from_c(outs, shapes)

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        if self.dims:
            return self._run_dynamic(feeds)
        arrays = self._check_inputs(feeds)
        plain = self._plain
        outs = self._empty_outputs() if plain is None else \
            [np.empty(shape, dtype) for _, dtype, shape in plain]
        ptr, in_ptrs, out_ptrs = self._ffi.from_buffer, self._in_ptrs, self._out_ptrs
        for i, a in enumerate(arrays):
            in_ptrs[i] = ptr(a)
        for i, a in enumerate(outs):
            out_ptrs[i] = ptr(a)
        status = self._run_call()
        if status != 0:
            raise RuntimeStatusError(f"run failed: {self.status_string(status)}")
        if plain is not None:
            return {name: a for (name, _, _), a in zip(plain, outs)}
        return self._trim(self._from_c(outs), self.output_shapes())

    def output_shapes(self, sizes: list[int] | None = None):
        """NAME_output_shape. With `sizes` (a model compiled for a range of sizes: those of its
        dynamic dimensions): every output's shape at those sizes, as a list. Without: the
        actual shapes, after the last run, of the outputs whose size depends on the data
        ({output position: shape})."""
        fn = getattr(self._lib, f"{self.prefix}_output_shape", None) if (
            sizes is not None or self.dynamic_outputs()) else None
        dims = (self._ffi.new("int64_t[]", [int(s) for s in sizes] or [0])
                if sizes is not None else self._ffi.NULL)
        shapes = {}
        for j in (range(len(self.outputs)) if sizes is not None else self.dynamic_outputs()):
            shape = self._ffi.new("int64_t[8]")
            status = fn(self._ctx, dims, j, shape)
            if status != 0:
                raise RuntimeStatusError(f"output_shape failed: {self.status_string(status)}")
            shapes[j] = [int(shape[d]) for d in range(len(self.outputs[j]["shape"]))]
        return list(shapes.values()) if sizes is not None else shapes

    def prepare(self, feeds: dict) -> tuple:
        """(call, outputs) for timing: call() runs the model on a checked copy of `feeds` into
        the preallocated `outputs` dict and returns the C status, with no per-call checks,
        allocation or conversion: the fast helper's call (it keeps the GIL when a run takes
        under HOLD_GIL_BELOW_S: prepare runs the model up to 3 times to see), else one cffi
        call. call keeps the model, the input copies and the outputs alive. Outputs of a
        data-dependent size stay padded to their maximum (output_shapes() gives the sizes)."""
        packed = [t["name"] for t in self.outputs if t["dtype"] in PACKED_BITS]
        if self.dims:
            return self._prepare_dynamic(feeds)
        if packed:
            raise InputError(f"prepare() returns the output arrays the C code writes, and "
                             f"outputs {', '.join(map(repr, packed))} are of a packed type "
                             f"(several elements per byte); use run()")
        arrays = self._check_inputs(feeds)
        outs = [np.empty(t["shape"], dtype=t["dtype"]) for t in self.outputs]
        in_ptrs = self._ffi.new("void *[]", [self._ptr(a) for a in arrays] or [self._ffi.NULL])
        out_ptrs = self._ffi.new("void *[]", [self._ptr(a) for a in outs] or [self._ffi.NULL])
        # the model (its arena, weights and thread pool), the input copies and the output
        # arrays live as long as the call (a caller may drop the model and the outputs dict
        # and keep timing)
        call = self._call(in_ptrs, out_ptrs, keep=(self, arrays, outs))
        if _fastcall is not None and _is_short(call):
            call.__self__.release_gil = False
        return call, {t["name"]: a for t, a in zip(self.outputs, outs)}

    def _prepare_dynamic(self, feeds: dict) -> tuple:
        """prepare() of a model with dynamic dimensions: a cffi call of NAME_run_dims at the
        sizes of `feeds`."""
        sizes = self.dims_of(feeds)
        arrays = self._check_inputs(feeds, sizes)
        outs = self._empty_outputs(self.output_shapes(sizes))
        dims = self._ffi.new("int64_t[]", sizes)
        in_ptrs = self._ffi.new("void *[]", [self._ptr(a) for a in arrays] or [self._ffi.NULL])
        out_ptrs = self._ffi.new("void *[]", [self._ptr(a) for a in outs] or [self._ffi.NULL])
        call = functools.partial(getattr(self._lib, f"{self.prefix}_run_dims"), self._ctx, dims,
                                 in_ptrs, out_ptrs)
        call.keep = (self, arrays, outs)
        return call, {t["name"]: a for t, a in zip(self.outputs, outs)}


def _is_short(call) -> bool:
    """Whether one of up to 3 calls takes less than HOLD_GIL_BELOW_S (the first may be slow:
    cold caches); stops at once after a call 100 times that long."""
    for _ in range(3):
        t0 = time.perf_counter()
        call()
        t = time.perf_counter() - t0
        if t < HOLD_GIL_BELOW_S:
            return True
        if t > 100 * HOLD_GIL_BELOW_S:
            return False
    return False
