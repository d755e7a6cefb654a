// vec.h - small element-wise vector ops of the forward pass (f32 unless noted).
#ifndef KVT_VEC_H
#define KVT_VEC_H

#include <stdint.h>

#include "dtype.h"

// y[i] *= s
void kvt_vec_scale_f32(float *y, float s, int64_t n);
// y[i] += s * x[i], x of type t (F32 or F16): accumulates a V row
void kvt_vec_mad(kvt_type t, float *y, const void *x, float s, int64_t n);
// y[k] += s[r] * x_r[k] over rows r = 0..n_rows-1 in order, x_r = (const char *)x + r * stride bytes,
// of type t (F32 or F16): the attention's V accumulation for a tile of positions. The result is
// bitwise that of n_rows calls of kvt_vec_mad.
void kvt_vec_mad_rows(kvt_type t, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n);
// Softmax weights of one tile of n >= 1 attention scores, normalised within the tile as llama.cpp's
// non-flash attention normalises a whole row: e[x] = exp(s[x] - max), their sum in double, w[x] = e[x] *
// (float)(1 / sum), then w rounded to the dot type of the V rows' type vt (F16 V: to f16, so that P.V
// multiplies f16 by f16 as llama.cpp's F16 x F16 matmul does; F32 V: unchanged). s[0..n) becomes w;
// *max_out gets the max, and the return value is the sum of e (the tile's mass relative to that max).
float kvt_softmax_tile(kvt_type vt, float *s, int64_t n, float *max_out);
// y[i] += x[i]
void kvt_vec_add_f32(float *y, const float *x, int64_t n);
// y = x / rms(x) * w  (w may be NULL: no weight); sum of squares in double, as llama.cpp
void kvt_rmsnorm_f32(float *y, const float *x, const float *w, int64_t n, float eps);
// g[i] = silu(g[i]) * u[i]
void kvt_swiglu_f32(float *g, const float *u, int64_t n);
// g[i] = gelu(g[i]) * u[i], gelu in its tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gemma3)
void kvt_geglu_f32(float *g, const float *u, int64_t n);

// Rotary embedding of one head vector x [head_dim] at position pos, rotating
// the first n_rot dims: neox=0 rotates adjacent pairs (2i, 2i+1), neox=1 the
// pairs (i, i + n_rot/2). theta_i = pos * freq_scale * base^(-2i/n_rot) / ff[i].
typedef struct {
    int32_t n_rot;
    int neox;
    float freq_base;
    float freq_scale;
    const float *freq_factors; // [n_rot/2] or NULL
} kvt_rope_params;
// cs: [n_rot] scratch filled with (cos, sin) pairs for pos, by kvt_rope_cache.
void kvt_rope_cache(const kvt_rope_params *p, int64_t pos, float *cs);
void kvt_rope_apply(const kvt_rope_params *p, const float *cs, float *x);

#endif
