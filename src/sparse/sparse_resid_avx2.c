// sparse_resid_avx2.c - the residual re-rank's pass 1 (sparse_resid.c) on AVX2: per block of 16 candidates, only the
// plan's 64-byte rows (4 dimensions x 16 keys each) of the int8 copies against the int8 residual d (every element in
// [-127, 127]: kvt_sparse_quant_query_bits with 8 bits): VPMADDUBSW takes |k| and d with k's sign (two products per int16
// lane, at most 2 * 127 * 127: never saturated), VPMADDWD with 1 sums the pairs into int32: d . k per position, exact; then
// raw = s^ + (float)dot * (ks * qs), s^ read by position. The same integer sums and float operations as the portable loop:
// the same bits.
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "sparse_impl.h"

enum { RH = 4 }; // query heads per pass: 2 accumulators each (the block's two halves)

void kvt_sparse_resid_avx2(const int8_t *d8, const float *qs, int32_t qpg, int32_t hd, const int32_t *rows, int32_t nr,
                           kvt_sparse_keys k, const int32_t *pos, int64_t m, const float *shat, int64_t sh_stride,
                           int64_t stride, float *raw) {
    const uint8_t *kc = k.kc;
    const float *ksf = k.ks;
    const int64_t bb = 16 * (int64_t)hd;
    const __m256i one = _mm256_set1_epi16(1), idx = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    enum { AHEAD = 64 }; // candidates ahead whose rows, scales and s^ are prefetched
    for (int64_t y = 0; y < m && y <= AHEAD; y += 16)
        kvt_sparse_resid_prefetch(kc, bb, rows, nr, ksf, shat, sh_stride, qpg, pos[y] & ~(int64_t)15);
    kvt_sparse_blocks it = kvt_sparse_blocks_of(pos, 0, m);
    int64_t b0, out;
    uint32_t lanes;
    while (kvt_sparse_blocks_next(&it, &b0, &lanes, &out)) {
        if (it.x + AHEAD < m)
            kvt_sparse_resid_prefetch(kc, bb, rows, nr, ksf, shat, sh_stride, qpg, pos[it.x + AHEAD] & ~(int64_t)15);
        __m256i on[2]; // the block's lanes to read (the others not read: a list's last block may end the buffers)
        __m256 ks[2];
        for (int32_t h = 0; h < 2; h++) {
            on[h] = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int32_t)(lanes >> 8 * h)), idx), idx);
            ks[h] = _mm256_maskload_ps(ksf + b0 + 8 * h, on[h]);
        }
        const uint8_t *blk = kc + b0 / 16 * bb;
        for (int32_t h0 = 0; h0 < qpg; h0 += RH) {
            const int32_t hc = qpg - h0 < RH ? qpg - h0 : RH;
            __m256i acc[RH][2];
            for (int32_t i = 0; i < hc; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
            for (int32_t j = 0; j < nr; j++) {
                __m256i kv[2], ak[2];
                for (int32_t h = 0; h < 2; h++) {
                    kv[h] = _mm256_loadu_si256((const __m256i *)(blk + 64 * rows[j] + 32 * h));
                    ak[h] = _mm256_abs_epi8(kv[h]);
                }
                for (int32_t i = 0; i < hc; i++) {
                    int32_t w;
                    memcpy(&w, d8 + (int64_t)(h0 + i) * 4 * nr + 4 * j, 4);
                    const __m256i b = _mm256_set1_epi32(w);
                    for (int32_t h = 0; h < 2; h++) {
                        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ak[h], _mm256_sign_epi8(b, kv[h])), one);
                        acc[i][h] = _mm256_add_epi32(acc[i][h], p);
                    }
                }
            }
            for (int32_t i = 0; i < hc; i++) {
                float f[16];
                for (int32_t h = 0; h < 2; h++) {
                    const __m256 c = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[i][h]), _mm256_mul_ps(ks[h], _mm256_set1_ps(qs[h0 + i])));
                    const __m256 sh = _mm256_maskload_ps(shat + (int64_t)(h0 + i) * sh_stride + b0 + 8 * h, on[h]);
                    _mm256_storeu_ps(f + 8 * h, _mm256_add_ps(sh, c));
                }
                kvt_sparse_store_lanes(raw + (int64_t)(h0 + i) * stride + out, f, lanes);
            }
        }
    }
}
#endif
