"""The graph IR: values with static types, nodes in topological order.

Values are named as in the ONNX model, so every diagnostic and every comment in the generated C
can name what the user sees in Netron. A value either carries constant data (`const`) or is
computed at run time. Shapes are tuples of ints once specialized; before that a dimension may be a
string (an ONNX dim_param) or None (unknown).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from .symbolic import SymInt, prod
from ..dtypes import PACKED_BITS, pack_elements, storage_bytes, unpack_elements  # noqa: F401

Dim = int | str | None


@dataclass
class Value:
    name: str
    dtype: str | None = None          # numpy dtype name: "float32", "int64", "bool", ...
    shape: tuple[Dim, ...] | None = None
    const: np.ndarray | None = None   # constant data (initializers and folded values)
    # (axis, key) when the size along `axis` depends on the data (NonZero, NonMaxSuppression,
    # ...): `shape` then holds the static maximum, and `key` names the data-dependent value
    # whose run-time count this one shares (docs/dynamic-outputs.md)
    dyn: tuple[int, str] | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def is_static(self) -> bool:
        """Every dimension known: an int, or a bounded symbolic size (ir.symbolic)."""
        return self.shape is not None and all(isinstance(d, (int, SymInt)) for d in self.shape)

    @property
    def is_dynamic(self) -> bool:
        return self.shape is not None and any(isinstance(d, SymInt) for d in self.shape)

    @property
    def numel(self) -> int:
        if self.is_dynamic:
            return prod(self.shape)
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return storage_bytes(self.dtype, self.numel)


@dataclass(frozen=True)
class LoopScope:
    """A C loop around the calls whose guard holds it: the body of a Loop or Scan run at run
    time (passes/control_flow.py prepares it, ops/control_flow.py lowers it). The tensors it
    names are written or read by the loop's own header, not by a kernel call."""
    name: str                 # the Loop/Scan node's name (the C comment)
    iteration: str = ""       # int64 scalar set to the iteration number (0, 1, ...), or ""
    trip: int | str | None = None   # the iteration count: a constant, an int64 tensor (M read
                                    # at run time), or None (until the condition is false)
    cond: str = ""            # bool scalar: the loop goes on while it is true, or ""
    limit: int | None = None  # more iterations than this return MLCC_ERR_LOOP_LIMIT (None:
                              # the trip count is a constant, nothing to check)

    def tensors(self) -> list[str]:
        """The tensors the loop's header reads or writes on every iteration."""
        return [t for t in (self.iteration, self.cond,
                            self.trip if isinstance(self.trip, str) else "") if t]


@dataclass
class Node:
    name: str
    op_type: str
    inputs: list[str]                 # "" marks an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    version: int = 0                  # since_version of the ONNX schema this node follows
    fused: list[str] = field(default_factory=list)   # names of nodes folded into this one
    # Run only when these (bool scalar value, wanted truth) all hold: the nodes of an If's
    # branches when its condition is known only at run time (passes/control_flow.py). The
    # branch outputs are then selected by Where, so a pass that drops the guard (a fusion
    # making a new node) costs time, never correctness. A LoopScope among them puts the
    # entries after it inside that C loop (only lowering makes such guards: a Loop's body
    # stays a subgraph through the passes, which never see them).
    guard: tuple[tuple[str, bool] | LoopScope, ...] = ()

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def replace_input(self, old: str, new: str) -> None:
        """Reads `new` wherever it read `old`: its inputs and its guard's conditions."""
        self.inputs = [new if i == old else i for i in self.inputs]
        if any(isinstance(c, tuple) and c[0] == old for c in self.guard):
            self.guard = tuple((new, c[1]) if isinstance(c, tuple) and c[0] == old else c
                               for c in self.guard)

    def input(self, i: int) -> str:
        """The name of input i, or "" when it is absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def subgraphs(self) -> list["Graph"]:
        """The graph attributes (If's branches, Loop's body; not the ones nested in them)."""
        found: list[Graph] = []
        for v in self.attrs.values():
            if isinstance(v, Graph):
                found.append(v)
            elif isinstance(v, list) and v and isinstance(v[0], Graph):
                found.extend(v)
        return found


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    values: dict[str, Value]
    inputs: list[str]
    outputs: list[str]
    opset: int
    source_sha256: str = ""

    def value(self, name: str) -> Value:
        return self.values[name]

    def const(self, name: str) -> np.ndarray | None:
        """The constant data of `name`, or None if absent or computed at run time."""
        if not name:
            return None
        v = self.values.get(name)
        return None if v is None else v.const

    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    users.setdefault(i, []).append(n)
        return users

    def add_const(self, name: str, data: np.ndarray) -> str:
        """Adds a constant under a fresh name derived from `name` and returns that name."""
        name = self.fresh_name(name)
        data = np.ascontiguousarray(data)
        self.values[name] = Value(name, data.dtype.name, tuple(int(d) for d in data.shape), data)
        return name

    def fresh_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.values:
            name = f"{base}_{k}"
            k += 1
        return name

    def copy(self) -> "Graph":
        """A copy whose lists, dicts, nodes and values may be changed freely.

        Constant arrays are shared: passes replace them, never write into them."""
        values = {k: Value(v.name, v.dtype, v.shape, v.const, v.dyn)
                  for k, v in self.values.items()}
        nodes = [copy.copy(n) for n in self.nodes]
        for n in nodes:
            n.inputs, n.outputs = list(n.inputs), list(n.outputs)
            n.attrs, n.fused = dict(n.attrs), list(n.fused)
        return Graph(self.name, nodes, values, list(self.inputs), list(self.outputs),
                     self.opset, self.source_sha256)

    def replace_uses(self, old: str, new: str) -> None:
        """Makes every node that reads `old` read `new`, as an input or as the condition of
        its guard (graph outputs are left alone)."""
        for n in self.nodes:
            n.replace_input(old, new)

    def outer_names(self) -> list[str]:
        """For a subgraph: the names it (and the subgraphs in it) reads from the scopes around
        it, in order; its own values are only the names it defines."""
        used: list[str] = []
        for n in self.nodes:
            inner = [x for s in n.subgraphs() for x in s.outer_names()]
            used += [x for x in list(n.inputs) + inner
                     if x and x not in self.values and x not in used]
        used += [o for o in self.outputs if o not in self.values and o not in used]
        return used

    def inputs_upstream(self, name: str) -> list[str]:
        """The graph inputs a run-time value is computed from, in input order (what to bind
        for it to fold)."""
        producer = self.producers()
        found, seen, stack = set(), set(), [name]
        while stack:
            cur = stack.pop()
            if cur in seen or self.const(cur) is not None:
                continue
            seen.add(cur)
            if cur in self.inputs:
                found.add(cur)
            elif cur in producer:
                stack.extend(i for i in producer[cur].inputs if i)
                stack.extend(x for s in producer[cur].subgraphs() for x in s.outer_names())
        return [i for i in self.inputs if i in found]

    def runtime_values(self) -> Iterable[Value]:
        return (v for v in self.values.values() if not v.is_const)
