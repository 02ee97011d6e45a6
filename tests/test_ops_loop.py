"""Loop and Scan at run time (mlcc/passes/control_flow.py prepare_loop / prepare_scan,
mlcc/ops/control_flow.py): a C loop around the compiled body, against onnxruntime on models
built here: constant and run-time trip counts, conditions computed in the body, scan outputs,
outer-scope values, nested loops, a run-time If inside a body and a Loop inside a run-time If
branch, carried values that swap; the refusals and the run-time limit; Scan's axes and
directions."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import mlcc
from mlcc.errors import InputError, RuntimeStatusError, UnsupportedError
from util import check_model, compile_and_run, reference_outputs

F, I64, B = T.FLOAT, T.INT64, T.BOOL
vi = helper.make_tensor_value_info


def model(nodes, inputs, outputs, inits=None, opset=17):
    """inputs/outputs: name -> (elem type, shape); inits: name -> array."""
    g = helper.make_graph(nodes, "loop_test", [vi(n, t, s) for n, (t, s) in inputs.items()],
                          [vi(n, t, s) for n, (t, s) in outputs.items()],
                          [numpy_helper.from_array(np.asarray(a), n)
                           for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def body(nodes, inputs, outputs, inits=None):
    return helper.make_graph(nodes, "body", [vi(n, t, s) for n, (t, s) in inputs.items()],
                             [vi(n, t, s) for n, (t, s) in outputs.items()],
                             [numpy_helper.from_array(np.asarray(a), n)
                              for n, a in (inits or {}).items()])


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def accumulate(trip, shape=(3, 5)):
    """y, scan = Loop(M): y += x (outer) each iteration, scan = y * i (the iteration number)."""
    b = body([helper.make_node("Add", ["y_in", "x"], ["y_out"], name="acc"),
              helper.make_node("Cast", ["i"], ["i_f"], to=F, name="i_f"),
              helper.make_node("Mul", ["y_out", "i_f"], ["s"], name="scaled"),
              helper.make_node("Identity", ["c_in"], ["c_out"], name="again")],
             {"i": (I64, []), "c_in": (B, []), "y_in": (F, list(shape))},
             {"c_out": (B, []), "y_out": (F, list(shape)), "s": (F, list(shape))})
    loop = helper.make_node("Loop", ["M", "", "y0"], ["y", "scan"], body=b, name="loop")
    return model([loop], {"x": (F, list(shape)), "y0": (F, list(shape))},
                 {"y": (F, list(shape)), "scan": (F, [trip] + list(shape))},
                 {"M": np.array(trip, np.int64)})


@pytest.mark.parametrize("trip", [1, 7])
def test_constant_trip_count_with_scan_output_and_outer_value(tmp_path, trip):
    feeds = {"x": rnd(3, 5), "y0": rnd(3, 5, seed=1)}
    check_model(accumulate(trip), feeds, tmp_path)
    c = next(tmp_path.glob("m*/out/model.c")).read_text()
    assert f"for (int64_t i0 = 0; i0 < {trip}; i0++) {{" in c       # a loop, not unrolled
    assert c.count("mlcc_f32_binary(&p_loop_acc") == 1


def halving(with_trip: bool):
    """y = Loop(M?, cond): y *= 0.5 while sum(|y|) > 1 (a condition computed in the body),
    n counts the iterations; with M (a graph input), at most M iterations."""
    b = body([helper.make_node("Mul", ["y_in", "half"], ["y_out"], name="halve"),
              helper.make_node("Add", ["n_in", "one"], ["n_out"], name="count"),
              helper.make_node("Abs", ["y_out"], ["a"], name="abs"),
              helper.make_node("ReduceSum", ["a"], ["total"], keepdims=0, name="total"),
              helper.make_node("Greater", ["total", "limit"], ["c_out"], name="again")],
             {"i": (I64, []), "c_in": (B, []), "y_in": (F, [7]), "n_in": (I64, [])},
             {"c_out": (B, []), "y_out": (F, [7]), "n_out": (I64, [])},
             {"half": np.array(0.5, np.float32), "one": np.array(1, np.int64),
              "limit": np.array(1.0, np.float32)})
    loop = helper.make_node("Loop", ["M" if with_trip else "", "c0", "y0", "n0"],
                            ["y", "n"], body=b, name="halving")
    inputs = {"y0": (F, [7]), "c0": (B, [])}
    if with_trip:
        inputs["M"] = (I64, [])
    return model([loop], inputs, {"y": (F, [7]), "n": (I64, [])},
                 {"n0": np.array(0, np.int64)})


@pytest.mark.parametrize("scale,start", [(30.0, True), (0.1, True), (30.0, False)])
def test_condition_computed_in_the_body(tmp_path, scale, start):
    feeds = {"y0": rnd(7) * scale, "c0": np.array(start)}
    got = check_model(halving(False), feeds, tmp_path)
    assert got["n"] == (0 if not start else max(1, int(np.ceil(np.log2(
        np.abs(feeds["y0"]).sum())))))


@pytest.mark.parametrize("m", [0, 2, 40])
def test_run_time_trip_count_and_condition(tmp_path, m):
    feeds = {"y0": rnd(7) * 30, "c0": np.array(True), "M": np.array(m, np.int64)}
    check_model(halving(True), feeds, tmp_path)


def test_run_time_trip_count_over_the_limit_is_a_status(tmp_path):
    m = halving(True)
    onnx.save(m, str(tmp_path / "m.onnx"))
    res = mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86",
                       max_loop_iterations=5)
    assert "if (i0 >= 5) return MLCC_ERR_LOOP_LIMIT;" in (tmp_path / "out" / "model.c").read_text()
    assert res.manifest["max_loop_iterations"] == 5
    assert "--max-loop-iterations 5" in res.manifest["command"]
    lib = mlcc.load(tmp_path / "out")
    y0 = np.full(7, 100.0, np.float32)      # sum 700: ten halvings to reach 1
    ok = lib.run({"y0": y0, "c0": np.array(True), "M": np.array(5, np.int64)})
    assert ok["n"] == 5
    with pytest.raises(RuntimeStatusError, match="more iterations than its maximum"):
        lib.run({"y0": y0, "c0": np.array(True), "M": np.array(6, np.int64)})
    with pytest.raises(RuntimeStatusError, match="more iterations than its maximum"):
        lib.run({"y0": y0, "c0": np.array(True), "M": np.array(1 << 62, np.int64)})


def _run_with_canaries(lib, feeds: dict) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
    """One NAME_run_v call whose output buffers sit between 64 canary bytes on each side:
    (status, the outputs, the canary regions after the call)."""
    arrays = [np.ascontiguousarray(feeds[t["name"]], dtype=t["dtype"]) for t in lib.inputs]
    pad, bufs, outs = 64, [], []
    for t in lib.outputs:
        nbytes = int(np.prod(t["shape"], dtype=np.int64)) * np.dtype(t["dtype"]).itemsize
        buf = np.full(2 * pad + nbytes, 0xA5, np.uint8)
        bufs.append(buf)
        outs.append(buf[pad:pad + nbytes].view(t["dtype"]).reshape(t["shape"]))
    ffi = lib._ffi
    ins = ffi.new("void *[]", [ffi.from_buffer(a) for a in arrays])
    ous = ffi.new("void *[]", [ffi.from_buffer(b[pad:]) for b in bufs])
    status = lib._run(lib._ctx, ins, ous)
    return status, outs, [np.concatenate([b[:pad], b[-pad:]]) for b in bufs]


@pytest.mark.parametrize("with_trip", [True, False])
def test_loop_limit_writes_nothing_past_the_outputs(tmp_path, with_trip):
    """A Loop past --max-loop-iterations returns MLCC_ERR_LOOP_LIMIT (status 12) from the C
    call, and writes no byte around its output buffers; within the limit the same call
    matches onnxruntime. The bound is a run-time M or, without M, the condition alone."""
    from mlcc.cli import main
    from click.testing import CliRunner
    onnx.save(halving(with_trip), str(tmp_path / "m.onnx"))
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o",
                                  str(tmp_path / "out"), "--max-loop-iterations", "7"])
    assert r.exit_code == 0, r.output
    lib = mlcc.load(tmp_path / "out")
    assert lib.manifest["max_loop_iterations"] == 7
    feeds = {"y0": np.full(7, 100.0, np.float32), "c0": np.array(True)}   # 10 halvings
    if with_trip:
        feeds["M"] = np.array(1000, np.int64)
    status, _, canaries = _run_with_canaries(lib, feeds)
    assert status == 12 and lib.status_string(status).startswith("a Loop needs more")
    assert all((c == 0xA5).all() for c in canaries)
    feeds["y0"] = np.full(7, 10.0, np.float32)                            # 7 halvings: ok
    status, outs, canaries = _run_with_canaries(lib, feeds)
    assert status == 0 and all((c == 0xA5).all() for c in canaries)
    ref = reference_outputs(halving(with_trip), feeds)
    assert int(outs[1]) == int(ref["n"]) == 7
    np.testing.assert_array_equal(outs[0], ref["y"])


@pytest.mark.parametrize("bad", ["0", "-3", "2.5", "ten", "1e6", str(1 << 63)])
def test_bad_max_loop_iterations_is_a_one_line_error(tmp_path, bad):
    from mlcc.cli import main
    from click.testing import CliRunner
    onnx.save(halving(True), str(tmp_path / "m.onnx"))
    for cmd in (["compile", "-o", str(tmp_path / "out")], ["verify"], ["bench"]):
        r = CliRunner().invoke(main, [cmd[0], str(tmp_path / "m.onnx"), *cmd[1:],
                                      "--max-loop-iterations", bad])
        assert r.exit_code == 1, (cmd, r.output)
        lines = r.output.strip().splitlines()
        assert lines == [f"mlcc: error: --max-loop-iterations {bad!r}: expected an integer "
                         f"from 1 to {(1 << 63) - 1}"], r.output
    assert not (tmp_path / "out").exists()
    for value in (0, -1, 2.5, True, "5"):
        with pytest.raises(InputError, match="--max-loop-iterations"):
            mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", max_loop_iterations=value)


def test_verify_takes_max_loop_iterations(tmp_path):
    """verify compiles with the bound (a smaller one than the model needs fails the run)."""
    onnx.save(halving(False), str(tmp_path / "m.onnx"))
    feeds = {"y0": np.full(7, 10.0, np.float32), "c0": np.array(True)}
    assert mlcc.verify(tmp_path / "m.onnx", inputs=feeds, max_loop_iterations=7).ok
    with pytest.raises(RuntimeStatusError, match="more iterations than its maximum"):
        mlcc.verify(tmp_path / "m.onnx", inputs=feeds, max_loop_iterations=6)


def test_swapped_and_passed_through_carried_values(tmp_path):
    """(a, b, k) -> (b, a + b, k): a Fibonacci step; the next a is the carried b, which the
    same iteration overwrites; k passes through unchanged; z is a constant each iteration."""
    b = body([helper.make_node("Add", ["a_in", "b_in"], ["ab"], name="sum")],
             {"i": (I64, []), "c_in": (B, []), "a_in": (F, [4]), "b_in": (F, [4]),
              "k_in": (F, [2]), "z_in": (F, [3])},
             {"c_in": (B, []), "b_in": (F, [4]), "ab": (F, [4]), "k_in": (F, [2]),
              "zero": (F, [3])}, {"zero": np.zeros(3, np.float32)})
    loop = helper.make_node("Loop", ["M", "", "a0", "b0", "k0", "z0"], ["a", "b", "k", "z"],
                            body=b, name="fib")
    m = model([loop], {"a0": (F, [4]), "b0": (F, [4]), "k0": (F, [2]), "z0": (F, [3])},
              {"a": (F, [4]), "b": (F, [4]), "k": (F, [2]), "z": (F, [3])},
              {"M": np.array(6, np.int64)})
    feeds = {"a0": rnd(4), "b0": rnd(4, seed=1), "k0": rnd(2, seed=2), "z0": rnd(3, seed=3)}
    check_model(m, feeds, tmp_path)


def test_nested_loops_read_every_enclosing_scope(tmp_path):
    """An outer Loop (3 iterations) whose body runs an inner Loop (4 iterations) reading the
    outer iteration number, a value of the outer body and the main graph's input x."""
    inner = body([helper.make_node("Cast", ["oi"], ["oi_f"], to=F, name="oi_f"),
                  helper.make_node("Cast", ["j"], ["j_f"], to=F, name="j_f"),
                  helper.make_node("Mul", ["oi_f", "j_f"], ["w"], name="w"),
                  helper.make_node("Mul", ["x", "w"], ["xw"], name="xw"),
                  helper.make_node("Add", ["u_in", "xw"], ["u1"], name="add_xw"),
                  helper.make_node("Add", ["u1", "t"], ["u_out"], name="add_t")],
                 {"j": (I64, []), "ic": (B, []), "u_in": (F, [2, 3])},
                 {"ic": (B, []), "u_out": (F, [2, 3])})
    outer = body([helper.make_node("Sin", ["v_in"], ["t"], name="t"),
                  helper.make_node("Loop", ["four", "", "v_in"], ["v_out"], body=inner,
                                   name="inner"),
                  helper.make_node("Identity", ["v_out"], ["snap"], name="snap")],
                 {"oi": (I64, []), "oc": (B, []), "v_in": (F, [2, 3])},
                 {"oc": (B, []), "v_out": (F, [2, 3]), "snap": (F, [2, 3])},
                 {"four": np.array(4, np.int64)})
    loop = helper.make_node("Loop", ["three", "", "v0"], ["v", "snaps"], body=outer,
                            name="outer")
    m = model([loop], {"x": (F, [2, 3]), "v0": (F, [2, 3])},
              {"v": (F, [2, 3]), "snaps": (F, [3, 2, 3])}, {"three": np.array(3, np.int64)})
    feeds = {"x": rnd(2, 3), "v0": rnd(2, 3, seed=1)}
    check_model(m, feeds, tmp_path)
    c = next(tmp_path.glob("m*/out/model.c")).read_text()
    assert "for (int64_t i1 = 0; i1 < 4; i1++) {" in c


def test_run_time_if_inside_a_loop_and_a_loop_inside_a_run_time_if(tmp_path):
    """Body: if i is even, y = y + x, else y = y * 0.5 (If on a condition of the iteration);
    the Loop itself in the then-branch of an If on a graph input."""
    then_b = helper.make_graph([helper.make_node("Add", ["y_in", "x"], ["r"], name="plus")],
                               "even", [], [vi("r", F, [5])])
    else_b = helper.make_graph([helper.make_node("Mul", ["y_in", "half"], ["r"], name="halve")],
                               "odd", [], [vi("r", F, [5])])
    b = body([helper.make_node("Mod", ["i", "two"], ["parity"], name="parity"),
              helper.make_node("Equal", ["parity", "zero"], ["even"], name="even"),
              helper.make_node("If", ["even"], ["y_out"], then_branch=then_b,
                               else_branch=else_b, name="step")],
             {"i": (I64, []), "c_in": (B, []), "y_in": (F, [5])},
             {"c_in": (B, []), "y_out": (F, [5])},
             {"two": np.array(2, np.int64), "zero": np.array(0, np.int64),
              "half": np.array(0.5, np.float32)})
    loop_branch = helper.make_graph(
        [helper.make_node("Loop", ["five", "", "y0"], ["out"], body=b, name="loop")],
        "with_loop", [], [vi("out", F, [5])])
    plain_branch = helper.make_graph([helper.make_node("Neg", ["y0"], ["out"], name="neg")],
                                     "plain", [], [vi("out", F, [5])])
    top = helper.make_node("If", ["go"], ["y"], then_branch=loop_branch,
                           else_branch=plain_branch, name="pick")
    m = model([top], {"x": (F, [5]), "y0": (F, [5]), "go": (B, [])}, {"y": (F, [5])},
              {"five": np.array(5, np.int64)})
    for go in (True, False):
        check_model(m, {"x": rnd(5), "y0": rnd(5, seed=1), "go": np.array(go)},
                    tmp_path / str(go))


def test_loop_state_changing_shape_is_refused(tmp_path):
    b = body([helper.make_node("Concat", ["y_in", "y_in"], ["y_out"], axis=0, name="grow")],
             {"i": (I64, []), "c_in": (B, []), "y_in": (F, [None])},
             {"c_in": (B, []), "y_out": (F, [None])})
    loop = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=b, name="grow")
    m = model([loop], {"y0": (F, [2])}, {"y": (F, [None])}, {"M": np.array(3, np.int64)})
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match=r"node 'grow' \(Loop-16\): loop-carried value 0 "
                                               r"\('y_in'\) is float32 \[2\] before the loop and "
                                               r"float32 \[4\] after an iteration"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")


def test_scan_output_of_a_run_time_condition_is_refused(tmp_path):
    m = halving(False)
    g = m.graph
    g.node[0].attribute[0].g.output.append(vi("y_out", F, [7]))
    g.node[0].output.append("ys")
    g.output.append(vi("ys", F, [None, 7]))
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match=r"node 'halving' \(Loop-16\): it has scan "
                                               r"outputs, and its number of iterations depends "
                                               r"on a condition known only at run time"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")


def scan_model(in_axes, in_dirs, out_axes, out_dirs, opset=17):
    """Scan over x [5, 7, 3] (axis a0) and u [3, 5]... : the state s [3] accumulates
    s + sum(x_t * u_t) + w (w an outer-scope graph input); outputs: the running state
    (axis out_axes[0]) and x_t * u_t (axis out_axes[1]), with the directions given."""
    xs = [5, 7, 3]
    n = xs[in_axes[0] % 3]
    us = [3, n] if in_axes[1] % 2 == 1 else [n, 3]
    slice_x = [d for i, d in enumerate(xs) if i != in_axes[0] % 3]
    b = body([helper.make_node("Mul", ["xt", "ut"], ["p"], name="prod"),
              helper.make_node("ReduceSum", ["p", "axes0"], ["r"], keepdims=0, name="rsum"),
              helper.make_node("Add", ["s_in", "r"], ["s1"], name="acc"),
              helper.make_node("Add", ["s1", "w"], ["s_out"], name="bias"),
              helper.make_node("Identity", ["s_out"], ["s_scan"], name="emit")],
             {"s_in": (F, [3]), "xt": (F, slice_x), "ut": (F, [3])},
             {"s_out": (F, [3]), "s_scan": (F, [3]), "p": (F, slice_x)},
             {"axes0": np.array([0], np.int64)})
    attrs = dict(num_scan_inputs=2, scan_input_axes=in_axes, scan_input_directions=in_dirs,
                 scan_output_axes=out_axes, scan_output_directions=out_dirs)
    scan = helper.make_node("Scan", ["s0", "x", "u"], ["s", "states", "prods"], body=b,
                            name="scan", **attrs)
    def stacked(shape, axis):
        shape = list(shape)
        shape.insert(axis % (len(shape) + 1), n)
        return shape
    feeds = {"s0": rnd(3), "x": rnd(*xs, seed=1), "u": rnd(*us, seed=2), "w": rnd(3, seed=3)}
    m = model([scan], {"s0": (F, [3]), "x": (F, xs), "u": (F, us), "w": (F, [3])},
              {"s": (F, [3]), "states": (F, stacked([3], out_axes[0])),
               "prods": (F, stacked(slice_x, out_axes[1]))}, opset=opset)
    return m, feeds


@pytest.mark.parametrize("in_axes,in_dirs,out_axes,out_dirs", [
    ([0, 0], [0, 0], [0, 0], [0, 0]),
    ([1, 1], [1, 0], [1, 2], [0, 1]),
    ([-2, -1], [0, 1], [-1, -3], [1, 1]),
])
def test_scan_axes_and_directions(tmp_path, in_axes, in_dirs, out_axes, out_dirs):
    m, feeds = scan_model(in_axes, in_dirs, out_axes, out_dirs)
    check_model(m, feeds, tmp_path)


def test_scan_bad_direction_is_refused(tmp_path):
    m, _ = scan_model([0, 0], [0, 2], [0, 0], [0, 0])
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(mlcc.errors.ModelError, match=r"scan_input_directions must be 2 "
                                                     r"values of 0 \(forward\) or 1"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")


def scan8_model(batch, seq, directions, lens=None):
    """Scan-8 over x [batch, seq, 3] and u [batch, seq, 2, 3] (directions given), with the
    optional sequence_lens: the state s [batch, 3] accumulates s + sum(x_t * u_t, axis 0) + w
    (w an outer-scope graph input [3]); scan outputs: the running state and x_t * u_t."""
    b = body([helper.make_node("Mul", ["xt", "ut"], ["p"], name="prod"),
              helper.make_node("ReduceSum", ["p"], ["r"], axes=[0], keepdims=0, name="rsum"),
              helper.make_node("Add", ["s_in", "r"], ["s1"], name="acc"),
              helper.make_node("Add", ["s1", "w"], ["s_out"], name="bias"),
              helper.make_node("Identity", ["s_out"], ["s_scan"], name="emit")],
             {"s_in": (F, [3]), "xt": (F, [3]), "ut": (F, [2, 3])},
             {"s_out": (F, [3]), "s_scan": (F, [3]), "p": (F, [2, 3])})
    scan = helper.make_node("Scan", ["lens" if lens is not None else "", "s0", "x", "u"],
                            ["s", "states", "prods"], body=b, name="scan8", num_scan_inputs=2,
                            directions=directions)
    inputs = {"s0": (F, [batch, 3]), "x": (F, [batch, seq, 3]), "u": (F, [batch, seq, 2, 3]),
              "w": (F, [3])}
    feeds = {"s0": rnd(batch, 3), "x": rnd(batch, seq, 3, seed=1),
             "u": rnd(batch, seq, 2, 3, seed=2), "w": rnd(3, seed=3)}
    if lens is not None:
        inputs["lens"] = (I64, [batch])
        feeds["lens"] = np.array(lens, np.int64)
    m = model([scan], inputs, {"s": (F, [batch, 3]), "states": (F, [batch, seq, 3]),
                               "prods": (F, [batch, seq, 2, 3])}, opset=8)
    return m, feeds


def scan8_expected(feeds, directions):
    """Scan-8's semantics in numpy: each batch item alone for its length; a reversed scan
    input read from its last valid step; scan outputs zero past the length."""
    x, u, s0, w = feeds["x"], feeds["u"], feeds["s0"], feeds["w"]
    batch, seq = x.shape[:2]
    lens = feeds.get("lens", np.full(batch, seq))
    s, states, prods = s0.copy(), np.zeros((batch, seq, 3), np.float32), \
        np.zeros((batch, seq, 2, 3), np.float32)
    for bi in range(batch):
        for t in range(lens[bi]):
            xt = x[bi, lens[bi] - 1 - t if directions[0] else t]
            ut = u[bi, lens[bi] - 1 - t if directions[1] else t]
            prods[bi, t] = xt * ut
            s[bi] = s[bi] + prods[bi, t].sum(0) + w
            states[bi, t] = s[bi]
    return {"s": s, "states": states, "prods": prods}


@pytest.mark.parametrize("directions,lens", [
    ([0, 0], None), ([1, 0], None), ([0, 1], [5, 2, 3]), ([1, 1], [3, 5, 1]),
])
def test_scan8_batch_directions_and_sequence_lens(tmp_path, directions, lens):
    """Scan-8 (batch 3, 5 steps) against onnxruntime, and against its semantics in numpy
    (onnx.reference has no Scan-8)."""
    m, feeds = scan8_model(3, 5, directions, lens)
    got = check_model(m, feeds, tmp_path)
    for name, want in scan8_expected(feeds, directions).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_scan8_zero_length_sequence_keeps_its_initial_state(tmp_path):
    """A length of 0: the spec does not forbid it, onnxruntime refuses it ("Invalid entries
    in sequence_lens"); mlcc runs no step of that item (its initial state, zero outputs)."""
    m, feeds = scan8_model(3, 5, [1, 0], [0, 5, 4])
    got = compile_and_run(m, feeds, tmp_path)
    for name, want in scan8_expected(feeds, [1, 0]).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_array_equal(got["s"][0], feeds["s0"][0])
    assert not got["states"][0].any() and not got["prods"][2, 4].any()


@pytest.mark.parametrize("bad", [[6, 1, 1], [1, -1, 1]])
def test_scan8_sequence_lens_out_of_range_is_a_status(tmp_path, bad):
    m, feeds = scan8_model(3, 5, [0, 1], [5, 2, 3])
    onnx.save(m, str(tmp_path / "m.onnx"))
    mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
    feeds["lens"] = np.array(bad, np.int64)
    with pytest.raises(RuntimeStatusError, match="out of range"):
        mlcc.load(tmp_path / "out").run(feeds)


def test_scan8_batch_sizes_must_agree(tmp_path):
    m, _ = scan8_model(3, 5, [0, 0])
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2     # s0 [2, 3]
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(mlcc.errors.ModelError, match=r"node 'scan8' \(Scan-8\): its states "
                                                     r"and scan inputs have batch sizes \[2, 3\]"):
        mlcc.compile(tmp_path / "m.onnx", tmp_path / "out", target="x86")
