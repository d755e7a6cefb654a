// test_kernels.c - kernel tests in the style of test-backend-ops: every SIMD
// kernel against the scalar reference, quantizer round trips, the matmul
// driver against dequantize-then-dot, and f16/bf16 conversion edge cases.
//
// int test_kernels_main(void) returns the number of failures and prints one
// line per case: "ok <name>" or "FAIL <name>: detail".
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/f16.h"
#include "../src/kernels/f16x16.h"
#include "../src/kernels/matmul.h"
#include "../src/kernels/quant.h"
#include "../src/kernels/vec.h"

static int g_fail;

#include "test_check.h"

// The CPU-specific choices (prefetch distances, decode kernels) on AMD with AVX-512: test_kernels_cpu.c.
int test_kernels_cpu_amd(void);
// bf16_x16 (bf16x16.h): test_bf16x16.c.
int test_bf16x16(void);
// The attention kernels (kvt_attn_merge_f16, kvt_attn_kq_f16, kvt_attn_kq_kf32): test_kernels_attn.c.
int test_kernels_attn(void);

// ------------------------------------------------------------------ random

#include "test_rng.h"
// Weight-like data: normal with a per-row offset and occasional outliers.
static void fill_data(float *x, int64_t n, float scale, float offset) {
    for (int64_t i = 0; i < n; i++) {
        float v = rnd_normal() * scale + offset;
        if (rnd_u32() % 97 == 0) v *= 6.f;
        x[i] = v;
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_kernels: out of memory\n");
    }
    return p;
}

// -------------------------------------------------------- f16 / bf16

static void test_f16(void) {
    // every f16 value survives f16 -> f32 -> f16 (NaNs stay NaN)
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = kvt_f16_to_f32((uint16_t)h);
        const uint16_t back = kvt_f32_to_f16(f);
        const int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan ? !(isnan(f) && (back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) bad++;
    }
    CHECK("f16_roundtrip_all", bad == 0, "%d values differ", bad);

    // known values
    struct { float f; uint16_t h; } cases[] = {
        {0.f, 0x0000}, {-0.f, 0x8000}, {1.f, 0x3c00}, {-2.f, 0xc000}, {65504.f, 0x7bff},
        {65519.f, 0x7bff}, {65520.f, 0x7c00}, {1e6f, 0x7c00}, {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
        {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000}, {0x1.000002p-25f, 0x0001}, {0x1.8p-24f, 0x0002},
        {0x1.4p-23f, 0x0002}, {0x1p-14f, 0x0400}, {0x1.ffcp-15f, 0x0400}, {1.f + 0x1p-11f, 0x3c00},
        {1.f + 0x1.8p-11f, 0x3c01}, {1.f + 0x1.8p-10f, 0x3c02}, {0.333333343f, 0x3555},
    };
    bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (kvt_f32_to_f16(cases[i].f) != cases[i].h) {
            if (!bad) printf("  f32_to_f16(%a) = %04x, want %04x\n", (double)cases[i].f, kvt_f32_to_f16(cases[i].f), cases[i].h);
            bad++;
        }
    CHECK("f16_known_values", bad == 0, "%d wrong", bad);
    CHECK("f16_nan", isnan(kvt_f16_to_f32(kvt_f32_to_f16(NAN))) && kvt_f16_to_f32(0x7c00) == INFINITY &&
                         kvt_f16_to_f32(0x0001) == 0x1p-24f,
          "nan/inf/subnormal decode");

    // SIMD row converters agree with the scalar ones on random bit patterns
    enum { N = 1 << 16 };
    float *f = xmalloc(N * sizeof *f), *g = xmalloc(N * sizeof *g);
    uint16_t *h = xmalloc(N * sizeof *h), *h2 = xmalloc(N * sizeof *h2);
    if (!f || !g || !h || !h2) { g_fail++; return; }
    for (int i = 0; i < N; i++) {
        uint32_t b = rnd_u32();
        if (i % 4 == 1) b = (b & 0x80ffffffu) | ((uint32_t)(103 + rnd_u32() % 40) << 23); // near f16 range
        const float v = kvt_bits_to_f32(b);
        f[i] = v;
    }
    kvt_f32_to_f16_row(f, h, N - 3);
    bad = 0;
    for (int i = 0; i < N - 3; i++) {
        const uint16_t want = kvt_f32_to_f16(f[i]);
        const int nan = isnan(f[i]);
        if (nan ? !((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff)) : h[i] != want) {
            if (!bad) printf("  row f32_to_f16(%a) = %04x, scalar %04x\n", (double)f[i], h[i], want);
            bad++;
        }
    }
    CHECK("f16_row_from_f32", bad == 0, "%d differ", bad);
    for (int i = 0; i < N; i++) h2[i] = (uint16_t)i;
    kvt_f16_to_f32_row(h2, g, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        const float want = kvt_f16_to_f32(h2[i]);
        if (isnan(want) ? !isnan(g[i]) : memcmp(&want, &g[i], 4) != 0) bad++;
    }
    CHECK("f16_row_to_f32", bad == 0, "%d differ", bad);
    free(f), free(g), free(h), free(h2);

    // bf16
    CHECK("bf16_values",
          kvt_f32_to_bf16(1.f) == 0x3f80 && kvt_f32_to_bf16(kvt_bits_to_f32(0x3f808000u)) == 0x3f80 &&
              kvt_f32_to_bf16(kvt_bits_to_f32(0x3f818000u)) == 0x3f82 &&
              kvt_f32_to_bf16(kvt_bits_to_f32(0x3f808001u)) == 0x3f81 && kvt_f32_to_bf16(INFINITY) == 0x7f80 &&
              kvt_f32_to_bf16(-INFINITY) == 0xff80 && isnan(kvt_bf16_to_f32(kvt_f32_to_bf16(NAN))) &&
              kvt_f32_to_bf16(kvt_bits_to_f32(0x7f800001u)) == 0x7fc0 && kvt_bf16_to_f32(0x0001) == 0x1p-133f &&
              kvt_bf16_to_f32(0xc0a0) == -5.f,
          "bf16 conversion mismatch");
}

// ------------------------------------------------------------ per type

typedef struct {
    kvt_type t;
    float rt_tol; // bound on round-trip RMSE / RMS(x)
} type_case;

static const type_case k_weight_types[] = {
    {KVT_TYPE_F32, 0.f},      {KVT_TYPE_F16, 6e-4f},   {KVT_TYPE_BF16, 5e-3f},  {KVT_TYPE_Q8_0, 0.012f},
    {KVT_TYPE_Q4_0, 0.16f},   {KVT_TYPE_Q4_1, 0.13f},  {KVT_TYPE_Q5_0, 0.08f},  {KVT_TYPE_Q4_K, 0.11f},  {KVT_TYPE_Q5_K, 0.055f},
    {KVT_TYPE_Q6_K, 0.027f},  {KVT_TYPE_Q5_1, 0.05f},  {KVT_TYPE_Q2_K, 0.4f},   {KVT_TYPE_Q3_K, 0.19f},
    {KVT_TYPE_IQ4_NL, 0.095f}, {KVT_TYPE_IQ4_XS, 0.105f},
};
static const type_case k_act_types[] = {{KVT_TYPE_Q8_1, 0.012f}, {KVT_TYPE_Q8_K, 0.02f}};

static double rel_rmse(const float *a, const float *b, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) e += (double)(a[i] - b[i]) * (a[i] - b[i]), s += (double)a[i] * a[i];
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static void test_roundtrip(kvt_type t, float tol) {
    const kvt_type_ops *ref = kvt_type_ops_ref(t);
    char name[96];
    snprintf(name, sizeof name, "roundtrip_%s", kvt_type_name(t));
    if (!ref) {
        CHECK(name, 0, "no reference ops");
        return;
    }
    const int64_t n = 4096;
    float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
    void *q = xmalloc((size_t)kvt_row_size(t, n)), *q2 = xmalloc((size_t)kvt_row_size(t, n));
    if (!x || !y || !q || !q2) { g_fail++; return; }
    fill_data(x, n, 1.f, 0.f);
    for (int64_t i = 1024; i < 2048; i++) x[i] = x[i] * 0.01f + 0.02f; // a low-magnitude, offset stretch
    for (int64_t i = 2048; i < 2048 + 256; i++) x[i] = 0.f;             // an all-zero super-block
    ref->from_float(x, q, n);
    ref->to_float(q, y, n);
    const double e = rel_rmse(x, y, n);
    int finite = 1;
    for (int64_t i = 0; i < n; i++) finite &= isfinite(y[i]);
    snprintf(name, sizeof name, "roundtrip_%s (rel rmse %.5f)", kvt_type_name(t), e);
    CHECK(name, finite && e <= tol, "rel rmse %.5f > %.5f or non-finite", e, (double)tol);

    // SIMD quantizers: activation types must match the reference byte for byte
    for (int isa = KVT_ISA_AVX2; isa <= KVT_ISA_AVX512; isa++) {
        const kvt_type_ops *ops = kvt_type_ops_isa(t, (kvt_isa)isa);
        if (!ops) continue;
        ops->from_float(x, q2, n);
        snprintf(name, sizeof name, "from_float_%s_%s", kvt_type_name(t), kvt_isa_name((kvt_isa)isa));
        if (t == KVT_TYPE_BF16 || t == KVT_TYPE_F16 || t == KVT_TYPE_Q8_0 || t == KVT_TYPE_Q8_1 ||
            t == KVT_TYPE_Q8_K || ops->from_float == ref->from_float) {
            CHECK(name, memcmp(q, q2, (size_t)kvt_row_size(t, n)) == 0, "bytes differ from reference");
        } else {
            ops->to_float(q2, y, n);
            const double e2 = rel_rmse(x, y, n);
            CHECK(name, e2 <= tol, "rel rmse %.5f", e2);
        }
        ops->to_float(q, y, n);
        float *z = xmalloc(n * sizeof *z);
        if (!z) { g_fail++; continue; }
        ref->to_float(q, z, n);
        snprintf(name, sizeof name, "to_float_%s_%s", kvt_type_name(t), kvt_isa_name((kvt_isa)isa));
        CHECK(name, memcmp(y, z, n * sizeof *z) == 0, "differs from reference");
        free(z);
    }
    free(x), free(y), free(q), free(q2);
}

// Dequantized float dot in double, and the sum of |products| (error scale).
static double deq_dot(const float *a, const float *b, int64_t n, double *mag) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i], m += fabs((double)a[i] * b[i]);
    *mag = m;
    return s;
}

// Tolerance of the quantized reference dot vs. dequantized math: q4_1 folds the
// activation sum through an f16 (s = d * sum q), the rest is float rounding.
static double dot_model_tol(kvt_type t) { return t == KVT_TYPE_Q4_1 || t == KVT_TYPE_Q5_1 ? 2e-3 : 2e-5; }

static void test_vec_dot(kvt_type t) {
    const kvt_type_ops *ref = kvt_type_ops_ref(t);
    const kvt_type vt = ref->vec_dot_type;
    const kvt_type_ops *vref = kvt_type_ops_ref(vt);
    const int64_t n = 4096 + (t == KVT_TYPE_F32 || t == KVT_TYPE_F16 || t == KVT_TYPE_BF16 ? 7 : 0);
    const int64_t xs = kvt_row_size(t, n), ysz = kvt_row_size(vt, n);
    float *xf = xmalloc(n * sizeof *xf), *yf = xmalloc(KVT_DOT_MULTI_MAX * n * sizeof *yf);
    float *xd = xmalloc(n * sizeof *xd), *yd = xmalloc(n * sizeof *yd);
    char *xq = xmalloc((size_t)xs), *yq = xmalloc((size_t)(KVT_DOT_MULTI_MAX * ysz));
    char name[96];
    if (!xf || !yf || !xd || !yd || !xq || !yq) { g_fail++; return; }
    fill_data(xf, n, 0.05f, 0.003f);
    fill_data(yf, KVT_DOT_MULTI_MAX * n, 1.f, 0.1f);
    ref->from_float(xf, xq, n);
    for (int k = 0; k < KVT_DOT_MULTI_MAX; k++) vref->from_float(yf + k * n, yq + k * ysz, n);
    ref->to_float(xq, xd, n);

    float s_ref[KVT_DOT_MULTI_MAX];
    double mag[KVT_DOT_MULTI_MAX];
    double worst_model = 0;
    for (int k = 0; k < KVT_DOT_MULTI_MAX; k++) {
        ref->vec_dot(n, &s_ref[k], xq, yq + k * ysz);
        vref->to_float(yq + k * ysz, yd, n);
        const double want = deq_dot(xd, yd, n, &mag[k]);
        const double e = fabs(s_ref[k] - want) / (mag[k] + 1e-30);
        if (e > worst_model) worst_model = e;
    }
    snprintf(name, sizeof name, "vec_dot_ref_%s", kvt_type_name(t));
    CHECK(name, worst_model <= dot_model_tol(t), "rel err %.3g vs dequantized dot", worst_model);

    for (int isa = KVT_ISA_AVX2; isa <= KVT_ISA_AVX512; isa++) {
        const kvt_type_ops *ops = kvt_type_ops_isa(t, (kvt_isa)isa);
        if (!ops) continue;
        double worst = 0;
        for (int k = 0; k < KVT_DOT_MULTI_MAX; k++) {
            float s;
            ops->vec_dot(n, &s, xq, yq + k * ysz);
            const double e = fabs((double)s - s_ref[k]) / (mag[k] + 1e-30);
            if (e > worst) worst = e;
        }
        for (int nt = 1; nt <= KVT_DOT_MULTI_MAX; nt++) {
            float s[2 * KVT_DOT_MULTI_MAX];
            ops->vec_dot_multi(n, xq, yq, (size_t)ysz, nt, s, 2);
            for (int k = 0; k < nt; k++) {
                const double e = fabs((double)s[2 * k] - s_ref[k]) / (mag[k] + 1e-30);
                if (e > worst) worst = e;
            }
        }
        snprintf(name, sizeof name, "vec_dot_%s_%s", kvt_type_name(t), kvt_isa_name((kvt_isa)isa));
        CHECK(name, worst <= 1e-4, "rel err %.3g vs reference", worst);
    }
    free(xf), free(yf), free(xd), free(yd), free(xq), free(yq);
}

// Random weights [n_rows, n] of type t and activations [n_tok, n] of its vec_dot_type, quantized as the matmul
// reads them: *wq (row size kvt_row_size(t, n)) and *xq (kvt_row_size(vec_dot_type, n)), owned by the caller;
// false when out of memory (both freed).
static bool quant_operands(kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok, char **wq, char **xq) {
    const kvt_type_ops *ops = kvt_type_ops_get(t);
    const kvt_type_ops *vops = kvt_type_ops_get(ops->vec_dot_type);
    const int64_t wrs = kvt_row_size(t, n), xrs = kvt_row_size(ops->vec_dot_type, n);
    float *f = xmalloc((size_t)((n_rows + n_tok) * n) * sizeof *f);
    *wq = xmalloc((size_t)(n_rows * wrs)), *xq = xmalloc((size_t)(n_tok * xrs));
    if (!f || !*wq || !*xq) {
        free(f), free(*wq), free(*xq);
        return false;
    }
    fill_data(f, n_rows * n, 0.05f, 0.f);
    fill_data(f + n_rows * n, n_tok * n, 1.f, 0.05f);
    for (int64_t r = 0; r < n_rows; r++) ops->from_float(f + r * n, *wq + r * wrs, n);
    for (int64_t k = 0; k < n_tok; k++) vops->from_float(f + (n_rows + k) * n, *xq + k * xrs, n);
    free(f);
    return true;
}

// Batch invariance of one ISA's matmul: every output of a many-token call
// (GEMM tiles) bit-identical to the single-token call (GEMV) on that row alone.
static void test_matmul_batch_bitwise(kvt_isa isa, kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok) {
    const int64_t xrs = kvt_row_size(kvt_type_ops_get(t)->vec_dot_type, n), ldy = n_rows + 1;
    char *wq, *xq;
    if (!quant_operands(t, n, n_rows, n_tok, &wq, &xq)) { g_fail++; return; }
    float *y = xmalloc((size_t)(n_tok * ldy) * sizeof *y), *y1 = xmalloc((size_t)n_rows * sizeof *y1);
    if (!y || !y1) { g_fail++; return; }
    kvt_matmul_rows_isa(isa, t, n, wq, 0, n_rows, xq, n_tok, y, ldy);
    int64_t bad = 0;
    for (int64_t k = 0; k < n_tok; k++) {
        kvt_matmul_rows_isa(isa, t, n, wq, 0, n_rows, xq + k * xrs, 1, y1, n_rows);
        for (int64_t r = 0; r < n_rows; r++) bad += memcmp(&y[k * ldy + r], &y1[r], sizeof *y1) != 0;
    }
    char name[128];
    snprintf(name, sizeof name, "matmul_batch_bitwise_%s_%s_n%lld_rows%lld_tok%lld", kvt_isa_name(isa),
             kvt_type_name(t), (long long)n, (long long)n_rows, (long long)n_tok);
    CHECK(name, bad == 0, "%lld of %lld outputs differ from the row computed alone", (long long)bad,
          (long long)(n_rows * n_tok));
    free(wq), free(xq), free(y), free(y1);
}

// The K-quants sum in one order on AVX2 and AVX-512 (matmul.h: only the exact integer totals per
// super-block, then the same float chains), so their outputs are bit-identical across the two ISAs,
// for the GEMV and for every batch (the tiles of both).
static void test_matmul_kquant_isas(kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok) {
    char *wq, *xq;
    if (!quant_operands(t, n, n_rows, n_tok, &wq, &xq)) { g_fail++; return; }
    float *y2 = xmalloc((size_t)(n_tok * n_rows) * sizeof *y2), *y5 = xmalloc((size_t)(n_tok * n_rows) * sizeof *y5);
    if (!y2 || !y5) { g_fail++; return; }
    kvt_matmul_rows_isa(KVT_ISA_AVX2, t, n, wq, 0, n_rows, xq, n_tok, y2, n_rows);
    kvt_matmul_rows_isa(KVT_ISA_AVX512, t, n, wq, 0, n_rows, xq, n_tok, y5, n_rows);
    int64_t bad = 0;
    for (int64_t i = 0; i < n_tok * n_rows; i++) bad += memcmp(&y2[i], &y5[i], sizeof *y2) != 0;
    char name[128];
    snprintf(name, sizeof name, "matmul_avx2_eq_avx512_%s_n%lld_rows%lld_tok%lld", kvt_type_name(t), (long long)n,
             (long long)n_rows, (long long)n_tok);
    CHECK(name, bad == 0, "%lld of %lld outputs differ between AVX2 and AVX-512", (long long)bad,
          (long long)(n_tok * n_rows));
    free(wq), free(xq), free(y2), free(y5);
}

// AVX2 q6_K decode (quant_avx2.c's rows two at a time, rows i and h + i, per strip of matmul.c): every output of
// kvt_matmul_rows for one token bit for bit AVX2's q6_K dot of its row alone (the decode path before the pairs; the
// scalar reference is matched within test_matmul's tolerance, AVX-512 bit for bit by test_matmul_kquant_isas),
// sentinels kept outside [r0, r1).
static void test_q6k_decode_pairs(int64_t n, int64_t n_rows, int64_t r0, int64_t r1) {
    const kvt_type t = KVT_TYPE_Q6_K;
    char *wq, *xq;
    if (!quant_operands(t, n, n_rows, 1, &wq, &xq)) { g_fail++; return; }
    const int64_t wrs = kvt_row_size(t, n);
    float *y = xmalloc((size_t)(n_rows + 1) * sizeof *y);
    if (!y) { g_fail++; return; }
    for (int64_t r = 0; r <= n_rows; r++) y[r] = -7.f;
    kvt_matmul_rows_isa(KVT_ISA_AVX2, t, n, wq, r0, r1, xq, 1, y, n_rows);
    int64_t bad = 0;
    for (int64_t r = 0; r <= n_rows; r++) {
        float e = -7.f;
        if (r >= r0 && r < r1) kvt_type_ops_isa(t, KVT_ISA_AVX2)->vec_dot(n, &e, wq + r * wrs, xq);
        bad += memcmp(&e, &y[r], sizeof e) != 0;
    }
    char name[128];
    snprintf(name, sizeof name, "q6_K_decode_pairs_avx2_n%lld_rows%lld_r%lld-%lld", (long long)n, (long long)n_rows,
             (long long)r0, (long long)r1);
    CHECK(name, bad == 0, "%lld outputs differ from the AVX2 dot of the row alone", (long long)bad);
    free(wq), free(xq), free(y);
}

// Decode of several rows at once (kq_avx512.h's q6_K rows with prefetch: KQ6_NS streams, then a pair, then one;
// quant_avx2.c's q6_K pairs; matmul_avx2.c's float rows: FP_DR adjacent rows): every output of kvt_matmul_rows on isa
// for one token, with software prefetch at 0 and 4096 bytes, bit for bit the row computed alone without prefetch (one
// row: the float tile, q6k_row), sentinels kept outside [r0, r1). The scalar reference: test_matmul's tolerance.
// g_study_v: the study form (matmul.h kvt_kernels_decode_variant) of t for the range call (the rows alone: the default).
static int g_study_v;
static void test_decode_streams(kvt_isa isa, kvt_type t, int64_t n, int64_t n_rows, int64_t r0, int64_t r1) {
    char *wq, *xq;
    if (!quant_operands(t, n, n_rows, 1, &wq, &xq)) { g_fail++; return; }
    float *y = xmalloc((size_t)(n_rows + 1) * sizeof *y), *e = xmalloc((size_t)(n_rows + 1) * sizeof *e);
    if (!y || !e) { g_fail++; return; }
    kvt_kernels_set_prefetch(0);
    for (int64_t r = 0; r <= n_rows; r++) {
        e[r] = -7.f;
        if (r >= r0 && r < r1) kvt_matmul_rows_isa(isa, t, n, wq, r, r + 1, xq, 1, e, n_rows);
    }
    int64_t bad = 0;
    const int64_t pfs[] = {0, 2048, 4096};
    for (int k = 0; k < 3; k++) {
        kvt_kernels_set_prefetch(pfs[k]);
        for (int64_t r = 0; r <= n_rows; r++) y[r] = -7.f;
        const int ov = kvt_kernels_set_decode_variant(t, g_study_v);
        kvt_matmul_rows_isa(isa, t, n, wq, r0, r1, xq, 1, y, n_rows);
        kvt_kernels_set_decode_variant(t, ov);
        for (int64_t r = 0; r <= n_rows; r++) bad += memcmp(&e[r], &y[r], sizeof *y) != 0;
    }
    kvt_kernels_reset_prefetch();
    char name[128];
    snprintf(name, sizeof name, "decode_streams_%s_%s_n%lld_rows%lld_r%lld-%lld%s%.0d", kvt_isa_name(isa), kvt_type_name(t),
             (long long)n, (long long)n_rows, (long long)r0, (long long)r1, g_study_v ? "_v" : "", g_study_v);
    CHECK(name, bad == 0, "%lld outputs differ from the row computed alone", (long long)bad);
    free(wq), free(xq), free(y), free(e);
}

// A repacked matrix (quant.h) against its source: unpack(pack(W)) gives W's bytes back (all rows and [r0, r1)),
// and every output of kvt_matmul_rows on the repacked matrix is bit-identical to the source matrix's, on every
// ISA this CPU runs (the x8 GEMV for one token, the other paths for batches and cut groups), sentinels kept
// outside [r0, r1); and each token's GEMV equals the batch. wq: n_rows x n of t, xq: n_tok activation rows.
static void repack_check(kvt_type t, const kvt_repack_ops *rp, const char *wq, const char *xq, int64_t n, int64_t n_rows,
                         int64_t n_tok, int64_t r0, int64_t r1, int extreme) {
    const int64_t wrs = kvt_row_size(t, n), xrs = kvt_row_size(kvt_type_ops_get(t)->vec_dot_type, n), ldy = n_rows + 2;
    char *wr = xmalloc((size_t)(n_rows * wrs)), *wu = xmalloc((size_t)(n_rows * wrs));
    float *y0 = xmalloc((size_t)(n_tok * ldy) * sizeof *y0), *y1 = xmalloc((size_t)(n_tok * ldy) * sizeof *y1);
    if (!wr || !wu || !y0 || !y1) { g_fail++; return; }
    rp->pack(wq, wr, n_rows, n);
    rp->unpack(wr, wu, 0, n_rows, n);
    bool same = memcmp(wq, wu, (size_t)(n_rows * wrs)) == 0;
    rp->unpack(wr, wu, r0, r1, n);
    same = same && memcmp(wq + r0 * wrs, wu, (size_t)((r1 - r0) * wrs)) == 0;
    int64_t bad = 0;
    for (int isa = KVT_ISA_SCALAR; isa <= (int)kvt_kernels_isa(); isa++) {
        for (int64_t i = 0; i < n_tok * ldy; i++) y0[i] = y1[i] = -7.f;
        kvt_matmul_rows_isa((kvt_isa)isa, t, n, wq, r0, r1, xq, n_tok, y0, ldy);
        kvt_matmul_rows_isa((kvt_isa)isa, rp->to, n, wr, r0, r1, xq, n_tok, y1, ldy);
        bad += memcmp(y0, y1, (size_t)(n_tok * ldy) * sizeof *y0) != 0;
        // and the x8 GEMV of each token alone equals the batch
        for (int64_t k = 0; isa > KVT_ISA_SCALAR && k < n_tok; k++) {
            float *yk = y1 + k * ldy;
            for (int64_t r = r0; r < r1; r++) yk[r] = -7.f;
            kvt_matmul_rows_isa((kvt_isa)isa, rp->to, n, wr, r0, r1, xq + k * xrs, 1, yk, ldy);
        }
        bad += memcmp(y0, y1, (size_t)(n_tok * ldy) * sizeof *y0) != 0;
    }
    char name[128];
    snprintf(name, sizeof name, "repack_%s_n%lld_rows%lld_tok%lld_r%lld-%lld%s", kvt_type_name(rp->to), (long long)n,
             (long long)n_rows, (long long)n_tok, (long long)r0, (long long)r1, extreme ? "_extreme" : "");
    CHECK(name, same && bad == 0, "unpack(pack) %s; %lld ISA passes with outputs differing from %s", same ? "exact" : "differs",
          (long long)bad, kvt_type_name(t));
    free(wr), free(wu), free(y0), free(y1);
}

// The q8_K activation blocks xq[0 .. nb) set to their extremes for the repack tests: -128 everywhere (extreme 1) or
// 127 / -128 by element (2), with their block sums.
static void extreme_q8_K(char *xq, int64_t nb, int extreme) {
    for (int64_t i = 0; i < nb; i++) {
        kvt_block_q8_K *y = (kvt_block_q8_K *)xq + i;
        for (int k = 0; k < KVT_QK_K; k++) y->qs[k] = (int8_t)(extreme == 1 ? -128 : (k % 3) ? 127 : -128);
        for (int g = 0; g < KVT_QK_K / 16; g++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y->qs[16 * g + k];
            y->bsums[g] = (int16_t)sum;
        }
    }
}

// q4_K / q5_K repacked at load (q4_K_x8, q5_K_x8): repack_check. extreme: nibbles 15 (q5_K: values 31, every qh bit
// set) or 0xF0 + i % 16 (q5_K: qh bytes by element), scales and mins 63, activations -128 / 127 (the int16 bounds).
static void test_repack_k45(kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1, int extreme) {
    const bool q5 = t == KVT_TYPE_Q5_K;
    const kvt_repack_ops *rp = q5 ? kvt_type_repack_into(KVT_TYPE_Q5_K_X8) : kvt_type_repack(t);
    const kvt_type to = q5 ? KVT_TYPE_Q5_K_X8 : KVT_TYPE_Q4_K_X8;
    char *wq, *xq;
    if (!rp || rp->to != to || kvt_type_repacked_from(rp->to) != t || !quant_operands(t, n, n_rows, n_tok, &wq, &xq)) {
        CHECK(q5 ? "repack_q5_K_table" : "repack_q4_K_table", false, "no %s -> %s repacking", kvt_type_name(t),
              kvt_type_name(to));
        return;
    }
    if (extreme) {
        const size_t bs = q5 ? sizeof(kvt_block_q5_K) : sizeof(kvt_block_q4_K);
        for (int64_t i = 0; i < n_rows * n / KVT_QK_K; i++) {
            uint8_t *b = (uint8_t *)wq + i * (int64_t)bs;
            memset(b + bs - 128, extreme == 1 ? 0xFF : 0xF0 + (int)(i % 16), 128); // qs (the last member of both)
            memset(b + 4, 0xFF, 12);                                                // scales
            for (int k = 0; q5 && k < 32; k++) b[16 + k] = (uint8_t)(extreme == 1 ? 0xFF : (k * 91 + i) & 0xFF); // qh
        }
        extreme_q8_K(xq, n_tok * n / KVT_QK_K, extreme);
    }
    repack_check(t, rp, wq, xq, n, n_rows, n_tok, r0, r1, extreme);
    free(wq), free(xq);
}

// q6_K "repacked" at load: a copy (the same type and layout, quant.c), or q6_K_r where the AVX2 kernels are the
// dispatched ones or the AVX-512 decode runs the AVX2 GEMVs (Zen 5; quant.h): repack_check of both. extreme (q6_K_r): values 63 (1) or 0 .. 63 by element (2),
// scales -128, activations -128 / 127 (the int16 bound of the pair sums added before the scales).
static void test_repack_q6_K(int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1, int extreme) {
    const kvt_type t = KVT_TYPE_Q6_K;
    const kvt_repack_ops *rp = kvt_type_repack(t), *cp = kvt_type_repack_into(t), *rr = kvt_type_repack_into(KVT_TYPE_Q6_K_R);
    char *wq, *xq;
    const bool to_r = kvt_kernels_isa() == KVT_ISA_AVX2 || (kvt_kernels_isa() == KVT_ISA_AVX512 && kvt_kernels_decode_avx2(KVT_TYPE_Q6_K_R));
    if (!rp || !cp || !rr || rp->to != (to_r ? KVT_TYPE_Q6_K_R : t) || cp->to != t ||
        rr->to != KVT_TYPE_Q6_K_R || cp->row_align != 1 || rr->row_align != 1 || kvt_type_repacked_from(t) != t ||
        kvt_type_repacked_from(KVT_TYPE_Q6_K_R) != t || !quant_operands(t, n, n_rows, n_tok, &wq, &xq)) {
        CHECK("repack_q6_K_table", false, "no q6_K copy (q6_K -> q6_K, any rows) or q6_K_r");
        return;
    }
    if (extreme) {
        for (int64_t i = 0; i < n_rows * n / KVT_QK_K; i++) {
            kvt_block_q6_K *b = (kvt_block_q6_K *)wq + i;
            for (int k = 0; k < 128; k++) b->ql[k] = (uint8_t)(extreme == 1 ? 0xFF : (k * 37 + i) & 0xFF);
            for (int k = 0; k < 64; k++) b->qh[k] = (uint8_t)(extreme == 1 ? 0xFF : (k * 91 + i) & 0xFF);
            memset(b->scales, 0x80, sizeof b->scales);
        }
        extreme_q8_K(xq, n_tok * n / KVT_QK_K, extreme);
    } else {
        repack_check(t, cp, wq, xq, n, n_rows, n_tok, r0, r1, 0);
    }
    repack_check(t, rr, wq, xq, n, n_rows, n_tok, r0, r1, extreme);
    free(wq), free(xq);
}

// The same, leaving the generator as it was: the later cases keep their data (q4_1's tolerance against the
// dequantized dot is tight for some draws).
static void test_repack_q6_K_keep_rng(int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1, int extreme) {
    const uint64_t s = g_rng;
    test_repack_q6_K(n, n_rows, n_tok, r0, r1, extreme);
    g_rng = s;
}

// The 32-element x8 layouts (q4_1_x8, q8_0_x8): repack_check, and for q8_0_x8 (whose tied matrices are repacked)
// row_to_float equals q8_0's to_float on every row. extreme: q4_1 nibbles 15 (1) or 0xF0 + i % 16 (2); q8_0 weights
// -128 / 127 (1) or -127 + i % 255 (2); activations -128 or 127 (the largest integer dots, both signs, and the int16
// bounds of AVX2's sign trick).
// q4_0 (one order on every ISA: matmul.h): kvt_matmul_rows on every ISA this CPU runs, on the q4_0 rows (packed into
// q4_0_x8 groups per call by matmul.c, the last group padded) and, where the rows fill groups, on the repacked matrix,
// bit for bit equal to the scalar reference's vec_dot written out here (per block the integer total, then
// s + (S * dx) * dy); sentinels kept outside [r0, r1).
static void q4_0_isa_check(kvt_type wt, const char *wq, const char *xq, int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0,
                           int64_t r1, int extreme) {
    const int q5 = wt == KVT_TYPE_Q5_0;
    const kvt_type xt = q5 ? KVT_TYPE_Q5_0_X8 : KVT_TYPE_Q4_0_X8;
    const int64_t wrs = kvt_row_size(wt, n), xrs = kvt_row_size(KVT_TYPE_Q8_0, n), ldy = n_rows + 2;
    const kvt_repack_ops *rp = kvt_type_repack(wt);
    float *ref = xmalloc((size_t)(n_tok * ldy) * sizeof *ref), *y = xmalloc((size_t)(n_tok * ldy) * sizeof *y);
    char *wr = xmalloc((size_t)((n_rows + 7) / 8 * 8 * wrs));
    if (!ref || !y || !wr || !rp) { g_fail++; return; }
    for (int64_t i = 0; i < n_tok * ldy; i++) ref[i] = -7.f;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) {
            const kvt_block_q8_0 *b = (const kvt_block_q8_0 *)(xq + t * xrs);
            float sum = 0;
            for (int64_t i = 0; i < n / KVT_QK; i++) {
                const uint8_t *a = (const uint8_t *)wq + r * wrs + i * (q5 ? 22 : 18), *qs = a + (q5 ? 6 : 2);
                uint32_t qh = 0;
                if (q5) memcpy(&qh, a + 2, 4);
                int isum = 0;
                for (int j = 0; j < KVT_QK / 2; j++) {
                    const int lo = (qs[j] & 0xF) | (int)(qh >> j & 1) << 4, hi = (qs[j] >> 4) | (int)(qh >> (j + 16) & 1) << 4;
                    isum += (lo - (q5 ? 16 : 8)) * b[i].qs[j] + (hi - (q5 ? 16 : 8)) * b[i].qs[j + KVT_QK / 2];
                }
                uint16_t d;
                memcpy(&d, a, 2);
                sum = sum + ((float)isum * kvt_f16_to_f32(d)) * kvt_f16_to_f32(b[i].d);
            }
            ref[t * ldy + r] = sum;
        }
    if (n_rows % 8 == 0) rp->pack(wq, wr, n_rows, n);
    int64_t bad = 0;
    for (int isa = KVT_ISA_SCALAR; isa <= (int)kvt_kernels_isa(); isa++)
        for (int rep = 0; rep <= (n_rows % 8 == 0); rep++) {
            for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = -7.f;
            kvt_matmul_rows_isa((kvt_isa)isa, rep ? xt : wt, n, rep ? wr : wq, r0, r1, xq, n_tok, y, ldy);
            bad += memcmp(ref, y, (size_t)(n_tok * ldy) * sizeof *y) != 0;
            for (int64_t t = 0; t < n_tok; t++) { // each token alone, and the per-row dot of the ISA's type ops
                for (int64_t r = r0; r < r1; r++) y[t * ldy + r] = -7.f;
                kvt_matmul_rows_isa((kvt_isa)isa, rep ? xt : wt, n, rep ? wr : wq, r0, r1, xq + t * xrs, 1, y + t * ldy, ldy);
                const kvt_type_ops *ops = kvt_type_ops_isa(wt, (kvt_isa)isa);
                for (int64_t r = r0; ops && r < r1; r++) {
                    float d = 0;
                    ops->vec_dot(n, &d, wq + r * wrs, xq + t * xrs);
                    bad += memcmp(&d, &ref[t * ldy + r], sizeof d) != 0;
                }
            }
            bad += memcmp(ref, y, (size_t)(n_tok * ldy) * sizeof *y) != 0;
        }
    char name[128];
    snprintf(name, sizeof name, "%s_isa_bits_n%lld_rows%lld_tok%lld_r%lld-%lld%s", kvt_type_name(wt), (long long)n, (long long)n_rows,
             (long long)n_tok, (long long)r0, (long long)r1, extreme ? "_extreme" : "");
    CHECK(name, bad == 0, "%lld passes differ from the scalar reference's bits", (long long)bad);
    free(ref), free(y), free(wr);
}

static void test_repack_x32(kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1, int extreme) {
    const kvt_repack_ops *rp = kvt_type_repack(t);
    const bool q8 = t == KVT_TYPE_Q8_0, q50 = t == KVT_TYPE_Q5_0, q40 = t == KVT_TYPE_Q4_0 || q50; // q40: q4_0 or q5_0
    const kvt_type to = q8 ? KVT_TYPE_Q8_0_X8 : q50 ? KVT_TYPE_Q5_0_X8 : q40 ? KVT_TYPE_Q4_0_X8 : KVT_TYPE_Q4_1_X8;
    char *wq, *xq;
    if (!rp || rp->to != to || kvt_type_repacked_from(rp->to) != t || ((q8 || q40) && !rp->row_to_float) ||
        !quant_operands(t, n, n_rows, n_tok, &wq, &xq)) {
        char name[64];
        snprintf(name, sizeof name, "repack_%s_table", kvt_type_name(t));
        CHECK(name, false, "no %s repacking", kvt_type_name(t));
        return;
    }
    if (extreme) {
        for (int64_t i = 0; i < n_rows * n / KVT_QK; i++) {
            for (int k = 0; q8 && k < KVT_QK; k++)
                ((kvt_block_q8_0 *)wq + i)->qs[k] = (int8_t)(extreme == 1 ? ((k + i) % 2 ? 127 : -128) : -127 + (int)((i * 32 + k) % 255));
            if (q50) { // values 31 (1) or fifth bits by element (2), as q4_0 below
                kvt_block_q5_0 *b = (kvt_block_q5_0 *)wq + i;
                memset(b->qs, extreme == 1 ? 0xFF : (i % 3) ? 0x00 : 0xF0 + (int)(i % 16), KVT_QK / 2);
                for (int k = 0; k < 4; k++) b->qh[k] = (uint8_t)(extreme == 1 ? 0xFF : (k * 91 + i) & 0xFF);
                b->d = (uint16_t)(0x2000 | (0x3FF - i % 7));
            } else if (q40) { // and scales of 11 significant bits, so that float(S) * dx rounds (another order differs)
                memset(((kvt_block_q4_0 *)wq + i)->qs, extreme == 1 ? 0xFF : (i % 3) ? 0x00 : 0xF0 + (int)(i % 16), KVT_QK / 2);
                ((kvt_block_q4_0 *)wq + i)->d = (uint16_t)(0x2000 | (0x3FF - i % 7));
            }
            else if (!q8) memset(((kvt_block_q4_1 *)wq + i)->qs, extreme == 1 ? 0xFF : 0xF0 + (int)(i % 16), KVT_QK / 2);
        }
        for (int64_t i = 0; i < n_tok * n / KVT_QK; i++) {
            int8_t *y = q8 || q40 ? ((kvt_block_q8_0 *)xq + i)->qs : ((kvt_block_q8_1 *)xq + i)->qs;
            for (int k = 0; k < KVT_QK; k++) y[k] = (int8_t)(extreme == 1 ? -128 : (k % 3) ? 127 : -128);
            if (q40) ((kvt_block_q8_0 *)xq + i)->d = (uint16_t)(0x2400 | (0x3FF - i % 5));
        }
    }
    if (n_rows % 8 == 0) repack_check(t, rp, wq, xq, n, n_rows, n_tok, r0, r1, extreme);
    if (q40) q4_0_isa_check(t, wq, xq, n, n_rows, n_tok, r0, r1, extreme);
    // the embedding lookup of a tied matrix: every row read back from the repacked matrix
    const int64_t wrs = kvt_row_size(t, n);
    char *wr = xmalloc((size_t)(n_rows * wrs));
    float *f0 = xmalloc((size_t)n * sizeof *f0), *f1 = xmalloc((size_t)n * sizeof *f1);
    if (!wr || !f0 || !f1) { g_fail++; return; }
    if (n_rows % 8 == 0) rp->pack(wq, wr, n_rows, n); // (whole groups only: the repacking's row_align)
    int64_t bad = 0;
    for (int64_t r = 0; (q8 || q40) && n_rows % 8 == 0 && r < n_rows; r++) {
        kvt_type_ops_get(t)->to_float(wq + r * wrs, f0, n);
        bool ok = kvt_matrix_row_to_float(rp->to, wr, r, n, f1);
        bad += !ok || memcmp(f0, f1, (size_t)n * sizeof *f0) != 0;
        ok = kvt_matrix_row_to_float(t, wq, r, n, f1);
        bad += !ok || memcmp(f0, f1, (size_t)n * sizeof *f0) != 0;
    }
    if ((q8 || q40) && n_rows % 8 == 0) {
        char name[128];
        snprintf(name, sizeof name, "repack_%s_row_to_float_n%lld_rows%lld%s", kvt_type_name(rp->to), (long long)n,
                 (long long)n_rows, extreme ? "_extreme" : "");
        CHECK(name, bad == 0, "%lld rows differ from %s's to_float", (long long)bad, kvt_type_name(t));
    }
    free(wr), free(f0), free(f1), free(wq), free(xq);
}

// f16_x16 (f16x16.h): the repacking (pack, unpack, row_to_float against f16's) and kvt_matmul_rows on every ISA
// bit for bit against the scalar reference of one FMA chain per output (an fmaf loop written here), the repacked
// matrix and the same rows as f16 (packed into panels on the fly by matmul.c) alike, for a row range
// cut anywhere and every token alone or in the batch; the result near the exact dot. extreme: weights and
// activations of f16's largest and smallest (subnormal) magnitudes, both signs.
static void test_f16x16(int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1, int extreme) {
    const kvt_repack_ops *rp = kvt_type_repack(KVT_TYPE_F16);
    char name[160];
    snprintf(name, sizeof name, "f16x16_n%lld_rows%lld_tok%lld_r%lld-%lld%s", (long long)n, (long long)n_rows,
             (long long)n_tok, (long long)r0, (long long)r1, extreme ? "_extreme" : "");
    if (!rp || rp->to != KVT_TYPE_F16_X16 || rp->row_align != 16 || kvt_type_repacked_from(KVT_TYPE_F16_X16) != KVT_TYPE_F16 ||
        kvt_type_ops_get(KVT_TYPE_F16_X16)->vec_dot_type != KVT_TYPE_F16) {
        CHECK(name, false, "no f16 -> f16_x16 repacking");
        return;
    }
    const int64_t ldy = n_rows + 5;
    uint16_t *w = xmalloc((size_t)(n_rows * n) * 2), *wr = xmalloc((size_t)(n_rows * n) * 2),
             *wu = xmalloc((size_t)(n_rows * n) * 2), *x = xmalloc((size_t)(n_tok * n) * 2);
    float *f = xmalloc((size_t)(n_rows + n_tok) * (size_t)n * 4), *want = xmalloc((size_t)(n_tok * ldy) * 4),
          *y = xmalloc((size_t)(n_tok * ldy) * 4), *y1 = xmalloc((size_t)(ldy * (n_tok + 1)) * 4);
    if (!w || !wr || !wu || !x || !f || !want || !y || !y1) { g_fail++; return; }
    fill_data(f, (n_rows + n_tok) * n, 1.f, 0.f);
    for (int64_t i = 0; i < n_rows * n; i++) w[i] = kvt_f32_to_f16(f[i] * 0.05f);
    for (int64_t i = 0; i < n_tok * n; i++) x[i] = kvt_f32_to_f16(f[n_rows * n + i]);
    if (extreme) {
        static const uint16_t ev[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00};
        for (int64_t i = 0; i < n_rows * n; i += 7) w[i] = ev[(i / 7) % 7];
        for (int64_t i = 0; i < n_tok * n; i += 5) x[i] = ev[(i / 5 + 3) % 7];
    }
    rp->pack(w, wr, n_rows, n);
    rp->unpack(wr, wu, 0, n_rows, n);
    int64_t bad = memcmp(w, wu, (size_t)(n_rows * n) * 2) != 0;
    for (int64_t r = 0; r < n_rows; r++) {
        kvt_matrix_row_to_float(KVT_TYPE_F16_X16, wr, r, n, f);
        for (int64_t k = 0; k < n; k++) bad += memcmp(&f[k], &(float){kvt_f16_to_f32(w[r * n + k])}, 4) != 0;
    }
    // the order of f16x16.h, written out
    double worst = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_rows; r++) {
            float acc = 0;
            double exact = 0, mag = 0;
            for (int64_t k = 0; k < n; k++) {
                const float a = kvt_f16_to_f32(w[r * n + k]), b = kvt_f16_to_f32(x[t * n + k]);
                acc = fmaf(a, b, acc);
                exact += (double)a * b, mag += fabs((double)a * b);
            }
            want[t * ldy + r] = acc;
            const double e = fabs(acc - exact) / (mag + 1e-30);
            if (!extreme && !(e <= worst)) worst = e;
        }
    int64_t diff = 0;
    for (int isa = KVT_ISA_SCALAR; isa <= (int)kvt_kernels_isa(); isa++) {
        for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = -12345.f;
        kvt_matmul_rows_isa((kvt_isa)isa, KVT_TYPE_F16_X16, n, wr, r0, r1, x, n_tok, y, ldy);
        // the rows as f16 (not repacked: matmul.c packs them into panels on the fly): the same bits
        float *yu = y1 + ldy; // [n_tok, ldy] after the one-token row
        for (int64_t i = 0; i < n_tok * ldy; i++) yu[i] = -12345.f;
        kvt_matmul_rows_isa((kvt_isa)isa, KVT_TYPE_F16, n, w, r0, r1, x, n_tok, yu, ldy);
        for (int64_t i = 0; i < n_tok * ldy; i++) diff += memcmp(&yu[i], &y[i], 4) != 0;
        for (int64_t t = 0; t < n_tok; t++) {
            // the token alone
            for (int64_t i = 0; i < ldy; i++) y1[i] = -12345.f;
            kvt_matmul_rows_isa((kvt_isa)isa, KVT_TYPE_F16_X16, n, wr, r0, r1, x + t * n, 1, y1, ldy);
            for (int64_t r = 0; r < ldy; r++) {
                const float wv = r >= r0 && r < r1 ? want[t * ldy + r] : -12345.f;
                diff += memcmp(&y[t * ldy + r], &wv, 4) != 0;
                diff += memcmp(&y1[r], &wv, 4) != 0;
            }
        }
    }
    CHECK(name, bad == 0 && diff == 0 && worst < 1e-5, "%lld repack errors, %lld outputs differ from the fmaf chain, worst rel %.3g",
          (long long)bad, (long long)diff, worst);
    free(w), free(wr), free(wu), free(x), free(f), free(want), free(y), free(y1);
}

// kvt_matmul_rows against dequantize-then-dot, sentinels outside [r0, r1).
static void test_matmul_isa(int isa, kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1) {
    const kvt_type_ops *ops = kvt_type_ops_get(t);
    const kvt_type vt = ops->vec_dot_type;
    const kvt_type_ops *vops = kvt_type_ops_get(vt);
    const int64_t wrs = kvt_row_size(t, n), xrs = kvt_row_size(vt, n), ldy = n_rows + 3;
    float *wf = xmalloc((size_t)(n_rows * n) * sizeof *wf), *xf = xmalloc((size_t)(n_tok * n) * sizeof *xf);
    char *wq = xmalloc((size_t)(n_rows * wrs)), *xq = xmalloc((size_t)(n_tok * xrs));
    float *y = xmalloc((size_t)(n_tok * ldy) * sizeof *y);
    char name[128];
    if (!wf || !xf || !wq || !xq || !y) { g_fail++; return; }
    fill_data(wf, n_rows * n, 0.05f, 0.f);
    fill_data(xf, n_tok * n, 1.f, 0.05f);
    for (int64_t r = 0; r < n_rows; r++) ops->from_float(wf + r * n, wq + r * wrs, n);
    for (int64_t k = 0; k < n_tok; k++) vops->from_float(xf + k * n, xq + k * xrs, n);
    // dequantize back: the reference works on exactly the values the kernel sees
    for (int64_t r = 0; r < n_rows; r++) ops->to_float(wq + r * wrs, wf + r * n, n);
    for (int64_t k = 0; k < n_tok; k++) vops->to_float(xq + k * xrs, xf + k * n, n);
    for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = -12345.f;
    if (isa < 0) kvt_matmul_rows(t, n, wq, r0, r1, xq, n_tok, y, ldy);
    else kvt_matmul_rows_isa((kvt_isa)isa, t, n, wq, r0, r1, xq, n_tok, y, ldy);
    double worst = 0;
    int sentinel_bad = 0;
    for (int64_t k = 0; k < n_tok; k++)
        for (int64_t r = 0; r < ldy; r++) {
            const float got = y[k * ldy + r];
            if (r < r0 || r >= r1) {
                sentinel_bad += got != -12345.f;
                continue;
            }
            double mag;
            const double want = deq_dot(wf + r * n, xf + k * n, n, &mag);
            const double e = fabs(got - want) / (mag + 1e-30);
            if (!(e <= worst)) worst = e;
        }
    snprintf(name, sizeof name, "matmul_%s_%s_n%lld_tok%lld_rows%lld-%lld", isa < 0 ? "best" : kvt_isa_name((kvt_isa)isa),
             kvt_type_name(t), (long long)n,
             (long long)n_tok, (long long)r0, (long long)r1);
    CHECK(name, worst <= dot_model_tol(t) + 1e-4 && sentinel_bad == 0, "rel err %.3g, %d writes outside range",
          worst, sentinel_bad);
    free(wf), free(xf), free(wq), free(xq), free(y);
}

static void test_matmul(kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok, int64_t r0, int64_t r1) {
    for (int isa = -1; isa <= (int)kvt_kernels_isa(); isa++) test_matmul_isa(isa, t, n, n_rows, n_tok, r0, r1);
}

// kvt_vec_mad (SIMD when available) against a double-precision reference.
static void test_vec_mad(void) {
    int bad = 0;
    for (int f16 = 0; f16 <= 1; f16++)
        for (int64_t n = 1; n <= 70; n++) {
            float x[70], y[70], y0[70];
            uint16_t h[70];
            for (int64_t i = 0; i < n; i++) {
                x[i] = rnd_normal();
                h[i] = kvt_f32_to_f16(x[i]);
                if (f16) x[i] = kvt_f16_to_f32(h[i]);
                y[i] = y0[i] = rnd_normal();
            }
            const float s = rnd_normal();
            kvt_vec_mad(f16 ? KVT_TYPE_F16 : KVT_TYPE_F32, y, f16 ? (const void *)h : (const void *)x, s, n);
            for (int64_t i = 0; i < n; i++) {
                const double want = (double)y0[i] + (double)s * x[i];
                if (fabs(y[i] - want) > 1e-5 * (fabs(y0[i]) + fabs(s * x[i])) + 1e-30) bad++;
            }
        }
    CHECK("vec_mad_f16_f32", bad == 0, "%d elements differ", bad);
}

// kvt_vec_mad_rows: bitwise equal to the row-by-row kvt_vec_mad it replaces, for both element types,
// widths around the 64- and 128-column register blocks and strides wider than a row.
static void test_vec_mad_rows(void) {
    enum { R = 33, N = 272, S = N + 8 };
    int bad = 0;
    for (int f16 = 0; f16 <= 1; f16++)
        for (int64_t n = 1; n <= N; n += (n < 70 ? 1 : 13)) {
            static float xf[R * S], y[N], y0[N], sw[R];
            static uint16_t xh[R * S];
            for (int64_t i = 0; i < R * S; i++) xf[i] = rnd_normal(), xh[i] = kvt_f32_to_f16(xf[i]);
            for (int64_t i = 0; i < n; i++) y[i] = y0[i] = rnd_normal();
            for (int r = 0; r < R; r++) sw[r] = fabsf(rnd_normal());
            const kvt_type t = f16 ? KVT_TYPE_F16 : KVT_TYPE_F32;
            const void *x = f16 ? (const void *)xh : (const void *)xf;
            const int64_t stride = S * (f16 ? 2 : 4);
            kvt_vec_mad_rows(t, y, x, stride, sw, R, n);
            for (int r = 0; r < R; r++) kvt_vec_mad(t, y0, (const char *)x + r * stride, sw[r], n);
            for (int64_t i = 0; i < n; i++) bad += memcmp(&y[i], &y0[i], sizeof y[i]) != 0;
        }
    CHECK("vec_mad_rows_bitwise", bad == 0, "%d elements differ from row-by-row kvt_vec_mad", bad);
}

// kvt_vec_expf_sub: bitwise libm's expf(x - m) for every length around the 8-lane vectors, including arguments far
// out of range, infinities and NaN.
static void test_vec_expf_sub(void) {
    int bad = 0;
    enum { E = 4099 };
    static float xe[E], ye[E];
    for (int i = 0; i < E; i++) xe[i] = i % 97 == 0 ? (i % 2 ? 200.0f : -300.0f) : 40.0f * rnd_normal();
    xe[5] = NAN, xe[6] = INFINITY, xe[7] = -INFINITY;
    for (int64_t n = 0; n <= E; n += n < 40 ? 1 : 1021) {
        const float m = n % 3 ? 1.5f : -2.25f;
        kvt_vec_expf_sub(xe, m, ye, n);
        for (int64_t i = 0; i < n; i++) {
            const float want = expf(xe[i] - m);
            bad += memcmp(&ye[i], &want, sizeof want) != 0 && !(isnan(ye[i]) && isnan(want));
        }
    }
    CHECK("vec_expf_sub_bitwise", bad == 0, "%d values differ from libm's expf", bad);
}

// The activation quantizers of q8_0 and q8_1 (every ISA the CPU runs) compute llama.cpp's x86 expressions:
// d = amax / 127 stored as f16, q = round-half-even(x * (127 / amax)), q8_1's s = f16(d * sum q). The
// multiplier 127 / amax is not always 1 / d in float: blocks are built where the two give other bytes.
static void test_act_quant_llamacpp(void) {
    enum { NB = 64 };
    static float x[NB * KVT_QK];
    int found = 0;
    for (int b = 0; b < NB; b++) {
        float *v = x + b * KVT_QK;
        for (int j = 0; j < KVT_QK; j++) v[j] = rnd_normal() * 0.5f;
        const float amax = 2.0f + rnd_uniform(), id_ll = 127.f / amax, id_alt = 1.f / (amax / 127.f);
        v[0] = b & 1 ? -amax : amax;
        // an element where the two multipliers round apart, near a half-integer (when one exists)
        for (int k = 0; k < 126 && id_ll != id_alt; k++) {
            float t = (k + 0.5f) / id_ll;
            for (int u = 0; u < 8; u++, t = nextafterf(t, 1e9f))
                if (nearbyintf(t * id_ll) != nearbyintf(t * id_alt)) {
                    v[1 + b % 30] = t;
                    found++;
                    k = 126;
                    break;
                }
        }
    }
    int bad = 0;
    for (int isa = KVT_ISA_SCALAR; isa <= (int)kvt_kernels_isa(); isa++)
        for (int q81 = 0; q81 <= 1; q81++) {
            const kvt_type t = q81 ? KVT_TYPE_Q8_1 : KVT_TYPE_Q8_0;
            const kvt_type_ops *ops = isa == KVT_ISA_SCALAR ? kvt_type_ops_ref(t) : kvt_type_ops_isa(t, (kvt_isa)isa);
            if (!ops) continue;
            static uint8_t out[NB * sizeof(kvt_block_q8_1)];
            ops->from_float(x, out, NB * KVT_QK);
            for (int b = 0; b < NB; b++) {
                const float *v = x + b * KVT_QK;
                float amax = 0;
                for (int j = 0; j < KVT_QK; j++) amax = fmaxf(amax, fabsf(v[j]));
                const float d = amax / 127.f, id = 127.f / amax;
                const uint8_t *blk = out + b * (q81 ? sizeof(kvt_block_q8_1) : sizeof(kvt_block_q8_0));
                uint16_t dh, sh;
                memcpy(&dh, blk, 2);
                const int8_t *qs = (const int8_t *)(blk + (q81 ? 4 : 2));
                int sum = 0;
                for (int j = 0; j < KVT_QK; j++) {
                    bad += qs[j] != (int)nearbyintf(v[j] * id);
                    sum += qs[j];
                }
                bad += dh != kvt_f32_to_f16(d);
                if (q81) memcpy(&sh, blk + 2, 2), bad += sh != kvt_f32_to_f16(d * (float)sum);
            }
        }
    CHECK("act_quant_q8_0_q8_1_llamacpp", bad == 0 && found > 0, "%d bytes differ (%d blocks where 127/amax != 1/d rounds apart)",
          bad, found);
}

// kvt_vec_max_f32, kvt_vec_scale_f32, kvt_vec_fold_f32, kvt_vec_sum_rows_f32: on every ISA here the scalar loop's values (max: the same
// value, NaNs skipped; scale and fold: the same bits), lengths around the vector widths.
static void test_vec_max_fold(void) {
    enum { N = 77 };
    static float x[N], y[N], y0[N], z[N];
    const kvt_isa isa = kvt_kernels_isa();
    int bad = 0;
    for (int si = KVT_ISA_SCALAR; si <= (int)isa; si++) {
        kvt_kernels_set_isa((kvt_isa)si);
        if (kvt_kernels_isa() != (kvt_isa)si) continue;
        for (int64_t n = 0; n <= N; n++) {
            for (int64_t i = 0; i < N; i++) x[i] = 8.0f * rnd_normal(), y[i] = y0[i] = rnd_normal(), z[i] = rnd_normal();
            if (n > 5) x[n / 2] = NAN;
            for (int t = 0; t < 3; t++) {
                const float m = t == 0 ? -INFINITY : t == 1 ? 0.5f : 30.0f;
                float want = m;
                for (int64_t i = 0; i < n; i++) want = x[i] > want ? x[i] : want;
                bad += kvt_vec_max_f32(x, n, m) != want;
            }
            const float a = 0.75f + 0.01f * (float)n, b = 1.5f - 0.01f * (float)n;
            kvt_vec_fold_f32(y, a, z, b, n);
            for (int64_t i = 0; i < n; i++) {
                const float ya = y0[i] * a, zb = z[i] * b, w = ya + zb;
                bad += memcmp(&y[i], &w, sizeof w) != 0;
            }
            for (int64_t i = 0; i < n; i++) z[i] = y0[i];
            kvt_vec_scale_f32(z, b, n);
            for (int64_t i = 0; i < n; i++) {
                const float w = y0[i] * b;
                bad += memcmp(&z[i], &w, sizeof w) != 0;
            }
        }
    }
    for (int si = KVT_ISA_SCALAR; si <= (int)isa; si++) { // kvt_vec_sum_rows_f32 against the scalar chains
        kvt_kernels_set_isa((kvt_isa)si);
        if (kvt_kernels_isa() != (kvt_isa)si) continue;
        static float sr[19 * 40], l[19], lr[19];
        for (int nh = 1; nh <= 19; nh += 3)
            for (int64_t n = 0; n <= 37; n += (n < 18 ? 1 : 5)) {
                for (int i = 0; i < 19 * 40; i++) sr[i] = rnd_normal() * (i % 7 == 0 ? 1e4f : 1.0f);
                for (int i = 0; i < nh; i++) l[i] = lr[i] = rnd_normal();
                kvt_vec_sum_rows_f32(l, sr + 1, 40, nh, n);
                for (int i = 0; i < nh; i++)
                    for (int64_t x = 0; x < n; x++) lr[i] += sr[1 + i * 40 + x];
                bad += memcmp(l, lr, (size_t)nh * sizeof(float)) != 0;
            }
    }
    kvt_kernels_set_isa(isa);
    CHECK("vec_max_scale_fold", bad == 0, "%d values differ from the scalar loops", bad);
}

// kvt_rope_apply: the same bits on the scalar code (fmaf calls) and this CPU's SIMD build, and the fused
// rotation x0' = fma(x0, c, -(x1 s)), x1' = fma(x0, s, x1 c) of llama.cpp's CPU build, both pairings.
static void test_rope_fused(void) {
    int bad = 0;
    float cs[128], x[128], y[128], z[128];
    for (int neox = 0; neox <= 1; neox++)
        for (int64_t pos = 0; pos < 40; pos += 7) {
            const kvt_rope_params rp = {128, neox, 10000.0f, 1.0f, NULL};
            kvt_rope_cache(&rp, pos, cs);
            for (int i = 0; i < 128; i++) x[i] = y[i] = z[i] = rnd_normal();
            const kvt_isa isa = kvt_kernels_set_isa(KVT_ISA_SCALAR);
            kvt_rope_apply(&rp, cs, x);
            kvt_kernels_set_isa(isa);
            kvt_rope_apply(&rp, cs, y);
            for (int i = 0; i < 64; i++) {
                const int a = neox ? i : 2 * i, b = neox ? i + 64 : 2 * i + 1;
                const float c = cs[2 * i], s = cs[2 * i + 1], x0 = z[a], x1 = z[b];
                z[a] = fmaf(x0, c, -(x1 * s));
                z[b] = fmaf(x0, s, x1 * c);
            }
            bad += memcmp(x, y, sizeof x) != 0 || memcmp(x, z, sizeof x) != 0;
        }
    CHECK("rope_fused", bad == 0, "%d rotations differ", bad);
}

// kvt_swiglu_f32 on this CPU's kernels (ggml's vector expf on SIMD ISAs): within 4e-7 relative of the scalar
// code (libm expf) over inputs from -100 to 100 (the vector expf's range limits inside), and every element's
// bits independent of where a call's range starts and ends (ranges are split over threads).
static void test_swiglu(void) {
    enum { N = 4099 };
    static float g[N], u[N], a[N], b[N], c[N];
    for (int i = 0; i < N; i++) g[i] = i < 64 ? -100.0f + 200.0f * (float)i / 63.0f : 6.0f * rnd_normal(), u[i] = rnd_normal();
    memcpy(a, g, sizeof a), memcpy(b, g, sizeof b), memcpy(c, g, sizeof c);
    kvt_swiglu_f32(a, u, N);
    for (int64_t i0 = 0, k = 1; i0 < N; k = k * 7 % 37 + 1) { // pieces of 1..37 elements
        const int64_t len = i0 + k < N ? k : N - i0;
        kvt_swiglu_f32(b + i0, u + i0, len);
        i0 += len;
    }
    const kvt_isa isa = kvt_kernels_set_isa(KVT_ISA_SCALAR);
    kvt_swiglu_f32(c, u, N);
    kvt_kernels_set_isa(isa);
    double worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs((double)a[i] - c[i]) / fmax(fabs((double)c[i]), 1e-30));
    CHECK("swiglu", memcmp(a, b, sizeof a) == 0 && worst < 4e-7, "split ranges %s, max relative difference to libm %.3g",
          memcmp(a, b, sizeof a) ? "differ" : "agree", worst);
}

// kvt_geglu_f32: llama.cpp's f16-tabulated gelu (x rounded to f16, gelu rounded to f16; 0 below -10, x above 10),
// within f16 rounding of the exact tanh form.
static void test_geglu(void) {
    enum { N = 2000 };
    static float g[N], u[N], x0[N];
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) x0[i] = g[i] = i < 40 ? -12.0f + 0.6f * (float)i : 3.0f * rnd_normal(), u[i] = rnd_normal();
    kvt_geglu_f32(g, u, N);
    for (int i = 0; i < N; i++) {
        const float x = x0[i], xh = kvt_f16_to_f32(kvt_f32_to_f16(x));
        const float gel = 0.5f * xh * (1.0f + tanhf(0.7978845608028654f * xh * fmaf(0.044715f * xh, xh, 1.0f)));
        const float want = x <= -10.0f ? 0.0f : (x >= 10.0f ? x : kvt_f16_to_f32(kvt_f32_to_f16(gel))) * u[i];
        bad += memcmp(&want, &g[i], sizeof want) != 0;
        const double exact = 0.5 * x * (1.0 + tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x))) * u[i];
        worst = fmax(worst, fabs(g[i] - exact) / (fabs(exact) + 1e-3));
    }
    CHECK("geglu_f16_table", bad == 0 && worst < 1e-2, // the f16 roundings of input and output
          "%d values differ from the table's, max relative error %.3g", bad, worst);
}

int test_kernels_main(void) {
    g_fail = 0;
    printf("# kernels isa: %s\n", kvt_isa_name(kvt_kernels_isa()));
    test_f16();
    const size_t nw = sizeof k_weight_types / sizeof k_weight_types[0];
    for (size_t i = 0; i < nw; i++) test_roundtrip(k_weight_types[i].t, k_weight_types[i].rt_tol);
    for (size_t i = 0; i < sizeof k_act_types / sizeof k_act_types[0]; i++)
        test_roundtrip(k_act_types[i].t, k_act_types[i].rt_tol);
    for (size_t i = 0; i < nw; i++) test_vec_dot(k_weight_types[i].t);
    static const int64_t toks[] = {1, 3, 7, 32};
    for (size_t i = 0; i < nw; i++) {
        const kvt_type t = k_weight_types[i].t;
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            test_matmul(t, 512, 37, toks[k], 0, 37);
            test_matmul(t, 512, 37, toks[k], 5, 30);
        }
        test_matmul(t, 2048, 9, 13, 1, 8); // several token blocks for wide rows
        int64_t blck = 1, bsize = 0;
        kvt_type_layout((uint32_t)t, &blck, &bsize);
        test_matmul(t, blck == 1 ? 517 : blck == 32 ? 32 * 13 : 256 * 3, 11, 6, 0, 11); // partial groups / tails
    }
    // every token count through the tile/tail logic of the many-token paths,
    // with row ranges that are not multiples of the 16-row panels
    for (size_t i = 0; i < nw; i++) {
        const kvt_type t = k_weight_types[i].t;
        int64_t blck = 1, bsize = 0;
        kvt_type_layout((uint32_t)t, &blck, &bsize);
        const int64_t n = blck == 256 ? 512 : blck == 32 ? 320 : 67;
        for (int64_t nt = 1; nt <= 33; nt++) test_matmul(t, n, 41, nt, nt % 5, 41 - nt % 7);
    }
    // q4_K repacked at load: edge shapes (one group, cut groups, wide rows), every token path
    {
        static const int64_t shp[][5] = {{256, 8, 1, 0, 8},    {256, 8, 2, 3, 5},     {512, 40, 1, 0, 40},
                                         {512, 40, 1, 5, 37},  {768, 16, 5, 1, 15},   {512, 64, 9, 8, 56},
                                         {2816, 24, 1, 0, 24}, {2816, 24, 17, 2, 23}, {1024, 32, 3, 16, 24},
                                         // batches on whole groups across strips (8-row tile: 2-8 tokens, AVX2 beyond)
                                         {2816, 128, 4, 0, 128}, {1024, 48, 8, 3, 45}, {512, 64, 6, 8, 64},
                                         {2816, 136, 33, 8, 120}};
        // (q5_K_x8: the same shapes; its batches unpack: matmul.c)
        for (int q5 = 0; q5 <= 1; q5++) {
            const kvt_type t = q5 ? KVT_TYPE_Q5_K : KVT_TYPE_Q4_K;
            for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++)
                test_repack_k45(t, shp[i][0], shp[i][1], shp[i][2], shp[i][3], shp[i][4], 0);
            test_repack_k45(t, 2048, 16, 1, 0, 16, 1);
            test_repack_k45(t, 2048, 16, 2, 0, 16, 2);
            test_repack_k45(t, 2048, 24, 7, 0, 24, 1);
            test_repack_k45(t, 512, 24, 9, 1, 23, 1);
            test_repack_k45(t, 5632, 32, 1, 0, 32, 2);
        }
    }
    // q4_1 and q8_0 repacked at load: one group, cut groups, K with a short last 8-block group (576: SmolLM2's width;
    // 5632: TinyLlama's n_ff) and below one group (64, 224), every token count of the x8 GEMVs (q8_0_x8: up to
    // KVT_Q80X8_TOK_MAX tokens, the unpacked q8_0 paths beyond)
    {
        static const int64_t shp[][6] = {{32, 8, 1, 0, 8, 0},       {64, 8, 2, 3, 5, 0},        {576, 40, 1, 0, 40, 0},
                                         {576, 40, 1, 5, 37, 0},    {224, 16, 5, 1, 15, 0},     {512, 64, 8, 8, 56, 0},
                                         {512, 64, 9, 8, 56, 0},    {1536, 24, 1, 0, 24, 0},    {1536, 24, 17, 2, 23, 0},
                                         {2048, 32, 3, 16, 24, 0},  {5632, 16, 1, 0, 16, 0},    {320, 48, 33, 3, 45, 0},
                                         {2816, 136, 7, 8, 120, 0}, {2048, 16, 1, 0, 16, 1},    {2048, 16, 2, 0, 16, 2},
                                         {480, 24, 9, 1, 23, 1},    {608, 24, 4, 1, 23, 2}};
        for (int q8 = 0; q8 <= 1; q8++)
            for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++)
                test_repack_x32(q8 ? KVT_TYPE_Q8_0 : KVT_TYPE_Q4_1, shp[i][0], shp[i][1], shp[i][2], shp[i][3], shp[i][4],
                                (int)shp[i][5]);
        // q4_0 (q4_0_x8, and unrepacked rows packed per call): the same shapes, every token count of the batch tile
        // (Q40X8_TT: 4 on AVX2, 8 on AVX-512) and past it, and row counts that leave a partial group (13, 21, 3)
        // (the generator left as it was: the later cases keep their data, as test_repack_q6_K_keep_rng)
        const uint64_t rng = g_rng;
        for (int q5 = 0; q5 <= 1; q5++)
            for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++)
                test_repack_x32(q5 ? KVT_TYPE_Q5_0 : KVT_TYPE_Q4_0, shp[i][0], shp[i][1], shp[i][2], shp[i][3], shp[i][4],
                                (int)shp[i][5]);
        static const int64_t q40[][6] = {{64, 13, 1, 0, 13, 0},  {96, 21, 3, 2, 20, 0},  {576, 3, 6, 0, 3, 0},
                                         {2048, 13, 11, 1, 12, 1}, {512, 21, 4, 0, 21, 2}, {320, 8, 12, 0, 8, 1},
                                         {5632, 24, 2, 0, 24, 2},  {5632, 96, 9, 3, 93, 0}}; // (the last: 2 strips)
        for (int q5 = 0; q5 <= 1; q5++)
            for (size_t i = 0; i < sizeof q40 / sizeof q40[0]; i++)
                test_repack_x32(q5 ? KVT_TYPE_Q5_0 : KVT_TYPE_Q4_0, q40[i][0], q40[i][1], q40[i][2], q40[i][3], q40[i][4],
                                (int)q40[i][5]);
        g_rng = rng;
    }
    // the decode GEMVs of q4_1_x8, q8_0_x8, q4_K_x8 and q6_K with software prefetch on and off (kvt_kernels_prefetch: per
    // CPU, so each machine runs one setting otherwise): the same bits, cut groups included
    {
        const int64_t pfs[] = {0, 64, 1024, 2048, 4096, 8192}, old = kvt_kernels_prefetch();
        for (size_t k = 0; k < sizeof pfs / sizeof pfs[0]; k++) {
            kvt_kernels_set_prefetch(pfs[k]);
            CHECK("set_prefetch", kvt_kernels_prefetch() == pfs[k], "prefetch %lld after setting %lld",
                  (long long)kvt_kernels_prefetch(), (long long)pfs[k]);
            const kvt_type pft[] = {KVT_TYPE_Q4_K,    KVT_TYPE_Q6_K,    KVT_TYPE_Q4_K_X8, KVT_TYPE_Q6_K_R,
                                    KVT_TYPE_Q8_0_X8, KVT_TYPE_Q4_1_X8, KVT_TYPE_Q5_K_X8, KVT_TYPE_Q4_0_X8, KVT_TYPE_Q5_0_X8};
            for (size_t i = 0; i < sizeof pft / sizeof pft[0]; i++)
                CHECK("set_prefetch", kvt_kernels_prefetch_type(pft[i]) == pfs[k], "%s prefetch %lld after setting %lld",
                      kvt_type_name(pft[i]), (long long)kvt_kernels_prefetch_type(pft[i]), (long long)pfs[k]);
            test_repack_x32(KVT_TYPE_Q4_1, 576, 40, 1, 5, 37, 0);
            test_repack_x32(KVT_TYPE_Q4_1, 2048, 16, 1, 0, 16, 1);
            // q4_1_x8's decode streams (q41x8.h: 4 groups at once, then 2, then 1): 11 groups (4 x 2 + 2 + 1), 5 cut to
            // 1 .. 6 (4 + 1), 15 of 17 (4 x 3 + 2 + 1)
            test_repack_x32(KVT_TYPE_Q4_1, 576, 88, 1, 0, 88, 0);
            test_repack_x32(KVT_TYPE_Q4_1, 2048, 56, 1, 3, 53, 0);
            test_repack_x32(KVT_TYPE_Q4_1, 320, 136, 1, 5, 133, 2);
            test_repack_x32(KVT_TYPE_Q8_0, 576, 40, 1, 5, 37, 0);
            test_repack_x32(KVT_TYPE_Q8_0, 2048, 16, 1, 0, 16, 1);
            // q4_0_x8's decode streams (q40x8.h, as q4_1_x8's; the generator kept)
            const uint64_t rng = g_rng;
            test_repack_x32(KVT_TYPE_Q4_0, 576, 88, 1, 0, 88, 0);
            test_repack_x32(KVT_TYPE_Q4_0, 2048, 56, 1, 3, 53, 0);
            test_repack_x32(KVT_TYPE_Q4_0, 320, 136, 1, 5, 133, 2);
            test_repack_x32(KVT_TYPE_Q5_0, 2048, 56, 1, 3, 53, 0);
            test_repack_x32(KVT_TYPE_Q5_0, 320, 136, 1, 5, 133, 1);
            // study form 5 (q40x8.h: AVX2's decode before q40z), the same bits
            const int o40 = kvt_kernels_set_decode_variant(KVT_TYPE_Q4_0_X8, 5);
            const int o50 = kvt_kernels_set_decode_variant(KVT_TYPE_Q5_0_X8, 5);
            g_rng = rng;
            test_repack_x32(KVT_TYPE_Q4_0, 2048, 56, 1, 3, 53, 0);
            test_repack_x32(KVT_TYPE_Q5_0, 320, 136, 1, 5, 133, 1);
            kvt_kernels_set_decode_variant(KVT_TYPE_Q4_0_X8, o40);
            kvt_kernels_set_decode_variant(KVT_TYPE_Q5_0_X8, o50);
            g_rng = rng;
            for (int q5 = 0; q5 <= 1; q5++) {
                const kvt_type t = q5 ? KVT_TYPE_Q5_K : KVT_TYPE_Q4_K;
                test_repack_k45(t, 2816, 24, 1, 0, 24, 0);
                test_repack_k45(t, 512, 40, 1, 5, 37, 0);
                test_repack_k45(t, 2048, 16, 1, 0, 16, 1);
            }
            test_repack_q6_K(2048, 24, 1, 0, 24, 0);
            test_repack_q6_K(768, 17, 1, 1, 16, 0);
            test_repack_q6_K_keep_rng(512, 7, 1, 0, 7, 1);
            test_repack_q6_K_keep_rng(1024, 10, 3, 1, 9, 2);
        }
        // the q6_K_r rows' study forms (quant_avx2.c kvt_q6r_rows_avx2: 8 the q6_K rows' prefetch, 10 none, 11 / 12 / 13
        // into L2 / L2 and L1 / L1 only, 22 / 24 two / four rows reduced together) at 0 and 4096 bytes: an even and an odd
        // row count, a cut range
        const int q6rv[] = {0, 8, 10, 11, 12, 13, 20, 22, 24};
        for (size_t i = 0; i < sizeof q6rv / sizeof q6rv[0]; i++)
            for (int k = 0; k < 2; k++) {
                kvt_kernels_set_prefetch(k ? 4096 : 0);
                const int ov = kvt_kernels_set_decode_variant(KVT_TYPE_Q6_K_R, q6rv[i]);
                test_repack_q6_K_keep_rng(2048, 24, 1, 0, 24, 0);
                test_repack_q6_K_keep_rng(768, 17, 1, 1, 16, 0);
                kvt_kernels_set_decode_variant(KVT_TYPE_Q6_K_R, ov);
            }
        kvt_kernels_set_prefetch(old);
        kvt_kernels_reset_prefetch(); // the CPU's distances again, per type too
        g_fail += test_kernels_cpu_amd();
    }
    // q6_K "repacked" (copied unchanged into the repacked weights' huge pages): rows of any count, cut ranges, tokens
    {
        static const int64_t shp[][5] = {{256, 1, 1, 0, 1}, {512, 13, 1, 2, 11}, {2048, 24, 3, 0, 24}, {768, 17, 9, 1, 16},
                                         {1024, 35, 20, 1, 34}, {512, 16, 8, 0, 16}};
        for (size_t i = 0; i < sizeof shp / sizeof shp[0]; i++)
            test_repack_q6_K(shp[i][0], shp[i][1], shp[i][2], shp[i][3], shp[i][4], 0);
        test_repack_q6_K_keep_rng(512, 13, 9, 2, 11, 1);
        test_repack_q6_K_keep_rng(768, 17, 1, 0, 17, 2);
    }
    // GEMM tiles against the GEMV, bit for bit, on every SIMD ISA this CPU runs (KVT_ISA may cap it):
    // rows and tokens not multiples of the tiles, K of one block
    for (int isa = KVT_ISA_AVX2; isa <= (int)kvt_kernels_isa(); isa++)
        for (size_t i = 0; i < nw; i++) {
            const kvt_type t = k_weight_types[i].t;
            int64_t blck = 1, bsize = 0;
            kvt_type_layout((uint32_t)t, &blck, &bsize);
            // (1300, 40 and 12 blocks: K blocks of the tiles with a partial last one)
            const int64_t one = blck == 1 ? 16 : blck,
                          ns[] = {one, blck == 1 ? 517 : 9 * blck, blck == 1 ? 2048 : 8 * blck,
                                  blck == 1 ? 1300 : blck == 32 ? 40 * blck : 12 * blck};
            for (size_t k = 0; k < 4; k++) {
                test_matmul_batch_bitwise((kvt_isa)isa, t, ns[k], 7, 11);
                test_matmul_batch_bitwise((kvt_isa)isa, t, ns[k], 1, 2);
            }
            test_matmul_batch_bitwise((kvt_isa)isa, t, ns[1], 41, 33);
            // float decode steps 4 slices, then a pair, then the tail (1125 = 17 * 64 + 32 + 5 on AVX-512)
            if (blck == 1) test_matmul_batch_bitwise((kvt_isa)isa, t, 1125, 7, 11);
        }
    // the float tiles' every edge (AVX2 4 x 3, weights one by one when R > T; AVX-512 4 x 6): rows 1..9, 16,
    // 33 against 2..7 tokens, odd K (67: 4 slices of 16 and a tail of 3)
    for (int isa = KVT_ISA_AVX2; isa <= (int)kvt_kernels_isa(); isa++) {
        const int64_t rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33};
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (int64_t nt = 2; nt <= 7; nt++) test_matmul_batch_bitwise((kvt_isa)isa, KVT_TYPE_F16, 67, rows[i], nt);
        // token tiles of tm and tm - 1 (gemm_avx2.c tile_pos: 128 = 18 x 6 + 4 x 5 on AVX-512), several token blocks
        const int64_t toks[] = {128, 130, 97};
        for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
            test_matmul_batch_bitwise((kvt_isa)isa, KVT_TYPE_F16, 2048, 9, toks[i]);
            test_matmul_batch_bitwise((kvt_isa)isa, KVT_TYPE_BF16, 2048, 9, toks[i]);
        }
        // f16 calls of 512 rows on, activation rows 4096 bytes apart: the tile reads them copied (gemm_avx2.c f16p)
        test_matmul_batch_bitwise((kvt_isa)isa, KVT_TYPE_F16, 2048, 515, 13);
        test_matmul_batch_bitwise((kvt_isa)isa, KVT_TYPE_F16, 4096, 600, 130);
    }
    // q4_1 block headers come 8 blocks at a time (masked loads for a short last group): every short group
    // size, alone and after a full group, decode (row pairs and an odd row) and a few tokens
    for (int64_t nb = 1; nb <= 15; nb++)
        if (nb != 8) {
            test_matmul(KVT_TYPE_Q4_1, 32 * nb, 5, 1, 0, 5);
            test_matmul(KVT_TYPE_Q4_1, 32 * nb, 5, 3, 1, 5);
        }
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) { // one row, a pair, an odd row out, several strips with an odd last one
        const int64_t q6[][4] = {{256, 1, 0, 1}, {256, 2, 0, 2}, {512, 3, 0, 3}, {512, 17, 1, 16}, {512, 1401, 0, 1401},
                                 {2048, 317, 3, 316}};
        for (size_t i = 0; i < sizeof q6 / sizeof q6[0]; i++) test_q6k_decode_pairs(q6[i][0], q6[i][1], q6[i][2], q6[i][3]);
    }
    if (kvt_kernels_isa() >= KVT_ISA_AVX512) {
        const kvt_type kq[] = {KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K};
        const int64_t toks[] = {1, 3, 11};
        for (size_t i = 0; i < 3; i++)
            for (size_t k = 0; k < 3; k++) {
                test_matmul_kquant_isas(kq[i], 5 * 256, 19, toks[k]);
                test_matmul_kquant_isas(kq[i], 4 * 256, 16, toks[k]);
            }
    } // (without AVX-512 there is one ISA: nothing to compare)
    test_vec_mad();
    test_vec_mad_rows();
    test_vec_expf_sub();
    test_act_quant_llamacpp();
    g_fail += test_kernels_attn();
    test_vec_max_fold();
    test_rope_fused();
    test_swiglu();
    test_geglu();
    // (last, so that the random data of the cases above stay what they were)
    // decode of several rows: every count of rows 1..13 (4 streams of h rows, then a pair, then one), cut ranges, several
    // strips (f16 n 2048: 64 rows a strip; q6_K n 2048: 156), a float tail (67, 1125)
    for (int isa = KVT_ISA_AVX2; isa <= (int)kvt_kernels_isa(); isa++) {
        const kvt_type ft[] = {KVT_TYPE_F16, KVT_TYPE_BF16, KVT_TYPE_F32, KVT_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof ft / sizeof ft[0]; i++) {
            const int64_t n1 = ft[i] == KVT_TYPE_Q6_K ? 256 : 67, n2 = ft[i] == KVT_TYPE_Q6_K ? 768 : 1125;
            for (int64_t nr = 1; nr <= 13; nr++) test_decode_streams((kvt_isa)isa, ft[i], nr & 1 ? n1 : n2, nr, 0, nr);
            test_decode_streams((kvt_isa)isa, ft[i], n2, 41, 3, 38);
            test_decode_streams((kvt_isa)isa, ft[i], 2048, 350, 1, 347);
        }
    }
    // q4_K_x8's AVX-512 decode streams (kqx8.h x8_groups512: 4 groups at once, then 2, then 1) with prefetch on and off:
    // 11 groups, 15 of 17, 16 cut to 1 .. 15
    {
        const int64_t pfs[] = {0, 4096}, old = kvt_kernels_prefetch();
        for (int k = 0; k < 2; k++) {
            kvt_kernels_set_prefetch(pfs[k]);
            for (int q5 = 0; q5 <= 1; q5++) {
                const kvt_type t = q5 ? KVT_TYPE_Q5_K : KVT_TYPE_Q4_K;
                test_repack_k45(t, 512, 88, 1, 0, 88, 0);
                test_repack_k45(t, 256, 136, 1, 8, 128, 0);
                test_repack_k45(t, 768, 128, 1, 3, 125, 0);
            }
        }
        kvt_kernels_set_prefetch(old);
    }
    // the study forms of the decode GEMVs (matmul.h kvt_kernels_decode_variant; kq_decode_bench -A/-B), prefetch on and
    // off: the same bits as the default form. q8_0_x8 (q80x8.h: 1, 2 or 4 groups at once, AVX-512 in turns of 1 or 4
    // blocks, AVX2 100-104 without the L1 prefetch, 200-204 with it, then a pair, then one): 11 groups, 5 cut to 1 .. 6, 15 of 17, 3 groups without a full 8-block group, a
    // tail of 2 blocks (576), extreme values; float rows (1, 2, 4 adjacent rows, 2 or 4 streams in a strip): every
    // count of rows 1..13, cut ranges, several strips, a float tail.
    {
        const int64_t pfs[] = {0, 4096}, old = kvt_kernels_prefetch();
        const int qv[] = {1, 2, 4, 12, 14, 100, 101, 102, 104, 200, 201, 204}, fv[] = {1, 4, 9, 12, 14, 22, 24};
        for (int k = 0; k < 2; k++) {
            kvt_kernels_set_prefetch(pfs[k]);
            for (size_t i = 0; i < sizeof qv / sizeof qv[0]; i++) {
                const int ov = kvt_kernels_set_decode_variant(KVT_TYPE_Q8_0_X8, qv[i]);
                CHECK("set_decode_variant", kvt_kernels_decode_variant(KVT_TYPE_Q8_0_X8) == qv[i], "variant not set");
                test_repack_x32(KVT_TYPE_Q8_0, 576, 88, 1, 0, 88, 0);
                test_repack_x32(KVT_TYPE_Q8_0, 2048, 56, 1, 3, 53, 0);
                test_repack_x32(KVT_TYPE_Q8_0, 320, 136, 1, 5, 133, 2);
                test_repack_x32(KVT_TYPE_Q8_0, 224, 24, 1, 0, 24, 0);
                test_repack_x32(KVT_TYPE_Q8_0, 576, 40, 1, 5, 37, 0);
                test_repack_x32(KVT_TYPE_Q8_0, 2048, 32, 1, 0, 32, 1);
                kvt_kernels_set_decode_variant(KVT_TYPE_Q8_0_X8, ov);
            }
            // q4_1_x8 and q4_K_x8 study forms (matmul.h kvt_kernels_decode_variant; each form's meaning is at its
            // dispatch: q41x8.h, kqx8.h KQX8_GEMV_FN): 1, 2, 4 streams on both ISAs; q4_1_x8 5 .. 13 its default, 35 the
            // AVX2 default at the full L2 distance; q4_K_x8 5 .. 14 the AVX2 and AVX-512 forms, 15 .. 34 its default.
            // Shapes: 11 groups, 5 cut to 1 .. 6 (q4_K_x8 16 cut to 1 .. 15), 15 of 17, 7 groups.
            const int xv[] = {1, 2, 4, 10, 11, 12, 13, 14, 21, 22, 24, 31, 32, 34, 35, 5, 6, 7, 8, 9};
            for (size_t i = 0; i < sizeof xv / sizeof xv[0]; i++) {
                int ov = kvt_kernels_set_decode_variant(KVT_TYPE_Q4_1_X8, xv[i]);
                test_repack_x32(KVT_TYPE_Q4_1, 576, 88, 1, 0, 88, 0);
                test_repack_x32(KVT_TYPE_Q4_1, 2048, 56, 1, 3, 53, 0);
                test_repack_x32(KVT_TYPE_Q4_1, 320, 136, 1, 5, 133, 2);
                test_repack_x32(KVT_TYPE_Q4_1, 64, 56, 1, 0, 56, 0);
                kvt_kernels_set_decode_variant(KVT_TYPE_Q4_1_X8, ov);
                ov = kvt_kernels_set_decode_variant(KVT_TYPE_Q4_K_X8, xv[i]);
                test_repack_k45(KVT_TYPE_Q4_K, 512, 88, 1, 0, 88, 0);
                test_repack_k45(KVT_TYPE_Q4_K, 256, 136, 1, 8, 128, 0);
                test_repack_k45(KVT_TYPE_Q4_K, 768, 128, 1, 3, 125, 0);
                test_repack_k45(KVT_TYPE_Q4_K, 256, 56, 1, 0, 56, 1);
                kvt_kernels_set_decode_variant(KVT_TYPE_Q4_K_X8, ov);
                if (xv[i] == 1 || xv[i] == 4 || xv[i] == 5) { // q5_K_x8's study forms: 1, 4 streams, 5 the old
                                                                // default (kqx8.h kvt_q5kx8_gemv_avx2)
                    ov = kvt_kernels_set_decode_variant(KVT_TYPE_Q5_K_X8, xv[i]);
                    test_repack_k45(KVT_TYPE_Q5_K, 512, 88, 1, 0, 88, 0);
                    test_repack_k45(KVT_TYPE_Q5_K, 768, 128, 1, 3, 125, 2);
                    kvt_kernels_set_decode_variant(KVT_TYPE_Q5_K_X8, ov);
                }
            }
        }
        kvt_kernels_set_prefetch(old);
        // q6_K rows in 1, 2, 4 streams per strip or over the whole range (kq_avx512.h q6_K_dec, quant_avx2.c; 9: AVX2's
        // pairs per strip, its default; 8: AVX-512's KQ6_NS streams without the L1 prefetch)
        const int q6v[] = {1, 2, 4, 8, 9, 22, 24};
        for (size_t i = 0; i < sizeof q6v / sizeof q6v[0]; i++) {
            g_study_v = q6v[i];
            for (int isa = KVT_ISA_AVX2; isa <= (int)kvt_kernels_isa(); isa++) {
                for (int64_t nr = 1; nr <= 13; nr++) test_decode_streams((kvt_isa)isa, KVT_TYPE_Q6_K, nr & 1 ? 256 : 768, nr, 0, nr);
                test_decode_streams((kvt_isa)isa, KVT_TYPE_Q6_K, 768, 41, 3, 38);
                test_decode_streams((kvt_isa)isa, KVT_TYPE_Q6_K, 2048, 350, 1, 347);
            }
            g_study_v = 0;
        }
        for (size_t i = 0; i < sizeof fv / sizeof fv[0]; i++) {
            g_study_v = fv[i];
            for (int isa = KVT_ISA_AVX2; isa <= (int)kvt_kernels_isa(); isa++) {
                const kvt_type ft[] = {KVT_TYPE_F16, KVT_TYPE_BF16, KVT_TYPE_F32};
                for (size_t j = 0; j < sizeof ft / sizeof ft[0]; j++) {
                    for (int64_t nr = 1; nr <= 13; nr++) test_decode_streams((kvt_isa)isa, ft[j], nr & 1 ? 67 : 1125, nr, 0, nr);
                    test_decode_streams((kvt_isa)isa, ft[j], 1125, 41, 3, 38);
                    test_decode_streams((kvt_isa)isa, ft[j], 2048, 350, 1, 347);
                }
            }
            g_study_v = 0;
        }
    }
    // f16_x16: tails of k (n odd, not a multiple of 8 or of the GEMM's k block), of panels (the GEMV's 8 or 4 in
    // flight), token counts through every GEMM tile width, cut ranges, token counts over the GEMM's token block
    {
        const int fx_on = kvt_f16x16_set_enabled(1); // the kernels whatever KVT_F16X16 says for models
        const int64_t fx[][5] = {{300, 80, 1, 0, 80},   {517, 144, 1, 3, 141},  {2048, 48, 1, 0, 48},
                                 {520, 64, 13, 5, 61},   {257, 32, 2, 0, 32},    {1000, 48, 30, 16, 47},
                                 {64, 16, 25, 0, 16},    {777, 112, 7, 17, 111}, {256, 272, 12, 0, 272}, {301, 80, 3, 1, 79},
                                 {520, 144, 4, 0, 144}, {130, 208, 2, 0, 208},
                                 {300, 96, 6, 0, 96},    {300, 96, 8, 2, 90},
                                 // (AVX2: two token blocks of fx_gemm3, 34 tiles and 2 (33 tiles of 4 tokens, 3 of 3))
                                 {520, 256, 141, 5, 251}};
        for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) test_f16x16(fx[i][0], fx[i][1], fx[i][2], fx[i][3], fx[i][4], 0);
        test_f16x16(333, 48, 5, 1, 47, 1);
        kvt_kernels_set_prefetch(0);
        kvt_kernels_set_prefetch_dense(0);
        test_f16x16(517, 144, 1, 0, 144, 0);
        // the decode prefetch on any CPU: split into L2 and L1 (the default), and study form 1 (L1 alone)
        kvt_kernels_set_prefetch(4096);
        kvt_kernels_set_prefetch_dense(4096);
        test_f16x16(2048, 80, 1, 0, 80, 0);
        const int fv = kvt_kernels_set_decode_variant(KVT_TYPE_F16_X16, 1);
        test_f16x16(2048, 80, 1, 2, 78, 0);
        kvt_kernels_set_decode_variant(KVT_TYPE_F16_X16, fv);
        kvt_kernels_reset_prefetch(); // the CPU's distances again, per type too
        kvt_f16x16_set_enabled(fx_on);
    }
    g_fail += test_bf16x16();
    { // q8_0_x8's and q4_1_x8's L1 prefetch flags (quant.h): the CPU's, left by kvt_kernels_set_prefetch; every other
      // type's 1; q4_1_x8's decode form 34 with it, 4 without (matmul.h)
        const int l1 = kvt_kernels_prefetch_l1(KVT_TYPE_Q8_0_X8), l41 = kvt_kernels_prefetch_l1(KVT_TYPE_Q4_1_X8);
        kvt_kernels_set_prefetch(2048);
        CHECK("prefetch_l1", (l1 == 0 || l1 == 1) && kvt_kernels_prefetch_l1(KVT_TYPE_Q8_0_X8) == l1 && (l41 == 0 || l41 == 1) &&
                                 kvt_kernels_prefetch_l1(KVT_TYPE_Q4_1_X8) == l41 && kvt_kernels_prefetch_l1(KVT_TYPE_Q4_K_X8) == 1 &&
                                 kvt_kernels_prefetch_l1((kvt_type)1000) == 1 &&
                                 kvt_kernels_decode_form(KVT_TYPE_Q4_1_X8) == (l41 ? 34 : 4),
              "q8_0_x8 %d, q4_1_x8 %d", kvt_kernels_prefetch_l1(KVT_TYPE_Q8_0_X8), kvt_kernels_prefetch_l1(KVT_TYPE_Q4_1_X8));
        kvt_kernels_reset_prefetch();
    }
    CHECK("type_ops_null", kvt_type_ops_get((kvt_type)16) == NULL && kvt_type_ops_ref((kvt_type)21) == NULL && /* iq2_xxs, iq3_s */
                               kvt_type_ops_get((kvt_type)1000) == NULL && kvt_type_ops_get(KVT_TYPE_Q8_K)->vec_dot == NULL,
          "unsupported types must give NULL");
    printf("# %d failure(s)\n", g_fail);
    return g_fail;
}

#ifdef KVT_TEST_STANDALONE
int main(void) { return test_kernels_main() != 0; }
#endif
