// test_sim.c - the discrete-event simulator (src/sim): links with known answers, the event queue,
// the policies added for it, its decisions against kvt_evict_pick, the paged store's own prefetch and victim
// choices on one trace, determinism, the serving scheduler's decisions as its batch scheduler (--sched kvtier),
// and `kvtier sim`.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kv/kv_paged.h"
#include "../src/kv/kv_policy.h"
#include "../src/kv/kv_prefetch.h"
#include "../src/kv/kv_victim.h"
#include "../src/model/shapes.h"
#include "../src/sim/sim.h"
#include "../src/sim/sim_core.h"
#include "test.h"
#include "test_util.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1); }

// One link of 1 GB/s, no latency: A (1 GB) at t = 0, B (1 GB) at t = 0.5. A alone gets 0.5 GB by 0.5 s,
// then each gets 0.5 GB/s: A ends at 1.5; B has 0.5 GB by then and ends alone at 2.0.
static void test_link_sharing(void) {
    kvt_sim_link l;
    kvt_err err = {0};
    kvt_sim_link_init(&l, "test", 1e9, 0);
    bool ok = !kvt_sim_link_start(&l, 0, 1, 1e9, &err) && near(kvt_sim_link_next_time(&l), 1.0);
    ok = ok && !kvt_sim_link_start(&l, 0.5, 2, 1e9, &err) && near(kvt_sim_link_next_time(&l), 1.5);
    ok = ok && kvt_sim_link_finish(&l, 1.5) == 1 && near(kvt_sim_link_next_time(&l), 2.0);
    ok = ok && kvt_sim_link_finish(&l, 2.0) == 2 && isinf(kvt_sim_link_next_time(&l)) && l.n_done == 2 &&
         near(l.bytes_total, 2e9) && near(l.busy_s, 2.0);
    // three equal transfers started together end together at 3x the time of one
    kvt_sim_link_free(&l);
    kvt_sim_link_init(&l, "test", 1e9, 0);
    for (int i = 0; i < 3; i++) ok = ok && !kvt_sim_link_start(&l, 1.0, 10 + i, 2e8, &err);
    ok = ok && near(kvt_sim_link_next_time(&l), 1.6);
    kvt_sim_link_free(&l);
    test_result(ok, "sim: one link, two concurrent transfers: completion times under fair sharing (1.5 s, 2.0 s)",
                "wrong completion time");
}

// latency + size / bandwidth through the event queue: 2 GB/s, 1 ms, 1 GB issued at t = 0 ends at 0.501 s
static void test_link_latency(void) {
    kvt_sim_queue q;
    kvt_sim_queue_init(&q);
    kvt_sim_link l;
    kvt_err err = {0};
    kvt_sim_link_init(&l, "test", 2e9, 1e-3);
    bool ok = !kvt_sim_queue_push(&q, l.latency, 1, 0, 7, 0, &err);
    kvt_sim_event e;
    double done = -1;
    while (ok && kvt_sim_queue_pop(&q, &e)) {
        if (e.kind == 1) {
            ok = !kvt_sim_link_start(&l, e.t, e.a, 1e9, &err) &&
                 !kvt_sim_queue_push(&q, kvt_sim_link_next_time(&l), 2, 0, (int64_t)l.version, 0, &err);
        } else if ((uint32_t)e.a == l.version) {
            ok = kvt_sim_link_finish(&l, e.t) == 7;
            done = e.t;
        }
    }
    ok = ok && near(done, 0.501);
    // ties come out in push order
    for (int i = 0; i < 5; i++) ok = ok && !kvt_sim_queue_push(&q, 3.0, 0, 0, i, 0, &err);
    ok = ok && !kvt_sim_queue_push(&q, 2.0, 0, 0, 99, 0, &err);
    int64_t order[6];
    for (int i = 0; i < 6 && ok; i++) ok = kvt_sim_queue_pop(&q, &e) && ((order[i] = e.a), true);
    ok = ok && order[0] == 99 && order[1] == 0 && order[2] == 1 && order[5] == 4 && !kvt_sim_queue_pop(&q, &e);
    kvt_sim_link_free(&l);
    kvt_sim_queue_free(&q);
    test_result(ok, "sim: latency + size/bandwidth (1 GB at 2 GB/s after 1 ms ends at 0.501 s); equal times in push order",
                "ended at %.6f s", done);
}

static void test_new_policies(void) {
    const kvt_evict_policy *ae = kvt_evict_policy_find("attn-ema"), *st = kvt_evict_policy_find("static"),
                           *orc = kvt_evict_policy_find("oracle"), *la = kvt_evict_policy_find("lookahead");
    bool ok = ae && st && orc && la;
    kvt_evict_info c[3] = {{.last_use = 1, .uses = 9, .next_use = 5, .index = 0, .attn_ema = 0.30},
                           {.last_use = 10, .uses = 1, .next_use = 2, .index = 7, .attn_ema = 0.01},
                           {.last_use = 5, .uses = 3, .next_use = 50, .index = 3, .attn_ema = 0.10}};
    ok = ok && kvt_evict_pick(ae, c, 3, 11) == 1 && kvt_evict_pick(st, c, 3, 11) == 1 &&
         kvt_evict_pick(orc, c, 3, 11) == kvt_evict_pick(la, c, 3, 11);
    // no attention mass exported (all 0): attn-ema falls back to recency
    kvt_evict_info z[2] = {{.last_use = 8}, {.last_use = 3}};
    ok = ok && kvt_evict_pick(ae, z, 2, 10) == 1;
    // every name in the list is found, and the simulator's policies are among them
    char names[128];
    snprintf(names, sizeof names, "%s", kvt_evict_policy_names());
    int n = 0;
    for (char *t = strtok(names, "|"); t; t = strtok(NULL, "|"), n++) ok = ok && kvt_evict_policy_find(t);
    ok = ok && n == 7 && strstr(kvt_evict_policy_names(), "attn-ema") && strstr(kvt_evict_policy_names(), "oracle");
    test_result(ok, "sim: policies attn-ema, static, oracle are store policies; kvt_evict_policy_names lists all 7",
                "wrong victim or name list");
}

typedef struct {
    const kvt_evict_policy *pol;
    int64_t n, mismatched;
} pick_check;

static void on_pick(void *ud, const kvt_evict_info *cands, int64_t n, uint64_t now, int64_t picked) {
    pick_check *p = ud;
    p->n++;
    if (kvt_evict_pick(p->pol, cands, n, now) != picked) p->mismatched++;
}

static void small_config(kvt_sim_config *c, const char *policy, double rho) {
    kvt_sim_config_default(c);
    c->workload = KVT_WL_CHAT;
    c->n_requests = 48;
    c->max_batch = 8;
    c->rho = rho;
    c->policy = policy;
}

static void test_decisions(void) {
    static const char *pols[] = {"lru", "lfu", "attn-ema", "static", "lookahead", "oracle"};
    bool ok = true;
    char msg[256] = "";
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
        kvt_sim_config c;
        small_config(&c, pols[i], 2.5);
        pick_check pc = {kvt_evict_policy_find(pols[i]), 0, 0};
        c.on_pick = on_pick;
        c.on_pick_ud = &pc;
        kvt_sim_result r;
        kvt_err err = {0};
        kvt_status st = kvt_sim_run(&c, &r, &err);
        if (st || pc.n == 0 || pc.mismatched || r.n_done != c.n_requests || !(r.hit_rate < 1)) {
            ok = false;
            snprintf(msg, sizeof msg, "%s: status %d (%.100s), %lld picks, %lld differ, %lld done", pols[i], (int)st, err.msg,
                     (long long)pc.n, (long long)pc.mismatched, (long long)r.n_done);
        }
        kvt_sim_result_free(&r);
    }
    test_result(ok, "sim: every eviction of all 6 policies is kvt_evict_pick's choice on the same candidates", "%s", msg);
}

// The defaults with n requests of `prompt` and `out` tokens arriving together, all in one batch (a real run's set-up).
static void fixed_burst_config(kvt_sim_config *c, int64_t prompt, int64_t out, int64_t n) {
    kvt_sim_config_default(c);
    c->workload = KVT_WL_FIXED;
    c->fixed_prompt = prompt;
    c->fixed_out = out;
    c->burst = true;
    c->n_requests = n;
    c->max_batch = n;
}

// Fast-tier victims in order, as layer x 100 + block index.
typedef struct {
    int64_t v[128];
    int n;
} victim_list;

static void store_victim(void *ud, int32_t layer, int32_t group, int64_t index) {
    victim_list *l = ud;
    (void)group;
    if (l->n < 128) l->v[l->n++] = layer * 100 + index;
}

// The simulator's candidates carry shard = request x layers + layer (2 layers here); the store's on_evict names no
// sequence, so victims of several requests compare as layer and index.
static void sim_victim(void *ud, const kvt_evict_info *cands, int64_t n, uint64_t now, int64_t picked) {
    victim_list *l = ud;
    (void)n;
    (void)now;
    if (l->n < 128) l->v[l->n++] = cands[picked].shard % 2 * 100 + cands[picked].index;
}

static void victims_str(const victim_list *l, char *buf, size_t cap) {
    size_t o = 0;
    for (int i = 0; i < l->n && o + 8 < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)l->v[i]);
    if (!l->n) snprintf(buf, cap, "-");
}

// The set-up of a trace run through both the simulator and the paged store: n requests of 13 prompt and 4 generated
// tokens arriving together, blocks of 4 positions over 2 layers, a fast tier of `fast` blocks, an unbounded host
// tier, the store's copy-engine prefetch of 3 by one copy thread (prefetch_depth 1), a fast block clean only with
// an SSD copy (the store's rule), 1 s iterations (a copy of 64 bytes then ends long before the next read); victims
// to sv (the simulator) and kv_v (the store).
static void trace_configs(kvt_sim_config *c, kvt_kv_paged_params *p, int64_t n, int64_t fast, const char *pol,
                          victim_list *sv, victim_list *kv_v) {
    fixed_burst_config(c, 13, 4, n);
    c->block_tokens = 4;
    c->block_bytes = 64;
    c->layers = 2;
    c->fast_blocks = fast;
    c->iter_ms = 1000;
    c->policy = pol;
    c->copy_prefetch = 3;
    c->prefetch_depth = 1;
    c->clean_ssd_only = true;
    c->on_pick = sim_victim;
    c->on_pick_ud = sv;
    *p = kvt_kv_paged_params_default();
    p->n_layer = 2;
    p->n_head_kv = 1;
    p->head_dim = p->head_dim_v = 4;
    p->n_ctx = 20; // 5 blocks per shard: a request holds up to ceil((13 + 4) / 4)
    p->block_tokens = 4;
    p->fast_bytes = fast * kvt_kv_paged_block_bytes(p);
    p->host_bytes = -1;
    p->evict = pol;
    p->prefetch = 3;
    p->n_io_threads = 1;
    p->on_evict = store_victim;
    p->on_evict_ud = kv_v;
}

// The store's copy-engine prefetch (kv_prefetch.h) and LFU victims against the simulator's copy_prefetch on one
// hand-made trace: one sequence of 13 prompt positions and 4 generated tokens, blocks of 4 positions (4 per layer,
// 2 layers), a fast tier of 5 blocks, an unbounded host tier, prefetch 3 by one copy thread. The store is given
// the simulator's trace: the prompt appended token block by token block (layer 0, layer 1), then 3 decode steps,
// each reading layer 0's blocks, then layer 1's; the copy engine finishes before each read ends
// (kvt_kv_paged_drain), as the simulator's copies do (1 ns against 125 ms of compute per read). Every fast-tier
// victim of both, in order, must be the same, and so must the reads that missed.
static void test_store_prefetch_same(void) {
    victim_list sv = {0}, kv_v = {0};
    kvt_sim_config c;
    kvt_kv_paged_params p;
    trace_configs(&c, &p, 1, 5, "lfu", &sv, &kv_v);
    kvt_sim_result r;
    kvt_err err = {0};
    bool ok = !kvt_sim_run(&c, &r, &err) && r.reads == 24;
    const int64_t sim_miss = ok ? r.reads - (int64_t)llround(r.hit_rate * (double)r.reads) : -1;
    kvt_sim_result_free(&r);
    kvt_kv *kv = NULL;
    ok = ok && !kvt_kv_paged_init(&p, &kv, &err);
    const float kvdata[16] = {0}; // 4 positions x 4 dims
    for (int64_t b = 0; ok && b < 4; b++) {
        for (int32_t L = 0; ok && L < 2; L++) {
            const int64_t n = 13 - 4 * b < 4 ? 13 - 4 * b : 4;
            ok = !kv->ops->append(kv, 0, L, 4 * b, n, kvdata, kvdata, &err);
        }
    }
    for (int step = 0; ok && step < 3; step++) {
        for (int32_t L = 0; ok && L < 2; L++) {
            for (int64_t b = 0; ok && b < 4; b++) {
                kvt_kv_view view;
                ok = !kv->ops->acquire(kv, 0, L, 0, b, &view, &err);
                kvt_kv_paged_drain(kv);
                if (ok) kv->ops->release(kv, 0, L, 0, b);
            }
        }
    }
    kvt_kv_stats st = {0};
    if (kv) kvt_kv_get_stats(kv, &st);
    kvt_kv_free(kv);
    ok = ok && sv.n == kv_v.n && !memcmp(sv.v, kv_v.v, (size_t)sv.n * sizeof sv.v[0]) && sim_miss == st.misses &&
         st.prefetches > 0 && sv.n > 3;
    char a[600], b[600];
    victims_str(&sv, a, sizeof a);
    victims_str(&kv_v, b, sizeof b);
    test_result(ok, "sim: lfu with the store's copy-engine prefetch: the same victims, in order, and the same misses "
                    "as the paged store on one trace (2 layers, 8 blocks, fast tier of 5, prefetch 3)",
                "%s; simulator victims %s, %lld misses; store victims %s, %lld misses, %lld prefetches", err.msg, a,
                (long long)sim_miss, b, (long long)st.misses, (long long)st.prefetches);
}

// The shared decisions on hand-made inputs whose answers are known (kv_victim.h, kv_prefetch.h, sched_policy.h).
typedef struct {
    const kvt_victim_cand *c;
    const kvt_evict_info *inf;
} hand;
static int64_t info_calls;
static void hand_cand(void *ud, int64_t k, kvt_victim_cand *out) { *out = ((const hand *)ud)->c[k]; }
static void hand_info(void *ud, int64_t id, kvt_evict_info *out) {
    info_calls++;
    *out = ((const hand *)ud)->inf[id];
}
// kvt_victim_pick over the window c[0 .. n), block ids indexing inf
static int64_t hand_pick(const kvt_victim_query *q, const kvt_victim_cand *c, int64_t n, const kvt_evict_info *inf,
                         kvt_victim_trace *tr) {
    hand h = {c, inf};
    return kvt_victim_pick(q, n, hand_cand, hand_info, &h, tr);
}

static void test_shared_rules(void) {
    const kvt_evict_policy *lru = kvt_evict_policy_find("lru"), *spread = kvt_evict_policy_find("spread");
    // last uses: the oldest is block 0, then 1, 2, 3, 4 (now 100)
    kvt_evict_info inf[5] = {{.last_use = 1}, {.last_use = 2}, {.last_use = 3}, {.last_use = 4}, {.last_use = 5}};
    kvt_victim_cand c[5] = {{0, INT64_MAX, 9, 0}, {1, INT64_MAX, 9, KVT_VICTIM_CLEAN}, {2, INT64_MAX, 9, KVT_VICTIM_CLEAN},
                            {3, INT64_MAX, 9, 0}, {4, INT64_MAX, 9, 0}};
    kvt_victim_query q = {.pol = lru, .fast_tier = true, .limit = -1, .xrank = INT64_MAX, .now = 100};
    kvt_victim_trace tr;
    bool ok = kvt_victim_trace_init(&tr, 5);
    // clean first (lru is clean_first): the oldest clean block, 1; only the clean class is scored
    info_calls = 0;
    ok = ok && hand_pick(&q, c, 5, inf, &tr) == 1 && info_calls == 2 && tr.n == 2 && tr.chosen == 0 &&
         kvt_evict_pick(lru, tr.info, tr.n, 100) == tr.chosen;
    // spread is not clean_first in the fast tier: the oldest of all; in a lower tier clean counts for every policy
    q.pol = spread;
    inf[0].next_use = 50;
    ok = ok && hand_pick(&q, c, 5, inf, NULL) == 0;
    q.fast_tier = false;
    inf[1].next_use = 7;
    inf[2].next_use = 8;
    ok = ok && hand_pick(&q, c, 5, inf, NULL) == 2;
    q.pol = lru;
    q.fast_tier = true;
    // a held block never goes; a later plan rank goes before clean and age
    c[1].flags |= KVT_VICTIM_HELD;
    ok = ok && hand_pick(&q, c, 5, inf, NULL) == 2;
    c[0].rank = c[1].rank = c[2].rank = 2; // planned in 2 iterations; 3 and 4 not planned
    ok = ok && hand_pick(&q, c, 5, inf, NULL) == 3;
    // a prefetch of rank 2 needed in 9 steps: only a later rank, or rank 2 needed later than 9 steps
    q.limit = 9;
    q.xrank = 2;
    ok = ok && hand_pick(&q, c, 5, inf, NULL) == 3;
    c[3].flags |= KVT_VICTIM_HELD;
    c[4].flags |= KVT_VICTIM_HELD;
    ok = ok && hand_pick(&q, c, 5, inf, NULL) == -1; // 0 and 2 are needed in 9 steps, no later
    c[2].sched_next = 10;
    ok = ok && hand_pick(&q, c, 5, inf, NULL) == 2;
    // an incoming block competes with the class of the others, last; picked, it is returned
    kvt_victim_cand c2[2] = {{3, INT64_MAX, 0, 0}, {0, INT64_MAX, 0, KVT_VICTIM_INCOMING}};
    q.limit = -1;
    ok = ok && hand_pick(&q, c2, 2, inf, &tr) == 1 && tr.n == 2;
    ok = ok && hand_pick(&q, c2, 1, inf, NULL) == 0 && hand_pick(&q, c2, 0, inf, NULL) == -1;
    ok = ok && hand_pick(&q, c, 6, inf, &tr) == -2; // more candidates than the trace holds
    kvt_victim_trace_free(&tr);
    // the window: 4 of 10 from position 8 wraps and moves on; all of 3
    int64_t pos = 8, start = -1;
    ok = ok && kvt_victim_window(10, 4, &pos, &start) == 4 && start == 8 && pos == 2;
    ok = ok && kvt_victim_window(3, 4, &pos, &start) == 3 && start == 0 && pos == 2;
    ok = ok && kvt_victim_clean(true, true, true, false, false, false) == false &&
         kvt_victim_clean(true, true, true, false, true, false) == true && kvt_victim_clean(true, true, false, true, false, true) == false &&
         kvt_victim_clean(false, true, false, false, false, true) == true;
    // the schedule distance against its definition, ((key - cursor) mod cycle + cycle) mod cycle
    for (int64_t key = -25; ok && key < 25; key++)
        for (int64_t cur = -25; ok && cur < 25; cur++) ok = kvt_sched_distance(key, cur, 7) == ((key - cur) % 7 + 7) % 7;
    // the plan: runs 5, 6 and swapped 9 over 3 iterations; ranks by first appearance, a new iteration at a repeat
    int32_t plan[9] = {5, 6, 9};
    const int32_t want[8] = {5, 6, 5, 6, 9, 5, 6, 9};
    ok = ok && kvt_sched_policy_plan(plan, 2, 1, 3) == 8 && !memcmp(plan, want, sizeof want) &&
         kvt_sched_policy_plan(plan, 2, 1, 1) == 2 && kvt_sched_policy_plan(plan, 0, 1, 3) == 0;
    int64_t seen[10], rank[10];
    int32_t order[10];
    ok = ok && kvt_plan_ranks(want, 8, 10, NULL, NULL, seen, rank, order) == 3 && rank[5] == 0 && rank[6] == 0 &&
         rank[9] == 1 && rank[0] == INT64_MAX && order[0] == 5 && order[1] == 6 && order[2] == 9;
    // the one-pass search (no trace) against the two-pass one (with a trace) on random windows: the same victim
    uint64_t rs = 12345;
    kvt_evict_info rinf[24];
    kvt_victim_cand rc[24];
    kvt_victim_trace rtr;
    ok = ok && kvt_victim_trace_init(&rtr, 24);
    const char *pols[3] = {"lru", "lfu", "spread"};
    for (int it = 0; ok && it < 20000; it++) {
        const int64_t n = (int64_t)(rs % 24);
        for (int64_t i = 0; i < n; i++) {
            rs = rs * 6364136223846793005ull + 1442695040888963407ull;
            const uint64_t r = rs >> 16;
            rinf[i] = (kvt_evict_info){.last_use = r % 7, .uses = (r >> 3) % 3, .next_use = (int64_t)((r >> 5) % 9),
                                       .shard_blocks = 4, .index = (int64_t)((r >> 9) % 4)};
            rc[i] = (kvt_victim_cand){.id = i, .rank = (r >> 11) % 4 == 3 ? INT64_MAX : (int64_t)((r >> 11) % 4),
                                      .sched_next = (int64_t)((r >> 13) % 9),
                                      .flags = ((r >> 17) % 5 == 0 ? KVT_VICTIM_HELD : 0u) |
                                               ((r >> 20) % 2 ? KVT_VICTIM_CLEAN : 0u) |
                                               (i == n - 1 && (r >> 22) % 3 == 0 ? KVT_VICTIM_INCOMING : 0u)};
        }
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t r = rs >> 16;
        kvt_victim_query rq = {.pol = kvt_evict_policy_find(pols[r % 3]), .fast_tier = (r >> 2) % 2,
                               .limit = (r >> 3) % 3 == 0 ? -1 : (r >> 3) % 3 == 1 ? (int64_t)((r >> 5) % 9) : INT64_MAX,
                               .xrank = (r >> 9) % 3 == 2 ? INT64_MAX : (int64_t)((r >> 9) % 3), .now = 10,
                               .none_clean = (r >> 12) % 4 == 0};
        const int64_t a = hand_pick(&rq, rc, n, rinf, NULL), b = hand_pick(&rq, rc, n, rinf, &rtr);
        ok = a == b;
    }
    kvt_victim_trace_free(&rtr);
    test_result(ok, "sim: the shared victim search (rank, held, clean first, prefetch filter, incoming block, window), "
                    "the schedule distance, the scheduler's plan and its ranks on hand-made inputs; the one-pass search = the "
                    "two-pass one on 20000 random windows", "wrong answer");
}

// --- the store and the simulator on one trace, for each policy --------------------------------------------------

// The simulator's trace (kvt_sim_config.on_trace / on_plan) replayed through a paged store as it happens: a block
// created is appended (its positions, all of them), a read is an acquire, a drain of the copy engine and a release,
// a finished request is truncated to nothing, a plan is published (kvt_kv_paged_set_plan) and its prefetches
// drained. With attn the simulator's attention masses go to the store too (kvt_kv_paged_attn_mass, before the read:
// the simulator's EMA changes when the read happens, before the copy engine's prefetches of that read decide), and
// attn-ema's prefetch after a layer's last read (KVT_SIM_TRACE_ATTN: kvt_kv_paged_attn_prefetch with the simulator's
// share, then a drain).
typedef struct {
    kvt_kv *kv;
    int64_t bt;
    bool attn, ok;
    int64_t events;
    kvt_err err;
} replay;

static void replay_trace(void *ud, int kind, int64_t req, int32_t layer, int64_t idx, double mass) {
    replay *r = ud;
    static const float zeros[4 * 64] = {0}; // up to 64 positions x 4 dims
    if (!r->ok) return;
    r->events++;
    kvt_kv *kv = r->kv;
    const int32_t seq = (int32_t)req;
    if (kind == KVT_SIM_TRACE_NEW) {
        r->ok = !kv->ops->append(kv, seq, layer, idx * r->bt, r->bt, zeros, zeros, &r->err);
        // a new block's EMA in the simulator is its first mass; the store's starts at 0 and takes half of each
        const float m = (float)(2 * mass);
        if (r->ok && r->attn) kvt_kv_paged_attn_mass(kv, seq, layer, 0, idx, &m, 1);
    } else if (kind == KVT_SIM_TRACE_READ) {
        const float m = (float)mass;
        if (r->attn) kvt_kv_paged_attn_mass(kv, seq, layer, 0, idx, &m, 1);
        kvt_kv_view view;
        r->ok = !kv->ops->acquire(kv, seq, layer, 0, idx, &view, &r->err);
        kvt_kv_paged_drain(kv);
        if (r->ok) kv->ops->release(kv, seq, layer, 0, idx);
    } else if (kind == KVT_SIM_TRACE_FREE) {
        kv->ops->truncate(kv, seq, 0);
    } else if (kind == KVT_SIM_TRACE_ATTN) {
        kvt_kv_paged_attn_prefetch(kv, seq, layer, 0, 0, idx + 1, mass);
        kvt_kv_paged_drain(kv);
    }
}

static void replay_plan(void *ud, const int32_t *reqs, int64_t n) {
    replay *r = ud;
    if (!r->ok) return;
    r->events++;
    kvt_kv_paged_set_plan(r->kv, reqs, n);
    kvt_kv_paged_drain(r->kv);
}

// A scheduler whose plan ranks the two requests apart: the first iteration prefills both, then they decode in turn
// (request 0, 1, 0, 1, ...), the other paused; so the plan (the next iterations' batches) holds only the one that
// runs, and the other's blocks rank after it.
static int64_t alternate_sched(const kvt_sim_sched_view *v, kvt_sim_batch *b, void *ud) {
    int64_t *turn = ud;
    b->n_swap_out = b->n_swap_in = b->n_admit = 0;
    if (v->n_waiting > 0) {
        for (int64_t i = 0; i < v->n_waiting; i++) {
            b->ids[i] = v->waiting[i];
            b->tokens[i] = v->reqs[v->waiting[i]].prompt;
        }
        return v->n_waiting;
    }
    if (v->n_running == 0) return 0;
    b->ids[0] = v->running[(*turn)++ % v->n_running];
    b->tokens[0] = 1;
    return 1;
}

// For lru, lfu, attn-ema and the plan (lru under the scheduler's plan of 2 iterations), the simulator and the paged
// store on one trace: two requests of 13 prompt and 4 generated tokens, blocks of 4 positions over 2 layers (16
// blocks), a fast tier of 9 blocks searched in windows of 4, an unbounded host tier, the store's copy-engine prefetch of 3 by one copy
// thread, every copy done before the next read (1 ns against 125 ms of compute; the store drained after each
// read). The simulator's trace is replayed through the store as it runs; every fast-tier victim of both, in order,
// and the reads that missed must be the same. The victims come from one rule (kv_victim.h) fed by each side's own
// bookkeeping, so a change to the rule, to the policy inputs or to the plan on one side alone shows here.
static void test_store_same_victims(void) {
    static const char *const names[] = {"lru", "lfu", "attn-ema", "plan"};
    bool all = true;
    char msg[2400] = "";
    for (int pi = 0; pi < 4; pi++) {
        const bool plan = pi == 3;
        const char *pol = plan ? "lru" : names[pi];
        victim_list sv = {0}, kv_v = {0};
        int64_t turn = 0;
        kvt_sim_config c;
        kvt_kv_paged_params p;
        trace_configs(&c, &p, 2, 9, pol, &sv, &kv_v);
        c.victim_window = p.victim_window = 4; // windows of 4 of the 9 resident blocks: the moving window decides too
        if (plan) {
            c.plan_iters = 2;
            c.sched = alternate_sched;
            c.sched_ud = &turn;
        }
        replay rp = {.bt = 4, .attn = !strcmp(pol, "attn-ema"), .ok = true};
        int32_t seq1 = -1;
        bool ok = !kvt_kv_paged_init(&p, &rp.kv, &rp.err) && !rp.kv->ops->seq_fork(rp.kv, 0, &seq1, &rp.err) && seq1 == 1;
        c.on_trace = replay_trace;
        c.on_plan = plan ? replay_plan : NULL;
        c.on_trace_ud = &rp;
        kvt_sim_result r = {0};
        kvt_err err = {0};
        ok = ok && !kvt_sim_run(&c, &r, &err) && rp.ok && r.reads == 48 && r.n_done == 2;
        const int64_t sim_miss = ok ? r.reads - (int64_t)llround(r.hit_rate * (double)r.reads) : -1;
        kvt_kv_stats st = {0};
        if (rp.kv) kvt_kv_get_stats(rp.kv, &st);
        kvt_kv_free(rp.kv);
        // the plan: the simulator reads an iteration's first block at its start, where a planned load that began then
        // is still in flight (a miss); the replay drains the plan's loads first: at most one more miss per iteration
        const bool misses = plan ? sim_miss >= st.misses && sim_miss <= st.misses + (int64_t)r.iterations : sim_miss == st.misses;
        ok = ok && sv.n == kv_v.n && !memcmp(sv.v, kv_v.v, (size_t)sv.n * sizeof sv.v[0]) && misses && st.prefetches > 0 &&
             sv.n > 8;
        if (ok && plan) { // the plan decides: without it the same schedule gives other victims
            victim_list nv = {0};
            c.plan_iters = 0;
            c.on_trace = NULL;
            c.on_plan = NULL;
            c.on_pick_ud = &nv;
            turn = 0;
            kvt_sim_result r0;
            ok = !kvt_sim_run(&c, &r0, &err) && (nv.n != sv.n || memcmp(nv.v, sv.v, (size_t)sv.n * sizeof sv.v[0]));
            kvt_sim_result_free(&r0);
        }
        kvt_sim_result_free(&r);
        if (!ok && all) {
            char a[600], b[600];
            victims_str(&sv, a, sizeof a);
            victims_str(&kv_v, b, sizeof b);
            snprintf(msg, sizeof msg, "%s: %s%s; simulator victims %s, %lld misses; store victims %s, %lld misses, %lld "
                     "prefetches", names[pi], err.msg, rp.err.msg, a, (long long)sim_miss, b, (long long)st.misses,
                     (long long)st.prefetches);
        }
        all = all && ok;
    }
    test_result(all, "sim: lru, lfu, attn-ema and the scheduler's plan: the simulator's victims, in order, and misses are "
                     "the paged store's on the same trace (2 requests, 2 layers, 16 blocks, fast tier of 9, windows of 4, prefetch 3)",
                "%s", msg);
}

static bool same_result(const kvt_sim_result *a, const kvt_sim_result *b) {
    return a->tpot_ms_mean == b->tpot_ms_mean && a->tpot_ms_p95 == b->tpot_ms_p95 && a->moved_bytes == b->moved_bytes &&
           a->transfers == b->transfers && a->reads == b->reads && a->hit_rate == b->hit_rate;
}

static void test_determinism(void) {
    kvt_sim_config c;
    small_config(&c, "lookahead", 2.0);
    kvt_sim_result r1, r2, r3;
    kvt_err err = {0};
    bool ok = !kvt_sim_run(&c, &r1, &err) && !kvt_sim_run(&c, &r2, &err);
    c.seed = 2;
    ok = ok && !kvt_sim_run(&c, &r3, &err);
    ok = ok && same_result(&r1, &r2) && !same_result(&r1, &r3);
    test_result(ok, "sim: a seed gives the same run twice, another seed another run", "%s", err.msg);
    kvt_sim_result_free(&r1);
    kvt_sim_result_free(&r2);
    kvt_sim_result_free(&r3);
}

// Known answers of whole runs: a fast tier larger than any footprint never stalls (TPOT = the iteration,
// nothing moves); a tiny host tier sends blocks to SSD and back (two hops) and the run still ends.
static void test_runs(void) {
    kvt_sim_config c;
    small_config(&c, "lru", 0.3);
    kvt_sim_result r;
    kvt_err err = {0};
    bool ok = !kvt_sim_run(&c, &r, &err);
    ok = ok && r.hit_rate == 1.0 && r.moved_bytes == 0 && fabs(r.tpot_ms_mean - 4.0) < 1e-9 && r.n_done == 48;
    char msg[256];
    snprintf(msg, sizeof msg, "fits: hit %.3f moved %.0f tpot %.4f (%.100s)", r.hit_rate, r.moved_bytes, r.tpot_ms_mean, err.msg);
    kvt_sim_result_free(&r);
    small_config(&c, "lookahead", 3.0);
    c.host_blocks = 40;
    kvt_sim_result s;
    bool ok2 = !kvt_sim_run(&c, &s, &err) && s.n_done == 48 && s.tpot_ms_mean > 4.0;
    if (ok && !ok2) snprintf(msg, sizeof msg, "ssd: %.200s", err.msg);
    kvt_sim_result_free(&s);
    // a broken scheduler is named
    small_config(&c, "lru", 2.0);
    c.sched = NULL;
    c.max_batch = 0;
    bool ok3 = kvt_sim_run(&c, &s, &err) == KVT_ERR_INVALID_ARG && strstr(err.msg, "max_batch");
    test_result(ok && ok2 && ok3, "sim: no oversubscription: TPOT is the 4.0 ms iteration, nothing moves; SSD tier runs",
                "%s", msg);
}

// The serving scheduler's decisions (kvt_sim_sched_kvtier over sched_policy.c): without oversubscription TPOT is
// still the 4.0 ms iteration (prompt chunks add iterations, never time to a decoding request's); a small budget
// takes more iterations; with fast + host too small for the running requests it preempts and resumes every
// preempted request, the run ends and every eviction is still kvt_evict_pick's.
static void test_kvtier_sched(void) {
    kvt_sim_kvtier_sched ks;
    kvt_sim_kvtier_sched_init(&ks);
    kvt_sim_config c;
    small_config(&c, "lookahead", 0.3);
    c.sched = kvt_sim_sched_kvtier;
    c.sched_ud = &ks;
    kvt_sim_result r = {0}, r9 = {0}, s = {0};
    kvt_err err = {0};
    char msg[320] = "";
    bool ok = !kvt_sim_run(&c, &r, &err) && r.n_done == 48 && fabs(r.tpot_ms_mean - 4.0) < 1e-9 && r.hit_rate == 1.0 &&
              r.moved_bytes == 0 && r.preemptions == 0;
    snprintf(msg, sizeof msg, "fits: done %lld tpot %.4f hit %.3f moved %.0f (%.100s)", (long long)r.n_done, r.tpot_ms_mean,
             r.hit_rate, r.moved_bytes, err.msg);
    ks.token_budget = 9; // max_batch + 1: one prompt token per iteration beside a full batch of decodes
    ok = ok && !kvt_sim_run(&c, &r9, &err) && r9.n_done == 48 && r9.iterations > r.iterations && fabs(r9.tpot_ms_mean - 4.0) < 1e-9;
    if (!*msg || ok) snprintf(msg, sizeof msg, "budget 9: %lld iterations vs %lld (%.100s)", (long long)r9.iterations,
                              (long long)r.iterations, err.msg);
    ks.token_budget = 512;
    small_config(&c, "lru", 3.0);
    c.sched = kvt_sim_sched_kvtier;
    c.sched_ud = &ks;
    c.host_blocks = 30;
    pick_check pc = {kvt_evict_policy_find("lru"), 0, 0};
    c.on_pick = on_pick;
    c.on_pick_ud = &pc;
    const bool ok2 = !kvt_sim_run(&c, &s, &err) && s.n_done == 48 && s.preemptions > 0 && s.resumes == s.preemptions &&
                     s.tpot_ms_mean > 4.0 && pc.n > 0 && pc.mismatched == 0;
    if (ok && !ok2)
        snprintf(msg, sizeof msg, "preempt: done %lld, %lld preemptions, %lld resumes, tpot %.2f, %lld picks %lld differ (%.100s)",
                 (long long)s.n_done, (long long)s.preemptions, (long long)s.resumes, s.tpot_ms_mean, (long long)pc.n,
                 (long long)pc.mismatched, err.msg);
    kvt_sim_result_free(&r);
    kvt_sim_result_free(&r9);
    kvt_sim_result_free(&s);
    kvt_sim_kvtier_sched_free(&ks);
    test_result(ok && ok2, "sim: --sched kvtier (sched_policy.c): 4.0 ms TPOT without oversubscription, more iterations "
                           "under a small token budget; preemption by swap under a small host tier, every request resumed",
                "%s", msg);
}

// A real run's set-up (sim_validate.sh): fixed lengths, every request at t = 0, an iteration of iter_ms +
// per-sequence + per-position terms and prefill per token. 4 requests of 64 + 9 tokens, batch 4, everything
// fits: the first iteration prefills the 4 prompts (256 x 0.5 ms + 10 ms, no decode), then 8 decode iterations of
// 10 + (4 - 1) x 1 + 0.002 x 4 x (64 + g) ms for g = 1..8, so TPOT = 13 + 0.008 x 68.5 = 13.548 ms for every request.
// Copies on the compute cores: with the fast tier at 1/3 of the KV, a prefetching policy's run is no shorter than
// its compute plus the time copies ran (no overlap), where a separate link overlaps them.
static void test_fixed_burst_copies(void) {
    kvt_sim_config c;
    fixed_burst_config(&c, 64, 9, 4);
    c.rho = 0.5;
    c.iter_ms = 10;
    c.iter_ms_per_seq = 1;
    c.iter_us_per_ctx = 2;
    c.prefill_ms_per_tok = 0.5;
    kvt_sim_kvtier_sched ks;
    kvt_sim_kvtier_sched_init(&ks);
    c.sched = kvt_sim_sched_kvtier;
    c.sched_ud = &ks;
    kvt_sim_result r = {0}, on = {0}, off = {0};
    kvt_err err = {0};
    char msg[320] = "";
    bool ok = !kvt_sim_run(&c, &r, &err) && r.n_done == 4 && r.iterations == 9 && r.moved_bytes == 0 &&
              fabs(r.tpot_ms_mean - 13.548) < 1e-9 && fabs(r.tpot_ms_p95 - 13.548) < 1e-9 &&
              fabs(r.sim_s - (0.138 + 8 * 0.013548)) < 1e-9;
    snprintf(msg, sizeof msg, "fixed: done %lld, %lld iterations, tpot %.6f / %.6f, end %.6f s (%.100s)", (long long)r.n_done,
             (long long)r.iterations, r.tpot_ms_mean, r.tpot_ms_p95, r.sim_s, err.msg);
    // copies: constant 4 ms iterations, no prefill time, fast tier at 1/3
    c.fixed_prompt = 256;
    c.fixed_out = 32;
    c.n_requests = 8;
    c.max_batch = 8;
    c.rho = 3;
    c.iter_ms_per_seq = c.iter_us_per_ctx = c.prefill_ms_per_tok = 0;
    c.iter_ms = 4;
    c.policy = "lookahead";
    c.h2d_gbps = c.d2h_gbps = 4;
    c.copy_on_compute = true;
    bool ok2 = !kvt_sim_run(&c, &on, &err);
    c.copy_on_compute = false;
    ok2 = ok2 && !kvt_sim_run(&c, &off, &err);
    const double comp_on = (double)on.iterations * 4e-3, comp_off = (double)off.iterations * 4e-3;
    ok2 = ok2 && on.n_done == 8 && off.n_done == 8 && on.copy_s > 0 && on.sim_s >= comp_on + on.copy_s - 1e-9 &&
          off.sim_s < comp_off + off.copy_s && on.tpot_ms_mean > off.tpot_ms_mean;
    if (ok && !ok2)
        snprintf(msg, sizeof msg, "copies: on %.4f s (compute %.4f + copies %.4f), off %.4f s (%.4f + %.4f); tpot %.3f / %.3f (%.80s)",
                 on.sim_s, comp_on, on.copy_s, off.sim_s, comp_off, off.copy_s, on.tpot_ms_mean, off.tpot_ms_mean, err.msg);
    kvt_sim_result_free(&r);
    kvt_sim_result_free(&on);
    kvt_sim_result_free(&off);
    kvt_sim_kvtier_sched_free(&ks);
    test_result(ok && ok2, "sim: fixed lengths arriving together, iteration = base + per sequence + per position, prefill per "
                           "token (known TPOT 13.548 ms); copies on the compute cores do not overlap compute",
                "%s", msg);
}

// profiles/tierkv-h100.json is the paper's machine (Table 3, Appendix A); without sim_iter_ms the iteration
// comes from the planner's roofline for the shape on the profile's GPU.
static void test_profile(void) {
    const char *path = "profiles/tierkv-h100.json";
    if (!test_file_exists(path)) {
        test_skip("sim: profiles/tierkv-h100.json", "not found (run from the repo root)");
        return;
    }
    kvt_err err = {0};
    kvt_profile p;
    size_t len;
    char *text = test_read_file(path, &len);
    kvt_costs costs = {0};
    bool ok = text && !kvt_profile_parse(text, &p, &err) &&
              !kvt_costs_from_shape(kvt_shape_find("llama2-7b"), KVT_TYPE_F16, &costs, &err);
    kvt_sim_config c;
    kvt_sim_config_default(&c);
    c.block_bytes = ok ? kvt_sim_block_bytes(&costs.hp, 16) : 0;
    ok = ok && c.block_bytes == 8 << 20 && !kvt_sim_config_from_profile(&c, &p, text, &err);
    ok = ok && c.h2d_gbps == 64 && c.d2h_gbps == 64 && c.h2d_latency_us == 1 && c.ssd_read_gbps == 7 &&
         c.ssd_latency_us == 10 && c.iter_ms == 4.0 && c.prefill_ms_per_tok == 0 && c.host_blocks == 512000000000 / (8 << 20) &&
         p.vram_bytes == 80000000000 && p.gpu_mem_gbps == 3350;
    // the cost-model path: TPOT without oversubscription is the roofline's decode step (weights + KV reads)
    double lo = 0, hi = 0;
    if (ok) {
        c.iter_ms = 0;
        c.costs = &costs;
        c.workload = KVT_WL_UNIFORM;
        c.n_requests = 24;
        c.max_batch = 8;
        c.rho = 0.5;
        c.policy = "lru";
        kvt_sim_result r;
        lo = kvt_stage_decode_ms(&costs, 0, costs.n_units, &c.device, 1, 512);
        hi = kvt_stage_decode_ms(&costs, 0, costs.n_units, &c.device, 8, 640);
        ok = !kvt_sim_run(&c, &r, &err) && r.tpot_ms_mean >= lo && r.tpot_ms_mean <= hi && r.hit_rate == 1.0 && lo > 3.5;
        kvt_sim_result_free(&r);
    }
    kvt_costs_free(&costs);
    free(text);
    test_result(ok, "sim: profiles/tierkv-h100.json is tierkv.txt's machine; the cost model gives the iteration without sim_iter_ms",
                "%.200s (roofline %.2f-%.2f ms)", err.msg, lo, hi);
}

// sim_copy_lanes (a CPU profile's sim_* keys): copies run on that many compute threads at once, so the one copy
// link runs at lanes x sim_copy_gbps with sim_copy_block_us / lanes per block; absent, 1.
static void test_copy_lanes(void) {
    const char *path = "profiles/xeon-avx512-2vcpu.json";
    if (!test_file_exists(path)) {
        test_skip("sim: sim_copy_lanes", "profiles/xeon-avx512-2vcpu.json not found (run from the repo root)");
        return;
    }
    kvt_err err = {0};
    kvt_profile p;
    size_t len;
    char *text = test_read_file(path, &len);
    bool ok = text && !kvt_profile_parse(text, &p, &err) && !p.has_gpu;
    kvt_sim_config a, b;
    kvt_sim_config_default(&a);
    kvt_sim_config_default(&b);
    ok = ok && !kvt_sim_config_from_profile(&a, &p, "{\"sim_copy_gbps\": 3.0, \"sim_copy_block_us\": 2.0}", &err) &&
         !kvt_sim_config_from_profile(&b, &p, "{\"sim_copy_gbps\": 3.0, \"sim_copy_block_us\": 2.0, \"sim_copy_lanes\": 2}",
                                      &err);
    ok = ok && a.copy_on_compute && b.copy_on_compute && a.h2d_gbps == 3.0 && a.d2h_gbps == 3.0 &&
         a.h2d_latency_us == 2.0 && b.h2d_gbps == 6.0 && b.d2h_gbps == 6.0 && b.h2d_latency_us == 1.0 &&
         b.d2h_latency_us == 1.0;
    free(text);
    test_result(ok, "sim: sim_copy_lanes runs the CPU copy link at lanes x sim_copy_gbps (1 without it)", "%.200s", err.msg);
}

static void test_cli(const test_env *env) {
    if (!test_file_exists(env->cli) || !test_file_exists("profiles/tierkv-h100.json")) {
        test_skip("sim: kvtier sim CLI forms", "build/kvtier or profiles/tierkv-h100.json missing");
        return;
    }
    static const char *pols[] = {"lru", "lfu", "attn-ema", "static", "lookahead", "oracle"};
    static const char *wls[] = {"uniform", "chat", "code", "summarization", "mixed"};
    char cmd[1024], *out = malloc(1 << 16);
    bool ok = out != NULL;
    char msg[256] = "";
    for (int i = 0; ok && i < 6; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s sim --profile profiles/tierkv-h100.json --shape llama2-7b --workload %s --rho 2.5 --policy %s "
                 "--seeds 2 --json --requests 6 --batch 4 2>&1",
                 env->cli, wls[i % 5], pols[i]);
        int rc = test_run(cmd, out, 1 << 16);
        const char *keys[] = {"\"tpot_ms_mean\"", "\"tpot_ms_p95\"", "\"throughput_tok_s\"", "\"hit_rate\"", "\"moved_bytes\""};
        const char *nl = strchr(out, '\n'); // one line holding one object (per_seed's objects inside it), then blank
        bool one = rc == 0 && out[0] == '{' && nl && nl > out && nl[-1] == '}' && strspn(nl, "\n") == strlen(nl) &&
                   strstr(out, "\"per_seed\":[{\"seed\":1,") && strstr(out, "},{\"seed\":2,");
        for (int k = 0; k < 5; k++) one = one && strstr(out, keys[k]);
        if (!one) snprintf(msg, sizeof msg, "rc %d: %.200s", rc, out);
        ok = one;
    }
    snprintf(cmd, sizeof cmd, "%s sim --profile profiles/tierkv-h100.json --shape llama2-7b --workload chat --rho 2 "
             "--policy belady --seeds 1 >/dev/null 2>&1", env->cli);
    ok = ok && test_run(cmd, out, 1 << 16) == 2;
    // --sched: kvtier (the default) reports its scheduler; fcfs prints what it printed before; anything else exits 2
    snprintf(cmd, sizeof cmd, "%s sim --workload chat --rho 2 --seeds 1 --requests 8 --batch 4 --json --token-budget 64 "
             "--no-preempt 2>&1", env->cli);
    if (ok) {
        int rc = test_run(cmd, out, 1 << 16);
        ok = rc == 0 && strstr(out, "\"sched\":\"kvtier\"") && strstr(out, "\"token_budget\":64") &&
             strstr(out, "\"preempt\":false") && strstr(out, "\"preemptions\":0");
        if (!ok) snprintf(msg, sizeof msg, "--sched kvtier rc %d: %.200s", rc, out);
    }
    snprintf(cmd, sizeof cmd, "%s sim --workload chat --rho 2 --seeds 1 --requests 8 --batch 4 --json --sched fcfs 2>&1", env->cli);
    if (ok) {
        int rc = test_run(cmd, out, 1 << 16);
        ok = rc == 0 && strstr(out, "\"tpot_ms_mean\"") && !strstr(out, "\"sched\"");
        if (!ok) snprintf(msg, sizeof msg, "--sched fcfs rc %d: %.200s", rc, out);
    }
    snprintf(cmd, sizeof cmd, "%s sim --sched sjf --seeds 1 >/dev/null 2>&1", env->cli);
    ok = ok && test_run(cmd, out, 1 << 16) == 2;
    // a real run's set-up on this machine's CPU profile (sim_validate.sh): fixed lengths at t = 0, capacities in bytes
    // (whole blocks: 50 MB / 1.47 MB = 33); the store's clean rule (ssd) leaves LRU the cyclic scan's misses
    if (ok && test_file_exists("profiles/xeon-avx512-2vcpu.json")) {
        double hit[2] = {0, 0};
        static const char *rule[2] = {"host", "ssd"};
        for (int k = 0; ok && k < 2; k++) {
            snprintf(cmd, sizeof cmd, "%s sim --profile profiles/xeon-avx512-2vcpu.json --shape smollm2-135m --workload fixed "
                     "--prompt 512 --gen 32 --requests 8 --batch 8 --burst --block 64 --fast-bytes 50000000 --host-bytes "
                     "200000000 --policy lru --clean-below %s --seeds 1 --json 2>&1", env->cli, rule[k]);
            int rc = test_run(cmd, out, 1 << 16);
            const char *h = strstr(out, "\"hit_rate\":");
            ok = rc == 0 && h && strstr(out, "\"fast_blocks\":33,") && strstr(out, "\"workload\":\"fixed\"");
            if (ok) hit[k] = atof(h + 11);
            if (!ok) snprintf(msg, sizeof msg, "fixed --clean-below %s rc %d: %.200s", rule[k], rc, out);
        }
        if (ok && !(hit[1] < 0.1 && hit[0] > 0.3)) {
            snprintf(msg, sizeof msg, "lru hit rate %.3f with --clean-below host, %.3f with ssd", hit[0], hit[1]);
            ok = false;
        }
        snprintf(cmd, sizeof cmd, "%s sim --clean-below disk --seeds 1 >/dev/null 2>&1", env->cli);
        ok = ok && test_run(cmd, out, 1 << 16) == 2;
    }
    snprintf(cmd, sizeof cmd, "%s sim --sweep --policies lru,oracle --rhos 1,3 --seeds 1 --requests 6 --batch 4 "
             "--workload chat 2>/dev/null", env->cli);
    if (ok) {
        int rc = test_run(cmd, out, 1 << 16);
        ok = rc == 0 && strstr(out, "| rho | policy |") && strstr(out, "| 3.0 | oracle |") && strstr(out, "| 1.0 | lru |");
        if (!ok) snprintf(msg, sizeof msg, "sweep rc %d: %.200s", rc, out);
    }
    free(out);
    test_result(ok, "sim: kvtier sim --profile --shape --workload --rho --policy --seeds --json (one object with the "
                    "fields) for every policy and workload; --sched kvtier|fcfs, --token-budget, --no-preempt; --workload "
                    "fixed --burst --fast-bytes --clean-below on a CPU profile; bad policy, scheduler or rule exits 2; "
                    "--sweep writes one table", "%s", msg);
}

// kvt_sim_run_seeds: every figure is one run's mean over the seeds (transfers, reads, iterations and wall_s were
// sums beside moved_bytes' mean before 2026-12-06), each seed's own figures are those of its run alone, and the
// pooled hit rate is reads-weighted.
static void test_seed_means(void) {
    kvt_sim_config c;
    small_config(&c, "lookahead", 3.0);
    c.seed = 7;
    kvt_sim_summary s;
    kvt_err err = {0};
    char msg[KVT_ERR_MSG_MAX + 64] = "";
    bool ok = !kvt_sim_run_seeds(&c, 3, &s, &err) && s.n_seeds == 3 && s.runs;
    if (!ok) snprintf(msg, sizeof msg, "run_seeds: %s", err.msg);
    double sum[6] = {0}, hits = 0;
    for (int k = 0; ok && k < 3; k++) {
        kvt_sim_config ck = c;
        ck.seed = c.seed + (uint64_t)k;
        kvt_sim_result r;
        ok = !kvt_sim_run(&ck, &r, &err);
        const kvt_sim_result *q = &s.runs[k];
        ok = ok && q->transfers == r.transfers && q->reads == r.reads && q->iterations == r.iterations &&
             q->moved_bytes == r.moved_bytes && q->tpot_ms_mean == r.tpot_ms_mean && !q->tpot_ms;
        if (!ok && !msg[0]) snprintf(msg, sizeof msg, "seed %d: its figures differ from its own run's", k);
        sum[0] += (double)r.transfers;
        sum[1] += (double)r.reads;
        sum[2] += (double)r.iterations;
        sum[3] += r.moved_bytes;
        sum[4] += q->wall_s;
        sum[5] += (double)r.preemptions;
        hits += r.hit_rate * (double)r.reads;
        kvt_sim_result_free(&r);
    }
    if (ok && !(near(s.transfers, sum[0] / 3) && near(s.reads, sum[1] / 3) && near(s.iterations, sum[2] / 3) &&
                near(s.moved_bytes, sum[3] / 3) && near(s.wall_s, sum[4] / 3) && near(s.preemptions, sum[5] / 3) &&
                near(s.hit_rate, hits / sum[1]) && s.transfers > 0)) {
        snprintf(msg, sizeof msg, "transfers %.1f reads %.1f iterations %.1f moved %.0f: want the means %.1f %.1f %.1f %.0f",
                 s.transfers, s.reads, s.iterations, s.moved_bytes, sum[0] / 3, sum[1] / 3, sum[2] / 3, sum[3] / 3);
        ok = false;
    }
    kvt_sim_summary_free(&s);
    test_result(ok, "sim: over seeds every figure is the mean per run (transfers, reads, iterations, wall time as moved "
                    "bytes), with each seed's own figures", "%s", msg);
}

// A fast tier below prefetch_depth + 2 blocks is refused by name (it was raised to that silently); from rho it is
// raised, and the result says so.
static void test_fast_min(const test_env *env) {
    kvt_sim_config c;
    small_config(&c, "lookahead", 2.0);
    c.fast_blocks = 5; // prefetch_depth 4: minimum 6
    kvt_sim_result r = {0};
    kvt_err err = {0};
    kvt_status st = kvt_sim_run(&c, &r, &err);
    bool ok = st == KVT_ERR_INVALID_ARG && strstr(err.msg, "fast_blocks 5 below the minimum 6") &&
              strstr(err.msg, "prefetch_depth 4");
    char msg[600] = "";
    if (!ok) snprintf(msg, sizeof msg, "fast_blocks 5: status %d '%s'", (int)st, err.msg);
    for (int k = 0; ok && k < 2; k++) { // fast_blocks 6; rho 1000: ceil(F / rho) = 1 block, raised to 6
        c.fast_blocks = k ? 0 : 6;
        c.rho = k ? 1000 : 2;
        st = kvt_sim_run(&c, &r, &err);
        ok = !st && r.fast_blocks == 6;
        if (!ok) snprintf(msg, sizeof msg, "%s: %s, %lld blocks", k ? "rho 1000" : "fast_blocks 6", st ? err.msg : "ran",
                          st ? 0LL : (long long)r.fast_blocks);
        if (!st) kvt_sim_result_free(&r);
    }
    if (ok && test_file_exists(env->cli)) {
        static const struct {
            const char *args;
            int rc;
            const char *want[3];
        } cases[] = {
            {"--fast-blocks 1", 2, {"--fast-blocks 1 is below the minimum of 6", "--prefetch-depth (4)", NULL}},
            {"--fast-blocks 3 --prefetch-depth 1", 0, {"\"fast_blocks\":3,", NULL, NULL}},
            {"--fast-blocks 3 --prefetch-depth 2", 2, {"--fast-blocks 3 is below the minimum of 4", "--prefetch-depth (2)", NULL}},
            {"--fast-bytes 1000", 2, {"--fast-bytes 1000 holds 0 block(s) of 8388608 bytes, below the minimum of 6",
                                      "(50331648 bytes)", NULL}},
            {"--fast-blocks 6", 0, {"\"fast_blocks\":6,", NULL, NULL}},
        };
        for (size_t i = 0; ok && i < sizeof cases / sizeof cases[0]; i++) {
            char cmd[1024];
            static char out[1 << 14];
            snprintf(cmd, sizeof cmd, "%s sim --workload chat --seeds 1 --requests 8 --batch 4 --json %s 2>&1", env->cli,
                     cases[i].args);
            int rc = test_run(cmd, out, sizeof out);
            ok = rc == cases[i].rc;
            for (int k = 0; ok && k < 3 && cases[i].want[k]; k++) ok = strstr(out, cases[i].want[k]) != NULL;
            if (!ok) snprintf(msg, sizeof msg, "%s: exit %d (want %d): %.400s", cases[i].args, rc, cases[i].rc, out);
        }
    }
    test_result(ok, "sim: a fast tier below --prefetch-depth + 2 blocks is refused by name (--fast-blocks, --fast-bytes, "
                    "kvt_sim_run), not raised silently; from --rho it is raised and fast_blocks says so", "%s", msg);
}

// The number after "key": at or after from, or NAN.
static double json_num_after(const char *from, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = from ? strstr(from, k) : NULL;
    return p ? atof(p + strlen(k)) : NAN;
}

// kvtier sim --json --seeds 3: the top-level counts are the means of per_seed's.
static void test_cli_seeds(const test_env *env) {
    if (!test_file_exists(env->cli)) {
        test_skip("sim: --json --seeds: means and per_seed", "kvtier binary not built");
        return;
    }
    char cmd[1024];
    static char out[1 << 16];
    snprintf(cmd, sizeof cmd, "%s sim --workload chat --rho 2 --seeds 3 --seed 5 --requests 8 --batch 4 --json 2>&1", env->cli);
    int rc = test_run(cmd, out, sizeof out);
    const char *per = strstr(out, "\"per_seed\":[");
    static const char *const keys[] = {"transfers", "reads", "iterations", "moved_bytes", "stall_s", "preemptions"};
    bool ok = rc == 0 && per && json_num_after(per, "seed") == 5;
    char msg[512] = "";
    for (size_t i = 0; ok && i < sizeof keys / sizeof keys[0]; i++) {
        double sum = 0;
        const char *p = per;
        for (int k = 0; k < 3 && p; k++) {
            char key[64];
            snprintf(key, sizeof key, "\"%s\":", keys[i]);
            p = strstr(p, key);
            sum += p ? atof(p + strlen(key)) : NAN;
            if (p) p += strlen(key);
        }
        const double top = json_num_after(out, keys[i]);
        ok = p && fabs(top - sum / 3) <= 1e-6 * (fabs(top) + 1) && (i >= 4 || top > 0);
        if (!ok) snprintf(msg, sizeof msg, "%s: top level %g, per_seed mean %g", keys[i], top, sum / 3);
    }
    if (!ok && !msg[0]) snprintf(msg, sizeof msg, "exit %d: %.300s", rc, out);
    test_result(ok, "sim: --json --seeds 3: transfers, reads, iterations are per-run means as moved_bytes, each seed's "
                    "own in per_seed", "%s", msg);
}

void test_sim(const test_env *env) {
    test_link_sharing();
    test_link_latency();
    test_new_policies();
    test_decisions();
    test_store_prefetch_same();
    test_shared_rules();
    test_store_same_victims();
    test_determinism();
    test_runs();
    test_kvtier_sched();
    test_fixed_burst_copies();
    test_profile();
    test_copy_lanes();
    test_cli(env);
    test_seed_means();
    test_fast_min(env);
    test_cli_seeds(env);
}
