"""ConvTranspose: 1-D, 2-D and 3-D transposed convolution (NC + spatial), grouped, with fused
bias and activation. Lowered as one GEMM per group into a column buffer, then a col2im
scatter-add."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node, Value
from .common import act_params, const_input, require_dtype
from .conv import AUTO_PAD, check_conv_weight, window2d
from .registry import OpDef, register


def transpose_geometry(node: Node, in_spatial: list[int], kernel: list[int]) -> dict:
    """Strides, dilations, begin pads and output sizes of a transposed convolution.

    Output position o receives input position i through kernel tap k when
    o = i * stride + k * dilation - begin. Follows the ONNX spec, which onnxruntime matches:
    an explicit output_shape replaces `pads` (the total padding goes mostly to the start,
    except with SAME_UPPER); SAME_* without output_shape makes the output input * stride.
    """
    rank = len(in_spatial)
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = list(node.attr("pads", [0] * (2 * rank)))
    out_pad = list(node.attr("output_padding", [0] * rank))
    out_shape = node.attr("output_shape")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if (len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank
            or len(out_pad) != rank):
        raise ModelError(f"strides/dilations/pads/output_padding do not match {rank} spatial "
                         f"dimensions")
    if out_shape is not None and len(out_shape) != rank:
        raise ModelError(f"output_shape {list(out_shape)} must list the {rank} spatial sizes")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise ModelError("strides and dilations must be positive")
    if any(p < 0 for p in pads) or any(p < 0 for p in out_pad):
        raise ModelError("pads and output_padding must be non-negative")
    if any(k < 1 for k in kernel):
        raise ModelError(f"kernel shape {kernel} must be positive")
    begin, out = [], []
    for axis, (i, k, s, d, op) in enumerate(zip(in_spatial, kernel, strides, dilations,
                                                out_pad)):
        full = s * (i - 1) + op + d * (k - 1) + 1
        if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = int(out_shape[axis]) if out_shape is not None else i * s
            total = max(0, full - o)        # a larger output is padded at the end
            pb = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        elif auto_pad == "VALID":
            pb, o = 0, full
        else:
            pb, o = pads[axis], full - pads[axis] - pads[axis + rank]
        if o < 1:
            raise ModelError(f"the output size along spatial axis {axis} would be {o}")
        begin.append(pb), out.append(o)
    return {"strides": strides, "dilations": dilations, "begin": begin, "out": out}


@register("ConvTranspose")
class ConvTranspose(OpDef):
    fuses_activation = True
    attributes = {"auto_pad": lambda v: v in AUTO_PAD, "dilations": None, "group": None,
                  "kernel_shape": None, "output_padding": None, "output_shape": None,
                  "pads": None, "strides": None}

    def _geometry(self, node: Node, x: Value, w: Value) -> dict:
        kernel = check_conv_weight(node, x, w, "transposed convolution")
        group = int(node.attr("group", 1))
        n, c = x.shape[:2]
        if group < 1 or c % group or w.shape[0] != c:
            raise ModelError(f"group={group} does not fit {c} input channels, weight "
                             f"{list(w.shape)} (expected [C, M/group, ...])")
        geo = transpose_geometry(node, list(x.shape[2:]), kernel)
        geo.update(n=n, c=c, m=w.shape[1] * group, group=group, kernel=kernel)
        return geo

    def infer(self, node, ins, g):
        x, w = ins[0], ins[1]
        require_dtype(node, [x, w] + ([ins[2]] if len(ins) > 2 else []), ["float32"])
        geo = self._geometry(node, x, w)
        if len(ins) > 2 and ins[2] is not None and ins[2].shape != (geo["m"],):
            raise ModelError(f"bias shape {list(ins[2].shape)} is not [{geo['m']}]")
        return [("float32", (geo["n"], geo["m"], *geo["out"]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, w = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        geo = self._geometry(node, x, w)
        weight = const_input(lo.graph, node, 1, "the weight")
        group, c, m = geo["group"], geo["c"], geo["m"]
        spatial = list(x.shape[2:])
        if len(spatial) == 3:
            # The depth axis apart; the kernel's 2-D geometry covers height and width.
            kd, idp, od, sd, dd, pf = (geo["kernel"][0], spatial[0], geo["out"][0],
                                       geo["strides"][0], geo["dilations"][0], geo["begin"][0])
            geo = {k: v[1:] for k, v in geo.items() if isinstance(v, list)}
            spatial = spatial[1:]
        else:
            kd, idp, od, sd, dd, pf = 1, 1, 1, 1, 1, 0
        kh, kw, ih, iw, oh, ow, sh, sw, dh, dw, pt, pl = window2d(geo, spatial)
        cg, mg = c // group, m // group
        # The GEMM's A per group is [Mg*kh*kw, Cg] with contiguous rows: the transpose of the
        # group's slice of W [Cg, Mg, kh, kw].
        packed = np.ascontiguousarray(
            np.asarray(weight, np.float32).reshape(group, cg, mg * kd * kh * kw)
            .transpose(0, 2, 1))
        w_name = lo.add_const(f"{node.name}.W_packed", packed)
        params = {"batch": x.shape[0], "in_channels": c, "in_h": ih, "in_w": iw,
                  "out_channels": m, "out_h": oh, "out_w": ow, "kernel_h": kh, "kernel_w": kw,
                  "stride_h": sh, "stride_w": sw, "dilation_h": dh, "dilation_w": dw,
                  "pad_top": pt, "pad_left": pl, "groups": group, "act": act_params(node),
                  "in_d": idp, "out_d": od, "kernel_d": kd, "stride_d": sd, "dilation_d": dd,
                  "pad_front": pf}
        direct = kd == kh == kw == sd == sh == sw == 1 and pf == pt == pl == 0 and \
            (od, oh, ow) == (idp, ih, iw)
        scratch = 0 if direct else mg * kd * kh * kw * idp * ih * iw * 4
        lo.call("mlcc_f32_conv_transpose2d",
                [node.inputs[0], w_name, node.input(2), node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_conv_transpose2d_params", params=params,
                scratch_bytes=scratch, pool=True)

    def flops(self, node: Node, g: Graph) -> int:
        x, w = g.values[node.inputs[0]], g.values[node.inputs[1]]
        return 2 * x.numel * math.prod(w.shape[1:])
