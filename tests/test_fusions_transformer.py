"""Transformer fusions: LayerNorm written out (fuse_layernorm), GELU from its Erf pattern
(fuse_gelu, then fuse_activations into the MatMul), constant biases into MatMul
(fuse_matmul_bias) and scaled dot-product attention into one kernel (fuse_attention). Each case
checks the graph after the pipeline and the numbers against onnxruntime on small graphs with odd
sizes, at vector widths 128 (x86) and 512 (x86-native), and that near misses are left alone."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import mlcc
from mlcc.errors import UnsupportedError
from mlcc.frontend import import_model
from mlcc.passes import run_pipeline
from util import check_model, make_model, rand



def _graph(model, tmp_path):
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    return run_pipeline(import_model(path))


def _ops(g):
    return [n.op_type for n in g.nodes]


def _n(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs if isinstance(outs, list) else [outs],
                            name=(outs if isinstance(outs, str) else outs[0]) + "_node", **attrs)


def f32(v):
    return np.array(v, np.float32)


def _merged(parts):
    """One model holding several (model, feeds) cases side by side, each case's names
    prefixed with c0_, c1_, ...: one compile checks them all."""
    out, feeds = None, {}
    for k, (model, case_feeds) in enumerate(parts):
        model = onnx.ModelProto.FromString(model.SerializeToString())
        g, p = model.graph, f"c{k}_"
        for node in g.node:
            node.name = p + node.name
            node.input[:] = [p + i if i else i for i in node.input]
            node.output[:] = [p + o if o else o for o in node.output]
        for t in g.initializer:
            t.name = p + t.name
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            vi.name = p + vi.name
        feeds.update({p + name: v for name, v in case_feeds.items()})
        if out is None:
            out = model
        else:
            for field in ("node", "initializer", "input", "output"):
                getattr(out.graph, field).extend(getattr(g, field))
    return out, feeds


# --------------------------------------------------------------------------------- GELU

def _gelu(x, y, form):
    """GELU written out in one of the three orders exporters use."""
    inner = [_n("Div", [x, "sqrt2"], f"{y}_d"), _n("Erf", [f"{y}_d"], f"{y}_e"),
             _n("Add", ["one", f"{y}_e"], f"{y}_a")]
    if form == "torch":        # (x * (1 + erf)) * 0.5
        return inner + [_n("Mul", [x, f"{y}_a"], f"{y}_m"), _n("Mul", [f"{y}_m", "half"], y)]
    if form == "half_first":   # (x * 0.5) * (1 + erf)
        return inner + [_n("Mul", ["half", x], f"{y}_h"), _n("Mul", [f"{y}_h", f"{y}_a"], y)]
    return inner + [_n("Mul", [f"{y}_a", "half"], f"{y}_m"), _n("Mul", [x, f"{y}_m"], y)]


GELU_CONSTS = {"sqrt2": f32(np.sqrt(2.0)), "one": f32(1.0), "half": f32(0.5)}


def test_gelu_and_bias_fuse_into_matmul(tmp_path):
    # [2, 7, 13] x [13, 37]: 37 columns, not a multiple of any vector width; the three forms
    parts = []
    for k, form in enumerate(["torch", "half_first", "half_inner"]):
        x = rand(2, 7, 13, seed=k) * 2
        nodes = [_n("MatMul", ["x", "w"], "mm"), _n("Add", ["b", "mm"], "h")] + _gelu(
            "h", "y", form)
        parts.append((make_model(nodes, {"x": x}, ["y"], initializers={
            "w": rand(13, 37, seed=k + 1), "b": rand(37, seed=k + 2), **GELU_CONSTS}), {"x": x}))
    model, feeds = _merged(parts)
    g = _graph(model, tmp_path)
    assert _ops(g) == ["MatMul"] * 3
    assert all(n.attrs["_act"] == ("GELU", 0.0, 0.0) and len(n.inputs) == 3 for n in g.nodes)
    check_model(model, feeds, tmp_path, target="x86-native")


def test_standalone_gelu_and_extremes(tmp_path):
    # erf's clamp at |x / sqrt 2| = 4, large values, zeros; 101 values (vector tails)
    x = np.concatenate([np.linspace(-12, 12, 96), [0.0, -0.0, 5.657, -5.657, 1e-30]]
                       ).astype(np.float32).reshape(1, 101)
    model = make_model(_gelu("x", "y", "torch"), {"x": x}, ["y"], initializers=GELU_CONSTS)
    g = _graph(model, tmp_path)
    assert _ops(g) == ["Gelu"]
    check_model(model, {"x": x}, tmp_path, target="x86-native")


def test_gelu_with_an_intermediate_read_elsewhere_stays(tmp_path):
    x = rand(3, 11)
    nodes = _gelu("x", "y", "torch")
    model = make_model(nodes, {"x": x}, ["y", "y_e"], initializers=GELU_CONSTS)
    g = _graph(model, tmp_path)
    assert "Gelu" not in _ops(g) and "Erf" in _ops(g)
    check_model(model, {"x": x}, tmp_path)


# --------------------------------------------------------------------------------- MatMul bias

def test_bias_folds_into_matmul(tmp_path):
    # biases of shape [1, 1, 11] and [1] (a scalar for every column), activation behind them;
    # a batched MatMul with both operands at run time ([3, 5, 7] x [1, 7, 11]) and a bias
    x, a, b = rand(3, 5, 7), rand(3, 5, 7, seed=5), rand(1, 7, 11, seed=6)
    nodes = [_n("MatMul", ["x", "w"], "mm"), _n("Add", ["mm", "b"], "y"), _n("Relu", ["y"], "r"),
             _n("MatMul", ["r", "w2"], "mm2"), _n("Add", ["b2", "mm2"], "z"),
             _n("MatMul", ["a", "bb"], "mm3"), _n("Add", ["b3", "mm3"], "u")]
    feeds = {"x": x, "a": a, "bb": b}
    model = make_model(nodes, feeds, ["z", "u"], initializers={
        "w": rand(7, 11, seed=1), "b": rand(1, 1, 11, seed=2), "w2": rand(11, 4, seed=3),
        "b2": rand(1, seed=4), "b3": rand(11, seed=7)})
    g = _graph(model, tmp_path)
    assert _ops(g) == ["MatMul"] * 3 and g.nodes[0].attrs["_act"][0] == "RELU"
    check_model(model, feeds, tmp_path)


def test_bias_that_varies_by_row_or_enlarges_stays(tmp_path):
    x = rand(3, 5, 7)
    nodes = [_n("MatMul", ["x", "w"], "mm"), _n("Add", ["mm", "b"], "y"),
             _n("MatMul", ["x", "w"], "mm2"), _n("Add", ["mm2", "b2"], "z")]
    model = make_model(nodes, {"x": x}, ["y", "z"], initializers={
        "w": rand(7, 11, seed=1), "b": rand(5, 11, seed=2), "b2": rand(2, 3, 5, 11, seed=3)})
    g = _graph(model, tmp_path)
    assert _ops(g) == ["MatMul", "Add", "MatMul", "Add"]
    check_model(model, {"x": x}, tmp_path)


def test_clip_bounds_of_shape_one_fuse(tmp_path):
    # onnxruntime accepts Clip bounds of shape [1] as well as scalars (np.ascontiguousarray
    # makes them so); they used to stop the compiler with a TypeError
    x = rand(3, 5, 7)
    nodes = [_n("MatMul", ["x", "w"], "mm"), _n("Clip", ["mm", "lo", "hi"], "y")]
    model = make_model(nodes, {"x": x}, ["y"], initializers={
        "w": rand(7, 11, seed=1), "lo": f32([-0.5]), "hi": f32([0.75])})
    g = _graph(model, tmp_path)
    assert _ops(g) == ["MatMul"] and g.nodes[0].attrs["_act"] == ("CLIP", -0.5, 0.75)
    check_model(model, {"x": x}, tmp_path)


# --------------------------------------------------------------------------------- attention

def _attention_model(*, sq=19, sk=19, heads=3, d=5, scale_op="Div", mask="input",
                     rank=4, seed=0, mask_first=False):
    """A BERT-style attention block over x [1, sq, heads*d] (and y [1, sk, heads*d] when
    sk != sq): projections, head split, scores, scale, mask, softmax, context, head merge."""
    hd = heads * d
    x = rand(1, sq, hd, seed=seed)
    feeds = {"x": x}
    kv_src = "x"
    if sk != sq:
        feeds["y"] = rand(1, sk, hd, seed=seed + 1)
        kv_src = "y"
    inits = {f"w{p}": rand(hd, hd, seed=seed + 10 + i) * 0.5 for i, p in enumerate("qkv")}
    inits.update({f"b{p}": rand(hd, seed=seed + 20 + i) for i, p in enumerate("qkv")})
    nodes = []
    for p, src in (("q", "x"), ("k", kv_src), ("v", kv_src)):
        s = sq if p == "q" else sk
        nodes += [_n("MatMul", [src, f"w{p}"], f"{p}_mm"), _n("Add", [f"{p}_mm", f"b{p}"],
                                                              f"{p}_lin")]
        if rank == 4:
            inits[f"{p}_shape"] = np.array([1, s, heads, d], np.int64)
            nodes += [_n("Reshape", [f"{p}_lin", f"{p}_shape"], f"{p}_r"),
                      _n("Transpose", [f"{p}_r"], p, perm=[0, 2, 3, 1] if p == "k"
                         else [0, 2, 1, 3])]
        else:      # rank 3: one head, K transposed by its own Transpose
            nodes.append(_n("Transpose", [f"{p}_lin"], p, perm=[0, 2, 1]) if p == "k"
                         else _n("Identity", [f"{p}_lin"], p))
    nodes.append(_n("MatMul", ["q", "k"], "scores"))
    cur = "scores"
    if scale_op == "Div":
        inits["c"] = f32(np.sqrt(d))
        nodes.append(_n("Div", [cur, "c"], "scaled"))
        cur = "scaled"
    elif scale_op == "Mul":
        inits["c"] = f32(1 / np.sqrt(d))
        nodes.append(_n("Mul", ["c", cur], "scaled"))
        cur = "scaled"
    if mask == "input":       # padding mask from an int64 attention_mask, as BERT computes it
        m = np.ones((1, sk), np.int64)
        m[0, sk - 4:] = 0
        feeds["attention_mask"] = m
        inits.update({"axes": np.array([1, 2] if rank == 4 else [1], np.int64),
                      "one": f32(1.0), "fmin": f32(np.finfo(np.float32).min)})
        nodes += [_n("Unsqueeze", ["attention_mask", "axes"], "m_u"),
                  _n("Cast", ["m_u"], "m_f", to=TensorProto.FLOAT),
                  _n("Sub", ["one", "m_f"], "m_s"), _n("Mul", ["m_s", "fmin"], "mask"),
                  _n("Add", ["mask", cur] if mask_first else [cur, "mask"], "masked")]
        cur = "masked"
    elif mask == "causal":    # a constant [sq, sk] mask (folded at compile time)
        inits["mask"] = np.triu(np.full((sq, sk), -1e4, np.float32), 1)
        nodes.append(_n("Add", ["mask", cur], "masked"))
        cur = "masked"
    nodes += [_n("Softmax", [cur], "probs", axis=-1), _n("MatMul", ["probs", "v"], "ctx")]
    if rank == 4:
        inits["merged"] = np.array([1, sq, hd], np.int64)
        nodes += [_n("Transpose", ["ctx"], "ctx_t", perm=[0, 2, 1, 3]),
                  _n("Reshape", ["ctx_t", "merged"], "out")]
    else:
        nodes.append(_n("Identity", ["ctx"], "out"))
    return make_model(nodes, feeds, ["out"], initializers=inits), feeds


ATTENTION_CASES = [
    dict(), dict(scale_op="Mul", mask="causal", d=17), dict(scale_op=None, mask=None, heads=2),
    dict(sq=11, sk=23, d=16, heads=1), dict(rank=3, d=13, sq=7, sk=7), dict(sq=1, sk=37, d=3),
    dict(scale_op="Mul", mask_first=True)]


@pytest.mark.parametrize("target", ["x86", "x86-native"])
def test_attention_is_one_kernel(tmp_path, target):
    # BERT's block; Mul scale, constant causal mask, d = 17 (vector tails); no scale, no mask;
    # cross attention (sq != sk); rank 3 (one head); a single query row; the mask (itself a
    # Mul's output) as the Add's first operand
    model, feeds = _merged([_attention_model(seed=k, **case)
                            for k, case in enumerate(ATTENTION_CASES)])
    g = _graph(model, tmp_path)
    assert _ops(g).count("Attention") == len(ATTENTION_CASES)
    assert "Softmax" not in _ops(g) and "Transpose" not in _ops(g)
    assert _ops(g).count("MatMul") == 3 * len(ATTENTION_CASES)   # projections, biases fused
    check_model(model, feeds, tmp_path, target=target)


def test_attention_with_scores_read_elsewhere_stays(tmp_path):
    model, feeds = _attention_model()
    model.graph.output.append(helper.make_tensor_value_info("probs", TensorProto.FLOAT,
                                                            [1, 3, 19, 19]))
    g = _graph(model, tmp_path)
    assert "Attention" not in _ops(g) and "Softmax" in _ops(g)
    check_model(model, feeds, tmp_path)


# --------------------------------------------------------------------------------- LayerNorm

def _layernorm(x, y, axes, *, square="Pow", gamma=True, beta=True, opset=17):
    ax = {"axes": axes} if opset < 18 else {}
    ax_in = [] if opset < 18 else ["axes"]
    nodes = [_n("ReduceMean", [x] + ax_in, "mean", **ax), _n("Sub", [x, "mean"], "d"),
             _n("Pow", ["d", "two"], "sq") if square == "Pow" else _n("Mul", ["d", "d"], "sq"),
             _n("ReduceMean", ["sq"] + ax_in, "var", **ax), _n("Add", ["var", "eps"], "ve"),
             _n("Sqrt", ["ve"], "std"), _n("Div", ["d", "std"], "n0" if gamma or beta else y)]
    cur = "n0"
    if gamma:
        nodes.append(_n("Mul", ["gamma", cur], "n1" if beta else y))
        cur = "n1"
    if beta:
        nodes.append(_n("Add", [cur, "beta"], y))
    return nodes


LAYERNORM_CASES = {   # opset -> (axes, square, gamma, beta) cases; target
    17: ([([-1], "Pow", True, True), ([2], "Mul", True, False), ([-1], "Pow", False, True)],
         "x86-native"),
    18: ([([-2, -1], "Pow", True, True), ([-1], "Mul", False, False)], "x86")}


@pytest.mark.parametrize("opset", [17, 18])
def test_layernorm_is_one_node(tmp_path, opset):
    cases, target = LAYERNORM_CASES[opset]
    parts = []
    for k, (axes, square, gamma, beta) in enumerate(cases):
        x = rand(2, 5, 37, seed=k) * 3 + 1
        norm_shape = (37,) if len(axes) == 1 else (5, 37)
        inits = {"two": f32(2.0), "eps": f32(1e-5), "gamma": rand(*norm_shape, seed=k + 1),
                 "beta": rand(*norm_shape, seed=k + 2)}
        if opset >= 18:
            inits["axes"] = np.array(axes, np.int64)
        parts.append((make_model(_layernorm("x", "y", axes, square=square, gamma=gamma,
                                            beta=beta, opset=opset), {"x": x}, ["y"],
                                 initializers=inits, opset=opset), {"x": x}))
    model, feeds = _merged(parts)
    g = _graph(model, tmp_path)
    assert _ops(g) == ["LayerNormalization"] * len(cases)
    check_model(model, feeds, tmp_path, target=target)


def test_layernorm_over_a_middle_axis_or_with_a_shared_intermediate_stays(tmp_path):
    x = rand(2, 5, 37)
    inits = {"two": f32(2.0), "eps": f32(1e-5), "gamma": rand(37, seed=1),
             "beta": rand(37, seed=2)}
    middle = make_model(_layernorm("x", "y", [1]), {"x": x}, ["y"], initializers={
        **inits, "gamma": rand(5, 1, seed=1), "beta": rand(5, 1, seed=2)})
    shared = make_model(_layernorm("x", "y", [-1]), {"x": x}, ["y", "d"], initializers=inits)
    model, feeds = _merged([(middle, {"x": x}), (shared, {"x": x})])
    assert "LayerNormalization" not in _ops(_graph(model, tmp_path))
    check_model(model, feeds, tmp_path)


def test_a_model_may_not_use_the_internal_attention_node(tmp_path):
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], domain="mlcc", name="att")
    vi = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2, 3, 4]) for x in "qkvy"]
    model = helper.make_model(helper.make_graph([node], "t", vi[:3], vi[3:]), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("mlcc", 1)])
    path = tmp_path / "att.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedError, match="fuse_attention"):
        mlcc.compile(path, tmp_path / "out")


def test_attention_kernel_against_numpy_with_and_without_vectors(tmp_path):
    """mlcc_f32_attention alone, against float64 numpy, at edge sizes (sk below, at and above
    the 16-column padding, d = 1 vector, a tail, one row, ROWS + 1 rows), built with vectors
    (x86-native width) and as the scalar fallback other compilers get (mlcc_kernel.h with its
    vector branch disabled)."""
    import subprocess
    from mlcc import resources
    kernels = resources.runtime_c()
    scalar = tmp_path / "scalar"
    scalar.mkdir()
    header = (kernels / "kernels" / "mlcc_kernel.h").read_text()
    assert "#if defined(__GNUC__) || defined(__clang__)" in header
    (scalar / "mlcc_kernel.h").write_text(
        header.replace("#if defined(__GNUC__) || defined(__clang__)", "#if 0", 1))

    import cffi
    from util import kernel_cdef
    ffi = cffi.FFI()
    ffi.cdef(kernel_cdef("attention.h"))      # the struct as the header declares it

    # the host's vectors (x86-native's: 64 bytes with AVX-512, 32 with AVX2)
    from util import native_vector_flags
    builds = {"vector": native_vector_flags(), "scalar": [f"-I{scalar}"]}
    for name, flags in builds.items():
        lib_path = tmp_path / f"att_{name}.so"
        subprocess.run(["cc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                        *flags, f"-I{kernels / 'kernels'}", f"-I{kernels / 'include'}",
                        str(kernels / "kernels" / "attention.c"),
                        str(kernels / "src" / "mlcc_threadpool.c"),
                        str(kernels / "src" / "mlcc_runtime.c"), "-o", str(lib_path), "-lm"],
                       check=True)
        lib = ffi.dlopen(str(lib_path))
        for b, h, sq, sk, d, masked in [(1, 2, 7, 19, 5, True), (2, 3, 5, 16, 17, False),
                                        (1, 1, 1, 37, 16, True), (1, 2, 9, 1, 3, True)]:
            rng = np.random.default_rng(sq * 7 + d)
            q, k, v = (rng.standard_normal((b, h, n, d)).astype(np.float32) for n in (sq, sk, sk))
            k = np.ascontiguousarray(k.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # strided K
            mask = (rng.standard_normal((b, 1, 1, sk)) * 3).astype(np.float32)
            out = np.zeros((b, h, sq, d), np.float32)
            scratch = np.zeros((d + 4) * ((sk + 15) // 16 * 16), np.float32)

            def strides(a):
                return [s // 4 for s in a.strides]

            def ptr(a):
                return ffi.cast("float *", a.ctypes.data)
            p = ffi.new("mlcc_attention_params *", dict(
                batch=b, heads=h, sq=sq, sk=sk, d=d, dv=d, group=1, q_strides=strides(q),
                k_strides=strides(k), v_strides=strides(v), mask_strides=[sk, 0, 0, 1],
                out_strides=strides(out), scale=0.37, softcap=0.0))
            lib.mlcc_f32_attention(p, ptr(q), ptr(k), ptr(v), ptr(mask) if masked else ffi.NULL,
                                   ptr(out), ptr(scratch), ffi.NULL)
            s = np.einsum("bhic,bhjc->bhij", q.astype(np.float64), k) * np.float64(
                np.float32(0.37)) + (mask if masked else 0)
            s = np.exp(s - s.max(-1, keepdims=True))
            ref = np.einsum("bhij,bhjc->bhic", s / s.sum(-1, keepdims=True), v)
            assert np.abs(out - ref).max() < 2e-6, (name, b, h, sq, sk, d)
