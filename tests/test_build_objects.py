"""Building a model folder's objects: in parallel (MLCC_BUILD_JOBS), with objects this process
compiled before reused only when the command and every byte they depend on are the same
(mlcc/targets/objects.py ObjectCache), and failures reported in source order."""
import os
import shutil

import pytest

from mlcc import api
from mlcc.errors import BuildError, TargetError
from mlcc.targets import load_target
from mlcc.targets import objects
from mlcc.targets.build import build_jobs, compile_objects


@pytest.fixture
def fresh_cache(monkeypatch):
    cache = objects.ObjectCache()
    monkeypatch.setattr("mlcc.targets.build.CACHE", cache)
    return cache


def _objects(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("obj/**/*.o"))}


def test_objects_are_reused_only_when_sources_and_headers_are_the_same(
        tiny_static_path, tmp_path, fresh_cache, monkeypatch):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    steps = []
    api.compile(tiny_static_path, a, progress_bar=lambda label, done, total:
                steps.append((label, done, total)))
    sources = len(_objects(a))
    assert fresh_cache.hits == 0 and fresh_cache.misses == sources
    assert [s[1:] for s in steps] == [(k, sources) for k in range(1, sources + 1)]
    assert {s[0] for s in steps} == {"C build"}
    # the same model again: every object from the cache, the same library
    api.compile(tiny_static_path, b, name="other")     # another prefix: model.c differs
    assert fresh_cache.hits == sources - 1
    assert (_objects(b).keys() == _objects(a).keys())
    for name, data in _objects(a).items():
        if name != "obj/model.o":
            assert _objects(b)[name] == data, name
    # a header that conv.c includes changes (one comment): the sources that include it are
    # compiled again, and every object is what the compiler writes without a cache
    gen = api.compile(tiny_static_path, c, build=False).sources
    conv_h = c / "runtime" / "kernels" / "conv.h"
    conv_h.write_bytes(conv_h.read_bytes() + b"/* changed */\n")
    dirs = ["runtime/include", "runtime/kernels", "."]
    including = [s for s in gen if "runtime/kernels/conv.h" in dict(objects._includes(c, s, dirs))]
    assert "runtime/kernels/conv.c" in including
    misses = fresh_cache.misses
    compile_objects(load_target("x86"), c, gen)
    assert fresh_cache.misses - misses == len(including)
    monkeypatch.setattr("mlcc.targets.build.CACHE", objects.ObjectCache())
    shutil.copytree(c, tmp_path / "d")
    shutil.rmtree(tmp_path / "d" / "obj")
    compile_objects(load_target("x86"), tmp_path / "d", gen)
    assert _objects(tmp_path / "d") == _objects(c)


def test_failures_are_reported_for_the_first_failing_source_in_order(tmp_path, fresh_cache,
                                                                    monkeypatch):
    monkeypatch.setenv("MLCC_BUILD_JOBS", "2")
    for name, text in (("a.c", "int a(void) { return 1; }\n"),
                       ("b.c", "int b(void) { return nope; }\n"),
                       ("c.c", "int c(void) { return also_nope; }\n" + "/* pad */\n" * 200)):
        (tmp_path / name).write_text(text)
    with pytest.raises(BuildError, match=r"failed on b\.c: .*nope"):
        compile_objects(load_target("x86"), tmp_path, ["a.c", "b.c", "c.c"])
    assert (tmp_path / "obj" / "a.o").is_file()
    # an error is never cached: fixed, the source compiles
    (tmp_path / "b.c").write_text("int b(void) { return 2; }\n")
    (tmp_path / "c.c").write_text("int c(void) { return 3; }\n")
    compile_objects(load_target("x86"), tmp_path, ["a.c", "b.c", "c.c"])
    assert fresh_cache.hits == 1     # a.c


def test_build_jobs(monkeypatch):
    monkeypatch.setenv("MLCC_BUILD_JOBS", "3")
    assert build_jobs() == 3
    monkeypatch.delenv("MLCC_BUILD_JOBS")
    assert build_jobs() == len(os.sched_getaffinity(0))
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("MLCC_BUILD_JOBS", bad)
        with pytest.raises(TargetError, match="MLCC_BUILD_JOBS"):
            build_jobs()


def test_the_key_follows_quoted_includes_and_refuses_side_outputs(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.c").write_text('#include "x.h"\n#include "y.h"\n#include <math.h>\n'
                                          '#if 0\n#include "absent.h"\n#endif\n')
    (tmp_path / "inc" / "x.h").write_text('#include "../inc/z.h"\n')
    (tmp_path / "src" / "y.h").write_text("/* next to x.c: found before -Iinc */\n")
    (tmp_path / "inc" / "y.h").write_text("/* shadowed */\n")
    (tmp_path / "inc" / "z.h").write_text("\n")
    deps = dict(objects._includes(tmp_path, "src/x.c", ["inc"]))
    assert sorted(deps) == ["?absent.h", "inc/x.h", "inc/z.h", "src/x.c", "src/y.h"]
    assert deps["?absent.h"] is None and deps["src/y.h"].startswith(b"/* next")
    target = load_target("x86")
    cmd = ["gcc", "-O2", "-Iinc", "-c", "src/x.c", "-o", "obj/src/x.o"]
    key = objects.object_key(target, tmp_path, "src/x.c", cmd)
    assert key == objects.object_key(target, tmp_path, "src/x.c", list(cmd))
    assert key != objects.object_key(target, tmp_path, "src/x.c", cmd[:1] + ["-O3"] + cmd[2:])
    (tmp_path / "inc" / "z.h").write_text("\n\n")
    assert key != objects.object_key(target, tmp_path, "src/x.c", cmd)
    for flag in ("-MD", "-fstack-usage", "--coverage", "-save-temps", "-include", "@args"):
        assert objects.object_key(target, tmp_path, "src/x.c", cmd + [flag]) is None


def test_the_cache_keeps_the_most_recent_objects_within_its_limit():
    cache = objects.ObjectCache(limit=10)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"       # a is now the most recent
    cache.put("c", b"1234")                # 12 bytes: b, the least recent, goes
    assert cache.get("b") is None and cache.get("a") and cache.get("c")
    cache.put("d", b"x" * 11)              # larger than the whole cache: not kept
    assert cache.get("d") is None
