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

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Node
from ..ops import lookup, unsupported_reason
from ..ops.common import IO_DTYPES, MAX_RANK
from ..ops.registry import describe

# No tensor may be larger: sizes and offsets stay far from overflowing size_t and int64 in the
# generated C (a 2^62-element input once gave an arena size of 2^64, which wraps to 0).
MAX_TENSOR_BYTES = 1 << 40
MAX_CONST_BYTES = 1 << 30        # a folded constant larger than this is surely a broken model
MAX_LOOP_ITERATIONS = 100_000    # a Loop folded at compile time: bounded compile time
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli"}


def infer_and_fold(g: Graph) -> Graph:
    g = g.copy()
    problems: list[str] = []
    unknown: set[str] = set()     # values whose type could not be inferred (after a problem)
    for node in g.nodes:
        ins = [g.values.get(i) if i else None for i in node.inputs]
        if any(i and i in unknown for i in node.inputs):
            # Downstream of a problem: no types to infer, but still report what is unsupported.
            reasons = (["Loop (control flow) runs only at compile time, folded when its inputs "
                        "are constant; they depend on a node that cannot be compiled"]
                       if node.op_type == "Loop" else unsupported_reason(node))
            if reasons:
                problems.append(f"{describe(node)}: {'; '.join(reasons)}")
            unknown.update(o for o in node.outputs if o)
            continue
        missing = [i for i, v in zip(node.inputs, ins) if i and (v is None or v.dtype is None)]
        if missing:
            raise ModelError(f"{describe(node)} reads {missing[0]!r}, which nothing defines")
        try:
            results = _fold(g, node)
        except UnsupportedError as exc:
            problems.append(f"{describe(node)}: {exc.message}")
            unknown.update(o for o in node.outputs if o)
            continue
        if results is not None:
            for name, arr in zip(node.outputs, results):
                if name:
                    _set_const(g, name, arr)
            continue
        reasons = unsupported_reason(node)
        if reasons:
            problems.append(f"{describe(node)}: {'; '.join(reasons)}")
            unknown.update(o for o in node.outputs if o)
            continue
        try:
            types = lookup(node).infer(node, ins, g)
        except UnsupportedError as exc:
            problems.append(f"{describe(node)}: {exc.message}")
            unknown.update(o for o in node.outputs if o)
            continue
        except ModelError as exc:
            raise ModelError(f"{describe(node)}: {exc.message}", exc.detail) from None
        for name, (dtype, shape) in zip(node.outputs, types):
            if name:
                if any(d < 0 for d in shape):
                    raise ModelError(f"{describe(node)}: output {name!r} would have a negative "
                                     f"dimension {list(shape)}")
                v = g.values[name]
                v.dtype, v.shape = dtype, tuple(int(d) for d in shape)
    if problems:
        raise UnsupportedError(
            f"{len(problems)} node{'s' if len(problems) > 1 else ''} cannot be compiled:\n  "
            + "\n  ".join(problems))
    for name in g.outputs:
        v = g.values.get(name)
        if v is None or v.dtype is None or not v.is_static:
            raise ModelError(f"graph output {name!r} has no static type after inference")
    for v in g.values.values():
        if v.shape is not None and v.dtype is not None and all(
                isinstance(d, int) for d in v.shape):
            nbytes = math.prod(v.shape) * np.dtype(v.dtype).itemsize
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


def _set_const(g: Graph, name: str, arr: np.ndarray) -> None:
    arr = np.asarray(arr)
    if arr.nbytes > MAX_CONST_BYTES:
        raise ModelError(f"folding {name!r} gives a {arr.nbytes}-byte constant; refusing")
    v = g.values[name]
    v.dtype, v.shape, v.const = arr.dtype.name, tuple(int(d) for d in arr.shape), arr


def _fold(g: Graph, node: Node) -> list[np.ndarray] | None:
    """The node's outputs as constants, or None if it must run at run time."""
    if node.op_type == "Constant" and node.domain == "":
        return [_constant_value(node)]
    if node.domain == "" and node.op_type in ("Shape", "Size"):
        v = g.values[node.inputs[0]]
        if v.is_static:
            if node.op_type == "Size":
                return [np.array(v.numel, dtype=np.int64)]
            start, end = node.attr("start", 0), node.attr("end", None)
            return [np.array(v.shape[slice(start, end)], dtype=np.int64)]
        return None
    if node.op_type in NONDETERMINISTIC or node.domain not in ("", "ai.onnx"):
        return None
    if any(isinstance(v, onnx.GraphProto) or (isinstance(v, list) and v and
                                              isinstance(v[0], onnx.GraphProto))
           for v in node.attrs.values()):
        if node.op_type != "Loop":
            raise UnsupportedError("control flow (operators with subgraphs) is not supported; "
                                   "only Loop, folded at compile time when its inputs are "
                                   "constant")
        return _fold_loop(g, node)
    arrays = [g.const(i) if i else None for i in node.inputs]
    if any(i and a is None for i, a in zip(node.inputs, arrays)):
        return None
    if not node.inputs and node.op_type not in ("ConstantOfShape", "Range", "EyeLike"):
        return None
    _guard_size(node, arrays)
    d = lookup(node)
    out = d.fold(node, arrays) if d is not None else None
    if out is None:
        out = reference_eval(node, arrays, g.opset)
    return out


def _outer_names(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph (and the subgraphs in it) reads from the scopes around it."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used: list[str] = []
    for n in graph.node:
        inner = [x for a in n.attribute for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH
                                                      else list(a.graphs))
                 for x in _outer_names(sub)]
        used += [x for x in list(n.input) + inner if x and x not in defined and x not in used]
        defined.update(o for o in n.output if o)
    return used


def _graph_inputs_upstream(g: Graph, name: str) -> list[str]:
    """The graph inputs a run-time value is computed from, in input order."""
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    found, seen, stack = set(), set(), [name]
    while stack:
        cur = stack.pop()
        if cur in seen or g.const(cur) is not None:
            continue
        seen.add(cur)
        if cur in g.inputs:
            found.add(cur)
        elif cur in producer:
            stack.extend(i for i in producer[cur].inputs if i)
    return [i for i in g.inputs if i in found]


def _fold_loop(g: Graph, node: Node) -> list[np.ndarray]:
    """A Loop whose inputs, and the outer values its body reads, are constant is evaluated
    by onnx.reference at compile time; mlcc has no run-time control flow, so any other Loop
    is refused, naming the graph input it would need bound to a constant."""
    if not isinstance(node.attrs.get("body"), onnx.GraphProto):
        raise ModelError(f"{describe(node)}: Loop needs a 'body' graph attribute")
    outer = [n for n in _outer_names(node.attrs["body"]) if n in g.values]
    roles = ["trip count", "condition"]
    needed = [(i, roles[i] if i < 2 else f"initial value {i - 2}", name)
              for i, name in enumerate(node.inputs) if name]
    needed += [(None, "body's outer-scope value", name) for name in outer]
    why = "(mlcc runs control flow only at compile time, by folding it)"
    for i, role, name in needed:
        if g.const(name) is not None:
            continue
        if i is not None and name in g.inputs:
            raise UnsupportedError(f"Loop's {role} (input {i}, {name!r}) must be a constant "
                                   f"once shapes are static {why}; it is a graph input: give its "
                                   f"value with --bind {name}=...")
        sources = _graph_inputs_upstream(g, name)
        if not sources:
            raise UnsupportedError(f"Loop's {role} {name!r} is computed at run time {why}")
        raise UnsupportedError(
            f"Loop's {role} {name!r} is computed at run time from graph "
            f"input{'s' if len(sources) > 1 else ''} {', '.join(map(repr, sources))}: graph "
            f"input {sources[0]!r} must be a constant once shapes are static {why}: give "
            f"its value with --bind {sources[0]}=...")
    return _run_loop(g, node, {n: g.const(n) for n in outer})


def _run_loop(g: Graph, node: Node, outer: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Loop's semantics, with onnx.reference running the body once per iteration (its own
    Loop stacks scan outputs with np.vstack, which is wrong for scalars and for rank > 1)."""
    from onnx.reference import ReferenceEvaluator

    body: onnx.GraphProto = node.attrs["body"]
    trip = g.const(node.input(0)) if node.input(0) else None
    cond = g.const(node.input(1)) if node.input(1) else None
    carried = [g.const(n) for n in node.inputs[2:]]
    n_scan = len(body.output) - 1 - len(carried)
    if n_scan < 0 or len(body.input) != 2 + len(carried):
        raise ModelError(f"{describe(node)}: the body's inputs and outputs do not match the "
                         f"Loop's ({len(body.input)} inputs, {len(body.output)} outputs for "
                         f"{len(carried)} loop-carried values)")
    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    graph.input.extend(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                     a.shape) for n, a in outer.items())
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])
    try:
        run = ReferenceEvaluator(model).run
    except Exception as exc:
        raise ModelError(f"{describe(node)}: its body cannot be evaluated: {exc}") from None
    limit = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    names = [i.name for i in body.input]
    scans: list[list[np.ndarray]] = [[] for _ in range(n_scan)]
    i, size = 0, 0
    while keep_going and (limit is None or i < limit):
        if i >= MAX_LOOP_ITERATIONS:
            raise UnsupportedError(f"Loop runs more than {MAX_LOOP_ITERATIONS} iterations; "
                                   f"mlcc folds Loop at compile time and refuses longer ones")
        feeds = {**outer, names[0]: np.array(i, np.int64),
                 names[1]: np.array(keep_going), **dict(zip(names[2:], carried))}
        try:
            outs = [np.asarray(o) for o in run(None, feeds)]
        except Exception as exc:
            raise ModelError(f"{describe(node)}: evaluating iteration {i} on constant inputs "
                             f"failed: {exc}") from None
        if cond is not None:        # without a cond input, the body's cond output is ignored
            keep_going = bool(outs[0].reshape(-1)[0])
        carried = outs[1:1 + len(carried)]
        for k, o in enumerate(outs[1 + len(carried):]):
            scans[k].append(o)
            size += o.nbytes
        if size > MAX_CONST_BYTES:
            raise ModelError(f"{describe(node)}: folding builds over {MAX_CONST_BYTES} bytes of "
                             f"scan outputs; refusing")
        i += 1
    if n_scan and i == 0:
        raise UnsupportedError("Loop runs no iteration, so its scan outputs' shapes are "
                               "unknown; mlcc cannot fold it")
    return list(carried) + [np.stack(s) for s in scans]


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
    from onnx.reference import ReferenceEvaluator

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
        results = ReferenceEvaluator(model).run(None, {n: a for n, a in zip(names, arrays)
                                                       if a is not None})
    except Exception as exc:
        raise ModelError(f"{describe(node)}: evaluating it on constant inputs failed: {exc}"
                         ) from None
    it = iter(results)
    return [np.asarray(next(it)) if o else None for o in outs]
