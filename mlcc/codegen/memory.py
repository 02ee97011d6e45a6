"""Static memory planning: every run-time tensor gets an offset in one arena.

Tensors whose lifetimes (first write .. last read, in call order) overlap never share bytes;
others may. Placement is greedy by size (largest first, each at the lowest offset that fits
between already placed tensors alive at the same time), which is deterministic and within a few
percent of optimal on CNNs. Graph inputs and outputs live in the caller's buffers and constants
in the weight blob, so neither takes arena space.

The calls of a loop group (codegen/groups.py) run their last loops together at its end:
what each of them touches, its scratch included, is alive from the group's first call to its
last.

A call may let its output take the bytes of an input (KernelCall.in_place: an element-wise
add, a same-size convolution that reads its input rows before it writes them): where that
input is read by no later call, the output shares its storage (the residual Add of a ResNet
writes over its skip input, so the peak holds one block's tensor less).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MlccError, UnsupportedError
from ..ir import LoopScope, Program
from ..ir.program import TENSOR_ALIGN as ALIGN
from ..ir.symbolic import upper


@dataclass
class Storage:
    kind: str        # "input", "output", "weights", "arena"
    index: int       # input/output position, or byte offset in weights/arena


@dataclass
class MemoryPlan:
    storage: dict[str, Storage]                 # every tensor name -> where its bytes are
    scratch: dict[int, int]                     # call index -> arena offset of its scratch
    arena_size: int
    total_intermediate: int                     # what the arena would be without any reuse
    live_bytes: list[int] = field(default_factory=list)   # arena bytes live at each call

    def peak_calls(self, n: int = 3) -> list[int]:
        order = sorted(range(len(self.live_bytes)), key=lambda i: (-self.live_bytes[i], i))
        return order[:n]


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(prog: Program, output_slots: dict[str, int]) -> MemoryPlan:
    """`output_slots` maps the tensors written straight into the caller's output buffers to
    their output positions."""
    g = prog.graph
    storage: dict[str, Storage] = {}
    for i, name in enumerate(g.inputs):
        storage[name] = Storage("input", i)
    for name, slot in output_slots.items():
        storage[name] = Storage("output", slot)

    # Lifetimes of the arena-resident tensors (by storage root), plus one per call's scratch.
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for t, call in enumerate(prog.calls):
        for name in list(call.args) + prog.guard_tensors(call):
            if not name:
                continue
            root = prog.root(name)
            if root in storage or g.values[root].is_const:
                continue
            first.setdefault(root, t)
            last[root] = t
    _extend_over_loops(prog, first, last)
    in_group = {}      # call index -> the (first, last) calls of its loop group
    for lo, hi in prog.groups:
        # the calls' deferred loops run at the group's end: all they touch is alive throughout
        for t in range(lo, hi + 1):
            in_group[t] = (lo, hi)
            for name in prog.calls[t].args:
                root = prog.root(name) if name else None
                if root in first:
                    first[root], last[root] = min(first[root], lo), max(last[root], hi)
    for name in prog.counts.values():   # read after the run (NAME_output_shape): kept
        if name in first:
            last[name] = len(prog.calls) - 1
    shared = _share_in_place(prog, first, last)
    # A tensor of a dynamic size gets room for its largest size: each size is monotone in the
    # dynamic dimensions, so the plan for the largest sizes holds for all smaller ones.
    items = [(name, _align(upper(g.values[name].nbytes)), first[name], last[name])
             for name in first if name not in shared]
    items += [(f"#scratch{t}", _align(c.scratch_bytes), *in_group.get(t, (t, t)))
              for t, c in enumerate(prog.calls) if c.scratch_bytes]

    placed: list[tuple[int, int, int, int]] = []     # (offset, size, first, last)
    offsets: dict[str, int] = {}
    for name, size, lo, hi in sorted(items, key=lambda it: (-it[1], it[2], it[0])):
        busy = sorted((o, s) for o, s, f, l in placed if not (l < lo or hi < f))
        offset = 0
        for o, s in busy:
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        placed.append((offset, size, lo, hi))
        offsets[name] = offset
    arena = max((o + s for o, s, _, _ in placed), default=0)

    for name, off in offsets.items():
        if not name.startswith("#"):
            storage[name] = Storage("arena", off)
    for name, owner in shared.items():
        storage[name] = storage[owner]
    scratch = {int(n[8:]): off for n, off in offsets.items() if n.startswith("#scratch")}
    live = [sum(s for _, s, f, l in placed if f <= t <= l) for t in range(len(prog.calls))]
    total = sum(size for _, size, _, _ in items)
    return MemoryPlan(storage, scratch, arena, total, live)


def _share_in_place(prog: Program, first: dict[str, int], last: dict[str, int]
                    ) -> dict[str, str]:
    """The outputs that take their input's storage (KernelCall.in_place), each mapped to the
    tensor that owns the bytes; first / last become the owner's whole lifetime. Only where
    both are arena tensors (not the caller's inputs or outputs), the output is first written
    by this call and is no larger, the input (with everything already sharing its bytes) is
    read last here, and the call runs unconditionally (no guard, no loop). Not where either
    is a slice of a larger tensor (Program.slices): the kernel's promise holds for the very
    same bytes, not for an output that starts elsewhere or is smaller than what it views."""
    g = prog.graph
    shared: dict[str, str] = {}
    for t, call in enumerate(prog.calls):
        if call.guard:
            continue
        for out, inp in call.in_place:
            if prog.is_slice(out) or prog.is_slice(inp):
                continue
            o, i = prog.root(out), prog.root(inp)
            i = shared.get(i, i)
            if (o not in first or i not in first or o in shared or o == i
                    or first[o] != t or last[i] != t
                    or upper(g.values[o].nbytes) > upper(g.values[i].nbytes)):
                continue
            shared[o] = i
            last[i] = last[o]
    return shared


def _extend_over_loops(prog: Program, first: dict[str, int], last: dict[str, int]) -> None:
    """A tensor alive across the start or end of a run-time loop (read inside and written
    before it, or written inside and read after) is alive through the whole loop, every
    iteration: nothing the loop's calls write may share its bytes. Tensors alive only
    within one iteration keep their lifetime and are reused by the next iteration."""
    regions: dict[LoopScope, list[int]] = {}
    for t, call in enumerate(prog.calls):
        for e in call.guard:
            if isinstance(e, LoopScope):
                regions.setdefault(e, [t, t])[1] = t
    spans = sorted(regions.values(), key=lambda r: (r[1] - r[0], r[0]))   # inner loops first
    changed = True
    while changed:
        changed = False
        for lo, hi in spans:
            for name in first:
                f, l_ = first[name], last[name]
                if f <= hi and l_ >= lo and (f < lo or l_ > hi) and (f > lo or l_ < hi):
                    first[name], last[name] = min(f, lo), max(l_, hi)
                    changed = True


class ArenaTooLarge(MlccError):
    pass


def peak_layers(prog: Program, plan: MemoryPlan) -> str:
    """The calls where the most arena bytes are live, for messages: "peak layers: ..."."""
    peaks = []
    for t in plan.peak_calls():
        call = prog.calls[t]
        peaks.append(f"{', '.join(call.nodes) or call.kernel} ({call.op}): "
                     f"{plan.live_bytes[t]} bytes live")
    return "peak layers: " + "; ".join(peaks)


def check_arena_limit(prog: Program, plan: MemoryPlan, limit: int | None) -> None:
    if limit is None or plan.arena_size <= limit:
        return
    raise ArenaTooLarge(f"the arena needs {plan.arena_size} bytes, more than --max-arena "
                        f"{limit}; {peak_layers(prog, plan)}")


def check_address_space(plan: MemoryPlan, weights_size: int, io_bytes: dict[str, int],
                        pointer_bits: int, arch: str) -> None:
    """The arena, the weights and each graph input and output must be representable in the
    target's size_t (arena and weights fit in its address space at once): the generated code
    states their sizes as size_t constants, which would wrap on a 32-bit target instead of
    failing."""
    limit = (1 << pointer_bits) - 1
    sizes = [("arena", plan.arena_size), ("weight blob", weights_size),
             ("arena and weight blob together", plan.arena_size + weights_size)]
    sizes += [(f"tensor {name!r}", n) for name, n in io_bytes.items()]
    for what, size in sizes:
        if size > limit:
            raise UnsupportedError(f"the {what} needs {size} bytes, more than the "
                                f"{pointer_bits}-bit target {arch} can address (size_t holds "
                                f"at most {limit})")
