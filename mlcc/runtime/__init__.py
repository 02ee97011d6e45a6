"""Running compiled models from Python (cffi) and, for cross targets, through a runner."""
from .loader import CompiledModel, aligned_empty, load

__all__ = ["CompiledModel", "aligned_empty", "load"]
