// matmul.h - the weight x activation product at the heart of every layer.
#ifndef KVT_MATMUL_H
#define KVT_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "quant.h"

// Y[t*ldy + r] = dot(W row r, X row t) for r in [r0, r1), t in [0, n_tok).
//   W : [n_rows, n] of type wt, rows packed (stride kvt_row_size(wt, n) bytes)
//   Xq: [n_tok, n] of type kvt_type_ops_get(wt)->vec_dot_type, row stride
//       kvt_row_size(vdt, n) bytes (activations quantized by its from_float)
//   Y : f32, token-major, ldy >= r1
// n must be a multiple of wt's block size. Reads W rows [r0, r1) only and
// writes only Y[t*ldy + r] for those rows, so threads may split rows freely.
// Thread-safe; may use up to ~64 KiB of stack (larger scratch is malloc'ed).
// If wt is not computable the outputs are set to NaN (no abort).
void kvt_matmul_rows(kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1, const void *Xq,
                     int64_t n_tok, float *Y, int64_t ldy);

// Same with the kernels of one instruction set (tests, benchmarks); falls back
// to scalar when isa is not available on this CPU.
void kvt_matmul_rows_isa(kvt_isa isa, kvt_type wt, int64_t n, const void *W, int64_t r0, int64_t r1,
                         const void *Xq, int64_t n_tok, float *Y, int64_t ldy);

// ---- internal: SIMD matmul kernels (matmul_avx2.c / matmul_avx512.c) ----
// prep converts one activation row (vec_dot_type, n elements) into the
// kernel's layout of prep_size(n) bytes (multiple of 64; P rows 64-aligned);
// rows computes Y[t*ldy + r] = dot(W row r, P row t), r < nr, t < nt <= 4.
typedef struct {
    int64_t (*prep_size)(int64_t n);
    void (*prep)(int64_t n, const void *x, void *p);
    void (*rows)(int64_t n, const void *W, size_t wrs, int64_t nr, const void *P, size_t prs, int nt,
                 float *Y, int64_t ldy);
    // Optional many-token path on the raw activations (vec_dot_type rows),
    // used when n_tok >= gemm_min_tok: Y[t*ldy + r] for r < nr, t < n_tok,
    // with gemm_scratch(n, n_tok) bytes of 64-aligned scratch. prep/rows may
    // be NULL when gemm is set (then fewer tokens go the generic way).
    int gemm_min_tok;
    int64_t (*gemm_scratch)(int64_t n, int64_t n_tok);
    void (*gemm)(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, int64_t n_tok,
                 float *Y, int64_t ldy, void *scratch);
} kvt_mm_kernel;
const kvt_mm_kernel *kvt_mm_kernel_avx2(kvt_type wt);
const kvt_mm_kernel *kvt_mm_kernel_avx512(kvt_type wt);

// AVX2 GEMM tiles (gemm_avx2.c), the gemm entries of the AVX2 kernels: each
// output is bit-identical to the AVX2 GEMV's for that activation row alone.
#define KVT_GEMM_AVX2_DECL(name)                                                                    \
    int64_t kvt_gemm_scratch_##name##_avx2(int64_t n, int64_t n_tok);                              \
    void kvt_gemm_##name##_avx2(int64_t n, const void *W, size_t wrs, int64_t nr, const void *X, size_t xrs, \
                                int64_t n_tok, float *Y, int64_t ldy, void *scratch);
KVT_GEMM_AVX2_DECL(f32)
KVT_GEMM_AVX2_DECL(f16)
KVT_GEMM_AVX2_DECL(bf16)
KVT_GEMM_AVX2_DECL(q4_0)
KVT_GEMM_AVX2_DECL(q4_1)
KVT_GEMM_AVX2_DECL(q8_0)
KVT_GEMM_AVX2_DECL(q4_K)
KVT_GEMM_AVX2_DECL(q5_K)
KVT_GEMM_AVX2_DECL(q6_K)

#endif
