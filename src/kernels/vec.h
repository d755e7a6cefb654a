// vec.h - small element-wise vector ops of the forward pass (f32 unless noted). Each runs the form of the
// instruction set kvt_kernels_isa() names (vec.c: one table of kernels per ISA; the scalar forms are the reference).
#ifndef KVT_VEC_H
#define KVT_VEC_H

#include <math.h>
#include <stdint.h>

#include "dtype.h"

// y[i] *= s
void kvt_vec_scale_f32(float *y, float s, int64_t n);
// y[i] = y[i] * a + x[i] * b, each product rounded, then the sum (no fused multiply-add): the fold of two
// online-softmax states' accumulators; the SIMD form the same bits.
void kvt_vec_fold_f32(float *y, float a, const float *x, float b, int64_t n);
// y[i] += s * x[i], x of type t (F32 or F16): accumulates a V row
void kvt_vec_mad(kvt_type t, float *y, const void *x, float s, int64_t n);
// y[k] += s[r] * x_r[k] over rows r = 0..n_rows-1 in order, x_r = (const char *)x + r * stride bytes,
// of type t (F32 or F16): the attention's V accumulation for a tile of positions. The result is
// bitwise that of n_rows calls of kvt_vec_mad.
void kvt_vec_mad_rows(kvt_type t, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n);
// y[i] = expf(x[i] - m) for i in [0, n), with libm's expf bits (the SIMD kernels: glibc's expf as 8 lanes where it
// matches this libm, checked once; libm's expf otherwise). y may be x.
void kvt_vec_expf_sub(const float *x, float m, float *y, int64_t n);
// The online-softmax merge of one tile of n >= 0 attention scores s[0..n) and F16 V rows x_r = (const char *)v +
// r * stride (hdv elements each) into a running state (*m, *l, o[0..hdv)), computed as llama.cpp's CPU flash
// attention computes it for an F16 V cache (ggml's flash_attn_ext over one KV chunk): positions in order; a
// score above the running max becomes the max, o is scaled by ms = expf(old max - score) with each element
// rounded to f16, and the position's weight is w = 1; otherwise ms = 1 and w = expf(score - max). Then
// o[k] = f16(fma(x_r[k], w, o[k])) (one rounding to f32, then to f16: o holds f16 values in f32) and
// *l = fma(*l, ms, w). A fresh state is *m = -INFINITY, *l = 0, o = 0. Scalar and SIMD give the same bits,
// but on CPUs with AVX512-FP16 the AVX-512 kernels take the first hdv & ~127 columns in f16 arithmetic, as
// llama.cpp's build for such a CPU does: o = fma(x_r, f16(w), o) and o = o * f16(ms), one rounding to f16 each.
// nh heads that read the same V rows at once (GQA: the query heads of one KV head), each on its own: head h
// has scores s + h * s_stride, state m[h], l[h], o + h * o_stride (interleaving them hides the f16 round
// trips' latency).
void kvt_attn_merge_f16(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride, float *m,
                        float *l, float *o, int64_t o_stride, int64_t hdv);
// How many of hdv V columns kvt_attn_merge_f16 takes in f16 arithmetic under the current ISA: hdv & ~127 where the
// AVX-512 kernels run on a CPU with AVX512-FP16 and the build's compiler knows that ISA (GCC 12, clang 16), else 0.
int64_t kvt_attn_merge_f16_cols(int64_t hdv);
// Attention scores of nq query heads against np f16 K rows (the K.Q of an F16 cache): for h in [0, nq), x in [0, np),
// s[h * s_stride + x] = d * scale, d the F16 type's vec_dot of this ISA (kvt_type_ops_get(KVT_TYPE_F16)->vec_dot)
// of K row x (k + x * k_stride bytes, n elements) with query h, so the same bits as one vec_dot call per pair.
// q: the queries as f16 rows (q16 + h * q_stride elements, the dot type) and the same values as f32 rows (qf +
// h * q_stride); the SIMD kernels read qf (no per-dot conversion) and convert each K row once for two heads, the
// scalar path calls the vec_dot with q16. Nothing is allocated; no error.
void kvt_attn_kq_f16(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                     int64_t q_stride, int nq, float scale, float *s, int64_t s_stride);
// kvt_attn_kq_f16 with the K rows already converted to f32: kf + x * kf_stride floats (n elements each, every one an
// f16 value, so the conversion was exact), e.g. a tile's rows converted once for many queries. Each score has the
// bits kvt_attn_kq_f16 gives for those f16 rows (the same F16 vec_dot per pair, times scale). Returns 1 when done;
// 0, nothing written, where this ISA has no such form (the AVX2 kernels have it for n a multiple of 32, the AVX-512
// ones for n a multiple of 64, the scalar ones not): the caller then uses kvt_attn_kq_f16 on the f16 rows.
// kvt_attn_kq_kf32_ok(n) says beforehand which it will be.
int kvt_attn_kq_kf32(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride, int nq,
                     float scale, float *s, int64_t s_stride);
int kvt_attn_kq_kf32_ok(int64_t n);
// l[i] += s[i * s_stride + x] for x = 0..n-1 in order, for each i in [0, nh): nh running sums of score rows, each
// the chain of single-precision adds in position order (the online softmax's sums l); the SIMD form takes 8 rows at
// once (8 x 8 transposes, one lane a row), the same adds per row, so the same bits.
void kvt_vec_sum_rows_f32(float *l, const float *s, int64_t s_stride, int nh, int64_t n);
// The running max after n values: max(m, x[0..n)) as the loop m = x[i] > m ? x[i] : m computes it (NaNs in x skipped),
// the SIMD form in any order: the same value (a zero's sign aside: max(-0, +0) may be either).
float kvt_vec_max_f32(const float *x, int64_t n, float m);
// y[i] += x[i]
void kvt_vec_add_f32(float *y, const float *x, int64_t n);
// y = x / rms(x) * w  (w may be NULL: no weight); the f32 squares summed in double, as llama.cpp
void kvt_rmsnorm_f32(float *y, const float *x, const float *w, int64_t n, float eps);
// g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + e^-x) with e^x computed as llama.cpp's CPU build computes it
// for SwiGLU: on the AVX-512 and AVX2 kernels ggml's vector expf (ARM optimized-routines' polynomial, its
// AVX-512 or AVX2 form: they round differently), on the scalar ones libm's expf. Every element is computed
// alone (the same bits whatever n and the element's place), so ranges may be split freely; ggml's libm tail
// of a row whose length is not a multiple of the vector width is not reproduced.
void kvt_swiglu_f32(float *g, const float *u, int64_t n);
// internal: kvt_swiglu_f32 on the SIMD kernels (quant_avx2.c, built once per ISA)
void kvt_swiglu_avx2(float *g, const float *u, int64_t n);
void kvt_swiglu_avx512(float *g, const float *u, int64_t n);
// g[i] = gelu(g[i]) * u[i], gelu in its tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gemma3),
// computed as llama.cpp's CPU build computes GEGLU: 0 for x <= -10, x for x >= 10, otherwise gelu tabulated per
// f16 value (x rounded to f16, the result rounded to f16)
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
// cs: [n_rot] scratch filled with (cos, sin) pairs for pos, by kvt_rope_cache: as ggml's rope cache, theta
// starts at pos and is multiplied by base^(-2/n_rot) per pair (float), the angle is freq_scale * (theta / ff[i]).
void kvt_rope_cache(const kvt_rope_params *p, int64_t pos, float *cs);
// The rotation of each pair (x0, x1) by (c, s), with the products fused as llama.cpp's CPU build computes them
// (ggml's rotate_pairs compiled by GCC with FMA contraction; checked against its Q/K dumps):
//   x0' = fma(x0, c, -(x1 * s)),  x1' = fma(x0, s, x1 * c).
void kvt_rope_apply(const kvt_rope_params *p, const float *cs, float *x);
// internal: kvt_rope_apply compiled with FMA (quant_avx2.c), the same operations as the fmaf calls inline
void kvt_rope_apply_avx2(const kvt_rope_params *p, const float *cs, float *x);
// The rotation itself, for kvt_rope_apply and its FMA-compiled twin.
static inline void kvt_rope_rotate(const kvt_rope_params *p, const float *cs, float *x) {
    const int32_t half = p->n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        const int32_t a = p->neox ? i : 2 * i, b = p->neox ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[a], x1 = x[b];
        x[a] = fmaf(x0, c, -(x1 * s));
        x[b] = fmaf(x0, s, x1 * c);
    }
}

#endif
