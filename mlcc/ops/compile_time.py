"""Operators whose output shape is their input's value (ConstantOfShape, Range): they exist only
at compile time. With constant inputs infer_and_fold folds them (ONNX reference); an input
computed at run time would make the output shape dynamic, so it is refused by name (the
message tells the user which graph input to bind as a constant)."""
from __future__ import annotations

from ..errors import ModelError
from .common import const_input
from .registry import OpDef, register


class _CompileTime(OpDef):
    value_inputs: tuple[tuple[int, str], ...] = ()

    def infer(self, node, ins, g):
        for index, what in self.value_inputs:
            const_input(g, node, index, what)   # raises for a run-time value
        raise ModelError(f"{node.op_type} with constant inputs should have been folded")


@register("ConstantOfShape", since=9)
class ConstantOfShape(_CompileTime):
    attributes = {"value": None}
    value_inputs = ((0, "shape"),)


@register("Range", since=11)
class Range(_CompileTime):
    attributes = {}
    value_inputs = ((0, "start"), (1, "limit"), (2, "delta"))
