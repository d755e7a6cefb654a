// f16x16.c - the f16_x16 layout (f16x16.h): packing at load, rows read back, the scalar reference kernel.
#include "f16x16.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "f16.h"

void kvt_f16x16_pack(const void *src, void *dst, int64_t rows, int64_t n) {
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (int64_t p = 0; p < rows / 16; p++) {
        const uint16_t *in = s + p * 16 * n;
        uint16_t *o = d + p * 16 * n;
        // 64 columns of the 16 rows at a time (the rows' lines stay in L1)
        for (int64_t k0 = 0; k0 < n; k0 += 64) {
            const int64_t k1 = k0 + 64 < n ? k0 + 64 : n;
            for (int i = 0; i < 16; i++)
                for (int64_t k = k0; k < k1; k++) o[16 * k + i] = in[i * n + k];
        }
    }
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

static atomic_int g_enabled = -1;
int kvt_f16x16_enabled(void) {
    int v = atomic_load_explicit(&g_enabled, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("KVT_F16X16");
        v = !(e && !strcmp(e, "0"));
        atomic_store_explicit(&g_enabled, v, memory_order_relaxed);
    }
    return v;
}
int kvt_f16x16_set_enabled(int on) {
    const int old = kvt_f16x16_enabled();
    atomic_store_explicit(&g_enabled, on ? 1 : 0, memory_order_relaxed);
    return old;
}
