"""The thread pool itself (runtime_c/src/mlcc_threadpool.c): every unit of every loop runs
exactly once, on a thread below the loop's max_threads, whatever the number of units against
the threads (fewer, equal, not a multiple, thousands) and however often the loops follow each
other; built with ThreadSanitizer where the compiler has it, so that a data race in the
range-and-steal protocol fails the test even when the counts come out right."""

import subprocess

import pytest

from util import RUNTIME

DRIVER = r"""
#include "mlcc_internal.h"
#include <stdio.h>

typedef struct { int *runs; int max_threads; int misplaced; } loop_check;

static void count(void *arg, int unit, int thread) {
    loop_check *c = (loop_check *)arg;
    if (thread < 0 || thread >= c->max_threads) __atomic_add_fetch(&c->misplaced, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->runs[unit], 1, __ATOMIC_RELAXED);
}

int main(void) {
    static int runs[5000];
    loop_check c = {runs, 0, 0};
    int threads, loop, i;
    for (threads = 2; threads <= 4; threads++) {
        mlcc_threadpool *pool;
        if (mlcc_threadpool_create(&pool, threads) != 0) return 3;
        for (loop = 0; loop < 3000; loop++) {
            const int units = 1 + (loop * 7919) % 4999;
            c.max_threads = 1 + loop % (threads + 1);
            for (i = 0; i < units; i++) runs[i] = 0;
            mlcc_threadpool_for(pool, count, &c, units, c.max_threads);
            for (i = 0; i < units; i++)
                if (runs[i] != 1) {
                    printf("%d threads, loop %d: unit %d of %d ran %d times\n", threads, loop, i,
                           units, runs[i]);
                    return 1;
                }
            if (c.misplaced) {
                printf("%d threads, loop %d: a unit ran on a thread >= max_threads\n", threads,
                       loop);
                return 2;
            }
        }
        mlcc_threadpool_destroy(pool);
    }
    puts("ok");
    return 0;
}
"""


def _build(tmp_path, sanitize):
    src = tmp_path / "driver.c"
    src.write_text(DRIVER)
    exe = tmp_path / ("driver_tsan" if sanitize else "driver")
    cmd = ["gcc", "-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread",
           *(["-fsanitize=thread"] if sanitize else []),
           f"-I{RUNTIME / 'include'}", f"-I{RUNTIME / 'src'}", str(src),
           str(RUNTIME / "src" / "mlcc_threadpool.c"), str(RUNTIME / "src" / "mlcc_runtime.c"),
           "-o", str(exe), "-lm"]
    built = subprocess.run(cmd, capture_output=True, text=True)
    return exe if built.returncode == 0 else built.stderr


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "tsan"])
def test_every_unit_runs_once_below_max_threads(tmp_path, sanitize):
    exe = _build(tmp_path, sanitize)
    if isinstance(exe, str):
        if sanitize:
            pytest.skip(f"no ThreadSanitizer here: {exe.strip().splitlines()[-1]}")
        pytest.fail(exe)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
