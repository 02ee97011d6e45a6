"""Einsum (rewritten into ReduceSum, transposes and MatMul) against onnxruntime on odd
shapes: matrix products in every layout, batched and broadcast-free batch letters, outer and
inner products, sums and transposes, constant operands; and the refusals."""
import numpy as np
import pytest

from mlcc.errors import UnsupportedError
from util import check_node, rand

SIZES = {"a": 2, "b": 3, "c": 5, "d": 7, "e": 4, "i": 3, "j": 5, "k": 7, "n": 2, "h": 3,
         "q": 5, "m": 11, "B": 2, "X": 6}


def _operands(equation):
    lhs = equation.split("->")[0]
    return [rand(*(SIZES[c] for c in t), seed=i) for i, t in enumerate(lhs.split(","))]


EQUATIONS = [
    "ij,jk->ik", "ij,kj->ik", "ji,jk->ik", "ji,kj->ki", "ij,jk", "bij,bjk->bik",
    "bij,bkj->bik", "bhqd,bhkd->bhqk", "bhqk,bhkd->bqhd", "ij,ij->ij", "ij,ij->i", "i,i->",
    "i,j->ij", "bi,bj->bij", "ijk,k->ij", "ijk,j->ik", "ij,kc->ikc", "abc,cd->abd",
    "ij,jk->ki", "ijm,mk->ik", "ij->ji", "ijk->kij", "ij->i", "ijk->j", "ij->", "ijk",
    "Bik,kX->BiX", "ij,jk->",
]


@pytest.mark.parametrize("equation", EQUATIONS)
def test_einsum(tmp_path, equation):
    ops = _operands(equation)
    check_node("Einsum", {f"x{i}": v for i, v in enumerate(ops)}, tmp_path=tmp_path, opset=12,
               equation=equation)


@pytest.mark.parametrize("equation", ["ij,jk->ik", "bij,jk->bik", "bhqd,hkd->bhqk",
                                      "ij,kj->ki"])
def test_einsum_constant_operand(tmp_path, equation):
    """The constant operand is summed and transposed at compile time (MatMul weights)."""
    a, b = _operands(equation)
    check_node("Einsum", {"x0": a}, initializers={"w": b}, tmp_path=tmp_path, opset=12,
               equation=equation)


@pytest.mark.parametrize("equation,shapes,why", [
    ("ii->i", [(3, 3)], "diagonal"),
    ("ii", [(3, 3)], "diagonal"),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], "ellipsis"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "3 operands"),
    ("ij,jk->ik", [(2, 3), (1, 4)], "broadcasting"),
])
def test_einsum_refusals(tmp_path, equation, shapes, why):
    inputs = {f"x{i}": rand(*s, seed=i) for i, s in enumerate(shapes)}
    with pytest.raises(UnsupportedError, match=f"einsum_node.*{equation[:2]}.*{why}"):
        check_node("Einsum", inputs, tmp_path=tmp_path, opset=12, equation=equation)
