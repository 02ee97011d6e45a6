"""Control flow: Loop evaluated at compile time or prepared to run, If inlined (used by
infer_and_fold's walk).

A Loop whose inputs, and the outer values its body reads, are constant is evaluated by
onnx.reference (fold_loop); any other Loop is prepared to run at run time (prepare_loop: its
body compiled on its own, lowered by ops/control_flow.py into a C loop). An If whose condition
is constant (after binding and folding) is replaced by the nodes of the branch it takes, so that
the branch compiles like the rest of the graph; an If on a run-time condition by both branches,
guarded, and a Where per output (inline_if).

Subgraphs (If's then_branch/else_branch, Loop's body) are IR graphs (frontend._subgraph):
their values are the names they define; any other name they read is from an enclosing scope.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Node, Value
from ..ops.control_flow import carried_count, loop_count
from ..ops import reference
from ..ops.registry import describe

MAX_LOOP_ITERATIONS = 100_000    # a Loop folded at compile time: bounded compile time
MAX_CONST_BYTES = 1 << 30        # a folded constant larger than this is surely a broken model
WHY = "(it decides the shape of a result)"


def require_constant(g: Graph, op: str, role: str, name: str, index: int | None) -> None:
    """Refuses a control-flow operand computed at run time, naming the graph input to bind
    (tests/conformance.py binds on the words "must be a constant once shapes are static")."""
    if g.const(name) is not None:
        return
    if index is not None and name in g.inputs:
        raise UnsupportedError(f"{op}'s {role} (input {index}, {name!r}) must be a constant "
                               f"once shapes are static {WHY}; it is a graph input: give its "
                               f"value with --bind {name}=...")
    sources = g.inputs_upstream(name)
    if not sources:
        raise UnsupportedError(f"{op}'s {role} {name!r} is computed at run time {WHY}")
    raise UnsupportedError(
        f"{op}'s {role} {name!r} is computed at run time from graph "
        f"input{'s' if len(sources) > 1 else ''} {', '.join(map(repr, sources))}: graph "
        f"input {sources[0]!r} must be a constant once shapes are static {WHY}: give "
        f"its value with --bind {sources[0]}=...")


# ------------------------------------------------------------------------------------ If

def inline_if(g: Graph, node: Node) -> tuple[list[Node], dict[str, str]]:
    """The nodes that replace an If, and the Where nodes among them that select a branch's
    outputs at run time (their names -> the If's name).

    With a constant condition: the taken branch's nodes, its initializers added to g as
    constants, its values renamed where their names are taken in g (deterministically: name,
    name_1, ...), its node names prefixed by the If's, and its outputs written to the If's
    outputs. Nested subgraphs see the renamed outer values.

    With a condition known only at run time: both branches, each guarded by the condition
    (Node.guard: the generated C runs them inside an `if`), each writing its outputs to values
    of its own, and one Where per output selecting the branch's (infer_and_fold checks that the
    branches' outputs have the same type and static shape)."""
    cond_name = node.input(0)
    if not cond_name:
        raise ModelError(f"{describe(node)}: If needs a condition input")
    cond = g.const(cond_name)
    if cond is None:
        return _inline_both(g, node, cond_name)
    cond = np.asarray(cond)
    if cond.size != 1:
        raise ModelError(f"{describe(node)}: the condition has {cond.size} elements, not one")
    key = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    taken = {n.name for n in g.nodes}
    return _inline_branch(g, node, key, list(node.outputs), node.guard, taken, node.name), {}


def _inline_both(g: Graph, node: Node, cond: str) -> tuple[list[Node], dict[str, str]]:
    v = g.values[cond]
    if v.dtype != "bool" or v.numel != 1:
        raise UnsupportedError(f"the condition {cond!r} is {v.dtype} {list(v.shape)}, not one "
                               f"bool")
    nodes: list[Node] = []
    taken = {n.name for n in g.nodes}
    picks: dict[str, list[str]] = {o: [] for o in node.outputs if o}
    for key, want in (("then_branch", True), ("else_branch", False)):
        outs = []
        for o in node.outputs:
            outs.append(g.fresh_name(f"{o}.{key[:4]}") if o else "")
            if o:
                g.values[outs[-1]] = Value(outs[-1])
                picks[o].append(outs[-1])
        nodes += _inline_branch(g, node, key, outs, node.guard + ((cond, want),), taken,
                                f"{node.name}/{key[:4]}")
    where = onnx.defs.get_schema("Where", g.opset).since_version
    selects = {}
    for o, (t, e) in picks.items():
        name = _unique(taken, f"{node.name}/select:{o}")
        nodes.append(Node(name, "Where", [cond, t, e], [o], {}, "", where, guard=node.guard))
        selects[name] = node.name
    return nodes, selects


def _inline_branch(g: Graph, node: Node, key: str, outs: list[str], guard: tuple,
                   taken: set[str], prefix: str) -> list[Node]:
    """The branch's nodes as parent nodes named PREFIX/NODE (unique among `taken`), writing
    its outputs to `outs`."""
    branch = node.attrs.get(key)
    if not isinstance(branch, Graph):
        raise ModelError(f"{describe(node)}: If needs a {key!r} graph attribute")
    if len(branch.outputs) != len(outs):
        raise ModelError(f"{describe(node)}: its {key} has {len(branch.outputs)} outputs, the "
                         f"If has {len(outs)}")
    rename: dict[str, str] = {}
    produced = {o for n in branch.nodes for o in n.outputs if o}
    # A branch output made by one of its nodes is written straight to the If's output.
    for b, o in zip(branch.outputs, outs):
        if o and b in produced and b not in rename and branch.outputs.count(b) == 1:
            rename[b] = o
    for name in branch.values:
        if name not in rename:
            rename[name] = g.fresh_name(name)
            g.values[rename[name]] = Value(rename[name])
    for name, v in branch.values.items():
        if v.is_const:
            new = g.values[rename[name]]
            new.dtype, new.shape, new.const = v.dtype, v.shape, v.const
    nodes = [_renamed(n, rename, _unique(taken, f"{prefix}/{n.name}"), guard)
             for n in branch.nodes]
    identity = onnx.defs.get_schema("Identity", g.opset).since_version
    for b, o in zip(branch.outputs, outs):     # outer values, constants, repeated outputs
        if o and rename.get(b) != o:
            nodes.append(Node(_unique(taken, f"{prefix}/{o}"), "Identity",
                              [rename.get(b, b)], [o], {}, "", identity, guard=guard))
    return nodes


def _compile_body(g: Graph, node: Node, body: Graph, inputs: list[str],
                  types: dict[str, Value], infer: Callable[[Graph], Graph]
                  ) -> tuple[Graph, list[str]]:
    """A Loop's or Scan's body as a graph of its own, given static types by `infer`: `types`
    types (or makes constant) its own inputs, whose run-time ones are `inputs`; the values it
    reads from enclosing scopes become inputs too (after `inputs`), or constants where they
    are constants of g. Returns it and those outer names (the node's extra inputs)."""
    undefined = [x for x in body.outer_names() if x not in g.values]
    if undefined:
        raise ModelError(f"{describe(node)}: its body reads {undefined[0]!r}, which neither "
                         f"the body nor an enclosing graph defines")
    sub = body.copy()
    sub.opset = g.opset
    sub.values.update(types)
    outer = []
    for name in body.outer_names():
        v = g.values[name]
        sub.values[name] = Value(name, v.dtype, v.shape, v.const)
        if v.const is None:
            outer.append(name)
    sub.inputs = list(inputs) + outer
    try:
        return infer(sub), outer
    except UnsupportedError as exc:
        raise UnsupportedError(f"its body: {exc.message}") from None
    except ModelError as exc:
        raise ModelError(f"{describe(node)}: its body: {exc.message}") from None


def _check_carried(sub: Graph, names: list[str], before: list[Value],
                   nexts: list[str]) -> None:
    """Each loop-carried value keeps the type and static shape it has `before` the loop."""
    for k, (name, a, nxt) in enumerate(zip(names, before, nexts)):
        b = sub.values[nxt]
        if (a.dtype, tuple(a.shape)) != (b.dtype, tuple(b.shape)):
            raise UnsupportedError(
                f"loop-carried value {k} ({name!r}) is {a.dtype} {list(a.shape)} before the "
                f"loop and {b.dtype} {list(b.shape)} after an iteration; mlcc needs it to "
                f"keep its type and static shape")


def _unique(taken: set[str], name: str) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _renamed(n: Node, rename: dict[str, str], name: str, guard: tuple) -> Node:
    attrs = {k: _rename_free(v, rename) for k, v in n.attrs.items()}
    return Node(name, n.op_type, [rename.get(i, i) if i else i for i in n.inputs],
                [rename.get(o, o) if o else o for o in n.outputs], attrs, n.domain, n.version,
                list(n.fused), guard)


def _rename_free(v, rename: dict[str, str]):
    """An attribute with the outer-scope names its subgraphs read renamed (a copy)."""
    if isinstance(v, list) and v and isinstance(v[0], Graph):
        return [_rename_free(x, rename) for x in v]
    if not isinstance(v, Graph):
        return v
    free = {k: w for k, w in rename.items() if k not in v.values}
    if not free:
        return v
    nodes = [Node(n.name, n.op_type, [free.get(i, i) if i else i for i in n.inputs],
                  list(n.outputs), {k: _rename_free(a, free) for k, a in n.attrs.items()},
                  n.domain, n.version, list(n.fused)) for n in v.nodes]
    return Graph(v.name, nodes, v.values, list(v.inputs),
                 [free.get(o, o) for o in v.outputs], v.opset, v.source_sha256)


# ------------------------------------------------------------------------------------ Loop

_ROLES = ["trip count", "condition", "initial value"]


def loop_is_constant(g: Graph, node: Node) -> bool:
    """Whether a Loop (not yet prepared) can fold: its inputs and the outer values its body
    reads are all constant."""
    body = node.attrs.get("body")
    if not isinstance(body, Graph):
        raise ModelError(f"{describe(node)}: Loop needs a 'body' graph attribute")
    return all(g.const(n) is not None for n in node.inputs if n) and all(
        g.const(n) is not None for n in body.outer_names() if n in g.values)


def fold_loop(g: Graph, node: Node) -> list[np.ndarray]:
    """A Loop whose inputs, and the outer values its body reads, are constant, evaluated by
    onnx.reference at compile time."""
    body = node.attrs["body"]
    outer = [n for n in body.outer_names() if n in g.values]
    return _run_loop(g, node, body, {n: g.const(n) for n in outer})


def prepare_loop(g: Graph, node: Node, infer: Callable[[Graph], Graph]) -> Node:
    """The Loop in the form ops/control_flow.py lowers to a C loop: its body given static
    types by `infer` (infer_and_fold, the caller; the other passes optimize it later:
    passes.optimize_bodies), the values it reads from enclosing scopes made explicit inputs
    (constants stay constants of the body), its condition input the constant true."""
    body = node.attrs.get("body")
    if not isinstance(body, Graph):
        raise ModelError(f"{describe(node)}: Loop needs a 'body' graph attribute")
    inputs = list(node.inputs) + [""] * (2 - len(node.inputs))
    initial = inputs[2:]
    n = len(initial)
    n_scan = len(body.outputs) - 1 - n
    if n_scan < 0 or len(body.inputs) != 2 + n:
        raise ModelError(f"{describe(node)}: the body's inputs and outputs do not match the "
                         f"Loop's ({len(body.inputs)} inputs, {len(body.outputs)} outputs for "
                         f"{n} loop-carried values)")
    for role, name in (("trip count", inputs[0]), ("condition", inputs[1])):
        v = g.values.get(name) if name else None
        if v is not None and (v.numel != 1 or v.dtype != ("int64" if role == "trip count"
                                                          else "bool")):
            raise ModelError(f"{describe(node)}: its {role} {name!r} is {v.dtype} "
                             f"{list(v.shape)}, not one "
                             f"{'int64' if role == 'trip count' else 'bool'}")
    iteration, cond, carried = body.inputs[0], body.inputs[1], body.inputs[2:]
    for name, init in zip(carried, initial):
        if not init:
            raise ModelError(f"{describe(node)}: loop-carried value {name!r} has no initial "
                             f"value")
    types = {iteration: Value(iteration, "int64", ()),
             cond: Value(cond, "bool", (), np.array(True))}
    types.update({name: Value(name, g.values[init].dtype, g.values[init].shape)
                  for name, init in zip(carried, initial)})
    try:
        sub, outer = _compile_body(g, node, body, [iteration] + list(carried), types, infer)
    except UnsupportedError as exc:
        # it may still fold once its run-time inputs are bound: say which one first
        for i, name in enumerate(node.inputs):
            if name:
                try:
                    require_constant(g, "Loop", _ROLES[min(i, 2)], name, i)
                except UnsupportedError as bind:
                    raise UnsupportedError(f"its body cannot run at run time, so the Loop "
                                           f"must fold: {bind.message}; {exc.message}"
                                           ) from None
        raise
    _check_carried(sub, carried, [g.values[x] for x in initial], sub.outputs[1:1 + n])
    again = sub.values[sub.outputs[0]]
    if again.dtype != "bool" or again.numel != 1:
        raise ModelError(f"{describe(node)}: its body's condition output is {again.dtype} "
                         f"{list(again.shape)}, not one bool")
    attrs = {"body": sub, "_outer": len(outer)}
    prepared = Node(node.name, node.op_type, inputs[:2] + initial + outer, list(node.outputs),
                    attrs, node.domain, node.version, list(node.fused), node.guard)
    if n_scan and loop_count(prepared, sub, g) is None:
        if inputs[0] and g.const(inputs[0]) is None:
            require_constant(g, "Loop", "trip count", inputs[0], 0)
        raise UnsupportedError(
            "it has scan outputs, and its number of iterations depends on a condition known "
            "only at run time, so the scan outputs' shape is not static; mlcc compiles such a "
            "Loop only without scan outputs (or bind the condition's inputs with --bind)")
    assert carried_count(prepared) == n
    return prepared


def prepare_scan(g: Graph, node: Node, infer: Callable[[Graph], Graph]) -> Node:
    """A Scan (opset 9 and later) in the form ops/control_flow.py lowers to a C loop, as
    prepare_loop does for a Loop; its axes made non-negative, its directions explicit."""
    body = node.attrs.get("body")
    if not isinstance(body, Graph):
        raise ModelError(f"{describe(node)}: Scan needs a 'body' graph attribute")
    if node.version < 9:
        return _prepare_scan8(g, node, body, infer)
    m = int(node.attr("num_scan_inputs", 0))
    n = len(node.inputs) - m
    k = len(body.outputs) - n
    if m < 1 or n < 0 or k < 0 or len(body.inputs) != n + m:
        raise ModelError(f"{describe(node)}: {len(node.inputs)} inputs with num_scan_inputs="
                         f"{m} do not match its body's {len(body.inputs)} inputs and "
                         f"{len(body.outputs)} outputs")
    states, scans = list(node.inputs[:n]), list(node.inputs[n:])
    if not all(states + scans):
        raise ModelError(f"{describe(node)}: an input is missing")
    in_axes = _axes(node, "scan_input_axes", m, [len(g.values[x].shape) for x in scans])
    counts = {g.values[x].shape[a] for x, a in zip(scans, in_axes)}
    if len(counts) != 1:
        raise ModelError(f"{describe(node)}: its scan inputs have different lengths "
                         f"{sorted(counts)} along their scan axes")
    types = {name: Value(name, g.values[x].dtype, g.values[x].shape)
             for name, x in zip(body.inputs[:n], states)}
    for name, x, a in zip(body.inputs[n:], scans, in_axes):
        v = g.values[x]
        types[name] = Value(name, v.dtype, v.shape[:a] + v.shape[a + 1:])
    sub, outer = _compile_body(g, node, body, list(body.inputs), types, infer)
    _check_carried(sub, body.inputs[:n], [g.values[x] for x in states], sub.outputs[:n])
    out_axes = _axes(node, "scan_output_axes", k,
                     [len(sub.values[o].shape) + 1 for o in sub.outputs[n:]])
    attrs = {"body": sub, "_outer": len(outer), "num_scan_inputs": m,
             "scan_input_axes": in_axes, "scan_output_axes": out_axes,
             "scan_input_directions": _directions(node, "scan_input_directions", m),
             "scan_output_directions": _directions(node, "scan_output_directions", k)}
    return Node(node.name, node.op_type, states + scans + outer, list(node.outputs), attrs,
                node.domain, node.version, list(node.fused), node.guard)


def _prepare_scan8(g: Graph, node: Node, body: Graph, infer: Callable[[Graph], Graph]
                   ) -> Node:
    """Scan-8 (ops/control_flow.py Scan8): inputs `sequence_lens` (optional), states [batch,
    ...], scan inputs [batch, sequence, ...]; the body sees one batch item's state and one
    step's slice. Its directions made explicit."""
    m = int(node.attr("num_scan_inputs", 0))
    lens, rest = node.input(0), list(node.inputs[1:])
    n = len(rest) - m
    k = len(body.outputs) - n
    if m < 1 or n < 0 or k < 0 or len(body.inputs) != n + m:
        raise ModelError(f"{describe(node)}: {len(node.inputs)} inputs with num_scan_inputs="
                         f"{m} do not match its body's {len(body.inputs)} inputs and "
                         f"{len(body.outputs)} outputs")
    states, scans = rest[:n], rest[n:]
    if not all(rest):
        raise ModelError(f"{describe(node)}: an input is missing")
    values = [g.values[x] for x in rest]
    for v, least in zip(values, [1] * n + [2] * m):
        if len(v.shape) < least:
            raise ModelError(f"{describe(node)}: {v.name!r} has shape {list(v.shape)}; Scan-8 "
                             f"needs a batch axis first{' and a sequence axis' * (least > 1)}")
        if not v.is_static or v.is_dynamic:
            raise UnsupportedError(f"{v.name!r} has shape {list(v.shape)}; mlcc runs Scan-8 "
                                   f"on static shapes only (give it a fixed --shape)")
    batches = sorted({int(v.shape[0]) for v in values})
    counts = sorted({int(v.shape[1]) for v in values[n:]})
    if len(batches) != 1 or len(counts) != 1:
        raise ModelError(f"{describe(node)}: its states and scan inputs have batch sizes "
                         f"{batches} and sequence lengths {counts}; Scan-8 needs one of each")
    if lens:
        v = g.values[lens]
        if v.dtype != "int64" or tuple(v.shape) != (batches[0],):
            raise ModelError(f"{describe(node)}: sequence_lens {lens!r} is {v.dtype} "
                             f"{list(v.shape)}, not int64 [{batches[0]}] (one per batch item)")
    directions = _directions(node, "directions", m)
    item = [Value(x.name, x.dtype, tuple(x.shape[1:])) for x in values[:n]]
    types = {name: Value(name, x.dtype, x.shape) for name, x in zip(body.inputs[:n], item)}
    types.update({name: Value(name, x.dtype, tuple(x.shape[2:]))
                  for name, x in zip(body.inputs[n:], values[n:])})
    sub, outer = _compile_body(g, node, body, list(body.inputs), types, infer)
    _check_carried(sub, body.inputs[:n], item, sub.outputs[:n])
    attrs = {"body": sub, "_outer": len(outer), "num_scan_inputs": m, "directions": directions}
    return Node(node.name, node.op_type, [lens] + states + scans + outer, list(node.outputs),
                attrs, node.domain, node.version, list(node.fused), node.guard)


def _axes(node: Node, key: str, count: int, ranks: list[int]) -> list[int]:
    axes = list(node.attr(key, [0] * count))
    if len(axes) != count:
        raise ModelError(f"{describe(node)}: {key} has {len(axes)} values for {count} tensors")
    for i, (a, r) in enumerate(zip(axes, ranks)):
        if not -r <= a < r:
            raise ModelError(f"{describe(node)}: {key}[{i}] = {a} is outside a rank-{r} "
                             f"tensor")
        axes[i] = a % r
    return axes


def _directions(node: Node, key: str, count: int) -> list[int]:
    dirs = list(node.attr(key, [0] * count))
    if len(dirs) != count or any(d not in (0, 1) for d in dirs):
        raise ModelError(f"{describe(node)}: {key} must be {count} values of 0 (forward) or "
                         f"1 (reverse), not {dirs}")
    return dirs


def _run_loop(g: Graph, node: Node, body: Graph, outer: dict[str, np.ndarray]
              ) -> list[np.ndarray]:
    """Loop's semantics, with onnx.reference running the body once per iteration (its own
    Loop stacks scan outputs with np.vstack, which is wrong for scalars and for rank > 1)."""
    trip = g.const(node.input(0)) if node.input(0) else None
    cond = g.const(node.input(1)) if node.input(1) else None
    carried = [g.const(n) for n in node.inputs[2:]]
    n_scan = len(body.outputs) - 1 - len(carried)
    if n_scan < 0 or len(body.inputs) != 2 + len(carried):
        raise ModelError(f"{describe(node)}: the body's inputs and outputs do not match the "
                         f"Loop's ({len(body.inputs)} inputs, {len(body.outputs)} outputs for "
                         f"{len(carried)} loop-carried values)")
    graph = to_onnx_graph(body, outer)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])
    try:
        run = reference.evaluator(model).run
    except Exception as exc:
        raise ModelError(f"{describe(node)}: its body cannot be evaluated: {exc}") from None
    limit = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    names = list(body.inputs)
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


def to_onnx_graph(sub: Graph, outer: dict[str, np.ndarray] | None = None) -> onnx.GraphProto:
    """An IR (sub)graph as ONNX, for onnx.reference; `outer` values become extra inputs.
    (Attributes that are empty lists are left out: ONNX cannot tell their type.)"""
    def info(name: str, dtype, shape):
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) if dtype else \
            onnx.TensorProto.UNDEFINED
        return helper.make_tensor_value_info(name, elem, shape)

    nodes = [helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name, domain=n.domain,
                              **{k: _attr_proto(v) for k, v in n.attrs.items()
                                 if not k.startswith("_") and not (isinstance(v, list) and
                                                                   not v)})
             for n in sub.nodes]
    inputs = [info(name, sub.values[name].dtype, sub.values[name].shape) for name in sub.inputs]
    inputs += [info(name, a.dtype, a.shape) for name, a in (outer or {}).items()]
    inits = [numpy_helper.from_array(np.asarray(v.const), k) for k, v in sub.values.items()
             if v.is_const and k not in sub.inputs]
    outputs = [info(o, None, None) for o in sub.outputs]
    return helper.make_graph(nodes, sub.name, inputs, outputs, inits)


def _attr_proto(v):
    if isinstance(v, np.ndarray):
        return numpy_helper.from_array(v)
    if isinstance(v, Graph):
        return to_onnx_graph(v)
    if isinstance(v, list) and v and isinstance(v[0], Graph):
        return [to_onnx_graph(x) for x in v]
    return v
