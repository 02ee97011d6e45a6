"""Which float convolution kernel (runtime_c/kernels/conv.h, depthwise.h, winograd.h) a Conv
layer runs, as data: VARIANTS lists the kernels in preference order, each with a named rule
(a pure function of the layer's shapes and the target's choices) and its lowering (weight
packing, constant tables, scratch plan). Conv.lower takes the first variant whose rule holds
(choose_variant); applicable_variants lists all of them. docs/kernels.md has the measurements
behind each threshold and the kernel naming grammar."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, NamedTuple

import numpy as np

from ..ir import Lowering, Node, SizeClass
from ..ir.symbolic import dim_vars, evaluate, is_symbolic, smax, smin, upper
from .gemm import (GEMM_KC, GEMM_MC, GEMM_MR, GEMM_ROWS_OUTER_K, b_panel, gemm_params, pack_a,
                   pack_b_panels)
from . import winograd

# The im2col panels one packed step gathers: about this many bytes (they stay in L2 while
# every weight panel passes over them), in multiples of 64 output positions.
PANEL_BYTES = 256 * 1024
DW_SLICES = 4        # MLCC_DW_SLICES: threads of a pool that share a depthwise convolution
DW_CHUNK = 64        # MLCC_DW_CHUNK: floats per step of the depthwise kernel's flat layout
# Small maps (output rows of at most TABLE_MAX_W columns) gather im2col through a compile-time
# offset table, when it is at most TABLE_MAX_BYTES (int32 per im2col value).
TABLE_MAX_W = 16
TABLE_MAX_BYTES = 64 * 1024
IMPLICIT_SLACK = 64      # MLCC_IMPLICIT_SLACK
IMPLICIT_SLICES = 4      # MLCC_IMPLICIT_SLICES
# Partial sums of one implicit-GEMM block (rows x virtual columns) kept per thread when the
# depth exceeds GEMM_KC: about this many bytes.
IMPLICIT_PART_BYTES = 128 * 1024
# Strided convolutions shallower than this (3-channel stems) gather panels instead of taking
# the implicit GEMM (docs/kernels.md: implicit).
IMPLICIT_MIN_STRIDED_DEPTH = 64
# implicit_rows: shallow strided convolutions with few output channels and sub-planes that
# stay in L2 (docs/kernels.md: implicit_rows).
ROWS_MAX_DEPTH = IMPLICIT_MIN_STRIDED_DEPTH - 1
ROWS_MAX_COUT = 32
ROWS_MAX_PAD_BYTES = 2 * 1024 * 1024
# implicit_t: tiles of CONVT_CP output channels x up to CONVT_RMAX positions of a row
# (docs/kernels.md: implicit_t has the measurements behind each threshold).
CONVT_CP = 32
CONVT_RMAX = 8
CONVT_MIN_WASTE = 1.05
CONVT_MIN_DEPTH = 256
CONVT_MIN_DEPTH_1X1 = 1024
CONVT_MIN_DEPTH_1X1_PROJ = 256
CONVT_MIN_WASTE_1X1 = 1.15
CONVT_PART_POS = 512     # MLCC_CONVT_PART_POS
GEMM_NR_DEFAULT = winograd.PANEL   # without a target's gemm_nr
# Offsets into the copied input are int32: the copies stay below this many floats.
INT32_OFFSETS = 2**31 - 2**20


# --------------------------------------------------------------------------------- plans

def panel_cols(n: int) -> int:
    """The columns the packed GEMM computes for n (AVX-512: panels of 32; a last one of at
    most 16 runs half-width)."""
    tail = n % 32
    return n // 32 * 32 + (0 if tail == 0 else 16 if tail <= 16 else 32)


def convt_applies(oh: int, ow: int, wq: int, cout_g: int, kdim: int) -> bool:
    """Whether a convolution with this output map pays with mlcc_f32_conv2d__implicit_t (wq:
    the implicit GEMM's virtual row width; out_w for 1x1 convolutions): deep enough, and the
    virtual columns in whole panels of 32 waste at least CONVT_MIN_WASTE."""
    nv = oh * wq
    return (kdim >= CONVT_MIN_DEPTH and cout_g >= CONVT_CP
            and -(-nv // 32) * 32 >= CONVT_MIN_WASTE * oh * ow)


def convt_1x1_applies(oh: int, ow: int, cout_g: int, kdim: int) -> bool:
    """Whether a 1x1 convolution pays with mlcc_f32_conv2d__implicit_t: deep ones (or deep
    projections) on the maps where KxK ones do, any depth where the packed panels waste the
    most."""
    deep = kdim >= CONVT_MIN_DEPTH_1X1 or (kdim >= CONVT_MIN_DEPTH_1X1_PROJ and cout_g <= kdim)
    if deep and convt_applies(oh, ow, ow, cout_g, kdim):
        return True
    n = oh * ow
    return cout_g >= CONVT_CP // 2 and n >= 8 and panel_cols(n) >= CONVT_MIN_WASTE_1X1 * n


def convt_plan(cin_g: int, kh: int, kw: int, oh: int, ow: int, sh: int, sw: int, dh: int,
               dw: int, direct: bool = False) -> int:
    """Scratch bytes of mlcc_f32_conv2d__implicit_t (conv.h); direct: a 1x1 convolution of
    stride 1 without padding, which reads its input in place."""
    hq, wq = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    pad = 0 if direct else cin_g * sh * sw * hq * wq + (kw - 1) * dw + IMPLICIT_SLACK
    if is_symbolic((oh, ow)):
        # a dynamic map: rows x ow is at most max(CONVT_PART_POS, ow) and the map (the
        # product of the intervals would be far above it)
        positions = smin(oh * ow, smax(CONVT_PART_POS, ow))
    else:
        positions = min(max(1, CONVT_PART_POS // ow), oh) * ow
    # 1x1 convolutions run flat tiles over the whole depth, their sums in registers
    flat = kh == 1 and kw == 1
    part = IMPLICIT_SLICES * positions * CONVT_CP if cin_g * kh * kw > GEMM_KC and not flat else 0
    return 4 * (pad + part)


def im2col_table(c: int, ih: int, iw: int, kh: int, kw: int, oh: int, ow: int, sh: int,
                 sw: int, dh: int, dw: int, pt: int, pl: int) -> np.ndarray:
    """[c * kh * kw, oh * ow] int32: the offset in a (c, ih, iw) input of each im2col value,
    -1 where the window reads padding (mlcc_f32_conv2d__packed_table)."""
    ci, ki, kj, oi, oj = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), np.arange(oh),
                                     np.arange(ow), indexing="ij")
    y = oi * sh + ki * dh - pt
    x = oj * sw + kj * dw - pl
    off = (ci * ih + y) * iw + x
    valid = (y >= 0) & (y < ih) & (x >= 0) & (x < iw)
    return np.where(valid, off, -1).astype(np.int32).reshape(c * kh * kw, oh * ow)


def implicit_offsets(c: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, hq: int,
                     wq: int) -> np.ndarray:
    """[c * kh * kw] int32: where row (c, kh, kw) of the im2col matrix starts in the stride-phase
    sub-planes (c, sh, sw, hq, wq) of mlcc_f32_conv2d__implicit (conv.h)."""
    ci, ki, kj = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    plane = (ci * sh + ki * dh % sh) * sw + kj * dw % sw
    return (plane * hq * wq + (ki * dh // sh) * wq + kj * dw // sw).astype(np.int32).reshape(-1)


def implicit_cols_offsets(c: int, kh: int, kw: int, dh: int, hp: int, ow: int) -> np.ndarray:
    """[c * kh * kw] int32: where row (c, kh, kw) of the im2col matrix starts in the shifted
    planes (c, kw, hp, ow) of mlcc_f32_conv2d__implicit_cols (conv.h)."""
    ci, ki, kj = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    return (((ci * kw + kj) * hp + ki * dh) * ow).astype(np.int32).reshape(-1)


def implicit_cols_pays(kh: int, kw: int, oh: int, ow: int, sh: int, sw: int, dw: int) -> bool:
    """Whether a stride-1 convolution on a small map pays with mlcc_f32_conv2d__implicit_cols:
    when the implicit GEMM's virtual columns, in whole panels of 32 (a last one of at most 16
    runs half-width), are at least 1.2x the output positions in the same panels (8 x 8 and
    4 x 4 maps of 3x3 kernels; not 7 x 7 nor 14 x 14)."""
    if sh != 1 or sw != 1 or kw < 2 or ow > TABLE_MAX_W or kh * kw < 2:
        return False
    return panel_cols(oh * (ow + (kw - 1) * dw)) >= 1.2 * panel_cols(oh * ow)


def implicit_plan(cin_g: int, cout_g: int, kh: int, kw: int, oh: int, ow: int, sh: int,
                  sw: int, dh: int, dw: int,
                  part_bytes: int = IMPLICIT_PART_BYTES,
                  cols: bool = False) -> tuple[int, int, int, int]:
    """(block_cols, scratch bytes, hq, wq) of mlcc_f32_conv2d__implicit (conv.h), or with
    cols=True of mlcc_f32_conv2d__implicit_cols (stride 1; hq = the planes' padded rows)."""
    if cols:
        hq, wq = oh + (kh - 1) * dh, ow
    else:
        hq, wq = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    nv = oh * wq
    rows = min(GEMM_MC, -(-cout_g // GEMM_MR) * GEMM_MR)
    block = max(64, part_bytes // (4 * rows) // 64 * 64)
    block = smin(block, -(-nv // 64) * 64)
    if cols:
        pad = cin_g * kw * hq * ow + IMPLICIT_SLACK
    else:
        pad = cin_g * sh * sw * hq * wq + (kw - 1) * dw + IMPLICIT_SLACK
    part = IMPLICIT_SLICES * rows * block if cin_g * kh * kw > GEMM_KC else 0
    return block, 4 * (pad + part), hq, wq


def dw_scratch_floats(p: dict, ring: bool = True) -> int:
    """mlcc_dw_scratch_floats() in runtime_c/kernels/depthwise.h: one thread's slice of a
    depthwise convolution's scratch: one channel's padded input split into stride_h x stride_w
    sub-planes, zeros for the last chunk's reads, and the plane of virtual outputs."""
    kh, kw, sh, sw = p["kernel_h"], p["kernel_w"], p["stride_h"], p["stride_w"]
    dh, dw, oh, ow = p["dilation_h"], p["dilation_w"], p["out_h"], p["out_w"]
    hq, wq = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    flat = sh * sw * hq * wq + kw * dw + DW_CHUNK + (-(-oh * wq // DW_CHUNK) + 1) * DW_CHUNK
    if (kh, kw, dh, dw) == (3, 3, 1, 1) and sh == sw and sh in (1, 2) and is_symbolic(ow):
        # a dynamic width: C decides at run time; room for the ring of any width up to 8
        # (the input is then at most 8 * sw + 3 wide), over the plane at the largest size,
        # where C has the ring at all (`ring`: 512-bit vectors, MLCC_VECTOR_BYTES == 64)
        if ow.lo > 8 or not ring:
            return flat
        span, in_w = min(16, upper(oh)), min(upper(p["in_w"]), 8 * sw + 3)
        wp = max(7 * sh + 3, p["pad_left"] + in_w)
        return max(upper(flat), ((span - 1) * sh + 4) * wp * 16)
    if (kh, kw, dh, dw) == (3, 3, 1, 1) and sh == sw and sh in (1, 2) and ow <= 8:
        # AVX-512 (channels in lanes, output rows of at most 8): a ring of padded rows of
        # 16-float vectors, and a row of zeros; C counts it on AVX-512 targets only, this
        # number covers every target
        wp = max((ow - 1) * sh + 3, p["pad_left"] + p["in_w"])
        span = min((ow + 14) // ow + 1, oh)
        flat = max(flat, ((span - 1) * sh + 4) * wp * 16)
    return flat


# --------------------------------------------------------------------------------- the layer

class Window2d(NamedTuple):
    """A sliding window's geometry as the 2-D kernels take it (1-D: height 1)."""
    kh: int
    kw: int
    ih: int
    iw: int
    oh: int
    ow: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int


@dataclass(frozen=True)
class ConvLayer:
    """A 2-D convolution (1-D: height 1) as the kernel choice sees it: shapes, window and
    whether its weights are constant and a residual Add is fused into it."""
    batch: int
    cin: int
    cout: int
    groups: int
    window: Window2d
    const_weights: bool = True
    residual: bool = False

    def __getattr__(self, name: str):
        """The window's fields read as the layer's: layer.kh, layer.sw, ..."""
        if name in Window2d._fields:
            return getattr(self.window, name)
        raise AttributeError(name)

    @classmethod
    def from_params(cls, p: dict, *, const_weights: bool, residual: bool) -> "ConvLayer":
        """From the fields of mlcc_conv2d_params (Conv.lower's params)."""
        return cls(p["batch"], p["in_channels"], p["out_channels"], p["groups"], Window2d(
            p["kernel_h"], p["kernel_w"], p["in_h"], p["in_w"], p["out_h"], p["out_w"],
            p["stride_h"], p["stride_w"], p["dilation_h"], p["dilation_w"], p["pad_top"],
            p["pad_left"]), const_weights, residual)

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def kdim(self) -> int:
        """The GEMM's depth: input channels per group x kernel taps."""
        return self.cin_g * self.kh * self.kw

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def strided(self) -> bool:
        return self.sh > 1 or self.sw > 1

    @property
    def sub_hw(self) -> tuple[int, int]:
        """(hq, wq): the implicit GEMM's stride-phase sub-plane (virtual rows x columns)."""
        return (self.oh + (self.kh - 1) * self.dh // self.sh,
                self.ow + (self.kw - 1) * self.dw // self.sw)

    @property
    def sub_floats(self) -> int:
        """Floats of one group's input split into stride-phase sub-planes (implicit GEMM)."""
        hq, wq = self.sub_hw
        return self.cin_g * self.sh * self.sw * hq * wq

    @property
    def small_map(self) -> bool:
        """KxK on output rows of at most TABLE_MAX_W columns with a table of at most
        TABLE_MAX_BYTES: the table gather applies."""
        return (self.ow <= TABLE_MAX_W and self.kdim * self.oh * self.ow * 4 <= TABLE_MAX_BYTES
                and self.taps > 1)


@dataclass(frozen=True)
class ConvTarget:
    """The target's choices the kernel choice depends on (Target.lowering_options)."""
    channel_tiles: bool = False     # 512-bit vectors: implicit_t's 32-channel tiles fit
    implicit_strided: bool = True   # targets/wasm.yaml: off
    winograd: bool = False          # the target opted in to Winograd's rounding
    gemm_nr: int = GEMM_NR_DEFAULT  # MLCC_GEMM_NR: columns of the packed GEMM's B panels
    vector_lanes: int = 4

    @classmethod
    def from_options(cls, options: dict) -> "ConvTarget":
        return cls(bool(options.get("channel_tiles")),
                   bool(options.get("implicit_strided", True)),
                   bool(options.get("winograd")),
                   options.get("gemm_nr", winograd.PANEL), options.get("vector_lanes", 4))

    def options(self) -> dict:
        return {"channel_tiles": self.channel_tiles, "implicit_strided": self.implicit_strided,
                "winograd": self.winograd, "gemm_nr": self.gemm_nr,
                "vector_lanes": self.vector_lanes}


# --------------------------------------------------------------------------------- rules
# Each rule: where its kernel runs correctly and is expected to pay. Preference among kernels
# whose rules hold is VARIANTS' order.

def is_depthwise(l: ConvLayer, t: ConvTarget) -> bool:
    """One channel per group, as many outputs as inputs."""
    return l.groups == l.cin == l.cout and l.groups > 1


def winograd_tile(l: ConvLayer, t: ConvTarget) -> int:
    """The Winograd tile (2 or 4) of a 3x3/1 layer of 8+ channels on a target that opted in,
    where it is expected to beat the direct kernels (winograd.choose); 0 otherwise."""
    if not (l.const_weights and winograd.applies(l.kh, l.kw, l.sh, l.sw, l.dh, l.dw, l.groups,
                                                 l.cin, l.cout)):
        return 0
    return winograd.choose(l.cin, l.cout, l.oh, l.ow, t.options())


def winograd_4x4_pays(l: ConvLayer, t: ConvTarget) -> bool:
    """F(4x4, 3x3): maps of 11x11 and up."""
    return winograd_tile(l, t) == 4


def winograd_2x2_pays(l: ConvLayer, t: ConvTarget) -> bool:
    """F(2x2, 3x3): smaller maps."""
    return winograd_tile(l, t) == 2


# Limits: where a kernel runs correctly whatever it pays (int32 offsets into its copies of
# the input); they grow with the map, so holding at the largest sizes they hold at all.

def shifted_copies_fit(l: ConvLayer) -> bool:
    """implicit_cols: kernel_w shifted copies of the input addressable by int32 offsets."""
    return l.cin_g * l.kw * (l.oh + (l.kh - 1) * l.dh) * l.ow < INT32_OFFSETS


def sub_planes_fit(l: ConvLayer) -> bool:
    """The implicit GEMM's stride-phase sub-planes addressable by int32 offsets."""
    return l.sub_floats < INT32_OFFSETS


def flat_input_fits(l: ConvLayer) -> bool:
    """implicit_t_1x1: the (phase-split) input addressable by int32 offsets."""
    return l.kdim * l.sh * l.sw * l.oh * l.ow < INT32_OFFSETS


def no_limit(l: ConvLayer) -> bool:
    return True


def implicit_cols_fits(l: ConvLayer, t: ConvTarget) -> bool:
    """Stride 1 on a small map, where the implicit GEMM's dropped columns cost 1.2x+ in whole
    panels; kernel_w shifted copies of the input addressable by int32 offsets."""
    return (l.const_weights and implicit_cols_pays(l.kh, l.kw, l.oh, l.ow, l.sh, l.sw, l.dw)
            and shifted_copies_fit(l))


def implicit_fits(l: ConvLayer, t: ConvTarget) -> bool:
    """KxK, not better gathered through the table (small maps that are shallow or whose
    virtual columns would be 1.5x+ the useful ones), strided only when deep enough and the
    target allows it, sub-planes addressable by int32 offsets."""
    table_first = l.small_map and (l.kdim < IMPLICIT_MIN_STRIDED_DEPTH
                                   or 2 * (l.kw - 1) * l.dw // l.sw >= l.ow)
    strided_ok = l.kdim >= IMPLICIT_MIN_STRIDED_DEPTH and t.implicit_strided
    return (l.const_weights and not table_first and l.taps > 1
            and (not l.strided or strided_ok) and sub_planes_fit(l))


def implicit_t_fits(l: ConvLayer, t: ConvTarget) -> bool:
    """implicit_fits on a 512-bit target, deep, where virtual columns in panels of 32 waste
    5%+ (convt_applies)."""
    return (implicit_fits(l, t) and t.channel_tiles
            and convt_applies(l.oh, l.ow, l.sub_hw[1], l.cout_g, l.kdim))


def implicit_rows_fits(l: ConvLayer, t: ConvTarget) -> bool:
    """Strided KxK on a 512-bit target, not a small map, sub-planes of at most
    ROWS_MAX_PAD_BYTES: shallow ones (3-channel stems) of at most ROWS_MAX_COUT outputs per
    group (instead of gathered panels), and, where it would take the implicit GEMM (depth
    IMPLICIT_MIN_STRIDED_DEPTH and up, implicit_strided), those whose rows compute no more
    columns (rows_fewer_columns)."""
    shallow = l.kdim <= ROWS_MAX_DEPTH and l.cout_g <= ROWS_MAX_COUT
    deep = l.kdim > ROWS_MAX_DEPTH and t.implicit_strided and rows_fewer_columns(l)
    return (l.const_weights and t.channel_tiles and l.taps > 1 and l.strided
            and (shallow or deep) and not l.small_map
            and l.sub_floats * 4 <= ROWS_MAX_PAD_BYTES)


def rows_fewer_columns(l: ConvLayer) -> bool:
    """One k block (implicit_rows reads the packed weights as one; GEMM_KC) and output rows in
    whole panels of 32 (a last one of at most 16 half-width: panel_cols) that make no more
    columns than the implicit GEMM's virtual rows in whole panels, whose panels straddle output
    rows (their epilogue scatters value by value). ResNet's 7x7/2 stem (3 -> 64, depth 147,
    rows of 112: 12544 columns against 12896) 0.80x the implicit GEMM, YOLOv8n's 16 -> 32 3x3/2
    (rows of 80) 0.92x; not its 32 -> 64 (rows of 40 in 48 columns, 1920 against 1664: 1.21x
    slower)."""
    return (l.kdim <= GEMM_KC
            and l.oh * panel_cols(l.ow) <= panel_cols(l.oh * l.sub_hw[1]))


def table_fits(l: ConvLayer, t: ConvTarget) -> bool:
    """KxK on a small map (ConvLayer.small_map)."""
    return l.const_weights and l.small_map


def reads_in_place_1x1(l: ConvLayer) -> bool:
    """A 1x1 convolution of stride 1 without padding: implicit_t reads its input in place."""
    return ((l.kh, l.kw, l.sh, l.sw) == (1, 1, 1, 1) and (l.ih, l.iw) == (l.oh, l.ow))


def implicit_t_1x1_fits(l: ConvLayer, t: ConvTarget) -> bool:
    """1x1 on a 512-bit target where the packed panels waste columns (convt_1x1_applies), or
    read in place with outputs of one channel tile in whole vectors (few_outputs_in_place),
    the input addressable by int32 offsets."""
    return (l.const_weights and t.channel_tiles and (l.kh, l.kw) == (1, 1)
            and (few_outputs_in_place(l, t) or convt_1x1_applies(l.oh, l.ow, l.cout_g, l.kdim))
            and flat_input_fits(l))


def few_outputs_in_place(l: ConvLayer, t: ConvTarget) -> bool:
    """A 1x1 convolution of stride 1 without padding (implicit_t reads its input in place)
    with at most one channel tile (CONVT_CP) of outputs in whole vectors, deeper than the
    packed GEMM's row-by-row nest (GEMM_ROWS_OUTER_K): the packed path would gather every
    input value into panels that at most CONVT_CP / GEMM_MR weight-row tiles read."""
    return (reads_in_place_1x1(l) and l.kdim > GEMM_ROWS_OUTER_K and l.cout_g <= CONVT_CP
            and l.cout_g % t.vector_lanes == 0)


def frames_fit(l: ConvLayer, t: ConvTarget) -> bool:
    """A 1-D convolution over one input channel (windows are runs of the signal), no padding,
    with fewer output positions than one tile of the packed GEMM's columns (two vectors) and
    at least a vector of output channels: mlcc_f32_conv2d__frames puts the channels along the
    vectors. openWakeWord's STFT (1 -> 257, window 512, stride 160, 5 positions): 0.6x the
    packed table's time (docs/kernels.md)."""
    return (l.const_weights and l.groups == 1 and l.cin == 1 and l.kh == 1 and l.ih == 1
            and l.pt == 0 and l.pl == 0 and (l.ow - 1) * l.sw + (l.kw - 1) * l.dw < l.iw
            and l.ow < 2 * t.vector_lanes and l.cout >= t.vector_lanes)


def has_const_weights(l: ConvLayer, t: ConvTarget) -> bool:
    """Weights known at compile time (to pack)."""
    return l.const_weights


def always(l: ConvLayer, t: ConvTarget) -> bool:
    """Any convolution."""
    return True


# --------------------------------------------------------------------------------- lowerings

class ConvEmit:
    """What a variant's lowering writes with: the node, the Lowering, the layer and target the
    choice saw, the kernel's params and arguments (x, w, bias, y), the constant weights and
    the residual input (if fused). The output is args[3] as given (the node's, or the 2-D
    block of a 3-D convolution: conv3d.py)."""

    def __init__(self, node: Node, lo: Lowering, layer: ConvLayer, target: ConvTarget,
                 params: dict, args: list[str], w_const: Any, residual: str | None,
                 packed: dict | None = None):
        self.node, self.lo, self.layer, self.target = node, lo, layer, target
        self.params, self.args, self.w_const, self.residual = params, args, w_const, residual
        self.out = args[3]
        # packings already made for this node (its variants by size class share them)
        self.packed = {} if packed is None else packed

    def pack(self, mr: int = GEMM_MR, suffix: str = "W_packed") -> str:
        """The weights packed as gemm.h's A (panels of mr rows), per group."""
        if (mr, suffix) not in self.packed:
            self.packed[mr, suffix] = self._pack(mr, suffix)
        return self.packed[mr, suffix]

    def _pack(self, mr: int, suffix: str) -> str:
        l = self.layer
        return self.lo.add_const(f"{self.node.name}.{suffix}", pack_a(
            np.asarray(self.w_const, np.float32).reshape(l.groups, l.cout_g, l.kdim), mr))

    def const(self, suffix: str, data: np.ndarray) -> str:
        """A constant of the node's; the same data added twice (the blocks of a 3-D
        convolution) is one constant."""
        data = np.ascontiguousarray(data)
        key = (suffix, data.dtype.str, data.shape, data.tobytes())
        if key not in self.packed:
            self.packed[key] = self.lo.add_const(f"{self.node.name}.{suffix}", data)
        return self.packed[key]

    def block_cols(self) -> int:
        """The gathered paths' block: PANEL_BYTES of panels, in multiples of 64 positions."""
        l = self.layer
        block = max(64, PANEL_BYTES // (4 * l.kdim) // 64 * 64)
        return smin(block, (l.oh * l.ow + 63) // 64 * 64)

    def call(self, kernel: str, scratch: int, block: int | None = None) -> None:
        """Calls the kernel: with block, through mlcc_conv2d_packed_params on the pool."""
        out = [self.out]
        if block is None:
            self.lo.call(kernel, self.args, out, params_type="mlcc_conv2d_params",
                         params=self.params, scratch_bytes=scratch, pool=True,
                         groupable=kernel in GROUPABLE)
        else:
            self.lo.call(kernel, self.args, out, params_type="mlcc_conv2d_packed_params",
                         params={"conv": self.params, "block_cols": block},
                         scratch_bytes=scratch, pool=True, groupable=kernel in GROUPABLE)


# The kernels that hand their last parallel loop to a loop group (mlcc_parallel_loop in conv.c
# and winograd.c; tests/test_loop_groups.py checks their files): consecutive
# independent calls of them, such as a fire module's two expand convolutions, run those loops
# as one (codegen/groups.py).
GROUPABLE = frozenset({
    "mlcc_f32_conv2d__packed", "mlcc_f32_conv2d_residual__packed",
    "mlcc_f32_conv2d__packed_table", "mlcc_f32_conv2d__implicit",
    "mlcc_f32_conv2d__implicit_cols", "mlcc_f32_conv2d__implicit_rows",
    "mlcc_f32_conv2d__implicit_t", "mlcc_f32_conv2d_residual__implicit_t",
    "mlcc_f32_conv2d__winograd_2x2", "mlcc_f32_conv2d__winograd_4x4"})


def lower_depthwise(e: ConvEmit, kernel: str) -> None:
    e.call(kernel, DW_SLICES * dw_scratch_floats(e.params, e.target.channel_tiles) * 4)


def lower_winograd(e: ConvEmit, kernel: str) -> None:
    l = e.layer
    m = next(m for m, name in winograd.KERNELS.items() if name == kernel)
    block, scratch = winograd.plan(l.cin, l.cout, l.oh, l.ow, m)
    e.args[1] = e.const("W_winograd", winograd.transform_weights(e.w_const, m))
    e.call(kernel, scratch, block)


def _offsets_arg(e: ConvEmit, table: Callable[[], np.ndarray]) -> int:
    """Inserts the implicit GEMM's offsets as the kernel's 4th argument: the compile-time
    table, or, on a feature map of a dynamic size, none (NULL: the kernel computes them from
    the parameters into the front of its scratch, conv.h mlcc_implicit_offsets_floats).
    Returns the scratch bytes that takes."""
    if is_symbolic(e.layer.window):
        e.args.insert(3, "")
        return 4 * (-(-e.layer.kdim // 16) * 16)
    e.args.insert(3, e.const("implicit_offsets", table()))
    return 0


def lower_implicit_cols(e: ConvEmit, kernel: str) -> None:
    l = e.layer
    block, scratch, hp, _ = implicit_plan(l.cin_g, l.cout_g, l.kh, l.kw, l.oh, l.ow, l.sh,
                                          l.sw, l.dh, l.dw, cols=True)
    scratch += _offsets_arg(e, lambda: implicit_cols_offsets(l.cin_g, l.kh, l.kw, l.dh, hp,
                                                             l.ow))
    e.args[1] = e.pack()
    e.call(kernel, scratch, block)


def _implicit_offsets(e: ConvEmit) -> tuple[int, int, int]:
    """Inserts the implicit GEMM's offsets; returns its (block_cols, scratch bytes, scratch
    bytes of run-time offsets)."""
    l = e.layer
    block, scratch, hq, wq = implicit_plan(l.cin_g, l.cout_g, l.kh, l.kw, l.oh, l.ow, l.sh,
                                           l.sw, l.dh, l.dw)
    offsets = _offsets_arg(e, lambda: implicit_offsets(l.cin_g, l.kh, l.kw, l.sh, l.sw,
                                                       l.dh, l.dw, hq, wq))
    return block, scratch, offsets


def lower_implicit(e: ConvEmit, kernel: str) -> None:
    """implicit and implicit_rows: the same sub-planes, offsets and weights."""
    block, scratch, offsets = _implicit_offsets(e)
    e.args[1] = e.pack()
    e.call(kernel, offsets + scratch, block)


def lower_implicit_t(e: ConvEmit, kernel: str) -> None:
    l = e.layer
    block, _, offsets = _implicit_offsets(e)
    e.args[1] = e.pack(CONVT_CP, "W_convt")
    e.call(kernel, offsets + convt_plan(l.cin_g, l.kh, l.kw, l.oh, l.ow, l.sh, l.sw, l.dh,
                                        l.dw), block)


def lower_implicit_t_1x1(e: ConvEmit, kernel: str) -> None:
    l = e.layer
    direct = reads_in_place_1x1(l)
    e.args[1] = e.pack(CONVT_CP, "W_convt")
    offsets = _offsets_arg(e, lambda: implicit_offsets(l.kdim, 1, 1, l.sh, l.sw, 1, 1, l.oh,
                                                       l.ow))
    if e.residual is not None:
        e.args.insert(4, e.residual)
    e.call(kernel, offsets + convt_plan(l.kdim, 1, 1, l.oh, l.ow, l.sh, l.sw, 1, 1, direct), 64)


def lower_table(e: ConvEmit, kernel: str) -> None:
    l = e.layer
    block = e.block_cols()
    e.args.insert(3, e.const("im2col_table", im2col_table(
        l.cin_g, l.ih, l.iw, l.kh, l.kw, l.oh, l.ow, l.sh, l.sw, l.dh, l.dw, l.pt, l.pl)))
    e.args[1] = e.pack()
    e.call(kernel, (l.kdim + 1) * block * 4, block)


def lower_packed(e: ConvEmit, kernel: str) -> None:
    block = e.block_cols()
    e.args[1] = e.pack()
    if e.residual is not None:
        e.args.insert(3, e.residual)
    e.call(kernel, (e.layer.kdim + 1) * block * 4, block)   # panels + one im2col row


def lower_frames(e: ConvEmit, kernel: str) -> None:
    l = e.layer
    w = np.asarray(e.w_const, np.float32).reshape(l.cout, l.kw)
    e.args[1] = e.const("W_frames", pack_b_panels(np.ascontiguousarray(w.T),
                                                  b_panel(e.lo.options)))
    gemm = gemm_params(l.ow, l.cout, l.kw, a_strides=(l.sw, l.dw), ldb=l.cout, ldc=l.cout,
                       bias_strides=(0, 1), node=e.node)
    e.lo.call(kernel, e.args, [e.out], params_type="mlcc_conv2d_frames_params",
              params={"gemm": gemm, "batch": e.params["batch"], "image_floats": l.iw},
              scratch_bytes=4 * l.ow * l.cout, pool=True)


def lower_reference(e: ConvEmit, kernel: str) -> None:
    l = e.layer
    direct = (l.kh == l.kw == l.sh == l.sw == 1 and l.pt == l.pl == 0
              and (l.oh, l.ow) == (l.ih, l.iw))
    e.lo.call(kernel, e.args, [e.out], params_type="mlcc_conv2d_params",
              params=e.params, scratch_bytes=0 if direct else l.kdim * l.oh * l.ow * 4)


# --------------------------------------------------------------------------------- variants

@dataclass(frozen=True)
class ConvVariant:
    """One way to run a convolution: its name, the C kernel, its rule and its lowering;
    residual_kernel: the kernel of the form with a fused residual Add (None: no such form);
    limits: where the kernel is correct (its rule checks them too)."""
    name: str
    kernel: str
    rule: Callable[[ConvLayer, ConvTarget], bool]
    lower: Callable[[ConvEmit, str], None]
    residual_kernel: str | None = None
    limits: Callable[[ConvLayer], bool] = no_limit

    def applies(self, layer: ConvLayer, target: ConvTarget) -> bool:
        if layer.residual and self.residual_kernel is None:
            return False
        return self.rule(layer, target)

    def kernel_for(self, layer: ConvLayer) -> str:
        return self.residual_kernel if layer.residual else self.kernel


# Preference order: the first variant whose rule holds runs (one line of reason each; the
# measurements are in docs/kernels.md).
VARIANTS: tuple[ConvVariant, ...] = (
    # channels in lanes, one plane per channel: no GEMM to speak of
    ConvVariant("depthwise_vec", "mlcc_f32_conv2d__depthwise_vec", is_depthwise,
                lower_depthwise),
    # 1-D over one channel, few positions, many channels: the channels along the vectors
    ConvVariant("frames", "mlcc_f32_conv2d__frames", frames_fit, lower_frames),
    # fewer multiplications where the target accepts Winograd's rounding
    ConvVariant("winograd_4x4", "mlcc_f32_conv2d__winograd_4x4", winograd_4x4_pays,
                lower_winograd),
    ConvVariant("winograd_2x2", "mlcc_f32_conv2d__winograd_2x2", winograd_2x2_pays, lower_winograd),
    # small stride-1 maps: kernel_w shifted copies, no dropped virtual columns
    ConvVariant("implicit_cols", "mlcc_f32_conv2d__implicit_cols", implicit_cols_fits,
                lower_implicit_cols, limits=shifted_copies_fit),
    # 512-bit targets: channels along the vectors where virtual columns waste panels
    ConvVariant("implicit_t", "mlcc_f32_conv2d__implicit_t", implicit_t_fits, lower_implicit_t,
                limits=sub_planes_fit),
    # strided stems on 512-bit targets: sub-planes tiled by output rows, no straddling panels
    ConvVariant("implicit_rows", "mlcc_f32_conv2d__implicit_rows", implicit_rows_fits,
                lower_implicit, limits=sub_planes_fit),
    # nothing gathered: the GEMM reads the stride-phase sub-planes in place
    ConvVariant("implicit", "mlcc_f32_conv2d__implicit", implicit_fits, lower_implicit,
                limits=sub_planes_fit),
    # small maps: im2col gathered through a compile-time table
    ConvVariant("packed_table", "mlcc_f32_conv2d__packed_table", table_fits, lower_table),
    # 1x1 on 512-bit targets where panels of 32 waste columns
    ConvVariant("implicit_t_1x1", "mlcc_f32_conv2d__implicit_t", implicit_t_1x1_fits,
                lower_implicit_t_1x1, "mlcc_f32_conv2d_residual__implicit_t",
                limits=flat_input_fits),
    # everything with constant weights: im2col gathered into panels
    ConvVariant("packed", "mlcc_f32_conv2d__packed", has_const_weights, lower_packed,
                "mlcc_f32_conv2d_residual__packed"),
    # weights computed at run time: im2col + GEMM on unpacked weights
    ConvVariant("reference", "mlcc_f32_conv2d", always, lower_reference),
)


# --------------------------------------------------------------------------------- tuning
# What each variant needs to run correctly, apart from whether its rule expects it to pay:
# `mlcc compile --tune` (mlcc/tuning.py) times every variant that can run a layer and keeps
# the fastest. Variants not listed here are tuned only where their rule holds; the reference
# kernel never.

def _implicit_can(l: ConvLayer, t: ConvTarget) -> bool:
    # strided layers too where the target prefers gathered panels for them (implicit_strided
    # is a preference, measured on one CPU: --tune checks it on this one)
    return l.const_weights and l.taps > 1 and l.sub_floats < INT32_OFFSETS


CAN_RUN: dict[str, Callable[[ConvLayer, ConvTarget], bool]] = {
    "winograd_4x4": lambda l, t: l.const_weights and t.winograd and winograd.applies(
        l.kh, l.kw, l.sh, l.sw, l.dh, l.dw, l.groups, l.cin, l.cout),
    "winograd_2x2": lambda l, t: l.const_weights and t.winograd and winograd.applies(
        l.kh, l.kw, l.sh, l.sw, l.dh, l.dw, l.groups, l.cin, l.cout),
    "implicit_cols": lambda l, t: (l.const_weights and l.sh == l.sw == 1 and l.kw >= 2
                                   and l.cin_g * l.kw * (l.oh + (l.kh - 1) * l.dh) * l.ow
                                   < INT32_OFFSETS),
    "implicit": _implicit_can,
    "implicit_t": lambda l, t: _implicit_can(l, t) and t.channel_tiles and l.cout_g >= CONVT_CP,
    "implicit_t_1x1": lambda l, t: (l.const_weights and t.channel_tiles and (l.kh, l.kw) == (1, 1)
                                    and l.cout_g >= CONVT_CP // 2
                                    and l.kdim * l.sh * l.sw * l.oh * l.ow < INT32_OFFSETS),
}


def can_run(variant: ConvVariant, layer: ConvLayer, target: ConvTarget) -> bool:
    """Whether the variant runs this layer correctly on this target (whether or not its rule
    expects it to pay)."""
    if variant.name == "reference" or (layer.residual and variant.residual_kernel is None):
        return False
    if is_symbolic(layer.window) and variant.name not in DYNAMIC_MAP_VARIANTS:
        return False
    can = CAN_RUN.get(variant.name)
    return can(layer, target) if can is not None else variant.applies(layer, target)


def tuning_candidates(layer: ConvLayer, target: ConvTarget) -> list[ConvVariant]:
    """The variants `--tune` times for this layer: every one that can run it."""
    return [v for v in VARIANTS if can_run(v, layer, target)]


def layer_key(layer: ConvLayer) -> str:
    """The layer as a tuning file names it: everything the kernel choice depends on."""
    w = layer.window
    return (f"n{layer.batch} c{layer.cin}->{layer.cout} g{layer.groups} k{w.kh}x{w.kw} "
            f"in{w.ih}x{w.iw} out{w.oh}x{w.ow} s{w.sh}x{w.sw} d{w.dh}x{w.dw} p{w.pt},{w.pl}"
            + (" residual" if layer.residual else ""))


def applicable_variants(layer: ConvLayer, target: ConvTarget) -> list[ConvVariant]:
    """Every variant that can run this layer on this target, in preference order."""
    return [v for v in VARIANTS if v.applies(layer, target)]


# The variants whose lowering takes a feature map of a dynamic size (ir.symbolic): their
# kernels compute every position from the parameters at run time (the implicit GEMM's
# offsets too, into scratch: _offsets_arg); their scratch is planned at the largest size.
# packed_table's im2col table, one offset per value of the map, is not, nor frames' GEMM, whose
# rows (the windows) are a compile-time count.
DYNAMIC_MAP_VARIANTS = ("depthwise_vec", "winograd_4x4", "winograd_2x2", "implicit_cols",
                        "implicit_t", "implicit", "implicit_rows", "implicit_t_1x1", "packed",
                        "reference")


# Sizes of a dynamic map the kernel choice looks at: at most this many in all, evenly spaced
# over each dynamic dimension's range (both ends included).
DYNAMIC_SAMPLES = 256


def at_sizes(layer: ConvLayer, env: dict[str, int]) -> ConvLayer:
    """The layer at these sizes of the dynamic dimensions of its window (by name; the batch
    at its largest: no rule reads it)."""
    return replace(layer, batch=upper(layer.batch),
                   window=Window2d(*evaluate(tuple(layer.window), env)))


def at_largest(layer: ConvLayer) -> ConvLayer:
    """The layer at the largest sizes of its dynamic dimensions (every field of the window
    grows with them)."""
    return replace(layer, batch=upper(layer.batch),
                   window=Window2d(*(upper(v) for v in layer.window)))


def sample_sizes(layer: ConvLayer) -> list[dict[str, int]]:
    """Sizes of the dynamic dimensions the window depends on (DYNAMIC_SAMPLES in all)."""
    dims = dim_vars(layer.window)
    per = max(2, int(DYNAMIC_SAMPLES ** (1 / len(dims))))
    envs: list[dict[str, int]] = [{}]
    for d in dims:
        n = d.hi - d.lo + 1
        values = sorted({d.lo + (n - 1) * k // (per - 1) for k in range(per)}) if n > per \
            else range(d.lo, d.hi + 1)
        envs = [{**e, d.name: v} for e in envs for v in values]
    return envs


def _first(layer: ConvLayer, target: ConvTarget, names) -> ConvVariant:
    for v in VARIANTS:
        if v.name in names and v.applies(layer, target):
            return v
    raise AssertionError("the reference variant applies to every convolution")


def choose_variant(layer: ConvLayer, target: ConvTarget,
                   choices: dict[str, str] | None = None, node: str = "") -> ConvVariant:
    """The variant Conv.lower runs: the one a tuning file chose for this layer (`choices`, by
    layer_key, or "node:NAME" for one node) where it can run, else the first that applies. On
    a feature map of a dynamic size, of DYNAMIC_MAP_VARIANTS, the one static builds choose at
    the most sizes of the range (sample_sizes; ties: in VARIANTS' order) whose limits hold at
    the largest size, and so at every size. (The largest size alone is a poor guide: a map of
    3 x 320 fills the panels of 32 that 3 x 319 wastes.)"""
    chosen = (choices or {}).get(f"node:{node}") or (choices or {}).get(layer_key(layer))
    if chosen is not None and chosen in VARIANT_NAMES:
        v = variant_named(chosen)
        if can_run(v, layer, target):
            return v
    if not is_symbolic(layer.window):
        return _first(layer, target, [v.name for v in VARIANTS])
    votes = Counter(name for _, name in _static_choices(layer, target))
    largest = at_largest(layer)
    for v in sorted(VARIANTS, key=lambda v: -votes[v.name]):     # (a stable sort)
        if votes[v.name] and v.limits(largest):
            return v
    return _first(largest, target, DYNAMIC_MAP_VARIANTS)


def _static_choices(layer: ConvLayer, target: ConvTarget) -> list[tuple[dict[str, int], str]]:
    """At each of the sample sizes, the variant of DYNAMIC_MAP_VARIANTS a static build of
    that size would run."""
    return [(env, _first(at_sizes(layer, env), target, DYNAMIC_MAP_VARIANTS).name)
            for env in sample_sizes(layer)]


def small_maps_variant(layer: ConvLayer, target: ConvTarget, main: ConvVariant
                       ) -> tuple[SizeClass, ConvVariant] | None:
    """On a feature map of a dynamic size: the smallest sizes where static builds run another
    variant than `main` (the one choose_variant runs), as a SizeClass (every dynamic dimension
    at most a bound, those below their largest size named: the most sample sizes from the
    smallest up at which static builds all choose one same variant), and that variant; None
    where there are none. Its limits hold at the bounds, and so at every size below them."""
    choices = _static_choices(layer, target)
    dims = dim_vars(layer.window)
    best: tuple[int, dict[str, int], str] | None = None
    for corner, name in choices:
        if name == main.name:
            continue
        inside = [n for env, n in choices if all(env[d.name] <= corner[d.name] for d in dims)]
        if all(n == name for n in inside) and (best is None or len(inside) > best[0]):
            best = (len(inside), corner, name)
    if best is None:
        return None
    _, corner, name = best
    variant, bounds = variant_named(name), at_sizes(layer, corner)
    sizes = tuple((d, corner[d.name] // d.step * d.step) for d in dims
                  if corner[d.name] // d.step * d.step < d.hi)
    if not (sizes and variant.limits(bounds) and can_run(variant, bounds, target)):
        return None
    return SizeClass(sizes), variant


def choose_variants(layer: ConvLayer, target: ConvTarget, choices: dict[str, str] | None = None,
                    node: str = "") -> list[tuple[SizeClass | None, ConvVariant]]:
    """The variants Conv.lower runs, each with the sizes it runs at (None: all): on a feature
    map of a dynamic size whose best variant changes within the range (and no tuning choice),
    small_maps_variant's at the smallest sizes and choose_variant's at the others; else
    choose_variant's alone. (The weights are packed once per packing the two take.)"""
    main = choose_variant(layer, target, choices, node)
    tuned = (choices or {}).get(f"node:{node}") or (choices or {}).get(layer_key(layer))
    small = (small_maps_variant(layer, target, main)
             if is_symbolic(layer.window) and tuned is None else None)
    if small is None:
        return [(None, main)]
    sizes, variant = small
    return [(sizes, variant), (sizes.outside(), main)]


VARIANT_NAMES = frozenset(v.name for v in VARIANTS)


def variant_named(name: str) -> ConvVariant:
    for v in VARIANTS:
        if v.name == name:
            return v
    raise KeyError(f"no convolution variant {name!r} (known: "
                   f"{', '.join(v.name for v in VARIANTS)})")
