"""The default-domain operators mlcc does not compile, each with the category of its refusal.

Issue 19: every operator of onnx.defs (domain ai.onnx, at the pinned onnx version) is either
registered (an OpDef in this package), handled by the compiler without one (BUILT_IN), or
refused with a message that names one of CATEGORIES (`refusal`). tests/test_refusals.py checks
that against onnx.defs, so a new onnx version with new operators fails loudly until each is
implemented or given a category here. tools/conformance.py reads the category back from a
refusal's message (CATEGORY_PATTERN) to write the refusal-category table of
docs/conformance.md.
"""
from __future__ import annotations

import re

STRINGS = "strings"
SEQUENCES = "sequences and optionals"
RANDOM = "random generators"
IMAGES = "image decoding"

# category -> why mlcc refuses what falls in it (the docs' table says the same, generated)
CATEGORIES: dict[str, str] = {
    STRINGS: "a string has a length of its own, so a string tensor has no fixed-size element "
             "in the arena planned at compile time; tokenizers and text normalization run "
             "before the model",
    SEQUENCES: "a sequence's length and an optional's presence are known only at run time; "
               "the C runtime holds dense tensors of sizes fixed at compile time",
    RANDOM: "the output is drawn from a random generator: there is no fixed answer to compile "
            "to, nor one to verify against",
    IMAGES: "decoding JPEG, PNG, TIFF or WebP bytes is the work of an image library, not of a "
            "tensor kernel; decode before the model",
}

# Default-domain operator -> its category. A node of one of these is refused at compile time
# (unless all its inputs are constant: then it folds like any other node).
REFUSED: dict[str, str] = {
    **dict.fromkeys(("RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit"),
                    STRINGS),
    **dict.fromkeys(("ConcatFromSequence", "Optional", "OptionalGetElement",
                     "OptionalHasElement", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
                     "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
                     "SplitToSequence"), SEQUENCES),
    **dict.fromkeys(("Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
                     "RandomUniform", "RandomUniformLike"), RANDOM),
    "ImageDecoder": IMAGES,
}

# ai.onnx.ml operators refused by design -> (category, what to do instead). ZipMap is what
# converters append to a classifier's scores; its advice names the tensor it would read.
ZIPMAP_ADVICE = ("convert without it (skl2onnx: options={{id(model): {{'zipmap': False}}}}; "
                 "onnxmltools: zipmap=False) or remove the node, and read the scores tensor "
                 "{scores!r} instead")
ML_REFUSED: dict[str, tuple[str, str]] = {
    "ZipMap": (SEQUENCES, "it makes a sequence of maps, one {label: score} per row"),
    "DictVectorizer": (SEQUENCES, "it reads a map, whose keys are known only at run time"),
    "CastMap": (SEQUENCES, "it reads a map, whose keys are known only at run time"),
    "CategoryMapper": (STRINGS, "it maps strings to integers and back"),
}

# Default-domain operators the compiler handles itself, without an OpDef
# (passes/infer_and_fold.py): Constant and Shape/Size fold (shapes are static), If is inlined
# (its branch when the condition folds, both and a Where otherwise: docs/binding.md).
BUILT_IN = ("Constant", "If", "Shape", "Size")

DOCS = "docs/conformance.md#refusal-categories"
CATEGORY_PATTERN = re.compile(r"refused: (" + "|".join(map(re.escape, CATEGORIES)) + r") \(")


def refusal(category: str) -> str:
    """The words that end a refusal of this category: what the category is and where the
    categories are explained (tools/conformance.py finds them with CATEGORY_PATTERN)."""
    if category not in CATEGORIES:
        raise KeyError(f"no refusal category {category!r}")
    return f"refused: {category} ({DOCS})"


def category_of(message: str) -> str | None:
    """The category a refusal message names, if any."""
    m = CATEGORY_PATTERN.search(message)
    return m.group(1) if m else None
