// sparse_score_avx512.c - the key scan of sparse_score.c (dot_blocks) for AVX-512 VNNI CPUs (Makefile flags for
// *_avx512.c; called only when kvt_kernels_isa() is KVT_ISA_AVX512), on the int8 and the 4-bit key copies. Both are
// stored in blocks of 16 positions with 4 dimensions of 16 keys per 64-byte operand (kvt_sparse_k8_at; the 4-bit layout,
// kvt_sparse_k4_at, packs two such operands in the low and high nibbles of one 64-byte row), so one VPDPBUSD multiplies
// 4 dimensions of 16 keys with 4 broadcast query bytes and sums them into 16 int32 lanes: 16 dot products at once, no
// horizontal sums.
//
// VPDPBUSD multiplies unsigned by signed bytes, so each int16 query element is split as q = 256 qh + ql (ql in
// [0, 255] unsigned, qh in [-128, 127] signed): q . k = 256 (qh . k) + ql . k. int8 keys: ql . k is VPDPBUSD(ql, k) and
// qh . k = VPDPBUSD(k + 128, qh) - 128 sum(qh) (k + 128 = k XOR 0x80 as unsigned). 4-bit keys, stored as u = k + 8 in
// [0, 15] (a valid signed and unsigned byte): ql . u = VPDPBUSD(ql, u), qh . u = VPDPBUSD(u, qh), and q . k = 256 (qh . u)
// + ql . u - 8 sum(q). Every sum is exact in int32 (the total is below 2^31 for |q| <= 32767, |k| <= 127 or u <= 15,
// hd <= 512, and wrap-around cancels in the intermediate ones), so the scores are the same bits as the portable loop's:
// raw[i * stride + t - t0] = (float)(q16_i . v_t) * (ks[t] * qs[i]).
//
// An int8 query (every element of a pass's query heads in [-127, 127]: --sparse-rerank-qbits 8 quantizes the re-rank's
// real query so) needs no split: q . k = VPDPBUSD(k + 128, q) - 128 sum(q), one VPDPBUSD per 4 dimensions and head
// instead of two; the same exact integer, so the same bits as the split form and the portable loop give for that query.
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "sparse_impl.h"

enum { HC = 6 }; // query heads per pass: 2 HC accumulators, the key operands stay in registers

// The products of 4 dimensions (group g) of the 16 keys with hc query heads: al += ql . a, ah += b . qh (a, b: the
// group's keys as the signed and the unsigned operand).
// q8 (an int8 query, held in qh): ah += b . q only.
static inline __attribute__((always_inline)) void group_heads(int32_t q8, int32_t hc, int32_t hd, __m512i *al, __m512i *ah,
                                                              const uint8_t *ql, const int8_t *qh, int32_t g, __m512i a,
                                                              __m512i b) {
#pragma GCC unroll 8
    for (int32_t i = 0; i < hc; i++) {
        int32_t lw, hw;
        memcpy(&hw, qh + (int64_t)i * hd + 4 * g, 4);
        if (!q8) {
            memcpy(&lw, ql + (int64_t)i * hd + 4 * g, 4);
            al[i] = _mm512_dpbusd_epi32(al[i], _mm512_set1_epi32(lw), a);
        }
        ah[i] = _mm512_dpbusd_epi32(ah[i], b, _mm512_set1_epi32(hw));
    }
}

// The exact q . k of the accumulators: the split form 256 (ah - corr) + al, the int8 query's ah - corr.
static inline __attribute__((always_inline)) __m512i dot_of(int32_t q8, __m512i al, __m512i ah, int32_t corr) {
    const __m512i h = _mm512_sub_epi32(ah, _mm512_set1_epi32(corr));
    return q8 ? h : _mm512_add_epi32(_mm512_slli_epi32(h, 8), al);
}

// The lanes of the range in f, moved to the front, stored from the range's first position on.
static inline __attribute__((always_inline)) void store_lanes(__m512 f, __mmask16 m, float *raw) {
    if (m == 0xffff) _mm512_storeu_ps(raw, f); // a whole block (most of a re-rank's candidates): no compress
    else _mm512_mask_storeu_ps(raw, (__mmask16)((1u << __builtin_popcount(m)) - 1u), _mm512_maskz_compress_ps(m, f));
}

// One block of 16 positions of int8 copies (blk, scales ks of its lanes), hc query heads (split rows ql, qh of hd bytes
// each; corr[2 i] = 128 sum(qh_i); q8: the int8 query in qh, corr[2 i] = 128 sum(q_i)); lanes [j0, j1) of the block are
// stored at raw[i * stride + j - j0] (the first lane of the range to the pointer given).
static inline __attribute__((always_inline)) void block_heads8(int32_t q8, int32_t hc, int32_t hd, const uint8_t *blk, const uint8_t *ql,
                                                               const int8_t *qh, const int32_t *corr, const float *qs,
                                                               __m512 ks, __mmask16 m, int64_t stride, float *raw) {
    // the head loops unrolled (hc is a constant in each copy) so that the 2 hc accumulators live in registers: rolled
    // (GCC's -O2 for hc = 3) they went through the stack, a store and a reload on every VPDPBUSD's dependency chain
    __m512i al[HC], ah[HC];
#pragma GCC unroll 8
    for (int32_t i = 0; i < hc; i++) al[i] = ah[i] = _mm512_setzero_si512();
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    for (int32_t g = 0; g < hd / 4; g++) {
        const __m512i kv = _mm512_loadu_si512(blk + 64 * g);
        group_heads(q8, hc, hd, al, ah, ql, qh, g, kv, _mm512_xor_si512(kv, x80));
    }
#pragma GCC unroll 8
    for (int32_t i = 0; i < hc; i++) {
        const __m512i d = dot_of(q8, al[i], ah[i], corr[2 * i]);
        store_lanes(_mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ks, _mm512_set1_ps(qs[i]))), m, raw + i * stride);
    }
}

// Two blocks of int8 copies at once (blk[0], blk[1]; scales ks[j], lanes m[j], stored at raw[j] + i * stride), hc <= 4
// query heads: each group's broadcast query bytes serve both blocks (half the broadcasts per block), and 4 hc
// independent VPDPBUSD chains instead of 2 hc. Each lane's integer sums and float operations are block_heads8's: the
// same bits.
static inline __attribute__((always_inline)) void block_pair8(int32_t q8, int32_t hc, int32_t hd, const uint8_t *const *blk,
                                                              const uint8_t *ql, const int8_t *qh, const int32_t *corr,
                                                              const float *qs, const __m512 *ks, const __mmask16 *m,
                                                              int64_t stride, float *const *raw) {
    __m512i al[2][4], ah[2][4];
#pragma GCC unroll 4
    for (int32_t i = 0; i < hc; i++) al[0][i] = ah[0][i] = al[1][i] = ah[1][i] = _mm512_setzero_si512();
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 16
    for (int32_t g = 0; g < hd / 4; g++) {
        const __m512i k0 = _mm512_loadu_si512(blk[0] + 64 * g), k1 = _mm512_loadu_si512(blk[1] + 64 * g);
        const __m512i u0 = _mm512_xor_si512(k0, x80), u1 = _mm512_xor_si512(k1, x80);
#pragma GCC unroll 4
        for (int32_t i = 0; i < hc; i++) {
            int32_t lw, hw;
            memcpy(&hw, qh + (int64_t)i * hd + 4 * g, 4);
            const __m512i h = _mm512_set1_epi32(hw);
            if (!q8) {
                memcpy(&lw, ql + (int64_t)i * hd + 4 * g, 4);
                const __m512i l = _mm512_set1_epi32(lw);
                al[0][i] = _mm512_dpbusd_epi32(al[0][i], l, k0);
                al[1][i] = _mm512_dpbusd_epi32(al[1][i], l, k1);
            }
            ah[0][i] = _mm512_dpbusd_epi32(ah[0][i], u0, h);
            ah[1][i] = _mm512_dpbusd_epi32(ah[1][i], u1, h);
        }
    }
#pragma GCC unroll 2
    for (int32_t j = 0; j < 2; j++) {
#pragma GCC unroll 4
        for (int32_t i = 0; i < hc; i++) {
            const __m512i d = dot_of(q8, al[j][i], ah[j][i], corr[2 * i]);
            store_lanes(_mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ks[j], _mm512_set1_ps(qs[i]))), m[j],
                        raw[j] + i * stride);
        }
    }
}

// The same for 4-bit copies (ks16: the block's f16 group scales, kvt_sparse_k4s_at), one scale group after the other (ng
// of them, gr rows each; one group: the whole row, a last half row when hd % 8): per group, corr[(i * ng + g) * 2] =
// 8 sum(qh_i) and [.. + 1] = 8 sum(ql_i) over its dimensions; the groups' float terms added in order.
static inline __attribute__((always_inline)) void block_heads4(int32_t hc, int32_t hd, int32_t ng, const uint8_t *blk,
                                                               const uint16_t *ks16, const uint8_t *ql, const int8_t *qh,
                                                               const int32_t *corr, const float *qs, __mmask16 m,
                                                               int64_t stride, float *raw) {
    __m512i al[HC], ah[HC];
    __m512 acc[HC];
#pragma GCC unroll 8
    for (int32_t i = 0; i < hc; i++) acc[i] = _mm512_setzero_ps(); // replaced by group 0's terms (ng >= 1)
    const __m512i m4 = _mm512_set1_epi8(15);
    const int32_t gr = ng > 1 ? hd / ng / 8 : hd / 8;
    for (int32_t g = 0; g < ng; g++) {
#pragma GCC unroll 8
        for (int32_t i = 0; i < hc; i++) al[i] = ah[i] = _mm512_setzero_si512();
        for (int32_t r = g * gr; r < (g + 1) * gr; r++) {
            const __m512i v = _mm512_loadu_si512(blk + 64 * r);
            const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            group_heads(0, hc, hd, al, ah, ql, qh, 2 * r, lo, lo);
            group_heads(0, hc, hd, al, ah, ql, qh, 2 * r + 1, hi, hi);
        }
        if (ng == 1 && hd % 8) { // a last half row: its low nibbles only
            const __m512i lo = _mm512_and_si512(_mm512_loadu_si512(blk + 64 * (hd / 8)), m4);
            group_heads(0, hc, hd, al, ah, ql, qh, hd / 4 - 1, lo, lo);
        }
        const __m512 ks = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ks16 + 16 * g)));
#pragma GCC unroll 8
        for (int32_t i = 0; i < hc; i++) {
            const int32_t *c = corr + (i * ng + g) * 2;
            const __m512i d = _mm512_sub_epi32(
                _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(ah[i], _mm512_set1_epi32(c[0])), 8), al[i]),
                _mm512_set1_epi32(c[1]));
            const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ks, _mm512_set1_ps(qs[i])));
            acc[i] = g == 0 ? f : _mm512_add_ps(acc[i], f);
        }
    }
#pragma GCC unroll 8
    for (int32_t i = 0; i < hc; i++) store_lanes(acc[i], m, raw + i * stride);
}

enum { PF_AHEAD = 64, PF_BLOCKS = 4 }; // entries of a position list between the one scored and the one whose block is requested; blocks of it (the
// pair kernel's walk)


// The int8 copies' block walk for hc query heads from h0 (q8: the int8 query; a constant in each copy): two blocks at a
// time (block_pair8) where hc <= 4, the last one alone; one at a time otherwise.
static inline __attribute__((always_inline)) void walk8(int32_t q8, int32_t hc, int32_t h0, int32_t hd, const uint8_t *ql,
                                                        const int8_t *qh, const int32_t *corr, const float *qs,
                                                        const kvt_sparse_keys k, int64_t t0, int64_t n_keys,
                                                        const int32_t *pos, int64_t stride, float *raw) {
    const uint8_t *kc = k.kc, *ksb = k.ks;
    const int64_t bb = 16 * kvt_sparse_key_row_bytes(8, hd), sb = 16 * kvt_sparse_key_scale_bytes(8, hd);
    kvt_sparse_blocks it = kvt_sparse_blocks_of(pos, t0, n_keys);
    int64_t b0, out;
    uint32_t bits_m;
    if (hc <= 4) {
        const uint8_t *blk2[2];
        __m512 ks2[2];
        __mmask16 m2[2];
        float *r2[2];
        int32_t nb = 0;
        // a list's blocks requested PF_BLOCKS blocks ahead of the one scored, by a second walk of the list
        kvt_sparse_blocks pf = kvt_sparse_blocks_of(pos, t0, n_keys);
        int64_t pb, po;
        uint32_t pm;
        for (int32_t j = 0; pos && j < PF_BLOCKS && kvt_sparse_blocks_next(&pf, &pb, &pm, &po); j++) {
            kvt_sparse_block_prefetch(kc, bb, ksb, sb, (int64_t)pb >> 4);
        }
        while (kvt_sparse_blocks_next(&it, &b0, &bits_m, &out)) {
            if (pos && kvt_sparse_blocks_next(&pf, &pb, &pm, &po)) kvt_sparse_block_prefetch(kc, bb, ksb, sb, (int64_t)pb >> 4);
            if (!pos) kvt_sparse_range_prefetch(kc, bb, ksb, sb, b0);
            blk2[nb] = kc + b0 / 16 * bb;
            m2[nb] = (__mmask16)bits_m;
            ks2[nb] = _mm512_maskz_loadu_ps(m2[nb], (const float *)k.ks + b0);
            r2[nb] = raw + (int64_t)h0 * stride + out;
            if (++nb < 2) continue;
            nb = 0;
            switch (hd == 64 ? hc : hc + 4) { // head_dim 64 (SmolLM2, TinyLlama) a constant: the group loop unrolled
            case 1: block_pair8(q8, 1, 64, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            case 2: block_pair8(q8, 2, 64, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            case 3: block_pair8(q8, 3, 64, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            case 4: block_pair8(q8, 4, 64, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            case 5: block_pair8(q8, 1, hd, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            case 6: block_pair8(q8, 2, hd, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            case 7: block_pair8(q8, 3, hd, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            default: block_pair8(q8, 4, hd, blk2, ql, qh, corr, qs + h0, ks2, m2, stride, r2); break;
            }
        }
        if (nb == 1) {
            switch (hc) {
            case 1: block_heads8(q8, 1, hd, blk2[0], ql, qh, corr, qs + h0, ks2[0], m2[0], stride, r2[0]); break;
            case 2: block_heads8(q8, 2, hd, blk2[0], ql, qh, corr, qs + h0, ks2[0], m2[0], stride, r2[0]); break;
            case 3: block_heads8(q8, 3, hd, blk2[0], ql, qh, corr, qs + h0, ks2[0], m2[0], stride, r2[0]); break;
            default: block_heads8(q8, 4, hd, blk2[0], ql, qh, corr, qs + h0, ks2[0], m2[0], stride, r2[0]); break;
            }
        }
        return;
    }
    while (kvt_sparse_blocks_next(&it, &b0, &bits_m, &out)) {
        if (pos && it.x + PF_AHEAD < n_keys) kvt_sparse_block_prefetch(kc, bb, ksb, sb, (int64_t)pos[it.x + PF_AHEAD] >> 4);
        if (!pos) kvt_sparse_range_prefetch(kc, bb, ksb, sb, b0);
        const __mmask16 m = (__mmask16)bits_m;
        const __m512 ks = _mm512_maskz_loadu_ps(m, (const float *)k.ks + b0);
        const uint8_t *blk = kc + b0 / 16 * bb;
        float *r = raw + (int64_t)h0 * stride + out;
        if (hc == 5) block_heads8(q8, 5, hd, blk, ql, qh, corr, qs + h0, ks, m, stride, r);
        else block_heads8(q8, HC, hd, blk, ql, qh, corr, qs + h0, ks, m, stride, r);
    }
}

// The block loop for copies of `bits` (a constant in each copy: the block's loads and the accumulators in registers).
static inline __attribute__((always_inline)) void scan(int32_t bits, const int16_t *q16, const float *qs, int32_t qpg,
                                                       int32_t hd, const kvt_sparse_keys k, int64_t t0, int64_t n_keys,
                                                       const int32_t *pos, int64_t stride, float *raw) {
    uint8_t ql[HC * KVT_SPARSE_MAX_HD];
    int8_t qh[HC * KVT_SPARSE_MAX_HD];
    int32_t corr[2 * HC * (KVT_SPARSE_MAX_HD / 32)];
    const uint8_t *kc = k.kc, *ksb = k.ks;
    const int32_t ng = bits == 4 ? kvt_sparse_k4_groups(hd) : 1, gw = hd / ng;
    // bytes of a block's keys and of its scales
    const int64_t bb = 16 * kvt_sparse_key_row_bytes(bits, hd), sb = 16 * kvt_sparse_key_scale_bytes(bits, hd);
    for (int32_t h0 = 0; h0 < qpg; h0 += HC) {
        const int32_t hc = qpg - h0 < HC ? qpg - h0 : HC;
        // int8 copies and every element of these heads in [-127, 127]: the int8 query, unsplit, in qh
        bool q8 = bits == 8;
        for (int64_t x = (int64_t)h0 * hd; q8 && x < (int64_t)(h0 + hc) * hd; x++) q8 = q16[x] >= -127 && q16[x] <= 127;
        for (int32_t i = 0; i < hc; i++) {
            for (int32_t g = 0; g < ng; g++) { // per scale group (int8: one, the row)
                int32_t sh = 0, sl = 0;
                for (int32_t x = g * gw; x < (g + 1) * gw; x++) {
                    const int32_t v = q16[(int64_t)(h0 + i) * hd + x];
                    ql[i * hd + x] = q8 ? 0 : (uint8_t)(v & 0xff);
                    qh[i * hd + x] = q8 ? (int8_t)v : (int8_t)(v >> 8); // arithmetic shift: floor(v / 256)
                    sh += qh[i * hd + x];
                    sl += ql[i * hd + x];
                }
                corr[(i * ng + g) * 2] = bits == 4 ? 8 * sh : 128 * sh;
                corr[(i * ng + g) * 2 + 1] = bits == 4 ? 8 * sl : 0;
            }
        }
        // a list's blocks come from memory (scattered): each block's lines are requested PF_AHEAD entries (about
        // PF_AHEAD / 16 blocks of whole pages) before it is scored, so that their latency overlaps the blocks before it
        for (int64_t y = 0; pos && y < n_keys && y <= PF_AHEAD; y += 16) kvt_sparse_block_prefetch(kc, bb, ksb, sb, (int64_t)pos[y] >> 4);
        if (bits == 8) {
            if (q8) walk8(1, hc, h0, hd, ql, qh, corr, qs, k, t0, n_keys, pos, stride, raw);
            else walk8(0, hc, h0, hd, ql, qh, corr, qs, k, t0, n_keys, pos, stride, raw);
            continue;
        }
        // block by block: the range's positions in it, or the list's (sorted: a run of entries in one block)
        kvt_sparse_blocks it = kvt_sparse_blocks_of(pos, t0, n_keys);
        int64_t b0, out;
        uint32_t bits_m;
        while (kvt_sparse_blocks_next(&it, &b0, &bits_m, &out)) {
            if (pos && it.x + PF_AHEAD < n_keys) kvt_sparse_block_prefetch(kc, bb, ksb, sb, (int64_t)pos[it.x + PF_AHEAD] >> 4);
            if (!pos) kvt_sparse_range_prefetch(kc, bb, ksb, sb, b0);
            const __mmask16 m = (__mmask16)bits_m;
            const uint8_t *blk = kc + b0 / 16 * bb;
            float *r = raw + (int64_t)h0 * stride + out;
            const uint16_t *ks16 = (const uint16_t *)k.ks + b0 * ng;
            switch (hc) { // the head count a constant in each copy: the accumulators stay in registers
            case 1: block_heads4(1, hd, ng, blk, ks16, ql, qh, corr, qs + h0, m, stride, r); break;
            case 2: block_heads4(2, hd, ng, blk, ks16, ql, qh, corr, qs + h0, m, stride, r); break;
            case 3: block_heads4(3, hd, ng, blk, ks16, ql, qh, corr, qs + h0, m, stride, r); break;
            case 4: block_heads4(4, hd, ng, blk, ks16, ql, qh, corr, qs + h0, m, stride, r); break;
            case 5: block_heads4(5, hd, ng, blk, ks16, ql, qh, corr, qs + h0, m, stride, r); break;
            default: block_heads4(HC, hd, ng, blk, ks16, ql, qh, corr, qs + h0, m, stride, r); break;
            }
        }
    }
}

void kvt_sparse_dot_blocks_avx512(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                  int64_t t0, int64_t n_keys, const int32_t *pos, int64_t stride, float *raw) {
    if (k.bits == 4) scan(4, q16, qs, qpg, hd, k, t0, n_keys, pos, stride, raw);
    else scan(8, q16, qs, qpg, hd, k, t0, n_keys, pos, stride, raw);
}
#endif
