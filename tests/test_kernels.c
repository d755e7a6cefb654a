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
#include "../src/kernels/matmul.h"
#include "../src/kernels/quant.h"
#include "../src/kernels/vec.h"

static int g_fail;

#define CHECK(name, cond, ...)                                                                       \
    do {                                                                                             \
        if (cond) {                                                                                  \
            printf("ok %s\n", name);                                                                 \
        } else {                                                                                     \
            printf("FAIL %s: ", name);                                                               \
            printf(__VA_ARGS__);                                                                     \
            printf("\n");                                                                            \
            g_fail++;                                                                                \
        }                                                                                            \
    } while (0)

// ------------------------------------------------------------------ random

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}
static float rnd_uniform(void) { return ((float)(rnd_u32() >> 8) + 0.5f) * (1.0f / 16777216.0f); }
static float rnd_normal(void) {
    const float u = rnd_uniform(), v = rnd_uniform();
    return sqrtf(-2.f * logf(u)) * cosf(6.2831853f * v);
}
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
    {KVT_TYPE_Q6_K, 0.027f},
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
static double dot_model_tol(kvt_type t) { return t == KVT_TYPE_Q4_1 ? 2e-3 : 2e-5; }

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

// Batch invariance of one ISA's matmul: every output of a many-token call
// (GEMM tiles) bit-identical to the single-token call (GEMV) on that row alone.
static void test_matmul_batch_bitwise(kvt_isa isa, kvt_type t, int64_t n, int64_t n_rows, int64_t n_tok) {
    const kvt_type_ops *ops = kvt_type_ops_get(t);
    const kvt_type vt = ops->vec_dot_type;
    const kvt_type_ops *vops = kvt_type_ops_get(vt);
    const int64_t wrs = kvt_row_size(t, n), xrs = kvt_row_size(vt, n), ldy = n_rows + 1;
    float *f = xmalloc((size_t)((n_rows + n_tok) * n) * sizeof *f);
    char *wq = xmalloc((size_t)(n_rows * wrs)), *xq = xmalloc((size_t)(n_tok * xrs));
    float *y = xmalloc((size_t)(n_tok * ldy) * sizeof *y), *y1 = xmalloc((size_t)n_rows * sizeof *y1);
    if (!f || !wq || !xq || !y || !y1) { g_fail++; return; }
    fill_data(f, n_rows * n, 0.05f, 0.f);
    fill_data(f + n_rows * n, n_tok * n, 1.f, 0.05f);
    for (int64_t r = 0; r < n_rows; r++) ops->from_float(f + r * n, wq + r * wrs, n);
    for (int64_t k = 0; k < n_tok; k++) vops->from_float(f + (n_rows + k) * n, xq + k * xrs, n);
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
    free(f), free(wq), free(xq), free(y), free(y1);
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
// widths around the 64-column register block and strides wider than a row.
static void test_vec_mad_rows(void) {
    enum { R = 33, N = 136, S = N + 8 };
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

// kvt_softmax_tile: normalised weights (sum 1 to rounding), rounded to f16 for an F16 V, the max and the
// mass sum exp(s - max) returned; for F32 V the weights are exp(s - max) * (1 / sum) unrounded.
static void test_softmax_tile(void) {
    int bad = 0;
    for (int f16 = 0; f16 <= 1; f16++)
        for (int64_t n = 1; n <= 40; n++) {
            float s[40], w[40], mx = -INFINITY;
            for (int64_t i = 0; i < n; i++) s[i] = w[i] = 3.0f * rnd_normal(), mx = fmaxf(mx, s[i]);
            float m;
            const float l = kvt_softmax_tile(f16 ? KVT_TYPE_F16 : KVT_TYPE_F32, w, n, &m);
            double sum = 0, wsum = 0;
            for (int64_t i = 0; i < n; i++) sum += expf(s[i] - mx);
            const float inv = (float)(1.0 / sum);
            for (int64_t i = 0; i < n; i++) {
                float want = expf(s[i] - mx) * inv;
                if (f16) want = kvt_f16_to_f32(kvt_f32_to_f16(want));
                bad += memcmp(&w[i], &want, sizeof want) != 0;
                wsum += w[i];
            }
            bad += m != mx || l != (float)sum || fabs(wsum - 1.0) > (f16 ? 2e-3 : 1e-5);
        }
    CHECK("softmax_tile", bad == 0, "%d mismatches", bad);
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
        }
    test_vec_mad();
    test_vec_mad_rows();
    test_act_quant_llamacpp();
    test_softmax_tile();
    CHECK("type_ops_null", kvt_type_ops_get(KVT_TYPE_Q2_K) == NULL && kvt_type_ops_ref(KVT_TYPE_Q5_1) == NULL &&
                               kvt_type_ops_get((kvt_type)1000) == NULL && kvt_type_ops_get(KVT_TYPE_Q8_K)->vec_dot == NULL,
          "unsupported types must give NULL");
    printf("# %d failure(s)\n", g_fail);
    return g_fail;
}

#ifdef KVT_TEST_STANDALONE
int main(void) { return test_kernels_main() != 0; }
#endif
