"""The cffi declarations the kernel tests use come from the kernel headers (util.kernel_cdef):
every header goes through, and what it declares does not depend on the target's vectors (the
tests build the kernels with several targets' flags against one declaration)."""
from pathlib import Path

import pytest

from mlcc.targets import load_target
from util import RUNTIME, kernel_cdef

HEADERS = sorted(p.name for p in (RUNTIME / "kernels").glob("*.h"))


def test_every_kernel_header_gives_cffi_declarations():
    cffi = pytest.importorskip("cffi")
    text = kernel_cdef(*HEADERS)
    ffi = cffi.FFI()
    ffi.cdef(text)
    # structs and prototypes came through; inline helpers and macros did not
    assert ffi.offsetof("mlcc_conv2d_params", "act") == 16 * 8
    assert "mlcc_f32_gemm(" in text and "static" not in text and "#" not in text
    assert "mlcc_implicit_sub_h" not in text     # a static inline function of conv.h


@pytest.mark.parametrize("target", ["x86", "x86-native", "arm", "wasm"])
def test_declarations_do_not_depend_on_the_vector_width(target):
    """The same declarations with any target's defines (vector helpers are dropped)."""
    assert kernel_cdef(*HEADERS, defines=load_target(target).defines()) == kernel_cdef(*HEADERS)
