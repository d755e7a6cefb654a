// prefix_fetch.h - background reads of prompts' prefix blocks from the prefix cache's second level (a cache
// directory, Redis, or both chained), so that admission imports them from memory instead of waiting on the store.
//
// The serving engine (src/serve/engine_sched.c) starts a fetch when a job arrives: the keys of the prompt's full
// blocks from the first one the memory cache lacks (kvt_prefix_cache_probe) are looked up on the fetch's own
// thread, up to 8 at a time (get_many), in order until the first miss; each hit's payload is staged in host
// memory under a byte budget. When the job is done (kvt_prefix_fetch_done) the engine hands its staged copies to
// the scheduler (kvt_prefix_staged, prefix_cache.h), whose admission imports them at memcpy speed, and releases
// them once admitted. A fetch still in flight after the engine's bound is abandoned (released): admission then
// reads the store synchronously as without a fetch. Misses, timeouts, unreachable servers are misses, as in
// prefix_store.h; a budget that is used up ends a fetch early (the blocks after it are read at admission).
//
// Threading: one fetch thread per kvt_prefix_fetch; start/done/result/release/stats from any thread (one
// mutex); on_ready runs on the fetch thread, no lock held.
#ifndef KVT_PREFIX_FETCH_H
#define KVT_PREFIX_FETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "prefix_cache.h"

typedef struct {
    int64_t budget_bytes;         // payload bytes staged at once at most, over every job not yet released (> 0)
    void (*on_ready)(void *user); // a job completed (may be NULL); called on the fetch thread
    void *user;
} kvt_prefix_fetch_params;

typedef struct {
    int64_t jobs;                   // fetches started
    int64_t blocks, bytes;          // blocks / payload bytes staged (totals)
    int64_t staged_blocks, staged_bytes; // held now (jobs not yet released, bytes reserved for reads in flight)
    int64_t budget_stops;           // fetches ended early by the budget
    int64_t abandoned;              // jobs released before they completed
} kvt_prefix_fetch_stats;

typedef struct kvt_prefix_fetch kvt_prefix_fetch;
typedef struct kvt_prefix_fetch_job kvt_prefix_fetch_job;

// store: borrowed, outlives the fetch. block_tokens: the KV store's. KVT_ERR_INVALID_ARG for a budget <= 0,
// KVT_ERR_NOMEM when the thread cannot start.
kvt_status kvt_prefix_fetch_init(kvt_prefix_store *store, int64_t block_tokens, const kvt_prefix_fetch_params *p,
                                 kvt_prefix_fetch **out, kvt_err *err);
// Waits for the lookup in flight, frees every job (released or not).
void kvt_prefix_fetch_free(kvt_prefix_fetch *f);

// Queues the lookup of blocks [b0, nb) of the prompt tokens[0, nb * block_tokens) (its keys are computed now:
// tokens is not kept). NULL when out of memory or b0 >= nb (the caller goes without).
kvt_prefix_fetch_job *kvt_prefix_fetch_start(kvt_prefix_fetch *f, const int32_t *tokens, int64_t b0, int64_t nb);
// Whether the lookup has ended (hits staged up to a miss, the last block, or the budget).
bool kvt_prefix_fetch_done(kvt_prefix_fetch *f, const kvt_prefix_fetch_job *j);
// The staged blocks of a done job (release and arg left NULL), valid until kvt_prefix_fetch_release.
void kvt_prefix_fetch_result(kvt_prefix_fetch *f, const kvt_prefix_fetch_job *j, kvt_prefix_staged *out);
// Frees the job and its staged copies; a job still queued is dropped, one in flight is abandoned (the thread frees
// it when its lookup returns). NULL: nothing.
void kvt_prefix_fetch_release(kvt_prefix_fetch *f, kvt_prefix_fetch_job *j);
void kvt_prefix_fetch_stats_get(kvt_prefix_fetch *f, kvt_prefix_fetch_stats *out);

#endif
