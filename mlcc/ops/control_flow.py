"""Loop run at run time: a C loop around the compiled body.

passes/control_flow.py `prepare_loop` turns a Loop that cannot fold into this form: its body
compiled on its own (static types, the whole pass pipeline), every value it reads from outside
made an explicit input (node inputs `M, cond, initial values..., outer values...`; body inputs
`iteration, carried values..., outer values...`, the body's condition input being the constant
true, which it is whenever the body runs), `attrs["_outer"]` counting the outer values.

Lowering puts the body's kernel calls inside a LoopScope (the C writer's `for`):

- each loop-carried value has one tensor, the Loop's output, written once from its initial
  value before the loop, read by the body, and written again at the end of every iteration
  from the body's output (through a temporary where one carried value is another's next
  value), so its final value is the Loop's output with no copy after the loop;
- each scan output's slice of the iteration is stored into the stacked output
  (`mlcc_slice_store`, indexed by the iteration number) before the carried values change;
- the condition, when it is known only at run time, is a bool tensor the loop header tests;
- a trip count or condition known only at run time is bounded: more iterations than the limit
  (`max_loop_iterations`, default DEFAULT_MAX_ITERATIONS) return MLCC_ERR_LOOP_LIMIT.

The memory plan keeps every tensor alive across the loop's start or end alive through the
whole loop (codegen/memory.py), so body temporaries never overwrite them.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import PACKED_BITS, Graph, Lowering, LoopScope, Node, Value
from .common import emit_plain_copy
from .registry import OpDef, describe, lookup, register

DEFAULT_MAX_ITERATIONS = 1_000_000


def carried_count(node: Node) -> int:
    """How many loop-carried values a prepared Loop has."""
    return len(node.inputs) - 2 - node.attrs["_outer"]


def loop_count(node: Node, body: Graph, g: Graph) -> int | None:
    """The number of iterations when it is known at compile time (constant trip count, and
    no condition or one that is constant and stays true), else None. `body` is compiled (its
    condition output folded when it is constant)."""
    trip = g.const(node.input(0))
    if node.input(0) and trip is None:
        return None
    if node.input(1):
        cond = g.const(node.input(1))
        if cond is None:
            return None
        if not bool(np.asarray(cond).reshape(-1)[0]):
            return 0
        again = body.const(body.outputs[0])
        if again is None:
            return None
        if not bool(np.asarray(again).reshape(-1)[0]):
            return 1 if trip is None else min(1, max(0, int(np.asarray(trip).reshape(-1)[0])))
    if trip is None:
        return None
    return max(0, int(np.asarray(trip).reshape(-1)[0]))


@register("Loop", since=1)
class Loop(OpDef):
    attributes = {"body": None, "_outer": None}

    def infer(self, node, inputs, g):
        body = node.attrs["body"]
        n = carried_count(node)
        count = loop_count(node, body, g)
        types = [(v.dtype, v.shape) for v in inputs[2:2 + n]]
        for name in body.outputs[1 + n:]:
            if count is None:     # prepare_loop refuses this first
                raise UnsupportedError("scan outputs need a number of iterations known at "
                                       "compile time")
            v = body.values[name]
            types.append((v.dtype, (count,) + tuple(v.shape)))
        return types

    def flops(self, node, g):
        return body_flops(node.attrs["body"]) * (loop_count(node, node.attrs["body"], g) or 1)

    def lower(self, node: Node, lo: Lowering) -> None:
        body: Graph = node.attrs["body"]
        g = lo.graph
        n = carried_count(node)
        count = loop_count(node, body, g)
        cond = ""
        if count is None and node.input(1) and not (
                _true(g.const(node.input(1))) and _true(body.const(body.outputs[0]))):
            cond = node.input(1)
        m = g.const(node.input(0))
        if count is not None:
            trip, limit = count, None
        elif m is not None:          # a constant trip count bounds a run-time condition
            trip, limit = max(0, int(np.asarray(m).reshape(-1)[0])), None
        else:
            trip = node.input(0) or None
            limit = int(lo.options.get("max_loop_iterations", DEFAULT_MAX_ITERATIONS))
        stores = [(o, node.outputs[n + j] if n + j < len(node.outputs) else "", 0, False)
                  for j, o in enumerate(body.outputs[1 + n:])]
        emit_loop(node, lo, Body(body, body.inputs[0], body.inputs[1:1 + n],
                                 body.outputs[1:1 + n], node.inputs[2:2 + n], stores=stores,
                                 cond=(cond, body.outputs[0]) if cond else None),
                  trip, limit)


@register("Scan", since=9)
class Scan(OpDef):
    attributes = {"body": None, "_outer": None, "num_scan_inputs": None,
                  "scan_input_axes": None, "scan_output_axes": None,
                  "scan_input_directions": None, "scan_output_directions": None}

    @staticmethod
    def _parts(node: Node, g: Graph):
        """(states, scan inputs, the number of iterations) of a prepared Scan."""
        m = node.attrs["num_scan_inputs"]
        ins = node.inputs[:len(node.inputs) - node.attrs["_outer"]]
        n = len(ins) - m
        first = g.values[ins[n]]
        return ins[:n], ins[n:], first.shape[node.attrs["scan_input_axes"][0]]

    def infer(self, node, inputs, g):
        body = node.attrs["body"]
        states, _, count = self._parts(node, g)
        types = [(inputs[k].dtype, inputs[k].shape) for k in range(len(states))]
        for name, axis in zip(body.outputs[len(states):], node.attrs["scan_output_axes"]):
            v = body.values[name]
            types.append((v.dtype, tuple(v.shape[:axis]) + (count,) + tuple(v.shape[axis:])))
        return types

    def flops(self, node, g):
        return body_flops(node.attrs["body"]) * self._parts(node, g)[2]

    def lower(self, node: Node, lo: Lowering) -> None:
        body: Graph = node.attrs["body"]
        states, scans, count = self._parts(node, lo.graph)
        n = len(states)
        a = node.attrs
        loads = [(x, name, axis, bool(d)) for x, name, axis, d in zip(
            scans, body.inputs[n:], a["scan_input_axes"], a["scan_input_directions"])]
        stores = [(o, node.outputs[n + j] if n + j < len(node.outputs) else "", axis, bool(d))
                  for j, (o, axis, d) in enumerate(zip(body.outputs[n:], a["scan_output_axes"],
                                                       a["scan_output_directions"]))]
        emit_loop(node, lo, Body(body, "", body.inputs[:n], body.outputs[:n], states,
                                 loads=loads, stores=stores), count, None)


@register("Scan", since=8, until=8)
class Scan8(OpDef):
    """Scan-8: every state, scan input and scan output has a batch axis first, and a scan
    input's sequence axis second; each sequence of the batch runs the body on its own, for
    its length in the optional `sequence_lens` (int64 [batch]; steps past it give zeros in
    the scan outputs), reading each scan input forward or, in `directions`, backward from
    its last valid step. prepare_scan makes the node `sequence_lens or "", states...,
    scan inputs..., outer values...`. Lowered as two C loops: over the batch, then over the
    steps."""
    attributes = {"body": None, "_outer": None, "num_scan_inputs": None, "directions": None}

    @staticmethod
    def _parts(node: Node, g: Graph):
        """(states, scan inputs, batch size, sequence length) of a prepared Scan-8."""
        m = node.attrs["num_scan_inputs"]
        ins = node.inputs[1:len(node.inputs) - node.attrs["_outer"]]
        n = len(ins) - m
        shape = g.values[ins[n]].shape
        return ins[:n], ins[n:], int(shape[0]), int(shape[1])

    def infer(self, node, inputs, g):
        body = node.attrs["body"]
        states, _, batch, count = self._parts(node, g)
        types = [(inputs[1 + k].dtype, inputs[1 + k].shape) for k in range(len(states))]
        for name in body.outputs[len(states):]:
            v = body.values[name]
            types.append((v.dtype, (batch, count) + tuple(v.shape)))
        return types

    def flops(self, node, g):
        _, _, batch, count = self._parts(node, g)
        return body_flops(node.attrs["body"]) * batch * count

    def lower(self, node: Node, lo: Lowering) -> None:
        body: Graph = node.attrs["body"]
        g = lo.graph
        lens = node.input(0)
        states, scans, batch, count = self._parts(node, g)
        n = len(states)
        outs = [node.outputs[j] if j < len(node.outputs) else "" for j in range(len(body.outputs))]
        if batch == 0:
            return
        if lens:     # every length checked, and the steps past it zero, before anything runs
            for out in [o for o in outs[n:] if o] or [""]:
                v = g.values[out or scans[0]]
                lo.call("mlcc_sequence_pad", [lens, out], [out] if out else [],
                        params_type="mlcc_sequence_params",
                        params=sequence_params(v.shape, False, v.dtype), returns_status=True,
                        op="Scan sequence_lens")
        item = lo.temp(f"{node.name}/item", "int64", ())
        around = node.guard + (LoopScope(f"{node.name} (batch)", item, batch),)
        lo.begin(Node(node.name, node.op_type, [], [], guard=around))
        slots = []
        for k, x in enumerate(states):
            v = g.values[x]
            slots.append(lo.temp(f"{node.name}/state{k}", v.dtype, v.shape[1:]))
            lo.call("mlcc_slice_load", [x, slots[k], item], [slots[k]],
                    params_type="mlcc_slice_params",
                    params=slice_params(v.shape, 0, False, v.dtype), returns_status=True,
                    op="Scan initial value")
        length = ""      # this item's number of steps, read at run time
        if lens:
            length = lo.temp(f"{node.name}/length", "int64", ())
            lo.call("mlcc_slice_load", [lens, length, item], [length],
                    params_type="mlcc_slice_params",
                    params=slice_params(g.values[lens].shape, 0, False, "int64"),
                    returns_status=True, op="Scan sequence length")
        directions = node.attrs["directions"]

        def loads(step: str, rename: dict[str, str]) -> None:
            for x, name, reverse in zip(scans, body.inputs[n:], directions):
                v = g.values[x]
                lo.call("mlcc_sequence_load", [x, rename[name], item, step, length],
                        [rename[name]], params_type="mlcc_sequence_params",
                        params=sequence_params(v.shape, bool(reverse), v.dtype),
                        returns_status=True, op="Scan scan input")

        def stores(step: str, rename: dict[str, str]) -> None:
            for o, out in zip(body.outputs[n:], outs[n:]):
                if out:
                    v = g.values[out]
                    lo.call("mlcc_sequence_store", [rename[o], out, item, step], [out],
                            params_type="mlcc_sequence_params",
                            params=sequence_params(v.shape, False, v.dtype),
                            returns_status=True, op="Scan scan output")

        b = Body(body, "", body.inputs[:n], body.outputs[:n], states,
                 loads=[(x, name, 1, bool(d)) for x, name, d in zip(scans, body.inputs[n:],
                                                                   directions)])
        iterate(node, lo, b, slots, length or count, None, around, loads, stores)
        lo.begin(Node(node.name, node.op_type, [], [], guard=around))
        for slot, out in zip(slots, outs[:n]):
            if out:
                v = g.values[out]
                lo.call("mlcc_slice_store", [slot, out, item], [out],
                        params_type="mlcc_slice_params",
                        params=slice_params(v.shape, 0, False, v.dtype), returns_status=True,
                        op="Scan final value")


class Body:
    """What emit_loop needs to know of a prepared Loop or Scan: its compiled body, which body
    inputs are the iteration number and the carried values, which body outputs their next
    values, the initial values; the scan inputs read per iteration (parent tensor, body
    input, axis, reversed) and the scan outputs stored per iteration (body output, parent
    tensor or "", axis, reversed); the run-time condition (its initial value, the body output
    of its next value)."""

    def __init__(self, graph: Graph, iteration: str, carried: list[str], nexts: list[str],
                 initial: list[str], loads=(), stores=(), cond=None):
        self.graph, self.iteration, self.carried, self.nexts = graph, iteration, carried, nexts
        self.initial, self.loads, self.stores, self.cond = initial, list(loads), list(stores), cond


def slice_params(shape, axis: int, reverse: bool, dtype: str) -> dict:
    """mlcc_slice_params of the slices of a stacked tensor along `axis`."""
    if dtype in PACKED_BITS:
        raise UnsupportedError(f"a {dtype} scan input or output is not supported (several "
                               f"elements per byte)")
    return {"outer": int(np.prod(shape[:axis], dtype=np.int64)), "count": int(shape[axis]),
            "inner_bytes": int(np.prod(shape[axis + 1:], dtype=np.int64)) *
            np.dtype(dtype).itemsize, "reverse": int(reverse)}


def sequence_params(shape, reverse: bool, dtype: str) -> dict:
    """mlcc_sequence_params of a Scan-8 tensor [batch, sequence, ...]."""
    if dtype in PACKED_BITS:
        raise UnsupportedError(f"a {dtype} scan input or output is not supported (several "
                               f"elements per byte)")
    return {"items": int(shape[0]), "count": int(shape[1]),
            "inner_bytes": int(np.prod(shape[2:], dtype=np.int64)) * np.dtype(dtype).itemsize,
            "reverse": int(reverse)}


def emit_loop(node: Node, lo: Lowering, b: Body, trip, limit) -> None:
    """The calls of a run-time Loop or Scan: initial values into the carried tensors (the
    node's outputs, or temporaries where an output is unused), then inside a LoopScope the
    scan inputs' slices, the body's calls, the scan outputs' slices and the next values."""
    g = lo.graph
    slots = []
    for k, (name, init) in enumerate(zip(b.carried, b.initial)):
        if not init:
            raise ModelError(f"{describe(node)}: loop-carried value {k} has no initial value")
        v = g.values[init]
        slots.append(node.outputs[k] if k < len(node.outputs) and node.outputs[k] else
                     lo.temp(f"{node.name}/carried{k}", v.dtype, v.shape))
        emit_plain_copy(lo, init, slots[k], op=f"{node.op_type} initial value")

    def loads(iteration: str, rename: dict[str, str]) -> None:
        for src, name, axis, reverse in b.loads:
            v = g.values[src]
            lo.call("mlcc_slice_load", [src, rename[name], iteration], [rename[name]],
                    params_type="mlcc_slice_params",
                    params=slice_params(v.shape, axis, reverse, v.dtype), returns_status=True,
                    op=f"{node.op_type} scan input")

    def stores(iteration: str, rename: dict[str, str]) -> None:
        for src, stacked, axis, reverse in b.stores:
            if stacked:
                v = g.values[stacked]
                lo.call("mlcc_slice_store", [rename[src], stacked, iteration], [stacked],
                        params_type="mlcc_slice_params",
                        params=slice_params(v.shape, axis, reverse, v.dtype),
                        returns_status=True, op=f"{node.op_type} scan output")

    iterate(node, lo, b, slots, trip, limit, node.guard, loads, stores)


def iterate(node: Node, lo: Lowering, b: Body, slots: list[str], trip, limit, around: tuple,
            loads: Callable[[str, dict], None], stores: Callable[[str, dict], None]) -> None:
    """The C loop of a Loop or Scan whose carried values live in `slots` (already holding
    their initial values), inside the blocks of `around`: loads(iteration, rename) emits the
    scan inputs' slices, the body's calls follow, stores(iteration, rename) emits the scan
    outputs' slices, then the next values go into the slots. `rename` maps the body's names
    to the parent's; `iteration` is the int64 scalar holding the iteration number."""
    body, g = b.graph, lo.graph
    n = len(b.carried)
    rename: dict[str, str] = dict(zip(b.carried, slots))
    n_outer = node.attrs["_outer"]
    if n_outer:
        for inner, outer in zip(body.inputs[-n_outer:], node.inputs[-n_outer:]):
            rename[inner] = outer
    if trip == 0:
        return
    reads = {i for x in body.nodes for i in x.inputs} | set(body.outputs)
    iteration = ""
    if (b.iteration and b.iteration in reads) or b.loads or any(t for _, t, _, _ in b.stores):
        iteration = lo.temp(f"{node.name}/iteration", "int64", ())
        if b.iteration:
            rename[b.iteration] = iteration
    cond = ""
    if b.cond:
        cond = lo.temp(f"{node.name}/cond", "bool", ())
        lo.begin(Node(node.name, node.op_type, [], [], guard=around))
        emit_plain_copy(lo, b.cond[0], cond, op=f"{node.op_type} condition")
    scope = LoopScope(node.name, iteration, trip, cond, limit)
    inside = around + (scope,)
    for name, v in body.values.items():
        if name not in rename:
            rename[name] = g.fresh_name(name)
            g.values[rename[name]] = Value(rename[name], v.dtype, v.shape, v.const)
    lo.begin(Node(node.name, node.op_type, [], [], guard=inside))
    loads(iteration, rename)
    for x in body.nodes:
        guard = inside + tuple(e if isinstance(e, LoopScope) else (rename[e[0]], e[1])
                               for e in x.guard)
        inner = Node(f"{node.name}/{x.name}", x.op_type,
                     [rename[i] if i else i for i in x.inputs],
                     [rename[o] if o else o for o in x.outputs], dict(x.attrs), x.domain,
                     x.version, list(x.fused), guard)
        lo.lower_node(inner)
    lo.begin(Node(node.name, node.op_type, [], [], guard=inside))
    stores(iteration, rename)
    # next values -> carried tensors; a next value that is another carried tensor (or the
    # condition) goes through a temporary, copied before any carried tensor changes
    pairs = [(rename[b.nexts[k]], slots[k]) for k in range(n)]
    if cond:
        pairs.append((rename[b.cond[1]], cond))
    written = {lo.program.root(dst) for _, dst in pairs}
    direct = []
    for src, dst in pairs:
        root = lo.program.root(src)
        if root == dst:
            continue
        if root in written:
            v = g.values[src]
            tmp = lo.temp(f"{dst}.next", v.dtype, v.shape)
            emit_plain_copy(lo, src, tmp, op=f"{node.op_type} next value")
            src = tmp
        direct.append((src, dst))
    for src, dst in direct:
        emit_plain_copy(lo, src, dst, op=f"{node.op_type} next value")


def body_flops(body: Graph) -> int:
    """The floating-point operations of one iteration."""
    return sum(d.flops(n, body) for n in body.nodes if (d := lookup(n)) is not None)


def _true(a) -> bool:
    return a is not None and bool(np.asarray(a).reshape(-1)[0])
