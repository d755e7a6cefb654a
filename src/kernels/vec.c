#include "vec.h"

#include <math.h>
#include <string.h>

#include "f16.h"
#include "quant.h"

void kvt_vec_scale_f32(float *y, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= s;
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
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_vec_mad_rows_avx2(t == KVT_TYPE_F16, y, x, stride, s, n_rows, n);
        return;
    }
    for (int64_t r = 0; r < n_rows; r++) kvt_vec_mad(t, y, (const char *)x + r * stride, s[r], n);
}

float kvt_softmax_tile(kvt_type vt, float *s, int64_t n, float *max_out) {
    float mx = -INFINITY;
    for (int64_t x = 0; x < n; x++) mx = s[x] > mx ? s[x] : mx;
    double sum = 0.0;
    for (int64_t x = 0; x < n; x++) {
        s[x] = expf(s[x] - mx);
        sum += s[x];
    }
    const float inv = (float)(1.0 / sum);
    if (vt == KVT_TYPE_F16) {
        for (int64_t x = 0; x < n; x++) s[x] = kvt_f16_to_f32(kvt_f32_to_f16(s[x] * inv));
    } else {
        for (int64_t x = 0; x < n; x++) s[x] *= inv;
    }
    *max_out = mx;
    return (float)sum;
}

void kvt_vec_add_f32(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void kvt_rmsnorm_f32(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

void kvt_swiglu_f32(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void kvt_geglu_f32(float *g, const float *u, int64_t n) {
    const float c = 0.7978845608028654f; // sqrt(2/pi)
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x))) * u[i];
    }
}

void kvt_rope_cache(const kvt_rope_params *p, int64_t pos, float *cs) {
    const float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta = (float)pos;
    for (int32_t i = 0; i < p->n_rot / 2; i++) {
        float ff = p->freq_factors ? p->freq_factors[i] : 1.0f;
        float th = p->freq_scale * theta / ff;
        cs[2 * i] = cosf(th);
        cs[2 * i + 1] = sinf(th);
        theta *= theta_scale;
    }
}

void kvt_rope_apply(const kvt_rope_params *p, const float *cs, float *x) {
    const int32_t half = p->n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        const int32_t a = p->neox ? i : 2 * i, b = p->neox ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}
