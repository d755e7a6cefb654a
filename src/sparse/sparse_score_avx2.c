// sparse_score_avx2.c - the key scans of sparse_score.c (dot_blocks) for AVX2 CPUs (Makefile flags for *_avx2.c; called
// when kvt_kernels_isa() is KVT_ISA_AVX2): the 4-bit copies, and below the int8 copies against an int8 and an int16 query.
// The 4-bit copies: the layout is kvt_sparse_k4_at's: a 64-byte
// row of a 16-position block holds two groups of 4 dimensions (low and high nibbles), each as 16 positions x 4 bytes, so
// a 32-byte half row is 8 positions x 4 dimensions.
//
// Each int16 query element is split as q = 256 qh + ql (ql in [0, 255] unsigned, qh in [-128, 127] signed) and the keys
// are the stored nibbles u = k + 8 in [0, 15] (a valid signed and unsigned byte): VPMADDUBSW(ql, u) and VPMADDUBSW(u, qh)
// sum two byte products into int16 lanes (at most 2 * 255 * 15 = 7650 and 2 * 15 * 128 = 3840: never saturated),
// VPMADDWD with 1 and 256 the pairs into int32: q . u per position; q . k = q . u - 8 sum(q). Every sum is exact in int32
// (as the portable loop's), so the scores are the same bits (per scale group (float)(sum - 8 sum(q)) * (scale * qs[i]),
// the groups' terms added in order).
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../kernels/f16.h"
#include "sparse_impl.h"

enum { HC = 3 }; // query heads per pass: 2 accumulators each (the block's two halves), the half rows in registers

// One block of 16 positions (blk, its f16 group scales ks16: kvt_sparse_k4s_at), hc query heads (split rows ql, qh of hd
// bytes each; corr[i * ng + g] = 8 sum(q_i) over group g's dimensions), one scale group after the other (ng of them;
// the 4-dimension groups [g * hd / ng / 4, (g + 1) * ...)), their terms added in order; the lanes set in `lanes` stored
// in order from raw[i * stride] on.
static inline __attribute__((always_inline)) void block_heads(int32_t hc, int32_t hd, int32_t ng, const uint8_t *blk,
                                                              const uint16_t *ks16, const uint8_t *ql, const int8_t *qh,
                                                              const int32_t *corr, const float *qs, uint32_t lanes,
                                                              int64_t stride, float *raw) {
    __m256i acc[HC][2];
    float f[HC][16];
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    const int32_t gq = hd / ng / 4; // 4-dimension groups per scale group
    for (int32_t sg = 0; sg < ng; sg++) {
#pragma GCC unroll 4
        for (int32_t i = 0; i < hc; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
        for (int32_t g = sg * gq; g < (sg + 1) * gq; g++) { // group g: nibble g & 1 of row g / 2
            const uint8_t *row = blk + 64 * (g >> 1);
            __m256i u[2];
            for (int32_t h = 0; h < 2; h++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(row + 32 * h));
                u[h] = _mm256_and_si256(g & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
            }
#pragma GCC unroll 4
            for (int32_t i = 0; i < hc; i++) {
                int32_t lw, hw;
                memcpy(&lw, ql + (int64_t)i * hd + 4 * g, 4);
                memcpy(&hw, qh + (int64_t)i * hd + 4 * g, 4);
                const __m256i bl = _mm256_set1_epi32(lw), bh = _mm256_set1_epi32(hw);
                for (int32_t h = 0; h < 2; h++) {
                    const __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(bl, u[h]), one);
                    const __m256i hi = _mm256_madd_epi16(_mm256_maddubs_epi16(u[h], bh), c256);
                    acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_add_epi32(lo, hi));
                }
            }
        }
#pragma GCC unroll 4
        for (int32_t i = 0; i < hc; i++) {
            int32_t d[16];
            _mm256_storeu_si256((__m256i *)d, acc[i][0]);
            _mm256_storeu_si256((__m256i *)(d + 8), acc[i][1]);
            for (int32_t j = 0; j < 16; j++) {
                if (!(lanes >> j & 1)) continue;
                const float term = (float)(d[j] - corr[i * ng + sg]) * (kvt_f16_to_f32(ks16[16 * sg + j]) * qs[i]);
                f[i][j] = sg == 0 ? term : f[i][j] + term;
            }
        }
    }
#pragma GCC unroll 4
    for (int32_t i = 0; i < hc; i++) {
        int64_t o = 0;
        for (int32_t j = 0; j < 16; j++) {
            if (lanes >> j & 1) raw[i * stride + o++] = f[i][j];
        }
    }
}

void kvt_sparse_dot_blocks4_avx2(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                 int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw) {
    uint8_t ql[HC * KVT_SPARSE_MAX_HD];
    int8_t qh[HC * KVT_SPARSE_MAX_HD];
    int32_t corr[HC * (KVT_SPARSE_MAX_HD / 32)];
    const uint8_t *kc = k.kc;
    const int32_t ng = kvt_sparse_k4_groups(hd), gw = hd / ng;
    const int64_t bb = 16 * kvt_sparse_k4_row(hd); // bytes of a block
    for (int32_t h0 = 0; h0 < qpg; h0 += HC) {
        const int32_t hc = qpg - h0 < HC ? qpg - h0 : HC;
        for (int32_t i = 0; i < hc; i++) {
            for (int32_t g = 0; g < ng; g++) {
                int32_t sum = 0;
                for (int32_t x = g * gw; x < (g + 1) * gw; x++) {
                    const int32_t v = q16[(int64_t)(h0 + i) * hd + x];
                    ql[i * hd + x] = (uint8_t)(v & 0xff);
                    qh[i * hd + x] = (int8_t)(v >> 8); // arithmetic shift: floor(v / 256)
                    sum += v;
                }
                corr[i * ng + g] = 8 * sum;
            }
        }
        kvt_sparse_blocks it = kvt_sparse_blocks_of(pos, t0, n_keys);
        int64_t b0, out;
        uint32_t lanes;
        while (kvt_sparse_blocks_next(&it, &b0, &lanes, &out)) {
            if (!pos) kvt_sparse_range_prefetch(kc, bb, k.ks, 16 * kvt_sparse_key_scale_bytes(4, hd), b0);
            const uint8_t *blk = kc + b0 / 16 * bb;
            float *r = raw + (int64_t)h0 * stride + out;
            const uint16_t *ks16 = (const uint16_t *)k.ks + b0 * ng;
            switch (hc) { // the head count a constant in each copy: the accumulators stay in registers
            case 1: block_heads(1, hd, ng, blk, ks16, ql, qh, corr, qs + h0, lanes, stride, r); break;
            case 2: block_heads(2, hd, ng, blk, ks16, ql, qh, corr, qs + h0, lanes, stride, r); break;
            default: block_heads(HC, hd, ng, blk, ks16, ql, qh, corr, qs + h0, lanes, stride, r); break;
            }
        }
    }
}

// The int8 copies (kvt_sparse_k8_at: a 64-byte row of a 16-position block holds 4 dimensions of its 16 keys, a 32-byte
// half 8 positions) against an int8 query (every element in [-127, 127]: --sparse-rerank-qbits 8). VPMADDUBSW takes
// |k| (unsigned, <= 127) and q with k's sign (sign(q, k), in [-127, 127]): two products per int16 lane, at most
// 2 * 127 * 127 = 32258, never saturated; VPMADDWD with 1 sums the pairs into int32: q . k per position, exact, so the
// same bits as the portable loop ((float)(q . k) * (ks[t] * qs[i])).
// The int8 scans of a list (pos set; nothing for a range): its blocks are requested 64 entries (about 4 blocks of whole
// pages) before they are scored: the first line of each of the first 64 entries' blocks before the loop, then, at entry
// x, the whole block of entry x + 64 (kc: the copies, bb bytes a block).
static inline __attribute__((always_inline)) void list_prefetch_first(const uint8_t *kc, int64_t bb, const int32_t *pos,
                                                                      int64_t n_keys) {
    for (int64_t y = 0; pos && y < n_keys && y <= 64; y += 16) _mm_prefetch((const char *)(kc + (pos[y] >> 4) * bb), _MM_HINT_T0);
}
static inline __attribute__((always_inline)) void list_prefetch_ahead(const uint8_t *kc, int64_t bb, const int32_t *pos,
                                                                      int64_t n_keys, int64_t x) {
    if (pos && x + 64 < n_keys) kvt_sparse_block_prefetch(kc, bb, kc, 0, pos[x + 64] >> 4); // (the keys, no scales)
}

enum { HC8 = 4 }; // query heads per pass: 2 accumulators each (the block's two halves)

// The exact dot products d[i][h] (positions 8h .. 8h + 7 of the block) of hc query heads as raw scores:
// (float)d * (ks[t] * qs[i]), the portable loop's operations; the lanes set in `lanes` stored in order from
// raw[i * stride] on (the other lanes' scales are not read: a list's last block may end the buffer).
static inline __attribute__((always_inline)) void store_heads(int32_t hc, __m256i d[][2], const float *ks, const float *qs,
                                                              uint32_t lanes, int64_t stride, float *raw) {
    const __m256i idx = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256 kss[2];
    for (int32_t h = 0; h < 2; h++) {
        const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int32_t)(lanes >> 8 * h)), idx), idx);
        kss[h] = _mm256_maskload_ps(ks + 8 * h, on);
    }
#pragma GCC unroll 4
    for (int32_t i = 0; i < hc; i++) {
        float f[16];
        for (int32_t h = 0; h < 2; h++) {
            const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(d[i][h]), _mm256_mul_ps(kss[h], _mm256_set1_ps(qs[i])));
            _mm256_storeu_ps(f + 8 * h, v);
        }
        kvt_sparse_store_lanes(raw + i * stride, f, lanes);
    }
}

static inline __attribute__((always_inline)) void block_heads8q(int32_t hc, int32_t hd, const uint8_t *blk, const int8_t *q8,
                                                                const float *ks, const float *qs, uint32_t lanes,
                                                                int64_t stride, float *raw) {
    __m256i acc[HC8][2];
    const __m256i one = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int32_t i = 0; i < hc; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int32_t g = 0; g < hd / 4; g++) {
        __m256i kv[2], ak[2];
        for (int32_t h = 0; h < 2; h++) {
            kv[h] = _mm256_loadu_si256((const __m256i *)(blk + 64 * g + 32 * h));
            ak[h] = _mm256_abs_epi8(kv[h]);
        }
#pragma GCC unroll 4
        for (int32_t i = 0; i < hc; i++) {
            int32_t w;
            memcpy(&w, q8 + (int64_t)i * hd + 4 * g, 4);
            const __m256i b = _mm256_set1_epi32(w);
            for (int32_t h = 0; h < 2; h++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ak[h], _mm256_sign_epi8(b, kv[h])), one);
                acc[i][h] = _mm256_add_epi32(acc[i][h], p);
            }
        }
    }
    store_heads(hc, acc, ks, qs, lanes, stride, raw);
}

void kvt_sparse_dot_blocks8q_avx2(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                  int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw) {
    int8_t q8[HC8 * KVT_SPARSE_MAX_HD];
    const uint8_t *kc = k.kc;
    const float *ks = k.ks;
    const int64_t bb = 16 * (int64_t)hd; // bytes of a block
    for (int32_t h0 = 0; h0 < qpg; h0 += HC8) {
        const int32_t hc = qpg - h0 < HC8 ? qpg - h0 : HC8;
        for (int64_t x = 0; x < (int64_t)hc * hd; x++) q8[x] = (int8_t)q16[(int64_t)h0 * hd + x];
        list_prefetch_first(kc, bb, pos, n_keys);
        kvt_sparse_blocks it = kvt_sparse_blocks_of(pos, t0, n_keys);
        int64_t b0, out;
        uint32_t lanes;
        while (kvt_sparse_blocks_next(&it, &b0, &lanes, &out)) {
            list_prefetch_ahead(kc, bb, pos, n_keys, it.x);
            if (!pos) kvt_sparse_range_prefetch(kc, bb, ks, 64, b0);
            const uint8_t *blk = kc + b0 / 16 * bb;
            float *r = raw + (int64_t)h0 * stride + out;
            switch (hc) { // the head count a constant in each copy: the accumulators stay in registers
            case 1: block_heads8q(1, hd, blk, q8, ks + b0, qs + h0, lanes, stride, r); break;
            case 2: block_heads8q(2, hd, blk, q8, ks + b0, qs + h0, lanes, stride, r); break;
            case 3: block_heads8q(3, hd, blk, q8, ks + b0, qs + h0, lanes, stride, r); break;
            default: block_heads8q(HC8, hd, blk, q8, ks + b0, qs + h0, lanes, stride, r); break;
            }
        }
    }
}

// The int8 copies against an int16 query (any element in [-32767, 32767]: the worker's scan with the predicted query, the
// re-rank with --sparse-rerank-qbits 16). VPMADDUBSW's byte products would saturate, so the keys are widened to int16
// (VPMOVSXBW: 16 bytes = 4 positions x 4 dimensions) and VPMADDWD multiplies them with the query's 4 dimensions
// broadcast: per position two int32 partial sums (dimensions 0-1 and 2-3 of each group), added over the groups; at the
// end VPHADDD adds each position's two partials. Every sum is exact in int32 (|q . k| <= 32767 * 127 * hd < 2^31 for
// hd <= 512), so the dot products are the portable loop's integers, and the scores its bits.
enum { HC16 = 3 }; // query heads per pass: 4 accumulators each (4 positions x 2 partials per accumulator)

static inline __attribute__((always_inline)) void block_heads16q(int32_t hc, int32_t hd, const uint8_t *blk, const int16_t *q16,
                                                                 const float *ks, const float *qs, uint32_t lanes,
                                                                 int64_t stride, float *raw) {
    __m256i acc[HC16][4];
#pragma GCC unroll 4
    for (int32_t i = 0; i < hc; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_si256();
    for (int32_t g = 0; g < hd / 4; g++) {
        const uint8_t *row = blk + 64 * g;
        __m256i qb[HC16];
#pragma GCC unroll 4
        for (int32_t i = 0; i < hc; i++) {
            int64_t w;
            memcpy(&w, q16 + (int64_t)i * hd + 4 * g, 8);
            qb[i] = _mm256_set1_epi64x(w);
        }
#pragma GCC unroll 4
        for (int32_t p = 0; p < 4; p++) { // positions 4p .. 4p + 3
            const __m256i k = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + 16 * p)));
#pragma GCC unroll 4
            for (int32_t i = 0; i < hc; i++) acc[i][p] = _mm256_add_epi32(acc[i][p], _mm256_madd_epi16(k, qb[i]));
        }
    }
    __m256i d[HC16][2];
#pragma GCC unroll 4
    for (int32_t i = 0; i < hc; i++) {
        for (int32_t h = 0; h < 2; h++) { // VPHADDD per 128-bit lane: positions 0 1 4 5 | 2 3 6 7 (of 8h ..), then in order
            const __m256i s = _mm256_hadd_epi32(acc[i][2 * h], acc[i][2 * h + 1]);
            d[i][h] = _mm256_permute4x64_epi64(s, 0xD8);
        }
    }
    store_heads(hc, d, ks, qs, lanes, stride, raw);
}

void kvt_sparse_dot_blocks8_avx2(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                 int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw) {
    const uint8_t *kc = k.kc;
    const float *ks = k.ks;
    const int64_t bb = 16 * (int64_t)hd; // bytes of a block
    for (int32_t h0 = 0; h0 < qpg; h0 += HC16) {
        const int32_t hc = qpg - h0 < HC16 ? qpg - h0 : HC16;
        const int16_t *qh = q16 + (int64_t)h0 * hd;
        list_prefetch_first(kc, bb, pos, n_keys);
        kvt_sparse_blocks it = kvt_sparse_blocks_of(pos, t0, n_keys);
        int64_t b0, out;
        uint32_t lanes;
        while (kvt_sparse_blocks_next(&it, &b0, &lanes, &out)) {
            list_prefetch_ahead(kc, bb, pos, n_keys, it.x);
            if (!pos) kvt_sparse_range_prefetch(kc, bb, ks, 64, b0);
            const uint8_t *blk = kc + b0 / 16 * bb;
            float *r = raw + (int64_t)h0 * stride + out;
            switch (hc) { // the head count a constant in each copy: the accumulators stay in registers
            case 1: block_heads16q(1, hd, blk, qh, ks + b0, qs + h0, lanes, stride, r); break;
            case 2: block_heads16q(2, hd, blk, qh, ks + b0, qs + h0, lanes, stride, r); break;
            default: block_heads16q(HC16, hd, blk, qh, ks + b0, qs + h0, lanes, stride, r); break;
            }
        }
    }
}

// The softmax's exponentials (sparse_score.c's exp_sum / exp_sum_to: e[t] = exp_neg(s[t] - mx), their sum in 16 partial
// sums, lane j taking the terms t = j mod 16 in order, then the 16 added in order): GCC leaves the portable loop scalar
// in its AVX2 clone (the selects of exp_neg are not if-converted), so it is written out here with the same float
// operations in the same order, each rounded alone (no FMA): the same bits. e may be s (in place).
static inline __attribute__((always_inline)) __m256 exp_neg8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f), shift = _mm256_set1_ps(12582912.0f);
    const __m256 in = _mm256_cmp_ps(x, lo, _CMP_GT_OQ); // x > -87 (false for NaN)
    const __m256 xc = _mm256_blendv_ps(lo, x, in);
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), shift);
    const __m256 nf = _mm256_sub_ps(t, shift);
    const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000));
    const __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(nf, _mm256_set1_ps(0.693359375f))),
                                   _mm256_mul_ps(nf, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    const __m256 two_n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(p, two_n), in); // 0 where x <= -87, -inf or NaN
}

float kvt_sparse_exp_sum_avx2(const float *s, float *e, int64_t n, float mx) {
    const __m256 m = _mm256_set1_ps(mx);
    __m256 part0 = _mm256_setzero_ps(), part1 = _mm256_setzero_ps(); // lanes 0-7 and 8-15
    const int64_t nv = n / 16 * 16;
    for (int64_t t = 0; t < nv; t += 16) {
        const __m256 e0 = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(s + t), m));
        const __m256 e1 = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(s + t + 8), m));
        _mm256_storeu_ps(e + t, e0);
        _mm256_storeu_ps(e + t + 8, e1);
        part0 = _mm256_add_ps(part0, e0);
        part1 = _mm256_add_ps(part1, e1);
    }
    float part[16], tail[16] = {0};
    _mm256_storeu_ps(part, part0);
    _mm256_storeu_ps(part + 8, part1);
    if (nv < n) { // the last n - nv terms, lane t - nv each (a whole vector of them, the rest's lanes not stored)
        float x[16];
        for (int64_t t = nv; t < n; t++) x[t - nv] = s[t];
        for (int64_t t = n - nv; t < 16; t++) x[t] = -INFINITY;
        _mm256_storeu_ps(tail, exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(x), m)));
        _mm256_storeu_ps(tail + 8, exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(x + 8), m)));
        for (int64_t t = nv; t < n; t++) part[t - nv] += (e[t] = tail[t - nv]);
    }
    float sum = 0.0f;
    for (int32_t j = 0; j < 16; j++) sum += part[j];
    return sum;
}

// The re-rank's piece sums (sparse_score.c's kvt_sparse_piece_sums16: m[j] = 0 + a[j B] + ... + a[j B + B - 1], each sum
// serial in order from 0) for B a multiple of 8: GCC leaves the portable loop scalar in its AVX2 clone (its pieces are B
// floats apart), so here each 8 x 8 tile of pieces 8h .. 8h + 7 and values t0 .. t0 + 7 is transposed in registers
// (VUNPCKLPS/HPS, VSHUFPS, VPERM2F128) and piece 8h + j's values added to lane j in order: the same additions, so the same
// bits.
static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
#pragma GCC unroll 8
    for (int32_t i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);     // r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5]
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]); // r0[2] r1[2] r0[3] r1[3] | r0[6] r1[6] r0[7] r1[7]
    }
#pragma GCC unroll 8
    for (int32_t i = 0; i < 2; i++) { // rows 4i .. 4i + 3: u[4i + c] holds values c and c + 4 of those rows
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
#pragma GCC unroll 8
    for (int32_t c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);     // value c of rows 0 .. 7
        r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31); // value c + 4
    }
}

// The 16 pieces' sums into m; from0: from 0 (0 + a[j B] + ...), else from the first value (a[j B] + a[j B + 1] + ..., the
// page sums' order).
static inline __attribute__((always_inline)) void sums16(const float *a, int32_t B, bool from0, float *m) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int32_t t0 = 0; t0 < B; t0 += 8) {
#pragma GCC unroll 8
        for (int32_t h = 0; h < 2; h++) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int32_t j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(a + (int64_t)(8 * h + j) * B + t0);
            transpose8(r);
            acc[h] = t0 == 0 && !from0 ? r[0] : _mm256_add_ps(acc[h], r[0]);
#pragma GCC unroll 8
            for (int32_t t = 1; t < 8; t++) acc[h] = _mm256_add_ps(acc[h], r[t]);
        }
    }
    _mm256_storeu_ps(m, acc[0]);
    _mm256_storeu_ps(m + 8, acc[1]);
}

void kvt_sparse_piece_sums16_avx2(const float *a, int32_t B, float *m) { sums16(a, B, true, m); }

int64_t kvt_sparse_page_sums_avx2(float *score, int64_t n, int32_t B) {
    int64_t p0 = 0;
    for (; p0 + 16 * (int64_t)B <= n; p0 += 16 * (int64_t)B) {
        float m[16];
        sums16(score + p0, B, false, m);
        for (int32_t j = 0; j < 16; j++) {
            const __m256 v = _mm256_set1_ps(m[j]);
            for (int32_t t = 0; t < B; t += 8) _mm256_storeu_ps(score + p0 + (int64_t)j * B + t, v);
        }
    }
    return p0;
}
#endif
