/* Runs a compiled streaming model chunk by chunk from C, the recurrent state carried between
 * calls in place: the model's state output NAME_next is given the very memory of its state
 * input NAME (the C API allows an output to be the same buffer as an input, docs/c-api.md),
 * so nothing is copied between calls.
 *
 *   mlcc compile vad.onnx -o build/vad --name vad --bind sr=16000
 *   cc -O2 -DMODEL=vad -Ibuild/vad -Ibuild/vad/runtime/include examples/streaming/stream.c \
 *      -Lbuild/vad -lmodel -Wl,-rpath,build/vad -o build/vad_stream
 *   build/vad_stream build/vad/weights.bin chunks.bin outputs.bin [CALLS]
 *
 * chunks.bin holds, chunk after chunk, the model's other inputs in model order (raw bytes);
 * outputs.bin receives every output of every chunk, in model order. The state starts at zero.
 * With CALLS, the first chunk is also run CALLS more times and the mean time of a call is
 * printed. Everything is allocated once, before the first call; a call allocates nothing. */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define FN(suffix) CAT(MODEL, suffix)

static void *zeroed(size_t size, size_t align) {
    void *p = NULL;
    if (align < sizeof(void *)) align = sizeof(void *);
    if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
    memset(p, 0, size ? size : 1);
    return p;
}

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    void *buf = NULL;
    long n;
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = zeroed((size_t)n, MLCC_WEIGHTS_ALIGN);
        if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *size = (size_t)n;
    }
    fclose(f);
    return buf;
}

/* The output named "<input>_next", or -1. */
static int next_of(const mlcc_model_info *info, const char *input) {
    int j;
    size_t n = strlen(input);
    for (j = 0; j < info->num_outputs; j++) {
        const char *o = info->outputs[j].name;
        if (strncmp(o, input, n) == 0 && strcmp(o + n, "_next") == 0) return j;
    }
    return -1;
}

int main(int argc, char **argv) {
    const mlcc_model_info *info = FN(_model_info)();
    void *inputs[16], *outputs[16];
    size_t weights_size = 0, chunks_size = 0, chunk_bytes = 0, offset;
    unsigned char *chunks;
    void *weights, *arena;
    mlcc_context ctx;
    FILE *out;
    int i, j, status;
    long calls = argc > 4 ? atol(argv[4]) : 0;

    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s weights.bin chunks.bin outputs.bin [CALLS]\n", argv[0]);
        return 2;
    }
    if (info->num_inputs > 16 || info->num_outputs > 16) return 2;
    weights = read_file(argv[1], &weights_size);
    chunks = read_file(argv[2], &chunks_size);
    arena = zeroed(info->arena_size, info->arena_align);
    if (weights == NULL || chunks == NULL || arena == NULL) {
        fprintf(stderr, "cannot read %s or %s\n", argv[1], argv[2]);
        return 1;
    }
    status = FN(_init)(&ctx, weights, weights_size, arena, info->arena_size);
    if (status != MLCC_OK) {
        fprintf(stderr, "init: %s\n", mlcc_status_string(status));
        return 1;
    }
    for (j = 0; j < info->num_outputs; j++) outputs[j] = zeroed(info->outputs[j].size_bytes, 64);
    for (i = 0; i < info->num_inputs; i++) {
        j = next_of(info, info->inputs[i].name);
        if (j >= 0) {
            inputs[i] = outputs[j];                   /* the state: in place */
        } else {
            inputs[i] = zeroed(info->inputs[i].size_bytes, 64);
            chunk_bytes += info->inputs[i].size_bytes;
        }
    }
    out = fopen(argv[3], "wb");
    if (out == NULL || chunk_bytes == 0 || chunks_size % chunk_bytes != 0) {
        fprintf(stderr, "cannot write %s, or %s is not a whole number of chunks\n", argv[3],
                argv[2]);
        return 1;
    }
    for (offset = 0; offset < chunks_size; offset += chunk_bytes) {
        size_t at = offset;
        for (i = 0; i < info->num_inputs; i++) {
            if (next_of(info, info->inputs[i].name) >= 0) continue;
            memcpy(inputs[i], chunks + at, info->inputs[i].size_bytes);
            at += info->inputs[i].size_bytes;
        }
        status = FN(_run_v)(&ctx, (const void *const *)inputs, outputs);
        if (status != MLCC_OK) {
            fprintf(stderr, "run: %s\n", mlcc_status_string(status));
            return 1;
        }
        for (j = 0; j < info->num_outputs; j++)
            fwrite(outputs[j], 1, info->outputs[j].size_bytes, out);
    }
    fclose(out);
    if (calls > 0) {
        struct timespec t0, t1;
        double best = 1e30;
        int round;
        for (round = 0; round < 5; round++) {
            long k;
            double us;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (k = 0; k < calls; k++) FN(_run_v)(&ctx, (const void *const *)inputs, outputs);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3)
                 / (double)calls;
            if (us < best) best = us;
        }
        printf("%s: %.2f us per call (best of 5 rounds of %ld calls)\n", info->name, best, calls);
    }
    return 0;
}
