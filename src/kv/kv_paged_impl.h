// kv_paged_impl.h - internal to the paged KV store (kv_paged.c and kv_paged_ext.c): its tables and the functions
// that both files call. Every function here expects the store's mutex held (s->mu) unless it says otherwise.
// Not part of the library's interface.
#ifndef KVT_KV_PAGED_IMPL_H
#define KVT_KV_PAGED_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv_paged.h"
#include "kv_policy.h"
#include "kv_prefetch.h"
#include "kv_tier.h"
#include "kv_victim.h"

typedef struct {
    int32_t refs;       // sequences referencing the block (0: free id)
    int32_t pins;       // readers/writers holding its T0 copy
    int32_t layer, group;
    int64_t index;      // block index in its shard
    int64_t slot[KVT_TIER_COUNT]; // slot per tier, -1 absent; all present copies are equal
    int32_t rpos[2];    // position in the resident list of T0 / T1, -1 absent
    uint32_t crc;       // CRC32C of the disk copy
    bool busy;          // a transfer or eviction of this block is under way
    bool queued;        // waiting in the prefetch queue
    bool qplan;         // queued by the scheduler's plan (kvt_kv_paged_set_plan), not by the decode schedule
    bool qdisk;         // queued while its only copy was on disk (kv_paged.q_disk counts these)
    bool qattn;         // queued by attn-ema's prefetch (kvt_kv_paged_attn_mass): loaded only if the policy ranks
                        // a resident block below it
    bool dropped;       // the caller's last selection of its shard left it out (kvt_kv_paged_set_selected): evicted
                        // first, whatever the policy; cleared when it is read or handed over again
    bool pf_unread;     // loaded into the fast tier by the copy engine and not read since (kvt_kv_stats miss counts)
    bool lost;          // evicted from the fast tier while pf_unread (cleared when read)
    uint64_t last_use, uses;
    float attn_ema;     // EMA of the block's attention mass (kvt_kv_paged_attn_mass; policy attn-ema)
    bool qlate;         // queued by a caller's prefetch while the readers were at its layer (kvt_kv_stats miss counts)
    bool noroom;        // its last prefetch found no room (kvt_kv_stats handover; cleared when read or loaded)
    bool in_dl;         // listed in kv_paged.dl (it may have left the fast tier or lost its mark since)
    int64_t prank;      // plan rank: iteration in which the earliest planned sequence holding it runs
                        // (INT64_MAX: none, or no plan)
} pblock;

typedef struct {
    int64_t n_tok;      // positions held
    int64_t n_blk, cap; // blocks in the table
    int64_t n_drop;     // leading blocks freed by the layer's sliding window (their ids are -1)
    int64_t *ids;       // [cap] block ids
    bool caller_fetch;  // decode reads only blocks the caller prefetches (kvt_kv_paged_set_caller_prefetch):
                        // the schedule prefetch leaves this shard out
} pshard;

typedef struct {
    pthread_t tid;
    int64_t key;        // schedule key of the block the thread holds, or of the one after its last release
} preader;

typedef struct {
    bool live;
    pshard *sh;         // [n_shard], shard = layer * n_group + group
    int64_t prank;      // iteration of the plan in which it runs first (INT64_MAX: not planned)
} pseq;

typedef struct {
    kvt_kv base;
    kvt_kv_paged_params p;
    const kvt_evict_policy *pol;
    int64_t block_bytes;   // K part [group_heads, block_tokens, head_dim], then V part likewise
    int64_t k_row, v_row;  // bytes per position of a group's K / V
    int64_t k_hrow, v_hrow; // bytes per position of one head's K / V (blocks are head-major)
    int32_t n_shard;
    int64_t nb_ctx;        // blocks per shard at n_ctx (schedule stride)
    kvt_tier_store tier[KVT_TIER_COUNT];
    int64_t *res[2];       // resident block ids of T0 / T1
    int64_t n_res[2], cap_res[2];
    pblock *blk;
    int64_t n_blk, cap_blk;
    int64_t *free_blk;
    int64_t n_free_blk, cap_free_blk;
    pseq *seq;
    int32_t n_seq;
    pthread_mutex_t mu;
    pthread_cond_t cv;     // block state changed (busy cleared, pin released)
    uint64_t tick;         // logical clock: one tick per acquire
    int64_t cursor;        // schedule key of the decode frontier (cursor_update); next uses count from it
    preader *rd;           // [n_rd] reader threads seen since the last append
    int32_t n_rd, cap_rd;
    int64_t victim_pos[2]; // start of the next victim sample window in res[T0] / res[T1]
    int64_t victim_window; // resident blocks examined per eviction (p.victim_window, VICTIM_SAMPLE by default)
    bool late_on;          // kvt_kv_paged_prefetch_begin .. _end: late_owner's late disk blocks go to late_ids
    pthread_t late_owner;
    int64_t *late_ids;     // [cap_late] collected for kvt_kv_paged_prefetch_end
    int64_t n_late, cap_late;
    bool late_pend;        // the last batch of late_ids' reads in flight (kvt_kv_paged_prefetch_end_async): late_io
    void *late_io;         // its batch and pending reads (kv_paged_io.c), allocated at the first one
    int64_t *dl;           // [cap_dl] ring from dl_head: blocks a selection dropped while in the fast tier
    int64_t dl_head, n_dl, cap_dl; // (kvt_kv_paged_set_selected), the fast tier's first victims in that order
                                   // (kv_paged.c dropped_victim); checked when taken
    int32_t n_loading_t1;  // loads copying a block out of T1 (each then leaves a droppable T1 duplicate)
    // copy engine
    pthread_t *io;
    int n_io;
    int n_io_busy;         // copy threads handling a queued block (kvt_kv_paged_drain)
    int n_io_awake;        // copy threads not asleep on qcv (queue_wake)
    int64_t io_tokens;     // wake-ups handed to copy threads asleep on qcv and not taken yet (kvp_queue_wake)
    int io_mem;            // copy threads at work at once on blocks with a memory copy (kvp_io_target)
    int64_t q_disk;        // queued blocks whose only copy was on disk when queued (pblock.qdisk)
    pthread_cond_t qcv;
    int64_t *q;            // ring of block ids to prefetch
    int64_t q_head, q_len, q_cap;
    _Atomic int64_t q_avail; // q_len, readable without the mutex (kvt_kv_paged_help's test before its try-lock)
    kvt_kv_pos *pf_win;    // [p.prefetch] scratch of schedule_prefetch (kvt_prefetch_window)
    kvt_plan_room plan_room; // kvt_kv_paged_set_plan: the fast tier's room for the plan's loads (plan_visit)
    bool stop;
    void **bounce;         // free 4096-aligned buffers of the disk slot size
    int64_t n_bounce, cap_bounce;
    kvt_kv_stats st;
    int32_t *window;       // [n_layer] sliding window per layer (0: global)
} kv_paged;

enum { T0 = KVT_TIER_FAST, T1 = KVT_TIER_HOST, T2 = KVT_TIER_DISK };
#define VICTIM_SAMPLE KVT_VICTIM_WINDOW_DEFAULT // resident blocks examined per eviction by default (see pick_victim)

// The store's operations table (kvt_kv.ops of every paged store: a kvt_kv is a paged store iff ops == &kvp_ops).
extern const kvt_kv_ops kvp_ops;

// Residency lists, copies, transfers and victims (kv_paged.c).
bool kvp_res_add(kv_paged *s, int t, int64_t id);                 // enters id in tier t's resident list
void kvp_drop_copy(kv_paged *s, int64_t id, int t);               // forgets id's copy in tier t (another remains)
int64_t kvp_pick_victim(kv_paged *s, int t, int64_t limit, int64_t xrank, int64_t incoming); // see kv_paged.c
kvt_status kvp_transfer(kv_paged *s, int64_t id, int src, int dst, kvt_err *err); // copies id's block src -> dst
kvt_status kvp_evict(kv_paged *s, int64_t id, int t, kvt_err *err); // removes id's copy from tier t (moving it down)
int64_t kvp_t1_duplicate(const kv_paged *s);                       // a host copy that T0 also holds, or -1
int64_t kvp_lock_timed(kv_paged *s);                               // takes the mutex (lock_ms with p.timing)
void *kvp_bounce_get(kv_paged *s);                                 // a 4096-aligned buffer of a disk slot, or NULL
void kvp_bounce_put(kv_paged *s, void *b);                         // gives it back
int64_t kvp_next_use(const kv_paged *s, int64_t id);               // schedule steps to id's next read (next_use)
// The copy engine's queue.
void kvp_queue_push(kv_paged *s, int64_t id);
int64_t kvp_queue_pop(kv_paged *s); // takes the head entry (q_len > 0), clears its queue flags, counts io_items
// A copy thread's batch of disk loads (kv_paged_io.c): if the queue's head is a prefetch of a block only on disk
// and p.io_batch > 1 with a ring, takes it and the entries after it that are the same, up to io_batch, loads them
// together and returns true; else takes nothing and returns false.
bool kvp_queue_take_disk(kv_paged *s);
// Loads the blocks ids[0 .. n) that are still only on disk, not busy and not queued into the fast tier on the calling
// thread, as a copy thread's batches do (the same victims and counts), KVT_TIER_READ_MANY per submission; returns
// when they are read. Without a ring it does nothing. Releases the mutex while reading.
// async: the last submission is left in flight (late_pend; late_io allocated, else read now) for kvp_late_finish,
// and the function returns once it is submitted.
void kvp_load_disk_now(kv_paged *s, const int64_t *ids, int64_t n, bool async);
// Waits for the batch kvp_load_disk_now left in flight (if any: late_pend) and finishes its blocks as a batch read
// does, then hands the late blocks not loaded to the copy engine (kvp_late_requeue); any thread may (whoever waits for
// one of its busy blocks: kvp_cond_wait). Releases the mutex while waiting.
void kvp_late_finish(kv_paged *s);
void kvp_late_requeue(kv_paged *s); // late_ids not loaded (no room, a failed read) to the copy engine; n_late = 0
// Sleeps on s->cv (the mutex held), or, with a late batch in flight, finishes it instead (its blocks are busy until
// then, and the thread that left it in flight may be the one waited for).
void kvp_cond_wait(kv_paged *s);
// Gives the fast tier's next `need` victims from the dropped list (kv_paged.c dropped_victim) that have no disk copy
// one, written together (kv_paged_io.c; at most KVT_TIER_READ_MANY): their eviction then only drops the fast-tier
// copy. Releases the mutex while writing. Nothing without a ring, with a host tier, or with a policy that prefers
// clean victims.
void kvp_clean_victims(kv_paged *s, int64_t need);
bool kvp_dirty_victims(const kv_paged *s, int64_t need); // whether one of those has no disk copy
void kvp_queue_wake(kv_paged *s);
int64_t kvp_io_target(const kv_paged *s); // copy threads the queue wants at work (io_mem, one more per disk block)
// Blocks and sequences.
int64_t kvp_block_new(kv_paged *s, int32_t layer, int32_t group, int64_t index); // a free block id, or -1
void kvp_block_unref(kv_paged *s, int64_t id);
bool kvp_shard_push(pshard *sh, int64_t id);
pseq *kvp_seq_get(kv_paged *s, int32_t seq, kvt_err *err);        // the live sequence, or NULL (err set if given)

#endif
