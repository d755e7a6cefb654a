// bf16x16.c - the bf16_x16 layout (bf16x16.h): packing at load, rows read back, the scalar reference kernel, the
// MXCSR mode of its order.
#include "bf16x16.h"
#include "bf16x16_mode.h"

#include <math.h>

#include "../base/switch.h"
#include "f16.h"

void kvt_bf16x16_pack_rows(const void *src, size_t src_rs, int64_t nr, int64_t n, void *dst) {
    const int64_t np = n / 2; // pairs
    uint32_t *d = dst;
    for (int64_t p = 0; p * 16 < nr; p++) {
        uint32_t *o = d + p * 16 * np;
        for (int i = 0; i < 16; i++) {
            const int64_t r = 16 * p + i;
            const uint16_t *in = (const uint16_t *)((const char *)src + r * (int64_t)src_rs);
            for (int64_t j = 0; j < np; j++) o[16 * j + i] = r < nr ? (uint32_t)in[2 * j] | (uint32_t)in[2 * j + 1] << 16 : 0;
        }
    }
}

void kvt_bf16x16_pack(const void *src, void *dst, int64_t rows, int64_t n) {
    kvt_bf16x16_pack_rows(src, (size_t)(2 * n), rows, n, dst);
}

// Element k of row r of a bf16_x16 matrix of n (even) columns.
static uint16_t elem(const uint16_t *w, int64_t r, int64_t k, int64_t n) {
    return w[(r / 16) * 16 * n + 32 * (k / 2) + 2 * (r % 16) + (k & 1)];
}

void kvt_bf16x16_unpack(const void *W, void *dst, int64_t r0, int64_t r1, int64_t n) {
    uint16_t *d = dst;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t k = 0; k < n; k++) d[(r - r0) * n + k] = elem(W, r, k, n);
}

void kvt_bf16x16_row_to_float(const void *W, int64_t r, int64_t n, float *dst) {
    for (int64_t k = 0; k < n; k++) dst[k] = kvt_bf16_to_f32(elem(W, r, k, n));
}

// One step of the order: F(w * x + acc) under the FTZ | DAZ mode (kvt_bf16x16_mode_enter).
static inline float step(uint16_t w, uint16_t x, float acc) { return fmaf(kvt_bf16_to_f32(w), kvt_bf16_to_f32(x), acc); }

// The order of bf16x16.h on bf16_x16 panels, called between the mode's enter and leave (not inlined into the caller:
// the mode's calls are the fence of its arithmetic).
__attribute__((noinline)) static void mm_ref(int64_t n, const uint16_t *w, int64_t r0, int64_t r1, const uint16_t *x,
                                             int64_t n_tok, float *Y, int64_t ldy) {
    for (int64_t t = 0; t < n_tok; t++) {
        const uint16_t *xt = x + t * n;
        for (int64_t p = r0 / 16; p * 16 < r1; p++) {
            const uint16_t *wp = w + p * 16 * n;
            float acc[16] = {0};
            for (int64_t k = 0; k < n; k += 2)
                for (int i = 0; i < 16; i++) {
                    acc[i] = step(wp[16 * k + 2 * i + 1], xt[k + 1], acc[i]);
                    acc[i] = step(wp[16 * k + 2 * i], xt[k], acc[i]);
                }
            for (int i = 0; i < 16; i++) {
                const int64_t r = 16 * p + i;
                if (r >= r0 && r < r1) Y[t * ldy + r] = acc[i];
            }
        }
    }
}

__attribute__((noinline)) static void rows_ref(int64_t n, const char *W, size_t wrs, int64_t r0, int64_t r1,
                                               const uint16_t *x, int64_t n_tok, float *Y, int64_t ldy) {
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)(W + r * (int64_t)wrs);
        for (int64_t t = 0; t < n_tok; t++) {
            const uint16_t *xt = x + t * n;
            float acc = 0.0f;
            for (int64_t k = 0; k < n; k += 2) {
                acc = k + 1 < n ? step(w[k + 1], xt[k + 1], acc) : step(0, 0, acc);
                acc = step(w[k], xt[k], acc);
            }
            Y[t * ldy + r] = acc;
        }
    }
}

void kvt_bf16x16_rows_ref(int64_t n, const void *W, size_t wrs, int64_t r0, int64_t r1, const void *X, int64_t n_tok,
                          float *Y, int64_t ldy) {
    if (r0 >= r1 || n_tok <= 0 || n <= 0) return;
    const unsigned m = kvt_bf16x16_mode_enter();
    rows_ref(n, W, wrs, r0, r1, X, n_tok, Y, ldy);
    kvt_bf16x16_mode_leave(m);
}

void kvt_bf16x16_mm_ref(int64_t n, const void *W, int64_t r0, int64_t r1, const void *X, int64_t n_tok, float *Y,
                        int64_t ldy) {
    if (r0 >= r1 || n_tok <= 0 || n <= 0) return;
    const unsigned m = kvt_bf16x16_mode_enter();
    mm_ref(n, W, r0, r1, X, n_tok, Y, ldy);
    kvt_bf16x16_mode_leave(m);
}

int64_t kvt_bf16x16_scratch(int64_t n, int64_t n_tok) {
    (void)n;
    return 16 * n_tok * 4 + 64; // a panel cut by the row range: [n_tok][16] outputs
}

unsigned kvt_bf16x16_mode_enter(void) {
#ifdef __SSE2__
    const unsigned m = _mm_getcsr();
    _mm_setcsr(m | KVT_MXCSR_FTZ_DAZ);
    return m;
#else
    return 0;
#endif
}
void kvt_bf16x16_mode_leave(unsigned m) {
#ifdef __SSE2__
    _mm_setcsr(m);
#else
    (void)m;
#endif
}

static kvt_switch g_enabled = KVT_SWITCH_INIT("KVT_BF16X16");
int kvt_bf16x16_enabled(void) { return kvt_switch_on(&g_enabled); }
int kvt_bf16x16_set_enabled(int on) { return kvt_switch_set(&g_enabled, on); }
