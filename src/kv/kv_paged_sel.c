// kv_paged_sel.c - the paged store's hooks for sparse decoding (kv_paged.h): the chosen blocks handed over as
// prefetches (kvt_kv_paged_prefetch), read in one batch on the caller's thread when the readers need them within
// their layer (kvt_kv_paged_prefetch_begin / _end), the selection's dropped blocks marked and listed as the fast
// tier's first victims (kvt_kv_paged_set_selected; taken in kv_paged.c dropped_victim), and the counts of where the
// readers' misses come from (kvt_kv_stats handover). The tables: kv_paged_impl.h; the mutex guards them all.
#include <pthread.h>
#include <stdlib.h>

#include "../base/timer.h"
#include "kv_paged_impl.h"

// Collects block id for kvt_kv_paged_prefetch_end; queued instead where the list cannot grow.
static void late_push(kv_paged *s, int64_t id) {
    if (s->n_late == s->cap_late) {
        const int64_t cap = s->cap_late ? s->cap_late * 2 : 256;
        int64_t *d = realloc(s->late_ids, (size_t)cap * sizeof *d);
        if (!d) {
            kvp_queue_push(s, id);
            return;
        }
        s->late_ids = d;
        s->cap_late = cap;
    }
    s->late_ids[s->n_late++] = id;
}

void kvt_kv_paged_prefetch_begin(kvt_kv *kv) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops || s->n_io == 0 || !s->tier[T2].ring || s->p.io_batch == 1) return;
    pthread_mutex_lock(&s->mu);
    kvp_late_finish(s); // the previous layer's batch, if left in flight (late_ids are reused)
    if (!s->late_on) { // one thread at a time: another's hand-overs meanwhile are queued as before
        s->late_on = true;
        s->late_owner = pthread_self();
        s->n_late = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

static bool prefetch_end(kvt_kv *kv, bool async) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return false;
    pthread_mutex_lock(&s->mu);
    bool pend = false;
    if (s->late_on && pthread_equal(s->late_owner, pthread_self())) {
        s->late_on = false;
        const int64_t t0 = s->n_late > 0 ? kvt_time_ns() : 0;
        kvp_load_disk_now(s, s->late_ids, s->n_late, async);
        if (t0) s->st.stall_ms += (double)(kvt_time_ns() - t0) / 1e6; // the caller waited for the disk as a reader
        pend = s->late_pend;
        if (!pend) kvp_late_requeue(s); // else when the batch in flight is done (kvp_late_finish)
    }
    pthread_mutex_unlock(&s->mu);
    return pend;
}

void kvt_kv_paged_prefetch_end(kvt_kv *kv) { (void)prefetch_end(kv, false); }

bool kvt_kv_paged_prefetch_end_async(kvt_kv *kv) { return prefetch_end(kv, true); }

void kvt_kv_paged_late_wait(kvt_kv *kv) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    if (s->late_pend) {
        const int64_t t0 = kvt_time_ns();
        kvp_late_finish(s);
        s->st.stall_ms += (double)(kvt_time_ns() - t0) / 1e6;
    }
    pthread_mutex_unlock(&s->mu);
}

// A handed-over block by its state (kvt_kv_stats handover).
static void handover_count(kv_paged *s, const pblock *B, bool late) {
    int k = KVT_HO_ABSENT;
    if (B->busy) k = KVT_HO_INFLIGHT;
    else if (B->slot[T0] >= 0) k = KVT_HO_RESIDENT;
    else if (B->queued) k = KVT_HO_QUEUED;
    else if (B->lost) k = KVT_HO_EVICTED;
    else if (B->noroom) k = KVT_HO_NOROOM;
    s->st.handover[late][k]++;
}

void kvt_kv_paged_prefetch(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, const int64_t *blocks, int64_t n) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops || s->n_io == 0) return;
    pthread_mutex_lock(&s->mu);
    pseq *q = kvp_seq_get(s, seq, NULL);
    if (q && layer >= 0 && layer < kv->n_layer && group >= 0 && group < kv->n_group) {
        const pshard *sh = &q->sh[layer * kv->n_group + group];
        // late: the readers need it within the layer they are at (its next read less than a layer's shards ahead)
        const int64_t cycle = (int64_t)s->n_shard * s->nb_ctx, near = (int64_t)kv->n_group * s->nb_ctx;
        const bool collect = s->late_on && pthread_equal(s->late_owner, pthread_self());
        const int64_t shard = (int64_t)layer * kv->n_group + group;
        for (int64_t i = 0; i < n; i++) {
            const int64_t id = blocks[i] >= 0 && blocks[i] < sh->n_blk ? sh->ids[blocks[i]] : -1;
            if (id < 0) continue;
            pblock *B = &s->blk[id];
            B->dropped = false;
            const bool late = kvt_sched_distance(kvt_sched_key(shard, blocks[i], s->nb_ctx), s->cursor, cycle) < near;
            handover_count(s, B, late);
            if (B->slot[T0] >= 0 || B->busy || B->queued) continue;
            if (late && collect && B->slot[T1] < 0 && B->slot[T2] >= 0) { // read by kvt_kv_paged_prefetch_end
                late_push(s, id);
                continue;
            }
            kvp_queue_push(s, id);
            B->qlate = late && B->queued;
        }
    }
    kvp_queue_wake(s);
    pthread_mutex_unlock(&s->mu);
}

// Lists block id as a first victim of the fast tier (kv_paged.dl). The list holds each block once (in_dl), so it
// never outgrows the blocks; one that cannot grow only loses the shortcut (the window search still finds the block).
static void dl_push(kv_paged *s, int64_t id) {
    if (s->n_dl == s->cap_dl) { // a ring: grown unwrapped
        const int64_t cap = s->cap_dl ? s->cap_dl * 2 : 256;
        int64_t *d = malloc((size_t)cap * sizeof *d);
        if (!d) return;
        for (int64_t i = 0; i < s->n_dl; i++) d[i] = s->dl[(s->dl_head + i) % s->cap_dl];
        free(s->dl);
        s->dl = d;
        s->cap_dl = cap;
        s->dl_head = 0;
    }
    s->dl[(s->dl_head + s->n_dl++) % s->cap_dl] = id;
    s->blk[id].in_dl = true;
}

void kvt_kv_paged_set_selected(kvt_kv *kv, int32_t seq, int32_t layer, int32_t group, const int64_t *blocks, int64_t n) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    pseq *q = kvp_seq_get(s, seq, NULL);
    if (q && layer >= 0 && layer < kv->n_layer && group >= 0 && group < kv->n_group) {
        const pshard *sh = &q->sh[layer * kv->n_group + group];
        int64_t i = 0;
        for (int64_t b = sh->n_drop; b < sh->n_blk; b++) {
            while (i < n && blocks[i] < b) i++;
            const int64_t id = sh->ids[b];
            if (id < 0 || s->blk[id].refs != 1) continue;
            pblock *B = &s->blk[id];
            B->dropped = !(i < n && blocks[i] == b);
            if (B->dropped && B->slot[T0] >= 0 && !B->in_dl) dl_push(s, id);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void kvt_kv_paged_set_caller_prefetch(kvt_kv *kv, int32_t seq, int32_t layer, bool on) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops || layer < 0 || layer >= kv->n_layer) return;
    pthread_mutex_lock(&s->mu);
    pseq *q = kvp_seq_get(s, seq, NULL);
    for (int32_t g = 0; q && g < kv->n_group; g++) q->sh[layer * kv->n_group + g].caller_fetch = on;
    pthread_mutex_unlock(&s->mu);
}
