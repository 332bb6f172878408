/* Writing a fresh buffer against writing in place, the cost behind an optimizer update
 * into a new variable value (BENCHMARKS.md, "Fresh buffers are expensive to write").
 *
 *   gcc -O2 -march=native -o /tmp/fresh bench/fresh_buffer_write.c
 *   taskset -c 0 /tmp/fresh MODE [JUNK_KB] [OFFSET_FLOATS]
 *
 * MODE 0: out = v - s*g into another buffer; 1: the same with streaming stores (AVX-512);
 * 2: v = v - s*g in place. g is written just before (as a gradient is), JUNK_KB of other
 * memory between repetitions (default 8192), `out` offset by OFFSET_FLOATS. Prints the
 * update's time and that of a read of its result right after (a CheckNumerics). */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define N (784 * 256)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int mode = argc > 1 ? atoi(argv[1]) : 0;
    size_t junk_kb = argc > 2 ? (size_t)atoi(argv[2]) : 8192;
    int off = argc > 3 ? atoi(argv[3]) : 0;
    float *v = aligned_alloc(64, N * 4), *g = aligned_alloc(64, N * 4);
    float *out = (float *)aligned_alloc(64, N * 4 + 8192) + off;
    char *junk = malloc(junk_kb * 1024 + 1);
    for (int i = 0; i < N; i++) v[i] = i, g[i] = 2, out[i] = 0;
    double update = 0, check = 0;
    float acc = 0;
    const int reps = 300;
    for (int r = 0; r < reps; r++) {
        memset(junk, r, junk_kb * 1024);
        for (int i = 0; i < N; i++) g[i] = g[i] * 0.5f + 1;
        double t0 = now();
        if (mode == 0) for (int i = 0; i < N; i++) out[i] = v[i] - 0.01f * g[i];
#ifdef __AVX512F__
        if (mode == 1 && off % 16 == 0) {
            for (int i = 0; i < N; i += 16)
                _mm512_stream_ps(out + i, _mm512_sub_ps(_mm512_load_ps(v + i),
                                                        _mm512_mul_ps(_mm512_set1_ps(0.01f), _mm512_load_ps(g + i))));
            _mm_sfence();
        }
#endif
        if (mode == 2) for (int i = 0; i < N; i++) v[i] = v[i] - 0.01f * g[i];
        double t1 = now();
        const float *res = mode == 2 ? v : out;
        float lanes[16] = {0};
        for (int i = 0; i < N; i += 16)
            for (int k = 0; k < 16; k++) lanes[k] += res[i + k];
        for (int k = 0; k < 16; k++) acc += lanes[k];
        check += now() - t1;
        update += t1 - t0;
        if (mode != 2) { float *t = v; v = out; out = t; }
    }
    printf("mode %d, junk %zu KB, offset %d: update %.1f us, read after %.1f us (%d)\n", mode, junk_kb, off,
           update / reps * 1e6, check / reps * 1e6, acc != 0);
    return 0;
}
