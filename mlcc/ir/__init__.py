"""The IR: graph, values, nodes, the lowered program. Imports nothing else from mlcc but errors."""
from .graph import Dim, Graph, Node, Value
from .program import Enum, KernelCall, Lowering, Program
from .printer import format_graph, format_type
from .check import check_graph

__all__ = ["Dim", "Graph", "Node", "Value", "Enum", "KernelCall", "Lowering", "Program",
           "format_graph", "format_type", "check_graph"]
