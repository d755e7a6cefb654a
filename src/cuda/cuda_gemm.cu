// cuda_gemm.cu - many-token matrix products: the weights dequantized to f16 (one kernel template over
// the weight types), the activations rounded to f16, then cuBLAS GEMM f16 x f16 -> f32 (f32 compute).
#include <climits>

#include "cuda_common.cuh"
#include "cuda_items.cuh"

namespace {

// dst[8g .. 8g+8) = group g of src as f16, for g < n_groups (src read as one row of 8 * n_groups elements); A16: dst
// 16-byte aligned (a group per store)
template <int T, bool A16> __global__ void dequant_kernel(const uint8_t *__restrict__ src, int64_t n_groups, __half *__restrict__ dst) {
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n_groups; g += (int64_t)gridDim.x * blockDim.x)
        dequant_item<T, A16>(src, g, dst);
}

__global__ void f32_to_f16_kernel(const float *__restrict__ src, int64_t n, __half *__restrict__ dst) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

template <int T> struct dequant_op {
    static int run(kvt_cuda_ctx *ctx, const void *src, int64_t n, __half *dst) {
        const int64_t n_groups = n / 8;
        const dim3 grid = grid_for(n_groups, 256);
        cudaStream_t s = ctx->stream[KVT_CUDA_STREAM_COMPUTE];
        if ((uintptr_t)dst % 16 == 0) dequant_kernel<T, true><<<grid, 256, 0, s>>>((const uint8_t *)src, n_groups, dst);
        else dequant_kernel<T, false><<<grid, 256, 0, s>>>((const uint8_t *)src, n_groups, dst);
        return ctx_check_launch(ctx, "dequant_kernel");
    }
};

constexpr size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

} // namespace

int kvt_cu_dequant_f16(kvt_cuda_ctx *ctx, int type, const void *src, int64_t n, uint16_t *dst) {
    const int qk = type_block(type);
    if (qk == 0 || n < 8 || n % qk || n % 8)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "dequant_f16: %lld elements of type %d (a multiple of 8 and of the block)",
                        (long long)n, type);
    return dispatch_type<dequant_op>(type, true, ctx, src, n, (__half *)dst);
}

int kvt_cu_mul_mat_gemm(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                        int64_t n_tok, float *y) {
    int rc = kvt_cu_check_matrix(ctx, "mul_mat_gemm", type, n_rows, n_cols);
    if (rc) return rc;
    if (n_tok < 1 || n_tok > INT_MAX || n_rows > INT_MAX || n_cols > INT_MAX || n_rows * n_cols > INT64_MAX / 4)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_gemm: shape %lld x %lld x %lld out of range", (long long)n_rows,
                        (long long)n_cols, (long long)n_tok);
    const size_t w_bytes = type == KVT_CUDA_F16 ? 0 : align256((size_t)(n_rows * n_cols) * 2);
    void *ws = nullptr;
    rc = ctx_workspace(ctx, w_bytes + (size_t)(n_tok * n_cols) * 2, &ws);
    if (rc) return rc;
    const __half *Wh = (const __half *)W;
    if (type != KVT_CUDA_F16) {
        rc = kvt_cu_dequant_f16(ctx, type, W, n_rows * n_cols, (uint16_t *)ws);
        if (rc) return rc;
        Wh = (const __half *)ws;
    }
    __half *Xh = (__half *)((char *)ws + w_bytes);
    f32_to_f16_kernel<<<grid_for(n_tok * n_cols, 256), 256, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(x, n_tok * n_cols, Xh);
    if ((rc = ctx_check_launch(ctx, "f32_to_f16_kernel"))) return rc;
    const gemm_args g = gemm_args_for(n_rows, n_cols, n_tok); // the layout: cuda_items.cuh
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t cs = cublasGemmEx(ctx->cublas, g.ta, g.tb, g.m, g.n, g.k, &alpha, Wh, CUDA_R_16F, g.lda, Xh, CUDA_R_16F,
                                           g.ldb, &beta, y, CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (cs != CUBLAS_STATUS_SUCCESS)
        return ctx_fail(ctx, KVT_CUDA_ERR_CUBLAS, "cuBLAS cublasGemmEx (%lld x %lld x %lld) failed: %s", (long long)n_rows,
                        (long long)n_cols, (long long)n_tok, cublasGetStatusString(cs));
    return KVT_CUDA_OK;
}
