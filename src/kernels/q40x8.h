// q40x8.h - the kernels of q4_0_x8 and q5_0_x8 (q4_0 / q5_0 repacked at load, 8 rows interleaved: quant.h), included
// by matmul_avx2.c for both of its builds (AVX2: maddubs; with KVT_SIMD_AVX512 the same 256-bit code with VPDPBUSD and
// 32 registers). q5 (a constant per caller) selects q5_0: the nibbles or'ed with their fifth bits, offset 16.
//
// One row per lane, each row in q4_0's (q5_0's) order (matmul.h; the scalar reference's): per block b the exact int32
// total S_r of row r's 32 products (q - o) * y (o = 8, q5_0 16), then acc_r = acc_r + (float(S_r) * dx_r) * dy_b. The
// integer total is dot(q, y) - o * sum(y): the unsigned values against the activation's quads (four 32-byte loads hold
// quad Q of the 8 rows: the low nibbles against the activation dword Q, the high against dword 4 + Q, broadcast; q5_0's
// fifth bits from H, bit Q or 4 + Q of each byte moved to bit 4 by one 16-bit shift: kvt_bit_to4_256), plus
// c_b = -o * sum(y) from the prepared row. AVX2 adds maddubs results in int16 first (q4_0: all 8, each word 16
// products of at most 15 * 128, |sum| <= 30720; q5_0: the 4 low and the 4 high apart, 8 products of at most 31 * 128,
// <= 31744: exact), then widens with madd. Every integer sum is exact, so the float operations (a convert, two
// products, one sum per block) are the scalar reference's: the same bits on every ISA, whatever the batch, the streams
// or the row range.
//
// Decode: Q40X8_NS groups at once (bits_avx2.h KVT_X8_STREAMS) where the CPU's decode prefetches
// (kvt_kernels_prefetch_type), one group at a time without. Batches: per strip of groups (Q40X8_STRIP_BYTES of
// weights, kept in L2) tiles of Q40X8_TT tokens pass over its groups, each block's values unpacked once per tile.

#ifdef KVT_SIMD_AVX512
#define Q40X8_ISA(name) name##_avx512
#define Q40X8_TT 8
#else
#define Q40X8_ISA(name) name##_avx2
#define Q40X8_TT 4
#endif
#define Q40X8_NS 4
#ifndef Q40X8_STRIP_BYTES
#define Q40X8_STRIP_BYTES (256 * 1024)
#endif

// A prepared activation row: its q8_0 blocks, their dy as floats and c = -o * sum(y) per block.
typedef struct {
    const kvt_block_q8_0 *y;
    const float *dy;
    const int32_t *c;
} q40x8_act;

// (KVT_X8_STREAMS passes no type: one groups function per type, NAME calling FN with q5 Q5)
#define Q40X8_GROUPS_TYPED(NAME, FN, Q5)                                                                               \
    INLINE void NAME(int ns, int64_t nb, const uint8_t *G, int64_t step, const q40x8_act *A, float *Y, int64_t ystep,  \
                     int64_t pf) {                                                                                     \
        FN(Q5, ns, nb, G, step, A, Y, ystep, pf);                                                                      \
    }

INLINE void q40x8_prep(int64_t nb, const kvt_block_q8_0 *y, float *dy, int32_t *c, int q5) {
    for (int64_t b = 0; b < nb; b++) {
        int s = 0;
        for (int j = 0; j < KVT_QK; j++) s += y[b].qs[j];
        dy[b] = kvt_f16_to_f32(y[b].d);
        c[b] = (q5 ? -16 : -8) * s;
    }
}

INLINE __m256i q40x8_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// The 8 rows' exact totals of one block: lo[Q], hi[Q] the unsigned nibbles of quad Q, yv[0..8) the activation's
// dwords 0..7 broadcast, c its offset term.
INLINE __m256i q40x8_tot(const __m256i lo[4], const __m256i hi[4], const __m256i yv[8], __m256i c, int q5) {
#ifdef KVT_SIMD_AVX512
    (void)q5;
    __m256i s0 = c, s1 = _mm256_setzero_si256();
    UNROLL for (int q = 0; q < 4; q++) {
        s0 = _mm256_dpbusd_epi32(s0, lo[q], yv[q]);
        s1 = _mm256_dpbusd_epi32(s1, hi[q], yv[4 + q]);
    }
    return _mm256_add_epi32(s0, s1);
#else
    const __m256i one = _mm256_set1_epi16(1);
    __m256i p = _mm256_maddubs_epi16(lo[0], yv[0]), h = _mm256_maddubs_epi16(hi[0], yv[4]);
    UNROLL for (int q = 1; q < 4; q++) {
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[q], yv[q]));
        h = _mm256_add_epi16(h, _mm256_maddubs_epi16(hi[q], yv[4 + q]));
    }
    if (!q5) return _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p, h), one), c);
    return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p, one), _mm256_madd_epi16(h, one)), c);
#endif
}

// The unsigned values of block B: quad Q's low nibbles lo[Q], high nibbles hi[Q] (q5: with their fifth bits).
INLINE void q40x8_unpack(const uint8_t *B, __m256i lo[4], __m256i hi[4], int q5) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const __m256i H = q5 ? _mm256_loadu_si256((const __m256i *)(B + 144)) : _mm256_setzero_si256();
    UNROLL for (int q = 0; q < 4; q++) {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(B + 32 * q));
        lo[q] = _mm256_and_si256(w, m4);
        hi[q] = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        if (q5) {
            lo[q] = _mm256_or_si256(lo[q], _mm256_and_si256(kvt_bit_to4_256(H, q), b4));
            hi[q] = _mm256_or_si256(hi[q], _mm256_and_si256(kvt_bit_to4_256(H, 4 + q), b4));
        }
    }
}

// The lines of the block at p: 144 bytes (q5_0: 176), the lines of p, p + 64, p + 128 (and p + 175).
INLINE void q40x8_prefetch(const uint8_t *p, int q5) {
    UNROLL for (int l = 0; l < 3; l++) _mm_prefetch((const char *)p + 64 * l, KVT_X8_PF_HINT);
    if (q5) _mm_prefetch((const char *)p + 175, KVT_X8_PF_HINT);
}

// Y[k * ystep .. + 8) for the ns groups at G + k * step (k < ns; nb blocks each) against the prepared row A, block by
// block in turn, each group its own chain; the lines pf bytes ahead prefetched (0: none).
INLINE void q40x8_groups(int q5, int ns, int64_t nb, const uint8_t *G, int64_t step, const q40x8_act *A, float *Y,
                         int64_t ystep, int64_t pf) {
    __m256 acc[Q40X8_NS];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, G += q5 ? KVT_Q50X8_B : KVT_Q40X8_B) {
        const int8_t *y = A->y[b].qs;
        __m256i yv[8];
        UNROLL for (int i = 0; i < 8; i++) yv[i] = q40x8_bcast4(y + 4 * i);
        const __m256i c = _mm256_set1_epi32(A->c[b]);
        const __m256 dy = _mm256_set1_ps(A->dy[b]);
        UNROLL for (int k = 0; k < ns; k++) {
            const uint8_t *g = G + k * step;
            if (pf) q40x8_prefetch(g + pf, q5);
            __m256i lo[4], hi[4];
            q40x8_unpack(g, lo, hi, q5);
            const __m256 tot = _mm256_cvtepi32_ps(q40x8_tot(lo, hi, yv, c, q5));
            const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 128)));
            acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_mul_ps(tot, dx), dy));
        }
    }
    UNROLL for (int k = 0; k < ns; k++) _mm256_storeu_ps(Y + k * ystep, acc[k]);
}

#ifndef KVT_SIMD_AVX512
// The AVX2 decode since 2026-12-06 (q40z; 16 registers): q40x8_groups' operations (the same integers and float
// chain: the same bits) with the activation's 8 dwords broadcast again for each group from a laundered pointer, and
// each int16 chain kept a chain (an empty asm after each add), so that no value lives across the groups but the
// chains acc[k]: q40x8_groups keeps the 8 broadcasts, c and dy live across its 4 groups, and GCC spilled the
// accumulators and the pair sums (objdump: 36 stack moves of 213 instructions a 4-group step of q4_0). Paired on the
// AMD EPYC Zen 3 (kq_decode_bench -s avx2, 2 threads, gate and down): q4_0_x8 1.02-1.04x from L3, 1.005-1.056x from
// DRAM; q5_0_x8 1.23-1.28x and 1.13-1.16x (docs/log/BENCHMARKS-kernels-6.md, q40z).
INLINE void q40x8_groups_z(int q5, int ns, int64_t nb, const uint8_t *G, int64_t step, const q40x8_act *A, float *Y,
                           int64_t ystep, int64_t pf) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10), one = _mm256_set1_epi16(1);
    __m256 acc[Q40X8_NS];
    UNROLL for (int k = 0; k < ns; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, G += q5 ? KVT_Q50X8_B : KVT_Q40X8_B) {
        UNROLL for (int k = 0; k < ns; k++) {
            const uint8_t *g = G + k * step;
            if (pf) q40x8_prefetch(g + pf, q5);
            const int8_t *y = A->y[b].qs;
            __asm__ volatile("" : "+r"(y));
            const __m256i H = q5 ? _mm256_loadu_si256((const __m256i *)(g + 144)) : _mm256_setzero_si256();
            __m256i p = _mm256_setzero_si256(), h = p;
            UNROLL for (int q = 0; q < 4; q++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(g + 32 * q));
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
                if (q5) {
                    lo = _mm256_or_si256(lo, _mm256_and_si256(kvt_bit_to4_256(H, q), b4));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(kvt_bit_to4_256(H, 4 + q), b4));
                }
                const __m256i ml = _mm256_maddubs_epi16(lo, q40x8_bcast4(y + 4 * q));
                const __m256i mh = _mm256_maddubs_epi16(hi, q40x8_bcast4(y + 16 + 4 * q));
                p = q ? _mm256_add_epi16(p, ml) : ml;
                h = q ? _mm256_add_epi16(h, mh) : mh;
                __asm__("" : "+x"(p), "+x"(h)); // a chain, not a tree
            }
            // q40x8_tot's sums: q4_0 the 8 words added in int16 (exact), q5_0 the low and high apart
            const __m256i c = _mm256_set1_epi32(A->c[b]);
            const __m256i t = q5 ? _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p, one), _mm256_madd_epi16(h, one)), c)
                                 : _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p, h), one), c);
            const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 128)));
            acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(t), dx), _mm256_set1_ps(A->dy[b])));
        }
    }
    UNROLL for (int k = 0; k < ns; k++) _mm256_storeu_ps(Y + k * ystep, acc[k]);
}
Q40X8_GROUPS_TYPED(q40x8_groups4z, q40x8_groups_z, 0)
Q40X8_GROUPS_TYPED(q40x8_groups5z, q40x8_groups_z, 1)
#endif

// One group (nb blocks at G) against the nt <= Q40X8_TT prepared rows A[0..nt): Y[t * ldy .. + 8).
INLINE void q40x8_tile(int q5, int nt, int64_t nb, const uint8_t *G, const q40x8_act *A, float *Y, int64_t ldy) {
    __m256 acc[Q40X8_TT];
    UNROLL for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, G += q5 ? KVT_Q50X8_B : KVT_Q40X8_B) {
        __m256i lo[4], hi[4];
        q40x8_unpack(G, lo, hi, q5);
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G + 128)));
        UNROLL for (int t = 0; t < nt; t++) {
            const int8_t *y = A[t].y[b].qs;
            __m256i yv[8];
            UNROLL for (int i = 0; i < 8; i++) yv[i] = q40x8_bcast4(y + 4 * i);
            const __m256 tot = _mm256_cvtepi32_ps(q40x8_tot(lo, hi, yv, _mm256_set1_epi32(A[t].c[b]), q5));
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_mul_ps(tot, dx), _mm256_set1_ps(A[t].dy[b])));
        }
    }
    UNROLL for (int t = 0; t < nt; t++) _mm256_storeu_ps(Y + t * ldy, acc[t]);
}

#ifdef KVT_SIMD_AVX512
// Two groups at G and G + gb (16 rows: lanes 0-7 the first, 8-15 the second) against nt <= Q40X8_TT prepared rows:
// q40x8_tile's operations lane for lane in 512-bit vectors (the same bits), half the instructions per row.
INLINE void q40x8_tile2(int q5, int nt, int64_t nb, const uint8_t *G, int64_t gb, const q40x8_act *A, float *Y,
                        int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    const int64_t bs = q5 ? KVT_Q50X8_B : KVT_Q40X8_B;
    __m512 acc[Q40X8_TT];
    UNROLL for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, G += bs) {
        __m512i lo[4], hi[4];
        const __m512i H = q5 ? _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(G + 144))),
                                                  _mm256_loadu_si256((const __m256i *)(G + gb + 144)), 1)
                             : _mm512_setzero_si512();
        UNROLL for (int q = 0; q < 4; q++) {
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(G + 32 * q))),
                                                 _mm256_loadu_si256((const __m256i *)(G + gb + 32 * q)), 1);
            lo[q] = _mm512_and_si512(w, m4);
            hi[q] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
            if (q5) {
                lo[q] = _mm512_or_si512(lo[q], _mm512_and_si512(kvt_bit_to4_512(H, q), b4));
                hi[q] = _mm512_or_si512(hi[q], _mm512_and_si512(kvt_bit_to4_512(H, 4 + q), b4));
            }
        }
        const __m512 dx = _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(G + gb + 128)),
                                                           _mm_loadu_si128((const __m128i *)(G + 128))));
        UNROLL for (int t = 0; t < nt; t++) {
            const int8_t *y = A[t].y[b].qs;
            __m512i s0 = _mm512_set1_epi32(A[t].c[b]), s1 = _mm512_setzero_si512();
            UNROLL for (int q = 0; q < 4; q++) {
                int32_t vl, vh;
                memcpy(&vl, y + 4 * q, 4);
                memcpy(&vh, y + 16 + 4 * q, 4);
                s0 = _mm512_dpbusd_epi32(s0, lo[q], _mm512_set1_epi32(vl));
                s1 = _mm512_dpbusd_epi32(s1, hi[q], _mm512_set1_epi32(vh));
            }
            const __m512 tot = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(tot, dx), _mm512_set1_ps(A[t].dy[b])));
        }
    }
    UNROLL for (int t = 0; t < nt; t++) _mm512_storeu_ps(Y + t * ldy, acc[t]); // rows 8g .. 8g + 16: contiguous
}
#define Q40X8_TILE2_CASE(k)                                                                                            \
    case k: q40x8_tile2(q5, k, nb, G, gb, A, Y + t0 * ldy + 8 * g, ldy); break;
#endif
#define Q40X8_TILE_CASE(k)                                                                                             \
    case k: q40x8_tile(q5, k, nb, G, A, Y + t0 * ldy + 8 * g, ldy); break;
Q40X8_GROUPS_TYPED(q40x8_groups4, q40x8_groups, 0)
Q40X8_GROUPS_TYPED(q40x8_groups5, q40x8_groups, 1)

// Y[t * ldy + 8g + r] for the groups g in [g0, g1) of the q4_0_x8 (q5: q5_0_x8) matrix W (n columns) against the n_tok
// q8_0 rows X, with kvt_q40x8_scratch(n, n_tok) bytes of scratch (matmul.h).
INLINE void q40x8_mm(int q5, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y,
                     int64_t ldy, void *scratch) {
    const int64_t nb = n / KVT_QK, gb = nb * (q5 ? KVT_Q50X8_B : KVT_Q40X8_B);
    const kvt_type xt = q5 ? KVT_TYPE_Q5_0_X8 : KVT_TYPE_Q4_0_X8;
    float *dy = scratch;
    int32_t *c = (int32_t *)(dy + n_tok * nb);
    q40x8_act A[Q40X8_TT];
    if (n_tok == 1) {
        q40x8_prep(nb, X, dy, c, q5);
        A[0] = (q40x8_act){X, dy, c};
        const int64_t pf = kvt_kernels_prefetch_type(xt);
        const int v = kvt_kernels_decode_variant(xt);
        const int ns = v == 1 || v == 2 || v == 4 ? v : pf ? Q40X8_NS : 1;
#ifndef KVT_SIMD_AVX512
        if (v != 5) { // AVX2's default (q40x8_groups_z); study form 5: q40x8_groups, its default until q40z
            if (q5) KVT_X8_STREAMS(q40x8_groups5z, ns, nb, (const uint8_t *)W, gb, g0, g1, A, Y, pf);
            else KVT_X8_STREAMS(q40x8_groups4z, ns, nb, (const uint8_t *)W, gb, g0, g1, A, Y, pf);
            return;
        }
#endif
        if (q5) KVT_X8_STREAMS(q40x8_groups5, ns, nb, (const uint8_t *)W, gb, g0, g1, A, Y, pf);
        else KVT_X8_STREAMS(q40x8_groups4, ns, nb, (const uint8_t *)W, gb, g0, g1, A, Y, pf);
        return;
    }
    for (int64_t t = 0; t < n_tok; t++) q40x8_prep(nb, (const kvt_block_q8_0 *)X + t * nb, dy + t * nb, c + t * nb, q5);
    // strips of groups whose weights stay in L2 (Q40X8_STRIP_BYTES) while the token tiles pass over them: each
    // activation row is read once per strip, not once per group
    int64_t gs = Q40X8_STRIP_BYTES / gb;
    if (gs < 1) gs = 1;
    for (int64_t s0 = g0; s0 < g1; s0 += gs)
    for (int64_t t0 = 0; t0 < n_tok; t0 += Q40X8_TT) {
        const int nt = (int)(n_tok - t0 < Q40X8_TT ? n_tok - t0 : Q40X8_TT);
        for (int t = 0; t < nt; t++)
            A[t] = (q40x8_act){(const kvt_block_q8_0 *)X + (t0 + t) * nb, dy + (t0 + t) * nb, c + (t0 + t) * nb};
        int64_t g = s0;
#ifdef KVT_SIMD_AVX512
        for (; g + 2 <= g1 && g + 2 <= s0 + gs; g += 2) { // two groups at a time (q40x8_tile2)
            const uint8_t *G = (const uint8_t *)W + g * gb;
            switch (nt) {
                Q40X8_TILE2_CASE(1)
                Q40X8_TILE2_CASE(2)
                Q40X8_TILE2_CASE(3)
                Q40X8_TILE2_CASE(4)
                Q40X8_TILE2_CASE(5)
                Q40X8_TILE2_CASE(6)
                Q40X8_TILE2_CASE(7)
                Q40X8_TILE2_CASE(8)
            default: break;
            }
        }
#endif
        for (; g < g1 && g < s0 + gs; g++) {
            const uint8_t *G = (const uint8_t *)W + g * gb;
            switch (nt) {
                Q40X8_TILE_CASE(1)
                Q40X8_TILE_CASE(2)
                Q40X8_TILE_CASE(3)
                Q40X8_TILE_CASE(4)
#ifdef KVT_SIMD_AVX512
                Q40X8_TILE_CASE(5)
                Q40X8_TILE_CASE(6)
                Q40X8_TILE_CASE(7)
                Q40X8_TILE_CASE(8)
#endif
            default: break;
            }
        }
    }
}
void Q40X8_ISA(kvt_q40x8_mm)(int q5, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok, float *Y,
                             int64_t ldy, void *scratch) { // (q5 a constant in each instance of the body)
    if (q5) q40x8_mm(1, n, W, g0, g1, X, n_tok, Y, ldy, scratch);
    else q40x8_mm(0, n, W, g0, g1, X, n_tok, Y, ldy, scratch);
}
