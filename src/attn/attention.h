// attention.h - exact causal attention streamed over KV blocks.
//
// For each query token t (position pos0 + t) and query head h, attends over
// positions [0, pos0 + t] of the sequence, reading the KV cache block by block
// and merging partial results with the online-softmax state (m, l, o): the
// result equals dense softmax attention whatever the block size or residency.
#ifndef KVT_ATTENTION_H
#define KVT_ATTENTION_H

#include <stdint.h>

#include "../base/status.h"
#include "../base/threadpool.h"
#include "../kv/kv.h"

typedef struct {
    int32_t n_head;    // query heads; head h reads KV head h / (n_head / n_head_kv)
    float scale;       // usually 1/sqrt(head_dim)
} kvt_attn_params;

// Per-thread scratch for kvt_attention: kvt_attn_scratch_bytes(kv) bytes each.
int64_t kvt_attn_scratch_bytes(const kvt_kv *kv);

// q:   [n, n_head * head_dim] f32 (already roped)
// out: [n, n_head * head_dim_v] f32
// scratch: n_threads buffers of kvt_attn_scratch_bytes bytes.
kvt_status kvt_attention(kvt_kv *kv, int32_t seq, int32_t layer, const kvt_attn_params *p, const float *q, int64_t pos0,
                         int64_t n, float *out, kvt_threadpool *pool, void *const *scratch, kvt_err *err);

#endif
