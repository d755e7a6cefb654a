#include "vec.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "f16.h"
#include "quant.h"

// ---- the scalar reference forms (the SIMD ones: quant_avx2.c, attn_avx512.h) ----

static void scale_ref(float *y, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= s;
}

static void fold_ref(float *y, float a, const float *x, float b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float ya = y[i] * a, xb = x[i] * b;
        y[i] = ya + xb;
    }
}

static void mad_ref(int f16, float *y, const void *x, float s, int64_t n) {
    if (f16) {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++) y[i] += s * kvt_f16_to_f32(h[i]);
    } else {
        const float *f = x;
        for (int64_t i = 0; i < n; i++) y[i] += s * f[i];
    }
}

static void mad_rows_ref(int f16, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; r++) mad_ref(f16, y, (const char *)x + r * stride, s[r], n);
}

static void expf_sub_ref(const float *x, float m, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i] - m);
}

static void kq_f16_ref(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                       int64_t q_stride, int nq, float scale, float *s, int64_t s_stride) {
    (void)qf;
    const kvt_vec_dot_fn dot = kvt_type_ops_get(KVT_TYPE_F16)->vec_dot;
    for (int h = 0; h < nq; h++) {
        for (int64_t x = 0; x < np; x++) {
            float d;
            dot(n, &d, (const char *)k + x * k_stride, q16 + h * q_stride);
            s[h * s_stride + x] = d * scale;
        }
    }
}

static void sum_rows_ref(float *l, const float *s, int64_t s_stride, int nh, int64_t n) {
    for (int i = 0; i < nh; i++) {
        float a = l[i];
        for (int64_t x = 0; x < n; x++) a += s[i * s_stride + x];
        l[i] = a;
    }
}

static float max_ref(const float *x, int64_t n, float m) {
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static inline float round_f16(float x) { return kvt_f16_to_f32(kvt_f32_to_f16(x)); }

static int64_t merge_f16_cols_none(int64_t hdv) {
    (void)hdv;
    return 0;
}

static void merge_f16_ref(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride, float *m,
                          float *l, float *o, int64_t o_stride, int64_t hdv) {
    for (int h = 0; h < nh; h++) {
        const float *sh = s + h * s_stride;
        float *oh = o + h * o_stride;
        for (int64_t r0 = 0; r0 < n; r0 += KVT_MERGE_ROWS) {
            const int64_t nr = n - r0 < KVT_MERGE_ROWS ? n - r0 : KVT_MERGE_ROWS;
            float ms[KVT_MERGE_ROWS], w[KVT_MERGE_ROWS];
            kvt_attn_merge_factors(sh + r0, nr, m + h, l + h, ms, w);
            for (int64_t r = 0; r < nr; r++) {
                const uint16_t *x = (const uint16_t *)((const char *)v + (r0 + r) * stride);
                if (ms[r] != 1.0f) {
                    for (int64_t k = 0; k < hdv; k++) oh[k] = round_f16(oh[k] * ms[r]);
                }
                for (int64_t k = 0; k < hdv; k++) oh[k] = round_f16(fmaf(kvt_f16_to_f32(x[k]), w[r], oh[k]));
            }
        }
    }
}

static void swiglu_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

// ---- the backends: one table per instruction set, picked per call by kvt_kernels_isa() ----

typedef struct {
    void (*scale)(float *y, float s, int64_t n);
    void (*fold)(float *y, float a, const float *x, float b, int64_t n);
    void (*mad)(int f16, float *y, const void *x, float s, int64_t n);
    void (*mad_rows)(int f16, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n);
    void (*expf_sub)(const float *x, float m, float *y, int64_t n);
    void (*kq_f16)(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                   int64_t q_stride, int nq, float scale, float *s, int64_t s_stride);
    // kvt_attn_kq_kf32's kernel, for head dims a multiple of kq_kf32_mult (0, NULL: none)
    int (*kq_kf32)(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride, int nq,
                   float scale, float *s, int64_t s_stride);
    int64_t kq_kf32_mult;
    void (*sum_rows)(float *l, const float *s, int64_t s_stride, int nh, int64_t n);
    float (*max)(const float *x, int64_t n, float m);
    int64_t (*merge_f16_cols)(int64_t hdv);
    void (*merge_f16)(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride, float *m,
                      float *l, float *o, int64_t o_stride, int64_t hdv);
    void (*swiglu)(float *g, const float *u, int64_t n);
    void (*rope_apply)(const kvt_rope_params *p, const float *cs, float *x);
} kvt_vec_ops;

static const kvt_vec_ops k_vec_scalar = {
    .scale = scale_ref, .fold = fold_ref, .mad = mad_ref, .mad_rows = mad_rows_ref, .expf_sub = expf_sub_ref,
    .kq_f16 = kq_f16_ref, .kq_kf32 = NULL, .kq_kf32_mult = 0, .sum_rows = sum_rows_ref, .max = max_ref,
    .merge_f16_cols = merge_f16_cols_none, .merge_f16 = merge_f16_ref, .swiglu = swiglu_ref, .rope_apply = kvt_rope_rotate,
};
// The SIMD tables: each ISA's form of every op; the AVX2 kernels where no 512-bit form exists (mad, sum_rows, rope).
#define KVT_VEC_OPS_SIMD(isa, kf32_mult, cols)                                                                         \
    {                                                                                                                  \
        .scale = kvt_vec_scale_f32_##isa, .fold = kvt_vec_fold_f32_##isa, .mad = kvt_vec_mad_avx2,                     \
        .mad_rows = kvt_vec_mad_rows_##isa, .expf_sub = kvt_vec_expf_sub_##isa, .kq_f16 = kvt_attn_kq_f16_##isa,       \
        .kq_kf32 = kvt_attn_kq_kf32_##isa, .kq_kf32_mult = kf32_mult, .sum_rows = kvt_vec_sum_rows_f32_avx2,           \
        .max = kvt_vec_max_f32_##isa, .merge_f16_cols = cols, .merge_f16 = kvt_attn_merge_f16_##isa,                   \
        .swiglu = kvt_swiglu_##isa, .rope_apply = kvt_rope_apply_avx2,                                                 \
    }
static const kvt_vec_ops k_vec_avx2 = KVT_VEC_OPS_SIMD(avx2, 32, merge_f16_cols_none);
static const kvt_vec_ops k_vec_avx512 = KVT_VEC_OPS_SIMD(avx512, 64, kvt_attn_merge_f16_cols_avx512);

static const kvt_vec_ops *vec_ops(void) {
    switch (kvt_kernels_isa()) {
    case KVT_ISA_AVX512: return &k_vec_avx512;
    case KVT_ISA_AVX2: return &k_vec_avx2;
    default: return &k_vec_scalar;
    }
}

// ---- the public entries (vec.h) ----

void kvt_vec_scale_f32(float *y, float s, int64_t n) { vec_ops()->scale(y, s, n); }

void kvt_vec_fold_f32(float *y, float a, const float *x, float b, int64_t n) { vec_ops()->fold(y, a, x, b, n); }

void kvt_vec_mad(kvt_type t, float *y, const void *x, float s, int64_t n) {
    vec_ops()->mad(t == KVT_TYPE_F16, y, x, s, n);
}

void kvt_vec_mad_rows(kvt_type t, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n) {
    vec_ops()->mad_rows(t == KVT_TYPE_F16, y, x, stride, s, n_rows, n);
}

void kvt_vec_expf_sub(const float *x, float m, float *y, int64_t n) { vec_ops()->expf_sub(x, m, y, n); }

void kvt_attn_kq_f16(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                     int64_t q_stride, int nq, float scale, float *s, int64_t s_stride) {
    vec_ops()->kq_f16(n, k, k_stride, np, q16, qf, q_stride, nq, scale, s, s_stride);
}

int kvt_attn_kq_kf32_ok(int64_t n) {
    const kvt_vec_ops *o = vec_ops();
    return o->kq_kf32 && n % o->kq_kf32_mult == 0;
}

int kvt_attn_kq_kf32(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride, int nq,
                     float scale, float *s, int64_t s_stride) {
    const kvt_vec_ops *o = vec_ops();
    if (!o->kq_kf32 || n % o->kq_kf32_mult != 0) return 0;
    return o->kq_kf32(n, kf, kf_stride, np, qf, q_stride, nq, scale, s, s_stride);
}

void kvt_vec_sum_rows_f32(float *l, const float *s, int64_t s_stride, int nh, int64_t n) {
    vec_ops()->sum_rows(l, s, s_stride, nh, n);
}

float kvt_vec_max_f32(const float *x, int64_t n, float m) { return vec_ops()->max(x, n, m); }

int64_t kvt_attn_merge_f16_cols(int64_t hdv) { return vec_ops()->merge_f16_cols(hdv); }

void kvt_attn_merge_f16(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride, float *m,
                        float *l, float *o, int64_t o_stride, int64_t hdv) {
    vec_ops()->merge_f16(nh, s, s_stride, n, v, stride, m, l, o, o_stride, hdv);
}

void kvt_swiglu_f32(float *g, const float *u, int64_t n) { vec_ops()->swiglu(g, u, n); }

void kvt_vec_add_f32(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void kvt_rmsnorm_f32(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]); // f32 squares summed in double, as ggml's rms_norm
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

// gelu of every f16 value, rounded to f16, as llama.cpp's CPU build tabulates it (ggml_table_gelu_f16; the
// x * x term fused as its compiler fuses it); built once, on first use.
static uint16_t g_gelu_f16[65536];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;
static void gelu_table_init(void) {
    const float c = 0.7978845608028654f; // sqrt(2/pi)
    for (uint32_t h = 0; h < 65536; h++) {
        const float x = kvt_f16_to_f32((uint16_t)h);
        g_gelu_f16[h] = kvt_f32_to_f16(0.5f * x * (1.0f + tanhf(c * x * fmaf(0.044715f * x, x, 1.0f))));
    }
}

void kvt_geglu_f32(float *g, const float *u, int64_t n) {
    pthread_once(&g_gelu_once, gelu_table_init);
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        g[i] = x <= -10.0f ? 0.0f : (x >= 10.0f ? x : kvt_f16_to_f32(g_gelu_f16[kvt_f32_to_f16(x)])) * u[i];
    }
}

void kvt_rope_cache(const kvt_rope_params *p, int64_t pos, float *cs) {
    const float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta = (float)pos;
    for (int32_t i = 0; i < p->n_rot / 2; i++) {
        float ff = p->freq_factors ? p->freq_factors[i] : 1.0f;
        float th = p->freq_scale * (theta / ff);
        cs[2 * i] = cosf(th);
        cs[2 * i + 1] = sinf(th);
        theta *= theta_scale;
    }
}

void kvt_rope_apply(const kvt_rope_params *p, const float *cs, float *x) { vec_ops()->rope_apply(p, cs, x); }
