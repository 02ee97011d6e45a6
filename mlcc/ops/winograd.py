"""Winograd F(2x2, 3x3) and F(4x4, 3x3) for 3x3 stride-1 convolutions (runtime_c/kernels/
winograd.h): the compile-time half (which convolutions qualify, which tile each takes, the
transformed weights, the block plan)."""
from __future__ import annotations

import numpy as np

from ..ir.symbolic import smin
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
KERNELS = {2: "mlcc_f32_conv2d__winograd_2x2", 4: "mlcc_f32_conv2d__winograd_4x4"}


def applies(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, group: int, cin: int,
            cout: int) -> bool:
    return ((kh, kw, sh, sw, dh, dw, group) == (3, 3, 1, 1, 1, 1, 1)
            and cin >= MIN_CHANNELS and cout >= MIN_CHANNELS)


def _tiles(oh: int, ow: int, m: int) -> int:
    return -(-oh // m) * -(-ow // m)


def tile_size(oh: int, ow: int, panel: int = PANEL) -> int:
    """4 (F(4x4, 3x3)) where its products, counted in whole GEMM panels of `panel` columns,
    are fewer than F(2x2, 3x3)'s: with wasm's 8 columns, square maps of 11x11 and up
    (ResNet-50's 56x56 to 14x14, YOLOv8n's 80x80 to 20x20, SqueezeNet's 55x55 to 13x13); 2 on
    smaller maps, where partial 4x4 tiles and panels waste the difference (7x7: 4 tiles of 36
    products in one 8-column panel against 16 tiles of 16 in two; 1.27x slower as F(4x4) in
    node). The same threshold on every target: on x86-native (32-column panels) one-layer
    A/Bs had F(4x4) faster than F(2x2) on every map of 13x13 and up (0.72 against 0.96 at
    128 channels 13x13) and F(2x2) on every map of 10x10 and below (0.73 against 1.07 at 512
    channels 10x10), where counting its own panels would take F(2x2) at 13x13 (SqueezeNet's
    48 -> 192 layer 1.19x slower)."""
    def cost(m: int) -> int:
        return (m + 2) ** 2 * -(-_tiles(oh, ow, m) // panel) * panel
    return 4 if cost(4) < cost(2) else 2


def choose(cin: int, cout: int, oh: int, ow: int, options: dict) -> int:
    """The tile (2 or 4) of a qualifying convolution (applies()) on a target with these
    lowering options (Target.lowering_options), or 0 for the direct convolution: the target
    did not opt in, or the layer is expected to lose (pays())."""
    if not options.get("winograd"):
        return 0
    panel, lanes = options.get("gemm_nr", PANEL), options.get("vector_lanes", 4)
    m = tile_size(oh, ow)
    return m if pays(cin, cout, oh, ow, m, panel, lanes) else 0


# Time of F(m x m, 3x3) over the direct convolution's on targets of 8+ float lanes, by tile:
# COST[m] = (per GEMM product, per transform lane, constant), fitted by least squares on
# one-layer A/Bs on x86-native (Zen 4, AVX-512, 32-column panels; thread CPU time, load 5-6;
# docs/performance-log.md, "Winograd on x86"), each tile over the maps tile_size gives it (F(4x4)'s
# GEMM term came out 0: on maps of 11x11 and up its products vary too little to separate).
COST = {2: (0.261, 1.152, 0.548), 4: (0.0, 0.928, 0.56)}


def gemm_share(oh: int, ow: int, m: int, panel: int) -> float:
    """F(m x m, 3x3)'s GEMM multiplications in whole panels of `panel` columns (the tiles
    rounded up), per multiplication of the direct convolution."""
    return (m + 2) ** 2 * -(-_tiles(oh, ow, m) // panel) * panel / (9 * oh * ow)


def cost(cin: int, cout: int, oh: int, ow: int, m: int, panel: int, lanes: int) -> float:
    """The expected time of F(m x m, 3x3) over the direct convolution's (COST): the GEMM's
    multiplications in whole panels (gemm_share) and the transforms' vector lanes (tile rows
    x tiles per row rounded up to `lanes`, per input and output channel), both per
    multiplication of the direct convolution."""
    ne, th, tw = (m + 2) ** 2, -(-oh // m), -(-ow // m)
    direct = 9 * oh * ow
    gemm = gemm_share(oh, ow, m, panel)
    lanes_used = ne * th * -(-tw // lanes) * lanes * (1 / cin + 1 / cout) * 9 / direct
    a, b, c = COST[m]
    return a * gemm + b * lanes_used + c


def pays(cin: int, cout: int, oh: int, ow: int, m: int, panel: int, lanes: int) -> bool:
    """Whether F(m x m, 3x3) is expected to beat the direct kernels. On 4-lane vectors (wasm,
    SSE2, NEON), always: every qualifying layer measured paid (SSE2: 0.33-0.65 of the direct
    time on YOLOv8n's, 8 to 256 channels, 80x80 to 10x10). On wider ones the direct kernels
    are stronger and the transforms' vectors of 8 or 16 tiles run mostly empty on small maps
    (a 10x10 map's F(2x2) rows hold 5 tiles), so few channels or small maps lose (one layer,
    x86-native: 8 channels at 80x80 1.45x, 32 at 14x14 1.18x, 64 at 10x10 1.11x as F(2x2)).
    On those, F(4x4) never where its GEMM alone, in whole panels of the target's width,
    multiplies as much as the direct convolution (gemm_share >= 1): a map of few tiles fills
    little of a wide panel (a CRNN's 4 x 32 map is 8 tiles in a 32-column panel: 1.25x slower
    than the direct kernel on x86-native at 256 channels, a tie at 128 -> 256), and COST's
    fit of F(4x4), on maps of 11x11 and up, has no GEMM term to see it."""
    if lanes < 8:
        return True
    if m == 4 and gemm_share(oh, ow, m, panel) >= 1.0:
        return False
    return cost(cin, cout, oh, ow, m, panel, lanes) < 1.0


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
    block = smin(block, -(-tiles // 64) * 64)
    # per thread, the patch rows split into m column phases: (m + 2) x m x (tiles wide + slack)
    # floats in whole cache lines of 16 (mlcc_winograd_rows_floats)
    rows = SLICES * -(-(m + 2) * m * (-(-ow // m) + ROW_SLACK) // 16) * 16
    return block, 4 * (ne * ((cin + cout) * block + 2 * PLANE_PAD) + rows)
