"""C identifiers derived from ONNX names: valid, stable and unique."""
from __future__ import annotations

import hashlib
import re

C_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "_Bool", "_Complex", "_Imaginary",
    "ctx", "status", "inputs", "outputs", "main", "NULL",
}

# Identifiers longer than this are shortened (C99 guarantees 63 significant characters for
# internal names; shorter ones keep call sites readable).
MAX_LENGTH = 48
TAG_LENGTH = 6


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


def shorten(ident: str, source: str, limit: int = MAX_LENGTH) -> str:
    """`ident` if it has at most `limit` characters, else words (between underscores) from its
    start and its end, taken alternately while they fit, around a tag of TAG_LENGTH hex digits
    hashed from `source` (the full original name):
    W_encoder_layer_0_attention_self_query_weight_T_panels ->
    W_encoder_layer_0_3fa2c1_query_weight_T_panels. The same source always gives the same
    name, and two sources that share a start and an end still differ in the tag."""
    if len(ident) <= limit:
        return ident
    tag = hashlib.sha256(source.encode()).hexdigest()[:TAG_LENGTH]
    room = limit - TAG_LENGTH - 2
    words = ident.split("_")
    head: list[str] = []
    tail: list[str] = []
    i, j = 0, len(words) - 1
    open_sides = [True, True]
    side = 0
    used = -2                               # the underscores joining words of each side
    while i <= j and any(open_sides):
        if open_sides[side]:
            w = words[i] if side == 0 else words[j]
            if used + len(w) + 1 <= room:
                used += len(w) + 1
                if side == 0:
                    head.append(w)
                    i += 1
                else:
                    tail.insert(0, w)
                    j -= 1
            else:
                open_sides[side] = False
        side = 1 - side
    start = "_".join(head) or ident[:room // 2]
    end = "_".join(tail) or ident[len(ident) - room // 2:]
    return f"{start}_{tag}_{end}"


class NameTable:
    """Hands out unique identifiers for a sequence of (possibly colliding) names: the first
    taker of a name gets it, later ones get _2, _3, ... (so the order of takes must be
    deterministic). Names differing only in case collide too."""

    def __init__(self, reserved: set[str] | None = None):
        self.used = {n.lower() for n in reserved or ()}

    def take(self, text: str, fallback: str = "t", prefix: str = "",
             limit: int | None = None) -> str:
        """A unique identifier for `text`: prefix + its sanitized form, shortened to `limit`
        characters (no limit: None)."""
        base = c_identifier(prefix + text, fallback)
        if limit is not None:
            base = shorten(base, text, limit)
        name, k = base, 2
        while name.lower() in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name.lower())
        return name


def model_prefix(text: str) -> str:
    """The prefix of a model's C symbols, e.g. "digits_cnn" for digits-cnn.onnx."""
    return c_identifier(text.lower(), "model")
