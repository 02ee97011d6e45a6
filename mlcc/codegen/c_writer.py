"""Prints a planned Program as model.h and model.c, and picks the runtime sources it needs.

The generated C has no mutable file-scope state: kernel parameters are static const structs,
tensors are offsets into the caller's arena or weight blob, and the context is the caller's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import resources
from ..version import __version__
from ..ir import Enum, KernelCall, LoopScope, Program, SizeClass
from ..ir.symbolic import DimVar, FloatQuotient, SymInt, dim_vars, is_symbolic, upper
from ..ops.common import IO_DTYPES
from .memory import MemoryPlan
from .c_format import INDENT, WIDTH, call, comment, define, initializer, pack
from .names import MAX_LENGTH, NameTable

# model.c and weights.c are the library's own sources: mlcc_runtime.h exports their API with
# visibility that their own calls cannot be diverted from (MLCC_EXPORT)
LIBRARY_DEFINE = "#define MLCC_BUILDING_LIBRARY 1"


C_TYPES = {"float32": "float", "uint8": "uint8_t", "int8": "int8_t", "int32": "int32_t",
           "int64": "int64_t", "bool": "uint8_t", "int16": "int16_t", "uint16": "uint16_t",
           "uint32": "uint32_t", "uint64": "uint64_t", "float64": "double",
           "float16": "uint16_t",     # float16: IEEE binary16 bits
           "bfloat16": "uint16_t", "float8_e4m3fn": "uint8_t", "float8_e4m3fnuz": "uint8_t",
           "float8_e5m2": "uint8_t", "float8_e5m2fnuz": "uint8_t", "float8_e8m0fnu": "uint8_t",
           # packed, several per byte (mlcc_runtime.h)
           "float4_e2m1fn": "uint8_t", "int4": "uint8_t", "uint4": "uint8_t", "int2": "uint8_t",
           "uint2": "uint8_t"}


@dataclass
class ModelSource:
    header: str                    # model.h
    source: str                    # model.c
    runtime_files: list[str]       # paths under runtime_c/ the model needs
    banner: str = ""


def c_float(x: float) -> str:
    v = np.float32(x)
    if np.isnan(v):
        return "NAN"
    if np.isinf(v):
        return "HUGE_VALF" if v > 0 else "-HUGE_VALF"
    if v != 0 and (abs(v) >= 1e7 or abs(v) < 1e-4):
        text = np.format_float_scientific(v, unique=True, trim="0")
    else:
        text = np.format_float_positional(v, unique=True, trim="0")
    if "." not in text and "e" not in text:
        text += ".0"
    return text + "f"


def c_value(v) -> str:
    if isinstance(v, SymInt):       # computed in the run function from the actual sizes
        return v.c_expr()
    if isinstance(v, FloatQuotient):
        return v.c_expr(c_float)
    if isinstance(v, Enum):
        return v.name
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return c_float(float(v))
    if isinstance(v, dict):
        return "{" + ", ".join(f".{k} = {c_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "{" + ", ".join(c_value(x) for x in v) + "}"
    raise TypeError(f"cannot print {v!r} as C")


def kernel_index() -> tuple[dict[str, str], dict[str, set[str]]]:
    """Which runtime_c/kernels file defines each kernel function, and which other kernel
    files each one needs (from its #includes): derived from the sources, never listed by hand."""
    kernels = resources.runtime_c() / "kernels"
    defined: dict[str, str] = {}
    deps: dict[str, set[str]] = {}
    stems = {p.stem for p in kernels.glob("*.c")}
    for path in sorted(kernels.glob("*.[ch]")):
        text = path.read_text()
        includes = set(re.findall(r'#include "(\w+)\.h"', text))
        deps.setdefault(path.stem, set()).update(i for i in includes if i != path.stem)
        if path.suffix == ".c":
            for name in re.findall(r"^(?!static)[A-Za-z_][\w \*]*?\b(mlcc_\w+)\s*\([^;]*?\)\s*\{",
                                   text, flags=re.M | re.S):
                defined[name] = path.stem
    return defined, deps


def needed_runtime(calls: list[KernelCall]) -> list[str]:
    defined, deps = kernel_index()
    todo = {defined[c.kernel] for c in calls if c.kernel in defined}
    missing = sorted({c.kernel for c in calls if c.kernel not in defined})
    if missing:
        raise RuntimeError(f"no runtime_c/kernels source defines {', '.join(missing)}")
    stems: set[str] = set()
    while todo:
        s = todo.pop()
        if s in stems:
            continue
        stems.add(s)
        todo.update(deps.get(s, set()))
    kernels = resources.runtime_c() / "kernels"
    files = ["include/mlcc_runtime.h", "src/mlcc_internal.h", "src/mlcc_runtime.c",
             "src/mlcc_threadpool.c"]
    for s in sorted(stems):
        for ext in (".h", ".c"):
            if (kernels / f"{s}{ext}").exists():
                files.append(f"kernels/{s}{ext}")
    return files


def model_dims(g) -> list[DimVar]:
    """The dynamic dimensions of a model (--shape ranges), in the order of the C dims[]."""
    return dim_vars([g.values[n].shape for n in g.inputs])


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _banner(source_name: str, sha: str, target_name: str, command: list[str]) -> str:
    lines = [f"/* Generated by mlcc {__version__} from {_c_comment(source_name)} "
             f"(sha256 {sha[:16] or 'unknown'}), target {_c_comment(target_name)}."]
    if command:
        words = [_c_comment(w) for w in command]
        lines.append(" * Compiled with:")
        lines += pack(words, " *     ", " *         ", "", sep="")
    lines.append(" * Do not edit: recompile the model instead. */")
    return "\n".join(lines) + "\n"


@dataclass
class _Symbols:
    """Every identifier model.c defines, from one table (no two collide)."""
    inputs: list[str]                   # parameter names of the run function
    outputs: list[str]
    weights: dict[str, str]             # constant -> W_ name of its offset in the blob
    arena: dict[str, str]               # arena tensor or view of one -> A_ name of its offset
    scratch: dict[int, str]             # call index -> S_ name of its scratch's offset
    params: list[str | None]            # call index -> p_ name of its parameter struct


def _symbols(prog: Program, plan: MemoryPlan, weight_offsets: dict[str, int],
             prefix: str) -> _Symbols:
    g = prog.graph
    ids = NameTable({"model_info", "input_info", "output_info", "ARENA", "WEIGHT", "dims",
                     "max_dims", "check_dims"} |
                    {f"{prefix}_{f}" for f in ("run", "run_v", "init", "model_info",
                                               "embedded_weights", "init_embedded",
                                               "run_dims", "output_shape", "tensor_shape")})
    inputs = [ids.take(n, "input") for n in g.inputs]
    outputs = [ids.take(n, "output") for n in g.outputs]
    weights = {n: ids.take(n, prefix="W_", limit=MAX_LENGTH) for n in weight_offsets}
    arena: dict[str, str] = {}
    scratch: dict[int, str] = {}
    params: list[str | None] = []
    for t, kc in enumerate(prog.calls):
        label = kc.nodes[0] if kc.nodes else kc.kernel
        for a in kc.args:
            root = prog.root(a) if a else ""
            st = plan.storage.get(root)
            if st is None or st.kind != "arena":
                continue
            for n in (root, a):           # a view (a reshape) gets a name of its own
                if n not in arena:
                    arena[n] = ids.take(n, prefix="A_", limit=MAX_LENGTH)
        if kc.scratch_bytes:
            scratch[t] = ids.take(label, prefix="S_", limit=MAX_LENGTH)
    for kc in prog.calls:
        label = kc.nodes[0] if kc.nodes else kc.kernel
        params.append(None if kc.params_type is None else
                      ids.take(label, prefix="p_", limit=MAX_LENGTH))
    return _Symbols(inputs, outputs, weights, arena, scratch, params)


def write_c(prog: Program, plan: MemoryPlan, weight_offsets: dict[str, int], *, prefix: str,
            model_id: int, weights_size: int, source_name: str, target_name: str,
            embedded: bool = False, command: list[str] | None = None) -> ModelSource:
    """model.h and model.c. command: the mlcc command line that compiled the model (recorded
    in both files' banner comment; it must not hold absolute paths, to stay reproducible)."""
    g = prog.graph
    P = prefix.upper()
    sym = _symbols(prog, plan, weight_offsets, prefix)
    dims = model_dims(g)
    banner = _banner(source_name, g.source_sha256, target_name, command or [])

    def ctype(name: str) -> str:
        return C_TYPES[g.values[name].dtype]

    # ---------------------------------------------------------------- model.h
    h = [banner, f"#ifndef MLCC_MODEL_{P}_H", f"#define MLCC_MODEL_{P}_H", "",
         '#include "mlcc_runtime.h"', "", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
         f"/* Bytes of working memory a context needs (caller-owned, {P}_ARENA_ALIGN-aligned). */",
         f"#define {P}_ARENA_SIZE {plan.arena_size}u",
         f"#define {P}_ARENA_ALIGN 64u",
         "/* Size of weights.bin, which must be MLCC_WEIGHTS_ALIGN-aligned in memory. */",
         f"#define {P}_WEIGHTS_SIZE {weights_size}u",
         f"#define {P}_NUM_INPUTS {len(g.inputs)}",
         f"#define {P}_NUM_OUTPUTS {len(g.outputs)}", ""]
    if dims:
        h += [f"/* Dynamic dimensions: the sizes {prefix}_run takes in dims[], each in its "
              f"range. */", f"#define {P}_NUM_DIMS {len(dims)}"]
        for v in dims:
            h += define(f"{P}_DIM{v.index}_MIN", f"{v.lo}",
                        _c_comment(f"dims[{v.index}]: {v.name}"))
            h += define(f"{P}_DIM{v.index}_MAX", f"{v.hi}")
            if v.step > 1:
                h += define(f"{P}_DIM{v.index}_STEP", f"{v.step}",
                            _c_comment("the size is a multiple of it"))
        h += ["/* Sizes below are at the largest dynamic sizes. */", ""]
    macro_names = NameTable()
    for kind, tensors in (("INPUT", g.inputs), ("OUTPUT", g.outputs)):
        for i, name in enumerate(tensors):
            v = g.values[name]
            m = macro_names.take(f"{P}_{kind}_{name}".upper())
            h += comment(_c_comment(f"{kind.lower()} {i} \"{name}\": {v.dtype} "
                                    f"{_dims(v.shape)}"))
            h += define(f"{m}_SIZE", f"{upper(v.numel)}u", "elements")
    h += ["",
          "/* Static description of the model (names, types, shapes, sizes). */",
          f"MLCC_EXPORT const mlcc_model_info *{prefix}_model_info(void);", "",
          "/* Validates the weights (size, checksum, model) and the arena (size, alignment) and",
          " * fills ctx. Allocates nothing; weights and arena must outlive ctx. */"]
    # (pairs stay on one line: a buffer and its size)
    init_args = ["mlcc_context *ctx", "const void *weights, size_t weights_size",
                 "void *arena, size_t arena_size"]
    h += call(f"MLCC_EXPORT int {prefix}_init", init_args)
    h += ["",
          "/* Runs one inference. Inputs are read, outputs written in full; none may overlap the",
          " * arena. One thread at a time per context." +
          (" */" if not dims else " dims[] holds the size of each dynamic")]
    if dims:
        h.append(" * dimension; one outside its range returns MLCC_ERR_DIMS_OUT_OF_RANGE. */")
    sig = ["const mlcc_context *ctx"] + (["const int64_t *dims"] if dims else [])
    sig += [f"const {ctype(n)} *{p}" for n, p in zip(g.inputs, sym.inputs)]
    sig += [f"{ctype(n)} *{p}" for n, p in zip(g.outputs, sym.outputs)]
    h += call(f"MLCC_EXPORT int {prefix}_run", sig)
    run_v_args = ["const mlcc_context *ctx", "const void *const *inputs",
                  "void *const *outputs"]
    run_dims_args = run_v_args[:1] + ["const int64_t *dims"] + run_v_args[1:]
    out_shape_args = OUTPUT_SHAPE_ARGS
    h += ["", "/* The same, with inputs and outputs as arrays in model order (for generic callers)"
          + (". */" if not dims else ",")]
    if dims:
        h.append(" * at the largest sizes. */")
    h += call(f"MLCC_EXPORT int {prefix}_run_v", run_v_args)
    h.append("")
    dynamic = [(j, name) for j, name in enumerate(g.outputs) if g.values[name].dyn]
    if dims:
        h += ["/* run with inputs and outputs as arrays, at the sizes in dims[]. */"]
        h += call(f"MLCC_EXPORT int {prefix}_run_dims", run_dims_args)
        h.append("")
    if dims or dynamic:
        what = []
        if dims:
            what.append("The shape of output `index` at the sizes in dims[] (NULL: the "
                        "largest, those of _run_v), written to shape[0..rank-1]; ctx may be "
                        "NULL.")
        if dynamic:
            what.append(
                "Outputs whose size depends on the data: " + "; ".join(
                    f"{j} \"{name}\" along axis {g.values[name].dyn[0]}"
                    for j, name in dynamic) +
                ". Their buffers hold the maximum (the _SIZE above); after a successful run of "
                "ctx, this fills shape[0..rank-1] with output `index`'s actual shape: the valid "
                "elements are those whose index along that axis is below shape[axis] (dims may "
                "be NULL).")
        h += comment(_c_comment(" ".join(what) + " docs/c-api.md"), "")
        h += call(f"MLCC_EXPORT int {prefix}_output_shape", out_shape_args)
        h.append("")
    if dims:
        h += ["/* The same for input (is_output 0) or output `index`. */"]
        h += call(f"MLCC_EXPORT int {prefix}_tensor_shape", TENSOR_SHAPE_ARGS)
        h.append("")
    if embedded:
        h += ["/* The weights compiled into the library (weights.c): no file to load. */",
              f"MLCC_EXPORT const void *{prefix}_embedded_weights(void);"]
        h += call(f"MLCC_EXPORT int {prefix}_init_embedded",
                  ["mlcc_context *ctx", "void *arena, size_t arena_size"])
        h.append("")
    h += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif /* MLCC_MODEL_{P}_H */", ""]

    # ---------------------------------------------------------------- model.c
    runtime_files = needed_runtime(prog.calls)
    kernel_headers = [Path(f).name for f in runtime_files
                      if f.startswith("kernels/") and f.endswith(".h") and
                      not f.endswith("mlcc_kernel.h")]
    c = [banner, LIBRARY_DEFINE, '#include "model.h"', ""]
    c += [f'#include "{hdr}"' for hdr in kernel_headers]
    c += ["", "/* Tensors are offsets into the caller's arena and weight blob. */",
          "#define ARENA(offset) ((void *)(ctx->arena + (offset)))",
          "#define WEIGHT(offset) ((const void *)(ctx->weights + (offset)))", ""]
    c += _offset_defines(prog, plan, weight_offsets, sym)

    def info_rows(tensors):
        rows = []
        for name in tensors:
            v = g.values[name]
            shape = [upper(d) for d in v.shape] + [0] * (8 - len(v.shape))
            rows += initializer("", [f'"{_c_string(name)}"', IO_DTYPES[v.dtype],
                                     len(v.shape), shape, f"{upper(v.nbytes)}u"],
                                _leaf, indent=INDENT, tail=",")
        return rows or [f"{INDENT}{{0}}"]

    c += ["static const mlcc_tensor_info input_info[] = {"] + info_rows(g.inputs) + ["};"]
    c += ["static const mlcc_tensor_info output_info[] = {"] + info_rows(g.outputs) + ["};"]
    if dims:
        c += _dims_functions(g, dims, prefix)
    c += ["static const mlcc_model_info model_info = {",
          f"    \"{prefix}\", \"{__version__}\", 0x{model_id:016X}ull,",
          f"    {P}_ARENA_SIZE, {P}_ARENA_ALIGN, {P}_WEIGHTS_SIZE,",
          f"    {P}_NUM_INPUTS, {P}_NUM_OUTPUTS, input_info, output_info", "};", ""]

    def counted(params) -> bool:    # computed from data-dependent counts: just before the call
        return any(v.count for v in dim_vars(params))

    def count_entry(v: DimVar) -> str:
        return f"*(const int64_t *){pointer(prog.counts[v.count])}" if v.count else \
            f"dims[{v.index}]"

    def leaf(v) -> str:
        return v.c_expr(count_entry) if isinstance(v, SymInt) else _leaf(v)

    for call_, pn in zip(prog.calls, sym.params):
        if pn is not None and not is_symbolic(call_.params):
            c += initializer(f"static const {call_.params_type} {pn} = ", call_.params, _leaf)
    c.append("")

    c += [f"const mlcc_model_info *{prefix}_model_info(void) {{ return &model_info; }}", ""]
    c += call(f"int {prefix}_init", init_args, " {")
    c += ["    return mlcc_context_init(ctx, &model_info, weights, weights_size, arena, "
          "arena_size);", "}", ""]

    def pointer(name: str) -> str:
        if not name:
            return "NULL"
        root = prog.root(name)
        if g.values[root].is_const:
            return f"WEIGHT({sym.weights[root]})"
        st = plan.storage[root]
        if st.kind != "arena" and prog.is_slice(name):
            raise RuntimeError(f"slice {name!r} of the caller's tensor {root!r}: slices are "
                               f"only made of arena tensors (ops/movement.py Concat)")
        if st.kind == "input":
            return sym.inputs[st.index]
        if st.kind == "output":
            return sym.outputs[st.index]
        return f"ARENA({sym.arena[name]})"

    c += call(f"int {prefix}_run", sig, " {")
    needs_status = any(call_.returns_status for call_ in prog.calls)
    if needs_status:
        c.append("    int status;")
    c.append("    if (ctx == NULL || ctx->model != &model_info) return MLCC_ERR_NOT_INITIALIZED;")
    ptr_params = sym.inputs + sym.outputs
    if ptr_params:
        checks = [f"{p} == NULL" for p in ptr_params]
        one = f"    if ({' || '.join(checks)}) return MLCC_ERR_NULL_ARGUMENT;"
        if len(one) <= WIDTH:
            c.append(one)
        else:
            c += pack(checks, "    if (", "        ", ") {", sep=" ||")
            c += ["        return MLCC_ERR_NULL_ARGUMENT;", "    }"]
    if dims:
        c += ["    if (dims == NULL) return MLCC_ERR_NULL_ARGUMENT;",
              "    if (!check_dims(dims)) return MLCC_ERR_DIMS_OUT_OF_RANGE;"]
        # the parameters that depend on the sizes, computed from them at each run
        for call_, pn in zip(prog.calls, sym.params):
            if pn is not None and is_symbolic(call_.params) and not counted(call_.params):
                c += initializer(f"const {call_.params_type} {pn} = ", call_.params, _leaf,
                                 indent=INDENT)
    open_blocks: list = []          # the if-blocks (run-time If) and loops around the calls
    ind = INDENT
    group_of = {t: (lo, hi) for lo, hi in prog.groups for t in range(lo, hi + 1)}
    for t, call_ in enumerate(prog.calls):
        blocks = _blocks(call_.guard)
        if blocks != open_blocks:
            keep = 0
            while (keep < min(len(blocks), len(open_blocks))
                   and blocks[keep] == open_blocks[keep]):
                keep += 1
            for depth in range(len(open_blocks) - 1, keep - 1, -1):
                c.append(INDENT * (depth + 1) + "}")
            for depth in range(keep, len(blocks)):
                c += _open_block(blocks[depth], INDENT * (depth + 1), pointer,
                                 sum(isinstance(b, LoopScope) for b in blocks[:depth]))
            open_blocks = blocks
            ind = INDENT * (len(blocks) + 1)
        group = group_of.get(t)
        if group and group[0] == t:     # a loop group (codegen/groups.py): no guard, no block
            nodes = ", ".join(n for u in range(group[0], group[1] + 1)
                              for n in prog.calls[u].nodes[:1])
            c += comment(_c_comment(f"{nodes}: independent; their last parallel loops run as "
                                    f"one (a loop group)"), ind)
            c += [f"{ind}{{", f"{ind}{INDENT}mlcc_loop_group group;",
                  f"{ind}{INDENT}mlcc_threadpool *gpool = mlcc_loop_group_open(&group, "
                  f"ctx->pool);"]
            ind += INDENT
        reads = [a for a in call_.args if a and a not in call_.writes and
                 not g.values[prog.root(a)].is_const]
        ins_txt = ", ".join(f"{a}{_dims(g.values[a].shape)}" for a in reads) or "constants"
        outs_txt = ", ".join(f"{a}{_dims(g.values[a].shape)}" for a in call_.writes)
        label = ", ".join(call_.nodes) or "output copy"
        c += comment(_c_comment(f"{label} ({call_.op}): {ins_txt} -> {outs_txt}"), ind)
        if sym.params[t] is not None and counted(call_.params):
            c += initializer(f"const {call_.params_type} {sym.params[t]} = ", call_.params,
                             leaf, indent=ind)
        args = ([f"&{sym.params[t]}"] if sym.params[t] else []) + \
            [pointer(a) for a in call_.args]
        if call_.scratch_bytes is not None:
            args.append(f"ARENA({sym.scratch[t]})" if call_.scratch_bytes else "NULL")
        if call_.pool:
            args.append("gpool" if group else "ctx->pool")
        if call_.returns_status:
            c += call(f"status = {call_.kernel}", args, indent=ind)
            c.append(f"{ind}if (status != MLCC_OK) return status;")
        else:
            c += call(call_.kernel, args, indent=ind)
        if group and group[1] == t:
            c.append(f"{ind}mlcc_loop_group_run(&group);")
            ind = ind[:-len(INDENT)]
            c.append(f"{ind}}}")
    for depth in range(len(open_blocks) - 1, -1, -1):
        c.append(INDENT * (depth + 1) + "}")
    c += ["    return MLCC_OK;", "}", ""]

    if dims or dynamic:
        c += _output_shape(prog, prefix, dims, dynamic, sym)
    c += call(f"int {prefix}_run_v", run_v_args, " {")
    c.append("    if (inputs == NULL || outputs == NULL) return MLCC_ERR_NULL_ARGUMENT;" if
             (g.inputs and g.outputs) else "    (void)inputs; (void)outputs;")
    call_args = ["ctx"] + [f"(const {ctype(n)} *)inputs[{i}]" for i, n in enumerate(g.inputs)] \
        + [f"({ctype(n)} *)outputs[{i}]" for i, n in enumerate(g.outputs)]
    if dims:
        c += call(f"return {prefix}_run_dims", ["ctx", "max_dims", "inputs", "outputs"],
                  indent=INDENT)
        c += ["}", ""]
        c += call(f"int {prefix}_run_dims", run_dims_args, " {")
        c.append("    if (inputs == NULL || outputs == NULL) return MLCC_ERR_NULL_ARGUMENT;" if
                 (g.inputs and g.outputs) else "    (void)inputs; (void)outputs;")
        call_args.insert(1, "dims")
    c += call(f"return {prefix}_run", call_args, indent=INDENT)
    c += ["}", ""]
    return ModelSource("\n".join(h), "\n".join(c), runtime_files, banner)


def _blocks(guard: tuple) -> list:
    """A call's guard as the C blocks around it, outermost first: a LoopScope is a loop, a
    SizeClass an `if` on the sizes, and each run of (condition, truth) pairs between loops
    one `if`."""
    blocks: list = []
    for e in guard:
        if isinstance(e, (LoopScope, SizeClass)):
            blocks.append(e)
        elif blocks and isinstance(blocks[-1], tuple):
            blocks[-1] += (e,)
        else:
            blocks.append((e,))
    return blocks


def _open_block(block, ind: str, pointer, depth: int) -> list[str]:
    """The opening lines of an `if` on conditions, or of a run-time loop's `for` (its counter
    i<depth>, the number of loops around it), at indentation `ind`."""
    if isinstance(block, SizeClass):
        return [f"{ind}if ({block.c_expr()}) {{"]
    if not isinstance(block, LoopScope):
        conds = [f"{'' if want else '!'}*(const uint8_t *){pointer(v)}" for v, want in block]
        return pack(conds, f"{ind}if (", f"{ind}    ", ") {", sep=" &&")
    i, inner = f"i{depth}", ind + INDENT
    if block.trip is None:
        bound, what = "", "until its condition is false"
    elif isinstance(block.trip, str):
        bound = f"{i} < *(const int64_t *){pointer(block.trip)}"
        what = f"{block.trip} times"
    else:
        bound, what = f"{i} < {block.trip}", f"{block.trip} times"
    if block.cond and block.trip is not None:
        what += " at most, while its condition holds"
    if block.limit is not None:
        what += f"; more than {block.limit} iterations fail"
    lines = comment(_c_comment(f"{block.name}: {what}"), ind)
    lines.append(f"{ind}for (int64_t {i} = 0; {bound}; {i}++) {{")
    if block.cond:
        lines.append(f"{inner}if (!*(const uint8_t *){pointer(block.cond)}) break;")
    if block.limit is not None:
        lines.append(f"{inner}if ({i} >= {block.limit}) return MLCC_ERR_LOOP_LIMIT;")
    if block.iteration:
        lines.append(f"{inner}*(int64_t *){pointer(block.iteration)} = {i};")
    return lines


def _output_shape(prog: Program, prefix: str, dims: list, dynamic: list[tuple[int, str]],
                  sym: _Symbols) -> list[str]:
    """NAME_output_shape: the shape of an output at the sizes in dims[] (a model compiled for
    a range of sizes, through NAME_tensor_shape) or its static shape, with the count the run
    of ctx left in the arena along its data-dependent axis (an output whose size depends on
    the data). One function for both (docs/c-api.md)."""
    g = prog.graph
    c = call(f"int {prefix}_output_shape", OUTPUT_SHAPE_ARGS, " {")
    if dynamic:
        c += ["    int d;",
              "    if (ctx == NULL || ctx->model != &model_info) "
              "return MLCC_ERR_NOT_INITIALIZED;"]
    else:
        c.append("    (void)ctx;")
    c += ["    if (shape == NULL) return MLCC_ERR_NULL_ARGUMENT;",
          f"    if (index < 0 || index >= {prefix.upper()}_NUM_OUTPUTS) "
          f"return MLCC_ERR_INDEX_OUT_OF_RANGE;"]
    if dims:
        c += ["    if (dims == NULL) dims = max_dims;     /* the sizes of run_v */",
              f"    return {prefix}_tensor_shape(dims, 1, index, shape);"]
        return c + ["}", ""]
    c += ["    (void)dims;",
          "    for (d = 0; d < output_info[index].rank; d++) shape[d] = "
          "output_info[index].dims[d];"]
    for j, name in dynamic:
        axis, key = g.values[name].dyn
        c.append(f"    if (index == {j}) shape[{axis}] = "
                 f"*(const int64_t *)ARENA({sym.arena[prog.counts[key]]});")
    return c + ["    return MLCC_OK;", "}", ""]


OUTPUT_SHAPE_ARGS = ["const mlcc_context *ctx", "const int64_t *dims", "int index",
                     "int64_t *shape"]
TENSOR_SHAPE_ARGS = ["const int64_t *dims", "int is_output", "int index", "int64_t *shape"]


def _dims_functions(g, dims: list[DimVar], prefix: str) -> list[str]:
    """The largest sizes, check_dims (every size in its range) and NAME_tensor_shape (the shape
    of an input or output at given sizes)."""
    P = prefix.upper()
    c = [f"static const int64_t max_dims[{len(dims)}] = "
          f"{{{', '.join(str(v.hi) for v in dims)}}};", "",
          "static int check_dims(const int64_t *dims) {"]
    conds = [f"dims[{v.index}] >= {v.lo} && dims[{v.index}] <= {v.hi}" +
             (f" && dims[{v.index}] % {v.step} == 0" if v.step > 1 else "") for v in dims]
    c += pack(conds, "    return ", "        ", ";", sep=" &&")
    c += ["}", ""]
    c += call(f"int {prefix}_tensor_shape", TENSOR_SHAPE_ARGS, " {")
    c += ["    if (dims == NULL || shape == NULL) return MLCC_ERR_NULL_ARGUMENT;",
          "    if (!check_dims(dims)) return MLCC_ERR_DIMS_OUT_OF_RANGE;",
          f"    if (index < 0 || index >= (is_output ? {P}_NUM_OUTPUTS : {P}_NUM_INPUTS)) {{",
          "        return MLCC_ERR_DIMS_OUT_OF_RANGE;", "    }",
          f"    switch (is_output ? index + {P}_NUM_INPUTS : index) {{"]
    for i, name in enumerate(list(g.inputs) + list(g.outputs)):
        c.append(f"    case {i}:")
        for axis, d in enumerate(g.values[name].shape):
            c.append(f"        shape[{axis}] = {c_value(d)};")
        c.append("        return MLCC_OK;")
    c += ["    default:", "        return MLCC_ERR_DIMS_OUT_OF_RANGE;", "    }", "}", ""]
    return c


def _offset_defines(prog: Program, plan: MemoryPlan, weight_offsets: dict[str, int],
                    sym: _Symbols) -> list[str]:
    """#defines naming each constant's offset in the blob and each arena tensor's and scratch
    buffer's offset in the arena (tensors whose lifetimes do not overlap share bytes)."""
    g = prog.graph
    lines = []
    if sym.weights:
        lines.append("/* Offsets of the constants in the weight blob (weights.bin). */")
        for name, ident in sym.weights.items():
            v = g.values[name]
            lines += define(ident, str(weight_offsets[name]),
                            _c_comment(f"{name}: {v.dtype} {_dims(v.shape)}"))
        lines.append("")
    if sym.arena:
        lines.append("/* Offsets of the intermediate tensors in the arena, in order of first "
                     "use. */")
        for name, ident in sym.arena.items():
            v = g.values[name]
            root = prog.root(name)
            note = f"{name}: {v.dtype} {_dims(v.shape)}"
            if root != name and prog.is_slice(name):
                off = prog.byte_offset(name)
                lines += define(ident, f"({sym.arena[root]} + {off})",
                                _c_comment(f"{note}, bytes {off}.. of {root}"))
            elif root != name:
                lines += define(ident, sym.arena[root], _c_comment(f"{note}, a view of {root}"))
            else:
                lines += define(ident, str(plan.storage[name].index), _c_comment(note))
        lines.append("")
    if sym.scratch:
        lines.append("/* Offsets of the kernels' scratch buffers in the arena. */")
        for t, ident in sym.scratch.items():
            call_ = prog.calls[t]
            lines += define(ident, str(plan.scratch[t]),
                            f"{call_.scratch_bytes} bytes for {call_.kernel}")
        lines.append("")
    return lines


def _leaf(v) -> str:
    return v if isinstance(v, str) else c_value(v)


def write_embedded_weights(blob: bytes, prefix: str, banner: str) -> str:
    """weights.c: the blob as a const array, for devices without a file system."""
    lines = [banner, LIBRARY_DEFINE, '#include "model.h"', "",
             f"static const unsigned char MLCC_ALIGNED(64) blob[{len(blob)}] = {{"]
    for i in range(0, len(blob), 20):
        lines.append("    " + ",".join(str(b) for b in blob[i:i + 20]) + ",")
    lines += ["};", "",
              f"const void *{prefix}_embedded_weights(void) {{ return blob; }}", "",
              f"int {prefix}_init_embedded(mlcc_context *ctx, void *arena, size_t arena_size) {{",
              f"    return {prefix}_init(ctx, blob, sizeof blob, arena, arena_size);", "}", ""]
    return "\n".join(lines)


def _c_comment(text: str) -> str:
    return text.replace("*/", "*\\/").replace("/*", "/\\*")


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("?", "\\?")
