// gemm_lowbit.h - GEMM tiles of the low-bit types q2_K, q3_K, iq4_nl (AVX2 and AVX-512) and iq4_xs (AVX2; its AVX-512
// tile is kq_avx512.h's 16-row panel) (quant_lowbit.h), included by gemm_avx2.c in its two builds for its driver
// (gemm_run: activations prepared once per call, weight side data once per strip, R x T tiles).
//
// Batch invariance: every output has the bits of the type's GEMV on that ISA for that activation row alone
// (quant_lowbit_avx2.c, llama.cpp's AVX2 order): the same 8 lanes of exact integer sums per block, the same FMA
// chains in the same order, the same horizontal sum. Only the integer sums are computed otherwise, and integer sums
// are exact in any order: per lane i of a block, the products of the elements 4i..4i+3 of every 32-element slice,
// times their sub-block's scale. The weight side data holds each element's scaled value, so the scale costs nothing
// per token:
//  - q2_K: scale * value (0..45) as a byte;
//  - q3_K: -(scale * value) (-128..124: scale * value is -124..128) as a byte;
//  - iq4_nl: the codebook value (-127..113) as a byte;
//  - iq4_xs (AVX2): the codebook value as a byte and the sub-block's ls - 32 beside (its GEMV's madd with the scale).
// AVX-512 (VNNI): one VPDPBUSD sums 64 products per (row, token) where the GEMV spends two multiplies and an add per 32;
// q3_K and iq4_nl against the activations offset to unsigned (y + 128), the offset's term per lane in the side data;
// the VPDPBUSD lanes of a 64-element step hold two slices' lanes, added at the end of the block; iq4_nl's two FMA
// chains (llama.cpp's block pairs) are the two halves of one 512-bit accumulator.
// AVX2: per 32 products maddubs, madd with ones and an add (q3_K and iq4_nl a sign more: the sign trick on the signed
// values, exact for activations in [-127, 127], what the q8 quantizers give), where the GEMV's q3_K spends five
// operations and every GEMV unpacks the bits again for each 4 tokens.
// The weight side data is larger than the block (q2_K / q3_K / iq4_xs 320 bytes per 256 elements, iq4_nl 192 per 64),
// so the strips are smaller (LB_STRIP bytes of weights) and small batches keep the row kernels (matmul_avx2.c's
// LB_*_GEMM_MIN). Measured: docs/BENCHMARKS.md, "GEMM tiles for Q2_K, Q3_K, IQ4_NL, IQ4_XS".

#include "bits_avx2.h"
#include "quant_lowbit.h"

#ifndef LB_STRIP
#define LB_STRIP (64 * 1024)
#endif
#define LB_KS 320 // q2_K / q3_K side data per super-block: 256 scaled values, then 32 bytes, then the floats
#define LB_NLS 192 // iq4_nl side data per block pair: 64 values, 16 int32 offset terms, 16 floats of d
#define LB_NLA 128 // iq4_nl prepared activations per block pair: 64 offset bytes, 16 floats of dy

// The 8 lanes' sum in ggml's order (its hsum_float_8, as quant_lowbit_avx2.c's hsum8).
INLINE float lb_hsum8(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
static int64_t lb_psize0(int64_t n) { return (void)n, 64; }
static void lb_prep0(int64_t n, const void *x, void *p) { (void)n, (void)x, (void)p; }
static int64_t lbk_wsize(int64_t n) { return n / KVT_QK_K * LB_KS; }
// The tail of q2_K's side data on both ISAs: the mins as int16 at o + 256, d and dmin as floats at o + 288.
INLINE void q2k_side_tail(const kvt_block_q2_K *x, uint8_t *o) {
    const __m128i sb = _mm_loadu_si128((const __m128i *)x->scales);
    _mm256_storeu_si256((__m256i *)(o + 256), _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F))));
    const float fd[2] = {_cvtsh_ss(x->d), _cvtsh_ss(x->dmin)};
    memcpy(o + 288, fd, 8);
}

#ifdef KVT_SIMD_AVX512

// ---------------------------------------------------------------------------------------------- q2_K, q3_K

// q3_K: the activation bytes offset to unsigned (y ^ 0x80 = y + 128), 256 a super-block; q2_K reads them as they are.
static int64_t q3k_psize(int64_t n) { return n / KVT_QK_K * KVT_QK_K; }
static void q3k_prep(int64_t n, const void *x, void *p) {
    const __m512i off = _mm512_set1_epi8((char)0x80);
    for (int64_t b = 0; b < n / KVT_QK_K; b++)
        UNROLL for (int k = 0; k < 4; k++) {
            const kvt_block_q8_K *y = (const kvt_block_q8_K *)x + b;
            _mm512_storeu_si512((char *)p + b * KVT_QK_K + 64 * k,
                                _mm512_xor_si512(_mm512_loadu_si512((const void *)(y->qs + 64 * k)), off));
        }
}

// Words of v (16 scales as words) beside 64 bytes or 32 words of elements: word g + L in every word of 128-bit lane L
// (bytes: the lane is one sub-block of 16), or (words) g in the low 256 bits and g + 1 in the high.
INLINE __m512i lb_scales_bytes(__m256i v, int g) {
    const long long w = 0x0001000100010001LL;
    return _mm512_permutexvar_epi16(_mm512_set_epi64(w * (g + 3), w * (g + 3), w * (g + 2), w * (g + 2), w * (g + 1),
                                                     w * (g + 1), w * g, w * g),
                                    _mm512_castsi256_si512(v));
}
INLINE __m512i lb_scales_words(__m256i v, int g) {
    return _mm512_permutexvar_epi16(_mm512_inserti64x4(_mm512_set1_epi16((short)g), _mm256_set1_epi16((short)(g + 1)), 1),
                                    _mm512_castsi256_si512(v));
}

// q2_K side data per super-block: uint8 scale * value [256] in element order, int16 mins [16], float d, dmin. The
// products (<= 45) from one 16-bit multiply of two bytes by the same scale (no carry between them).
static void q2k_wprep(int64_t n, const void *w, void *s) {
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q2_K *x = (const kvt_block_q2_K *)w + b;
        uint8_t *o = (uint8_t *)s + b * LB_KS;
        const __m128i sb = _mm_loadu_si128((const __m128i *)x->scales);
        const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * h)));
            for (int j = 0; j < 4; j += 2)
                _mm512_storeu_si512(o + 128 * h + 32 * j, _mm512_mullo_epi16(kvt_2bit_pair512(q, j), lb_scales_bytes(sc, 8 * h + 2 * j)));
        }
        q2k_side_tail(x, o);
    }
}
// q3_K side data per super-block: int8 -(scale * value) [256] in element order, int32 -128 * sum(scale * value) of
// each of the 8 lanes, float d. The values v = low bits - 4 where the hmask bit is clear widened to words for the
// product with the scale, its lanes' sums by VPDPBUSD against ones.
static void q3k_wprep(int64_t n, const void *w, void *s) {
    const __m512i four = _mm512_set1_epi8(4), ones = _mm512_set1_epi8(1);
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q3_K *x = (const kvt_block_q3_K *)w + b;
        uint8_t *o = (uint8_t *)s + b * LB_KS;
        int8_t sc8[16];
        kvt_q3_K_scales(x->scales, sc8);
        const __m256i nsc = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc8)));
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->hmask));
        __m512i lanes = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * h)));
            for (int j = 0; j < 4; j += 2) {
                const int bt = 4 * h + j;
                const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << bt)), _mm256_set1_epi8((char)(1 << (bt + 1))), 1);
                const __m512i l = kvt_2bit_pair512(q, j);
                const __m512i v = _mm512_mask_sub_epi8(l, _mm512_testn_epi8_mask(hm, bit), l, four); // -4..3
                const __m512i p0 = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm512_castsi512_si256(v)),
                                                      lb_scales_words(nsc, 8 * h + 2 * j));
                const __m512i p1 = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(v, 1)),
                                                      lb_scales_words(nsc, 8 * h + 2 * j + 2));
                const __m512i nsv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(p0)), _mm512_cvtepi16_epi8(p1), 1);
                _mm512_storeu_si512(o + 128 * h + 32 * j, nsv);
                lanes = _mm512_dpbusd_epi32(lanes, ones, nsv);
            }
        }
        _mm256_storeu_si256((__m256i *)(o + 256), _mm256_slli_epi32(kvt_add_halves512(lanes), 7)); // 128 * sum(-(scale * value))
        const float d = _cvtsh_ss(x->d);
        memcpy(o + 288, &d, 4);
    }
}

// The R x T tile of q2_K (Q3 = 0) or q3_K (Q3 = 1): per super-block the exact lanes by VPDPBUSD, then per output the
// GEMV's float steps (q2_K: the mins' FMA first).
INLINE void lbk_tile(TILE_ARGS, int R, int T, int Q3) {
    (void)W, (void)wrs;
    __m256 acc[RMAX][TMAX];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / KVT_QK_K; ib++) {
        const kvt_block_q8_K *y[TMAX];
        UNROLL for (int t = 0; t < T; t++) y[t] = (const kvt_block_q8_K *)(X + t * xrs) + ib;
        __m512i ia[RMAX][TMAX];
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) ia[r][t] = _mm512_setzero_si512();
        UNROLL for (int k = 0; k < 4; k++) {
            __m512i wv[RMAX];
            UNROLL for (int r = 0; r < R; r++) wv[r] = _mm512_loadu_si512((const void *)(S + r * ss + ib * LB_KS + 64 * k));
            UNROLL for (int t = 0; t < T; t++) {
                const __m512i yv = Q3 ? _mm512_loadu_si512((const void *)(P + t * ps + ib * KVT_QK_K + 64 * k))
                                      : _mm512_loadu_si512((const void *)(y[t]->qs + 64 * k));
                UNROLL for (int r = 0; r < R; r++)
                    ia[r][t] = Q3 ? _mm512_dpbusd_epi32(ia[r][t], yv, wv[r]) : _mm512_dpbusd_epi32(ia[r][t], wv[r], yv);
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            const char *o = S + r * ss + ib * LB_KS;
            float fd[2];
            memcpy(fd, o + 288, 8);
            const __m256i side = _mm256_loadu_si256((const __m256i *)(o + 256)); // q2_K mins, q3_K offset terms
            UNROLL for (int t = 0; t < T; t++) {
                __m256i isum = kvt_add_halves512(ia[r][t]);
                if (Q3) {
                    isum = _mm256_sub_epi32(side, isum);
                } else {
                    const __m256i prod = _mm256_madd_epi16(side, _mm256_loadu_si256((const __m256i *)y[t]->bsums));
                    acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(-y[t]->d * fd[1]), _mm256_cvtepi32_ps(prod), acc[r][t]);
                }
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t]->d * fd[0]), _mm256_cvtepi32_ps(isum), acc[r][t]);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) Y[t * ldy + r] = lb_hsum8(acc[r][t]);
}
INLINE void q2_K_tile(TILE_ARGS, int R, int T) { lbk_tile(TILE_PASS, R, T, 0); }
INLINE void q3_K_tile(TILE_ARGS, int R, int T) { lbk_tile(TILE_PASS, R, T, 1); }

// -------------------------------------------------------------------------------------------------- iq4_nl

// Side data per pair of blocks (2p, 2p + 1): int8 codebook values [64] in element order, int32 -128 * sum of each
// lane's values [16] (block 2p's 8 lanes, then 2p + 1's), float d [16] (2p's d 8 times, then 2p + 1's). A last odd
// block is read from the row itself.
static int64_t nl_wsize(int64_t n) { return align64(n / KVT_QK / 2 * LB_NLS); }
static void nl_wprep(int64_t n, const void *w, void *s) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvt_iq4nl_values)), ones = _mm512_set1_epi8(1);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t p = 0; p < n / KVT_QK / 2; p++) {
        const kvt_block_iq4_nl *x = (const kvt_block_iq4_nl *)w + 2 * p;
        uint8_t *o = (uint8_t *)s + p * LB_NLS;
        __m256i idx[2];
        for (int k = 0; k < 2; k++) { // element e < 16: low nibble of qs[e], e >= 16: high nibble of qs[e - 16]
            const __m128i q = _mm_loadu_si128((const __m128i *)x[k].qs);
            idx[k] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        }
        const __m512i v = _mm512_shuffle_epi8(lut, _mm512_inserti64x4(_mm512_castsi256_si512(idx[0]), idx[1], 1));
        _mm512_storeu_si512(o, v);
        _mm512_storeu_si512(o + 64, _mm512_sub_epi32(_mm512_setzero_si512(),
                                                     _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, v), 7)));
        _mm512_storeu_ps(o + 128, _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(_cvtsh_ss(x[0].d))),
                                                     _mm256_set1_ps(_cvtsh_ss(x[1].d)), 1));
    }
}
// Prepared activations per block pair: the 64 bytes offset to unsigned, dy [16] as d above.
static int64_t nl_psize(int64_t n) { return align64(n / KVT_QK / 2 * LB_NLA); }
static void nl_prep(int64_t n, const void *x, void *pv) {
    for (int64_t p = 0; p < n / KVT_QK / 2; p++) {
        const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)x + 2 * p;
        char *o = (char *)pv + p * LB_NLA;
        const __m256i off = _mm256_set1_epi8((char)0x80);
        _mm256_storeu_si256((__m256i *)o, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[0].qs), off));
        _mm256_storeu_si256((__m256i *)(o + 32), _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[1].qs), off));
        _mm256_storeu_ps((float *)(o + 64), _mm256_set1_ps(_cvtsh_ss(y[0].d)));
        _mm256_storeu_ps((float *)(o + 96), _mm256_set1_ps(_cvtsh_ss(y[1].d)));
    }
}
// The GEMV's steps per output: per pair acc = fma(dy * dx, float(lanes), acc) with the even block in the low half (its
// first chain) and the odd one in the high half (its second); hsum8 of the halves' sum; a last odd block in scalar.
INLINE void iq4_nl_tile(TILE_ARGS, int R, int T) {
    const int64_t nb = n / KVT_QK, np = nb / 2;
    __m512 acc[RMAX][TMAX];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        __m512i wv[RMAX], kv[RMAX];
        __m512 dx[RMAX];
        UNROLL for (int r = 0; r < R; r++) {
            const char *o = S + r * ss + p * LB_NLS;
            wv[r] = _mm512_loadu_si512((const void *)o), kv[r] = _mm512_loadu_si512((const void *)(o + 64));
            dx[r] = _mm512_loadu_ps((const void *)(o + 128));
        }
        UNROLL for (int t = 0; t < T; t++) {
            const char *a = P + t * ps + p * LB_NLA;
            const __m512i yv = _mm512_loadu_si512((const void *)a);
            const __m512 dy = _mm512_loadu_ps((const void *)(a + 64));
            UNROLL for (int r = 0; r < R; r++) {
                const __m512i isum = _mm512_add_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), yv, wv[r]), kv[r]);
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(dy, dx[r]), _mm512_cvtepi32_ps(isum), acc[r][t]);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        const kvt_block_iq4_nl *x = (const kvt_block_iq4_nl *)(W + r * wrs) + 2 * np;
        UNROLL for (int t = 0; t < T; t++) {
            float sum = lb_hsum8(_mm256_add_ps(_mm512_castps512_ps256(acc[r][t]), _mm512_extractf32x8_ps(acc[r][t], 1)));
            if (nb & 1) {
                const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)(X + t * xrs) + 2 * np;
                sum = fmaf(_cvtsh_ss(y->d) * _cvtsh_ss(x->d), (float)kvt_iq4_block_isum(x->qs, y->qs), sum); // the GEMV's tail
            }
            Y[t * ldy + r] = sum;
        }
    }
}

#else // AVX2: the same side data (the offset terms not written: no offset), the GEMV's maddubs + madd

// q2_K side data as above: per slice the 2-bit values times their sub-blocks' scales by one 16-bit multiply.
static void q2k_wprep(int64_t n, const void *w, void *s) {
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q2_K *x = (const kvt_block_q2_K *)w + b;
        uint8_t *o = (uint8_t *)s + b * LB_KS;
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const int g = 8 * h + 2 * j;
                const __m256i scw = _mm256_set_m128i(_mm_set1_epi16((short)(x->scales[g + 1] & 0xF)),
                                                     _mm_set1_epi16((short)(x->scales[g] & 0xF)));
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
                _mm256_storeu_si256((__m256i *)(o + 128 * h + 32 * j), _mm256_mullo_epi16(u, scw));
            }
        }
        q2k_side_tail(x, o);
    }
}
// q3_K side data as above but the offset terms: -(scale * value) per element, the values as the GEMV makes them.
static void q3k_wprep(int64_t n, const void *w, void *s) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q3_K *x = (const kvt_block_q3_K *)w + b;
        uint8_t *o = (uint8_t *)s + b * LB_KS;
        int8_t sc[16];
        kvt_q3_K_scales(x->scales, sc);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const int bit = 4 * h + j, g = 8 * h + 2 * j;
                const __m256i l = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                const __m256i c = _mm256_slli_epi16(_mm256_srli_epi16(_mm256_andnot_si256(hm, _mm256_slli_epi16(one, bit)), bit), 2);
                const __m256i v = _mm256_sub_epi8(l, c); // -4..3
                const __m256i p0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), _mm256_set1_epi16((short)-sc[g]));
                const __m256i p1 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
                                                      _mm256_set1_epi16((short)-sc[g + 1]));
                _mm256_storeu_si256((__m256i *)(o + 128 * h + 32 * j), _mm256_permute4x64_epi64(_mm256_packs_epi16(p0, p1), 0xD8));
            }
        }
        const float d = _cvtsh_ss(x->d);
        memcpy(o + 288, &d, 4);
    }
}
// iq4_xs side data (the AVX2 build's; LB_KS bytes a super-block): int8 codebook values [256] in element order, int16
// ls - 32 of the 8 sub-blocks, float d at 288.
static void xs_wprep(int64_t n, const void *w, void *s) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvt_iq4nl_values));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_iq4_xs *x = (const kvt_block_iq4_xs *)w + b;
        uint8_t *o = (uint8_t *)s + b * LB_KS;
        int16_t ls[8];
        for (int sb = 0; sb < 8; sb++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(x->qs + 16 * sb));
            const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
            _mm256_storeu_si256((__m256i *)(o + 32 * sb), _mm256_shuffle_epi8(lut, idx));
            ls[sb] = (int16_t)(kvt_iq4_xs_scale(x, sb) - 32);
        }
        const float d = _cvtsh_ss(x->d);
        memcpy(o + 256, ls, 16), memcpy(o + 288, &d, 4);
    }
}
// The R x T tile of q2_K (M = 0: maddubs(scale * value, y), madd with ones), q3_K (M = 1: the sign trick on
// -(scale * value), whose magnitude <= 128 fits maddubs' unsigned operand; exact for activations in [-127, 127], as the
// GEMV's iq4 kernels) or iq4_xs (M = 2: the sign trick on the codebook values, madd with the sub-block's scale, as its
// GEMV): per 32 elements the GEMV's lanes, its float steps per super-block.
INLINE void lbk_tile(TILE_ARGS, int R, int T, int M) {
    const int Q3 = M != 0;
    (void)W, (void)wrs, (void)P, (void)ps;
    const __m256i ones = _mm256_set1_epi16(1);
    float acc_[RMAX][TMAX][8] __attribute__((aligned(32))) = {{{0}}};
    for (int64_t ib = 0; ib < n / KVT_QK_K; ib++) {
        const kvt_block_q8_K *y[TMAX];
        UNROLL for (int t = 0; t < T; t++) y[t] = (const kvt_block_q8_K *)(X + t * xrs) + ib;
        __m256i ia[RMAX][TMAX];
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) ia[r][t] = _mm256_setzero_si256();
        for (int k = 0; k < 8; k++) {
            __m256i wv[RMAX], av[RMAX], lsv[RMAX];
            UNROLL for (int r = 0; r < R; r++) {
                wv[r] = _mm256_loadu_si256((const __m256i *)(S + r * ss + ib * LB_KS + 32 * k));
                av[r] = Q3 ? _mm256_abs_epi8(wv[r]) : wv[r];
                lsv[r] = M == 2 ? _mm256_set1_epi16(*(const int16_t *)(S + r * ss + ib * LB_KS + 256 + 2 * k)) : ones;
            }
            UNROLL for (int t = 0; t < T; t++) {
                const __m256i yv = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 32 * k));
                UNROLL for (int r = 0; r < R; r++) {
                    const __m256i p = _mm256_maddubs_epi16(av[r], Q3 ? _mm256_sign_epi8(yv, wv[r]) : yv);
                    ia[r][t] = _mm256_add_epi32(ia[r][t], _mm256_madd_epi16(p, M == 2 ? lsv[r] : ones));
                }
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            const char *o = S + r * ss + ib * LB_KS;
            float fd[2];
            memcpy(fd, o + 288, 8);
            UNROLL for (int t = 0; t < T; t++) {
                __m256 acc = _mm256_load_ps(acc_[r][t]);
                __m256i isum = ia[r][t];
                if (M == 1) {
                    isum = _mm256_sub_epi32(_mm256_setzero_si256(), isum);
                } else if (M == 0) {
                    const __m256i mn = _mm256_loadu_si256((const __m256i *)(o + 256));
                    const __m256i prod = _mm256_madd_epi16(mn, _mm256_loadu_si256((const __m256i *)y[t]->bsums));
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(-y[t]->d * fd[1]), _mm256_cvtepi32_ps(prod), acc);
                }
                _mm256_store_ps(acc_[r][t], _mm256_fmadd_ps(_mm256_set1_ps(y[t]->d * fd[0]), _mm256_cvtepi32_ps(isum), acc));
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) Y[t * ldy + r] = lb_hsum8(_mm256_load_ps(acc_[r][t]));
}
INLINE void q2_K_tile(TILE_ARGS, int R, int T) { lbk_tile(TILE_PASS, R, T, 0); }
INLINE void q3_K_tile(TILE_ARGS, int R, int T) { lbk_tile(TILE_PASS, R, T, 1); }
INLINE void iq4_xs_tile(TILE_ARGS, int R, int T) { lbk_tile(TILE_PASS, R, T, 2); }

// iq4_nl side data as above but the offset terms; prepared activations as above but not offset (the sign trick).
static int64_t nl_wsize(int64_t n) { return align64(n / KVT_QK / 2 * LB_NLS); }
static void nl_wprep(int64_t n, const void *w, void *s) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvt_iq4nl_values));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t p = 0; p < n / KVT_QK / 2; p++) {
        const kvt_block_iq4_nl *x = (const kvt_block_iq4_nl *)w + 2 * p;
        uint8_t *o = (uint8_t *)s + p * LB_NLS;
        for (int k = 0; k < 2; k++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)x[k].qs);
            const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
            _mm256_storeu_si256((__m256i *)(o + 32 * k), _mm256_shuffle_epi8(lut, idx));
            _mm256_storeu_ps((float *)(o + 128 + 32 * k), _mm256_set1_ps(_cvtsh_ss(x[k].d)));
        }
    }
}
static int64_t nl_psize(int64_t n) { return align64(n / KVT_QK / 2 * LB_NLA); }
static void nl_prep(int64_t n, const void *x, void *pv) {
    for (int64_t p = 0; p < n / KVT_QK / 2; p++) {
        const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)x + 2 * p;
        char *o = (char *)pv + p * LB_NLA;
        for (int k = 0; k < 2; k++) {
            _mm256_storeu_si256((__m256i *)(o + 32 * k), _mm256_loadu_si256((const __m256i *)y[k].qs));
            _mm256_storeu_ps((float *)(o + 64 + 32 * k), _mm256_set1_ps(_cvtsh_ss(y[k].d)));
        }
    }
}
// The GEMV's steps: per block the sign trick's lanes into the chain of its parity with dy * dx; hsum8 of the two
// chains' sum; a last odd block in scalar.
INLINE void iq4_nl_tile(TILE_ARGS, int R, int T) {
    const int64_t nb = n / KVT_QK, np = nb / 2;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][RMAX][TMAX];
    UNROLL for (int k = 0; k < 2; k++) UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        acc[k][r][t] = _mm256_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        UNROLL for (int k = 0; k < 2; k++) {
            __m256i wv[RMAX], av[RMAX];
            __m256 dx[RMAX];
            UNROLL for (int r = 0; r < R; r++) {
                const char *o = S + r * ss + p * LB_NLS;
                wv[r] = _mm256_loadu_si256((const __m256i *)(o + 32 * k)), av[r] = _mm256_abs_epi8(wv[r]);
                dx[r] = _mm256_loadu_ps((const float *)(o + 128 + 32 * k));
            }
            UNROLL for (int t = 0; t < T; t++) {
                const char *a = P + t * ps + p * LB_NLA;
                const __m256i yv = _mm256_loadu_si256((const __m256i *)(a + 32 * k));
                const __m256 dy = _mm256_loadu_ps((const float *)(a + 64 + 32 * k));
                UNROLL for (int r = 0; r < R; r++) {
                    const __m256i q = _mm256_madd_epi16(_mm256_maddubs_epi16(av[r], _mm256_sign_epi8(yv, wv[r])), ones);
                    acc[k][r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dy, dx[r]), _mm256_cvtepi32_ps(q), acc[k][r][t]);
                }
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        const kvt_block_iq4_nl *x = (const kvt_block_iq4_nl *)(W + r * wrs) + 2 * np;
        UNROLL for (int t = 0; t < T; t++) {
            float sum = lb_hsum8(_mm256_add_ps(acc[0][r][t], acc[1][r][t]));
            if (nb & 1) {
                const kvt_block_q8_0 *y = (const kvt_block_q8_0 *)(X + t * xrs) + 2 * np;
                sum = fmaf(_cvtsh_ss(y->d) * _cvtsh_ss(x->d), (float)kvt_iq4_block_isum(x->qs, y->qs), sum); // the GEMV's tail
            }
            Y[t * ldy + r] = sum;
        }
    }
}
#endif

#ifdef KVT_SIMD_AVX512
// Tile shapes (rows x tokens), pp128 on TinyLlama-shaped files, 2 threads, Intel Xeon 0xA7, 2026-12-07: q3_K (Q3_K_M)
// 2x4 248, 3x4 251, 2x6 247, 4x4 241 t/s; iq4_nl (IQ4_NL) 2x4 125, 3x4 138, 2x6 127, 4x4 143.
DEFINE_GEMM_S(q2_K, KVT_TYPE_Q2_K, 3x4, 3, 4, lb_psize0, lb_prep0, lbk_wsize, q2k_wprep, LB_STRIP)
DEFINE_GEMM_S(q3_K, KVT_TYPE_Q3_K, 3x4, 3, 4, q3k_psize, q3k_prep, lbk_wsize, q3k_wprep, LB_STRIP)
DEFINE_GEMM_S(iq4_nl, KVT_TYPE_IQ4_NL, 4x4, 4, 4, nl_psize, nl_prep, nl_wsize, nl_wprep, LB_STRIP)
#else
#ifndef LB_K2_SHAPE
#define LB_K2_SHAPE 2x4
#define LB_K2_RM 2
#define LB_K2_TM 4
#endif
#ifndef LB_NL2_SHAPE
#define LB_NL2_SHAPE 1x8
#define LB_NL2_RM 1
#define LB_NL2_TM 8
#endif
DEFINE_GEMM_S(q2_K, KVT_TYPE_Q2_K, LB_K2_SHAPE, LB_K2_RM, LB_K2_TM, lb_psize0, lb_prep0, lbk_wsize, q2k_wprep, LB_STRIP)
DEFINE_GEMM_S(q3_K, KVT_TYPE_Q3_K, LB_K2_SHAPE, LB_K2_RM, LB_K2_TM, lb_psize0, lb_prep0, lbk_wsize, q3k_wprep, LB_STRIP)
DEFINE_GEMM_S(iq4_nl, KVT_TYPE_IQ4_NL, LB_NL2_SHAPE, LB_NL2_RM, LB_NL2_TM, nl_psize, nl_prep, nl_wsize, nl_wprep, LB_STRIP)
DEFINE_GEMM_S(iq4_xs, KVT_TYPE_IQ4_XS, LB_K2_SHAPE, LB_K2_RM, LB_K2_TM, lb_psize0, lb_prep0, lbk_wsize, xs_wprep, LB_STRIP)
#endif
