"""Gemm and MatMul, lowered onto one GEMM kernel (mlcc_f32_gemm__threaded and its batched form)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError
from ..ir import Graph, Lowering, Node
from ..ir.symbolic import SymInt, dim_vars, is_one, is_symbolic, upper
from .common import act_params, broadcast_shapes, broadcast_strides, emit_copy, require_dtype
from .registry import OpDef, register


GEMM_MR = 8          # MLCC_GEMM_MR in runtime_c/kernels/gemm.h: rows of a packed A panel
GEMM_KC = 256        # MLCC_GEMM_KC: the depth of one k block
GEMM_MC = 256        # MLCC_GEMM_MC: rows of A per block
GEMM_B_PANEL = 32    # MLCC_GEMM_B_PANEL without a target's b_panel (Target.gemm_b_panel)
GEMM_ROWS_OUTER_K = 64  # MLCC_GEMM_ROWS_OUTER_K (gemm.c): depths that run tile row by row
GEMV_ROW_FLOATS = 16  # a constant B of a one-row product: rows padded to 64 bytes (gemm.h)


def pack_a(a: np.ndarray, mr: int = GEMM_MR) -> np.ndarray:
    """[..., M, K] -> the packed A layout of mlcc_f32_gemm__packed (gemm.h), per leading index:
    K cut into GEMM_KC-deep blocks, block-major; in a block of depth kc, ceil(M / mr)
    panels of kc x mr (rows past M zero). mr = 32: mlcc_f32_conv2d__implicit_t (conv.h)."""
    GEMM_MR = mr  # noqa: N806
    *lead, m, k = a.shape
    mp = -(-m // GEMM_MR) * GEMM_MR
    padded = np.zeros((*lead, mp, k), np.float32)
    padded[..., :m, :] = a
    panels = padded.reshape(*lead, mp // GEMM_MR, GEMM_MR, k).swapaxes(-1, -2)
    flat = math.prod(lead)
    blocks = [panels[..., k0:k0 + GEMM_KC, :].reshape(flat, -1) for k0 in range(0, k, GEMM_KC)]
    if not blocks:
        return np.zeros(0, np.float32)
    return np.ascontiguousarray(np.concatenate(blocks, axis=1)).reshape(-1)


def pack_b_panels(b: np.ndarray, w: int = GEMM_B_PANEL) -> np.ndarray:
    """[K, N] -> the B panels of mlcc_f32_gemm__panels_threaded (gemm.h): ceil(N / w) panels of
    K x w, panel j holding columns [j * w, j * w + w) (columns past N zero)."""
    k, n = b.shape
    npan = -(-n // w)
    padded = np.zeros((k, npan * w), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, npan, w).transpose(1, 0, 2)).reshape(-1)


def b_panel(options: dict) -> int:
    """The target's MLCC_GEMM_B_PANEL (lowering option b_panel)."""
    return int(options.get("b_panel", GEMM_B_PANEL))


def gemm_call(lo: Lowering, a: str, b: str, bias: str | None, out: str, params: dict) -> None:
    """One product on mlcc_f32_gemm__threaded; a constant B of a product of more than one row
    is stored in column panels instead and read by mlcc_f32_gemm__panels_threaded (the same
    sums, contiguous weights: gemm.h). One-row products keep B in rows, which their
    matrix-vector loop reads along, and so do B with more than an eighth of padding in the
    last panel (narrow B: its rows are close together anyway, and the blob would grow).
    A constant B of a one-row product has its rows padded to whole cache lines, so that every
    row starts on one and the last partial vector of columns is read in place (the digits
    models' 10 logits: bench/gemv_bench.py), and says whether it is finite
    (b_finite: the product may then skip the rows that meet a zero of A)."""
    b_const = lo.graph.const(b)
    n = params["n"]
    width = b_panel(lo.options)
    waste = -n % width
    # a dynamic number of rows (ir.symbolic): B laid out for many rows, as a static build at
    # the largest count has it (no weight byte more). At 1 row the tiles run over B's panels
    # (MiniLM at 1 token: 1.02 of a static build's one-row loop over B in rows; the one-row
    # loop over the panels was 1.17, loaded); B kept in rows (narrow) takes the one-row loop
    # at 1, with b_finite where the range holds 1
    dynamic = is_symbolic(params["m"])
    one_row = params["m"].lo <= 1 if dynamic else params["m"] <= 1
    if b_const is not None and (dynamic or not one_row) and params["ldb"] == n \
            and waste <= n // 8:
        panels = pack_b_panels(b_const.reshape(params["k"], params["n"]).astype(np.float32),
                               width)
        b = lo.add_const(f"{b}.panels", panels)
        lo.call("mlcc_f32_gemm__panels_threaded", [a, b, bias, out], [out],
                params_type="mlcc_gemm_params", pool=True, params=params)
        return
    if b_const is not None and one_row and params["ldb"] == n:
        b_rows = b_const.reshape(params["k"], n).astype(np.float32)
        # (a dynamic row count keeps B as a static build at its largest has it: the one-row
        # loop reads the last partial vector through a copy where a row ends, the same sums)
        ldb = n if dynamic else -(-n // GEMV_ROW_FLOATS) * GEMV_ROW_FLOATS
        if ldb != n:
            padded = np.zeros((params["k"], ldb), np.float32)
            padded[:, :n] = b_rows
            b = lo.add_const(f"{b}.rows", padded)
        params = {**params, "ldb": ldb, "b_finite": int(np.isfinite(b_rows).all())}
    lo.call("mlcc_f32_gemm__threaded", [a, b, bias, out], [out],
            params_type="mlcc_gemm_params", pool=True, params=params)


def gemm_params(m: int, n: int, k: int, *, a_strides: tuple[int, int], ldb: int, ldc: int,
                bias_strides: tuple[int, int] = (0, 0), alpha: float = 1.0, beta: float = 1.0,
                node: Node | None = None) -> dict:
    return {"m": m, "n": n, "k": k, "a_row_stride": a_strides[0], "a_col_stride": a_strides[1],
            "ldb": ldb, "ldc": ldc, "bias_row_stride": bias_strides[0],
            "bias_col_stride": bias_strides[1], "alpha": float(alpha), "beta": float(beta),
            "act": act_params(node) if node is not None else act_params(Node("", "", [], [])),
            "b_finite": 0}


@register("Gemm")
class Gemm(OpDef):
    fuses_activation = True
    quant_rules = ("integer_producer",)
    attributes = {"alpha": None, "beta": None, "transA": None, "transB": None,
                  "broadcast": lambda v: True}   # opset < 7 flag; broadcasting is the default

    def _dims(self, node: Node, a, b):
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise ModelError(f"Gemm needs 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
        m, k = a.shape[::-1] if node.attr("transA", 0) else a.shape
        k2, n = b.shape[::-1] if node.attr("transB", 0) else b.shape
        if k != k2:
            raise ModelError(f"inner dimensions differ: A {list(a.shape)}, B {list(b.shape)} "
                             f"(transA={node.attr('transA', 0)}, transB={node.attr('transB', 0)})")
        return m, n, k

    def infer(self, node, ins, g):
        require_dtype(node, ins, ["float32"])
        m, n, _ = self._dims(node, ins[0], ins[1])
        if len(ins) > 2 and ins[2] is not None:
            broadcast_shapes(ins[2].shape, (m, n))
            if broadcast_shapes(ins[2].shape, (m, n)) != (m, n):
                raise ModelError(f"C {list(ins[2].shape)} does not broadcast to [{m}, {n}]")
        return [("float32", (m, n))]

    def lower(self, node: Node, lo: Lowering) -> None:
        g = lo.graph
        a, b = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        m, n, k = self._dims(node, a, b)
        alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
        a_strides = (1, m) if node.attr("transA", 0) else (k, 1)
        b_name, b_const = node.inputs[1], g.const(node.inputs[1])
        if b_const is not None:
            # The kernel reads B as contiguous [K, N] rows: transpose and scale at compile time.
            packed = (b_const.T if node.attr("transB", 0) else b_const) * np.float32(alpha)
            b_name, alpha = lo.add_const(f"{node.name}.B_kn", packed.astype(np.float32)), 1.0
        elif node.attr("transB", 0):
            b_name = lo.temp(f"{node.name}.B_kn", "float32", (k, n))
            emit_copy(lo, node.inputs[1], b_name, [k, n], [1, k], [n, 1], op="Transpose(B)")
        c_name, bias_strides = node.input(2), (0, 0)
        if c_name:
            c = lo.value(c_name)
            bias_strides = tuple(broadcast_strides(c.shape, (m, n)))
            if c.const is not None and beta != 1.0:
                c_name, beta = lo.add_const(f"{node.name}.C_scaled",
                                            (c.const * np.float32(beta)).astype(np.float32)), 1.0
        gemm_call(lo, node.inputs[0], b_name, c_name, node.outputs[0],
                  gemm_params(m, n, k, a_strides=a_strides, ldb=n, ldc=n,
                              bias_strides=bias_strides, alpha=alpha, beta=beta, node=node))

    def flops(self, node: Node, g: Graph) -> int:
        a = g.values[node.inputs[0]]
        k = a.shape[0] if node.attr("transA", 0) else a.shape[1]
        return 2 * g.values[node.outputs[0]].numel * k


@register("MatMul")
class MatMul(OpDef):
    fuses_activation = True
    quant_rules = ("integer_producer",)
    attributes = {}

    @staticmethod
    def _shapes(a_shape, b_shape):
        """(batch shape, M, N, K, a as >=2-D, b as >=2-D, output shape)."""
        if not a_shape or not b_shape:
            raise ModelError("MatMul inputs must have rank >= 1")
        a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
        b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
        if a2[-1] != b2[-2]:
            raise ModelError(f"inner dimensions differ: {list(a_shape)} x {list(b_shape)}")
        batch = broadcast_shapes(a2[:-2], b2[:-2])
        m, k, n = a2[-2], a2[-1], b2[-1]
        out = batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
        return batch, m, n, k, a2, b2, out

    def infer(self, node, ins, g):
        require_dtype(node, ins, ["float32"])
        out = self._shapes(ins[0].shape, ins[1].shape)[-1]
        if len(ins) > 2 and ins[2] is not None and (len(out) < 2 or ins[2].shape != out[-1:]):
            # a third input only comes from passes.fuse_matmul_bias: one bias per column
            raise ModelError(f"MatMul bias {list(ins[2].shape)} is not [{out[-1]}]")
        return [("float32", out)]

    def lower(self, node: Node, lo: Lowering) -> None:
        a, b = lo.value(node.inputs[0]), lo.value(node.inputs[1])
        batch, m, n, k, a2, b2, _ = self._shapes(a.shape, b.shape)
        out = node.outputs[0]
        nb = math.prod(batch)
        bias = node.input(2)                  # set by passes.fuse_matmul_bias: [N]
        bias_strides = (0, 1) if bias else (0, 0)
        if is_one(math.prod(b2[:-2])):
            # B is shared by every batch: stack A's batches into one tall GEMM.
            gemm_call(lo, node.inputs[0], node.inputs[1], bias, out,
                      gemm_params(nb * m, n, k, a_strides=(k, 1), ldb=n, ldc=n,
                                  bias_strides=bias_strides, node=node))
            return
        if is_symbolic(batch):
            # a dynamic outermost batch axis: the offset tables at its largest size hold for
            # every smaller one (a prefix); anything else would need tables per size
            if is_symbolic(batch[1:]):
                raise SymInt.var(dim_vars([batch])[0]).undecided(
                    "a batched MatMul whose inner batch axes have a dynamic size")
            a2, b2, batch = ([upper(d) for d in s] for s in (a2, b2, batch))
        # tables in matrices: one table for matrices of any size (the kernel scales them)
        a_off = self._offsets(a2, batch)
        b_off = self._offsets(b2, batch)
        a_tab = lo.add_const(f"{node.name}.a_offsets", a_off)
        b_tab = lo.add_const(f"{node.name}.b_offsets", b_off)
        lo.call("mlcc_f32_batched_gemm", [node.inputs[0], node.inputs[1], bias, out, a_tab, b_tab],
                [out], params_type="mlcc_batched_gemm_params", pool=True,
                params={"gemm": gemm_params(m, n, k, a_strides=(k, 1), ldb=n, ldc=n,
                                            bias_strides=bias_strides, node=node),
                        "batch": nb, "c_batch_stride": m * n, "a_matrix": m * k,
                        "b_matrix": k * n})

    @staticmethod
    def _offsets(shape2, batch) -> np.ndarray:
        """Offset of each broadcast batch's matrix inside the operand, in matrices."""
        strides = broadcast_strides(shape2[:-2], batch)
        idx = np.indices(batch).reshape(len(batch), -1) if batch else np.zeros((0, 1), np.int64)
        offs = (np.asarray(strides, np.int64).reshape(-1, 1) * idx).sum(axis=0)
        return offs.astype(np.int64).reshape(-1)

    def flops(self, node: Node, g: Graph) -> int:
        a = g.values[node.inputs[0]]
        return 2 * g.values[node.outputs[0]].numel * a.shape[-1]
