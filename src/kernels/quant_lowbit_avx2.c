// quant_lowbit_avx2.c - AVX2 kernels of q5_1, q2_K, q3_K, iq4_nl and iq4_xs (quant_lowbit.h): the dot product of
// one weight row against 1..KVT_DOT_MULTI_MAX activation rows. Conversions take the reference's code (not hot).
//
// The q5_1, q2_K, q3_K and iq4_nl bodies sum their integers and floats in the order of llama.cpp's AVX2 kernel of the
// type (ggml-cpu's arch/x86/quants.c, named at each): its 8 lanes of exact integer sums per block, one FMA chain per 8
// lanes, its final horizontal sum, so that a dot gives llama.cpp's bits (suite quant_lowbit checks it on llama.cpp's
// own rows); the scalar reference (quant_lowbit.c) sums in its own order. iq4_xs on AVX-512 sums in the reference's
// order (exact totals per super-block, one scalar chain; its AVX2 body llama.cpp's). A token's chain does not depend
// on the tokens beside it (1..4 rows: the same bits). Compiled with -mavx2 -mfma -mf16c (the Makefile's rule for *_avx2.c);
// quant_lowbit_avx512.c includes it with KVT_SIMD_AVX512 (the integer dot primitive of bits_avx2.h becomes VNNI)
// and renames the table.
//
// The iq4 kernels multiply signed codebook values by signed activations with the sign trick, exact for activation
// bytes in [-127, 127]: what kvtier's q8_0 and q8_K quantizers give (as llama.cpp's); the others take any byte.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "bits_avx2.h"
#include "quant_lowbit.h"

#ifdef KVT_SIMD_AVX512
#define LOWBIT_TABLE_FN kvt_lowbit_ops_avx512
#else
#define LOWBIT_TABLE_FN kvt_lowbit_ops_avx2
#endif

#define INLINE static inline __attribute__((always_inline))
#define NTMAX KVT_DOT_MULTI_MAX
#define UNROLL _Pragma("GCC unroll 16")
#define ROW(y, t, ys) ((const void *)((const char *)(y) + (size_t)(t) * (ys)))
// The weights' lines PF bytes ahead of block p into L1, as quant_avx2.c's K-quant rows do (KQ_PF): streaming a
// matrix from DRAM one core read iq4_xs at 4.2 GB/s without, 9.5-10.2 with (Intel Xeon 0xA7; llama.cpp's 4.0).
#define PF 4096
#define PREFETCH(p, size)                                                                                             \
    for (size_t pf_ = 0; pf_ < (size); pf_ += 64) _mm_prefetch((const char *)(p) + PF + pf_, _MM_HINT_T0)

// The 8 lanes' sum in ggml's order (its hsum_float_8): high half + low half, then the pairs, then the last two.
INLINE float hsum8(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
INLINE float f16f(uint16_t h) { return _cvtsh_ss(h); }
INLINE __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
// 32 four-bit indices of 16 bytes in element order: the low nibbles (elements 0..15) in the low lane, the high
// nibbles (16..31) in the high lane: the 16 bytes loaded into both lanes (a load, no shuffle), the high lane shifted.
INLINE __m256i nibbles32(const uint8_t *q) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}
// Word k of the low lane's eight (both lanes hold the same eight) to every word of the low lane, word k + 1 to every
// word of the high lane: the scales of sub-blocks k and k + 1 beside a 32-byte slice holding 16 elements of each.
INLINE __m256i pair_scales(__m256i both, int k) {
    const __m128i lo = _mm_set1_epi16((short)(0x0100 + 0x0202 * k)), hi = _mm_set1_epi16((short)(0x0100 + 0x0202 * (k + 1)));
    return _mm256_shuffle_epi8(both, _mm256_set_m128i(hi, lo));
}

_Static_assert(NTMAX == 4, "the dispatchers instantiate 1..4");

// ----------------------------------------------------------------------------------------------------- q5_1

// The two halves at p (d and m of a q5_1 block, d and s of a q8_1 one) as floats in lanes 0 and 1: one conversion.
INLINE __m128 f16x2(const uint16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}
// ggml's AVX2 order (ggml_vec_dot_q5_1_q8_1): per block the 8 lanes' integer sums (4 products each) as floats into
// one 8-lane FMA chain with dx * dy, the m * s terms in a scalar FMA chain (its build fuses that multiply-add); the
// lanes' sum (hsum8) plus that chain. The halves converted two at a time, the m * s chain in lane 1 of a 4-lane FMA.
INLINE void q5_1_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_q5_1 *x = xv;
    __m256 acc[NTMAX];
    __m128 summ[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps(), summ[t] = _mm_setzero_ps();
    for (int64_t ib = 0; ib < n / KVT_QK; ib++) {
        PREFETCH(x + ib, 1);
        const __m256i u = _mm256_or_si256(nibbles32(x[ib].qs), kvt_bits32_to_0x10(x[ib].qh)); // 0..31
        const __m128 dm = f16x2(&x[ib].d);                                                     // d, m
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_1 *y = (const kvt_block_q8_1 *)ROW(yv, t, ys) + ib;
            const __m128 ds = f16x2(&y->d); // dy, s
            summ[t] = _mm_fmadd_ps(dm, ds, summ[t]);
            const __m256 q = _mm256_cvtepi32_ps(kvt_dot_u8s8(u, ld256(y->qs)));
            acc[t] = _mm256_fmadd_ps(q, _mm256_broadcastss_ps(_mm_mul_ps(dm, ds)), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = hsum8(acc[t]) + _mm_cvtss_f32(_mm_movehdup_ps(summ[t]));
}
KVT_DOT_DISPATCH(q5_1)

// ----------------------------------------------------------------------------------------------------- q2_K

// ggml's AVX2 order (ggml_vec_dot_q2_K_q8_K): per super-block the mins' products with the block sums (8 lanes) into
// the FMA chain with -dy * dmin, then the 8 lanes of the scaled value products with dy * d; hsum8 at the end. The
// slice (h, j) holds elements 128h + 32j .. + 32 in y's order: bits 2j of the 32 bytes of half h.
INLINE void q2_K_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_q2_K *x = xv;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / KVT_QK_K; ib++) {
        PREFETCH(x + ib, sizeof *x);
        const __m128i sb = _mm_loadu_si128((const __m128i *)x[ib].scales);
        const __m128i sc = _mm_and_si128(sb, _mm_set1_epi8(0x0F));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
        const float dx = f16f(x[ib].d), dmx = f16f(x[ib].dmin);
        __m256i isum[NTMAX];
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
            const __m256i prod = _mm256_madd_epi16(mn16, ld256(y->bsums));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-y->d * dmx), _mm256_cvtepi32_ps(prod), acc[t]);
            isum[t] = _mm256_setzero_si256();
        }
#ifdef KVT_SIMD_AVX512
        // VNNI: each value's product with its scale (0..45) from a 4-entry table per sub-block (bytes 0..3 of the
        // 32-bit word sc * 0x03020100; per half the even sub-blocks' words in the low lane, the odd ones' in the high,
        // so slice j's two are word j of each lane: index value + 4j), then one VPDPBUSD per 32 products: the
        // lanes' integer sums of the madds below, exactly. Four sums per token (slice j's), so that no VPDPBUSD
        // waits on the one before; all in 256-bit registers (a 512-bit operation here took port 1 from the rest:
        // 0.71x).
        const __m128i eo = _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
        const __m256i tab[2] = {_mm256_mullo_epi32(_mm256_cvtepu8_epi32(eo), _mm256_set1_epi32(0x03020100)),
                                _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(eo, 8)), _mm256_set1_epi32(0x03020100))};
        __m256i part[4][NTMAX];
        UNROLL for (int j = 0; j < 4; j++) UNROLL for (int t = 0; t < NT; t++) part[j][t] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256i q = ld256(x[ib].qs + 32 * h);
            UNROLL for (int j = 0; j < 4; j++) {
                const __m256i idx = j ? _mm256_ternarylogic_epi32(_mm256_srli_epi16(q, 2 * j), m3,
                                                                  _mm256_set1_epi8((char)(4 * j)), 0xEA) // (a & b) | c
                                      : _mm256_and_si256(q, m3);
                const __m256i v = _mm256_shuffle_epi8(tab[h], idx); // scale * value
                UNROLL for (int t = 0; t < NT; t++) {
                    const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
                    part[j][t] = _mm256_dpbusd_epi32(part[j][t], v, ld256(y->qs + 128 * h + 32 * j));
                }
            }
        }
        UNROLL for (int t = 0; t < NT; t++)
            isum[t] = _mm256_add_epi32(_mm256_add_epi32(part[0][t], part[1][t]), _mm256_add_epi32(part[2][t], part[3][t]));
#else
        const __m256i sch[2] = {_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc)),
                                _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sc, 8)))};
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256i q = ld256(x[ib].qs + 32 * h);
            UNROLL for (int j = 0; j < 4; j++) {
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), scj = pair_scales(sch[h], 2 * j);
                UNROLL for (int t = 0; t < NT; t++) {
                    const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
                    const __m256i p = _mm256_maddubs_epi16(u, ld256(y->qs + 128 * h + 32 * j));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(scj, p));
                }
            }
        }
#endif
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = hsum8(acc[t]);
}
KVT_DOT_DISPATCH(q2_K)

// ----------------------------------------------------------------------------------------------------- q3_K

// The 16 scales s - 32 of a q3_K block as int8 (kvt_q3_K_scales' unpacking, four bytes at a time as ggml does).
INLINE __m128i q3_K_scales16(const uint8_t *q) {
    uint32_t a[3];
    memcpy(a, q, 12);
    const uint32_t k1 = 0x03030303u, k2 = 0x0f0f0f0fu;
    const __m128i s = _mm_set_epi32((int)(((a[1] >> 4) & k2) | (((a[2] >> 6) & k1) << 4)),
                                    (int)(((a[0] >> 4) & k2) | (((a[2] >> 4) & k1) << 4)),
                                    (int)((a[1] & k2) | (((a[2] >> 2) & k1) << 4)), (int)((a[0] & k2) | ((a[2] & k1) << 4)));
    return _mm_sub_epi8(s, _mm_set1_epi8(32));
}
#ifdef KVT_SIMD_AVX512
// The scales beside kvt_2bit_pair512(q, j): sc holds 8 int16 scales in every 128-bit lane (sub-blocks 8h .. 8h + 7 of a
// half h); 128-bit lane L of the result holds scale 2j + L in every word (sub-blocks 2j, 2j + 1 of slice j, then
// 2j + 2, 2j + 3 of slice j + 1).
INLINE __m512i quad_scales(__m512i sc, int j) {
    const int w0 = 0x0100 + 0x0202 * (2 * j), w1 = w0 + 0x0202, w2 = w1 + 0x0202, w3 = w2 + 0x0202;
    const int d0 = w0 | w0 << 16, d1 = w1 | w1 << 16, d2 = w2 | w2 << 16, d3 = w3 | w3 << 16;
    return _mm512_shuffle_epi8(sc, _mm512_set_epi32(d3, d3, d3, d3, d2, d2, d2, d2, d1, d1, d1, d1, d0, d0, d0, d0));
}
// q3_K's 8 lanes of a super-block as the AVX2 loop gives them, two slices per 512-bit step (slice j in the low half,
// j + 1 in the high half; the halves added at the end: exact integers, so the same lanes); 4 where the element's hmask
// bit (4h + j in the low half, 4h + j + 1 in the high half) is clear, from one byte test. From DRAM one core's q3_K
// dot 8.7 -> 9.8-10.0 GB/s (tools/bench/dot_vs_ggml.c, `11 100000 4 1`, Intel Xeon 0xA7, 2026-12-07, the builds
// alternating; 9.5-9.8 -> 10.8-10.9 in an earlier minute); q2_K the same way was slower: 13.4 -> 11.6 GB/s from L2.
INLINE void q3_K_sb512(const kvt_block_q3_K *x, __m128i sc_lo, __m128i sc_hi, const void *yv, size_t ys, int64_t ib,
                       int NT, __m256i *isum) {
    const __m512i hm = _mm512_broadcast_i64x4(ld256(x->hmask)), four = _mm512_set1_epi8(4);
    __m512i acc[2][NTMAX]; // per slice pair (j = 0, 2): no VPDPWSSD waits on the one before
    UNROLL for (int t = 0; t < NT; t++) acc[0][t] = acc[1][t] = _mm512_setzero_si512();
    UNROLL for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_broadcast_i64x4(ld256(x->qs + 32 * h));
        const __m512i sc = _mm512_broadcast_i32x4(h ? sc_hi : sc_lo);
        UNROLL for (int j = 0; j < 4; j += 2) {
            const int b = 4 * h + j;
            const __m512i l = kvt_2bit_pair512(q, j), scj = quad_scales(sc, j);
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << b)), _mm256_set1_epi8((char)(1 << (b + 1))), 1);
            const __m512i c = _mm512_maskz_mov_epi8(_mm512_testn_epi8_mask(hm, bit), four);
            UNROLL for (int t = 0; t < NT; t++) {
                const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
                const __m512i yq = _mm512_loadu_si512((const void *)(y->qs + 128 * h + 32 * j));
                const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(l, yq), _mm512_maddubs_epi16(c, yq));
                acc[j / 2][t] = _mm512_dpwssd_epi32(acc[j / 2][t], scj, p);
            }
        }
    }
    UNROLL for (int t = 0; t < NT; t++) isum[t] = kvt_add_halves512(_mm512_add_epi32(acc[0][t], acc[1][t]));
}
#endif

// ggml's AVX2 order (ggml_vec_dot_q3_K_q8_K): per slice the products of the two low bits minus 4 times the
// activation where the hmask bit is clear (in int16), times the scales; the 8 lanes per super-block into the FMA
// chain with dy * d; hsum8 at the end.
INLINE void q3_K_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_q3_K *x = xv;
    __m256 acc[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / KVT_QK_K; ib++) {
        PREFETCH(x + ib, sizeof *x);
        const __m256i all = _mm256_cvtepi8_epi16(q3_K_scales16(x[ib].scales));
        const __m128i lo = _mm256_castsi256_si128(all), hi = _mm256_extracti128_si256(all, 1);
        __m256i isum[NTMAX];
#ifdef KVT_SIMD_AVX512
        q3_K_sb512(x + ib, lo, hi, yv, ys, ib, NT, isum);
#else
        const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
        const __m256i sch[2] = {_mm256_set_m128i(lo, lo), _mm256_set_m128i(hi, hi)};
        const __m256i hm = ld256(x[ib].hmask);
        UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256i q = ld256(x[ib].qs + 32 * h);
            UNROLL for (int j = 0; j < 4; j++) {
                const int bit = 4 * h + j;
                const __m256i l = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                // 4 where the bit is clear, 0 where set
                const __m256i c = _mm256_slli_epi16(_mm256_srli_epi16(_mm256_andnot_si256(hm, _mm256_slli_epi16(one, bit)), bit), 2);
                const __m256i scj = pair_scales(sch[h], 2 * j);
                UNROLL for (int t = 0; t < NT; t++) {
                    const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
                    const __m256i yq = ld256(y->qs + 128 * h + 32 * j);
                    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(l, yq), _mm256_maddubs_epi16(c, yq));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(scj, p));
                }
            }
        }
#endif
        const float dx = f16f(x[ib].d);
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = hsum8(acc[t]);
}
KVT_DOT_DISPATCH(q3_K)

// ------------------------------------------------------------------------------------------ iq4_nl, iq4_xs

// The codebook values of 32 indices (one byte shuffle) and their magnitudes.
INLINE __m256i iq4_values(const uint8_t *q, __m256i *mag) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvt_iq4nl_values));
    const __m256i w = _mm256_shuffle_epi8(lut, nibbles32(q));
    *mag = _mm256_abs_epi8(w);
    return w;
}

// ggml's AVX2 order (ggml_vec_dot_iq4_nl_q8_0): blocks in pairs, the first of each pair into one 8-lane FMA chain
// and the second into another, each with dy * dx; hsum8 of their sum, then a last odd block in scalar. Eight blocks
// at a time take their dy * dx (the same products) from one multiply of two vectors (f16x8_strided) instead of 16
// scalar conversions and 8 multiplies.
// Block ib's step of both chains' one (acc: the chain of each token): its products with each token's block, times
// that token's dy * dx (sc[t]), into the chain.
INLINE void iq4_nl_block(const kvt_block_iq4_nl *x, const void *yv, size_t ys, int64_t ib, int NT, const float *sc,
                         __m256 *acc) {
    __m256i mag;
    const __m256i w = iq4_values(x[ib].qs, &mag);
    UNROLL for (int t = 0; t < NT; t++) {
        const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)ROW(yv, t, ys) + ib;
        const __m256i p = kvt_dot_u8s8(mag, _mm256_sign_epi8(ld256(y->qs), w));
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sc[t]), _mm256_cvtepi32_ps(p), acc[t]);
    }
}
INLINE void iq4_nl_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_iq4_nl *x = xv;
    const int64_t nb = n / KVT_QK;
    __m256 acc[2][NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 8 <= nb; ib += 8) {
        PREFETCH(x + ib, 8 * sizeof *x);
        const __m256 dx = kvt_f16x8_strided(&x[ib].d, sizeof *x);
        float sc[8][NTMAX]; // dy * dx of the 8 blocks, per token
        UNROLL for (int t = 0; t < NT; t++) {
            float v[8];
            _mm256_storeu_ps(v, _mm256_mul_ps(kvt_f16x8_strided(&((const kvt_block_q8_0 *)ROW(yv, t, ys) + ib)->d,
                                                                sizeof(kvt_block_q8_0)), dx));
            UNROLL for (int k = 0; k < 8; k++) sc[k][t] = v[k];
        }
        UNROLL for (int k = 0; k < 8; k++) iq4_nl_block(x, yv, ys, ib + k, NT, sc[k], acc[k & 1]);
    }
    for (; ib + 1 < nb; ib += 2) {
        PREFETCH(x + ib, 1);
        UNROLL for (int k = 0; k < 2; k++) {
            float sc[NTMAX];
            UNROLL for (int t = 0; t < NT; t++) sc[t] = f16f(((const kvt_block_q8_0 *)ROW(yv, t, ys) + ib + k)->d) * f16f(x[ib + k].d);
            iq4_nl_block(x, yv, ys, ib + k, NT, sc, acc[k]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) {
        float sum = hsum8(_mm256_add_ps(acc[0][t], acc[1][t]));
        if (ib < nb) {
            const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)ROW(yv, t, ys) + ib;
            sum = fmaf(f16f(y->d) * f16f(x[ib].d), (float)kvt_iq4_block_isum(x[ib].qs, y->qs), sum); // (fused in ggml's build)
        }
        s[t * ss] = sum;
    }
}
KVT_DOT_DISPATCH(iq4_nl)

// The 8 sub-blocks' ls - 32 as words: byte k of the 64-bit ls is sub-block k's nibble of scales_l and, as bits 4-5, its
// two bits of scales_h, spread by shifts and masks in scalar registers (about 20 operations where 8 extractions took 60).
INLINE __m128i iq4_xs_scales(const kvt_block_iq4_xs *x) {
    uint32_t l4;
    memcpy(&l4, x->scales_l, 4);
    uint64_t l = l4, h = x->scales_h;
    l = (l | l << 16) & 0x0000FFFF0000FFFFULL; // the nibbles k to byte k
    l = (l | l << 8) & 0x00FF00FF00FF00FFULL;
    l = (l | l << 4) & 0x0F0F0F0F0F0F0F0FULL;
    h = (h | h << 24) & 0x000000FF000000FFULL; // the 2-bit fields k to byte k
    h = (h | h << 12) & 0x000F000F000F000FULL;
    h = (h | h << 6) & 0x0303030303030303ULL;
    return _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)(l | h << 4))), _mm_set1_epi16(32));
}
// The integer sums of super-block ib per token, whose lanes' sum is its exact total S: per sub-block its products
// times ls - 32. AVX2: ggml's 8 lanes (lane i: the scaled products of the elements 4i..4i+3 of every sub-block).
// AVX-512: two sub-blocks per 512-bit step (64 elements in y's order), one VPDPWSSD chain per token; AVX-512BW has no
// byte sign: the activations of negative codebook values are negated under a mask (|y| <= 127).
#ifdef KVT_SIMD_AVX512
INLINE void iq4_xs_lanes(const kvt_block_iq4_xs *x, const void *yv, size_t ys, int64_t ib, int NT, __m512i *isum) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvt_iq4nl_values));
    const __m512i shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0), m4 = _mm512_set1_epi8(0x0F);
    x += ib;
    // one byte shuffle per pair puts sub-block 2sp's scale in the low half and 2sp + 1's in the high (two broadcasts
    // from scalar extractions and an insert a pair before)
    const __m512i lsw = _mm512_broadcast_i32x4(iq4_xs_scales(x));
    UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
    UNROLL for (int sp = 0; sp < 4; sp++) {
        // [sub-block 2sp: low nibbles, high nibbles | 2sp + 1: low, high]: its 64 elements in y's order
        const __m512i q = _mm512_castsi256_si512(ld256(x->qs + 32 * sp));
        const __m512i idx = _mm512_and_si512(_mm512_srlv_epi64(_mm512_shuffle_i64x2(q, q, 0x50), shift), m4);
        const __m512i w = _mm512_shuffle_epi8(lut, idx), mag = _mm512_abs_epi8(w);
        const __mmask64 neg = _mm512_movepi8_mask(w);
        const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi16((short)(0x0100 + 0x0202 * 2 * sp)),
                                               _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * sp + 1))), 1);
        const __m512i ls = _mm512_shuffle_epi8(lsw, sel);
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
            const __m512i yq = _mm512_loadu_si512((const void *)(y->qs + 64 * sp));
            const __m512i sy = _mm512_mask_sub_epi8(yq, neg, _mm512_setzero_si512(), yq);
            isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(mag, sy), ls);
        }
    }
}
#else
INLINE void iq4_xs_lanes(const kvt_block_iq4_xs *x, const void *yv, size_t ys, int64_t ib, int NT, __m256i *isum) {
    const __m256i lsw = _mm256_broadcastsi128_si256(iq4_xs_scales(x + ib));
    UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
    UNROLL for (int sb = 0; sb < 8; sb++) {
        __m256i mag;
        const __m256i w = iq4_values(x[ib].qs + 16 * sb, &mag);
        const __m256i ls = _mm256_shuffle_epi8(lsw, _mm256_set1_epi16((short)(0x0100 + 0x0202 * sb)));
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
            const __m256i p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(ld256(y->qs + 32 * sb), w));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, ls));
        }
    }
}
#endif

#ifdef KVT_SIMD_AVX512
// AVX-512: the reference's order (quant_lowbit.c, matmul.h): per super-block the exact integer total S of
// its scaled products, then acc = fma(float(S), dx * dy, acc) in one scalar chain per token. The totals of 4
// super-blocks of a token (1-2 tokens; at 4 the 16 live vectors made it 0.85x) or of the tokens of one super-block
// are reduced together (kvt_hsum4x16_epi32). Until 2026-12-07 llama.cpp's AVX2 order, as the AVX2 body below,
// which no tile with the rows or the tokens in the lanes follows at VPDPBUSD's rate: the AVX-512 batches now run
// kq_avx512.h's 16-row panel tile on these totals (pp128 1.7-1.9x).
INLINE void iq4_xs_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_iq4_xs *x = xv;
    const int64_t nb = n / KVT_QK_K;
    float acc[NTMAX] = {0};
    int32_t S[4] __attribute__((aligned(16)));
    int64_t ib = 0;
    if (NT <= 2)
        for (; ib + 4 <= nb; ib += 4) {
            __m512i v[4][NTMAX];
            UNROLL for (int k = 0; k < 4; k++) {
                PREFETCH(x + ib + k, sizeof *x);
                iq4_xs_lanes(x, yv, ys, ib + k, NT, v[k]);
            }
            UNROLL for (int t = 0; t < NT; t++) {
                _mm_store_si128((__m128i *)S, kvt_hsum4x16_epi32(v[0][t], v[1][t], v[2][t], v[3][t]));
                const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
                UNROLL for (int k = 0; k < 4; k++) acc[t] = fmaf((float)S[k], f16f(x[ib + k].d) * y[k].d, acc[t]);
            }
        }
    for (; ib < nb; ib++) {
        PREFETCH(x + ib, sizeof *x);
        __m512i v[4];
        iq4_xs_lanes(x, yv, ys, ib, NT, v);
        UNROLL for (int t = NT; t < 4; t++) v[t] = v[0]; // (not read)
        _mm_store_si128((__m128i *)S, kvt_hsum4x16_epi32(v[0], v[1], v[2], v[3]));
        const float dx = f16f(x[ib].d);
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
            acc[t] = fmaf((float)S[t], dx * y->d, acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = acc[t];
}
#else
// AVX2: ggml's AVX2 order (ggml_vec_dot_iq4_xs_q8_K), llama.cpp's bits: per super-block the 8 lanes of the scaled
// products into the FMA chain with dx * dy; hsum8 at the end.
INLINE void iq4_xs_body(int64_t n, const void *xv, const void *yv, size_t ys, int NT, float *s, int64_t ss) {
    const kvt_block_iq4_xs *x = xv;
    __m256 acc[NTMAX];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / KVT_QK_K; ib++) {
        PREFETCH(x + ib, sizeof *x);
        __m256i isum[NTMAX];
        iq4_xs_lanes(x, yv, ys, ib, NT, isum);
        const float dx = f16f(x[ib].d);
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)ROW(yv, t, ys) + ib;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y->d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) s[t * ss] = hsum8(acc[t]);
}
#endif
KVT_DOT_DISPATCH(iq4_xs)

// ------------------------------------------------------------------------------------------------- table

// The conversions are the reference's (not hot).
#define CONV(name, T)                                                                                                 \
    static void name##_to_float(const void *src, float *dst, int64_t n) { kvt_lowbit_ops_ref(T)->to_float(src, dst, n); } \
    static void name##_from_float(const float *src, void *dst, int64_t n) {                                          \
        kvt_lowbit_ops_ref(T)->from_float(src, dst, n);                                                               \
    }
CONV(q5_1, KVT_TYPE_Q5_1)
CONV(q2_K, KVT_TYPE_Q2_K)
CONV(q3_K, KVT_TYPE_Q3_K)
CONV(iq4_nl, KVT_TYPE_IQ4_NL)
CONV(iq4_xs, KVT_TYPE_IQ4_XS)
KVT_LOWBIT_TABLE(LOWBIT_TABLE_FN)
