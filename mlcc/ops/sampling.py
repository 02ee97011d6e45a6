"""Sampling images: GridSample (opset 16, 20, 22; 1 to 3 spatial axes, nearest / linear /
cubic, padding zeros / border / reflection, align_corners), AffineGrid (opset 20: the grid of
an affine transform, rewritten into a MatMul of a constant base grid) and Col2Im (opset 18:
columns summed back into an image, any number of spatial axes), on the kernels of
runtime_c/kernels/sampling.h.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Enum, Lowering, Node
from .common import MAX_RANK, const_input, require_dtype
from .registry import OpDef, lookup, register

# GridSample's modes: opset 16 names them bilinear and bicubic, opset 20 linear and cubic
GRID_MODES = {"nearest": "MLCC_GRID_NEAREST", "linear": "MLCC_GRID_LINEAR",
              "bilinear": "MLCC_GRID_LINEAR", "cubic": "MLCC_GRID_CUBIC",
              "bicubic": "MLCC_GRID_CUBIC"}
GRID_PADDINGS = {"zeros": "MLCC_GRID_ZEROS", "border": "MLCC_GRID_BORDER",
                 "reflection": "MLCC_GRID_REFLECTION"}
MAX_GRID_DIMS = 3             # MLCC_GRID_SAMPLE_MAX_DIMS in sampling.h


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


@register("GridSample", since=16)
class GridSample(OpDef):
    attributes = {"align_corners": lambda v: v in (0, 1),
                  "mode": lambda v: _text(v) in GRID_MODES,
                  "padding_mode": lambda v: _text(v) in GRID_PADDINGS}

    def check(self, node):
        problems = super().check(node)
        mode = _text(node.attr("mode", "bilinear" if node.version < 20 else "linear"))
        if (mode in ("linear", "cubic")) == (node.version < 20) and mode != "nearest":
            problems.append(f"mode {mode!r} is not a mode of GridSample-{node.version}")
        return problems

    def infer(self, node, ins, g):
        x, grid = ins
        require_dtype(node, [x, grid], ["float32"])
        nd = len(x.shape) - 2
        if nd < 1 or len(grid.shape) != nd + 2 or grid.shape[-1] != nd or \
                grid.shape[0] != x.shape[0]:
            raise ModelError(f"grid {list(grid.shape)} does not fit input {list(x.shape)} "
                             f"(expected [N, out_1, ..., out_{max(nd, 1)}, {max(nd, 1)}])")
        if nd > MAX_GRID_DIMS:
            raise UnsupportedError(f"{nd} spatial axes (at most {MAX_GRID_DIMS} are supported)")
        return [(x.dtype, tuple(x.shape[:2]) + tuple(grid.shape[1:-1]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, grid = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        y = lo.value(node.outputs[0])
        if y.numel == 0:
            return
        nd = len(x.shape) - 2
        mode = _text(node.attr("mode", "bilinear" if node.version < 20 else "linear"))
        lo.call("mlcc_f32_grid_sample", [x.name, grid.name, y.name], [y.name],
                params_type="mlcc_grid_sample_params",
                params={"n": x.shape[0], "c": x.shape[1],
                        "points": math.prod(grid.shape[1:-1]), "nd": nd,
                        "in_dims": list(x.shape[2:]) + [1] * (MAX_GRID_DIMS - nd),
                        "mode": Enum(GRID_MODES[mode]),
                        "padding": Enum(GRID_PADDINGS[_text(node.attr("padding_mode",
                                                                      "zeros"))]),
                        "align_corners": int(node.attr("align_corners", 0))}, pool=True)

    def flops(self, node, g):
        x = g.values[node.inputs[0]]
        taps = {"nearest": 1, "linear": 2, "bilinear": 2}.get(
            _text(node.attr("mode", "linear")), 4) ** (len(x.shape) - 2)
        return 2 * taps * g.values[node.outputs[0]].numel


@register("AffineGrid", since=20)
class AffineGrid(OpDef):
    """grid[n, ..., :] = theta[n] @ [x, y, (z,) 1] over the base grid of normalized
    coordinates in [-1, 1] (pixel centres; the corner pixels' centres with align_corners):
    a constant [points, nd + 1] base grid times theta transposed, one batched MatMul."""
    attributes = {"align_corners": lambda v: v in (0, 1)}

    def _size(self, node, g) -> list[int]:
        size = [int(s) for s in const_input(g, node, 1, "size").reshape(-1)]
        if len(size) not in (4, 5) or any(s < 1 for s in size):
            raise ModelError(f"size {size} must be [N, C, H, W] or [N, C, D, H, W] of "
                             f"positive sizes")
        return size

    def infer(self, node, ins, g):
        theta = ins[0]
        require_dtype(node, [theta], ["float32"])
        size = self._size(node, g)
        nd = len(size) - 2
        if tuple(theta.shape) != (size[0], nd, nd + 1):
            raise ModelError(f"theta {list(theta.shape)} is not [{size[0]}, {nd}, {nd + 1}] "
                             f"for size {size}")
        if node.attr("align_corners", 0) and 1 in size[2:]:
            raise UnsupportedError(f"align_corners=1 with a spatial size of 1 (size {size}): "
                                   f"the coordinate of a single pixel between the corners "
                                   f"-1 and 1 is 0 / 0")
        return [(theta.dtype, (size[0], *size[2:], nd))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        size = self._size(node, g)
        spatial, nd = size[2:], len(size) - 2
        align = bool(node.attr("align_corners", 0))
        axes = [(-1 + 2 * np.arange(s) / (s - 1)) if align else (-1 + (2 * np.arange(s) + 1) / s)
                for s in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")           # outermost axis first
        base = np.stack([m.reshape(-1) for m in reversed(mesh)]
                        + [np.ones(math.prod(spatial))], axis=1).astype(np.float32)
        base_name = lo.add_const(f"{node.name}.base_grid", base)
        theta_t = lo.temp(f"{node.name}.theta_t", "float32", (size[0], nd + 1, nd))
        points = lo.temp(f"{node.name}.points", "float32", (size[0], base.shape[0], nd))
        shape = lo.add_const(f"{node.name}.shape", np.array([size[0], *spatial, nd], np.int64))
        for p in (Node(f"{node.name}/transpose", "Transpose", [node.inputs[0]], [theta_t],
                       {"perm": [0, 2, 1]}, version=13),
                  Node(f"{node.name}/matmul", "MatMul", [base_name, theta_t], [points],
                       version=13),
                  Node(f"{node.name}/reshape", "Reshape", [points, shape], [node.outputs[0]],
                       version=14)):
            lookup(p).lower(p, lo)

    def flops(self, node, g):
        return 2 * (g.values[node.inputs[0]].shape[2]) * g.values[node.outputs[0]].numel


@register("Col2Im", since=18)
class Col2Im(OpDef):
    attributes = {"strides": None, "pads": None, "dilations": None}

    def _geometry(self, node, x, g):
        image = [int(v) for v in const_input(g, node, 1, "image_shape").reshape(-1)]
        block = [int(v) for v in const_input(g, node, 2, "block_shape").reshape(-1)]
        nd = len(image)
        strides = list(node.attr("strides", [1] * nd))
        dilations = list(node.attr("dilations", [1] * nd))
        pads = list(node.attr("pads", [0] * 2 * nd))
        if len(block) != nd or len(strides) != nd or len(dilations) != nd or \
                len(pads) != 2 * nd or nd < 1:
            raise ModelError(f"image_shape {image}, block_shape {block}, strides {strides}, "
                             f"dilations {dilations} and pads {pads} do not agree")
        if min(strides + dilations + block + image) < 1 or min(pads) < 0:
            raise ModelError("strides, dilations, block and image sizes must be positive, "
                             "pads non-negative")
        if nd > MAX_RANK - 2:
            raise UnsupportedError(f"{nd} spatial axes (at most {MAX_RANK - 2} are supported)")
        cols = [(image[i] + pads[i] + pads[i + nd] - dilations[i] * (block[i] - 1) - 1)
                // strides[i] + 1 for i in range(nd)]
        if len(x.shape) != 3 or min(cols) < 1 or x.shape[1] % math.prod(block) or \
                x.shape[2] != math.prod(cols):
            raise ModelError(f"input {list(x.shape)} is not [N, C x {math.prod(block)}, "
                             f"{math.prod(cols)}] for image {image} and block {block}")
        return image, block, cols, strides, dilations, pads[:nd]

    def infer(self, node, ins, g):
        x = ins[0]
        require_dtype(node, [x], ["float32"])
        image, block, *_ = self._geometry(node, x, g)
        return [(x.dtype, (x.shape[0], x.shape[1] // math.prod(block), *image))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        if y.numel == 0:
            return
        image, block, cols, strides, dilations, pads = self._geometry(node, x, lo.graph)
        pad = [1] * (MAX_RANK - len(image))
        lo.call("mlcc_f32_col2im", [x.name, y.name], [y.name],
                params_type="mlcc_col2im_params",
                params={"n": x.shape[0], "c": y.shape[1], "nd": len(image),
                        "image": image + pad, "block": block + pad, "cols": cols + pad,
                        "strides": strides + pad, "dilations": dilations + pad,
                        "pads_begin": pads + [0] * len(pad)})

    def flops(self, node, g):
        return g.values[node.inputs[0]].numel


@register("RoiAlign", since=10)
class RoiAlign(OpDef):
    """avg and max (onnxruntime's: the largest weighted corner of each sample); opset 10's
    boxes are output_half_pixel, opset 16's default half_pixel. Batch indices are checked at
    run time (MLCC_ERR_INDEX_OUT_OF_RANGE)."""
    attributes = {"coordinate_transformation_mode":
                  lambda v: _text(v) in ("half_pixel", "output_half_pixel"),
                  "mode": lambda v: _text(v) in ("avg", "max"), "output_height": None,
                  "output_width": None, "sampling_ratio": None, "spatial_scale": None}

    def infer(self, node, ins, g):
        x, rois, idx = ins
        require_dtype(node, [x, rois], ["float32"])
        if idx.dtype != "int64":
            raise ModelError(f"batch_indices must be int64, not {idx.dtype}")
        if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 4 or \
                tuple(idx.shape) != (rois.shape[0],):
            raise ModelError(f"X {list(x.shape)}, rois {list(rois.shape)} and batch_indices "
                             f"{list(idx.shape)} are not [N, C, H, W], [R, 4] and [R]")
        out_h, out_w = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
        if out_h < 1 or out_w < 1 or int(node.attr("sampling_ratio", 0)) < 0:
            raise ModelError("output_height and output_width must be positive, "
                             "sampling_ratio non-negative")
        return [(x.dtype, (rois.shape[0], x.shape[1], out_h, out_w))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        if y.numel == 0:
            return
        default = "half_pixel" if node.version >= 16 else "output_half_pixel"
        lo.call("mlcc_f32_roi_align__i64", [*node.inputs, y.name], [y.name],
                params_type="mlcc_roi_align_params",
                params={"n": x.shape[0], "c": x.shape[1], "height": x.shape[2],
                        "width": x.shape[3], "num_rois": y.shape[0], "out_h": y.shape[2],
                        "out_w": y.shape[3],
                        "sampling_ratio": int(node.attr("sampling_ratio", 0)),
                        "spatial_scale": float(node.attr("spatial_scale", 1.0)),
                        "half_pixel": int(_text(node.attr("coordinate_transformation_mode",
                                                          default)) == "half_pixel"),
                        "max_mode": int(_text(node.attr("mode", "avg")) == "max")},
                returns_status=True, pool=True)

    def flops(self, node, g):
        sr = int(node.attr("sampling_ratio", 0)) or 2
        return 8 * sr * sr * g.values[node.outputs[0]].numel


@register("MaxRoiPool", since=1)
class MaxRoiPool(OpDef):
    """Fast R-CNN's max pooling of boxes as onnxruntime computes it (onnx.reference has no
    MaxRoiPool): corners rounded after spatial_scale, bins of floor/ceil bounds clipped to the
    image, 0 for an empty bin. A bin of only negative values gives its maximum, where
    onnxruntime starts its maximum at FLT_MIN (the smallest positive float) and so gives
    1.2e-38. Batch indices and corners are checked at run time (MLCC_ERR_INDEX_OUT_OF_RANGE)."""
    attributes = {"pooled_shape": lambda v: len(v) == 2 and min(v) > 0,
                  "spatial_scale": lambda v: v > 0}

    def infer(self, node, ins, g):
        x, rois = ins
        require_dtype(node, [x, rois], ["float32"])
        if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 5:
            raise ModelError(f"X {list(x.shape)} and rois {list(rois.shape)} are not "
                             f"[N, C, H, W] and [R, 5]")
        if node.attr("pooled_shape") is None:
            raise ModelError("MaxRoiPool needs the attribute pooled_shape")
        out_h, out_w = (int(v) for v in node.attr("pooled_shape"))
        return [(x.dtype, (rois.shape[0], x.shape[1], out_h, out_w))]

    def lower(self, node: Node, lo: Lowering) -> None:
        x, y = lo.value(node.inputs[0]), lo.value(node.outputs[0])
        if y.numel == 0:
            return
        lo.call("mlcc_f32_max_roi_pool", [*node.inputs, y.name], [y.name],
                params_type="mlcc_max_roi_pool_params",
                params={"n": x.shape[0], "c": x.shape[1], "height": x.shape[2],
                        "width": x.shape[3], "num_rois": y.shape[0], "out_h": y.shape[2],
                        "out_w": y.shape[3],
                        "spatial_scale": float(node.attr("spatial_scale", 1.0))},
                returns_status=True, pool=True)

    def flops(self, node, g):
        return g.values[node.outputs[0]].numel    # at least one comparison per output


@register("DeformConv", since=19)
class DeformConv(OpDef):
    """2-D deformable convolution: groups, offset groups, strides, pads, dilations, the
    optional bias and mask; the offsets and mask may be run-time values."""
    attributes = {"dilations": None, "group": None, "kernel_shape": None,
                  "offset_group": None, "pads": None, "strides": None}

    def _geometry(self, node, ins):
        x, w, off = ins[0], ins[1], ins[2]
        if len(x.shape) != 4:
            raise UnsupportedError(f"input {list(x.shape)}: 2-D DeformConv (4-D input) only")
        kh, kw = [int(k) for k in node.attr("kernel_shape", w.shape[2:])]
        sh, sw = [int(s) for s in node.attr("strides", [1, 1])]
        dh, dw = [int(d) for d in node.attr("dilations", [1, 1])]
        pads = [int(v) for v in node.attr("pads", [0, 0, 0, 0])]
        group, og = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
        n, c, h, wd = x.shape
        oh = (h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1
        ow = (wd + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1
        if (len(w.shape) != 4 or (kh, kw) != tuple(w.shape[2:]) or group < 1 or og < 1
                or c != w.shape[1] * group or w.shape[0] % group or c % og
                or min(sh, sw, dh, dw) < 1 or oh < 1 or ow < 1
                or tuple(off.shape) != (n, og * kh * kw * 2, oh, ow)):
            raise ModelError(f"X {list(x.shape)}, W {list(w.shape)} and offset "
                             f"{list(off.shape)} do not agree with group {group}, "
                             f"offset_group {og} and the kernel's geometry")
        return dict(n=n, c=c, height=h, width=wd, oc=w.shape[0], out_h=oh, out_w=ow, kh=kh,
                    kw=kw, stride_h=sh, stride_w=sw, pad_h=pads[0], pad_w=pads[1], dil_h=dh,
                    dil_w=dw, group=group, offset_group=og)

    def infer(self, node, ins, g):
        require_dtype(node, [v for v in ins if v is not None], ["float32"])
        p = self._geometry(node, ins)
        bias = ins[3] if len(ins) > 3 else None
        mask = ins[4] if len(ins) > 4 else None
        if bias is not None and tuple(bias.shape) != (p["oc"],):
            raise ModelError(f"B {list(bias.shape)} is not [{p['oc']}]")
        want = (p["n"], p["offset_group"] * p["kh"] * p["kw"], p["out_h"], p["out_w"])
        if mask is not None and tuple(mask.shape) != want:
            raise ModelError(f"mask {list(mask.shape)} is not {list(want)}")
        return [(ins[0].dtype, (p["n"], p["oc"], p["out_h"], p["out_w"]))]

    def lower(self, node: Node, lo: Lowering) -> None:
        ins = [lo.value(i) if i else None for i in node.inputs]
        lo.call("mlcc_f32_deform_conv2d",
                [node.inputs[0], node.inputs[1], node.inputs[2], node.input(3), node.input(4),
                 node.outputs[0]], [node.outputs[0]],
                params_type="mlcc_deform_conv_params", params=self._geometry(node, ins),
                pool=True)

    def flops(self, node, g):
        w = g.values[node.inputs[1]]
        return 2 * g.values[node.outputs[0]].numel * math.prod(w.shape[1:]) + \
            10 * g.values[node.inputs[2]].numel * g.values[node.inputs[0]].shape[1]
