"""The lowered program: a straight list of C kernel calls over named tensors.

Operators lower into this form (mlcc/ops), the memory planner gives every run-time tensor an
arena offset (mlcc/codegen/memory.py) and the C writer prints it (mlcc/codegen/c_writer.py).
Tensors keep the graph's value names; kernels that need constant data in another layout than the
model's (transposed weights, lookup tables) add new constants to the program.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .graph import Graph, LoopScope, Value
from .symbolic import DimVar, dim_vars, evaluate, is_symbolic, upper

# Bytes every run-time tensor's storage starts on (codegen/memory.py places them so): a slice
# view (Lowering.slice_alias) starts on such a boundary too, so a kernel sees the same
# alignment whether it writes a tensor of its own or a slice of a larger one.
TENSOR_ALIGN = 64


@dataclass(frozen=True)
class Enum:
    """A C enumerator or macro written verbatim into a params struct, e.g. MLCC_ACT_RELU."""
    name: str


@dataclass(frozen=True)
class SizeClass:
    """A guard on the dynamic sizes of a range build: the call runs where every listed
    dimension is at most its bound (`inside`), or where one is above it (not `inside`). A
    layer whose best kernel changes within the range runs one variant inside and another
    outside (ops/conv_kernels.py choose_variants); the scratch of a call inside is planned at
    the bounds, not at the largest sizes."""
    bounds: tuple[tuple[DimVar, int], ...]
    inside: bool = True

    def tensors(self) -> list[str]:
        return []

    def env(self, x) -> dict[str, int]:
        """The largest sizes of x's dimensions where the call runs."""
        env = {v.name: v.hi for v in dim_vars(x)}
        if self.inside:
            env.update((v.name, b) for v, b in self.bounds)
        return env

    def c_expr(self) -> str:
        test = " && ".join(f"dims[{v.index}] <= {b}" for v, b in self.bounds)
        return test if self.inside else f"!({test})"

    def text(self) -> str:
        test = ", ".join(f"{v.name} <= {b}" for v, b in self.bounds)
        return test if self.inside else f"not ({test})"

    def outside(self) -> "SizeClass":
        return SizeClass(self.bounds, False)


@dataclass
class KernelCall:
    kernel: str                        # C function, e.g. "mlcc_f32_conv2d"
    args: list[str]                    # tensor names in argument order; "" passes NULL
    writes: list[str]                  # the args this call writes (its outputs)
    params_type: str | None = None     # C struct passed by pointer as the first argument
    params: dict[str, Any] = field(default_factory=dict)
    scratch_bytes: int | None = None   # temporary arena space passed as the last argument
                                       # (None: the kernel takes none; 0: it gets NULL)
    returns_status: bool = False       # the kernel can fail on run-time data (e.g. indices)
    pool: bool = False                 # takes the context's thread pool as the last argument
    nodes: list[str] = field(default_factory=list)   # ONNX node names it implements
    op: str = ""                       # what the banner comment calls it, e.g. "Conv+Relu"
    guard: tuple = ()                  # run only if these bool scalars are so, inside these
                                       # loops (Node.guard: (name, bool) pairs, LoopScopes),
                                       # at these sizes (a SizeClass, last)
    # (output, input) pairs whose bytes the kernel allows to be the same (it reads every input
    # byte before it writes over it): the memory plan makes them so where the input is not
    # read after this call (codegen/memory.py)
    in_place: tuple = ()
    # the kernel may hand its last parallel loop to a loop group (mlcc_threadpool_for_last):
    # consecutive independent such calls run those loops as one (codegen/groups.py)
    groupable: bool = False


@dataclass
class Program:
    graph: Graph                       # the optimized graph (types and shapes of all values)
    calls: list[KernelCall] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)   # view -> the tensor it reinterprets
    # views that are a part of the tensor they view (aliases), not all of it: view -> its
    # byte offset there (Concat's inputs written straight into their slice of its output)
    slices: dict[str, int] = field(default_factory=dict)
    # Value.dyn key -> the int64 scalar tensor that holds that data-dependent size at run time
    counts: dict[str, str] = field(default_factory=dict)
    # loop groups: (first, last) call indices of runs of independent calls whose last
    # parallel loops run as one (codegen/groups.py); everything they touch is alive throughout
    groups: list[tuple[int, int]] = field(default_factory=list)

    def value(self, name: str) -> Value:
        return self.graph.values[name]

    def guard_tensors(self, call: KernelCall) -> list[str]:
        """The tensors a call's guard reads: If conditions, and what its loops' headers touch."""
        return [t for e in call.guard
                for t in (e.tensors() if isinstance(e, (LoopScope, SizeClass)) else [e[0]])]

    def root(self, name: str) -> str:
        """The tensor that owns the storage of `name` (following reshape-like views)."""
        while name in self.aliases:
            name = self.aliases[name]
        return name

    def byte_offset(self, name: str) -> int:
        """Where `name`'s bytes start in the storage of its root (0 but for slices)."""
        offset = 0
        while name in self.aliases:
            offset += self.slices.get(name, 0)
            name = self.aliases[name]
        return offset

    def is_slice(self, name: str) -> bool:
        """Whether `name` is a part of its root's bytes (a slice, or a view of one)."""
        while name in self.aliases:
            if name in self.slices:
                return True
            name = self.aliases[name]
        return False

    def constants(self) -> list[Value]:
        """Constants the calls read, in order of first use (the weight blob's order)."""
        seen: dict[str, Value] = {}
        for call in self.calls:
            for a in call.args:
                if a and a not in seen:
                    v = self.graph.values[self.root(a)]
                    if v.is_const:
                        seen.setdefault(v.name, v)
        for out in self.graph.outputs:
            v = self.graph.values[self.root(out)]
            if v.is_const:
                seen.setdefault(v.name, v)
        return list(seen.values())


class Lowering:
    """What an operator's `lower` method writes to: kernel calls, views and new constants."""

    def __init__(self, program: Program, options: dict[str, Any] | None = None):
        self.program = program
        self.graph = program.graph
        self._node = None
        # target choices that change how operators lower (e.g. {"winograd": True})
        self.options = dict(options or {})
        # lowers one node through its OpDef (set by codegen.lower_graph): for operators that
        # lower a body of nodes inside their own calls (Loop, Scan)
        self.lower_node: Callable[[Any], None] | None = None
        # the sizes the calls being written run at (a range build's per-size-class kernel)
        self.size_class: SizeClass | None = None

    def begin(self, node) -> None:
        self._node = node

    def call(self, kernel: str, args: list[str], writes: list[str], *,
             params_type: str | None = None, params: dict[str, Any] | None = None,
             scratch_bytes: int | None = None, returns_status: bool = False,
             op: str = "", pool: bool = False, in_place: tuple = (),
             groupable: bool = False) -> None:
        node = self._node
        # node.fused holds "name:OpType" entries (see passes.fuse_activations)
        names = [node.name] + [f.rsplit(":", 1)[0] for f in node.fused] if node else []
        label = op or ("+".join([node.op_type] + [f.rsplit(":", 1)[-1] for f in node.fused])
                       if node is not None else kernel)
        guard = node.guard if node is not None else ()
        sc = self.size_class
        if sc is not None:
            guard += (sc,)
        if sc is not None and is_symbolic(scratch_bytes):
            scratch_bytes = evaluate(scratch_bytes, sc.env(scratch_bytes))
        self.program.calls.append(KernelCall(
            kernel, list(args), list(writes), params_type, dict(params or {}),
            # at the largest sizes when it depends on a dynamic one (ir.symbolic), or at the
            # largest of its size class
            None if scratch_bytes is None else upper(scratch_bytes),
            returns_status, pool, names, label, guard, tuple(in_place), groupable))

    def alias(self, view: str, of: str) -> None:
        """`view` shares the storage of `of` (a reshape: same bytes, new shape)."""
        self.program.aliases[view] = of

    def slice_alias(self, view: str, of: str, byte_offset: int) -> None:
        """`view` is the bytes of `of` from byte_offset on (a multiple of TENSOR_ALIGN): the
        calls that write `view` write straight into that part of `of`."""
        if byte_offset % TENSOR_ALIGN:
            raise ValueError(f"slice {view!r} of {of!r} at byte {byte_offset}: not a multiple "
                             f"of {TENSOR_ALIGN}")
        self.program.aliases[view] = of
        self.program.slices[view] = byte_offset

    def add_const(self, base: str, data: np.ndarray) -> str:
        return self.graph.add_const(base, data)

    def temp(self, base: str, dtype: str, shape: tuple[int, ...]) -> str:
        """A run-time tensor private to this lowering (e.g. a transposed copy)."""
        name = self.graph.fresh_name(base)
        self.graph.values[name] = Value(name, dtype, tuple(shape))
        return name

    def value(self, name: str) -> Value:
        return self.graph.values[name]

    def count(self, key: str) -> str:
        """A new int64 scalar that the kernel of a data-dependent size writes (Value.dyn's
        key); the lowering of its consumers reads it with count_of."""
        name = self.temp(f"{key}.count", "int64", ())
        self.program.counts[key] = name
        return name

    def count_of(self, name: str) -> str:
        """The run-time count of value `name`'s data-dependent axis."""
        return self.program.counts[self.graph.values[name].dyn[1]]
