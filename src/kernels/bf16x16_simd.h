// bf16x16_simd.h - the bf16_x16 kernels (bf16x16.h) for AVX2 (bf16x16_avx2.c) and AVX-512 (bf16x16_avx512.c,
// KVT_SIMD_AVX512). A vector holds BX_L rows of a panel (AVX-512: the panel's 16, AVX2: half of them, BX_H vectors a
// panel); pair j of the vector's rows is one load (16 * j dwords into the panel). Every output is bf16x16.h's chain:
// the FMA kernels split a pair into its odd and even elements (the high and low halves of each dword, as f32) and
// run the odd FMA, then the even one, under the FTZ | DAZ mode (bf16x16_mode.h); the VDPBF16PS kernels (AVX-512 with
// AVX512_BF16) do both in one instruction. So both builds, both forms and the scalar reference give the same bits.
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "../base/switch.h"
#include "bf16x16.h"
#include "bf16x16_mode.h"
#include "bits_avx2.h"
#include "matmul.h"
#include "quant.h"

#ifdef KVT_SIMD_AVX512
#define BX(name) kvt_bf16x16_##name##_avx512
#define BX_H 1  // vectors per panel
#define BX_L 16 // rows per vector
#define BX_TT 12 // tokens per tile
typedef __m512 bx_v;
typedef __m512i bx_i;
#define bx_zero _mm512_setzero_ps
#define bx_ld(p) _mm512_loadu_si512((const void *)(p))
#define bx_bc(p) _mm512_set1_epi32((int)*(p))
#define bx_odd(v) _mm512_castsi512_ps(_mm512_and_si512((v), _mm512_set1_epi32((int)0xffff0000u)))
#define bx_even(v) _mm512_castsi512_ps(_mm512_slli_epi32((v), 16))
#define bx_fma _mm512_fmadd_ps
#define bx_st _mm512_storeu_ps
// vectors a tile runs at once, by its tokens: 1 token 8 (8 chains of FMA pairs in flight), 12 tokens 2 (24 zmm)
static const int k_nv[BX_TT] = {8, 6, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2};
#define BX_NV_MAX 8
#else
#define BX(name) kvt_bf16x16_##name##_avx2
#define BX_H 2
#define BX_L 8
#define BX_TT 4
typedef __m256 bx_v;
typedef __m256i bx_i;
#define bx_zero _mm256_setzero_ps
#define bx_ld(p) _mm256_loadu_si256((const __m256i *)(p))
#define bx_bc(p) _mm256_set1_epi32((int)*(p))
#define bx_odd(v) _mm256_castsi256_ps(_mm256_and_si256((v), _mm256_set1_epi32((int)0xffff0000u)))
#define bx_even(v) _mm256_castsi256_ps(_mm256_slli_epi32((v), 16))
#define bx_fma _mm256_fmadd_ps
#define bx_st _mm256_storeu_ps
// 1 token: 8 vectors (one weight pair at a time, split as it is used); 2: 3 (6 accumulators, 6 split weights); 3-4: 2
static const int k_nv[BX_TT] = {8, 3, 2, 2};
#define BX_NV_MAX 8
#endif
// weights per strip of a batch: the strip's vectors stay in L2 while every token tile runs over them
#define BX_STRIP_BYTES (256 * 1024)

#define BX_INLINE static inline __attribute__((always_inline))
#define BX_UNROLL _Pragma("GCC unroll 16")

// Vectors [v0, v0 + NV) of the panels at W (wps dwords a panel) for NT tokens: X's pairs (xs dwords a token),
// outputs at Y[t * ldy + BX_L * v]. pf > 0 (decode: kvt_kernels_prefetch_dense(), the CPU's dense distance): each
// vector's line pf bytes ahead into L2 and its line KVT_X8_PF_NEAR ahead into L1, f16_x16's decode form.
BX_INLINE void bx_body(const int NV, const int NT, int64_t np2, const uint32_t *W, int64_t wps, int64_t v0,
                       const uint32_t *X, int64_t xs, float *Y, int64_t ldy, int64_t pf) {
    const uint32_t *w[BX_NV_MAX];
    bx_v acc[BX_NV_MAX][BX_TT];
    BX_UNROLL for (int v = 0; v < NV; v++) {
        w[v] = W + ((v0 + v) / BX_H) * wps + BX_L * ((v0 + v) % BX_H);
        BX_UNROLL for (int t = 0; t < NT; t++) acc[v][t] = bx_zero();
    }
    for (int64_t j = 0; j < np2; j++) {
        if (pf) {
            BX_UNROLL for (int v = 0; v < NV; v++) _mm_prefetch((const char *)(w[v] + 16 * j) + pf, KVT_X8_PF_HINT);
            BX_UNROLL for (int v = 0; v < NV; v++) _mm_prefetch((const char *)(w[v] + 16 * j) + KVT_X8_PF_NEAR, _MM_HINT_T0);
        }
        if (NT == 1) {
            const bx_i xb = bx_bc(X + j);
            const bx_v xo = bx_odd(xb), xe = bx_even(xb);
            BX_UNROLL for (int v = 0; v < NV; v++) {
                const bx_i wv = bx_ld(w[v] + 16 * j);
                acc[v][0] = bx_fma(bx_odd(wv), xo, acc[v][0]);
                acc[v][0] = bx_fma(bx_even(wv), xe, acc[v][0]);
            }
        } else {
            bx_v wo[BX_NV_MAX], we[BX_NV_MAX];
            BX_UNROLL for (int v = 0; v < NV; v++) {
                const bx_i wv = bx_ld(w[v] + 16 * j);
                wo[v] = bx_odd(wv);
                we[v] = bx_even(wv);
            }
            BX_UNROLL for (int t = 0; t < NT; t++) {
                const bx_i xb = bx_bc(X + t * xs + j);
                const bx_v xo = bx_odd(xb), xe = bx_even(xb);
                BX_UNROLL for (int v = 0; v < NV; v++) {
                    acc[v][t] = bx_fma(wo[v], xo, acc[v][t]);
                    acc[v][t] = bx_fma(we[v], xe, acc[v][t]);
                }
            }
        }
    }
    BX_UNROLL for (int v = 0; v < NV; v++) BX_UNROLL for (int t = 0; t < NT; t++)
        bx_st(Y + t * ldy + BX_L * (v0 + v), acc[v][t]);
}

typedef void (*bx_tile_fn)(int64_t np2, const uint32_t *W, int64_t wps, int64_t v0, int64_t v1, const uint32_t *X,
                           int64_t xs, float *Y, int64_t ldy, int64_t pf);

// Vectors [v0, v1) for NT tokens with the body BODY: k_nv[NT - 1] at a time, the rest one by one (NAME_NT, with the
// function attributes ATTR).
#define BX_TILE_OF(ATTR, NAME, BODY, NT)                                                                              \
    ATTR static void NAME##_##NT(int64_t np2, const uint32_t *W, int64_t wps, int64_t v0, int64_t v1,                 \
                                 const uint32_t *X, int64_t xs, float *Y, int64_t ldy, int64_t pf) {                  \
        const int nv = k_nv[NT - 1];                                                                                  \
        int64_t v = v0;                                                                                               \
        if (nv == 8) for (; v + 8 <= v1; v += 8) BODY(8, NT, np2, W, wps, v, X, xs, Y, ldy, pf);                     \
        if (nv == 6) for (; v + 6 <= v1; v += 6) BODY(6, NT, np2, W, wps, v, X, xs, Y, ldy, pf);                     \
        if (nv == 4) for (; v + 4 <= v1; v += 4) BODY(4, NT, np2, W, wps, v, X, xs, Y, ldy, pf);                     \
        if (nv == 3) for (; v + 3 <= v1; v += 3) BODY(3, NT, np2, W, wps, v, X, xs, Y, ldy, pf);                     \
        if (nv >= 2) for (; v + 2 <= v1; v += 2) BODY(2, NT, np2, W, wps, v, X, xs, Y, ldy, pf);                     \
        for (; v < v1; v++) BODY(1, NT, np2, W, wps, v, X, xs, Y, ldy, pf);                                           \
    }
#define BX_TILE(NT) BX_TILE_OF(, bx_fma, bx_body, NT)
BX_TILE(1) BX_TILE(2) BX_TILE(3) BX_TILE(4)
#ifdef KVT_SIMD_AVX512
BX_TILE(5) BX_TILE(6) BX_TILE(7) BX_TILE(8) BX_TILE(9) BX_TILE(10) BX_TILE(11) BX_TILE(12)
static const bx_tile_fn k_fma[BX_TT] = {bx_fma_1, bx_fma_2, bx_fma_3, bx_fma_4,  bx_fma_5,  bx_fma_6,
                                        bx_fma_7, bx_fma_8, bx_fma_9, bx_fma_10, bx_fma_11, bx_fma_12};
#else
static const bx_tile_fn k_fma[BX_TT] = {bx_fma_1, bx_fma_2, bx_fma_3, bx_fma_4};
#endif

#ifdef KVT_SIMD_AVX512
// ---- VDPBF16PS (AVX512_BF16): one instruction per pair and vector, the same chain.
#define BX_DP __attribute__((target("avx512bf16")))
BX_DP BX_INLINE void bx_body_dp(const int NV, const int NT, int64_t np2, const uint32_t *W, int64_t wps, int64_t v0,
                                const uint32_t *X, int64_t xs, float *Y, int64_t ldy, int64_t pf) {
    const uint32_t *w[BX_NV_MAX];
    __m512 acc[BX_NV_MAX][BX_TT];
    BX_UNROLL for (int v = 0; v < NV; v++) {
        w[v] = W + (v0 + v) * wps;
        BX_UNROLL for (int t = 0; t < NT; t++) acc[v][t] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < np2; j++) {
        if (pf) {
            BX_UNROLL for (int v = 0; v < NV; v++) _mm_prefetch((const char *)(w[v] + 16 * j) + pf, KVT_X8_PF_HINT);
            BX_UNROLL for (int v = 0; v < NV; v++) _mm_prefetch((const char *)(w[v] + 16 * j) + KVT_X8_PF_NEAR, _MM_HINT_T0);
        }
        __m512bh wv[BX_NV_MAX];
        BX_UNROLL for (int v = 0; v < NV; v++) wv[v] = (__m512bh)_mm512_loadu_si512((const void *)(w[v] + 16 * j));
        BX_UNROLL for (int t = 0; t < NT; t++) {
            const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)X[t * xs + j]);
            BX_UNROLL for (int v = 0; v < NV; v++) acc[v][t] = _mm512_dpbf16_ps(acc[v][t], wv[v], xb);
        }
    }
    BX_UNROLL for (int v = 0; v < NV; v++) BX_UNROLL for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(Y + t * ldy + 16 * (v0 + v), acc[v][t]);
}
#define BX_TILE_DP(NT) BX_TILE_OF(BX_DP, bx_dp, bx_body_dp, NT)
BX_TILE_DP(1) BX_TILE_DP(2) BX_TILE_DP(3) BX_TILE_DP(4) BX_TILE_DP(5) BX_TILE_DP(6) BX_TILE_DP(7) BX_TILE_DP(8)
BX_TILE_DP(9) BX_TILE_DP(10) BX_TILE_DP(11) BX_TILE_DP(12)
static const bx_tile_fn k_dp[BX_TT] = {bx_dp_1, bx_dp_2, bx_dp_3, bx_dp_4,  bx_dp_5,  bx_dp_6,
                                       bx_dp_7, bx_dp_8, bx_dp_9, bx_dp_10, bx_dp_11, bx_dp_12};

// The boundary test of kvt_bf16x16_dp_ok: accumulators within a few ulps of +-2^-126 and products of 2^-155 .. 2^-119
// (half of the lanes; the others anywhere in bf16's range, denormals included), VDPBF16PS against the FMA pair under
// the mode. Returns true if every lane has the same bits (NaNs: both NaN).
static uint32_t dp_rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 11);
}
// A bf16 of random sign and mantissa with exponent field e (1 .. 254).
static uint32_t dp_bf16(uint64_t *s, int e) {
    const uint32_t sign = dp_rnd(s) & 1, man = dp_rnd(s) & 0x7f;
    return sign << 15 | (uint32_t)(e < 1 ? 1 : e > 254 ? 254 : e) << 7 | man;
}
BX_DP __attribute__((noinline)) static bool dp_matches(void) {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    bool ok = true;
    for (int it = 0; it < 4096 && ok; it++) {
        uint32_t a[16], b[16], c[16];
        for (int i = 0; i < 16; i++) {
            if (it & 1) {
                a[i] = dp_rnd(&s);
                b[i] = dp_rnd(&s);
                c[i] = dp_rnd(&s);
                continue;
            }
            const int ea = 37 + (int)(dp_rnd(&s) % 60), t = -126 - (int)(dp_rnd(&s) % 30) + (int)(dp_rnd(&s) % 8);
            const int eb = t - (ea - 127) + 127, eb2 = eb + (int)(dp_rnd(&s) % 3) - 1;
            const uint32_t a_lo = dp_bf16(&s, ea), a_hi = dp_bf16(&s, ea), b_lo = dp_bf16(&s, eb2), b_hi = dp_bf16(&s, eb);
            a[i] = a_lo | a_hi << 16;
            b[i] = b_lo | b_hi << 16;
            const uint32_t near = dp_rnd(&s) & 1, sign = dp_rnd(&s) & 1, r = dp_rnd(&s);
            c[i] = (near ? 0x00800000u + r % 64 - 32u : r % 0x01000000u) | sign << 31;
        }
        const __m512i A = _mm512_loadu_si512(a), B = _mm512_loadu_si512(b), C = _mm512_loadu_si512(c);
        const __m512 hw = _mm512_dpbf16_ps(_mm512_castsi512_ps(C), (__m512bh)A, (__m512bh)B);
        const unsigned m = kvt_bf16x16_mode_enter();
        __m512 e = _mm512_castsi512_ps(C);
        __asm__ volatile("" : "+v"(e)); // (computed after the mode is set)
        e = _mm512_fmadd_ps(bx_odd(A), bx_odd(B), e);
        e = _mm512_fmadd_ps(bx_even(A), bx_even(B), e);
        __asm__ volatile("" : "+v"(e));
        kvt_bf16x16_mode_leave(m);
        const __mmask16 nan = _mm512_cmp_ps_mask(hw, hw, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(e, e, _CMP_UNORD_Q);
        const __mmask16 eq = _mm512_cmpeq_epi32_mask(_mm512_castps_si512(hw), _mm512_castps_si512(e));
        ok = (__mmask16)(eq | nan) == (__mmask16)0xffff;
    }
    return ok;
}

static atomic_int g_dp_hw = -1; // the CPU has AVX512_BF16 and passes dp_matches: 1, else 0
static kvt_switch g_dp = KVT_SWITCH_INIT("KVT_BF16DP"); // asked for (in use where dp_hw() too)
static int dp_hw(void) {
    int v = atomic_load_explicit(&g_dp_hw, memory_order_relaxed);
    if (v < 0) {
        v = __builtin_cpu_supports("avx512bf16") && dp_matches();
        atomic_store_explicit(&g_dp_hw, v, memory_order_relaxed);
    }
    return v;
}
bool kvt_bf16x16_dp_ok(void) { return kvt_switch_on(&g_dp) && dp_hw(); }
bool kvt_bf16x16_set_dp(bool on) {
    const bool old = kvt_bf16x16_dp_ok();
    kvt_switch_set(&g_dp, on);
    return old;
}
#endif

// Vectors [v0, v1) of W (n columns, even) for n_tok tokens X into Y[t * ldy + BX_L * v]: up to BX_TT tokens one tile
// pass; more in balanced tiles (sizes differing by at most one) over strips of BX_STRIP_BYTES of weights.
static void bx_vectors(const bx_tile_fn *tiles, int64_t n, const uint32_t *W, int64_t v0, int64_t v1, const uint32_t *X,
                       int64_t n_tok, float *Y, int64_t ldy) {
    const int64_t np2 = n / 2, wps = 16 * np2;
    if (n_tok <= BX_TT) {
        tiles[n_tok - 1](np2, W, wps, v0, v1, X, np2, Y, ldy, n_tok == 1 ? kvt_kernels_prefetch_dense() : 0);
        return;
    }
    const int64_t n_tiles = (n_tok + BX_TT - 1) / BX_TT, base = n_tok / n_tiles, extra = n_tok % n_tiles;
    int64_t sv = BX_STRIP_BYTES / (BX_L * n * 2);
    if (sv < 2 * BX_H) sv = 2 * BX_H;
    for (int64_t s = v0; s < v1; s += sv) {
        const int64_t se = s + sv < v1 ? s + sv : v1;
        for (int64_t j = 0, t0 = 0; j < n_tiles; j++) {
            const int64_t nt = base + (j < extra);
            tiles[nt - 1](np2, W, wps, s, se, X + t0 * np2, np2, Y + t0 * ldy, ldy, 0);
            t0 += nt;
        }
    }
}

// The whole panels of [r0, r1) straight into Y, a panel cut by the range whole into scratch and its rows copied out.
static void bx_mm(const bx_tile_fn *tiles, int64_t n, const uint32_t *W, int64_t r0, int64_t r1, const uint32_t *X,
                  int64_t n_tok, float *Y, int64_t ldy, float *tmp) {
    const int64_t pa = (r0 + 15) / 16, pb = r1 / 16, wps = 8 * n;
    if (pa < pb) bx_vectors(tiles, n, W, pa * BX_H, pb * BX_H, X, n_tok, Y, ldy);
    for (int64_t p = r0 / 16; p * 16 < r1; p++) {
        if (p >= pa && p < pb) continue;
        bx_vectors(tiles, n, W + p * wps, 0, BX_H, X, n_tok, tmp, 16);
        const int64_t a = p * 16 > r0 ? p * 16 : r0, b = p * 16 + 16 < r1 ? p * 16 + 16 : r1;
        for (int64_t t = 0; t < n_tok; t++) memcpy(Y + t * ldy + a, tmp + t * 16 + (a - p * 16), (size_t)(b - a) * 4);
    }
}

// The FMA kernels between the mode's enter and leave (a call of its own: no FMA moves across them).
__attribute__((noinline)) static void bx_mm_fma(int64_t n, const uint32_t *W, int64_t r0, int64_t r1, const uint32_t *X,
                                                int64_t n_tok, float *Y, int64_t ldy, float *tmp) {
    bx_mm(k_fma, n, W, r0, r1, X, n_tok, Y, ldy, tmp);
}

void BX(mm)(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y, int64_t ldy,
            void *scratch) {
    if (r0 >= r1 || n_tok <= 0 || n <= 0 || n % 2) return; // (n even: bf16x16.h)
    float *tmp = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
#ifdef KVT_SIMD_AVX512
    if (kvt_bf16x16_dp_ok()) {
        bx_mm(k_dp, n, W, r0, r1, X, n_tok, Y, ldy, tmp);
        return;
    }
#endif
    const unsigned m = kvt_bf16x16_mode_enter();
    bx_mm_fma(n, W, r0, r1, X, n_tok, Y, ldy, tmp);
    kvt_bf16x16_mode_leave(m);
}
