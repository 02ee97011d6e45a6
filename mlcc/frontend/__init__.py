"""Frontend: ONNX and TensorFlow Lite files in, ir.Graph out."""
from .binding import bind_inputs, bound_record, parse_bind_option
from .onnx_import import (bind_shapes, dim_text, import_model, load_onnx, parse_shape_option,
                          specialize, to_graph)
from .tflite_import import import_tflite, is_tflite

__all__ = ["bind_inputs", "bind_shapes", "bound_record", "dim_text", "import_model",
           "import_tflite", "is_tflite", "load_onnx",
           "parse_bind_option", "parse_shape_option", "specialize", "to_graph"]
