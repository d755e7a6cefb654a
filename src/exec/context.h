// context.h - an inference context: a model, a KV cache, a thread pool and
// the scratch buffers of the CPU forward pass.
#ifndef KVT_CONTEXT_H
#define KVT_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../base/threadpool.h"
#include "../kv/kv.h"
#include "../model/model.h"
#include "../sparse/sparse_params.h"
#include "gpu_layers.h"

typedef struct {
    int64_t n_ctx;        // maximum positions (0: the model's training context)
    int32_t n_threads;    // 0: physical cores
    int64_t n_ubatch;     // tokens per forward micro-batch (bounds activation memory)
    kvt_type kv_type;     // F16 (default, as llama.cpp) or F32
    int64_t kv_block;     // positions per KV block
    // KV tiers (kv_paged.h). Without any of them (the defaults) the whole cache is one contiguous
    // allocation in T0, as in the foundation; with any, the tiered paged store holds it.
    int32_t kv_group;          // KV heads per shard: 0 = layer-wise (all), 1 = head-wise
    int64_t kv_fast_bytes;     // T0 budget in bytes (0: unlimited)
    int64_t kv_host_bytes;     // T1 budget in bytes (0: no host tier)
    const char *kv_disk_dir;   // T2 directory (NULL: no disk tier); borrowed
    int64_t kv_disk_max;       // T2 budget in bytes (0: unlimited)
    const char *kv_evict;      // "lru", "lfu", "lookahead" (NULL: lru)
    int32_t kv_prefetch;       // blocks fetched ahead of use (-1: default 16)
    int32_t kv_copy_threads;   // copy threads at work at once on memory copies (kvt_kv_paged_params.io_mem_threads;
                               // 0: the online CPUs less n_threads, none where that is 0; -1: none; with none
                               // the compute threads run the queued memory copies themselves, between their
                               // blocks and while they wait in the pool)
    bool kv_keep;              // keep the disk file (else unlinked as soon as it is created)
    bool kv_timing;            // the paged store times its readers' path (kvt_kv_paged_params.timing)
    bool kv_paged;             // use the paged store even without tier flags
    int64_t kv_fault_read_at;  // tests: the n-th disk read fails (0: never)
    // The model the settings above were planned for (`--plan FILE`; plan_shape "": no plan). kvt_context_init
    // refuses a model whose kvt_hparams_shape_str differs from plan_shape, naming both.
    const char *plan_file;     // the plan file, for messages (borrowed)
    char plan_model[128];      // the model it was made for (a GGUF path or a named shape)
    char plan_shape[192];      // that model's kvt_hparams_shape_str
    // Progress of long decodes (a prompt's prefill): called after each micro-batch of a kvt_decode /
    // kvt_decode_seq call of more than one micro-batch, with the call's tokens done and its total. NULL: none.
    // The library never prints: the caller shows it (the CLI, on a terminal).
    void (*progress)(void *user, int64_t done, int64_t total);
    void *progress_user;
    // Sparse decode attention (src/sparse/sparse.h; mode off: the dense path). Its key summaries are taken
    // from kv_fast_bytes when that is set.
    kvt_sparse_params sparse;
    // The last n_gpu_layers layers run on CUDA device 0 (llama.cpp's -ngl; n_layer: all; more: the output norm and
    // logits too; 0: none), with their KV in VRAM (src/exec/gpu_layers.h; within kv_vram_bytes below, the rest in
    // pinned host memory); gpu_output puts the output norm and the
    // logits there whatever n_gpu_layers (a plan's split: its GPU units are the last layers and the output).
    // kvt_context_init fails, naming why, without a usable device.
    int32_t n_gpu_layers;
    bool gpu_output;
    // VRAM budget of the device layers' KV in bytes (0: unlimited): the blocks past it live in pinned host memory,
    // fetched ahead layer by layer or read there by attention (gpu_kv.h); evicted by kv_evict's policy. Exact:
    // the logits do not depend on it.
    int64_t kv_vram_bytes;
    // Pinned host budget of the device layers' KV in bytes (0: unlimited), with kv_disk_dir: the blocks past it go to
    // a disk file there (T2) and come back through pinned host memory when a fetch needs them (gpu_kv.h). Exact.
    int64_t kv_pinned_bytes;
    // The device KV's copies shorter than this (bytes; 0: 1 MiB) are gathered into batched copy kernels, one transfer
    // for many blocks whatever kv_block; < 0: every block copy its own DMA (gpu_kv.h). Exact either way.
    int64_t kv_copy_min;
    // The device layers' decode micro-batches (at most KVT_CUDA_MMV_MAX_ROWS rows, every KV block in VRAM: no
    // kv_vram_bytes / kv_pinned_bytes) captured and launched as one CUDA graph, updated in place step to step
    // (gpu_layers.h). Off by default until verified on a device; other micro-batches run as before.
    bool gpu_graphs;
    // The device KV's disk tier (kv_pinned_bytes) with its I/O on the host between layers after synchronizing both
    // streams (the first version, to compare); false (default): on a disk thread overlapping the kernels. Exact.
    bool kv_disk_sync;
} kvt_context_params;

// True if p asks for the paged store (any tier flag, granularity or kv_paged).
bool kvt_context_params_paged(const kvt_context_params *p);

kvt_context_params kvt_context_params_default(void);

typedef struct kvt_context kvt_context;

// The model is borrowed (must outlive the context). KVT_ERR_INVALID_ARG for inconsistent KV flags (an empty
// kv_disk_dir, kv_disk_max without kv_disk_dir) and for a plan made for another model (plan_shape).
kvt_status kvt_context_init(const kvt_model *model, const kvt_context_params *p, kvt_context **out, kvt_err *err);
void kvt_context_free(kvt_context *ctx);

// Runs tokens at positions [n_past, n_past + n) of the sequence and appends
// their K/V. With all_logits, logits of every token are kept ([n, n_vocab]),
// else only of the last one ([1, n_vocab]). Positions past n_ctx give
// KVT_ERR_BUDGET and change nothing.
kvt_status kvt_decode(kvt_context *ctx, const int32_t *tokens, int64_t n, bool all_logits, kvt_err *err);
// Sequences (paged store only; the contiguous cache holds sequence 0 alone).
// kvt_decode_seq runs tokens at positions [n_past(seq), n_past(seq) + n) of seq.
// fork gives *dst every position of src, sharing KV blocks by reference (the
// partly filled last block is copied on write); free releases a forked seq.
kvt_status kvt_decode_seq(kvt_context *ctx, int32_t seq, const int32_t *tokens, int64_t n, bool all_logits,
                          kvt_err *err);
// kvt_decode_seq for (a part of) a prompt. Sparse decode attention (src/sparse/) acts on decode steps only: a call
// of one token is a decode step, of more a prompt; here every token is a prompt's, however few, so that a prompt
// split into parts (a prompt cache's remainder, chunks) attends as it does in one call.
kvt_status kvt_decode_prompt(kvt_context *ctx, int32_t seq, const int32_t *tokens, int64_t n, bool all_logits,
                             kvt_err *err);
// Embeddings: runs tokens at positions [n_past(seq), n_past(seq) + n) of seq as a prompt and writes each token's
// hidden state after the output norm (the LM head's input; the LM head is not run) into embd, caller-owned
// [n, n_embd] f32. The sequence is left as it was (its KV, n_past, sparse state), on success and on error, and the
// logits of an earlier call are no longer valid. A row's values do not depend on n_ubatch or the thread count (each
// row's operations are its own: matmul.h). KVT_ERR_BUDGET past n_ctx; KVT_ERR_UNSUPPORTED with the output on a GPU.
// cancel (NULL: none) is asked before each micro-batch (n_ubatch tokens) with cancel_user; when it answers true the
// call stops there with KVT_ERR_CANCELLED (the rows written so far are partial; the sequence as it was).
typedef bool (*kvt_cancel_fn)(void *user);
kvt_status kvt_decode_embd(kvt_context *ctx, int32_t seq, const int32_t *tokens, int64_t n, float *embd,
                           kvt_cancel_fn cancel, void *cancel_user, kvt_err *err);
// Batched decode across sequences: token i is appended to sequence seqs[i] at its next position
// (n_past(seqs[i])); the sequences must be distinct. One forward pass serves the whole batch (the
// weights are read once for all n tokens), attention reads each sequence's own KV. Logits of every
// token: [n, n_vocab] (row i for token i). On error no sequence changes.
kvt_status kvt_decode_batch(kvt_context *ctx, const int32_t *seqs, const int32_t *tokens, int64_t n, kvt_err *err);
// A run of consecutive tokens of one sequence in a mixed batch (kvt_decode_runs): a decode step (n = 1) or a
// chunk of a prompt (n > 1), appended at positions [n_past(seq), n_past(seq) + n).
typedef struct {
    int32_t seq;
    const int32_t *tokens; // [n], borrowed
    int64_t n;             // >= 1
    bool logits;           // keep the logits of the run's last token
    bool prompt;           // a chunk of a prompt, even of one token (sparse attention: dense; kvt_decode_prompt).
                           // Runs of more than one token are prompt chunks anyway
} kvt_batch_run;
// Mixed prefill/decode batch: every run of runs[0..n_runs) (distinct sequences) in one pass over the weights,
// split into micro-batches of n_ubatch rows (a run may span two). Logits: one row per run with logits set, in
// the order of the runs ([n_with_logits, n_vocab], kvt_context_logits). Batch-invariant: a run's logits and KV
// are bit for bit those it gets alone (kvt_decode_seq), whatever the runs beside it. On error no sequence changes.
kvt_status kvt_decode_runs(kvt_context *ctx, const kvt_batch_run *runs, int64_t n_runs, kvt_err *err);
kvt_status kvt_context_seq_fork(kvt_context *ctx, int32_t src, int32_t *dst, kvt_err *err);
void kvt_context_seq_free(kvt_context *ctx, int32_t seq);
// Positions held by seq, or -1 if it does not exist.
int64_t kvt_context_seq_n_past(const kvt_context *ctx, int32_t seq);
void kvt_context_seq_truncate(kvt_context *ctx, int32_t seq, int64_t n_keep);
// Declares that the KV cache of seq holds positions [0, n) written directly through kvt_context_kv (a
// restored session, src/exec/session.h). KVT_ERR_BUDGET if n exceeds n_ctx.
kvt_status kvt_context_seq_set_n_past(kvt_context *ctx, int32_t seq, int64_t n, kvt_err *err);
// Logits of the last kvt_decode: [n_out, n_vocab] f32, valid until the next call. Where the device computed them
// (the output on a CUDA stage) they stay in VRAM until this call fetches them (once); if that fails, the rows are NaN
// (the callers' finiteness checks catch it; kvt_context_argmax returns the device's message).
const float *kvt_context_logits(kvt_context *ctx);
// The greedy ids of those rows: ids[r] = kvt_argmax of row r ([n_out]; src/sched/sampler.h: ties to the lowest id),
// *finite false if any row holds a NaN or an infinity (then fetch the logits to diagnose: kvt_check_logits). Where the
// device kept the logits, only the ids cross to the host (the argmax runs there); the logits can still be fetched.
// KVT_ERR_IO with the device's message when it fails.
kvt_status kvt_context_argmax(kvt_context *ctx, int32_t *ids, bool *finite, kvt_err *err);
int64_t kvt_context_n_past(const kvt_context *ctx);
int64_t kvt_context_n_ctx(const kvt_context *ctx);
int kvt_context_n_threads(const kvt_context *ctx);
// The compute pool, for measurements that must run on the engine's own threads (`kvtier bench`'s token-paired DRAM
// probe): jobs may be run on it only between decode calls, from the thread that calls them; the context owns it.
kvt_threadpool *kvt_context_pool(kvt_context *ctx);
// The compute pool's counts (kvt_threadpool_get_stats: all zero unless KVT_POOL_STATS=1 was set at kvt_context_init).
void kvt_context_pool_stats(const kvt_context *ctx, kvt_threadpool_stats *out);
// Forgets positions >= n_keep.
void kvt_context_truncate(kvt_context *ctx, int64_t n_keep);
const kvt_model *kvt_context_model(const kvt_context *ctx);
kvt_kv *kvt_context_kv(kvt_context *ctx);
// The serving scheduler's plan of the next iterations (kvt_kv_paged_set_plan's contract) to the paged store and to the
// device layers' KV (kvt_gpu_kv_set_plan: their prefetch and eviction follow it). Exact: only the order of copies.
void kvt_context_set_plan(kvt_context *ctx, const int32_t *seqs, int64_t n);
// Transfer accounting of the KV cache (see kv.h).
void kvt_context_kv_stats(kvt_context *ctx, kvt_kv_stats *out);
// The device layers' holdings and transfers (gpu_layers.h); false (and *out zeroed) without device layers.
bool kvt_context_gpu_stats(const kvt_context *ctx, kvt_gpu_layers_stats *out);
// The sparse decoding state (NULL when sparse mode is off): its step records (kvt_sparse_steps).
struct kvt_sparse *kvt_context_sparse(kvt_context *ctx);
// Last tokens of a prompt that a prompt or prefix cache must leave to be computed, so that the sequence decodes
// as without the cache (1: the last token's logits; asyncspade: its query window, kvt_sparse_prompt_tail).
int64_t kvt_context_prompt_tail(const kvt_context *ctx);
// Positions of a prompt of n_prompt tokens such a cache may give it: n_prompt - kvt_context_prompt_tail, at least 0.
int64_t kvt_context_prompt_cacheable(const kvt_context *ctx, int64_t n_prompt);
// Bytes of scratch (activations) and of the KV cache.
int64_t kvt_context_scratch_bytes(const kvt_context *ctx);
int64_t kvt_context_kv_bytes(const kvt_context *ctx);
// Positions per KV block, and bytes of K and V of one such block over every layer (what one more block of a
// sequence costs the store).
int64_t kvt_context_kv_block(const kvt_context *ctx);
int64_t kvt_context_kv_block_bytes(const kvt_context *ctx);
// KV bytes, in whole blocks of the store's shards, that a decode step of a sequence holding n positions reads at most:
// every block of a dense layer, a sliding-window layer's window, and under sparse decode attention (quest,
// asyncspade) a sparse layer's selected blocks (kvt_sparse_step_blocks per KV head, at most the shards' blocks). The
// working set a decoding sequence keeps in the fast tier (the scheduler's admission and preemption under sparse).
int64_t kvt_context_decode_bytes(const kvt_context *ctx, int64_t n);
// True when decode steps attend sparsely with a selection (quest, asyncspade; not the oracle, which reads every key).
bool kvt_context_sparse_selects(const kvt_context *ctx);
// Whether a pass (kvt_decode_seq, _batch, _runs) that failed gives, run again, what it would have given the first
// time ("on error no sequence changes"): the KV and the sparse state are taken back (asyncspade's query history,
// hysteresis and next selection: kvt_sparse_seq_undo); false only under asyncspade with --sparse-rerank-resid, whose
// calibration counts the failed pass's calls.
bool kvt_context_pass_repeatable(const kvt_context *ctx);

#endif
