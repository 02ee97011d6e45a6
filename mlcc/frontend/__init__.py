"""Frontend: ONNX files in, ir.Graph out."""
from .binding import bind_inputs, bound_record, parse_bind_option
from .onnx_import import (bind_shapes, dim_text, import_model, load_onnx, parse_shape_option,
                          specialize, to_graph)

__all__ = ["bind_inputs", "bind_shapes", "bound_record", "dim_text", "import_model", "load_onnx",
           "parse_bind_option", "parse_shape_option", "specialize", "to_graph"]
