#include "vec.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "f16.h"
#include "quant.h"

void kvt_vec_scale_f32(float *y, float s, int64_t n) {
    if (kvt_kernels_isa() == KVT_ISA_AVX512) {
        kvt_vec_scale_f32_avx512(y, s, n);
        return;
    }
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_vec_scale_f32_avx2(y, s, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] *= s;
}

void kvt_vec_fold_f32(float *y, float a, const float *x, float b, int64_t n) {
    if (kvt_kernels_isa() == KVT_ISA_AVX512) {
        kvt_vec_fold_f32_avx512(y, a, x, b, n);
        return;
    }
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_vec_fold_f32_avx2(y, a, x, b, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const float ya = y[i] * a, xb = x[i] * b;
        y[i] = ya + xb;
    }
}

void kvt_vec_mad(kvt_type t, float *y, const void *x, float s, int64_t n) {
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_vec_mad_avx2(t == KVT_TYPE_F16, y, x, s, n);
        return;
    }
    if (t == KVT_TYPE_F16) {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++) y[i] += s * kvt_f16_to_f32(h[i]);
    } else {
        const float *f = x;
        for (int64_t i = 0; i < n; i++) y[i] += s * f[i];
    }
}

void kvt_vec_mad_rows(kvt_type t, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n) {
    if (kvt_kernels_isa() == KVT_ISA_AVX512) {
        kvt_vec_mad_rows_avx512(t == KVT_TYPE_F16, y, x, stride, s, n_rows, n);
        return;
    }
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_vec_mad_rows_avx2(t == KVT_TYPE_F16, y, x, stride, s, n_rows, n);
        return;
    }
    for (int64_t r = 0; r < n_rows; r++) kvt_vec_mad(t, y, (const char *)x + r * stride, s[r], n);
}

void kvt_vec_expf_sub(const float *x, float m, float *y, int64_t n) {
    if (kvt_kernels_isa() == KVT_ISA_AVX512) {
        kvt_vec_expf_sub_avx512(x, m, y, n);
        return;
    }
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_vec_expf_sub_avx2(x, m, y, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i] - m);
}

static inline float round_f16(float x) { return kvt_f16_to_f32(kvt_f32_to_f16(x)); }

void kvt_attn_kq_f16(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                     int64_t q_stride, int nq, float scale, float *s, int64_t s_stride) {
    switch (kvt_kernels_isa()) {
    case KVT_ISA_AVX512: kvt_attn_kq_f16_avx512(n, k, k_stride, np, qf, q_stride, nq, scale, s, s_stride); return;
    case KVT_ISA_AVX2: kvt_attn_kq_f16_avx2(n, k, k_stride, np, qf, q_stride, nq, scale, s, s_stride); return;
    default: break;
    }
    const kvt_vec_dot_fn dot = kvt_type_ops_get(KVT_TYPE_F16)->vec_dot;
    for (int h = 0; h < nq; h++) {
        for (int64_t x = 0; x < np; x++) {
            float d;
            dot(n, &d, (const char *)k + x * k_stride, q16 + h * q_stride);
            s[h * s_stride + x] = d * scale;
        }
    }
}

int kvt_attn_kq_kf32_ok(int64_t n) {
    switch (kvt_kernels_isa()) {
    case KVT_ISA_AVX512: return n % 64 == 0;
    case KVT_ISA_AVX2: return n % 32 == 0;
    default: return 0;
    }
}

int kvt_attn_kq_kf32(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride, int nq,
                     float scale, float *s, int64_t s_stride) {
    if (!kvt_attn_kq_kf32_ok(n)) return 0;
    if (kvt_kernels_isa() == KVT_ISA_AVX512) return kvt_attn_kq_kf32_avx512(n, kf, kf_stride, np, qf, q_stride, nq, scale, s, s_stride);
    return kvt_attn_kq_kf32_avx2(n, kf, kf_stride, np, qf, q_stride, nq, scale, s, s_stride);
}

void kvt_vec_sum_rows_f32(float *l, const float *s, int64_t s_stride, int nh, int64_t n) {
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_vec_sum_rows_f32_avx2(l, s, s_stride, nh, n);
        return;
    }
    for (int i = 0; i < nh; i++) {
        float a = l[i];
        for (int64_t x = 0; x < n; x++) a += s[i * s_stride + x];
        l[i] = a;
    }
}

float kvt_vec_max_f32(const float *x, int64_t n, float m) {
    if (kvt_kernels_isa() == KVT_ISA_AVX512) return kvt_vec_max_f32_avx512(x, n, m);
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) return kvt_vec_max_f32_avx2(x, n, m);
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

int64_t kvt_attn_merge_f16_cols(int64_t hdv) {
    return kvt_kernels_isa() == KVT_ISA_AVX512 ? kvt_attn_merge_f16_cols_avx512(hdv) : 0;
}

void kvt_attn_merge_f16(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride, float *m,
                        float *l, float *o, int64_t o_stride, int64_t hdv) {
    switch (kvt_kernels_isa()) {
    case KVT_ISA_AVX512: kvt_attn_merge_f16_avx512(nh, s, s_stride, n, v, stride, m, l, o, o_stride, hdv); return;
    case KVT_ISA_AVX2: kvt_attn_merge_f16_avx2(nh, s, s_stride, n, v, stride, m, l, o, o_stride, hdv); return;
    default: break;
    }
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

void kvt_swiglu_f32(float *g, const float *u, int64_t n) {
    switch (kvt_kernels_isa()) {
    case KVT_ISA_AVX512: kvt_swiglu_avx512(g, u, n); return;
    case KVT_ISA_AVX2: kvt_swiglu_avx2(g, u, n); return;
    default: break;
    }
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
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

void kvt_rope_apply(const kvt_rope_params *p, const float *cs, float *x) {
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_rope_apply_avx2(p, cs, x);
        return;
    }
    kvt_rope_rotate(p, cs, x);
}
