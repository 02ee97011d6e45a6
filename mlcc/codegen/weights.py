"""The weight blob (weights.bin): a 64-byte header, then every constant 64-byte aligned.

Header, little-endian (read by mlcc_weights_check in runtime_c/src/mlcc_runtime.c):
  0  magic "MLCCWTS\\0"      8  u32 format version (1)    12 u32 header size (64)
  16 u64 total size          24 u64 model id              32 u32 CRC-32 of bytes 64..end
  36 u32 tensor count        40..63 zero
The model id is a hash of the blob's contents and layout, so code and weights generated
together recognize each other and a blob from another model is refused.
"""
from __future__ import annotations

import hashlib
import struct
import zlib

import numpy as np

from ..ir import PACKED_BITS, Value, pack_elements

MAGIC = b"MLCCWTS\0"
FORMAT_VERSION = 1
HEADER_SIZE = 64
ALIGN = 64


def layout_weights(consts: list[Value]) -> tuple[dict[str, int], int]:
    """Offsets of each constant in the blob and the blob's total size."""
    offsets, pos = {}, HEADER_SIZE
    for v in consts:
        offsets[v.name] = pos
        pos += (v.nbytes + ALIGN - 1) // ALIGN * ALIGN
    return offsets, pos


def build_blob(consts: list[Value], offsets: dict[str, int], size: int) -> tuple[bytes, int]:
    """The blob's bytes and its model id."""
    body = bytearray(size - HEADER_SIZE)
    for v in consts:
        data = np.ascontiguousarray(v.const).astype(np.asarray(v.const).dtype.newbyteorder("<"))
        raw = (pack_elements(data) if v.dtype in PACKED_BITS else data).tobytes()
        start = offsets[v.name] - HEADER_SIZE
        body[start:start + len(raw)] = raw
    layout = ";".join(f"{v.name}:{v.dtype}:{list(v.shape)}@{offsets[v.name]}" for v in consts)
    model_id = struct.unpack("<Q", hashlib.sha256(bytes(body) + layout.encode()).digest()[:8])[0]
    crc = zlib.crc32(body) & 0xFFFFFFFF
    header = struct.pack("<8sIIQQII", MAGIC, FORMAT_VERSION, HEADER_SIZE, size, model_id, crc,
                         len(consts))
    header += b"\0" * (HEADER_SIZE - len(header))
    return header + bytes(body), model_id
