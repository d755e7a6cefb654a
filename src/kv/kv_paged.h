// kv_paged.h - the tiered, paged KV store.
//
// Blocks of `block_tokens` positions of one shard (layer, group of KV heads)
// live in up to three tiers with hard byte budgets: T0 fast (the memory
// attention reads; a budgeted host arena on the CPU backend), T1 host DRAM
// and T2 disk (a file opened O_DIRECT, CRC32C per block). A block has copies
// in one or more tiers; all copies are equal (writing a block drops its lower
// copies). When T0 needs room the eviction policy (kv_policy.h) chooses a
// victim, which moves down a tier if it has no copy below. Acquire loads a
// block into T0 if needed and asks the copy engine (worker threads) to fetch
// the next `prefetch` blocks of the decode schedule (layer by layer, group by
// group, block by block, wrapping to the next token's first layer), so that
// transfers overlap compute. Every transfer is counted (kvt_kv_get_stats).
//
// Sequences are block tables: kvt_kv_ops.seq_fork shares blocks by reference
// count; appending to a shared partly filled block copies it first.
//
// Sliding-window layers (layer_window[l] = W > 0: a query at pos attends [pos - W + 1, pos]) keep only
// the blocks their window can still see: appending positions from pos on frees every block wholly
// before pos - W + 1 in every tier (it is never loaded again), so such a layer holds at most
// ceil(W / block_tokens) + 1 blocks per group whatever the context. Acquiring a freed block, or
// appending where the window would reach one (after truncating far back), fails with a message.
#ifndef KVT_KV_PAGED_H
#define KVT_KV_PAGED_H

#include "kv.h"

typedef struct {
    kvt_type type;          // F16 or F32
    int32_t n_layer, n_head_kv, head_dim, head_dim_v;
    int64_t n_ctx;          // positions per sequence at most
    int64_t block_tokens;   // positions per block
    int32_t group_heads;    // KV heads per shard: 0 = all of a layer, 1 = head-wise
    int64_t fast_bytes;     // T0 budget in bytes, -1 unlimited
    int64_t host_bytes;     // T1 budget in bytes, 0 = no host tier, -1 unlimited
    const char *disk_dir;   // T2 directory, NULL = no disk tier
    int64_t disk_max;       // T2 budget in bytes, -1 unlimited
    const char *evict;      // "lru" (default), "lfu", "lookahead"
    int32_t prefetch;       // blocks fetched ahead of use (0: none)
    int32_t n_readers;      // threads that may hold a block at once (T0 must hold that many blocks)
    int32_t n_io_threads;   // copy engine workers (default 4)
    int32_t io_mem_threads; // copy workers at work at once while every queued block has a copy in memory (a memcpy:
                            // CPU-bound, so a worker beyond the cores the readers leave only takes one from them);
                            // disk reads wake the others. 0: the online CPUs less n_readers, and none where that
                            // leaves no core (the default on 2 vCPUs with -t 2); -1: none. With none, the readers
                            // take the queued blocks themselves, two after each release (kv_paged.c readers_take),
                            // threads waiting in the compute pool take them one at a time (kvt_kv_paged_help), and
                            // kvt_kv_paged_drain's caller takes what is left
    int32_t io_batch;       // prefetched blocks only on disk that a copy thread takes from the queue at once and
                            // reads in one io_uring submission (kv_paged_io.c): 0 = 16, 1 = one at a time (then each
                            // read is a submission and a wait of its own); needs io_uring (else one at a time)
    bool keep_files;        // leave the disk file in disk_dir (else unlinked as soon as it is created)
    int64_t fault_read_at;  // tests: the n-th disk read fails with EIO (0: never)
    int64_t fault_write_at; // tests: the n-th disk write fails with EIO (0: never)
    bool no_uring;          // disk I/O with pread/pwrite even where io_uring works (also: env KVT_NO_URING=1)
    const int32_t *layer_window; // [n_layer] attention window of each layer in positions (0: whole context),
                                 // or NULL (every layer global); copied at init
    int32_t victim_window;  // resident blocks examined per eviction (kv_victim.h kvt_victim_window); 0: KVT_VICTIM_WINDOW_DEFAULT (256)
    bool timing;            // time the readers' path: kvt_kv_stats acquire_ms, lock_ms, load_ms (two or three clock
                            // reads per acquire and release; off: those stay 0, the other counters are kept)
    // tests: called with every block a T0 eviction takes (its layer, group and index), in order, under the
    // store's lock from the thread that evicts (a reader or a copy thread); NULL: none
    void (*on_evict)(void *ud, int32_t layer, int32_t group, int64_t index);
    void *on_evict_ud;
} kvt_kv_paged_params;

kvt_kv_paged_params kvt_kv_paged_params_default(void);
// Bytes of one block (K and V of block_tokens positions of group_heads heads).
int64_t kvt_kv_paged_block_bytes(const kvt_kv_paged_params *p);
// KVT_ERR_BUDGET if T0 cannot hold n_readers blocks (or 2), KVT_ERR_IO if the disk file cannot be created.
kvt_status kvt_kv_paged_init(const kvt_kv_paged_params *p, kvt_kv **out, kvt_err *err);
// Path of the disk tier file (NULL without a disk tier); owned by the store. Without keep_files the
// file was unlinked at creation: the path names it in messages only.
const char *kvt_kv_paged_disk_path(kvt_kv *kv);
// Disk I/O engine of the disk tier: "io_uring" or "threads"; NULL without a disk tier.
const char *kvt_kv_paged_disk_engine(kvt_kv *kv);
// Byte offset of the disk copy of block b of (seq, layer, group) in that file; -1 if it has none.
int64_t kvt_kv_paged_disk_offset(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b);
// Hands blocks[0 .. n) of (seq, layer, group) to the copy engine as prefetches (sparse decoding's chosen
// blocks): a hint, ignored for blocks already in T0 or queued, for unknown ones, and without a copy engine
// (a store without lower tiers, or prefetch 0). Any thread.
void kvt_kv_paged_prefetch(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, const int64_t *blocks, int64_t n);
// Between kvt_kv_paged_prefetch_begin and _end (on one thread), the blocks that thread hands over with
// kvt_kv_paged_prefetch which the readers need within the layer they are at (sparse decoding's final set, handed over
// right before attention reads it) and which are only on disk are not queued: _end reads them on the calling thread
// (the copy engine's disk batches: the same victims and counts, KVT_TIER_READ_MANY per io_uring submission, one wait
// each) and returns once they are in the fast tier; those it could not load go to the copy engine. Queued one by one,
// they were read by the copy threads while attention ran, and attention waited for them (docs/log/SPARSE-log-2.md,
// "Where the readers' misses come from"). Other threads' hand-overs, and earlier ones, are queued as before. Nothing
// without a disk tier read through io_uring or a copy engine, or with io_batch 1, or on another store.
void kvt_kv_paged_prefetch_begin(kvt_kv *kv);
void kvt_kv_paged_prefetch_end(kvt_kv *kv);
// _end without its last wait: the last submission of the late reads (up to KVT_TIER_READ_MANY blocks) is left in
// flight, its blocks busy, so that the caller computes over the blocks already resident meanwhile
// (kvt_kv_paged_acquire_ready); kvt_kv_paged_late_wait then waits for it. Any thread that waits for one of those
// blocks (an acquire) finishes the batch itself, so an acquire never waits for a caller that does not come.
// Returns whether a batch is in flight.
bool kvt_kv_paged_prefetch_end_async(kvt_kv *kv);
void kvt_kv_paged_late_wait(kvt_kv *kv); // the batch _end_async left in flight done (its wait counted as stall)
// The store's acquire, only if block b is in the fast tier and not being moved now: *ready false (nothing held,
// nothing counted) else. Other stores: their acquire (*ready true).
int64_t kvt_kv_paged_fast_slots(const kvt_kv *kv); // blocks the fast tier holds (INT64_MAX unlimited or another store)
kvt_status kvt_kv_paged_acquire_ready(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b,
                                      kvt_kv_view *out, bool *ready, kvt_err *err);
// Sparse decoding's selection of (seq, layer, group) for the step being decoded: the blocks blocks[0 .. n)
// (ascending). Every other block of the shard is marked dropped: eviction takes dropped blocks first under any
// policy (a dropped block is not needed again as far as the store knows), so a selection that fits the fast tier
// stays there from step to step instead of being pushed out by the blocks the policy ranks below it (spread streams
// the older share of every shard, whatever is selected). Reading a block, or handing it over as a prefetch, clears
// the mark. Blocks several sequences share are left alone. A hint: nothing read changes. Any thread.
void kvt_kv_paged_set_selected(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, const int64_t *blocks, int64_t n);
// on: decode of (seq, layer) reads only the blocks its caller hands to kvt_kv_paged_prefetch (sparse decoding's
// selections), so the store's own prefetch of the decode schedule leaves that layer of seq out (it would fetch the
// blocks that follow each read one, which a selection mostly skips, evicting the selected ones). off (the
// default; a new or forked sequence): the schedule prefetch covers the layer. Ignored by other stores and for an
// unknown seq or layer. Any thread.
void kvt_kv_paged_set_caller_prefetch(kvt_kv *kv, int32_t seq, int32_t layer, bool on);
// Drops every block copy in T0 and T1 that has a copy below (tests: forces reads from the lower tiers).
void kvt_kv_paged_drop_cached(kvt_kv *kv);
// True if the store ranks blocks by attention mass (policy attn-ema): decode attention then reports it
// (kvt_kv_paged_attn_mass; src/attn/attention.h). False for another store.
bool kvt_kv_paged_wants_attn_mass(const kvt_kv *kv);
// The attention mass of blocks b0 .. b0 + n - 1 of (seq, layer, group) in one decode step, mass[i] in [0, 1] (the
// softmax weight of the block's positions, averaged over heads): each block's attn_ema (kv_policy.h) becomes
// 0.5 x mass + 0.5 x its old value. Blocks the sequence does not hold are skipped. Any thread.
void kvt_kv_paged_attn_mass(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b0, const float *mass, int64_t n);
// attn-ema's prefetch (tierkv.txt's attention-score prefetch; a store of another policy, or without a copy engine,
// ignores it): the blocks b0 .. b0 + n - 1 of (seq, layer, group) not in the fast tier whose attn_ema
// kvt_attn_prefetch_wanted(ema, share) (kv_prefetch.h: at least 1.25 x share; decode attention passes share = 1 /
// the blocks it attended, after kvt_kv_paged_attn_mass) go to the copy engine, each loaded only if the policy ranks a
// resident block below it. Any thread.
void kvt_kv_paged_attn_prefetch(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b0, int64_t n, double share);
// A block's attention-mass EMA (tests); -1 if the sequence does not hold it or kv is another store.
float kvt_kv_paged_block_attn_ema(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b);
// Waits until the copy engine has nothing queued and no prefetch under way (tests: makes its decisions
// deterministic by letting it finish before the next read). Any thread.
void kvt_kv_paged_drain(kvt_kv *kv);
// Work for an idle compute thread (kvt_threadpool_set_idle: the pool's threads call it while they would spin at
// a barrier or between jobs): where no copy thread copies between memory tiers (io_mem_threads -1, or 0 leaving
// no core), takes the copy engine's next queued entry, as a reader does after a release (the same queue, order
// and victims; only the thread differs), if the store's mutex is free at once. Returns whether it took one; false
// at once for another store (or NULL), with copy threads at work, with nothing queued, the mutex taken, or a block
// only on disk at the queue's head (left to the copy threads that wait for the device). The time counts
// in kvt_kv_stats.io_cpu_ms and io_help_ms. Never blocks; changes no data a reader sees. Any thread.
bool kvt_kv_paged_help(void *kv);

// --- the prefix cache's block references (issue 12) -------------------------------------------------------

// Position block b of seq (its K and V in every layer and group: n_layer * n_group store blocks) held by
// reference outside any sequence: ids[n_layer * n_group] receives the store's handles, each counted as one
// more holder. The blocks stay in the tiers (moving down under eviction like any other) until unref.
// KVT_ERR_INVALID_ARG if seq does not hold all positions of block b in every layer (or a sliding window freed
// part of it), or kv is not the paged store.
kvt_status kvt_kv_paged_block_ref(kvt_kv *kv, int32_t seq, int64_t b, int64_t *ids, kvt_err *err);
// block_ref of a block that may be partly filled: seq must hold its first n_pos positions (1 .. block_tokens) in
// every layer. The sequence writing on into it copies it first (copy on write), so the held block keeps them.
kvt_status kvt_kv_paged_block_ref_part(kvt_kv *kv, int32_t seq, int64_t b, int64_t n_pos, int64_t *ids, kvt_err *err);
// Drops the holds of block_ref (ids[n_layer * n_group]).
void kvt_kv_paged_block_unref(kvt_kv *kv, const int64_t *ids);
// Most holders of any of ids (the caller's hold included): 1 means only the caller holds them.
int32_t kvt_kv_paged_block_holders(kvt_kv *kv, const int64_t *ids);
// Whether seq holds the blocks ids (from block_ref of a block b) as its block b: in every layer and group it holds
// that block, or (a sliding-window layer) it freed its block b there; in one at least it holds it.
bool kvt_kv_paged_seq_holds(kvt_kv *kv, int32_t seq, int64_t b, const int64_t *ids);
// Appends the blocks ids (from block_ref of a block b) to seq by reference as its block b: seq must hold
// exactly b * block_tokens positions in every layer, and then holds (b + 1) * block_tokens. Writing into them
// later copies them first (as after a fork). KVT_ERR_INVALID_ARG otherwise (seq unchanged).
kvt_status kvt_kv_paged_seq_push_ref(kvt_kv *kv, int32_t seq, int64_t b, const int64_t *ids, kvt_err *err);

// Appends block b of seq (seq holds exactly b * block_tokens positions in every layer, then (b + 1) *
// block_tokens) from copies of its data: k[i], v[i] for shard i = layer * n_group + group are
// [group_heads][block_tokens][head_dim] and [group_heads][block_tokens][head_dim_v] rows of the KV element type
// (head-major, as kvt_kv_view reads them; borrowed, read during the call), copied as they are (no conversion).
// Where: with T1 present under a bounded T0, into T1 (nothing leaves T0 for them; they reach T0 as any evicted
// block does: a plan's prefetch, kvt_kv_paged_set_plan, or the acquire that needs them), if T1 can make room for
// all n_layer * n_group blocks (a free slot, a duplicate of a T0 block dropped, or with a disk tier a victim moved
// down); with an unbounded T0, into T0 (where an append puts them). Otherwise (a bounded T0 without a host tier,
// or no room in T1) *placed is false and seq unchanged: the caller appends (through T0, evicting as any append).
// T1 placements are counted in kvt_kv_stats.host_imports. KVT_ERR_INVALID_ARG when seq does not hold exactly b
// blocks, KVT_ERR_NOMEM (seq unchanged).
kvt_status kvt_kv_paged_seq_push_copy(kvt_kv *kv, int32_t seq, int64_t b, const void *const *k, const void *const *v,
                                      bool *placed, kvt_err *err);

// --- the serving scheduler's hooks (issue 12) ------------------------------------------------------------

// The scheduler's plan (tierkv.txt Alg. 1): the sequences the next iterations run, in order, iteration after
// iteration (a sequence may appear several times; n = 0 clears it). From now on eviction counts a block as
// needed when its owner next runs (blocks of sequences outside the plan: never, so they go first), and the
// copy engine fetches the blocks of planned sequences that are below T0, earliest owner first, down the
// tiers (disk -> host -> fast) as far as room allows without evicting what the plan needs sooner. Copied.
// A sequence runs at most once per iteration, so the store starts a new iteration where a sequence repeats
// ([a, b, a, c]: a and b in the first, c in the second); blocks of one iteration go by the eviction policy.
void kvt_kv_paged_set_plan(kvt_kv *kv, const int32_t *seqs, int64_t n);
// Blocks one shard of a layer holds at most while a sequence grows to `positions` positions in blocks of
// `block_tokens`, appended at most `max_append` positions at a time (a prefill chunk: the context's n_ubatch;
// decode: 1). A global layer (window 0): ceil(positions / block_tokens). A sliding window W: an append at pos frees
// the blocks wholly before pos - W + 1 (kv_paged.c shard_slide) and fills positions up to pos + max_append - 1, so
// the shard holds at most ceil((W + max_append - 2) / block_tokens) + 1 blocks (the window and the block being
// filled, and a chunk's overshoot), and never more than the global count. The planner sizes the store's tiers with
// it (src/plan/plan.c), kvt_kv_paged_warm its room; tests/test_kv.c checks it against the store's peak.
int64_t kvt_kv_paged_shard_blocks(int64_t positions, int32_t window, int64_t block_tokens, int64_t max_append);
// Swap-out of a preempted sequence: every block of seq leaves the tiers above `to` (written down first where
// it has no copy there); blocks shared with a sequence in the plan stay. The sequence keeps every position
// and reads them back (exact) when it runs again. KVT_ERR_BUDGET if tier `to` cannot take them (nothing
// moved then), KVT_ERR_INVALID_ARG if the tier is absent.
kvt_status kvt_kv_paged_seq_demote(kvt_kv *kv, int32_t seq, kvt_tier to, kvt_err *err);
// Makes room ahead of use for `positions` more positions of one sequence (every shard; a sliding-window layer's at
// most its window and a block, unless `whole`: a caller whose prefix cache keeps every block of a prompt, a
// sliding-window layer's too, as serve's does, or which imports whole blocks from a second-level store, needs them
// all), at most max_bytes of it (-1: no bound), in each memory tier, fast then host, within
// their budgets: while a tier's memory already faulted in and not in use (kvt_tier_warm_bytes) is less than that,
// makes its arena's next chunk (8 MiB) and faults its pages in, so that the requests that take those slots later do
// not pay the first touches (on a VM that hands free memory back to its host, 0.1-0.3 GB/s: docs/log/BENCHMARKS-serve.md
// "Memory warmed ahead of use"). At most one chunk a call, its touches outside the store's lock (a caller that runs
// while idle keeps each step short). Returns true when it made one (call again), false when every tier holds the
// room (or its budget is reached, memory is short, or kv is not a paged store). Counted in kvt_kv_stats warm_bytes
// and warm_ms.
bool kvt_kv_paged_warm(kvt_kv *kv, int64_t positions, bool whole, int64_t max_bytes);
// Bytes of seq's blocks in each tier now (a shared block counts for each sequence holding it).
void kvt_kv_paged_seq_usage(kvt_kv *kv, int32_t seq, int64_t bytes[KVT_TIER_COUNT]);

#endif
