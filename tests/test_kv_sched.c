// test_kv_sched.c - the paged store's hooks for the serving scheduler (kv_paged.h, issue 12) and the flat block
// payload (kv_block_io.h): export then import gives the same bits on the paged and the contiguous store; a plan
// makes a planned sequence's blocks resident before its acquires and turns eviction onto the sequences that run
// later; a demoted sequence leaves the fast tier, reads back exactly, and a demotion without room moves nothing.
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/exec/context.h"
#include "../src/kv/kv_block_io.h"
#include "../src/kv/kv_paged.h"
#include "test.h"

enum { NL = 2, NH = 2, HD = 4, BTOK = 4 };

static kvt_kv_paged_params params(kvt_type type, int32_t group_heads, int64_t fast_blocks, int64_t host_blocks) {
    kvt_kv_paged_params p = kvt_kv_paged_params_default();
    p.type = type;
    p.n_layer = NL;
    p.n_head_kv = NH;
    p.head_dim = HD;
    p.head_dim_v = HD;
    p.n_ctx = 64;
    p.block_tokens = BTOK;
    p.group_heads = group_heads;
    p.n_io_threads = 2;
    const int64_t bb = kvt_kv_paged_block_bytes(&p);
    p.fast_bytes = fast_blocks > 0 ? fast_blocks * bb : -1;
    p.host_bytes = host_blocks > 0 ? host_blocks * bb : host_blocks;
    return p;
}

// K/V element e of (layer, position) of sequence variant tag: distinct, non-integer values (rounded by f16).
static float val(int tag, int l, int64_t pos, int e, int v) { return (float)(tag * 1000 + l * 100 + pos) * 0.37f + (float)e * 0.011f + (v ? 0.5f : 0); }

static kvt_status fill(kvt_kv *kv, int32_t seq, int tag, int64_t pos, int64_t n, kvt_err *err) {
    float k[64 * NH * HD], v[64 * NH * HD];
    for (int l = 0; l < NL; l++) {
        for (int64_t i = 0; i < n; i++)
            for (int e = 0; e < NH * HD; e++) k[i * NH * HD + e] = val(tag, l, pos + i, e, 0), v[i * NH * HD + e] = val(tag, l, pos + i, e, 1);
        kvt_status st = kv->ops->append(kv, seq, l, pos, n, k, v, err);
        if (st) return st;
    }
    return KVT_OK;
}

// A new empty sequence of a paged store (a fork of 0 emptied).
static int32_t new_seq(kvt_kv *kv) {
    int32_t d = -1;
    kvt_err e;
    if (kv->ops->seq_fork(kv, 0, &d, &e)) return -1;
    kv->ops->truncate(kv, d, 0);
    return d;
}

// --- block payloads ----------------------------------------------------------------------------------------

static void block_io(void) {
    kvt_err err = {0};
    kvt_kv *pg = NULL, *ct = NULL;
    const kvt_kv_paged_params pp = params(KVT_TYPE_F16, 1, 0, 0);
    kvt_kv_params cp = {KVT_TYPE_F16, NL, NH, HD, HD, 64, BTOK, 0};
    kvt_status st = kvt_kv_paged_init(&pp, &pg, &err);
    if (!st) st = kvt_kv_contig_init(&cp, &ct, &err);
    const int64_t pb = st ? 0 : kvt_kv_block_payload_bytes(pg);
    uint8_t *a = malloc((size_t)(4 * pb + 1)), *b = a + pb, *c = b + pb, *d = c + pb;
    int32_t s1 = -1;
    if (!st) st = fill(pg, 0, 1, 0, 10, &err);
    if (!st) st = fill(ct, 0, 1, 0, 10, &err);
    if (!st) st = kvt_kv_block_export(pg, 0, 1, a, &err);             // paged, group of one head
    if (!st) st = kvt_kv_block_export(ct, 0, 1, b, &err);             // contiguous, all heads
    if (!st && (s1 = new_seq(pg)) < 0) st = kvt_errorf(&err, KVT_ERR_NOMEM, "fork");
    if (!st) st = kvt_kv_block_export(pg, 0, 0, c, &err);
    if (!st) st = kvt_kv_block_import(pg, s1, 0, c, &err);           // blocks 0 and 1 into another sequence
    if (!st) st = kvt_kv_block_import(pg, s1, 1, a, &err);
    if (!st) st = kvt_kv_block_export(pg, s1, 1, d, &err);
    bool ok = !st && pb == (int64_t)NL * 2 * NH * BTOK * HD * 2 && !memcmp(a, b, (size_t)pb) && !memcmp(a, d, (size_t)pb);
    if (!st) st = kvt_kv_block_import(ct, 0, 1, a, &err), st = st ? st : kvt_kv_block_export(ct, 0, 1, d, &err);
    ok = ok && !st && !memcmp(a, d, (size_t)pb);
    test_result(ok, "kv_sched: block export then import gives the same bits (paged by head, contiguous, across both)",
                "%s", st ? err.msg : "payloads differ");
    kvt_err e2 = {0};
    const kvt_status partial = st ? KVT_OK : kvt_kv_block_export(pg, 0, 2, d, &e2);
    test_result(partial == KVT_ERR_INVALID_ARG, "kv_sched: exporting a partly filled block is refused",
                "got status %d (%s)", (int)partial, e2.msg);
    kvt_prefix_identity id;
    memset(&id, 0, sizeof id);
    if (pg) kvt_kv_block_identity(pg, &id);
    test_result(id.n_layer == NL && id.n_head_kv == NH && id.head_dim == HD && id.block_tokens == BTOK &&
                id.kv_type == KVT_TYPE_F16 && id.layout == KVT_KV_BLOCK_LAYOUT, "kv_sched: block identity", "fields differ");
    free(a);
    kvt_kv_free(pg);
    kvt_kv_free(ct);
}

static bool holds(kvt_kv *kv, int32_t seq, int tag, int64_t n);

// --- plan ----------------------------------------------------------------------------------------------------

static int64_t resident_blocks(kvt_kv *kv, int32_t seq, int t) {
    int64_t u[KVT_TIER_COUNT];
    kvt_kv_stats ks;
    kvt_kv_paged_seq_usage(kv, seq, u);
    kvt_kv_get_stats(kv, &ks);
    const int64_t slot = (ks.block_bytes + 63) / 64 * 64;
    return t == KVT_TIER_DISK ? u[t] : u[t] / slot;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// Acquires every block of seq's first n positions; returns the misses it took.
static int64_t acquire_all(kvt_kv *kv, int32_t seq, int64_t n, kvt_err *err, kvt_status *st) {
    kvt_kv_stats a, b;
    kvt_kv_get_stats(kv, &a);
    for (int l = 0; !*st && l < NL; l++)
        for (int32_t g = 0; !*st && g < kv->n_group; g++)
            for (int64_t j = 0; !*st && j < kvt_kv_n_blocks(kv, n); j++) {
                kvt_kv_view w;
                if (!(*st = kv->ops->acquire(kv, seq, l, g, j, &w, err))) kv->ops->release(kv, seq, l, g, j);
            }
    kvt_kv_get_stats(kv, &b);
    return b.misses - a.misses;
}

// Sequence A (4 blocks per layer) is pushed to the host tier by B; with the plan [A] the copy engine brings
// A back before its acquires (no miss), without it the first acquire misses.
static void plan_prefetch(void) {
    int64_t miss[2] = {-1, -1}, pre = 0, a_fast = 0;
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    for (int with = 0; with < 2 && !st; with++) {
        kvt_kv *kv = NULL;
        const kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 8, -1);
        st = kvt_kv_paged_init(&p, &kv, &err);
        int32_t b = st ? -1 : new_seq(kv);
        if (!st) st = fill(kv, 0, 1, 0, 16, &err);
        if (!st) st = fill(kv, b, 2, 0, 16, &err);
        if (!st && with) {
            const int32_t plan[] = {0};
            kvt_kv_paged_set_plan(kv, plan, 1);
            for (int i = 0; i < 1000 && resident_blocks(kv, 0, KVT_TIER_FAST) < 8; i++) sleep_ms(5);
            a_fast = resident_blocks(kv, 0, KVT_TIER_FAST);
        }
        if (!st) miss[with] = acquire_all(kv, 0, 16, &err, &st);
        kvt_kv_stats ks;
        kvt_kv_get_stats(kv, &ks);
        if (with) pre = ks.prefetches;
        kvt_kv_free(kv);
    }
    test_result(!st && miss[0] > 0 && miss[1] == 0 && a_fast == 8 && pre >= miss[0],
                "kv_sched: a plan prefetches a planned sequence's blocks from the host tier before its acquires",
                "%s misses without plan %lld, with plan %lld; planned blocks in fast %lld of 8, prefetches %lld",
                st ? err.msg : "", (long long)miss[0], (long long)miss[1], (long long)a_fast, (long long)pre);
}

// Sequence A (4 blocks per layer) is demoted to the host tier. An acquire of A's first block makes the copy
// engine fetch the blocks that follow it in the decode schedule: A's 8 blocks end up in the fast tier. With
// layer 1 of A marked as read by its caller's prefetches only (sparse decoding), the schedule prefetch brings
// layer 0's blocks alone, and a block of layer 1 arrives when the caller hands it over.
static void caller_prefetch(void) {
    int64_t fast[2] = {-1, -1}, after = -1;
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    for (int with = 0; with < 2 && !st; with++) {
        kvt_kv *kv = NULL;
        const kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 16, -1);
        st = kvt_kv_paged_init(&p, &kv, &err);
        if (!st) st = fill(kv, 0, 1, 0, 16, &err);
        if (!st) st = kvt_kv_paged_seq_demote(kv, 0, KVT_TIER_HOST, &err);
        if (!st && with) kvt_kv_paged_set_caller_prefetch(kv, 0, 1, true);
        kvt_kv_view w;
        if (!st && !(st = kv->ops->acquire(kv, 0, 0, 0, 0, &w, &err))) kv->ops->release(kv, 0, 0, 0, 0);
        kvt_kv_paged_drain(kv);
        fast[with] = resident_blocks(kv, 0, KVT_TIER_FAST);
        if (!st && with) {
            const int64_t blk = 2;
            kvt_kv_paged_prefetch(kv, 0, 1, 0, &blk, 1);
            kvt_kv_paged_drain(kv);
            after = resident_blocks(kv, 0, KVT_TIER_FAST);
        }
        kvt_kv_free(kv);
    }
    test_result(!st && fast[0] == 8 && fast[1] == 4 && after == 5,
                "kv_sched: a layer read by its caller's prefetches is left out of the schedule prefetch",
                "%s A's blocks in fast after one acquire: %lld (schedule), %lld (layer 1 the caller's), then %lld",
                st ? err.msg : "", (long long)fast[0], (long long)fast[1], (long long)after);
}

typedef struct {
    int n;
    int32_t layer[32];
    int64_t index[32];
} evict_log;

static void log_evict(void *ud, int32_t layer, int32_t group, int64_t index) {
    evict_log *g = ud;
    (void)group;
    if (g->n < 32) g->layer[g->n] = layer, g->index[g->n++] = index;
}

// A store of head-wise blocks with a fast tier of 4 (LRU, victim window `window`, 0: the default) whose evictions
// go to *lg: 16 positions demoted to the host tier, every layer read by its caller's prefetches, then blocks 0..3 of
// (layer 0, head 0) read into the fast tier. *out: the store (freed by the caller, also on error).
static kvt_status four_read(evict_log *lg, int32_t window, kvt_kv **out, kvt_err *err) {
    kvt_kv_paged_params p = params(KVT_TYPE_F32, 1, 4, -1);
    p.evict = "lru";
    p.victim_window = window;
    p.on_evict = log_evict;
    p.on_evict_ud = lg;
    kvt_status st = kvt_kv_paged_init(&p, out, err);
    kvt_kv *kv = *out;
    if (!st) st = fill(kv, 0, 1, 0, 16, err);
    if (!st) st = kvt_kv_paged_seq_demote(kv, 0, KVT_TIER_HOST, err);
    for (int l = 0; !st && l < NL; l++) kvt_kv_paged_set_caller_prefetch(kv, 0, l, true);
    kvt_kv_view w;
    for (int64_t b = 0; b < 4 && !st; b++) {
        if (!(st = kv->ops->acquire(kv, 0, 0, 0, b, &w, err))) kv->ops->release(kv, 0, 0, 0, b);
    }
    return st;
}

// Head-wise blocks, a fast tier of 4: blocks 0..3 of (layer 0, head 0) are read into it, then 2 blocks of layer 1
// need room. LRU evicts layer 0's blocks 0 and 1 (the least recently read); once a selection of layer 0 holds only
// blocks 0 and 1 (kvt_kv_paged_set_selected), its dropped blocks 2 and 3 go first. Reading a dropped block clears
// the mark.
static void selected_evict(void) {
    evict_log lg[3] = {{0}};
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    for (int with = 0; with < 3 && !st; with++) {
        kvt_kv *kv = NULL;
        st = four_read(&lg[with], 0, &kv, &err);
        kvt_kv_view w;
        const int64_t keep[2] = {0, 1};
        if (with) kvt_kv_paged_set_selected(kv, 0, 0, 0, keep, 2);
        if (with == 2 && !st && !(st = kv->ops->acquire(kv, 0, 0, 0, 2, &w, &err))) kv->ops->release(kv, 0, 0, 0, 2);
        kvt_kv_paged_drain(kv);
        lg[with].n = 0; // the log starts now (the demotion's evictions left out)
        for (int64_t b = 0; b < 2 && !st; b++) {
            if (!(st = kv->ops->acquire(kv, 0, 1, 0, b, &w, &err))) kv->ops->release(kv, 0, 1, 0, b);
        }
        kvt_kv_free(kv);
    }
    const bool ok = !st && lg[0].n == 2 && lg[1].n == 2 && lg[2].n == 2 && lg[0].layer[0] == 0 && lg[0].index[0] == 0 &&
                    lg[0].index[1] == 1 && lg[1].layer[0] == 0 && lg[1].layer[1] == 0 && lg[1].index[0] + lg[1].index[1] == 5 &&
                    lg[2].index[0] == 3 && lg[2].index[1] == 0;
    test_result(ok, "kv_sched: the blocks a sparse selection drops are evicted first (lru), a read clears the mark",
                "%s evicted: lru %d (%lld, %lld), selected {0, 1}: %d (%lld, %lld), then block 2 read: %d (%lld, %lld)",
                st ? err.msg : "", lg[0].n, (long long)lg[0].index[0], (long long)lg[0].index[1], lg[1].n,
                (long long)lg[1].index[0], (long long)lg[1].index[1], lg[2].n, (long long)lg[2].index[0],
                (long long)lg[2].index[1]);
}

// Fast tier of 4 blocks, host of 4, disk: A and B (8 blocks each) are half on disk. The plan [A] fills the fast
// and host tiers with A's blocks (loads, and disk -> host staging where the fast tier has no room: Alg. 1's two
// hops), evicting B's blocks, never A's.
static void plan_two_hops(const char *disk) {
    kvt_err err = {0};
    kvt_kv *kv = NULL;
    kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 4, 4);
    p.disk_dir = disk;
    kvt_status st = kvt_kv_paged_init(&p, &kv, &err);
    const int32_t b = st ? -1 : new_seq(kv);
    if (!st) st = fill(kv, 0, 1, 0, 16, &err);
    if (!st) st = fill(kv, b, 2, 0, 16, &err);
    int64_t f = 0, h = 0;
    kvt_kv_stats ks = {0};
    if (!st) {
        const int32_t plan[] = {0};
        kvt_kv_paged_set_plan(kv, plan, 1);
        for (int i = 0; i < 1000 && (f < 4 || h < 4); i++) {
            sleep_ms(5);
            f = resident_blocks(kv, 0, KVT_TIER_FAST), h = resident_blocks(kv, 0, KVT_TIER_HOST);
        }
        kvt_kv_get_stats(kv, &ks);
    }
    const int64_t up = ks.moved_count[KVT_TIER_DISK][KVT_TIER_HOST] + ks.moved_count[KVT_TIER_DISK][KVT_TIER_FAST];
    const bool ok = !st && f == 4 && h == 4 && up >= 1 && holds(kv, 0, 1, 16);
    test_result(ok, "kv_sched: a plan brings a planned sequence up from disk into the fast and host tiers, evicting "
                "the unplanned one", "%s A: fast %lld host %lld, disk reads %lld", st ? err.msg : "", (long long)f,
                (long long)h, (long long)up);
    kvt_kv_free(kv);
}

// Fast tier of 8 blocks holds A and B (4 each); C is written next. LRU evicts A (the oldest); with the plan
// [A, A, B] (A runs in the first iteration, B in the second) B's blocks go instead and A stays whole.
static void plan_evict(void) {
    int64_t a_fast[2] = {-1, -1}, b_fast[2] = {-1, -1};
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    for (int with = 0; with < 2 && !st; with++) {
        kvt_kv *kv = NULL;
        const kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 8, -1);
        st = kvt_kv_paged_init(&p, &kv, &err);
        const int32_t b = st ? -1 : new_seq(kv), c = st ? -1 : new_seq(kv);
        if (!st) st = fill(kv, 0, 1, 0, 8, &err);
        if (!st) st = fill(kv, b, 2, 0, 8, &err);
        const int32_t plan[] = {0, 0, b};
        if (!st && with) kvt_kv_paged_set_plan(kv, plan, 3);
        if (!st) st = fill(kv, c, 3, 0, 8, &err);
        a_fast[with] = resident_blocks(kv, 0, KVT_TIER_FAST);
        b_fast[with] = resident_blocks(kv, b, KVT_TIER_FAST);
        kvt_kv_free(kv);
    }
    test_result(!st && a_fast[0] < 4 && a_fast[1] == 4 && b_fast[1] < 4,
                "kv_sched: with a plan eviction takes the blocks of the sequence that runs later, not LRU's",
                "%s A in fast: %lld (lru), %lld (plan); B: %lld (plan)", st ? err.msg : "", (long long)a_fast[0],
                (long long)a_fast[1], (long long)b_fast[1]);
}

// --- demote ----------------------------------------------------------------------------------------------------

// True if seq's first n positions hold variant tag's values (f32 store: exact).
static bool holds(kvt_kv *kv, int32_t seq, int tag, int64_t n) {
    for (int l = 0; l < NL; l++)
        for (int64_t j = 0; j < kvt_kv_n_blocks(kv, n); j++) {
            kvt_kv_view w;
            kvt_err e;
            if (kv->ops->acquire(kv, seq, l, 0, j, &w, &e)) return false;
            bool ok = true;
            for (int64_t i = 0; i < w.n; i++)
                for (int h = 0; h < NH; h++)
                    for (int x = 0; x < HD; x++) {
                        const float *kr = (const float *)((const uint8_t *)w.k + h * w.k_hstride + i * w.k_stride);
                        const float *vr = (const float *)((const uint8_t *)w.v + h * w.v_hstride + i * w.v_stride);
                        ok = ok && kr[x] == val(tag, l, w.pos0 + i, h * HD + x, 0) && vr[x] == val(tag, l, w.pos0 + i, h * HD + x, 1);
                    }
            kv->ops->release(kv, seq, l, 0, j);
            if (!ok) return false;
        }
    return true;
}

static void demote_store(void) {
    kvt_err err = {0};
    kvt_kv *kv = NULL;
    const kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 16, 3); // host tier: 3 blocks
    kvt_status st = kvt_kv_paged_init(&p, &kv, &err);
    const int32_t b = st ? -1 : new_seq(kv);
    if (!st) st = fill(kv, 0, 1, 0, 8, &err); // 4 blocks
    if (!st) st = fill(kv, b, 2, 0, 6, &err); // 4 blocks, the last partly filled
    kvt_err e2 = {0};
    const kvt_status full = st ? KVT_OK : kvt_kv_paged_seq_demote(kv, 0, KVT_TIER_HOST, &e2);
    const bool unmoved = resident_blocks(kv, 0, KVT_TIER_FAST) == 4 && resident_blocks(kv, 0, KVT_TIER_HOST) == 0;
    test_result(full == KVT_ERR_BUDGET && unmoved, "kv_sched: demote without room gives KVT_ERR_BUDGET and moves nothing",
                "%s status %d (%s), fast %lld host %lld", st ? err.msg : "", (int)full, e2.msg,
                (long long)resident_blocks(kv, 0, KVT_TIER_FAST), (long long)resident_blocks(kv, 0, KVT_TIER_HOST));
    const kvt_status nodisk = st ? KVT_OK : kvt_kv_paged_seq_demote(kv, 0, KVT_TIER_DISK, &e2);
    test_result(nodisk == KVT_ERR_INVALID_ARG, "kv_sched: demote to an absent tier is refused", "status %d", (int)nodisk);
    kvt_kv_free(kv);
    // a host tier of 6 blocks: B (4 blocks) goes down, A stays; both read back exactly
    const kvt_kv_paged_params p2 = params(KVT_TYPE_F32, 0, 16, 6);
    kv = NULL;
    if (!st) st = kvt_kv_paged_init(&p2, &kv, &err);
    if (!st) st = fill(kv, 0, 1, 0, 8, &err);
    const int32_t b2 = st ? -1 : new_seq(kv);
    if (!st) st = fill(kv, b2, 2, 0, 6, &err);
    if (!st) st = kvt_kv_paged_seq_demote(kv, b2, KVT_TIER_HOST, &err);
    const int64_t bf = resident_blocks(kv, b2, KVT_TIER_FAST), bh = resident_blocks(kv, b2, KVT_TIER_HOST);
    const int64_t af = resident_blocks(kv, 0, KVT_TIER_FAST);
    const bool ok = !st && bf == 0 && bh == 4 && af == 4 && holds(kv, b2, 2, 6) && holds(kv, 0, 1, 8);
    test_result(ok, "kv_sched: demote moves a sequence to the host tier, seq_usage counts it, it reads back exactly",
                "%s B fast %lld host %lld, A fast %lld", st ? err.msg : "", (long long)bf, (long long)bh, (long long)af);
    kvt_kv_free(kv);
    // C forks A (sharing A's 4 blocks) and adds 4 of its own; with A planned, demoting C moves only C's own
    kv = NULL;
    int32_t c = -1;
    if (!st) st = kvt_kv_paged_init(&p2, &kv, &err);
    if (!st) st = fill(kv, 0, 1, 0, 8, &err);
    if (!st) st = kv->ops->seq_fork(kv, 0, &c, &err);
    if (!st) st = fill(kv, c, 3, 8, 8, &err);
    const int32_t plan[] = {0};
    if (!st) kvt_kv_paged_set_plan(kv, plan, 1);
    if (!st) st = kvt_kv_paged_seq_demote(kv, c, KVT_TIER_HOST, &err);
    const int64_t cf = st ? -1 : resident_blocks(kv, c, KVT_TIER_FAST), ch = st ? -1 : resident_blocks(kv, c, KVT_TIER_HOST);
    const int64_t af2 = st ? -1 : resident_blocks(kv, 0, KVT_TIER_FAST);
    test_result(!st && cf == 4 && ch == 4 && af2 == 4,
                "kv_sched: demote leaves the blocks a planned sequence shares in the fast tier",
                "%s C fast %lld host %lld, A fast %lld", st ? err.msg : "", (long long)cf, (long long)ch, (long long)af2);
    kvt_kv_free(kv);
}

// Decoding after a demotion (to host, to disk) gives the logits of never demoting, bit for bit. m: a small model.
void test_kv_sched_demote_model(const kvt_model *m, const char *disk) {
    const int32_t V = m->hp.n_vocab;
    enum { N0 = 21, N1 = 6 };
    int32_t toks[N0 + N1];
    for (int i = 0; i < N0 + N1; i++) toks[i] = 1 + (i * 53 + 7) % (V - 1);
    float *ref = malloc((size_t)3 * N1 * V * sizeof *ref);
    kvt_err err = {0};
    kvt_status st = ref ? KVT_OK : kvt_errorf(&err, KVT_ERR_NOMEM, "logits");
    int64_t left_fast[3] = {0, 0, 0};
    for (int run = 0; run < 3 && !st; run++) { // 0: never demoted, 1: to host, 2: to disk
        kvt_context_params cp = kvt_context_params_default();
        cp.n_ctx = 64;
        cp.n_threads = 2;
        cp.kv_block = 8;
        cp.kv_host_bytes = 1 << 20;
        cp.kv_disk_dir = disk;
        kvt_context *ctx = NULL;
        st = kvt_context_init(m, &cp, &ctx, &err);
        if (!st) st = kvt_decode(ctx, toks, N0, false, &err);
        if (!st && run) st = kvt_kv_paged_seq_demote(kvt_context_kv(ctx), 0, run == 1 ? KVT_TIER_HOST : KVT_TIER_DISK, &err);
        int64_t u[KVT_TIER_COUNT] = {0};
        if (!st) kvt_kv_paged_seq_usage(kvt_context_kv(ctx), 0, u);
        left_fast[run] = u[KVT_TIER_FAST] + (run == 2 ? u[KVT_TIER_HOST] : 0);
        for (int i = 0; !st && i < N1; i++) {
            st = kvt_decode(ctx, &toks[N0 + i], 1, false, &err);
            if (!st) memcpy(ref + ((int64_t)run * N1 + i) * V, kvt_context_logits(ctx), (size_t)V * sizeof *ref);
        }
        kvt_context_free(ctx);
    }
    const bool ok = !st && left_fast[1] == 0 && left_fast[2] == 0 &&
                    !memcmp(ref, ref + N1 * V, (size_t)N1 * V * sizeof *ref) &&
                    !memcmp(ref, ref + 2 * N1 * V, (size_t)N1 * V * sizeof *ref);
    test_result(ok, "kv_sched: decoding after a demotion to host or disk gives the logits of never demoting",
                "%s (bytes left above the tier: %lld, %lld)", st ? err.msg : "logits differ", (long long)left_fast[1],
                (long long)left_fast[2]);
    free(ref);
}

// The copy engine's memory copies (host -> fast, CPU-bound) keep at most io_mem_threads of its 4 threads at work at
// once: with 1, five sequences read in turn through a fast tier of 8 blocks are prefetched by one thread at a time
// (io_busy_max 1), and read back exactly; with 4 the same reads give the same data; with -1 (`--kv-copy-threads 0`) no
// copy thread takes them: the reader takes two queued blocks after each release (readers_take), so the blocks it
// reads next are loaded before it asks for them (prefetches, no stalls past the first reads), and the data is the same.
static void copy_threads(void) {
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    int64_t busy_max[3] = {-1, -1, -1}, pre[3] = {0, 0, 0}, miss[3] = {0, 0, 0};
    bool same = true;
    for (int k = 0; k < 3 && !st; k++) {
        kvt_kv *kv = NULL;
        kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 8, -1);
        p.n_io_threads = 4;
        p.io_mem_threads = k == 0 ? 1 : k == 1 ? 4 : -1;
        st = kvt_kv_paged_init(&p, &kv, &err);
        int32_t seqs[5] = {0, -1, -1, -1, -1};
        for (int i = 1; !st && i < 5; i++)
            if ((seqs[i] = new_seq(kv)) < 0) st = kvt_errorf(&err, KVT_ERR_NOMEM, "fork");
        for (int i = 0; !st && i < 5; i++) st = fill(kv, seqs[i], i + 1, 0, 16, &err);
        for (int round = 0; !st && round < 3; round++)
            for (int i = 0; !st && i < 5; i++) acquire_all(kv, seqs[i], 16, &err, &st);
        for (int i = 0; !st && i < 5; i++) same = same && holds(kv, seqs[i], i + 1, 16);
        kvt_kv_paged_drain(kv);
        kvt_kv_stats ks;
        kvt_kv_get_stats(kv, &ks);
        busy_max[k] = ks.io_busy_max;
        pre[k] = ks.prefetches;
        miss[k] = ks.misses;
        kvt_kv_free(kv);
    }
    test_result(!st && same && busy_max[0] == 1 && pre[0] > 0 && busy_max[1] >= 1 && pre[1] > 0 && busy_max[2] == 1 &&
                    pre[2] > 0 && miss[2] < pre[2],
                "kv_sched: memory copies keep io_mem_threads copy threads at work at once (1 of 4), or none (the "
                "reader takes the queue), same data",
                "%s same data %d; io_mem 1: at most %lld at once, %lld prefetches; io_mem 4: %lld, %lld; readers: %lld, "
                "%lld prefetches, %lld misses",
                st ? err.msg : "", (int)same, (long long)busy_max[0], (long long)pre[0], (long long)busy_max[1],
                (long long)pre[1], (long long)busy_max[2], (long long)pre[2], (long long)miss[2]);
}

// kvt_kv_paged_help (a thread waiting in the compute pool takes the copy engine's next queued entry): with no copy
// thread on memory copies (io_mem_threads -1) a reader's acquire queues the blocks that follow, which help takes one
// per call until none is left (then false), as prefetches; the data read back is the same. With a copy thread at
// work on memory copies (io_mem_threads 1), and for a store of another kind, it takes nothing.
static void pool_help(void) {
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    int64_t took[2] = {0, 0}, queued = 0;
    double help_ms = 0;
    bool same = true;
    for (int k = 0; k < 2 && !st; k++) {
        kvt_kv *kv = NULL;
        kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 8, -1);
        p.io_mem_threads = k == 0 ? -1 : 1;
        st = kvt_kv_paged_init(&p, &kv, &err);
        int32_t seqs[3] = {0, -1, -1};
        for (int i = 1; !st && i < 3; i++)
            if ((seqs[i] = new_seq(kv)) < 0) st = kvt_errorf(&err, KVT_ERR_NOMEM, "fork");
        for (int i = 0; !st && i < 3; i++) st = fill(kv, seqs[i], i + 1, 0, 16, &err);
        kvt_kv_view w;
        if (!st) st = kv->ops->acquire(kv, seqs[0], 0, 0, 0, &w, &err); // seq 0's blocks went down: its next are queued
        kvt_kv_stats a, b;
        kvt_kv_get_stats(kv, &a);
        // help gives false on an empty queue, and also when another thread holds the store's mutex (its trylock): a
        // copy thread woken for a block on its way may hold it a moment, so a false ends the loop only 100 times in a row
        for (int n = 0, misses = 0; !st && n < 1000 && misses < 100; n++) {
            if (kvt_kv_paged_help(kv)) took[k]++, misses = 0;
            else misses++, sched_yield();
        }
        kvt_kv_get_stats(kv, &b);
        if (k == 0) help_ms = b.io_help_ms;
        if (!st) kv->ops->release(kv, seqs[0], 0, 0, 0);
        kvt_kv_paged_drain(kv);
        kvt_kv_stats c;
        kvt_kv_get_stats(kv, &c);
        if (k == 0) queued = c.io_items - a.io_items; // every entry: help took them all, release and drain none
        for (int i = 0; !st && i < 3; i++) same = same && holds(kv, seqs[i], i + 1, 16);
        if (k == 0 && b.io_items - a.io_items != took[0]) same = false;
        kvt_kv_free(kv);
    }
    kvt_kv *ct = NULL;
    kvt_kv_params cp = {KVT_TYPE_F32, NL, NH, HD, HD, 64, BTOK, 0};
    bool other = true;
    if (!st && !(st = kvt_kv_contig_init(&cp, &ct, &err))) other = !kvt_kv_paged_help(ct);
    kvt_kv_free(ct);
    test_result(!st && same && queued > 0 && took[0] == queued && help_ms > 0 && took[1] == 0 && other,
                "kv_sched: a thread waiting in the compute pool takes the queued copies where no copy thread does "
                "(kvt_kv_paged_help) one per call until none is left, same data; none with a copy thread at work or another store",
                "%s same %d; queued %lld, taken %lld (%.3f ms); with a copy thread %lld; other store %d",
                st ? err.msg : "", (int)same, (long long)queued, (long long)took[0], help_ms, (long long)took[1],
                (int)other);
}

// The copy engine's disk batches (kv_paged_io.c) against its one-at-a-time loads: a sequence of 16 blocks per layer
// is demoted to disk, a fast tier of 12 blocks is empty. The caller prefetches 8 blocks of layer 0 (loaded into free
// slots), a reader reads them in order and then block 13 (a miss), so that each has a use of its own (LRU without
// ties) and the schedule needs all of layer 0 after layer 1; the caller then prefetches 7 blocks of layer 1 in
// schedule order: 3 into the free slots, 4 over layer 0's least recently read. With one block at a time (io_batch 1), batches of 3 (the 8 in three) and of 16
// (the default), the same blocks are evicted in the same order, the same blocks loaded (bytes and transfers counted
// alike, every one a prefetch) and the sequence reads back exactly. One copy thread, so that the order is fixed.
static void disk_batch(const char *disk) {
    const int32_t modes[3] = {1, 3, 0};
    evict_log lg[3] = {{0}};
    int64_t bytes[3] = {0}, count[3] = {0}, pre[3] = {0}, fast[3] = {0};
    bool exact[3] = {false, false, false};
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    for (int m = 0; m < 3 && !st; m++) {
        kvt_kv *kv = NULL;
        kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 12, 0);
        p.disk_dir = disk;
        p.evict = "lru";
        p.n_io_threads = 1;
        p.io_batch = modes[m];
        p.on_evict = log_evict;
        p.on_evict_ud = &lg[m];
        st = kvt_kv_paged_init(&p, &kv, &err);
        if (!st) st = fill(kv, 0, 1, 0, 64, &err);
        for (int l = 0; !st && l < NL; l++) kvt_kv_paged_set_caller_prefetch(kv, 0, l, true);
        if (!st) st = kvt_kv_paged_seq_demote(kv, 0, KVT_TIER_DISK, &err);
        if (!st) kvt_kv_paged_drain(kv);
        kvt_kv_stats a, b;
        kvt_kv_get_stats(kv, &a);
        lg[m].n = 0; // the fill's evictions left out
        const int64_t l0[8] = {1, 2, 4, 5, 7, 9, 10, 12}, l1[7] = {0, 3, 6, 8, 9, 11, 13};
        if (!st) {
            kvt_kv_paged_prefetch(kv, 0, 0, 0, l0, 8);
            kvt_kv_paged_drain(kv);
            const int64_t rd[9] = {1, 2, 4, 5, 7, 9, 10, 12, 13};
            kvt_kv_view w;
            for (int i = 0; i < 9 && !st; i++) {
                if (!(st = kv->ops->acquire(kv, 0, 0, 0, rd[i], &w, &err))) kv->ops->release(kv, 0, 0, 0, rd[i]);
            }
            kvt_kv_paged_prefetch(kv, 0, 1, 0, l1, 7);
            kvt_kv_paged_drain(kv);
        }
        const int n_ev = lg[m].n; // (reading the sequence back below evicts more)
        kvt_kv_get_stats(kv, &b);
        bytes[m] = b.moved_bytes[KVT_TIER_DISK][KVT_TIER_FAST] - a.moved_bytes[KVT_TIER_DISK][KVT_TIER_FAST];
        count[m] = b.moved_count[KVT_TIER_DISK][KVT_TIER_FAST] - a.moved_count[KVT_TIER_DISK][KVT_TIER_FAST];
        pre[m] = b.prefetches - a.prefetches;
        fast[m] = st ? -1 : resident_blocks(kv, 0, KVT_TIER_FAST);
        exact[m] = !st && holds(kv, 0, 1, 64);
        lg[m].n = n_ev;
        kvt_kv_free(kv);
    }
    bool same = true;
    for (int m = 1; m < 3; m++) {
        same = same && lg[m].n == lg[0].n && bytes[m] == bytes[0] && count[m] == count[0] && pre[m] == pre[0] && fast[m] == fast[0];
        for (int i = 0; same && i < lg[0].n; i++) same = lg[m].layer[i] == lg[0].layer[i] && lg[m].index[i] == lg[0].index[i];
    }
    test_result(!st && same && count[0] == 16 && pre[0] == 15 && lg[0].n == 4 && lg[0].index[0] == 1 && lg[0].index[3] == 5 && fast[0] == 12 && exact[0] && exact[1] && exact[2],
                "kv_sched: disk loads in batches (io_batch 3, 16) = one at a time: the same evictions in the same order, the "
                "same loads, bytes and transfers counted, the same data",
                "%s evictions %d/%d/%d, loads %lld/%lld/%lld (%lld/%lld/%lld bytes), prefetches %lld/%lld/%lld, fast %lld/%lld/%lld, exact %d%d%d",
                st ? err.msg : "", lg[0].n, lg[1].n, lg[2].n, (long long)count[0], (long long)count[1], (long long)count[2],
                (long long)bytes[0], (long long)bytes[1], (long long)bytes[2], (long long)pre[0], (long long)pre[1],
                (long long)pre[2], (long long)fast[0], (long long)fast[1], (long long)fast[2], exact[0], exact[1], exact[2]);
}

// The blocks a selection drops are the fast tier's first victims even where the victim search's window does not see
// them (kv_paged.c dropped_victim): head-wise blocks, a fast tier of 4 holding blocks 0..3 of (layer 0, head 0), a
// window of one block; the selection {0, 1, 3} drops block 2, and the next load (a block of layer 1) evicts block 2,
// where the window alone (with no selection) evicts the block it examines. LRU.
static void dropped_outside_window(void) {
    evict_log lg[2] = {{0}};
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    for (int with = 0; with < 2 && !st; with++) {
        kvt_kv *kv = NULL;
        st = four_read(&lg[with], 1, &kv, &err);
        kvt_kv_view w;
        const int64_t keep[3] = {0, 1, 3};
        if (with) kvt_kv_paged_set_selected(kv, 0, 0, 0, keep, 3);
        kvt_kv_paged_drain(kv);
        lg[with].n = 0;
        if (!st && !(st = kv->ops->acquire(kv, 0, 1, 0, 0, &w, &err))) kv->ops->release(kv, 0, 1, 0, 0);
        kvt_kv_free(kv);
    }
    test_result(!st && lg[0].n == 1 && lg[1].n == 1 && lg[1].layer[0] == 0 && lg[1].index[0] == 2 && lg[0].index[0] != 2,
                "kv_sched: a block the selection dropped is the first victim outside the victim window",
                "%s evicted: window of 1 %d (%lld), selection {0, 1, 3}: %d (layer %d block %lld)", st ? err.msg : "",
                lg[0].n, (long long)lg[0].index[0], lg[1].n, lg[1].layer[0], (long long)lg[1].index[0]);
}

// kvt_kv_paged_prefetch_begin / _end: the blocks handed over between them that the readers need within their layer
// (late) and that are only on disk are read by _end on the calling thread in one batch and are in the fast tier when
// it returns (their acquires hit); an earlier layer's hand-over (not late) is queued for the copy engine as before.
// A sequence of 16 blocks per layer demoted to disk, a fast tier of 12; a reader at layer 1.
// The setting of the late-batch tests: a sequence of 16 blocks per layer demoted to disk, a fast tier of 12, its layers'
// prefetch the caller's, a reader at layer 1 (its block 0 read). NULL in *kv where the disk engine is not io_uring (the
// test named `name` then counted as skipped); else the store, and the status of the set-up.
static kvt_status late_setup(const char *disk, const char *name, kvt_kv **kv, kvt_err *err) {
    kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 12, 0);
    p.disk_dir = disk;
    p.n_io_threads = 1;
    *kv = NULL;
    kvt_status st = kvt_kv_paged_init(&p, kv, err);
    if (!st && strcmp(kvt_kv_paged_disk_engine(*kv), "io_uring") != 0) {
        kvt_kv_free(*kv);
        *kv = NULL;
        test_skip(name, "no io_uring");
        return KVT_OK;
    }
    if (!st) st = fill(*kv, 0, 1, 0, 64, err);
    for (int l = 0; !st && l < NL; l++) kvt_kv_paged_set_caller_prefetch(*kv, 0, l, true);
    if (!st) st = kvt_kv_paged_seq_demote(*kv, 0, KVT_TIER_DISK, err);
    if (*kv) kvt_kv_paged_drain(*kv);
    kvt_kv_view w;
    if (!st && !(st = (*kv)->ops->acquire(*kv, 0, 1, 0, 0, &w, err))) (*kv)->ops->release(*kv, 0, 1, 0, 0);
    return st;
}

static void late_batch(const char *disk) {
    kvt_err err = {0};
    kvt_kv *kv;
    kvt_status st = late_setup(disk, "kv_sched: a late hand-over read in one batch by kvt_kv_paged_prefetch_end", &kv, &err);
    if (!st && !kv) return;
    kvt_kv_view w;
    kvt_kv_stats a, b, c;
    kvt_kv_get_stats(kv, &a);
    const int64_t late[4] = {2, 5, 7, 9};
    if (!st) {
        kvt_kv_paged_prefetch_begin(kv);
        kvt_kv_paged_prefetch(kv, 0, 1, 0, late, 4);
        kvt_kv_paged_prefetch_end(kv);
    }
    kvt_kv_get_stats(kv, &b);
    for (int i = 0; i < 4 && !st; i++) {
        if (!(st = kv->ops->acquire(kv, 0, 1, 0, late[i], &w, &err))) kv->ops->release(kv, 0, 1, 0, late[i]);
    }
    kvt_kv_get_stats(kv, &c);
    const int64_t loads = b.moved_count[KVT_TIER_DISK][KVT_TIER_FAST] - a.moved_count[KVT_TIER_DISK][KVT_TIER_FAST];
    const bool ok = !st && loads == 4 && b.io_batches - a.io_batches == 1 && b.handover[1][KVT_HO_ABSENT] - a.handover[1][KVT_HO_ABSENT] == 4 &&
                    c.misses == b.misses && c.hits - b.hits == 4 && holds(kv, 0, 1, 64);
    test_result(ok, "kv_sched: a late hand-over's disk blocks are read in one batch by kvt_kv_paged_prefetch_end (then hits)",
                "%s loads %lld, batches %lld, late absent %lld, misses after %lld, hits after %lld", st ? err.msg : "",
                (long long)loads, (long long)(b.io_batches - a.io_batches),
                (long long)(b.handover[1][KVT_HO_ABSENT] - a.handover[1][KVT_HO_ABSENT]), (long long)(c.misses - b.misses),
                (long long)(c.hits - b.hits));
    kvt_kv_free(kv);
}

// kvt_kv_paged_prefetch_end_async: the late batch is left in flight (its blocks busy): kvt_kv_paged_acquire_ready
// refuses one of them and takes a resident block; a plain acquire of one of them finishes the batch itself (no
// kvt_kv_paged_late_wait first: no deadlock); kvt_kv_paged_late_wait then has nothing to wait for; the blocks read
// are the same, in one batch, and hold what was written. The setting of late_batch.
static void late_batch_async(const char *disk) {
    kvt_err err = {0};
    kvt_kv *kv;
    kvt_status st = late_setup(disk, "kv_sched: a late batch left in flight by kvt_kv_paged_prefetch_end_async", &kv, &err);
    if (!st && !kv) return;
    kvt_kv_view w;
    kvt_kv_stats a, b;
    kvt_kv_get_stats(kv, &a);
    const int64_t late[4] = {2, 5, 7, 9};
    bool pend = false, ready_late = true, ready_res = false;
    if (!st) {
        kvt_kv_paged_prefetch_begin(kv);
        kvt_kv_paged_prefetch(kv, 0, 1, 0, late, 4);
        pend = kvt_kv_paged_prefetch_end_async(kv);
    }
    if (!st && !(st = kvt_kv_paged_acquire_ready(kv, 0, 1, 0, late[0], &w, &ready_late, &err)) && ready_late) {
        kv->ops->release(kv, 0, 1, 0, late[0]); // read already (a fast device): the refusal is not tested
    }
    if (!st && !(st = kvt_kv_paged_acquire_ready(kv, 0, 1, 0, 0, &w, &ready_res, &err)) && ready_res) {
        kv->ops->release(kv, 0, 1, 0, 0);
    }
    if (!st && !(st = kv->ops->acquire(kv, 0, 1, 0, late[1], &w, &err))) kv->ops->release(kv, 0, 1, 0, late[1]);
    kvt_kv_paged_late_wait(kv);
    for (int i = 0; i < 4 && !st; i++) {
        if (!(st = kv->ops->acquire(kv, 0, 1, 0, late[i], &w, &err))) kv->ops->release(kv, 0, 1, 0, late[i]);
    }
    kvt_kv_get_stats(kv, &b);
    const int64_t loads = b.moved_count[KVT_TIER_DISK][KVT_TIER_FAST] - a.moved_count[KVT_TIER_DISK][KVT_TIER_FAST];
    const bool ok = !st && pend && ready_res && loads == 4 && b.io_batches - a.io_batches == 1 && holds(kv, 0, 1, 64);
    test_result(ok, "kv_sched: a late batch left in flight (prefetch_end_async): ready acquires, an acquire finishes it",
                "%s in flight %d, a late block ready at once %d, a resident one ready %d, loads %lld, batches %lld",
                st ? err.msg : "", pend, ready_late, ready_res, (long long)loads, (long long)(b.io_batches - a.io_batches));
    kvt_kv_free(kv);
}

// The victims a late batch takes (the blocks a selection dropped) that have no disk copy are written first, together
// (kv_paged_io.c clean_victims), then only dropped: a sequence of 16 blocks per layer written into a fast tier of 12
// (spread: the blocks evicted while it is written go to disk one by one; the 12 left resident have no disk copy);
// a selection that drops every block of both layers; then a late hand-over of layer 0's blocks that are only on disk,
// read by kvt_kv_paged_prefetch_end. Each load evicts one dropped block; those and the dropped blocks after them (the
// next victims) are written before in one submission: every fast -> disk move is one of these writes, the loads hit
// after, and every block reads back exactly (the written ones through their CRC). With the submission's 2nd write
// (a victim of this batch) failed by injection: that victim stays without a disk copy and its eviction writes it as
// before (no error; the same moves, one block fewer written together, the same data).
static void late_batch_dirty(const char *disk) {
    const char *name = "kv_sched: a late batch's victims without a disk copy are written together first (then dropped), "
                       "an injected write failure written again by the eviction";
    int64_t moved[2] = {0}, cleaned[2] = {0}, cbatches[2] = {0}, loads[2] = {0}, hits[2] = {0};
    bool exact[2] = {false, false};
    kvt_err err = {0};
    kvt_status st = KVT_OK;
    int64_t w0 = 0; // disk writes while the sequence is written (each a fast -> disk move)
    for (int f = 0; f < 2 && !st; f++) {
        kvt_kv *kv = NULL;
        kvt_kv_paged_params p = params(KVT_TYPE_F32, 0, 12, 0);
        p.disk_dir = disk;
        p.n_io_threads = 1;
        p.evict = "spread";
        p.fault_write_at = f ? w0 + 2 : 0;
        st = kvt_kv_paged_init(&p, &kv, &err);
        if (!st && strcmp(kvt_kv_paged_disk_engine(kv), "io_uring") != 0) {
            kvt_kv_free(kv);
            test_skip(name, "no io_uring");
            return;
        }
        if (!st) st = fill(kv, 0, 1, 0, 64, &err);
        kvt_kv_paged_drain(kv);
        for (int l = 0; !st && l < NL; l++) {
            kvt_kv_paged_set_caller_prefetch(kv, 0, l, true);
            kvt_kv_paged_set_selected(kv, 0, l, 0, NULL, 0);
        }
        kvt_kv_view w;
        if (!st && !(st = kv->ops->acquire(kv, 0, 0, 0, 0, &w, &err))) kv->ops->release(kv, 0, 0, 0, 0); // readers at layer 0
        kvt_kv_paged_drain(kv);
        kvt_kv_stats a, b, c;
        kvt_kv_get_stats(kv, &a);
        if (!f) w0 = a.moved_count[KVT_TIER_FAST][KVT_TIER_DISK];
        const int64_t late[4] = {1, 2, 3, 4}; // written first, evicted while the rest was written: on disk
        const int nl = 4;
        if (!st) {
            kvt_kv_paged_prefetch_begin(kv);
            kvt_kv_paged_prefetch(kv, 0, 0, 0, late, nl);
            kvt_kv_paged_prefetch_end(kv);
        }
        kvt_kv_get_stats(kv, &b);
        const int64_t absent = b.handover[1][KVT_HO_ABSENT] - a.handover[1][KVT_HO_ABSENT];
        for (int i = 0; i < nl && !st && absent > 0; i++) {
            if (!(st = kv->ops->acquire(kv, 0, 0, 0, late[i], &w, &err))) kv->ops->release(kv, 0, 0, 0, late[i]);
        }
        kvt_kv_get_stats(kv, &c);
        moved[f] = b.moved_count[KVT_TIER_FAST][KVT_TIER_DISK] - a.moved_count[KVT_TIER_FAST][KVT_TIER_DISK];
        cleaned[f] = b.io_clean_blocks - a.io_clean_blocks;
        cbatches[f] = b.io_clean_batches - a.io_clean_batches;
        loads[f] = b.moved_count[KVT_TIER_DISK][KVT_TIER_FAST] - a.moved_count[KVT_TIER_DISK][KVT_TIER_FAST];
        hits[f] = c.misses == b.misses ? c.hits - b.hits : -1;
        exact[f] = !st && holds(kv, 0, 1, 64);
        kvt_kv_free(kv);
    }
    const bool ok = !st && loads[0] == 4 && moved[0] == cleaned[0] && cleaned[0] > loads[0] && cbatches[0] == 1 &&
                    hits[0] == 4 && exact[0] && loads[1] == loads[0] && moved[1] == moved[0] && cleaned[1] == cleaned[0] - 1 &&
                    cbatches[1] == 1 && hits[1] == 4 && exact[1];
    test_result(ok, name, "%s loads %lld/%lld, fast->disk %lld/%lld, written together %lld/%lld in %lld/%lld submissions, hits after %lld/%lld, exact %d%d",
                st ? err.msg : "", (long long)loads[0], (long long)loads[1], (long long)moved[0], (long long)moved[1],
                (long long)cleaned[0], (long long)cleaned[1], (long long)cbatches[0], (long long)cbatches[1],
                (long long)hits[0], (long long)hits[1], exact[0], exact[1]);
}

void test_kv_sched(const test_env *env) {
    (void)env;
    block_io();
    plan_prefetch();
    caller_prefetch();
    selected_evict();
    dropped_outside_window();
    char dir[] = "/tmp/kvt_test_kvsched_XXXXXX";
    const char *disk = mkdtemp(dir);
    if (disk) plan_two_hops(disk), disk_batch(disk), late_batch(disk), late_batch_async(disk), late_batch_dirty(disk);
    else test_skip("kv_sched: plan and batches with a disk tier", "cannot create a directory in /tmp");
    if (disk) rmdir(disk);
    plan_evict();
    demote_store();
    copy_threads();
    pool_help();
}
