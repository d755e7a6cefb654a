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
//    for all nt rows; float kernels additionally tile 4 weight rows (decode, nt = 1: 2 rows at once, one
//    FMA chain each, the next pair's lines prefetched into L2).
//
// 32-block integer kernels (q4_1, q8_0; q4_0 and q5_0 have their own, q40x8.h, below) use unsigned weights u in
// [0, 255] against signed activations: dot(w, y) = dot(u, y) - o * sum(y) with
// o = 128 (q8_0 on AVX-512), so a block contributes
//   dx * dy * dot(u, y) + dx * c,   c = -o * dy * sum(y)
// The second terms are accumulated 8 blocks at a time as vectors. q4_1 (x = d*q + m, activations with
// s = dy * sum(y)) contributes dx * dy * dot(q, y) + m * s and is summed in llama.cpp's order instead
// (q4_1_row: one 8-lane accumulator, the m * s terms in a scalar chain; matmul.h).
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "bits_avx2.h"
#include "fvec_avx.h"
#include "x32_avx.h"
#include "f16.h"
#include "matmul.h"
#include "quant.h"
#include "quant_lowbit.h"

// The old AVX-512 panel tiles below (f16, q8_0) sum each output in another order than the rows
// kernels, so with them a row's result would depend on the batch it is computed in; they are left out
// (prefill uses the rows kernels, 8 tokens per weight pass on AVX-512) unless built with -DKVT_MM_AVX512_GEMM=1.
// (q4_K/q6_K have their own AVX-512 panel tile in the rows kernels' order: kq_avx512.h.)
#ifndef KVT_MM_AVX512_GEMM
#define KVT_MM_AVX512_GEMM 0
#endif
#if defined(KVT_SIMD_AVX512) && KVT_MM_AVX512_GEMM
#define MM_GEMM512(...) __VA_ARGS__
#else
#define MM_GEMM512(...)
#endif

#ifdef KVT_SIMD_AVX512
#define KVT_MM_TABLE_FN kvt_mm_kernel_avx512
#else
#define KVT_MM_TABLE_FN kvt_mm_kernel_avx2
#endif

#define NTMAX KVT_DOT_MULTI_MAX
// Full unrolling of the small loops over rows/tokens/blocks keeps the
// accumulator arrays in registers.
#define UNROLL _Pragma("GCC unroll 16")

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

#define FP_NR 4 // weight rows per float tile (and decode: rows at once, one FMA chain each)
#define fv_ld_f32(p) fv_ld(p)
#define cvt_f32(v) (v)
// Decode of float weights: one FMA chain per row (the order below), so FP_DR rows are summed at once for
// independent chains, and their lines FP_DR rows on are prefetched, one line per row per step (hint
// FP_PF_HINT). Zen 4, one thread, AVX2 f16 bench_kernels -p 1, GB/s at rows x n 5632 x 2048 /
// 2048 x 5632 / 2048 x 2048 (load 2-3.8, 2026-11-29): the old order (2 chains per row, one row at a time)
// 24/10-12/21; 4 rows, no prefetch 15/14-15/16-18; 4 rows, L2 prefetch 21/16-18/19-21; 2 rows, no
// prefetch 12/10-12/12-13; 2 rows, L2 prefetch 19-25/20-23/20-26 (kept); 8 rows 15-19/13-14/16-20.
#ifndef FP_DR
#define FP_DR 2 // decode: weight rows at once
#endif
// KVT_X8_PF_HINT, KVT_X8_PF_NEAR: the decode GEMVs' prefetch (bits_avx2.h).
#ifndef FP_PF_HINT
#define FP_PF_HINT _MM_HINT_T1 // the next group's lines into L2
#endif

// Tile of NR (at most FP_NR) weight rows x NT prepared rows. The order of every output is fixed
// whatever NR and NT (so a row gives the same bits alone or in any batch, and the tile is free to change):
// ONE vector accumulator per output taking the FV_N-wide slices k = [j*FV_N, (j+1)*FV_N) by FMA in k order
// (llama.cpp's order in its float tiles), then hsum(acc), then the tail past the last full slice one
// element at a time (s += w[k] * y[k], k ascending). A single row has a single dependent chain, so decode
// (NT = 1) takes FP_DR rows at once for independent chains (gemm_avx2.c's tiles: 4 x 3 on AVX2).
// Accumulators a tile may use (NR * NT), leaving registers for the weights and one activation.
#ifdef KVT_SIMD_AVX512
#define FP_ACC_MAX 24
#else
#define FP_ACC_MAX 12
#endif
#define DEFINE_FP_TILE(name, ET, LDW, CVT, KT)                                                        \
    INLINE void name##_tile(int64_t n, const char *W, size_t wrs, int NR, const float *P, size_t prs, \
                            int NT, float *Y, int64_t ldy) {                                        \
        FV acc[FP_NR][NTMAX];                                                                       \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[r][t] = fv_zero(); \
        const int64_t nv = n & ~(int64_t)(FV_N - 1);                                                \
        for (int64_t i = 0; i < nv; i += FV_N) {                                                    \
            FV w[FP_NR];                                                                            \
            UNROLL for (int r = 0; r < NR; r++) w[r] = LDW((const ET *)(W + r * wrs) + i);          \
            UNROLL for (int t = 0; t < NT; t++) {                                                   \
                const FV y = fv_ld((const float *)((const char *)P + t * prs) + i);                 \
                UNROLL for (int r = 0; r < NR; r++) acc[r][t] = fv_fma(w[r], y, acc[r][t]);         \
            }                                                                                       \
        }                                                                                           \
        UNROLL for (int r = 0; r < NR; r++) {                                                       \
            const ET *x = (const ET *)(W + r * wrs);                                                \
            UNROLL for (int t = 0; t < NT; t++) {                                                   \
                const float *y = (const float *)((const char *)P + t * prs);                        \
                float s = fv_hsum(acc[r][t]);                                                       \
                for (int64_t j = nv; j < n; j++) s += CVT(x[j]) * y[j];                             \
                Y[t * ldy + r] = s;                                                                 \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    /* decode: FP_DR rows at once (one chain each, the tile's order), the next group's lines prefetched */ \
    INLINE void name##_dec(int64_t n, const char *W, size_t wrs, const float *y, float *Y, size_t pfd) { \
        enum { L = 64 / (int)sizeof(ET) }; /* elements per line of a weight row (a multiple of FV_N) */ \
        FV acc[FP_DR];                                                                              \
        UNROLL for (int r = 0; r < FP_DR; r++) acc[r] = fv_zero();                                  \
        const int64_t nv = n & ~(int64_t)(FV_N - 1);                                                \
        int64_t i = 0;                                                                              \
        for (; i + L <= nv; i += L) {                                                               \
            UNROLL for (int r = 0; r < FP_DR; r++)                                                  \
                _mm_prefetch(W + r * wrs + pfd + i * (int64_t)sizeof(ET), FP_PF_HINT);              \
            UNROLL for (int u = 0; u < L; u += FV_N) {                                              \
                const FV yv = fv_ld(y + i + u);                                                     \
                UNROLL for (int r = 0; r < FP_DR; r++)                                              \
                    acc[r] = fv_fma(LDW((const ET *)(W + r * wrs) + i + u), yv, acc[r]);            \
            }                                                                                       \
        }                                                                                           \
        for (; i < nv; i += FV_N) {                                                                 \
            const FV yv = fv_ld(y + i);                                                             \
            UNROLL for (int r = 0; r < FP_DR; r++) acc[r] = fv_fma(LDW((const ET *)(W + r * wrs) + i), yv, acc[r]); \
        }                                                                                           \
        UNROLL for (int r = 0; r < FP_DR; r++) {                                                    \
            const ET *x = (const ET *)(W + r * wrs);                                                \
            float s = fv_hsum(acc[r]);                                                              \
            for (int64_t j = nv; j < n; j++) s += CVT(x[j]) * y[j];                                 \
            Y[r] = s;                                                                               \
        }                                                                                           \
    }                                                                                               \
    /* study forms (kvt_kernels_decode_variant): ND rows at W + k * rstep (k < ND) at once into Y[k * ystep], */ \
    /* one chain each (the tile's order), each row's lines pfd bytes on prefetched */               \
    INLINE void name##_decs(int64_t n, const char *W, size_t rstep, int ND, const float *y, float *Y, int64_t ystep, \
                            size_t pfd) {                                                           \
        enum { L = 64 / (int)sizeof(ET) };                                                          \
        FV acc[4];                                                                                  \
        UNROLL for (int r = 0; r < ND; r++) acc[r] = fv_zero();                                     \
        const int64_t nv = n & ~(int64_t)(FV_N - 1);                                                \
        int64_t i = 0;                                                                              \
        for (; i + L <= nv; i += L) {                                                               \
            UNROLL for (int r = 0; r < ND; r++)                                                     \
                _mm_prefetch(W + r * rstep + pfd + i * (int64_t)sizeof(ET), FP_PF_HINT);            \
            UNROLL for (int u = 0; u < L; u += FV_N) {                                              \
                const FV yv = fv_ld(y + i + u);                                                     \
                UNROLL for (int r = 0; r < ND; r++)                                                 \
                    acc[r] = fv_fma(LDW((const ET *)(W + r * rstep) + i + u), yv, acc[r]);          \
            }                                                                                       \
        }                                                                                           \
        for (; i < nv; i += FV_N) {                                                                 \
            const FV yv = fv_ld(y + i);                                                             \
            UNROLL for (int r = 0; r < ND; r++) acc[r] = fv_fma(LDW((const ET *)(W + r * rstep) + i), yv, acc[r]); \
        }                                                                                           \
        UNROLL for (int r = 0; r < ND; r++) {                                                       \
            const ET *x = (const ET *)(W + r * rstep);                                              \
            float s = fv_hsum(acc[r]);                                                              \
            for (int64_t j = nv; j < n; j++) s += CVT(x[j]) * y[j];                                 \
            Y[r * ystep] = s;                                                                       \
        }                                                                                           \
    }                                                                                               \
    /* the nr rows at w in the study form v: 1, 2, 4 adjacent rows at once, or v - 10 (2, 4) streams h rows apart */ \
    static void name##_dec_study(int v, int64_t n, const char *w, size_t wrs, int64_t nr, const float *y, float *Y) { \
        int64_t r = 0;                                                                              \
        if (v == 12 || v == 14 || v == 22 || v == 24) {                                             \
            const int64_t ns = v % 10, h = nr / ns;                                                 \
            for (; r < h; r++) {                                                                    \
                if (ns == 4) name##_decs(n, w + r * wrs, h * wrs, 4, y, Y + r, h, wrs);             \
                else name##_decs(n, w + r * wrs, h * wrs, 2, y, Y + r, h, wrs);                     \
            }                                                                                       \
            r = ns * h;                                                                             \
        } else if (v == 4) {                                                                        \
            for (; r + 4 <= nr; r += 4) name##_decs(n, w + r * wrs, wrs, 4, y, Y + r, 1, 4 * wrs);  \
        }                                                                                           \
        if (v != 1)                                                                                 \
            for (; r + 2 <= nr; r += 2) name##_decs(n, w + r * wrs, wrs, 2, y, Y + r, 1, 2 * wrs);  \
        for (; r < nr; r++) name##_decs(n, w + r * wrs, wrs, 1, y, Y + r, 1, wrs);                  \
    }                                                                                               \
    INLINE void name##_rows_nt(int64_t n, const char *w, size_t wrs, int64_t nr, const void *P, size_t prs, \
                               int NT, float *Y, int64_t ldy) {                                     \
        if (NT == 1) {                                                                              \
            const int v = kvt_kernels_decode_form(KT); /* the type's default or a study form */      \
            if (v == 1 || v == 4 || v == 12 || v == 14 || v == 22 || v == 24) {                     \
                name##_dec_study(v, n, w, wrs, nr, P, Y);                                           \
                return;                                                                             \
            }                                                                                       \
            int64_t r = 0;                                                                          \
            for (; r + FP_DR <= nr; r += FP_DR) name##_dec(n, w + r * wrs, wrs, P, Y + r, FP_DR * wrs); \
            for (; r < nr; r++) name##_tile(n, w + r * wrs, wrs, 1, P, prs, 1, Y + r, ldy);        \
            return;                                                                                 \
        }                                                                                           \
        const int NA = FP_ACC_MAX / NT, NR = NA < 1 ? 1 : NA > FP_NR ? FP_NR : NA;                  \
        int64_t r = 0;                                                                              \
        for (; r + NR <= nr; r += NR) name##_tile(n, w + r * wrs, wrs, NR, P, prs, NT, Y + r, ldy); \
        for (; r < nr; r++) name##_tile(n, w + r * wrs, wrs, 1, P, prs, NT, Y + r, ldy);           \
    }                                                                                               \
    static void name##_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, \
                            int nt, float *Y, int64_t ldy, void *scratch) {                         \
        (void)scratch;                                                                              \
        switch (nt) {                                                                               \
        case 1: name##_rows_nt(n, W, wrs, nr, P, prs, 1, Y, ldy); break;                            \
        case 2: name##_rows_nt(n, W, wrs, nr, P, prs, 2, Y, ldy); break;                            \
        case 3: name##_rows_nt(n, W, wrs, nr, P, prs, 3, Y, ldy); break;                            \
        default: name##_rows_nt(n, W, wrs, nr, P, prs, 4, Y, ldy); break;                          \
        }                                                                                           \
    }

DEFINE_FP_TILE(f32, float, fv_ld_f32, cvt_f32, KVT_TYPE_F32)
DEFINE_FP_TILE(f16, uint16_t, fv_ld_f16, kvt_f16_to_f32, KVT_TYPE_F16)
DEFINE_FP_TILE(bf16, uint16_t, fv_ld_bf16, kvt_bf16_to_f32, KVT_TYPE_BF16)

// ======================================================= 32-element blocks

// Prepared row of nb blocks, nbp = nb rounded up to 8:
//   float d[nbp]; float c[nbp]; int8 qs[32 * nb] (the blocks' values in order)
INLINE int64_t nb_pad(int64_t nb) { return (nb + 7) & ~(int64_t)7; }
static int64_t x32_prep_size(int64_t n) { return align64(8 * nb_pad(n / KVT_QK) + n); }

INLINE void x32_prep(int64_t n, const void *x, void *p, int WT) {
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb);
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
            c[ib] = -(float)Q8_OFFSET * d[ib] * (float)sum;
            q = b->qs;
        }
        memcpy(qs + 32 * ib, q, 32);
    }
    for (int64_t ib = nb; ib < nbp; ib++) d[ib] = c[ib] = 0;
}
static void q4_1_prep(int64_t n, const void *x, void *p) { x32_prep(n, x, p, WT_Q4_1); }
static void q8_0_prep(int64_t n, const void *x, void *p) { x32_prep(n, x, p, WT_Q8_0); }

// One weight row against NT prepared rows.
#ifdef KVT_SIMD_AVX512
#define X32_NT 8 // rows per call (each output's arithmetic is its own: any count gives the same bits)
#else
#define X32_NT NTMAX
#endif

// q4_1 in llama.cpp's order (ggml_vec_dot_q4_1_q8_1 on x86, 8 lanes on every ISA): per token one accumulator,
// acc = fma(dx * dy, float(i32 lanes of the block), acc) block by block, and the m * s terms in a scalar FMA
// chain; Y = hsum(acc) + chain. The prepared row keeps its blocks in order (no pairing).
// RR (1 or 2) consecutive rows x, x + wrs against NT prepared rows: RR * NT independent chains; pf (bytes,
// 0: none): decode's prefetch distance (Q41_PF_PAIRS).
INLINE void q4_1_rr(int64_t n, const char *x, size_t wrs, int RR, const char *P, size_t prs, int NT, float *Y,
                    int64_t ldy, size_t pf) {
    const size_t bs = sizeof(kvt_block_q4_1);
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb);
    const float *pd[X32_NT], *pc[X32_NT];
    const int8_t *pq[X32_NT];
    __m256 acc[2][X32_NT];
    float ms[2][X32_NT];
    UNROLL for (int t = 0; t < NT; t++) {
        pd[t] = (const float *)(P + t * prs);
        pc[t] = pd[t] + nbp;
        pq[t] = (const int8_t *)(pc[t] + nbp);
        UNROLL for (int r = 0; r < RR; r++) acc[r][t] = _mm256_setzero_ps(), ms[r][t] = 0.0f;
    }
    // 8 blocks at a time: their scales dx, mins m and products D = dx * dy as vectors first (the same
    // roundings as one by one), then the blocks in order
    for (int64_t g = 0; g < nb; g += 8) {
        const int gn = nb - g < 8 ? (int)(nb - g) : 8;
        if (pf) // this group's 160 bytes of the rows pf bytes on, into L2 (decode; see Q41_PF_PAIRS)
            UNROLL for (int r = 0; r < RR; r++) UNROLL for (int l = 0; l < 3; l++) _mm_prefetch(x + r * wrs + g * bs + pf + 64 * l, _MM_HINT_T1);
        float mx[2][8] __attribute__((aligned(32))), D[2][X32_NT][8] __attribute__((aligned(32)));
        UNROLL for (int r = 0; r < RR; r++) {
            const char *blk = x + r * wrs + g * bs;
            __m256 dx;
            if (gn == 8) {
                dx = kvt_f16x8_strided(blk, bs);
                _mm256_store_ps(mx[r], kvt_f16x8_strided(blk + 2, bs));
            } else {
                float d8[8] = {0};
                for (int k = 0; k < gn; k++) d8[k] = _cvtsh_ss(ld16(blk + k * bs)), mx[r][k] = _cvtsh_ss(ld16(blk + k * bs + 2));
                dx = _mm256_loadu_ps(d8);
            }
            UNROLL for (int t = 0; t < NT; t++) _mm256_store_ps(D[r][t], _mm256_mul_ps(dx, _mm256_loadu_ps(pd[t] + g)));
        }
        UNROLL for (int k = 0; k < 8; k++) {
            if (k >= gn) break;
            __m256i u[2];
            UNROLL for (int r = 0; r < RR; r++) u[r] = blk_u8(x + r * wrs + (g + k) * bs);
            UNROLL for (int t = 0; t < NT; t++) {
                UNROLL for (int r = 0; r < RR; r++) {
                    const __m256i p = blk_dot_u8(u[r], pq[t] + 32 * (g + k));
                    acc[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&D[r][t][k]), _mm256_cvtepi32_ps(p), acc[r][t]);
                    ms[r][t] = fmaf(mx[r][k], pc[t][g + k], ms[r][t]);
                }
            }
        }
    }
    UNROLL for (int t = 0; t < NT; t++) UNROLL for (int r = 0; r < RR; r++) Y[t * ldy + r] = kvt_hsum8(acc[r][t]) + ms[r][t];
}
INLINE void q4_1_row(int64_t n, const char *x, const char *P, size_t prs, int NT, float *Y, int64_t ldy) {
    q4_1_rr(n, x, 0, 1, P, prs, NT, Y, ldy, 0);
}


#ifdef KVT_SIMD_AVX512
// q8_0 on AVX-512 (matmul.h: the offset-128 grouped order): one row against NT prepared rows; per full 8-block group
// the blocks in pairs, 16 lanes (lanes 8h + i: block 2k + h, quad i), into acc[k & 1], the offset terms in cacc.
INLINE void x32_row(int64_t n, const char *x, const char *P, size_t prs, int NT, float *Y, int64_t ldy) {
    const size_t bs = sizeof(kvt_block_q8_0);
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb), nfull = nb & ~(int64_t)7;
    const float *pd[X32_NT], *pc[X32_NT];
    const int8_t *pq[X32_NT];
    UNROLL for (int t = 0; t < NT; t++) {
        pd[t] = (const float *)(P + t * prs);
        pc[t] = pd[t] + nbp;
        pq[t] = (const int8_t *)(pc[t] + nbp);
    }
    __m256 cacc[X32_NT];
    __m512 acc[X32_NT][2];
    UNROLL for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps(), cacc[t] = _mm256_setzero_ps();
    // lane -> block-in-group index for pair k: [2k x8, 2k+1 x8]
    __m512i idx[4];
    UNROLL for (int k = 0; k < 4; k++)
        idx[k] = _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k);
    for (int64_t g = 0; g < nfull; g += 8) {
        const char *blk = x + g * bs;
        const __m256 dx = kvt_f16x8_strided(blk, bs); // also multiplies c
        __m256 D[X32_NT];
        UNROLL for (int t = 0; t < NT; t++) {
            D[t] = _mm256_mul_ps(dx, _mm256_loadu_ps(pd[t] + g));
            cacc[t] = _mm256_fmadd_ps(dx, _mm256_loadu_ps(pc[t] + g), cacc[t]);
        }
        UNROLL for (int k = 0; k < 4; k++) {
            const __m512i u = q8_pair_u8(blk + 2 * k * bs);
            UNROLL for (int t = 0; t < NT; t++) {
                const __m512i yv = _mm512_loadu_si512((const void *)(pq[t] + 32 * (g + 2 * k)));
                const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yv);
                const __m512 s = _mm512_permutexvar_ps(idx[k], _mm512_castps256_ps512(D[t]));
                acc[t][k & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc[t][k & 1]);
            }
        }
    }
    float tail[X32_NT] = {0};
    for (int64_t ib = nfull; ib < nb; ib++) { // fewer than 8 blocks left
        const char *b = x + ib * bs;
        const float dx = kvt_f16_to_f32(ld16(b));
        UNROLL for (int t = 0; t < NT; t++) {
            const __m256i p = q8_blk_dot256(b, pq[t] + 32 * ib);
            tail[t] += dx * pd[t][ib] * (float)kvt_hsum8(_mm256_cvtepi32_ps(p));
            tail[t] += dx * pc[t][ib];
        }
    }
    UNROLL for (int t = 0; t < NT; t++) {
        const float main = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
        Y[t * ldy] = main + kvt_hsum8(cacc[t]) + tail[t];
    }
}
#endif

// Decode streams each weight row once from DRAM. The lean kernels (float, q8_0, K-quants) use no
// software prefetch: on the AMD Zen 4 the hardware prefetcher alone reads faster (a row-ahead _mm_prefetch
// of every line cost 20-25% of Q8_0 / Q4_K_M decode, and a same-row one 1024-4096 bytes ahead 40-45% of F16
// decode, one thread). q4_1, whose kernel spends more instructions per byte and reads two rows at once, needs
// one (without it it reads at 40% of the rate): per group of 8 blocks it asks for the same group's lines of
// the rows Q41_PF_PAIRS row pairs on, into L2 (_MM_HINT_T1). On the Zen 4, one thread, W 5632 x 2048
// (bench_kernels -p 1): AVX2 6.4 GB/s with a burst of a row pair's lines per pair into L1 (the old way),
// 10.3-11.9 with that burst into L2, 11.9-12.6 spread per group into L2; AVX-512 12.5 -> 14.5-15.2.
#define Q41_PF_PAIRS 4
#ifndef KVT_SIMD_AVX512 // AVX-512: q4_1_rows512 below
// q4_1: two rows per call (twice the independent FMA chains), an odd last row alone
static void q4_1_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, int nt, float *Y,
                      int64_t ldy, void *scratch) {
    (void)scratch;
    const char *w = W;
    for (int64_t r = 0; r < nr; r += 2) {
        const int rr = r + 1 < nr ? 2 : 1;
        const size_t pf = 2 * Q41_PF_PAIRS * wrs; // decode only (nt == 1)
        switch (nt * 2 + rr - 3) { // (nt, rr) -> 0 .. 7
        case 0: q4_1_rr(n, w + r * wrs, wrs, 1, P, prs, 1, Y + r, ldy, pf); break;
        case 1: q4_1_rr(n, w + r * wrs, wrs, 2, P, prs, 1, Y + r, ldy, pf); break;
        case 2: q4_1_rr(n, w + r * wrs, wrs, 1, P, prs, 2, Y + r, ldy, 0); break;
        case 3: q4_1_rr(n, w + r * wrs, wrs, 2, P, prs, 2, Y + r, ldy, 0); break;
        case 4: q4_1_rr(n, w + r * wrs, wrs, 1, P, prs, 3, Y + r, ldy, 0); break;
        case 5: q4_1_rr(n, w + r * wrs, wrs, 2, P, prs, 3, Y + r, ldy, 0); break;
        case 6: q4_1_rr(n, w + r * wrs, wrs, 1, P, prs, 4, Y + r, ldy, 0); break;
        default: q4_1_rr(n, w + r * wrs, wrs, 2, P, prs, 4, Y + r, ldy, 0); break;
        }
    }
}
#endif
#ifdef KVT_SIMD_AVX512
static void q8_0_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, int nt, float *Y,
                      int64_t ldy, void *scratch) {
    (void)scratch;
    const char *w = W;
    for (int64_t r = 0; r < nr; r++) {
        switch (nt) { // (each output's arithmetic is its own: any count gives the same bits)
        case 1: x32_row(n, w + r * wrs, P, prs, 1, Y + r, ldy); break;
        case 2: x32_row(n, w + r * wrs, P, prs, 2, Y + r, ldy); break;
        case 3: x32_row(n, w + r * wrs, P, prs, 3, Y + r, ldy); break;
        case 4: x32_row(n, w + r * wrs, P, prs, 4, Y + r, ldy); break;
        case 5: x32_row(n, w + r * wrs, P, prs, 5, Y + r, ldy); break;
        case 6: x32_row(n, w + r * wrs, P, prs, 6, Y + r, ldy); break;
        case 7: x32_row(n, w + r * wrs, P, prs, 7, Y + r, ldy); break;
        default: x32_row(n, w + r * wrs, P, prs, 8, Y + r, ldy); break;
        }
    }
}
#else
// q8_0 on AVX2 (matmul.h): per block the exact integer total S of its 32 products, then acc = acc +
// (float(S) * dx) * dy, one chain per output in block order (the scalar reference's operations) (gemm_avx2.c's 8-row tile keeps 8 rows' chains in its
// lanes). A row alone: the totals of 8 blocks at once (each block's 8 int32 partial sums by the sign trick,
// the 8 blocks' reduced into one vector, lane k: block g + k), then the chain over them in order. One row at
// a time keeps decode's weight reads one sequential stream (8 rows side by side read at half the rate).
INLINE float q8_0_row1(int64_t n, const char *x, const char *P) {
    const size_t bs = sizeof(kvt_block_q8_0);
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb), nfull = nb & ~(int64_t)7;
    const float *pd = (const float *)P;
    const int8_t *pq = (const int8_t *)(pd + 2 * nbp);
    const __m256i ones = _mm256_set1_epi16(1);
    float acc = 0.f;
    for (int64_t g = 0; g < nb; g += 8) {
        const int gn = g < nfull ? 8 : (int)(nb - g);
        __m256i p[8];
        UNROLL for (int k = 0; k < 8; k++) {
            if (k < gn) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(x + (g + k) * bs + 2));
                const __m256i yv = _mm256_loadu_si256((const __m256i *)(pq + 32 * (g + k)));
                p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(yv, w)), ones);
            } else {
                p[k] = _mm256_setzero_si256();
            }
        }
        const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
        const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
        const __m256i tot = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
        _Alignas(32) float v[8];
        const __m256 f = _mm256_cvtepi32_ps(tot);
        if (gn == 8) {
            _mm256_store_ps(v, _mm256_mul_ps(_mm256_mul_ps(f, kvt_f16x8_strided(x + g * bs, bs)), _mm256_loadu_ps(pd + g)));
        } else {
            _mm256_store_ps(v, f);
            for (int k = 0; k < gn; k++) v[k] = v[k] * kvt_f16_to_f32(ld16(x + (g + k) * bs)) * pd[g + k];
        }
        UNROLL for (int k = 0; k < 8; k++) if (k < gn) acc += v[k];
    }
    return acc;
}
static void q8_0_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, int nt, float *Y,
                      int64_t ldy, void *scratch) {
    (void)scratch;
    const char *w = W;
    for (int64_t r = 0; r < nr; r++) {
        for (int t = 0; t < nt; t++) Y[t * ldy + r] = q8_0_row1(n, w + r * wrs, (const char *)P + t * prs);
    }
}
#endif

#ifdef KVT_SIMD_AVX512
// q4_1 on AVX-512: two outputs per zmm (lanes 0-7 and 8-15), each lane doing exactly q4_1_row's operations:
// two rows against one token (decode) or one row against two tokens. Per 8 blocks the block headers of a row
// are converted 8 at a time (d and m), the products D = dx * dy as vectors.
// The headers (d, m: f16 at bytes 20k, 20k + 2 of blk) of the gn <= 8 blocks come from two 64-byte loads
// (bytes 0-63: blocks 0-3; bytes 80-143: blocks 4-7; masked to the gn blocks' bytes in a short group, so
// nothing past them is read) and one word permute, not from an 8-lane gather (on the Zen 4 the gather took
// about a quarter of decode's time).
INLINE void q4_1_hdr8(const char *blk, int gn, __m256 *d, __m256 *m) {
    // word index into [bytes 0-63 | bytes 80-143]: block k's d at word 10k (k < 4) or 32 + 10k - 40, m next
    const __m256i idx = _mm256_setr_epi16(0, 10, 20, 30, 32, 42, 52, 62, 1, 11, 21, 31, 33, 43, 53, 63);
    __m512i a, b;
    if (gn == 8) {
        a = _mm512_loadu_si512((const void *)blk);
        b = _mm512_loadu_si512((const void *)(blk + 80));
    } else {
        const int nbytes = 20 * gn;
        a = _mm512_maskz_loadu_epi8(nbytes >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << nbytes) - 1), blk);
        b = _mm512_maskz_loadu_epi8(nbytes <= 80 ? 0 : (((__mmask64)1 << (nbytes - 80)) - 1), blk + 80);
    }
    const __m256i h = _mm512_castsi512_si256(_mm512_permutex2var_epi16(a, _mm512_castsi256_si512(idx), b));
    *d = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *m = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}
// [u(a) | u(b)] of two blocks (u: the 16 low nibbles, then the 16 high ones)
INLINE __m512i q4_1_u2(const char *ba, const char *bb) {
    const __m512i a = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(ba + 4)));
    const __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(bb + 4)));
    const __m512i z = _mm512_mask_blend_epi64(0xF0, a, b);
    return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
}
INLINE __m256 hi256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
INLINE __m512 cat256(__m256 a, __m256 b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
}

// Rows xa and xb against one prepared row (decode); the two m * s chains side by side in the lanes of an xmm.
// Per group it asks for the same 160 bytes of the rows pf bytes on into L2 (see Q41_PF_PAIRS).
INLINE void q4_1_2rows(int64_t n, const char *xa, const char *xb, const char *P, float *ya, float *yb, size_t pf) {
    const size_t bs = sizeof(kvt_block_q4_1);
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb);
    const float *pd = (const float *)P, *pc = pd + nbp;
    const int8_t *pq = (const int8_t *)(pc + nbp);
    __m512 acc = _mm512_setzero_ps();
    __m128 ms = _mm_setzero_ps(); // lane 0: row a, lane 1: row b
    for (int64_t g = 0; g < nb; g += 8) {
        const int gn = nb - g < 8 ? (int)(nb - g) : 8;
        const char *ga = xa + g * bs, *gb = xb + g * bs;
        // this group's 160 bytes of the two rows pf bytes on, into L2 (see Q41_PF_PAIRS)
        UNROLL for (int l = 0; l < 3; l++) _mm_prefetch(ga + pf + 64 * l, _MM_HINT_T1), _mm_prefetch(gb + pf + 64 * l, _MM_HINT_T1);
        __m256 dxa, mxa, dxb, mxb;
        float mab[16] __attribute__((aligned(32))); // (m of a, m of b) per block
        q4_1_hdr8(ga, gn, &dxa, &mxa);
        q4_1_hdr8(gb, gn, &dxb, &mxb);
        const __m256 lo = _mm256_unpacklo_ps(mxa, mxb), hi = _mm256_unpackhi_ps(mxa, mxb);
        _mm256_store_ps(mab, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_store_ps(mab + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        const __m256 dy = _mm256_loadu_ps(pd + g);
        const __m512 DD = cat256(_mm256_mul_ps(dxa, dy), _mm256_mul_ps(dxb, dy));
        UNROLL for (int k = 0; k < 8; k++) {
            if (k >= gn) break;
            const __m512i u = q4_1_u2(ga + k * bs, gb + k * bs);
            const __m512i y = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(pq + 32 * (g + k))));
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y);
            const __m512 D = _mm512_permutexvar_ps(_mm512_set_epi32(8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k,
                                                                    k, k, k, k, k, k, k, k), DD);
            acc = _mm512_fmadd_ps(D, _mm512_cvtepi32_ps(p), acc);
            ms = _mm_fmadd_ps(_mm_castpd_ps(_mm_load_sd((const double *)(mab + 2 * k))), _mm_set1_ps(pc[g + k]), ms);
        }
    }
    *ya = kvt_hsum8(_mm512_castps512_ps256(acc)) + _mm_cvtss_f32(ms);
    *yb = kvt_hsum8(hi256(acc)) + _mm_cvtss_f32(_mm_movehdup_ps(ms));
}

// One row against NT <= X32_NT prepared rows, tokens in pairs (an odd last one paired with itself).
INLINE void q4_1_row512(int64_t n, const char *x, const char *P, size_t prs, int NT, float *Y, int64_t ldy) {
    const size_t bs = sizeof(kvt_block_q4_1);
    const int64_t nb = n / KVT_QK, nbp = nb_pad(nb);
    const int NP = (NT + 1) / 2;
    const float *pd[X32_NT], *pc[X32_NT];
    const int8_t *pq[X32_NT];
    UNROLL for (int t = 0; t < X32_NT; t++) {
        const int tt = t < NT ? t : NT - 1;
        pd[t] = (const float *)(P + tt * prs);
        pc[t] = pd[t] + nbp;
        pq[t] = (const int8_t *)(pc[t] + nbp);
    }
    __m512 acc[X32_NT / 2];
    float ms[X32_NT];
    UNROLL for (int j = 0; j < X32_NT / 2; j++) acc[j] = _mm512_setzero_ps();
    UNROLL for (int t = 0; t < X32_NT; t++) ms[t] = 0.0f;
    for (int64_t g = 0; g < nb; g += 8) {
        const int gn = nb - g < 8 ? (int)(nb - g) : 8;
        const char *gx = x + g * bs;
        __m256 dx, mx;
        float m8[8] __attribute__((aligned(32)));
        q4_1_hdr8(gx, gn, &dx, &mx);
        _mm256_store_ps(m8, mx);
        __m512 DD[X32_NT / 2];
        UNROLL for (int j = 0; j < NP; j++)
            DD[j] = cat256(_mm256_mul_ps(dx, _mm256_loadu_ps(pd[2 * j] + g)), _mm256_mul_ps(dx, _mm256_loadu_ps(pd[2 * j + 1] + g)));
        UNROLL for (int k = 0; k < 8; k++) {
            if (k >= gn) break;
            const __m512i u = q4_1_u2(gx + k * bs, gx + k * bs);
            const __m512i idx = _mm512_set_epi32(8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, 8 + k, k, k, k, k, k, k, k, k);
            UNROLL for (int j = 0; j < NP; j++) {
                const __m512i y = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(pq[2 * j] + 32 * (g + k)))),
                    _mm256_loadu_si256((const __m256i *)(pq[2 * j + 1] + 32 * (g + k))), 1);
                const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y);
                acc[j] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, DD[j]), _mm512_cvtepi32_ps(p), acc[j]);
            }
            UNROLL for (int t = 0; t < NT; t++) ms[t] = fmaf(m8[k], pc[t][g + k], ms[t]);
        }
    }
    UNROLL for (int j = 0; j < NP; j++) {
        Y[2 * j * ldy] = kvt_hsum8(_mm512_castps512_ps256(acc[j])) + ms[2 * j];
        if (2 * j + 1 < NT) Y[(2 * j + 1) * ldy] = kvt_hsum8(hi256(acc[j])) + ms[2 * j + 1];
    }
}

// q4_1 rows: pairs of rows for one token (decode), else one row against all tokens, in pairs.
static void q4_1_rows512(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, int nt,
                         float *Y, int64_t ldy, void *scratch) {
    (void)scratch;
    const char *w = W, *p = P;
    int64_t r = 0;
    if (nt == 1) {
        for (; r + 2 <= nr; r += 2) {
            q4_1_2rows(n, w + r * wrs, w + (r + 1) * wrs, p, Y + r, Y + r + 1, 2 * Q41_PF_PAIRS * wrs);
        }
        if (r < nr) q4_1_row(n, w + r * wrs, p, prs, 1, Y + r, ldy);
        return;
    }
    for (; r < nr; r++) {
        switch (nt) {
        case 2: q4_1_row512(n, w + r * wrs, p, prs, 2, Y + r, ldy); break;
        case 3: q4_1_row512(n, w + r * wrs, p, prs, 3, Y + r, ldy); break;
        case 4: q4_1_row512(n, w + r * wrs, p, prs, 4, Y + r, ldy); break;
        case 5: q4_1_row512(n, w + r * wrs, p, prs, 5, Y + r, ldy); break;
        case 6: q4_1_row512(n, w + r * wrs, p, prs, 6, Y + r, ldy); break;
        case 7: q4_1_row512(n, w + r * wrs, p, prs, 7, Y + r, ldy); break;
        default: q4_1_row512(n, w + r * wrs, p, prs, 8, Y + r, ldy); break;
        }
    }
}
#endif


// ============================================== K-quant kernels (AVX-512 VNNI)
#ifdef KVT_SIMD_AVX512
#include "kq_avx512.h"
#endif
// q4_K_x8 decode (both ISAs)
#include "kqx8.h"
// q4_1_x8 decode (both ISAs)
#include "q41x8.h"
// q8_0_x8 decode and small batches (both ISAs)
#include "q80x8.h"
// q4_0_x8 decode and batches (both ISAs); unrepacked q4_0 rows are packed into it per strip (matmul.c)
#include "q40x8.h"

// ============================================ old AVX-512 panel tiles (off by default)
// f16 and q8_0 panels of 16 weight rows (see the note at KVT_MM_AVX512_GEMM).
#if defined(KVT_SIMD_AVX512) && KVT_MM_AVX512_GEMM
#define GP_R 16
#define GP_T 8
#define bcast32 kq_bcast32

// ------------------------------------------------------------ f16 GEMM
// Activations converted to f32 rows once per call; weights packed per panel
// of FP_RP = 32 rows and FK = 256 columns into [k][32 rows] f32 (a 16x16
// transpose per 16 rows x 16 k), then FP_TT tokens x 32 rows tiles of FMAs
// with the activation broadcast from memory; partial sums over K blocks
// accumulate in Y.
#ifndef FP_RV
#define FP_RV 2 // zmm of rows per tile
#endif
#define FP_RP (16 * FP_RV)
#ifndef FP_TT
#define FP_TT 12 // tokens per tile: FP_RV * FP_TT accumulators
#endif
_Static_assert(FP_TT <= 14 && FP_TT > 1 && FP_RV * FP_TT <= 28, "register tile must fit 32 zmm (and UNROLL 16)");
#define FK 256

INLINE void transpose16x16_ps(__m512 r[16]) {
    __m512 t[16], u[16];
    UNROLL for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    UNROLL for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    // u[4q + c]: 128-bit lane L holds rows 4q..4q+3 of column 4L + c
    UNROLL for (int i = 0; i < 16; i += 8) {
        UNROLL for (int c = 0; c < 4; c++) {
            t[i / 2 + c] = _mm512_shuffle_f32x4(u[i + c], u[i + 4 + c], 0x88);     // cols c, 8+c (rows 4q..)
            t[8 + i / 2 + c] = _mm512_shuffle_f32x4(u[i + c], u[i + 4 + c], 0xdd); // cols 4+c, 12+c
        }
    }
    // t[c] (c<4): [rows0-3 col c, rows0-3 col 8+c, rows4-7 col c, rows4-7 col 8+c]; t[4+c] same rows 8-15
    // t[8+c]: cols 4+c / 12+c for rows 0-7; t[12+c]: rows 8-15
    UNROLL for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(t[c], t[4 + c], 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(t[c], t[4 + c], 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(t[8 + c], t[12 + c], 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(t[8 + c], t[12 + c], 0xdd);
    }
}

// Packs rows [0, nr) (missing rows zero) x columns [k0, k0 + kl) (kl multiple of 16) into pan[k][32].
static void f16_pack(const char *W, size_t wrs, int nr, int64_t k0, int64_t kl, float *pan) {
    for (int h = 0; h < FP_RP; h += 16)
        for (int64_t k = 0; k < kl; k += 16) {
            __m512 r[16];
            UNROLL for (int i = 0; i < 16; i++)
                r[i] = h + i < nr ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)(W + (size_t)(h + i) * wrs) + k0 + k)))
                                  : _mm512_setzero_ps();
            transpose16x16_ps(r);
            UNROLL for (int i = 0; i < 16; i++) _mm512_store_ps(pan + (k + i) * FP_RP + h, r[i]);
        }
}

// X: FP_TT activation rows of FK floats (stride FK). pf: the next weight panel
// (32 rows of pf_wrs bytes, 512 bytes each) to prefetch while computing, or NULL.
// RV <= FP_RV: zmm of rows actually computed (1 for a panel of at most 16 rows).
INLINE void fp_tile(int64_t kl, const float *pan, const float *X, int NT, int first, float *Y, int64_t ldy,
                    const __mmask16 *m, const char *pf, size_t pf_wrs, int RV) {
    __m512 acc[FP_TT][FP_RV];
    UNROLL for (int t = 0; t < NT; t++)
        UNROLL for (int v = 0; v < RV; v++)
            acc[t][v] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[v], Y + t * ldy + 16 * v);
    _Pragma("GCC unroll 4") for (int64_t k = 0; k < kl; k++) {
        __m512 w[FP_RV];
        UNROLL for (int v = 0; v < RV; v++) w[v] = _mm512_load_ps(pan + k * FP_RP + 16 * v);
        if (pf) { // lines k and k + kl of the next panel (8 lines of 512 bytes per row)
            _mm_prefetch(pf + (size_t)(k >> 3) * pf_wrs + 64 * (size_t)(k & 7), _MM_HINT_T0);
            if (k + kl < FP_RP * 8)
                _mm_prefetch(pf + (size_t)((k + kl) >> 3) * pf_wrs + 64 * (size_t)(k & 7), _MM_HINT_T0);
        }
        UNROLL for (int t = 0; t < NT; t++) {
            const __m512 x = _mm512_set1_ps(X[t * FK + k]);
            UNROLL for (int v = 0; v < RV; v++) acc[t][v] = _mm512_fmadd_ps(w[v], x, acc[t][v]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++)
        UNROLL for (int v = 0; v < RV; v++) _mm512_mask_storeu_ps(Y + t * ldy + 16 * v, m[v], acc[t][v]);
}

static int64_t f16_gemm_scratch(int64_t n, int64_t n_tok) {
    (void)n;
    return (FK * FP_RP + n_tok * FK) * 4;
}

static void f16_gemm(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                     float *Y, int64_t ldy, void *scratch) {
    float *pan = scratch;
    float *xk = pan + FK * FP_RP; // [n_tok][FK] activation slice of the current K block
    const int64_t n16 = n & ~(int64_t)15;
    for (int64_t k0 = 0; k0 < n16; k0 += FK) {
        const int64_t kl = n16 - k0 < FK ? n16 - k0 : FK;
        for (int64_t t = 0; t < n_tok; t++)
            kvt_f16_to_f32_row_avx2((const uint16_t *)((const char *)X + t * xrs) + k0, xk + t * FK, kl);
        for (int64_t r0 = 0; r0 < nr; r0 += FP_RP) {
            const int rows = (int)(nr - r0 < FP_RP ? nr - r0 : FP_RP);
            __mmask16 m[FP_RV];
            for (int v = 0; v < FP_RV; v++) {
                const int rv = rows - 16 * v;
                m[v] = (__mmask16)(rv >= 16 ? 0xffff : rv <= 0 ? 0 : (1u << rv) - 1);
            }
            f16_pack((const char *)W + r0 * (int64_t)wrs, wrs, rows, k0, kl, pan);
            // next full panel (rows r0 + 32.. of this K block, else the next K block), prefetched by the first tile
            const int64_t nk0 = r0 + FP_RP < nr ? k0 : k0 + FK, nr0 = r0 + FP_RP < nr ? r0 + FP_RP : 0;
            const char *pf = kl == FK && nk0 + FK <= n16 && nr0 + FP_RP <= nr
                                 ? (const char *)W + nr0 * (int64_t)wrs + nk0 * 2 : NULL;
            for (int64_t t0 = 0; t0 < n_tok; t0 += FP_TT) {
                const int nt = (int)(n_tok - t0 < FP_TT ? n_tok - t0 : FP_TT);
                const float *x = xk + t0 * FK;
                float *y = Y + t0 * ldy + r0;
                const int first = k0 == 0;
                const char *p = t0 == 0 ? pf : NULL;
#define FP_CASE(N)                                                                                  \
    case N:                                                                                         \
        if (rows <= 16) {                                                                           \
            fp_tile(kl, pan, x, N, first, y, ldy, m, p, wrs, 1);                                    \
        } else {                                                                                    \
            fp_tile(kl, pan, x, N, first, y, ldy, m, p, wrs, FP_RV);                                \
        }                                                                                           \
        break;
                switch (nt) {
                FP_CASE(1) FP_CASE(2) FP_CASE(3) FP_CASE(4) FP_CASE(5) FP_CASE(6) FP_CASE(7)
#if FP_TT > 8
                FP_CASE(8) FP_CASE(9) FP_CASE(10) FP_CASE(11)
#endif
#if FP_TT > 12
                FP_CASE(12) FP_CASE(13)
#endif
                default: FP_CASE(FP_TT)
                }
#undef FP_CASE
            }
        }
    }
    if (n16 < n) { // columns past the last multiple of 16
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < nr; r++) {
                const uint16_t *w = (const uint16_t *)((const char *)W + r * (int64_t)wrs);
                const uint16_t *x = (const uint16_t *)((const char *)X + t * xrs);
                float s = n16 ? Y[t * ldy + r] : 0.f;
                for (int64_t k = n16; k < n; k++) s += kvt_f16_to_f32(w[k]) * kvt_f16_to_f32(x[k]);
                Y[t * ldy + r] = s;
            }
    }
}

// ------------------------------------------------------------ q8_0 GEMM
// Same scheme as the K-quants with 32-blocks: panel per block = qs as
// unsigned (xor 0x80) [8 kk][16 rows][4] + float d[16] (Q8P bytes); the
// offset 128 is removed by starting each block's dot at -128 * sum(y).
// Activation side-info per token and block: {int32 -128*sum(y), float dy}.
#define Q8P (512 + 64)

static void q8p_pack(int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan) {
    const __m256i flip = _mm256_set1_epi8(-128);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pb = pan + b * Q8P;
        __m256i v[GP_R];
        float *d = (float *)(pb + 512);
        UNROLL for (int r = 0; r < GP_R; r++) {
            const kvt_block_q8_0 *x = (const kvt_block_q8_0 *)(W + (size_t)(r < nr ? r : 0) * wrs) + b;
            v[r] = r < nr ? _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs), flip) : _mm256_setzero_si256();
            d[r] = r < nr ? kvt_f16_to_f32(x->d) : 0.f;
        }
        transpose16x8_store(v, pb);
    }
}

static void q8p_aux(int64_t nb, const char *X, size_t xrs, int64_t n_tok, int32_t *aux) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++) {
            const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)(X + t * xrs) + b;
            int sum = 0;
            for (int j = 0; j < KVT_QK; j++) sum += y->qs[j];
            const float dy = kvt_f16_to_f32(y->d);
            aux[2 * (t * nb + b)] = -128 * sum;
            memcpy(&aux[2 * (t * nb + b) + 1], &dy, 4);
        }
}

INLINE void q8p_tile(int64_t nb, const uint8_t *pan, const char *X, size_t xrs, const int32_t *aux, int NT, float *Y,
                     int64_t ldy, __mmask16 mask, const char *pf, size_t pf_wrs) {
    __m512 facc[GP_T];
    UNROLL for (int t = 0; t < NT; t++) facc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = pan + b * Q8P;
        if (pf && (b & 1) == 0) // 16 rows x 68 bytes every other block
            UNROLL for (int r = 0; r < GP_R; r++) {
                _mm_prefetch(pf + (size_t)r * pf_wrs + (size_t)b * sizeof(kvt_block_q8_0), _MM_HINT_T0);
                _mm_prefetch(pf + (size_t)r * pf_wrs + (size_t)b * sizeof(kvt_block_q8_0) + 64, _MM_HINT_T0);
            }
        __m512i p[GP_T];
        UNROLL for (int t = 0; t < NT; t++) p[t] = _mm512_set1_epi32(aux[2 * (t * nb + b)]);
        UNROLL for (int kk = 0; kk < 8; kk++) {
            const __m512i w = _mm512_load_si512((const void *)(pb + 64 * kk));
            UNROLL for (int t = 0; t < NT; t++)
                p[t] = _mm512_dpbusd_epi32(p[t], w, bcast32(((const kvt_block_q8_0 *)(X + t * xrs) + b)->qs + 4 * kk));
        }
        const __m512 d = _mm512_load_ps((const void *)(pb + 512));
        UNROLL for (int t = 0; t < NT; t++) {
            float dy;
            memcpy(&dy, &aux[2 * (t * nb + b) + 1], 4);
            facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[t]), _mm512_mul_ps(d, _mm512_set1_ps(dy)), facc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(Y + t * ldy, mask, facc[t]);
}

static int64_t q8p_scratch(int64_t n, int64_t n_tok) { return (n / KVT_QK) * (Q8P + 8 * n_tok); }

static void q8_0_gemm(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                      float *Y, int64_t ldy, void *scratch) {
    const int64_t nb = n / KVT_QK;
    uint8_t *pan = scratch;
    int32_t *aux = (int32_t *)(pan + nb * Q8P);
    q8p_aux(nb, X, xrs, n_tok, aux);
    for (int64_t r0 = 0; r0 < nr; r0 += GP_R) {
        const int rows = (int)(nr - r0 < GP_R ? nr - r0 : GP_R);
        q8p_pack(nb, (const char *)W + r0 * (int64_t)wrs, wrs, rows, pan);
        const __mmask16 mask = (__mmask16)((1u << rows) - 1);
        for (int64_t t0 = 0; t0 < n_tok; t0 += GP_T) {
            const int nt = (int)(n_tok - t0 < GP_T ? n_tok - t0 : GP_T);
            const char *x = (const char *)X + t0 * (int64_t)xrs;
            const int32_t *a = aux + 2 * t0 * nb;
            float *y = Y + t0 * ldy + r0;
            const char *pf = t0 == 0 && r0 + 2 * GP_R <= nr ? (const char *)W + (r0 + GP_R) * (int64_t)wrs : NULL;
#define Q8_CASE(N) case N: q8p_tile(nb, pan, x, xrs, a, N, y, ldy, mask, pf, wrs); break;
            switch (nt) {
            Q8_CASE(1) Q8_CASE(2) Q8_CASE(3) Q8_CASE(4) Q8_CASE(5) Q8_CASE(6) Q8_CASE(7)
            default: q8p_tile(nb, pan, x, xrs, a, GP_T, y, ldy, mask, pf, wrs); break;
            }
#undef Q8_CASE
        }
    }
}

#endif // GEMM tiles


#ifndef KVT_SIMD_AVX512
// AVX2 q6_K decode: the q8_K row as it is, and quant_avx2.c's rows two at a time (nt_max 1: batches take the GEMM tile).
static int64_t q6k_prep_size(int64_t n) { return (kvt_row_size(KVT_TYPE_Q8_K, n) + 63) & ~(int64_t)63; }
static void q6k_prep(int64_t n, const void *x, void *p) { memcpy(p, x, (size_t)kvt_row_size(KVT_TYPE_Q8_K, n)); }
static void q6k_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, int nt, float *Y,
                     int64_t ldy, void *scratch) {
    (void)prs, (void)nt, (void)ldy, (void)scratch;
    kvt_q6k_rows_avx2(n, W, wrs, nr, P, Y);
}
#endif

// ==================================================================== table

// The GEMM tiles of gemm_avx2.c / gemm_avx512.c from 2 tokens on (bitwise equal to the rows kernels' decode).
// Every entry is written with designated fields (KR: the rows kernel; G2, GEMM: the many-token path), so that a
// field left out is zero by rule and no compiler warns about it.
#define KR(ps, p, r) .prep_size = ps, .prep = p, .rows = r
#define GEMM(min_tok, scr, fn) , .gemm_min_tok = min_tok, .gemm_scratch = scr, .gemm = fn
#ifndef KVT_SIMD_AVX512
#define G2(name) GEMM(2, kvt_gemm_scratch_##name##_avx2, kvt_gemm_##name##_avx2)
#elif KVT_MM_AVX512_GEMM
#define G2(name)
#else
#define G2(name) GEMM(2, kvt_gemm_scratch_##name##_avx512, kvt_gemm_##name##_avx512)
#endif
// Tokens from which q2_K / q3_K and iq4_nl batches take gemm_lowbit.h's tiles (the rows kernels below: the
// tiles prepare each weight row per call). `kvtier bench -p N -n 0 -r 5 -t 2`, TinyLlama-shaped Q2_K / Q3_K_M / IQ4_NL,
// rows kernels -> tiles from 2 tokens, Intel Xeon 0xA7, 2026-12-07: pp8 92 -> 95 / 93 -> 89 / 63 -> 82, pp12 99 -> 113 /
// 96 -> 113 / 64 -> 95, pp4 (Q3_K_M / IQ4_NL) 87 -> 52 / 60 -> 58. (iq4_xs: kq_avx512.h's panel tile from KQXS_GEMM_MIN.)
#ifndef LB_KQ_GEMM_MIN
#define LB_KQ_GEMM_MIN 9
#endif
#ifndef LB_NL_GEMM_MIN
#define LB_NL_GEMM_MIN 5
#endif
// The AVX2 build's (the same CPU with KVT_ISA=avx2, rows kernels -> tiles from 2 tokens, Q3_K_M / Q2_K / IQ4_NL):
// pp12 69 -> 60 / 75 -> 64 / 50 -> 54, pp24 75 -> 80 / 78 -> 79 / 52 -> 61, pp32 75 -> 83 / 74 -> 81 / 50 -> 62.
#ifndef LB_KQ2_GEMM_MIN
#define LB_KQ2_GEMM_MIN 24
#endif
#ifndef LB_NL2_GEMM_MIN
#define LB_NL2_GEMM_MIN 10
#endif
#ifndef LB_XS2_GEMM_MIN // IQ4_XS: pp16 72 -> 62, pp32 74 -> 73, pp128 73 -> 85
#define LB_XS2_GEMM_MIN 40
#endif
static const kvt_mm_kernel k_mm[KVT_TYPE_COUNT] = {
#ifdef KVT_SIMD_AVX512
    [KVT_TYPE_F32] = {KR(fp_prep_size, f32_prep, f32_rows) G2(f32)},
    [KVT_TYPE_F16] = {KR(fp_prep_size, f16_prep, f16_rows) MM_GEMM512(GEMM(16, f16_gemm_scratch, f16_gemm)) G2(f16)},
    [KVT_TYPE_BF16] = {KR(fp_prep_size, bf16_prep, bf16_rows) G2(bf16)},
    [KVT_TYPE_Q4_1] = {KR(x32_prep_size, q4_1_prep, q4_1_rows512), .nt_max = X32_NT},
    [KVT_TYPE_Q8_0] = {KR(x32_prep_size, q8_0_prep, q8_0_rows) MM_GEMM512(GEMM(8, q8p_scratch, q8_0_gemm)), .nt_max = X32_NT},
    [KVT_TYPE_Q4_K] = {KR(kp_prep_size, q4_K_prep, q4_K_rows) GEMM(KQ4_GEMM_MIN, kq_scratch, q4_K_gemm), .nt_max = KP_NT},
    [KVT_TYPE_Q6_K] = {KR(kp_prep_size, q6_K_prep, q6_K_rows) GEMM(KQ6_GEMM_MIN, kq_scratch, q6_K_gemm), .nt_max = KP_NT},
    [KVT_TYPE_Q5_K] = {KR(NULL, NULL, NULL) GEMM(KQ5_GEMM_MIN, kq_scratch, q5_K_gemm)}, // decode: quant_avx2.c's q5_K dot
    // decode and batches below their minimum: quant_lowbit_avx2.c's dots
    [KVT_TYPE_Q2_K] = {KR(NULL, NULL, NULL) GEMM(LB_KQ_GEMM_MIN, kvt_gemm_scratch_q2_K_avx512, kvt_gemm_q2_K_avx512)},
    [KVT_TYPE_Q3_K] = {KR(NULL, NULL, NULL) GEMM(LB_KQ_GEMM_MIN, kvt_gemm_scratch_q3_K_avx512, kvt_gemm_q3_K_avx512)},
    [KVT_TYPE_IQ4_NL] = {KR(NULL, NULL, NULL) GEMM(LB_NL_GEMM_MIN, kvt_gemm_scratch_iq4_nl_avx512, kvt_gemm_iq4_nl_avx512)},
    [KVT_TYPE_IQ4_XS] = {KR(NULL, NULL, NULL) GEMM(KQXS_GEMM_MIN, kq_scratch, iq4_xs_gemm)}, // kq_avx512.h's panel tile
#else
    [KVT_TYPE_F32] = {KR(fp_prep_size, f32_prep, f32_rows) G2(f32)},
    [KVT_TYPE_F16] = {KR(fp_prep_size, f16_prep, f16_rows) G2(f16)},
    [KVT_TYPE_BF16] = {KR(fp_prep_size, bf16_prep, bf16_rows) G2(bf16)},
    [KVT_TYPE_Q4_1] = {KR(x32_prep_size, q4_1_prep, q4_1_rows) G2(q4_1)},
    [KVT_TYPE_Q8_0] = {KR(x32_prep_size, q8_0_prep, q8_0_rows) G2(q8_0)},
    [KVT_TYPE_Q4_K] = {KR(NULL, NULL, NULL) G2(q4_K)}, // decode: quant_avx2.c's q4_K dot
    [KVT_TYPE_Q5_K] = {KR(NULL, NULL, NULL) G2(q5_K)},
    [KVT_TYPE_Q6_K] = {KR(q6k_prep_size, q6k_prep, q6k_rows) G2(q6_K), .nt_max = 1},
    [KVT_TYPE_Q2_K] = {KR(NULL, NULL, NULL) GEMM(LB_KQ2_GEMM_MIN, kvt_gemm_scratch_q2_K_avx2, kvt_gemm_q2_K_avx2)},
    [KVT_TYPE_Q3_K] = {KR(NULL, NULL, NULL) GEMM(LB_KQ2_GEMM_MIN, kvt_gemm_scratch_q3_K_avx2, kvt_gemm_q3_K_avx2)},
    [KVT_TYPE_IQ4_NL] = {KR(NULL, NULL, NULL) GEMM(LB_NL2_GEMM_MIN, kvt_gemm_scratch_iq4_nl_avx2, kvt_gemm_iq4_nl_avx2)},
    [KVT_TYPE_IQ4_XS] = {KR(NULL, NULL, NULL) GEMM(LB_XS2_GEMM_MIN, kvt_gemm_scratch_iq4_xs_avx2, kvt_gemm_iq4_xs_avx2)},
#endif
};

const kvt_mm_kernel *KVT_MM_TABLE_FN(kvt_type t) {
    if ((unsigned)t >= KVT_TYPE_COUNT || (!k_mm[t].rows && !k_mm[t].gemm)) return NULL;
    return &k_mm[t];
}
