/* Classifies 8x8 digits with the compiled digits CNN, from plain C.
 *
 *   mlcc compile examples/digits/digits_cnn.onnx -o build/digits --name digits
 *   cc -O2 -Ibuild/digits -Ibuild/digits/runtime/include examples/digits/main.c \
 *      -Lbuild/digits -lmodel -Wl,-rpath,build/digits -o build/digits_demo
 *   build/digits_demo build/digits/weights.bin digits.f32
 *
 * digits.f32 holds N images of 64 float32 pixels (0..1). The program owns all memory: it
 * reads the weights into an aligned buffer and gives the model a static arena. */
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

static unsigned char arena[DIGITS_ARENA_SIZE] __attribute__((aligned(DIGITS_ARENA_ALIGN)));

static void *read_file(const char *path, size_t *size, size_t align) {
    FILE *f = fopen(path, "rb");
    void *buf = NULL;
    long n;
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        size_t rounded = ((size_t)n + align - 1) / align * align;
        buf = aligned_alloc(align, rounded ? rounded : align);
        if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *size = (size_t)n;
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    size_t weights_size = 0, pixels_size = 0, i;
    void *weights;
    float *pixels;
    mlcc_context ctx;
    int status;

    if (argc != 3) {
        fprintf(stderr, "usage: %s weights.bin digits.f32\n", argv[0]);
        return 2;
    }
    weights = read_file(argv[1], &weights_size, MLCC_WEIGHTS_ALIGN);
    pixels = read_file(argv[2], &pixels_size, 64);
    if (weights == NULL || pixels == NULL) {
        fprintf(stderr, "cannot read %s or %s\n", argv[1], argv[2]);
        return 1;
    }
    status = digits_init(&ctx, weights, weights_size, arena, sizeof arena);
    if (status != MLCC_OK) {
        fprintf(stderr, "init: %s\n", mlcc_status_string(status));
        return 1;
    }
    for (i = 0; i < pixels_size / (DIGITS_INPUT_INPUT_SIZE * sizeof(float)); i++) {
        float logits[DIGITS_OUTPUT_LOGITS_SIZE];
        int best = 0, k;
        status = digits_run(&ctx, pixels + i * DIGITS_INPUT_INPUT_SIZE, logits);
        if (status != MLCC_OK) {
            fprintf(stderr, "run: %s\n", mlcc_status_string(status));
            return 1;
        }
        for (k = 1; k < (int)DIGITS_OUTPUT_LOGITS_SIZE; k++)
            if (logits[k] > logits[best]) best = k;
        printf("%d%s", best, i % 10 == 9 ? "\n" : " ");
    }
    free(weights);
    free(pixels);
    return 0;
}
