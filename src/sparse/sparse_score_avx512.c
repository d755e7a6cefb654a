// sparse_score_avx512.c - the int8 key scan of sparse_score.c (dot_rows_i8) for AVX-512 CPUs (Makefile flags for
// *_avx512.c; called only when kvt_kernels_isa() is KVT_ISA_AVX512). Each key row is widened to int16 once and
// multiplied with every query row of the group by VPDPWSSD (pairs of int16 products summed into int32 lanes). The
// integer sums are exact (|q| <= 32767, |k| <= 127, hd <= 512), so the scores are the same bits as the portable
// loop's: raw[i * n + t] = (float)(q16_i . k8_t) * (k8s[t] * qs[i]).
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "sparse_impl.h"

void kvt_sparse_dot_rows_i8_avx512(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, const int8_t *k8,
                                   const float *k8s, int64_t n_keys, int64_t n, float *raw) {
    const int32_t nc = hd / 32; // 32 elements per chunk; the caller checks hd % 32 == 0 and hd <= KVT_SPARSE_MAX_HD
    for (int64_t t = 0; t < n_keys; t++) {
        const int8_t *k = k8 + t * hd;
        __m512i kw[KVT_SPARSE_MAX_HD / 32];
        for (int32_t c = 0; c < nc; c++) kw[c] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(k + 32 * c)));
        for (int32_t i = 0; i < qpg; i++) {
            const int16_t *qi = q16 + (int64_t)i * hd;
            __m512i acc = _mm512_setzero_si512();
            for (int32_t c = 0; c < nc; c++) acc = _mm512_dpwssd_epi32(acc, kw[c], _mm512_loadu_si512(qi + 32 * c));
            const int32_t s = _mm512_reduce_add_epi32(acc);
            raw[i * n + t] = (float)s * (k8s[t] * qs[i]);
        }
    }
}
#endif
