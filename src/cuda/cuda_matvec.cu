// cuda_matvec.cu - weight matrix x up to KVT_CUDA_MMV_MAX_ROWS activation rows (decode), one kernel
// template over the weight types of cuda_blocks.cuh.
//
// One warp per weight row: lane l decodes the 8-element groups l, l + 32, ... of the row once and
// multiplies each into every activation row (f32 activations, not quantized; f32 accumulation), then
// the warp sums its lanes by shuffles. The row is read once for all n_tok rows, so at n_tok <= 8 the
// kernel is bound by the weight bytes read.
#include "cuda_common.cuh"
#include "cuda_items.cuh"

namespace {

constexpr int kWarps = 4; // weight rows per thread block

template <int T>
__global__ void __launch_bounds__(32 * kWarps)
    mmv_kernel(const uint8_t *__restrict__ W, int64_t n_rows, int64_t n_cols, const float *__restrict__ x, int n_tok,
               float *__restrict__ y) {
    const int64_t r = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= n_rows) return;
    const uint8_t *row = W + r * row_bytes<T>(n_cols);
    float acc[KVT_CUDA_MMV_MAX_ROWS];
#pragma unroll
    for (int t = 0; t < KVT_CUDA_MMV_MAX_ROWS; t++) acc[t] = 0.0f;
    mmv_lane<T>(row, n_cols, x, n_tok, lane, acc);
#pragma unroll
    for (int t = 0; t < KVT_CUDA_MMV_MAX_ROWS; t++) {
        if (t < n_tok) {
            float v = acc[t];
#pragma unroll
            for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0) y[t * n_rows + r] = v;
        }
    }
}

template <int T> struct mmv_op {
    static int run(kvt_cuda_ctx *ctx, const void *W, int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok,
                   float *y) {
        const unsigned blocks = (unsigned)((n_rows + kWarps - 1) / kWarps);
        mmv_kernel<T><<<blocks, 32 * kWarps, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>((const uint8_t *)W, n_rows, n_cols,
                                                                                       x, (int)n_tok, y);
        return ctx_check_launch(ctx, "mmv_kernel");
    }
};

} // namespace

// Shapes every matrix entry accepts: n_cols a multiple of the type's block and of 8, positive sizes.
int kvt_cu_check_matrix(kvt_cuda_ctx *ctx, const char *entry, int type, int64_t n_rows, int64_t n_cols) {
    const int qk = type_block(type);
    if (qk == 0) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "%s: weight type %d not handled", entry, type);
    if (n_rows < 1 || n_cols < 8 || n_cols % qk || n_cols % 8 || n_rows > INT32_MAX * 64LL)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "%s: bad shape %lld x %lld for type %d (columns a multiple of %d and of 8)",
                        entry, (long long)n_rows, (long long)n_cols, type, qk);
    return KVT_CUDA_OK;
}

int kvt_cu_mul_mat_vec(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                       int64_t n_tok, float *y) {
    int rc = kvt_cu_check_matrix(ctx, "mul_mat_vec", type, n_rows, n_cols);
    if (rc) return rc;
    if (type == KVT_CUDA_F32) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec: f32 weights not handled");
    if (n_tok < 1 || n_tok > KVT_CUDA_MMV_MAX_ROWS)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec: %lld activation rows (1 to %d)", (long long)n_tok,
                        KVT_CUDA_MMV_MAX_ROWS);
    return dispatch_type<mmv_op>(type, false, ctx, W, n_rows, n_cols, x, n_tok, y);
}
