"""Loop groups (codegen/groups.py, mlcc_loop_group in runtime_c/src/mlcc_internal.h): the last
parallel loops of consecutive independent calls run as one. Which calls are grouped, that
everything a group touches stays alive through it (memory plan), that the kernels hand their
loop over (one loop instead of two, counted by the measuring build) with the same bits as
separate calls, and whole models against onnxruntime with the same bits on 1, 2 and 3
threads, on x86 and on the cross targets (no threads on wasm: nothing is deferred)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import mlcc
from mlcc.codegen.c_writer import kernel_index
from mlcc.codegen.groups import GROUP_LOOPS, loop_groups, sibling_runs
from mlcc.codegen.memory import plan_memory
from mlcc.ir import Graph, Program
from mlcc.ir.graph import Value
from mlcc.ir.program import KernelCall
from mlcc.ops.conv_kernels import GROUPABLE
from mlcc.ops.gemm import pack_a
from mlcc.targets import load_target
from test_targets_arm import needs_arm
from test_targets_wasm import needs_wasm
from util import build_kernels, check_model, kernel_cdef, make_model, rand

RUNTIME = Path(__file__).resolve().parents[1] / "runtime_c"


def test_groupable_kernels_hand_over_their_last_loop():
    files, _ = kernel_index()
    for kernel in GROUPABLE:
        source = (RUNTIME / "kernels" / f"{files[kernel]}.c").read_text()
        assert re.search(r"mlcc_parallel_loop\(pool, (?!0,)", source), kernel
    internal = (RUNTIME / "src" / "mlcc_internal.h").read_text()
    assert re.search(rf"#define MLCC_GROUP_LOOPS {GROUP_LOOPS}\b", internal)


# ------------------------------------------------------------------ which calls are grouped

def _program(calls, sizes, inputs=("x",), outputs=("y",)):
    values = {n: Value(n, "uint8", (s,)) for n, s in sizes.items()}   # sizes in bytes
    return Program(Graph("g", [], values, list(inputs), list(outputs), 17), calls)


def _conv(name, reads, writes, **kw):
    kw = dict(dict(pool=True, groupable=True, scratch_bytes=256), **kw)
    return KernelCall(name, [*reads, *writes], list(writes), **kw)


def test_siblings_are_grouped_and_dependents_are_not():
    sizes = dict(x=64, s=640, a=640, b=640, c=640, d=640, y=64)
    calls = [_conv("sq", ["x"], ["s"]), _conv("e1", ["s"], ["a"]), _conv("e3", ["s"], ["b"]),
             _conv("next", ["a"], ["c"]),          # reads e1's output: a new group starts
             _conv("side", ["b"], ["d"]),          # independent of `next`
             KernelCall("tail", ["c", "d", "y"], ["y"], pool=True)]
    prog = _program(calls, sizes)
    assert sibling_runs(prog, {"y"}) == [(1, 2), (3, 4)]
    # not groupable, guarded, in place, or with a status: alone
    for change in (dict(groupable=False), dict(guard=(("x", True),)),
                   dict(in_place=(("b", "s"),)), dict(returns_status=True), dict(pool=False)):
        other = _conv("e3", ["s"], ["b"], **change)
        prog = _program([calls[0], calls[1], other], sizes)
        assert sibling_runs(prog, {"y"}) == [], change


def test_slices_of_one_tensor_are_independent_unless_they_overlap():
    sizes = dict(x=64, s=640, cat=1280, a=640, b=640, y=64)
    calls = [_conv("e1", ["s"], ["a"]), _conv("e3", ["s"], ["b"])]
    prog = _program(calls, sizes)
    prog.aliases.update(a="cat", b="cat")
    prog.slices.update(a=0, b=640)
    assert sibling_runs(prog, set()) == [(0, 1)]
    prog.slices["b"] = 576                          # the last 64 bytes of a
    assert sibling_runs(prog, set()) == []


def test_the_callers_buffers_count_as_one():
    # an output buffer may be an input's (a state updated in place): a call that writes the
    # caller's output never joins one that reads the caller's input
    sizes = dict(x=64, s=640, y=640)
    prog = _program([_conv("a", ["x"], ["s"]), _conv("b", ["s"], ["y"])], sizes)
    assert sibling_runs(prog, {"y"}) == []
    prog = _program([_conv("a", ["x"], ["s"]), _conv("b", ["x"], ["y"])], sizes)
    assert sibling_runs(prog, {"y"}) == []
    prog = _program([_conv("a", ["x"], ["s"]), _conv("b", ["x"], ["y"])], sizes)
    assert sibling_runs(prog, set()) == [(0, 1)]     # y in the arena: only x is the caller's


def test_at_most_group_loops_calls():
    sizes = {"x": 64, **{f"o{i}": 64 for i in range(7)}, "y": 64}
    prog = _program([_conv(f"c{i}", ["x"], [f"o{i}"]) for i in range(7)], sizes)
    assert sibling_runs(prog, set()) == [(0, GROUP_LOOPS - 1), (GROUP_LOOPS, 6)]


def test_a_group_keeps_what_it_touches_alive():
    # e1 and e3 each have scratch and write a and b; planned one after the other, e3's
    # scratch and b could take e1's scratch bytes, which e1's deferred loop still uses
    sizes = dict(x=64, s=4096, a=4096, b=4096, y=64)
    calls = [_conv("sq", ["x"], ["s"]), _conv("e1", ["s"], ["a"], scratch_bytes=8192),
             _conv("e3", ["s"], ["b"], scratch_bytes=8192),
             KernelCall("tail", ["a", "b", "y"], ["y"], pool=True)]
    prog = _program(calls, sizes)
    prog.groups = sibling_runs(prog, {"y"})
    assert prog.groups == [(1, 2)]
    plan = plan_memory(prog, {"y": 0})
    ranges = [(plan.scratch[1], 8192), (plan.scratch[2], 8192)] + [
        (plan.storage[n].index, 4096) for n in "sab"]
    for i, (o1, n1) in enumerate(ranges):
        for o2, n2 in ranges[i + 1:]:
            assert o1 + n1 <= o2 or o2 + n2 <= o1, ranges
    prog.groups = []                                # without the group, they may share
    assert plan_memory(prog, {"y": 0}).arena_size < plan.arena_size
    # so that group is not made; one whose calls' bytes are alive together anyway is
    assert loop_groups(prog, {"y": 0}) == [] and prog.groups == []
    calls[3] = KernelCall("tail", ["a", "b", "s", "y"], ["y"], pool=True)
    for c in calls[1:3]:
        c.scratch_bytes = 0
    assert loop_groups(_program(calls, sizes), {"y": 0}) == [(1, 2)]


# ------------------------------------------------------------- the kernels, through cffi

def _f(ffi, a):
    return ffi.cast("float *", ffi.from_buffer(a))


def test_grouped_packed_convolutions_run_one_loop_with_the_same_bits(tmp_path):
    """Two packed 1x1 convolutions of one input (a fire module's expand layers) through a
    group on pools of 2 and 3 threads: one loop in all (the measuring build counts the
    caller's loops), the bits of the calls run alone on the pool and without one; on a pool
    of 1 thread the group defers nothing."""
    cffi = pytest.importorskip("cffi")
    if load_target("x86-native").lowering_options().get("gemm_nr") != 32:
        pytest.skip("the unit counts are those of B panels of 32 columns (AVX-512)")
    path = build_kernels(tmp_path / "libgroup.so", "x86-native", [
        "kernels/conv.c", "kernels/gemm.c", "src/mlcc_threadpool.c", "src/mlcc_runtime.c"],
        defines=["-DMLCC_POOL_STATS"])
    ffi = cffi.FFI()
    ffi.cdef(kernel_cdef("conv.h", "gemm.h") +
             "void mlcc_threadpool_stats(void *pool, double *out);")
    dl = ffi.dlopen(str(path))
    rng = np.random.default_rng(3)
    c, hw = 24, 29                                   # 841 positions: several panels a thread
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    layers = []
    for m, block in ((40, 256), (67, 1024)):
        wm = rng.standard_normal((m, c)).astype(np.float32)
        conv = dict(batch=1, in_channels=c, in_h=hw, in_w=hw, out_channels=m, out_h=hw,
                    out_w=hw, kernel_h=1, kernel_w=1, stride_h=1, stride_w=1, dilation_h=1,
                    dilation_w=1, pad_top=0, pad_left=0, groups=1,
                    act={"kind": 1, "alpha": 0.0, "beta": 0.0})
        layers.append(dict(
            params=ffi.new("mlcc_conv2d_packed_params *", {"conv": conv, "block_cols": block}),
            w=pack_a(wm.reshape(1, m, c)), bias=rng.standard_normal(m).astype(np.float32),
            scratch=np.zeros((c + 1) * block, np.float32), m=m, wm=wm))

    def run(pool, grouped):
        ys = [np.full((1, L["m"], hw, hw), np.nan, np.float32) for L in layers]
        group = ffi.new("mlcc_loop_group *")
        gpool = dl.mlcc_loop_group_open(group, pool) if grouped else pool
        for L, y in zip(layers, ys):
            dl.mlcc_f32_conv2d__packed(L["params"], _f(ffi, x), _f(ffi, L["w"]),
                                       _f(ffi, L["bias"]), _f(ffi, y), _f(ffi, L["scratch"]),
                                       gpool)
        if grouped:
            if pool != ffi.NULL and dl.mlcc_threadpool_size(pool) > 1:
                assert group.count == 2 and all(np.isnan(y).all() for y in ys), "deferred"
            dl.mlcc_loop_group_run(group)
        return ys

    alone = run(ffi.NULL, False)
    for L, y in zip(layers, alone):
        ref = np.maximum(np.einsum("mc,chw->mhw", L["wm"], x[0]) + L["bias"][:, None, None], 0)
        np.testing.assert_allclose(y[0], ref, rtol=1e-4, atol=1e-4)
    assert all(np.array_equal(a, b) for a, b in zip(alone, run(ffi.NULL, True)))
    for threads, loops in ((1, 0), (2, 1), (3, 1)):
        pp = ffi.new("mlcc_threadpool **")
        assert dl.mlcc_threadpool_create(pp, threads) == 0
        stats = ffi.new("double[]", 7 * threads)
        for grouped in (False, True):
            dl.mlcc_threadpool_stats(pp[0], stats)   # zeroes them
            got = run(pp[0], grouped)
            dl.mlcc_threadpool_stats(pp[0], stats)
            assert all(np.array_equal(a, b) for a, b in zip(alone, got)), (threads, grouped)
            want = loops if grouped else 2 * loops
            assert stats[4] == want, f"{threads} threads, grouped {grouped}: {stats[4]} loops"
            units = sum(stats[7 * t + 1] for t in range(threads))
            # every unit once: per layer its panels of 32 columns in a block, at most 4 a thread
            panels = [-(-min(hw * hw, L["params"].block_cols) // 32) for L in layers]
            assert threads == 1 or units == sum(min(p, 4 * threads) for p in panels), units
        dl.mlcc_threadpool_destroy(pp[0])


# ------------------------------------------------------------------------- whole models

def _conv_nodes(name, x, w, y, k, pad=0):
    return [helper.make_node("Conv", [x, w, f"{w}_b"], [y + "_c"], name=name,
                             kernel_shape=[k, k], pads=[pad] * 4),
            helper.make_node("Relu", [y + "_c"], [y], name=name + "_relu")]


def _weights(specs, seed=20):
    inits = {}
    for i, (w, cout, cin, k) in enumerate(specs):
        inits[w] = rand(cout, cin, k, k, seed=seed + i) * np.float32(1 / np.sqrt(cin * k * k))
        inits[f"{w}_b"] = rand(cout, seed=seed + 50 + i) * 0.1
    return inits


def _fire(cin, squeeze, e1, e3, hw, wide=None):
    """A wide 1x1 stem (the arena's peak, so that the group does not make the arena larger:
    loop_groups) -> squeeze 1x1 -> (expand 1x1, expand 3x3 pad 1) -> Concat -> 1x1 head: the
    two expand layers are siblings (the second stays in the Concat's channels)."""
    wide = wide or 4 * (e1 + e3)
    nodes = (_conv_nodes("stem", "x", "wt", "t", 1) + _conv_nodes("squeeze", "t", "ws", "s", 1)
             + _conv_nodes("expand1", "s", "w1", "a", 1)
             + _conv_nodes("expand3", "s", "w3", "b", 3, pad=1)
             + [helper.make_node("Concat", ["a", "b"], ["cat"], axis=1)]
             + _conv_nodes("head", "cat", "wh", "y", 1))
    inits = _weights([("wt", wide, cin, 1), ("ws", squeeze, wide, 1), ("w1", e1, squeeze, 1),
                      ("w3", e3, squeeze, 3), ("wh", 11, e1 + e3, 1)])
    x = rand(1, cin, hw, hw, seed=5)
    return make_model(nodes, {"x": x}, ["y"], initializers=inits), {"x": x}


def _inception(cin, hw):
    """Three 1x1 branches of one input (the 1x1, the 3x3 reduce, the 5x5 reduce) and the
    two convolutions after the reduces, into one Concat; then a wide 1x1 layer (the arena's
    peak, so that the groups do not make the arena larger: loop_groups) and a 1x1 head."""
    nodes = (_conv_nodes("b1", "x", "w1", "p1", 1) + _conv_nodes("b2r", "x", "w2r", "r2", 1)
             + _conv_nodes("b3r", "x", "w3r", "r3", 1)
             + _conv_nodes("b2", "r2", "w2", "p2", 3, pad=1)
             + _conv_nodes("b3", "r3", "w3", "p3", 5, pad=2)
             + [helper.make_node("Concat", ["p1", "p2", "p3"], ["cat"], axis=1)]
             + _conv_nodes("wide", "cat", "wt", "t", 1) + _conv_nodes("head", "t", "wh", "y", 1))
    inits = _weights([("w1", 48, cin, 1), ("w2r", 32, cin, 1), ("w3r", 16, cin, 1),
                      ("w2", 64, 32, 3), ("w3", 16, 16, 5), ("wt", 2048, 128, 1),
                      ("wh", 11, 2048, 1)])
    x = rand(1, cin, hw, hw, seed=6)
    return make_model(nodes, {"x": x}, ["y"], initializers=inits), {"x": x}


def _groups(folder: Path) -> list[list[str]]:
    """The kernels of each loop group in the generated C."""
    text = (folder / "model.c").read_text()
    blocks = re.findall(r"mlcc_loop_group_open\(.*?mlcc_loop_group_run", text, re.S)
    return [re.findall(r"\n\s+(mlcc_f32_\w+)\(", b) for b in blocks]


def _compile(model, tmp_path: Path, target: str) -> Path:
    onnx.save(model, str(tmp_path / "model.onnx"))
    mlcc.compile(tmp_path / "model.onnx", tmp_path / "out", target=target)
    return tmp_path / "out"


CASES = {
    # 16 -> 64 + 64 on 55 x 55 (SqueezeNet's first fire module): packed and Winograd by tiles
    "fire55": (lambda: _fire(64, 16, 64, 64, 55), 1),
    # prime sizes: 29 x 29, an expand of 37 channels (its part of the Concat unaligned: copied)
    "fire29": (lambda: _fire(48, 24, 37, 64, 29), 1),
    # 11 x 11: Winograd by phases, its last block's output transform in the group (121
    # positions: 4, 8 or 16 whole B panels of 32, 16 or 8 columns, an even split on 2 threads,
    # so that the packed layer takes the one-loop partition by panels on every x86: 13 x 13's
    # 11 panels of 16 on AVX2 went by rows, two loops that no group runs)
    "fire11": (lambda: _fire(64, 64, 256, 256, 11, wide=8192), 1),
    # the three 1x1 layers of the input, then the 3x3 and the 5x5 after the reduces
    "inception": (lambda: _inception(96, 23), 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_models_match_onnxruntime_with_the_same_bits_on_threads(tmp_path, case):
    make, groups = CASES[case]
    model, feeds = make()
    out = _compile(model, tmp_path, "x86-native")
    found = _groups(out)
    assert len(found) == groups and all(len(g) >= 2 for g in found), found
    one = mlcc.load(out).run(feeds)
    for n in (2, 3):
        got = mlcc.load(out, threads=n).run(feeds)
        assert np.array_equal(got["y"], one["y"]), f"{n} threads"
    check_model(model, feeds, tmp_path / "ref", target="x86-native")


def test_loop_groups_on_x86(tmp_path):
    # the 128-bit build: its own kernel choices, grouped the same way
    model, feeds = _fire(64, 16, 64, 64, 55)
    out = _compile(model, tmp_path, "x86")
    assert len(_groups(out)) == 1
    one = mlcc.load(out).run(feeds)
    assert np.array_equal(mlcc.load(out, threads=2).run(feeds)["y"], one["y"])
    check_model(model, feeds, tmp_path / "ref", target="x86")


@pytest.mark.parametrize("target", [pytest.param("arm", marks=needs_arm),
                                    pytest.param("wasm", marks=needs_wasm)])
def test_loop_groups_on_cross_targets(tmp_path, target):
    # arm's runtime has threads (the harness runs without a pool: nothing deferred), wasm's
    # none: no groups there (each would only cost the run function its stack)
    model, feeds = _fire(48, 24, 37, 64, 29)
    check_model(model, feeds, tmp_path, target=target)
    assert len(_groups(next(tmp_path.glob("m*/out")))) == (target == "arm")


def _loops_per_run(folder: Path, feeds, ungrouped: bool) -> float:
    """The parallel loops of one run on 2 threads, counted by a measuring build of the folder
    (-DMLCC_POOL_STATS); ungrouped: with the calls given the context's pool, not the group's."""
    import shutil
    import subprocess
    copy = folder.parent / f"stats{int(ungrouped)}"
    shutil.copytree(folder, copy)
    if ungrouped:
        text = (copy / "model.c").read_text()
        (copy / "model.c").write_text(re.sub(r"\bgpool\);", "ctx->pool);", text))
    flags = re.search(r"^CPPFLAGS = (.*)$", (copy / "Makefile").read_text(), re.M).group(1)
    subprocess.run(["make", "-s", "-B", "-C", str(copy), f"CPPFLAGS={flags} -DMLCC_POOL_STATS"],
                   check=True)
    model = mlcc.load(copy, threads=2)
    model._ffi.cdef("void mlcc_threadpool_stats(void *pool, double *out);")
    stats = model._ffi.new("double[]", 14)
    model.run(feeds)
    model._lib.mlcc_threadpool_stats(model._ctx.pool, stats)
    got = model.run(feeds)
    model._lib.mlcc_threadpool_stats(model._ctx.pool, stats)
    return stats[4], got["y"]


@pytest.mark.parametrize("case", ["fire55", "fire11"])
def test_a_group_runs_one_loop_where_its_calls_ran_two(tmp_path, case):
    # fire55: the packed and the Winograd-by-tiles loops; fire11: the packed loop and
    # Winograd's last output transform by channels (its other phases run at once)
    model, feeds = CASES[case][0]()
    out = _compile(model, tmp_path, "x86-native")
    grouped, y = _loops_per_run(out, feeds, False)
    alone, y_alone = _loops_per_run(out, feeds, True)
    assert grouped == alone - 1 and grouped > 0, (grouped, alone)
    assert np.array_equal(y, y_alone)
