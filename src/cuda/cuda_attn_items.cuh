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

// The K and V rows of position p (attn_kv_row of both tables). A kernel computes them once per position of its chunk
// or tile (a 64-bit division each) into shared memory, and its threads read the rows from there: the pieces below take
// rows, not positions (before 2026-12-04 each element read divided anew, and that division dominated the kernels).
__host__ __device__ __forceinline__ void attn_kv_rows(const kvt_cuda_attn_args &a, int seq, int64_t p, int kvh, const __half **k,
                                                      const __half **v) {
    *k = attn_kv_row(a.k_blocks, a, seq, p, kvh);
    *v = attn_kv_row(a.v_blocks, a, seq, p, kvh);
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

// One step of a score or P.V sum with its rounding spelled out (no contraction left to the compiler), so that the
// per-head and the GQA kernels, whose loops differ, give the same bits: acc + (q0 k0 + q1 k1) as fma(q1, k1, q0 k0).
__host__ __device__ __forceinline__ float attn_qk2(float acc, float q0, float k0, float q1, float k1) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(acc, fmaf(q1, k1, __fmul_rn(q0, k0)));
#else
    return acc + fmaf(q1, k1, q0 * k0);
#endif
}

// Lane `lane`'s part of q . K[p] (krow: K[p], attn_kv_rows; dims 2 lane, 2 lane + 1, 2 lane + 64, ...); the warp sums
// the 32 parts.
__host__ __device__ __forceinline__ float attn_score_lane(const kvt_cuda_attn_args &a, const float *q, const __half *krow, int lane) {
    const __half2 *k = (const __half2 *)krow;
    float dot = 0.0f;
    for (int d2 = lane; d2 < a.head_dim / 2; d2 += 32) {
        const float2 kk = __half22float2(k[d2]);
        dot = attn_qk2(dot, q[2 * d2], kk.x, q[2 * d2 + 1], kk.y);
    }
    return dot;
}

// Most query heads per KV head the GQA decode kernel takes (KVT_CUDA_ATTN_DECODE=gqa); more: the per-head kernel.
constexpr int kAttnGqaMax = 8;

// attn_score_lane for the G query heads of KV head kvh at once (q: [G][head_dim]): K[p] read once; dot[g] gets what
// attn_score_lane gives for head g (the same sums in the same order: bit for bit).
__host__ __device__ __forceinline__ void attn_score_lanes_g(const kvt_cuda_attn_args &a, const float *q, int G, const __half *krow,
                                                            int lane, float dot[kAttnGqaMax]) {
    const __half2 *k = (const __half2 *)krow;
    for (int g = 0; g < G; g++) dot[g] = 0.0f;
    for (int d2 = lane; d2 < a.head_dim / 2; d2 += 32) {
        const float2 kk = __half22float2(k[d2]);
        for (int g = 0; g < G; g++) dot[g] = attn_qk2(dot[g], q[g * a.head_dim + 2 * d2], kk.x, q[g * a.head_dim + 2 * d2 + 1], kk.y);
    }
}

// attn_pv_item for G heads at once (e: [G][KVT_CUDA_ATTN_CHUNK] weights): V[p][d] read once; o[g] bit for bit head g's.
__host__ __device__ __forceinline__ void attn_pv_items_g(const float *e, int G, const __half *const *vrows, int n, int d,
                                                         float o[kAttnGqaMax]) {
    for (int g = 0; g < G; g++) o[g] = 0.0f;
    for (int i = 0; i < n; i++) {
        const float v = __half2float(vrows[i][d]);
        for (int g = 0; g < G; g++) o[g] = fmaf(e[g * KVT_CUDA_ATTN_CHUNK + i], v, o[g]);
    }
}

// m = max of the n scores sc, s = sum exp(sc - m), in index order (every thread computes the same).
__host__ __device__ __forceinline__ void attn_max_sum(const float *sc, int n, float *m_out, float *s_out) {
    float m = -INFINITY, s = 0.0f;
    for (int i = 0; i < n; i++) m = fmaxf(m, sc[i]);
    for (int i = 0; i < n; i++) s += expf(sc[i] - m);
    *m_out = m, *s_out = s;
}

// o[d] of a chunk: sum over its n positions p0 + i of e[i] * V[p0 + i][d] (vrows[i]: V[p0 + i]), in position order.
__host__ __device__ __forceinline__ float attn_pv_item(const float *e, const __half *const *vrows, int n, int d) {
    float o = 0.0f;
    for (int i = 0; i < n; i++) o = fmaf(e[i], __half2float(vrows[i][d]), o);
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

// ---------------------------------------------------------------- tiled prefill attention (KVT_CUDA_ATTN=tiled)
//
// One thread block per (tile of KVT_ATTN_TQ consecutive query rows, query head); its warps own the tile's rows
// (KVT_ATTN_TQ / warps each), each row's online-softmax state (m, s, o) in its warp (lane l: dims l, l + 32, ...).
// For each distinct sequence of the tile's rows, in row order, the block walks the union of those rows' positions in
// tiles of 32: the K and V rows of a tile are copied once into shared memory (attn_tile_fill_item) and every row of
// that sequence takes from them: lane j the score of position t0 + j (masked outside the row's [lo, len)), the tile's
// max, the weights, their sum and the P.V of its dims, all from the scores in its warp's 32 shared slots, in index
// order (attn_tile_*). What the CPU check cannot cover: the barriers and __syncwarp between these steps.
#define KVT_ATTN_TK 32 // positions per K/V tile (= lanes: lane j scores position j)
#define KVT_ATTN_TQ 8  // query rows per thread block

// Half2 stride of a K row in shared memory: head_dim / 2 + 1 (lanes reading different rows hit different banks)
__host__ __device__ __forceinline__ int attn_tile_kstride(int head_dim) { return head_dim / 2 + 1; }

// The positions [lo, len) a query row attends (its window or all its length).
__host__ __device__ __forceinline__ int64_t attn_row_lo(int64_t len, int window) { return window > 0 && len > window ? len - window : 0; }

// Whether row i is the first of the tile's nr rows with its sequence (rseq), and then [*lo, *hi): the union of the
// positions [rlo, rlen) of the tile's rows of that sequence, which the block walks once for all of them.
__host__ __device__ __forceinline__ bool attn_tile_seq_span(const int *rseq, const int64_t *rlo, const int64_t *rlen, int nr, int i,
                                                            int64_t *lo, int64_t *hi) {
    for (int k = 0; k < i; k++)
        if (rseq[k] == rseq[i]) return false;
    *lo = rlo[i], *hi = rlen[i];
    for (int k = i + 1; k < nr; k++)
        if (rseq[k] == rseq[i]) *lo = *lo < rlo[k] ? *lo : rlo[k], *hi = *hi > rlen[k] ? *hi : rlen[k];
    return true;
}

// Item e of 32 x head_dim / 2: the dims pair (2 i, 2 i + 1) of tile row j = e / (head_dim / 2) (position t0 + j, whose
// rows are krows[j], vrows[j]: attn_kv_rows) of K and V into ks (stride attn_tile_kstride) and vs (stride
// head_dim / 2); rows j >= n are zero.
__host__ __device__ __forceinline__ void attn_tile_fill_item(const kvt_cuda_attn_args &a, const __half *const *krows,
                                                             const __half *const *vrows, int n, int e, __half2 *ks, __half2 *vs) {
    const int h2 = a.head_dim / 2, j = e / h2, i = e % h2;
    __half2 k = __floats2half2_rn(0.0f, 0.0f), v = k;
    if (j < n) {
        k = ((const __half2 *)krows[j])[i];
        v = ((const __half2 *)vrows[j])[i];
    }
    ks[j * attn_tile_kstride(a.head_dim) + i] = k;
    vs[j * h2 + i] = v;
}

// Lane j's scaled score q . K[t0 + j], or -inf when j >= n or the position is outside [lo, len).
__host__ __device__ __forceinline__ float attn_tile_score(const kvt_cuda_attn_args &a, const float *q, const __half2 *ks, int64_t t0,
                                                          int n, int64_t lo, int64_t len, int j) {
    const int64_t p = t0 + j;
    if (j >= n || p < lo || p >= len) return -INFINITY;
    const __half2 *k = ks + j * attn_tile_kstride(a.head_dim);
    float dot = 0.0f;
    for (int i = 0; i < a.head_dim / 2; i++) {
        const float2 kk = __half22float2(k[i]);
        dot += q[2 * i] * kk.x + q[2 * i + 1] * kk.y;
    }
    return dot * a.scale;
}

// The max of the warp's 32 scores w (every lane computes the same, in index order).
__host__ __device__ __forceinline__ float attn_tile_max(const float *w) {
    float m = -INFINITY;
    for (int j = 0; j < KVT_ATTN_TK; j++) m = fmaxf(m, w[j]);
    return m;
}

// One row's online-softmax step after its tile max mt (> -inf): the new max, and the factor of the old state.
__host__ __device__ __forceinline__ float attn_tile_rescale(float *m, float mt) {
    const float mn = fmaxf(*m, mt), alpha = expf(*m - mn); // *m = -inf (nothing yet): alpha 0
    *m = mn;
    return alpha;
}

// The weight of lane j's score sc under the max m (0 for a masked score).
__host__ __device__ __forceinline__ float attn_tile_weight(float sc, float m) { return sc == -INFINITY ? 0.0f : expf(sc - m); }

// The sum of the 32 weights w, and dim d of sum_j w[j] V[j] (vs: stride head_dim / 2), in index order.
__host__ __device__ __forceinline__ float attn_tile_sum(const float *w) {
    float s = 0.0f;
    for (int j = 0; j < KVT_ATTN_TK; j++) s += w[j];
    return s;
}
__host__ __device__ __forceinline__ float attn_tile_pv(const float *w, const __half2 *vs, int head_dim, int d) {
    const __half *v = (const __half *)vs;
    float o = 0.0f;
    for (int j = 0; j < KVT_ATTN_TK; j++) o += w[j] * __half2float(v[j * head_dim + d]);
    return o;
}

#endif
