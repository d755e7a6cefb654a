// fvec_avx.h - the float vector of the AVX2 (8 lanes) and AVX-512 (16 lanes, KVT_SIMD_AVX512) builds,
// shared by the matmul rows kernels (matmul_avx2.c) and the GEMM tiles (gemm_avx2.c): both reduce
// with these operations, so an output has the same bits alone or in a batch. Include only from files
// compiled with -mavx2 (and -mavx512* when KVT_SIMD_AVX512 is defined).
#ifndef KVT_FVEC_AVX_H
#define KVT_FVEC_AVX_H

#include <immintrin.h>

#include "bits_avx2.h"

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
#define fv_mul _mm512_mul_ps
#define fv_max _mm512_max_ps
#define fv_set1 _mm512_set1_ps
#define fv_st(p, v) _mm512_storeu_ps(p, v)
#define fv_hmax _mm512_reduce_max_ps
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
#define fv_hsum kvt_hsum8
#define fv_mul _mm256_mul_ps
#define fv_max _mm256_max_ps
#define fv_set1 _mm256_set1_ps
#define fv_st(p, v) _mm256_storeu_ps(p, v)
#define fv_hmax kvt_hmax8
#endif

#endif
