"""Element types shared by the compiler and the run-time loaders: the numpy names of the ONNX
element types (ml_dtypes registers bfloat16, the float8 types, float4_e2m1fn, int4, uint4, int2
and uint2 with numpy), and the packing of the types stored several to a byte. A leaf module
like errors: it imports nothing from mlcc."""
from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16, float8, int4... as numpy dtype names)
import numpy as np

# Element types stored several to a byte, low bits first (ONNX's packing): bits per element.
PACKED_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def storage_bytes(dtype: str, numel: int) -> int:
    """Bytes that `numel` elements of `dtype` take in C: ceil(numel * bits / 8) for packed
    types, numel * itemsize otherwise."""
    bits = PACKED_BITS.get(dtype)
    if bits:
        return (numel * bits + 7) // 8
    return numel * np.dtype(dtype).itemsize


def pack_elements(arr: np.ndarray) -> np.ndarray:
    """A numpy array of a packed type (one element per byte, as ml_dtypes keeps it) as the
    bytes C reads: element i in bits (i * b) % 8 of byte i * b // 8, unused high bits 0."""
    bits = PACKED_BITS[np.dtype(arr.dtype).name]
    per = 8 // bits
    codes = np.ascontiguousarray(arr).reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    codes = np.concatenate([codes, np.zeros(-codes.size % per, np.uint8)]).reshape(-1, per)
    out = np.zeros(codes.shape[0], np.uint8)
    for k in range(per):
        out |= (codes[:, k] << np.uint8(k * bits)).astype(np.uint8)
    return out


def unpack_elements(data: np.ndarray, dtype: str, shape) -> np.ndarray:
    """The inverse of pack_elements: `data` (uint8) to a `dtype` array of `shape`."""
    bits = PACKED_BITS[dtype]
    per, n = 8 // bits, int(np.prod(shape, dtype=np.int64))
    data = np.asarray(data, np.uint8).reshape(-1)
    codes = np.stack([(data >> np.uint8(k * bits)) & np.uint8((1 << bits) - 1)
                      for k in range(per)], axis=1).reshape(-1)[:n]
    # ml_dtypes keeps the bare code in each byte (int4 -1 is 0x0F), as C packs it
    return np.ascontiguousarray(codes).view(np.dtype(dtype)).reshape(shape)
