// quant_avx2.c - AVX2/FMA/F16C kernels: dot products (single row and one
// weight row against up to KVT_DOT_MULTI_MAX activation rows), activation
// quantizers (q8_0, q8_1, q8_K) and f16 row conversion.
//
// Compiled with -mavx2 -mfma -mf16c (the Makefile's rule for *_avx2.c); only
// called after runtime detection. quant_avx512.c includes this file with
// KVT_SIMD_AVX512 defined, which switches the integer dot primitive to
// AVX512-VNNI (256-bit, EVEX) and the float kernels to 512-bit vectors, and
// renames the exported table.
//
// Every kernel is written once as an always-inline body with the number of
// activation rows NT as a parameter; the dispatchers instantiate NT = 1..4 so
// that accumulators live in registers.
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "bits_avx2.h"
#include "f16.h"
#include "fvec_avx.h"
#include "matmul.h"
#include "quant.h"
#include "quant_ops_table.h"
#include "vec.h"

#ifdef KVT_SIMD_AVX512
#define KVT_TABLE_FN kvt_type_ops_avx512_table
#else
#define KVT_TABLE_FN kvt_type_ops_avx2_table
#endif

#define INLINE static inline __attribute__((always_inline))
#define NTMAX KVT_DOT_MULTI_MAX
// Full unrolling of the small loops over rows/tokens/blocks keeps the
// accumulator arrays in registers.
#define UNROLL _Pragma("GCC unroll 16")

// ------------------------------------------------------------------ helpers


INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

INLINE __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INLINE __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

// Sum of products of signed bytes (x != -128).
INLINE __m256i dot_s8s8(__m256i x_abs, __m256i x, __m256i y) {
    return kvt_dot_u8s8(x_abs, _mm256_sign_epi8(y, x));
}

// 32 nibbles of 16 bytes: low nibbles in the low 128-bit lane, high in the high.
INLINE __m256i unpack_nibbles16(const uint8_t *q) {
    const __m128i v = loadu128(q);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

#define ROW(y, t, ys) ((const void *)((const char *)(y) + (size_t)(t) * (ys)))

_Static_assert(NTMAX == 4, "dispatchers instantiate 1..4");

// ------------------------------------------------------------- float types

// FV and fv_*: fvec_avx.h (the rows kernels and GEMM tiles reduce with the same operations)

// The horizontal sum of the float dots, as ggml's (GGML_F32x16_REDUCE / GGML_F32x8_REDUCE) ends.
#ifdef KVT_SIMD_AVX512
INLINE float dot_hsum(__m512 a) { return _mm512_reduce_add_ps(a); }
#else
INLINE float dot_hsum(__m256 a) {
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}
#endif

// Float dot bodies: 4 independent accumulators per activation row for NT=1
// (latency bound otherwise), 2 for larger NT; tail in double. For NT=1 (every single-row dot, the attention's
// K.Q among them) the sums are those of ggml's f16 dot on the same vector width (ggml_vec_dot_f16: four
// accumulators over 4*FV_N-wide steps, reduced (a0 + a2) + (a1 + a3), then across lanes, then the tail's
// products added in double), so that attention scores are llama.cpp's bits.
#define DEFINE_FLOAT_BODY(name, ET, LD, CVT)                                                        \
    INLINE void name##_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s,  \
                            int64_t ss) {                                                           \
        const ET *x = xv;                                                                           \
        const int U = NT == 1 ? 4 : 2;                                                              \
        FV acc[NTMAX][4];                                                                           \
        UNROLL for (int t = 0; t < NT; t++)                                                                \
            UNROLL for (int u = 0; u < U; u++) acc[t][u] = fv_zero();                                      \
        int64_t i = 0;                                                                              \
        for (; i + U * FV_N <= n; i += U * FV_N) {                                                  \
            UNROLL for (int u = 0; u < U; u++) {                                                           \
                const FV w = LD(x + i + u * FV_N);                                                  \
                UNROLL for (int t = 0; t < NT; t++) {                                                      \
                    const ET *y = ROW(yv, t, ys);                                                   \
                    acc[t][u] = fv_fma(w, LD(y + i + u * FV_N), acc[t][u]);                         \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        UNROLL for (int t = 0; t < NT; t++) {                                                              \
            const ET *y = ROW(yv, t, ys);                                                           \
            const FV a = U == 4 ? fv_add(fv_add(acc[t][0], acc[t][2]), fv_add(acc[t][1], acc[t][3]))  \
                                : fv_add(acc[t][0], acc[t][1]);                                     \
            double sum = dot_hsum(a);                                                               \
            for (int64_t j = i; j < n; j++) sum += (double)(CVT(x[j]) * CVT(y[j]));                 \
            s[t * ss] = (float)sum;                                                                 \
        }                                                                                           \
    }

#define ID_F32(v) (v)
DEFINE_FLOAT_BODY(f32, float, fv_ld, ID_F32)
DEFINE_FLOAT_BODY(f16, uint16_t, fv_ld_f16, kvt_f16_to_f32)
DEFINE_FLOAT_BODY(bf16, uint16_t, fv_ld_bf16, kvt_bf16_to_f32)
// Float types: the multi-row dot is the single-row dot per row (the bodies' accumulator count depends on NT,
// and a row must give the same bits alone or among others).
#define DEFINE_DISPATCH_ROWWISE(name)                                                                \
    static void name##_multi(int64_t n, const void *x, const void *y, size_t ys, int nt, float *s,    \
                             int64_t ss) {                                                           \
        for (int t = 0; t < nt; t++) name##_body(n, x, ROW(y, t, ys), 0, 1, s + t * ss, 0);          \
    }                                                                                                \
    static void name##_dot(int64_t n, float *s, const void *x, const void *y) {                      \
        name##_body(n, x, y, 0, 1, s, 0);                                                            \
    }
DEFINE_DISPATCH_ROWWISE(f32)
DEFINE_DISPATCH_ROWWISE(f16)
DEFINE_DISPATCH_ROWWISE(bf16)

// kvt_attn_kq_f16 (vec.h): the accumulation of H (1 or 2) query heads' dots against one f16 K row, as the F16 row
// dot above (f16_body with NT = 1) operation for operation: four accumulators over 4 * FV_N-wide steps, folded as
// (a0 + a2) + (a1 + a3) into sum[h]; the query read as f32 (its f16 values, exact), the K row loaded and converted
// once for the H heads. With kf32 the K row is given as f32 already (kvt_attn_kq_kf32: its f16 values, so the same
// sums). Returns the elements done (the rest is the caller's tail).
INLINE int64_t kq_acc(int64_t n, const void *k, bool kf32, const float *qf, int64_t q_stride, int H, FV *sum) {
    FV acc[2][4];
    UNROLL for (int h = 0; h < H; h++)
        UNROLL for (int u = 0; u < 4; u++) acc[h][u] = fv_zero();
    int64_t i = 0;
    for (; i + 4 * FV_N <= n; i += 4 * FV_N) {
        UNROLL for (int u = 0; u < 4; u++) {
            const FV w = kf32 ? fv_ld((const float *)k + i + u * FV_N) : fv_ld_f16((const uint16_t *)k + i + u * FV_N);
            UNROLL for (int h = 0; h < H; h++) acc[h][u] = fv_fma(w, fv_ld(qf + h * q_stride + i + u * FV_N), acc[h][u]);
        }
    }
    UNROLL for (int h = 0; h < H; h++) sum[h] = fv_add(fv_add(acc[h][0], acc[h][2]), fv_add(acc[h][1], acc[h][3]));
    return i;
}
INLINE int64_t kq_f16_acc(int64_t n, const uint16_t *k, const float *qf, int64_t q_stride, int H, FV *sum) {
    return kq_acc(n, k, false, qf, q_stride, H, sum);
}

// H heads' scores against one K row: the row dot's reduction (dot_hsum, the tail's products in double);
// s[h * s_stride] = that dot times scale, in float as the caller's d * scale.
INLINE void kq_f16_row(int64_t n, const uint16_t *k, const float *qf, int64_t q_stride, int H, float scale, float *s,
                       int64_t s_stride) {
    FV sum[2];
    const int64_t i = kq_f16_acc(n, k, qf, q_stride, H, sum);
    UNROLL for (int h = 0; h < H; h++) {
        const float *q = qf + h * q_stride;
        double d = dot_hsum(sum[h]);
        for (int64_t j = i; j < n; j++) d += (double)(kvt_f16_to_f32(k[j]) * q[j]);
        s[h * s_stride] = (float)d * scale;
    }
}

// kvt_attn_kq_kf32 (vec.h): the K rows given as f32 (kf + x * kf_stride floats, their f16 values), n a multiple
// of 4 * FV_N: kq_f16_acc's accumulation with the loads of f32 rows in place of the f16 conversions (the same
// values), so the same sums, reduced as kq_f16_pos4 / kq_f16_pos16 and kq_f16_row reduce them: the F16 vec_dot's bits.
INLINE int64_t kqf_acc(int64_t n, const float *k, const float *qf, int64_t q_stride, int H, FV *sum) {
    return kq_acc(n, k, true, qf, q_stride, H, sum);
}
INLINE void kqf_row(int64_t n, const float *k, const float *qf, int64_t q_stride, int H, float scale, float *s,
                    int64_t s_stride) {
    FV sum[2];
    kqf_acc(n, k, qf, q_stride, H, sum);
    UNROLL for (int h = 0; h < H; h++) s[h * s_stride] = (float)(double)dot_hsum(sum[h]) * scale;
}
// Positions [x0, np) of nq heads one K row at a time (two heads a row), the row kernels: K rows f16 (kf32 false:
// k + x * k_stride bytes) or f32 (kf32: k + x * k_stride floats).
INLINE void kq_rows(int64_t n, const void *k, bool kf32, int64_t k_stride, int64_t x0, int64_t np, const float *qf,
                    int64_t q_stride, int nq, float scale, float *s, int64_t s_stride) {
    for (int64_t x = x0; x < np; x++) {
        const uint16_t *kx = (const uint16_t *)((const char *)k + x * k_stride);
        const float *kfx = (const float *)k + x * k_stride;
        int h = 0;
        for (; kf32 && h + 2 <= nq; h += 2) kqf_row(n, kfx, qf + h * q_stride, q_stride, 2, scale, s + h * s_stride + x, s_stride);
        if (kf32 && h < nq) kqf_row(n, kfx, qf + h * q_stride, q_stride, 1, scale, s + h * s_stride + x, s_stride);
        for (; !kf32 && h + 2 <= nq; h += 2) kq_f16_row(n, kx, qf + h * q_stride, q_stride, 2, scale, s + h * s_stride + x, s_stride);
        if (!kf32 && h < nq) kq_f16_row(n, kx, qf + h * q_stride, q_stride, 1, scale, s + h * s_stride + x, s_stride);
    }
}

#ifndef KVT_SIMD_AVX512
// Four positions' scores of H (1 or 2) heads, n a multiple of 32 (no tail): each position's sums kq_f16_acc's, the
// four lane sums reduced together: per position its halves added (dot_hsum's first step), then hadd(A, B), hadd(C, D)
// and hadd of those give lane p = (t0 + t1) + (t2 + t3) of position p, dot_hsum's two hadds lane for lane. Without a
// tail the double round trip of the row kernel is exact, so these are its bits.
INLINE void kq_f16_pos4(int64_t n, const uint16_t *k, int64_t k_stride, const float *qf, int64_t q_stride, int H,
                        float scale, float *s, int64_t s_stride) {
    __m128 t[2][4];
    UNROLL for (int p = 0; p < 4; p++) {
        FV sum[2];
        kq_f16_acc(n, (const uint16_t *)((const char *)k + p * k_stride), qf, q_stride, H, sum);
        UNROLL for (int h = 0; h < H; h++) t[h][p] = _mm_add_ps(_mm256_castps256_ps128(sum[h]), _mm256_extractf128_ps(sum[h], 1));
    }
    UNROLL for (int h = 0; h < H; h++) {
        const __m128 d = _mm_hadd_ps(_mm_hadd_ps(t[h][0], t[h][1]), _mm_hadd_ps(t[h][2], t[h][3]));
        _mm_storeu_ps(s + h * s_stride, _mm_mul_ps(d, _mm_set1_ps(scale)));
    }
}

// Head dim 64, several heads: kq_f16_pos4's operations with the roles turned: the K rows of up to KQ64_ROWS positions
// converted to f32 once (kf) for all the heads, each head's query held in 8 registers while the FMAs read the rows
// from kf (one load an FMA where pos4 took two and a conversion per pair of heads). Per position the same
// accumulators (fma(k, q, 0) then fma(k, q, acc), a0..a3 by column), the same sum and reduction: the same bits.
enum { KQ64_ROWS = 32 };
INLINE void kq64_pos4(const float *kf, int64_t kf_stride, const __m256 *q, float scale, float *s) {
    __m128 t[4];
    UNROLL for (int p = 0; p < 4; p++) {
        const float *kr = kf + p * kf_stride;
        __m256 a[4];
        UNROLL for (int u = 0; u < 4; u++) a[u] = _mm256_fmadd_ps(_mm256_loadu_ps(kr + 8 * u), q[u], _mm256_setzero_ps());
        UNROLL for (int u = 0; u < 4; u++) a[u] = _mm256_fmadd_ps(_mm256_loadu_ps(kr + 32 + 8 * u), q[4 + u], a[u]);
        const __m256 sum = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
        t[p] = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    }
    const __m128 d = _mm_hadd_ps(_mm_hadd_ps(t[0], t[1]), _mm_hadd_ps(t[2], t[3]));
    _mm_storeu_ps(s, _mm_mul_ps(d, _mm_set1_ps(scale)));
}
// Positions [0, np & ~3) of nq heads, n = 64, the K rows as f32 (kf + x * kf_stride floats).
static void kq64_heads_f32(const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride, int nq,
                           float scale, float *s, int64_t s_stride) {
    for (int h = 0; h < nq; h++) {
        __m256 q[8];
        UNROLL for (int u = 0; u < 8; u++) q[u] = _mm256_loadu_ps(qf + h * q_stride + 8 * u);
        for (int64_t x = 0; x + 4 <= np; x += 4) kq64_pos4(kf + x * kf_stride, kf_stride, q, scale, s + h * s_stride + x);
    }
}
// Positions [0, np & ~3) of nq heads, n = 64.
static void kq64_heads(const void *k, int64_t k_stride, int64_t np, const float *qf, int64_t q_stride, int nq, float scale,
                       float *s, int64_t s_stride) {
    float kf[KQ64_ROWS * 64];
    for (int64_t x0 = 0; x0 + 4 <= np; x0 += KQ64_ROWS) {
        const int64_t nb = (np - x0 < KQ64_ROWS ? np - x0 : KQ64_ROWS) & ~(int64_t)3;
        for (int64_t x = 0; x < nb; x++) {
            const uint16_t *kx = (const uint16_t *)((const char *)k + (x0 + x) * k_stride);
            UNROLL for (int u = 0; u < 8; u++) _mm256_storeu_ps(kf + x * 64 + 8 * u, _mm256_cvtph_ps(loadu128(kx + 8 * u)));
        }
        kq64_heads_f32(kf, 64, nb, qf, q_stride, nq, scale, s + x0, s_stride);
    }
}

INLINE void kqf_pos4(int64_t n, const float *k, int64_t kf_stride, const float *qf, int64_t q_stride, int H, float scale,
                     float *s, int64_t s_stride) {
    __m128 t[2][4];
    UNROLL for (int p = 0; p < 4; p++) {
        FV sum[2];
        kqf_acc(n, k + p * kf_stride, qf, q_stride, H, sum);
        UNROLL for (int h = 0; h < H; h++) t[h][p] = _mm_add_ps(_mm256_castps256_ps128(sum[h]), _mm256_extractf128_ps(sum[h], 1));
    }
    UNROLL for (int h = 0; h < H; h++) {
        const __m128 d = _mm_hadd_ps(_mm_hadd_ps(t[h][0], t[h][1]), _mm_hadd_ps(t[h][2], t[h][3]));
        _mm_storeu_ps(s + h * s_stride, _mm_mul_ps(d, _mm_set1_ps(scale)));
    }
}
int kvt_attn_kq_kf32_avx2(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride,
                          int nq, float scale, float *s, int64_t s_stride) {
    if (n % (4 * FV_N)) return 0;
    int64_t x0 = 0;
    if (n == 64 && nq > 1) {
        kq64_heads_f32(kf, kf_stride, np, qf, q_stride, nq, scale, s, s_stride);
        x0 = np & ~(int64_t)3;
    }
    for (; x0 + 4 <= np; x0 += 4) {
        int h = 0;
        for (; h + 2 <= nq; h += 2)
            kqf_pos4(n, kf + x0 * kf_stride, kf_stride, qf + h * q_stride, q_stride, 2, scale, s + h * s_stride + x0, s_stride);
        if (h < nq) kqf_pos4(n, kf + x0 * kf_stride, kf_stride, qf + h * q_stride, q_stride, 1, scale, s + h * s_stride + x0, s_stride);
    }
    kq_rows(n, kf, true, kf_stride, x0, np, qf, q_stride, nq, scale, s, s_stride);
    return 1;
}
void kvt_attn_kq_f16_avx2(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                          int64_t q_stride, int nq, float scale, float *s, int64_t s_stride) {
    (void)q16;
    int64_t x0 = 0;
    if (n == 64 && nq > 1 && np >= 4) {
        kq64_heads(k, k_stride, np, qf, q_stride, nq, scale, s, s_stride);
        x0 = np & ~(int64_t)3;
    }
    if (n % (4 * FV_N) == 0) {
        for (; x0 + 4 <= np; x0 += 4) {
            const void *kx = (const char *)k + x0 * k_stride;
            int h = 0;
            for (; h + 2 <= nq; h += 2)
                kq_f16_pos4(n, kx, k_stride, qf + h * q_stride, q_stride, 2, scale, s + h * s_stride + x0, s_stride);
            if (h < nq) kq_f16_pos4(n, kx, k_stride, qf + h * q_stride, q_stride, 1, scale, s + h * s_stride + x0, s_stride);
        }
    }
    kq_rows(n, k, false, k_stride, x0, np, qf, q_stride, nq, scale, s, s_stride);
}
#endif

// ------------------------------------------- q8_0 and q4_0 (x q8_0 activations)

// Signed 8-bit weights of block ib.
INLINE __m256i q8_0_weights(const void *x, int64_t ib) {
    return loadu256(((const kvt_block_q8_0 *)x)[ib].qs);
}
INLINE float q8_0_wscale(const void *x, int64_t ib) { return h2f(((const kvt_block_q8_0 *)x)[ib].d); }
INLINE float q4_0_wscale(const void *x, int64_t ib) { return h2f(((const kvt_block_q4_0 *)x)[ib].d); }
INLINE float q5_0_wscale(const void *x, int64_t ib) { return h2f(((const kvt_block_q5_0 *)x)[ib].d); }

// Shared body of weight formats with one scale per 32 signed values, dotted
// with q8_0 activations. Two blocks per step with separate accumulators.
#define DEFINE_SYM32_BODY(name)                                                                     \
    INLINE void name##_body(int64_t n, const void *x, const void *yv, size_t ys, int NT, float *s,   \
                            int64_t ss) {                                                           \
        const int64_t nb = n / KVT_QK;                                                              \
        __m256 acc[NTMAX][2];                                                                       \
        UNROLL for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();                   \
        int64_t ib = 0;                                                                             \
        for (; ib + 2 <= nb; ib += 2) {                                                             \
            UNROLL for (int u = 0; u < 2; u++) {                                                           \
                const __m256i w = name##_weights(x, ib + u);                                        \
                const __m256i wa = _mm256_sign_epi8(w, w);                                          \
                const float dw = name##_wscale(x, ib + u);                                          \
                UNROLL for (int t = 0; t < NT; t++) {                                                      \
                    const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)ROW(yv, t, ys) + ib + u;      \
                    const __m256i p = dot_s8s8(wa, w, loadu256(y->qs));                             \
                    acc[t][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(y->d)), \
                                                acc[t][u]);                                         \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        for (; ib < nb; ib++) {                                                                     \
            const __m256i w = name##_weights(x, ib);                                                \
            const __m256i wa = _mm256_sign_epi8(w, w);                                              \
            const float dw = name##_wscale(x, ib);                                                  \
            UNROLL for (int t = 0; t < NT; t++) {                                                          \
                const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)ROW(yv, t, ys) + ib;              \
                const __m256i p = dot_s8s8(wa, w, loadu256(y->qs));                                 \
                acc[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(y->d)), acc[t][0]); \
            }                                                                                       \
        }                                                                                           \
        UNROLL for (int t = 0; t < NT; t++) s[t * ss] = kvt_hsum8(_mm256_add_ps(acc[t][0], acc[t][1]));      \
    }

DEFINE_SYM32_BODY(q8_0)

// q4_0 and q5_0 in their order on every ISA (matmul.h: the scalar reference's): per block the exact int32 total S of
// the products (q - o) * y (o = 8, q5_0 16), then s = s + (float(S) * dx) * dy in one chain. The values unsigned and
// the offset as an integer: exact for any activation byte, -128 included (the sign trick is not). (matmul.c runs their
// matrices through q40x8.h's kernels in the same order; this is the per-row dot of the other callers.)
INLINE void q50_body(int64_t n, const void *x, const void *yv, size_t ys, int NT, float *s, int64_t ss, int q5) {
    const int64_t nb = n / KVT_QK;
    float acc[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const __m256i one8 = _mm256_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ib++) {
        const kvt_block_q5_0 *b5 = (const kvt_block_q5_0 *)x + ib;
        const __m256i u = q5 ? _mm256_or_si256(unpack_nibbles16(b5->qs), kvt_bits32_to_0x10(b5->qh))
                             : unpack_nibbles16(((const kvt_block_q4_0 *)x)[ib].qs);
        const float dw = q5 ? q5_0_wscale(x, ib) : q4_0_wscale(x, ib);
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)ROW(yv, t, ys) + ib;
            const __m256i yq = loadu256(y->qs);
            const __m256i p = _mm256_sub_epi32(kvt_dot_u8s8(u, yq), _mm256_slli_epi32(kvt_dot_u8s8(one8, yq), q5 ? 4 : 3));
            acc[t] = acc[t] + ((float)hsum_epi32(p) * dw) * h2f(y->d);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = acc[t];
}
INLINE void q4_0_body(int64_t n, const void *x, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    q50_body(n, x, yv, ys, NT, s, ss, 0);
}
INLINE void q5_0_body(int64_t n, const void *x, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    q50_body(n, x, yv, ys, NT, s, ss, 1);
}
KVT_DOT_DISPATCH(q8_0)
KVT_DOT_DISPATCH(q4_0)
KVT_DOT_DISPATCH(q5_0)

// ------------------------------------------------ q4_1 (x q8_1 activations)

// llama.cpp's order (ggml_vec_dot_q4_1_q8_1 on x86): one 8-lane accumulator over the blocks in order, the
// m * s terms in a scalar FMA chain, hsum + that chain at the end (matmul.h).
INLINE void q4_1_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_q4_1 *x = xv;
    const int64_t nb = n / KVT_QK;
    __m256 acc[NTMAX];
    float msum[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps(), msum[t] = 0;
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i w = unpack_nibbles16(x[ib].qs);
        const float dw = h2f(x[ib].d), mw = h2f(x[ib].m);
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_1 *y = (const kvt_block_q8_1 *)ROW(yv, t, ys) + ib;
            const __m256i p = kvt_dot_u8s8(w, loadu256(y->qs));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(y->d)), _mm256_cvtepi32_ps(p), acc[t]);
            msum[t] = fmaf(mw, h2f(y->s), msum[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = kvt_hsum8(acc[t]) + msum[t];
}
KVT_DOT_DISPATCH(q4_1)

// ------------------------------------------------- K-quants (x q8_K activations)


// Software prefetch of the weights KQ_PF bytes ahead (decode streams a matrix once from DRAM; the hardware
// prefetchers alone leave one core short of it): the lines of the super-block at p + KQ_PF.
#ifndef KQ_PF
#define KQ_PF 4096
#endif
#define KQ_PREFETCH(p, size)                                                                        \
    for (size_t pf_ = 0; KQ_PF && pf_ < (size); pf_ += 64) _mm_prefetch((const char *)(p) + KQ_PF + pf_, _MM_HINT_T0)

// sum_j m[j] * (bsums[2j] + bsums[2j+1]) for one q8_K block.
INLINE int k_min_dot(const uint8_t m[8], const kvt_block_q8_K *y) {
    const __m128i b0 = _mm_loadu_si128((const __m128i *)y->bsums);
    const __m128i b1 = _mm_loadu_si128((const __m128i *)y->bsums + 1);
    const __m128i bs = _mm_hadd_epi16(b0, b1); // 8 sums of 32
    uint64_t m64;
    memcpy(&m64, m, 8);
    const __m128i mv = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m64));
    __m128i p = _mm_madd_epi16(mv, bs);
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0x4e));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xb1));
    return _mm_cvtsi128_si32(p);
}

// q4_K / q5_K share everything but the high bit; HB selects q5_K. Per super-block the exact integer
// total S of the scaled products (|S| < 2^27), then acc = fma(float(S), d * dy, acc) in one scalar chain
// (matmul.h): the order that lets gemm_avx2.c's 8-row tile sum a sub-block's products in int16 first.
#define DEFINE_K45_BODY(name, BT, HB)                                                               \
    INLINE void name##_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s,  \
                            int64_t ss) {                                                           \
        const BT *x = xv;                                                                           \
        const int64_t nb = n / KVT_QK_K;                                                            \
        const __m256i m4 = _mm256_set1_epi8(0x0F);                                                  \
        float acc[NTMAX], macc[NTMAX];                                                              \
        UNROLL for (int t = 0; t < NT; t++) acc[t] = 0, macc[t] = 0;                                \
        for (int64_t ib = 0; ib < nb; ib++) {                                                       \
            KQ_PREFETCH(x + ib, sizeof(BT));                                                        \
            uint8_t sc[8], mn[8];                                                                   \
            kvt_k_scales_unpack(x[ib].scales, sc, mn);                                                  \
            uint64_t sc64;                                                                          \
            memcpy(&sc64, sc, 8);                                                                   \
            /* the 8 scales as int16 in both 128-bit lanes; scale j to every word: one byte shuffle */ \
            const __m256i scw = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc64))); \
            const float d = h2f(x[ib].d), dmin = h2f(x[ib].dmin);                                   \
            __m256i isum[NTMAX];                                                                    \
            UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();                          \
            __m256i hb = HB ? loadu256((const uint8_t *)&x[ib] + offsetof(kvt_block_q5_K, qh))      \
                            : _mm256_setzero_si256();                                               \
            UNROLL for (int c = 0; c < 4; c++) {                                                           \
                const __m256i q = loadu256(x[ib].qs + 32 * c);                                      \
                __m256i lo = _mm256_and_si256(q, m4);                                               \
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);                         \
                if (HB) {                                                                           \
                    const __m256i one = _mm256_set1_epi8(1);                                        \
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));      \
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4)); \
                    hb = _mm256_srli_epi16(hb, 2);                                                  \
                }                                                                                   \
                const __m256i s0 = _mm256_shuffle_epi8(scw, _mm256_set1_epi16((short)(0x0100 + 0x0202 * 2 * c))); \
                const __m256i s1 = _mm256_shuffle_epi8(scw, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1)))); \
                UNROLL for (int t = 0; t < NT; t++) {                                                      \
                    const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;          \
                    const __m256i p0 = _mm256_maddubs_epi16(lo, loadu256(y->qs + 64 * c));          \
                    const __m256i p1 = _mm256_maddubs_epi16(hi, loadu256(y->qs + 64 * c + 32));     \
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(p0, s0),  \
                                                                         _mm256_madd_epi16(p1, s1))); \
                }                                                                                   \
            }                                                                                       \
            UNROLL for (int t = 0; t < NT; t++) {                                                          \
                const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;              \
                acc[t] = fmaf((float)hsum_epi32(isum[t]), d * y->d, acc[t]);                        \
                macc[t] += dmin * y->d * (float)k_min_dot(mn, y);                                   \
            }                                                                                       \
        }                                                                                           \
        UNROLL for (int t = 0; t < NT; t++) s[t * ss] = acc[t] - macc[t];                           \
    }

DEFINE_K45_BODY(q4_K, kvt_block_q4_K, 0)
DEFINE_K45_BODY(q5_K, kvt_block_q5_K, 1)
KVT_DOT_DISPATCH(q4_K)
KVT_DOT_DISPATCH(q5_K)

// q6_K: values are used unsigned (0..63) and the offset 32 is removed with the
// activation block sums: sum sc*(q-32)*y = sum sc*q*y - 32 * sum_g sc_g*bsum_g.
// Per super-block the exact integer total, then one scalar fma (matmul.h), as q4_K.
// Super-block ib of the q6_K row x against NT q8_K rows (stride ys) into the chains acc[t].
INLINE void q6_K_sb(const kvt_block_q6_K *x, int64_t ib, const void *yv, size_t ys, int NT, float *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const int8_t *sc = x[ib].scales;
    const __m128i sc8 = loadu128(sc);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    // the scale words of groups 8h .. 8h + 7 in both 128-bit lanes
    const __m256i scw[2] = {_mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16)),
                            _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16, 1))};
    __m256i isum[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) {
        const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
        // start from -32 * sum_g sc_g * bsum_g
        const __m256i off = _mm256_madd_epi16(sc16, loadu256(y->bsums));
        isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
    }
    UNROLL for (int h = 0; h < 2; h++) {
        const __m256i qa = loadu256(x[ib].ql + 64 * h);
        const __m256i qb = loadu256(x[ib].ql + 64 * h + 32);
        const __m256i qh = loadu256(x[ib].qh + 32 * h);
        // value bits 4-5: bits 2k, 2k + 1 of qh moved in place within each byte (16-bit shifts, masked)
        __m256i v[4];
        v[0] = _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        v[1] = _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), m4), _mm256_and_si256(qh, m30));
        v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        UNROLL for (int k = 0; k < 4; k++) {
            // scale groups 8h + 2k (every word of the low lane) and 8h + 2k + 1 (high lane)
            const int j = 2 * k;
            const __m256i six = _mm256_set_m128i(_mm_set1_epi16((short)((2 * j + 3) << 8 | (2 * j + 2))),
                                                 _mm_set1_epi16((short)((2 * j + 1) << 8 | 2 * j)));
            const __m256i scv = _mm256_shuffle_epi8(scw[h], six);
            UNROLL for (int t = 0; t < NT; t++) {
                const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
                const __m256i p = _mm256_maddubs_epi16(v[k], loadu256(y->qs + 128 * h + 32 * k));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, scv));
            }
        }
    }
    const float d = h2f(x[ib].d);
    UNROLL for (int t = 0; t < NT; t++) {
        const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
        acc[t] = fmaf((float)hsum_epi32(isum[t]), d * y->d, acc[t]);
    }
}

INLINE void q6_K_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_q6_K *x = xv;
    const int64_t nb = n / KVT_QK_K;
    float acc[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = 0;
    for (int64_t ib = 0; ib < nb; ib++) {
        KQ_PREFETCH(x + ib, sizeof(kvt_block_q6_K));
        q6_K_sb(x, ib, yv, ys, NT, acc);
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = acc[t];
}

// Decode: Y[r] for the nr q6_K rows at W (stride wrs) against the q8_K row y. Rows i and h + i (h = half the rows,
// rounded up) super-block by super-block, so that the reads are two streams the prefetchers follow at once; each
// row's chain is q6_K_dot's (the same bits).
#ifndef KVT_SIMD_AVX512
// A study form (matmul.h kvt_kernels_decode_variant(KVT_TYPE_Q6_K) % 10 = 4): the rows at W + k * step (k < ns)
// super-block by super-block in turn, each its own chain (q6_K_dot's): Y[k * ystep].
INLINE void q6k_rows_ns_avx2(int ns, int64_t nb, const char *W, int64_t step, const void *y, float *Y, int64_t ystep) {
    float acc[4] = {0, 0, 0, 0};
    for (int64_t ib = 0; ib < nb; ib++)
        UNROLL for (int k = 0; k < ns; k++) {
            const kvt_block_q6_K *x = (const kvt_block_q6_K *)(W + k * step);
            KQ_PREFETCH(x + ib, sizeof(kvt_block_q6_K));
            q6_K_sb(x, ib, y, 0, 1, &acc[k]);
        }
    UNROLL for (int k = 0; k < ns; k++) Y[k * ystep] = acc[k];
}
void kvt_q6k_rows_avx2(int64_t n, const void *W, size_t wrs, int64_t nr, const void *y, float *Y) {
    const int64_t nb = n / KVT_QK_K, h = (nr + 1) / 2;
    // the study forms 4, 14, 24 (24: matmul.c gives the call's whole range, not a strip): 4 streams; else the pairs below
    if (kvt_kernels_decode_variant(KVT_TYPE_Q6_K) % 10 == 4) { // rows r + k * h4 (h4 = the rows / 4), pairs, then one
        const int64_t h4 = nr / 4, rs = (int64_t)wrs;
        const char *w = W;
        int64_t r = 0;
        for (; r < h4; r++) q6k_rows_ns_avx2(4, nb, w + r * rs, h4 * rs, y, Y + r, h4);
        for (r = 4 * h4; r + 2 <= nr; r += 2) q6k_rows_ns_avx2(2, nb, w + r * rs, rs, y, Y + r, 1);
        if (r < nr) q6k_rows_ns_avx2(1, nb, w + r * rs, 0, y, Y + r, 0);
        return;
    }
    for (int64_t i = 0; i < nr - h; i++) {
        const kvt_block_q6_K *xa = (const kvt_block_q6_K *)((const char *)W + i * wrs);
        const kvt_block_q6_K *xb = (const kvt_block_q6_K *)((const char *)W + (h + i) * wrs);
        float a = 0, b = 0;
        for (int64_t ib = 0; ib < nb; ib++) {
            KQ_PREFETCH(xa + ib, sizeof(kvt_block_q6_K));
            q6_K_sb(xa, ib, y, 0, 1, &a);
            KQ_PREFETCH(xb + ib, sizeof(kvt_block_q6_K));
            q6_K_sb(xb, ib, y, 0, 1, &b);
        }
        Y[i] = a, Y[h + i] = b;
    }
    if (nr & 1) q6_K_body(n, (const char *)W + (h - 1) * wrs, y, 0, 1, Y + h - 1, 0);
}

// q6_K_r decode (quant.h): the exact integer total of one super-block against the prepared activation block y
// (kvt_q6r_prep: the layout's order, bsums negated). Per pair j: A = ql & 63 (one op), B = the nibble | ql's top
// two bits (4-5 ops); the int16 pair sums of A and B (each at most 2 * 63 * 128: their sum fits) added, then one
// madd with the scale words of the pair's groups (one shuffle of the 16 scales as words: lane 0 groups 2j, 2j + 1,
// lane 1 groups 8 + 2j, 8 + 2j + 1, the same control in both lanes). About 50 vector operations where q6_K_sb has 70.
INLINE __m256i q6r_isum(const kvt_block_q6_K *x, const kvt_block_q8_K *y) {
    const __m256i m3f = _mm256_set1_epi8(0x3F), m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(x->scales));
    // -32 * sum_g sc_g * bsum_g (|32 sc| <= 4096 fits the words)
    __m256i isum = _mm256_madd_epi16(_mm256_slli_epi16(sc16, 5), loadu256(y->bsums));
    const __m256i n0 = loadu256(x->qh), n1 = loadu256(x->qh + 32);
    UNROLL for (int j = 0; j < 4; j++) {
        const __m256i p = loadu256(x->ql + 32 * j);
        const __m256i nb = j == 0 ? n0 : j == 1 ? _mm256_srli_epi16(n0, 4) : j == 2 ? n1 : _mm256_srli_epi16(n1, 4);
        const __m256i a = _mm256_and_si256(p, m3f);
        const __m256i b = _mm256_or_si256(_mm256_and_si256(nb, m4), _mm256_and_si256(_mm256_srli_epi16(p, 2), m30));
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(a, loadu256(y->qs + 64 * j)),
                                           _mm256_maddubs_epi16(b, loadu256(y->qs + 64 * j + 32)));
        // words 0-3 of a lane: scale word 2j, words 4-7: 2j + 1 (bytes 2w, 2w + 1 of word w)
        const long long w0 = (long long)(0x0100010001000100ull + 0x0202020202020202ull * (uint64_t)(2 * j));
        const long long w1 = (long long)(0x0100010001000100ull + 0x0202020202020202ull * (uint64_t)(2 * j + 1));
        const __m256i scv = _mm256_shuffle_epi8(sc16, _mm256_set_epi64x(w1, w0, w1, w0));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s, scv));
    }
    return isum;
}
INLINE int q6r_total(const kvt_block_q6_K *x, const kvt_block_q8_K *y) { return hsum_epi32(q6r_isum(x, y)); }
INLINE void q6r_sb(const kvt_block_q6_K *x, const kvt_block_q8_K *y, float *acc) {
    *acc = fmaf((float)q6r_total(x, y), h2f(x->d) * y->d, *acc);
}
// The prefetch of the block at p, its 4 lines (210 bytes: 4 lines at 64-byte steps reach every line once the blocks
// follow each other). npf (a constant: no run-time tests in the loop; the hints constants for clang): 0 none, 1 into
// L2 pf ahead, 2 into L2 pf ahead and into L1 KVT_X8_PF_NEAR (bits_avx2.h) ahead, 3 into L1 only pf ahead, 4 the q6_K
// rows' prefetch (into L1 KQ_PF ahead).
INLINE void q6r_prefetch(const kvt_block_q6_K *p, int64_t pf, const int npf) {
    if (npf == 4) KQ_PREFETCH(p, sizeof(kvt_block_q6_K));
    if (npf >= 1 && npf <= 3) UNROLL for (int l = 0; l < 4; l++) kvt_x8_prefetch_line((const char *)p + 64 * l, pf, npf);
}
// Y[r] for the nr q6_K_r rows at W (stride wrs) against the prepared row y, prefetch npf (q6r_prefetch) pf ahead: rows
// i and h + i in turn, as kvt_q6k_rows_avx2, each row's chain q6_K_dot's.
INLINE void q6r_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const kvt_block_q8_K *y, float *Y, int64_t pf,
                     const int npf) {
    const int64_t nb = n / KVT_QK_K, h = (nr + 1) / 2;
    for (int64_t i = 0; i < nr - h; i++) {
        const kvt_block_q6_K *xa = (const kvt_block_q6_K *)((const char *)W + i * wrs);
        const kvt_block_q6_K *xb = (const kvt_block_q6_K *)((const char *)W + (h + i) * wrs);
        float a = 0, b = 0;
        for (int64_t ib = 0; ib < nb; ib++) {
            q6r_prefetch(xa + ib, pf, npf);
            q6r_sb(xa + ib, y + ib, &a);
            q6r_prefetch(xb + ib, pf, npf);
            q6r_sb(xb + ib, y + ib, &b);
        }
        Y[i] = a, Y[h + i] = b;
    }
    if (nr & 1) {
        const kvt_block_q6_K *x = (const kvt_block_q6_K *)((const char *)W + (h - 1) * wrs);
        float a = 0;
        for (int64_t ib = 0; ib < nb; ib++) {
            q6r_prefetch(x + ib, pf, npf);
            q6r_sb(x + ib, y + ib, &a);
        }
        Y[h - 1] = a;
    }
}
// The default decode (ns 2) and a study form (ns 4: kvt_kernels_decode_variant(KVT_TYPE_Q6_K_R) 24): Y[k * ystep] for
// the ns q6_K_r rows at
// W + k * step, super-block by super-block in turn, the ns integer totals of a super-block reduced together (two
// hadd levels and one 128-bit add: the same int32 sums modulo 2^32 as hsum_epi32, so the same totals) and the rows'
// chains acc_k = fma(float(total_k), d_k * y_d, acc_k) lane-wise in one 128-bit vector (the scalar chain's
// operations, so q6_K_dot's bits). Against q6r_rows' hsum_epi32 and scalar fma per row and super-block: 1.09-1.13x
// in L2 on the AMD Zen 3 (one thread, paired), 1.01-1.05x from DRAM (docs/log/BENCHMARKS-kernels-4.md, q8k).
INLINE void q6r_rows_ns(const int ns, int64_t nb, const char *W, int64_t step, const kvt_block_q8_K *y, float *Y,
                        int64_t ystep, int64_t pf, const int npf) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        __m256i s[4];
        uint16_t dh[4] = {0, 0, 0, 0};
        UNROLL for (int k = 0; k < ns; k++) {
            const kvt_block_q6_K *x = (const kvt_block_q6_K *)(W + k * step) + ib;
            q6r_prefetch(x, pf, npf);
            s[k] = q6r_isum(x, y + ib);
            memcpy(&dh[k], &x->d, sizeof dh[k]);
        }
        // lane 4h + k of t: row k's quarter h of its 8 lanes (k < 2 for ns 2: lanes 2, 3 row 0's and 1's again)
        const __m256i t01 = _mm256_hadd_epi32(s[0], s[1]);
        const __m256i t = _mm256_hadd_epi32(t01, ns == 4 ? _mm256_hadd_epi32(s[2], s[3]) : t01);
        const __m128i tot = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        __m128i dv;
        if (ns == 4) dv = _mm_setr_epi16((short)dh[0], (short)dh[1], (short)dh[2], (short)dh[3], 0, 0, 0, 0);
        else dv = _mm_setr_epi16((short)dh[0], (short)dh[1], (short)dh[0], (short)dh[1], 0, 0, 0, 0);
        const __m128 d = _mm_mul_ps(_mm_cvtph_ps(dv), _mm_set1_ps(y[ib].d));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(tot), d, acc);
    }
    float a[4];
    _mm_storeu_ps(a, acc);
    UNROLL for (int k = 0; k < ns; k++) Y[k * ystep] = a[k];
}
// The rows of q6r_rows in ns (2, 4) streams (q6r_rows_ns): rows r + k * h (h = the rows / ns), then pairs, then one.
INLINE void q6r_rows_st(const int ns, int64_t n, const void *W, size_t wrs, int64_t nr, const kvt_block_q8_K *y,
                        float *Y, int64_t pf, const int npf) {
    const int64_t nb = n / KVT_QK_K, h = nr / ns, rs = (int64_t)wrs;
    const char *w = W;
    int64_t r = 0;
    for (; r < h; r++) q6r_rows_ns(ns, nb, w + r * rs, h * rs, y, Y + r, h, pf, npf);
    for (r = ns * h; r + 2 <= nr; r += 2) q6r_rows_ns(2, nb, w + r * rs, rs, y, Y + r, 1, pf, npf);
    if (r < nr) {
        const kvt_block_q6_K *x = (const kvt_block_q6_K *)(w + r * rs);
        float a = 0;
        for (int64_t ib = 0; ib < nb; ib++) {
            q6r_prefetch(x + ib, pf, npf);
            q6r_sb(x + ib, y + ib, &a);
        }
        Y[r] = a;
    }
}
// The q6_K_r rows (matmul.h): pairs (q6r_rows_st), or a study form's loop. Prefetch: with the CPU's decode prefetch
// (pf = kvt_kernels_prefetch_type(KVT_TYPE_Q6_K_R) > 0: Intel, AMD Zen 3) into L2 pf ahead and into L1 KVT_X8_PF_NEAR
// ahead (paired from DRAM on the Intel Xeon, against the q6_K rows' one prefetch into L1 KQ_PF ahead: 1.04-1.07x,
// docs/log/BENCHMARKS-kernels-3.md, k11s), or into L1 only where pf is no farther than KVT_X8_PF_NEAR (as kqx8.h's
// x8_sb_z; the Zen 3's 1024: paired from DRAM 1.02-1.09x against L2 at 4096 and L1 at 1024, z5k6); else the q6_K
// rows' prefetch. Study forms (matmul.h kvt_kernels_decode_variant(KVT_TYPE_Q6_K_R)), on q6r_rows, whose pairs reduce
// row by row: 8 the q6_K rows' prefetch, 10 none, 11 / 12 / 13 into L2 only / L2 and L1 / L1 only pf ahead whatever pf
// is, 20 the default prefetch; 22 the default, 24 four rows at once.
void kvt_q6r_rows_avx2(int64_t n, const void *W, size_t wrs, int64_t nr, const void *yv, float *Y) {
    const int64_t pf = kvt_kernels_prefetch_type(KVT_TYPE_Q6_K_R);
    const int v = kvt_kernels_decode_variant(KVT_TYPE_Q6_K_R);
    const kvt_block_q8_K *y = yv;
    const int k = v == 8 ? 4 : v >= 10 && v <= 13 ? v - 10 : pf <= 0 ? 4 : kvt_x8_pf_kind(pf);
    if (v == 8 || (v >= 10 && v <= 13) || v == 20) { // q6r_rows: the pairs reduced row by row (the default before q8k)
        switch (k) {
        case 0: q6r_rows(n, W, wrs, nr, y, Y, pf, 0); break;
        case 1: q6r_rows(n, W, wrs, nr, y, Y, pf, 1); break;
        case 2: q6r_rows(n, W, wrs, nr, y, Y, pf, 2); break;
        case 3: q6r_rows(n, W, wrs, nr, y, Y, pf, 3); break;
        default: q6r_rows(n, W, wrs, nr, y, Y, pf, 4); break;
        }
        return;
    }
    const int ns = v == 24 ? 4 : 2; // the default: pairs reduced together (q6r_rows_ns); 24: four rows
    if (ns == 4 && k == 2) q6r_rows_st(4, n, W, wrs, nr, y, Y, pf, 2);
    else if (ns == 4 && k == 3) q6r_rows_st(4, n, W, wrs, nr, y, Y, pf, 3);
    else if (ns == 4) q6r_rows_st(4, n, W, wrs, nr, y, Y, pf, 4);
    else if (k == 2) q6r_rows_st(2, n, W, wrs, nr, y, Y, pf, 2);
    else if (k == 3) q6r_rows_st(2, n, W, wrs, nr, y, Y, pf, 3);
    else q6r_rows_st(2, n, W, wrs, nr, y, Y, pf, 4);
}
#endif
KVT_DOT_DISPATCH(q6_K)

// ------------------------------------------------------ activation quantizers

INLINE __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

INLINE float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// Rounds (half to even) v[0..4) * id to int8 and stores 32 bytes in order;
// returns the 8 partial i32 sums (lanes: elements {0..7}, ... per vector).
INLINE __m256i round_pack32(const __m256 v[4], float id, int8_t *out) {
    const __m256 idv = _mm256_set1_ps(id);
    __m256i i[4];
    UNROLL for (int k = 0; k < 4; k++)
        i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    const __m256i p01 = _mm256_packs_epi32(i[0], i[1]);
    const __m256i p23 = _mm256_packs_epi32(i[2], i[3]);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return sum;
}

static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        __m256 v[4];
        UNROLL for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(src + 8 * k);
        const __m256 mx = _mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])), _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])));
        const float amax = hmax_ps(mx), d = amax / 127.f;
        const float id = amax != 0 ? 127.f / amax : 0.f;
        b[i].d = kvt_f32_to_f16(d);
        (void)round_pack32(v, id, b[i].qs);
    }
}

static void q8_1_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        __m256 v[4];
        UNROLL for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(src + 8 * k);
        const __m256 mx = _mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])), _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])));
        const float amax = hmax_ps(mx), d = amax / 127.f;
        const float id = amax != 0 ? 127.f / amax : 0.f;
        const int sum = hsum_epi32(round_pack32(v, id, b[i].qs));
        b[i].d = kvt_f32_to_f16(d);
        b[i].s = kvt_f32_to_f16((float)sum * d);
    }
}

static void q8_K_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int k = 0; k < KVT_QK_K; k += 8) mx = _mm256_max_ps(mx, abs_ps(_mm256_loadu_ps(src + k)));
        const float amax = hmax_ps(mx);
        if (amax == 0) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        // signed value of the first element of largest magnitude
        float max = 0;
        const __m256 am = _mm256_set1_ps(amax);
        for (int k = 0; k < KVT_QK_K; k += 8) {
            const int mask = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(src + k)), am, _CMP_EQ_OQ));
            if (mask) {
                max = src[k + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        const float iscale = -127.f / max;
        for (int g = 0; g < KVT_QK_K / 32; g++) {
            __m256 v[4];
            UNROLL for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(src + 32 * g + 8 * k);
            (void)round_pack32(v, iscale, b[i].qs + 32 * g);
            // |iscale * x| <= 127 up to rounding, and packs saturates at 127
            const __m256i q = loadu256(b[i].qs + 32 * g);
            const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            const __m256i s2 = _mm256_hadd_epi32(s4, s4);
            const __m256i s1 = _mm256_hadd_epi32(s2, s2);
            b[i].bsums[2 * g] = (int16_t)_mm256_extract_epi32(s1, 0);
            b[i].bsums[2 * g + 1] = (int16_t)_mm256_extract_epi32(s1, 4);
        }
        b[i].d = 1.f / iscale;
    }
}

// ------------------------------------------------------------------ SwiGLU

// e^x as llama.cpp's SwiGLU computes it on this ISA (ggml_v_expf, from ARM's optimized-routines): x = n ln2 + b
// with n = round(x / ln2) (ln2 split in two), e^b by a degree-5 polynomial in b, then scaled by 2^n. The
// AVX-512 form adds the 1 inside the polynomial and scales with scalef (|n| > 192: 0 or inf); the AVX2 form
// keeps it out, j = p(b) - 1, and returns 2^n * j + 2^n, with the scale split in two past |n| > 126.
#define EXP_SHIFT 0x1.8p23f // 1.5 * 2^23: adding it rounds to an integer, kept in the low mantissa bits
// x = n ln2 + b: declares z (x / ln2 + EXP_SHIFT), n, b and u = b * b, with the vector type V and its operations
#define EXP_REDUCE(V, FMA, FNMA, SUB, MUL, SET, x)                                                              \
    const V z = FMA(x, SET(0x1.715476p+0f), SET(EXP_SHIFT));                                                  \
    const V n = SUB(z, SET(EXP_SHIFT));                                                                       \
    const V b = FNMA(n, SET(0x1.7f7d1cp-20f), FNMA(n, SET(0x1.62e4p-1f), x));                                 \
    const V u = MUL(b, b)
#define EXP_POLY(FMA, SET, b, u, tail) \
    FMA(FMA(FMA(SET(0x1.0e4020p-7f), b, SET(0x1.573e2ep-5f)), u, FMA(SET(0x1.555e66p-3f), b, SET(0x1.fffdb6p-2f))), u, tail)
#ifdef KVT_SIMD_AVX512
#define SWIGLU_FN kvt_swiglu_avx512
#define SW_V __m512
#define SW_N 16
INLINE __m512 exp_ggml(__m512 x) {
    EXP_REDUCE(__m512, _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_sub_ps, _mm512_mul_ps, _mm512_set1_ps, x);
    const __m512 j = EXP_POLY(_mm512_fmadd_ps, _mm512_set1_ps, b, u,
                              _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 r = _mm512_scalef_ps(j, n);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    if (!big) return r;
    const __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    return _mm512_mask_blend_ps(big, r, _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps()));
}
INLINE __m512 sw_load(const float *p, int64_t c) { return _mm512_maskz_loadu_ps((__mmask16)((1u << c) - 1u), p); }
INLINE void sw_store(float *p, __m512 v, int64_t c) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << c) - 1u), v); }
#define sw_ld _mm512_loadu_ps
#define sw_st _mm512_storeu_ps
#define sw_set1 _mm512_set1_ps
#define sw_mul _mm512_mul_ps
#define sw_add _mm512_add_ps
#define sw_sub _mm512_sub_ps
#define sw_div _mm512_div_ps
#else
#define SWIGLU_FN kvt_swiglu_avx2
#define SW_V __m256
#define SW_N 8
INLINE __m256 exp_ggml(__m256 x) {
    EXP_REDUCE(__m256, _mm256_fmadd_ps, _mm256_fnmadd_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_set1_ps, x);
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23); // n in the exponent field
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f)))); // 2^n
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 wide = _mm256_cmp_ps(an, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 j = EXP_POLY(_mm256_fmadd_ps, _mm256_set1_ps, b, u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(wide)) return _mm256_fmadd_ps(j, k, k);
    // 2^n as s1 * s2 (s1 = 2^127 or 2^-125 by the sign of n), or s1 * s1 (0 or inf) past |n| > 192
    const __m256i gneg = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                          _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(gneg, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, gneg));
    const __m256 huge = _mm256_cmp_ps(an, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 split = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    const __m256 mid = _mm256_blendv_ps(_mm256_fmadd_ps(k, j, k), split, wide);
    return _mm256_blendv_ps(mid, _mm256_mul_ps(s1, s1), huge);
}
INLINE __m256 sw_load(const float *p, int64_t c) {
    float t[8] = {0};
    memcpy(t, p, (size_t)c * sizeof(float));
    return _mm256_loadu_ps(t);
}
INLINE void sw_store(float *p, __m256 v, int64_t c) {
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(p, t, (size_t)c * sizeof(float));
}
#define sw_ld _mm256_loadu_ps
#define sw_st _mm256_storeu_ps
#define sw_set1 _mm256_set1_ps
#define sw_mul _mm256_mul_ps
#define sw_add _mm256_add_ps
#define sw_sub _mm256_sub_ps
#define sw_div _mm256_div_ps
#endif

// g = silu(g) * u, silu(x) = x / (1 + e^(0 - x)), as ggml's vector SwiGLU; the last partial vector masked.
INLINE SW_V swiglu_v(SW_V x, SW_V y) {
    const SW_V e = exp_ggml(sw_sub(sw_set1(0.0f), x));
    return sw_mul(sw_div(x, sw_add(sw_set1(1.0f), e)), y);
}
void SWIGLU_FN(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + SW_N <= n; i += SW_N) sw_st(g + i, swiglu_v(sw_ld(g + i), sw_ld(u + i)));
    if (i < n) sw_store(g + i, swiglu_v(sw_load(g + i, n - i), sw_load(u + i, n - i)), n - i);
}

// ---------------------------------------------------------- attention merge factors
// kvt_attn_merge_factors with the exponentials four at a time. expf_libm4 is glibc's expf (sysdeps/ieee754/flt-32/
// e_expf.c, the __expf_fma variant this x86-64 libm runs: 2^(k/32) from a table times a cubic in double, with
// the fused operations its disassembly shows) for |x| < 88; other lanes go to libm. The attention merge must
// give llama.cpp's bits, which take libm's expf, so libm_expf_matches() compares the two on 2^16 arguments once
// and the scalar loop is used where they differ (another libm). Checked here against every float in
// [-88, 88] (glibc 2.36, all equal).
static const uint64_t EXP2_32[32] = { // bits of 2^(i/32) rounded to double, minus i << 47
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
INLINE __m256d pd_bits(uint64_t b) { return _mm256_castsi256_pd(_mm256_set1_epi64x((long long)b)); }
// 2^(k/32) times the cubic in r for 4 lanes, in double (to be rounded to float)
INLINE __m256d expf_core4(__m128 xv) {
    const __m256d xd = _mm256_cvtps_pd(xv);
    const __m256d inv_ln2n = pd_bits(0x40471547652b82fe), shift = pd_bits(0x4338000000000000);
    const __m256d kd0 = _mm256_fmadd_pd(inv_ln2n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd0);
    const __m256d kd = _mm256_sub_pd(kd0, shift);
    const __m256d r = _mm256_fmsub_pd(inv_ln2n, xd, kd);
    const __m256i t = _mm256_add_epi64(_mm256_i64gather_epi64((const long long *)EXP2_32, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8),
                                       _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(pd_bits(0x3ebc6af84b912394), r, pd_bits(0x3f2ebfce50fac4f3));
    const __m256d r2 = _mm256_mul_pd(r, r);
    const __m256d v = _mm256_fmadd_pd(pd_bits(0x3f962e42ff0c52d6), r, _mm256_set1_pd(1.0));
    return _mm256_mul_pd(_mm256_fmadd_pd(z, r2, v), _mm256_castsi256_pd(t));
}
static void expf_libm4(const float *x, float *y) {
    const __m128 xv = _mm_loadu_ps(x);
    _mm_storeu_ps(y, _mm256_cvtpd_ps(expf_core4(xv)));
    // |x| >= 88, inf, nan: libm's own special cases
    const int far = _mm_movemask_ps(_mm_cmpge_ps(_mm_andnot_ps(_mm_set1_ps(-0.0f), xv), _mm_set1_ps(88.0f))) |
                    _mm_movemask_ps(_mm_cmpunord_ps(xv, xv));
    for (int k = 0; k < 4; k++)
        if (far >> k & 1) y[k] = expf(x[k]);
}

// ys[k] = expf(xs[k]) for the lanes k < nl whose bit is set in far (libm's special cases)
static void expf_lanes(const float *xs, float *ys, unsigned far, int nl) {
    for (int k = 0; k < nl; k++)
        if (far >> k & 1) ys[k] = expf(xs[k]);
}

// expf_libm4 on 8 lanes in registers (the same operations per lane), inline: the callers' loops overlap the table
// gathers of successive calls
INLINE __m256 expf_libm8(__m256 x) {
    __m256 y = _mm256_set_m128(_mm256_cvtpd_ps(expf_core4(_mm256_extractf128_ps(x, 1))),
                               _mm256_cvtpd_ps(expf_core4(_mm256_castps256_ps128(x))));
    const int far = _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(88.0f), _CMP_GE_OQ),
                                                    _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    if (far) { // |x| >= 88, inf, nan: libm's own special cases
        float xs[8], ys[8];
        _mm256_storeu_ps(xs, x);
        _mm256_storeu_ps(ys, y);
        expf_lanes(xs, ys, (unsigned)far, 8);
        y = _mm256_loadu_ps(ys);
    }
    return y;
}

static int libm_expf_matches(void) {
    static _Atomic int ok = -1;
    int v = atomic_load_explicit(&ok, memory_order_relaxed);
    if (v < 0) {
        v = 1;
        float x[4], y[4];
        for (uint32_t i = 0; i < 65536 && v; i += 4) {
            for (int k = 0; k < 4; k++) x[k] = -100.0f + 200.0f * (float)(i + (uint32_t)k) / 65536.0f;
            expf_libm4(x, y);
            for (int k = 0; k < 4; k++) v &= y[k] == expf(x[k]);
        }
        atomic_store_explicit(&ok, v, memory_order_relaxed);
    }
    return v;
}

#ifdef KVT_SIMD_AVX512
// The same ms, w, *m and *l as kvt_attn_merge_factors (n <= KVT_MERGE_ROWS): the running max first, then the
// exponentials of the same arguments, then the sum's FMA chain in position order.
static void merge_factors(const float *s, int64_t n, float *m, float *l, float *ms, float *w) {
    if (!libm_expf_matches()) {
        kvt_attn_merge_factors(s, n, m, l, ms, w);
        return;
    }
    float M = *m, L = *l, a[KVT_MERGE_ROWS + 3], e[KVT_MERGE_ROWS + 3];
    unsigned char up[KVT_MERGE_ROWS];
    for (int64_t r = 0; r < n; r++) {
        up[r] = s[r] > M;
        a[r] = up[r] ? M - s[r] : s[r] - M;
        M = up[r] ? s[r] : M;
    }
    for (int64_t r = n; r < ((n + 3) & ~(int64_t)3); r++) a[r] = 0.0f;
    for (int64_t r = 0; r < n; r += 4) expf_libm4(a + r, e + r);
    for (int64_t r = 0; r < n; r++) {
        ms[r] = up[r] ? e[r] : 1.0f;
        w[r] = up[r] ? 1.0f : e[r];
        L = fmaf(L, ms[r], w[r]);
    }
    *m = M;
    *l = L;
}

// kvt_attn_merge_f16 with 16-lane vectors (per element the same operations as the AVX2 and scalar code).
INLINE __m512 round_f16_zmm(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }
#define MERGE_HEADS 4 // heads merged together: 4 x 4 zmm accumulators

// On CPUs with AVX512-FP16, llama.cpp's build for them (-march=native) accumulates the first hdv & ~127 columns
// of V in f16 arithmetic (ggml's vector f16 path of vec_mad_f16 / vec_scale_f16, 128 halves per step): o =
// fma(v, f16(w), o) and o = o * f16(ms), each rounded once to f16; the other columns as the scalar code.
#define FP16_COLS(hdv) ((hdv) & ~(int64_t)127)
// The compiler must know AVX512-FP16 arithmetic (GCC 12, clang 16); a build without it (e.g. the fuzz build with an
// older clang) merges every column as the CPUs without that ISA do.
#if (defined(__clang__) && __clang_major__ >= 16) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12)
#define KVT_HAVE_FP16_MERGE 1
#else
#define KVT_HAVE_FP16_MERGE 0
#endif
#if KVT_HAVE_FP16_MERGE
static int cpu_fp16(void) {
    static _Atomic int has = -1;
    int h = atomic_load_explicit(&has, memory_order_relaxed);
    if (h < 0) atomic_store_explicit(&has, h = __builtin_cpu_supports("avx512fp16") != 0, memory_order_relaxed);
    return h;
}
__attribute__((target("avx512fp16,avx512f,avx512bw,avx512vl")))
static void merge_fp16_cols(int H, int64_t nr, float ms[][KVT_MERGE_ROWS], float w[][KVT_MERGE_ROWS], const char *v0,
                            int64_t stride, float *o, int64_t o_stride, int64_t np) {
    for (int64_t i = 0; i < np; i += 64) { // 64 columns (two vectors of 32 halves) per head at a time
        __m512h acc[MERGE_HEADS][2];
        UNROLL for (int h = 0; h < MERGE_HEADS; h++)
            UNROLL for (int k = 0; k < 2; k++) {
                const float *oh = o + h * o_stride + i + 32 * k;
                acc[h][k] = h < H ? _mm512_castsi512_ph(_mm512_inserti64x4(
                                        _mm512_castsi256_si512(_mm512_cvtps_ph(_mm512_loadu_ps(oh), _MM_FROUND_TO_NEAREST_INT)),
                                        _mm512_cvtps_ph(_mm512_loadu_ps(oh + 16), _MM_FROUND_TO_NEAREST_INT), 1))
                                  : _mm512_setzero_ph();
            }
        for (int64_t r = 0; r < nr; r++) {
            const uint16_t *hp = (const uint16_t *)(v0 + r * stride) + i;
            const __m512h x0 = _mm512_castsi512_ph(_mm512_loadu_si512((const void *)hp));
            const __m512h x1 = _mm512_castsi512_ph(_mm512_loadu_si512((const void *)(hp + 32)));
            UNROLL for (int h = 0; h < MERGE_HEADS; h++) {
                if (h >= H) break;
                if (ms[h][r] != 1.0f) {
                    const __m512h sv = _mm512_set1_ph((_Float16)ms[h][r]);
                    acc[h][0] = _mm512_mul_ph(acc[h][0], sv);
                    acc[h][1] = _mm512_mul_ph(acc[h][1], sv);
                }
                const __m512h wv = _mm512_set1_ph((_Float16)w[h][r]);
                acc[h][0] = _mm512_fmadd_ph(x0, wv, acc[h][0]);
                acc[h][1] = _mm512_fmadd_ph(x1, wv, acc[h][1]);
            }
        }
        UNROLL for (int h = 0; h < MERGE_HEADS; h++) {
            if (h >= H) break;
            UNROLL for (int k = 0; k < 2; k++) {
                const __m512i b = _mm512_castph_si512(acc[h][k]);
                float *oh = o + h * o_stride + i + 32 * k;
                _mm512_storeu_ps(oh, _mm512_cvtph_ps(_mm512_castsi512_si256(b)));
                _mm512_storeu_ps(oh + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(b, 1)));
            }
        }
    }
}
#else
static int cpu_fp16(void) { return 0; }
static void merge_fp16_cols(int H, int64_t nr, float ms[][KVT_MERGE_ROWS], float w[][KVT_MERGE_ROWS], const char *v0,
                            int64_t stride, float *o, int64_t o_stride, int64_t np) {
    (void)H, (void)nr, (void)ms, (void)w, (void)v0, (void)stride, (void)o, (void)o_stride, (void)np;
}
#endif

// kvt_attn_merge_f16_cols (vec.h) on AVX-512: the columns merged in f16 arithmetic, llama.cpp's AVX512-FP16 form.
int64_t kvt_attn_merge_f16_cols_avx512(int64_t hdv) { return cpu_fp16() ? FP16_COLS(hdv) : 0; }

void kvt_attn_merge_f16_avx512(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride,
                               float *m, float *l, float *o, int64_t o_stride, int64_t hdv) {
    for (int h0 = 0; h0 < nh; h0 += MERGE_HEADS) {
        const int H = nh - h0 < MERGE_HEADS ? nh - h0 : MERGE_HEADS;
        for (int64_t r0 = 0; r0 < n; r0 += KVT_MERGE_ROWS) {
            const int64_t nr = n - r0 < KVT_MERGE_ROWS ? n - r0 : KVT_MERGE_ROWS;
            float ms[MERGE_HEADS][KVT_MERGE_ROWS], w[MERGE_HEADS][KVT_MERGE_ROWS];
            for (int h = 0; h < H; h++) merge_factors(s + (h0 + h) * s_stride + r0, nr, m + h0 + h, l + h0 + h, ms[h], w[h]);
            const char *v0 = (const char *)v + r0 * stride;
            const int64_t np = cpu_fp16() ? FP16_COLS(hdv) : 0;
            if (np) merge_fp16_cols(H, nr, ms, w, v0, stride, o + h0 * o_stride, o_stride, np);
            for (int64_t i = np; i < hdv; i += 64) { // 64 columns at a time in registers, the last group masked
                const int64_t c = hdv - i < 64 ? hdv - i : 64;
                __mmask16 mk[4];
                __m512 acc[MERGE_HEADS][4];
                UNROLL for (int k = 0; k < 4; k++) {
                    const int64_t ck = c - 16 * k;
                    mk[k] = ck >= 16 ? (__mmask16)0xFFFF : ck <= 0 ? (__mmask16)0 : (__mmask16)((1u << ck) - 1u);
                }
                UNROLL for (int h = 0; h < MERGE_HEADS; h++)
                    UNROLL for (int k = 0; k < 4; k++)
                        acc[h][k] = h < H ? _mm512_maskz_loadu_ps(mk[k], o + (h0 + h) * o_stride + i + 16 * k) : _mm512_setzero_ps();
                for (int64_t r = 0; r < nr; r++) {
                    const uint16_t *hp = (const uint16_t *)(v0 + r * stride) + i;
                    __m512 x[4];
                    UNROLL for (int k = 0; k < 4; k++) x[k] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk[k], hp + 16 * k));
                    UNROLL for (int h = 0; h < MERGE_HEADS; h++) {
                        if (h >= H) break;
                        if (ms[h][r] != 1.0f) {
                            const __m512 sv = _mm512_set1_ps(ms[h][r]);
                            UNROLL for (int k = 0; k < 4; k++) acc[h][k] = round_f16_zmm(_mm512_mul_ps(acc[h][k], sv));
                        }
                        const __m512 wv = _mm512_set1_ps(w[h][r]);
                        UNROLL for (int k = 0; k < 4; k++) acc[h][k] = round_f16_zmm(_mm512_fmadd_ps(x[k], wv, acc[h][k]));
                    }
                }
                UNROLL for (int h = 0; h < MERGE_HEADS; h++) {
                    if (h >= H) break;
                    UNROLL for (int k = 0; k < 4; k++) _mm512_mask_storeu_ps(o + (h0 + h) * o_stride + i + 16 * k, mk[k], acc[h][k]);
                }
            }
        }
    }
}
#endif

// ------------------------------------------------------------- small vector ops

#ifdef KVT_SIMD_AVX512
#define VEC_FN(name) name##_avx512
#else
#define VEC_FN(name) name##_avx2
#endif
// kvt_vec_scale_f32, kvt_vec_fold_f32, kvt_vec_max_f32 (vec.h) on FV_N lanes, the tails scalar: per element the
// scalar loops' operations (fold: y = y * a + x * b, two roundings of the products, one of the sum, no FMA), so the
// same bits; the max the same value (four FV_N-lane maxima, a NaN of x losing to the other operand as the scalar
// loop skips it, folded).
void VEC_FN(kvt_vec_scale_f32)(float *y, float s, int64_t n) {
    const FV sv = fv_set1(s);
    int64_t i = 0;
    for (; i + FV_N <= n; i += FV_N) fv_st(y + i, fv_mul(fv_ld(y + i), sv));
    for (; i < n; i++) y[i] *= s;
}
void VEC_FN(kvt_vec_fold_f32)(float *y, float a, const float *x, float b, int64_t n) {
    const FV av = fv_set1(a), bv = fv_set1(b);
    int64_t i = 0;
    for (; i + FV_N <= n; i += FV_N) fv_st(y + i, fv_add(fv_mul(fv_ld(y + i), av), fv_mul(fv_ld(x + i), bv)));
    for (; i < n; i++) {
        const float ya = y[i] * a, xb = x[i] * b;
        y[i] = ya + xb;
    }
}
float VEC_FN(kvt_vec_max_f32)(const float *x, int64_t n, float m) {
    int64_t i = 0;
    if (n >= FV_N) {
        FV a[4];
        UNROLL for (int u = 0; u < 4; u++) a[u] = fv_set1(m);
        for (; i + 4 * FV_N <= n; i += 4 * FV_N)
            UNROLL for (int u = 0; u < 4; u++) a[u] = fv_max(fv_ld(x + i + FV_N * u), a[u]);
        for (; i + FV_N <= n; i += FV_N) a[0] = fv_max(fv_ld(x + i), a[0]);
        const float r = fv_hmax(fv_max(fv_max(a[0], a[1]), fv_max(a[2], a[3])));
        m = r > m ? r : m;
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

// kvt_vec_mad_rows' register block: y[0..8 FV_N) += s[r] * x_r[..] for rows r in order (x_r = (const char *)x +
// r * stride, f16 or f32), y held in 8 vectors (8 independent FMA chains), the FMAs of kvt_vec_mad per element.
INLINE void mad_rows_cols(int f16, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows) {
    FV acc[8];
    UNROLL for (int k = 0; k < 8; k++) acc[k] = fv_ld(y + FV_N * k);
    for (int64_t r = 0; r < n_rows; r++) {
        const FV sv = fv_set1(s[r]);
        const char *row = (const char *)x + r * stride;
        if (f16) UNROLL for (int k = 0; k < 8; k++) acc[k] = fv_fma(fv_ld_f16((const uint16_t *)row + FV_N * k), sv, acc[k]);
        else UNROLL for (int k = 0; k < 8; k++) acc[k] = fv_fma(fv_ld((const float *)row + FV_N * k), sv, acc[k]);
    }
    UNROLL for (int k = 0; k < 8; k++) fv_st(y + FV_N * k, acc[k]);
}

#ifdef KVT_SIMD_AVX512
#include "attn_avx512.h"
#endif

// ------------------------------------------------------------- f16 rows

#ifndef KVT_SIMD_AVX512
void kvt_f16_to_f32_row_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(loadu128(src + i)));
    for (; i < n; i++) dst[i] = kvt_f16_to_f32(src[i]);
}

void kvt_vec_mad_avx2(int f16, float *y, const void *x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    if (f16) {
        const uint16_t *h = x;
        for (; i + 16 <= n; i += 16) {
            const __m256 a = _mm256_cvtph_ps(loadu128(h + i)), b = _mm256_cvtph_ps(loadu128(h + i + 8));
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, sv, _mm256_loadu_ps(y + i)));
            _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(b, sv, _mm256_loadu_ps(y + i + 8)));
        }
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_cvtph_ps(loadu128(h + i)), sv, _mm256_loadu_ps(y + i)));
        for (; i < n; i++) y[i] += s * kvt_f16_to_f32(h[i]);
    } else {
        const float *f = x;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(f + i), sv, _mm256_loadu_ps(y + i)));
        for (; i < n; i++) y[i] += s * f[i];
    }
}

// y[k] += s[r] * x_r[k] for rows r = 0..n_rows-1 in order: the same FMAs, in the same order per element,
// as n_rows calls of kvt_vec_mad_avx2, with y held in registers 64 columns at a time (mad_rows_cols).
void kvt_vec_mad_rows_avx2(int f16, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) mad_rows_cols(f16, y + i, (const char *)x + i * (f16 ? 2 : 4), stride, s, n_rows);
    if (i < n) { // columns past the last multiple of 64: row by row, as kvt_vec_mad_avx2 does them
        const size_t es = f16 ? 2 : 4;
        for (int64_t r = 0; r < n_rows; r++) kvt_vec_mad_avx2(f16, y + i, (const char *)x + r * stride + i * es, s[r], n - i);
    }
}

// y[i] = expf(x[i] - m): libm's expf bits (expf_libm8 where libm_expf_matches(), else libm itself).
void kvt_vec_expf_sub_avx2(const float *x, float m, float *y, int64_t n) {
    int64_t i = 0;
    if (libm_expf_matches()) {
        const __m256 mv = _mm256_set1_ps(m);
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf_libm8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)));
    }
    for (; i < n; i++) y[i] = expf(x[i] - m);
}

// 8 rows at a time: their 8 x 8 blocks transposed (lane i: row i), added column by column in position order; the
// rows past the last multiple of 8 and the columns past the last block, scalar, in the same order.
void kvt_vec_sum_rows_f32_avx2(float *l, const float *s, int64_t s_stride, int nh, int64_t n) {
    int i = 0;
    for (; i + 8 <= nh; i += 8) {
        const float *r = s + i * s_stride;
        __m256 acc = _mm256_loadu_ps(l + i);
        int64_t x = 0;
        for (; x + 8 <= n; x += 8) {
            __m256 v[8];
            UNROLL for (int k = 0; k < 8; k++) v[k] = _mm256_loadu_ps(r + k * s_stride + x);
            const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
            const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
            const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
            const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            // column c (position x + c) of the 8 rows: c = 0..3 from the low halves, 4..7 from the high ones
            const __m256 c[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                                 _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                                 _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                                 _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
            UNROLL for (int k = 0; k < 8; k++) acc = _mm256_add_ps(acc, c[k]);
        }
        _mm256_storeu_ps(l + i, acc);
        for (int k = 0; k < 8 && x < n; k++) {
            float a = l[i + k];
            for (int64_t y = x; y < n; y++) a += r[k * s_stride + y];
            l[i + k] = a;
        }
    }
    for (; i < nh; i++) {
        float a = l[i];
        for (int64_t x = 0; x < n; x++) a += s[i * s_stride + x];
        l[i] = a;
    }
}

INLINE __m256 round_f16_ps(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

// The factors of up to 8 heads (G) over nr <= KVT_MERGE_ROWS positions, one head a lane: per lane and position
// the operations of kvt_attn_merge_factors (the running max by a compare and blends, the exponentials of the same
// arguments by expf_libm4, the sum's FMA chain in position order), so the same ms, w, *m and *l; the branches and
// serial chains of 8 heads become one vector each. Out: ms[r][h], w[r][h]; nz[r] bit h: ms[r][h] != 1.
static void merge_factors8(int G, const float *s, int64_t s_stride, int64_t nr, float *m, float *l, float (*ms)[8],
                           float (*w)[8], uint8_t *nz) {
    if (!libm_expf_matches()) {
        for (int h = 0; h < G; h++) {
            float msh[KVT_MERGE_ROWS], wh[KVT_MERGE_ROWS];
            kvt_attn_merge_factors(s + h * s_stride, nr, m + h, l + h, msh, wh);
            for (int64_t r = 0; r < nr; r++) ms[r][h] = msh[r], w[r][h] = wh[r];
        }
        for (int64_t r = 0; r < nr; r++) {
            nz[r] = 0;
            for (int h = 0; h < G; h++) nz[r] |= (uint8_t)((ms[r][h] != 1.0f) << h);
        }
        return;
    }
    float a[KVT_MERGE_ROWS][8], mi[8] = {0}, li[8] = {0}; // padding lanes: 0 (exp(0) = 1)
    for (int h = 0; h < G; h++) mi[h] = m[h], li[h] = l[h];
    for (int64_t r = 0; r < nr; r++) {
        UNROLL for (int h = 0; h < 8; h++) a[r][h] = h < G ? s[h * s_stride + r] : 0.0f; // the scores, transposed
    }
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 M = _mm256_loadu_ps(mi), L = _mm256_loadu_ps(li);
    for (int64_t r = 0; r < nr; r++) {
        const __m256 x = _mm256_loadu_ps(a[r]), u = _mm256_cmp_ps(x, M, _CMP_GT_OQ); // s > M (false for NaN)
        const __m256 e = expf_libm8(_mm256_blendv_ps(_mm256_sub_ps(x, M), _mm256_sub_ps(M, x), u));
        M = _mm256_blendv_ps(M, x, u);
        const __m256 msv = _mm256_blendv_ps(one, e, u), wv = _mm256_blendv_ps(e, one, u);
        L = _mm256_fmadd_ps(L, msv, wv);
        _mm256_storeu_ps(ms[r], msv);
        _mm256_storeu_ps(w[r], wv);
        nz[r] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(msv, one, _CMP_NEQ_UQ));
    }
    _mm256_storeu_ps(mi, M);
    _mm256_storeu_ps(li, L);
    for (int h = 0; h < G; h++) m[h] = mi[h], l[h] = li[h];
}

// H <= 3 query heads (lanes c .. c + H - 1 of the factors) that read the same V rows, 8 * K columns at a time: each
// head's o in H x K registers, each V vector converted once for the H heads, the weights broadcast from w[r] at each
// use (one load; vectors broadcast ahead cost a broadcast and a store each per call). Per element and position the
// scalar code's operations (the scale when ms != 1, then the FMA, each rounded to f16): the heads and columns only
// give the rounding chains, which are latency-bound alone, company.
INLINE void merge_blk(const int H, const int K, int64_t nr, int c, const float (*ms)[8], const uint8_t *nz,
                      const float (*w)[8], const char *v0, int64_t stride, float *o, int64_t o_stride) {
    __m256 acc[3][8];
    const unsigned hm = (1u << H) - 1;
    UNROLL for (int h = 0; h < H; h++) UNROLL for (int k = 0; k < K; k++) acc[h][k] = _mm256_loadu_ps(o + h * o_stride + 8 * k);
    for (int64_t r = 0; r < nr; r++) {
        const uint16_t *hp = (const uint16_t *)(v0 + r * stride);
        const unsigned z = (unsigned)nz[r] >> c & hm;
        if (z) {
            UNROLL for (int h = 0; h < H; h++) {
                if (z >> h & 1) {
                    const __m256 sb = _mm256_broadcast_ss(&ms[r][c + h]);
                    UNROLL for (int k = 0; k < K; k++) acc[h][k] = round_f16_ps(_mm256_mul_ps(acc[h][k], sb));
                }
            }
        }
        UNROLL for (int k = 0; k < K; k++) { // one converted V vector live at a time: no accumulator spills
            const __m256 x = _mm256_cvtph_ps(loadu128(hp + 8 * k));
            UNROLL for (int h = 0; h < H; h++) acc[h][k] = round_f16_ps(_mm256_fmadd_ps(x, _mm256_broadcast_ss(&w[r][c + h]), acc[h][k]));
        }
    }
    UNROLL for (int h = 0; h < H; h++) UNROLL for (int k = 0; k < K; k++) _mm256_storeu_ps(o + h * o_stride + 8 * k, acc[h][k]);
}

// columns [i, hdv) of lane c's head (fewer than 8): the last group partial
static void merge_tail(int64_t nr, int c, const float (*ms)[8], const float (*w)[8], const char *v0, int64_t stride,
                       float *o, int64_t i, int64_t hdv) {
    for (; i < hdv; i += 8) {
        const int64_t cn = hdv - i < 8 ? hdv - i : 8;
        float t[8] = {0}, hb[8];
        memcpy(t, o + i, (size_t)cn * sizeof(float));
        __m256 acc = _mm256_loadu_ps(t);
        for (int64_t r = 0; r < nr; r++) {
            const uint16_t *h = (const uint16_t *)(v0 + r * stride) + i;
            for (int64_t k = 0; k < 8; k++) hb[k] = k < cn ? kvt_f16_to_f32(h[k]) : 0.0f;
            if (ms[r][c] != 1.0f) acc = round_f16_ps(_mm256_mul_ps(acc, _mm256_set1_ps(ms[r][c])));
            acc = round_f16_ps(_mm256_fmadd_ps(_mm256_loadu_ps(hb), _mm256_set1_ps(w[r][c]), acc));
        }
        _mm256_storeu_ps(t, acc);
        memcpy(o + i, t, (size_t)cn * sizeof(float));
    }
}

// H <= 3 heads (lanes c ..) over all columns: 8 * K at a time (K by H: 12 accumulators at most), then the tail
static void merge_heads(int H, int c, int64_t nr, const float (*ms)[8], const float (*w)[8], const uint8_t *nz,
                        const char *v0, int64_t stride, float *o, int64_t o_stride, int64_t hdv) {
    int64_t i = 0;
#define MERGE_BLK(h, k)                                                                                      \
    for (; i + 8 * (k) <= hdv; i += 8 * (k)) merge_blk(h, k, nr, c, ms, nz, w, v0 + i * 2, stride, o + i, o_stride)
    switch (H) { // 8 or more chains in flight: fewer leave the rounding chains' latency bare
    case 3: MERGE_BLK(3, 4); MERGE_BLK(3, 2); MERGE_BLK(3, 1); break;
    case 2: MERGE_BLK(2, 4); MERGE_BLK(2, 2); MERGE_BLK(2, 1); break;
    default: MERGE_BLK(1, 8); MERGE_BLK(1, 4); MERGE_BLK(1, 1); break;
    }
#undef MERGE_BLK
    for (int h = 0; h < H && i < hdv; h++) merge_tail(nr, c + h, ms, w, v0, stride, o + h * o_stride, i, hdv);
}

// kvt_attn_merge_f16: the heads 8 at a time; per block of up to KVT_MERGE_ROWS positions their factors together
// (merge_factors8), then o in sub-groups of up to 3 heads (sizes as even as possible: 8 = 2 + 3 + 3, 4 = 2 + 2).
void kvt_attn_merge_f16_avx2(int nh, const float *s, int64_t s_stride, int64_t n, const void *v, int64_t stride,
                             float *m, float *l, float *o, int64_t o_stride, int64_t hdv) {
    float ms[KVT_MERGE_ROWS][8], w[KVT_MERGE_ROWS][8];
    uint8_t nz[KVT_MERGE_ROWS];
    for (int g0 = 0; g0 < nh; g0 += 8) {
        const int G = nh - g0 < 8 ? nh - g0 : 8, ns = (G + 2) / 3;
        for (int64_t r0 = 0; r0 < n; r0 += KVT_MERGE_ROWS) {
            const int64_t nr = n - r0 < KVT_MERGE_ROWS ? n - r0 : KVT_MERGE_ROWS;
            merge_factors8(G, s + g0 * s_stride + r0, s_stride, nr, m + g0, l + g0, ms, w, nz);
            const char *v0 = (const char *)v + r0 * stride;
            for (int k = 0, c = 0; k < ns; k++) {
                const int H = (G - c) / (ns - k);
                merge_heads(H, c, nr, (const float(*)[8])ms, (const float(*)[8])w, nz, v0, stride, o + (g0 + c) * o_stride,
                            o_stride, hdv);
                c += H;
            }
        }
    }
}

void kvt_rope_apply_avx2(const kvt_rope_params *p, const float *cs, float *x) { kvt_rope_rotate(p, cs, x); }

void kvt_f32_to_f16_row_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = kvt_f32_to_f16(src[i]);
}
#endif

static void f16_to_float(const void *src, float *dst, int64_t n) { kvt_f16_to_f32_row_avx2(src, dst, n); }
static void f16_from_float(const float *src, void *dst, int64_t n) { kvt_f32_to_f16_row_avx2(src, dst, n); }

// ------------------------------------------------------------------ table

// Conversions that are not hot use the reference code.
#define REF_TO_FLOAT(name, T)                                                                       \
    static void name##_to_float(const void *s, float *d, int64_t n) { kvt_type_ops_ref(T)->to_float(s, d, n); }
#define REF_FROM_FLOAT(name, T)                                                                     \
    static void name##_from_float(const float *s, void *d, int64_t n) { kvt_type_ops_ref(T)->from_float(s, d, n); }
REF_TO_FLOAT(f32, KVT_TYPE_F32)
REF_FROM_FLOAT(f32, KVT_TYPE_F32)
REF_TO_FLOAT(bf16, KVT_TYPE_BF16)
REF_FROM_FLOAT(bf16, KVT_TYPE_BF16)
REF_TO_FLOAT(q4_0, KVT_TYPE_Q4_0)
REF_FROM_FLOAT(q4_0, KVT_TYPE_Q4_0)
REF_TO_FLOAT(q4_1, KVT_TYPE_Q4_1)
REF_FROM_FLOAT(q4_1, KVT_TYPE_Q4_1)
REF_TO_FLOAT(q5_0, KVT_TYPE_Q5_0)
REF_FROM_FLOAT(q5_0, KVT_TYPE_Q5_0)
REF_TO_FLOAT(q8_0, KVT_TYPE_Q8_0)
REF_TO_FLOAT(q8_1, KVT_TYPE_Q8_1)
REF_TO_FLOAT(q4_K, KVT_TYPE_Q4_K)
REF_FROM_FLOAT(q4_K, KVT_TYPE_Q4_K)
REF_TO_FLOAT(q5_K, KVT_TYPE_Q5_K)
REF_FROM_FLOAT(q5_K, KVT_TYPE_Q5_K)
REF_TO_FLOAT(q6_K, KVT_TYPE_Q6_K)
REF_FROM_FLOAT(q6_K, KVT_TYPE_Q6_K)
REF_TO_FLOAT(q8_K, KVT_TYPE_Q8_K)

KVT_TYPE_OPS_TABLE(k_ops);

const kvt_type_ops *KVT_TABLE_FN(kvt_type t) {
    if ((unsigned)t >= KVT_TYPE_COUNT || !k_ops[t].to_float) return NULL;
    return &k_ops[t];
}
