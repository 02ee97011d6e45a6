/*
 * mlcc_firmware: the firmware main that runs a compiled model on a Cortex-M core under QEMU
 * (copied into the model folder as firmware.c for the cortex-m* targets, linked with startup.c,
 * firmware.ld and libmodel.a into firmware.elf).
 *
 *     qemu-system-arm -machine mps2-an386 -nographic -kernel firmware.elf \
 *         -semihosting-config enable=on,target=native,arg=firmware,arg=IN_0,...,arg=OUT_0,...
 *     (arguments: [--runs N] IN_0 ... IN_{n-1} OUT_0 ... OUT_{m-1})
 *
 * It is the test harness of runtime_c/harness/mlcc_harness.c for a machine without an operating
 * system: the same raw little-endian files in and out, the same --runs N (the model runs N times
 * before the outputs are written: an instruction count of N = 2 minus N = 1 is one inference),
 * the same exit status (0 success, 1 usage or a file, 2 a model status, with "harness: init
 * failed: ..." or "harness: run failed: ..." on stderr). The weights are the const array of
 * weights.c in flash (<prefix>_init_embedded); the arena and the input/output buffers are static
 * arrays in their own sections (.mlcc_arena, .mlcc_io in firmware.ld), sized by the build:
 * -DMLCC_MODEL=<prefix> -DMLCC_FW_ARENA_SIZE=<bytes> -DMLCC_FW_IO_SIZE=<bytes>.
 *
 * Files, the command line, messages and the exit status go through Arm semihosting calls
 * (BKPT 0xAB), made here directly: no C library I/O, no heap, so the RAM the build reports is
 * all the RAM the firmware uses. The model library itself makes no call at all.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mlcc_runtime.h"

#if !defined(MLCC_MODEL) || !defined(MLCC_FW_ARENA_SIZE) || !defined(MLCC_FW_IO_SIZE)
#error "build with -DMLCC_MODEL=<prefix> -DMLCC_FW_ARENA_SIZE=N -DMLCC_FW_IO_SIZE=N (Makefile)"
#endif

#define MLCC_PASTE_(a, b) a##b
#define MLCC_PASTE(a, b) MLCC_PASTE_(a, b)
#define MODEL_FN(suffix) MLCC_PASTE(MLCC_MODEL, suffix)

const mlcc_model_info *MODEL_FN(_model_info)(void);
int MODEL_FN(_init_embedded)(mlcc_context *ctx, void *arena, size_t arena_size);
int MODEL_FN(_run_v)(const mlcc_context *ctx, const void *const *inputs, void *const *outputs);
void mlcc_fault(unsigned number);
void mlcc_layer_mark(void);

enum { EXIT_USAGE = 1, EXIT_STATUS = 2, EXIT_FAULT = 3 };
enum { IO_ALIGN = 16, MAX_ARGS = 64, CMDLINE_BYTES = 1024 };

/* Semihosting operations (Arm, "Semihosting for AArch32 and AArch64", version 2). */
enum {
    SYS_OPEN = 0x01, SYS_CLOSE = 0x02, SYS_WRITE = 0x05, SYS_READ = 0x06, SYS_FLEN = 0x0C,
    SYS_GET_CMDLINE = 0x15, SYS_EXIT_EXTENDED = 0x20
};
enum { OPEN_RB = 1, OPEN_WB = 5, OPEN_APPEND = 8 };
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

static unsigned char arena[MLCC_FW_ARENA_SIZE]
    __attribute__((section(".bss.mlcc_arena"), aligned(64)));
static unsigned char io[MLCC_FW_IO_SIZE] __attribute__((section(".bss.mlcc_io"), aligned(64)));
static char cmdline[CMDLINE_BYTES];

static int semihost(int op, const void *arg) {
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static void sh_exit(int code) {
    const uint32_t args[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
    semihost(SYS_EXIT_EXTENDED, args);
    for (;;) {
    }
}

static int sh_open(const char *path, int mode) {
    const uintptr_t args[3] = {(uintptr_t)path, (uintptr_t)mode, strlen(path)};
    return semihost(SYS_OPEN, args);
}

static int sh_close(int handle) {
    const uintptr_t args[1] = {(uintptr_t)handle};
    return semihost(SYS_CLOSE, args);
}

/* Semihosting READ and WRITE return the number of bytes NOT transferred. */
static size_t sh_transfer(int op, int handle, const void *buf, size_t size) {
    const uintptr_t args[3] = {(uintptr_t)handle, (uintptr_t)buf, size};
    return size - (size_t)semihost(op, args);
}

/* One line on stderr, the concatenation of the strings up to a NULL. QEMU maps ":tt" opened
 * for appending to its standard error. */
static void say(const char *part, ...) {
    static int err = -1;
    va_list ap;
    if (err < 0) err = sh_open(":tt", OPEN_APPEND);
    if (err < 0) return;
    va_start(ap, part);
    for (; part != NULL; part = va_arg(ap, const char *))
        (void)sh_transfer(SYS_WRITE, err, part, strlen(part));
    va_end(ap);
    (void)sh_transfer(SYS_WRITE, err, "\n", 1);
}

static const char *number(unsigned long n, char *buf, size_t size) {
    char *p = buf + size - 1;
    *p = '\0';
    do {
        *--p = (char)('0' + n % 10);
        n /= 10;
    } while (n != 0 && p > buf);
    return p;
}

static int read_exact(const char *path, void *dst, size_t size) {
    char num[24];
    int h = sh_open(path, OPEN_RB), ok;
    if (h < 0) {
        say("harness: cannot open ", path, NULL);
        return 0;
    }
    {
        const uintptr_t args[1] = {(uintptr_t)h};
        ok = semihost(SYS_FLEN, args) == (int)size &&
             sh_transfer(SYS_READ, h, dst, size) == size;
    }
    (void)sh_close(h);
    if (!ok) {
        say("harness: ", path, " must hold exactly ", number((unsigned long)size, num, sizeof num),
            " bytes", NULL);
    }
    return ok;
}

static int write_all(const char *path, const void *src, size_t size) {
    int h = sh_open(path, OPEN_WB), ok;
    if (h < 0) {
        say("harness: cannot create ", path, NULL);
        return 0;
    }
    ok = sh_transfer(SYS_WRITE, h, src, size) == size;
    ok = sh_close(h) == 0 && ok;
    if (!ok) say("harness: cannot write ", path, NULL);
    return ok;
}

/* The semihosting command line split at spaces (the runner's paths hold none). */
static int get_args(char **argv) {
    uintptr_t args[2];
    int argc = 0;
    char *p;
    args[0] = (uintptr_t)cmdline;
    args[1] = sizeof cmdline - 1;
    if (semihost(SYS_GET_CMDLINE, args) != 0) return 0;
    cmdline[args[1] < sizeof cmdline ? args[1] : sizeof cmdline - 1] = '\0';
    for (p = cmdline; *p != '\0' && argc < MAX_ARGS;) {
        while (*p == ' ') *p++ = '\0';
        if (*p == '\0') break;
        argv[argc++] = p;
        while (*p != '\0' && *p != ' ') p++;
    }
    return argc;
}

static void report_status(const char *stage, int status) {
    char num[24];
    say("harness: ", stage, mlcc_status_string(status), " (status ",
        number((unsigned long)status, num, sizeof num), ")", NULL);
}

/* Called before the first and after every kernel call of <prefix>_run by the model.c of the
 * per-layer counting build of `mlcc bench` (mlcc/targets/firmware.py, instrument_layers): the
 * instruction counter notes the count each time the core reaches this address. Other builds
 * do not call it, and the linker drops it (--gc-sections). */
__attribute__((noinline)) void mlcc_layer_mark(void) { __asm__ volatile("" ::: "memory"); }

void mlcc_fault(unsigned number_) {
    char num[24];
    say("harness: the core took exception ", number((unsigned long)number_, num, sizeof num),
        " (a fault: the firmware stops)", NULL);
    sh_exit(EXIT_FAULT);
}

int main(void) {
    const mlcc_model_info *info = MODEL_FN(_model_info)();
    const int ni = info->num_inputs, no = info->num_outputs;
    char *argv[MAX_ARGS];
    void *bufs[MAX_ARGS];
    int argc = get_args(argv), first = 1, i, status;
    long runs = 1, r;
    size_t used = 0;
    mlcc_context ctx;

    if (argc >= first + 2 && strcmp(argv[first], "--runs") == 0) {
        char *end = argv[first + 1];
        runs = 0;
        while (*end >= '0' && *end <= '9' && runs <= 1000000) runs = runs * 10 + (*end++ - '0');
        if (end == argv[first + 1] || *end != '\0' || runs < 1 || runs > 1000000) {
            say("harness: --runs needs a count from 1 to 1000000, not ", argv[first + 1], NULL);
            sh_exit(EXIT_USAGE);
        }
        first += 2;
    }
    if (argc - first != ni + no || ni + no > MAX_ARGS) {
        say("usage: firmware [--runs N] IN... OUT... (one file per input, then per output, "
            "in model order)", NULL);
        sh_exit(EXIT_USAGE);
    }
    for (i = 0; i < ni + no; i++) {
        const mlcc_tensor_info *t = i < ni ? &info->inputs[i] : &info->outputs[i - ni];
        if (t->size_bytes > MLCC_FW_IO_SIZE - used) {
            say("harness: the inputs and outputs do not fit the firmware's I/O buffer", NULL);
            sh_exit(EXIT_USAGE);
        }
        bufs[i] = io + used;
        used += (t->size_bytes + IO_ALIGN - 1) / IO_ALIGN * IO_ALIGN;
        if (used > MLCC_FW_IO_SIZE) used = MLCC_FW_IO_SIZE;
    }
    for (i = 0; i < ni; i++)
        if (!read_exact(argv[first + i], bufs[i], info->inputs[i].size_bytes))
            sh_exit(EXIT_USAGE);
    status = MODEL_FN(_init_embedded)(&ctx, arena, sizeof arena);
    if (status != MLCC_OK) {
        report_status("init failed: ", status);
        sh_exit(EXIT_STATUS);
    }
    for (r = 0; r < runs; r++) {
        status = MODEL_FN(_run_v)(&ctx, (const void *const *)bufs, bufs + ni);
        if (status != MLCC_OK) {
            report_status("run failed: ", status);
            sh_exit(EXIT_STATUS);
        }
    }
    for (i = 0; i < no; i++)
        if (!write_all(argv[first + ni + i], bufs[ni + i], info->outputs[i].size_bytes))
            sh_exit(EXIT_USAGE);
    sh_exit(0);
    return 0;
}
