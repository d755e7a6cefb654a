// quant.c - scalar reference kernels for every computable type, the quantizers
// used to write model files, and the runtime choice of SIMD tables.
//
// Reference kernels favour clarity; the SIMD versions in quant_avx2.c must
// agree with them (bit-exactly for quantizers of activations, to float
// rounding for dot products).
#include "quant.h"
#include "quant_ops_table.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "f16.h"
#include "bf16x16.h"
#include "f16x16.h"
#include "matmul.h"
#include "quant_lowbit.h"

// Round to nearest, ties to even, for |f| < 2^22 (no libm, no rounding-mode
// dependence beyond the default).
static inline int nearest_int(float f) {
    const float v = f + 12582912.f; // 1.5 * 2^23
    return (int)(kvt_f32_to_bits(v) & 0x7fffffu) - 0x400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// ---------------------------------------------------------------- float types

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static void f32_dot(int64_t n, float *s, const void *x, const void *y) {
    const float *a = x, *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)a[i] * b[i];
    *s = (float)sum;
}

// f16 and bf16: each element converted to f32 on its own (f16.h); the dot sums the products in double, in order.
#define HALF_OPS(name, to_f32, from_f32)                                                            \
    static void name##_to_float(const void *src, float *dst, int64_t n) {                           \
        const uint16_t *h = src;                                                                    \
        for (int64_t i = 0; i < n; i++) dst[i] = to_f32(h[i]);                                      \
    }                                                                                               \
    static void name##_from_float(const float *src, void *dst, int64_t n) {                         \
        uint16_t *h = dst;                                                                          \
        for (int64_t i = 0; i < n; i++) h[i] = from_f32(src[i]);                                    \
    }                                                                                               \
    static void name##_dot(int64_t n, float *s, const void *x, const void *y) {                     \
        const uint16_t *a = x, *b = y;                                                              \
        double sum = 0;                                                                             \
        for (int64_t i = 0; i < n; i++) sum += (double)to_f32(a[i]) * to_f32(b[i]);                 \
        *s = (float)sum;                                                                            \
    }
HALF_OPS(f16, kvt_f16_to_f32, kvt_f32_to_f16)
HALF_OPS(bf16, kvt_bf16_to_f32, kvt_f32_to_bf16)

// ------------------------------------------------------- 32-element block types

static void q4_0_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / KVT_QK; i++, dst += KVT_QK) {
        const float d = kvt_f16_to_f32(b[i].d);
        for (int j = 0; j < KVT_QK / 2; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            dst[j + KVT_QK / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}
// The element of largest magnitude maps to -8 (the asymmetric end).
static void q4_0_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        float amax = 0, max = 0;
        for (int j = 0; j < KVT_QK; j++)
            if (fabsf(src[j]) > amax) amax = fabsf(src[j]), max = src[j];
        const float d = max / -8.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = kvt_f32_to_f16(d);
        for (int j = 0; j < KVT_QK / 2; j++) {
            const int q0 = clampi((int)(src[j] * id + 8.5f), 0, 15);
            const int q1 = clampi((int)(src[j + KVT_QK / 2] * id + 8.5f), 0, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
static void q4_0_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q4_0 *a = x;
    const kvt_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK; i++) {
        int isum = 0;
        for (int j = 0; j < KVT_QK / 2; j++) {
            isum += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
            isum += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + KVT_QK / 2];
        }
        sum += (float)isum * kvt_f16_to_f32(a[i].d) * kvt_f16_to_f32(b[i].d);
    }
    *s = sum;
}

// q5_0: 5-bit values q (0..31), x = d * (q - 16).
static int q5_0_value(const kvt_block_q5_0 *b, int j) {
    const uint32_t qh = (uint32_t)b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 | (uint32_t)b->qh[3] << 24;
    const int lo = j < KVT_QK / 2 ? b->qs[j] & 0xF : b->qs[j - KVT_QK / 2] >> 4;
    return lo | (int)((qh >> j) & 1) << 4;
}
static void q5_0_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / KVT_QK; i++, dst += KVT_QK) {
        const float d = kvt_f16_to_f32(b[i].d);
        for (int j = 0; j < KVT_QK; j++) dst[j] = d * (float)(q5_0_value(&b[i], j) - 16);
    }
}
// The element of largest magnitude maps to -16 (the asymmetric end), as q4_0 does with -8.
static void q5_0_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        float amax = 0, max = 0;
        for (int j = 0; j < KVT_QK; j++)
            if (fabsf(src[j]) > amax) amax = fabsf(src[j]), max = src[j];
        const float d = max / -16.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = kvt_f32_to_f16(d);
        uint32_t qh = 0;
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < KVT_QK; j++) {
            const int q = clampi((int)(src[j] * id + 16.5f), 0, 31);
            b[i].qs[j % (KVT_QK / 2)] |= (uint8_t)((q & 0xF) << (j < KVT_QK / 2 ? 0 : 4));
            qh |= (uint32_t)(q >> 4) << j;
        }
        for (int k = 0; k < 4; k++) b[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}
static void q5_0_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q5_0 *a = x;
    const kvt_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK; i++) {
        int isum = 0;
        for (int j = 0; j < KVT_QK; j++) isum += (q5_0_value(&a[i], j) - 16) * b[i].qs[j];
        sum += (float)isum * kvt_f16_to_f32(a[i].d) * kvt_f16_to_f32(b[i].d);
    }
    *s = sum;
}

static void q4_1_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / KVT_QK; i++, dst += KVT_QK) {
        const float d = kvt_f16_to_f32(b[i].d), m = kvt_f16_to_f32(b[i].m);
        for (int j = 0; j < KVT_QK / 2; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            dst[j + KVT_QK / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}
static void q4_1_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        float mn = src[0], mx = src[0];
        for (int j = 1; j < KVT_QK; j++) {
            if (src[j] < mn) mn = src[j];
            if (src[j] > mx) mx = src[j];
        }
        const float d = (mx - mn) / 15.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = kvt_f32_to_f16(d);
        b[i].m = kvt_f32_to_f16(mn);
        for (int j = 0; j < KVT_QK / 2; j++) {
            const int q0 = clampi((int)((src[j] - mn) * id + 0.5f), 0, 15);
            const int q1 = clampi((int)((src[j + KVT_QK / 2] - mn) * id + 0.5f), 0, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
static void q4_1_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q4_1 *a = x;
    const kvt_block_q8_1 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK; i++) {
        int isum = 0;
        for (int j = 0; j < KVT_QK / 2; j++) {
            isum += (a[i].qs[j] & 0xF) * b[i].qs[j];
            isum += (a[i].qs[j] >> 4) * b[i].qs[j + KVT_QK / 2];
        }
        sum += (float)isum * kvt_f16_to_f32(a[i].d) * kvt_f16_to_f32(b[i].d) +
               kvt_f16_to_f32(a[i].m) * kvt_f16_to_f32(b[i].s);
    }
    *s = sum;
}

static void q8_0_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / KVT_QK; i++, dst += KVT_QK) {
        const float d = kvt_f16_to_f32(b[i].d);
        for (int j = 0; j < KVT_QK; j++) dst[j] = d * (float)b[i].qs[j];
    }
}
// Symmetric: d = max|x| / 127, q = round-half-even(x / d). The SIMD version
// computes the same expressions and so produces identical bytes.
static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        float amax = 0;
        for (int j = 0; j < KVT_QK; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.f;
        const float id = amax != 0 ? 127.f / amax : 0.f;
        b[i].d = kvt_f32_to_f16(d);
        for (int j = 0; j < KVT_QK; j++) b[i].qs[j] = (int8_t)nearest_int(src[j] * id);
    }
}
static void q8_0_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q8_0 *a = x, *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK; i++) {
        int isum = 0;
        for (int j = 0; j < KVT_QK; j++) isum += a[i].qs[j] * b[i].qs[j];
        sum += (float)isum * kvt_f16_to_f32(a[i].d) * kvt_f16_to_f32(b[i].d);
    }
    *s = sum;
}

static void q8_1_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / KVT_QK; i++, dst += KVT_QK) {
        const float d = kvt_f16_to_f32(b[i].d);
        for (int j = 0; j < KVT_QK; j++) dst[j] = d * (float)b[i].qs[j];
    }
}
static void q8_1_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / KVT_QK; i++, src += KVT_QK) {
        float amax = 0;
        for (int j = 0; j < KVT_QK; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.f;
        const float id = amax != 0 ? 127.f / amax : 0.f;
        int sum = 0;
        for (int j = 0; j < KVT_QK; j++) {
            b[i].qs[j] = (int8_t)nearest_int(src[j] * id);
            sum += b[i].qs[j];
        }
        b[i].d = kvt_f32_to_f16(d);
        b[i].s = kvt_f32_to_f16((float)sum * d);
    }
}

// --------------------------------------------------------------------- q8_K

static void q8_K_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q8_K *b = src;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, dst += KVT_QK_K)
        for (int j = 0; j < KVT_QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
}
// The element of largest magnitude maps to -127 * sign (d = max / -127).
static void q8_K_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        float amax = 0, max = 0;
        for (int j = 0; j < KVT_QK_K; j++)
            if (fabsf(src[j]) > amax) amax = fabsf(src[j]), max = src[j];
        if (amax == 0) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < KVT_QK_K; j++) {
            const int v = nearest_int(iscale * src[j]);
            b[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < KVT_QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += b[i].qs[16 * g + j];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1.f / iscale;
    }
}

// ------------------------------------------------------------ q4_K and q5_K

// Least-squares fit of x[0..n) ~ a * q + c with integer q in [0, nmax], a >= 0
// and c <= 0 (the format stores -c as an unsigned min). Tries a small range of
// grid spacings, refits (a, c) for each assignment, keeps the best.
// Returns a; writes -c to *neg_min and the assignment to L.
static float fit_scale_min(int n, int nmax, const float *x, uint8_t *L, float *neg_min) {
    float xmin = x[0], xmax = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < xmin) xmin = x[i];
        if (x[i] > xmax) xmax = x[i];
    }
    if (xmin > 0) xmin = 0;
    if (xmax <= xmin) {
        memset(L, 0, (size_t)n);
        *neg_min = -xmin;
        return 0;
    }
    float best_a = (xmax - xmin) / (float)nmax, best_c = xmin, best_err = INFINITY;
    uint8_t Lt[KVT_QK];
    for (int k = -6; k <= 12; k++) {
        const float iscale = ((float)nmax + 0.1f * (float)k) / (xmax - xmin);
        float sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int i = 0; i < n; i++) {
            const int q = clampi(nearest_int(iscale * (x[i] - xmin)), 0, nmax);
            Lt[i] = (uint8_t)q;
            sq += (float)q, sqq += (float)(q * q), sx += x[i], sqx += (float)q * x[i];
        }
        const float det = (float)n * sqq - sq * sq;
        if (det <= 0) continue;
        float a = ((float)n * sqx - sq * sx) / det;
        float c = (sqq * sx - sq * sqx) / det;
        if (c > 0) c = 0, a = sqx / sqq;
        if (a <= 0) continue;
        float err = 0;
        for (int i = 0; i < n; i++) {
            const float e = a * (float)Lt[i] + c - x[i];
            err += e * e;
        }
        if (err < best_err) {
            best_err = err, best_a = a, best_c = c;
            memcpy(L, Lt, (size_t)n);
        }
    }
    if (best_err == INFINITY) { // degenerate: fall back to the plain grid
        for (int i = 0; i < n; i++) L[i] = (uint8_t)clampi(nearest_int((x[i] - xmin) / best_a), 0, nmax);
    }
    *neg_min = -best_c;
    return best_a;
}

// Shared quantizer of q4_K (nmax 15) and q5_K (nmax 31): fits each sub-block,
// stores 6-bit scales/mins relative to the super-block's d/dmin, then
// requantizes with the stored (rounded) values. Writes d, dmin, scales and the
// values L[0..256).
static void quantize_k_superblock(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                                  uint8_t scales[12], uint8_t L[KVT_QK_K]) {
    float a[8], mn[8], max_a = 0, max_m = 0;
    for (int j = 0; j < 8; j++) {
        a[j] = fit_scale_min(32, nmax, x + 32 * j, L + 32 * j, &mn[j]);
        if (a[j] > max_a) max_a = a[j];
        if (mn[j] > max_m) max_m = mn[j];
    }
    const float inv_a = max_a > 0 ? 63.f / max_a : 0.f;
    const float inv_m = max_m > 0 ? 63.f / max_m : 0.f;
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        const int ls = clampi(nearest_int(inv_a * a[j]), 0, 63);
        const int lm = clampi(nearest_int(inv_m * mn[j]), 0, 63);
        if (j < 4) {
            scales[j] = (uint8_t)ls;
            scales[j + 4] = (uint8_t)lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = kvt_f32_to_f16(max_a / 63.f);
    *dmin_out = kvt_f32_to_f16(max_m / 63.f);
    const float d = kvt_f16_to_f32(*d_out), dmin = kvt_f16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kvt_k_scale_min(j, scales, &sc, &m);
        const float ds = d * sc, dm = dmin * m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = ds > 0 ? (uint8_t)clampi(nearest_int((x[32 * j + i] + dm) / ds), 0, nmax) : 0;
    }
}

static void q4_K_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q4_K *b = src;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        const float d = kvt_f16_to_f32(b[i].d), dmin = kvt_f16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            kvt_k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            kvt_k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            const uint8_t *q = b[i].qs + 32 * c;
            for (int l = 0; l < 32; l++) {
                *dst++ = d * sc0 * (float)(q[l] & 0xF) - dmin * m0;
            }
            for (int l = 0; l < 32; l++) {
                *dst++ = d * sc1 * (float)(q[l] >> 4) - dmin * m1;
            }
        }
    }
}
static void q4_K_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q4_K *b = dst;
    uint8_t L[KVT_QK_K];
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        quantize_k_superblock(src, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}
static void q4_K_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q4_K *a = x;
    const kvt_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kvt_k_scale_min(j, a[i].scales, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            int isum = 0;
            for (int l = 0; l < 32; l++) isum += ((q[l] >> shift) & 0xF) * b[i].qs[32 * j + l];
            sumi += sc * isum;
            summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        sum += b[i].d * (kvt_f16_to_f32(a[i].d) * (float)sumi - kvt_f16_to_f32(a[i].dmin) * (float)summ);
    }
    *s = sum;
}

static void q5_K_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q5_K *b = src;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        const float d = kvt_f16_to_f32(b[i].d), dmin = kvt_f16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            kvt_k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            kvt_k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            const uint8_t *q = b[i].qs + 32 * c;
            for (int l = 0; l < 32; l++) {
                const int v = (q[l] & 0xF) | (((b[i].qh[l] >> (2 * c)) & 1) << 4);
                *dst++ = d * sc0 * (float)v - dmin * m0;
            }
            for (int l = 0; l < 32; l++) {
                const int v = (q[l] >> 4) | (((b[i].qh[l] >> (2 * c + 1)) & 1) << 4);
                *dst++ = d * sc1 * (float)v - dmin * m1;
            }
        }
    }
}
static void q5_K_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q5_K *b = dst;
    uint8_t L[KVT_QK_K];
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        quantize_k_superblock(src, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
    }
}
static void q5_K_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q5_K *a = x;
    const kvt_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kvt_k_scale_min(j, a[i].scales, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            int isum = 0;
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0xF) | (((a[i].qh[l] >> j) & 1) << 4);
                isum += v * b[i].qs[32 * j + l];
            }
            sumi += sc * isum;
            summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        sum += b[i].d * (kvt_f16_to_f32(a[i].d) * (float)sumi - kvt_f16_to_f32(a[i].dmin) * (float)summ);
    }
    *s = sum;
}

// ---------------------------------------------------------------------- q6_K

// Unsigned 6-bit value (0..63) of element e (0..255) of a q6_K block.
static inline int q6_K_value(const kvt_block_q6_K *b, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + l + 32 * (k & 1)];
    const int low = k < 2 ? (lo & 0xF) : (lo >> 4);
    return low | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
}

static void q6_K_to_float(const void *src, float *dst, int64_t n) {
    const kvt_block_q6_K *b = src;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, dst += KVT_QK_K) {
        const float d = kvt_f16_to_f32(b[i].d);
        for (int e = 0; e < KVT_QK_K; e++) dst[e] = d * b[i].scales[e / 16] * (float)(q6_K_value(&b[i], e) - 32);
    }
}

// Fit x[0..16) ~ s * q with integer q in [-32, 31]: tries grid spacings around
// "largest magnitude maps to -32", least-squares scale for each assignment.
static float fit_scale_sym16(const float *x) {
    float amax = 0, max = 0;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax == 0) return 0;
    float best_s = max / -32.f, best_score = -1;
    for (int k = -8; k <= 8; k++) {
        const float iscale = -(32.f + 0.25f * (float)k) / max;
        float sxq = 0, sqq = 0;
        for (int i = 0; i < 16; i++) {
            const int q = clampi(nearest_int(iscale * x[i]), -32, 31);
            sxq += x[i] * (float)q, sqq += (float)(q * q);
        }
        // error = sum x^2 - sxq^2 / sqq; maximise the second term
        if (sqq > 0 && sxq * sxq / sqq > best_score) best_score = sxq * sxq / sqq, best_s = sxq / sqq;
    }
    return best_s;
}

static void q6_K_from_float(const float *src, void *dst, int64_t n) {
    kvt_block_q6_K *b = dst;
    for (int64_t i = 0; i < n / KVT_QK_K; i++, src += KVT_QK_K) {
        float s[16], smax = 0, samax = 0;
        for (int g = 0; g < 16; g++) {
            s[g] = fit_scale_sym16(src + 16 * g);
            if (fabsf(s[g]) > samax) samax = fabsf(s[g]), smax = s[g];
        }
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        const float dsup = smax / -128.f;
        b[i].d = kvt_f32_to_f16(dsup);
        const float d = kvt_f16_to_f32(b[i].d);
        const float id = d != 0 ? 1.f / d : 0.f;
        for (int g = 0; g < 16; g++) b[i].scales[g] = (int8_t)clampi(nearest_int(id * s[g]), -128, 127);
        for (int e = 0; e < KVT_QK_K; e++) {
            const float ds = d * b[i].scales[e / 16];
            const int q = ds != 0 ? clampi(nearest_int(src[e] / ds), -32, 31) + 32 : 32;
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            b[i].ql[64 * h + l + 32 * (k & 1)] |= (uint8_t)((q & 0xF) << (k < 2 ? 0 : 4));
            b[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
}
static void q6_K_dot(int64_t n, float *s, const void *x, const void *y) {
    const kvt_block_q6_K *a = x;
    const kvt_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / KVT_QK_K; i++) {
        int sumi = 0;
        for (int g = 0; g < 16; g++) {
            int isum = 0;
            for (int l = 0; l < 16; l++) isum += (q6_K_value(&a[i], 16 * g + l) - 32) * b[i].qs[16 * g + l];
            sumi += a[i].scales[g] * isum;
        }
        sum += kvt_f16_to_f32(a[i].d) * b[i].d * (float)sumi;
    }
    *s = sum;
}

// --------------------------------------------------------------- ops tables

KVT_DOT_MULTI_FROM_DOT(f32)
KVT_DOT_MULTI_FROM_DOT(f16)
KVT_DOT_MULTI_FROM_DOT(bf16)
KVT_DOT_MULTI_FROM_DOT(q4_0)
KVT_DOT_MULTI_FROM_DOT(q4_1)
KVT_DOT_MULTI_FROM_DOT(q5_0)
KVT_DOT_MULTI_FROM_DOT(q8_0)
KVT_DOT_MULTI_FROM_DOT(q4_K)
KVT_DOT_MULTI_FROM_DOT(q5_K)
KVT_DOT_MULTI_FROM_DOT(q6_K)

KVT_TYPE_OPS_TABLE(k_ref_ops);

// ------------------------------------------------------------ load-time repacking (quant.h)

// q4_K_x8 and q5_K_x8 (quant.h; q5: the source rows q5_K, their qh after the q4_K_x8 part of each super-block).
// Both block types start with d, dmin, scales[12]; qs is their last member.
static inline __attribute__((always_inline)) void k45_x8_pack(const void *src, void *dst, int64_t rows, int64_t n,
                                                              const int q5) {
    const int64_t bs = q5 ? (int64_t)sizeof(kvt_block_q5_K) : (int64_t)sizeof(kvt_block_q4_K), nb = n / KVT_QK_K,
                  wrs = nb * bs, qso = q5 ? offsetof(kvt_block_q5_K, qs) : offsetof(kvt_block_q4_K, qs);
    for (int64_t g = 0; g < rows / 8; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + g * 8 * wrs + b * 8 * bs, h[64];
            for (int r = 0; r < 8; r++) {
                const uint8_t *x = (const uint8_t *)src + (8 * g + r) * wrs + b * bs;
                for (int c = 0; c < 4; c++)
                    for (int p = 0; p < 4; p++) memcpy(o + 64 * (4 * c + p) + 8 * r, x + qso + 32 * c + 8 * p, 8);
                uint8_t sc[8], m[8];
                kvt_k_scales_unpack(x + 4, sc, m);
                for (int j = 0; j < 8; j++) {
                    o[1024 + 8 * r + j] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
                    h[8 * r + j] = (uint8_t)((sc[j] >> 4) | (m[j] >> 4) << 2);
                }
                memcpy(o + 1120 + 2 * r, x, 2);     // d
                memcpy(o + 1136 + 2 * r, x + 2, 2); // dmin
                for (int p = 0; q5 && p < 4; p++) memcpy(o + 1152 + 64 * p + 8 * r, x + offsetof(kvt_block_q5_K, qh) + 8 * p, 8);
            }
            for (int i = 0; i < 32; i++) o[1088 + i] = (uint8_t)(h[i] | h[i + 32] << 4);
        }
}
static void q4_K_x8_pack(const void *src, void *dst, int64_t rows, int64_t n) { k45_x8_pack(src, dst, rows, n, 0); }
static void q5_K_x8_pack(const void *src, void *dst, int64_t rows, int64_t n) { k45_x8_pack(src, dst, rows, n, 1); }

// Eight bytes at once (SWAR; the unpacking runs on every batched product of a repacked matrix).
static inline __attribute__((always_inline)) void k45_x8_unpack(const void *W, void *dst, int64_t r0, int64_t r1,
                                                                int64_t n, const int q5) {
    const int64_t bs = q5 ? (int64_t)sizeof(kvt_block_q5_K) : (int64_t)sizeof(kvt_block_q4_K), nb = n / KVT_QK_K,
                  wrs = nb * bs, qso = q5 ? offsetof(kvt_block_q5_K, qs) : offsetof(kvt_block_q4_K, qs);
    const uint64_t lo4 = 0x0F0F0F0F0F0F0F0Full, lo2 = 0x0303030303030303ull;
    for (int64_t r = r0; r < r1; r++) {
        const int rr = (int)(r % 8);
        const uint8_t *in = (const uint8_t *)W + (r / 8) * 8 * wrs;
        uint8_t *x = (uint8_t *)dst + (r - r0) * wrs;
        for (int64_t b = 0; b < nb; b++, in += 8 * bs, x += bs) {
            for (int k = 0; k < 16; k++) memcpy(x + qso + 8 * k, in + 64 * k + 8 * rr, 8);
            for (int p = 0; q5 && p < 4; p++) memcpy(x + offsetof(kvt_block_q5_K, qh) + 8 * p, in + 1152 + 64 * p + 8 * rr, 8);
            uint64_t L, H;
            memcpy(&L, in + 1024 + 8 * rr, 8);
            memcpy(&H, in + 1088 + 8 * (rr & 3), 8);
            const uint64_t h = (rr < 4 ? H : H >> 4) & lo4;
            const uint64_t sc = (L & lo4) | (h & lo2) << 4, m = (L >> 4 & lo4) | (h >> 2 & lo2) << 4;
            // the inverse of kvt_k_scales_unpack, four bytes at a time
            const uint32_t s03 = (uint32_t)sc, s47 = (uint32_t)(sc >> 32), m03 = (uint32_t)m, m47 = (uint32_t)(m >> 32);
            const uint32_t w[3] = {s03 | (s47 >> 4 & 0x03030303u) << 6, m03 | (m47 >> 4 & 0x03030303u) << 6,
                                   (s47 & 0x0F0F0F0Fu) | (m47 & 0x0F0F0F0Fu) << 4};
            memcpy(x + 4, w, 12);
            memcpy(x, in + 1120 + 2 * rr, 2);
            memcpy(x + 2, in + 1136 + 2 * rr, 2);
        }
    }
}
static void q4_K_x8_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) { k45_x8_unpack(W, dst, r0, r1, n, 0); }
static void q5_K_x8_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) { k45_x8_unpack(W, dst, r0, r1, n, 1); }
_Static_assert(offsetof(kvt_block_q4_K, scales) == 4 && offsetof(kvt_block_q5_K, scales) == 4 &&
                   8 * sizeof(kvt_block_q4_K) == KVT_X8_SB && 8 * sizeof(kvt_block_q5_K) == KVT_Q5X8_SB &&
                   KVT_Q5X8_SB == KVT_X8_SB + 256,
               "k45_x8 layouts");

// The 32-element x8 layouts (quant.h: q4_1_x8, q8_0_x8) of a source block of bs bytes, nh f16 header words (d, m)
// then its quants: in a group's block (8 * bs bytes), row r's quant chunk k (cb bytes) at cb * (8k + r), its header
// word h at 8 * (bs - 2 * nh) + 16h + 2r.
static inline __attribute__((always_inline)) void x8_pack32(const void *src, void *dst, int64_t rows, int64_t n, int bs,
                                                            int nh, int cb) {
    const int64_t nb = n / KVT_QK, wrs = nb * bs, q = bs - 2 * nh;
    for (int64_t g = 0; g < rows / 8; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + g * 8 * wrs + b * 8 * bs;
            for (int r = 0; r < 8; r++) {
                const uint8_t *x = (const uint8_t *)src + (8 * g + r) * wrs + b * bs;
                for (int k = 0; k < q / cb; k++) memcpy(o + cb * (8 * k + r), x + 2 * nh + cb * k, (size_t)cb);
                for (int h = 0; h < nh; h++) memcpy(o + 8 * q + 16 * h + 2 * r, x + 2 * h, 2);
            }
        }
}

static inline __attribute__((always_inline)) void x8_unpack32(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n,
                                                              int bs, int nh, int cb) {
    const int64_t nb = n / KVT_QK, wrs = nb * bs, q = bs - 2 * nh;
    for (int64_t r = r0; r < r1; r++) {
        const int rr = (int)(r % 8);
        const uint8_t *in = (const uint8_t *)W + (r / 8) * 8 * wrs;
        uint8_t *x = (uint8_t *)dst + (r - r0) * wrs;
        for (int64_t b = 0; b < nb; b++, in += 8 * bs, x += bs) {
            for (int k = 0; k < q / cb; k++) memcpy(x + 2 * nh + cb * k, in + cb * (8 * k + rr), (size_t)cb);
            for (int h = 0; h < nh; h++) memcpy(x + 2 * h, in + 8 * q + 16 * h + 2 * rr, 2);
        }
    }
}

static void q4_1_x8_pack(const void *src, void *dst, int64_t rows, int64_t n) { x8_pack32(src, dst, rows, n, 20, 2, 4); }
static void q4_1_x8_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) {
    x8_unpack32(W, dst, r0, r1, n, 20, 2, 4);
}
// q4_0_x8 and q5_0_x8 (quant.h): one row's block x (q4_0: d, qs; q5_0: d, qh, qs) into lane r of the group's block o
// (q4_1_x8's layout without the m words; q5_0: then the fifth bits in H, byte 4r + k: bit Q of element 4Q + k, bit
// 4 + Q of element 16 + 4Q + k), and back.
static void x8_q50_put(const uint8_t *x, int r, uint8_t *o, int q5) {
    const uint8_t *qs = x + (q5 ? 6 : 2);
    for (int k = 0; k < 4; k++) memcpy(o + 4 * (8 * k + r), qs + 4 * k, 4);
    memcpy(o + 128 + 2 * r, x, 2);
    if (!q5) return;
    uint32_t qh;
    memcpy(&qh, x + 2, 4);
    for (int k = 0; k < 4; k++) {
        int h = 0;
        for (int Q = 0; Q < 4; Q++) h |= (int)(qh >> (4 * Q + k) & 1) << Q | (int)(qh >> (16 + 4 * Q + k) & 1) << (4 + Q);
        o[144 + 4 * r + k] = (uint8_t)h;
    }
}
static void x8_q50_get(const uint8_t *o, int r, uint8_t *x, int q5) {
    uint8_t *qs = x + (q5 ? 6 : 2);
    for (int k = 0; k < 4; k++) memcpy(qs + 4 * k, o + 4 * (8 * k + r), 4);
    memcpy(x, o + 128 + 2 * r, 2);
    if (!q5) return;
    uint32_t qh = 0;
    for (int k = 0; k < 4; k++)
        for (int Q = 0; Q < 4; Q++) {
            const uint32_t h = o[144 + 4 * r + k];
            qh |= (h >> Q & 1) << (4 * Q + k) | (h >> (4 + Q) & 1) << (16 + 4 * Q + k);
        }
    memcpy(x + 2, &qh, 4);
}
static void x8_q50_pack_rows(int q5, const void *src, size_t wrs, int64_t nr, int64_t n, void *dst) {
    const int64_t nb = n / KVT_QK, ng = (nr + 7) / 8, bs = q5 ? 22 : 18, gb = 8 * bs;
    if (nr % 8) memset((uint8_t *)dst + (ng - 1) * nb * gb, 0, (size_t)(nb * gb)); // the padded group
    for (int64_t i = 0; i < nr; i++)
        for (int64_t b = 0; b < nb; b++)
            x8_q50_put((const uint8_t *)src + i * (int64_t)wrs + b * bs, (int)(i % 8), (uint8_t *)dst + ((i / 8) * nb + b) * gb, q5);
}
static void x8_q50_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n, int q5) {
    const int64_t nb = n / KVT_QK, bs = q5 ? 22 : 18, gb = 8 * bs;
    for (int64_t i = r0; i < r1; i++)
        for (int64_t b = 0; b < nb; b++)
            x8_q50_get((const uint8_t *)W + ((i / 8) * nb + b) * gb, (int)(i % 8), (uint8_t *)dst + (i - r0) * nb * bs + b * bs, q5);
}
void kvt_q4_0_x8_pack_rows(const void *src, size_t wrs, int64_t nr, int64_t n, void *dst) {
    x8_q50_pack_rows(0, src, wrs, nr, n, dst);
}
void kvt_q5_0_x8_pack_rows(const void *src, size_t wrs, int64_t nr, int64_t n, void *dst) {
    x8_q50_pack_rows(1, src, wrs, nr, n, dst);
}
static void q4_0_x8_pack(const void *src, void *dst, int64_t rows, int64_t n) {
    x8_q50_pack_rows(0, src, (size_t)(n / KVT_QK * 18), rows, n, dst);
}
static void q5_0_x8_pack(const void *src, void *dst, int64_t rows, int64_t n) {
    x8_q50_pack_rows(1, src, (size_t)(n / KVT_QK * 22), rows, n, dst);
}
static void q4_0_x8_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) { x8_q50_unpack(W, dst, r0, r1, n, 0); }
static void q5_0_x8_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) { x8_q50_unpack(W, dst, r0, r1, n, 1); }
// row r read back: its blocks unpacked and the source type's to_float (its expression, d * (float)(q - o), per element)
static void x8_q50_row_to_float(const void *W, int64_t r, int64_t n, float *dst, kvt_type st) {
    const int q5 = st == KVT_TYPE_Q5_0;
    const int64_t nb = n / KVT_QK, bs = q5 ? 22 : 18;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t blk[22];
        x8_q50_get((const uint8_t *)W + ((r / 8) * nb + b) * 8 * bs, (int)(r % 8), blk, q5);
        k_ref_ops[st].to_float(blk, dst + b * KVT_QK, KVT_QK);
    }
}
static void q4_0_x8_row_to_float(const void *W, int64_t r, int64_t n, float *dst) { x8_q50_row_to_float(W, r, n, dst, KVT_TYPE_Q4_0); }
static void q5_0_x8_row_to_float(const void *W, int64_t r, int64_t n, float *dst) { x8_q50_row_to_float(W, r, n, dst, KVT_TYPE_Q5_0); }
// q8_0_x8 (quant.h): row r's 8-byte chunk P of block b at b * KVT_Q80X8_B + 64P + 8(r % 8) of its group, its d at
// + 256 + 2(r % 8).
static void q8_0_x8_pack(const void *src, void *dst, int64_t rows, int64_t n) { x8_pack32(src, dst, rows, n, 34, 1, 8); }
static void q8_0_x8_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) {
    x8_unpack32(W, dst, r0, r1, n, 34, 1, 8);
}
_Static_assert(sizeof(kvt_block_q4_1) == 20 && 8 * 20 == KVT_Q41X8_B && sizeof(kvt_block_q8_0) == 34 &&
                   8 * 34 == KVT_Q80X8_B && sizeof(kvt_block_q4_0) == 18 && 8 * 18 == KVT_Q40X8_B &&
                   sizeof(kvt_block_q5_0) == 22 && 8 * 22 == KVT_Q50X8_B,
               "x8_pack32 block sizes");

// q8_0_to_float's expression (d * (float)q) per element.
static void q8_0_x8_row_to_float(const void *W, int64_t r, int64_t n, float *dst) {
    const int64_t nb = n / KVT_QK, wrs = nb * (int64_t)sizeof(kvt_block_q8_0);
    const int rr = (int)(r % 8);
    const uint8_t *in = (const uint8_t *)W + (r / 8) * 8 * wrs;
    for (int64_t b = 0; b < nb; b++, in += KVT_Q80X8_B, dst += KVT_QK) {
        uint16_t h;
        memcpy(&h, in + 256 + 2 * rr, 2);
        const float d = kvt_f16_to_f32(h);
        for (int j = 0; j < KVT_QK; j++) dst[j] = d * (float)(int8_t)in[64 * (j / 8) + 8 * rr + j % 8];
    }
}

// q6_K "repacks" to itself: the loader copies its matrices unchanged into the repacked weights' mapping, which has
// huge pages, where the GGUF file's mapping has 4 KiB ones. Its decode streams them from DRAM, and from 4 KiB
// pages (a TLB miss and a stop of the hardware prefetchers every 4 KiB) it read 16-17 GB/s where the same
// kernel reads 25-27 GB/s from huge pages (Zen 4, 2 threads, tools/bench/kq_decode_bench.c -H 0 / -H 1,
// 2026-11-29; docs/BENCHMARKS.md). Same bytes, same kernels: the same bits.
static void q6_K_copy_pack(const void *src, void *dst, int64_t rows, int64_t n) {
    memcpy(dst, src, (size_t)(rows * kvt_row_size(KVT_TYPE_Q6_K, n)));
}
static void q6_K_copy_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) {
    const int64_t wrs = kvt_row_size(KVT_TYPE_Q6_K, n);
    memcpy(dst, (const char *)W + r0 * wrs, (size_t)((r1 - r0) * wrs));
}

// q6_K_r (quant.h): element a(j, i) of pair j, byte i; b(j, i) = a(j, i) + 8.
static inline int q6r_elem(int j, int i) { return 16 * (8 * (i >> 4) + 2 * j + ((i >> 3) & 1)) + (i & 7); }
// Sets the 6-bit value q of element e of a q6_K block whose ql, qh start zeroed (q6_K_from_float's placement).
static inline void q6_K_set(kvt_block_q6_K *b, int e, int q) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    b->ql[64 * h + l + 32 * (k & 1)] |= (uint8_t)((q & 0xF) << (k < 2 ? 0 : 4));
    b->qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
}
// q[e] = the 6-bit value of element e of the q6_K block b (q6_K_value's, 32 contiguous bytes at a time).
static void q6_K_values(const kvt_block_q6_K *b, uint8_t q[KVT_QK_K]) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = b->ql[64 * h + l + 32 * (k & 1)];
                q[128 * h + 32 * k + l] = (uint8_t)((k < 2 ? lo & 0xF : lo >> 4) | ((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
            }
}
// (at load, every q6_K matrix where the q6_K_r decode runs: the values of a block decoded once, then placed)
static void q6_K_r_pack(const void *src, void *dst, int64_t rows, int64_t n) {
    const kvt_block_q6_K *x = src;
    kvt_block_q6_K *o = dst;
    uint8_t q[KVT_QK_K];
    for (int64_t b = 0; b < rows * (n / KVT_QK_K); b++) {
        kvt_block_q6_K t = x[b]; // scales, d
        q6_K_values(&x[b], q);
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 32; i++) {
                const int e = q6r_elem(j, i), qa = q[e], qb = q[e + 8];
                t.ql[32 * j + i] = (uint8_t)(qa | (qb >> 4) << 6);
                if (j & 1) t.qh[32 * (j >> 1) + i] |= (uint8_t)((qb & 15) << 4);
                else t.qh[32 * (j >> 1) + i] = (uint8_t)(qb & 15);
            }
        o[b] = t;
    }
}
static void q6_K_r_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) {
    const int64_t nb = n / KVT_QK_K;
    const kvt_block_q6_K *x = (const kvt_block_q6_K *)W + r0 * nb;
    kvt_block_q6_K *o = dst;
    for (int64_t b = 0; b < (r1 - r0) * nb; b++) {
        kvt_block_q6_K t = x[b];
        memset(t.ql, 0, sizeof t.ql), memset(t.qh, 0, sizeof t.qh);
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 32; i++) {
                const int e = q6r_elem(j, i), p = x[b].ql[32 * j + i];
                q6_K_set(&t, e, p & 63);
                q6_K_set(&t, e + 8, (p >> 6) << 4 | (x[b].qh[32 * (j >> 1) + i] >> (4 * (j & 1)) & 15));
            }
        o[b] = t;
    }
}
void kvt_q6r_prep(int64_t n, const void *x, void *p) {
    const kvt_block_q8_K *y = x;
    kvt_block_q8_K *o = p;
    for (int64_t b = 0; b < n / KVT_QK_K; b++) {
        o[b].d = y[b].d;
        // the 8 bytes at a(j, i) for i = 8c .. 8c + 7 are elements 128 (c >> 1) + 32 j + 16 (c & 1) + 0..7 (b: + 8)
        for (int j = 0; j < 4; j++)
            for (int c = 0; c < 4; c++) {
                const int e = q6r_elem(j, 8 * c);
                memcpy(o[b].qs + 64 * j + 8 * c, y[b].qs + e, 8);
                memcpy(o[b].qs + 64 * j + 32 + 8 * c, y[b].qs + e + 8, 8);
            }
        for (int g = 0; g < KVT_QK_K / 16; g++) o[b].bsums[g] = (int16_t)-y[b].bsums[g];
    }
}
static const kvt_repack_ops k_repack_q6r = {KVT_TYPE_Q6_K_R, 1, q6_K_r_pack, q6_K_r_unpack, NULL, 0};
// q5_K_x8 where its decode GEMV runs (kqx8.h: AVX2, on AVX-512 machines too); the scalar ISA keeps q5_K rows.
static const kvt_repack_ops k_repack_q5x8 = {KVT_TYPE_Q5_K_X8, 8, q5_K_x8_pack, q5_K_x8_unpack, NULL, 0};

static const kvt_repack_ops k_repack[KVT_TYPE_COUNT] = {
    [KVT_TYPE_Q4_K] = {KVT_TYPE_Q4_K_X8, 8, q4_K_x8_pack, q4_K_x8_unpack, NULL, 0},
    [KVT_TYPE_Q6_K] = {KVT_TYPE_Q6_K, 1, q6_K_copy_pack, q6_K_copy_unpack, NULL, 0},
    [KVT_TYPE_Q4_1] = {KVT_TYPE_Q4_1_X8, 8, q4_1_x8_pack, q4_1_x8_unpack, NULL, 0},
    [KVT_TYPE_Q4_0] = {KVT_TYPE_Q4_0_X8, 8, q4_0_x8_pack, q4_0_x8_unpack, q4_0_x8_row_to_float, 0},
    [KVT_TYPE_Q5_0] = {KVT_TYPE_Q5_0_X8, 8, q5_0_x8_pack, q5_0_x8_unpack, q5_0_x8_row_to_float, 0},
    [KVT_TYPE_Q8_0] = {KVT_TYPE_Q8_0_X8, 8, q8_0_x8_pack, q8_0_x8_unpack, q8_0_x8_row_to_float, 0},
    [KVT_TYPE_F16] = {KVT_TYPE_F16_X16, 16, kvt_f16x16_pack, kvt_f16x16_unpack, kvt_f16x16_row_to_float, 0},
    [KVT_TYPE_BF16] = {KVT_TYPE_BF16_X16, 16, kvt_bf16x16_pack, kvt_bf16x16_unpack, kvt_bf16x16_row_to_float, 2},
};

bool kvt_q5kx8_enabled(void) {
    static _Atomic int on; // 0: not read yet, 1: off, 2: on
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v == 0) {
        const char *e = getenv("KVT_Q5KX8");
        v = e && !strcmp(e, "0") ? 1 : 2;
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v == 2;
}

const kvt_repack_ops *kvt_type_repack(kvt_type t) {
    if (t == KVT_TYPE_F16 && !kvt_f16x16_enabled()) return NULL; // KVT_F16X16=0 (f16x16.h)
    if (t == KVT_TYPE_BF16 && !kvt_bf16x16_enabled()) return NULL; // KVT_BF16X16=0 (bf16x16.h)
    // q6_K_r where the AVX2 q6_K_r decode runs: AVX2 machines, and AVX-512 ones where decode takes the AVX2 GEMVs (Zen 5)
    const kvt_isa isa = kvt_kernels_isa();
    if (t == KVT_TYPE_Q6_K && (isa == KVT_ISA_AVX2 || (isa == KVT_ISA_AVX512 && kvt_kernels_decode_avx2(KVT_TYPE_Q6_K_R))))
        return &k_repack_q6r;
    if (t == KVT_TYPE_Q5_K && isa >= KVT_ISA_AVX2 && kvt_q5kx8_enabled()) return &k_repack_q5x8;
    return (unsigned)t < KVT_TYPE_COUNT && k_repack[t].pack ? &k_repack[t] : NULL;
}

const kvt_repack_ops *kvt_type_repack_into(kvt_type to) {
    if (to == KVT_TYPE_Q6_K_R) return &k_repack_q6r;
    if (to == KVT_TYPE_Q5_K_X8) return &k_repack_q5x8;
    for (int i = 0; i < KVT_TYPE_COUNT; i++)
        if (k_repack[i].pack && k_repack[i].to == to) return &k_repack[i];
    return NULL;
}

kvt_type kvt_type_repacked_from(kvt_type t) {
    if (t == KVT_TYPE_Q6_K_R) return KVT_TYPE_Q6_K;
    if (t == KVT_TYPE_Q5_K_X8) return KVT_TYPE_Q5_K;
    for (int i = 0; i < KVT_TYPE_COUNT; i++)
        if (k_repack[i].pack && k_repack[i].to == t) return (kvt_type)i;
    return t;
}

bool kvt_matrix_row_to_float(kvt_type t, const void *W, int64_t r, int64_t n, float *dst) {
    const kvt_type st = kvt_type_repacked_from(t);
    if (st != t) {
        const kvt_repack_ops *rp = kvt_type_repack_into(t);
        if (!rp || !rp->row_to_float) return false;
        rp->row_to_float(W, r, n, dst);
        return true;
    }
    const kvt_type_ops *ops = kvt_type_ops_get(t);
    const int64_t rs = kvt_row_size(t, n);
    if (!ops || !ops->to_float || rs < 0) return false;
    ops->to_float((const char *)W + r * rs, dst, n);
    return true;
}

// A repacked type has no row functions (its rows are interleaved): only the activation type of its
// source, for the callers that convert activations (kvt_matmul_rows does the rest).
static const kvt_type_ops k_repacked_ops[KVT_TYPE_COUNT] = {
    [KVT_TYPE_Q4_K_X8] = {NULL, NULL, NULL, KVT_TYPE_Q8_K, NULL},
    [KVT_TYPE_Q4_1_X8] = {NULL, NULL, NULL, KVT_TYPE_Q8_1, NULL},
    [KVT_TYPE_Q8_0_X8] = {NULL, NULL, NULL, KVT_TYPE_Q8_0, NULL},
    [KVT_TYPE_F16_X16] = {NULL, NULL, NULL, KVT_TYPE_F16, NULL},
    [KVT_TYPE_Q6_K_R] = {NULL, NULL, NULL, KVT_TYPE_Q8_K, NULL},
    [KVT_TYPE_Q5_K_X8] = {NULL, NULL, NULL, KVT_TYPE_Q8_K, NULL},
    [KVT_TYPE_Q4_0_X8] = {NULL, NULL, NULL, KVT_TYPE_Q8_0, NULL},
    [KVT_TYPE_Q5_0_X8] = {NULL, NULL, NULL, KVT_TYPE_Q8_0, NULL},
    [KVT_TYPE_BF16_X16] = {NULL, NULL, NULL, KVT_TYPE_BF16, NULL},
};

const kvt_type_ops *kvt_type_ops_ref(kvt_type t) {
    const kvt_type_ops *lb = kvt_lowbit_ops_ref(t); // q5_1, q2_K, q3_K, iq4_nl, iq4_xs (quant_lowbit.h)
    if (lb) return lb;
    if (t >= KVT_TYPE_GGUF_END && (unsigned)t < KVT_TYPE_COUNT && k_repacked_ops[t].vec_dot_type) return &k_repacked_ops[t];
    if ((unsigned)t >= KVT_TYPE_COUNT || !k_ref_ops[t].to_float) return NULL;
    return &k_ref_ops[t];
}

// ------------------------------------------------------------ ISA dispatch

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
// F16C from CPUID leaf 1, ECX bit 29 (clang before 15 has no "f16c" in __builtin_cpu_supports).
static int cpu_has_f16c(void) {
    unsigned a = 0, b = 0, c = 0, d = 0; // (set by __get_cpuid; zeros for compilers that cannot see it)
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

static kvt_isa detect_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return KVT_ISA_AVX512;
    if (avx2) return KVT_ISA_AVX2;
#endif
    return KVT_ISA_SCALAR;
}

// Detected once; concurrent first calls compute the same value, so the
// relaxed store is benign. KVT_ISA=scalar|avx2|avx512 lowers it (never raises
// it), to compare the kernel paths on one machine.
static atomic_int g_isa = -1;

kvt_isa kvt_kernels_isa(void) {
    int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (v < 0) {
        v = (int)detect_isa();
        const char *e = getenv("KVT_ISA");
        for (int i = KVT_ISA_SCALAR; e && i < v; i++) {
            if (!strcmp(e, kvt_isa_name((kvt_isa)i))) v = i;
        }
        atomic_store_explicit(&g_isa, v, memory_order_relaxed);
    }
    return (kvt_isa)v;
}

kvt_isa kvt_kernels_isa_detected(void) { return detect_isa(); }

kvt_isa kvt_kernels_set_isa(kvt_isa isa) {
    const kvt_isa old = kvt_kernels_isa(), max = detect_isa();
    atomic_store_explicit(&g_isa, (int)(isa < max ? isa : max), memory_order_relaxed);
    return old;
}

#ifndef KVT_PF_INTEL
#define KVT_PF_INTEL 4096
#endif
#ifndef KVT_PF_INTEL_A7
#define KVT_PF_INTEL_A7 2048
#endif
#ifndef KVT_PF_AMD_AVX2
#define KVT_PF_AMD_AVX2 4096
#endif
#ifndef KVT_PF_AMD_AVX2_Q4K
#define KVT_PF_AMD_AVX2_Q4K 1024
#endif
#ifndef KVT_PF_AMD_AVX2_Q6K
#define KVT_PF_AMD_AVX2_Q6K 1024
#endif
#ifndef KVT_PF_AMD_ZEN5
#define KVT_PF_AMD_ZEN5 1024
#endif
#ifndef KVT_PF_AMD_ZEN4_Q4K
#define KVT_PF_AMD_ZEN4_Q4K 2048
#endif
#ifndef KVT_PF_AMD_ZEN5_DENSE
#define KVT_PF_AMD_ZEN5_DENSE 256
#endif
#ifndef KVT_PF_AMD_AVX2_Q80_L1
#define KVT_PF_AMD_AVX2_Q80_L1 0
#endif
#ifndef KVT_PF_AMD_AVX2_Q41_L1
#define KVT_PF_AMD_AVX2_Q41_L1 0
#endif
// The prefetch slots: a type's distance (kvt_kernels_prefetch_type), PF_QUANT (kvt_kernels_prefetch), PF_DENSE
// (kvt_kernels_prefetch_dense), then from PF_L1 a type's L1 flag (kvt_kernels_prefetch_l1).
// From PF_DEC_AVX2 (after them) a type's kvt_kernels_decode_avx2.
enum { PF_QUANT = KVT_TYPE_COUNT, PF_DENSE, PF_L1, PF_DEC_AVX2 = PF_L1 + KVT_TYPE_COUNT, PF_SLOTS = PF_DEC_AVX2 + KVT_TYPE_COUNT };
// This CPU's value of every slot (quant.h). Distances: GenuineIntel KVT_PF_INTEL for all (4096: the Emerald Rapids
// class VM, family 6 model 0xCF, q4dec11 in docs/log/BENCHMARKS-kernels-2.md), but KVT_PF_INTEL_A7 (2048) where CPUID
// says family 6 model 0xA7 (a Xeon VM with AMX, AVX512-FP16 and a 480 MiB L3: every decode GEMV paired 1.02-1.05x
// against 4096 from DRAM, 75-100% of the pairs won, i7pf in docs/log/BENCHMARKS-kernels-6.md). AuthenticAMD without
// AVX-512 (Zen 3 and before): KVT_PF_AMD_AVX2 for the quantized GEMVs, KVT_PF_AMD_AVX2_Q4K (1024, z4k; 2048 z3k) for
// q4_K_x8 and KVT_PF_AMD_AVX2_Q6K (1024: into L1 only, paired 1.02-1.09x against 4096, z5k6; z3k's 2048 lost with
// the L2 + L1 prefetch) for the q6_K_r rows (docs/log/BENCHMARKS-kernels-3.md), none for the dense ones (z3dec); AMD with AVX-512 (Zen 4 on): none
// (BENCHMARKS-kernels-2.md, kq6x8) but KVT_PF_AMD_ZEN4_Q4K (2048) for q4_K_x8 on family 0x19 (Zen 4), whose decode runs
// its AVX2 GEMV there (kvt_kernels_decode_avx2; paired 1.03-1.09x against the AVX-512 GEMV without, z4q4k in
// docs/log/BENCHMARKS-kernels-5.md), and on family 0x1A on (Zen 5) KVT_PF_AMD_ZEN5 (1024) for the 32-block x8 GEMVs
// (q8_0_x8, q4_1_x8: paired 1.20-1.30x and 1.10-1.14x from DRAM, z5dq in docs/log/BENCHMARKS-kernels-5.md) and for
// q4_K_x8, whose decode runs its AVX2 GEMV there (kvt_kernels_decode_avx2: into L1 only at that distance, z5dq2), and
// still none for the other K-quant ones (q4_K, q6_K: 0.89-0.91x and 0.97-1.06x with it; q6_K_r, whose decode runs its
// AVX2 GEMV there too: its slot 0 gives the q6_K rows' prefetch, into L1 KQ_PF = 4096 ahead, which read faster than
// 1024-8192 into L1, L2 or both: 0.84-1.01x, z5q6); the dense ones KVT_PF_AMD_ZEN5_DENSE
// (256: f16_x16's split form, its L1 prefetch KVT_X8_PF_NEAR ahead, paired 1.03-1.22x against none; bf16's four-stream
// form 24, 1.02-1.07x; z5f16 in docs/log/BENCHMARKS-kernels-5.md; z5dq's 1024 and 4096 lost, 0.88-0.98x). KVT_PREFETCH=BYTES sets all the distances. L1 flags: 1 but on AMD without AVX-512
// for q8_0_x8 (KVT_PF_AMD_AVX2_Q80_L1, 0: paired 1.01-1.09x without on a Zen 3, z4q8) and q4_1_x8
// (KVT_PF_AMD_AVX2_Q41_L1, 0: its AVX2 decode form 4 instead of 34, z4q41); KVT_PREFETCH leaves them.
static void detect_prefetch(int64_t v[PF_SLOTS]) {
    int64_t pq = 0, pd = 0, p4 = 0, p6 = 0;
    bool amd_avx2 = false, zen4 = false, zen5 = false, zen5_cpu = false;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0; // (set by __get_cpuid; zeros for compilers that cannot see it)
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        // the vendor: EBX, EDX, ECX of leaf 0, "GenuineIntel" or "AuthenticAMD"
        const bool intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; // "GenuineIntel"
        if (intel) pq = pd = p4 = p6 = KVT_PF_INTEL;
        __builtin_cpu_init();
        const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; // "AuthenticAMD"
        amd_avx2 = amd && !__builtin_cpu_supports("avx512f");
        if (amd_avx2) pq = KVT_PF_AMD_AVX2, p4 = KVT_PF_AMD_AVX2_Q4K, p6 = KVT_PF_AMD_AVX2_Q6K;
        unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0, fam = 0; // leaf 1: the family, base + extended where base is 0xF
        if (__get_cpuid(1, &a1, &b1, &c1, &d1)) fam = (a1 >> 8 & 0xF) == 0xF ? 0xF + (a1 >> 20 & 0xFF) : a1 >> 8 & 0xF;
        const unsigned model = (a1 >> 4 & 0xF) | (fam == 6 || fam >= 0xF ? (a1 >> 16 & 0xF) << 4 : 0);
        if (intel && fam == 6 && model == 0xA7) pq = pd = p4 = p6 = KVT_PF_INTEL_A7;
        zen5 = zen5_cpu = amd && !amd_avx2 && fam >= 0x1A;
        if (zen5) pq = p4 = KVT_PF_AMD_ZEN5, pd = KVT_PF_AMD_ZEN5_DENSE;
        zen4 = amd && !amd_avx2 && fam == 0x19;
        if (zen4) p4 = KVT_PF_AMD_ZEN4_Q4K;
    }
#endif
    const char *e = getenv("KVT_PREFETCH");
    if (e && *e) {
        char *end;
        const long long x = strtoll(e, &end, 10);
        if (!*end && x >= 0 && x <= 65536) pq = pd = p4 = p6 = (int64_t)x / 64 * 64, zen5 = false;
    }
    for (int s = 0; s < PF_L1; s++)
        v[s] = s == KVT_TYPE_Q4_K_X8 || s == KVT_TYPE_Q5_K_X8 ? p4 : s == KVT_TYPE_Q6_K_R ? p6 : s == PF_DENSE ? pd
             : zen5 && (s == KVT_TYPE_Q4_K || s == KVT_TYPE_Q6_K) ? 0 : pq;
    for (int t = 0; t < KVT_TYPE_COUNT; t++) v[PF_L1 + t] = 1;
    for (int t = 0; t < KVT_TYPE_COUNT; t++) // Zen 5: f16_x16, q4_K_x8, q6_K_r; Zen 4: q4_K_x8
        v[PF_DEC_AVX2 + t] = (zen5_cpu && (t == KVT_TYPE_F16_X16 || t == KVT_TYPE_Q4_K_X8 || t == KVT_TYPE_Q6_K_R)) ||
                             (zen4 && t == KVT_TYPE_Q4_K_X8);
    if (amd_avx2) {
        v[PF_L1 + KVT_TYPE_Q8_0_X8] = KVT_PF_AMD_AVX2_Q80_L1 != 0;
        v[PF_L1 + KVT_TYPE_Q4_1_X8] = KVT_PF_AMD_AVX2_Q41_L1 != 0;
    }
}
// The slots, each value plus one (0: not detected yet, so the zero-initialised array needs no set-up). Concurrent
// first calls detect the same values, so the relaxed stores are benign.
static _Atomic int64_t g_prefetch[PF_SLOTS];
// Every slot s from v[s]; v[s] < 0 leaves slot s as it is.
static void prefetch_store(const int64_t v[PF_SLOTS]) {
    for (int s = 0; s < PF_SLOTS; s++)
        if (v[s] >= 0) atomic_store_explicit(&g_prefetch[s], v[s] + 1, memory_order_relaxed);
}
static void prefetch_init(void) {
    int64_t v[PF_SLOTS];
    detect_prefetch(v);
    prefetch_store(v);
}
static int64_t prefetch_slot(int s) {
    int64_t v = atomic_load_explicit(&g_prefetch[s], memory_order_relaxed);
    if (v == 0) prefetch_init(), v = atomic_load_explicit(&g_prefetch[s], memory_order_relaxed);
    return v - 1;
}
int64_t kvt_kernels_prefetch(void) { return prefetch_slot(PF_QUANT); }
int64_t kvt_kernels_prefetch_type(kvt_type t) { return prefetch_slot((unsigned)t < KVT_TYPE_COUNT ? (int)t : PF_QUANT); }
int64_t kvt_kernels_prefetch_dense(void) { return prefetch_slot(PF_DENSE); }
int kvt_kernels_prefetch_l1(kvt_type t) { return (unsigned)t < KVT_TYPE_COUNT ? prefetch_slot(PF_L1 + (int)t) != 0 : 1; }
int kvt_kernels_decode_avx2(kvt_type t) { return (unsigned)t < KVT_TYPE_COUNT && prefetch_slot(PF_DEC_AVX2 + (int)t) != 0; }

// The decode forms (matmul.h): a study form set for a type, else its default.
static _Atomic int g_decode_variant[KVT_TYPE_COUNT];
int kvt_kernels_decode_variant(kvt_type t) {
    return (unsigned)t < KVT_TYPE_COUNT ? atomic_load_explicit(&g_decode_variant[t], memory_order_relaxed) : 0;
}
int kvt_kernels_decode_form(kvt_type t) {
    const int v = kvt_kernels_decode_variant(t);
    if (v != 0) return v;
    if (t == KVT_TYPE_F16 || t == KVT_TYPE_BF16) return kvt_kernels_prefetch_dense() > 0 ? 24 : 0;
    // q4_1_x8: 34 (4 streams, the L1 prefetch), 4 (4 streams, L2 only) where kvt_kernels_prefetch_l1 says no (z4q41)
    if (t == KVT_TYPE_Q4_1_X8 && kvt_kernels_prefetch() > 0) return kvt_kernels_prefetch_l1(t) ? 34 : 4;
    return 0;
}
int kvt_kernels_set_decode_variant(kvt_type t, int v) {
    if ((unsigned)t >= KVT_TYPE_COUNT) return 0;
    return atomic_exchange_explicit(&g_decode_variant[t], v, memory_order_relaxed);
}
static int64_t prefetch_clamp(int64_t bytes) { return (bytes < 0 ? 0 : bytes > 65536 ? 65536 : bytes) / 64 * 64; }
// (the setters detect first, so that a later first read cannot overwrite what they set)
int64_t kvt_kernels_set_prefetch(int64_t bytes) {
    const int64_t old = kvt_kernels_prefetch(), v = prefetch_clamp(bytes);
    int64_t set[PF_SLOTS];
    for (int s = 0; s < PF_SLOTS; s++) set[s] = s < PF_L1 && s != PF_DENSE ? v : -1; // the distances but the dense one
    prefetch_store(set);
    return old;
}
void kvt_kernels_reset_prefetch(void) { prefetch_init(); }
int64_t kvt_kernels_set_prefetch_dense(int64_t bytes) {
    const int64_t old = kvt_kernels_prefetch_dense();
    atomic_store_explicit(&g_prefetch[PF_DENSE], prefetch_clamp(bytes) + 1, memory_order_relaxed);
    return old;
}

const char *kvt_isa_name(kvt_isa isa) {
    switch (isa) {
    case KVT_ISA_SCALAR: return "scalar";
    case KVT_ISA_AVX2: return "avx2";
    case KVT_ISA_AVX512: return "avx512";
    }
    return "?";
}

const kvt_type_ops *kvt_type_ops_isa(kvt_type t, kvt_isa isa) {
    if (isa > kvt_kernels_isa()) return NULL;
    switch (isa) {
    case KVT_ISA_SCALAR: return kvt_type_ops_ref(t);
    case KVT_ISA_AVX2: {
        const kvt_type_ops *lb = kvt_lowbit_ops_avx2(t); // the quant_lowbit.h types, then the rest
        return lb ? lb : kvt_type_ops_avx2_table(t);
    }
    case KVT_ISA_AVX512: {
        const kvt_type_ops *lb = kvt_lowbit_ops_avx512(t);
        return lb ? lb : kvt_type_ops_avx512_table(t);
    }
    }
    return NULL;
}

const kvt_type_ops *kvt_type_ops_get(kvt_type t) {
    if (t >= KVT_TYPE_GGUF_END) return kvt_type_ops_ref(t);
    for (int isa = (int)kvt_kernels_isa(); isa > KVT_ISA_SCALAR; isa--) {
        const kvt_type_ops *ops = kvt_type_ops_isa(t, (kvt_isa)isa);
        if (ops) return ops;
    }
    return kvt_type_ops_ref(t);
}

// ------------------------------------------------------------ row converters

void kvt_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_f16_to_f32_row_avx2(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = kvt_f16_to_f32(src[i]);
}

void kvt_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n) {
    if (kvt_kernels_isa() >= KVT_ISA_AVX2) {
        kvt_f32_to_f16_row_avx2(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = kvt_f32_to_f16(src[i]);
}

void kvt_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = kvt_bf16_to_f32(src[i]); // compilers vectorize this
}

void kvt_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = kvt_f32_to_bf16(src[i]);
}
