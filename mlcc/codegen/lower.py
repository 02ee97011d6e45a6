"""Graph -> Program: each node lowers through its OpDef; graph outputs get their buffers."""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Graph, Lowering, Program
from ..ops import lookup
from ..ops.common import emit_plain_copy
from ..ops.registry import describe


def lower_graph(g: Graph, options: dict | None = None) -> tuple[Program, dict[str, int]]:
    """The program, and which tensors are written straight into which output buffer.
    options: the target's lowering choices (Lowering.options)."""
    g = g.copy()
    prog = Program(g)
    lo = Lowering(prog, options)
    for node in g.nodes:
        d = lookup(node)
        if d is None:
            raise UnsupportedError(f"{describe(node)} has no definition")
        lo.begin(node)
        try:
            d.lower(node, lo)
        except UnsupportedError as exc:
            raise UnsupportedError(f"{describe(node)}: {exc.message}") from None
    lo.begin(None)
    slots: dict[str, int] = {}
    for j, name in enumerate(g.outputs):
        root = prog.root(name)
        v = g.values[root]
        if name == root and not v.is_const and name not in g.inputs and name not in slots:
            slots[name] = j
            continue
        # A constant, a graph input, a view or a repeated output: copy into the caller's buffer.
        slot = lo.temp(f"{name}.output{j}", v.dtype, v.shape)
        emit_plain_copy(lo, name, slot, op="output copy")
        slots[slot] = j
    return prog, slots
