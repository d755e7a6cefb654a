// cuda_ew.cu - element-wise kernels: gated activations (SwiGLU, GELU-tanh GeGLU), residual add, and
// argmax per row. Same expressions as the CPU references (src/kernels/vec.c, src/sched/sampler.c).
#include "cuda_common.cuh"
#include "cuda_items.cuh"

namespace {

template <class Act> __global__ void glu_kernel(float *g, const float *__restrict__ u, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        g[i] = Act::f(g[i]) * u[i];
}

__global__ void add_kernel(float *y, const float *__restrict__ x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

constexpr int kArgmaxThreads = 256;

// One thread block per row.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float *__restrict__ x, int64_t n, int32_t *out,
                                                                 int flag_nonfinite) {
    float bv;
    int64_t bi;
    bool bad;
    const float *xr = x + blockIdx.x * n;
    argmax_part(xr, n, threadIdx.x, kArgmaxThreads, &bv, &bi, &bad);
    for (int off = 16; off > 0; off /= 2) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, off);
        const int64_t i = __shfl_xor_sync(0xffffffffu, bi, off);
        if (i >= 0 && argmax_better(v, i, bv, bi)) bv = v, bi = i;
    }
    bad = __any_sync(0xffffffffu, bad);
    __shared__ float sv[kArgmaxThreads / 32];
    __shared__ int64_t si[kArgmaxThreads / 32];
    __shared__ bool sbad[kArgmaxThreads / 32];
    if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = bv, si[threadIdx.x / 32] = bi, sbad[threadIdx.x / 32] = bad;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kArgmaxThreads / 32; w++) {
            bad |= sbad[w];
            if (si[w] >= 0 && argmax_better(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
        }
        out[blockIdx.x] = argmax_result(xr[0], bi, bad, flag_nonfinite);
    }
}

template <class Act> int glu(kvt_cuda_ctx *ctx, const char *name, float *g, const float *u, int64_t n) {
    if (n < 1) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "%s: %lld elements", name, (long long)n);
    glu_kernel<Act><<<grid_for(n, 256), 256, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(g, u, n);
    return ctx_check_launch(ctx, name);
}

} // namespace

int kvt_cu_swiglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) { return glu<silu_op>(ctx, "swiglu", g, u, n); }
int kvt_cu_geglu(kvt_cuda_ctx *ctx, float *g, const float *u, int64_t n) { return glu<gelu_tanh_op>(ctx, "geglu", g, u, n); }

int kvt_cu_add(kvt_cuda_ctx *ctx, float *y, const float *x, int64_t n) {
    if (n < 1) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "add: %lld elements", (long long)n);
    add_kernel<<<grid_for(n, 256), 256, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(y, x, n);
    return ctx_check_launch(ctx, "add_kernel");
}

int kvt_cu_argmax(kvt_cuda_ctx *ctx, const float *x, int64_t n_rows, int64_t n, int32_t *out, int flag_nonfinite) {
    if (n_rows < 1 || n_rows > INT32_MAX || n < 1 || n > INT32_MAX)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "argmax: %lld rows of %lld", (long long)n_rows, (long long)n);
    argmax_kernel<<<(unsigned)n_rows, kArgmaxThreads, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(x, n, out, flag_nonfinite);
    return ctx_check_launch(ctx, "argmax_kernel");
}
