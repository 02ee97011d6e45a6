"""Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions (runtime_c/kernels/winograd.h): the
compile-time half (which convolutions qualify, the transformed weights, the block plan)."""
from __future__ import annotations

import numpy as np

from .gemm import pack_a

# G of F(2x2, 3x3): U = G g G^T turns a 3x3 kernel into 4x4 (Lavin and Gray, 2015)
G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# Tiles per block: the transformed input and products of a block (16 x (in + out channels) x
# block floats) take about this many bytes, in multiples of 64 tiles.
BLOCK_BYTES = 1024 * 1024
# Narrower convolutions stay direct: their GEMMs are too short for the transforms to pay.
MIN_CHANNELS = 8
SLICES = 4           # MLCC_WINOGRAD_SLICES


def applies(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, group: int, cin: int,
            cout: int) -> bool:
    return ((kh, kw, sh, sw, dh, dw, group) == (3, 3, 1, 1, 1, 1, 1)
            and cin >= MIN_CHANNELS and cout >= MIN_CHANNELS)


def transform_weights(w: np.ndarray) -> np.ndarray:
    """[out, in, 3, 3] -> the 16 matrices U_e (e = 4 i + j of G g G^T) of [out, in], each
    packed as gemm.h's A (pack_a), one after the other. Computed in float64, rounded once."""
    u = np.einsum("ia,ocab,jb->ijoc", G, np.asarray(w, np.float64), G)
    return pack_a(u.reshape(16, w.shape[0], w.shape[1]).astype(np.float32))


def plan(cin: int, cout: int, oh: int, ow: int) -> tuple[int, int]:
    """(block_cols, scratch bytes) of mlcc_f32_conv2d_winograd."""
    tiles = -(-oh // 2) * -(-ow // 2)
    block = max(64, BLOCK_BYTES // (64 * (cin + cout)) // 64 * 64)
    block = min(block, -(-tiles // 64) * 64)
    return block, 4 * (16 * (cin + cout) * block + SLICES * 8 * (-(-ow // 2) + 1))
