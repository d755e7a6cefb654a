// q41x8.h - the decode GEMV of q4_1_x8 (q4_1 repacked at load, 8 rows interleaved: quant.h), included by
// matmul_avx2.c for both of its builds (AVX2; with KVT_SIMD_AVX512 the same 256-bit code with VPDPBUSD: on the
// Zen 4 a 512-bit operation costs two 256-bit ones, so 512-bit vectors would only add shuffles; but decode where the
// CPU prefetches (the Intel Xeon) takes the 512-bit form q41x8_groups512 below, fewer instructions a block).
//
// One activation row (q8_1) against groups of 8 rows, one row per lane. Per row the q4_1 order of matmul.h:
// its 8-lane accumulator (lane i: per block in order, acc_i = fma(dx * dy, float(exact integer dot of the
// block's elements 4i..4i+3), acc_i); 4i..4i+3 are the low nibbles of the row's qs quad i for i < 4, the high
// nibbles of quad i - 4 otherwise) is here lane r of 8 vectors a[0..7]; the min terms' scalar chain ms = fma(m,
// s, ms) is lane r of one vector; Y = (((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))) + ms, kvt_hsum8's
// order. So every output has the bits of the q4_1 kernels on the unpacked rows. Per block the 8 rows' d and m
// are one 16-byte load each, the nibbles four 32-byte loads, the activations' quads dword broadcasts: no
// gathers, no per-row horizontal sums.

// Software prefetch: kvt_kernels_prefetch() bytes ahead in the decode GEMV (per CPU: quant.h), none in batches (their
// groups are read once per token, from L1/L2 after the first).

#ifdef KVT_SIMD_AVX512
#define Q41X8_MM_FN kvt_q41x8_mm_avx512
#else
#define Q41X8_MM_FN kvt_q41x8_mm_avx2
#endif

INLINE __m256i q41x8_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Decode with prefetch reads Q41X8_NS groups at once, from Q41X8_NS parts of its range of groups: from DRAM one
// sequential stream kept too few reads in flight per core (the core's window spans few lines of one stream, and the
// prefetchers follow one stream). On the Intel Xeon (2 threads, kq_decode_bench, both ISAs) 4 streams read q4_1_x8 at
// 93-129% of the plain stream where one read 72-101%; 2 streams 84-124%, 8 no better than 4; the scales loaded a block
// ahead gave nothing (docs/log/BENCHMARKS-kernels-2.md, dec11a). Each group keeps its own accumulators and the q4_1
// order: the same bits however many streams.
#define Q41X8_NS 4

// With the prefetch into L2 above, forms 31, 32, 34 (the default) also prefetch into L1 the lines KVT_X8_PF_NEAR
// (matmul_avx2.c) bytes ahead of each stream (docs/log/BENCHMARKS-kernels-3.md, k11q); not on AMD Zen 3, where the
// default is form 4 (kvt_kernels_prefetch_l1, quant.h: the AVX2 loop 0.99-1.04x paired from DRAM without, z4q41).
#define Q41X8_NEAR(g, nd)                                                                                              \
    do {                                                                                                               \
        _mm_prefetch((const char *)(g) + (nd), _MM_HINT_T0);                                                           \
        _mm_prefetch((const char *)(g) + (nd) + 64, _MM_HINT_T0);                                                      \
        _mm_prefetch((const char *)(g) + (nd) + 128, _MM_HINT_T0);                                                     \
    } while (0)

// Y[k * ystep .. + 8) for the ns groups at G + k * step (k < ns, nb blocks each) against the q8_1 row y; the lines pf
// bytes ahead of each prefetched (0: none).
INLINE void q41x8_groups(int ns, int nd, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_1 *y, float *Y,
                         int64_t ystep, int64_t pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 a[Q41X8_NS][8], ms[Q41X8_NS];
    UNROLL for (int k = 0; k < ns; k++) {
        ms[k] = _mm256_setzero_ps();
        UNROLL for (int i = 0; i < 8; i++) a[k][i] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++, G += KVT_Q41X8_B, y++) {
        const __m256 dy = _mm256_set1_ps(_cvtsh_ss(y->d)), sy = _mm256_set1_ps(_cvtsh_ss(y->s));
        UNROLL for (int k = 0; k < ns; k++) {
            const uint8_t *g = G + k * step;
            if (pf) { // a block is 160 bytes: the 64-byte lines from pf to pf + 160 (one of them the next block's too)
                _mm_prefetch((const char *)g + pf, KVT_X8_PF_HINT);
                _mm_prefetch((const char *)g + pf + 64, KVT_X8_PF_HINT);
                _mm_prefetch((const char *)g + pf + 128, KVT_X8_PF_HINT);
                if (nd) Q41X8_NEAR(g, nd);
            }
            const __m256 D = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 128))), dy);
            ms[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 144))), sy, ms[k]);
            UNROLL for (int q = 0; q < 4; q++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(g + 32 * q));
                const __m256i pl = kvt_dot_u8s8(_mm256_and_si256(w, m4), q41x8_bcast4(y->qs + 4 * q));
                const __m256i ph = kvt_dot_u8s8(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4), q41x8_bcast4(y->qs + 16 + 4 * q));
                a[k][q] = _mm256_fmadd_ps(D, _mm256_cvtepi32_ps(pl), a[k][q]);
                a[k][q + 4] = _mm256_fmadd_ps(D, _mm256_cvtepi32_ps(ph), a[k][q + 4]);
            }
        }
    }
    UNROLL for (int k = 0; k < ns; k++) {
        const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[k][0], a[k][4]), _mm256_add_ps(a[k][2], a[k][6])),
                                       _mm256_add_ps(_mm256_add_ps(a[k][1], a[k][5]), _mm256_add_ps(a[k][3], a[k][7])));
        _mm256_storeu_ps(Y + k * ystep, _mm256_add_ps(s, ms[k]));
    }
}

INLINE void q41x8_groupso(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_1 *y, float *Y,
                          int64_t ystep, int64_t pf) {
    q41x8_groups(ns, 0, nb, G, step, y, Y, ystep, pf);
}
INLINE void q41x8_groupsn(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_1 *y, float *Y,
                          int64_t ystep, int64_t pf) {
    q41x8_groups(ns, KVT_X8_PF_NEAR, nb, G, step, y, Y, ystep, pf);
}

#ifdef KVT_SIMD_AVX512
// The same sums with 512-bit vectors: the AVX-512 decode default where decode prefetches (4 streams; study forms
// kvt_kernels_decode_variant(KVT_TYPE_Q4_1_X8) 21, 22, 24: ns 1, 2, 4 groups, 11, 12, 14 the same with hx = 0 (below);
// 4 is the 256-bit loop above in 4 streams). On the Intel Xeon the 256-bit loop is bound by its instructions near the
// DRAM rate; this one has fewer (1.125x in cache, dec11g), and in the model, alternating in one binary
// (docs/log/BENCHMARKS-kernels-2.md, small11), SmolLM2 Q4_1 (partly in L3) decoded 1.07-1.18x faster in 6-7 of 8 rounds
// and TinyLlama Q4_1 1.09x in 5 of 5. Per group 4 zmm hold the 8 accumulators in pairs, A[p] = a[2p] | a[2p + 1] (low
// nibbles of quads 2p, 2p + 1: one 64-byte load) and A[2 + p] = a[4 + 2p] | a[5 + 2p] (their high nibbles), each half
// lane r the same FMA chain as before (D = the rows' dx * dy in both halves); the activation dwords of a pair come from
// one vpermd per block for all groups. The end: (A0 + A2) + (A1 + A3) = [(a0 + a4) + (a2 + a6) | (a1 + a5) + (a3 +
// a7)], low half + high half + ms: kvt_hsum8's order, so the same bits as q41x8_groups.
// hx (a constant per caller: forms 21, 22, 24, the default; 0 for 11, 12, 14, the form before 2026-11-30 20:00 UTC):
// fewer operations a block, the same bits (docs/log/BENCHMARKS-kernels-3.md, k11q). (1) The high nibbles stay in place
// (q & 0xF0, one vpandnd instead of a shift and a mask: VPDPBUSD's dword sums are then 16 times the dots, exact), so
// A[2 + p] accumulate 16 times a[4 + 2p], a[5 + 2p]: fma(D, 16 x, 16 acc) = 16 fma(D, x, acc) exactly, since no value
// here is subnormal (every value is a multiple of 2^-48: f16 scales, integer dots) or near overflow; at the end 1/16 of
// them is added by one FMA, which rounds once, as the add of a[4 + 2p] did. (2) The activation's d and s converted by
// one vcvtph2ps of the block's first 8 bytes (before: a word insert, a conversion and a broadcast each).
INLINE void q41x8_groups512(int ns, int hx, int nd, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_1 *y,
                            float *Y, int64_t ystep, int64_t pf) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i ix[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                           _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                           _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
                           _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7)};
    __m512 a[Q41X8_NS][4];
    __m256 ms[Q41X8_NS];
    UNROLL for (int k = 0; k < ns; k++) {
        ms[k] = _mm256_setzero_ps();
        UNROLL for (int i = 0; i < 4; i++) a[k][i] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++, G += KVT_Q41X8_B, y++) {
        __m512 dy;
        __m256 sy;
        if (hx) { // d, s (and 2 bytes of qs) converted at once
            const __m128 f = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)y));
            dy = _mm512_broadcastss_ps(f);
            sy = _mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(f));
        } else {
            dy = _mm512_set1_ps(_cvtsh_ss(y->d));
            sy = _mm256_set1_ps(_cvtsh_ss(y->s));
        }
        const __m512i yq = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y->qs));
        __m512i yv[4]; // dwords (2p | 2p + 1) for p < 2: low nibbles; p >= 2: high
        UNROLL for (int i = 0; i < 4; i++) yv[i] = _mm512_permutexvar_epi32(ix[i], yq);
        UNROLL for (int k = 0; k < ns; k++) {
            const uint8_t *g = G + k * step;
            if (pf) {
                _mm_prefetch((const char *)g + pf, KVT_X8_PF_HINT);
                _mm_prefetch((const char *)g + pf + 64, KVT_X8_PF_HINT);
                _mm_prefetch((const char *)g + pf + 128, KVT_X8_PF_HINT);
                if (nd) Q41X8_NEAR(g, nd);
            }
            const __m512 D = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(g + 128)))), dy);
            ms[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 144))), sy, ms[k]);
            UNROLL for (int p = 0; p < 2; p++) {
                const __m512i w = _mm512_loadu_si512((const void *)(g + 64 * p));
                const __m512i pl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(w, m4), yv[p]);
                const __m512i wh = hx ? _mm512_andnot_si512(m4, w) : _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
                const __m512i ph = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wh, yv[2 + p]);
                a[k][p] = _mm512_fmadd_ps(D, _mm512_cvtepi32_ps(pl), a[k][p]);
                a[k][2 + p] = _mm512_fmadd_ps(D, _mm512_cvtepi32_ps(ph), a[k][2 + p]);
            }
        }
    }
    UNROLL for (int k = 0; k < ns; k++) {
        const __m512 h = _mm512_set1_ps(0.0625f); // (hx: A2, A3 hold 16 times the sums)
        const __m512 z = hx ? _mm512_add_ps(_mm512_fmadd_ps(a[k][2], h, a[k][0]), _mm512_fmadd_ps(a[k][3], h, a[k][1]))
                            : _mm512_add_ps(_mm512_add_ps(a[k][0], a[k][2]), _mm512_add_ps(a[k][1], a[k][3]));
        const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(z), _mm512_extractf32x8_ps(z, 1));
        _mm256_storeu_ps(Y + k * ystep, _mm256_add_ps(s, ms[k]));
    }
}
INLINE void q41x8_groups512o(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_1 *y, float *Y,
                             int64_t ystep, int64_t pf) {
    q41x8_groups512(ns, 0, 0, nb, G, step, y, Y, ystep, pf);
}
INLINE void q41x8_groups512h(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_1 *y, float *Y,
                             int64_t ystep, int64_t pf) {
    q41x8_groups512(ns, 1, 0, nb, G, step, y, Y, ystep, pf);
}
INLINE void q41x8_groups512n(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_1 *y, float *Y,
                             int64_t ystep, int64_t pf) {
    q41x8_groups512(ns, 1, KVT_X8_PF_NEAR, nb, G, step, y, Y, ystep, pf);
}
#endif

// Y[t * ldy + 8g + r] for the groups g in [g0, g1) of the q4_1_x8 matrix W (n columns) against the n_tok q8_1
// rows X. Batches take the GEMV token by token per group (the group's rows then come from L1/L2): each output
// is the GEMV's whatever the batch.
// The groups [g0, g1) of a decode in ns streams through the groups kernel fn (bits_avx2.h KVT_X8_STREAMS).
#define Q41X8_STREAMS(fn) KVT_X8_STREAMS(fn, ns, nb, (const uint8_t *)W, nb * KVT_Q41X8_B, g0, g1, X, Y, pf)

void Q41X8_MM_FN(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y, int64_t ldy) {
    const int64_t nb = n / KVT_QK, pf = n_tok == 1 ? kvt_kernels_prefetch() : 0;
    // decode: the type's form (matmul.h kvt_kernels_decode_form: with prefetch 34, Q41X8_NS = 4 streams, in 512-bit
    // vectors where the build has them, lines KVT_X8_PF_NEAR ahead into L1 too; a study form v: v % 10 streams, 512-bit for
    // 11, 12, 14 (the form before k11q), 21, 22, 24 and 31, 32, 34; the L1 prefetch for 31, 32, 34)
    const int v = n_tok == 1 ? kvt_kernels_decode_form(KVT_TYPE_Q4_1_X8) : 0;
    const int ns = v % 10 == 1 || v % 10 == 2 || v % 10 == 4 ? v % 10 : pf ? Q41X8_NS : 1;
#ifdef KVT_SIMD_AVX512
    if (n_tok == 1 && v >= 10 && v < 40) { // 512-bit vectors
        if (v >= 30)
            Q41X8_STREAMS(q41x8_groups512n);
        else if (v >= 20)
            Q41X8_STREAMS(q41x8_groups512h);
        else
            Q41X8_STREAMS(q41x8_groups512o);
        return;
    }
#endif
    if (n_tok == 1 && (pf || ns > 1)) { // (its own copy of the loop, so that the batches' has no test per block)
        if (v >= 30 && v < 40) {
            // The 256-bit loop with the L1 prefetch (reached in the AVX2 build only: AVX-512 took its own above): lines
            // half the CPU's distance ahead into L2 (paired from DRAM on the Intel Xeon 1.02-1.04x,
            // docs/log/BENCHMARKS-kernels-3.md, k14); study form 35 the full distance.
            const int64_t pfn = v == 35 ? pf : pf / 2 / 64 * 64;
            KVT_X8_STREAMS(q41x8_groupsn, ns, nb, (const uint8_t *)W, nb * KVT_Q41X8_B, g0, g1, X, Y, pfn);
        } else {
            Q41X8_STREAMS(q41x8_groupso);
        }
        return;
    }
    for (int64_t g = g0; g < g1; g++)
        for (int64_t t = 0; t < n_tok; t++)
            q41x8_groups(1, 0, nb, (const uint8_t *)W + g * nb * KVT_Q41X8_B, 0, (const kvt_block_q8_1 *)X + t * nb,
                         Y + t * ldy + 8 * g, 0, 0);
}
