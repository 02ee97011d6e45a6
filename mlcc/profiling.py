"""Per-kernel-call timers for a compiled model: a measuring copy of an output folder whose
model.c times every kernel call (CLOCK_MONOTONIC and the caller's CPU time, summed into a
static array read through mlcc_prof(); with -DMLCC_POOL_STATS, the thread pool's statistics
too). A measuring build only, never shipped: bench/profile_layers.py prints it per layer, and
`mlcc compile --tune` (tuning.py) times the convolution variants with it."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# a kernel call, or one whose status is checked (`status = mlcc_f32_recurrent(...);`), at
# any depth of the run function's blocks (a run-time If, a loop, a range build's size class)
CALL = re.compile(r"^ +(?:status = )?(mlcc_[a-z0-9_]+)\((?:&(p_\w+))?")
RUN = re.compile(r"^int \w+_run\(")
FIELDS = 10  # per call: wall, caller CPU, then (pool stats) units' CPU on the caller and on
             # workers, the caller's wait (wall, CPU), units on the caller, on workers, the
             # workers' delay from a loop's start to their first unit, and their sleeps
TIMER = """#include <time.h>
static double mlcc_prof_t[4096 * 10];
static double mlcc_prof_now(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
#ifdef MLCC_POOL_STATS
void mlcc_threadpool_stats(mlcc_threadpool *pool, double *out);
#endif
static void mlcc_prof_pool(double *f, mlcc_threadpool *pool) {
#ifdef MLCC_POOL_STATS
    double s[7 * MLCC_MAX_THREADS];
    int t;
    if (pool == NULL) return;
    mlcc_threadpool_stats(pool, s);
    f[2] += s[0];
    f[4] += s[2];
    f[5] += s[3];
    f[6] += s[1];
    for (t = 1; t < mlcc_threadpool_size(pool); t++) {
        f[3] += s[7 * t];
        f[7] += s[7 * t + 1];
        f[8] += s[7 * t + 5];
        f[9] += s[7 * t + 6];
    }
#else
    (void)f;
    (void)pool;
#endif
}
__attribute__((visibility("default"))) double *mlcc_prof(void) { return mlcc_prof_t; }
"""


def statements(source: str) -> list[str]:
    """model.c's lines, except that a kernel call wrapped over several lines is one item (its
    lines joined by newlines), so that the call is instrumented as a whole."""
    out: list[str] = []
    cur: list[str] | None = None
    for line in source.split("\n"):
        if cur is not None:
            cur.append(line)
            if line.rstrip().endswith(";"):
                out.append("\n".join(cur))
                cur = None
        elif CALL.match(line) and not line.rstrip().endswith(";"):
            cur = [line]
        else:
            out.append(line)
    return out + (cur or [])


def instrument(folder: Path, into: Path,
               pool_stats: bool = False) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Copies folder to into with every kernel call of model.c timed; rebuilds it."""
    shutil.copytree(folder, into)
    calls, lines = [], []
    source = (into / "model.c").read_text()
    in_run = False
    for line in statements(source):
        in_run = bool(RUN.match(line)) or (in_run and line != "}")
        m = CALL.match(line)
        if in_run and m and line.rstrip().endswith(";") and len(calls) < 4096:
            f = f"mlcc_prof_t + {len(calls) * FIELDS}"
            lines += ["    { double mlcc_prof_t0 = mlcc_prof_now(CLOCK_MONOTONIC), "
                      "mlcc_prof_c0 = mlcc_prof_now(CLOCK_THREAD_CPUTIME_ID);",
                      f"    mlcc_prof_pool({f}, ctx->pool);", line,
                      f"    ({f})[0] += mlcc_prof_now(CLOCK_MONOTONIC) - mlcc_prof_t0;",
                      f"    ({f})[1] += mlcc_prof_now(CLOCK_THREAD_CPUTIME_ID) - mlcc_prof_c0;",
                      f"    mlcc_prof_pool({f}, ctx->pool); }}"]
            calls.append((m.group(1), m.group(2) or ""))
        else:
            lines.append(line)
    text = "\n".join(lines).replace('#include "model.h"\n', '#include "model.h"\n' + TIMER, 1)
    text = "#define _POSIX_C_SOURCE 200112L\n" + text
    (into / "model.c").write_text(text)
    make = ["make", "-s", "-B", "-C", str(into)]
    if pool_stats:
        cppflags = re.search(r"^CPPFLAGS = (.*)$", (into / "Makefile").read_text(), re.M)
        make.append(f"CPPFLAGS={cppflags.group(1) if cppflags else ''} -DMLCC_POOL_STATS")
    subprocess.run(make, check=True)
    # each struct to its own closing line ("};" ends a line only there; a one-line struct
    # such as `{.count = 122880};` too, which "\n};" ran past into the next struct)
    params = dict(re.findall(r"^static const \w+ (p_\w+) = \{(.*?)\};$", text, re.S | re.M))
    return calls, params
