// kv_paged_io.c - the copy engine's batches of disk loads (kvp_queue_take_disk, see kv_paged_impl.h).
//
// Sparse decoding hands the store about a thousand blocks of 4 KiB per token on disk (SmolLM2 at 8K, 16-position
// head-wise blocks), and a copy thread used to take them one at a time: a victim search, one io_uring submission
// (a system call and a doorbell to the device, which in a VM is an exit to the hypervisor), a sleep until the
// read completes and a wake-up, then the bookkeeping; per block. On 2 vCPUs shared with the compute threads those
// context switches and submissions cost more CPU than the reads themselves (docs/log/SPARSE-log-2.md, "The copy
// engine's disk batches"). A batch takes the queued disk loads at the queue's head in order, does for each what
// the one-at-a-time path does under the mutex (the same victim search with the same limit, the same eviction, a
// fast-tier slot), then reads them all with one submission and one wait, and finishes each as kvp_transfer does:
// the same bytes moved and counted. What differs is when each read is issued, and so what a victim search of the
// batch sees: the batch's earlier blocks are busy (in flight, never a victim) where the one-at-a-time path had them
// loaded (a victim for a later block of the batch only where the schedule needs it after that block), and the resident
// list's order (the policy's tie-break) can differ. With blocks handed in schedule order and no ties, both load and
// evict the same blocks in the same order (tests/test_kv_sched.c disk_batch). Results never depend on it (the store
// returns the same bits whatever is resident).
#include <stdint.h>
#include <stdlib.h>

#include "../base/timer.h"
#include "kv_paged_impl.h"

enum { IO_BATCH_DEFAULT = 16 };

// Whether queued block id is a load of a block only on disk that the batch can take: a prefetch of the decode
// schedule or of a caller (not the plan's, which may stage a block to the host tier instead, nor attn-ema's, which
// competes with the resident blocks).
static bool disk_load(const kv_paged *s, int64_t id) {
    const pblock *B = &s->blk[id];
    return !B->qplan && !B->qattn && B->refs > 0 && !B->busy && B->slot[T0] < 0 && B->slot[T1] < 0 && B->slot[T2] >= 0;
}

// Whether queued block id needs nothing (freed, in transfer, or resident already): queue_take counts it idle.
static bool idle_entry(const kv_paged *s, int64_t id) {
    const pblock *B = &s->blk[id];
    return B->refs <= 0 || B->busy || B->slot[T0] >= 0;
}

// Makes room in the fast tier for block id (busy, only on disk) as load() does for a prefetch: victims needed later
// than id (limit: its next use) are evicted until a slot is free; then takes the slot. The slot, or -1 (no victim
// may go, or an error: the acquire that needs the block reports it again). May release the mutex (a dirty victim's
// write).
static int64_t room_for(kv_paged *s, int64_t id) {
    const int64_t limit = kvp_next_use(s, id);
    kvt_err e;
    while (s->tier[T0].n_used >= s->tier[T0].max_slots) {
        const int64_t v = kvp_pick_victim(s, T0, limit, s->blk[id].prank, -1);
        if (v < 0 || kvp_evict(s, v, T0, &e)) return -1;
    }
    return kvt_tier_alloc(&s->tier[T0]);
}

// A batch of disk loads being prepared (the mutex held) and read (released).
typedef struct {
    int n;
    int64_t p0; // when its preparation began (ns)
    int64_t ids[KVT_TIER_READ_MANY], slot[KVT_TIER_READ_MANY];
    void *dst[KVT_TIER_READ_MANY], *bounce[KVT_TIER_READ_MANY];
    uint32_t crc[KVT_TIER_READ_MANY];
    kvt_status st[KVT_TIER_READ_MANY];
    kvt_err err[KVT_TIER_READ_MANY];
} disk_batch;

// Adds block id (only on disk, not busy, not queued) to batch b as load() would load it for a prefetch: marked busy,
// a fast-tier slot made by room_for. Returns false (the block left as it was, but for its noroom mark) if no victim
// may go or there is no bounce buffer.
static bool batch_add(kv_paged *s, disk_batch *b, int64_t id) {
    const kvt_tier_store *D = &s->tier[T2];
    s->blk[id].busy = true;
    if (++s->n_io_busy > s->st.io_busy_max) s->st.io_busy_max = s->n_io_busy;
    const int64_t ds = room_for(s, id);
    pblock *B = &s->blk[id];
    uint8_t *dp = ds >= 0 ? kvt_tier_ptr(&s->tier[T0], ds) : NULL;
    // a bounce buffer where the fast-tier slot cannot be the O_DIRECT buffer itself (kv_tier.c direct_ok)
    const bool direct = dp && D->slot_bytes == D->data_bytes && (uintptr_t)dp % 4096 == 0;
    void *bb = dp && !direct ? kvp_bounce_get(s) : NULL;
    if (dp && (direct || bb)) {
        B->slot[T0] = ds;
        const int n = b->n++;
        b->ids[n] = id, b->slot[n] = B->slot[T2], b->dst[n] = dp, b->bounce[n] = bb, b->crc[n] = B->crc;
        return true;
    }
    if (ds >= 0) kvt_tier_release(&s->tier[T0], ds); // no bounce buffer (out of memory): not loaded
    else {
        B->noroom = true;
        s->st.pf_noroom++;
    }
    B->busy = false;
    s->n_io_busy--;
    s->st.io_idle++;
    pthread_cond_broadcast(&s->cv);
    return false;
}

// Finishes each block of batch b (read; the mutex held) as kvp_transfer's end and load's do, block by block in batch
// order: the same bytes moved and counted. t0: when its submission began; ms, cpu_ms: the read's time and CPU.
static void batch_done(kv_paged *s, disk_batch *b, int64_t t0, double ms, double cpu_ms) {
    const int n = b->n;
    s->st.copy_cpu_ms += cpu_ms;
    s->st.io_batches++;
    s->st.io_batch_blocks += n;
    s->st.io_batch_prep_ms += (double)(t0 - b->p0) / 1e6;
    s->st.io_batch_read_ms += ms;
    for (int i = 0; i < n; i++) {
        if (b->bounce[i]) kvp_bounce_put(s, b->bounce[i]);
        pblock *B = &s->blk[b->ids[i]];
        const int64_t ds = B->slot[T0];
        bool ok = !b->st[i];
        if (ok) {
            B->last_use = s->tick; // a load counts as a use for recency (prefetched blocks stay until read)
            ok = kvp_res_add(s, T0, b->ids[i]);
        }
        if (ok) {
            s->st.moved_bytes[T2][T0] += s->block_bytes;
            s->st.moved_count[T2][T0]++;
            s->st.moved_ms[T2][T0] += ms / n; // the batch's wall time, shared
            s->st.prefetches++;
            B->pf_unread = true;
            B->noroom = false;
        } else {
            kvt_tier_release(&s->tier[T0], ds);
            B->slot[T0] = -1;
            s->st.io_idle++;
        }
        B->busy = false;
        s->n_io_busy--;
    }
    b->n = 0;
}

// Reads batch b (n > 0) with one submission and one wait, the mutex released meanwhile, then finishes its blocks.
static void batch_read(kv_paged *s, disk_batch *b) {
    kvt_tier_pending p;
    pthread_mutex_unlock(&s->mu);
    const int64_t t0 = kvt_time_ns(), c0 = kvt_thread_cpu_ns();
    kvt_tier_disk_read_start(&s->tier[T2], b->n, b->slot, b->dst, b->bounce, b->crc, b->st, b->err, &p);
    kvt_tier_disk_read_finish(&s->tier[T2], b->slot, b->dst, b->crc, b->st, b->err, &p);
    const double ms = (double)(kvt_time_ns() - t0) / 1e6, cpu_ms = (double)(kvt_thread_cpu_ns() - c0) / 1e6;
    kvp_lock_timed(s);
    batch_done(s, b, t0, ms, cpu_ms);
}

// The late batch left in flight (kv_paged.late_io): the batch, its pending reads, when its submission began and what
// the submission took (wall and CPU ns; the wait's are added by kvp_late_finish).
typedef struct {
    disk_batch b;
    kvt_tier_pending p;
    int64_t t0, sub_ns, sub_cpu_ns;
} late_io;

// Submits batch b (n > 0) and leaves it in flight as s->late_io (late_pend), the mutex released while submitting.
// False (nothing done) where late_io cannot be had.
static bool batch_submit_late(kv_paged *s, disk_batch *b) {
    if (!s->late_io && !(s->late_io = malloc(sizeof(late_io)))) return false;
    late_io *L = s->late_io;
    L->b = *b; // its arrays must stay put while the reads are in flight
    b->n = 0;
    pthread_mutex_unlock(&s->mu);
    L->t0 = kvt_time_ns();
    const int64_t c0 = kvt_thread_cpu_ns();
    kvt_tier_disk_read_start(&s->tier[T2], L->b.n, L->b.slot, L->b.dst, L->b.bounce, L->b.crc, L->b.st, L->b.err, &L->p);
    L->sub_ns = kvt_time_ns() - L->t0, L->sub_cpu_ns = kvt_thread_cpu_ns() - c0;
    kvp_lock_timed(s);
    s->late_pend = true;
    pthread_cond_broadcast(&s->cv); // a thread asleep on one of its blocks now finishes it (kvp_cond_wait)
    return true;
}

void kvp_late_finish(kv_paged *s) {
    if (!s->late_pend) return;
    s->late_pend = false; // one finisher; the others wait on cv for its blocks as for any busy block
    late_io *L = s->late_io;
    pthread_mutex_unlock(&s->mu);
    const int64_t t1 = kvt_time_ns(), c1 = kvt_thread_cpu_ns();
    kvt_tier_disk_read_finish(&s->tier[T2], L->b.slot, L->b.dst, L->b.crc, L->b.st, L->b.err, &L->p);
    // the read's time on a caller's thread: the submission and the wait (not the time between, spent computing)
    const double ms = (double)(L->sub_ns + kvt_time_ns() - t1) / 1e6;
    const double cpu_ms = (double)(L->sub_cpu_ns + kvt_thread_cpu_ns() - c1) / 1e6;
    kvp_lock_timed(s);
    batch_done(s, &L->b, L->t0, ms, cpu_ms);
    kvp_late_requeue(s);
    pthread_cond_broadcast(&s->cv);
}

void kvp_late_requeue(kv_paged *s) {
    for (int64_t i = 0; i < s->n_late; i++) { // not loaded (no room then, a read failed): to the copy engine
        const pblock *B = &s->blk[s->late_ids[i]];
        if (B->refs > 0 && B->slot[T0] < 0 && !B->busy && !B->queued) kvp_queue_push(s, s->late_ids[i]);
    }
    s->n_late = 0;
    kvp_queue_wake(s);
}

void kvp_cond_wait(kv_paged *s) {
    if (s->late_pend) kvp_late_finish(s);
    else pthread_cond_wait(&s->cv, &s->mu);
}

bool kvp_queue_take_disk(kv_paged *s) {
    const int nmax = s->p.io_batch == 0 ? IO_BATCH_DEFAULT : s->p.io_batch < KVT_TIER_READ_MANY ? s->p.io_batch : KVT_TIER_READ_MANY;
    if (nmax <= 1 || !s->tier[T2].ring || s->q_len == 0 || !disk_load(s, s->q[s->q_head])) return false;
    disk_batch b;
    b.n = 0;
    b.p0 = kvt_time_ns();
    while (b.n < nmax && s->q_len > 0 && !s->stop) { // the head's entries in queue order, as queue_take takes them
        const int64_t id = s->q[s->q_head];
        if (idle_entry(s, id)) {
            kvp_queue_pop(s);
            s->st.io_idle++;
            continue;
        }
        if (!disk_load(s, id)) break;
        kvp_queue_pop(s);
        batch_add(s, &b, id);
    }
    if (b.n > 0) batch_read(s, &b);
    pthread_cond_broadcast(&s->cv);
    return true;
}

// Whether a dropped block is one of the fast tier's next victims (the test dropped_victim takes them by).
static bool dl_victim(const pblock *B) { return B->dropped && B->refs == 1 && B->slot[T0] >= 0 && !B->busy && B->pins == 0; }

static bool clean_applies(const kv_paged *s) {
    return s->tier[T2].ring && !s->tier[T1].present && !s->pol->clean_first && s->n_dl > 0;
}

bool kvp_dirty_victims(const kv_paged *s, int64_t need) {
    if (!clean_applies(s)) return false;
    for (int64_t i = 0, seen = 0; i < s->n_dl && seen < need; i++) {
        const pblock *B = &s->blk[s->dl[(s->dl_head + i) % s->cap_dl]];
        if (!dl_victim(B)) continue;
        seen++;
        if (B->slot[T1] < 0 && B->slot[T2] < 0) return true;
    }
    return false;
}

// The fast tier's first victims for `need` loads, the dropped list's head (kv_paged.c dropped_victim), get their disk
// copies before a batch evicts them: those without one (written in the fast tier and never on disk: a restored or
// prefilled context's blocks, evicted for the first time) are written together, one submission and one wait, instead
// of one synchronous write per victim inside the batch's preparation (each a device round trip on the critical path of
// kvp_load_disk_now). kvp_load_disk_now runs it when one of its own victims has no disk copy, for KVT_TIER_READ_MANY
// victims: its own and the next ones (the next layers'), so that the next batches find theirs written (a write
// submission every few layers instead of one write per victim; no other thread is woken for it, which on 2 vCPUs
// preempted the compute threads: Quest's selection stall rose, docs/log/SPARSE-log-2.md). The eviction then
// only drops the fast-tier copy. Which blocks are evicted does not change (with a disk copy a block is chosen as
// without one: this runs only for policies that do not prefer clean victims, where dropped_victim takes the list in
// order); the blocks written are those the evictions would write (moved T0 -> T2, counted here instead of in the
// eviction), only earlier, except one re-selected before its eviction: it stays resident with its disk copy (written
// where it would not have been; a later append drops the copy, as for any block). The blocks are busy while written (pins 0: no reader or writer holds them; pin_block waits).
// A write that fails leaves its block as it was: its eviction writes it again and reports an error there as before.
void kvp_clean_victims(kv_paged *s, int64_t need) {
    kvt_tier_store *D = &s->tier[T2];
    if (need <= 0 || !clean_applies(s)) return;
    if (need > KVT_TIER_READ_MANY) need = KVT_TIER_READ_MANY;
    int64_t ids[KVT_TIER_READ_MANY], slot[KVT_TIER_READ_MANY];
    const void *src[KVT_TIER_READ_MANY];
    void *bounce[KVT_TIER_READ_MANY];
    uint32_t crc[KVT_TIER_READ_MANY];
    kvt_status st[KVT_TIER_READ_MANY];
    kvt_err err[KVT_TIER_READ_MANY];
    int n = 0;
    for (int64_t i = 0, seen = 0; i < s->n_dl && seen < need; i++) {
        const int64_t id = s->dl[(s->dl_head + i) % s->cap_dl];
        pblock *B = &s->blk[id];
        if (!dl_victim(B)) continue; // not a victim
        seen++;
        if (B->slot[T1] >= 0 || B->slot[T2] >= 0) continue; // clean already
        const int64_t ds = kvt_tier_alloc(D);
        if (ds < 0) break; // the disk tier is full: the evictions make room as before
        const uint8_t *sp = kvt_tier_ptr(&s->tier[T0], B->slot[T0]);
        const bool direct = D->slot_bytes == D->data_bytes && (uintptr_t)sp % 4096 == 0;
        void *bb = direct ? NULL : kvp_bounce_get(s);
        if (!direct && !bb) {
            kvt_tier_release(D, ds);
            break;
        }
        B->busy = true; // nobody evicts, reads into or writes it meanwhile
        ids[n] = id, slot[n] = ds, src[n] = sp, bounce[n] = bb;
        n++;
    }
    if (n == 0) return;
    s->n_io_busy++; // kvt_kv_paged_drain waits for it
    pthread_mutex_unlock(&s->mu);
    const int64_t t0 = kvt_time_ns(), c0 = kvt_thread_cpu_ns();
    kvt_tier_disk_write_many(D, n, slot, src, bounce, crc, st, err);
    const double ms = (double)(kvt_time_ns() - t0) / 1e6, cpu_ms = (double)(kvt_thread_cpu_ns() - c0) / 1e6;
    kvp_lock_timed(s);
    s->st.copy_cpu_ms += cpu_ms;
    s->st.io_clean_batches++;
    for (int i = 0; i < n; i++) {
        if (bounce[i]) kvp_bounce_put(s, bounce[i]);
        pblock *B = &s->blk[ids[i]];
        if (st[i]) {
            kvt_tier_release(D, slot[i]);
        } else {
            B->slot[T2] = slot[i];
            B->crc = crc[i];
            s->st.io_clean_blocks++;
            s->st.moved_bytes[T0][T2] += s->block_bytes;
            s->st.moved_count[T0][T2]++;
            s->st.moved_ms[T0][T2] += ms / n;
        }
        B->busy = false;
    }
    s->n_io_busy--;
    pthread_cond_broadcast(&s->cv);
}

void kvp_load_disk_now(kv_paged *s, const int64_t *ids, int64_t n, bool async) {
    if (!s->tier[T2].ring) return;
    int64_t need = 0; // the loads below, less the fast tier's free slots: the victims they take
    for (int64_t i = 0; i < n; i++) need += !s->blk[ids[i]].queued && disk_load(s, ids[i]);
    need -= s->tier[T0].max_slots - s->tier[T0].n_used;
    // one of them without a disk copy: it and the next victims without one (the next layers') written together
    if (need > 0 && kvp_dirty_victims(s, need)) kvp_clean_victims(s, need > KVT_TIER_READ_MANY ? need : KVT_TIER_READ_MANY);
    disk_batch b;
    b.n = 0;
    b.p0 = kvt_time_ns();
    for (int64_t i = 0; i < n; i++) {
        const pblock *B = &s->blk[ids[i]];
        // a reader or a copy thread may have taken it since it was collected
        if (B->queued || !disk_load(s, ids[i])) continue;
        batch_add(s, &b, ids[i]);
        if (b.n == KVT_TIER_READ_MANY) {
            batch_read(s, &b);
            b.p0 = kvt_time_ns();
        }
    }
    if (b.n > 0 && !(async && batch_submit_late(s, &b))) batch_read(s, &b);
    pthread_cond_broadcast(&s->cv);
}
