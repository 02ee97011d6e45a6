"""Loop groups: which consecutive kernel calls run their last parallel loops as one.

Independent calls that follow each other, such as the branches of an Inception block or a
fire module's 1x1 and 3x3 expand convolutions (both read the squeeze output and write their
own channels of the Concat), need not meet at a barrier after each call: their kernels hand
their last loop to a group (runtime_c/src/mlcc_internal.h, mlcc_loop_group), which runs the
units of all of them as one loop, shared out between the threads. The results are the bits
of the calls one after the other. A call joins a group when its kernel can
(KernelCall.groupable), it runs unconditionally on the pool, and it neither reads nor writes
bytes that another call of the group writes; the memory plan keeps everything a group's
calls touch, their scratch included, alive over the whole group (codegen/memory.py), and a
group that would make the arena larger is not made.
"""
from __future__ import annotations

from ..ir import Program
from ..ir.program import KernelCall
from ..ir.symbolic import upper
from .memory import plan_memory

GROUP_LOOPS = 4        # the loops a group keeps: MLCC_GROUP_LOOPS in mlcc_internal.h
CALLER = "#caller"     # the caller's input and output buffers, which may be the same memory


def loop_groups(prog: Program, caller_outputs: dict[str, int]) -> list[tuple[int, int]]:
    """(first, last) call indices of the runs of at least two calls that form loop groups,
    greedily in call order, each kept only where the arena stays as small as without groups
    (a group keeps its calls' scratch alive together: YOLOv8n's nine would take its arena
    from 4.1 to 5.0 MB). caller_outputs: the tensors written into the caller's output buffers
    and their positions (an output buffer may be an input's: no group both writes one and
    reads another)."""
    prog.groups = []
    limit = plan_memory(prog, caller_outputs).arena_size
    kept: list[tuple[int, int]] = []
    for span in sibling_runs(prog, set(caller_outputs)):
        prog.groups = kept + [span]
        if plan_memory(prog, caller_outputs).arena_size <= limit:
            kept.append(span)
    prog.groups = []
    return kept


def sibling_runs(prog: Program, caller_outputs: set[str]) -> list[tuple[int, int]]:
    """The runs of at least two consecutive calls that may form loop groups, greedily in call
    order, whatever the arena."""
    spans: list[tuple[int, int]] = []
    t = 0
    while t < len(prog.calls):
        members = [t]
        while (len(members) < GROUP_LOOPS and members[-1] + 1 < len(prog.calls)
               and _joins(prog, caller_outputs, members, members[-1] + 1)):
            members.append(members[-1] + 1)
        if len(members) > 1:
            spans.append((members[0], members[-1]))
        t = members[-1] + 1
    return spans


def _candidate(call: KernelCall) -> bool:
    return (call.groupable and call.pool and not call.guard and not call.returns_status
            and not call.in_place)


def _joins(prog: Program, caller_outputs: set[str], members: list[int], t: int) -> bool:
    calls = prog.calls
    if not _candidate(calls[t]) or not _candidate(calls[members[0]]):
        return False
    new_w, new_all = _ranges(prog, caller_outputs, calls[t])
    for m in members:
        w, everything = _ranges(prog, caller_outputs, calls[m])
        if _overlap(new_w, everything) or _overlap(w, new_all):
            return False
    return True


def _ranges(prog: Program, caller_outputs: set[str], call: KernelCall):
    """The byte ranges (root, start, end) a call writes, and all it touches; constants are
    never written and left out; the caller's buffers count as one range (CALLER)."""
    g = prog.graph

    def span(name: str):
        root = prog.root(name)
        if root in g.inputs or root in caller_outputs:
            return (CALLER, 0, 1)
        start = prog.byte_offset(name)
        return (root, start, start + upper(g.values[name].nbytes))

    names = [a for a in call.args if a and not g.values[prog.root(a)].is_const]
    return [span(a) for a in call.writes if a in names], [span(a) for a in names]


def _overlap(a, b) -> bool:
    return any(r == s and x0 < y1 and y0 < x1 for r, x0, x1 in a for s, y0, y1 in b)
