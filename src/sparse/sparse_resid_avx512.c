// sparse_resid_avx512.c - the residual re-rank's pass 1 (sparse_resid.c) on AVX-512 VNNI: per block of 16 candidates,
// only the plan's 64-byte rows (4 dimensions x 16 keys each) of the int8 copies against the int8 residual d (the q8
// form: (k + 128) . d - 128 sum(d), exact in int32), then raw = s^ + (float)dot * (ks * qs), s^ read by position. The
// same integer sums and float operations as the portable loop: the same bits.
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "sparse_impl.h"

void kvt_sparse_resid_avx512(const int8_t *d8, const int32_t *corr, const float *qs, int32_t qpg, int32_t hd,
                             const int32_t *rows, int32_t nr, kvt_sparse_keys k, const int32_t *pos, int64_t m,
                             const float *shat, int64_t sh_stride, int64_t stride, float *raw) {
    const uint8_t *kc = k.kc;
    const float *ksf = k.ks;
    const int64_t bb = 16 * (int64_t)hd;
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    enum { AHEAD = 64 }; // candidates ahead whose rows, scales and s^ are prefetched
    for (int64_t y = 0; y < m && y <= AHEAD; y += 16)
        kvt_sparse_resid_prefetch(kc, bb, rows, nr, ksf, shat, sh_stride, qpg, pos[y] & ~(int64_t)15);
    kvt_sparse_blocks it = kvt_sparse_blocks_of(pos, 0, m);
    int64_t b0, out;
    uint32_t bits_m;
    while (kvt_sparse_blocks_next(&it, &b0, &bits_m, &out)) {
        if (it.x + AHEAD < m)
            kvt_sparse_resid_prefetch(kc, bb, rows, nr, ksf, shat, sh_stride, qpg, pos[it.x + AHEAD] & ~(int64_t)15);
        const __mmask16 mk = (__mmask16)bits_m;
        const __mmask16 st = (__mmask16)((1u << __builtin_popcount(bits_m)) - 1u);
        const __m512 ks = _mm512_maskz_loadu_ps(mk, ksf + b0);
        const uint8_t *blk = kc + b0 / 16 * bb;
        __m512i acc[8];
        for (int32_t h0 = 0; h0 < qpg; h0 += 8) {
            const int32_t hc = qpg - h0 < 8 ? qpg - h0 : 8;
            for (int32_t i = 0; i < hc; i++) acc[i] = _mm512_setzero_si512();
            for (int32_t j = 0; j < nr; j++) {
                const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(blk + 64 * rows[j]), x80); // k + 128
                for (int32_t i = 0; i < hc; i++) {
                    int32_t w;
                    memcpy(&w, d8 + (int64_t)(h0 + i) * 4 * nr + 4 * j, 4);
                    acc[i] = _mm512_dpbusd_epi32(acc[i], u, _mm512_set1_epi32(w));
                }
            }
            for (int32_t i = 0; i < hc; i++) {
                const __m512i dd = _mm512_sub_epi32(acc[i], _mm512_set1_epi32(corr[h0 + i]));
                const __m512 c = _mm512_mul_ps(_mm512_cvtepi32_ps(dd), _mm512_mul_ps(ks, _mm512_set1_ps(qs[h0 + i])));
                const __m512 sh = _mm512_maskz_loadu_ps(mk, shat + (int64_t)(h0 + i) * sh_stride + b0);
                const __m512 f = _mm512_maskz_compress_ps(mk, _mm512_add_ps(sh, c)); // the block's lanes to the front
                _mm512_mask_storeu_ps(raw + (int64_t)(h0 + i) * stride + out, st, f);
            }
        }
    }
}
#endif
