// matmul.c - row-range matrix product driver: picks the kernels of the
// running CPU and blocks the loops; the arithmetic lives in quant*.c and
// matmul_*.c.
//
// SIMD path: activation rows are first converted into the kernel's private
// layout (scales as floats, f16 -> f32, ...), then the kernel runs over a
// strip of weight rows that stays in L2, nt_max activation rows at a time (4,
// or 8 for the AVX-512 quantized kernels), decoding each weight block once for
// all of them. Decode (n_tok == 1) prepares its single row
// once and streams the weights through.
// GEMM path (n_tok >= the kernel's gemm_min_tok, 2): register tiles of
// gemm_avx2.c (AVX2: every type but the activation-only ones, q4_0 and q5_0, which run q40x8.h on their rows packed
// into q4_0_x8 / q5_0_x8 groups, or the repacked matrix's) and
// gemm_avx512.c (AVX-512: f32, f16, bf16) and kq_avx512.h (AVX-512: q4_K, q6_K),
// bit-identical per output to that ISA's decode kernels, so a row's result does
// not depend on the batch it is computed in. (The older AVX-512 panel tiles for
// f16 and q8_0 sum in another order: only with -DKVT_MM_AVX512_GEMM=1.)
// Fallback path (types without a matmul kernel, or scalar):
// the same blocking with kvt_type_ops.vec_dot_multi on the raw activations.
#include "matmul.h"

#include "bf16x16.h"
#include "f16.h"
#include "f16x16.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define STRIP_BYTES (256 * 1024) // weight rows per strip (L2)
#define TOK_BLOCK_BYTES (32 * 1024) // activation rows per token block (L1)
#define STACK_SCRATCH (32 * 1024)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// kvt_kernels_decode_variant, kvt_kernels_decode_form and kvt_kernels_set_decode_variant: quant.c (beside
// kvt_kernels_prefetch; the kernels of quant_avx2.c read them too, also in the CUDA emulation's library).

static int64_t strip_rows(int64_t wrs) {
    const int64_t s = STRIP_BYTES / (wrs > 0 ? wrs : 1);
    return s < 4 ? 4 : s;
}

// Tokens per block: a multiple of ntm (tokens per rows call) fitting in TOK_BLOCK_BYTES.
static int64_t token_block(int64_t row_bytes, int64_t n_tok, int64_t ntm) {
    int64_t tb = TOK_BLOCK_BYTES / (row_bytes > 0 ? row_bytes : 1);
    tb = tb / ntm * ntm;
    if (tb < ntm) tb = ntm;
    return min64(tb, n_tok);
}
static int64_t nt_max(const kvt_mm_kernel *mm) { return mm->nt_max > 0 ? mm->nt_max : KVT_DOT_MULTI_MAX; }

static void run_rows(const kvt_mm_kernel *mm, int64_t n, const char *w, int64_t wrs, int64_t rs, int64_t re,
                     const char *P, int64_t prs, int64_t t0, int64_t t1, float *Y, int64_t ldy, void *scratch) {
    for (int64_t t = t0; t < t1; t += nt_max(mm)) {
        const int nt = (int)min64(t1 - t, nt_max(mm));
        mm->rows(n, w + rs * wrs, (size_t)wrs, re - rs, P + (t - t0) * prs, (size_t)prs, nt, Y + t * ldy + rs, ldy,
                 scratch);
    }
}

// Returns 0 if scratch memory could not be had (caller falls back).
static int matmul_kernel(kvt_type wt, const kvt_mm_kernel *mm, int64_t n, const char *w, int64_t wrs, int64_t r0, int64_t r1,
                         const char *x, int64_t xrs, int64_t n_tok, float *Y, int64_t ldy) {
    const int64_t prs = mm->prep_size(n);
    const int64_t tb = token_block(prs, n_tok, nt_max(mm));
    // P: [tb, prs] prepared activation rows, then the rows calls' scratch
    const int64_t rsb = mm->rows_scratch ? (mm->rows_scratch(n) + 63) & ~(int64_t)63 : 0;
    _Alignas(64) char stack_buf[STACK_SCRATCH];
    char *heap = NULL, *P = stack_buf;
    if (tb * prs + rsb > STACK_SCRATCH) {
        heap = malloc((size_t)(tb * prs + rsb + 64));
        if (!heap) return 0;
        P = (char *)(((uintptr_t)heap + 63) & ~(uintptr_t)63);
    }
    void *scratch = rsb ? P + tb * prs : NULL;
    // (form >= 20, matmul.h: decode streams over the call's whole range rather than per strip: f16/bf16 by default on
    // Intel, or a study form)
    const int64_t strip = n_tok == 1 && kvt_kernels_decode_form(wt) >= 20 ? r1 - r0 : strip_rows(wrs);
    if (tb == n_tok) { // all tokens prepared once (always the case for decode)
        for (int64_t t = 0; t < n_tok; t++) mm->prep(n, x + t * xrs, P + t * prs);
        for (int64_t rs = r0; rs < r1; rs += strip)
            run_rows(mm, n, w, wrs, rs, min64(rs + strip, r1), P, prs, 0, n_tok, Y, ldy, scratch);
    } else {
        for (int64_t rs = r0; rs < r1; rs += strip) {
            const int64_t re = min64(rs + strip, r1);
            for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
                const int64_t t1 = min64(t0 + tb, n_tok);
                for (int64_t t = t0; t < t1; t++) mm->prep(n, x + t * xrs, P + (t - t0) * prs);
                run_rows(mm, n, w, wrs, rs, re, P, prs, t0, t1, Y, ldy, scratch);
            }
        }
    }
    free(heap);
    return 1;
}

// Per-thread scratch of the gemm paths (slot 0), of the repacked types' unpacking (slot 1, which
// calls the gemm paths) and of rows packed into a repacked layout per call (slot 2, matmul_packed, which calls slot 0's
// paths; reached from slot 1's unpacking too), kept between calls (a fresh malloc of a few hundred KiB per call would be
// mmap'ed and page-faulted every time); freed by the key's destructor when the thread exits.
#define N_SCRATCH 3
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static int g_scratch_ok;
typedef struct {
    size_t size;
    void *raw;
} scratch_buf;
static void scratch_free(void *p) {
    scratch_buf *b = p;
    for (int i = 0; i < N_SCRATCH; i++) free(b[i].raw);
    free(b);
}
static void scratch_key_init(void) { g_scratch_ok = pthread_key_create(&g_scratch_key, scratch_free) == 0; }

// 64-aligned buffer of at least size bytes, valid until the thread's next call with this slot; NULL on failure.
static void *gemm_scratch(int slot, size_t size) {
    pthread_once(&g_scratch_once, scratch_key_init);
    if (!g_scratch_ok) return NULL;
    scratch_buf *bs = pthread_getspecific(g_scratch_key);
    if (!bs) {
        bs = calloc(N_SCRATCH, sizeof *bs);
        if (!bs) return NULL;
        if (pthread_setspecific(g_scratch_key, bs) != 0) {
            free(bs);
            return NULL;
        }
    }
    scratch_buf *b = &bs[slot];
    if (b->size < size) {
        free(b->raw);
        b->size = 0;
        b->raw = malloc(size + 64);
        if (!b->raw) return NULL;
        b->size = size;
    }
    return (void *)(((uintptr_t)b->raw + 63) & ~(uintptr_t)63);
}

static void matmul_generic(const kvt_type_ops *ops, int64_t n, const char *w, int64_t wrs, int64_t r0, int64_t r1,
                           const char *x, int64_t xrs, int64_t n_tok, float *Y, int64_t ldy) {
    if (n_tok == 1) {
        for (int64_t r = r0; r < r1; r++) ops->vec_dot(n, Y + r, w + r * wrs, x);
        return;
    }
    const int64_t strip = strip_rows(wrs), tb = token_block(xrs, n_tok, KVT_DOT_MULTI_MAX);
    for (int64_t rs = r0; rs < r1; rs += strip) {
        const int64_t re = min64(rs + strip, r1);
        for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
            const int64_t t1 = min64(t0 + tb, n_tok);
            for (int64_t r = rs; r < re; r++)
                for (int64_t t = t0; t < t1; t += KVT_DOT_MULTI_MAX) {
                    const int nt = (int)min64(t1 - t, KVT_DOT_MULTI_MAX);
                    ops->vec_dot_multi(n, w + r * wrs, x + t * xrs, (size_t)xrs, nt, Y + t * ldy + r, ldy);
                }
        }
    }
}

// Repacked types (quant.h): q4_0_x8 and q5_0_x8 through q40x8.h (the decode GEMV, batches in tiles of tokens per group); q4_1_x8
// through its GEMV (q41x8.h) for every batch, token by token; q8_0_x8 through its
// GEMV (q80x8.h) token by token (AVX2: up to KVT_Q80X8_TOK_MAX tokens, larger batches unpacked); q4_K_x8 decode
// through its GEMV (kqx8.h); q4_K_x8 batches of whole groups read the groups directly: AVX-512 2-8 tokens the
// GEMV's arithmetic per token (kqx8.h), from 9 tokens the q4_K panel tile on panels packed from them (kqx8.h);
// AVX2 gemm_avx2.c's 8-row q4_K tile on side data made from them; q5_K_x8 decode through its AVX2 GEMV on both ISAs,
// its batches as q4_K_x8's (AVX2: the GEMV token by token up to KVT_Q5KX8_TOK_MAX tokens, the tile beyond); the scalar
// ISA and the x8 types' rows of a group
// cut by [r0, r1) go through the source type's paths on rows unpacked into a per-thread buffer, X8_STRIP_BYTES at
// a time. The same bits either way (each row's order is its source type's).
#define X8_STRIP_BYTES (256 * 1024)
static void matmul_unpacked(kvt_isa isa, kvt_type st, const kvt_repack_ops *rp, int64_t n, const void *W, int64_t r0,
                            int64_t r1, const void *Xq, int64_t n_tok, float *Y, int64_t ldy);
// An x8 kernel over the groups [g0, g1) of 8 rows at W (row 8g + r into Y[t * ldy + 8g + r]) for n_tok activation
// rows X: the kernel's own arguments in ctx.
typedef void (*x8_kernel)(const void *ctx, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok,
                          float *Y, int64_t ldy);
// Rows [r0, r1) of a repacked matrix of groups of 8 rows (wrs bytes a row, xrs an activation row): the groups wholly
// inside straight into Y, a group cut by the range computed whole into a buffer (8 tokens at a time) and only the
// range's rows copied out. Each row's value is its kernel's, whatever the range: the same bits.
static void x8_groups(x8_kernel fn, const void *ctx, int64_t n, const void *W, int64_t wrs, int64_t r0, int64_t r1,
                      const void *X, int64_t xrs, int64_t n_tok, float *Y, int64_t ldy) {
    const int64_t g0 = (r0 + 7) / 8, g1 = r1 / 8;
    if (g0 < g1) fn(ctx, n, W, g0, g1, X, n_tok, Y, ldy);
    for (int64_t g = r0 / 8; g <= (r1 - 1) / 8; g++) {
        if (g >= g0 && g < g1) continue;
        for (int64_t k0 = 0; k0 < n_tok; k0 += 8) {
            const int64_t nk = min64(8, n_tok - k0);
            float t[64]; // [nk][8]
            fn(ctx, n, (const char *)W + g * 8 * wrs, 0, 1, (const char *)X + k0 * xrs, nk, t, 8);
            for (int64_t k = 0; k < nk; k++)
                for (int64_t r = g * 8 > r0 ? g * 8 : r0; r < r1 && r < g * 8 + 8; r++) Y[(k0 + k) * ldy + r] = t[8 * k + r - g * 8];
        }
    }
}

typedef struct {
    kvt_isa isa;
    void *scratch; // q8_0_x8, q4_0_x8, q5_0_x8: the kernel's scratch
    int q5;        // q4_0_x8 / q5_0_x8: which
} x8_ctx;
static void x8_q41(const void *ctx, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok,
                   float *Y, int64_t ldy) {
    const x8_ctx *c = ctx;
    (c->isa == KVT_ISA_AVX512 ? kvt_q41x8_mm_avx512 : kvt_q41x8_mm_avx2)(n, W, g0, g1, X, n_tok, Y, ldy);
}
static void x8_q80(const void *ctx, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok,
                   float *Y, int64_t ldy) {
    const x8_ctx *c = ctx;
    (c->isa == KVT_ISA_AVX512 ? kvt_q80x8_mm_avx512 : kvt_q80x8_mm_avx2)(n, W, g0, g1, X, n_tok, Y, ldy, c->scratch);
}
static void x8_q40(const void *ctx, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok,
                   float *Y, int64_t ldy) {
    const x8_ctx *c = ctx;
    (c->isa == KVT_ISA_AVX512 ? kvt_q40x8_mm_avx512 : kvt_q40x8_mm_avx2)(c->q5, n, W, g0, g1, X, n_tok, Y, ldy, c->scratch);
}
static void x8_q4k(const void *ctx, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok,
                   float *Y, int64_t ldy) { // one token (decode)
    const x8_ctx *c = ctx;
    (void)n_tok, (void)ldy;
    (c->isa == KVT_ISA_AVX512 ? kvt_q4kx8_gemv_avx512 : kvt_q4kx8_gemv_avx2)(n, W, g0, g1, X, Y);
}

static void x8_q5k(const void *ctx, int64_t n, const void *W, int64_t g0, int64_t g1, const void *X, int64_t n_tok,
                   float *Y, int64_t ldy) { // the AVX2 GEMV: decode on both ISAs, AVX2's small batches token by token
    (void)ctx;
    if (n_tok == 1) kvt_q5kx8_gemv_avx2(n, W, g0, g1, X, Y);
    else kvt_q5kx8_gemv_nt_avx2(n, W, g0, g1, X, (size_t)kvt_row_size(KVT_TYPE_Q8_K, n), n_tok, Y, ldy);
}

static void matmul_repacked(kvt_isa isa, kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1,
                            const void *Xq, int64_t n_tok, float *Y, int64_t ldy) {
    const kvt_type st = kvt_type_repacked_from(wt);
    const kvt_repack_ops *rp = kvt_type_repack_into(wt);
    const int64_t wrs = kvt_row_size(st, n);
    if (wt == KVT_TYPE_F16_X16) { // every ISA and batch: one FMA chain per output, the same bits (f16x16.h)
        if (isa >= KVT_ISA_AVX2) { // (one token on Zen 5: the AVX2 GEMV, kvt_kernels_decode_avx2)
            const int a5 = isa == KVT_ISA_AVX512 && !(n_tok == 1 && kvt_kernels_decode_avx2(wt));
            void *s = gemm_scratch(0, (size_t)(a5 ? kvt_f16x16_scratch_avx512 : kvt_f16x16_scratch_avx2)(n, n_tok));
            if (s) {
                (a5 ? kvt_f16x16_mm_avx512 : kvt_f16x16_mm_avx2)(n, W, r0, r1, Xq, n_tok, Y, ldy, s);
                return;
            }
        }
        kvt_f16x16_mm_ref(n, W, r0, r1, Xq, n_tok, Y, ldy);
        return;
    }
    if (wt == KVT_TYPE_BF16_X16) { // every ISA and batch: bf16x16.h's chain per output, the same bits
        if (isa >= KVT_ISA_AVX2) {
            void *s = gemm_scratch(0, (size_t)kvt_bf16x16_scratch(n, n_tok));
            if (s) {
                (isa == KVT_ISA_AVX512 ? kvt_bf16x16_mm_avx512 : kvt_bf16x16_mm_avx2)(n, W, r0, r1, Xq, n_tok, Y, ldy, s);
                return;
            }
        }
        kvt_bf16x16_mm_ref(n, W, r0, r1, Xq, n_tok, Y, ldy);
        return;
    }
    if (wt == KVT_TYPE_Q4_1_X8 && isa >= KVT_ISA_AVX2) { // every batch: the GEMV token by token (q41x8.h)
        const x8_ctx c = {isa, NULL, 0};
        x8_groups(x8_q41, &c, n, W, wrs, r0, r1, Xq, kvt_row_size(KVT_TYPE_Q8_1, n), n_tok, Y, ldy);
        return;
    }
    if ((wt == KVT_TYPE_Q4_0_X8 || wt == KVT_TYPE_Q5_0_X8) && isa >= KVT_ISA_AVX2) { // decode and every batch (q40x8.h)
        const x8_ctx c = {isa, gemm_scratch(0, (size_t)kvt_q40x8_scratch(n, n_tok)), wt == KVT_TYPE_Q5_0_X8};
        if (c.scratch) {
            x8_groups(x8_q40, &c, n, W, wrs, r0, r1, Xq, kvt_row_size(KVT_TYPE_Q8_0, n), n_tok, Y, ldy);
            return;
        }
    }
    if (wt == KVT_TYPE_Q8_0_X8 && (isa == KVT_ISA_AVX512 || (isa == KVT_ISA_AVX2 && n_tok <= KVT_Q80X8_TOK_MAX))) {
        // decode and small batches (q80x8.h); without its scratch, the q8_0 paths on unpacked rows below
        const int64_t sz = isa == KVT_ISA_AVX512 ? kvt_q80x8_scratch_avx512(n, n_tok) : kvt_q80x8_scratch_avx2(n, n_tok);
        const x8_ctx c = {isa, gemm_scratch(0, (size_t)sz), 0};
        if (c.scratch) {
            x8_groups(x8_q80, &c, n, W, wrs, r0, r1, Xq, wrs, n_tok, Y, ldy);
            return;
        }
    }
    if (wt == KVT_TYPE_Q5_K_X8 && isa >= KVT_ISA_AVX2 && (n_tok == 1 || (isa == KVT_ISA_AVX2 && n_tok <= KVT_Q5KX8_TOK_MAX))) {
        // decode on both ISAs and AVX2's small batches: the AVX2 GEMV (kqx8.h), token by token in batches
        x8_groups(x8_q5k, NULL, n, W, wrs, r0, r1, Xq, kvt_row_size(KVT_TYPE_Q8_K, n), n_tok, Y, ldy);
        return;
    }
    if (n_tok == 1 && wt == KVT_TYPE_Q4_K_X8 && isa >= KVT_ISA_AVX2) { // decode (kqx8.h; Zen 4 and 5: AVX2, kvt_kernels_decode_avx2)
        const x8_ctx c = {isa == KVT_ISA_AVX512 && kvt_kernels_decode_avx2(wt) ? KVT_ISA_AVX2 : isa, NULL, 0};
        x8_groups(x8_q4k, &c, n, W, wrs, r0, r1, Xq, 0, 1, Y, 0);
        return;
    }
    const int64_t a0 = (r0 + 7) / 8 * 8, a1 = r1 / 8 * 8, xrs = kvt_row_size(KVT_TYPE_Q8_K, n);
    if (wt == KVT_TYPE_Q6_K_R && isa >= KVT_ISA_AVX2) {
        // decode: the activation row in the layout's order, then quant_avx2.c's rows in pairs per strip (as q6_K's
        // rows kernel through matmul_kernel); batches: gemm_avx2.c's 8-row q6_K tile on side data made from the rows,
        // on AVX-512 (Zen 5, kvt_kernels_decode_avx2) from KVT_Q6KR_GEMM_MIN tokens kq_avx512.h's q6_K panel tile on
        // panels packed from them (the q6_K bits on both ISAs, as the AVX-512 q6_K rows)
        if (isa == KVT_ISA_AVX512 && n_tok >= KVT_Q6KR_GEMM_MIN) {
            void *pan = gemm_scratch(0, (size_t)kvt_q6kr_gemm_scratch_avx512(n));
            if (pan) {
                kvt_q6kr_gemm_avx512(n, (const char *)W + r0 * wrs, (size_t)wrs, r1 - r0, Xq, (size_t)xrs, n_tok, Y + r0, ldy, pan);
                return;
            }
        }
        if (n_tok == 1) {
            char *P = gemm_scratch(0, (size_t)xrs);
            if (P) {
                kvt_q6r_prep(n, Xq, P);
                const int64_t strip = strip_rows(wrs);
                for (int64_t rs = r0; rs < r1; rs += strip)
                    kvt_q6r_rows_avx2(n, (const char *)W + rs * wrs, (size_t)wrs, min64(strip, r1 - rs), P, Y + rs);
                return;
            }
        } else {
            void *S = gemm_scratch(0, (size_t)kvt_gemm_scratch_q6kr_avx2(n, n_tok));
            if (S) {
                kvt_gemm_q6kr_avx2(n, (const char *)W + r0 * wrs, (size_t)wrs, r1 - r0, Xq, (size_t)xrs, n_tok, Y + r0, ldy, S);
                return;
            }
        }
    }
    if ((wt == KVT_TYPE_Q4_K_X8 || wt == KVT_TYPE_Q5_K_X8) && isa >= KVT_ISA_AVX2 && a0 < a1) {
        // batches of whole groups straight from the repacked layout: AVX-512 the x8 GEMV's arithmetic per token
        // (q4_K_x8 2 .. 8 tokens, gemm_avx2.c's tile is slower there; q5_K_x8 2 .. 4) or the 16-row panel packed from
        // the groups; AVX2 gemm_avx2.c's 8-row tile on side data made from the groups (q5_K_x8: past
        // KVT_Q5KX8_TOK_MAX tokens, the GEMV above before). The q4_K / q5_K bits on both ISAs.
        const int q5 = wt == KVT_TYPE_Q5_K_X8;
        int done = 0;
        if (isa == KVT_ISA_AVX512 && n_tok < (q5 ? KVT_Q5KX8_GEMM_MIN : KVT_Q4KX8_GEMM_MIN)) {
            (q5 ? kvt_q5kx8_gemv_nt_avx512 : kvt_q4kx8_gemv_nt_avx512)(n, W, a0 / 8, a1 / 8, Xq, (size_t)xrs, n_tok, Y, ldy);
            done = 1;
        } else if (isa == KVT_ISA_AVX512) {
            void *pan = gemm_scratch(0, (size_t)kvt_q4kx8_gemm_scratch_avx512(n));
            if ((done = pan != NULL))
                (q5 ? kvt_q5kx8_gemm_avx512 : kvt_q4kx8_gemm_avx512)(n, (const char *)W + a0 * wrs, a1 - a0, Xq, n_tok, Y + a0, ldy, pan);
        } else {
            void *S = gemm_scratch(0, (size_t)(q5 ? kvt_gemm_scratch_q5kx8_avx2 : kvt_gemm_scratch_q4kx8_avx2)(n, n_tok));
            if ((done = S != NULL))
                (q5 ? kvt_gemm_q5kx8_avx2 : kvt_gemm_q4kx8_avx2)(n, (const char *)W + a0 * wrs, (size_t)wrs, a1 - a0, Xq, (size_t)xrs,
                                                               n_tok, Y + a0, ldy, S);
        }
        if (done) {
            if (r0 < a0) matmul_unpacked(isa, st, rp, n, W, r0, a0, Xq, n_tok, Y, ldy);
            if (a1 < r1) matmul_unpacked(isa, st, rp, n, W, a1, r1, Xq, n_tok, Y, ldy);
            return;
        }
    }
    matmul_unpacked(isa, st, rp, n, W, r0, r1, Xq, n_tok, Y, ldy);
}

static void matmul_unpacked(kvt_isa isa, kvt_type st, const kvt_repack_ops *rp, int64_t n, const void *W, int64_t r0,
                            int64_t r1, const void *Xq, int64_t n_tok, float *Y, int64_t ldy) {
    const int64_t wrs = kvt_row_size(st, n);
    int64_t strip = X8_STRIP_BYTES / wrs / 8 * 8;
    if (strip < 8) strip = 8;
    if (strip > r1 - r0) strip = r1 - r0;
    char *buf = gemm_scratch(1, (size_t)(strip * wrs));
    for (int64_t rs = r0; rs < r1; rs += strip) {
        const int64_t re = min64(rs + strip, r1);
        if (!buf) {
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = rs; r < re; r++) Y[t * ldy + r] = NAN;
            continue;
        }
        rp->unpack(W, buf, rs, re, n);
        kvt_matmul_rows_isa(isa, st, n, buf, 0, re - rs, Xq, n_tok, Y + rs, ldy);
    }
}

// A matrix not repacked (KVT_REPACK=0, memory short at load, rows not a multiple of the groups, unpacked groups of a
// repacked matrix) whose type's repacking `to` (groups of `align` rows) can pack any number of rows (pack: the last
// group padded): rows [r0, r1) in strips of PACK_STRIP_BYTES packed into a per-thread buffer (slot 2) and
// matmul_repacked run on them, so that the outputs are the repacked matrix's bits (each output's order depends on its
// row and the activations alone, not on the rows packed beside it). kscratch: the bytes of slot 0 that
// matmul_repacked's kernel takes, had first, so that it never falls back to the unpacking of slot 1, which could come
// back here and pack into slot 2 while it is in use. Returns false, having written nothing, without the buffers.
typedef void (*pack_rows_fn)(const void *src, size_t wrs, int64_t nr, int64_t n, void *dst);
#define PACK_STRIP_BYTES (256 * 1024)
static bool matmul_packed(kvt_isa isa, kvt_type to, int64_t align, pack_rows_fn pack, int64_t kscratch, int64_t n,
                          const void *W, int64_t r0, int64_t r1, const void *Xq, int64_t n_tok, float *Y, int64_t ldy) {
    const int64_t wrs = kvt_row_size(kvt_type_repacked_from(to), n);
    int64_t strip = PACK_STRIP_BYTES / wrs / align * align;
    if (strip < align) strip = align;
    if (strip > (r1 - r0 + align - 1) / align * align) strip = (r1 - r0 + align - 1) / align * align;
    if (kscratch > 0 && !gemm_scratch(0, (size_t)kscratch)) return false;
    char *pan = gemm_scratch(2, (size_t)(strip * wrs));
    if (!pan) return false;
    for (int64_t rs = r0; rs < r1; rs += strip) {
        const int64_t nr = min64(strip, r1 - rs);
        pack((const char *)W + rs * wrs, (size_t)wrs, nr, n, pan);
        matmul_repacked(isa, to, n, pan, 0, nr, Xq, n_tok, Y + rs, ldy);
    }
    return true;
}

// An f16 matrix not repacked: matmul_packed into 16-row panels (f16x16.h). Without the buffer, the scalar reference
// row by row on the same order (one FMA chain per output).
static void matmul_f16_panels(kvt_isa isa, int64_t n, const void *W, int64_t r0, int64_t r1, const void *Xq,
                              int64_t n_tok, float *Y, int64_t ldy) {
    if (matmul_packed(isa, KVT_TYPE_F16_X16, 16, kvt_f16x16_pack_rows, 0, n, W, r0, r1, Xq, n_tok, Y, ldy)) return;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = 0; t < n_tok; t++) {
            const uint16_t *w = (const uint16_t *)W + r * n, *x = (const uint16_t *)Xq + t * n;
            float acc = 0.0f;
            for (int64_t k = 0; k < n; k++) acc = fmaf(kvt_f16_to_f32(w[k]), kvt_f16_to_f32(x[k]), acc);
            Y[t * ldy + r] = acc;
        }
}

// A bf16 matrix not repacked: matmul_packed into bf16_x16 panels (n even); an odd n or without the buffer, the
// reference on the plain rows (the same order).
static void matmul_bf16_panels(kvt_isa isa, int64_t n, const void *W, int64_t r0, int64_t r1, const void *Xq,
                               int64_t n_tok, float *Y, int64_t ldy) {
    if (n % 2 == 0 &&
        matmul_packed(isa, KVT_TYPE_BF16_X16, 16, kvt_bf16x16_pack_rows, kvt_bf16x16_scratch(n, n_tok), n, W, r0, r1, Xq,
                      n_tok, Y, ldy))
        return;
    kvt_bf16x16_rows_ref(n, W, (size_t)(2 * n), r0, r1, Xq, n_tok, Y, ldy);
}

void kvt_matmul_rows_isa(kvt_isa isa, kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1,
                         const void *Xq, int64_t n_tok, float *Y, int64_t ldy) {
    if (isa > kvt_kernels_isa()) isa = KVT_ISA_SCALAR;
    if (wt == KVT_TYPE_F16 && kvt_f16x16_enabled()) {
        if (r0 < r1 && n_tok > 0 && n > 0) matmul_f16_panels(isa, n, W, r0, r1, Xq, n_tok, Y, ldy);
        return;
    }
    if (wt == KVT_TYPE_BF16 && kvt_bf16x16_enabled()) {
        if (r0 < r1 && n_tok > 0 && n > 0) matmul_bf16_panels(isa, n, W, r0, r1, Xq, n_tok, Y, ldy);
        return;
    }
    // q4_0 and q5_0 rows not repacked: packed into q4_0_x8 / q5_0_x8 groups per strip (q40x8.h's kernels, the type's
    // order); without the buffers, the type's vec_dot below (the same order)
    if ((wt == KVT_TYPE_Q4_0 || wt == KVT_TYPE_Q5_0) && isa >= KVT_ISA_AVX2 && r0 < r1 && n_tok > 0 && kvt_row_size(wt, n) > 0 &&
        matmul_packed(isa, wt == KVT_TYPE_Q5_0 ? KVT_TYPE_Q5_0_X8 : KVT_TYPE_Q4_0_X8, 8,
                      wt == KVT_TYPE_Q5_0 ? kvt_q5_0_x8_pack_rows : kvt_q4_0_x8_pack_rows, kvt_q40x8_scratch(n, n_tok), n, W,
                      r0, r1, Xq, n_tok, Y, ldy))
        return;
    if (kvt_type_repacked_from(wt) != wt) {
        if (r0 < r1 && n_tok > 0 && kvt_row_size(wt, n) > 0) matmul_repacked(isa, wt, n, W, r0, r1, Xq, n_tok, Y, ldy);
        return;
    }
    const kvt_type_ops *ops = kvt_type_ops_isa(wt, isa);
    if (!ops) ops = kvt_type_ops_ref(wt);
    const int64_t wrs = kvt_row_size(wt, n);
    const int64_t xrs = ops && ops->vec_dot ? kvt_row_size(ops->vec_dot_type, n) : -1;
    if (!ops || !ops->vec_dot || wrs < 0 || xrs < 0) {
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = r0; r < r1; r++) Y[t * ldy + r] = NAN;
        return;
    }
    if (r0 >= r1 || n_tok <= 0) return;
    const kvt_mm_kernel *mm = isa == KVT_ISA_AVX512 ? kvt_mm_kernel_avx512(wt)
                              : isa == KVT_ISA_AVX2 ? kvt_mm_kernel_avx2(wt)
                                                    : NULL;
    if (mm && mm->gemm && n_tok >= mm->gemm_min_tok) {
        void *buf = gemm_scratch(0, (size_t)mm->gemm_scratch(n, n_tok));
        if (buf) {
            mm->gemm(n, (const char *)W + r0 * wrs, (size_t)wrs, r1 - r0, Xq, (size_t)xrs, n_tok, Y + r0, ldy, buf);
            return;
        }
    }
    if (mm && mm->rows && matmul_kernel(wt, mm, n, W, wrs, r0, r1, Xq, xrs, n_tok, Y, ldy)) return;
    matmul_generic(ops, n, W, wrs, r0, r1, Xq, xrs, n_tok, Y, ldy);
}

void kvt_matmul_rows(kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1, const void *Xq,
                     int64_t n_tok, float *Y, int64_t ldy) {
    kvt_matmul_rows_isa(kvt_kernels_isa(), wt, n, W, r0, r1, Xq, n_tok, Y, ldy);
}
