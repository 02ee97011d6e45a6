"""C identifiers derived from ONNX names: valid, stable and unique."""
from __future__ import annotations

import re

C_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "_Bool", "_Complex", "_Imaginary",
    "ctx", "status", "inputs", "outputs", "main", "NULL",
}


def c_identifier(text: str, fallback: str = "t") -> str:
    ident = re.sub(r"[^0-9A-Za-z_]+", "_", text).strip("_")
    ident = re.sub(r"__+", "_", ident)
    if not ident:
        ident = fallback
    if ident[0].isdigit():
        ident = f"{fallback}_{ident}"
    if ident in C_KEYWORDS or ident.startswith("mlcc_"):
        ident = f"{ident}_"
    return ident


class NameTable:
    """Hands out unique identifiers for a sequence of (possibly colliding) names."""

    def __init__(self, reserved: set[str] | None = None):
        self.used = set(reserved or ())

    def take(self, text: str, fallback: str = "t") -> str:
        base = c_identifier(text, fallback)
        name, k = base, 2
        while name in self.used or name.lower() in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def model_prefix(text: str) -> str:
    """The prefix of a model's C symbols, e.g. "digits_cnn" for digits-cnn.onnx."""
    return c_identifier(text.lower(), "model")
