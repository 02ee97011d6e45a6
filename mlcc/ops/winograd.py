"""Winograd F(2x2, 3x3) and F(4x4, 3x3) for 3x3 stride-1 convolutions (runtime_c/kernels/
winograd.h): the compile-time half (which convolutions qualify, which tile each takes, the
transformed weights, the block plan)."""
from __future__ import annotations

import numpy as np

from .gemm import pack_a

# G of F(2x2, 3x3): U = G g G^T turns a 3x3 kernel into 4x4 (Lavin and Gray, 2015)
G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# G of F(4x4, 3x3) (points 0, 1, -1, 2, -2 and infinity): 3x3 -> 6x6
G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
# Tiles per block: the transformed input and products of a block ((tile + 2)^2 x (in + out
# channels) x block floats) take about this many bytes, in multiples of 64 tiles.
BLOCK_BYTES = 1024 * 1024
# Narrower convolutions stay direct: their GEMMs are too short for the transforms to pay.
MIN_CHANNELS = 8
SLICES = 4           # MLCC_WINOGRAD_SLICES
ROW_SLACK = 16       # MLCC_WINOGRAD_ROW_SLACK
PLANE_PAD = 16       # MLCC_WINOGRAD_PLANE_PAD
# The GEMM computes whole panels of this many columns (tiles): MLCC_GEMM_NR on wasm.
PANEL = 8
KERNELS = {2: "mlcc_f32_conv2d_winograd", 4: "mlcc_f32_conv2d_winograd_4x4"}


def applies(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, group: int, cin: int,
            cout: int) -> bool:
    return ((kh, kw, sh, sw, dh, dw, group) == (3, 3, 1, 1, 1, 1, 1)
            and cin >= MIN_CHANNELS and cout >= MIN_CHANNELS)


def _tiles(oh: int, ow: int, m: int) -> int:
    return -(-oh // m) * -(-ow // m)


def tile_size(oh: int, ow: int) -> int:
    """4 (F(4x4, 3x3)) where its products, counted in whole GEMM panels, are fewer than
    F(2x2, 3x3)'s: square maps of 11x11 and up (ResNet-50's 56x56 to 14x14, YOLOv8n's 80x80 to
    20x20, SqueezeNet's 55x55 to 13x13); 2 on smaller maps, where partial 4x4 tiles and
    panels waste the difference (7x7: 4 tiles of 36 products in one 8-column panel against 16
    tiles of 16 in two; 1.27x slower as F(4x4) in node)."""
    def cost(m: int) -> int:
        return (m + 2) ** 2 * -(-_tiles(oh, ow, m) // PANEL) * PANEL
    return 4 if cost(4) < cost(2) else 2


def transform_weights(w: np.ndarray, m: int = 2) -> np.ndarray:
    """[out, in, 3, 3] -> the (m + 2)^2 matrices U_e (e = (m + 2) i + j of G g G^T) of
    [out, in], each packed as gemm.h's A (pack_a), one after the other. Computed in float64,
    rounded once."""
    g = G if m == 2 else G4
    u = np.einsum("ia,ocab,jb->ijoc", g, np.asarray(w, np.float64), g)
    return pack_a(u.reshape((m + 2) ** 2, w.shape[0], w.shape[1]).astype(np.float32))


def plan(cin: int, cout: int, oh: int, ow: int, m: int = 2) -> tuple[int, int]:
    """(block_cols, scratch bytes) of the F(m x m, 3x3) kernel."""
    ne = (m + 2) ** 2
    tiles = _tiles(oh, ow, m)
    block = max(64, BLOCK_BYTES // (4 * ne * (cin + cout)) // 64 * 64)
    block = min(block, -(-tiles // 64) * 64)
    # per thread, the patch rows split into m column phases: (m + 2) x m x (tiles wide + slack)
    rows = SLICES * (m + 2) * m * (-(-ow // m) + ROW_SLACK)
    return block, 4 * (ne * ((cin + cout) * block + 2 * PLANE_PAD) + rows)
