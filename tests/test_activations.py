"""mlcc/ops/activations.py's table against the C kernels: the kinds and their numbers are those
of enum mlcc_act_kind, every kind has its case in the switches that must handle it, each numpy
reference computes what the C epilogue computes (runtime_c/kernels/mlcc_kernel.h's
MLCC_ACT_KINDS list makes the enum and the scalar definition); and the unary operations the Python side
writes are those of elementwise.h's MLCC_UNARY_OPS list."""
import re
from pathlib import Path

import numpy as np
import pytest

from mlcc.ir import Node
from mlcc.ops import registry
from mlcc.ops.activations import ACTIVATIONS, BY_KIND, BY_ONNX, CLAMP_ACTS, TABLE_ACTS
from mlcc.ops.elementwise import UNARY_OPS, _Unary
from util import build_kernels

KERNELS = Path(__file__).resolve().parents[1] / "runtime_c" / "kernels"
HEADER = (KERNELS / "mlcc_kernel.h").read_text()


def _body(text: str, start: str) -> str:
    """The text from `start` to the end of its brace-balanced block."""
    i = text.index(start)
    i = text.index("{", i)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j + 1]
    raise AssertionError(f"unbalanced {start}")


def _cases(body: str) -> set[str]:
    return set(re.findall(r"case MLCC_ACT_(\w+):", body))


def _x_list(text: str, macro: str, after: str) -> str:
    start = text.index(f"#define {macro}(X)")
    return text[start:text.index(after, start)]


def test_kinds_and_codes_are_the_c_enum():
    kinds = _x_list(HEADER, "MLCC_ACT_KINDS", "enum mlcc_act_kind")
    in_c = re.findall(r"X\((\w+), (\d+),", kinds)
    assert [(k, int(v)) for k, v in in_c] == [(a.kind, a.code) for a in ACTIVATIONS]
    # the enum and the scalar definition are made from that list
    assert "MLCC_ACT_KINDS(MLCC_ACT_ENUM)" in _body(HEADER, "enum mlcc_act_kind")
    assert "MLCC_ACT_KINDS(MLCC_ACT_CASE)" in _body(HEADER, "static inline float mlcc_act_scalar(")


def test_every_kind_has_its_case_in_the_c_switches():
    kinds = set(BY_KIND)
    # the vector and in-place forms fall back to the scalar one in their default branches:
    # they may leave kinds out, but must name none that does not exist, and NONE must return
    for fn in ("static inline mlcc_vf mlcc_vf_act(", "static inline void mlcc_act_apply(",
               "void mlcc_wasm_act_vecs("):
        cases = _cases(_body(HEADER, fn))
        assert cases <= kinds and "NONE" in cases, fn
        assert "default:" in _body(HEADER, fn), fn


def test_table_rows_are_consistent():
    assert CLAMP_ACTS == ("NONE", "RELU", "CLIP")
    assert TABLE_ACTS == ("SIGMOID", "HARD_SIGMOID", "HARD_SWISH", "TANH", "SILU")
    for a in ACTIVATIONS:
        assert a.int8 in ("clamp", "table", "float"), a.kind
        assert a.epilogue == (a.kind != "NONE"), a.kind
        assert (a.clamp is not None) == (a.int8 == "clamp"), a.kind
        if a.clamp is not None:     # the clamp keeps what the activation can output
            lo, hi = a.clamp(*PARAMS.get(a.kind, (0.0, 0.0)))
            y = a.ref(np.linspace(-9, 9, 37), *PARAMS.get(a.kind, (0.0, 0.0)))
            assert lo <= y.min() and y.max() <= hi, a.kind
        if a.onnx:
            assert BY_ONNX[a.onnx] is a
            # the ONNX operator exists and says it is this activation (Clip reads inputs)
            node = Node("n", a.onnx, ["x"], ["y"], version=max(a.since, 11))
            d = registry.lookup(node)
            assert d is not None, a.onnx
            if a.onnx != "Clip":
                assert d.activation(node, None)[0] == a.kind
            assert ("table" in d.quant_rules) == (a.int8 == "table"), a.onnx


SHIM = r"""
#include "mlcc_kernel.h"
float act_scalar(int kind, float alpha, float beta, float x) {
    mlcc_act act;
    act.kind = kind; act.alpha = alpha; act.beta = beta;
    return mlcc_act_scalar(&act, x);
}
void act_apply(int kind, float alpha, float beta, float *y, long n) {
    mlcc_act act;
    act.kind = kind; act.alpha = alpha; act.beta = beta;
    mlcc_act_apply(&act, y, (ptrdiff_t)n);
}
"""

PARAMS = {"CLIP": (-0.5, 1.5), "LEAKY_RELU": (0.1, 0.0), "HARD_SIGMOID": (0.2, 0.5),
          "SILU": (1.5, 0.0)}


@pytest.fixture(scope="module", params=["x86", "scalar"])
def act_lib(request, tmp_path_factory):
    cffi = pytest.importorskip("cffi")
    d = tmp_path_factory.mktemp(f"act-{request.param}")
    (d / "shim.c").write_text(SHIM)
    lib = build_kernels(d / "libact.so", request.param, [str(d / "shim.c")])
    ffi = cffi.FFI()
    ffi.cdef("float act_scalar(int, float, float, float);"
             "void act_apply(int, float, float, float *, long);")
    return ffi, ffi.dlopen(str(lib))


@pytest.mark.parametrize("kind", sorted(BY_KIND))
def test_numpy_reference_is_what_the_c_epilogue_computes(act_lib, kind):
    ffi, lib = act_lib
    a = BY_KIND[kind]
    alpha, beta = PARAMS.get(kind, (0.0, 0.0))
    x = np.concatenate([np.linspace(-9, 9, 181), [0.0, -0.0, -3.0, 3.0]]).astype(np.float32)
    want = a.ref(x.astype(np.float64), alpha, beta)
    scalar = np.array([lib.act_scalar(a.code, alpha, beta, float(v)) for v in x])
    np.testing.assert_allclose(scalar, want, rtol=2e-6, atol=2e-7)
    y = x.copy()        # 185 values: vector bodies and a tail
    lib.act_apply(a.code, alpha, beta, ffi.cast("float *", ffi.from_buffer(y)), len(y))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_unary_ops_are_the_c_list():
    macro = _x_list((KERNELS / "elementwise.h").read_text(), "MLCC_UNARY_OPS",
                    "enum mlcc_unary_op")
    in_c = re.findall(r"X\((\w+),", macro)
    assert len(in_c) == len(set(in_c))
    written = set()
    for d in (d for defs in registry._REGISTRY.values() for d in defs if isinstance(d, _Unary)):
        for attrs in ({}, {"approximate": "tanh"}):
            op = d.unary_op_of(Node("n", d.op_type, ["x"], ["y"], attrs))
            written.add(op)
    assert written - {"ACT"} == set(in_c)
    assert {op for _, op in UNARY_OPS} <= set(in_c)
