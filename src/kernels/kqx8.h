// kqx8.h - the decode GEMV of q4_K_x8 (q4_K repacked at load, 8 rows interleaved: quant.h), included by
// matmul_avx2.c for both of its builds (AVX2; AVX-512 VNNI with KVT_SIMD_AVX512). AVX-512 batches too: 2..8
// tokens through the GEMV's arithmetic per token (up to 4 tokens per pass over a group, the weights masked once),
// from 9 tokens kq_avx512.h's panel tile on panels packed from the groups. (AVX2 batches: gemm_avx2.c.)
//
// One activation row (q8_K) against groups of 8 rows. The weights stream linearly (no per-row scale
// unpacking, no per-row horizontal sums): per super-block, 8 rows' 6-bit scales are unpacked together,
// the integer dot of each 4-element quad lands in a lane of its row, and the 8 exact integer totals S
// and min dots M are reduced at once. The float chains are the q4_K ones of matmul.h, one per row (a
// lane): acc = fma(float(S), d * dy, acc), macc = macc + (dmin * dy) * float(M), Y = acc - macc, so
// every output has the bits of the q4_K kernels on the unpacked rows.
//
// Lanes: a 64-byte chunk (c, p) of the layout holds for row r the quads 2p, 2p + 1 of the 32-byte qs
// slice c; as int32 lanes 2r + e (e < 2), lane 2r + e takes quad 2p + e, so the activation bytes
// 64c + 8p .. + 8 (low nibbles) and 64c + 32 + 8p .. + 8 (high nibbles) broadcast as one qword. Over
// p = 0..3 a lane sums 16 products of one sub-block: |sum| <= 16 * 15 * 128 < 2^15, so it packs to
// int16 exactly, and the scale is applied in the int16 x int16 dot (VPMADDWD / VPDPWSSD).

// Software prefetch in the decode GEMV: kvt_kernels_prefetch_type(KVT_TYPE_Q4_K_X8) bytes ahead, per CPU (quant.h;
// 1024 on AMD Zen 3 with the AVX2 GEMV of z4k, into L1 only: x8_sb_z). None for the AVX-512 GEMV on AMD Zen 4: there
// the 18 prefetches per super-block cost more than they hide (kq_decode_bench, one thread, TinyLlama shapes:
// AVX-512 20-23 GB/s with 4096, 26-28 without; AVX2 17-23 -> 22-25; two threads no loss;
// docs/log/BENCHMARKS-kernels-2.md, 2026-11-29 kq6x8; with 1024, two threads: 0.79x); but Zen 4's decode runs the
// AVX2 GEMV with 2048 (x8_decode_zd: 1.03-1.09x against the AVX-512 one without, z4q4k, quant.h kvt_kernels_decode_avx2); on Intel they let the reads overlap the arithmetic (the
// same log, intel11). Batches (2..8 tokens) none.

// With that prefetch (into L2), the default forms also prefetch each line KVT_X8_PF_NEAR (matmul_avx2.c) bytes ahead
// into L1, as q4_1_x8 and q8_0_x8 do (docs/log/BENCHMARKS-kernels-3.md, k11q; for q4_K_x8 the lead's section there).

#ifdef KVT_SIMD_AVX512
#define KQX8_GEMV_FN kvt_q4kx8_gemv_avx512
#else
#define KQX8_GEMV_FN kvt_q4kx8_gemv_avx2
#endif

INLINE __m256i x8_ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INLINE int64_t x8_ld64(const void *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

// The 8 sums of 32 of a q8_K block as int16 (|sum| <= 32 * 128).
INLINE __m128i x8_bs32(const kvt_block_q8_K *y) {
    return _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums), _mm_loadu_si128((const __m128i *)y->bsums + 1));
}

// The float chains of one super-block of 8 rows (lane r: row r): S, M the exact integer totals.
INLINE void x8_chain(__m256i S, __m256i M, const uint8_t *in, float dyv, __m256 *acc, __m256 *macc) {
    const __m256 dy = _mm256_set1_ps(dyv);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 1120)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 1136)));
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(d, dy), *acc);
    *macc = _mm256_add_ps(*macc, _mm256_mul_ps(_mm256_mul_ps(dmin, dy), _mm256_cvtepi32_ps(M)));
}

#ifdef KVT_SIMD_AVX512

// The 8 rows' scales and mins of one super-block, byte 8r + j.
INLINE void x8_scales(const uint8_t *in, __m512i *sc, __m512i *mn) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i L = _mm512_loadu_si512(in + 1024);
    const __m256i H = _mm256_loadu_si256((const __m256i *)(in + 1088));
    // the high bits of rows 0-3 in H's low nibbles, of rows 4-7 in its high ones: h unmasked (the bits a 16-bit shift
    // moves across bytes, and the other nibble, fall outside m30 below)
    const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(H), _mm256_srli_epi16(H, 4), 1);
    *sc = _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
    *mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4), _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
}

// kq_avx512.h's 16-row panel from q4_K_x8 groups: rows [0, nr) (nr 8 or 16: one or two groups at W, W + 8 wrs).
// Chunk (c, p) lane 2r + e holds row r's quad 2p + e of slice c: its low nibbles are the panel's quad
// 16c + 2p + e, its high nibbles quad 16c + 8 + 2p + e. q5 (q5_K_x8): the q4_K panel with values 0..31 (kq_pack's
// KQ_Q5), the fifth bits from the group's qh chunk p, whose lanes are the quads' (quant.h).
INLINE void kq_pack_x8_k(int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan, const int q5) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pb = pan + b * KQ_PSB;
        const int64_t SB = q5 ? KVT_Q5X8_SB : KVT_X8_SB;
        const uint8_t *G[2] = {(const uint8_t *)W + b * SB, nr > 8 ? (const uint8_t *)W + 8 * wrs + b * SB : NULL};
        UNROLL for (int k = 0; k < 16; k++) { // chunk (c, p) = (k / 4, k % 4)
            const int c = k / 4, p = k % 4;
            const __m512i a = _mm512_loadu_si512(G[0] + 64 * k);
            const __m512i z = G[1] ? _mm512_loadu_si512(G[1] + 64 * k) : _mm512_setzero_si512();
            const __m512i q0 = _mm512_permutex2var_epi32(a, ev, z), q1 = _mm512_permutex2var_epi32(a, od, z);
            const int Q = 16 * c + 2 * p;
            __m512i v[4] = {_mm512_and_si512(q0, m4), _mm512_and_si512(q1, m4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4),
                            _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4)};
            if (q5) { // bits 2c (low nibbles) and 2c + 1 (high) of the quads' qh bytes to bit 4 (0xF8: a | (b & c))
                const __m512i ha = _mm512_loadu_si512(G[0] + KVT_X8_SB + 64 * p);
                const __m512i hz = G[1] ? _mm512_loadu_si512(G[1] + KVT_X8_SB + 64 * p) : _mm512_setzero_si512();
                const __m512i h[2] = {_mm512_permutex2var_epi32(ha, ev, hz), _mm512_permutex2var_epi32(ha, od, hz)};
                UNROLL for (int e = 0; e < 2; e++) {
                    v[e] = _mm512_ternarylogic_epi32(v[e], kvt_bit_to4_512(h[e], 2 * c), m10, 0xF8);
                    v[2 + e] = _mm512_ternarylogic_epi32(v[2 + e], kvt_bit_to4_512(h[e], 2 * c + 1), m10, 0xF8);
                }
            }
            _mm512_store_si512((void *)(pb + 64 * Q), v[0]);
            _mm512_store_si512((void *)(pb + 64 * (Q + 1)), v[1]);
            _mm512_store_si512((void *)(pb + 64 * (Q + 8)), v[2]);
            _mm512_store_si512((void *)(pb + 64 * (Q + 9)), v[3]);
        }
        _Alignas(64) uint8_t sc[2][64], mn[2][64];
        _Alignas(16) uint16_t dh[2][16];
        for (int h = 0; h < 2; h++) {
            __m512i s = _mm512_setzero_si512(), m = s;
            if (G[h]) x8_scales(G[h], &s, &m);
            _mm512_store_si512((void *)sc[h], s), _mm512_store_si512((void *)mn[h], m);
            if (G[h]) memcpy(dh[h], G[h] + 1120, 32);
            else memset(dh[h], 0, 32);
        }
        __m128i s8[KQ_R];
        UNROLL for (int r = 0; r < KQ_R; r++)
            s8[r] = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(sc[r / 8] + 8 * (r % 8))),
                                       _mm_loadl_epi64((const __m128i *)(mn[r / 8] + 8 * (r % 8))));
        kq_pack_scales(0, s8, pb);
        // d of rows 0..15, then dmin (f16 -> f32 exactly, as _cvtsh_ss)
        const __m256i dd = _mm256_setr_m128i(_mm_load_si128((const __m128i *)dh[0]), _mm_load_si128((const __m128i *)dh[1]));
        const __m256i dm = _mm256_setr_m128i(_mm_load_si128((const __m128i *)dh[0] + 1), _mm_load_si128((const __m128i *)dh[1] + 1));
        _mm512_store_ps((void *)(pb + KQ_D), _mm512_cvtph_ps(dd));
        _mm512_store_ps((void *)(pb + KQ_DMIN), _mm512_cvtph_ps(dm));
    }
}

static void kq_pack_x8(int Q6, int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan) {
    (void)Q6;
    kq_pack_x8_k(nb, W, wrs, nr, pan, 0);
}
static void kq_pack_x8_q5(int Q6, int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan) {
    (void)Q6;
    kq_pack_x8_k(nb, W, wrs, nr, pan, 1);
}

// Y[t * ldy + r] for the nr rows (a multiple of 8) of the q4_K_x8 matrix at W and n_tok q8_K rows X: kq_gemm's
// tile on panels packed from the repacked rows (kq_scratch(n, n_tok) bytes of scratch).
void kvt_q4kx8_gemm_avx512(int64_t n, const void *W, int64_t nr, const void *X, int64_t n_tok, float *Y, int64_t ldy,
                           void *scratch) {
    kq_gemm_p(0, kq_pack_x8, n, W, (size_t)kvt_row_size(KVT_TYPE_Q4_K, n), nr, X, (size_t)kvt_row_size(KVT_TYPE_Q8_K, n),
              n_tok, Y, ldy, scratch);
}
int64_t kvt_q4kx8_gemm_scratch_avx512(int64_t n) { return kq_scratch(n, 0); }
// The same for q5_K_x8 (its panels from kq_pack_x8_q5): the q4_K tile on q5_K's values, the q5_K bits (its scratch
// kvt_q4kx8_gemm_scratch_avx512(n) bytes).
void kvt_q5kx8_gemm_avx512(int64_t n, const void *W, int64_t nr, const void *X, int64_t n_tok, float *Y, int64_t ldy,
                           void *scratch) {
    kq_gemm_p(0, kq_pack_x8_q5, n, W, (size_t)kvt_row_size(KVT_TYPE_Q5_K, n), nr, X, (size_t)kvt_row_size(KVT_TYPE_Q8_K, n),
              n_tok, Y, ldy, scratch);
}

// The min dots of one super-block of a group: rows 0-3 from mlo, 4-7 from mhi (each row's sub-block mins, 16-bit),
// times the activation's 8 sub-block sums bs; dword r of the result is row r's total.
INLINE __m256i x8_min_dots(__m512i mlo, __m512i mhi, __m512i bs, __m512i mrow) {
    __m512i ma = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mlo, bs);
    __m512i mb = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mhi, bs);
    ma = _mm512_add_epi32(ma, _mm512_shuffle_epi32(ma, _MM_PERM_BADC));
    ma = _mm512_add_epi32(ma, _mm512_shuffle_epi32(ma, _MM_PERM_CDAB));
    mb = _mm512_add_epi32(mb, _mm512_shuffle_epi32(mb, _MM_PERM_BADC));
    mb = _mm512_add_epi32(mb, _mm512_shuffle_epi32(mb, _MM_PERM_CDAB));
    return _mm512_castsi512_si256(_mm512_permutex2var_epi32(ma, mrow, mb));
}

// Rows 8g .. 8g + 7 (the group at G) against NT <= X8_NT q8_K rows yb[t] (nb super-blocks each): Y[t * ldy + r].
// The weights of a chunk are masked once for the NT tokens; each token's arithmetic is the one-token GEMV's.
// q5 (q5_K_x8, quant.h): the fifth bits of the qh chunks or'ed in as bit 4 (kqx8.h's AVX2 x8_sb_z5h), the high nibbles
// shifted down (not in place), and the int16 packing of the pair sums made per two chunks (p < 2, p >= 2) so that it
// stays exact: 8 products of at most 31 * 128 (16 of them would not fit).
#define X8_NT 4
INLINE void x8_group_nt_k(int64_t nb, const uint8_t *G, const kvt_block_q8_K *const *yb, int NT, float *Y, int64_t ldy,
                          int64_t pf, const int q5) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), mF0 = _mm512_set1_epi8((char)0xF0), m10 = _mm512_set1_epi8(0x10);
    // scale words of sub-block j (add j to the index bytes): per 128-bit lane q (rows 2q, 2q + 1), the int16
    // pairs of packs(lo, hi) take (sc_j of row 2q) x2, (row 2q + 1) x2, then sub-block j + 1 likewise
    const __m512i shb = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, 0, -128, 8, -128, 8, -128, 1, -128, 1, -128, 9, -128, 9, -128));
    const __m512i rows8 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 0, 1, 4, 5, 8, 9, 12, 13);
    const __m512i mrow = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const int64_t SB = q5 ? KVT_Q5X8_SB : KVT_X8_SB;
    __m256 acc[X8_NT], macc[X8_NT];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = macc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *in = G + b * SB;
        if (pf) UNROLL for (int l = 0; l < KVT_X8_SB / 64; l++) _mm_prefetch((const char *)in + pf + 64 * l, KVT_X8_PF_HINT);
        if (pf && q5) UNROLL for (int l = KVT_X8_SB / 64; l < KVT_Q5X8_SB / 64; l++) _mm_prefetch((const char *)in + pf + 64 * l, KVT_X8_PF_HINT);
        __m512i sc, mn;
        x8_scales(in, &sc, &mn);
        __m512i is[X8_NT];
        UNROLL for (int t = 0; t < NT; t++) is[t] = _mm512_setzero_si512();
        UNROLL for (int c = 0; c < 4; c++) {
            __m512i pl[2][X8_NT], ph[2][X8_NT]; // [h]: chunks p of h = p / 2 (q5), all in [0] (q4)
            UNROLL for (int h = 0; h < 2; h++) UNROLL for (int t = 0; t < NT; t++) pl[h][t] = ph[h][t] = _mm512_setzero_si512();
            UNROLL for (int p = 0; p < 4; p++) {
                const int h = q5 ? p / 2 : 0;
                const __m512i q = _mm512_loadu_si512(in + 64 * (4 * c + p));
                __m512i lo = _mm512_and_si512(q, m4), hi = q5 ? _mm512_and_si512(_mm512_srli_epi16(q, 4), m4) : _mm512_and_si512(q, mF0);
                if (q5) { // bits 2c, 2c + 1 of the rows' qh bytes to bit 4 (0xF8: a | (b & c))
                    const __m512i qh = _mm512_loadu_si512(in + KVT_X8_SB + 64 * p);
                    lo = _mm512_ternarylogic_epi32(lo, kvt_bit_to4_512(qh, 2 * c), m10, 0xF8);
                    hi = _mm512_ternarylogic_epi32(hi, kvt_bit_to4_512(qh, 2 * c + 1), m10, 0xF8);
                }
                UNROLL for (int t = 0; t < NT; t++) {
                    const int8_t *yq = yb[t][b].qs + 64 * c + 8 * p;
                    pl[h][t] = _mm512_dpbusd_epi32(pl[h][t], lo, _mm512_set1_epi64(x8_ld64(yq)));
                    // q4: the high nibbles in place (16x their value): exact, divided out below
                    ph[h][t] = _mm512_dpbusd_epi32(ph[h][t], hi, _mm512_set1_epi64(x8_ld64(yq + 32)));
                }
            }
            const __m512i s = _mm512_shuffle_epi8(sc, _mm512_add_epi8(shb, _mm512_set1_epi8((char)(2 * c))));
            UNROLL for (int t = 0; t < NT; t++) {
                if (q5) {
                    is[t] = _mm512_dpwssd_epi32(is[t], _mm512_packs_epi32(pl[0][t], ph[0][t]), s);
                    is[t] = _mm512_dpwssd_epi32(is[t], _mm512_packs_epi32(pl[1][t], ph[1][t]), s);
                } else {
                    is[t] = _mm512_dpwssd_epi32(is[t], _mm512_packs_epi32(pl[0][t], _mm512_srai_epi32(ph[0][t], 4)), s);
                }
            }
        }
        const __m512i mlo = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(mn)), mhi = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mn, 1));
        UNROLL for (int t = 0; t < NT; t++) {
            const kvt_block_q8_K *y = yb[t] + b;
            // lane 4q + k: k = 0, 1 rows 2q, 2q + 1 (even sub-blocks), k = 2, 3 the same rows (odd ones)
            const __m512i i2 = _mm512_add_epi32(is[t], _mm512_shuffle_epi32(is[t], _MM_PERM_BADC));
            const __m256i S = _mm512_castsi512_si256(_mm512_permutexvar_epi32(rows8, i2));
            // min dots: rows 0-3 and 4-7, dword 4r + i = m_2i * bs_2i + m_2i+1 * bs_2i+1
            const __m512i bs = _mm512_broadcast_i32x4(x8_bs32(y));
            const __m256i M = x8_min_dots(mlo, mhi, bs, mrow);
            x8_chain(S, M, in, y->d, &acc[t], &macc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) _mm256_storeu_ps(Y + t * ldy, _mm256_sub_ps(acc[t], macc[t]));
}
INLINE void x8_group_nt(int64_t nb, const uint8_t *G, const kvt_block_q8_K *const *yb, int NT, float *Y, int64_t ldy,
                        int64_t pf) {
    x8_group_nt_k(nb, G, yb, NT, Y, ldy, pf, 0);
}

// Decode with prefetch in X8_NS streams: the groups at G + k * step (k < ns) super-block by super-block, each with the
// one-token arithmetic of x8_group_nt (its own chains acc, macc: the same bits whatever the streams). One group at a
// time read q4_K_x8 at about the plain one-stream rate (the core's misses in flight come from one stream); on the Intel
// Xeon (kq_decode_bench, 2 threads, DRAM, 2026-11-30, alternating rounds) 4 streams read 33-37 GB/s where one read
// 27-33 in every round, 2 streams in between (docs/log/BENCHMARKS-kernels-2.md, dec11c).
#ifndef X8_NS
#define X8_NS 4
#endif
// The one-token arithmetic of a super-block with fewer operations (2026-11-30, k11k; the same integers S and M, so the
// same bits): (1) the min dots by two VPDPBUSD on the mins as bytes (lane 2r + e: row r's sub-blocks 4e .. 4e + 3),
// the activation's sums of 32 split as bs = 128 * bh + bl (bl 0..127, bh -32..32; once per super-block for all
// streams); was a zero extension to words, two VPDPWSSD and a 16-to-8 reduction of 9 operations; (2) S and M reduced
// together (S of row r to lane r, M to lane 8 + r: two permutes and one add) and one float chain in 16 lanes, acc in
// 0..7 and macc in 8..15: acc = fma(S, d * dy, acc) and macc + (dmin * dy) * M as fma(that product, 1, macc) (the
// same rounding), one conversion of d and dmin, one of S and M.
// nd: with pf, each line's lines nd bytes ahead also prefetched into L1 (0: none; KVT_X8_PF_NEAR in the default form).
INLINE void x8_groups512_nd(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,
                            int64_t ystep, int64_t pf, const int64_t nd) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), mF0 = _mm512_set1_epi8((char)0xF0);
    const __m512i shb = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, 0, -128, 8, -128, 8, -128, 1, -128, 1, -128, 9, -128, 9, -128));
    // is: lane 4q + k (k = 0, 1 rows 2q, 2q + 1 even sub-blocks, k = 2, 3 the odd ones); t (min dots): lane 2r + e
    const __m512i idxA = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i idxB = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 ones = _mm512_set1_ps(1.0f);
    __m512 ac[X8_NS];
    UNROLL for (int k = 0; k < ns; k++) ac[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const kvt_block_q8_K *y = yb + b;
        const __m128i b16 = x8_bs32(y);
        const __m128i b8 = _mm_packs_epi16(_mm_and_si128(b16, _mm_set1_epi16(127)), _mm_srai_epi16(b16, 7));
        const __m512i BL = _mm512_broadcastq_epi64(b8), BH = _mm512_broadcastq_epi64(_mm_unpackhi_epi64(b8, b8));
        const __m512 dyv = _mm512_set1_ps(y->d);
        UNROLL for (int k = 0; k < ns; k++) {
            const uint8_t *in = G + k * step + b * KVT_X8_SB;
            // the prefetches spread over the super-block: the scales' and d's two lines here, each weight line's before
            // its chunk's load (was 18 at once; kq_decode_bench paired, DRAM: 1.02-1.05x, 2026-11-30 k11k)
            if (pf) UNROLL for (int l = 16; l < KVT_X8_SB / 64; l++) {
                _mm_prefetch((const char *)in + pf + 64 * l, KVT_X8_PF_HINT);
                if (nd) _mm_prefetch((const char *)in + nd + 64 * l, _MM_HINT_T0);
            }
            __m512i sc, mn;
            x8_scales(in, &sc, &mn);
            __m512i is = _mm512_setzero_si512();
            UNROLL for (int c = 0; c < 4; c++) {
                __m512i pl = _mm512_setzero_si512(), ph = _mm512_setzero_si512();
                UNROLL for (int p = 0; p < 4; p++) {
                    if (pf) _mm_prefetch((const char *)in + pf + 64 * (4 * c + p), KVT_X8_PF_HINT);
                    if (pf && nd) _mm_prefetch((const char *)in + nd + 64 * (4 * c + p), _MM_HINT_T0);
                    const __m512i q = _mm512_loadu_si512(in + 64 * (4 * c + p));
                    const int8_t *yq = y->qs + 64 * c + 8 * p;
                    pl = _mm512_dpbusd_epi32(pl, _mm512_and_si512(q, m4), _mm512_set1_epi64(x8_ld64(yq)));
                    ph = _mm512_dpbusd_epi32(ph, _mm512_and_si512(q, mF0), _mm512_set1_epi64(x8_ld64(yq + 32)));
                }
                const __m512i s = _mm512_shuffle_epi8(sc, _mm512_add_epi8(shb, _mm512_set1_epi8((char)(2 * c))));
                is = _mm512_dpwssd_epi32(is, _mm512_packs_epi32(pl, _mm512_srai_epi32(ph, 4)), s);
            }
            const __m512i t = _mm512_dpbusd_epi32(_mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), mn, BH), 7), mn, BL);
            const __m512 F = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_permutex2var_epi32(is, idxA, t), _mm512_permutex2var_epi32(is, idxB, t)));
            const __m512 DD = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + 1120))), dyv);
            ac[k] = _mm512_fmadd_ps(_mm512_mask_mul_ps(F, 0xFF00, F, DD), _mm512_mask_mov_ps(DD, 0xFF00, ones), ac[k]);
        }
    }
    UNROLL for (int k = 0; k < ns; k++)
        _mm256_storeu_ps(Y + k * ystep, _mm256_sub_ps(_mm512_castps512_ps256(ac[k]), _mm512_extractf32x8_ps(ac[k], 1)));
}
// The default form (L1 prefetch too) and study form 9 (k11k's spread prefetches into L2 only).
INLINE void x8_groups512(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,
                         int64_t ystep, int64_t pf) {
    x8_groups512_nd(ns, nb, G, step, yb, Y, ystep, pf, KVT_X8_PF_NEAR);
}
INLINE void x8_groups512f(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,
                          int64_t ystep, int64_t pf) {
    x8_groups512_nd(ns, nb, G, step, yb, Y, ystep, pf, 0);
}
INLINE void x8_groups512o(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,
                         int64_t ystep, int64_t pf) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), mF0 = _mm512_set1_epi8((char)0xF0);
    const __m512i shb = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, 0, -128, 8, -128, 8, -128, 1, -128, 1, -128, 9, -128, 9, -128));
    const __m512i rows8 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 0, 1, 4, 5, 8, 9, 12, 13);
    const __m512i mrow = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    __m256 acc[X8_NS], macc[X8_NS];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = macc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const kvt_block_q8_K *y = yb + b;
        const __m512i bs = _mm512_broadcast_i32x4(x8_bs32(y));
        UNROLL for (int k = 0; k < ns; k++) {
            const uint8_t *in = G + k * step + b * KVT_X8_SB;
            UNROLL for (int l = 0; l < KVT_X8_SB / 64; l++) _mm_prefetch((const char *)in + pf + 64 * l, KVT_X8_PF_HINT);
            __m512i sc, mn;
            x8_scales(in, &sc, &mn);
            __m512i is = _mm512_setzero_si512();
            UNROLL for (int c = 0; c < 4; c++) {
                __m512i pl = _mm512_setzero_si512(), ph = _mm512_setzero_si512();
                UNROLL for (int p = 0; p < 4; p++) {
                    const __m512i q = _mm512_loadu_si512(in + 64 * (4 * c + p));
                    const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(q, mF0);
                    const int8_t *yq = y->qs + 64 * c + 8 * p;
                    pl = _mm512_dpbusd_epi32(pl, lo, _mm512_set1_epi64(x8_ld64(yq)));
                    ph = _mm512_dpbusd_epi32(ph, hi, _mm512_set1_epi64(x8_ld64(yq + 32)));
                }
                const __m512i s = _mm512_shuffle_epi8(sc, _mm512_add_epi8(shb, _mm512_set1_epi8((char)(2 * c))));
                is = _mm512_dpwssd_epi32(is, _mm512_packs_epi32(pl, _mm512_srai_epi32(ph, 4)), s);
            }
            const __m512i mlo = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(mn)), mhi = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mn, 1));
            const __m512i i2 = _mm512_add_epi32(is, _mm512_shuffle_epi32(is, _MM_PERM_BADC));
            const __m256i S = _mm512_castsi512_si256(_mm512_permutexvar_epi32(rows8, i2));
            const __m256i M = x8_min_dots(mlo, mhi, bs, mrow);
            x8_chain(S, M, in, y->d, &acc[k], &macc[k]);
        }
    }
    UNROLL for (int k = 0; k < ns; k++) _mm256_storeu_ps(Y + k * ystep, _mm256_sub_ps(acc[k], macc[k]));
}
#define x8_groups_isa x8_groups512
#define X8_NT_FN(T) \
    static __attribute__((noinline)) void x8_group_t##T(int64_t nb, const uint8_t *G, const kvt_block_q8_K *const *yb, float *Y, \
                                                        int64_t ldy) { x8_group_nt(nb, G, yb, T, Y, ldy, 0); }
X8_NT_FN(2)
X8_NT_FN(3)
X8_NT_FN(4)
#define X8_NT5_FN(T) \
    static __attribute__((noinline)) void x8_group5_t##T(int64_t nb, const uint8_t *G, const kvt_block_q8_K *const *yb, float *Y, \
                                                         int64_t ldy) { x8_group_nt_k(nb, G, yb, T, Y, ldy, 0, 1); }
X8_NT5_FN(1)
X8_NT5_FN(2)
X8_NT5_FN(3)
X8_NT5_FN(4)

X8_NT_FN(1)
// The groups [g0, g1) (gb bytes each) against n_tok q8_K rows X (stride xrs), X8_NT tokens a pass: fn[nt - 1].
typedef void (*x8_nt_fn)(int64_t nb, const uint8_t *G, const kvt_block_q8_K *const *yb, float *Y, int64_t ldy);
INLINE void x8_gemv_nt(const x8_nt_fn fn[X8_NT], int64_t nb, int64_t gb, const void *W, int64_t g0, int64_t g1, const void *X,
                       size_t xrs, int64_t n_tok, float *Y, int64_t ldy) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *G = (const uint8_t *)W + g * gb;
        for (int64_t t0 = 0; t0 < n_tok; t0 += X8_NT) {
            const kvt_block_q8_K *yb[X8_NT];
            const int nt = (int)(n_tok - t0 < X8_NT ? n_tok - t0 : X8_NT);
            for (int t = 0; t < nt; t++) yb[t] = (const kvt_block_q8_K *)((const char *)X + (t0 + t) * xrs);
            fn[nt - 1](nb, G, yb, Y + t0 * ldy + 8 * g, ldy);
        }
    }
}

// Y[t * ldy + 8g + r] for the groups g in [g0, g1) of the q4_K_x8 matrix W (n columns) against n_tok (2 ..
// KVT_Q4KX8_GEMM_MIN - 1) q8_K rows X (stride xrs): the GEMV's arithmetic per token, X8_NT tokens per pass.
void kvt_q4kx8_gemv_nt_avx512(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, size_t xrs, int64_t n_tok,
                              float *Y, int64_t ldy) {
    static const x8_nt_fn fn[X8_NT] = {x8_group_t1, x8_group_t2, x8_group_t3, x8_group_t4};
    x8_gemv_nt(fn, n / KVT_QK_K, n / KVT_QK_K * KVT_X8_SB, W, g0, g1, X, xrs, n_tok, Y, ldy);
}
// The same for the q5_K_x8 matrix W (2 .. KVT_Q5KX8_GEMM_MIN - 1 tokens; x8_group_nt_k with q5; its one-token decode is
// the AVX2 GEMV's, kvt_q5kx8_gemv_avx2: the same integers S, M and chains, the same bits).
void kvt_q5kx8_gemv_nt_avx512(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, size_t xrs, int64_t n_tok,
                              float *Y, int64_t ldy) {
    static const x8_nt_fn fn[X8_NT] = {x8_group5_t1, x8_group5_t2, x8_group5_t3, x8_group5_t4};
    x8_gemv_nt(fn, n / KVT_QK_K, n / KVT_QK_K * KVT_Q5X8_SB, W, g0, g1, X, xrs, n_tok, Y, ldy);
}

#else

// The end of an AVX2 super-block (x8_sb_sp, x8_sb_z): the min dots M of the 8 rows from their 6-bit mins as bytes (mnA:
// rows 0-3, mnB: rows 4-7, lane order of the packed L bytes) against the activation's sums of 32, then x8_chain with the
// scale dots S.
INLINE void x8_mins_chain(__m256i mnA, __m256i mnB, __m256i S, const uint8_t *in, const kvt_block_q8_K *y, __m256 *acc,
                          __m256 *macc) {
    const __m256i mperm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m128i bs = x8_bs32(y);
    const __m256i bsb = _mm256_set_m128i(bs, bs);
    const __m256i R01 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(mnA)), bsb);
    const __m256i R23 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(mnA, 1)), bsb);
    const __m256i R45 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(mnB)), bsb);
    const __m256i R67 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(mnB, 1)), bsb);
    const __m256i h3 = _mm256_hadd_epi32(_mm256_hadd_epi32(R01, R23), _mm256_hadd_epi32(R45, R67));
    const __m256i M = _mm256_permutevar8x32_epi32(h3, mperm);
    x8_chain(S, M, in, y->d, acc, macc);
}

// One super-block (at in, against y) of a group of 8 rows into its chains acc, macc; the lines pf bytes ahead
// prefetched (0: none).
// sp: the prefetches spread over the super-block (each line's before its chunk's loads), else 18 at once at the start;
// sp 2: with each, the line KVT_X8_PF_NEAR bytes ahead into L1 too.
INLINE void x8_sb_sp(const uint8_t *in, const kvt_block_q8_K *y, __m256 *acc, __m256 *macc, int64_t pf, const int sp) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    // scale words of sub-block j (add j): per 128-bit lane (rows 2L, 2L + 1), dwords (row 2L, e = 0, 1), (row 2L + 1, ..)
    const __m256i shb = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128,
                                         0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128);
    if (pf) UNROLL for (int l = sp ? 16 : 0; l < KVT_X8_SB / 64; l++) {
        _mm_prefetch((const char *)in + pf + 64 * l, KVT_X8_PF_HINT);
        if (sp == 2) _mm_prefetch((const char *)in + KVT_X8_PF_NEAR + 64 * l, _MM_HINT_T0);
    }
    const __m256i H = x8_ld256(in + 1088);
    const __m256i hA = _mm256_and_si256(H, m4), hB = _mm256_and_si256(_mm256_srli_epi16(H, 4), m4);
    const __m256i LA = x8_ld256(in + 1024), LB = x8_ld256(in + 1056);
    const __m256i scA = _mm256_or_si256(_mm256_and_si256(LA, m4), _mm256_and_si256(_mm256_slli_epi16(hA, 4), m30));
    const __m256i scB = _mm256_or_si256(_mm256_and_si256(LB, m4), _mm256_and_si256(_mm256_slli_epi16(hB, 4), m30));
    __m256i isA = _mm256_setzero_si256(), isB = _mm256_setzero_si256();
    UNROLL for (int c = 0; c < 4; c++) {
        __m256i plA = _mm256_setzero_si256(), phA = plA, plB = plA, phB = plA;
        UNROLL for (int p = 0; p < 4; p++) {
            if (pf && sp) _mm_prefetch((const char *)in + pf + 64 * (4 * c + p), KVT_X8_PF_HINT);
            if (pf && sp == 2) _mm_prefetch((const char *)in + KVT_X8_PF_NEAR + 64 * (4 * c + p), _MM_HINT_T0);
            const __m256i qA = x8_ld256(in + 64 * (4 * c + p)), qB = x8_ld256(in + 64 * (4 * c + p) + 32);
            const __m256i yl = _mm256_set1_epi64x(x8_ld64(y->qs + 64 * c + 8 * p));
            const __m256i yh = _mm256_set1_epi64x(x8_ld64(y->qs + 64 * c + 32 + 8 * p));
            // int16 pair sums, |.| <= 2 * 15 * 128; four of them still exact in int16
            plA = _mm256_add_epi16(plA, _mm256_maddubs_epi16(_mm256_and_si256(qA, m4), yl));
            phA = _mm256_add_epi16(phA, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(qA, 4), m4), yh));
            plB = _mm256_add_epi16(plB, _mm256_maddubs_epi16(_mm256_and_si256(qB, m4), yl));
            phB = _mm256_add_epi16(phB, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(qB, 4), m4), yh));
        }
        const __m256i s0 = _mm256_add_epi8(shb, _mm256_set1_epi8((char)(2 * c)));
        const __m256i s1 = _mm256_add_epi8(shb, _mm256_set1_epi8((char)(2 * c + 1)));
        isA = _mm256_add_epi32(isA, _mm256_add_epi32(_mm256_madd_epi16(plA, _mm256_shuffle_epi8(scA, s0)),
                                                     _mm256_madd_epi16(phA, _mm256_shuffle_epi8(scA, s1))));
        isB = _mm256_add_epi32(isB, _mm256_add_epi32(_mm256_madd_epi16(plB, _mm256_shuffle_epi8(scB, s0)),
                                                     _mm256_madd_epi16(phB, _mm256_shuffle_epi8(scB, s1))));
    }
    // lane 128-bit L: [r 2L, r 2L+1, r 4+2L, r 5+2L] -> rows in order
    const __m256i S = _mm256_permute4x64_epi64(_mm256_hadd_epi32(isA, isB), 0xD8);
    const __m256i mnA = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(LA, 4), m4), _mm256_and_si256(_mm256_slli_epi16(hA, 2), m30));
    const __m256i mnB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(LB, 4), m4), _mm256_and_si256(_mm256_slli_epi16(hB, 2), m30));
    x8_mins_chain(mnA, mnB, S, in, y, acc, macc);
}

#define x8_sb(in, y, acc, macc, pf) x8_sb_sp(in, y, acc, macc, pf, 0)

INLINE void x8_group_body(int64_t nb, const uint8_t *G, const kvt_block_q8_K *yb, float *Y, int64_t pf) {
    __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) x8_sb(G + b * KVT_X8_SB, yb + b, &acc, &macc, pf);
    _mm256_storeu_ps(Y, _mm256_sub_ps(acc, macc));
}

// Two streams (kq_decode_bench and model decode on the Intel Xeon with KVT_ISA=avx2: docs/log/BENCHMARKS-kernels-2.md,
// dec11b): the groups g0 + i and g0 + h + i (h = half the groups, rounded up) super-block by super-block, so that the
// prefetchers follow two streams at once; the odd group out alone. Each group's chains are the one-group ones (the
// same bits whatever the pairing).
INLINE void x8_pairs(int64_t nb, const uint8_t *W, int64_t g0, int64_t g1, const kvt_block_q8_K *yb, float *Y, int64_t pf,
                     const int sp) {
    const int64_t h = (g1 - g0 + 1) / 2, gs = nb * KVT_X8_SB;
    for (int64_t i = 0; i < g1 - g0 - h; i++) {
        const uint8_t *GA = W + (g0 + i) * gs, *GB = W + (g0 + h + i) * gs;
        __m256 accA = _mm256_setzero_ps(), maccA = accA, accB = accA, maccB = accA;
        for (int64_t b = 0; b < nb; b++) {
            x8_sb_sp(GA + b * KVT_X8_SB, yb + b, &accA, &maccA, pf, sp);
            x8_sb_sp(GB + b * KVT_X8_SB, yb + b, &accB, &maccB, pf, sp);
        }
        _mm256_storeu_ps(Y + 8 * (g0 + i), _mm256_sub_ps(accA, maccA));
        _mm256_storeu_ps(Y + 8 * (g0 + h + i), _mm256_sub_ps(accB, maccB));
    }
    if ((g1 - g0) & 1) x8_group_body(nb, W + (g0 + h - 1) * gs, yb, Y + 8 * (g0 + h - 1), pf);
}

// A study form (matmul.h kvt_kernels_decode_variant(KVT_TYPE_Q4_K_X8) 4; the 256-bit counterpart of x8_groups512): the
// ns groups at G + k * step (k < ns) super-block by super-block, each with x8_sb's one-group chains: the same bits.
INLINE void x8_groups256(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,
                         int64_t ystep, int64_t pf) {
    __m256 acc[4], macc[4];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = macc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) UNROLL for (int k = 0; k < ns; k++) x8_sb(G + k * step + b * KVT_X8_SB, yb + b, &acc[k], &macc[k], pf);
    UNROLL for (int k = 0; k < ns; k++) _mm256_storeu_ps(Y + k * ystep, _mm256_sub_ps(acc[k], macc[k]));
}
#define x8_groups_isa x8_groups256

// The default with prefetch from k4r until z4k (2026-12-01; study form 10 now): x8_groups256 with x8_sb_sp's spread prefetches into L2 and L1 (sp 2), y
// laundered per group and super-block (an empty volatile asm) so that each super-block broadcasts its own activation
// quads. x8_pairs' two groups read the same y, and GCC then shares the 32 broadcasts between them, keeps them on the
// stack and reassociates the int16 sums into wide trees: about 157 vmovdqa (spill stores and reloads) per pair of
// super-blocks in x8_pairs inlined into the GEMV at -O2, 82 here. Paired from DRAM on the Intel Xeon (kq_decode_bench
// -s avx2, 2 threads): 1.03-1.05x over x8_pairs (study form 7), 92-95% -> 96-97% of the probe
// (docs/log/BENCHMARKS-kernels-3.md, k4r). The same chains per group: the same bits.
INLINE void x8_groups256l(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,
                          int64_t ystep, int64_t pf) {
    __m256 acc[4], macc[4];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = macc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) UNROLL for (int k = 0; k < ns; k++) {
        const kvt_block_q8_K *y = yb + b;
        __asm__ volatile("" : "+r"(y));
        x8_sb_sp(G + k * step + b * KVT_X8_SB, y, &acc[k], &macc[k], pf, 2);
    }
    UNROLL for (int k = 0; k < ns; k++) _mm256_storeu_ps(Y + k * ystep, _mm256_sub_ps(acc[k], macc[k]));
}

// The end of x8_sb_z and x8_sb_z5h: the rows' scale dots S from the halves' int32 sums is[0], is[1] (lane 128-bit L:
// [r 2L, r 2L+1, r 4+2L, r 5+2L] -> rows in order), the 6-bit mins from L and H loaded again through a laundered
// pointer (nothing of them live across the products), then x8_mins_chain.
INLINE void x8_sb_z_end(const uint8_t *in, const __m256i is[2], const kvt_block_q8_K *y, __m256 *acc, __m256 *macc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i S = _mm256_permute4x64_epi64(_mm256_hadd_epi32(is[0], is[1]), 0xD8);
    const uint8_t *im = in;
    __asm__ volatile("" : "+r"(im));
    const __m256i H = x8_ld256(im + 1088), LA = x8_ld256(im + 1024), LB = x8_ld256(im + 1056);
    const __m256i mnA = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(LA, 4), m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
    const __m256i mnB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(LB, 4), m4), _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
    x8_mins_chain(mnA, mnB, S, in, y, acc, macc);
}

// The default with prefetch since 2026-12-01 (z4k): x8_sb_sp's arithmetic (the same integers S, M: the same bits) in
// fewer instructions and without spills. GCC reassociates x8_sb_sp's int16 chains into trees and sinks the scale
// products past the next slices, so that it computed the products in batches and kept their sums on the stack (about 40
// vmovdqa a super-block, in x8_decode_nsl); here an empty asm on each int16 chain after each add and on the int32
// sums after each slice keeps every chain a chain in registers (about 6 vmovdqa, the constants). npf (a constant,
// no run-time test per prefetch, where x8_sb_sp tests pf at each of its 18): 0 none, 1 the spread prefetch pf ahead
// into L2 only, 2 into L2 and each line KVT_X8_PF_NEAR ahead into L1 too (x8_sb_sp's sp 2), 3 into L1 only, pf ahead.
// The 6-bit scales straight from L and H (the bits of H outside 0x30 fall out of the masks: no isolated nibbles of
// H); the mins after the products, from L and H loaded again through a laundered pointer (nothing of them live across
// the products). About 60 instructions a super-block fewer (objdump, two streams: 462 against x8_decode_nsl's 523;
// 443 with one prefetch a line).
// On the AMD EPYC Zen 3 (kq_decode_bench -s avx2, 2 threads, paired against x8_groups256l): from DRAM 1.11-1.31x,
// 64-80% -> 83-89% of the probe at the same 2048 bytes; at 1024 bytes 93-99% (docs/log/BENCHMARKS-kernels-3.md, z4k).
// q5 (q5_K_x8, quant.h): the fifth bits from the qh chunks after the q4_K_x8 part: the bit of slice c in each byte
// moved to bit 4 (16-bit shifts; the bits they move across bytes fall outside 0x10) and or'ed into the nibble. The
// int16 pair sums stay exact: |.| <= 4 * 2 * 31 * 128 = 31744 (q4: 15360).
INLINE void x8_sb_z(const uint8_t *in, const kvt_block_q8_K *y, __m256 *acc, __m256 *macc, int64_t pf, const int npf,
                    const int q5) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i shb = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128,
                                         0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128);
    __m256i sc[2], is[2];
    {
        const __m256i H = x8_ld256(in + 1088), LA = x8_ld256(in + 1024), LB = x8_ld256(in + 1056);
        // rows 0-3: h in H's low nibbles (bits 0-1 the scale's high bits, 2-3 the min's), rows 4-7 in its high ones
        sc[0] = _mm256_or_si256(_mm256_and_si256(LA, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
        sc[1] = _mm256_or_si256(_mm256_and_si256(LB, m4), _mm256_and_si256(H, m30));
    }
    is[0] = is[1] = _mm256_setzero_si256();
    UNROLL for (int c = 0; c < 4; c++) {
        // scale words of sub-blocks 2c, 2c + 1 (x8_sb_sp's s0, s1)
        const __m256i s0 = _mm256_add_epi8(shb, _mm256_set1_epi8((char)(2 * c)));
        const __m256i s1 = _mm256_add_epi8(shb, _mm256_set1_epi8((char)(2 * c + 1)));
        // [h]: rows 4h .. 4h + 3 (the 32-byte half h of each chunk); int16 pair sums as in x8_sb_sp
        __m256i pl[2], ph[2];
        pl[0] = ph[0] = pl[1] = ph[1] = _mm256_setzero_si256();
        UNROLL for (int p = 0; p < 4; p++) {
            const uint8_t *q = in + 64 * (4 * c + p);
            kvt_x8_prefetch_line(q, pf, npf);
            const __m256i yl = _mm256_set1_epi64x(x8_ld64(y->qs + 64 * c + 8 * p));
            const __m256i yh = _mm256_set1_epi64x(x8_ld64(y->qs + 64 * c + 32 + 8 * p));
            UNROLL for (int h = 0; h < 2; h++) {
                const __m256i w = x8_ld256(q + 32 * h);
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
                if (q5) { // bits 2c (lo) and 2c + 1 (hi) of the rows' qh bytes to bit 4
                    const __m256i qh = x8_ld256(in + KVT_X8_SB + 64 * p + 32 * h), m10 = _mm256_set1_epi8(0x10);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(kvt_bit_to4_256(qh, 2 * c), m10));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(kvt_bit_to4_256(qh, 2 * c + 1), m10));
                }
                pl[h] = _mm256_add_epi16(pl[h], _mm256_maddubs_epi16(lo, yl));
                ph[h] = _mm256_add_epi16(ph[h], _mm256_maddubs_epi16(hi, yh));
                __asm__("" : "+x"(pl[h]), "+x"(ph[h])); // a chain, not a tree (above)
            }
        }
        UNROLL for (int h = 0; h < 2; h++) {
            is[h] = _mm256_add_epi32(is[h], _mm256_madd_epi16(pl[h], _mm256_shuffle_epi8(sc[h], s0)));
            is[h] = _mm256_add_epi32(is[h], _mm256_madd_epi16(ph[h], _mm256_shuffle_epi8(sc[h], s1)));
            __asm__ volatile("" : "+x"(is[h])); // this slice's sums taken here (above)
        }
    }
    UNROLL for (int l = 16; l < KVT_X8_SB / 64; l++) kvt_x8_prefetch_line(in + 64 * l, pf, npf);
    if (q5) UNROLL for (int l = KVT_X8_SB / 64; l < KVT_Q5X8_SB / 64; l++) kvt_x8_prefetch_line(in + 64 * l, pf, npf);
    x8_sb_z_end(in, is, y, acc, macc);
}

// q5_K_x8's default since 2026-12-06 (kq5h; x8_sb_z with q5 is study form 5 now): x8_sb_z's integers (the same S, M:
// the same bits) with the loop over the halves h (rows 4h .. 4h + 3) outside the slices, so that one half's scales,
// sums and chains are live at a time (x8_sb_z with q5 holds 16 ymm values in its inner loop, and GCC spilled about 30
// a super-block: objdump, 30 -> 3.6 stack moves a super-block, ~700 -> ~680 instructions); each activation quad is
// broadcast twice, once per half (from L1). Paired on the AMD EPYC Zen 3 (kq_decode_bench -s avx2, 2 threads, gate
// and down shapes, -B v=5 the old form): from L3 (-M 8) 1.038x, from DRAM 1.006x (docs/log/BENCHMARKS-kernels-6.md).
INLINE void x8_sb_z5h(const uint8_t *in, const kvt_block_q8_K *y, __m256 *acc, __m256 *macc, int64_t pf, const int npf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), m10 = _mm256_set1_epi8(0x10);
    const __m256i shb = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128,
                                         0, -128, 0, -128, 0, -128, 0, -128, 8, -128, 8, -128, 8, -128, 8, -128);
    __m256i is[2];
    UNROLL for (int h = 0; h < 2; h++) {
        __m256i sc;
        {
            const __m256i H = x8_ld256(in + 1088), L = x8_ld256(in + 1024 + 32 * h);
            sc = _mm256_or_si256(_mm256_and_si256(L, m4), _mm256_and_si256(h ? H : _mm256_slli_epi16(H, 4), m30));
        }
        // laundered per half: else GCC shares the broadcasts of y between the halves and keeps them on the stack
        const kvt_block_q8_K *yq = y;
        __asm__ volatile("" : "+r"(yq));
        __m256i s = _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 4; c++) {
            const __m256i s0 = _mm256_add_epi8(shb, _mm256_set1_epi8((char)(2 * c)));
            const __m256i s1 = _mm256_add_epi8(shb, _mm256_set1_epi8((char)(2 * c + 1)));
            __m256i pl = _mm256_setzero_si256(), ph = pl;
            UNROLL for (int p = 0; p < 4; p++) {
                const uint8_t *q = in + 64 * (4 * c + p);
                if (h == 0) kvt_x8_prefetch_line(q, pf, npf);
                const __m256i yl = _mm256_set1_epi64x(x8_ld64(yq->qs + 64 * c + 8 * p));
                const __m256i yh = _mm256_set1_epi64x(x8_ld64(yq->qs + 64 * c + 32 + 8 * p));
                const __m256i w = x8_ld256(q + 32 * h), qh = x8_ld256(in + KVT_X8_SB + 64 * p + 32 * h);
                const __m256i lo = _mm256_or_si256(_mm256_and_si256(w, m4), _mm256_and_si256(kvt_bit_to4_256(qh, 2 * c), m10));
                const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4),
                                                   _mm256_and_si256(kvt_bit_to4_256(qh, 2 * c + 1), m10));
                pl = _mm256_add_epi16(pl, _mm256_maddubs_epi16(lo, yl));
                ph = _mm256_add_epi16(ph, _mm256_maddubs_epi16(hi, yh));
                __asm__("" : "+x"(pl), "+x"(ph)); // a chain, not a tree (x8_sb_z)
            }
            s = _mm256_add_epi32(s, _mm256_madd_epi16(pl, _mm256_shuffle_epi8(sc, s0)));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(ph, _mm256_shuffle_epi8(sc, s1)));
            __asm__ volatile("" : "+x"(s)); // this slice's sums taken here
        }
        is[h] = s;
    }
    UNROLL for (int l = 16; l < KVT_Q5X8_SB / 64; l++) kvt_x8_prefetch_line(in + 64 * l, pf, npf);
    x8_sb_z_end(in, is, y, acc, macc);
}

// x8_groups256l with x8_sb_z (npf as there; pf the distance when npf > 0), y laundered as there; q5: q5_K_x8 (2: x8_sb_z5h).
INLINE void x8_groups256z(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,
                          int64_t ystep, int64_t pf, const int npf, const int q5) {
    __m256 acc[4], macc[4];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = macc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) UNROLL for (int k = 0; k < ns; k++) {
        const kvt_block_q8_K *y = yb + b;
        __asm__ volatile("" : "+r"(y));
        if (q5 == 2) x8_sb_z5h(G + k * step + b * KVT_Q5X8_SB, y, &acc[k], &macc[k], pf, npf);
        else x8_sb_z(G + k * step + b * (q5 ? KVT_Q5X8_SB : KVT_X8_SB), y, &acc[k], &macc[k], pf, npf, q5);
    }
    UNROLL for (int k = 0; k < ns; k++) _mm256_storeu_ps(Y + k * ystep, _mm256_sub_ps(acc[k], macc[k]));
}
#define X8_GZ(NAME, NPF)                                                                                               \
    INLINE void NAME(int ns, int64_t nb, const uint8_t *G, int64_t step, const kvt_block_q8_K *yb, float *Y,           \
                     int64_t ystep, int64_t pf) {                                                                      \
        x8_groups256z(ns, nb, G, step, yb, Y, ystep, pf, NPF, Q5);                                                     \
    }
#define Q5 0
X8_GZ(x8_groupsz1, 1)
X8_GZ(x8_groupsz2, 2)
X8_GZ(x8_groupsz3, 3)
#undef Q5
#define Q5 1
X8_GZ(x8_groups5z0, 0)
X8_GZ(x8_groups5z2, 2)
X8_GZ(x8_groups5z3, 3)
#undef Q5
#define Q5 2
X8_GZ(x8_groups5hz0, 0)
X8_GZ(x8_groups5hz2, 2)
X8_GZ(x8_groups5hz3, 3)
#undef Q5

#endif

// Y[8g + r] for the groups g in [g0, g1) of the q4_K_x8 matrix W (n columns) against the q8_K row y.
// The groups [g0, g1) of a decode in ns streams (1, 2 or 4) through GROUPS (bits_avx2.h KVT_X8_STREAMS).
#define X8_DECODE_NS(NAME, GROUPS)                                                                                   \
    static void NAME(int ns, int64_t nb, const uint8_t *w, int64_t g0, int64_t g1, const kvt_block_q8_K *y, float *Y,   \
                     int64_t pf) {                                                                                       \
        KVT_X8_STREAMS(GROUPS, ns, nb, w, nb * KVT_X8_SB, g0, g1, y, Y, pf);                                             \
    }
X8_DECODE_NS(x8_decode_ns, x8_groups_isa)
#ifndef KVT_SIMD_AVX512
X8_DECODE_NS(x8_decode_nsl, x8_groups256l)
X8_DECODE_NS(x8_decode_z1, x8_groupsz1)
X8_DECODE_NS(x8_decode_z2, x8_groupsz2)
X8_DECODE_NS(x8_decode_z3, x8_groupsz3)
// the default with prefetch: into L2 pf ahead and L1 KVT_X8_PF_NEAR ahead, or into L1 only where pf is no farther
static void x8_decode_zd(int ns, int64_t nb, const uint8_t *w, int64_t g0, int64_t g1, const kvt_block_q8_K *y, float *Y,
                         int64_t pf) {
    if (kvt_x8_pf_kind(pf) == 2) x8_decode_z2(ns, nb, w, g0, g1, y, Y, pf);
    else x8_decode_z3(ns, nb, w, g0, g1, y, Y, pf);
}

// Y[8g + r] for the groups g in [g0, g1) of the q5_K_x8 matrix W (n columns) against the q8_K row y: x8_sb_z5h's
// arithmetic (x8_sb_z's with the fifth bits), the q5_K bits (matmul.h). The one q5_K_x8 GEMV: on AVX-512 machines too
// (matmul.c). In 2 streams (study forms, kvt_kernels_decode_variant(KVT_TYPE_Q5_K_X8): 1, 2, 4 streams; 5 x8_sb_z with
// q5, the default until kq5h, in 2 streams); with the CPU's prefetch (kvt_kernels_prefetch_type(KVT_TYPE_Q5_K_X8): q4_K_x8's distance) as x8_decode_zd, else none.
#define X8_DECODE5(NAME, GROUPS)                                                                                     \
    static void NAME(int ns, int64_t nb, const uint8_t *w, int64_t g0, int64_t g1, const kvt_block_q8_K *y, float *Y,   \
                     int64_t pf) {                                                                                       \
        KVT_X8_STREAMS(GROUPS, ns, nb, w, nb * KVT_Q5X8_SB, g0, g1, y, Y, pf);                                           \
    }
X8_DECODE5(x8_decode5_z0, x8_groups5z0)
X8_DECODE5(x8_decode5_z2, x8_groups5z2)
X8_DECODE5(x8_decode5_z3, x8_groups5z3)
X8_DECODE5(x8_decode5h_z0, x8_groups5hz0)
X8_DECODE5(x8_decode5h_z2, x8_groups5hz2)
X8_DECODE5(x8_decode5h_z3, x8_groups5hz3)
void kvt_q5kx8_gemv_avx2(int64_t n, const void *W, int64_t g0, int64_t g1, const void *y, float *Y) {
    const int64_t nb = n / KVT_QK_K, pf = kvt_kernels_prefetch_type(KVT_TYPE_Q5_K_X8);
    const int v = kvt_kernels_decode_variant(KVT_TYPE_Q5_K_X8), ns = v == 1 || v == 4 ? v : 2;
    if (v != 5) {
        if (!pf) x8_decode5h_z0(ns, nb, W, g0, g1, y, Y, 0);
        else if (kvt_x8_pf_kind(pf) == 2) x8_decode5h_z2(ns, nb, W, g0, g1, y, Y, pf);
        else x8_decode5h_z3(ns, nb, W, g0, g1, y, Y, pf);
        return;
    }
    if (!pf) x8_decode5_z0(ns, nb, W, g0, g1, y, Y, 0);
    else if (kvt_x8_pf_kind(pf) == 2) x8_decode5_z2(ns, nb, W, g0, g1, y, Y, pf);
    else x8_decode5_z3(ns, nb, W, g0, g1, y, Y, pf);
}
// Small batches: Y[t * ldy + 8g + r] for the groups [g0, g1) and the n_tok q8_K rows X (stride xrs bytes): the GEMV's
// arithmetic token by token per group (the group's rows then come from L1/L2), so each output is the GEMV's.
void kvt_q5kx8_gemv_nt_avx2(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, size_t xrs, int64_t n_tok,
                            float *Y, int64_t ldy) {
    const int64_t nb = n / KVT_QK_K;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t t = 0; t < n_tok; t++)
            x8_groups256z(1, nb, (const uint8_t *)W + g * nb * KVT_Q5X8_SB, 0,
                          (const kvt_block_q8_K *)((const char *)X + t * (int64_t)xrs), Y + t * ldy + 8 * g, 0, 0, 0, 1);
}
#endif
#ifdef KVT_SIMD_AVX512
// study form 8: the arithmetic before k11k (x8_groups512o) in X8_NS streams, for paired comparisons
X8_DECODE_NS(x8_decode_ns_o, x8_groups512o)
// study form 9: k11k's arithmetic and spread prefetches into L2 only (before the L1 prefetch)
X8_DECODE_NS(x8_decode_ns_f, x8_groups512f)
#endif

void KQX8_GEMV_FN(int64_t n, const void *W, int64_t g0, int64_t g1, const void *y, float *Y) {
    const int64_t nb = n / KVT_QK_K, pf = kvt_kernels_prefetch_type(KVT_TYPE_Q4_K_X8);
    // a study form (matmul.h kvt_kernels_decode_variant: 1, 2, 4 streams, x8_decode_ns), else the default below
    const int v = kvt_kernels_decode_variant(KVT_TYPE_Q4_K_X8);
    if (v == 1 || v == 2 || v == 4) {
        x8_decode_ns(v, nb, W, g0, g1, y, Y, pf);
        return;
    }
#ifdef KVT_SIMD_AVX512
    if (v == 8 || v == 9) {
        (v == 8 ? x8_decode_ns_o : x8_decode_ns_f)(X8_NS, nb, W, g0, g1, y, Y, pf);
        return;
    }
    // with prefetch X8_NS streams: groups g + k * h (h = the groups / X8_NS); the rest two at a time, then one;
    // without (AMD) one group at a time
    x8_decode_ns(pf ? X8_NS : 1, nb, W, g0, g1, y, Y, pf);
#else
    // with prefetch: x8_groups256z in two streams, into L2 pf ahead and L1 KVT_X8_PF_NEAR ahead, or where pf is no
    // farther than that into L1 only (z4k: on the AMD EPYC Zen 3 at 1024 bytes the same rate as both prefetches, paired
    // 1.01 / 1.00, 18 instructions a super-block fewer). Study forms: 10 the default before z4k (x8_groups256l: the same
    // prefetches in x8_sb_sp); x8_groups256z into 11 L2 only, 12 L2 and L1, 13 L1 only (whatever pf), 14 the default in
    // 4 streams; 5, 6, 7 x8_pairs with x8_sb_sp's prefetches at once (5: as before k11k), spread into L2 (6: k11k),
    // into L2 and L1 (7: before k4r); 9 x8_groups256l in 4 streams, 8 x8_groups256l without prefetch. Without prefetch
    // (pf 0) x8_pairs as before (AMD Zen 4 under KVT_ISA=avx2: not measured here).
    if (pf && v >= 10 && v <= 14) {
        if (v == 10) x8_decode_nsl(2, nb, W, g0, g1, y, Y, pf);
        else if (v == 11) x8_decode_z1(2, nb, W, g0, g1, y, Y, pf);
        else if (v == 12) x8_decode_z2(2, nb, W, g0, g1, y, Y, pf);
        else if (v == 13) x8_decode_z3(2, nb, W, g0, g1, y, Y, pf);
        else x8_decode_zd(4, nb, W, g0, g1, y, Y, pf);
    } else if (v == 5 && pf) x8_pairs(nb, W, g0, g1, y, Y, pf, 0);
    else if (v == 6 && pf) x8_pairs(nb, W, g0, g1, y, Y, pf, 1);
    else if (v == 7 && pf) x8_pairs(nb, W, g0, g1, y, Y, pf, 2);
    else if (v == 9 && pf) x8_decode_nsl(4, nb, W, g0, g1, y, Y, pf);
    else if (pf) x8_decode_zd(2, nb, W, g0, g1, y, Y, pf);
    else if (v == 8) x8_decode_nsl(2, nb, W, g0, g1, y, Y, 0);
    else x8_pairs(nb, W, g0, g1, y, Y, 0, 0);
#endif
}
