// scheduler.h - iteration-level continuous batching over one kvt_context (issue 12).
//
// Requests (prompt ids, sampling, n choices) wait in arrival order. Each kvt_sched_step is one iteration:
// one forward pass (kvt_decode_runs) with the next token of every running choice plus chunks of admitted
// prompts under a per-iteration token budget (chunked prefill, first admitted first). At most n_parallel
// sequences run; requests join and leave between iterations; admission is first come, first served (the
// oldest waiting request is admitted first and nothing overtakes it, so nothing starves).
//
// A request's prompt is computed once in one sequence; its n choices are forks of it (kvt_context_seq_fork,
// sharing the prompt's blocks). Choice i samples with its own sampler, seeded sampling.seed + i, that has
// seen every prompt token (as kvt_generate does). The forward pass is batch-invariant bit for bit, so with
// temperature 0 every request's ids equal those of kvt_generate alone on the same prompt whatever the other
// requests, arrival times, n_parallel and token budget.
//
// Prefix cache (prefix_cache.h, optional): an admitted prompt gets the cached full blocks it starts with by
// reference (cached_tokens); its full blocks are registered once it is prefilled; when the store is full
// the cache is trimmed before anything else gives way.
//
// Preemption by KV budget (paged store with a disk tier): when the blocks the running sequences hold plus
// the next block of each exceed what the fast and host tiers hold, the latest-admitted running request is
// preempted by swap (kvt_kv_paged_seq_demote to disk: its KV is kept, not recomputed); it resumes, exactly
// where it was, before any new request is admitted, once its blocks fit again. Each iteration the scheduler
// publishes the sequences of the next iterations (kvt_kv_paged_set_plan) so that the store prefetches their
// blocks and evicts those whose owner runs latest (tierkv.txt Alg. 1).
//
// Threading: one thread calls everything (the engine of src/serve/engine_sched.c owns that thread);
// callbacks run on it, inside kvt_sched_step or kvt_sched_cancel/kvt_sched_free.
#ifndef KVT_SCHEDULER_H
#define KVT_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../exec/context.h"
#include "../kv/prefix_store.h"
#include "../sparse/sparse.h"
#include "prefix_cache.h"
#include "../model/tokenizer.h"
#include "sampler.h"

// How a choice ended.
typedef enum {
    KVT_SCHED_STOP,      // end-of-generation token, or on_token returned false
    KVT_SCHED_LENGTH,    // max_tokens or the end of the context
} kvt_sched_finish;

// How a request ended.
typedef enum { KVT_SCHED_DONE, KVT_SCHED_CANCELLED, KVT_SCHED_FAILED } kvt_sched_outcome;

typedef struct {
    kvt_sched_outcome outcome;
    kvt_err err;                 // FAILED: why
    int64_t prompt_tokens;       // the prompt's length
    int64_t cached_tokens;       // prompt positions given by the prefix cache
    int64_t computed_tokens;     // prompt positions computed (less than prompt - cached for one cancelled or failed in
                                 // its prompt; 0 for one that never ran)
    int64_t completion_tokens;   // over all choices
    bool sparse;                 // decode steps attend sparsely with a selection (kvt_context_sparse_selects)
    kvt_sparse_totals sparse_steps; // with sparse: the request's decode steps over all choices (kvt_sparse_seq_totals_add;
                                 // the worker's times and predicted / fallback counts stay 0)
} kvt_sched_result;

// Events of request `req` (user: the request's user pointer). on_token: token id of choice index, sampled
// from logits [n_vocab] (valid during the call); return false to end that choice (KVT_SCHED_STOP).
// on_finish once per choice that ends by itself; on_done exactly once per accepted request, last.
typedef struct {
    bool (*on_token)(void *user, int32_t index, int32_t id, const float *logits);
    void (*on_finish)(void *user, int32_t index, kvt_sched_finish why);
    void (*on_done)(void *user, const kvt_sched_result *r);
} kvt_sched_callbacks;

typedef struct {
    int32_t n_parallel;          // sequences running at most (a request of n choices takes n), >= 1
    int64_t token_budget;        // rows of one iteration (decode rows + prefill chunks); raised to n_parallel + 1
    bool prefix_cache;           // reuse full prompt blocks (needs the paged store)
    int64_t prefix_max_blocks;   // see kvt_prefix_cache_params (0: bounded by the store)
    int64_t prefix_query_bytes;  // asyncspade's query windows the prefix cache keeps (kvt_prefix_cache_params.query_bytes;
                                 // default KVT_PREFIX_QUERY_BYTES_DEFAULT)
    int64_t prefix_key_bytes;    // quest / asyncspade key summaries the prefix cache keeps as sequences end
                                 // (kvt_prefix_cache_params.key_bytes; default KVT_PREFIX_KEY_BYTES_DEFAULT)
    kvt_prefix_store *prefix_store; // second level of the prefix cache (borrowed, may be NULL)
    bool preempt;                // preemption by swap when fast + host are full (needs a disk tier)
    int32_t plan_iters;          // iterations ahead published with kvt_kv_paged_set_plan (0: no plan)
    // the serving engine's background fetch from prefix_store (src/serve/engine_sched.c; the scheduler itself does
    // not read these): bytes of blocks staged at once (0: no background fetch, admission reads the store), and how
    // long a job waits for its fetch before admission reads the store itself
    int64_t prefix_fetch_bytes;
    int32_t prefix_fetch_wait_ms;
    // room that kvt_sched_warm keeps made and faulted in ahead of use in each of the store's memory tiers
    // (kvt_kv_paged_warm; with a prefix cache every layer's, a sliding-window layer's too, since the cache keeps its
    // blocks), and sparse key summary buffers pooled (kvt_sparse_warm): positions of one sequence, -1 (default) the
    // context's n_ctx, 0 none; and at most warm_max_bytes of each (default KVT_SCHED_WARM_MAX_DEFAULT; -1 no bound)
    int64_t warm_positions;
    int64_t warm_max_bytes;
} kvt_sched_params;

#define KVT_SCHED_WARM_MAX_DEFAULT ((int64_t)512 << 20) // bytes: a long context of a large model is not all warmed
kvt_sched_params kvt_sched_params_default(void);

typedef struct {
    int64_t iterations;          // forward passes
    int64_t decode_rows, prefill_rows; // rows of those passes
    int64_t waiting, running, preempted; // now: requests waiting, sequences running, requests swapped out
    int64_t preemptions, resumes;        // totals
    int64_t cached_tokens;       // prompt positions reused from the prefix cache
    int64_t prefix_trimmed;      // cached blocks dropped because the store was full
    int64_t restarts;            // requests started again after a failed pass that could not be repeated
                                 // (kvt_context_pass_repeatable: asyncspade with --sparse-rerank-resid)
    int64_t plans;               // plans published
    int64_t query_hits, query_tokens; // admissions whose prefix went past the prompt's last window + 1 positions through
                                 // a query window, and the prompt positions that spared (kvt_prefix_cache_stats)
    int64_t query_windows, query_bytes; // query windows the prefix cache holds now, their bytes
    int64_t key_hits, key_tokens; // admissions given kept key summaries, and the positions they covered (not read back)
    int64_t key_sums, key_bytes;  // kept key summaries the prefix cache holds now, their bytes
    int64_t key_live;            // of the copies kept, those a running sequence gave for an admission (kvt_prefix_cache_stats)
    double attach_ms;            // time admission spent giving prompts their cached prefix (prefix-cache attach:
                                 // references, imports, and any second-level store reads it waited for)
} kvt_sched_stats;

typedef struct {
    const int32_t *prompt;       // copied
    int64_t n_prompt;            // 1 .. n_ctx - 1
    int64_t max_tokens;          // per choice; -1: to the end of the context
    kvt_sampler_params sampling; // choice i: seed sampling.seed + i
    int32_t n;                   // choices, >= 1
    bool stop_at_eog;            // an end-of-generation token (tok) ends a choice
    void *user;                  // passed to the callbacks
} kvt_sched_request;

typedef struct kvt_sched kvt_sched;

// ctx and tok borrowed (ctx must hold only sequence 0, empty; the scheduler owns every other sequence). The
// prefix cache and preemption need the paged store (KVT_ERR_INVALID_ARG otherwise); preemption without a disk
// tier is off.
kvt_status kvt_sched_init(kvt_context *ctx, const kvt_tokenizer *tok, const kvt_sched_params *p,
                          const kvt_sched_callbacks *cb, kvt_sched **out, kvt_err *err);
// Cancels what is waiting or running (on_done CANCELLED) and frees.
void kvt_sched_free(kvt_sched *s);
// Queues a request; *id names it. KVT_ERR_INVALID_ARG for a bad request (no callback then).
kvt_status kvt_sched_submit(kvt_sched *s, const kvt_sched_request *r, uint64_t *id, kvt_err *err);
// submit, with prefix blocks read beforehand from the prefix cache's second level (prefix_fetch.h; NULL: none):
// admission imports them from these copies (kvt_prefix_cache_attach_staged) instead of asking the store. staged
// is borrowed until the scheduler calls staged->release(staged->arg): once, right after admission, or when the
// request ends unadmitted (cancel, free); not at all when submit fails.
kvt_status kvt_sched_submit_staged(kvt_sched *s, const kvt_sched_request *r, const kvt_prefix_staged *staged,
                                   uint64_t *id, kvt_err *err);
// Full blocks of a prompt of n_prompt tokens the prefix cache may give it: those before its last
// kvt_context_prompt_tail positions (computed for their logits, and under asyncspade for its query window).
int64_t kvt_sched_prefix_blocks(const kvt_sched *s, int64_t n_prompt);
// Of those (kvt_sched_prefix_blocks), the ones the prefix cache holds in memory now (-1: no prefix cache): a fetch
// from the second level starts after them.
int64_t kvt_sched_prefix_probe(const kvt_sched *s, const int32_t *prompt, int64_t n_prompt);
// Ends request id now (on_done CANCELLED, from within this call); unknown or finished ids: nothing.
void kvt_sched_cancel(kvt_sched *s, uint64_t id);
// One iteration. *rows: rows of its forward pass (0: nothing to do). A failure of the pass ends the requests
// in it with FAILED (and is returned); the scheduler stays usable.
kvt_status kvt_sched_step(kvt_sched *s, int64_t *rows, kvt_err *err);
// True when nothing waits or runs.
bool kvt_sched_idle(const kvt_sched *s);
// One step of warming memory ahead of use with params.warm_positions and warm_max_bytes: the store's
// (kvt_kv_paged_warm), then, once it has nothing more to do, the sparse key summaries' pool (kvt_sparse_warm): for a
// caller with nothing to run (kvt_sched_idle), e.g. the serving engine before it sleeps. One arena chunk (8 MiB) or one
// summary buffer at most; returns true when it made one (call again while still idle), false when there is nothing
// more to warm.
bool kvt_sched_warm(kvt_sched *s);
void kvt_sched_stats_get(const kvt_sched *s, kvt_sched_stats *out);

#endif
