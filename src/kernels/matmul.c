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
// gemm_avx2.c (AVX2: every type but the activation-only ones and q5_0) and
// gemm_avx512.c (AVX-512: f32, f16, bf16) and kq_avx512.h (AVX-512: q4_K, q6_K),
// bit-identical per output to that ISA's decode kernels, so a row's result does
// not depend on the batch it is computed in. (The older AVX-512 panel tiles for
// f16 and q8_0 sum in another order: only with -DKVT_MM_AVX512_GEMM=1.)
// Fallback path (types without a matmul kernel, or scalar):
// the same blocking with kvt_type_ops.vec_dot_multi on the raw activations.
#include "matmul.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define STRIP_BYTES (256 * 1024) // weight rows per strip (L2)
#define TOK_BLOCK_BYTES (32 * 1024) // activation rows per token block (L1)
#define STACK_SCRATCH (32 * 1024)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

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
static int matmul_kernel(const kvt_mm_kernel *mm, int64_t n, const char *w, int64_t wrs, int64_t r0, int64_t r1,
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
    const int64_t strip = strip_rows(wrs);
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

// Per-thread scratch of the gemm paths, kept between calls (a fresh malloc of
// a few hundred KiB per call would be mmap'ed and page-faulted every time);
// freed by the key's destructor when the thread exits.
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static int g_scratch_ok;
typedef struct {
    size_t size;
    void *raw;
} scratch_buf;
static void scratch_free(void *p) {
    scratch_buf *b = p;
    free(b->raw);
    free(b);
}
static void scratch_key_init(void) { g_scratch_ok = pthread_key_create(&g_scratch_key, scratch_free) == 0; }

// 64-aligned buffer of at least size bytes, valid until the thread's next call; NULL on failure.
static void *gemm_scratch(size_t size) {
    pthread_once(&g_scratch_once, scratch_key_init);
    if (!g_scratch_ok) return NULL;
    scratch_buf *b = pthread_getspecific(g_scratch_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b) return NULL;
        if (pthread_setspecific(g_scratch_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
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

void kvt_matmul_rows_isa(kvt_isa isa, kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1,
                         const void *Xq, int64_t n_tok, float *Y, int64_t ldy) {
    if (isa > kvt_kernels_isa()) isa = KVT_ISA_SCALAR;
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
        void *buf = gemm_scratch((size_t)mm->gemm_scratch(n, n_tok));
        if (buf) {
            mm->gemm(n, (const char *)W + r0 * wrs, (size_t)wrs, r1 - r0, Xq, (size_t)xrs, n_tok, Y + r0, ldy, buf);
            return;
        }
    }
    if (mm && mm->rows && matmul_kernel(mm, n, W, wrs, r0, r1, Xq, xrs, n_tok, Y, ldy)) return;
    matmul_generic(ops, n, W, wrs, r0, r1, Xq, xrs, n_tok, Y, ldy);
}

// F16 weights on a CPU whose 512-bit FMAs run as two 256-bit halves (AMD family 25, Zen 4): the AVX2 kernels
// (GEMV and 4 x 3 tiles, one order for both, so the batch invariance holds), which spent 3-6% less CPU time in
// prefill there than the 4 x 6 zmm tile (docs/BENCHMARKS.md, branch f16pp2). KVT_F16_ZMM=1 keeps the AVX-512
// kernels, =0 takes the AVX2 ones on any CPU. kvt_matmul_rows_isa still runs the ISA it is given (the tests).
static atomic_int g_f16_ymm = -1;
static bool f16_prefers_ymm(void) {
    int v = atomic_load_explicit(&g_f16_ymm, memory_order_relaxed);
    if (v < 0) {
        v = 0;
#if defined(__x86_64__) || defined(__i386__)
        unsigned a, b, c, d;
        if (__get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541 /* "Auth" enticAMD */ && __get_cpuid(1, &a, &b, &c, &d)) {
            const unsigned fam = (a >> 8 & 0xf) + ((a >> 8 & 0xf) == 0xf ? (a >> 20 & 0xff) : 0);
            v = fam == 25;
        }
#endif
        const char *e = getenv("KVT_F16_ZMM");
        if (e && *e) v = *e == '0';
        atomic_store_explicit(&g_f16_ymm, v, memory_order_relaxed);
    }
    return v;
}

void kvt_matmul_rows(kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1, const void *Xq,
                     int64_t n_tok, float *Y, int64_t ldy) {
    kvt_isa isa = kvt_kernels_isa();
    if (wt == KVT_TYPE_F16 && isa == KVT_ISA_AVX512 && f16_prefers_ymm()) isa = KVT_ISA_AVX2;
    kvt_matmul_rows_isa(isa, wt, n, W, r0, r1, Xq, n_tok, Y, ldy);
}
