// attention.h - exact causal attention streamed over KV blocks.
//
// For each query token t (position pos0 + t) and query head h, attends over
// positions [0, pos0 + t] of the sequence (or its last `window` of them), reading the KV cache block by block
// and merging partial results with the online-softmax state (m, l, o)
// (helm.txt §4.2.3): the result equals dense softmax attention whatever the
// block size, granularity or residency. One acquisition of a block of a shard
// (layer, KV-head group) serves every query head of that group.
//
// The merge runs over fixed tiles of `tile` positions, independent of the KV
// block size: a tile spanning two blocks has its V rows gathered in scratch.
// So the floating-point operations, and the results, are bitwise the same for
// every block size, granularity and tier set-up. The tiles are grouped into
// fixed chunks of KVT_ATTN_CHUNK positions (rounded up to whole tiles): each
// chunk is attended from a fresh state and the chunk states of a (token, head)
// are folded in chunk order. The chunking depends on positions only, so the
// result of a token is bitwise the same whatever the thread count, the other
// tokens of the call (prefill or decode), the store (contiguous or paged) and
// its tiers. In prefill, one task attends up to 64 query tokens of a group
// together (one task per thread), so each task acquires every block once for
// all its tokens, folding as it passes chunk ends. A single token on several
// threads (decode) has its chunks attended as separate tasks and the saved
// chunk states folded afterwards, with the same operations.
//
// Numerics: the queries are rounded to the K dot type (f16 for an F16 cache) and each score is that dot times
// `scale` (for an F16 cache in ggml's f16 dot order, kvt_attn_kq_f16). Chunk 0 (positions [0, KVT_ATTN_CHUNK))
// of an F16 V cache is merged position by position as llama.cpp's CPU flash attention does for batches under 64
// tokens (kvt_attn_merge_f16: running max, o kept in f16 — on AVX512-FP16 CPUs its first head_dim_v & ~127
// columns in f16 arithmetic, as llama.cpp's build for such a CPU does), so a context of up to KVT_ATTN_CHUNK
// positions gives llama.cpp's output (flash attention on, its default) bit for bit: the golden tests' regime.
// Every later chunk, and every chunk of another V type, is merged with o in f32 and one running max per tile
// (the tile's max, one correction expf(old - new max) of l and o, the weights expf(s - max) with libm's bits
// (kvt_vec_expf_sub), l summed in position order, o += w * v by kvt_vec_mad_rows), as llama.cpp's tiled path
// does for 64 or more query rows; an F16 tile's V rows are converted to f32 once for the task's rows that read
// them (exact). The chunk states are folded in f32 (as llama.cpp folds its split-KV partials). The form depends
// on the position only, so a token's bits stay independent of its batch, the thread count, the block size and the
// tiers; long prompts get the f32 form's speed (prefill reads each tile's V rows once for up to 64 tokens).
#ifndef KVT_ATTENTION_H
#define KVT_ATTENTION_H

#include <stdint.h>

#include "../base/status.h"
#include "../base/threadpool.h"
#include "../kv/kv.h"

typedef struct {
    int32_t n_head;    // query heads; head h reads KV head h / (n_head / n_head_kv)
    float scale;       // usually 1/sqrt(head_dim)
    int32_t tile;      // positions per online-softmax merge step (0: KVT_ATTN_TILE)
    int32_t window;    // sliding window: a query at pos attends [pos - window + 1, pos]; 0: [0, pos]. Blocks
                       // wholly before a task's first visible position are never acquired.
} kvt_attn_params;

#define KVT_ATTN_TILE 32
// Positions per chunk (a multiple of the tile; a larger tile makes one tile a chunk).
#define KVT_ATTN_CHUNK 64

// Per-thread scratch for kvt_attention: kvt_attn_scratch_bytes(kv, n_head) bytes each.
int64_t kvt_attn_scratch_bytes(const kvt_kv *kv, int32_t n_head, int32_t tile);
// Bytes of the shared workspace (chunk states of one decoded token of up to kv->n_ctx positions, and the
// attention-mass area below; n_threads is not used). Without it (NULL) decode attends one task per group, with
// the same result.
//
// Attention mass: in decode (n == 1) with a workspace, over a paged store that ranks blocks by it
// (kvt_kv_paged_wants_attn_mass: policy attn-ema), each block's share of the softmax weight (summed over its
// positions, averaged over the query heads of its group; the shares of a group sum to 1) is handed to the store
// (kvt_kv_paged_attn_mass), per layer and group. It comes from the online-softmax state already kept: each
// tile's weights relative to its running max, summed per block, rescaled by the head's final max and sum; no
// second pass over the keys, and the attention's result is unchanged. Not computed otherwise (prefill, the
// contiguous store, other policies, a tile larger than KVT_ATTN_TILE with too little room).
int64_t kvt_attn_workspace_bytes(const kvt_kv *kv, int32_t n_head, int n_threads);

// q:   [n, n_head * head_dim] f32 (already roped)
// out: [n, n_head * head_dim_v] f32
// scratch: n_threads buffers of kvt_attn_scratch_bytes bytes; workspace: kvt_attn_workspace_bytes bytes.
kvt_status kvt_attention(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q, int64_t pos0,
                         int64_t n, float *out, kvt_threadpool *pool, void *const *scratch, void *workspace,
                         kvt_err *err);

#endif
