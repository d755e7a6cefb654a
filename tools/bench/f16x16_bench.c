// f16x16_bench.c - one thread's GFLOP/s of kvt_matmul_rows on f16 weights: the row-major f16 matrix (the kernels of
// matmul_avx2.c / gemm_avx2.c) against the same matrix repacked as f16_x16 (f16x16.h), in L2/L3-sized matrices.
//   cc -O2 -std=c11 -D_GNU_SOURCE -o build/f16x16_bench tools/bench/f16x16_bench.c build/libkvtier.a -lm -lpthread
//      and the Makefile's LDLIBS (e.g. -luring -ljansson -lmicrohttpd -lhiredis)
//   build/f16x16_bench [n=2048] [rows=2816] [tokens=128] [reps=5] [rounds=3]    (KVT_ISA=avx2 for the AVX2 kernels)
// Per round: best of reps calls of each layout (f16 with KVT_F16X16 off, then f16_x16), 2 * n * rows * tokens / time.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../src/kernels/f16.h"
#include "../../src/kernels/f16x16.h"
#include "../../src/kernels/matmul.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atol(argv[1]) : 2048, rows = argc > 2 ? atol(argv[2]) : 2816,
                  nt = argc > 3 ? atol(argv[3]) : 128;
    const int reps = argc > 4 ? atoi(argv[4]) : 5, rounds = argc > 5 ? atoi(argv[5]) : 3;
    if (n <= 0 || rows <= 0 || rows % 16 || nt <= 0 || reps <= 0) {
        fprintf(stderr, "f16x16_bench: n > 0, rows a multiple of 16, tokens > 0\n");
        return 2;
    }
    uint16_t *w = malloc((size_t)(rows * n) * 2), *wr = malloc((size_t)(rows * n) * 2), *x = malloc((size_t)(nt * n) * 2);
    float *y = malloc((size_t)(nt * rows) * 4);
    if (!w || !wr || !x || !y) return 1;
    srand(1);
    for (int64_t i = 0; i < rows * n; i++) w[i] = kvt_f32_to_f16((float)(rand() % 1000 - 500) * 1e-4f);
    for (int64_t i = 0; i < nt * n; i++) x[i] = kvt_f32_to_f16((float)(rand() % 1000 - 500) * 1e-3f);
    kvt_f16x16_pack(w, wr, rows, n);
    printf("isa %s, n %lld, rows %lld, tokens %lld, one thread\n", kvt_isa_name(kvt_kernels_isa()), (long long)n,
           (long long)rows, (long long)nt);
    for (int r = 0; r < rounds; r++) {
        double g[2];
        for (int l = 0; l < 2; l++) {
            // l = 0: the f16 kernels in their own (lane-split) order; with f16_x16 on, kvt_matmul_rows would run f16
            // rows in the f16_x16 order on panels packed on the fly (matmul.c)
            kvt_f16x16_set_enabled(l);
            double best = 1e30;
            for (int i = 0; i < reps; i++) {
                const double t0 = now();
                kvt_matmul_rows(l ? KVT_TYPE_F16_X16 : KVT_TYPE_F16, n, l ? (const void *)wr : w, 0, rows, x, nt, y, rows);
                const double d = now() - t0;
                if (d < best) best = d;
            }
            g[l] = 2.0 * (double)n * (double)rows * (double)nt / best * 1e-9;
        }
        printf("round %d: f16 %.1f GFLOP/s, f16_x16 %.1f GFLOP/s (%.2fx)\n", r + 1, g[0], g[1], g[1] / g[0]);
    }
    free(w), free(wr), free(x), free(y);
    return 0;
}
