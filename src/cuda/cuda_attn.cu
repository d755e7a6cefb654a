// cuda_attn.cu - paged attention of query rows over f16 KV blocks (kvt_cuda_attn_args in kvt_cuda.h).
//
// Pass 1: one thread block per (chunk of KVT_CUDA_ATTN_CHUNK positions, query head, query row) computes
// the chunk's online-softmax state from scratch (over the chunk's positions inside the row's window): m = max score, s = sum exp(score - m),
// o[d] = sum exp(score - m) * V[d] (unnormalized), and stores it in the context's workspace.
// Pass 2: one thread block per (head, query row) folds the chunk states in chunk order
// (m' = max(m, m_c); o = o e^(m - m') + o_c e^(m_c - m'); s likewise) and writes o / s.
// Every reduction has a fixed order, so results do not depend on how the blocks are scheduled.
// The pieces (score lanes, max and sum, P.V, the merge) are in cuda_attn_items.cuh.
//
// GQA (a context made with KVT_CUDA_ATTN_DECODE=gqa; 2026-11-30): pass 1 by one block per (chunk, KV head, row) for
// the KV head's query heads together, each head's state bit for bit pass 1's above (on an H200 on 2026-12-04: every
// output the per-head kernel's).
//
// Tiled (a context made with KVT_CUDA_ATTN=tiled, for calls of at least kTiledMinRows query rows: prefill): one
// thread block per (tile of KVT_ATTN_TQ rows, head) walks the K/V of its rows' sequences in tiles of 32 positions
// through shared memory, each row keeping its online-softmax state (cuda_attn_items.cuh, "tiled prefill attention"):
// K/V read once per tile of rows instead of once per row, no workspace, one kernel. Its rounding differs from the
// chunked kernels' (another order of the same sums).
#include "cuda_attn_items.cuh"
#include "cuda_common.cuh"

namespace {

constexpr int kThreads = 128; // 4 warps

__global__ void __launch_bounds__(kThreads) attn_chunk_kernel(kvt_cuda_attn_args a, int n_chunks, float *__restrict__ states) {
    const int c = blockIdx.x, h = blockIdx.y, row = blockIdx.z;
    const int seq = a.row_seq ? a.row_seq[row] : row;
    const int D = a.head_dim, kvh = h / (a.n_head / a.n_kv_head);
    int64_t p0;
    const int n = attn_chunk_span(a.seq_len[row], a.window, c, &p0);
    float *st = states + attn_state_offset(a, row, h, n_chunks, c);
    __shared__ float q[KVT_CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float sc[KVT_CUDA_ATTN_CHUNK];
    __shared__ const __half *kr[KVT_CUDA_ATTN_CHUNK], *vr[KVT_CUDA_ATTN_CHUNK]; // the chunk's K and V rows
    const float *qh = a.q + (int64_t)row * (a.row_stride > 0 ? a.row_stride : a.n_head * D) + (int64_t)h * D;
    for (int d = threadIdx.x; d < D; d += kThreads) q[d] = qh[d];
    for (int i = threadIdx.x; i < n; i += kThreads) attn_kv_rows(a, seq, p0 + i, kvh, &kr[i], &vr[i]);
    __syncthreads();
    // scores: warp w takes positions w, w + 4, ...; its lanes split the head dim
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = warp; i < n; i += kThreads / 32) {
        float dot = attn_score_lane(a, q, kr[i], lane);
        for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0) sc[i] = dot * a.scale;
    }
    __syncthreads();
    float m, s;
    attn_max_sum(sc, n, &m, &s); // n == 0: m = -inf, s = 0 (the merge skips the state)
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) sc[i] = expf(sc[i] - m);
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += kThreads) st[2 + d] = attn_pv_item(sc, vr, n, d);
    if (threadIdx.x == 0) st[0] = m, st[1] = s;
}

// The GQA decode kernel (KVT_CUDA_ATTN_DECODE=gqa): one thread block per (chunk, KV head, query row) computes the
// chunk states of the KV head's G query heads together: every K and V row of the chunk read once for G heads (the
// per-head kernel reads it G times), each head's state bit for bit what attn_chunk_kernel writes (the same pieces, G
// at a time: cuda_attn_items.cuh).
__global__ void __launch_bounds__(kThreads) attn_chunk_gqa_kernel(kvt_cuda_attn_args a, int n_chunks, float *__restrict__ states) {
    const int c = blockIdx.x, kvh = blockIdx.y, row = blockIdx.z;
    const int seq = a.row_seq ? a.row_seq[row] : row;
    const int D = a.head_dim, G = a.n_head / a.n_kv_head, h0 = kvh * G;
    int64_t p0;
    const int n = attn_chunk_span(a.seq_len[row], a.window, c, &p0);
    __shared__ float q[kAttnGqaMax * KVT_CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float sc[kAttnGqaMax * KVT_CUDA_ATTN_CHUNK];
    __shared__ float ms[2 * kAttnGqaMax];
    __shared__ const __half *kr[KVT_CUDA_ATTN_CHUNK], *vr[KVT_CUDA_ATTN_CHUNK]; // the chunk's K and V rows
    const float *qh = a.q + (int64_t)row * (a.row_stride > 0 ? a.row_stride : a.n_head * D) + (int64_t)h0 * D;
    for (int i = threadIdx.x; i < G * D; i += kThreads) q[i] = qh[i]; // the G heads' rows are consecutive
    for (int i = threadIdx.x; i < n; i += kThreads) attn_kv_rows(a, seq, p0 + i, kvh, &kr[i], &vr[i]);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = warp; i < n; i += kThreads / 32) {
        float dot[kAttnGqaMax];
        attn_score_lanes_g(a, q, G, kr[i], lane, dot);
        for (int g = 0; g < G; g++) {
            float v = dot[g];
            for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0) sc[g * KVT_CUDA_ATTN_CHUNK + i] = v * a.scale;
        }
    }
    __syncthreads();
    if (threadIdx.x < G) attn_max_sum(sc + threadIdx.x * KVT_CUDA_ATTN_CHUNK, n, &ms[2 * threadIdx.x], &ms[2 * threadIdx.x + 1]);
    __syncthreads();
    for (int i = threadIdx.x; i < G * KVT_CUDA_ATTN_CHUNK; i += kThreads)
        if (i % KVT_CUDA_ATTN_CHUNK < n) sc[i] = expf(sc[i] - ms[2 * (i / KVT_CUDA_ATTN_CHUNK)]);
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += kThreads) {
        float o[kAttnGqaMax];
        attn_pv_items_g(sc, G, vr, n, d, o);
        for (int g = 0; g < G; g++) states[attn_state_offset(a, row, h0 + g, n_chunks, c) + 2 + d] = o[g];
    }
    if (threadIdx.x < G) {
        float *st = states + attn_state_offset(a, row, h0 + threadIdx.x, n_chunks, c);
        st[0] = ms[2 * threadIdx.x], st[1] = ms[2 * threadIdx.x + 1];
    }
}

__global__ void __launch_bounds__(kThreads) attn_merge_kernel(kvt_cuda_attn_args a, int n_chunks, const float *__restrict__ states) {
    const int h = blockIdx.x, row = blockIdx.y;
    const float *st0 = states + attn_state_offset(a, row, h, n_chunks, 0);
    float *oh = a.out + (int64_t)row * (a.row_stride > 0 ? a.row_stride : a.n_head * a.head_dim) + (int64_t)h * a.head_dim;
    for (int d = threadIdx.x; d < a.head_dim; d += kThreads) oh[d] = attn_merge_item(st0, n_chunks, a.head_dim, d);
}

constexpr int kTileWarps = 4, kTileRowsPerWarp = KVT_ATTN_TQ / kTileWarps;
constexpr int kTiledMinRows = 16;
static_assert(KVT_ATTN_TQ % kTileWarps == 0 && KVT_ATTN_TK == 32, "a warp's rows; a lane per tile position");

// Dynamic shared memory of attn_tiled_kernel: q rows [TQ, D] f32, the warps' score slots [warps, 32] f32, K [32, D/2 + 1]
// and V [32, D/2] half2.
size_t tiled_smem(int D) {
    return (size_t)(KVT_ATTN_TQ * D + kTileWarps * KVT_ATTN_TK) * 4 + (size_t)KVT_ATTN_TK * (attn_tile_kstride(D) + D / 2) * 4;
}

__global__ void __launch_bounds__(32 * kTileWarps) attn_tiled_kernel(kvt_cuda_attn_args a) {
    extern __shared__ float4 smem4[];
    constexpr int ND = KVT_CUDA_ATTN_MAX_HEAD_DIM / 32; // dims per lane
    const int r0 = blockIdx.x * KVT_ATTN_TQ, h = blockIdx.y, D = a.head_dim, kvh = h / (a.n_head / a.n_kv_head);
    const int nr = min(KVT_ATTN_TQ, a.n_q - r0), tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int64_t stride = a.row_stride > 0 ? a.row_stride : (int64_t)a.n_head * D;
    float *qs = (float *)smem4, *pw = qs + KVT_ATTN_TQ * D;
    __half2 *ks = (__half2 *)(pw + kTileWarps * KVT_ATTN_TK), *vs = ks + KVT_ATTN_TK * attn_tile_kstride(D);
    __shared__ int rseq[KVT_ATTN_TQ];
    __shared__ int64_t rlen[KVT_ATTN_TQ], rlo[KVT_ATTN_TQ];
    __shared__ const __half *tkr[KVT_ATTN_TK], *tvr[KVT_ATTN_TK]; // the K and V rows of a tile's positions
    for (int e = tid; e < nr * D; e += blockDim.x) qs[e] = a.q[(r0 + e / D) * stride + (int64_t)h * D + e % D];
    if (tid < nr) {
        rseq[tid] = a.row_seq ? a.row_seq[r0 + tid] : r0 + tid;
        rlen[tid] = a.seq_len[r0 + tid];
        rlo[tid] = attn_row_lo(rlen[tid], a.window);
    }
    __syncthreads();
    float m[kTileRowsPerWarp], s[kTileRowsPerWarp], o[kTileRowsPerWarp][ND];
#pragma unroll
    for (int rr = 0; rr < kTileRowsPerWarp; rr++) {
        m[rr] = -INFINITY, s[rr] = 0.0f;
#pragma unroll
        for (int k = 0; k < ND; k++) o[rr][k] = 0.0f;
    }
    float *w = pw + warp * KVT_ATTN_TK;
    for (int i = 0; i < nr; i++) { // each sequence of the tile once, at its first row (uniform over the block)
        int64_t lo, hi;
        if (!attn_tile_seq_span(rseq, rlo, rlen, nr, i, &lo, &hi)) continue;
        const int S = rseq[i];
        for (int64_t t0 = lo; t0 < hi; t0 += KVT_ATTN_TK) {
            const int n = (int)min((int64_t)KVT_ATTN_TK, hi - t0);
            __syncthreads(); // the previous tile is read
            if (tid < n) attn_kv_rows(a, S, t0 + tid, kvh, &tkr[tid], &tvr[tid]);
            __syncthreads();
            for (int e = tid; e < KVT_ATTN_TK * (D / 2); e += blockDim.x) attn_tile_fill_item(a, tkr, tvr, n, e, ks, vs);
            __syncthreads();
#pragma unroll
            for (int rr = 0; rr < kTileRowsPerWarp; rr++) {
                const int r = warp * kTileRowsPerWarp + rr;
                if (r >= nr || rseq[r] != S) continue; // uniform over the warp
                const float sc = attn_tile_score(a, qs + r * D, ks, t0, n, rlo[r], rlen[r], lane);
                w[lane] = sc;
                __syncwarp();
                const float mt = attn_tile_max(w);
                __syncwarp(); // every lane has read the scores
                if (mt == -INFINITY) continue; // none of the tile's positions is the row's
                const float alpha = attn_tile_rescale(&m[rr], mt);
                w[lane] = attn_tile_weight(sc, m[rr]);
                __syncwarp();
                s[rr] = s[rr] * alpha + attn_tile_sum(w);
#pragma unroll
                for (int k = 0; k < ND; k++)
                    if (lane + 32 * k < D) o[rr][k] = o[rr][k] * alpha + attn_tile_pv(w, vs, D, lane + 32 * k);
                __syncwarp(); // before the next row's scores overwrite the weights
            }
        }
    }
#pragma unroll
    for (int rr = 0; rr < kTileRowsPerWarp; rr++) {
        const int r = warp * kTileRowsPerWarp + rr;
        if (r >= nr) continue;
        float *oh = a.out + (r0 + r) * stride + (int64_t)h * D;
#pragma unroll
        for (int k = 0; k < ND; k++)
            if (lane + 32 * k < D) oh[lane + 32 * k] = o[rr][k] / s[rr];
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
    if (ctx->attn_tiled && a->n_q >= kTiledMinRows) {
        attn_tiled_kernel<<<dim3((a->n_q + KVT_ATTN_TQ - 1) / KVT_ATTN_TQ, a->n_head), 32 * kTileWarps, tiled_smem(a->head_dim),
                            ctx->stream[KVT_CUDA_STREAM_COMPUTE]>>>(*a);
        return ctx_check_launch(ctx, "attn_tiled_kernel");
    }
    const int n_chunks = (a->max_seq_len + KVT_CUDA_ATTN_CHUNK - 1) / KVT_CUDA_ATTN_CHUNK;
    void *ws = nullptr;
    int rc = ctx_workspace(ctx, (size_t)a->n_q * a->n_head * n_chunks * (a->head_dim + 2) * sizeof(float), &ws);
    if (rc) return rc;
    const cudaStream_t s = ctx->stream[KVT_CUDA_STREAM_COMPUTE];
    if (ctx->attn_gqa && a->n_head / a->n_kv_head <= kAttnGqaMax) {
        attn_chunk_gqa_kernel<<<dim3(n_chunks, a->n_kv_head, a->n_q), kThreads, 0, s>>>(*a, n_chunks, (float *)ws);
        if ((rc = ctx_check_launch(ctx, "attn_chunk_gqa_kernel"))) return rc;
    } else {
        attn_chunk_kernel<<<dim3(n_chunks, a->n_head, a->n_q), kThreads, 0, s>>>(*a, n_chunks, (float *)ws);
        if ((rc = ctx_check_launch(ctx, "attn_chunk_kernel"))) return rc;
    }
    attn_merge_kernel<<<dim3(a->n_head, a->n_q), kThreads, 0, s>>>(*a, n_chunks, (const float *)ws);
    return ctx_check_launch(ctx, "attn_merge_kernel");
}
