// fma_peak.c - the CPU's multiply-add peak, the compute limit of a prefill: 512-bit FMAs (VFMADD, f32) and, where the
// CPU has AVX512_BF16, VDPBF16PS (two bf16 products per lane), on T threads, 10 independent chains each.
// Prints GMAC/s (multiply-adds a second, all threads). A bf16 or f16 prefill that converts its weights to f32 and
// multiplies with FMAs cannot pass the first figure; kernels/bf16x16.h's VDPBF16PS kernels are bound by the second.
//   cc -O2 -march=native tools/bench/fma_peak.c -o /tmp/fma_peak -lpthread && /tmp/fma_peak [T]
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N_ITER 100000000L // chain steps per thread
static volatile float g_sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// 10 chains of op(acc, x, y), the accumulators kept in registers (the empty asm: no hoisting, no merging)
#define CHAINS(op, x, y)                                                                                              \
    __m512 a0 = _mm512_set1_ps(g_sink), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,    \
           a9 = a0;                                                                                                  \
    for (long it = 0; it < N_ITER / 10; it++) {                                                                      \
        a0 = op(a0, x, y), a1 = op(a1, x, y), a2 = op(a2, x, y), a3 = op(a3, x, y), a4 = op(a4, x, y);              \
        a5 = op(a5, x, y), a6 = op(a6, x, y), a7 = op(a7, x, y), a8 = op(a8, x, y), a9 = op(a9, x, y);              \
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),     \
                         "+v"(a8), "+v"(a9));                                                                        \
    }                                                                                                                \
    g_sink = _mm512_reduce_add_ps(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9);

static void *run_fma(void *arg) {
    (void)arg;
    const __m512 x = _mm512_set1_ps(g_sink + 0.5f), y = _mm512_set1_ps(g_sink * 0.25f);
    CHAINS(_mm512_fmadd_ps, x, y)
    return NULL;
}

#ifdef __AVX512BF16__
static void *run_dp(void *arg) {
    (void)arg;
    const __m512bh x = (__m512bh)_mm512_set1_epi16((short)(g_sink + 16256.0f)), y = (__m512bh)_mm512_set1_epi16(0x3800);
    CHAINS(_mm512_dpbf16_ps, x, y)
    return NULL;
}
#endif

static void run(const char *name, void *(*fn)(void *), int nt, double macs_per_step) {
    pthread_t th[64];
    const double t0 = now();
    for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, fn, NULL);
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    const double dt = now() - t0;
    printf("%-10s %2d threads: %7.1f GMAC/s\n", name, nt, (double)nt * N_ITER * macs_per_step / dt / 1e9);
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    if (nt < 1 || nt > 64) nt = 2;
    run("vfmadd512", run_fma, nt, 16);
#ifdef __AVX512BF16__
    run("vdpbf16ps", run_dp, nt, 32);
#else
    printf("vdpbf16ps: not built (no AVX512_BF16 in -march)\n");
#endif
    return 0;
}
