// x32_avx.h - per-block helpers of the 32-element block formats q4_1 and q8_0 (q4_0 and q5_0: q40x8.h) shared by
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

enum { WT_Q4_1, WT_Q8_0 }; // the two formats left on these kernels (q4_0, q5_0: q40x8.h)

INLINE uint16_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

#ifdef KVT_SIMD_AVX512
#define Q8_OFFSET 128 // q8_0 weights made unsigned by xor 0x80
#else
#define Q8_OFFSET 0 // q8_0 uses the sign trick (maddubs would saturate)
#endif

// The 32 unsigned weights of a q4_1 block in element order.
INLINE __m256i blk_u8(const char *blk) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(blk + 4));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// i32 lanes (lane i: elements 4i..4i+3) of dot(u, y) for 32 unsigned weights u (< 128) and 32 int8 y.
INLINE __m256i blk_dot_u8(__m256i u, const int8_t *y) {
    return kvt_dot_u8s8(u, _mm256_loadu_si256((const __m256i *)y));
}

#ifdef KVT_SIMD_AVX512
// One q8_0 block: i32 partial sums (8 lanes) of dot(w + 128, y).
INLINE __m256i q8_blk_dot256(const char *blk, const int8_t *y) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 2));
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(w, _mm256_set1_epi8(-128)),
                               _mm256_loadu_si256((const __m256i *)y));
}

// Two consecutive q8_0 blocks as 64 unsigned bytes (w + 128).
INLINE __m512i q8_pair_u8(const char *blk) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(blk + sizeof(kvt_block_q8_0) + 2));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1), _mm512_set1_epi8(-128));
}
#endif

#endif
