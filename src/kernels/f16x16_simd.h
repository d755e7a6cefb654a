// f16x16_simd.h - the f16_x16 kernels (f16x16.h) for AVX2 (f16x16_avx2.c) and AVX-512 (f16x16_avx512.c,
// KVT_SIMD_AVX512): a panel's 16 rows are one zmm, or two ymm (FX_H halves of FX_L lanes). Every output is the
// single FMA chain over k of f16x16.h, so both builds and the scalar reference give the same bits.
#include <immintrin.h>
#include <string.h>

#include "bits_avx2.h"
#include "f16x16.h"
#include "matmul.h"
#include "quant.h"

#ifdef KVT_SIMD_AVX512
#define FX(name) kvt_f16x16_##name##_avx512
#define FX_H 1  // vectors per panel
#define FX_L 16 // lanes per vector
#define FX_NP 8 // GEMV: panels in flight (8 FMA chains)
#define FX_SMALL 8 // batches up to this many tokens: the GEMV with NT tokens
#define FX_TP 2 // GEMM tile: panels
#define FX_TT 12 // GEMM tile: tokens (2 x 12 = 24 zmm accumulators)
typedef __m512 fx_v;
#define fx_zero _mm512_setzero_ps
#define fx_ldw(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define fx_bc(p) _mm512_set1_ps(*(p))
#define fx_fma _mm512_fmadd_ps
#define fx_ldy _mm512_loadu_ps
#define fx_sty _mm512_storeu_ps
#else
#define FX(name) kvt_f16x16_##name##_avx2
#define FX_H 2
#define FX_L 8
#define FX_NP 4 // 8 ymm chains
#define FX_SMALL 6
#define FX_TP 1
#define FX_TT 6 // 2 x 6 = 12 ymm accumulators, 2 weight vectors, 1 broadcast
typedef __m256 fx_v;
#define fx_zero _mm256_setzero_ps
#define fx_ldw(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define fx_bc(p) _mm256_broadcast_ss(p)
#define fx_fma _mm256_fmadd_ps
#define fx_ldy _mm256_loadu_ps
#define fx_sty _mm256_storeu_ps
#endif

// GEMM: while a panel's tiles run, the next panel's weights of the k block (FX_TP * 32 * KC bytes) are prefetched into
// L2, a share before each tile, so that their conversion to f32 (FX_WF32) does not wait on DRAM. AVX2 on the AMD EPYC
// Zen 3 (2 vCPUs, tl-f16 pp128): 4 of 5 alternating rounds, median 85.1 -> 89.0 t/s (docs/log/BENCHMARKS-kernels-3.md,
// z3pp). The AVX-512 build (not measured with it) keeps the form before; FX_PF_W=1 there to study it.
#ifndef FX_PF_W
#ifdef KVT_SIMD_AVX512
#define FX_PF_W 0
#else
#define FX_PF_W 1
#endif
#endif
// FX_WF32 1: the GEMM tile reads the k block's weights converted to f32 once for all the token tiles (a store and
// reload of 2 f32 bytes per f16 byte); 0: each tile converts the f16 weights it reads (2 conversions per 24 FMAs on
// AVX-512). AVX-512 on the AMD EPYC Zen 5 (one thread, n 2048, 128 tokens): 0 is 1.08-1.18x faster (z5f16,
// docs/log/BENCHMARKS-kernels-5.md); AVX2 (fx_gemm3, 3 weight vectors per 12 FMAs) keeps 1.
#ifndef FX_WF32
#ifdef KVT_SIMD_AVX512
#define FX_WF32 0
#else
#define FX_WF32 1
#endif
#endif
#define FX_INLINE static inline __attribute__((always_inline))
#define FX_UNROLL _Pragma("GCC unroll 32")

// ---- GEMV: NP panels at w (panel stride wps elements) against NT f32 rows xf (stride n); y[t * ldy + 16q + i] for
// q < NP, t < NT (NT = 1: decode; 2 .. FX_SMALL: small batches, each weight converted once for the NT rows).
// Prefetch (pf > 0: kvt_kernels_prefetch_dense(), the CPU's dense decode distance): each panel's line pf bytes ahead into L2 and,
// with nd > 0, its line nd bytes ahead into L1 (KVT_X8_PF_NEAR, as the x8 GEMVs); nd 0: the line pf bytes ahead into
// L1 only (the form before 2026-12-01; study form 1 of KVT_TYPE_F16_X16). Paired from DRAM on the Intel Xeon the split
// read 1.06-1.10x faster on both ISAs, 98-103% of the probe (docs/log/BENCHMARKS-kernels-3.md, k14): with 4 (AVX2) or
// 8 (AVX-512) panels at 4096 bytes ahead, 16-32 KiB of lines were requested into L1 at once.
FX_INLINE void fx_gemv_np(const int NP, const int NT, int64_t n, const uint16_t *w, int64_t wps, const float *xf,
                          float *y, int64_t ldy, int64_t pf, int64_t nd) {
    fx_v acc[FX_NP * FX_H][FX_SMALL];
    FX_UNROLL for (int q = 0; q < NP * FX_H; q++) FX_UNROLL for (int t = 0; t < NT; t++) acc[q][t] = fx_zero();
    int64_t k = 0;
    for (; k + 2 <= n; k += 2) {
        if (pf && nd) {
            FX_UNROLL for (int q = 0; q < NP; q++) _mm_prefetch((const char *)(w + q * wps + 16 * k) + pf, KVT_X8_PF_HINT);
            FX_UNROLL for (int q = 0; q < NP; q++) _mm_prefetch((const char *)(w + q * wps + 16 * k) + nd, _MM_HINT_T0);
        } else if (pf) {
            FX_UNROLL for (int q = 0; q < NP; q++) _mm_prefetch((const char *)(w + q * wps + 16 * k) + pf, _MM_HINT_T0);
        }
        FX_UNROLL for (int e = 0; e < 2; e++) {
            fx_v x[FX_SMALL];
            FX_UNROLL for (int t = 0; t < NT; t++) x[t] = fx_bc(xf + t * n + k + e);
            FX_UNROLL for (int q = 0; q < NP; q++) FX_UNROLL for (int h = 0; h < FX_H; h++) {
                const fx_v wv = fx_ldw(w + q * wps + 16 * (k + e) + FX_L * h);
                FX_UNROLL for (int t = 0; t < NT; t++) acc[q * FX_H + h][t] = fx_fma(wv, x[t], acc[q * FX_H + h][t]);
            }
        }
    }
    for (; k < n; k++) {
        FX_UNROLL for (int q = 0; q < NP; q++) FX_UNROLL for (int h = 0; h < FX_H; h++) {
            const fx_v wv = fx_ldw(w + q * wps + 16 * k + FX_L * h);
            FX_UNROLL for (int t = 0; t < NT; t++) acc[q * FX_H + h][t] = fx_fma(wv, fx_bc(xf + t * n + k), acc[q * FX_H + h][t]);
        }
    }
    FX_UNROLL for (int q = 0; q < NP; q++) FX_UNROLL for (int h = 0; h < FX_H; h++) FX_UNROLL for (int t = 0; t < NT; t++)
        fx_sty(y + t * ldy + 16 * q + FX_L * h, acc[q * FX_H + h][t]);
}

#define FX_GEMV_CASE(c) case c: fx_gemv_np(c, 1, n, w, wps, xf, y, ldy, pf, nd); break;
static void fx_gemv_tail(int np, int64_t n, const uint16_t *w, int64_t wps, const float *xf, float *y, int64_t ldy,
                         int64_t pf, int64_t nd) {
    switch (np) {
        FX_GEMV_CASE(1) FX_GEMV_CASE(2) FX_GEMV_CASE(3)
#if FX_NP > 4
        FX_GEMV_CASE(4) FX_GEMV_CASE(5) FX_GEMV_CASE(6) FX_GEMV_CASE(7)
#endif
    default: break;
    }
}

// Panels [p0, p1) of W for NT tokens (xf: their f32 values, stride n), into Yp[t * ldy + 16 (p - p0) + i]; NPT panels
// at once (NT * NPT * FX_H FMA chains).
#define FX_GEMV_NT(NT, NPT)                                                                                          \
    static void fx_gemv_##NT(int64_t n, const uint16_t *W, int64_t p0, int64_t p1, const float *xf, float *Yp,      \
                             int64_t ldy, int64_t pf, int64_t nd) {                                                  \
        const int64_t wps = 16 * n;                                                                                  \
        int64_t p = p0;                                                                                              \
        for (; p + (NPT) <= p1; p += (NPT))                                                                          \
            fx_gemv_np(NPT, NT, n, W + p * wps, wps, xf, Yp + 16 * (p - p0), ldy, pf, nd);                           \
        if (NT == 1 && p < p1) fx_gemv_tail((int)(p1 - p), n, W + p * wps, wps, xf, Yp + 16 * (p - p0), ldy, pf, nd); \
        else                                                                                                         \
            for (; p < p1; p++) fx_gemv_np(1, NT, n, W + p * wps, wps, xf, Yp + 16 * (p - p0), ldy, pf, nd);       \
    }
#ifdef KVT_SIMD_AVX512
FX_GEMV_NT(1, 8) FX_GEMV_NT(2, 8) FX_GEMV_NT(3, 6) FX_GEMV_NT(4, 4) FX_GEMV_NT(5, 4) FX_GEMV_NT(6, 4) FX_GEMV_NT(7, 3)
FX_GEMV_NT(8, 3)
#else
FX_GEMV_NT(1, 4) FX_GEMV_NT(2, 3) FX_GEMV_NT(3, 2) FX_GEMV_NT(4, 1) FX_GEMV_NT(5, 1) FX_GEMV_NT(6, 1)
#endif
typedef void (*fx_gemv_fn)(int64_t n, const uint16_t *W, int64_t p0, int64_t p1, const float *xf, float *Yp, int64_t ldy,
                           int64_t pf, int64_t nd);
static const fx_gemv_fn k_gemv[FX_SMALL] = {fx_gemv_1, fx_gemv_2, fx_gemv_3, fx_gemv_4, fx_gemv_5, fx_gemv_6,
#if FX_SMALL > 6
                                            fx_gemv_7, fx_gemv_8
#endif
};

// ---- GEMM tile: TP panels at w (stride wps) x NT tokens, kc k's; xp: [kc][NT] f32; Y[t * ldy + 16q + i], the
// accumulators starting at 0 (first) or at Y's values (a later k block of the same chains)
#if FX_WF32
// (the weights of the k block as f32, [TP][kc][16], converted once for all the token tiles)
FX_INLINE void fx_tile(const int TP, const int NT, int64_t kc, const float *w, int64_t wps, const float *xp,
                       float *Y, int64_t ldy, int first) {
#define fx_ldt(p) fx_ldy(p)
#else
FX_INLINE void fx_tile(const int TP, const int NT, int64_t kc, const uint16_t *w, int64_t wps, const float *xp,
                       float *Y, int64_t ldy, int first) {
#define fx_ldt(p) fx_ldw(p)
#endif
    fx_v acc[FX_TP * FX_H][FX_TT];
    FX_UNROLL for (int t = 0; t < NT; t++) FX_UNROLL for (int v = 0; v < TP * FX_H; v++)
        acc[v][t] = first ? fx_zero() : fx_ldy(Y + t * ldy + FX_L * v);
    for (int64_t k = 0; k < kc; k++) {
        fx_v wv[FX_TP * FX_H];
        FX_UNROLL for (int q = 0; q < TP; q++) FX_UNROLL for (int h = 0; h < FX_H; h++)
            wv[q * FX_H + h] = fx_ldt(w + q * wps + 16 * k + FX_L * h);
        FX_UNROLL for (int t = 0; t < NT; t++) {
            const fx_v x = fx_bc(xp + k * NT + t);
            FX_UNROLL for (int v = 0; v < TP * FX_H; v++) acc[v][t] = fx_fma(wv[v], x, acc[v][t]);
        }
    }
    FX_UNROLL for (int t = 0; t < NT; t++) FX_UNROLL for (int v = 0; v < TP * FX_H; v++)
        fx_sty(Y + t * ldy + FX_L * v, acc[v][t]);
}

#if FX_WF32
typedef float fx_wt;
#else
typedef uint16_t fx_wt;
#endif
typedef void (*fx_tile_fn)(int64_t kc, const fx_wt *w, int64_t wps, const float *xp, float *Y, int64_t ldy, int first);
#define FX_TILE_DEF(tp, nt)                                                                                          \
    static void fx_tile_##tp##_##nt(int64_t kc, const fx_wt *w, int64_t wps, const float *xp, float *Y, int64_t ldy, \
                                    int first) {                                                                     \
        fx_tile(tp, nt, kc, w, wps, xp, Y, ldy, first);                                                              \
    }
#define FX_TILE_ROW(tp) \
    FX_TILE_DEF(tp, 1) FX_TILE_DEF(tp, 2) FX_TILE_DEF(tp, 3) FX_TILE_DEF(tp, 4) FX_TILE_DEF(tp, 5) FX_TILE_DEF(tp, 6)
FX_TILE_ROW(1)
#if FX_TT > 6
#define FX_TILE_ROW2(tp) \
    FX_TILE_DEF(tp, 7) FX_TILE_DEF(tp, 8) FX_TILE_DEF(tp, 9) FX_TILE_DEF(tp, 10) FX_TILE_DEF(tp, 11) FX_TILE_DEF(tp, 12)
FX_TILE_ROW2(1)
#endif
#if FX_TP > 1
FX_TILE_ROW(2)
FX_TILE_ROW2(2)
#endif
#define FX_TILE_REF(tp) fx_tile_##tp##_1, fx_tile_##tp##_2, fx_tile_##tp##_3, fx_tile_##tp##_4, fx_tile_##tp##_5, fx_tile_##tp##_6
#define FX_TILE_REF2(tp) fx_tile_##tp##_7, fx_tile_##tp##_8, fx_tile_##tp##_9, fx_tile_##tp##_10, fx_tile_##tp##_11, fx_tile_##tp##_12
static const fx_tile_fn k_tiles[FX_TP][FX_TT] = {
#if FX_TT > 6
    {FX_TILE_REF(1), FX_TILE_REF2(1)},
#else
    {FX_TILE_REF(1)},
#endif
#if FX_TP > 1
    {FX_TILE_REF(2), FX_TILE_REF2(2)},
#endif
};

static int64_t a64(int64_t b) { return (b + 63) & ~(int64_t)63; }

// o[e] lane t = v[t] lane e (8 x 8 floats).
FX_INLINE void fx_t8x8(const __m256 v[8], __m256 o[8]) {
    __m256 a[8], b[8];
    FX_UNROLL for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    FX_UNROLL for (int h = 0; h < 2; h++) {
        b[4 * h] = _mm256_shuffle_ps(a[4 * h], a[4 * h + 2], 0x44);
        b[4 * h + 1] = _mm256_shuffle_ps(a[4 * h], a[4 * h + 2], 0xEE);
        b[4 * h + 2] = _mm256_shuffle_ps(a[4 * h + 1], a[4 * h + 3], 0x44);
        b[4 * h + 3] = _mm256_shuffle_ps(a[4 * h + 1], a[4 * h + 3], 0xEE);
    }
    FX_UNROLL for (int i = 0; i < 4; i++) {
        o[i] = _mm256_permute2f128_ps(b[i], b[4 + i], 0x20);
        o[i + 4] = _mm256_permute2f128_ps(b[i], b[4 + i], 0x31);
    }
}

// The packed activations of a k block (xp: n_tok * KC floats), then FX_XP_SLACK floats that the transpose's last
// 8-float store may run into (tile of nt < 8 tokens: 8 - nt lanes past its k block; the next tile's or k's store, or
// the scalar tail, writes them afterwards), then the converted weights (FX_WF32).
#define FX_XP_SLACK 16
#if !FX_WF32
#define FX_WF_ROWS 0
#elif defined(KVT_SIMD_AVX512)
#define FX_WF_ROWS (FX_TP * 16) // rows of weights converted to f32 at once (a k block)
#else
#define FX_WF_ROWS 48 // AVX2: three panels, two tiles of 24 rows (fx_gemm3)
#endif
#define FX_XP_BYTES(n_tok) a64((n_tok) * KVT_F16X16_KC * 4 + FX_XP_SLACK * 4 + FX_WF_ROWS * KVT_F16X16_KC * 4)

#if defined(KVT_SIMD_AVX512) || !FX_WF32 // (AVX2: fx_gemm3 below)
// Panels [p0, p1) of W for n_tok (> 1) tokens into Yp[t * ldy + 16 (p - p0) + i]; xp: FX_XP_BYTES of scratch.
static void fx_gemm(int64_t n, const uint16_t *W, int64_t p0, int64_t p1, const uint16_t *X, int64_t n_tok, float *Yp,
                    int64_t ldy, float *xp) {
    const int64_t wps = 16 * n, KC = KVT_F16X16_KC;
    const int64_t n_tiles = (n_tok + FX_TT - 1) / FX_TT, base = n_tok / n_tiles, extra = n_tok % n_tiles;
    for (int64_t k0 = 0; k0 < n; k0 += KC) {
        const int64_t kc = n - k0 < KC ? n - k0 : KC;
        // the tokens' values of this k block as f32, tile by tile: tile j (tokens t0 .. t0 + nt) at xp + t0 * kc,
        // [kc][nt]
        for (int64_t j = 0, t0 = 0; j < n_tiles; j++) {
            const int64_t nt = base + (j < extra);
            float *o = xp + t0 * kc;
            const uint16_t *x0 = X + t0 * n + k0;
            int64_t k8 = 0;
            // tiles of up to 8 tokens (AVX2's 6): 8 k's at once, an 8 x 8 transpose and 8 overlapping stores (see
            // FX_XP_SLACK) where the scalar form below stores each value alone (on the Zen 3, AVX2 tl-f16 pp128: 8% of
            // the run; 5 of 5 alternating rounds, median 79.0 -> 83.6 t/s, z3pp). The same values, so the same bits.
            // Tiles of 9 .. 16 tokens (AVX-512's 12) the same in two groups of 8 tokens: for each k the first group's
            // store, then the second's, whose lanes past nt run into the next k's (written afterwards by its first
            // store) or the slack. (Before, these tiles took the scalar form: on the AMD EPYC Zen 5, z5f16.)
            if (nt <= 8)
                for (; k8 + 8 <= kc; k8 += 8) {
                    __m256 v[8], r[8];
                    FX_UNROLL for (int t = 0; t < 8; t++)
                        v[t] = t < nt ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x0 + t * n + k8))) : _mm256_setzero_ps();
                    fx_t8x8(v, r);
                    FX_UNROLL for (int e = 0; e < 8; e++) _mm256_storeu_ps(o + (k8 + e) * nt, r[e]);
                }
            else if (nt <= 16)
                for (; k8 + 8 <= kc; k8 += 8) {
                    __m256 v[8], r[2][8];
                    FX_UNROLL for (int t = 0; t < 8; t++) v[t] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x0 + t * n + k8)));
                    fx_t8x8(v, r[0]);
                    FX_UNROLL for (int t = 0; t < 8; t++)
                        v[t] = t + 8 < nt ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x0 + (t + 8) * n + k8))) : _mm256_setzero_ps();
                    fx_t8x8(v, r[1]);
                    FX_UNROLL for (int e = 0; e < 8; e++) {
                        _mm256_storeu_ps(o + (k8 + e) * nt, r[0][e]);
                        _mm256_storeu_ps(o + (k8 + e) * nt + 8, r[1][e]);
                    }
                }
            for (int64_t t = 0; t < nt; t++) {
                const uint16_t *x = x0 + t * n;
                int64_t k = k8;
                for (; k + 8 <= kc; k += 8) {
                    float f[8];
                    _mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + k))));
                    for (int e = 0; e < 8; e++) o[(k + e) * nt + t] = f[e];
                }
                for (; k < kc; k++) o[k * nt + t] = _cvtsh_ss(x[k]);
            }
            t0 += nt;
        }
        for (int64_t p = p0; p < p1; p += FX_TP) {
            const int tp = p1 - p < FX_TP ? (int)(p1 - p) : FX_TP;
#if FX_WF32
            float *wf = xp + n_tok * KC + FX_XP_SLACK;
            for (int q = 0; q < tp; q++) {
                const uint16_t *src = W + (p + q) * wps + 16 * k0;
                for (int64_t e = 0; e < 16 * kc; e += 8)
                    _mm256_store_ps(wf + q * 16 * kc + e, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + e))));
            }
            const fx_wt *wt = wf;
            const int64_t ws = 16 * kc;
#else
            const fx_wt *wt = W + p * wps + 16 * k0;
            const int64_t ws = wps;
#endif
            // the next panels' weights of this k block (or the first panels' of the next) into L2, a share per tile
            const int64_t pn = p + FX_TP < p1 ? p + FX_TP : p0, kn = p + FX_TP < p1 ? k0 : k0 + KC;
            const int64_t pf_lines = FX_PF_W && kn < n ? (FX_TP * 32 * (n - kn < KC ? n - kn : KC) + 63) / 64 : 0;
            const char *pfw = (const char *)(W + pn * wps + 16 * kn);
            for (int64_t j = 0, t0 = 0; j < n_tiles; j++) {
                const int64_t nt = base + (j < extra);
                for (int64_t l = j * pf_lines / n_tiles; l < (j + 1) * pf_lines / n_tiles; l++)
                    _mm_prefetch(pfw + 64 * l, _MM_HINT_T1);
                k_tiles[tp - 1][nt - 1](kc, wt, ws, xp + t0 * kc, Yp + t0 * ldy + 16 * (p - p0), ldy, k0 == 0);
                t0 += nt;
            }
        }
    }
}
#endif

#if !defined(KVT_SIMD_AVX512) && FX_WF32
// ---- AVX2 GEMM in tiles of 3 vectors (24 rows) x 4 tokens: 12 ymm accumulators, 3 weight vectors and a broadcast (16
// registers), 4 broadcasts and 3 weight loads per 12 FMAs where the 1 panel x 6 tokens tile takes 6 and 2. The weights
// of a k block are converted to f32 three panels at a time, as two [kc][24] blocks (one per tile of 24 rows: 24 KiB
// at kc 256, in L1 with the tile's 4 KiB of activations); panels left over (1 or 2) take the 16-row tile, 1 panel x
// nt tokens. Every output is still the one FMA chain of f16x16.h (same bits).
#define FX3_TT 4
FX_INLINE void fx_tile3(const int NT, int64_t kc, const float *w, const float *xp, float *Y, int64_t ldy, int first) {
    __m256 acc[3][FX3_TT];
    FX_UNROLL for (int t = 0; t < NT; t++) FX_UNROLL for (int v = 0; v < 3; v++)
        acc[v][t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(Y + t * ldy + 8 * v);
    for (int64_t k = 0; k < kc; k++) {
        __m256 wv[3];
        FX_UNROLL for (int v = 0; v < 3; v++) wv[v] = _mm256_load_ps(w + 24 * k + 8 * v);
        FX_UNROLL for (int t = 0; t < NT; t++) {
            const __m256 x = _mm256_broadcast_ss(xp + k * NT + t);
            FX_UNROLL for (int v = 0; v < 3; v++) acc[v][t] = _mm256_fmadd_ps(wv[v], x, acc[v][t]);
        }
    }
    FX_UNROLL for (int t = 0; t < NT; t++) FX_UNROLL for (int v = 0; v < 3; v++)
        _mm256_storeu_ps(Y + t * ldy + 8 * v, acc[v][t]);
}
#define FX3_TILE_DEF(nt)                                                                                             \
    static void fx_tile3_##nt(int64_t kc, const float *w, const float *xp, float *Y, int64_t ldy, int first) {       \
        fx_tile3(nt, kc, w, xp, Y, ldy, first);                                                                      \
    }
FX3_TILE_DEF(1) FX3_TILE_DEF(2) FX3_TILE_DEF(3) FX3_TILE_DEF(4)
typedef void (*fx_tile3_fn)(int64_t kc, const float *w, const float *xp, float *Y, int64_t ldy, int first);
static const fx_tile3_fn k_tiles3[FX3_TT] = {fx_tile3_1, fx_tile3_2, fx_tile3_3, fx_tile3_4};

// Token tiles per block of fx_gemm3: as many as keep a block's packed activations of a k block (KC floats a token)
// and its outputs of the task's rows (rows floats a token) within FX_TOK_BLOCK_BYTES (about half of the Zen 3's
// 512 KiB L2), at least FX_TOK_BLOCK_MIN tiles (a block converts the weights again: 32 tiles, 128 tokens, is the cost
// pp128 always had); all n_tiles when they fit. Before, all the tokens were one block: at pp512 a k block's
// activations alone (512 KiB) and a 256-row task's outputs (512 KiB) left L2 at every panel group and k block.
#ifndef FX_TOK_BLOCK_BYTES
#define FX_TOK_BLOCK_BYTES (256 * 1024)
#endif
#ifndef FX_TOK_BLOCK_MIN
#define FX_TOK_BLOCK_MIN 32
#endif
static int64_t fx_tok_block(int64_t rows, int64_t n_tiles) {
    int64_t bt = FX_TOK_BLOCK_BYTES / (4 * FX3_TT * (KVT_F16X16_KC + rows));
    if (bt < FX_TOK_BLOCK_MIN) bt = FX_TOK_BLOCK_MIN;
    return bt < n_tiles ? bt : n_tiles;
}

#ifndef FX_PACK_PF
#define FX_PACK_PF 2 // fx_pack4: tiles ahead whose activation rows are prefetched (0: none)
#endif
// The first token of tile j when the tokens are cut into tiles of base + 1 (the first extra tiles) and base tokens.
static int64_t fx_tile_t0(int64_t j, int64_t base, int64_t extra) { return j * base + (j < extra ? j : extra); }

// The k block [k0, k0 + kc) of the tiles [j0, j1) of tokens X (f16 rows, stride n) as f32, tile j of nt <= 4 tokens
// (base + 1 for the first extra tiles, base after; tokens t0 .. t0 + nt) at xp + (t0 - t0 of j0) * kc, [kc][nt]. 8 k's
// at once by a 4 x 8 transpose, each k's 4 values stored as one 16-byte store (for nt < 4 running 4 - nt lanes past
// the tile's block: written afterwards by the next store, tile or tail; FX_XP_SLACK at the end).
static void fx_pack4(const uint16_t *X, int64_t n, int64_t k0, int64_t kc, int64_t j0, int64_t j1, int64_t base,
                     int64_t extra, float *xp) {
    const int64_t tb = fx_tile_t0(j0, base, extra);
    for (int64_t j = j0, t0 = tb; j < j1; j++) {
        const int64_t nt = base + (j < extra);
        float *o = xp + (t0 - tb) * kc;
        const uint16_t *x0 = X + t0 * n + k0;
        // the rows of the tile FX_PACK_PF tiles ahead (their 2 kc bytes of this k block, from L3 at long prompts: a
        // tile's rows are 4 short streams that the hardware prefetcher barely starts) into L1
        if (j + FX_PACK_PF < j1) {
            const int64_t ta = fx_tile_t0(j + FX_PACK_PF, base, extra), na = base + (j + FX_PACK_PF < extra);
            for (int64_t t = 0; t < na; t++) {
                const char *r = (const char *)(X + (ta + t) * n + k0);
                for (int64_t b = 0; b < 2 * kc + 63; b += 64) _mm_prefetch(r + b, _MM_HINT_T0);
            }
        }
        int64_t k8 = 0;
        for (; k8 + 8 <= kc; k8 += 8) {
            __m256 v[4];
            FX_UNROLL for (int t = 0; t < 4; t++)
                v[t] = t < nt ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x0 + t * n + k8))) : _mm256_setzero_ps();
            const __m256 a0 = _mm256_unpacklo_ps(v[0], v[1]), a1 = _mm256_unpackhi_ps(v[0], v[1]);
            const __m256 a2 = _mm256_unpacklo_ps(v[2], v[3]), a3 = _mm256_unpackhi_ps(v[2], v[3]);
            __m256 r[4]; // r[e]: k8 + e (low half), k8 + e + 4 (high half)
            r[0] = _mm256_shuffle_ps(a0, a2, 0x44);
            r[1] = _mm256_shuffle_ps(a0, a2, 0xEE);
            r[2] = _mm256_shuffle_ps(a1, a3, 0x44);
            r[3] = _mm256_shuffle_ps(a1, a3, 0xEE);
            // (k ascending: each store's lanes past nt are written again by the next)
            FX_UNROLL for (int e = 0; e < 4; e++) _mm_storeu_ps(o + (k8 + e) * nt, _mm256_castps256_ps128(r[e]));
            FX_UNROLL for (int e = 0; e < 4; e++) _mm_storeu_ps(o + (k8 + e + 4) * nt, _mm256_extractf128_ps(r[e], 1));
        }
        for (int64_t t = 0; t < nt; t++)
            for (int64_t k = k8; k < kc; k++) o[k * nt + t] = _cvtsh_ss(x0[t * n + k]);
        t0 += nt;
    }
}

// As fx_gemm (panels [p0, p1) into Yp; xp: FX_XP_BYTES of scratch), in the tiles above, the tokens in blocks of whole
// tiles (fx_tok_block) run one after the other through all the k blocks: a block's packed activations of a k block
// and its outputs of the task's rows, reloaded at each k block, stay in L2 (the same FMA chains: the same bits).
static void fx_gemm3(int64_t n, const uint16_t *W, int64_t p0, int64_t p1, const uint16_t *X, int64_t n_tok, float *Yp,
                     int64_t ldy, float *xp) {
    const int64_t wps = 16 * n, KC = KVT_F16X16_KC;
    const int64_t n_tiles = (n_tok + FX3_TT - 1) / FX3_TT, base = n_tok / n_tiles, extra = n_tok % n_tiles;
    const int64_t bt = fx_tok_block(16 * (p1 - p0), n_tiles);
    float *wf = xp + n_tok * KC + FX_XP_SLACK;
    for (int64_t j0 = 0; j0 < n_tiles; j0 += bt) {
        const int64_t j1 = j0 + bt < n_tiles ? j0 + bt : n_tiles, tb = fx_tile_t0(j0, base, extra);
        for (int64_t k0 = 0; k0 < n; k0 += KC) {
            const int64_t kc = n - k0 < KC ? n - k0 : KC;
            fx_pack4(X, n, k0, kc, j0, j1, base, extra, xp);
            for (int64_t p = p0; p < p1;) {
                const int g = p1 - p >= 3 ? 3 : 1; // panels this step
                if (g == 3) { // [2][kc][24]: vector v (8 rows) of the 3 panels' 6 at wf + (v / 3) 24 kc + 8 (v % 3)
                    const uint16_t *src = W + p * wps + 16 * k0;
                    for (int64_t k = 0; k < kc; k++)
                        FX_UNROLL for (int v = 0; v < 6; v++)
                            _mm256_store_ps(wf + (v / 3) * 24 * kc + 24 * k + 8 * (v % 3),
                                            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + (v / 2) * wps + 16 * k + 8 * (v % 2)))));
                } else {
                    const uint16_t *src = W + p * wps + 16 * k0;
                    for (int64_t e = 0; e < 16 * kc; e += 8)
                        _mm256_store_ps(wf + e, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + e))));
                }
                // the next step's panels' weights of this k block (or the first panels' of the next k block, or of the
                // first k block for the next token block) into L2, a share per tile
                const int64_t pn = p + g < p1 ? p + g : p0;
                int64_t kn = p + g < p1 ? k0 : k0 + KC;
                if (kn >= n && j1 < n_tiles) kn = 0;
                const int gn = p1 - pn >= 3 ? 3 : 1;
                const int64_t kcn = n - kn < KC ? n - kn : KC, lpp = (32 * kcn + 63) / 64; // lines per panel
                const int64_t pf_lines = FX_PF_W && kn < n ? gn * lpp : 0, n_calls = (g == 3 ? 2 : 1) * (j1 - j0);
                const char *pfw = (const char *)(W + pn * wps + 16 * kn);
                // (call c prefetches lines [c pf_lines / n_calls, (c + 1) pf_lines / n_calls), kept as quotient and
                // remainder: no division per call)
                const int64_t pq = pf_lines / n_calls, pr = pf_lines % n_calls;
                int64_t l = 0, rem = 0, lp = 0, lq = 0; // l: next line; lp, lq: l as panel and line in it
                for (int h = 0; h < (g == 3 ? 2 : 1); h++)
                    for (int64_t j = j0, t0 = tb; j < j1; j++) {
                        const int64_t nt = base + (j < extra);
                        rem += pr;
                        const int64_t le = l + pq + (rem >= n_calls);
                        if (rem >= n_calls) rem -= n_calls;
                        for (; l < le; l++) {
                            _mm_prefetch(pfw + lp * 2 * wps + 64 * lq, _MM_HINT_T1);
                            if (++lq == lpp) lq = 0, lp++;
                        }
                        float *y = Yp + t0 * ldy + 16 * (p - p0);
                        const float *x = xp + (t0 - tb) * kc;
                        if (g == 3)
                            k_tiles3[nt - 1](kc, wf + h * 24 * kc, x, y + 24 * h, ldy, k0 == 0);
                        else
                            k_tiles[0][nt - 1](kc, wf, 16 * kc, x, y, ldy, k0 == 0);
                        t0 += nt;
                    }
                p += g;
            }
        }
    }
}
#define FX_GEMM fx_gemm3
#else
#define FX_GEMM fx_gemm
#endif

int64_t FX(scratch)(int64_t n, int64_t n_tok) { return a64(FX_SMALL * n * 4) + FX_XP_BYTES(n_tok) + a64(16 * n_tok * 4); }

// Panels [p0, p1) into Yp (see fx_gemv_NT / fx_gemm).
static void fx_panels(int64_t n, const uint16_t *W, int64_t p0, int64_t p1, const uint16_t *X, int64_t n_tok,
                      float *Yp, int64_t ldy, char *scratch) {
    if (n_tok <= FX_SMALL) {
        float *xf = (float *)scratch;
        int64_t i = 0;
        for (; i + 8 <= n_tok * n; i += 8) _mm256_storeu_ps(xf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(X + i))));
        for (; i < n_tok * n; i++) xf[i] = _cvtsh_ss(X[i]);
        // (the prefetch form: matmul.h kvt_kernels_decode_variant(KVT_TYPE_F16_X16) 1 = the L1 prefetch alone, else split)
        const int64_t nd = kvt_kernels_decode_variant(KVT_TYPE_F16_X16) == 1 ? 0 : KVT_X8_PF_NEAR;
        k_gemv[n_tok - 1](n, W, p0, p1, xf, Yp, ldy, kvt_kernels_prefetch_dense(), nd);
    } else {
        FX_GEMM(n, W, p0, p1, X, n_tok, Yp, ldy, (float *)(scratch + a64(FX_SMALL * n * 4)));
    }
}

void FX(mm)(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y, int64_t ldy,
            void *scratch) {
    if (r0 >= r1 || n_tok <= 0 || n <= 0) return;
    const uint16_t *w = W, *x = X;
    char *s = scratch;
    const int64_t pa = (r0 + 15) / 16, pb = r1 / 16;
    if (pa < pb) fx_panels(n, w, pa, pb, x, n_tok, Y + 16 * pa, ldy, s);
    // a panel cut by [r0, r1): whole into scratch, its rows of the range copied out
    float *tmp = (float *)(s + a64(FX_SMALL * n * 4) + FX_XP_BYTES(n_tok));
    for (int64_t p = r0 / 16; p * 16 < r1; p++) {
        if (p >= pa && p < pb) continue;
        fx_panels(n, w, p, p + 1, x, n_tok, tmp, 16, s);
        const int64_t a = p * 16 > r0 ? p * 16 : r0, b = p * 16 + 16 < r1 ? p * 16 + 16 : r1;
        for (int64_t t = 0; t < n_tok; t++) memcpy(Y + t * ldy + a, tmp + t * 16 + (a - p * 16), (size_t)(b - a) * 4);
    }
}
