// session.h - persistent KV: save the KV cache of one sequence to a file and
// load it back, so that a long prompt is processed once.
//
// File format (all integers little-endian; "KV session file", version 2):
//   header, 128 bytes:
//     0   char[8]  magic "KVTSESS\0"
//     8   u32      version (2; version 1 fingerprinted only the first 4 KiB of each tensor)
//     12  u32      header bytes (128)
//     16  char[16] architecture name (NUL padded, e.g. "llama")
//     32  u32      n_layer      36 u32 n_head_kv   40 u32 head_dim   44 u32 head_dim_v
//     48  u32      n_vocab      52 u32 n_embd
//     56  u32      KV element type (kvt_type: F16 or F32)
//     60  u32      model fingerprint: CRC32C of every tensor's name, type, shape and all of its
//                  data, then the hyperparameters the forward pass reads (rope base and scale, norm
//                  epsilon, window, ...: kvt_session_model_fingerprint)
//     64  u64      n_tokens     72 u32 CRC32C of the token ids
//     76  char[48] file name of the model it was saved from (NUL padded; for messages only)
//     124 u32      positions per block of the cache it was saved from (0 in files written before it was
//                  recorded): where a sliding-window layer's zeroed rows end (kvt_context_kv_save)
//   token ids: i32 [n_tokens]
//   per layer l = 0 .. n_layer-1:
//     K rows [n_tokens, n_head_kv*head_dim]   KV element type, row after row
//     V rows [n_tokens, n_head_kv*head_dim_v] KV element type
//   u32 CRC32C of every byte before it.
// The rows do not depend on the cache's block size, granularity or tiers: a file saved from the
// contiguous cache loads into the paged store and back.
//
// Loading checks the whole file (size, magic, version, CRC32C) and the model identity, KV type and
// context size before it touches the cache; positions [0, n) of the sequence then hold the saved K/V
// of the longest common prefix of the saved tokens and the caller's prompt (see kvt_context_kv_load).
#ifndef KVT_SESSION_H
#define KVT_SESSION_H

#include <stdint.h>

#include "context.h"

#define KVT_SESSION_MAGIC "KVTSESS"
#define KVT_SESSION_VERSION 2u
#define KVT_SESSION_HEADER_BYTES 128
#define KVT_SESSION_MODEL_NAME 48

// CRC32C fingerprint of a model's tensors (names, types, shapes and every byte of their data), computed
// at the first call (SmolLM2-135M Q4_1, 98 MB: a few ms with SSE4.2) and cached in the model.
uint32_t kvt_session_model_fingerprint(const kvt_model *m);

// Writes positions [0, n_tokens) of seq (n_tokens must equal kvt_context_seq_n_past(ctx, seq))
// with the ids of the tokens at those positions. The file is written to PATH.tmp and renamed. A sliding-window
// layer's blocks wholly before n_tokens - window + 1 (no later query sees them; a paged store has freed them) are
// written as zeros; the header records the block size, so a load knows where they end.
kvt_status kvt_context_kv_save(kvt_context *ctx, int32_t seq, const int32_t *tokens, int64_t n_tokens,
                               const char *path, kvt_err *err);

typedef struct {
    int64_t n_saved;   // tokens in the file
    int64_t n_common;  // length of the common prefix of the saved tokens and the prompt
    int64_t n_loaded;  // positions restored into the sequence (the prefix prefill skips)
} kvt_session_info;

// Restores into seq (which must hold no position) the KV of the first n positions of the file, where
// n = the common prefix of the saved tokens and prompt[0, n_prompt) (all saved tokens when prompt is
// NULL), capped at max_keep (< 0: no cap; generation passes kvt_context_prompt_cacheable(ctx, n_prompt), so that the
// last prompt token is decoded and gives the logits, and under asyncspade the query window's tokens are decoded
// and give its query history: the same selections as without the file). The caller decodes prompt[n_loaded ..]
// afterwards. Without a prompt every saved position is restored, and asyncspade's query history starts empty (its
// selections, and so the logits, differ from those of a run that had decoded the saved tokens). With sliding-window
// layers, a prefix n whose first query (at n) would see a saved row written as zeros (n - window + 1 before the end of
// the zeroed blocks: n shorter than the saved tokens) restores nothing (n_loaded 0): the prompt is recomputed.
// Errors (file named in each): KVT_ERR_IO (open/read), KVT_ERR_FORMAT (not a session file, truncated,
// wrong version), KVT_ERR_CHECKSUM (CRC32C mismatch), KVT_ERR_INVALID_ARG (other model: names the
// field that differs; other KV type; non-empty sequence), KVT_ERR_BUDGET (context too small).
// On error the sequence is left empty.
kvt_status kvt_context_kv_load(kvt_context *ctx, int32_t seq, const char *path, const int32_t *prompt,
                               int64_t n_prompt, int64_t max_keep, kvt_session_info *info, kvt_err *err);

#endif
