// matmul_avx2.c - matmul micro-kernels (AVX2/FMA/F16C; rebuilt for AVX-512 by
// matmul_avx512.c with KVT_SIMD_AVX512 defined).
//
// A kernel has two parts:
//  - prep: converts one activation row (vec_dot_type) into a kernel-private
//    layout once per call, so that per-block work in the hot loop is minimal
//    (f16/bf16 -> f32; for 32-blocks: block scales as floats, an offset
//    correction per block and the int8 values, pair-interleaved for 512-bit
//    loads);
//  - rows: Y[t*ldy + r] = dot(W row r, prepared row t) for r < nr, t < nt
//    (nt <= KVT_DOT_MULTI_MAX). Each weight block is decoded once per call
//    for all nt rows; float kernels additionally tile 4 weight rows.
//
// 32-block integer kernels (q4_0, q4_1, q8_0) use unsigned weights u in
// [0, 255] against signed activations: dot(w, y) = dot(u, y) - o * sum(y) with
// o = 8 (q4_0) or 128 (q8_0 on AVX-512), so a block contributes
//   dx * dy * dot(u, y) + dx * c,   c = -o * dy * sum(y)
// and q4_1 (x = d*q + m, activations with s = dy * sum(y)) contributes
//   dx * dy * dot(q, y) + m * s.
// The second terms are accumulated 8 blocks at a time as vectors.
#include <immintrin.h>
#include <string.h>

#include "f16.h"
#include "matmul.h"
#include "quant.h"

#ifdef KVT_SIMD_AVX512
#define KVT_MM_TABLE_FN kvt_mm_kernel_avx512
#else
#define KVT_MM_TABLE_FN kvt_mm_kernel_avx2
#endif

#define INLINE static inline __attribute__((always_inline))
#define NTMAX KVT_DOT_MULTI_MAX
// Full unrolling of the small loops over rows/tokens/blocks keeps the
// accumulator arrays in registers.
#define UNROLL _Pragma("GCC unroll 16")

INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE uint16_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

INLINE int64_t align64(int64_t v) { return (v + 63) & ~(int64_t)63; }

// ============================================================ float weights

// Prepared row: n floats.
static int64_t fp_prep_size(int64_t n) { return align64(n * (int64_t)sizeof(float)); }
static void f16_prep(int64_t n, const void *x, void *p) { kvt_f16_to_f32_row_avx2(x, p, n); }
static void bf16_prep(int64_t n, const void *x, void *p) {
    const uint16_t *h = x;
    float *f = p;
    for (int64_t i = 0; i < n; i++) f[i] = kvt_bf16_to_f32(h[i]);
}
static void f32_prep(int64_t n, const void *x, void *p) { memcpy(p, x, (size_t)n * sizeof(float)); }

#ifdef KVT_SIMD_AVX512
#define FV __m512
#define FV_N 16
#define fv_zero _mm512_setzero_ps
#define fv_fma _mm512_fmadd_ps
#define fv_add _mm512_add_ps
#define fv_ld(p) _mm512_loadu_ps(p)
#define fv_ld_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define fv_ld_bf16(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define fv_hsum _mm512_reduce_add_ps
#define FP_NR 4 // weight rows per float tile: 4x4 accumulators of 32 zmm
#else
#define FV __m256
#define FV_N 8
#define fv_zero _mm256_setzero_ps
#define fv_fma _mm256_fmadd_ps
#define fv_add _mm256_add_ps
#define fv_ld(p) _mm256_loadu_ps(p)
#define fv_ld_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define fv_ld_bf16(p) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define fv_hsum hsum256
#define FP_NR 2 // 2x4 accumulators: 16 ymm registers leave no room for 4x4
#endif
#define fv_ld_f32(p) fv_ld(p)
#define cvt_f32(v) (v)

// Tile of NR (FP_NR or 1) weight rows x NT prepared rows; U independent accumulators per
// output when the tile is small (latency of the FMA chain).
#define DEFINE_FP_TILE(name, ET, LDW, CVT)                                                          \
    INLINE void name##_tile(int64_t n, const char *W, size_t wrs, int NR, const float *P, size_t prs, \
                            int NT, float *Y, int64_t ldy) {                                        \
        const int U = NR * NT >= 8 ? 1 : 2;                                                         \
        FV acc[FP_NR][NTMAX][2];                                                                        \
        UNROLL for (int r = 0; r < NR; r++)                                                                \
            UNROLL for (int t = 0; t < NT; t++) acc[r][t][0] = acc[r][t][1] = fv_zero();                   \
        int64_t i = 0;                                                                              \
        for (; i + U * FV_N <= n; i += U * FV_N) {                                                  \
            UNROLL for (int u = 0; u < U; u++) {                                                           \
                FV w[FP_NR];                                                                            \
                UNROLL for (int r = 0; r < NR; r++) w[r] = LDW((const ET *)(W + r * wrs) + i + u * FV_N); \
                if (NT == 1 && ((i + u * FV_N) * (int64_t)sizeof(ET)) % 64 == 0) /* decode: next tile */ \
                    UNROLL for (int r = 0; r < NR; r++)                                             \
                        _mm_prefetch((const char *)((const ET *)(W + (r + NR) * wrs) + i), _MM_HINT_T0); \
                UNROLL for (int t = 0; t < NT; t++) {                                                      \
                    const FV y = fv_ld((const float *)((const char *)P + t * prs) + i + u * FV_N);  \
                    UNROLL for (int r = 0; r < NR; r++) acc[r][t][u] = fv_fma(w[r], y, acc[r][t][u]);     \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        UNROLL for (int r = 0; r < NR; r++) {                                                              \
            const ET *x = (const ET *)(W + r * wrs);                                                \
            UNROLL for (int t = 0; t < NT; t++) {                                                          \
                const float *y = (const float *)((const char *)P + t * prs);                        \
                float s = fv_hsum(U == 2 ? fv_add(acc[r][t][0], acc[r][t][1]) : acc[r][t][0]);      \
                for (int64_t j = i; j < n; j++) s += CVT(x[j]) * y[j];                              \
                Y[t * ldy + r] = s;                                                                 \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    static void name##_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, \
                            int nt, float *Y, int64_t ldy) {                                        \
        const char *w = W;                                                                          \
        int64_t r = 0;                                                                              \
        for (; r + FP_NR <= nr; r += FP_NR) {                                                               \
            switch (nt) {                                                                           \
            case 1: name##_tile(n, w + r * wrs, wrs, FP_NR, P, prs, 1, Y + r, ldy); break;              \
            case 2: name##_tile(n, w + r * wrs, wrs, FP_NR, P, prs, 2, Y + r, ldy); break;              \
            case 3: name##_tile(n, w + r * wrs, wrs, FP_NR, P, prs, 3, Y + r, ldy); break;              \
            default: name##_tile(n, w + r * wrs, wrs, FP_NR, P, prs, 4, Y + r, ldy); break;             \
            }                                                                                       \
        }                                                                                           \
        for (; r < nr; r++) {                                                                       \
            switch (nt) {                                                                           \
            case 1: name##_tile(n, w + r * wrs, wrs, 1, P, prs, 1, Y + r, ldy); break;              \
            case 2: name##_tile(n, w + r * wrs, wrs, 1, P, prs, 2, Y + r, ldy); break;              \
            case 3: name##_tile(n, w + r * wrs, wrs, 1, P, prs, 3, Y + r, ldy); break;              \
            default: name##_tile(n, w + r * wrs, wrs, 1, P, prs, 4, Y + r, ldy); break;             \
            }                                                                                       \
        }                                                                                           \
    }

DEFINE_FP_TILE(f32, float, fv_ld_f32, cvt_f32)
DEFINE_FP_TILE(f16, uint16_t, fv_ld_f16, kvt_f16_to_f32)
DEFINE_FP_TILE(bf16, uint16_t, fv_ld_bf16, kvt_bf16_to_f32)

// ======================================================= 32-element blocks

enum { WT_Q4_0, WT_Q4_1, WT_Q8_0 };

// Prepared row of nb blocks, nbp = nb rounded up to 8:
//   float d[nbp]; float c[nbp]; int8 qs[32 * nb]
// Blocks of complete 8-groups are stored pair-interleaved on AVX-512 for the
// nibble formats ([A 0-15, B 0-15, A 16-31, B 16-31]); the rest in order.
INLINE int64_t nb_pad(int64_t nb) { return (nb + 7) & ~(int64_t)7; }
static int64_t x32_prep_size(int64_t n) { return align64(8 * nb_pad(n / KVT_QK) + n); }

#ifdef KVT_SIMD_AVX512
#define Q8_OFFSET 128 // q8_0 weights made unsigned by xor 0x80
#define PAIR_NIBBLES 1
#else
#define Q8_OFFSET 0 // q8_0 uses the sign trick (maddubs would saturate)
#define PAIR_NIBBLES 0
#endif

INLINE void x32_prep(int64_t n, const void *x, void *p, int WT) {
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb), nfull = nb & ~(int64_t)7;
    float *d = p, *c = d + nbp;
    int8_t *qs = (int8_t *)(c + nbp);
    for (int64_t ib = 0; ib < nb; ib++) {
        const int8_t *q;
        if (WT == WT_Q4_1) {
            const kvt_block_q8_1 *b = (const kvt_block_q8_1 *)x + ib;
            d[ib] = kvt_f16_to_f32(b->d);
            c[ib] = kvt_f16_to_f32(b->s);
            q = b->qs;
        } else {
            const kvt_block_q8_0 *b = (const kvt_block_q8_0 *)x + ib;
            int sum = 0;
            for (int j = 0; j < KVT_QK; j++) sum += b->qs[j];
            d[ib] = kvt_f16_to_f32(b->d);
            c[ib] = -(float)(WT == WT_Q4_0 ? 8 : Q8_OFFSET) * d[ib] * (float)sum;
            q = b->qs;
        }
        if (PAIR_NIBBLES && WT != WT_Q8_0 && ib < nfull) {
            int8_t *pair = qs + 64 * (ib / 2);
            const int o = 16 * (int)(ib & 1);
            memcpy(pair + o, q, 16);
            memcpy(pair + 32 + o, q + 16, 16);
        } else {
            memcpy(qs + 32 * ib, q, 32);
        }
    }
    for (int64_t ib = nb; ib < nbp; ib++) d[ib] = c[ib] = 0;
}
static void q4_0_prep(int64_t n, const void *x, void *p) { x32_prep(n, x, p, WT_Q4_0); }
static void q4_1_prep(int64_t n, const void *x, void *p) { x32_prep(n, x, p, WT_Q4_1); }
static void q8_0_prep(int64_t n, const void *x, void *p) { x32_prep(n, x, p, WT_Q8_0); }

INLINE size_t x32_block_size(int WT) {
    return WT == WT_Q4_0 ? sizeof(kvt_block_q4_0) : WT == WT_Q4_1 ? sizeof(kvt_block_q4_1) : sizeof(kvt_block_q8_0);
}

// f16 scales of 8 consecutive blocks at byte offset off -> 8 floats.
INLINE __m256 load_scales8(const char *blk, size_t bs, size_t off) {
    __m128i v = _mm_cvtsi32_si128(ld16(blk + off));
    v = _mm_insert_epi16(v, ld16(blk + bs + off), 1);
    v = _mm_insert_epi16(v, ld16(blk + 2 * bs + off), 2);
    v = _mm_insert_epi16(v, ld16(blk + 3 * bs + off), 3);
    v = _mm_insert_epi16(v, ld16(blk + 4 * bs + off), 4);
    v = _mm_insert_epi16(v, ld16(blk + 5 * bs + off), 5);
    v = _mm_insert_epi16(v, ld16(blk + 6 * bs + off), 6);
    v = _mm_insert_epi16(v, ld16(blk + 7 * bs + off), 7);
    return _mm256_cvtph_ps(v);
}

// One block, 256-bit: i32 partial sums (8 lanes) of dot(u, y) (sign trick for
// q8_0 on AVX2, where the correction c is 0).
INLINE __m256i blk_dot256(const char *blk, const int8_t *y, int WT) {
    const __m256i yv = _mm256_loadu_si256((const __m256i *)y);
    if (WT == WT_Q8_0) {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 2));
#ifdef KVT_SIMD_AVX512
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(w, _mm256_set1_epi8(-128)), yv);
#else
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(yv, w));
        return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
    }
    const __m128i q = _mm_loadu_si128((const __m128i *)(blk + (WT == WT_Q4_1 ? 4 : 2)));
    const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
#ifdef KVT_SIMD_AVX512
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, yv);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, yv), _mm256_set1_epi16(1));
#endif
}

#ifdef KVT_SIMD_AVX512
// Two consecutive blocks as 64 unsigned bytes, in the prepared pair layout.
INLINE __m512i pair_u8(const char *blk, int WT) {
    const size_t bs = x32_block_size(WT);
    if (WT == WT_Q8_0) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(blk + 2));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(blk + bs + 2));
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1), _mm512_set1_epi8(-128));
    }
    const size_t off = WT == WT_Q4_1 ? 4 : 2;
    const __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(blk + bs + off)),
                                       _mm_loadu_si128((const __m128i *)(blk + off)));
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}
#endif

// One weight row against NT prepared rows.
INLINE void x32_row(int64_t n, const char *x, const char *P, size_t prs, int NT, float *Y, int64_t ldy, int WT) {
    const size_t bs = x32_block_size(WT);
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb), nfull = nb & ~(int64_t)7;
    const float *pd[NTMAX], *pc[NTMAX];
    const int8_t *pq[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) {
        pd[t] = (const float *)(P + t * prs);
        pc[t] = pd[t] + nbp;
        pq[t] = (const int8_t *)(pc[t] + nbp);
    }
    __m256 cacc[NTMAX];
#ifdef KVT_SIMD_AVX512
    __m512 acc[NTMAX][2];
    UNROLL for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps(), cacc[t] = _mm256_setzero_ps();
    // lane -> block-in-group index for pair k: nibble formats [2k x4, 2k+1 x4] x2, q8_0 [2k x8, 2k+1 x8]
    __m512i idx[4];
    UNROLL for (int k = 0; k < 4; k++)
        idx[k] = WT == WT_Q8_0 ? _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k)
                               : _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k);
#else
    __m256 acc[NTMAX][2];
    UNROLL for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps(), cacc[t] = _mm256_setzero_ps();
    float dsc[NTMAX][8] __attribute__((aligned(32)));
#endif
    for (int64_t g = 0; g < nfull; g += 8) {
        const char *blk = x + g * bs;
        const __m256 dx = load_scales8(blk, bs, 0);
        const __m256 cx = WT == WT_Q4_1 ? load_scales8(blk, bs, 2) : dx; // multiplies c
        __m256 D[NTMAX];
        UNROLL for (int t = 0; t < NT; t++) {
            D[t] = _mm256_mul_ps(dx, _mm256_loadu_ps(pd[t] + g));
            if (WT != WT_Q8_0 || Q8_OFFSET) cacc[t] = _mm256_fmadd_ps(cx, _mm256_loadu_ps(pc[t] + g), cacc[t]);
        }
#ifdef KVT_SIMD_AVX512
        UNROLL for (int k = 0; k < 4; k++) {
            const __m512i u = pair_u8(blk + 2 * k * bs, WT);
            UNROLL for (int t = 0; t < NT; t++) {
                const __m512i yv = _mm512_loadu_si512((const void *)(pq[t] + 32 * (g + 2 * k)));
                const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yv);
                const __m512 s = _mm512_permutexvar_ps(idx[k], _mm512_castps256_ps512(D[t]));
                acc[t][k & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc[t][k & 1]);
            }
        }
#else
        UNROLL for (int t = 0; t < NT; t++) _mm256_store_ps(dsc[t], D[t]);
        UNROLL for (int k = 0; k < 8; k++) {
            const char *b = blk + k * bs;
            UNROLL for (int t = 0; t < NT; t++) {
                const __m256i p = blk_dot256(b, pq[t] + 32 * (g + k), WT);
                acc[t][k & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&dsc[t][k]), acc[t][k & 1]);
            }
        }
#endif
    }
    float tail[NTMAX] = {0};
    for (int64_t ib = nfull; ib < nb; ib++) { // fewer than 8 blocks left
        const char *b = x + ib * bs;
        const float dx = kvt_f16_to_f32(ld16(b));
        const float cx = WT == WT_Q4_1 ? kvt_f16_to_f32(ld16(b + 2)) : dx;
        UNROLL for (int t = 0; t < NT; t++) {
            const __m256i p = blk_dot256(b, pq[t] + 32 * ib, WT);
            tail[t] += dx * pd[t][ib] * (float)hsum256(_mm256_cvtepi32_ps(p));
            if (WT != WT_Q8_0 || Q8_OFFSET) tail[t] += cx * pc[t][ib];
        }
    }
    UNROLL for (int t = 0; t < NT; t++) {
#ifdef KVT_SIMD_AVX512
        const float main = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
#else
        const float main = hsum256(_mm256_add_ps(acc[t][0], acc[t][1]));
#endif
        Y[t * ldy] = main + hsum256(cacc[t]) + tail[t];
    }
}

#define DEFINE_X32_ROWS(name, WT)                                                                   \
    static void name##_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, \
                            int nt, float *Y, int64_t ldy) {                                        \
        const char *w = W;                                                                          \
        for (int64_t r = 0; r < nr; r++) {                                                          \
            switch (nt) {                                                                           \
            case 1: x32_row(n, w + r * wrs, P, prs, 1, Y + r, ldy, WT); break;                      \
            case 2: x32_row(n, w + r * wrs, P, prs, 2, Y + r, ldy, WT); break;                      \
            case 3: x32_row(n, w + r * wrs, P, prs, 3, Y + r, ldy, WT); break;                      \
            default: x32_row(n, w + r * wrs, P, prs, 4, Y + r, ldy, WT); break;                     \
            }                                                                                       \
        }                                                                                           \
    }
DEFINE_X32_ROWS(q4_0, WT_Q4_0)
DEFINE_X32_ROWS(q4_1, WT_Q4_1)
DEFINE_X32_ROWS(q8_0, WT_Q8_0)

// ==================================================================== table

static const kvt_mm_kernel k_mm[KVT_TYPE_COUNT] = {
    [KVT_TYPE_F32] = {fp_prep_size, f32_prep, f32_rows},
    [KVT_TYPE_F16] = {fp_prep_size, f16_prep, f16_rows},
    [KVT_TYPE_BF16] = {fp_prep_size, bf16_prep, bf16_rows},
    [KVT_TYPE_Q4_0] = {x32_prep_size, q4_0_prep, q4_0_rows},
    [KVT_TYPE_Q4_1] = {x32_prep_size, q4_1_prep, q4_1_rows},
    [KVT_TYPE_Q8_0] = {x32_prep_size, q8_0_prep, q8_0_rows},
};

const kvt_mm_kernel *KVT_MM_TABLE_FN(kvt_type t) {
    if ((unsigned)t >= KVT_TYPE_COUNT || !k_mm[t].rows) return NULL;
    return &k_mm[t];
}
