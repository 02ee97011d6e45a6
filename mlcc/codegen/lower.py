"""Graph -> Program: each node lowers through its OpDef; graph outputs get their buffers."""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Graph, Lowering, Program
from ..ir.symbolic import SymInt, dim_vars
from ..ops import lookup
from ..ops.common import emit_plain_copy
from ..ops.registry import describe, static_only


def _check_no_symbolic_data(prog: Program, calls) -> None:
    """A constant a kernel reads must be numbers: a shape over dynamic sizes (an object array
    of SymInts, passes/fold_symbolic.py) is known only at run time."""
    for call in calls:
        for a in call.args:
            v = prog.graph.values.get(prog.root(a)) if a else None
            if v is not None and v.is_const and v.const.dtype == object:
                dims = dim_vars(list(v.const.reshape(-1)))
                raise SymInt.var(dims[0]).undecided(f"the value of {v.name!r} (a shape) at "
                                                    f"run time")


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
        first = len(prog.calls)
        try:
            d.lower(node, lo)
            _check_no_symbolic_data(prog, prog.calls[first:])
        except UnsupportedError as exc:
            raise UnsupportedError(f"{describe(node)}: {exc.message}") from None
        except TypeError as exc:        # numpy refusing a SymInt (ops/registry.py)
            raise static_only(node, [g.values.get(n) for n in node.inputs + node.outputs if n],
                              exc) from None
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
