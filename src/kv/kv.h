// kv.h - the KV cache interface that attention reads through.
//
// A cache holds, per sequence and layer, the K and V rows of every position,
// grouped in blocks of `block_tokens` consecutive positions. Attention never
// sees where a block lives: it acquires a view of block b (the block is then
// resident and readable until released), reads it and releases it. The
// contiguous in-memory cache (kv_contig.c) and the tiered paged store both
// implement this table, so attention and the forward pass are unchanged when
// KV is offloaded.
#ifndef KVT_KV_H
#define KVT_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../kernels/dtype.h"

// Read view of one block of one (sequence, layer).
typedef struct {
    int64_t pos0;     // first position held by the block
    int64_t n;        // valid positions in the block
    const void *k;    // [n, n_head_kv, head_dim] of kv type, row stride k_stride bytes
    const void *v;    // [n, n_head_kv, head_dim_v] of kv type, row stride v_stride bytes
    int64_t k_stride; // bytes between positions
    int64_t v_stride;
} kvt_kv_view;

typedef struct kvt_kv kvt_kv;

typedef struct {
    const char *name;
    // Stores K and V of positions [pos, pos+n) of (seq, layer); k: [n, n_head_kv*head_dim] f32,
    // v: [n, n_head_kv*head_dim_v] f32 (converted to the cache's element type).
    kvt_status (*append)(kvt_kv *kv, int32_t seq, int32_t layer, int64_t pos, int64_t n, const float *k, const float *v,
                         kvt_err *err);
    // Makes block b of (seq, layer) readable; positions beyond n_tokens are excluded.
    kvt_status (*acquire)(kvt_kv *kv, int32_t seq, int32_t layer, int64_t b, kvt_kv_view *out, kvt_err *err);
    void (*release)(kvt_kv *kv, int32_t seq, int32_t layer, int64_t b);
    // Forgets positions >= n_keep of seq.
    void (*truncate)(kvt_kv *kv, int32_t seq, int64_t n_keep);
    void (*free)(kvt_kv *kv);
} kvt_kv_ops;

// Common header of every implementation (the first member of its struct).
struct kvt_kv {
    const kvt_kv_ops *ops;
    kvt_type type;         // element type of K and V (F16 or F32)
    int32_t n_layer;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t head_dim_v;
    int64_t block_tokens;  // positions per block
    int64_t n_ctx;         // maximum positions per sequence
};

static inline int64_t kvt_kv_n_blocks(const kvt_kv *kv, int64_t n_tokens) {
    return (n_tokens + kv->block_tokens - 1) / kv->block_tokens;
}

// Contiguous in-memory cache for one sequence: K and V of every layer in one
// allocation each, [n_layer][n_ctx][n_head_kv*head_dim]. Views are slices of
// `block_tokens` positions (the attention code streams over them either way).
typedef struct {
    kvt_type type;
    int32_t n_layer, n_head_kv, head_dim, head_dim_v;
    int64_t n_ctx;
    int64_t block_tokens;
} kvt_kv_params;

kvt_status kvt_kv_contig_init(const kvt_kv_params *p, kvt_kv **out, kvt_err *err);
// Bytes the contiguous cache allocates for these parameters.
int64_t kvt_kv_contig_bytes(const kvt_kv_params *p);

static inline void kvt_kv_free(kvt_kv *kv) {
    if (kv) kv->ops->free(kv);
}

#endif
