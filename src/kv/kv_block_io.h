// kv_block_io.h - one full block of a sequence as a flat payload, for stores outside the live KV tiers
// (prefix_store.h: a cache directory, Redis).
//
// Payload layout 1 (kvt_prefix_identity.layout = 1), for block b of a sequence (positions
// [b*block_tokens, (b+1)*block_tokens)):
//   per layer l = 0 .. n_layer-1:
//     K [n_head_kv][block_tokens][head_dim]    KV element type (head-major, as the store keeps it)
//     V [n_head_kv][block_tokens][head_dim_v]  KV element type
// It does not depend on the store's group size, tiers or where the block lives; export then import gives
// the same bits (F16 values pass through F32 exactly).
#ifndef KVT_KV_BLOCK_IO_H
#define KVT_KV_BLOCK_IO_H

#include <stdint.h>

#include "../base/status.h"
#include "kv.h"
#include "prefix_store.h"

#define KVT_KV_BLOCK_LAYOUT 1u

// Bytes of one block's payload.
int64_t kvt_kv_block_payload_bytes(const kvt_kv *kv);
// Fills id's shape fields (n_layer, heads, dims, kv_type, block_tokens, layout) from kv; the caller
// sets model_fingerprint and arch (the store knows neither).
void kvt_kv_block_identity(const kvt_kv *kv, kvt_prefix_identity *id);
// Copies full block b of seq (seq must hold all of its positions) into dst [payload_bytes].
// KVT_ERR_INVALID_ARG if the block is not full; errors of acquire (a disk read) pass through.
kvt_status kvt_kv_block_export(kvt_kv *kv, int32_t seq, int64_t b, void *dst, kvt_err *err);
// Appends src [payload_bytes] to seq as its block b: seq must hold exactly b*block_tokens positions and
// then holds (b+1)*block_tokens. On error seq is unchanged. Errors of append (budget) pass through.
// The paged store with a host tier under a bounded fast tier takes the block into the host tier
// (kvt_kv_paged_seq_push_copy: a copy, no conversion), from where its own prefetch or the acquire that needs it
// brings it to the fast tier; with an unbounded fast tier, a copy into it; otherwise it is appended (into the
// fast tier, evicting as any append).
kvt_status kvt_kv_block_import(kvt_kv *kv, int32_t seq, int64_t b, const void *src, kvt_err *err);

#endif
