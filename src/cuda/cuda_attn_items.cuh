// cuda_attn_items.cuh - the pieces of the paged attention kernels (cuda_attn.cu), as host and device
// functions, so that tests/cuda/cuda_host_check.cu assembles the same pieces on the CPU (a serial
// stand-in for the threads, the warp shuffles and the barriers) and checks them against kvt_attention.
#ifndef KVT_CUDA_ATTN_ITEMS_CUH
#define KVT_CUDA_ATTN_ITEMS_CUH

#include <cmath>

#include "cuda_blocks.cuh"

// Row of position p, KV head kvh, in the K or V blocks (`blocks`: a's k_blocks or v_blocks) of the
// block-table row `seq`: [head_dim] f16.
__host__ __device__ __forceinline__ const __half *attn_kv_row(const void *const *blocks, const kvt_cuda_attn_args &a, int seq,
                                                              int64_t p, int kvh) {
    const __half *blk = (const __half *)blocks[(int64_t)seq * a.max_blocks + p / a.block_len];
    return blk + ((p % a.block_len) * a.n_kv_head + kvh) * (int64_t)a.head_dim;
}

// The positions chunk c of a row attends: [*p0, *p0 + return value) of [c * CHUNK, (c + 1) * CHUNK), cut to the row's
// positions [lo, len) (lo = len - window with a window, else 0); 0 positions outside them.
__host__ __device__ __forceinline__ int attn_chunk_span(int64_t len, int window, int c, int64_t *p0) {
    const int64_t lo = window > 0 && len > window ? len - window : 0, c0 = (int64_t)c * KVT_CUDA_ATTN_CHUNK;
    const int64_t start = c0 > lo ? c0 : lo, end = c0 + KVT_CUDA_ATTN_CHUNK < len ? c0 + KVT_CUDA_ATTN_CHUNK : len;
    *p0 = start;
    return (int)(end > start ? end - start : 0);
}

// Offset (floats) of the state (m, s, o[head_dim]) of chunk c of (row, head h) in the workspace.
__host__ __device__ __forceinline__ int64_t attn_state_offset(const kvt_cuda_attn_args &a, int row, int h, int n_chunks, int c) {
    return (((int64_t)row * a.n_head + h) * n_chunks + c) * (a.head_dim + 2);
}

// Lane `lane`'s part of q . K[p] (dims 2 lane, 2 lane + 1, 2 lane + 64, ...); the warp sums the 32 parts.
__host__ __device__ __forceinline__ float attn_score_lane(const kvt_cuda_attn_args &a, const float *q, int seq, int kvh, int64_t p,
                                                          int lane) {
    const __half2 *k = (const __half2 *)attn_kv_row(a.k_blocks, a, seq, p, kvh);
    float dot = 0.0f;
    for (int d2 = lane; d2 < a.head_dim / 2; d2 += 32) {
        const float2 kk = __half22float2(k[d2]);
        dot += q[2 * d2] * kk.x + q[2 * d2 + 1] * kk.y;
    }
    return dot;
}

// m = max of the n scores sc, s = sum exp(sc - m), in index order (every thread computes the same).
__host__ __device__ __forceinline__ void attn_max_sum(const float *sc, int n, float *m_out, float *s_out) {
    float m = -INFINITY, s = 0.0f;
    for (int i = 0; i < n; i++) m = fmaxf(m, sc[i]);
    for (int i = 0; i < n; i++) s += expf(sc[i] - m);
    *m_out = m, *s_out = s;
}

// o[d] of a chunk: sum over its n positions p0 + i of e[i] * V[p0 + i][d], in position order.
__host__ __device__ __forceinline__ float attn_pv_item(const kvt_cuda_attn_args &a, const float *e, int seq, int kvh, int64_t p0,
                                                       int n, int d) {
    float o = 0.0f;
    for (int i = 0; i < n; i++) o += e[i] * __half2float(attn_kv_row(a.v_blocks, a, seq, p0 + i, kvh)[d]);
    return o;
}

// out[d] of (row, head): the n_chunks states at st0 (stride head_dim + 2) folded in chunk order; a state
// with s = 0 (a chunk past the row's length) is skipped.
__host__ __device__ __forceinline__ float attn_merge_item(const float *st0, int n_chunks, int head_dim, int d) {
    float m = -INFINITY, s = 0.0f, o = 0.0f;
    for (int c = 0; c < n_chunks; c++) {
        const float *st = st0 + (int64_t)c * (head_dim + 2);
        if (st[1] == 0.0f) continue;
        const float mn = fmaxf(m, st[0]);
        const float a0 = expf(m - mn), a1 = expf(st[0] - mn);
        s = s * a0 + st[1] * a1;
        o = o * a0 + st[2 + d] * a1;
        m = mn;
    }
    return o / s;
}

#endif
