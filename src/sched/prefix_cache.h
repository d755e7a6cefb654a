// prefix_cache.h - the serving scheduler's prefix cache (issue 12): blocks of prompts, shared by reference (full
// blocks; and, without sparse attention, a prompt's partial last block, shared cut to the positions that match).
//
// Every full block of a prompt is keyed by a chain hash (kvt_prefix_key_next) of its token ids and the key
// of the block before it, so a key names a whole prefix. Cached blocks live in the context's paged KV store
// like any other: a request whose prompt starts with cached blocks gets them by reference (no copy, no
// compute), and cached blocks nobody runs on move down the tiers (fast -> host -> disk) under the store's
// eviction instead of being dropped. Only when the store is full are cached prefixes dropped, least recently
// used first (kvt_prefix_cache_trim). With a second-level store (prefix_store.h: `--kv-cache-dir`, Redis) new
// full blocks are also written there, and a lookup that misses in memory imports the blocks it finds there.
//
// Exactness: prefill and decode give the KV of a position bit for bit whatever the batch and micro-batch
// (issue 11 section 6), so a reused block equals the one the request would have computed.
//
// Threading: one thread (the scheduler's) calls everything.
#ifndef KVT_PREFIX_CACHE_H
#define KVT_PREFIX_CACHE_H

#include <stdint.h>

#include "../base/status.h"
#include "../exec/context.h"
#include "../kv/prefix_store.h"

// Key of the block holding tokens[0, n) (n = block_tokens ids) after the block keyed prev (NULL: the
// first block). Deterministic across processes and machines (no seed, no pointer).
kvt_block_key kvt_prefix_key_next(const kvt_block_key *prev, const int32_t *tokens, int64_t n);

// Default of kvt_prefix_cache_params.query_bytes: 64 MiB (SmolLM2-135M's window of 17 queries is 1.2 MB).
#define KVT_PREFIX_QUERY_BYTES_DEFAULT ((int64_t)64 << 20)
// Default of kvt_prefix_cache_params.key_bytes: 512 MiB (SmolLM2-135M's asyncspade key copies of 8192 positions are
// 48.6 MB; Gemma 3 270M's of 32768, 26 MB).
#define KVT_PREFIX_KEY_BYTES_DEFAULT ((int64_t)512 << 20)

typedef struct {
    int64_t max_blocks;       // blocks the cache may hold beyond those of running sequences (0: bounded only
                              // by the store's tiers, see kvt_prefix_cache_trim)
    kvt_prefix_store *store;  // second level (borrowed, may be NULL)
    int64_t query_bytes;      // asyncspade: bytes of query windows kept at prompt ends (kvt_prefix_cache_keep_queries)
                              // at most, least recently used dropped first; 0: none kept
    int64_t key_bytes;        // quest, asyncspade: bytes of sequences' key summaries kept as they end
                              // (kvt_prefix_cache_keep_keys) at most, least recently used dropped first; 0: none kept
} kvt_prefix_cache_params;

kvt_prefix_cache_params kvt_prefix_cache_params_default(void);

typedef struct {
    int64_t lookups;          // attach calls
    int64_t hit_tokens;       // positions given by reference from memory
    int64_t store_hit_tokens; // positions imported from the second-level store (staged copies included)
    int64_t staged_tokens;    // of those, positions imported from copies staged beforehand (kvt_prefix_staged)
    int64_t blocks;           // distinct blocks the cache references now
    int64_t inserted, dropped; // blocks registered / released by trim since init
    int64_t query_windows, query_bytes; // asyncspade query windows held now, and their bytes
    int64_t query_hits;       // attach calls that gave positions past kvt_context_prompt_cacheable through a window
    int64_t query_tokens;     // positions those calls gave past it (prompt positions not recomputed)
    int64_t key_sums, key_bytes; // quest, asyncspade: kept key summaries held now, and their bytes
    int64_t key_hits;         // attach calls that gave a sequence kept key summaries
    int64_t key_tokens;       // positions those calls gave summaries of (keys not read back from the store)
    int64_t key_live;         // copies a running sequence gave for an attach (before it ended) since init
    int64_t part_hits;        // attach calls that gave positions of a partial block (copied, see attach)
    int64_t part_tokens;      // those positions (counted in hit_tokens too)
} kvt_prefix_cache_stats;

typedef struct kvt_prefix_cache kvt_prefix_cache;

// ctx (borrowed) must use the paged store (sequences). KVT_ERR_INVALID_ARG otherwise.
kvt_status kvt_prefix_cache_init(kvt_context *ctx, const kvt_prefix_cache_params *p, kvt_prefix_cache **out,
                                 kvt_err *err);
void kvt_prefix_cache_free(kvt_prefix_cache *pc); // releases every cached block

// seq must hold no position. Gives it the KV of the longest prefix of tokens[0, n) made of cached full blocks,
// at most max_tokens positions (the caller passes kvt_context_prompt_cacheable: n - 1, so the last prompt token is
// computed and gives logits, or n - window - 1 under asyncspade); then, without sparse attention, the positions of the
// next block that a cached block after that chain (a full one, or a prompt's partial last block, keep_tail) shares with
// the prompt, within max_tokens: that block by reference cut to those positions, which seq's first write into it
// copies (copy on write, from whatever tier it is in) into a block of its own. *n_cached: positions given (0 on a
// miss; a multiple of the block size under quest and asyncspade). Under asyncspade the memory cache's blocks may go further, up to n - 1 positions, to the end of
// a block whose entry keeps a query window that covers the prompt (kvt_sparse_qwin_covers): the window is restored into
// seq's history, so the prompt's last window + 1 positions need not be recomputed (the same selections and tokens).
// Under quest and asyncspade seq shares the key summaries kept (kvt_prefix_cache_keep_keys) that cover the most of the
// attached positions (kvt_sparse_ksum_attach): those at an entry that continues the attached chain, else at the deepest
// entry of it that keeps some; the positions they cover are not read back from the store and summarized again. When a
// running sequence (the last to insert an entry: insert marks it) holds more of the chain than the kept copies cover,
// it gives its summaries to that entry first (kvt_sparse_seq_keep: it decodes on, the same bits; checked to still hold
// the entry's blocks; the stats' key_live). The sequence's n_past is set. Errors (budget while importing from the store, memory) leave seq empty.
kvt_status kvt_prefix_cache_attach(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n,
                                   int64_t max_tokens, int64_t *n_cached, kvt_err *err);
// Blocks of the second-level store read beforehand (by the serving engine's background fetch, prefix_fetch.h):
// blocks [b0, b0 + n) of a prompt, found in the store under keys[i] with payloads[i] (borrowed). last: the store
// has no block after them (a lookup missed), so attach asks it for none; else attach reads the blocks after them
// (and any before b0 the memory cache no longer holds) from the store as without staging. release(arg), if not
// NULL, is for the caller of attach (the scheduler calls it once the copies are no longer read).
typedef struct kvt_prefix_staged {
    int64_t b0, n;
    const kvt_block_key *keys;
    void *const *payloads;
    bool last;
    void (*release)(void *arg);
    void *arg;
} kvt_prefix_staged;

// attach, with blocks staged beforehand: a block of [b0, b0 + n) that the memory cache lacks is imported from its
// staged copy (whose key must be the block's: else it is a miss) instead of being read from the store.
kvt_status kvt_prefix_cache_attach_staged(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n,
                                          int64_t max_tokens, const kvt_prefix_staged *staged, int64_t *n_cached,
                                          kvt_err *err);
// Blocks of tokens[0, min(n, max_tokens)) the memory cache holds now, or further as attach goes with a query window
// (what attach would give by reference, the second level not asked). Changes nothing (no recency).
int64_t kvt_prefix_cache_probe(const kvt_prefix_cache *pc, const int32_t *tokens, int64_t n, int64_t max_tokens);

// Registers the full blocks of positions [0, n) of seq, whose ids are tokens[0, n): the cache keeps them after
// seq is freed. Blocks already cached are not duplicated. New blocks go to the second-level store too.
kvt_status kvt_prefix_cache_insert(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n,
                                   kvt_err *err);
// Without sparse attention: keeps the last partial block of the prompt tokens[0, n) that seq has just computed (its
// n % block_tokens positions, after the full blocks insert registered) by reference, so that attach can give a
// repeated prompt all its positions but the last. seq's next write into that block would copy it first: the scheduler
// calls it as seq is freed (a request's sequence that computed the whole prompt). Not written to the
// second-level store (it holds whole blocks). Nothing kept when n is a whole number of blocks or the full blocks are
// not all cached; never an error (out of memory: not kept).
void kvt_prefix_cache_keep_tail(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n);
// Under asyncspade (with query_bytes > 0): keeps seq's query window ending at n (kvt_sparse_qwin_take; seq has just
// computed the prompt tokens[0, n), whose blocks insert registered) beside the entry of its last full block, for
// attach. Nothing is kept when there is no window or it does not fit query_bytes; never an error (out of memory:
// not kept).
void kvt_prefix_cache_keep_queries(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n);
// Under quest and asyncspade (with key_bytes > 0): seq, holding the prompt tokens[0, n) (whose blocks insert
// registered) and about to be freed, gives its key summaries of the prompt's full blocks to the entry of the last one
// (kvt_sparse_seq_free_keep: no copy unless seq shared a shorter kept copy); seq's sparse state is freed (the caller
// frees the sequence next). Kept only where it covers more than the entry's copy and fits key_bytes (least recently
// used copies dropped for it); never an error (out of memory: not kept).
void kvt_prefix_cache_keep_keys(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n);
// Releases cached prefixes, least recently used first, until the cache alone holds at most keep_blocks blocks
// (blocks also held by a running sequence stay until it ends). Returns the blocks released.
int64_t kvt_prefix_cache_trim(kvt_prefix_cache *pc, int64_t keep_blocks);
void kvt_prefix_cache_stats_get(const kvt_prefix_cache *pc, kvt_prefix_cache_stats *out);

#endif
