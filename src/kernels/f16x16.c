// f16x16.c - the f16_x16 layout (f16x16.h): packing at load, rows read back, the scalar reference kernel.
#include "f16x16.h"

#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "../base/switch.h"
#include "f16.h"

#ifdef __SSE2__
// o[16 (k + j) + i] = r[i][k + j] for i, j < 8: an 8 x 8 transpose of 16-bit values in three rounds of unpacks.
static void t8x8(const uint16_t *const *r, int64_t k, uint16_t *o) {
    __m128i a[8], b[8], c[8];
    for (int i = 0; i < 8; i++) a[i] = _mm_loadu_si128((const __m128i *)(r[i] + k));
    for (int i = 0; i < 4; i++) {
        b[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
        b[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 2; i++) {
            c[4 * h + 2 * i] = _mm_unpacklo_epi32(b[4 * h + i], b[4 * h + i + 2]);
            c[4 * h + 2 * i + 1] = _mm_unpackhi_epi32(b[4 * h + i], b[4 * h + i + 2]);
        }
    for (int j = 0; j < 4; j++) {
        _mm_storeu_si128((__m128i *)(o + 16 * (k + 2 * j)), _mm_unpacklo_epi64(c[j], c[j + 4]));
        _mm_storeu_si128((__m128i *)(o + 16 * (k + 2 * j + 1)), _mm_unpackhi_epi64(c[j], c[j + 4]));
    }
}
#endif

void kvt_f16x16_pack_rows(const void *src, size_t src_rs, int64_t nr, int64_t n, void *dst) {
    uint16_t *d = dst;
    for (int64_t p = 0; p * 16 < nr; p++) {
        uint16_t *o = d + p * 16 * n;
#ifdef __SSE2__
        if (16 * p + 16 <= nr && n % 8 == 0) { // a whole panel: 8 x 8 transposes
            const uint16_t *r[16];
            for (int i = 0; i < 16; i++) r[i] = (const uint16_t *)((const char *)src + (16 * p + i) * (int64_t)src_rs);
            for (int64_t k = 0; k < n; k += 8) {
                t8x8(r, k, o);
                t8x8(r + 8, k, o + 8);
            }
            continue;
        }
#endif
        for (int64_t k0 = 0; k0 < n; k0 += 64) {
            const int64_t k1 = k0 + 64 < n ? k0 + 64 : n;
            for (int i = 0; i < 16; i++) {
                const int64_t r = 16 * p + i;
                if (r < nr) {
                    const uint16_t *in = (const uint16_t *)((const char *)src + r * (int64_t)src_rs);
                    for (int64_t k = k0; k < k1; k++) o[16 * k + i] = in[k];
                } else
                    for (int64_t k = k0; k < k1; k++) o[16 * k + i] = 0;
            }
        }
    }
}

void kvt_f16x16_pack(const void *src, void *dst, int64_t rows, int64_t n) {
    kvt_f16x16_pack_rows(src, (size_t)(2 * n), rows, n, dst);
}

void kvt_f16x16_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) {
    const uint16_t *w = W;
    uint16_t *d = dst;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *in = w + (r / 16) * 16 * n + r % 16;
        uint16_t *o = d + (r - r0) * n;
        for (int64_t k = 0; k < n; k++) o[k] = in[16 * k];
    }
}

void kvt_f16x16_row_to_float(const void *W, int64_t r, int64_t n, float *dst) {
    const uint16_t *in = (const uint16_t *)W + (r / 16) * 16 * n + r % 16;
    for (int64_t k = 0; k < n; k++) dst[k] = kvt_f16_to_f32(in[16 * k]);
}

// The order of f16x16.h: one fmaf chain per output over k ascending (16 rows of a panel side by side).
void kvt_f16x16_mm_ref(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                       int64_t ldy) {
    const uint16_t *w = W, *x = X;
    for (int64_t t = 0; t < n_tok; t++) {
        const uint16_t *xt = x + t * n;
        for (int64_t p = r0 / 16; p * 16 < r1; p++) {
            const uint16_t *wp = w + p * 16 * n;
            float acc[16] = {0};
            for (int64_t k = 0; k < n; k++) {
                const float xk = kvt_f16_to_f32(xt[k]);
                for (int i = 0; i < 16; i++) acc[i] = fmaf(kvt_f16_to_f32(wp[16 * k + i]), xk, acc[i]);
            }
            for (int i = 0; i < 16; i++) {
                const int64_t r = 16 * p + i;
                if (r >= r0 && r < r1) Y[t * ldy + r] = acc[i];
            }
        }
    }
}

static kvt_switch g_enabled = KVT_SWITCH_INIT("KVT_F16X16");
int kvt_f16x16_enabled(void) { return kvt_switch_on(&g_enabled); }
int kvt_f16x16_set_enabled(int on) { return kvt_switch_set(&g_enabled, on); }
