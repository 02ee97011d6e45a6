"""Running compiled models from Python (cffi) and, for cross targets, through a runner."""
from .loader import CompiledModel, ModelBase, aligned_empty, load
from .runner import HarnessModel

__all__ = ["CompiledModel", "HarnessModel", "ModelBase", "aligned_empty", "load"]
