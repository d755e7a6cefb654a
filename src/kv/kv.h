// kv.h - the KV cache interface that attention reads through.
//
// A cache holds, per sequence, the K and V rows of every position in shards:
// a shard is (layer, group of `group_heads` consecutive KV heads); the group
// size is the offload granularity (all heads of a layer down to one head,
// headinfer.txt). Each shard is split in blocks of `block_tokens` consecutive
// positions. Attention never sees where a block lives: it acquires a view of
// block b of (seq, layer, group) (the block is then resident in the fast tier
// and readable until released), reads it for every query head of the group
// and releases it. The contiguous in-memory cache (kv_contig.c) and the tiered
// paged store (kv_paged.c) both implement this table.
//
// Threading: acquire/release may be called from several threads at once;
// append, truncate and the sequence calls from one thread, never concurrently
// with acquire on the same sequence.
#ifndef KVT_KV_H
#define KVT_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../kernels/dtype.h"

// Read view of one block of one (sequence, layer, group).
typedef struct {
    int64_t pos0;     // first position held by the block
    int64_t n;        // valid positions in the block (attention masks positions > its query)
    // K of position i, head j of the group: k + j * k_hstride + i * k_stride ([head_dim] kv type, tier T0);
    // V likewise. Both stores are head-major (k_stride = one head's row): attention walks one head over
    // many positions, and head-major memory gives it one contiguous stream per head (decode attention
    // 20% faster than over position-major rows of all heads, docs/log/BENCHMARKS-log.md "KV tiers").
    const void *k;
    const void *v;
    int64_t k_stride, v_stride;   // bytes between positions
    int64_t k_hstride, v_hstride; // bytes between the heads of the group
} kvt_kv_view;

// Memory tiers, fastest first. Any of them but T0 may be absent.
typedef enum { KVT_TIER_FAST = 0, KVT_TIER_HOST = 1, KVT_TIER_DISK = 2, KVT_TIER_COUNT = 3 } kvt_tier;
const char *kvt_tier_name(kvt_tier t); // "fast", "host", "disk"

// Memory for KV blocks (free with free()): 4096-aligned (O_DIRECT), and from 2 MiB on 2 MiB-aligned and
// marked for transparent huge pages, so that attention streaming tens of MB of KV does not miss the TLB
// at every 4 KiB page. NULL when out of memory.
void *kvt_kv_arena_alloc(size_t bytes);

// States of a block handed over as a prefetch (kvt_kv_stats.handover): in the fast tier, queued already, being
// loaded, evicted unread after a prefetch loaded it, absent after a prefetch found no room for it, absent otherwise.
enum { KVT_HO_RESIDENT, KVT_HO_QUEUED, KVT_HO_INFLIGHT, KVT_HO_EVICTED, KVT_HO_NOROOM, KVT_HO_ABSENT, KVT_HO_COUNT };

// Transfer accounting of a cache (all counters since init).
typedef struct {
    int64_t budget_bytes[KVT_TIER_COUNT];   // -1: unlimited, 0: tier absent
    int64_t peak_bytes[KVT_TIER_COUNT];     // highest bytes in use per tier
    int64_t used_bytes[KVT_TIER_COUNT];     // bytes in use now
    int64_t moved_bytes[KVT_TIER_COUNT][KVT_TIER_COUNT]; // [src][dst]
    int64_t moved_count[KVT_TIER_COUNT][KVT_TIER_COUNT]; // transfers [src][dst]
    double moved_ms[KVT_TIER_COUNT][KVT_TIER_COUNT];     // time spent copying [src][dst]
    double stall_ms;      // time compute threads waited in acquire/append (summed over threads), and callers of
                          // kvt_kv_paged_prefetch_end for its reads
    double copy_cpu_ms;   // CPU time the transfers took on the threads that ran them (memcpy, CRC32C, I/O calls; a
                          // copy between memory tiers counts its wall time: reading a thread's CPU clock costs more)
    int64_t hits, misses; // acquires that found the block in T0 / had to wait for it
    int64_t prefetches;   // blocks loaded ahead of use by the copy engine
    int64_t host_imports; // blocks written straight into T1 from outside copies (kvt_kv_paged_seq_push_copy)
    int64_t block_bytes;  // bytes of one block (K and V)
    // Where the readers' time goes (the paged store; each summed over threads): acquire_ms, the wall time of
    // acquire calls, of which lock_ms waiting for the store's mutex (in acquire and release, and after any copy,
    // a copy thread's too), wait_busy_ms asleep until a block that another thread moves is ready, wait_room_ms
    // asleep until the fast tier has a block it may give up, and load_ms loading blocks themselves (victim
    // searches, evictions, copies, the mutex taken again after each copy; their sleeps excluded). acquire_ms,
    // lock_ms and load_ms only with kvt_kv_paged_params.timing (--kv-timing); the rest always.
    // wakeups: those sleeps (condition waits that returned). io_cpu_ms: CPU time of the copy engine's threads
    // (all their work: victim searches and copies); io_items: prefetch-queue entries they took, io_idle: of
    // which loaded nothing into the fast tier (resident already, or no victim it may displace).
    // io_busy_max: the most copy threads at work on queued blocks at once (kvt_kv_paged_params.io_mem_threads).
    // io_help_ms: of io_cpu_ms, the wall time of the entries that compute threads took while they waited in the
    // compute pool (kvt_kv_paged_help: time that would otherwise be spin, so not added to an iteration).
    double acquire_ms, lock_ms, wait_busy_ms, wait_room_ms, load_ms, io_cpu_ms, io_help_ms;
    int64_t wakeups, io_items, io_idle, io_busy_max;
    // Where the misses come from (the paged store): a miss found its block still in the prefetch queue, handed over
    // early (miss_queued_early: by a prefetch of another layer than the frontier's, e.g. sparse decoding's worker a
    // step ahead) or late (miss_queued_late: while the readers were at its layer, e.g. the real query's final set);
    // being loaded by a copy thread (miss_inflight: the reader waits for it); loaded by a prefetch and evicted
    // before any read (miss_evicted); or none of these (miss_cold: never handed over since its last read).
    int64_t miss_queued_early, miss_queued_late, miss_inflight, miss_evicted, miss_cold;
    // The blocks handed over by kvt_kv_paged_prefetch, [0] early (needed beyond the readers' layer: sparse decoding's
    // worker, a step ahead) and [1] late (needed within the layer the readers are at: the real query's final set), by
    // their state then (KVT_HO_*). evicted_unread: blocks a prefetch loaded that were evicted from the fast tier
    // before any read; pf_noroom: queued prefetches not loaded because no resident block could go (the victim
    // search's limit: only blocks needed later than the one loaded).
    int64_t handover[2][KVT_HO_COUNT];
    int64_t evicted_unread, pf_noroom;
    // The copy engine's disk batches (kv_paged_io.c): batches read, blocks in them, the wall time a copy thread took
    // to prepare them (victim searches and evictions, under the store's mutex) and to read them (one submission and
    // the wait for all of its reads).
    int64_t io_batches, io_batch_blocks;
    double io_batch_prep_ms, io_batch_read_ms;
    // Victims a batch read on the caller's thread (kvt_kv_paged_prefetch_end) would evict without a disk copy, written
    // before it in one submission (kv_paged_io.c clean_victims): submissions, and blocks written by them.
    int64_t io_clean_batches, io_clean_blocks;
    // Fast-tier victims taken from the blocks a selection dropped (kvt_kv_paged_set_selected; no search), and victim
    // searches of the fast tier over a window of resident blocks.
    int64_t evict_dropped, evict_searched;
    // Disk requests of the io_uring engine cancelled after its stall time with no completion (kv_uring.h
    // kvt_uring_set_stall_ms) and redone with pread/pwrite: 0 on a healthy disk; no ring, 0.
    int64_t io_ring_cancels;
    // Arena memory made and faulted in ahead of use by kvt_kv_paged_warm (the serving engine, while idle), per tier,
    // and the wall time that took (outside the store's lock).
    int64_t warm_bytes[KVT_TIER_COUNT];
    double warm_ms;
} kvt_kv_stats;

typedef struct kvt_kv kvt_kv;

typedef struct {
    const char *name;
    // Stores K and V of positions [pos, pos+n) of (seq, layer), every group; k: [n, n_head_kv*head_dim] f32,
    // v: [n, n_head_kv*head_dim_v] f32 (converted to the cache's element type). pos may be below the
    // positions held (the suffix is overwritten) but not above.
    kvt_status (*append)(kvt_kv *kv, int32_t seq, int32_t layer, int64_t pos, int64_t n, const float *k, const float *v,
                         kvt_err *err);
    // Makes block b of (seq, layer, group) readable in T0 until release.
    kvt_status (*acquire)(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b, kvt_kv_view *out,
                          kvt_err *err);
    void (*release)(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b);
    // Forgets positions >= n_keep of seq.
    void (*truncate)(kvt_kv *kv, int32_t seq, int64_t n_keep);
    // Sequences: 0 exists from init. fork: *dst shares every block of src (reference counted; the partly
    // filled last block is copied when either side appends). NULL where unsupported.
    kvt_status (*seq_fork)(kvt_kv *kv, int32_t src, int32_t *dst, kvt_err *err);
    void (*seq_free)(kvt_kv *kv, int32_t seq);
    void (*stats)(kvt_kv *kv, kvt_kv_stats *out);
    void (*free)(kvt_kv *kv);
    // Capability: acquire/release keep no per-reader state and cost nothing (views are slices of memory the
    // store holds for its lifetime), so callers may split one block's readers over as many tasks as they like.
    // 0 where readers are counted (the paged store's frontier, statistics and pins).
    int free_reads;
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
    int32_t group_heads;   // KV heads per shard
    int32_t n_group;       // shards per layer (n_head_kv / group_heads)
};

static inline int64_t kvt_kv_n_blocks(const kvt_kv *kv, int64_t n_tokens) {
    return (n_tokens + kv->block_tokens - 1) / kv->block_tokens;
}

// Contiguous in-memory cache for one sequence: K and V of every layer in one
// allocation each, [n_layer][n_ctx][n_head_kv*head_dim]. Views are slices of
// `block_tokens` positions of one group (attention streams over them either way).
typedef struct {
    kvt_type type;
    int32_t n_layer, n_head_kv, head_dim, head_dim_v;
    int64_t n_ctx;
    int64_t block_tokens;
    int32_t group_heads; // 0: all KV heads of a layer
} kvt_kv_params;

kvt_status kvt_kv_contig_init(const kvt_kv_params *p, kvt_kv **out, kvt_err *err);
// Bytes the contiguous cache allocates for these parameters.
int64_t kvt_kv_contig_bytes(const kvt_kv_params *p);

static inline void kvt_kv_free(kvt_kv *kv) {
    if (kv) kv->ops->free(kv);
}
// Fills *out (zeros where the implementation keeps no accounting).
void kvt_kv_get_stats(kvt_kv *kv, kvt_kv_stats *out);

#endif
