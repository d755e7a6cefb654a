// quant_lowbit.c - scalar reference kernels of q5_1, q2_K, q3_K, iq4_nl and iq4_xs (quant_lowbit.h): dequantize,
// quantize (for kvtier's own files and tests; llama-quantize's files are what users bring), dot product.
//
// Each dot product sums a block's exact integer total and then evaluates one scalar float expression per block;
// quant_lowbit_avx2.c evaluates the same expression on the same integers (the same bits).
#include "quant_lowbit.h"
#include "quant_ops_table.h"

#include <math.h>
#include <string.h>

#include "f16.h"

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
// Round to nearest (ties away from zero, as lroundf) without libm's errno: |f| < 2^30.
static inline int round_int(float f) { return (int)(f < 0 ? f - 0.5f : f + 0.5f); }

// ----------------------------------------------------------------------------------------------------- q5_1

static void q5_1_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / KVT_QK; i++, dst += KVT_QK) {
        const float d = kvt_f16_to_f32(b[i].d), m = kvt_f16_to_f32(b[i].m);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < KVT_QK / 2; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0xF) | ((qh >> j & 1) << 4)) + m;
            dst[j + 16] = d * (float)((b[i].qs[j] >> 4) | ((qh >> (j + 16) & 1) << 4)) + m;
        }
    }
}
static void q5_1_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        float mn = src[0], mx = src[0];
        for (int j = 1; j < KVT_QK; j++) mn = src[j] < mn ? src[j] : mn, mx = src[j] > mx ? src[j] : mx;
        const float d = (mx - mn) / 31.f, id = d != 0 ? 1.f / d : 0.f;
        b[i].d = kvt_f32_to_f16(d);
        b[i].m = kvt_f32_to_f16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < KVT_QK / 2; j++) {
            const int q0 = clampi((int)((src[j] - mn) * id + 0.5f), 0, 31);
            const int q1 = clampi((int)((src[j + 16] - mn) * id + 0.5f), 0, 31);
            b[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}
// Per block: s += float(S) * d * dy + m * sy (q4_1's expression), S the exact sum of q * y.
static void q5_1_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q5_1 *a = x;
    const kvt_block_q8_1 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK; i++) {
        uint32_t qh;
        memcpy(&qh, a[i].qh, 4);
        int isum = 0;
        for (int j = 0; j < KVT_QK / 2; j++) {
            isum += ((a[i].qs[j] & 0xF) | (int)((qh >> j & 1) << 4)) * b[i].qs[j];
            isum += ((a[i].qs[j] >> 4) | (int)((qh >> (j + 16) & 1) << 4)) * b[i].qs[j + 16];
        }
        sum += (float)isum * kvt_f16_to_f32(a[i].d) * kvt_f16_to_f32(b[i].d) +
               kvt_f16_to_f32(a[i].m) * kvt_f16_to_f32(b[i].s);
    }
    *s = sum;
}

// ----------------------------------------------------------------------------------------------------- q2_K

// The 2-bit value of element e of a q2_K block (quant_lowbit.h's placement).
static inline int q2_K_value(const kvt_block_q2_K *b, int e) {
    const int h = e / 128, j = (e / 32) % 4, k = (e / 16) % 2, l = e % 16;
    return (b->qs[32 * h + 16 * k + l] >> (2 * j)) & 3;
}
static void q2_K_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q2_K *b = src;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, dst += KVT_QK_K) {
        const float d = kvt_f16_to_f32(b[i].d), dmin = kvt_f16_to_f32(b[i].dmin);
        for (int e = 0; e < KVT_QK_K; e++) {
            const int sc = b[i].scales[e / 16];
            dst[e] = d * (float)(sc & 0xF) * (float)q2_K_value(&b[i], e) - dmin * (float)(sc >> 4);
        }
    }
}
// Each sub-block of 16 fitted as a * q + c (q = 0..3, c <= 0), a and -c stored as 4-bit multiples of d and dmin;
// the values then chosen again with the stored scales.
static void q2_K_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q2_K *b = dst;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        float a[16], mn[16], max_a = 0, max_m = 0;
        for (int g = 0; g < 16; g++) {
            const float *x = src + 16 * g;
            float lo = 0, hi = x[0];
            for (int l = 0; l < 16; l++) lo = x[l] < lo ? x[l] : lo, hi = x[l] > hi ? x[l] : hi;
            a[g] = hi > lo ? (hi - lo) / 3.f : 0.f, mn[g] = -lo;
            max_a = a[g] > max_a ? a[g] : max_a, max_m = mn[g] > max_m ? mn[g] : max_m;
        }
        b[i].d = kvt_f32_to_f16(max_a / 15.f);
        b[i].dmin = kvt_f32_to_f16(max_m / 15.f);
        const float d = kvt_f16_to_f32(b[i].d), dmin = kvt_f16_to_f32(b[i].dmin);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int g = 0; g < 16; g++) {
            const int ls = d > 0 ? clampi(round_int(a[g] / d), 0, 15) : 0;
            const int lm = dmin > 0 ? clampi(round_int(mn[g] / dmin), 0, 15) : 0;
            b[i].scales[g] = (uint8_t)(ls | (lm << 4));
            const float ds = d * (float)ls, dm = dmin * (float)lm;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * g + l, q = ds > 0 ? clampi(round_int((src[e] + dm) / ds), 0, 3) : 0;
                const int h = e / 128, j = (e / 32) % 4, k = (e / 16) % 2;
                b[i].qs[32 * h + 16 * k + l] |= (uint8_t)(q << (2 * j));
            }
        }
    }
}
// Per super-block: s += dy * (d * float(S) - dmin * float(M)) (q4_K's expression), S = sum over sub-blocks of
// (sc & 15) * sum q * y, M = sum of (sc >> 4) * bsums.
static void q2_K_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q2_K *a = x;
    const kvt_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int g = 0; g < 16; g++) {
            int isum = 0;
            for (int l = 0; l < 16; l++) isum += q2_K_value(&a[i], 16 * g + l) * b[i].qs[16 * g + l];
            sumi += (a[i].scales[g] & 0xF) * isum;
            summ += (a[i].scales[g] >> 4) * b[i].bsums[g];
        }
        sum += b[i].d * (kvt_f16_to_f32(a[i].d) * (float)sumi - kvt_f16_to_f32(a[i].dmin) * (float)summ);
    }
    *s = sum;
}

// ----------------------------------------------------------------------------------------------------- q3_K

// The value v (-4..3) of element e of a q3_K block.
static inline int q3_K_value(const kvt_block_q3_K *b, int e) {
    const int h = e / 128, j = (e / 32) % 4, k = (e / 16) % 2, l = e % 16;
    const int lo = (b->qs[32 * h + 16 * k + l] >> (2 * j)) & 3;
    return (b->hmask[16 * k + l] >> (4 * h + j) & 1) ? lo : lo - 4;
}
static void q3_K_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q3_K *b = src;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, dst += KVT_QK_K) {
        const float d = kvt_f16_to_f32(b[i].d);
        int8_t sc[16];
        kvt_q3_K_scales(b[i].scales, sc);
        for (int e = 0; e < KVT_QK_K; e++) dst[e] = d * (float)sc[e / 16] * (float)q3_K_value(&b[i], e);
    }
}
// Each sub-block of 16 as s * v (v = -4..3, the element of largest magnitude at -4), s stored as a 6-bit signed
// multiple of d; the values then chosen again with the stored scale.
static void q3_K_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q3_K *b = dst;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        float sg[16], amax = 0;
        for (int g = 0; g < 16; g++) {
            float m = 0, am = 0;
            for (int l = 0; l < 16; l++)
                if (fabsf(src[16 * g + l]) > am) am = fabsf(src[16 * g + l]), m = src[16 * g + l];
            sg[g] = m / -4.f;
            amax = fabsf(sg[g]) > amax ? fabsf(sg[g]) : amax;
        }
        b[i].d = kvt_f32_to_f16(amax / 32.f);
        const float d = kvt_f16_to_f32(b[i].d);
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        memset(b[i].qs, 0, sizeof b[i].qs);
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int g = 0; g < 16; g++) {
            const int ls = d > 0 ? clampi(round_int(sg[g] / d), -32, 31) : 0, u = ls + 32;
            b[i].scales[g % 8] |= (uint8_t)((u & 0xF) << (4 * (g / 8)));
            b[i].scales[8 + g % 4] |= (uint8_t)((u >> 4) << (2 * (g / 4)));
            const float ds = d * (float)ls;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * g + l, v = ds != 0 ? clampi(round_int(src[e] / ds), -4, 3) : 0, L = v + 4;
                const int h = e / 128, j = (e / 32) % 4, k = (e / 16) % 2;
                b[i].qs[32 * h + 16 * k + l] |= (uint8_t)((L & 3) << (2 * j));
                b[i].hmask[16 * k + l] |= (uint8_t)((L >> 2) << (4 * h + j));
            }
        }
    }
}
// Per super-block: s += d * dy * float(S), S = sum over sub-blocks of (s - 32) * sum v * y (q6_K's expression).
static void q3_K_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q3_K *a = x;
    const kvt_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        int8_t sc[16];
        kvt_q3_K_scales(a[i].scales, sc);
        int sumi = 0;
        for (int g = 0; g < 16; g++) {
            int isum = 0;
            for (int l = 0; l < 16; l++) isum += q3_K_value(&a[i], 16 * g + l) * b[i].qs[16 * g + l];
            sumi += sc[g] * isum;
        }
        sum = fmaf((float)sumi, kvt_f16_to_f32(a[i].d) * b[i].d, sum);
    }
    *s = sum;
}

// ------------------------------------------------------------------------------------------ iq4_nl, iq4_xs

// The codebook index nearest to v (the values ascend).
static int iq4_nearest(float v) {
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(v - (float)kvt_iq4nl_values[k]) < fabsf(v - (float)kvt_iq4nl_values[best])) best = k;
    return best;
}
// A block of 32 as s * codebook[q]: s from the element of largest magnitude (at -127), then refitted once by least
// squares on the chosen indices, which are chosen again. Writes the indices to L, returns s.
static float iq4_fit(const float *x, uint8_t L[32]) {
    float m = 0, am = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > am) am = fabsf(x[j]), m = x[j];
    if (am == 0) {
        memset(L, 8, 32); // the codebook's value nearest 0 (1)
        return 0;
    }
    float s = m / (float)kvt_iq4nl_values[0];
    for (int it = 0; it < 2; it++) {
        float sxv = 0, svv = 0;
        for (int j = 0; j < 32; j++) {
            L[j] = (uint8_t)iq4_nearest(x[j] / s);
            const float v = (float)kvt_iq4nl_values[L[j]];
            sxv += x[j] * v, svv += v * v;
        }
        if (it == 0 && svv > 0 && sxv != 0) s = sxv / svv;
    }
    return s;
}
// One block of 32 (iq4_nl's, or an iq4_xs sub-block) with scale d: its 16 bytes of indices qs to floats; the values x
// to the indices nearest x / d (0 maps to index 8, the codebook's 1: d == 0 holds zeros); the exact sum of
// codebook[q] * y over its 32 elements.
static void iq4_block_to_float(const uint8_t qs[16], float d, float *dst) {
    for (int j = 0; j < 16; j++) {
        dst[j] = d * (float)kvt_iq4nl_values[qs[j] & 0xF];
        dst[j + 16] = d * (float)kvt_iq4nl_values[qs[j] >> 4];
    }
}
static void iq4_block_pack(const float *x, float d, uint8_t qs[16]) {
    uint8_t L[32];
    for (int j = 0; j < 32; j++) L[j] = (uint8_t)(d != 0 ? iq4_nearest(x[j] / d) : 8);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void iq4_nl_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / KVT_QK; i++, dst += KVT_QK) iq4_block_to_float(b[i].qs, kvt_f16_to_f32(b[i].d), dst);
}
static void iq4_nl_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_iq4_nl *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        b[i].d = kvt_f32_to_f16(iq4_fit(src, L));
        iq4_block_pack(src, kvt_f16_to_f32(b[i].d), b[i].qs);
    }
}
// Per block: s = fma(float(S), d * dy, s), S the exact sum of codebook[q] * y: the order of llama.cpp's repacked
// iq4_nl_8x8 GEMV (arch/x86/repack.cpp), which its goldens come from. With s + float(S) * d * dy (until 2026-12-07)
// KVT_ISA=scalar failed model_ref's "after BOS alone" check on quant-iq4_nl (0.95% of the largest logit, one
// activation's 8-bit rounding flipped; now 6.1e-7).
static void iq4_nl_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_iq4_nl *a = x;
    const kvt_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK; i++)
        sum = fmaf((float)kvt_iq4_block_isum(a[i].qs, b[i].qs), kvt_f16_to_f32(a[i].d) * kvt_f16_to_f32(b[i].d), sum);
    *s = sum;
}

static void iq4_xs_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        const float d = kvt_f16_to_f32(b[i].d);
        for (int sb = 0; sb < 8; sb++, dst += 32)
            iq4_block_to_float(b[i].qs + 16 * sb, d * (float)(kvt_iq4_xs_scale(&b[i], sb) - 32), dst);
    }
}
static void iq4_xs_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_iq4_xs *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        float sb_s[8], amax = 0;
        for (int sb = 0; sb < 8; sb++) {
            sb_s[sb] = iq4_fit(src + 32 * sb, L);
            amax = fabsf(sb_s[sb]) > amax ? fabsf(sb_s[sb]) : amax;
        }
        b[i].d = kvt_f32_to_f16(amax / 32.f);
        const float d = kvt_f16_to_f32(b[i].d);
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int sb = 0; sb < 8; sb++) {
            const int ls = d > 0 ? clampi(round_int(sb_s[sb] / d), -32, 31) : 0, u = ls + 32;
            b[i].scales_l[sb / 2] |= (uint8_t)((u & 0xF) << (4 * (sb % 2)));
            b[i].scales_h |= (uint16_t)((u >> 4) << (2 * sb));
            iq4_block_pack(src + 32 * sb, d * (float)ls, b[i].qs + 16 * sb);
        }
    }
}
// Per super-block: s = fma(float(S), d * dy, s), S = sum over sub-blocks of (ls - 32) * sum codebook[q] * y (exact):
// the AVX-512 kernels' order too (matmul.h: they give these bits, a row alone or in any batch; AVX2: llama.cpp's).
static void iq4_xs_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_iq4_xs *a = x;
    const kvt_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        int sumi = 0;
        for (int sb = 0; sb < 8; sb++)
            sumi += (kvt_iq4_xs_scale(&a[i], sb) - 32) * kvt_iq4_block_isum(a[i].qs + 16 * sb, b[i].qs + 32 * sb);
        sum = fmaf((float)sumi, kvt_f16_to_f32(a[i].d) * b[i].d, sum);
    }
    *s = sum;
}

// ------------------------------------------------------------------------------------------------- table

KVT_DOT_MULTI_FROM_DOT(q5_1)
KVT_DOT_MULTI_FROM_DOT(q2_K)
KVT_DOT_MULTI_FROM_DOT(q3_K)
KVT_DOT_MULTI_FROM_DOT(iq4_nl)
KVT_DOT_MULTI_FROM_DOT(iq4_xs)
KVT_LOWBIT_TABLE(kvt_lowbit_ops_ref)
