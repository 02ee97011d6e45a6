"""LSTM, GRU and RNN (ONNX): one OpDef per operator over one kernel, mlcc_f32_recurrent
(runtime_c/kernels/recurrent.h; docs/recurrent.md).

The weights W, R and B (and LSTM's peepholes P) must be constants: they are rearranged at
compile time into the kernel's layouts: W of both directions transposed into one matrix in the
column panels of mlcc_f32_gemm__panels_threaded (one product for the input projections of every
step and direction), R transposed and packed per direction for the per-step product, Wb + Rb
summed into one bias (GRU keeps Rbh apart: it is added inside the reset). Weights computed at run
time are refused. X, sequence_lens, initial_h and initial_c may be run-time inputs.

Under --quantize int8 the quantizer's "recurrent" rule (mlcc/quant/recurrent.py) moves the input
projections onto the integer GEMM (an mlcc.QFC writing float32, bias included) and marks the
node `_projected`: its X is then those projections [seq, batch, D*G*H] (layout 1: [batch, seq,
D*G*H]), its W input is "", and the kernel skips its first product (w_panels NULL).
"""
from __future__ import annotations

import numpy as np

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Lowering, Node, format_type
from .common import require_dtype
from .gemm import pack_b_panels

# MLCC_RECURRENT_PANEL (recurrent.c): the recurrent weights' panels are 32 columns on every
# target, whatever the GEMM's (Target.gemm_b_panel)
RECURRENT_PANEL = 32
from .registry import OpDef, register

CELLS = {"LSTM": 0, "GRU": 1, "RNN": 2}          # enum mlcc_rnn_cell
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
N_ACTS = {"LSTM": 3, "GRU": 2, "RNN": 1}          # f, g, h
DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                "RNN": ["Tanh"]}
MAX_ACTS = 3                                      # MLCC_RNN_MAX_ACTS

# enum mlcc_rnn_act_kind: ONNX name -> (value, takes alpha, takes beta, default alpha, beta).
# A default of None: the spec gives none, so the attribute must supply it.
ACTS = {
    "Relu": (0, False, False, 0.0, 0.0),
    "Tanh": (1, False, False, 0.0, 0.0),
    "Sigmoid": (2, False, False, 0.0, 0.0),
    "Affine": (3, True, True, None, None),
    "LeakyRelu": (4, True, False, 0.01, 0.0),
    "ThresholdedRelu": (5, True, False, 1.0, 0.0),
    "ScaledTanh": (6, True, True, None, None),
    "HardSigmoid": (7, True, True, 0.2, 0.5),
    "Elu": (8, True, False, 1.0, 0.0),
    "Softsign": (9, False, False, 0.0, 0.0),
    "Softplus": (10, False, False, 0.0, 0.0),
}
ACTS_LOWER = {k.lower(): k for k in ACTS}

DIRECTIONS = ("forward", "reverse", "bidirectional")


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _r16(n: int) -> int:
    return -(-n // 16) * 16


def scratch_floats(op: str, seq: int, batch: int, hidden: int, nd: int,
                   projected: bool = False) -> int:
    """The kernel's scratch (recurrent.c): the input projections (unless given), then per
    direction (the two of a bidirectional layer may run at once) one step's gates, the state h
    and c and GRU's two temporaries, each rounded up to 16 floats."""
    gh = GATES[op] * hidden
    return (0 if projected else _r16(seq * batch * nd * gh)) + \
        nd * (_r16(batch * gh) + 4 * _r16(batch * hidden))


def input_projection(op: str, node: Node, g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(W of all directions as one [D*G*H, input] matrix, the bias added to its products
    [D*G*H]: Wb + Rb, but for GRU's h gate Wbh alone, its Rbh being added inside the
    reset)."""
    w = g.const(node.inputs[1]).astype(np.float32)            # [nd, gh, inp]
    nd, gh, inp = w.shape
    b = g.const(node.input(3))
    b = (np.zeros((nd, 2 * gh), np.float32) if b is None else b.astype(np.float32))
    bias = b[:, :gh] + b[:, gh:]
    if op == "GRU":
        hidden = gh // 3
        bias[:, 2 * hidden:] = b[:, 2 * hidden:gh]
    return w.reshape(nd * gh, inp), np.ascontiguousarray(bias.reshape(-1))


def activations(node: Node, op: str, nd: int) -> list[tuple[int, float, float]]:
    """(kind, alpha, beta) per direction and function, alpha and beta consumed in the order
    of the functions by those that take them (as onnxruntime reads them)."""
    names = node.attr("activations")
    names = [_str(a) for a in names] if names else DEFAULT_ACTS[op] * nd
    if len(names) != N_ACTS[op] * nd:
        raise UnsupportedError(f"{len(names)} activations for "
                               f"{nd} direction(s), expected {N_ACTS[op] * nd}")
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    out = []
    for name in names:
        key = ACTS_LOWER.get(name.lower())
        if key is None:
            raise UnsupportedError(f"activation {name!r} is not "
                                   f"supported")
        kind, takes_a, takes_b, da, db = ACTS[key]
        a = float(alphas.pop(0)) if takes_a and alphas else da
        b = float(betas.pop(0)) if takes_b and betas else db
        if a is None or b is None:
            raise UnsupportedError(f"activation {key} needs "
                                   f"activation_alpha and activation_beta values")
        out.append((kind, a, b))
    return out


def recurrent_params(op: str, node: Node, seq: int, batch: int, inp: int, hidden: int,
                     nd: int, layout: int) -> dict:
    """The kernel's mlcc_recurrent_params (recurrent.h) of a node."""
    kinds = [0] * (2 * MAX_ACTS)
    alphas = [0.0] * (2 * MAX_ACTS)
    betas = [0.0] * (2 * MAX_ACTS)
    for i, (k, a, bt) in enumerate(activations(node, op, nd)):
        d, f = divmod(i, N_ACTS[op])
        kinds[d * MAX_ACTS + f], alphas[d * MAX_ACTS + f], betas[d * MAX_ACTS + f] = k, a, bt
    clip = node.attr("clip")
    return {"cell": CELLS[op], "seq": seq, "batch": batch, "input": inp,
            "hidden": hidden, "num_directions": nd,
            "reverse": int(_str(node.attr("direction", "forward")) == "reverse"),
            "layout": layout, "input_forget": int(node.attr("input_forget", 0)),
            "linear_before_reset": int(node.attr("linear_before_reset", 0)),
            "has_clip": int(clip is not None),
            "clip": float(clip) if clip is not None else 0.0,
            "act_kind": kinds, "act_alpha": alphas, "act_beta": betas}


def num_directions(node: Node) -> int:
    return 2 if _str(node.attr("direction", "forward")) == "bidirectional" else 1


class _Recurrent(OpDef):
    op = ""
    attributes = {
        "activations": None, "activation_alpha": None, "activation_beta": None,
        "clip": None, "direction": lambda v: _str(v) in DIRECTIONS, "hidden_size": None,
        "layout": lambda v: int(v) in (0, 1), "_projected": None,
    }
    quant_rules = ("recurrent",)

    def _dims(self, node: Node, g: Graph):
        """(seq, batch, input, hidden, directions, layout); input is 0 for a _projected node
        (its X holds the input projections)."""
        x = g.value(node.inputs[0])
        layout = int(node.attr("layout", 0))
        if layout:
            batch, seq, inp = x.shape
        else:
            seq, batch, inp = x.shape
        nd = num_directions(node)
        r = g.value(node.inputs[2])
        hidden = int(r.shape[2])
        return seq, batch, 0 if node.attr("_projected") else inp, hidden, nd, layout

    def infer(self, node, ins, g):
        op = self.op
        require_dtype(node, [v for i, v in enumerate(ins) if v is not None and i != 4],
                      ["float32"])
        if len(ins) > 4 and ins[4] is not None and ins[4].dtype != "int32":
            raise ModelError(f"sequence_lens must be int32")
        x = ins[0]
        if x.shape is None or len(x.shape) != 3:
            raise ModelError(f"X must be 3-D, not {format_type(x)}")
        for i, what in ((1, "W"), (2, "R"), (3, "B"), (7, "P")):
            if i < len(ins) and ins[i] is not None and not ins[i].is_const:
                raise UnsupportedError(f"{what} "
                                       f"{node.inputs[i]!r} must be a constant (weights "
                                       f"computed at run time are not supported)")
        if ins[2] is None or len(ins[2].shape) != 3:
            raise ModelError(f"R must be 3-D")
        seq, batch, inp, hidden, nd, layout = self._dims(node, g)
        hs = node.attr("hidden_size")
        gates = GATES[op]
        if not node.attr("_projected") and (len(ins) < 2 or ins[1] is None):
            raise ModelError(f"W is missing")
        if node.attr("_projected") and tuple(x.shape[2:]) != (nd * gates * hidden,):
            raise ModelError(f"its input projections have shape "
                             f"{list(x.shape)}, expected the last axis {nd * gates * hidden}")
        shapes = {1: (nd, gates * hidden, inp), 2: (nd, gates * hidden, hidden),
                  3: (nd, 2 * gates * hidden), 4: (batch,),
                  5: (batch, nd, hidden) if layout else (nd, batch, hidden),
                  6: (batch, nd, hidden) if layout else (nd, batch, hidden),
                  7: (nd, 3 * hidden)}
        if hs is not None and int(hs) != hidden:
            raise ModelError(f"hidden_size {hs} but R holds "
                             f"{hidden} per gate")
        for i, v in enumerate(ins[1:], 1):
            if v is not None and tuple(v.shape) != shapes[i]:
                raise ModelError(f"input {i} has shape "
                                 f"{list(v.shape)}, expected {list(shapes[i])}")
        activations(node, op, nd)   # refuses what the kernel cannot compute
        y = (batch, seq, nd, hidden) if layout else (seq, nd, batch, hidden)
        yh = (batch, nd, hidden) if layout else (nd, batch, hidden)
        return [("float32", y), ("float32", yh), ("float32", yh)][:len(node.outputs)]

    def lower(self, node: Node, lo: Lowering) -> None:
        op, g = self.op, lo.graph
        seq, batch, inp, hidden, nd, layout = self._dims(node, g)
        gates = GATES[op]
        gh = gates * hidden
        projected = bool(node.attr("_projected"))
        r = g.const(node.inputs[2]).astype(np.float32)            # [nd, gh, hidden]
        rbh = ""
        if op == "GRU":   # Rbh is added inside the reset, not to the input projection
            b = g.const(node.input(3))
            rb = (np.zeros((nd, hidden), np.float32) if b is None else
                  b.astype(np.float32)[:, gh + 2 * hidden:])
            rbh = lo.add_const(f"{node.name}.rbh", np.ascontiguousarray(rb))
        if not projected:
            w, b_in = input_projection(op, node, g)
        width = RECURRENT_PANEL
        r_parts = []
        for d in range(nd):
            rt = r[d].T                                            # [hidden, gh]
            if op == "GRU":
                r_parts += [pack_b_panels(rt[:, :2 * hidden], width),
                            pack_b_panels(rt[:, 2 * hidden:], width)]
            else:
                r_parts.append(pack_b_panels(rt, width))
        outs = [node.outputs[i] if i < len(node.outputs) else "" for i in range(3)]
        # (constants added in the order of the arguments)
        args = [node.inputs[0],
                "" if projected else lo.add_const(f"{node.name}.w_panels",
                                                  pack_b_panels(w.T, width)),
                lo.add_const(f"{node.name}.r_panels", np.concatenate(r_parts)),
                "" if projected else lo.add_const(f"{node.name}.bias", b_in.reshape(nd, gh)),
                rbh,
                node.input(7) if op == "LSTM" else "",
                node.input(4), node.input(5), node.input(6) if op == "LSTM" else "",
                outs[0], outs[1], outs[2] if op == "LSTM" else ""]
        lo.call("mlcc_f32_recurrent", args, [o for o in args[9:] if o],
                params_type="mlcc_recurrent_params",
                params=recurrent_params(op, node, seq, batch, inp, hidden, nd, layout),
                scratch_bytes=4 * scratch_floats(op, seq, batch, hidden, nd, projected),
                returns_status=True, pool=True)

    def flops(self, node: Node, g: Graph) -> int:
        seq, batch, inp, hidden, nd, _ = self._dims(node, g)
        gh = GATES[self.op] * hidden
        return nd * seq * batch * (2 * gh * (inp + hidden) + 8 * gh)


@register("LSTM", since=7)
class LSTM(_Recurrent):
    op = "LSTM"
    attributes = {**_Recurrent.attributes, "input_forget": lambda v: int(v) in (0, 1)}


@register("GRU", since=7)
class GRU(_Recurrent):
    op = "GRU"
    attributes = {**_Recurrent.attributes, "linear_before_reset": lambda v: int(v) in (0, 1)}


@register("RNN", since=7)
class RNN(_Recurrent):
    op = "RNN"
