"""The static memory plan (mlcc/codegen/memory.py): outputs that take the bytes of an input the
kernel allows it for (KernelCall.in_place), and only where that is safe."""
from __future__ import annotations

from mlcc.codegen.memory import plan_memory
from mlcc.ir import Graph, Program
from mlcc.ir.graph import Value
from mlcc.ir.program import KernelCall


def _program(sizes: dict[str, int], calls, inputs=("x",), outputs=()) -> Program:
    values = {n: Value(n, "uint8", (s,)) for n, s in sizes.items()}
    g = Graph("g", [], values, list(inputs), list(outputs), 17)
    return Program(g, [KernelCall(k, list(args), [args[-1]], in_place=tuple(ip))
                       for k, args, ip in calls])


def _offsets(prog: Program, slots=None) -> dict[str, int]:
    plan = plan_memory(prog, slots or {})
    return {n: s.index for n, s in plan.storage.items() if s.kind == "arena"}, plan


def test_residual_add_writes_over_its_dead_input():
    # x -> a -> b; add(b, a) -> y, a and b read last by the add: y takes a's bytes
    prog = _program({"x": 4096, "a": 4096, "b": 4096, "y": 4096, "z": 64},
                    [("conv", ("x", "a"), ()), ("conv", ("a", "b"), ()),
                     ("add", ("b", "a", "y"), (("y", "b"), ("y", "a"))),
                     ("fc", ("y", "z"), ())])
    off, plan = _offsets(prog, {"z": 0})
    assert off["y"] == off["b"] and off["a"] != off["b"]
    assert plan.arena_size == 2 * 4096 and max(plan.live_bytes) == 2 * 4096


def test_input_read_later_is_not_overwritten():
    # b is read again after the add: y must take a's bytes, never b's
    prog = _program({"x": 64, "a": 4096, "b": 4096, "y": 4096, "z": 64},
                    [("conv", ("x", "a"), ()), ("conv", ("a", "b"), ()),
                     ("add", ("b", "a", "y"), (("y", "b"), ("y", "a"))),
                     ("add2", ("y", "b", "z"), ())])
    off, _ = _offsets(prog, {"z": 0})
    assert off["y"] == off["a"] and off["y"] != off["b"]


def test_no_sharing_with_inputs_outputs_larger_outputs_or_live_inputs():
    # x is the caller's input, y2 the caller's output: neither is shared; c is larger than
    # its input; d's input is still read after it
    prog = _program({"x": 256, "a": 256, "c": 512, "d": 512, "e": 512, "y2": 512},
                    [("f", ("x", "a"), (("a", "x"),)), ("g", ("a", "c"), (("c", "a"),)),
                     ("h", ("c", "d"), (("d", "c"),)), ("k", ("c", "d", "e"), (("e", "d"),)),
                     ("m", ("e", "y2"), (("y2", "e"),))])
    off, _ = _offsets(prog, {"y2": 0})
    assert off["a"] != off["c"] and off["c"] != off["d"]
    assert off["e"] == off["d"]           # d was read last by k: e takes its bytes


def test_chains_share_one_block_of_bytes():
    prog = _program({"x": 64, "a": 1024, "b": 1024, "c": 1024, "z": 64},
                    [("f", ("x", "a"), ()), ("g", ("a", "b"), (("b", "a"),)),
                     ("h", ("b", "c"), (("c", "b"),)), ("k", ("c", "z"), ())])
    off, plan = _offsets(prog, {"z": 0})
    assert off["a"] == off["b"] == off["c"] and plan.arena_size == 1024
