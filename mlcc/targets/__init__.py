"""Targets: YAML descriptions and the toolchain that builds a generated model for them."""
from .target import Target, Toolchain, builtin_targets, load_target, parse_target

__all__ = ["Target", "Toolchain", "builtin_targets", "load_target", "parse_target"]
