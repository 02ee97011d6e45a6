"""Frontend: ONNX files in, ir.Graph out."""
from .onnx_import import bind_shapes, import_model, load_onnx, parse_shape_option, to_graph

__all__ = ["bind_shapes", "import_model", "load_onnx", "parse_shape_option", "to_graph"]
