"""Matching shared by the folding passes (not a pass itself)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..ir import Graph, Node


def constant_operands(g: Graph, node: Node, producers: dict, consumers: dict, outputs: set,
                      producer_types: set[str], commutative: bool
                      ) -> Iterator[tuple[str, Node, np.ndarray]]:
    """For a binary node y (op) d with d a float32 constant and y the only use of the single
    output of an unfused producer of one of producer_types, yields (y, producer, d).
    Non-commutative ops (Sub, Div) only match y on the left."""
    if node.domain != "" or len(node.inputs) != 2:
        return
    for k in ((0, 1) if commutative else (0,)):
        y, d_name = node.inputs[k], node.inputs[1 - k]
        prod, d = producers.get(y), g.const(d_name)
        if prod is None or d is None or d.dtype != np.float32:
            continue
        if prod.op_type not in producer_types or prod.domain != "" or prod.attrs.get("_act"):
            continue
        if y in outputs or len(consumers.get(y, [])) != 1 or len(prod.outputs) != 1:
            continue
        yield y, prod, d


def sole_reader(g: Graph):
    """reader(value): the one default-domain node reading `value`, or None when the value is a
    graph output or has other readers (a chain may only swallow values nobody else sees)."""
    consumers, outputs = g.consumers(), set(g.outputs)

    def reader(value: str) -> Node | None:
        readers = consumers.get(value, [])
        if value in outputs or len(readers) != 1 or readers[0].domain != "":
            return None
        return readers[0]
    return reader
