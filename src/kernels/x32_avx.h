// x32_avx.h - per-block helpers of the 32-element block formats (q4_0, q4_1, q8_0, q5_0) shared by
// the matmul rows kernels (matmul_avx2.c) and the GEMM tiles (gemm_avx2.c), so both sum with the same
// instructions. Include only from files compiled with -mavx2 (and KVT_SIMD_AVX512 defined on the
// -mavx512* builds); the macros INLINE and ld16 must not be defined by the includer before.
#ifndef KVT_X32_AVX_H
#define KVT_X32_AVX_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bits_avx2.h"
#include "quant.h"

#define INLINE static inline __attribute__((always_inline))

enum { WT_Q4_0, WT_Q4_1, WT_Q8_0, WT_Q5_0 };

INLINE uint16_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

#ifdef KVT_SIMD_AVX512
#define Q8_OFFSET 128 // q8_0 weights made unsigned by xor 0x80
#define PAIR_NIBBLES 1
#else
#define Q8_OFFSET 0 // q8_0 uses the sign trick (maddubs would saturate)
#define PAIR_NIBBLES 0
#endif

INLINE size_t x32_block_size(int WT) {
    return WT == WT_Q4_0   ? sizeof(kvt_block_q4_0)
           : WT == WT_Q4_1 ? sizeof(kvt_block_q4_1)
           : WT == WT_Q5_0 ? sizeof(kvt_block_q5_0)
                           : sizeof(kvt_block_q8_0);
}

// The 32 unsigned weights of a nibble-format block in element order (q5_0: with its fifth bits).
INLINE __m256i blk_u8(const char *blk, int WT) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(blk + (WT == WT_Q4_1 ? 4 : WT == WT_Q5_0 ? 6 : 2)));
    const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
    return WT == WT_Q5_0 ? _mm256_or_si256(u, kvt_bits32_to_0x10((const uint8_t *)blk + 2)) : u;
}

// i32 lanes (lane i: elements 4i..4i+3) of dot(u, y) for 32 unsigned weights u (< 128) and 32 int8 y.
INLINE __m256i blk_dot_u8(__m256i u, const int8_t *y) {
    return kvt_dot_u8s8(u, _mm256_loadu_si256((const __m256i *)y));
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
    const __m256i u = blk_u8(blk, WT);
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
    if (WT == WT_Q5_0) { // [A 0-15, B 0-15, A 16-31, B 16-31]
        const __m256i a = blk_u8(blk, WT), b = blk_u8(blk + bs, WT);
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(a, b, 0x20)),
                                  _mm256_permute2x128_si256(a, b, 0x31), 1);
    }
    // [A, B, A, B] from two 16-byte broadcast loads and a blend, the upper half shifted by 4: no shuffle-port
    // instruction (the decode loop is bound by that port)
    const size_t off = WT == WT_Q4_1 ? 4 : 2;
    const __m512i a = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk + off)));
    const __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk + bs + off)));
    const __m512i z = _mm512_mask_blend_epi64(0xCC, a, b);
    return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFFFF0000u, z, 4), _mm512_set1_epi8(0x0F));
}
#endif

#endif
