"""Conv: 1-D and 2-D convolution (NCHW), grouped and depthwise, with fused bias and activation."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node, Value
from .common import act_params, require_dtype
from .gemm import GEMM_KC, GEMM_MC, GEMM_MR, pack_a
from .registry import OpDef, register
from . import winograd

AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# The im2col panels one mlcc_f32_conv2d_packed step gathers: about this many bytes (so that they
# stay in L2 while every weight panel passes over them), in multiples of 64 output positions.
PANEL_BYTES = 256 * 1024
DW_SLICES = 4        # MLCC_DW_SLICES: threads of a pool that share a depthwise convolution
DW_CHUNK = 64        # MLCC_DW_CHUNK: floats per step of the depthwise kernel's flat layout
# Small maps (output rows of at most TABLE_MAX_W columns) gather im2col through a compile-time
# offset table, when it is at most TABLE_MAX_BYTES (int32 per im2col value).
TABLE_MAX_W = 16
TABLE_MAX_BYTES = 64 * 1024
# The implicit GEMM of KxK convolutions (mlcc_f32_conv2d_implicit, conv.h).
IMPLICIT_SLACK = 64      # MLCC_IMPLICIT_SLACK
IMPLICIT_SLICES = 4      # MLCC_IMPLICIT_SLICES
# Partial sums of one block (rows x virtual columns) kept per thread when the depth exceeds
# GEMM_KC: about this many bytes.
IMPLICIT_PART_BYTES = 128 * 1024
# Strided convolutions shallower than this (3-channel stems: depth 27) gather im2col panels:
# measured (A/B interleaved), the implicit path was 1.15-1.16x slower on SqueezeNet's and
# MobileNetV2's 3x3/2 stems (0.80x on YOLOv8n's, of 16 channels only), while 0.80-0.86x on
# ResNet-50's strided 3x3 and 7x7 (depth 147) layers.
IMPLICIT_MIN_STRIDED_DEPTH = 64
# mlcc_f32_conv2d_implicit_rows (conv.h): strided convolutions shallower than
# IMPLICIT_MIN_STRIDED_DEPTH (the 3-channel stems), on 512-bit targets (channel_tiles), take the
# implicit GEMM's sub-planes tiled by output rows instead of gathered panels (at most one k block).
# Measured per layer (profile_layers.py --cpu, the packed path against this): MobileNetV2's
# 3 -> 32 on 224 x 224 (sub-planes 0.6 MB) 0.88x, YOLOv8n's 3 -> 16 on 320 x 320 (1.2 MB)
# 0.96x, PP-OCR rec's 0.66x; PP-OCR det's 3 -> 16 on 640 x 640 (4.9 MB of sub-planes, written
# then read back from beyond L2) 1.10-1.15x slower, SqueezeNet's 3 -> 64 (8 weight-row tiles
# re-reading the planes) 1.04x slower: those keep the gathered panels.
ROWS_MAX_DEPTH = IMPLICIT_MIN_STRIDED_DEPTH - 1
ROWS_MAX_COUT = 32
ROWS_MAX_PAD_BYTES = 2 * 1024 * 1024
# mlcc_f32_conv2d_implicit_t (conv.h): output channels along the vectors, tiles of up to
# CONVT_RMAX positions of an output row (1x1: up to 12 across rows) x CONVT_CP channels; the
# one small-map transposed product (the packed GEMM no longer picks one at run time). Taken
# on 512-bit targets (channel_tiles) by the convolutions (KxK
# implicit GEMMs and 1x1) whose columns, rounded up to whole panels of 32, would be at least
# CONVT_MIN_WASTE times the useful ones (ResNets' 7 x 7 maps: 64 for 49; 14 x 14: 224 for
# 196; 28 x 28 3x3: 840 virtual columns for 784), when at least CONVT_MIN_DEPTH deep (its
# epilogue transposes the tile with scalar copies: ResNet's 3-channel 7x7/2 stem, depth
# 147, was 1.16x slower that way).
CONVT_CP = 32
CONVT_RMAX = 8
CONVT_MIN_WASTE = 1.05
CONVT_MIN_DEPTH = 256
# 1x1 convolutions (their depth is their input channels): ResNet-50's of depth 256 and 512
# on 14 x 14 maps were 1.07-1.2x slower that way, those of depth 1024-2048 0.87-0.99x.
CONVT_MIN_DEPTH_1X1 = 1024
# With the flat tiles (whole depth, epilogue in registers), projections (no more output
# channels than the depth) from this depth pay too: MobileNetV2's 576 -> 96, 384 -> 96 and
# 384 -> 64 on 14 x 14 0.93-0.96x the packed GEMM, SqueezeNet's 384-512 -> 48-64 on 13 x 13
# 0.91-0.95x, YOLOv8n's 256-512 -> 128-256 on 10 x 10 0.92x; not expansions (ResNet-50's
# 256 -> 1024 on 14 x 14 1.2x slower: each tile re-reads a 1 MB weight matrix; MobileNetV2's
# 96 -> 576 1.05x) nor shallower ones (192 -> 64 0.99x).
CONVT_MIN_DEPTH_1X1_PROJ = 256
# 1x1 convolutions of any depth where the packed GEMM's panels (of 32 columns, a last one of
# at most 16 half-width) would compute at least this many times the output positions: 7 x 7
# maps, 64 columns for 49 (MobileNetV2's eight 160-960-channel layers there 0.80-0.85x the
# packed GEMM), not 14 x 14 (208 for 196) nor 13 x 13 (176 for 169).
CONVT_MIN_WASTE_1X1 = 1.15
CONVT_PART_POS = 512     # MLCC_CONVT_PART_POS


def panel_cols(n: int) -> int:
    """The columns the packed GEMM computes for n (AVX-512: panels of 32; a last one of at
    most 16 runs half-width)."""
    tail = n % 32
    return n // 32 * 32 + (0 if tail == 0 else 16 if tail <= 16 else 32)


def convt_applies(oh: int, ow: int, wq: int, cout_g: int, kdim: int) -> bool:
    """Whether a convolution with this output map takes mlcc_f32_conv2d_implicit_t (wq: the
    implicit GEMM's virtual row width; out_w for 1x1 convolutions)."""
    nv = oh * wq
    return (kdim >= CONVT_MIN_DEPTH and cout_g >= CONVT_CP
            and -(-nv // 32) * 32 >= CONVT_MIN_WASTE * oh * ow)


def convt_1x1_applies(oh: int, ow: int, cout_g: int, kdim: int) -> bool:
    """Whether a 1x1 convolution takes mlcc_f32_conv2d_implicit_t: deep ones on the maps where
    KxK ones do (convt_applies), any depth where the packed panels waste the most."""
    deep = kdim >= CONVT_MIN_DEPTH_1X1 or (kdim >= CONVT_MIN_DEPTH_1X1_PROJ and cout_g <= kdim)
    if deep and convt_applies(oh, ow, ow, cout_g, kdim):
        return True
    n = oh * ow
    return cout_g >= CONVT_CP // 2 and n >= 8 and panel_cols(n) >= CONVT_MIN_WASTE_1X1 * n


def convt_plan(cin_g: int, kh: int, kw: int, oh: int, ow: int, sh: int, sw: int, dh: int,
               dw: int, direct: bool = False) -> int:
    """Scratch bytes of mlcc_f32_conv2d_implicit_t (conv.h); direct: a 1x1 convolution of
    stride 1 without padding, which reads its input in place."""
    hq, wq = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    pad = 0 if direct else cin_g * sh * sw * hq * wq + (kw - 1) * dw + IMPLICIT_SLACK
    rows = min(max(1, CONVT_PART_POS // ow), oh)
    # 1x1 convolutions run flat tiles over the whole depth, their sums in registers
    flat = kh == 1 and kw == 1
    part = IMPLICIT_SLICES * rows * ow * CONVT_CP if cin_g * kh * kw > GEMM_KC and not flat else 0
    return 4 * (pad + part)


def im2col_table(c: int, ih: int, iw: int, kh: int, kw: int, oh: int, ow: int, sh: int,
                 sw: int, dh: int, dw: int, pt: int, pl: int) -> np.ndarray:
    """[c * kh * kw, oh * ow] int32: the offset in a (c, ih, iw) input of each im2col value,
    -1 where the window reads padding (mlcc_f32_conv2d_packed_table)."""
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
    sub-planes (c, sh, sw, hq, wq) of mlcc_f32_conv2d_implicit (conv.h)."""
    ci, ki, kj = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    plane = (ci * sh + ki * dh % sh) * sw + kj * dw % sw
    return (plane * hq * wq + (ki * dh // sh) * wq + kj * dw // sw).astype(np.int32).reshape(-1)


def implicit_cols_offsets(c: int, kh: int, kw: int, dh: int, hp: int, ow: int) -> np.ndarray:
    """[c * kh * kw] int32: where row (c, kh, kw) of the im2col matrix starts in the shifted
    planes (c, kw, hp, ow) of mlcc_f32_conv2d_implicit_cols (conv.h)."""
    ci, ki, kj = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    return (((ci * kw + kj) * hp + ki * dh) * ow).astype(np.int32).reshape(-1)


def implicit_cols_pays(kh: int, kw: int, oh: int, ow: int, sh: int, sw: int, dw: int) -> bool:
    """Whether a stride-1 convolution on a small map takes mlcc_f32_conv2d_implicit_cols: when
    the implicit GEMM's virtual columns, in whole panels of 32 (AVX-512; a last one of at most
    16 runs half-width), are at least 1.2x the output positions in the same panels. The
    digits CNN's 8 x 8 and 4 x 4 layers (80 for 64, 32 for 16), not ResNet's 7 x 7 ones (64
    for 64) nor its 14 x 14 ones (224 for 208)."""
    if sh != 1 or sw != 1 or kw < 2 or ow > TABLE_MAX_W or kh * kw < 2:
        return False
    return panel_cols(oh * (ow + (kw - 1) * dw)) >= 1.2 * panel_cols(oh * ow)


def implicit_plan(cin_g: int, cout_g: int, kh: int, kw: int, oh: int, ow: int, sh: int,
                  sw: int, dh: int, dw: int,
                  part_bytes: int = IMPLICIT_PART_BYTES,
                  cols: bool = False) -> tuple[int, int, int, int]:
    """(block_cols, scratch bytes, hq, wq) of mlcc_f32_conv2d_implicit (conv.h), or with
    cols=True of mlcc_f32_conv2d_implicit_cols (stride 1; hq = the planes' padded rows)."""
    if cols:
        hq, wq = oh + (kh - 1) * dh, ow
    else:
        hq, wq = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    nv = oh * wq
    rows = min(GEMM_MC, -(-cout_g // GEMM_MR) * GEMM_MR)
    block = max(64, part_bytes // (4 * rows) // 64 * 64)
    block = min(block, -(-nv // 64) * 64)
    if cols:
        pad = cin_g * kw * hq * ow + IMPLICIT_SLACK
    else:
        pad = cin_g * sh * sw * hq * wq + (kw - 1) * dw + IMPLICIT_SLACK
    part = IMPLICIT_SLICES * rows * block if cin_g * kh * kw > GEMM_KC else 0
    return block, 4 * (pad + part), hq, wq


def window_geometry(node: Node, in_spatial: list[int], kernel: list[int], *,
                    ceil_mode: bool = False) -> dict:
    """Strides, dilations, begin/end pads and output sizes of a sliding window (Conv, pools)."""
    rank = len(in_spatial)
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = list(node.attr("pads", [0] * (2 * rank)))
    auto_pad = node.attr("auto_pad", "NOTSET")
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise ModelError(f"strides/dilations/pads do not match {rank} spatial dimensions")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(p < 0 for p in pads):
        raise ModelError("strides and dilations must be positive and pads non-negative")
    if any(k < 1 for k in kernel):
        raise ModelError(f"kernel shape {kernel} must be positive")
    begin, end, out = [], [], []
    for i, k, s, d, pb, pe in zip(in_spatial, kernel, strides, dilations, pads[:rank], pads[rank:]):
        extent = d * (k - 1) + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-i // s)
            total = max(0, (o - 1) * s + extent - i)
            pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pe = total - pb
        elif auto_pad == "VALID":
            pb = pe = 0
        span = i + pb + pe - extent
        if span < 0:
            raise ModelError(f"the window ({extent}) is larger than the padded input "
                             f"({i + pb + pe})")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-i // s)
        elif ceil_mode:
            o = -(-span // s) + 1
            if (o - 1) * s >= i + pb:   # the last window must start inside the input or left pad
                o -= 1
        else:
            o = span // s + 1
        begin.append(pb), end.append(pe), out.append(o)
    return {"strides": strides, "dilations": dilations, "begin": begin, "end": end, "out": out}


def _spatial2d(values: list[int], fill: int) -> list[int]:
    """1-D windows run as 2-D ones with a leading axis of size 1."""
    return [fill] + values if len(values) == 1 else values


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


def window2d(geo: dict, in_spatial) -> Window2d:
    """Packs window_geometry()'s result (plus the input's spatial size) for a 2-D kernel."""
    return Window2d(*_spatial2d(list(geo["kernel"]), 1), *_spatial2d(list(in_spatial), 1),
                    *_spatial2d(list(geo["out"]), 1), *_spatial2d(list(geo["strides"]), 1),
                    *_spatial2d(list(geo["dilations"]), 1), *_spatial2d(list(geo["begin"]), 0))


def check_conv_weight(node: Node, x: Value, w: Value, what: str) -> list[int]:
    """Validates the ranks of a (transposed) convolution and returns its kernel shape."""
    if len(x.shape) not in (3, 4):
        raise UnsupportedError(f"{len(x.shape) - 2}-D {what} is not supported "
                               f"(1-D and 2-D are)")
    if len(w.shape) != len(x.shape):
        raise ModelError(f"weight rank {len(w.shape)} does not match input rank "
                         f"{len(x.shape)}")
    kernel = list(w.shape[2:])
    if node.attr("kernel_shape") is not None and list(node.attr("kernel_shape")) != kernel:
        raise ModelError(f"kernel_shape {node.attr('kernel_shape')} disagrees with the "
                         f"weight shape {list(w.shape)}")
    return kernel


def dw_scratch_floats(p: dict) -> int:
    """mlcc_dw_scratch_floats() in runtime_c/kernels/conv.h: one thread's slice of a depthwise
    convolution's scratch: one channel's padded input split into stride_h x stride_w
    sub-planes, zeros for the last chunk's reads, and the plane of virtual outputs."""
    kh, kw, sh, sw = p["kernel_h"], p["kernel_w"], p["stride_h"], p["stride_w"]
    dh, dw, oh, ow = p["dilation_h"], p["dilation_w"], p["out_h"], p["out_w"]
    hq, wq = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    flat = sh * sw * hq * wq + kw * dw + DW_CHUNK + (-(-oh * wq // DW_CHUNK) + 1) * DW_CHUNK
    if (kh, kw, dh, dw) == (3, 3, 1, 1) and sh == sw and sh in (1, 2) and ow <= 8:
        # AVX-512 (channels in lanes, output rows of at most 8): a ring of padded rows of
        # 16-float vectors, and a row of zeros; C counts it on AVX-512 targets only, this
        # number covers every target
        wp = max((ow - 1) * sh + 3, p["pad_left"] + p["in_w"])
        span = min((ow + 14) // ow + 1, oh)
        flat = max(flat, ((span - 1) * sh + 4) * wp * 16)
    return flat


@register("Conv")
class Conv(OpDef):
    fuses_activation = True
    quant_rules = ("integer_producer",)
    attributes = {"auto_pad": lambda v: v in AUTO_PAD, "dilations": None, "group": None,
                  "kernel_shape": None, "pads": None, "strides": None}

    def _geometry(self, node: Node, x: Value, w: Value) -> dict:
        kernel = check_conv_weight(node, x, w, "convolution")
        group = int(node.attr("group", 1))
        n, c = x.shape[:2]
        m = w.shape[0]
        if group < 1 or c % group or m % group or w.shape[1] * group != c:
            raise ModelError(f"group={group} does not fit {c} input channels, weight "
                             f"{list(w.shape)}")
        geo = window_geometry(node, list(x.shape[2:]), kernel)
        geo.update(n=n, c=c, m=m, group=group, kernel=kernel)
        return geo

    def infer(self, node, ins, g):
        x, w = ins[0], ins[1]
        require_dtype(node, [x, w] + [v for v in ins[2:] if v is not None], ["float32"])
        geo = self._geometry(node, x, w)
        if len(ins) > 2 and ins[2] is not None and ins[2].shape != (geo["m"],):
            raise ModelError(f"bias shape {list(ins[2].shape)} is not [{geo['m']}]")
        out = (geo["n"], geo["m"], *geo["out"])
        if len(ins) > 3 and (not node.attrs.get("_residual") or ins[3] is None
                             or ins[3].shape != out):
            raise ModelError(f"Conv takes 2 or 3 inputs, not {len(ins)}")
        return [("float32", out)]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, w = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        geo = self._geometry(node, x, w)
        kh, kw, ih, iw, oh, ow, sh, sw, dh, dw, pt, pl = window2d(geo, x.shape[2:])
        params = {"batch": geo["n"], "in_channels": geo["c"], "in_h": ih, "in_w": iw,
                  "out_channels": geo["m"], "out_h": oh, "out_w": ow, "kernel_h": kh,
                  "kernel_w": kw, "stride_h": sh, "stride_w": sw, "dilation_h": dh,
                  "dilation_w": dw, "pad_top": pt, "pad_left": pl, "groups": geo["group"],
                  "act": act_params(node)}
        args = [node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]]
        if node.attrs.get("_residual"):
            self._lower_residual(node, lo, geo, params, args)
            return
        depthwise = geo["group"] == geo["c"] == geo["m"] and geo["group"] > 1
        if depthwise:
            scratch = DW_SLICES * dw_scratch_floats(params) * 4
            lo.call("mlcc_f32_conv2d_depthwise_vec", args, [node.outputs[0]],
                    params_type="mlcc_conv2d_params", params=params, scratch_bytes=scratch,
                    pool=True)
            return
        w_const = lo.graph.const(node.inputs[1])
        if w_const is not None:
            kdim = (geo["c"] // geo["group"]) * kh * kw
            spatial = oh * ow
            block = max(64, PANEL_BYTES // (4 * kdim) // 64 * 64)
            block = min(block, -(-spatial // 64) * 64)
            g = geo["group"]
            m = winograd.choose(geo["c"], geo["m"], oh, ow, lo.options) if \
                winograd.applies(kh, kw, sh, sw, dh, dw, g, geo["c"], geo["m"]) else 0
            if m:
                # the target opted in to Winograd's rounding (runtime_c/kernels/winograd.h)
                block, scratch = winograd.plan(geo["c"], geo["m"], oh, ow, m)
                args[1] = lo.add_const(f"{node.name}.W_winograd",
                                       winograd.transform_weights(w_const, m))
                lo.call(winograd.KERNELS[m], args, [node.outputs[0]],
                        params_type="mlcc_conv2d_packed_params",
                        params={"conv": params, "block_cols": block},
                        scratch_bytes=scratch, pool=True)
                return
            def pack_weights(mr: int = GEMM_MR, suffix: str = "W_packed") -> str:
                return lo.add_const(f"{node.name}.{suffix}", pack_a(
                    np.asarray(w_const, np.float32).reshape(g, geo["m"] // g, kdim), mr))

            sub_floats = (geo["c"] // g) * sh * sw * (oh + (kh - 1) * dh // sh) * \
                (ow + (kw - 1) * dw // sw)
            small = ow <= TABLE_MAX_W and kdim * spatial * 4 <= TABLE_MAX_BYTES and kh * kw > 1
            if implicit_cols_pays(kh, kw, oh, ow, sh, sw, dw) and \
                    (geo["c"] // g) * kw * (oh + (kh - 1) * dh) * ow < 2**31 - 2**20:
                # stride 1 on a small map: the implicit GEMM over kernel_w shifted copies of
                # the input, no dropped columns (conv.h). The digits CNN's three layers,
                # measured alone (C, thread CPU time, load 5-6): 16 -> 32 on 8 x 8 0.68x the
                # implicit GEMM, 32 -> 64 on 4 x 4 0.66x the table path, 1 -> 16 0.87x.
                cin_g = geo["c"] // g
                block, scratch, hp, _ = implicit_plan(cin_g, geo["m"] // g, kh, kw, oh, ow,
                                                      sh, sw, dh, dw, cols=True)
                offsets = implicit_cols_offsets(cin_g, kh, kw, dh, hp, ow)
                args.insert(3, lo.add_const(f"{node.name}.implicit_offsets", offsets))
                args[1] = pack_weights()
                lo.call("mlcc_f32_conv2d_implicit_cols", args, [node.outputs[0]],
                        params_type="mlcc_conv2d_packed_params",
                        params={"conv": params, "block_cols": block},
                        scratch_bytes=scratch, pool=True)
                return
            # Small maps where the implicit GEMM would compute at least 1.5x the useful
            # columns (wq / ow: the digits CNN's 4x4 layer, 24 for 16), or shallow ones, gather
            # through the table instead (A/B on the digits CNN: its 4x4 layer 0.92x with the
            # half-width tile, its depth-9 stem 0.48x; its 8x8 layer, 1.25x the columns, was
            # 1.07x slower that way; all three now take the shifted copies above).
            table_first = small and (kdim < IMPLICIT_MIN_STRIDED_DEPTH or
                                     2 * (kw - 1) * dw // sw >= ow)
            strided_ok = kdim >= IMPLICIT_MIN_STRIDED_DEPTH and \
                lo.options.get("implicit_strided", True)   # targets/wasm.yaml: off
            if (not table_first and kh * kw > 1
                    and (sh == sw == 1 or strided_ok)
                    and sub_floats < 2**31 - 2**20):   # offsets are int32
                # an implicit GEMM over the padded input split by stride phase: nothing
                # gathered (1x1 convolutions copy their input into panels faster)
                cin_g = geo["c"] // g
                block, scratch, hq, wq = implicit_plan(cin_g, geo["m"] // g, kh, kw, oh, ow,
                                                       sh, sw, dh, dw)
                offsets = implicit_offsets(cin_g, kh, kw, sh, sw, dh, dw, hq, wq)
                args.insert(3, lo.add_const(f"{node.name}.implicit_offsets", offsets))
                kernel = "mlcc_f32_conv2d_implicit"
                if lo.options.get("channel_tiles") and convt_applies(oh, ow, wq,
                                                                     geo["m"] // g, kdim):
                    kernel = "mlcc_f32_conv2d_implicit_t"
                    scratch = convt_plan(cin_g, kh, kw, oh, ow, sh, sw, dh, dw)
                    args[1] = pack_weights(CONVT_CP, "W_convt")
                else:
                    args[1] = pack_weights()
                lo.call(kernel, args, [node.outputs[0]],
                        params_type="mlcc_conv2d_packed_params",
                        params={"conv": params, "block_cols": block},
                        scratch_bytes=scratch, pool=True)
                return
            if (lo.options.get("channel_tiles") and kh * kw > 1 and (sh > 1 or sw > 1)
                    and kdim <= ROWS_MAX_DEPTH and not small and geo["m"] // g <= ROWS_MAX_COUT
                    and sub_floats * 4 <= ROWS_MAX_PAD_BYTES):
                # shallow strided convolutions (3-channel stems): the implicit GEMM's
                # sub-planes, tiled by output rows (conv.h)
                cin_g = geo["c"] // g
                block, scratch, hq, wq = implicit_plan(cin_g, geo["m"] // g, kh, kw, oh, ow,
                                                       sh, sw, dh, dw)
                offsets = implicit_offsets(cin_g, kh, kw, sh, sw, dh, dw, hq, wq)
                args.insert(3, lo.add_const(f"{node.name}.implicit_offsets", offsets))
                args[1] = pack_weights()
                lo.call("mlcc_f32_conv2d_implicit_rows", args, [node.outputs[0]],
                        params_type="mlcc_conv2d_packed_params",
                        params={"conv": params, "block_cols": block},
                        scratch_bytes=scratch, pool=True)
                return
            if small:
                table = im2col_table(geo["c"] // g, ih, iw, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl)
                args.insert(3, lo.add_const(f"{node.name}.im2col_table", table))
                args[1] = pack_weights()
                lo.call("mlcc_f32_conv2d_packed_table", args, [node.outputs[0]],
                        params_type="mlcc_conv2d_packed_params",
                        params={"conv": params, "block_cols": block},
                        scratch_bytes=(kdim + 1) * block * 4, pool=True)
                return
            if self._lower_convt_1x1(node, lo, geo, params, args, w_const):
                return
            args[1] = pack_weights()
            lo.call("mlcc_f32_conv2d_packed", args, [node.outputs[0]],
                    params_type="mlcc_conv2d_packed_params",
                    params={"conv": params, "block_cols": block},
                    scratch_bytes=(kdim + 1) * block * 4,   # panels + one im2col row
                    pool=True)
            return
        direct = kh == kw == sh == sw == 1 and pt == pl == 0 and (oh, ow) == (ih, iw)
        scratch = 0 if direct else (geo["c"] // geo["group"]) * kh * kw * oh * ow * 4
        lo.call("mlcc_f32_conv2d", args, [node.outputs[0]], params_type="mlcc_conv2d_params",
                params=params, scratch_bytes=scratch)

    def _lower_convt_1x1(self, node: Node, lo: Lowering, geo: dict, params: dict,
                         args: list[str], w_const, residual: str | None = None) -> bool:
        """A 1x1 convolution on a map that wastes columns of the packed GEMM's panels, through
        mlcc_f32_conv2d_implicit_t (with the residual, if any); False if it does not apply."""
        p = params
        g, kdim = geo["group"], geo["c"] // geo["group"]
        oh, ow, sh, sw = p["out_h"], p["out_w"], p["stride_h"], p["stride_w"]
        if (not lo.options.get("channel_tiles")
                or (p["kernel_h"], p["kernel_w"]) != (1, 1)
                or not convt_1x1_applies(oh, ow, geo["m"] // g, kdim)
                or kdim * sh * sw * oh * ow >= 2**31 - 2**20):   # offsets are int32
            return False
        direct = sh == sw == 1 and (p["in_h"], p["in_w"]) == (oh, ow)
        offsets = implicit_offsets(kdim, 1, 1, sh, sw, 1, 1, oh, ow)
        args[1] = lo.add_const(f"{node.name}.W_convt", pack_a(
            np.asarray(w_const, np.float32).reshape(g, geo["m"] // g, kdim), CONVT_CP))
        args.insert(3, lo.add_const(f"{node.name}.implicit_offsets", offsets))
        kernel = "mlcc_f32_conv2d_implicit_t"
        if residual is not None:
            args.insert(4, residual)
            kernel += "_residual"
        lo.call(kernel, args, [node.outputs[0]], params_type="mlcc_conv2d_packed_params",
                params={"conv": params, "block_cols": 64},
                scratch_bytes=convt_plan(kdim, 1, 1, oh, ow, sh, sw, 1, 1, direct), pool=True)
        return True

    def _lower_residual(self, node: Node, lo: Lowering, geo: dict, params: dict,
                        args: list[str]) -> None:
        """A 1x1 convolution with a residual Add (passes.fuse_residual_add) on the gathered
        path, which is what plain 1x1 convolutions take."""
        w_const = lo.graph.const(node.inputs[1])
        if w_const is None or geo["group"] != 1 or list(geo["kernel"]) != [1, 1]:
            raise RuntimeError(f"{node.name}: a residual is only fused into a 1x1 Conv with "
                            f"constant weights (passes.fuse_residual_add)")
        kdim = geo["c"]
        if self._lower_convt_1x1(node, lo, geo, params, args, w_const, node.inputs[3]):
            return
        block = max(64, PANEL_BYTES // (4 * kdim) // 64 * 64)
        block = min(block, -(-(params["out_h"] * params["out_w"]) // 64) * 64)
        packed = pack_a(np.asarray(w_const, np.float32).reshape(1, geo["m"], kdim))
        args[1] = lo.add_const(f"{node.name}.W_packed", packed)
        args.insert(3, node.inputs[3])
        lo.call("mlcc_f32_conv2d_packed_residual", args, [node.outputs[0]],
                params_type="mlcc_conv2d_packed_params",
                params={"conv": params, "block_cols": block},
                scratch_bytes=(kdim + 1) * block * 4, pool=True)

    def flops(self, node: Node, g: Graph) -> int:
        w, y = g.values[node.inputs[1]], g.values[node.outputs[0]]
        return 2 * y.numel * math.prod(w.shape[1:]) + (y.numel if node.attrs.get("_residual")
                                                        else 0)
