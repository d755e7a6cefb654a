// attn_avx512.h - attention kernels of the AVX-512 build, included by quant_avx2.c when built as quant_avx512.c
// (KVT_SIMD_AVX512), after kq_acc, kq_rows, expf_libm8 / libm_expf_matches and mad_rows_cols:
//  - the K.Q of an F16 cache (kvt_attn_kq_f16, kvt_attn_kq_kf32: vec.h): sixteen positions of one head at a time,
//    their row sums reduced together, with the bits of the F16 vec_dot (f16_body) times scale;
//  - kvt_vec_expf_sub (vec.h): libm's expf bits on 16 lanes, the table read by permutes (no gathers);
//  - kvt_vec_mad_rows (vec.h), 128 columns at a time.
// (kvt_vec_scale_f32, kvt_vec_fold_f32, kvt_vec_max_f32: quant_avx2.c's FV forms, 16 lanes here; kvt_vec_sum_rows_f32
// takes its AVX2 form on AVX-512 CPUs.)

// The horizontal sums of 16 vectors at once, lane for lane dot_hsum's additions (_mm512_reduce_add_ps: the 256-bit
// halves added, then the 128-bit halves, then elements 0 + 2 and 1 + 3, then those two): v[0..16) are the sums of
// the positions 4 (i % 4) + i / 4 (so that the transposes leave lane p to position p); each addition adds the same
// two values as dot_hsum's (a + b = b + a), so the same bits.
INLINE __m512 hsum16(const __m512 *v) {
    __m512 a[8], b[4], c[2];
    UNROLL for (int j = 0; j < 8; j++) // per vector t3[i] = v[i] + v[i + 8], two vectors in one
        a[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    UNROLL for (int j = 0; j < 4; j++) // t6[i] = t3[i] + t3[i + 4], four vectors in one (a 128-bit lane each)
        b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    UNROLL for (int j = 0; j < 2; j++) // t8[0] = t6[0] + t6[2], t8[1] = t6[1] + t6[3]
        c[j] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)), // t8[0] + t8[1]
                         _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
// Row x of the K rows: f16 (kf32 false: k + x * k_stride bytes) or f32 (kf32: k + x * k_stride floats).
INLINE const void *kq_krow(const void *k, bool kf32, int64_t k_stride, int64_t x) {
    return kf32 ? (const void *)((const float *)k + x * k_stride) : (const void *)((const char *)k + x * k_stride);
}
// Sixteen positions' scores of one head, n a multiple of 64 (no tail: the row dot's double round trip is exact):
// per position kq_acc's sums, reduced together by hsum16: the bits of kq_f16_row / kqf_row.
INLINE void kq_pos16(int64_t n, const void *k, bool kf32, int64_t k_stride, const float *qf, float scale, float *s) {
    __m512 sum[16];
    UNROLL for (int i = 0; i < 16; i++) kq_acc(n, kq_krow(k, kf32, k_stride, 4 * (i % 4) + i / 4), kf32, qf, 0, 1, sum + i);
    _mm512_storeu_ps(s, _mm512_mul_ps(hsum16(sum), _mm512_set1_ps(scale)));
}
// The same for eight positions of two heads (each K row read once for both): lane 8 h + p of hsum16's result is
// head h, position p.
INLINE void kq_pos8h2(int64_t n, const void *k, bool kf32, int64_t k_stride, const float *qf, int64_t q_stride,
                      float scale, float *s, int64_t s_stride) {
    __m512 sum[16];
    UNROLL for (int p = 0; p < 8; p++) {
        __m512 t[2];
        kq_acc(n, kq_krow(k, kf32, k_stride, p), kf32, qf, q_stride, 2, t);
        UNROLL for (int h = 0; h < 2; h++) sum[4 * ((8 * h + p) % 4) + (8 * h + p) / 4] = t[h];
    }
    const __m512 d = _mm512_mul_ps(hsum16(sum), _mm512_set1_ps(scale));
    _mm256_storeu_ps(s, _mm512_castps512_ps256(d));
    _mm256_storeu_ps(s + s_stride, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
}
// Positions [0, np & ~15) of nq heads, n a multiple of 64: pairs of heads eight positions at a time, a last odd
// head sixteen.
INLINE void kq_blocks(int64_t n, const void *k, bool kf32, int64_t k_stride, int64_t np, const float *qf, int64_t q_stride,
                      int nq, float scale, float *s, int64_t s_stride) {
    for (int64_t x0 = 0; x0 + 16 <= np; x0 += 16) {
        int h = 0;
        for (; h + 2 <= nq; h += 2)
            for (int64_t x = x0; x < x0 + 16; x += 8)
                kq_pos8h2(n, kq_krow(k, kf32, k_stride, x), kf32, k_stride, qf + h * q_stride, q_stride, scale,
                          s + h * s_stride + x, s_stride);
        if (h < nq) kq_pos16(n, kq_krow(k, kf32, k_stride, x0), kf32, k_stride, qf + h * q_stride, scale, s + h * s_stride + x0);
    }
}
// kq_blocks with the common head dims as constants (the accumulation loop unrolled), then the rows past them.
INLINE void kq_avx512(int64_t n, const void *k, bool kf32, int64_t k_stride, int64_t np, const float *qf, int64_t q_stride,
                      int nq, float scale, float *s, int64_t s_stride) {
    switch (n % (4 * FV_N) ? 0 : n) {
    case 0: break;
    case 64: kq_blocks(64, k, kf32, k_stride, np, qf, q_stride, nq, scale, s, s_stride); break;
    case 128: kq_blocks(128, k, kf32, k_stride, np, qf, q_stride, nq, scale, s, s_stride); break;
    case 256: kq_blocks(256, k, kf32, k_stride, np, qf, q_stride, nq, scale, s, s_stride); break;
    default: kq_blocks(n, k, kf32, k_stride, np, qf, q_stride, nq, scale, s, s_stride); break;
    }
    kq_rows(n, k, kf32, k_stride, n % (4 * FV_N) ? 0 : np & ~(int64_t)15, np, qf, q_stride, nq, scale, s, s_stride);
}
int kvt_attn_kq_kf32_avx512(int64_t n, const float *kf, int64_t kf_stride, int64_t np, const float *qf, int64_t q_stride,
                            int nq, float scale, float *s, int64_t s_stride) {
    if (n % (4 * FV_N)) return 0;
    kq_avx512(n, kf, true, kf_stride, np, qf, q_stride, nq, scale, s, s_stride);
    return 1;
}
void kvt_attn_kq_f16_avx512(int64_t n, const void *k, int64_t k_stride, int64_t np, const uint16_t *q16, const float *qf,
                            int64_t q_stride, int nq, float scale, float *s, int64_t s_stride) {
    (void)q16;
    kq_avx512(n, k, false, k_stride, np, qf, q_stride, nq, scale, s, s_stride);
}

// expf_core4 on 8 lanes of 512-bit doubles (the same operations per lane), the table read by two permutes of its
// four vectors (index bits 0-3) and a blend (bit 4) instead of a gather.
INLINE __m512d pd8_bits(uint64_t b) { return _mm512_castsi512_pd(_mm512_set1_epi64((long long)b)); }
INLINE __m512d expf_core8(__m256 xv) {
    const __m512d xd = _mm512_cvtps_pd(xv);
    const __m512d inv_ln2n = pd8_bits(0x40471547652b82fe), shift = pd8_bits(0x4338000000000000);
    const __m512d kd0 = _mm512_fmadd_pd(inv_ln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd0), ix = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512d kd = _mm512_sub_pd(kd0, shift);
    const __m512d r = _mm512_fmsub_pd(inv_ln2n, xd, kd);
    const __m512d *tab = (const __m512d *)(const void *)EXP2_32;
    const __m512d lo = _mm512_permutex2var_pd(_mm512_loadu_pd((const double *)tab), ix, _mm512_loadu_pd((const double *)tab + 8));
    const __m512d hi = _mm512_permutex2var_pd(_mm512_loadu_pd((const double *)tab + 16), ix, _mm512_loadu_pd((const double *)tab + 24));
    const __m512i t = _mm512_add_epi64(_mm512_castpd_si512(_mm512_mask_blend_pd(_mm512_test_epi64_mask(ix, _mm512_set1_epi64(16)), lo, hi)),
                                       _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(pd8_bits(0x3ebc6af84b912394), r, pd8_bits(0x3f2ebfce50fac4f3));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d v = _mm512_fmadd_pd(pd8_bits(0x3f962e42ff0c52d6), r, _mm512_set1_pd(1.0));
    return _mm512_mul_pd(_mm512_fmadd_pd(z, r2, v), _mm512_castsi512_pd(t));
}
// expf_libm8 on 16 lanes (libm's bits where libm_expf_matches()).
INLINE __m512 expf_libm16(__m512 x) {
    const __m256 hi = _mm512_cvtpd_ps(expf_core8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
    __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(expf_core8(_mm512_castps512_ps256(x))))),
                                                   _mm256_castps_pd(hi), 1));
    const __mmask16 far = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(88.0f), _CMP_NLT_UQ); // also NaN
    if (far) { // |x| >= 88, inf, nan: libm's own special cases
        float xs[16], ys[16];
        _mm512_storeu_ps(xs, x);
        _mm512_storeu_ps(ys, y);
        expf_lanes(xs, ys, far, 16);
        y = _mm512_loadu_ps(ys);
    }
    return y;
}
// kvt_vec_expf_sub (vec.h) on AVX-512: 16 lanes, then 8 (expf_libm8), then libm.
void kvt_vec_expf_sub_avx512(const float *x, float m, float *y, int64_t n) {
    int64_t i = 0;
    if (libm_expf_matches()) {
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, expf_libm16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(m))));
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf_libm8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(m))));
    }
    for (; i < n; i++) y[i] = expf(x[i] - m);
}

// kvt_vec_mad_rows (vec.h) on AVX-512: y held in registers 128 columns at a time (8 vectors: 8 independent FMA
// chains, as the AVX2 form's 64 columns in 8 of its vectors), the same FMAs in the same order per element; the
// columns past the last multiple of 128 by the AVX2 form (64 columns and less: no gain from 16 lanes with half
// the chains).
void kvt_vec_mad_rows_avx512(int f16, float *y, const void *x, int64_t stride, const float *s, int64_t n_rows, int64_t n) {
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) mad_rows_cols(f16, y + i, (const char *)x + i * (f16 ? 2 : 4), stride, s, n_rows);
    if (i < n) kvt_vec_mad_rows_avx2(f16, y + i, (const char *)x + i * (f16 ? 2 : 4), stride, s, n_rows, n - i);
}
