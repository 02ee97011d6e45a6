"""Conv: 1-D, 2-D and 3-D convolution (NCHW, NCDHW), grouped and depthwise, with fused bias and
activation. 3-D convolutions run as 2-D ones (conv3d.py)."""
from __future__ import annotations

import math

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node, Value
from . import conv3d
from .common import act_params, require_dtype
from .conv_kernels import (ConvEmit, ConvLayer, ConvTarget, ConvVariant, Window2d,
                           choose_variant, choose_variants)
from .registry import OpDef, register

AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


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


def window2d(geo: dict, in_spatial) -> Window2d:
    """Packs window_geometry()'s result (plus the input's spatial size) for a 2-D kernel."""
    return Window2d(*_spatial2d(list(geo["kernel"]), 1), *_spatial2d(list(in_spatial), 1),
                    *_spatial2d(list(geo["out"]), 1), *_spatial2d(list(geo["strides"]), 1),
                    *_spatial2d(list(geo["dilations"]), 1), *_spatial2d(list(geo["begin"]), 0))


def check_conv_weight(node: Node, x: Value, w: Value, what: str) -> list[int]:
    """Validates the ranks of a (transposed) convolution and returns its kernel shape."""
    if len(x.shape) not in (3, 4, 5):
        raise UnsupportedError(f"{len(x.shape) - 2}-D {what} is not supported "
                               f"(1-D, 2-D and 3-D are)")
    if len(w.shape) != len(x.shape):
        raise ModelError(f"weight rank {len(w.shape)} does not match input rank "
                         f"{len(x.shape)}")
    kernel = list(w.shape[2:])
    if node.attr("kernel_shape") is not None and list(node.attr("kernel_shape")) != kernel:
        raise ModelError(f"kernel_shape {node.attr('kernel_shape')} disagrees with the "
                         f"weight shape {list(w.shape)}")
    return kernel


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
        if len(x.shape) == 5 and not all(isinstance(d, int) for d in x.shape + w.shape):
            raise UnsupportedError(f"3-D convolution needs static shapes (input "
                                   f"{list(x.shape)}): bind them with --shape")
        geo = self._geometry(node, x, w)
        if len(ins) > 2 and ins[2] is not None and ins[2].shape != (geo["m"],):
            raise ModelError(f"bias shape {list(ins[2].shape)} is not [{geo['m']}]")
        out = (geo["n"], geo["m"], *geo["out"])
        if len(ins) > 3 and (not node.attrs.get("_residual") or ins[3] is None
                             or ins[3].shape != out):
            raise ModelError(f"Conv takes 2 or 3 inputs, not {len(ins)}")
        return [("float32", out)]

    def plan3d(self, node: Node, g: Graph) -> conv3d.Conv3dPlan:
        """How a 3-D convolution runs as a 2-D one (conv3d.py)."""
        x, w = g.values[node.inputs[0]], g.values[node.inputs[1]]
        return conv3d.plan(self._geometry(node, x, w), x.shape[2:],
                           g.const(node.inputs[1]) is not None, act_params(node))

    def params(self, node: Node, g: Graph) -> dict:
        """The fields of mlcc_conv2d_params (conv.h) for this node (a 3-D one: of the 2-D
        convolution it runs as)."""
        x, w = g.values[node.inputs[0]], g.values[node.inputs[1]]
        if len(x.shape) == 5:
            return self.plan3d(node, g).params
        geo = self._geometry(node, x, w)
        kh, kw, ih, iw, oh, ow, sh, sw, dh, dw, pt, pl = window2d(geo, x.shape[2:])
        return {"batch": geo["n"], "in_channels": geo["c"], "in_h": ih, "in_w": iw,
                "out_channels": geo["m"], "out_h": oh, "out_w": ow, "kernel_h": kh,
                "kernel_w": kw, "stride_h": sh, "stride_w": sw, "dilation_h": dh,
                "dilation_w": dw, "pad_top": pt, "pad_left": pl, "groups": geo["group"],
                "act": act_params(node)}

    def layer(self, node: Node, g: Graph) -> ConvLayer:
        """The node as the kernel choice sees it (conv_kernels.choose_variant)."""
        p = self.params(node, g)
        residual = bool(node.attrs.get("_residual"))
        if residual and (g.const(node.inputs[1]) is None or p["groups"] != 1
                         or (p["kernel_h"], p["kernel_w"]) != (1, 1)):
            raise RuntimeError(f"{node.name}: a residual is only fused into a 1x1 Conv with "
                               f"constant weights (passes.fuse_residual_add)")
        return ConvLayer.from_params(p, const_weights=g.const(node.inputs[1]) is not None,
                                     residual=residual)

    def variant(self, node: Node, g: Graph, options: dict) -> ConvVariant:
        """The kernel variant this node runs on a target with these lowering options."""
        return choose_variant(self.layer(node, g), ConvTarget.from_options(options))

    def lower(self, node: Node, lo: Lowering) -> None:
        w_const = lo.graph.const(node.inputs[1])
        if len(lo.value(node.inputs[0]).shape) != 5:
            self._lower_2d(node, lo, self.params(node, lo.graph), node.inputs[0],
                           node.inputs[1], w_const, node.outputs[0], {})
            return
        plan = self.plan3d(node, lo.graph)
        w_name = node.inputs[1]
        if w_const is not None:
            w_const = plan.weights(w_const)
            w_name = lo.add_const(f"{node.name}.W_2d", w_const)
        packed: dict = {}
        conv3d.lower(plan, node, lo, lambda p, x, y: self._lower_2d(
            node, lo, p, x, w_name, w_const, y, packed))

    def _lower_2d(self, node: Node, lo: Lowering, params: dict, x: str, w: str, w_const,
                  y: str, packed: dict) -> None:
        """The calls of the 2-D convolution with these params from x into y (packed: the
        weight packings made so far, shared by the calls of one node)."""
        residual = bool(node.attrs.get("_residual"))
        layer = ConvLayer.from_params(params, const_weights=w_const is not None,
                                      residual=residual)
        target = ConvTarget.from_options(lo.options)
        for sizes, variant in choose_variants(layer, target, lo.options.get("conv_choices"),
                                              node.name):
            args = [x, w, node.input(2), y]
            emit = ConvEmit(node, lo, layer, target, params, args, w_const,
                            node.input(3) if residual else None, packed)
            lo.size_class = sizes
            try:
                variant.lower(emit, variant.kernel_for(layer))
            finally:
                lo.size_class = None

    def flops(self, node: Node, g: Graph) -> int:
        w, y = g.values[node.inputs[1]], g.values[node.outputs[0]]
        return 2 * y.numel * math.prod(w.shape[1:]) + (y.numel if node.attrs.get("_residual")
                                                        else 0)
