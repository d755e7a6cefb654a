// test_bf16x16.c - bf16_x16 (src/kernels/bf16x16.h): the repacking (pack, unpack, row_to_float against bf16's) and
// kvt_matmul_rows on every ISA, and on AVX-512 with VDPBF16PS and without, bit for bit against the order of
// bf16x16.h written out here (an fmaf pair per element pair, the odd element first, under MXCSR's FTZ and DAZ), for
// the repacked matrix and the same rows as bf16 (packed into panels per call by matmul.c), a row range cut anywhere,
// every token alone and in the batch. The "tiny" cases put the weights and activations where the products and the
// running sums cross 2^-126 (denormal inputs, results flushed, ties at the boundary), so that a kernel taking another
// order, another rounding of the flush or an FMA outside the mode differs. Odd n: the plain rows alone (never
// repacked; a zero element n). The result near the exact dot (normal data).
// int test_bf16x16(void) prints one line per case ("ok NAME" / "FAIL NAME: detail") and returns the number of
// failures (called by test_kernels.c).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <xmmintrin.h>
#endif

#include "../src/kernels/bf16x16.h"
#include "../src/kernels/f16.h"
#include "../src/kernels/matmul.h"
#include "../src/kernels/quant.h"

static int g_fail;

#include "test_check.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

// A bf16 of the given exponent field (0: denormal or zero), random sign and mantissa.
static uint16_t bf_exp(int e) { return (uint16_t)((rnd() & 1) << 15 | (uint32_t)e << 7 | (rnd() & 0x7f)); }

// The order of bf16x16.h on plain rows, written out: the pair (2j + 1, 2j) per step, MXCSR FTZ | DAZ around it.
__attribute__((noinline)) static void chain(const uint16_t *w, const uint16_t *x, int64_t n, float *out) {
    float acc = 0.0f;
    for (int64_t k = 0; k < n; k += 2) {
        const float wo = k + 1 < n ? kvt_bf16_to_f32(w[k + 1]) : 0.0f, xo = k + 1 < n ? kvt_bf16_to_f32(x[k + 1]) : 0.0f;
        acc = fmaf(wo, xo, acc);
        acc = fmaf(kvt_bf16_to_f32(w[k]), kvt_bf16_to_f32(x[k]), acc);
    }
    *out = acc;
}
__attribute__((noinline)) static unsigned mode_on(void) {
#ifdef __SSE2__
    const unsigned m = _mm_getcsr();
    _mm_setcsr(m | 0x8040u);
    return m;
#else
    return 0;
#endif
}
__attribute__((noinline)) static void mode_off(unsigned m) {
#ifdef __SSE2__
    _mm_setcsr(m);
#else
    (void)m;
#endif
}

// kind 0: normal data; 1: tiny (products and sums around 2^-126, denormals); 2: both mixed per element
static void test_case(int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1, int kind) {
    char name[160];
    snprintf(name, sizeof name, "bf16x16_n%lld_rows%lld_tok%lld_r%lld-%lld%s", (long long)n, (long long)n_rows,
             (long long)n_tok, (long long)r0, (long long)r1, kind == 1 ? "_tiny" : kind == 2 ? "_mixed" : "");
    const kvt_repack_ops *rp = kvt_type_repack(KVT_TYPE_BF16);
    if (!rp || rp->to != KVT_TYPE_BF16_X16 || rp->row_align != 16 || kvt_type_repacked_from(KVT_TYPE_BF16_X16) != KVT_TYPE_BF16 ||
        kvt_type_ops_get(KVT_TYPE_BF16_X16)->vec_dot_type != KVT_TYPE_BF16) {
        CHECK(name, false, "no bf16 -> bf16_x16 repacking");
        return;
    }
    const int64_t ldy = n_rows + 5, pn = n + (n & 1);
    uint16_t *w = malloc((size_t)(n_rows * n) * 2), *wr = malloc((size_t)((n_rows + 15) / 16 * 16 * pn) * 2),
             *wu = malloc((size_t)(n_rows * n) * 2), *x = malloc((size_t)(n_tok * n) * 2);
    float *want = malloc((size_t)(n_tok * ldy) * 4), *y = malloc((size_t)(n_tok * ldy) * 4),
          *yu = malloc((size_t)(n_tok * ldy) * 4), *y1 = malloc((size_t)ldy * 4), *f = malloc((size_t)n * 4);
    if (!w || !wr || !wu || !x || !want || !y || !yu || !y1 || !f) {
        g_fail++;
        return;
    }
    for (int64_t i = 0; i < n_rows * n + n_tok * n; i++) {
        uint16_t v;
        const int k = kind == 2 ? (int)(rnd() % 2) : kind;
        if (k == 0) v = kvt_f32_to_bf16(((float)(rnd() % 20001) - 10000.0f) * (i < n_rows * n ? 5e-6f : 1e-4f));
        else v = rnd() % 16 == 0 ? bf_exp(0) : bf_exp(i < n_rows * n ? 62 + (int)(rnd() % 4) : 61 + (int)(rnd() % 4));
        if (i < n_rows * n) w[i] = v;
        else x[i - n_rows * n] = v;
    }
    int64_t bad = 0;
    if (n % 2 == 0) {
        rp->pack(w, wr, n_rows - n_rows % 16, n);
        kvt_bf16x16_pack_rows(w, (size_t)(2 * n), n_rows, n, wr); // the last panel padded (rows past n_rows zero)
        rp->unpack(wr, wu, 0, n_rows, n);
        bad += memcmp(w, wu, (size_t)(n_rows * n) * 2) != 0;
        for (int64_t r = 0; r < n_rows; r++) {
            kvt_matrix_row_to_float(KVT_TYPE_BF16_X16, wr, r, n, f);
            for (int64_t k = 0; k < n; k++) bad += memcmp(&f[k], &(float){kvt_bf16_to_f32(w[r * n + k])}, 4) != 0;
        }
    }
    const unsigned m = mode_on();
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_rows; r++) chain(w + r * n, x + t * n, n, &want[t * ldy + r]);
    mode_off(m);
    double worst = 0;
    if (kind == 0)
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < n_rows; r++) {
                double exact = 0, mag = 0;
                for (int64_t k = 0; k < n; k++) {
                    const double p = (double)kvt_bf16_to_f32(w[r * n + k]) * kvt_bf16_to_f32(x[t * n + k]);
                    exact += p, mag += fabs(p);
                }
                const double e = fabs(want[t * ldy + r] - exact) / (mag + 1e-30);
                if (!(e <= worst)) worst = e;
            }
    int64_t diff = 0, flushed = 0;
    for (int64_t i = 0; i < n_tok * ldy; i++) flushed += want[i] == 0.0f;
    const bool dp0 = kvt_bf16x16_dp_ok();
    for (int isa = KVT_ISA_SCALAR; isa <= (int)kvt_kernels_isa(); isa++)
        for (int dp = 0; dp < (isa == KVT_ISA_AVX512 && dp0 ? 2 : 1); dp++) {
            kvt_bf16x16_set_dp(dp == 1);
            for (int pass = n % 2 == 0 ? 0 : 1; pass < 2; pass++) { // 0: the repacked matrix, 1: the plain rows
                const kvt_type wt = pass ? KVT_TYPE_BF16 : KVT_TYPE_BF16_X16;
                const void *wm = pass ? (const void *)w : (const void *)wr;
                for (int64_t i = 0; i < n_tok * ldy; i++) yu[i] = -12345.f;
                kvt_matmul_rows_isa((kvt_isa)isa, wt, n, wm, r0, r1, x, n_tok, yu, ldy);
                for (int64_t t = 0; t < n_tok; t++) {
                    for (int64_t i = 0; i < ldy; i++) y1[i] = -12345.f;
                    kvt_matmul_rows_isa((kvt_isa)isa, wt, n, wm, r0, r1, x + t * n, 1, y1, ldy);
                    for (int64_t r = 0; r < ldy; r++) {
                        const float wv = r >= r0 && r < r1 ? want[t * ldy + r] : -12345.f;
                        diff += memcmp(&yu[t * ldy + r], &wv, 4) != 0;
                        diff += memcmp(&y1[r], &wv, 4) != 0;
                    }
                }
            }
        }
    kvt_bf16x16_set_dp(dp0);
    CHECK(name, bad == 0 && diff == 0 && worst < 1e-5,
          "%lld repack errors, %lld outputs differ from the chain (%lld of its outputs zero), worst rel %.3g", (long long)bad,
          (long long)diff, (long long)flushed, worst);
    free(w), free(wr), free(wu), free(x), free(want), free(y), free(yu), free(y1), free(f);
}

int test_bf16x16(void) {
    g_fail = 0;
    const int on = kvt_bf16x16_set_enabled(1); // the kernels whatever KVT_BF16X16 says for models
    // tails of panels (the GEMV's 8, 6, 4, 3, 2 vectors at once), every tile width (1-12 tokens), balanced tiles past
    // it, strips (n 4096: 2 panels a strip on AVX-512), cut ranges, odd n (plain rows only)
    static const int64_t shp[][5] = {{64, 16, 1, 0, 16},     {300, 80, 1, 0, 80},    {2048, 144, 1, 3, 141}, {130, 208, 2, 0, 208},
                                     {256, 96, 3, 1, 95},    {520, 64, 4, 5, 61},    {96, 48, 5, 0, 48},     {96, 112, 6, 17, 111},
                                     {200, 48, 7, 0, 48},    {64, 80, 8, 2, 78},     {128, 48, 9, 0, 48},    {66, 32, 10, 1, 31},
                                     {100, 64, 11, 0, 64},   {256, 272, 12, 0, 272}, {520, 64, 13, 5, 61},   {1000, 48, 30, 16, 47},
                                     {4096, 96, 25, 0, 96},  {301, 37, 3, 1, 36},    {33, 20, 14, 0, 20},    {2, 16, 1, 0, 16}};
    for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++) test_case(shp[i][0], shp[i][1], shp[i][2], shp[i][3], shp[i][4], 0);
    static const int64_t tiny[][5] = {{64, 48, 1, 0, 48}, {512, 96, 13, 1, 95}, {130, 32, 4, 0, 32}, {77, 21, 5, 2, 19}};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
        test_case(tiny[i][0], tiny[i][1], tiny[i][2], tiny[i][3], tiny[i][4], 1);
        test_case(tiny[i][0], tiny[i][1], tiny[i][2], tiny[i][3], tiny[i][4], 2);
    }
    // the decode prefetch (the CPU's dense distance; none on Zen 4): L2 lines far ahead and L1 lines near, any distance
    kvt_kernels_set_prefetch_dense(4096);
    test_case(2048, 80, 1, 2, 78, 0);
    kvt_kernels_set_prefetch_dense(64);
    test_case(300, 144, 1, 0, 144, 0);
    kvt_kernels_reset_prefetch(); // the CPU's distances again
    kvt_bf16x16_set_enabled(on);
    return g_fail;
}
