"""The IR: graph, values, nodes, the lowered program. Imports nothing else from mlcc but errors
and dtypes (element types and their packing, re-exported here)."""
from .graph import (PACKED_BITS, Dim, Graph, LoopScope, Node, Value, pack_elements,
                    storage_bytes, unpack_elements)
from .program import Enum, KernelCall, Lowering, Program, SizeClass
from .printer import format_graph, format_type
from .check import check_graph

__all__ = ["PACKED_BITS", "pack_elements", "storage_bytes", "unpack_elements", "Dim", "Graph", "LoopScope", "Node", "Value", "Enum", "KernelCall", "Lowering", "Program",
           "SizeClass",
           "format_graph", "format_type", "check_graph"]
