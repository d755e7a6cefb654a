// kq_avx512.h - q4_K / q6_K matmul kernels (and the batches of q5_K: the q4_K panel tile, and of iq4_xs: the panel tile
// with its codebook values, KQ_XS) for AVX-512 VNNI, included by matmul_avx2.c when built as
// matmul_avx512.c (KVT_SIMD_AVX512). Two paths, both in the one order of matmul.h ("only totals": per
// super-block the exact int32 total S of the scaled products, then acc = fma(float(S), d * dy, acc) in
// one scalar chain per output; q4_K also macc = macc + (dmin * dy) * float(M) with M the exact integer
// min dot; Y = acc - macc), the same order as the AVX2 kernels, so the bits are the same on both ISAs:
//  - rows (decode, 1..KP_NT tokens): one weight row at a time; the integer work of a super-block in
//    512-bit VPDPBUSD / VPDPWSSD (16 int32 partial sums), the totals of 4 super-blocks reduced together;
//  - gemm (KQ4_GEMM_MIN / KQ6_GEMM_MIN tokens on): a panel of 16 weight rows repacked once per call (rows in the
//    lanes: one VPDPBUSD with 4 activation bytes broadcast gives 16 rows' partial dots), reused by
//    every token; each lane sums its row's integer totals exactly and keeps the row's float chains.
// Both need only each row's exact integer totals, so any integer grouping gives the same bits.

// ------------------------------------------------------------- rows (GEMV)
// Prepared q8_K row, per super-block (KP bytes): int8 qs[256] (q4_K: in the order of the nibble planes:
// sub-blocks 0,2,1,3,4,6,5,7; q6_K: natural); int16 bs[8] (q4_K: sums of 32) or bs[16] (q6_K: sums of
// 16); float d.
#define KP 320
#define KP_NT 8 // activation rows per rows call (each output's arithmetic is its own)
// super-blocks whose totals are reduced together: 4 for one token; with more tokens one super-block,
// the totals of 4 tokens reduced together (kq_tokens)
#define KP_KB(NT) ((NT) == 1 ? 4 : 1)
#ifndef KQ_PF
#define KQ_PF 4096 // software prefetch distance of the rows kernels in bytes (0: none)
#endif
// q6_K rows in decode (one activation row) prefetch kvt_kernels_prefetch_type(KVT_TYPE_Q6_K) bytes ahead (q4_K rows: its
// own), per CPU (quant.h): none on AMD Zen 4 and Zen 5 (z5dq: neutral there, 0.97-1.06x paired at 1024 and 4096),
// where on Zen 4 the 14 prefetches per 4 super-blocks cost more than they hide (kq_decode_bench, 1 thread, DRAM: 20.4
// GB/s with 4096, 24.3-25.3 without; docs/log/BENCHMARKS-kernels-2.md); on Intel the x8 GEMVs' distance, into L2
// (matmul_avx2.c: KVT_X8_PF_HINT): 67-74% of the plain stream -> 93-102% (the same log, q4dec11). Batches: none.
static int64_t kp_prep_size(int64_t n) { return (n / KVT_QK_K) * KP; }
static void q4_K_prep(int64_t n, const void *x, void *p) {
    static const int ord[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q8_K *y = (const kvt_block_q8_K *)x + b;
        char *o = (char *)p + b * KP;
        for (int j = 0; j < 8; j++) memcpy(o + 32 * j, y->qs + 32 * ord[j], 32);
        int16_t bs[16] = {0};
        for (int j = 0; j < 8; j++) bs[j] = (int16_t)(y->bsums[2 * j] + y->bsums[2 * j + 1]);
        memcpy(o + 256, bs, 32);
        memcpy(o + 288, &y->d, 4);
    }
}
static void q6_K_prep(int64_t n, const void *x, void *p) {
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        const kvt_block_q8_K *y = (const kvt_block_q8_K *)x + b;
        char *o = (char *)p + b * KP;
        memcpy(o, y->qs, 256);
        memcpy(o + 256, y->bsums, 32);
        memcpy(o + 288, &y->d, 4);
    }
}

INLINE __m512i ld512(const void *p) { return _mm512_loadu_si512(p); }

// The float chains of up to 4 super-blocks b0 .. b0 + nk - 1 of one output, in block order.
// S: the integer totals (lane k: block b0 + k); M: q4_K's min dots (NULL: q6_K); y: the prepared row.
INLINE void kq_chain(__m128i S, const __m128i *M, int nk, const float *d, const float *dmin, const char *y,
                     float *acc, float *macc) {
    _Alignas(16) float sf[4], mf[4];
    _mm_store_ps(sf, _mm_cvtepi32_ps(S));
    if (M) _mm_store_ps(mf, _mm_cvtepi32_ps(*M));
    for (int k = 0; k < nk; k++) {
        float dy;
        memcpy(&dy, y + k * KP + 288, 4);
        *acc = fmaf(sf[k], d[k] * dy, *acc);
        if (M) *macc = *macc + dmin[k] * dy * mf[k];
    }
}

// One super-block (the first of is/mp) of NT > 1 tokens: the totals of 4 tokens reduced together, then
// each token's float chains (kq_chain's operations). M NULL: q6_K.
INLINE void kq_tokens(int NT, const __m512i *is, const __m128i *mp, float d, float dmin, const char *P, size_t prs,
                      float *acc, float *macc) {
    UNROLL for (int t0 = 0; t0 < NT; t0 += 4) {
        __m512i v[4];
        __m128i m[4];
        UNROLL for (int u = 0; u < 4; u++) {
            v[u] = t0 + u < NT ? is[t0 + u] : _mm512_setzero_si512();
            m[u] = mp && t0 + u < NT ? mp[t0 + u] : _mm_setzero_si128();
        }
        _Alignas(16) float sf[4], mf[4];
        _mm_store_ps(sf, _mm_cvtepi32_ps(kvt_hsum4x16_epi32(v[0], v[1], v[2], v[3])));
        if (mp) _mm_store_ps(mf, _mm_cvtepi32_ps(_mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3]))));
        UNROLL for (int u = 0; u < 4; u++) {
            if (t0 + u >= NT) break;
            float dy;
            memcpy(&dy, P + (t0 + u) * prs + 288, 4);
            acc[t0 + u] = fmaf(sf[u], d * dy, acc[t0 + u]);
            if (mp) macc[t0 + u] = macc[t0 + u] + dmin * dy * mf[u];
        }
    }
}

// pf: unused (no software prefetch in the q4_K rows: decode reads q4_K_x8, kqx8.h); the q6_K rows' signature.
INLINE void q4k_row(int64_t nb, const kvt_block_q4_K *x, const char *P, size_t prs, int NT, float *Y, int64_t ldy,
                    int64_t pf) {
    (void)pf;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    // i16 scale patterns: lanes 0,1 take scale byte A, lanes 2,3 byte B (see packs below)
    const __m512i shA = _mm512_set_epi8(-1, 3, -1, 3, -1, 3, -1, 3, -1, 2, -1, 2, -1, 2, -1, 2, -1, 3, -1, 3, -1, 3, -1, 3, -1, 2, -1, 2, -1, 2, -1, 2,
                                        -1, 1, -1, 1, -1, 1, -1, 1, -1, 0, -1, 0, -1, 0, -1, 0, -1, 1, -1, 1, -1, 1, -1, 1, -1, 0, -1, 0, -1, 0, -1, 0);
    const __m512i shB = _mm512_add_epi8(shA, _mm512_set1_epi16(4));
    float acc[KP_NT], macc[KP_NT];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = macc[t] = 0;
    for (int64_t b0 = 0; b0 < nb; b0 += KP_KB(NT)) {
        const int nk = nb - b0 < KP_KB(NT) ? (int)(nb - b0) : KP_KB(NT);
        __m512i is[4][KP_NT];
        __m128i mp[4][KP_NT];
        float d[4], dmin[4];
#if KQ_PF
        UNROLL for (int l = 0; l < 9; l++) _mm_prefetch((const char *)(x + b0) + KQ_PF + 64 * l, _MM_HINT_T0);
#endif
        UNROLL for (int k = 0; k < 4; k++) {
            if (k >= nk) {
                UNROLL for (int t = 0; t < NT; t++) is[k][t] = _mm512_setzero_si512(), mp[k][t] = _mm_setzero_si128();
                continue;
            }
            const kvt_block_q4_K *xb = x + b0 + k;
            uint8_t sc[8], mn[8];
            kvt_k_scales_unpack(xb->scales, sc, mn);
            uint64_t sc64, mn64;
            memcpy(&sc64, sc, 8), memcpy(&mn64, mn, 8);
            const __m512i scb = _mm512_broadcast_i32x4(_mm_cvtsi64_si128((long long)sc64));
            const __m512i s0 = _mm512_shuffle_epi8(scb, shA), s1 = _mm512_shuffle_epi8(scb, shB);
            const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn64));
            const __m512i q0 = ld512(xb->qs), q1 = ld512(xb->qs + 64);
            const __m512i w0 = _mm512_and_si512(q0, m4), w1 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
            const __m512i w2 = _mm512_and_si512(q1, m4), w3 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
            d[k] = _cvtsh_ss(xb->d), dmin[k] = _cvtsh_ss(xb->dmin);
            UNROLL for (int t = 0; t < NT; t++) {
                const char *y = P + t * prs + (b0 + k) * KP;
                // |p| <= 4 * 15 * 128: the packs to int16 are exact
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, ld512(y));
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, ld512(y + 64));
                const __m512i p2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w2, ld512(y + 128));
                const __m512i p3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w3, ld512(y + 192));
                const __m512i v = _mm512_madd_epi16(_mm512_packs_epi32(p0, p1), s0);
                is[k][t] = _mm512_dpwssd_epi32(v, _mm512_packs_epi32(p2, p3), s1);
                mp[k][t] = _mm_madd_epi16(m16, _mm_loadu_si128((const __m128i *)(y + 256)));
            }
        }
        if (NT > 1) {
            kq_tokens(NT, &is[0][0], &mp[0][0], d[0], dmin[0], P + b0 * KP, prs, acc, macc);
            continue;
        }
        UNROLL for (int t = 0; t < NT; t++) {
            const __m128i M = _mm_hadd_epi32(_mm_hadd_epi32(mp[0][t], mp[1][t]), _mm_hadd_epi32(mp[2][t], mp[3][t]));
            kq_chain(kvt_hsum4x16_epi32(is[0][t], is[1][t], is[2][t], is[3][t]), &M, nk, d, dmin, P + t * prs + b0 * KP,
                     &acc[t], &macc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) Y[t * ldy] = acc[t] - macc[t];
}

// pf: bytes ahead to prefetch the row's blocks (0: none; the rows loop passes kvt_kernels_prefetch() for one token).
INLINE void q6k_row(int64_t nb, const kvt_block_q6_K *x, const char *P, size_t prs, int NT, float *Y, int64_t ldy,
                    int64_t pf) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    // qh (32 bytes, in both 256-bit halves) shifted right by 0 (low half) / 2 (high half) per 16-bit word: then
    // bits 4-5 of each byte are the high bits of the high-nibble values (elements 64.. of the half), and shifted left
    // by 4 those of the low-nibble values; the bits a 16-bit shift moves across bytes are masked off
    const __m512i shq = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    // int16 scale words of half h (idx + 8h): 128-bit lane L takes group L (4 words) then group 4 + L (4 words)
    const __m512i sidx = _mm512_set_epi16(7, 7, 7, 7, 3, 3, 3, 3, 6, 6, 6, 6, 2, 2, 2, 2, 5, 5, 5, 5, 1, 1, 1, 1, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i sidx8 = _mm512_add_epi16(sidx, _mm512_set1_epi16(8));
    float acc[KP_NT];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = 0;
    for (int64_t b0 = 0; b0 < nb; b0 += KP_KB(NT)) {
        const int nk = nb - b0 < KP_KB(NT) ? (int)(nb - b0) : KP_KB(NT);
        __m512i is[4][KP_NT];
        float d[4];
        if (pf) UNROLL for (int l = 0; l < 14; l++) _mm_prefetch((const char *)(x + b0) + pf + 64 * l, KVT_X8_PF_HINT);
        UNROLL for (int k = 0; k < 4; k++) {
            if (k >= nk) {
                UNROLL for (int t = 0; t < NT; t++) is[k][t] = _mm512_setzero_si512();
                continue;
            }
            const kvt_block_q6_K *xb = x + b0 + k;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xb->scales));
            const __m512i scz = _mm512_castsi256_si512(sc16);
            const __m512i s0 = _mm512_permutexvar_epi16(sidx, scz), s1 = _mm512_permutexvar_epi16(sidx8, scz);
            __m512i w[4];
            UNROLL for (int h = 0; h < 2; h++) {
                const __m512i l = ld512(xb->ql + 64 * h);
                const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xb->qh + 32 * h)));
                const __m512i t = _mm512_srlv_epi16(hb, shq);
                w[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_slli_epi16(t, 4), m30));
                w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(t, m30));
            }
            d[k] = _cvtsh_ss(xb->d);
            UNROLL for (int t = 0; t < NT; t++) {
                const char *y = P + t * prs + (b0 + k) * KP;
                // start from -32 * sum_g sc_g * bsum_g; |p| <= 4 * 63 * 128: the packs are exact
                const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(y + 256)));
                __m512i v = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5)));
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[2 * h], ld512(y + 128 * h));
                    const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[2 * h + 1], ld512(y + 128 * h + 64));
                    v = _mm512_dpwssd_epi32(v, _mm512_packs_epi32(p0, p1), h ? s1 : s0);
                }
                is[k][t] = v;
            }
        }
        if (NT > 1) {
            kq_tokens(NT, &is[0][0], NULL, d[0], 0, P + b0 * KP, prs, acc, NULL);
            continue;
        }
        UNROLL for (int t = 0; t < NT; t++)
            kq_chain(kvt_hsum4x16_epi32(is[0][t], is[1][t], is[2][t], is[3][t]), NULL, nk, d, NULL, P + t * prs + b0 * KP,
                     &acc[t], NULL);
    }
    UNROLL for (int t = 0; t < NT; t++) Y[t * ldy] = acc[t];
}

// Decode (one token, with prefetch) of q6_K rows in KQ6_NS streams: rows r + k * h (k < ns) of a rows call, one
// super-block of each in turn, so that each core keeps misses of several streams in flight (as q41x8.h's groups; on the
// Intel Xeon, kq_decode_bench, 2 threads, DRAM, 2026-11-30: 34-37 GB/s where one row at a time read 26-28 in the same
// rounds; docs/log/BENCHMARKS-kernels-2.md, dec11c). A
// row's arithmetic is q6k_row's with NT = 1: the exact integer total of each super-block (here lane k of the
// reduction of the ns rows' block b, there lane b - b0 of 4 blocks' of one row), then acc = fmaf(S, d * dy, acc) in
// block order; so the same bits whatever the streams.
#ifndef KQ6_NS
#define KQ6_NS 4
#endif
// The default form also prefetches each block's lines KVT_X8_PF_NEAR (matmul_avx2.c) bytes ahead into L1 (as q41x8.h;
// study form 8: without; docs/log/BENCHMARKS-kernels-3.md, the lead's section).
// nd: each line nd bytes ahead also prefetched into L1 (0: none).
INLINE void q6k_rows_ns(int ns, int64_t nb, const kvt_block_q6_K *x, int64_t step, const char *y, float *Y,
                        int64_t ystep, int64_t pf, int64_t nd) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i shq = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sidx = _mm512_set_epi16(7, 7, 7, 7, 3, 3, 3, 3, 6, 6, 6, 6, 2, 2, 2, 2, 5, 5, 5, 5, 1, 1, 1, 1, 4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i sidx8 = _mm512_add_epi16(sidx, _mm512_set1_epi16(8));
    float acc[KQ6_NS];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = 0;
    for (int64_t b = 0; b < nb; b++, y += KP) {
        __m512i is[4];
        float d[4];
        UNROLL for (int k = 0; k < 4; k++) {
            if (k >= ns) {
                is[k] = _mm512_setzero_si512();
                continue;
            }
            const kvt_block_q6_K *xb = x + k * step + b;
            if (pf) UNROLL for (int l = 0; l < 4; l++) _mm_prefetch((const char *)xb + pf + 64 * l, KVT_X8_PF_HINT);
            if (pf && nd) UNROLL for (int l = 0; l < 4; l++) _mm_prefetch((const char *)xb + nd + 64 * l, _MM_HINT_T0);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xb->scales));
            const __m512i scz = _mm512_castsi256_si512(sc16);
            const __m512i s0 = _mm512_permutexvar_epi16(sidx, scz), s1 = _mm512_permutexvar_epi16(sidx8, scz);
            const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(y + 256)));
            __m512i v = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5)));
            UNROLL for (int h = 0; h < 2; h++) {
                const __m512i l = ld512(xb->ql + 64 * h);
                const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xb->qh + 32 * h)));
                const __m512i t = _mm512_srlv_epi16(hb, shq);
                const __m512i w0 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_slli_epi16(t, 4), m30));
                const __m512i w1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(t, m30));
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, ld512(y + 128 * h));
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, ld512(y + 128 * h + 64));
                v = _mm512_dpwssd_epi32(v, _mm512_packs_epi32(p0, p1), h ? s1 : s0);
            }
            is[k] = v;
            d[k] = _cvtsh_ss(xb->d);
        }
        _Alignas(16) float sf[4];
        _mm_store_ps(sf, _mm_cvtepi32_ps(kvt_hsum4x16_epi32(is[0], is[1], is[2], is[3])));
        float dy;
        memcpy(&dy, y + 288, 4);
        UNROLL for (int k = 0; k < ns; k++) acc[k] = fmaf(sf[k], d[k] * dy, acc[k]);
    }
    UNROLL for (int k = 0; k < ns; k++) Y[k * ystep] = acc[k];
}
// ns (1, 2, 4) streams: KQ6_NS, or a study form (matmul.h kvt_kernels_decode_variant(KVT_TYPE_Q6_K) % 10); nd: the
// L1 prefetch distance (KVT_X8_PF_NEAR in the default form, 0 in the study forms).
static void q6_K_dec(int ns, int64_t nb, const char *W, size_t wrs, int64_t nr, const char *P, float *Y, int64_t pf,
                     int64_t nd) {
    const int64_t step = (int64_t)wrs / (int64_t)sizeof(kvt_block_q6_K), h = nr / ns;
    const kvt_block_q6_K *x = (const kvt_block_q6_K *)W;
    int64_t r = 0;
    if (ns > 1) {
        if (ns == 4)
            for (; r < h; r++) q6k_rows_ns(4, nb, x + r * step, h * step, P, Y + r, h, pf, nd);
        else
            for (; r < h; r++) q6k_rows_ns(2, nb, x + r * step, h * step, P, Y + r, h, pf, nd);
        for (r = ns * h; r + 2 <= nr; r += 2) q6k_rows_ns(2, nb, x + r * step, step, P, Y + r, 1, pf, nd);
    }
    for (; r < nr; r++) q6k_rows_ns(1, nb, x + r * step, 0, P, Y + r, 0, pf, nd);
}

#define DEFINE_KP_ROWS(name, BT, TT)                                                                \
    static void name##_rows(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, \
                            int nt, float *Y, int64_t ldy, void *scratch) {                         \
        (void)scratch;                                                                              \
        const int64_t nb = n / KVT_QK_K, pf = nt == 1 ? kvt_kernels_prefetch_type(TT) : 0;         \
        const int sv_ = KP_DEC_##name && nt == 1 ? kvt_kernels_decode_variant(KVT_TYPE_Q6_K) % 10 : 0;  \
        if (KP_DEC_##name && nt == 1 && (sv_ == 1 || sv_ == 2 || sv_ == 4 || (pf && KQ6_NS > 1))) {   \
            const int st_ = sv_ == 1 || sv_ == 2 || sv_ == 4 || sv_ == 8; /* study forms: no L1 prefetch */ \
            q6_K_dec(sv_ == 1 || sv_ == 2 || sv_ == 4 ? sv_ : KQ6_NS, nb, W, wrs, nr, P, Y, pf, st_ ? 0 : KVT_X8_PF_NEAR); \
            return;                                                                                 \
        }                                                                                           \
        for (int64_t r = 0; r < nr; r++) {                                                          \
            const BT *x = (const BT *)((const char *)W + r * (int64_t)wrs);                         \
            switch (nt) {                                                                           \
            case 1: name##_row(nb, x, P, prs, 1, Y + r, ldy, pf); break;                            \
            case 2: name##_row(nb, x, P, prs, 2, Y + r, ldy, pf); break;                            \
            case 3: name##_row(nb, x, P, prs, 3, Y + r, ldy, pf); break;                            \
            case 4: name##_row(nb, x, P, prs, 4, Y + r, ldy, pf); break;                            \
            case 5: name##_row(nb, x, P, prs, 5, Y + r, ldy, pf); break;                            \
            case 6: name##_row(nb, x, P, prs, 6, Y + r, ldy, pf); break;                            \
            case 7: name##_row(nb, x, P, prs, 7, Y + r, ldy, pf); break;                            \
            default: name##_row(nb, x, P, prs, 8, Y + r, ldy, pf); break;                           \
            }                                                                                       \
        }                                                                                           \
    }
#define q4_K_row q4k_row
#define q6_K_row q6k_row
#define KP_DEC_q4_K 0
#define KP_DEC_q6_K 1
DEFINE_KP_ROWS(q4_K, kvt_block_q4_K, KVT_TYPE_Q4_K)
DEFINE_KP_ROWS(q6_K, kvt_block_q6_K, KVT_TYPE_Q6_K)

// ------------------------------------------------------------- gemm (16-row panel)
// Panel, per super-block (KQ_PSB bytes), rows past the real ones zero:
//   uint8 q[64 quads Q][16 rows][4]: the values (q4_K 0..15, q6_K 0..63) of elements 4Q .. 4Q + 3
//   int32 sc[NG groups][16 rows]: the scale of each group (q4_K 8 sub-blocks of 32, q6_K 16 groups of 16)
//   int16 mp[8 p][16 rows][2]: q4_K (m_p, m_p) (the min of sub-block p, against the q8_K sums of 16 of
//     elements 32p .. 32p + 15 and 32p + 16 .. 32p + 31); q6_K (sc_2p, sc_2p+1) (the offset term
//     -32 * sum_g sc_g * bsum_g)
//   float d[16], dmin[16]
// Per token t and super-block, lane r: S = exact total, acc = fma(float(S), d * dy, acc); q4_K:
// macc = macc + (dmin * dy) * float(M): the rows kernel's operations, lane by lane.
#define KQ_R 16
#ifndef KQ_T
#define KQ_T 8 // tokens per tile
#endif
// Tokens from which the tile beats the rows kernel in the model (qwen3-0.6b shape, 2 threads, 2026-11-28:
// from 3 tokens on the tile was slower at 4 and 8 tokens, its panel repacking costing more than it saves)
#ifndef KQ4_GEMM_MIN
#define KQ4_GEMM_MIN 9
#endif
#ifndef KQ6_GEMM_MIN
#define KQ6_GEMM_MIN 9
#endif
// q5_K (no rows kernel of its own: below the tile each token's GEMV, row by row; tl-q5_k, 2 threads, AMD Zen 4,
// 2026-12-04, `kvtier bench -p 2,...,8`: the tile from 5 tokens on 76-78 against 71-73 t/s, at 4 tokens 63-68 against
// 85-87, at 2 33-36 against 64-65; z4q5k)
#ifndef KQ5_GEMM_MIN
#define KQ5_GEMM_MIN 5
#endif
// kq_pack's kind of q5_K rows (the q4_K tile runs them: the same scales, mins and chains, values 0..31)
#define KQ_Q5 3
// kq_pack's and kq_tile's kind of iq4_xs rows (quant_lowbit.h): q holds codebook value + 128 (1..241, unsigned for
// VPDPBUSD), sc the signed ls - 32 of the 8 sub-blocks, mp (sc_p, sc_p): the offset's term 128 * sum_p sc_p * bsum_p is
// taken off the total (as q6_K's 32). The total is the GEMV's S (quant_lowbit_avx2.c), so the GEMV's bits. Tokens
// from which the tile runs (below it the GEMV per token):
#define KQ_XS 4
#ifndef KQXS_GEMM_MIN
#define KQXS_GEMM_MIN 9
#endif
#define KQ_SC 4096
#define KQ_MP (KQ_SC + 1024)
#define KQ_D (KQ_MP + 512)
#define KQ_DMIN (KQ_D + 64)
#define KQ_PSB (KQ_DMIN + 64)

// Transposes 16 rows of 8 dwords (row i in in[i]) into 8 zmm of 16 dwords
// (column kk, lane l = row l) stored at lo + 64*kk (kk < 4) and hi + 64*(kk - 4).
INLINE void transpose16x8_store2(const __m256i in[16], uint8_t *lo, uint8_t *hi) {
    // rows fed as [0-3, 8-11 | 4-7, 12-15] so that lane l ends up as row l
    static const int ord[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
    __m512i z[8], t[8], u[8];
    UNROLL for (int i = 0; i < 8; i++) z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(in[ord[i]]), in[ord[i + 8]], 1);
    UNROLL for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
    UNROLL for (int i = 0; i < 8; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    // u[c] (c < 4): 128-bit lanes = rows ord[0..3] col c, col c+4, rows ord[8..11] col c, col c+4
    UNROLL for (int c = 0; c < 4; c++) {
        _mm512_store_si512((void *)(lo + 64 * c), _mm512_shuffle_i32x4(u[c], u[c + 4], 0x88));
        _mm512_store_si512((void *)(hi + 64 * c), _mm512_shuffle_i32x4(u[c], u[c + 4], 0xdd));
    }
}
// The same, column kk at dst + 64*kk.
INLINE void transpose16x8_store(const __m256i in[16], uint8_t *dst) { transpose16x8_store2(in, dst, dst + 256); }

// Sub-blocks j and 4 + j (j < 4) of a q6_K_r block (quant.h: pair j, bytes i < 16 of the first half, 16 .. 31 of the
// second): A = ql & 63 are elements 0..7 and 16..23 of a sub-block, B = the qh nibble | ql's top two bits the elements
// 8 later. *lo: elements 0..15 of sub-block j (lane 0: A[0..7], B[0..7]) and of 4 + j (lane 1); *hi: elements 16..31.
INLINE void kq_sub2_q6r(const kvt_block_q6_K *b, int j, __m256i *lo, __m256i *hi) {
    const __m256i p = _mm256_loadu_si256((const __m256i *)(b->ql + 32 * j));
    const __m256i n = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * (j >> 1)));
    const __m256i a = _mm256_and_si256(p, _mm256_set1_epi8(0x3F));
    const __m256i nb = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(n, 4) : n, _mm256_set1_epi8(0x0F));
    const __m256i bv = _mm256_or_si256(nb, _mm256_and_si256(_mm256_srli_epi16(p, 2), _mm256_set1_epi8(0x30)));
    *lo = _mm256_unpacklo_epi64(a, bv);
    *hi = _mm256_unpackhi_epi64(a, bv);
}

// The 32 values of sub-block j (elements 32j .. 32j + 31) of a q4_K (Q6 0), q6_K (1) or q5_K (KQ_Q5) super-block, in
// element order. q5_K: q4_K's nibble and, as bit 4, bit j of the element's qh byte (0..31).
INLINE __m256i kq_sub(int Q6, const char *blk, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (Q6 == KQ_XS) { // elements 32j + e: e < 16 the low nibble of qs[16j + e], else the high nibble of qs[16j + e - 16]
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvt_iq4nl_values));
        const __m128i q = _mm_loadu_si128((const __m128i *)(((const kvt_block_iq4_xs *)blk)->qs + 16 * j));
        const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        return _mm256_xor_si256(_mm256_shuffle_epi8(lut, idx), _mm256_set1_epi8((char)0x80));
    }
    if (Q6 == KQ_Q5) {
        const kvt_block_q5_K *b = (const kvt_block_q5_K *)blk;
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (j >> 1)));
        const __m256i h = _mm256_loadu_si256((const __m256i *)b->qh);
        return _mm256_or_si256(_mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, m4),
                               _mm256_and_si256(kvt_bit_to4_256(h, j), _mm256_set1_epi8(0x10)));
    }
    if (!Q6) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(((const kvt_block_q4_K *)blk)->qs + 32 * (j >> 1)));
        return _mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
    }
    const kvt_block_q6_K *b = (const kvt_block_q6_K *)blk;
    const int h = j >> 2, k = j & 3;
    const __m256i ql = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (k & 1)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    const __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

// q4_K's 12 packed scale bytes to [sc0 .. sc7, m0 .. m7] (kvt_k_scales_unpack, in one vector).
INLINE __m128i kq_q4k_scales(const uint8_t *q) {
    int32_t c32;
    memcpy(&c32, q + 8, 4);
    const __m128i x = _mm_loadl_epi64((const __m128i *)q); // A = q[0..3], B = q[4..7]
    const __m128i c = _mm_cvtsi32_si128(c32);
    const __m128i y = _mm_unpacklo_epi32(c, _mm_srli_epi16(c, 4)); // C, C >> 4 (low nibbles kept below)
    const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(0x3F));
    const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(x, 2), _mm_set1_epi8(0x30)), _mm_and_si128(y, _mm_set1_epi8(0x0F)));
    return _mm_unpacklo_epi32(lo, hi);
}

// 16 x 16 bytes: o[c] byte r = v[r] byte c.
INLINE void kq_transpose16x16_epi8(const __m128i v[16], __m128i o[16]) {
    __m128i a[16], b[16];
    UNROLL for (int i = 0; i < 8; i++) {
        a[i] = _mm_unpacklo_epi8(v[2 * i], v[2 * i + 1]);
        a[8 + i] = _mm_unpackhi_epi8(v[2 * i], v[2 * i + 1]);
    }
    // a[i] (i < 8): rows 2i, 2i+1 interleaved, bytes 0..7; a[8 + i]: bytes 8..15
    UNROLL for (int h = 0; h < 2; h++)
        UNROLL for (int i = 0; i < 4; i++) {
            b[8 * h + i] = _mm_unpacklo_epi16(a[8 * h + 2 * i], a[8 * h + 2 * i + 1]);
            b[8 * h + 4 + i] = _mm_unpackhi_epi16(a[8 * h + 2 * i], a[8 * h + 2 * i + 1]);
        }
    // b[8h + i] (i < 4): rows 4i..4i+3, bytes 8h + 0..3; b[8h + 4 + i]: bytes 8h + 4..7
    UNROLL for (int h = 0; h < 4; h++)
        UNROLL for (int i = 0; i < 2; i++) {
            a[4 * h + i] = _mm_unpacklo_epi32(b[4 * h + 2 * i], b[4 * h + 2 * i + 1]);
            a[4 * h + 2 + i] = _mm_unpackhi_epi32(b[4 * h + 2 * i], b[4 * h + 2 * i + 1]);
        }
    // a[4h + 0]: rows 0..7, bytes 4h, 4h+1; a[4h + 1]: rows 8..15, same bytes; a[4h + 2], a[4h + 3]: bytes 4h+2, 4h+3
    UNROLL for (int h = 0; h < 4; h++)
        UNROLL for (int i = 0; i < 2; i++) {
            o[4 * h + 2 * i] = _mm_unpacklo_epi64(a[4 * h + 2 * i], a[4 * h + 2 * i + 1]);
            o[4 * h + 2 * i + 1] = _mm_unpackhi_epi64(a[4 * h + 2 * i], a[4 * h + 2 * i + 1]);
        }
}

// The panel's scale words of one super-block (KQ_SC, KQ_MP) from each row's 16 scale bytes s8[r].
// Q6: 0 q4_K's [sc0..7, m0..7] (unsigned), 1 q6_K's 16 signed scales, KQ_XS iq4_xs's 8 signed scales.
INLINE void kq_pack_scales(int Q6, const __m128i s8[KQ_R], uint8_t *pb) {
    __m128i col[16];
    kq_transpose16x16_epi8(s8, col); // col[c] lane r: byte c of row r
    const int sgn = Q6 != 0; // signed scales
    for (int g = 0; g < (Q6 == 1 ? 16 : 8); g++)
        _mm512_store_si512((void *)(pb + KQ_SC + 64 * g), sgn ? _mm512_cvtepi8_epi32(col[g]) : _mm512_cvtepu8_epi32(col[g]));
    for (int p = 0; p < 8; p++) { // int16 pairs: q4_K (m_p, m_p), q6_K (sc_2p, sc_2p+1), iq4_xs (sc_p, sc_p)
        const __m512i lo = Q6 == 1 ? _mm512_cvtepi8_epi32(col[2 * p]) : Q6 ? _mm512_cvtepi8_epi32(col[p]) : _mm512_cvtepu8_epi32(col[8 + p]);
        const __m512i hi = Q6 == 1 ? _mm512_cvtepi8_epi32(col[2 * p + 1]) : lo;
        const __m512i pr = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(hi, 16));
        _mm512_store_si512((void *)(pb + KQ_MP + 64 * p), pr);
    }
}

// Packs rows [0, nr) (nr <= 16) of nb super-blocks of q4_K (Q6 0), q6_K (1), q6_K_r (2: the q6_K panel) or q5_K
// (KQ_Q5: the q4_K panel with values 0..31; its d, dmin and scales where q4_K has them).
INLINE void kq_pack(int Q6, int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan) {
    const int K6 = Q6 == 1 || Q6 == 2; // a q6_K panel
    const size_t bs = K6 ? sizeof(kvt_block_q6_K) : Q6 == KQ_Q5 ? sizeof(kvt_block_q5_K)
                      : Q6 == KQ_XS ? sizeof(kvt_block_iq4_xs) : sizeof(kvt_block_q4_K);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pb = pan + b * KQ_PSB;
        float *d = (float *)(pb + KQ_D), *dmin = (float *)(pb + KQ_DMIN);
        const char *blk[KQ_R];
        __m128i s8[KQ_R]; // per row: q4_K [sc0..7, m0..7], q6_K the 16 signed scales
        UNROLL for (int r = 0; r < KQ_R; r++) {
            blk[r] = r < nr ? W + (size_t)r * wrs + (size_t)b * bs : NULL;
            d[r] = dmin[r] = 0;
            s8[r] = _mm_setzero_si128();
            if (blk[r] && K6) {
                const kvt_block_q6_K *x = (const kvt_block_q6_K *)blk[r];
                s8[r] = _mm_loadu_si128((const __m128i *)x->scales);
                d[r] = _cvtsh_ss(x->d);
            } else if (blk[r] && Q6 == KQ_XS) {
                const kvt_block_iq4_xs *x = (const kvt_block_iq4_xs *)blk[r];
                int8_t sc[16] = {0};
                for (int sb = 0; sb < 8; sb++) sc[sb] = (int8_t)(kvt_iq4_xs_scale(x, sb) - 32);
                s8[r] = _mm_loadu_si128((const __m128i *)sc);
                d[r] = _cvtsh_ss(x->d);
            } else if (blk[r] && Q6 == KQ_Q5) {
                const kvt_block_q5_K *x = (const kvt_block_q5_K *)blk[r];
                s8[r] = kq_q4k_scales(x->scales);
                d[r] = _cvtsh_ss(x->d), dmin[r] = _cvtsh_ss(x->dmin);
            } else if (blk[r]) {
                const kvt_block_q4_K *x = (const kvt_block_q4_K *)blk[r];
                s8[r] = kq_q4k_scales(x->scales);
                d[r] = _cvtsh_ss(x->d), dmin[r] = _cvtsh_ss(x->dmin);
            }
        }
        kq_pack_scales(Q6 == KQ_XS ? KQ_XS : K6, s8, pb);
        if (Q6 == 2) { // q6_K_r: sub-blocks j and 4 + j from the same bytes (quads 0..3 of both, then 4..7)
            UNROLL for (int j = 0; j < 4; j++) {
                __m256i lo[KQ_R], hi[KQ_R];
                UNROLL for (int r = 0; r < KQ_R; r++) {
                    if (blk[r]) kq_sub2_q6r((const kvt_block_q6_K *)blk[r], j, &lo[r], &hi[r]);
                    else lo[r] = hi[r] = _mm256_setzero_si256();
                }
                transpose16x8_store2(lo, pb + 512 * j, pb + 512 * (4 + j));
                transpose16x8_store2(hi, pb + 512 * j + 256, pb + 512 * (4 + j) + 256);
            }
            continue;
        }
        for (int j = 0; j < 8; j++) {
            __m256i v[KQ_R];
            UNROLL for (int r = 0; r < KQ_R; r++) v[r] = blk[r] ? kq_sub(Q6, blk[r], j) : _mm256_setzero_si256();
            transpose16x8_store(v, pb + 512 * j);
        }
    }
}

INLINE __m512i kq_bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// 16 packed rows x NT tokens (raw q8_K rows X) over all nb super-blocks.
INLINE void kq_tile(int Q6, int64_t nb, const uint8_t *pan, const char *X, size_t xrs, int NT, float *Y, int64_t ldy,
                    __mmask16 mask) {
    __m512 acc[KQ_T], macc[KQ_T];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = macc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = pan + b * KQ_PSB;
        const kvt_block_q8_K *y[KQ_T];
        UNROLL for (int t = 0; t < NT; t++) y[t] = (const kvt_block_q8_K *)(X + t * xrs) + b;
        __m512i isum[KQ_T];
        UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        const int K6 = Q6 == 1, NG = K6 ? 16 : 8, QG = 16 / NG * 4; // groups, quads per group
        for (int g = 0; g < NG; g++) {
            __m512i p[KQ_T];
            UNROLL for (int t = 0; t < NT; t++) p[t] = _mm512_setzero_si512();
            UNROLL for (int q = 0; q < 8; q++) {
                if (q >= QG) break;
                const __m512i w = _mm512_load_si512((const void *)(pb + 64 * (QG * g + q)));
                UNROLL for (int t = 0; t < NT; t++) p[t] = _mm512_dpbusd_epi32(p[t], w, kq_bcast32(y[t]->qs + 4 * (QG * g + q)));
            }
            const __m512i sc = _mm512_load_si512((const void *)(pb + KQ_SC + 64 * g));
            UNROLL for (int t = 0; t < NT; t++) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(p[t], sc));
        }
        const __m512 d = _mm512_load_ps((const void *)(pb + KQ_D));
        const __m512 dmin = _mm512_load_ps((const void *)(pb + KQ_DMIN));
        UNROLL for (int t = 0; t < NT; t++) {
            __m512i m = _mm512_setzero_si512(); // q4_K: M; q6_K, iq4_xs: sum_g sc_g * bsum_g
            UNROLL for (int p = 0; p < 8; p++)
                m = _mm512_dpwssd_epi32(m, _mm512_load_si512((const void *)(pb + KQ_MP + 64 * p)), kq_bcast32(y[t]->bsums + 2 * p));
            const __m512 dy = _mm512_set1_ps(y[t]->d);
            if (Q6) isum[t] = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(m, K6 ? 5 : 7));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dy), acc[t]);
            if (!Q6) macc[t] = _mm512_add_ps(macc[t], _mm512_mul_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(m)));
        }
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(Y + t * ldy, mask, Q6 ? acc[t] : _mm512_sub_ps(acc[t], macc[t]));
}

static int64_t kq_scratch(int64_t n, int64_t n_tok) {
    (void)n_tok;
    return (n / KVT_QK_K) * KQ_PSB;
}

#define KQ_TILE_T(Q6, T) \
    static __attribute__((noinline)) void kq_tile_##Q6##_##T(int64_t nb, const uint8_t *pan, const char *X, size_t xrs, \
                                                             float *Y, int64_t ldy, __mmask16 mask) { \
        kq_tile(Q6, nb, pan, X, xrs, T, Y, ldy, mask); \
    }
#define KQ_TILES(Q6) KQ_TILE_T(Q6, 1) KQ_TILE_T(Q6, 2) KQ_TILE_T(Q6, 3) KQ_TILE_T(Q6, 4) KQ_TILE_T(Q6, 5) \
    KQ_TILE_T(Q6, 6) KQ_TILE_T(Q6, 7) KQ_TILE_T(Q6, 8)
KQ_TILES(0)
KQ_TILES(1)
KQ_TILES(4) // KQ_XS
typedef void (*kq_tile_fn)(int64_t nb, const uint8_t *pan, const char *X, size_t xrs, float *Y, int64_t ldy,
                           __mmask16 mask);
static const kq_tile_fn kq_tiles[3][KQ_T] = { // q4_K, q6_K, iq4_xs
    {kq_tile_0_1, kq_tile_0_2, kq_tile_0_3, kq_tile_0_4, kq_tile_0_5, kq_tile_0_6, kq_tile_0_7, kq_tile_0_8},
    {kq_tile_1_1, kq_tile_1_2, kq_tile_1_3, kq_tile_1_4, kq_tile_1_5, kq_tile_1_6, kq_tile_1_7, kq_tile_1_8},
    {kq_tile_4_1, kq_tile_4_2, kq_tile_4_3, kq_tile_4_4, kq_tile_4_5, kq_tile_4_6, kq_tile_4_7, kq_tile_4_8}};

typedef void (*kq_pack_fn)(int Q6, int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan);
static void kq_pack_rows(int Q6, int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan) { kq_pack(Q6, nb, W, wrs, nr, pan); }

INLINE void kq_gemm_p(int Q6, kq_pack_fn pack, int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs,
                      int64_t n_tok, float *Y, int64_t ldy, void *scratch) {
    const int64_t nb = n / KVT_QK_K;
    uint8_t *pan = scratch;
    for (int64_t r0 = 0; r0 < nr; r0 += KQ_R) {
        const int rows = (int)(nr - r0 < KQ_R ? nr - r0 : KQ_R);
        pack(Q6, nb, (const char *)W + r0 * (int64_t)wrs, wrs, rows, pan);
        const __mmask16 mask = (__mmask16)((1u << rows) - 1);
        for (int64_t t0 = 0; t0 < n_tok; t0 += KQ_T) {
            const int nt = (int)(n_tok - t0 < KQ_T ? n_tok - t0 : KQ_T);
            kq_tiles[Q6 == KQ_XS ? 2 : Q6][nt - 1](nb, pan, (const char *)X + t0 * (int64_t)xrs, xrs, Y + t0 * ldy + r0, ldy, mask);
        }
    }
}
static void q4_K_gemm(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                      float *Y, int64_t ldy, void *scratch) {
    kq_gemm_p(0, kq_pack_rows, n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);
}
static void q6_K_gemm(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                      float *Y, int64_t ldy, void *scratch) {
    kq_gemm_p(1, kq_pack_rows, n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);
}
static void iq4_xs_gemm(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                        float *Y, int64_t ldy, void *scratch) {
    kq_gemm_p(KQ_XS, kq_pack_rows, n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);
}
// q5_K rows: the q4_K tile on their panel (KQ_Q5), the totals and chains of quant_avx2.c's q5_K GEMV, so its bits.
static void kq_pack_q5(int Q6, int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan) {
    (void)Q6;
    kq_pack(KQ_Q5, nb, W, wrs, nr, pan);
}
static void q5_K_gemm(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                      float *Y, int64_t ldy, void *scratch) {
    kq_gemm_p(0, kq_pack_q5, n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);
}
// q6_K_r rows (quant.h): the q6_K panel packed from them (kq_sub2_q6r), so the q6_K tile's bits.
static void kq_pack_q6r(int Q6, int64_t nb, const char *W, size_t wrs, int nr, uint8_t *pan) {
    (void)Q6;
    kq_pack(2, nb, W, wrs, nr, pan);
}
void kvt_q6kr_gemm_avx512(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                          float *Y, int64_t ldy, void *scratch) {
    kq_gemm_p(1, kq_pack_q6r, n, W, wrs, nr, X, xrs, n_tok, Y, ldy, scratch);
}
int64_t kvt_q6kr_gemm_scratch_avx512(int64_t n) { return kq_scratch(n, 0); }
