// cuda_matvec.cu - weight matrix x up to KVT_CUDA_MMV_BATCH_MAX activation rows (decode), two paths, each one kernel
// template over the weight types:
//
// f32 (KVT_CUDA_MMV=f32 when the context is made; always for F16 and BF16 weights): one warp per weight row: lane l decodes the 8-element groups l, l + 32, ... of the row once
// (cuda_blocks.cuh) and multiplies each into every activation row (f32 activations, not quantized; f32 accumulation),
// then the warp sums its lanes by shuffles.
//
// q8_1 (the default for the quantized weight types; an H200, 2026-11-30: decode of a llama3-8b Q4_K_M 2.23x the f32
// path's): a first kernel quantizes the activation
// rows into the context's q8_1 buffer (one thread per block of 32), then one warp per kMmvqRows weight rows: lane l
// takes the items l, l + 32, ... of the rows (cuda_mmvq_items.cuh: 32-bit and 16-byte weight loads, integer dot
// products with dp4a, one float multiply-add per block and scale) for every activation row, then the warp sums its
// lanes by shuffles. F16 and BF16 weights keep the f32 path.
//
// Either way the weights are read once for all n_tok rows, so at n_tok <= 8 the kernels are bound by the weight bytes.
// Past 8 rows (up to KVT_CUDA_MMV_BATCH_MAX) a warp takes the rows in tiles of 8, its weight row again from cache for
// each tile: every activation row gets the sums a call of its own gives, bit for bit, whatever rows share the call
// (a beam search's schedules, the serving scheduler's batches: the same tokens).
#include "cuda_common.cuh"
#include "cuda_mmvq_items.cuh"

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
    for (int t0 = 0; t0 < n_tok; t0 += KVT_CUDA_MMV_MAX_ROWS) { // tiles of rows, each summed as a call of its own
        const int nt = n_tok - t0 < KVT_CUDA_MMV_MAX_ROWS ? n_tok - t0 : KVT_CUDA_MMV_MAX_ROWS;
        float acc[KVT_CUDA_MMV_MAX_ROWS];
#pragma unroll
        for (int t = 0; t < KVT_CUDA_MMV_MAX_ROWS; t++) acc[t] = 0.0f;
        mmv_lane<T>(row, n_cols, x + (int64_t)t0 * n_cols, nt, lane, acc);
#pragma unroll
        for (int t = 0; t < KVT_CUDA_MMV_MAX_ROWS; t++) {
            if (t < nt) {
                float v = acc[t];
#pragma unroll
                for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
                if (lane == 0) y[(t0 + t) * n_rows + r] = v;
            }
        }
    }
}

// q8_1 activations: item b of n_tok * n_cols / 32 blocks
// (rows of n_cols, a multiple of 32, are consecutive in x, xq and xd alike)
__global__ void quantize_q8_1_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ xq,
                                     float2 *__restrict__ xd) {
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < n_blocks; b += (int64_t)gridDim.x * blockDim.x)
        q8_1_block(x + 32 * b, xq + 32 * b, xd + b);
}

// R weight rows per warp (kMmvqRows, or the context's mmvq_rows for q4_K / q6_K at one activation row), ILP items a
// lane at a time (1, or the context's mmvq_ilp there): each row's sums are the same whatever R and ILP (its lanes'
// items in the same order, the same shuffles).
template <int T, int NT, int R, int ILP>
__global__ void __launch_bounds__(32 * kWarps, 1) // (without the 1, ptxas for sm_89 caps q4_K at 64 registers and spills)
    mmvq_kernel(const uint8_t *__restrict__ W, int64_t n_rows, int64_t n_cols, const int8_t *__restrict__ xq,
                const float2 *__restrict__ xd, int n_tok, float *__restrict__ y) {
    const int64_t r0 = ((int64_t)blockIdx.x * kWarps + threadIdx.x / 32) * R;
    const int lane = threadIdx.x % 32;
    if (r0 >= n_rows) return;
    for (int t0 = 0; t0 < n_tok; t0 += NT) { // tiles of NT rows (past 8 rows), each summed as a call of its own
        const int nt = n_tok - t0 < NT ? n_tok - t0 : NT;
        float acc[R][NT];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
        mmvq_lane<T, NT, R, ILP>(W, n_rows, n_cols, r0, xq + (int64_t)t0 * n_cols, xd + (int64_t)t0 * (n_cols / 32), nt, lane,
                                 acc);
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (r0 + r < n_rows && t < nt) { // uniform over the warp
                    float v = acc[r][t];
#pragma unroll
                    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
                    if (lane == 0) y[(t0 + t) * n_rows + r0 + r] = v;
                }
            }
        }
    }
}

template <int T, int NT, int R = kMmvqRows, int ILP = 1>
int mmvq_launch(kvt_cuda_ctx *ctx, const void *W, int64_t n_rows, int64_t n_cols, const int8_t *xq, const float2 *xd,
                int64_t n_tok, float *y) {
    const int64_t per_block = (int64_t)kWarps * R;
    const unsigned blocks = (unsigned)((n_rows + per_block - 1) / per_block);
    mmvq_kernel<T, NT, R, ILP><<<blocks, 32 * kWarps, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(
        (const uint8_t *)W, n_rows, n_cols, xq, xd, (int)n_tok, y);
    return ctx_check_launch(ctx, "mmvq_kernel");
}

// One activation row of q4_K / q6_K with R weight rows per warp and the context's items in flight (KVT_CUDA_MMVQ_ILP)
template <int T, int R>
int mmvq_decode(kvt_cuda_ctx *ctx, const void *W, int64_t n_rows, int64_t n_cols, const int8_t *xq, const float2 *xd,
                float *y) {
    return ctx->mmvq_ilp == 2 ? mmvq_launch<T, 1, R, 2>(ctx, W, n_rows, n_cols, xq, xd, 1, y)
                              : mmvq_launch<T, 1, R, 1>(ctx, W, n_rows, n_cols, xq, xd, 1, y);
}

// x [n_tok, n_cols] quantized to q8_1 into the context's buffer: *xq the values, *xd the blocks' scales
int quantize_q8_1(kvt_cuda_ctx *ctx, const float *x, int64_t n_tok, int64_t n_cols, int8_t **xq, float2 **xd) {
    void *buf = nullptr;
    const int rc = ctx_q8_1_buffer(ctx, (size_t)q8_1_bytes(n_tok, n_cols), &buf);
    if (rc) return rc;
    *xq = (int8_t *)buf;
    *xd = (float2 *)((uint8_t *)buf + q8_1_xq_bytes(n_tok, n_cols));
    const int64_t n_blocks = n_tok * (n_cols / 32);
    quantize_q8_1_kernel<<<grid_for(n_blocks, 128), 128, 0, ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(x, n_blocks, *xq, *xd);
    return ctx_check_launch(ctx, "quantize_q8_1_kernel");
}

// The q8_1 path of a quantized type over activations already quantized (quantize_q8_1; the float types never reach
// it: mmvq_type)
template <int T> struct mmvq_op {
    static int run(kvt_cuda_ctx *ctx, const void *W, int64_t n_rows, int64_t n_cols, const int8_t *xq, const float2 *xd,
                   int64_t n_tok, float *y) {
        if constexpr (T == KVT_CUDA_F32 || T == KVT_CUDA_F16 || T == KVT_CUDA_BF16) {
            return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec: no q8_1 path for type %d", T);
        } else {
            if constexpr (T == KVT_CUDA_Q4_K || T == KVT_CUDA_Q6_K) { // decode: KVT_CUDA_MMVQ_ROWS, KVT_CUDA_MMVQ_ILP
                if (n_tok == 1) {
                    if (ctx->mmvq_rows == 1) return mmvq_decode<T, 1>(ctx, W, n_rows, n_cols, xq, xd, y);
                    if (ctx->mmvq_rows == 4) return mmvq_decode<T, 4>(ctx, W, n_rows, n_cols, xq, xd, y);
                    return mmvq_decode<T, kMmvqRows>(ctx, W, n_rows, n_cols, xq, xd, y);
                }
            }
            if (n_tok == 1) return mmvq_launch<T, 1>(ctx, W, n_rows, n_cols, xq, xd, n_tok, y);
            if (n_tok == 2) return mmvq_launch<T, 2>(ctx, W, n_rows, n_cols, xq, xd, n_tok, y);
            if (n_tok <= 4) return mmvq_launch<T, 4>(ctx, W, n_rows, n_cols, xq, xd, n_tok, y);
            return mmvq_launch<T, 8>(ctx, W, n_rows, n_cols, xq, xd, n_tok, y);
        }
    }
};

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

// The q8_1 path where the context asks for it and the weights are 16-byte aligned (its 16-byte loads of q4_K and q5_K
// blocks; every weight from dev_malloc is)
static bool takes_q8_1(const kvt_cuda_ctx *ctx, int type, const void *W) {
    return ctx->mmv_q8_1 && mmvq_type(type) && (uintptr_t)W % 16 == 0;
}

static int check_mv(kvt_cuda_ctx *ctx, const char *entry, int type, int64_t n_rows, int64_t n_cols, int64_t n_tok) {
    int rc = kvt_cu_check_matrix(ctx, entry, type, n_rows, n_cols);
    if (rc) return rc;
    if (type == KVT_CUDA_F32) return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "%s: f32 weights not handled", entry);
    if (n_tok < 1 || n_tok > KVT_CUDA_MMV_BATCH_MAX)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "%s: %lld activation rows (1 to %d)", entry, (long long)n_tok,
                        KVT_CUDA_MMV_BATCH_MAX);
    return KVT_CUDA_OK;
}

int kvt_cu_mul_mat_vec(kvt_cuda_ctx *ctx, int type, const void *W, int64_t n_rows, int64_t n_cols, const float *x,
                       int64_t n_tok, float *y) {
    const kvt_cuda_mv mv = {type, W, n_rows, y};
    return kvt_cu_mul_mat_vec_multi(ctx, &mv, 1, n_cols, x, n_tok);
}

int kvt_cu_mul_mat_vec_multi(kvt_cuda_ctx *ctx, const kvt_cuda_mv *mv, int n, int64_t n_cols, const float *x, int64_t n_tok) {
    if (n < 1 || n > KVT_CUDA_MV_MULTI_MAX || !mv)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "mul_mat_vec_multi: %d products (1 to %d)", n, KVT_CUDA_MV_MULTI_MAX);
    bool q8 = false; // any product over q8_1 activations: x quantized once, before the first
    for (int i = 0; i < n; i++) {
        const int rc = check_mv(ctx, n > 1 ? "mul_mat_vec_multi" : "mul_mat_vec", mv[i].type, mv[i].n_rows, n_cols, n_tok);
        if (rc) return rc;
        q8 = q8 || takes_q8_1(ctx, mv[i].type, mv[i].W);
    }
    int8_t *xq = nullptr;
    float2 *xd = nullptr;
    if (q8) {
        const int rc = quantize_q8_1(ctx, x, n_tok, n_cols, &xq, &xd);
        if (rc) return rc;
    }
    for (int i = 0; i < n; i++) {
        const int rc = takes_q8_1(ctx, mv[i].type, mv[i].W)
                           ? dispatch_type<mmvq_op>(mv[i].type, false, ctx, mv[i].W, mv[i].n_rows, n_cols, (const int8_t *)xq,
                                                    (const float2 *)xd, n_tok, mv[i].y)
                           : dispatch_type<mmv_op>(mv[i].type, false, ctx, mv[i].W, mv[i].n_rows, n_cols, x, n_tok, mv[i].y);
        if (rc) return rc;
    }
    return KVT_CUDA_OK;
}
