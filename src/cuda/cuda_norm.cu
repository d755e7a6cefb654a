// cuda_norm.cu - RMSNorm (also the per-head q/k norm) and RoPE, computed with the operations of the
// CPU references in src/kernels/vec.c (sum of squares in double; RoPE angles by the same running
// product in f32), so that they agree to a few ulp.
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_items.cuh"

namespace {

constexpr int kNormThreads = 256;

// One thread block per row: sum of squares in double (as kvt_rmsnorm_f32), then y = x * scale * w.
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(const float *x, const float *__restrict__ w, float *y, int64_t n, float eps) {
    const float *xr = x + blockIdx.x * n;
    double sum = rmsnorm_part(xr, n, threadIdx.x, kNormThreads);
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    __shared__ double part[kNormThreads / 32];
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = sum;
    __syncthreads();
    double total = 0.0;
    for (int i = 0; i < kNormThreads / 32; i++) total += part[i]; // every thread, same order
    rmsnorm_write(xr, w, y + blockIdx.x * n, n, rmsnorm_scale(total, n, eps), threadIdx.x, kNormThreads);
}

// One thread per (token, head, rotated pair i).
__global__ void rope_kernel(float *x, kvt_cuda_rope_args a, float theta_scale) {
    const int64_t n = (int64_t)a.n_tok * a.n_head * (a.n_rot / 2);
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        rope_item(k, x, a, theta_scale);
}

} // namespace

int kvt_cu_rmsnorm(kvt_cuda_ctx *ctx, const float *x, const float *w, float *y, int64_t n_rows, int64_t n, float eps) {
    if (n_rows < 1 || n_rows > INT32_MAX || n < 1)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "rmsnorm: %lld rows of %lld", (long long)n_rows, (long long)n);
    rmsnorm_kernel<<<(unsigned)n_rows, kNormThreads, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(x, w, y, n, eps);
    return ctx_check_launch(ctx, "rmsnorm_kernel");
}

int kvt_cu_rope(kvt_cuda_ctx *ctx, float *x, const kvt_cuda_rope_args *a) {
    if (a->n_tok < 1 || a->n_head < 1 || a->n_rot < 2 || a->n_rot % 2 || a->n_rot > a->head_dim || !a->pos)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "rope: bad shape (%d tokens, %d heads, head_dim %d, n_rot %d) or no positions",
                        a->n_tok, a->n_head, a->head_dim, a->n_rot);
    const float theta_scale = powf(a->freq_base, -2.0f / (float)a->n_rot); // on the host, as kvt_rope_cache
    const int64_t n = (int64_t)a->n_tok * a->n_head * (a->n_rot / 2);
    rope_kernel<<<grid_for(n, 256), 256, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(x, *a, theta_scale);
    return ctx_check_launch(ctx, "rope_kernel");
}
