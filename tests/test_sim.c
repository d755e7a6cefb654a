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

// The simulator's candidates carry shard = request x layers + layer (one request here, 2 layers).
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
    fixed_burst_config(&c, 13, 4, 1);
    c.block_tokens = 4;
    c.block_bytes = 64;
    c.layers = 2;
    c.fast_blocks = 5;
    c.iter_ms = 1000;
    c.policy = "lfu";
    c.copy_prefetch = 3;
    c.prefetch_depth = 1;
    c.clean_ssd_only = true;
    c.on_pick = sim_victim;
    c.on_pick_ud = &sv;
    kvt_sim_result r;
    kvt_err err = {0};
    bool ok = !kvt_sim_run(&c, &r, &err) && r.reads == 24;
    const int64_t sim_miss = ok ? r.reads - (int64_t)llround(r.hit_rate * (double)r.reads) : -1;
    kvt_sim_result_free(&r);

    kvt_kv_paged_params p = kvt_kv_paged_params_default();
    p.n_layer = 2;
    p.n_head_kv = 1;
    p.head_dim = p.head_dim_v = 4;
    p.n_ctx = 20; // 5 blocks per shard: the simulator's request holds up to ceil((13 + 4) / 4)
    p.block_tokens = 4;
    p.fast_bytes = 5 * kvt_kv_paged_block_bytes(&p);
    p.host_bytes = -1;
    p.evict = "lfu";
    p.prefetch = 3;
    p.n_io_threads = 1;
    p.on_evict = store_victim;
    p.on_evict_ud = &kv_v;
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
        bool one = rc == 0 && out[0] == '{' && strchr(out, '}') == strrchr(out, '}');
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

void test_sim(const test_env *env) {
    test_link_sharing();
    test_link_latency();
    test_new_policies();
    test_decisions();
    test_store_prefetch_same();
    test_determinism();
    test_runs();
    test_kvtier_sched();
    test_fixed_burst_copies();
    test_profile();
    test_cli(env);
}
