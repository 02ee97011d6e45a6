"""Code generation: lowering, memory planning, the weight blob and the C writer."""
from .emit import Generated, generate, write_folder
from .names import model_prefix

__all__ = ["Generated", "generate", "write_folder", "model_prefix"]
