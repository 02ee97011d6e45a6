"""ONNX ModelProto -> ir.Graph: parse, check, inline functions, resolve opsets, bind shapes.

The result has every initializer as a constant value and every graph input with a fully static
shape (from the model or from --shape). Output types are left to shape inference.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
from onnx import helper, numpy_helper

from ..errors import ModelError, UnsupportedError
from ..ir import Graph, Node, Value
from ..dimexpr import eval_dim, names_of
from ..ir.symbolic import DimVar, SymInt, same_shape, smax, smin
from .binding import bind_inputs

MIN_OPSET = 7
MAX_FILE_BYTES = 4 << 30          # protobuf itself cannot hold more than 2 GB plus external data


def load_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    """Reads and validates an ONNX file, with external data kept inside the model's folder."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    size = path.stat().st_size
    if size == 0:
        raise ModelError(f"{path}: the file is empty")
    if size > MAX_FILE_BYTES:
        raise ModelError(f"{path}: {size} bytes is larger than an ONNX protobuf can be")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types for the same problem
        raise ModelError(f"{path}: not a valid ONNX file (truncated or corrupted?)",
                         detail=str(exc)) from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelError(f"{path}: the file holds no ONNX graph")
    if not model.graph.output:
        raise ModelError(f"{path}: the graph has no outputs: nothing to compute")
    _check_names(model, path)
    _load_external_data(model, path.parent)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{path}: the ONNX checker rejects the model: {first}",
                         detail=str(exc)) from None
    model = _upgrade_old_opset(model)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as exc:
            raise ModelError(f"{path}: cannot inline the model's local functions: {exc}") from None
    _check_types(model, path)
    return model


def _check_names(model: onnx.ModelProto, path: Path) -> None:
    """Every name must be text: protobuf hands strings that are not valid UTF-8 over as bytes
    (or fails decoding them), which would surface later as crashes in the C writer."""
    def text(v) -> bool:
        return isinstance(v, str)

    def bad(what: str):
        raise ModelError(f"{path}: {what} is not valid UTF-8 (a damaged file?)")

    try:
        g = model.graph
        if not text(g.name):
            bad("the graph's name")
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if not text(vi.name):
                bad(f"a graph value name ({vi.name!r})")
        for t in g.initializer:
            if not text(t.name):
                bad(f"an initializer name ({t.name!r})")
        for n in g.node:
            if not all(text(s) for s in [n.name, n.op_type, n.domain, *n.input, *n.output]):
                bad(f"a name in node {n.name!r}")
            if not all(text(a.name) for a in n.attribute):
                bad(f"an attribute name of node {n.name!r}")
        for o in model.opset_import:
            if not text(o.domain):
                bad("an opset domain")
    except UnicodeDecodeError:
        bad("a name")


SMALL_INITIALIZER = 1024   # elements: shape-like constants ONNX inference reads the values of


def _check_types(model: onnx.ModelProto, path: Path) -> None:
    """Runs ONNX type inference with type checking, so that a model whose tensors break the
    operators' type constraints (a float 'shape' for Reshape, mixed types in Concat) is a
    clear error here rather than a surprise in an operator's shape rule. Not strict mode:
    that also fails on shape-inference gaps of valid models (the MeanVarianceNormalization
    node test). Large initializers
    are passed as typed graph inputs: inference needs their types and shapes, not their bytes
    (copying them made this take 30 s on VGG-19)."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    names = {i.name for i in model.graph.input}
    g.input.extend(model.graph.input)
    for t in model.graph.initializer:
        count = 1
        for d in t.dims:        # (reading the bytes, even their length, copies them)
            count *= max(int(d), 0)
        if count <= SMALL_INITIALIZER:
            g.initializer.append(t)
        elif t.name not in names:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    try:
        onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=False)
    except Exception as exc:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise ModelError(f"{path}: ONNX type inference rejects the model: {first}",
                         detail=text) from None


def _upgrade_old_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """Models older than MIN_OPSET go through onnx's version converter; when it cannot
    convert them, they stay as they are and to_graph refuses them."""
    try:
        opset = default_opset(model)
    except UnsupportedError:
        return model
    if opset >= MIN_OPSET:
        return model
    try:
        import onnx.version_converter
        converted = onnx.version_converter.convert_version(model, MIN_OPSET)
        onnx.checker.check_model(converted)
        return converted
    except Exception:
        return model


def _external_tensors(model: onnx.ModelProto):
    for t in model.graph.initializer:
        yield t
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def _load_external_data(model: onnx.ModelProto, base: Path) -> None:
    root = base.resolve()
    for t in _external_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        target = (root / location).resolve()
        if not location or os.path.isabs(location) or root not in target.parents:
            raise ModelError(f"tensor {t.name!r}: external data path {location!r} leaves the "
                             f"model's folder; refusing to read it")
        if not target.is_file():
            raise ModelError(f"tensor {t.name!r}: external data file {location!r} is missing")
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        except ValueError:
            raise ModelError(f"tensor {t.name!r}: malformed external data offset/length") from None
        fsize = target.stat().st_size
        if offset < 0 or offset > fsize or (length >= 0 and offset + length > fsize):
            raise ModelError(f"tensor {t.name!r}: external data range {offset}+{length} is "
                             f"outside {location!r} ({fsize} bytes)")
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(root))
    except Exception as exc:
        raise ModelError(f"cannot read the model's external data: {exc}") from None


def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    if any(o.domain == "ai.onnx.ml" for o in model.opset_import):
        # classical-ML nodes only (docs/classical-ml.md): no default-domain node to version
        return onnx.defs.onnx_opset_version()
    domains = ", ".join(sorted(o.domain for o in model.opset_import)) or "none"
    raise UnsupportedError(f"the model uses only operator sets mlcc does not support "
                           f"({domains}); mlcc compiles the default ONNX domain and "
                           f"ai.onnx.ml")


def _attr_value(a: onnx.AttributeProto, subgraph):
    """An attribute as Python: tensors as numpy arrays, subgraphs (If's branches, Loop's body)
    as IR graphs through `subgraph`."""
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, onnx.GraphProto):
        return subgraph(v)
    if isinstance(v, list):
        if v and isinstance(v[0], bytes):
            return [x.decode("utf-8", "replace") for x in v]
        if v and isinstance(v[0], onnx.GraphProto):
            return [subgraph(x) for x in v]
        if v and isinstance(v[0], onnx.TensorProto):
            return v  # kept opaque: ops that take them refuse them by attribute check
        return list(v)
    return v


def _np_dtype(elem_type: int, what: str) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        raise UnsupportedError(f"{what}: element type {elem_type} is not supported") from None


def to_graph(model: onnx.ModelProto, source_sha256: str = "") -> Graph:
    """Converts a checked ModelProto into the IR (no shapes bound yet). Subgraph attributes
    (If's branches, Loop's body) become IR graphs too (_subgraph)."""
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise UnsupportedError(f"opset {opset} is older than the oldest mlcc reads "
                               f"({MIN_OPSET}); upgrade it with onnx.version_converter")
    domains = {o.domain: int(o.version) for o in model.opset_import}
    g = model.graph
    values = _initializers(g)
    inputs = []
    for vi in g.input:
        if vi.name in values:
            continue  # old exporters list initializers as inputs too; they stay constants
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None:
            kind = vi.type.WhichOneof("value") or "untyped"
            kind = {"sequence_type": "a sequence", "optional_type": "an optional",
                    "map_type": "a map", "sparse_tensor_type": "a sparse tensor"}.get(kind, kind)
            # the category and its words as mlcc/ops/refusals.py refusal() writes them (the
            # frontend imports no ops; tests/test_refusals.py checks that they agree)
            raise UnsupportedError(
                f"input {vi.name!r} is {kind}: mlcc compiles dense tensors only (a sequence's "
                f"length, an optional's presence and a map's keys are known only at run time, "
                f"which a static arena planned at compile time cannot hold): refused: "
                f"sequences and optionals (docs/conformance.md#refusal-categories)")
        values[vi.name] = Value(vi.name, _np_dtype(tt.elem_type, f"input {vi.name!r}"),
                                _declared_shape(tt))
        inputs.append(vi.name)
    nodes = _nodes(g, values, domains, opset)
    outputs = [o.name for o in g.output]
    return Graph(g.name or "model", nodes, values, inputs, outputs, opset, source_sha256)


def _initializers(g: onnx.GraphProto) -> dict[str, Value]:
    values: dict[str, Value] = {}
    for t in g.initializer:
        try:
            arr = numpy_helper.to_array(t)
        except Exception as exc:
            raise ModelError(f"initializer {t.name!r} cannot be read: {exc}") from None
        values[t.name] = Value(t.name, arr.dtype.name, tuple(int(d) for d in arr.shape), arr)
    return values


def _declared_shape(tt) -> tuple | None:
    if not tt.HasField("shape"):
        return None
    # Some exporters (paddle2onnx) write -1 for a dynamic dimension.
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else
                 (d.dim_param or None) for d in tt.shape.dim)


def _nodes(g: onnx.GraphProto, values: dict[str, Value], domains: dict[str, int],
           opset: int) -> list[Node]:
    """The graph's nodes (unnamed ones named OpType_index, names made unique); their outputs
    are added to `values`."""
    nodes, used_names = [], set()

    def subgraph(proto: onnx.GraphProto) -> Graph:
        return _subgraph(proto, domains, opset)

    for index, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{index}"
        while name in used_names:
            name = f"{name}_{index}"
        used_names.add(name)
        domain = "" if n.domain == "ai.onnx" else n.domain
        try:
            version = onnx.defs.get_schema(n.op_type, domains.get(domain, opset),
                                           domain).since_version
        except Exception:
            version = domains.get(domain, 0)
        attrs = {a.name: _attr_value(a, subgraph) for a in n.attribute}
        nodes.append(Node(name, n.op_type, list(n.input), list(n.output), attrs, domain, version))
        for o in n.output:
            if o:
                values.setdefault(o, Value(o))
    return nodes


def _subgraph(g: onnx.GraphProto, domains: dict[str, int], opset: int) -> Graph:
    """A subgraph attribute as an IR graph: its values are only those it defines (its
    initializers, formal inputs and node outputs); any other name it reads comes from an
    enclosing graph (ONNX's outer scope). Its formal inputs keep the types they declare,
    possibly none."""
    values = _initializers(g)
    inputs = []
    for vi in g.input:
        if vi.name in values:
            continue
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        dtype = _np_dtype(tt.elem_type, f"subgraph input {vi.name!r}") \
            if tt is not None and tt.elem_type else None
        values[vi.name] = Value(vi.name, dtype, _declared_shape(tt) if tt is not None else None)
        inputs.append(vi.name)
    nodes = _nodes(g, values, domains, opset)
    return Graph(g.name or "subgraph", nodes, values, inputs, [o.name for o in g.output], opset)


def bind_shapes(g: Graph, shapes: dict[str, tuple] | None) -> Graph:
    """Replaces every dynamic input dimension by the value given with --shape: a number, or a
    range (lo, hi) that becomes a symbolic size (ir.symbolic). Dimensions that carry the same
    dim_param are one variable: bound on one input, the others follow."""
    shapes = dict(shapes or {})
    unknown = sorted(set(shapes) - set(g.inputs))
    if unknown:
        raise ModelError(f"--shape names {', '.join(map(repr, unknown))}, which "
                         f"{'is not an input' if len(unknown) == 1 else 'are not inputs'}; "
                         f"the model's inputs are: {', '.join(g.inputs) or '(none)'}")
    g = g.copy()
    by_param: dict[str, tuple[object, str]] = {}   # dim_param -> (its binding, where from)
    dynamic: list[DimVar] = []

    def bind_dim(name: str, axis: int, have, want):
        if isinstance(want, tuple):
            lo, hi, step = (*want, 1)[:3]
            if lo < 1 or lo > hi:
                raise ModelError(f"--shape {name}: dimension {axis} range {dim_text(want)} "
                                 f"must have 1 <= LO <= HI")
            if step < 1 or lo % step or hi % step:
                raise ModelError(f"--shape {name}: dimension {axis} range {dim_text(want)} "
                                 f"must have LO and HI multiples of STEP >= 1")
            if isinstance(have, int):
                raise ModelError(f"--shape {name}: dimension {axis} is fixed to {have} in the "
                                 f"model, not a range {dim_text(want)}")
            want = lo if lo == hi else (lo, hi, step) if step > 1 else (lo, hi)
        elif want < 0:
            raise ModelError(f"--shape {name}: dimensions must not be negative")
        elif isinstance(have, int) and have != want:
            raise ModelError(f"--shape {name}: dimension {axis} is fixed to {have} in the "
                             f"model, not {want}")
        where = f"{name}[{axis}]"
        if isinstance(have, str) and have == "?":   # exporters' "unknown", not a symbol
            have = None
        if isinstance(have, str) and have:
            if have in by_param and by_param[have][0] != want:
                prev, src = by_param[have]
                raise ModelError(f"--shape {name}: dimension {axis} ({have!r}) is bound to "
                                 f"{dim_text(want)}, but to {dim_text(prev)} by {src}")
            by_param.setdefault(have, (want, where))
        if not isinstance(want, tuple):
            return int(want)
        label = have if isinstance(have, str) and have else f"{name}:{axis}"
        for v in dynamic:
            if v.name == label:
                return SymInt.var(v)
        var = DimVar(label, want[0], want[1], len(dynamic), *want[2:])
        dynamic.append(var)
        return SymInt.var(var)

    # Each input dimension is bound once what it reads is bound: a number or range given
    # with --shape; an expression given with --shape ("P+1") or written as the model's
    # dim_param ("past_sequence_length + 1"), once the names it reads are; a dim_param that
    # another input binds.
    sym_of: dict[str, object] = {}        # dim_param -> its size (int or SymInt)
    pending: dict[tuple[str, int], tuple] = {}     # (input, axis) -> (model's dim, given)
    for name in g.inputs:
        given = shapes.get(name)
        v = g.values[name]
        if given is not None and v.shape is not None and len(v.shape) != len(given):
            raise ModelError(f"--shape {name}={','.join(map(dim_text, given))} has rank "
                             f"{len(given)}, but input {name!r} has rank {len(v.shape)} "
                             f"({_dims(v.shape)})")
        if given is None and v.shape is None:
            raise ModelError(f"input {name!r} has no shape in the model: give one with "
                             f"--shape {name}=D1,D2,...")
        have = v.shape if v.shape is not None else (None,) * len(given)
        for axis, h in enumerate(have):
            pending[name, axis] = (None if h == "?" else h, None if given is None
                                   else given[axis])

    def expression(d):
        """The names dim `d` reads if it is an expression rather than one name, else None."""
        names = names_of(d) if isinstance(d, str) and not d.isidentifier() else None
        return names if names else None

    def evaluate(name: str, axis: int, text: str):
        try:
            return eval_dim(text, sym_of, (smin, smax))
        except ValueError:
            raise ModelError(f"--shape {name}: dimension {axis} {text!r} must be an expression "
                             f"of the model's dimension names (e.g. P+1)") from None

    def resolve(name: str, axis: int, have, want, last: bool):
        """The size of the dimension, or None if it waits for names not bound yet."""
        if isinstance(want, str):                        # --shape x=1,P+1
            missing = sorted((names_of(want) or set()) - set(sym_of))
            if missing and not last:
                return None
            if missing:
                raise ModelError(f"--shape {name}: dimension {axis} {want!r} reads "
                                 f"{', '.join(missing)}, which no input binds")
            size = evaluate(name, axis, want)
            if isinstance(have, int) and size != have:
                raise ModelError(f"--shape {name}: dimension {axis} is fixed to {have} in the "
                                 f"model, not {want}")
        elif want is not None:
            reads = expression(have)
            if reads and not last:
                # a range given for a dimension the model writes as an expression: the
                # expression, once its names are bound, if the range is its range
                if not reads <= set(sym_of):
                    return None
                size = eval_dim(have, sym_of, (smin, smax))
                lo, hi = (size, size) if isinstance(size, int) else (size.lo, size.hi)
                span = want if isinstance(want, tuple) else (want, want)
                if (lo, hi) != tuple(span[:2]):
                    raise ModelError(f"--shape {name}: dimension {axis} is {have!r} in the "
                                     f"model, {lo}..{hi} by the other bindings, not "
                                     f"{dim_text(want)}")
                return size
            size = bind_dim(name, axis, have, want)
        elif isinstance(have, int):
            return have
        elif isinstance(have, str) and have in sym_of:
            return sym_of[have]
        elif expression(have) and expression(have) <= set(sym_of):
            return eval_dim(have, sym_of, (smin, smax))
        else:
            if not last:
                return None
            label = f" ({have!r})" if isinstance(have, str) else ""
            shape = g.values[name].shape
            raise ModelError(f"input {name!r}: dimension {axis}{label} is dynamic "
                             f"({_dims(shape)}); bind it with --shape {name}=D1,D2,...")
        if isinstance(have, str) and have.isidentifier():
            if have in sym_of and not same_shape((sym_of[have],), (size,)):
                raise ModelError(f"--shape {name}: dimension {axis} ({have!r}) is "
                                 f"{size}, but {sym_of[have]} by another input")
            sym_of.setdefault(have, size)
        return size

    sizes: dict[tuple[str, int], object] = {}
    last = False
    while pending:
        done = [k for k, (have, want) in pending.items()
                if (size := resolve(*k, have, want, last)) is not None
                and sizes.setdefault(k, size) is not None]
        for k in done:
            del pending[k]
        last = not done           # stuck: bind what is left on its own, or say what is missing
    for name in g.inputs:
        v = g.values[name]
        v.shape = tuple(sizes[name, axis] for axis in range(
            len(v.shape) if v.shape is not None else len(shapes[name])))
    return g


def dim_text(d) -> str:
    """A --shape dimension as written: 3, a range 1..8, or multiples of 32 in 64..960:32."""
    if not isinstance(d, tuple):
        return str(d)
    return f"{d[0]}..{d[1]}" + (f":{d[2]}" if len(d) > 2 and d[2] != 1 else "")


def _dims(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def import_model(path: str | os.PathLike, shapes: dict[str, tuple[int, ...]] | None = None,
                 bind: dict[str, object] | None = None) -> Graph:
    """The frontend in one call: file -> graph with static input shapes, the inputs named in
    `bind` made constants (binding.bind_inputs). A TensorFlow Lite file (.tflite) goes through
    tflite_import instead."""
    from .tflite_import import import_tflite, is_tflite
    if is_tflite(path):
        return specialize(import_tflite(path), shapes, bind)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).is_file() else ""
    return specialize(to_graph(load_onnx(path), digest), shapes, bind)


def specialize(g: Graph, shapes: dict[str, tuple[int, ...]] | None,
               bind: dict[str, object] | None) -> Graph:
    """--bind, then --shape: the bound inputs made constants, every other input's shape
    static."""
    g = bind_inputs(g, bind, shapes)
    return bind_shapes(g, {k: v for k, v in (shapes or {}).items() if k not in (bind or {})})


def parse_shape_option(text: str) -> tuple[str, tuple]:
    """'images=1,3,320,320' -> ('images', (1, 3, 320, 320)); a dimension LO..HI is a range,
    'x=1,3,48,32..1280' -> ('x', (1, 3, 48, (32, 1280))), and LO..HI:STEP the multiples of
    STEP in it, 'x=1,3,64..960:32,64..960:32' -> ('x', (1, 3, (64, 960, 32), (64, 960, 32))); an
    expression of dimension names that other inputs bind is kept as text,
    'mask=1,P+1' -> ('mask', (1, 'P+1'))."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise ModelError(f"--shape {text!r}: expected NAME=D1,D2,... (e.g. images=1,3,224,224)")
    values = []
    for d in dims.split(",") if dims.strip() else ():
        lo, dots, hi = d.partition("..")
        hi, colon, step = hi.partition(":")
        try:
            values.append(((int(lo), int(hi), int(step)) if colon else (int(lo), int(hi)))
                          if dots else int(d))
        except ValueError:
            if dots or not names_of(d):
                raise ModelError(f"--shape {text!r}: dimensions must be integers, ranges "
                                 f"LO..HI (or LO..HI:STEP) or expressions of the model's "
                                 f"dimension names (P+1)") from None
            values.append(d.strip())
    return name, tuple(values)
