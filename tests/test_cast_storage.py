"""Cast to and from the storage-only types (bfloat16, float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz,
float8 e8m0, float4 e2m1, int4, uint4, int2, uint2), bit for bit against onnx.reference
(ml_dtypes and onnx.numpy_helper): every code of every type decoded, every float16 value and a
float32 sweep (each type's values, the halfway points between neighbours and their
neighbours, subnormals, infinities, NaN, overflow) encoded, saturate 0 and 1, every
round_mode; packed types at odd lengths. One model, compiled once."""
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import mlcc
from mlcc.errors import UnsupportedError
from mlcc.ir import PACKED_BITS, pack_elements, unpack_elements

FLOAT8 = {"FLOAT8E4M3FN": "float8_e4m3fn", "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
          "FLOAT8E5M2": "float8_e5m2", "FLOAT8E5M2FNUZ": "float8_e5m2fnuz"}
SMALL = {"BFLOAT16": "bfloat16", **FLOAT8, "FLOAT8E8M0": "float8_e8m0fnu",
         "FLOAT4E2M1": "float4_e2m1fn", "INT4": "int4", "UINT4": "uint4", "INT2": "int2",
         "UINT2": "uint2"}
INTS = ("INT4", "UINT4", "INT2", "UINT2")


def all_codes(dtype: str) -> np.ndarray:
    """Every value of `dtype`, as numpy (ml_dtypes) holds it, at an odd length."""
    bits = PACKED_BITS.get(dtype, np.dtype(dtype).itemsize * 8)
    codes = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    codes = np.concatenate([codes, codes[1:2]])            # odd length: a half-used last byte
    return codes.view(np.dtype(dtype))


def float32_sweep() -> np.ndarray:
    """Each type's finite values, the halfway points between neighbours, one float32 step
    either side of those, subnormals, huge values, infinities, NaN, and random values."""
    vals = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 1e-39,
                      1.17549435e-38, 3.4e38, -3.4e38, 1e30, 65504.0, 65520.0, 1e6], np.float32)]
    for dtype in ("bfloat16", *FLOAT8.values(), "float8_e8m0fnu", "float4_e2m1fn"):
        if dtype == "bfloat16":     # a sample: 2^16 values and their midpoints would be large
            codes = np.random.default_rng(1).integers(0, 1 << 16, 4000).astype(np.uint16)
        else:
            codes = all_codes(dtype).view(np.uint8)
        v = np.unique(codes.view(np.dtype(dtype)).astype(np.float64))
        v = v[np.isfinite(v)]
        mid = (v[1:] + v[:-1]) / 2
        for x in (v, mid):
            x32 = x.astype(np.float32)
            vals += [x32, np.nextafter(x32, np.float32(np.inf)),
                     np.nextafter(x32, np.float32(-np.inf))]
    rng = np.random.default_rng(0)
    vals.append((rng.choice([-1, 1], 3000) * 2.0 ** rng.uniform(-140, 128, 3000))
                .astype(np.float32))
    out = np.concatenate(vals).astype(np.float32)
    return out if out.size % 2 else np.concatenate([out, out[:1]])


def build():
    """The model, its feeds and the kind of comparison per output."""
    x32 = float32_sweep()
    xint = np.concatenate([np.arange(-20, 21), [300.7, -300.7, 8.5, -8.5, 2.5, -2.5, 1e9],
                           ]).astype(np.float32)     # float -> integer: inside int32's range
    x16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    feeds = {"x32": x32, "x16": x16, "xint": xint, "i8": np.arange(-128, 128).astype(np.int8)}
    nodes, outs = [], {}

    def cast(src, to, name, **attrs):
        nodes.append(helper.make_node("Cast", [src], [name], to=getattr(TensorProto, to),
                                      **attrs))
        outs[name] = to

    for to in ("BFLOAT16", "FLOAT4E2M1", *FLOAT8):
        for sat in ((0, 1) if to in FLOAT8 else (1,)):
            cast("x32", to, f"f32_{to}_{sat}", saturate=sat)
            cast("x16", to, f"f16_{to}_{sat}", saturate=sat)
    for mode in ("up", "down", "nearest"):
        for sat in (0, 1):
            cast("x32", "FLOAT8E8M0", f"f32_e8m0_{mode}_{sat}", saturate=sat, round_mode=mode)
            cast("x16", "FLOAT8E8M0", f"f16_e8m0_{mode}_{sat}", saturate=sat, round_mode=mode)
    for to in INTS:
        cast("xint", to, f"fint_{to}")
        cast("i8", to, f"i8_{to}")
    for src, dtype in SMALL.items():
        feeds[f"c_{src}"] = all_codes(dtype)
        for to in ("FLOAT", "FLOAT16", "DOUBLE", "INT8", "INT32"):
            if to.startswith("INT") and src not in INTS:
                continue          # a NaN or an infinity to an integer has no defined result
            cast(f"c_{src}", to, f"c_{src}_{to}")
        if src not in ("BFLOAT16", "FLOAT8E8M0"):
            cast(f"c_{src}", "BFLOAT16", f"c_{src}_BFLOAT16")

    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                            list(v.shape)) for k, v in feeds.items()]
    graph = helper.make_graph(nodes, "cast_storage", inputs, [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    model = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in model.graph.value_info}
    model.graph.output.extend(known[name] for name in outs)
    return model, feeds


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    model, feeds = build()
    folder = tmp_path_factory.mktemp("cast_storage")
    onnx.save(model, str(folder / "model.onnx"))
    mlcc.compile(folder / "model.onnx", folder / "out", target="x86")
    got = mlcc.load(folder / "out").run(feeds)
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))
    return got, want


def test_every_conversion_matches_the_reference_bit_for_bit(results):
    got, want = results
    bad = []
    for name, ref in want.items():
        g = got[name]
        assert g.dtype == ref.dtype and g.shape == ref.shape, name
        if ref.dtype.kind == "V":          # the ml_dtypes types: compare the codes
            bits = np.dtype(f"u{ref.dtype.itemsize}")
            diff = g.view(bits) != ref.view(bits)
        elif ref.dtype.kind == "f":        # NaN codes decode to a NaN, any payload
            diff = ~((g == ref) & (np.signbit(g) == np.signbit(ref))
                     | (np.isnan(g) & np.isnan(ref)))
        else:
            diff = g != ref
        if diff.any():
            bad.append(f"{name}: {int(diff.sum())} of {diff.size} differ")
    assert not bad, "\n".join(bad)


def test_outputs_cover_the_interesting_cases(results):
    """The sweep reaches overflow, NaN and negative zero on the float8 outputs (so the test
    above checks saturate and the FNUZ rules, not only ordinary values)."""
    _, want = results
    e4 = want["f32_FLOAT8E4M3FN_0"].view(np.uint8)
    assert (e4 == 0x7F).any() and (e4 == 0x80).any()                # NaN, -0
    assert (want["f32_FLOAT8E4M3FN_1"].view(np.uint8) == 0x7E).sum() > 3   # clamped to 448
    assert (want["f32_FLOAT8E5M2_0"].view(np.uint8) == 0x7C).any()       # +inf
    assert not (want["f32_FLOAT8E4M3FNUZ_1"].view(np.uint8) == 0x80).all()


def test_pack_elements_matches_onnx():
    from onnx.numpy_helper import _pack_2bitx4, _pack_4bitx2
    for dtype in PACKED_BITS:
        for n in (1, 2, 3, 4, 5, 7, 9):
            a = np.resize(all_codes(dtype), n)
            ref = (_pack_4bitx2 if PACKED_BITS[dtype] == 4 else _pack_2bitx4)(a)
            np.testing.assert_array_equal(pack_elements(a), ref)
            back = unpack_elements(pack_elements(a), dtype, (n,))
            np.testing.assert_array_equal(back.view(np.uint8), a.view(np.uint8))


def test_packed_sizes_in_the_manifest_and_arena(tmp_path):
    """A packed tensor of n elements takes ceil(n * bits / 8) bytes at the C boundary."""
    x = np.arange(7, dtype=np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT2),
             helper.make_node("Cast", ["y"], ["z"], to=TensorProto.INT4)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [7])],
                              [helper.make_tensor_value_info("y", TensorProto.INT2, [7]),
                               helper.make_tensor_value_info("z", TensorProto.INT4, [7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
    header = (tmp_path / "out" / "model.c").read_text()
    pad = ", 0" * 7
    assert f'"y", MLCC_INT2, 1, {{7{pad}}}, 2u}}' in header
    assert f'"z", MLCC_INT4, 1, {{7{pad}}}, 4u}}' in header
    got = mlcc.load(tmp_path / "out").run({"x": x})
    ref = ReferenceEvaluator(model).run(None, {"x": x})
    for g, r in zip((got["y"], got["z"]), ref):
        np.testing.assert_array_equal(g.view(np.uint8), r.view(np.uint8))
    # the file harness of the cross targets, run on the host: same bytes through files
    subprocess.run(["make", "-s", "harness"], cwd=tmp_path / "out", check=True,
                   capture_output=True)
    via_files = mlcc.load(tmp_path / "out", run=[]).run({"x": x})
    for name in ("y", "z"):
        np.testing.assert_array_equal(via_files[name].view(np.uint8), got[name].view(np.uint8))


def test_storage_types_refused_outside_cast(tmp_path):
    """float8 is no run-time type beyond Cast (bfloat16 computes in float32:
    tests/test_float32_compute.py)."""
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match="Transpose.*float8_e4m3fn"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")


def test_storage_inputs_from_an_npz_and_wrong_storage_type(tmp_path):
    """np.savez keeps bfloat16/int4 arrays as raw bytes ("V2", "V1"): run takes them as the
    codes they are; a different storage type of the same size is still refused."""
    from mlcc.errors import InputError
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["b"], ["z"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT4, [5]),
         helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
    x = np.array([-8, -1, 0, 3, 7], np.float32)
    b = np.array([1.5, -2.0, 0.25], np.float32)
    np.savez(tmp_path / "in.npz", x=x.astype(np.dtype("int4")), b=b.astype(np.dtype("bfloat16")))
    with np.load(tmp_path / "in.npz") as data:
        feeds = {k: data[k] for k in data.files}
    assert feeds["b"].dtype == np.dtype("V2")
    m = mlcc.load(tmp_path / "out")
    got = m.run(feeds)
    np.testing.assert_array_equal(got["y"], x)
    np.testing.assert_array_equal(got["z"], b)
    with pytest.raises(InputError, match="'x' must be int4, got uint4"):
        m.run({"x": np.zeros(5, np.dtype("uint4")), "b": feeds["b"]})


def test_storage_types_in_and_out_as_ml_dtypes_through_run_and_the_cli(tmp_path):
    """Cast to every storage-only type comes back from run() and from `mlcc run -o` (.npz, and
    .npy for one output) as the ml_dtypes array onnx gives, not as raw bytes; inputs of
    every such type are taken as ml_dtypes arrays, from Python and from an .npz that
    `mlcc run -o` wrote."""
    from click.testing import CliRunner

    from mlcc.cli import main
    from mlcc.runtime import save_arrays
    x = np.array([0.0, -1.5, 2.25, 3.0, -7.0, 448.0, 1e-3], np.float32)      # odd length
    feeds = {"x": x, **{f"c_{src}": np.resize(all_codes(dtype), 7)
                        for src, dtype in SMALL.items()}}
    nodes = [helper.make_node("Cast", ["x"], [f"to_{to}"], to=getattr(TensorProto, to))
             for to in SMALL]
    nodes += [helper.make_node("Cast", [f"c_{src}"], [f"from_{src}"], to=TensorProto.FLOAT)
              for src in SMALL]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), [7])
         for k, v in feeds.items()],
        [helper.make_tensor_value_info(f"to_{to}", getattr(TensorProto, to), [7])
         for to in SMALL]
        + [helper.make_tensor_value_info(f"from_{s}", TensorProto.FLOAT, [7]) for s in SMALL])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
    want = dict(zip([o.name for o in graph.output],
                    ReferenceEvaluator(model).run(None, feeds)))

    def check(got, how):
        assert sorted(got) == sorted(want), how
        for name, ref in want.items():
            assert got[name].dtype == ref.dtype, (how, name, got[name].dtype, ref.dtype)
            if ref.dtype.kind == "V":      # an ml_dtypes type: compare the codes
                assert got[name].dtype.type.__module__ == "ml_dtypes", (how, name)
                bits = np.dtype(f"u{ref.dtype.itemsize}")
                np.testing.assert_array_equal(got[name].view(bits), ref.view(bits),
                                              err_msg=f"{how} {name}")
            else:
                np.testing.assert_array_equal(got[name], ref, err_msg=f"{how} {name}")

    for to, dtype in SMALL.items():       # each type is the ml_dtypes one, by name
        assert want[f"to_{to}"].dtype == np.dtype(dtype)
    check(mlcc.load(tmp_path / "out").run(feeds), "run()")

    save_arrays(tmp_path / "in.npz", feeds)
    with np.load(tmp_path / "in.npz") as data:
        assert data["c_BFLOAT16"].dtype == np.dtype("bfloat16")      # not "V2"
    res = CliRunner().invoke(main, ["run", str(tmp_path / "out"), "-i", str(tmp_path / "in.npz"),
                                    "-o", str(tmp_path / "got.npz")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    with np.load(tmp_path / "got.npz") as data:
        check({k: data[k] for k in data.files}, "mlcc run -o .npz")

    # one output: -o FILE.npy; a model of several outputs refuses .npy with a message
    one = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E5M2)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E5M2, [7])]),
        opset_imports=[helper.make_opsetid("", 25)])
    onnx.save(one, str(tmp_path / "one.onnx"))
    mlcc.compile(tmp_path / "one.onnx", tmp_path / "one", target="x86")
    save_arrays(tmp_path / "x.npz", {"x": x})
    res = CliRunner().invoke(main, ["run", str(tmp_path / "one"), "-i", str(tmp_path / "x.npz"),
                                    "-o", str(tmp_path / "y.npy")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.dtype("float8_e5m2")
    np.testing.assert_array_equal(y.view(np.uint8), x.astype(np.dtype("float8_e5m2"))
                                  .view(np.uint8))
    res = CliRunner().invoke(main, ["run", str(tmp_path / "out"), "-i", str(tmp_path / "in.npz"),
                                    "-o", str(tmp_path / "all.npy")])
    assert res.exit_code == 1 and "an .npy file holds one array" in res.output
