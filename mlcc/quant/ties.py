"""Rounding ties at data-dependent quantizers, for `mlcc verify` (docs/quantization.md,
"Rounding ties in mlcc verify").

A quantizer whose input is computed at run time (DynamicQuantizeLinear; QuantizeLinear of a
value that is not an initializer) rounds x / scale to an integer code. Two engines whose
float32 kernels round a few ulps apart compute nearly the same x; where x / scale falls
within those ulps of a half step k + 0.5, they round to neighbouring codes, and the rest of
the model amplifies that one step. No output tolerance tells such a tie from a real error;
the codes do. `explain` taps every quantizer in both engines (mlcc: a build with the tapped
values as outputs, given by the caller; onnxruntime: the same tensors added as graph outputs,
graph optimizations off), finds the first quantizer (in the model's topological node order)
whose codes differ, checks that each differing code is a tie (`check_tie`), and runs
onnxruntime again with mlcc's outputs of that quantizer fed in place of its own (the node
cut out, its outputs made graph inputs), until the outputs agree or `MAX_TIES` ties were
forced. The outputs agreeing after that shows that the rest of the model is right; a code
that is not a tie, or a mismatch left when every quantizer agrees, is a failure named there.

A tie, in each engine's own float32 arithmetic (q = x / scale, as both quantize):
- the engine's code is the correct rounding of its own q (half to even, plus the zero point,
  saturated to the type's range): its quantizer is right, given its input;
- the two codes are the neighbours of one half step h = k + 0.5 (their unsaturated roundings
  differ by one), and |q - h| <= eps in both engines, with eps one float32 ulp of the
  tensor's largest magnitude on the grid, in grid steps (np.spacing(peak) / scale), and at
  least one ulp of h (the division rounds q that far): the two inputs then lie closer to the
  boundary than the float32 spacing of the tensor's own values, so float32 kernels that each
  round well can land on either side.
A DynamicQuantizeLinear whose zero points differ is checked the same way on its zero point's
real value (0 - min(x, 0) / scale).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .ort_saturation import reference_model

MAX_TIES = 8            # forced ties after which `explain` gives up, listing them
_INTEGER_CODES = ("uint8", "int8", "uint16", "int16", "int32", "uint32")
_INTEGER_CASTS = (2, 3, 4, 5, 6, 12)   # TensorProto UINT8, INT8, UINT16, INT16, INT32, UINT32


@dataclass(frozen=True)
class Quantizer:
    node: str                 # node name (or its first output's name when unnamed)
    op_type: str
    x: str
    y: str
    scale: str                # an output (DynamicQuantizeLinear) or an input (QuantizeLinear)
    zero_point: str           # "" when absent (QuantizeLinear: zero point 0, uint8 codes)
    axis: int = 1
    dynamic: bool = False     # DynamicQuantizeLinear: scale and zero point are its outputs
    rounding: str = "half_even"   # or "floor", "ceil": a Floor or Ceil then Cast to integers

    @property
    def label(self) -> str:
        if not self.scale:
            return f"{self.op_type} -> Cast {self.node!r}"
        inside = ", its quantization of A," if self.op_type == "DynamicQuantizeMatMul" else ""
        return f"{self.op_type} {self.node!r}{inside}"

    def outputs(self) -> list[str]:
        return [self.y, self.scale, self.zero_point] if self.dynamic else [self.y]


_SPLIT = "A of DynamicQuantizeMatMul"      # doc_string of the quantizers split_internal writes


def split_internal(model):
    """A copy of an onnx.ModelProto with each DynamicQuantizeMatMul (com.microsoft) as the
    two operators it is made of, DynamicQuantizeLinear(A) -> MatMulIntegerToFloat, so that its
    quantization of A can be tapped; None when the model has none. (onnxruntime computes both
    forms with the same functions; the caller checks that its outputs are the same.)"""
    import onnx
    from onnx import helper

    if not any(n.op_type == "DynamicQuantizeMatMul" for n in model.graph.node):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for i, n in enumerate(model.graph.node):
        if n.op_type != "DynamicQuantizeMatMul" or n.domain != "com.microsoft":
            nodes.append(n)
            continue
        name = n.name or n.output[0]
        a, b, b_scale, b_zp, bias = (list(n.input) + [""] * 5)[:5]
        q = [f"{name}/A_quantized_{i}", f"{name}/A_scale_{i}", f"{name}/A_zero_point_{i}"]
        dql = helper.make_node("DynamicQuantizeLinear", [a], q, name=name, doc_string=_SPLIT)
        mm = helper.make_node("MatMulIntegerToFloat", [q[0], b, q[1], b_scale, q[2], b_zp, bias],
                              list(n.output), name=f"{name}/MatMulIntegerToFloat",
                              domain="com.microsoft")
        while mm.input and not mm.input[-1]:
            mm.input.pop()
        nodes += [dql, mm]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def tappable(model, feeds: dict) -> tuple[object, str]:
    """The model to tap (split_internal's when onnxruntime's outputs on `feeds` are the same
    bits with it, else `model`), and a note on what was split or why not ("" if nothing)."""
    split = split_internal(model)
    if split is None:
        return model, ""
    outs = [o.name for o in model.graph.output]
    a = onnxruntime_run(model, feeds, outs)
    b = onnxruntime_run(split, feeds, outs)
    count = sum(n.op_type == "DynamicQuantizeMatMul" for n in model.graph.node)
    if all(np.array_equal(a[o], b[o]) for o in outs):
        return split, (f"{count} DynamicQuantizeMatMul tapped as DynamicQuantizeLinear -> "
                       f"MatMulIntegerToFloat (the same bits in onnxruntime)")
    return model, (f"{count} DynamicQuantizeMatMul not tapped: split in two, onnxruntime's "
                   f"outputs change")


def quantizers(model) -> list[Quantizer]:
    """The data-dependent quantizers of an onnx.ModelProto's main graph, in node order:
    DynamicQuantizeLinear, and QuantizeLinear with integer codes (no block size) of a value
    that is not an initializer. (DynamicQuantizeMatMul and DynamicQuantizeLSTM quantize inside
    the kernel: not tapped, unless split_internal wrote the first as its two parts.)"""
    inits = set(constants(model))
    found, rounded = [], {}
    for n in model.graph.node:
        attrs = {a.name: a for a in n.attribute}
        name = n.name or n.output[0]
        if n.op_type == "DynamicQuantizeLinear" and n.domain in ("", "ai.onnx") and \
                len(n.output) == 3 and all(n.output):
            op = "DynamicQuantizeMatMul" if n.doc_string == _SPLIT else n.op_type
            found.append(Quantizer(name, op, n.input[0], n.output[0], n.output[1],
                                   n.output[2], dynamic=True))
        elif n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx") and \
                n.input[0] not in inits and "block_size" not in attrs and \
                "output_dtype" not in attrs:
            found.append(Quantizer(name, n.op_type, n.input[0], n.output[0], n.input[1],
                                   n.input[2] if len(n.input) > 2 else "",
                                   axis=attrs["axis"].i if "axis" in attrs else 1))
        elif n.op_type == "Cast" and n.domain in ("", "ai.onnx") and \
                attrs.get("to") is not None and attrs["to"].i in _INTEGER_CASTS and \
                n.input[0] in rounded and rounded[n.input[0]].input[0] not in inits:
            # a float rounded to integers by hand (quantize_dynamic's old bias quantization:
            # Cast(Floor(bias / (x_scale * w_scale)))): ties at integers, or at half steps
            r = rounded[n.input[0]]
            found.append(Quantizer(name, r.op_type, r.input[0], n.output[0], "", "",
                                   rounding={"Floor": "floor", "Ceil": "ceil",
                                             "Round": "half_even"}[r.op_type]))
        if n.op_type in ("Floor", "Ceil", "Round") and n.domain in ("", "ai.onnx"):
            rounded[n.output[0]] = n
    return found


def constants(model) -> dict[str, np.ndarray]:
    """The main graph's initializers and Constant nodes' values (tensor-valued), by name."""
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            found[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return found


def tap_names(model, qs: list[Quantizer] | None = None) -> list[str]:
    """The values to tap: each quantizer's input, codes, scale and zero point, except the
    model's inputs and constants (known without tapping)."""
    known = set(constants(model)) | {i.name for i in model.graph.input}
    names: list[str] = []
    for q in quantizers(model) if qs is None else qs:
        for v in (q.x, q.y, q.scale, q.zero_point):
            if v and v not in names and v not in known:
                names.append(v)
    return names


@dataclass
class Tie:
    quantizer: Quantizer
    codes: int                # how many codes differ at this quantizer
    mlcc_code: int            # the first one (lowest flat index) in each engine
    ref_code: int
    mlcc_q: float             # x / scale there
    ref_q: float
    what: str = "code"        # "code", or "zero point"

    def text(self) -> str:
        more = f", {self.codes} codes" if self.codes > 1 else ""
        return (f"{self.quantizer.label} ({self.what} {self.mlcc_code} vs {self.ref_code}, "
                f"{'x/scale' if self.quantizer.scale else 'x'} {self.mlcc_q:.8g} vs "
                f"{self.ref_q:.8g}{more}; mlcc vs onnxruntime)")


@dataclass
class Explanation:
    ok: bool
    ties: list[Tie] = field(default_factory=list)
    reference: dict[str, np.ndarray] = field(default_factory=dict)   # last onnxruntime run
    failure: str = ""


def _param(values: dict, model_consts: dict, name: str) -> np.ndarray | None:
    if not name:
        return None
    if name in values:
        return np.asarray(values[name])
    return model_consts.get(name)


def _broadcast(p: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    p = np.asarray(p)
    if p.size == 1 or x.ndim == 0:
        return p.reshape(())
    shape = [1] * x.ndim
    shape[axis % x.ndim] = p.size
    return p.reshape(shape)


_ROUND = {"half_even": np.rint, "floor": np.floor, "ceil": np.ceil}


def _rounding(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, dtype,
              mode: str = "half_even") -> tuple:
    """(q = x / scale in float32, unsaturated rounding of q (rint, floor or ceil) + zp,
    saturated codes)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (x.astype(np.float32) / scale.astype(np.float32)).astype(np.float32)
    info = np.iinfo(dtype)
    r = _ROUND[mode](q).astype(np.float64) + zp.astype(np.float64)
    return q, r, np.clip(r, info.min, info.max)


def _eps(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, dtype) -> np.ndarray:
    """One float32 ulp of the tensor's largest magnitude on the grid, in grid steps."""
    info = np.iinfo(dtype)
    reach = np.maximum(np.abs(info.min - zp.astype(np.float64)),
                       np.abs(info.max - zp.astype(np.float64))) * scale.astype(np.float64)
    finite = np.abs(x[np.isfinite(x)]).astype(np.float64)
    peak = min(float(finite.max()) if finite.size else 0.0, float(np.max(reach)))
    return np.spacing(np.float32(peak)).astype(np.float64) / scale.astype(np.float64)


def _near_half(q: np.ndarray, eps, mode: str = "half_even") -> tuple[np.ndarray, np.ndarray]:
    """(the boundary h nearest to q where its rounding changes: a half step k + 0.5, or an
    integer for floor and ceil; whether q is within eps of it, or within one float32 ulp of
    h: the division x / scale rounds q itself that far)."""
    h = np.floor(q.astype(np.float64)) + 0.5 if mode == "half_even" else \
        np.rint(q.astype(np.float64))
    band = np.maximum(eps, np.spacing(np.abs(h).astype(np.float32)).astype(np.float64))
    return h, np.abs(q.astype(np.float64) - h) <= band


def check_tie(qz: Quantizer, mine: dict, ref: dict, consts: dict | None = None
              ) -> tuple[Tie | None, str]:
    """Whether the codes of `qz` that differ between mlcc's tapped values (`mine`) and
    onnxruntime's (`ref`) are all rounding ties (module docstring): (the tie, "") or (None,
    why not). `consts`: the model's initializers by name (QuantizeLinear's scale and zero
    point)."""
    consts = consts or {}
    sides = []
    for vals in (mine, ref):
        x = np.asarray(vals[qz.x], np.float32)
        y = np.asarray(vals[qz.y])
        s = _param(vals, consts, qz.scale) if qz.scale else np.ones((), np.float32)
        z = _param(vals, consts, qz.zero_point)
        if s is None:
            return None, f"{qz.label}: its scale {qz.scale!r} was not tapped"
        if y.dtype.name not in _INTEGER_CODES:
            return None, f"{qz.label}: {y.dtype.name} codes are not checked for ties"
        z = np.zeros((), y.dtype) if z is None else np.asarray(z)
        s, z = _broadcast(s, x, qz.axis), _broadcast(z, x, qz.axis)
        sides.append((x, y, s, z))
    (xm, ym, sm, zm), (xr, yr, sr, zr) = sides
    if xm.shape != xr.shape or ym.shape != yr.shape:
        return None, f"{qz.label}: shapes differ ({ym.shape} vs {yr.shape})"
    rounded = []
    for who, (x, y, s, z) in zip(("mlcc", "onnxruntime"), sides):
        q, r, c = _rounding(x, s, z, y.dtype, qz.rounding)
        wrong = np.flatnonzero((c != y.astype(np.float64)) & np.isfinite(q))
        if wrong.size:
            i = wrong[0]
            return None, (f"{qz.label}: {who}'s code {y.reshape(-1)[i]} at element {i} is "
                          f"not the rounding of its own x/scale {q.reshape(-1)[i]:.8g} "
                          f"({wrong.size} such codes): a wrong quantizer, not a tie")
        rounded.append((q, r, _eps(x, s, z, y.dtype)))
    (qm, rm, em), (qr, rr, er) = rounded

    zero_tie = None
    if qz.dynamic and int(zm) != int(zr):
        reals = [np.float32(0) - np.float32(min(0.0, float(x.min()))) / s.astype(np.float32)
                 for x, _, s, _ in sides]
        (hm, okm), (hr, okr) = _near_half(np.asarray(reals[0]), em), \
            _near_half(np.asarray(reals[1]), er)
        if not (okm and okr and hm == hr and abs(int(zm) - int(zr)) == 1):
            return None, (f"{qz.label}: zero point {int(zm)} vs {int(zr)} (its real value "
                          f"{float(reals[0]):.8g} vs {float(reals[1]):.8g}): not a tie")
        zero_tie = Tie(qz, 1, int(zm), int(zr), float(reals[0]), float(reals[1]),
                       "zero point")
    # elements whose rounding of x / scale differs (a zero point tie shifts the rest)
    differ = np.flatnonzero(((rm - zm.astype(np.float64)) != (rr - zr.astype(np.float64)))
                            & (ym != yr))
    if differ.size == 0:
        return zero_tie, "" if zero_tie else f"{qz.label}: no code differs"
    flat = [a.reshape(-1)[differ] for a in (qm, rm - zm, qr, rr - zr)]
    em_f = np.broadcast_to(em, qm.shape).reshape(-1)[differ]
    er_f = np.broadcast_to(er, qr.shape).reshape(-1)[differ]
    hm, okm = _near_half(flat[0], em_f, qz.rounding)
    hr, okr = _near_half(flat[2], er_f, qz.rounding)
    good = okm & okr & (hm == hr) & (np.abs(flat[1] - flat[3]) == 1)
    if not good.all():
        j = int(np.flatnonzero(~good)[0])
        i = int(differ[j])
        return None, (f"{qz.label}: code {ym.reshape(-1)[i]} vs {yr.reshape(-1)[i]} at "
                      f"element {i}, x/scale {flat[0][j]:.8g} vs {flat[2][j]:.8g} (mlcc vs "
                      f"onnxruntime): not a rounding tie (farther than one float32 ulp of "
                      f"the tensor's peak, {max(em_f[j], er_f[j]):.3g} steps, from where its "
                      f"rounding changes, or more than one step apart)")
    i = int(differ[0])
    tie = Tie(qz, int(differ.size), int(ym.reshape(-1)[i]), int(yr.reshape(-1)[i]),
              float(flat[0][0]), float(flat[2][0]))
    return tie, ""


def _differs(qz: Quantizer, mine: dict, ref: dict) -> bool:
    names = [qz.y] + ([qz.zero_point] if qz.dynamic else [])
    return any(not np.array_equal(np.asarray(mine[n]), np.asarray(ref[n])) for n in names)


def onnxruntime_run(model, feeds: dict, names: list[str], forced: dict | None = None
                    ) -> dict[str, np.ndarray]:
    """onnxruntime on an onnx.ModelProto with graph optimizations off: `names` as outputs;
    the nodes producing `forced`'s values cut out, those values fed as inputs."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    forced = forced or {}
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    g = proto.graph
    if forced:
        keep = [n for n in g.node if not any(o in forced for o in n.output)]
        del g.node[:]
        g.node.extend(keep)
        for name, arr in forced.items():
            arr = np.asarray(arr)
            g.input.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
    have = {o.name for o in g.output}
    for n in names:
        if n not in have:
            g.output.append(onnx.ValueInfoProto(name=n))
            have.add(n)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(reference_model(proto).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(names, {**feeds, **forced})))


def explain(model, feeds: dict, mine: dict, outputs: list[str],
            close: Callable[[dict], bool], max_ties: int = MAX_TIES) -> Explanation:
    """Forces mlcc's codes into onnxruntime at one rounding tie after another (module
    docstring) until close(onnxruntime's outputs) holds. `mine`: mlcc's outputs and tapped
    values (tap_names(model)); `feeds`: onnxruntime's inputs."""
    qs = quantizers(model)
    consts = constants(model)
    names = list(dict.fromkeys(outputs + tap_names(model, qs)))
    mine = {**feeds, **mine}
    forced: dict[str, np.ndarray] = {}
    ties: list[Tie] = []
    while True:
        ref = onnxruntime_run(model, feeds, [n for n in names if n not in forced], forced)
        ref.update(forced)
        ref.update({k: v for k, v in feeds.items() if k not in ref})
        if close({o: ref[o] for o in outputs}):
            return Explanation(True, ties, ref)
        first = next((q for q in qs if q.y not in forced and _differs(q, mine, ref)), None)
        if first is None:
            after = f" after forcing {len(ties)} tie(s)" if ties else ""
            return Explanation(False, ties, ref,
                               f"the outputs differ{after} though the codes of all "
                               f"{len(qs)} data-dependent quantizers agree: the difference "
                               f"is in the float computation (--per-layer names where)")
        tie, why = check_tie(first, mine, ref, consts)
        if tie is None:
            return Explanation(False, ties, ref, why)
        if len(ties) == max_ties:
            return Explanation(False, ties, ref,
                               f"more than {max_ties} rounding ties (the next: {tie.text()})")
        ties.append(tie)
        forced.update({o: np.asarray(mine[o]) for o in first.outputs()})
