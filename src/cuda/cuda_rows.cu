// cuda_rows.cu - embedding lookup: rows of a weight matrix of any weight type to f32.
#include "cuda_common.cuh"
#include "cuda_items.cuh"

namespace {

// One thread per 8-element group of one output row; grid-stride over n_ids * n_cols / 8 groups.
template <int T>
__global__ void get_rows_kernel(const uint8_t *__restrict__ W, int64_t n_rows, int64_t n_cols, const int32_t *__restrict__ ids,
                                int64_t n_ids, float *__restrict__ out) {
    const int64_t n = n_ids * (n_cols / 8);
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        get_rows_item<T>(k, W, n_rows, n_cols, ids, out);
}

template <int T> struct get_rows_op {
    static int run(kvt_cuda_ctx *ctx, const void *W, int64_t n_rows, int64_t n_cols, const int32_t *ids, int64_t n_ids,
                   float *out) {
        get_rows_kernel<T><<<grid_for(n_ids * (n_cols / 8), 256), 256, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(
            (const uint8_t *)W, n_rows, n_cols, ids, n_ids, out);
        return ctx_check_launch(ctx, "get_rows_kernel");
    }
};

} // namespace

int kvt_cu_get_rows(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const int32_t *ids,
                    int64_t n_ids, float *out) {
    int rc = kvt_cu_check_matrix(ctx, "get_rows", type, n_rows, n_cols);
    if (rc) return rc;
    if (n_ids < 1) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "get_rows: %lld ids", (long long)n_ids);
    return dispatch_type<get_rows_op>(type, true, ctx, W, n_rows, n_cols, ids, n_ids, out);
}
