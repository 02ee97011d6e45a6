"""Graph -> Program: each node lowers through its OpDef; graph outputs get their buffers."""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Graph, LoopScope, Lowering, Program
from ..ops import lookup
from ..ops.common import emit_plain_copy
from ..ops.registry import describe


def lower_graph(g: Graph, options: dict | None = None) -> tuple[Program, dict[str, int]]:
    """The program, and which tensors are written straight into which output buffer.
    options: the target's lowering choices (Lowering.options)."""
    g = g.copy()
    prog = Program(g)
    lo = Lowering(prog, options)
    lo.lower_node = lambda node: _lower_node(node, lo)
    for node in g.nodes:
        _lower_node(node, lo)
    lo.begin(None)
    slots: dict[str, int] = {}
    early = _written_before_inputs_are_read(prog)
    copies: list[tuple[str, str]] = []
    for j, name in enumerate(g.outputs):
        root = prog.root(name)
        v = g.values[root]
        if name == root and not v.is_const and name not in g.inputs and name not in slots \
                and name not in early:
            slots[name] = j
            continue
        # A constant, a graph input, a view, a repeated output, or one written before the
        # last read of an input (which the caller's output buffer may be: an input state
        # updated in place): computed in the arena, copied into the caller's buffer last.
        slot = lo.temp(f"{name}.output{j}", v.dtype, v.shape)
        copies.append((name, slot))
        slots[slot] = j
    # the copies that read inputs go first: the others may write an input's memory
    copies.sort(key=lambda c: prog.root(c[0]) not in g.inputs)
    for name, slot in copies:
        emit_plain_copy(lo, name, slot, op="output copy")
    return prog, slots


def _lower_node(node, lo: Lowering) -> None:
    """One node's calls, through its OpDef (a Loop's lowers its body's nodes here too)."""
    d = lookup(node)
    if d is None:
        raise UnsupportedError(f"{describe(node)} has no definition")
    lo.begin(node)
    try:
        d.lower(node, lo)
    except UnsupportedError as exc:
        raise UnsupportedError(f"{describe(node)}: {exc.message}") from None


# Kernels that read element i of their inputs before writing element i of their output, and
# nothing else at i: an input that is exactly the output's memory is read before it is written
# (mlcc_f32_unary copies with memmove, and only when y != x).
IN_PLACE_SAFE = {"mlcc_f32_unary", "mlcc_f32_binary"}


def _written_before_inputs_are_read(prog: Program) -> set[str]:
    """The tensors that would be written into the memory of an input of the same size while
    the input is still to be read: at a call before its last read (a read inside a loop counts
    until the loop's end), or at that call unless the kernel is IN_PLACE_SAFE. The C API
    allows an output to be the very memory of an input (a state updated in place:
    docs/c-api.md), so such an output is computed in the arena and copied into the caller's
    buffer at the end. Run-time If conditions and loop headers count as reads of every call
    they guard."""
    g = prog.graph
    loop_end: dict[LoopScope, int] = {}
    for t, call in enumerate(prog.calls):
        for e in call.guard:
            if isinstance(e, LoopScope):
                loop_end[e] = t
    last_read: dict[str, int] = {}
    for t, call in enumerate(prog.calls):
        reads = [a for a in call.args if a and a not in call.writes] + prog.guard_tensors(call)
        end = max([t] + [loop_end[e] for e in call.guard if isinstance(e, LoopScope)])
        for a in reads:
            if prog.root(a) in g.inputs:
                last_read[prog.root(a)] = end
    size = {i: g.values[i].nbytes for i in last_read}
    early = set()
    for t, call in enumerate(prog.calls):
        for w in call.writes:
            root = prog.root(w) if w else ""
            if root and any(g.values[root].nbytes == size[i] and
                            (t < r or (t == r and call.kernel not in IN_PLACE_SAFE))
                            for i, r in last_read.items()):
                early.add(root)
    return early
