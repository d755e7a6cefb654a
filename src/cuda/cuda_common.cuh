// cuda_common.cuh - internal to libkvtier-cuda.so: the context, error reporting and the
// entry points each kernel file defines (gathered into the table by cuda_api.cu).
#ifndef KVT_CUDA_COMMON_CUH
#define KVT_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>

#include "kvt_cuda.h"

struct kvt_cuda_ctx {
    int device;
    cudaStream_t stream[KVT_CUDA_STREAM_COUNT];
    cublasHandle_t cublas;
    void *ws;         // device workspace (dequantized weights, chunk states), grown by ctx_workspace
    size_t ws_bytes;
    int mmv_q8_1;     // mul_mat_vec over q8_1 activations (the default; KVT_CUDA_MMV=f32 at ctx_init: f32 activations)
    int attn_tiled;   // attn_paged of >= 16 query rows by the tiled kernel (KVT_CUDA_ATTN=tiled at ctx_init)
    int attn_gqa;     // the chunk states of a KV head's query heads in one block (KVT_CUDA_ATTN_DECODE=gqa at ctx_init)
    int mmvq_rows;    // weight rows per warp of the q8_1 matvec of q4_K / q6_K over one activation row (KVT_CUDA_MMVQ_ROWS
                      // at ctx_init: 1, 2 (the default) or 4; the same bits whatever it is; cuda_matvec.cu)
    int mmvq_ilp;     // items a lane loads before it uses the first, there (KVT_CUDA_MMVQ_ILP: 1, the default, or 2)
    void *q8;         // device buffer of mul_mat_vec's q8_1 activations (made at ctx_init when mmv_q8_1), grown by
    size_t q8_bytes;  // ctx_q8_1_buffer
    char err[KVT_CUDA_ERR_MAX];
};

// Formats the context's message and returns code.
int ctx_fail(kvt_cuda_ctx *ctx, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// A failed CUDA runtime call: the call's text and cudaGetErrorString.
int ctx_fail_cuda(kvt_cuda_ctx *ctx, const char *what, cudaError_t e);
// After a kernel launch: KVT_CUDA_OK or the launch error naming `kernel`.
int ctx_check_launch(kvt_cuda_ctx *ctx, const char *kernel);
// *out = a device buffer of at least `bytes` bytes owned by ctx (valid until the next call; growing it
// synchronizes the compute stream before freeing the old one).
int ctx_workspace(kvt_cuda_ctx *ctx, size_t bytes, void **out);
// *out = the context's q8_1 activation buffer of at least `bytes` bytes (as ctx_workspace, a buffer of its own: made
// at ctx_init for KVT_CUDA_MMV_MAX_ROWS rows of 65536 columns, so that a captured decode step never grows it).
int ctx_q8_1_buffer(kvt_cuda_ctx *ctx, size_t bytes, void **out);

#define KVT_CU_CHECK(ctx, call)                                        \
    do {                                                               \
        cudaError_t e_ = (call);                                       \
        if (e_ != cudaSuccess) return ctx_fail_cuda((ctx), #call, e_); \
    } while (0)

// Grid size for n independent items of `threads` per block (capped: kernels loop grid-stride).
static inline unsigned grid_for(int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    return (unsigned)(g < 1 ? 1 : g > 65535 * 16 ? 65535 * 16 : g);
}

// ---- entries defined by the kernel files ----
// cuda_matvec.cu (kvt_cu_check_matrix: the shape rule of every matrix entry, KVT_CUDA_ERR_ARG with a message)
int kvt_cu_check_matrix(kvt_cuda_ctx *ctx, const char *entry, int type, int64_t n_rows, int64_t n_cols);
int kvt_cu_mul_mat_vec(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                       int64_t n_tok, float *y);
int kvt_cu_mul_mat_vec_multi(kvt_cuda_ctx *ctx, const kvt_cuda_mv *mv, int n, int64_t n_cols, const float *x, int64_t n_tok);
// cuda_gemm.cu
int kvt_cu_dequant_f16(kvt_cuda_ctx *ctx, int type, const void *src, int64_t n, uint16_t *dst);
int kvt_cu_mul_mat_gemm(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                        int64_t n_tok, float *y);
// cuda_norm.cu
int kvt_cu_rmsnorm(kvt_cuda_ctx *ctx, const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps);
int kvt_cu_rope(kvt_cuda_ctx *ctx, float *x, const kvt_cuda_rope_args *a);
// cuda_ew.cu
int kvt_cu_swiglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n);
int kvt_cu_geglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n);
int kvt_cu_add(kvt_cuda_ctx *ctx, float *y, const float *x, int64_t n);
int kvt_cu_argmax(kvt_cuda_ctx *ctx, const float *x, int64_t n_rows, int64_t n, int32_t *out, int flag_nonfinite);
// cuda_rows.cu
int kvt_cu_get_rows(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const int32_t *ids,
                    int64_t n_ids, float *out);
// cuda_attn.cu
int kvt_cu_attn_paged(kvt_cuda_ctx *ctx, const kvt_cuda_attn_args *a);
int kvt_cu_copy_batch(kvt_cuda_ctx *ctx, const kvt_cuda_copy *list, int n, int stream);

#endif
