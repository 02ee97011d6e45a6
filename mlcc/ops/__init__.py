"""Operator definitions. Every module in this package registers its operators on import; the
list of supported operators is whatever is registered (nothing to keep in sync by hand)."""
from __future__ import annotations

import importlib
import pkgutil

from .registry import (OpDef, definitions, describe, lookup, register, registered_operators,
                       registered_ops, unsupported_reason)

_HELPERS = {"registry", "common", "activations"}
for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _mod not in _HELPERS:
        importlib.import_module(f"{__name__}.{_mod}")

__all__ = ["OpDef", "definitions", "describe", "lookup", "register", "registered_operators",
           "registered_ops", "unsupported_reason"]
