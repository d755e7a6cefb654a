// bits_avx2.h - bit-plane helpers and the 8-lane horizontal sum shared by the AVX2/AVX-512 kernel
// files (quant_avx2.c, matmul_avx2.c, gemm_avx2.c); include only from files compiled with -mavx2.
#ifndef KVT_BITS_AVX2_H
#define KVT_BITS_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#ifndef KVT_X8_PF_HINT
// The decode GEMVs' software prefetch (q41x8.h, kqx8.h, q80x8.h, kq_avx512.h's q6_K rows, quant_avx2.c's q6_K_r
// rows), kvt_kernels_prefetch() bytes ahead: into L2. On the Intel Xeon (2 threads, kq_decode_bench, DRAM) T1 at 4096 bytes read q4_1_x8 at
// 93-100% of the plain stream where T0 at 2048 read it at 79-86%; NTA lost a third (docs/log/BENCHMARKS-kernels-2.md,
// q4dec11).
#define KVT_X8_PF_HINT _MM_HINT_T1
#endif
// With that prefetch, the default decode forms of q4_1_x8, q8_0_x8, q4_K_x8, the AVX-512 q6_K rows and the AVX2 q6_K_r
// rows also prefetch the lines KVT_X8_PF_NEAR bytes ahead into L1 (paired from DRAM on the Intel Xeon: 1.05-1.15x, 92-103% of the probe;
// 1024 chosen on q4_1_x8 among 256, 512, 1024; docs/log/BENCHMARKS-kernels-3.md, k11q and the lead).
#define KVT_X8_PF_NEAR 1024

// One 64-byte line of a decode GEMV's stream at p prefetched as kind npf (a constant where it is inlined, so the hints
// are constants for clang): 0 none, 1 into L2 pf ahead, 2 into L2 pf ahead and into L1 KVT_X8_PF_NEAR ahead, 3 into L1
// only pf ahead (kqx8.h's x8_sb_z, quant_avx2.c's q6_K_r rows).
static inline __attribute__((always_inline)) void kvt_x8_prefetch_line(const void *p, int64_t pf, const int npf) {
    if (npf == 1 || npf == 2) _mm_prefetch((const char *)p + pf, KVT_X8_PF_HINT);
    if (npf == 2) _mm_prefetch((const char *)p + KVT_X8_PF_NEAR, _MM_HINT_T0);
    if (npf == 3) _mm_prefetch((const char *)p + pf, _MM_HINT_T0);
}
// The default kind for the CPU's distance pf > 0: into L1 only where pf is no farther than KVT_X8_PF_NEAR (on the AMD
// Zen 3's 1024: z4k's q4_K_x8, z5k6's q6_K_r rows), else into L2 and L1 (2).
static inline int kvt_x8_pf_kind(int64_t pf) { return pf > KVT_X8_PF_NEAR ? 2 : 3; }

// The groups [g0, g1) of an x8 decode GEMV (q41x8.h, kqx8.h) in ns streams (1, 2 or 4) through the groups kernel
// FN(ns, nb, w, step, X, Y, ystep, pf): groups g + k * h for k < ns (h = the groups / ns), then the rest two at a time,
// then one; GB: the bytes of one group (its nb blocks), W: the groups' base, X: the activation row. (ns a constant per
// call of FN, so its loops unroll.)
#define KVT_X8_STREAMS(FN, ns, nb, W, GB, g0, g1, X, Y, pf)                                                         \
    do {                                                                                                           \
        const int64_t gb_ = (GB), h_ = ((g1) - (g0)) / (ns);                                                       \
        int64_t g_ = (g0);                                                                                         \
        if ((ns) > 1) {                                                                                            \
            if ((ns) == 4)                                                                                         \
                for (; g_ < (g0) + h_; g_++) FN(4, nb, (W) + g_ * gb_, h_ * gb_, X, (Y) + 8 * g_, 8 * h_, pf);     \
            else                                                                                                   \
                for (; g_ < (g0) + h_; g_++) FN(2, nb, (W) + g_ * gb_, h_ * gb_, X, (Y) + 8 * g_, 8 * h_, pf);     \
            for (g_ = (g0) + (ns) * h_; g_ + 2 <= (g1); g_ += 2) FN(2, nb, (W) + g_ * gb_, gb_, X, (Y) + 8 * g_, 8, pf); \
        }                                                                                                          \
        for (; g_ < (g1); g_++) FN(1, nb, (W) + g_ * gb_, 0, X, (Y) + 8 * g_, 0, pf);                              \
    } while (0)

// Sum of the 8 lanes in one fixed order, ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)): the canonical
// horizontal sum of the rows kernels and the GEMM tiles (batch invariance needs the same one in both).
static inline __attribute__((always_inline)) float kvt_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The largest of 8 lanes (the same value in any order of the maxima, a zero's sign aside).
static inline __attribute__((always_inline)) float kvt_hmax8(__m256 v) {
    __m128 c = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    c = _mm_max_ps(c, _mm_movehl_ps(c, c));
    return _mm_cvtss_f32(_mm_max_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// i32 lanes: lane i the dot of bytes 4i..4i+3 of u (unsigned) and of s (int8): VPDPBUSD with KVT_SIMD_AVX512, else
// maddubs + madd, whose pair sums saturate at int16 (exact for the callers' operands: 4-bit weights, or q8_0's
// |x| <= 127 in the sign trick).
static inline __attribute__((always_inline)) __m256i kvt_dot_u8s8(__m256i u, __m256i s) {
#ifdef KVT_SIMD_AVX512
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// Bit j (0..7) of every byte of h moved to bit 4 of that byte by one 16-bit shift (none for j = 4); the bits the shift
// carries across bytes lie outside 0x10, so the caller masks with 0x10: q5_K's fifth bit of an element from its qh byte
// (bit j for sub-block j; kq_avx512.h, kqx8.h, gemm_avx2.c).
static inline __attribute__((always_inline)) __m256i kvt_bit_to4_256(__m256i h, const int j) {
    return j == 4 ? h : j > 4 ? _mm256_srli_epi16(h, j - 4) : _mm256_slli_epi16(h, 4 - j);
}
#ifdef KVT_SIMD_AVX512
static inline __attribute__((always_inline)) __m512i kvt_bit_to4_512(__m512i h, const int j) {
    return j == 4 ? h : j > 4 ? _mm512_srli_epi16(h, j - 4) : _mm512_slli_epi16(h, 4 - j);
}
// The int32 sum of the two 256-bit halves of v: lane i + lane i + 8 (kq_avx512.h, gemm_lowbit.h,
// quant_lowbit_avx2.c).
static inline __attribute__((always_inline)) __m256i kvt_add_halves512(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}
// Lane k of the result: the sum of the 16 int32 lanes of the k-th argument (exact in int32 arithmetic): pairs of
// arguments interleaved and added per 128-bit lane, then the four 128-bit lanes added: 13 operations for the four
// (kq_avx512.h's totals of 4 super-blocks or tokens, quant_lowbit_avx2.c's iq4_xs).
static inline __attribute__((always_inline)) __m128i kvt_hsum4x16_epi32(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b)); // a0+a2 b0+b2 a1+a3 b1+b3
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    const __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd)); // a b c d per lane
    const __m256i h = kvt_add_halves512(s);
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
// The 2-bit fields j (low 256 bits) and j + 1 (high) of 32 bytes q holds in both 256-bit halves, one per byte: one
// 64-bit shift per half, the bits it carries across bytes masked off (q2_K / q3_K slices j and j + 1 of a half:
// quant_lowbit_avx2.c, gemm_lowbit.h).
static inline __attribute__((always_inline)) __m512i kvt_2bit_pair512(__m512i q, int j) {
    return _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_set_epi64(2 * j + 2, 2 * j + 2, 2 * j + 2, 2 * j + 2, 2 * j, 2 * j,
                                                                   2 * j, 2 * j)),
                            _mm512_set1_epi8(3));
}
#endif

// The f16 at p, p + S, ..., p + 7 S (S bytes apart: the scale of 8 consecutive blocks) as 8 floats: eight word
// inserts, one conversion (a gather was no faster on an Intel Xeon and is slow where the gather data sampling fix is
// on) (matmul_avx2.c's x32 rows, quant_lowbit_avx2.c's iq4_nl).
static inline __attribute__((always_inline)) __m256 kvt_f16x8_strided(const void *p, size_t S) {
    const char *b = p;
    uint16_t h[8];
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) memcpy(h + k, b + (size_t)k * S, 2);
    __m128i v = _mm_cvtsi32_si128(h[0]);
    v = _mm_insert_epi16(v, h[1], 1), v = _mm_insert_epi16(v, h[2], 2), v = _mm_insert_epi16(v, h[3], 3);
    v = _mm_insert_epi16(v, h[4], 4), v = _mm_insert_epi16(v, h[5], 5), v = _mm_insert_epi16(v, h[6], 6);
    return _mm256_cvtph_ps(_mm_insert_epi16(v, h[7], 7));
}

// 0x10 in byte i where bit i of the little-endian 32-bit word at p is set, 0 elsewhere (q5_0's fifth
// bits): byte i of the broadcast word's byte i/8 is tested against the bit 1 << (i % 8).
static inline __attribute__((always_inline)) __m256i kvt_bits32_to_0x10(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w),
                                              _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                                0x0101010101010101LL, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}

// Instantiates, for a row-dot kernel whose body is `name##_body(n, x, y, ys, NT, s, ss)` (one weight row x against NT
// activation rows y + t * ys into s[t * ss]; NT a constant where it is inlined), the kvt_type_ops entries
// name##_multi (NT = 1..4, the table's vec_dot_multi) and name##_dot (one row) (quant_avx2.c, quant_lowbit_avx2.c).
#define KVT_DOT_DISPATCH(name)                                                                                        \
    static void name##_multi(int64_t n, const void *x, const void *y, size_t ys, int nt, float *s, int64_t ss) {     \
        switch (nt) {                                                                                                 \
        case 1: name##_body(n, x, y, ys, 1, s, ss); break;                                                            \
        case 2: name##_body(n, x, y, ys, 2, s, ss); break;                                                            \
        case 3: name##_body(n, x, y, ys, 3, s, ss); break;                                                            \
        default: name##_body(n, x, y, ys, 4, s, ss); break;                                                           \
        }                                                                                                             \
    }                                                                                                                 \
    static void name##_dot(int64_t n, float *s, const void *x, const void *y) { name##_body(n, x, y, 0, 1, s, 0); }

#endif
