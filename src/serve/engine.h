// engine.h - the seam between the HTTP layer and whatever runs the sequences.
//
// The HTTP layer (http.c) turns a request into a job: token ids of the prompt, sampling settings, n
// choices, callbacks. An engine runs jobs and reports every generated token and the end of every
// choice through the callbacks, on its own thread(s). kvt_engine is a table of function pointers so
// that the continuous-batching scheduler of src/sched (issue 12) replaces the first implementation,
// kvt_engine_fcfs_create (one context, one job at a time, first come first served), without a change
// to the HTTP layer.
//
// Contract of every implementation:
//   - submit either refuses the job (returns non-OK; no callback is ever called for it) or accepts it
//     and then calls on_done exactly once, last; after on_done returns the engine never touches the job
//     or its user pointer again. Callbacks of one job are never called concurrently.
//   - on_token returning false ends that choice (finish "stop": the caller saw a stop string, or gave up).
//   - cancel may be called from any thread at any time, also after on_done (then it does nothing); a
//     cancelled job ends soon with on_done(KVT_ENGINE_CANCELLED).
//   - free (after shutdown) cancels what is queued or running, waits for the worker(s) and frees.
#ifndef KVT_ENGINE_H
#define KVT_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../exec/context.h"
#include "../kv/kv.h"
#include "../kv/prefix_store.h"
#include "../model/tokenizer.h"
#include "../sched/sampler.h"
#include "../sparse/sparse.h"
#include "../sched/scheduler.h"

#define KVT_ENGINE_MAX_TOP 20

// Why a choice ended.
typedef enum {
    KVT_FINISH_STOP,   // end-of-generation token, or on_token returned false (stop string)
    KVT_FINISH_LENGTH, // max_tokens, or the end of the context
} kvt_finish;

// How a job ended.
typedef enum { KVT_ENGINE_DONE, KVT_ENGINE_CANCELLED, KVT_ENGINE_FAILED } kvt_engine_outcome;

// One generated token. logprob/top are filled when the job asked for logprobs (natural logarithms of
// the softmax of the model's logits, before sampling's truncation and temperature).
typedef struct {
    int32_t id;
    bool eog;                          // an end-of-generation token: it ends the choice, it has no text
    float logprob;
    int32_t n_top;                     // alternatives, most likely first
    int32_t top_ids[KVT_ENGINE_MAX_TOP];
    float top_logprobs[KVT_ENGINE_MAX_TOP];
} kvt_engine_token;

typedef struct {
    kvt_engine_outcome outcome;
    kvt_err err;                       // outcome FAILED: what went wrong
    int64_t prompt_tokens;             // per choice (the prompt is counted once in usage)
    int64_t cached_tokens;             // prompt tokens whose KV was reused instead of computed
    int64_t completion_tokens;         // over all choices
    bool sparse;                       // decode steps attend sparsely with a selection (quest, asyncspade)
    kvt_sparse_totals sparse_steps;    // with sparse: the job's decode steps over all choices (kvt_sparse_seq_totals_add;
                                       // the worker's times and predicted / fallback counts stay 0)
} kvt_engine_result;

typedef struct {
    // A token of choice `index`; return false to end that choice (finish STOP).
    bool (*on_token)(void *user, int32_t index, const kvt_engine_token *t);
    void (*on_finish)(void *user, int32_t index, kvt_finish why);
    void (*on_done)(void *user, const kvt_engine_result *r);
    void *user;
} kvt_engine_callbacks;

typedef struct {
    const int32_t *prompt;             // copied by submit
    int64_t n_prompt;                  // >= 1, < the context size (kvt_engine_n_ctx)
    int64_t max_tokens;                // per choice; -1: until the end of the context
    kvt_sampler_params sampling;       // choice i samples with seed sampling.seed + i
    int32_t n;                         // choices (>= 1) that continue the same prompt
    bool logprobs;
    int32_t top_logprobs;              // 0..KVT_ENGINE_MAX_TOP alternatives per token
    bool ignore_eos;                   // an end-of-generation token does not end a choice (serve also bans them: http.c)
    bool post_sampling;                // with logprobs: the probabilities of the sampling chain's final distribution
                                       // (kvt_sampler_report; llama-server's post_sampling_probs) instead of the
                                       // model's; n must be 1
} kvt_engine_job;

// Stores of the prefix cache's second level the stats report (a chain of `--kv-cache-dir` and `--kv-remote`: two).
#define KVT_ENGINE_PREFIX_LEVELS 4

// Counters for GET /metrics (totals since start unless said otherwise).
typedef struct {
    int64_t jobs_submitted, jobs_done, jobs_cancelled, jobs_failed, jobs_rejected;
    int64_t queued, running;           // now
    int64_t prompt_tokens, cached_tokens, generated_tokens;
    double prompt_seconds, decode_seconds;
    int64_t n_ctx;                     // positions per sequence
    int32_t n_parallel;                // sequences decoding at once
    int64_t iterations;                // forward passes of the scheduler (0 for fcfs)
    int64_t preemptions, resumes;      // requests swapped out to disk / resumed (totals)
    int64_t restarts;                  // requests started again after a failed pass that could not be repeated
    int64_t preempted;                 // requests swapped out now
    int64_t plans;                     // prefetch plans published to the KV store
    double prefix_attach_seconds;      // scheduler thread time spent giving admitted prompts their cached prefix
    int64_t query_hits, query_tokens;  // asyncspade: admissions that took a kept query window, prompt positions spared
    int64_t query_windows, query_bytes; // asyncspade: query windows the prefix cache holds now, their bytes
    int64_t key_hits, key_tokens;      // quest, asyncspade: admissions given kept key summaries, positions they covered
    int64_t key_sums, key_bytes;       // quest, asyncspade: key summaries the prefix cache keeps now, their bytes
    int64_t key_live;                  // of those copies kept, the ones a running sequence gave for an admission (total)
    kvt_kv_stats kv;                   // the store's counters (as of the last finished job)
    kvt_sparse_totals sparse;          // sparse decode attention's counters (kvt_sparse_totals_get; zeros when off), taken
                                       // with kv
    const char *kv_store;              // the store's name
    int32_t n_prefix;                  // stores of the prefix cache's second level (0: none; 2: dir in front of redis)
    const char *prefix_store[KVT_ENGINE_PREFIX_LEVELS]; // [n_prefix] their names ("dir", "redis"), nearest first
    kvt_prefix_store_stats prefix[KVT_ENGINE_PREFIX_LEVELS]; // [n_prefix] their counters (now)
    // the background fetch of prompts' prefix blocks from the second level (sched engine; prefix_fetch.h)
    int64_t prefix_fetches;            // jobs that waited for a fetch before entering the scheduler
    int64_t prefix_fetch_timeouts;     // of those, entered without it (admission read the store itself)
    int64_t prefix_fetch_budget_stops; // fetches ended early by the staging budget
    int64_t prefix_staged_blocks, prefix_staged_bytes;             // staged in host memory now
    int64_t prefix_staged_blocks_total, prefix_staged_bytes_total; // staged since start
} kvt_engine_stats;

typedef struct kvt_engine kvt_engine;
typedef struct {
    const char *name;
    // KVT_ERR_BUDGET when the queue is full (answer 503), KVT_ERR_INVALID_ARG for a bad job; *id the job.
    kvt_status (*submit)(kvt_engine *e, const kvt_engine_job *job, const kvt_engine_callbacks *cb, uint64_t *id,
                         kvt_err *err);
    void (*cancel)(kvt_engine *e, uint64_t id);
    void (*stats)(kvt_engine *e, kvt_engine_stats *out);
    int64_t (*n_ctx)(const kvt_engine *e);
    // Refuses new jobs from now on; cancel_running also cancels the queued and running ones.
    void (*shutdown)(kvt_engine *e, bool cancel_running);
    void (*free)(kvt_engine *e);
} kvt_engine_ops;

struct kvt_engine {
    const kvt_engine_ops *ops;
};

static inline kvt_status kvt_engine_submit(kvt_engine *e, const kvt_engine_job *job, const kvt_engine_callbacks *cb,
                                           uint64_t *id, kvt_err *err) {
    return e->ops->submit(e, job, cb, id, err);
}
static inline void kvt_engine_cancel(kvt_engine *e, uint64_t id) { e->ops->cancel(e, id); }
static inline void kvt_engine_stats_get(kvt_engine *e, kvt_engine_stats *out) { e->ops->stats(e, out); }
static inline int64_t kvt_engine_n_ctx(const kvt_engine *e) { return e->ops->n_ctx(e); }
static inline void kvt_engine_shutdown(kvt_engine *e, bool cancel_running) { e->ops->shutdown(e, cancel_running); }
static inline void kvt_engine_free(kvt_engine *e) {
    if (e) e->ops->free(e);
}

// What every engine's submit checks first: a prompt of 1 .. n_ctx - 1 tokens, n >= 1, 0..KVT_ENGINE_MAX_TOP
// alternatives (KVT_ERR_INVALID_ARG naming the field otherwise). On success *prompt is a copy of the prompt
// (free() it), KVT_ERR_NOMEM if it cannot be made.
kvt_status kvt_engine_job_accept(const kvt_engine_job *job, int64_t n_ctx, int32_t **prompt, kvt_err *err);

// What every engine's submit checks under its lock: KVT_ERR_BUDGET when the engine is stopping or when
// n_waiting jobs (queued, not yet running) already fill max_queue; KVT_OK otherwise.
kvt_status kvt_engine_job_admit(bool stopping, int64_t n_waiting, int64_t max_queue, kvt_err *err);

// The first engine: one kvt_context (ctx, owned by the engine from now on, also on error) on one worker
// thread; jobs run one at a time in arrival order, their n choices one after the other. At most
// max_queue jobs wait (submit beyond: KVT_ERR_BUDGET). The KV of the previous job's prompt stays in the
// context: a job whose prompt shares a prefix with it reuses that prefix (cached_tokens), with the
// micro-batches aligned to n_ubatch so that the logits equal those of a full prefill bit for bit (see
// kvt_generate_cached). tok: borrowed, for end-of-generation tokens.
kvt_status kvt_engine_fcfs_create(kvt_context *ctx, const kvt_tokenizer *tok, int64_t n_ubatch, int32_t max_queue,
                                  kvt_engine **out, kvt_err *err);

// The continuous-batching engine: src/sched's scheduler (sp: n_parallel, token budget, prefix cache, preemption)
// over ctx (owned from now on, also on error; the paged store for n_parallel > 1, the prefix cache and
// preemption) on one scheduler thread. Choices of one job are forks of its prompt's sequence. At most max_queue
// jobs wait for admission (submit beyond: KVT_ERR_BUDGET). tok: borrowed, for end-of-generation tokens.
kvt_status kvt_engine_sched_create(kvt_context *ctx, const kvt_tokenizer *tok, const kvt_sched_params *sp,
                                   int32_t max_queue, kvt_engine **out, kvt_err *err);

// Fills t->logprob and the k most likely alternatives (natural-log softmax of logits [n_vocab]) of token t->id;
// scratch: [n_vocab] floats.
void kvt_engine_token_logprobs(const float *logits, int32_t n_vocab, int32_t k, float *scratch, kvt_engine_token *t);
// The same from a sampler's report of the draw (kvt_engine_job.post_sampling): logarithms of its probabilities.
void kvt_engine_token_report(const kvt_sampler_report *r, kvt_engine_token *t);

#endif
