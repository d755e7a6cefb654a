// cuda_attn.cu - paged attention of query rows over f16 KV blocks (kvt_cuda_attn_args in kvt_cuda.h).
//
// Pass 1: one thread block per (chunk of KVT_CUDA_ATTN_CHUNK positions, query head, query row) computes
// the chunk's online-softmax state from scratch: m = max score, s = sum exp(score - m),
// o[d] = sum exp(score - m) * V[d] (unnormalized), and stores it in the context's workspace.
// Pass 2: one thread block per (head, query row) folds the chunk states in chunk order
// (m' = max(m, m_c); o = o e^(m - m') + o_c e^(m_c - m'); s likewise) and writes o / s.
// Every reduction has a fixed order, so results do not depend on how the blocks are scheduled.
#include "cuda_blocks.cuh"
#include "cuda_common.cuh"

namespace {

constexpr int kThreads = 128;          // 4 warps
constexpr int kChunk = KVT_CUDA_ATTN_CHUNK;

// Row `p` (a position) of head `kvh` in the K or V blocks of sequence `seq`.
__device__ __forceinline__ const __half *kv_row(const void *const *blocks, const kvt_cuda_attn_args &a, int seq, int64_t p,
                                                int kvh) {
    const __half *blk = (const __half *)blocks[(int64_t)seq * a.max_blocks + p / a.block_len];
    return blk + ((p % a.block_len) * a.n_kv_head + kvh) * (int64_t)a.head_dim;
}

__global__ void __launch_bounds__(kThreads) attn_chunk_kernel(kvt_cuda_attn_args a, int n_chunks, float *__restrict__ states) {
    const int c = blockIdx.x, h = blockIdx.y, row = blockIdx.z;
    const int seq = a.row_seq ? a.row_seq[row] : row;
    const int D = a.head_dim, kvh = h / (a.n_head / a.n_kv_head);
    const int64_t len = a.seq_len[row];
    const int64_t p0 = (int64_t)c * kChunk;
    const int n = (int)(len - p0 < kChunk ? (len - p0 > 0 ? len - p0 : 0) : kChunk); // positions of this chunk
    float *st = states + (((int64_t)row * a.n_head + h) * n_chunks + c) * (D + 2);
    __shared__ float q[KVT_CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float sc[kChunk];
    const float *qh = a.q + ((int64_t)row * a.n_head + h) * D;
    for (int d = threadIdx.x; d < D; d += kThreads) q[d] = qh[d];
    __syncthreads();
    // scores: warp w takes positions w, w + 4, ...; lanes split the head dim in pairs
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = warp; i < n; i += kThreads / 32) {
        const __half2 *k = (const __half2 *)kv_row(a.k_blocks, a, seq, p0 + i, kvh);
        float dot = 0.0f;
        for (int d2 = lane; d2 < D / 2; d2 += 32) {
            const float2 kk = __half22float2(k[d2]);
            dot += q[2 * d2] * kk.x + q[2 * d2 + 1] * kk.y;
        }
        for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0) sc[i] = dot * a.scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = fmaxf(m, sc[i]);
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += expf(sc[i] - m); // every thread, same order: same s everywhere
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) sc[i] = expf(sc[i] - m);
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += kThreads) {
        float o = 0.0f;
        for (int i = 0; i < n; i++) o += sc[i] * __half2float(kv_row(a.v_blocks, a, seq, p0 + i, kvh)[d]);
        st[2 + d] = o;
    }
    if (threadIdx.x == 0) st[0] = m, st[1] = s; // n == 0: m = -inf, s = 0 (skipped by the merge)
}

__global__ void __launch_bounds__(kThreads) attn_merge_kernel(kvt_cuda_attn_args a, int n_chunks, const float *__restrict__ states) {
    const int h = blockIdx.x, row = blockIdx.y, D = a.head_dim;
    const float *st0 = states + ((int64_t)row * a.n_head + h) * n_chunks * (D + 2);
    float *out = a.out + ((int64_t)row * a.n_head + h) * D;
    for (int d = threadIdx.x; d < D; d += kThreads) {
        float m = -INFINITY, s = 0.0f, o = 0.0f;
        for (int c = 0; c < n_chunks; c++) {
            const float *st = st0 + (int64_t)c * (D + 2);
            if (st[1] == 0.0f) continue; // empty chunk (past the sequence's length)
            const float mn = fmaxf(m, st[0]);
            const float a0 = expf(m - mn), a1 = expf(st[0] - mn);
            s = s * a0 + st[1] * a1;
            o = o * a0 + st[2 + d] * a1;
            m = mn;
        }
        out[d] = o / s;
    }
}

} // namespace

int kvt_cu_attn_paged(kvt_cuda_ctx *ctx, const kvt_cuda_attn_args *a) {
    if (a->n_q < 1 || a->n_q > 65535 || a->n_head < 1 || a->n_head > 65535 || a->n_kv_head < 1 ||
        a->n_head % a->n_kv_head || a->head_dim < 2 || a->head_dim % 2 || a->head_dim > KVT_CUDA_ATTN_MAX_HEAD_DIM ||
        a->block_len < 1 || a->max_seq_len < 1 || a->max_blocks < (a->max_seq_len + a->block_len - 1) / a->block_len)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG,
                        "attn_paged: bad shape (%d rows, %d/%d heads, head_dim %d, block_len %d, max_blocks %d, max_seq_len %d)",
                        a->n_q, a->n_head, a->n_kv_head, a->head_dim, a->block_len, a->max_blocks, a->max_seq_len);
    if (!a->q || !a->k_blocks || !a->v_blocks || !a->seq_len || !a->out)
        return ctx_fail(ctx, KVT_CUDA_ERR_ARG, "attn_paged: a device pointer is NULL");
    const int n_chunks = (a->max_seq_len + kChunk - 1) / kChunk;
    void *ws = nullptr;
    int rc = ctx_workspace(ctx, (size_t)a->n_q * a->n_head * n_chunks * (a->head_dim + 2) * sizeof(float), &ws);
    if (rc) return rc;
    const cudaStream_t s = ctx->stream[KVT_CUDA_STREAM_COMPUTE];
    attn_chunk_kernel<<<dim3(n_chunks, a->n_head, a->n_q), kThreads, 0, s>>>(*a, n_chunks, (float *)ws);
    if ((rc = ctx_check_launch(ctx, "attn_chunk_kernel"))) return rc;
    attn_merge_kernel<<<dim3(a->n_head, a->n_q), kThreads, 0, s>>>(*a, n_chunks, (const float *)ws);
    return ctx_check_launch(ctx, "attn_merge_kernel");
}
