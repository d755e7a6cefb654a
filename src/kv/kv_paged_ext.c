// kv_paged_ext.c - the paged KV store's interfaces for the prefix cache (block references, blocks pushed into a
// sequence by reference or by copy) and for the serving scheduler (its plan, demotion of a preempted sequence, a
// sequence's bytes per tier, memory warmed ahead of use while idle). The store's tables and locking: kv_paged.c,
// kv_paged_impl.h.
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "kv_paged_impl.h"
#include "kv_prefetch.h"

// --- the prefix cache's block references -----------------------------------------------------------------

kvt_status kvt_kv_paged_block_ref(kvt_kv *kv, int32_t seq, int64_t b, int64_t *ids, kvt_err *err) {
    return kvt_kv_paged_block_ref_part(kv, seq, b, kv->block_tokens, ids, err);
}

kvt_status kvt_kv_paged_block_ref_part(kvt_kv *kv, int32_t seq, int64_t b, int64_t n_pos, int64_t *ids, kvt_err *err) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "block references need the paged KV store");
    pthread_mutex_lock(&s->mu);
    kvt_status st = KVT_OK;
    pseq *q = kvp_seq_get(s, seq, err);
    if (!q) st = KVT_ERR_INVALID_ARG;
    for (int32_t i = 0; !st && i < s->n_shard; i++) {
        const pshard *sh = &q->sh[i];
        if (b < 0 || b >= sh->n_blk || n_pos < 1 || n_pos > kv->block_tokens || sh->n_tok < b * kv->block_tokens + n_pos ||
            sh->ids[b] < 0) {
            st = kvt_errorf(err, KVT_ERR_INVALID_ARG,
                            "KV sequence %d does not hold the first %lld positions of block %lld of layer %d group %d (%lld "
                            "positions%s)", seq, (long long)n_pos, (long long)b, i / kv->n_group, i % kv->n_group,
                            (long long)sh->n_tok,
                            b >= 0 && b < sh->n_blk && sh->ids[b] < 0 ? ", freed by the sliding window" : "");
        }
    }
    for (int32_t i = 0; !st && i < s->n_shard; i++) {
        ids[i] = q->sh[i].ids[b];
        s->blk[ids[i]].refs++;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void kvt_kv_paged_block_unref(kvt_kv *kv, const int64_t *ids) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < s->n_shard; i++) kvp_block_unref(s, ids[i]);
    pthread_mutex_unlock(&s->mu);
}

int32_t kvt_kv_paged_block_holders(kvt_kv *kv, const int64_t *ids) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return 0;
    pthread_mutex_lock(&s->mu);
    int32_t m = 0;
    for (int32_t i = 0; i < s->n_shard; i++) m = s->blk[ids[i]].refs > m ? s->blk[ids[i]].refs : m;
    pthread_mutex_unlock(&s->mu);
    return m;
}

bool kvt_kv_paged_seq_holds(kvt_kv *kv, int32_t seq, int64_t b, const int64_t *ids) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return false;
    pthread_mutex_lock(&s->mu);
    const pseq *q = kvp_seq_get(s, seq, NULL);
    bool holds = q != NULL && b >= 0, one = false;
    for (int32_t i = 0; holds && i < s->n_shard; i++) {
        const int64_t id = b < q->sh[i].n_blk ? q->sh[i].ids[b] : -2; // (-1: freed by the window)
        holds = id == ids[i] || id == -1;
        one = one || id == ids[i];
    }
    pthread_mutex_unlock(&s->mu);
    return holds && one;
}

kvt_status kvt_kv_paged_seq_push_ref(kvt_kv *kv, int32_t seq, int64_t b, const int64_t *ids, kvt_err *err) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "block references need the paged KV store");
    const int64_t bt = kv->block_tokens;
    if (b < 0 || (b + 1) * bt > kv->n_ctx) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "KV block %lld exceeds context %lld", (long long)b, (long long)kv->n_ctx);
    }
    pthread_mutex_lock(&s->mu);
    kvt_status st = KVT_OK;
    pseq *q = kvp_seq_get(s, seq, err);
    if (!q) st = KVT_ERR_INVALID_ARG;
    for (int32_t i = 0; !st && i < s->n_shard; i++) {
        const pshard *sh = &q->sh[i];
        const pblock *B = ids[i] >= 0 && ids[i] < s->n_blk ? &s->blk[ids[i]] : NULL;
        if (sh->n_tok != b * bt || sh->n_blk != b) {
            st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV sequence %d holds %lld positions of layer %d, not %lld: block %lld "
                            "cannot be appended", seq, (long long)sh->n_tok, i / kv->n_group, (long long)(b * bt), (long long)b);
        } else if (!B || B->refs <= 0 || B->index != b || B->layer * kv->n_group + B->group != i) {
            st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV block handle %lld is not block %lld of layer %d group %d",
                            (long long)ids[i], (long long)b, i / kv->n_group, i % kv->n_group);
        }
    }
    int32_t done = 0;
    while (!st && done < s->n_shard) {
        if (!kvp_shard_push(&q->sh[done], ids[done])) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV block table");
        else done++;
    }
    for (int32_t i = 0; i < done; i++) {
        pshard *sh = &q->sh[i];
        if (st) sh->n_blk--;
        else {
            pblock *B = &s->blk[ids[i]];
            B->refs++;
            if (q->prank < B->prank) B->prank = q->prank;
            sh->n_tok = (b + 1) * bt;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

// A free T1 slot for an import (kvt_kv_paged_seq_push_copy), made without waiting on anyone: a free slot, a duplicate of a T0 block dropped, or
// (with a disk tier) a victim moved down. false: none.
static bool host_room(kv_paged *s) {
    const kvt_tier_store *H = &s->tier[T1];
    if (H->n_used < H->max_slots) return true;
    const int64_t dup = kvp_t1_duplicate(s);
    if (dup >= 0) {
        kvp_drop_copy(s, dup, T1);
        return true;
    }
    if (!s->tier[T2].present) return false;
    const int64_t v = kvp_pick_victim(s, T1, -1, INT64_MAX, -1);
    kvt_err e;
    return v >= 0 && !kvp_evict(s, v, T1, &e) && H->n_used < H->max_slots;
}

kvt_status kvt_kv_paged_seq_push_copy(kvt_kv *kv, int32_t seq, int64_t b, const void *const *k, const void *const *v,
                                      bool *placed, kvt_err *err) {
    kv_paged *s = (kv_paged *)kv;
    *placed = false;
    if (kv->ops != &kvp_ops) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "host imports need the paged KV store");
    const int64_t bt = kv->block_tokens;
    if (b < 0 || (b + 1) * bt > kv->n_ctx) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "KV block %lld exceeds context %lld", (long long)b, (long long)kv->n_ctx);
    }
    // the host tier under a bounded T0; else an unbounded T0 (where an append would put it, without the conversion)
    const bool t0_unbounded = s->tier[T0].max_slots == INT64_MAX;
    const int t = s->tier[T1].present && !t0_unbounded ? T1 : t0_unbounded ? T0 : -1;
    if (t < 0) return KVT_OK; // a bounded T0 without a host tier: the caller appends (evicting as any append)
    int64_t *ids = malloc((size_t)s->n_shard * sizeof *ids); // [n_shard] the new blocks
    if (!ids) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory importing a KV block");
    pthread_mutex_lock(&s->mu);
    kvt_status st = KVT_OK;
    pseq *q = kvp_seq_get(s, seq, err);
    if (!q) st = KVT_ERR_INVALID_ARG;
    for (int32_t i = 0; !st && i < s->n_shard; i++) {
        if (q->sh[i].n_tok != b * bt || q->sh[i].n_blk != b) {
            st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV sequence %d holds %lld positions of layer %d, not %lld: block "
                            "%lld cannot be imported", seq, (long long)q->sh[i].n_tok, i / kv->n_group, (long long)(b * bt),
                            (long long)b);
        }
    }
    // every block gets a T1 slot first (busy: nobody moves or evicts it), or none does
    int32_t n = 0;
    bool room = !st;
    while (room && n < s->n_shard) {
        const int32_t layer = n / kv->n_group, group = n % kv->n_group;
        int64_t slot = -1, id = -1;
        room = (t == T0 || host_room(s)) && (slot = kvt_tier_alloc(&s->tier[t])) >= 0 &&
               (id = kvp_block_new(s, layer, group, b)) >= 0;
        if (room && !kvp_res_add(s, t, id)) {
            kvp_block_unref(s, id);
            room = false;
        }
        if (!room) {
            if (slot >= 0) kvt_tier_release(&s->tier[t], slot);
            break;
        }
        s->blk[id].slot[t] = slot;
        s->blk[id].busy = true;
        ids[n++] = id;
    }
    if (room) { // the copies, with the mutex released
        const int64_t kpart = bt * s->k_row;
        uint8_t **dst = malloc((size_t)s->n_shard * sizeof *dst);
        if (!dst) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory importing a KV block");
        for (int32_t i = 0; dst && i < n; i++) dst[i] = kvt_tier_ptr(&s->tier[t], s->blk[ids[i]].slot[t]);
        pthread_mutex_unlock(&s->mu);
        for (int32_t i = 0; dst && i < n; i++) {
            memcpy(dst[i], k[i], (size_t)kpart);
            memcpy(dst[i] + kpart, v[i], (size_t)(s->block_bytes - kpart));
        }
        pthread_mutex_lock(&s->mu);
        free(dst);
    }
    int32_t pushed = 0;
    while (room && !st && pushed < n) {
        if (!kvp_shard_push(&q->sh[pushed], ids[pushed])) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a KV block table");
        else pushed++;
    }
    for (int32_t i = 0; i < n; i++) s->blk[ids[i]].busy = false;
    if (room && !st) {
        for (int32_t i = 0; i < n; i++) {
            s->blk[ids[i]].prank = q->prank;
            q->sh[i].n_tok = (b + 1) * bt;
        }
        if (t == T1) s->st.host_imports += n;
        *placed = true;
    } else {
        for (int32_t i = 0; i < pushed; i++) q->sh[i].n_blk--;
        for (int32_t i = 0; i < n; i++) kvp_block_unref(s, ids[i]);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free(ids);
    return st;
}

// --- the serving scheduler's hooks ------------------------------------------------------------------------

// The plan's ranks and prefetch order are kvt_plan_ranks and kvt_plan_prefetch (kv_prefetch.h), which the simulator
// runs too. These are their views of the store (the mutex held).
static bool plan_live_seq(const void *ud, int32_t q) { return ((const kv_paged *)ud)->seq[q].live; }

static void plan_span(void *ud, int32_t seq, int32_t shard, int64_t *first, int64_t *end) {
    const pshard *sh = &((kv_paged *)ud)->seq[seq].sh[shard];
    *first = sh->n_drop;
    *end = sh->n_blk;
}

// Queues a planned block below T0 for the copy engine (qplan: a load that displaces only later ranks) if its load
// can find room in T0 (kvt_plan_room_take), or, only on disk, for a copy up to the host tier (stage_t1).
static void plan_visit(void *ud, int32_t seq, int32_t shard, int64_t block) {
    kv_paged *s = ud;
    const int64_t id = s->seq[seq].sh[shard].ids[block];
    pblock *B = &s->blk[id];
    if (B->slot[T0] >= 0 || B->busy || B->queued) return;
    if (!kvt_plan_room_take(&s->plan_room, B->prank) && (B->slot[T1] >= 0 || !s->tier[T1].present)) return;
    kvp_queue_push(s, id);
    B->qplan = B->queued; // queue_push may drop it (out of memory)
}

void kvt_kv_paged_set_plan(kvt_kv *kv, const int32_t *seqs, int64_t n) {
    kv_paged *s = (kv_paged *)kv;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    for (int64_t i = 0; i < s->n_blk; i++) s->blk[i].prank = INT64_MAX;
    for (int32_t i = 0; i < s->n_seq; i++) s->seq[i].prank = INT64_MAX;
    // [n_seq] iteration last seen in, [n_seq] rank, then [n] planned sequences by rank; none: no plan this time
    int64_t *buf = n > 0 ? malloc((size_t)(2 * (int64_t)s->n_seq + n) * sizeof *buf) : NULL;
    int64_t *seen = buf, *rank = buf ? buf + s->n_seq : NULL;
    int32_t *uq = buf ? (int32_t *)(buf + 2 * (int64_t)s->n_seq) : NULL;
    const int64_t nu = buf ? kvt_plan_ranks(seqs, n, s->n_seq, plan_live_seq, s, seen, rank, uq) : 0;
    for (int32_t q = 0; buf && q < s->n_seq; q++) {
        pseq *Q = &s->seq[q];
        Q->prank = rank[q];
        if (!Q->live || Q->prank == INT64_MAX) continue;
        for (int32_t i = 0; i < s->n_shard; i++) {
            const pshard *sh = &Q->sh[i];
            for (int64_t j = sh->n_drop; j < sh->n_blk; j++) {
                pblock *B = &s->blk[sh->ids[j]];
                if (Q->prank < B->prank) B->prank = Q->prank;
            }
        }
    }
    // prefetch: the blocks below T0 of the planned sequences, iteration by iteration, each iteration in decode
    // order (layer by layer over its sequences), as far as T0 and T1 can hold them
    const int64_t m0 = s->tier[T0].max_slots, m1 = s->tier[T1].present ? s->tier[T1].max_slots : 0;
    const int64_t cap = m0 == INT64_MAX || m1 == INT64_MAX ? INT64_MAX : m0 + m1;
    int64_t *cnt = s->n_io > 0 && nu > 0 ? calloc((size_t)n + 1, sizeof *cnt) : NULL; // T0 residents by rank
    for (int64_t i = 0; cnt && i < s->n_res[T0]; i++) {
        const pblock *B = &s->blk[s->res[T0][i]];
        if (!B->busy && B->pins == 0) cnt[B->prank < n ? B->prank : n]++;
    }
    if (cnt) {
        kvt_plan_room_init(&s->plan_room, cnt, n, m0 == INT64_MAX ? INT64_MAX : m0 - s->tier[T0].n_used);
        kvt_plan_prefetch(uq, nu, rank, s->n_shard, cap, plan_span, plan_visit, s);
    }
    free(cnt);
    free(buf);
    kvp_queue_wake(s);
    pthread_mutex_unlock(&s->mu);
}

// Blocks of seq a demotion moves (mark 2 in the returned [n_blk]) and blocks of other planned sequences (mark
// 1: they stay, shared or not). NULL when out of memory.
static uint8_t *demote_marks(const kv_paged *s, int32_t seq) {
    uint8_t *mark = calloc((size_t)(s->n_blk ? s->n_blk : 1), 1);
    for (int pass = 0; mark && pass < 2; pass++) {
        for (int32_t q = 0; q < s->n_seq; q++) {
            const pseq *Q = &s->seq[q];
            if (!Q->live || (pass == 0 ? q != seq : q == seq || Q->prank == INT64_MAX)) continue;
            for (int32_t i = 0; i < s->n_shard; i++)
                for (int64_t j = Q->sh[i].n_drop; j < Q->sh[i].n_blk; j++) mark[Q->sh[i].ids[j]] = pass == 0 ? 2 : 1;
        }
    }
    return mark;
}

static bool copy_at_or_below(const pblock *B, int to) {
    for (int u = to; u < KVT_TIER_COUNT; u++)
        if (B->slot[u] >= 0) return true;
    return false;
}

// A copy in tier `to` (T1) that can go for free (the block has a copy elsewhere) and is not one of the moved
// blocks; -1 if none.
static int64_t demote_droppable(const kv_paged *s, int to, const uint8_t *mark) {
    for (int64_t i = 0; to == T1 && i < s->n_res[T1]; i++) {
        const int64_t id = s->res[T1][i];
        const pblock *B = &s->blk[id];
        if (mark[id] != 2 && !B->busy && (B->slot[T0] >= 0 || B->slot[T2] >= 0)) return id;
    }
    return -1;
}

kvt_status kvt_kv_paged_seq_demote(kvt_kv *kv, int32_t seq, kvt_tier tier, kvt_err *err) {
    kv_paged *s = (kv_paged *)kv;
    const int to = (int)tier;
    if (kv->ops != &kvp_ops) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "demote needs the paged KV store");
    if ((to != T1 && to != T2) || !s->tier[to].present) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "cannot demote KV sequence %d to the %s tier: %s", seq,
                          kvt_tier_name(tier), to == T0 ? "it goes down to host or disk" : "the store has none");
    }
    pthread_mutex_lock(&s->mu);
    kvt_status st = KVT_OK;
    pseq *q = kvp_seq_get(s, seq, err);
    uint8_t *mark = q ? demote_marks(s, seq) : NULL;
    if (!q) st = KVT_ERR_INVALID_ARG;
    else if (!mark) st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory demoting KV sequence %d", seq);
    // wait until no block of seq is being moved or read (a prefetch in flight)
    for (bool waited = true; !st && waited;) {
        waited = false;
        for (int64_t id = 0; id < s->n_blk && !waited; id++) {
            if (mark[id] == 2 && (s->blk[id].busy || s->blk[id].pins > 0)) {
                kvp_cond_wait(s);
                waited = true;
            }
        }
    }
    // room: every moved block without a copy at `to` or below needs a slot there
    int64_t need = 0, room = 0;
    const kvt_tier_store *T = &s->tier[to];
    for (int64_t id = 0; !st && id < s->n_blk; id++) need += mark[id] == 2 && !copy_at_or_below(&s->blk[id], to);
    if (!st) {
        room = T->max_slots == INT64_MAX ? INT64_MAX : T->max_slots - T->n_used;
        for (int64_t i = 0; to == T1 && room < need && i < s->n_res[T1]; i++) {
            const pblock *B = &s->blk[s->res[T1][i]];
            room += mark[s->res[T1][i]] != 2 && !B->busy && (B->slot[T0] >= 0 || B->slot[T2] >= 0);
        }
        if (room < need) {
            st = kvt_errorf(err, KVT_ERR_BUDGET, "KV %s tier cannot take sequence %d: %lld blocks of %lld bytes to move, "
                            "room for %lld", kvt_tier_name(tier), seq, (long long)need, (long long)T->slot_bytes,
                            (long long)room);
        }
    }
    for (int64_t id = 0; !st && id < s->n_blk; id++) {
        if (mark[id] != 2) continue;
        // kvp_transfer() below lets go of the mutex while it copies, and meanwhile the copy engine may start loading
        // another block of this sequence: wait for that to end before taking the block
        while (s->blk[id].busy || s->blk[id].pins > 0) kvp_cond_wait(s);
        pblock *B = &s->blk[id];
        B->busy = true;
        if (!copy_at_or_below(B, to)) {
            if (T->n_used >= T->max_slots) {
                const int64_t d = demote_droppable(s, to, mark);
                if (d >= 0) kvp_drop_copy(s, d, T1);
            }
            if (T->n_used >= T->max_slots) {
                st = kvt_errorf(err, KVT_ERR_BUDGET, "KV %s tier filled up while demoting sequence %d", kvt_tier_name(tier), seq);
            } else st = kvp_transfer(s, id, B->slot[T0] >= 0 ? T0 : T1, to, err);
        }
        B = &s->blk[id];
        if (!st) {
            for (int u = T0; u < to; u++) kvp_drop_copy(s, id, u);
        }
        B->busy = false;
        pthread_cond_broadcast(&s->cv);
    }
    free(mark);
    pthread_mutex_unlock(&s->mu);
    return st;
}

void kvt_kv_paged_seq_usage(kvt_kv *kv, int32_t seq, int64_t bytes[KVT_TIER_COUNT]) {
    kv_paged *s = (kv_paged *)kv;
    for (int t = 0; t < KVT_TIER_COUNT; t++) bytes[t] = 0;
    if (kv->ops != &kvp_ops) return;
    pthread_mutex_lock(&s->mu);
    const pseq *q = kvp_seq_get(s, seq, NULL);
    for (int32_t i = 0; q && i < s->n_shard; i++) {
        for (int64_t j = q->sh[i].n_drop; j < q->sh[i].n_blk; j++) {
            const pblock *B = &s->blk[q->sh[i].ids[j]];
            for (int t = 0; t < KVT_TIER_COUNT; t++) bytes[t] += B->slot[t] >= 0 ? s->tier[t].slot_bytes : 0;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

// Bytes of `positions` positions of one sequence in a tier's slots: each shard's blocks, a sliding-window layer's
// limited to its window and the block being filled (kvt_kv_paged_shard_blocks, one position at a time) unless `whole`.
static int64_t warm_target(const kv_paged *s, int t, int64_t positions, bool whole) {
    int64_t blocks = 0;
    for (int32_t l = 0; l < s->p.n_layer; l++)
        blocks += kvt_kv_paged_shard_blocks(positions, whole ? 0 : s->window[l], s->base.block_tokens, 1) * s->base.n_group;
    return blocks * s->tier[t].slot_bytes;
}

bool kvt_kv_paged_warm(kvt_kv *kv, int64_t positions, bool whole, int64_t max_bytes) {
    if (kv->ops != &kvp_ops || positions <= 0) return false;
    kv_paged *s = (kv_paged *)kv;
    for (int t = T0; t <= T1; t++) {
        pthread_mutex_lock(&s->mu);
        kvt_tier_store *ts = &s->tier[t];
        const int64_t next = kvt_tier_chunk_next_bytes(ts);
        int64_t target = warm_target(s, t, positions, whole);
        if (max_bytes >= 0 && target > max_bytes) target = max_bytes;
        const bool want = next > 0 && kvt_tier_warm_bytes(ts) < target;
        pthread_mutex_unlock(&s->mu);
        if (!want) continue;
        const double t0 = kvt_time_ms();
        uint8_t *p = kvt_kv_arena_alloc((size_t)next); // [next] bytes: slots of the chunk
        if (!p) return false;
        for (int64_t i = 0; i < next; i += 4096) ((volatile uint8_t *)p)[i] = 0; // one write faults a page in
        pthread_mutex_lock(&s->mu);
        const bool ok = kvt_tier_chunk_add(ts, p, next);
        const bool moved = !ok && kvt_tier_chunk_next_bytes(ts) != next; // the tier made a chunk meanwhile
        if (ok) {
            s->st.warm_bytes[t] += next;
            s->st.warm_ms += kvt_time_ms() - t0;
        }
        pthread_mutex_unlock(&s->mu);
        if (!ok) free(p);
        return ok || moved; // moved: the next call looks again; a list that cannot grow: stop
    }
    return false;
}
