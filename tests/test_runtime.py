"""The runtime contract: weight blob validation, status codes, caller-owned memory, threads,
sanitizers, determinism."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mlcc
from mlcc.errors import InputError, RuntimeStatusError

HARNESS = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"

#define CHECK(cond) do { if (!(cond)) { printf("FAIL line %d: %s\n", __LINE__, #cond); \
    return 1; } } while (0)

typedef struct { const void *w; size_t wsize; const float *x; float y[TINY_OUTPUT_LOGITS_SIZE];
                 mlcc_threadpool *pool; int status; } job;

static void *worker(void *arg) {
    job *j = (job *)arg;
    void *arena = aligned_alloc(TINY_ARENA_ALIGN, TINY_ARENA_SIZE);
    mlcc_context ctx;
    int i;
    j->status = tiny_init(&ctx, j->w, j->wsize, arena, TINY_ARENA_SIZE);
    if (j->status == MLCC_OK) j->status = mlcc_context_set_threadpool(&ctx, j->pool);
    for (i = 0; i < 200 && j->status == MLCC_OK; i++) j->status = tiny_run(&ctx, j->x, j->y);
    free(arena);
    return NULL;
}

int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    static unsigned char blob[TINY_WEIGHTS_SIZE + 64] __attribute__((aligned(64)));
    static unsigned char arena[TINY_ARENA_SIZE + 64] __attribute__((aligned(64)));
    float x[TINY_INPUT_IMAGES_SIZE], y[TINY_OUTPUT_LOGITS_SIZE], y2[TINY_OUTPUT_LOGITS_SIZE];
    mlcc_context ctx;
    mlcc_threadpool *pools[3];
    pthread_t threads[5];
    job jobs[5];
    size_t i;
    (void)argc;
    CHECK(f != NULL);
    CHECK(fread(blob, 1, TINY_WEIGHTS_SIZE, f) == TINY_WEIGHTS_SIZE);
    fclose(f);
    for (i = 0; i < TINY_INPUT_IMAGES_SIZE; i++) x[i] = (float)((int)(i * 7 % 13) - 6) / 3.0f;

    /* Every misuse is a status, never a crash. */
    memset(&ctx, 0, sizeof ctx);
    CHECK(tiny_run(&ctx, x, y) == MLCC_ERR_NOT_INITIALIZED);
    CHECK(tiny_run(NULL, x, y) == MLCC_ERR_NOT_INITIALIZED);
    CHECK(tiny_init(NULL, blob, TINY_WEIGHTS_SIZE, arena, TINY_ARENA_SIZE) == MLCC_ERR_NULL_ARGUMENT);
    CHECK(tiny_init(&ctx, NULL, TINY_WEIGHTS_SIZE, arena, TINY_ARENA_SIZE) == MLCC_ERR_NULL_ARGUMENT);
    CHECK(tiny_init(&ctx, blob, TINY_WEIGHTS_SIZE, arena, TINY_ARENA_SIZE - 1) == MLCC_ERR_ARENA_TOO_SMALL);
    CHECK(tiny_init(&ctx, blob, TINY_WEIGHTS_SIZE, arena + 8, TINY_ARENA_SIZE) == MLCC_ERR_MISALIGNED);
    CHECK(tiny_init(&ctx, blob, TINY_WEIGHTS_SIZE - 64, arena, TINY_ARENA_SIZE) == MLCC_ERR_WEIGHTS_SIZE);
    CHECK(tiny_init(&ctx, blob, 10, arena, TINY_ARENA_SIZE) == MLCC_ERR_WEIGHTS_SIZE);
    blob[TINY_WEIGHTS_SIZE - 1] ^= 0x10;
    CHECK(tiny_init(&ctx, blob, TINY_WEIGHTS_SIZE, arena, TINY_ARENA_SIZE) == MLCC_ERR_WEIGHTS_CHECKSUM);
    blob[TINY_WEIGHTS_SIZE - 1] ^= 0x10;
    blob[0] = 'X';
    CHECK(tiny_init(&ctx, blob, TINY_WEIGHTS_SIZE, arena, TINY_ARENA_SIZE) == MLCC_ERR_WEIGHTS_MAGIC);
    blob[0] = 'M';
    CHECK(tiny_run(&ctx, x, y) == MLCC_ERR_NOT_INITIALIZED);   /* failed init leaves it unusable */
    CHECK(strcmp(mlcc_status_string(MLCC_ERR_WEIGHTS_CHECKSUM), "ok") != 0);

    CHECK(tiny_init(&ctx, blob, TINY_WEIGHTS_SIZE, arena, TINY_ARENA_SIZE) == MLCC_OK);
    CHECK(tiny_run(&ctx, NULL, y) == MLCC_ERR_NULL_ARGUMENT);
    CHECK(tiny_run(&ctx, x, y) == MLCC_OK);
    CHECK(tiny_model_info()->num_inputs == 1 && tiny_model_info()->inputs[0].dims[1] == 2);

    /* Thread pools: misuse is a status too. */
    CHECK(mlcc_threadpool_create(NULL, 2) == MLCC_ERR_NULL_ARGUMENT);
    CHECK(mlcc_threadpool_create(&pools[0], 0) == MLCC_ERR_THREADS && pools[0] == NULL);
    CHECK(mlcc_threadpool_create(&pools[0], MLCC_MAX_THREADS + 1) == MLCC_ERR_THREADS);
    CHECK(mlcc_context_set_threadpool(NULL, NULL) == MLCC_ERR_NULL_ARGUMENT);
    for (i = 0; i < 3; i++) CHECK(mlcc_threadpool_create(&pools[i], (int)i + 2) == MLCC_OK);
    CHECK(mlcc_threadpool_size(pools[1]) == 3 && mlcc_threadpool_size(NULL) == 1);

    /* Five contexts sharing the weights, in five threads, give the sequential result, bit for
     * bit: without a pool, with pools of 2 and 3 threads, and two sharing a pool of 4. */
    for (i = 0; i < 5; i++) {
        jobs[i].w = blob; jobs[i].wsize = TINY_WEIGHTS_SIZE; jobs[i].x = x;
        jobs[i].pool = i == 0 ? NULL : pools[i < 3 ? i - 1 : 2];
        CHECK(pthread_create(&threads[i], NULL, worker, &jobs[i]) == 0);
    }
    for (i = 0; i < 5; i++) CHECK(pthread_join(threads[i], NULL) == 0);
    for (i = 0; i < 5; i++) {
        CHECK(jobs[i].status == MLCC_OK);
        CHECK(memcmp(jobs[i].y, y, sizeof y) == 0);
    }
    CHECK(mlcc_context_set_threadpool(&ctx, pools[1]) == MLCC_OK);
    CHECK(tiny_run(&ctx, x, y2) == MLCC_OK && memcmp(y, y2, sizeof y) == 0);
    CHECK(tiny_init(&ctx, blob, TINY_WEIGHTS_SIZE, arena, TINY_ARENA_SIZE) == MLCC_OK);
    CHECK(ctx.pool == NULL);                                   /* init detaches the pool */
    for (i = 0; i < 3; i++) mlcc_threadpool_destroy(pools[i]);
    mlcc_threadpool_destroy(NULL);
    CHECK(tiny_run(&ctx, x, y2) == MLCC_OK && memcmp(y, y2, sizeof y) == 0);
    printf("OK\n");
    return 0;
}
"""


@pytest.fixture
def tiny_out(tiny_static_path, tmp_path) -> Path:
    out = tmp_path / "tiny"
    mlcc.compile(tiny_static_path, out, name="tiny")
    return out


@pytest.mark.parametrize("sanitize", ["", "-fsanitize=address,undefined -fno-sanitize-recover=all",
                                      "-fsanitize=thread"])
def test_c_api_contract(tiny_out, tmp_path, sanitize):
    """Builds the generated sources into a C program (strict warnings, optionally sanitized)
    that checks every status code, then runs contexts in five threads, four of them on thread
    pools (two sharing one): ThreadSanitizer checks the pool's synchronization."""
    (tmp_path / "harness.c").write_text(HARNESS)
    sources = ["model.c"] + [str(p.relative_to(tiny_out)) for p in
                             sorted((tiny_out / "runtime").rglob("*.c"))]
    exe = tmp_path / "harness"
    cmd = ["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pedantic",
           "-DMLCC_MIN_PARALLEL_MACS=0",   # the tiny model's convolution uses the pools
           *sanitize.split(), "-I.", "-Iruntime/include", "-Iruntime/kernels",
           str(tmp_path / "harness.c"), *sources, "-o", str(exe), "-lm", "-pthread"]
    subprocess.run(cmd, cwd=tiny_out, check=True)
    proc = subprocess.run([str(exe), str(tiny_out / "weights.bin")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr


def test_generated_code_is_warning_free_under_clang(tiny_out):
    import shutil
    if not shutil.which("clang"):
        pytest.skip("clang is not installed")
    sources = ["model.c"] + [str(p.relative_to(tiny_out)) for p in
                             sorted((tiny_out / "runtime").rglob("*.c"))]
    subprocess.run(["clang", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                    "-fsyntax-only", "-I.", "-Iruntime/include", "-Iruntime/kernels", *sources],
                   cwd=tiny_out, check=True)


@pytest.mark.parametrize("damage,message", [
    (lambda b: b[:-100], "wrong size"),
    (lambda b: b[:40], "wrong size"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "corrupted"),
    (lambda b: b"XXXX" + b[4:], "bad magic"),
    (lambda b: b[:8] + b"\x07" + b[9:], "format version"),
    (lambda b: b"", "bad magic"),
])
def test_damaged_weight_blob_is_refused(tiny_out, damage, message):
    blob = (tiny_out / "weights.bin").read_bytes()
    (tiny_out / "weights.bin").write_bytes(damage(blob))
    with pytest.raises(RuntimeStatusError, match=message):
        mlcc.load(tiny_out)


def test_blob_of_another_model_is_refused(tiny_static_path, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    mlcc.compile(tiny_static_path, a, name="tiny")
    mlcc.compile(tiny_static_path, b, name="tiny", shapes={})
    import onnx
    m = onnx.load(str(tiny_static_path))
    m.graph.initializer[0].raw_data = bytes(len(m.graph.initializer[0].raw_data))
    onnx.save(m, str(tmp_path / "other.onnx"))
    mlcc.compile(tmp_path / "other.onnx", b, name="tiny")
    (a / "weights.bin").write_bytes((b / "weights.bin").read_bytes())
    with pytest.raises(RuntimeStatusError, match="another model"):
        mlcc.load(a)


def test_model_named_like_a_libc_function(tiny_static_path, tmp_path):
    """glibc exports svc_run (Sun RPC): a model named "svc" has an svc_run of its own, which its
    svc_run_v must call, not glibc's (the API is exported with protected visibility on ELF)."""
    mlcc.compile(tiny_static_path, tmp_path / "tiny", name="tiny")
    mlcc.compile(tiny_static_path, tmp_path / "svc", name="svc")
    ref, svc = mlcc.load(tmp_path / "tiny"), mlcc.load(tmp_path / "svc")
    x = np.random.default_rng(3).standard_normal((1, 2, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(svc.run({"images": x})["logits"],
                                  ref.run({"images": x})["logits"])


def test_python_binding_checks_inputs(tiny_out):
    m = mlcc.load(tiny_out)
    x = np.ones((1, 2, 6, 6), np.float32)
    y = m.run({"images": x})["logits"]
    assert y.shape == (1, 5) and y.dtype == np.float32
    np.testing.assert_array_equal(m.run({"images": x.astype(np.float64)})["logits"], y)
    with pytest.raises(InputError, match="missing 'images'"):
        m.run({})
    with pytest.raises(InputError, match="unknown 'other'"):
        m.run({"images": x, "other": x})
    with pytest.raises(InputError, match="shape"):
        m.run({"images": x[:, :1]})
    with pytest.raises(InputError, match="float32"):
        m.run({"images": x.astype(np.int32)})
    # non-contiguous input is accepted
    big = np.ones((1, 2, 6, 12), np.float32)[..., ::2]
    np.testing.assert_array_equal(m.run({"images": big})["logits"], y)
    # what run()'s fast path (an exact dtype, shape and C order) leaves to the full checks
    np.testing.assert_array_equal(m.run({"images": x.astype(">f4")})["logits"], y)
    r = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(m.run({"images": np.asfortranarray(r)})["logits"],
                                  m.run({"images": r})["logits"])
    with pytest.raises(InputError, match="missing 'images'"):
        m.run({"other": x})
    # outputs are new arrays on every call
    assert m.run({"images": x})["logits"] is not m.run({"images": x})["logits"]


def test_recompiling_into_the_same_folder_loads_the_new_code(tiny_static_path, tmp_path):
    out = tmp_path / "o"
    mlcc.compile(tiny_static_path, out, name="tiny")
    first = mlcc.load(out).run({"images": np.ones((1, 2, 6, 6), np.float32)})["logits"]
    mlcc.compile(tiny_static_path, out, name="tiny", shapes={"images": (1, 2, 6, 6)})
    second = mlcc.load(out).run({"images": np.ones((1, 2, 6, 6), np.float32)})["logits"]
    np.testing.assert_array_equal(first, second)


def test_compiling_twice_gives_identical_folders(tiny_model_path, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        mlcc.compile(tiny_model_path, out, shapes={"images": (2, 2, 6, 6)})
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_embedded_weights(tiny_static_path, tmp_path):
    out = tmp_path / "emb"
    mlcc.compile(tiny_static_path, out, name="tiny", embed_weights=True)
    assert (out / "weights.c").is_file()
    (out / "weights.bin").unlink()          # not needed at run time any more
    x = np.ones((1, 2, 6, 6), np.float32)
    ref = mlcc.load(out).run({"images": x})["logits"]
    plain = tmp_path / "plain"
    mlcc.compile(tiny_static_path, plain, name="tiny")
    np.testing.assert_array_equal(mlcc.load(plain).run({"images": x})["logits"], ref)


def test_threads_give_bit_identical_outputs(tmp_path):
    """load(threads=N) runs the model on a pool of N threads: the same bits for 1, 2 and 3
    (a model with packed and depthwise convolutions large enough to be split)."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((48, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((48, 1, 3, 3)).astype(np.float32)
    w3 = rng.standard_normal((40, 48, 1, 1)).astype(np.float32)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel()) for n, a in
             (("w1", w1), ("w2", w2), ("w3", w3))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1], group=48,
                              strides=[2, 2]),
             helper.make_node("Conv", ["c", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 64, 61])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 40, 32, 31])], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    mlcc.compile(path, tmp_path / "out", target="x86")
    x = rng.standard_normal((1, 3, 64, 61)).astype(np.float32)
    outs = [mlcc.load(tmp_path / "out", threads=t).run({"x": x})["y"] for t in (1, 2, 3)]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    with pytest.raises(InputError, match="threads"):
        mlcc.load(tmp_path / "out", threads=0)


def test_fast_call_and_cffi_fallback_give_the_same_outputs(tiny_out, monkeypatch):
    """run() and prepare()'s call go through the C helper _fastcall when it is built (pip
    install builds it where the Python headers are: a failed build would only warn), and
    through cffi's ABI mode when it is not; both give the same bits, GIL held or released."""
    import functools
    import sysconfig

    from mlcc.runtime import loader

    if (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        assert loader._fastcall is not None, "the install did not build mlcc.runtime._fastcall"
    if loader._fastcall is None:
        pytest.skip("mlcc.runtime._fastcall is not built (no Python headers)")
    x = np.random.default_rng(1).standard_normal((1, 2, 6, 6)).astype(np.float32)
    m = mlcc.load(tiny_out)
    ref = m.run({"images": x})["logits"]
    call, outs = m.prepare({"images": x})
    assert isinstance(call.__self__, loader._fastcall.Call)
    for release in (True, False):
        outs["logits"][:] = np.nan
        call.__self__.release_gil = release
        assert call() == 0
        np.testing.assert_array_equal(outs["logits"], ref)
    with pytest.raises(TypeError):
        call(1)

    monkeypatch.setattr(loader, "_fastcall", None)
    m = mlcc.load(tiny_out)
    np.testing.assert_array_equal(m.run({"images": x})["logits"], ref)
    call, outs = m.prepare({"images": x})
    assert isinstance(call, functools.partial)
    assert call() == 0
    np.testing.assert_array_equal(outs["logits"], ref)


@pytest.mark.parametrize("fast", [True, False])
def test_prepared_call_keeps_the_model_alive(tiny_out, monkeypatch, fast):
    """A prepared call holds the model (arena, weights, thread pool) and its buffers: dropping
    everything else and collecting leaves it working; once the call goes too, all is freed,
    also when the call and the model refer to each other (the helper's Call supports the GC)."""
    import gc
    import weakref

    from mlcc.runtime import loader

    if not fast:
        monkeypatch.setattr(loader, "_fastcall", None)
    elif loader._fastcall is None:
        pytest.skip("mlcc.runtime._fastcall is not built")
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 6)).astype(np.float32)
    ref = mlcc.load(tiny_out).run({"images": x})["logits"]
    m = mlcc.load(tiny_out, threads=2)
    call, outs = m.prepare({"images": x.copy()})
    out = outs["logits"]
    alive = weakref.ref(m)
    del m, outs, x
    gc.collect()
    for _ in range(3):
        out[:] = 0
        assert call() == 0
        np.testing.assert_array_equal(out, ref)
    assert alive() is not None
    alive().cycle = call
    del call
    gc.collect()
    assert alive() is None


def test_prepare_releases_the_gil_for_calls_that_are_not_short():
    """_is_short decides whether prepare()'s call keeps the GIL: a call of 20 ms is not short,
    and one such call is enough to tell (no timing assertion: a sleep takes at least that)."""
    import time

    from mlcc.runtime import loader

    calls = []
    assert not loader._is_short(lambda: (calls.append(1), time.sleep(0.02)))
    assert len(calls) == 1
