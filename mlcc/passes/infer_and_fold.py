"""Static shape and type inference, with constant folding in the same walk.

Needs: a graph whose inputs all have static shapes (frontend.bind_shapes).
Guarantees: every value has a dtype and a static shape; every node whose inputs are all constant
(including Shape/Size of a statically shaped tensor) has been evaluated and its outputs are
constants. The nodes themselves stay for dead_code to remove.

Inference and folding are one walk because each needs the other: a Reshape's output shape comes
from a folded Shape->Gather->Concat chain, and Shape folds only once its input's shape is known.
Every node that can neither fold nor be compiled is reported, all in one error.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Node, Value, format_type
from ..ir.symbolic import SymbolicError, SymInt, count_var, dim_vars, prod, same_shape, upper
from ..ops import lookup, unsupported_reason
from ..ops import reference
from ..ops.common import IO_DTYPES, MAX_RANK
from ..ops.refusals import RANDOM, REFUSED, SEQUENCES, refusal
from ..ops.logical import SELECT_AXIS
from ..ops.registry import describe, static_only
from .float32_compute import reads_float32, widen
from .control_flow import fold_loop, inline_if, loop_is_constant, prepare_loop, prepare_scan
from .fold_symbolic import (fold_symbolic, foldable, is_symbolic_array, shape_array,
                            symbolic_dtype)

# No tensor may be larger: sizes and offsets stay far from overflowing size_t and int64 in the
# generated C (a 2^62-element input once gave an arena size of 2^64, which wraps to 0).
MAX_TENSOR_BYTES = 1 << 40
MAX_CONST_BYTES = 1 << 30        # a folded constant larger than this is surely a broken model
# never folded, even on constant inputs: each run draws new values
NONDETERMINISTIC = {op for op, category in REFUSED.items() if category == RANDOM}


def infer_and_fold(g: Graph) -> Graph:
    g = g.copy()
    problems: list[str] = []
    problem_nodes: list[Node] = []

    def report(node: Node, message: str) -> None:
        problems.append(message)
        problem_nodes.append(node)

    unknown: set[str] = set()     # values whose type could not be inferred (after a problem)
    selects: dict[str, Node] = {}  # Where nodes choosing a run-time If's outputs -> the If
    f32_of: dict[str, str] = {}   # float16/bfloat16/float64 value -> its float32 source
    sizes_made: dict = {}   # (value over counts, guard) -> the mlcc.Sizes output computing it
    index = 0
    while index < len(g.nodes):
        node = g.nodes[index]
        index += 1
        ins = [g.values.get(i) if i else None for i in node.inputs]
        if any(i and i in unknown for i in node.inputs):
            # Downstream of a problem: no types to infer, but still report what is unsupported.
            # (Shape and Size have no definition: _fold computes them, from types that are
            # unknown here; not a problem of their own)
            reasons = ([f"{node.op_type} (control flow) reads a value of a node that cannot "
                        f"be compiled"] if node.op_type in ("Loop", "If")
                       else [] if node.op_type in ("Shape", "Size") and
                       node.domain in ("", "ai.onnx")
                       else unsupported_reason(node, g.outputs))
            if reasons:
                report(node, f"{describe(node)}: {'; '.join(reasons)}")
            unknown.update(o for o in node.outputs if o)
            continue
        missing = [i for i, v in zip(node.inputs, ins) if i and (v is None or v.dtype is None)]
        if missing:
            raise ModelError(f"{describe(node)} reads {missing[0]!r}, which nothing defines")
        if node.op_type == "If" and node.domain in ("", "ai.onnx"):
            try:    # the branch(es) replace the If, and the walk goes on through them
                g.nodes[index - 1:index], chosen = inline_if(g, node)
                selects.update({k: node for k in chosen})
                index -= 1
            except UnsupportedError as exc:
                report(node, f"{describe(node)}: {exc.message}")
                unknown.update(o for o in node.outputs if o)
            continue
        if node.name in selects and _counted_select(ins) is not None:
            # a branch's output of a data-dependent size: the taken one's, counted (Where)
            node = g.nodes[index - 1] = replace(node, attrs={SELECT_AXIS: _counted_select(ins)})
        elif node.name in selects and not _same_type(ins[1], ins[2], ins[0]):
            report(node, 
                f"{describe(selects[node.name])}: its condition {node.inputs[0]!r} is known "
                f"only at run time, and the branches give output {node.outputs[0]!r} as "
                f"{format_type(ins[1])} and {format_type(ins[2])}; mlcc runs such an If only "
                f"when both branches' outputs have the same type and static shape (or bind the "
                f"condition's inputs with --bind to fold it)")
            unknown.update(o for o in node.outputs if o)
            continue
        try:
            results = _fold(g, node)
        except UnsupportedError as exc:
            report(node, f"{describe(node)}: {exc.message}")
            unknown.update(o for o in node.outputs if o)
            continue
        if results is not None:
            for name, arr in zip(node.outputs, results):
                if name:
                    _set_const(g, name, arr, symbolic_dtype(g, node))
            continue
        counted = [i for i in node.inputs if _counted_const(g, i)]
        if counted and not getattr(lookup(node), "counted_shapes", ""):
            # computed at run time first (an mlcc.Sizes node, one per value and guard), then
            # this node
            made = {i: sizes_made.get((i, node.guard)) for i in counted}
            new = {i: g.fresh_name(f"{i}.sizes") for i in dict.fromkeys(counted) if not made[i]}
            sizes_made.update({(i, node.guard): out for i, out in new.items()})
            made.update(new)
            g.nodes[index - 1:index] = [_run_time_sizes(g, i, out, node.guard)
                                        for i, out in new.items()] + [
                replace(node, inputs=[made.get(i, i) for i in node.inputs])]
            index -= 1
            continue
        if _has_body(node) and "_outer" not in node.attrs:
            try:    # run at run time: its body compiled on its own
                prepare = prepare_loop if node.op_type == "Loop" else prepare_scan
                node = g.nodes[index - 1] = prepare(g, node, infer_and_fold)
                ins = [g.values.get(i) if i else None for i in node.inputs]
            except UnsupportedError as exc:
                report(node, f"{describe(node)}: {exc.message}")
                unknown.update(o for o in node.outputs if o)
                continue
        reasons = unsupported_reason(node, g.outputs)
        if reasons:
            report(node, f"{describe(node)}: {'; '.join(reasons)}")
            unknown.update(o for o in node.outputs if o)
            continue
        try:
            try:
                if reads_float32(node, ins, f32_of):  # float32 values stay float32 (movement)
                    g.nodes[index - 1:index] = widen(g, node, ins, f32_of)
                    index -= 1
                    continue
                types = lookup(node).infer(node, ins, g)
            except TypeError as exc:        # numpy refusing a SymInt (ops/registry.py)
                raise static_only(node, ins, exc) from None
        except UnsupportedError as exc:
            try:    # float16, bfloat16 and float64 computed in float32 (float32_compute.py)
                widened = widen(g, node, ins, f32_of)
            except UnsupportedError as wide_exc:
                widened, exc = None, wide_exc
            if widened is not None:
                g.nodes[index - 1:index] = widened
                index -= 1
                continue
            report(node, exc.message if exc.message.startswith(describe(node)) else
                            f"{describe(node)}: {exc.message}")
            unknown.update(o for o in node.outputs if o)
            continue
        except ModelError as exc:
            raise ModelError(f"{describe(node)}: {exc.message}{_branch_hint(g, [node])}",
                             exc.detail) from None
        for name, (dtype, shape) in zip(node.outputs, types):
            if name:
                try:
                    negative = any(d < 0 for d in shape)
                except SymbolicError as exc:
                    report(node, f"{describe(node)}: {exc.message}")
                    unknown.add(name)
                    continue
                if negative:
                    raise ModelError(f"{describe(node)}: output {name!r} would have a negative "
                                     f"dimension {list(shape)}")
                v = g.values[name]
                v.dtype, v.shape = dtype, tuple(d if isinstance(d, SymInt) else int(d)
                                                for d in shape)
        try:    # which outputs have a data-dependent size (once their shapes are known)
            try:
                counted_outputs = _counted_shapes(g, node)
                dyns = lookup(node).dynamic(node, ins, g)
                for name, d in zip(node.outputs, dyns):
                    if lookup(node).counted_shapes == "view" and \
                            counted_outputs.get(name, d) != d:
                        raise UnsupportedError(
                            f"output {name!r} would have the size of the count of "
                            f"{counted_outputs[name][1]!r} along axis "
                            f"{counted_outputs[name][0]}, but is not a view of a tensor of "
                            f"that size there")
                dyns = [counted_outputs.get(n, d) for n, d in zip(node.outputs, dyns)]
            except TypeError as exc:        # numpy refusing a SymInt (ops/registry.py)
                raise static_only(node, ins, exc) from None
            if any(dyns) and any(g.values[n].is_dynamic for n in g.inputs):
                raise UnsupportedError(
                    "an output whose size depends on the data in a model compiled for a range "
                    "of sizes (--shape LO..HI) is not supported yet: compile this model for "
                    "fixed sizes (docs/dynamic-shapes.md)")
        except UnsupportedError as exc:
            report(node, f"{describe(node)}: {exc.message}")
            unknown.update(o for o in node.outputs if o)
            continue
        for name, dyn in zip(node.outputs, dyns):
            if name:
                g.values[name].dyn = dyn
    for name in g.outputs:      # a size the data decides as an output: computed at run time
        if not problems and _counted_const(g, name):
            g.nodes = [n for n in g.nodes if name not in n.outputs]    # (folded into it)
            g.nodes.append(_run_time_sizes(g, name, name, ()))
            g.values[name].const = None
    if problems:
        raise UnsupportedError(
            f"{len(problems)} node{'s' if len(problems) > 1 else ''} cannot be compiled:\n  "
            + "\n  ".join(problems) + _branch_hint(g, problem_nodes))
    for name in g.outputs:
        v = g.values.get(name)
        if v is None or v.dtype is None or not v.is_static:
            raise ModelError(f"graph output {name!r} has no static type after inference")
    for v in g.values.values():
        if v.shape is not None and v.dtype is not None and v.is_static:
            nbytes = math.prod(upper(d) for d in v.shape) * np.dtype(v.dtype).itemsize
            if nbytes > MAX_TENSOR_BYTES:
                raise ModelError(f"tensor {v.name!r} {list(v.shape)} would take {nbytes} "
                                 f"bytes; mlcc refuses tensors over {MAX_TENSOR_BYTES} bytes "
                                 f"(1 TiB)")
    for kind, names in (("input", g.inputs), ("output", g.outputs)):
        for name in names:
            if g.values[name].dtype not in IO_DTYPES:
                raise UnsupportedError(f"graph {kind} {name!r} has type "
                                       f"{g.values[name].dtype}, which mlcc does not support "
                                       f"at run time (supported: {', '.join(IO_DTYPES)})")
            if len(g.values[name].shape) > MAX_RANK:
                raise UnsupportedError(f"graph {kind} {name!r} has rank "
                                       f"{len(g.values[name].shape)}; at most {MAX_RANK} "
                                       f"is supported")
    return g


def _counted_shapes(g: Graph, node: Node) -> dict[str, tuple[int, str]]:
    """The outputs whose shape holds a data-dependent count (ir.symbolic.count_var): where the
    operator allows it (OpDef.counted_shapes) and the count is a whole dimension, that
    dimension becomes its maximum and the output's Value.dyn; else a refusal."""
    found = {}
    for name in node.outputs:
        v = g.values.get(name) if name else None
        if v is None or not any(isinstance(d, SymInt) and any(x.count for x in d.dims)
                                for d in v.shape):
            continue
        bare = [a for a, d in enumerate(v.shape) if isinstance(d, SymInt) and len(d.dims) == 1
                and d.dims[0].count and d.poly == SymInt.var(d.dims[0]).poly]
        if not lookup(node).counted_shapes or len(bare) != 1 or \
                sum(isinstance(d, SymInt) for d in v.shape) != 1:
            raise UnsupportedError(f"output {name!r} would have the shape {list(v.shape)}, "
                                   f"which depends on the data; mlcc plans such a size only "
                                   f"as one whole dimension of a ConstantOfShape, or of a "
                                   f"Reshape to that very size")
        axis, count = bare[0], v.shape[bare[0]].dims[0]
        v.shape = v.shape[:axis] + (count.hi,) + v.shape[axis + 1:]
        found[name] = (axis, count.count)
    return found


def _counted_const(g: Graph, name: str) -> bool:
    """Whether value `name` is an int64 shape computation over data-dependent counts only
    (ir.symbolic.count_var): its value is known only at run time."""
    v = g.values.get(name) if name else None
    if v is None or not v.is_const or not is_symbolic_array(v.const) or v.dtype != "int64":
        return False
    found = dim_vars([x for x in v.const.reshape(-1) if isinstance(x, SymInt)])
    return bool(found) and all(d.count for d in found)


def _run_time_sizes(g: Graph, name: str, out: str, guard: tuple) -> Node:
    """The mlcc.Sizes node (ops/selection.py) that computes value `name`, a shape computation
    over data-dependent counts, at run time, into value `out`. Its inputs are the values that
    own the counts, so that their nodes run before it."""
    v = g.values[name]
    if out not in g.values:
        g.values[out] = Value(out, "int64", v.shape)
    keys = sorted({d.count for x in v.const.reshape(-1) if isinstance(x, SymInt)
                   for d in x.dims})
    return Node(f"{out}/sizes", "Sizes", keys, [out], {"values": v.const}, domain="mlcc",
                version=1, guard=guard)


def _branch_hint(g: Graph, nodes: list[Node]) -> str:
    """For nodes inside a branch of an If whose condition is known only at run time: which
    graph inputs to bind so that only the branch taken is compiled (a branch the given shapes
    make invalid, e.g. one written for another sample rate, is then never compiled)."""
    conds = sorted({c for n in nodes for c in n.guard if isinstance(c, tuple)})  # not LoopScopes
    if not conds:
        return ""
    sources = sorted({s for c, _ in conds for s in g.inputs_upstream(c)},
                     key=g.inputs.index)
    where = " and ".join(f"{c!r} is {want}" for c, want in conds)
    binds = " ".join(f"--bind {s}=..." for s in sources)
    return (f" (in a branch of an If that runs only where {where}, which is computed at run "
            f"time{' from graph input ' + ', '.join(map(repr, sources)) if sources else ''}; "
            f"{binds + ' compiles' if binds else 'binding it compiles'} only the branch taken)")


def _has_body(node: Node) -> bool:
    """A Loop or Scan: prepared to run at run time (passes/control_flow.py)."""
    return node.op_type in ("Loop", "Scan") and node.domain in ("", "ai.onnx")


def _counted_select(ins) -> int | None:
    """The axis along which a run-time If's branches give an output of a data-dependent size
    (one of them counted there, the other counted or static; otherwise one type), or None."""
    cond, a, b = ins
    dyns = {v.dyn for v in (a, b)} - {None}
    if not dyns or cond.numel != 1 or a.dtype != b.dtype or len(a.shape) != len(b.shape):
        return None
    axes = {d[0] for d in dyns}
    if len(axes) != 1:
        return None
    axis = axes.pop()
    same = all(x == y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != axis)
    return axis if same and all(v.dyn is None or v.dyn[0] == axis for v in (a, b)) else None


def _same_type(a, b, cond) -> bool:
    """Both branch outputs of a run-time If of one static type, which the condition does not
    broadcast to another shape."""
    return (a.dtype == b.dtype and a.is_static and same_shape(a.shape, b.shape)
            and len(cond.shape) <= len(a.shape))


def _set_const(g: Graph, name: str, arr: np.ndarray, symbolic: str = "int64") -> None:
    arr = np.asarray(arr)
    if arr.nbytes > MAX_CONST_BYTES:
        raise ModelError(f"folding {name!r} gives a {arr.nbytes}-byte constant; refusing")
    v = g.values[name]
    # a shape over dynamic sizes is an object array of ints and SymInts, typed int64 (or float
    # after a Cast: fold_symbolic.symbolic_dtype)
    dtype = symbolic if is_symbolic_array(arr) else arr.dtype.name
    v.dtype, v.shape, v.const = dtype, tuple(int(d) for d in arr.shape), arr


def _fold(g: Graph, node: Node) -> list[np.ndarray] | None:
    """The node's outputs as constants, or None if it must run at run time."""
    if node.op_type == "Constant" and node.domain == "":
        return [_constant_value(node)]
    if node.domain == "" and node.op_type in ("Shape", "Size"):
        v = g.values[node.inputs[0]]
        shape = v.shape
        if v.dyn is not None and v.is_static:    # the count, known at run time (symbolic)
            axis, key = v.dyn
            shape = shape[:axis] + (SymInt.var(count_var(key, shape[axis])),) \
                + shape[axis + 1:]
        if not v.is_static:
            return None
        if node.op_type == "Size":
            size = prod(shape)
            return [shape_array([size]).reshape(()) if isinstance(size, SymInt)
                    else np.array(size, dtype=np.int64)]
        dims = shape[slice(node.attr("start", 0), node.attr("end", None))]
        if any(isinstance(d, SymInt) for d in dims):    # ints and SymInts (fold_symbolic.py)
            return [shape_array(dims)]
        return [np.array(dims, dtype=np.int64)]
    if node.op_type in NONDETERMINISTIC or node.domain not in ("", "ai.onnx"):
        return None
    if node.subgraphs():
        if not _has_body(node):
            raise UnsupportedError(f"{node.op_type} (an operator with subgraphs) is not "
                                   f"supported; mlcc compiles If, Loop and Scan")
        if node.op_type == "Loop" and "_outer" not in node.attrs and loop_is_constant(g, node):
            return fold_loop(g, node)
        return None
    arrays = [g.const(i) if i else None for i in node.inputs]
    if any(i and a is None for i, a in zip(node.inputs, arrays)):
        return None
    if not node.inputs and node.op_type not in ("ConstantOfShape", "Range", "EyeLike"):
        return None
    if any(is_symbolic_array(a) for a in arrays):
        if node.op_type in ("Range", "ConstantOfShape"):
            return None     # a size over dynamic dimensions: runs (ops/compile_time.py)
        if node.op_type in ("Slice", "Expand") and not is_symbolic_array(arrays[0]):
            return None     # a slice or broadcast of a tensor to a dynamic size: a copy at
            #                 run time
        if not foldable(g, node, arrays) and lookup(node) is not None:
            return None     # sizes read as data: computed at run time (codegen/lower.py)
        try:
            return fold_symbolic(g, node, arrays)
        except SymbolicError:
            if all(_counted_const(g, i) for i, a in zip(node.inputs, arrays)
                   if is_symbolic_array(a)):
                return None     # over data-dependent counts: runs at run time (mlcc.Sizes)
            raise
    _guard_size(node, arrays)
    d = lookup(node)
    out = d.fold(node, arrays) if d is not None else None
    if out is None:
        out = reference_eval(node, arrays, g.opset)
    return out


def _guard_size(node: Node, arrays: list) -> None:
    """Refuses folds that would build absurdly large tensors before numpy tries to."""
    if node.op_type in ("ConstantOfShape", "Expand", "Tile") and len(arrays) >= 1:
        shape_arg = arrays[0] if node.op_type == "ConstantOfShape" else arrays[1]
        if shape_arg is not None:
            dims = [int(x) for x in np.asarray(shape_arg).reshape(-1)]
            if any(d < 0 for d in dims):
                raise ModelError(f"{describe(node)}: negative dimension in {dims}")
            total = 1
            for d in dims:
                total *= max(d, 1)
            if total * 8 > MAX_CONST_BYTES:
                raise ModelError(f"{describe(node)}: folding would build a tensor of "
                                 f"{total} elements; refusing")


def _constant_value(node: Node) -> np.ndarray:
    a = node.attrs
    if "value" in a:
        return np.asarray(a["value"])
    if "value_float" in a:
        return np.array(a["value_float"], dtype=np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], dtype=np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], dtype=np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], dtype=np.int64)
    raise UnsupportedError("Constant with sparse or string values is not supported")


def reference_eval(node: Node, arrays: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Runs one node through onnx.reference (the ONNX reference implementation)."""
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(arrays)]
    outs = [f"out{i}" if o else "" for i, o in enumerate(node.outputs)]
    attrs = {k: (numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v)
             for k, v in node.attrs.items() if not k.startswith("_")}
    proto = helper.make_node(node.op_type, names, outs, domain=node.domain, **attrs)
    graph = helper.make_graph(
        [proto], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, arrays) if a is not None],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        # IEEE results (log(0) = -inf, a cast of NaN) fold as they run, without numpy's
        # warnings on the user's terminal: T5's relative-position buckets take log(0) and
        # mask it with a Where
        with np.errstate(all="ignore"):
            results = reference.evaluator(model).run(None, {n: a for n, a in zip(names, arrays)
                                                           if a is not None})
    except Exception as exc:
        raise ModelError(f"{describe(node)}: evaluating it on constant inputs failed: {exc}"
                         ) from None
    if any(r is None or isinstance(r, (list, tuple)) for r in results):
        # np.asarray would stack a sequence into one tensor: a different value
        raise UnsupportedError(f"{node.op_type} produces a sequence or an optional; mlcc "
                               f"compiles dense tensors only: {refusal(SEQUENCES)}")
    it = iter(results)
    return [np.asarray(next(it)) if o else None for o in outs]
