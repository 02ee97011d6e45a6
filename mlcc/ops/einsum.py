"""Einsum, rewritten at compile time into what mlcc already runs: ReduceSum over the letters
only one operand has and the output lacks, strided copies (transposes), reshape views and one
(batched) MatMul.

With two operands every letter is one of: batch (both operands and the output), contracted
(both operands, not the output), kept from A or kept from B (one operand and the output), or
summed (one operand only). A becomes [batch, kept A, contracted], B [batch, contracted, kept
B], and their product [batch, kept A, kept B] is the output after a last transpose. One
operand: a sum over the letters the output lacks, then a transpose. Constant operands are
arranged at compile time (so MatMul packs them as weights).

Refused, with the equation named: more than two operands, an ellipsis, a letter repeated
within one operand (diagonals and traces) or within the output, and a letter whose sizes
differ between the operands (no broadcasting of letters).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Lowering, Node
from .common import contiguous_strides, emit_copy, require_dtype
from .gemm import MatMul
from .reduce import KINDS, emit_reduce
from .registry import OpDef, register


def parse_equation(equation: str, operands: int) -> tuple[list[str], str]:
    """(letters of each operand, letters of the output) of an equation mlcc can rewrite;
    the implicit output (no "->") is the letters that occur once, in alphabetical order."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    why = None
    if "." in eq:
        why = "an ellipsis ('...')"
    elif len(terms) != operands:
        raise ModelError(f"equation {equation!r} has {len(terms)} operands, the node "
                         f"{operands} inputs")
    elif len(terms) > 2:
        why = f"{len(terms)} operands (at most 2 are supported)"
    elif not all(t.isalpha() and t.isascii() for t in terms if t) or (
            out and not (out.isalpha() and out.isascii())):
        raise ModelError(f"equation {equation!r} has characters other than letters")
    elif any(len(set(t)) != len(t) for t in terms):
        why = "a letter repeated within one operand (a diagonal or trace)"
    if why:
        raise UnsupportedError(f"Einsum equation {equation!r}: {why} is not supported")
    if not arrow:
        counts = {c: sum(t.count(c) for t in terms) for c in set("".join(terms))}
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    if len(set(out)) != len(out):
        raise UnsupportedError(f"Einsum equation {equation!r}: a letter repeated in the output "
                               f"is not supported")
    missing = set(out) - set("".join(terms))
    if missing:
        raise ModelError(f"equation {equation!r}: output letters {sorted(missing)} are in no "
                         f"operand")
    return terms, out


def letter_sizes(equation: str, terms: list[str], shapes) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for t, shape in zip(terms, shapes):
        if len(t) != len(shape):
            raise ModelError(f"equation {equation!r}: operand {t!r} has rank {len(shape)}")
        for c, d in zip(t, shape):
            if sizes.setdefault(c, d) != d:
                raise UnsupportedError(f"Einsum equation {equation!r}: letter {c!r} has sizes "
                                       f"{sizes[c]} and {d} (broadcasting is not supported)")
    return sizes


@register("Einsum", since=12)
class Einsum(OpDef):
    attributes = {"equation": None}

    def _spec(self, node: Node):
        equation = node.attr("equation")
        if not isinstance(equation, str):
            raise ModelError("attribute equation is required")
        return equation, *parse_equation(equation, len(node.inputs))

    def check(self, node):
        problems = super().check(node)
        try:
            self._spec(node)
        except UnsupportedError as exc:     # a malformed equation is infer's ModelError
            problems.append(exc.message)
        except ModelError:
            pass
        return problems

    def infer(self, node, ins, g):
        require_dtype(node, ins, ["float32"])
        equation, terms, out = self._spec(node)
        sizes = letter_sizes(equation, terms, [v.shape for v in ins])
        return [("float32", tuple(sizes[c] for c in out))]

    def _arrange(self, node: Node, lo: Lowering, index: int, letters: str, order: str,
                 view: tuple[int, ...]) -> str:
        """Operand `index` summed over its letters not in `order`, transposed to `order`,
        seen as `view` (a contiguous tensor of that shape)."""
        name = node.inputs[index]
        v = lo.value(name)
        drop = {i for i, c in enumerate(letters) if c not in order}
        kept = "".join(c for c in letters if c in order)
        perm = [kept.index(c) for c in order]
        what = f"{node.name}.{'ab'[index]}"
        if v.const is not None:
            arr = np.asarray(v.const, np.float32)
            if drop:
                arr = arr.sum(axis=tuple(sorted(drop)), dtype=np.float64).astype(np.float32)
            return lo.add_const(what, np.ascontiguousarray(arr.transpose(perm)).reshape(view))
        if drop:
            summed = lo.temp(f"{what}_summed", "float32",
                             tuple(v.shape[i] for i in range(len(letters)) if i not in drop))
            emit_reduce(lo, KINDS["ReduceSum"], name, summed, drop, op="Einsum sum")
            name = summed
        shape = lo.value(name).shape
        if perm != sorted(perm):
            moved = tuple(shape[p] for p in perm)
            dst = lo.temp(f"{what}_moved", "float32", moved)
            strides = contiguous_strides(shape)
            emit_copy(lo, name, dst, moved, [strides[p] for p in perm],
                      contiguous_strides(moved), op="Einsum transpose")
            name = dst
        if tuple(lo.value(name).shape) != tuple(view):
            alias = lo.temp(f"{what}_view", "float32", view)
            lo.alias(alias, name)
            name = alias
        return name

    def _finish(self, node: Node, lo: Lowering, src: str, letters: str, out: str) -> None:
        """The output: `src` (letters in that order) transposed to `out`'s order."""
        shape = lo.value(src).shape
        strides = contiguous_strides(shape)
        moved = tuple(shape[letters.index(c)] for c in out)
        emit_copy(lo, src, node.outputs[0], moved, [strides[letters.index(c)] for c in out],
                  contiguous_strides(moved), op="Einsum transpose")

    def lower(self, node: Node, lo: Lowering) -> None:
        equation, terms, out = self._spec(node)
        sizes = letter_sizes(equation, terms,
                             [lo.value(n).shape for n in node.inputs])
        if len(terms) == 1:
            order = "".join(c for c in terms[0] if c in out)
            src = self._arrange(node, lo, 0, terms[0], order,
                                tuple(sizes[c] for c in order))
            self._finish(node, lo, src, order, out)
            return
        a, b = terms
        batch = "".join(c for c in a if c in b and c in out)
        contracted = "".join(c for c in a if c in b and c not in out)
        kept_a = "".join(c for c in a if c not in b and c in out)
        kept_b = "".join(c for c in b if c not in a and c in out)
        nb, m, n, k = (math.prod(sizes[c] for c in s) for s in (batch, kept_a, kept_b,
                                                                  contracted))
        a3 = self._arrange(node, lo, 0, a, batch + kept_a + contracted, (nb, m, k))
        b3 = self._arrange(node, lo, 1, b, batch + contracted + kept_b, (nb, k, n))
        product = batch + kept_a + kept_b
        direct = product == out
        c3 = node.outputs[0] if direct else lo.temp(f"{node.name}.product", "float32",
                                                     (nb, m, n))
        MatMul().lower(Node(node.name, "MatMul", [a3, b3], [c3], {}, version=13), lo)
        if not direct:
            full = lo.temp(f"{node.name}.product_view", "float32",
                           tuple(sizes[c] for c in product))
            lo.alias(full, c3)
            self._finish(node, lo, full, product, out)

    def flops(self, node, g):
        equation, terms, out = self._spec(node)
        sizes = letter_sizes(equation, terms, [g.values[n].shape for n in node.inputs])
        return 2 * math.prod(sizes.values())
