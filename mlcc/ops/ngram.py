"""TfIdfVectorizer (opset 9): n-gram counts of integer token ids, on the kernels of
runtime_c/kernels/ngram.h. The pool of n-grams is an attribute, so the compiler builds its
trie once (`ngram_trie`, the ONNX reference's populate_grams); the kernel walks it. Its string
form (pool_strings, string tokens) is refused under the strings category.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..errors import ModelError
from ..ir import Lowering, Node
from .common import require_dtype
from .refusals import STRINGS, refusal
from .registry import OpDef, register

MODES = ("TF", "IDF", "TFIDF")
MAX_EXACT_COUNT = 1 << 24          # float32 counts are exact below this


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


def ngram_trie(pool: list[int], ngram_counts: list[int], ngram_indexes: list[int],
               min_gram: int, max_gram: int) -> tuple[np.ndarray, ...]:
    """The trie of the pool's n-grams of min_gram to max_gram tokens as the kernel reads it:
    keys, first child, number of children and output index (-1: no n-gram ends there) per
    node, node 0 the root, each node's children contiguous and sorted by key. As the ONNX
    reference: ngram_counts[i] is where the n-grams of i + 1 tokens start in the pool, ids
    count every n-gram of the pool (those of other lengths too). An n-gram listed twice is
    refused, as onnxruntime does."""
    root: dict = {}
    ends: dict[tuple, int] = {}          # path of keys -> n-gram id (1-based)
    ngram_id = 1
    for i, start in enumerate(ngram_counts):
        size = i + 1
        end = ngram_counts[i + 1] if i + 1 < len(ngram_counts) else len(pool)
        n = max(end - start, 0) // size
        if min_gram <= size <= max_gram:
            for k in range(n):
                gram = tuple(pool[start + k * size:start + (k + 1) * size])
                level = root
                for key in gram:
                    level = level.setdefault(key, {})
                if gram in ends:
                    raise ModelError(f"the n-gram {list(gram)} is in the pool twice "
                                     f"(onnxruntime rejects it; the ONNX reference counts "
                                     f"it at its later index)")
                ends[gram] = ngram_id
                ngram_id += 1
        else:
            ngram_id += n
    if ngram_id - 1 > len(ngram_indexes):
        raise ModelError(f"ngram_indexes has {len(ngram_indexes)} entries for "
                         f"{ngram_id - 1} n-grams")
    keys, first, count, out = [0], [1], [len(root)], [-1]
    queue = deque([((), root)])
    while queue:                         # breadth first: each node's children contiguous
        path, level = queue.popleft()
        for key in sorted(level):
            child = level[key]
            keys.append(key)
            first.append(0)                                 # set below
            count.append(len(child))
            out.append(ngram_indexes[ends[path + (key,)] - 1] if path + (key,) in ends else -1)
            queue.append((path + (key,), child))
    # first child of each node: children follow in node order, after the root
    nxt = 1
    for k in range(len(keys)):
        first[k] = nxt
        nxt += count[k]
    return tuple(np.array(a, np.int64) for a in (keys, first, count, out))


@register("TfIdfVectorizer", since=9)
class TfIdfVectorizer(OpDef):
    """Modes TF, IDF and TFIDF, with or without weights (weights[i] that of the i-th n-gram,
    as the ONNX text and onnxruntime have it), skips, n-grams of several lengths; int32 and
    int64 tokens, input [C] or [N, C]."""
    attributes = {"mode": lambda v: _text(v) in MODES, "min_gram_length": lambda v: v >= 1,
                  "max_gram_length": lambda v: v >= 1, "max_skip_count": lambda v: v >= 0,
                  "ngram_counts": None, "ngram_indexes": lambda v: min(v, default=0) >= 0,
                  "pool_int64s": None, "pool_strings": None, "weights": None}

    def check(self, node):
        problems = super().check(node)
        if node.attr("pool_strings") is not None:
            problems.append(f"a pool of strings: {refusal(STRINGS)}")
        return problems

    def _attrs(self, node):
        missing = [a for a in ("mode", "min_gram_length", "max_gram_length", "max_skip_count",
                               "ngram_counts", "ngram_indexes", "pool_int64s")
                   if node.attr(a) is None]
        if missing:
            raise ModelError(f"TfIdfVectorizer needs the attributes {', '.join(missing)}")
        counts = [int(v) for v in node.attr("ngram_counts")]
        pool = [int(v) for v in node.attr("pool_int64s")]
        if any(b < a for a, b in zip(counts, counts[1:])) or \
                any(not 0 <= c <= len(pool) for c in counts):
            raise ModelError(f"ngram_counts {counts} are not non-decreasing offsets into a "
                             f"pool of {len(pool)}")
        lo, hi = int(node.attr("min_gram_length")), int(node.attr("max_gram_length"))
        if hi < lo:
            raise ModelError(f"max_gram_length {hi} is below min_gram_length {lo}")
        indexes = [int(v) for v in node.attr("ngram_indexes")]
        if not indexes:
            raise ModelError("ngram_indexes is empty")
        return pool, counts, indexes, lo, hi

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ["int32", "int64"])
        _, _, indexes, _, _ = self._attrs(node)
        size = max(indexes) + 1
        weights = node.attr("weights")
        if weights:
            if len(weights) != len(indexes):
                raise ModelError(f"{len(weights)} weights for {len(indexes)} ngram_indexes")
            if len(set(indexes)) < len(indexes):
                raise ModelError("ngram_indexes gives two n-grams one output: their weights "
                                 "would compete for it")
        if len(x.shape) not in (1, 2) or (len(x.shape) == 2 and x.shape[0] < 1):
            raise ModelError(f"input {list(x.shape)} is not [C] or [N, C] with N > 0")
        if x.shape[-1] * (int(node.attr("max_skip_count")) + 1) >= MAX_EXACT_COUNT:
            raise ModelError(f"rows of {x.shape[-1]} tokens with up to "
                             f"{node.attr('max_skip_count')} skips could count an n-gram "
                             f"2^24 times or more, past float32's exact integers")
        return [("float32", (*x.shape[:-1], size))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        pool, counts, indexes, min_gram, max_gram = self._attrs(node)
        size = y.shape[-1]
        mode = _text(node.attr("mode"))
        weights = np.ones(size, np.float32)
        if mode != "TF" and node.attr("weights"):
            # the weight of the i-th n-gram, at its output (the ONNX text and onnxruntime; the
            # ONNX reference weighs output i by weights[i] instead)
            weights[indexes] = np.asarray(node.attr("weights"), np.float32)
        trie = ngram_trie(pool, counts, indexes, min_gram, max_gram)
        names = [lo.add_const(f"{node.name}.{part}", a)
                 for part, a in zip(("keys", "first", "count", "out"), trie)]
        names.append(lo.add_const(f"{node.name}.weights", weights))
        lo.call(f"mlcc_{'i64' if x.dtype == 'int64' else 'i32'}_tfidf",
                [node.inputs[0], *names, y.name], [y.name], params_type="mlcc_tfidf_params",
                params={"rows": x.shape[0] if len(x.shape) == 2 else 1, "cols": x.shape[-1],
                        "out_size": size, "min_gram": min_gram, "max_gram": max_gram,
                        "max_skip": int(node.attr("max_skip_count")),
                        "idf": int(mode == "IDF")})

    def flops(self, node, g):
        return 0
