// sparse_score.c - the arithmetic of selection: query rows against the int8 or 4-bit key copies, and the group's
// softmax mass. Both run once per (layer, KV head) and position at every decode step (asyncspade scans every
// key with the predicted query), so they are the selection's cost: integer dot products (exact, so any
// vector width gives the same bits) and a polynomial exp the compiler vectorizes (plain float operations
// without contraction: every clone computes the same bits as the scalar code).
#include <math.h>
#include <string.h>

#include "../kernels/f16.h"
#include "../kernels/quant.h"
#include "sparse_impl.h"

#define SCORE_CLONES KVT_SPARSE_CLONES

void kvt_sparse_quant_query_bits(const float *q, int32_t qpg, int32_t hd, int32_t bits, int16_t *q16, float *qscale) {
    const float lim = bits == 8 ? 127.0f : 32767.0f;
    for (int32_t i = 0; i < qpg; i++) {
        const float *qi = q + (int64_t)i * hd;
        float mx = 0.0f;
        for (int32_t x = 0; x < hd; x++) mx = fabsf(qi[x]) > mx ? fabsf(qi[x]) : mx;
        const float sc = mx > 0.0f && isfinite(mx) ? mx / lim : 1.0f;
        for (int32_t x = 0; x < hd; x++) {
            const float v = isfinite(qi[x]) ? qi[x] / sc : 0.0f;
            q16[(int64_t)i * hd + x] = (int16_t)lrintf(v > lim ? lim : v < -lim ? -lim : v);
        }
        qscale[i] = sc;
    }
}

void kvt_sparse_quant_query(const float *q, int32_t qpg, int32_t hd, int16_t *q16, float *qscale) {
    kvt_sparse_quant_query_bits(q, qpg, hd, 16, q16, qscale);
}

// The int8 copy of one key (kvt_sparse_quant_key's 8-bit case): its scale max|k| / 127 (1 for a zero key), each element
// k / scale rounded to the nearest (ties to even, as lrintf) and clamped to [-127, 127] (NaN to -127, as lrintf's
// x86 result clamped). Plain float operations in an order the compiler vectorizes (max is exact in any order, the rest
// per element), so every clone writes the same bytes as the scalar code; the 4-byte groups go to kvt_sparse_k8_at.
SCORE_CLONES
static void quant_key8(const float *k, int32_t hd, int64_t t, int8_t *kc, float *ks) {
    // max |k| in 16 lanes, then across them: one maximum in any order (no NaN ever wins a `>`), and no chain of hd
    // dependent scalar maxima (4 cycles each) as a single running maximum compiles to
    float m[16] = {0};
    int32_t x0 = 0;
    for (; x0 + 16 <= hd; x0 += 16) {
        for (int32_t j = 0; j < 16; j++) {
            const float a = fabsf(k[x0 + j]);
            m[j] = a > m[j] ? a : m[j];
        }
    }
    for (int32_t x = x0; x < hd; x++) {
        const float a = fabsf(k[x]);
        m[x - x0] = a > m[x - x0] ? a : m[x - x0];
    }
    for (int32_t w = 8; w >= 1; w /= 2) {
        for (int32_t j = 0; j < w; j++) m[j] = m[j + w] > m[j] ? m[j + w] : m[j];
    }
    const float mx = m[0];
    const float sc = mx > 0.0f ? mx / 127.0f : 1.0f;
    ks[t] = sc;
    int8_t row[KVT_SPARSE_MAX_HD];
    for (int32_t x = 0; x < hd; x++) {
        const float v = rintf(k[x] / sc);
        row[x] = (int8_t)(v >= 127.0f ? 127 : v > -127.0f ? (int32_t)v : -127); // NaN: -127
    }
    int8_t *dst = kc + kvt_sparse_k8_at(t, 0, hd);
    for (int32_t x = 0; x < hd; x += 4) memcpy(dst + (x >> 2) * 64, row + x, 4);
}

void kvt_sparse_quant_key(const float *k, int32_t hd, int32_t bits, int64_t t, void *kc, void *ks) {
    if (bits == 8) { // (hd <= KVT_SPARSE_MAX_HD: kvt_sparse_init refuses larger heads)
        quant_key8(k, hd, t, kc, ks);
        return;
    }
    const int32_t ng = kvt_sparse_k4_groups(hd), gw = hd / ng;
    for (int32_t g = 0; g < ng; g++) {
        const float *kg = k + g * gw;
        float mx = 0.0f;
        for (int32_t x = 0; x < gw; x++) mx = fabsf(kg[x]) > mx ? fabsf(kg[x]) : mx;
        // the scale as stored (f16): a normal, else 1 (the group's values then round to 0)
        const uint16_t h = kvt_f32_to_f16(mx > 0.0f ? mx / 7.0f : 1.0f);
        const float hs = kvt_f16_to_f32(h);
        const bool normal = hs >= 6.103515625e-05f && hs <= 65504.0f; // the smallest and largest f16 normals
        ((uint16_t *)ks)[kvt_sparse_k4s_at(t, g, ng)] = normal ? h : kvt_f32_to_f16(1.0f);
        const float sc = normal ? hs : 1.0f;
        for (int32_t x = g * gw; x < (g + 1) * gw; x++) {
            long v = lrintf(k[x] / sc);
            v = v > 7 ? 7 : v < -7 ? -7 : v;
            uint8_t *b = (uint8_t *)kc + kvt_sparse_k4_at(t, x, hd);
            const int32_t sh = (x >> 2 & 1) * 4;
            *b = (uint8_t)((*b & ~(15 << sh)) | (int32_t)(v + 8) << sh);
        }
    }
}

// raw[i * stride + x] = the score of the x-th position t of [t0, t0 + n_keys) (pos NULL) or of pos[0 .. n_keys) without
// the attention scale's factor folded into qs (the copies of k.bits, layouts of kvt_sparse_k8_at and kvt_sparse_k4_at; the
// terms of kvt_sparse_score_keys). The portable reference of every path: integer sums, exact (|q| <= 32767, |v| <= 127
// or the stored nibble <= 15, hd <= 512 keep them below 2^31).
SCORE_CLONES
static void dot_blocks(const int16_t *q16, const float *qs, int32_t qpg, int32_t hd, kvt_sparse_keys kk, int64_t t0,
                       int64_t n_keys, const int32_t *pos, int64_t stride, float *raw) {
    const int32_t ng = kvt_sparse_k4_groups(hd), gr = hd / ng / 8; // 4-bit: scale groups, whole rows of 8 dimensions each
    for (int64_t x = 0; x < n_keys; x++) {
        const int64_t t = pos ? pos[x] : t0 + x;
        for (int32_t i = 0; i < qpg; i++) {
            const int16_t *qi = q16 + (int64_t)i * hd;
            if (kk.bits == 4) { // dimension 8r + c (c < 4) in the low nibble of k[64 r + c], 8r + 4 + c in its high one
                const uint8_t *k = (const uint8_t *)kk.kc + kvt_sparse_k4_at(t, 0, hd);
                float f = 0.0f;
                for (int32_t g = 0; g < ng; g++) {
                    int32_t s = 0;
                    const int32_t r0 = ng > 1 ? g * gr : 0, r1 = ng > 1 ? r0 + gr : hd / 8;
                    for (int32_t r = r0; r < r1; r++) {
                        for (int32_t c = 0; c < 4; c++) {
                            const int32_t b = k[64 * r + c];
                            s += (int32_t)qi[8 * r + c] * ((b & 15) - 8) + (int32_t)qi[8 * r + 4 + c] * ((b >> 4) - 8);
                        }
                    }
                    for (int32_t c = 0; ng == 1 && hd % 8 && c < 4; c++) s += (int32_t)qi[hd - 4 + c] * ((k[64 * (hd / 8) + c] & 15) - 8);
                    const float term = (float)s * (kvt_f16_to_f32(((const uint16_t *)kk.ks)[kvt_sparse_k4s_at(t, g, ng)]) * qs[i]);
                    f = g == 0 ? term : f + term;
                }
                raw[i * stride + x] = f;
            } else { // dimension 4g + c at k[64 g + c]
                const int8_t *k = (const int8_t *)kk.kc + kvt_sparse_k8_at(t, 0, hd);
                int32_t s = 0;
                for (int32_t g = 0; g < hd / 4; g++) {
                    for (int32_t c = 0; c < 4; c++) s += (int32_t)qi[4 * g + c] * (int32_t)k[64 * g + c];
                }
                raw[i * stride + x] = (float)s * (((const float *)kk.ks)[t] * qs[i]);
            }
        }
    }
}

static void score_blocks(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, kvt_sparse_keys k, int64_t t0,
                         int64_t n_keys, const int32_t *pos, int64_t stride, float scale, float *raw) {
    float qs[KVT_SPARSE_MAX_QPG] = {0};
    for (int32_t i = 0; i < qpg; i++) qs[i] = qscale[i] * scale;
#if defined(__x86_64__)
    if (kvt_kernels_isa() == KVT_ISA_AVX512) {
        kvt_sparse_dot_blocks_avx512(q16, qs, qpg, hd, k, t0, n_keys, pos, stride, raw);
        return;
    }
    if (kvt_kernels_isa() == KVT_ISA_AVX2 && k.bits == 4) {
        kvt_sparse_dot_blocks4_avx2(q16, qs, qpg, hd, k, t0, n_keys, pos, stride, raw);
        return;
    }
    if (kvt_kernels_isa() == KVT_ISA_AVX2) { // int8 copies: an int8 query (every element in [-127, 127]) has its own kernel
        bool q8 = true;
        for (int64_t x = 0; q8 && x < (int64_t)qpg * hd; x++) q8 = q16[x] >= -127 && q16[x] <= 127;
        if (q8) kvt_sparse_dot_blocks8q_avx2(q16, qs, qpg, hd, k, t0, n_keys, pos, stride, raw);
        else kvt_sparse_dot_blocks8_avx2(q16, qs, qpg, hd, k, t0, n_keys, pos, stride, raw); // int16: widened keys
        return;
    }
#endif
    dot_blocks(q16, qs, qpg, hd, k, t0, n_keys, pos, stride, raw);
}

void kvt_sparse_score_keys_rows(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                                int64_t t0, int64_t n_keys, int64_t stride, float scale, float *raw) {
    score_blocks(q16, qscale, qpg, hd, k, t0, n_keys, NULL, stride, scale, raw);
}

void kvt_sparse_score_keys_set(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                               const int32_t *pos, int64_t m, int64_t stride, float scale, float *raw) {
    score_blocks(q16, qscale, qpg, hd, k, 0, m, pos, stride, scale, raw);
}

void kvt_sparse_score_keys(const int16_t *q16, const float *qscale, int32_t qpg, int32_t hd, kvt_sparse_keys k,
                           int64_t n_keys, int64_t n, float scale, float *raw) {
    if (n_keys > n) n_keys = n;
    kvt_sparse_score_keys_rows(q16, qscale, qpg, hd, k, 0, n_keys, n, scale, raw);
    for (int32_t i = 0; i < qpg; i++) {
        for (int64_t t = n_keys; t < n; t++) raw[(int64_t)i * n + t] = -INFINITY;
    }
}

// e^x for x <= 0 (x - max of a softmax), relative error below 2e-7 against expf; 0 below -87 and for -inf/NaN.
// Range reduction x = n ln2 + r (|r| <= ln2 / 2, ln2 split in two so that n ln2 is exact), Cephes' degree-6
// polynomial, 2^n from the exponent bits.
static inline float exp_neg(float x) {
    const float xc = x > -87.0f ? x : -87.0f;
    const float t = xc * 1.44269504088896341f + 12582912.0f; // 1.5 * 2^23: the sum's low bits hold round(x log2 e)
    const float nf = t - 12582912.0f;
    int32_t ti;
    memcpy(&ti, &t, sizeof ti);
    const int32_t ni = ti - 0x4B400000; // the integer n (t's bits minus those of 1.5 * 2^23)
    const float r = (xc - nf * 0.693359375f) - nf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t bits = (ni + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return x > -87.0f ? p * two_n : 0.0f; // also 0 for -inf and NaN
}

float kvt_sparse_exp_neg(float x) { return exp_neg(x); }

SCORE_CLONES
static float exp_sum(float *s, int64_t n, float mx) {
    enum { LANES = 16 }; // partial sums in a fixed order: the same bits whatever the vector width
    float part[LANES] = {0};
    const int64_t nv = n / LANES * LANES;
    for (int64_t t = 0; t < nv; t += LANES) {
        for (int32_t j = 0; j < LANES; j++) part[j] += (s[t + j] = exp_neg(s[t + j] - mx));
    }
    for (int64_t t = nv; t < n; t++) part[t - nv] += (s[t] = exp_neg(s[t] - mx));
    float sum = 0.0f;
    for (int32_t j = 0; j < LANES; j++) sum += part[j];
    return sum;
}

// exp_sum with the terms into e (s kept). A copy of exp_sum's loop rather than exp_sum calling it with e = s: the
// vectorizer's overlap check would send that in-place call to its scalar loop.
SCORE_CLONES
static float exp_sum_to(const float *s, float *e, int64_t n, float mx) {
    enum { LANES = 16 };
    float part[LANES] = {0};
    const int64_t nv = n / LANES * LANES;
    for (int64_t t = 0; t < nv; t += LANES) {
        for (int32_t j = 0; j < LANES; j++) part[j] += (e[t + j] = exp_neg(s[t + j] - mx));
    }
    for (int64_t t = nv; t < n; t++) part[t - nv] += (e[t] = exp_neg(s[t] - mx));
    float sum = 0.0f;
    for (int32_t j = 0; j < LANES; j++) sum += part[j];
    return sum;
}

// The largest of s[0 .. n) (-inf when none is above it; NaN never wins), in 16 lanes so that it vectorizes: a maximum
// is exact, so the lanes give the value of a serial scan (where +0 and -0 tie, either may come out: the only use,
// exp(s - max), is the same for both).
SCORE_CLONES
static float row_max(const float *s, int64_t n) {
    enum { LANES = 16 };
    float m[LANES];
    for (int32_t j = 0; j < LANES; j++) m[j] = -INFINITY;
    const int64_t nv = n / LANES * LANES;
    for (int64_t t = 0; t < nv; t += LANES) {
        for (int32_t j = 0; j < LANES; j++) m[j] = s[t + j] > m[j] ? s[t + j] : m[j];
    }
    for (int64_t t = nv; t < n; t++) m[0] = s[t] > m[0] ? s[t] : m[0];
    float mx = -INFINITY;
    for (int32_t j = 0; j < LANES; j++) mx = m[j] > mx ? m[j] : mx;
    return mx;
}

// agg[t] += s[t] * f (one rounding each: no contraction in any clone).
SCORE_CLONES
static void add_scaled(float *agg, const float *s, int64_t n, float f) {
    for (int64_t t = 0; t < n; t++) agg[t] += s[t] * f;
}

SCORE_CLONES
static void page_sums(float *score, int64_t n, int32_t B, int64_t p0) {
    enum { PL = 16 }; // pages summed side by side, one per vector lane; each page's sum serial in position order
    for (; p0 + PL * B <= n; p0 += PL * B) {
        float acc[PL];
        for (int32_t j = 0; j < PL; j++) acc[j] = score[p0 + (int64_t)j * B];
        for (int32_t t = 1; t < B; t++) {
            for (int32_t j = 0; j < PL; j++) acc[j] += score[p0 + (int64_t)j * B + t];
        }
        for (int32_t j = 0; j < PL; j++) {
            for (int32_t t = 0; t < B; t++) score[p0 + (int64_t)j * B + t] = acc[j];
        }
    }
    for (; p0 < n; p0 += B) { // the last pages, one at a time
        const int64_t p1 = p0 + B < n ? p0 + B : n;
        float m = score[p0];
        for (int64_t t = p0 + 1; t < p1; t++) m += score[t];
        for (int64_t t = p0; t < p1; t++) score[t] = m;
    }
}

void kvt_sparse_page_sums(float *score, int64_t n, int32_t B) {
    int64_t p0 = 0;
#if defined(__x86_64__)
    // the AVX2 and AVX-512 clones of page_sums are scalar (GCC 12: 4-lane inserts, the sums in memory): the explicit AVX2
    // kernel takes the groups of 16 whole pages on both ISAs, the rest here
    if (kvt_kernels_isa() >= KVT_ISA_AVX2 && B % 8 == 0) p0 = kvt_sparse_page_sums_avx2(score, n, B);
#endif
    page_sums(score, n, B, p0);
}

// m[j] = 0 + a[j B] + a[j B + 1] + ... + a[j B + B - 1] for 16 pieces of B values side by side (a: 16 B values), each
// sum serial in position order from 0 (the operations of a scalar loop `m = 0.0f; for (...) m += a[t]`), one piece per
// vector lane: the same bits in every clone.
SCORE_CLONES
static void piece_sums16(const float *a, int32_t B, float *m) {
    enum { PL = 16 };
    float acc[PL];
    for (int32_t j = 0; j < PL; j++) acc[j] = 0.0f;
    for (int32_t t = 0; t < B; t++) {
        for (int32_t j = 0; j < PL; j++) acc[j] += a[(int64_t)j * B + t];
    }
    for (int32_t j = 0; j < PL; j++) m[j] = acc[j];
}

void kvt_sparse_piece_sums16(const float *a, int32_t B, float *m) {
#if defined(__x86_64__)
    if (kvt_kernels_isa() >= KVT_ISA_AVX2 && B % 8 == 0) { // the AVX2 and AVX-512 clones above are scalar (GCC 12)
        kvt_sparse_piece_sums16_avx2(a, B, m);
        return;
    }
#endif
    piece_sums16(a, B, m);
}

// The exponentials and their sum: exp_sum's bits (the AVX2 kernel: the same operations written out, since GCC's AVX2 clone
// of exp_sum stays scalar; an AVX-512 CPU runs exp_sum's vectorized clone).
static float exp_sum_any(const float *s, float *e, int64_t n, float mx) {
#if defined(__x86_64__)
    if (kvt_kernels_isa() == KVT_ISA_AVX2) return kvt_sparse_exp_sum_avx2(s, e, n, mx);
#endif
    return e == s ? exp_sum(e, n, mx) : exp_sum_to(s, e, n, mx);
}

float kvt_sparse_softmax_row(float *s, int64_t n) {
    const float mx = row_max(s, n);
    if (!(mx > -INFINITY)) return NAN; // no finite score: the row adds nothing
    const float sum = exp_sum_any(s, s, n, mx);
    return sum > 0.0f ? 1.0f / sum : 0.0f;
}

float kvt_sparse_softmax_row_to(const float *s, float *e, int64_t n) {
    const float mx = row_max(s, n);
    if (!(mx > -INFINITY)) return NAN;
    const float sum = exp_sum_any(s, e, n, mx);
    return sum > 0.0f ? 1.0f / sum : 0.0f;
}

void kvt_sparse_aggregate_rows(const float *s, int32_t qpg, int64_t n, int64_t stride, const float *inv, float *agg) {
    memset(agg, 0, (size_t)n * sizeof(float));
    for (int32_t i = 0; i < qpg; i++) {
        if (isnan(inv[i])) continue;
        add_scaled(agg, s + i * stride, n, inv[i]);
    }
}

void kvt_sparse_aggregate(float *s, int32_t qpg, int64_t n, float *agg) {
    float inv[KVT_SPARSE_MAX_QPG];
    for (int32_t i = 0; i < qpg; i++) inv[i] = kvt_sparse_softmax_row(s + i * n, n);
    kvt_sparse_aggregate_rows(s, qpg, n, n, inv, agg);
}
