// q80x8.h - the GEMV of q8_0_x8 (q8_0 repacked at load, 8 rows interleaved: quant.h), included by matmul_avx2.c
// for both of its builds after x32_prep (whose prepared activation rows it reads).
//
// One activation row against groups of 8 rows, rows in the lanes, each row summed in its ISA's q8_0 order of
// matmul.h, so every output has the bits of the q8_0 kernels on the unpacked rows:
//  - AVX2 (q8_0_row1's order): per block the exact int32 total S_r of row r's 32 products (sign trick, maddubs +
//    madd: the same element pairs as q8_0_row1, so even its int16 wrap cases agree), then acc_r = acc_r +
//    (float(S_r) * dx_r) * dy, lane r of one vector. Per block four 64-byte chunks (two 32-byte loads each) and
//    the 8 rows' d in one 16-byte load; the 8 totals come out of one hadd in the lane order 0 1 4 5 2 3 6 7,
//    put back by one permute.
//  - AVX-512 (x32_row's order, weights offset by 128): x32_row keeps per row 32 float chains, acc[k & 1] lane
//    8h + i taking block j = 2k + h of each full 8-block group (quad i: elements 4i..4i+3), i.e. the chain
//    (j mod 4, quad i); here chain (j mod 4, quad 2P + h) of row r is lane 2r + h of acc[j mod 4][P] (16 zmm), fed
//    by one VPDPBUSD per 64-byte chunk against the 8 activation bytes of chunk P broadcast (no shuffle) and
//    D_j[r] = dx_r * dy_j in lanes 2r, 2r + 1. x32_row's cacc lane j (fma(dx, c, cacc), c from x32_prep) is
//    lane r of cacc[j]; its tail (blocks past the last full group) and its final sums
//    (_mm512_reduce_add_ps(acc0 + acc1), gcc's tree, then + kvt_hsum8(cacc), + tail) are the same additions done
//    lane-wise over the 8 rows.
// Batches run the GEMV token by token per group (the group's rows then come from L1/L2): an output is the
// GEMV's whatever the batch. Software prefetch in decode: kvt_kernels_prefetch_type(KVT_TYPE_Q8_0_X8) bytes ahead,
// into L1 too where kvt_kernels_prefetch_l1 says so (AVX2 on AMD Zen 3 not: z4q8), per CPU (quant.h: none on
// AMD Zen 4, where 256-4096 bytes ahead measured no gain (Zen 3 gains: BENCHMARKS-kernels-3.md, z3dec), docs/log/BENCHMARKS-kernels-2.md; Intel: the same log, intel11).

// Decode with prefetch reads Q80X8_NS groups at once (group g + k * h of the call's groups, as q41x8.h), block by
// block in turn, each group its own chains: on the Intel Xeon (2 threads, kq_decode_bench's paired A/B, DRAM) one
// stream read q8_0_x8 at 81-94% of the probe's best pattern on the same bytes, 4 streams at 93-103% (B/A 1.12-1.21 on
// AVX2, 1.07-1.16 on AVX-512, ahead in 85-100% of 40 pairs, three sets; 2 streams 1.05-1.12; AVX-512 turns of 4 blocks
// no gain: docs/log/BENCHMARKS-kernels-2.md, ms11c). Without prefetch (AMD) one group at a time, as measured there.
#define Q80X8_NS 4

// The 5 lines from pf bytes past a block (272 bytes) at B (pf 0: none), and those KVT_X8_PF_NEAR bytes past it into
// L1 (paired 1.06-1.11x from DRAM on both ISAs on the Intel Xeon: docs/log/BENCHMARKS-kernels-3.md, k11q; on the AMD
// Zen 3 the AVX2 loop 1.01-1.09x faster without the L1 lines, Q80X8_PREFETCH_F's form 1: z4q8).
#define Q80X8_PREFETCH(B, pf)                                                                                          \
    do {                                                                                                               \
        if (pf)                                                                                                        \
            UNROLL for (int l_ = 0; l_ < 5; l_++) {                                                                    \
                _mm_prefetch((const char *)(B) + (pf) + 64 * l_, KVT_X8_PF_HINT);                                      \
                _mm_prefetch((const char *)(B) + KVT_X8_PF_NEAR + 64 * l_, _MM_HINT_T0);                               \
            }                                                                                                          \
    } while (0)

#ifdef KVT_SIMD_AVX512
#define Q80X8_MM_FN kvt_q80x8_mm_avx512
#define Q80X8_SCRATCH_FN kvt_q80x8_scratch_avx512
#else
#define Q80X8_MM_FN kvt_q80x8_mm_avx2
#define Q80X8_SCRATCH_FN kvt_q80x8_scratch_avx2
#endif

INLINE int64_t q80x8_ld64(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

#ifdef KVT_SIMD_AVX512
// The end of a group's sums (x32_row's): its tail blocks (past the last full 8-block group), the 32 chains acc of each
// row reduced, + hc (the rows' kvt_hsum8(cacc)), + tail, into Y[0..8).
INLINE void q80x8_finish(int64_t nb, const uint8_t *G, const float *pd, const float *pc, const int8_t *pq,
                         __m512 acc[4][4], __m256 hc, float *Y, int64_t pf) {
    const __m512i off = _mm512_set1_epi8(-128);
    // lanes 2r and 2r + 1 summed into lane r (exact int32 / the float pair sum), the even lanes gathered
    const __m512i even = _mm512_set_epi32(14, 12, 10, 8, 6, 4, 2, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    __m256 tail = _mm256_setzero_ps();
    for (int64_t ib = nb & ~(int64_t)7; ib < nb; ib++) { // x32_row's tail: tail += (dx * dy) * total, then tail += dx * c
        const uint8_t *B = G + ib * KVT_Q80X8_B;
        Q80X8_PREFETCH(B, pf);
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 256)));
        __m512i s = _mm512_setzero_si512();
        UNROLL for (int p = 0; p < 4; p++)
            s = _mm512_dpbusd_epi32(s, _mm512_xor_si512(_mm512_loadu_si512((const void *)(B + 64 * p)), off),
                                    _mm512_set1_epi64(q80x8_ld64(pq + 32 * ib + 8 * p)));
        s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_CDAB));
        const __m256 tot = _mm256_cvtepi32_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi32(even, s)));
        tail = _mm256_add_ps(tail, _mm256_mul_ps(_mm256_mul_ps(dx, _mm256_set1_ps(pd[ib])), tot));
        tail = _mm256_add_ps(tail, _mm256_mul_ps(dx, _mm256_set1_ps(pc[ib])));
    }
    // _mm512_reduce_add_ps(acc0 + acc1) of each row: A[8h + i] = chain(h, i) + chain(2 + h, i); T3[i] = A[8 + i] +
    // A[i]; T6[i] = T3[4 + i] + T3[i]; T8[i] = T6[i] + T6[2 + i]; main = T8[0] + T8[1] (float sums commute)
    __m512 X[2][4], T3[4];
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int p = 0; p < 4; p++) X[h][p] = _mm512_add_ps(acc[h][p], acc[2 + h][p]);
    UNROLL for (int p = 0; p < 4; p++) T3[p] = _mm512_add_ps(X[1][p], X[0][p]);
    const __m512 T8 = _mm512_add_ps(_mm512_add_ps(T3[2], T3[0]), _mm512_add_ps(T3[3], T3[1]));
    const __m512 M = _mm512_add_ps(T8, _mm512_permute_ps(T8, 0xB1));
    const __m256 main = _mm512_castps512_ps256(_mm512_permutexvar_ps(even, M));
    _mm256_storeu_ps(Y, _mm256_add_ps(_mm256_add_ps(main, hc), tail));
}

// Y[0..8) for the group at G (nb blocks) against the prepared row P (x32_prep, WT_Q8_0); prefetch pf bytes ahead.
INLINE void q80x8_group(int64_t nb, const uint8_t *G, const char *P, float *Y, int64_t pf) {
    const int64_t nbp = nb_pad(nb), nfull = nb & ~(int64_t)7;
    const float *pd = (const float *)P, *pc = pd + nbp;
    const int8_t *pq = (const int8_t *)(pc + nbp);
    const __m512i off = _mm512_set1_epi8(-128), dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512 acc[4][4];
    __m256 cacc[8];
    UNROLL for (int c = 0; c < 4; c++) UNROLL for (int p = 0; p < 4; p++) acc[c][p] = _mm512_setzero_ps();
    UNROLL for (int j = 0; j < 8; j++) cacc[j] = _mm256_setzero_ps();
    for (int64_t g = 0; g < nfull; g += 8) {
        UNROLL for (int j = 0; j < 8; j++) {
            const uint8_t *B = G + (g + j) * KVT_Q80X8_B;
            const int8_t *y = pq + 32 * (g + j);
            Q80X8_PREFETCH(B, pf);
            const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 256)));
            cacc[j] = _mm256_fmadd_ps(dx, _mm256_set1_ps(pc[g + j]), cacc[j]);
            const __m512 D = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_mul_ps(dx, _mm256_set1_ps(pd[g + j]))));
            UNROLL for (int p = 0; p < 4; p++) {
                const __m512i u = _mm512_xor_si512(_mm512_loadu_si512((const void *)(B + 64 * p)), off);
                const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_set1_epi64(q80x8_ld64(y + 8 * p)));
                acc[j & 3][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), D, acc[j & 3][p]);
            }
        }
    }
    const __m256 hc = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(cacc[0], cacc[4]), _mm256_add_ps(cacc[2], cacc[6])),
                                    _mm256_add_ps(_mm256_add_ps(cacc[1], cacc[5]), _mm256_add_ps(cacc[3], cacc[7])));
    q80x8_finish(nb, G, pd, pc, pq, acc, hc, Y, pf);
}

// ns groups at once (decode: Q80X8_NS, or a study form of kvt_kernels_decode_variant), G + k * step (k < ns), each
// with its own chains; per full 8-block group the streams take turns of `turn` blocks (1, or 4 in a study form: acc's
// index j & 3 is then the one-group order). A group's 8 cacc ymm folded lane-wise into 4 zmm (Z[i] = cacc[2i] | cacc[2i + 1], updated under a half mask:
// the same FMAs), so a group keeps 20 zmm; hc = low + high of (Z0 + Z2) + (Z1 + Z3), the one-group sum's order.
#define Q80X8_NS_MAX 4
INLINE void q80x8_groups512(int ns, int turn, int64_t nb, const uint8_t *G, int64_t step, const char *P, float *Y,
                            int64_t ystep, int64_t pf) {
    const int64_t nbp = nb_pad(nb), nfull = nb & ~(int64_t)7;
    const float *pd = (const float *)P, *pc = pd + nbp;
    const int8_t *pq = (const int8_t *)(pc + nbp);
    const __m512i off = _mm512_set1_epi8(-128), dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512 acc[Q80X8_NS_MAX][4][4], Z[Q80X8_NS_MAX][4];
    UNROLL for (int k = 0; k < ns; k++) {
        UNROLL for (int c = 0; c < 4; c++) UNROLL for (int p = 0; p < 4; p++) acc[k][c][p] = _mm512_setzero_ps();
        UNROLL for (int i = 0; i < 4; i++) Z[k][i] = _mm512_setzero_ps();
    }
    for (int64_t g = 0; g < nfull; g += 8) {
        UNROLL for (int j0 = 0; j0 < 8; j0 += turn) UNROLL for (int k = 0; k < ns; k++) UNROLL for (int j = j0; j < j0 + turn; j++) {
            const uint8_t *B = G + k * step + (g + j) * KVT_Q80X8_B;
            const int8_t *y = pq + 32 * (g + j);
            Q80X8_PREFETCH(B, pf);
            const __m512 dx = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(B + 256))));
            Z[k][j >> 1] = _mm512_mask3_fmadd_ps(dx, _mm512_set1_ps(pc[g + j]), Z[k][j >> 1], (j & 1) ? 0xFF00 : 0x00FF);
            const __m512 D = _mm512_permutexvar_ps(dup, _mm512_mul_ps(dx, _mm512_set1_ps(pd[g + j])));
            UNROLL for (int p = 0; p < 4; p++) {
                const __m512i u = _mm512_xor_si512(_mm512_loadu_si512((const void *)(B + 64 * p)), off);
                const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_set1_epi64(q80x8_ld64(y + 8 * p)));
                acc[k][j & 3][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), D, acc[k][j & 3][p]);
            }
        }
    }
    UNROLL for (int k = 0; k < ns; k++) {
        const __m512 S = _mm512_add_ps(_mm512_add_ps(Z[k][0], Z[k][2]), _mm512_add_ps(Z[k][1], Z[k][3]));
        const __m256 hc = _mm256_add_ps(_mm512_castps512_ps256(S), _mm512_extractf32x8_ps(S, 1));
        q80x8_finish(nb, G + k * step, pd, pc, pq, acc[k], hc, Y + k * ystep, pf);
    }
}
// The groups [g0, g1) of a decode in ns streams (2 or 4: group g + k * h, as q41x8.h), then pairs, then one; turn4:
// streams in turns of 4 blocks (a study form), else block by block.
static void q80x8_decode(int ns, int turn4, int64_t nb, const uint8_t *W, int64_t g0, int64_t g1, const char *P, float *Y,
                         int64_t pf) {
    const int64_t gb = nb * KVT_Q80X8_B, h = (g1 - g0) / ns;
    int64_t g = g0;
    for (; g < g0 + h; g++) {
        if (ns == 4 && !turn4) q80x8_groups512(4, 1, nb, W + g * gb, h * gb, P, Y + 8 * g, 8 * h, pf);
        else if (ns == 4) q80x8_groups512(4, 4, nb, W + g * gb, h * gb, P, Y + 8 * g, 8 * h, pf);
        else if (turn4) q80x8_groups512(2, 4, nb, W + g * gb, h * gb, P, Y + 8 * g, 8 * h, pf);
        else q80x8_groups512(2, 1, nb, W + g * gb, h * gb, P, Y + 8 * g, 8 * h, pf);
    }
    for (g = g0 + ns * h; g + 2 <= g1; g += 2) {
        if (turn4) q80x8_groups512(2, 4, nb, W + g * gb, gb, P, Y + 8 * g, 8, pf);
        else q80x8_groups512(2, 1, nb, W + g * gb, gb, P, Y + 8 * g, 8, pf);
    }
    if (g < g1) q80x8_group(nb, W + g * gb, P, Y + 8 * g, pf);
}
#else
// The AVX2 prefetch of form pfm: 0 Q80X8_PREFETCH (into L2 and L1), 1 only the lines pf bytes ahead, into L2 (the
// default where kvt_kernels_prefetch_l1 says no: AMD Zen 3).
#define Q80X8_PREFETCH_F(B, pf, pfm)                                                                                   \
    do {                                                                                                               \
        if ((pfm) == 0) Q80X8_PREFETCH(B, pf);                                                                         \
        else if (pf)                                                                                                   \
            UNROLL for (int l_ = 0; l_ < 5; l_++) _mm_prefetch((const char *)(B) + (pf) + 64 * l_, KVT_X8_PF_HINT);    \
    } while (0)
// Y[k * ystep .. + 8) for the ns groups at G + k * step (k < ns; nb blocks each) against the prepared row P (x32_prep,
// WT_Q8_0), block by block in turn, each group its own chain; prefetch pf bytes ahead (form pfm).
INLINE void q80x8_groups(int ns, int pfm, int64_t nb, const uint8_t *G, int64_t step, const char *P, float *Y,
                         int64_t ystep, int64_t pf) {
    const float *pd = (const float *)P;
    const int8_t *pq = (const int8_t *)(pd + 2 * nb_pad(nb));
    const __m256i ones = _mm256_set1_epi16(1), order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    __m256 acc[4];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, G += KVT_Q80X8_B) {
        __m256i yv[4];
        UNROLL for (int p = 0; p < 4; p++) yv[p] = _mm256_set1_epi64x(q80x8_ld64(pq + 32 * b + 8 * p));
        UNROLL for (int k = 0; k < ns; k++) {
            const uint8_t *g = G + k * step;
            Q80X8_PREFETCH_F(g, pf, pfm);
            __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}; // rows 0-3, 4-7: lane 2r + h, quads 2P + h
            UNROLL for (int p = 0; p < 4; p++) {
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m256i w = _mm256_loadu_si256((const __m256i *)(g + 64 * p + 32 * h));
                    s[h] = _mm256_add_epi32(
                        s[h], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(yv[p], w)), ones));
                }
            }
            const __m256 tot = _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(_mm256_hadd_epi32(s[0], s[1]), order));
            const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 256)));
            acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_mul_ps(tot, dx), _mm256_set1_ps(pd[b])));
        }
    }
    UNROLL for (int k = 0; k < ns; k++) _mm256_storeu_ps(Y + k * ystep, acc[k]);
}
INLINE void q80x8_group(int64_t nb, const uint8_t *G, const char *P, float *Y, int64_t pf) {
    q80x8_groups(1, 0, nb, G, 0, P, Y, 0, pf);
}
// The groups [g0, g1) of a decode in ns streams (1, 2 or 4: group g + k * h, as q41x8.h), then pairs, then one, with
// the prefetch of form pfm (Q80X8_PREFETCH_F; inlined with pfm a constant).
INLINE void q80x8_decode_pfm(int ns, const int pfm, int64_t nb, const uint8_t *W, int64_t g0, int64_t g1, const char *P,
                             float *Y, int64_t pf) {
    const int64_t gb = nb * KVT_Q80X8_B, h = (g1 - g0) / ns;
    int64_t g = g0;
    for (; g < g0 + h; g++) {
        if (ns == 4) q80x8_groups(4, pfm, nb, W + g * gb, h * gb, P, Y + 8 * g, 8 * h, pf);
        else if (ns == 2) q80x8_groups(2, pfm, nb, W + g * gb, h * gb, P, Y + 8 * g, 8 * h, pf);
        else q80x8_groups(1, pfm, nb, W + g * gb, 0, P, Y + 8 * g, 0, pf);
    }
    for (g = g0 + ns * h; g + 2 <= g1; g += 2) q80x8_groups(2, pfm, nb, W + g * gb, gb, P, Y + 8 * g, 8, pf);
    if (g < g1) q80x8_groups(1, pfm, nb, W + g * gb, 0, P, Y + 8 * g, 0, pf);
}
static void q80x8_decode(int ns, int pfm, int64_t nb, const uint8_t *W, int64_t g0, int64_t g1, const char *P, float *Y,
                         int64_t pf) {
    if (pfm == 1) q80x8_decode_pfm(ns, 1, nb, W, g0, g1, P, Y, pf);
    else q80x8_decode_pfm(ns, 0, nb, W, g0, g1, P, Y, pf);
}
#endif

int64_t Q80X8_SCRATCH_FN(int64_t n, int64_t n_tok) { return n_tok * x32_prep_size(n); }

// Y[t * ldy + 8g + r] for the groups g in [g0, g1) of the q8_0_x8 matrix W (n columns) against the n_tok q8_0
// rows X, with Q80X8_SCRATCH_FN(n, n_tok) bytes of 64-aligned scratch (the prepared rows).
void Q80X8_MM_FN(int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y, int64_t ldy,
                 void *scratch) {
    const int64_t nb = n / KVT_QK, prs = x32_prep_size(n), xrs = nb * (int64_t)sizeof(kvt_block_q8_0);
    for (int64_t t = 0; t < n_tok; t++) x32_prep(n, (const char *)X + t * xrs, (char *)scratch + t * prs, WT_Q8_0);
    const int64_t pf = n_tok == 1 ? kvt_kernels_prefetch_type(KVT_TYPE_Q8_0_X8) : 0;
    if (n_tok == 1) { // Q80X8_NS streams with prefetch, or a study form (matmul.h: kvt_kernels_decode_variant)
        const int v = kvt_kernels_decode_variant(KVT_TYPE_Q8_0_X8);
        const int ns = v % 10 == 1 || v % 10 == 2 || v % 10 == 4 ? v % 10 : pf ? Q80X8_NS : 1;
#ifdef KVT_SIMD_AVX512
        if (ns > 1) {
            q80x8_decode(ns, v >= 10, nb, W, g0, g1, scratch, Y, pf);
#else
        // the L1 prefetch as the CPU's (kvt_kernels_prefetch_l1) or v / 100 says (1: without, 2: with)
        const int l1 = (v / 100) % 10 == 1 ? 0 : (v / 100) % 10 == 2 ? 1 : kvt_kernels_prefetch_l1(KVT_TYPE_Q8_0_X8);
        if (ns > 1 || (pf && !l1)) {
            q80x8_decode(ns, !l1, nb, W, g0, g1, scratch, Y, pf);
#endif
            return;
        }
    }
    if (pf) { // decode with prefetch (its own copy of the loop, so that the one without has no test per block)
        for (int64_t g = g0; g < g1; g++) q80x8_group(nb, (const uint8_t *)W + g * nb * KVT_Q80X8_B, scratch, Y + 8 * g, pf);
        return;
    }
    for (int64_t g = g0; g < g1; g++)
        for (int64_t t = 0; t < n_tok; t++)
            q80x8_group(nb, (const uint8_t *)W + g * nb * KVT_Q80X8_B, (const char *)scratch + t * prs, Y + t * ldy + 8 * g, 0);
}
