"""3-D convolution (NCDHW) as the 2-D convolutions of conv_kernels.py, exactly.

The weights [M, C/group, kd, kh, kw] are the 2-D weights [M, C/group * kd, kh, kw] of a 2-D
convolution over (kh, kw) whose input channels are the pairs (c, depth tap): the same
products, summed in the same order (c, kd, kh, kw). Which 2-D convolution, by plan():

- `rows`: a (kd, 1, 1) kernel with stride and padding 1 and 0 along H and W (a temporal
  convolution, a 1x1x1 projection) is the 2-D convolution (kd, 1) of the input viewed as
  [N, C, D, H * W]: nothing copied.
- `channels`: one output depth whose window is the whole input depth (no depth padding, after
  the taps that only ever read padding are dropped) is the 2-D convolution of the input viewed
  as [N, C * D, H, W]: nothing copied. A depth of 1 is this case.
- `gather`: otherwise each output depth od gathers its input planes x[n, c, od * sd + kd * dd -
  pd] (zeros in the depth padding) into a block of [od, (c, kd), H, W], the 2-D convolution
  runs on the block as its batch, and its [od, M, OH, OW] output is copied to y[n, :, od].
  Blocks are cut to at most GATHER_BYTES of gathered input, or one output depth's where that
  is more (bounded scratch, one block's tensors reused by the next); strided copies (common.emit_copy) gather and scatter.

Depth taps that read only padding for every output depth (a depth-1 map's kd = 0 and 2 of a
3x3x3 kernel with padding 1) are dropped from constant weights: they add zeros.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Lowering, Node
from .common import emit_copy

# At most this many bytes of gathered input per block (a few output depths of a video model's
# early layers: 64 channels x 3 taps x 56 x 56 is 2.4 MB a depth).
GATHER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Conv3dPlan:
    mode: str           # "rows", "channels" or "gather" (module docstring)
    params: dict        # mlcc_conv2d_params of the 2-D convolution (gather: a whole block)
    taps: tuple[int, int]   # [lo, hi): the depth taps kept
    block: int          # gather: output depths per block (images, for one output depth)
    n: int
    c: int
    d: int
    hw: int             # input H * W
    m: int
    od: int
    ohw: int            # output OH * OW
    sd: int
    dd: int
    pd: int             # depth padding before the kept taps

    @property
    def kd(self) -> int:
        return self.taps[1] - self.taps[0]

    def weights(self, w: np.ndarray) -> np.ndarray:
        """The constant weights of the 2-D convolution: the kept taps, [M, C/g * kd, kh, kw]."""
        w = np.asarray(w, np.float32)[:, :, self.taps[0]:self.taps[1]]
        return np.ascontiguousarray(w).reshape(w.shape[0], -1, *w.shape[3:])

    def valid_taps(self, od: int) -> tuple[int, int]:
        """[a, b) of the kept taps that read the input at output depth od (a == b: none)."""
        first = od * self.sd - self.pd
        a = next((k for k in range(self.kd) if 0 <= first + k * self.dd < self.d), self.kd)
        b = next((k + 1 for k in reversed(range(self.kd)) if 0 <= first + k * self.dd < self.d),
                 a)
        return a, max(a, b)


def plan(geo: dict, in_spatial, const_weights: bool, act: dict) -> Conv3dPlan:
    """How a 3-D convolution runs (geo: Conv._geometry's window and channels)."""
    (d, h, w), (kd, kh, kw) = in_spatial, geo["kernel"]
    (sd, sh, sw), (dd, dh, dw) = geo["strides"], geo["dilations"]
    (pd, pt, pl), (od, oh, ow) = geo["begin"], geo["out"]
    n, c, m, group = geo["n"], geo["c"], geo["m"], geo["group"]
    lo, hi = 0, kd
    if const_weights:
        used = [k for k in range(kd) if any(0 <= o * sd + k * dd - pd < d for o in range(od))]
        if used:
            lo, hi = used[0], used[-1] + 1
    pd -= lo * dd
    kdk = hi - lo
    common = {"out_channels": m, "groups": group, "act": act}
    if (kh, kw, sh, sw, pt, pl) == (1, 1, 1, 1, 0, 0) and (oh, ow) == (h, w):
        mode, block = "rows", n
        p = {"batch": n, "in_channels": c, "in_h": d, "in_w": h * w, "out_h": od,
             "out_w": h * w, "kernel_h": kdk, "kernel_w": 1, "stride_h": sd, "stride_w": 1,
             "dilation_h": dd, "dilation_w": 1, "pad_top": pd, "pad_left": 0}
    else:
        per = 4 * c * kdk * h * w       # gathered bytes per output depth (or image)
        if od == 1 and pd == 0 and kdk == d and (dd == 1 or kdk == 1):
            mode, block = "channels", n
        else:
            mode, block = "gather", max(1, min(od if od > 1 else n, GATHER_BYTES // per))
        p = {"batch": block, "in_channels": c * kdk, "in_h": h, "in_w": w, "out_h": oh,
             "out_w": ow, "kernel_h": kh, "kernel_w": kw, "stride_h": sh, "stride_w": sw,
             "dilation_h": dh, "dilation_w": dw, "pad_top": pt, "pad_left": pl}
    p.update(common)
    return Conv3dPlan(mode, p, (lo, hi), block, n, c, d, h * w, m, od, oh * ow, sd, dd, pd)


def lower(plan3: Conv3dPlan, node: Node, lo: Lowering, run2d) -> None:
    """Writes the calls: run2d(params, x, y) lowers the 2-D convolution with those params from
    tensor x into tensor y (Conv._lower_2d)."""
    x, y = node.inputs[0], node.outputs[0]
    if plan3.mode != "gather":
        run2d(plan3.params, x, y)
        return
    p = plan3
    kd, hw, ohw = p.kd, p.hw, p.ohw
    per = p.c * kd * hw                       # gathered floats per output depth (or image)
    # one output depth: blocks of images (consecutive in y); else blocks of output depths of
    # one image
    over_images = p.od == 1
    direct = over_images and p.block >= p.n   # the 2-D convolution writes y itself
    g = lo.temp(f"{node.name}.depth_taps", "float32", (p.block, p.c * kd, hw))
    out = y if direct else lo.temp(f"{node.name}.depths", "float32", (p.block, p.m, ohw))
    zero: list[str] = []

    def fill(count: int, taps: int, dst_offset: int) -> None:
        if not zero:
            zero.append(lo.add_const(f"{node.name}.zero", np.zeros(1, np.float32)))
        emit_copy(lo, zero[0], g, [count, p.c, taps, hw], [0, 0, 0, 0],
                  [per, kd * hw, hw, 1], dst_offset=dst_offset, op="Conv:gather")

    # (image, first output depth, count) of every block
    if over_images:
        blocks = [(i, 0, min(p.block, p.n - i)) for i in range(0, p.n, p.block)]
    else:
        blocks = [(i, o, min(p.block, p.od - o)) for i in range(p.n)
                  for o in range(0, p.od, p.block)]
    for image, o0, count in blocks:
        params = dict(p.params, batch=count)
        # runs of consecutive output depths (or images) that read the same taps
        runs: list[list[int]] = []
        for j in range(count):
            taps = p.valid_taps(o0 + j)
            if runs and tuple(runs[-1][2:]) == taps:
                runs[-1][1] += 1
            else:
                runs.append([j, 1, *taps])
        for j, length, a, b in runs:
            dst = j * per
            if b > a:
                if over_images:
                    lead, src = p.c * p.d * hw, (image + j) * p.c * p.d * hw
                else:
                    lead, src = p.sd * hw, image * p.c * p.d * hw
                src += ((o0 + (0 if over_images else j)) * p.sd + a * p.dd - p.pd) * hw
                emit_copy(lo, x, g, [length, p.c, b - a, hw], [lead, p.d * hw, p.dd * hw, 1],
                          [per, kd * hw, hw, 1], src_offset=src, dst_offset=dst + a * hw,
                          op="Conv:gather")
            else:
                a = b = kd
            if a > 0:
                fill(length, a, dst)
            if b < kd:
                fill(length, kd - b, dst + b * hw)
        run2d(params, g, out)
        if direct:
            continue
        if over_images:   # images image.. of one depth: one contiguous run of y
            emit_copy(lo, out, y, [count * p.m * ohw], [1], [1],
                      dst_offset=image * p.m * ohw, op="Conv:scatter")
        else:
            emit_copy(lo, out, y, [count, p.m, ohw], [p.m * ohw, ohw, 1],
                      [ohw, p.od * ohw, 1], dst_offset=(image * p.m * p.od + o0) * ohw,
                      op="Conv:scatter")
