"""Audio front-ends: DFT and STFT on an FFT planned at compile time, and the operators that
make their constant inputs (HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix).

The window and mel operators exist only at compile time: their inputs (size, dft_length,
sample rate, ...) are constants in real models, so infer_and_fold folds them with the ONNX
reference; a run-time input is refused by name. DFT and STFT lower to one call of
mlcc_f32_dft (runtime_c/kernels/fft.c) whose plan (twiddles, generic butterflies' roots,
Bluestein's chirp and its transform) is computed here and stored as a float64 weight.
docs/audio.md says what is supported.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node
from .common import const_input, norm_axis, require_dtype
from .compile_time import _CompileTime
from .registry import OpDef, register

MAX_STAGES = 32                  # MLCC_FFT_MAX_STAGES in fft.h
DFT_SLICES = 4                   # MLCC_DFT_SLICES in fft.h: threads that share a DFT
GENERIC_RADICES = (3, 5, 7, 11, 13)   # the generic butterfly's radices (fft.c: up to 13)

_binary = {0: True, 1: True}.get


def _flag(v) -> bool:
    return _binary(int(v), False)


# --- compile-time operators ------------------------------------------------------------------

@register("HannWindow", since=17)
class HannWindow(_CompileTime):
    attributes = {"output_datatype": None, "periodic": _flag}
    value_inputs = ((0, "size"),)


@register("HammingWindow", since=17)
class HammingWindow(HannWindow):
    pass


@register("BlackmanWindow", since=17)
class BlackmanWindow(HannWindow):
    pass


@register("MelWeightMatrix", since=17)
class MelWeightMatrix(_CompileTime):
    attributes = {"output_datatype": None}
    value_inputs = ((0, "num_mel_bins"), (1, "dft_length"), (2, "sample_rate"),
                    (3, "lower_edge_hertz"), (4, "upper_edge_hertz"))


# --- the FFT plan --------------------------------------------------------------------------

def radices(n: int) -> list[int] | None:
    """The Stockham stages of a length-n FFT, or None when n has a prime factor over 13 (then
    Bluestein's algorithm runs it). The generic radices (13 down to 3) come first and the 2
    and the 4s last: the last stages' butterflies at k = 0 multiply by 1 and -i only, so that
    bins n/2 and n/4 of a real signal get an exact 0 imaginary part, as in numpy."""
    first, last = [], []
    for r in GENERIC_RADICES[::-1]:
        while n % r == 0:
            first.append(r)
            n //= r
    while n % 4 == 0:
        last.append(4)
        n //= 4
    if n % 2 == 0:
        last.insert(0, 2)
        n //= 2
    return first + last if n == 1 else None


def _stage_table(n: int, rads: list[int]) -> list[np.ndarray]:
    parts, L = [], 1
    for r in rads:
        k = np.arange(L)[:, None]
        q = np.arange(1, r)[None, :]
        parts.append(np.exp(-2j * np.pi * ((q * k) % (L * r)) / (L * r)).reshape(-1))
        if r not in (2, 4):
            parts.append(np.exp(-2j * np.pi * np.arange(r) / r))
        L *= r
    return parts


def fft_plan(n: int) -> tuple[dict, np.ndarray]:
    """The params of fft.h that describe the transform of length n, and its plan (float64,
    complex interleaved): see fft.h for the layout."""
    rads = radices(n)
    bluestein = rads is None
    m = n
    if bluestein:
        m = 1 << (2 * n - 2).bit_length()            # a power of two >= 2n - 1
        rads = radices(m)
    parts = _stage_table(m, rads)
    if bluestein:
        t = np.arange(n, dtype=np.int64)
        chirp = np.exp(-1j * np.pi * ((t * t) % (2 * n)) / n)
        b = np.zeros(m, dtype=np.complex128)
        b[:n] = np.conj(chirp)
        b[m - n + 1:] = np.conj(chirp[1:])[::-1]
        parts += [chirp, np.fft.fft(b) / m]
    table = np.concatenate(parts) if parts else np.zeros(0, np.complex128)
    flat = np.empty(2 * table.size, dtype=np.float64)
    flat[0::2], flat[1::2] = table.real, table.imag
    if len(rads) > MAX_STAGES:
        raise UnsupportedError(f"a transform of length {n} needs {len(rads)} FFT stages "
                               f"(at most {MAX_STAGES})")
    params = {"fft_n": m, "nstages": len(rads), "radix": rads + [0] * (MAX_STAGES - len(rads)),
              "bluestein": int(bluestein)}
    return params, flat


def _fft_flops(n: int) -> int:
    return int(5 * n * max(1.0, math.log2(max(n, 2))))


def _emit_dft(lo: Lowering, node: Node, x: str, window: str, y: str, *, outer: int, inner: int,
              axis_len: int, frames: int, frame_step: int, n_in: int, n: int, n_out: int,
              in_complex: bool, inverse: bool, hermitian: bool = False) -> None:
    plan_params, plan = fft_plan(n)
    plan_name = lo.add_const(f"{node.name}_fft_plan", plan if plan.size else np.zeros(2, np.float64))
    params = {"outer": outer, "inner": inner, "axis_len": axis_len, "frames": frames,
              "frame_step": frame_step, "n_in": n_in, "n": n, "n_out": n_out,
              "in_complex": int(in_complex), "inverse": int(inverse), "windowed": int(bool(window)),
              "hermitian": int(hermitian), **plan_params}
    # 4 fft_n doubles per thread that may share the transforms (MLCC_DFT_SLICES, fft.h)
    slices = DFT_SLICES if lo.options.get("threads", True) else 1
    lo.call("mlcc_f32_dft", [x, window, plan_name, y], [y], params_type="mlcc_dft_params",
            params=params, scratch_bytes=slices * 32 * plan_params["fft_n"], pool=True)


def _length(g: Graph, node: Node, index: int, what: str) -> int | None:
    arr = const_input(g, node, index, what)
    if arr is None:
        return None
    if arr.size != 1:
        raise ModelError(f"{node.op_type} {node.name!r}: {what} must be a scalar")
    return int(np.asarray(arr).reshape(-1)[0])


# --- DFT -----------------------------------------------------------------------------------

class _DFT(OpDef):
    def _axis(self, node: Node, g: Graph) -> int:
        raise NotImplementedError

    def _geometry(self, node: Node, g: Graph, shape: tuple[int, ...]) -> dict:
        rank = len(shape)
        if rank < 2 or shape[-1] not in (1, 2):
            raise ModelError(f"DFT {node.name!r}: the input's last dimension must be 1 (real) "
                             f"or 2 (complex), got shape {list(shape)}")
        axis = norm_axis(self._axis(node, g), rank)
        if axis == rank - 1:
            raise ModelError(f"DFT {node.name!r}: axis {axis} is the (real, imaginary) "
                             f"dimension")
        onesided = bool(int(node.attr("onesided", 0)))
        irfft = onesided and bool(int(node.attr("inverse", 0)))    # one-sided in, real out
        n = _length(g, node, 1, "dft_length")
        if n is None:
            n = 2 * (shape[axis] - 1) if irfft else shape[axis]
        if n < 1:
            raise ModelError(f"DFT {node.name!r}: dft_length {n} must be positive")
        return {"axis": axis, "n": n, "n_out": n // 2 + 1 if onesided and not irfft else n,
                "irfft": irfft, "outer": math.prod(shape[:axis]),
                "inner": math.prod(shape[axis + 1:-1]), "axis_len": shape[axis],
                "in_complex": shape[-1] == 2}

    def infer(self, node, ins, g):
        require_dtype(node, ins[:1], ["float32"])
        shape = ins[0].shape
        geo = self._geometry(node, g, shape)
        out = list(shape)
        out[geo["axis"]], out[-1] = geo["n_out"], 1 if geo["irfft"] else 2
        return [("float32", tuple(out))]

    def lower(self, node: Node, lo: Lowering) -> None:
        geo = self._geometry(node, lo.graph, lo.value(node.inputs[0]).shape)
        if geo["outer"] * geo["inner"] == 0:
            return
        _emit_dft(lo, node, node.inputs[0], "", node.outputs[0], outer=geo["outer"],
                  inner=geo["inner"], axis_len=geo["axis_len"], frames=1, frame_step=0,
                  n_in=geo["axis_len"] if geo["irfft"] else min(geo["axis_len"], geo["n"]),
                  n=geo["n"], n_out=geo["n_out"], in_complex=geo["in_complex"],
                  inverse=bool(int(node.attr("inverse", 0))), hermitian=geo["irfft"])

    def flops(self, node: Node, g: Graph) -> int:
        geo = self._geometry(node, g, g.values[node.inputs[0]].shape)
        return geo["outer"] * geo["inner"] * _fft_flops(geo["n"])


@register("DFT", since=17, until=19)
class DFT17(_DFT):
    attributes = {"axis": None, "inverse": _flag, "onesided": _flag}

    def _axis(self, node, g):
        return int(node.attr("axis", 1))


@register("DFT", since=20)
class DFT20(_DFT):
    attributes = {"inverse": _flag, "onesided": _flag}

    def _axis(self, node, g):
        axis = _length(g, node, 2, "axis")
        return -2 if axis is None else axis


# --- STFT ----------------------------------------------------------------------------------

@register("STFT", since=17)
class STFT(OpDef):
    attributes = {"onesided": _flag}

    def _geometry(self, node: Node, g: Graph) -> dict:
        shape = g.values[node.inputs[0]].shape
        if len(shape) != 3 or shape[-1] not in (1, 2):
            raise ModelError(f"STFT {node.name!r}: the signal must be [batch, length, 1 or 2], "
                             f"got shape {list(shape)}")
        step = _length(g, node, 1, "frame_step")
        frame_length = _length(g, node, 3, "frame_length")
        window = node.input(2)
        if window:
            wshape = g.values[window].shape
            if len(wshape) != 1:
                raise ModelError(f"STFT {node.name!r}: the window must be 1-D, got shape "
                                 f"{list(wshape)}")
            if frame_length is not None and frame_length != wshape[0]:
                raise ModelError(f"STFT {node.name!r}: frame_length {frame_length} differs "
                                 f"from the window's length {wshape[0]}")
            frame_length = wshape[0]
        if frame_length is None:
            frame_length = shape[1]
        if step is None or step < 1:
            raise ModelError(f"STFT {node.name!r}: frame_step must be a positive constant")
        if not 1 <= frame_length <= shape[1]:
            raise ModelError(f"STFT {node.name!r}: frame_length {frame_length} must be in "
                             f"1..{shape[1]} (the signal's length)")
        onesided = bool(int(node.attr("onesided", 1)))
        return {"batch": shape[0], "length": shape[1], "step": step, "n": frame_length,
                "frames": 1 + (shape[1] - frame_length) // step,
                "n_out": frame_length // 2 + 1 if onesided else frame_length,
                "in_complex": shape[-1] == 2}

    def infer(self, node, ins, g):
        require_dtype(node, [ins[0]] + ([ins[2]] if len(ins) > 2 and ins[2] else []),
                      ["float32"])
        geo = self._geometry(node, g)
        return [("float32", (geo["batch"], geo["frames"], geo["n_out"], 2))]

    def lower(self, node: Node, lo: Lowering) -> None:
        geo = self._geometry(node, lo.graph)
        if geo["batch"] == 0:
            return
        _emit_dft(lo, node, node.inputs[0], node.input(2), node.outputs[0], outer=geo["batch"],
                  inner=1, axis_len=geo["length"], frames=geo["frames"],
                  frame_step=geo["step"], n_in=geo["n"], n=geo["n"], n_out=geo["n_out"],
                  in_complex=geo["in_complex"], inverse=False)

    def flops(self, node: Node, g: Graph) -> int:
        geo = self._geometry(node, g)
        return geo["batch"] * geo["frames"] * (_fft_flops(geo["n"]) + 2 * geo["n"])
