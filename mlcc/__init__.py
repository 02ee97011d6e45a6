"""mlcc: an ahead-of-time compiler from ONNX models to portable C with a tiny runtime.

    import mlcc
    mlcc.compile("model.onnx", "build/model", target="x86", shapes={"images": (1, 3, 320, 320)})
    m = mlcc.load("build/model")
    outputs = m.run({"images": x})
"""
from .api import bench, compile, inspect, load, verify
from .errors import MlccError
from .version import __version__

__all__ = ["__version__", "bench", "compile", "inspect", "load", "verify", "MlccError"]
