// kv_paged.c - the tiered paged KV store: block tables, residency, eviction,
// prefetch through the copy engine, transfer accounting (its interfaces for the prefix cache and the serving
// scheduler: kv_paged_ext.c; the tables both files share: kv_paged_impl.h).
//
// Locking: one mutex guards every table; copies run with it released while the
// block is marked busy (nobody else moves, pins, writes or frees a busy block).
// A block pinned by a reader stays in T0 until released.
#include "kv_paged.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/timer.h"
#include "../kernels/quant.h"
#include "kv_paged_impl.h"
#include "kv_policy.h"
#include "kv_prefetch.h"
#include "kv_tier.h"
#include "kv_victim.h"

kvt_kv_paged_params kvt_kv_paged_params_default(void) {
    kvt_kv_paged_params p;
    memset(&p, 0, sizeof p);
    p.type = KVT_TYPE_F16;
    p.block_tokens = 512; // measured: docs/log/BENCHMARKS-log.md, "Block size"
    p.fast_bytes = -1;
    p.disk_max = -1;
    p.evict = "lru";
    p.prefetch = 16;
    p.n_readers = 1;
    p.n_io_threads = 4;
    return p;
}

int64_t kvt_kv_paged_block_bytes(const kvt_kv_paged_params *p) {
    int32_t gh = p->group_heads > 0 ? p->group_heads : p->n_head_kv;
    return p->block_tokens * (kvt_row_size(p->type, (int64_t)gh * p->head_dim) + kvt_row_size(p->type, (int64_t)gh * p->head_dim_v));
}

static void block_name(const kv_paged *s, int64_t id, char *buf, size_t n) {
    const pblock *B = &s->blk[id];
    snprintf(buf, n, "layer %d group %d block %lld (positions %lld..%lld)", B->layer, B->group, (long long)B->index,
             (long long)(B->index * s->base.block_tokens), (long long)((B->index + 1) * s->base.block_tokens - 1));
}

// --- resident lists ------------------------------------------------------------

bool kvp_res_add(kv_paged *s, int t, int64_t id) {
    if (s->n_res[t] == s->cap_res[t]) {
        int64_t cap = s->cap_res[t] ? s->cap_res[t] * 2 : 256;
        int64_t *r = realloc(s->res[t], (size_t)cap * sizeof *r);
        if (!r) return false;
        s->res[t] = r;
        s->cap_res[t] = cap;
    }
    s->blk[id].rpos[t] = (int32_t)s->n_res[t];
    s->res[t][s->n_res[t]++] = id;
    return true;
}

static void res_del(kv_paged *s, int t, int64_t id) {
    int32_t i = s->blk[id].rpos[t];
    if (i < 0) return;
    int64_t last = s->res[t][--s->n_res[t]];
    s->res[t][i] = last;
    s->blk[last].rpos[t] = i;
    s->blk[id].rpos[t] = -1;
}

// Drops the copy of block id in tier t.
void kvp_drop_copy(kv_paged *s, int64_t id, int t) {
    pblock *B = &s->blk[id];
    if (B->slot[t] < 0) return;
    if (t < 2) res_del(s, t, id);
    kvt_tier_release(&s->tier[t], B->slot[t]);
    B->slot[t] = -1;
}

// --- timing of the readers' path (kvt_kv_stats: acquire_ms, lock_ms, wait_*_ms, wakeups) ---------------------

// Takes the store's mutex; with p.timing adds the time it waited for it to lock_ms and returns the time it was
// asked at (ns; 0 without timing).
int64_t kvp_lock_timed(kv_paged *s) {
    if (!s->p.timing) {
        pthread_mutex_lock(&s->mu);
        return 0;
    }
    const int64_t t0 = kvt_time_ns();
    pthread_mutex_lock(&s->mu);
    s->st.lock_ms += (double)(kvt_time_ns() - t0) / 1e6;
    return t0;
}

// Sleeps on the store's condition (the mutex held), adding the time asleep to *ms.
static void wait_timed(kv_paged *s, double *ms) {
    const int64_t t0 = kvt_time_ns();
    kvp_cond_wait(s);
    *ms += (double)(kvt_time_ns() - t0) / 1e6;
    s->st.wakeups++;
}

// --- schedule and policy -------------------------------------------------------

static inline int64_t sched_key(const kv_paged *s, const pblock *B) {
    return kvt_sched_key((int64_t)B->layer * s->base.n_group + B->group, B->index, s->nb_ctx);
}

// A block its shard's last selection dropped (pblock.dropped) is not needed again as far as the store knows: the
// farthest next use, and (for recency policies) the oldest use, so that every policy evicts it first.
KVT_VICTIM_INLINE int64_t next_use(const kv_paged *s, const pblock *B) { // inline: once per victim candidate
    if (B->dropped) return INT64_MAX / 4;
    return kvt_sched_distance(sched_key(s, B), s->cursor, (int64_t)s->n_shard * s->nb_ctx);
}

int64_t kvp_next_use(const kv_paged *s, int64_t id) { return next_use(s, &s->blk[id]); }

// The decode frontier: every reader thread's position in the schedule (the block it holds, or the one
// after the block it released last) since the last append; the frontier is the earliest of them. Readers
// of one attention call sit within a window far shorter than a cycle, so "earliest" is taken relative to
// half a cycle before the old frontier. A thread ahead of the others must not make the blocks the slower
// ones still need look just used (farthest next use) to the policy: the frontier follows the slowest.
static void cursor_update(kv_paged *s) {
    if (s->n_rd == 0) return;
    const int64_t cycle = (int64_t)s->n_shard * s->nb_ctx, anchor = s->cursor - cycle / 2;
    int64_t best = -1, bd = 0;
    for (int32_t i = 0; i < s->n_rd; i++) {
        const int64_t d = kvt_sched_distance(s->rd[i].key, anchor, cycle);
        if (best < 0 || d < bd) {
            best = s->rd[i].key;
            bd = d;
        }
    }
    s->cursor = best;
}

// Records that the calling thread is at schedule key `key`. A reader table that cannot grow only costs
// precision (the frontier then ignores this thread).
static void reader_at(kv_paged *s, int64_t key) {
    const pthread_t self = pthread_self();
    int32_t i = 0;
    while (i < s->n_rd && !pthread_equal(s->rd[i].tid, self)) i++;
    if (i == s->n_rd) {
        if (s->n_rd == s->cap_rd) {
            int32_t cap = s->cap_rd ? s->cap_rd * 2 : 16;
            preader *r = realloc(s->rd, (size_t)cap * sizeof *r);
            if (!r) return;
            s->rd = r;
            s->cap_rd = cap;
        }
        if (s->n_rd == 0) s->cursor = key;
        s->rd[s->n_rd++].tid = self;
    }
    s->rd[i].key = key;
    cursor_update(s);
}

// What the policy needs to know of the whole store (kvt_evict_info), the same for every candidate of one
// victim search: blocks per shard, and the share of the live blocks T0 cannot keep, with slack for the
// blocks readers pin and loads in flight.
typedef struct {
    int64_t shard_blocks;
    double stream_frac;
} evict_ctx;

static evict_ctx evict_ctx_now(const kv_paged *s) {
    const int64_t live = s->n_blk - s->n_free_blk, slack = s->p.n_readers + s->n_io + 1;
    evict_ctx e = {(live + s->n_shard - 1) / s->n_shard, 0.0};
    if (live > 0) e.stream_frac = (double)(live - s->tier[T0].max_slots + slack) / (double)live;
    return e;
}

static kvt_evict_info evict_info(const kv_paged *s, const evict_ctx *e, const pblock *B) {
    // designated: fields the store does not know (added for the simulator) stay 0
    const kvt_evict_info info = {.last_use = B->dropped ? 0 : B->last_use,
                                 .uses = B->dropped ? 0 : B->uses,
                                 .next_use = next_use(s, B),
                                 .shard = (int64_t)B->layer * s->base.n_group + B->group,
                                 .index = B->index,
                                 .shard_blocks = e->shard_blocks,
                                 .stream_frac = e->stream_frac,
                                 .attn_ema = B->attn_ema};
    return info;
}

static double evict_score(const kv_paged *s, const evict_ctx *e, const pblock *B) {
    const kvt_evict_info info = evict_info(s, e, B);
    return s->pol->score(&info, s->tick);
}

// kvt_victim_pick's view of the store (the mutex held): the window res[t][start ..] (n resident, wrapping), each
// block's description and its policy inputs.
typedef struct {
    const kv_paged *s;
    evict_ctx e;
    int t;
    int64_t limit, xrank, start, n, m, incoming; // m: the window's length; incoming: candidate m (-1: none)
} victim_ud;

enum { VICTIM_AHEAD = 12 }; // victim_cand: how far ahead in the window blocks are fetched into the cache

static int64_t window_id(const victim_ud *u, int64_t k) {
    const int64_t j = u->start + k;
    return u->s->res[u->t][j < u->n ? j : j - u->n];
}

KVT_VICTIM_INLINE void victim_cand(void *ud, int64_t k, kvt_victim_cand *out) {
    const victim_ud *u = ud;
    const kv_paged *s = u->s;
    if (k == u->m) { // the block an attn-ema prefetch would bring
        *out = (kvt_victim_cand){.id = u->incoming, .rank = s->blk[u->incoming].prank, .flags = KVT_VICTIM_INCOMING};
        return;
    }
    const int64_t id = window_id(u, k);
    const pblock *B = &s->blk[id];
    const int t = u->t;
#if defined(__GNUC__)
    // the window's blocks lie anywhere in blk[] and are rarely in the cache (the compute threads stream weights and
    // KV through it between searches): fetch the block VICTIM_AHEAD places ahead while this one is examined, so the
    // search waits for memory about once instead of once per candidate (a pblock spans two cache lines)
    if (k + VICTIM_AHEAD < u->m) {
        const char *a = (const char *)&s->blk[window_id(u, k + VICTIM_AHEAD)];
        __builtin_prefetch(a);
        __builtin_prefetch(a + sizeof(pblock) - 1);
    }
#endif
    const bool held = B->busy || (t == T0 && B->pins > 0);
    const bool clean = kvt_victim_clean(t == T0, B->slot[T0] >= 0, B->slot[T1] >= 0, B->slot[T2] >= 0, false, B->refs > 1);
    *out = (kvt_victim_cand){.id = id,
                             .rank = B->prank,
                             .sched_next = u->limit >= 0 && u->limit < INT64_MAX && !held && B->prank == u->xrank
                                               ? next_use(s, B) : 0, // read only then (kvt_evict_may_displace)
                             .flags = (held ? KVT_VICTIM_HELD : 0u) | (clean ? KVT_VICTIM_CLEAN : 0u)};
}

KVT_VICTIM_INLINE void victim_info(void *ud, int64_t id, kvt_evict_info *out) {
    const victim_ud *u = ud;
    *out = evict_info(u->s, &u->e, &u->s->blk[id]);
}

// A fast-tier victim from the blocks a selection dropped (kv_paged.dl, in the order they were dropped), or -1. Every
// policy evicts a dropped block first (next_use, evict_info), so the window search below would pick one where its
// window holds one; but the window samples 256 of thousands of resident blocks, which holds none of the few dozen
// dropped ones most of the time, and then evicted a block a later layer still needs after examining 256 blocks under
// the store's mutex (tens of us per load at 8K). Oldest first: a block dropped long ago and not chosen since is the least likely to
// come back (latest first read 8% more from disk; docs/log/SPARSE-log-2.md, "Where the readers' misses come from").
// An entry is used only if its block is still dropped, in the fast tier, not held, and admitted as the window search
// would admit it (plan rank and limit: kvt_evict_may_displace; clean where the policy prefers clean blocks); entries
// that no longer qualify are discarded. Not for an attn-ema prefetch's admission (incoming).
static int64_t dropped_victim(kv_paged *s, int64_t limit, int64_t xrank) {
    while (s->n_dl > 0) {
        const int64_t id = s->dl[s->dl_head];
        pblock *B = &s->blk[id];
        const bool ok = B->dropped && B->refs == 1 && B->slot[T0] >= 0 && !B->busy && B->pins == 0 &&
                        !(s->pol->clean_first && s->tier[T2].present && B->slot[T2] < 0); // the search prefers clean ones
        if (ok && !kvt_evict_may_displace(B->prank, next_use(s, B), limit, xrank)) return -1; // kept for another load
        s->dl_head = (s->dl_head + 1) % s->cap_dl;
        s->n_dl--;
        B->in_dl = false;
        if (ok) return id;
    }
    return -1;
}

// Best victim of tier t (not pinned, not busy); -1 if none: kvt_victim_pick (kv_victim.h, the rule the simulator
// runs too) over a window of up to victim_window (VICTIM_SAMPLE) resident blocks (kvt_victim_window: all of them
// when there are fewer, else a window that moves on at every call). Exhaustive scans made each eviction
// O(resident blocks) under the store's mutex: with thousands of small blocks resident, eviction dominated decode. With limit >= 0, only
// blocks needed later than `limit` schedule steps qualify (prefetch must not evict what is needed sooner than what
// it fetches). Clean blocks (a copy below: kvt_victim_clean) go first where the policy asks (all but spread, whose
// partition must hold) and always in T1: evicting them costs no write. In T0 that holds for blocks of one sequence
// only; a block several sequences share (a beam search's prompt) goes by the policy alone, as it is the first to
// get a disk copy and preferring it would reload it for every sharer (40-70x more loads in beam search with a
// disk tier). A host copy never counts in T0: evicting a block without one costs only a memcpy.
//
// With a plan (kvt_kv_paged_set_plan) the plan rank comes first: blocks whose earliest owner runs latest (or
// never) go first, and with limit >= 0 a block of rank r only qualifies if it is later than xrank (the rank of
// the block being loaded), or of the same rank and needed later than `limit` (limit INT64_MAX: strictly later
// ranks only). Without a plan every rank is INT64_MAX and nothing changes.
//
// incoming >= 0 (an attn-ema prefetch of that block, not resident): the block competes with the window's
// candidates (KVT_VICTIM_INCOMING, as the simulator admits its prefetches); -2 if the policy picks it (the
// prefetch is not worth a resident block).
int64_t kvp_pick_victim(kv_paged *s, int t, int64_t limit, int64_t xrank, int64_t incoming) {
    if (t == T0 && incoming < 0 && s->n_dl > 0) {
        const int64_t d = dropped_victim(s, limit, xrank);
        if (d >= 0) {
            s->st.evict_dropped++;
            return d;
        }
    }
    if (t == T0) s->st.evict_searched++;
    victim_ud u = {.s = s, .e = evict_ctx_now(s), .t = t, .limit = limit, .xrank = xrank, .n = s->n_res[t],
                   .incoming = incoming};
    u.m = kvt_victim_window(u.n, s->victim_window, &s->victim_pos[t], &u.start);
    // a T0 block is clean only with a disk copy (kvt_victim_clean: a host copy does not count)
    const kvt_victim_query q = {.pol = s->pol, .fast_tier = t == T0, .limit = limit, .xrank = xrank, .now = s->tick,
                                .none_clean = t == T0 && !s->tier[T2].present};
    const int64_t k = kvt_victim_pick(&q, u.m + (incoming >= 0), victim_cand, victim_info, &u, NULL);
    return k < 0 ? -1 : k == u.m ? -2 : window_id(&u, k);
}

// --- transfers -----------------------------------------------------------------

void *kvp_bounce_get(kv_paged *s) {
    if (s->n_bounce > 0) return s->bounce[--s->n_bounce];
    void *p = NULL;
    int64_t n = s->tier[T2].slot_bytes;
    if (posix_memalign(&p, 4096, (size_t)n)) return NULL;
    return p;
}

void kvp_bounce_put(kv_paged *s, void *b) {
    if (s->n_bounce == s->cap_bounce) {
        int64_t cap = s->cap_bounce ? s->cap_bounce * 2 : 8;
        void **nb = realloc(s->bounce, (size_t)cap * sizeof *nb);
        if (!nb) {
            free(b);
            return;
        }
        s->bounce = nb;
        s->cap_bounce = cap;
    }
    s->bounce[s->n_bounce++] = b;
}

// Copies block id from tier src to a new slot of tier dst (which must have room). The block must be busy
// (marked by the caller). Releases the mutex during the copy.
kvt_status kvp_transfer(kv_paged *s, int64_t id, int src, int dst, kvt_err *err) {
    int64_t ds = kvt_tier_alloc(&s->tier[dst]);
    if (ds < 0) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV block in the %s tier", kvt_tier_name(dst));
    pblock *B = &s->blk[id];
    B->slot[dst] = ds;
    const int64_t ss = B->slot[src];
    uint8_t *sp = src < 2 ? kvt_tier_ptr(&s->tier[src], ss) : NULL;
    uint8_t *dp = dst < 2 ? kvt_tier_ptr(&s->tier[dst], ds) : NULL;
    void *bounce = NULL;
    if (src == T2 || dst == T2) {
        if (!(bounce = kvp_bounce_get(s))) {
            kvt_tier_release(&s->tier[dst], ds);
            B->slot[dst] = -1;
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a disk I/O buffer");
        }
    }
    // the block's name is for a disk error's message only; a memory copy's CPU time is its wall time (a thread CPU
    // clock read is a system call, 1-2 us in a VM: two per copy cost more than copying a 48 KB block), a disk
    // transfer's is read from the thread's clock (it may wait for the device)
    const bool disk = src == T2 || dst == T2;
    char what[128] = "";
    if (disk) block_name(s, id, what, sizeof what);
    uint32_t crc = B->crc;
    pthread_mutex_unlock(&s->mu);
    const int64_t t0 = kvt_time_ns(), c0 = disk ? kvt_thread_cpu_ns() : 0;
    kvt_status st = KVT_OK;
    if (src == T2) st = kvt_tier_disk_read(&s->tier[T2], ss, dp, bounce, crc, what, err);
    else if (dst == T2) st = kvt_tier_disk_write(&s->tier[T2], ds, sp, bounce, &crc, what, err);
    else memcpy(dp, sp, (size_t)s->block_bytes);
    const double ms = (double)(kvt_time_ns() - t0) / 1e6, cpu_ms = disk ? (double)(kvt_thread_cpu_ns() - c0) / 1e6 : ms;
    kvp_lock_timed(s);
    s->st.copy_cpu_ms += cpu_ms;
    if (bounce) kvp_bounce_put(s, bounce);
    B = &s->blk[id];
    if (st) {
        kvt_tier_release(&s->tier[dst], ds);
        B->slot[dst] = -1;
        return st;
    }
    if (dst == T2) B->crc = crc;
    if (dst == T0) B->last_use = s->tick; // a load counts as a use for recency (prefetched blocks stay until read)
    if (dst < 2 && !kvp_res_add(s, dst, id)) {
        kvt_tier_release(&s->tier[dst], ds);
        B->slot[dst] = -1;
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    s->st.moved_bytes[src][dst] += s->block_bytes;
    s->st.moved_count[src][dst]++;
    s->st.moved_ms[src][dst] += ms;
    return KVT_OK;
}

kvt_status kvp_evict(kv_paged *s, int64_t id, int t, kvt_err *err);

// A T1 copy of a block that T0 also holds (not busy): dropping it loses nothing. -1 if none.
int64_t kvp_t1_duplicate(const kv_paged *s) {
    int64_t best = -1;
    double bs = 0;
    const evict_ctx e = evict_ctx_now(s);
    for (int64_t i = 0; i < s->n_res[T1]; i++) {
        const int64_t id = s->res[T1][i];
        const pblock *B = &s->blk[id];
        if (B->busy || B->slot[T0] < 0) continue;
        const double sc = evict_score(s, &e, B);
        if (best < 0 || B->prank > s->blk[best].prank || (B->prank == s->blk[best].prank && sc > bs)) {
            best = id;
            bs = sc;
        }
    }
    return best;
}

// Makes tier t have a free slot. wait: block until a victim is available (else return 0 when none);
// limit: see pick_victim. Returns 1 on room, 0 on none (no wait), -1 on error (err set).
static int ensure_free(kv_paged *s, int t, bool wait, int64_t limit, kvt_err *err) {
    kvt_tier_store *T = &s->tier[t];
    while (T->n_used >= T->max_slots) {
        if (t == T1 && !s->tier[T2].present) {
            // nothing below the host tier: only duplicates of T0 blocks can go (free), and loads in flight
            // out of T1 will leave such duplicates
            const int64_t dup = kvp_t1_duplicate(s);
            if (dup >= 0) {
                kvp_drop_copy(s, dup, T1);
                continue;
            }
            if (s->n_loading_t1 > 0) {
                wait_timed(s, &s->st.wait_room_ms);
                continue;
            }
            kvt_errorf(err, KVT_ERR_BUDGET,
                       "KV host tier full (%lld bytes hold %lld blocks of %lld bytes) and no disk tier below it: "
                       "raise --kv-host or give --kv-disk",
                       (long long)T->budget, (long long)T->max_slots, (long long)T->slot_bytes);
            return -1;
        }
        if (t == T2) {
            kvt_errorf(err, KVT_ERR_BUDGET,
                       "KV disk tier full: --kv-disk-max %lld bytes hold %lld blocks of %lld bytes (file %s)",
                       (long long)T->budget, (long long)T->max_slots, (long long)T->slot_bytes, T->path);
            return -1;
        }
        int64_t v = kvp_pick_victim(s, t, limit, INT64_MAX, -1);
        if (v < 0) {
            if (!wait) return 0;
            wait_timed(s, &s->st.wait_room_ms);
            continue;
        }
        if (kvp_evict(s, v, t, err)) return -1;
    }
    return 1;
}

// Removes block id's copy from tier t (0 or 1), first moving it down if no lower tier has a copy.
kvt_status kvp_evict(kv_paged *s, int64_t id, int t, kvt_err *err) {
    pblock *B = &s->blk[id];
    if (t == T0 && s->p.on_evict) s->p.on_evict(s->p.on_evict_ud, B->layer, B->group, B->index);
    if (t == T0 && B->pf_unread) { // a prefetch loaded it and nobody read it
        B->pf_unread = false;
        B->lost = true;
        s->st.evicted_unread++;
    }
    if (t == T1 && B->slot[T0] >= 0) { // a duplicate: T0 keeps the data
        kvp_drop_copy(s, id, T1);
        return KVT_OK;
    }
    B->busy = true;
    kvt_status st = KVT_OK;
    bool has_lower = false;
    for (int u = t + 1; u < KVT_TIER_COUNT; u++) has_lower |= B->slot[u] >= 0;
    int dst = -1;
    if (t == T0 && s->tier[T1].present && B->slot[T1] < 0) {
        // demote to the host tier if the block must be kept, or if a free slot (or a worse host block) allows
        kvt_tier_store *H = &s->tier[T1];
        bool room = H->n_used < H->max_slots;
        if (!room) { // a duplicate of a T0 block goes first: dropping it loses nothing
            const int64_t dup = kvp_t1_duplicate(s);
            if (dup >= 0) {
                kvp_drop_copy(s, dup, T1);
                room = true;
            }
        }
        if (!room && has_lower) {
            int64_t hv = kvp_pick_victim(s, T1, -1, INT64_MAX, -1);
            const evict_ctx e = evict_ctx_now(s);
            const pblock *H1 = hv >= 0 ? &s->blk[hv] : NULL;
            if (H1 && H1->slot[T2] >= 0 &&
                (H1->prank > B->prank || (H1->prank == B->prank && evict_score(s, &e, H1) > evict_score(s, &e, B)))) {
                kvp_drop_copy(s, hv, T1);
                room = true;
            }
        }
        if (room) dst = T1;
        else if (!has_lower) {
            if (s->tier[T2].present && s->tier[T2].n_used < s->tier[T2].max_slots) dst = T2;
            else {
                int r = ensure_free(s, T1, true, -1, err);
                if (r < 0) st = err->status;
                else dst = T1;
            }
        }
    } else if (!has_lower) {
        dst = s->tier[T2].present ? T2 : -1;
        if (dst < 0) {
            char what[128];
            block_name(s, id, what, sizeof what);
            st = kvt_errorf(err, KVT_ERR_BUDGET,
                            "KV %s tier full (%lld bytes) and no lower tier for %s: give --kv-host or --kv-disk",
                            kvt_tier_name(t), (long long)s->tier[t].budget, what);
        }
    }
    if (!st && dst >= 0) {
        if (ensure_free(s, dst, true, -1, err) < 0) st = err->status;
        else st = kvp_transfer(s, id, t, dst, err);
    }
    B = &s->blk[id];
    if (!st) kvp_drop_copy(s, id, t);
    B->busy = false;
    pthread_cond_broadcast(&s->cv);
    return st;
}

// Exchanges block id (in T1 only) with victim v (in T0 only, not pinned): the one slot of each tier changes
// owner, so the exchange needs no free slot in either. Used when both tiers are full and nothing lies below.
static kvt_status swap_t0_t1(kv_paged *s, int64_t id, int64_t v, kvt_err *err) {
    void *tmp = malloc((size_t)s->block_bytes); // [block_bytes] the victim's data in transit
    if (!tmp) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV block exchange (%lld bytes)",
                                (long long)s->block_bytes);
    pblock *X = &s->blk[id], *Y = &s->blk[v];
    Y->busy = true;
    const int64_t xs = X->slot[T1], ys = Y->slot[T0];
    uint8_t *xp = kvt_tier_ptr(&s->tier[T1], xs), *yp = kvt_tier_ptr(&s->tier[T0], ys);
    pthread_mutex_unlock(&s->mu);
    const int64_t t0 = kvt_time_ns();
    memcpy(tmp, yp, (size_t)s->block_bytes);
    memcpy(yp, xp, (size_t)s->block_bytes);
    memcpy(xp, tmp, (size_t)s->block_bytes);
    const double ms = (double)(kvt_time_ns() - t0) / 1e6;
    kvp_lock_timed(s);
    s->st.copy_cpu_ms += ms; // memory copies: CPU time = wall time (transfer)
    free(tmp);
    X = &s->blk[id];
    Y = &s->blk[v];
    res_del(s, T0, v);
    res_del(s, T1, id);
    X->slot[T0] = ys;
    X->slot[T1] = -1;
    Y->slot[T1] = xs;
    Y->slot[T0] = -1;
    kvp_res_add(s, T0, id); // cannot fail: each list just lost an entry
    kvp_res_add(s, T1, v);
    X->last_use = s->tick;
    for (int d = 0; d < 2; d++) {
        const int a = d ? T0 : T1, b = d ? T1 : T0;
        s->st.moved_bytes[a][b] += s->block_bytes;
        s->st.moved_count[a][b]++;
        s->st.moved_ms[a][b] += ms / 2;
    }
    Y->busy = false;
    return KVT_OK;
}

// Loads block id (not in T0, not busy) into T0 from its fastest lower copy. wait, limit: as ensure_free. admit (an
// attn-ema prefetch; limit ignored): the block competes with T0's candidates and is not loaded if the policy picks
// it (pick_victim's incoming).
static kvt_status load(kv_paged *s, int64_t id, bool wait, int64_t limit, bool admit, bool *loaded, kvt_err *err) {
    s->blk[id].busy = true;
    kvt_status st = KVT_OK;
    *loaded = false;
    const int src = s->blk[id].slot[T1] >= 0 ? T1 : T2;
    // A load from T1 keeps the T1 copy (evicting the block again is then free); without a disk tier that
    // duplicate is dropped when T1 needs the slot, so the T0 and T1 budgets add up.
    const bool exclusive = src == T1 && s->blk[id].slot[T2] < 0;
    bool room = false;
    if (s->blk[id].slot[src] < 0) st = kvt_errorf(err, KVT_ERR_FORMAT, "KV block %lld has no copy in any tier", (long long)id);
    while (!st && !room && !*loaded) {
        if (s->tier[T0].n_used < s->tier[T0].max_slots) {
            room = true;
            break;
        }
        const int64_t v = kvp_pick_victim(s, T0, admit ? -1 : limit, s->blk[id].prank, admit ? id : -1);
        if (v == -2) break; // attn-ema: the block is worth less than every candidate
        if (v < 0) {
            if (!wait) break;
            wait_timed(s, &s->st.wait_room_ms);
            continue;
        }
        const pblock *Y = &s->blk[v];
        const bool v_dirty = Y->slot[T1] < 0 && Y->slot[T2] < 0;
        const kvt_tier_store *H = &s->tier[T1];
        if (exclusive && v_dirty && H->n_used >= H->max_slots && !s->tier[T2].present && kvp_t1_duplicate(s) < 0) {
            if (!(st = swap_t0_t1(s, id, v, err))) *loaded = true;
        } else if (kvp_evict(s, v, T0, err)) st = err->status;
    }
    if (!st && room) {
        if (src == T1) s->n_loading_t1++;
        st = kvp_transfer(s, id, src, T0, err);
        if (src == T1) s->n_loading_t1--;
        if (!st) *loaded = true;
    }
    s->blk[id].busy = false;
    pthread_cond_broadcast(&s->cv);
    return st;
}

// --- copy engine: prefetch workers ----------------------------------------------

enum { READER_TAKES = 2 }; // queued entries a reader takes after each release where no copy thread copies in memory

// Copies planned block id (only on disk, not busy) up to the host tier if T1 has room, or a copy it may drop
// or evict: a duplicate of a T0 block, or a block of a later plan rank.
static void stage_t1(kv_paged *s, int64_t id) {
    pblock *B = &s->blk[id];
    if (!s->tier[T1].present || B->slot[T1] >= 0 || B->slot[T2] < 0 || B->busy || B->prank == INT64_MAX) return;
    B->busy = true;
    kvt_err e;
    kvt_status st = KVT_OK;
    const kvt_tier_store *H = &s->tier[T1];
    if (H->n_used >= H->max_slots) {
        const int64_t dup = kvp_t1_duplicate(s);
        const int64_t v = dup >= 0 ? -1 : kvp_pick_victim(s, T1, INT64_MAX, s->blk[id].prank, -1);
        if (dup >= 0) kvp_drop_copy(s, dup, T1);
        else if (v < 0) st = KVT_ERR_BUDGET;
        else st = kvp_evict(s, v, T1, &e);
    }
    if (!st && H->n_used < H->max_slots) st = kvp_transfer(s, id, T2, T1, &e);
    s->blk[id].busy = false;
    pthread_cond_broadcast(&s->cv);
}

int64_t kvp_queue_pop(kv_paged *s) {
    const int64_t id = s->q[s->q_head];
    s->q_head = (s->q_head + 1) % s->q_cap;
    s->q_len--;
    atomic_store_explicit(&s->q_avail, s->q_len, memory_order_relaxed);
    s->st.io_items++;
    pblock *B = &s->blk[id];
    s->q_disk -= B->qdisk;
    B->queued = B->qplan = B->qattn = B->qdisk = B->qlate = false;
    return id;
}

// Takes the queue's head and handles it (the mutex held; it is released during the copy): loads the block into the
// fast tier if it is still below it and a victim may go (a planned block that finds no room comes up from disk to the
// host tier at least). An error here is reported again by the acquire that needs the block.
static void queue_take(kv_paged *s) {
    const bool plan = s->blk[s->q[s->q_head]].qplan, attn = s->blk[s->q[s->q_head]].qattn;
    const int64_t id = kvp_queue_pop(s);
    pblock *B = &s->blk[id];
    if (B->refs <= 0 || B->busy || B->slot[T0] >= 0) {
        s->st.io_idle++;
        if (s->q_len == 0) pthread_cond_broadcast(&s->cv);
        return;
    }
    kvt_err e;
    bool loaded;
    if (++s->n_io_busy > s->st.io_busy_max) s->st.io_busy_max = s->n_io_busy;
    kvt_status st = load(s, id, false, plan ? INT64_MAX : next_use(s, &s->blk[id]), attn, &loaded, &e);
    if (!st && loaded) {
        s->st.prefetches++;
        s->blk[id].pf_unread = true;
        s->blk[id].noroom = false;
    } else if (!st && plan) stage_t1(s, id);
    if (!loaded) {
        s->st.io_idle++;
        if (!st && !plan && !attn) {
            s->blk[id].noroom = true;
            s->st.pf_noroom++;
        }
    }
    s->n_io_busy--;
    pthread_cond_broadcast(&s->cv);
}

static void *io_main(void *arg) {
    kv_paged *s = arg;
    pthread_mutex_lock(&s->mu);
    int64_t c0 = -1; // thread CPU time when it last woke with work (io_cpu_ms), -1 while idle
    s->n_io_awake++;
    for (;;) {
        if (s->q_len == 0 && c0 >= 0) {
            s->st.io_cpu_ms += (double)(kvt_thread_cpu_ns() - c0) / 1e6;
            c0 = -1;
        }
        // sleep with nothing queued, or while more threads are awake than the queue wants (kvp_io_target)
        // (asleep until it takes a wake token: kvp_queue_wake hands out no more tokens than threads asleep)
        while (!s->stop && (s->q_len == 0 || s->n_io_awake > kvp_io_target(s))) {
            s->n_io_awake--;
            while (!s->stop && s->io_tokens == 0) pthread_cond_wait(&s->qcv, &s->mu);
            if (s->io_tokens > 0) s->io_tokens--;
            s->n_io_awake++;
        }
        if (s->stop) break;
        if (c0 < 0) c0 = kvt_thread_cpu_ns();
        if (!kvp_queue_take_disk(s)) queue_take(s); // disk loads in a batch (kv_paged_io.c), else one entry
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// Readers run the copy engine's memory copies themselves where it keeps no thread at work on them (io_mem 0,
// `--kv-copy-threads 0`): up to `max` queued entries, taken by the calling reader (the mutex held). On a CPU whose
// cores all run compute threads, a copy thread can only run by preempting one of them, and the compute pool's other
// threads then wait for it at the next barrier (spinning: the pool's spin was 14% of the decode samples at rho 5,
// docs/log/BENCHMARKS-serve.md 2026-11-28 evening); a reader that copies between its own blocks does the same work where the
// pool's task claiming balances it. The queue, its order, the plan's entries and every victim are the copy engine's
// own: only the thread that runs them changes. The time goes to io_cpu_ms (wall time, as a memory copy's).
static void readers_take(kv_paged *s, int64_t max) {
    if (s->io_mem > 0 || s->q_len == 0) return;
    const int64_t t0 = kvt_time_ns();
    for (int64_t k = 0; k < max && s->q_len > 0; k++) queue_take(s);
    s->st.io_cpu_ms += (double)(kvt_time_ns() - t0) / 1e6;
}

bool kvt_kv_paged_help(void *kv) {
    kv_paged *s = kv;
    if (!s || s->base.ops != &kvp_ops || s->io_mem > 0 || s->n_io == 0 ||
        atomic_load_explicit(&s->q_avail, memory_order_relaxed) == 0 || pthread_mutex_trylock(&s->mu)) {
        return false;
    }
    // a block only on disk is left to the copy threads woken for it (a read from the device may wait: not for a pool
    // thread that its job may need any moment)
    const bool take = s->q_len > 0 && !s->stop && !s->blk[s->q[s->q_head]].qdisk;
    if (take) {
        const int64_t t0 = kvt_time_ns();
        queue_take(s);
        const double ms = (double)(kvt_time_ns() - t0) / 1e6;
        s->st.io_cpu_ms += ms;
        s->st.io_help_ms += ms;
    }
    pthread_mutex_unlock(&s->mu);
    return take;
}

// After entries were queued: wakes as many copy threads as the queue wants at work, less those awake (a thread awake
// takes the next entry before it sleeps) and those signalled but not running yet (io_tokens: a thread leaves its
// sleep only by taking one; without them a signalled thread not yet running counted as asleep, so each push in the
// meantime woke one more, which woke only to sleep again). A broadcast for every push woke all of them for
// each block a reader's prefetch queued, and all but one went back to sleep after taking the mutex in turn; one
// signal per entry still woke a thread per block, 2000-3000 sleeps and wake-ups per iteration under
// oversubscription (kvtier_context_switches_total), each a wait for a core on 2 vCPUs.
//
// How many: kvp_io_target. A copy between memory tiers is a memcpy and its bookkeeping under the store's mutex, so
// it is CPU-bound: with the readers (compute threads) on every core, each copy thread beyond io_mem only takes a core
// from them and waits for the mutex (4 copy threads beside -t 2 on 2 vCPUs: ~100 ms of mutex waits and ~3300 context
// switches per serving iteration at rho 5, docs/log/BENCHMARKS-serve.md). A block only on disk waits for the device instead,
// so each such block queued may keep one more thread at work.
int64_t kvp_io_target(const kv_paged *s) {
    int64_t n = s->io_mem + s->q_disk;
    if (n > s->q_len) n = s->q_len;
    return n < s->n_io ? n : s->n_io;
}

void kvp_queue_wake(kv_paged *s) {
    const int64_t want = kvp_io_target(s) - s->n_io_awake - s->io_tokens;
    for (int64_t i = 0; i < want; i++) {
        s->io_tokens++;
        pthread_cond_signal(&s->qcv);
    }
}

void kvp_queue_push(kv_paged *s, int64_t id) {
    if (s->q_len == s->q_cap) {
        int64_t cap = s->q_cap ? s->q_cap * 2 : 64;
        int64_t *q = malloc((size_t)cap * sizeof *q);
        if (!q) return; // prefetch is a hint: dropping it is safe
        for (int64_t i = 0; i < s->q_len; i++) q[i] = s->q[(s->q_head + i) % s->q_cap];
        free(s->q);
        s->q = q;
        s->q_cap = cap;
        s->q_head = 0;
    }
    s->q[(s->q_head + s->q_len) % s->q_cap] = id;
    s->q_len++;
    atomic_store_explicit(&s->q_avail, s->q_len, memory_order_relaxed);
    pblock *B = &s->blk[id];
    B->queued = true;
    B->qdisk = B->slot[T0] < 0 && B->slot[T1] < 0 && B->slot[T2] >= 0;
    s->q_disk += B->qdisk;
}

// Queues the `prefetch` blocks that follow (layer, group, b) of seq in the decode schedule (kvt_prefetch_window,
// which the simulator runs too).
static void shard_span(const void *ud, int32_t shard, int64_t *first, int64_t *end) {
    const pshard *sh = &((const pseq *)ud)->sh[shard];
    if (sh->caller_fetch) { // sparse decoding reads a selection of this shard and prefetches it itself
        *first = *end = 0;
        return;
    }
    *first = sh->n_drop;
    *end = sh->n_blk;
}

static void schedule_prefetch(kv_paged *s, const pseq *q, int32_t shard, int64_t b) {
    if (s->p.prefetch <= 0 || s->n_io == 0 || !s->pf_win) return;
    const int32_t n = kvt_prefetch_window(s->n_shard, shard_span, q, shard, b, s->p.prefetch, s->pf_win);
    for (int32_t k = 0; k < n; k++) {
        const int64_t id = q->sh[s->pf_win[k].shard].ids[s->pf_win[k].block];
        const pblock *B = &s->blk[id];
        if (B->slot[T0] >= 0 || B->busy || B->queued) continue;
        kvp_queue_push(s, id);
    }
    kvp_queue_wake(s);
}

// --- blocks and tables -----------------------------------------------------------

int64_t kvp_block_new(kv_paged *s, int32_t layer, int32_t group, int64_t index) {
    int64_t id;
    bool in_dl = false; // a reused id may still be listed in dl (each id once: the entry stays the block's)
    if (s->n_free_blk > 0) {
        id = s->free_blk[--s->n_free_blk];
        in_dl = s->blk[id].in_dl;
    } else {
        if (s->n_blk == s->cap_blk) {
            int64_t cap = s->cap_blk ? s->cap_blk * 2 : 256;
            pblock *nb = realloc(s->blk, (size_t)cap * sizeof *nb);
            if (!nb) return -1;
            s->blk = nb;
            s->cap_blk = cap;
        }
        id = s->n_blk++;
    }
    pblock *B = &s->blk[id];
    memset(B, 0, sizeof *B);
    B->in_dl = in_dl;
    B->refs = 1;
    B->layer = layer;
    B->group = group;
    B->index = index;
    for (int t = 0; t < KVT_TIER_COUNT; t++) B->slot[t] = -1;
    B->rpos[0] = B->rpos[1] = -1;
    B->prank = INT64_MAX;
    return id;
}

void kvp_block_unref(kv_paged *s, int64_t id) {
    while (s->blk[id].busy) wait_timed(s, &s->st.wait_busy_ms);
    pblock *B = &s->blk[id];
    if (--B->refs > 0) return;
    for (int t = 0; t < KVT_TIER_COUNT; t++) kvp_drop_copy(s, id, t);
    s->q_disk -= B->qdisk; // still queued: the id may be reused before a copy thread takes the entry
    B->qdisk = false;
    if (s->n_free_blk == s->cap_free_blk) {
        int64_t cap = s->cap_free_blk ? s->cap_free_blk * 2 : 256;
        int64_t *f = realloc(s->free_blk, (size_t)cap * sizeof *f);
        if (!f) return; // the id is lost, its memory was released
        s->free_blk = f;
        s->cap_free_blk = cap;
    }
    s->free_blk[s->n_free_blk++] = id;
}

static void shard_truncate(kv_paged *s, pshard *sh, int64_t n_keep) {
    int64_t nb = (n_keep + s->base.block_tokens - 1) / s->base.block_tokens;
    while (sh->n_blk > nb) {
        const int64_t id = sh->ids[--sh->n_blk];
        if (id >= 0) kvp_block_unref(s, id);
    }
    if (sh->n_drop > sh->n_blk) sh->n_drop = sh->n_blk;
    if (sh->n_tok > n_keep) sh->n_tok = n_keep;
}

// Sliding window W: queries from position pos on see no position before pos - W + 1, so the blocks
// wholly before it are freed (every tier).
static void shard_slide(kv_paged *s, pshard *sh, int64_t w, int64_t pos) {
    const int64_t first = pos - w + 1, keep = first > 0 ? first / s->base.block_tokens : 0;
    for (; sh->n_drop < keep && sh->n_drop < sh->n_blk; sh->n_drop++) {
        kvp_block_unref(s, sh->ids[sh->n_drop]);
        sh->ids[sh->n_drop] = -1;
    }
}

int64_t kvt_kv_paged_shard_blocks(int64_t positions, int32_t window, int64_t block_tokens, int64_t max_append) {
    if (positions <= 0 || block_tokens <= 0) return 0;
    const int64_t all = (positions + block_tokens - 1) / block_tokens;
    if (window <= 0) return all;
    // shard_slide at pos keeps blocks floor((pos - W + 1) / bt) .. floor((pos + max_append - 1) / bt): a span of
    // W + max_append - 2 positions, which touches at most ceil(span / bt) + 1 blocks
    const int64_t span = (int64_t)window + (max_append > 1 ? max_append : 1) - 2;
    const int64_t win = (span + block_tokens - 1) / block_tokens + 1;
    return win < all ? win : all;
}

bool kvp_shard_push(pshard *sh, int64_t id) {
    if (sh->n_blk == sh->cap) {
        int64_t cap = sh->cap ? sh->cap * 2 : 16;
        int64_t *ids = realloc(sh->ids, (size_t)cap * sizeof *ids);
        if (!ids) return false;
        sh->ids = ids;
        sh->cap = cap;
    }
    sh->ids[sh->n_blk++] = id;
    return true;
}

pseq *kvp_seq_get(kv_paged *s, int32_t seq, kvt_err *err) {
    if (seq < 0 || seq >= s->n_seq || !s->seq[seq].live) {
        kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV sequence %d does not exist", seq);
        return NULL;
    }
    return &s->seq[seq];
}

// Pins block id in T0, loading it if needed. *stalled: whether the caller had to wait.
static kvt_status pin_block(kv_paged *s, int64_t id, int64_t *stall_t0, kvt_err *err) {
    for (;;) {
        pblock *B = &s->blk[id];
        if (B->busy) {
            if (!*stall_t0) *stall_t0 = kvt_time_ns();
            wait_timed(s, &s->st.wait_busy_ms);
            continue;
        }
        if (B->slot[T0] >= 0) {
            B->pins++;
            return KVT_OK;
        }
        if (!*stall_t0) *stall_t0 = kvt_time_ns();
        bool loaded;
        // load_ms: the reader's own load, less the time it slept in it (counted as wait_room_ms)
        const int64_t l0 = s->p.timing ? kvt_time_ns() : 0;
        const double w0 = s->st.wait_room_ms;
        kvt_status st = load(s, id, true, -1, false, &loaded, err);
        if (s->p.timing) s->st.load_ms += (double)(kvt_time_ns() - l0) / 1e6 - (s->st.wait_room_ms - w0);
        if (st) return st;
    }
}

// What a reader's miss found (kvt_kv_stats miss_*): the block's state before the reader waits for or loads it.
typedef enum { MISS_QUEUED_EARLY, MISS_QUEUED_LATE, MISS_INFLIGHT, MISS_EVICTED, MISS_COLD } miss_kind;

static miss_kind miss_kind_of(const pblock *B) {
    if (B->busy) return MISS_INFLIGHT;
    if (B->queued) return B->qlate ? MISS_QUEUED_LATE : MISS_QUEUED_EARLY;
    return B->lost ? MISS_EVICTED : MISS_COLD;
}

static void miss_count(kv_paged *s, miss_kind k) {
    int64_t *c[] = {&s->st.miss_queued_early, &s->st.miss_queued_late, &s->st.miss_inflight, &s->st.miss_evicted,
                    &s->st.miss_cold};
    (*c[k])++;
}

static void unpin(kv_paged *s, int64_t id) {
    if (--s->blk[id].pins == 0) pthread_cond_broadcast(&s->cv);
}

// --- the kvt_kv_ops table ----------------------------------------------------------

// The acquire; with ready, only a block in the fast tier and not busy now (*ready false, nothing done or counted,
// else).
static kvt_status acquire_as(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b, bool *ready,
                             kvt_kv_view *out, kvt_err *err) {
    kv_paged *s = (kv_paged *)kv;
    const int64_t a0 = kvp_lock_timed(s);
    kvt_status st = KVT_OK;
    pseq *q = kvp_seq_get(s, seq, err);
    if (!q) st = KVT_ERR_INVALID_ARG;
    else if (layer < 0 || layer >= kv->n_layer || group < 0 || group >= kv->n_group) {
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV shard (layer %d, group %d) out of range", layer, group);
    }
    pshard *sh = st ? NULL : &q->sh[layer * kv->n_group + group];
    if (!st && (b < 0 || b >= sh->n_blk)) {
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV block %lld of layer %d group %d not written (%lld blocks)",
                        (long long)b, layer, group, (long long)sh->n_blk);
    } else if (!st && sh->ids[b] < 0) {
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG,
                        "KV block %lld of layer %d group %d was freed: it lies outside the layer's sliding window of %d "
                        "positions", (long long)b, layer, group, s->window[layer]);
    }
    if (st) {
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    int64_t id = sh->ids[b], t0 = 0;
    if (ready && !(*ready = !s->blk[id].busy && s->blk[id].slot[T0] >= 0)) { // not there now
        pthread_mutex_unlock(&s->mu);
        return KVT_OK;
    }
    const miss_kind mk = miss_kind_of(&s->blk[id]);
    // the reader joins the frontier before it waits for the block: else, while its load is under way, the
    // frontier follows the other readers past the block, which then looks needed last and is evicted
    reader_at(s, sched_key(s, &s->blk[id]));
    if ((st = pin_block(s, id, &t0, err))) {
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    pblock *B = &s->blk[id];
    B->last_use = ++s->tick;
    B->uses++;
    B->dropped = B->pf_unread = B->lost = B->noroom = false;
    if (t0) {
        s->st.stall_ms += (double)(kvt_time_ns() - t0) / 1e6;
        s->st.misses++;
        miss_count(s, mk);
    } else s->st.hits++;
    uint8_t *d = kvt_tier_ptr(&s->tier[T0], B->slot[T0]);
    // pin_block may have let the mutex go (a load, a wait), and the sequence-calls thread may have grown s->seq
    // meanwhile (a fork, a new sequence: realloc): q is looked up again
    q = &s->seq[seq];
    sh = &q->sh[layer * kv->n_group + group];
    schedule_prefetch(s, q, layer * kv->n_group + group, b);
    out->pos0 = b * kv->block_tokens;
    out->n = sh->n_tok - out->pos0 < kv->block_tokens ? sh->n_tok - out->pos0 : kv->block_tokens;
    out->k = d; // [group_heads, block_tokens, head_dim]: head-major (kv.h)
    out->v = d + kv->block_tokens * s->k_row;
    out->k_stride = s->k_hrow;
    out->v_stride = s->v_hrow;
    out->k_hstride = kv->block_tokens * s->k_hrow;
    out->v_hstride = kv->block_tokens * s->v_hrow;
    if (a0) s->st.acquire_ms += (double)(kvt_time_ns() - a0) / 1e6;
    pthread_mutex_unlock(&s->mu);
    return KVT_OK;
}

static kvt_status paged_acquire(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b, kvt_kv_view *out,
                                kvt_err *err) {
    return acquire_as(kv, seq, layer, group, b, NULL, out, err);
}

int64_t kvt_kv_paged_fast_slots(const kvt_kv *kv) {
    return kv->ops == &kvp_ops ? ((const kv_paged *)kv)->tier[T0].max_slots : INT64_MAX;
}

kvt_status kvt_kv_paged_acquire_ready(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b,
                                      kvt_kv_view *out, bool *ready, kvt_err *err) {
    *ready = true;
    if (kv->ops != &kvp_ops) return kv->ops->acquire(kv, seq, layer, group, b, out, err);
    return acquire_as(kv, seq, layer, group, b, ready, out, err);
}

static void paged_release(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b) {
    kv_paged *s = (kv_paged *)kv;
    kvp_lock_timed(s);
    pseq *q = kvp_seq_get(s, seq, NULL);
    if (q) {
        pshard *sh = &q->sh[layer * kv->n_group + group];
        if (b >= 0 && b < sh->n_blk && sh->ids[b] >= 0) {
            reader_at(s, sched_key(s, &s->blk[sh->ids[b]]) + 1);
            unpin(s, sh->ids[b]);
        }
    }
    readers_take(s, READER_TAKES); // the next blocks of the schedule, loaded between two of the reader's own
    pthread_mutex_unlock(&s->mu);
}

// Makes block b of shard sh writable in T0 and pinned: creates it, or copies it if shared (copy on write).
static kvt_status writable_block(kv_paged *s, pshard *sh, int32_t layer, int32_t group, int64_t b, int64_t prank,
                                 int64_t *out, int64_t *stall_t0, kvt_err *err) {
    kvt_status st;
    if (b == sh->n_blk) {
        if (ensure_free(s, T0, true, -1, err) < 0) return err->status;
        int64_t id = kvp_block_new(s, layer, group, b);
        int64_t slot = id < 0 ? -1 : kvt_tier_alloc(&s->tier[T0]);
        if (slot < 0 || !kvp_shard_push(sh, id) || !kvp_res_add(s, T0, id)) {
            if (slot >= 0) {
                s->blk[id].slot[T0] = slot;
                if (sh->n_blk > 0 && sh->ids[sh->n_blk - 1] == id) sh->n_blk--;
            }
            if (id >= 0) kvp_block_unref(s, id);
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV block");
        }
        s->blk[id].slot[T0] = slot;
        s->blk[id].pins = 1;
        s->blk[id].prank = prank;
        *out = id;
        return KVT_OK;
    }
    int64_t id = sh->ids[b];
    if ((st = pin_block(s, id, stall_t0, err))) return st;
    if (s->blk[id].refs == 1) {
        *out = id;
        return KVT_OK;
    }
    // shared: copy into a block of our own
    if (ensure_free(s, T0, true, -1, err) < 0) {
        unpin(s, id);
        return err->status;
    }
    int64_t nid = kvp_block_new(s, layer, group, b);
    int64_t slot = nid < 0 ? -1 : kvt_tier_alloc(&s->tier[T0]);
    if (slot < 0 || !kvp_res_add(s, T0, nid)) {
        if (nid >= 0) {
            s->blk[nid].slot[T0] = slot;
            kvp_block_unref(s, nid);
        }
        unpin(s, id);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV block");
    }
    s->blk[nid].slot[T0] = slot;
    s->blk[nid].pins = 1;
    s->blk[nid].prank = prank;
    memcpy(kvt_tier_ptr(&s->tier[T0], slot), kvt_tier_ptr(&s->tier[T0], s->blk[id].slot[T0]), (size_t)s->block_bytes);
    s->st.moved_bytes[T0][T0] += s->block_bytes;
    s->st.moved_count[T0][T0]++;
    unpin(s, id);
    kvp_block_unref(s, id);
    sh->ids[b] = nid;
    *out = nid;
    return KVT_OK;
}

static kvt_status paged_append(kvt_kv *kv, int32_t seq, int32_t layer, int64_t pos, int64_t n, const float *k,
                               const float *v, kvt_err *err) {
    kv_paged *s = (kv_paged *)kv;
    const int64_t bt = kv->block_tokens, gh = kv->group_heads;
    const int64_t kw = (int64_t)kv->n_head_kv * kv->head_dim, vw = (int64_t)kv->n_head_kv * kv->head_dim_v;
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    if (layer < 0 || layer >= kv->n_layer) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV layer %d out of range", layer);
    if (pos < 0 || n < 0 || pos + n > kv->n_ctx) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "KV cache full: positions [%lld, %lld) exceed context %lld", (long long)pos,
                          (long long)(pos + n), (long long)kv->n_ctx);
    }
    pthread_mutex_lock(&s->mu);
    kvt_status st = KVT_OK;
    int64_t t0 = 0;
    pseq *q = kvp_seq_get(s, seq, err);
    if (!q) st = KVT_ERR_INVALID_ARG;
    // the decode schedule reads this layer's blocks right after the append: the frontier moves to its
    // start and the readers that follow are tracked afresh
    if (!st) {
        s->cursor = (int64_t)layer * kv->n_group * s->nb_ctx;
        s->n_rd = 0;
    }
    for (int32_t g = 0; !st && g < kv->n_group; g++) {
        pshard *sh = &q->sh[layer * kv->n_group + g];
        if (pos > sh->n_tok) {
            st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV append at position %lld leaves a gap (layer %d holds %lld)",
                            (long long)pos, layer, (long long)sh->n_tok);
            break;
        }
        if (pos < sh->n_tok) shard_truncate(s, sh, pos);
        const int64_t w = s->window[layer];
        if (w > 0 && sh->n_drop > 0 && pos - w + 1 < sh->n_drop * bt) {
            st = kvt_errorf(err, KVT_ERR_INVALID_ARG,
                            "KV append at position %lld of layer %d: its sliding window of %lld positions reaches "
                            "positions before %lld, already freed", (long long)pos, layer, (long long)w,
                            (long long)(sh->n_drop * bt));
            break;
        }
        if (w > 0) shard_slide(s, sh, w, pos);
        for (int64_t off = 0; off < n;) {
            const int64_t p = pos + off, b = p / bt, r = p % bt;
            const int64_t cnt = n - off < bt - r ? n - off : bt - r;
            int64_t id = -1;
            if ((st = writable_block(s, sh, layer, g, b, q->prank, &id, &t0, err))) break;
            kvp_drop_copy(s, id, T1); // the lower copies become stale
            kvp_drop_copy(s, id, T2);
            uint8_t *d = kvt_tier_ptr(&s->tier[T0], s->blk[id].slot[T0]);
            pthread_mutex_unlock(&s->mu);
            uint8_t *kd = d + r * s->k_hrow, *vd = d + bt * s->k_row + r * s->v_hrow; // head-major block
            for (int64_t i = 0; i < cnt; i++) {
                for (int64_t h = 0; h < gh; h++) {
                    ops->from_float(k + (off + i) * kw + (g * gh + h) * kv->head_dim, kd + h * bt * s->k_hrow + i * s->k_hrow,
                                    kv->head_dim);
                    ops->from_float(v + (off + i) * vw + (g * gh + h) * kv->head_dim_v,
                                    vd + h * bt * s->v_hrow + i * s->v_hrow, kv->head_dim_v);
                }
            }
            pthread_mutex_lock(&s->mu);
            unpin(s, id);
            sh->n_tok = p + cnt;
            off += cnt;
        }
    }
    if (t0) s->st.stall_ms += (double)(kvt_time_ns() - t0) / 1e6;
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void paged_truncate(kvt_kv *kv, int32_t seq, int64_t n_keep) {
    kv_paged *s = (kv_paged *)kv;
    pthread_mutex_lock(&s->mu);
    pseq *q = kvp_seq_get(s, seq, NULL);
    for (int32_t i = 0; q && i < s->n_shard; i++) shard_truncate(s, &q->sh[i], n_keep < 0 ? 0 : n_keep);
    pthread_mutex_unlock(&s->mu);
}

static kvt_status seq_alloc(kv_paged *s, int32_t *out, kvt_err *err) {
    int32_t i = 0;
    while (i < s->n_seq && s->seq[i].live) i++;
    if (i == s->n_seq) {
        pseq *ns = realloc(s->seq, (size_t)(s->n_seq + 1) * sizeof *ns);
        if (!ns) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV sequence");
        s->seq = ns;
        s->seq[s->n_seq++] = (pseq){false, NULL, INT64_MAX};
    }
    pshard *sh = calloc((size_t)s->n_shard, sizeof *sh);
    if (!sh) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV sequence");
    s->seq[i] = (pseq){true, sh, INT64_MAX};
    *out = i;
    return KVT_OK;
}

static void seq_release(kv_paged *s, int32_t seq) {
    pseq *q = &s->seq[seq];
    for (int32_t i = 0; i < s->n_shard; i++) {
        shard_truncate(s, &q->sh[i], 0);
        free(q->sh[i].ids);
    }
    free(q->sh);
    q->sh = NULL;
    q->live = false;
}

static kvt_status paged_seq_fork(kvt_kv *kv, int32_t src, int32_t *dst, kvt_err *err) {
    kv_paged *s = (kv_paged *)kv;
    pthread_mutex_lock(&s->mu);
    kvt_status st = KVT_OK;
    int32_t d = -1;
    if (!kvp_seq_get(s, src, err)) st = KVT_ERR_INVALID_ARG;
    else st = seq_alloc(s, &d, err);
    for (int32_t i = 0; !st && i < s->n_shard; i++) {
        const pshard *a = &s->seq[src].sh[i];
        pshard *b = &s->seq[d].sh[i];
        b->ids = malloc((size_t)(a->n_blk ? a->n_blk : 1) * sizeof *b->ids);
        if (!b->ids) {
            st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory forking KV sequence %d", src);
            break;
        }
        b->cap = a->n_blk ? a->n_blk : 1;
        b->n_blk = a->n_blk;
        b->n_tok = a->n_tok;
        b->n_drop = a->n_drop;
        for (int64_t j = 0; j < a->n_blk; j++) {
            b->ids[j] = a->ids[j];
            if (a->ids[j] >= 0) s->blk[a->ids[j]].refs++;
        }
    }
    if (st && d >= 0) seq_release(s, d);
    else if (!st) *dst = d;
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void paged_seq_free(kvt_kv *kv, int32_t seq) {
    kv_paged *s = (kv_paged *)kv;
    pthread_mutex_lock(&s->mu);
    if (kvp_seq_get(s, seq, NULL)) seq_release(s, seq);
    pthread_mutex_unlock(&s->mu);
}

static void paged_stats(kvt_kv *kv, kvt_kv_stats *out) {
    kv_paged *s = (kv_paged *)kv;
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    for (int t = 0; t < KVT_TIER_COUNT; t++) {
        const kvt_tier_store *T = &s->tier[t];
        out->budget_bytes[t] = T->present ? T->budget : 0;
        out->peak_bytes[t] = T->peak_used * T->slot_bytes;
        out->used_bytes[t] = T->n_used * T->slot_bytes;
    }
    out->block_bytes = s->block_bytes;
    if (s->tier[T2].present && s->tier[T2].ring) out->io_ring_cancels = kvt_uring_stalls(s->tier[T2].ring);
    pthread_mutex_unlock(&s->mu);
}

static void paged_free(kvt_kv *kv) {
    kv_paged *s = (kv_paged *)kv;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    kvp_late_finish(s); // a late batch in flight: its buffers are about to go
    s->stop = true;
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_io; i++) pthread_join(s->io[i], NULL);
    free(s->io);
    for (int32_t i = 0; i < s->n_seq; i++) {
        if (s->seq[i].live) seq_release(s, i);
    }
    free(s->seq);
    for (int t = 0; t < KVT_TIER_COUNT; t++) kvt_tier_free(&s->tier[t]);
    for (int64_t i = 0; i < s->n_bounce; i++) free(s->bounce[i]);
    free(s->bounce);
    free(s->res[0]);
    free(s->res[1]);
    free(s->rd);
    free(s->blk);
    free(s->free_blk);
    free(s->q);
    free(s->dl);
    free(s->late_ids);
    free(s->late_io);
    free(s->pf_win);
    pthread_cond_destroy(&s->qcv);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->window);
    free(s);
}

const kvt_kv_ops kvp_ops = {"paged",        paged_append,   paged_acquire, paged_release, paged_truncate,
                                       paged_seq_fork, paged_seq_free, paged_stats,   paged_free,
                                       .free_reads = 0};

kvt_status kvt_kv_paged_init(const kvt_kv_paged_params *p, kvt_kv **out, kvt_err *err) {
    *out = NULL;
    if (p->type != KVT_TYPE_F16 && p->type != KVT_TYPE_F32) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "KV cache type %s not supported (f16, f32 are)", kvt_type_name(p->type));
    }
    if (p->n_ctx <= 0 || p->block_tokens <= 0 || p->n_layer <= 0 || p->n_head_kv <= 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV store needs n_ctx, block_tokens, n_layer, n_head_kv > 0");
    }
    const int32_t gh = p->group_heads > 0 ? p->group_heads : p->n_head_kv;
    if (p->n_head_kv % gh) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV group of %d heads does not divide the %d KV heads", gh, p->n_head_kv);
    }
    const kvt_evict_policy *pol = kvt_evict_policy_find(p->evict ? p->evict : "lru");
    if (!pol) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "unknown eviction policy '%s' (%s)", p->evict, kvt_evict_policy_names());
    kv_paged *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->window = calloc((size_t)p->n_layer, sizeof *s->window);
    if (!s->window) {
        free(s);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    for (int32_t l = 0; p->layer_window && l < p->n_layer; l++) s->window[l] = p->layer_window[l] > 0 ? p->layer_window[l] : 0;
    s->p.layer_window = NULL; // the copy above is the store's
    s->pol = pol;
    s->base = (kvt_kv){&kvp_ops, p->type, p->n_layer, p->n_head_kv, p->head_dim, p->head_dim_v, p->block_tokens,
                       p->n_ctx,     gh,      p->n_head_kv / gh};
    s->k_row = kvt_row_size(p->type, (int64_t)gh * p->head_dim);
    s->k_hrow = kvt_row_size(p->type, p->head_dim);
    s->v_hrow = kvt_row_size(p->type, p->head_dim_v);
    s->v_row = kvt_row_size(p->type, (int64_t)gh * p->head_dim_v);
    s->block_bytes = p->block_tokens * (s->k_row + s->v_row);
    s->n_shard = p->n_layer * s->base.n_group;
    s->nb_ctx = (p->n_ctx + p->block_tokens - 1) / p->block_tokens;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    // the store's mutex is held for microseconds (a victim search, a block's bookkeeping) by readers and copy threads
    // alike: a waiter spins a little before it sleeps, instead of a futex sleep and wake-up per contended acquire
    // (at rho 5 in serving with `--kv-copy-threads 0`: lock waits 6-10 against 14-16 ms per iteration, voluntary context
    // switches 200-280 against 610-790; docs/log/BENCHMARKS-serve.md 2026-11-28 evening)
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&s->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->qcv, NULL);
    for (int t = 0; t < KVT_TIER_COUNT; t++) s->tier[t].fd = -1;
    kvt_status st = kvt_tier_mem_init(&s->tier[T0], KVT_TIER_FAST, p->fast_bytes, s->block_bytes, err);
    int32_t need = p->n_readers > 2 ? p->n_readers : 2;
    if (!st && s->tier[T0].max_slots < need) {
        st = kvt_errorf(err, KVT_ERR_BUDGET,
                        "--kv-fast %lld bytes hold %lld KV blocks of %lld bytes; at least %d are needed (one per "
                        "thread reading KV, 2 for copy-on-write): raise --kv-fast or lower --kv-block",
                        (long long)p->fast_bytes, (long long)s->tier[T0].max_slots, (long long)s->tier[T0].slot_bytes,
                        need);
    }
    if (!st && p->host_bytes != 0) st = kvt_tier_mem_init(&s->tier[T1], KVT_TIER_HOST, p->host_bytes, s->block_bytes, err);
    if (!st && p->disk_dir) {
        st = kvt_tier_disk_init(&s->tier[T2], p->disk_dir, p->disk_max, s->block_bytes, p->keep_files, p->no_uring, err);
        s->tier[T2].fail_read_at = p->fault_read_at;
        s->tier[T2].fail_write_at = p->fault_write_at;
    }
    int32_t seq0;
    if (!st) st = seq_alloc(s, &seq0, err);
    s->victim_window = p->victim_window > 0 ? p->victim_window : VICTIM_SAMPLE;
    bool lower = s->tier[T1].present || s->tier[T2].present;
    int n_io = lower && p->prefetch > 0 ? (p->n_io_threads > 0 ? p->n_io_threads : 4) : 0;
    if (p->io_mem_threads > 0) s->io_mem = p->io_mem_threads;
    else if (p->io_mem_threads < 0) s->io_mem = 0; // the readers run the memory copies (readers_take)
    else {
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        // none where the readers take every core: a copy thread would run only by preempting one of them (and the
        // compute pool's others spin at the next barrier meanwhile); the readers and the pool's idle threads copy
        s->io_mem = cpus > p->n_readers ? (int)(cpus - p->n_readers) : 0;
    }
    if (!st && n_io > 0) {
        s->pf_win = malloc((size_t)p->prefetch * sizeof *s->pf_win);
        if (!s->pf_win) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    if (!st && n_io > 0) {
        s->io = calloc((size_t)n_io, sizeof *s->io);
        if (!s->io) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
        for (int i = 0; !st && i < n_io; i++) {
            if (pthread_create(&s->io[i], NULL, io_main, s)) st = kvt_errorf(err, KVT_ERR_NOMEM, "cannot start a KV copy thread");
            else s->n_io++;
        }
    }
    if (st) {
        paged_free(&s->base);
        return st;
    }
    *out = &s->base;
    return KVT_OK;
}

const char *kvt_kv_paged_disk_path(kvt_kv *kv) {
    kv_paged *s = (kv_paged *)kv;
    return kv->ops == &kvp_ops && s->tier[T2].present ? s->tier[T2].path : NULL;
}

const char *kvt_kv_paged_disk_engine(kvt_kv *kv) {
    kv_paged *s = (kv_paged *)kv;
    return kv->ops == &kvp_ops && s->tier[T2].present ? kvt_tier_disk_engine(&s->tier[T2]) : NULL;
}

int64_t kvt_kv_paged_disk_offset(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return -1;
    pthread_mutex_lock(&s->mu);
    int64_t off = -1;
    pseq *q = kvp_seq_get(s, seq, NULL);
    if (q && layer >= 0 && layer < kv->n_layer && group >= 0 && group < kv->n_group) {
        pshard *sh = &q->sh[layer * kv->n_group + group];
        if (b >= 0 && b < sh->n_blk && sh->ids[b] >= 0 && s->blk[sh->ids[b]].slot[T2] >= 0) {
            off = s->blk[sh->ids[b]].slot[T2] * s->tier[T2].slot_bytes;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return off;
}

bool kvt_kv_paged_wants_attn_mass(const kvt_kv *kv) {
    return kv->ops == &kvp_ops && !strcmp(((const kv_paged *)kv)->pol->name, "attn-ema");
}

// The block id of (seq, layer, group, b), or -1 (the mutex held).
static int64_t block_at(kv_paged *s, int32_t seq, int32_t layer, int32_t group, int64_t b) {
    const pseq *q = kvp_seq_get(s, seq, NULL);
    if (!q || layer < 0 || layer >= s->base.n_layer || group < 0 || group >= s->base.n_group) return -1;
    const pshard *sh = &q->sh[layer * s->base.n_group + group];
    return b >= sh->n_drop && b < sh->n_blk ? sh->ids[b] : -1;
}

#define ATTN_EMA_ALPHA 0.5f // weight of the newest mass (the simulator's attn_alpha)

void kvt_kv_paged_attn_mass(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b0, const float *mass, int64_t n) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    for (int64_t i = 0; i < n; i++) {
        const int64_t id = block_at(s, seq, layer, group, b0 + i);
        if (id >= 0) s->blk[id].attn_ema = ATTN_EMA_ALPHA * mass[i] + (1.0f - ATTN_EMA_ALPHA) * s->blk[id].attn_ema;
    }
    pthread_mutex_unlock(&s->mu);
}

// attn-ema's prefetch (kvt_attn_prefetch_wanted, the simulator's rule too): queued with qattn, so that io_main's
// load admits the block only if the policy ranks a resident block below it.
void kvt_kv_paged_attn_prefetch(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b0, int64_t n, double share) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops || s->n_io == 0 || strcmp(s->pol->name, "attn-ema")) return;
    bool pushed = false;
    pthread_mutex_lock(&s->mu);
    for (int64_t i = 0; i < n; i++) {
        const int64_t id = block_at(s, seq, layer, group, b0 + i);
        if (id < 0) continue;
        pblock *B = &s->blk[id];
        if (B->slot[T0] >= 0 || B->busy || B->queued || B->refs <= 0 || !kvt_attn_prefetch_wanted(B->attn_ema, share)) continue;
        kvp_queue_push(s, id);
        B->qattn = B->queued; // queue_push may drop it (out of memory)
        pushed |= B->queued;
    }
    if (pushed) kvp_queue_wake(s);
    pthread_mutex_unlock(&s->mu);
}

float kvt_kv_paged_block_attn_ema(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, int64_t b) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return -1.0f;
    pthread_mutex_lock(&s->mu);
    const int64_t id = block_at(s, seq, layer, group, b);
    const float e = id >= 0 ? s->blk[id].attn_ema : -1.0f;
    pthread_mutex_unlock(&s->mu);
    return e;
}

void kvt_kv_paged_drain(kvt_kv *kv) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    while (s->n_io > 0 && (s->q_len > 0 || s->n_io_busy > 0)) {
        if (s->io_mem == 0 && s->q_len > 0) readers_take(s, INT64_MAX); // no copy thread takes them: the caller does
        else kvp_cond_wait(s);
    }
    pthread_mutex_unlock(&s->mu);
}

void kvt_kv_paged_drop_cached(kvt_kv *kv) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    for (int t = T0; t <= T1; t++) {
        for (int64_t i = s->n_res[t] - 1; i >= 0; i--) {
            int64_t id = s->res[t][i];
            const pblock *B = &s->blk[id];
            bool lower = false;
            for (int u = t + 1; u < KVT_TIER_COUNT; u++) lower |= B->slot[u] >= 0;
            if (lower && !B->busy && B->pins == 0) kvp_drop_copy(s, id, t);
        }
    }
    pthread_mutex_unlock(&s->mu);
}
