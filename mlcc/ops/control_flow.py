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

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, LoopScope, Node, Value
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
        body = node.attrs["body"]
        per = sum(d.flops(n, body) for n in body.nodes if (d := lookup(n)) is not None)
        return per * (loop_count(node, body, g) or 1)

    def lower(self, node: Node, lo: Lowering) -> None:
        body: Graph = node.attrs["body"]
        g = lo.graph
        n = carried_count(node)
        count = loop_count(node, body, g)
        rename: dict[str, str] = {}
        # the loop-carried values live in the Loop's outputs (or temporaries when unused)
        slots = []
        for k in range(n):
            init = node.input(2 + k)
            if not init:
                raise ModelError(f"{describe(node)}: loop-carried value {k} has no initial "
                                 f"value")
            v = g.values[init]
            slots.append(node.outputs[k] if k < len(node.outputs) and node.outputs[k] else
                         lo.temp(f"{node.name}/carried{k}", v.dtype, v.shape))
            rename[body.inputs[1 + k]] = slots[k]
            emit_plain_copy(lo, init, slots[k], op="Loop initial value")
        for inner, outer in zip(body.inputs[1 + n:], node.inputs[2 + n:]):
            rename[inner] = outer
        if count == 0:
            return
        scans = [(o, node.outputs[n + j] if n + j < len(node.outputs) else "")
                 for j, o in enumerate(body.outputs[1 + n:])]
        reads = {i for b in body.nodes for i in b.inputs} | set(body.outputs)
        iteration = ""
        if body.inputs[0] in reads or any(s for _, s in scans):
            iteration = lo.temp(f"{node.name}/iteration", "int64", ())
            rename[body.inputs[0]] = iteration
        cond = ""
        again = body.const(body.outputs[0])
        if count is None and node.input(1) and not (
                _true(g.const(node.input(1))) and _true(again)):
            cond = lo.temp(f"{node.name}/cond", "bool", ())
            emit_plain_copy(lo, node.input(1), cond, op="Loop condition")
        m = g.const(node.input(0))
        if count is not None:
            trip, limit = count, None
        elif m is not None:          # a constant trip count bounds a run-time condition
            trip, limit = max(0, int(np.asarray(m).reshape(-1)[0])), None
        else:
            trip = node.input(0) or None
            limit = int(lo.options.get("max_loop_iterations", DEFAULT_MAX_ITERATIONS))
        scope = LoopScope(node.name, iteration, trip, cond, limit)
        inside = node.guard + (scope,)
        for name, v in body.values.items():
            if name not in rename:
                rename[name] = g.fresh_name(name)
                g.values[rename[name]] = Value(rename[name], v.dtype, v.shape, v.const)
        for b in body.nodes:
            guard = inside + tuple(e if isinstance(e, LoopScope) else (rename[e[0]], e[1])
                                   for e in b.guard)
            inner = Node(f"{node.name}/{b.name}", b.op_type,
                         [rename[i] if i else i for i in b.inputs],
                         [rename[o] if o else o for o in b.outputs], dict(b.attrs), b.domain,
                         b.version, list(b.fused), guard)
            d = lookup(inner)
            if d is None:
                raise UnsupportedError(f"{describe(inner)} has no definition")
            lo.begin(inner)
            try:
                d.lower(inner, lo)
            except UnsupportedError as exc:
                raise UnsupportedError(f"{describe(inner)}: {exc.message}") from None
        lo.begin(Node(node.name, "Loop", [], [], guard=inside))
        for src, stacked in scans:
            if stacked:
                v = g.values[rename[src]]
                lo.call("mlcc_slice_store", [rename[src], stacked, iteration], [stacked],
                        params_type="mlcc_slice_params",
                        params={"outer": 1, "count": count, "inner_bytes": v.nbytes,
                                "reverse": 0},
                        returns_status=True, op="Loop scan output")
        # next values -> carried tensors; a next value that is another carried tensor (or
        # the condition) goes through a temporary, copied before any carried tensor changes
        pairs = [(rename[body.outputs[1 + k]], slots[k]) for k in range(n)]
        if cond:
            pairs.append((rename[body.outputs[0]], cond))
        written = {lo.program.root(dst) for _, dst in pairs}
        direct = []
        for src, dst in pairs:
            root = lo.program.root(src)
            if root == dst:
                continue
            if root in written:
                v = g.values[src]
                tmp = lo.temp(f"{dst}.next", v.dtype, v.shape)
                emit_plain_copy(lo, src, tmp, op="Loop next value")
                src = tmp
            direct.append((src, dst))
        for src, dst in direct:
            emit_plain_copy(lo, src, dst, op="Loop next value")


def _true(a) -> bool:
    return a is not None and bool(np.asarray(a).reshape(-1)[0])
