"""Graph -> Program: each node lowers through its OpDef; graph outputs get their buffers."""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Graph, LoopScope, Lowering, Program
from ..ir.symbolic import SymbolicError, SymInt, dim_vars
from ..ops import lookup
from ..ops.common import emit_plain_copy
from ..ops.compile_time import size_values
from ..ops.registry import describe, static_only
from .groups import loop_groups


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


def _compute_sizes_read_as_data(lo: Lowering, first: int) -> None:
    """The calls from `first` on that read a shape over the dynamic sizes as data read it from
    a tensor that calls just before them compute (ops/compile_time.py's size_values)."""
    prog = lo.program
    calls = prog.calls[first:]
    symbolic = sorted({a for call in calls for a in call.args if a and
                       prog.graph.values[a].is_const and
                       prog.graph.values[a].const.dtype == object})
    if not symbolic:
        return
    computed = {name: size_values(lo, name) for name in symbolic}
    made = prog.calls[first + len(calls):]
    del prog.calls[first + len(calls):]
    prog.calls[first:first] = made
    for call in calls:
        call.args = [computed.get(a, a) for a in call.args]


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
    if lo.options.get("threads"):      # a runtime without threads runs every loop at once
        prog.groups = loop_groups(prog, slots)
    for name, _ in copies:        # a shape over dynamic sizes as an output: values at run time
        v = g.values[prog.root(name)]
        if v.is_const and v.const.dtype == object:
            raise SymInt.var(dim_vars(list(v.const.reshape(-1)))[0]).undecided(
                f"graph output {name!r}, a value computed from the sizes,")
    return prog, slots


def _lower_node(node, lo: Lowering) -> None:
    """One node's calls, through its OpDef (a Loop's lowers its body's nodes here too)."""
    d = lookup(node)
    if d is None:
        raise UnsupportedError(f"{describe(node)} has no definition")
    lo.begin(node)
    first = len(lo.program.calls)
    try:
        d.lower(node, lo)
        _compute_sizes_read_as_data(lo, first)
        _check_no_symbolic_data(lo.program, lo.program.calls[first:])
    except UnsupportedError as exc:
        raise UnsupportedError(f"{describe(node)}: {exc.message}") from None
    except TypeError as exc:        # numpy refusing a SymInt (ops/registry.py)
        g = lo.graph
        raise static_only(node, [g.values.get(n) for n in node.inputs + node.outputs if n],
                          exc) from None


# Kernels that read element i of their inputs before writing element i of their output, and
# nothing else at i: an input that is exactly the output's memory is read before it is written
# (mlcc_f32_unary copies with memmove, and only when y != x).
IN_PLACE_SAFE = {"mlcc_f32_unary", "mlcc_f32_binary"}


def _same_size(a, b) -> bool:
    """Whether two sizes are equal; of a range model (SymInts), whether they are the same
    expression of the dynamic sizes: a state updated in place has its input's very shape, and
    sizes that differ as expressions but could meet at some sizes do not count."""
    try:
        return a == b
    except SymbolicError:
        return False


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
            if root and any(_same_size(g.values[root].nbytes, size[i]) and
                            (t < r or (t == r and call.kernel not in IN_PLACE_SAFE))
                            for i, r in last_read.items()):
                early.add(root)
    return early
